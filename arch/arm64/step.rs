// SPDX-License-Identifier: GPL-2.0

//! Running a prepared instruction at a hit: simulation, the out-of-line
//! step and the boost, and instruction queries.

use super::*;

impl Steps for Arch {
    /// Runs a simulated instruction in place. Returns false when the instruction
    /// must run out of line.
    #[inline(always)]
    fn simulate(addr: usize, insn: &ArchInsn, regs: &mut bindings::pt_regs) -> bool {
        if !insn.simulated {
            return false;
        }
        simulate::run(decode::classify(insn.orig), addr, regs);
        true
    }

    /// Sends the CPU to the stepped copy with all of DAIF masked, as the
    /// kernel's arm64 kprobes do (nothing may run between the copy and the end
    /// of the step); `saved` keeps the whole PSTATE the BRK found.
    fn setup_step(_addr: usize, insn: &ArchInsn, regs: &mut bindings::pt_regs, saved: &mut usize) {
        let pstate = regs::flags(regs);
        *saved = pstate;
        regs::set_flags(regs, pstate | DAIF_MASK);
        regs::set_ip(regs, insn.slot);
    }

    /// Whether `pc` is `insn`'s out-of-line copy (a fault while stepping,
    /// reported by the `do_mem_abort()` hook: `trap::kp_arm64_fault`).
    fn in_copy(pc: usize, insn: &ArchInsn) -> bool {
        insn.slot != 0 && (pc == insn.slot || pc == insn.slot + BOOST_OFF)
    }

    /// Gives up a step that faulted: restores what [`setup_step`] saved (the
    /// caller sets the program counter).
    fn abort_step(_insn: &ArchInsn, regs: &mut bindings::pt_regs, saved: usize) {
        let pstate = regs::flags(regs);
        regs::set_flags(regs, (pstate & !DAIF_MASK) | (saved & DAIF_MASK));
    }

    /// Whether a BRK at `trap_addr` ends `insn`'s copy: never, stepped copies
    /// end in the post trampoline ([`post`]).
    fn is_step_done(_trap_addr: usize, _insn: &ArchInsn) -> bool {
        false
    }

    /// Resumes after the original instruction with the PSTATE the BRK found
    /// (DAIF, PAN, ...; no BTYPE: the next instruction is reached in sequence)
    /// and the flags the copy left.
    fn finish_step(addr: usize, _insn: &ArchInsn, regs: &mut bindings::pt_regs, saved: usize) {
        let flags = regs::flags(regs) & NZCV_MASK;
        regs::set_flags(regs, (saved & !(NZCV_MASK | BTYPE_MASK)) | flags);
        regs::set_ip(regs, addr + 4);
    }

    /// Whether the copy may run boosted: every instruction that runs out of
    /// line at all (the PC-relative ones are simulated, exclusives, system
    /// register writes and exception generators refused), once a `B` from the
    /// slot reaches the next original instruction.
    fn boostable(insn: &ArchInsn) -> bool {
        insn.boost
    }

    /// Resumes in the boosted copy with DAIF as the trap found it: the copy
    /// runs as the original would have, interrupts and preemption included
    /// (so the slot is reused only after every task left it, see
    /// `src/slots.rs`), and branches back.
    fn setup_boost(_addr: usize, insn: &ArchInsn, regs: &mut bindings::pt_regs) {
        regs::set_ip(regs, insn.slot + BOOST_OFF);
    }

    /// Describes the instruction at `addr` (`kp_decode_insn()`).
    fn describe(addr: usize) -> Result<crate::arch::InsnInfo> {
        if addr % 4 != 0 {
            return Err(EINVAL);
        }
        // The original instruction, with our own BRK or jump undone.
        let w = {
            let g = crate::lock::RegGuard::lock();
            read_insn(&g, addr)?
        };
        let class = decode::classify(w);
        let branch = matches!(
            class,
            Class::B { .. }
                | Class::Bl { .. }
                | Class::BCond { .. }
                | Class::Cbz { .. }
                | Class::Tbz { .. }
        );
        Ok(crate::arch::InsnInfo {
            len: 4,
            call: matches!(class, Class::Bl { .. } | Class::Blr { .. }),
            target: class
                .target(addr as u64)
                .filter(|_| branch)
                .map(|t| t as usize),
        })
    }

    /// Calls `f` with the target of every direct branch (`b`, `bl`) in
    /// `[start, end)`; for a branch to a module PLT entry (a module's call
    /// out of a `bl`'s reach: KASLR), where the entry goes. Process context.
    fn for_each_direct_branch(start: usize, end: usize, mut f: impl FnMut(usize)) {
        let mut at = (start + 3) & !3;
        while at + 4 <= end {
            let Some([w]) = read_words::<1>(at) else {
                return;
            };
            // Conditional branches too: compilers make conditional tail calls.
            if let Class::B { offset }
            | Class::Bl { offset }
            | Class::BCond { offset, .. }
            | Class::Cbz { offset, .. }
            | Class::Tbz { offset, .. } = decode::classify(w)
            {
                let t = (at as i64).wrapping_add(offset) as usize;
                // With kCFI the word before each function is its type hash,
                // and a symbol's size reaches up to the next symbol: the
                // last word of the range may be the next function's hash,
                // which can decode as a branch anywhere (a TBNZ into the
                // engine's module init, on arm64-hardened). Taken there
                // only when it lands on a symbol's start (a tail call).
                if cfg!(CONFIG_CFI_CLANG)
                    && at + 4 == end
                    && !crate::symbols::bounds(t).is_some_and(|b| b.start == t)
                {
                    return; // the range's last word: nothing follows
                }
                let plt = if (start..end).contains(&t) {
                    None
                } else {
                    read_words::<3>(t).and_then(|v| decode::plt_target(v, t as u64))
                };
                f(plt.map_or(t, |d| d as usize));
            }
            at += 4;
        }
    }
}
