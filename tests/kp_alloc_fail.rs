// SPDX-License-Identifier: GPL-2.0

//! `kp_alloc_fail`: every allocation of each registration path made to fail
//! in turn, through the kernel's own fault injection: failslab and
//! fail_page_alloc, driven by this task's `fail_nth` (the n-th allocation
//! from now that consults them fails; the guest sets `ignore-gfp-wait` to N
//! and `min-order` to 0 so that `GFP_KERNEL` slab objects and single pages
//! count). Allocations outside the engine's code are covered too (the vmap
//! of a text alias, ftrace's filter hashes, kallsyms' buffers).
//!
//! For n = 1, 2, ... until the path makes fewer than n allocations: a
//! registration that fails must return -ENOMEM and leave nothing behind
//! (the engine's probes, probed addresses, slots, return instances and
//! events as before, every probed text word as before); one that survives
//! the failure (the allocation was optional or had a fallback) must leave a
//! working probe. The debug kernel's kmemleak then checks that nothing
//! leaked. Figures per path are printed.

use crate::kp::{self, KpKprobe, KpKretprobe, KpKretprobeInstance, KpStats};
use crate::kunit::Test;
use crate::targets::{addr_of, args_expected, kp_kunit_args, kp_kunit_target, kp_kunit_target2};
use crate::util::{disable, enable, insn_len_at, register, text_word, unregister};
use core::sync::atomic::{AtomicUsize, Ordering};
use kernel::alloc::{flags::GFP_KERNEL, KBox, KVec};
use kernel::bindings;
use kernel::ffi::{c_int, c_uint};
use kernel::prelude::*;

extern "C" {
    fn kp_test_set_fail_nth(n: c_uint) -> c_int;
    fn kp_test_fail_nth() -> c_uint;
    fn kp_test_c_target(value: c_int) -> c_int;
    fn kp_test_c_args(a: u64, b: u64, c: u64) -> u64;
}

const ENOMEM: c_int = -(bindings::ENOMEM as c_int);

/// More allocations than any registration path makes.
const MAX_N: u32 = 300;

static HITS: AtomicUsize = AtomicUsize::new(0);

/// Counts hits.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn count(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    HITS.fetch_add(1, Ordering::SeqCst);
    0
}

/// Counts returns.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn count_ret(_i: *mut KpKretprobeInstance, _r: *mut bindings::pt_regs) -> c_int {
    HITS.fetch_add(1, Ordering::SeqCst);
    0
}

/// Sets this task's `fail_nth`.
fn set_fail_nth(n: u32) -> c_int {
    // SAFETY: writes the current task's own field.
    unsafe { kp_test_set_fail_nth(n) }
}

/// What the engine holds, without the step counter.
fn held(s: &KpStats) -> [u64; 5] {
    [
        s.probes as u64,
        s.points as u64,
        s.slots as u64,
        s.kretprobe_instances as u64,
        s.events as u64,
    ]
}

/// A mid-function instruction of `kp_kunit_args`.
fn args_mid() -> usize {
    let f = crate::util::body(addr_of(kp_kunit_args as *const ()));
    f + insn_len_at(f)
}

/// Calls `kp_kunit_args` once and checks its result.
fn call_args(t: &Test) {
    kp_expect_eq!(t, kp_kunit_args(3, 4, 5), args_expected(3, 4, 5));
}

/// Runs `attempt` with the n-th allocation failing, for every n until the
/// path makes fewer than n allocations; after a success `done` checks the
/// probe and undoes the registration. `text`: words that must not change.
/// `allocates`: whether the path is expected to allocate at all.
fn run<S>(
    t: &Test,
    what: &str,
    text: &[usize],
    allocates: bool,
    state: &mut S,
    attempt: fn(&mut S) -> c_int,
    done: fn(&Test, &mut S),
) {
    let mut words = KVec::new();
    for &a in text {
        if words.push(text_word(a), GFP_KERNEL).is_err() {
            kp_expect!(t, false, "no memory for the test");
            return;
        }
    }
    let base = held(&kp::stats());
    let (mut failed, mut survived, mut total) = (0u32, 0u32, None);
    for n in 1..=MAX_N {
        kp_expect_eq!(t, set_fail_nth(n), 0, "fault injection unavailable");
        let r = attempt(state);
        // SAFETY: reads the current task's own field.
        let left = unsafe { kp_test_fail_nth() };
        set_fail_nth(0);
        if left != 0 {
            // Fewer than n allocations: this attempt saw no failure.
            kp_expect_eq!(t, r, 0, "{}: without a failure", what);
            if r == 0 {
                done(t, state);
            }
            total = Some(n - 1);
        } else if r == 0 {
            survived += 1;
            done(t, state);
        } else {
            kp_expect_eq!(t, r, ENOMEM, "{}: allocation {} failed", what, n);
            failed += 1;
        }
        // A function entry's ftrace site stays parked for a while after
        // its last probe went (`kp_ftrace_release()`).
        kp::ftrace_release();
        let now = held(&kp::stats());
        kp_expect_eq!(
            t,
            now,
            base,
            "{}: allocation {}: probes, points, slots, instances, events",
            what,
            n
        );
        for (&a, &w) in text.iter().zip(words.iter()) {
            kp_expect_eq!(
                t,
                text_word(a),
                w,
                "{}: allocation {}: text at {:#x}",
                what,
                n,
                a
            );
        }
        if total.is_some() {
            break;
        }
    }
    kp_expect!(
        t,
        total.is_some(),
        "{}: more than {} allocations",
        what,
        MAX_N
    );
    if allocates {
        kp_expect!(t, failed > 0, "{}: no failure reached the caller", what);
    }
    pr_info!(
        "kp_alloc_fail: {}: {} allocations made to fail in turn: {} registrations returned \
         -ENOMEM leaving nothing behind, {} survived the failure with a working probe\n",
        what,
        total.unwrap_or(MAX_N),
        failed,
        survived
    );
}

/// Fault injection reaches this task's allocations at all.
fn injection_works(t: &mut Test) {
    kp_expect_eq!(t, set_fail_nth(1), 0, "CONFIG_FAULT_INJECTION");
    let b = KBox::new([0u64; 8], GFP_KERNEL);
    // SAFETY: reads the current task's own field.
    let left = unsafe { kp_test_fail_nth() };
    set_fail_nth(0);
    kp_expect!(
        t,
        b.is_err(),
        "the first kmalloc did not fail (failslab ignore-gfp-wait?)"
    );
    kp_expect_eq!(t, left, 0);
}

fn kprobe_attempt(p: &mut KpKprobe, post: bool) -> c_int {
    *p = KpKprobe::new();
    p.addr = args_mid() as *mut _;
    p.pre_handler = Some(count);
    if post {
        p.post_handler = Some(post_nop);
    }
    register(p)
}

/// A post handler (forces the stepped path).
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn post_nop(
    _p: *mut KpKprobe,
    _r: *mut bindings::pt_regs,
    _f: kernel::ffi::c_ulong,
) {
}

fn kprobe_done(t: &Test, p: &mut KpKprobe) {
    HITS.store(0, Ordering::SeqCst);
    call_args(t);
    kp_expect_eq!(t, HITS.load(Ordering::SeqCst), 1);
    unregister(p);
}

/// A kprobe in the middle of a function, with and without a post handler.
fn kprobe_paths(t: &mut Test) {
    let mut p = KpKprobe::new();
    let text = [args_mid()];
    run(
        t,
        "kprobe",
        &text,
        true,
        &mut p,
        |p| kprobe_attempt(p, false),
        kprobe_done,
    );
    run(
        t,
        "kprobe with post handler",
        &text,
        true,
        &mut p,
        |p| kprobe_attempt(p, true),
        kprobe_done,
    );
}

/// A second kprobe joining one already at the address (which has a post
/// handler: it is never jump-optimized, which would take a slot
/// while the test counts them).
fn kprobe_join(t: &mut Test) {
    let mut first = KpKprobe::new();
    kp_expect_eq!(t, kprobe_attempt(&mut first, true), 0);
    let mut p = KpKprobe::new();
    run(
        t,
        "kprobe joining another",
        &[args_mid()],
        true,
        &mut p,
        |p| kprobe_attempt(p, false),
        |t, p| {
            HITS.store(0, Ordering::SeqCst);
            call_args(t);
            kp_expect_eq!(t, HITS.load(Ordering::SeqCst), 2);
            unregister(p);
        },
    );
    unregister(&mut first);
}

/// A function entry (x86_64: served by ftrace at its call site).
fn kprobe_entry(t: &mut Test) {
    let f = addr_of(kp_test_c_target as *const ());
    let mut p = KpKprobe::new();
    run(
        t,
        "kprobe at a function entry",
        &[f, f + 4, f + 8],
        true,
        &mut p,
        |p| {
            *p = KpKprobe::new();
            p.symbol_name = c"kp_test_c_target".as_ptr().cast();
            p.pre_handler = Some(count);
            register(p)
        },
        |t, p| {
            HITS.store(0, Ordering::SeqCst);
            // SAFETY: a plain C function.
            let v = unsafe { kp_test_c_target(7) };
            kp_expect_eq!(t, v, 3);
            kp_expect_eq!(t, HITS.load(Ordering::SeqCst), 1);
            unregister(p);
        },
    );
}

/// Where the batch's three probes go.
fn batch_addrs() -> [usize; 3] {
    [
        args_mid(),
        crate::util::body(addr_of(kp_kunit_target as *const ())),
        crate::util::body(addr_of(kp_kunit_target2 as *const ())),
    ]
}

/// The batch API: three probes, all or nothing.
fn kprobe_batch(t: &mut Test) {
    let addrs = batch_addrs();
    let mut ps = [KpKprobe::new(), KpKprobe::new(), KpKprobe::new()];
    run(
        t,
        "batch of three kprobes",
        &addrs,
        true,
        &mut ps,
        |ps| {
            for (p, a) in ps.iter_mut().zip(batch_addrs()) {
                *p = KpKprobe::new();
                p.addr = a as *mut _;
                p.pre_handler = Some(count);
            }
            let mut list = [
                &mut ps[0] as *mut _,
                &mut ps[1] as *mut _,
                &mut ps[2] as *mut _,
            ];
            // SAFETY: the probes stay put until unregistered in `done`.
            unsafe { kp::kp_register_kprobes(list.as_mut_ptr(), 3) }
        },
        |t, ps| {
            HITS.store(0, Ordering::SeqCst);
            call_args(t);
            kp_expect_eq!(t, kp_kunit_target(9), 3);
            kp_expect_eq!(t, kp_kunit_target2(9), 4);
            kp_expect_eq!(t, HITS.load(Ordering::SeqCst), 3);
            let mut list = [
                &mut ps[0] as *mut _,
                &mut ps[1] as *mut _,
                &mut ps[2] as *mut _,
            ];
            // SAFETY: registered above.
            unsafe { kp::kp_unregister_kprobes(list.as_mut_ptr(), 3) };
        },
    );
}

fn kretprobe_attempt(rp: &mut KpKretprobe, maxactive: c_int, data_size: usize) -> c_int {
    *rp = KpKretprobe::new();
    rp.kp.symbol_name = c"kp_kunit_args".as_ptr().cast();
    rp.handler = Some(count_ret);
    rp.maxactive = maxactive;
    rp.data_size = data_size;
    // SAFETY: `rp` stays put until unregistered in `kretprobe_done`.
    unsafe { kp::kp_register_kretprobe(rp) }
}

fn kretprobe_done(t: &Test, rp: &mut KpKretprobe) {
    HITS.store(0, Ordering::SeqCst);
    call_args(t);
    kp_expect_eq!(t, HITS.load(Ordering::SeqCst), 1);
    // SAFETY: registered.
    unsafe { kp::kp_unregister_kretprobe(rp) };
}

/// Kretprobes: the default pool (slab) and a large one (vmalloc'd pages).
fn kretprobe_paths(t: &mut Test) {
    let f = addr_of(kp_kunit_args as *const ());
    let text = [f, f + 4, f + 8];
    let mut rp = KpKretprobe::new();
    run(
        t,
        "kretprobe",
        &text,
        true,
        &mut rp,
        |rp| kretprobe_attempt(rp, 0, 0),
        kretprobe_done,
    );
    run(
        t,
        "kretprobe, 20 instances of 1 KiB (vmalloc'd pool)",
        &text,
        true,
        &mut rp,
        |rp| kretprobe_attempt(rp, 20, 1024),
        kretprobe_done,
    );
}

/// Enabling a disabled probe (re-arming).
fn kprobe_enable(t: &mut Test) {
    let mut p = KpKprobe::new();
    kp_expect_eq!(t, kprobe_attempt(&mut p, false), 0);
    kp_expect_eq!(t, disable(&mut p), 0);
    run(
        t,
        "enable after disable",
        &[args_mid()],
        false,
        &mut p,
        enable,
        |t, p| {
            HITS.store(0, Ordering::SeqCst);
            call_args(t);
            kp_expect_eq!(t, HITS.load(Ordering::SeqCst), 1);
            kp_expect_eq!(t, disable(p), 0);
        },
    );
    unregister(&mut p);
}

/// Unregistration with its n-th allocation failing (restoring text maps
/// an alias of its page; taking an ftrace site down may allocate in
/// ftrace): the engine tries again, and the text comes back every time;
/// nothing is left behind. A mid-function probe and a function entry (its
/// parked direct site released under the injection too; the shared
/// `ftrace_ops` path, used when the direct call is taken, is not reached
/// here).
fn unregister_restores(t: &mut Test) {
    let entry = addr_of(kp_test_c_target as *const ());
    for (what, words) in [
        (
            "unregister mid-function",
            [args_mid(), args_mid() + 4, args_mid() + 8],
        ),
        (
            "unregister at a function entry",
            [entry, entry + 4, entry + 8],
        ),
    ] {
        let before: [u32; 3] = words.map(text_word);
        let base = held(&kp::stats());
        let (mut n, mut total) = (1u32, None);
        while n <= MAX_N && total.is_none() {
            let mut p = KpKprobe::new();
            if what.ends_with("entry") {
                p.symbol_name = c"kp_test_c_target".as_ptr().cast();
            } else {
                p.addr = args_mid() as *mut _;
            }
            p.pre_handler = Some(count);
            kp_expect_eq!(t, register(&mut p), 0, "{}", what);
            kp_expect_eq!(t, set_fail_nth(n), 0, "fault injection unavailable");
            unregister(&mut p);
            // A function entry's direct ftrace site is taken down here (it
            // stays parked after its last probe), under the injection too.
            kp::ftrace_release();
            // SAFETY: reads the current task's own field.
            let left = unsafe { kp_test_fail_nth() };
            set_fail_nth(0);
            if left != 0 {
                total = Some(n - 1);
            }
            kp_expect!(t, crate::util::cleared(&p), "{}: allocation {}", what, n);
            kp_expect_eq!(t, held(&kp::stats()), base, "{}: allocation {}", what, n);
            kp_expect_eq!(
                t,
                words.map(text_word),
                before,
                "{}: allocation {}: text",
                what,
                n
            );
            HITS.store(0, Ordering::SeqCst);
            call_args(t);
            // SAFETY: a plain C function.
            kp_expect_eq!(t, unsafe { kp_test_c_target(7) }, 3);
            kp_expect_eq!(
                t,
                HITS.load(Ordering::SeqCst),
                0,
                "{}: a hit after unregistration",
                what
            );
            n += 1;
        }
        kp_expect!(
            t,
            total.is_some(),
            "{}: more than {} allocations",
            what,
            MAX_N
        );
        pr_info!(
            "kp_alloc_fail: {}: {} allocations made to fail in turn, text restored each time\n",
            what,
            total.unwrap_or(MAX_N)
        );
    }
}

/// A probe event defined by a `kprobe_events` line.
fn event_define(t: &mut Test) {
    // A C function: events refuse functions without an ftrace site.
    let f = addr_of(kp_test_c_args as *const ());
    run(
        t,
        "kprobe event with two fetch arguments",
        &[f, f + 4, f + 8],
        true,
        &mut (),
        |()| {
            let line = if cfg!(CONFIG_X86_64) {
                c"p:kp_af/ev kp_test_c_args a=%di b=+0(%si):u8"
            } else {
                c"p:kp_af/ev kp_test_c_args a=%x0 b=+0(%x1):u8"
            };
            // SAFETY: NUL-terminated.
            unsafe { kp::kp_event_command(line.as_ptr().cast()) }
        },
        |t, ()| {
            // SAFETY: NUL-terminated.
            let r = unsafe { kp::kp_event_command(c"-:kp_af/ev".as_ptr().cast()) };
            kp_expect_eq!(t, r, 0);
        },
    );
}

kunit_suite!(
    kp_alloc_fail,
    "kp_alloc_fail",
    [
        injection_works,
        kprobe_paths,
        kprobe_join,
        kprobe_entry,
        kprobe_batch,
        kretprobe_paths,
        kprobe_enable,
        unregister_restores,
        event_define
    ]
);
