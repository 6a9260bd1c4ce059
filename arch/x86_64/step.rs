// SPDX-License-Identifier: GPL-2.0

//! Running a prepared instruction at a hit: emulation, the out-of-line
//! step and its end, boosting; and the instruction queries
//! (`kp_decode_insn()`, direct branch targets for the blacklist).

use super::*;

/// `X86_EFLAGS_IF`.
pub(super) const FLAGS_IF: usize = 1 << 9;

impl Steps for Arch {
    /// Emulates the instruction in place of the step (branches, calls,
    /// returns); returns false when it must run out of line instead.
    #[inline(always)]
    fn simulate(addr: usize, insn: &ArchInsn, regs: &mut bindings::pt_regs) -> bool {
        match insn.emulate {
            Some(op) => {
                emulate::run(op, addr, insn.len as usize, regs);
                true
            }
            None => false,
        }
    }

    /// Sends the CPU to the out-of-line copy with interrupts off.
    fn setup_step(_addr: usize, insn: &ArchInsn, regs: &mut bindings::pt_regs, saved: &mut usize) {
        *saved = regs.flags & FLAGS_IF;
        regs.flags &= !FLAGS_IF;
        regs.ip = insn.slot;
    }

    /// Whether `ip` lies in `insn`'s out-of-line copy (a fault while stepping).
    fn in_copy(ip: usize, insn: &ArchInsn) -> bool {
        insn.slot != 0 && ip >= insn.slot && ip < insn.slot + insn.len as usize
    }

    /// Gives up a step that faulted: restores what [`setup_step`] saved (the
    /// caller sets the instruction pointer).
    fn abort_step(_insn: &ArchInsn, regs: &mut bindings::pt_regs, saved: usize) {
        regs.flags |= saved;
    }

    /// Whether a breakpoint at `trap_addr` is the one that ends `insn`'s copy
    /// (never for a copy with the [`post`] tail).
    fn is_step_done(trap_addr: usize, insn: &ArchInsn) -> bool {
        insn.slot != 0 && !insn.post_tail && trap_addr == insn.slot + insn.len as usize
    }

    /// Resumes after the original instruction.
    fn finish_step(addr: usize, insn: &ArchInsn, regs: &mut bindings::pt_regs, saved: usize) {
        regs.ip = addr + insn.len as usize;
        regs.flags |= saved;
    }

    /// Whether `insn` can be boosted (see [`decode::can_boost`]).
    fn boostable(insn: &ArchInsn) -> bool {
        insn.boostable
    }

    /// Resumes in the boosted copy: interrupts as they were, no second trap.
    /// The slot may then be executing with preemption possible; see
    /// `src/slots.rs` for when it can be reused.
    fn setup_boost(_addr: usize, insn: &ArchInsn, regs: &mut bindings::pt_regs) {
        regs.ip = insn.slot + BOOST_OFF;
    }

    /// Describes the instruction at `addr` (`kp_decode_insn()`).
    fn describe(addr: usize) -> Result<crate::arch::InsnInfo> {
        // The original bytes, with our own breakpoints and jumps undone.
        let b = {
            let g = crate::lock::RegGuard::lock();
            read_text(&g, addr)?
        };
        let i = decode(&b).map_err(|_| crate::errno::eilseq())?;
        Ok(crate::arch::InsnInfo {
            len: i.len as usize,
            call: matches!(i.class, Class::CallRel | Class::CallIndirect),
            target: i.rel_target(addr as u64, &b).map(|t| t as usize),
        })
    }

    /// Calls `f` with the target of every direct `call`/`jmp`/`jcc` in
    /// `[start, end)`, decoding linearly (padding decodes as one-byte int3 or
    /// NOPs; an undecodable byte is skipped). Process context.
    fn for_each_direct_branch(start: usize, end: usize, mut f: impl FnMut(usize)) {
        let mut at = start;
        while at < end {
            let mut b = [0u8; MAX_INSN_LEN];
            // Not past `end`: the text after the last function may be unmapped.
            let n = (end - at).min(b.len());
            // SAFETY: a nofault read of kernel text into a local of at least
            // `n` bytes.
            let r = unsafe {
                bindings::copy_from_kernel_nofault(b.as_mut_ptr().cast(), at as *const _, n)
            };
            if r != 0 {
                return;
            }
            match decode(&b) {
                Ok(i) => {
                    // Conditional jumps too: compilers make conditional tail
                    // calls (`jne rcu_read_unlock_special` in __rcu_read_unlock).
                    if matches!(i.class, Class::CallRel | Class::JmpRel | Class::Jcc) {
                        if let Some(t) = i.rel_target(at as u64, &b) {
                            f(t as usize);
                        }
                    }
                    at += i.len as usize;
                }
                Err(_) => at += 1,
            }
        }
    }
}
