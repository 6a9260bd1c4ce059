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

/// Address of a function, as the engine sees it. Opaque to the compiler
/// (`black_box`): `addr_of(f) + 4` must not become a reference to `f + 4`,
/// which objtool takes for a pointer to code without an ENDBR (IBT).
#[inline(never)]
pub(crate) fn addr_of(f: *const ()) -> usize {
    black_box(f) as usize
}

/// Sleeps `ms` milliseconds, returns `ms * 2`.
#[no_mangle]
#[inline(never)]
pub(crate) extern "C" fn kp_kunit_sleeper(ms: u32) -> u32 {
    // SAFETY: process context.
    unsafe { kernel::bindings::msleep(ms) };
    black_box(ms) * 2
}

/// Recurses `n` levels: returns n + (n - 1) + ... + 0.
#[no_mangle]
#[inline(never)]
pub(crate) extern "C" fn kp_kunit_recurse(n: u32) -> u32 {
    if black_box(n) == 0 {
        0
    } else {
        n + kp_kunit_recurse(n - 1)
    }
}

/// Waits until `GATE` opens (polling), then returns `v + 1`.
#[no_mangle]
#[inline(never)]
pub(crate) extern "C" fn kp_kunit_gated(v: u32) -> u32 {
    while !GATE.load(Ordering::SeqCst) {
        // SAFETY: process context.
        unsafe { kernel::bindings::msleep(1) };
    }
    black_box(v) + 1
}

/// Opens [`kp_kunit_gated`].
pub(crate) static GATE: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// `a / b` with a `div` instruction (#DE when `b` is 0), and that
/// instruction's address, for the fault-handler cases.
#[cfg(CONFIG_X86_64)]
#[inline(never)]
pub(crate) fn kp_kunit_div(a: u64, b: u64) -> (u64, usize) {
    let (q, at): (u64, usize);
    // SAFETY: reads registers only; `div` by zero raises #DE, which the
    // callers' probe handles.
    unsafe {
        core::arch::asm!(
            "lea {at}, [rip + 2f]",
            "xor edx, edx",
            "2:",
            "div {b}",
            b = in(reg) b,
            at = out(reg) at,
            inout("rax") a => q,
            out("rdx") _,
            options(nostack),
        )
    };
    (q, at)
}

/// `a / *d` with one `div qword ptr [d]` (#DE while `*d` is 0), and that
/// instruction's address, for the fault handler that fixes memory.
#[cfg(CONFIG_X86_64)]
#[inline(never)]
pub(crate) fn kp_kunit_div_mem(a: u64, d: *const u64) -> (u64, usize) {
    let (q, at): (u64, usize);
    // SAFETY: `d` points to a readable u64; a #DE is the callers' probe's
    // to handle.
    unsafe {
        core::arch::asm!(
            "lea {at}, [rip + 2f]",
            "xor edx, edx",
            "2:",
            "div qword ptr [{d}]",
            d = in(reg) d,
            at = out(reg) at,
            inout("rax") a => q,
            out("rdx") _,
            options(nostack, readonly),
        )
    };
    (q, at)
}

/// Loads the word at `p` into x0 with one `ldr` (a data abort for an
/// unmapped `p`), and that instruction's address, for the fault-handler
/// case.
#[cfg(CONFIG_ARM64)]
#[inline(never)]
pub(crate) fn kp_kunit_load(p: usize) -> (u64, usize) {
    let (v, at): (u64, usize);
    // SAFETY: callers pass a readable address, or an unmapped one whose
    // abort the callers' probe handles.
    unsafe {
        core::arch::asm!(
            "adr {at}, 2f",
            "2:",
            "ldr x0, [{p}]",
            p = in(reg) p,
            at = out(reg) at,
            out("x0") v,
            options(nostack, readonly),
        )
    };
    (v, at)
}

/// Loads the word at `p` with one `mov` (#GP for a non-canonical `p`), and
/// that instruction's address, for the fault-handler cases.
#[cfg(CONFIG_X86_64)]
#[inline(never)]
pub(crate) fn kp_kunit_load(p: usize) -> (u64, usize) {
    let (v, at): (u64, usize);
    // SAFETY: callers pass a readable address, or a non-canonical one whose
    // #GP the callers' probe handles.
    unsafe {
        core::arch::asm!(
            "lea {at}, [rip + 2f]",
            "2:",
            "mov rax, qword ptr [{p}]",
            p = in(reg) p,
            at = out(reg) at,
            out("rax") v,
            options(nostack, readonly),
        )
    };
    (v, at)
}
