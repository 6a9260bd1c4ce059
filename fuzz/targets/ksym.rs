// SPDX-License-Identifier: GPL-2.0

//! Fuzz target: the symbol-string parsers (`src/ksym.rs`): `sprint_symbol()`
//! output as the kernel prints it, and `[module:]symbol` probe specs.
//! Properties: no panic; what is returned is a sub-slice of the input that
//! satisfies the documented form.
#![no_main]

use kprobes_logic::ksym::{parse_sprint_symbol, parse_sym_spec, KSYM_NAME_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(s) = parse_sprint_symbol(data) {
        assert!(!s.name.is_empty());
        assert!(s.name.len() <= data.len());
        if let Some(m) = s.module {
            assert!(!m.is_empty());
        }
    }
    if let Some(s) = parse_sym_spec(data) {
        assert!(!s.name.is_empty() && s.name.len() < KSYM_NAME_LEN);
        assert!(!s.name.contains(&b':'));
    }
});
