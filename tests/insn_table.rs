// SPDX-License-Identifier: GPL-2.0

//! A table-driven check shared by the arch instruction suites
//! (`kp_arm64_sim`, `kp_x86_emu`): purpose-built assembly functions, each
//! probed at one instruction; with the probe, every function must return
//! what it returns without, and the probe must fire as often as the
//! instruction runs.

use crate::kp::KpKprobe;
use crate::kunit::Test;
use crate::util::{register, text_word, unregister};
use core::ffi::CStr;
use core::sync::atomic::{AtomicUsize, Ordering};
use kernel::bindings;
use kernel::ffi::{c_int, c_ulong};

/// `fn(a, b) -> result` of the assembly functions.
pub(crate) type Func = unsafe extern "C" fn(u64, u64) -> u64;

/// Bytes before each assembly function's first instruction: the landing
/// pad that indirect calls need on kernels that enforce them (x86_64 IBT:
/// `endbr64`; arm64 BTI: `bti c`). The table's offsets count from after it.
#[cfg(any(CONFIG_X86_KERNEL_IBT, CONFIG_ARM64_BTI_KERNEL))]
pub(crate) const ENTRY_PAD: u32 = 4;
#[cfg(not(any(CONFIG_X86_KERNEL_IBT, CONFIG_ARM64_BTI_KERNEL)))]
pub(crate) const ENTRY_PAD: u32 = 0;

extern "C" {
    /// tests/helpers.c: `f(a, b)`, without kCFI's check (the assembly
    /// functions carry no type hash).
    fn kp_test_call_asm(f: Func, a: u64, b: u64) -> u64;
}

/// Calls one of the assembly functions.
fn call(f: Func, a: u64, b: u64) -> u64 {
    // SAFETY: the assembly functions take two integers and return one.
    unsafe { kp_test_call_asm(f, a, b) }
}

/// One row: the probed symbol, the function to call, the offset of the
/// probed instruction in the probed symbol.
pub(crate) type Entry = (&'static CStr, Func, u32);

/// The probed symbol's name: the function's, or the one after `=>`.
macro_rules! probe_name {
    ($name:ident) => {
        stringify!($name)
    };
    ($name:ident => $probe:ident) => {
        stringify!($probe)
    };
}

/// Declares the assembly functions and their table:
/// `insn_table!(FUNCS: f1 @ off, f2 => probed_symbol @ off, ...)`.
macro_rules! insn_table {
    ($table:ident: $($name:ident $(=> $probe:ident)? @ $off:literal),+ $(,)?) => {
        extern "C" {
            $(fn $name(a: u64, b: u64) -> u64;)+
        }
        const $table: &[$crate::insn_table::Entry] = &[
            $((
                // SAFETY: a literal without interior NUL.
                unsafe {
                    core::ffi::CStr::from_bytes_with_nul_unchecked(
                        concat!(probe_name!($name $(=> $probe)?), "\0").as_bytes(),
                    )
                },
                $name,
                $off + $crate::insn_table::ENTRY_PAD,
            ),)+
        ];
    };
}

/// Argument pairs: equal, less, greater (signed and unsigned), overflow,
/// zero, parity, sign, bit 3, bit 63, a 32-bit zero with high bits set.
pub(crate) const ARGS: &[(u64, u64)] = &[
    (0, 0),
    (5, 5),
    (3, 9),
    (9, 3),
    (u64::MAX, 1),
    (1, u64::MAX),
    (i64::MAX as u64, u64::MAX),
    (i64::MIN as u64, 1),
    (8, 0),
    (1 << 63, 0),
    (1 << 32, 0),
    (6, 3),
    (7, 0),
];

static HITS: AtomicUsize = AtomicUsize::new(0);
static POSTS: AtomicUsize = AtomicUsize::new(0);

/// Counts hits.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn count(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    HITS.fetch_add(1, Ordering::SeqCst);
    0
}

/// Counts post handler calls.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn count_post(_p: *mut KpKprobe, _r: *mut bindings::pt_regs, _f: c_ulong) {
    POSTS.fetch_add(1, Ordering::SeqCst);
}

/// Runs every row, probed without a post handler and, if `also_post`, with
/// one (boosted vs stepped). `runs(name, a)` says how often the probed
/// instruction runs in one call; `traps(name, with_post)`, if given, how
/// many second traps (out-of-line copies ended by a breakpoint) each run
/// costs, checked against the engine's count.
pub(crate) fn check(
    t: &Test,
    table: &[Entry],
    also_post: bool,
    runs: fn(&CStr, u64) -> usize,
    traps: Option<fn(&CStr, bool) -> usize>,
) {
    for with_post in [false, true] {
        if with_post && !also_post {
            break;
        }
        for &(name, f, off) in table {
            let mut expected = [0u64; ARGS.len()];
            for (e, &(a, b)) in expected.iter_mut().zip(ARGS) {
                *e = call(f, a, b);
            }
            let mut p = KpKprobe::new();
            p.symbol_name = name.as_ptr().cast();
            p.offset = off;
            p.pre_handler = Some(count);
            if with_post {
                p.post_handler = Some(count_post);
            }
            HITS.store(0, Ordering::SeqCst);
            POSTS.store(0, Ordering::SeqCst);
            let r = register(&mut p);
            kp_expect_eq!(t, r, 0, "{:?}+{}", name, off);
            if r != 0 {
                continue;
            }
            let at = p.addr as usize;
            let armed_word = text_word(at);
            let traps_before = crate::kp::stats().step_traps;
            let mut want_hits = 0;
            for (&e, &(a, b)) in expected.iter().zip(ARGS) {
                let got = call(f, a, b);
                kp_expect_eq!(
                    t,
                    got,
                    e,
                    "{:?}({:#x}, {:#x}) probed at +{} (post: {})",
                    name,
                    a,
                    b,
                    off,
                    with_post
                );
                want_hits += runs(name, a);
            }
            kp_expect_eq!(t, HITS.load(Ordering::SeqCst), want_hits, "{:?}", name);
            if let Some(traps) = traps {
                // Only this task hits these functions; other probes' steps
                // elsewhere (none run during KUnit) would show here.
                kp_expect_eq!(
                    t,
                    crate::kp::stats().step_traps - traps_before,
                    (want_hits * traps(name, with_post)) as u64,
                    "second traps, {:?} (post: {})",
                    name,
                    with_post
                );
            }
            kp_expect_eq!(
                t,
                POSTS.load(Ordering::SeqCst),
                if with_post { want_hits } else { 0 },
                "{:?}",
                name
            );
            unregister(&mut p);
            kp_expect!(
                t,
                text_word(at) != armed_word,
                "{:?}: breakpoint still there",
                name
            );
        }
    }
}
