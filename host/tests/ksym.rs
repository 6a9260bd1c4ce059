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

/// `sprint_symbol()` into a buffer with headroom: the text moves to the
/// start, from the headroom's end normally, from 7 bytes before it when the
/// kernel wrote there (a module symbol name too long for KSYM_NAME_LEN).
#[test]
fn sprint_symbol_headroom() {
    use kprobes_logic::ksym::{settle_sprint_symbol, SPRINT_HEADROOM};
    let mut buf = [0u8; 64];
    let t = b"vfs_read+0x4/0x1c0";
    buf[SPRINT_HEADROOM..SPRINT_HEADROOM + t.len()].copy_from_slice(t);
    settle_sprint_symbol(&mut buf);
    assert_eq!(&buf[..t.len()], t);
    assert!(buf[t.len()..].iter().all(|&b| b == 0));
    // The name did not fit: the kernel wrote "+off/size [mod]" 7 bytes early,
    // over the head of the truncated name.
    let mut buf = [0u8; 64];
    buf[SPRINT_HEADROOM..SPRINT_HEADROOM + 20].copy_from_slice(&[b'x'; 20]);
    let t = b"+0x10/0x40 [kprobes]\0";
    buf[SPRINT_HEADROOM - 7..SPRINT_HEADROOM - 7 + t.len()].copy_from_slice(t);
    settle_sprint_symbol(&mut buf);
    assert_eq!(&buf[..t.len() - 1], &t[..t.len() - 1]);
    let i = parse_sprint_symbol(&buf);
    if let Some(i) = i {
        assert_eq!((i.offset, i.size), (0x10, 0x40));
    }
}
