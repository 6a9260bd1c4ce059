// SPDX-License-Identifier: GPL-2.0

//! `kp_core`: registry semantics.
//!
//! The first three cases port the kprobe cases of the kernel's
//! `lib/test_kprobes.c` (test_kprobe, test_kprobes, test_kprobe_missed) to
//! this engine's API; the others cover aggregation, enable/disable, batch
//! registration, a probed module going away, and concurrency.

use crate::kp::{self, KpKprobe, KP_FLAG_GONE};
use crate::kunit::Test;
use crate::targets::{
    addr_of, kp_kunit_recursed_target, kp_kunit_target, kp_kunit_target2, DIV_FACTOR,
};
use crate::util::{
    disable, enable, irqs_disabled, register, run, text_word, unregister, Worker, ENOENT,
};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use kernel::bindings;
use kernel::ffi::{c_int, c_ulong};

static RAND1: AtomicU32 = AtomicU32::new(0);
static PREH_VAL: AtomicU32 = AtomicU32::new(0);
static POSTH_VAL: AtomicU32 = AtomicU32::new(0);
/// Handler expectations that failed (checked by the case afterwards: a
/// handler runs in trap context and cannot report to KUnit itself).
static HANDLER_ERRORS: AtomicUsize = AtomicUsize::new(0);

fn div() -> u32 {
    DIV_FACTOR.load(Ordering::Relaxed)
}

fn setup_rand() -> u32 {
    // SAFETY: plain call.
    let mut r = unsafe { bindings::get_random_u32() };
    if r == 0 {
        r = 1;
    }
    let r = r | 1 << 20; // never smaller than the divisor
    RAND1.store(r, Ordering::SeqCst);
    PREH_VAL.store(0, Ordering::SeqCst);
    POSTH_VAL.store(0, Ordering::SeqCst);
    HANDLER_ERRORS.store(0, Ordering::SeqCst);
    r
}

/// `kp_pre_handler`: handlers run with interrupts off; calls a function that
/// may itself be probed.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn kp_pre(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    if !irqs_disabled() {
        HANDLER_ERRORS.fetch_add(1, Ordering::SeqCst);
    }
    PREH_VAL.store(
        kp_kunit_recursed_target(RAND1.load(Ordering::SeqCst)),
        Ordering::SeqCst,
    );
    0
}

/// `kp_post_handler`.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn kp_post(_p: *mut KpKprobe, _r: *mut bindings::pt_regs, _f: c_ulong) {
    let expval = kp_kunit_recursed_target(RAND1.load(Ordering::SeqCst));
    if !irqs_disabled() || PREH_VAL.load(Ordering::SeqCst) != expval {
        HANDLER_ERRORS.fetch_add(1, Ordering::SeqCst);
    }
    POSTH_VAL.store(PREH_VAL.load(Ordering::SeqCst) + div(), Ordering::SeqCst);
}

/// `kp_pre_handler2`.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn kp_pre2(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    PREH_VAL.store(RAND1.load(Ordering::SeqCst) / div() + 1, Ordering::SeqCst);
    0
}

/// `kp_post_handler2`.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn kp_post2(_p: *mut KpKprobe, _r: *mut bindings::pt_regs, _f: c_ulong) {
    if PREH_VAL.load(Ordering::SeqCst) != RAND1.load(Ordering::SeqCst) / div() + 1 {
        HANDLER_ERRORS.fetch_add(1, Ordering::SeqCst);
    }
    POSTH_VAL.store(PREH_VAL.load(Ordering::SeqCst) + div(), Ordering::SeqCst);
}

fn probe_on(sym: &'static core::ffi::CStr) -> KpKprobe {
    let mut p = KpKprobe::new();
    p.symbol_name = sym.as_ptr().cast();
    p
}

fn test_kprobe(t: &mut Test) {
    let rand1 = setup_rand();
    let mut kp = probe_on(c"kp_kunit_target");
    kp.pre_handler = Some(kp_pre);
    kp.post_handler = Some(kp_post);
    kp_expect_eq!(t, register(&mut kp), 0);
    kp_expect_eq!(t, kp_kunit_target(rand1), rand1 / div());
    unregister(&mut kp);
    kp_expect!(t, PREH_VAL.load(Ordering::SeqCst) != 0);
    kp_expect!(t, POSTH_VAL.load(Ordering::SeqCst) != 0);
    kp_expect_eq!(t, HANDLER_ERRORS.load(Ordering::SeqCst), 0);
}

fn test_kprobes(t: &mut Test) {
    let rand1 = setup_rand();
    let mut kp = probe_on(c"kp_kunit_target");
    kp.pre_handler = Some(kp_pre);
    kp.post_handler = Some(kp_post);
    let mut kp2 = probe_on(c"kp_kunit_target2");
    kp2.pre_handler = Some(kp_pre2);
    kp2.post_handler = Some(kp_post2);
    let mut kps: [*mut KpKprobe; 2] = [&mut kp, &mut kp2];
    // SAFETY: both structs outlive their registration.
    let r = unsafe { kp::kp_register_kprobes(kps.as_mut_ptr(), 2) };
    kp_expect_eq!(t, r, 0);
    PREH_VAL.store(0, Ordering::SeqCst);
    POSTH_VAL.store(0, Ordering::SeqCst);
    kp_kunit_target(rand1);
    kp_expect!(t, PREH_VAL.load(Ordering::SeqCst) != 0);
    kp_expect!(t, POSTH_VAL.load(Ordering::SeqCst) != 0);
    PREH_VAL.store(0, Ordering::SeqCst);
    POSTH_VAL.store(0, Ordering::SeqCst);
    kp_expect_eq!(t, kp_kunit_target2(rand1), rand1 / div() + 1);
    kp_expect!(t, PREH_VAL.load(Ordering::SeqCst) != 0);
    kp_expect!(t, POSTH_VAL.load(Ordering::SeqCst) != 0);
    // SAFETY: registered above.
    unsafe { kp::kp_unregister_kprobes(kps.as_mut_ptr(), 2) };
    kp_expect!(t, crate::util::cleared(&kp) && crate::util::cleared(&kp2));
    kp_expect_eq!(t, HANDLER_ERRORS.load(Ordering::SeqCst), 0);
}

static NESTED_HITS: AtomicU32 = AtomicU32::new(0);

/// Calls the function its probe sits in: a nested hit of the same probe.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn nested_pre(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    NESTED_HITS.fetch_add(1, Ordering::SeqCst);
    kp_kunit_recursed_target(RAND1.load(Ordering::SeqCst));
    0
}

/// A probe hit again inside its own handler on the trap path (not an
/// ftrace entry, as in `test_kprobe_missed`): counted as missed, no handler
/// run, the instruction executed (since 2026-12-05 from the copy that
/// jumps back by itself, keeping no per-CPU level; no counter shows which
/// copy ran).
fn test_kprobe_missed_in_trap(t: &mut Test) {
    let rand1 = setup_rand();
    let f = crate::kp::lookup_symbol(c"kp_kunit_recursed_target").map_or(0, |s| s.addr);
    kp_expect!(t, f != 0);
    if f == 0 {
        return;
    }
    // The first instruction past the entry that the trap path serves.
    let mut off = 0usize;
    let mut kp = KpKprobe::new();
    let mut found = false;
    for _ in 0..6 {
        let len = crate::util::insn_len_at(f + off);
        if len == 0 {
            break;
        }
        kp = KpKprobe::new();
        kp.addr = (f + off) as *mut _;
        kp.pre_handler = Some(nested_pre);
        if register(&mut kp) == 0 {
            if kp.flags & crate::kp::KP_FLAG_FTRACE == 0 {
                found = true;
                break;
            }
            unregister(&mut kp);
        }
        off += len;
    }
    kp_expect!(t, found, "no trap-served instruction in the first six");
    if !found {
        return;
    }
    NESTED_HITS.store(0, Ordering::SeqCst);
    let before = crate::kp::stats();
    kp_expect_eq!(t, kp_kunit_recursed_target(rand1), rand1 / div());
    let after = crate::kp::stats();
    kp_expect_eq!(t, NESTED_HITS.load(Ordering::SeqCst), 1, "+{:#x}", off);
    kp_expect_eq!(t, kp.nmissed, 1);
    kp_expect_eq!(t, after.missed_reentry - before.missed_reentry, 1);
    unregister(&mut kp);
}

fn test_kprobe_missed(t: &mut Test) {
    let rand1 = setup_rand();
    let mut kp = probe_on(c"kp_kunit_recursed_target");
    kp.pre_handler = Some(kp_pre);
    kp.post_handler = Some(kp_post);
    kp_expect_eq!(t, register(&mut kp), 0);
    let before = crate::kp::stats();
    kp_expect_eq!(t, kp_kunit_recursed_target(rand1), rand1 / div());
    // Both handlers call the probed function: two misses, no recursion,
    // counted under their cause too.
    kp_expect_eq!(t, kp.nmissed, 2);
    let after = crate::kp::stats();
    kp_expect_eq!(t, after.missed_reentry - before.missed_reentry, 2);
    kp_expect!(t, PREH_VAL.load(Ordering::SeqCst) != 0);
    kp_expect!(t, POSTH_VAL.load(Ordering::SeqCst) != 0);
    unregister(&mut kp);
    kp_expect_eq!(t, HANDLER_ERRORS.load(Ordering::SeqCst), 0);
}

// ---------------------------------------------------------------------------
// Aggregation: handlers append their probe's id to a log.

static LOG: AtomicU64 = AtomicU64::new(0);

fn log_push(id: u64) {
    let _ = LOG.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| Some(v << 4 | id));
}

/// Takes the log: ids in call order, one hex digit each.
fn log_take() -> u64 {
    LOG.swap(0, Ordering::SeqCst)
}

macro_rules! id_handlers {
    ($pre:ident, $post:ident, $id:literal) => {
        /// Logs this probe's id.
        ///
        /// # Safety
        ///
        /// Called by the engine.
        unsafe extern "C" fn $pre(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
            log_push($id);
            0
        }
        /// Logs this probe's id + 8.
        ///
        /// # Safety
        ///
        /// Called by the engine.
        unsafe extern "C" fn $post(_p: *mut KpKprobe, _r: *mut bindings::pt_regs, _f: c_ulong) {
            log_push($id + 8);
        }
    };
}
id_handlers!(pre1, post1, 1);
id_handlers!(pre2, post2, 2);
id_handlers!(pre3, post3, 3);

fn id_probe(id: usize) -> KpKprobe {
    let mut p = probe_on(c"kp_kunit_target");
    let (pre, post): (kp::PreHandler, kp::PostHandler) = match id {
        1 => (pre1, post1),
        2 => (pre2, post2),
        _ => (pre3, post3),
    };
    p.pre_handler = Some(pre);
    p.post_handler = Some(post);
    p
}

/// The log expected when probes `ids` (registration order) are on the point.
fn expected_log(ids: &[usize]) -> u64 {
    let mut v = 0u64;
    for &id in ids {
        v = v << 4 | id as u64;
    }
    for &id in ids {
        v = v << 4 | (id as u64 + 8);
    }
    v
}

fn aggregate_three_every_order(t: &mut Test) {
    let target = crate::util::body(addr_of(kp_kunit_target as *const ()));
    let orig = text_word(target);
    let orders: [[usize; 3]; 6] = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for order in orders {
        let mut ps = [id_probe(1), id_probe(2), id_probe(3)];
        for p in ps.iter_mut() {
            kp_expect_eq!(t, register(p), 0);
        }
        // One breakpoint for all three.
        kp_expect!(t, ps[0].addr == ps[1].addr && ps[1].addr == ps[2].addr);
        log_take();
        kp_kunit_target(9);
        kp_expect_eq!(t, log_take(), expected_log(&[1, 2, 3]));
        let mut left: [usize; 3] = [1, 2, 3];
        let mut n = 3;
        for &i in &order {
            unregister(&mut ps[i]);
            left = {
                let mut l = [0; 3];
                let mut k = 0;
                for &id in &left[..n] {
                    if id != i + 1 {
                        l[k] = id;
                        k += 1;
                    }
                }
                l
            };
            n -= 1;
            kp_kunit_target(9);
            kp_expect_eq!(t, log_take(), expected_log(&left[..n]), "order {:?}", order);
        }
        // The last one out restored the text.
        kp_expect_eq!(t, text_word(target), orig);
    }
}

/// Makes the function return 77 at once and returns non-zero.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn pre_emulate_return(_p: *mut KpKprobe, r: *mut bindings::pt_regs) -> c_int {
    log_push(5);
    // SAFETY: the engine passes the trap frame.
    crate::util::force_return(unsafe { &mut *r }, 77);
    1
}

fn aggregate_pre_handler_stops_the_rest(t: &mut Test) {
    let mut a = id_probe(1);
    let mut b = probe_on(c"kp_kunit_target");
    b.pre_handler = Some(pre_emulate_return);
    b.post_handler = Some(post2);
    let mut c = id_probe(3);
    for p in [&mut a, &mut b, &mut c] {
        kp_expect_eq!(t, register(p), 0);
    }
    log_take();
    kp_expect_eq!(t, kp_kunit_target(300), 77);
    // 1 ran, 5 (b) redirected: 3's pre and every post handler were skipped.
    kp_expect_eq!(t, log_take(), 0x15);
    for p in [&mut a, &mut b, &mut c] {
        unregister(p);
    }
    kp_expect_eq!(t, kp_kunit_target(300), 100);
}

fn enable_disable(t: &mut Test) {
    let target = crate::util::body(addr_of(kp_kunit_target as *const ()));
    let orig = text_word(target);
    let mut a = id_probe(1);
    let mut b = id_probe(2);
    kp_expect_eq!(t, register(&mut a), 0);
    kp_expect_eq!(t, register(&mut b), 0);
    log_take();
    kp_expect_eq!(t, disable(&mut a), 0);
    kp_expect!(t, a.flags & kp::KP_FLAG_DISABLED != 0);
    kp_kunit_target(3);
    kp_expect_eq!(t, log_take(), expected_log(&[2]));
    kp_expect!(t, text_word(target) != orig);
    kp_expect_eq!(t, disable(&mut b), 0);
    // No enabled probe left: the original instruction is back.
    kp_expect_eq!(t, text_word(target), orig);
    kp_kunit_target(3);
    kp_expect_eq!(t, log_take(), 0);
    kp_expect_eq!(t, enable(&mut a), 0);
    kp_expect!(t, text_word(target) != orig);
    kp_kunit_target(3);
    kp_expect_eq!(t, log_take(), expected_log(&[1]));
    kp_expect_eq!(t, enable(&mut b), 0);
    kp_kunit_target(3);
    kp_expect_eq!(t, log_take(), expected_log(&[1, 2]));
    unregister(&mut a);
    unregister(&mut b);
    kp_expect_eq!(t, text_word(target), orig);
    // Registered disabled: never armed until enabled.
    let mut c = id_probe(3);
    c.flags = kp::KP_FLAG_DISABLED;
    kp_expect_eq!(t, register(&mut c), 0);
    kp_expect_eq!(t, text_word(target), orig);
    kp_kunit_target(3);
    kp_expect_eq!(t, log_take(), 0);
    kp_expect_eq!(t, enable(&mut c), 0);
    kp_kunit_target(3);
    kp_expect_eq!(t, log_take(), expected_log(&[3]));
    unregister(&mut c);
}

// ---------------------------------------------------------------------------
// Concurrency: a worker calls the target while this thread changes probes.

static STOP: AtomicBool = AtomicBool::new(false);
/// Set once the probe is disabled for good: its handler must not run.
static MUST_NOT_RUN: AtomicBool = AtomicBool::new(false);
/// Calls made so far by the worker (live).
static LIVE_CALLS: AtomicU64 = AtomicU64::new(0);
static CALLS: AtomicU64 = AtomicU64::new(0);
static DONE: AtomicBool = AtomicBool::new(false);
static HITS_A: AtomicU64 = AtomicU64::new(0);
static HITS_B: AtomicU64 = AtomicU64::new(0);

/// Whether [`caller`] sleeps now and then.
static SLEEPY: AtomicBool = AtomicBool::new(false);

/// Calls the target until `STOP` or `limit` calls, counting them; checks the
/// return value every time. With `SLEEPY` it sleeps now and then, as real
/// tasks block: the engine's waits for every task to schedule voluntarily
/// (before it writes a jump, before it reuses a slot) then end while it
/// runs, and jumps are written and taken away under its calls. Without, no
/// such wait ends while it runs, and the engine must never need one to
/// (the storm: a wait with the registration lock held would stop the test,
/// which alone can stop the worker).
fn caller(limit: usize) {
    let mut n = 0u64;
    let sleepy = SLEEPY.load(Ordering::Relaxed);
    while !STOP.load(Ordering::Relaxed) && (n as usize) < limit {
        if sleepy && n % 10_000 == 9_999 {
            // SAFETY: process context.
            unsafe { bindings::msleep(1) };
        }
        if kp_kunit_target2(30) != 11 {
            HANDLER_ERRORS.fetch_add(1, Ordering::Relaxed);
        }
        n += 1;
        LIVE_CALLS.store(n, Ordering::Relaxed);
    }
    CALLS.store(n, Ordering::SeqCst);
    DONE.store(true, Ordering::SeqCst);
}

/// Counts hits of the always-registered probe A.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn count_a(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    HITS_A.fetch_add(1, Ordering::Relaxed);
    0
}

/// Counts hits of the churned probe B.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn count_b(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    HITS_B.fetch_add(1, Ordering::Relaxed);
    if MUST_NOT_RUN.load(Ordering::SeqCst) {
        HANDLER_ERRORS.fetch_add(1, Ordering::Relaxed);
    }
    0
}

fn reset_concurrency() {
    SLEEPY.store(false, Ordering::SeqCst);
    STOP.store(false, Ordering::SeqCst);
    MUST_NOT_RUN.store(false, Ordering::SeqCst);
    LIVE_CALLS.store(0, Ordering::SeqCst);
    DONE.store(false, Ordering::SeqCst);
    CALLS.store(0, Ordering::SeqCst);
    HITS_A.store(0, Ordering::SeqCst);
    HITS_B.store(0, Ordering::SeqCst);
    HANDLER_ERRORS.store(0, Ordering::SeqCst);
}

fn other_cpu() -> Option<u32> {
    Some((crate::util::this_cpu() + 1) % 2)
}

fn toggle_while_other_cpu_calls(t: &mut Test) {
    reset_concurrency();
    SLEEPY.store(true, Ordering::SeqCst);
    let mut b = probe_on(c"kp_kunit_target2");
    b.pre_handler = Some(count_b);
    let orig_word = crate::util::text_word(kp_kunit_target2 as *const () as usize);
    kp_expect_eq!(t, register(&mut b), 0);
    let Ok(w) = Worker::start(caller, usize::MAX, other_cpu()) else {
        kp_expect!(t, false, "cannot start the worker");
        return;
    };
    let waits = crate::kp::stats().opt_waits_done;
    for i in 0..400 {
        let r = if i % 2 == 0 {
            disable(&mut b)
        } else {
            enable(&mut b)
        };
        kp_expect_eq!(t, r, 0);
    }
    // Once disable returns, the handler never runs again, while the other
    // CPU keeps calling.
    kp_expect_eq!(t, disable(&mut b), 0);
    MUST_NOT_RUN.store(true, Ordering::SeqCst);
    let before = LIVE_CALLS.load(Ordering::SeqCst);
    while LIVE_CALLS.load(Ordering::SeqCst) < before + 10_000 {
        // SAFETY: process context.
        unsafe { bindings::msleep(1) };
    }
    MUST_NOT_RUN.store(false, Ordering::SeqCst);
    kp_expect_eq!(t, enable(&mut b), 0);
    STOP.store(true, Ordering::SeqCst);
    drop(w);
    kp_expect!(t, DONE.load(Ordering::SeqCst));
    let (calls, hits) = (CALLS.load(Ordering::SeqCst), HITS_B.load(Ordering::SeqCst));
    t.info(format_args!(
        "{} calls, {} hits while toggling; the engine's waits for tasks ended \
         meanwhile: {}",
        calls,
        hits,
        crate::kp::stats().opt_waits_done - waits
    ));
    kp_expect!(t, hits <= calls);
    kp_expect_eq!(t, b.nmissed, 0);
    // Ends enabled: one more call is one more hit. (Once in about fifteen
    // runs of an earlier session it was not: 675 != 676. The details below
    // say which way such a call went, should it happen again.)
    let word = crate::util::text_word(b.addr as usize);
    let steps = crate::kp::stats().step_traps;
    kp_kunit_target2(30);
    let after = HITS_B.load(Ordering::SeqCst);
    if after != hits + 1 {
        let s = crate::kp::stats();
        t.info(format_args!(
            "the call after enable: {} hits (want {}), nmissed {}, flags {:#x}, \
             {} hits in progress, {} oops resets; text at the probe {:#010x} \
             (unprobed {:#010x}), {} second traps during the call",
            after,
            hits + 1,
            b.nmissed,
            b.flags,
            s.hits_in_progress,
            s.oops_resets,
            word,
            orig_word,
            s.step_traps - steps
        ));
    }
    kp_expect_eq!(t, after, hits + 1);
    kp_expect_eq!(t, b.nmissed, 0, "after the last call");
    // And on each CPU in turn, 1,000 calls, 1,000 hits: a hit state left
    // busy on one CPU, or stale text seen by one, shows here every time.
    for cpu in 0..2u32 {
        let before = HITS_B.load(Ordering::SeqCst);
        STOP.store(false, Ordering::SeqCst);
        DONE.store(false, Ordering::SeqCst);
        let Ok(w) = Worker::start(caller, 1000, Some(cpu)) else {
            kp_expect!(t, false, "cannot start the worker on CPU {}", cpu);
            break;
        };
        while !DONE.load(Ordering::SeqCst) {
            // SAFETY: process context.
            unsafe { bindings::msleep(1) };
        }
        drop(w);
        kp_expect_eq!(t, CALLS.load(Ordering::SeqCst), 1000, "CPU {}", cpu);
        kp_expect_eq!(
            t,
            HITS_B.load(Ordering::SeqCst) - before,
            1000,
            "CPU {}",
            cpu
        );
        kp_expect_eq!(t, b.nmissed, 0, "CPU {}", cpu);
    }
    unregister(&mut b);
    kp_expect_eq!(t, HANDLER_ERRORS.load(Ordering::SeqCst), 0);
}

/// Calls in the storm: the issue asks for 10^6 hits.
const STORM_CALLS: u64 = 1_000_000;
/// Register, disable, enable and unregister operations in the storm, while
/// the other CPU calls (the reliability issue asks for 10^5).
const STORM_OPS: u64 = 100_000;

fn register_storm_exact_accounting(t: &mut Test) {
    reset_concurrency();
    // A stays registered the whole time: it must see every call.
    let mut a = probe_on(c"kp_kunit_target2");
    a.pre_handler = Some(count_a);
    kp_expect_eq!(t, register(&mut a), 0);
    let Ok(w) = Worker::start(caller, usize::MAX, other_cpu()) else {
        kp_expect!(t, false, "cannot start the worker");
        return;
    };
    // B joins and leaves the same point, and is toggled, until both counts
    // are reached.
    let mut ops = 0u64;
    while ops < STORM_OPS || LIVE_CALLS.load(Ordering::SeqCst) < STORM_CALLS {
        let mut b = probe_on(c"kp_kunit_target2");
        b.pre_handler = Some(count_b);
        kp_expect_eq!(t, register(&mut b), 0);
        kp_expect_eq!(t, disable(&mut b), 0);
        kp_expect_eq!(t, enable(&mut b), 0);
        unregister(&mut b);
        ops += 4;
    }
    STOP.store(true, Ordering::SeqCst);
    drop(w);
    kp_expect!(t, DONE.load(Ordering::SeqCst));
    let calls = CALLS.load(Ordering::SeqCst);
    let (ha, hb) = (HITS_A.load(Ordering::SeqCst), HITS_B.load(Ordering::SeqCst));
    t.info(format_args!(
        "storm: {} calls, {} operations on B, A {} hits + {} missed, B {} hits",
        calls, ops, ha, a.nmissed, hb
    ));
    kp_expect!(t, calls >= STORM_CALLS);
    kp_expect!(t, ops >= STORM_OPS);
    kp_expect_eq!(t, ha + a.nmissed as u64, calls);
    kp_expect_eq!(t, a.nmissed, 0);
    kp_expect!(t, hb <= calls);
    unregister(&mut a);
    kp_expect_eq!(t, HANDLER_ERRORS.load(Ordering::SeqCst), 0);
}

// ---------------------------------------------------------------------------

fn batch_third_of_five_fails(t: &mut Test) {
    let t1 = crate::util::body(addr_of(kp_kunit_target as *const ()));
    let t2 = crate::util::body(addr_of(kp_kunit_target2 as *const ()));
    let (o1, o2) = (text_word(t1), text_word(t2));
    let mut ps = [
        id_probe(1),
        probe_on(c"kp_kunit_target2"),
        probe_on(c"kp_kunit_no_such_function"),
        id_probe(2),
        probe_on(c"kp_kunit_recursed_target"),
    ];
    let mut kps: [*mut KpKprobe; 5] = [core::ptr::null_mut(); 5];
    for (k, p) in kps.iter_mut().zip(ps.iter_mut()) {
        *k = p;
    }
    // SAFETY: the structs outlive the call; nothing stays registered.
    let r = unsafe { kp::kp_register_kprobes(kps.as_mut_ptr(), 5) };
    kp_expect_eq!(t, r, ENOENT);
    for p in &ps {
        kp_expect!(t, crate::util::cleared(p));
    }
    kp_expect_eq!(t, text_word(t1), o1);
    kp_expect_eq!(t, text_word(t2), o2);
    log_take();
    kp_kunit_target(1);
    kp_expect_eq!(t, log_take(), 0);
}

/// Holds the probed module's function address for the call below.
static MODULE_FUNC: AtomicUsize = AtomicUsize::new(0);
static MODULE_HITS: AtomicUsize = AtomicUsize::new(0);

/// Counts hits on the target module's function.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn count_module(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    MODULE_HITS.fetch_add(1, Ordering::SeqCst);
    0
}

fn module_probe_then_rmmod(t: &mut Test) {
    MODULE_HITS.store(0, Ordering::SeqCst);
    let r = run(c"/bin/insmod", &[c"/lib/kp/kp_target.ko"]);
    kp_expect_eq!(t, r, 0);
    let mut p = probe_on(c"kp_target:kp_target_func");
    p.pre_handler = Some(count_module);
    kp_expect_eq!(t, register(&mut p), 0);
    MODULE_FUNC.store(p.addr as usize, Ordering::SeqCst);
    if p.is_registered() {
        // The function's own address (the probe may sit past its ENDBR or
        // `bti c`; kCFI checks the type hash just before the function).
        let at = kp::lookup_symbol(c"kp_target:kp_target_func").map_or(0, |s| s.addr);
        kp_expect_eq!(t, crate::util::body(at), p.addr as usize);
        // SAFETY: `kp_target_func` is `extern "C" fn(u64) -> u64`, and its
        // module stays loaded until the rmmod below.
        let f: extern "C" fn(u64) -> u64 = unsafe { core::mem::transmute(at) };
        kp_expect_eq!(t, f(20), 41);
        kp_expect_eq!(t, MODULE_HITS.load(Ordering::SeqCst), 1);
    }
    // The module goes away under the probe.
    kp_expect_eq!(t, run(c"/bin/rmmod", &[c"kp_target"]), 0);
    kp_expect!(t, p.flags & KP_FLAG_GONE != 0);
    // Unregistering a GONE probe works and touches no freed text.
    unregister(&mut p);
    kp_expect!(t, crate::util::cleared(&p));
    // The module name no longer resolves.
    let mut q = probe_on(c"kp_target:kp_target_func");
    kp_expect_eq!(t, register(&mut q), ENOENT);
}

kunit_suite!(
    kp_core,
    "kp_core",
    [
        test_kprobe,
        test_kprobes,
        test_kprobe_missed,
        test_kprobe_missed_in_trap,
        aggregate_three_every_order,
        aggregate_pre_handler_stops_the_rest,
        enable_disable,
        batch_third_of_five_fails,
        module_probe_then_rmmod,
        toggle_while_other_cpu_calls,
        register_storm_exact_accounting,
    ]
);
