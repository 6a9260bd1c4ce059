// SPDX-License-Identifier: GPL-2.0

//! `kp_arm64_opt`: jump-optimized probes (arm64). A settled probe without a
//! post or fault handler has its BRK replaced by a `B` to a detour that
//! calls the handlers without an exception; these cases check that it
//! happens where it is safe and only there (not on a BTI landing pad, not
//! on an instruction that is simulated), that the probed code keeps its
//! exact results with a probe on each of its instructions, that handlers see
//! the registers and flags the breakpoint path shows them and that what they
//! change goes back (x16 and x17 included, NZCV), that they can return at
//! once or send execution elsewhere, that a post handler puts the BRK back
//! first, that disabling restores the instruction, and that optimizing and
//! unoptimizing while another CPU runs the code 10^6 times loses no hit and
//! corrupts no result.

use crate::kp::{self, Next, Probe, Regs, Target};
use crate::kunit::Test;
use crate::util::{wait_optimized, Worker};
use core::hint::black_box;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use kernel::bindings;

/// Loaded by `kp_aopt_mix`.
static KP_AOPT_DATA: AtomicU64 = AtomicU64::new(0x5a5a_0123);

core::arch::global_asm!(
    ".pushsection .text.kp_aopt, \"ax\", %progbits",
    ".macro KP_AFN name",
    ".globl \\name",
    ".type \\name, %function",
    ".balign 8",
    "\\name:",
    // `bti c` on every kernel (a hint: a NOP where BTI is off), so that
    // the offsets are the same everywhere and the landing pad is tested.
    "hint #34",
    ".endm",
    // x0 = a, x1 = b; what `mix_model` computes. x0 and x1 are read, never
    // written before the last two instructions.
    "KP_AFN kp_aopt_mix",
    "stp x29, x30, [sp, #-32]!", // +4
    "mov x29, sp",               // +8
    "str x19, [sp, #16]",        // +12
    "add x2, x1, x0, lsl #1",    // +16
    "add x2, x2, #0x11",         // +20
    "mov x3, #3",                // +24
    "mul x2, x2, x3",            // +28
    "adrp x5, {data}",           // +32 simulated: never optimized
    "ldr x4, [x5, :lo12:{data}]", // +36
    "add x2, x2, x4",            // +40
    "eor x2, x2, x0",            // +44
    "and x6, x2, #0xff",         // +48
    "add x2, x2, x6",            // +52
    "cmp x0, x1",                // +56
    "csel x19, x1, x0, lo",      // +60 reads the flags of the cmp
    "cset x6, eq",               // +64
    "add x2, x2, x6",            // +68
    "add x2, x2, x19",           // +72
    "ldr x19, [sp, #16]",        // +76
    "ldp x29, x30, [sp], #32",   // +80
    "mov x0, x2",                // +84
    "ret",                       // +88 simulated
    ".size kp_aopt_mix, . - kp_aopt_mix",
    "KP_AFN kp_aopt_ret9",
    "mov x0, #9",
    "ret",
    ".size kp_aopt_ret9, . - kp_aopt_ret9",
    // x0 + 1, the add probed at +4 (past the landing pad).
    "KP_AFN kp_aopt_entry",
    "add x0, x0, #1",
    "ret",
    ".size kp_aopt_entry, . - kp_aopt_entry",
    // 3, with a `bti j` (a landing pad for `br`) at +8: never optimized.
    "KP_AFN kp_aopt_pad",
    "mov x0, #1",
    "hint #36",
    "add x0, x0, #2", // +12
    "ret",
    ".size kp_aopt_pad, . - kp_aopt_pad",
    // x0 + x1 through x16 and x17 (the registers the detour borrows).
    "KP_AFN kp_aopt_x16",
    "mov x16, x0",
    "mov x17, x1",
    "add x0, x16, x17", // +12
    "ret",
    ".size kp_aopt_x16, . - kp_aopt_x16",
    ".popsection",
    data = sym KP_AOPT_DATA,
);

extern "C" {
    fn kp_aopt_mix(a: u64, b: u64) -> u64;
    fn kp_aopt_ret9() -> u64;
    fn kp_aopt_entry(a: u64) -> u64;
    fn kp_aopt_x16(a: u64, b: u64) -> u64;
    fn kp_aopt_pad() -> u64;
}

fn mix(a: u64, b: u64) -> u64 {
    // SAFETY: the assembly function takes two integers, returns one.
    unsafe { kp_aopt_mix(black_box(a), black_box(b)) }
}

/// What `kp_aopt_mix` computes.
fn mix_model(a: u64, b: u64) -> u64 {
    let mut x2 = b
        .wrapping_add(a.wrapping_mul(2))
        .wrapping_add(0x11)
        .wrapping_mul(3);
    x2 = x2.wrapping_add(KP_AOPT_DATA.load(Ordering::Relaxed));
    x2 ^= a;
    x2 = x2.wrapping_add(x2 & 0xff);
    let x19 = if a < b { b } else { a };
    x2 = x2.wrapping_add(u64::from(a == b));
    x2.wrapping_add(x19)
}

const ARGS: [(u64, u64); 6] = [
    (0, 0),
    (1, 2),
    (7, 7),
    (u64::MAX, 3),
    (0x1234_5678_9abc, 0xfedc),
    (5, u64::MAX - 1),
];

/// Offsets in `kp_aopt_mix` that must never be optimized: the simulated
/// `adrp` and `ret`. (A probe asked for at +0, the landing pad, goes past
/// it, to +4, as every entry probe.)
const NEVER: [usize; 2] = [32, 88];
/// The offset of `kp_aopt_mix`'s `ret`.
const MIX_RET: usize = 88;

/// PSTATE.C.
const PSR_C: usize = 1 << 29;
/// PSTATE.{N,Z,C,V}.
const NZCV: usize = 0xf << 28;

/// What a handler does besides recording.
#[derive(Clone, Copy)]
enum Act {
    Count,
    ReturnNow(usize),
    JumpTo(usize),
    /// Sets x16 and x17.
    SetX16X17(usize, usize),
    /// Flips PSTATE.C.
    FlipCarry,
}

/// What a pre handler saw: x0-x6, x29, sp, pc, NZCV.
const SEEN: usize = 11;

/// Counts hits and records what the pre handler saw.
struct H {
    hits: AtomicUsize,
    seen: [AtomicUsize; SEEN],
    irqs_off: AtomicBool,
    act: Act,
}

fn h(act: Act) -> H {
    H {
        hits: AtomicUsize::new(0),
        seen: [const { AtomicUsize::new(0) }; SEEN],
        irqs_off: AtomicBool::new(true),
        act,
    }
}

fn record(seen: &[AtomicUsize; SEEN], regs: &Regs) {
    for (i, s) in seen.iter().enumerate().take(7) {
        s.store(regs.x(i).unwrap_or(0), Ordering::SeqCst);
    }
    seen[7].store(regs.x(29).unwrap_or(0), Ordering::SeqCst);
    seen[8].store(regs.sp(), Ordering::SeqCst);
    seen[9].store(regs.pc(), Ordering::SeqCst);
    seen[10].store(regs.pstate() & NZCV, Ordering::SeqCst);
}

fn snapshot(seen: &[AtomicUsize; SEEN]) -> [usize; SEEN] {
    core::array::from_fn(|i| seen[i].load(Ordering::SeqCst))
}

impl kp::KprobeHandler for H {
    fn pre(&self, _p: &Probe, regs: &mut Regs) -> Next {
        self.hits.fetch_add(1, Ordering::SeqCst);
        record(&self.seen, regs);
        if !crate::util::irqs_disabled() {
            self.irqs_off.store(false, Ordering::SeqCst);
        }
        match self.act {
            Act::Count => Next::Continue,
            // SAFETY: past the landing pad of kp_aopt_entry, which has no
            // side effects and has not touched the stack or x30.
            Act::ReturnNow(v) => match unsafe { regs.return_now(v) } {
                Some(r) => Next::Redirected(r),
                None => Next::Continue,
            },
            // SAFETY: as above: a jump to another function's entry is a
            // tail call there.
            Act::JumpTo(a) => Next::Redirected(unsafe { regs.redirect(a) }),
            Act::SetX16X17(a, b) => {
                // SAFETY: kp_aopt_x16 reads them next; nothing else does.
                unsafe {
                    let _ = regs.set_x(16, a);
                    let _ = regs.set_x(17, b);
                }
                Next::Continue
            }
            Act::FlipCarry => {
                // SAFETY: only the csel after it reads the flags.
                unsafe { regs.set_pstate(regs.pstate() ^ PSR_C) };
                Next::Continue
            }
        }
    }
}

/// A probe with a post handler (needs the breakpoint path); records what its
/// pre handler saw, and may flip the carry as `Act::FlipCarry`.
struct WithPost {
    pre: AtomicUsize,
    post: AtomicUsize,
    seen: [AtomicUsize; SEEN],
    flip: bool,
}

impl kp::KprobeHandler for WithPost {
    const POST_HANDLER: bool = true;

    fn pre(&self, _p: &Probe, regs: &mut Regs) -> Next {
        self.pre.fetch_add(1, Ordering::SeqCst);
        record(&self.seen, regs);
        if self.flip {
            // SAFETY: as in `H`.
            unsafe { regs.set_pstate(regs.pstate() ^ PSR_C) };
        }
        Next::Continue
    }

    fn post(&self, _p: &Probe, _regs: &mut Regs) {
        self.post.fetch_add(1, Ordering::SeqCst);
    }
}

fn with_post(flip: bool) -> WithPost {
    WithPost {
        pre: AtomicUsize::new(0),
        post: AtomicUsize::new(0),
        seen: [const { AtomicUsize::new(0) }; SEEN],
        flip,
    }
}

fn msleep(ms: u32) {
    // SAFETY: process context.
    unsafe { bindings::msleep(ms) };
}

/// The instruction word at `addr`.
fn word(addr: usize) -> u32 {
    // SAFETY: module text, mapped and readable, 4-byte aligned.
    unsafe { core::ptr::read_volatile(addr as *const u32) }
}

/// Whether `w` is a `B`.
fn is_b(w: u32) -> bool {
    w >> 26 == 0b000101
}

/// The engine's probe BRK (`BRK #0xa0`).
const PROBE_BRK: u32 = 0xd420_0000 | (0xa0 << 5);

fn fn_addr(f: *const ()) -> usize {
    crate::targets::addr_of(f)
}

fn aopt_each_instruction(t: &mut Test) {
    let f = fn_addr(kp_aopt_mix as *const ());
    for &(a, b) in &ARGS {
        kp_expect_eq!(t, mix(a, b), mix_model(a, b), "model({:#x}, {:#x})", a, b);
    }
    let mut optimized = 0;
    for off in (4..=MIX_RET).step_by(4) {
        let can = !NEVER.contains(&off);
        let orig = word(f + off);
        let p = match kp::Kprobe::register(Target::Address(f + off), h(Act::Count)) {
            Ok(p) => p,
            Err(e) => {
                kp_expect!(t, false, "+{}: register: {:?}", off, e);
                continue;
            }
        };
        if can {
            kp_expect!(t, wait_optimized(p.probe()), "+{} not optimized", off);
            kp_expect!(t, is_b(word(f + off)), "+{}: {:#010x}", off, word(f + off));
        } else {
            // Give the optimizer its chance; it must refuse.
            msleep(100);
            kp_expect!(t, !p.probe().is_optimized(), "+{} optimized", off);
            kp_expect_eq!(t, word(f + off), PROBE_BRK, "+{}", off);
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
        let seen = snapshot(&hd.seen);
        if off < MIX_RET {
            // (The `ret` sees the result in x0.)
            kp_expect_eq!(t, seen[0] as u64, ARGS[5].0, "+{}: x0", off);
        }
        kp_expect_eq!(t, seen[1] as u64, ARGS[5].1, "+{}: x1", off);
        kp_expect_eq!(t, seen[9], f + off, "+{}: pc", off);
        kp_expect!(t, hd.irqs_off.load(Ordering::SeqCst), "+{}: irqs on", off);
        kp_expect_eq!(t, p.nmissed(), 0);
        drop(p);
        kp_expect_eq!(t, word(f + off), orig, "+{} restored", off);
        kp_expect_eq!(t, mix(3, 4), mix_model(3, 4));
    }
    kp_expect_eq!(t, optimized, MIX_RET / 4 - NEVER.len());
    kp_expect!(t, crate::util::lockdep_irqs_agree(), "after the hits");
}

/// A `bti j` keeps its BRK (a `B` there would fault when a `br` lands on
/// it); the instruction after it is optimized.
fn aopt_landing_pad(t: &mut Test) {
    let f = fn_addr(kp_aopt_pad as *const ());
    // SAFETY: a plain assembly function.
    let call = || unsafe { kp_aopt_pad() };
    kp_expect_eq!(t, call(), 3);
    let pad = kp::Kprobe::register(Target::Address(f + 8), h(Act::Count));
    let next = kp::Kprobe::register(Target::Address(f + 12), h(Act::Count));
    let (Ok(pad), Ok(next)) = (pad, next) else {
        kp_expect!(t, false, "register");
        return;
    };
    kp_expect!(t, wait_optimized(next.probe()), "the add after the pad");
    msleep(50);
    kp_expect!(t, !pad.probe().is_optimized(), "the landing pad");
    kp_expect_eq!(t, word(f + 8), PROBE_BRK);
    kp_expect_eq!(t, call(), 3);
    kp_expect_eq!(t, call(), 3);
    kp_expect_eq!(t, pad.handler().hits.load(Ordering::SeqCst), 2);
    kp_expect_eq!(t, next.handler().hits.load(Ordering::SeqCst), 2);
}

/// The detour shows the handlers what the breakpoint does (the registers
/// the function computed, its stack and frame pointers, pc, the flags of
/// its `cmp`), and a change to the flags goes back either way.
fn aopt_same_registers(t: &mut Test) {
    let f = fn_addr(kp_aopt_mix as *const ());
    let at = f + 60; // csel x19, x1, x0, lo: after the cmp
    for &(a, b) in &[(5u64, 6u64), (7, 7), (9, 2)] {
        let (brk, detour);
        {
            let Ok(p) = kp::Kprobe::register(Target::Address(at), with_post(false)) else {
                kp_expect!(t, false, "register");
                return;
            };
            kp_expect_eq!(t, mix(a, b), mix_model(a, b));
            kp_expect!(t, !p.probe().is_optimized());
            kp_expect_eq!(t, p.handler().post.load(Ordering::SeqCst), 1);
            brk = snapshot(&p.handler().seen);
        }
        {
            let Ok(p) = kp::Kprobe::register(Target::Address(at), h(Act::Count)) else {
                kp_expect!(t, false, "register");
                return;
            };
            kp_expect!(t, wait_optimized(p.probe()));
            kp_expect_eq!(t, mix(a, b), mix_model(a, b));
            detour = snapshot(&p.handler().seen);
        }
        kp_expect!(
            t,
            brk == detour,
            "({}, {}): breakpoint {:x?}, detour {:x?}",
            a,
            b,
            brk,
            detour
        );
        kp_expect_eq!(t, detour[0] as u64, a);
        kp_expect_eq!(t, detour[9], at);
    }
    // Flip the carry before `csel ..., lo`: with a < b it picks a, not b.
    let (a, b) = (5u64, 6u64);
    let want = mix_model(a, b) - (b - a);
    {
        let Ok(p) = kp::Kprobe::register(Target::Address(at), with_post(true)) else {
            kp_expect!(t, false, "register");
            return;
        };
        kp_expect_eq!(t, mix(a, b), want, "breakpoint path");
        drop(p);
    }
    let Ok(p) = kp::Kprobe::register(Target::Address(at), h(Act::FlipCarry)) else {
        kp_expect!(t, false, "register");
        return;
    };
    kp_expect!(t, wait_optimized(p.probe()));
    kp_expect_eq!(t, mix(a, b), want, "detour");
    kp_expect_eq!(t, mix(a, b), want, "detour, again");
    kp_expect_eq!(t, p.handler().hits.load(Ordering::SeqCst), 2);
}

/// x16 and x17, which the detour borrows, are the code's in the handlers
/// and go back as the handlers leave them.
fn aopt_x16_x17(t: &mut Test) {
    let f = fn_addr(kp_aopt_x16 as *const ());
    // SAFETY: the assembly function takes two integers, returns one.
    let call = |a: u64, b: u64| unsafe { kp_aopt_x16(black_box(a), black_box(b)) };
    kp_expect_eq!(t, call(3, 4), 7);
    let Ok(p) = kp::Kprobe::register(Target::Address(f + 12), h(Act::SetX16X17(100, 200))) else {
        kp_expect!(t, false, "register");
        return;
    };
    kp_expect_eq!(t, call(3, 4), 300, "breakpoint path");
    kp_expect!(t, wait_optimized(p.probe()));
    kp_expect_eq!(t, call(3, 4), 300, "detour");
    kp_expect_eq!(t, call(u64::MAX, 1), 300, "detour");
    kp_expect_eq!(t, p.handler().hits.load(Ordering::SeqCst), 3);
    drop(p);
    // What the handlers see of them: the code's.
    struct Peek(AtomicUsize, AtomicUsize);
    impl kp::KprobeHandler for Peek {
        fn pre(&self, _p: &Probe, regs: &mut Regs) -> Next {
            self.0.store(regs.x(16).unwrap_or(0), Ordering::SeqCst);
            self.1.store(regs.x(17).unwrap_or(0), Ordering::SeqCst);
            Next::Continue
        }
    }
    let Ok(p) = kp::Kprobe::register(
        Target::Address(f + 12),
        Peek(AtomicUsize::new(0), AtomicUsize::new(0)),
    ) else {
        kp_expect!(t, false, "register");
        return;
    };
    kp_expect!(t, wait_optimized(p.probe()));
    kp_expect_eq!(t, call(0x1616, u64::MAX), 0x1615);
    kp_expect_eq!(t, p.handler().0.load(Ordering::SeqCst), 0x1616);
    kp_expect_eq!(t, p.handler().1.load(Ordering::SeqCst), usize::MAX);
}

/// A return to the caller (through x30) and a jump elsewhere (through the
/// engine's redirect BRK), from the detour.
fn aopt_redirect(t: &mut Test) {
    let f = fn_addr(kp_aopt_entry as *const ());
    // SAFETY: plain assembly functions.
    let call = |a: u64| unsafe { kp_aopt_entry(black_box(a)) };
    kp_expect_eq!(t, call(41), 42);
    let Ok(p) = kp::Kprobe::register(Target::Address(f + 4), h(Act::ReturnNow(77))) else {
        kp_expect!(t, false, "register");
        return;
    };
    kp_expect!(t, wait_optimized(p.probe()));
    kp_expect_eq!(t, call(41), 77);
    kp_expect_eq!(t, call(1), 77);
    kp_expect_eq!(t, p.handler().hits.load(Ordering::SeqCst), 2);
    kp_expect!(t, crate::util::lockdep_irqs_agree());
    drop(p);
    kp_expect_eq!(t, call(41), 42);
    let ret9 = fn_addr(kp_aopt_ret9 as *const ());
    let Ok(p) = kp::Kprobe::register(Target::Address(f + 4), h(Act::JumpTo(ret9))) else {
        kp_expect!(t, false, "register");
        return;
    };
    kp_expect!(t, wait_optimized(p.probe()));
    kp_expect_eq!(t, call(41), 9);
    kp_expect_eq!(t, call(u64::MAX), 9);
    kp_expect_eq!(t, p.handler().hits.load(Ordering::SeqCst), 2);
    kp_expect!(t, crate::util::lockdep_irqs_agree());
    // Interrupts are on again after the redirect (the BRK's exception
    // returned with the code's DAIF).
    kp_expect!(t, !crate::util::irqs_disabled());
    drop(p);
    kp_expect_eq!(t, call(41), 42);
}

fn aopt_post_handler_unoptimizes(t: &mut Test) {
    let f = fn_addr(kp_aopt_mix as *const ());
    let at = f + 28; // the mul
    let orig = word(at);
    let Ok(a) = kp::Kprobe::register(Target::Address(at), h(Act::Count)) else {
        kp_expect!(t, false, "register a");
        return;
    };
    kp_expect!(t, wait_optimized(a.probe()));
    let Ok(b) = kp::Kprobe::register(Target::Address(at), with_post(false)) else {
        kp_expect!(t, false, "register b");
        return;
    };
    // Unoptimized before the registration returned.
    kp_expect!(t, !a.probe().is_optimized());
    kp_expect_eq!(t, word(at), PROBE_BRK);
    kp_expect_eq!(t, mix(5, 6), mix_model(5, 6));
    kp_expect_eq!(t, a.handler().hits.load(Ordering::SeqCst), 1);
    kp_expect_eq!(t, b.handler().pre.load(Ordering::SeqCst), 1);
    kp_expect_eq!(t, b.handler().post.load(Ordering::SeqCst), 1);
    msleep(100);
    kp_expect!(t, !a.probe().is_optimized());
    drop(b);
    kp_expect!(t, wait_optimized(a.probe()));
    kp_expect_eq!(t, mix(5, 6), mix_model(5, 6));
    kp_expect_eq!(t, a.handler().hits.load(Ordering::SeqCst), 2);
    // Disabling restores the instruction; enabling optimizes again.
    kp_expect!(t, a.disable().is_ok());
    kp_expect!(t, !a.probe().is_optimized());
    kp_expect_eq!(t, word(at), orig, "disabled");
    kp_expect_eq!(t, mix(5, 6), mix_model(5, 6));
    kp_expect!(t, a.enable().is_ok());
    kp_expect!(t, wait_optimized(a.probe()));
    KP_AOPT_DATA.store(0x777, Ordering::Relaxed);
    kp_expect_eq!(t, mix(5, 6), mix_model(5, 6));
    kp_expect_eq!(t, a.handler().hits.load(Ordering::SeqCst), 3);
    drop(a);
    kp_expect_eq!(t, word(at), orig, "unregistered");
}

/// Stack traces taken in a detour's handler.
static TRACE_PRE: crate::util::Trace = crate::util::Trace::new();

struct PreTracer;

impl kp::KprobeHandler for PreTracer {
    fn pre(&self, _p: &Probe, _regs: &mut Regs) -> Next {
        TRACE_PRE.take();
        Next::Continue
    }
}

/// A stack trace in a detour's pre handler goes through the detour's frame
/// record to the probed function and on to its caller (this test).
fn aopt_stack_traces(t: &mut Test) {
    let f = fn_addr(kp_aopt_mix as *const ());
    let Ok(a) = kp::Kprobe::register(Target::Address(f + 16), PreTracer) else {
        kp_expect!(t, false, "register");
        return;
    };
    kp_expect!(t, wait_optimized(a.probe()));
    TRACE_PRE.clear();
    kp_expect_eq!(t, mix(3, 4), mix_model(3, 4));
    let (words, n) = TRACE_PRE.get();
    let trace = words.get(..n).unwrap_or(&[]);
    kp_expect!(
        t,
        crate::util::show_trace(t, "in a detour's pre handler", trace, "kp_aopt_mix"),
        "the probed function is not in the trace"
    );
    kp_expect!(
        t,
        crate::util::show_trace(t, "in a detour's pre handler", trace, "aopt_stack_traces"),
        "the caller is not in the trace"
    );
}

static STOP: AtomicBool = AtomicBool::new(false);
static CALLS: AtomicUsize = AtomicUsize::new(0);
static BAD: AtomicUsize = AtomicUsize::new(0);

/// Calls `kp_aopt_mix` `n` times (or until stopped), checking each result;
/// sleeps now and then, as real tasks block (the optimizer waits for every
/// task to schedule voluntarily before it writes a jump).
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

fn aopt_toggle_under_load(t: &mut Test) {
    let f = fn_addr(kp_aopt_mix as *const ());
    let at = f + 44; // the eor
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
            if let Ok(b) = kp::Kprobe::register(Target::Address(at), with_post(false)) {
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

/// A probe armed while the optimizer waits for tasks gets its jump only
/// after a wait of its own (`util::opt_armed_during_wait`; on arm64 a jump
/// covers one instruction, but the protocol is the core's).
fn aopt_armed_during_wait(t: &mut Test) {
    crate::util::opt_armed_during_wait(
        t,
        fn_addr(kp_aopt_ret9 as *const ()) + 4,
        fn_addr(kp_aopt_entry as *const ()) + 4,
        // SAFETY: a plain assembly function.
        || unsafe { kp_aopt_entry(black_box(5)) } == 6,
    );
}

kunit_suite!(
    kp_arm64_opt,
    "kp_arm64_opt",
    [
        aopt_each_instruction,
        aopt_landing_pad,
        aopt_same_registers,
        aopt_x16_x17,
        aopt_redirect,
        aopt_post_handler_unoptimizes,
        aopt_stack_traces,
        aopt_toggle_under_load,
        aopt_armed_during_wait
    ]
);
