// SPDX-License-Identifier: GPL-2.0

//! What the layers above the registry hear from it. The jump optimizer
//! (`crate::optimize`) layers a jump over an armed breakpoint; the registry
//! does not name it, it calls the hooks the engine installed at load
//! ([`set`]): before it disarms a point or gives its breakpoint a probe
//! that needs the step, before it arms a new point under someone's jump,
//! after it armed or removed one, and when a point's text goes away.
//! (Kretprobes hear of a going module through `module_going`'s callback.)

use super::Point;
use crate::lock::RegGuard;
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::prelude::*;

/// The hooks. Called with the registration lock held.
pub(crate) struct Hooks {
    /// `point` must be on its plain breakpoint from now on (it is about to
    /// be disarmed, or to take a probe that needs the step): undo what is
    /// layered on it. An error stops the operation.
    pub(crate) unlayer: fn(&RegGuard, &Point) -> Result,
    /// A new point at this address is about to be armed: undo what covers
    /// the address.
    pub(crate) unlayer_covering: fn(&RegGuard, usize) -> Result,
    /// `point` is armed on its breakpoint (something may be layered on it,
    /// now or later).
    pub(crate) armed: fn(&RegGuard, &Point),
    /// A point left the table.
    pub(crate) removed: fn(),
    /// `point`'s text is going away with its module: forget what is layered
    /// on it without touching the text.
    pub(crate) text_gone: fn(&RegGuard, &Point),
    /// Called WITHOUT the registration lock: waits (at most 2 s) until
    /// what was freed before the call (slots) is free again (a
    /// registration found none).
    pub(crate) reclaim_now: fn(),
}

fn ok(_g: &RegGuard, _p: &Point) -> Result {
    Ok(())
}

fn ok_at(_g: &RegGuard, _a: usize) -> Result {
    Ok(())
}

fn nothing() {}

fn forget(_g: &RegGuard, _p: &Point) {}

/// Until [`set`]: nothing is layered on any point.
static NONE: Hooks = Hooks {
    unlayer: ok,
    unlayer_covering: ok_at,
    armed: forget,
    removed: nothing,
    text_gone: forget,
    reclaim_now: nothing,
};

static HOOKS: AtomicPtr<Hooks> = AtomicPtr::new(core::ptr::null_mut());

/// Installs the hooks. Engine load, before any registration.
pub(crate) fn set(hooks: &'static Hooks) {
    HOOKS.store(core::ptr::from_ref(hooks).cast_mut(), Ordering::Release);
}

/// The installed hooks.
pub(crate) fn get() -> &'static Hooks {
    let h = HOOKS.load(Ordering::Acquire);
    if h.is_null() {
        &NONE
    } else {
        // SAFETY: only `set` stores, from a `&'static Hooks`.
        unsafe { &*h }
    }
}
