// SPDX-License-Identifier: GPL-2.0

//! x86_64 register view over `struct pt_regs` (shared by the engine and
//! client modules through `src/api.rs`).

use kernel::bindings::pt_regs;

/// The instruction pointer.
pub fn ip(r: &pt_regs) -> usize {
    r.ip
}

/// Sets the instruction pointer.
pub fn set_ip(r: &mut pt_regs, v: usize) {
    r.ip = v;
}

/// The stack pointer.
pub fn sp(r: &pt_regs) -> usize {
    r.sp
}

/// RFLAGS.
pub fn flags(r: &pt_regs) -> usize {
    r.flags
}

/// Integer argument `n` (0-based) at a function's entry, System V ABI:
/// rdi, rsi, rdx, rcx, r8, r9, then the stack. Returns `None` past the sixth
/// (stack arguments need a memory read; see the API issue).
pub fn arg(r: &pt_regs, n: usize) -> Option<usize> {
    [r.di, r.si, r.dx, r.cx, r.r8, r.r9].get(n).copied()
}

/// The return value register (rax).
pub fn return_value(r: &pt_regs) -> usize {
    r.ax
}

/// Whether the trap came from user mode.
pub fn user_mode(r: &pt_regs) -> bool {
    // SAFETY: every variant of the union is a plain integer.
    unsafe { r.__bindgen_anon_1.cs & 3 != 0 }
}
