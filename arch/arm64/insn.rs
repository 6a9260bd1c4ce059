// SPDX-License-Identifier: GPL-2.0

//! Preparing a probed instruction: classifying it, building its slot
//! (the stepped copy, the boosted copy), and writing and removing its BRK.

use super::*;

impl Insns for Arch {
    type Insn = ArchInsn;

    const SLOT_SIZE: usize = SLOT_SIZE;

    const NSLOTS: usize = NSLOTS;

    const POINT_MAX_SIZE: usize = POINT_MAX_SIZE;

    const INSN_ALIGN: usize = 4;

    /// Decodes and classifies the instruction at `addr`, and prepares its slot
    /// unless it is simulated.
    fn prepare(g: &RegGuard, addr: usize, fstart: usize, _fsize: usize) -> Result<ArchInsn> {
        if addr % 4 != 0 {
            pr_err!("arm64: {:#x} is not on an instruction boundary\n", addr);
            return Err(crate::errno::eilseq());
        }
        // kCFI: the word before a function is its type hash, data that
        // every indirect call to the function reads and compares
        // (`ldur w16, [x, #-4]`); kallsyms counts it in the symbol before.
        // A BRK there fails every such call's check (a CFI oops: kp_mass
        // drew the hash of `save_return_addr` on arm64-hardened).
        if cfg!(CONFIG_CFI_CLANG)
            && crate::symbols::bounds(addr + 4).is_some_and(|b| b.start == addr + 4)
        {
            pr_err!(
                "arm64: {:#x} is the kCFI type hash before a function, not code\n",
                addr
            );
            return Err(EINVAL);
        }
        let orig = read_insn(g, addr)?;
        let class = decode::classify(orig);
        if let Class::Reject(why) = class {
            pr_err!(
                "arm64: cannot probe {:#010x} at {:#x}: {}\n",
                orig,
                addr,
                why.describe()
            );
            return Err(crate::errno::eopnotsupp());
        }
        if decode::is_brk(orig).is_some() {
            pr_err!("arm64: {:#x} already holds someone else's BRK\n", addr);
            return Err(EBUSY);
        }
        // Inside a load/store-exclusive sequence the trap would clear the
        // exclusive monitor and the sequence would retry forever.
        let mut before = [0u32; decode::MAX_ATOMIC_CONTEXT];
        let n = core::cmp::min((addr - fstart) / 4, decode::MAX_ATOMIC_CONTEXT);
        let ctx = &mut before[decode::MAX_ATOMIC_CONTEXT - n..];
        for (i, w) in ctx.iter_mut().enumerate() {
            *w = read_insn(g, addr - (n - i) * 4)?;
        }
        if decode::in_exclusive_sequence(ctx) {
            pr_err!(
                "arm64: {:#x} is inside a load/store-exclusive sequence\n",
                addr
            );
            return Err(crate::errno::eopnotsupp());
        }
        let mut insn = ArchInsn {
            orig,
            simulated: class.is_simulated(),
            slot: 0,
            boost: false,
        };
        if !class.is_simulated() {
            let slot = slots::alloc().ok_or(ENOSPC)?;
            let Some((words, boost)) = slot_words(orig, addr, slot) else {
                slots::free(slot);
                pr_err!("arm64: the post trampoline is out of a branch's reach\n");
                return Err(ERANGE);
            };
            // Published by `arm`, whose stop_machine() makes every CPU
            // synchronise before the BRK can send one here.
            // SAFETY: a slot just allocated; nothing branches there yet.
            if let Err(e) = unsafe { patch::write_idle(slot, &words) } {
                slots::free(slot);
                return Err(e);
            }
            insn.slot = slot;
            insn.boost = boost;
        }
        Ok(insn)
    }

    /// Gives back the resources of a prepared instruction.
    fn release(insn: ArchInsn) {
        if insn.slot != 0 {
            if insn.boost {
                // A task may be preempted inside the boosted copy: the slot is
                // refilled and reused only after every task left it.
                slots::free_deferred(insn.slot);
            } else {
                Self::clear_slot(insn.slot);
                slots::free(insn.slot);
            }
        }
    }

    /// Refills a slot with BRKs nobody claims (a stale branch into it stops
    /// loudly).
    fn clear_slot(slot: usize) {
        let brk = decode::brk(KP_BRK_SS_IMM);
        // SAFETY: a freed slot: nothing branches there (every task left it).
        let _ = unsafe { patch::write_idle(slot, &[brk; SLOT_SIZE / 4]) };
    }

    /// Writes the BRK over the original instruction; `EBUSY` when the text
    /// no longer holds it (someone else patched it while the probe was
    /// disarmed: theirs stays).
    fn arm(addr: usize, insn: &ArchInsn) -> Result {
        // SAFETY: `addr` is the instruction `prepare` decoded and validated
        // (the registry arms only prepared points); every CPU is stopped.
        unsafe { patch::write_insns(addr, &[insn.orig], &[decode::brk(KP_BRK_IMM)]) }
    }

    /// Restores the original instruction over the engine's BRK; `EBUSY` when
    /// someone else's patch is on top of it.
    fn disarm(addr: usize, insn: &ArchInsn) -> Result {
        // SAFETY: as in `arm`: the original instruction goes back.
        unsafe { patch::write_insns(addr, &[decode::brk(KP_BRK_IMM)], &[insn.orig]) }
    }
}
