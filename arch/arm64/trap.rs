// SPDX-License-Identifier: GPL-2.0

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
//! Trap entry: kernel BRKs, seen first through an ftrace_ops on
//! `do_el1_brk64(esr, regs)` (see `helpers.c` for why), and kernel aborts
//! through one on `do_mem_abort(far, esr, regs)` (fault handlers). For a BRK with our
//! immediate at one of our addresses we run the engine and return true; the
//! C glue then skips the kernel's dispatcher. `regs->pc` is the BRK itself
//! (a BRK does not advance the PC); the exception returns to whatever
//! `regs->pc` holds afterwards.

use super::{decode, regs, KP_BRK_IMM, KP_BRK_REDIRECT_IMM, KP_BRK_SS_IMM};
use crate::arch::Core;
use crate::entries::Engine;
use kernel::bindings;
use kernel::prelude::*;

extern "C" {
    fn kp_helper_arm64_brk_hook_init() -> kernel::ffi::c_int;
    fn kp_helper_arm64_brk_hook_exit();
}

/// Called for a kernel-mode abort taken with interrupts masked, before the
/// kernel's `do_mem_abort()` handles it (`helpers.c`). A fault in one of the
/// engine's stepped copies, or in a pre or post handler, goes to the probes'
/// fault handlers (`Core::on_fault`) with the exception class (`ESR_ELx.EC`,
/// 0x25 for a data abort at EL1) as the trap number; true: they fixed it and
/// the kernel's handling is skipped. Faults at an instruction with an
/// exception-table fixup (the nofault readers, user access) stay the
/// kernel's, as do faults in boosted copies (the hit is over when they run,
/// as on x86_64).
///
/// # Safety
///
/// `regs` is the exception frame of the current CPU; interrupts masked.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_arm64_fault(esr: usize, regs: *mut bindings::pt_regs) -> bool {
    if !Engine::in_hit() {
        return false;
    }
    // SAFETY: per the function's contract.
    let regs = unsafe { &mut *regs };
    if crate::symbols::has_extable_entry(regs::ip(regs)) {
        return false;
    }
    Engine::on_fault(regs, ((esr >> 26) & 0x3f) as i32)
}

/// Called for every kernel BRK before the kernel's dispatcher. Returns
/// whether it was ours and is handled.
///
/// # Safety
///
/// `regs` is the exception frame of the current CPU, interrupts masked.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_arm64_brk(esr: usize, regs: *mut bindings::pt_regs) -> bool {
    let imm = (esr & 0xffff) as u16;
    if imm != KP_BRK_IMM && imm != KP_BRK_SS_IMM && imm != KP_BRK_REDIRECT_IMM {
        return false;
    }
    // SAFETY: per the function's contract.
    let regs = unsafe { &mut *regs };
    let pc = regs::ip(regs);
    if imm == KP_BRK_REDIRECT_IMM {
        // A jump-optimized probe's handler redirected execution (`opt.rs`).
        if !super::opt::take_redirect(regs) {
            return false;
        }
    } else if imm == KP_BRK_SS_IMM {
        // Not ours (a stale branch into a freed slot): the kernel's
        // dispatcher reports it.
        if !Engine::on_step_done(pc, regs) {
            return false;
        }
    } else if !Engine::on_break(pc, regs) {
        // Our BRK may have been removed after this CPU took it: the original
        // instruction is back, so return and run it.
        // SAFETY: `pc` is the kernel text word that just trapped.
        let now = unsafe { core::ptr::read_volatile(pc as *const u32) };
        return now != decode::brk(KP_BRK_IMM);
    }
    // The exception returns somewhere else than the BRK (a slot, the next
    // instruction, a simulated branch's target, a handler's new pc), as if
    // reached in sequence: the BTYPE of the branch that led to the probed
    // instruction (a function's `bti c` reached by `blr`) must not make the
    // first instruction there fault on a BTI kernel. The probed address
    // itself passed the check (a BRK is valid at any landing pad).
    regs::set_flags(regs, regs::flags(regs) & !super::BTYPE_MASK);
    true
}

pub(super) fn init() -> Result {
    // SAFETY: process context; the ftrace_ops is static.
    let r = unsafe { kp_helper_arm64_brk_hook_init() };
    if r != 0 {
        pr_err!("arm64: cannot hook do_el1_brk64 through ftrace: {}\n", r);
        return Err(Error::from_errno(r));
    }
    Ok(())
}

pub(super) fn exit() {
    // SAFETY: registered in `init`; unregistering waits for callbacks.
    unsafe { kp_helper_arm64_brk_hook_exit() };
}
