// SPDX-License-Identifier: GPL-2.0

//! x86_64 jump optimization: a settled probe's `int3` becomes a `jmp rel32`
//! to a per-probe detour, so that a hit costs no trap at all.
//!
//! ```text
//! probed text:  addr:  e9 <rel32>  (covers the instructions of [addr, addr + span))
//! detour (one slot):
//!   +0   push $(addr + 1)             68 imm32 (text addresses sign-extend)
//!   +5   call kp_x86_opt_common       e8 rel32
//!   +10  the covered instructions, relocated (RIP-relative operands re-aimed)
//!   +10+span  jmp addr + span         e9 rel32
//! ```
//!
//! `kp_x86_opt_common` builds a `struct pt_regs` (the register state at
//! `addr`), masks interrupts (telling lockdep, when the kernel traces IRQ
//! flags) and calls [`kp_x86_opt_hit`], which runs the pre handlers through
//! the core (`Core::on_jump`) and picks where to
//! resume: the relocated instructions (the word the `call` pushed), or where
//! a handler redirected execution. The trampoline restores every register
//! and the flags and returns there, dropping the pushed word. That word,
//! `addr + 1`, is a return address into the probed instruction for
//! unwinders (`trampolines.S`): a stack trace in a handler walks through the
//! probed function to its caller.
//!
//! Safety conditions, checked by [`prepare`] on the whole function (as the
//! kernel's `can_optimize()`, plus exception-table landing pads and jump
//! labels): every covered instruction runs out of line unchanged (the
//! boostable set, no exception-table entry), the jump stays inside the
//! function, nothing in the function branches into the covered bytes after
//! their first (direct branches, exception fixups; a function with an
//! indirect jump or a jump-label site is refused, as its targets are not
//! known), and no other probe sits in them. The core keeps the rest of the
//! protocol (`src/optimize.rs`): when the detour exists, breakpoint hits
//! resume in it rather than at `addr + len`, so that no CPU enters the
//! covered bytes after their first; the jump is written after every task
//! that might be inside them left (`synchronize_rcu_tasks()`).

use super::decode::{self, can_boost, decode, Class, MAX_INSN_LEN};
use super::{place_copy, put_rel32, read_text, Arch, INT3, SLOT_SIZE};
use crate::arch::Core;
use crate::arch::{Entries, Jumps, OptPoint, Refusal};
use crate::entries::Engine;
use crate::lock::RegGuard;
use crate::{slots, symbols, text};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use kernel::bindings;
use kernel::prelude::*;

/// Bytes of the jump.
const JMP_LEN: usize = 5;
/// Bytes before the relocated instructions in a detour.
const HEAD: usize = 10;
/// The most bytes a jump can cover: its last byte is in an instruction that
/// starts at most 4 bytes after `addr` and is at most 15 long.
pub(crate) const MAX_SPAN: usize = JMP_LEN - 1 + MAX_INSN_LEN;

/// A prepared jump: its detour and the original bytes it covers.
#[derive(Clone, Copy)]
pub(crate) struct OptInsn {
    detour: usize,
    /// Bytes covered (at most `MAX_SPAN`).
    span: u8,
    orig: [u8; MAX_SPAN],
}

/// A point's jump optimization state (`Point::opt`, used by
/// `src/optimize.rs`).
pub(crate) struct OptState {
    /// The prepared jump (registration lock; meaningful while `resume` is
    /// not 0).
    insn: core::cell::UnsafeCell<OptInsn>,
    /// Where breakpoint hits resume while a jump is prepared or written (the
    /// detour's relocated instructions); 0: no jump. Read by the trap path.
    resume: core::sync::atomic::AtomicUsize,
    /// Whether the jump is in the text.
    jumped: AtomicBool,
    /// Epoch + 1 of the optimizer's last refusal (wrapping: after 65,536
    /// epochs a stale refusal may skip one attempt, until the next epoch).
    refused: core::sync::atomic::AtomicU16,
}

impl OptPoint<OptInsn> for OptState {
    /// Nothing prepared.
    fn none() -> OptState {
        OptState {
            insn: core::cell::UnsafeCell::new(OptInsn::NONE),
            resume: core::sync::atomic::AtomicUsize::new(0),
            jumped: AtomicBool::new(false),
            refused: core::sync::atomic::AtomicU16::new(0),
        }
    }

    /// Where hits resume (the detour), 0 when no jump is prepared. Trap
    /// path.
    #[inline(always)]
    fn resume(&self) -> usize {
        self.resume.load(Ordering::Acquire)
    }

    /// Publishes a prepared jump: hits resume in its detour from now on.
    /// Registration lock held, nothing prepared.
    fn prepare(&self, o: OptInsn) {
        // SAFETY: registration lock held; not published yet (`resume` is
        // 0), so no reader looks at it.
        unsafe { *self.insn.get() = o };
        self.resume.store(resume(&o), Ordering::Release);
    }

    /// Unpublishes the prepared jump (hits step again). Registration lock
    /// held.
    fn clear(&self) {
        self.resume.store(0, Ordering::Release);
    }

    /// The prepared jump. Registration lock held.
    fn insn(&self) -> OptInsn {
        // SAFETY: written only under the registration lock, which our
        // caller holds.
        unsafe { *self.insn.get() }
    }

    /// Whether the jump is in the text.
    fn jumped(&self) -> bool {
        self.jumped.load(Ordering::Relaxed)
    }

    /// Records whether the jump is in the text. Registration lock held.
    fn set_jumped(&self, on: bool) {
        self.jumped.store(on, Ordering::Relaxed);
    }

    /// Whether the last refusal was in the epoch tagged `tag`.
    fn refused_at(&self, tag: u16) -> bool {
        self.refused.load(Ordering::Relaxed) == tag
    }

    /// Records a refusal in epoch `tag - 1`. Registration lock held.
    fn set_refused(&self, tag: u16) {
        self.refused.store(tag, Ordering::Relaxed);
    }
}

impl OptInsn {
    /// No jump.
    pub(crate) const NONE: OptInsn = OptInsn {
        detour: 0,
        span: 0,
        orig: [0; MAX_SPAN],
    };

    /// The original bytes under the jump (`[addr, addr + span)`).
    pub(crate) fn orig(&self) -> &[u8] {
        self.orig.get(..self.span as usize).unwrap_or(&[])
    }
}

extern "C" {
    fn kp_x86_opt_common();
    fn kp_helper_sync_all_cores();
}

/// Set once a redirect could not be honoured (reported once).
static REDIRECT_REFUSED: AtomicBool = AtomicBool::new(false);

/// Called by `kp_x86_opt_common` with the frame it built.
///
/// # Safety
///
/// `regs` is the trampoline's `pt_regs`, with the resume address and the
/// probed address + 1 in the two words above it; interrupts are off.
#[no_mangle]
// In the trampolines' page (`trampolines.S`): their call is a direct jump.
#[link_section = ".text.kp_tramp"]
unsafe extern "C" fn kp_x86_opt_hit(regs: *mut bindings::pt_regs) {
    // SAFETY: per the function's contract.
    let (regs, f) = unsafe { super::tramp_enter(regs, super::Entry::PushAddrPlusOne) };
    // The view at the probed instruction: its stack pointer, and `ip` one
    // past it, as after the breakpoint.
    regs.sp = f.sp;
    regs.ip = f.addr.wrapping_add(1);
    let to = if Engine::on_jump(f.addr, regs, || ()) {
        // Redirected. As on the ftrace path only the stack pointer the code
        // had can be resumed with, or a return to the caller (through a
        // `ret` stub); anything else is undone and the code runs on.
        if !Arch::ftrace_fixup_redirect(regs, f.sp, f.resume)
            && !REDIRECT_REFUSED.swap(true, Ordering::Relaxed)
        {
            pr_err!(
                "optimized probe at {:#x}: a handler moved the stack pointer; \
                 only a return to the caller can be honoured there\n",
                f.addr
            );
        }
        regs.ip
    } else {
        f.resume
    };
    // SAFETY: as above.
    unsafe { super::tramp_leave(&f, to) };
}

/// Decides whether the probe at `addr` (in the function `[fstart, fstart +
/// fsize)`) can be jump-optimized and builds its detour. `other_probe(a)`
/// says whether another probe sits at `a`. Registration lock held.
pub(crate) fn prepare(
    g: &RegGuard,
    addr: usize,
    fstart: usize,
    fsize: usize,
    other_probe: impl Fn(usize) -> bool,
) -> core::result::Result<OptInsn, Refusal> {
    let fend = fstart + fsize;
    // The covered instructions.
    let mut insns = KVec::<(usize, decode::Insn, [u8; MAX_INSN_LEN])>::new();
    let mut at = addr;
    // (The whole-function scan below sees the probed instruction's real
    // predecessor too.)
    let mut prev = None;
    while at < addr + JMP_LEN {
        let bytes = read_text(g, at).map_err(|_| ("unreadable text", true))?;
        let insn = decode(&bytes).map_err(|_| ("undecodable instruction", true))?;
        if super::foreign_patch(g, at, &insn, &bytes, prev, fend).is_some() {
            return Err(("someone else's patch under the jump", true));
        }
        prev = Some(insn.class);
        if !can_boost(&insn) {
            return Err(("a covered instruction cannot run out of line", true));
        }
        if at != addr && other_probe(at) {
            return Err(("another probe inside the jump", true));
        }
        if symbols::has_extable_entry(at) {
            return Err(("a covered instruction has an exception-table entry", true));
        }
        insns
            .push((at, insn, bytes), GFP_KERNEL)
            .map_err(|_| ("out of memory", false))?;
        at += insn.len as usize;
    }
    let span = at - addr;
    if at > fend {
        return Err(("the function ends inside the jump", true));
    }
    if symbols::reserved::reserved_range_by(addr, at, 0).is_some() {
        return Err(("other kernel code patches the covered bytes", true));
    }
    if symbols::reserved::reserved_range_by(fstart, fend, 0) == Some(symbols::JUMP_LABEL_SITE) {
        // Checked first: a jump label's target (in this function) is not
        // in the text until it is switched.
        return Err(("the function has a jump-label site", true));
    }
    // Nothing may branch into the covered bytes after the first.
    let inside = |t: usize| t > addr && t < addr + span;
    let mut pc = fstart;
    let mut prev = None;
    while pc < fend {
        let bytes = read_text(g, pc).map_err(|_| ("unreadable text", true))?;
        let insn = decode(&bytes).map_err(|_| ("undecodable instruction in the function", true))?;
        // Past someone else's patch the boundaries found are guesses.
        if super::foreign_patch(g, pc, &insn, &bytes, prev, fend).is_some() {
            return Err(("someone else's patch in the function", true));
        }
        prev = Some(insn.class);
        match insn.class {
            Class::JmpIndirect => return Err(("the function has an indirect jump", true)),
            _ => {
                if let Some(t) = insn.rel_target(pc as u64, &bytes) {
                    if inside(t as usize) {
                        return Err(("a branch targets the covered bytes", true));
                    }
                }
            }
        }
        if let Some(landing) = symbols::reserved::extable_landing(pc) {
            if inside(landing) {
                return Err(("an exception fixup lands in the covered bytes", true));
            }
        }
        pc += insn.len as usize;
    }
    // The detour pushes `addr + 1`, a return address into the probed
    // instruction for unwinders (`trampolines.S`); text addresses
    // sign-extend from 32 bits (push imm32).
    let imm = i32::try_from(addr.wrapping_add(1) as i64)
        .map_err(|_| ("address out of push range", true))?;
    let detour = slots::alloc_spare().ok_or(("no spare slot", false))?;
    let mut code = [INT3; SLOT_SIZE];
    let built = (|| -> Result {
        code[0] = 0x68;
        code[1..5].copy_from_slice(&imm.to_le_bytes());
        let common = kp_x86_opt_common as *const () as usize;
        put_rel32(&mut code, 5, 0xe8, detour, common)?;
        for (a, insn, bytes) in insns.iter() {
            place_copy(&mut code, HEAD + (a - addr), insn, bytes, *a, detour)?;
        }
        put_rel32(&mut code, HEAD + span, 0xe9, detour, addr + span)?;
        // SAFETY: a slot just allocated; nothing jumps there yet.
        unsafe { text::write(detour, &code) }
    })();
    if built.is_err() {
        slots::free(detour);
        return Err(("cannot build the detour", false));
    }
    let mut orig = [0u8; MAX_SPAN];
    for (a, insn, bytes) in insns.iter() {
        let off = a - addr;
        let n = insn.len as usize;
        orig[off..off + n].copy_from_slice(&bytes[..n]);
    }
    Ok(OptInsn {
        detour,
        span: span as u8,
        orig,
    })
}

/// Where a breakpoint hit on a prepared probe resumes: the relocated
/// instructions (never the covered bytes after the first).
pub(crate) fn resume(opt: &OptInsn) -> usize {
    opt.detour + HEAD
}

/// Bytes the jump covers.
pub(crate) fn span(opt: &OptInsn) -> usize {
    opt.span as usize
}

fn sync() {
    // SAFETY: process context.
    unsafe { kp_helper_sync_all_cores() };
}

/// Replaces the armed breakpoint at `addr` with the jump, breakpoint first:
/// the tail under the `int3` (no CPU executes it: hits resume in the detour
/// and nothing branches there), sync, then the first byte, sync. `EBUSY`
/// when someone else wrote the covered bytes since they were prepared (the
/// kernel's kprobes arming a probe there during the optimizer's wait): the
/// caller unoptimizes, and hits go through the breakpoint to theirs.
pub(crate) fn jump(addr: usize, opt: &OptInsn) -> Result {
    // The rest of the covered bytes become int3: never executed, and a
    // stray jump there traps loudly instead of running a torn instruction.
    let mut code = [INT3; MAX_SPAN];
    put_rel32(&mut code, 0, 0xe9, addr, opt.detour)?;
    let tail = 1..span(opt);
    let (Some(orig), Some(new)) = (opt.orig.get(tail.clone()), code.get(tail)) else {
        return Err(EINVAL);
    };
    // SAFETY: the bytes under the armed int3 at `addr` (no CPU executes
    // them: hits resume in the detour, and the function scan found no
    // branch into them), as prepared.
    match unsafe { text::write_if_unchanged(addr + 1, orig, new) } {
        Ok(()) => {}
        // Checked before anything was written.
        Err(e) if e == EBUSY => return Err(e),
        Err(e) => {
            // A page of the tail may have been written already.
            restore_tail(addr, orig);
            return Err(e);
        }
    }
    sync();
    // SAFETY: the first byte, int3 to `jmp` (one byte, atomic).
    if let Err(e) = unsafe { text::write(addr, &code[..1]) } {
        // Still on the int3, whose hits resume in the detour until the
        // caller unoptimizes: the tail must be the original again, or a
        // step of the original instruction would run into int3 filler.
        restore_tail(addr, orig);
        return Err(e);
    }
    sync();
    Ok(())
}

/// Puts the original bytes back under the armed int3 at `addr` after a
/// failed [`jump`], however long a failure lasts (the alias mapping
/// allocates): the caller then drops the detour, and a step of the
/// original instruction must not run into int3 filler. No CPU executes
/// the bytes meanwhile: hits resume in the detour.
fn restore_tail(addr: usize, orig: &[u8]) {
    let mut tries: u32 = 0;
    // SAFETY: as in `jump`: the bytes under the int3, as prepared.
    while unsafe { text::write(addr + 1, orig) }.is_err() {
        if tries % 100 == 0 {
            pr_err!(
                "x86: cannot restore the bytes after {:#x} yet; retrying\n",
                addr
            );
        }
        tries = tries.wrapping_add(1);
        // SAFETY: process context (the optimizer's work).
        unsafe { kernel::bindings::msleep(10) };
    }
    sync();
}

/// Puts the breakpoint back in place of the jump, then the original tail.
pub(crate) fn unjump(addr: usize, opt: &OptInsn) -> Result {
    // SAFETY: the first byte of the jump back to int3 (atomic).
    unsafe { text::write(addr, &[INT3]) }?;
    sync();
    // SAFETY: the bytes under the int3 again; the original instructions.
    unsafe { text::write(addr + 1, &opt.orig[1..span(opt)]) }?;
    sync();
    Ok(())
}

/// Detours prepared and not yet released: while none is, no jump of ours is
/// in the text and readers of text need not look for one (`read_text`).
static DETOURS: AtomicUsize = AtomicUsize::new(0);

/// Whether a jump of ours may be in the text.
pub(super) fn any_detour() -> bool {
    DETOURS.load(Ordering::Relaxed) != 0
}

/// Gives the detour back, once no task can still be in it (the relocated
/// instructions run with interrupts on).
pub(crate) fn release(opt: &OptInsn) {
    if opt.detour != 0 {
        slots::free_deferred(opt.detour);
    }
}

impl Jumps for Arch {
    type OptInsn = OptInsn;
    type OptState = OptState;
    const OPT_SUPPORTED: bool = true;
    const OPT_MAX_SPAN: usize = MAX_SPAN;

    /// Checks whether the probe at `addr` (in the function that starts at
    /// `fstart`, `fsize` bytes long) can be jump-optimized and builds its
    /// detour; `other_probe(a)`: whether another probe sits at `a`.
    /// Refusals say why and whether they are permanent (false: out of slots
    /// or memory). Registration lock held.
    fn opt_prepare(
        g: &RegGuard,
        addr: usize,
        fstart: usize,
        fsize: usize,
        other_probe: impl Fn(usize) -> bool,
    ) -> core::result::Result<OptInsn, Refusal> {
        let r = prepare(g, addr, fstart, fsize, other_probe);
        if r.is_ok() {
            DETOURS.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn opt_span(o: &OptInsn) -> usize {
        span(o)
    }

    fn opt_jump(addr: usize, o: &OptInsn) -> Result {
        jump(addr, o)
    }

    fn opt_unjump(addr: usize, o: &OptInsn) -> Result {
        unjump(addr, o)
    }

    fn opt_release(o: &OptInsn) {
        release(o);
        let _ = DETOURS.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }
}
