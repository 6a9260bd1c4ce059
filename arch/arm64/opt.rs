// SPDX-License-Identifier: GPL-2.0

//! arm64 jump optimization: a settled probe's BRK becomes a `B` to a
//! per-probe detour, so that a hit takes no exception at all.
//!
//! ```text
//! probed text:  addr:  b detour          (BRK and B may replace each other
//!                                         while other CPUs run the code)
//! detour (one slot, `decode::detour_words`):
//!   +0   stp  x16, x17, [sp, #-16]!
//!   +4   adr  x16, detour
//!   +8   b    kp_arm64_opt_common
//!   +12  ldp  x16, x17, [sp], #16      // the common code returns here
//!   +16  the probed instruction        // as the boosted copy of a BRK hit
//!   +20  b    addr + 4
//!   +24  .quad addr
//! ```
//!
//! `kp_arm64_opt_common` saves a `struct pt_regs` (the state at `addr`:
//! every register, the stack pointer before the pair, pc = `addr`, NZCV and
//! DAIF, EL1h), masks DAIF, makes a frame record {the code's x29, `addr`}
//! for unwinders, and calls [`kp_arm64_opt_hit`], which runs the pre
//! handlers through the core (`Core::on_jump`, interrupts masked the
//! kernel's way too) and says how to leave:
//!
//! - on: every register back (x16 and x17 through the pair), NZCV and DAIF
//!   as the handlers left them, then `ret x16` to `detour + 12` (a `ret` is
//!   no branch BTI checks), which pops the pair and runs the copy;
//! - a handler returned to the caller (pc = x30, the usual redirect): every
//!   register back, the code's stack pointer, `ret`;
//! - any other new pc: every register back with DAIF still masked, then a
//!   BRK of the engine's own ([`super::KP_BRK_REDIRECT_IMM`]) whose
//!   exception saves the exact PSTATE (PAN, SSBS, TCO, ...; no instruction
//!   reads them all) and returns to the new pc with the handlers' NZCV and
//!   DAIF ([`take_redirect`]). One exception, as a BRK probe's redirect.
//!
//! Which probes: those whose instruction runs out of line unchanged (the
//! boosted class: not simulated, no exception-table entry, which the
//! resolver refuses anyway), that is no BTI landing pad (reached by `br`
//! or `blr`, a `B` there would fault where a BRK does not), with the detour
//! within a `B`'s reach of `addr` and `addr + 4` of the detour's. One
//! instruction is replaced, so no branch can land inside the jump and no
//! other probe can sit under it. The protocol is the core's
//! (`src/optimize.rs`): breakpoint hits resume in the detour's copy once it
//! is published, the jump is written after every task left, and taken off
//! (BRK back) before a post or fault handler may run.

use super::{decode, patch, read_insn, Arch, IrqTrace, KP_BRK_IMM};
use crate::arch::Core;
use crate::arch::{Jumps, OptPoint, Refusal};
use crate::entries::Engine;
use crate::slots;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use kernel::bindings;
use kernel::prelude::*;

core::arch::global_asm!(
    ".pushsection .text.kp_tramp, \"ax\", %progbits",
    ".globl kp_arm64_opt_common",
    ".type kp_arm64_opt_common, %function",
    ".balign 16",
    "kp_arm64_opt_common:",
    // x16 = the detour; [sp] = the code's x16, x17 (sp = its sp - 16).
    "sub sp, sp, #{size}",
    "stp x0, x1, [sp, #0]",
    regs_x2_x30!("stp", "str"),
    "ldp x0, x1, [sp, #{size}]",
    "stp x0, x1, [sp, #128]",
    "add x0, sp, #{size} + 16",
    "str x0, [sp, #248]",
    "ldr x1, [x16, #24]",
    "str x1, [sp, #256]",
    "mrs x0, daif",
    "mrs x2, nzcv",
    "orr x0, x0, x2",
    "mov x2, #5", // EL1h
    "orr x0, x0, x2",
    "str x0, [sp, #264]",
    "msr daifset, #0xf",
    // A frame record for unwinders in the handlers: the probed function's
    // frame, at the probed address.
    "stp x29, x1, [sp, #{frame}]",
    "add x29, sp, #{frame}",
    "mov x0, sp",
    "mov x1, x16",
    "bl kp_arm64_opt_hit",
    "cbnz x0, 1f",
    // On at the copy: the pair the detour pops gets x16 and x17 as the
    // handlers left them.
    "ldp x0, x1, [sp, #128]",
    "stp x0, x1, [sp, #{size}]",
    "ldr x0, [sp, #264]",
    "and x1, x0, #0xf0000000",
    "msr nzcv, x1",
    "and x0, x0, #0x3c0",
    "msr daif, x0",
    "ldp x0, x1, [sp, #0]",
    regs_x2_x30!("ldp", "ldr"),
    "ldr x16, [sp, #256]",
    "add sp, sp, #{size}",
    "ret x16",
    "1:",
    "tbnz x0, #1, 2f",
    // Back to the caller through x30.
    "ldr x0, [sp, #264]",
    "and x1, x0, #0xf0000000",
    "msr nzcv, x1",
    "and x0, x0, #0x3c0",
    "msr daif, x0",
    "ldp x0, x1, [sp, #0]",
    regs_x2_x30!("ldp", "ldr"),
    "add sp, sp, #{size} + 16",
    "ret",
    "2:",
    // Elsewhere: through the redirect BRK, DAIF masked until it is taken
    // (the frame is below the stack pointer from the `add` on).
    "ldr x0, [sp, #264]",
    "and x0, x0, #0xf0000000",
    "msr nzcv, x0",
    "ldp x0, x1, [sp, #0]",
    regs_x2_x30!("ldp", "ldr"),
    "add sp, sp, #{size} + 16",
    ".globl kp_arm64_opt_redirect",
    "kp_arm64_opt_redirect:",
    ".inst {brk}",
    ".size kp_arm64_opt_common, . - kp_arm64_opt_common",
    ".popsection",
    size = const core::mem::size_of::<bindings::pt_regs>(),
    frame = const core::mem::offset_of!(bindings::pt_regs, stackframe),
    brk = const decode::brk(super::KP_BRK_REDIRECT_IMM),
);

extern "C" {
    fn kp_arm64_opt_common();
    fn kp_arm64_opt_redirect();
    fn kp_helper_arm64_redirect_set(pc: usize, pstate: usize);
    fn kp_helper_arm64_redirect_take(pc: *mut usize, pstate: *mut usize) -> bool;
    fn kp_helper_arm64_opt_regs(regs: *mut bindings::pt_regs);
    fn kp_helper_arm64_raw_irq_save() -> core::ffi::c_ulong;
    fn kp_helper_arm64_raw_irq_restore(flags: core::ffi::c_ulong);
    fn kp_helper_arm64_regs_irqs_on(regs: *mut bindings::pt_regs) -> bool;
    fn kp_helper_arm64_sw_pan() -> bool;
}

/// How `kp_arm64_opt_common` leaves (its `cbnz`/`tbnz`).
const LEAVE_ON: usize = 0;
const LEAVE_RET: usize = 1;
const LEAVE_BRK: usize = 2;

/// Set once a handler's move of the stack pointer was ignored.
static SP_REFUSED: AtomicBool = AtomicBool::new(false);

/// Called by `kp_arm64_opt_common` with its frame and the detour: runs the
/// pre handlers and says how to leave (`LEAVE_*`); for `LEAVE_ON` the
/// frame's pc is where (the detour's pop of x16, x17).
///
/// # Safety
///
/// `regs` is the common code's frame; DAIF is masked; `detour` is the
/// detour the code came from.
#[no_mangle]
unsafe extern "C" fn kp_arm64_opt_hit(regs: *mut bindings::pt_regs, detour: usize) -> usize {
    // SAFETY: per the function's contract; the fields the common code
    // does not save, and whether the probed code had interrupts on.
    let was_on = unsafe {
        kp_helper_arm64_opt_regs(regs);
        kp_helper_arm64_regs_irqs_on(regs)
    };
    // SAFETY: per the function's contract.
    let regs = unsafe { &mut *regs };
    let addr = super::regs::ip(regs);
    let sp = super::regs::sp(regs);
    // DAIF is masked; the kernel's mask (the priority mask under
    // pseudo-NMIs) is set before the per-CPU hit state is touched, and its
    // IRQ-state tracking told once the CPU is marked busy: a probe in what
    // that calls finds it busy (`helpers.c`).
    // SAFETY: any context.
    let flags = unsafe { kp_helper_arm64_raw_irq_save() };
    let redirected = Engine::on_jump(addr, regs, || IrqTrace::new(was_on));
    if super::regs::sp(regs) != sp {
        // The frame is just below the code's stack: as on the post path,
        // only a new pc can be honoured.
        super::regs::set_sp(regs, sp);
        if !SP_REFUSED.swap(true, Ordering::Relaxed) {
            pr_err!(
                "optimized probe at {:#x}: a handler moved the stack pointer; ignored\n",
                addr
            );
        }
    }
    let leave = if !redirected {
        super::regs::set_ip(regs, detour.wrapping_add(decode::DETOUR_RESUME));
        LEAVE_ON
    } else if Some(super::regs::ip(regs)) == super::regs::x(regs, 30) {
        LEAVE_RET
    } else {
        // SAFETY: this CPU's record (its mask is still set); DAIF stays
        // masked until the redirect BRK takes it back on this CPU.
        unsafe { kp_helper_arm64_redirect_set(super::regs::ip(regs), super::regs::flags(regs)) };
        LEAVE_BRK
    };
    // SAFETY: the flags saved above, on this CPU (DAIF stays masked until
    // the common code leaves).
    unsafe { kp_helper_arm64_raw_irq_restore(flags) };
    leave
}

/// The redirect BRK of `kp_arm64_opt_common` trapped with `regs`: sends the
/// exception back to the new pc with the handlers' NZCV and DAIF (the rest
/// of PSTATE as the BRK saved it). False when it was not ours.
pub(super) fn take_redirect(regs: &mut bindings::pt_regs) -> bool {
    if super::regs::ip(regs) != kp_arm64_opt_redirect as *const () as usize {
        return false;
    }
    let (mut pc, mut pstate) = (0usize, 0usize);
    // SAFETY: out-pointers to locals; interrupts masked (trap context).
    if !unsafe { kp_helper_arm64_redirect_take(&mut pc, &mut pstate) } {
        return false;
    }
    let keep = !(super::NZCV_MASK | super::DAIF_MASK);
    let now = super::regs::flags(regs);
    super::regs::set_flags(
        regs,
        (now & keep) | (pstate & (super::NZCV_MASK | super::DAIF_MASK)),
    );
    super::regs::set_ip(regs, pc);
    true
}

/// A prepared jump: its detour (the probed instruction is the point's).
#[derive(Clone, Copy)]
pub(crate) struct OptInsn {
    detour: usize,
}

impl OptInsn {
    /// The detour's slot (0: none).
    pub(super) fn detour(&self) -> usize {
        self.detour
    }
}

/// A point's jump state in one word (a `Point` stays within 48 bytes):
/// bits 0-13 the detour's slot index + 1 (0: none), bit 14 whether the
/// jump is in the text, bit 15 refused for good, bits 16-31 the
/// optimizer's generation when it was prepared.
/// Written under the registration lock; the trap path reads `resume`.
pub(crate) struct OptState(AtomicU32);

const IDX_MASK: u32 = 0x3fff;
const JUMPED: u32 = 1 << 14;
const NEVER: u32 = 1 << 15;
const GEN_SHIFT: u32 = 16;
const _: () = assert!(super::NSLOTS < IDX_MASK as usize);

impl OptState {
    fn update(&self, f: impl FnOnce(u32) -> u32) {
        // Registration lock held: no other writer.
        let v = self.0.load(Ordering::Relaxed);
        self.0.store(f(v), Ordering::Release);
    }

    fn detour(&self) -> usize {
        match self.0.load(Ordering::Acquire) & IDX_MASK {
            0 => 0,
            i => slots::at(i as usize - 1),
        }
    }
}

impl OptPoint<OptInsn> for OptState {
    fn none() -> Self {
        OptState(AtomicU32::new(0))
    }

    /// Where breakpoint hits resume while a jump is prepared or written:
    /// the detour's copy. Trap path.
    #[inline(always)]
    fn resume(&self) -> usize {
        match self.detour() {
            0 => 0,
            d => d + decode::DETOUR_COPY,
        }
    }

    fn prepare(&self, o: OptInsn, gen: u16) {
        let i = slots::index_of(o.detour) as u32 + 1;
        let keep = JUMPED | NEVER;
        self.update(|v| (v & keep) | (i & IDX_MASK) | (u32::from(gen) << GEN_SHIFT));
    }

    fn prepared_gen(&self) -> u16 {
        (self.0.load(Ordering::Relaxed) >> GEN_SHIFT) as u16
    }

    fn clear(&self) {
        self.update(|v| v & !IDX_MASK);
    }

    fn insn(&self) -> OptInsn {
        OptInsn {
            detour: self.detour(),
        }
    }

    fn jumped(&self) -> bool {
        self.0.load(Ordering::Relaxed) & JUMPED != 0
    }

    fn set_jumped(&self, on: bool) {
        self.update(|v| if on { v | JUMPED } else { v & !JUMPED });
    }

    /// Refused for good: nothing here depends on other probes (one
    /// instruction is replaced), and retrying each epoch (every probe
    /// removal) cost `kp_mass` on arm64-hardened, where no kernel text is
    /// in reach, minutes of optimizer runs under the registration lock.
    /// (The optimizer's other refusal, someone else's patch found when the
    /// jump was to be written, is for good too: the point stays on its
    /// BRK until it is registered again.)
    fn refused_at(&self, _tag: u16) -> bool {
        self.0.load(Ordering::Relaxed) & NEVER != 0
    }

    fn set_refused(&self, _tag: u16) {
        self.update(|v| v | NEVER);
    }
}

/// Decides whether the probe at `addr` can be jump-optimized and builds its
/// detour. Registration lock held.
fn prepare(g: &crate::lock::RegGuard, addr: usize) -> core::result::Result<OptInsn, Refusal> {
    let orig = read_insn(g, addr).map_err(|_| ("unreadable text", true))?;
    let class = decode::classify(orig);
    if class.is_simulated() || matches!(class, decode::Class::Reject(_)) {
        return Err(("the instruction cannot run out of line", true));
    }
    if decode::is_landing_pad(orig) {
        return Err(("a BTI landing pad (a B there would fault)", true));
    }
    // SAFETY: a query.
    if unsafe { kp_helper_arm64_sw_pan() } {
        return Err((
            "software PAN: user access is switched by exception entry",
            true,
        ));
    }
    let common = kp_arm64_opt_common as *const () as usize;
    // Both branches of the detour and the jump itself must reach: from
    // any slot, if from the first and the last (checked before taking one).
    let reach = |slot: usize| {
        decode::detour_words(slot as u64, addr as u64, orig, common as u64).is_some()
            && decode::b(addr as u64, slot as u64).is_some()
    };
    if !reach(slots::at(0)) || !reach(slots::at(super::NSLOTS - 1)) {
        return Err(("the engine's slots are out of a branch's reach", true));
    }
    let detour = slots::alloc_spare().ok_or(("no spare slot", false))?;
    let words = decode::detour_words(detour as u64, addr as u64, orig, common as u64);
    let (Some(words), Some(_)) = (words, decode::b(addr as u64, detour as u64)) else {
        slots::free(detour);
        return Err(("the detour is out of a branch's reach", true));
    };
    // SAFETY: a slot just allocated; nothing runs it before it is
    // published: BRK hits then resume in its copy through an exception
    // return (context-synchronizing), the jump comes after a
    // `stop_machine()`.
    if unsafe { patch::write_idle(detour, &words) }.is_err() {
        slots::free(detour);
        return Err(("cannot build the detour", false));
    }
    Ok(OptInsn { detour })
}

impl Jumps for Arch {
    type OptInsn = OptInsn;
    type OptState = OptState;
    const OPT_SUPPORTED: bool = true;
    /// One instruction.
    const OPT_MAX_SPAN: usize = 4;

    fn opt_prepare(
        g: &crate::lock::RegGuard,
        addr: usize,
        _fstart: usize,
        _fsize: usize,
        _other_probe: impl Fn(usize) -> bool,
    ) -> core::result::Result<OptInsn, Refusal> {
        prepare(g, addr)
    }

    fn opt_span(_o: &OptInsn) -> usize {
        4
    }

    /// BRK to `B detour`, while every CPU is stopped (`EBUSY` if the BRK
    /// is no longer there: someone else's patch stays).
    fn opt_jump(addr: usize, o: &OptInsn) -> Result {
        let jump = decode::b(addr as u64, o.detour as u64).ok_or(ERANGE)?;
        // SAFETY: the armed BRK of a prepared point becomes a branch to its
        // detour, whose copy BRK hits already resume in.
        unsafe { patch::write_insns(addr, &[decode::brk(KP_BRK_IMM)], &[jump]) }
    }

    /// The BRK back in place of the jump.
    fn opt_unjump(addr: usize, o: &OptInsn) -> Result {
        let jump = decode::b(addr as u64, o.detour as u64).ok_or(ERANGE)?;
        // SAFETY: as in `opt_jump`, the other way.
        unsafe { patch::write_insns(addr, &[jump], &[decode::brk(KP_BRK_IMM)]) }
    }

    /// The detour goes back once every task left it (tasks run its first
    /// words and its copy with interrupts on).
    fn opt_release(o: &OptInsn) {
        if o.detour != 0 {
            slots::free_deferred(o.detour);
        }
    }
}
