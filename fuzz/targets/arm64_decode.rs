// SPDX-License-Identifier: GPL-2.0

//! Fuzz target: the arm64 classifier (`arch/arm64/decode.rs`) on arbitrary
//! instruction words, one and a sequence at a time. Properties: no panic;
//! classification is a pure function of the word.
#![no_main]

use kprobes_logic::arm64_decode::{classify, in_exclusive_sequence};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let words: Vec<u32> = data
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    for &w in &words {
        assert_eq!(classify(w), classify(w));
    }
    let _ = in_exclusive_sequence(&words);
});
