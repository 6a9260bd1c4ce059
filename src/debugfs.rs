// SPDX-License-Identifier: GPL-2.0

//! Introspection under `/sys/kernel/debug/kp/` (the kernel's own kprobes own
//! `/sys/kernel/debug/kprobes/`):
//!
//! - `list`: one line per probe, like the kernel's `kprobes/list`, plus the
//!   miss counter: `address  k  symbol+offset [module]  [FLAGS]  missed=M`;
//! - `stats`: probes, probed addresses, slots, return instances, events,
//!   second traps taken (`stats.rs`);
//! - `enabled`: reads 0/1; write 0 to disarm every probe, 1 to re-arm;
//! - `blacklist`: the refused ranges with the reason;
//! - `ftrace`: 1 (default) lets new entry probes use ftrace call sites
//!   (`ftrace.rs`), 0 keeps them on breakpoints;
//! - `optimize`: 1 (default) lets settled probes be jump-optimized
//!   (`optimize.rs`, x86_64), 0 puts every probe back on its breakpoint;
//! - `kprobe_events`, `kprobe_profile`, `error_log`: probe events defined by
//!   text (see `events/`).
//!
//! The probe-event files (`kprobe_events`, `kprobe_profile`, `error_log`)
//! are also in tracefs, `/sys/kernel/tracing/kp/`, for machines without
//! debugfs; that needs the kernel's unexported `tracefs_create_dir()`,
//! `tracefs_create_file()` and `tracefs_remove()`, resolved by name at load
//! (missing: debugfs only, said once in the log).
//!
//! On a kernel without kprobes (`CONFIG_KPROBES=n`) the engine also makes
//! the kernel's own `/sys/kernel/debug/kprobes/` (`list`, `enabled`,
//! `blacklist`, in the kernel's formats: perf reads `blacklist`, the ftrace
//! selftests `list`) and the `debug.kprobes-optimization` sysctl
//! (`/proc/sys/debug/kprobes-optimization`, the `optimize` switch).
//!
//! The file plumbing (seq_file, fops) is C glue in `helpers.c`; the content
//! is produced here.

use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::ffi::{c_char, c_int, c_long, c_ulong, c_void};
use kernel::prelude::*;
use kernel::{c_str, str::CStr};

const LIST: c_ulong = 1;
const ENABLED: c_ulong = 2;
const BLACKLIST: c_ulong = 3;
const EVENTS: c_ulong = 4;
const PROFILE: c_ulong = 5;
const ERROR_LOG: c_ulong = 6;
const FTRACE: c_ulong = 7;
const OPTIMIZE: c_ulong = 8;
const STATS: c_ulong = 9;
const KERNEL_LIST: c_ulong = 10;
const KERNEL_BLACKLIST: c_ulong = 11;

extern "C" {
    fn kp_helper_debugfs_init(dir: *const c_char) -> kernel::ffi::c_int;
    fn kp_helper_debugfs_file(name: *const c_char, mode: u16, which: c_ulong);
    fn kp_helper_debugfs_exit();
    fn kp_helper_debugfs_std_file(name: *const c_char, mode: u16, which: c_ulong) -> c_int;
    fn kp_helper_sysctl_init() -> c_int;
    fn kp_helper_debugfs_events_file(name: *const c_char, which: c_ulong);
    fn kp_helper_seq_write(m: *mut c_void, data: *const c_char, len: usize);
    fn kp_helper_tracefs_init(
        create_dir: usize,
        create_file: usize,
        remove: usize,
        dir: *const c_char,
    ) -> kernel::ffi::c_int;
    fn kp_helper_tracefs_readme(text: *const c_char, len: usize) -> kernel::ffi::c_int;
    fn kp_helper_tracefs_std_file(
        i: kernel::ffi::c_uint,
        name: *const c_char,
        mode: u16,
        which: c_ulong,
        events: bool,
    ) -> kernel::ffi::c_int;
    fn kp_helper_tracefs_file(
        name: *const c_char,
        mode: u16,
        which: c_ulong,
        events: bool,
    ) -> kernel::ffi::c_int;
    fn kp_helper_tracefs_exit();
}

/// A `core::fmt::Write` into a seq_file.
struct Seq(*mut c_void);

impl core::fmt::Write for Seq {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        // SAFETY: `self.0` is the seq_file of the running show callback.
        unsafe { kp_helper_seq_write(self.0, s.as_ptr(), s.len()) };
        Ok(())
    }
}

/// Creates the directories and files.
pub(crate) fn init() -> Result {
    tracefs_init();
    // SAFETY: a NUL-terminated name.
    let r = unsafe { kp_helper_debugfs_init(c_str!("kp").as_char_ptr()) };
    if r != 0 {
        // Without debugfs the engine still works; say so and go on.
        pr_warn!("debugfs unavailable ({}); no introspection files\n", r);
        return Ok(());
    }
    let files: [(&CStr, u16, c_ulong); 8] = [
        // Root only, like the kernel's tracefs control files: what is
        // probed and where is for the administrator.
        (c_str!("ftrace"), 0o600, FTRACE),
        (c_str!("optimize"), 0o600, OPTIMIZE),
        (c_str!("list"), 0o400, LIST),
        (c_str!("stats"), 0o400, STATS),
        (c_str!("enabled"), 0o600, ENABLED),
        (c_str!("blacklist"), 0o400, BLACKLIST),
        (c_str!("kprobe_profile"), 0o400, PROFILE),
        (c_str!("error_log"), 0o600, ERROR_LOG),
    ];
    for (name, mode, which) in files {
        // SAFETY: NUL-terminated static names.
        unsafe { kp_helper_debugfs_file(name.as_char_ptr(), mode, which) };
    }
    // SAFETY: a NUL-terminated static name.
    unsafe { kp_helper_debugfs_events_file(c_str!("kprobe_events").as_char_ptr(), EVENTS) };
    if !cfg!(CONFIG_KPROBES) {
        kernel_files();
    }
    Ok(())
}

/// The kernel's `kprobes/` files and `debug.kprobes-optimization` sysctl,
/// with the kernel's modes, where the kernel has none (no kprobes).
fn kernel_files() {
    let files: [(&CStr, u16, c_ulong); 3] = [
        (c_str!("list"), 0o400, KERNEL_LIST),
        (c_str!("enabled"), 0o600, ENABLED),
        (c_str!("blacklist"), 0o400, KERNEL_BLACKLIST),
    ];
    for (name, mode, which) in files {
        // SAFETY: NUL-terminated static names.
        let r = unsafe { kp_helper_debugfs_std_file(name.as_char_ptr(), mode, which) };
        if r != 0 {
            pr_warn!("debugfs kprobes/{}: {} (not made)\n", name, r);
        }
    }
    // SAFETY: registers a static table once, at load.
    let r = unsafe { kp_helper_sysctl_init() };
    if r != 0 {
        pr_warn!("sysctl debug.kprobes-optimization: {} (not made)\n", r);
    }
}

/// `debug.kprobes-optimization` read (C glue).
#[no_mangle]
pub(crate) extern "C" fn kp_std_optimize_get() -> bool {
    crate::optimize::enabled()
}

/// `debug.kprobes-optimization` written (C glue): 0 or `-errno`.
#[no_mangle]
pub(crate) extern "C" fn kp_std_optimize_set(on: bool) -> c_int {
    match crate::optimize::set_enabled(on) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// `/sys/kernel/tracing/kp/`: the probe-event files, as in debugfs.
fn tracefs_init() {
    let f = |n| crate::symbols::lookup_function(n);
    let (Some(dir), Some(file), Some(remove)) = (
        f(c_str!("tracefs_create_dir")),
        f(c_str!("tracefs_create_file")),
        f(c_str!("tracefs_remove")),
    ) else {
        pr_warn!("tracefs functions not found: probe-event files in debugfs only\n");
        return;
    };
    // SAFETY: the three are the kernel's tracefs functions (or their gates),
    // resolved by name; a NUL-terminated name.
    let r = unsafe { kp_helper_tracefs_init(dir, file, remove, c_str!("kp").as_char_ptr()) };
    if r != 0 {
        pr_warn!(
            "tracefs directory kp: {}; probe-event files in debugfs only\n",
            r
        );
        return;
    }
    let files: [(&CStr, u16, c_ulong, bool); 3] = [
        (c_str!("kprobe_events"), 0o600, EVENTS, true),
        (c_str!("kprobe_profile"), 0o400, PROFILE, false),
        (c_str!("error_log"), 0o600, ERROR_LOG, false),
    ];
    for (name, mode, which, events) in files {
        // SAFETY: NUL-terminated static names; the directory exists.
        let r = unsafe { kp_helper_tracefs_file(name.as_char_ptr(), mode, which, events) };
        if r != 0 {
            pr_warn!("tracefs file kp/{}: {}\n", name, r);
        }
    }
    if !cfg!(CONFIG_KPROBE_EVENTS) {
        standard_files();
    }
}

/// On a kernel without kprobe events of its own (`CONFIG_KPROBE_EVENTS=n`:
/// no `kprobe_events` in tracefs), the standard files are the engine's:
/// `/sys/kernel/tracing/kprobe_events` and `kprobe_profile`, with the
/// kernel's modes (`TRACE_MODE_WRITE`, `TRACE_MODE_READ`), and refused
/// lines go to the tracing `error_log` too (`events::log`), so that perf,
/// libbpf, bcc, trace-cmd and the ftrace selftests find them where they
/// look. On a kernel with its own, the engine stays in `kp/`.
fn standard_files() {
    let files: [(&CStr, u16, c_ulong, bool); 2] = [
        (c_str!("kprobe_events"), 0o640, EVENTS, true),
        (c_str!("kprobe_profile"), 0o440, PROFILE, false),
    ];
    for (i, (name, mode, which, events)) in (0..).zip(files) {
        // SAFETY: NUL-terminated static names; after kp_helper_tracefs_init.
        let r = unsafe { kp_helper_tracefs_std_file(i, name.as_char_ptr(), mode, which, events) };
        if r != 0 {
            pr_warn!("tracefs file {}: {} (not made)\n", name, r);
        } else if events {
            crate::events::use_tracing_error_log();
            pr_info!(
                "{} at the top of tracefs (kernel without kprobe events)\n",
                name
            );
            readme();
        }
    }
}

/// The README text the engine serves (see `kp_helper_tracefs_readme`):
/// owned here until [`exit`].
static README: AtomicPtr<KVec<u8>> = AtomicPtr::new(core::ptr::null_mut());

/// What a kernel with kprobe events says of them in tracefs' README
/// (`kernel/trace/trace.c`, `readme_msg`, 6.12), in two places: the file,
/// before `uprobe_events`' entry, and the places, before the uprobe one.
/// Where an anchor is missing (no uprobe events either), at the end.
const README_FILE: (&[u8], &[u8]) = (
    b"  uprobe_events\t\t-",
    b"  kprobe_events\t\t- Create/append/remove/show the kernel dynamic events\n\
      \t\t\t  Write into this file to define/undefine new trace events.\n",
);
const README_PLACE: (&[u8], &[u8]) = (
    b"   place (uprobe):",
    b"\t    place: [<module>:]<symbol>[+<offset>]|<memaddr>\n\
      place (kretprobe): [<module>:]<symbol>[+<offset>]%return|<memaddr>\n",
);

/// Serves the kernel's README (`readme_msg`, found by name) with the
/// kprobe_events lines added. Load time; on any failure README stays the
/// kernel's, said once.
fn readme() {
    let Some(msg) = crate::symbols::lookup_name(c_str!("readme_msg")) else {
        pr_warn!("readme_msg not found: tracefs README left as it is\n");
        return;
    };
    // SAFETY: the kernel's static NUL-terminated README text.
    let msg = unsafe { CStr::from_char_ptr(msg as *const c_char) }.as_bytes();
    let find = |a: &[u8]| msg.windows(a.len()).position(|w| w == a);
    let mut cuts = [
        (find(README_FILE.0).unwrap_or(msg.len()), README_FILE.1),
        (find(README_PLACE.0).unwrap_or(msg.len()), README_PLACE.1),
    ];
    cuts.sort_unstable_by_key(|c| c.0);
    let compose = || -> Result<KVec<u8>> {
        let mut v = KVec::with_capacity(msg.len() + 256, GFP_KERNEL)?;
        let mut from = 0;
        for (at, text) in cuts {
            v.extend_from_slice(&msg[from..at], GFP_KERNEL)?;
            v.extend_from_slice(text, GFP_KERNEL)?;
            from = at;
        }
        v.extend_from_slice(&msg[from..], GFP_KERNEL)?;
        Ok(v)
    };
    let Ok(b) = compose().and_then(|v| Ok(KBox::new(v, GFP_KERNEL)?)) else {
        pr_warn!("no memory for README: left as it is\n");
        return;
    };
    let (p, len) = (b.as_ptr(), b.len());
    README.store(KBox::into_raw(b), Ordering::Release);
    // SAFETY: the text stays until `exit` (README holds it), which puts
    // the kernel's file operations back first.
    let r = unsafe { kp_helper_tracefs_readme(p.cast(), len) };
    if r != 0 {
        pr_warn!("tracefs README: {}; left as it is\n", r);
    }
}

/// Removes the files; afterwards no callback runs.
pub(crate) fn exit() {
    // SAFETY: removes what `tracefs_init` made (nothing if it made
    // nothing); open files hold this module (their fops' owner).
    unsafe { kp_helper_tracefs_exit() };
    let t = README.swap(core::ptr::null_mut(), Ordering::AcqRel);
    if !t.is_null() {
        // SAFETY: made by `KBox::into_raw` in `readme`; README's file
        // operations are the kernel's again and no open file reads it
        // (an open one holds this module).
        drop(unsafe { KBox::from_raw(t) });
    }
    // SAFETY: debugfs_remove() of our directory (or of an error pointer,
    // which it ignores) waits for running file operations.
    unsafe { kp_helper_debugfs_exit() };
}

/// seq_file show callback.
///
/// # Safety
///
/// `m` is the seq_file being shown.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_debugfs_show(
    m: *mut c_void,
    which: c_ulong,
) -> kernel::ffi::c_int {
    use core::fmt::Write;
    let mut w = Seq(m);
    let _ = match which {
        LIST => crate::registry::write_list(&mut w, false),
        KERNEL_LIST => crate::registry::write_list(&mut w, true),
        KERNEL_BLACKLIST => write_blacklist_kernel(&mut w),
        ENABLED => writeln!(w, "{}", u8::from(crate::registry::global_enabled())),
        FTRACE => writeln!(w, "{}", u8::from(crate::ftrace::enabled())),
        OPTIMIZE => writeln!(w, "{}", u8::from(crate::optimize::enabled())),
        BLACKLIST => write_blacklist(&mut w),
        STATS => crate::stats::write(&mut w),
        EVENTS => crate::events::write_events(&mut w),
        PROFILE => crate::events::write_profile(&mut w),
        ERROR_LOG => crate::events::write_error_log(&mut w),
        _ => Ok(()),
    };
    0
}

/// A write of `count` bytes at user address `ubuf` to control file `which`
/// (helpers.c's file operations): one short word, the rest ignored.
/// Returns `count` or `-errno`. Process context.
#[no_mangle]
pub(crate) extern "C" fn kp_debugfs_write_user(
    which: c_ulong,
    ubuf: usize,
    count: usize,
) -> c_long {
    let mut buf = [0u8; 63];
    let n = count.min(buf.len());
    let r = crate::events::admin()
        .and_then(|()| {
            let to = buf.get_mut(..n).ok_or(EINVAL)?;
            kernel::uaccess::UserSlice::new(ubuf, n)
                .reader()
                .read_slice(to)
        })
        .and_then(|()| write_word(which, buf.get(..n).unwrap_or(&[])));
    match r {
        Ok(()) => count as c_long,
        Err(e) => e.to_errno() as c_long,
    }
}

/// What a write of `bytes` to control file `which` does.
fn write_word(which: c_ulong, bytes: &[u8]) -> Result {
    let word = match bytes.iter().position(|c| !c.is_ascii_whitespace()) {
        Some(s) => {
            &bytes[s..bytes
                .iter()
                .rposition(|c| !c.is_ascii_whitespace())
                .unwrap_or(s)
                + 1]
        }
        None => &[],
    };
    match (which, word) {
        (ENABLED, b"0") => crate::registry::set_global_enabled(false),
        (ENABLED, b"1") => crate::registry::set_global_enabled(true),
        (FTRACE, b"0" | b"1") => {
            crate::ftrace::set_enabled(word == b"1");
            Ok(())
        }
        (OPTIMIZE, b"0" | b"1") => crate::optimize::set_enabled(word == b"1"),
        (OPTIMIZE, _) => {
            pr_err!("debugfs optimize: write 0 or 1\n");
            Err(EINVAL)
        }
        (FTRACE, _) => {
            pr_err!("debugfs ftrace: write 0 or 1\n");
            Err(EINVAL)
        }
        (ERROR_LOG, _) => {
            crate::events::clear_error_log();
            Ok(())
        }
        (ENABLED, _) => {
            pr_err!("debugfs enabled: write 0 or 1\n");
            Err(EINVAL)
        }
        _ => Err(EINVAL),
    }
}

/// The ranges as the kernel's `kprobes/blacklist` shows its own (`0x%px-0x%px\t%ps`:
/// start, end, the symbol at the start; what perf reads to skip them).
fn write_blacklist_kernel(w: &mut impl core::fmt::Write) -> core::fmt::Result {
    let all = crate::blacklist::ranges();
    for (i, r) in all.iter().enumerate() {
        // Once per range, as the kernel lists each (here a range may be
        // refused for several reasons).
        let seen = all.get(..i).unwrap_or(&[]);
        if seen.iter().any(|o| o.start == r.start && o.end == r.end) {
            continue;
        }
        write!(w, "0x{:016x}-0x{:016x}\t", r.start, r.end)?;
        match crate::symbols::symbol_at(r.start) {
            Some(s) => w.write_str(core::str::from_utf8(s.name()).unwrap_or("?"))?,
            None => write!(w, "0x{:016x}", r.start)?,
        }
        writeln!(w)?;
    }
    Ok(())
}

/// The debugfs `blacklist` file: `0xstart-0xend\tsymbol\treason`.
fn write_blacklist(w: &mut impl core::fmt::Write) -> core::fmt::Result {
    for r in crate::blacklist::ranges() {
        write!(w, "{:#018x}-{:#018x}\t", r.start, r.end)?;
        match crate::symbols::symbol_at(r.start) {
            Some(s) => s.write_short(w)?,
            None => w.write_str("?")?,
        }
        writeln!(w, "\t{}", r.reason.to_str().unwrap_or("?"))?;
    }
    Ok(())
}
