// SPDX-License-Identifier: GPL-2.0

//! Registration, unregistration, enable/disable, module unload: a request
//! resolved by `crate::resolve` becomes a point (prepared by the backend,
//! or an ftrace site) and a probe on it, armed when some enabled probe
//! wants it; the jump optimizer is undone before a point is disarmed.

use super::*;
use crate::abi::{
    KpKprobe, KP_FLAG_DISABLED, KP_FLAG_FTRACE, KP_FLAG_FULL_REGS, KP_FLAG_GONE, KP_FLAG_OPTIMIZED,
    KP_FLAG_REGISTERED,
};
use crate::arch;
use crate::arch::{Entries, Insns, OptPoint};
use crate::lock::RegGuard;
use crate::resolve::resolve;
use crate::symbols;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use kernel::bindings;
use kernel::prelude::*;

extern "C" {
    fn kp_helper_module_get() -> bool;
}

/// Whether probes are armed at all (debugfs `enabled`).
pub(super) static GLOBAL_ENABLED: AtomicBool = AtomicBool::new(true);

/// Whether `point`'s breakpoint should be in the text.
pub(super) fn wants_armed(point: &Point) -> bool {
    GLOBAL_ENABLED.load(Ordering::Relaxed)
        && point.probes().any(|p| !p.disabled.load(Ordering::Relaxed))
}

/// Writes the breakpoint, or makes the ftrace site call the engine.
pub(super) fn arm_point(g: &RegGuard, point: &Point) -> Result {
    if point.ftrace {
        let direct = crate::ftrace::arm(g, point.addr)?;
        // Before `armed`: which way this point's hits come (`Point::direct`).
        point.direct.store(direct, Ordering::Relaxed);
        Ok(())
    } else {
        arch::Arch::arm(point.addr, &point.insn)
    }
}

/// Undoes [`arm_point`] (a jump goes first).
pub(super) fn disarm_point(g: &RegGuard, point: &Point) -> Result {
    if point.ftrace {
        crate::ftrace::disarm(g, point.addr)
    } else {
        if let Err(e) = (hooks::get().unlayer)(g, point) {
            if e == EBUSY {
                super::keep::pin_for_good(point.addr);
            }
            return Err(e);
        }
        arch::Arch::disarm(point.addr, &point.insn)
    }
}

/// [`disarm_point`], tried again a few times after a failure: restoring
/// text allocates (the vmap of a text alias, ftrace's filter hashes), and a
/// transient allocation failure must not leave a breakpoint behind. Process
/// context, registration lock held.
pub(super) fn disarm_retrying(g: &RegGuard, point: &Point) -> Result {
    let mut r = disarm_point(g, point);
    for _ in 0..10 {
        if r.is_ok() {
            break;
        }
        // SAFETY: process context.
        unsafe { bindings::msleep(10) };
        r = disarm_point(g, point);
    }
    r
}

/// Whether `p` needs the step to end in a trap (a post or fault handler):
/// no boosting, no jump optimization where it is enabled.
pub(super) fn needs_step(p: &KpKprobe) -> bool {
    p.post_handler.is_some() || p.fault_handler.is_some()
}

/// Recomputes `point.post` after a probe that needs the step left or was
/// disabled (O(probes here): only then). Registration lock held.
pub(super) fn refresh_post(point: &Point) {
    point
        .post
        .store(point.any_post_handler(), Ordering::Relaxed);
}

/// Adds `probe` to `point`'s probes, last. Registration lock held.
pub(super) fn join(g: &RegGuard, point: &Point, probe: *mut Probe) -> Result {
    if let Some(list) = point.list() {
        if !list.try_push(probe) {
            let list = list.compacted()?;
            list.try_push(probe);
            publish_list(g, point, list);
        }
        return Ok(());
    }
    let Held::One(first) = point.held() else {
        // A point kept with no probe (its text could not be restored).
        point.probes.store(probe.cast(), Ordering::Release);
        return Ok(());
    };
    // The second probe: the point gets its list. Readers that still see
    // the single probe run it only, as before this registration; the
    // single probe is in the client's struct: nothing to free.
    let list = ProbeList::with_capacity(2)?;
    list.try_push(first);
    list.try_push(probe);
    point
        .probes
        .store(Held::list(KBox::into_raw(list)), Ordering::Release);
    Ok(())
}

/// Arms or disarms `point` to match [`wants_armed`], after its probes or
/// their state changed. Registration lock held.
pub(super) fn sync_armed(g: &RegGuard, point: &Point) -> Result {
    let want = wants_armed(point);
    if want != point.armed.load(Ordering::Relaxed) {
        if want {
            arm_point(g, point)?;
        } else {
            disarm_point(g, point)?;
        }
        point.armed.store(want, Ordering::Relaxed);
    }
    if want && !point.ftrace {
        (hooks::get().armed)(g, point);
    }
    Ok(())
}

/// Unlinks `point` from its chain. Registration lock held.
pub(super) fn unlink(_g: &RegGuard, point: &Point) {
    let target = point as *const Point as *mut Point;
    let mut link = bucket(point.addr);
    loop {
        let p = link.load(Ordering::Relaxed);
        if p.is_null() {
            return;
        }
        if p == target {
            link.store(point.next.load(Ordering::Relaxed), Ordering::Release);
            (hooks::get().removed)();
            return;
        }
        // SAFETY: under the lock chain members are live.
        link = unsafe { &(*p).next };
    }
}

pub(super) fn register_locked(
    g: &RegGuard,
    p: &mut KpKprobe,
    addr: usize,
    ftrace: bool,
    sym: &symbols::Bounds,
    kret: bool,
) -> Result {
    let disabled = p.flags & KP_FLAG_DISABLED != 0;
    // This probe needs the step and is enabled (see `Point::post`).
    let steps = needs_step(p) && !disabled;
    let probe = Probe::of(p);
    // SAFETY: the record's words in the client's struct (zero: see
    // `check_new`), which stays valid while registered.
    unsafe {
        probe.write(Probe {
            point: AtomicPtr::new(null_mut()),
            disabled: AtomicBool::new(disabled),
            step: needs_step(p),
            kret,
            next_all: null_mut(),
        })
    };
    // On the error paths below: the client's struct as it was.
    let free_probe = || clear_record(probe);

    let point: &'static Point = match lookup(addr) {
        Some(point) => {
            // Join the aggregate; a probe that needs the step takes the
            // point off its jump first.
            if steps {
                if let Err(e) = (hooks::get().unlayer)(g, point) {
                    free_probe();
                    return Err(e);
                }
                // Before its handlers can run (see `Point::post`).
                point.post.store(true, Ordering::Relaxed);
            }
            // In place when there is room; else a bigger copy replaces the
            // list (nobody needs to wait: the new list only adds a probe).
            if let Err(e) = join(g, point, probe) {
                free_probe();
                if steps {
                    refresh_post(point);
                }
                return Err(e);
            }
            point
        }
        None => {
            // A jump covering this address goes first.
            if let Err(e) = (hooks::get().unlayer_covering)(g, addr) {
                free_probe();
                return Err(e);
            }
            let insn = if ftrace {
                arch::Arch::ftrace_insn(g, addr)
            } else {
                match arch::Arch::prepare(g, addr, sym.start, sym.size) {
                    Ok(i) => i,
                    Err(e) => {
                        free_probe();
                        return Err(e);
                    }
                }
            };
            let made = alloc_point(Point {
                addr,
                insn,
                probes: AtomicPtr::new(probe.cast()),
                next: AtomicPtr::new(bucket(addr).load(Ordering::Relaxed)),
                ftrace,
                direct: AtomicBool::new(false),
                post: AtomicBool::new(steps),
                armed: AtomicBool::new(false),
                opt: arch::OptState::none(),
            });
            let point = match made {
                Ok(p) => p,
                Err(e) => {
                    arch::Arch::release(insn);
                    free_probe();
                    return Err(e);
                }
            };
            bucket(addr).store(point, Ordering::Release);
            // SAFETY: just published; only the registration path frees it.
            unsafe { &*point }
        }
    };
    // SAFETY: `probe` is live.
    unsafe {
        (*probe)
            .point
            .store(point as *const _ as *mut _, Ordering::Release)
    };
    if let Err(e) = sync_armed(g, point) {
        // Undo: take the probe off the point again.
        detach(g, probe);
        free_probe();
        return Err(e);
    }
    add_to_all(g, probe);
    let mut set = KP_FLAG_REGISTERED;
    if point.ftrace {
        set |= KP_FLAG_FTRACE;
    }
    if point.opt.jumped() {
        set |= KP_FLAG_OPTIMIZED;
    }
    p.addr = addr as *mut _;
    // SAFETY: `p` is live; registration lock held.
    unsafe { update_flags(p, set, 0) };
    Ok(())
}

/// Takes `probe` off its point without waiting; the last probe out disarms
/// and unlinks the point. Until a grace period has passed, CPUs may still
/// run the probe's handlers and use what is retired.
pub(super) fn detach_begin(g: &RegGuard, probe: *mut Probe) -> Retired {
    // SAFETY: `probe` is live under the lock.
    let pp = unsafe { (*probe).point.load(Ordering::Acquire) };
    if pp.is_null() {
        return Retired::NOTHING; // GONE: already off any point
    }
    // SAFETY: points are live under the lock.
    let point: &'static Point = unsafe { &*pp };
    // SAFETY: `probe` is live.
    unsafe { (*probe).point.store(null_mut(), Ordering::Release) };
    let list = point.list();
    let left = match list {
        Some(list) => {
            list.remove(probe);
            list.live()
        }
        // The only probe. The point goes, or, if its text cannot be
        // restored, stays with no probe: either way no hit may find this
        // probe from now on (its record is cleared after the grace
        // period).
        None => {
            point.probes.store(null_mut(), Ordering::Release);
            0
        }
    };
    if left == 0 {
        if point.armed.load(Ordering::Relaxed) {
            if let Err(e) = disarm_retrying(g, point) {
                // The breakpoint stays: keep the point (and its copy) with
                // no probe on it; hits just run the instruction. The
                // engine must then outlive it: a breakpoint or ftrace site
                // left behind by an unloaded engine would crash the machine
                // at its next hit.
                // SAFETY: plain call; never released (see above).
                let pinned = unsafe { kp_helper_module_get() };
                if !pinned {
                    // The engine is unloading (it cannot be pinned any
                    // more): keep trying, however long it takes, rather
                    // than leave.
                    pr_err!(
                        "cannot restore text at {:#x} while unloading: {:?}; retrying\n",
                        point.addr,
                        e
                    );
                    let mut tries: u32 = 0;
                    while disarm_retrying(g, point).is_err() {
                        tries = tries.wrapping_add(1);
                        if tries % 60 == 0 {
                            pr_err!("still cannot restore text at {:#x}\n", point.addr);
                        }
                        // SAFETY: process context. (Interruptible: not a
                        // hung task, a wait for memory.)
                        unsafe { bindings::msleep_interruptible(1000) };
                    }
                    point.armed.store(false, Ordering::Relaxed);
                    unlink(g, point);
                    return Retired {
                        old_list: null_mut(),
                        point: pp,
                    };
                }
                pr_err!(
                    "cannot restore text at {:#x}: {:?}; leaving it armed, and the \
                     engine loaded for good\n",
                    point.addr,
                    e
                );
                return Retired::NOTHING;
            }
            point.armed.store(false, Ordering::Relaxed);
        }
        unlink(g, point);
        return Retired {
            old_list: null_mut(),
            point: pp,
        };
    }
    // SAFETY: `probe` is live.
    if unsafe { (*probe).step } {
        refresh_post(point);
    }
    let _ = sync_armed(g, point);
    // A list left mostly empty by many removals shrinks (if memory allows;
    // else it just stays larger than needed).
    let mut old_list = null_mut();
    let Some(list) = list else {
        return Retired::NOTHING;
    };
    if list.wants_compaction() {
        if let Ok(new) = list.compacted() {
            old_list = swap_list(g, point, new);
        }
    }
    Retired {
        old_list,
        point: null_mut(),
    }
}

/// Takes `probe` off its point and waits a grace period: on return no CPU
/// runs its handlers any more.
pub(super) fn detach(g: &RegGuard, probe: *mut Probe) {
    let r = detach_begin(g, probe);
    synchronize(g);
    r.finish(g);
}

/// Detaches, unlists and clears a registered probe's record (in the
/// client's struct, see [`Probe`]).
pub(super) fn drop_probe(g: &RegGuard, probe: *mut Probe) {
    detach(g, probe);
    remove_from_all(g, probe);
    // Detached, unlisted, and a grace period passed in `detach`.
    clear_record(probe);
}

/// Unregisters `p` (a no-op with a message when it is not registered).
pub(super) fn unregister_locked(g: &RegGuard, p: &mut KpKprobe) {
    let probe = Probe::of(p);
    if !is_registered(g, probe) {
        pr_err!("unregister of unknown probe {:p}\n", p);
        return;
    }
    drop_probe(g, probe);
}

/// Validates a client's struct before registration.
pub(super) fn check_new(g: &RegGuard, p: &mut KpKprobe) -> Result {
    if p.is_registered() || is_registered(g, Probe::of(p)) {
        pr_err!("probe {:p} is already registered\n", p);
        return Err(EINVAL);
    }
    if p.kp_private.iter().any(|&w| w != 0) {
        pr_err!("probe {:p}: kp_private is not zeroed\n", p);
        return Err(EINVAL);
    }
    Ok(())
}

pub(super) fn register(p: &mut KpKprobe, kret: bool) -> Result {
    match register_once(p, kret) {
        // No free slot while freed ones wait for the engine's text work:
        // that work reclaims them (the registration waits for it without
        // the lock, boundedly) and the registration tries again.
        Err(e) if e == ENOSPC && crate::slots::reclaimable() => {
            (hooks::get().reclaim_now)();
            register_once(p, kret)
        }
        r => r,
    }
}

fn register_once(p: &mut KpKprobe, kret: bool) -> Result {
    let g = RegGuard::lock();
    check_new(&g, p)?;
    // Leftovers of an earlier registration, as the kernel clears them.
    // SAFETY: `p` is live (not registered, checked above).
    unsafe { update_flags(p, 0, !(KP_FLAG_DISABLED | KP_FLAG_FULL_REGS)) };
    p.nmissed = 0;
    let (addr, ftrace, sym) = resolve(&g, p)?;
    register_locked(&g, p, addr, ftrace, &sym, kret)
}

/// Registers the entry probe of a kretprobe (`crate::kretprobe`, which set
/// its pre handler): as `kp_register_kprobe()`, marked as such for the
/// module-unload and `list` paths.
pub(crate) fn register_kret_entry(p: &mut KpKprobe) -> Result {
    register(p, true)
}

/// Unregisters `p` if it is registered (`kp_unregister_kprobe()`, and the
/// kretprobe entry probes): on return no CPU runs its handlers.
pub(crate) fn unregister(p: &mut KpKprobe) {
    if !p.is_registered() {
        return;
    }
    let g = RegGuard::lock();
    unregister_locked(&g, p);
}

pub(super) fn set_disabled(p: &mut KpKprobe, disabled: bool) -> Result {
    let probe = Probe::of(p);
    let g = RegGuard::lock();
    if !is_registered(&g, probe) {
        return Err(EINVAL);
    }
    // SAFETY: a known probe is live under the lock.
    let probe = unsafe { &*probe };
    if p.flags & KP_FLAG_GONE != 0 {
        return Err(EINVAL);
    }
    let pp = probe.point.load(Ordering::Relaxed);
    if !disabled && probe.step && !pp.is_null() {
        // SAFETY: points are live under the lock.
        let point = unsafe { &*pp };
        (hooks::get().unlayer)(&g, point)?;
        // Before its handlers can run (see `Point::post`).
        point.post.store(true, Ordering::Relaxed);
    }
    probe.disabled.store(disabled, Ordering::Relaxed);
    let (set, clear) = if disabled {
        (KP_FLAG_DISABLED, 0)
    } else {
        (0, KP_FLAG_DISABLED)
    };
    // SAFETY: a registered probe's struct is live; lock held.
    unsafe { update_flags(p, set, clear) };
    if disabled && probe.step && !pp.is_null() {
        // SAFETY: points are live under the lock.
        refresh_post(unsafe { &*pp });
    }
    if !pp.is_null() {
        // SAFETY: points are live under the lock.
        let point = unsafe { &*pp };
        if let Err(e) = sync_armed(&g, point) {
            // The probe goes back to what it was, as the kernel's kprobes
            // roll back: enable could not arm (someone else's patch is
            // there now, or no memory), disable could not disarm.
            probe.disabled.store(!disabled, Ordering::Relaxed);
            let (set, clear) = if disabled {
                (0, KP_FLAG_DISABLED)
            } else {
                (KP_FLAG_DISABLED, 0)
            };
            // SAFETY: as above.
            unsafe { update_flags(p, set, clear) };
            if probe.step {
                if disabled {
                    point.post.store(true, Ordering::Relaxed);
                } else {
                    refresh_post(point);
                }
            }
            return Err(e);
        }
    }
    if disabled {
        // On return the handlers no longer run anywhere.
        synchronize(&g);
    }
    Ok(())
}

/// Arms (true) or disarms (false) every probe at once (debugfs `enabled`).
pub(crate) fn set_global_enabled(on: bool) -> Result {
    let g = RegGuard::lock();
    GLOBAL_ENABLED.store(on, Ordering::Relaxed);
    let mut r = Ok(());
    for_each_point(&g, |point| {
        if let Err(e) = sync_armed(&g, point) {
            r = Err(e);
        }
    });
    r
}

/// Whether probes are globally enabled.
pub(crate) fn global_enabled() -> bool {
    GLOBAL_ENABLED.load(Ordering::Relaxed)
}

/// A module is going away: its text loses its probes (they become GONE, the
/// client unregisters them later), and probes whose handlers or descriptions
/// live in it are unregistered (their owner forgot to).
/// A module is going: unregisters the probes whose struct or handlers are
/// in it (calling `kret_going` first for each kretprobe entry probe among
/// them, so that its pool stops calling the kretprobe's handlers) and
/// marks GONE the probes on its text.
pub(crate) fn module_going(
    module: *mut kernel::ffi::c_void,
    kret_going: impl Fn(&RegGuard, *mut KpKprobe),
) {
    let g = RegGuard::lock();
    let within = |a: usize| crate::symbols::within_module(a, module);
    // Probes owned by the going module: unregister them.
    loop {
        let mut victim: *mut Probe = null_mut();
        for_each_probe(&g, |q| {
            // SAFETY: the client's struct is valid while registered.
            if owner_addrs(unsafe { &*q.user() }, q.kret)
                .iter()
                .any(|&a| a != 0 && within(a))
            {
                victim = q as *const Probe as *mut Probe;
            }
        });
        if victim.is_null() {
            break;
        }
        // SAFETY: a listed record is live.
        let user = unsafe { (*victim).user() };
        pr_warn!(
            "module unloading with probe {:p} still registered; unregistering it\n",
            user
        );
        // The struct is valid while registered (module memory stays until
        // after this notifier). A kretprobe's pool must stop calling its
        // handler too, wherever its struct is.
        // SAFETY: a listed record is live.
        if unsafe { (*victim).kret } {
            kret_going(&g, user);
        }
        drop_probe(&g, victim);
    }
    // Points in the going module's text: mark their probes GONE.
    loop {
        let mut gone: Option<&'static Point> = None;
        for_each_point(&g, |point| {
            if within(point.addr) {
                gone = Some(point);
            }
        });
        let Some(point) = gone else { break };
        for probe in point.probes() {
            probe.point.store(null_mut(), Ordering::Release);
            // SAFETY: the user struct is valid while registered.
            unsafe { update_flags(probe.user(), KP_FLAG_GONE, 0) };
        }
        // The text is about to be freed: no need to restore it, but make
        // sure no CPU still runs the copy before the slot is reused. An
        // ftrace site leaves the filter now (ftrace drops the module's
        // records after this notifier).
        if point.ftrace && point.armed.load(Ordering::Relaxed) {
            let _ = disarm_point(&g, point);
            point.armed.store(false, Ordering::Relaxed);
        }
        (hooks::get().text_gone)(&g, point);
        unlink(&g, point);
        free_point(&g, point);
    }
    crate::ftrace::module_going(&g, module);
}

/// Unregisters every probe at engine unload. Only a client bug leaves one
/// behind (client modules keep the engine loaded while they are, and a
/// module going away loses the probes whose struct or handlers were in
/// it): a struct the client allocated, kept registered after its module
/// went. Its record is in that struct (as every hit reads it, the client
/// must not have freed it).
pub(crate) fn remove_all() {
    let g = RegGuard::lock();
    loop {
        let mut first: *mut Probe = null_mut();
        for_each_probe(&g, |q| {
            if first.is_null() {
                first = q as *const Probe as *mut Probe;
            }
        });
        if first.is_null() {
            break;
        }
        // SAFETY: listed records are live.
        let addr = unsafe { (*first).point.load(Ordering::Relaxed) };
        pr_warn!(
            "a probe (point {:p}) is still registered at engine unload; removing it\n",
            addr
        );
        drop_probe(&g, first);
    }
    // Frees lists still waiting in the retired queue.
    synchronize(&g);
}
