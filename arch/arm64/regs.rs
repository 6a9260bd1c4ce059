// SPDX-License-Identifier: GPL-2.0

//! arm64 register view over `struct pt_regs` (shared by the engine and
//! client modules through `src/api.rs`).

use kernel::bindings::{pt_regs, user_pt_regs};

fn user(r: &pt_regs) -> &user_pt_regs {
    // SAFETY: both union variants are the same plain integers (regs[31], sp,
    // pc, pstate); any bit pattern is valid.
    unsafe { &r.__bindgen_anon_1.user_regs }
}

fn user_mut(r: &mut pt_regs) -> &mut user_pt_regs {
    // SAFETY: as in `user`.
    unsafe { &mut r.__bindgen_anon_1.user_regs }
}

/// General-purpose register `xN` (0..=30).
pub fn x(r: &pt_regs, n: usize) -> Option<usize> {
    user(r).regs.get(n).map(|&v| v as usize)
}

/// Writes `xN` (0..=30); other numbers (XZR) are ignored.
pub fn set_x(r: &mut pt_regs, n: usize, v: usize) {
    if let Some(x) = user_mut(r).regs.get_mut(n) {
        *x = v as u64;
    }
}

/// The program counter.
pub fn ip(r: &pt_regs) -> usize {
    user(r).pc as usize
}

/// Sets the program counter.
pub fn set_ip(r: &mut pt_regs, v: usize) {
    user_mut(r).pc = v as u64;
}

/// The stack pointer.
pub fn sp(r: &pt_regs) -> usize {
    user(r).sp as usize
}

/// PSTATE.
pub fn flags(r: &pt_regs) -> usize {
    user(r).pstate as usize
}

/// Sets PSTATE.
pub fn set_flags(r: &mut pt_regs, v: usize) {
    user_mut(r).pstate = v as u64;
}

/// Integer argument `n` (0-based) at a function's entry, AAPCS64: x0..x7.
pub fn arg(r: &pt_regs, n: usize) -> Option<usize> {
    if n < 8 {
        x(r, n)
    } else {
        None
    }
}

/// The return value register (x0).
pub fn return_value(r: &pt_regs) -> usize {
    user(r).regs[0] as usize
}

/// Whether the trap came from user mode (EL0).
pub fn user_mode(r: &pt_regs) -> bool {
    user(r).pstate & 0xf == 0
}
