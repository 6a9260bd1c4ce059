// SPDX-License-Identifier: GPL-2.0

//! Out-of-line instruction slots.
//!
//! The copies must execute within +-2 GiB of the probed code so that
//! RIP-relative operands still reach their targets. Module text is within
//! that range of the kernel and of other modules, so the slots live in the
//! engine's own text: a block of `int3` bytes reserved at build time and
//! written through the same writable alias as any other text. This avoids
//! `execmem_alloc()`/`module_alloc()`, which modules cannot call.

use core::sync::atomic::{AtomicU64, Ordering};

/// Bytes per slot: the longest instruction plus the trailing int3, rounded.
pub(crate) const SLOT_SIZE: usize = 32;
/// Number of slots.
const NSLOTS: usize = 2048;

core::arch::global_asm!(
    ".pushsection .text.kp_insn_slots, \"ax\", @progbits",
    ".balign 4096",
    ".globl kp_insn_slots",
    "kp_insn_slots:",
    ".fill {size}, 1, 0xcc",
    ".popsection",
    size = const SLOT_SIZE * NSLOTS,
);

extern "C" {
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

/// Whether `addr` is inside the slot area.
#[allow(dead_code)]
pub(crate) fn contains(addr: usize) -> bool {
    (base()..base() + SLOT_SIZE * NSLOTS).contains(&addr)
}
