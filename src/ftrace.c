// SPDX-License-Identifier: GPL-2.0
/*
 * C glue for probes on ftrace call sites (src/ftrace.rs). Built from what
 * Rust cannot reach: ftrace_ops structs, ftrace_get_regs(), the
 * recursion-protection inlines, the hash table and delayed-work macros.
 *
 * An armed site reaches the engine one of two ways:
 *
 * - direct (x86_64, DYNAMIC_FTRACE_WITH_DIRECT_CALLS): a per-site direct
 *   ftrace_ops makes the site call the engine's trampoline
 *   (kp_x86_ftrace_direct, arch/x86_64/ftrace.rs), which saves a pt_regs
 *   and runs the hit (src/hit.rs, on_ftrace): no ftrace_regs_caller, no
 *   callback, no recursion bits, the cheapest entry there is. When another
 *   ftrace user traces the same function, ftrace runs its callbacks and
 *   then jumps to the trampoline with the same stack.
 * - shared: the engine's one kp_entry_ops, whose filter holds such sites,
 *   and its callback kp_ftrace_func -> kp_ftrace_hit. Used where a direct
 *   ops cannot be had: the function already has a direct caller (a BPF
 *   trampoline: -EBUSY), KP_DIRECT_MAX sites are direct already, or the
 *   arch has no direct calls.
 *
 * Taking a direct ops down is slow: ftrace_shutdown() of a dynamic ops
 * waits for tasks-RCU (40-230 ms each in the test VMs). So a disarmed
 * direct site is parked: it keeps calling the trampoline, which finds no
 * probe there and returns, and re-arming it costs nothing; a worker
 * unregisters sites parked for KP_PARK_DELAY, one per run. A module going
 * away and the engine's exit take their parked sites down at once.
 *
 * Every function here but the worker runs under the engine's registration
 * lock (kp_helper_reg_lock()); so do the worker's table changes.
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

int kp_ftrace_arm(unsigned long ip);
int kp_ftrace_disarm(unsigned long ip);
bool kp_ftrace_available(void);
void kp_ftrace_module_going(struct module *mod);
void kp_ftrace_exit(void);
unsigned int kp_ftrace_direct_sites(unsigned int *parked);
int kp_ftrace_release(void);

#if defined(CONFIG_DYNAMIC_FTRACE_WITH_REGS) && defined(CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS)
/* arch/x86_64/ftrace.rs */
void kp_x86_ftrace_direct(void);

/* Direct sites at most (each holds an ftrace_ops and its filter hash, and
 * costs a tasks-RCU wait to take down); more go to the shared ops. */
#define KP_DIRECT_MAX 128
/* How long a disarmed direct site stays parked before it is taken down. */
#define KP_PARK_DELAY (2 * HZ)

struct kp_direct {
	struct ftrace_ops ops;
	struct hlist_node node;		/* kp_direct_table, by ip, until dying */
	struct list_head park;		/* kp_parked (oldest first) or kp_dying */
	unsigned long ip;
	unsigned long parked_at;	/* jiffies */
	bool parked;
};

/* Armed and parked sites (registration lock). */
static DEFINE_HASHTABLE(kp_direct_table, 7);
static LIST_HEAD(kp_parked);
static unsigned int kp_parked_count;
/* Every site until it is freed, dying ones too (the cap). */
static atomic_t kp_direct_count = ATOMIC_INIT(0);

/*
 * Sites out of the table on their way down: the worker unregisters them
 * without the registration lock (a tasks-RCU wait each), so that
 * registrations that touch no ftrace state do not wait for it (ftrace holds
 * its own ftrace_lock and direct_mutex through the wait: an entry probe
 * registered meanwhile waits for that one site). kp_dying_mutex guards the
 * list and kp_reaping_ip, the site being unregistered (0: none); kp_reap_wq
 * wakes up who waits for that one to be gone.
 */
static DEFINE_MUTEX(kp_dying_mutex);
static LIST_HEAD(kp_dying);
static unsigned long kp_reaping_ip;
static DECLARE_WAIT_QUEUE_HEAD(kp_reap_wq);

static void kp_reap_fn(struct work_struct *work);
static DECLARE_DELAYED_WORK(kp_reap_work, kp_reap_fn);

static struct kp_direct *kp_direct_find(unsigned long ip)
{
	struct kp_direct *d;

	hash_for_each_possible(kp_direct_table, d, node, ip)
		if (d->ip == ip)
			return d;
	return NULL;
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

static int kp_direct_new(unsigned long ip)
{
	struct kp_direct *d = kzalloc(sizeof(*d), GFP_KERNEL);
	int ret;

	if (!d)
		return -ENOMEM;
	d->ops.ops_func = kp_direct_ops_func;
	ret = ftrace_set_filter_ip(&d->ops, ip, 0, 0);
	if (!ret) {
		ret = register_ftrace_direct(&d->ops, (unsigned long)kp_x86_ftrace_direct);
		if (ret) {
			/* A failure inside ftrace_startup() may have had the
			 * ops on ftrace's list for a moment, where a CPU in
			 * ftrace_ops_list_func() can still be looking at it. */
			synchronize_rcu_tasks_rude();
			ftrace_free_filter(&d->ops);
		}
	}
	if (ret) {
		kfree(d);
		return ret;
	}
	d->ip = ip;
	INIT_LIST_HEAD(&d->park);
	hash_add(kp_direct_table, &d->node, ip);
	atomic_inc(&kp_direct_count);
	return 0;
}

/* Takes a site that is out of every list down (a tasks-RCU wait: no task
 * is in the trampoline for it afterwards) and frees it. */
static void kp_direct_free(struct kp_direct *d)
{
	unsigned int tries = 0;
	int ret;

	/*
	 * unregister_ftrace_direct() fails only when ftrace is broken (it
	 * disabled itself after a failed text change: -ENODEV) or misused.
	 * The site may then still call kp_x86_ftrace_direct(): the ops'
	 * memory stays (leaked, loudly), and so must this module, or the
	 * site's next call would run freed text. Pinned while it can be;
	 * while unloading (it cannot be pinned any more) unload waits,
	 * retrying, rather than leave.
	 */
	while ((ret = unregister_ftrace_direct(&d->ops, (unsigned long)kp_x86_ftrace_direct,
					       true))) {
		if (try_module_get(THIS_MODULE)) {
			pr_err("kprobes: cannot release the ftrace site %pS: %d; the engine stays loaded for good\n",
			       (void *)d->ip, ret);
			return;
		}
		if (!(tries++ % 60))
			pr_err("kprobes: cannot release the ftrace site %pS while unloading: %d; retrying\n",
			       (void *)d->ip, ret);
		msleep_interruptible(1000);
	}
	atomic_dec(&kp_direct_count);
	kfree(d);
}

/* Moves a parked site out of the table onto the dying list. Registration
 * lock held. */
static void kp_direct_doom(struct kp_direct *d)
{
	hash_del(&d->node);
	kp_parked_count--;
	mutex_lock(&kp_dying_mutex);
	list_move_tail(&d->park, &kp_dying);
	mutex_unlock(&kp_dying_mutex);
}

/* Takes down the dying sites matching mod (every one for NULL) and waits
 * for the one the worker is taking down, if it matches. */
static int kp_dying_drain(struct module *mod)
{
	struct kp_direct *d, *t;
	LIST_HEAD(mine);
	int n = 0;

	mutex_lock(&kp_dying_mutex);
	list_for_each_entry_safe(d, t, &kp_dying, park)
		if (!mod || within_module(d->ip, mod))
			list_move_tail(&d->park, &mine);
	mutex_unlock(&kp_dying_mutex);
	list_for_each_entry_safe(d, t, &mine, park) {
		list_del_init(&d->park);
		kp_direct_free(d);
		n++;
	}
	wait_event(kp_reap_wq, ({
		unsigned long ip = READ_ONCE(kp_reaping_ip);

		!ip || (mod && !within_module(ip, mod));
	}));
	return n;
}

static void kp_reap_fn(struct work_struct *work)
{
	struct kp_direct *d, *t;
	unsigned long next = 0;

	/* Sites parked long enough leave the table. */
	kp_helper_reg_lock();
	list_for_each_entry_safe(d, t, &kp_parked, park) {
		unsigned long due = d->parked_at + KP_PARK_DELAY;

		if (time_before(jiffies, due)) {
			next = due - jiffies;
			break;
		}
		kp_direct_doom(d);
	}
	kp_helper_reg_unlock();
	/* Then go, one at a time, without the registration lock. */
	for (;;) {
		mutex_lock(&kp_dying_mutex);
		d = list_first_entry_or_null(&kp_dying, struct kp_direct, park);
		if (d) {
			list_del_init(&d->park);
			WRITE_ONCE(kp_reaping_ip, d->ip);
		}
		mutex_unlock(&kp_dying_mutex);
		if (!d)
			break;
		kp_direct_free(d);
		WRITE_ONCE(kp_reaping_ip, 0);
		wake_up_all(&kp_reap_wq);
	}
	if (next)
		schedule_delayed_work(&kp_reap_work, next);
}

/* 1: armed as a direct site, 0: not attempted or -EBUSY (use the shared
 * ops), < 0: error. */
static int kp_direct_arm(unsigned long ip)
{
	struct kp_direct *d = kp_direct_find(ip);
	int ret;

	if (d) {
		if (d->parked) {
			list_del_init(&d->park);
			d->parked = false;
			kp_parked_count--;
		}
		return 1;
	}
	if (atomic_read(&kp_direct_count) >= KP_DIRECT_MAX)
		return 0;
	/* -EBUSY: someone else's direct call, or one of ours still dying. */
	ret = kp_direct_new(ip);
	if (ret == -EBUSY)
		return 0;
	return ret ? ret : 1;
}

/* true when ip is a direct site (now parked). */
static bool kp_direct_disarm(unsigned long ip)
{
	struct kp_direct *d = kp_direct_find(ip);

	if (!d)
		return false;
	if (!d->parked) {
		d->parked = true;
		d->parked_at = jiffies;
		list_add_tail(&d->park, &kp_parked);
		kp_parked_count++;
		if (!delayed_work_pending(&kp_reap_work))
			schedule_delayed_work(&kp_reap_work, KP_PARK_DELAY);
	}
	return true;
}

/* Takes down the parked and dying sites in mod (every one for NULL) and
 * returns how many. Registration lock held. */
static int kp_direct_release(struct module *mod)
{
	struct kp_direct *d, *t;

	list_for_each_entry_safe(d, t, &kp_parked, park)
		if (!mod || within_module(d->ip, mod))
			kp_direct_doom(d);
	return kp_dying_drain(mod);
}

/* Stops the worker (it takes the registration lock: not held here). */
static void kp_direct_stop_reaper(void)
{
	cancel_delayed_work_sync(&kp_reap_work);
}

static unsigned int kp_direct_sites(unsigned int *parked)
{
	*parked = kp_parked_count;
	return atomic_read(&kp_direct_count);
}
#else
static inline int kp_direct_arm(unsigned long ip)
{
	return 0;
}

static inline bool kp_direct_disarm(unsigned long ip)
{
	return false;
}

static inline int kp_direct_release(struct module *mod)
{
	return 0;
}

static inline void kp_direct_stop_reaper(void)
{
}

static inline unsigned int kp_direct_sites(unsigned int *parked)
{
	*parked = 0;
	return 0;
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

static int kp_shared_arm(unsigned long ip)
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

static int kp_shared_disarm(unsigned long ip)
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


/* 1: the site calls the engine's trampoline, 0: through the shared ops,
 * < 0: error. */
int kp_ftrace_arm(unsigned long ip)
{
	int ret = kp_direct_arm(ip);

	if (ret)
		return ret;
	return kp_shared_arm(ip);
}

int kp_ftrace_disarm(unsigned long ip)
{
	if (kp_direct_disarm(ip))
		return 0;
	return kp_shared_disarm(ip);
}

#else
/* No registers at ftrace sites: entry probes use the breakpoint path. */
bool kp_ftrace_available(void)
{
	return false;
}

int kp_ftrace_arm(unsigned long ip)
{
	return -EOPNOTSUPP;
}

int kp_ftrace_disarm(unsigned long ip)
{
	return -EOPNOTSUPP;
}
#endif

/* Registration lock held. */
void kp_ftrace_module_going(struct module *mod)
{
	kp_direct_release(mod);
}

void kp_ftrace_exit(void)
{
	kp_direct_stop_reaper();
	kp_helper_reg_lock();
	kp_direct_release(NULL);
	kp_helper_reg_unlock();
}

unsigned int kp_ftrace_direct_sites(unsigned int *parked)
{
	return kp_direct_sites(parked);
}

/* include/kp_kprobes.h */
int kp_ftrace_release(void)
{
	int n;

	kp_helper_reg_lock();
	n = kp_direct_release(NULL);
	kp_helper_reg_unlock();
	return n;
}
EXPORT_SYMBOL_GPL(kp_ftrace_release);
