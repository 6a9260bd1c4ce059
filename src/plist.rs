// SPDX-License-Identifier: GPL-2.0

//! The probes of one point: a fixed-capacity array of pointers that the trap
//! path reads without locks while the registration path (one writer, under
//! the registration lock) changes it in place.
//!
//! Joining and leaving an aggregate cost O(1), not a copy of the list: with
//! a thousand probes on one address (batch registration), copying the list
//! at every change cost more than everything else a registration does. An
//! append writes the next free slot and only then publishes the new length;
//! a removal clears its slot (readers skip empty slots; a reader that
//! already loaded the pointer keeps a record that lives until a grace period
//! has passed). Slots are never reused: a full list, or one mostly empty, is
//! replaced by a compacted copy, published and retired by the caller like
//! any RCU-protected object. Order is kept: the registration order.

use core::ptr::null_mut;
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use kernel::prelude::*;

/// Capacity of a new point's list (most points have one probe).
const MIN_CAP: usize = 2;

pub(crate) struct PtrList<T> {
    /// Slots in use, empty ones included (published with Release).
    len: AtomicUsize,
    /// Non-empty slots (writer only).
    live: AtomicUsize,
    /// `capacity` slots, all initialised (null when empty).
    slots: KVec<AtomicPtr<T>>,
}

impl<T> PtrList<T> {
    /// An empty list with room for `cap` pointers (at least [`MIN_CAP`]).
    pub(crate) fn with_capacity(cap: usize) -> Result<KBox<Self>> {
        let cap = cap.max(MIN_CAP);
        let mut slots = KVec::with_capacity(cap, GFP_KERNEL)?;
        for _ in 0..cap {
            // Within the capacity: cannot fail.
            slots.push(AtomicPtr::new(null_mut()), GFP_KERNEL)?;
        }
        Ok(KBox::new(
            PtrList {
                len: AtomicUsize::new(0),
                live: AtomicUsize::new(0),
                slots,
            },
            GFP_KERNEL,
        )?)
    }

    /// The pointers in insertion order. Any context.
    pub(crate) fn iter(&self) -> impl Iterator<Item = *mut T> + '_ {
        let n = self.len.load(Ordering::Acquire).min(self.slots.len());
        self.slots[..n]
            .iter()
            .map(|s| s.load(Ordering::Acquire))
            .filter(|p| !p.is_null())
    }

    /// How many pointers the list holds. Writer only.
    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Appends `p` in place; false (nothing changed) when the list is full.
    /// Writer only.
    pub(crate) fn try_push(&self, p: *mut T) -> bool {
        let n = self.len.load(Ordering::Relaxed);
        let Some(slot) = self.slots.get(n) else {
            return false;
        };
        slot.store(p, Ordering::Relaxed);
        // Readers that see the new length see the slot filled.
        self.len.store(n + 1, Ordering::Release);
        self.live.store(self.live() + 1, Ordering::Relaxed);
        true
    }

    /// Clears `p`'s slot; false when `p` is not in the list. Writer only.
    pub(crate) fn remove(&self, p: *mut T) -> bool {
        let n = self.len.load(Ordering::Relaxed);
        match self.slots[..n]
            .iter()
            .find(|s| s.load(Ordering::Relaxed) == p)
        {
            Some(slot) => {
                slot.store(null_mut(), Ordering::Release);
                self.live.store(self.live() - 1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// Whether the list should be replaced by [`Self::compacted`]: full, or
    /// holding under an eighth of a sizeable capacity. Writer only.
    pub(crate) fn wants_compaction(&self) -> bool {
        let cap = self.slots.len();
        self.len.load(Ordering::Relaxed) == cap || (cap > 16 && self.live() < cap / 8)
    }

    /// A copy of the live pointers with room for as many again (and at least
    /// one more). Writer only.
    pub(crate) fn compacted(&self) -> Result<KBox<Self>> {
        let new = Self::with_capacity(2 * (self.live() + 1))?;
        for p in self.iter() {
            // The capacity exceeds the live count: cannot fail.
            new.try_push(p);
        }
        Ok(new)
    }
}
