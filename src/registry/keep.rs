// SPDX-License-Identifier: GPL-2.0

//! What the registry cannot give back at once: text the engine cannot take
//! back (the engine then stays loaded), and slots freed while a task may
//! still run them (a registration waits for their reclaim).

use super::hooks;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::prelude::*;

extern "C" {
    fn kp_helper_module_get() -> bool;
}

/// Set once the engine pinned itself for text it cannot take back.
static PINNED: AtomicBool = AtomicBool::new(false);

/// What is layered on the point at `addr` cannot be taken off: someone
/// else's breakpoint sits on the engine's jump (the kernel's kprobes took
/// the `jmp` for the instruction and emulate it into the detour). The jump
/// and its detour stay for as long as theirs may, so the engine stays
/// loaded for good, pinned now, while it can be: a disarm that fails here
/// may be one whose caller goes on regardless (an event's disable drops
/// its reference to the engine), and an unload must never meet that
/// breakpoint, where it would wait for it with the registration and
/// events locks held. Registration lock held.
pub(super) fn pin_for_good(addr: usize) {
    if !PINNED.swap(true, Ordering::Relaxed) {
        // SAFETY: plain call; never released.
        let pinned = unsafe { kp_helper_module_get() };
        pr_warn!(
            "someone else's breakpoint on the jump at {:#x}: it stays, and the \
             engine stays loaded{}\n",
            addr,
            if pinned {
                ""
            } else {
                " (cannot pin it: unloading)"
            }
        );
    }
}

/// Waits (without the registration lock) for the engine's text work to
/// reclaim freed slots if fewer than `n` are free and some wait for it.
pub(crate) fn reclaim_slots_for(n: usize) {
    if crate::slots::free_count() < n && crate::slots::reclaimable() {
        (hooks::get().reclaim_now)();
    }
}
