// SPDX-License-Identifier: GPL-2.0

//! Fuzz target: one `kprobe_events` line (`src/event_parse.rs`), parsed with
//! both architectures' register tables. Properties: no panic (overflow
//! checks on, as in the kernel build); an accepted line's arguments parse
//! again without error; its canonical form parses back to itself; the
//! generated event name is an identifier.
#![no_main]

use kprobes_logic::event_parse::{parse_line, Command, ProbeDef, MAX_EVENT_NAME_LEN};
use kprobes_logic::{ARM64_REGS, X86_64_REGS};
use libfuzzer_sys::{fuzz_mutator, fuzz_target};

fn check(d: &ProbeDef<'_>, regs: &'static kprobes_logic::event_parse::RegTable) {
    for a in d.args() {
        assert!(a.is_ok(), "validated argument refused the second time");
    }
    let mut buf = [0u8; MAX_EVENT_NAME_LEN + 1];
    let name = d.write_default_name(&mut buf);
    assert!(name.len() <= MAX_EVENT_NAME_LEN);
    assert!(name.bytes().all(|b| b == b'_' || b.is_ascii_alphanumeric()));
    let canon = d.to_string();
    match parse_line(&canon, regs) {
        Ok(Command::Probe(d2)) => assert_eq!(d2.to_string(), canon),
        other => panic!("canonical form {canon:?} does not parse back: {other:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    // The kernel hands the parser one line of valid UTF-8 at most; invalid
    // UTF-8 is refused before parsing (src/events.rs).
    let Ok(s) = core::str::from_utf8(data) else {
        return;
    };
    for line in s.split('\n') {
        for regs in [X86_64_REGS, ARM64_REGS] {
            if let Ok(Command::Probe(d)) = parse_line(line, regs) {
                check(&d, regs);
            }
        }
    }
});

/// Edge values of every width the grammar narrows numbers to, in the
/// notations it reads.
const EDGES: &[&str] = &[
    "0",
    "1",
    "-1",
    "7",
    "8",
    "63",
    "64",
    "65",
    "4096",
    "4097",
    "2147483647",
    "2147483648",
    "-2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "0x0",
    "0xffffffff",
    "0x100000000",
    "0x7fffffffffffffff",
    "0x8000000000000000",
    "0xffffffffffffffff",
    "0x10000000000000000",
    "0777",
    "08",
    "01777777777777777777777",
    "02000000000000000000000",
];

fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    // One time in two: replace one run of digits (a number the user wrote
    // in some field) by an edge value; otherwise libFuzzer's own mutations.
    let mut rng = seed;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        rng as usize
    };
    if next() % 2 == 0 {
        let line = &data[..size];
        let runs: Vec<(usize, usize)> = {
            let mut v = Vec::new();
            let mut i = 0;
            while i < line.len() {
                if line[i].is_ascii_digit() {
                    let start = i;
                    while i < line.len() && (line[i].is_ascii_hexdigit() || line[i] == b'x') {
                        i += 1;
                    }
                    v.push((start, i));
                } else {
                    i += 1;
                }
            }
            v
        };
        if !runs.is_empty() {
            let (a, b) = runs[next() % runs.len()];
            let e = EDGES[next() % EDGES.len()].as_bytes();
            let new_size = size - (b - a) + e.len();
            if new_size <= max_size {
                let tail: Vec<u8> = data[b..size].to_vec();
                data[a..a + e.len()].copy_from_slice(e);
                data[a + e.len()..new_size].copy_from_slice(&tail);
                return new_size;
            }
        }
    }
    libfuzzer_sys::fuzzer_mutate(data, size, max_size)
});
