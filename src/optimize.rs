// SPDX-License-Identifier: GPL-2.0

//! Jump optimization of settled probes (the arch's `opt_*`: x86_64 `jmp rel32`,
//! arm64 `B`).
//!
//! A breakpoint probe with no post or fault handler may have its `int3`
//! replaced by a jump to a detour that calls the handlers without a trap
//! (the kernel's optprobes). The protocol, all under the registration lock
//! except the wait:
//!
//! 1. A point is armed: the arch checks the function and builds a detour
//!    for it if it is a candidate, and publishes it
//!    (`arch::OptState::prepare`; as the kernel prepares an optprobe at
//!    registration and queues it at arming): from now on breakpoint hits
//!    resume in the detour's relocated instructions, so no CPU newly enters
//!    the bytes the jump will cover. The optimizer (delayed work, batched)
//!    is kicked; it prepares any candidate not prepared yet the same way.
//! 2. It waits, without the lock, until every task that may have been
//!    inside those bytes left them (`synchronize_rcu_tasks()`), then writes
//!    the jumps (breakpoint first, see the arch): only those prepared
//!    before the wait began. A point armed (and prepared) during the wait
//!    may have had a task inside its bytes then, one that had entered them
//!    while the point was disarmed or before it existed; its jump waits for
//!    the next run's wait (`arch::OptState::prepared_gen`). (The kernel's
//!    optimizer holds `kprobe_mutex` across its wait; this one lets
//!    registrations go on.)
//!
//! Unoptimizing (a probe with a post or fault handler joins, the point is
//! disarmed, a new probe lands inside the jump, the debugfs switch) puts the
//! breakpoint back and the original bytes, then unpublishes the detour; the
//! detour's slot is reused only after every task left it. Readers of text
//! (`arch::read_text`) see the original bytes under a jump.

use crate::arch;
use crate::arch::{Jumps, OptPoint};
use crate::lock::RegGuard;
use crate::registry::{self, hooks::Hooks, Point};
use core::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use kernel::prelude::*;

extern "C" {
    fn kp_helper_opt_schedule();
    fn kp_helper_opt_run_now();
    fn kp_helper_opt_cancel();
}

/// Until engine unload: the work may be scheduled.
static ALIVE: AtomicBool = AtomicBool::new(true);

/// The debugfs `optimize` switch.
static ENABLED: AtomicBool = AtomicBool::new(true);
/// Bumped when a point goes away: a refusal because of a neighbour may no
/// longer hold (`arch::OptState::refused` keeps the epoch + 1 of its
/// refusal).
static EPOCH: AtomicUsize = AtomicUsize::new(0);

/// The optimizer's wait generation, bumped (under the registration lock) as
/// its wait for tasks begins; a point records it when its jump is prepared
/// (`arch::OptState::prepared_gen`). A jump prepared in the generation the
/// running wait began is not covered by that wait. (Wrapping: after 65,536
/// waits a jump prepared long ago may wait once more.)
static GEN: AtomicU16 = AtomicU16::new(0);
/// The optimizer's waits for tasks with jumps to write, begun and ended
/// since the engine loaded (`kp_get_stats()`).
pub(crate) static WAITS: AtomicUsize = AtomicUsize::new(0);
pub(crate) static WAITS_DONE: AtomicUsize = AtomicUsize::new(0);
/// The text work's waits that reclaim freed pieces, begun and ended.
static RECLAIMS: AtomicUsize = AtomicUsize::new(0);
static RECLAIMS_DONE: AtomicUsize = AtomicUsize::new(0);

/// Whether jump optimization is on.
pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Asks for a run of the engine's text work soon (after a short delay that
/// lets a batch of registrations settle). Any context.
fn schedule() {
    if ALIVE.load(Ordering::Relaxed) {
        // SAFETY: schedules the static delayed work; no-op if pending.
        unsafe { kp_helper_opt_schedule() };
    }
}

/// Asks for an optimizer run soon. Any context.
pub(crate) fn kick() {
    if arch::OPT_SUPPORTED && enabled() {
        schedule();
    }
}

/// A point went away (its neighbours may now be optimizable; its slot
/// waits for a reclaim).
pub(crate) fn point_removed() {
    EPOCH.fetch_add(1, Ordering::Relaxed);
    schedule();
}

/// Runs the engine's text work now and waits, up to 2 s, for a reclaim
/// that began after the call: then what was freed before it (slots,
/// detours) is free again. Bounded: a task that never sleeps holds the
/// reclaim up, and it may be waiting for this very registration. For a
/// registration that found no free slot. Without the registration lock;
/// process context.
pub(crate) fn reclaim_now() {
    if !ALIVE.load(Ordering::Relaxed) {
        return;
    }
    let k = RECLAIMS.load(Ordering::Relaxed);
    // SAFETY: schedules the static delayed work at once.
    unsafe { kp_helper_opt_run_now() };
    for _ in 0..200 {
        if RECLAIMS_DONE.load(Ordering::Relaxed) > k || !reclaimable() {
            return;
        }
        // SAFETY: process context.
        unsafe { kernel::bindings::msleep(10) };
    }
}

/// Whether freed slots or detours wait for a reclaim.
fn reclaimable() -> bool {
    crate::slots::reclaimable() || arch::Arch::opt_reclaimable()
}

fn candidate(point: &Point, epoch: usize) -> bool {
    !point.ftrace
        && point.armed.load(Ordering::Relaxed)
        && point.opt.resume() == 0
        && !point.opt.refused_at((epoch as u16).wrapping_add(1))
        && !point.any_post_handler()
}

/// Checks `point`'s function and builds and publishes its detour, if it
/// is a candidate: from then on its hits resume in the detour, and the
/// optimizer's next run writes the jump. Registration lock held.
fn try_prepare(g: &RegGuard, point: &Point, epoch: usize) {
    if !candidate(point, epoch) {
        return;
    }
    let Some(sym) = crate::symbols::symbol_at(point.addr) else {
        return;
    };
    match arch::Arch::opt_prepare(g, point.addr, sym.start, sym.size, |a| {
        registry::lookup(a).is_some()
    }) {
        Ok(o) => point.opt.prepare(o, GEN.load(Ordering::Relaxed)),
        Err((_, true)) => point.opt.set_refused((epoch as u16).wrapping_add(1)),
        Err((_, false)) => {}
    }
}

/// The registry armed `point`: prepared at once, as the kernel's kprobes
/// prepare an optimized probe when it is registered and queue it when it
/// is armed (so that its `kprobes/list` says `[OPTIMIZED]` from then on);
/// the jump waits for the optimizer's delayed run (a batch of
/// registrations shares one wait). Registration lock held.
fn armed(g: &RegGuard, point: &Point) {
    if arch::OPT_SUPPORTED && enabled() {
        try_prepare(g, point, EPOCH.load(Ordering::Relaxed));
        kick();
    }
}

/// `kp_opt_detour_limit()` (`include/kp_kprobes.h`): bounds the detours
/// of a backend that has an area of them; the previous bound or
/// `-EOPNOTSUPP`. A raised bound gives waiting probes their detours at the
/// optimizer's next run. Process context.
#[no_mangle]
pub extern "C" fn kp_opt_detour_limit(n: kernel::ffi::c_ulong) -> kernel::ffi::c_long {
    let prev = arch::Arch::opt_set_detour_limit(&RegGuard::lock(), n);
    match prev {
        Some(p) => {
            kick();
            p as kernel::ffi::c_long
        }
        None => crate::errno::eopnotsupp().to_errno() as kernel::ffi::c_long,
    }
}

/// Whether `point` waits for its jump (prepared, not jumped yet).
fn pending(point: &Point) -> bool {
    point.opt.resume() != 0 && !point.opt.jumped()
}

/// The engine's text work (delayed): reclaims freed slots and detours,
/// prepares detours for candidates, waits for tasks (without the lock),
/// then frees what was reclaimed and writes the jumps prepared before the
/// wait.
#[no_mangle]
pub(crate) extern "C" fn kp_optimizer_run() {
    let (gen, reclaiming, jumps) = {
        let g = RegGuard::lock();
        // Pieces freed before the wait: free after it.
        let reclaiming = crate::slots::begin_reclaim() | arch::Arch::opt_begin_reclaim(&g);
        let mut waiting = 0;
        if enabled() {
            let epoch = EPOCH.load(Ordering::Relaxed);
            registry::for_each_point(&g, |point| {
                try_prepare(&g, point, epoch);
                if pending(point) {
                    waiting += 1;
                }
            });
        }
        if waiting == 0 && !reclaiming {
            return;
        }
        // Jumps prepared from now on (registrations during the wait) are
        // of the next generation.
        if waiting != 0 {
            WAITS.fetch_add(1, Ordering::Relaxed);
        }
        if reclaiming {
            RECLAIMS.fetch_add(1, Ordering::Relaxed);
        }
        let gen = GEN.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        (gen, reclaiming, waiting != 0)
    };
    // Tasks that were inside the bytes to be covered (preempted, or
    // interrupted there) leave them; new ones cannot enter.
    // SAFETY: process context (workqueue).
    unsafe { kernel::bindings::synchronize_rcu_tasks() };
    let g = RegGuard::lock();
    if jumps {
        WAITS_DONE.fetch_add(1, Ordering::Relaxed);
    }
    if reclaiming {
        crate::slots::finish_reclaim();
        arch::Arch::opt_finish_reclaim(&g);
        RECLAIMS_DONE.fetch_add(1, Ordering::Relaxed);
    }
    // Candidates that found no free detour before: the next run.
    let mut later = reclaiming;
    registry::for_each_point(&g, |point| {
        if !jumps || !enabled() || point.opt.resume() == 0 || point.opt.jumped() {
            return;
        }
        if point.opt.prepared_gen() == gen {
            // Prepared during the wait (armed then): a task may have been
            // inside its bytes when the wait began.
            later = true;
            return;
        }
        // Prepared before the wait began, and still prepared (unoptimizing
        // clears it; preparing again would have moved it to `gen`).
        let o = point.opt.insn();
        match arch::Arch::opt_jump(point.addr, &o) {
            Ok(()) => {
                point.opt.set_jumped(true);
                registry::set_optimized_flag(&g, point, true);
            }
            Err(e) => {
                // EBUSY: someone else's patch appeared under the jump during
                // the wait (not an error of ours). Either way back on the
                // breakpoint, and not tried again this epoch (as a refusal at
                // prepare time: each try would cost a wait).
                if e != EBUSY {
                    pr_err!("cannot optimize the probe at {:#x}: {:?}\n", point.addr, e);
                }
                let _ = unoptimize(&g, point);
                point
                    .opt
                    .set_refused((EPOCH.load(Ordering::Relaxed) as u16).wrapping_add(1));
            }
        }
    });
    if later {
        // Their own wait, in the next run.
        kick();
    }
    // Freed during the wait: their own.
    if reclaimable() {
        schedule();
    }
}

/// Puts `point` back on its breakpoint (no-op if it is not optimized).
/// Registration lock held.
pub(crate) fn unoptimize(g: &RegGuard, point: &Point) -> Result {
    drop_jump(g, point, true)
}

/// Forgets `point`'s jump without touching the text (its module's text is
/// going away). Registration lock held.
pub(crate) fn forget(g: &RegGuard, point: &Point) {
    // Cannot fail without a text write.
    let _ = drop_jump(g, point, false);
}

/// Takes the jump off `point` (with the original bytes written back if
/// `restore`) and unpublishes its detour. Registration lock held.
fn drop_jump(g: &RegGuard, point: &Point, restore: bool) -> Result {
    if point.opt.resume() == 0 {
        return Ok(());
    }
    let o = point.opt.insn();
    if point.opt.jumped() {
        if restore {
            arch::Arch::opt_unjump(point.addr, &o)?;
        }
        point.opt.set_jumped(false);
        registry::set_optimized_flag(g, point, false);
    }
    // Hits step the instruction again; a CPU that took the old value may
    // still run the detour, which is freed only after every task left it
    // (the text work's reclaim).
    point.opt.clear();
    arch::Arch::opt_release(&o);
    schedule();
    Ok(())
}

/// Unoptimizes the points whose jump covers `addr` (a probe is about to
/// be placed there). Registration lock held.
pub(crate) fn unoptimize_covering(g: &RegGuard, addr: usize) -> Result {
    for a in addr.saturating_sub(arch::OPT_MAX_SPAN - 1)..addr {
        if let Some(point) = registry::lookup(a) {
            let span = arch::Arch::opt_span(&point.opt.insn());
            if point.opt.resume() != 0 && addr < a + span {
                unoptimize(g, point)?;
            }
        }
    }
    Ok(())
}

/// The debugfs switch: off unoptimizes every probe, on kicks the optimizer.
pub(crate) fn set_enabled(on: bool) -> Result {
    ENABLED.store(on, Ordering::Relaxed);
    if on {
        kick();
        return Ok(());
    }
    let g = RegGuard::lock();
    let mut r = Ok(());
    registry::for_each_point(&g, |point| {
        if let Err(e) = unoptimize(&g, point) {
            r = Err(e);
        }
    });
    r
}

/// Engine unload: no run of the work after this returns.
pub(crate) fn exit() {
    ENABLED.store(false, Ordering::Relaxed);
    ALIVE.store(false, Ordering::Relaxed);
    // SAFETY: process context; cancels and waits for the work.
    unsafe { kp_helper_opt_cancel() };
}

/// The registry's hooks into the optimizer (installed at engine load).
pub(crate) static HOOKS: Hooks = Hooks {
    unlayer: unoptimize,
    unlayer_covering: unoptimize_covering,
    armed,
    removed: point_removed,
    text_gone: forget,
    reclaim_now,
};
