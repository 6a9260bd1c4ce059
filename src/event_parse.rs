// SPDX-License-Identifier: GPL-2.0

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
//! The `kprobe_events` grammar (`Documentation/trace/kprobetrace.rst`):
//! pure, `core`-only, no allocation. The kernel side compiles what this
//! returns; the host tests (`host/tests/events.rs`) run the documentation's
//! examples, every error, and a randomized no-panic / round-trip check.
//!
//! ```text
//! p[:[GRP/][EVENT]] [MOD:]SYM[+offs]|MEMADDR [FETCHARGS]
//! r[MAXACTIVE][:[GRP/][EVENT]] [MOD:]SYM[+0] [FETCHARGS]
//! p[:[GRP/][EVENT]] [MOD:]SYM[+0]%return [FETCHARGS]
//! -:[GRP/]EVENT
//! ```
//!
//! A line is parsed in one pass into a [`Command`]; a probe's fetch
//! arguments are validated then, and re-parsed one by one with
//! [`ProbeDef::args`] when the caller compiles them (no storage needed here).
//! Errors carry the kernel's message (`error_log`) and the byte position of
//! the offending token.

use core::fmt;

use super::btf::{self, Btf};

/// Group of events defined without one (the kernel's own is `kprobes`).
pub const DEFAULT_GROUP: &str = "kprobes_rs";

/// The kernel's default group, the engine's where the kernel has no kprobe
/// events of its own (there the engine's files are the standard ones).
pub const KERNEL_DEFAULT_GROUP: &str = "kprobes";
/// Longest group or event name (the kernel's `MAX_EVENT_NAME_LEN` - 1).
pub const MAX_EVENT_NAME_LEN: usize = 63;
/// Longest argument name (`MAX_ARG_NAME_LEN` - 1).
pub const MAX_ARG_NAME_LEN: usize = 31;
/// Most fetch arguments per probe (`MAX_TRACE_ARGS`).
pub const MAX_ARGS: usize = 128;
/// Most operations in one fetch argument (a base and nested dereferences;
/// `@ADDR` is two): the kernel's `FETCH_INSN_MAX` (16) less its end.
pub const MAX_OPS: usize = 15;
/// The highest `$stackN` and `$argN` where the thread stack is 16 KiB (the
/// kernel's `PARAM_MAX_STACK`, `THREAD_SIZE / sizeof(long)`; see
/// [`parse_line_limited`]).
pub const PARAM_MAX_STACK: u32 = 2048;
/// Largest `MAXACTIVE` (`KRETPROBE_MAXACTIVE_MAX`).
pub const MAX_MAXACTIVE: u32 = 4096;
/// Longest fetch argument expression (`MAX_ARGSTR_LEN` - 1).
pub const MAX_ARG_LEN: usize = 63;

/// Whether the kernel's `isspace()` takes `c` for a space (what
/// `argv_split()` splits a line at): ASCII whitespace and vertical tab.
pub fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t'..=b'\r')
}

/// What went wrong, with the kernel's `error_log` message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrKind {
    /// An unknown command letter.
    BadCommand,
    /// `MAXACTIVE` on a `p` probe.
    BadMaxactType,
    /// `MAXACTIVE` not a number.
    BadMaxact,
    /// `MAXACTIVE` too large.
    MaxactTooBig,
    /// Nothing to probe, or an unparsable address or symbol.
    BadProbeAddr,
    /// A return probe not at offset 0.
    BadRetprobe,
    /// Something after the address that is not `%return`.
    BadAddrSuffix,
    /// `GRP/` with an empty group.
    NoGroupName,
    /// Group name too long.
    GroupTooLong,
    /// Group name not a C identifier.
    BadGroupName,
    /// No event name where one is needed.
    NoEventName,
    /// Event name too long.
    EventTooLong,
    /// Event name not a C identifier.
    BadEventName,
    /// `$retval` on an entry probe.
    RetvalOnProbe,
    /// `$stackN` with a bad N.
    BadStackNum,
    /// `$argN` with a bad N.
    BadArgNum,
    /// An unknown `$` variable.
    BadVar,
    /// An unknown register.
    BadRegName,
    /// `@ADDR` not an address.
    BadMemAddr,
    /// `\IMM` not a number.
    BadImm,
    /// Dereferences nested too deeply.
    TooManyOps,
    /// `+OFFS` without `(`.
    DerefNeedBrace,
    /// `+OFFS(` with a bad offset.
    BadDerefOffs,
    /// `(` without `)`.
    DerefOpenBrace,
    /// `+0($comm)`.
    CommCantDeref,
    /// Anything else a fetch argument cannot be.
    BadFetchArg,
    /// An unknown `:TYPE`.
    BadType,
    /// `:string` on something that is not memory.
    BadString,
    /// A malformed bitfield type.
    BadBitfield,
    /// Argument name too long.
    ArgNameTooLong,
    /// `=FETCHARG` without a name.
    NoArgName,
    /// Argument name not a C identifier.
    BadArgName,
    /// Two arguments with one name.
    UsedArgName,
    /// Argument expression too long.
    ArgTooLong,
    /// `NAME=` without an expression.
    NoArgBody,
    /// More than [`MAX_ARGS`] arguments.
    TooManyArgs,
    /// `$comm` with a type other than `string`.
    NeedStringType,
    /// `\"TEXT` without the closing quote.
    ImmStrNoClose,
    /// `@+OFFS`: a file offset (uprobes only).
    FileOnKprobe,
    /// A bare name (a BTF argument name: the engine has no BTF).
    NoSupBtfArg,
    /// `symstr` of something that is no address read from a register,
    /// the stack, an argument or kernel memory.
    BadSymString,
    /// `$arg*` twice.
    DoubleArgs,
    /// `$argN` on a probe that is not at a function entry or exit.
    NoFentryArgs,
    /// `TYPE[N` without the `]`.
    ArrayNoClose,
    /// Something after the `]`.
    BadArraySuffix,
    /// `[N]` with N not a number above 0.
    BadArrayNum,
    /// `[N]` above [`MAX_ARRAY_LEN`].
    ArrayTooBig,
    /// The group/event name is taken.
    EventExist,
    /// The engine refused the probe.
    FailRegProbe,
    /// The address is not on an instruction boundary.
    BadInsnBndry,
    /// A `p`/`r` line without a location (the kernel's `-ECANCELED`).
    NoLocation,
    /// An appended site of another kind (`p` to `r` or back).
    DiffProbeType,
    /// An appended site's arguments differ in number, name or type.
    DiffArgType,
    /// An appended site the event has already.
    SameProbe,
    /// The probed symbol names several (static) functions.
    NonUniqSymbol,
    /// A BTF name the function has no parameter of.
    NoBtfArg,
    /// The function has no BTF (or no parameters in it).
    NoBtfEntry,
    /// `->FIELD` of a struct without that member.
    NoBtfField,
    /// A BTF type id that resolves to nothing, or a member looked for in
    /// what is no struct.
    BadBtfTid,
    /// `->` on what is no pointer.
    NoPtrStrct,
    /// A `-` that does not start `->`.
    BadHyphen,
    /// `ARG.FIELD`: a field of an argument that is no struct pointer.
    NoSupDatArg,
    /// A typed `$retval` of a function returning `void`.
    NoRetval,
    /// A string type on a BTF value that is no `char` array or pointer.
    BadType4Str,
    /// `$arg*`/`$argN` expanded past the kernel's buffer for them.
    Args2Long,
}

impl ErrKind {
    /// The kernel's `error_log` message for this error.
    pub fn message(self) -> &'static str {
        use ErrKind::*;
        match self {
            BadCommand => "Unknown command",
            BadMaxactType => "Maxactive is only for function exit",
            BadMaxact => "Invalid maxactive number",
            MaxactTooBig => "Maxactive is too big",
            BadProbeAddr => "Invalid probed address or symbol",
            BadRetprobe => "Retprobe address must be an function entry",
            BadAddrSuffix => "Invalid probed address suffix",
            NoGroupName => "Group name is not specified",
            GroupTooLong => "Group name is too long",
            BadGroupName => "Group name must follow the same rules as C identifiers",
            NoEventName => "Event name is not specified",
            EventTooLong => "Event name is too long",
            BadEventName => "Event name must follow the same rules as C identifiers",
            RetvalOnProbe => "$retval is not available on probe",
            BadStackNum => "Invalid stack number",
            BadArgNum => "Invalid argument number",
            BadVar => "Invalid $-valiable specified",
            BadRegName => "Invalid register name",
            BadMemAddr => "Invalid memory address",
            BadImm => "Invalid immediate value",
            TooManyOps => "Dereference is too much nested",
            DerefNeedBrace => "Dereference needs a brace",
            BadDerefOffs => "Invalid dereference offset",
            DerefOpenBrace => "Dereference brace is not closed",
            CommCantDeref => "$comm can not be dereferenced",
            BadFetchArg => "Invalid fetch argument",
            BadType => "Unknown type is specified",
            BadString => "String accepts only memory argument",
            BadBitfield => "Invalid bitfield",
            ArgNameTooLong => "Argument name is too long",
            NoArgName => "Argument name is not specified",
            BadArgName => "Argument name must follow the same rules as C identifiers",
            UsedArgName => "This argument name is already used",
            ArgTooLong => "Argument expression is too long",
            NoArgBody => "No argument expression",
            TooManyArgs => "Too many arguments are specified",
            NeedStringType => "$comm and immediate-string only accepts string type",
            ImmStrNoClose => "String is not closed with '\"'",
            FileOnKprobe => "File offset is not available with kprobe",
            NoSupBtfArg => "BTF is not available or not supported",
            BadSymString => "Symbol String doesn't accept data/userdata",
            DoubleArgs => "$arg* can be used only once in the parameters",
            NoFentryArgs => "$arg* can be used only on function entry or exit",
            ArrayNoClose => "Array is not closed",
            BadArraySuffix => "Array has wrong suffix",
            BadArrayNum => "Invalid array size",
            ArrayTooBig => "Array number is too big",
            EventExist => "Given group/event name is already used by another event",
            FailRegProbe => "Failed to register probe event",
            BadInsnBndry => "Probe point is not an instruction boundary",
            NoLocation => "Failed to parse the command",
            DiffProbeType => "Probe type is different from existing probe",
            DiffArgType => "Argument type or name is different from existing probe",
            SameProbe => "There is already the exact same probe event",
            NonUniqSymbol => "The symbol is not unique",
            NoBtfArg => "This variable is not found at this probe point",
            NoBtfEntry => "No BTF entry for this probe point",
            NoBtfField => "This field is not found.",
            BadBtfTid => "Failed to get BTF type info.",
            NoPtrStrct => "This is not a pointer to union/structure.",
            BadHyphen => "Failed to parse single hyphen. Forgot '>'?",
            NoSupDatArg => "Non pointer structure/union argument is not supported.",
            NoRetval => "This function returns 'void' type",
            BadType4Str => "This type does not fit for string.",
            Args2Long => "$arg* failed because the argument list is too long",
        }
    }

    /// Whether the kernel writes an `error_log` entry for this error: not
    /// for a line that is no probe definition at all (an unknown command,
    /// no location: its `-ECANCELED`) nor for too many arguments.
    pub fn logged(self) -> bool {
        !matches!(
            self,
            ErrKind::BadCommand | ErrKind::NoLocation | ErrKind::TooManyArgs
        )
    }

    /// The errno a write of such a line fails with (positive), where the
    /// kernel fails with one errno for this error wherever it arises
    /// (others are given with the error: [`ParseError::errno`]).
    pub fn errno(self) -> i32 {
        use ErrKind::*;
        match self {
            TooManyArgs | Args2Long | ArgTooLong => 7,     // E2BIG
            DiffProbeType | DiffArgType | SameProbe => 17, // EEXIST
            NoBtfArg | NoBtfEntry | NoBtfField | NoRetval => 2, // ENOENT
            NoSupDatArg => 95,                             // EOPNOTSUPP
            _ => 22,                                       // EINVAL
        }
    }
}

/// A parse error: what, and where in the line (byte offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// What went wrong.
    pub kind: ErrKind,
    /// Byte offset of the offending token in the line.
    pub pos: usize,
    /// The errno the write fails with (positive).
    pub errno: i32,
}

impl ParseError {
    /// An error of `kind` at `pos`, with that kind's errno.
    pub fn new(kind: ErrKind, pos: usize) -> Self {
        ParseError {
            kind,
            pos,
            errno: kind.errno(),
        }
    }
}

type Res<T> = Result<T, ParseError>;

fn err<T>(kind: ErrKind, pos: usize) -> Res<T> {
    Err(ParseError::new(kind, pos))
}

/// [`err`] with the errno the kernel fails with there.
fn err_no<T>(kind: ErrKind, pos: usize, errno: i32) -> Res<T> {
    Err(ParseError { kind, pos, errno })
}

/// `EOPNOTSUPP`, `ENOENT`, `E2BIG`.
const EOPNOTSUPP: i32 = 95;
const ENOENT: i32 = 2;
const E2BIG: i32 = 7;

/// The register names of one architecture: `(name, index of the 64-bit word
/// in struct pt_regs)`.
pub type RegTable = [(&'static str, u16)];

/// Where a probe goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location<'a> {
    /// `[MOD:]SYM[+offs]`.
    Symbol {
        /// `MOD` of `MOD:SYM`.
        module: Option<&'a str>,
        /// `SYM`.
        name: &'a str,
        /// `+offs`.
        offset: u64,
    },
    /// `MEMADDR`.
    Address(u64),
}

/// Field names every record of a probe event has (the common fields and
/// the probe's own head): an argument may not take them
/// (`reserved_field_names` in kernel/trace/trace_probe.c).
pub const RESERVED_FIELD_NAMES: [&str; 8] = [
    "common_type",
    "common_flags",
    "common_preempt_count",
    "common_pid",
    "common_tgid",
    "__probe_ip",
    "__probe_ret_ip",
    "__probe_func",
];

/// A parsed `p`/`r` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeDef<'a> {
    /// A return probe (`r`, or `p ... %return`).
    pub is_return: bool,
    /// `r<MAXACTIVE>`.
    pub maxactive: Option<u32>,
    /// `GRP` (None: [`DEFAULT_GROUP`]).
    pub group: Option<&'a str>,
    /// `EVENT` (None: generated, see [`ProbeDef::write_default_name`]).
    pub event: Option<&'a str>,
    /// What to probe.
    pub location: Location<'a>,
    /// Offset of the location token in the line (for error positions).
    pub location_pos: usize,
    /// The fetch arguments' text (validated).
    args_text: &'a str,
    /// Offset of `args_text` in the line.
    args_pos: usize,
    /// The register table the line was parsed with.
    regs: &'static RegTable,
    /// The highest `$stackN`/`$argN`.
    max_stack: u32,
    /// At a function entry, as the location check said.
    entry: bool,
    /// The kernel's BTF, when the line is parsed with it.
    btf: Option<BtfCtx<'a>>,
}

/// The BTF a line is parsed with (the kernel's `vmlinux` BTF): with it, the
/// grammar is that of a kernel with `CONFIG_PROBE_EVENTS_BTF_ARGS`
/// (argument names, `->` fields, typed `$retval`, `$arg*`).
#[derive(Clone, Copy, Debug)]
pub struct BtfCtx<'a> {
    btf: &'a Btf<'a>,
    /// The probed function's prototype, where the probe is at its entry or
    /// return and BTF has it (the kernel's `query_btf_context()`).
    proto: Option<btf::Type<'a>>,
}

impl PartialEq for BtfCtx<'_> {
    fn eq(&self, o: &Self) -> bool {
        core::ptr::eq(self.btf, o.btf) && self.proto.map(|p| p.id) == o.proto.map(|p| p.id)
    }
}

impl Eq for BtfCtx<'_> {}

impl<'a> BtfCtx<'a> {
    /// The prototype's parameters, when it has any (the kernel's
    /// `nr_params`).
    fn params(&self) -> Option<btf::Type<'a>> {
        self.proto.filter(|p| p.vlen() > 0)
    }

    /// Parameter `i`'s name (None: none readable, the kernel's NULL).
    fn param_name(&self, i: usize) -> Option<&'a str> {
        let p = self.params()?;
        self.btf.name(self.btf.param(&p, i)?.0)
    }
}

/// One parsed line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command<'a> {
    /// Blank or comment only.
    Empty,
    /// Define a probe event.
    Probe(ProbeDef<'a>),
    /// `-:[GRP/]EVENT [LOCATION [ARGS]]`: the sites of the events so
    /// named whose listing starts with the words given, as the kernel's
    /// `dyn_event_release()` matches them. The names are not checked (a
    /// name that cannot exist matches nothing).
    Remove {
        /// `GRP` (None: any group).
        group: Option<&'a str>,
        /// `EVENT` ("": every event of `group`).
        event: &'a str,
        /// The words after the name, as written.
        words: &'a str,
    },
}

/// One operation of a fetch program, run in order; the value flows through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op<'a> {
    /// `%REG`: the word at this index of `struct pt_regs`.
    Reg(u16),
    /// `$stackN`: the Nth word above the stack pointer.
    Stack(u32),
    /// `$stack`: the stack pointer.
    StackAddr,
    /// `$argN` (0-based here; `$arg1` is `Arg(0)`); on a return probe, its
    /// value at the function's entry.
    Arg(u32),
    /// `$retval`.
    Retval,
    /// `$comm`: the current task's name (a string).
    Comm,
    /// `\"TEXT"`: an immediate string.
    ImmStr(&'a str),
    /// `\IMM`.
    Imm(u64),
    /// `@ADDR`: the address (the parser adds the read, [`Op::Deref`] 0).
    Addr(u64),
    /// `@SYM[+|-offs]`: the symbol's address plus `offset`, resolved by the
    /// caller (the parser adds the read, [`Op::Deref`] 0).
    Symbol {
        /// The symbol.
        name: &'a str,
        /// `+|-offs`.
        offset: i64,
    },
    /// `@SYM<junk>`: an offset that does not parse; the kernel finds out
    /// when it registers the probe (-EINVAL there).
    BadSymbol(&'a str),
    /// `+|-[u]OFFS(...)`: read the word at value + `offset` (user memory if
    /// `user`); for string types the last one reads the string instead.
    Deref {
        /// `OFFS`.
        offset: i64,
        /// `u`: user-space memory.
        user: bool,
    },
}

/// The basic types of `:TYPE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    /// `u8`..`u64` (size in bytes).
    Unsigned(u8),
    /// `s8`..`s64`.
    Signed(u8),
    /// `x8`..`x64`.
    Hex(u8),
    /// `char`.
    Char,
    /// `string`: a kernel string at the address.
    String,
    /// `ustring`: a user string at the address.
    UString,
    /// `symbol`: a word shown as `sym+off`.
    Symbol,
    /// `symstr`: `sym+off/size` stored as a string.
    SymStr,
    /// `b<width>@<offset>/<container-size>` (container size in bytes).
    Bitfield {
        /// Bits.
        width: u8,
        /// Lowest bit.
        offset: u8,
        /// 1, 2, 4 or 8.
        container: u8,
        /// Declared signed (a BTF bitfield of a signed type: the kernel
        /// shows the bits it extracts, unsigned, as that type).
        signed: bool,
    },
}

impl Type {
    /// Whether values are strings (stored as data, not a word).
    pub fn is_string(self) -> bool {
        matches!(self, Type::String | Type::UString | Type::SymStr)
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Type::Unsigned(n) => write!(f, "u{}", u32::from(n) * 8),
            Type::Signed(n) => write!(f, "s{}", u32::from(n) * 8),
            Type::Hex(n) => write!(f, "x{}", u32::from(n) * 8),
            Type::Char => f.write_str("char"),
            Type::String => f.write_str("string"),
            Type::UString => f.write_str("ustring"),
            Type::Symbol => f.write_str("symbol"),
            Type::SymStr => f.write_str("symstr"),
            Type::Bitfield {
                width,
                offset,
                container,
                ..
            } => write!(f, "b{}@{}/{}", width, offset, u32::from(container) * 8),
        }
    }
}

/// One fetch argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchArg<'a> {
    /// `NAME=` (None: the kernel's default `arg<N>`, 1-based position).
    pub name: Option<&'a str>,
    /// The expression as written, type suffix included (what the kernel
    /// shows back in `kprobe_events`).
    pub body: &'a str,
    /// The program, [`FetchArg::nops`] operations.
    pub ops: [Op<'a>; MAX_OPS],
    /// Operations used in `ops`.
    pub nops: u8,
    /// The type (default `x64`, or `string` for `$comm`).
    pub ty: Type,
    /// `TYPE[N]`: an array of N values read one after the other from the
    /// memory the program's last dereference reads, or for strings N
    /// pointers there, each to a string (the kernel's reading); 0: one
    /// value.
    pub count: u8,
}

impl<'a> FetchArg<'a> {
    /// The program.
    pub fn program(&self) -> &[Op<'a>] {
        self.ops.get(..usize::from(self.nops)).unwrap_or(&[])
    }
}

/// `a + b` for byte positions and lengths inside one line: saturating, so
/// that no input can make position arithmetic overflow (a saturated
/// position only ever lands past the end, where [`sub`] and [`from`] give
/// `""`).
fn add(a: usize, b: usize) -> usize {
    a.saturating_add(b)
}

/// `a + b + 1`: the position just past a separator found at `b`.
fn past(a: usize, b: usize) -> usize {
    a.saturating_add(b).saturating_add(1)
}

/// `&s[a..b]`, or `""` when out of range: no panic path (objtool does not
/// know `core::str::slice_error_fail` never returns).
fn sub(s: &str, a: usize, b: usize) -> &str {
    s.get(a..b).unwrap_or("")
}

/// `&s[a..]`, or `""` when out of range (see [`sub`]).
fn from(s: &str, a: usize) -> &str {
    s.get(a..).unwrap_or("")
}

/// A kernel symbol name: identifier characters plus `.` and `$`.
fn is_symbol(n: &str) -> bool {
    !n.is_empty()
        && n.bytes()
            .all(|c| c == b'_' || c == b'.' || c == b'$' || c.is_ascii_alphanumeric())
}

fn is_ident(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c == b'_' || c.is_ascii_alphabetic())
        && b.all(|c| c == b'_' || c.is_ascii_alphanumeric())
}

/// The digits of an unsigned number and their base, as `kstrtoul(s, 0)`
/// reads them: `0x` hex, leading-`0` octal, else decimal.
fn radix_of(s: &str) -> (&str, u32) {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (from(s, 1), 8)
    } else {
        (s, 10)
    }
}

/// `kstrtoul(s, 0)`: decimal, `0x` hex or leading-`0` octal.
fn parse_u64(s: &str) -> Option<u64> {
    let (digits, radix) = radix_of(s);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// The errno of a number that did not parse: the kernel's `-ERANGE` where
/// `kstrtol()`/`kstrtoul()` read a number too big (every digit valid for
/// its base), else `-EINVAL`.
fn range_errno(s: &str) -> i32 {
    // kstrtol(): a `-`, or else kstrtoull()'s `+`.
    digits_errno(
        s.strip_prefix('-')
            .or_else(|| s.strip_prefix('+'))
            .unwrap_or(s),
    )
}

/// [`range_errno`] of a number without its sign.
fn digits_errno(d: &str) -> i32 {
    let (digits, radix) = radix_of(d);
    if !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix)) {
        34 // ERANGE
    } else {
        22
    }
}

/// `kstrtol(s, 0)` with an explicit sign allowed.
fn parse_i64(s: &str) -> Option<i64> {
    match s.strip_prefix('-') {
        // `kstrtol` accepts down to i64::MIN, whose magnitude is one past
        // i64::MAX.
        Some(r) => parse_u64(r).and_then(|v| 0i64.checked_sub_unsigned(v)),
        None => parse_u64(s.strip_prefix('+').unwrap_or(s)).and_then(|v| i64::try_from(v).ok()),
    }
}

/// Splits at ASCII whitespace, with byte offsets.
fn tokens(s: &str, base: usize) -> impl Iterator<Item = (usize, &str)> {
    let mut at = 0;
    core::iter::from_fn(move || {
        let rest = from(s, at);
        let skipped = rest.len().saturating_sub(
            rest.trim_start_matches(|c: char| c.is_ascii_whitespace())
                .len(),
        );
        let start = add(at, skipped);
        if start >= s.len() {
            return None;
        }
        let len = from(s, start)
            .find(|c: char| c.is_ascii_whitespace())
            .unwrap_or(s.len().saturating_sub(start));
        at = add(start, len);
        Some((add(base, start), sub(s, start, at)))
    })
}

/// Checks a group, event or argument name: not empty, at most `max` bytes,
/// a C identifier; `errs` are the error kinds for those three cases.
fn check_name(s: &str, max: usize, errs: [ErrKind; 3], pos: usize) -> Res<()> {
    let [empty, too_long, bad] = errs;
    if s.is_empty() {
        return err(empty, pos);
    }
    if s.len() > max {
        return err(too_long, pos);
    }
    if !is_ident(s) {
        return err(bad, pos);
    }
    Ok(())
}

/// Splits `NAME<sep>REST` (at `pos`) at the first `sep`, checking NAME
/// with [`check_name`]; returns the name, the rest and where the rest
/// starts. Without `sep`: no name, all of `s`.
fn split_name(
    s: &str,
    sep: char,
    max: usize,
    errs: [ErrKind; 3],
    pos: usize,
) -> Res<(Option<&str>, &str, usize)> {
    match s.find(sep) {
        Some(i) => {
            let name = sub(s, 0, i);
            check_name(name, max, errs, pos)?;
            Ok((Some(name), from(s, past(0, i)), past(pos, i)))
        }
        None => Ok((None, s, pos)),
    }
}

/// `[GRP/]EVENT` after the `:`; either part may be missing.
fn parse_names(s: &str, pos: usize) -> Res<(Option<&str>, Option<&str>)> {
    let errs = [
        ErrKind::NoGroupName,
        ErrKind::GroupTooLong,
        ErrKind::BadGroupName,
    ];
    // The group ends at a '/', or else at a '.' (the kernel's
    // traceprobe_parse_event_name()).
    let sep = if s.contains('/') { '/' } else { '.' };
    let (group, event, epos) = split_name(s, sep, MAX_EVENT_NAME_LEN, errs, pos)?;
    if event.is_empty() {
        // `p:GRP/` generates the name; `p:` alone is an error (as in the
        // kernel's traceprobe_parse_event_name()).
        if group.is_none() {
            return err(ErrKind::NoEventName, epos);
        }
        return Ok((group, None));
    }
    let errs = [
        ErrKind::NoEventName,
        ErrKind::EventTooLong,
        ErrKind::BadEventName,
    ];
    check_name(event, MAX_EVENT_NAME_LEN, errs, epos)?;
    Ok((group, Some(event)))
}

/// The unnamed `$arg...` arguments of a line, as the kernel's
/// `argv_has_var_arg()` finds them.
struct VarArgs {
    /// Where `$arg*` is.
    star: Option<usize>,
    /// Where the last `$arg` word is (the kernel's log index stays there:
    /// its caret if BTF is missing for `$arg*`).
    last: usize,
}

/// The kernel's `argv_has_var_arg()` over the argument words `args`:
/// `$arg` words only at a function entry or return, each a number or `*`,
/// `*` once. None: there are none.
fn var_args<'s>(
    args: impl Iterator<Item = (usize, &'s str)>,
    at_entry: bool,
    is_return: bool,
) -> Res<Option<VarArgs>> {
    let mut found = None;
    for (pos, tok) in args {
        let Some(rest) = tok.strip_prefix("$arg") else {
            continue;
        };
        if !at_entry && !is_return {
            return err(ErrKind::NoFentryArgs, pos);
        }
        let star = found.as_ref().and_then(|v: &VarArgs| v.star);
        if !rest.as_bytes().first().is_some_and(u8::is_ascii_digit) {
            if !rest.starts_with('*') {
                return err(ErrKind::BadVar, pos);
            }
            if star.is_some() {
                return err(ErrKind::DoubleArgs, pos);
            }
            found = Some(VarArgs {
                star: Some(pos),
                last: pos,
            });
            continue;
        }
        found = Some(VarArgs { star, last: pos });
    }
    Ok(found)
}

/// The kernel's buffer for the names `$arg*` and `$argN` expand to, each
/// with a NUL (`MAX_BTF_ARGS_LEN`).
pub const MAX_BTF_ARGS_LEN: usize = 128;

/// What [`expand_meta_args`] made of a line.
enum Meta<'o> {
    /// Nothing to expand.
    Keep,
    /// `$arg*` where the function has no BTF: the kernel logs that, keeps
    /// the line and goes on (the argument then fails as a variable).
    NoSup(usize),
    /// The line with the arguments expanded.
    Line(&'o str),
}

/// The kernel's `traceprobe_expand_meta_args()` on `line` (its words one
/// space apart), whose head `d` is: where the probed function has BTF
/// parameters, `$arg*` becomes every parameter's name and `$argN[:TYPE]`
/// the Nth's name with the type (so that `$arg2` is `buf=buf` on
/// `vfs_read`); errors at the word, as the kernel reports them.
fn expand_meta_args<'o>(d: &ProbeDef<'_>, line: &str, out: &'o mut [u8]) -> Res<Meta<'o>> {
    use fmt::Write as _;
    let args = || tokens(line, 0).skip(2);
    let ctx = d.arg_ctx();
    let Some(VarArgs { star, last }) = var_args(args(), ctx.at_entry, ctx.is_return)? else {
        return Ok(Meta::Keep);
    };
    let Some((b, p)) = d.btf.and_then(|b| Some((b, b.params()?))) else {
        return Ok(match star {
            Some(_) => Meta::NoSup(last),
            None => Meta::Keep,
        });
    };
    let nr = p.vlen();
    let mut o = Out { buf: out, len: 0 };
    let mut used = 0usize;
    // One expanded name: into the kernel's 128 bytes, then the line.
    let mut name = |o: &mut Out<'_>, first: bool, n: &str, ty: &str, pos: usize| -> Res<()> {
        let len = add(n.len(), ty.len());
        // A parameter without a name (C's `...`) expands to an empty
        // word for the kernel, an argument without an expression: here a
        // NUL, which parses so (no line has one: lines end at a NUL).
        let n = if n.is_empty() && ty.is_empty() {
            "\0"
        } else {
            n
        };
        if len >= MAX_BTF_ARGS_LEN.saturating_sub(used) {
            return err(ErrKind::Args2Long, pos);
        }
        used = add(used, add(len, 1));
        let w = |o: &mut Out<'_>| -> fmt::Result {
            if !first {
                o.write_str(" ")?;
            }
            o.write_str(n)?;
            o.write_str(ty)
        };
        w(o).map_err(|_| ParseError::new(ErrKind::Args2Long, pos))
    };
    let head = sub(line, 0, args().next().map_or(line.len(), |(p, _)| p));
    o.write_str(head.trim_end())
        .map_err(|_| ParseError::new(ErrKind::Args2Long, 0))?;
    for (pos, tok) in args() {
        if Some(pos) == star {
            for i in 0..nr {
                let Some(n) = b.param_name(i) else {
                    return err(ErrKind::NoBtfEntry, pos);
                };
                name(&mut o, false, n, "", pos)?;
            }
            continue;
        }
        let Some(rest) = tok.strip_prefix("$arg") else {
            o.write_str(" ")
                .and_then(|()| o.write_str(tok))
                .map_err(|_| ParseError::new(ErrKind::Args2Long, pos))?;
            continue;
        };
        // simple_strtoul(): the digits, wrapping; into the kernel's int.
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let n = sub(rest, 0, digits).bytes().fold(0u64, |v, c| {
            v.wrapping_mul(10)
                .wrapping_add(u64::from(c.wrapping_sub(b'0')))
        }) as u32 as i32;
        let ty = from(rest, digits);
        if !(ty.is_empty() || ty.starts_with(':')) {
            return err_no(ErrKind::BadVar, pos, ENOENT);
        }
        let idx = n.wrapping_sub(1);
        if usize::try_from(idx).is_ok_and(|i| i >= nr) {
            return err(ErrKind::NoBtfArg, pos);
        }
        // `$arg0` (and a number that wraps below it): the kernel reads
        // before the parameters there (a name offset no string has).
        let Some(n) = usize::try_from(idx).ok().and_then(|i| b.param_name(i)) else {
            return err(ErrKind::NoBtfEntry, pos);
        };
        name(&mut o, false, n, ty, pos)?;
    }
    let len = o.len;
    let text = o.buf.get(..len).unwrap_or(&[]);
    let text = core::str::from_utf8(text).map_err(|_| ParseError::new(ErrKind::Args2Long, 0))?;
    Ok(Meta::Line(text))
}

/// A `fmt::Write` into a byte buffer; an error when it is full.
struct Out<'b> {
    buf: &'b mut [u8],
    len: usize,
}

impl fmt::Write for Out<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len.checked_add(s.len()).ok_or(fmt::Error)?;
        self.buf
            .get_mut(self.len..end)
            .ok_or(fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The most bytes [`parse_full`] needs in its buffer for a line of `len`
/// bytes.
pub fn full_buf_len(len: usize) -> usize {
    add(
        add(len, MAX_BTF_ARGS_LEN),
        add(len, add(MAX_BTF_ARGS_LEN, MAX_DENTRY_ARGS_LEN)),
    )
}

/// A line taken as the kernel's `__trace_kprobe_create()` takes it.
pub struct Parsed<'a> {
    /// An `error_log` entry the kernel writes before the line's own
    /// error (`$arg*` where the function has no BTF: it logs that and
    /// goes on).
    pub note: Option<ParseError>,
    /// The command, or the error, its position in [`Parsed::log_line`].
    pub result: Res<Command<'a>>,
    /// The line the kernel's `error_log` entries show: as written, or
    /// with `%pd`/`%pD` expanded (not `$arg*`: the kernel expands those
    /// into a copy its log does not see).
    pub log_line: &'a str,
    /// What the command was parsed from.
    parsed: &'a str,
    /// `$arg*`/`$argN` were expanded.
    meta: bool,
}

/// Positions in what a [`Parsed`] command was parsed from, mapped to its
/// [`Parsed::log_line`].
#[derive(Clone, Copy, Debug)]
pub struct PosMap<'a> {
    log_line: &'a str,
    parsed: &'a str,
    meta: bool,
}

impl<'a> Parsed<'a> {
    /// Its positions' map.
    pub fn pos_map(&self) -> PosMap<'a> {
        PosMap {
            log_line: self.log_line,
            parsed: self.parsed,
            meta: self.meta,
        }
    }
}

impl PosMap<'_> {
    /// Where a position in what the command was parsed from is in
    /// the line the log shows: after `$arg*`/`$argN` expanded, the kernel
    /// puts its caret at the same offset into the word of the same index
    /// in the line as written, or past its end when there is no such
    /// word.
    pub fn log_pos(&self, pos: usize) -> usize {
        if !self.meta {
            return pos;
        }
        let past_end = add(self.log_line.len(), 1);
        if pos > self.parsed.len() {
            return past_end;
        }
        let Some((k, start)) = tokens(self.parsed, 0)
            .enumerate()
            .take_while(|(_, (p, _))| *p <= pos)
            .last()
            .map(|(k, (p, _))| (k, p))
        else {
            return pos;
        };
        if k < 2 {
            return pos;
        }
        match tokens(self.log_line, 0).nth(k) {
            Some((p, _)) => add(p, pos.saturating_sub(start)),
            None => past_end,
        }
    }
}

/// Parses `line` (its words one space apart, no comment) as the kernel
/// does, expansions included: the head (command, location, names), then
/// `$arg*`/`$argN` expanded from BTF ([`expand_meta_args`]), then
/// `%pd`/`%pD` ([`expand_dentry_args`], with `d_name` and `f_dentry`),
/// then the arguments. `btf`: the kernel's, or None for a kernel without
/// (then the grammar is [`parse_line_checked`]'s). `out`: at least
/// [`full_buf_len`] bytes.
pub fn parse_full<'a, F>(
    line: &'a str,
    regs: &'static RegTable,
    max_stack: u32,
    btf: Option<&'a Btf<'a>>,
    dentry: (usize, usize),
    check: &mut F,
    out: &'a mut [u8],
) -> Parsed<'a>
where
    F: FnMut(&Location<'_>, bool, usize) -> Res<bool>,
{
    let plain = |result| Parsed {
        note: None,
        result,
        log_line: line,
        parsed: line,
        meta: false,
    };
    let def = match parse_inner(line, regs, max_stack, btf, check, true) {
        Ok(Command::Probe(d)) => d,
        other => return plain(other),
    };
    let split = add(line.len(), MAX_BTF_ARGS_LEN).min(out.len());
    let (a, b) = out.split_at_mut(split);
    let (text, note, meta) = match expand_meta_args(&def, line, a) {
        Err(e) => return plain(Err(e)),
        Ok(Meta::Keep) => (line, None, false),
        Ok(Meta::NoSup(pos)) => (
            line,
            Some(ParseError {
                kind: ErrKind::NoSupBtfArg,
                pos,
                errno: EOPNOTSUPP,
            }),
            false,
        ),
        Ok(Meta::Line(t)) => (t, None, true),
    };
    // The count before the `%pd` expansion, as the kernel's (-E2BIG, no
    // error_log entry; an expansion too long is -ENOMEM).
    if text.split_ascii_whitespace().skip(2).count() > MAX_ARGS {
        return Parsed {
            note,
            ..plain(err(ErrKind::TooManyArgs, def.arg_pos(0).unwrap_or(0)))
        };
    }
    let text = match expand_dentry_args(text, dentry.0, dentry.1, b) {
        None => text,
        Some(Ok(t)) => t,
        Some(Err(())) => {
            return Parsed {
                note,
                ..plain(Err(ParseError {
                    kind: ErrKind::FailRegProbe,
                    pos: 0,
                    errno: 12, // ENOMEM, no entry
                }))
            };
        }
    };
    // Nothing expanded: the head parsed is the line's (its symbol and
    // BTF lookups are not made again).
    let result = if core::ptr::eq(text, line) {
        def.validate_args().map(|()| Command::Probe(def))
    } else {
        parse_inner(text, regs, max_stack, btf, check, false)
    };
    let mut p = Parsed {
        note,
        result,
        log_line: if meta { line } else { text },
        parsed: text,
        meta,
    };
    if let Err(e) = p.result {
        p.result = Err(ParseError {
            pos: p.pos_map().log_pos(e.pos),
            ..e
        });
    }
    p
}

/// The most bytes the `%pd`/`%pD` arguments of one line may expand to,
/// each with a NUL (the kernel's `MAX_DENTRY_ARGS_LEN`).
pub const MAX_DENTRY_ARGS_LEN: usize = 256;

/// The kernel's `traceprobe_expand_dentry_args()`, run on a probe line
/// before it is parsed: each argument (the third word on)
/// `[NAME=]FETCHARG:%pd` becomes `[NAME=]+0x0(+0xD(FETCHARG)):string` and
/// `[NAME=]FETCHARG:%pD` becomes `[NAME=]+0x0(+0xD(+0xF(FETCHARG))):string`,
/// where `D` is `offsetof(struct dentry, d_name.name)` and `F`
/// `offsetof(struct file, f_path.dentry)`: the name of a dentry, or of a
/// file's. The line is written to `out` with its words joined by one space
/// (as the kernel's error log shows it). `None`: nothing to expand (the
/// line stands as it is); `Some(Err(()))`: the expansions exceed
/// [`MAX_DENTRY_ARGS_LEN`] or `out` (the kernel's `-ENOMEM`).
pub fn expand_dentry_args<'o>(
    line: &str,
    d_name: usize,
    f_dentry: usize,
    out: &'o mut [u8],
) -> Option<Result<&'o str, ()>> {
    use fmt::Write as _;
    let probe = matches!(line.trim_start().as_bytes().first(), Some(b'p' | b'r'));
    let is_dentry = |w: &str| w.ends_with(":%pd") || w.ends_with(":%pD");
    if !probe || !line.split_ascii_whitespace().skip(2).any(is_dentry) {
        return None;
    }
    let mut o = Out { buf: out, len: 0 };
    let mut used = 0usize;
    let mut write = || -> Result<(), fmt::Error> {
        for (i, w) in line.split_ascii_whitespace().enumerate() {
            if i > 0 {
                o.write_str(" ")?;
            }
            if i < 2 || !is_dentry(w) {
                o.write_str(w)?;
                continue;
            }
            let start = o.len;
            let body = w.strip_suffix(":%pd").or_else(|| w.strip_suffix(":%pD"));
            let (body, file) = (body.unwrap_or(w), w.ends_with('D'));
            let (name, arg) = match body.split_once('=') {
                Some((n, a)) => (Some(n), a),
                None => (None, body),
            };
            if let Some(n) = name {
                write!(o, "{}=", n)?;
            }
            if file {
                write!(o, "+0x0(+{:#x}(+{:#x}({}))):string", d_name, f_dentry, arg)?;
            } else {
                write!(o, "+0x0(+{:#x}({})):string", d_name, arg)?;
            }
            used = used.saturating_add(o.len.saturating_sub(start).saturating_add(1));
            if used > MAX_DENTRY_ARGS_LEN {
                return Err(fmt::Error);
            }
        }
        Ok(())
    };
    if write().is_err() {
        return Some(Err(()));
    }
    let text = o.buf.get(..o.len).unwrap_or(&[]);
    Some(core::str::from_utf8(text).map_err(|_| ()))
}

/// Parses one line of `kprobe_events` (without the newline). `regs` is the
/// architecture's register table (`EVENT_REGS` of each backend under
/// `arch/`: `arch/*/event_regs.rs`).
pub fn parse_line<'a>(line: &'a str, regs: &'static RegTable) -> Res<Command<'a>> {
    parse_line_limited(line, regs, PARAM_MAX_STACK)
}

/// [`parse_line`] where `$stackN` and `$argN` go up to `max_stack` (the
/// kernel's `PARAM_MAX_STACK` of the running kernel: its thread stack size
/// in words).
pub fn parse_line_limited<'a>(
    line: &'a str,
    regs: &'static RegTable,
    max_stack: u32,
) -> Res<Command<'a>> {
    parse_line_checked(line, regs, max_stack, &mut retprobe_at_entry)
}

/// The return-probe rule without a kernel to ask: a return probe on a
/// symbol is at its entry (offset 0); [`parse_line_checked`]'s callers
/// apply it themselves (the kernel refuses only an offset that lands inside
/// a function, and leaves one past every symbol to registration).
/// `Ok(true)`: the location is a function entry (`$argN` work there).
pub fn retprobe_at_entry(loc: &Location<'_>, is_return: bool, pos: usize) -> Res<bool> {
    let entry = matches!(loc, Location::Symbol { offset: 0, .. });
    if is_return && matches!(loc, Location::Symbol { .. }) && !entry {
        return err(ErrKind::BadRetprobe, pos);
    }
    Ok(entry)
}

/// [`parse_line_limited`], with the running kernel's location checks:
/// `check` is what the kernel checks of a probe's location against the
/// running kernel while it parses a line (the symbol known and unique, a
/// return probe at a function entry, see [`retprobe_at_entry`]), called
/// with the location, whether it is a return probe and where the location
/// starts in the line, right where the kernel checks, so that a line with
/// several errors reports the one the kernel reports; it says whether the
/// location is a function entry (the kernel's `TPARG_FL_FENTRY`: not for a
/// symbol it cannot resolve yet, such as one of a module not loaded). The order is the
/// kernel's `__trace_kprobe_create()`: the command and its instance count,
/// the location (its suffix, offset, `check`), the group and event names,
/// then each argument (name, type, expression). (A generic, not a `dyn`:
/// on kCFI kernels the indirect call to a closure taking a `Location`
/// failed its type check, an oops.)
pub fn parse_line_checked<'a, F>(
    line: &'a str,
    regs: &'static RegTable,
    max_stack: u32,
    check: &mut F,
) -> Res<Command<'a>>
where
    F: FnMut(&Location<'_>, bool, usize) -> Res<bool>,
{
    parse_line_btf(line, regs, max_stack, None, check)
}

/// [`parse_line_checked`] on a kernel with BTF (`btf`: its `vmlinux`
/// BTF; None: a kernel without, the grammar of
/// [`parse_line_checked`]). `$arg*` and `$argN` must have been expanded
/// first ([`parse_full`] does both).
pub fn parse_line_btf<'a, F>(
    line: &'a str,
    regs: &'static RegTable,
    max_stack: u32,
    btf: Option<&'a Btf<'a>>,
    check: &mut F,
) -> Res<Command<'a>>
where
    F: FnMut(&Location<'_>, bool, usize) -> Res<bool>,
{
    parse_inner(line, regs, max_stack, btf, check, false)
}

/// The parser; `head_only`: a probe's arguments are not looked at (what
/// the kernel has checked when it expands `$arg*` and `$argN`).
fn parse_inner<'a, F>(
    line: &'a str,
    regs: &'static RegTable,
    max_stack: u32,
    btf: Option<&'a Btf<'a>>,
    check: &mut F,
    head_only: bool,
) -> Res<Command<'a>>
where
    F: FnMut(&Location<'_>, bool, usize) -> Res<bool>,
{
    let line = match line.find('#') {
        Some(i) => sub(line, 0, i),
        None => line,
    };
    let mut toks = tokens(line, 0);
    let Some((cpos, cmd)) = toks.next() else {
        return Ok(Command::Empty);
    };
    let (head, names) = match cmd.find(':') {
        Some(i) => (sub(cmd, 0, i), Some((from(cmd, past(0, i)), past(cpos, i)))),
        None => (cmd, None),
    };
    let mut chars = head.chars();
    let kind = chars.next().unwrap_or(' ');
    let rest = chars.as_str();
    match kind {
        '-' => {
            // As the kernel's dyn_event_release(): `-:`, then the names
            // split at the first '/', unchecked; `-:` alone is invalid.
            if !rest.is_empty() {
                return err(ErrKind::BadCommand, cpos);
            }
            let Some((n, npos)) = names else {
                return err(ErrKind::NoEventName, past(cpos, 0));
            };
            let (group, event) = match n.find('/') {
                Some(i) => (Some(sub(n, 0, i)), from(n, past(0, i))),
                None => (None, n),
            };
            if group.is_none() && event.is_empty() {
                return err(ErrKind::NoEventName, npos);
            }
            let words = match toks.next() {
                Some((p, _)) => from(line, p).trim_end(),
                None => "",
            };
            Ok(Command::Remove {
                group,
                event,
                words,
            })
        }
        'p' | 'r' => {
            let mut is_return = kind == 'r';
            // An instance count only when a digit follows (the kernel
            // ignores anything else before the ':').
            let maxactive = if rest.as_bytes().first().is_some_and(u8::is_ascii_digit) {
                if kind == 'p' {
                    return err(ErrKind::BadMaxactType, past(cpos, 0));
                }
                // 0 is refused as the kernel does (it would mean "the
                // default" only when no number is given).
                let Some(m) = parse_u64(rest)
                    .and_then(|m| u32::try_from(m).ok())
                    .filter(|&m| m != 0)
                else {
                    return err(ErrKind::BadMaxact, past(cpos, 0));
                };
                if m > MAX_MAXACTIVE {
                    return err(ErrKind::MaxactTooBig, past(cpos, 0));
                }
                Some(m)
            } else {
                None
            };
            let Some((lpos, loc)) = toks.next() else {
                return err(ErrKind::NoLocation, cpos);
            };
            let location = match parse_u64(loc) {
                Some(a) => Location::Address(a),
                None => {
                    // (A uprobe's PATH:OFFSET: not a kprobe line.)
                    if loc.contains('/') && loc.contains(':') {
                        return err(ErrKind::NoLocation, lpos);
                    }
                    let loc = match loc.find('%') {
                        Some(i) => {
                            if from(loc, past(0, i)) != "return" {
                                return err(ErrKind::BadAddrSuffix, add(lpos, i));
                            }
                            is_return = true;
                            sub(loc, 0, i)
                        }
                        None => loc,
                    };
                    parse_location(loc, lpos)?
                }
            };
            let entry = check(&location, is_return, lpos)?;
            let (group, event) = match names {
                Some((n, npos)) => parse_names(n, npos)?,
                None => (None, None),
            };
            let args_start = toks.next().map_or(line.len(), |(p, _)| p);
            // The function's BTF where `$argN`, names and `$retval` mean
            // its parameters and its return value (the kernel's
            // `ctx.funcname` is the symbol; `MOD:SYM` finds none).
            let btf = btf.map(|b| BtfCtx {
                btf: b,
                proto: match location {
                    Location::Symbol {
                        module: None, name, ..
                    } if entry || is_return => b.find_func_proto(name),
                    _ => None,
                },
            });
            let def = ProbeDef {
                is_return,
                maxactive,
                group,
                event,
                location,
                location_pos: lpos,
                args_text: from(line, args_start),
                args_pos: args_start,
                regs,
                max_stack,
                entry,
                btf,
            };
            if !head_only {
                def.validate_args()?;
            }
            Ok(Command::Probe(def))
        }
        _ => err(ErrKind::BadCommand, cpos),
    }
}

fn parse_location(s: &str, pos: usize) -> Res<Location<'_>> {
    if s.is_empty() {
        return err(ErrKind::BadProbeAddr, pos);
    }
    if s.as_bytes().first().is_some_and(u8::is_ascii_digit) {
        return match parse_u64(s) {
            Some(a) => Ok(Location::Address(a)),
            None => err(ErrKind::BadProbeAddr, pos),
        };
    }
    // The offset first, from the first '+' or '-' anywhere (the kernel's
    // traceprobe_split_symbol_offset()): a whole number in 0..=u32::MAX.
    let (sym, offset) = match s.find(['+', '-']) {
        Some(i) => match parse_i64(from(s, i)).and_then(|o| u32::try_from(o).ok()) {
            Some(o) => (sub(s, 0, i), u64::from(o)),
            None => return err(ErrKind::BadProbeAddr, pos),
        },
        None => (s, 0),
    };
    let (module, name) = match sym.find(':') {
        Some(i) => (Some(sub(sym, 0, i)), from(sym, past(0, i))),
        None => (None, sym),
    };
    // A module's symbol is not checked until the module is there (the
    // kernel's validate_module_probe_symbol() skips a module not loaded).
    if module.is_none() && !is_symbol(name) {
        return err(ErrKind::BadProbeAddr, pos);
    }
    Ok(Location::Symbol {
        module,
        name,
        offset,
    })
}

impl<'a> ProbeDef<'a> {
    /// Whether the probe is at a function entry (`$argN` works): a symbol
    /// at offset 0 that the location check could resolve.
    pub fn at_entry(&self) -> bool {
        self.entry
    }

    /// The group (default [`DEFAULT_GROUP`]).
    pub fn group_or_default(&self) -> &'a str {
        self.group.unwrap_or(DEFAULT_GROUP)
    }

    /// The fetch arguments, parsed again one by one (each was validated by
    /// [`parse_line`], so this yields no errors for a returned `ProbeDef`).
    pub fn args(&self) -> impl Iterator<Item = Res<FetchArg<'a>>> + '_ {
        let ctx = self.arg_ctx();
        tokens(self.args_text, self.args_pos)
            .enumerate()
            .map(move |(k, (p, t))| parse_arg(t, p, &self.ctx_for(&ctx, k)))
    }

    fn arg_ctx(&self) -> ArgCtx<'a> {
        ArgCtx {
            // The kernel's return flag is set only for a probe on a
            // symbol (`r ADDR` has neither `$retval` nor `$argN`).
            is_return: self.is_return && matches!(self.location, Location::Symbol { .. }),
            at_entry: self.at_entry(),
            regs: self.regs,
            max_stack: self.max_stack,
            btf: self.btf,
            queried: tokens(self.args_text, 0).any(|(_, t)| t.starts_with("$arg")),
        }
    }

    /// The context for argument `tok` (at `k`): BTF asked for before it
    /// by a `$arg` word (the kernel's expansion) or by an earlier
    /// argument's typed `$retval`.
    fn ctx_for(&self, ctx: &ArgCtx<'a>, k: usize) -> ArgCtx<'a> {
        let earlier = tokens(self.args_text, 0)
            .take(k)
            .any(|(_, t)| ctx.is_return && t.contains("$retval"));
        ArgCtx {
            queried: ctx.queried || earlier,
            ..*ctx
        }
    }

    /// Whether the line was parsed with the kernel's BTF.
    pub fn has_btf(&self) -> bool {
        self.btf.is_some()
    }

    /// Where the `k`th fetch argument (0-based) starts in the line.
    pub fn arg_pos(&self, k: usize) -> Option<usize> {
        tokens(self.args_text, self.args_pos).nth(k).map(|(p, _)| p)
    }

    /// The fetch arguments' text, as written.
    pub fn args_text(&self) -> &'a str {
        self.args_text.trim_end()
    }

    fn validate_args(&self) -> Res<()> {
        // The count first (the kernel's -E2BIG, no error_log entry).
        if tokens(self.args_text, self.args_pos).count() > MAX_ARGS {
            return err(ErrKind::TooManyArgs, self.args_pos);
        }
        let ctx = self.arg_ctx();
        // The kernel's look at every unnamed `$arg...` argument first
        // (argv_has_var_arg()): at a function entry or return only, a
        // number or `*` (BTF's every argument: once; [`parse_full`] has
        // expanded it where the function has BTF; elsewhere the kernel
        // logs that BTF is missing and goes on, and the argument is then
        // an invalid variable).
        var_args(
            tokens(self.args_text, self.args_pos),
            ctx.at_entry,
            ctx.is_return,
        )?;
        let btf = self.btf.is_some();
        for (i, (pos, tok)) in tokens(self.args_text, self.args_pos).enumerate() {
            // As the kernel's traceprobe_parse_probe_arg(): the name, then
            // whether it is taken (a field every record has, the kernel's
            // reserved_field_names, or an earlier argument's, generated
            // `argN` included), then the body.
            let name = arg_name(tok, pos, btf)?;
            if name.is_some_and(|n| RESERVED_FIELD_NAMES.contains(&n)) {
                return err(ErrKind::UsedArgName, pos);
            }
            for (j, (bpos, b)) in tokens(self.args_text, self.args_pos).enumerate().take(i) {
                if names_equal(name, i, arg_name(b, bpos, btf)?, j) {
                    return err(ErrKind::UsedArgName, pos);
                }
            }
            parse_arg(tok, pos, &self.ctx_for(&ctx, i))?;
        }
        Ok(())
    }

    /// The definition as listed once registered: a return probe given no
    /// instance count shows the one it got (`default`), as the kernel's
    /// listing does (`r10:`).
    pub fn with_default_maxactive(self, default: u32) -> Self {
        Self {
            maxactive: self.maxactive.or(self.is_return.then_some(default)),
            ..self
        }
    }

    /// Writes the kernel's generated event name (`p_<sym>_<offs>`,
    /// `r_<mod>_<sym>_0`, `p_0x<addr>`, non-identifier characters replaced by
    /// `_`) into `buf`, returning it.
    pub fn write_default_name<'b>(&self, buf: &'b mut [u8; MAX_EVENT_NAME_LEN + 1]) -> &'b str {
        let mut w = BufWriter { buf, len: 0 };
        let c = if self.is_return { 'r' } else { 'p' };
        let _ = match self.location {
            Location::Symbol {
                module: Some(m),
                name,
                offset,
            } => fmt::write(&mut w, format_args!("{}_{}:{}_{}", c, m, name, offset)),
            Location::Symbol {
                module: None,
                name,
                offset,
            } => fmt::write(&mut w, format_args!("{}_{}_{}", c, name, offset)),
            Location::Address(a) => fmt::write(&mut w, format_args!("{}_0x{:x}", c, a)),
        };
        let len = w.len;
        let Some(name) = w.buf.get_mut(..len) else {
            return "";
        };
        for b in name.iter_mut() {
            if !(b.is_ascii_alphanumeric() || *b == b'_') {
                *b = b'_';
            }
        }
        if let Some(b) = name.first_mut().filter(|b| b.is_ascii_digit()) {
            *b = b'_';
        }
        core::str::from_utf8(name).unwrap_or("")
    }
}

/// Whether argument `i` named `a` and argument `j` named `b` clash (a
/// missing name is `arg<position + 1>`).
fn names_equal(a: Option<&str>, i: usize, b: Option<&str>, j: usize) -> bool {
    let generated = |n: &str, k: usize| {
        n.strip_prefix("arg")
            .and_then(|d| d.parse::<usize>().ok())
            .is_some_and(|d| d == add(k, 1) && !from(n, 3).starts_with('0'))
    };
    match (a, b) {
        (Some(x), Some(y)) => x == y,
        (Some(x), None) => generated(x, j),
        (None, Some(y)) => generated(y, i),
        (None, None) => false,
    }
}

/// A fixed buffer implementing `fmt::Write`; output past its end is cut.
struct BufWriter<'b> {
    buf: &'b mut [u8],
    len: usize,
}

impl fmt::Write for BufWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // One byte stays free (a NUL for C callers).
        let room = self.buf.len().saturating_sub(add(self.len, 1));
        let n = s.len().min(room);
        let end = add(self.len, n);
        if let (Some(dst), Some(src)) = (self.buf.get_mut(self.len..end), s.as_bytes().get(..n)) {
            dst.copy_from_slice(src);
            self.len = end;
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
struct ArgCtx<'a> {
    is_return: bool,
    at_entry: bool,
    regs: &'static RegTable,
    max_stack: u32,
    btf: Option<BtfCtx<'a>>,
    /// BTF was asked for the function before this argument (see
    /// [`btf_var`]).
    queried: bool,
}

/// The most elements of an array type (the kernel's `MAX_ARRAY_LEN`).
pub const MAX_ARRAY_LEN: u32 = 64;

/// `TYPE[N]`: the type's text and N (0: not an array), with the kernel's
/// errors and positions (`pos`: where the type starts).
fn split_array(s: &str, pos: usize) -> Res<(&str, u8)> {
    let Some(open) = s.find('[') else {
        return Ok((s, 0));
    };
    let inner = from(s, past(0, open));
    let npos = past(pos, open);
    let Some(close) = inner.find(']') else {
        return err(ErrKind::ArrayNoClose, add(pos, s.len()));
    };
    if past(0, close) < inner.len() {
        return err(ErrKind::BadArraySuffix, add(npos, past(0, close)));
    }
    let n = parse_u64(sub(inner, 0, close)).filter(|&n| n != 0);
    let Some(n) = n.and_then(|n| u32::try_from(n).ok()) else {
        return err(ErrKind::BadArrayNum, npos);
    };
    if n > MAX_ARRAY_LEN {
        return err(ErrKind::ArrayTooBig, npos);
    }
    Ok((sub(s, 0, open), n as u8))
}

fn parse_type(s: &str, pos: usize) -> Res<Type> {
    let size = |bits: &str| match bits {
        "8" => Some(1),
        "16" => Some(2),
        "32" => Some(4),
        "64" => Some(8),
        _ => None,
    };
    let t = match s {
        "char" => Type::Char,
        "string" => Type::String,
        "ustring" => Type::UString,
        "symbol" => Type::Symbol,
        "symstr" => Type::SymStr,
        _ => {
            let k = s.as_bytes().first().copied().unwrap_or(0);
            let bits = s.get(1..).unwrap_or("");
            match (k, size(bits)) {
                (b'u', Some(n)) => Type::Unsigned(n),
                (b's', Some(n)) => Type::Signed(n),
                (b'x', Some(n)) => Type::Hex(n),
                // The container here (the kernel's find_fetch_type()), the
                // rest after the expression (`bitfield_of`).
                (b'b', _) => {
                    let c = bits
                        .split_once('/')
                        .and_then(|(_, c)| parse_u64(c))
                        .filter(|c| matches!(c, 8 | 16 | 32 | 64));
                    match c {
                        Some(c) => Type::Bitfield {
                            width: 0,
                            offset: 0,
                            container: (c / 8) as u8,
                            signed: false,
                        },
                        None => return err(ErrKind::BadType, pos),
                    }
                }
                _ => return err(ErrKind::BadType, pos),
            }
        }
    };
    Ok(t)
}

/// `<width>@<offset>/<container-size>` after the `b`, as the kernel's
/// __parse_bitfield_probe_arg() reads them (numbers in any base; the
/// container is known valid by then).
fn bitfield_of(s: &str, pos: usize) -> Res<Type> {
    let bad = ParseError::new(ErrKind::BadBitfield, pos);
    let (w, rest) = s.split_once('@').ok_or(bad)?;
    let (o, c) = rest.split_once('/').ok_or(bad)?;
    let num = |x: &str| parse_u64(x).and_then(|v| u32::try_from(v).ok());
    let (w, o, c) = (num(w).ok_or(bad)?, num(o).ok_or(bad)?, num(c).ok_or(bad)?);
    // Each of the three is any u32 the user wrote: compare without a sum
    // that could overflow (`b4294967295@1/64` once panicked here).
    let fits = matches!(w.checked_add(o), Some(end) if end <= c);
    if !matches!(c, 8 | 16 | 32 | 64) || w == 0 || !fits {
        return Err(bad);
    }
    Ok(Type::Bitfield {
        width: w as u8,
        offset: o as u8,
        container: (c / 8) as u8,
        signed: false,
    })
}

/// An argument's `NAME=`, checked; without one, on a kernel with BTF
/// (`btf`), the expression up to its type when that is a name, as the
/// kernel's `generate_probe_arg_name()` (None: `arg<N>`).
fn arg_name(tok: &str, pos: usize, btf: bool) -> Res<Option<&str>> {
    let errs = [
        ErrKind::NoArgName,
        ErrKind::ArgNameTooLong,
        ErrKind::BadArgName,
    ];
    let (name, body, _) = split_name(tok, '=', MAX_ARG_NAME_LEN, errs, pos)?;
    Ok(name.or_else(|| generated_name(body, btf)))
}

/// The name a kernel with BTF gives an unnamed argument: its expression
/// up to the type, when that is a C identifier.
fn generated_name(body: &str, btf: bool) -> Option<&str> {
    let expr = body.split(':').next().unwrap_or("");
    (btf && is_ident(expr)).then_some(expr)
}

/// Parses `[NAME=]FETCHARG[:TYPE]` at `pos`.
fn parse_arg<'a>(tok: &'a str, pos: usize, ctx: &ArgCtx<'a>) -> Res<FetchArg<'a>> {
    let errs = [
        ErrKind::NoArgName,
        ErrKind::ArgNameTooLong,
        ErrKind::BadArgName,
    ];
    let (name, body, bpos) = split_name(tok, '=', MAX_ARG_NAME_LEN, errs, pos)?;
    let name = name.or_else(|| generated_name(body, ctx.btf.is_some()));
    if body.len() > MAX_ARG_LEN {
        return err(ErrKind::ArgTooLong, bpos);
    }
    if body.is_empty() || body == "\0" {
        return err(ErrKind::NoArgBody, bpos);
    }
    // The type first, as the kernel's parse_probe_arg_type(): after the
    // first ':'; `$comm` and immediate strings are known by their text.
    let (expr, ty) = match body.find(':') {
        Some(i) => (
            sub(body, 0, i),
            Some((from(body, past(0, i)), past(bpos, i))),
        ),
        None => (body, None),
    };
    let text_base = expr == "$comm" || expr == "$COMM" || expr.starts_with("\\\"");
    let typed = match ty {
        Some((t, tpos)) => {
            let (t, count) = split_array(t, tpos)?;
            if text_base && (count != 0 || t != "string") {
                return err(ErrKind::NeedStringType, tpos);
            }
            Some((parse_type(t, tpos)?, count, tpos))
        }
        None => None,
    };
    let mut ops = [Op::Imm(0); MAX_OPS];
    let mut nops = 0u8;
    let mut last = Last::default();
    parse_expr(expr, bpos, ctx, &mut ops, &mut nops, &mut last)?;
    // What BTF says of the value (the kernel's last_type): a string type
    // reads a `char` array where it is, or the string a `char *` points
    // to; no type takes the value's own.
    let mut btf_type = None;
    if let (Some(b), Some(lt)) = (ctx.btf, last.ty) {
        match typed {
            // (The kernel's `strstr(type, "string")`: not `symstr`.)
            Some((t @ (Type::String | Type::UString), _, _)) => {
                if !is_char_array(b.btf, &lt) {
                    if !is_char_ptr(b.btf, &lt) {
                        return err(ErrKind::BadType4Str, bpos);
                    }
                    let deref = Op::Deref {
                        offset: 0,
                        user: t == Type::UString,
                    };
                    if push(&mut ops, &mut nops, deref, bpos).is_err() {
                        return err_no(ErrKind::TooManyOps, bpos, E2BIG);
                    }
                }
            }
            Some(_) => {}
            None => {
                let t = value_type(lt, &mut last);
                // The kernel's bitfield step takes one more operation
                // after the store (the last read's place).
                if matches!(t, Type::Bitfield { .. }) && usize::from(nops) >= MAX_OPS {
                    return err(ErrKind::TooManyOps, bpos);
                }
                btf_type = Some(t);
            }
        }
    }
    let last_is_deref = matches!(
        ops.get(usize::from(nops).wrapping_sub(1)),
        Some(Op::Deref { .. })
    );
    // An immediate is an address too, for strings (the kernel's
    // finalize_fetch_insn() takes FETCH_OP_IMM there: `\1:string`).
    let last_is_imm = matches!(ops.get(usize::from(nops).wrapping_sub(1)), Some(Op::Imm(_)));
    // Then what the kernel's finalize_fetch_insn() checks: strings are
    // read from memory (or are `$comm` or immediate), and so are arrays:
    // their values, or their string pointers; a bitfield's width and
    // offset. Its carets there count from where parsing a dereference
    // left its offset: past the outermost `+OFFS(` (`deref_shift`).
    let (ty, count) = match typed {
        Some((t, count, tpos)) => {
            let fpos = add(tpos, deref_shift(expr));
            let is_str = matches!(t, Type::String | Type::UString);
            if is_str && !text_base && !last_is_deref && !last_is_imm {
                return err(ErrKind::BadString, fpos);
            }
            let last = ops.get(usize::from(nops).wrapping_sub(1));
            if t == Type::SymStr
                && !matches!(
                    last,
                    Some(
                        Op::Reg(_)
                            | Op::Stack(_)
                            | Op::Retval
                            | Op::Arg(_)
                            | Op::Deref { user: false, .. }
                    )
                )
            {
                return err(ErrKind::BadSymString, fpos);
            }
            let t = match t {
                Type::Bitfield { .. } => {
                    bitfield_of(from(from(body, tpos.saturating_sub(bpos)), 1), fpos)?
                }
                t => t,
            };
            if count != 0 && (t == Type::SymStr || !(last_is_deref || is_str && last_is_imm)) {
                return err(ErrKind::BadString, fpos);
            }
            (t, count)
        }
        None if text_base => (Type::String, 0),
        None => (btf_type.unwrap_or(Type::Hex(8)), 0),
    };
    Ok(FetchArg {
        name,
        body,
        ops,
        nops,
        ty,
        count,
    })
}

/// What BTF says of the value an expression ends with (the kernel's
/// `last_type`, `last_bitoffs`, `last_bitsize`).
#[derive(Clone, Copy, Default)]
struct Last<'a> {
    ty: Option<btf::Type<'a>>,
    bitoffs: u32,
    bitsize: u32,
}

/// The kernel's `btf_type_is_char_array()`: an array of 8-bit integers
/// not declared signed.
fn is_char_array(b: &Btf<'_>, t: &btf::Type<'_>) -> bool {
    let elem = t.array_elem().and_then(|e| b.skip_modifiers(e));
    is_uchar(elem)
}

/// The kernel's `btf_type_is_char_ptr()`: what the type's `type` field
/// names is an 8-bit integer not declared signed. (It does not check that
/// the type is a pointer: another kind's size is read as a type id there,
/// and so it is here.)
fn is_char_ptr(b: &Btf<'_>, t: &btf::Type<'_>) -> bool {
    is_uchar(b.skip_modifiers(t.size_or_type))
}

fn is_uchar(t: Option<btf::Type<'_>>) -> bool {
    t.filter(|t| t.kind() == btf::kind::INT)
        .and_then(|t| t.int())
        .is_some_and(|(enc, _, bits)| enc & btf::INT_SIGNED == 0 && bits == 8)
}

/// The type a BTF value is shown as without one given (the kernel's
/// `fetch_type_from_btf_type()`, its default `x64` for what it does not
/// know), with the bits a bitfield keeps (its `parse_btf_bitfield()`).
fn value_type(t: btf::Type<'_>, last: &mut Last<'_>) -> Type {
    let size = |bits: u32| match bits {
        8 => Some(1u8),
        16 => Some(2),
        32 => Some(4),
        64 => Some(8),
        _ => None,
    };
    let ty = match t.kind() {
        btf::kind::ENUM => Type::Signed(4),
        btf::kind::ENUM64 => Type::Signed(8),
        btf::kind::PTR => Type::Hex(8),
        btf::kind::INT => match t.int() {
            Some((enc, _, bits)) if enc & btf::INT_SIGNED != 0 => {
                size(bits).map_or(Type::Hex(8), Type::Signed)
            }
            Some((_, off, bits)) => match size(bits) {
                Some(n) => Type::Unsigned(n),
                None => {
                    last.bitsize = bits;
                    last.bitoffs = last.bitoffs.wrapping_add(off);
                    Type::Unsigned(8)
                }
            },
            None => Type::Hex(8),
        },
        _ => Type::Hex(8),
    };
    // A bitfield: the bits extracted from the value read (the kernel
    // shifts a 64-bit word; bits past the value's own size it takes from
    // whatever follows in its buffer, here they are 0).
    // (Whole bytes at a byte boundary: nothing to take out.)
    if (last.bitsize & 7 == 0 && last.bitoffs == 0) || last.bitsize == 0 {
        return ty;
    }
    let (container, signed) = match ty {
        Type::Signed(n) => (n, true),
        Type::Unsigned(n) | Type::Hex(n) => (n, false),
        _ => (8, false),
    };
    let room = u32::from(container).saturating_mul(8);
    let offset = last.bitoffs.min(room.saturating_sub(1));
    let width = last.bitsize.min(room.saturating_sub(offset)).max(1);
    Type::Bitfield {
        width: width as u8,
        offset: offset as u8,
        container,
        signed,
    }
}

/// A name, the rest after its separator (with its position), and whether
/// the separator was `->`.
type FieldSplit<'s> = (&'s str, Option<(&'s str, usize)>, bool);

/// The kernel's `split_next_field()` on `s` at `pos`: the name before the
/// first `.` or `->`, where the rest starts (with its position), and
/// whether it was `->`.
fn split_field(s: &str, pos: usize) -> Res<FieldSplit<'_>> {
    let Some(i) = s.find(['.', '-']) else {
        return Ok((s, None, false));
    };
    let name = sub(s, 0, i);
    if from(s, i).starts_with("->") {
        let at = add(i, 2);
        Ok((name, Some((from(s, at), add(pos, at))), true))
    } else if from(s, i).starts_with('.') {
        Ok((name, Some((from(s, past(0, i)), past(pos, i))), false))
    } else {
        err(ErrKind::BadHyphen, add(pos, i))
    }
}

/// A BTF variable at `pos` (the kernel's `parse_btf_arg()`): a parameter
/// of the probed function by name, or a return probe's `$retval`, then
/// its `->` and `.` fields.
fn btf_var<'a>(
    e: &'a str,
    pos: usize,
    b: BtfCtx<'a>,
    ctx: &ArgCtx<'a>,
    ops: &mut [Op<'a>; MAX_OPS],
    nops: &mut u8,
    last: &mut Last<'a>,
) -> Res<()> {
    let is_return = ctx.is_return;
    let (var, field, is_ptr) = split_field(e, pos)?;
    if let (false, Some((_, fpos))) = (is_ptr, field) {
        return err_no(ErrKind::NoSupDatArg, fpos, EOPNOTSUPP);
    }
    let tid = if is_return && var == "$retval" {
        push(ops, nops, Op::Retval, pos)?;
        match b.proto {
            Some(p) if p.size_or_type == 0 => return err(ErrKind::NoRetval, pos),
            Some(p) => p.size_or_type,
            None => {
                return match field {
                    Some((_, fpos)) => err(ErrKind::NoBtfEntry, fpos),
                    None => Ok(()),
                };
            }
        }
    } else {
        // The kernel asks BTF once per line: a function without
        // parameters is "no BTF entry" where this asks first, and then
        // "not found" (after a `$arg` word or a typed `$retval` asked).
        let Some(p) = b.params() else {
            if b.proto.is_some() && ctx.queried {
                return err(ErrKind::NoBtfArg, pos);
            }
            return err(ErrKind::NoBtfEntry, pos);
        };
        let Some(i) = (0..p.vlen()).find(|&i| b.param_name(i) == Some(var)) else {
            return err(ErrKind::NoBtfArg, pos);
        };
        // On a return probe, its value at the entry (saved there).
        push(ops, nops, Op::Arg(i as u32), pos)?;
        b.btf.param(&p, i).map_or(u32::MAX, |(_, t)| t)
    };
    let Some(ty) = b.btf.skip_modifiers(tid) else {
        return err(ErrKind::BadBtfTid, pos);
    };
    *last = Last {
        ty: Some(ty),
        bitoffs: 0,
        bitsize: 0,
    };
    match field {
        Some((f, fpos)) => btf_fields(f, fpos, ty, b.btf, ops, nops, last),
        None => Ok(()),
    }
}

/// The fields after a BTF variable of type `ty` (the kernel's
/// `parse_btf_field()`): each `->` a read, at the offset its `.`-joined
/// members add up to.
fn btf_fields<'a>(
    mut f: &'a str,
    mut fpos: usize,
    mut ty: btf::Type<'a>,
    b: &Btf<'a>,
    ops: &mut [Op<'a>; MAX_OPS],
    nops: &mut u8,
    last: &mut Last<'a>,
) -> Res<()> {
    loop {
        if ty.kind() != btf::kind::PTR {
            return err(ErrKind::NoPtrStrct, fpos);
        }
        let Some(mut st) = b.skip_modifiers(ty.size_or_type) else {
            return err(ErrKind::BadBtfTid, fpos);
        };
        let mut bitoffs = 0u32;
        let mut next;
        loop {
            let (name, rest, is_ptr) = split_field(f, fpos)?;
            let member = match b.find_member(st, name) {
                Ok(Some(m)) => m,
                Ok(None) => return err(ErrKind::NoBtfField, fpos),
                Err(btf::NotStruct) => return err(ErrKind::BadBtfTid, fpos),
            };
            let (m, anon) = member;
            bitoffs = bitoffs.wrapping_add(anon);
            // As the kernel: the kflag of the struct searched, also for a
            // member found inside one of its anonymous members (whose own
            // kflag may differ: then the kernel, and this, read a bitfield
            // size as part of the offset, far off, with no-fault reads).
            if st.kflag() {
                bitoffs = bitoffs.wrapping_add(m.offset & 0x00ff_ffff);
                last.bitsize = m.offset >> 24;
            } else {
                bitoffs = bitoffs.wrapping_add(m.offset);
                last.bitsize = 0;
            }
            let Some(t) = b.skip_modifiers(m.ty) else {
                return err(ErrKind::BadBtfTid, fpos);
            };
            st = t;
            next = rest;
            match rest {
                Some((r, rpos)) if !is_ptr => {
                    f = r;
                    fpos = rpos;
                }
                _ => break,
            }
        }
        // (The kernel's caret: where the next field starts.)
        push(
            ops,
            nops,
            Op::Deref {
                offset: i64::from(bitoffs / 8),
                user: false,
            },
            next.map_or(fpos, |(_, p)| p),
        )?;
        last.bitoffs = bitoffs % 8;
        last.ty = Some(st);
        ty = st;
        match next {
            Some((r, rpos)) => {
                f = r;
                fpos = rpos;
            }
            None => return Ok(()),
        }
    }
}

/// `kstrtoul(s, 10)`: an optional `+`, then decimal digits only (None:
/// anything else, or past `u64`).
fn kstrtoul10(s: &str) -> Option<u64> {
    let d = s.strip_prefix('+').unwrap_or(s);
    if d.is_empty() || !d.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    d.parse().ok()
}

/// How far the kernel's parse offset has moved when an expression is
/// parsed: past the outermost `+|-[u]OFFS(` of a dereference (at its `(`
/// for `+u`, the kernel's arithmetic), else not at all.
fn deref_shift(expr: &str) -> usize {
    if !expr.starts_with(['+', '-']) {
        return 0;
    }
    match expr.find('(') {
        Some(open) => {
            past(0, open).saturating_sub(usize::from(sub(expr, 1, open).starts_with('u')))
        }
        None => 0,
    }
}

fn push<'a>(ops: &mut [Op<'a>; MAX_OPS], nops: &mut u8, op: Op<'a>, pos: usize) -> Res<()> {
    let n = usize::from(*nops);
    if n >= MAX_OPS {
        return err(ErrKind::TooManyOps, pos);
    }
    let Some(slot) = ops.get_mut(n) else {
        return err(ErrKind::TooManyOps, pos);
    };
    *slot = op;
    *nops = nops.saturating_add(1);
    Ok(())
}

/// Parses a fetch expression (no name, no type) into `ops`.
fn parse_expr<'a>(
    e: &'a str,
    pos: usize,
    ctx: &ArgCtx<'a>,
    ops: &mut [Op<'a>; MAX_OPS],
    nops: &mut u8,
    last: &mut Last<'a>,
) -> Res<()> {
    let first = e.as_bytes().first().copied().unwrap_or(0);
    match first {
        b'%' => {
            let r = from(e, 1);
            match ctx.regs.iter().find(|(n, _)| *n == r) {
                Some(&(_, i)) => push(ops, nops, Op::Reg(i), pos),
                None => err(ErrKind::BadRegName, pos),
            }
        }
        b'$' => {
            let v = from(e, 1);
            // The kernel's parse_probe_vars(): `retval`, `stack`, `arg` by
            // prefix, `comm` whole.
            let op = if v.starts_with("retval") {
                if !ctx.is_return {
                    return err(ErrKind::RetvalOnProbe, pos);
                }
                // With BTF, typed (and `->` fields); without, anything
                // after `retval` is ignored, as the kernel ignores it.
                if let Some(b) = ctx.btf {
                    return btf_var(e, pos, b, ctx, ops, nops, last);
                }
                Op::Retval
            } else if v == "comm" || v == "COMM" {
                Op::Comm
            } else if v == "stack" {
                Op::StackAddr
            } else if let Some(n) = v.strip_prefix("stack") {
                // A number from a digit on; past the stack's words, a bad
                // stack number; anything else, a bad variable.
                if !n.as_bytes().first().is_some_and(u8::is_ascii_digit) {
                    return err(ErrKind::BadVar, pos);
                }
                match kstrtoul10(n) {
                    Some(n) if n <= u64::from(ctx.max_stack) => Op::Stack(n as u32),
                    Some(_) => return err(ErrKind::BadStackNum, pos),
                    None => return err(ErrKind::BadVar, pos),
                }
            } else if let Some(n) = v.strip_prefix("arg") {
                let Some(n) = kstrtoul10(n) else {
                    return err(ErrKind::BadVar, pos);
                };
                match u32::try_from(n) {
                    Ok(n) if n >= 1 && n <= ctx.max_stack => {
                        // At a function entry, or its return (the
                        // value it had at the entry: the engine saves it
                        // there, as the kernel's entry data does).
                        if !ctx.at_entry && !ctx.is_return {
                            return err(ErrKind::NoFentryArgs, pos);
                        }
                        Op::Arg(n.saturating_sub(1))
                    }
                    _ => return err(ErrKind::BadArgNum, pos),
                }
            } else {
                return err(ErrKind::BadVar, pos);
            };
            push(ops, nops, op, pos)
        }
        b'@' => {
            let a = from(e, 1);
            if a.as_bytes().first().is_some_and(|c| c.is_ascii_digit()) {
                match parse_u64(a) {
                    Some(v) => {
                        push(ops, nops, Op::Addr(v), pos)?;
                        push(
                            ops,
                            nops,
                            Op::Deref {
                                offset: 0,
                                user: false,
                            },
                            pos,
                        )
                    }
                    None => err_no(ErrKind::BadMemAddr, pos, range_errno(a)),
                }
            } else if a.starts_with('+') {
                err(ErrKind::FileOnKprobe, pos)
            } else {
                // Not checked here, as the kernel does not: the name is
                // looked up, and its offset read, when the probe registers.
                let split = a.find(['+', '-']).unwrap_or(a.len());
                let (name, off) = (sub(a, 0, split), from(a, split));
                let op = if off.is_empty() {
                    Op::Symbol { name, offset: 0 }
                } else {
                    match parse_i64(off) {
                        Some(offset) => Op::Symbol { name, offset },
                        None => Op::BadSymbol(a),
                    }
                };
                push(ops, nops, op, pos)?;
                push(
                    ops,
                    nops,
                    Op::Deref {
                        offset: 0,
                        user: false,
                    },
                    pos,
                )
            }
        }
        b'\\' => {
            if let Some(text) = e.strip_prefix("\\\"") {
                // The kernel's __parse_imm_string(): up to a closing quote
                // at the end (the caret there when it is missing).
                return match text.strip_suffix('"') {
                    Some(t) => push(ops, nops, Op::ImmStr(t), pos),
                    None => err(ErrKind::ImmStrNoClose, add(pos, e.len())),
                };
            }
            match parse_i64(from(e, 1))
                .map(|v| v as u64)
                .or_else(|| parse_u64(from(e, 1)))
            {
                Some(v) => push(ops, nops, Op::Imm(v), pos),
                None => err_no(ErrKind::BadImm, past(pos, 0), range_errno(from(e, 1))),
            }
        }
        b'+' | b'-' => {
            let Some(open) = e.find('(') else {
                return err(ErrKind::DerefNeedBrace, pos);
            };
            let (sign, mut off) = (sub(e, 0, 1), sub(e, 1, open));
            let user = off.starts_with('u');
            if user {
                off = from(off, 1);
            }
            // The kernel's kstrtol() of the offset with its sign (after
            // `+`, a sign of its own is taken; after `-`, none).
            let offset = if sign == "-" {
                parse_u64(off).and_then(|v| 0i64.checked_sub_unsigned(v))
            } else {
                parse_i64(off)
            };
            let Some(offset) = offset else {
                // (The kernel reads `-` with the number, `+` without.)
                let errno = if sign == "-" {
                    digits_errno(off)
                } else {
                    range_errno(off)
                };
                return err_no(ErrKind::BadDerefOffs, pos, errno);
            };
            // Where the kernel's parse_probe_arg() reports what follows:
            // past the '(' (at it for `+u`, its offset arithmetic).
            let kpos = add(pos, past(0, open)).saturating_sub(usize::from(user));
            // The inner expression ends at the last ')'; the kernel ignores
            // anything after it.
            let rest = from(e, past(0, open));
            let Some(close) = rest.rfind(')') else {
                return err(ErrKind::DerefOpenBrace, add(kpos, rest.len()));
            };
            parse_expr(sub(rest, 0, close), kpos, ctx, ops, nops, last)?;
            // What was read is no longer the BTF value's (the kernel
            // resets its last_type).
            last.ty = None;
            if matches!(ops[0], Op::Comm | Op::ImmStr(_)) {
                return err(ErrKind::CommCantDeref, kpos);
            }
            push(ops, nops, Op::Deref { offset, user }, kpos)
        }
        // A bare name: a BTF argument name, at a function's entry or
        // return on a kernel with BTF; refused as not supported elsewhere.
        c if c.is_ascii_alphabetic() || c == b'_' => match ctx.btf {
            _ if !ctx.at_entry && !ctx.is_return => err(ErrKind::NoSupBtfArg, pos),
            None => err_no(ErrKind::NoSupBtfArg, pos, EOPNOTSUPP),
            Some(b) => btf_var(e, pos, b, ctx, ops, nops, last),
        },
        _ => err(ErrKind::BadFetchArg, pos),
    }
}

impl fmt::Display for ProbeDef<'_> {
    /// The canonical line (what `kprobe_events` shows back):
    /// `p:GRP/EVENT LOCATION ARGS` with the event name given or generated.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; MAX_EVENT_NAME_LEN + 1];
        let event = match self.event {
            Some(e) => e,
            None => self.write_default_name(&mut buf),
        };
        let c = if self.is_return { 'r' } else { 'p' };
        write!(f, "{}", c)?;
        if let Some(m) = self.maxactive {
            write!(f, "{}", m)?;
        }
        write!(f, ":{}/{} ", self.group_or_default(), event)?;
        match self.location {
            Location::Symbol {
                module,
                name,
                offset,
            } => {
                if let Some(m) = module {
                    write!(f, "{}:", m)?;
                }
                // As the kernel lists it: no "+0".
                if offset == 0 {
                    write!(f, "{}", name)?;
                } else {
                    write!(f, "{}+{}", name, offset)?;
                }
            }
            Location::Address(a) => write!(f, "0x{:x}", a)?,
        }
        for (i, a) in tokens(self.args_text, 0).enumerate() {
            let (_, t) = a;
            match (t.find('='), generated_name(t, self.btf.is_some())) {
                (Some(_), _) => write!(f, " {}", t)?,
                (None, Some(n)) => write!(f, " {}={}", n, t)?,
                (None, None) => write!(f, " arg{}={}", add(i, 1), t)?,
            }
        }
        Ok(())
    }
}
