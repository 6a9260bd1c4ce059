// SPDX-License-Identifier: GPL-2.0

//! `kp_probe`: one probe on a function of this module, in detail.

use crate::kp::{self, KpKprobe};
use crate::kunit::Test;
use crate::targets::{addr_of, args_expected, kp_kunit_args};
use crate::util::{
    arg, force_return, insn_len_at, register, unregister, EILSEQ, EINVAL, PRE_IP_OFFSET,
};
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use kernel::bindings;
use kernel::ffi::{c_int, c_ulong};

static PRE_HITS: AtomicUsize = AtomicUsize::new(0);
static POST_HITS: AtomicUsize = AtomicUsize::new(0);
static SEEN: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];
static SEEN_IP: AtomicUsize = AtomicUsize::new(0);
static POST_IP: AtomicUsize = AtomicUsize::new(0);

fn reset() {
    PRE_HITS.store(0, Ordering::SeqCst);
    POST_HITS.store(0, Ordering::SeqCst);
    for s in &SEEN {
        s.store(u64::MAX, Ordering::SeqCst);
    }
}

/// Counts hits and records the first three arguments and ip.
///
/// # Safety
///
/// Called by the engine with a valid trap frame.
unsafe extern "C" fn count_pre(_p: *mut KpKprobe, regs: *mut bindings::pt_regs) -> c_int {
    // SAFETY: the engine passes the trap frame.
    let regs = unsafe { &*regs };
    PRE_HITS.fetch_add(1, Ordering::SeqCst);
    for (i, s) in SEEN.iter().enumerate() {
        s.store(arg(regs, i), Ordering::SeqCst);
    }
    SEEN_IP.store(kp::regs::ip(regs), Ordering::SeqCst);
    0
}

/// Counts hits and records ip.
///
/// # Safety
///
/// Called by the engine with a valid trap frame.
unsafe extern "C" fn count_post(_p: *mut KpKprobe, regs: *mut bindings::pt_regs, _f: c_ulong) {
    POST_HITS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the engine passes the trap frame.
    POST_IP.store(kp::regs::ip(unsafe { &*regs }), Ordering::SeqCst);
}

fn probe_args_counts_unregister(t: &mut Test) {
    reset();
    let mut p = KpKprobe::new();
    p.symbol_name = c"kp_kunit_args".as_ptr().cast();
    p.pre_handler = Some(count_pre);
    p.post_handler = Some(count_post);
    kp_expect_eq!(t, register(&mut p), 0);
    let target = crate::util::body(addr_of(kp_kunit_args as *const ()));
    kp_expect_eq!(t, p.addr as usize, target);
    for i in 0..10u64 {
        let r = kp_kunit_args(i, i * 2 + 1, 0xdead_0000 + i);
        kp_expect_eq!(t, r, args_expected(i, i * 2 + 1, 0xdead_0000 + i));
    }
    kp_expect_eq!(t, PRE_HITS.load(Ordering::SeqCst), 10);
    kp_expect_eq!(t, POST_HITS.load(Ordering::SeqCst), 10);
    kp_expect_eq!(t, SEEN[0].load(Ordering::SeqCst), 9);
    kp_expect_eq!(t, SEEN[1].load(Ordering::SeqCst), 19);
    kp_expect_eq!(t, SEEN[2].load(Ordering::SeqCst), 0xdead_0009);
    // As with the kernel's kprobes, the pre handler sees ip = addr + 1 on
    // x86_64 (past the int3), addr on arm64; the post handler sees the next
    // instruction (when the first instruction does not branch).
    kp_expect_eq!(t, SEEN_IP.load(Ordering::SeqCst), target + PRE_IP_OFFSET);
    kp_expect_eq!(
        t,
        POST_IP.load(Ordering::SeqCst),
        target + insn_len_at(target)
    );
    kp_expect_eq!(t, p.nmissed, 0);
    unregister(&mut p);
    kp_expect!(t, crate::util::cleared(&p));
    for i in 0..5u64 {
        kp_expect_eq!(t, kp_kunit_args(i, 1, 2), args_expected(i, 1, 2));
    }
    kp_expect_eq!(t, PRE_HITS.load(Ordering::SeqCst), 10);
    kp_expect_eq!(t, POST_HITS.load(Ordering::SeqCst), 10);
    // Registering again after unregister works.
    p.addr = core::ptr::null_mut();
    kp_expect_eq!(t, register(&mut p), 0);
    kp_expect_eq!(t, kp_kunit_args(1, 2, 3), args_expected(1, 2, 3));
    kp_expect_eq!(t, PRE_HITS.load(Ordering::SeqCst), 11);
    unregister(&mut p);
}

/// Makes the probed function return 4242 without running it: at the entry,
/// the return address is at the stack pointer.
///
/// # Safety
///
/// Called by the engine with a valid trap frame at the function's entry.
unsafe extern "C" fn skip_pre(_p: *mut KpKprobe, regs: *mut bindings::pt_regs) -> c_int {
    // SAFETY: the engine passes the trap frame.
    let regs = unsafe { &mut *regs };
    PRE_HITS.fetch_add(1, Ordering::SeqCst);
    force_return(regs, 4242);
    1
}

fn probe_pre_handler_skips(t: &mut Test) {
    reset();
    let mut p = KpKprobe::new();
    p.addr = kp_kunit_args as *mut _;
    p.pre_handler = Some(skip_pre);
    p.post_handler = Some(count_post);
    kp_expect_eq!(t, register(&mut p), 0);
    kp_expect_eq!(t, kp_kunit_args(1, 2, 3), 4242);
    kp_expect_eq!(t, PRE_HITS.load(Ordering::SeqCst), 1);
    // Skipping the instruction also skips the post handler.
    kp_expect_eq!(t, POST_HITS.load(Ordering::SeqCst), 0);
    unregister(&mut p);
    kp_expect_eq!(t, kp_kunit_args(1, 2, 3), args_expected(1, 2, 3));
}

/// A pre-handler that claims a redirect (returns 1) without moving the
/// instruction pointer.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn false_redirect_pre(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    PRE_HITS.fetch_add(1, Ordering::SeqCst);
    1
}

/// The engine runs the probed instruction when a "redirect" left the
/// instruction pointer where it was (resuming there would land inside the
/// instruction on x86_64, and hit the probe for ever on arm64): at the
/// entry and on the second instruction, with and without a post handler.
fn probe_false_redirect_runs_instruction(t: &mut Test) {
    let entry = addr_of(kp_kunit_args as *const ());
    let body = crate::util::body(entry);
    for at in [entry, body + insn_len_at(body)] {
        for post in [false, true] {
            reset();
            let mut p = KpKprobe::new();
            p.addr = at as *mut _;
            p.pre_handler = Some(false_redirect_pre);
            if post {
                p.post_handler = Some(count_post);
            }
            kp_expect_eq!(t, register(&mut p), 0);
            for i in 0..3u64 {
                kp_expect_eq!(
                    t,
                    kp_kunit_args(i, 5, 6),
                    args_expected(i, 5, 6),
                    "at {:#x}",
                    at
                );
            }
            kp_expect_eq!(t, PRE_HITS.load(Ordering::SeqCst), 3, "at {:#x}", at);
            // The instruction ran, so the post handler did (unless the
            // entry is served by ftrace, which has no step to follow).
            if post && p.flags & crate::kp::KP_FLAG_FTRACE == 0 {
                kp_expect_eq!(t, POST_HITS.load(Ordering::SeqCst), 3, "at {:#x}", at);
            }
            unregister(&mut p);
        }
    }
}

fn probe_refusals(t: &mut Test) {
    let target = crate::util::body(addr_of(kp_kunit_args as *const ()));
    let mut p = KpKprobe::new();
    p.addr = target as *mut _;
    kp_expect_eq!(t, register(&mut p), 0);
    // The same struct twice.
    kp_expect_eq!(t, register(&mut p), EINVAL);
    unregister(&mut p);
    // Inside an instruction: find the first one longer than a byte.
    let mut off = 0;
    while insn_len_at(target + off) == 1 {
        off += insn_len_at(target + off);
    }
    kp_expect!(t, insn_len_at(target + off) > 1);
    let mut r = KpKprobe::new();
    r.addr = (target + off + 1) as *mut _;
    kp_expect_eq!(t, register(&mut r), EILSEQ);
    kp_expect!(t, crate::util::cleared(&r));
    // The text is intact after all that.
    kp_expect_eq!(t, kp_kunit_args(7, 8, 9), args_expected(7, 8, 9));
}

kunit_suite!(
    kp_probe,
    "kp_probe",
    [
        probe_args_counts_unregister,
        probe_pre_handler_skips,
        probe_false_redirect_runs_instruction,
        probe_refusals
    ]
);
