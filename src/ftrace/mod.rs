// SPDX-License-Identifier: GPL-2.0

//! Probes on ftrace call sites: a function's entry is served through
//! ftrace instead of a breakpoint, as the kernel's kprobes do there
//! (KPROBES_ON_FTRACE). No trap and no single-step. A site is armed as a
//! direct call to the engine's trampoline (x86_64, [`direct`]: one direct
//! `ftrace_ops` per site, parked for a while after its last probe goes, as
//! taking one down waits for tasks-RCU), or through the engine's shared
//! `ftrace_ops` (`src/ftrace.c`) whose callback gets a full `pt_regs`
//! (`FTRACE_OPS_FL_SAVE_REGS`) when a direct call cannot be had. Either way the handlers run in `hit::on_ftrace` with the
//! kernel's kprobes-on-ftrace semantics: the pre handler sees the
//! instruction pointer one past the site (as after an int3), a non-zero
//! return with a new instruction pointer redirects execution, the post
//! handler sees it past the site's 5-byte call.
//!
//! arm64 of 6.12 has no `DYNAMIC_FTRACE_WITH_REGS`, only `_WITH_ARGS`: the
//! shared `ftrace_ops` serves entries there (no direct calls), and the
//! handlers get a `pt_regs` with the registers ftrace saved (x0-x8, fp, lr,
//! sp, pc; the rest 0); a probe that needs every register
//! (`KP_FLAG_FULL_REGS`) keeps the breakpoint path past the patchable
//! entry. `/sys/kernel/debug/kp/ftrace` (write 0/1) turns the path off for
//! new probes (benchmarks, debugging).

mod direct;

use crate::arch::Entries;
use crate::lock::RegGuard;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::ffi::{c_int, c_ulong, c_void};
use kernel::prelude::*;

extern "C" {
    fn kp_ftrace_shared_arm(ip: c_ulong) -> c_int;
    fn kp_ftrace_shared_disarm(ip: c_ulong) -> c_int;
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

/// Makes the ftrace call site `addr` call the engine: directly (true) or
/// through the shared `ftrace_ops` (false). Registration lock held.
pub(crate) fn arm(g: &RegGuard, addr: usize) -> Result<bool> {
    // ftrace checks the site's bytes before it patches them and, finding
    // someone else's breakpoint there (kgdb, a text_poke_bp() that is not
    // ftrace's), warns and shuts itself down for good: refuse first.
    if crate::arch::Arch::breakpoint_at(addr) {
        pr_err!(
            "ftrace site {:#x}: someone else's breakpoint is there\n",
            addr
        );
        return Err(EBUSY);
    }
    let r = match direct::arm(g, addr) {
        Ok(true) => return Ok(true),
        // SAFETY: process context, registration lock held (the C side
        // counts).
        Ok(false) => unsafe { kp_ftrace_shared_arm(addr as c_ulong) },
        Err(e) => e.to_errno(),
    };
    if r != 0 {
        pr_err!("ftrace: cannot trace {:#x}: {}\n", addr, r);
        return Err(Error::from_errno(r));
    }
    Ok(false)
}

/// Removes `addr` from the filter. Registration lock held.
pub(crate) fn disarm(g: &RegGuard, addr: usize) -> Result {
    if direct::disarm(g, addr) {
        return Ok(());
    }
    // SAFETY: as in `arm`.
    let r = unsafe { kp_ftrace_shared_disarm(addr as c_ulong) };
    if r != 0 {
        return Err(Error::from_errno(r));
    }
    Ok(())
}

/// A module is going: its parked direct sites are taken down now (ftrace
/// drops its records after the notifiers; a site left registered would
/// refer to text that is gone). Registration lock held, after its points
/// were disarmed.
pub(crate) fn module_going(g: &RegGuard, module: *mut c_void) {
    direct::release(g, module);
}

/// Engine exit, after every probe is gone: stops the reaper and takes the
/// parked direct sites down. Registration lock not held.
pub(crate) fn exit() {
    direct::stop_reaper();
    direct::release(&RegGuard::lock(), core::ptr::null_mut());
}

/// `kp_ftrace_release()` (`include/kp_kprobes.h`): takes every parked
/// direct site down now (each waits for tasks-RCU) instead of about two
/// seconds after its last probe went. Returns how many went. Process
/// context.
#[no_mangle]
pub extern "C" fn kp_ftrace_release() -> c_int {
    direct::release(&RegGuard::lock(), core::ptr::null_mut()) as c_int
}

/// Direct sites, and how many of them are parked.
pub(crate) fn direct_sites(g: &RegGuard) -> (u32, u32) {
    direct::sites(g)
}
