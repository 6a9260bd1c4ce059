// SPDX-License-Identifier: GPL-2.0

//! Probes on ftrace call sites: a function's entry is served by the
//! engine's `ftrace_ops` (`src/ftrace.c`) instead of a breakpoint, as the
//! kernel's kprobes do there (KPROBES_ON_FTRACE). No trap and no
//! single-step: the callback gets a full `pt_regs` (x86_64:
//! `FTRACE_OPS_FL_SAVE_REGS`) and runs the handlers (`hit::on_ftrace`) with
//! the kernel's kprobes-on-ftrace semantics: the pre handler sees the
//! instruction pointer one past the site (as after an int3), a non-zero
//! return with a new instruction pointer redirects execution, the post
//! handler sees it past the site's 5-byte call.
//!
//! arm64 of 6.12 has no `DYNAMIC_FTRACE_WITH_REGS`: entries there keep the
//! breakpoint path past the patchable entry. `/sys/kernel/debug/kp/ftrace`
//! (write 0/1) turns the path off for new probes (benchmarks, debugging).

use core::sync::atomic::{AtomicBool, Ordering};
use kernel::ffi::{c_int, c_ulong};
use kernel::prelude::*;

extern "C" {
    fn kp_ftrace_arm(ip: c_ulong) -> c_int;
    fn kp_ftrace_disarm(ip: c_ulong) -> c_int;
    fn kp_ftrace_available() -> bool;
}

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Whether new entry probes take the ftrace path.
pub(crate) fn entry_enabled() -> bool {
    // SAFETY: plain query.
    ENABLED.load(Ordering::Relaxed) && unsafe { kp_ftrace_available() }
}

/// The `ftrace` debugfs switch.
pub(crate) fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// The switch's value.
pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Adds `addr` (an ftrace call site) to the engine's ftrace filter.
/// Registration lock held.
pub(crate) fn arm(addr: usize) -> Result {
    // SAFETY: process context, registration lock held (the C side counts).
    let r = unsafe { kp_ftrace_arm(addr) };
    if r != 0 {
        pr_err!("ftrace: cannot trace {:#x}: {}\n", addr, r);
        return Err(Error::from_errno(r));
    }
    Ok(())
}

/// Removes `addr` from the filter. Registration lock held.
pub(crate) fn disarm(addr: usize) -> Result {
    // SAFETY: as in `arm`.
    let r = unsafe { kp_ftrace_disarm(addr) };
    if r != 0 {
        return Err(Error::from_errno(r));
    }
    Ok(())
}
