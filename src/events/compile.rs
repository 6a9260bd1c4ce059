// SPDX-License-Identifier: GPL-2.0

//! From a parsed line to an event: fetch programs, field types and print
//! formats, and the engine probe behind it (with the kernel's notrace rule).

use super::*;
use crate::abi::KpKretprobe;
use crate::event_parse::{self as ep, ErrKind, FetchArg, Op, ProbeDef, Type};
use core::fmt::Write;
use kernel::ffi::{c_int, c_void};
use kernel::str::CStr;

/// The text of a NUL-terminated name buffer (see [`cstring`]).
pub(super) fn text(v: &[u8]) -> &str {
    let n = v.len().saturating_sub(1);
    core::str::from_utf8(v.get(..n).unwrap_or(b"")).unwrap_or("?")
}

/// A KVec holding `s` and a NUL.
pub(super) fn cstring(s: &[u8]) -> Result<KVec<u8>> {
    let mut v = KVec::with_capacity(s.len() + 1, GFP_KERNEL)?;
    v.extend_from_slice(s, GFP_KERNEL)?;
    v.push(0, GFP_KERNEL)?;
    Ok(v)
}

/// A `fmt::Write` into a KVec (allocation failure ends the output).
pub(super) struct VecWriter<'a>(pub(super) &'a mut KVec<u8>, pub(super) bool);

impl Write for VecWriter<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        if self.0.extend_from_slice(s.as_bytes(), GFP_KERNEL).is_err() {
            self.1 = true;
            return Err(core::fmt::Error);
        }
        Ok(())
    }
}

/// The field's C type, size and signedness for `trace_define_field`, as
/// the kernel's fetch types declare them (one element of an array).
pub(super) fn field_type(t: Type) -> (&'static str, usize, bool) {
    match t {
        Type::Unsigned(n)
        | Type::Hex(n)
        | Type::Bitfield {
            container: n,
            signed: false,
            ..
        } => (
            match n {
                1 => "u8",
                2 => "u16",
                4 => "u32",
                _ => "u64",
            },
            usize::from(n),
            false,
        ),
        Type::Signed(n)
        | Type::Bitfield {
            container: n,
            signed: true,
            ..
        } => (
            match n {
                1 => "s8",
                2 => "s16",
                4 => "s32",
                _ => "s64",
            },
            usize::from(n),
            true,
        ),
        Type::Char => ("u8", 1, false),
        Type::Symbol => ("u64", 8, false),
        Type::String | Type::UString | Type::SymStr => ("__data_loc char[]", 4, true),
    }
}

/// Bytes a non-string value is read as (the last dereference's width).
pub(super) fn value_size(t: Type) -> usize {
    match t {
        Type::Unsigned(n) | Type::Signed(n) | Type::Hex(n) => usize::from(n),
        Type::Bitfield { container, .. } => usize::from(container),
        Type::Char => 1,
        Type::Symbol | Type::SymStr | Type::String | Type::UString => 8,
    }
}

/// The `printf` conversion of a type in `print_fmt`.
pub(super) fn print_conv(t: Type) -> &'static str {
    match t {
        Type::Bitfield {
            container: 8,
            signed: true,
            ..
        } => "%Ld",
        Type::Bitfield { signed: true, .. } => "%d",
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

/// Compiles one parsed argument (resolving `@SYM`; `defer`: an unknown
/// one is left as address 0, for a site whose module is not loaded yet:
/// compiled again when it comes); its field.
pub(super) fn compile_arg(
    a: &FetchArg<'_>,
    index: usize,
    offset: usize,
    defer: bool,
) -> core::result::Result<(Arg, Field), (ErrKind, Error)> {
    let bad = |k| (k, EINVAL);
    let mut ops = [COp::Imm(0); ep::MAX_OPS];
    let mut imm = KVec::new();
    for (o, op) in ops.iter_mut().zip(a.program()) {
        *o = match *op {
            Op::Symbol { name, offset } => {
                let mut buf = [0u8; 128];
                let n = name.len().min(buf.len() - 1);
                buf[..n].copy_from_slice(&name.as_bytes()[..n]);
                let c =
                    CStr::from_bytes_with_nul(&buf[..=n]).map_err(|_| bad(ErrKind::BadMemAddr))?;
                // Unknown: the kernel finds out at registration
                // (traceprobe_update_arg(), -ENOENT) and blames the probe's
                // location; or, with the probe's module not loaded, takes
                // that for the module's absence and tries again when it
                // comes.
                match crate::symbols::lookup_name(c) {
                    Some(base) => Op::Addr((base as u64).wrapping_add(offset as u64)),
                    None if defer => Op::Addr(0),
                    None => return Err((ErrKind::BadProbeAddr, ENOENT)),
                }
            }
            Op::Reg(r) => Op::Reg(r),
            Op::Stack(n) => Op::Stack(n),
            Op::StackAddr => Op::StackAddr,
            Op::Arg(n) => Op::Arg(n),
            Op::Retval => Op::Retval,
            Op::Comm => Op::Comm,
            // The kernel's registration fails on it (-EINVAL).
            Op::BadSymbol(_) if defer => Op::Addr(0),
            Op::BadSymbol(_) => return Err((ErrKind::FailRegProbe, EINVAL)),
            Op::ImmStr(t) => {
                imm.extend_from_slice(t.as_bytes(), GFP_KERNEL)
                    .map_err(enomem)?;
                Op::ImmStr("")
            }
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
    let nops = a.program().len();
    let reg = match (nops, ops.first(), a.ty) {
        _ if a.count != 0 => None,
        (_, _, Type::Bitfield { .. }) => None,
        (_, _, t) if t.is_string() => None,
        (1, Some(&COp::Reg(r)), _) => Some(r),
        _ => None,
    };
    let (c_type, esize, _) = field_type(a.ty);
    let size = esize * usize::from(a.count.max(1));
    let mut ty_buf = KVec::new();
    let mut w = VecWriter(&mut ty_buf, false);
    let _ = w.write_str(c_type);
    if a.count != 0 {
        let _ = write!(w, "[{}]", a.count);
    }
    let _ = w.write_str("\0");
    if w.1 {
        return Err((ErrKind::FailRegProbe, ENOMEM));
    }
    Ok((
        Arg {
            ops,
            imm,
            nops,
            ty: a.ty,
            count: a.count,
            offset,
            size,
            reg,
        },
        Field {
            name,
            c_type: ty_buf,
            ty: a.ty,
            count: a.count,
            offset,
            size,
        },
    ))
}

pub(super) fn enomem<E>(_: E) -> (ErrKind, Error) {
    (ErrKind::FailRegProbe, ENOMEM)
}

/// The fetch programs of `d`'s arguments and the fields they make
/// (`defer`: as [`compile_arg`]).
pub(super) fn compile_args(
    d: &ProbeDef<'_>,
    defer: bool,
) -> core::result::Result<(KVec<Arg>, KVec<Field>), (ErrKind, Error)> {
    let mut args = KVec::new();
    let mut fields = KVec::new();
    let mut fixed = 0;
    for (i, a) in d.args().enumerate() {
        let a = a.map_err(|e| (e.kind, EINVAL))?;
        let (arg, field) = compile_arg(&a, i, fixed, defer)?;
        fixed += arg.size;
        args.push(arg, GFP_KERNEL).map_err(enomem)?;
        fields.push(field, GFP_KERNEL).map_err(enomem)?;
    }
    Ok((args, fields))
}

/// Builds a site for `d` (not yet registered, not on any event), and the
/// fields its arguments make.
pub(super) fn build_site(
    d: &ProbeDef<'_>,
    seq: u64,
) -> core::result::Result<(KBox<Site>, KVec<Field>), (ErrKind, Error)> {
    // An unknown `@SYM` is refused later, where the kernel finds it
    // (`symbols_refused`, which compiles the programs again).
    let (args, fields) = compile_args(d, true)?;
    // A return probe lists the number of instances it got, the default
    // one too, as the kernel's does (`r10:` where no number was given).
    let listed = d.with_default_maxactive(crate::kretprobe::default_maxactive() as u32);
    let mut def = KVec::new();
    {
        let mut w = VecWriter(&mut def, false);
        let _ = write!(w, "{}", listed);
        if w.1 {
            return Err((ErrKind::FailRegProbe, ENOMEM));
        }
    }
    let mut rp = KpKretprobe::new();
    // A return site's `$argN`: saved at the entry, a word each.
    let mut entry_args = KVec::new();
    if d.is_return {
        rp.maxactive = d.maxactive.map_or(0, |m| m as c_int);
        for a in args.iter() {
            for op in &a.ops[..a.nops] {
                if let COp::Arg(k) = *op {
                    if !entry_args.contains(&k) {
                        entry_args.push(k, GFP_KERNEL).map_err(enomem)?;
                    }
                }
            }
        }
        if !entry_args.is_empty() {
            rp.entry_handler = Some(super::record::on_entry);
            rp.data_size = entry_args.len() * core::mem::size_of::<u64>();
        }
    }
    let mut site = KBox::new(
        Site {
            rp,
            ev: core::ptr::null(),
            def,
            args,
            entry_args,
            hits: crate::percpu::Counter::new().map_err(enomem)?,
            seq,
            module: match d.location {
                ep::Location::Symbol {
                    module: Some(m), ..
                } => {
                    let mut v = KVec::new();
                    v.extend_from_slice(m.as_bytes(), GFP_KERNEL)
                        .map_err(enomem)?;
                    Some(v)
                }
                _ => None,
            },
            registered: core::sync::atomic::AtomicBool::new(false),
            dynev: core::ptr::null_mut(),
        },
        GFP_KERNEL,
    )
    .map_err(enomem)?;
    site.dynev = super::dynevent::entry_for(&site).map_err(enomem)?;
    Ok((site, fields))
}

/// Builds the event for `d` with the `fields` of its first site (no site
/// yet, not registered with the trace core).
pub(super) fn build_event(
    d: &ProbeDef<'_>,
    event: &str,
    fields: KVec<Field>,
) -> core::result::Result<KBox<Event>, (ErrKind, Error)> {
    let mut fmt = KVec::new();
    {
        let mut w = VecWriter(&mut fmt, false);
        let _ = if d.is_return {
            w.write_str("\"(%lx <- %lx)")
        } else {
            w.write_str("\"(%lx)")
        };
        // As the kernel's __set_print_fmt(): an array's elements in
        // braces, each its own argument.
        for a in fields.iter() {
            let n = text(&a.name);
            let conv = print_conv(a.ty);
            let _ = write!(w, " {}=", n);
            if a.count == 0 {
                let _ = w.write_str(conv);
            } else {
                let _ = write!(w, "{{{}", conv);
                for _ in 1..a.count {
                    let _ = write!(w, ",{}", conv);
                }
                let _ = w.write_str("}");
            }
        }
        let _ = if d.is_return {
            w.write_str("\", REC->__probe_func, REC->__probe_ret_ip")
        } else {
            w.write_str("\", REC->__probe_ip")
        };
        for a in fields.iter() {
            let n = text(&a.name);
            let string = matches!(a.ty, Type::String | Type::UString | Type::SymStr);
            if a.count == 0 {
                let _ = if string {
                    write!(w, ", __get_str({})", n)
                } else {
                    write!(w, ", REC->{}", n)
                };
            }
            for j in 0..a.count {
                let _ = if string {
                    write!(w, ", __get_str({}[{}])", n, j)
                } else {
                    write!(w, ", REC->{}[{}]", n, j)
                };
            }
        }
        let _ = w.write_str("\0");
        if w.1 {
            return Err((ErrKind::FailRegProbe, ENOMEM));
        }
    }
    let fixed = fields.iter().map(|f| f.size).sum();
    let mut sites = KVec::new();
    sites.reserve(1, GFP_KERNEL).map_err(enomem)?;
    KBox::new(
        Event {
            is_return: d.is_return,
            tev: core::ptr::null_mut(),
            group: cstring(d.group.unwrap_or(default_group()).as_bytes()).map_err(enomem)?,
            name: cstring(event.as_bytes()).map_err(enomem)?,
            print_fmt: fmt,
            fields,
            fixed,
            sites,
        },
        GFP_KERNEL,
    )
    .map_err(enomem)
}

/// Whether an appended site's fields differ from the event's, as the
/// kernel's `trace_probe_compare_arg_type()`: `Some(k)` names the first
/// argument (1-based) that differs in name or type, or one past the
/// shorter list.
pub(super) fn fields_differ(ev: &[Field], new: &[Field]) -> Option<usize> {
    if new.len() != ev.len() {
        return Some(new.len().min(ev.len()) + 1);
    }
    // The kernel compares fetch types: a bitfield is its container's.
    let kind = |t: Type| match t {
        Type::Bitfield {
            container,
            signed: false,
            ..
        } => Type::Unsigned(container),
        Type::Bitfield { container, .. } => Type::Signed(container),
        t => t,
    };
    ev.iter()
        .zip(new.iter())
        .position(|(a, b)| a.name != b.name || kind(a.ty) != kind(b.ty) || a.count != b.count)
        .map(|i| i + 1)
}

/// `[module:]name` as a C string in `buf`; `None` if it does not fit.
pub(super) fn symbol_spec<'b>(
    buf: &'b mut [u8],
    module: Option<&str>,
    name: &str,
) -> Option<&'b CStr> {
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
pub(super) fn requested_address(d: &ProbeDef<'_>) -> Option<usize> {
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
pub(super) fn no_ftrace_site(addr: usize) -> bool {
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
pub(super) fn within_notrace_func(addr: usize) -> bool {
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

/// Registers the probe of `site` (its address is final: boxed), disarmed:
/// armed when its event is enabled (`kp_ev_arm`).
pub(super) fn register_probe(site: &mut Site, d: &ProbeDef<'_>) -> Result {
    let mut sym = [0u8; 256];
    let kp = &mut site.rp.kp;
    match d.location {
        ep::Location::Symbol {
            module,
            name,
            offset,
        } => {
            let spec = symbol_spec(&mut sym, module, name).ok_or(EINVAL)?;
            let offset = u32::try_from(offset).map_err(|_| EINVAL)?;
            // Past the symbol's end (perf probe writes `_text+OFFSET` for
            // every kernel function it probes without debuginfo): by
            // address, as the kernel's kprobe events take it; the engine
            // checks the function it lands in. (Its own API keeps an
            // offset inside the named symbol.)
            // (A label like arm64's `_text` has no size at all.)
            let base = crate::symbols::lookup_name(spec);
            let inside = base
                .and_then(crate::symbols::bounds)
                .is_some_and(|b| (offset as usize) < b.size);
            match base {
                Some(b) if !inside && offset != 0 => {
                    kp.addr = b.checked_add(offset as usize).ok_or(EINVAL)? as *mut c_void;
                }
                _ => {
                    kp.symbol_name = spec.as_char_ptr().cast();
                    kp.offset = offset;
                }
            }
        }
        ep::Location::Address(a) => kp.addr = a as usize as *mut c_void,
    }
    // A register an entry served by ftrace does not have (arm64): the
    // breakpoint path instead.
    let partial = |op: &ep::Op<'_>| matches!(op, ep::Op::Reg(w) if !crate::arch::event_regs::valid_at_ftrace_entry(*w));
    if !d.is_return
        && d.args()
            .any(|a| a.is_ok_and(|a| a.program().iter().any(partial)))
    {
        kp.flags |= crate::abi::KP_FLAG_FULL_REGS;
    }
    kp.flags |= crate::abi::KP_FLAG_DISABLED;
    let r = if d.is_return {
        site.rp.handler = Some(on_return);
        // SAFETY: `site` is boxed and stays registered until removed.
        unsafe { crate::kretprobe::kp_register_kretprobe(&mut site.rp) }
    } else {
        kp.pre_handler = Some(on_hit);
        // SAFETY: as above.
        unsafe { crate::registry::kp_register_kprobe(kp) }
    };
    // The name buffer is local; the engine keeps the resolved address.
    site.rp.kp.symbol_name = core::ptr::null();
    if r < 0 {
        return Err(Error::from_errno(r));
    }
    site.set_registered(true);
    Ok(())
}

/// Unregisters the probe of `site` if it is registered.
pub(super) fn unregister_probe(site: &mut Site, is_return: bool) {
    if !site.is_registered() {
        return;
    }
    site.set_registered(false);
    if is_return {
        // SAFETY: registered by `register_probe`.
        unsafe { crate::kretprobe::kp_unregister_kretprobe(&mut site.rp) };
    } else {
        // SAFETY: as above.
        unsafe { crate::registry::kp_unregister_kprobe(&mut site.rp.kp) };
    }
}
