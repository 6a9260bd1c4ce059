// SPDX-License-Identifier: GPL-2.0

//! The registration mutex (`src/helpers.c`) and what it guards: every
//! change to probes, points, kretprobe pools, ftrace sites and the jump
//! optimizer's state happens with a [`RegGuard`] held; and the events mutex
//! ([`EventsGuard`]). Globals under either carry it in their type
//! ([`LockedBy`]). The bottom layer of
//! the engine: it depends on nothing else here.

extern "C" {
    fn kp_helper_reg_lock();
    fn kp_helper_reg_unlock();
    fn kp_events_lock();
    fn kp_events_unlock();
}

/// Holds the registration mutex.
///
/// INVARIANT: while a `RegGuard` exists, this task holds the mutex.
pub(crate) struct RegGuard(core::marker::PhantomData<*mut ()>);

// SAFETY: made only by `RegGuard::lock`, which takes the registration
// mutex; dropping it releases the mutex.
unsafe impl Guard for RegGuard {}

/// A lock's guard.
///
/// # Safety
///
/// While a value of the type exists, its task holds a mutex that no other
/// value of the type can exist without: at most one exists at a time, and
/// only the lock function makes one.
pub(crate) unsafe trait Guard {}

/// A global reached only with the lock whose guard is a `G` held: reaching
/// it takes a `&G` (a pointer, whose use stays `unsafe`) or a `&mut G` (a
/// reference, for as long as the guard is borrowed), so the "under the
/// lock" claims are checked by the compiler (as `LockedBy` does in
/// `rust/kernel/sync/`). Unlike the kernel's, `T` need not be `Send`: the
/// values here are the engine's own tables of raw pointers into memory it
/// manages, reached by whichever task holds the lock.
pub(crate) struct LockedBy<T, G: Guard>(
    core::cell::UnsafeCell<T>,
    core::marker::PhantomData<fn(&G)>,
);

// SAFETY: the value is only reached with the lock held: one task at a time.
unsafe impl<T, G: Guard> Sync for LockedBy<T, G> {}

impl<T, G: Guard> LockedBy<T, G> {
    pub(crate) const fn new(v: T) -> Self {
        LockedBy(core::cell::UnsafeCell::new(v), core::marker::PhantomData)
    }

    /// The value, for as long as the lock is held.
    pub(crate) fn get(&self, _g: &G) -> *mut T {
        self.0.get()
    }

    /// The value, for as long as the guard is borrowed.
    pub(crate) fn get_mut<'a>(&'a self, _g: &'a mut G) -> &'a mut T {
        // SAFETY: one guard exists at a time (the mutex), and it is
        // borrowed mutably for as long as the result lives: nothing else
        // reaches the value meanwhile (`get`'s pointers are used only
        // under a guard borrowed shared, which this borrow excludes).
        unsafe { &mut *self.0.get() }
    }
}

/// A global that only registration paths touch, under the registration
/// mutex.
pub(crate) type RegLocked<T> = LockedBy<T, RegGuard>;

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

/// Holds the events mutex (`src/events.c`): the probe events, their files
/// and the error log change only under it.
///
/// INVARIANT: while an `EventsGuard` exists, this task holds the mutex.
pub(crate) struct EventsGuard(core::marker::PhantomData<*mut ()>);

// SAFETY: made only by `EventsGuard::lock`, which takes the events mutex;
// dropping it releases the mutex.
unsafe impl Guard for EventsGuard {}

impl EventsGuard {
    /// Takes the events mutex. Process context.
    pub(crate) fn lock() -> Self {
        // SAFETY: process context (the control files and module paths).
        unsafe { kp_events_lock() };
        EventsGuard(core::marker::PhantomData)
    }
}

impl Drop for EventsGuard {
    fn drop(&mut self) {
        // SAFETY: we hold the lock (type invariant).
        unsafe { kp_events_unlock() };
    }
}
