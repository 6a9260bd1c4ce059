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

use super::decode::{Class, Insn, OpMap};
use kernel::bindings::pt_regs;

/// How an emulated instruction is carried out; decided at prepare time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// `jmp rel`: to `target`.
    Jmp { target: usize },
    /// `call rel`: push the next address, go to `target`.
    Call { target: usize },
    /// `jcc rel`: to `target` when condition `cc` (0..=15) holds.
    Jcc { cc: u8, target: usize },
    /// `loop`/`loope`/`loopne`/`jrcxz` (`kind` = opcode & 3), with a 32-bit
    /// counter when `ecx`.
    Loop { kind: u8, ecx: bool, target: usize },
    /// `ret` / `ret imm16`: pop the return address, then `pop` more bytes.
    Ret { pop: usize },
    /// `jmp *%reg`.
    JmpReg { reg: u8 },
    /// `call *%reg`.
    CallReg { reg: u8 },
}

/// Why an instruction cannot be emulated.
pub(crate) type Refusal = &'static str;

/// Plans the emulation of `insn` (at `addr`, bytes `b`); `Ok(None)` when it
/// needs none (runs out of line), `Err` when it cannot be probed.
pub(crate) fn plan(insn: &Insn, addr: usize, b: &[u8]) -> Result<Option<Op>, Refusal> {
    let rel = || {
        insn.rel_target(addr as u64, b)
            .map(|t| t as usize)
            .ok_or("bad branch displacement")
    };
    Ok(Some(match insn.class {
        Class::Plain => return Ok(None),
        Class::JmpRel => Op::Jmp { target: rel()? },
        Class::CallRel => Op::Call { target: rel()? },
        Class::Jcc => {
            // 70-7F (rel8) and 0F 80-8F (rel32): the condition is the low nibble.
            Op::Jcc {
                cc: insn.opcode & 0xf,
                target: rel()?,
            }
        }
        Class::LoopOrJrcxz => Op::Loop {
            kind: insn.opcode & 3,
            ecx: insn.addrsize,
            target: rel()?,
        },
        Class::Ret => match (insn.map, insn.opcode) {
            (OpMap::Legacy, 0xc3) => Op::Ret { pop: 0 },
            (OpMap::Legacy, 0xc2) => {
                let off = insn.imm_off as usize;
                let imm = b
                    .get(off..off.saturating_add(2))
                    .and_then(|i| <[u8; 2]>::try_from(i).ok())
                    .ok_or("truncated ret imm16")?;
                Op::Ret {
                    pop: u16::from_le_bytes(imm) as usize,
                }
            }
            _ => return Err("far return"),
        },
        Class::JmpIndirect | Class::CallIndirect => {
            if insn.modrm_mod() != Some(3) {
                return Err("indirect branch through memory");
            }
            if insn.addrsize || insn.opsize {
                return Err("indirect branch with a size prefix");
            }
            // rm is 0..=7; REX.B makes it r8..r15.
            let reg = insn.modrm_rm().unwrap_or(0)
                | if insn.rex.is_some_and(|r| r & 1 != 0) {
                    8
                } else {
                    0
                };
            if insn.class == Class::JmpIndirect {
                Op::JmpReg { reg }
            } else {
                Op::CallReg { reg }
            }
        }
        Class::Int3 => return Err("someone else's int3"),
        Class::Pushf | Class::Popf => {
            return Err("pushf/popf (interrupt flag is masked while stepping)")
        }
        Class::CliSti => return Err("cli/sti"),
        Class::Int | Class::Into | Class::Iret | Class::Syscall => {
            return Err("exception or privilege transfer")
        }
        Class::SegWrite => return Err("segment register write"),
        Class::Hlt => return Err("hlt"),
        Class::Ud => return Err("ud2/ud1 (the kernel's BUG() and WARN() traps)"),
        Class::Unsafe => return Err("system instruction unsafe out of line"),
    }))
}

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
