// SPDX-License-Identifier: GPL-2.0

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
//! How a probed instruction is carried out, decided when it is prepared:
//! the emulation plan of the instructions that cannot run out of line
//! ([`plan`]; `emulate.rs` runs it at a hit), and the relocated copy of
//! those that can ([`place_copy`], with [`put_rel32`] for the jumps and
//! calls around it). Pure: the host crate checks it against iced-x86 on
//! the built kernels' text (`host/tests/x86_copy.rs`).

use super::decode::{Class, Insn, OpMap};

/// How an emulated instruction is carried out; decided at prepare time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
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
pub type Refusal = &'static str;

/// Plans the emulation of `insn` (at `addr`, bytes `b`); `Ok(None)` when it
/// needs none (runs out of line), `Err` when it cannot be probed.
pub fn plan(insn: &Insn, addr: usize, b: &[u8]) -> Result<Option<Op>, Refusal> {
    let rel = || {
        insn.rel_target(addr as u64, b)
            .map(|t| t as usize)
            .ok_or("bad branch displacement")
    };
    // An address-size prefix makes a RIP-relative operand EIP-relative: its
    // address wraps at 4 GiB, and from kernel text it names the low 4 GiB
    // (user memory), so no compiler emits it there: a hand-made one is
    // refused rather than relocated.
    if insn.rip_relative && insn.addrsize {
        return Err("EIP-relative operand (address-size prefix)");
    }
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

/// Writes `op rel32` (a `call` or `jmp`) at `code[at..]`, which runs at
/// `base + at`, reaching `to`. `None` when `to` is out of a rel32's reach
/// or the five bytes do not fit.
pub fn put_rel32(code: &mut [u8], at: usize, op: u8, base: usize, to: usize) -> Option<()> {
    let next = base.checked_add(at)?.checked_add(5)?;
    let rel = i32::try_from((to as i64).wrapping_sub(next as i64)).ok()?;
    let dst = code.get_mut(at..at.checked_add(5)?)?;
    let (first, rest) = dst.split_first_mut()?;
    *first = op;
    rest.copy_from_slice(&rel.to_le_bytes());
    Some(())
}

/// Copies the instruction (`insn`, decoded from `bytes` at `addr`) to
/// `copy[at..]`, to run at `slot + at`, with a RIP-relative displacement
/// re-aimed at the original target. `None` when the target is out of the
/// displacement's reach from there or the copy does not fit.
pub fn place_copy(
    copy: &mut [u8],
    at: usize,
    insn: &Insn,
    bytes: &[u8],
    addr: usize,
    slot: usize,
) -> Option<()> {
    let len = insn.len as usize;
    copy.get_mut(at..at.checked_add(len)?)?
        .copy_from_slice(bytes.get(..len)?);
    if insn.rip_relative {
        if insn.addrsize {
            return None; // EIP-relative: see `plan`
        }
        let off = at.checked_add(insn.disp_off as usize)?;
        let field = copy.get_mut(off..off.checked_add(4)?)?;
        let disp = i32::from_le_bytes(<[u8; 4]>::try_from(&*field).ok()?);
        // The target, `addr + len + disp`, seen from `slot + at + len`.
        let moved = (addr as i64).wrapping_sub(slot.checked_add(at)? as i64);
        let new = i32::try_from(i64::from(disp).checked_add(moved)?).ok()?;
        field.copy_from_slice(&new.to_le_bytes());
    }
    Some(())
}
