// SPDX-License-Identifier: GPL-2.0

//! The engine's C ABI: `struct kp_kprobe` and the exported functions.
//!
//! C header: [`include/kp_kprobes.h`](../include/kp_kprobes.h). This file is the
//! Rust mirror of that header; client Rust modules include it too (through the
//! API file), so engine and clients share one definition.

use kernel::bindings::pt_regs;
use kernel::ffi::{c_char, c_int, c_uint, c_ulong, c_void};

/// `kp_pre_handler_t`: non-zero return means "I changed the registers, skip the
/// probed instruction".
pub type PreHandler = unsafe extern "C" fn(*mut KpKprobe, *mut pt_regs) -> c_int;
/// `kp_post_handler_t`.
pub type PostHandler = unsafe extern "C" fn(*mut KpKprobe, *mut pt_regs, c_ulong);

/// `KP_FLAG_GONE`: the probed text went away.
pub const KP_FLAG_GONE: c_uint = 1;
/// `KP_FLAG_DISABLED`: registered but not armed.
pub const KP_FLAG_DISABLED: c_uint = 2;

/// `struct kp_kprobe`.
#[repr(C)]
pub struct KpKprobe {
    /// In: the address to probe, or null to use `symbol_name` + `offset`.
    /// Out: the address actually probed.
    pub addr: *mut c_void,
    /// `"symbol"` or `"module:symbol"`, or null when `addr` is given.
    pub symbol_name: *const c_char,
    /// Byte offset from `symbol_name`.
    pub offset: c_uint,
    /// Runs before the probed instruction.
    pub pre_handler: Option<PreHandler>,
    /// Runs after the probed instruction.
    pub post_handler: Option<PostHandler>,
    /// `KP_FLAG_*`.
    pub flags: c_uint,
    /// Hits whose handlers did not run.
    pub nmissed: c_ulong,
    /// Engine-private; null before registration.
    pub kp_private: *mut c_void,
}

impl KpKprobe {
    /// An empty probe description, to be filled in before registration.
    pub const fn new() -> Self {
        Self {
            addr: core::ptr::null_mut(),
            symbol_name: core::ptr::null(),
            offset: 0,
            pre_handler: None,
            post_handler: None,
            flags: 0,
            nmissed: 0,
            kp_private: core::ptr::null_mut(),
        }
    }
}

impl Default for KpKprobe {
    fn default() -> Self {
        Self::new()
    }
}
