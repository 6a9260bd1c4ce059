//! Host tests of the `kprobe_events` grammar (`src/event_parse.rs`): the
//! kernel documentation's examples, every error with its position, generated
//! names, and a randomized check that the parser never panics and that what
//! it accepts round-trips through its canonical form.

use kprobes_logic::event_parse::{
    parse_line, parse_line_limited, Command, ErrKind, Location, Op, ProbeDef, Type, DEFAULT_GROUP,
    MAX_EVENT_NAME_LEN,
};
use kprobes_logic::{ARM64_REGS, X86_64_REGS};

fn probe(line: &str) -> ProbeDef<'_> {
    match parse_line(line, X86_64_REGS) {
        Ok(Command::Probe(d)) => d,
        other => panic!("{line:?}: {other:?}"),
    }
}

fn args<'a>(d: &ProbeDef<'a>) -> Vec<kprobes_logic::event_parse::FetchArg<'a>> {
    d.args().map(|a| a.expect("validated")).collect()
}

#[test]
fn documentation_examples() {
    // Arrays (kprobetrace.rst, "Types"): N values from memory, or N
    // string pointers; the edges 1 and 64 (MAX_ARRAY_LEN), any base.
    let d = probe(
        "p do_sys_open a=+0(%di):u8[4] b=+8(%si):string[0x2] c=+0(%di):x64[64] d=+0(%di):char[01]",
    );
    let a = args(&d);
    assert_eq!((a[0].ty, a[0].count), (Type::Unsigned(1), 4));
    assert_eq!((a[1].ty, a[1].count), (Type::String, 2));
    assert_eq!((a[2].ty, a[2].count), (Type::Hex(8), 64));
    assert_eq!((a[3].ty, a[3].count), (Type::Char, 1));
    assert_eq!(
        probe("p do_sys_open a=%di")
            .args()
            .next()
            .unwrap()
            .unwrap()
            .count,
        0
    );
    // Documentation/trace/kprobetrace.rst, "Usage examples".
    let d = probe("p:myprobe do_sys_open dfd=%ax filename=%dx flags=%cx mode=+4($stack)");
    assert!(!d.is_return);
    assert_eq!(d.group, None);
    assert_eq!(d.group_or_default(), DEFAULT_GROUP);
    assert_eq!(d.event, Some("myprobe"));
    assert_eq!(
        d.location,
        Location::Symbol {
            module: None,
            name: "do_sys_open",
            offset: 0
        }
    );
    let a = args(&d);
    assert_eq!(a.len(), 4);
    assert_eq!(a[0].name, Some("dfd"));
    assert_eq!(a[0].program(), &[Op::Reg(10)]);
    assert_eq!(a[0].ty, Type::Hex(8));
    assert_eq!(
        a[3].program(),
        &[
            Op::StackAddr,
            Op::Deref {
                offset: 4,
                user: false
            }
        ]
    );
    assert_eq!(a[3].body, "+4($stack)");

    let d = probe("r:myretprobe do_sys_open $retval");
    assert!(d.is_return);
    let a = args(&d);
    assert_eq!(a[0].name, None);
    assert_eq!(a[0].program(), &[Op::Retval]);

    // The tutorial sequence of the issue, on both architectures.
    let d = probe("p:myprobe do_sys_open dfd=%di filename=+0(%si):string flags=%dx mode=%cx");
    let a = args(&d);
    assert_eq!(
        a[1].program(),
        &[
            Op::Reg(13),
            Op::Deref {
                offset: 0,
                user: false
            }
        ]
    );
    assert_eq!(a[1].ty, Type::String);
    match parse_line(
        "p:myprobe do_sys_open dfd=%x0 filename=+0(%x1):string flags=%x2 mode=%x3",
        ARM64_REGS,
    ) {
        Ok(Command::Probe(d)) => {
            let a = args(&d);
            assert_eq!(a[0].program(), &[Op::Reg(0)]);
            assert_eq!(
                a[1].program(),
                &[
                    Op::Reg(1),
                    Op::Deref {
                        offset: 0,
                        user: false
                    }
                ]
            );
            assert_eq!(a[3].program(), &[Op::Reg(3)]);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        parse_line("p do_sys_open %di", ARM64_REGS),
        Err(e) if e.kind == ErrKind::BadRegName
    ));
    // $argN on a return probe: the value at the entry (the engine saves it).
    match parse_line("r do_sys_open a=$arg2 r=$retval", X86_64_REGS) {
        Ok(Command::Probe(d)) => {
            let a = args(&d);
            assert_eq!(a[0].program(), &[Op::Arg(1)]);
            assert_eq!(a[1].program(), &[Op::Retval]);
        }
        other => panic!("{other:?}"),
    }
    // The link register by its kernel name too.
    match parse_line("p do_sys_open a=%lr b=%x30", ARM64_REGS) {
        Ok(Command::Probe(d)) => {
            let a = args(&d);
            assert_eq!(a[0].program(), &[Op::Reg(30)]);
            assert_eq!(a[1].program(), &[Op::Reg(30)]);
        }
        other => panic!("{other:?}"),
    }

    assert_eq!(
        parse_line("-:myprobe", X86_64_REGS),
        Ok(Command::Remove {
            group: None,
            event: "myprobe",
            words: ""
        })
    );
    assert_eq!(
        parse_line("-:grp/ev # comment", X86_64_REGS),
        Ok(Command::Remove {
            group: Some("grp"),
            event: "ev",
            words: ""
        })
    );
    // One site (its location and leading arguments), every event of a
    // group, and names that cannot exist (they match nothing), as the
    // kernel's dyn_event_release() takes them.
    assert_eq!(
        parse_line("-:grp/ev  do_sys_open+4 a=%ax  # c", X86_64_REGS),
        Ok(Command::Remove {
            group: Some("grp"),
            event: "ev",
            words: "do_sys_open+4 a=%ax"
        })
    );
    assert_eq!(
        parse_line("-:grp/", X86_64_REGS),
        Ok(Command::Remove {
            group: Some("grp"),
            event: "",
            words: ""
        })
    );
    assert_eq!(
        parse_line("-:1bad/ev-x", X86_64_REGS),
        Ok(Command::Remove {
            group: Some("1bad"),
            event: "ev-x",
            words: ""
        })
    );
    assert_eq!(
        parse_line("   # only a comment", X86_64_REGS),
        Ok(Command::Empty)
    );
    assert_eq!(parse_line("", X86_64_REGS), Ok(Command::Empty));

    // %return, MAXACTIVE, module symbols, addresses.
    let d = probe("p:g/e do_sys_open%return r=$retval");
    assert!(d.is_return);
    assert_eq!(d.group, Some("g"));
    let d = probe("r100 vfs_read");
    assert_eq!(d.maxactive, Some(100));
    let d = probe("p ext4:ext4_file_open+0x10");
    assert_eq!(
        d.location,
        Location::Symbol {
            module: Some("ext4"),
            name: "ext4_file_open",
            offset: 16
        }
    );
    assert_eq!(
        probe("p 0xffffffff81000000").location,
        Location::Address(0xffff_ffff_8100_0000)
    );

    // Every kind of fetch argument and type.
    let d = probe(
        "p:e do_sys_open a=@jiffies b=@jiffies+8 c=\\123 d=$comm e=$stack f=$stack3 g=$arg2 \
         h=+u8(%si):ustring i=%ax:symbol j=%ax:symstr k=%ax:char l=%ax:s16 m=%ax:u32 \
         n=+0(+8(%di)):b4@3/32 o=@0x1000:x8 p=-8(%bp) q=\\-5",
    );
    let a = args(&d);
    assert_eq!(
        a[0].program(),
        &[
            Op::Symbol {
                name: "jiffies",
                offset: 0
            },
            Op::Deref {
                offset: 0,
                user: false
            }
        ]
    );
    assert_eq!(
        a[1].program()[0],
        Op::Symbol {
            name: "jiffies",
            offset: 8
        }
    );
    assert_eq!(a[2].program(), &[Op::Imm(123)]);
    assert_eq!((a[3].program(), a[3].ty), (&[Op::Comm][..], Type::String));
    assert_eq!(a[4].program(), &[Op::StackAddr]);
    assert_eq!(a[5].program(), &[Op::Stack(3)]);
    assert_eq!(a[6].program(), &[Op::Arg(1)]);
    assert_eq!(
        a[7].program(),
        &[
            Op::Reg(13),
            Op::Deref {
                offset: 8,
                user: true
            }
        ]
    );
    assert_eq!(a[7].ty, Type::UString);
    assert_eq!(a[8].ty, Type::Symbol);
    assert_eq!(a[9].ty, Type::SymStr);
    assert_eq!(a[10].ty, Type::Char);
    assert_eq!(a[11].ty, Type::Signed(2));
    assert_eq!(a[12].ty, Type::Unsigned(4));
    assert_eq!(
        a[13].program(),
        &[
            Op::Reg(14),
            Op::Deref {
                offset: 8,
                user: false
            },
            Op::Deref {
                offset: 0,
                user: false
            }
        ]
    );
    assert_eq!(
        a[13].ty,
        Type::Bitfield {
            width: 4,
            offset: 3,
            container: 4,
            signed: false
        }
    );
    assert_eq!(
        a[14].program(),
        &[
            Op::Addr(0x1000),
            Op::Deref {
                offset: 0,
                user: false
            }
        ]
    );
    assert_eq!(a[14].ty, Type::Hex(1));
    assert_eq!(
        a[15].program(),
        &[
            Op::Reg(4),
            Op::Deref {
                offset: -8,
                user: false
            }
        ]
    );
    assert_eq!(a[16].program(), &[Op::Imm(-5i64 as u64)]);
}

#[test]
fn errors_with_positions() {
    use ErrKind::*;
    let cases: &[(&str, ErrKind, usize)] = &[
        ("x:foo do_sys_open", BadCommand, 0),
        ("p5 do_sys_open", BadMaxactType, 1),
        ("r1a111 do_sys_open", BadMaxact, 1),
        ("r5000 do_sys_open", MaxactTooBig, 1),
        // No location: not a probe line for the kernel (no error_log).
        ("p", NoLocation, 0),
        ("p:ev", NoLocation, 0),
        ("p 12zz", BadProbeAddr, 2),
        ("p do+sys", BadProbeAddr, 2),
        ("r do_sys_open+4", BadRetprobe, 2),
        ("p do_sys_open+4%return", BadRetprobe, 2),
        ("p do_sys_open%ret", BadAddrSuffix, 13),
        ("r do_sys_open%returnx", BadAddrSuffix, 13),
        // The kernel's order: the location before the names, the names
        // before the arguments, an argument's name before its body and
        // its type before its expression.
        ("p:G/e.x do_sys_open+8%return", BadRetprobe, 8),
        ("p:/e do_sys_open%x", BadAddrSuffix, 16),
        ("p:G/1e do_sys_open $nope", BadEventName, 4),
        (
            "p do_sys_open __probe_ip=+0($stack9999):u32",
            UsedArgName,
            14,
        ),
        ("p do_sys_open a=$arg0:nope", BadType, 22),
        ("p do_sys_open a=$arg1 a=$nope", UsedArgName, 22),
        ("p:/ev do_sys_open", NoGroupName, 2),
        ("p:1grp/ev do_sys_open", BadGroupName, 2),
        ("p:grp/ev-x do_sys_open", BadEventName, 6),
        ("-:", NoEventName, 2),
        ("p: do_sys_open", NoEventName, 2),
        ("-", NoEventName, 1),
        ("-x:ev", BadCommand, 0),
        ("p do_sys_open $retval", RetvalOnProbe, 14),
        ("p do_sys_open a=$stackx", BadVar, 16),
        ("p do_sys_open a=$arg0", BadArgNum, 16),
        ("p do_sys_open+4 a=$arg1", NoFentryArgs, 18),
        ("p do_sys_open a=$foo", BadVar, 16),
        ("p do_sys_open dfd=%xx", BadRegName, 18),
        ("p do_sys_open a=@0xzz", BadMemAddr, 16),
        // `symstr` of what is no address read from kernel memory or a
        // register (the kernel's finalize_fetch_insn()).
        ("p do_sys_open a=\\1:symstr", BadSymString, 19),
        ("p do_sys_open a=+u0(%di):symstr", BadSymString, 28),
        // The group ends at a '.' too.
        ("p:g\\e.x do_sys_open", BadGroupName, 2),
        ("p do_sys_open a=\\x", BadImm, 17),
        ("p do_sys_open a=+0%di", DerefNeedBrace, 16),
        ("p do_sys_open a=+x(%di)", BadDerefOffs, 16),
        ("p do_sys_open a=+0(%di", DerefOpenBrace, 22),
        ("p do_sys_open a=@+10", FileOnKprobe, 16),
        ("p do_sys_open a=+0($comm)", CommCantDeref, 19),
        // (`+u`: the kernel counts from the '(', its offset arithmetic.)
        ("p do_sys_open a=+u8(%di", DerefOpenBrace, 22),
        // Immediate strings: closed, strings only, not dereferenced.
        ("p do_sys_open a=\\\"abc", ImmStrNoClose, 21),
        ("p do_sys_open a=\\\"", ImmStrNoClose, 18),
        ("p do_sys_open a=\\\"abc\":u8", NeedStringType, 23),
        ("p do_sys_open a=\\\"abc\":string[2]", NeedStringType, 23),
        ("p do_sys_open a=+0(\\\"abc\")", CommCantDeref, 19),
        // A bare name: a BTF argument name for the kernel.
        ("p do_sys_open a=di", NoSupBtfArg, 16),
        ("p do_sys_open a=1", BadFetchArg, 16),
        // Unnamed `$arg...` first, as the kernel's argv_has_var_arg().
        ("p do_sys_open+4 +0($arg1) $arg1", NoFentryArgs, 26),
        // The kernel logs BTF missing first (parse_full), then this.
        ("p do_sys_open $arg*", BadVar, 14),
        ("p do_sys_open $arg* $arg*", DoubleArgs, 20),
        ("p do_sys_open $argx", BadVar, 14),
        // Errors the kernel finds after the expression: their caret past
        // the outermost dereference's '(' (its offset is left there).
        ("p do_sys_open a=-29(%si):b0@0/8", BadBitfield, 29),
        ("p do_sys_open a=+0(%di):symstr[2]", BadString, 27),
        ("p do_sys_open a=%di:u7", BadType, 20),
        ("p do_sys_open a=%di:", BadType, 20),
        ("p do_sys_open a=%di:string", BadString, 20),
        ("p do_sys_open a=%di:b0@0/32", BadBitfield, 20),
        ("p do_sys_open a=%di:b8@30/32", BadBitfield, 20),
        ("p do_sys_open a=%di:b8@0/12", BadType, 20),
        ("p do_sys_open a=$comm:u32", NeedStringType, 22),
        (
            "p do_sys_open abcdefghijabcdefghijabcdefghijabc=%di",
            ArgNameTooLong,
            14,
        ),
        ("p do_sys_open =%di", NoArgName, 14),
        ("p do_sys_open 1a=%di", BadArgName, 14),
        ("p do_sys_open a=", NoArgBody, 16),
        ("p do_sys_open a=%di a=%si", UsedArgName, 20),
        ("p do_sys_open %di arg1=%si", UsedArgName, 18),
        // The fields every record has (the kernel's reserved_field_names).
        ("p do_sys_open common_pid=%di", UsedArgName, 14),
        ("p do_sys_open a=%di common_type=%si", UsedArgName, 20),
        ("r do_sys_open __probe_ret_ip=$retval", UsedArgName, 14),
        ("p do_sys_open __probe_ip=%di", UsedArgName, 14),
        ("p do_sys_open __probe_func=%di", UsedArgName, 14),
        ("p do_sys_open common_preempt_count=%di", UsedArgName, 14),
        // Arrays, the kernel's kprobe_syntax_errors.tc cases first.
        ("p vfs_read +0(@11):u8[10", ArrayNoClose, 24),
        ("p vfs_read +0(@11):u8[10]a", BadArraySuffix, 25),
        ("p vfs_read +0(@11):u8[10a]", BadArrayNum, 22),
        ("p vfs_read +0(@11):u8[256]", ArrayTooBig, 22),
        ("p vfs_read +0(@11):u8[65]", ArrayTooBig, 22),
        ("p vfs_read +0(@11):u8[0]", BadArrayNum, 22),
        ("p vfs_read +0(@11):u8[4294967297]", BadArrayNum, 22),
        ("p vfs_read +0(@11):u8[]", BadArrayNum, 22),
        // Read from memory only; `$comm` is one string.
        ("p do_sys_open a=%di:x8[4]", BadString, 20),
        ("p do_sys_open a=$comm:string[2]", NeedStringType, 22),
        // Fifteen operations at most (FETCH_INSN_MAX less its end): the
        // caret at the level that overflows, past its '('.
        (
            "p do_sys_open a=+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(%di)))))))))))))))",
            TooManyOps,
            19,
        ),
        (
            "p do_sys_open a=+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(@0))))))))))))))",
            TooManyOps,
            19,
        ),
    ];
    for &(line, kind, pos) in cases {
        match parse_line(line, X86_64_REGS) {
            Err(e) => {
                assert_eq!(
                    (e.kind, e.pos),
                    (kind, pos),
                    "{line:?}: {}",
                    e.kind.message()
                );
                assert!(!e.kind.message().is_empty());
            }
            Ok(c) => panic!("{line:?} accepted: {c:?}"),
        }
    }
    // 128 arguments are fine, 129 are not.
    let many = |n: usize| {
        let mut s = String::from("p do_sys_open");
        for i in 0..n {
            s.push_str(&format!(" a{i}=%di"));
        }
        s
    };
    assert!(parse_line(&many(128), X86_64_REGS).is_ok());
    let e = parse_line(&many(129), X86_64_REGS).unwrap_err();
    assert_eq!(e.kind, ErrKind::TooManyArgs);
    assert_eq!(e.kind.errno(), 7);
    println!(
        "events errors: {} cases, each with its kernel message and position",
        cases.len()
    );
}

#[test]
fn generated_names() {
    let mut buf = [0u8; MAX_EVENT_NAME_LEN + 1];
    assert_eq!(
        probe("p do_sys_open").write_default_name(&mut buf),
        "p_do_sys_open_0"
    );
    assert_eq!(
        probe("p vfs_read+0x10").write_default_name(&mut buf),
        "p_vfs_read_16"
    );
    assert_eq!(
        probe("r ext4:ext4_file_open").write_default_name(&mut buf),
        "r_ext4_ext4_file_open_0"
    );
    assert_eq!(
        probe("p do_sys_open%return").write_default_name(&mut buf),
        "r_do_sys_open_0"
    );
    assert_eq!(probe("p 0x1000").write_default_name(&mut buf), "p_0x1000");
    let long = format!("p {}", "f".repeat(200));
    assert_eq!(
        probe(&long).write_default_name(&mut buf).len(),
        MAX_EVENT_NAME_LEN
    );
    // The canonical form the control file shows back, as the kernel's
    // (trace_kprobe_show()): no "+0", an offset in decimal.
    assert_eq!(
        probe("p:myprobe do_sys_open+0 dfd=%di +0(%si):string").to_string(),
        format!("p:{DEFAULT_GROUP}/myprobe do_sys_open dfd=%di arg2=+0(%si):string")
    );
    assert_eq!(
        probe("p:myprobe m:do_sys_open+0x10").to_string(),
        format!("p:{DEFAULT_GROUP}/myprobe m:do_sys_open+16")
    );
    assert_eq!(
        probe("r16 vfs_read $retval").to_string(),
        format!("r16:{DEFAULT_GROUP}/r_vfs_read_0 vfs_read arg1=$retval")
    );
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[(self.next() % xs.len() as u64) as usize]
    }
}

/// Lines from grammar fragments, then mutated byte-wise; the parser must
/// never panic, and every accepted line must round-trip: its canonical form
/// parses to the same canonical form, with all arguments valid.
#[test]
fn random_lines_never_panic_and_round_trip() {
    let heads = [
        "p", "r", "r8", "p:ev", "r:g/e", "p:g/", "-:", "-:g/e", "x", "p5", "r0:e", "",
    ];
    let locs = [
        "do_sys_open",
        "vfs_read+0x10",
        "m:f",
        "0xffffffff81000000",
        "f%return",
        "f+4%return",
        "1x",
        "f+",
        ":f",
        "a.b$c",
    ];
    let args = [
        "%di",
        "%x0",
        "a=%si",
        "+0(%si):string",
        "+u8(%di):ustring",
        "$retval",
        "$comm",
        "$stack",
        "$stack2",
        "$arg1",
        "@jiffies",
        "@jiffies-8",
        "@0x10:u8",
        "\\7",
        "\\-1",
        "%ax:s32",
        "%ax:b3@1/8",
        "-4(+8(%bp)):x16",
        "%ax:symbol",
        "%ax:symstr",
        "%ax:char",
        "x=",
        "=y",
        "(",
        "+0(",
        "%ax:",
        "arg1=%di",
        "%ax:b9@0/8",
        "$comm:string",
        "+0(@sym):u64",
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut accepted, mut rejected, mut mutated) = (0u32, 0u32, 0u32);
    let n = 200_000;
    for i in 0..n {
        let mut line = String::new();
        line.push_str(rng.pick(&heads));
        line.push(' ');
        line.push_str(rng.pick(&locs));
        for _ in 0..rng.next() % 5 {
            line.push(' ');
            line.push_str(rng.pick(&args));
        }
        if i % 2 == 1 {
            // Byte-level mutations, kept valid UTF-8 by working on chars.
            let mut chars: Vec<char> = line.chars().collect();
            for _ in 0..1 + rng.next() % 3 {
                let at = (rng.next() % (chars.len() as u64 + 1)) as usize;
                let c = char::from_u32((rng.next() % 0x80) as u32).unwrap_or('?');
                match rng.next() % 3 {
                    0 if at < chars.len() => {
                        chars.remove(at);
                    }
                    1 if at < chars.len() => chars[at] = c,
                    _ => chars.insert(
                        at,
                        if rng.next().is_multiple_of(16) {
                            'é'
                        } else {
                            c
                        },
                    ),
                }
            }
            line = chars.into_iter().collect();
            mutated += 1;
        }
        for regs in [X86_64_REGS, ARM64_REGS] {
            match parse_line(&line, regs) {
                Ok(Command::Probe(d)) => {
                    accepted += 1;
                    assert!(d.args().all(|a| a.is_ok()), "{line:?}");
                    let canon = d.to_string();
                    match parse_line(&canon, regs) {
                        Ok(Command::Probe(d2)) => {
                            assert_eq!(d2.to_string(), canon, "{line:?}");
                            assert_eq!(d2.args().count(), d.args().count());
                            assert_eq!(d2.is_return, d.is_return);
                            assert_eq!(d2.location, d.location);
                        }
                        other => panic!("{line:?} -> {canon:?} -> {other:?}"),
                    }
                }
                Ok(_) => accepted += 1,
                Err(e) => {
                    rejected += 1;
                    assert!(e.pos <= line.len(), "{line:?}: {e:?}");
                }
            }
        }
    }
    println!(
        "events random: {n} lines ({mutated} mutated) x 2 arches: {accepted} accepted and round-tripped, {rejected} rejected"
    );
    assert!(accepted > 10_000 && rejected > 10_000);
}

/// The numbers a user can write in any numeric field, in each notation the
/// grammar reads (decimal, `0x` hex, leading-`0` octal), with signs where a
/// field takes one: the edges of every integer width the parser narrows to.
fn edge_numbers() -> Vec<String> {
    let vals: [u128; 14] = [
        0,
        1,
        7,
        8,
        63,
        64,
        65,
        4096,
        4097,
        1 << 31,
        (1 << 32) - 1,
        1 << 32,
        1 << 63,
        (1 << 64) - 1,
    ];
    let mut out = Vec::new();
    for v in vals.iter().chain(&[1u128 << 64, (1 << 64) + 1]) {
        for s in [format!("{v}"), format!("0x{v:x}"), format!("0{v:o}")] {
            out.push(s.clone());
            out.push(format!("-{s}"));
            out.push(format!("+{s}"));
        }
    }
    out.push("99999999999999999999999999999999999999".into());
    out.push("-".into());
    out.push("0x".into());
    out.push("".into());
    out
}

#[test]
fn edge_values_in_every_numeric_field_never_panic() {
    // `N` is replaced by each edge number.
    let templates = [
        "rN do_sys_open",
        "rN:e do_sys_open",
        "p do_sys_open+N",
        "p m:do_sys_open+N",
        "p N",
        "r N",
        "p do_sys_open a=%di:bN@1/64",
        "p do_sys_open a=%di:b1@N/64",
        "p do_sys_open a=%di:b1@1/N",
        "p do_sys_open a=%di:bN@N/N",
        "p do_sys_open a=$stackN",
        "p do_sys_open a=$argN",
        "p do_sys_open a=@N",
        "p do_sys_open a=@jiffiesN",
        "p do_sys_open a=@jiffies+N",
        "p do_sys_open a=@jiffies-N",
        "p do_sys_open a=N(%di)",
        "p do_sys_open a=+N(%di)",
        "p do_sys_open a=-N(%di)",
        "p do_sys_open a=+uN(%di)",
        "p do_sys_open a=+N(-N(+N(%di))):u8",
        "p do_sys_open a=\\N",
        "p do_sys_open a=%di:uN",
        "p do_sys_open a=%di:sN",
        "p do_sys_open a=%di:xN",
        "p do_sys_open a=+0(%di):string[N]",
        "p do_sys_open a=%di:x8[N]",
        "p:grpN/evN do_sys_open",
    ];
    let mut seen = 0;
    for t in templates {
        for n in edge_numbers() {
            let line = t.replace('N', &n);
            for regs in [X86_64_REGS, ARM64_REGS] {
                let line = line.replace("%di", if regs == X86_64_REGS { "%di" } else { "%x0" });
                // No panic, and an accepted line has a canonical form that
                // parses back to the same thing.
                if let Ok(Command::Probe(d)) = parse_line(&line, regs) {
                    for a in d.args() {
                        a.expect("validated arguments parse again");
                    }
                    let canon = d.to_string();
                    match parse_line(&canon, regs) {
                        Ok(Command::Probe(d2)) => assert_eq!(d2.to_string(), canon, "{line:?}"),
                        other => panic!("{line:?} -> {canon:?} -> {other:?}"),
                    }
                }
                seen += 1;
            }
        }
    }
    assert!(seen > 2000, "{seen}");
}

#[test]
fn edge_values_refused_with_their_error() {
    use ErrKind::*;
    let err = |line: &str| match parse_line(line, X86_64_REGS) {
        Err(e) => e.kind,
        other => panic!("{line:?} accepted: {other:?}"),
    };
    let ok = |line: &str| {
        assert!(
            matches!(parse_line(line, X86_64_REGS), Ok(Command::Probe(_))),
            "{line:?}"
        );
    };
    // Bitfields: every part is a u32 the user wrote; their sum must not
    // overflow (this line once panicked the kernel).
    for line in [
        "p:x do_sys_open a=%di:b4294967295@1/64",
        "p:x do_sys_open a=%di:b1@4294967295/64",
        "p:x do_sys_open a=%di:b4294967295@4294967295/64",
        "p:x do_sys_open a=%di:b2147483648@2147483648/64",
        "p:x do_sys_open a=%di:b0@0/8",
        "p:x do_sys_open a=%di:b65@0/64",
        "p:x do_sys_open a=%di:b64@1/64",
        "p:x do_sys_open a=%di:b1@64/64",
        "p:x do_sys_open a=%di:b4294967296@0/64",
        "p:x do_sys_open a=%di:b-1@0/64",
    ] {
        assert_eq!(err(line), BadBitfield, "{line}");
    }
    // The container is the type's (the kernel's find_fetch_type()).
    for line in [
        "p:x do_sys_open a=%di:b1@0/4294967295",
        "p:x do_sys_open a=%di:b1@0/4294967296",
        "p:x do_sys_open a=%di:b1@0/12",
        "p:x do_sys_open a=%di:b1@0",
    ] {
        assert_eq!(err(line), BadType, "{line}");
    }
    // Any base, as simple_strtoul(.., 0).
    ok("p:x do_sys_open a=%di:b0x8@010/0x40");
    ok("p:x do_sys_open a=%di:b64@0/64");
    ok("p:x do_sys_open a=%di:b1@63/64");
    ok("p:x do_sys_open a=%di:b8@0/8");
    // maxactive: 0 (the kernel refuses it), the kernel's limit, then past
    // u32.
    assert_eq!(err("r0 do_sys_open"), BadMaxact);
    assert_eq!(err("r0x0 do_sys_open"), BadMaxact);
    ok("r1 do_sys_open");
    ok("r4096 do_sys_open");
    assert_eq!(err("r4097 do_sys_open"), MaxactTooBig);
    assert_eq!(err("r4294967295 do_sys_open"), MaxactTooBig);
    assert_eq!(err("r4294967296 do_sys_open"), BadMaxact);
    assert_eq!(err("r18446744073709551616 do_sys_open"), BadMaxact);
    // Addresses: u64, no more; symbol offsets 0..=u32::MAX (the kernel's
    // traceprobe_split_symbol_offset() and its check).
    ok("p do_sys_open+4294967295");
    assert_eq!(err("p do_sys_open+4294967296"), BadProbeAddr);
    ok("p 0xffffffffffffffff");
    assert_eq!(err("p do_sys_open+18446744073709551616"), BadProbeAddr);
    assert_eq!(err("p do_sys_open-4"), BadProbeAddr);
    assert_eq!(err("p 0x10000000000000000"), BadProbeAddr);
    assert_eq!(err("p do_sys_open+-1"), BadProbeAddr);
    // Dereference offsets: i64, both signs.
    ok("p do_sys_open a=+9223372036854775807(%di)");
    ok("p do_sys_open a=-9223372036854775807(%di)");
    assert_eq!(
        err("p do_sys_open a=+9223372036854775808(%di)"),
        BadDerefOffs
    );
    assert_eq!(
        err("p do_sys_open a=-18446744073709551615(%di)"),
        BadDerefOffs
    );
    // Symbol offsets: down to i64::MIN, whose magnitude is past i64::MAX;
    // one that does not parse, like the name, is the kernel's to find at
    // registration (-EINVAL there), not the parser's.
    ok("p do_sys_open a=@jiffies-9223372036854775808");
    ok("p do_sys_open a=@jiffies+9223372036854775807");
    for line in [
        "p do_sys_open a=@jiffies-9223372036854775809",
        "p do_sys_open a=@jiffies+b",
    ] {
        match parse_line(line, X86_64_REGS) {
            Ok(Command::Probe(d)) => assert!(matches!(args(&d)[0].program()[0], Op::BadSymbol(_))),
            other => panic!("{line:?}: {other:?}"),
        }
    }
    ok("p do_sys_open a=@ b=@!!");
    // Stack and argument numbers: up to the thread stack's words (the
    // kernel's PARAM_MAX_STACK), and u32 where the stack is that big.
    ok("p do_sys_open a=$stack2048");
    assert_eq!(err("p do_sys_open a=$stack2049"), BadStackNum);
    assert_eq!(err("p do_sys_open a=$stack4294967296"), BadStackNum);
    ok("p do_sys_open a=$arg2048");
    assert_eq!(err("p do_sys_open a=$arg2049"), BadArgNum);
    assert_eq!(err("p do_sys_open a=$arg0"), BadArgNum);
    assert_eq!(err("p do_sys_open a=$arg4294967296"), BadArgNum);
    let big = |l| parse_line_limited(l, X86_64_REGS, u32::MAX);
    assert!(big("p do_sys_open a=$stack4294967295 b=$arg4294967295").is_ok());
    assert!(big("p do_sys_open a=$stack4294967296").is_err());
    // Fourteen dereferences of a register, and an immediate string.
    ok("p do_sys_open a=+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(%di))))))))))))))");
    ok("p do_sys_open a=\\\"abc\" b=\\\"\":string c=\\\"x\"y\"");
    // Immediates: any u64, or an i64 with its sign.
    ok("p do_sys_open a=\\18446744073709551615");
    ok("p do_sys_open a=\\-9223372036854775808");
    assert_eq!(err("p do_sys_open a=\\18446744073709551616"), BadImm);
    assert_eq!(err("p do_sys_open a=\\-9223372036854775809"), BadImm);
}

/// `%pd`/`%pD` expand as the kernel's `traceprobe_expand_dentry_args()`
/// does (kernel/trace/trace_probe.c, 6.12), and the result parses.
#[test]
fn dentry_args_expand_as_the_kernel() {
    use kprobes_logic::event_parse::{expand_dentry_args, MAX_DENTRY_ARGS_LEN};
    let mut out = [0u8; 4096];
    let cases = [
        (
            "p:testprobe dput name=$arg1:%pd",
            "p:testprobe dput name=+0x0(+0x28($arg1)):string",
        ),
        (
            "p:testprobe   vfs_read $arg1:%pD  x=%di",
            "p:testprobe vfs_read +0x0(+0x28(+0x10($arg1))):string x=%di",
        ),
        (
            "r:a/b vfs_read f=+8(%si):%pD",
            "r:a/b vfs_read f=+0x0(+0x28(+0x10(+8(%si)))):string",
        ),
    ];
    for (line, want) in cases {
        let got = expand_dentry_args(line, 0x28, 0x10, &mut out)
            .expect("expands")
            .expect("fits");
        assert_eq!(got, want);
        assert!(
            parse_line(got, X86_64_REGS).is_ok(),
            "{got:?} does not parse"
        );
    }
    // Nothing to expand: the symbol and the command word are not arguments,
    // and other lines stand.
    for line in ["p:ev dput", "p:ev a:%pd", "-:ev", "p:ev dput x=%di:u32", ""] {
        assert!(
            expand_dentry_args(line, 0x28, 0x10, &mut out).is_none(),
            "{line:?}"
        );
    }
    // The expansions' bytes, a NUL each, fit MAX_DENTRY_ARGS_LEN or the
    // line is refused (the kernel's -ENOMEM), as is a line `out` cannot hold.
    let one = "+0x0(+0x28($arg1)):string".len() + 1;
    let fit = MAX_DENTRY_ARGS_LEN / one;
    let line = |n: usize| {
        let mut l = String::from("p:ev dput");
        for _ in 0..n {
            l.push_str(" $arg1:%pd");
        }
        l
    };
    assert!(matches!(
        expand_dentry_args(&line(fit), 0x28, 0x10, &mut out),
        Some(Ok(_))
    ));
    assert!(matches!(
        expand_dentry_args(&line(fit + 1), 0x28, 0x10, &mut out),
        Some(Err(()))
    ));
    // Too many arguments is E2BIG before an expansion too long is ENOMEM
    // (the kernel counts them first).
    let full = |l: &str| {
        let mut buf = vec![0u8; kprobes_logic::event_parse::full_buf_len(l.len())];
        let p = kprobes_logic::event_parse::parse_full(
            l,
            X86_64_REGS,
            kprobes_logic::event_parse::PARAM_MAX_STACK,
            None,
            (0x28, 0x10),
            &mut kprobes_logic::event_parse::retprobe_at_entry,
            &mut buf,
        );
        p.result.map(|_| ()).map_err(|e| (e.kind, e.errno))
    };
    let with_x = |n: usize, x: usize| {
        let mut l = line(n);
        for i in 0..x {
            l.push_str(&format!(" x{i}=%di"));
        }
        l
    };
    assert_eq!(full(&with_x(fit + 1, 0)), Err((ErrKind::FailRegProbe, 12)));
    assert_eq!(
        full(&with_x(fit + 1, 128 - fit)),
        Err((ErrKind::TooManyArgs, 7))
    );
    assert_eq!(full(&with_x(fit, 128 - fit)), Ok(()));
    assert_eq!(
        full(&with_x(fit, 129 - fit)),
        Err((ErrKind::TooManyArgs, 7))
    );
    let mut small = [0u8; 20];
    assert!(matches!(
        expand_dentry_args("p:ev dput $arg1:%pd", 0x28, 0x10, &mut small),
        Some(Err(()))
    ));
}

// The kernel's own parser error checks, `kprobe_syntax_errors.tc` of the
// 6.12 ftrace selftests: each line is refused, with the caret where the
// kernel's `error_log` puts it (the test's `^`). Lines whose refusal needs
// the running kernel (an unknown symbol, an instruction boundary, an
// existing event) are checked in the guest, by the test itself.

/// The test's lines that the grammar alone refuses, `^` at the caret.
const CASES: &[&str] = &[
    "p^100 vfs_read",
    "r^1a111 vfs_read",
    "r^100000 vfs_read",
    "p ^hoge-fuga",
    "p ^hoge+1000-1000",
    "r ^vfs_read+10",
    "p:^/bar vfs_read",
    "p:^12345678901234567890123456789012345678901234567890123456789012345/bar vfs_read",
    "p:^foo.1/bar vfs_read",
    "p:^ vfs_read",
    "p:foo/^12345678901234567890123456789012345678901234567890123456789012345 vfs_read",
    "p:foo/^bar.1 vfs_read",
    "p vfs_read ^$retval",
    "p vfs_read ^$stack10000",
    "p vfs_read ^$arg10000",
    "p vfs_read ^$none_var",
    "p vfs_read ^%none_reg",
    "p vfs_read ^@12345678abcde",
    "p vfs_read ^@+10",
    "p vfs_read arg1=\\^x",
    "p vfs_read arg1=\\\"abcd^",
    "p vfs_read ^+0@0)",
    "p vfs_read ^+0ab1(@0)",
    "p vfs_read +0(+0(@0^)",
    "p vfs_read +0(^$comm)",
    "p vfs_read ^&1",
    "p vfs_read +0(^+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(@0))))))))))))))",
    "p vfs_read +0(@11):u8[10^",
    "p vfs_read +0(@11):u8[10]^a",
    "p vfs_read +0(@11):u8[^10a]",
    "p vfs_read +0(@11):u8[^256]",
    "p vfs_read @11:^unknown_type",
    "p vfs_read $stack0:^string",
    "p vfs_read @11:^b10@a/16",
    "p vfs_read ^arg123456789012345678901234567890=@11",
    "p vfs_read ^=@11",
    "p vfs_read ^var.1=@11",
    "p vfs_read var1=@11 ^var1=@12",
    "p vfs_read ^+1234567(+1234567(+1234567(+1234567(+1234567(+1234567(@1234))))))",
    "p vfs_read arg1=^",
    "p vfs_read^%hoge",
    "p ^vfs_read+10%return",
];

#[test]
fn kernel_selftest_errors_at_the_kernels_caret() {
    let mut bad = Vec::new();
    for case in CASES {
        let pos = case.find('^').unwrap();
        let line = case.replacen('^', "", 1);
        match parse_line(&line, X86_64_REGS) {
            Err(e) if e.pos == pos => {}
            Err(e) => bad.push(format!(
                "{line:?}: {:?} at {} (kernel: {pos})",
                e.kind, e.pos
            )),
            Ok(Command::Probe(_)) | Ok(_) => bad.push(format!("{line:?}: accepted")),
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The kernel's `isspace()` (lib/ctype.c), which `argv_split()` splits a
/// line at: every byte it calls a space, and no other.
#[test]
fn is_space_is_the_kernels() {
    use kprobes_logic::event_parse::is_space;
    // _ctype[]: _S for \t \n \v \f \r, _S|_SP for ' '; (0xa0 is _S|_SP in
    // Latin-1, but argv_split() sees the line as bytes of UTF-8 text, where
    // it never stands alone; the kernel's isspace() of it is true, ours
    // false: documented by this case.)
    let kernel = |c: u8| matches!(c, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' ' | 0xa0);
    for c in 0..=255u8 {
        if c == 0xa0 {
            assert!(!is_space(c));
            continue;
        }
        assert_eq!(is_space(c), kernel(c), "byte {:#04x}", c);
    }
}

#[test]
fn errnos_are_the_kernels() {
    // (The guest compares these with the kernel's own write errors:
    // events-errno-as-kernel.)
    let e = |line: &str| match parse_line(line, X86_64_REGS) {
        Err(e) => (e.kind, e.errno),
        Ok(c) => panic!("{line}: {c:?}"),
    };
    use ErrKind::*;
    assert_eq!(
        e("p vfs_read a=+99999999999999999999(%di)"),
        (BadDerefOffs, 34)
    );
    assert_eq!(
        e("p vfs_read a=+0x1ffffffffffffffff(%di)"),
        (BadDerefOffs, 34)
    );
    assert_eq!(e("p vfs_read a=+0x1g(%di)"), (BadDerefOffs, 22));
    assert_eq!(
        e("p vfs_read a=-9223372036854775809(%di)"),
        (BadDerefOffs, 34)
    );
    assert_eq!(e("p vfs_read a=--5(%di)"), (BadDerefOffs, 22));
    assert_eq!(e("p vfs_read a=\\99999999999999999999999"), (BadImm, 34));
    assert_eq!(e("p vfs_read a=\\0x1x"), (BadImm, 22));
    assert_eq!(e("p vfs_read a=@99999999999999999999999"), (BadMemAddr, 34));
    assert_eq!(
        e(&format!(
            "p vfs_read a={}%di{}",
            "+0(".repeat(16),
            ")".repeat(16)
        )),
        (ArgTooLong, 7)
    );
    // The signs kstrtol() takes: its own after `+`, none after `-`.
    assert_eq!(e("p vfs_read a=-+5(%di)"), (BadDerefOffs, 22));
    let off = |line: &str| match args(&probe(line))[0].program()[1] {
        Op::Deref { offset, .. } => offset,
        other => panic!("{line}: {other:?}"),
    };
    assert_eq!(off("p vfs_read a=-9223372036854775808(%di)"), i64::MIN);
    assert_eq!(off("p vfs_read a=+-5(%di)"), -5);
}
