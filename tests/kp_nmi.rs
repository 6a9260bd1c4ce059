// SPDX-License-Identifier: GPL-2.0

//! `kp_nmi`: probe hits in NMI context. The NMIs come from `tests/helpers.c`:
//! x86_64, self-NMIs through the local APIC; arm64, the PMU's overflow
//! interrupt, a GICv3 pseudo-NMI (`CONFIG_ARM64_PSEUDO_NMI`, QEMU
//! `gic-version=3`, `irqchip.gicv3_pseudo_nmi=1`).
//!
//! A probe hit from an NMI runs its handlers there: mid-function (pre
//! handler, out-of-line step, post handler; arm64: the step ends in the
//! post trampoline and `eret`, from the NMI) and at the entry of a C function
//! (`kp_test_c_target`, through ftrace). On x86_64 a
//! hit from an NMI that arrives while this CPU runs another probe's handler
//! runs no handler and counts in `nmissed`, and the probed instruction still
//! runs: the function returns the right value. (On arm64 that cannot
//! happen: handlers run in the BRK exception with all of DAIF masked, and a
//! pseudo-NMI is taken only with PSTATE.I clear; the kernel's arm64 kprobes
//! are in the same position.) No recursion, no deadlock, no splat (the log
//! scan and, on the debug kernel, lockdep watch).

use crate::kp::KpKprobe;
use crate::kunit::Test;
#[cfg(CONFIG_X86_64)]
use crate::targets::kp_kunit_target;
use crate::targets::{addr_of, kp_kunit_target2};
use crate::util::{insn_len_at, register, unregister};
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use kernel::bindings;
use kernel::ffi::{c_int, c_ulong};

extern "C" {
    fn kp_test_nmi_arm(f: extern "C" fn()) -> c_int;
    fn kp_test_nmi_disarm();
    fn kp_test_nmi_fire() -> c_int;
    fn kp_test_in_nmi() -> bool;
    fn kp_test_c_target(value: c_int) -> c_int;
}

/// NMIs per case.
const NMIS: u64 = 10;

static PRE: AtomicU64 = AtomicU64::new(0);
static PRE_IN_NMI: AtomicU64 = AtomicU64::new(0);
static POST: AtomicU64 = AtomicU64::new(0);
static POST_IN_NMI: AtomicU64 = AtomicU64::new(0);
static RESULT: AtomicU32 = AtomicU32::new(0);
static OUTER_FIRE: AtomicI32 = AtomicI32::new(1);
/// Whether the NMI calls the C target (an ftrace site at its entry) rather
/// than `kp_kunit_target2`.
static C_TARGET: AtomicBool = AtomicBool::new(false);

fn reset() {
    for c in [&PRE, &PRE_IN_NMI, &POST, &POST_IN_NMI] {
        c.store(0, Ordering::SeqCst);
    }
    RESULT.store(0, Ordering::SeqCst);
    OUTER_FIRE.store(1, Ordering::SeqCst);
}

fn in_nmi() -> bool {
    // SAFETY: reads the preempt count.
    unsafe { kp_test_in_nmi() }
}

/// What the NMI handler runs: the probed function (30 / 3 + 1 either way).
extern "C" fn call_in_nmi() {
    let r = if C_TARGET.load(Ordering::SeqCst) {
        // SAFETY: a plain C function.
        unsafe { kp_test_c_target(30) as u32 }
    } else {
        kp_kunit_target2(30)
    };
    RESULT.store(r, Ordering::SeqCst);
}

/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn count_pre(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    PRE.fetch_add(1, Ordering::SeqCst);
    if in_nmi() {
        PRE_IN_NMI.fetch_add(1, Ordering::SeqCst);
    }
    0
}

/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn count_post(_p: *mut KpKprobe, _r: *mut bindings::pt_regs, _f: c_ulong) {
    POST.fetch_add(1, Ordering::SeqCst);
    if in_nmi() {
        POST_IN_NMI.fetch_add(1, Ordering::SeqCst);
    }
}

/// Sends an NMI to this CPU from the outer probe's handler (x86_64).
///
/// # Safety
///
/// Called by the engine.
#[cfg(CONFIG_X86_64)]
unsafe extern "C" fn outer_pre(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    // SAFETY: the NMI handler is registered while this probe is.
    OUTER_FIRE.store(unsafe { kp_test_nmi_fire() }, Ordering::SeqCst);
    0
}

/// A probe on `sym + offset` counting its pre and post handler calls.
fn counting_probe(sym: &'static core::ffi::CStr, offset: usize) -> KpKprobe {
    let mut p = KpKprobe::new();
    p.symbol_name = sym.as_ptr().cast();
    p.offset = offset as _;
    p.pre_handler = Some(count_pre);
    p.post_handler = Some(count_post);
    p
}

/// The offset of `kp_kunit_target2`'s second instruction: past the ftrace
/// site, on the breakpoint path (a post handler keeps it off the jump
/// optimization).
fn mid_offset() -> usize {
    let f = addr_of(kp_kunit_target2 as *const ());
    let b = crate::util::body(f);
    b - f + insn_len_at(b)
}

/// Registers the NMI handler; false (reported) when it cannot.
fn arm_nmi(t: &mut Test) -> bool {
    // SAFETY: process context; `call_in_nmi` is NMI-safe.
    let r = unsafe { kp_test_nmi_arm(call_in_nmi) };
    kp_expect_eq!(t, r, 0);
    r == 0
}

/// `NMIS` NMIs, each calling the function the probe at `offset` sits on
/// (the C target when `c_target`): whether the probe took the ftrace path
/// must be `ftrace`.
fn hits_in_nmi(t: &mut Test, c_target: bool, offset: usize, ftrace: bool) {
    reset();
    C_TARGET.store(c_target, Ordering::SeqCst);
    let sym = if c_target {
        c"kp_test_c_target"
    } else {
        c"kp_kunit_target2"
    };
    let mut p = counting_probe(sym, offset);
    kp_expect_eq!(t, register(&mut p), 0);
    kp_expect_eq!(t, p.flags & crate::kp::KP_FLAG_FTRACE != 0, ftrace);
    if arm_nmi(t) {
        for _ in 0..NMIS {
            // SAFETY: the handler is registered.
            kp_expect_eq!(t, unsafe { kp_test_nmi_fire() }, 0);
        }
        // SAFETY: registered above.
        unsafe { kp_test_nmi_disarm() };
    }
    unregister(&mut p);
    t.info(format_args!(
        "+{}: {} pre ({} in NMI), {} post ({} in NMI), {} missed",
        offset,
        PRE.load(Ordering::SeqCst),
        PRE_IN_NMI.load(Ordering::SeqCst),
        POST.load(Ordering::SeqCst),
        POST_IN_NMI.load(Ordering::SeqCst),
        p.nmissed
    ));
    kp_expect_eq!(t, PRE_IN_NMI.load(Ordering::SeqCst), NMIS);
    kp_expect_eq!(t, POST_IN_NMI.load(Ordering::SeqCst), NMIS);
    kp_expect_eq!(t, PRE.load(Ordering::SeqCst), NMIS);
    kp_expect_eq!(t, POST.load(Ordering::SeqCst), NMIS);
    kp_expect_eq!(t, p.nmissed, 0);
    kp_expect_eq!(t, RESULT.load(Ordering::SeqCst), 11);
}

fn nmi_breakpoint_hits(t: &mut Test) {
    hits_in_nmi(t, false, mid_offset(), false);
}

/// The entry of a C function, through ftrace (both arches).
fn nmi_entry_hits(t: &mut Test) {
    hits_in_nmi(t, true, 0, true);
}

#[cfg(CONFIG_X86_64)]
fn nmi_while_handling(t: &mut Test) {
    reset();
    C_TARGET.store(false, Ordering::SeqCst);
    let mut inner = counting_probe(c"kp_kunit_target2", mid_offset());
    let mut outer = KpKprobe::new();
    outer.symbol_name = c"kp_kunit_target".as_ptr().cast();
    outer.pre_handler = Some(outer_pre);
    kp_expect_eq!(t, register(&mut inner), 0);
    kp_expect_eq!(t, register(&mut outer), 0);
    let mut result = 0;
    if arm_nmi(t) {
        // The outer handler sends the NMI; in it the inner probe is hit.
        result = kp_kunit_target(30);
        // SAFETY: registered above.
        unsafe { kp_test_nmi_disarm() };
    }
    unregister(&mut outer);
    unregister(&mut inner);
    t.info(format_args!(
        "nested: fire {}, inner {} pre, {} missed, results {} and {}",
        OUTER_FIRE.load(Ordering::SeqCst),
        PRE.load(Ordering::SeqCst),
        inner.nmissed,
        result,
        RESULT.load(Ordering::SeqCst)
    ));
    kp_expect_eq!(t, OUTER_FIRE.load(Ordering::SeqCst), 0);
    kp_expect_eq!(t, result, 10);
    kp_expect_eq!(t, RESULT.load(Ordering::SeqCst), 11);
    kp_expect_eq!(t, PRE.load(Ordering::SeqCst), 0);
    kp_expect_eq!(t, POST.load(Ordering::SeqCst), 0);
    kp_expect_eq!(t, inner.nmissed, 1);
}

#[cfg(CONFIG_X86_64)]
kunit_suite!(
    kp_nmi,
    "kp_nmi",
    [nmi_breakpoint_hits, nmi_entry_hits, nmi_while_handling]
);

#[cfg(CONFIG_ARM64)]
kunit_suite!(kp_nmi, "kp_nmi", [nmi_breakpoint_hits, nmi_entry_hits]);
