// SPDX-License-Identifier: GPL-2.0

//! `error_log`: the last refused commands, with the kernel's messages and
//! the caret under the position, as the kernel's tracing `error_log`.

use super::*;
use crate::event_parse::ErrKind;
use core::fmt::Write;
use core::sync::atomic::{AtomicUsize, Ordering};
use kernel::bindings;

extern "C" {
    fn kp_call_tracing_log_err(
        f: usize,
        loc: *const c_char,
        cmd: *const c_char,
        errs: *mut *const c_char,
        kind: u8,
        pos: u16,
    );
}

/// The error log: the last refused commands, as the kernel's `error_log`.
pub(super) struct LogEntry {
    pub(super) stamp_ns: u64,
    pub(super) kind: ErrKind,
    pub(super) pos: usize,
    pub(super) cmd: [u8; ERROR_CMD_LEN],
    pub(super) cmd_len: usize,
}

pub(super) struct ErrorLog {
    pub(super) entries: [Option<LogEntry>; ERROR_LOG_LEN],
    pub(super) next: usize,
}

pub(super) static ERROR_LOG: LockedBy<ErrorLog, EventsGuard> = LockedBy::new(ErrorLog {
    entries: [const { None }; ERROR_LOG_LEN],
    next: 0,
});

pub(super) fn log_error(g: &mut Locked, line: &str, kind: ErrKind, pos: usize) {
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
    tracing_log(line, kind, pos);
    pr_info!(
        "kprobe_events: {} (at {} in \"{}\")\n",
        kind.message(),
        pos,
        line
    );
}

/// The tracing `error_log` (the global one, `/sys/kernel/tracing/error_log`)
/// as the kernel's kprobe events use it: `tracing_log_err()` (not exported)
/// and the kernel's own message table, `trace_probe_err_text` (the entry
/// keeps a pointer to the table, so it must outlive this module; it is
/// static in `kernel/trace/trace_probe.c`, present wherever any probe
/// events are). Set at load when the standard files are the engine's.
struct TracingLog {
    log_err: AtomicUsize,
    table: AtomicUsize,
    count: AtomicUsize,
    rodata: (AtomicUsize, AtomicUsize),
}

static TRACING_LOG: TracingLog = TracingLog {
    log_err: AtomicUsize::new(0),
    table: AtomicUsize::new(0),
    count: AtomicUsize::new(0),
    rodata: (AtomicUsize::new(0), AtomicUsize::new(0)),
};

/// From now on refused lines are logged in the tracing `error_log` as well,
/// as `trace_kprobe: error: ...` (what the ftrace selftests and users look
/// for). Without the kernel function, its table or the bounds of its
/// read-only data (each found by name), it says so once and only the
/// engine's own `error_log` has them. Load time.
pub(crate) fn use_tracing_error_log() {
    use crate::symbols::{bounds, lookup_function, lookup_name};
    let f = lookup_function(kernel::c_str!("tracing_log_err"));
    let t = lookup_name(kernel::c_str!("trace_probe_err_text"));
    let lo = lookup_name(kernel::c_str!("__start_rodata"));
    let hi = lookup_name(kernel::c_str!("__end_rodata"));
    let (Some(f), Some(t), Some(lo), Some(hi)) = (f, t, lo, hi) else {
        pr_warn!("tracing_log_err or the kernel's probe error table not found: errors in kp/error_log only\n");
        return;
    };
    let Some(b) = bounds(t).filter(|b| b.start == t) else {
        pr_warn!("trace_probe_err_text has no size: errors in kp/error_log only\n");
        return;
    };
    let t = &TRACING_LOG;
    t.table.store(b.start, Ordering::Relaxed);
    t.count
        .store(b.size / core::mem::size_of::<usize>(), Ordering::Relaxed);
    t.rodata.0.store(lo, Ordering::Relaxed);
    t.rodata.1.store(hi, Ordering::Relaxed);
    t.log_err.store(f, Ordering::Release);
}

/// The index of `msg` in the kernel's table. Only entries that point into
/// the kernel's read-only data are read (the symbol's size from kallsyms
/// may run past the array, into whatever follows it).
fn kernel_error_index(msg: &str) -> Option<u8> {
    let t = &TRACING_LOG;
    let (table, count) = (
        t.table.load(Ordering::Relaxed),
        t.count.load(Ordering::Relaxed),
    );
    let (lo, hi) = (
        t.rodata.0.load(Ordering::Relaxed),
        t.rodata.1.load(Ordering::Relaxed),
    );
    (0..count.min(u8::MAX as usize)).find_map(|i| {
        // SAFETY: within the symbol's bounds as kallsyms gives them, in the
        // kernel's data; aligned (a pointer array).
        let p = unsafe { core::ptr::read_volatile((table + i * 8) as *const usize) };
        let end = p.checked_add(msg.len() + 1)?;
        if p < lo || end > hi {
            return None;
        }
        // SAFETY: `msg.len() + 1` bytes of the kernel's read-only data.
        let s = unsafe { core::slice::from_raw_parts(p as *const u8, msg.len() + 1) };
        (s[..msg.len()] == *msg.as_bytes() && s[msg.len()] == 0).then_some(i as u8)
    })
}

/// Logs a refused line in the tracing `error_log` (see
/// [`use_tracing_error_log`]); a message the kernel's table lacks is left
/// to the engine's own log. Process context (it takes a mutex).
fn tracing_log(line: &str, kind: ErrKind, pos: usize) {
    let f = TRACING_LOG.log_err.load(Ordering::Acquire);
    if f == 0 {
        return;
    }
    let Some(idx) = kernel_error_index(kind.message()) else {
        return;
    };
    let mut cmd = KVec::new();
    if cmd.extend_from_slice(line.as_bytes(), GFP_KERNEL).is_err()
        || cmd.push(0, GFP_KERNEL).is_err()
    {
        return;
    }
    let table = TRACING_LOG.table.load(Ordering::Relaxed);
    // SAFETY: `f` is `tracing_log_err` (or its gate); a NUL-terminated
    // static location and command (copied by the callee); the kernel's own
    // table, which the entry keeps, and an index inside it.
    unsafe {
        kp_call_tracing_log_err(
            f,
            kernel::c_str!("trace_kprobe").as_char_ptr(),
            cmd.as_ptr().cast(),
            table as *mut *const c_char,
            idx,
            pos.min(u16::MAX as usize) as u16,
        )
    };
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
            // One past the command: the kernel's "after the last word".
            width = e.pos.min(e.cmd_len + 1) + 1
        )?;
    }
    Ok(())
}

/// Clears the error log (any write to `error_log`).
pub(crate) fn clear_error_log() {
    Locked::lock().log().entries = [const { None }; ERROR_LOG_LEN];
}
