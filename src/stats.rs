// SPDX-License-Identifier: GPL-2.0

//! `kp_get_stats()` and debugfs `stats`: how much the engine holds (probes,
//! probed addresses, slots, return instances, events) and how often a copy
//! cost a second trap. Tests use it to check that a failed or undone
//! registration left nothing behind and which way a hit went.

use crate::abi::KpStats;
use core::sync::atomic::Ordering;
use kernel::ffi::c_int;
use kernel::prelude::*;

/// Takes the snapshot. Process context.
pub(crate) fn get() -> KpStats {
    let (probes, points, slots, instances, inflight, (direct, parked), shadow_probes) = {
        let g = crate::lock::RegGuard::lock();
        let (probes, points) = crate::registry::counts(&g);
        let slots = crate::slots::in_use()
            + <crate::arch::Arch as crate::arch::Jumps>::opt_detours_in_use();
        let sites = crate::ftrace::direct_sites(&g);
        (
            probes,
            points,
            slots,
            crate::kretprobe::instances(&g),
            crate::kretprobe::inflight(&g),
            sites,
            crate::kretprobe::graph::probes(&g),
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
        oops_resets: crate::hit::OOPS_RESETS.load(Ordering::Relaxed) as _,
        kretprobe_via_graph: crate::kretprobe::VIA_GRAPH.load(Ordering::Relaxed) as _,
        missed_reentry: crate::missed::REENTRY.load(Ordering::Relaxed) as _,
        missed_kret_no_instance: crate::missed::KRET_NO_INSTANCE.load(Ordering::Relaxed) as _,
        missed_kret_unloading: crate::missed::KRET_UNLOADING.load(Ordering::Relaxed) as _,
        missed_kret_nested: crate::missed::KRET_NESTED.load(Ordering::Relaxed) as _,
        kretprobe_task_exits: crate::kretprobe::TASK_EXITS.load(Ordering::Relaxed) as _,
        kretprobe_shadow_returns: crate::kretprobe::graph::RETURNS.load(Ordering::Relaxed) as _,
        kretprobe_shadow_probes: shadow_probes as _,
        opt_waits: crate::optimize::WAITS.load(Ordering::Relaxed) as _,
        opt_waits_done: crate::optimize::WAITS_DONE.load(Ordering::Relaxed) as _,
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
    writeln!(w, "kretprobe_via_graph {}", s.kretprobe_via_graph)?;
    writeln!(w, "missed_reentry {}", s.missed_reentry)?;
    writeln!(w, "missed_kret_no_instance {}", s.missed_kret_no_instance)?;
    writeln!(w, "missed_kret_unloading {}", s.missed_kret_unloading)?;
    writeln!(w, "missed_kret_nested {}", s.missed_kret_nested)?;
    writeln!(w, "kretprobe_task_exits {}", s.kretprobe_task_exits)?;
    writeln!(w, "kretprobe_shadow_returns {}", s.kretprobe_shadow_returns)?;
    writeln!(w, "kretprobe_shadow_probes {}", s.kretprobe_shadow_probes)?;
    writeln!(w, "opt_waits {}", s.opt_waits)?;
    writeln!(w, "opt_waits_done {}", s.opt_waits_done)
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
