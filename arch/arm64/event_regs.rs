// SPDX-License-Identifier: GPL-2.0

//! The register names of the `kprobe_events` grammar on arm64 (`%REG` in a
//! fetch argument), with the index of each one's 64-bit word in
//! `struct pt_regs`. Pure data: the host crate builds it too (the grammar's
//! tests and fuzzer use both arches' tables).

/// Whether the `pt_regs` word `word` holds the register at a function
/// entry served by ftrace (x0-x8, fp, lr, sp, pc, pstate; the kernel's
/// `ftrace_regs` on arm64): an event reading another one takes a breakpoint.
pub const fn valid_at_ftrace_entry(word: u16) -> bool {
    word <= 8 || word >= 29
}

/// arm64: `x0`..`x30`, `lr` (x30), `sp`, `pc`, `pstate`: the kernel's
/// `regoffset_table` (arch/arm64/kernel/ptrace.c).
pub const EVENT_REGS: &[(&str, u16)] = &[
    ("x0", 0),
    ("x1", 1),
    ("x2", 2),
    ("x3", 3),
    ("x4", 4),
    ("x5", 5),
    ("x6", 6),
    ("x7", 7),
    ("x8", 8),
    ("x9", 9),
    ("x10", 10),
    ("x11", 11),
    ("x12", 12),
    ("x13", 13),
    ("x14", 14),
    ("x15", 15),
    ("x16", 16),
    ("x17", 17),
    ("x18", 18),
    ("x19", 19),
    ("x20", 20),
    ("x21", 21),
    ("x22", 22),
    ("x23", 23),
    ("x24", 24),
    ("x25", 25),
    ("x26", 26),
    ("x27", 27),
    ("x28", 28),
    ("x29", 29),
    ("x30", 30),
    ("lr", 30),
    ("sp", 31),
    ("pc", 32),
    ("pstate", 33),
];
