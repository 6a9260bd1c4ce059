// SPDX-License-Identifier: GPL-2.0

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
//! The end of a stepped copy without a second BRK.
//!
//! The kernel's arm64 kprobes end every out-of-line step with a second BRK
//! (`BRK64_OPCODE_KPROBES_SS`), a second exception per hit. Here the stepped
//! copy (which runs with all of DAIF masked, as theirs) is followed by
//!
//! ```text
//!   slot + 4   stp x0, x1, [sp, #-16]!
//!   slot + 8   ldr x0, slot + 24          // the probed address
//!   slot + 12  b   kp_arm64_post_common
//!   ...
//!   slot + 24  .quad addr
//! ```
//!
//! and `kp_arm64_post_common` saves a `struct pt_regs` (the state after the
//! instruction: every register, the stack pointer before the pair was
//! pushed, NZCV), calls [`kp_arm64_post_hit`], which finishes the step
//! through the core (`Core::on_step_jump`: the post handlers, the
//! PSTATE the BRK found, with the copy's flags) and leaves `pc` and
//! `pstate` in the frame, and returns there with `eret` (ELR/SPSR written
//! with interrupts still masked): no register is used up to reach an
//! arbitrary address. One exception per hit instead of two.

use crate::arch::Core;
use crate::entries::Engine;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::bindings;
use kernel::prelude::*;

core::arch::global_asm!(
    ".pushsection .text.kp_tramp, \"ax\", %progbits",
    ".globl kp_arm64_post_common",
    ".type kp_arm64_post_common, %function",
    ".balign 16",
    "kp_arm64_post_common:",
    // x0 = the probed address; [sp] = the copy's x0, x1; DAIF masked.
    "sub sp, sp, #{size}",
    regs_x2_x30!("stp", "str"),
    "ldp x2, x3, [sp, #{size}]",
    "stp x2, x3, [sp, #0]",
    "add x2, sp, #{size} + 16",
    "str x2, [sp, #248]",
    "mrs x2, nzcv",
    "str x2, [sp, #264]",
    "mov x1, x0",
    "mov x0, sp",
    "bl kp_arm64_post_hit",
    "ldr x0, [sp, #256]",
    "msr elr_el1, x0",
    "ldr x0, [sp, #264]",
    "msr spsr_el1, x0",
    regs_x2_x30!("ldp", "ldr"),
    // The stack pointer as before the pair was pushed (a post handler
    // cannot move it, see below); the frame is below it, interrupts are
    // masked until the eret.
    "ldr x0, [sp, #248]",
    "mov x1, sp",
    "mov sp, x0",
    "ldp x0, x1, [x1]",
    "eret",
    "dsb nsh",
    "isb",
    ".size kp_arm64_post_common, . - kp_arm64_post_common",
    ".popsection",
    size = const core::mem::size_of::<bindings::pt_regs>(),
);

extern "C" {
    fn kp_arm64_post_common();
}

/// Where a stepped copy branches.
pub(super) fn common() -> usize {
    kp_arm64_post_common as *const () as usize
}

/// PSTATE.M = EL1h with D, A, I, F set.
const EL1H_DAIF_MASKED: usize = 0x3c5;

/// Set once a post handler's move of the stack pointer was ignored.
static SP_REFUSED: AtomicBool = AtomicBool::new(false);

/// Called by `kp_arm64_post_common` with its frame and the probed address:
/// finishes the step (post handlers included) and leaves in the frame the
/// `pc` and `pstate` to return with.
///
/// # Safety
///
/// `regs` is the common code's frame; interrupts are masked; this CPU is
/// stepping `addr`'s copy.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_arm64_post_hit(regs: *mut bindings::pt_regs, addr: usize) {
    // SAFETY: per the function's contract.
    let regs = unsafe { &mut *regs };
    let sp = super::regs::sp(regs);
    // The frame has only the registers and NZCV: the core's end of the
    // step sets pc and the whole PSTATE. Should it find no step in
    // progress (it reports that), resume after the instruction at EL1h
    // with interrupts still masked rather than with whatever the stack held.
    super::regs::set_ip(regs, addr.wrapping_add(4));
    let flags = super::regs::flags(regs);
    super::regs::set_flags(regs, flags | EL1H_DAIF_MASKED);
    {
        // DAIF is masked; tell the kernel's IRQ-state tracking (see `IrqsOff`).
        let _off = super::IrqsOff::new();
        Engine::on_step_jump(addr, regs);
    }
    if super::regs::sp(regs) != sp {
        // The frame lies just below the stack pointer: returning with
        // another one is not done here. Only a new pc can be honoured.
        super::regs::set_sp(regs, sp);
        if !SP_REFUSED.swap(true, Ordering::Relaxed) {
            pr_err!(
                "probe at {:#x}: a post handler moved the stack pointer; ignored\n",
                addr
            );
        }
    }
}
