// SPDX-License-Identifier: GPL-2.0

//! The register-saving trampolines' common code: the `pt_regs_trampoline!`
//! body (kretprobe return, jump-optimization detour, post tail, ftrace
//! direct call) and the Rust side of entering and leaving such a frame.

use super::*;

/// The body of the kretprobe and detour trampolines: builds a `struct
/// pt_regs` below the words the trampoline's entry pushed (`sp` and `ip` are
/// for the callee to fill in), masks interrupts, calls `$handler(regs)`,
/// then restores every register and the flags and drops the frame, leaving
/// the stack pointer at those words (`lea`, so the flags stay restored).
macro_rules! pt_regs_trampoline {
    ($handler:literal) => {
        concat!(
            "pushq $0x18\n", // ss
            "pushq %rsp\n",  // sp
            "pushfq\n",
            "cli\n",
            "pushq $0x10\n", // cs
            "pushq $0\n",    // ip
            "pushq $-1\n",   // orig_ax
            "pushq %rdi\n",
            "pushq %rsi\n",
            "pushq %rdx\n",
            "pushq %rcx\n",
            "pushq %rax\n",
            "pushq %r8\n",
            "pushq %r9\n",
            "pushq %r10\n",
            "pushq %r11\n",
            "pushq %rbx\n",
            "pushq %rbp\n",
            "pushq %r12\n",
            "pushq %r13\n",
            "pushq %r14\n",
            "pushq %r15\n",
            "movq %rsp, %rdi\n",
            "call ",
            $handler,
            "\n",
            "popq %r15\n",
            "popq %r14\n",
            "popq %r13\n",
            "popq %r12\n",
            "popq %rbp\n",
            "popq %rbx\n",
            "popq %r11\n",
            "popq %r10\n",
            "popq %r9\n",
            "popq %r8\n",
            "popq %rax\n",
            "popq %rcx\n",
            "popq %rdx\n",
            "popq %rsi\n",
            "popq %rdi\n",
            "addq $24, %rsp\n", // orig_ax, ip, cs
            "popfq\n",
            "leaq 16(%rsp), %rsp\n", // sp, ss
        )
    };
}

/// A call from a [`pt_regs_trampoline!`] reached by `push $addr; call`
/// (the jump-optimization detour, the post tail): the words above its
/// `pt_regs`.
pub(super) struct TrampFrame {
    /// The word the `call` pushed: where the trampoline's `ret $8` goes.
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

/// Entry of a trampoline's handler: tells lockdep about the trampoline's
/// `cli` (as `local_irq_save()` would) and reads the frame.
///
/// # Safety
///
/// `regs` is the `pt_regs` such a trampoline built; interrupts are off.
#[inline(always)]
pub(super) unsafe fn tramp_enter<'a>(
    regs: *mut bindings::pt_regs,
) -> (&'a mut bindings::pt_regs, TrampFrame) {
    #[cfg(CONFIG_TRACE_IRQFLAGS)]
    // SAFETY: interrupts are off.
    unsafe {
        trace_hardirqs_off()
    };
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
    #[cfg(CONFIG_TRACE_IRQFLAGS)]
    if regs.flags & FLAGS_IF != 0 {
        // SAFETY: interrupts are still off until the `popfq`.
        unsafe { trace_hardirqs_on() };
    }
    #[cfg(not(CONFIG_TRACE_IRQFLAGS))]
    let _ = regs;
}
