// SPDX-License-Identifier: GPL-2.0

//! Text a probe must not touch, as the kernel's tables say: instructions
//! with an exception-table fixup, functions that hold or take the text
//! lock, jump-label and ftrace sites, and the bounds of kernel text.

use super::*;

/// Whether the instruction at `addr` has an exception-table entry (a fixup
/// for a fault it may take, e.g. a user access). Process context.
pub(crate) fn has_extable_entry(addr: usize) -> bool {
    let f = SEARCH_EXTABLES.load(Ordering::Acquire);
    if f == 0 {
        return true; // cannot tell: be safe
    }
    let mut fixup = 0;
    // SAFETY: `f` is `search_exception_tables` (or its gate), resolved in
    // `init`; it takes the RCU read lock it needs itself.
    unsafe { kp_call_search_exception_tables(f, addr, &mut fixup) }
}

/// Where the exception fixup of the instruction at `addr` lands, if it has
/// one. Process context.
// A backend service (only the x86_64 jump optimization uses it).
#[allow(dead_code)]
pub(crate) fn extable_landing(addr: usize) -> Option<usize> {
    let f = SEARCH_EXTABLES.load(Ordering::Acquire);
    if f == 0 {
        return None;
    }
    let mut fixup = 0;
    // SAFETY: as in `has_extable_entry`.
    unsafe { kp_call_search_exception_tables(f, addr, &mut fixup) }.then_some(fixup)
}

/// The kernel's `text_mutex`, held: every writer of kernel text takes it
/// (`text_poke()` asserts it), which orders the engine's writes with jump
/// labels, static calls, alternatives and ftrace. Process context.
pub(crate) struct TextLock {
    _held: CheckGuard,
}

impl TextLock {
    /// Takes `text_mutex` (nothing when it could not be resolved).
    pub(crate) fn lock() -> Self {
        TextLock {
            _held: CheckGuard::lock(),
        }
    }
}

/// `text_mutex` held (process context); nothing when it could not be
/// resolved.
struct CheckGuard(usize);

impl CheckGuard {
    fn lock() -> Self {
        let mutex = TEXT_MUTEX.load(Ordering::Acquire);
        if mutex != 0 {
            // SAFETY: `text_mutex`, resolved in `init`, is a `struct mutex`.
            unsafe { bindings::mutex_lock(mutex as *mut bindings::mutex) };
        }
        CheckGuard(mutex)
    }
}

impl Drop for CheckGuard {
    fn drop(&mut self) {
        if self.0 != 0 {
            // SAFETY: locked in `lock`.
            unsafe { bindings::mutex_unlock(self.0 as *mut bindings::mutex) };
        }
    }
}

/// What [`reserved_by`] says of an ftrace call site.
pub(crate) const FTRACE_SITE: &str = "an ftrace call site";

/// Why the text at `addr` belongs to another kernel text-patching user, if
/// it does: jump labels, static calls, alternatives, or an ftrace call site
/// within `[addr, addr + ftrace_guard]` (the arch says how far ftrace's
/// bytes reach back, e.g. arm64's per-function ops literal).
pub(crate) fn reserved_by(addr: usize, ftrace_guard: usize) -> Option<&'static str> {
    reserved_range_by(addr, addr + 1, ftrace_guard)
}

/// [`reserved_by`] for any byte of `[start, end)`.
pub(crate) fn reserved_range_by(
    start: usize,
    end: usize,
    ftrace_guard: usize,
) -> Option<&'static str> {
    let last = end - 1;
    let (lock, unlock) = (
        JUMP_LABEL_LOCK.load(Ordering::Acquire),
        JUMP_LABEL_UNLOCK.load(Ordering::Acquire),
    );
    let (lock, unlock) = if lock != 0 && unlock != 0 {
        (lock, unlock)
    } else {
        (0, 0)
    };
    for (which, (slot, (why, _))) in RESERVED_FNS.iter().zip(RESERVED_CHECKS.iter()).enumerate() {
        let f = slot.load(Ordering::Acquire);
        if f == 0 {
            continue;
        }
        let _held = (which == RESERVED_TEXT_LOCKED).then(CheckGuard::lock);
        // SAFETY: `f` is the check `which` names (or its gate), resolved in
        // `init`, as are the jump-label lock functions; `text_mutex` is
        // held for the check that wants it.
        let reserved =
            unsafe { kp_call_text_reserved(f, which as c_uint, lock, unlock, start, last) } != 0;
        if reserved {
            return Some(why);
        }
    }
    if ftrace_location_range(start, last + ftrace_guard).is_some_and(|site| site != 0) {
        return Some(FTRACE_SITE);
    }
    None
}

/// `ftrace_location_range(start, last)`: the first ftrace call site in
/// `start..=last`, 0 if none; `None` when the function could not be
/// resolved.
pub(crate) fn ftrace_location_range(start: usize, last: usize) -> Option<usize> {
    let f = FTRACE_LOCATION_RANGE.load(Ordering::Acquire);
    if f == 0 {
        return None;
    }
    // SAFETY: `f` is `ftrace_location_range` (or its gate), resolved in
    // `init`.
    Some(unsafe { kp_call_ftrace_location_range(f, start, last) } as usize)
}

/// Whether ftrace has a call site anywhere in `start..=last`; `None` when
/// `ftrace_location_range` could not be resolved.
pub(crate) fn has_ftrace_site(start: usize, last: usize) -> Option<bool> {
    ftrace_location_range(start, last).map(|site| site != 0)
}

/// Whether `addr` is exactly an ftrace call site.
pub(crate) fn is_ftrace_site(addr: usize) -> bool {
    ftrace_location_range(addr, addr) == Some(addr)
}

/// Whether `addr` lies in the kernel image's text, head text included
/// (`_text` .. `_etext`).
pub(crate) fn in_kernel_image_text(addr: usize) -> bool {
    (TEXT.load(Ordering::Relaxed)..ETEXT.load(Ordering::Relaxed)).contains(&addr)
}

/// Whether `addr` lies in the core kernel's `.text` (`_stext` .. `_etext`).
pub(crate) fn in_kernel_text(addr: usize) -> bool {
    (STEXT.load(Ordering::Relaxed)..ETEXT.load(Ordering::Relaxed)).contains(&addr)
}
