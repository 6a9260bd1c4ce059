// SPDX-License-Identifier: GPL-2.0

//! `kp_kret`: return probes. The first two cases port the kretprobe cases
//! of the kernel's `lib/test_kprobes.c`; the rest cover per-instance data,
//! maxactive and nmissed, recursion, unregistering while a call is in
//! flight, volume, refusals and a kprobe next to a kretprobe.

use crate::kp::{self, KpKprobe, KpKretprobe, KpKretprobeInstance};
use crate::kunit::Test;
use crate::targets::{
    kp_kunit_gated, kp_kunit_recurse, kp_kunit_sleeper, kp_kunit_target, kp_kunit_target2,
    DIV_FACTOR, GATE,
};
use crate::util::{register, unregister, Worker, EINVAL};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use kernel::bindings;
use kernel::ffi::c_int;

fn kret_register(rp: &mut KpKretprobe) -> c_int {
    // SAFETY: every caller unregisters `rp` before it goes out of scope.
    unsafe { kp::kp_register_kretprobe(rp) }
}

fn kret_unregister(rp: &mut KpKretprobe) {
    // SAFETY: `rp` was registered (or not, which is allowed).
    unsafe { kp::kp_unregister_kretprobe(rp) }
}

fn kret_on(sym: &'static core::ffi::CStr) -> KpKretprobe {
    let mut rp = KpKretprobe::new();
    rp.kp.symbol_name = sym.as_ptr().cast();
    rp
}

fn retval(regs: &bindings::pt_regs) -> u64 {
    kp::regs::return_value(regs) as u64
}

static RAND1: AtomicU32 = AtomicU32::new(0);
static KRPH_VAL: AtomicU32 = AtomicU32::new(0);
static ERRORS: AtomicUsize = AtomicUsize::new(0);
static HANDLER_CALLS: AtomicUsize = AtomicUsize::new(0);
static ENTRY_CALLS: AtomicUsize = AtomicUsize::new(0);

fn div() -> u32 {
    DIV_FACTOR.load(Ordering::Relaxed)
}

fn reset() -> u32 {
    // SAFETY: plain call.
    let r = unsafe { bindings::get_random_u32() } | 1 << 20;
    RAND1.store(r, Ordering::SeqCst);
    KRPH_VAL.store(0, Ordering::SeqCst);
    ERRORS.store(0, Ordering::SeqCst);
    HANDLER_CALLS.store(0, Ordering::SeqCst);
    ENTRY_CALLS.store(0, Ordering::SeqCst);
    r
}

/// `return_handler` of test_kprobes.c.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn return_handler(
    _ri: *mut KpKretprobeInstance,
    regs: *mut bindings::pt_regs,
) -> c_int {
    // SAFETY: the engine passes the frame.
    let ret = retval(unsafe { &*regs });
    let rand1 = RAND1.load(Ordering::SeqCst);
    // Return handlers run with interrupts off, as the kernel tracks them
    // (arm64 with pseudo-NMIs: the priority mask, not only DAIF).
    if ret != (rand1 / div()) as u64
        || KRPH_VAL.load(Ordering::SeqCst) == 0
        || !crate::util::irqs_disabled()
    {
        ERRORS.fetch_add(1, Ordering::SeqCst);
    }
    KRPH_VAL.store(rand1, Ordering::SeqCst);
    0
}

/// `entry_handler` of test_kprobes.c.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn entry_handler(
    _ri: *mut KpKretprobeInstance,
    _regs: *mut bindings::pt_regs,
) -> c_int {
    if !crate::util::irqs_disabled() {
        ERRORS.fetch_add(1, Ordering::SeqCst);
    }
    KRPH_VAL.store(RAND1.load(Ordering::SeqCst) / div(), Ordering::SeqCst);
    0
}

/// `return_handler2`.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn return_handler2(
    _ri: *mut KpKretprobeInstance,
    regs: *mut bindings::pt_regs,
) -> c_int {
    // SAFETY: the engine passes the frame.
    let ret = retval(unsafe { &*regs });
    let rand1 = RAND1.load(Ordering::SeqCst);
    if ret != (rand1 / div() + 1) as u64 || KRPH_VAL.load(Ordering::SeqCst) == 0 {
        ERRORS.fetch_add(1, Ordering::SeqCst);
    }
    KRPH_VAL.store(rand1, Ordering::SeqCst);
    0
}

fn test_kretprobe(t: &mut Test) {
    let rand1 = reset();
    let mut rp = kret_on(c"kp_kunit_target");
    rp.handler = Some(return_handler);
    rp.entry_handler = Some(entry_handler);
    kp_expect_eq!(t, kret_register(&mut rp), 0);
    kp_expect_eq!(t, kp_kunit_target(rand1), rand1 / div());
    kret_unregister(&mut rp);
    kp_expect_eq!(t, KRPH_VAL.load(Ordering::SeqCst), rand1);
    kp_expect_eq!(t, ERRORS.load(Ordering::SeqCst), 0);
    kp_expect_eq!(t, rp.nmissed, 0);
}

/// The two kretprobes of `test_kretprobes` (test_kprobes.c): on
/// `kp_kunit_target` and `kp_kunit_target2`, with their handlers.
fn test_pair() -> (KpKretprobe, KpKretprobe) {
    let mut rp = kret_on(c"kp_kunit_target");
    rp.handler = Some(return_handler);
    rp.entry_handler = Some(entry_handler);
    let mut rp2 = kret_on(c"kp_kunit_target2");
    rp2.handler = Some(return_handler2);
    rp2.entry_handler = Some(entry_handler);
    (rp, rp2)
}

/// Calls the two targets of [`test_pair`] once each; both return handlers
/// must have run (each leaves `rand1` in `KRPH_VAL`).
fn call_pair(t: &Test, rand1: u32) {
    KRPH_VAL.store(0, Ordering::SeqCst);
    kp_kunit_target(rand1);
    kp_expect_eq!(t, KRPH_VAL.load(Ordering::SeqCst), rand1);
    KRPH_VAL.store(0, Ordering::SeqCst);
    kp_expect_eq!(t, kp_kunit_target2(rand1), rand1 / div() + 1);
    kp_expect_eq!(t, KRPH_VAL.load(Ordering::SeqCst), rand1);
    // The return path masked interrupts and put them back: lockdep (where
    // it follows them) must still agree with the CPU.
    kp_expect!(t, crate::util::lockdep_irqs_agree(), "after the returns");
}

fn test_kretprobes(t: &mut Test) {
    let rand1 = reset();
    let (mut rp, mut rp2) = test_pair();
    kp_expect_eq!(t, kret_register(&mut rp), 0);
    kp_expect_eq!(t, kret_register(&mut rp2), 0);
    call_pair(t, rand1);
    kret_unregister(&mut rp);
    kret_unregister(&mut rp2);
    kp_expect_eq!(t, ERRORS.load(Ordering::SeqCst), 0);
}

/// `kp_register_kretprobes()`: all or nothing (a bad third one leaves none
/// of the first two registered, nothing fires, the engine holds no probe
/// more than before); a good batch fires each once per call; the batch
/// unregister stops all of them.
fn kret_batch(t: &mut Test) {
    let base = crate::kp::stats();
    let rand1 = reset();
    let (mut rp, mut rp2) = test_pair();
    let mut bad = kret_on(c"kp_no_such_function_anywhere");
    bad.handler = Some(return_handler);
    {
        let mut all: [*mut KpKretprobe; 3] = [&mut rp, &mut rp2, &mut bad];
        // SAFETY: three valid kretprobes, unregistered below if registered.
        let r = unsafe { kp::kp_register_kretprobes(all.as_mut_ptr(), 3) };
        kp_expect_eq!(t, r, crate::util::ENOENT);
    }
    kp_expect!(t, rp.kp_private.is_null() && rp2.kp_private.is_null());
    kp_expect_eq!(t, crate::kp::stats().probes, base.probes);
    kp_kunit_target(rand1);
    kp_kunit_target2(rand1);
    kp_expect_eq!(
        t,
        KRPH_VAL.load(Ordering::SeqCst),
        0,
        "a rolled-back kretprobe fired"
    );
    // Bad counts and a null array.
    // SAFETY: refused before any pointer is read.
    unsafe {
        kp_expect_eq!(
            t,
            kp::kp_register_kretprobes(core::ptr::null_mut(), 2),
            EINVAL
        );
        let mut one: [*mut KpKretprobe; 1] = [&mut rp];
        kp_expect_eq!(t, kp::kp_register_kretprobes(one.as_mut_ptr(), 0), EINVAL);
        kp_expect_eq!(t, kp::kp_register_kretprobes(one.as_mut_ptr(), -1), EINVAL);
        kp::kp_unregister_kretprobes(core::ptr::null_mut(), 5);
    }
    // The good two, as a batch, in fresh structs (as with the kernel's
    // kprobes, a struct once registered by symbol has its `addr` filled in,
    // and symbol plus address is -EINVAL).
    let (mut rp, mut rp2) = test_pair();
    let mut two: [*mut KpKretprobe; 2] = [&mut rp, &mut rp2];
    // SAFETY: valid kretprobes, unregistered below.
    let r = unsafe { kp::kp_register_kretprobes(two.as_mut_ptr(), 2) };
    kp_expect_eq!(t, r, 0);
    kp_expect_eq!(t, crate::kp::stats().probes, base.probes + 2);
    call_pair(t, rand1);
    // SAFETY: registered above; the same kretprobe twice in a batch is
    // unregistered once; a second unregister of the batch is a no-op.
    unsafe {
        let mut three: [*mut KpKretprobe; 3] = [two[0], two[1], two[0]];
        kp::kp_unregister_kretprobes(three.as_mut_ptr(), 3);
        kp::kp_unregister_kretprobes(two.as_mut_ptr(), 2);
    }
    kp_expect_eq!(t, crate::kp::stats().probes, base.probes);
    KRPH_VAL.store(0, Ordering::SeqCst);
    kp_kunit_target(rand1);
    kp_kunit_target2(rand1);
    kp_expect_eq!(
        t,
        KRPH_VAL.load(Ordering::SeqCst),
        0,
        "fired after the batch unregister"
    );
    kp_expect_eq!(t, ERRORS.load(Ordering::SeqCst), 0);
    kp_expect_eq!(t, rp.nmissed + rp2.nmissed, 0);
}

// ---------------------------------------------------------------------------

/// Per-instance data: the entry time and the argument.
#[repr(C)]
struct Timing {
    start_ns: i64,
    arg: u64,
}

static LAST_DELTA_NS: AtomicU64 = AtomicU64::new(0);
static LAST_RET: AtomicU64 = AtomicU64::new(0);
static RET_ADDR_OK: AtomicBool = AtomicBool::new(false);

/// Stores the entry time and argument in the instance's data.
///
/// # Safety
///
/// Called by the engine with an instance of `size_of::<Timing>()` data.
unsafe extern "C" fn timing_entry(
    ri: *mut KpKretprobeInstance,
    regs: *mut bindings::pt_regs,
) -> c_int {
    // SAFETY: the engine passes a live instance and frame.
    let (ri, regs) = unsafe { (&mut *ri, &*regs) };
    let d = ri.data().cast::<Timing>();
    // SAFETY: `data` holds a `Timing` (data_size), 8-byte aligned.
    unsafe {
        (*d).start_ns = bindings::ktime_get_mono_fast_ns() as i64;
        (*d).arg = kp::regs::arg(regs, 0).unwrap_or(0) as u64;
    }
    ENTRY_CALLS.fetch_add(1, Ordering::SeqCst);
    0
}

/// Computes the call's duration and checks the arguments and addresses.
///
/// # Safety
///
/// As [`timing_entry`].
unsafe extern "C" fn timing_return(
    ri: *mut KpKretprobeInstance,
    regs: *mut bindings::pt_regs,
) -> c_int {
    // SAFETY: the engine passes a live instance and frame.
    let (ri, regs) = unsafe { (&mut *ri, &*regs) };
    let d = ri.data().cast::<Timing>();
    // SAFETY: as in `timing_entry`.
    let (start, arg) = unsafe { ((*d).start_ns, (*d).arg) };
    // SAFETY: plain call.
    let now = unsafe { bindings::ktime_get_mono_fast_ns() as i64 };
    LAST_DELTA_NS.store((now - start) as u64, Ordering::SeqCst);
    LAST_RET.store(retval(regs), Ordering::SeqCst);
    if retval(regs) != arg * 2 {
        ERRORS.fetch_add(1, Ordering::SeqCst);
    }
    // The handler sees the real return address, in this module's text.
    let sym = crate::util::Sym::of(ri.ret_addr);
    RET_ADDR_OK.store(
        kp::regs::ip(regs) == ri.ret_addr && sym.bytes().ends_with(b"[kprobes_kunit]"),
        Ordering::SeqCst,
    );
    HANDLER_CALLS.fetch_add(1, Ordering::SeqCst);
    0
}

fn kret_data_duration_return_address(t: &mut Test) {
    reset();
    let mut rp = kret_on(c"kp_kunit_sleeper");
    rp.entry_handler = Some(timing_entry);
    rp.handler = Some(timing_return);
    rp.data_size = core::mem::size_of::<Timing>();
    kp_expect_eq!(t, kret_register(&mut rp), 0);
    kp_expect_eq!(t, kp_kunit_sleeper(20), 40);
    kret_unregister(&mut rp);
    let delta = LAST_DELTA_NS.load(Ordering::SeqCst);
    t.info(format_args!("kp_kunit_sleeper(20) took {} ns", delta));
    kp_expect!(t, delta >= 20_000_000, "delta {} ns", delta);
    kp_expect_eq!(t, LAST_RET.load(Ordering::SeqCst), 40);
    kp_expect!(t, RET_ADDR_OK.load(Ordering::SeqCst));
    kp_expect_eq!(t, HANDLER_CALLS.load(Ordering::SeqCst), 1);
    kp_expect_eq!(t, ERRORS.load(Ordering::SeqCst), 0);
}

/// Counts handler calls; checks the return value (arg * 2).
///
/// # Safety
///
/// As [`timing_entry`].
unsafe extern "C" fn count_return(
    ri: *mut KpKretprobeInstance,
    regs: *mut bindings::pt_regs,
) -> c_int {
    // SAFETY: as in `timing_return`.
    unsafe { timing_return(ri, regs) }
}

static CALLS_DONE: AtomicUsize = AtomicUsize::new(0);

fn sleeper_calls(n: usize) {
    for _ in 0..n {
        if kp_kunit_sleeper(2) != 4 {
            ERRORS.fetch_add(1, Ordering::SeqCst);
        }
    }
    CALLS_DONE.fetch_add(n, Ordering::SeqCst);
}

fn kret_maxactive_one_two_cpus(t: &mut Test) {
    reset();
    CALLS_DONE.store(0, Ordering::SeqCst);
    let mut rp = kret_on(c"kp_kunit_sleeper");
    rp.entry_handler = Some(timing_entry);
    rp.handler = Some(count_return);
    rp.data_size = core::mem::size_of::<Timing>();
    rp.maxactive = 1;
    kp_expect_eq!(t, kret_register(&mut rp), 0);
    let before = crate::kp::stats();
    let w = Worker::start(sleeper_calls, 50, Some((crate::util::this_cpu() + 1) % 2));
    sleeper_calls(50);
    drop(w);
    kret_unregister(&mut rp);
    let after = crate::kp::stats();
    let (h, m) = (HANDLER_CALLS.load(Ordering::SeqCst), rp.nmissed as usize);
    // Each miss under its cause: no free instance (nothing else here).
    kp_expect_eq!(
        t,
        after.missed_kret_no_instance - before.missed_kret_no_instance,
        m as _
    );
    kp_expect_eq!(t, after.missed_kret_nested, before.missed_kret_nested);
    kp_expect_eq!(t, after.missed_kret_unloading, before.missed_kret_unloading);
    t.info(format_args!(
        "maxactive 1: {} tracked, {} missed of 100",
        h, m
    ));
    kp_expect_eq!(t, CALLS_DONE.load(Ordering::SeqCst), 100);
    kp_expect!(t, m > 0);
    kp_expect_eq!(t, h + m, 100);
    kp_expect_eq!(t, ENTRY_CALLS.load(Ordering::SeqCst), h);
    kp_expect_eq!(t, ERRORS.load(Ordering::SeqCst), 0);
}

static DEPTHS: AtomicU64 = AtomicU64::new(0);

/// Records the return values of the recursion, innermost first.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn recurse_return(
    _ri: *mut KpKretprobeInstance,
    regs: *mut bindings::pt_regs,
) -> c_int {
    // SAFETY: the engine passes the frame.
    let v = retval(unsafe { &*regs });
    let _ = DEPTHS.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |d| {
        Some(d.wrapping_mul(64).wrapping_add(v))
    });
    HANDLER_CALLS.fetch_add(1, Ordering::SeqCst);
    0
}

fn kret_recursion_depth_10(t: &mut Test) {
    reset();
    DEPTHS.store(0, Ordering::SeqCst);
    let mut rp = kret_on(c"kp_kunit_recurse");
    rp.handler = Some(recurse_return);
    rp.maxactive = 16;
    kp_expect_eq!(t, kret_register(&mut rp), 0);
    kp_expect_eq!(t, kp_kunit_recurse(10), 55);
    kret_unregister(&mut rp);
    kp_expect_eq!(t, HANDLER_CALLS.load(Ordering::SeqCst), 11);
    kp_expect_eq!(t, rp.nmissed, 0);
    // Returns come innermost first: 0, 1, 3, 6, ..., 55 (mod 64 per level).
    let mut want = 0u64;
    for n in 0..=10u64 {
        want = want.wrapping_mul(64).wrapping_add(n * (n + 1) / 2);
    }
    kp_expect_eq!(t, DEPTHS.load(Ordering::SeqCst), want);
}

static GATED_RESULT: AtomicU32 = AtomicU32::new(0);

fn gated_call(v: usize) {
    GATED_RESULT.store(kp_kunit_gated(v as u32), Ordering::SeqCst);
}

/// Counts entries.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn count_entry(
    _ri: *mut KpKretprobeInstance,
    _r: *mut bindings::pt_regs,
) -> c_int {
    ENTRY_CALLS.fetch_add(1, Ordering::SeqCst);
    0
}

/// Counts returns.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn count_ret(_ri: *mut KpKretprobeInstance, _r: *mut bindings::pt_regs) -> c_int {
    HANDLER_CALLS.fetch_add(1, Ordering::SeqCst);
    0
}

fn kret_unregister_while_inside(t: &mut Test) {
    reset();
    GATE.store(false, Ordering::SeqCst);
    GATED_RESULT.store(0, Ordering::SeqCst);
    let mut rp = kret_on(c"kp_kunit_gated");
    rp.entry_handler = Some(count_entry);
    rp.handler = Some(count_ret);
    kp_expect_eq!(t, kret_register(&mut rp), 0);
    let w = Worker::start(gated_call, 41, None);
    let mut waited = 0;
    while ENTRY_CALLS.load(Ordering::SeqCst) == 0 && waited < 5000 {
        // SAFETY: process context.
        unsafe { bindings::msleep(1) };
        waited += 1;
    }
    kp_expect_eq!(t, ENTRY_CALLS.load(Ordering::SeqCst), 1);
    // The worker sleeps inside the function with its return hijacked.
    kret_unregister(&mut rp);
    GATE.store(true, Ordering::SeqCst);
    drop(w);
    // It came back to its caller with the right value; no handler ran after
    // unregister.
    kp_expect_eq!(t, GATED_RESULT.load(Ordering::SeqCst), 42);
    kp_expect_eq!(t, HANDLER_CALLS.load(Ordering::SeqCst), 0);
}

fn kret_1e5_calls_exact(t: &mut Test) {
    reset();
    let mut rp = kret_on(c"kp_kunit_target2");
    rp.entry_handler = Some(count_entry);
    rp.handler = Some(count_ret);
    kp_expect_eq!(t, kret_register(&mut rp), 0);
    let mut ok = true;
    for i in 0..100_000u32 {
        ok &= kp_kunit_target2(i) == i / div() + 1;
    }
    kret_unregister(&mut rp);
    kp_expect!(t, ok);
    kp_expect_eq!(t, ENTRY_CALLS.load(Ordering::SeqCst), 100_000);
    kp_expect_eq!(t, HANDLER_CALLS.load(Ordering::SeqCst), 100_000);
    kp_expect_eq!(t, rp.nmissed, 0);
}

fn kret_refusals(t: &mut Test) {
    let mut rp = kret_on(c"kp_kunit_target");
    rp.kp.offset = 4;
    kp_expect_eq!(t, kret_register(&mut rp), EINVAL);
    let mut rp = kret_on(c"__switch_to");
    kp_expect_eq!(t, kret_register(&mut rp), EINVAL);
    let mut rp = kret_on(c"do_exit");
    kp_expect_eq!(t, kret_register(&mut rp), EINVAL);
    kp_expect!(t, rp.kp_private.is_null() && crate::util::cleared(&rp.kp));
}

static KPROBE_HITS: AtomicUsize = AtomicUsize::new(0);

/// Counts kprobe hits.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn kprobe_count(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    KPROBE_HITS.fetch_add(1, Ordering::SeqCst);
    0
}

fn kret_with_kprobe_on_same_function(t: &mut Test) {
    reset();
    KPROBE_HITS.store(0, Ordering::SeqCst);
    let mut rp = kret_on(c"kp_kunit_target");
    rp.entry_handler = Some(count_entry);
    rp.handler = Some(count_ret);
    let mut kp = KpKprobe::new();
    kp.symbol_name = c"kp_kunit_target".as_ptr().cast();
    kp.pre_handler = Some(kprobe_count);
    kp_expect_eq!(t, kret_register(&mut rp), 0);
    kp_expect_eq!(t, register(&mut kp), 0);
    for i in 0..10 {
        kp_expect_eq!(t, kp_kunit_target(i * 3), i);
    }
    unregister(&mut kp);
    kret_unregister(&mut rp);
    kp_expect_eq!(t, KPROBE_HITS.load(Ordering::SeqCst), 10);
    kp_expect_eq!(t, ENTRY_CALLS.load(Ordering::SeqCst), 10);
    kp_expect_eq!(t, HANDLER_CALLS.load(Ordering::SeqCst), 10);
}

extern "C" {
    fn stack_trace_save_tsk(
        task: *mut core::ffi::c_void,
        store: *mut usize,
        size: kernel::ffi::c_uint,
        skipnr: kernel::ffi::c_uint,
    ) -> kernel::ffi::c_uint;
}

const TRACE_LEN: usize = crate::util::TRACE_LEN;
static TRACE: crate::util::Trace = crate::util::Trace::new();

/// Takes a stack trace inside the return handler.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn trace_return(
    _ri: *mut KpKretprobeInstance,
    _r: *mut bindings::pt_regs,
) -> c_int {
    TRACE.take();
    0
}

fn kret_stack_traces(t: &mut Test) {
    // Inside a return handler.
    reset();
    TRACE.clear();
    let mut rp = kret_on(c"kp_kunit_target2");
    rp.handler = Some(trace_return);
    kp_expect_eq!(t, kret_register(&mut rp), 0);
    kp_kunit_target2(9);
    kret_unregister(&mut rp);
    let (trace, n) = TRACE.get();
    // The trace walks out through the engine's return path.
    let through = crate::util::show_trace(
        t,
        "in a kretprobe handler",
        trace.get(..n).unwrap_or(&[]),
        "kret_return",
    );
    kp_expect!(t, through);
    // And on to the probed function's real caller, this test: the
    // trampoline's return address is the real one before the handler runs,
    // and its unwind data (x86_64 `trampolines.S`: ORC walks through) or
    // frame record (arm64) lets the unwinder through.
    let to_caller = crate::util::trace_has(trace.get(..n).unwrap_or(&[]), "kret_stack_traces");
    t.info(format_args!(
        "the trace reaches the real caller: {}",
        to_caller
    ));
    kp_expect!(t, to_caller);

    // Of a task whose return is hijacked, taken from elsewhere.
    reset();
    GATE.store(false, Ordering::SeqCst);
    let mut rp = kret_on(c"kp_kunit_gated");
    rp.entry_handler = Some(count_entry);
    kp_expect_eq!(t, kret_register(&mut rp), 0);
    let Ok(w) = Worker::start(gated_call, 1, None) else {
        kp_expect!(t, false, "cannot start the worker");
        return;
    };
    while ENTRY_CALLS.load(Ordering::SeqCst) == 0 {
        // SAFETY: process context.
        unsafe { bindings::msleep(1) };
    }
    // SAFETY: let the worker reach its sleep.
    unsafe { bindings::msleep(20) };
    let mut buf = [0usize; TRACE_LEN];
    let mut n = 0;
    // A task running on another CPU cannot be walked (the trace is empty):
    // retry until the worker is caught asleep inside the function.
    for _ in 0..200 {
        // SAFETY: the worker's task lives until `w` is dropped below; it
        // walks the worker's stack, not ours.
        n = unsafe { stack_trace_save_tsk(w.task().cast(), buf.as_mut_ptr(), TRACE_LEN as _, 0) }
            as usize;
        if n > 0 {
            break;
        }
        // SAFETY: process context.
        unsafe { bindings::msleep(1) };
    }
    let shown = buf.get(..n).unwrap_or(&[]);
    let shows_stub = crate::util::show_trace(
        t,
        "of a task with a hijacked return",
        shown,
        "kp_insn_slots",
    );
    t.info(format_args!(
        "the hijacked return shows as a stub address: {}",
        shows_stub
    ));
    kp_expect!(t, n > 0);
    GATE.store(true, Ordering::SeqCst);
    drop(w);
    kret_unregister(&mut rp);
    kp_expect_eq!(t, GATED_RESULT.load(Ordering::SeqCst), 2);
}

extern "C" {
    fn kp_test_exits(code: c_int) -> c_int;
    fn kp_test_run_exiting_thread() -> c_int;
}

/// A task exits (kthread_exit()) inside the probed function: its return
/// never comes, and the engine must take the instance back when the task
/// dies (maxactive 1: the next call from this task is tracked, not
/// missed), run no handler for it, and free everything at unregister.
fn kret_task_exits_inside(t: &mut Test) {
    // More per-call data than a shadow-stack record holds: the pool serves
    // this C function (an ftrace site) as it serves every other entry.
    task_exits_inside(t, 256);
}

/// The same on the function graph tracer's shadow stack: the exiting
/// task's records go with its shadow stack, nothing to give back.
fn kret_shadow_task_exits_inside(t: &mut Test) {
    if shadow_available(t) {
        task_exits_inside(t, 0);
    }
}

fn task_exits_inside(t: &mut Test, data_size: usize) {
    let pool = data_size > 0;
    reset();
    let base = kp::stats();
    let mut rp = kret_on(c"kp_test_exits");
    rp.entry_handler = Some(count_entry);
    rp.handler = Some(count_ret);
    rp.maxactive = 1;
    rp.data_size = data_size;
    kp_expect_eq!(t, kret_register(&mut rp), 0);
    // SAFETY: a C helper of this module.
    kp_expect_eq!(t, unsafe { kp_test_run_exiting_thread() }, 0);
    kp_expect_eq!(t, ENTRY_CALLS.load(Ordering::SeqCst), 1);
    kp_expect_eq!(
        t,
        HANDLER_CALLS.load(Ordering::SeqCst),
        0,
        "a handler for a call that never returned"
    );
    // SAFETY: a C function; 0 returns normally.
    kp_expect_eq!(t, unsafe { kp_test_exits(0) }, 0);
    kp_expect_eq!(t, ENTRY_CALLS.load(Ordering::SeqCst), 2);
    kp_expect_eq!(t, HANDLER_CALLS.load(Ordering::SeqCst), 1);
    kp_expect_eq!(
        t,
        rp.nmissed,
        0,
        "the exited task's instance was not taken back"
    );
    kret_unregister(&mut rp);
    let now = kp::stats();
    kp_expect_eq!(t, now.kretprobe_instances, base.kretprobe_instances);
    kp_expect_eq!(t, now.probes, base.probes);
    // Counted as given back at exit, not as missed.
    kp_expect_eq!(
        t,
        now.kretprobe_task_exits - base.kretprobe_task_exits,
        pool as usize
    );
    kp_expect_eq!(
        t,
        now.kretprobe_shadow_returns - base.kretprobe_shadow_returns,
        !pool as usize
    );
    kp_expect_eq!(t, now.missed_kret_no_instance, base.missed_kret_no_instance);
}

/// Unregistering while a call sleeps inside, on the shadow stack: the call
/// returns to its caller with its value, and no handler runs for it.
fn kret_shadow_unregister_while_inside(t: &mut Test) {
    if !shadow_available(t) {
        return;
    }
    reset();
    SHADOW_SHORT.store(false, Ordering::SeqCst);
    SHADOW_GATED_RESULT.store(0, Ordering::SeqCst);
    let base = kp::stats();
    let mut rp = shadow_kretprobe(c"kp_test_graph_gated");
    kp_expect_eq!(t, kret_register(&mut rp), 0);
    // SAFETY: a C helper: starts no thread with n = 0, closes the gate.
    unsafe { kp_test_graph_sleepers_start(0) };
    let Ok(w) = Worker::start(shadow_gated_caller, 41, None) else {
        kp_expect!(t, false, "cannot start the worker");
        return;
    };
    while ENTRY_CALLS.load(Ordering::SeqCst) == 0 {
        // SAFETY: process context.
        unsafe { bindings::msleep(1) };
    }
    kret_unregister(&mut rp);
    // SAFETY: a C helper of this module.
    unsafe { kp_test_graph_sleepers_release() };
    drop(w);
    let now = kp::stats();
    kp_expect_eq!(t, SHADOW_GATED_RESULT.load(Ordering::SeqCst), 42);
    kp_expect_eq!(t, HANDLER_CALLS.load(Ordering::SeqCst), 0);
    kp_expect_eq!(
        t,
        now.kretprobe_shadow_returns,
        base.kretprobe_shadow_returns
    );
    kp_expect_eq!(t, now.kretprobe_shadow_probes, base.kretprobe_shadow_probes);
    kp_expect_eq!(t, now.kretprobe_instances, base.kretprobe_instances);
}

extern "C" {
    fn kp_test_graph_short(v: c_int) -> c_int;
    fn kp_test_graph_gated(v: c_int) -> c_int;
    fn kp_test_graph_sleepers_start(n: c_int) -> c_int;
    fn kp_test_graph_sleepers_release();
    fn kp_test_graph_sleepers_wait(n: c_int, bad: *mut c_int) -> c_int;
}

/// Per-call data on the shadow stack: the argument, and a canary the
/// return handler checks (the record is this call's, untouched).
#[repr(C)]
struct ShadowData {
    arg: u64,
    canary: u64,
}

const CANARY: u64 = 0x5eed_f00d_dead_beef;

/// Stores the argument (and the canary mixed with it).
///
/// # Safety
///
/// Called by the engine with `size_of::<ShadowData>()` data.
unsafe extern "C" fn shadow_entry(
    ri: *mut KpKretprobeInstance,
    regs: *mut bindings::pt_regs,
) -> c_int {
    // SAFETY: the engine passes a live instance and frame.
    let (ri, regs) = unsafe { (&mut *ri, &*regs) };
    let d = ri.data().cast::<ShadowData>();
    let arg = kp::regs::arg(regs, 0).unwrap_or(0) as u64 & 0xffff_ffff;
    // SAFETY: `data` holds a `ShadowData`, 8-byte aligned.
    unsafe {
        (*d).arg = arg;
        (*d).canary = CANARY ^ arg;
    }
    if !crate::util::irqs_disabled() {
        ERRORS.fetch_add(1, Ordering::SeqCst);
    }
    ENTRY_CALLS.fetch_add(1, Ordering::SeqCst);
    0
}

/// Which function `shadow_return` checks: the return value it expects of
/// argument `arg`.
static SHADOW_SHORT: AtomicBool = AtomicBool::new(true);

/// Checks the return value against the saved argument, the canary, the
/// registers valid at return, and counts.
///
/// # Safety
///
/// As [`shadow_entry`].
unsafe extern "C" fn shadow_return(
    ri: *mut KpKretprobeInstance,
    regs: *mut bindings::pt_regs,
) -> c_int {
    // SAFETY: the engine passes a live instance and frame.
    let (ri, regs) = unsafe { (&mut *ri, &*regs) };
    let d = ri.data().cast::<ShadowData>();
    // SAFETY: as in `shadow_entry`.
    let (arg, canary) = unsafe { ((*d).arg, (*d).canary) };
    let want = if SHADOW_SHORT.load(Ordering::Relaxed) {
        arg * 3 + 1
    } else {
        arg + 1
    };
    let ok = canary == CANARY ^ arg
        && retval(regs) & 0xffff_ffff == want
        && kp::regs::ip(regs) == ri.ret_addr
        && !kp::regs::user_mode(regs)
        && crate::util::irqs_disabled()
        && crate::util::Sym::of(ri.ret_addr)
            .bytes()
            .ends_with(b"[kprobes_kunit]");
    if !ok {
        ERRORS.fetch_add(1, Ordering::SeqCst);
    }
    HANDLER_CALLS.fetch_add(1, Ordering::SeqCst);
    0
}

fn shadow_kretprobe(sym: &'static core::ffi::CStr) -> KpKretprobe {
    let mut rp = kret_on(sym);
    rp.entry_handler = Some(shadow_entry);
    rp.handler = Some(shadow_return);
    rp.data_size = core::mem::size_of::<ShadowData>();
    // One instance: every call beyond one at a time must come from the
    // shadow stack, not the pool.
    rp.maxactive = 1;
    rp
}

/// Whether this kernel serves return probes at ftrace sites through the
/// function graph tracer's shadow stack (a kretprobe on an ftrace site
/// shows up in `kretprobe_shadow_probes`).
fn shadow_available(t: &mut Test) -> bool {
    let mut rp = shadow_kretprobe(c"kp_test_graph_short");
    if kret_register(&mut rp) != 0 {
        return false;
    }
    let on = kp::stats().kretprobe_shadow_probes > 0;
    kret_unregister(&mut rp);
    if !on {
        t.skip("no return probes on the shadow stack (kernel without FUNCTION_GRAPH_RETVAL)");
    }
    on
}

/// 1,000 kthreads asleep inside one return-probed function at once, with
/// a pool of one instance: every return is tracked from the shadow stack,
/// none missed, one handler call per call with its own data.
fn kret_shadow_1000_sleepers(t: &mut Test) {
    if !shadow_available(t) {
        return;
    }
    reset();
    SHADOW_SHORT.store(false, Ordering::SeqCst);
    let base = kp::stats();
    let mut rp = shadow_kretprobe(c"kp_test_graph_gated");
    kp_expect_eq!(t, kret_register(&mut rp), 0);
    const N: usize = 1000;
    // SAFETY: a C helper of this module.
    let started = unsafe { kp_test_graph_sleepers_start(N as c_int) } as usize;
    kp_expect_eq!(t, started, N);
    let mut waited = 0;
    while ENTRY_CALLS.load(Ordering::SeqCst) < started && waited < 120_000 {
        // SAFETY: process context.
        unsafe { bindings::msleep(10) };
        waited += 10;
    }
    let inside = kp::stats();
    t.info(format_args!(
        "{} tasks asleep inside kp_test_graph_gated at once after {} ms",
        ENTRY_CALLS.load(Ordering::SeqCst),
        waited
    ));
    kp_expect_eq!(t, ENTRY_CALLS.load(Ordering::SeqCst), N);
    // None of them took the one pool instance's place... or at most it.
    kp_expect!(t, inside.kretprobe_inflight - base.kretprobe_inflight <= 1);
    kp_expect_eq!(t, HANDLER_CALLS.load(Ordering::SeqCst), 0);
    // SAFETY: a C helper of this module.
    unsafe { kp_test_graph_sleepers_release() };
    let mut bad = 0;
    // SAFETY: as above.
    let done = unsafe { kp_test_graph_sleepers_wait(started as c_int, &mut bad) } as usize;
    kret_unregister(&mut rp);
    let after = kp::stats();
    kp_expect_eq!(t, done, N);
    kp_expect_eq!(t, bad, 0, "a sleeper saw a wrong return value");
    kp_expect_eq!(t, HANDLER_CALLS.load(Ordering::SeqCst), N);
    kp_expect_eq!(t, rp.nmissed, 0);
    kp_expect_eq!(t, ERRORS.load(Ordering::SeqCst), 0);
    kp_expect!(
        t,
        after.kretprobe_shadow_returns - base.kretprobe_shadow_returns >= N - 1
    );
    kp_expect_eq!(
        t,
        after.missed_kret_no_instance,
        base.missed_kret_no_instance
    );
    kp_expect_eq!(
        t,
        after.kretprobe_shadow_probes,
        base.kretprobe_shadow_probes
    );
    kp_expect_eq!(t, after.kretprobe_instances, base.kretprobe_instances);
}

fn shadow_short_calls(n: usize) {
    for i in 0..n {
        let v = (i as c_int) ^ 0x5a5a;
        // SAFETY: a C function of this module.
        if unsafe { kp_test_graph_short(v) } != v * 3 + 1 {
            ERRORS.fetch_add(1, Ordering::SeqCst);
        }
    }
    CALLS_DONE.fetch_add(n, Ordering::SeqCst);
}

/// 10,000 short calls spread over every CPU (one worker per CPU and this
/// task), a pool of one: exactly one entry and one return handler call per
/// call, none missed.
fn kret_shadow_10000_calls_all_cpus(t: &mut Test) {
    if !shadow_available(t) {
        return;
    }
    reset();
    SHADOW_SHORT.store(true, Ordering::SeqCst);
    CALLS_DONE.store(0, Ordering::SeqCst);
    let base = kp::stats();
    let mut rp = shadow_kretprobe(c"kp_test_graph_short");
    kp_expect_eq!(t, kret_register(&mut rp), 0);
    // SAFETY: reads the number of possible CPU ids.
    let cpus = unsafe { bindings::nr_cpu_ids } as usize;
    let per = 10_000 / (cpus + 1);
    let mut workers = kernel::prelude::KVec::new();
    for c in 0..cpus {
        if let Ok(w) = Worker::start(shadow_short_calls, per, Some(c as u32)) {
            let _ = workers.push(w, kernel::prelude::GFP_KERNEL);
        }
    }
    shadow_short_calls(10_000 - per * workers.len());
    drop(workers);
    kret_unregister(&mut rp);
    let after = kp::stats();
    kp_expect_eq!(t, CALLS_DONE.load(Ordering::SeqCst), 10_000);
    kp_expect_eq!(t, ENTRY_CALLS.load(Ordering::SeqCst), 10_000);
    kp_expect_eq!(t, HANDLER_CALLS.load(Ordering::SeqCst), 10_000);
    kp_expect_eq!(t, rp.nmissed, 0);
    kp_expect_eq!(t, ERRORS.load(Ordering::SeqCst), 0);
    let shadow = after.kretprobe_shadow_returns - base.kretprobe_shadow_returns;
    t.info(format_args!(
        "{} of 10000 returns served from the shadow stack",
        shadow
    ));
    kp_expect!(t, shadow >= 9_990);
    kp_expect_eq!(
        t,
        after.missed_kret_no_instance,
        base.missed_kret_no_instance
    );
}

static SHADOW_GATED_RESULT: AtomicU32 = AtomicU32::new(0);

fn shadow_gated_caller(v: usize) {
    // SAFETY: a C function of this module.
    let r = unsafe { kp_test_graph_gated(v as c_int) };
    SHADOW_GATED_RESULT.store(r as u32, Ordering::SeqCst);
}

/// Stack traces while a return is hijacked through the shadow stack: in
/// the return handler, and of a task asleep inside the function (what
/// `/proc/PID/stack` shows): the real caller is there, no engine stub.
fn kret_shadow_stack_traces(t: &mut Test) {
    if !shadow_available(t) {
        return;
    }
    reset();
    TRACE.clear();
    let mut rp = kret_on(c"kp_test_graph_short");
    rp.handler = Some(trace_return);
    kp_expect_eq!(t, kret_register(&mut rp), 0);
    let base = kp::stats();
    // SAFETY: a C function of this module.
    kp_expect_eq!(t, unsafe { kp_test_graph_short(9) }, 28);
    kret_unregister(&mut rp);
    kp_expect_eq!(
        t,
        kp::stats().kretprobe_shadow_returns - base.kretprobe_shadow_returns,
        1
    );
    let (trace, n) = TRACE.get();
    let shown = trace.get(..n).unwrap_or(&[]);
    let to_caller = crate::util::show_trace(
        t,
        "in a return handler (shadow stack)",
        shown,
        "kret_shadow_stack_traces",
    );
    kp_expect!(t, to_caller, "the real caller is not in the trace");
    kp_expect!(t, !crate::util::trace_has(shown, "kp_insn_slots"));

    // SAFETY: a C helper of this module: no sleeper may be left behind.
    unsafe { kp_test_graph_sleepers_release() };
    reset();
    SHADOW_GATED_RESULT.store(0, Ordering::SeqCst);
    let mut rp = kret_on(c"kp_test_graph_gated");
    rp.entry_handler = Some(count_entry);
    rp.maxactive = 1;
    kp_expect_eq!(t, kret_register(&mut rp), 0);
    // Closed again for the worker (nothing else sleeps on it now).
    // SAFETY: a C helper: starts no thread with n = 0, closes the gate.
    unsafe { kp_test_graph_sleepers_start(0) };
    let Ok(w) = Worker::start(shadow_gated_caller, 5, None) else {
        kp_expect!(t, false, "cannot start the worker");
        return;
    };
    while ENTRY_CALLS.load(Ordering::SeqCst) == 0 {
        // SAFETY: process context.
        unsafe { bindings::msleep(1) };
    }
    let mut buf = [0usize; TRACE_LEN];
    let mut n = 0;
    for _ in 0..200 {
        // SAFETY: process context: let the worker reach its sleep.
        unsafe { bindings::msleep(5) };
        // SAFETY: the worker's task lives until `w` is dropped below.
        n = unsafe { stack_trace_save_tsk(w.task().cast(), buf.as_mut_ptr(), TRACE_LEN as _, 0) }
            as usize;
        if n > 0 && crate::util::trace_has(&buf[..n], "kp_test_graph_gated") {
            break;
        }
    }
    let shown = buf.get(..n).unwrap_or(&[]);
    let to_caller = crate::util::show_trace(
        t,
        "of a task asleep inside the function (shadow stack)",
        shown,
        "shadow_gated_caller",
    );
    kp_expect!(
        t,
        to_caller,
        "the sleeping task's trace misses its real caller"
    );
    kp_expect!(t, !crate::util::trace_has(shown, "return_to_handler"));
    // SAFETY: a C helper of this module.
    unsafe { kp_test_graph_sleepers_release() };
    drop(w);
    kret_unregister(&mut rp);
    kp_expect_eq!(t, SHADOW_GATED_RESULT.load(Ordering::SeqCst), 6);
}

/// Takes a stack trace in a kprobe's pre handler.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn trace_pre(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    TRACE.take();
    0
}

/// A stack trace from an exception on top of a function whose return the
/// shadow stack hijacked (a kprobe inside it, x86_64: past the ftrace site;
/// arm64: past its prologue,
/// where the frame record holding `return_to_handler` exists, since an
/// arm64 unwind from a function's entry skips its caller whatever the
/// return address): the real caller is there.
fn kret_shadow_trace_from_inside(t: &mut Test) {
    if !shadow_available(t) {
        return;
    }
    reset();
    TRACE.clear();
    let f = kp::lookup_symbol(c"kp_test_graph_gated").map_or(0, |s| s.addr);
    if f == 0 {
        kp_expect!(t, false, "kp_test_graph_gated not found");
        return;
    }
    let at = if cfg!(CONFIG_ARM64) {
        // After `add x29, sp, #imm` (`mov x29, sp` when imm is 0).
        (0..16)
            .map(|i| f + 4 * i)
            .find(|&a| crate::util::text_word(a) & 0xffc0_03ff == 0x9100_03fd)
            .map_or(0, |a| a + 4)
    } else {
        // Past the ftrace site (5 bytes): a breakpoint, whose exception
        // frame the unwinder starts from. Its ip is the address + 1 (the
        // kernel's kprobes report the same), so not a one-byte push or pop:
        // ORC would take the next instruction's stack layout for this one's.
        let mut a = crate::util::body(f) + 5;
        while a < f + 32 && (0x50..=0x5f).contains(&(crate::util::text_word(a) & 0xff)) {
            a += 1;
        }
        a
    };
    kp_expect!(t, at != 0, "no frame set-up in kp_test_graph_gated");
    let mut rp = kret_on(c"kp_test_graph_gated");
    rp.handler = Some(count_ret);
    kp_expect_eq!(t, kret_register(&mut rp), 0);
    let mut p = KpKprobe::new();
    p.addr = at as *mut _;
    p.pre_handler = Some(trace_pre);
    kp_expect_eq!(t, register(&mut p), 0);
    // SAFETY: a C helper of this module: the gate open, no sleep.
    unsafe { kp_test_graph_sleepers_release() };
    let base = kp::stats();
    shadow_gated_caller(7);
    unregister(&mut p);
    kret_unregister(&mut rp);
    kp_expect_eq!(t, SHADOW_GATED_RESULT.load(Ordering::SeqCst), 8);
    kp_expect_eq!(t, HANDLER_CALLS.load(Ordering::SeqCst), 1);
    kp_expect_eq!(
        t,
        kp::stats().kretprobe_shadow_returns - base.kretprobe_shadow_returns,
        1
    );
    let (trace, n) = TRACE.get();
    let shown = trace.get(..n).unwrap_or(&[]);
    // The caller, or this test if the compiler inlined it here.
    let to_caller = crate::util::show_trace(
        t,
        "in a kprobe inside the function (shadow stack)",
        shown,
        "shadow_gated_caller",
    ) || crate::util::trace_has(shown, "kret_shadow_trace_from_inside");
    kp_expect!(t, to_caller, "the real caller is not in the trace");
    // The "guess" unwinder (the plain x86_64 kernel) reports every text
    // address on the stack, stale copies of `return_to_handler` in spilled
    // registers included (the hijacked slot itself it translates); the
    // unwinders that walk frames must not show it.
    if !cfg!(CONFIG_UNWINDER_GUESS) {
        kp_expect!(t, !crate::util::trace_has(shown, "return_to_handler"));
    }
}

/// A return-probed function of a module on the shadow stack, the module
/// unloaded under the kretprobe: the kretprobe is GONE, and unregistering
/// it afterwards gives everything back.
fn kret_shadow_module_gone(t: &mut Test) {
    if !shadow_available(t) {
        return;
    }
    let base = kp::stats();
    kp_expect_eq!(
        t,
        crate::util::run(c"/bin/insmod", &[c"/lib/kp/kp_target.ko"]),
        0
    );
    let mut rp = kret_on(c"kp_target:kp_target_c_func");
    rp.handler = Some(count_ret);
    kp_expect_eq!(t, kret_register(&mut rp), 0);
    kp_expect_eq!(
        t,
        kp::stats().kretprobe_shadow_probes,
        base.kretprobe_shadow_probes + 1
    );
    kp_expect_eq!(t, crate::util::run(c"/bin/rmmod", &[c"kp_target"]), 0);
    kp_expect!(t, rp.kp.flags & kp::KP_FLAG_GONE != 0);
    kret_unregister(&mut rp);
    let now = kp::stats();
    kp_expect_eq!(t, now.kretprobe_shadow_probes, base.kretprobe_shadow_probes);
    kp_expect_eq!(t, now.probes, base.probes);
}

kunit_suite!(
    kp_kret,
    "kp_kret",
    [
        test_kretprobe,
        test_kretprobes,
        kret_batch,
        kret_data_duration_return_address,
        kret_maxactive_one_two_cpus,
        kret_recursion_depth_10,
        kret_unregister_while_inside,
        kret_1e5_calls_exact,
        kret_refusals,
        kret_with_kprobe_on_same_function,
        kret_stack_traces,
        kret_task_exits_inside,
        kret_shadow_1000_sleepers,
        kret_shadow_10000_calls_all_cpus,
        kret_shadow_stack_traces,
        kret_shadow_task_exits_inside,
        kret_shadow_unregister_while_inside,
        kret_shadow_module_gone,
        kret_shadow_trace_from_inside,
    ]
);
