// SPDX-License-Identifier: GPL-2.0

//! Grace periods: what the registry unpublishes (replaced probe lists,
//! unlinked points) is freed only after every CPU left the trap path that
//! may still use it.

use super::*;
use crate::arch;
use crate::arch::Insns;
use crate::lock::RegGuard;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::bindings;
use kernel::prelude::*;

/// Waits until no CPU can be in a trap handler or an out-of-line copy that
/// started before this call.
///
/// Expedited: registration and unregistration wait for a grace period at
/// each change of a point's probe list, and a normal grace period costs
/// tens of milliseconds; the expedited one (IPIs to the other CPUs) costs
/// microseconds, which keeps batch (un)registration of a thousand probes
/// in the kernel's range.
pub(super) fn synchronize(g: &RegGuard) {
    // SAFETY: process context.
    unsafe { bindings::synchronize_rcu_expedited() };
    // Lists retired before this grace period can go now.
    for slot in &RETIRED {
        let old = slot.swap(null_mut(), Ordering::Relaxed);
        if !old.is_null() {
            // SAFETY: unpublished before the grace period that just ended.
            drop(unsafe { KBox::from_raw(old) });
        }
    }
    let _ = g;
}

/// Probe lists replaced when a probe joins a point, waiting for the next
/// grace period to be freed (registration lock): joining does not wait.
pub(super) static RETIRED: [AtomicPtr<ProbeList>; 64] = [const { AtomicPtr::new(null_mut()) }; 64];

/// Publishes `new` as `point`'s list; the old one is freed after a later
/// grace period (at once if the queue is full).
pub(super) fn publish_list(g: &RegGuard, point: &Point, new: KBox<ProbeList>) {
    let old = swap_list(g, point, new);
    match RETIRED.iter().find(|s| s.load(Ordering::Relaxed).is_null()) {
        Some(slot) => slot.store(old, Ordering::Relaxed),
        None => {
            synchronize(g);
            // SAFETY: unpublished before that grace period.
            drop(unsafe { KBox::from_raw(old) });
        }
    }
}

/// Makes `new` `point`'s list and returns the one it had. Registration lock
/// held; the point has a list.
pub(super) fn swap_list(_g: &RegGuard, point: &Point, new: KBox<ProbeList>) -> *mut ProbeList {
    let old = point
        .probes
        .swap(Held::list(KBox::into_raw(new)), Ordering::AcqRel);
    match Held::decode(old) {
        Held::List(l) => l,
        // Our callers replace lists only.
        _ => null_mut(),
    }
}

/// Frees an unlinked point after a grace period.
pub(super) fn free_point(g: &RegGuard, point: &'static Point) {
    synchronize(g);
    Retired {
        old_list: null_mut(),
        point: point as *const Point as *mut Point,
    }
    .finish(g);
}

/// What taking a probe off its point leaves to free once a grace period has
/// passed: the replaced probe list, or the unlinked point (with its list and
/// copy).
pub(super) struct Retired {
    pub(super) old_list: *mut ProbeList,
    pub(super) point: *mut Point,
}

impl Retired {
    pub(super) const NOTHING: Retired = Retired {
        old_list: null_mut(),
        point: null_mut(),
    };

    /// Frees what was retired. A grace period passed since it was.
    pub(super) fn finish(self, _g: &RegGuard) {
        if !self.old_list.is_null() {
            // SAFETY: unpublished, and a grace period passed.
            drop(unsafe { KBox::from_raw(self.old_list) });
        }
        if !self.point.is_null() {
            // SAFETY: unlinked, and a grace period passed: nothing refers
            // to it or its list any more.
            let point = unsafe { &*self.point };
            if let Held::List(list) = point.held() {
                // SAFETY: as above, for its list.
                drop(unsafe { KBox::from_raw(list) });
            }
            arch::Arch::release(point.insn);
            // SAFETY: from the points' cache; nothing refers to it (above).
            unsafe { kp_helper_point_free(self.point.cast()) };
        }
    }
}
