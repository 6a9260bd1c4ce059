// SPDX-License-Identifier: GPL-2.0

//! `kp_coexist`: the engine beside the kernel's own kprobes on the same
//! text, mid-function, in both orders.
//!
//! The kernel's kprobe here keeps its breakpoint (it has a post handler, so
//! the kernel does not jump-optimize it). Each case checks what the issue
//! asks: nothing corrupts the text (the function still returns the right
//! value), what cannot be shared is refused with a specific error, and
//! what is shared works (both sides' handlers run).
//!
//! - The kernel's first, the engine's at the same instruction: `-EBUSY`
//!   (someone else's int3 there).
//! - The kernel's first, the engine's on the next instruction: `-EBUSY`,
//!   since the engine finds instruction boundaries by decoding from the
//!   function's start and cannot see through the kernel's int3 (the kernel
//!   recovers its own bytes; the engine cannot read them without the
//!   kernel's kprobes API). Before the kernel's instruction: shared.
//! - The engine's first, the kernel's at the same instruction: the kernel
//!   refuses it (its `__copy_instruction()` sees an int3 it cannot
//!   recover); the engine's probe keeps working.
//! - The engine's first, the kernel's on the next instruction: whatever
//!   the kernel decides, both work or the kernel refuses, and the function
//!   returns the right value; unregistering in either order restores the
//!   text.
//! - x86_64, the engine's first, on its int3 or jump-optimized, the
//!   kernel's without a post handler (optimizable) before it or just after
//!   it: the kernel never jumps over the engine's probe, one inside the
//!   engine's jump is refused, everything registered sees every call.
//! - The engine's disabled (its text restored), the kernel's arrives at
//!   the same instruction: enabling the engine's is refused (`-EBUSY`, the
//!   byte is not the original one any more) and leaves it disabled; the
//!   kernel's sees every hit; once the kernel's is gone, enabling works.

use crate::kp::KpKprobe;
use crate::kunit::Test;
use crate::targets::{addr_of, args_expected, kp_kunit_args};
use crate::util::{disable, enable, insn_len_at, register, text_word, unregister};
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::bindings;
use kernel::ffi::{c_int, c_ulong};

extern "C" {
    fn kp_test_kernel_kprobe_at(addr: usize, on: bool, post: bool) -> c_int;
    fn kp_test_kernel_kprobe_hits() -> usize;
}

const EBUSY: c_int = -(bindings::EBUSY as c_int);

static HITS: AtomicU64 = AtomicU64::new(0);

/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn count(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    HITS.fetch_add(1, Ordering::SeqCst);
    0
}

/// The first three instruction addresses of `kp_kunit_args`.
fn insns() -> [usize; 3] {
    let a = crate::util::body(addr_of(kp_kunit_args as *const ()));
    let b = a + insn_len_at(a);
    let c = b + insn_len_at(b);
    [a, b, c]
}

fn call_checks(t: &Test, what: &str) {
    for i in 0..3u64 {
        kp_expect_eq!(
            t,
            kp_kunit_args(core::hint::black_box(i), 11, 12),
            args_expected(i, 11, 12),
            "{}",
            what
        );
    }
}

/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn no_post(_p: *mut KpKprobe, _r: *mut bindings::pt_regs, _f: c_ulong) {}

fn engine_probe(at: usize) -> KpKprobe {
    let mut p = KpKprobe::new();
    p.addr = at as *mut _;
    p.pre_handler = Some(count);
    p
}

fn kernel_first(t: &mut Test) {
    if !crate::util::kernel_kprobes(t) {
        return;
    }
    let [_, b, c] = insns();
    let (wb, wc) = (text_word(b), text_word(c));
    // SAFETY: a kernel kprobe on this module's own function.
    let r = unsafe { kp_test_kernel_kprobe_at(b, true, true) };
    kp_expect_eq!(t, r, 0, "the kernel's kprobe at {:#x}", b);
    if r != 0 {
        return;
    }
    HITS.store(0, Ordering::SeqCst);
    let mut same = engine_probe(b);
    let r = register(&mut same);
    // x86_64: someone else's int3; arm64: the kernel's BRK, an exception
    // instruction the engine never steps.
    kp_expect!(t, r < 0, "the engine's probe on the kernel's: {}", r);
    if cfg!(CONFIG_X86_64) {
        kp_expect_eq!(t, r, EBUSY);
    }
    if r == 0 {
        unregister(&mut same);
    }
    let mut next = engine_probe(c);
    let r = register(&mut next);
    // x86_64: the boundaries past the kernel's int3 are unknown; arm64's
    // fixed-size instructions need no walk: shared.
    if cfg!(CONFIG_X86_64) {
        kp_expect_eq!(t, r, EBUSY, "past the kernel's int3");
    } else {
        kp_expect_eq!(t, r, 0, "next to the kernel's BRK");
    }
    call_checks(t, "beside the kernel's kprobe");
    // SAFETY: reads a counter of the C helper.
    kp_expect_eq!(t, unsafe { kp_test_kernel_kprobe_hits() }, 3);
    kp_expect_eq!(t, HITS.load(Ordering::SeqCst), if r == 0 { 3 } else { 0 });
    if r == 0 {
        unregister(&mut next);
    }
    // SAFETY: registered above.
    unsafe { kp_test_kernel_kprobe_at(b, false, true) };
    kp_expect_eq!(t, text_word(b), wb);
    // With the kernel's gone, the engine probes both.
    HITS.store(0, Ordering::SeqCst);
    kp_expect_eq!(t, register(&mut same), 0);
    kp_expect_eq!(t, register(&mut next), 0);
    call_checks(t, "after the kernel's kprobe went");
    kp_expect_eq!(t, HITS.load(Ordering::SeqCst), 6);
    unregister(&mut same);
    unregister(&mut next);
    kp_expect_eq!(t, text_word(b), wb);
    kp_expect_eq!(t, text_word(c), wc);
}

fn engine_first(t: &mut Test) {
    if !crate::util::kernel_kprobes(t) {
        return;
    }
    let [_, b, c] = insns();
    let (wb, wc) = (text_word(b), text_word(c));
    for kernel_at in [b, c] {
        for kernel_goes_first in [false, true] {
            HITS.store(0, Ordering::SeqCst);
            let mut p = engine_probe(b);
            // Kept on its int3: a post handler stops the engine's jump
            // optimizer, whose jump over `c` racing the kernel's probe there
            // is not what this case tests (docs/status.md, Known limits).
            p.post_handler = Some(no_post);
            kp_expect_eq!(t, register(&mut p), 0);
            // SAFETY: a kernel kprobe on this module's own function.
            let r = unsafe { kp_test_kernel_kprobe_at(kernel_at, true, true) };
            if kernel_at == b {
                // The kernel refuses an int3 it did not place.
                kp_expect!(t, r < 0, "the kernel's kprobe on the engine's int3: {}", r);
            }
            t.info(format_args!(
                "the kernel's kprobe at +{:#x} beside the engine's at +{:#x}: {}",
                kernel_at - insns()[0],
                b - insns()[0],
                r
            ));
            call_checks(t, "the engine's first");
            kp_expect_eq!(t, HITS.load(Ordering::SeqCst), 3);
            if r == 0 {
                // SAFETY: reads a counter of the C helper.
                kp_expect_eq!(t, unsafe { kp_test_kernel_kprobe_hits() }, 3);
            }
            if kernel_goes_first && r == 0 {
                // SAFETY: registered above.
                unsafe { kp_test_kernel_kprobe_at(kernel_at, false, true) };
            }
            unregister(&mut p);
            if !kernel_goes_first && r == 0 {
                // SAFETY: registered above.
                unsafe { kp_test_kernel_kprobe_at(kernel_at, false, true) };
            }
            kp_expect_eq!(t, text_word(b), wb);
            kp_expect_eq!(t, text_word(c), wc);
            call_checks(t, "after both went");
        }
    }
}

/// x86_64: the kernel's kprobe jump-optimized (a `jmp` to its detour over
/// the probed instruction and the next ones): the engine refuses its
/// instruction and everything past it in the function (-EBUSY), probes
/// before it share the function, and nothing changes the kernel's bytes.
#[cfg(CONFIG_X86_64)]
fn kernel_optimized_first(t: &mut Test) {
    if !crate::util::kernel_kprobes(t) {
        return;
    }
    let [a, b, c] = insns();
    let orig = text_word(b);
    // SAFETY: a kernel kprobe without post handler on this module's
    // function.
    let r = unsafe { kp_test_kernel_kprobe_at(b, true, false) };
    kp_expect_eq!(t, r, 0);
    if r != 0 {
        return;
    }
    // Its jump is in the text once the kernel's optimizer ran (the flag is
    // on the kernel's aggregate probe, not on ours).
    let jumped = || text_word(b) & 0xff == 0xe9;
    let mut waited = 0;
    while !jumped() && waited < 5000 {
        // SAFETY: process context.
        unsafe { bindings::msleep(10) };
        waited += 10;
    }
    let optimized = jumped();
    t.info(format_args!(
        "the kernel's kprobe optimized: {} after {} ms",
        optimized, waited
    ));
    kp_expect!(t, optimized);
    let (wb, wc) = (text_word(b), text_word(c));
    let mut on = engine_probe(b);
    kp_expect_eq!(t, register(&mut on), EBUSY, "on the kernel's jump");
    let mut past = engine_probe(c);
    kp_expect_eq!(t, register(&mut past), EBUSY, "past the kernel's jump");
    HITS.store(0, Ordering::SeqCst);
    let mut before = engine_probe(a);
    kp_expect_eq!(t, register(&mut before), 0, "before the kernel's jump");
    call_checks(t, "beside the kernel's optimized kprobe");
    kp_expect_eq!(t, HITS.load(Ordering::SeqCst), 3);
    // SAFETY: reads a counter of the C helper.
    kp_expect_eq!(t, unsafe { kp_test_kernel_kprobe_hits() }, 3);
    // Our probe before it is not jump-optimized over the kernel's jump
    // (the engine's optimizer settles probes within about 100 ms).
    // SAFETY: process context.
    unsafe { bindings::msleep(500) };
    call_checks(t, "after settling");
    kp_expect_eq!(t, before.flags & crate::kp::KP_FLAG_OPTIMIZED, 0);
    kp_expect_eq!(t, text_word(b), wb);
    kp_expect_eq!(t, text_word(c), wc);
    unregister(&mut before);
    // SAFETY: registered above.
    unsafe { kp_test_kernel_kprobe_at(b, false, false) };
    // The kernel unoptimizes in its optimizer's next run: wait for its
    // bytes to come back before the next suite probes this function.
    let mut waited = 0;
    while text_word(b) != orig && waited < 5000 {
        // SAFETY: process context.
        unsafe { bindings::msleep(10) };
        waited += 10;
    }
    kp_expect_eq!(
        t,
        text_word(b),
        orig,
        "the kernel's bytes back after {} ms",
        waited
    );
    call_checks(t, "after both went");
}

/// x86_64: the engine's first, then the kernel's kprobe without a post
/// handler (which the kernel's optimizer jump-optimizes where it can), the
/// engine's on its int3 or jump-optimized, the kernel's before it or just
/// after it. Whatever each side decides (the kernel must not jump over the
/// engine's int3 or jump: its copy would carry them into its detour), the
/// function returns the right value, every registered probe sees every
/// call, and unregistering in either order gives the text back.
#[cfg(CONFIG_X86_64)]
fn engine_first_kernel_unposted(t: &mut Test) {
    if !crate::util::kernel_kprobes(t) {
        return;
    }
    let [a, b, c] = insns();
    let words = [text_word(a), text_word(b), text_word(c)];
    let back = || [text_word(a), text_word(b), text_word(c)] == words;
    let sleep = |ms| {
        // SAFETY: process context.
        unsafe { bindings::msleep(ms) }
    };
    for engine_jumped in [false, true] {
        for kernel_at in [a, c] {
            HITS.store(0, Ordering::SeqCst);
            let mut p = engine_probe(b);
            if !engine_jumped {
                p.post_handler = Some(no_post);
            }
            kp_expect_eq!(t, register(&mut p), 0);
            let mut waited = 0;
            while engine_jumped && p.flags & crate::kp::KP_FLAG_OPTIMIZED == 0 && waited < 5000 {
                sleep(10);
                waited += 10;
            }
            let ours = p.flags & crate::kp::KP_FLAG_OPTIMIZED != 0;
            kp_expect_eq!(t, ours, engine_jumped, "the engine's jump-optimized");
            // SAFETY: a kernel kprobe without post handler on this module's
            // own function.
            let r = unsafe { kp_test_kernel_kprobe_at(kernel_at, true, false) };
            // The kernel's optimizer runs a few jiffies after a
            // registration, then waits for tasks-RCU (40 ms in
            // `kernel_optimized_first`): give it a second.
            sleep(1000);
            let theirs = r == 0 && text_word(kernel_at) & 0xff == 0xe9;
            t.info(format_args!(
                "engine at +{:#x} ({}), the kernel's at +{:#x}: {}{}",
                b - a,
                if ours { "jump" } else { "int3" },
                kernel_at - a,
                r,
                if theirs { ", jump-optimized" } else { "" }
            ));
            // A jump covers 5 bytes.
            if kernel_at == c && ours && c < b + 5 {
                // Inside the engine's jump: not an instruction boundary any
                // more (the kernel decodes through the jump).
                kp_expect!(
                    t,
                    r < 0,
                    "the kernel's probe inside the engine's jump: {}",
                    r
                );
                if r == 0 {
                    // Its int3 is inside the jump's displacement: calling
                    // the function now would crash. Take both away.
                    // SAFETY: registered above.
                    unsafe { kp_test_kernel_kprobe_at(kernel_at, false, false) };
                    unregister(&mut p);
                    return;
                }
            }
            if kernel_at == a && r == 0 && b < a + 5 {
                // Its jump would cover the engine's int3 or jump.
                kp_expect!(t, !theirs, "the kernel jumped over the engine's probe");
            }
            call_checks(t, "the engine's first, the kernel's unposted");
            kp_expect_eq!(t, HITS.load(Ordering::SeqCst), 3);
            if r == 0 {
                // SAFETY: reads a counter of the C helper.
                kp_expect_eq!(t, unsafe { kp_test_kernel_kprobe_hits() }, 3);
            }
            // Either order: the kernel's first when the engine's is on its
            // int3, the engine's first when it is jump-optimized.
            if engine_jumped {
                unregister(&mut p);
            }
            if r == 0 {
                // SAFETY: registered above.
                unsafe { kp_test_kernel_kprobe_at(kernel_at, false, false) };
            }
            if !engine_jumped {
                unregister(&mut p);
            }
            // The kernel unoptimizes in its optimizer's next run.
            let mut waited = 0;
            while !back() && waited < 5000 {
                sleep(10);
                waited += 10;
            }
            kp_expect!(t, back(), "the text back after {} ms", waited);
            call_checks(t, "after both went");
        }
    }
}

fn kernel_while_disabled(t: &mut Test) {
    if !crate::util::kernel_kprobes(t) {
        return;
    }
    let [_, b, _] = insns();
    let wb = text_word(b);
    HITS.store(0, Ordering::SeqCst);
    let mut p = engine_probe(b);
    kp_expect_eq!(t, register(&mut p), 0);
    kp_expect_eq!(t, disable(&mut p), 0);
    kp_expect_eq!(t, text_word(b), wb, "the original back while disabled");
    // SAFETY: a kernel kprobe (with a post handler: it keeps its
    // breakpoint) on this module's own function.
    let r = unsafe { kp_test_kernel_kprobe_at(b, true, true) };
    kp_expect_eq!(
        t,
        r,
        0,
        "the kernel's kprobe where the engine's is disabled"
    );
    if r == 0 {
        kp_expect_eq!(
            t,
            enable(&mut p),
            EBUSY,
            "enable over the kernel's breakpoint"
        );
        kp_expect!(
            t,
            p.flags & crate::kp::KP_FLAG_DISABLED != 0,
            "still disabled"
        );
        call_checks(t, "the kernel's kprobe, the engine's disabled");
        // SAFETY: reads a counter of the C helper.
        kp_expect_eq!(t, unsafe { kp_test_kernel_kprobe_hits() }, 3);
        kp_expect_eq!(t, HITS.load(Ordering::SeqCst), 0);
        // SAFETY: registered above.
        unsafe { kp_test_kernel_kprobe_at(b, false, true) };
        kp_expect_eq!(t, text_word(b), wb, "the kernel's probe gone");
    }
    kp_expect_eq!(t, enable(&mut p), 0, "enable once the kernel's is gone");
    call_checks(t, "the engine's enabled again");
    kp_expect_eq!(t, HITS.load(Ordering::SeqCst), 3);
    unregister(&mut p);
    kp_expect_eq!(t, text_word(b), wb);
}

/// x86_64: the engine's probe jump-optimized, then the kernel's kprobe
/// (with a post handler) on the engine's `jmp`, which the kernel takes for
/// the instruction there: it puts its int3 over it and emulates the jump
/// into the engine's detour. Both see every call. The engine must leave
/// that jump, its tail and its detour alone while the kernel's int3 sits
/// on it: a probe that needs the engine's breakpoint back (a post handler)
/// is refused with `-EBUSY`, the bytes stay. (Restoring the original tail
/// under the kernel's int3 had the kernel write the `jmp` back over them
/// when it left: a jump to wherever they pointed.) Once the kernel's is
/// gone its `jmp` is back, and unregistering the engine's gives the text
/// back.
#[cfg(CONFIG_X86_64)]
fn kernel_on_engines_jump(t: &mut Test) {
    if !crate::util::kernel_kprobes(t) {
        return;
    }
    let [_, b, c] = insns();
    let (wb, wc) = (text_word(b), text_word(c));
    HITS.store(0, Ordering::SeqCst);
    let mut p = engine_probe(b);
    kp_expect_eq!(t, register(&mut p), 0);
    let mut waited = 0;
    while p.flags & crate::kp::KP_FLAG_OPTIMIZED == 0 && waited < 5000 {
        // SAFETY: process context.
        unsafe { bindings::msleep(10) };
        waited += 10;
    }
    kp_expect!(
        t,
        p.flags & crate::kp::KP_FLAG_OPTIMIZED != 0,
        "not optimized"
    );
    let jump = text_word(b);
    kp_expect_eq!(t, jump & 0xff, 0xe9);
    // SAFETY: a kernel kprobe on this module's own function.
    let r = unsafe { kp_test_kernel_kprobe_at(b, true, true) };
    // (The kernel's can_probe() refuses only an int3.)
    kp_expect_eq!(t, r, 0, "the kernel's kprobe on the engine's jump");
    if r == 0 {
        kp_expect_eq!(t, text_word(b) & 0xff, 0xcc, "the kernel's int3");
        call_checks(t, "the kernel's kprobe on the engine's jump");
        kp_expect_eq!(t, HITS.load(Ordering::SeqCst), 3);
        // SAFETY: reads a counter of the C helper.
        kp_expect_eq!(t, unsafe { kp_test_kernel_kprobe_hits() }, 3);
        let mut post = engine_probe(b);
        post.post_handler = Some(no_post);
        let rp = register(&mut post);
        kp_expect_eq!(t, rp, EBUSY, "the jump taken away");
        if rp == 0 {
            // (Not left registered on this stack frame.)
            unregister(&mut post);
        }
        kp_expect_eq!(t, text_word(b), (jump & !0xff) | 0xcc, "the bytes kept");
        call_checks(t, "after the refusal");
        kp_expect_eq!(t, HITS.load(Ordering::SeqCst), 6);
        // SAFETY: registered above.
        unsafe { kp_test_kernel_kprobe_at(b, false, true) };
        kp_expect_eq!(t, text_word(b), jump, "the engine's jump back");
    }
    call_checks(t, "the engine's jump alone");
    kp_expect_eq!(t, HITS.load(Ordering::SeqCst), if r == 0 { 9 } else { 3 });
    unregister(&mut p);
    kp_expect_eq!(t, text_word(b), wb);
    kp_expect_eq!(t, text_word(c), wc);
    call_checks(t, "after both went");
}

#[cfg(CONFIG_X86_64)]
kunit_suite!(
    kp_coexist,
    "kp_coexist",
    [
        kernel_first,
        engine_first,
        kernel_optimized_first,
        engine_first_kernel_unposted,
        kernel_on_engines_jump,
        kernel_while_disabled
    ]
);
#[cfg(CONFIG_ARM64)]
kunit_suite!(
    kp_coexist,
    "kp_coexist",
    [kernel_first, engine_first, kernel_while_disabled]
);
