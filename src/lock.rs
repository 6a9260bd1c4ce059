// SPDX-License-Identifier: GPL-2.0

//! The registration mutex (`src/helpers.c`) and what it guards: every
//! change to probes, points, kretprobe pools, ftrace sites and the jump
//! optimizer's state happens with a [`RegGuard`] held. The bottom layer of
//! the engine: it depends on nothing else here.

extern "C" {
    fn kp_helper_reg_lock();
    fn kp_helper_reg_unlock();
}

/// Holds the registration mutex.
///
/// INVARIANT: while a `RegGuard` exists, this task holds the mutex.
pub(crate) struct RegGuard(core::marker::PhantomData<*mut ()>);

/// A global that only registration paths touch, under the registration
/// mutex: reaching it takes a [`RegGuard`], so the "under the lock" claim
/// is checked by the compiler (as `LockedBy` does in `rust/kernel/sync/`).
/// What the pointer is used for stays `unsafe`: one access at a time.
pub(crate) struct RegLocked<T>(core::cell::UnsafeCell<T>);

// SAFETY: the value is only reached through `get`, which needs the
// registration mutex held: one task at a time.
unsafe impl<T> Sync for RegLocked<T> {}

impl<T> RegLocked<T> {
    pub(crate) const fn new(v: T) -> Self {
        RegLocked(core::cell::UnsafeCell::new(v))
    }

    /// The value, for as long as the lock is held.
    pub(crate) fn get(&self, _g: &RegGuard) -> *mut T {
        self.0.get()
    }
}

impl RegGuard {
    /// Takes the registration mutex. Process context.
    pub(crate) fn lock() -> Self {
        // SAFETY: process context (all callers are registration paths).
        unsafe { kp_helper_reg_lock() };
        RegGuard(core::marker::PhantomData)
    }
}

impl Drop for RegGuard {
    fn drop(&mut self) {
        // SAFETY: we hold the lock (type invariant).
        unsafe { kp_helper_reg_unlock() };
    }
}
