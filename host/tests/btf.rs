//! Host tests of BTF argument names: the BTF reader (`src/btf.rs`) on a
//! fixture pahole wrote (`data/btf_fixture.c`, `data/btf_fixture.btf`) and
//! on this machine's own vmlinux BTF when it has one, and the grammar with
//! BTF (`event_parse::parse_full`): `$arg*`/`$argN` expansion, names,
//! fields, bitfields, string types, a typed `$retval`, and every BTF
//! refusal with the kernel's message, caret and errno. The guest checks
//! the same against the kernel's own parser (`events-btf-*`).

use kprobes_logic::btf::{kind, Btf};
use kprobes_logic::event_parse::{
    full_buf_len, parse_full, retprobe_at_entry, Command, ErrKind, FetchArg, Op, Parsed, Type,
    PARAM_MAX_STACK,
};
use kprobes_logic::X86_64_REGS;

const FIXTURE: &[u8] = include_bytes!("data/btf_fixture.btf");

fn index(data: &[u8]) -> Vec<u32> {
    let n = Btf::count(data).expect("a BTF blob");
    let mut idx = vec![0u32; n];
    Btf::fill_index(data, &mut idx).expect("indexed");
    idx
}

/// A line's note (an error_log entry before its error) and its result:
/// the canonical line, or the error (kind, caret, errno).
type Outcome = (
    Option<(ErrKind, usize)>,
    Result<String, (ErrKind, usize, i32)>,
);

/// Calls `f` with what `parse_full` makes of `line` with the fixture's BTF
/// (`with_btf`) or none.
fn parsed<R>(line: &str, with_btf: bool, f: impl FnOnce(Parsed<'_>) -> R) -> R {
    let idx = index(FIXTURE);
    let b = Btf::new(FIXTURE, &idx).unwrap();
    let mut buf = vec![0u8; full_buf_len(line.len())];
    f(parse_full(
        line,
        X86_64_REGS,
        PARAM_MAX_STACK,
        with_btf.then_some(&b),
        (0x28, 0x18),
        &mut retprobe_at_entry,
        &mut buf,
    ))
}

/// What the line gives with the fixture's BTF (`with_btf`) or none.
fn run(line: &str, with_btf: bool) -> Outcome {
    parsed(line, with_btf, |p| {
        let note = p.note.map(|n| (n.kind, n.pos));
        let r = match p.result {
            Ok(Command::Probe(d)) => Ok(d.to_string()),
            Ok(other) => panic!("{line}: {other:?}"),
            Err(e) => Err((e.kind, e.pos, e.errno)),
        };
        (note, r)
    })
}

/// The arguments of an accepted line (with the fixture's BTF).
fn args_of(line: &str, f: impl FnOnce(&[FetchArg<'_>])) {
    parsed(line, true, |p| match p.result {
        Ok(Command::Probe(d)) => {
            let a: Vec<_> = d.args().map(|a| a.expect("validated")).collect();
            f(&a)
        }
        other => panic!("{line}: {other:?}"),
    })
}

#[test]
fn reader_reads_what_pahole_wrote() {
    let idx = index(FIXTURE);
    let b = Btf::new(FIXTURE, &idx).unwrap();
    let names = |f: &str| {
        let p = b.find_func_proto(f).expect(f);
        assert_eq!(p.kind(), kind::FUNC_PROTO);
        (0..p.vlen())
            .map(|i| b.name(b.param(&p, i).unwrap().0).unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(names("f_all"), ["o", "n", "s", "k", "flag"]);
    assert_eq!(names("f_void"), ["x"]);
    assert!(names("f_ptr").is_empty());
    assert!(b.find_func_proto("nosuch").is_none());
    // void return; a member inside an anonymous struct inside an
    // anonymous union: found with that union's offset.
    assert_eq!(b.find_func_proto("f_void").unwrap().size_or_type, 0);
    let outer = (1..=b.len() as u32)
        .filter_map(|i| b.ty(i))
        .find(|t| t.kind() == kind::STRUCT && b.name(t.name_off) == Some("outer"))
        .unwrap();
    let (m, anon) = b.find_member(outer, "s2").unwrap().unwrap();
    assert_eq!((anon + (m.offset & 0xffffff)) / 8, 34);
    assert_eq!(b.find_member(outer, "nosuch"), Ok(None));
    // Not a struct: the kernel's -EINVAL.
    assert_eq!(
        b.find_member(b.ty(0).unwrap(), "x"),
        Err(kprobes_logic::btf::NotStruct)
    );
    // Ids past the end, and 0 (void).
    assert!(b.ty(b.len() as u32 + 1).is_none());
    assert_eq!(b.ty(0).unwrap().kind(), kind::UNKN);
}

#[test]
fn reader_survives_any_damage() {
    // Every truncation, and every byte flipped to a few edge values: no
    // panic, and an index only where the walk still adds up.
    for n in 0..FIXTURE.len() {
        let _ = Btf::count(&FIXTURE[..n]);
    }
    let mut data = FIXTURE.to_vec();
    for i in 0..data.len() {
        let orig = data[i];
        for v in [0u8, 1, 0x7f, 0x80, 0xff] {
            data[i] = v;
            if let Some(n) = Btf::count(&data) {
                let mut idx = vec![0u32; n];
                if Btf::fill_index(&data, &mut idx).is_some() {
                    let b = Btf::new(&data, &idx).unwrap();
                    for f in ["f_all", "f_void", "f_ptr", "x"] {
                        if let Some(p) = b.find_func_proto(f) {
                            for k in 0..p.vlen() + 1 {
                                let _ = b
                                    .param(&p, k)
                                    .map(|(n, t)| (b.name(n), b.skip_modifiers(t)));
                            }
                        }
                    }
                    for id in 0..b.len() as u32 + 2 {
                        if let Some(t) = b.ty(id) {
                            let _ = b.find_member(t, "s2");
                            let _ = b.skip_modifiers(id);
                        }
                    }
                }
            }
        }
        data[i] = orig;
    }
}

#[test]
fn vmlinux_btf_of_this_machine() {
    let Ok(data) = std::fs::read("/sys/kernel/btf/vmlinux") else {
        eprintln!("skip: no /sys/kernel/btf/vmlinux on this machine");
        return;
    };
    let idx = index(&data);
    let b = Btf::new(&data, &idx).unwrap();
    assert!(b.len() > 1000, "{} types", b.len());
    let p = b.find_func_proto("vfs_read").expect("vfs_read");
    let names: Vec<_> = (0..p.vlen())
        .map(|i| b.name(b.param(&p, i).unwrap().0).unwrap())
        .collect();
    assert_eq!(names, ["file", "buf", "count", "pos"]);
}

#[test]
fn meta_args_expand_to_names() {
    let ok = |line: &str, want: &str| {
        assert_eq!(run(line, true), (None, Ok(want.to_string())), "{line}")
    };
    ok("p:g/e f_all $arg*", "p:g/e f_all o=o n=n s=s k=k flag=flag");
    ok("p:g/e f_all $arg2:x32 $arg1", "p:g/e f_all n=n:x32 o=o");
    ok("p:g/e f_all x=$arg2 $arg2", "p:g/e f_all x=$arg2 n=n");
    ok("p:g/e f_all +0($arg1)", "p:g/e f_all arg1=+0($arg1)");
    ok(
        "r:g/e f_all $arg* $retval",
        "r:g/e f_all o=o n=n s=s k=k flag=flag arg6=$retval",
    );
    // A bare name is its own argument name; others keep `argN`.
    ok("p:g/e f_all o->x n", "p:g/e f_all arg1=o->x n=n");
    // Without BTF: `$argN` stays, and names are `argN`.
    assert_eq!(
        run("p:g/e f_all $arg2", false),
        (None, Ok("p:g/e f_all arg1=$arg2".into()))
    );
    // `$arg*` where there are no parameters: the kernel logs that BTF is
    // missing, goes on, and fails at the variable.
    assert_eq!(
        run("p:g/e f_ptr $arg*", true),
        (
            Some((ErrKind::NoSupBtfArg, 12)),
            Err((ErrKind::BadVar, 12, 22))
        )
    );
    assert_eq!(
        run("p:g/e f_all $arg*", false),
        (
            Some((ErrKind::NoSupBtfArg, 12)),
            Err((ErrKind::BadVar, 12, 22))
        )
    );
}

#[test]
fn btf_errors_at_the_kernels_caret() {
    use ErrKind::*;
    let cases: &[(&str, ErrKind, usize, i32)] = &[
        ("p f_all hoge", NoBtfArg, 8, 2),
        ("p f_all $arg9", NoBtfArg, 8, 2),
        ("p f_all $arg0", NoBtfEntry, 8, 2),
        ("p f_all $arg1x", BadVar, 8, 2),
        ("p f_all $arg* $arg*", DoubleArgs, 14, 22),
        ("p f_all+4 $arg1", NoFentryArgs, 10, 22),
        ("p f_all+4 o", NoSupBtfArg, 10, 22),
        ("p f_all o->nosuch", NoBtfField, 11, 2),
        ("p f_all o->in.nosuch", NoBtfField, 14, 2),
        ("p f_all n->x", NoPtrStrct, 11, 22),
        ("p f_all o->in->a", NoPtrStrct, 15, 22),
        ("p f_all o-x", BadHyphen, 9, 22),
        ("p f_all o->in-x", BadHyphen, 13, 22),
        ("p f_all o.x", NoSupDatArg, 10, 95),
        ("p f_all o:string", BadType4Str, 8, 22),
        ("p f_all o->str:string", BadType4Str, 8, 22),
        ("p f_all common_pid", UsedArgName, 8, 22),
        ("p f_all n n", UsedArgName, 10, 22),
        ("p f_all $arg2 n", UsedArgName, 14, 22),
        ("r f_void $retval", NoRetval, 9, 2),
        ("r f_all $retval->x", NoPtrStrct, 17, 22),
        ("r f_all $retval.x", NoSupDatArg, 16, 95),
        ("r f_all $retvalx", NoBtfArg, 8, 2),
        ("p f_all $retval", RetvalOnProbe, 8, 22),
        ("p f_long_names $arg*", Args2Long, 15, 7),
        // After `$arg*`, an argument's caret is in the word of the same
        // index as written, or past the line when there is none.
        ("p f_all $arg* x=%zz", BadRegName, 20, 22),
        ("p f_all $arg2 %zz", BadRegName, 14, 22),
        // `symstr` is no string type for the BTF check (the kernel's
        // strstr(type, "string")); the value's symbol.
        // A function without parameters: "no BTF entry" where BTF is
        // asked first, "not found" after a `$arg` word or a typed
        // `$retval` asked (the kernel asks once per line).
        ("p f_ptr x", NoBtfEntry, 8, 2),
        ("p f_ptr $arg1 x", NoBtfArg, 14, 2),
        ("r f_ptr $retval x", NoBtfArg, 16, 2),
        // A variadic function's `...` (a parameter without a name): an
        // empty argument for the kernel, past the line's last word here.
        ("p f_var $arg*", NoArgBody, 14, 22),
        // The kernel's return flag is only for a probe on a symbol.
        ("r 0x1000 $retval", RetvalOnProbe, 9, 22),
        ("r 0x1000 x", NoSupBtfArg, 9, 22),
    ];
    for &(line, kind, pos, errno) in cases {
        assert_eq!(run(line, true).1, Err((kind, pos, errno)), "{line}");
    }
    assert_eq!(run("p f_all o", false).1, Err((NoSupBtfArg, 8, 95)));
    // Away from an entry or return, EINVAL with or without BTF.
    assert_eq!(run("p f_all+4 o", false).1, Err((NoSupBtfArg, 10, 22)));
    assert_eq!(
        run("p:g/e f_all o:symstr", true).1,
        Ok("p:g/e f_all o=o:symstr".into())
    );
    // `$arg*` without BTF: the note's caret at the last `$arg` word.
    assert_eq!(run("p f_ptr $arg* $arg1", true).0, Some((NoSupBtfArg, 14)));
    // A kernel without BTF ignores what follows `$retval`.
    assert_eq!(
        run("r:g/e f_all $retval->x", false).1,
        Ok("r:g/e f_all arg1=$retval->x".into())
    );
}

#[test]
fn fields_types_and_bitfields() {
    let deref = |offset| Op::Deref {
        offset,
        user: false,
    };
    // Scalars: their own types; a pointer is x64, an enum s32, _Bool u8.
    args_of("p f_all o n s k flag", |a| {
        let t: Vec<_> = a.iter().map(|a| a.ty).collect();
        assert_eq!(
            t,
            [
                Type::Hex(8),
                Type::Unsigned(8),
                Type::Hex(8),
                Type::Signed(4),
                Type::Unsigned(1)
            ]
        );
        assert_eq!(a[1].program(), [Op::Arg(1)]);
    });
    // Fields: one read per `->`, at the `.`-joined members' offset.
    args_of("p f_all o->x o->in.a o->s2 o->ip->a", |a| {
        assert_eq!(a[0].program(), [Op::Arg(0), deref(0)]);
        assert_eq!(a[1].program(), [Op::Arg(0), deref(8)]);
        assert_eq!(a[2].program(), [Op::Arg(0), deref(34)]);
        assert_eq!(a[2].ty, Type::Signed(2));
        assert_eq!(a[3].program(), [Op::Arg(0), deref(24), deref(0)]);
        assert_eq!(a[3].ty, Type::Signed(4));
    });
    // Bitfields: the word at the byte they start in, their bits; a signed
    // one declared signed.
    args_of("p f_all o->in.b o->in.c o->in.neg o->in.b:u8", |a| {
        assert_eq!(a[0].program(), [Op::Arg(0), deref(12)]);
        let bits = |width, offset, signed| Type::Bitfield {
            width,
            offset,
            container: 4,
            signed,
        };
        assert_eq!(a[0].ty, bits(3, 0, false));
        assert_eq!(a[1].ty, bits(5, 3, false));
        assert_eq!(a[2].program(), [Op::Arg(0), deref(13)]);
        assert_eq!(a[2].ty, bits(4, 0, true));
        // A type given: no bits taken out (as the kernel).
        assert_eq!(a[3].ty, Type::Unsigned(1));
    });
    // Strings: a char array where it is, a char pointer read first, a
    // user one from user memory.
    args_of("p f_all o->ip->name:string o->ustr:string s:ustring", |a| {
        assert_eq!(a[0].program(), [Op::Arg(0), deref(24), deref(6)]);
        assert_eq!(a[1].program(), [Op::Arg(0), deref(40), deref(0)]);
        assert_eq!(
            a[2].program(),
            [
                Op::Arg(2),
                Op::Deref {
                    offset: 0,
                    user: true
                }
            ]
        );
        assert!(a.iter().all(|a| a.ty.is_string()));
    });
    // A return probe: `$retval` typed, parameters saved at the entry.
    args_of("r f_ptr $retval $retval->c", |a| {
        assert_eq!(a[0].ty, Type::Hex(8));
        assert_eq!(a[1].program(), [Op::Retval, deref(4)]);
    });
    args_of("r f_all $retval o->x", |a| {
        assert_eq!(a[0].ty, Type::Signed(4));
        assert_eq!(a[1].program(), [Op::Arg(0), deref(0)]);
    });
    // A read of a BTF value is no longer typed by BTF.
    args_of("p f_all +0(o->ip)", |a| assert_eq!(a[0].ty, Type::Hex(8)));
}
