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
    pub fn kp_register_kprobe(p: *mut KpKprobe) -> kernel::ffi::c_int;
    /// Unregisters `p`; on return no CPU runs its handlers any more.
    pub fn kp_unregister_kprobe(p: *mut KpKprobe);
}
