// SPDX-License-Identifier: GPL-2.0

//! `kp_x86_opt`: jump-optimized probes (x86_64). A settled probe without a
//! post handler has its `int3` replaced by a jump to a detour; these cases
//! check that it happens where it is safe and only there, that the probed
//! code keeps its exact results with every relocatable instruction class
//! under the jump, that handlers see the same registers as on the
//! breakpoint path and can redirect execution, that a post handler or a
//! probe inside the jump puts the breakpoint back first, that disabling
//! restores every byte, and that optimizing and unoptimizing while another
//! CPU runs the code 10^6 times loses no hit and corrupts no result.

use crate::kp::{self, Next, Probe, Regs, Target};
use crate::kunit::Test;
use crate::util::{insn_len_at, wait_optimized, Worker};
use core::hint::black_box;
use core::pin::Pin;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use kernel::alloc::{flags::GFP_KERNEL, KBox, KVec};
use kernel::bindings;

/// Read RIP-relative by `kp_opt_mix`.
static KP_OPT_DATA: AtomicU64 = AtomicU64::new(0x5a5a_0123);

core::arch::global_asm!(
    crate::util::x86_safe_macro!(),
    ".pushsection .text.kp_opt, \"ax\", @progbits",
    ".macro KP_OFN name",
    // Not an indirect-branch target (IBT): the suites call it directly and
    // take its address only to probe it (the kernel's ANNOTATE_NOENDBR).
    ".pushsection .discard.noendbr",
    ".long \\name",
    ".popsection",
    ".globl \\name",
    ".type \\name, @function",
    ".p2align 4",
    "\\name:",
    ".endm",
    ".macro KP_OEND name",
    ".size \\name, . - \\name",
    ".endm",
    // One of each relocatable class: push, mov, lea with SIB, imul imm,
    // a RIP-relative load, xor, movzx, add, cmp, cmovcc, setcc, pop. Never
    // writes rdi or rsi (the handlers check them).
    "KP_OFN kp_opt_mix",
    "push %rbx",
    "mov %rdi, %rbx",
    "lea 0x11(%rsi,%rdi,2), %rax",
    "imul $3, %rax, %rax",
    "add {data}(%rip), %rax",
    "xor %rbx, %rax",
    "movzbl %al, %edx",
    "add %rdx, %rax",
    "cmp %rsi, %rdi",
    "cmovb %rsi, %rbx",
    "setz %dl",
    "add %rdx, %rax",
    "add %rbx, %rax",
    "pop %rbx",
    "KP_SAFE ret",
    "KP_OEND kp_opt_mix",
    "KP_OFN kp_opt_ret9",
    "mov $9, %eax",
    "KP_SAFE ret",
    "KP_OEND kp_opt_ret9",
    // A frame at the entry: probed at +0, where a handler may return at once
    // or jump elsewhere.
    "KP_OFN kp_opt_entry",
    "push %rbp",
    "mov %rsp, %rbp",
    "lea 1(%rdi), %rax",
    "pop %rbp",
    "KP_SAFE ret",
    "KP_OEND kp_opt_entry",
    // A loop whose back edge lands 2 bytes after the entry: a jump at +0
    // would cover it (refused). Returns max(rdi, 1) as u32.
    "KP_OFN kp_opt_loopy",
    "xor %eax, %eax",
    "1: add $1, %eax",
    "cmp %edi, %eax",
    "jb 1b",
    "KP_SAFE ret",
    "KP_OEND kp_opt_loopy",
    // A call 3 bytes after the entry: not relocatable (refused). 9 + rdi.
    "KP_OFN kp_opt_callsite",
    "mov %rdi, %rcx",
    "call kp_opt_ret9",
    "add %rdi, %rax",
    "KP_SAFE ret",
    "KP_OEND kp_opt_callsite",
    // Interrupts masked the raw way, which lockdep does not follow (as in
    // __local_bh_disable_ip() around lockdep_softirqs_off()), around two
    // relocatable instructions. Returns rdi + 3.
    "KP_OFN kp_opt_rawoff",
    "pushfq",
    "cli",
    "lea 1(%rdi), %rax",
    "add $2, %rax",
    "popfq",
    "KP_SAFE ret",
    "KP_OEND kp_opt_rawoff",
    ".popsection",
    ".purgem KP_SAFE",
    data = sym KP_OPT_DATA,
    options(att_syntax),
);

extern "C" {
    fn kp_opt_mix(a: u64, b: u64) -> u64;
    fn kp_opt_ret9() -> u64;
    fn kp_opt_entry(a: u64) -> u64;
    fn kp_opt_loopy(n: u64) -> u32;
    fn kp_opt_callsite(a: u64) -> u64;
    fn kp_opt_rawoff(a: u64) -> u64;
}

fn mix(a: u64, b: u64) -> u64 {
    // SAFETY: the assembly function takes two integers, returns one.
    unsafe { kp_opt_mix(black_box(a), black_box(b)) }
}

/// What `kp_opt_mix` computes.
fn mix_model(a: u64, b: u64) -> u64 {
    let mut rax = b
        .wrapping_add(a.wrapping_mul(2))
        .wrapping_add(0x11)
        .wrapping_mul(3);
    rax = rax.wrapping_add(KP_OPT_DATA.load(Ordering::Relaxed));
    rax ^= a;
    rax = rax.wrapping_add(rax & 0xff);
    let rbx = if a < b { b } else { a };
    rax = rax.wrapping_add(u64::from(a == b));
    rax.wrapping_add(rbx)
}

const ARGS: [(u64, u64); 6] = [
    (0, 0),
    (1, 2),
    (7, 7),
    (u64::MAX, 3),
    (0x1234_5678_9abc, 0xfedc),
    (5, u64::MAX - 1),
];

/// What a handler does besides counting.
#[derive(Clone, Copy)]
enum Act {
    Count,
    ReturnNow(usize),
    JumpTo(usize),
}

/// Counts hits and records what the pre handler saw.
struct H {
    hits: AtomicUsize,
    di: AtomicUsize,
    si: AtomicUsize,
    ip: AtomicUsize,
    ret: AtomicUsize,
    irqs_off: AtomicBool,
    act: Act,
}

fn h(act: Act) -> H {
    H {
        hits: AtomicUsize::new(0),
        di: AtomicUsize::new(0),
        si: AtomicUsize::new(0),
        ip: AtomicUsize::new(0),
        ret: AtomicUsize::new(0),
        irqs_off: AtomicBool::new(true),
        act,
    }
}

impl kp::KprobeHandler for H {
    fn pre(&self, _p: &Probe, regs: &mut Regs) -> Next {
        self.hits.fetch_add(1, Ordering::SeqCst);
        self.di.store(regs.di(), Ordering::SeqCst);
        self.si.store(regs.si(), Ordering::SeqCst);
        self.ip.store(regs.ip(), Ordering::SeqCst);
        self.ret
            .store(regs.entry_return_address().unwrap_or(0), Ordering::SeqCst);
        if !crate::util::irqs_disabled() {
            self.irqs_off.store(false, Ordering::SeqCst);
        }
        match self.act {
            Act::Count => Next::Continue,
            // SAFETY: at the entry of kp_opt_entry, which has no side
            // effects; `Redirected` follows.
            Act::ReturnNow(v) => match unsafe { regs.return_now(v) } {
                Some(r) => Next::Redirected(r),
                None => Next::Continue,
            },
            Act::JumpTo(a) => {
                // SAFETY: at a function entry with the stack untouched, a
                // jump to another function's entry is a tail call.
                Next::Redirected(unsafe { regs.redirect(a) })
            }
        }
    }
}

/// A probe with a post handler (needs the breakpoint path).
struct WithPost {
    pre: AtomicUsize,
    post: AtomicUsize,
}

impl kp::KprobeHandler for WithPost {
    const POST_HANDLER: bool = true;

    fn pre(&self, _p: &Probe, _regs: &mut Regs) -> Next {
        self.pre.fetch_add(1, Ordering::SeqCst);
        Next::Continue
    }

    fn post(&self, _p: &Probe, _regs: &mut Regs) {
        self.post.fetch_add(1, Ordering::SeqCst);
    }
}

fn with_post() -> WithPost {
    WithPost {
        pre: AtomicUsize::new(0),
        post: AtomicUsize::new(0),
    }
}

fn msleep(ms: u32) {
    // SAFETY: process context.
    unsafe { bindings::msleep(ms) };
}

/// The byte at `addr`.
fn byte(addr: usize) -> u8 {
    // SAFETY: module text, mapped and readable.
    unsafe { core::ptr::read_volatile(addr as *const u8) }
}

/// `n` bytes of text at `addr`.
fn bytes(addr: usize, n: usize) -> [u8; 24] {
    let mut b = [0u8; 24];
    for (i, v) in b.iter_mut().take(n).enumerate() {
        *v = byte(addr + i);
    }
    b
}

/// The instruction offsets of `kp_opt_mix` (up to its `ret`).
fn mix_offsets() -> KVec<usize> {
    let f = crate::targets::addr_of(kp_opt_mix as *const ());
    let mut v = KVec::new();
    let mut off = 0;
    loop {
        let _ = v.push(off, GFP_KERNEL);
        if byte(f + off) == 0xc3 {
            return v;
        }
        let n = insn_len_at(f + off);
        if n == 0 {
            return v;
        }
        off += n;
    }
}

fn opt_each_instruction(t: &mut Test) {
    let f = crate::targets::addr_of(kp_opt_mix as *const ());
    for &(a, b) in &ARGS {
        kp_expect_eq!(t, mix(a, b), mix_model(a, b), "model({:#x}, {:#x})", a, b);
    }
    let offs = mix_offsets();
    let mut optimized = 0;
    for &off in offs.iter() {
        // A jump needs 5 bytes of instructions before the `ret`.
        let ret_at = *offs.last().unwrap_or(&0);
        let can = ret_at - off >= 5;
        let orig = byte(f + off);
        let p = match kp::Kprobe::register(Target::Address(f + off), h(Act::Count)) {
            Ok(p) => p,
            Err(e) => {
                kp_expect!(t, false, "+{}: register: {:?}", off, e);
                continue;
            }
        };
        if can {
            kp_expect!(t, wait_optimized(p.probe()), "+{} not optimized", off);
            kp_expect_eq!(t, byte(f + off), 0xe9, "+{}: jump written", off);
        } else {
            // Give the optimizer its chance; it must refuse.
            msleep(100);
            kp_expect!(t, !p.probe().is_optimized(), "+{} optimized", off);
            kp_expect_eq!(t, byte(f + off), 0xcc, "+{}", off);
        }
        optimized += usize::from(p.probe().is_optimized());
        for &(a, b) in &ARGS {
            kp_expect_eq!(
                t,
                mix(a, b),
                mix_model(a, b),
                "+{} ({:#x}, {:#x})",
                off,
                a,
                b
            );
        }
        let hd = p.handler();
        kp_expect_eq!(t, hd.hits.load(Ordering::SeqCst), ARGS.len(), "+{}", off);
        kp_expect_eq!(
            t,
            hd.di.load(Ordering::SeqCst) as u64,
            ARGS[5].0,
            "+{}",
            off
        );
        kp_expect_eq!(
            t,
            hd.si.load(Ordering::SeqCst) as u64,
            ARGS[5].1,
            "+{}",
            off
        );
        kp_expect_eq!(t, hd.ip.load(Ordering::SeqCst), f + off + 1, "+{}", off);
        kp_expect!(t, hd.irqs_off.load(Ordering::SeqCst), "+{}: irqs on", off);
        kp_expect_eq!(t, p.nmissed(), 0);
        drop(p);
        kp_expect_eq!(t, byte(f + off), orig, "+{} restored", off);
        kp_expect_eq!(t, mix(3, 4), mix_model(3, 4));
    }
    t.info(format_args!(
        "{} of {} instructions of kp_opt_mix optimized",
        optimized,
        offs.len()
    ));
}

fn opt_entry_redirect(t: &mut Test) {
    let f = crate::targets::addr_of(kp_opt_entry as *const ());
    // SAFETY: plain assembly functions.
    let call = |a: u64| unsafe { kp_opt_entry(black_box(a)) };
    kp_expect_eq!(t, call(41), 42);
    // Return at once with 77.
    let p = match kp::Kprobe::register(Target::Address(f), h(Act::ReturnNow(77))) {
        Ok(p) => p,
        Err(e) => {
            kp_expect!(t, false, "register: {:?}", e);
            return;
        }
    };
    kp_expect!(t, wait_optimized(p.probe()));
    kp_expect_eq!(t, call(41), 77);
    kp_expect_eq!(t, call(1), 77);
    kp_expect_eq!(t, p.handler().hits.load(Ordering::SeqCst), 2);
    // The return address at the entry is this module's caller's.
    let ret = p.handler().ret.load(Ordering::SeqCst);
    let sym = crate::util::Sym::of(ret);
    kp_expect!(
        t,
        sym.bytes().ends_with(b"[kprobes_kunit]"),
        "return address {}",
        sym.as_str()
    );
    drop(p);
    kp_expect_eq!(t, call(41), 42);
    // Jump to another function instead.
    let p = match kp::Kprobe::register(
        Target::Address(f),
        h(Act::JumpTo(crate::targets::addr_of(
            kp_opt_ret9 as *const (),
        ))),
    ) {
        Ok(p) => p,
        Err(e) => {
            kp_expect!(t, false, "register: {:?}", e);
            return;
        }
    };
    kp_expect!(t, wait_optimized(p.probe()));
    kp_expect_eq!(t, call(41), 9);
    drop(p);
    kp_expect_eq!(t, call(41), 42);
}

fn opt_post_handler_unoptimizes(t: &mut Test) {
    let f = crate::targets::addr_of(kp_opt_mix as *const ());
    let at = f + 4; // the lea
    let orig = bytes(at, 5);
    let Ok(a) = kp::Kprobe::register(Target::Address(at), h(Act::Count)) else {
        kp_expect!(t, false, "register a");
        return;
    };
    kp_expect!(t, wait_optimized(a.probe()));
    let Ok(b) = kp::Kprobe::register(Target::Address(at), with_post()) else {
        kp_expect!(t, false, "register b");
        return;
    };
    // Unoptimized before the registration returned.
    kp_expect!(t, !a.probe().is_optimized());
    kp_expect!(t, !b.probe().is_optimized());
    kp_expect_eq!(t, byte(at), 0xcc);
    kp_expect!(t, bytes(at + 1, 4)[..4] == orig[1..5], "tail restored");
    kp_expect_eq!(t, mix(5, 6), mix_model(5, 6));
    kp_expect_eq!(t, a.handler().hits.load(Ordering::SeqCst), 1);
    kp_expect_eq!(t, b.handler().pre.load(Ordering::SeqCst), 1);
    kp_expect_eq!(t, b.handler().post.load(Ordering::SeqCst), 1);
    // Never optimized while b is there.
    msleep(100);
    kp_expect!(t, !a.probe().is_optimized());
    drop(b);
    // Optimized again once b left.
    kp_expect!(t, wait_optimized(a.probe()));
    kp_expect_eq!(t, mix(5, 6), mix_model(5, 6));
    kp_expect_eq!(t, a.handler().hits.load(Ordering::SeqCst), 2);
    // Enabling a disabled post handler unoptimizes too.
    let Ok(c) = kp::Kprobe::register(Target::Address(at), with_post()) else {
        kp_expect!(t, false, "register c");
        return;
    };
    kp_expect!(t, c.disable().is_ok());
    kp_expect!(
        t,
        wait_optimized(a.probe()),
        "a disabled probe keeps no jump away"
    );
    kp_expect!(t, c.enable().is_ok());
    kp_expect!(t, !a.probe().is_optimized());
    kp_expect_eq!(t, mix(5, 6), mix_model(5, 6));
    kp_expect_eq!(t, c.handler().post.load(Ordering::SeqCst), 1);
    drop(c);
    drop(a);
    kp_expect!(t, bytes(at, 5)[..5] == orig[..5], "bytes restored");
}

fn opt_inner_probe_unoptimizes(t: &mut Test) {
    let f = crate::targets::addr_of(kp_opt_mix as *const ());
    // push (1) + mov (3) + lea (5): the jump at +0 covers +1 and +4.
    let Ok(a) = kp::Kprobe::register(Target::Address(f), h(Act::Count)) else {
        kp_expect!(t, false, "register a");
        return;
    };
    kp_expect!(t, wait_optimized(a.probe()));
    let Ok(b) = kp::Kprobe::register(Target::Address(f + 4), h(Act::Count)) else {
        kp_expect!(t, false, "register b");
        return;
    };
    kp_expect!(t, !a.probe().is_optimized());
    kp_expect_eq!(t, byte(f), 0xcc);
    kp_expect_eq!(t, byte(f + 4), 0xcc);
    kp_expect_eq!(t, mix(8, 9), mix_model(8, 9));
    kp_expect_eq!(t, a.handler().hits.load(Ordering::SeqCst), 1);
    kp_expect_eq!(t, b.handler().hits.load(Ordering::SeqCst), 1);
    // b's own jump would need +4..+9 free of probes: it may be optimized;
    // a's may not while b sits inside it.
    msleep(100);
    kp_expect!(t, !a.probe().is_optimized());
    kp_expect_eq!(t, mix(8, 9), mix_model(8, 9));
    kp_expect_eq!(t, a.handler().hits.load(Ordering::SeqCst), 2);
    kp_expect_eq!(t, b.handler().hits.load(Ordering::SeqCst), 2);
    drop(b);
    kp_expect!(t, wait_optimized(a.probe()));
    kp_expect_eq!(t, mix(8, 9), mix_model(8, 9));
    kp_expect_eq!(t, a.handler().hits.load(Ordering::SeqCst), 3);
}

/// A hit where interrupts are masked without lockdep knowing (raw
/// helpers) must leave lockdep's view as it found it: a detour that told
/// lockdep "off" on the way in and nothing on the way out (the saved flags
/// say off) left lockdep believing interrupts off after the code turned
/// them back on (x86_64-debug: lockdep's warning in `__local_bh_enable_ip()`
/// with a probe in `lockdep_softirqs_off()`).
fn opt_raw_irqs_off_window(t: &mut Test) {
    let f = crate::targets::addr_of(kp_opt_rawoff as *const ());
    let at = f + 2; // pushfq, cli: the lea
    fn call(v: u64) -> u64 {
        // SAFETY: the assembly function takes an integer, returns one.
        unsafe { kp_opt_rawoff(black_box(v)) }
    }
    kp_expect!(t, crate::util::lockdep_irqs_agree(), "before any hit");
    {
        let Ok(a) = kp::Kprobe::register(Target::Address(at), h(Act::Count)) else {
            kp_expect!(t, false, "register a");
            return;
        };
        kp_expect_eq!(t, call(0), 3, "breakpoint path");
        kp_expect!(
            t,
            crate::util::lockdep_irqs_agree(),
            "after a breakpoint hit"
        );
        kp_expect!(t, wait_optimized(a.probe()));
        kp_expect_eq!(t, call(5), 8);
        kp_expect_eq!(t, call(u64::MAX), 2);
        kp_expect_eq!(t, a.handler().hits.load(Ordering::SeqCst), 3);
        kp_expect_eq!(t, a.handler().di.load(Ordering::SeqCst), usize::MAX);
        kp_expect!(t, crate::util::lockdep_irqs_agree(), "after a detour hit");
    }
    let Ok(b) = kp::Kprobe::register(Target::Address(at), with_post()) else {
        kp_expect!(t, false, "register b");
        return;
    };
    kp_expect_eq!(t, call(7), 10);
    kp_expect_eq!(t, b.handler().pre.load(Ordering::SeqCst), 1);
    kp_expect_eq!(t, b.handler().post.load(Ordering::SeqCst), 1);
    kp_expect!(t, crate::util::lockdep_irqs_agree(), "after a post handler");
}

/// Stack traces taken in the handlers.
static TRACE_PRE: crate::util::Trace = crate::util::Trace::new();
static TRACE_POST: crate::util::Trace = crate::util::Trace::new();

/// Takes a stack trace in each handler it has.
struct Tracer;

impl kp::KprobeHandler for Tracer {
    const POST_HANDLER: bool = true;

    fn pre(&self, _p: &Probe, _regs: &mut Regs) -> Next {
        TRACE_PRE.take();
        Next::Continue
    }

    fn post(&self, _p: &Probe, _regs: &mut Regs) {
        TRACE_POST.take();
    }
}

/// Takes a stack trace in its pre handler (jump-optimized: no post).
struct PreTracer;

impl kp::KprobeHandler for PreTracer {
    fn pre(&self, _p: &Probe, _regs: &mut Regs) -> Next {
        TRACE_PRE.take();
        Next::Continue
    }
}

/// A stack trace taken inside a handler reaches the probed function's
/// caller (this test) on every path: the detour (its frame below the
/// `pt_regs`), the post tail of a boosted step (its `pt_regs`), the
/// breakpoint (the kernel's exception frame). Decisive on the ORC kernels
/// (x86_64-debug, x86_64-hardened); the "guess" unwinder of the plain kernel
/// finds any text address on the stack.
fn opt_stack_traces(t: &mut Test) {
    let f = crate::targets::addr_of(kp_opt_mix as *const ());
    // The imul, past the push: the stack layout differs from the entry's.
    let at = f + 9;
    let check = |t: &Test, what: &str, tr: &crate::util::Trace| {
        let (words, n) = tr.get();
        let trace = words.get(..n).unwrap_or(&[]);
        let ok = crate::util::show_trace(t, what, trace, "opt_stack_traces");
        kp_expect!(t, ok, "{}: the caller is not in the trace", what);
    };
    {
        let Ok(a) = kp::Kprobe::register(Target::Address(at), PreTracer) else {
            kp_expect!(t, false, "register");
            return;
        };
        kp_expect!(t, wait_optimized(a.probe()));
        TRACE_PRE.clear();
        kp_expect_eq!(t, mix(3, 4), mix_model(3, 4));
        check(t, "in a detour's pre handler", &TRACE_PRE);
        // Through the probed function itself, not around it.
        let (words, n) = TRACE_PRE.get();
        kp_expect!(
            t,
            crate::util::trace_has(words.get(..n).unwrap_or(&[]), "kp_opt_mix"),
            "in a detour's pre handler: the probed function is not in the trace"
        );
    }
    let Ok(b) = kp::Kprobe::register(Target::Address(at), Tracer) else {
        kp_expect!(t, false, "register");
        return;
    };
    TRACE_PRE.clear();
    TRACE_POST.clear();
    kp_expect_eq!(t, mix(5, 4), mix_model(5, 4));
    check(t, "in a breakpoint's pre handler", &TRACE_PRE);
    check(t, "in a post handler (post tail)", &TRACE_POST);
    drop(b);
}

fn opt_refused_sites(t: &mut Test) {
    // SAFETY: plain assembly functions.
    let (loopy, callsite) = unsafe { (kp_opt_loopy(black_box(5)), kp_opt_callsite(black_box(5))) };
    kp_expect_eq!(t, loopy, 5);
    kp_expect_eq!(t, callsite, 14);
    let l = kp::Kprobe::register(
        Target::Address(crate::targets::addr_of(kp_opt_loopy as *const ())),
        h(Act::Count),
    );
    let c = kp::Kprobe::register(
        Target::Address(crate::targets::addr_of(kp_opt_callsite as *const ())),
        h(Act::Count),
    );
    // A control the same optimizer run handles.
    let k = kp::Kprobe::register(
        Target::Address(crate::targets::addr_of(kp_opt_ret9 as *const ())),
        h(Act::Count),
    );
    let (Ok(l), Ok(c), Ok(k)) = (l, c, k) else {
        kp_expect!(t, false, "register failed");
        return;
    };
    kp_expect!(t, wait_optimized(k.probe()), "control not optimized");
    msleep(50);
    kp_expect!(
        t,
        !l.probe().is_optimized(),
        "a branch target under the jump"
    );
    kp_expect!(t, !c.probe().is_optimized(), "a call under the jump");
    // SAFETY: as above.
    unsafe {
        kp_expect_eq!(t, kp_opt_loopy(black_box(5)), 5);
        kp_expect_eq!(t, kp_opt_callsite(black_box(5)), 14);
        kp_expect_eq!(t, kp_opt_ret9(), 9);
    }
    kp_expect_eq!(t, l.handler().hits.load(Ordering::SeqCst), 1);
    kp_expect_eq!(t, c.handler().hits.load(Ordering::SeqCst), 1);
    // kp_opt_callsite calls kp_opt_ret9 too.
    kp_expect_eq!(t, k.handler().hits.load(Ordering::SeqCst), 2);
}

fn opt_disable_restores_bytes(t: &mut Test) {
    let f = crate::targets::addr_of(kp_opt_mix as *const ());
    let at = f + 13; // the RIP-relative add (7 bytes)
    let orig = bytes(at, 7);
    let Ok(p) = kp::Kprobe::register(Target::Address(at), h(Act::Count)) else {
        kp_expect!(t, false, "register");
        return;
    };
    kp_expect!(t, wait_optimized(p.probe()));
    kp_expect_eq!(t, mix(1, 2), mix_model(1, 2));
    kp_expect!(t, p.disable().is_ok());
    kp_expect!(t, !p.probe().is_optimized());
    kp_expect!(
        t,
        bytes(at, 7)[..7] == orig[..7],
        "disabled: every byte back"
    );
    kp_expect_eq!(t, mix(1, 2), mix_model(1, 2));
    kp_expect_eq!(t, p.handler().hits.load(Ordering::SeqCst), 1);
    kp_expect!(t, p.enable().is_ok());
    kp_expect!(t, wait_optimized(p.probe()));
    KP_OPT_DATA.store(0x777, Ordering::Relaxed);
    kp_expect_eq!(t, mix(1, 2), mix_model(1, 2), "relocated RIP-relative load");
    kp_expect_eq!(t, p.handler().hits.load(Ordering::SeqCst), 2);
    drop(p);
    kp_expect!(
        t,
        bytes(at, 7)[..7] == orig[..7],
        "unregistered: every byte back"
    );
}

static STOP: AtomicBool = AtomicBool::new(false);
static CALLS: AtomicUsize = AtomicUsize::new(0);
static BAD: AtomicUsize = AtomicUsize::new(0);

/// Calls `kp_opt_mix` `n` times (or until stopped), checking each result.
/// It sleeps now and then, as real tasks block: the optimizer waits for
/// every task to schedule voluntarily before it writes a jump.
fn caller(n: usize) {
    let want = mix_model(11, 12);
    for i in 0..n {
        if i % 10_000 == 0 {
            msleep(1);
        }
        if STOP.load(Ordering::Relaxed) {
            break;
        }
        if mix(11, 12) != want {
            BAD.fetch_add(1, Ordering::Relaxed);
        }
        CALLS.fetch_add(1, Ordering::Relaxed);
    }
    STOP.store(true, Ordering::SeqCst);
}

/// Calls in the concurrent case.
const CONCURRENT_CALLS: usize = 1_000_000;

fn opt_toggle_under_load(t: &mut Test) {
    let f = crate::targets::addr_of(kp_opt_mix as *const ());
    let at = f + 4;
    STOP.store(false, Ordering::SeqCst);
    CALLS.store(0, Ordering::SeqCst);
    BAD.store(0, Ordering::SeqCst);
    let Ok(a) = kp::Kprobe::register(Target::Address(at), h(Act::Count)) else {
        kp_expect!(t, false, "register");
        return;
    };
    let other = Some((crate::util::this_cpu() + 1) % 2);
    let Ok(w) = Worker::start(caller, CONCURRENT_CALLS, other) else {
        kp_expect!(t, false, "cannot start the worker");
        return;
    };
    let (mut optimized, mut unoptimized) = (0, 0);
    while !STOP.load(Ordering::SeqCst) {
        if a.probe().is_optimized() {
            optimized += 1;
            // Unoptimize by a post handler joining, then let it go again.
            if let Ok(b) = kp::Kprobe::register(Target::Address(at), with_post()) {
                if !a.probe().is_optimized() {
                    unoptimized += 1;
                }
                msleep(2);
                drop(b);
            }
        }
        msleep(5);
    }
    drop(w);
    let calls = CALLS.load(Ordering::SeqCst);
    t.info(format_args!(
        "{} calls; optimized {} times, unoptimized {} times",
        calls, optimized, unoptimized
    ));
    kp_expect_eq!(t, calls, CONCURRENT_CALLS);
    kp_expect_eq!(t, BAD.load(Ordering::SeqCst), 0, "wrong results");
    kp_expect_eq!(
        t,
        a.handler().hits.load(Ordering::SeqCst),
        calls,
        "lost hits"
    );
    kp_expect_eq!(t, a.nmissed(), 0);
    kp_expect!(t, optimized >= 2, "optimized only {} times", optimized);
    kp_expect_eq!(t, optimized, unoptimized);
}

/// Puts the detours' bound back when dropped (a failed check returns
/// early).
struct DetourLimit(usize);

impl DetourLimit {
    /// Bounds the detours to `n` until dropped (the guard holds the
    /// previous bound); `None`, reported, when the engine refuses.
    fn set(t: &Test, n: usize) -> Option<Self> {
        match kp::opt_detour_limit(n) {
            Ok(prev) => Some(DetourLimit(prev)),
            Err(e) => {
                kp_expect!(t, false, "kp_opt_detour_limit: {:?}", e);
                None
            }
        }
    }
}

/// A registered probe whose handler is an [`H`].
type Counting = Pin<KBox<kp::Kprobe<H>>>;

/// Probes `kp_opt_ret9` and `kp_opt_entry`, each counting, and waits until
/// both are jump-optimized (reported if not); `None`, reported, when a
/// registration fails.
fn two_optimized(t: &Test) -> Option<(Counting, Counting)> {
    let addr = |f: *const ()| Target::Address(crate::targets::addr_of(f));
    let a = kp::Kprobe::register(addr(kp_opt_ret9 as *const ()), h(Act::Count));
    let b = kp::Kprobe::register(addr(kp_opt_entry as *const ()), h(Act::Count));
    let (Ok(a), Ok(b)) = (a, b) else {
        kp_expect!(t, false, "register");
        return None;
    };
    kp_expect!(t, wait_optimized(a.probe()), "first not optimized");
    kp_expect!(t, wait_optimized(b.probe()), "second not optimized");
    Some((a, b))
}

impl Drop for DetourLimit {
    fn drop(&mut self) {
        let _ = kp::opt_detour_limit(self.0);
    }
}

/// With every detour taken (the bound lowered to two), a third optimizable
/// probe keeps its breakpoint and all three hit; once one of the two is
/// unregistered, its detour, after every task left it, is cleared and
/// handed on to the third, which then runs from it. A bound past the area
/// is clamped to it.
fn opt_detours_run_out(t: &mut Test) {
    let base = kp::stats().slots;
    let Some(restore) = DetourLimit::set(t, 2) else {
        return;
    };
    kp_expect_eq!(t, restore.0, 1024);
    kp_expect_eq!(t, kp::opt_detour_limit(usize::MAX).ok(), Some(2));
    kp_expect_eq!(t, kp::opt_detour_limit(2).ok(), Some(1024));
    let Some((a, b)) = two_optimized(t) else {
        return;
    };
    // The imul of kp_opt_mix (optimized in opt_stack_traces).
    let at = crate::targets::addr_of(kp_opt_mix as *const ()) + 9;
    let Ok(c) = kp::Kprobe::register(Target::Address(at), h(Act::Count)) else {
        kp_expect!(t, false, "register");
        return;
    };
    msleep(200);
    kp_expect!(
        t,
        !c.probe().is_optimized(),
        "a third detour past the bound"
    );
    // SAFETY: plain assembly functions.
    unsafe {
        kp_expect_eq!(t, kp_opt_ret9(), 9);
        kp_expect_eq!(t, kp_opt_entry(black_box(4)), 5);
    }
    kp_expect_eq!(t, mix(3, 4), mix_model(3, 4));
    for (what, p) in [("first", &a), ("second", &b)] {
        kp_expect_eq!(t, p.handler().hits.load(Ordering::SeqCst), 1, "{}", what);
    }
    kp_expect_eq!(t, c.handler().hits.load(Ordering::SeqCst), 1);
    drop(a);
    kp_expect!(
        t,
        wait_optimized(c.probe()),
        "the freed detour was not handed on"
    );
    kp_expect!(t, b.probe().is_optimized());
    for (x, y) in ARGS {
        kp_expect_eq!(t, mix(x, y), mix_model(x, y));
    }
    // SAFETY: as above.
    unsafe {
        kp_expect_eq!(t, kp_opt_ret9(), 9);
        kp_expect_eq!(t, kp_opt_entry(black_box(7)), 8);
    }
    kp_expect_eq!(t, b.handler().hits.load(Ordering::SeqCst), 2);
    kp_expect_eq!(t, c.handler().hits.load(Ordering::SeqCst), 1 + ARGS.len());
    kp_expect_eq!(t, c.handler().di.load(Ordering::SeqCst), 5);
    kp_expect_eq!(t, c.nmissed(), 0);
    drop(b);
    drop(c);
    kp_expect_eq!(t, kp::stats().slots, base);
}

fn now_ns() -> u64 {
    // SAFETY: a plain clock read.
    unsafe { bindings::ktime_get_mono_fast_ns() }
}

static BUSY_STOP: AtomicBool = AtomicBool::new(false);

/// Spins for `ms` milliseconds (or until stopped) without ever sleeping:
/// a task that holds every tasks-RCU wait up meanwhile.
fn busy(ms: usize) {
    let end = now_ns() + ms as u64 * 1_000_000;
    while !BUSY_STOP.load(Ordering::Relaxed) && now_ns() < end {
        core::hint::spin_loop();
    }
}

/// While a task that never sleeps holds the engine's wait for tasks up,
/// registering, disabling and enabling probes go on: the wait that
/// reclaims released detours (and slots) runs without the registration
/// lock. (It ran with it when the detours were full, and the lock then
/// waited for the task, which, had it waited for the registration, as
/// kp_core's workers wait for their test, never ended: CI hung there.)
/// Once the task sleeps, the reclaimed detours go to the probes waiting.
fn opt_reclaim_with_a_busy_task(t: &mut Test) {
    let base = kp::stats().slots;
    let Some(_restore) = DetourLimit::set(t, 2) else {
        return;
    };
    let Some((a, b)) = two_optimized(t) else {
        return;
    };
    BUSY_STOP.store(false, Ordering::SeqCst);
    let other = Some((crate::util::this_cpu() + 1) % 2);
    let Ok(w) = Worker::start(busy, 3000, other) else {
        kp_expect!(t, false, "cannot start the worker");
        return;
    };
    // The first's detour is released; with the bound at two the area is
    // full, and the work that reclaims it waits for the busy task.
    drop(a);
    msleep(200);
    let t0 = now_ns();
    let at = crate::targets::addr_of(kp_opt_mix as *const ()) + 9;
    let c = kp::Kprobe::register(Target::Address(at), h(Act::Count));
    kp_expect!(t, b.disable().is_ok());
    kp_expect!(t, b.enable().is_ok());
    let took_ms = (now_ns() - t0) / 1_000_000;
    kp_expect!(
        t,
        took_ms < 1000,
        "registering and toggling took {} ms: they waited for a task that never sleeps",
        took_ms
    );
    BUSY_STOP.store(true, Ordering::SeqCst);
    drop(w);
    let Ok(c) = c else {
        kp_expect!(t, false, "register");
        return;
    };
    // The reclaimed detours go to the two probes left.
    kp_expect!(t, wait_optimized(c.probe()), "the third not optimized");
    kp_expect!(
        t,
        wait_optimized(b.probe()),
        "the second not optimized again"
    );
    kp_expect_eq!(t, mix(3, 4), mix_model(3, 4));
    // SAFETY: a plain assembly function.
    kp_expect_eq!(t, unsafe { kp_opt_entry(black_box(4)) }, 5);
    kp_expect_eq!(t, c.handler().hits.load(Ordering::SeqCst), 1);
    kp_expect_eq!(t, b.handler().hits.load(Ordering::SeqCst), 1);
    t.info(format_args!(
        "registering and toggling beside the busy task: {} ms",
        took_ms
    ));
    drop(b);
    drop(c);
    kp_expect_eq!(t, kp::stats().slots, base);
}

/// A probe armed while the optimizer waits for tasks gets its jump only
/// after a wait of its own (`util::opt_armed_during_wait`).
fn opt_armed_during_wait(t: &mut Test) {
    crate::util::opt_armed_during_wait(
        t,
        crate::targets::addr_of(kp_opt_ret9 as *const ()),
        crate::targets::addr_of(kp_opt_entry as *const ()),
        // SAFETY: a plain assembly function.
        || unsafe { kp_opt_entry(black_box(5)) } == 6,
    );
}

kunit_suite!(
    kp_x86_opt,
    "kp_x86_opt",
    [
        opt_each_instruction,
        opt_entry_redirect,
        opt_post_handler_unoptimizes,
        opt_inner_probe_unoptimizes,
        opt_raw_irqs_off_window,
        opt_stack_traces,
        opt_refused_sites,
        opt_disable_restores_bytes,
        opt_toggle_under_load,
        opt_detours_run_out,
        opt_armed_during_wait,
        opt_reclaim_with_a_busy_task
    ]
);
