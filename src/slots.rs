// SPDX-License-Identifier: GPL-2.0

//! Out-of-line instruction slots: allocation.
//!
//! The copies execute from slots in the engine's own text, reserved at build
//! time by the arch backend (`kp_insn_slots`, filled with breakpoints) and
//! written through the same writable alias as any other text. Module text is
//! within reach of the kernel and other modules (x86_64: +-2 GiB for
//! RIP-relative operands), and this avoids `execmem_alloc()`, which modules
//! cannot call. Slot size and count come from the backend.

use crate::arch::Insns;
use crate::arch::{NSLOTS, SLOT_SIZE};
use core::sync::atomic::{AtomicU64, Ordering};

extern "C" {
    /// Start of the slot area (arch `global_asm!`).
    static kp_insn_slots: [u8; SLOT_SIZE * NSLOTS];
}

/// One bit per slot; changed only under the registration lock, atomics only
/// because it is a `static`.
static USED: [AtomicU64; NSLOTS / 64] = [const { AtomicU64::new(0) }; NSLOTS / 64];

fn base() -> usize {
    core::ptr::addr_of!(kp_insn_slots) as usize
}

/// Slots freed while a task may still be executing them (boosted copies run
/// with interrupts on, so a task can be preempted inside one). They become
/// free after `synchronize_rcu_tasks()`, which waits until every task has
/// voluntarily scheduled, run in user space or idled since.
static DEFERRED: [AtomicU64; NSLOTS / 64] = [const { AtomicU64::new(0) }; NSLOTS / 64];

/// Frees a slot that a preempted task may still be in. Registration lock.
pub(crate) fn free_deferred(slot: usize) {
    let i = (slot - base()) / SLOT_SIZE;
    DEFERRED[i / 64].fetch_or(1 << (i % 64), Ordering::Relaxed);
}

/// Waits for tasks to leave deferred slots and frees them. Registration
/// lock held; process context. Returns whether any was freed.
pub(crate) fn reclaim_deferred() -> bool {
    if DEFERRED.iter().all(|w| w.load(Ordering::Relaxed) == 0) {
        return false;
    }
    // SAFETY: process context.
    unsafe { kernel::bindings::synchronize_rcu_tasks() };
    for (w, word) in DEFERRED.iter().enumerate() {
        let mut bits = word.swap(0, Ordering::Relaxed);
        while bits != 0 {
            let b = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let slot = at(w * 64 + b);
            crate::arch::Arch::clear_slot(slot);
            free(slot);
        }
    }
    true
}

/// Takes a free slot. Registration lock held.
pub(crate) fn alloc() -> Option<usize> {
    alloc_now().or_else(|| reclaim_deferred().then(alloc_now).flatten())
}

/// Takes a free slot for what is optional (a jump-optimized probe's
/// detour), unless that would leave a quarter of the slots or fewer: those
/// are kept for registrations (a probe's copy, a kretprobe's stubs), which
/// would otherwise fail while detours hold the area. Registration lock
/// held.
pub(crate) fn alloc_spare() -> Option<usize> {
    if NSLOTS - in_use() <= NSLOTS / 4 {
        return None;
    }
    alloc()
}

fn alloc_now() -> Option<usize> {
    for (w, word) in USED.iter().enumerate() {
        let v = word.load(Ordering::Relaxed);
        if v != u64::MAX {
            let bit = (!v).trailing_zeros() as usize;
            word.store(v | (1 << bit), Ordering::Relaxed);
            return Some(at(w * 64 + bit));
        }
    }
    None
}

/// Returns a slot. Registration lock held; no CPU may still execute it.
pub(crate) fn free(slot: usize) {
    let i = (slot - base()) / SLOT_SIZE;
    USED[i / 64].fetch_and(!(1 << (i % 64)), Ordering::Relaxed);
}

/// Slots in use, not counting those waiting for every task to leave them.
pub(crate) fn in_use() -> usize {
    USED.iter()
        .zip(DEFERRED.iter())
        .map(|(u, d)| {
            (u.load(Ordering::Relaxed) & !d.load(Ordering::Relaxed)).count_ones() as usize
        })
        .sum()
}

/// The slot of index `i` (below `NSLOTS`).
pub(crate) fn at(i: usize) -> usize {
    base() + i * SLOT_SIZE
}

/// The index of the slot at `slot`.
pub(crate) fn index_of(slot: usize) -> usize {
    (slot - base()) / SLOT_SIZE
}
