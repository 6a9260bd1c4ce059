// SPDX-License-Identifier: GPL-2.0
/*
 * The C of the KUnit module, for what Rust cannot reach:
 * - NMIs for the kp_x86_nmi suite (tests/nmi_x86_64.rs): an NMI handler
 *   that runs a test function, and a self-IPI with NMI delivery that fires
 *   it on the current CPU, from any context (also from inside a probe
 *   handler, with interrupts off). register_nmi_handler() and in_nmi() are
 *   macros, __apic_send_IPI_self() a static call;
 * - a function with an ftrace call site at its entry (this module's Rust
 *   code has none);
 * - a function this module marks NOKPROBE_SYMBOL() (a macro), for the
 *   module-local blacklist case of kp_smoke;
 * - the calling task's fail_nth (fault injection, kp_alloc_fail): the n-th
 *   allocation from now that consults failslab or fail_page_alloc fails;
 * - a kthread that exits (kthread_exit(), a macro-free but __noreturn path
 *   Rust cannot express as a plain call here) from inside a function the
 *   kp_kret suite probes, waited for until it is dead.
 */
#include <linux/module.h>
#include <linux/delay.h>
#include <linux/kprobes.h>
#include <linux/preempt.h>
#include <linux/sched.h>
#include <linux/kthread.h>
#include <linux/sched/task.h>
#ifdef CONFIG_X86_64
#include <asm/nmi.h>
#include <asm/apic.h>
#endif

int kp_test_exits(int code);
int kp_test_run_exiting_thread(void);

/* Returns code, or with a non-zero code ends the calling kthread. */
noinline int kp_test_exits(int code)
{
	barrier_data(&code);
	if (code)
		kthread_exit(code);
	return code;
}

static int kp_exiting_thread(void *arg)
{
	kp_test_exits(1);
	return 0;
}

/* Runs kp_test_exits(1) on a new kthread and waits until that thread has
 * gone through do_exit(). */
int kp_test_run_exiting_thread(void)
{
	struct task_struct *t = kthread_create(kp_exiting_thread, NULL, "kp_exiter");

	if (IS_ERR(t))
		return PTR_ERR(t);
	get_task_struct(t);
	wake_up_process(t);
	while (!READ_ONCE(t->exit_state))
		msleep(1);
	put_task_struct(t);
	return 0;
}

int kp_test_set_fail_nth(unsigned int n);
unsigned int kp_test_fail_nth(void);

int kp_test_set_fail_nth(unsigned int n)
{
#ifdef CONFIG_FAULT_INJECTION
	WRITE_ONCE(current->fail_nth, n);
	return 0;
#else
	return -EOPNOTSUPP;
#endif
}

/* What is left of fail_nth: non-zero when fewer allocations came. */
unsigned int kp_test_fail_nth(void)
{
#ifdef CONFIG_FAULT_INJECTION
	return READ_ONCE(current->fail_nth);
#else
	return 0;
#endif
}

int kp_test_nmi_arm(void (*fn)(void));
void kp_test_nmi_disarm(void);
int kp_test_nmi_fire(void);
bool kp_test_in_nmi(void);

bool kp_test_in_nmi(void)
{
	return in_nmi();
}

int kp_test_c_target(int value);
int kp_test_nokprobe(int value);

/* Never to be probed: this module says so (its _kprobe_blacklist). */
noinline int kp_test_nokprobe(int value)
{
	barrier_data(&value);
	return value + 2;
}
NOKPROBE_SYMBOL(kp_test_nokprobe);


/* A C function, so with an ftrace call site at its entry (the Rust code of
 * this module has none): entry probes on it take the ftrace path. */
noinline int kp_test_c_target(int value)
{
	barrier_data(&value);
	return value / 3 + 1;
}

#ifdef CONFIG_X86_64
static void (*kp_nmi_fn)(void);
static atomic_t kp_nmi_wanted;
static atomic_t kp_nmi_ran;

static int kp_nmi_handler(unsigned int type, struct pt_regs *regs)
{
	/* Other NMI sources share the chain: only the one we sent is ours. */
	if (!atomic_xchg(&kp_nmi_wanted, 0))
		return NMI_DONE;
	kp_nmi_fn();
	atomic_inc(&kp_nmi_ran);
	return NMI_HANDLED;
}

/* Registers the handler that will run fn() at each kp_test_nmi_fire().
 * Process context. */
int kp_test_nmi_arm(void (*fn)(void))
{
	kp_nmi_fn = fn;
	atomic_set(&kp_nmi_wanted, 0);
	return register_nmi_handler(NMI_LOCAL, kp_nmi_handler, 0, "kp_kunit");
}

/* Process context; waits until no CPU runs the handler. */
void kp_test_nmi_disarm(void)
{
	unregister_nmi_handler(NMI_LOCAL, "kp_kunit");
}

/* Sends an NMI to this CPU and waits up to 100 ms for fn() to have run
 * there: 0, or -ETIMEDOUT. Any context. */
int kp_test_nmi_fire(void)
{
	int before = atomic_read(&kp_nmi_ran), i;

	atomic_set(&kp_nmi_wanted, 1);
	__apic_send_IPI_self(NMI_VECTOR);
	for (i = 0; i < 100000 && atomic_read(&kp_nmi_ran) == before; i++)
		udelay(1);
	return atomic_read(&kp_nmi_ran) == before ? -ETIMEDOUT : 0;
}
#else
/* No NMI for modules to send on the arm64 test machine (pseudo-NMIs need
 * GICv3 priority masking, off in this configuration). */
int kp_test_nmi_arm(void (*fn)(void))
{
	return -EOPNOTSUPP;
}

void kp_test_nmi_disarm(void)
{
}

int kp_test_nmi_fire(void)
{
	return -EOPNOTSUPP;
}
#endif
