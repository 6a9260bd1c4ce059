// SPDX-License-Identifier: GPL-2.0

//! The core's side of the arch contract ([`Core`]): what the backend's trap
//! glue and trampolines call, bound to the engine's modules here and
//! nowhere else.

use crate::arch::{ArchInsn, Core, OptInsn, OptPoint};
use crate::lock::RegGuard;
use kernel::bindings::pt_regs;

/// The engine, as its backend sees it.
pub(crate) struct Engine;

impl Core for Engine {
    fn patch_at(_g: &RegGuard, addr: usize) -> Option<(ArchInsn, Option<OptInsn>)> {
        let p = crate::registry::lookup(addr)?;
        Some((p.insn, p.opt.jumped().then(|| p.opt.insn())))
    }

    #[inline(always)]
    fn on_break(addr: usize, regs: &mut pt_regs) -> bool {
        crate::hit::on_break(addr, regs)
    }

    #[inline(always)]
    fn on_step_done(addr: usize, regs: &mut pt_regs) -> bool {
        crate::hit::on_step_done(addr, regs)
    }

    #[inline(always)]
    fn on_step_jump(addr: usize, regs: &mut pt_regs) -> usize {
        crate::hit::on_step_jump(addr, regs)
    }

    #[inline(always)]
    fn on_fault(regs: &mut pt_regs, trapnr: i32) -> bool {
        crate::hit::on_fault(regs, trapnr)
    }

    #[inline(always)]
    fn in_hit() -> bool {
        crate::hit::in_hit()
    }

    #[inline(always)]
    unsafe fn on_ftrace(ip: usize, regs: &mut pt_regs, direct: bool) {
        // SAFETY: the caller's contract is the callee's.
        unsafe { crate::hit::on_ftrace(ip, regs, direct) }
    }

    #[inline(always)]
    fn on_jump<G>(addr: usize, regs: &mut pt_regs, enter: impl FnOnce() -> G) -> bool {
        crate::hit::on_jump(addr, regs, enter)
    }

    #[inline(always)]
    fn on_return(index: usize, regs: &mut pt_regs, publish: impl FnOnce(usize)) -> usize {
        crate::kretprobe::on_return(index, regs, publish)
    }
}
