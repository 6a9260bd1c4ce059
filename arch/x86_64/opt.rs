// SPDX-License-Identifier: GPL-2.0

//! x86_64 jump optimization: a settled probe's `int3` becomes a `jmp rel32`
//! to a per-probe detour, so that a hit costs no trap at all.
//!
//! ```text
//! probed text:  addr:  e9 <rel32>  (covers the instructions of [addr, addr + span))
//! detour (one of kp_x86_opt_detours, trampolines.S):
//!   +0     push $(addr + 1)           68 imm32 (text addresses sign-extend)
//!   +5     build a struct pt_regs, cli, call kp_x86_opt_hit
//!          non-zero: jnz kp_x86_opt_redirect (returns where a handler said)
//!          restore the registers and the flags, drop the pushed word
//!   +head  the covered instructions, relocated (RIP-relative operands re-aimed)
//!   +head+span  jmp addr + span       e9 rel32
//! ```
//!
//! The detours are assembled (`trampolines.S`), so that objtool writes their
//! unwind data; per probe only the pushed word, the relocated instructions
//! and the jump back are written. [`kp_x86_opt_hit`] runs the pre handlers
//! through the core (`Core::on_jump`) with the `pt_regs` (the register state
//! at `addr`; interrupts masked, lockdep told when the kernel traces IRQ
//! flags) and says whether one redirected. The pushed word, `addr + 1`, is a
//! return address into the probed instruction for unwinders: a stack trace
//! in a handler walks through the probed function to its caller. A hit
//! makes one call and one return, as the kernel's optprobe detours do.
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
use super::{place_copy, put_rel32, read_text, Arch, INT3};
use crate::arch::Core;
use crate::arch::{Entries, Jumps, OptPoint, Refusal};
use crate::entries::Engine;
use crate::lock::RegGuard;
use crate::slots::{Area, AreaLayout};
use crate::{symbols, text};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use kernel::bindings;
use kernel::prelude::*;

/// Bytes of the jump.
const JMP_LEN: usize = 5;
/// Bytes per detour, and detours (`trampolines.S`, checked at load).
const DETOUR_SIZE: usize = 128;
const NDETOURS: usize = 1024;
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
    /// The optimizer's generation when the jump was last prepared.
    gen: core::sync::atomic::AtomicU16,
}

impl OptPoint<OptInsn> for OptState {
    /// Nothing prepared.
    fn none() -> OptState {
        OptState {
            insn: core::cell::UnsafeCell::new(OptInsn::NONE),
            resume: core::sync::atomic::AtomicUsize::new(0),
            jumped: AtomicBool::new(false),
            refused: core::sync::atomic::AtomicU16::new(0),
            gen: core::sync::atomic::AtomicU16::new(0),
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
    fn prepare(&self, o: OptInsn, gen: u16) {
        // SAFETY: registration lock held; not published yet (`resume` is
        // 0), so no reader looks at it.
        unsafe { *self.insn.get() = o };
        self.gen.store(gen, Ordering::Relaxed);
        self.resume.store(resume(&o), Ordering::Release);
    }

    fn prepared_gen(&self) -> u16 {
        self.gen.load(Ordering::Relaxed)
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
    fn kp_helper_sync_all_cores();
    /// The detours (`trampolines.S`).
    static kp_x86_opt_detours: [u8; DETOUR_SIZE * NDETOURS];
    /// Their layout as assembled: bytes per detour, detours, where the
    /// relocated instructions start in one.
    static kp_x86_opt_layout: [usize; 3];
}

/// Where the relocated instructions start in a detour (past the template).
fn head() -> usize {
    // SAFETY: read-only data of the engine's image.
    unsafe { kp_x86_opt_layout[2] }
}

/// The detour area's layout.
struct Detours;

impl AreaLayout for Detours {
    const SIZE: usize = DETOUR_SIZE;

    fn base() -> usize {
        core::ptr::addr_of!(kp_x86_opt_detours) as usize
    }

    /// Int3 over the pushed word and what follows the template, as
    /// assembled.
    fn clear(detour: usize) {
        let fill = [INT3; DETOUR_SIZE];
        let h = head();
        // SAFETY: a detour freed after every task left it; the bytes the
        // engine wrote into it.
        unsafe {
            let _ = text::write(detour + 1, &[0; 4]);
            let _ = text::write(detour + h, fill.get(h..).unwrap_or(&[]));
        }
    }
}

/// The detour area: a bit for each detour.
type DetourArea = Area<Detours, { NDETOURS / 64 }>;
const _: () = assert!(DetourArea::LEN == NDETOURS);

/// The detours in use.
static DETOURS_AREA: DetourArea = Area::new();

/// Checks that the detours are assembled as this file expects: otherwise
/// the engine does not load.
pub(super) fn init() -> Result {
    // SAFETY: read-only data of the engine's image.
    let layout = unsafe { kp_x86_opt_layout };
    let ok = layout[0] == DETOUR_SIZE
        && layout[1] == NDETOURS
        && layout[2] + MAX_SPAN + JMP_LEN <= DETOUR_SIZE;
    if !ok {
        pr_err!(
            "x86: the optimization detours are assembled as {:?} (bytes, count, head), \
             not as opt.rs expects\n",
            layout
        );
        return Err(EINVAL);
    }
    Ok(())
}

/// Set once a redirect could not be honoured (reported once).
static REDIRECT_REFUSED: AtomicBool = AtomicBool::new(false);

/// Called by a detour with the frame it built. Returns non-zero after a
/// redirect: the detour then returns to the word above `regs`.
///
/// # Safety
///
/// `regs` is the detour's `pt_regs`, with the probed address + 1 in the
/// word above it; interrupts are off.
#[no_mangle]
// In the trampolines' page (`trampolines.S`), with the redirect exit.
#[link_section = ".text.kp_tramp"]
unsafe extern "C" fn kp_x86_opt_hit(regs: *mut bindings::pt_regs) -> u32 {
    // SAFETY: per the function's contract.
    let (regs, f) = unsafe { super::tramp_enter(regs, super::Entry::Detour) };
    // The view at the probed instruction: its stack pointer, and `ip` one
    // past it, as after the breakpoint.
    regs.sp = f.sp;
    regs.ip = f.addr.wrapping_add(1);
    let mut redirected = Engine::on_jump(f.addr, regs, || ());
    if redirected {
        // As on the ftrace path only the stack pointer the code had can be
        // resumed with, or a return to the caller (through a `ret` stub);
        // anything else is undone and the code runs on.
        redirected = Arch::ftrace_fixup_redirect(regs, f.sp, f.resume);
        if !redirected && !REDIRECT_REFUSED.swap(true, Ordering::Relaxed) {
            pr_err!(
                "optimized probe at {:#x}: a handler moved the stack pointer; \
                 only a return to the caller can be honoured there\n",
                f.addr
            );
        }
    }
    let to = if redirected { regs.ip } else { f.resume };
    // SAFETY: as above.
    unsafe { super::tramp_leave(&f, to) };
    redirected as u32
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
    // Before the scan: with every detour taken each optimizer run would
    // scan every candidate's function for nothing.
    if DETOURS_AREA.full() {
        return Err(("no free detour", false));
    }
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
    // Released detours are the engine's text work's to reclaim.
    let detour = DETOURS_AREA.alloc().ok_or(("no free detour", false))?;
    // What follows the template: the relocated instructions, the jump back,
    // int3 to the end.
    let h = head();
    let mut code = [INT3; DETOUR_SIZE];
    let built = (|| -> Result {
        let tail = code.get_mut(..DETOUR_SIZE - h).ok_or(EINVAL)?;
        for (a, insn, bytes) in insns.iter() {
            place_copy(tail, a - addr, insn, bytes, *a, detour + h)?;
        }
        put_rel32(tail, span, 0xe9, detour + h, addr + span)?;
        // SAFETY: a detour just allocated; nothing jumps there yet. The
        // pushed word, then what follows the template.
        unsafe {
            text::write(detour + 1, &imm.to_le_bytes())?;
            text::write(detour + h, tail)
        }
    })();
    if built.is_err() {
        DETOURS_AREA.free(detour);
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
    opt.detour + head()
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
/// failed [`jump`] (or in [`unjump`]), however long a failure lasts (the
/// alias mapping allocates): the caller then drops the detour, and a step
/// of the original instruction must not run into int3 filler. No CPU
/// executes the bytes meanwhile: hits resume in the detour.
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
/// `EBUSY` when the jump's first byte is not ours any more: the kernel's
/// kprobes take a `jmp` for an instruction they may probe, put their int3
/// over it and emulate the jump into the detour. Then the jump, its tail
/// and the detour stay (the caller keeps the point, or refuses what needed
/// the jump gone): restoring the tail under their int3 would have them
/// write the `jmp` back over the original bytes when they leave, a jump to
/// wherever those bytes point.
pub(crate) fn unjump(addr: usize, opt: &OptInsn) -> Result {
    // SAFETY: the first byte of our jump back to int3 (atomic), if it is
    // still ours (checked under `text_mutex`, which the kernel's kprobes
    // hold to arm).
    unsafe { text::write_if_unchanged(addr, &[0xe9], &[INT3]) }?;
    sync();
    // The int3 is ours now: the original instructions under it, however
    // long a failure lasts (a retry would find no `jmp` to take back).
    restore_tail(addr, opt.orig.get(1..span(opt)).unwrap_or(&[]));
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
        DETOURS_AREA.free_deferred(opt.detour);
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

    fn opt_detours_in_use() -> usize {
        DETOURS_AREA.in_use()
    }

    fn opt_set_detour_limit(_g: &RegGuard, n: usize) -> Option<usize> {
        Some(DETOURS_AREA.set_limit(n))
    }

    fn opt_begin_reclaim(_g: &RegGuard) -> bool {
        DETOURS_AREA.begin_reclaim()
    }

    fn opt_finish_reclaim(_g: &RegGuard) {
        DETOURS_AREA.finish_reclaim();
    }

    fn opt_reclaimable() -> bool {
        DETOURS_AREA.reclaimable()
    }
}
