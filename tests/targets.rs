// SPDX-License-Identifier: GPL-2.0

//! Functions the suites probe. `#[no_mangle]` gives them plain kallsyms
//! names; `#[inline(never)]` and `black_box` keep them real calls.

use core::hint::black_box;
use core::sync::atomic::{AtomicU32, Ordering};

/// Divisor of the `lib/test_kprobes.c` targets.
pub(crate) static DIV_FACTOR: AtomicU32 = AtomicU32::new(3);

fn div() -> u32 {
    DIV_FACTOR.load(Ordering::Relaxed)
}

/// `kprobe_target()` of `lib/test_kprobes.c`.
#[no_mangle]
#[inline(never)]
pub(crate) extern "C" fn kp_kunit_target(value: u32) -> u32 {
    black_box(value) / div()
}

/// `kprobe_target2()`.
#[no_mangle]
#[inline(never)]
pub(crate) extern "C" fn kp_kunit_target2(value: u32) -> u32 {
    black_box(value) / div() + 1
}

/// `kprobe_recursed_target()`.
#[no_mangle]
#[inline(never)]
pub(crate) extern "C" fn kp_kunit_recursed_target(value: u32) -> u32 {
    black_box(value) / div()
}

/// Three arguments, for the argument-register checks.
#[no_mangle]
#[inline(never)]
pub(crate) extern "C" fn kp_kunit_args(a: u64, b: u64, c: u64) -> u64 {
    black_box(a.wrapping_mul(31) ^ b.rotate_left(7)).wrapping_add(c)
}

/// What [`kp_kunit_args`] returns.
pub(crate) fn args_expected(a: u64, b: u64, c: u64) -> u64 {
    (a.wrapping_mul(31) ^ b.rotate_left(7)).wrapping_add(c)
}

/// Address of a function, as the engine sees it.
pub(crate) fn addr_of(f: *const ()) -> usize {
    f as usize
}
