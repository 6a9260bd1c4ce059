// SPDX-License-Identifier: GPL-2.0

//! The engine's API for client Rust modules.
//!
//! A client module includes this one file and links against the functions
//! `kprobes.ko` exports (C header: `include/kp_kprobes.h`, Rust mirror of
//! the ABI: `src/abi.rs`):
//!
//! ```ignore
//! #[path = "/path/to/kprobes-rs/src/api.rs"]
//! mod kp;
//! ```
//!
//! Safe types, no `unsafe` in the client:
//!
//! - [`Kprobe`]: a probe on an instruction; handlers are the methods of a
//!   [`KprobeHandler`] the client implements on its own state.
//!   [`Kprobe::register`] returns a pinned box; dropping it unregisters.
//! - [`EntryProbe`]: the safe replacement of jprobes: a probe at a function's
//!   entry whose handler ([`EntryHandler`]) receives the function's arguments
//!   typed ([`Args`]: tuples of integers, `bool` and raw pointers, register and
//!   stack arguments per the calling convention). Nothing is mirrored or
//!   copied back: the handler sees the values, the function runs unchanged.
//! - [`Kretprobe`]: a return probe with a per-call data type
//!   ([`KretprobeHandler::Data`]) filled at the entry and handed back at the
//!   return.
//! - [`Regs`]: the probed context's registers with named accessors per
//!   architecture, [`Regs::arg`], [`Regs::return_value`] and setters.
//! - [`read_kernel`], [`read_kernel_str`], [`read_user_str`]: memory reads
//!   that never fault, for handlers following pointers.
//! - [`lookup_symbol`], [`Insn`], [`instructions`]: find a function and walk
//!   its instructions (to place an offset probe, for example).
//!
//! The raw C ABI ([`KpKprobe`], [`kp_register_kprobe`], ...) stays available
//! for clients that want it.

// A client uses only part of the API.
#![allow(dead_code, unreachable_pub)]

#[path = "abi.rs"]
pub mod abi;

pub use abi::*;

/// Register accessors for this architecture.
#[path = "../arch/regs.rs"]
pub mod regs;

pub use regs::{Location, Regs};

use core::cell::UnsafeCell;

use core::ffi::CStr;

use core::marker::{PhantomData, PhantomPinned};

use core::pin::Pin;

use core::sync::atomic::{AtomicUsize, Ordering};

use kernel::alloc::{flags::GFP_KERNEL, KBox};

use kernel::bindings::{self, pt_regs};

use kernel::error::{to_result, Result};

use kernel::ffi::{c_int, c_ulong};

// The API's parts (paths relative to this file: clients include it alone).
#[path = "api/entry.rs"]
mod entry;
#[path = "api/kretprobe.rs"]
mod kretprobe;
#[path = "api/memory.rs"]
mod memory;
#[path = "api/probe.rs"]
mod probe;
#[path = "api/query.rs"]
mod query;

// (A client uses part of the API: some of these go unused.)
#[allow(unused_imports)]
pub use entry::*;
#[allow(unused_imports)]
pub use kretprobe::*;
#[allow(unused_imports)]
pub use memory::*;
#[allow(unused_imports)]
pub use probe::*;
#[allow(unused_imports)]
pub use query::*;

extern "C" {
    /// Registers `p`; returns 0 or a negative errno.
    pub fn kp_register_kprobe(p: *mut KpKprobe) -> c_int;
    /// Unregisters `p`; on return no CPU runs its handlers any more.
    pub fn kp_unregister_kprobe(p: *mut KpKprobe);
    /// Registers `num` probes, all or nothing.
    pub fn kp_register_kprobes(kps: *mut *mut KpKprobe, num: c_int) -> c_int;
    /// Unregisters `num` probes.
    pub fn kp_unregister_kprobes(kps: *mut *mut KpKprobe, num: c_int);
    /// Stops a probe's handlers without unregistering it.
    pub fn kp_disable_kprobe(p: *mut KpKprobe) -> c_int;
    /// Registers a return probe.
    pub fn kp_register_kretprobe(rp: *mut KpKretprobe) -> c_int;
    /// Unregisters a return probe.
    pub fn kp_unregister_kretprobe(rp: *mut KpKretprobe);
    /// Registers `num` return probes, all or nothing.
    pub fn kp_register_kretprobes(rps: *mut *mut KpKretprobe, num: c_int) -> c_int;
    /// Unregisters `num` return probes (one wait for the batch).
    pub fn kp_unregister_kretprobes(rps: *mut *mut KpKretprobe, num: c_int);
    /// Why `addr` cannot be probed, or null.
    pub fn kp_blacklisted(addr: usize) -> *const core::ffi::c_char;
    /// `kp_blacklist_range()`: the `idx`-th refused range and its reason,
    /// NULL past the last.
    pub fn kp_blacklist_range(
        idx: usize,
        start: *mut usize,
        end: *mut usize,
    ) -> *const core::ffi::c_char;
    /// `kp_resolved_call()`: the `idx`-th kernel function the engine
    /// resolved by name and calls (NULL past the last), and in `*call` the
    /// address it calls (the function, or a gate that jumps there).
    pub fn kp_resolved_call(idx: usize, call: *mut usize) -> *const core::ffi::c_char;
    /// Re-enables a disabled probe.
    pub fn kp_enable_kprobe(p: *mut KpKprobe) -> c_int;
    /// The address of a symbol (0 if unknown), and its size.
    pub fn kp_lookup_symbol(name: *const kernel::ffi::c_char, size: *mut c_ulong) -> c_ulong;
    /// Describes the instruction at `addr`.
    pub fn kp_decode_insn(addr: c_ulong, out: *mut KpInsn) -> c_int;
    /// Runs one `kprobe_events` line.
    pub fn kp_event_command(line: *const kernel::ffi::c_char) -> c_int;
    /// The trace event id of a probe event.
    pub fn kp_event_id(
        group: *const kernel::ffi::c_char,
        event: *const kernel::ffi::c_char,
    ) -> c_int;
    /// A snapshot of the engine's state.
    pub fn kp_get_stats(out: *mut KpStats) -> c_int;
    /// Takes down the parked direct ftrace sites.
    pub fn kp_ftrace_release() -> c_int;
    /// Bounds the jump-optimization detours handed out; the previous bound.
    pub fn kp_opt_detour_limit(n: c_ulong) -> core::ffi::c_long;
}

/// A snapshot of the engine's state: probes, probed addresses, slots,
/// return instances, events, second traps taken. Process context.
pub fn stats() -> KpStats {
    let mut s = KpStats::default();
    // SAFETY: `s` is a valid `struct kp_stats`; the call cannot fail with it.
    unsafe { kp_get_stats(&mut s) };
    s
}

/// Takes down now every parked direct ftrace site (x86_64: a function entry
/// whose last probe went keeps calling the engine for about two seconds;
/// meanwhile its ftrace site is not restored and a BPF trampoline cannot
/// attach there). Returns how many were released. Process context; sleeps.
pub fn ftrace_release() -> usize {
    // SAFETY: process context.
    unsafe { kp_ftrace_release() as usize }
}

/// Hands out at most `n` jump-optimization detours from now on (those in
/// use stay; probes that find none keep their breakpoint until one is
/// free) and returns the previous bound, or `EOPNOTSUPP` where the
/// detours are out-of-line slots (arm64). x86_64 has 1024. Process
/// context.
pub fn opt_detour_limit(n: usize) -> Result<usize> {
    // SAFETY: process context.
    let r = unsafe { kp_opt_detour_limit(n as c_ulong) };
    usize::try_from(r).map_err(|_| kernel::error::Error::from_errno(r as i32))
}

/// Runs one `kprobe_events` line (`p:...`, `r:...`, `-:...`), as writing it
/// to `/sys/kernel/debug/kp/kprobe_events` with `>>` would. The reason for a
/// refusal is in `error_log`.
pub fn event_command(line: &CStr) -> Result {
    // SAFETY: NUL-terminated.
    to_result(unsafe { kp_event_command(line.as_ptr().cast()) })
}

/// The trace event id of a probe event (`None` group: the default group),
/// for `PERF_TYPE_TRACEPOINT` counters.
pub fn event_id(group: Option<&CStr>, event: &CStr) -> Result<u32> {
    let g = group.map_or(core::ptr::null(), |g| g.as_ptr().cast());
    // SAFETY: NUL-terminated or null.
    let r = unsafe { kp_event_id(g, event.as_ptr().cast()) };
    to_result(r.min(0))?;
    Ok(r as u32)
}

/// Declares a safe accessor for a string module parameter that the client's C
/// glue defines with `KP_STRING_PARAM(name, size, ...)` (`examples/params.h`;
/// the `module!` macro of this kernel's Rust cannot declare parameters):
///
/// ```ignore
/// kp::string_param!(unsafe fn symbol = kp_param_symbol[512]);
/// ```
///
/// `unsafe` acknowledges the contract: the C buffer is at least that size.
#[allow(unused_macros)]
macro_rules! string_param {
    (unsafe $vis:vis fn $fn:ident = $sym:ident[$n:literal]) => {
        $vis fn $fn() -> &'static core::ffi::CStr {
            extern "C" {
                static $sym: [u8; $n];
            }
            // SAFETY: the C side defines a NUL-terminated buffer of this size,
            // read-only (0444) and set before the module's init runs.
            let b = unsafe { &*core::ptr::addr_of!($sym) };
            core::ffi::CStr::from_bytes_until_nul(b).unwrap_or(c"")
        }
    };
}

#[allow(unused_imports)]
pub(crate) use string_param;
