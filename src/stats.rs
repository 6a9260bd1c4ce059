// SPDX-License-Identifier: GPL-2.0

//! `kp_get_stats()` and debugfs `stats`: how much the engine holds (probes,
//! probed addresses, slots, return instances, events) and how often a copy
//! cost a second trap. Tests use it to check that a failed or undone
//! registration left nothing behind and which way a hit went.

use crate::abi::KpStats;
use kernel::ffi::c_int;
use kernel::prelude::*;

/// Takes the snapshot. Process context.
pub(crate) fn get() -> KpStats {
    let (probes, points, slots, instances, inflight, (direct, parked)) = {
        let g = crate::lock::RegGuard::lock();
        let (probes, points) = crate::registry::counts(&g);
        let slots = crate::slots::in_use();
        let sites = crate::ftrace::direct_sites(&g);
        (
            probes,
            points,
            slots,
            crate::kretprobe::instances(&g),
            crate::kretprobe::inflight(&g),
            sites,
        )
    };
    KpStats {
        probes: probes as _,
        points: points as _,
        slots: slots as _,
        kretprobe_instances: instances as _,
        events: crate::events::count() as _,
        step_traps: crate::percpu::step_traps(),
        ftrace_direct: direct as _,
        ftrace_parked: parked as _,
        kretprobe_inflight: inflight as _,
        hits_in_progress: crate::percpu::hits_in_progress() as _,
        oops_resets: crate::hit::OOPS_RESETS.load(core::sync::atomic::Ordering::Relaxed) as _,
        kretprobe_via_graph: crate::kretprobe::VIA_GRAPH.load(core::sync::atomic::Ordering::Relaxed)
            as _,
    }
}

/// Writes the snapshot, one `name value` per line (debugfs `stats`).
pub(crate) fn write(w: &mut impl core::fmt::Write) -> core::fmt::Result {
    let s = get();
    writeln!(w, "probes {}", s.probes)?;
    writeln!(w, "points {}", s.points)?;
    writeln!(w, "slots {}", s.slots)?;
    writeln!(w, "kretprobe_instances {}", s.kretprobe_instances)?;
    writeln!(w, "events {}", s.events)?;
    writeln!(w, "step_traps {}", s.step_traps)?;
    writeln!(w, "ftrace_direct {}", s.ftrace_direct)?;
    writeln!(w, "ftrace_parked {}", s.ftrace_parked)?;
    writeln!(w, "kretprobe_inflight {}", s.kretprobe_inflight)?;
    writeln!(w, "hits_in_progress {}", s.hits_in_progress)?;
    writeln!(w, "oops_resets {}", s.oops_resets)?;
    writeln!(w, "kretprobe_via_graph {}", s.kretprobe_via_graph)
}

/// `kp_get_stats()`: fills `*out`; 0, or -EINVAL when `out` is null.
///
/// # Safety
///
/// `out` is null or valid for writing a `struct kp_stats`. Process context.
#[no_mangle]
pub unsafe extern "C" fn kp_get_stats(out: *mut KpStats) -> c_int {
    if out.is_null() {
        return EINVAL.to_errno();
    }
    // SAFETY: per the function's contract.
    unsafe { out.write(get()) };
    0
}
