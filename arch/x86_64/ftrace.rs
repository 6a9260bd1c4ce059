// SPDX-License-Identifier: GPL-2.0

//! Function-entry probes through an ftrace direct call: the site of a
//! probed function's entry (`call __fentry__`) calls
//! `kp_x86_ftrace_direct` itself (`src/ftrace.c` registers the per-site
//! direct `ftrace_ops`), instead of ftrace's `ftrace_regs_caller` and the
//! engine's callback. No trap, no ftrace list walk, no recursion bits.
//!
//! ```text
//! entry:  [rsp] = site + 5 (the call's return), [rsp + 8] = the caller's
//!         return address
//!   pushq (%rsp)        [rsp] = site + 5: where the trampoline returns
//!   subq $5, 8(%rsp)    [rsp + 8] = site: the probed address
//!   (pt_regs, as the jump-optimization detour builds it; interrupts off)
//!   call kp_x86_ftrace_hit
//!   (registers back from pt_regs)
//!   ret $8              to the function past the site, or where a pre
//!                       handler redirected; drops the probed-address word
//! ```
//!
//! The `subq` changes the flags at a function entry, where no code relies
//! on them (a call clobbers them). The handlers see the kernel's
//! kprobes-on-ftrace view (`crate::hit::on_ftrace`): the instruction pointer
//! one past the site and the stack pointer at the site (the caller's return
//! address on top). When another ftrace user traces the function as well,
//! `ftrace_regs_caller` runs its callbacks and jumps here with the same
//! stack.

use kernel::bindings;

core::arch::global_asm!(
    ".pushsection .text.kp_kret, \"ax\", @progbits",
    ".globl kp_x86_ftrace_direct",
    ".type kp_x86_ftrace_direct, @function",
    ".p2align 4",
    "kp_x86_ftrace_direct:",
    "pushq (%rsp)",
    "subq $5, 8(%rsp)",
    pt_regs_trampoline!("kp_x86_ftrace_hit"),
    "ret $8",
    "int3",
    ".size kp_x86_ftrace_direct, . - kp_x86_ftrace_direct",
    ".popsection",
    ".pushsection .discard.func_stack_frame_non_standard, \"aw\"",
    ".long kp_x86_ftrace_direct - .",
    ".popsection",
    options(att_syntax),
);

/// Called by `kp_x86_ftrace_direct` with the frame it built.
///
/// # Safety
///
/// `regs` is the trampoline's `pt_regs`, with the resume address and the
/// probed address in the two words above it; interrupts are off.
#[no_mangle]
unsafe extern "C" fn kp_x86_ftrace_hit(regs: *mut bindings::pt_regs) {
    // SAFETY: per the function's contract.
    let (regs, f) = unsafe { super::tramp_enter(regs) };
    // As ftrace's saved registers show the site: the stack pointer there,
    // the instruction pointer past it.
    regs.sp = f.sp;
    regs.ip = f.resume;
    // SAFETY: interrupts are off (the trampoline masked them).
    unsafe { crate::hit::on_ftrace(f.addr, regs, true) };
    let to = regs.ip;
    // SAFETY: as above.
    unsafe { super::tramp_leave(regs, &f, to) };
}
