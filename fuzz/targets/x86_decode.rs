// SPDX-License-Identifier: GPL-2.0

//! Fuzz target: the x86-64 decoder (`arch/x86_64/decode.rs`) on arbitrary
//! bytes. Properties: no panic; a decoded instruction is 1..=15 bytes, fits
//! the input, and every part it reports (ModRM, displacement, immediate,
//! relative displacement) lies inside it; branch and RIP-relative targets
//! are computed without overflow from any address.
#![no_main]

use kprobes_logic::x86_decode::{decode, MAX_INSN_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(i) = decode(data) else {
        return;
    };
    let len = usize::from(i.len);
    assert!((1..=MAX_INSN_LEN).contains(&len) && len <= data.len());
    let inside = |off: u8, n: u8| n == 0 || usize::from(off) + usize::from(n) <= len;
    assert!(inside(i.disp_off, i.disp_len));
    assert!(inside(i.imm_off, i.imm_len));
    assert!(inside(i.rel_off, i.rel_len));
    if i.modrm.is_some() {
        assert!(usize::from(i.modrm_off) < len);
    }
    for ip in [0, 1, u64::MAX, u64::MAX - 14, 0xffff_ffff_8100_0000] {
        let _ = i.rel_target(ip, data);
        let _ = i.rip_target(ip, data);
    }
});
