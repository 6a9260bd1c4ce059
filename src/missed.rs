// SPDX-License-Identifier: GPL-2.0

//! Why hits and returns were missed, engine-wide since load, by cause (each
//! probe's and kretprobe's own `nmissed` counts its share too, as in the
//! kernel). Bumped only on the miss paths; `stats` reports them.

use core::sync::atomic::{AtomicUsize, Ordering};

/// Hits at a probed address while this CPU was already handling a hit
/// (a handler, or code it calls, reached a probe): no handler ran.
pub(crate) static REENTRY: AtomicUsize = AtomicUsize::new(0);
/// Kretprobe entries that found every instance taken (`maxactive`).
pub(crate) static KRET_NO_INSTANCE: AtomicUsize = AtomicUsize::new(0);
/// Kretprobe entries while the engine was being unloaded (no reference
/// to pin it for the return).
pub(crate) static KRET_UNLOADING: AtomicUsize = AtomicUsize::new(0);
/// Returns whose handler did not run: this CPU's hit levels were all
/// taken.
pub(crate) static KRET_NESTED: AtomicUsize = AtomicUsize::new(0);

/// Counts one.
#[inline(always)]
pub(crate) fn count(c: &AtomicUsize) {
    c.fetch_add(1, Ordering::Relaxed);
}
