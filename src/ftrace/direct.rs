// SPDX-License-Identifier: GPL-2.0

//! Direct sites (x86_64, `DYNAMIC_FTRACE_WITH_DIRECT_CALLS`): a probed
//! function entry whose ftrace site calls the engine's trampoline
//! (`arch/x86_64/ftrace.rs`) through a direct `ftrace_ops` of its own, the
//! cheapest entry there is. `src/ftrace.c` makes and frees such an ops
//! (what Rust cannot reach); this is the policy: which site gets one, the
//! cap, and when one goes.
//!
//! Taking a direct ops down is slow: `ftrace_shutdown()` of a dynamic ops
//! waits for tasks-RCU (40-230 ms each in the test VMs). So a disarmed site
//! is *parked*: it keeps calling the trampoline, which finds no probe there
//! and returns, and re-arming it costs nothing. A worker moves the sites
//! parked for [`PARK_DELAY`] out of the table onto the *dying* list and
//! takes them down, one at a time, without the registration lock (ftrace
//! holds its own `ftrace_lock` and `direct_mutex` through each wait, so an
//! entry probe registered meanwhile waits for that one site, and
//! registrations that touch no ftrace state do not wait at all). A module
//! going away and the engine's exit take their parked and dying sites down
//! at once ([`release`]), waiting for the one the worker is taking down if
//! it is theirs.
//!
//! The table (armed and parked sites) is under the registration lock; the
//! dying list under its own mutex (`kp_direct_dying_lock()`), which the
//! worker takes without the registration lock. Both are fixed arrays of
//! [`MAX`] entries: nothing here allocates but the ops itself.

use crate::lock::{LockedBy, RegGuard, RegLocked};
use core::sync::atomic::{AtomicUsize, Ordering};
use kernel::ffi::{c_int, c_ulong, c_void};
use kernel::prelude::*;

/// Direct sites at most (each holds an `ftrace_ops` and its filter hash,
/// and costs a tasks-RCU wait to take down); more go to the shared ops.
const MAX: usize = 128;

extern "C" {
    fn kp_direct_available() -> bool;
    fn kp_direct_ops_new(ip: c_ulong, err: *mut c_int) -> *mut c_void;
    fn kp_direct_ops_free(ops: *mut c_void) -> c_int;
    fn kp_direct_reap_later(delay: c_ulong);
    fn kp_direct_reap_stop();
    fn kp_direct_park_delay() -> c_ulong;
    fn kp_direct_dying_lock();
    fn kp_direct_dying_unlock();
    fn kp_direct_set_reaping(ip: c_ulong);
    fn kp_direct_wait_reaped(module: *mut c_void);
    fn kp_helper_module_get() -> bool;
}

/// One direct site (`ip` 0: a free entry).
#[derive(Clone, Copy)]
struct Site {
    ip: usize,
    /// Its `ftrace_ops` (`src/ftrace.c`).
    ops: *mut c_void,
    parked: bool,
    /// When it was parked (jiffies).
    parked_at: c_ulong,
}

const FREE: Site = Site {
    ip: 0,
    ops: core::ptr::null_mut(),
    parked: false,
    parked_at: 0,
};

/// Armed and parked sites.
static TABLE: RegLocked<[Site; MAX]> = RegLocked::new([FREE; MAX]);

/// Holds the dying list's mutex.
///
/// INVARIANT: while a `Dying` exists, this task holds the mutex.
struct Dying(core::marker::PhantomData<*mut ()>);

// SAFETY: made only by `Dying::lock`, which takes the dying list's mutex;
// dropping it releases the mutex.
unsafe impl crate::lock::Guard for Dying {}

impl Dying {
    fn lock() -> Self {
        // SAFETY: process context.
        unsafe { kp_direct_dying_lock() };
        Dying(core::marker::PhantomData)
    }
}

impl Drop for Dying {
    fn drop(&mut self) {
        // SAFETY: held (type invariant).
        unsafe { kp_direct_dying_unlock() };
    }
}

/// Sites out of the table on their way down.
static DYING: LockedBy<[Site; MAX], Dying> = LockedBy::new([FREE; MAX]);

/// Every site until it is freed, dying ones too (the cap).
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn jiffies() -> c_ulong {
    // SAFETY: a read of the kernel's tick counter (a volatile word).
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!(kernel::bindings::jiffies)) }
}

/// Makes `ip` a direct site (or finds it one already, unparking it): true.
/// False when it cannot be one (no direct calls here, the cap reached,
/// someone else's direct call there or one of ours still dying): the
/// shared ops serves it. Registration lock held.
pub(super) fn arm(g: &RegGuard, ip: usize) -> Result<bool> {
    // SAFETY: the lock is held (`g`), and this is the only reference into
    // the table while it lives (so below).
    let t = unsafe { &mut *TABLE.get(g) };
    if let Some(s) = t.iter_mut().find(|s| s.ip == ip) {
        s.parked = false;
        return Ok(true);
    }
    // SAFETY: a plain query.
    if !unsafe { kp_direct_available() } || COUNT.load(Ordering::Relaxed) >= MAX {
        return Ok(false);
    }
    // Every site in the table counts, so a free entry exists.
    let Some(slot) = t.iter_mut().find(|s| s.ip == 0) else {
        return Ok(false);
    };
    let mut err: c_int = 0;
    // SAFETY: process context, registration lock held; `err` is writable.
    let ops = unsafe { kp_direct_ops_new(ip as c_ulong, &mut err) };
    if ops.is_null() {
        return if err == -(kernel::bindings::EBUSY as c_int) {
            Ok(false)
        } else {
            Err(Error::from_errno(err))
        };
    }
    *slot = Site {
        ip,
        ops,
        parked: false,
        parked_at: 0,
    };
    COUNT.fetch_add(1, Ordering::Relaxed);
    Ok(true)
}

/// Parks `ip` if it is a direct site: true. Registration lock held.
pub(super) fn disarm(g: &RegGuard, ip: usize) -> bool {
    // SAFETY: as in `arm`.
    let Some(s) = unsafe { &mut *TABLE.get(g) }
        .iter_mut()
        .find(|s| s.ip == ip)
    else {
        return false;
    };
    if !s.parked {
        s.parked = true;
        s.parked_at = jiffies();
        // SAFETY: schedules the worker (a no-op when it is pending).
        unsafe { kp_direct_reap_later(kp_direct_park_delay()) };
    }
    true
}

/// Moves a parked site out of the table onto the dying list. Registration
/// lock held.
fn doom(s: &mut Site) {
    let mut d = Dying::lock();
    // The dying list holds what the table and the cap let in: a free entry
    // is always there.
    if let Some(free) = DYING.get_mut(&mut d).iter_mut().find(|x| x.ip == 0) {
        *free = *s;
        *s = FREE;
    } else {
        pr_warn!(
            "ftrace site {}: no room on the dying list; it stays parked\n",
            crate::symbols::Shown(s.ip)
        );
    }
}

/// Takes down a site that is out of every list (a tasks-RCU wait: no task
/// is in the trampoline for it afterwards) and frees it.
fn free(s: Site) {
    let mut tries: u32 = 0;
    loop {
        // SAFETY: `s.ops` is a registered direct ops of ours, in no list.
        let r = unsafe { kp_direct_ops_free(s.ops) };
        if r == 0 {
            break;
        }
        // It fails only when ftrace is broken (it disabled itself after a
        // failed text change: -ENODEV) or misused. The site may then still
        // call the trampoline: the ops stays (leaked, loudly), and so must
        // this module, or the site's next call would run freed text.
        // Pinned while it can be; while unloading (it cannot be pinned any
        // more) unload waits, retrying, rather than leave.
        // SAFETY: try_module_get(THIS_MODULE).
        if unsafe { kp_helper_module_get() } {
            pr_err!(
                "cannot release the ftrace site {}: {}; the engine stays loaded for good\n",
                crate::symbols::Shown(s.ip),
                r
            );
            return;
        }
        if tries % 60 == 0 {
            pr_err!(
                "cannot release the ftrace site {} while unloading: {}; retrying\n",
                crate::symbols::Shown(s.ip),
                r
            );
        }
        tries = tries.wrapping_add(1);
        // SAFETY: process context.
        unsafe { kernel::bindings::msleep_interruptible(1000) };
    }
    COUNT.fetch_sub(1, Ordering::Relaxed);
}

/// Takes the first dying site that `keep` selects off the list.
fn take_dying(keep: impl Fn(usize) -> bool, reaping: bool) -> Option<Site> {
    let mut d = Dying::lock();
    let s = DYING
        .get_mut(&mut d)
        .iter_mut()
        .find(|s| s.ip != 0 && keep(s.ip))?;
    let taken = core::mem::replace(s, FREE);
    if reaping {
        // SAFETY: under the dying mutex, as the waiters read it.
        unsafe { kp_direct_set_reaping(taken.ip as c_ulong) };
    }
    Some(taken)
}

/// The worker (`src/ftrace.c` schedules it): sites parked long enough
/// leave the table, then the dying ones go, one at a time, without the
/// registration lock. Process context.
#[no_mangle]
pub(crate) extern "C" fn kp_direct_reap() {
    // SAFETY: a constant's getter.
    let delay = unsafe { kp_direct_park_delay() };
    let mut next: Option<c_ulong> = None;
    {
        let mut g = RegGuard::lock();
        let now = jiffies();
        for s in TABLE
            .get_mut(&mut g)
            .iter_mut()
            .filter(|s| s.ip != 0 && s.parked)
        {
            let left = s.parked_at.wrapping_add(delay).wrapping_sub(now) as isize;
            if left > 0 {
                let left = left as c_ulong;
                next = Some(next.map_or(left, |n| n.min(left)));
            } else {
                doom(s);
            }
        }
    }
    while let Some(s) = take_dying(|_| true, true) {
        free(s);
        // SAFETY: clears what `take_dying` set and wakes the waiters.
        unsafe { kp_direct_set_reaping(0) };
    }
    if let Some(n) = next {
        // SAFETY: schedules the worker again.
        unsafe { kp_direct_reap_later(n) };
    }
}

/// Takes down the parked and dying sites in `module` (every one for null)
/// now, waiting for the one the worker is taking down if it is one of
/// them. Returns how many went. Registration lock held.
pub(super) fn release(g: &RegGuard, module: *mut c_void) -> usize {
    let mine = |ip: usize| module.is_null() || crate::symbols::within_module(ip, module);
    // SAFETY: as in `arm`.
    let t = unsafe { &mut *TABLE.get(g) };
    for s in t.iter_mut().filter(|s| s.ip != 0 && s.parked && mine(s.ip)) {
        doom(s);
    }
    let mut n = 0;
    while let Some(s) = take_dying(mine, false) {
        free(s);
        n += 1;
    }
    // SAFETY: process context; `module` is null or the notifier's.
    unsafe { kp_direct_wait_reaped(module) };
    n
}

/// Stops the worker (it takes the registration lock: not held here).
pub(super) fn stop_reaper() {
    // SAFETY: process context.
    unsafe { kp_direct_reap_stop() };
}

/// Direct sites, and how many of them are parked. Registration lock held.
pub(super) fn sites(g: &RegGuard) -> (u32, u32) {
    // SAFETY: as in `arm`.
    let t = unsafe { &*TABLE.get(g) };
    let parked = t.iter().filter(|s| s.ip != 0 && s.parked).count();
    (COUNT.load(Ordering::Relaxed) as u32, parked as u32)
}
