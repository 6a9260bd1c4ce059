// SPDX-License-Identifier: GPL-2.0

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
//! Simulation of the instructions that cannot run out of line: PC-relative
//! address computation, branches and literal loads (the kernel's
//! `arch/arm64/kernel/probes/simulate-insn.c` does the same set).

use super::decode::{Class, LitKind};
use super::regs;
use kernel::bindings;

/// `xN` for N in 0..=30; 31 reads as zero (XZR) in these encodings.
fn get(r: &bindings::pt_regs, n: u8) -> u64 {
    regs::x(r, n as usize).unwrap_or(0) as u64
}

/// Writes `xN`; 31 (XZR) discards.
fn set(r: &mut bindings::pt_regs, n: u8, v: u64) {
    regs::set_x(r, n as usize, v as usize);
}

fn target(pc: usize, offset: i64) -> usize {
    (pc as i64).wrapping_add(offset) as usize
}

/// Evaluates an A64 condition code against PSTATE.NZCV.
fn condition_holds(pstate: usize, cond: u8) -> bool {
    let n = pstate >> 31 & 1 == 1;
    let z = pstate >> 30 & 1 == 1;
    let c = pstate >> 29 & 1 == 1;
    let v = pstate >> 28 & 1 == 1;
    let r = match cond >> 1 {
        0 => z,
        1 => c,
        2 => n,
        3 => v,
        4 => c && !z,
        5 => n == v,
        6 => n == v && !z,
        _ => true,
    };
    // Odd codes negate, except 0b1111 (AL/NV: always).
    if cond & 1 == 1 && cond != 0xf {
        !r
    } else {
        r
    }
}

/// Reads `size` bytes at `addr` for a literal load; a fault reads zero (the
/// literal pool is kernel rodata/text, always mapped).
fn load(addr: usize, size: usize) -> u64 {
    let mut v = 0u64;
    // SAFETY: a nofault copy into a local of at least `size` bytes.
    let _ = unsafe {
        bindings::copy_from_kernel_nofault((&mut v as *mut u64).cast(), addr as *const _, size)
    };
    v
}

/// Performs `class` as if executed at `pc`, updating `r` (pc included).
pub(super) fn run(class: Class, pc: usize, r: &mut bindings::pt_regs) {
    let next = pc.wrapping_add(4);
    let new_pc = match class {
        Class::Adr { rd, imm } => {
            set(r, rd, target(pc, imm) as u64);
            next
        }
        Class::Adrp { rd, imm } => {
            set(r, rd, target(pc & !0xfff, imm) as u64);
            next
        }
        Class::B { offset } => target(pc, offset),
        Class::Bl { offset } => {
            set(r, 30, next as u64);
            target(pc, offset)
        }
        Class::BCond { cond, offset } => {
            if condition_holds(regs::flags(r), cond) {
                target(pc, offset)
            } else {
                next
            }
        }
        Class::Cbz {
            sf,
            nonzero,
            rt,
            offset,
        } => {
            let v = get(r, rt);
            let v = if sf { v } else { v & 0xffff_ffff };
            if (v != 0) == nonzero {
                target(pc, offset)
            } else {
                next
            }
        }
        Class::Tbz {
            nonzero,
            rt,
            bit,
            offset,
        } => {
            if (get(r, rt) >> bit & 1 == 1) == nonzero {
                target(pc, offset)
            } else {
                next
            }
        }
        Class::LdrLit { kind, rt, offset } => {
            let at = target(pc, offset);
            let v = match kind {
                LitKind::W => load(at, 4) & 0xffff_ffff,
                LitKind::X => load(at, 8),
                LitKind::Sw => load(at, 4) as u32 as i32 as i64 as u64,
            };
            set(r, rt, v);
            next
        }
        Class::Br { rn } | Class::Ret { rn } => get(r, rn) as usize,
        Class::Blr { rn } => {
            // Read the target before x30 changes (BLR x30 is legal).
            let t = get(r, rn) as usize;
            set(r, 30, next as u64);
            t
        }
        Class::Steppable | Class::Reject(_) => next,
    };
    regs::set_ip(r, new_pc);
}
