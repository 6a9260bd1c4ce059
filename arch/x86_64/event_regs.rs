// SPDX-License-Identifier: GPL-2.0

//! The register names of the `kprobe_events` grammar on x86_64 (`%REG` in a
//! fetch argument), with the index of each one's 64-bit word in
//! `struct pt_regs`. Pure data: the host crate builds it too (the grammar's
//! tests and fuzzer use both arches' tables).

/// Whether the `pt_regs` word `word` holds the register at a function
/// entry served by ftrace: all of them on x86_64.
pub const fn valid_at_ftrace_entry(_word: u16) -> bool {
    true
}

/// x86_64: `struct pt_regs` word order (the names of `%REG`, as the
/// kernel's `regs_query_register_offset()` knows them).
pub const EVENT_REGS: &[(&str, u16)] = &[
    ("r15", 0),
    ("r14", 1),
    ("r13", 2),
    ("r12", 3),
    ("bp", 4),
    ("bx", 5),
    ("r11", 6),
    ("r10", 7),
    ("r9", 8),
    ("r8", 9),
    ("ax", 10),
    ("cx", 11),
    ("dx", 12),
    ("si", 13),
    ("di", 14),
    ("orig_ax", 15),
    ("ip", 16),
    ("cs", 17),
    ("flags", 18),
    ("sp", 19),
    ("ss", 20),
];
