// SPDX-License-Identifier: GPL-2.0

//! x86_64 backend: int3 breakpoints, out-of-line execution, die-notifier entry.
//!
//! A probed instruction's first byte is replaced by `int3`. When it fires, the
//! die-notifier chain (`DIE_INT3`, reached from `do_int3()`) brings us to
//! [`trap::kp_x86_int3`]. After the pre handler, the CPU resumes at a copy of the
//! original instruction in an out-of-line slot, followed by another `int3`; that
//! second trap finishes the step (fix up `ip`, restore `IF`) and runs the post
//! handler. This is the kernel's own x86 scheme since 5.15 (no TF single-step):
//! no #DB, and interrupts stay off between the two traps.
//!
//! Branches, calls and returns cannot run out of line (they would not reach
//! the trailing int3): they are emulated at the hit ([`emulate`]), as the
//! kernel does.
//!
//! Boosting: an instruction that may run out of line followed by a jump
//! gets a second copy ending in a jump back, used when no probe there has a
//! post handler (one trap per hit, as the kernel's boosting). With a post
//! handler, the step copy of such an instruction ends in a call to a
//! register-saving trampoline instead of the second int3 ([`post`]): still
//! one trap per hit.

/// The body of the kretprobe and detour trampolines: builds a `struct
/// pt_regs` below the words the trampoline's entry pushed (`sp` and `ip` are
/// for the callee to fill in), masks interrupts, calls `$handler(regs)`,
/// then restores every register and the flags and drops the frame, leaving
/// the stack pointer at those words (`lea`, so the flags stay restored).
macro_rules! pt_regs_trampoline {
    ($handler:literal) => {
        concat!(
            "pushq $0x18\n", // ss
            "pushq %rsp\n",  // sp
            "pushfq\n",
            "cli\n",
            "pushq $0x10\n", // cs
            "pushq $0\n",    // ip
            "pushq $-1\n",   // orig_ax
            "pushq %rdi\n",
            "pushq %rsi\n",
            "pushq %rdx\n",
            "pushq %rcx\n",
            "pushq %rax\n",
            "pushq %r8\n",
            "pushq %r9\n",
            "pushq %r10\n",
            "pushq %r11\n",
            "pushq %rbx\n",
            "pushq %rbp\n",
            "pushq %r12\n",
            "pushq %r13\n",
            "pushq %r14\n",
            "pushq %r15\n",
            "movq %rsp, %rdi\n",
            "call ",
            $handler,
            "\n",
            "popq %r15\n",
            "popq %r14\n",
            "popq %r13\n",
            "popq %r12\n",
            "popq %rbp\n",
            "popq %rbx\n",
            "popq %r11\n",
            "popq %r10\n",
            "popq %r9\n",
            "popq %r8\n",
            "popq %rax\n",
            "popq %rcx\n",
            "popq %rdx\n",
            "popq %rsi\n",
            "popq %rdi\n",
            "addq $24, %rsp\n", // orig_ax, ip, cs
            "popfq\n",
            "leaq 16(%rsp), %rsp\n", // sp, ss
        )
    };
}

/// A call from a [`pt_regs_trampoline!`] reached by `push $addr; call`
/// (the jump-optimization detour, the post tail): the words above its
/// `pt_regs`.
struct TrampFrame {
    /// The word the `call` pushed: where the trampoline's `ret $8` goes.
    resume_slot: *mut usize,
    /// Its original value (the code after the `call`).
    resume: usize,
    /// The pushed probed address.
    addr: usize,
    /// The stack pointer before the two words were pushed.
    sp: usize,
}

#[cfg(CONFIG_TRACE_IRQFLAGS)]
extern "C" {
    fn trace_hardirqs_off();
    fn trace_hardirqs_on();
}

/// Entry of a trampoline's handler: tells lockdep about the trampoline's
/// `cli` (as `local_irq_save()` would) and reads the frame.
///
/// # Safety
///
/// `regs` is the `pt_regs` such a trampoline built; interrupts are off.
#[inline(always)]
unsafe fn tramp_enter<'a>(regs: *mut bindings::pt_regs) -> (&'a mut bindings::pt_regs, TrampFrame) {
    #[cfg(CONFIG_TRACE_IRQFLAGS)]
    // SAFETY: interrupts are off.
    unsafe {
        trace_hardirqs_off()
    };
    let resume_slot = (regs as usize + core::mem::size_of::<bindings::pt_regs>()) as *mut usize;
    // SAFETY: per the function's contract, the two words sit above `regs`.
    let (resume, addr) = unsafe { (*resume_slot, *resume_slot.add(1)) };
    let frame = TrampFrame {
        resume_slot,
        resume,
        addr,
        sp: resume_slot as usize + 16,
    };
    // SAFETY: per the function's contract.
    (unsafe { &mut *regs }, frame)
}

/// Exit of a trampoline's handler: the trampoline returns to `to` and
/// restores `regs` (lockdep learns that its `popfq` turns interrupts back
/// on, if it does).
///
/// # Safety
///
/// As for [`tramp_enter`], which gave `frame`.
#[inline(always)]
unsafe fn tramp_leave(regs: &bindings::pt_regs, frame: &TrampFrame, to: usize) {
    // SAFETY: the slot is the return address of the trampoline's `ret`.
    unsafe { *frame.resume_slot = to };
    #[cfg(CONFIG_TRACE_IRQFLAGS)]
    if regs.flags & FLAGS_IF != 0 {
        // SAFETY: interrupts are still off until the `popfq`.
        unsafe { trace_hardirqs_on() };
    }
    #[cfg(not(CONFIG_TRACE_IRQFLAGS))]
    let _ = regs;
}

// Pure logic shared with the host tests: `pub` there, partly unused here.
#[allow(dead_code, unreachable_pub)]
pub(crate) mod decode;
/// The most a registry `Point` may take here (with the jump optimizer's state).
pub(crate) const POINT_MAX_SIZE: usize = 128;

mod emulate;
/// The register names of the `kprobe_events` grammar (pure, `pub` for the
/// host crate).
#[allow(unreachable_pub)]
pub(crate) mod event_regs;
mod ftrace;
mod kretprobe;
mod opt;
mod post;
#[allow(dead_code, unreachable_pub)]
pub(crate) mod regs;
mod trap;

use crate::{slots, text};
use core::sync::atomic::Ordering;
use decode::{decode, Class, MAX_INSN_LEN};
use kernel::bindings;
use kernel::prelude::*;
pub(crate) use kretprobe::{
    clear_kret_stub, kret_graph_retp, kret_hijack, kret_return_address, kret_stubs_written,
    write_kret_stub,
};

/// How far before an ftrace call site its bytes reach: none on x86_64 (the
/// 5-byte site itself is checked).
pub(crate) const FTRACE_GUARD: usize = 0;

extern "C" {
    /// This CPU's per-CPU offset, itself a per-CPU variable (exported).
    static this_cpu_off: usize;
}

/// This CPU's copy of the per-CPU object `p` (`this_cpu_ptr()`), inline:
/// the hit paths use it on every hit, where a call into C costs more under
/// QEMU's TCG than the access.
///
/// # Safety
///
/// `p` is a per-CPU pointer; the caller cannot migrate (interrupts or
/// preemption off) while it uses the result.
#[inline(always)]
pub(crate) unsafe fn this_cpu_ptr<T>(p: *mut T) -> *mut T {
    let off: usize;
    // SAFETY: `%gs` is this CPU's per-CPU base; `this_cpu_off` is a per-CPU
    // variable (what `this_cpu_read(this_cpu_off)` reads).
    unsafe {
        core::arch::asm!(
            "mov {off}, qword ptr gs:[{var}]",
            off = out(reg) off,
            var = in(reg) core::ptr::addr_of!(this_cpu_off),
            options(nostack, readonly, preserves_flags),
        )
    };
    p.wrapping_byte_add(off)
}

/// Adds one to this CPU's copy of the per-CPU counter `c`
/// (`__this_cpu_inc()`: one `inc` relative to `%gs`, no lock prefix).
///
/// # Safety
///
/// `c` is a live per-CPU `u64`; interrupts are off (no other writer on this
/// CPU).
#[inline(always)]
pub(crate) unsafe fn this_cpu_inc(c: *mut u64) {
    // SAFETY: per the function's contract.
    unsafe {
        core::arch::asm!(
            "inc qword ptr gs:[{c}]",
            c = in(reg) c,
            options(nostack),
        )
    };
}

pub(crate) use opt::{OptInsn, OptState};

/// Whether this backend has jump optimization (`src/optimize.rs`).
pub(crate) const OPT_SUPPORTED: bool = true;
/// The most bytes a jump covers.
pub(crate) const OPT_MAX_SPAN: usize = opt::MAX_SPAN;

/// Checks whether the probe at `addr` (in the function `[fstart, fstart +
/// fsize)`) can be jump-optimized and builds its detour; `other_probe(a)`:
/// whether another probe sits at `a`. Refusals say why and whether they are
/// permanent (false: out of slots or memory). Registration lock held.
pub(crate) fn opt_prepare(
    addr: usize,
    fstart: usize,
    fsize: usize,
    other_probe: impl Fn(usize) -> bool,
) -> core::result::Result<OptInsn, (&'static str, bool)> {
    opt::prepare(addr, fstart, fsize, other_probe)
}

/// Bytes the jump covers.
pub(crate) fn opt_span(o: &OptInsn) -> usize {
    opt::span(o)
}

/// The original bytes under the jump.
pub(crate) fn opt_orig(o: &OptInsn) -> &[u8] {
    o.orig()
}

/// Writes the jump over the armed breakpoint.
pub(crate) fn opt_jump(addr: usize, o: &OptInsn) -> Result {
    opt::jump(addr, o)
}

/// Puts the breakpoint and the original bytes back.
pub(crate) fn opt_unjump(addr: usize, o: &OptInsn) -> Result {
    opt::unjump(addr, o)
}

/// Frees the detour once no task can be in it.
pub(crate) fn opt_release(o: &OptInsn) {
    opt::release(o)
}

/// Backend name, for messages.
pub(crate) const NAME: &str = "x86_64";

/// The breakpoint instruction.
const INT3: u8 = 0xcc;
/// `endbr64`.
const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
/// The 5-byte NOP that ftrace leaves at an untraced `__fentry__` site.
const FTRACE_NOP: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
/// `call rel32`, what an ftrace site holds while traced.
const CALL_REL32: u8 = 0xe8;

/// Bytes per out-of-line slot: the step copy (instruction + int3, or + the
/// [`post`] tail) in the first 32 bytes, the boosted copy (instruction +
/// `jmp rel32`) after it.
pub(crate) const SLOT_SIZE: usize = 64;
/// Where the boosted copy starts in a slot.
const BOOST_OFF: usize = 32;
/// Number of slots (see `src/slots.rs`).
pub(crate) const NSLOTS: usize = 8192;

core::arch::global_asm!(
    ".pushsection .text.kp_insn_slots, \"ax\", @progbits",
    ".balign 4096",
    ".globl kp_insn_slots",
    "kp_insn_slots:",
    ".fill {size}, 1, 0xcc",
    ".popsection",
    size = const SLOT_SIZE * NSLOTS,
);

/// A prepared probed instruction.
#[derive(Clone, Copy)]
pub(crate) struct ArchInsn {
    /// Address of the out-of-line slot.
    slot: usize,
    /// Length of the instruction (at most `MAX_INSN_LEN`: a byte keeps
    /// `Point`, which holds this, in a smaller slab).
    len: u8,
    /// The original bytes.
    orig: [u8; MAX_INSN_LEN],
    /// How to emulate it, when it cannot run out of line.
    emulate: Option<emulate::Op>,
    /// Whether the copy at `slot + BOOST_OFF` (ending in a jump back) may be
    /// used when no post handler needs the second trap.
    boostable: bool,
    /// Whether the step copy ends in the [`post`] tail rather than an int3.
    post_tail: bool,
}

extern "C" {
    fn kp_helper_sync_all_cores();
}

/// Reads up to `MAX_INSN_LEN` bytes of text at `addr`, with the original
/// bytes in place of our own breakpoints and jumps. Registration lock held
/// (the jumps' bytes are read under it).
fn read_text(addr: usize) -> Result<[u8; MAX_INSN_LEN]> {
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
    for (i, b) in buf.iter_mut().enumerate() {
        if *b == INT3 {
            if let Some(p) = crate::registry::lookup(addr + i) {
                *b = p.insn.orig[0];
            }
        }
    }
    crate::optimize::overlay(addr, &mut buf);
    Ok(buf)
}

/// Where a probe asked for at a function's entry goes when it does not
/// take the ftrace path (debugfs `ftrace` 0): past `endbr64` and past the
/// ftrace call site, whose bytes belong to ftrace (it rewrites them at any
/// time, and they may call anything: ftrace's trampolines, a BPF
/// trampoline, this engine's parked direct sites). The first real
/// instruction is probed.
pub(crate) fn entry_probe_address(start: usize, size: usize) -> usize {
    let Ok(b) = read_text(start) else {
        return start;
    };
    let mut at = 0;
    if b[..4] == ENDBR64 {
        at = 4;
    }
    if crate::symbols::is_ftrace_site(start + at)
        || b[at..at + 5] == FTRACE_NOP
        || b[at] == CALL_REL32 && is_ftrace_call(start + at, &b[at..])
    {
        at += 5;
    }
    if at < size {
        start + at
    } else {
        start
    }
}

/// Where a function's ftrace call site is (past `endbr64`), if it has one:
/// entry probes there take the engine's ftrace path (`src/ftrace.rs`).
pub(crate) fn ftrace_entry_site(start: usize, _size: usize) -> Option<usize> {
    let b = read_text(start).ok()?;
    let at = if b[..4] == ENDBR64 { start + 4 } else { start };
    crate::symbols::is_ftrace_site(at).then_some(at)
}

/// An inert instruction record for a point served by ftrace (no slot, no
/// breakpoint: the 5-byte call site).
pub(crate) fn ftrace_insn(addr: usize) -> ArchInsn {
    ArchInsn {
        slot: 0,
        len: FTRACE_SITE_LEN as u8,
        orig: read_text(addr).unwrap_or([0; MAX_INSN_LEN]),
        emulate: None,
        boostable: false,
        post_tail: false,
    }
}

core::arch::global_asm!(
    ".pushsection .text.kp_kret, \"ax\", @progbits",
    ".globl kp_x86_return_stub",
    ".type kp_x86_return_stub, @function",
    "kp_x86_return_stub:",
    // Returns from a probed function at its entry: the caller's return
    // address is still on the stack (see `ftrace_fixup_redirect`).
    "ret",
    "int3",
    ".size kp_x86_return_stub, . - kp_x86_return_stub",
    ".popsection",
    ".pushsection .discard.func_stack_frame_non_standard, \"aw\"",
    ".long kp_x86_return_stub - .",
    ".popsection",
);

extern "C" {
    fn kp_x86_return_stub();
}

/// After a pre handler on the ftrace path redirected execution: ftrace
/// honours a new instruction pointer but not a new stack pointer. The usual
/// redirect at an entry, "return to the caller" (ip = the return address at
/// `orig_sp`, sp = `orig_sp` + 8), becomes a jump to a `ret` with the stack
/// left as it was (the kernel's `override_function_with_return()` does the
/// same). Any other stack change cannot be honoured: it is undone together
/// with the redirect (false; the function then runs normally).
pub(crate) fn ftrace_fixup_redirect(
    regs: &mut bindings::pt_regs,
    orig_sp: usize,
    orig_ip: usize,
) -> bool {
    if regs.sp == orig_sp {
        return true;
    }
    let mut ret = 0usize;
    // SAFETY: a nofault read of the word at the entry's stack pointer.
    let readable = unsafe {
        bindings::copy_from_kernel_nofault((&mut ret as *mut usize).cast(), orig_sp as *const _, 8)
    } == 0;
    let new_sp = regs.sp;
    regs.sp = orig_sp;
    if readable && new_sp == orig_sp + 8 && regs.ip == ret {
        regs.ip = kp_x86_return_stub as *const () as usize;
        return true;
    }
    regs.ip = orig_ip;
    false
}

/// Bytes of an ftrace call site (`call __fentry__` / its NOP).
pub(crate) const FTRACE_SITE_LEN: usize = 5;
/// Where the pre handler sees the instruction pointer on the ftrace path,
/// relative to the site: one past it, as after an int3.
pub(crate) const FTRACE_PRE_IP_OFFSET: usize = 1;

/// Whether the `call rel32` at `addr` calls into ftrace (a traced function).
fn is_ftrace_call(addr: usize, b: &[u8]) -> bool {
    let rel = i32::from_le_bytes([b[1], b[2], b[3], b[4]]);
    let target = (addr as i64 + 5 + rel as i64) as usize;
    match crate::symbols::symbol_at(target) {
        Some(s) => s.name().starts_with(b"ftrace_") || s.name() == b"__fentry__",
        None => false,
    }
}

/// The first bytes of the kernel's optprobe detour template
/// (`optprobe_template_entry` up to `optprobe_template_clac`, the part
/// the kernel copies unchanged into every detour), read at init; length 0
/// without CONFIG_OPTPROBES.
static OPTPROBE_HEAD: [core::sync::atomic::AtomicU8; 8] =
    [const { core::sync::atomic::AtomicU8::new(0) }; 8];
static OPTPROBE_HEAD_LEN: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

fn init_optprobe_head() {
    let (Some(entry), Some(clac)) = (
        crate::symbols::lookup_name(kernel::c_str!("optprobe_template_entry")),
        crate::symbols::lookup_name(kernel::c_str!("optprobe_template_clac")),
    ) else {
        return;
    };
    let n = clac.wrapping_sub(entry);
    if !(1..=OPTPROBE_HEAD.len()).contains(&n) {
        return;
    }
    let Ok(b) = read_text(entry) else {
        return;
    };
    for (slot, &v) in OPTPROBE_HEAD.iter().zip(b.iter()).take(n) {
        slot.store(v, Ordering::Relaxed);
    }
    OPTPROBE_HEAD_LEN.store(n, Ordering::Release);
}

/// Whether `t` holds the start of a kernel optprobe detour.
fn is_optprobe_detour(t: usize) -> bool {
    let n = OPTPROBE_HEAD_LEN.load(Ordering::Acquire);
    if n == 0 {
        return false;
    }
    let mut b = [0u8; 8];
    // SAFETY: a nofault read into a local of 8 bytes.
    if unsafe { bindings::copy_from_kernel_nofault(b.as_mut_ptr().cast(), t as *const _, n) } != 0 {
        return false;
    }
    OPTPROBE_HEAD
        .iter()
        .zip(b.iter())
        .take(n)
        .all(|(h, &v)| h.load(Ordering::Relaxed) == v)
}

/// Whether every byte from `pc` to `fend` is an `int3`: padding at the end
/// of a function (after a `ud2`, a call that does not return, a `ret`).
fn int3_to_end(pc: usize, fend: usize) -> bool {
    let mut at = pc;
    while at < fend {
        let Ok(b) = read_text(at) else {
            return false;
        };
        let n = (fend - at).min(b.len());
        if b.iter().take(n).any(|&c| c != INT3) {
            return false;
        }
        at += n;
    }
    true
}

/// Whether the instruction at `pc` (`insn`, decoded from `bytes` as
/// `read_text` shows them: our own breakpoints and jumps already replaced
/// by the original bytes; `prev`: the class of the instruction before it;
/// `fend`: the function's end) is someone else's patch, whose original
/// instructions, and so the boundaries after it, are unknown:
///
/// - an `int3` that is neither padding to the function's end nor padding
///   after a `ret` or `jmp` (the compiler's straight-line-speculation
///   padding, and the kernel's own: alternatives that shorten a `jmp` fill
///   the rest with `int3`, on any config): the kernel's kprobes, kgdb, a
///   text_poke_bp() in progress. (A kernel kprobe on the instruction after
///   a `ret` or `jmp` looks the same as that padding: README, Known
///   limits.)
/// - a `jmp rel32` to the start of a kernel optprobe detour (its first
///   bytes are the kernel's template): a jump-optimized kernel kprobe, whose
///   5 bytes cover more than one instruction. Other jumps out of text
///   (freed init code, ITS thunks, BPF images) are real instructions.
pub(super) fn foreign_patch(
    pc: usize,
    insn: &decode::Insn,
    bytes: &[u8],
    prev: Option<Class>,
    fend: usize,
) -> Option<&'static str> {
    match insn.class {
        Class::Int3 => {
            let after_jump = matches!(
                prev,
                Some(Class::Ret | Class::JmpRel | Class::JmpIndirect | Class::Int3)
            );
            (!after_jump && !int3_to_end(pc, fend)).then_some("someone else's int3")
        }
        Class::JmpRel if insn.rel_len == 4 => {
            let t = insn.rel_target(pc as u64, bytes)? as usize;
            is_optprobe_detour(t).then_some("the kernel's jump-optimized kprobe")
        }
        _ => None,
    }
}

/// Whether an `int3` sits at `addr` now (read under `text_mutex`, which
/// every text writer holds, ftrace's `text_poke_bp()` included, so a
/// breakpoint it places for a moment is not seen). Process context.
pub(crate) fn breakpoint_at(addr: usize) -> bool {
    let _text = crate::symbols::TextLock::lock();
    // SAFETY: `addr` is kernel or module text (a function's ftrace site).
    unsafe { core::ptr::read_volatile(addr as *const u8) == INT3 }
}

/// Finds the instruction at `addr` by decoding from the function start, and
/// prepares its out-of-line copy.
pub(crate) fn prepare(addr: usize, fstart: usize, fsize: usize) -> Result<ArchInsn> {
    let mut pc = fstart;
    let mut prev = None;
    let insn = loop {
        let bytes = read_text(pc)?;
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
        if let Some(why) = foreign_patch(pc, &insn, &bytes, prev, fstart + fsize) {
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
    if let Some(why) = foreign_patch(addr, &insn, &bytes, Some(Class::Ret), fstart + fsize) {
        pr_err!("x86: {:#x} holds {}\n", addr, why);
        return Err(EBUSY);
    }
    let len = insn.len as usize;
    match emulate::plan(&insn, addr, &bytes) {
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
    let boostable = can_boost(&insn);
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

/// Writes `op rel32` (a `call` or `jmp`) at `code[at..]`, which runs at
/// `base + at`, reaching `to`.
fn put_rel32(code: &mut [u8], at: usize, op: u8, base: usize, to: usize) -> Result {
    let rel = to as i64 - (base + at + 5) as i64;
    let rel = i32::try_from(rel).map_err(|_| ERANGE)?;
    code[at] = op;
    code[at + 1..at + 5].copy_from_slice(&rel.to_le_bytes());
    Ok(())
}

/// Copies the instruction to `copy[at..]`, to run at `slot + at`, with a
/// RIP-relative displacement re-aimed at the original target.
fn place_copy(
    copy: &mut [u8; SLOT_SIZE],
    at: usize,
    insn: &decode::Insn,
    bytes: &[u8; MAX_INSN_LEN],
    addr: usize,
    slot: usize,
) -> Result {
    let len = insn.len as usize;
    copy[at..at + len].copy_from_slice(&bytes[..len]);
    if insn.rip_relative {
        let off = at + insn.disp_off as usize;
        let disp = i32::from_le_bytes([copy[off], copy[off + 1], copy[off + 2], copy[off + 3]]);
        let new = (disp as i64) + (addr as i64) - ((slot + at) as i64);
        let new = i32::try_from(new).map_err(|_| ERANGE)?;
        copy[off..off + 4].copy_from_slice(&new.to_le_bytes());
    }
    Ok(())
}

/// Whether the copy may run with interrupts on and return by a jump
/// (boosting, one trap per hit instead of two). As the kernel's
/// `can_boost()`, conservatively: one-byte-map instructions without `lock`,
/// `rep`, address-size or CS prefixes, except those that may trap by design
/// or touch the flags the step protects (x87 escapes, `div`/`idiv` and the
/// other F6/F7/FE group members, `pushf`, `bound`), plus a few two-byte
/// ones; no VEX/EVEX.
fn can_boost(insn: &decode::Insn) -> bool {
    if insn.class != Class::Plain
        || insn.lock
        || insn.rep
        || insn.addrsize
        || insn.seg == Some(0x2e)
        || insn.vex
        || insn.evex
        || insn.string_op
    {
        return false;
    }
    match insn.map {
        decode::OpMap::Legacy => !matches!(
            insn.opcode,
            0x62 | 0x9c | 0xd6 | 0xd8..=0xdf | 0xf6 | 0xf7 | 0xfe
        ),
        // nop, cmovcc, setcc, imul, movzx/movsx
        decode::OpMap::M0F => {
            matches!(insn.opcode, 0x1f | 0x40..=0x4f | 0x90..=0x9f | 0xaf | 0xb6 | 0xb7 | 0xbe | 0xbf)
        }
        _ => false,
    }
}

/// Gives back the resources of a prepared instruction.
pub(crate) fn release(insn: ArchInsn) {
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
pub(crate) fn clear_slot(slot: usize) {
    // SAFETY: a deferred-freed slot: every task has left it.
    let _ = unsafe { text::write(slot, &[INT3; SLOT_SIZE]) };
}

/// Writes the breakpoint. Writing one byte is atomic for other CPUs: each
/// executes either the old instruction or the int3. `EBUSY` when the byte
/// is no longer the original one (someone else patched it while the probe
/// was disarmed: the kernel's kprobes, kgdb): theirs stays.
pub(crate) fn arm(addr: usize, insn: &ArchInsn) -> Result {
    // SAFETY: the first byte of the instruction `prepare` decoded and
    // validated (the registry arms only prepared points).
    unsafe { text::write_if_unchanged(addr, &insn.orig[..1], &[INT3]) }?;
    // SAFETY: process context.
    unsafe { kp_helper_sync_all_cores() };
    Ok(())
}

/// Restores the original first byte. `EBUSY` when the byte is no longer
/// the engine's int3 (someone else's patch on top of it, which saved the
/// int3 as its original: writing over it would leave a stray int3 behind
/// when they restore theirs).
pub(crate) fn disarm(addr: usize, insn: &ArchInsn) -> Result {
    // SAFETY: as in `arm`: the original byte goes back.
    unsafe { text::write_if_unchanged(addr, &[INT3], &insn.orig[..1]) }?;
    // SAFETY: process context.
    unsafe { kp_helper_sync_all_cores() };
    Ok(())
}

/// `X86_EFLAGS_IF`.
const FLAGS_IF: usize = 1 << 9;

/// Sends the CPU to the out-of-line copy with interrupts off.
pub(crate) fn setup_step(
    _addr: usize,
    insn: &ArchInsn,
    regs: &mut bindings::pt_regs,
    saved: &mut usize,
) {
    *saved = regs.flags & FLAGS_IF;
    regs.flags &= !FLAGS_IF;
    regs.ip = insn.slot;
}

/// Whether `ip` lies in `insn`'s out-of-line copy (a fault while stepping).
pub(crate) fn in_copy(ip: usize, insn: &ArchInsn) -> bool {
    insn.slot != 0 && ip >= insn.slot && ip < insn.slot + insn.len as usize
}

/// Gives up a step that faulted: restores what [`setup_step`] saved (the
/// caller sets the instruction pointer).
pub(crate) fn abort_step(_insn: &ArchInsn, regs: &mut bindings::pt_regs, saved: usize) {
    regs.flags |= saved;
}

/// Whether a breakpoint at `trap_addr` is the one that ends `insn`'s copy
/// (never for a copy with the [`post`] tail).
pub(crate) fn is_step_done(trap_addr: usize, insn: &ArchInsn) -> bool {
    insn.slot != 0 && !insn.post_tail && trap_addr == insn.slot + insn.len as usize
}

/// Whether `insn` can be boosted (see [`can_boost`]).
pub(crate) fn boostable(insn: &ArchInsn) -> bool {
    insn.boostable
}

/// Resumes in the boosted copy: interrupts as they were, no second trap.
/// The slot may then be executing with preemption possible; see
/// `src/slots.rs` for when it can be reused.
pub(crate) fn setup_boost(_addr: usize, insn: &ArchInsn, regs: &mut bindings::pt_regs) {
    regs.ip = insn.slot + BOOST_OFF;
}

/// Emulates the instruction in place of the step (branches, calls,
/// returns); returns false when it must run out of line instead.
#[inline(always)]
pub(crate) fn simulate(addr: usize, insn: &ArchInsn, regs: &mut bindings::pt_regs) -> bool {
    match insn.emulate {
        Some(op) => {
            emulate::run(op, addr, insn.len as usize, regs);
            true
        }
        None => false,
    }
}

/// Resumes after the original instruction.
pub(crate) fn finish_step(
    addr: usize,
    insn: &ArchInsn,
    regs: &mut bindings::pt_regs,
    saved: usize,
) {
    regs.ip = addr + insn.len as usize;
    regs.flags |= saved;
}

/// Describes the instruction at `addr` (`kp_decode_insn()`).
pub(crate) fn describe(addr: usize) -> Result<crate::query::InsnInfo> {
    // The original bytes, with our own breakpoints and jumps undone.
    let b = {
        let _g = crate::lock::RegGuard::lock();
        read_text(addr)?
    };
    let i = decode(&b).map_err(|_| crate::errno::eilseq())?;
    Ok(crate::query::InsnInfo {
        len: i.len as usize,
        call: matches!(i.class, Class::CallRel | Class::CallIndirect),
        target: i.rel_target(addr as u64, &b).map(|t| t as usize),
    })
}

/// Calls `f` with the target of every direct `call`/`jmp`/`jcc` in
/// `[start, end)`, decoding linearly (padding decodes as one-byte int3 or
/// NOPs; an undecodable byte is skipped). Process context.
pub(crate) fn for_each_direct_branch(start: usize, end: usize, mut f: impl FnMut(usize)) {
    let mut at = start;
    while at < end {
        let mut b = [0u8; MAX_INSN_LEN];
        // Not past `end`: the text after the last function may be unmapped.
        let n = (end - at).min(b.len());
        // SAFETY: a nofault read of kernel text into a local of at least
        // `n` bytes.
        let r =
            unsafe { bindings::copy_from_kernel_nofault(b.as_mut_ptr().cast(), at as *const _, n) };
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

/// Arch set-up at engine load.
pub(crate) fn init() -> Result {
    init_optprobe_head();
    trap::init()
}

/// Arch tear-down at engine unload (after every probe is gone).
pub(crate) fn exit() {
    trap::exit();
}

use crate::blacklist::{ASM, TRAP};

/// Functions never to probe, with the reason: the x86_64 trap path up to the
/// engine's recursion check (`exc_int3` -> `do_int3` -> `notify_die` -> the
/// notifier chain; most are `noinstr` or `NOKPROBE_SYMBOL` already), and
/// assembly marked `_ASM_NOKPROBE`. See `src/blacklist.rs`.
pub(crate) const BLACKLIST_FUNCS: &[(&kernel::str::CStr, &kernel::str::CStr)] = &[
    (kernel::c_str!("exc_int3"), TRAP),
    (kernel::c_str!("do_int3"), TRAP),
    (kernel::c_str!("do_int3_user"), TRAP),
    (kernel::c_str!("poke_int3_handler"), TRAP),
    (kernel::c_str!("kprobe_int3_handler"), TRAP),
    (kernel::c_str!("notify_die"), TRAP),
    (kernel::c_str!("atomic_notifier_call_chain"), TRAP),
    (kernel::c_str!("notifier_call_chain"), TRAP),
    (kernel::c_str!("irqentry_nmi_enter"), TRAP),
    (kernel::c_str!("irqentry_nmi_exit"), TRAP),
    (kernel::c_str!("sync_core"), TRAP),
    // _ASM_NOKPROBE in arch/x86/entry/{thunk,entry}.S (THUNK macro).
    (kernel::c_str!("preempt_schedule_thunk"), ASM),
    (kernel::c_str!("preempt_schedule_notrace_thunk"), ASM),
    (kernel::c_str!("warn_thunk_thunk"), ASM),
];

/// Where a kernel breakpoint goes on its way to the engine's re-entry
/// guard and back (`exc_int3()`'s kernel-mode branch): the roots of the
/// derived trap-path blacklist (`src/blacklist.rs`). `exc_int3()` itself is
/// noinstr; its user-mode branch (`do_int3_user()`) and `die()` are not on
/// a kernel breakpoint's way.
pub(crate) const TRAP_ROOTS: &[&kernel::str::CStr] = &[
    kernel::c_str!("poke_int3_handler"),
    kernel::c_str!("irqentry_nmi_enter"),
    kernel::c_str!("do_int3"),
    kernel::c_str!("notify_die"),
    kernel::c_str!("atomic_notifier_call_chain"),
    kernel::c_str!("notifier_call_chain"),
    kernel::c_str!("irqentry_nmi_exit"),
];

/// The engine's own trap entry: what it calls is on the trap path too.
pub(crate) fn trap_entry() -> usize {
    trap::kp_x86_int3 as *const () as usize
}

/// ftrace's assembly (`arch/x86/kernel/ftrace_64.S`), first to last symbol:
/// `ftrace_caller` and `ftrace_regs_caller` are templates copied into each
/// ops' trampoline (a breakpoint there would be copied with them), with
/// inner labels that split them in kallsyms; `__fentry__` and the stubs are
/// what call sites call.
pub(crate) const BLACKLIST_SPANS: &[(
    &kernel::str::CStr,
    &kernel::str::CStr,
    &kernel::str::CStr,
)] = &[
    (
        kernel::c_str!("ftrace_stub"),
        kernel::c_str!("return_to_handler"),
        crate::blacklist::FTRACE_ASM,
    ),
    (
        kernel::c_str!("ftrace_stub"),
        kernel::c_str!("ftrace_stub_direct_tramp"),
        crate::blacklist::FTRACE_ASM,
    ),
];

/// Arch-specific text sections that must not be probed (none beyond the
/// generic list on x86_64: `.entry.text` is already there).
pub(crate) const BLACKLIST_SECTIONS: &[(
    &kernel::str::CStr,
    &kernel::str::CStr,
    &kernel::str::CStr,
)] = &[];
