// SPDX-License-Identifier: GPL-2.0
/*
 * The C of the KUnit module, for what Rust cannot reach:
 * - NMIs for the kp_nmi suite (tests/kp_nmi.rs) that run a test
 *   function on the current CPU: x86_64, an NMI handler and a self-IPI with
 *   NMI delivery, from any context (also from inside a probe handler, with
 *   interrupts off; register_nmi_handler() and in_nmi() are macros,
 *   __apic_send_IPI_self() a static call); arm64, the PMU's overflow
 *   interrupt as a GICv3 pseudo-NMI;
 * - a function with an ftrace call site at its entry (this module's Rust
 *   code has none);
 * - a function this module marks NOKPROBE_SYMBOL() (a macro), for the
 *   module-local blacklist case of kp_smoke;
 * - the calling task's fail_nth (fault injection, kp_alloc_fail): the n-th
 *   allocation from now that consults failslab or fail_page_alloc fails;
 * - a kthread that leaves through kthread_exit() from inside a function the
 *   kp_kret suite probes, waited for until it is dead (get_task_struct()
 *   is an inline); C targets of return probes served through the function
 *   graph tracer's shadow stack (ftrace sites), and kthreads that sleep
 *   inside one of them at once (wait queues are macros);
 * - someone else's ftrace direct call (x86_64; what a BPF trampoline
 *   holds) on a function, for the kp_ftrace case where the engine cannot
 *   have the direct call there; and a kprobe of the kernel's own with a
 *   post handler (an IPMODIFY ftrace user at a function entry) beside the
 *   engine's direct call;
 * - someone else's ftrace callback (an ftrace_ops of the test's own) that
 *   calls a function the test probed, for the arm64 case of a probe hit
 *   inside another ftrace user's callback (kp_arm64_sim);
 * - the C header's layout of the ABI structs, for kp_smoke to compare with
 *   src/abi.rs.
 */
#include <linux/bitops.h>
#include <linux/module.h>
#include <linux/delay.h>
#include <linux/kprobes.h>
#include <linux/lockdep.h>
#include <linux/preempt.h>
#include <linux/sched.h>
#include <linux/kthread.h>
#include <linux/wait.h>
#include <linux/sched/task.h>
#include <linux/ftrace.h>
#include <linux/trace_recursion.h>
#include <linux/trace_events.h>
#include <linux/stddef.h>
#include <linux/linkage.h>
#include <linux/objtool.h>
#include "../include/kp_kprobes.h"
#ifdef CONFIG_X86_64
#include <asm/nmi.h>
#include <asm/apic.h>
#else
#include <linux/perf_event.h>
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

/*
 * Return probes on the function graph tracer's shadow stack (kp_kret):
 * C functions, so that they have an ftrace site at their entry, and a
 * crowd of kthreads sleeping inside one of them at once.
 */
int kp_test_graph_short(int v);
int kp_test_graph_gated(int v);
int kp_test_graph_sleepers_start(int n);
void kp_test_graph_sleepers_release(void);
int kp_test_graph_sleepers_wait(int n, int *bad);

static DECLARE_WAIT_QUEUE_HEAD(kp_graph_gate_wq);
static DECLARE_WAIT_QUEUE_HEAD(kp_graph_done_wq);
static bool kp_graph_gate_open;
static atomic_t kp_graph_done = ATOMIC_INIT(0);
static atomic_t kp_graph_bad = ATOMIC_INIT(0);

noinline int kp_test_graph_short(int v)
{
	barrier_data(&v);
	return v * 3 + 1;
}

/* Sleeps until kp_test_graph_sleepers_release(); returns v + 1. */
noinline int kp_test_graph_gated(int v)
{
	wait_event(kp_graph_gate_wq, READ_ONCE(kp_graph_gate_open));
	barrier_data(&v);
	return v + 1;
}

static int kp_graph_sleeper(void *arg)
{
	int v = (int)(long)arg;

	if (kp_test_graph_gated(v) != v + 1)
		atomic_inc(&kp_graph_bad);
	atomic_inc(&kp_graph_done);
	wake_up(&kp_graph_done_wq);
	return 0;
}

/* Starts n kthreads, the i-th calling kp_test_graph_gated(i) and ending
 * when it returns; returns how many started. */
int kp_test_graph_sleepers_start(int n)
{
	int i;

	WRITE_ONCE(kp_graph_gate_open, false);
	atomic_set(&kp_graph_done, 0);
	atomic_set(&kp_graph_bad, 0);
	for (i = 0; i < n; i++) {
		struct task_struct *t = kthread_run(kp_graph_sleeper, (void *)(long)i,
						    "kp_sleeper/%d", i);
		if (IS_ERR(t))
			break;
	}
	return i;
}

void kp_test_graph_sleepers_release(void)
{
	WRITE_ONCE(kp_graph_gate_open, true);
	wake_up_all(&kp_graph_gate_wq);
}

/* Waits (up to 120 s) until n sleepers returned; how many did, and in *bad
 * how many saw a wrong return value. */
int kp_test_graph_sleepers_wait(int n, int *bad)
{
	wait_event_timeout(kp_graph_done_wq, atomic_read(&kp_graph_done) >= n, 120 * HZ);
	*bad = atomic_read(&kp_graph_bad);
	return atomic_read(&kp_graph_done);
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

int kp_test_lockdep_irqs_state(void);

/*
 * Whether lockdep's idea of this CPU's interrupt state (what
 * lockdep_assert_irqs_enabled()/_disabled() check) is the CPU's: 1 if it
 * is, 0 if not, -1 if lockdep does not follow it here (no PROVE_LOCKING,
 * lockdep off after an earlier report, or inside lockdep itself).
 */
int kp_test_lockdep_irqs_state(void)
{
#ifdef CONFIG_PROVE_LOCKING
	if (!__lockdep_enabled)
		return -1;
	return !this_cpu_read(hardirqs_enabled) == !!irqs_disabled();
#else
	return -1;
#endif
}

bool kp_test_irqs_disabled(void);

/* irqs_disabled(), and lockdep knows (where it follows). */
bool kp_test_irqs_disabled(void)
{
	return irqs_disabled() && kp_test_lockdep_irqs_state() != 0;
}

int kp_test_c_target(int value);
u64 kp_test_c_args(u64 a, u64 b, u64 c);
/*
 * Calls one of the suites' assembly functions (tests/insn_table.rs). They
 * carry no kCFI type hash (the compiler writes those, not the assembler),
 * so an ordinary indirect call would fail kCFI's check: this one is
 * __nocfi. On IBT kernels they start with ENDBR.
 */
u64 kp_test_call_asm(u64 (*f)(u64, u64), u64 a, u64 b);
__nocfi u64 kp_test_call_asm(u64 (*f)(u64, u64), u64 a, u64 b)
{
	return f(a, b);
}

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

/* kp_kunit_args() in C: probe events refuse functions without an ftrace
 * call site, as the kernel's do (within_notrace_func), and Rust functions
 * have none. Same result as targets::args_expected(). */
noinline u64 kp_test_c_args(u64 a, u64 b, u64 c)
{
	barrier_data(&a);
	return ((a * 31) ^ rol64(b, 7)) + c;
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
/*
 * arm64: no NMI a module can send directly. With GICv3 pseudo-NMIs
 * (CONFIG_ARM64_PSEUDO_NMI, irqchip.gicv3_pseudo_nmi=1) the PMU's overflow
 * interrupt is one: a cycle counter on each CPU with a short period
 * overflows all the time, and its handler runs fn() when this CPU asked.
 */
static void (*kp_nmi_fn)(void);
/* The CPU that asked, plus one; 0: none. */
static atomic_t kp_nmi_wanted;
static atomic_t kp_nmi_ran;
static struct perf_event *kp_nmi_events[NR_CPUS];

static void kp_nmi_overflow(struct perf_event *event,
			    struct perf_sample_data *data,
			    struct pt_regs *regs)
{
	int me = smp_processor_id() + 1;

	if (!in_nmi() || atomic_cmpxchg(&kp_nmi_wanted, me, 0) != me)
		return;
	kp_nmi_fn();
	atomic_inc(&kp_nmi_ran);
}

void kp_test_nmi_disarm(void)
{
	int cpu;

	for_each_possible_cpu(cpu) {
		if (kp_nmi_events[cpu]) {
			perf_event_release_kernel(kp_nmi_events[cpu]);
			kp_nmi_events[cpu] = NULL;
		}
	}
}

/* Process context: -EOPNOTSUPP when the PMU interrupt is not an NMI. */
int kp_test_nmi_arm(void (*fn)(void))
{
	struct perf_event_attr attr = {
		.type = PERF_TYPE_HARDWARE,
		.config = PERF_COUNT_HW_CPU_CYCLES,
		.size = sizeof(attr),
		.sample_period = 20000,
		.pinned = 1,
	};
	int cpu;

	kp_nmi_fn = fn;
	atomic_set(&kp_nmi_wanted, 0);
	for_each_online_cpu(cpu) {
		struct perf_event *ev = perf_event_create_kernel_counter(
			&attr, cpu, NULL, kp_nmi_overflow, NULL);

		if (IS_ERR(ev)) {
			kp_test_nmi_disarm();
			return PTR_ERR(ev);
		}
		kp_nmi_events[cpu] = ev;
	}
	return 0;
}

/* Asks for fn() in an NMI on this CPU and waits up to 100 ms for it:
 * 0, or -ETIMEDOUT (also when the overflow interrupt is not an NMI). */
int kp_test_nmi_fire(void)
{
	int before = atomic_read(&kp_nmi_ran), i;

	atomic_set(&kp_nmi_wanted, raw_smp_processor_id() + 1);
	for (i = 0; i < 100000 && atomic_read(&kp_nmi_ran) == before; i++)
		udelay(1);
	atomic_set(&kp_nmi_wanted, 0);
	return atomic_read(&kp_nmi_ran) == before ? -ETIMEDOUT : 0;
}
#endif

int kp_test_foreign_direct(unsigned long ip, bool on);

#if defined(CONFIG_X86_64) && defined(CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS)
/* A direct trampoline that does nothing: back to the function. */
asm(".pushsection .text, \"ax\"\n"
    ".globl kp_test_direct_tramp\n"
    ".type kp_test_direct_tramp, @function\n"
    "kp_test_direct_tramp:\n"
    ANNOTATE_NOENDBR	/* only the ftrace site calls it, directly */
    ASM_RET
    ".size kp_test_direct_tramp, . - kp_test_direct_tramp\n"
    ".popsection\n"
    ".pushsection .discard.func_stack_frame_non_standard, \"aw\"\n"
    ".long kp_test_direct_tramp - .\n"
    ".popsection\n");
void kp_test_direct_tramp(void);

static struct ftrace_ops kp_test_direct_ops;

/* Puts (on) or takes away (!on) a direct call to a no-op trampoline at the
 * ftrace site ip: 0 or an errno. */
int kp_test_foreign_direct(unsigned long ip, bool on)
{
	int ret;

	if (!on)
		return unregister_ftrace_direct(&kp_test_direct_ops,
						(unsigned long)kp_test_direct_tramp, true);
	memset(&kp_test_direct_ops, 0, sizeof(kp_test_direct_ops));
	ret = ftrace_set_filter_ip(&kp_test_direct_ops, ip, 0, 0);
	if (ret)
		return ret;
	ret = register_ftrace_direct(&kp_test_direct_ops, (unsigned long)kp_test_direct_tramp);
	if (ret)
		ftrace_free_filter(&kp_test_direct_ops);
	return ret;
}
#else
int kp_test_foreign_direct(unsigned long ip, bool on)
{
	return -EOPNOTSUPP;
}
#endif

int kp_test_kernel_kprobe(const char *sym, bool on);
unsigned long kp_test_kernel_kprobe_hits(void);
int kp_test_kernel_kprobe_at(unsigned long addr, bool on, bool post);

#ifdef CONFIG_KPROBES
static atomic_long_t kp_test_kk_hits;

static int kp_test_kk_pre(struct kprobe *p, struct pt_regs *regs)
{
	atomic_long_inc(&kp_test_kk_hits);
	return 0;
}

static void kp_test_kk_post(struct kprobe *p, struct pt_regs *regs, unsigned long flags)
{
}

static struct kprobe kp_test_kk;

/* Registers (on) or unregisters the kernel's kprobe on sym's entry, with a
 * post handler: 0 or an errno. */
int kp_test_kernel_kprobe(const char *sym, bool on)
{
	if (!on) {
		unregister_kprobe(&kp_test_kk);
		return 0;
	}
	memset(&kp_test_kk, 0, sizeof(kp_test_kk));
	kp_test_kk.symbol_name = sym;
	kp_test_kk.pre_handler = kp_test_kk_pre;
	kp_test_kk.post_handler = kp_test_kk_post;
	atomic_long_set(&kp_test_kk_hits, 0);
	return register_kprobe(&kp_test_kk);
}

unsigned long kp_test_kernel_kprobe_hits(void)
{
	return atomic_long_read(&kp_test_kk_hits);
}

/* The same at an address. With a post handler it stays on its int3; without
 * one the kernel jump-optimizes it (x86_64) after a few jiffies. */
int kp_test_kernel_kprobe_at(unsigned long addr, bool on, bool post)
{
	if (!on) {
		unregister_kprobe(&kp_test_kk);
		return 0;
	}
	memset(&kp_test_kk, 0, sizeof(kp_test_kk));
	kp_test_kk.addr = (kprobe_opcode_t *)addr;
	kp_test_kk.pre_handler = kp_test_kk_pre;
	if (post)
		kp_test_kk.post_handler = kp_test_kk_post;
	atomic_long_set(&kp_test_kk_hits, 0);
	return register_kprobe(&kp_test_kk);
}
#else
/* A kernel without kprobes of its own (CONFIG_KPROBES=n): the suites that
 * compare against them skip before calling these. */
int kp_test_kernel_kprobe(const char *sym, bool on)
{
	return -EOPNOTSUPP;
}

unsigned long kp_test_kernel_kprobe_hits(void)
{
	return 0;
}

int kp_test_kernel_kprobe_at(unsigned long addr, bool on, bool post)
{
	return -EOPNOTSUPP;
}
#endif

/* sizeof and field offsets of struct kp_kprobe, struct kp_kretprobe and
 * struct kp_stats as the C header lays them out, in the order kp_smoke
 * lists them. */
const size_t kp_test_c_layout[] = {
	sizeof(struct kp_kprobe),
	offsetof(struct kp_kprobe, addr),
	offsetof(struct kp_kprobe, symbol_name),
	offsetof(struct kp_kprobe, pre_handler),
	offsetof(struct kp_kprobe, post_handler),
	offsetof(struct kp_kprobe, fault_handler),
	offsetof(struct kp_kprobe, nmissed),
	offsetof(struct kp_kprobe, offset),
	offsetof(struct kp_kprobe, flags),
	offsetof(struct kp_kprobe, kp_private),
	sizeof(struct kp_kretprobe),
	offsetof(struct kp_kretprobe, handler),
	offsetof(struct kp_kretprobe, entry_handler),
	offsetof(struct kp_kretprobe, maxactive),
	offsetof(struct kp_kretprobe, nmissed),
	offsetof(struct kp_kretprobe, data_size),
	offsetof(struct kp_kretprobe, kp_private),
	sizeof(struct kp_stats),
	offsetof(struct kp_stats, step_traps),
	offsetof(struct kp_stats, kretprobe_via_graph),
	offsetof(struct kp_stats, missed_reentry),
	offsetof(struct kp_stats, missed_kret_no_instance),
	offsetof(struct kp_stats, missed_kret_unloading),
	offsetof(struct kp_stats, missed_kret_nested),
	offsetof(struct kp_stats, kretprobe_task_exits),
	offsetof(struct kp_stats, kretprobe_shadow_returns),
	offsetof(struct kp_stats, kretprobe_shadow_probes),
	offsetof(struct kp_stats, opt_waits),
	offsetof(struct kp_stats, opt_waits_done),
};

/*
 * Someone else's ftrace callback on `ip` (an ftrace_ops without
 * FTRACE_OPS_FL_RECURSION, as the engine's own) that calls `fn`; and
 * whether its last call came through ftrace's list function (which holds a
 * recursion bit of its own while its callbacks run: a BRK hit inside one
 * reaches the engine's BRK hook one level deeper).
 */
int kp_test_foreign_callback(unsigned long ip, void (*fn)(void), bool on);
bool kp_test_foreign_callback_via_list(void);

static void (*kp_fc_fn)(void);
static bool kp_fc_via_list;

static void notrace kp_fc_func(unsigned long ip, unsigned long parent_ip,
			       struct ftrace_ops *op, struct ftrace_regs *fregs)
{
	unsigned int list = ((1U << (TRACE_CTX_TRANSITION + 1)) - 1) << TRACE_LIST_START;

	WRITE_ONCE(kp_fc_via_list, current->trace_recursion & list);
	kp_fc_fn();
}

static struct ftrace_ops kp_fc_ops = {
	.func = kp_fc_func,
};

int kp_test_foreign_callback(unsigned long ip, void (*fn)(void), bool on)
{
	int r;

	if (!on) {
		r = unregister_ftrace_function(&kp_fc_ops);
		ftrace_set_filter_ip(&kp_fc_ops, ip, 1, 0);
		return r;
	}
	kp_fc_fn = fn;
	r = ftrace_set_filter_ip(&kp_fc_ops, ip, 0, 0);
	if (r)
		return r;
	r = register_ftrace_function(&kp_fc_ops);
	if (r)
		ftrace_set_filter_ip(&kp_fc_ops, ip, 1, 0);
	return r;
}

bool kp_test_foreign_callback_via_list(void)
{
	return READ_ONCE(kp_fc_via_list);
}

/*
 * The kernel's bpf_override_return() checks (kernel/trace/trace_kprobe.c,
 * not exported; the addresses come from the caller) on event sys/ev, as
 * perf_event_attach_bpf_prog() asks them: bit 0 set if
 * trace_kprobe_on_func_entry() says yes, bit 1 if
 * trace_kprobe_error_injectable() does; -ENOENT without the event.
 */
int kp_test_override_checks(const char *sys, const char *ev,
			    unsigned long on_entry, unsigned long injectable);
int kp_test_override_checks(const char *sys, const char *ev,
			    unsigned long on_entry, unsigned long injectable)
{
	bool (*on)(struct trace_event_call *) = (void *)on_entry;
	bool (*inj)(struct trace_event_call *) = (void *)injectable;
	struct trace_event_file *file = trace_get_event_file(NULL, sys, ev);
	int r;

	if (IS_ERR(file))
		return -ENOENT;
	r = (on(file->event_call) ? 1 : 0) | (inj(file->event_call) ? 2 : 0);
	trace_put_event_file(file);
	return r;
}
