// SPDX-License-Identifier: GPL-2.0

//! A module that the core suite probes, then unloads under the probe.

use kernel::prelude::*;

module! {
    type: KpTarget,
    name: "kp_target",
    author: "kprobes-rs developers",
    description: "Probe target for the kprobes-rs KUnit suites",
    license: "GPL",
}

/// The probed function: `2x + 1`.
#[no_mangle]
#[inline(never)]
pub extern "C" fn kp_target_func(x: u64) -> u64 {
    core::hint::black_box(x) * 2 + 1
}

struct KpTarget;

impl kernel::Module for KpTarget {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        // Keep the function referenced so that it is not dropped.
        core::hint::black_box(kp_target_func as *const ());
        Ok(KpTarget)
    }
}
