// SPDX-License-Identifier: GPL-2.0

//! Out-of-line pieces of the engine's text: allocation.
//!
//! The copies execute from slots in the engine's own text, reserved at build
//! time by the arch backend (`kp_insn_slots`, filled with breakpoints) and
//! written through the same writable alias as any other text. Module text is
//! within reach of the kernel and other modules (x86_64: +-2 GiB for
//! RIP-relative operands), and this avoids `execmem_alloc()`, which modules
//! cannot call. Slot size and count come from the backend.
//!
//! A backend may reserve other such areas ([`Area`]; x86_64: its
//! jump-optimization detours, assembled with unwind data); they are
//! allocated the same way.

use crate::arch::Insns;
use crate::arch::{NSLOTS, SLOT_SIZE};
use core::marker::PhantomData;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// What an [`Area`] is made of.
pub(crate) trait AreaLayout {
    /// Bytes per piece.
    const SIZE: usize;
    /// Start of the area (a symbol of the engine's text).
    fn base() -> usize;
    /// Refills a piece before a deferred reuse.
    fn clear(piece: usize);
}

/// An area of equal pieces of the engine's text, `64 * W` of them: one bit
/// per piece, changed only under the registration lock (atomics only
/// because areas are `static`).
pub(crate) struct Area<L: AreaLayout, const W: usize> {
    used: [AtomicU64; W],
    /// Pieces freed while a task may still be executing them (boosted
    /// copies and detours run with interrupts on, so a task can be
    /// preempted inside one). They become free after
    /// `synchronize_rcu_tasks()`, which waits until every task has
    /// voluntarily scheduled, run in user space or idled since.
    deferred: [AtomicU64; W],
    /// Pieces of index `limit` and above are not handed out (all of them
    /// unless a test narrows the area: [`Self::set_limit`]).
    limit: AtomicUsize,
    layout: PhantomData<L>,
}

impl<L: AreaLayout, const W: usize> Area<L, W> {
    /// Pieces in the area.
    pub(crate) const LEN: usize = 64 * W;

    /// Every piece free.
    pub(crate) const fn new() -> Self {
        Area {
            used: [const { AtomicU64::new(0) }; W],
            deferred: [const { AtomicU64::new(0) }; W],
            limit: AtomicUsize::new(64 * W),
            layout: PhantomData,
        }
    }

    /// Frees a piece that a preempted task may still be in. Registration
    /// lock.
    pub(crate) fn free_deferred(&self, piece: usize) {
        if let Some((w, bit)) = Self::bit_of(&self.deferred, self.index_of(piece), piece) {
            w.fetch_or(bit, Ordering::Relaxed);
        }
    }

    /// `piece`'s word in `map` (index `i`) and its bit; reported when it
    /// is not in the area.
    fn bit_of(map: &[AtomicU64; W], i: usize, piece: usize) -> Option<(&AtomicU64, u64)> {
        let Some(w) = map.get(i / 64) else {
            kernel::pr_err!("freeing {:#x}: not in the area\n", piece);
            return None;
        };
        Some((w, 1 << (i % 64)))
    }

    /// If every piece below the limit is taken, waits for tasks to leave
    /// the deferred ones and frees them. Registration lock held; process
    /// context.
    pub(crate) fn reclaim_if_full(&self) {
        if self.full() {
            self.reclaim_deferred();
        }
    }

    /// Waits for tasks to leave deferred pieces and frees them. Registration
    /// lock held; process context.
    fn reclaim_deferred(&self) {
        if self.deferred.iter().all(|w| w.load(Ordering::Relaxed) == 0) {
            return;
        }
        // SAFETY: process context.
        unsafe { kernel::bindings::synchronize_rcu_tasks() };
        for (w, word) in self.deferred.iter().enumerate() {
            let mut bits = word.swap(0, Ordering::Relaxed);
            while bits != 0 {
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let piece = self.at(w * 64 + b);
                L::clear(piece);
                self.free(piece);
            }
        }
    }

    /// Takes a free piece. Registration lock held.
    pub(crate) fn alloc(&self) -> Option<usize> {
        self.reclaim_if_full();
        self.alloc_now()
    }

    /// Takes a free piece without waiting for deferred ones (`None` when
    /// there is none). Registration lock held.
    pub(crate) fn alloc_now(&self) -> Option<usize> {
        let (w, bit) = self.first_free()?;
        let word = self.used.get(w)?;
        word.fetch_or(1 << bit, Ordering::Relaxed);
        Some(self.at(w * 64 + bit))
    }

    /// The first free piece below the limit: its word and bit.
    fn first_free(&self) -> Option<(usize, usize)> {
        let limit = self.limit.load(Ordering::Relaxed);
        for (w, word) in self.used.iter().enumerate() {
            let below = limit.saturating_sub(w * 64);
            if below == 0 {
                break;
            }
            let mask = if below >= 64 {
                u64::MAX
            } else {
                (1u64 << below) - 1
            };
            let free = !word.load(Ordering::Relaxed) & mask;
            if free != 0 {
                return Some((w, free.trailing_zeros() as usize));
            }
        }
        None
    }

    /// Hands out only the first `n` pieces from now on (at most all of
    /// them; pieces in use above stay until freed); returns the previous
    /// limit. For tests of what happens when an area runs out.
    // Only an area of detours has a bound to set (x86_64's).
    #[allow(dead_code)]
    pub(crate) fn set_limit(&self, n: usize) -> usize {
        self.limit.swap(n.min(Self::LEN), Ordering::Relaxed)
    }

    /// Whether every piece below the limit is taken (or waits for tasks
    /// to leave it).
    pub(crate) fn full(&self) -> bool {
        self.first_free().is_none()
    }

    /// Returns a piece. Registration lock held; no CPU may still execute it.
    pub(crate) fn free(&self, piece: usize) {
        if let Some((w, bit)) = Self::bit_of(&self.used, self.index_of(piece), piece) {
            w.fetch_and(!bit, Ordering::Relaxed);
        }
    }

    /// Pieces in use, not counting those waiting for every task to leave
    /// them.
    pub(crate) fn in_use(&self) -> usize {
        self.used
            .iter()
            .zip(self.deferred.iter())
            .map(|(u, d)| {
                (u.load(Ordering::Relaxed) & !d.load(Ordering::Relaxed)).count_ones() as usize
            })
            .sum()
    }

    /// The piece of index `i` (below [`Self::LEN`]).
    #[inline(always)]
    pub(crate) fn at(&self, i: usize) -> usize {
        L::base() + i * L::SIZE
    }

    /// The index of the piece at `piece`.
    #[inline(always)]
    pub(crate) fn index_of(&self, piece: usize) -> usize {
        piece.wrapping_sub(L::base()) / L::SIZE
    }
}

extern "C" {
    /// Start of the slot area (arch `global_asm!`).
    static kp_insn_slots: [u8; SLOT_SIZE * NSLOTS];
}

/// The slot area's layout.
struct Slots;

impl AreaLayout for Slots {
    const SIZE: usize = SLOT_SIZE;

    #[inline(always)]
    fn base() -> usize {
        core::ptr::addr_of!(kp_insn_slots) as usize
    }

    fn clear(slot: usize) {
        crate::arch::Arch::clear_slot(slot);
    }
}

static SLOTS: Area<Slots, { NSLOTS / 64 }> = Area::new();

// A bit for every slot.
const _: () = assert!(Area::<Slots, { NSLOTS / 64 }>::LEN == NSLOTS);

/// Frees a slot that a preempted task may still be in. Registration lock.
pub(crate) fn free_deferred(slot: usize) {
    SLOTS.free_deferred(slot);
}

/// Takes a free slot. Registration lock held.
pub(crate) fn alloc() -> Option<usize> {
    SLOTS.alloc()
}

/// Takes a free slot for what is optional (a jump-optimized probe's
/// detour), unless that would leave a quarter of the slots or fewer: those
/// are kept for registrations (a probe's copy, a kretprobe's stubs), which
/// would otherwise fail while detours hold the area. Registration lock
/// held.
// Used by a backend whose detours are slots (arm64; x86_64's have an area
// of their own).
#[allow(dead_code)]
pub(crate) fn alloc_spare() -> Option<usize> {
    if NSLOTS - in_use() <= NSLOTS / 4 {
        return None;
    }
    alloc()
}

/// Returns a slot. Registration lock held; no CPU may still execute it.
pub(crate) fn free(slot: usize) {
    SLOTS.free(slot);
}

/// Slots in use, not counting those waiting for every task to leave them.
pub(crate) fn in_use() -> usize {
    SLOTS.in_use()
}

/// The slot of index `i` (below `NSLOTS`).
// Used by a backend whose detours are slots (arm64).
#[allow(dead_code)]
pub(crate) fn at(i: usize) -> usize {
    SLOTS.at(i)
}

/// The index of the slot at `slot`.
#[inline(always)]
pub(crate) fn index_of(slot: usize) -> usize {
    SLOTS.index_of(slot)
}
