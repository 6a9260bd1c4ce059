// SPDX-License-Identifier: GPL-2.0

//! kprobes.ko: a kernel probe engine written in Rust.
//!
//! The engine patches probed instructions with a breakpoint, catches the trap
//! itself, runs the client's handlers with the saved registers, executes the
//! displaced original instruction and resumes. It never calls the kernel's own
//! kprobes, kretprobes, rethook or fprobe code.
//!
//! Layout: arch-independent engine in `src/`, one backend per architecture in
//! `arch/<arch>/` behind the interface documented in `docs/arch-interface.md`.

pub mod abi;
// The arm64 backend does not trap yet, which leaves the hit path unused there.
#[cfg_attr(CONFIG_ARM64, allow(dead_code))]
mod errno;
// Pure logic shared with the host tests: `pub` there, partly unused here.
#[allow(dead_code, unreachable_pub)]
mod ksym;
#[cfg_attr(CONFIG_ARM64, allow(dead_code))]
mod percpu;
#[cfg_attr(CONFIG_ARM64, allow(dead_code))]
mod registry;
mod symbols;
#[cfg_attr(CONFIG_ARM64, allow(dead_code))]
mod text;

#[cfg(CONFIG_X86_64)]
#[path = "../arch/x86_64/mod.rs"]
mod arch;

#[cfg(CONFIG_ARM64)]
#[path = "../arch/arm64/mod.rs"]
mod arch;

use kernel::prelude::*;

pub use registry::{kp_register_kprobe, kp_unregister_kprobe};

module! {
    type: KprobesEngine,
    name: "kprobes",
    author: "kprobes-rs developers",
    description: "Kernel probe engine in Rust (kprobes, without the kernel's kprobes)",
    license: "GPL",
}

/// `sizeof(struct kp_kprobe)` as built, for C clients to check.
#[no_mangle]
pub static kp_kprobe_abi_size: usize = core::mem::size_of::<abi::KpKprobe>();

extern "C" {
    fn kp_helper_within_this_module(addr: usize) -> bool;
}

/// Whether `addr` belongs to the engine itself (never probe-able).
pub(crate) fn is_engine_address(addr: usize) -> bool {
    // SAFETY: a pure range check against THIS_MODULE's memory.
    unsafe { kp_helper_within_this_module(addr) }
}

struct KprobesEngine;

impl kernel::Module for KprobesEngine {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        symbols::init()?;
        arch::init()?;
        pr_info!("engine loaded ({})\n", arch::NAME);
        Ok(KprobesEngine)
    }
}

impl Drop for KprobesEngine {
    fn drop(&mut self) {
        registry::remove_all();
        arch::exit();
        pr_info!("engine unloaded\n");
    }
}
