// SPDX-License-Identifier: GPL-2.0

//! kprobe_events: probes defined by text, recorded as real trace events.
//!
//! `/sys/kernel/debug/kp/kprobe_events` takes the lines of
//! `Documentation/trace/kprobetrace.rst` (grammar in `event_parse.rs`): `>`
//! replaces every event (refused with `-EBUSY` while one is enabled), `>>`
//! appends. Each `p`/`r` line becomes an engine kprobe or kretprobe plus a
//! trace event registered with the kernel's trace event core
//! (`src/events.c`), so `/sys/kernel/tracing/events/<GRP>/<EVENT>/` has
//! `enable`, `filter`, `format`, `id`, and records land in the trace buffer:
//! `<event>: (sym+off) name=value ...`. `kprobe_profile` shows hits and
//! misses per event; `error_log` explains refused lines in the kernel's
//! format.
//!
//! Records follow the kernel's kprobe events: a `trace_entry`, the probe
//! address (return probes: function and return address), then the arguments
//! packed in order; strings as `__data_loc char[]` with their bytes after
//! the fixed part (at most [`MAX_STRING`] bytes each here). A failed memory
//! read stores 0, or an empty string printed `(fault)`, and never faults.

use crate::abi::{KpKprobe, KpKretprobe, KpKretprobeInstance};
use crate::arch::regs::{self, Location, Regs};
use crate::event_parse::{self as ep, Command, ErrKind, FetchArg, Op, ProbeDef, Type};
use core::cell::UnsafeCell;
use core::fmt::Write;
use kernel::bindings::{self, pt_regs};
use kernel::ffi::{c_char, c_int, c_long, c_void};
use kernel::prelude::*;
use kernel::str::CStr;

/// Longest string argument stored, NUL included.
pub(crate) const MAX_STRING: usize = 256;
/// Error log entries kept.
const ERROR_LOG_LEN: usize = 8;
/// Longest command kept in the error log.
const ERROR_CMD_LEN: usize = 256;

/// This architecture's `%REG` names.
const REGS: &ep::RegTable = crate::arch::event_regs::EVENT_REGS;

extern "C" {
    fn kp_events_set_event_mutex(m: *mut c_void);
    fn kp_events_lock();
    fn kp_events_unlock();
    fn kp_tev_create(
        owner: *mut c_void,
        group: *const c_char,
        name: *const c_char,
        print_fmt: *mut c_char,
        is_return: bool,
    ) -> *mut c_void;
    fn kp_tev_register(t: *mut c_void) -> c_int;
    fn kp_tev_unregister(t: *mut c_void) -> c_int;
    fn kp_tev_free(t: *mut c_void);
    fn kp_tev_enabled(t: *mut c_void) -> bool;
    fn kp_tev_id(t: *mut c_void) -> c_int;
    fn kp_tev_record(t: *mut c_void, regs: *mut pt_regs, ip: usize, ret_ip: usize);
    fn trace_define_field(
        call: *mut c_void,
        ty: *const c_char,
        name: *const c_char,
        offset: c_int,
        size: c_int,
        is_signed: c_int,
        filter_type: c_int,
    ) -> c_int;
    fn trace_seq_puts(s: *mut c_void, str: *const c_char);
    fn snprintf(buf: *mut c_char, size: usize, fmt: *const c_char, ...) -> c_int;
}

/// Bytes before the arguments: `trace_entry` (8) + ip, or + func + ret_ip.
fn head_size(is_return: bool) -> usize {
    if is_return {
        24
    } else {
        16
    }
}

/// One operation of a compiled fetch program: the parser's, with every
/// `@SYM` resolved to an [`Op::Addr`] (so nothing borrows the line).
type COp = Op<'static>;

/// A compiled fetch argument.
struct Arg {
    /// NUL-terminated.
    name: KVec<u8>,
    ops: [COp; ep::MAX_OPS],
    nops: usize,
    ty: Type,
    /// Offset of the field after the head.
    offset: usize,
    /// Bytes in the fixed part (4 for strings: a `__data_loc`).
    size: usize,
}

/// One event. `rp` comes first so that the engine's probe pointer is the
/// event's (`#[repr(C)]`); a plain probe uses `rp.kp`.
#[repr(C)]
pub(crate) struct Event {
    rp: KpKretprobe,
    is_return: bool,
    tev: *mut c_void,
    /// NUL-terminated group and event names and print format.
    group: KVec<u8>,
    name: KVec<u8>,
    print_fmt: KVec<u8>,
    /// The canonical definition line (no NUL).
    def: KVec<u8>,
    args: KVec<Arg>,
    /// Size of the arguments' fixed part.
    fixed: usize,
    hits: crate::percpu::Counter,
}

impl Event {
    fn name_str(&self) -> &str {
        text(&self.name)
    }

    fn group_str(&self) -> &str {
        text(&self.group)
    }

    fn nmissed(&self) -> usize {
        if self.is_return {
            self.rp.nmissed.max(0) as usize
        } else {
            self.rp.kp.nmissed
        }
    }
}

/// The events, in definition order; touched only under `kp_events_lock()`.
struct Events(UnsafeCell<KVec<KBox<Event>>>);

// SAFETY: reached only through `Locked::events`, under the events mutex.
unsafe impl Sync for Events {}

static EVENTS: Events = Events(UnsafeCell::new(KVec::new()));

/// Holds the events mutex.
struct Locked;

impl Locked {
    fn lock() -> Self {
        // SAFETY: process context; released in `drop`.
        unsafe { kp_events_lock() };
        Locked
    }

    fn events(&mut self) -> &mut KVec<KBox<Event>> {
        // SAFETY: the mutex is held for as long as `self` lives, and `self`
        // is borrowed mutably for as long as the result.
        unsafe { &mut *EVENTS.0.get() }
    }

    fn log(&mut self) -> &mut ErrorLog {
        // SAFETY: as in `events`.
        unsafe { &mut *ERROR_LOG.0.get() }
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        // SAFETY: taken in `lock`.
        unsafe { kp_events_unlock() };
    }
}

/// The error log: the last refused commands, as the kernel's `error_log`.
struct LogEntry {
    stamp_ns: u64,
    kind: ErrKind,
    pos: usize,
    cmd: [u8; ERROR_CMD_LEN],
    cmd_len: usize,
}

struct ErrorLog {
    entries: [Option<LogEntry>; ERROR_LOG_LEN],
    next: usize,
}

struct Log(UnsafeCell<ErrorLog>);

// SAFETY: reached only through `Locked::log`, under the events mutex.
unsafe impl Sync for Log {}

static ERROR_LOG: Log = Log(UnsafeCell::new(ErrorLog {
    entries: [const { None }; ERROR_LOG_LEN],
    next: 0,
}));

fn log_error(g: &mut Locked, line: &str, kind: ErrKind, pos: usize) {
    let log = g.log();
    let mut cmd = [0u8; ERROR_CMD_LEN];
    let n = line.len().min(ERROR_CMD_LEN);
    cmd[..n].copy_from_slice(&line.as_bytes()[..n]);
    let i = log.next % ERROR_LOG_LEN;
    log.entries[i] = Some(LogEntry {
        // SAFETY: plain clock read.
        stamp_ns: unsafe { bindings::ktime_get() } as u64,
        kind,
        pos,
        cmd,
        cmd_len: n,
    });
    log.next = log.next.wrapping_add(1);
    pr_info!(
        "kprobe_events: {} (at {} in \"{}\")\n",
        kind.message(),
        pos,
        line
    );
}

/// `error_log` content.
pub(crate) fn write_error_log(w: &mut impl Write) -> core::fmt::Result {
    let mut g = Locked::lock();
    let log = g.log();
    for k in 0..ERROR_LOG_LEN {
        let i = log.next.wrapping_add(k) % ERROR_LOG_LEN;
        let Some(e) = &log.entries[i] else { continue };
        let cmd = core::str::from_utf8(&e.cmd[..e.cmd_len]).unwrap_or("?");
        writeln!(
            w,
            "[{:5}.{:06}] kp_events: error: {}",
            e.stamp_ns / 1_000_000_000,
            e.stamp_ns % 1_000_000_000 / 1000,
            e.kind.message()
        )?;
        writeln!(w, "  Command: {}", cmd)?;
        writeln!(
            w,
            "           {:>width$}",
            "^",
            width = e.pos.min(e.cmd_len) + 1
        )?;
    }
    Ok(())
}

/// Clears the error log (any write to `error_log`).
pub(crate) fn clear_error_log() {
    Locked::lock().log().entries = [const { None }; ERROR_LOG_LEN];
}

/// Defined events.
pub(crate) fn count() -> usize {
    Locked::lock().events().len()
}

/// `kprobe_events` content: one canonical line per event.
pub(crate) fn write_events(w: &mut impl Write) -> core::fmt::Result {
    let mut g = Locked::lock();
    for e in g.events().iter() {
        writeln!(w, "{}", core::str::from_utf8(&e.def).unwrap_or("?"))?;
    }
    Ok(())
}

/// `kprobe_profile` content: event, hits, misses.
pub(crate) fn write_profile(w: &mut impl Write) -> core::fmt::Result {
    let mut g = Locked::lock();
    for e in g.events().iter() {
        writeln!(
            w,
            "  {:<44} {:>15} {:>15}",
            e.name_str(),
            e.hits.sum(),
            e.nmissed()
        )?;
    }
    Ok(())
}

/// The text of a NUL-terminated name buffer (see [`cstring`]).
fn text(v: &[u8]) -> &str {
    let n = v.len().saturating_sub(1);
    core::str::from_utf8(v.get(..n).unwrap_or(b"")).unwrap_or("?")
}

/// A KVec holding `s` and a NUL.
fn cstring(s: &[u8]) -> Result<KVec<u8>> {
    let mut v = KVec::with_capacity(s.len() + 1, GFP_KERNEL)?;
    v.extend_from_slice(s, GFP_KERNEL)?;
    v.push(0, GFP_KERNEL)?;
    Ok(v)
}

/// A `fmt::Write` into a KVec (allocation failure ends the output).
struct VecWriter<'a>(&'a mut KVec<u8>, bool);

impl Write for VecWriter<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        if self.0.extend_from_slice(s.as_bytes(), GFP_KERNEL).is_err() {
            self.1 = true;
            return Err(core::fmt::Error);
        }
        Ok(())
    }
}

/// The field's C type, size and signedness for `trace_define_field`.
fn field_type(t: Type) -> (&'static core::ffi::CStr, usize, bool) {
    match t {
        Type::Unsigned(n) | Type::Hex(n) | Type::Bitfield { container: n, .. } => (
            match n {
                1 => c"u8",
                2 => c"u16",
                4 => c"u32",
                _ => c"u64",
            },
            usize::from(n),
            false,
        ),
        Type::Signed(n) => (
            match n {
                1 => c"s8",
                2 => c"s16",
                4 => c"s32",
                _ => c"s64",
            },
            usize::from(n),
            true,
        ),
        Type::Char => (c"char", 1, false),
        Type::Symbol => (c"unsigned long", 8, false),
        Type::String | Type::UString | Type::SymStr => (c"__data_loc char[]", 4, false),
    }
}

/// Bytes a non-string value is read as (the last dereference's width).
fn value_size(t: Type) -> usize {
    match t {
        Type::Unsigned(n) | Type::Signed(n) | Type::Hex(n) => usize::from(n),
        Type::Bitfield { container, .. } => usize::from(container),
        Type::Char => 1,
        Type::Symbol | Type::SymStr | Type::String | Type::UString => 8,
    }
}

/// The `printf` conversion of a type in `print_fmt`.
fn print_conv(t: Type) -> &'static str {
    match t {
        Type::Unsigned(8) | Type::Bitfield { container: 8, .. } => "%Lu",
        Type::Unsigned(_) | Type::Bitfield { .. } => "%u",
        Type::Signed(8) => "%Ld",
        Type::Signed(_) => "%d",
        Type::Hex(8) => "0x%Lx",
        Type::Hex(_) => "0x%x",
        Type::Char => "'%c'",
        Type::Symbol => "%pS",
        Type::String | Type::UString | Type::SymStr => "\\\"%s\\\"",
    }
}

/// Compiles one parsed argument (resolving `@SYM`).
fn compile_arg(
    a: &FetchArg<'_>,
    index: usize,
    offset: usize,
) -> core::result::Result<Arg, (ErrKind, Error)> {
    let bad = |k| (k, EINVAL);
    let mut ops = [COp::Imm(0); ep::MAX_OPS];
    for (o, op) in ops.iter_mut().zip(a.program()) {
        *o = match *op {
            Op::Symbol { name, offset } => {
                let mut buf = [0u8; 128];
                let n = name.len().min(buf.len() - 1);
                buf[..n].copy_from_slice(&name.as_bytes()[..n]);
                let c =
                    CStr::from_bytes_with_nul(&buf[..=n]).map_err(|_| bad(ErrKind::BadMemAddr))?;
                let base = crate::symbols::lookup_name(c).ok_or(bad(ErrKind::BadMemAddr))?;
                Op::Addr((base as u64).wrapping_add(offset as u64))
            }
            Op::Reg(r) => Op::Reg(r),
            Op::Stack(n) => Op::Stack(n),
            Op::StackAddr => Op::StackAddr,
            Op::Arg(n) => Op::Arg(n),
            Op::Retval => Op::Retval,
            Op::Comm => Op::Comm,
            Op::Imm(v) => Op::Imm(v),
            Op::Addr(v) => Op::Addr(v),
            Op::Deref { offset, user } => Op::Deref { offset, user },
        };
    }
    let mut name = KVec::new();
    let mut w = VecWriter(&mut name, false);
    let _ = match a.name {
        Some(n) => w.write_str(n),
        None => write!(w, "arg{}", index + 1),
    };
    let _ = w.write_str("\0");
    if w.1 {
        return Err((ErrKind::FailRegProbe, ENOMEM));
    }
    Ok(Arg {
        name,
        ops,
        nops: a.program().len(),
        ty: a.ty,
        offset,
        size: field_type(a.ty).1,
    })
}

fn enomem<E>(_: E) -> (ErrKind, Error) {
    (ErrKind::FailRegProbe, ENOMEM)
}

/// Builds the event for `d` (not yet registered anywhere).
fn build(d: &ProbeDef<'_>, event: &str) -> core::result::Result<KBox<Event>, (ErrKind, Error)> {
    let mut args = KVec::new();
    let mut fixed = 0;
    for (i, a) in d.args().enumerate() {
        let a = a.map_err(|e| (e.kind, EINVAL))?;
        let arg = compile_arg(&a, i, fixed)?;
        fixed += arg.size;
        args.push(arg, GFP_KERNEL).map_err(enomem)?;
    }
    let mut def = KVec::new();
    {
        let mut w = VecWriter(&mut def, false);
        let _ = write!(w, "{}", d);
        if w.1 {
            return Err((ErrKind::FailRegProbe, ENOMEM));
        }
    }
    let mut fmt = KVec::new();
    {
        let mut w = VecWriter(&mut fmt, false);
        let _ = if d.is_return {
            w.write_str("\"(%lx <- %lx)")
        } else {
            w.write_str("\"(%lx)")
        };
        for a in args.iter() {
            let n = text(&a.name);
            let _ = write!(w, " {}={}", n, print_conv(a.ty));
        }
        let _ = if d.is_return {
            w.write_str("\", REC->__probe_func, REC->__probe_ret_ip")
        } else {
            w.write_str("\", REC->__probe_ip")
        };
        for a in args.iter() {
            let n = text(&a.name);
            let _ = match a.ty {
                Type::String | Type::UString | Type::SymStr => write!(w, ", __get_str({})", n),
                Type::Symbol => write!(w, ", (void *)REC->{}", n),
                _ => write!(w, ", REC->{}", n),
            };
        }
        let _ = w.write_str("\0");
        if w.1 {
            return Err((ErrKind::FailRegProbe, ENOMEM));
        }
    }
    let mut rp = KpKretprobe::new();
    if d.is_return {
        rp.maxactive = d.maxactive.map_or(0, |m| m as c_int);
    }
    KBox::new(
        Event {
            rp,
            is_return: d.is_return,
            tev: core::ptr::null_mut(),
            group: cstring(d.group_or_default().as_bytes()).map_err(enomem)?,
            name: cstring(event.as_bytes()).map_err(enomem)?,
            print_fmt: fmt,
            def,
            args,
            fixed,
            hits: crate::percpu::Counter::new().map_err(enomem)?,
        },
        GFP_KERNEL,
    )
    .map_err(enomem)
}

/// `[module:]name` as a C string in `buf`; `None` if it does not fit.
fn symbol_spec<'b>(buf: &'b mut [u8; 256], module: Option<&str>, name: &str) -> Option<&'b CStr> {
    let mut w = BufWriter::new(buf);
    if let Some(m) = module {
        let _ = write!(w, "{}:", m);
    }
    let _ = write!(w, "{}\0", name);
    let (len, overflow) = (w.len, w.overflow);
    if overflow {
        return None;
    }
    CStr::from_bytes_with_nul(buf.get(..len)?).ok()
}

/// Where `d` asks to probe, if it resolves (registration reports why not).
fn requested_address(d: &ProbeDef<'_>) -> Option<usize> {
    match d.location {
        ep::Location::Symbol {
            module,
            name,
            offset,
        } => {
            let mut buf = [0u8; 256];
            let name = symbol_spec(&mut buf, module, name)?;
            crate::symbols::lookup_name(name)?.checked_add(usize::try_from(offset).ok()?)
        }
        ep::Location::Address(a) => usize::try_from(a).ok(),
    }
}

/// The kernel's `__within_notrace_func()`: whether the function holding
/// `addr` has no ftrace call site (built without fentry, `notrace`, or not
/// a C function at all: `ftrace_caller`, `__fentry__`, `_text`).
fn no_ftrace_site(addr: usize) -> bool {
    let Some(b) = crate::symbols::bounds(addr) else {
        return false;
    };
    let last = b.start.saturating_add(b.size.max(1) - 1);
    crate::symbols::has_ftrace_site(b.start, last) == Some(false)
}

/// The kernel's `within_notrace_func()` (kernel/trace/trace_kprobe.c),
/// which refuses kprobe events on functions ftrace cannot trace unless
/// CONFIG_KPROBE_EVENTS_ON_NOTRACE: the function holding `addr` has no
/// ftrace site, and, for a compiler-made copy (`foo.constprop.0`), neither
/// has the function it was made from. In modules too, which refuses every
/// function of a Rust module (rustc emits no fentry calls), as the kernel
/// does.
fn within_notrace_func(addr: usize) -> bool {
    let text = crate::symbols::in_kernel_image_text(addr) || crate::symbols::in_module_text(addr);
    if cfg!(CONFIG_KPROBE_EVENTS_ON_NOTRACE) || !text || !no_ftrace_site(addr) {
        return false;
    }
    let Some(sym) = crate::symbols::symbol_at(addr) else {
        return true;
    };
    let name = sym.name();
    let Some(dot) = name.iter().position(|&c| c == b'.') else {
        return true;
    };
    let mut buf = [0u8; crate::ksym::KSYM_NAME_LEN];
    let (Some(dst), Some(src)) = (buf.get_mut(..dot), name.get(..dot)) else {
        return true;
    };
    dst.copy_from_slice(src);
    let Some(base) = buf
        .get(..dot.saturating_add(1))
        .and_then(|b| CStr::from_bytes_with_nul(b).ok())
        .and_then(crate::symbols::lookup_name)
    else {
        return true;
    };
    no_ftrace_site(base)
}

/// Registers the probe of `ev` (its address is final: boxed).
fn register_probe(ev: &mut Event, d: &ProbeDef<'_>) -> Result {
    let mut sym = [0u8; 256];
    let kp = &mut ev.rp.kp;
    match d.location {
        ep::Location::Symbol {
            module,
            name,
            offset,
        } => {
            let spec = symbol_spec(&mut sym, module, name).ok_or(EINVAL)?;
            kp.symbol_name = spec.as_char_ptr().cast();
            kp.offset = u32::try_from(offset).map_err(|_| EINVAL)?;
        }
        ep::Location::Address(a) => kp.addr = a as usize as *mut c_void,
    }
    let r = if ev.is_return {
        ev.rp.handler = Some(on_return);
        // SAFETY: `ev` is boxed and stays registered until `remove`.
        unsafe { crate::kretprobe::kp_register_kretprobe(&mut ev.rp) }
    } else {
        kp.pre_handler = Some(on_hit);
        // SAFETY: as above.
        unsafe { crate::registry::kp_register_kprobe(kp) }
    };
    // The name buffer is local; the engine keeps the resolved address.
    ev.rp.kp.symbol_name = core::ptr::null();
    if r < 0 {
        return Err(Error::from_errno(r));
    }
    Ok(())
}

fn unregister_probe(ev: &mut Event) {
    if ev.is_return {
        // SAFETY: registered by `register_probe`.
        unsafe { crate::kretprobe::kp_unregister_kretprobe(&mut ev.rp) };
    } else {
        // SAFETY: as above.
        unsafe { crate::registry::kp_unregister_kprobe(&mut ev.rp.kp) };
    }
}

/// A fixed buffer `fmt::Write` that keeps a NUL after the text.
struct BufWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
    overflow: bool,
}

impl<'a> BufWriter<'a> {
    fn new(buf: &'a mut [u8]) -> Self {
        BufWriter {
            buf,
            len: 0,
            overflow: false,
        }
    }
}

impl Write for BufWriter<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let room = self.buf.len().saturating_sub(self.len + 1);
        let n = s.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        if let Some(b) = self.buf.get_mut(self.len) {
            *b = 0;
        }
        if n < s.len() {
            self.overflow = true;
        }
        Ok(())
    }
}

/// Handles one line; errors are logged against `line`.
fn run_line(g: &mut Locked, line: &str) -> Result {
    let fail = |g: &mut Locked, kind: ErrKind, pos: usize, e: Error| {
        log_error(g, line, kind, pos);
        Err(e)
    };
    let cmd = match ep::parse_line(line, REGS) {
        Ok(c) => c,
        Err(e) => return fail(g, e.kind, e.pos, Error::from_errno(-e.kind.errno())),
    };
    match cmd {
        Command::Empty => Ok(()),
        Command::Remove { group, event } => {
            let group = group.unwrap_or(ep::DEFAULT_GROUP);
            let events = g.events();
            let Some(i) = events
                .iter()
                .position(|e| e.name_str() == event && e.group_str() == group)
            else {
                return fail(g, ErrKind::NoSuchEvent, 2, ENOENT);
            };
            remove_at(g, i)?;
            reset_buffers();
            Ok(())
        }
        Command::Probe(d) => {
            // Room first: once registered, the event must not be dropped.
            if g.events().reserve(1, GFP_KERNEL).is_err() {
                return fail(g, ErrKind::FailRegProbe, 0, ENOMEM);
            }
            let mut buf = [0u8; ep::MAX_EVENT_NAME_LEN + 1];
            let event = match d.event {
                Some(e) => e,
                None => d.write_default_name(&mut buf),
            };
            let group = d.group_or_default();
            if g.events()
                .iter()
                .any(|e| e.name_str() == event && e.group_str() == group)
            {
                return fail(g, ErrKind::EventExist, 2, EEXIST);
            }
            let mut ev = match build(&d, event) {
                Ok(ev) => ev,
                Err((k, e)) => return fail(g, k, d.location_pos, e),
            };
            // The trace event first (not yet visible): the probe may fire
            // as soon as it is registered, and records need the event.
            let owner = (&mut *ev as *mut Event).cast::<c_void>();
            // SAFETY: the strings live in `ev`, which outlives the event.
            ev.tev = unsafe {
                kp_tev_create(
                    owner,
                    ev.group.as_ptr(),
                    ev.name.as_ptr(),
                    ev.print_fmt.as_mut_ptr(),
                    ev.is_return,
                )
            };
            if ev.tev.is_null() {
                return fail(g, ErrKind::FailRegProbe, 0, ENOMEM);
            }
            if let Some(addr) = requested_address(&d).filter(|&a| within_notrace_func(a)) {
                // SAFETY: never registered with the trace core.
                unsafe { kp_tev_free(ev.tev) };
                pr_warn!(
                    "Could not probe notrace function {}\n",
                    crate::symbols::Shown(addr)
                );
                return fail(g, ErrKind::FailRegProbe, d.location_pos, EINVAL);
            }
            if let Err(e) = register_probe(&mut ev, &d) {
                // SAFETY: never registered with the trace core.
                unsafe { kp_tev_free(ev.tev) };
                let kind = if e == ENOENT {
                    ErrKind::BadProbeAddr
                } else if e.to_errno() == -(bindings::EILSEQ as i32) {
                    ErrKind::BadInsnBndry
                } else {
                    ErrKind::FailRegProbe
                };
                return fail(g, kind, d.location_pos, e);
            }
            // SAFETY: a new event of ours.
            let r = unsafe { kp_tev_register(ev.tev) };
            if r != 0 {
                unregister_probe(&mut ev);
                // SAFETY: not registered with the trace core; the probe is
                // gone (unregister waited for its handlers).
                unsafe { kp_tev_free(ev.tev) };
                let kind = if r == -(bindings::EEXIST as c_int) {
                    ErrKind::EventExist
                } else {
                    ErrKind::FailRegProbe
                };
                return fail(g, kind, 2, Error::from_errno(r));
            }
            // Cannot fail: room was reserved above.
            let _ = g.events().push(ev, GFP_KERNEL);
            Ok(())
        }
    }
}

/// Removes event `i`: `-EBUSY` while it is enabled.
fn remove_at(g: &mut Locked, i: usize) -> Result {
    let events = g.events();
    let Some(ev) = events.get_mut(i) else {
        return Err(ENOENT);
    };
    // SAFETY: a registered event of ours.
    let r = unsafe { kp_tev_unregister(ev.tev) };
    if r != 0 {
        return Err(Error::from_errno(r));
    }
    unregister_probe(ev);
    // SAFETY: unregistered above; no handler runs any more.
    unsafe { kp_tev_free(ev.tev) };
    // Remove element `i`, keeping the order (KVec of 6.12 has no `remove`).
    events.as_mut_slice()[i..].rotate_left(1);
    let last = events.len() - 1;
    // SAFETY: the element at `last` is read out exactly once and the length
    // shrinks past it, so it is neither used nor dropped again.
    let gone = unsafe {
        let p = events.as_mut_ptr().add(last);
        events.set_len(last);
        p.read()
    };
    drop(gone);
    Ok(())
}

/// `kprobe_events` opened with `O_TRUNC`: removes every event, or none
/// (`-EBUSY`) if one is enabled.
#[no_mangle]
pub(crate) extern "C" fn kp_events_clear() -> c_int {
    let mut g = Locked::lock();
    // SAFETY: registered events of ours.
    if g.events().iter().any(|e| unsafe { kp_tev_enabled(e.tev) }) {
        return -(bindings::EBUSY as c_int);
    }
    let mut r = 0;
    while !g.events().is_empty() {
        let last = g.events().len() - 1;
        if let Err(e) = remove_at(&mut g, last) {
            r = e.to_errno();
            break;
        }
    }
    reset_buffers();
    r
}

/// `void tracing_reset_all_online_cpus(void)` (kernel/trace/trace.c, not
/// exported), resolved at init; 0 if missing (then old records stay in the
/// buffer after a removal, and are still read within their bounds).
static RESET_BUFFERS: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// After events were removed: resets the trace buffers that recorded a
/// removed event (the trace core marks them `clear_trace` when an event
/// that was ever enabled is removed), as the kernel's `dyn_event_release()`
/// does, so that a new event reusing a removed one's type id never has the
/// old records read with its own layout.
fn reset_buffers() {
    let f = RESET_BUFFERS.load(core::sync::atomic::Ordering::Acquire);
    if f != 0 {
        // SAFETY: `f` is `tracing_reset_all_online_cpus`, resolved in
        // `init`, with the C signature `void (void)`; process context.
        unsafe {
            let f: unsafe extern "C" fn() = core::mem::transmute(f);
            f();
        }
    }
}

/// Finds the trace event core's `event_mutex` (not exported) for the C glue
/// (without it probe events are refused, `-ENODEV`; probes still work) and
/// [`RESET_BUFFERS`].
pub(crate) fn init() {
    RESET_BUFFERS.store(
        crate::symbols::lookup_name(kernel::c_str!("tracing_reset_all_online_cpus")).unwrap_or(0),
        core::sync::atomic::Ordering::Release,
    );
    match crate::symbols::lookup_name(kernel::c_str!("event_mutex")) {
        // SAFETY: the kernel's `struct mutex event_mutex`, lives forever.
        Some(m) => unsafe { kp_events_set_event_mutex(m as *mut c_void) },
        None => pr_warn!("event_mutex not found: kprobe_events disabled\n"),
    }
}

/// Removes every event at engine unload (none can be enabled: enabling one
/// pins the module).
pub(crate) fn exit() {
    let _ = kp_events_clear();
    // The list is a static: free its buffer (kmemleak found it).
    let mut g = Locked::lock();
    drop(core::mem::take(g.events()));
}

/// A write to `kprobe_events`: runs each line; stops at the first failing
/// one (earlier lines stay in effect). Returns `len` or `-errno`.
///
/// # Safety
///
/// `buf` points to `len` readable bytes.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_events_write(buf: *const c_char, len: usize) -> c_long {
    // SAFETY: per the function's contract.
    let bytes = unsafe { core::slice::from_raw_parts(buf.cast::<u8>(), len) };
    let Ok(text) = core::str::from_utf8(bytes) else {
        return -(bindings::EINVAL as c_long);
    };
    let mut g = Locked::lock();
    for line in text.split('\n') {
        if let Err(e) = run_line(&mut g, line.trim_end_matches('\r')) {
            return e.to_errno() as c_long;
        }
    }
    len as c_long
}

/// `kp_event_command()`: runs one `kprobe_events` line, as writing it to the
/// control file with `>>` would (for modules that define events in code,
/// like the kernel's `kprobe_event_gen_cmd` API). 0 or -errno; refused lines
/// are explained in `error_log`.
///
/// # Safety
///
/// `line` is null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn kp_event_command(line: *const c_char) -> c_int {
    if line.is_null() {
        return -(bindings::EINVAL as c_int);
    }
    // SAFETY: NUL-terminated per the contract.
    let line = unsafe { CStr::from_char_ptr(line) };
    let Ok(text) = core::str::from_utf8(line.as_bytes()) else {
        return -(bindings::EINVAL as c_int);
    };
    let mut g = Locked::lock();
    match run_line(&mut g, text) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// `kp_event_id()`: the trace event type of `GROUP/EVENT` (null group: the
/// default), the `id` tracefs shows and perf's `PERF_TYPE_TRACEPOINT`
/// config; `-ENOENT` if there is no such event.
///
/// # Safety
///
/// `group` is null or NUL-terminated; `event` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn kp_event_id(group: *const c_char, event: *const c_char) -> c_int {
    if event.is_null() {
        return -(bindings::EINVAL as c_int);
    }
    // SAFETY: NUL-terminated per the contract.
    let event = unsafe { CStr::from_char_ptr(event) }.as_bytes();
    let group = if group.is_null() {
        ep::DEFAULT_GROUP.as_bytes()
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_char_ptr(group) }.as_bytes()
    };
    let mut g = Locked::lock();
    match g
        .events()
        .iter()
        .find(|e| e.name_str().as_bytes() == event && e.group_str().as_bytes() == group)
    {
        // SAFETY: a registered event of ours.
        Some(e) => unsafe { kp_tev_id(e.tev) },
        None => -(bindings::ENOENT as c_int),
    }
}

// ---- the hit path ----

/// Whether a plain (`+OFFS`) read of `addr` goes to user memory: like the
/// kernel's probe_mem_read(), addresses below the kernel half are user
/// addresses (a system call's pointer arguments).
fn is_user_addr(addr: usize) -> bool {
    (addr as isize) >= 0
}

fn read_word(addr: usize, user: bool, size: usize) -> Option<u64> {
    let user = user || is_user_addr(addr);
    let mut v = 0u64;
    // SAFETY: nofault copies of at most 8 bytes into `v`.
    let r = unsafe {
        if user {
            bindings::copy_from_user_nofault((&mut v as *mut u64).cast(), addr as *const _, size)
        } else {
            bindings::copy_from_kernel_nofault((&mut v as *mut u64).cast(), addr as *const _, size)
        }
    };
    (r == 0).then_some(v)
}

/// Runs `ops`; the last op, when it is a dereference and `last` says so, is
/// not executed: its address is returned (for strings and sized reads).
fn run(ops: &[COp], regs: &pt_regs, stop_before_last_deref: bool) -> Option<(u64, Option<bool>)> {
    let mut v = 0u64;
    let n = ops.len();
    for (i, op) in ops.iter().enumerate() {
        v = match *op {
            // SAFETY: `r` is an index into `struct pt_regs` words from the
            // arch's register table.
            COp::Reg(r) => unsafe { *(regs as *const pt_regs).cast::<u64>().add(usize::from(r)) },
            COp::Stack(k) => read_word(regs::sp(regs) + 8 * k as usize, false, 8)?,
            COp::StackAddr => regs::sp(regs) as u64,
            // SAFETY: `Regs` is a transparent `pt_regs`; shared view.
            COp::Arg(k) => match unsafe { &*(regs as *const pt_regs).cast::<Regs>() }
                .arg_location(k as usize)
            {
                Location::Register(x) => x as u64,
                Location::Stack(a) => read_word(a, false, 8)?,
            },
            COp::Retval => regs::return_value(regs) as u64,
            // Resolved at compile time; `$comm` is read as a string.
            COp::Comm | COp::Symbol { .. } => 0,
            COp::Imm(x) | COp::Addr(x) => x,
            COp::Deref { offset, user } => {
                let a = v.wrapping_add(offset as u64);
                if i + 1 == n && stop_before_last_deref {
                    return Some((a, Some(user)));
                }
                read_word(a as usize, user, 8)?
            }
        };
    }
    Some((v, None))
}

/// The value of a non-string argument.
fn fetch_value(a: &Arg, regs: &pt_regs) -> u64 {
    let ops = &a.ops[..a.nops];
    let v = match run(ops, regs, true) {
        Some((addr, Some(user))) => read_word(addr as usize, user, value_size(a.ty)).unwrap_or(0),
        Some((v, None)) => v,
        None => 0,
    };
    match a.ty {
        Type::Bitfield { width, offset, .. } => {
            (v >> offset) & (u64::MAX >> (64 - u32::from(width)))
        }
        _ => v,
    }
}

/// Copies a string argument into `out` (NUL-terminated, truncated);
/// returns the bytes used (0: fault).
fn fetch_string(a: &Arg, regs: &pt_regs, out: &mut [u8]) -> usize {
    if out.is_empty() {
        return 0;
    }
    let ops = &a.ops[..a.nops];
    if matches!(ops.first(), Some(COp::Comm)) {
        // SAFETY: `current` is valid; `comm` is a NUL-terminated array.
        let comm = unsafe { (*bindings::get_current()).comm };
        let n = comm.iter().position(|&c| c == 0).unwrap_or(comm.len());
        let n = n.min(out.len() - 1);
        out[..n].copy_from_slice(&comm[..n]);
        out[n] = 0;
        return n + 1;
    }
    if a.ty == Type::SymStr {
        let v = fetch_value(a, regs);
        // SAFETY: bounded formatting of an address with %pS.
        let n = unsafe {
            snprintf(
                out.as_mut_ptr(),
                out.len(),
                c"%pS".as_ptr().cast(),
                v as usize,
            )
        };
        return (n.max(0) as usize).min(out.len() - 1) + 1;
    }
    let Some((addr, user)) = run(ops, regs, true) else {
        return 0;
    };
    let user = user.unwrap_or(false) || a.ty == Type::UString || is_user_addr(addr as usize);
    let mut done = 0;
    while done < out.len() - 1 {
        let at = (addr as usize).wrapping_add(done);
        let chunk = (4096 - at % 4096).min(out.len() - 1 - done);
        // SAFETY: nofault copies into `out`.
        let r = unsafe {
            let dst = out.as_mut_ptr().add(done).cast();
            if user {
                bindings::copy_from_user_nofault(dst, at as *const _, chunk)
            } else {
                bindings::copy_from_kernel_nofault(dst, at as *const _, chunk)
            }
        };
        if r != 0 {
            if done == 0 {
                return 0;
            }
            break;
        }
        if let Some(z) = out[done..done + chunk].iter().position(|&c| c == 0) {
            return done + z + 1;
        }
        done += chunk;
    }
    out[done] = 0;
    done + 1
}

/// C callback: bytes of arguments for this hit (fixed part + strings).
///
/// # Safety
///
/// `owner` is a live event, `regs` the trap frame.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_ev_args_size(
    owner: *mut c_void,
    regs: *mut pt_regs,
    _ret_ip: usize,
) -> usize {
    // SAFETY: per the function's contract.
    let (ev, regs) = unsafe { (&*owner.cast::<Event>(), &*regs) };
    let mut total = ev.fixed;
    let mut strings = ev.args.iter().filter(|a| a.ty.is_string()).peekable();
    if strings.peek().is_none() {
        // No string: no scratch buffer to clear on every hit.
        return total;
    }
    let mut tmp = [0u8; MAX_STRING];
    for a in strings {
        total += fetch_string(a, regs, &mut tmp);
    }
    total
}

/// C callback: fills the arguments of a reserved record of `size` bytes
/// after `head`.
///
/// # Safety
///
/// `owner` is a live event, `regs` the trap frame, `entry` a reserved record
/// of `head + size` bytes.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_ev_store_args(
    owner: *mut c_void,
    regs: *mut pt_regs,
    _ret_ip: usize,
    entry: *mut u8,
    head: usize,
    size: usize,
) {
    // SAFETY: per the function's contract.
    let (ev, regs) = unsafe { (&*owner.cast::<Event>(), &*regs) };
    // SAFETY: the record has `head + size` bytes.
    let body = unsafe { core::slice::from_raw_parts_mut(entry.add(head), size) };
    let mut dyn_at = ev.fixed.min(size);
    for a in ev.args.iter() {
        let Some(field) = body.get_mut(a.offset..a.offset + a.size) else {
            continue;
        };
        if a.ty.is_string() {
            let room = (size - dyn_at).min(MAX_STRING);
            let (field_end, rest) = body.split_at_mut(dyn_at);
            let n = fetch_string(a, regs, &mut rest[..room]);
            let loc = ((n as u32) << 16) | ((head + dyn_at) as u32 & 0xffff);
            if let Some(f) = field_end.get_mut(a.offset..a.offset + 4) {
                f.copy_from_slice(&loc.to_ne_bytes());
            }
            dyn_at += n;
        } else {
            let v = fetch_value(a, regs).to_ne_bytes();
            field.copy_from_slice(&v[..a.size]);
        }
    }
}

/// C callback: the event's name for the output line.
///
/// # Safety
///
/// `owner` is a live event.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_ev_name(owner: *mut c_void) -> *const c_char {
    // SAFETY: per the function's contract.
    unsafe { (*owner.cast::<Event>()).name.as_ptr() }
}

/// C callback: ` name=value` for each argument of the record `entry`.
///
/// # Safety
///
/// `owner` is the event that wrote `entry`; `s` a trace_seq.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_ev_print_args(
    owner: *mut c_void,
    s: *mut c_void,
    entry: *const u8,
    size: c_int,
) {
    // SAFETY: per the function's contract.
    let ev = unsafe { &*owner.cast::<Event>() };
    let head = head_size(ev.is_return);
    // Every read below stays inside the record's `size` bytes, whatever
    // the record holds: a record is only ever read with the layout of the
    // event that now owns its type id, and an older event's records (had
    // the buffer not been reset after its removal) or a torn one must not
    // make the reader walk off the record.
    let size = usize::try_from(size).unwrap_or(0);
    // SAFETY: the trace core hands us the whole record of `size` bytes.
    let rec = unsafe { core::slice::from_raw_parts(entry, size) };
    for a in ev.args.iter() {
        let mut buf = [0u8; MAX_STRING + 64];
        let mut w = BufWriter::new(&mut buf);
        let name = text(&a.name);
        let _ = write!(w, " {}=", name);
        let start = head + a.offset;
        let Some(field) = rec.get(start..start + a.size) else {
            let _ = w.write_str("(bad record)");
            // SAFETY: `buf` is NUL-terminated by the writer.
            unsafe { trace_seq_puts(s, buf.as_ptr()) };
            continue;
        };
        let mut word = [0u8; 8];
        word[..a.size.min(8)].copy_from_slice(&field[..a.size.min(8)]);
        let v = u64::from_ne_bytes(word);
        let _ = match a.ty {
            Type::Unsigned(_) | Type::Bitfield { .. } => write!(w, "{}", v),
            Type::Signed(n) => {
                let shift = 64 - 8 * u32::from(n);
                write!(w, "{}", ((v << shift) as i64) >> shift)
            }
            Type::Hex(_) => write!(w, "0x{:x}", v),
            Type::Char => write!(w, "'{}'", (v as u8) as char),
            Type::Symbol => {
                let mut sym = [0u8; 256];
                // SAFETY: bounded formatting of an address.
                let n = unsafe {
                    snprintf(
                        sym.as_mut_ptr(),
                        sym.len(),
                        c"%pS".as_ptr().cast(),
                        v as usize,
                    )
                };
                let n = (n.max(0) as usize).min(sym.len() - 1);
                write!(w, "{}", core::str::from_utf8(&sym[..n]).unwrap_or("?"))
            }
            Type::String | Type::UString | Type::SymStr => {
                let loc = v as u32;
                let (off, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
                if len == 0 {
                    w.write_str("(fault)")
                } else if let Some(bytes) = rec.get(off..off + len - 1).filter(|_| off >= head) {
                    let _ = w.write_str("\"");
                    for &c in bytes {
                        let _ = w.write_char(if c.is_ascii_graphic() || c == b' ' {
                            c as char
                        } else {
                            '.'
                        });
                    }
                    w.write_str("\"")
                } else {
                    w.write_str("(bad record)")
                }
            }
        };
        // SAFETY: `buf` is NUL-terminated by the writer.
        unsafe { trace_seq_puts(s, buf.as_ptr()) };
    }
}

/// C callback: the arguments' fields for filters and `format`.
///
/// # Safety
///
/// `owner` is a live event; `call` its trace_event_call.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_ev_define_fields(
    owner: *mut c_void,
    call: *mut c_void,
) -> c_int {
    // SAFETY: per the function's contract.
    let ev = unsafe { &*owner.cast::<Event>() };
    let head = head_size(ev.is_return);
    for a in ev.args.iter() {
        let (ty, size, signed) = field_type(a.ty);
        // SAFETY: NUL-terminated strings that live as long as the event.
        let r = unsafe {
            trace_define_field(
                call,
                ty.as_ptr().cast(),
                a.name.as_ptr(),
                (head + a.offset) as c_int,
                size as c_int,
                c_int::from(signed),
                0,
            )
        };
        if r != 0 {
            return r;
        }
    }
    0
}

/// The probe's pre handler: count, record.
///
/// # Safety
///
/// Called by the engine with an event's probe.
unsafe extern "C" fn on_hit(p: *mut KpKprobe, regs: *mut pt_regs) -> c_int {
    // SAFETY: `p` is the first field of a live `Event` (`#[repr(C)]`).
    let ev = unsafe { &*p.cast::<Event>() };
    ev.hits.inc();
    // SAFETY: a registered event; `regs` is the trap frame.
    unsafe { kp_tev_record(ev.tev, regs, ev.rp.kp.addr as usize, 0) };
    0
}

/// The kretprobe's return handler: count, record.
///
/// # Safety
///
/// Called by the engine with an instance of an event's kretprobe.
unsafe extern "C" fn on_return(ri: *mut KpKretprobeInstance, regs: *mut pt_regs) -> c_int {
    // SAFETY: `rp` is the first field of a live `Event`.
    let (ev, ret) = unsafe { (&*(*ri).rp.cast::<Event>(), (*ri).ret_addr) };
    ev.hits.inc();
    // SAFETY: as in `on_hit`.
    unsafe { kp_tev_record(ev.tev, regs, ev.rp.kp.addr as usize, ret) };
    0
}
