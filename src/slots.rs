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
//!
//! A piece freed while a task may still run it (preempted inside a boosted
//! copy or a detour) is reused only after a tasks-RCU wait, the engine's
//! text work's (`src/optimize.rs`), which never waits with the registration
//! lock held: a task that never schedules voluntarily holds such a wait
//! up, and if it needed a registration to stop (a worker told to stop
//! after a probe is enabled) the two would wait for each other. An
//! allocation finds none of them free until then; a registration that
//! found no free slot has the work reclaim them, waits for that (without
//! the lock, at most 2 s) and tries again (`registry::register`).

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
    /// Deferred pieces whose wait has begun ([`Self::begin_reclaim`]):
    /// free once it ends ([`Self::finish_reclaim`]).
    ripe: [AtomicU64; W],
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
            ripe: [const { AtomicU64::new(0) }; W],
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

    /// The deferred pieces become ripe: free after a tasks-RCU wait that
    /// begins after this (the caller's, without the registration lock:
    /// waiting under it would stall every registration until each task
    /// scheduled, and a task that needs one to stop would never). Whether
    /// any piece is ripe. Registration lock held; one reclaim at a time
    /// (the engine's text work).
    pub(crate) fn begin_reclaim(&self) -> bool {
        let mut any = false;
        for (d, r) in self.deferred.iter().zip(self.ripe.iter()) {
            let bits = d.swap(0, Ordering::Relaxed);
            r.fetch_or(bits, Ordering::Relaxed);
            any |= r.load(Ordering::Relaxed) != 0;
        }
        any
    }

    /// Frees the ripe pieces, refilled. Registration lock held, after a
    /// tasks-RCU wait that began after [`Self::begin_reclaim`].
    pub(crate) fn finish_reclaim(&self) {
        for (w, word) in self.ripe.iter().enumerate() {
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

    /// Whether freed pieces wait for a reclaim.
    pub(crate) fn reclaimable(&self) -> bool {
        self.deferred
            .iter()
            .chain(self.ripe.iter())
            .any(|w| w.load(Ordering::Relaxed) != 0)
    }

    /// Takes a free piece (`None` when there is none: freed ones wait for
    /// the engine's text work to reclaim them). Registration lock held.
    pub(crate) fn alloc(&self) -> Option<usize> {
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

    /// Pieces below the limit that [`Self::alloc`] can hand out now.
    pub(crate) fn free_count(&self) -> usize {
        let limit = self.limit.load(Ordering::Relaxed);
        let used: usize = self
            .used
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as usize)
            .sum();
        limit.saturating_sub(used)
    }

    /// Whether every piece below the limit is taken (or waits for tasks
    /// to leave it).
    // Asked of an area of detours (x86_64's) before its probe scan.
    #[allow(dead_code)]
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
        let mut n = 0;
        for ((u, d), r) in self
            .used
            .iter()
            .zip(self.deferred.iter())
            .zip(self.ripe.iter())
        {
            let waiting = d.load(Ordering::Relaxed) | r.load(Ordering::Relaxed);
            n += (u.load(Ordering::Relaxed) & !waiting).count_ones() as usize;
        }
        n
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

/// Takes a free slot (`None` when there is none; freed ones wait for
/// [`finish_reclaim`]). Registration lock held.
pub(crate) fn alloc() -> Option<usize> {
    SLOTS.alloc()
}

/// [`Area::begin_reclaim`] for the slots.
pub(crate) fn begin_reclaim() -> bool {
    SLOTS.begin_reclaim()
}

/// [`Area::finish_reclaim`] for the slots.
pub(crate) fn finish_reclaim() {
    SLOTS.finish_reclaim()
}

/// Whether freed slots wait for a reclaim.
pub(crate) fn reclaimable() -> bool {
    SLOTS.reclaimable()
}

/// Slots free now.
pub(crate) fn free_count() -> usize {
    SLOTS.free_count()
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
    // (Freed slots waiting for a reclaim are not free.)
    if free_count() <= NSLOTS / 4 {
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
