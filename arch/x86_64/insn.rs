// SPDX-License-Identifier: GPL-2.0

//! Preparing a probed instruction: decoding it from the function's start,
//! refusing what cannot run out of line or be emulated, building its slot
//! (the step copy, the boosted copy, the post tail), and writing and
//! removing its int3.

use super::*;
use crate::arch::{Core, Jumps};
use crate::entries::Engine;

extern "C" {
    fn kp_helper_sync_all_cores();
}

/// Reads up to `MAX_INSN_LEN` bytes of text at `addr`, with the original
/// bytes in place of our own breakpoints and jumps. Registration lock held
/// (the jumps' bytes are read under it).
pub(super) fn read_text(g: &RegGuard, addr: usize) -> Result<[u8; MAX_INSN_LEN]> {
    let mut buf = [0u8; MAX_INSN_LEN];
    // Near the end of mapped text fewer than MAX_INSN_LEN bytes may be
    // readable: try shorter reads (the rest stays zero; the decoder then
    // reports a truncated instruction if it needed them).
    let readable = (1..=MAX_INSN_LEN).rev().find(|&n| {
        // SAFETY: the nofault copy checks the source; `buf` holds `n` bytes.
        unsafe {
            bindings::copy_from_kernel_nofault(buf.as_mut_ptr().cast(), addr as *const _, n) == 0
        }
    });
    if readable.is_none() {
        return Err(EFAULT);
    }
    // Our int3s first, then our jumps (whose bytes may look like int3).
    for (i, b) in buf.iter_mut().enumerate() {
        if *b == INT3 {
            if let Some((insn, _)) = Engine::patch_at(g, addr + i) {
                *b = insn.orig[0];
            }
        }
    }
    let jumps = if opt::any_detour() {
        addr.saturating_sub(<Arch as Jumps>::OPT_MAX_SPAN - 1)..addr + MAX_INSN_LEN
    } else {
        0..0
    };
    for a in jumps {
        let Some((_, Some(o))) = Engine::patch_at(g, a) else {
            continue;
        };
        for (i, &b) in o.orig().iter().enumerate() {
            if let Some(d) = (a + i).checked_sub(addr).and_then(|o| buf.get_mut(o)) {
                *d = b;
            }
        }
    }
    Ok(buf)
}

/// Writes `op rel32` (a `call` or `jmp`) at `code[at..]`, which runs at
/// `base + at`, reaching `to` (`ERANGE` when it cannot).
pub(super) fn put_rel32(code: &mut [u8], at: usize, op: u8, base: usize, to: usize) -> Result {
    copy::put_rel32(code, at, op, base, to).ok_or(ERANGE)
}

/// Copies the instruction to `copy[at..]`, to run at `slot + at`, with a
/// RIP-relative displacement re-aimed at the original target (`ERANGE`
/// when out of reach).
pub(super) fn place_copy(
    copy: &mut [u8],
    at: usize,
    insn: &decode::Insn,
    bytes: &[u8; MAX_INSN_LEN],
    addr: usize,
    slot: usize,
) -> Result {
    copy::place_copy(copy, at, insn, bytes, addr, slot).ok_or(ERANGE)
}

impl Insns for Arch {
    type Insn = ArchInsn;

    const SLOT_SIZE: usize = SLOT_SIZE;

    const NSLOTS: usize = NSLOTS;

    const POINT_MAX_SIZE: usize = POINT_MAX_SIZE;

    /// Finds the instruction at `addr` by decoding from the function start, and
    /// prepares its out-of-line copy.
    fn prepare(g: &RegGuard, addr: usize, fstart: usize, fsize: usize) -> Result<ArchInsn> {
        let mut pc = fstart;
        let mut prev = None;
        let insn = loop {
            let bytes = read_text(g, pc)?;
            let insn = match decode(&bytes) {
                Ok(i) => i,
                Err(e) => {
                    pr_err!(
                        "x86: cannot decode at {:#x} ({:?}) on the way to {:#x}\n",
                        pc,
                        e,
                        addr
                    );
                    return Err(crate::errno::eilseq());
                }
            };
            if pc == addr {
                break (insn, bytes);
            }
            if let Some(why) = foreign_patch(g, pc, &insn, &bytes, prev, fstart + fsize) {
                pr_err!(
                    "x86: {} at {:#x}, before {:#x}: cannot find the instruction boundaries past it\n",
                    why,
                    pc,
                    addr
                );
                return Err(EBUSY);
            }
            prev = Some(insn.class);
            pc += insn.len as usize;
            if pc > addr || pc >= fstart + fsize {
                pr_err!("x86: {:#x} is not on an instruction boundary\n", addr);
                return Err(crate::errno::eilseq());
            }
        };
        let (insn, bytes) = insn;
        if insn.class == Class::Int3 {
            pr_err!("x86: {:#x} already holds someone else's int3\n", addr);
            return Err(EBUSY);
        }
        if let Some(why) = foreign_patch(g, addr, &insn, &bytes, Some(Class::Ret), fstart + fsize) {
            pr_err!("x86: {:#x} holds {}\n", addr, why);
            return Err(EBUSY);
        }
        let len = insn.len as usize;
        match copy::plan(&insn, addr, &bytes) {
            Ok(None) => {}
            Ok(Some(op)) => {
                // Emulated at the hit: no slot.
                return Ok(ArchInsn {
                    slot: 0,
                    len: len as u8,
                    orig: bytes,
                    emulate: Some(op),
                    boostable: false,
                    post_tail: false,
                });
            }
            Err(why) => {
                pr_err!("x86: cannot probe {:#x}: {}\n", addr, why);
                return Err(crate::errno::eopnotsupp());
            }
        }
        let slot = slots::alloc().ok_or(ENOSPC)?;
        let boostable = decode::can_boost(&insn);
        // Step copy at slot + 0, ending in an int3 or, when boostable, in the
        // `post` tail (the post handlers without a second trap); boosted copy
        // at slot + BOOST_OFF, ending in a jmp back to the next original
        // instruction.
        let mut copy = [INT3; SLOT_SIZE];
        let mut post_tail = false;
        let built = place_copy(&mut copy, 0, &insn, &bytes, addr, slot).and_then(|()| {
            if boostable {
                // Out of reach (never for kernel or module text): the int3.
                post_tail = post::put_tail(&mut copy, len, slot, addr, len).is_ok();
                if !post_tail {
                    copy[len..len + post::TAIL_LEN].fill(INT3);
                }
                place_copy(&mut copy, BOOST_OFF, &insn, &bytes, addr, slot)?;
                put_rel32(&mut copy, BOOST_OFF + len, 0xe9, slot, addr + len)?;
            }
            Ok(())
        });
        // SAFETY: a slot just allocated; nothing jumps there until armed.
        if let Err(e) = built.and_then(|()| unsafe { text::write(slot, &copy) }) {
            slots::free(slot);
            pr_err!("x86: cannot prepare the copy of {:#x}: {:?}\n", addr, e);
            return Err(e);
        }
        Ok(ArchInsn {
            slot,
            len: len as u8,
            orig: bytes,
            emulate: None,
            boostable,
            post_tail,
        })
    }

    /// Gives back the resources of a prepared instruction.
    fn release(insn: ArchInsn) {
        if insn.slot != 0 {
            if insn.boostable {
                // A task may be preempted inside the boosted copy or at the
                // post tail's jump back: the slot is refilled and reused only
                // after every task left it.
                slots::free_deferred(insn.slot);
            } else {
                // Refill with int3 so that a stale jump into the slot traps
                // loudly.
                // SAFETY: a non-boosted copy is only entered from its trap
                // with interrupts off; the point is gone and a grace period
                // passed: no CPU is in it.
                let _ = unsafe { text::write(insn.slot, &[INT3; SLOT_SIZE]) };
                slots::free(insn.slot);
            }
        }
    }

    /// Refills a slot before reuse (deferred frees, see `src/slots.rs`).
    fn clear_slot(slot: usize) {
        // SAFETY: a deferred-freed slot: every task has left it.
        let _ = unsafe { text::write(slot, &[INT3; SLOT_SIZE]) };
    }

    /// Writes the breakpoint. Writing one byte is atomic for other CPUs: each
    /// executes either the old instruction or the int3. `EBUSY` when the byte
    /// is no longer the original one (someone else patched it while the probe
    /// was disarmed: the kernel's kprobes, kgdb): theirs stays.
    fn arm(addr: usize, insn: &ArchInsn) -> Result {
        // SAFETY: the first byte of the instruction `prepare` decoded and
        // validated (the registry arms only prepared points).
        unsafe { text::write_if_unchanged(addr, &insn.orig[..1], &[INT3]) }?;
        // SAFETY: process context.
        unsafe { kp_helper_sync_all_cores() };
        Ok(())
    }

    /// With IBT, a gate `endbr64; jmp rel32 <target>` in the engine's text:
    /// the kernel seals at boot every function vmlinux never calls through
    /// a pointer (`apply_seal_endbr()`: the ENDBR becomes a NOP, and with
    /// FineIBT built the kCFI hash is zeroed), which includes most of what
    /// the engine resolves by name. An indirect call lands on the gate's
    /// ENDBR; the direct jump needs none.
    #[cfg(CONFIG_X86_KERNEL_IBT)]
    fn call_gate(target: usize) -> Result<usize> {
        gates::make(target)
    }

    /// Restores the original first byte. `EBUSY` when the byte is no longer
    /// the engine's int3 (someone else's patch on top of it, which saved the
    /// int3 as its original: writing over it would leave a stray int3 behind
    /// when they restore theirs).
    fn disarm(addr: usize, insn: &ArchInsn) -> Result {
        // SAFETY: as in `arm`: the original byte goes back.
        unsafe { text::write_if_unchanged(addr, &[INT3], &insn.orig[..1]) }?;
        // SAFETY: process context.
        unsafe { kp_helper_sync_all_cores() };
        Ok(())
    }
}

/// Call gates for kernel functions the engine resolves by name (see
/// [`Arch::call_gate`]): a small area of the engine's text, filled with
/// int3 at build time, taken in order at load and never given back.
#[cfg(CONFIG_X86_KERNEL_IBT)]
mod gates {
    use super::*;
    use core::sync::atomic::{AtomicUsize, Ordering};

    /// Bytes per gate: `endbr64` (4), `jmp rel32` (5), int3 padding.
    const GATE_SIZE: usize = 16;
    /// Gates in the area: the engine resolves about twenty functions.
    const NGATES: usize = 64;

    core::arch::global_asm!(
        ".pushsection .text.kp_call_gates, \"ax\", @progbits",
        ".balign 16",
        ".globl kp_call_gates",
        "kp_call_gates:",
        ".fill {size}, 1, 0xcc",
        ".popsection",
        super::noendbr!("kp_call_gates"),
        size = const GATE_SIZE * NGATES,
    );

    extern "C" {
        static kp_call_gates: [u8; GATE_SIZE * NGATES];
    }

    /// Gates handed out so far.
    static USED: AtomicUsize = AtomicUsize::new(0);

    /// Writes the next gate, to `target`. Process context, at load (the
    /// engine's init, single-threaded).
    pub(super) fn make(target: usize) -> Result<usize> {
        let i = USED.fetch_add(1, Ordering::Relaxed);
        if i >= NGATES {
            USED.fetch_sub(1, Ordering::Relaxed);
            return Err(ENOSPC);
        }
        let gate = core::ptr::addr_of!(kp_call_gates) as usize + i * GATE_SIZE;
        let mut code = [INT3; GATE_SIZE];
        code[..4].copy_from_slice(&ENDBR64);
        put_rel32(&mut code, 4, 0xe9, gate, target)?;
        // SAFETY: a gate of the engine's own area that nothing calls yet
        // (its address is returned below).
        unsafe { text::write(gate, &code) }?;
        // SAFETY: process context.
        unsafe { kp_helper_sync_all_cores() };
        Ok(gate)
    }
}
