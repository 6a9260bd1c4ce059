// SPDX-License-Identifier: GPL-2.0

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
//! AArch64 instruction classifier for kprobes.
//!
//! A kprobe on arm64 replaces the probed instruction with a `BRK`. When the
//! `BRK` is hit the engine must do one of three things with the original
//! instruction, and [`classify`] tells which:
//!
//! * [`Class::Steppable`]: copy it unchanged to an out-of-line (XOL) slot,
//!   followed by a second `BRK`, and execute it there;
//! * one of the simulated classes ([`Class::Adr`], [`Class::Adrp`],
//!   [`Class::B`], [`Class::Bl`], [`Class::BCond`], [`Class::Cbz`],
//!   [`Class::Tbz`], [`Class::LdrLit`], [`Class::Br`], [`Class::Blr`],
//!   [`Class::Ret`]): the instruction reads or writes the PC, so executing it
//!   at another address would be wrong; the engine simulates it on the saved
//!   registers, using the fields decoded here;
//! * [`Class::Reject`]: the instruction must not be probed, for the given
//!   [`Reason`].
//!
//! # Rules
//!
//! The rules are those of Linux's own arm64 kprobes (6.12:
//! `arch/arm64/kernel/probes/decode-insn.c`, `aarch64_insn_is_steppable()`
//! and the `aarch64_insn_is_*()` encodings of `arch/arm64/include/asm/insn.h`):
//!
//! * `LDR (literal)` (W and X), `LDRSW (literal)`, `ADR`, `ADRP`, `B`, `BL`,
//!   `B.cond` (including `BC.cond`), `CBZ`/`CBNZ`, `TBZ`/`TBNZ`, `BR`, `BLR`
//!   and `RET` are simulated;
//! * the pointer-authenticated branches (`BRAA`, `BRAAZ`, `BLRAA`, `RETAA`,
//!   ... and their B-key forms), `PRFM (literal)`, exception generation
//!   (the whole `SVC`/`HVC`/`SMC`/`BRK`/`HLT`/`DCPS` group), `ERET`,
//!   `ERETAA`/`ERETAB`, `MSR` (immediate and register forms, which includes
//!   `MSR DAIFSet`/`DAIFClr`, `CFINV`, `SMSTART`, ...), `MRS` of `DAIF`,
//!   every `HINT` except `NOP`, `BTI`, `XPACLRI` and the `PACIA*`/`PACIB*`
//!   hints, load/store exclusive (the kernel's mask also covers `CASP`) and
//!   the `FEAT_MOPS` memory copy/set instructions are rejected;
//! * everything else is stepped out of line (`CAS`, the LSE atomics,
//!   `LDAR`/`STLR`, `MRS` of any other register, `SYS`/`DC`/`IC`/`TLBI`,
//!   barriers, ...).
//!
//! On top of that, this classifier rejects a few encodings that the kernel
//! would step (its masks predate the extensions concerned, or are loose), as
//! executing them out of line would be wrong or would fault:
//!
//! * reserved/unallocated top-level encoding groups (including `UDF`) and
//!   unallocated encodings in the branch, exception and system group
//!   (including the unconditional-branch-register space, so an unknown
//!   future branch is never stepped): [`Reason::Unallocated`];
//! * `DRPS` (an exception-return-like debug instruction):
//!   [`Reason::Eret`];
//! * `MSRR` (128-bit system register write, `FEAT_SYSREG128`):
//!   [`Reason::SystemRegWrite`];
//! * `LDR (literal, SIMD&FP)`, which loads from a PC-relative address, and
//!   the `FEAT_PAuth_LR` instructions that use the PC as a modifier or
//!   branch (`PACIASPPC`, `PACNBIASPPC`, `AUTIASPPC <label>`, `RETAASPPC`,
//!   `RETAASPPCR` and B-key forms): [`Reason::PcRelative`] or
//!   [`Reason::PacBranch`].
//!
//! The kernel additionally refuses to probe an instruction that lies inside
//! a load-exclusive/store-exclusive sequence; that depends on the
//! surrounding code, see [`in_exclusive_sequence`].
//!
//! The module is `core`-only, contains no `unsafe` and cannot panic: it only
//! uses masks, shifts by constant amounts and wrapping arithmetic.

/// The `BRK #0` encoding; `BRK #imm16` is `BRK_OPCODE | imm16 << 5`.
pub const BRK_OPCODE: u32 = 0xD420_0000;

/// Encodes `BRK #imm16`.
pub const fn brk(imm16: u16) -> u32 {
    BRK_OPCODE | ((imm16 as u32) << 5)
}

/// Encodes `B to` placed at `from`, if `to` is within its reach (±128 MiB)
/// and both addresses are 4-byte aligned.
pub const fn b(from: u64, to: u64) -> Option<u32> {
    let off = to.wrapping_sub(from) as i64;
    if (from | to) & 3 != 0 || off < -(1 << 27) || off >= (1 << 27) {
        return None;
    }
    Some(0x1400_0000 | ((off >> 2) as u32 & 0x03ff_ffff))
}

/// The words of a jump-optimized probe's detour (`opt.rs`), one slot at
/// `detour` for the instruction `orig` probed at `addr`:
///
/// ```text
///   +0   stp  x16, x17, [sp, #-16]!
///   +4   adr  x16, detour
///   +8   b    common               // the register-saving trampoline
///   +12  ldp  x16, x17, [sp], #16  // the trampoline returns here (ret x16)
///   +16  orig                      // the probed instruction, out of line
///   +20  b    addr + 4
///   +24  .quad addr
/// ```
///
/// `None` when a branch is out of reach (±128 MiB) or an address misaligned.
pub const fn detour_words(detour: u64, addr: u64, orig: u32, common: u64) -> Option<[u32; 8]> {
    let Some(to_common) = b(detour.wrapping_add(8), common) else {
        return None;
    };
    let Some(back) = b(detour.wrapping_add(20), addr.wrapping_add(4)) else {
        return None;
    };
    if addr & 3 != 0 {
        return None;
    }
    Some([
        STP_X16_X17_PRE,
        ADR_X16_MINUS_4,
        to_common,
        LDP_X16_X17_POST,
        orig,
        back,
        addr as u32,
        (addr >> 32) as u32,
    ])
}

/// The words of a probe's out-of-line slot (`insn.rs`), at `slot`, for the
/// instruction `orig` probed at `addr`:
///
/// ```text
///   +0   orig                      // stepped, all of DAIF masked
///   +4   stp  x0, x1, [sp, #-16]!
///   +8   ldr  x0, slot + 24        // the probed address
///   +12  b    post                 // the post trampoline (`post.rs`)
///   +16  orig                      // boosted: the interrupted DAIF
///   +20  b    addr + 4             // or `ss_brk` when out of reach
///   +24  .quad addr
/// ```
///
/// The flag: whether the boosted copy branches back (else it is never
/// entered). `None` when the post trampoline is out of reach (±128 MiB: the
/// slots and the trampoline are both in the engine's text) or an address
/// is misaligned.
pub const fn slot_words(
    slot: u64,
    addr: u64,
    orig: u32,
    post: u64,
    ss_brk: u32,
) -> Option<([u32; 8], bool)> {
    let Some(to_post) = b(slot.wrapping_add(12), post) else {
        return None;
    };
    if addr & 3 != 0 {
        return None;
    }
    let back = b(
        slot.wrapping_add(SLOT_BOOST as u64).wrapping_add(4),
        addr.wrapping_add(4),
    );
    let end = match back {
        Some(w) => w,
        None => ss_brk,
    };
    Some((
        [
            orig,
            STP_X0_X1_PRE,
            LDR_X0_LIT16,
            to_post,
            orig,
            end,
            addr as u32,
            (addr >> 32) as u32,
        ],
        back.is_some(),
    ))
}

/// Where a slot's boosted copy is.
pub const SLOT_BOOST: usize = 16;
/// `stp x0, x1, [sp, #-16]!`.
pub const STP_X0_X1_PRE: u32 = 0xa9bf_07e0;
/// `ldr x0, pc + 16` (the address literal at slot + 24, from slot + 8).
pub const LDR_X0_LIT16: u32 = 0x5800_0080;

/// Where a detour's trampoline resumes (the pop of x16, x17).
pub const DETOUR_RESUME: usize = 12;
/// Where a detour's copy of the probed instruction is.
pub const DETOUR_COPY: usize = 16;

/// `stp x16, x17, [sp, #-16]!`.
pub const STP_X16_X17_PRE: u32 = 0xa9bf_47f0;
/// `adr x16, . - 4`.
pub const ADR_X16_MINUS_4: u32 = 0x10ff_fff0;
/// `ldp x16, x17, [sp], #16`.
pub const LDP_X16_X17_POST: u32 = 0xa8c1_47f0;

/// Whether `insn` is a BTI landing pad: `BTI` (any target), or `PACIASP`/
/// `PACIBSP`, which act as `BTI c` where BTI is on. Reached by an indirect
/// branch, such an address takes only an instruction that is a landing pad
/// itself (or a breakpoint): a `B` written there would fault.
pub const fn is_landing_pad(insn: u32) -> bool {
    // BTI {, c, j, jc}: HINT #32, #34, #36, #38.
    insn & 0xffff_ff3f == 0xd503_241f || insn == 0xd503_233f || insn == 0xd503_237f
}

/// `BR X16`, the last word of a module PLT entry.
const BR_X16: u32 = 0xD61F_0200;

/// Where a module PLT entry (veneer) at `pc` goes, if `words` is one:
/// `ADRP X16, dst; ADD X16, X16, #:lo12:dst; BR X16`, as Linux 6.12 writes
/// them (`get_plt_entry()` in `arch/arm64/kernel/module-plts.c`) for a
/// module's calls out of a `BL`'s reach (KASLR puts modules far from the
/// kernel). `None` for anything else.
pub fn plt_target(words: [u32; 3], pc: u64) -> Option<u64> {
    let [adrp, add, br] = words;
    let Class::Adrp { rd: 16, imm } = classify(adrp) else {
        return None;
    };
    // ADD (immediate), 64-bit, unshifted: Xd = X16, Xn = X16.
    if add & 0xFFC0_03FF != 0x9100_0210 || br != BR_X16 {
        return None;
    }
    let lo12 = ((add >> 10) & 0xFFF) as u64;
    Some((pc & !0xFFF).wrapping_add_signed(imm).wrapping_add(lo12))
}

/// If `insn` is a `BRK`, returns its 16-bit immediate.
pub const fn is_brk(insn: u32) -> Option<u16> {
    if insn & 0xFFE0_001F == BRK_OPCODE {
        Some(((insn >> 5) & 0xFFFF) as u16)
    } else {
        None
    }
}

/// What a kprobes engine may do with an instruction.
///
/// Offsets are byte offsets, sign-extended, relative to the address of the
/// instruction itself (for [`Class::Adrp`], relative to that address with its
/// low 12 bits cleared). Register numbers are 0-31; 31 means `XZR`/`WZR` in
/// every field here (none of these instructions can name `SP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Runs out of line unchanged.
    Steppable,
    /// `ADR Xd, pc + imm`.
    Adr {
        /// Destination register.
        rd: u8,
        /// Byte offset from the instruction's address (±1 MiB).
        imm: i64,
    },
    /// `ADRP Xd, (pc & !0xfff) + imm`.
    Adrp {
        /// Destination register.
        rd: u8,
        /// Byte offset (a multiple of 4096, ±4 GiB) from the instruction's
        /// address with its low 12 bits cleared.
        imm: i64,
    },
    /// `B pc + offset`.
    B {
        /// Branch offset (±128 MiB).
        offset: i64,
    },
    /// `BL pc + offset` (`X30 = pc + 4`).
    Bl {
        /// Branch offset (±128 MiB).
        offset: i64,
    },
    /// `B.cond pc + offset`, and `BC.cond` (`FEAT_HBC`), which behaves the
    /// same.
    BCond {
        /// Condition code (0 = `EQ` ... 14 = `AL`, 15 = `NV`, also always).
        cond: u8,
        /// Branch offset when taken (±1 MiB).
        offset: i64,
    },
    /// `CBZ`/`CBNZ Rt, pc + offset`.
    Cbz {
        /// 64-bit (`Xt`) compare if set, else 32-bit (`Wt`).
        sf: bool,
        /// `CBNZ` if set, else `CBZ`.
        nonzero: bool,
        /// Register compared with zero.
        rt: u8,
        /// Branch offset when taken (±1 MiB).
        offset: i64,
    },
    /// `TBZ`/`TBNZ Rt, #bit, pc + offset`.
    Tbz {
        /// `TBNZ` if set, else `TBZ`.
        nonzero: bool,
        /// Register tested.
        rt: u8,
        /// Bit number tested, 0-63.
        bit: u8,
        /// Branch offset when taken (±32 KiB).
        offset: i64,
    },
    /// `LDR Wt/Xt, pc + offset` or `LDRSW Xt, pc + offset`.
    LdrLit {
        /// Access size and extension.
        kind: LitKind,
        /// Destination register.
        rt: u8,
        /// Offset of the literal (±1 MiB).
        offset: i64,
    },
    /// `BR Xn`.
    Br {
        /// Register holding the target.
        rn: u8,
    },
    /// `BLR Xn` (`X30 = pc + 4`; the target is read first, so `BLR X30`
    /// branches to the old `X30`).
    Blr {
        /// Register holding the target.
        rn: u8,
    },
    /// `RET Xn` (usually `X30`).
    Ret {
        /// Register holding the target.
        rn: u8,
    },
    /// Must not be probed.
    Reject(Reason),
}

/// The kind of a simulated literal load ([`Class::LdrLit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LitKind {
    /// `LDR Wt, label`: 32-bit load, zero-extended into `Xt`.
    W,
    /// `LDR Xt, label`: 64-bit load.
    X,
    /// `LDRSW Xt, label`: 32-bit load, sign-extended into `Xt`.
    Sw,
}

impl LitKind {
    /// Number of bytes loaded (4 or 8).
    pub const fn size(self) -> usize {
        match self {
            LitKind::X => 8,
            LitKind::W | LitKind::Sw => 4,
        }
    }
}

/// Why an instruction must not be probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Load/store exclusive (`LDXR`, `STXR`, `LDAXR`, `STLXR`, `LDXP`,
    /// `STXP`, ... and, through the kernel's mask, `CASP*`): the exclusive
    /// monitor does not survive the trap, so the sequence would never
    /// complete.
    Exclusive,
    /// `FEAT_MOPS` memory copy/set (`CPY*`, `SET*`): the prologue, main and
    /// epilogue instructions must be consecutive in memory.
    Mops,
    /// Exception generation: `SVC`, `HVC`, `SMC`, `BRK`, `HLT`, `DCPS1-3`,
    /// `TCANCEL` and the rest of that encoding group.
    ExceptionGen,
    /// Exception return: `ERET`, `ERETAA`, `ERETAB`, and `DRPS`.
    Eret,
    /// System register / PSTATE write: `MSR` (immediate), which includes
    /// `MSR DAIFSet`/`DAIFClr`, `CFINV`, `AXFLAG`, `XAFLAG`, `SMSTART`;
    /// `MSR` (register); `MSRR`.
    SystemRegWrite,
    /// `MRS Xt, DAIF`: the interrupt mask differs while stepping.
    DaifRead,
    /// A `HINT` other than `NOP`, `BTI*`, `XPACLRI`, `PACIA*`/`PACIB*`
    /// (for example `WFE`, `WFI`, `YIELD`, `SEV`, `AUTIASP`, `ESB`, `CSDB`).
    Hint,
    /// Pointer-authenticated branch: `BRAA`, `BRAB`, `BRAAZ`, `BRABZ`,
    /// `BLRAA`, `BLRAB`, `BLRAAZ`, `BLRABZ`, `RETAA`, `RETAB`, and the
    /// `FEAT_PAuth_LR` returns `RETAASPPC`, `RETABSPPC`, `RETAASPPCR`,
    /// `RETABSPPCR`. Not simulated (neither by the kernel).
    PacBranch,
    /// PC-relative but not simulated: `PRFM (literal)`, `LDR (literal,
    /// SIMD&FP)`, and the `FEAT_PAuth_LR` instructions using the PC as a
    /// modifier (`PACIASPPC`, `PACIBSPPC`, `PACNBIASPPC`, `PACNBIBSPPC`,
    /// `AUTIASPPC <label>`, `AUTIBSPPC <label>`).
    PcRelative,
    /// Reserved or unallocated encoding (including `UDF`), or an unknown
    /// encoding in the branch, exception and system group.
    Unallocated,
}

impl Reason {
    /// A short human-readable description, for log messages.
    pub const fn describe(self) -> &'static str {
        match self {
            Reason::Exclusive => "load/store exclusive",
            Reason::Mops => "memory copy/set (FEAT_MOPS)",
            Reason::ExceptionGen => "exception-generating instruction",
            Reason::Eret => "exception return",
            Reason::SystemRegWrite => "system register or PSTATE write",
            Reason::DaifRead => "read of DAIF",
            Reason::Hint => "hint that cannot be stepped",
            Reason::PacBranch => "pointer-authenticated branch",
            Reason::PcRelative => "PC-relative instruction that is not simulated",
            Reason::Unallocated => "unallocated or reserved encoding",
        }
    }
}

impl Class {
    /// True for the classes the engine simulates (neither
    /// [`Class::Steppable`] nor [`Class::Reject`]).
    pub const fn is_simulated(&self) -> bool {
        !matches!(self, Class::Steppable | Class::Reject(_))
    }

    /// For an instruction at address `pc`, the PC-relative address it
    /// refers to: the branch target (when taken) of `B`, `BL`, `B.cond`,
    /// `CBZ`/`CBNZ`, `TBZ`/`TBNZ`; the address of the literal of
    /// [`Class::LdrLit`]; the value `ADR`/`ADRP` write. `None` for the
    /// other classes. Wraps around the address space like the hardware.
    pub const fn target(&self, pc: u64) -> Option<u64> {
        match *self {
            Class::Adr { imm: off, .. }
            | Class::B { offset: off }
            | Class::Bl { offset: off }
            | Class::BCond { offset: off, .. }
            | Class::Cbz { offset: off, .. }
            | Class::Tbz { offset: off, .. }
            | Class::LdrLit { offset: off, .. } => Some(pc.wrapping_add_signed(off)),
            Class::Adrp { imm, .. } => Some((pc & !0xFFF).wrapping_add_signed(imm)),
            Class::Steppable
            | Class::Br { .. }
            | Class::Blr { .. }
            | Class::Ret { .. }
            | Class::Reject(_) => None,
        }
    }
}

/// `width` bits of `insn` starting at bit `lo` (`lo + width <= 32`).
const fn bits(insn: u32, lo: u32, width: u32) -> u32 {
    // `u64` so that `width == 32` cannot overflow the mask computation.
    let mask = 1u64.wrapping_shl(width).wrapping_sub(1);
    ((insn as u64).wrapping_shr(lo) & mask) as u32
}

/// Sign-extends the low `width` bits of `value` (`1 <= width <= 32`).
const fn sext(value: u32, width: u32) -> i64 {
    let shift = 64u32.wrapping_sub(width);
    (value as i64).wrapping_shl(shift).wrapping_shr(shift)
}

/// Register field at bits `lo..lo + 5`.
const fn reg(insn: u32, lo: u32) -> u8 {
    bits(insn, lo, 5) as u8
}

/// 19-bit word offset at bits 5..24 (`B.cond`, `CBZ`, `LDR (literal)`).
const fn imm19_offset(insn: u32) -> i64 {
    sext(bits(insn, 5, 19) << 2, 21)
}

/// `(insn & mask) == value`.
const fn is(insn: u32, mask: u32, value: u32) -> bool {
    insn & mask == value
}

/// Load exclusive (`LDXR`, `LDAXR`, `LDXP`, `LDAXP`, byte and halfword
/// forms), as the kernel's `aarch64_insn_is_load_ex()` recognises it: bits
/// 29:24 = `001000` with L (bit 22) set, which also matches `LDAR`,
/// `LDLAR`, `CASA`, `CASAL`, `CASPA` and `CASPAL`.
pub const fn is_load_exclusive(insn: u32) -> bool {
    is(insn, 0x3F40_0000, 0x0840_0000)
}

/// Store exclusive (`STXR`, `STLXR`, `STXP`, `STLXP`, byte and halfword
/// forms), as the kernel's `aarch64_insn_is_store_ex()` recognises it:
/// bits 29:24 = `001000` with L (bit 22) clear, which also matches `STLR`,
/// `STLLR`, `CAS`, `CASL`, `CASP` and `CASPL`.
pub const fn is_store_exclusive(insn: u32) -> bool {
    is(insn, 0x3F40_0000, 0x0800_0000)
}

/// How many instructions before a probe point the kernel searches for an
/// open exclusive sequence (128 bytes, the architecture's recommended
/// maximum distance between a load- and a store-exclusive).
pub const MAX_ATOMIC_CONTEXT: usize = 32;

/// Whether a probe point lies inside a load-exclusive/store-exclusive
/// sequence, where the kernel refuses to probe (even a steppable or
/// simulated instruction: the trap would clear the exclusive monitor and
/// the sequence would retry forever).
///
/// `preceding` holds the instructions before the probe point, in address
/// order, ending with the one just before it; the kernel passes at most
/// [`MAX_ATOMIC_CONTEXT`] of them and never crosses the start of the
/// enclosing function. Scanning backwards, a store exclusive closes the
/// question (not inside), a load exclusive opens it (inside).
pub fn in_exclusive_sequence(preceding: &[u32]) -> bool {
    for &insn in preceding.iter().rev().take(MAX_ATOMIC_CONTEXT) {
        if is_store_exclusive(insn) {
            return false;
        }
        if is_load_exclusive(insn) {
            return true;
        }
    }
    false
}

/// Classifies one A64 instruction (a little-endian instruction word, as
/// read with `u32::from_le_bytes`).
pub fn classify(insn: u32) -> Class {
    // Top-level decode: op0 = bit 31, op1 = bits 28:25.
    let op1 = bits(insn, 25, 4);
    match op1 {
        // Reserved (UDF) when bit 31 is clear; SME when set.
        0b0000 if insn & 0x8000_0000 == 0 => Class::Reject(Reason::Unallocated),
        0b0001 | 0b0011 => Class::Reject(Reason::Unallocated),
        // Data processing - immediate.
        0b1000 | 0b1001 => dp_immediate(insn),
        // Branches, exception generating and system instructions.
        0b1010 | 0b1011 => branch_system(insn),
        // Loads and stores: x1x0.
        0b0100 | 0b0110 | 0b1100 | 0b1110 => load_store(insn),
        // Data processing - register: x101.
        0b0101 | 0b1101 => dp_register(insn),
        // SME (0000 with bit 31 set), SVE (0010), SIMD&FP (x111).
        _ => Class::Steppable,
    }
}

/// Data processing - immediate: `ADR`/`ADRP` and `AUTIASPPC <label>`.
fn dp_immediate(insn: u32) -> Class {
    if is(insn, 0x1F00_0000, 0x1000_0000) {
        // immhi (bits 23:5) : immlo (bits 30:29), 21 bits signed.
        let imm = sext((bits(insn, 5, 19) << 2) | bits(insn, 29, 2), 21);
        let rd = reg(insn, 0);
        return if insn & 0x8000_0000 == 0 {
            Class::Adr { rd, imm }
        } else {
            Class::Adrp {
                rd,
                imm: imm.wrapping_shl(12),
            }
        };
    }
    // Data-processing (1 source immediate), FEAT_PAuth_LR: AUTIASPPC and
    // AUTIBSPPC with a PC-relative label (the rest of the group is
    // unallocated; rejected the same way).
    if is(insn, 0xFF80_0000, 0xF380_0000) {
        return Class::Reject(Reason::PcRelative);
    }
    Class::Steppable
}

/// Data processing - register: only the `FEAT_PAuth_LR` signing
/// instructions that use their own address as a modifier are special.
fn dp_register(insn: u32) -> Class {
    match insn {
        // PACNBIASPPC, PACNBIBSPPC, PACIASPPC, PACIBSPPC.
        0xDAC1_83FE | 0xDAC1_87FE | 0xDAC1_A3FE | 0xDAC1_A7FE => Class::Reject(Reason::PcRelative),
        _ => Class::Steppable,
    }
}

/// Loads and stores: literal loads, exclusives and `FEAT_MOPS`.
fn load_store(insn: u32) -> Class {
    // Load register (literal): opc 011 V 00 imm19 Rt.
    if is(insn, 0x3B00_0000, 0x1800_0000) {
        let simd = insn & 0x0400_0000 != 0;
        let kind = match (simd, bits(insn, 30, 2)) {
            (false, 0b00) => LitKind::W,
            (false, 0b01) => LitKind::X,
            (false, 0b10) => LitKind::Sw,
            // PRFM (literal); LDR (literal, SIMD&FP) St/Dt/Qt (opc 11:
            // unallocated).
            _ => return Class::Reject(Reason::PcRelative),
        };
        return Class::LdrLit {
            kind,
            rt: reg(insn, 0),
            offset: imm19_offset(insn),
        };
    }
    if is(insn, 0x3F80_0000, 0x0800_0000) {
        return Class::Reject(Reason::Exclusive);
    }
    if is(insn, 0x3B20_0C00, 0x1900_0400) {
        return Class::Reject(Reason::Mops);
    }
    Class::Steppable
}

/// Branches, exception generating and system instructions (bits 28:26 =
/// 101), split on bits 31:24.
fn branch_system(insn: u32) -> Class {
    match insn >> 24 {
        // B, BL: imm26.
        0x14..=0x17 => Class::B {
            offset: sext(bits(insn, 0, 26) << 2, 28),
        },
        0x94..=0x97 => Class::Bl {
            offset: sext(bits(insn, 0, 26) << 2, 28),
        },
        // CBZ/CBNZ, 32- and 64-bit.
        0x34 | 0x35 | 0xB4 | 0xB5 => Class::Cbz {
            sf: insn & 0x8000_0000 != 0,
            nonzero: insn & 0x0100_0000 != 0,
            rt: reg(insn, 0),
            offset: imm19_offset(insn),
        },
        // TBZ/TBNZ: bit number b5 (bit 31) : b40 (bits 23:19).
        0x36 | 0x37 | 0xB6 | 0xB7 => Class::Tbz {
            nonzero: insn & 0x0100_0000 != 0,
            rt: reg(insn, 0),
            bit: ((bits(insn, 31, 1) << 5) | bits(insn, 19, 5)) as u8,
            offset: sext(bits(insn, 5, 14) << 2, 16),
        },
        // B.cond (bit 4 clear) and BC.cond (bit 4 set), as the kernel does.
        0x54 => Class::BCond {
            cond: bits(insn, 0, 4) as u8,
            offset: imm19_offset(insn),
        },
        // Miscellaneous branch (immediate): RETAASPPC, RETABSPPC.
        0x55 if is(insn, 0xFFC0_001F, 0x5500_001F) => Class::Reject(Reason::PacBranch),
        0xD4 => Class::Reject(Reason::ExceptionGen),
        0xD5 => system(insn),
        0xD6 | 0xD7 => branch_register(insn),
        // 0x55 (rest), 0x56, 0x57, 0x74-0x77, 0xF4-0xF7.
        _ => Class::Reject(Reason::Unallocated),
    }
}

/// `DAIF` as the `op0:op1:CRn:CRm:op2` field of `MRS`/`MSR` (bits 20:5).
const SYSREG_DAIF: u32 = 0xDA11;

/// `HINT` numbers (`CRm:op2`) that the kernel steps.
const fn steppable_hint(hint: u32) -> bool {
    matches!(
        hint,
        0x00 // NOP
            | 0x07 // XPACLRI
            | 0x08 // PACIA1716
            | 0x0A // PACIB1716
            | 0x18 // PACIAZ
            | 0x19 // PACIASP
            | 0x1A // PACIBZ
            | 0x1B // PACIBSP
            | 0x20 // BTI
            | 0x22 // BTI c
            | 0x24 // BTI j
            | 0x26 // BTI jc
    )
}

/// System instructions (bits 31:24 = `0xD5`).
fn system(insn: u32) -> Class {
    // MSR (immediate): L=0, op0=00, CRn=0100, Rt=11111, any op1/CRm/op2.
    if is(insn, 0xFFF8_F01F, 0xD500_401F) {
        return Class::Reject(Reason::SystemRegWrite);
    }
    // MSR (register): L=0, op0=1x. MSRR (128-bit, not known to the
    // kernel's masks): bit 22 set, L=0, op0=1x.
    if is(insn, 0xFFF0_0000, 0xD510_0000) || is(insn, 0xFFF0_0000, 0xD550_0000) {
        return Class::Reject(Reason::SystemRegWrite);
    }
    // MRS: L=1, op0=1x.
    if is(insn, 0xFFF0_0000, 0xD530_0000) {
        return if bits(insn, 5, 16) == SYSREG_DAIF {
            Class::Reject(Reason::DaifRead)
        } else {
            Class::Steppable
        };
    }
    // HINT: op1=011, CRn=0010, Rt=11111.
    if is(insn, 0xFFFF_F01F, 0xD503_201F) {
        return if steppable_hint(bits(insn, 5, 7)) {
            Class::Steppable
        } else {
            Class::Reject(Reason::Hint)
        };
    }
    Class::Steppable
}

/// Unconditional branch (register) (bits 31:24 = `0xD6`/`0xD7`).
fn branch_register(insn: u32) -> Class {
    let rn = reg(insn, 5);
    match insn & 0xFFFF_FC1F {
        0xD61F_0000 => return Class::Br { rn },
        0xD63F_0000 => return Class::Blr { rn },
        0xD65F_0000 => return Class::Ret { rn },
        _ => {}
    }
    // ERET, ERETAA/ERETAB, DRPS.
    if matches!(insn, 0xD69F_03E0 | 0xD69F_0BFF | 0xD69F_0FFF | 0xD6BF_03E0) {
        return Class::Reject(Reason::Eret);
    }
    // BRAA/BRAB/BRAAZ/BRABZ and BLR* forms (kernel masks: op3 = 00001x,
    // any Rn and op4), RETAA/RETAB and RETAASPPCR/RETABSPPCR (Rn=11111).
    if is(insn, 0xFEFF_F800, 0xD61F_0800)
        || is(insn, 0xFEFF_F800, 0xD63F_0800)
        || is(insn, 0xFFFF_FBE0, 0xD65F_0BE0)
    {
        return Class::Reject(Reason::PacBranch);
    }
    Class::Reject(Reason::Unallocated)
}
