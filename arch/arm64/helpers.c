// SPDX-License-Identifier: GPL-2.0
/*
 * arm64 C glue for the Rust backend: the ftrace_ops that takes our BRKs
 * before the kernel's fixed BRK dispatcher, and the isb() a static inline.
 * All logic is in Rust (arch/arm64/trap.rs, arch/arm64/patch.rs).
 *
 * Why ftrace: this kernel has no break-hook registration for modules
 * (call_el1_break_hook() in debug-monitors.c is a fixed list) and an unknown
 * kernel BRK ends in die("Oops - BRK"). do_el1_brk64(esr, regs) is
 * ftrace-able: an ftrace_ops with IPMODIFY filtered on it sees every kernel
 * BRK first; for ours it runs the engine and redirects the call to an empty
 * function so the dispatcher never sees them. Every other BRK passes through
 * untouched.
 */
#include <linux/cpu.h>
#include <linux/delay.h>
#include <linux/ftrace.h>
#include <linux/kprobes.h>
#include <linux/percpu.h>
#include <linux/ptrace.h>
#include <linux/stddef.h>
#include <asm/barrier.h>
#include <asm/cpufeature.h>
#include <asm/insn.h>
#include <asm/ptrace.h>
#include <asm/sysreg.h>
#include "../../src/helpers.h"

/* Returns straight to do_el1_brk64()'s caller (x30 is the caller's). */
static notrace void kp_arm64_brk_skip(unsigned long esr, struct pt_regs *regs)
{
}

static notrace void kp_arm64_brk_ftrace(unsigned long ip, unsigned long parent_ip,
				struct ftrace_ops *op, struct ftrace_regs *fregs)
{
	unsigned long esr = ftrace_regs_get_argument(fregs, 0);
	struct pt_regs *regs = (struct pt_regs *)ftrace_regs_get_argument(fregs, 1);

	if (kp_arm64_brk(esr, regs))
		ftrace_regs_set_instruction_pointer(fregs,
						    (unsigned long)kp_arm64_brk_skip);
}

/*
 * Whether handlers may run on this CPU now: not when this code runs one
 * ftrace recursion level deep. ftrace's list function (every call site with
 * more than one ftrace_ops, and every site on kernels without CALL_OPS,
 * kCFI ones among them) runs its callbacks under a recursion bit and lets
 * one nested level through on its transition bit, not two. Set, this hit
 * came from inside an ftrace callback (someone else's, such as the function
 * tracer's, or one that itself runs on the transition bit): a BRK in what
 * its handlers call would be dropped by that guard before the hook above,
 * reach the kernel's dispatcher and die() (a probe inside another tracer's
 * callback whose handler calls another probed function). Such a hit counts
 * as missed, as one inside a handler. Every arm64 hit path asks (the BRK,
 * ftrace entries, jump-optimization detours), reading the current task's
 * trace_recursion against this bit inline (arch/arm64/mod.rs).
 */
extern const unsigned long kp_trace_list_transition;
const unsigned long kp_trace_list_transition = BIT(TRACE_LIST_START + TRACE_CTX_TRANSITION);

static struct ftrace_ops kp_brk_ops = {
	.func = kp_arm64_brk_ftrace,
	/*
	 * No FTRACE_OPS_FL_RECURSION: that flag *asks* ftrace for recursion
	 * protection, which would drop a nested BRK (a probe hit inside a
	 * handler) and let it reach die(). The engine handles nesting itself.
	 * Without it the call site can call us directly (CALL_OPS) while we
	 * are the only ops on do_el1_brk64; when another ops traces it too,
	 * the list function's own guard applies (documented limit).
	 * PERMANENT: ftrace_enabled=0 must not remove this hook while BRKs
	 * are armed.
	 */
	.flags = FTRACE_OPS_FL_IPMODIFY | FTRACE_OPS_FL_PERMANENT,
};

/*
 * Entry probes through ftrace (src/ftrace.c, kp_ftrace_func): the handlers'
 * pt_regs at a function's ftrace site, from what ftrace_caller saved
 * (DYNAMIC_FTRACE_WITH_ARGS). Valid: x0-x8 (the arguments and the indirect
 * result register), x29 (fp), x30 (lr: the return address), sp, pc (past
 * the site: the function's first own instruction; the hit path shows the
 * pre handler the site), pstate (EL1h; the interrupt mask, or under
 * pseudo-NMIs the priority mask in pmr_save, as interrupts were). The rest
 * read 0 (regs comes zeroed, and kp_arch_regs_to_fregs() keeps x9-x28
 * so): ftrace saves none of them, x9 holds the copy of lr the patchable
 * entry made, x10-x17 are dead at a call, and x18-x28 belong to the caller
 * (KP_FLAG_FULL_REGS takes the BRK, which has them all). As fprobe's
 * pt_regs on arm64, plus pstate. Word by word: the out-of-line memcpy()
 * cost more than the copy under TCG.
 */
void notrace kp_arch_fregs_to_regs(struct ftrace_regs *fregs, struct pt_regs *regs,
				   unsigned long flags)
{
	struct __arch_ftrace_regs *a = arch_ftrace_regs(fregs);
	int i;

	for (i = 0; i < ARRAY_SIZE(a->regs); i++)
		regs->regs[i] = a->regs[i];
	regs->regs[29] = a->fp;
	regs->regs[30] = a->lr;
	regs->sp = a->sp;
	regs->pc = a->pc;
	regs->pstate = PSR_MODE_EL1h;
	if (system_uses_irq_prio_masking())
		regs->pmr_save = flags;
	else
		regs->pstate |= flags & (PSR_D_BIT | PSR_A_BIT | PSR_I_BIT | PSR_F_BIT);
}

/*
 * What goes back to ftrace_caller, which restores x0-x8, fp and lr and
 * returns to pc (the stack pointer it restores itself). A handler's change
 * to another register cannot be honoured there: said once, and x9-x28 are
 * zeroed again for the next hit.
 */
void notrace kp_arch_regs_to_fregs(struct pt_regs *regs, struct ftrace_regs *fregs)
{
	struct __arch_ftrace_regs *a = arch_ftrace_regs(fregs);
	/* The site, before pc takes a handler's redirect. */
	void *site = (void *)(a->pc - AARCH64_INSN_SIZE);
	static bool said;
	unsigned long others = 0;
	int i;

	for (i = 0; i < ARRAY_SIZE(a->regs); i++)
		a->regs[i] = regs->regs[i];
	for (; i < 29; i++)
		others |= regs->regs[i];
	a->fp = regs->regs[29];
	a->lr = regs->regs[30];
	a->pc = regs->pc;
	if (likely(!others && regs->sp == a->sp))
		return;
	for (i = ARRAY_SIZE(a->regs); i < 29; i++) {
		if (regs->regs[i] && !READ_ONCE(said)) {
			WRITE_ONCE(said, true);
			pr_warn("kprobes: a handler at the ftrace site %pS set x%d, which the ftrace path cannot give back (KP_FLAG_FULL_REGS probes take a breakpoint)\n",
				site, i);
		}
		regs->regs[i] = 0;
	}
	if (regs->sp != a->sp && !READ_ONCE(said)) {
		WRITE_ONCE(said, true);
		pr_warn("kprobes: a handler at the ftrace site %pS moved sp, which the ftrace path cannot give back (KP_FLAG_FULL_REGS probes take a breakpoint)\n",
			site);
	}
}

/*
 * Faults: do_mem_abort(far, esr, regs) takes every data and instruction
 * abort, and is ftrace-able as do_el1_brk64 is. A kernel-mode abort taken
 * with interrupts masked (the engine's stepped copies run with DAIF masked,
 * its handlers with interrupts off) goes to the engine first
 * (kp_arm64_fault(), arch/arm64/trap.rs): a fault in a stepped copy or in a
 * pre or post handler is offered to the probes' fault handlers, and one
 * they fixed never reaches the kernel's handling. Every other abort (user
 * mode, interrupts on: page faults in general) costs the call and two
 * tests. Without the hook (its registration failed) fault handlers are not
 * called, as before.
 */
bool kp_arm64_fault(unsigned long esr, struct pt_regs *regs);

/* Returns straight to do_mem_abort()'s caller. */
static notrace void kp_arm64_abort_skip(unsigned long far, unsigned long esr,
					struct pt_regs *regs)
{
}

static notrace void kp_arm64_abort_ftrace(unsigned long ip, unsigned long parent_ip,
					  struct ftrace_ops *op, struct ftrace_regs *fregs)
{
	unsigned long esr = ftrace_regs_get_argument(fregs, 1);
	struct pt_regs *regs = (struct pt_regs *)ftrace_regs_get_argument(fregs, 2);

	if (user_mode(regs) || (!(regs->pstate & PSR_I_BIT) && !irqs_disabled()))
		return;
	if (kp_arm64_fault(esr, regs))
		ftrace_regs_set_instruction_pointer(fregs, (unsigned long)kp_arm64_abort_skip);
}

static struct ftrace_ops kp_abort_ops = {
	.func = kp_arm64_abort_ftrace,
	/* As kp_brk_ops, without PERMANENT: without it faults go to the
	 * kernel as before, nothing breaks. */
	.flags = FTRACE_OPS_FL_IPMODIFY,
};
static bool kp_abort_hooked;

int kp_helper_arm64_brk_hook_init(void)
{
	int ret;

	ret = ftrace_set_filter(&kp_brk_ops, "do_el1_brk64", strlen("do_el1_brk64"), 1);
	if (ret)
		return ret;
	ret = register_ftrace_function(&kp_brk_ops);
	if (ret)
		return ret;
	ret = ftrace_set_filter(&kp_abort_ops, "do_mem_abort", strlen("do_mem_abort"), 1);
	if (!ret)
		ret = register_ftrace_function(&kp_abort_ops);
	if (ret)
		pr_warn("kprobes: cannot hook do_mem_abort (%d): fault handlers will not be called\n",
			ret);
	kp_abort_hooked = !ret;
	return 0;
}

void kp_helper_arm64_brk_hook_exit(void)
{
	unsigned int tries = 0;
	int ret;

	/* Fails only when ftrace is broken (-ENODEV); the hook would then
	 * call into this module's freed text at the next kernel BRK (or
	 * abort): the unload waits, retrying, rather than leave. */
	while (kp_abort_hooked && (ret = unregister_ftrace_function(&kp_abort_ops))) {
		if (!(tries++ % 60))
			pr_err("kprobes: cannot unhook do_mem_abort while unloading: %d; retrying\n",
			       ret);
		msleep_interruptible(1000);
	}
	kp_abort_hooked = false;
	ftrace_free_filter(&kp_abort_ops);
	tries = 0;
	while ((ret = unregister_ftrace_function(&kp_brk_ops))) {
		if (!(tries++ % 60))
			pr_err("kprobes: cannot unhook do_el1_brk64 while unloading: %d; retrying\n",
			       ret);
		msleep_interruptible(1000);
	}
	ftrace_free_filter(&kp_brk_ops);
}

/* cpus_read_lock() is an inline without CPU hotplug: a function for Rust. */
void kp_helper_cpus_read_lock(void);
void kp_helper_cpus_read_unlock(void);

void kp_helper_cpus_read_lock(void)
{
	cpus_read_lock();
}

void kp_helper_cpus_read_unlock(void)
{
	cpus_read_unlock();
}

void kp_helper_isb(void)
{
	isb();
}

/*
 * A jump-optimized probe's redirect (arch/arm64/opt.rs): the new pc and
 * PSTATE, from the detour's handler call to the BRK that takes them, on
 * one CPU with DAIF masked throughout.
 */
struct kp_redirect {
	unsigned long pc, pstate;
	bool set;
};
static DEFINE_PER_CPU(struct kp_redirect, kp_redirect);

void kp_helper_arm64_redirect_set(unsigned long pc, unsigned long pstate);
bool kp_helper_arm64_redirect_take(unsigned long *pc, unsigned long *pstate);

/* notrace and NOKPROBE: nothing may run in between on this CPU (an
 * optimized probe's redirect there would overwrite the record). */
void notrace kp_helper_arm64_redirect_set(unsigned long pc, unsigned long pstate)
{
	struct kp_redirect *r = this_cpu_ptr(&kp_redirect);

	WARN_ON_ONCE(r->set);
	r->pc = pc;
	r->pstate = pstate;
	r->set = true;
}
NOKPROBE_SYMBOL(kp_helper_arm64_redirect_set);

bool notrace kp_helper_arm64_redirect_take(unsigned long *pc, unsigned long *pstate)
{
	struct kp_redirect *r = this_cpu_ptr(&kp_redirect);

	if (!r->set)
		return false;
	r->set = false;
	*pc = r->pc;
	*pstate = r->pstate;
	return true;
}
NOKPROBE_SYMBOL(kp_helper_arm64_redirect_take);

/*
 * The rest of a pt_regs the detour of a jump-optimized probe built
 * (arch/arm64/opt.rs; it saved the registers, pc and PSTATE): no syscall,
 * and under pseudo-NMIs the priority mask as the probed code had it
 * (regs_irqs_disabled() reads it there).
 */
void kp_helper_arm64_opt_regs(struct pt_regs *regs);

void notrace kp_helper_arm64_opt_regs(struct pt_regs *regs)
{
	regs->orig_x0 = 0;
	regs->syscallno = NO_SYSCALL;
	regs->unused2 = 0;
	regs->sdei_ttbr1 = 0;
	regs->pmr_save = system_uses_irq_prio_masking() ? read_sysreg_s(SYS_ICC_PMR_EL1) : 0;
	regs->lockdep_hardirqs = 0;
	regs->exit_rcu = 0;
}
NOKPROBE_SYMBOL(kp_helper_arm64_opt_regs);

/*
 * Software PAN (TTBR0 switched per user access, on CPUs without PAN): the
 * exception entry the BRK path takes saves and disables user access around
 * the handlers; the detour does not, so such kernels keep their BRKs.
 */
bool kp_helper_arm64_sw_pan(void);

bool kp_helper_arm64_sw_pan(void)
{
	return system_uses_ttbr0_pan();
}

/*
 * The detour of a jump-optimized probe masks interrupts in two steps
 * (arch/arm64/opt.rs): the CPU's mask first, without a call (under
 * pseudo-NMIs the priority mask, which is what the kernel's per-CPU
 * checks read: DEBUG_PREEMPT saw "preemptible" with only DAIF masked), and
 * the kernel's IRQ-state tracking (lockdep) once the CPU is marked busy
 * with the hit: a probe in trace_hardirqs_off() then finds it busy
 * instead of entering the detour again, and again.
 */
unsigned long kp_helper_arm64_raw_irq_save(void);
void kp_helper_arm64_raw_irq_restore(unsigned long flags);
bool kp_helper_arm64_regs_irqs_on(struct pt_regs *regs);

unsigned long notrace kp_helper_arm64_raw_irq_save(void)
{
	unsigned long flags;

	raw_local_irq_save(flags);
	return flags;
}
NOKPROBE_SYMBOL(kp_helper_arm64_raw_irq_save);

void notrace kp_helper_arm64_raw_irq_restore(unsigned long flags)
{
	raw_local_irq_restore(flags);
}
NOKPROBE_SYMBOL(kp_helper_arm64_raw_irq_restore);

/* Whether the probed code had interrupts on, from the detour's frame (DAIF
 * as it found it, the priority mask under pseudo-NMIs), not from the CPU,
 * which the detour has masked. */
bool kp_helper_arm64_regs_irqs_on(struct pt_regs *regs)
{
	return interrupts_enabled(regs);
}

/*
 * The kernel's IRQ-state tracking told "off" for the handlers, which run
 * with interrupts masked, if it believed them on; the way out gives it back
 * what it believed, as the kernel's NMI and debug-exception entry and exit
 * do (arm64_enter_nmi(), arm64_enter_el1_dbg()). Where lockdep follows the
 * state (PROVE_LOCKING), its own belief decides: code that masks the raw
 * way runs with interrupts off while lockdep thinks them on, and a post
 * trampoline runs after a copy stepped with DAIF masked while lockdep,
 * restored by the BRK's exit, thinks them on (without pseudo-NMIs,
 * local_irq_save() there saw "disabled" and told lockdep nothing, so
 * handlers ran with lockdep believing interrupts on). Without lockdep (irq
 * tracing only) `was_on`, the probed code's state, decides. The same for
 * every arm64 path that masks interrupts itself: the post and return
 * trampolines and the detour of a jump-optimized probe.
 */
bool kp_helper_arm64_irq_trace_enter(bool was_on);
void kp_helper_arm64_irq_trace_leave(bool traced);

bool notrace kp_helper_arm64_irq_trace_enter(bool was_on)
{
#ifdef CONFIG_TRACE_IRQFLAGS
	bool on = IS_ENABLED(CONFIG_PROVE_LOCKING) ? lockdep_hardirqs_enabled() : was_on;

	if (on)
		trace_hardirqs_off();
	return on;
#else
	return false;
#endif
}

void notrace kp_helper_arm64_irq_trace_leave(bool traced)
{
#ifdef CONFIG_TRACE_IRQFLAGS
	if (traced)
		trace_hardirqs_on();
#endif
}

/*
 * The post and return trampolines mask DAIF themselves (or come from an
 * eret into a copy that ran masked): the CPU's mask as the kernel sets it
 * (the priority mask under pseudo-NMIs, which irqs_disabled() and the
 * per-CPU checks read), then the IRQ-state tracking as above. Whether the
 * code had interrupts on is the mask found here: the frame has DAIF
 * masked on these paths.
 */
bool kp_helper_arm64_irqs_off_enter(unsigned long *flags);
void kp_helper_arm64_irqs_off_leave(unsigned long flags, bool traced);

bool notrace kp_helper_arm64_irqs_off_enter(unsigned long *flags)
{
	raw_local_irq_save(*flags);
	return kp_helper_arm64_irq_trace_enter(!raw_irqs_disabled_flags(*flags));
}

void notrace kp_helper_arm64_irqs_off_leave(unsigned long flags, bool traced)
{
	kp_helper_arm64_irq_trace_leave(traced);
	raw_local_irq_restore(flags);
}
