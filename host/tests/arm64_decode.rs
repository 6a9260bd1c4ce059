//! Tests for `arch/arm64/decode.rs`.
//!
//! * hand-written cases with exact expectations (encodings from `llvm-mc`);
//! * a reference model of Linux 6.12's arm64 kprobes decision
//!   (`arm_kprobe_decode_insn()` / `aarch64_insn_is_steppable()`, written
//!   from its masks): our classifier must make the same step / simulate /
//!   reject decision, with the same simulation handler, except for the
//!   documented extra rejections ([`documented_deviation`]);
//! * randomized, exhaustive (system and branch-register space) and
//!   `vmlinux` / `.ko` cross-checks against the `yaxpeax-arm` A64 decoder:
//!   whenever it decodes a PC-relative or branch instruction we must
//!   simulate it with the same registers and offset (or reject it where the
//!   kernel does); exclusive, exception-generating, exception-return,
//!   `MSR`, hint and authenticated-branch instructions must get the
//!   matching [`Reason`]; every other valid instruction must be steppable;
//!   and an encoding it rejects as invalid must never be simulated (we step
//!   those the kernel would step, and reject the rest).
//!
//! The `vmlinux` scan runs when `KP_VMLINUX_ARM64` names an arm64 `vmlinux`,
//! the module scan when `KP_MODULES_ARM64` lists `.ko` files (`:`-separated).
//! Offsets are compared in both: the two decoders read the same bits (in a
//! `.ko`, branch offsets are the unrelocated placeholders, usually 0).

mod common;

use std::collections::BTreeMap;

use kprobes_logic::arm64_decode::{
    b, brk, classify, detour_words, in_exclusive_sequence, is_brk, is_landing_pad,
    is_load_exclusive, is_store_exclusive, plt_target, slot_words, Class, LitKind, Reason,
    BRK_OPCODE, DETOUR_COPY, DETOUR_RESUME, MAX_ATOMIC_CONTEXT, SLOT_BOOST,
};
use yaxpeax_arch::{Decoder, U8Reader};
use yaxpeax_arm::armv8::a64::{InstDecoder, Instruction, Opcode, Operand, SizeCode};

// ---------------------------------------------------------------------------
// Hand-written cases
// ---------------------------------------------------------------------------

use Class::*;

const fn rej(r: Reason) -> Class {
    Reject(r)
}

/// (encoding, expected class, assembly).
const TABLE: &[(u32, Class, &str)] = &[
    // ADR / ADRP
    (0x1000_0020, Adr { rd: 0, imm: 4 }, "adr x0, .+4"),
    (0x10ff_ffe1, Adr { rd: 1, imm: -4 }, "adr x1, .-4"),
    (
        0x707f_fffe,
        Adr {
            rd: 30,
            imm: 1_048_575,
        },
        "adr x30, .+1048575",
    ),
    (
        0x1080_0002,
        Adr {
            rd: 2,
            imm: -1_048_576,
        },
        "adr x2, .-1048576",
    ),
    (0xb000_0003, Adrp { rd: 3, imm: 4096 }, "adrp x3, .+4096"),
    (0xf0ff_ffe4, Adrp { rd: 4, imm: -4096 }, "adrp x4, .-4096"),
    (
        0xf07f_ffff,
        Adrp {
            rd: 31,
            imm: 0xffff_f000,
        },
        "adrp xzr, max",
    ),
    (
        0x9080_0005,
        Adrp {
            rd: 5,
            imm: -0x1_0000_0000,
        },
        "adrp x5, min",
    ),
    // B / BL
    (
        0x15ff_ffff,
        B {
            offset: 134_217_724,
        },
        "b .+134217724",
    ),
    (
        0x1600_0000,
        B {
            offset: -134_217_728,
        },
        "b .-134217728",
    ),
    (0x1400_0000, B { offset: 0 }, "b ."),
    (0x9400_0001, Bl { offset: 4 }, "bl .+4"),
    (
        0x9600_0000,
        Bl {
            offset: -134_217_728,
        },
        "bl .-134217728",
    ),
    (
        0x95ff_ffff,
        Bl {
            offset: 134_217_724,
        },
        "bl .+134217724",
    ),
    // B.cond (every condition in the generated test below), BC.cond
    (0x5400_0040, BCond { cond: 0, offset: 8 }, "b.eq .+8"),
    (
        0x54ff_ffc1,
        BCond {
            cond: 1,
            offset: -8,
        },
        "b.ne .-8",
    ),
    (
        0x547f_ffee,
        BCond {
            cond: 14,
            offset: 1_048_572,
        },
        "b.al .+1048572",
    ),
    (
        0x5480_000f,
        BCond {
            cond: 15,
            offset: -1_048_576,
        },
        "b.nv .-1048576",
    ),
    (0x5400_0050, BCond { cond: 0, offset: 8 }, "bc.eq .+8"),
    // CBZ / CBNZ
    (
        0x3400_0065,
        Cbz {
            sf: false,
            nonzero: false,
            rt: 5,
            offset: 12,
        },
        "cbz w5, .+12",
    ),
    (
        0xb5ff_ffa6,
        Cbz {
            sf: true,
            nonzero: true,
            rt: 6,
            offset: -12,
        },
        "cbnz x6, .-12",
    ),
    (
        0xb400_003f,
        Cbz {
            sf: true,
            nonzero: false,
            rt: 31,
            offset: 4,
        },
        "cbz xzr, .+4",
    ),
    (
        0x3500_0020,
        Cbz {
            sf: false,
            nonzero: true,
            rt: 0,
            offset: 4,
        },
        "cbnz w0, .+4",
    ),
    // TBZ / TBNZ
    (
        0x3603_ffe7,
        Tbz {
            nonzero: false,
            rt: 7,
            bit: 0,
            offset: 32764,
        },
        "tbz w7, #0, .+32764",
    ),
    (
        0xb7fc_0008,
        Tbz {
            nonzero: true,
            rt: 8,
            bit: 63,
            offset: -32768,
        },
        "tbnz x8, #63, .-32768",
    ),
    (
        0xb600_0029,
        Tbz {
            nonzero: false,
            rt: 9,
            bit: 32,
            offset: 4,
        },
        "tbz x9, #32, .+4",
    ),
    (
        0x37f8_0020,
        Tbz {
            nonzero: true,
            rt: 0,
            bit: 31,
            offset: 4,
        },
        "tbnz w0, #31, .+4",
    ),
    // Literal loads
    (
        0x1800_004a,
        LdrLit {
            kind: LitKind::W,
            rt: 10,
            offset: 8,
        },
        "ldr w10, .+8",
    ),
    (
        0x58ff_ffcb,
        LdrLit {
            kind: LitKind::X,
            rt: 11,
            offset: -8,
        },
        "ldr x11, .-8",
    ),
    (
        0x987f_ffec,
        LdrLit {
            kind: LitKind::Sw,
            rt: 12,
            offset: 1_048_572,
        },
        "ldrsw x12, .+1048572",
    ),
    (
        0x5880_001f,
        LdrLit {
            kind: LitKind::X,
            rt: 31,
            offset: -1_048_576,
        },
        "ldr xzr, .-1048576",
    ),
    (
        0xd800_0080,
        rej(Reason::PcRelative),
        "prfm pldl1keep, .+16 (kernel rejects)",
    ),
    (
        0x1c00_0040,
        rej(Reason::PcRelative),
        "ldr s0, .+8 (kernel would step)",
    ),
    (0x5c00_0041, rej(Reason::PcRelative), "ldr d1, .+8"),
    (0x9cff_ffc2, rej(Reason::PcRelative), "ldr q2, .-8"),
    // Register branches
    (0xd61f_0200, Br { rn: 16 }, "br x16"),
    (0xd61f_03c0, Br { rn: 30 }, "br x30"),
    (0xd63f_0100, Blr { rn: 8 }, "blr x8"),
    (0xd63f_03c0, Blr { rn: 30 }, "blr x30"),
    (0xd65f_03c0, Ret { rn: 30 }, "ret"),
    (0xd65f_0060, Ret { rn: 3 }, "ret x3"),
    (0xd71f_0801, rej(Reason::PacBranch), "braa x0, x1"),
    (0xd61f_0c5f, rej(Reason::PacBranch), "brabz x2"),
    (0xd73f_087f, rej(Reason::PacBranch), "blraa x3, sp"),
    (0xd63f_0c9f, rej(Reason::PacBranch), "blrabz x4"),
    (0xd65f_0bff, rej(Reason::PacBranch), "retaa"),
    (0xd65f_0fff, rej(Reason::PacBranch), "retab"),
    (0xd65f_0be3, rej(Reason::PacBranch), "retaasppcr x3"),
    (0x5500_001f, rej(Reason::PacBranch), "retaasppc (label)"),
    (0xd69f_03e0, rej(Reason::Eret), "eret"),
    (0xd69f_0bff, rej(Reason::Eret), "eretaa"),
    (0xd69f_0fff, rej(Reason::Eret), "eretab"),
    (0xd6bf_03e0, rej(Reason::Eret), "drps"),
    (0xd61f_0001, rej(Reason::Unallocated), "br x0 with op4 != 0"),
    // Hints
    (0xd503_201f, Steppable, "nop"),
    (0xd503_203f, rej(Reason::Hint), "yield"),
    (0xd503_205f, rej(Reason::Hint), "wfe"),
    (0xd503_207f, rej(Reason::Hint), "wfi"),
    (0xd503_209f, rej(Reason::Hint), "sev"),
    (0xd503_20bf, rej(Reason::Hint), "sevl"),
    (0xd503_233f, Steppable, "paciasp"),
    (0xd503_237f, Steppable, "pacibsp"),
    (0xd503_23bf, rej(Reason::Hint), "autiasp"),
    (0xd503_23ff, rej(Reason::Hint), "autibsp"),
    (0xd503_231f, Steppable, "paciaz"),
    (0xd503_239f, rej(Reason::Hint), "autiaz"),
    (0xd503_211f, Steppable, "pacia1716"),
    (0xd503_219f, rej(Reason::Hint), "autia1716"),
    (0xd503_20ff, Steppable, "xpaclri"),
    (0xd503_241f, Steppable, "bti"),
    (0xd503_245f, Steppable, "bti c"),
    (0xd503_249f, Steppable, "bti j"),
    (0xd503_24df, Steppable, "bti jc"),
    (0xd503_221f, rej(Reason::Hint), "esb"),
    (0xd503_229f, rej(Reason::Hint), "csdb"),
    (0xd503_2fff, rej(Reason::Hint), "hint #127"),
    // Exclusives, atomics
    (0xc85f_7c20, rej(Reason::Exclusive), "ldxr x0, [x1]"),
    (0xc802_7c83, rej(Reason::Exclusive), "stxr w2, x3, [x4]"),
    (0x885f_fcc5, rej(Reason::Exclusive), "ldaxr w5, [x6]"),
    (0x8807_fd28, rej(Reason::Exclusive), "stlxr w7, w8, [x9]"),
    (0xc87f_0440, rej(Reason::Exclusive), "ldxp x0, x1, [x2]"),
    (
        0xc823_94c4,
        rej(Reason::Exclusive),
        "stlxp w3, x4, x5, [x6]",
    ),
    (0x085f_7c20, rej(Reason::Exclusive), "ldxrb w0, [x1]"),
    (0x4800_7c41, rej(Reason::Exclusive), "stxrh w0, w1, [x2]"),
    (
        0x4820_7c82,
        rej(Reason::Exclusive),
        "casp x0, x1, x2, x3, [x4] (kernel mask)",
    ),
    (0xc8df_fc20, Steppable, "ldar x0, [x1]"),
    (0x889f_fc20, Steppable, "stlr w0, [x1]"),
    (0xc8e0_fc41, Steppable, "casal x0, x1, [x2]"),
    (0x88a0_7c41, Steppable, "cas w0, w1, [x2]"),
    (0xf820_0041, Steppable, "ldadd x0, x1, [x2]"),
    (0xb8e0_8041, Steppable, "swpal w0, w1, [x2]"),
    // FEAT_MOPS
    (0x1901_0440, rej(Reason::Mops), "cpyfp [x0]!, [x1]!, x2!"),
    (0x19c2_0420, rej(Reason::Mops), "setp [x0]!, x1!, x2"),
    // Exception generation
    (0xd400_0001, rej(Reason::ExceptionGen), "svc #0"),
    (0xd400_0022, rej(Reason::ExceptionGen), "hvc #1"),
    (0xd400_0043, rej(Reason::ExceptionGen), "smc #2"),
    (0xd420_0080, rej(Reason::ExceptionGen), "brk #4"),
    (0xd43f_ffe0, rej(Reason::ExceptionGen), "brk #0xffff"),
    (0xd440_0000, rej(Reason::ExceptionGen), "hlt #0"),
    (0xd4a0_0001, rej(Reason::ExceptionGen), "dcps1"),
    // System
    (0xd503_42df, rej(Reason::SystemRegWrite), "msr daifset, #2"),
    (0xd503_4fff, rej(Reason::SystemRegWrite), "msr daifclr, #15"),
    (0xd500_41bf, rej(Reason::SystemRegWrite), "msr spsel, #1"),
    (0xd500_401f, rej(Reason::SystemRegWrite), "cfinv"),
    (0xd51b_4220, rej(Reason::SystemRegWrite), "msr daif, x0"),
    (
        0xd518_d081,
        rej(Reason::SystemRegWrite),
        "msr tpidr_el1, x1",
    ),
    (
        0xd558_0000,
        rej(Reason::SystemRegWrite),
        "msrr (FEAT_SYSREG128)",
    ),
    (0xd53b_4220, rej(Reason::DaifRead), "mrs x0, daif"),
    (0xd538_d081, Steppable, "mrs x1, tpidr_el1"),
    (0xd53b_4202, Steppable, "mrs x2, nzcv"),
    (0xd538_4243, Steppable, "mrs x3, currentel"),
    (0xd503_3bbf, Steppable, "dmb ish"),
    (0xd503_3f9f, Steppable, "dsb sy"),
    (0xd503_3fdf, Steppable, "isb"),
    (0xd503_3f5f, Steppable, "clrex"),
    (0xd503_30ff, Steppable, "sb"),
    (0xd50b_7e20, Steppable, "dc civac, x0"),
    (0xd508_751f, Steppable, "ic iallu"),
    (0xd508_871f, Steppable, "tlbi vmalle1"),
    // FEAT_PAuth_LR instructions using the PC
    (0xdac1_a3fe, rej(Reason::PcRelative), "paciasppc"),
    (0xdac1_83fe, rej(Reason::PcRelative), "pacnbiasppc"),
    (0xf380_001f, rej(Reason::PcRelative), "autiasppc (label)"),
    (0xdac1_901e, Steppable, "autiasppcr x0 (no PC use)"),
    // Ordinary instructions
    (0xaa1e_03e9, Steppable, "mov x9, x30"),
    (0x9100_03fd, Steppable, "mov x29, sp"),
    (0x9100_4020, Steppable, "add x0, x1, #16"),
    (0xf940_0420, Steppable, "ldr x0, [x1, #8]"),
    (0xa9bf_7bfd, Steppable, "stp x29, x30, [sp, #-16]!"),
    (0xa8c1_7bfd, Steppable, "ldp x29, x30, [sp], #16"),
    (0x1e62_2820, Steppable, "fadd d0, d1, d2"),
    (0xdac1_0000, Steppable, "pacia x0, x0 (register form)"),
    // Reserved / unallocated
    (0x0000_0000, rej(Reason::Unallocated), "udf #0"),
    (
        0x0200_0000,
        rej(Reason::Unallocated),
        "unallocated group 0001",
    ),
    (
        0x0600_0000,
        rej(Reason::Unallocated),
        "unallocated group 0011",
    ),
    (
        0x5600_0000,
        rej(Reason::Unallocated),
        "unallocated branch group",
    ),
    (
        0x7400_0000,
        rej(Reason::Unallocated),
        "unallocated branch group",
    ),
    (
        0xf700_0000,
        rej(Reason::Unallocated),
        "unallocated branch group",
    ),
];

#[test]
fn table() {
    let mut bad = Vec::new();
    for &(insn, want, asm) in TABLE {
        let got = classify(insn);
        if got != want {
            bad.push(format!("{insn:#010x} {asm}: got {got:?}, want {want:?}"));
        }
    }
    assert!(bad.is_empty(), "table mismatches:\n{}", bad.join("\n"));
    // The table itself must agree with the kernel model and the oracle.
    let mut stats = Stats::default();
    for &(insn, _, _) in TABLE {
        stats.add(insn);
    }
    stats.report("arm64 table");
}

#[test]
fn every_condition() {
    for cond in 0..16u32 {
        for (imm19, offset) in [(1u32, 4i64), (0x7_ffff, -4), (0x3_ffff, 0xf_fffc)] {
            let insn = 0x5400_0000 | (imm19 << 5) | cond;
            assert_eq!(
                classify(insn),
                BCond {
                    cond: cond as u8,
                    offset
                },
                "{insn:#010x}"
            );
        }
    }
}

#[test]
fn brk_helpers() {
    assert_eq!(brk(0), BRK_OPCODE);
    assert_eq!(brk(4), 0xd420_0080);
    assert_eq!(brk(0xffff), 0xd43f_ffe0);
    for imm in 0..=u16::MAX {
        let insn = brk(imm);
        assert_eq!(is_brk(insn), Some(imm));
        assert_eq!(classify(insn), Reject(Reason::ExceptionGen));
    }
    assert_eq!(is_brk(0xd400_0001), None); // svc #0
    assert_eq!(is_brk(0xd440_0000), None); // hlt #0
    assert_eq!(is_brk(0xd420_0001), None); // not a BRK (LL != 0)
    assert_eq!(is_brk(0xd503_201f), None); // nop
}

/// The `B` encoder the boosted copies end with: every reachable distance
/// round-trips through our classifier and through yaxpeax-arm; one step
/// past the range, or a misaligned address, gives none.
#[test]
fn b_encoder() {
    let from = 0xffff_8000_8010_0000u64;
    let mut offsets: Vec<i64> = vec![0, 4, -4, (1 << 27) - 4, -(1 << 27)];
    let mut x = 0x1234_5678_9abc_def0u64;
    for _ in 0..100_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        offsets.push(((x as i64) >> 36) & !3);
    }
    for off in offsets {
        let to = from.wrapping_add(off as u64);
        let insn = b(from, to).unwrap_or_else(|| panic!("no B for {off}"));
        assert_eq!(classify(insn), B { offset: off });
        assert_eq!(classify(insn).target(from), Some(to));
        let bytes = insn.to_le_bytes();
        let mut r = U8Reader::new(&bytes[..]);
        let d = InstDecoder::default().decode(&mut r).unwrap();
        assert_eq!(d.opcode, Opcode::B, "{insn:#010x}");
        assert_eq!(d.operands[0], Operand::PCOffset(off), "{insn:#010x}");
    }
    assert_eq!(b(from, from + (1 << 27)), None);
    assert_eq!(b(from, from - (1 << 27) - 4), None);
    assert_eq!(b(from, from + 2), None);
    assert_eq!(b(from + 2, from + 8), None);
}

#[test]
fn targets() {
    let b = classify(0x17ff_fffe); // b .-8
    assert_eq!(b, B { offset: -8 });
    assert_eq!(b.target(0x1000), Some(0xff8));
    assert!(b.is_simulated());
    let adrp = classify(0xb000_0003); // adrp x3, .+4096
    assert_eq!(
        adrp.target(0xffff_8000_1234_5678),
        Some(0xffff_8000_1234_6000)
    );
    let adr = classify(0x10ff_ffe1); // adr x1, .-4
    assert_eq!(adr.target(0), Some(u64::MAX - 3)); // wraps like hardware
    let ldr = classify(0x58ff_ffcb); // ldr x11, .-8
    assert_eq!(ldr.target(0x2000), Some(0x1ff8));
    assert_eq!(classify(0xd65f_03c0).target(0x1000), None); // ret
    assert!(classify(0xd65f_03c0).is_simulated());
    assert!(!Steppable.is_simulated());
    assert!(!Reject(Reason::Hint).is_simulated());
    assert_eq!(LitKind::X.size(), 8);
    assert_eq!(LitKind::Sw.size(), 4);
    assert!(!Reason::Unallocated.describe().is_empty());
}

/// A module PLT entry as Linux 6.12's `get_plt_entry()` writes it (encoded
/// here from the ARM ARM): `adrp x16, dst; add x16, x16, #:lo12:dst; br x16`.
fn plt_entry(pc: u64, dst: u64) -> [u32; 3] {
    let pages = ((dst >> 12) as i64).wrapping_sub((pc >> 12) as i64);
    assert!(
        (-(1 << 20)..(1 << 20)).contains(&pages),
        "{pc:#x} -> {dst:#x}"
    );
    let imm = pages as u32 & 0x1f_ffff;
    let adrp = 0x9000_0000 | ((imm & 3) << 29) | ((imm >> 2) << 5) | 16;
    let add = 0x9100_0000 | (((dst & 0xfff) as u32) << 10) | (16 << 5) | 16;
    [adrp, add, 0xd61f_0200]
}

#[test]
fn plt_targets() {
    let pc = 0xffff_8000_7a01_2ff4u64; // the last word pair of a page
    let mut dsts = vec![
        pc & !0xfff,
        (pc & !0xfff) + 0xfff,
        (pc & !0xfff).wrapping_add(((1u64 << 20) - 1) << 12) + 0xfff, // +4 GiB - 1
        (pc & !0xfff).wrapping_sub(1 << 32),                          // -4 GiB
        0xffff_8000_8001_0000,
    ];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        dsts.push(pc.wrapping_add(((x as i64) >> 31) as u64));
    }
    for dst in dsts {
        let w = plt_entry(pc, dst);
        assert_eq!(plt_target(w, pc), Some(dst), "{pc:#x} -> {dst:#x}");
        // The oracle reads the three words the same way.
        let text: Vec<String> = w
            .iter()
            .map(|&i| oracle(i).expect("decodes").to_string())
            .collect();
        assert!(text[0].starts_with("adrp x16, "), "{}", text[0]);
        assert_eq!(text[1], format!("add x16, x16, #{:#x}", dst & 0xfff));
        assert_eq!(text[2], "br x16");
    }
    // Anything else is no PLT entry.
    let good = plt_entry(pc, 0xffff_8000_8001_0123);
    let mut bad = vec![];
    for (i, v) in [
        (0, good[0] & !0x1f | 17),       // adrp x17
        (0, good[0] & !0x8000_0000),     // adr
        (1, good[1] | 1 << 22),          // add ..., lsl #12
        (1, good[1] & !0x1f | 17),       // add x17, x16
        (1, good[1] & !0x3e0 | 17 << 5), // add x16, x17
        (1, good[1] & !0x8000_0000),     // add w16, w16
        (1, good[1] | 1 << 30),          // sub
        (2, 0xd61f_0220),                // br x17
        (2, 0xd63f_0200),                // blr x16
        (2, 0xd65f_03c0),                // ret
    ] {
        let mut w = good;
        w[i] = v;
        bad.push(w);
    }
    for w in bad {
        assert_eq!(plt_target(w, pc), None, "{w:#010x?}");
    }
}

#[test]
fn exclusive_sequence() {
    let ldxr = 0xc85f_7c20;
    let stxr = 0xc802_7c83;
    let add = 0x9100_4020;
    assert!(is_load_exclusive(ldxr) && !is_store_exclusive(ldxr));
    assert!(is_store_exclusive(stxr) && !is_load_exclusive(stxr));
    assert!(!is_load_exclusive(add) && !is_store_exclusive(add));
    // The kernel's masks are coarse: LDAR counts as a load exclusive and
    // STLR as a store exclusive for the sequence scan.
    assert!(is_load_exclusive(0xc8df_fc20)); // ldar x0, [x1]
    assert!(is_store_exclusive(0x889f_fc20)); // stlr w0, [x1]
    assert!(!in_exclusive_sequence(&[]));
    assert!(in_exclusive_sequence(&[ldxr]));
    assert!(in_exclusive_sequence(&[ldxr, add, add]));
    assert!(!in_exclusive_sequence(&[ldxr, add, stxr, add]));
    assert!(in_exclusive_sequence(&[stxr, ldxr, add]));
    // Only MAX_ATOMIC_CONTEXT words back are looked at.
    let mut v = vec![ldxr];
    v.extend(std::iter::repeat_n(add, MAX_ATOMIC_CONTEXT - 1));
    assert!(in_exclusive_sequence(&v));
    v.push(add);
    assert!(!in_exclusive_sequence(&v));
}

// ---------------------------------------------------------------------------
// Reference model of Linux 6.12 arm64 kprobes (decode-insn.c, insn.h)
// ---------------------------------------------------------------------------

/// The kernel's simulation handlers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Handler {
    LdrLiteral,
    LdrswLiteral,
    BCond,
    CbzCbnz,
    TbzTbnz,
    AdrAdrp,
    BBl,
    BrBlrRet,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    /// INSN_GOOD: stepped out of line.
    Step,
    /// INSN_GOOD_NO_SLOT: simulated.
    Simulate(Handler),
    /// INSN_REJECTED.
    Reject,
}

fn m(insn: u32, mask: u32, val: u32) -> bool {
    insn & mask == val
}

/// `aarch64_insn_is_steppable()`.
fn kernel_steppable(insn: u32) -> bool {
    if m(insn, 0x1c00_0000, 0x1400_0000) {
        let branch = m(insn, 0xfc00_0000, 0x1400_0000) // b
            || m(insn, 0xfc00_0000, 0x9400_0000) // bl
            || m(insn, 0x7f00_0000, 0x3400_0000) // cbz
            || m(insn, 0x7f00_0000, 0x3500_0000) // cbnz
            || m(insn, 0x7f00_0000, 0x3600_0000) // tbz
            || m(insn, 0x7f00_0000, 0x3700_0000) // tbnz
            || m(insn, 0xffff_fc1f, 0xd65f_0000) // ret
            || m(insn, 0xffff_fbff, 0xd65f_0bff) // ret_auth
            || m(insn, 0xffff_fc1f, 0xd61f_0000) // br
            || m(insn, 0xfeff_f800, 0xd61f_0800) // br_auth
            || m(insn, 0xffff_fc1f, 0xd63f_0000) // blr
            || m(insn, 0xfeff_f800, 0xd63f_0800) // blr_auth
            || m(insn, 0xff00_0000, 0x5400_0000); // bcond
        if branch
            || m(insn, 0xfff8_f01f, 0xd500_401f) // msr_imm
            || m(insn, 0xfff0_0000, 0xd510_0000) // msr_reg
            || m(insn, 0xff00_0000, 0xd400_0000) // exception
            || insn == 0xd69f_03e0 // eret
            || m(insn, 0xffff_fbff, 0xd69f_0bff)
        // eret_auth
        {
            return false;
        }
        if m(insn, 0xfff0_0000, 0xd530_0000) {
            // mrs
            return (insn & 0x1f_ffe0) >> 5 != 0xda11; // DAIF
        }
        if m(insn, 0xffff_f01f, 0xd503_201f) {
            // hint: NOP, XPACLRI, PACIA/B1716, PACIAZ/SP, PACIBZ/SP, BTI*
            return matches!(
                (insn & 0xfe0) >> 5,
                0x00 | 0x07 | 0x08 | 0x0a | 0x18 | 0x19 | 0x1a | 0x1b | 0x20 | 0x22 | 0x24 | 0x26
            );
        }
        return true;
    }
    let uses_literal = m(insn, 0xbf00_0000, 0x1800_0000) // ldr_lit
        || m(insn, 0xff00_0000, 0x9800_0000) // ldrsw_lit
        || m(insn, 0x9f00_0000, 0x1000_0000) // adr
        || m(insn, 0x9f00_0000, 0x9000_0000) // adrp
        || m(insn, 0xff00_0000, 0xd800_0000); // prfm_lit
    !(uses_literal
        || m(insn, 0x3f80_0000, 0x0800_0000) // exclusive
        || m(insn, 0x3b20_0c00, 0x1900_0400)) // mops
}

/// `arm_kprobe_decode_insn()` (without the exclusive-sequence scan).
fn kernel(insn: u32) -> Kernel {
    use Handler as H;
    if m(insn, 0xbf00_0000, 0x1800_0000) {
        return Kernel::Simulate(H::LdrLiteral);
    }
    if m(insn, 0xff00_0000, 0x9800_0000) {
        return Kernel::Simulate(H::LdrswLiteral);
    }
    if kernel_steppable(insn) {
        return Kernel::Step;
    }
    let h = if m(insn, 0xff00_0000, 0x5400_0000) {
        H::BCond
    } else if m(insn, 0x7e00_0000, 0x3400_0000) {
        H::CbzCbnz
    } else if m(insn, 0x7e00_0000, 0x3600_0000) {
        H::TbzTbnz
    } else if m(insn, 0x1f00_0000, 0x1000_0000) {
        H::AdrAdrp
    } else if m(insn, 0x7c00_0000, 0x1400_0000) {
        H::BBl
    } else if m(insn, 0xffff_fc1f, 0xd61f_0000)
        || m(insn, 0xffff_fc1f, 0xd63f_0000)
        || m(insn, 0xffff_fc1f, 0xd65f_0000)
    {
        H::BrBlrRet
    } else {
        return Kernel::Reject;
    };
    Kernel::Simulate(h)
}

/// Our class, seen as the kernel's decision.
fn as_kernel(c: Class) -> Kernel {
    use Handler as H;
    match c {
        Steppable => Kernel::Step,
        Adr { .. } | Adrp { .. } => Kernel::Simulate(H::AdrAdrp),
        B { .. } | Bl { .. } => Kernel::Simulate(H::BBl),
        BCond { .. } => Kernel::Simulate(H::BCond),
        Cbz { .. } => Kernel::Simulate(H::CbzCbnz),
        Tbz { .. } => Kernel::Simulate(H::TbzTbnz),
        LdrLit {
            kind: LitKind::Sw, ..
        } => Kernel::Simulate(H::LdrswLiteral),
        LdrLit { .. } => Kernel::Simulate(H::LdrLiteral),
        Br { .. } | Blr { .. } | Ret { .. } => Kernel::Simulate(H::BrBlrRet),
        Reject(_) => Kernel::Reject,
    }
}

/// The encodings the kernel would step but we reject (see the module docs
/// of `decode.rs`), with the reason we give and a label for the counts.
fn documented_deviation(insn: u32) -> Option<(Reason, &'static str)> {
    let top = insn >> 24;
    let op1 = (insn >> 25) & 0xf;
    if (op1 == 0 && insn & 0x8000_0000 == 0) || op1 == 0b0001 || op1 == 0b0011 {
        return Some((Reason::Unallocated, "reserved group"));
    }
    match top {
        0x55 if m(insn, 0xffc0_001f, 0x5500_001f) => {
            return Some((Reason::PacBranch, "RETA*SPPC"));
        }
        0x55..=0x57 | 0x74..=0x77 | 0xf4..=0xf7 => {
            return Some((Reason::Unallocated, "unallocated branch/system"));
        }
        0xd6 | 0xd7 => {
            // Everything the kernel's masks do not recognise.
            return Some(if insn == 0xd6bf_03e0 {
                (Reason::Eret, "DRPS")
            } else if m(insn, 0xffff_fbe0, 0xd65f_0be0) {
                (Reason::PacBranch, "RETA*SPPCR")
            } else {
                (Reason::Unallocated, "unallocated branch-register")
            });
        }
        0x1c | 0x5c | 0x9c | 0xdc => return Some((Reason::PcRelative, "LDR (literal, SIMD&FP)")),
        _ => {}
    }
    if m(insn, 0xfff0_0000, 0xd550_0000) {
        return Some((Reason::SystemRegWrite, "MSRR"));
    }
    if matches!(insn, 0xdac1_83fe | 0xdac1_87fe | 0xdac1_a3fe | 0xdac1_a7fe) {
        return Some((Reason::PcRelative, "PAC*SPPC"));
    }
    if m(insn, 0xff80_0000, 0xf380_0000) {
        return Some((Reason::PcRelative, "AUTI*SPPC (label)"));
    }
    None
}

/// Compares `ours` with the kernel model. `Ok(Some(label))` for a
/// documented deviation.
fn check_kernel(insn: u32, ours: Class) -> Result<Option<&'static str>, String> {
    let k = kernel(insn);
    if k == Kernel::Step {
        if let Some((reason, label)) = documented_deviation(insn) {
            return if ours == Reject(reason) {
                Ok(Some(label))
            } else {
                Err(format!(
                    "{insn:#010x}: kernel steps, documented deviation {label} wants \
                     Reject({reason:?}), got {ours:?}"
                ))
            };
        }
    }
    if as_kernel(ours) == k {
        Ok(None)
    } else {
        Err(format!("{insn:#010x}: kernel {k:?}, ours {ours:?}"))
    }
}

// ---------------------------------------------------------------------------
// Oracle (yaxpeax-arm)
// ---------------------------------------------------------------------------

fn oracle(insn: u32) -> Option<Instruction> {
    let bytes = insn.to_le_bytes();
    let mut reader = U8Reader::new(&bytes);
    InstDecoder::default().decode(&mut reader).ok()
}

/// What the oracle's decoding requires of our class.
#[derive(Debug)]
enum Expect {
    /// Exactly this class.
    Exact(Class),
    /// `Reject` with this reason.
    Rejected(Reason),
}

fn pc_offset(inst: &Instruction) -> Option<i64> {
    inst.operands.iter().find_map(|o| match o {
        Operand::PCOffset(x) => Some(*x),
        _ => None,
    })
}

fn gpr(op: &Operand) -> Option<(SizeCode, u8)> {
    match *op {
        Operand::Register(size, r) => Some((size, r as u8)),
        _ => None,
    }
}

fn expect(insn: u32, inst: &Instruction) -> Result<Expect, String> {
    use Expect::*;
    use Opcode as O;
    let ops = &inst.operands;
    let off = pc_offset(inst);
    let need_off = || off.ok_or_else(|| format!("{insn:#010x}: {inst}: no PC offset"));
    let reg0 = || {
        gpr(&ops[0])
            .map(|(_, r)| r)
            .ok_or_else(|| format!("{insn:#010x}: {inst}: operand 0 not a register"))
    };
    Ok(match inst.opcode {
        O::ADR => Exact(Adr {
            rd: reg0()?,
            imm: need_off()?,
        }),
        O::ADRP => Exact(Adrp {
            rd: reg0()?,
            imm: need_off()?,
        }),
        O::B => Exact(B {
            offset: need_off()?,
        }),
        O::BL => Exact(Bl {
            offset: need_off()?,
        }),
        O::Bcc(cond) | O::BCcc(cond) => Exact(BCond {
            cond,
            offset: need_off()?,
        }),
        O::CBZ | O::CBNZ => {
            let (size, rt) = gpr(&ops[0]).ok_or("cbz operand")?;
            Exact(Cbz {
                sf: matches!(size, SizeCode::X),
                nonzero: inst.opcode == O::CBNZ,
                rt,
                offset: need_off()?,
            })
        }
        O::TBZ | O::TBNZ => {
            let Operand::Imm16(bit) = ops[1] else {
                return Err(format!("{insn:#010x}: {inst}: tbz bit operand"));
            };
            Exact(Tbz {
                nonzero: inst.opcode == O::TBNZ,
                rt: reg0()?,
                bit: bit as u8,
                offset: need_off()?,
            })
        }
        O::LDR | O::LDRSW | O::PRFM if off.is_some() => {
            let offset = need_off()?;
            match (inst.opcode, gpr(&ops[0])) {
                (O::LDR, Some((SizeCode::W, rt))) => Exact(LdrLit {
                    kind: LitKind::W,
                    rt,
                    offset,
                }),
                (O::LDR, Some((SizeCode::X, rt))) => Exact(LdrLit {
                    kind: LitKind::X,
                    rt,
                    offset,
                }),
                (O::LDRSW, Some((_, rt))) => Exact(LdrLit {
                    kind: LitKind::Sw,
                    rt,
                    offset,
                }),
                // PRFM (literal), LDR (literal, SIMD&FP).
                _ => Rejected(Reason::PcRelative),
            }
        }
        O::BR => Exact(Br { rn: reg0()? }),
        O::BLR => Exact(Blr { rn: reg0()? }),
        O::RET => Exact(Ret { rn: reg0()? }),
        O::BRAA
        | O::BRAAZ
        | O::BRAB
        | O::BRABZ
        | O::BLRAA
        | O::BLRAAZ
        | O::BLRAB
        | O::BLRABZ
        | O::RETAA
        | O::RETAB
        | O::RETAASPPC
        | O::RETABSPPC
        | O::RETAASPPCR
        | O::RETABSPPCR => Rejected(Reason::PacBranch),
        // Permanently undefined (yaxpeax also reports other words of the
        // reserved group as UDF).
        O::UDF => Rejected(Reason::Unallocated),
        O::ERET | O::ERETAA | O::ERETAB | O::DRPS => Rejected(Reason::Eret),
        O::SVC | O::HVC | O::SMC | O::BRK | O::HLT | O::DCPS1 | O::DCPS2 | O::DCPS3 => {
            Rejected(Reason::ExceptionGen)
        }
        O::LDXR
        | O::LDXRB
        | O::LDXRH
        | O::LDAXR
        | O::LDAXRB
        | O::LDAXRH
        | O::LDXP
        | O::LDAXP
        | O::STXR
        | O::STXRB
        | O::STXRH
        | O::STLXR
        | O::STLXRB
        | O::STLXRH
        | O::STXP
        | O::STLXP
        | O::CASP(_) => Rejected(Reason::Exclusive),
        O::MSR => Rejected(Reason::SystemRegWrite),
        O::MRS => {
            // yaxpeax reports op0<0>:op1:CRn:CRm:op2 (bits 19:5); DAIF is
            // S3_3_C4_C2_1.
            if ops[1] == Operand::SystemReg(0xda11 & 0x7fff) {
                Rejected(Reason::DaifRead)
            } else {
                Exact(Steppable)
            }
        }
        O::HINT => {
            let (Operand::ControlReg(crm), Operand::Immediate(op2)) = (ops[0], ops[1]) else {
                return Err(format!("{insn:#010x}: {inst}: hint operands"));
            };
            // NOP and BTI, BTI c, BTI j, BTI jc.
            if matches!(
                (u32::from(crm) << 3) | op2,
                0x00 | 0x20 | 0x22 | 0x24 | 0x26
            ) {
                Exact(Steppable)
            } else {
                Rejected(Reason::Hint)
            }
        }
        O::XPACLRI
        | O::PACIA1716
        | O::PACIB1716
        | O::PACIAZ
        | O::PACIASP
        | O::PACIBZ
        | O::PACIBSP => Exact(Steppable),
        O::AUTIA1716 | O::AUTIB1716 | O::AUTIAZ | O::AUTIASP | O::AUTIBZ | O::AUTIBSP | O::PACM => {
            Rejected(Reason::Hint)
        }
        O::PACIASPPC
        | O::PACIBSPPC
        | O::PACNBIASPPC
        | O::PACNBIBSPPC
        | O::AUTIASPPC
        | O::AUTIBSPPC => Rejected(Reason::PcRelative),
        _ if off.is_some() => {
            return Err(format!(
                "{insn:#010x}: {inst}: PC-relative instruction unknown to this test"
            ))
        }
        _ => Exact(Steppable),
    })
}

/// What one word's cross-check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// The oracle decodes it and we agree.
    Agree,
    /// The oracle rejects it; we step it (like the kernel would).
    InvalidStepped,
    /// The oracle rejects it; we reject it.
    InvalidRejected,
}

/// Checks one word against both the kernel model and the oracle. On
/// success returns the verdict and the deviation label, if any.
fn compare(insn: u32) -> Result<(Verdict, Option<&'static str>), String> {
    let ours = classify(insn);
    let deviation = check_kernel(insn, ours)?;
    let verdict = match oracle(insn) {
        None => match ours {
            Steppable => Verdict::InvalidStepped,
            Reject(_) => Verdict::InvalidRejected,
            _ => {
                return Err(format!(
                    "{insn:#010x}: oracle: invalid, ours {ours:?} (simulated)"
                ))
            }
        },
        Some(inst) => {
            let ok = match expect(insn, &inst)? {
                Expect::Exact(c) => ours == c,
                Expect::Rejected(r) => ours == Reject(r),
            };
            if !ok {
                return Err(format!(
                    "{insn:#010x}: oracle `{inst}` ({:?}) wants {:?}, ours {ours:?}",
                    inst.opcode,
                    expect(insn, &inst)?
                ));
            }
            Verdict::Agree
        }
    };
    Ok((verdict, deviation))
}

/// Short class name for the per-class counts.
fn class_name(c: Class) -> String {
    match c {
        Steppable => "Steppable".into(),
        Adr { .. } => "Adr".into(),
        Adrp { .. } => "Adrp".into(),
        B { .. } => "B".into(),
        Bl { .. } => "Bl".into(),
        BCond { .. } => "BCond".into(),
        Cbz { .. } => "Cbz".into(),
        Tbz { .. } => "Tbz".into(),
        LdrLit { kind, .. } => format!("LdrLit{kind:?}"),
        Br { .. } => "Br".into(),
        Blr { .. } => "Blr".into(),
        Ret { .. } => "Ret".into(),
        Reject(r) => format!("Reject({r:?})"),
    }
}

#[derive(Default)]
struct Stats {
    words: u64,
    valid: u64,
    invalid_stepped: u64,
    invalid_rejected: u64,
    classes: BTreeMap<String, u64>,
    deviations: BTreeMap<&'static str, u64>,
    failures: Vec<String>,
    failed: u64,
}

impl Stats {
    fn add(&mut self, insn: u32) -> bool {
        self.words += 1;
        match compare(insn) {
            Ok((verdict, deviation)) => {
                match verdict {
                    Verdict::Agree => self.valid += 1,
                    Verdict::InvalidStepped => self.invalid_stepped += 1,
                    Verdict::InvalidRejected => self.invalid_rejected += 1,
                }
                if let Some(label) = deviation {
                    *self.deviations.entry(label).or_default() += 1;
                }
                *self.classes.entry(class_name(classify(insn))).or_default() += 1;
                true
            }
            Err(e) => {
                self.failed += 1;
                if oracle(insn).is_some() {
                    self.valid += 1;
                }
                if self.failures.len() < 40 {
                    self.failures.push(e);
                }
                false
            }
        }
    }

    fn merge(&mut self, o: Stats) {
        self.words += o.words;
        self.valid += o.valid;
        self.invalid_stepped += o.invalid_stepped;
        self.invalid_rejected += o.invalid_rejected;
        self.failed += o.failed;
        for (k, v) in o.classes {
            *self.classes.entry(k).or_default() += v;
        }
        for (k, v) in o.deviations {
            *self.deviations.entry(k).or_default() += v;
        }
        let room = 40usize.saturating_sub(self.failures.len());
        self.failures.extend(o.failures.into_iter().take(room));
    }

    fn verdict(&self) -> String {
        if self.failed == 0 {
            "all agree".into()
        } else {
            format!("{} DISAGREE", self.failed)
        }
    }

    fn details(&self) -> String {
        fn join<K: std::fmt::Display>(m: &BTreeMap<K, u64>) -> String {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
        let (devs, classes) = (join(&self.deviations), join(&self.classes));
        format!(
            "oracle-invalid: {} stepped (kernel steps them too), {} rejected; \
             kernel steps but we reject: [{}]; per-class counts: {}",
            self.invalid_stepped, self.invalid_rejected, devs, classes
        )
    }

    fn report(&self, name: &str) {
        println!(
            "{name}: {} words, {} valid (oracle), {}; {}",
            self.words,
            self.valid,
            self.verdict(),
            self.details()
        );
        for f in &self.failures {
            println!("  FAIL {f}");
        }
        assert!(
            self.failures.is_empty(),
            "{name}: {} disagreements",
            self.failed
        );
    }
}

// ---------------------------------------------------------------------------
// Random and exhaustive cross-checks
// ---------------------------------------------------------------------------

use common::Rng;

#[test]
fn random_uniform() {
    let mut rng = Rng(0x6a09_e667_f3bc_c908);
    let mut stats = Stats::default();
    for _ in 0..1_000_000 {
        stats.add(rng.word());
    }
    stats.report("arm64 random");
}

/// Top bytes of the groups that matter here, to make random words hit them
/// far more often than uniformly: branches, literal loads, ADR/ADRP,
/// exclusives, MOPS, system, branch-register and the unallocated groups.
const HOT_TOP_BYTES: &[u8] = &[
    0x10, 0x30, 0x50, 0x70, 0x90, 0xb0, 0xd0, 0xf0, // adr, adrp
    0x14, 0x15, 0x16, 0x17, 0x94, 0x95, 0x96, 0x97, // b, bl
    0x34, 0x35, 0x36, 0x37, 0xb4, 0xb5, 0xb6, 0xb7, // cbz/tbz
    0x54, 0x55, 0x56, 0x57, 0x74, 0x75, 0x76, 0x77, 0xf4, 0xf5, 0xf6, 0xf7, // b.cond, holes
    0xd4, 0xd5, 0xd6, 0xd7, // exception, system, branch register
    0x18, 0x58, 0x98, 0xd8, 0x1c, 0x5c, 0x9c, 0xdc, // literal loads
    0x08, 0x48, 0x88, 0xc8, // exclusives, ordered, CAS
    0x19, 0x59, 0x99, 0xd9, 0x1d, 0x5d, 0x9d, 0xdd, // MOPS and neighbours
    0xda, 0xf3, 0x00, 0x02, 0x06, 0x80, // PAuth_LR, reserved
];

#[test]
fn random_hot_groups() {
    let mut rng = Rng(0xbb67_ae85_84ca_a73b);
    let mut stats = Stats::default();
    for _ in 0..1_000_000 {
        let w = rng.word();
        let top = HOT_TOP_BYTES[(w as usize >> 8) % HOT_TOP_BYTES.len()];
        let low = rng.word() & 0x00ff_ffff;
        stats.add(u32::from(top) << 24 | low);
    }
    stats.report("arm64 random (hot groups)");
}

/// Every word of a range, split over the available threads.
fn exhaustive(name: &str, lo: u32, hi: u32) {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u32;
    let span = (hi - lo) / threads + 1;
    let mut total = Stats::default();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut st = Stats::default();
                    let a = lo.saturating_add(t.saturating_mul(span));
                    let b = a.saturating_add(span - 1).min(hi);
                    if a <= hi && a >= lo {
                        for w in a..=b {
                            st.add(w);
                        }
                    }
                    st
                })
            })
            .collect();
        for h in handles {
            total.merge(h.join().expect("worker"));
        }
    });
    total.report(name);
}

#[test]
fn exhaustive_system() {
    // Every word of 0xd5000000-0xd5ffffff: MSR (immediate and register),
    // MRS, hints, barriers, SYS/SYSL, SYSP, MSRR/MRRS, WFET/WFIT and holes.
    exhaustive(
        "arm64 exhaustive d5000000-d5ffffff",
        0xd500_0000,
        0xd5ff_ffff,
    );
}

#[test]
fn exhaustive_branch_register() {
    // BR/BLR/RET, authenticated forms, ERET, DRPS and the holes
    // (0xd6000000-0xd7ffffff), with Rn (bits 9:5) 0, 1, 30 or 31 and every
    // other bit exhaustively.
    let mut stats = Stats::default();
    for top in [0xd6u32, 0xd7] {
        for rest in 0..(1u32 << 19) {
            let (hi14, lo5) = (rest >> 5, rest & 0x1f);
            for rn in [0u32, 1, 30, 31] {
                stats.add(top << 24 | hi14 << 10 | rn << 5 | lo5);
            }
        }
    }
    stats.report("arm64 exhaustive d6000000-d7ffffff (Rn 0/1/30/31)");
}

// ---------------------------------------------------------------------------
// vmlinux / module scan
// ---------------------------------------------------------------------------

#[derive(Default)]
struct Scan {
    functions: u64,
    stats: Stats,
}

fn scan_elf(path: &str, scan: &mut Scan) {
    common::for_each_function(path, |f| {
        scan.functions += 1;
        let mut off = f.start;
        while off + 4 <= f.end {
            let insn = u32::from_le_bytes(f.section[off..off + 4].try_into().expect("4 bytes"));
            let before = scan.stats.failures.len();
            scan.stats.add(insn);
            if scan.stats.failures.len() > before {
                let e = scan.stats.failures.pop().expect("just pushed");
                scan.stats
                    .failures
                    .push(format!("{path}: {}+{:#x}: {e}", f.name, off - f.start));
            }
            off += 4;
        }
    });
}

#[test]
fn vmlinux_scan() {
    let Ok(vmlinux) = std::env::var("KP_VMLINUX_ARM64") else {
        println!("arm64 vmlinux: skipped (KP_VMLINUX_ARM64 not set)");
        return;
    };
    let mut scan = Scan::default();
    scan_elf(&vmlinux, &mut scan);
    println!(
        "arm64 vmlinux: {} functions, {} instructions, {}; {} oracle-valid; {}",
        scan.functions,
        scan.stats.words,
        scan.stats.verdict(),
        scan.stats.valid,
        scan.stats.details()
    );
    let mut mods = Scan::default();
    let modules = std::env::var("KP_MODULES_ARM64").unwrap_or_default();
    let mut nmods = 0;
    for m in modules.split(':').filter(|s| !s.is_empty()) {
        nmods += 1;
        scan_elf(m, &mut mods);
    }
    if nmods > 0 {
        println!(
            "arm64 modules: {nmods} files, {} functions, {} instructions, {}; {} oracle-valid; {}",
            mods.functions,
            mods.stats.words,
            mods.stats.verdict(),
            mods.stats.valid,
            mods.stats.details()
        );
    }
    for f in scan.stats.failures.iter().chain(mods.stats.failures.iter()) {
        println!("  FAIL {f}");
    }
    assert!(scan.stats.failures.is_empty() && mods.stats.failures.is_empty());
}

/// The detour of a jump-optimized probe (`arch/arm64/opt.rs`), read back by
/// yaxpeax-arm: the pair push and pop of x16/x17, the `adr` of the detour's
/// own start, the branches to the trampoline and back past the probe.
#[test]
fn detour_words_disassemble() {
    let detour = 0xffff_8000_7a00_1000u64;
    let addr = 0xffff_8000_8123_4568u64;
    let common = 0xffff_8000_7a00_0040u64;
    let orig = 0x9100_0420; // add x0, x1, #1
    let w = detour_words(detour, addr, orig, common).expect("in reach");
    let text = |i: usize| {
        let bytes = w[i].to_le_bytes();
        let mut r = U8Reader::new(&bytes[..]);
        let d = InstDecoder::default().decode(&mut r).unwrap();
        d.to_string()
    };
    assert_eq!(text(0), "stp x16, x17, [sp, #-0x10]!");
    assert_eq!(text(1), "adr x16, $-0x4");
    assert_eq!(classify(w[2]).target(detour + 8), Some(common));
    assert_eq!(text(3), "ldp x16, x17, [sp], #0x10");
    assert_eq!(w[4], orig);
    assert_eq!(classify(w[5]).target(detour + 20), Some(addr + 4));
    assert_eq!(u64::from(w[6]) | u64::from(w[7]) << 32, addr);
    assert_eq!(DETOUR_RESUME, 12);
    assert_eq!(DETOUR_COPY, 16);
    // Out of reach either way, or misaligned: none.
    assert!(detour_words(detour, addr + (1 << 28), orig, common).is_none());
    assert!(detour_words(detour, addr, orig, common + (1 << 28)).is_none());
    assert!(detour_words(detour, addr + 2, orig, common).is_none());
}

/// A probe's out-of-line slot (`arch/arm64/insn.rs`), read back by
/// yaxpeax-arm: the stepped copy, the push of x0/x1 and the load of the
/// probed address from the slot's literal, the branch to the post
/// trampoline, the boosted copy and its branch back past the probe (a BRK
/// when out of reach), for slots near and far from the probe.
#[test]
fn slot_words_disassemble() {
    let post = 0xffff_8000_7a00_0040u64;
    let ss = brk(0x0a1);
    let orig = 0x9100_0420; // add x0, x1, #1
    let text = |w: u32| {
        let bytes = w.to_le_bytes();
        let mut r = U8Reader::new(&bytes[..]);
        InstDecoder::default().decode(&mut r).unwrap().to_string()
    };
    let near = 0xffff_8000_8123_4568u64;
    const S: u64 = 0xffff_8000_7a00_1000;
    for (slot, addr, back) in [
        (0xffff_8000_7a00_1000u64, near, true),
        // The branch at slot + 20 to addr + 4 reaches 2^27 - 4 forward
        // and 2^27 back at most.
        (S, S + (1 << 27) + 12, true),
        (S, S + (1 << 27) + 16, false),
        (S, S + 16 - (1 << 27), true),
        (S, S + 12 - (1 << 27), false),
        (S, 0xffff_0000_1000_0000, false),
    ] {
        let (w, boost) = slot_words(slot, addr, orig, post, ss).expect("post in reach");
        assert_eq!(boost, back, "{addr:#x}");
        assert_eq!(w[0], orig);
        assert_eq!(text(w[1]), "stp x0, x1, [sp, #-0x10]!");
        assert_eq!(text(w[2]), "ldr x0, $+0x10");
        // The literal the ldr reads (slot + 8 + 16) holds the address.
        assert_eq!(u64::from(w[6]) | u64::from(w[7]) << 32, addr);
        assert_eq!(classify(w[3]).target(slot + 12), Some(post));
        assert_eq!(w[4], orig);
        if back {
            assert_eq!(classify(w[5]).target(slot + 20), Some(addr + 4));
        } else {
            assert_eq!(w[5], ss);
        }
        assert_eq!(SLOT_BOOST, 16);
    }
    // The post trampoline out of reach, or a misaligned address: none.
    assert!(slot_words(0xffff_8000_7a00_1000, near, orig, post + (1 << 28), ss).is_none());
    assert!(slot_words(0xffff_8000_7a00_1000, near + 2, orig, post, ss).is_none());
}

/// Landing pads: every BTI form and PACIASP/PACIBSP; not NOP, other hints,
/// AUTIASP or an ordinary instruction.
#[test]
fn landing_pads() {
    for pad in [
        0xd503_241f,
        0xd503_245f,
        0xd503_249f,
        0xd503_24df,
        0xd503_233f,
        0xd503_237f,
    ] {
        assert!(is_landing_pad(pad), "{pad:#010x}");
    }
    for not in [
        0xd503_201f,
        0xd503_243f,
        0xd503_23bf,
        0xd503_229f,
        0x9100_0420,
        0xd65f_03c0,
    ] {
        assert!(!is_landing_pad(not), "{not:#010x}");
    }
}
