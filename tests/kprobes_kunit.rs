// SPDX-License-Identifier: GPL-2.0

//! KUnit suites for the kprobes engine, run in QEMU when this module loads.
//!
//! - `kp_smoke` (every arch): the engine is loaded and refuses bad requests
//!   with the documented error codes.
//! - `kp_probe`: a probe on a function of this module: argument registers,
//!   handler counts, return values, skipping, refusals.
//! - `kp_core`: the kernel's `lib/test_kprobes.c` kprobe cases, aggregation,
//!   enable/disable, batch registration, module unload, storms.
//! - `kp_kernel`: a probe on `do_sys_open`, hit by a user-space `cat`.
//! - `kp_kret`: return probes.
//! - `kp_api`: the safe Rust API (`src/api.rs`) as a client uses it.
//! - `kp_events`: probe events from code, counted by perf.
//! - `kp_ftrace`: entry probes (x86_64: served by ftrace).
//! - `kp_hostile`: bad arguments for every entry point, with their errors.
//! - `kp_trap_path`: every instruction of the trap path refused; one call
//!   beyond it, every instruction probed while the trap path runs.
//! - `kp_coexist`: beside the kernel's own kprobes on the same text.
//! - `kp_random`: 200 probes on random instructions of kernel functions.
//! - `kp_mass`: 2,000 kprobes and 200 kretprobes under a 60-second workload.
//! - `kp_alloc_fail`: each allocation of each registration path failing.
//! - `kp_arm64_opt` (arm64): jump-optimized probes (a `B` to a detour).
//! - `kp_arm64_sim` (arm64): each simulated and boosted instruction class.
//! - `kp_x86_emu` (x86_64): each emulated instruction class, probed.
//! - `kp_x86_opt` (x86_64): jump-optimized probes.
//! - `kp_nmi`: probe hits in NMI context.

#[macro_use]
mod kunit;
#[path = "../src/api.rs"]
mod kp;
mod util;
// The engine's own parser of sprint_symbol() output.
#[path = "../src/ksym.rs"]
#[allow(dead_code, unreachable_pub)]
mod ksym;

#[cfg(CONFIG_X86_64)]
#[path = "../arch/x86_64/decode.rs"]
#[allow(dead_code, unreachable_pub)]
mod decode;

#[cfg(CONFIG_ARM64)]
#[path = "../arch/arm64/decode.rs"]
#[allow(dead_code, unreachable_pub)]
mod decode;

#[macro_use]
mod insn_table;
mod kp_alloc_fail;
mod kp_api;
#[cfg(CONFIG_ARM64)]
mod kp_arm64_opt;
#[cfg(CONFIG_ARM64)]
mod kp_arm64_sim;
mod kp_coexist;
mod kp_core;
mod kp_events;
mod kp_ftrace;
mod kp_hostile;
mod kp_kernel;
mod kp_kret;
mod kp_mass;
mod kp_nmi;
mod kp_probe;
mod kp_random;
mod kp_smoke;
mod kp_trap_path;
#[cfg(CONFIG_X86_64)]
mod kp_x86_emu;
#[cfg(CONFIG_X86_64)]
mod kp_x86_opt;
mod targets;

use kernel::prelude::*;

module! {
    type: KprobesKunit,
    name: "kprobes_kunit",
    author: "kprobes-rs developers",
    description: "KUnit suites for the Rust kprobes engine",
    license: "GPL",
}

struct KprobesKunit;

impl kernel::Module for KprobesKunit {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        // KUnit ran the suites from the module notifier before this.
        Ok(KprobesKunit)
    }
}
