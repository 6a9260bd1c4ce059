// SPDX-License-Identifier: GPL-2.0

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
//! Emulation of the instructions that cannot run out of line followed by an
//! int3 (they would jump away before reaching it): relative jumps, calls,
//! conditional jumps, loops, returns, and register-indirect jumps and calls.
//! The kernel's x86 kprobes emulate the same set
//! (`arch/x86/kernel/kprobes/core.c: prepare_emulation()`), and likewise
//! refuse indirect branches through memory and far transfers.
//!
//! A call pushes its return address below the interrupted stack pointer. That
//! is safe from the int3 handler: for a trap from kernel mode the x86_64
//! entry code leaves a gap below the interrupted stack for exactly this (see
//! `idtentry` for `X86_TRAP_BP` in `arch/x86/entry/entry_64.S`).

use super::copy::Op;
use kernel::bindings::pt_regs;

/// General-purpose register `n` (0..=15, x86 encoding order).
fn reg(r: &pt_regs, n: u8) -> usize {
    match n {
        0 => r.ax,
        1 => r.cx,
        2 => r.dx,
        3 => r.bx,
        4 => r.sp,
        5 => r.bp,
        6 => r.si,
        7 => r.di,
        8 => r.r8,
        9 => r.r9,
        10 => r.r10,
        11 => r.r11,
        12 => r.r12,
        13 => r.r13,
        14 => r.r14,
        _ => r.r15,
    }
}

/// RFLAGS bits.
const CF: usize = 1 << 0;
const PF: usize = 1 << 2;
const ZF: usize = 1 << 6;
const SF: usize = 1 << 7;
const OF: usize = 1 << 11;

/// Evaluates condition code `cc` (the low nibble of Jcc) against `flags`.
pub(crate) fn condition_holds(flags: usize, cc: u8) -> bool {
    let f = |m: usize| flags & m != 0;
    let r = match cc >> 1 {
        0 => f(OF),
        1 => f(CF),
        2 => f(ZF),
        3 => f(CF) || f(ZF),
        4 => f(SF),
        5 => f(PF),
        6 => f(SF) != f(OF),
        _ => f(ZF) || f(SF) != f(OF),
    };
    r != (cc & 1 == 1)
}

/// Pushes `v` below the interrupted stack pointer (see the module docs).
fn push(r: &mut pt_regs, v: usize) {
    // Register arithmetic wraps as the CPU's does.
    r.sp = r.sp.wrapping_sub(8);
    // SAFETY: the int3 entry left a gap below the interrupted kernel stack;
    // `sp` is 8-byte aligned kernel stack memory.
    unsafe { core::ptr::write(r.sp as *mut usize, v) };
}

/// Carries out `op` for the instruction at `addr` of length `len`.
pub(crate) fn run(op: Op, addr: usize, len: usize, r: &mut pt_regs) {
    let next = addr.wrapping_add(len);
    r.ip = match op {
        Op::Jmp { target } => target,
        Op::Call { target } => {
            push(r, next);
            target
        }
        Op::Jcc { cc, target } => {
            if condition_holds(r.flags, cc) {
                target
            } else {
                next
            }
        }
        Op::Loop { kind, ecx, target } => {
            let taken = if kind == 3 {
                // jrcxz / jecxz: no decrement.
                if ecx {
                    r.cx as u32 == 0
                } else {
                    r.cx == 0
                }
            } else {
                let nonzero = if ecx {
                    // A 32-bit count writes ECX, zero-extended (as QEMU and
                    // Bochs do; compilers never emit this form).
                    let c = (r.cx as u32).wrapping_sub(1);
                    r.cx = c as usize;
                    c != 0
                } else {
                    r.cx = r.cx.wrapping_sub(1);
                    r.cx != 0
                };
                let zf = r.flags & ZF != 0;
                match kind {
                    0 => nonzero && !zf, // loopne
                    1 => nonzero && zf,  // loope
                    _ => nonzero,        // loop
                }
            };
            if taken {
                target
            } else {
                next
            }
        }
        Op::Ret { pop } => {
            // SAFETY: `sp` points at the return address on the interrupted
            // kernel stack (the instruction is a near return).
            let ret = unsafe { core::ptr::read(r.sp as *const usize) };
            r.sp = r.sp.wrapping_add(8).wrapping_add(pop);
            ret
        }
        Op::JmpReg { reg: n } => reg(r, n),
        Op::CallReg { reg: n } => {
            // Read the target first: `call *%rsp` would see the pushed value.
            let t = reg(r, n);
            push(r, next);
            t
        }
    };
}
