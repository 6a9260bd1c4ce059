//! Host tests of `src/ksym.rs`: parsing of `sprint_symbol()` output and of
//! `[module:]symbol` probe specs.

use kprobes_logic::ksym::{parse_sprint_symbol, parse_sym_spec, SymInfo, SymSpec};

#[test]
fn sprint_symbol_forms() {
    assert_eq!(
        parse_sprint_symbol(b"do_sys_open+0x5/0x90\0garbage"),
        Some(SymInfo {
            name: b"do_sys_open",
            offset: 5,
            size: 0x90,
            module: None
        })
    );
    assert_eq!(
        parse_sprint_symbol(b"kp_kunit_target+0x0/0x21 [kprobes_kunit]"),
        Some(SymInfo {
            name: b"kp_kunit_target",
            offset: 0,
            size: 0x21,
            module: Some(b"kprobes_kunit")
        })
    );
    // A module with a build id.
    assert_eq!(
        parse_sprint_symbol(b"f+0x10/0x20 [mod 0123abcd]").map(|s| s.module),
        Some(Some(&b"mod"[..]))
    );
    // Names with dots and a '+' inside (clang's suffixes).
    assert_eq!(
        parse_sprint_symbol(b"foo.cold+0x1/0x8").map(|s| s.name),
        Some(&b"foo.cold"[..])
    );
    assert_eq!(
        parse_sprint_symbol(b"a+b+0x2/0x4").map(|s| (s.name, s.offset)),
        Some((&b"a+b"[..], 2))
    );
}

#[test]
fn sprint_symbol_rejects() {
    for bad in [
        &b"0xffffffff81000000"[..],
        b"",
        b"+0x1/0x2",
        b"f+0x1",
        b"f+1/2",
        b"f+0x/0x2",
        b"f+0x1/0x2 [",
        b"f+0x1/0x2 []",
        b"f+0x1/0x2 mod",
        b"f+0x11111111111111111/0x2",
        b"f+0xg/0x2",
    ] {
        assert_eq!(
            parse_sprint_symbol(bad),
            None,
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn sym_specs() {
    assert_eq!(
        parse_sym_spec(b"do_sys_open"),
        Some(SymSpec {
            module: None,
            name: b"do_sys_open"
        })
    );
    assert_eq!(
        parse_sym_spec(b"kp_target:kp_target_func"),
        Some(SymSpec {
            module: Some(b"kp_target"),
            name: b"kp_target_func"
        })
    );
    for bad in [&b""[..], b":f", b"m:", b"a b", b"f\n", b"m:f:g", b"-f"] {
        assert_eq!(
            parse_sym_spec(bad),
            None,
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    let long = vec![b'a'; 600];
    assert_eq!(parse_sym_spec(&long), None);
}
