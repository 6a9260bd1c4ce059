// SPDX-License-Identifier: GPL-2.0

//! KUnit suites for the kprobes engine, run in QEMU when this module loads.
//!
//! - `kp_smoke` (every arch): the engine is loaded and refuses bad requests
//!   with the documented error codes.
//! - `kp_probe` (x86_64): a real probe on a function of this module: argument
//!   registers, handler counts, return values, skipping, unregister.
//! - `kp_kernel` (x86_64): a probe on `do_sys_open`, hit by a user-space `cat`.

// Until the arm64 backend can probe, the probe suites are x86_64-only and
// their helpers unused on arm64.
#![cfg_attr(CONFIG_ARM64, allow(dead_code))]

#[macro_use]
mod kunit;
#[path = "../src/api.rs"]
mod kp;

#[cfg(CONFIG_X86_64)]
#[path = "../arch/x86_64/decode.rs"]
#[allow(dead_code, unreachable_pub)]
mod decode;

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use kernel::bindings;
use kernel::ffi::{c_char, c_int, c_ulong};
use kernel::prelude::*;
use kp::KpKprobe;
use kunit::Test;

module! {
    type: KprobesKunit,
    name: "kprobes_kunit",
    author: "kprobes-rs developers",
    description: "KUnit suites for the Rust kprobes engine",
    license: "GPL",
}

struct KprobesKunit;

impl kernel::Module for KprobesKunit {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        // KUnit ran the suites from the module notifier before this.
        Ok(KprobesKunit)
    }
}

fn register(p: &mut KpKprobe) -> c_int {
    // SAFETY: every caller unregisters `p` before it goes out of scope.
    unsafe { kp::kp_register_kprobe(p) }
}

fn unregister(p: &mut KpKprobe) {
    // SAFETY: `p` was registered (or is not, which is allowed).
    unsafe { kp::kp_unregister_kprobe(p) }
}

const ENOENT: c_int = -(bindings::ENOENT as c_int);
const EINVAL: c_int = -(bindings::EINVAL as c_int);

/// Argument `n` (0-based) of the probed function, at its entry.
fn arg(regs: &bindings::pt_regs, n: usize) -> u64 {
    kp::regs::arg(regs, n).unwrap_or(0) as u64
}

// ---------------------------------------------------------------------------
// kp_smoke

static DATA_WORD: AtomicU64 = AtomicU64::new(0);

fn smoke_unknown_symbol(t: &mut Test) {
    let mut p = KpKprobe::new();
    p.symbol_name = c"kp_no_such_symbol_anywhere".as_ptr().cast();
    kp_expect_eq!(t, register(&mut p), ENOENT);
    p.symbol_name = c"nosuchmodule:kp_no_such_symbol".as_ptr().cast();
    kp_expect_eq!(t, register(&mut p), ENOENT);
    kp_expect!(t, p.kp_private.is_null());
}

fn smoke_bad_requests(t: &mut Test) {
    let mut p = KpKprobe::new();
    // Neither address nor symbol.
    kp_expect_eq!(t, register(&mut p), EINVAL);
    // Both.
    p.symbol_name = c"kp_kunit_target".as_ptr().cast();
    p.addr = kp_kunit_target as *mut _;
    kp_expect_eq!(t, register(&mut p), EINVAL);
    // Not a symbol name.
    p.addr = core::ptr::null_mut();
    p.symbol_name = c"kp kunit target".as_ptr().cast();
    kp_expect_eq!(t, register(&mut p), EINVAL);
    // Data, not text.
    p.symbol_name = core::ptr::null();
    p.addr = &DATA_WORD as *const _ as *mut _;
    kp_expect_eq!(t, register(&mut p), EINVAL);
    // The engine's own code.
    p.addr = kp::kp_register_kprobe as *mut _;
    kp_expect_eq!(t, register(&mut p), EINVAL);
    // An offset past the end of the function.
    p.addr = core::ptr::null_mut();
    p.symbol_name = c"kp_kunit_target".as_ptr().cast();
    p.offset = 0x10_0000;
    kp_expect_eq!(t, register(&mut p), EINVAL);
    // A null probe.
    // SAFETY: null is explicitly allowed and refused.
    let r = unsafe { kp::kp_register_kprobe(core::ptr::null_mut()) };
    kp_expect_eq!(t, r, EINVAL);
    kp_expect!(t, p.kp_private.is_null());
}

fn smoke_abi_size(t: &mut Test) {
    extern "C" {
        static kp_kprobe_abi_size: usize;
    }
    // SAFETY: a plain exported constant.
    let engine = unsafe { kp_kprobe_abi_size };
    kp_expect_eq!(t, engine, core::mem::size_of::<KpKprobe>());
}

kunit_suite!(
    kp_smoke,
    "kp_smoke",
    [smoke_unknown_symbol, smoke_bad_requests, smoke_abi_size]
);

// ---------------------------------------------------------------------------
// The probed function and its handlers.

/// The function the `kp_probe` suite probes.
#[no_mangle]
#[inline(never)]
pub extern "C" fn kp_kunit_target(a: u64, b: u64, c: u64) -> u64 {
    core::hint::black_box(a.wrapping_mul(31) ^ b.rotate_left(7)).wrapping_add(c)
}

fn expected(a: u64, b: u64, c: u64) -> u64 {
    (a.wrapping_mul(31) ^ b.rotate_left(7)).wrapping_add(c)
}

static PRE_HITS: AtomicUsize = AtomicUsize::new(0);
static POST_HITS: AtomicUsize = AtomicUsize::new(0);
static SEEN: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];
static SEEN_IP: AtomicUsize = AtomicUsize::new(0);
static POST_IP: AtomicUsize = AtomicUsize::new(0);

fn reset_counters() {
    PRE_HITS.store(0, Ordering::SeqCst);
    POST_HITS.store(0, Ordering::SeqCst);
    for s in &SEEN {
        s.store(u64::MAX, Ordering::SeqCst);
    }
}

/// Pre handler: counts hits and records the first three arguments.
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

/// Post handler: counts hits and records ip.
///
/// # Safety
///
/// Called by the engine with a valid trap frame.
unsafe extern "C" fn count_post(_p: *mut KpKprobe, regs: *mut bindings::pt_regs, _f: c_ulong) {
    POST_HITS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the engine passes the trap frame.
    POST_IP.store(kp::regs::ip(unsafe { &*regs }), Ordering::SeqCst);
}

// ---------------------------------------------------------------------------
// kp_probe (x86_64 for now: the arm64 backend arrives with its issue)

#[cfg(CONFIG_X86_64)]
fn probe_args_counts_unregister(t: &mut Test) {
    reset_counters();
    let mut p = KpKprobe::new();
    p.symbol_name = c"kp_kunit_target".as_ptr().cast();
    p.pre_handler = Some(count_pre);
    p.post_handler = Some(count_post);
    kp_expect_eq!(t, register(&mut p), 0);
    let target = kp_kunit_target as *const () as usize;
    kp_expect_eq!(t, p.addr as usize, target);
    for i in 0..10u64 {
        let r = kp_kunit_target(i, i * 2 + 1, 0xdead_0000 + i);
        kp_expect_eq!(t, r, expected(i, i * 2 + 1, 0xdead_0000 + i));
    }
    kp_expect_eq!(t, PRE_HITS.load(Ordering::SeqCst), 10);
    kp_expect_eq!(t, POST_HITS.load(Ordering::SeqCst), 10);
    kp_expect_eq!(t, SEEN[0].load(Ordering::SeqCst), 9);
    kp_expect_eq!(t, SEEN[1].load(Ordering::SeqCst), 19);
    kp_expect_eq!(t, SEEN[2].load(Ordering::SeqCst), 0xdead_0009);
    // As with the kernel's x86 kprobes, the pre handler sees ip = addr + 1
    // (just past the int3); the post handler sees the next instruction.
    kp_expect_eq!(t, SEEN_IP.load(Ordering::SeqCst), target + 1);
    let first = insn_len_at(target);
    kp_expect_eq!(t, POST_IP.load(Ordering::SeqCst), target + first);
    kp_expect_eq!(t, p.nmissed, 0);
    unregister(&mut p);
    kp_expect!(t, p.kp_private.is_null());
    for i in 0..5u64 {
        kp_expect_eq!(t, kp_kunit_target(i, 1, 2), expected(i, 1, 2));
    }
    kp_expect_eq!(t, PRE_HITS.load(Ordering::SeqCst), 10);
    kp_expect_eq!(t, POST_HITS.load(Ordering::SeqCst), 10);
    // Registering again after unregister works.
    p.addr = core::ptr::null_mut();
    kp_expect_eq!(t, register(&mut p), 0);
    kp_expect_eq!(t, kp_kunit_target(1, 2, 3), expected(1, 2, 3));
    kp_expect_eq!(t, PRE_HITS.load(Ordering::SeqCst), 11);
    unregister(&mut p);
}

/// Length of the instruction at `addr`, with this module's copy of the decoder.
#[cfg(CONFIG_X86_64)]
fn insn_len_at(addr: usize) -> usize {
    // SAFETY: `addr` is this module's own text, readable.
    let bytes = unsafe { core::slice::from_raw_parts(addr as *const u8, decode::MAX_INSN_LEN) };
    decode::decode(bytes).map(|i| i.len as usize).unwrap_or(0)
}

/// A pre handler that makes the probed function return 4242 without running
/// it: at the entry, the return address is at the stack pointer.
///
/// # Safety
///
/// Called by the engine with a valid trap frame at the function's entry.
#[cfg(CONFIG_X86_64)]
unsafe extern "C" fn skip_pre(_p: *mut KpKprobe, regs: *mut bindings::pt_regs) -> c_int {
    // SAFETY: the engine passes the trap frame.
    let regs = unsafe { &mut *regs };
    PRE_HITS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: at function entry `sp` points at the return address.
    regs.ip = unsafe { *(regs.sp as *const usize) };
    regs.sp += 8;
    regs.ax = 4242;
    1
}

#[cfg(CONFIG_X86_64)]
fn probe_pre_handler_skips(t: &mut Test) {
    reset_counters();
    let mut p = KpKprobe::new();
    p.addr = kp_kunit_target as *mut _;
    p.pre_handler = Some(skip_pre);
    p.post_handler = Some(count_post);
    kp_expect_eq!(t, register(&mut p), 0);
    kp_expect_eq!(t, kp_kunit_target(1, 2, 3), 4242);
    kp_expect_eq!(t, PRE_HITS.load(Ordering::SeqCst), 1);
    // Skipping the instruction also skips the post handler.
    kp_expect_eq!(t, POST_HITS.load(Ordering::SeqCst), 0);
    unregister(&mut p);
    kp_expect_eq!(t, kp_kunit_target(1, 2, 3), expected(1, 2, 3));
}

#[cfg(CONFIG_X86_64)]
fn probe_refusals(t: &mut Test) {
    let target = kp_kunit_target as *const () as usize;
    let mut p = KpKprobe::new();
    p.addr = target as *mut _;
    kp_expect_eq!(t, register(&mut p), 0);
    // The same struct twice.
    kp_expect_eq!(t, register(&mut p), EINVAL);
    // A second probe on the same address (aggregation: not yet).
    let mut q = KpKprobe::new();
    q.addr = target as *mut _;
    kp_expect_eq!(t, register(&mut q), -(bindings::EBUSY as c_int));
    unregister(&mut p);
    // Inside an instruction: find the first one longer than a byte.
    let mut off = 0;
    while insn_len_at(target + off) == 1 {
        off += 1;
    }
    kp_expect!(t, insn_len_at(target + off) > 1);
    let mut r = KpKprobe::new();
    r.addr = (target + off + 1) as *mut _;
    kp_expect_eq!(t, register(&mut r), -(bindings::EILSEQ as c_int));
    kp_expect!(t, r.kp_private.is_null());
    // The text is intact after all that.
    kp_expect_eq!(t, kp_kunit_target(7, 8, 9), expected(7, 8, 9));
}

#[cfg(CONFIG_X86_64)]
kunit_suite!(
    kp_probe,
    "kp_probe",
    [
        probe_args_counts_unregister,
        probe_pre_handler_skips,
        probe_refusals
    ]
);

// ---------------------------------------------------------------------------
// kp_kernel: a probe on a real kernel function, hit from user space.

extern "C" {
    fn call_usermodehelper(
        path: *const c_char,
        argv: *mut *mut c_char,
        envp: *mut *mut c_char,
        wait: c_int,
    ) -> c_int;
}
const UMH_WAIT_PROC: c_int = 2;

/// The file name the user-space helper opens.
const MARKER: &[u8] = b"/kp_kunit_marker_file";
static MARKER_HITS: AtomicUsize = AtomicUsize::new(0);
static OPEN_HITS: AtomicUsize = AtomicUsize::new(0);

/// Pre handler on `do_sys_open`: counts opens of [`MARKER`].
///
/// # Safety
///
/// Called by the engine with a valid trap frame.
unsafe extern "C" fn open_pre(_p: *mut KpKprobe, regs: *mut bindings::pt_regs) -> c_int {
    // SAFETY: the engine passes the trap frame.
    let regs = unsafe { &*regs };
    OPEN_HITS.fetch_add(1, Ordering::SeqCst);
    // do_sys_open(int dfd, const char __user *filename, int flags, umode_t mode)
    let mut buf = [0u8; 32];
    // SAFETY: a nofault copy from the user pointer into a local buffer.
    let left = unsafe {
        bindings::copy_from_user_nofault(
            buf.as_mut_ptr().cast(),
            arg(regs, 1) as *const _,
            MARKER.len() + 1,
        )
    };
    if left == 0 && &buf[..MARKER.len()] == MARKER && buf[MARKER.len()] == 0 {
        MARKER_HITS.fetch_add(1, Ordering::SeqCst);
    }
    0
}

/// Runs `/bin/cat MARKER` in user space and waits for it.
fn run_cat() -> c_int {
    let mut argv: [*mut c_char; 3] = [
        c"/bin/cat".as_ptr() as *mut c_char,
        c"/kp_kunit_marker_file".as_ptr() as *mut c_char,
        core::ptr::null_mut(),
    ];
    let mut envp: [*mut c_char; 2] = [
        c"PATH=/bin:/sbin".as_ptr() as *mut c_char,
        core::ptr::null_mut(),
    ];
    // SAFETY: NULL-terminated argv/envp of static strings; we wait for exit.
    unsafe { call_usermodehelper(argv[0], argv.as_mut_ptr(), envp.as_mut_ptr(), UMH_WAIT_PROC) }
}

#[cfg(CONFIG_X86_64)]
fn kernel_do_sys_open(t: &mut Test) {
    MARKER_HITS.store(0, Ordering::SeqCst);
    OPEN_HITS.store(0, Ordering::SeqCst);
    let mut p = KpKprobe::new();
    p.symbol_name = c"do_sys_open".as_ptr().cast();
    p.pre_handler = Some(open_pre);
    kp_expect_eq!(t, register(&mut p), 0);
    t.info(format_args!("do_sys_open probed at {:p}", p.addr));
    for _ in 0..3 {
        // cat exits 1: the file does not exist. The open still happened.
        let r = run_cat();
        kp_expect!(t, r >= 0, "call_usermodehelper: {}", r);
    }
    let hits = MARKER_HITS.load(Ordering::SeqCst);
    kp_expect_eq!(t, hits, 3);
    kp_expect!(t, OPEN_HITS.load(Ordering::SeqCst) >= 3);
    unregister(&mut p);
    run_cat();
    kp_expect_eq!(t, MARKER_HITS.load(Ordering::SeqCst), 3);
    kp_expect_eq!(t, p.nmissed, 0);
}

#[cfg(CONFIG_X86_64)]
kunit_suite!(kp_kernel, "kp_kernel", [kernel_do_sys_open]);
