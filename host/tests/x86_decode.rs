//! Tests for `arch/x86_64/decode.rs`.
//!
//! * hand-written cases with exact expectations;
//! * randomized and exhaustive cross-checks against the `iced-x86` decoder;
//! * a scan of a real `vmlinux` (and optionally `.ko` files) when
//!   `KP_VMLINUX_X86_64` / `KP_MODULES_X86_64` are set.
//!
//! iced is used in 64-bit mode with `DecoderOptions::NONE`: Intel semantics
//! (`66` does not shrink near branches, `UD0` has a ModRM byte), no MPX, no
//! Cyrix/Centaur/KNC/old-CPU extras, but with 3DNow!, XOP, VEX and EVEX, which
//! iced always decodes. That is the instruction set a current x86-64 Linux
//! kernel is built from (MPX is gone from the kernel; BND-prefixed branches
//! still decode as plain branches). Whenever iced decodes an instruction, our
//! decoder must agree on length, on RIP-relative addressing (and its target),
//! on relative branches (kind, displacement position and target), on the
//! displacement and immediate positions, and on the safety classification
//! implied by iced's flow-control information.

mod common;

use iced_x86::{
    Code, ConstantOffsets, Decoder, DecoderOptions, EncodingKind, FlowControl, Instruction,
    Mnemonic, OpKind, Register,
};
use kprobes_logic::x86_decode::{decode, Class, DecodeError, Insn, OpMap, MAX_INSN_LEN};

// ---------------------------------------------------------------------------
// Hand-written cases
// ---------------------------------------------------------------------------

fn d(bytes: &[u8]) -> Insn {
    match decode(bytes) {
        Ok(i) => i,
        Err(e) => panic!("decode({bytes:02x?}) failed: {e:?}"),
    }
}

#[test]
fn table_basic() {
    // endbr64
    let i = d(&[0xF3, 0x0F, 0x1E, 0xFA]);
    assert_eq!(
        (i.len, i.class, i.map, i.opcode),
        (4, Class::Plain, OpMap::M0F, 0x1E)
    );
    assert_eq!(i.modrm, Some(0xFA));
    assert!(i.rep);

    // ftrace 5-byte nop: nopl 0x0(%rax,%rax,1)
    let i = d(&[0x0F, 0x1F, 0x44, 0x00, 0x00]);
    assert_eq!(
        (i.len, i.class, i.disp_off, i.disp_len),
        (5, Class::Plain, 4, 1)
    );
    assert!(!i.rip_relative);

    // call rel32
    let b = [0xE8, 0x10, 0x00, 0x00, 0x00];
    let i = d(&b);
    assert_eq!(
        (i.len, i.class, i.rel_off, i.rel_len, i.imm_len),
        (5, Class::CallRel, 1, 4, 0)
    );
    assert_eq!(i.rel_target(0x1000, &b), Some(0x1015));

    // jmp rel8 backwards
    let b = [0xEB, 0xFE];
    let i = d(&b);
    assert_eq!(
        (i.len, i.class, i.rel_off, i.rel_len),
        (2, Class::JmpRel, 1, 1)
    );
    assert_eq!(i.rel_target(0x1000, &b), Some(0x1000));

    // jne rel32
    let b = [0x0F, 0x85, 0x00, 0xFF, 0xFF, 0xFF];
    let i = d(&b);
    assert_eq!(
        (i.len, i.class, i.rel_off, i.rel_len),
        (6, Class::Jcc, 2, 4)
    );
    assert_eq!(i.rel_target(0x2000, &b), Some(0x2006 - 0x100));

    // jz rel8
    let i = d(&[0x74, 0x05]);
    assert_eq!(
        (i.len, i.class, i.rel_off, i.rel_len),
        (2, Class::Jcc, 1, 1)
    );

    // loop / jrcxz
    assert_eq!(d(&[0xE2, 0x00]).class, Class::LoopOrJrcxz);
    assert_eq!(d(&[0xE3, 0x00]).class, Class::LoopOrJrcxz);
    assert_eq!(d(&[0x67, 0xE3, 0x00]).len, 3); // jecxz

    // ret, ret imm16, lret
    assert_eq!((d(&[0xC3]).len, d(&[0xC3]).class), (1, Class::Ret));
    let i = d(&[0xC2, 0x08, 0x00]);
    assert_eq!(
        (i.len, i.class, i.imm_off, i.imm_len),
        (3, Class::Ret, 1, 2)
    );
    assert_eq!(d(&[0xCB]).class, Class::Ret);
    // push rbp; mov rbp,rsp
    assert_eq!((d(&[0x55]).len, d(&[0x55]).class), (1, Class::Plain));
    let i = d(&[0x48, 0x89, 0xE5]);
    assert_eq!(
        (i.len, i.rex, i.modrm, i.modrm_off),
        (3, Some(0x48), Some(0xE5), 2)
    );

    // mov rax, [rip+0x12345678]
    let b = [0x48, 0x8B, 0x05, 0x78, 0x56, 0x34, 0x12];
    let i = d(&b);
    assert_eq!((i.len, i.disp_off, i.disp_len), (7, 3, 4));
    assert!(i.rip_relative);
    assert_eq!(i.rip_target(0x1000, &b), Some(0x1007 + 0x1234_5678));
    // cmpl $0x1, [rip+disp32]: RIP-relative with an immediate after it
    let i = d(&[0x83, 0x3D, 0, 0, 0, 0, 0x01]);
    assert_eq!(
        (i.len, i.disp_off, i.disp_len, i.imm_off, i.imm_len),
        (7, 2, 4, 6, 1)
    );
    assert!(i.rip_relative);
    // lea rdi, [rip+x] with 67: EIP-relative, target truncated
    let b = [0x67, 0x48, 0x8D, 0x3D, 0xFF, 0xFF, 0xFF, 0xFF];
    let i = d(&b);
    assert!(i.rip_relative && i.addrsize);
    assert_eq!(i.rip_target(0x1_0000_0000, &b), Some(0x7));
    // SIB with no base: [rax*4 + disp32] is not RIP-relative
    let i = d(&[0x8B, 0x04, 0x85, 0, 0, 0, 0]);
    assert_eq!(
        (i.len, i.disp_off, i.disp_len, i.rip_relative),
        (7, 3, 4, false)
    );

    // lock cmpxchg [rdi], rsi
    let i = d(&[0xF0, 0x48, 0x0F, 0xB1, 0x37]);
    assert_eq!(
        (i.len, i.lock, i.map, i.opcode),
        (5, true, OpMap::M0F, 0xB1)
    );
    // rep movsb
    let i = d(&[0xF3, 0xA4]);
    assert_eq!((i.len, i.rep, i.string_op), (2, true, true));
    // fs: mov rax, fs:[0x28]
    let i = d(&[0x64, 0x48, 0x8B, 0x04, 0x25, 0x28, 0, 0, 0]);
    assert_eq!(
        (i.len, i.seg, i.disp_off, i.rip_relative),
        (9, Some(0x64), 5, false)
    );
}

#[test]
fn table_immediates() {
    // movabs rax, imm64
    let i = d(&[0x48, 0xB8, 1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!((i.len, i.imm_off, i.imm_len), (10, 2, 8));
    // mov eax, imm32 / mov ax, imm16 / REX.W wins over 66
    assert_eq!(d(&[0xB8, 1, 2, 3, 4]).len, 5);
    assert_eq!(d(&[0x66, 0xB8, 1, 2]).len, 4);
    assert_eq!(d(&[0x66, 0x48, 0xB8, 1, 2, 3, 4, 5, 6, 7, 8]).len, 11);
    // REX not adjacent to the opcode is ignored: 48 66 B8 iw
    let i = d(&[0x48, 0x66, 0xB8, 1, 2]);
    assert_eq!((i.len, i.rex), (5, None));
    // movabs al, [moffs64] / with 67: moffs32
    let i = d(&[0xA0, 1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!((i.len, i.disp_off, i.disp_len, i.imm_len), (9, 1, 8, 0));
    let i = d(&[0x67, 0xA1, 1, 2, 3, 4]);
    assert_eq!((i.len, i.disp_off, i.disp_len), (6, 2, 4));
    // enter 0x10, 0
    let i = d(&[0xC8, 0x10, 0x00, 0x00]);
    assert_eq!(
        (i.len, i.imm_off, i.imm_len, i.class),
        (4, 1, 3, Class::Plain)
    );
    // test byte [rdi], 1 (F6 /0 ib) vs not byte [rdi] (F6 /2)
    assert_eq!(d(&[0xF6, 0x07, 0x01]).len, 3);
    assert_eq!(d(&[0xF6, 0x0F, 0x01]).len, 3); // F6 /1 is an alias of test
    assert_eq!(d(&[0xF6, 0x17]).len, 2);
    // test dword [rdi], imm32 / test word [rdi], imm16 / neg rax
    assert_eq!(d(&[0xF7, 0x07, 1, 2, 3, 4]).len, 6);
    assert_eq!(d(&[0x66, 0xF7, 0x07, 1, 2]).len, 5);
    assert_eq!(d(&[0x48, 0xF7, 0xD8]).len, 3);
    // push imm32 / push imm16 / push imm8
    assert_eq!(d(&[0x68, 1, 2, 3, 4]).len, 5);
    assert_eq!(d(&[0x66, 0x68, 1, 2]).len, 4);
    assert_eq!(d(&[0x6A, 1]).len, 2);
    // add rsp, imm8 / sub rsp, imm32
    assert_eq!(d(&[0x48, 0x83, 0xC4, 0x08]).len, 4);
    assert_eq!(d(&[0x48, 0x81, 0xEC, 0, 1, 0, 0]).len, 7);
    // int 0x80, int3, int1
    assert_eq!(
        (d(&[0xCD, 0x80]).len, d(&[0xCD, 0x80]).class),
        (2, Class::Int)
    );
    assert_eq!(d(&[0xCC]).class, Class::Int3);
    assert_eq!(d(&[0xF1]).class, Class::Int);
    // shld, bt imm8, pshufd, palignr, 3DNow! pfadd
    assert_eq!(d(&[0x0F, 0xA4, 0xC0, 0x03]).len, 4);
    assert_eq!(d(&[0x48, 0x0F, 0xBA, 0xE0, 0x03]).len, 5);
    assert_eq!(d(&[0x66, 0x0F, 0x70, 0xC1, 0x1B]).len, 5);
    assert_eq!(d(&[0x66, 0x0F, 0x3A, 0x0F, 0xC1, 0x08]).len, 6);
    let i = d(&[0x0F, 0x0F, 0x05, 0, 0, 0, 0, 0x9E]);
    assert_eq!(
        (i.len, i.rip_relative, i.imm_off, i.imm_len),
        (8, true, 7, 1)
    );
    // extrq xmm0, 4, 8 (two imm8) vs vmread
    let i = d(&[0x66, 0x0F, 0x78, 0xC0, 0x04, 0x08]);
    assert_eq!((i.len, i.imm_off, i.imm_len), (6, 4, 2));
    assert_eq!(d(&[0x0F, 0x78, 0xC0]).len, 3);
    // mov cr3, rax ignores mod: 0F 22 18 is still 3 bytes, no displacement
    let i = d(&[0x0F, 0x22, 0x18, 0x99]);
    assert_eq!((i.len, i.disp_len, i.class), (3, 0, Class::Unsafe));
    assert_eq!(d(&[0x0F, 0x20, 0xD8]).class, Class::Plain); // mov rax, cr3
                                                            // popcnt / crc32 / movbe
    assert_eq!(d(&[0xF3, 0x48, 0x0F, 0xB8, 0xC1]).len, 5);
    assert_eq!(d(&[0xF2, 0x48, 0x0F, 0x38, 0xF1, 0xC1]).len, 6);
    assert_eq!(d(&[0x0F, 0x38, 0xF0, 0x07]).len, 4);
}

#[test]
fn table_vex_evex_xop() {
    // vmovdqu ymm0, [rdi] (VEX2)
    let i = d(&[0xC5, 0xFE, 0x6F, 0x07]);
    assert_eq!(
        (i.len, i.vex, i.map, i.opcode),
        (4, true, OpMap::Vex(1), 0x6F)
    );
    // vmovdqu ymm0, [rip+x] (VEX2)
    let i = d(&[0xC5, 0xFE, 0x6F, 0x05, 0, 0, 0, 0]);
    assert_eq!((i.len, i.rip_relative, i.disp_off), (8, true, 4));
    // vzeroupper (no ModRM)
    let i = d(&[0xC5, 0xF8, 0x77]);
    assert_eq!((i.len, i.modrm), (3, None));
    // vpalignr ymm0, ymm1, ymm2, 8 (VEX3 map 3)
    let i = d(&[0xC4, 0xE3, 0x75, 0x0F, 0xC2, 0x08]);
    assert_eq!(
        (i.len, i.map, i.imm_off, i.imm_len),
        (6, OpMap::Vex(3), 5, 1)
    );
    // vpshufb (VEX3 map 2)
    assert_eq!(d(&[0xC4, 0xE2, 0x75, 0x00, 0xC2]).len, 5);
    // vmovdqu64 zmm0, [rdi+0x40] (EVEX, disp8*N)
    let i = d(&[0x62, 0xF1, 0xFE, 0x48, 0x6F, 0x47, 0x01]);
    assert_eq!(
        (i.len, i.evex, i.map, i.disp_off, i.disp_len),
        (7, true, OpMap::Evex(1), 6, 1)
    );
    // vpternlogd zmm0, zmm1, zmm2, 0xff (EVEX map 3)
    let i = d(&[0x62, 0xF3, 0x75, 0x48, 0x25, 0xC2, 0xFF]);
    assert_eq!((i.len, i.imm_len), (7, 1));
    // XOP vpcmov (map 8, is4) / bextr r32, r/m32, imm32 (map 10)
    assert_eq!(d(&[0x8F, 0xE8, 0x78, 0xA2, 0xC2, 0x30]).len, 6);
    let i = d(&[0x8F, 0xEA, 0x78, 0x10, 0xC0, 1, 2, 3, 4]);
    assert_eq!((i.len, i.map, i.imm_len), (9, OpMap::Xop(10), 4));
    // pop qword [rax] is not XOP
    let i = d(&[0x8F, 0x00]);
    assert_eq!((i.len, i.map, i.vex), (2, OpMap::Legacy, false));
    // VEX after 66/REX/F0 is #UD
    assert_eq!(decode(&[0x66, 0xC5, 0xF8, 0x77]), Err(DecodeError::Invalid));
    assert_eq!(decode(&[0x48, 0xC5, 0xF8, 0x77]), Err(DecodeError::Invalid));
    assert_eq!(
        decode(&[0xF0, 0x62, 0xF1, 0xFE, 0x48, 0x6F, 0x07]),
        Err(DecodeError::Invalid)
    );
}

#[test]
fn table_classes() {
    let cases: &[(&[u8], Class)] = &[
        (&[0x9C], Class::Pushf),
        (&[0x9D], Class::Popf),
        (&[0xFA], Class::CliSti),
        (&[0xFB], Class::CliSti),
        (&[0xF4], Class::Hlt),
        (&[0xCF], Class::Iret),
        (&[0x48, 0xCF], Class::Iret),
        (&[0x0F, 0x05], Class::Syscall),
        (&[0x48, 0x0F, 0x07], Class::Syscall),
        (&[0x0F, 0x34], Class::Syscall),
        (&[0x0F, 0x35], Class::Syscall),
        (&[0x0F, 0x0B], Class::Ud),
        (&[0x0F, 0xB9, 0x40, 0x10], Class::Ud),
        (&[0x0F, 0xFF, 0xC0], Class::Ud),
        (&[0x8E, 0xD0], Class::SegWrite),       // mov ss, eax
        (&[0x0F, 0xA9], Class::SegWrite),       // pop gs
        (&[0x0F, 0xB2, 0x07], Class::SegWrite), // lss
        (&[0xF3, 0x48, 0x0F, 0xAE, 0xD8], Class::SegWrite), // wrgsbase
        (&[0xFF, 0xD0], Class::CallIndirect),   // call rax
        (&[0xFF, 0x15, 0, 0, 0, 0], Class::CallIndirect), // call [rip+x]
        (&[0xFF, 0xE0], Class::JmpIndirect),    // jmp rax
        (&[0x41, 0xFF, 0x24, 0xC4], Class::JmpIndirect), // jmp [r12+rax*8]
        (&[0xFF, 0x18], Class::Unsafe),         // call far [rax]
        (&[0xFF, 0x28], Class::Unsafe),         // jmp far [rax]
        (&[0x0F, 0x01, 0x10], Class::Unsafe),   // lgdt
        (&[0x0F, 0x01, 0x18], Class::Unsafe),   // lidt
        (&[0x0F, 0x01, 0x00], Class::Plain),    // sgdt
        (&[0x0F, 0x00, 0xD0], Class::Unsafe),   // lldt ax
        (&[0x0F, 0x00, 0xD8], Class::Unsafe),   // ltr ax
        (&[0x0F, 0x22, 0xD8], Class::Unsafe),   // mov cr3, rax
        (&[0x0F, 0x23, 0xF8], Class::Unsafe),   // mov dr7, rax
        (&[0x0F, 0x30], Class::Unsafe),         // wrmsr
        (&[0x0F, 0x32], Class::Plain),          // rdmsr
        (&[0x0F, 0x01, 0xF8], Class::Unsafe),   // swapgs
        (&[0x0F, 0x01, 0xD1], Class::Unsafe),   // xsetbv
        (&[0x0F, 0x01, 0xD5], Class::Unsafe),   // xend
        (&[0x0F, 0x01, 0xCA], Class::Plain),    // clac
        (&[0x0F, 0x01, 0xCB], Class::Plain),    // stac
        (&[0x0F, 0x01, 0xF9], Class::Plain),    // rdtscp
        (&[0x0F, 0x01, 0xC1], Class::Unsafe),   // vmcall
        (&[0xC7, 0xF8, 0, 0, 0, 0], Class::Unsafe), // xbegin
        (&[0xC6, 0xF8, 0x01], Class::Unsafe),   // xabort
        (&[0x0F, 0xAE, 0xE8], Class::Plain),    // lfence
        (&[0x0F, 0xA2], Class::Plain),          // cpuid
        (&[0xC9], Class::Plain),                // leave
        (&[0xF3, 0x90], Class::Plain),          // pause
        (&[0x0F, 0x06], Class::Unsafe),         // clts
    ];
    for (bytes, class) in cases {
        let i = d(bytes);
        assert_eq!(i.class, *class, "class of {bytes:02x?}");
        assert_eq!(usize::from(i.len), bytes.len(), "len of {bytes:02x?}");
    }
    // xbegin rel32 reports its displacement as the immediate
    let i = d(&[0xC7, 0xF8, 0, 0, 0, 0]);
    assert_eq!((i.imm_off, i.imm_len, i.rel_len), (2, 4, 0));
    // 66-prefixed xbegin: rel16
    assert_eq!(d(&[0x66, 0xC7, 0xF8, 0, 0]).len, 5);
    // 66 does not shrink near branches (Intel semantics)
    assert_eq!(d(&[0x66, 0xE8, 0, 0, 0, 0]).len, 6);
    assert_eq!(d(&[0x66, 0x0F, 0x84, 0, 0, 0, 0]).len, 7);
}

#[test]
fn table_invalid_and_limits() {
    for op in [
        0x06u8, 0x07, 0x0E, 0x16, 0x17, 0x1E, 0x1F, 0x27, 0x2F, 0x37, 0x3F, 0x60, 0x61, 0x82, 0x9A,
        0xCE, 0xD4, 0xD5, 0xD6, 0xEA,
    ] {
        let buf = [op, 0xC0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(decode(&buf), Err(DecodeError::Invalid), "opcode {op:02x}");
    }
    // undefined group members
    assert_eq!(decode(&[0xFF, 0xF8]), Err(DecodeError::Invalid)); // FF /7
    assert_eq!(decode(&[0xFF, 0xD8]), Err(DecodeError::Invalid)); // FF /3 reg
    assert_eq!(decode(&[0xFE, 0xD0]), Err(DecodeError::Invalid)); // FE /2
    assert_eq!(decode(&[0xC7, 0xC8, 0, 0, 0, 0]), Err(DecodeError::Invalid)); // C7 /1
    assert_eq!(decode(&[0x8D, 0xC0]), Err(DecodeError::Invalid)); // lea reg
                                                                  // empty and truncated input
    assert_eq!(decode(&[]), Err(DecodeError::Truncated));
    assert_eq!(decode(&[0xE8, 0, 0]), Err(DecodeError::Truncated));
    assert_eq!(decode(&[0x66, 0x66]), Err(DecodeError::Truncated));
    assert_eq!(
        decode(&[0x48, 0x8B, 0x05, 0, 0]),
        Err(DecodeError::Truncated)
    );
    // 14 prefixes + nop = 15 bytes: fine; 15 prefixes + nop: too long
    let mut v = vec![0x66u8; 14];
    v.push(0x90);
    assert_eq!(d(&v).len, 15);
    let mut v = vec![0x66u8; 15];
    v.push(0x90);
    assert_eq!(decode(&v), Err(DecodeError::TooLong));
    // 11 prefixes + mov rax, imm32... (REX.W C7 /0 = 7 bytes) = 18 > 15
    let mut v = vec![0x2Eu8; 11];
    v.extend_from_slice(&[0x48, 0xC7, 0xC0, 1, 2, 3, 4, 0, 0, 0]);
    assert_eq!(decode(&v), Err(DecodeError::TooLong));
    assert_eq!(MAX_INSN_LEN, 15);
}

// ---------------------------------------------------------------------------
// Cross-check against iced-x86
// ---------------------------------------------------------------------------

use common::Rng;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Both decode and agree.
    Agree,
    /// iced rejects, we decode.
    OnlyOurs,
    /// Both reject.
    BothInvalid,
}

#[derive(Default, Debug)]
struct Stats {
    total: u64,
    agree: u64,
    only_ours: u64,
    both_invalid: u64,
    failures: Vec<String>,
}

impl Stats {
    fn add(&mut self, bytes: &[u8], ip: u64) {
        self.total += 1;
        match compare(bytes, ip) {
            Ok(Verdict::Agree) => self.agree += 1,
            Ok(Verdict::OnlyOurs) => self.only_ours += 1,
            Ok(Verdict::BothInvalid) => self.both_invalid += 1,
            Err(e) => {
                if self.failures.len() < 40 {
                    self.failures.push(e);
                }
            }
        }
    }

    fn report(&self, name: &str) {
        let failed = self.total - self.agree - self.only_ours - self.both_invalid;
        println!(
            "{name}: {} sequences, {} valid (iced), {}; {} where iced invalid and we decode, {} both invalid",
            self.total,
            self.agree + failed,
            if failed == 0 { "all agree".to_string() } else { format!("{failed} DISAGREE") },
            self.only_ours,
            self.both_invalid
        );
        for f in &self.failures {
            println!("  FAIL {f}");
        }
        assert!(
            self.failures.is_empty(),
            "{name}: {failed} disagreements with iced"
        );
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn is_string_op(instr: &Instruction) -> bool {
    if matches!(
        instr.mnemonic(),
        Mnemonic::Maskmovq | Mnemonic::Maskmovdqu | Mnemonic::Vmaskmovdqu
    ) {
        return false;
    }
    instr.op_kinds().any(|k| {
        matches!(
            k,
            OpKind::MemorySegSI
                | OpKind::MemorySegESI
                | OpKind::MemorySegRSI
                | OpKind::MemorySegDI
                | OpKind::MemorySegEDI
                | OpKind::MemorySegRDI
                | OpKind::MemoryESDI
                | OpKind::MemoryESEDI
                | OpKind::MemoryESRDI
        )
    })
}

fn seg_byte(r: Register) -> Option<u8> {
    match r {
        Register::ES => Some(0x26),
        Register::CS => Some(0x2E),
        Register::SS => Some(0x36),
        Register::DS => Some(0x3E),
        Register::FS => Some(0x64),
        Register::GS => Some(0x65),
        _ => None,
    }
}

/// Compares both decoders on `bytes` located at address `ip`.
fn compare(bytes: &[u8], ip: u64) -> Result<Verdict, String> {
    let mut dec = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let instr = dec.decode();
    let ours = decode(bytes);
    if instr.is_invalid() {
        return Ok(match ours {
            Ok(_) => Verdict::OnlyOurs,
            Err(_) => Verdict::BothInvalid,
        });
    }
    let co = dec.get_constant_offsets(&instr);
    let len = instr.len();
    let ctx = || {
        format!(
            "[{}] `{}` (iced len {len})",
            hex(&bytes[..len.min(bytes.len())]),
            instr
        )
    };
    let o = ours.map_err(|e| format!("{}: we fail with {e:?}", ctx()))?;
    check_agreement(&instr, &co, &o, bytes, ip)
        .map_err(|e| format!("{}: {e}; ours = {o:?}", ctx()))?;
    Ok(Verdict::Agree)
}

fn check_agreement(
    instr: &Instruction,
    co: &ConstantOffsets,
    o: &Insn,
    bytes: &[u8],
    ip: u64,
) -> Result<(), String> {
    if usize::from(o.len) != instr.len() {
        return Err(format!("length {} != {}", o.len, instr.len()));
    }
    // RIP-relative memory operand and its target.
    if o.rip_relative != instr.is_ip_rel_memory_operand() {
        return Err(format!(
            "rip_relative {} != {}",
            o.rip_relative,
            instr.is_ip_rel_memory_operand()
        ));
    }
    if o.rip_relative && o.rip_target(ip, bytes) != Some(instr.ip_rel_memory_address()) {
        return Err(format!(
            "rip target {:x?} != {:x}",
            o.rip_target(ip, bytes),
            instr.ip_rel_memory_address()
        ));
    }
    // Displacement position.
    let (doff, dlen) = if co.has_displacement() {
        (co.displacement_offset(), co.displacement_size())
    } else {
        (0, 0)
    };
    if (usize::from(o.disp_off), usize::from(o.disp_len)) != (doff, dlen) {
        return Err(format!(
            "disp {}+{} != {doff}+{dlen}",
            o.disp_off, o.disp_len
        ));
    }
    // Relative branches.
    let iced_jmp = instr.is_jmp_short_or_near();
    let iced_call = instr.is_call_near();
    let iced_jcc = instr.is_jcc_short_or_near();
    let iced_loop = instr.is_loop() || instr.is_loopcc() || instr.is_jcx_short();
    let pairs = [
        (Class::JmpRel, iced_jmp),
        (Class::CallRel, iced_call),
        (Class::Jcc, iced_jcc),
        (Class::LoopOrJrcxz, iced_loop),
    ];
    for (class, iced) in pairs {
        if (o.class == class) != iced {
            return Err(format!(
                "branch class {:?} vs iced {class:?}={iced}",
                o.class
            ));
        }
    }
    let iced_branch = iced_jmp || iced_call || iced_jcc || iced_loop;
    if iced_branch {
        if (usize::from(o.rel_off), usize::from(o.rel_len))
            != (co.immediate_offset(), co.immediate_size())
        {
            return Err(format!(
                "rel {}+{} != {}+{}",
                o.rel_off,
                o.rel_len,
                co.immediate_offset(),
                co.immediate_size()
            ));
        }
        if o.rel_target(ip, bytes) != Some(instr.near_branch_target()) {
            return Err(format!(
                "branch target {:x?} != {:x}",
                o.rel_target(ip, bytes),
                instr.near_branch_target()
            ));
        }
        if o.imm_len != 0 {
            return Err("branch with an immediate".into());
        }
    } else {
        if o.rel_len != 0 || o.rel_off != 0 {
            return Err("non-branch with rel".into());
        }
        // Immediates: iced's total must match ours exactly when it reports one.
        let ilen = co.immediate_size()
            + if co.has_immediate2() {
                co.immediate_size2()
            } else {
                0
            };
        if co.has_immediate() {
            if (usize::from(o.imm_off), usize::from(o.imm_len)) != (co.immediate_offset(), ilen) {
                return Err(format!(
                    "imm {}+{} != {}+{ilen}",
                    o.imm_off,
                    o.imm_len,
                    co.immediate_offset()
                ));
            }
        } else if o.imm_len != 0 {
            // The 3DNow! suffix and VEX/XOP `is4` register bytes are not
            // immediates for iced; they are trailing imm8 bytes for us.
            let trailing_byte = o.imm_len == 1
                && usize::from(o.imm_off) + 1 == usize::from(o.len)
                && matches!(o.map, OpMap::M0F | OpMap::Vex(3) | OpMap::Xop(8));
            let d3now = o.map == OpMap::M0F && o.opcode == 0x0F;
            if !trailing_byte || (o.map == OpMap::M0F && !d3now) {
                return Err(format!("imm {}+{} but iced has none", o.imm_off, o.imm_len));
            }
        }
    }
    // Encoding and prefixes.
    let enc = instr.encoding();
    if o.vex != matches!(enc, EncodingKind::VEX | EncodingKind::XOP)
        || o.evex != (enc == EncodingKind::EVEX)
    {
        return Err(format!("encoding {enc:?} vs vex={} evex={}", o.vex, o.evex));
    }
    if o.lock != instr.has_lock_prefix() {
        return Err("lock prefix".into());
    }
    if o.seg != seg_byte(instr.segment_prefix()) {
        return Err(format!(
            "segment prefix {:x?} vs {:?}",
            o.seg,
            instr.segment_prefix()
        ));
    }
    if o.string_op != is_string_op(instr) {
        return Err(format!("string_op {}", o.string_op));
    }
    // Safety classification vs iced's flow control.
    let fc = instr.flow_control();
    let ok = match o.class {
        Class::Plain => fc == FlowControl::Next,
        Class::JmpRel => fc == FlowControl::UnconditionalBranch,
        Class::CallRel => fc == FlowControl::Call,
        Class::Jcc | Class::LoopOrJrcxz => fc == FlowControl::ConditionalBranch,
        Class::JmpIndirect => instr.is_jmp_near_indirect(),
        Class::CallIndirect => instr.is_call_near_indirect(),
        Class::Ret => {
            fc == FlowControl::Return
                && !matches!(
                    instr.mnemonic(),
                    Mnemonic::Iret | Mnemonic::Iretd | Mnemonic::Iretq
                )
        }
        Class::Iret => {
            fc == FlowControl::Return
                || matches!(instr.mnemonic(), Mnemonic::Erets | Mnemonic::Eretu)
        }
        Class::Int3 => instr.code() == Code::Int3,
        Class::Int => matches!(instr.code(), Code::Int_imm8 | Code::Int1),
        Class::Into => false,
        Class::Syscall => matches!(
            instr.mnemonic(),
            Mnemonic::Syscall
                | Mnemonic::Sysret
                | Mnemonic::Sysretq
                | Mnemonic::Sysenter
                | Mnemonic::Sysexit
                | Mnemonic::Sysexitq
        ),
        Class::Pushf => instr.mnemonic() == Mnemonic::Pushfq || instr.mnemonic() == Mnemonic::Pushf,
        Class::Popf => instr.mnemonic() == Mnemonic::Popfq || instr.mnemonic() == Mnemonic::Popf,
        Class::CliSti => matches!(instr.mnemonic(), Mnemonic::Cli | Mnemonic::Sti),
        Class::Hlt => instr.mnemonic() == Mnemonic::Hlt,
        Class::Ud => matches!(
            instr.mnemonic(),
            Mnemonic::Ud0 | Mnemonic::Ud1 | Mnemonic::Ud2
        ),
        Class::SegWrite | Class::Unsafe => true,
    };
    if !ok {
        return Err(format!("class {:?} vs iced flow control {fc:?}", o.class));
    }
    // Conversely, everything iced says leaves the linear flow must not be Plain.
    if fc != FlowControl::Next && o.class == Class::Plain {
        return Err(format!("Plain but iced flow control {fc:?}"));
    }
    Ok(())
}

const PREFIXES: [u8; 11] = [
    0x66, 0x67, 0xF0, 0xF2, 0xF3, 0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65,
];

#[test]
fn random_uniform() {
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let mut stats = Stats::default();
    let mut buf = [0u8; 16];
    for n in 0..1_000_000u64 {
        rng.fill(&mut buf);
        // Alternate 15- and 16-byte windows.
        let len = 15 + (n & 1) as usize;
        stats.add(&buf[..len], rng.next_u64());
    }
    stats.report("random");
}

#[test]
fn random_prefixed() {
    // Random legacy prefixes and REX in front of random escapes, to exercise
    // the 0F/0F38/0F3A/VEX/EVEX/XOP paths far more than uniform bytes do.
    let mut rng = Rng(0x5EED_1234_ABCD_0002);
    let mut stats = Stats::default();
    let mut buf = [0u8; 16];
    for _ in 0..1_000_000u64 {
        rng.fill(&mut buf);
        let mut i = 0;
        let npfx = rng.below(5);
        for _ in 0..npfx {
            buf[i] = PREFIXES[rng.below(PREFIXES.len())];
            i += 1;
        }
        if rng.below(3) == 0 {
            buf[i] = 0x40 | (rng.byte() & 0xF);
            i += 1;
        }
        match rng.below(8) {
            0 | 1 => {
                buf[i] = 0x0F;
            }
            2 => {
                buf[i] = 0x0F;
                buf[i + 1] = 0x38;
            }
            3 => {
                buf[i] = 0x0F;
                buf[i + 1] = 0x3A;
            }
            4 => buf[i] = [0xC4, 0xC5, 0x62, 0x8F][rng.below(4)],
            _ => {}
        }
        stats.add(&buf, rng.next_u64());
    }
    stats.report("random-prefixed");
}

#[test]
fn exhaustive_opcode_modrm() {
    // Every (prefix set, map, opcode, ModRM) combination with a random tail.
    let prefix_sets: [&[u8]; 9] = [
        &[],
        &[0x66],
        &[0xF2],
        &[0xF3],
        &[0x48],
        &[0x66, 0x48],
        &[0x67],
        &[0xF0],
        &[0x66, 0xF3],
    ];
    let maps: [&[u8]; 4] = [&[], &[0x0F], &[0x0F, 0x38], &[0x0F, 0x3A]];
    let mut rng = Rng(0x5EED_1234_ABCD_0003);
    let mut stats = Stats::default();
    let mut buf = [0u8; 16];
    for pfx in prefix_sets {
        for map in maps {
            for op in 0..=255u8 {
                for modrm in 0..=255u8 {
                    rng.fill(&mut buf);
                    let mut i = 0;
                    for &b in pfx.iter().chain(map.iter()) {
                        buf[i] = b;
                        i += 1;
                    }
                    buf[i] = op;
                    buf[i + 1] = modrm;
                    stats.add(&buf, 0xFFFF_FFFF_8100_0000);
                }
            }
        }
    }
    stats.report("exhaustive-legacy");
}

/// Randomizes the VEX/XOP payload byte `W vvvv L pp`, biased towards the
/// values most instructions require (vvvv = 1111, L = 0) so that many
/// combinations are valid.
fn vex_wvvvvlpp(rng: &mut Rng) -> u8 {
    let mut b = rng.byte();
    if rng.below(2) == 0 {
        b |= 0x78; // vvvv unused
    }
    if rng.below(2) == 0 {
        b &= !0x04; // L = 0
    }
    b
}

#[test]
fn exhaustive_vex_evex_xop() {
    let mut rng = Rng(0x5EED_1234_ABCD_0004);
    let mut stats = Stats::default();
    let mut buf = [0u8; 16];
    for round in 0..3 {
        for op in 0..=255u8 {
            for modrm in 0..=255u8 {
                // VEX2
                rng.fill(&mut buf);
                buf[0] = 0xC5;
                buf[1] = vex_wvvvvlpp(&mut rng) | 0x80;
                buf[2] = op;
                buf[3] = modrm;
                stats.add(&buf, 0);
                // VEX3, maps 1-3 plus an occasional undefined one
                for map in [1u8, 2, 3, rng.byte() & 0x1F] {
                    rng.fill(&mut buf);
                    buf[0] = 0xC4;
                    buf[1] = (buf[1] & 0xE0) | map;
                    buf[2] = vex_wvvvvlpp(&mut rng);
                    buf[3] = op;
                    buf[4] = modrm;
                    stats.add(&buf, 0);
                }
                // EVEX, maps 1-7; mostly valid fixed bits, no masking quirks
                for map in [1u8, 2, 3, 5, 6, rng.byte() & 7] {
                    rng.fill(&mut buf);
                    buf[0] = 0x62;
                    buf[1] = (buf[1] & 0xF0)
                        | map
                        | if round == 2 && rng.below(8) == 0 {
                            8
                        } else {
                            0
                        };
                    buf[2] = vex_wvvvvlpp(&mut rng) | 0x04;
                    if round != 2 {
                        // z=0, L'L in 0..=2, b=0, V'=1, aaa=0 or random
                        let ll = (rng.below(3) as u8) << 5;
                        let aaa = if rng.below(2) == 0 { 0 } else { rng.byte() & 7 };
                        buf[3] = ll | 0x08 | aaa;
                    }
                    buf[4] = op;
                    buf[5] = modrm;
                    stats.add(&buf, 0);
                }
                // XOP maps 8-10 (and some POPs)
                for map in [8u8, 9, 10, rng.byte() & 0x1F] {
                    rng.fill(&mut buf);
                    buf[0] = 0x8F;
                    buf[1] = (buf[1] & 0xE0) | map;
                    buf[2] = vex_wvvvvlpp(&mut rng);
                    buf[3] = op;
                    buf[4] = modrm;
                    stats.add(&buf, 0);
                }
            }
        }
    }
    stats.report("exhaustive-vex-evex-xop");
}

#[test]
fn short_inputs_never_panic() {
    // Every prefix of random sequences: must return Truncated or agree.
    let mut rng = Rng(0x5EED_1234_ABCD_0005);
    let mut buf = [0u8; 16];
    for _ in 0..100_000 {
        rng.fill(&mut buf);
        let full = decode(&buf);
        for n in 0..16 {
            match (decode(&buf[..n]), full) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{}", hex(&buf[..n])),
                (Err(DecodeError::Truncated), Ok(b)) => assert!(usize::from(b.len) > n),
                (Err(_), _) => {}
                (Ok(a), Err(e)) => panic!("{}: {a:?} with {n} bytes but {e:?} with 16", hex(&buf)),
            }
        }
    }
}

// ---------------------------------------------------------------------------
// vmlinux / module scan
// ---------------------------------------------------------------------------

#[derive(Default)]
struct ScanStats {
    functions: u64,
    insns: u64,
    stopped_at_invalid: u64,
    /// Functions whose last instruction extends past the symbol's end.
    overruns: u64,
    /// Instruction count per [`Class`] (as reported by our decoder).
    classes: std::collections::BTreeMap<String, u64>,
    failures: Vec<String>,
}

fn scan_elf(path: &str, stats: &mut ScanStats) {
    common::for_each_function(path, |f| {
        stats.functions += 1;
        let (start, end, sdata, name) = (f.start, f.end, f.section, f.name);
        let mut off = start;
        while off < end {
            let ip = f.addr + (off - start) as u64;
            // Let the window extend to the end of the section, like real memory.
            let window = &sdata[off..sdata.len().min(off + 16)];
            let mut dec = Decoder::with_ip(64, window, ip, DecoderOptions::NONE);
            let instr = dec.decode();
            if instr.is_invalid() {
                stats.stopped_at_invalid += 1;
                break;
            }
            stats.insns += 1;
            match compare(window, ip) {
                Ok(Verdict::Agree) => {
                    if let Ok(o) = decode(window) {
                        *stats.classes.entry(format!("{:?}", o.class)).or_default() += 1;
                    }
                }
                Ok(v) => unreachable!("{v:?}"),
                Err(e) => {
                    if stats.failures.len() < 40 {
                        stats
                            .failures
                            .push(format!("{path}: {name}+{:#x}: {e}", off - start));
                    }
                    break;
                }
            }
            off += instr.len();
        }
        if off > end {
            stats.overruns += 1;
        }
    });
}

impl ScanStats {
    fn summary(&self) -> String {
        let verdict = if self.failures.is_empty() {
            "all agree".to_string()
        } else {
            format!("{}+ DISAGREE", self.failures.len())
        };
        let classes: Vec<String> = self
            .classes
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect();
        format!(
            "{} functions, {} instructions, {verdict}; {} functions stopped at an \
             instruction iced rejects, {} end past the symbol size; classes: {}",
            self.functions,
            self.insns,
            self.stopped_at_invalid,
            self.overruns,
            classes.join(", ")
        )
    }
}

#[test]
fn vmlinux_scan() {
    let Ok(vmlinux) = std::env::var("KP_VMLINUX_X86_64") else {
        println!("vmlinux: skipped (KP_VMLINUX_X86_64 not set)");
        return;
    };
    let mut stats = ScanStats::default();
    scan_elf(&vmlinux, &mut stats);
    println!("vmlinux: {}", stats.summary());
    let mut mods = ScanStats::default();
    let modules = std::env::var("KP_MODULES_X86_64").unwrap_or_default();
    let mut nmods = 0;
    for m in modules.split(':').filter(|s| !s.is_empty()) {
        nmods += 1;
        scan_elf(m, &mut mods);
    }
    if nmods > 0 {
        println!("modules: {nmods} files, {}", mods.summary());
    }
    for f in stats.failures.iter().chain(mods.failures.iter()) {
        println!("  FAIL {f}");
    }
    assert!(stats.failures.is_empty() && mods.failures.is_empty());
}

/// `can_boost` (the kernel's boosting rule, `arch/x86_64/decode.rs`) never
/// lets through an instruction that must not run out of line followed by a
/// jump back with interrupts on: by iced's reading, a boostable one goes on
/// to the next instruction (no branch, call, return, interrupt or
/// exception), does not touch the interrupt flag, does not halt, and is
/// not privileged but for port I/O (`in`/`out`, which the kernel's
/// `can_boost()` boosts too: ring 0 runs them anywhere).
fn boost_violation(bytes: &[u8]) -> Option<String> {
    let o = decode(bytes).ok()?;
    if !kprobes_logic::x86_decode::can_boost(&o) {
        return None;
    }
    let mut dec = Decoder::with_ip(64, bytes, 0xffff_ffff_8100_0000, DecoderOptions::NONE);
    let instr = dec.decode();
    if instr.is_invalid() {
        // Invalid for iced: the kernel would not run it; the engine's own
        // step would trap loudly (#UD) rather than misbehave.
        return None;
    }
    let flow_ok = instr.flow_control() == FlowControl::Next;
    let if_touching = matches!(
        instr.mnemonic(),
        Mnemonic::Cli
            | Mnemonic::Sti
            | Mnemonic::Popf
            | Mnemonic::Popfq
            | Mnemonic::Pushf
            | Mnemonic::Pushfq
    );
    let port_io = matches!(instr.mnemonic(), Mnemonic::In | Mnemonic::Out);
    let privileged = instr.is_privileged() && !port_io;
    let halts = instr.mnemonic() == Mnemonic::Hlt;
    (!flow_ok || privileged || if_touching || halts).then(|| {
        format!(
            "[{}] `{}` boostable but flow {:?}, privileged {}",
            hex(&bytes[..instr.len().min(bytes.len())]),
            instr,
            instr.flow_control(),
            instr.is_privileged()
        )
    })
}

#[test]
fn can_boost_only_straight_line() {
    let mut rng = Rng(0x5EED_B005_7000_0001);
    let (mut tried, mut bad) = (0u64, Vec::new());
    let mut buf = [0u8; 16];
    // Every one-byte and 0F opcode with every ModRM, under a few prefix
    // sets, random tails; then uniform random bytes.
    for pfx in [
        &[][..],
        &[0x66][..],
        &[0x48][..],
        &[0xf3][..],
        &[0x66, 0x48][..],
    ] {
        for esc in [false, true] {
            for op in 0..=255u8 {
                for modrm in 0..=255u8 {
                    rng.fill(&mut buf);
                    let mut i = 0;
                    for &p in pfx {
                        buf[i] = p;
                        i += 1;
                    }
                    if esc {
                        buf[i] = 0x0f;
                        i += 1;
                    }
                    buf[i] = op;
                    buf[i + 1] = modrm;
                    tried += 1;
                    if let Some(e) = boost_violation(&buf) {
                        bad.push(e);
                    }
                }
            }
        }
    }
    for _ in 0..1_000_000u64 {
        rng.fill(&mut buf);
        tried += 1;
        if let Some(e) = boost_violation(&buf) {
            bad.push(e);
        }
    }
    println!(
        "can_boost: {tried} sequences checked, {} violations",
        bad.len()
    );
    assert!(bad.is_empty(), "{}", bad[..bad.len().min(20)].join("\n"));
}
