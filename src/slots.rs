// SPDX-License-Identifier: GPL-2.0

//! Out-of-line instruction slots: allocation.
//!
//! The copies execute from slots in the engine's own text, reserved at build
//! time by the arch backend (`kp_insn_slots`, filled with breakpoints) and
//! written through the same writable alias as any other text. Module text is
//! within reach of the kernel and other modules (x86_64: +-2 GiB for
//! RIP-relative operands), and this avoids `execmem_alloc()`, which modules
//! cannot call. Slot size and count come from the backend.

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

/// Takes a free slot. Registration lock held.
pub(crate) fn alloc() -> Option<usize> {
    for (w, word) in USED.iter().enumerate() {
        let v = word.load(Ordering::Relaxed);
        if v != u64::MAX {
            let bit = (!v).trailing_zeros() as usize;
            word.store(v | (1 << bit), Ordering::Relaxed);
            return Some(base() + (w * 64 + bit) * SLOT_SIZE);
        }
    }
    None
}

/// Returns a slot. Registration lock held; no CPU may still execute it.
pub(crate) fn free(slot: usize) {
    let i = (slot - base()) / SLOT_SIZE;
    USED[i / 64].fetch_and(!(1 << (i % 64)), Ordering::Relaxed);
}

/// The index of the slot at `slot`.
pub(crate) fn index_of(slot: usize) -> usize {
    (slot - base()) / SLOT_SIZE
}
