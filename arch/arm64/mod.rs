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

/// The register names of the `kprobe_events` grammar (pure, `pub` for the
/// host crate).
#[allow(unreachable_pub)]
pub(crate) mod event_regs;
mod kretprobe;
mod opt;
mod patch;
mod post;
#[allow(dead_code, unreachable_pub)]
pub(crate) mod regs;
mod simulate;
mod trap;

use crate::arch::{Entries, Insns, Refusals, Steps, Traps};
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
const BOOST_OFF: usize = 16;
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

/// A slot's contents for `orig`, probed at `addr`, in slot `slot`: the
/// stepped copy and its way to the post trampoline (`post.rs`), the boosted
/// copy and `B addr + 4` (a BRK that nobody claims when out of reach: never
/// entered then), the probed address. `None` when the trampoline is out of
/// reach (the slots and the trampoline are in the engine's own text: not
/// possible).
fn slot_words(orig: u32, addr: usize, slot: usize) -> Option<([u32; SLOT_SIZE / 4], bool)> {
    let ss = decode::brk(KP_BRK_SS_IMM);
    let to_post = decode::b((slot + 12) as u64, post::common() as u64)?;
    let back = decode::b((slot + BOOST_OFF + 4) as u64, (addr + 4) as u64);
    let words = [
        orig,
        post::STP_X0_X1_PRE,
        post::LDR_X0_LIT16,
        to_post,
        orig,
        back.unwrap_or(ss),
        addr as u32,
        (addr as u64 >> 32) as u32,
    ];
    Some((words, back.is_some()))
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
fn read_insn(addr: usize) -> Result<u32> {
    let [w] = read_words::<1>(addr).ok_or(EFAULT)?;
    let brk = decode::is_brk(w) == Some(KP_BRK_IMM);
    if brk || matches!(decode::classify(w), Class::B { .. }) {
        if let Some(p) = crate::registry::lookup(addr) {
            use crate::arch::OptPoint;
            // Ours: the BRK, or the jump to this point's own detour.
            let jump =
                p.opt.jumped() && decode::b(addr as u64, p.opt.insn().detour() as u64) == Some(w);
            if brk || jump {
                return Ok(p.insn.orig);
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

use crate::blacklist::{ASM, TRAP};

/// The arm64 backend (the traits of `src/arch.rs`).
pub(crate) struct Arch;

impl Insns for Arch {
    type Insn = ArchInsn;

    const SLOT_SIZE: usize = SLOT_SIZE;

    const NSLOTS: usize = NSLOTS;

    const POINT_MAX_SIZE: usize = POINT_MAX_SIZE;

    const INSN_ALIGN: usize = 4;

    /// Decodes and classifies the instruction at `addr`, and prepares its slot
    /// unless it is simulated.
    fn prepare(addr: usize, fstart: usize, _fsize: usize) -> Result<ArchInsn> {
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
        let orig = read_insn(addr)?;
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
            *w = read_insn(addr - (n - i) * 4)?;
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
    fn describe(addr: usize) -> Result<crate::query::InsnInfo> {
        if addr % 4 != 0 {
            return Err(EINVAL);
        }
        // The original instruction, with our own BRK undone.
        let w = read_insn(addr)?;
        let class = decode::classify(w);
        let branch = matches!(
            class,
            Class::B { .. }
                | Class::Bl { .. }
                | Class::BCond { .. }
                | Class::Cbz { .. }
                | Class::Tbz { .. }
        );
        Ok(crate::query::InsnInfo {
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

/// `N` instruction words at `at`, read without faulting.
fn read_words<const N: usize>(at: usize) -> Option<[u32; N]> {
    let mut w = [0u32; N];
    // SAFETY: a nofault read of kernel text into a local of that size.
    let r =
        unsafe { bindings::copy_from_kernel_nofault(w.as_mut_ptr().cast(), at as *const _, 4 * N) };
    (r == 0).then_some(w)
}

// A pre handler's "return to the caller" at an entry served by ftrace
// resumes here (`ftrace_fixup_redirect`): `ret` returns through x30 as the
// last ftrace callback left it. (Reached by ftrace_caller's `ret x9`: a RET
// is not a BTI branch, no landing pad needed.)
core::arch::global_asm!(
    ".pushsection .text.kp_kret, \"ax\", %progbits",
    ".globl kp_arm64_return_stub",
    ".type kp_arm64_return_stub, %function",
    ".balign 4",
    "kp_arm64_return_stub:",
    "ret",
    ".size kp_arm64_return_stub, . - kp_arm64_return_stub",
    ".popsection",
);

extern "C" {
    fn kp_arm64_return_stub();
}

/// Where a function's ftrace site can be: its first three instructions
/// (`bti c`, `mov x9, x30`, then the site).
const FTRACE_ENTRY_SPAN: usize = 12;

impl Entries for Arch {
    /// The site is the patchable entry's second instruction (`bl
    /// ftrace_caller` when armed); the pre handler sees pc at it, as at a
    /// BRK, and the post handler past it (the function's first own
    /// instruction).
    const FTRACE_SITE_LEN: usize = 4;
    const FTRACE_PRE_IP_OFFSET: usize = 0;
    /// ftrace's registers at the site (`DYNAMIC_FTRACE_WITH_ARGS`): x0-x8,
    /// fp, lr, sp, pc (`kp_arch_fregs_to_regs()` in helpers.c).
    const FTRACE_FULL_REGS: bool = false;
    /// An ftrace call site (the `nop`/`bl` at function + 4) owns the 8-byte ops
    /// literal before the function (CALL_OPS) and the `mov x9, x30` before it:
    /// an address is refused when a site lies within the next 12 bytes.
    const FTRACE_GUARD: usize = 12;

    /// Where a probe asked for at a function's entry really goes: past the
    /// BTI landing pad (`bti c`) of BTI kernels, and past the two
    /// patchable-entry instructions ftrace owns (`mov x9, x30` and a NOP or
    /// `bl ftrace_caller`), which ftrace may rewrite at any time. On a
    /// PAC/shadow-call-stack kernel that is before `paciasp` and the shadow
    /// stack push: a kretprobe's new return address is the one signed and
    /// pushed.
    fn entry_probe_address(start: usize, size: usize) -> usize {
        // ftrace knows its site even under someone else's BRK.
        if let Some(site) = Self::ftrace_entry_site(start, size) {
            if site + 4 - start < size {
                return site + 4;
            }
        }
        let Ok(first) = read_insn(start) else {
            return start;
        };
        let at = if (first == BTI_C || first == BTI_JC) && size > 4 {
            start + 4
        } else {
            start
        };
        let (Ok(a), Ok(b)) = (read_insn(at), read_insn(at + 4)) else {
            return at;
        };
        let second_is_ftrace = b == NOP || matches!(decode::classify(b), Class::Bl { .. });
        if (a == MOV_X9_X30 || a == NOP) && second_is_ftrace && size > at - start + 8 {
            at + 8
        } else {
            at
        }
    }

    /// A function's ftrace call site (past `bti c`, the `mov x9, x30`
    /// before it), if it has one: entry probes there are served by the
    /// engine's `ftrace_ops` (`src/ftrace.c`) without a BRK.
    /// Asked of ftrace, not decoded: someone else's BRK may sit on the
    /// `bti c` (the kernel's kprobe on the symbol, on a BTI kernel).
    fn ftrace_entry_site(start: usize, size: usize) -> Option<usize> {
        let last = start
            .checked_add(size.min(FTRACE_ENTRY_SPAN))?
            .checked_sub(1)?;
        crate::symbols::ftrace_location_range(start, last).filter(|&s| s != 0 && s - start < size)
    }

    /// An inert instruction record for a point served by ftrace.
    fn ftrace_insn(addr: usize) -> ArchInsn {
        ArchInsn {
            orig: read_insn(addr).unwrap_or(NOP),
            simulated: false,
            slot: 0,
            boost: false,
        }
    }

    /// After a pre handler on the ftrace path redirected execution: ftrace
    /// takes the new pc (and x0-x8, fp, lr) but restores the stack pointer
    /// itself. At an entry nothing is on the stack yet, so the usual
    /// redirect, "return to the caller" (pc = lr), needs no stack change;
    /// it becomes a `ret` stub's, which returns through x30 as the last
    /// ftrace callback leaves it: the function graph tracer, whose callback
    /// may run after the engine's, hijacks the function's return through
    /// lr, and a jump straight to the caller would leave its frame on the
    /// task's shadow stack (its next return would find the wrong frame and
    /// panic). A redirect that also moved the stack pointer is undone whole
    /// (false; the function then runs normally).
    fn ftrace_fixup_redirect(regs: &mut bindings::pt_regs, orig_sp: usize, orig_ip: usize) -> bool {
        if regs::sp(regs) == orig_sp {
            if Some(regs::ip(regs)) == regs::x(regs, 30) {
                regs::set_ip(regs, kp_arm64_return_stub as *const () as usize);
            }
            return true;
        }
        regs::set_sp(regs, orig_sp);
        regs::set_ip(regs, orig_ip);
        false
    }

    /// Whether a BRK sits at `addr` now (read under `text_mutex`, which every
    /// text writer holds). Process context.
    fn breakpoint_at(addr: usize) -> bool {
        let _text = crate::symbols::TextLock::lock();
        // SAFETY: `addr` is kernel or module text, 4-byte aligned.
        decode::is_brk(unsafe { core::ptr::read_volatile(addr as *const u32) }).is_some()
    }
}

impl Refusals for Arch {
    /// Functions never to probe, with the reason: the arm64 trap path (BRK
    /// exception entry and the ftrace route to it; see helpers.c), and assembly
    /// marked `NOKPROBE`. See `src/blacklist.rs`.
    const BLACKLIST_FUNCS: &'static [(&'static kernel::str::CStr, &'static kernel::str::CStr)] = &[
        (kernel::c_str!("do_el1_brk64"), TRAP),
        (kernel::c_str!("el1_brk64"), TRAP),
        (kernel::c_str!("ftrace_ops_test"), TRAP),
        (kernel::c_str!("hash_contains_ip"), TRAP),
        (kernel::c_str!("ftrace_lookup_ip"), TRAP),
        (kernel::c_str!("__ftrace_lookup_ip"), TRAP),
        (kernel::c_str!("el1h_64_sync_handler"), TRAP),
        (kernel::c_str!("call_el1_break_hook"), TRAP),
        (kernel::c_str!("ftrace_caller"), TRAP),
        (kernel::c_str!("ftrace_ops_list_func"), TRAP),
        (kernel::c_str!("arch_ftrace_ops_list_func"), TRAP),
        // The hit path pins the engine while a return is hijacked (a
        // kretprobe's entry, reached from the BRK hook through a pointer,
        // which the derivation does not follow). A BRK hit inside a hit
        // comes back through the hook's ftrace_ops, whose recursion guard
        // lets one such level through, not two: a kp_mass probe in
        // `try_module_get()`, hit by a kretprobe's entry inside a BRK taken
        // in an ftrace callback, was taken by the kernel for a stray BRK
        // (`die()`; both CPUs then spun on `die_lock`, interrupts masked).
        (kernel::c_str!("try_module_get"), TRAP),
        (kernel::c_str!("module_put"), TRAP),
        // NOKPROBE() in arch/arm64/kernel/{entry,entry-ftrace}.S.
        (kernel::c_str!("_mcount"), ASM),
        (kernel::c_str!("cpu_switch_to"), ASM),
        (kernel::c_str!("ret_from_fork"), ASM),
        (kernel::c_str!("call_on_irq_stack"), ASM),
        (kernel::c_str!("__sdei_asm_entry_trampoline"), ASM),
        (kernel::c_str!("__sdei_asm_exit_trampoline"), ASM),
        (kernel::c_str!("__sdei_asm_handler"), ASM),
        (kernel::c_str!("__sdei_handler_abort"), ASM),
    ];

    /// Where a kernel BRK goes on its way to the engine's re-entry guard and
    /// back: the exception entry's handler, the BRK handler the engine's
    /// `ftrace_ops` sits on, and ftrace's dispatch to that ops (the roots of
    /// the derived trap-path blacklist, `src/blacklist.rs`).
    const TRAP_ROOTS: &'static [&'static kernel::str::CStr] = &[
        kernel::c_str!("el1h_64_sync_handler"),
        kernel::c_str!("do_el1_brk64"),
        kernel::c_str!("ftrace_ops_list_func"),
        kernel::c_str!("arch_ftrace_ops_list_func"),
        kernel::c_str!("ftrace_ops_assist_func"),
        // What a kretprobe's entry calls through resolved pointers, inside
        // the hit (and, at an entry served by ftrace, inside the engine's
        // ftrace callback): the function graph tracer's push and the
        // shadow stack's return-address lookup. A kp_mass probe in
        // `fgraph_reserve_data()` was taken there for a stray BRK
        // (`die()`; seed 0x81a31edd on arm64-hardened).
        kernel::c_str!("function_graph_enter"),
        kernel::c_str!("fgraph_reserve_data"),
        kernel::c_str!("fgraph_retrieve_data"),
        kernel::c_str!("ftrace_graph_ret_addr"),
    ];

    /// The engine's own trap entry: what it calls is on the trap path too.
    fn trap_entry() -> usize {
        trap::kp_arm64_brk as *const () as usize
    }

    /// ftrace's assembly (`arch/arm64/kernel/entry-ftrace.S`), first to last
    /// symbol: `ftrace_caller` has inner labels that split it in kallsyms, and
    /// every traced call (the engine's BRK hook among them) runs it.
    const BLACKLIST_SPANS: &'static [(
        &'static kernel::str::CStr,
        &'static kernel::str::CStr,
        &'static kernel::str::CStr,
    )] = &[
        (
            kernel::c_str!("ftrace_caller"),
            kernel::c_str!("ftrace_stub_direct_tramp"),
            crate::blacklist::FTRACE_ASM,
        ),
        // Without direct calls (kCFI kernels: no CALL_OPS) there is no
        // `ftrace_stub_direct_tramp`, and the inner label `ftrace_call`
        // is a symbol of its own after `ftrace_caller`'s.
        (
            kernel::c_str!("ftrace_caller"),
            kernel::c_str!("ftrace_call"),
            crate::blacklist::FTRACE_ASM,
        ),
        (
            kernel::c_str!("ftrace_stub"),
            kernel::c_str!("ftrace_stub_graph"),
            crate::blacklist::FTRACE_ASM,
        ),
        (
            kernel::c_str!("return_to_handler"),
            kernel::c_str!("return_to_handler"),
            crate::blacklist::FTRACE_ASM,
        ),
    ];

    /// Hypervisor and identity-mapped text, as `arch_populate_kprobe_blacklist()`.
    const BLACKLIST_SECTIONS: &'static [(
        &'static kernel::str::CStr,
        &'static kernel::str::CStr,
        &'static kernel::str::CStr,
    )] = &[
        (
            kernel::c_str!("__hyp_text_start"),
            kernel::c_str!("__hyp_text_end"),
            kernel::c_str!("hyp text"),
        ),
        (
            kernel::c_str!("__hyp_idmap_text_start"),
            kernel::c_str!("__hyp_idmap_text_end"),
            kernel::c_str!("hyp idmap text"),
        ),
        (
            kernel::c_str!("__idmap_text_start"),
            kernel::c_str!("__idmap_text_end"),
            kernel::c_str!("idmap text"),
        ),
    ];
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
