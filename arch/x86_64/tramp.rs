// SPDX-License-Identifier: GPL-2.0

//! The Rust side of entering and leaving the frame the register-saving
//! trampolines build (`trampolines.S`: kretprobe return, jump-optimization
//! detour, post tail, ftrace direct call): a `struct pt_regs` (ip and sp
//! for the handler to fill in) with interrupts masked, below the words the
//! trampoline's entry pushed.

use super::*;

/// A call from a `trampolines.S` trampoline reached by `push $addr; call`
/// (the jump-optimization detour, the post tail): the words above its
/// `pt_regs`.
pub(super) struct TrampFrame {
    /// The word the `call` pushed: where the trampoline returns (dropping
    /// the pushed address).
    pub(super) resume_slot: *mut usize,
    /// Its original value (the code after the `call`).
    pub(super) resume: usize,
    /// The pushed probed address.
    pub(super) addr: usize,
    /// The stack pointer before the two words were pushed.
    pub(super) sp: usize,
}

#[cfg(CONFIG_TRACE_IRQFLAGS)]
extern "C" {
    fn trace_hardirqs_off();
    fn trace_hardirqs_on();
}

/// Tells lockdep about a trampoline's `cli` as `local_irq_save()` would:
/// only if interrupts were on before it (`flags`, the saved ones).
///
/// Interrupts masked with the raw helpers, which lockdep does not follow
/// (`__local_bh_disable_ip()` around `lockdep_softirqs_off()`, say), are off
/// while lockdep thinks them on; telling it "off" there, with no matching
/// "on" on the way out (the saved flags say off), left it thinking them off
/// after the code's own `raw_local_irq_restore()` turned them on.
///
/// # Safety
///
/// Interrupts are off; pairs with [`irqs_trace_leave`].
#[inline(always)]
pub(super) unsafe fn irqs_trace_enter(flags: usize) {
    #[cfg(CONFIG_TRACE_IRQFLAGS)]
    if flags & FLAGS_IF != 0 {
        // SAFETY: interrupts are off.
        unsafe { trace_hardirqs_off() };
    }
    #[cfg(not(CONFIG_TRACE_IRQFLAGS))]
    let _ = flags;
}

/// Tells lockdep that the trampoline's `popfq` turns interrupts back on, if
/// the flags it restores (`flags`) say so, as `local_irq_restore()` would.
///
/// # Safety
///
/// Interrupts are off until the `popfq`.
#[inline(always)]
pub(super) unsafe fn irqs_trace_leave(flags: usize) {
    #[cfg(CONFIG_TRACE_IRQFLAGS)]
    if flags & FLAGS_IF != 0 {
        // SAFETY: interrupts are still off until the `popfq`.
        unsafe { trace_hardirqs_on() };
    }
    #[cfg(not(CONFIG_TRACE_IRQFLAGS))]
    let _ = flags;
}

/// Entry of a trampoline's handler: tells lockdep about the trampoline's
/// `cli` ([`irqs_trace_enter`]) and reads the frame.
///
/// # Safety
///
/// `regs` is the `pt_regs` such a trampoline built; interrupts are off.
#[inline(always)]
pub(super) unsafe fn tramp_enter<'a>(
    regs: *mut bindings::pt_regs,
) -> (&'a mut bindings::pt_regs, TrampFrame) {
    // SAFETY: per the function's contract, `regs` holds the saved flags.
    unsafe { irqs_trace_enter((*regs).flags) };
    let resume_slot = (regs as usize + core::mem::size_of::<bindings::pt_regs>()) as *mut usize;
    // SAFETY: per the function's contract, the two words sit above `regs`.
    let (resume, addr) = unsafe { (*resume_slot, *resume_slot.add(1)) };
    let frame = TrampFrame {
        resume_slot,
        resume,
        addr,
        sp: resume_slot as usize + 16,
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
pub(super) unsafe fn tramp_leave(regs: &bindings::pt_regs, frame: &TrampFrame, to: usize) {
    // SAFETY: the slot is the return address of the trampoline's `ret`.
    unsafe { *frame.resume_slot = to };
    // SAFETY: per the function's contract.
    unsafe { irqs_trace_leave(regs.flags) };
}
