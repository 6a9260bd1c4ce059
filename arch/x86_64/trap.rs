// SPDX-License-Identifier: GPL-2.0

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
//! Trap entry: the die-notifier chain.
//!
//! `exc_int3()` -> `do_int3()` -> (the kernel's kprobes, which pass on
//! addresses they do not own) -> `notify_die(DIE_INT3)` -> our notifier block
//! (`arch/x86_64/helpers.c`) -> [`kp_x86_int3`]. `regs->ip` is the breakpoint
//! address + 1; returning true makes the notifier return `NOTIFY_STOP`, and
//! the CPU resumes at whatever `regs->ip` then holds.

use crate::arch::Core;
use crate::entries::Engine;
use kernel::bindings;
use kernel::prelude::*;

extern "C" {
    fn kp_helper_register_die_notifier(chain: kernel::ffi::c_ulong) -> kernel::ffi::c_int;
    fn kp_helper_unregister_die_notifier();
}

/// Called for every kernel or user `int3` that the kernel's own handlers did
/// not take. Returns whether it was ours.
///
/// # Safety
///
/// `regs` is the trap frame of the current CPU, interrupts off.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_x86_int3(regs: *mut bindings::pt_regs) -> bool {
    // SAFETY: per the function's contract.
    let regs = unsafe { &mut *regs };
    if super::regs::user_mode(regs) {
        return false;
    }
    let addr = regs.ip.wrapping_sub(1);
    if Engine::on_step_done(addr, regs) || Engine::on_break(addr, regs) {
        return true;
    }
    // One of our breakpoints may have been removed after this CPU hit it and
    // before we looked: then the original byte is back; run it (the kernel's
    // kprobes treat a vanished int3 the same way).
    // SAFETY: `addr` is the text byte that just trapped, so it is mapped.
    let now = unsafe { core::ptr::read_volatile(addr as *const u8) };
    if now != super::INT3 {
        regs.ip = addr;
        return true;
    }
    false
}

/// Called for a kernel #GP (`DIE_GPF`) or another trap reported through
/// `DIE_TRAP` (#DE, #BR, #SS, #NP, ...) that no fixup took. Returns whether
/// a probe's fault handler handled it (see [`Core::on_fault`]).
///
/// # Safety
///
/// As [`kp_x86_int3`].
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_x86_fault(regs: *mut bindings::pt_regs, trapnr: i32) -> bool {
    // SAFETY: per the function's contract.
    let regs = unsafe { &mut *regs };
    // An out-of-line copy always runs with IF clear. With IF set the trap
    // handler may already have enabled interrupts (cond_local_irq_enable),
    // so this is not ours and per-CPU state must not be touched. A double
    // fault is never recoverable.
    const X86_TRAP_DF: i32 = 8;
    if super::regs::user_mode(regs) || regs.flags & super::FLAGS_IF != 0 || trapnr == X86_TRAP_DF {
        return false;
    }
    Engine::on_fault(regs, trapnr)
}

pub(super) fn init() -> Result {
    // The die chain, to be first on it (`helpers.c`); registered the
    // usual way, after the other INT_MAX notifiers, without it.
    let chain = crate::symbols::lookup_name(kernel::c_str!("die_chain")).unwrap_or(0);
    // SAFETY: process context; the notifier block is static; `chain` is
    // the kernel's `die_chain` or 0.
    let r = unsafe { kp_helper_register_die_notifier(chain as kernel::ffi::c_ulong) };
    if r != 0 {
        return Err(Error::from_errno(r));
    }
    Ok(())
}

pub(super) fn exit() {
    // SAFETY: registered in `init`; this waits for running callbacks.
    unsafe { kp_helper_unregister_die_notifier() };
}
