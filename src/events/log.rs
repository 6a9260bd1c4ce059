// SPDX-License-Identifier: GPL-2.0

//! `error_log`: the last refused commands, with the kernel's messages and
//! the caret under the position, as the kernel's tracing `error_log`.

use super::*;
use crate::event_parse::ErrKind;
use core::fmt::Write;
use kernel::bindings;

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
