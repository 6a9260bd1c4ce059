// SPDX-License-Identifier: GPL-2.0

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
//! x86-64 instruction length decoder and classifier for kprobes.
//!
//! This module decodes *one* x86-64 instruction (64-bit mode only) and reports
//! where its parts are: prefixes, opcode map and byte, ModRM, displacement,
//! immediate and relative-branch displacement.  It also classifies the
//! instruction for a kprobes engine, which needs to know:
//!
//! * where instructions start and end, walking linearly from a function's
//!   entry (see [`decode`] and [`Insn::len`]);
//! * whether an instruction can be copied to an out-of-line slot and single
//!   stepped there (class [`Class::Plain`]), possibly after rewriting a
//!   RIP-relative `disp32` ([`Insn::rip_relative`], [`Insn::disp_off`]);
//! * whether it is a relative branch whose displacement must be rewritten or
//!   which must be emulated ([`Class::JmpRel`], [`Class::CallRel`],
//!   [`Class::Jcc`], [`Class::LoopOrJrcxz`], with [`Insn::rel_off`],
//!   [`Insn::rel_len`] and [`Insn::rel_target`]);
//! * whether it must never be probed or stepped out of line (the other
//!   classes, in particular [`Class::Unsafe`]).
//!
//! # Coverage
//!
//! Legacy prefixes (any order, repeated), REX (ignored unless it immediately
//! precedes the opcode, as on hardware), the one-byte map and the `0F`,
//! `0F 38` and `0F 3A` maps, 3DNow! (`0F 0F /r ib`, the suffix byte is
//! reported as an 8-bit immediate), VEX2/VEX3 (`C5`/`C4`, always VEX in
//! 64-bit mode, maps 1-3), EVEX (`62`, always EVEX in 64-bit mode, maps 1, 2,
//! 3, 5 and 6) and AMD XOP (`8F` with map select >= 8, maps 8, 9 and 10).
//! Opcodes that do not exist in 64-bit mode (`06`, `07`, `0E`, `16`, `17`,
//! `1E`, `1F`, `27`, `2F`, `37`, `3F`, `60`, `61`, `82`, `9A`, `CE`, `D4`,
//! `D5`, `D6`, `EA`) are rejected with [`DecodeError::Invalid`], as are
//! undefined group members whose length would be ambiguous.
//!
//! # Length semantics
//!
//! Lengths follow Intel hardware in 64-bit mode (and the `iced-x86` decoder
//! in its default, Intel, mode, against which this module is tested):
//!
//! * The operand-size prefix `66` does not shrink near relative branches
//!   (`E8`, `E9`, `0F 8x` always carry a `rel32`); AMD CPUs would decode a
//!   `rel16` there, which no compiler emits.
//! * `REX.W` wins over `66` for immediate sizes; `B8+r` takes an `imm64` with
//!   `REX.W`; the `moffs` forms `A0`-`A3` carry an 8-byte address (4 bytes
//!   with `67`).
//! * `MOV` to/from control and debug registers (`0F 20`-`0F 23`) ignore the
//!   ModRM `mod` field: they never have a displacement.
//! * An instruction may be at most [`MAX_INSN_LEN`] bytes long;
//!   [`DecodeError::TooLong`] is returned beyond that.
//!
//! The decoder is `core`-only, contains no `unsafe` and cannot panic: every
//! byte access is bounds-checked and all offset arithmetic is checked.

/// Maximum length of an x86 instruction in bytes.
pub const MAX_INSN_LEN: usize = 15;

/// Why an instruction could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The byte slice ended before the instruction did.
    Truncated,
    /// The instruction would be longer than [`MAX_INSN_LEN`] bytes.
    TooLong,
    /// The bytes do not encode a valid 64-bit mode instruction (or one whose
    /// length cannot be determined reliably).
    Invalid,
}

/// Opcode map (the "opcode page") an instruction's [`Insn::opcode`] belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpMap {
    /// One-byte opcode map.
    Legacy,
    /// Two-byte map, `0F xx` (includes 3DNow! `0F 0F`, whose real opcode is
    /// the trailing suffix byte, reported as the immediate).
    M0F,
    /// Three-byte map `0F 38 xx`.
    M0F38,
    /// Three-byte map `0F 3A xx`.
    M0F3A,
    /// VEX-encoded (`C4`/`C5`), with the map number (`mmmmm`: 1 = `0F`,
    /// 2 = `0F38`, 3 = `0F3A`).
    Vex(u8),
    /// EVEX-encoded (`62`), with the map number (`mmm`: 1, 2, 3, 5 or 6).
    Evex(u8),
    /// AMD XOP-encoded (`8F`), with the map number (8, 9 or 10).
    Xop(u8),
}

/// What a kprobes engine may do with an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Can be executed out of line followed by `int3` (after rewriting the
    /// RIP-relative `disp32` if [`Insn::rip_relative`] is set).
    Plain,
    /// `jmp rel8` / `jmp rel32` (`EB`, `E9`).
    JmpRel,
    /// `call rel32` (`E8`).
    CallRel,
    /// Conditional jump (`70`-`7F`, `0F 80`-`0F 8F`).
    Jcc,
    /// `loopne`/`loope`/`loop`/`jrcxz` (`E0`-`E3`).
    LoopOrJrcxz,
    /// Near indirect jump (`FF /4`).
    JmpIndirect,
    /// Near indirect call (`FF /2`).
    CallIndirect,
    /// Near or far return (`C3`, `C2`, `CB`, `CA`).
    Ret,
    /// `int3` (`CC`).
    Int3,
    /// `int imm8` (`CD`) and `int1`/`icebp` (`F1`).
    Int,
    /// `into` (`CE`); never produced in 64-bit mode, where `CE` is invalid.
    Into,
    /// `iret` (`CF`) and the FRED returns `erets`/`eretu` (`F2`/`F3 0F 01 CA`).
    Iret,
    /// `syscall`, `sysret`, `sysenter`, `sysexit` (`0F 05`, `0F 07`, `0F 34`, `0F 35`).
    Syscall,
    /// `pushf` (`9C`).
    Pushf,
    /// `popf` (`9D`).
    Popf,
    /// `cli` / `sti` (`FA`, `FB`).
    CliSti,
    /// Writes a segment register or base: `mov sreg` (`8E`), `pop fs`/`pop gs`,
    /// `lss`/`lfs`/`lgs`, `wrfsbase`/`wrgsbase`, `lkgs`.
    SegWrite,
    /// `hlt` (`F4`).
    Hlt,
    /// `ud2`, `ud1`, `ud0` (`0F 0B`, `0F B9`, `0F FF`).
    Ud,
    /// Must never be stepped out of line: privileged instructions that change
    /// descriptor tables, control/debug registers, MSRs, the execution mode or
    /// control flow (`lgdt`/`lidt`/`lldt`/`ltr`/`lmsw`, `mov cr,`/`mov dr,`,
    /// `wrmsr`, `clts`, `invd`, `swapgs`, VMX/SVM/SGX, `xsetbv`, CET shadow stack
    /// management, TSX `xbegin`/`xabort`/`xend`, far indirect `call`/`jmp`
    /// (`FF /3`, `FF /5`), `rsm`, `getsec`, `uiret`, ...).
    Unsafe,
}

/// A decoded instruction.  All offsets are from the first byte of the
/// instruction (the first prefix, if any).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Total length in bytes (1..=15).
    pub len: u8,
    /// Opcode map.
    pub map: OpMap,
    /// Opcode byte within [`Insn::map`].
    pub opcode: u8,
    /// ModRM byte, if the instruction has one.
    pub modrm: Option<u8>,
    /// Offset of the ModRM byte (0 when there is none).
    pub modrm_off: u8,
    /// Offset of the displacement (0 when there is none).  The 64-bit (or,
    /// with `67`, 32-bit) absolute address of the `moffs` forms `A0`-`A3` is
    /// reported as a displacement too.
    pub disp_off: u8,
    /// Displacement size in bytes: 0, 1, 4 or 8 (`moffs`).
    pub disp_len: u8,
    /// Offset of the immediate (0 when there is none).
    pub imm_off: u8,
    /// Total immediate size in bytes (`ENTER`: 3, `EXTRQ`/`INSERTQ`: 2,
    /// 3DNow!: 1 for the suffix byte, `xbegin`: its 2 or 4 byte displacement).
    /// Relative branches of the branch classes report their displacement in
    /// [`Insn::rel_off`]/[`Insn::rel_len`] instead.
    pub imm_len: u8,
    /// ModRM `mod=00 rm=101`: the `disp32` at [`Insn::disp_off`] is relative to
    /// the next instruction's address (`RIP`; `EIP` with the `67` prefix).
    pub rip_relative: bool,
    /// Offset of the branch displacement for [`Class::JmpRel`],
    /// [`Class::CallRel`], [`Class::Jcc`] and [`Class::LoopOrJrcxz`] (0 otherwise).
    pub rel_off: u8,
    /// Size of the branch displacement: 1 or 4 (0 for non-branches).
    pub rel_len: u8,
    /// A `F0` (`LOCK`) prefix is present.
    pub lock: bool,
    /// A `F2` or `F3` prefix is present (as `REP`/`REPNE` or mandatory prefix).
    pub rep: bool,
    /// The REX prefix in effect (the one immediately before the opcode).
    pub rex: Option<u8>,
    /// VEX-encoded (also set for XOP, which shares the VEX layout).
    pub vex: bool,
    /// EVEX-encoded.
    pub evex: bool,
    /// A `66` prefix is present.
    pub opsize: bool,
    /// A `67` prefix is present.
    pub addrsize: bool,
    /// The effective segment override prefix byte: the last `64`/`65` if any,
    /// else the last of `26`/`2E`/`36`/`3E` (which are no-ops in 64-bit mode).
    pub seg: Option<u8>,
    /// kprobes classification.
    pub class: Class,
    /// `movs`/`cmps`/`stos`/`lods`/`scas`/`ins`/`outs`.
    pub string_op: bool,
}

impl Insn {
    /// ModRM `mod` field (bits 7:6), if there is a ModRM byte.
    pub fn modrm_mod(&self) -> Option<u8> {
        self.modrm.map(|m| m >> 6)
    }

    /// ModRM `reg` field (bits 5:3, without REX.R), if there is a ModRM byte.
    pub fn modrm_reg(&self) -> Option<u8> {
        self.modrm.map(|m| (m >> 3) & 7)
    }

    /// ModRM `rm` field (bits 2:0, without REX.B), if there is a ModRM byte.
    pub fn modrm_rm(&self) -> Option<u8> {
        self.modrm.map(|m| m & 7)
    }

    /// Whether this is a relative branch (one of the classes that carry
    /// [`Insn::rel_off`]/[`Insn::rel_len`]).
    pub fn is_rel_branch(&self) -> bool {
        matches!(
            self.class,
            Class::JmpRel | Class::CallRel | Class::Jcc | Class::LoopOrJrcxz
        )
    }

    /// Target of a relative branch located at address `ip`, whose bytes start
    /// at `bytes[0]`.  Returns `None` for other instructions or if `bytes` is
    /// too short.
    pub fn rel_target(&self, ip: u64, bytes: &[u8]) -> Option<u64> {
        if !self.is_rel_branch() {
            return None;
        }
        let rel = read_signed(bytes, self.rel_off, self.rel_len)?;
        Some(next_ip(ip, self.len).wrapping_add(rel as u64))
    }

    /// Address referenced by a RIP-relative memory operand of the instruction
    /// located at `ip` whose bytes start at `bytes[0]` (truncated to 32 bits
    /// with the `67` prefix, as the CPU does).  `None` if not RIP-relative.
    pub fn rip_target(&self, ip: u64, bytes: &[u8]) -> Option<u64> {
        if !self.rip_relative {
            return None;
        }
        let disp = read_signed(bytes, self.disp_off, self.disp_len)?;
        let target = next_ip(ip, self.len).wrapping_add(disp as u64);
        if self.addrsize {
            Some(target & 0xFFFF_FFFF)
        } else {
            Some(target)
        }
    }
}

fn next_ip(ip: u64, len: u8) -> u64 {
    ip.wrapping_add(u64::from(len))
}

/// Reads a little-endian signed field of 1, 2 or 4 bytes.
fn read_signed(bytes: &[u8], off: u8, len: u8) -> Option<i64> {
    let start = usize::from(off);
    let end = start.checked_add(usize::from(len))?;
    let field = bytes.get(start..end)?;
    match *field {
        [a] => Some(i64::from(a as i8)),
        [a, b] => Some(i64::from(i16::from_le_bytes([a, b]))),
        [a, b, c, d] => Some(i64::from(i32::from_le_bytes([a, b, c, d]))),
        _ => None,
    }
}

/// Immediate (or immediate-like trailing field) kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Imm {
    None,
    /// imm8
    B,
    /// imm16
    W,
    /// imm32
    D,
    /// imm16 with `66` (and no REX.W), else imm32.
    Z,
    /// imm16 / imm32 / imm64 (`B8+r`: REX.W selects imm64).
    V,
    /// imm16 + imm8 (`ENTER`).
    WB,
    /// imm8 + imm8 (`EXTRQ`/`INSERTQ`).
    BB,
    /// Absolute moffs address: 8 bytes, 4 with `67` (reported as displacement).
    Moffs,
    /// rel8 branch displacement.
    Rel8,
    /// rel32 branch displacement (66 is ignored, Intel semantics).
    Rel32,
    /// `xbegin` displacement: rel16 with `66` (and no REX.W), else rel32;
    /// reported as an immediate since `xbegin` is not a branch class.
    XbeginRel,
}

/// Static properties of an opcode before its ModRM is known.
#[derive(Clone, Copy, Debug)]
struct OpInfo {
    modrm: bool,
    imm: Imm,
    class: Class,
    string_op: bool,
}

const fn info(modrm: bool, imm: Imm, class: Class) -> OpInfo {
    OpInfo {
        modrm,
        imm,
        class,
        string_op: false,
    }
}

const NONE: OpInfo = info(false, Imm::None, Class::Plain);
const M: OpInfo = info(true, Imm::None, Class::Plain);
const MB: OpInfo = info(true, Imm::B, Class::Plain);

/// Bounded cursor over the instruction bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    /// Byte at `pos + ahead` without consuming it.
    fn peek_at(&self, ahead: usize) -> Result<u8, DecodeError> {
        let off = self.pos.checked_add(ahead).ok_or(DecodeError::TooLong)?;
        if off >= MAX_INSN_LEN {
            return Err(DecodeError::TooLong);
        }
        self.bytes.get(off).copied().ok_or(DecodeError::Truncated)
    }

    /// Consumes one byte.
    fn next(&mut self) -> Result<u8, DecodeError> {
        let b = self.peek_at(0)?;
        self.skip(1)?;
        Ok(b)
    }

    /// Consumes `n` bytes, returning the offset of the first one.
    fn skip(&mut self, n: usize) -> Result<u8, DecodeError> {
        let start = self.pos;
        let end = start.checked_add(n).ok_or(DecodeError::TooLong)?;
        if end > MAX_INSN_LEN {
            return Err(DecodeError::TooLong);
        }
        if end > self.bytes.len() {
            return Err(DecodeError::Truncated);
        }
        self.pos = end;
        // start < end <= MAX_INSN_LEN, so this always fits.
        u8::try_from(start).map_err(|_| DecodeError::TooLong)
    }
}

/// Legacy prefix state.
#[derive(Clone, Copy, Debug, Default)]
struct Prefixes {
    lock: bool,
    /// Last of F2/F3, if any.
    last_rep: Option<u8>,
    opsize: bool,
    addrsize: bool,
    seg: Option<u8>,
    rex: Option<u8>,
}

impl Prefixes {
    /// Mandatory prefix selecting among SSE forms: the last `F2`/`F3`, else
    /// `66`, else 0.
    fn mandatory(&self) -> u8 {
        match self.last_rep {
            Some(b) => b,
            None if self.opsize => 0x66,
            None => 0,
        }
    }

    fn rex_w(&self) -> bool {
        matches!(self.rex, Some(r) if r & 8 != 0)
    }
}

/// Decodes one instruction (64-bit mode) from the start of `bytes`.
///
/// `bytes` may be longer than the instruction; only its first
/// [`MAX_INSN_LEN`] bytes are ever looked at.
pub fn decode(bytes: &[u8]) -> Result<Insn, DecodeError> {
    let mut c = Cursor { bytes, pos: 0 };
    let mut p = Prefixes::default();

    // Legacy and REX prefixes. A REX prefix only counts when it immediately
    // precedes the opcode: a later legacy prefix cancels it.
    let first = loop {
        let b = c.next()?;
        match b {
            0xF0 => p.lock = true,
            0xF2 | 0xF3 => p.last_rep = Some(b),
            0x66 => p.opsize = true,
            0x67 => p.addrsize = true,
            0x64 | 0x65 => p.seg = Some(b),
            0x26 | 0x2E | 0x36 | 0x3E => {
                if !matches!(p.seg, Some(0x64 | 0x65)) {
                    p.seg = Some(b);
                }
            }
            0x40..=0x4F => {
                p.rex = Some(b);
                continue;
            }
            _ => break b,
        }
        p.rex = None;
    };

    let mut insn = Insn {
        len: 0,
        map: OpMap::Legacy,
        opcode: first,
        modrm: None,
        modrm_off: 0,
        disp_off: 0,
        disp_len: 0,
        imm_off: 0,
        imm_len: 0,
        rip_relative: false,
        rel_off: 0,
        rel_len: 0,
        lock: p.lock,
        rep: p.last_rep.is_some(),
        rex: p.rex,
        vex: false,
        evex: false,
        opsize: p.opsize,
        addrsize: p.addrsize,
        seg: p.seg,
        class: Class::Plain,
        string_op: false,
    };

    let vex_like = match first {
        0xC4 | 0xC5 | 0x62 => true,
        // XOP when the map-select field (low 5 bits of the next byte) is >= 8;
        // otherwise this is `pop r/m64` (8F /0).
        0x8F => c.peek_at(0)? & 0x1F >= 8,
        _ => false,
    };

    if vex_like {
        // VEX/EVEX/XOP may not follow 66/F2/F3/F0 or REX (#UD).
        if p.rex.is_some() || p.opsize || p.last_rep.is_some() || p.lock {
            return Err(DecodeError::Invalid);
        }
        let oi = decode_vex_like(&mut c, first, &mut insn)?;
        return finish(c, p, insn, oi);
    }

    let oi = match first {
        0x0F => {
            let op2 = c.next()?;
            match op2 {
                0x38 => {
                    insn.map = OpMap::M0F38;
                    insn.opcode = c.next()?;
                    M
                }
                0x3A => {
                    insn.map = OpMap::M0F3A;
                    insn.opcode = c.next()?;
                    MB
                }
                _ => {
                    insn.map = OpMap::M0F;
                    insn.opcode = op2;
                    map_0f(op2, p.mandatory())?
                }
            }
        }
        _ => one_byte(first)?,
    };
    finish(c, p, insn, oi)
}

/// Parses the VEX2/VEX3/EVEX/XOP prefix bytes and the opcode byte.
fn decode_vex_like(c: &mut Cursor<'_>, first: u8, insn: &mut Insn) -> Result<OpInfo, DecodeError> {
    let (map, opcode) = match first {
        0xC5 => {
            insn.vex = true;
            let _p = c.next()?;
            (OpMap::Vex(1), c.next()?)
        }
        0xC4 => {
            insn.vex = true;
            let p0 = c.next()?;
            let _p1 = c.next()?;
            (OpMap::Vex(p0 & 0x1F), c.next()?)
        }
        0x8F => {
            insn.vex = true;
            let p0 = c.next()?;
            let _p1 = c.next()?;
            (OpMap::Xop(p0 & 0x1F), c.next()?)
        }
        _ => {
            insn.evex = true;
            let p0 = c.next()?;
            let p1 = c.next()?;
            let _p2 = c.next()?;
            // Pre-APX EVEX: P0 bit 3 must be 0 and P1 bit 2 must be 1 (APX
            // reuses them as B4 and ~X4; APX encodings are not supported).
            if p0 & 0x08 != 0 || p1 & 0x04 == 0 {
                return Err(DecodeError::Invalid);
            }
            (OpMap::Evex(p0 & 0x07), c.next()?)
        }
    };
    insn.map = map;
    insn.opcode = opcode;
    let vex_0f_imm8 = matches!(opcode, 0x70..=0x73 | 0xC2 | 0xC4..=0xC6);
    Ok(match map {
        OpMap::Vex(1) if opcode == 0x77 => NONE, // vzeroupper / vzeroall
        OpMap::Vex(1) | OpMap::Evex(1) if vex_0f_imm8 => MB,
        OpMap::Vex(1 | 2) | OpMap::Evex(1 | 2 | 5 | 6) | OpMap::Xop(9) => M,
        OpMap::Vex(3) | OpMap::Evex(3) | OpMap::Xop(8) => MB,
        OpMap::Xop(10) => info(true, Imm::D, Class::Plain),
        _ => return Err(DecodeError::Invalid),
    })
}

/// One-byte opcode map (everything but prefixes, `0F` and VEX/EVEX/XOP).
fn one_byte(op: u8) -> Result<OpInfo, DecodeError> {
    use Class as C;
    let z = info(false, Imm::Z, C::Plain);
    let b = info(false, Imm::B, C::Plain);
    let string = OpInfo {
        string_op: true,
        ..NONE
    };
    Ok(match op {
        // ALU ops: r/m,r / r,r/m / al,ib / eAX,iz.
        0x00..=0x3F => match op & 7 {
            0..=3 => M,
            4 => b,
            5 => z,
            // push/pop seg, daa/das/aaa/aas: invalid in 64-bit mode.
            _ => return Err(DecodeError::Invalid),
        },
        0x50..=0x5F => NONE,
        0x63 => M,
        0x68 => z,
        0x69 => info(true, Imm::Z, C::Plain),
        0x6A => b,
        0x6B => MB,
        0x6C..=0x6F => string,
        0x70..=0x7F => info(false, Imm::Rel8, C::Jcc),
        0x80 | 0x83 => MB,
        0x81 => info(true, Imm::Z, C::Plain),
        0x84..=0x8D => M,
        0x8E => info(true, Imm::None, C::SegWrite),
        0x8F => M,
        0x90..=0x99 | 0x9B | 0x9E | 0x9F => NONE,
        0x9C => info(false, Imm::None, C::Pushf),
        0x9D => info(false, Imm::None, C::Popf),
        0xA0..=0xA3 => info(false, Imm::Moffs, C::Plain),
        0xA4..=0xA7 | 0xAA..=0xAF => string,
        0xA8 => b,
        0xA9 => z,
        0xB0..=0xB7 => b,
        0xB8..=0xBF => info(false, Imm::V, C::Plain),
        0xC0 | 0xC1 => MB,
        0xC2 | 0xCA => info(false, Imm::W, C::Ret),
        0xC3 | 0xCB => info(false, Imm::None, C::Ret),
        0xC6 => MB,
        0xC7 => info(true, Imm::Z, C::Plain),
        0xC8 => info(false, Imm::WB, C::Plain),
        0xC9 => NONE,
        0xCC => info(false, Imm::None, C::Int3),
        0xCD => info(false, Imm::B, C::Int),
        0xCF => info(false, Imm::None, C::Iret),
        0xD0..=0xD3 => M,
        0xD7 => NONE,
        0xD8..=0xDF => M,
        0xE0..=0xE3 => info(false, Imm::Rel8, C::LoopOrJrcxz),
        0xE4..=0xE7 => b,
        0xE8 => info(false, Imm::Rel32, C::CallRel),
        0xE9 => info(false, Imm::Rel32, C::JmpRel),
        0xEB => info(false, Imm::Rel8, C::JmpRel),
        0xEC..=0xEF => NONE,
        0xF1 => info(false, Imm::None, C::Int),
        0xF4 => info(false, Imm::None, C::Hlt),
        0xF5 | 0xF8 | 0xF9 | 0xFC | 0xFD => NONE,
        0xF6 | 0xF7 | 0xFE | 0xFF => M,
        0xFA | 0xFB => info(false, Imm::None, C::CliSti),
        // 60, 61, 82, 9A, CE, D4, D5, D6, EA are invalid in 64-bit mode;
        // prefixes and escapes never reach here.
        _ => return Err(DecodeError::Invalid),
    })
}

/// Two-byte opcode map `0F xx`; `mp` is the mandatory prefix (0, 66, F2, F3).
fn map_0f(op: u8, mp: u8) -> Result<OpInfo, DecodeError> {
    use Class as C;
    let unsafe_none = info(false, Imm::None, C::Unsafe);
    Ok(match op {
        0x00..=0x03 | 0x0D | 0x10..=0x1F => M,
        0x05 | 0x07 | 0x34 | 0x35 => info(false, Imm::None, C::Syscall),
        0x06 | 0x08 | 0x30 | 0x37 | 0xAA => unsafe_none, // clts, invd, wrmsr, getsec, rsm
        0x09 | 0x0E | 0x31..=0x33 | 0x77 | 0xA0 | 0xA2 | 0xA8 | 0xC8..=0xCF => NONE,
        0x0B => info(false, Imm::None, C::Ud),
        0x0F => MB, // 3DNow!: the suffix opcode byte follows the operands
        0x20 | 0x21 => M,
        0x22 | 0x23 => info(true, Imm::None, C::Unsafe),
        0x28..=0x2F | 0x40..=0x6F | 0x74..=0x76 | 0x79 | 0x7C..=0x7F => M,
        0x70..=0x73 => MB,
        0x78 => match mp {
            0x66 | 0xF2 => info(true, Imm::BB, C::Plain), // extrq / insertq
            0xF3 => return Err(DecodeError::Invalid),
            _ => M, // vmread
        },
        0x80..=0x8F => info(false, Imm::Rel32, C::Jcc),
        0x90..=0x9F | 0xA3 | 0xA5 | 0xAB | 0xAD..=0xB1 | 0xB3 | 0xB6 | 0xB7 => M,
        0xBB..=0xC1 | 0xC3 | 0xC7 | 0xD0..=0xFE => M,
        0xA1 | 0xA9 => info(false, Imm::None, C::SegWrite), // pop fs / pop gs
        0xA4 | 0xAC | 0xBA | 0xC2 | 0xC4..=0xC6 => MB,
        0xB2 | 0xB4 | 0xB5 => info(true, Imm::None, C::SegWrite), // lss / lfs / lgs
        // VIA PadLock: xsha*/montmul (F3 0F A6 /r), xstore/xcrypt* (0F A7 /r),
        // register-form ModRM only.
        0xA6 | 0xA7 => M,
        // popcnt; without F3 this is IA-64 jmpe, which does not exist.
        0xB8 if mp == 0xF3 => M,
        0xB9 | 0xFF => info(true, Imm::None, C::Ud), // ud1 / ud0
        // 04, 0A, 0C, 24-27, 36, 39, 3B-3F, 7A, 7B, B8 w/o F3.
        _ => return Err(DecodeError::Invalid),
    })
}

/// Reads ModRM, SIB, displacement and immediate, refines group opcodes and
/// produces the final [`Insn`].
fn finish(
    mut c: Cursor<'_>,
    p: Prefixes,
    mut insn: Insn,
    mut oi: OpInfo,
) -> Result<Insn, DecodeError> {
    if oi.modrm {
        let modrm_off = c.skip(0)?;
        let m = c.next()?;
        insn.modrm = Some(m);
        insn.modrm_off = modrm_off;
        refine(&insn, &mut oi, m, p.mandatory())?;
        let md = m >> 6;
        let rm = m & 7;
        // MOV to/from CR/DR ignore `mod`: always register operands.
        let reg_only = insn.map == OpMap::M0F && matches!(insn.opcode, 0x20..=0x23);
        if md != 3 && !reg_only {
            let mut disp = match md {
                1 => 1,
                2 => 4,
                _ => 0,
            };
            if rm == 4 {
                let sib = c.next()?;
                if md == 0 && sib & 7 == 5 {
                    disp = 4;
                }
            } else if md == 0 && rm == 5 {
                disp = 4;
                insn.rip_relative = true;
            }
            if disp != 0 {
                insn.disp_off = c.skip(disp)?;
                insn.disp_len = disp as u8;
            }
        }
    }

    insn.class = oi.class;
    insn.string_op = oi.string_op;

    let z = if p.opsize && !p.rex_w() { 2 } else { 4 };
    let (imm, rel) = match oi.imm {
        Imm::None => (0, 0),
        Imm::B => (1, 0),
        Imm::W => (2, 0),
        Imm::D => (4, 0),
        Imm::Z | Imm::XbeginRel => (z, 0),
        Imm::V => {
            if p.rex_w() {
                (8, 0)
            } else {
                (z, 0)
            }
        }
        Imm::WB => (3, 0),
        Imm::BB => (2, 0),
        Imm::Moffs => {
            let len = if p.addrsize { 4 } else { 8 };
            insn.disp_off = c.skip(len)?;
            insn.disp_len = len as u8;
            (0, 0)
        }
        Imm::Rel8 => (0, 1),
        Imm::Rel32 => (0, 4),
    };
    if imm != 0 {
        insn.imm_off = c.skip(imm)?;
        insn.imm_len = imm as u8;
    }
    if rel != 0 {
        insn.rel_off = c.skip(rel)?;
        insn.rel_len = rel as u8;
    }
    insn.len = c.skip(0)?;
    Ok(insn)
}

/// Group opcodes: validity, immediate and class depend on ModRM.
fn refine(insn: &Insn, oi: &mut OpInfo, m: u8, mp: u8) -> Result<(), DecodeError> {
    use Class as C;
    let md = m >> 6;
    let reg = (m >> 3) & 7;
    let invalid = Err(DecodeError::Invalid);
    match (insn.map, insn.opcode) {
        (OpMap::Legacy, 0x8C) if reg > 5 => return invalid,
        (OpMap::Legacy, 0x8D) if md == 3 => return invalid,
        (OpMap::Legacy, 0x8E) if reg == 1 || reg > 5 => return invalid,
        (OpMap::Legacy, 0x8F) if reg != 0 => return invalid,
        (OpMap::Legacy, 0xC6 | 0xC7) => match (reg, m) {
            (0, _) => {}
            (_, 0xF8) => {
                // xabort imm8 / xbegin rel16/32
                oi.class = C::Unsafe;
                if insn.opcode == 0xC7 {
                    oi.imm = Imm::XbeginRel;
                }
            }
            _ => return invalid,
        },
        (OpMap::Legacy, 0xF6) if reg > 1 => oi.imm = Imm::None,
        (OpMap::Legacy, 0xF7) if reg > 1 => oi.imm = Imm::None,
        (OpMap::Legacy, 0xF7) => oi.imm = Imm::Z,
        (OpMap::Legacy, 0xF6) => oi.imm = Imm::B,
        (OpMap::Legacy, 0xFE) if reg > 1 => return invalid,
        (OpMap::Legacy, 0xFF) => match reg {
            2 => oi.class = C::CallIndirect,
            4 => oi.class = C::JmpIndirect,
            // far call/jmp need a memory operand
            3 | 5 if md == 3 => return invalid,
            3 | 5 => oi.class = C::Unsafe,
            7 => return invalid,
            _ => {}
        },
        (OpMap::M0F, 0xA6 | 0xA7) if md != 3 => return invalid,
        (OpMap::M0F, 0x00) => oi.class = group6_class(reg, mp),
        (OpMap::M0F, 0x01) => oi.class = group7_class(m, mp),
        (OpMap::M0F, 0xAE) => oi.class = group15_class(m, mp),
        // F3 0F C7 /6 (memory) is vmxon
        (OpMap::M0F, 0xC7) if reg == 6 && md != 3 && mp == 0xF3 => oi.class = C::Unsafe,
        _ => {}
    }
    Ok(())
}

/// `0F 00 /reg`: sldt/str/verr/verw are harmless; lldt/ltr are not; lkgs
/// writes the GS base.
fn group6_class(reg: u8, mp: u8) -> Class {
    match reg {
        0 | 1 | 4 | 5 => Class::Plain,
        6 if mp == 0xF2 => Class::SegWrite,
        _ => Class::Unsafe,
    }
}

/// `0F 01` (group 7).
fn group7_class(m: u8, mp: u8) -> Class {
    let reg = (m >> 3) & 7;
    if m >> 6 != 3 {
        // sgdt, sidt, smsw, invlpg are harmless; lgdt, lidt, lmsw and
        // rstorssp (F3 /5) are not.
        return match reg {
            0 | 1 | 4 | 7 => Class::Plain,
            _ => Class::Unsafe,
        };
    }
    match (mp, m) {
        // monitor, mwait, clac, stac, xgetbv, xtest, smsw reg, serialize,
        // rdpkru, wrpkru, rdtscp, monitorx, mwaitx, clzero, rdpru, invlpgb, tlbsync
        (0 | 0x66, 0xC8..=0xCB | 0xD0 | 0xD6 | 0xE0..=0xE8 | 0xEE | 0xEF | 0xF9..=0xFF) => {
            Class::Plain
        }
        // xsusldtrk, xresldtrk
        (0xF2, 0xE8 | 0xE9) => Class::Plain,
        // testui, clui, stui
        (0xF3, 0xED..=0xEF) => Class::Plain,
        // FRED erets / eretu
        (0xF2 | 0xF3, 0xCA) => Class::Iret,
        // vmcall/vmlaunch/vmresume/vmxoff, pconfig, wrmsrns, encls/enclu/enclv,
        // xsetbv, vmfunc, xend, SVM, setssbsy, saveprevssp, uiret, lmsw, swapgs...
        _ => Class::Unsafe,
    }
}

/// `0F AE` (group 15).
fn group15_class(m: u8, mp: u8) -> Class {
    let reg = (m >> 3) & 7;
    let is_reg = m >> 6 == 3;
    match (mp, reg, is_reg) {
        // wrfsbase / wrgsbase
        (0xF3, 2 | 3, true) => Class::SegWrite,
        // incssp (reg), clrssbsy (mem)
        (0xF3, 5, true) | (0xF3, 6, false) => Class::Unsafe,
        _ => Class::Plain,
    }
}

/// Whether the copy may run with interrupts on and return by a jump
/// (boosting, one trap per hit instead of two). As the kernel's
/// `can_boost()`, conservatively: one-byte-map instructions without `lock`,
/// `rep`, address-size or CS prefixes, except those that may trap by design
/// or touch the flags the step protects (x87 escapes, `div`/`idiv` and the
/// other F6/F7/FE group members, `pushf`, `bound`), plus a few two-byte
/// ones; no VEX/EVEX. Pure policy over the decoded instruction: the host
/// tests check it against iced-x86's flow control on the built kernels.
pub fn can_boost(insn: &Insn) -> bool {
    if insn.class != Class::Plain
        || insn.lock
        || insn.rep
        || insn.addrsize
        || insn.seg == Some(0x2e)
        || insn.vex
        || insn.evex
        || insn.string_op
    {
        return false;
    }
    match insn.map {
        OpMap::Legacy => !matches!(
            insn.opcode,
            0x62 | 0x9c | 0xd6 | 0xd8..=0xdf | 0xf6 | 0xf7 | 0xfe
        ),
        // nop, cmovcc, setcc, imul, movzx/movsx
        OpMap::M0F => {
            matches!(insn.opcode, 0x1f | 0x40..=0x4f | 0x90..=0x9f | 0xaf | 0xb6 | 0xb7 | 0xbe | 0xbf)
        }
        _ => false,
    }
}
