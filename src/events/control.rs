// SPDX-License-Identifier: GPL-2.0

//! The control files: `kprobe_events` (define, remove, list), `kprobe_profile`,
//! and the C entry points `kp_event_command()` / `kp_event_id()`.

use super::*;
use crate::event_parse::{self as ep, Command, ErrKind, ProbeDef};
use core::fmt::Write;
use kernel::bindings;
use kernel::ffi::{c_char, c_int, c_long, c_void};
use kernel::str::CStr;

/// Calls `f` with each site and its event, in definition order across
/// the events (the kernel lists its `dyn_event`s so: a site appended to
/// an older event comes after the events defined in between).
fn for_each_site(
    g: &mut Locked,
    mut f: impl FnMut(&Event, &Site) -> core::fmt::Result,
) -> core::fmt::Result {
    let events = g.events();
    let n = events.iter().map(|e| e.sites.len()).sum();
    let mut order: KVec<(u64, usize, usize)> = KVec::new();
    if order.reserve(n, GFP_KERNEL).is_ok() {
        for (i, e) in events.iter().enumerate() {
            for (k, s) in e.sites.iter().enumerate() {
                let _ = order.push((s.seq, i, k), GFP_KERNEL);
            }
        }
        order.sort_unstable();
        for &(_, i, k) in order.iter() {
            f(&events[i], &events[i].sites[k])?;
        }
    } else {
        // Out of memory: event by event.
        for e in events.iter() {
            for s in e.sites.iter() {
                f(e, s)?;
            }
        }
    }
    Ok(())
}

/// `kprobe_events` content: one canonical line per site.
pub(crate) fn write_events(w: &mut impl Write) -> core::fmt::Result {
    let mut g = Locked::lock();
    for_each_site(&mut g, |_, s| {
        writeln!(w, "{}", core::str::from_utf8(&s.def).unwrap_or("?"))
    })
}

/// `kprobe_profile` content: event, hits, misses; a line per site, as the
/// kernel's.
pub(crate) fn write_profile(w: &mut impl Write) -> core::fmt::Result {
    let mut g = Locked::lock();
    for_each_site(&mut g, |e, s| {
        writeln!(
            w,
            "  {:<44} {:>15} {:>15}",
            e.name_str(),
            s.hits.sum(),
            s.nmissed(e.is_return)
        )
    })
}

/// Definition order of the sites.
static SEQ: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// A fixed buffer `fmt::Write` that keeps a NUL after the text.
pub(super) struct BufWriter<'a> {
    pub(super) buf: &'a mut [u8],
    pub(super) len: usize,
    pub(super) overflow: bool,
}

impl<'a> BufWriter<'a> {
    pub(super) fn new(buf: &'a mut [u8]) -> Self {
        BufWriter {
            buf,
            len: 0,
            overflow: false,
        }
    }
}

impl BufWriter<'_> {
    /// Appends raw bytes (as many as fit, NUL kept after them).
    pub(super) fn put(&mut self, b: &[u8]) {
        let room = self.buf.len().saturating_sub(self.len + 1);
        let n = b.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
        self.len += n;
        if let Some(z) = self.buf.get_mut(self.len) {
            *z = 0;
        }
        if n < b.len() {
            self.overflow = true;
        }
    }
}

impl Write for BufWriter<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.put(s.as_bytes());
        Ok(())
    }
}

extern "C" {
    /// `offsetof(struct dentry, d_name.name)`, `offsetof(struct file,
    /// f_path.dentry)` (helpers.c).
    static kp_dentry_name_offset: usize;
    static kp_file_dentry_offset: usize;
    /// `THREAD_SIZE / sizeof(long)` (helpers.c).
    static kp_param_max_stack: usize;
}

/// Handles one line, as the kernel's `__trace_kprobe_create()`: its words,
/// then the head, `$arg*`/`$argN` and `%pd`/`%pD` expanded, the arguments
/// ([`ep::parse_full`]).
pub(super) fn run_line(g: &mut Locked, line: &str) -> Result {
    // As the kernel takes a line: without its comment, and as the words
    // argv_split() makes of it, one space apart (what its error_log shows,
    // and counts carets in).
    let text = line.split('#').next().unwrap_or("");
    let mut words = KVec::with_capacity(text.len(), GFP_KERNEL)?;
    let kernel_words = text
        .split(|c: char| u8::try_from(c).is_ok_and(ep::is_space))
        .filter(|w| !w.is_empty());
    for (i, w) in kernel_words.enumerate() {
        if i > 0 {
            words.push(b' ', GFP_KERNEL)?;
        }
        words.extend_from_slice(w.as_bytes(), GFP_KERNEL)?;
    }
    let line = core::str::from_utf8(&words).map_err(|_| EINVAL)?;
    let want = ep::full_buf_len(line.len());
    let mut buf = KVec::with_capacity(want, GFP_KERNEL)?;
    while buf.len() < want {
        let n = (want - buf.len()).min(64);
        buf.extend_from_slice(&[0u8; 64][..n], GFP_KERNEL)?;
    }
    run_one(g, line, &mut buf)
}

/// Parses a line of `kprobe_events` with this kernel's limits.
pub(super) fn parse(line: &str) -> core::result::Result<Command<'_>, ep::ParseError> {
    // SAFETY: a constant of the C glue.
    let max_stack = u32::try_from(unsafe { kp_param_max_stack }).unwrap_or(u32::MAX);
    ep::parse_line_limited(line, REGS, max_stack)
}

/// Handles one line (`buf`: [`ep::full_buf_len`] bytes for its
/// expansions); errors are logged against the line the kernel's log would
/// show (a removal's are not logged, as the kernel's
/// `dyn_event_release()` logs none).
fn run_one(g: &mut Locked, line: &str, buf: &mut [u8]) -> Result {
    // The symbol is checked where the kernel checks it while parsing (its
    // validate_probe_symbol()): a name several functions share is refused
    // (probe by address then), an unknown one is an invalid symbol.
    // Then a return probe at a function entry, as its kprobe_on_func_entry()
    // says: an offset into a function is refused, one past every symbol is
    // left to registration (an invalid address there).
    let mut check = |loc: &ep::Location<'_>, is_return: bool, lpos: usize| {
        let bad = |kind| Err(ep::ParseError::new(kind, lpos));
        let ep::Location::Symbol {
            module,
            name,
            offset,
        } = *loc
        else {
            return Ok(false);
        };
        match count_symbol(module, name) {
            Some(n) if n > 1 => return bad(ErrKind::NonUniqSymbol),
            Some(0) if module.is_none() => return bad(ErrKind::BadProbeAddr),
            _ => {}
        }
        let mut buf = [0u8; 256];
        let lands = symbol_spec(&mut buf, module, name)
            .and_then(crate::symbols::lookup_name)
            .and_then(|a| a.checked_add(usize::try_from(offset).ok()?))
            .is_some_and(|a| crate::symbols::bounds(a).is_some());
        if lands {
            ep::retprobe_at_entry(loc, is_return, lpos)
        } else {
            // Not resolved (a module not loaded yet): no function entry
            // for the kernel either.
            Ok(false)
        }
    };
    // SAFETY: constants of the C glue.
    let (max_stack, dentry) = unsafe {
        (
            u32::try_from(kp_param_max_stack).unwrap_or(u32::MAX),
            (kp_dentry_name_offset, kp_file_dentry_offset),
        )
    };
    let btf = super::btf::vmlinux(g);
    let parsed = ep::parse_full(line, REGS, max_stack, btf.as_ref(), dentry, &mut check, buf);
    let log_line = parsed.log_line;
    let map = parsed.pos_map();
    let parsed_pos = |p| map.log_pos(p);
    let fail = |g: &mut Locked, kind: ErrKind, pos: usize, e: Error| {
        log_error(g, log_line, kind, pos);
        Err(e)
    };
    if let Some(n) = parsed.note {
        log_error(g, log_line, n.kind, n.pos);
    }
    let cmd = match parsed.result {
        Ok(c) => c,
        // No entry for a removal or a line that is no probe definition,
        // as the kernel writes none.
        Err(e) if line.trim_start().starts_with('-') || !e.kind.logged() || e.errno == 12 => {
            return Err(Error::from_errno(-e.errno))
        }
        Err(e) => return fail(g, e.kind, e.pos, Error::from_errno(-e.errno)),
    };
    match cmd {
        Command::Empty => Ok(()),
        Command::Remove {
            group,
            event,
            words,
        } => remove(g, group, event, words),
        Command::Probe(mut d) => {
            // Without a group: this kernel's default (`default_group`),
            // in the event and in its listing line.
            d.group = Some(d.group.unwrap_or(default_group()));
            let mut buf = [0u8; ep::MAX_EVENT_NAME_LEN + 1];
            let event = match d.event {
                Some(e) => e,
                None => d.write_default_name(&mut buf),
            };
            let group = d.group.unwrap_or(default_group());
            let seq = SEQ.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
            let (site, fields) = match build_site(&d, seq) {
                Ok(b) => b,
                Err((k, e)) => return fail(g, k, d.location_pos, e),
            };
            // An event of that name: the line appends a site to it.
            let r = match g
                .events()
                .iter()
                .position(|e| e.name_str() == event && e.group_str() == group)
            {
                Some(i) => append(g, i, &d, site, &fields),
                None => create(g, &d, event, site, fields),
            };
            match r {
                Ok(()) => Ok(()),
                // Past the last word, as the kernel's log puts it there.
                Err((kind, PAST_END, e)) => fail(g, kind, log_line.trim_end().len() + 1, e),
                Err((kind, pos, e)) => fail(g, kind, parsed_pos(pos), e),
            }
        }
    }
}

/// Why a definition was refused: the error_log's message and position
/// ([`PAST_END`]: after the line's last word), and the errno.
pub(super) type Refusal = (ErrKind, usize, Error);

/// A [`Refusal`]'s position after the line's last word.
pub(super) const PAST_END: usize = usize::MAX;

/// The refusal for a probe registration that failed with `e`.
pub(super) fn registration_refused(d: &ProbeDef<'_>, e: Error) -> Refusal {
    // An address in no symbol: the kernel's -ENOENT outside all text, and
    // for a return probe anywhere (its function-entry check); a kprobe on
    // a label in text (arm64's `_text`) fails otherwise.
    let nowhere = requested_address(d).is_some_and(|a| {
        crate::symbols::bounds(a).is_none()
            && (d.is_return
                || !crate::symbols::in_kernel_image_text(a) && !crate::symbols::in_module_text(a))
    });
    let kind = if e == ENOENT || nowhere {
        ErrKind::BadProbeAddr
    } else if e.to_errno() == -(bindings::EILSEQ as i32) {
        ErrKind::BadInsnBndry
    } else {
        ErrKind::FailRegProbe
    };
    (kind, d.location_pos, e)
}

/// An `@SYM` that names nothing, found where the kernel's
/// `traceprobe_update_arg()` finds it, at registration right after the
/// notrace check ([`notrace_refused`] does both): an invalid address,
/// unless the probe's module is not loaded yet (then it is resolved again
/// when the module comes). The site takes the programs resolved here: one
/// built with an unknown `@SYM` as address 0 (its module then pending)
/// whose symbol appeared since (a module loaded) reads the symbol, not 0.
fn symbols_refused(d: &ProbeDef<'_>, site: &mut Site) -> core::result::Result<(), Refusal> {
    if module_pending(d) {
        return Ok(());
    }
    match compile_args(d, false) {
        Ok((args, _)) => {
            // Not registered yet: nothing reads the programs replaced.
            site.args = args;
            Ok(())
        }
        Err((k, e)) => Err((k, d.location_pos, e)),
    }
}

/// The kernel's notrace rule (`within_notrace_func()`), with its message;
/// then its check of the arguments' symbols ([`symbols_refused`]), whose
/// programs `site` (not registered yet) takes.
pub(super) fn notrace_refused(
    d: &ProbeDef<'_>,
    site: &mut Site,
) -> core::result::Result<(), Refusal> {
    if let Some(addr) = requested_address(d).filter(|&a| within_notrace_func(a)) {
        pr_warn!(
            "Could not probe notrace function {}\n",
            crate::symbols::Shown(addr)
        );
        return Err((ErrKind::FailRegProbe, d.location_pos, EINVAL));
    }
    symbols_refused(d, site)?;
    // A misaligned address (arm64): the kernel's arch_prepare_kprobe()
    // refuses it with -EINVAL (the engine's API says -EILSEQ, and an
    // ftrace site's neighbourhood -EBUSY).
    // (An address in no symbol is left to registration, which finds it
    // nowhere, as the kernel's does first.)
    let misaligned =
        |a: usize| !crate::arch::insn_aligned(a) && crate::symbols::bounds(a).is_some();
    if requested_address(d).is_some_and(misaligned) {
        return Err((ErrKind::FailRegProbe, d.location_pos, EINVAL));
    }
    Ok(())
}

/// A new event with its first site.
fn create(
    g: &mut Locked,
    d: &ProbeDef<'_>,
    event: &str,
    mut site: KBox<Site>,
    fields: KVec<Field>,
) -> core::result::Result<(), Refusal> {
    // Room first: once registered, the event must not be dropped.
    if g.events().reserve(1, GFP_KERNEL).is_err() {
        return Err((ErrKind::FailRegProbe, 0, ENOMEM));
    }
    let mut ev = build_event(d, event, fields).map_err(|(k, e)| (k, 0, e))?;
    // The trace event first (not yet visible): the probe may fire as soon
    // as it is armed, and records need the event.
    let owner = (&mut *ev as *mut Event).cast::<c_void>();
    // Without strings every record's arguments take the same bytes.
    let fixed_args = if ev.fields.iter().any(|a| a.ty.is_string()) {
        -1
    } else {
        isize::try_from(ev.fixed).unwrap_or(-1)
    };
    // SAFETY: the strings live in `ev`, which outlives the event.
    ev.tev = unsafe {
        kp_tev_create(
            owner,
            ev.group.as_ptr(),
            ev.name.as_ptr(),
            ev.print_fmt.as_mut_ptr(),
            ev.is_return,
            fixed_args,
        )
    };
    if ev.tev.is_null() {
        return Err((ErrKind::FailRegProbe, 0, ENOMEM));
    }
    let undo = |ev: &mut Event| {
        // SAFETY: never registered with the trace core.
        unsafe { kp_tev_free(ev.tev) };
    };
    if let Err(r) = notrace_refused(d, &mut site) {
        undo(&mut ev);
        return Err(r);
    }
    site.ev = &*ev;
    // Cannot fail: `build_event` reserved room for it.
    let _ = ev.sites.push(site, GFP_KERNEL);
    let Some(first) = ev.sites.first_mut() else {
        undo(&mut ev);
        return Err((ErrKind::FailRegProbe, 0, ENOMEM));
    };
    if let Err(e) = register_or_wait(first, d) {
        undo(&mut ev);
        return Err(registration_refused(d, e));
    }
    // SAFETY: a new event of ours.
    let r = unsafe { kp_tev_register(ev.tev) };
    if r != 0 {
        for s in ev.sites.iter_mut() {
            unregister_probe(s, d.is_return);
        }
        // Not registered with the trace core; the probe is gone
        // (unregister waited for its handlers).
        undo(&mut ev);
        // The caret at the line's start, as the kernel puts it.
        let kind = if r == -(bindings::EEXIST as c_int) {
            ErrKind::EventExist
        } else {
            ErrKind::FailRegProbe
        };
        return Err((kind, 0, Error::from_errno(r)));
    }
    // Cannot fail: room was reserved above.
    let _ = g.events().push(ev, GFP_KERNEL);
    if let Some(s) = g.events().last().and_then(|e| e.sites.first()) {
        super::dynevent::list(s);
    }
    Ok(())
}

/// How many symbols are named `name` (in module `module`, or anywhere);
/// `None` if a name does not fit the kernel's symbol length.
fn count_symbol(module: Option<&str>, name: &str) -> Option<usize> {
    let mut nbuf = [0u8; crate::ksym::KSYM_NAME_LEN + 1];
    let mut mbuf = [0u8; 64];
    let name = symbol_spec(&mut nbuf, None, name)?;
    let module = match module {
        Some(m) => Some(symbol_spec(&mut mbuf, None, m)?),
        None => None,
    };
    Some(crate::symbols::count_named(module, name))
}

/// `kprobe_events` opened with `O_TRUNC`: removes every event, or none
/// (`-EBUSY`) if one is enabled.
pub(crate) fn kp_events_clear() -> c_int {
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

/// Whether the caller may change what is probed: the administrator only
/// (`CAP_SYS_ADMIN`), whatever the files' modes say (root may have handed
/// them to someone). Process context.
pub(crate) fn admin() -> Result {
    // SAFETY: a capability check of the current task.
    if unsafe { kernel::bindings::capable(kernel::bindings::CAP_SYS_ADMIN as _) } {
        Ok(())
    } else {
        Err(EPERM)
    }
}

/// The most `kprobe_events` takes in one write call (the kernel's
/// `WRITE_BUFSIZE`, NUL included).
const WRITE_CHUNK: usize = 4096;

/// Opening `kprobe_events` (helpers.c's file operations): for writing only
/// by the administrator, and with `O_TRUNC` (the shell's `>`) it removes
/// every event first. 0 or `-errno`. Process context.
#[no_mangle]
pub(crate) extern "C" fn kp_events_open_check(write: bool, trunc: bool) -> c_int {
    if !write {
        return 0;
    }
    if let Err(e) = admin() {
        return e.to_errno();
    }
    if trunc {
        kp_events_clear()
    } else {
        0
    }
}

/// A write of `count` bytes at user address `ubuf` to `kprobe_events`: runs
/// each line; stops at the first failing one (earlier lines stay in effect).
/// Takes up to [`WRITE_CHUNK`] - 1 bytes a call, up to the last complete
/// line when there is more (the writer comes back with the rest; one line
/// longer than that is `-E2BIG`). Returns the bytes taken or `-errno`.
/// Process context.
#[no_mangle]
pub(crate) extern "C" fn kp_events_write_user(ubuf: usize, count: usize) -> c_long {
    match write_user(ubuf, count) {
        Ok(n) => n as c_long,
        Err(e) => e.to_errno() as c_long,
    }
}

fn write_user(ubuf: usize, count: usize) -> Result<usize> {
    admin()?;
    let mut buf = KVec::new();
    let n = count.min(WRITE_CHUNK - 1);
    kernel::uaccess::UserSlice::new(ubuf, n)
        .reader()
        .read_all(&mut buf, GFP_KERNEL)?;
    let n = if n < count {
        buf.iter().rposition(|&c| c == b'\n').ok_or(E2BIG)? + 1
    } else {
        n
    };
    let text = core::str::from_utf8(buf.get(..n).ok_or(EINVAL)?).map_err(|_| EINVAL)?;
    for line in text.split('\n') {
        // The locks line by line, as the kernel takes `event_mutex`: not
        // across a whole write's registrations.
        let mut g = Locked::lock();
        run_line(&mut g, line.trim_end_matches('\r'))?;
    }
    Ok(n)
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
        default_group().as_bytes()
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
