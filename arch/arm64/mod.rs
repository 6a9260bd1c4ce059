// SPDX-License-Identifier: GPL-2.0

//! arm64 backend: BRK breakpoints, simulation, out-of-line single-step.
//!
//! A probed instruction is replaced by `BRK #KP_BRK_IMM`. The kernel's BRK
//! dispatcher has no registration for modules, so BRKs reach the engine
//! through an ftrace_ops on `do_el1_brk64` ([`trap`], `helpers.c`). At a hit
//! the core runs the handlers; then the instruction is either simulated in
//! place ([`simulate`]: everything PC-relative, branches, literal loads) or
//! executed from an out-of-line slot. A slot holds two copies: a stepped
//! one, run with all of DAIF masked as the kernel's arm64 kprobes step,
//! followed by a branch to a `pt_regs` trampoline that finishes the step
//! (post handlers, pc after the original, PSTATE restored) and returns with
//! `eret` ([`post`]; the kernel takes a second BRK there); and, for points
//! without post handlers, a boosted one followed by a `B` back to the next
//! original instruction, which runs with the interrupted context's DAIF
//! (the kernel's arm64 kprobes do not boost). Either way one exception per
//! hit. Classification is [`decode::classify`], checked
//! on the host against an arm64 disassembler and the kernel's own rules.
//! Text is patched under `stop_machine()` with cache maintenance ([`patch`]).
//!
//! Faults: an ftrace_ops on `do_mem_abort()` (`helpers.c`,
//! [`trap::kp_arm64_fault`]) offers aborts in a stepped copy or in a
//! handler to the probes' fault handlers.

/// Assembly text that stores (`"stp", "str"`) or loads (`"ldp", "ldr"`)
/// x2..x30 in the `struct pt_regs` at sp, for the trampolines of
/// `kretprobe.rs` and `post.rs`.
#[rustfmt::skip]
macro_rules! regs_x2_x30 {
    ($pair:literal, $one:literal) => {
        concat!(
            $pair, " x2, x3, [sp, #16]\n",
            $pair, " x4, x5, [sp, #32]\n",
            $pair, " x6, x7, [sp, #48]\n",
            $pair, " x8, x9, [sp, #64]\n",
            $pair, " x10, x11, [sp, #80]\n",
            $pair, " x12, x13, [sp, #96]\n",
            $pair, " x14, x15, [sp, #112]\n",
            $pair, " x16, x17, [sp, #128]\n",
            $pair, " x18, x19, [sp, #144]\n",
            $pair, " x20, x21, [sp, #160]\n",
            $pair, " x22, x23, [sp, #176]\n",
            $pair, " x24, x25, [sp, #192]\n",
            $pair, " x26, x27, [sp, #208]\n",
            $pair, " x28, x29, [sp, #224]\n",
            $one, " x30, [sp, #240]\n",
        )
    };
}

// Pure logic shared with the host tests: `pub` there, partly unused here.
#[allow(dead_code, unreachable_pub)]
pub(crate) mod decode;
/// The most a registry `Point` may take here (a `kmem_cache` of its exact size; no kmalloc-48 on arm64).
pub(crate) const POINT_MAX_SIZE: usize = 48;

mod blacklist;
/// The register names of the `kprobe_events` grammar (pure, `pub` for the
/// host crate).
#[allow(unreachable_pub)]
pub(crate) mod event_regs;
mod ftrace;
mod insn;
mod kretprobe;
mod nokprobe_names;
mod opt;
mod patch;
mod post;
#[allow(dead_code, unreachable_pub)]
pub(crate) mod regs;
mod simulate;
mod step;
mod trap;

use crate::arch::{Entries, Insns, Refusals, Steps, Traps};
use crate::lock::RegGuard;
use crate::slots;
use decode::Class;
use kernel::bindings;
use kernel::prelude::*;

extern "C" {
    fn kp_helper_this_cpu_ptr(p: *mut core::ffi::c_void) -> *mut core::ffi::c_void;
    fn kp_helper_counter_inc(c: *mut u64);
    fn kp_helper_arm64_irqs_off_enter(flags: *mut core::ffi::c_ulong) -> bool;
    fn kp_helper_arm64_irqs_off_leave(flags: core::ffi::c_ulong, traced: bool);
    fn kp_helper_arm64_irq_trace_enter(was_on: bool) -> bool;
    fn kp_helper_arm64_irq_trace_leave(traced: bool);
    /// The list function's transition bit in `task_struct::trace_recursion`
    /// (`helpers.c`).
    static kp_trace_list_transition: kernel::ffi::c_ulong;
}

/// The kernel's IRQ-state tracking (lockdep, the irqsoff tracer) told
/// "off" for the scope of a value, for handlers that run with interrupts
/// masked by the engine's own code, and given back what it believed at the
/// end, as the kernel's NMI entry and exit do (`helpers.c`). Where lockdep
/// follows the state its belief decides; else `was_on`, whether the probed
/// code had interrupts on. Used by every path that masks interrupts itself
/// (the post and return trampolines through [`IrqsOff`], the detour of a
/// jump-optimized probe); the BRK path is an exception, whose entry code
/// does the same.
pub(crate) struct IrqTrace(bool);

impl IrqTrace {
    /// Interrupts are masked on this CPU.
    pub(crate) fn new(was_on: bool) -> Self {
        // SAFETY: interrupts are masked on this CPU (the caller's).
        Self(unsafe { kp_helper_arm64_irq_trace_enter(was_on) })
    }
}

impl Drop for IrqTrace {
    fn drop(&mut self) {
        // SAFETY: what `new` told, on the same CPU, still masked.
        unsafe { kp_helper_arm64_irq_trace_leave(self.0) };
    }
}

/// Interrupts masked the kernel's way for the scope of a value, in the
/// trampolines that mask DAIF themselves (the post and return paths): the
/// priority mask under pseudo-NMIs, where only it makes `irqs_disabled()`
/// and the per-CPU checks see "disabled", then [`IrqTrace`].
pub(crate) struct IrqsOff {
    flags: core::ffi::c_ulong,
    traced: bool,
}

impl IrqsOff {
    /// Masks interrupts the kernel's way (a no-op for the CPU: DAIF is
    /// already masked) until the value is dropped.
    pub(crate) fn new() -> Self {
        let mut flags = 0;
        // SAFETY: any context; `flags` is a local.
        let traced = unsafe { kp_helper_arm64_irqs_off_enter(&mut flags) };
        Self { flags, traced }
    }
}

impl Drop for IrqsOff {
    fn drop(&mut self) {
        // SAFETY: what `new` saved and told, on the same CPU (interrupts
        // masked throughout).
        unsafe { kp_helper_arm64_irqs_off_leave(self.flags, self.traced) };
    }
}

/// The BRK immediate of our probes. Unused by the kernel (brk-imm.h: 0x004
/// to 0x007 are the kernel's kprobes and uprobes, 0x100 fault, 0x400 kgdb,
/// 0x800 BUG, 0x900 KASAN, 0x55xx UBSAN, 0x8000+ CFI).
pub(crate) const KP_BRK_IMM: u16 = 0x0a0;
/// The BRK immediate that ends an out-of-line copy.
pub(crate) const KP_BRK_SS_IMM: u16 = 0x0a1;
/// The BRK immediate of a jump-optimized probe's redirect ([`opt`]).
pub(crate) const KP_BRK_REDIRECT_IMM: u16 = 0x0a2;

/// Bytes per slot: the stepped copy and its way to the post trampoline,
/// the boosted copy and the branch back, the probed address (see
/// [`slot_words`]).
pub(crate) const SLOT_SIZE: usize = 32;
/// Where the boosted copy starts in a slot.
const BOOST_OFF: usize = decode::SLOT_BOOST;
/// Number of slots (see `src/slots.rs`).
pub(crate) const NSLOTS: usize = 8192;

core::arch::global_asm!(
    ".pushsection .text.kp_insn_slots, \"ax\", %progbits",
    ".balign 4096",
    ".globl kp_insn_slots",
    "kp_insn_slots:",
    ".rept {n}",
    ".inst {brk}",
    ".endr",
    ".popsection",
    n = const SLOT_SIZE / 4 * NSLOTS,
    brk = const decode::brk(KP_BRK_SS_IMM),
);

/// A prepared probed instruction.
#[derive(Clone, Copy)]
pub(crate) struct ArchInsn {
    /// The original instruction.
    orig: u32,
    /// Whether it is simulated (classified again when it runs: keeps this
    /// record, and so `Point`, small).
    simulated: bool,
    /// The out-of-line slot, 0 when simulated.
    slot: usize,
    /// The slot's boosted copy ends in a branch back (the next original
    /// instruction is within reach of a `B` from the slot).
    boost: bool,
}

/// A slot's contents (`decode::slot_words`, pure and host-checked).
fn slot_words(orig: u32, addr: usize, slot: usize) -> Option<([u32; SLOT_SIZE / 4], bool)> {
    decode::slot_words(
        slot as u64,
        addr as u64,
        orig,
        post::common() as u64,
        decode::brk(KP_BRK_SS_IMM),
    )
}

/// `mov x9, x30`: the first patchable-entry instruction ftrace owns.
const MOV_X9_X30: u32 = 0xaa1e_03e9;
/// `bti c` and `bti jc`: the landing pad of a function called through a
/// pointer on BTI kernels (before ftrace's patchable entry).
const BTI_C: u32 = 0xd503_245f;
const BTI_JC: u32 = 0xd503_24df;
/// `nop`.
const NOP: u32 = 0xd503_201f;

/// Reads the instruction at `addr`, with the original in place of our BRK
/// or of a jump-optimized probe's `B` ([`opt`]).
fn read_insn(g: &crate::lock::RegGuard, addr: usize) -> Result<u32> {
    let [w] = read_words::<1>(addr).ok_or(EFAULT)?;
    let brk = decode::is_brk(w) == Some(KP_BRK_IMM);
    if brk || matches!(decode::classify(w), Class::B { .. }) {
        if let Some((insn, o)) = <crate::entries::Engine as crate::arch::Core>::patch_at(g, addr) {
            // Ours: the BRK, or the jump to this point's own detour.
            let jump = o.is_some_and(|o| decode::b(addr as u64, o.detour() as u64) == Some(w));
            if brk || jump {
                return Ok(insn.orig);
            }
        }
    }
    Ok(w)
}

/// PSTATE.{D,A,I,F}.
const DAIF_MASK: usize = 0xf << 6;

/// PSTATE.{N,Z,C,V}.
const NZCV_MASK: usize = 0xf << 28;
/// PSTATE.BTYPE.
const BTYPE_MASK: usize = 0x3 << 10;

/// The arm64 backend (the traits of `src/arch.rs`).
pub(crate) struct Arch;

/// `N` instruction words at `at`, read without faulting.
fn read_words<const N: usize>(at: usize) -> Option<[u32; N]> {
    let mut w = [0u32; N];
    // SAFETY: a nofault read of kernel text into a local of that size.
    let r =
        unsafe { bindings::copy_from_kernel_nofault(w.as_mut_ptr().cast(), at as *const _, 4 * N) };
    (r == 0).then_some(w)
}

impl Traps for Arch {
    /// Backend name, for messages.
    const NAME: &'static str = "arm64";

    /// Not one ftrace recursion level deep (`helpers.c`): a BRK hit in
    /// what the handlers call would be dropped by ftrace's guard on the
    /// BRK hook and reach `die()`.
    #[inline(always)]
    fn handlers_may_run() -> bool {
        let task: *const bindings::task_struct;
        // SAFETY: in the kernel `sp_el0` holds `current` (arm64's
        // `get_current()`).
        unsafe {
            core::arch::asm!(
                "mrs {}, sp_el0",
                out(reg) task,
                options(nomem, nostack, preserves_flags)
            )
        };
        // SAFETY: `current` is live while it runs; only it writes its
        // recursion word; the mask is a constant of `helpers.c`.
        let (word, bit) = unsafe {
            (
                core::ptr::read_volatile(core::ptr::addr_of!((*task).trace_recursion)),
                kp_trace_list_transition,
            )
        };
        word & bit == 0
    }

    /// Arch set-up at engine load.
    fn init() -> Result {
        patch::init();
        trap::init()
    }

    /// Arch tear-down at engine unload (after every probe is gone).
    fn exit() {
        trap::exit();
    }

    /// This CPU's copy of the per-CPU object `p` (`this_cpu_ptr()`). Through C:
    /// arm64 finds its per-CPU offset in `TPIDR_EL1` or `TPIDR_EL2` (VHE), a
    /// choice the kernel patches in at boot.
    ///
    /// # Safety
    ///
    /// `p` is a per-CPU pointer; the caller cannot migrate (interrupts or
    /// preemption off) while it uses the result.
    #[inline(always)]
    unsafe fn this_cpu_ptr<T>(p: *mut T) -> *mut T {
        // SAFETY: per the function's contract.
        unsafe { kp_helper_this_cpu_ptr(p.cast()).cast() }
    }

    /// Adds one to this CPU's copy of the per-CPU counter `c`
    /// (`__this_cpu_inc()`).
    ///
    /// # Safety
    ///
    /// `c` is a live per-CPU `u64`; interrupts are off.
    #[inline(always)]
    unsafe fn this_cpu_inc(c: *mut u64) {
        // SAFETY: per the function's contract.
        unsafe { kp_helper_counter_inc(c) };
    }
}
