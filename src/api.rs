// SPDX-License-Identifier: GPL-2.0

//! The engine's API for client Rust modules.
//!
//! A client module includes this file (`#[path = ".../src/api.rs"] mod kp;`)
//! and links against the functions `kprobes.ko` exports. For now this is the
//! raw C ABI; the safe wrapper types come with the API issue (see README).

// A client uses only part of the API.
#![allow(dead_code, unreachable_pub)]

#[path = "abi.rs"]
pub mod abi;

pub use abi::*;

/// Register accessors for this architecture.
#[cfg(CONFIG_X86_64)]
#[path = "../arch/x86_64/regs.rs"]
pub mod regs;
/// Register accessors for this architecture.
#[cfg(CONFIG_ARM64)]
#[path = "../arch/arm64/regs.rs"]
pub mod regs;

extern "C" {
    /// Registers `p`; returns 0 or a negative errno.
    pub fn kp_register_kprobe(p: *mut KpKprobe) -> core::ffi::c_int;
    /// Unregisters `p`; on return no CPU runs its handlers any more.
    pub fn kp_unregister_kprobe(p: *mut KpKprobe);
    /// Registers `num` probes, all or nothing.
    pub fn kp_register_kprobes(kps: *mut *mut KpKprobe, num: core::ffi::c_int) -> core::ffi::c_int;
    /// Unregisters `num` probes.
    pub fn kp_unregister_kprobes(kps: *mut *mut KpKprobe, num: core::ffi::c_int);
    /// Stops a probe's handlers without unregistering it.
    pub fn kp_disable_kprobe(p: *mut KpKprobe) -> core::ffi::c_int;
    /// Registers a return probe.
    pub fn kp_register_kretprobe(rp: *mut KpKretprobe) -> core::ffi::c_int;
    /// Unregisters a return probe.
    pub fn kp_unregister_kretprobe(rp: *mut KpKretprobe);
    /// Why `addr` cannot be probed, or null.
    pub fn kp_blacklisted(addr: usize) -> *const core::ffi::c_char;
    /// Re-enables a disabled probe.
    pub fn kp_enable_kprobe(p: *mut KpKprobe) -> core::ffi::c_int;
}
