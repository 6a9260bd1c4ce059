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

extern "C" {
    /// `tests/kp_target_c.c`: `2x + 1`, with an ftrace call site.
    fn kp_target_c_func(x: u64) -> u64;
}

impl kernel::Module for KpTarget {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        // Keep the function referenced so that it is not dropped.
        core::hint::black_box(kp_target_func as *const ());
        // One call at every load: a probe event that waited for this
        // module records it (the guest's `events-module-*` checks).
        // SAFETY: a plain C function of this module.
        let v = unsafe { kp_target_c_func(core::hint::black_box(20)) };
        if v != 41 {
            return Err(EINVAL);
        }
        Ok(KpTarget)
    }
}
