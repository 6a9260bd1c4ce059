// SPDX-License-Identifier: GPL-2.0
/*
 * C glue for probes on ftrace call sites (src/ftrace/): what Rust cannot
 * reach. ftrace_ops structs, ftrace_get_regs(), the recursion-protection
 * inlines, the delayed work and the wait queue.
 *
 * An armed site reaches the engine one of two ways:
 *
 * - direct (x86_64, DYNAMIC_FTRACE_WITH_DIRECT_CALLS): a per-site direct
 *   ftrace_ops makes the site call the engine's trampoline
 *   (kp_x86_ftrace_direct, arch/x86_64/ftrace.rs), which saves a pt_regs
 *   and runs the hit (src/hit.rs, on_ftrace): no ftrace_regs_caller, no
 *   callback, no recursion bits, the cheapest entry there is. When another
 *   ftrace user traces the same function, ftrace runs its callbacks and
 *   then jumps to the trampoline with the same stack. Which site gets one,
 *   the cap and when one goes (parked, then taken down by a worker) are
 *   src/ftrace/direct.rs; here is making and freeing the ops.
 * - shared: the engine's one kp_entry_ops, whose filter holds such sites,
 *   and its callback kp_ftrace_func -> kp_ftrace_hit. Used where a direct
 *   ops cannot be had: the function already has a direct caller (a BPF
 *   trampoline: -EBUSY), the cap is reached, or the arch has no direct
 *   calls.
 *
 * Everything here but the worker and the dying-list mutex runs under the
 * engine's registration lock (kp_helper_reg_lock()).
 */
#include <linux/module.h>
#include <linux/ftrace.h>
#include <linux/delay.h>
#include <linux/hashtable.h>
#include <linux/irqflags.h>
#include <linux/jiffies.h>
#include <linux/list.h>
#include <linux/ptrace.h>
#include <linux/slab.h>
#include <linux/trace_recursion.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

#include "helpers.h"

/* Implemented in src/hit.rs. */
void kp_ftrace_hit(unsigned long ip, struct pt_regs *regs);
/* src/ftrace/direct.rs: the direct sites' worker. */
void kp_direct_reap(void);

bool kp_ftrace_available(void);
int kp_ftrace_shared_arm(unsigned long ip);
int kp_ftrace_shared_disarm(unsigned long ip);
bool kp_direct_available(void);
void *kp_direct_ops_new(unsigned long ip, int *err);
int kp_direct_ops_free(void *ops);
unsigned long kp_direct_park_delay(void);
void kp_direct_reap_later(unsigned long delay);
void kp_direct_reap_stop(void);
void kp_direct_dying_lock(void);
void kp_direct_dying_unlock(void);
void kp_direct_set_reaping(unsigned long ip);
void kp_direct_wait_reaped(struct module *mod);

/* How long a disarmed direct site stays parked before it is taken down. */
#define KP_PARK_DELAY (2 * HZ)

unsigned long kp_direct_park_delay(void)
{
	return KP_PARK_DELAY;
}

/*
 * The worker and what waits for it. kp_dying_mutex guards the dying list
 * (src/ftrace/direct.rs) and kp_reaping_ip, the site the worker is taking
 * down (0: none); kp_reap_wq wakes up who waits for that one to be gone.
 */
static DEFINE_MUTEX(kp_dying_mutex);
static unsigned long kp_reaping_ip;
static DECLARE_WAIT_QUEUE_HEAD(kp_reap_wq);

static void kp_reap_fn(struct work_struct *work)
{
	kp_direct_reap();
}

static DECLARE_DELAYED_WORK(kp_reap_work, kp_reap_fn);

/* A no-op while the worker is pending. */
void kp_direct_reap_later(unsigned long delay)
{
	schedule_delayed_work(&kp_reap_work, delay);
}

/* The worker takes the registration lock: not held here. */
void kp_direct_reap_stop(void)
{
	cancel_delayed_work_sync(&kp_reap_work);
}

void kp_direct_dying_lock(void)
{
	mutex_lock(&kp_dying_mutex);
}

void kp_direct_dying_unlock(void)
{
	mutex_unlock(&kp_dying_mutex);
}

void kp_direct_set_reaping(unsigned long ip)
{
	WRITE_ONCE(kp_reaping_ip, ip);
	if (!ip)
		wake_up_all(&kp_reap_wq);
}

/* Waits until the worker is taking down no site in mod (none at all for
 * NULL). */
void kp_direct_wait_reaped(struct module *mod)
{
	wait_event(kp_reap_wq, ({
		unsigned long ip = READ_ONCE(kp_reaping_ip);

		!ip || (mod && !within_module(ip, mod));
	}));
}

#if defined(CONFIG_DYNAMIC_FTRACE_WITH_REGS) && defined(CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS)
/* arch/x86_64/ftrace.rs */
void kp_x86_ftrace_direct(void);

bool kp_direct_available(void)
{
	return true;
}

/*
 * Sharing the function with an IPMODIFY ops (livepatch, a kernel kprobe
 * with a post handler) is fine: ftrace then runs that ops' callback and
 * jumps to the trampoline with the instruction pointer it chose as the
 * return address; where that is not the probed site + 5 the engine finds
 * no probe and goes there.
 */
static int kp_direct_ops_func(struct ftrace_ops *ops, enum ftrace_ops_cmd cmd)
{
	return 0;
}

/* A direct ops that makes the site at ip call the trampoline, or NULL with
 * *err (-EBUSY: someone else's direct call, or one of ours still dying). */
void *kp_direct_ops_new(unsigned long ip, int *err)
{
	struct ftrace_ops *ops = kzalloc(sizeof(*ops), GFP_KERNEL);
	int ret;

	if (!ops) {
		*err = -ENOMEM;
		return NULL;
	}
	ops->ops_func = kp_direct_ops_func;
	ret = ftrace_set_filter_ip(ops, ip, 0, 0);
	if (!ret) {
		ret = register_ftrace_direct(ops, (unsigned long)kp_x86_ftrace_direct);
		if (ret) {
			/* A failure inside ftrace_startup() may have had the
			 * ops on ftrace's list for a moment, where a CPU in
			 * ftrace_ops_list_func() can still be looking at it. */
			synchronize_rcu_tasks_rude();
			ftrace_free_filter(ops);
		}
	}
	if (ret) {
		kfree(ops);
		*err = ret;
		return NULL;
	}
	return ops;
}

/* Takes the site down (a tasks-RCU wait: no task is in the trampoline for
 * it afterwards) and frees the ops; on failure the ops stays, -errno. */
int kp_direct_ops_free(void *ops)
{
	int ret = unregister_ftrace_direct(ops, (unsigned long)kp_x86_ftrace_direct, true);

	if (!ret)
		kfree(ops);
	return ret;
}
#else
bool kp_direct_available(void)
{
	return false;
}

void *kp_direct_ops_new(unsigned long ip, int *err)
{
	*err = -EOPNOTSUPP;
	return NULL;
}

int kp_direct_ops_free(void *ops)
{
	return -EOPNOTSUPP;
}
#endif /* direct calls */

#if defined(CONFIG_DYNAMIC_FTRACE_WITH_REGS)
/* Full registers at the site: ftrace saves a pt_regs (x86_64). */
#define KP_FTRACE_ENTRIES 1
#define KP_ENTRY_OPS_FLAGS FTRACE_OPS_FL_SAVE_REGS

static void notrace kp_ftrace_func(unsigned long ip, unsigned long parent_ip,
				   struct ftrace_ops *ops,
				   struct ftrace_regs *fregs)
{
	struct pt_regs *regs = ftrace_get_regs(fregs);
	unsigned long flags;
	int bit;

	if (!regs)
		return;
	bit = ftrace_test_recursion_trylock(ip, parent_ip);
	if (bit < 0)
		return;
	/* Handlers run with interrupts off, as on the breakpoint path. */
	local_irq_save(flags);
	kp_ftrace_hit(ip, regs);
	local_irq_restore(flags);
	ftrace_test_recursion_unlock(bit);
}
#elif defined(CONFIG_DYNAMIC_FTRACE_WITH_ARGS)
/*
 * Only the argument registers at the site (arm64 of 6.12: ftrace_regs holds
 * x0-x8, fp, lr, sp and pc). The handlers get a pt_regs the arch fills
 * from them (kp_arch_fregs_to_regs(), which says which registers are
 * valid; the others read 0) and what they change of those goes back; a
 * probe whose handlers need every register (KP_FLAG_FULL_REGS) takes the
 * breakpoint past the patchable entry instead.
 *
 * The pt_regs are per CPU and per nesting level (interrupts are off while
 * one is in use, so only an NMI nests), zero but for what each hit fills
 * in: writing a whole pt_regs on every hit cost as much as the rest of the
 * hit under QEMU's TCG.
 */
#define KP_FTRACE_ENTRIES 1
#define KP_ENTRY_OPS_FLAGS 0
#define KP_ENTRY_REGS_NEST 4

static DEFINE_PER_CPU(struct pt_regs, kp_entry_regs[KP_ENTRY_REGS_NEST]);
static DEFINE_PER_CPU(unsigned int, kp_entry_nest);

/* Deeper than the per-CPU pt_regs go (never seen): one on the stack. */
static noinline void notrace kp_ftrace_hit_stack(unsigned long ip, struct ftrace_regs *fregs,
						 unsigned long flags)
{
	struct pt_regs regs;

	memset(&regs, 0, sizeof(regs));
	kp_arch_fregs_to_regs(fregs, &regs, flags);
	kp_ftrace_hit(ip, &regs);
	kp_arch_regs_to_fregs(&regs, fregs);
}

static void notrace kp_ftrace_func(unsigned long ip, unsigned long parent_ip,
				   struct ftrace_ops *ops,
				   struct ftrace_regs *fregs)
{
	unsigned long flags;
	unsigned int nest;
	int bit;

	bit = ftrace_test_recursion_trylock(ip, parent_ip);
	if (bit < 0)
		return;
	local_irq_save(flags);
	/* Interrupts are off: only an NMI comes in between, and it gives back
	 * what it took before this goes on (the plain per-CPU operations are
	 * enough, and cheaper than the atomic ones). */
	nest = __this_cpu_inc_return(kp_entry_nest) - 1;
	if (likely(nest < KP_ENTRY_REGS_NEST)) {
		struct pt_regs *regs = this_cpu_ptr(&kp_entry_regs[nest]);

		kp_arch_fregs_to_regs(fregs, regs, flags);
		kp_ftrace_hit(ip, regs);
		kp_arch_regs_to_fregs(regs, fregs);
	} else {
		kp_ftrace_hit_stack(ip, fregs, flags);
	}
	__this_cpu_dec(kp_entry_nest);
	local_irq_restore(flags);
	ftrace_test_recursion_unlock(bit);
}
#endif

#ifdef KP_FTRACE_ENTRIES
static struct ftrace_ops kp_entry_ops = {
	.func = kp_ftrace_func,
	.flags = KP_ENTRY_OPS_FLAGS,
};

/* Sites in kp_entry_ops' filter, and whether the ops is registered (it is
 * while there is one, but for a disarm that failed half-way). */
static unsigned int kp_entry_users;
static bool kp_entry_registered;

/* 0: the site calls the engine through the shared ops, or -errno. */
int kp_ftrace_shared_arm(unsigned long ip)
{
	int ret = ftrace_set_filter_ip(&kp_entry_ops, ip, 0, 0);

	if (ret)
		return ret;
	if (!kp_entry_registered) {
		ret = register_ftrace_function(&kp_entry_ops);
		if (ret) {
			ftrace_set_filter_ip(&kp_entry_ops, ip, 1, 0);
			return ret;
		}
		kp_entry_registered = true;
	}
	kp_entry_users++;
	return 0;
}

int kp_ftrace_shared_disarm(unsigned long ip)
{
	int ret;

	/*
	 * Safe to retry after a failure: each step is done once. The last
	 * site unregisters the ops first (no call reaches the engine from
	 * then on), then leaves the filter, which allocates a new hash and
	 * may fail; the count drops only when both are done.
	 */
	if (kp_entry_users == 1 && kp_entry_registered) {
		ret = unregister_ftrace_function(&kp_entry_ops);
		if (ret)
			return ret;
		kp_entry_registered = false;
	}
	ret = ftrace_set_filter_ip(&kp_entry_ops, ip, 1, 0);
	if (ret)
		return ret;
	kp_entry_users--;
	return 0;
}

bool kp_ftrace_available(void)
{
	return true;
}

#else
/* No registers at ftrace sites: entry probes use the breakpoint path. */
bool kp_ftrace_available(void)
{
	return false;
}

int kp_ftrace_shared_arm(unsigned long ip)
{
	return -EOPNOTSUPP;
}

int kp_ftrace_shared_disarm(unsigned long ip)
{
	return -EOPNOTSUPP;
}
#endif
