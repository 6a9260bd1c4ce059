// SPDX-License-Identifier: GPL-2.0

//! x86_64 kretprobe return path: instance stubs and the trampoline.
//!
//! At the entry of a kretprobe'd function the return address is the word at
//! the stack pointer; it is replaced by the address of the instance's stub:
//!
//! ```text
//! stub:  push $slot_index          68 imm32
//!        jmp  kp_x86_kret_trampoline   e9 rel32
//! ```
//!
//! The trampoline builds a `struct pt_regs` above which the pushed index
//! sits, disables interrupts, and calls [`kp_x86_kret_return`], which runs
//! the handler (`Core::on_return`) and overwrites the index slot
//! with the real return address; the trampoline then restores every
//! register and flag and returns there. Like the kernel's
//! `arch_rethook_trampoline`, it carries unwind hints (`trampolines.S`).

use super::Arch;
use crate::arch::Core;
use crate::arch::Returns;
use crate::entries::Engine;
use crate::text;
use kernel::bindings;
use kernel::prelude::*;

extern "C" {
    fn kp_x86_kret_trampoline();
    fn kp_helper_sync_all_cores();
}

/// Size of `struct pt_regs`: the index slot sits right above it.
const PT_REGS_SIZE: usize = core::mem::size_of::<bindings::pt_regs>();

/// Called by the trampoline with the frame it built.
///
/// # Safety
///
/// `regs` is the trampoline's `pt_regs`, with the stub's index in the word
/// above it; interrupts are off.
#[no_mangle]
// In the trampolines' page (`trampolines.S`): their call is a direct jump.
#[link_section = ".text.kp_tramp"]
pub(crate) unsafe extern "C" fn kp_x86_kret_return(regs: *mut bindings::pt_regs) {
    let slot = (regs as usize + PT_REGS_SIZE) as *mut usize;
    // SAFETY: per the function's contract.
    let (regs, index) = unsafe { (&mut *regs, *slot) };
    // The caller's view: the stack pointer after the return.
    regs.sp = slot as usize + 8;
    let flags = regs.flags;
    let mut irqs = None;
    // The index slot becomes the address the trampoline returns to, before
    // the handler runs: the trampoline's unwind data (`trampolines.S`)
    // finds its return address there. Then lockdep learns of the
    // trampoline's `cli` (anything it calls may take a stack trace).
    let ret = Engine::on_return(index, regs, |ret| {
        // SAFETY: the slot is the trampoline's, above `regs`.
        unsafe { *slot = ret };
        // SAFETY: interrupts are off; paired below.
        irqs = Some(unsafe { super::irqs_trace_enter(flags) });
    });
    // SAFETY: as above.
    unsafe { *slot = ret };
    if let Some(t) = irqs {
        // SAFETY: interrupts stay off until the trampoline's `popfq`.
        unsafe { super::irqs_trace_leave(t) };
    }
}

impl Returns for Arch {
    /// Writes the stub for slot `index` at `stub`.
    fn write_kret_stub(stub: usize, index: usize) -> Result {
        let tramp = kp_x86_kret_trampoline as *const () as usize;
        let idx = index as u32;
        let mut code = [0u8; 10];
        code[0] = 0x68;
        code[1..5].copy_from_slice(&idx.to_le_bytes());
        super::put_rel32(&mut code, 5, 0xe9, stub, tramp)?;
        // SAFETY: a stub of a pool being built: published only after
        // `kret_stubs_written`.
        unsafe { text::write(stub, &code) }
    }

    /// Refills a stub with int3 before its slot is reused.
    fn clear_kret_stub(stub: usize) {
        // SAFETY: the stub's pool is freed: no return goes there any more.
        let _ = unsafe { text::write(stub, &[super::INT3; 10]) };
    }

    /// Makes every CPU see freshly written stubs.
    fn kret_stubs_written() {
        // SAFETY: process context.
        unsafe { kp_helper_sync_all_cores() };
    }

    /// The return address at a function's entry (trap frame of its probe).
    fn kret_return_address(regs: &bindings::pt_regs) -> usize {
        // SAFETY: at the entry `sp` points at the return address.
        unsafe { *(regs.sp as *const usize) }
    }

    /// Sends the function's return to `stub`.
    fn kret_hijack(regs: &mut bindings::pt_regs, stub: usize) {
        // SAFETY: at the entry `sp` points at the return address.
        unsafe { *(regs.sp as *mut usize) = stub };
    }

    /// Where the function graph tracer recorded this frame (its `retp`): the
    /// return address slot, at the stack pointer on entry.
    fn kret_graph_retp(regs: &bindings::pt_regs) -> usize {
        regs.sp
    }

    /// `bp` (callee-saved).
    fn kret_frame_pointer(regs: &bindings::pt_regs) -> usize {
        regs.bp
    }

    /// `ip`, `sp` past the popped return address, `bp`, `ax`; kernel `cs`
    /// and `ss`, flags with only the fixed bit.
    fn kret_graph_regs(
        regs: &mut bindings::pt_regs,
        entry_sp: usize,
        entry_fp: usize,
        ret: usize,
        retval: usize,
    ) {
        regs.ip = ret as _;
        regs.sp = entry_sp.wrapping_add(8) as _;
        regs.bp = entry_fp as _;
        regs.ax = retval as _;
        // __KERNEL_CS, __KERNEL_DS, X86_EFLAGS_FIXED.
        regs.__bindgen_anon_1.cs = 0x10;
        regs.__bindgen_anon_2.ss = 0x18;
        regs.flags = 0x2;
    }
}
