// SPDX-License-Identifier: GPL-2.0

//! arm64 kretprobe return path: instance stubs and the trampoline.
//!
//! At the entry of a kretprobe'd function the return address is in x30; it
//! is replaced by the address of the instance's stub, a single
//! `b kp_arm64_kret_trampoline`. The function's `ret` lands on the stub
//! with x30 still holding the stub address, which identifies the instance.
//! The trampoline saves a `struct pt_regs`, masks interrupts, calls
//! [`kp_arm64_kret_return`] (which runs the handler through
//! `Core::on_return` and puts the real return address in x30
//! and pc), restores everything and returns there. Its frame record (x29
//! pointing at the saved x29/x30, x30 the real return address before the
//! handlers run) lets a stack trace taken in a handler reach the probed
//! function's caller.

use super::Arch;
use super::{decode, patch, KP_BRK_SS_IMM};
use crate::arch::Core;
use crate::arch::Returns;
use crate::entries::Engine;
use crate::slots;
use kernel::bindings;
use kernel::prelude::*;

core::arch::global_asm!(
    ".pushsection .text.kp_tramp, \"ax\", %progbits",
    ".globl kp_arm64_kret_trampoline",
    ".type kp_arm64_kret_trampoline, %function",
    ".balign 16",
    "kp_arm64_kret_trampoline:",
    "sub sp, sp, #{size}",
    "stp x0, x1, [sp, #0]",
    regs_x2_x30!("stp", "str"),
    "add x0, sp, #{size}",
    "str x0, [sp, #248]",
    "mrs x0, daif",
    "mrs x1, nzcv",
    "orr x0, x0, x1",
    "str x0, [sp, #264]",
    "msr daifset, #3",
    // A frame record for the unwinder: the saved x29 and x30 (which holds
    // the real return address before any handler runs), as the kernel's
    // own return trampoline does. x29 comes back with the other registers.
    "add x29, sp, #232",
    "mov x0, sp",
    "bl kp_arm64_kret_return",
    "ldr x0, [sp, #264]",
    "msr nzcv, x0",
    "and x0, x0, #0x3c0",
    "msr daif, x0",
    "ldp x0, x1, [sp, #0]",
    regs_x2_x30!("ldp", "ldr"),
    "add sp, sp, #{size}",
    "ret",
    ".size kp_arm64_kret_trampoline, . - kp_arm64_kret_trampoline",
    ".popsection",
    size = const core::mem::size_of::<bindings::pt_regs>(),
);

// Calls x2(x0, x1) with a frame record {x3, x4} under its own frame, so
// that the frame chain seen from the callee goes to x4's function next and
// then follows x3 (the real caller's frame). Its own x29/x30 are kept
// above the record and restored.
core::arch::global_asm!(
    ".pushsection .text.kp_tramp, \"ax\", %progbits",
    ".globl kp_arm64_kret_call",
    ".type kp_arm64_kret_call, %function",
    ".balign 8",
    "kp_arm64_kret_call:",
    // A landing pad and a signed return address (both hints: NOPs where
    // BTI or PAC are off).
    "hint #34", // bti c
    "hint #25", // paciasp
    "stp x29, x30, [sp, #-32]!",
    "stp x3, x4, [sp, #16]",
    "add x29, sp, #16",
    "blr x2",
    "ldp x29, x30, [sp], #32",
    "hint #29", // autiasp
    "ret",
    ".size kp_arm64_kret_call, . - kp_arm64_kret_call",
    ".popsection",
);

extern "C" {
    fn kp_arm64_kret_trampoline();
    fn kp_arm64_kret_call(
        inst: *mut crate::abi::KpKretprobeInstance,
        regs: *mut bindings::pt_regs,
        h: usize,
        fp: usize,
        ret: usize,
    ) -> kernel::ffi::c_int;
}

/// Called by the trampoline with the frame it built; returns the real
/// return address (also left in x30 and pc of the frame).
///
/// # Safety
///
/// `regs` is the trampoline's frame; x30 in it is the stub's address;
/// interrupts are masked.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_arm64_kret_return(regs: *mut bindings::pt_regs) -> usize {
    // SAFETY: per the function's contract.
    let regs = unsafe { &mut *regs };
    let stub = super::regs::x(regs, 30).unwrap_or(0);
    // DAIF is masked; tell the kernel's IRQ-state tracking (see `IrqsOff`).
    let _off = super::IrqsOff::new();
    // The frame record the trampoline made (its x29, x30) shows the real
    // return address to an unwinder in the handlers: x30 of `regs`.
    let lr = super::regs::x_ptr(regs, 30);
    // SAFETY: `lr` points into the trampoline's frame, live for this call;
    // written before the handlers see `regs`.
    let ret = Engine::on_return(slots::index_of(stub), regs, |ret| unsafe {
        lr.write(ret as u64)
    });
    super::regs::set_x(regs, 30, ret);
    ret
}

impl Returns for Arch {
    /// Writes the stub for its slot at `stub`: `b kp_arm64_kret_trampoline`.
    fn write_kret_stub(stub: usize, _index: usize) -> Result {
        let tramp = kp_arm64_kret_trampoline as *const () as usize;
        let b = decode::b(stub as u64, tramp as u64).ok_or(ERANGE)?;
        // SAFETY: a stub of a pool being built: published only after
        // `kret_stubs_written`.
        unsafe { patch::write_idle(stub, &[b, decode::brk(KP_BRK_SS_IMM)]) }
    }

    /// Refills a stub before its slot is reused.
    fn clear_kret_stub(stub: usize) {
        let brk = decode::brk(KP_BRK_SS_IMM);
        // SAFETY: the stub's pool is freed: no return goes there any more.
        let _ = unsafe { patch::write_idle(stub, &[brk, brk]) };
    }

    /// Every CPU synchronises before the new stubs are used.
    fn kret_stubs_written() {
        patch::sync_all();
    }

    /// The return address at a function's entry: x30.
    fn kret_return_address(regs: &bindings::pt_regs) -> usize {
        super::regs::x(regs, 30).unwrap_or(0)
    }

    /// Sends the function's return to `stub`.
    fn kret_hijack(regs: &mut bindings::pt_regs, stub: usize) {
        super::regs::set_x(regs, 30, stub);
    }

    /// Where the function graph tracer recorded this frame (its `retp`): the
    /// frame pointer at the function's entry (arm64 `prepare_ftrace_return()`
    /// passes the caller's x29); the probe sits before the prologue saves it.
    fn kret_graph_retp(regs: &bindings::pt_regs) -> usize {
        super::regs::x(regs, 29).unwrap_or(0)
    }

    /// x29.
    fn kret_frame_pointer(regs: &bindings::pt_regs) -> usize {
        super::regs::x(regs, 29).unwrap_or(0)
    }

    /// `pc`, `sp`, x29, x0 (and x30, the return address); PSTATE says EL1h
    /// with interrupts masked, as in the handler.
    fn kret_graph_regs(
        regs: &mut bindings::pt_regs,
        entry_sp: usize,
        entry_fp: usize,
        ret: usize,
        retval: usize,
    ) {
        super::regs::set_ip(regs, ret);
        super::regs::set_sp(regs, entry_sp);
        super::regs::set_x(regs, 29, entry_fp);
        super::regs::set_x(regs, 30, ret);
        super::regs::set_x(regs, 0, retval);
        // PSR_MODE_EL1h | PSR_I_BIT | PSR_F_BIT | PSR_D_BIT | PSR_A_BIT.
        super::regs::set_flags(regs, 0x5 | 0x3c0);
    }

    /// Through `kp_arm64_kret_call`, which makes a frame record
    /// `{fp, ret}` for the handler's frame to chain to, as the return
    /// trampoline does: an unwinder in the handler reaches the real caller
    /// (the frames of fgraph's `return_to_handler` path are skipped, as the
    /// kernel's own return trampoline skips nothing but itself).
    unsafe fn kret_call_handler(
        h: crate::abi::KretHandler,
        inst: &mut crate::abi::KpKretprobeInstance,
        regs: &mut bindings::pt_regs,
        fp: usize,
    ) {
        let ret = super::regs::ip(regs);
        // SAFETY: per the function's contract; the shim only adds a frame
        // record below its own and restores x29/x30.
        unsafe { kp_arm64_kret_call(inst, regs, h as usize, fp, ret) };
    }
}
