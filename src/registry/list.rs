// SPDX-License-Identifier: GPL-2.0

//! debugfs `list`: one line per registered probe, as the kernel's
//! `kprobes/list` shows them.

use super::*;
use crate::arch;
use crate::arch::{OptPoint, Steps};
use crate::lock::RegGuard;
use crate::symbols;
use core::sync::atomic::Ordering;

/// The rest of a line of the kernel's `kprobes/list` (its
/// `report_probe()`): `symbol+0xoff  module ` and the flags, run together:
/// `[GONE]`, `[DISABLED]` (not gone), `[OPTIMIZED]`, `[FTRACE]`.
fn write_kernel_rest(
    w: &mut impl core::fmt::Write,
    sym: Option<&symbols::Symbol>,
    addr: usize,
    pp: *mut Point,
    q: &Probe,
) -> core::fmt::Result {
    // `"%s+0x%x  %s "`, a space for vmlinux's module.
    match sym.and_then(|s| s.parts()) {
        Some((name, offset, module)) => {
            write!(w, "{}+{:#x}  {} ", name, offset, module.unwrap_or(" "))?
        }
        None => write!(w, "{:#x} ", addr)?,
    }
    if pp.is_null() {
        return writeln!(w, "[GONE]");
    }
    if q.disabled.load(Ordering::Relaxed) {
        w.write_str("[DISABLED]")?;
    }
    // SAFETY: points are live under the registration lock (held).
    let point = unsafe { &*pp };
    // As the kernel's flag: from when the jump is prepared and queued.
    if point.opt.resume() != 0 {
        w.write_str("[OPTIMIZED]")?;
    }
    if point.ftrace {
        w.write_str("[FTRACE]")?;
    }
    writeln!(w)
}

/// One line per probe for debugfs `list` (`kernel`: the kernel's format,
/// for its `kprobes/list` on a kernel without kprobes).
pub(crate) fn write_list(w: &mut impl core::fmt::Write, kernel: bool) -> core::fmt::Result {
    let g = RegGuard::lock();
    let mut r = Ok(());
    for_each_probe(&g, |q| {
        if r.is_err() {
            return;
        }
        // SAFETY: the user struct is valid while registered.
        let u = unsafe { &*q.user() };
        let pp = q.point.load(Ordering::Relaxed);
        let addr = u.addr as usize;
        let sym = symbols::symbol_at(addr);
        r = (|| {
            // `r` for a kretprobe's entry probe, as the kernel's list shows.
            let kind = if q.kret { 'r' } else { 'k' };
            write!(w, "{:016x}  {}  ", addr, kind)?;
            if kernel {
                return write_kernel_rest(w, sym.as_ref(), addr, pp, q);
            }
            match &sym {
                Some(s) => s.write_short(w)?,
                None => write!(w, "{:#x}", addr)?,
            }
            if pp.is_null() {
                write!(w, "  [GONE]")?;
            } else if q.disabled.load(Ordering::Relaxed) {
                write!(w, "  [DISABLED]")?;
            } else {
                // SAFETY: points are live under the lock.
                let point = unsafe { &*pp };
                if point.ftrace {
                    write!(w, "  [FTRACE]")?;
                } else if point.opt.jumped() {
                    write!(w, "  [OPTIMIZED]")?;
                } else if arch::Arch::boostable(&point.insn) && !point.any_post_handler() {
                    write!(w, "  [BOOSTED]")?;
                }
            }
            writeln!(w, "  missed={}", q.missed())
        })();
    });
    r
}
