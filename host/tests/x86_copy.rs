//! Tests for `arch/x86_64/copy.rs`, with iced-x86 as the oracle:
//!
//! * every instruction of a real `vmlinux` (and of the modules, when
//!   `KP_VMLINUX_X86_64` / `KP_MODULES_X86_64` are set), and random bytes:
//!   an instruction that runs out of line, copied to a slot elsewhere,
//!   decodes there as the same instruction reaching the same memory (a
//!   RIP-relative operand re-aimed at the original target), or is refused
//!   only when that target is out of a rel32's reach; an emulated one has
//!   the plan iced's reading implies (kind, target, condition, loop form,
//!   bytes popped, register);
//! * `put_rel32` writes a `call`/`jmp` that iced decodes with the wanted
//!   target, at edge distances, and refuses one out of reach.

mod common;

use common::Rng;
use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind, Register};
use kprobes_logic::x86_copy::{place_copy, plan, put_rel32, Op};
use kprobes_logic::x86_decode::{decode, Class, Insn};

fn iced(bytes: &[u8], ip: u64) -> Instruction {
    Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE).decode()
}

/// Where slots may lie relative to the instruction: edge distances of a
/// rel32 and ordinary ones.
const SLOT_DISTANCES: [i64; 9] = [
    0x1000,
    -0x1000,
    0x7fff_0000,
    -0x7fff_0000,
    0x7fff_ffff,
    -0x8000_0000,
    0x8000_0000,
    -0x8000_0001,
    1 << 40,
];

#[derive(Default)]
struct Stats {
    insns: u64,
    copied: u64,
    rip: u64,
    refused_far: u64,
    planned: std::collections::BTreeMap<&'static str, u64>,
    refusals: std::collections::BTreeMap<&'static str, u64>,
    failures: Vec<String>,
}

impl Stats {
    fn fail(&mut self, what: String) {
        if self.failures.len() < 40 {
            self.failures.push(what);
        }
    }
}

/// Checks one instruction (`window` at `addr`, ours `insn`, iced's `ins`).
fn check(window: &[u8], addr: u64, insn: &Insn, ins: &Instruction, rng: &mut Rng, st: &mut Stats) {
    st.insns += 1;
    let len = insn.len as usize;
    let here = || format!("{:#x} {:02x?}", addr, &window[..len]);
    match plan(insn, addr as usize, window) {
        Ok(None) => {
            // Runs out of line: it must go on to the next instruction (or
            // fault), never branch, and copied elsewhere it must be the same
            // instruction, reaching the same memory.
            if !matches!(
                ins.flow_control(),
                FlowControl::Next | FlowControl::Exception
            ) {
                return st.fail(format!(
                    "{}: copied, iced reads {ins} ({:?})",
                    here(),
                    ins.flow_control()
                ));
            }
            let d = SLOT_DISTANCES[(rng.next_u64() % SLOT_DISTANCES.len() as u64) as usize];
            let at = (rng.next_u64() % 8) as usize;
            let slot = (addr as i64).wrapping_add(d) as u64;
            let mut copy = [0xccu8; 32];
            let placed = place_copy(&mut copy, at, insn, window, addr as usize, slot as usize);
            let run_at = slot.wrapping_add(at as u64);
            if ins.is_ip_rel_memory_operand() {
                st.rip += 1;
                let target = ins.ip_rel_memory_address();
                let reach = (target as i64).wrapping_sub(run_at.wrapping_add(len as u64) as i64);
                let fits = i32::try_from(reach).is_ok();
                match (placed, fits) {
                    (None, false) => {
                        st.refused_far += 1;
                        return;
                    }
                    (None, true) => return st.fail(format!("{}: refused at {d:#x}", here())),
                    (Some(()), false) => {
                        return st.fail(format!("{}: copied out of reach at {d:#x}", here()))
                    }
                    (Some(()), true) => {}
                }
            } else if placed.is_none() {
                return st.fail(format!("{}: not copied", here()));
            }
            st.copied += 1;
            let c = iced(&copy[at..], run_at);
            if c.len() != len || c.code() != ins.code() {
                return st.fail(format!("{}: the copy decodes as {c}", here()));
            }
            if c.is_ip_rel_memory_operand()
                && c.ip_rel_memory_address() != ins.ip_rel_memory_address()
            {
                return st.fail(format!(
                    "{}: the copy reaches {:#x}",
                    here(),
                    c.ip_rel_memory_address()
                ));
            }
            if !c.is_ip_rel_memory_operand() && copy[at..at + len] != window[..len] {
                st.fail(format!("{}: the copy changed bytes", here()));
            }
        }
        Ok(Some(op)) => {
            let fc = ins.flow_control();
            let ok = match op {
                Op::Jmp { target } => {
                    fc == FlowControl::UnconditionalBranch
                        && ins.near_branch_target() == target as u64
                }
                Op::Call { target } => {
                    fc == FlowControl::Call && ins.near_branch_target() == target as u64
                }
                Op::Jcc { cc, target } => {
                    fc == FlowControl::ConditionalBranch
                        && matches!(ins.mnemonic(), m if !matches!(m, Mnemonic::Loop | Mnemonic::Loope | Mnemonic::Loopne | Mnemonic::Jrcxz | Mnemonic::Jecxz))
                        && ins.condition_code() as u8 == cc + 1
                        && ins.near_branch_target() == target as u64
                }
                Op::Loop { kind, ecx, target } => {
                    let m = [Mnemonic::Loopne, Mnemonic::Loope, Mnemonic::Loop][..]
                        .get(kind as usize)
                        .copied();
                    let form = match m {
                        Some(m) => ins.mnemonic() == m,
                        None => {
                            ins.mnemonic()
                                == if ecx {
                                    Mnemonic::Jecxz
                                } else {
                                    Mnemonic::Jrcxz
                                }
                        }
                    };
                    let counter = format!("{:?}", ins.code()).ends_with("ECX")
                        || ins.mnemonic() == Mnemonic::Jecxz;
                    form && counter == ecx && ins.near_branch_target() == target as u64
                }
                Op::Ret { pop } => {
                    fc == FlowControl::Return
                        && ins.mnemonic() == Mnemonic::Ret
                        && pop
                            == if ins.op_count() == 1 {
                                ins.immediate16() as usize
                            } else {
                                0
                            }
                }
                Op::JmpReg { reg } | Op::CallReg { reg } => {
                    let want = if matches!(op, Op::JmpReg { .. }) {
                        FlowControl::IndirectBranch
                    } else {
                        FlowControl::IndirectCall
                    };
                    fc == want
                        && ins.op0_kind() == OpKind::Register
                        && ins.op0_register().is_gpr64()
                        && ins.op0_register().number() == reg as usize
                }
            };
            let kind = match op {
                Op::Jmp { .. } => "jmp",
                Op::Call { .. } => "call",
                Op::Jcc { .. } => "jcc",
                Op::Loop { .. } => "loop",
                Op::Ret { .. } => "ret",
                Op::JmpReg { .. } => "jmp *reg",
                Op::CallReg { .. } => "call *reg",
            };
            *st.planned.entry(kind).or_default() += 1;
            if !ok {
                st.fail(format!(
                    "{}: planned {op:?}, iced reads {ins} ({fc:?})",
                    here()
                ));
            }
        }
        Err(why) => {
            *st.refusals.entry(why).or_default() += 1;
            let fc = ins.flow_control();
            // The refusals iced can confirm.
            let ok = match why {
                "indirect branch through memory" => {
                    matches!(fc, FlowControl::IndirectBranch | FlowControl::IndirectCall)
                        && ins.op0_kind() == OpKind::Memory
                }
                "far return" => ins.mnemonic() == Mnemonic::Retf,
                "exception or privilege transfer" => {
                    matches!(fc, FlowControl::Interrupt | FlowControl::Exception)
                        || format!("{:?}", ins.mnemonic()).starts_with("Iret")
                        || matches!(
                            ins.mnemonic(),
                            Mnemonic::Syscall
                                | Mnemonic::Sysenter
                                | Mnemonic::Sysret
                                | Mnemonic::Sysretq
                                | Mnemonic::Sysexit
                                | Mnemonic::Sysexitq
                                | Mnemonic::Uiret
                        )
                }
                "someone else's int3" => ins.mnemonic() == Mnemonic::Int3,
                "cli/sti" => matches!(ins.mnemonic(), Mnemonic::Cli | Mnemonic::Sti),
                "hlt" => ins.mnemonic() == Mnemonic::Hlt,
                "EIP-relative operand (address-size prefix)" => {
                    ins.is_ip_rel_memory_operand() && ins.memory_base() == Register::EIP
                }
                // Anything else refused (privileged, interrupt-flag, far
                // or system transfers) must not be what the plan emulates:
                // a near relative branch or call, or a near return.
                _ => {
                    !(matches!(
                        fc,
                        FlowControl::UnconditionalBranch
                            | FlowControl::ConditionalBranch
                            | FlowControl::Call
                    ) && ins.op0_kind() == OpKind::NearBranch64)
                        && ins.mnemonic() != Mnemonic::Ret
                }
            };
            if !ok {
                st.fail(format!(
                    "{}: refused ({why}), iced reads {ins} ({fc:?})",
                    here()
                ));
            }
        }
    }
}

fn scan(path: &str, rng: &mut Rng, st: &mut Stats) {
    common::for_each_function(path, |f| {
        let mut off = f.start;
        while off < f.end {
            let ip = f.addr + (off - f.start) as u64;
            let window = &f.section[off..f.section.len().min(off + 16)];
            let ins = iced(window, ip);
            if ins.is_invalid() {
                break;
            }
            let Ok(insn) = decode(window) else { break };
            if insn.class != Class::Int3 || ins.mnemonic() == Mnemonic::Int3 {
                check(window, ip, &insn, &ins, rng, st);
            }
            off += ins.len();
        }
    });
}

fn report(what: &str, st: &Stats) {
    println!(
        "x86_copy {what}: {} instructions, {} copied ({} RIP-relative, {} out of reach refused), planned {:?}, refused {:?}",
        st.insns, st.copied, st.rip, st.refused_far, st.planned, st.refusals
    );
    for f in &st.failures {
        println!("  FAIL {f}");
    }
}

#[test]
fn vmlinux_copies_and_plans() {
    let Ok(vmlinux) = std::env::var("KP_VMLINUX_X86_64") else {
        println!("x86_copy vmlinux: skipped (KP_VMLINUX_X86_64 not set)");
        return;
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut st = Stats::default();
    scan(&vmlinux, &mut rng, &mut st);
    for m in std::env::var("KP_MODULES_X86_64")
        .unwrap_or_default()
        .split(':')
    {
        if !m.is_empty() {
            scan(m, &mut rng, &mut st);
        }
    }
    report("vmlinux", &st);
    assert!(st.insns > 100_000, "too few instructions scanned");
    assert!(
        st.rip > 1000 && st.refused_far > 0,
        "RIP-relative cases not exercised"
    );
    assert!(st.failures.is_empty());
}

#[test]
fn random_copies_and_plans() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let mut st = Stats::default();
    let mut bytes = [0u8; 16];
    for _ in 0..300_000 {
        for b in bytes.iter_mut() {
            *b = (rng.next_u64() >> 56) as u8;
        }
        let addr = 0xffff_ffff_8100_0000u64.wrapping_add(rng.next_u64() % 0x0100_0000);
        let ins = iced(&bytes, addr);
        if ins.is_invalid() {
            continue;
        }
        let Ok(insn) = decode(&bytes) else { continue };
        if insn.len as usize != ins.len() {
            continue; // the decoder tests cover disagreements
        }
        check(&bytes, addr, &insn, &ins, &mut rng, &mut st);
    }
    report("random", &st);
    assert!(st.copied > 100_000 && st.rip > 0 && !st.planned.is_empty());
    assert!(st.failures.is_empty());
}

#[test]
fn put_rel32_reaches_or_refuses() {
    let base = 0xffff_ffff_a000_0000usize;
    let mut n = 0;
    for at in [0usize, 1, 5, 27] {
        for d in [
            0i64,
            5,
            -5,
            0x7fff_ffff,
            -0x8000_0000,
            0x8000_0000,
            -0x8000_0001,
            i64::MAX,
        ] {
            for op in [0xe8u8, 0xe9] {
                let next = (base + at + 5) as i64;
                let to = next.wrapping_add(d) as usize;
                let mut code = [0u8; 32];
                let r = put_rel32(&mut code, at, op, base, to);
                let reach = i32::try_from(d).is_ok();
                let fits = at + 5 <= code.len();
                assert_eq!(r.is_some(), reach && fits, "at {at} d {d:#x}");
                if r.is_some() {
                    let i = iced(&code[at..], (base + at) as u64);
                    let want = if op == 0xe8 {
                        FlowControl::Call
                    } else {
                        FlowControl::UnconditionalBranch
                    };
                    assert_eq!(
                        (i.len(), i.flow_control(), i.near_branch_target()),
                        (5, want, to as u64)
                    );
                    n += 1;
                }
            }
        }
    }
    // No room for the five bytes, and an address sum that would overflow.
    let mut short = [0u8; 4];
    assert!(put_rel32(&mut short, 0, 0xe9, base, base).is_none());
    let mut code = [0u8; 8];
    assert!(put_rel32(&mut code, 0, 0xe9, usize::MAX - 2, 0).is_none());
    assert!(n > 20);
}
