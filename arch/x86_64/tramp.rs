// SPDX-License-Identifier: GPL-2.0

//! The Rust side of entering and leaving the frame the register-saving
//! trampolines build (`trampolines.S`: kretprobe return, jump-optimization
//! detour, post tail, ftrace direct call): a `struct pt_regs` (ip and sp
//! for the handler to fill in) with interrupts masked, below the words the
//! trampoline's entry pushed.

use super::*;

/// How a trampoline was entered, which says what the words above its
/// `pt_regs` hold.
#[derive(Clone, Copy)]
pub(super) enum Entry {
    /// `push $addr; call` (the post tail): where to resume (the word the
    /// `call` pushed), then the probed address.
    PushAddr,
    /// `push $(addr + 1)` (a jump-optimization detour, which then calls
    /// its handler itself): a return address into the probed instruction,
    /// which unwinders follow to the probed function (`trampolines.S`), and
    /// which a redirect overwrites (`kp_x86_opt_redirect` returns to it).
    /// No resume word: the detour goes on by itself.
    Detour,
    /// The `call` of an ftrace site (the direct-call trampoline): its
    /// return address, past the site, which is where to resume.
    FtraceSite,
}

/// Bytes of an ftrace call site (`call __fentry__` / its NOP).
pub(super) const FTRACE_SITE_LEN: usize = 5;

/// A call from a `trampolines.S` trampoline that returns to a word above
/// its `pt_regs` (the post tail, the ftrace direct call, a redirected
/// jump-optimization detour).
pub(super) struct TrampFrame {
    /// The word the trampoline's `ret` goes to.
    pub(super) resume_slot: *mut usize,
    /// Its original value (the code after the `call`; for a detour, the
    /// probed address + 1).
    pub(super) resume: usize,
    /// The probed address.
    pub(super) addr: usize,
    /// The stack pointer before the entry's words were pushed.
    pub(super) sp: usize,
    /// What the entry told lockdep.
    irqs: IrqTrace,
}

#[cfg(CONFIG_TRACE_IRQFLAGS)]
extern "C" {
    fn trace_hardirqs_off();
    fn trace_hardirqs_on();
    fn kp_x86_lockdep_irqs_enabled() -> bool;
}

/// What a trampoline told lockdep on entry, to undo on the way out.
#[derive(Clone, Copy)]
pub(super) struct IrqTrace(bool);

/// Tells lockdep and the irq tracing that interrupts are off for the
/// handlers (the trampoline's `cli`), if it believed them on; the way out
/// ([`irqs_trace_leave`]) gives it back what it believed, as the kernel's
/// NMI entry and exit do (`irqentry_nmi_enter()`/`_exit()`).
///
/// Not the saved flags: what lockdep believes can differ from them. Code
/// that masks interrupts the raw way (`__local_bh_disable_ip()` around
/// `lockdep_softirqs_off()`, say) runs with them off while lockdep thinks
/// them on; and a post tail runs after a stepped copy that ran with IF
/// clear while lockdep, restored by the breakpoint's exit, thinks them on.
/// Telling lockdep "off" on entry but "on" on exit only when the restored
/// flags said so left it believing interrupts off after the code turned
/// them back on. Without lockdep (irq tracing only) the saved flags
/// (`flags`) decide, as `local_irq_save()` would.
///
/// # Safety
///
/// Interrupts are off; pairs with [`irqs_trace_leave`].
#[inline(always)]
pub(super) unsafe fn irqs_trace_enter(flags: usize) -> IrqTrace {
    #[cfg(CONFIG_TRACE_IRQFLAGS)]
    {
        let on = if cfg!(CONFIG_PROVE_LOCKING) {
            // SAFETY: reads this CPU's lockdep state.
            unsafe { kp_x86_lockdep_irqs_enabled() }
        } else {
            flags & FLAGS_IF != 0
        };
        if on {
            // SAFETY: interrupts are off.
            unsafe { trace_hardirqs_off() };
        }
        IrqTrace(on)
    }
    #[cfg(not(CONFIG_TRACE_IRQFLAGS))]
    {
        let _ = flags;
        IrqTrace(false)
    }
}

/// Gives lockdep back what it believed at [`irqs_trace_enter`].
///
/// # Safety
///
/// Interrupts are off until the trampoline's `popfq`.
#[inline(always)]
pub(super) unsafe fn irqs_trace_leave(t: IrqTrace) {
    #[cfg(CONFIG_TRACE_IRQFLAGS)]
    if t.0 {
        // SAFETY: interrupts are still off until the `popfq`.
        unsafe { trace_hardirqs_on() };
    }
    #[cfg(not(CONFIG_TRACE_IRQFLAGS))]
    let _ = t.0;
}

/// Entry of a trampoline's handler: tells lockdep about the trampoline's
/// `cli` ([`irqs_trace_enter`]) and reads the frame, laid out as `entry`
/// says. Wrapping arithmetic: the words are the trampoline's, and a
/// checked overflow would only add branches to every hit.
///
/// # Safety
///
/// `regs` is the `pt_regs` such a trampoline built; interrupts are off.
#[inline(always)]
pub(super) unsafe fn tramp_enter<'a>(
    regs: *mut bindings::pt_regs,
    entry: Entry,
) -> (&'a mut bindings::pt_regs, TrampFrame) {
    // SAFETY: per the function's contract, `regs` holds the saved flags.
    let irqs = unsafe { irqs_trace_enter((*regs).flags) };
    // SAFETY: the words sit right above `regs` (the function's contract).
    let resume_slot = unsafe { regs.add(1) }.cast::<usize>();
    // SAFETY: as above.
    let resume = unsafe { *resume_slot };
    let (addr, words) = match entry {
        // SAFETY: a second word above `regs` (the function's contract).
        Entry::PushAddr => (unsafe { *resume_slot.add(1) }, 2),
        Entry::Detour => (resume.wrapping_sub(1), 1),
        Entry::FtraceSite => (resume.wrapping_sub(FTRACE_SITE_LEN), 1),
    };
    let frame = TrampFrame {
        resume_slot,
        resume,
        addr,
        sp: (resume_slot as usize).wrapping_add(8 * words),
        irqs,
    };
    // SAFETY: per the function's contract.
    (unsafe { &mut *regs }, frame)
}

/// Exit of a trampoline's handler: the trampoline returns to `to` and
/// restores `regs` (lockdep learns that its `popfq` turns interrupts back
/// on, if it does).
///
/// # Safety
///
/// As for [`tramp_enter`], which gave `frame`.
#[inline(always)]
pub(super) unsafe fn tramp_leave(frame: &TrampFrame, to: usize) {
    // Lockdep first: what it records (a stack trace of the irq-on point)
    // still unwinds through the word as the entry found it.
    // SAFETY: per the function's contract.
    unsafe { irqs_trace_leave(frame.irqs) };
    // SAFETY: the slot is the return address of the trampoline's `ret`.
    unsafe { *frame.resume_slot = to };
}
