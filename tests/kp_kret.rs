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
    reset();
    let base = kp::stats();
    let mut rp = kret_on(c"kp_test_exits");
    rp.entry_handler = Some(count_entry);
    rp.handler = Some(count_ret);
    rp.maxactive = 1;
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
    kp_expect_eq!(t, now.kretprobe_task_exits - base.kretprobe_task_exits, 1);
    kp_expect_eq!(t, now.missed_kret_no_instance, base.missed_kret_no_instance);
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
    ]
);
