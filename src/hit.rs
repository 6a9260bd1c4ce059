// SPDX-License-Identifier: GPL-2.0

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
//! The arch-independent trap path: run handlers, step, account misses.
//!
//! The arch trap glue calls [`on_break`] when a breakpoint fires and
//! [`on_step_done`] when the breakpoint after an out-of-line copy fires. Both
//! run with interrupts off on the trapping CPU, possibly in NMI context, and
//! take no locks: the registry is read through RCU-style publication (see
//! `registry.rs`).
//!
//! Semantics follow the kernel's kprobes: the enabled probes of a point run
//! their pre handlers in registration order; the first one that returns
//! non-zero has changed the registers and ends the hit (no step, no post
//! handlers). Otherwise the original instruction runs and every enabled
//! probe's post handler follows. A hit while this CPU is already handling one
//! (a handler calls a probed function, an NMI) runs no handlers: it counts in
//! each enabled probe's `nmissed`, and the instruction still runs.

use crate::arch;
use crate::arch::{Entries, OptPoint, Steps, Traps};
use crate::percpu::{stage, Cpu, Frame, MAX_DEPTH};
use crate::registry::{self, Point, Probe};
use core::sync::atomic::Ordering;
use kernel::bindings;
use kernel::prelude::*;

/// Iterates the enabled probes of `point`.
#[inline(always)]
fn enabled(point: &Point) -> impl Iterator<Item = &Probe> {
    point
        .probes()
        .filter(|p| !p.disabled.load(Ordering::Relaxed))
}

/// A breakpoint at `addr` fired. Returns whether it was ours; if so `regs`
/// say where to resume.
// One caller (the backend's trap glue, through `Core`): inlined there, as
// when the glue called it by name.
#[inline(always)]
pub(crate) fn on_break(addr: usize, regs: &mut bindings::pt_regs) -> bool {
    let Some(point) = registry::lookup(addr) else {
        return false;
    };
    // SAFETY: trap context, interrupts off.
    let cpu = unsafe { Cpu::this() };
    let frame = |stage| Frame {
        point,
        stage,
        saved: 0,
    };
    if cpu.depth() > 0 || !arch::Arch::handlers_may_run() {
        // A hit while this CPU handles another (or where a probe hit in
        // what the handlers call would be lost: `Traps::handlers_may_run`):
        // count it, run no handler, still execute the instruction. Only a
        // step takes a level; the rest keeps no state, so it works at any
        // depth (a probe that the way out of its own trap hits again, or
        // one in what `die()` runs then: with every level taken, such hits
        // went to the kernel as stray breakpoints, and `die()` hitting
        // them deadlocked on its own lock instead of reporting).
        let resume = point.opt.resume();
        if resume != 0 {
            // Jump-optimized (or about to be): the detour runs the covered
            // instructions.
            arch::regs::set_ip(regs, resume);
        } else if !arch::Arch::simulate(point.addr, &point.insn, regs) {
            if arch::Arch::boostable(&point.insn) {
                // No handler to run after it: the copy jumps back by itself.
                arch::Arch::setup_boost(point.addr, &point.insn, regs);
            } else if cpu.depth() >= MAX_DEPTH {
                // Nested deeper than we track: let the kernel report it
                // loudly.
                return false;
            } else {
                step(cpu, frame(stage::STEPPING_MISSED), regs);
            }
        }
        for p in enabled(point) {
            p.count_missed();
        }
        crate::missed::count(&crate::missed::REENTRY);
        return true;
    }
    let Some(level) = cpu.push(frame(stage::HANDLERS)) else {
        return false;
    };
    if run_pre(point, regs) {
        // The handler redirected execution: no step, no post.
        cpu.pop();
        return true;
    }
    let resume = point.opt.resume();
    if resume != 0 {
        // A jump is prepared or written here (never with post handlers):
        // resume in the detour's copy of the covered instructions, never
        // inside them (`optimize.rs`).
        arch::regs::set_ip(regs, resume);
        cpu.pop();
    } else if arch::Arch::simulate(point.addr, &point.insn, regs) {
        // Done in place: straight to the post handlers (still busy).
        run_post(point, regs);
        cpu.pop();
    } else if arch::Arch::boostable(&point.insn) && !point.post.load(Ordering::Relaxed) {
        // Boosted: the copy jumps back by itself; no second trap, no post
        // handler to run (as the kernel boosts only without post handlers).
        arch::Arch::setup_boost(point.addr, &point.insn, regs);
        cpu.pop();
    } else {
        // The same level now steps the copy.
        let mut f = frame(stage::STEPPING);
        arch::Arch::setup_step(point.addr, &point.insn, regs, &mut f.saved);
        cpu.set_frame(level, f);
    }
    true
}

/// Set once a redirect on the ftrace path could not be honoured (reported
/// once).
static REDIRECT_REFUSED: core::sync::atomic::AtomicBool =
    core::sync::atomic::AtomicBool::new(false);

/// The engine's ftrace_ops saw the call site `ip` with the saved `regs`
/// (interrupts off, `src/ftrace.c`): the kernel's kprobes-on-ftrace
/// semantics. The pre handlers see the instruction pointer one past the site
/// (x86_64, as after an int3); one returning non-zero has set where to
/// resume. Otherwise the call site counts as executed: the post handlers see
/// the instruction pointer past it, and the function goes on where ftrace
/// was called from.
#[no_mangle]
pub(crate) extern "C" fn kp_ftrace_hit(ip: usize, regs: *mut bindings::pt_regs) {
    // SAFETY: the ftrace callback passes its saved registers, ours to use;
    // it disabled interrupts.
    unsafe { on_ftrace(ip, &mut *regs, false) }
}

/// The ftrace call site `ip` was reached with `regs`, through the shared
/// `ftrace_ops` callback above or (`direct`) the x86_64 direct-call
/// trampoline: see [`kp_ftrace_hit`]. On return `regs.ip` is where to
/// resume: as it came unless a pre handler redirected.
///
/// # Safety
///
/// Interrupts are off.
#[inline(always)]
pub(crate) unsafe fn on_ftrace(ip: usize, regs: &mut bindings::pt_regs, direct: bool) {
    // A parked or dying direct site (`src/ftrace.c`) calls in with no probe
    // there, with a point that is not armed (debugfs `enabled` 0), or with
    // one served the other way.
    let Some(point) = registry::lookup(ip).filter(|p| {
        p.ftrace && p.armed.load(Ordering::Relaxed) && p.direct.load(Ordering::Relaxed) == direct
    }) else {
        return;
    };
    // SAFETY: interrupts are off (the caller's contract).
    let Some(cpu) = (unsafe { begin_handlers(point) }) else {
        return;
    };
    let (orig_ip, orig_sp) = (arch::regs::ip(regs), arch::regs::sp(regs));
    arch::regs::set_ip(regs, ip.wrapping_add(arch::FTRACE_PRE_IP_OFFSET));
    if run_pre(point, regs) {
        // Redirected: ftrace resumes at the new instruction pointer (a
        // return-to-caller goes through a `ret` stub, as ftrace keeps the
        // stack pointer).
        if !arch::Arch::ftrace_fixup_redirect(regs, orig_sp, orig_ip)
            && !REDIRECT_REFUSED.swap(true, Ordering::Relaxed)
        {
            pr_err!(
                "ftrace entry probe at {:#x}: a handler moved the stack pointer; \
                 only a return to the caller can be honoured there\n",
                ip
            );
        }
        cpu.pop();
        return;
    }
    arch::regs::set_ip(regs, ip.wrapping_add(arch::FTRACE_SITE_LEN));
    run_post(point, regs);
    arch::regs::set_ip(regs, orig_ip);
    cpu.pop();
}

/// The jump to `addr`'s detour was taken (jump optimization): run
/// the pre handlers with `regs` as at the probed instruction. True when one
/// redirected execution (`regs` say where); otherwise the detour goes on
/// with the covered instructions. No post handler runs: a point with one is
/// never optimized. Interrupts off. `enter` runs once this CPU is marked
/// busy, before the handlers, and what it returns is dropped after them
/// (arm64: telling the kernel's IRQ-state tracking that interrupts are
/// off; kernel code it calls that hits a probe of its own then finds the
/// CPU busy instead of recursing).
// One caller (the backend's trap glue, through `Core`): inlined there, as
// when the glue called it by name.
#[inline(always)]
pub(crate) fn on_jump<G>(
    addr: usize,
    regs: &mut bindings::pt_regs,
    enter: impl FnOnce() -> G,
) -> bool {
    // Not armed (any more): a task that took the jump long ago (preempted
    // before the detour masked interrupts) runs no handler after a
    // disable; it goes on with the detour's copy.
    let Some(point) = registry::lookup(addr).filter(|p| p.armed.load(Ordering::Relaxed)) else {
        return false;
    };
    // SAFETY: interrupts are off (the detour masked them).
    let Some(cpu) = (unsafe { begin_handlers(point) }) else {
        return false;
    };
    let guard = enter();
    let redirected = run_pre(point, regs);
    drop(guard);
    cpu.pop();
    redirected
}

/// For the trap-less paths (ftrace, detour): marks this CPU busy with
/// `point`'s handlers, or, inside another probe's handler on this CPU (or
/// where handlers may not run, `Traps::handlers_may_run`), counts a miss on
/// each enabled probe and returns `None` (run nothing).
///
/// # Safety
///
/// Interrupts are off.
#[inline(always)]
unsafe fn begin_handlers(point: &Point) -> Option<Cpu> {
    // SAFETY: interrupts are off (the caller's contract).
    let cpu = unsafe { Cpu::this() };
    if cpu.depth() > 0 || !arch::Arch::handlers_may_run() {
        for p in enabled(point) {
            p.count_missed();
        }
        crate::missed::count(&crate::missed::REENTRY);
        return None;
    }
    cpu.push_first_handlers(point);
    Some(cpu)
}

/// Runs the pre handler of each enabled probe, in registration order; true when one returned non-zero (it redirected
/// execution: the rest do not run). The caller marks this CPU busy.
#[inline(always)]
fn run_pre(point: &Point, regs: &mut bindings::pt_regs) -> bool {
    if let Some(p) = point.single() {
        return pre_one(p, regs);
    }
    // `pre_one` skips disabled probes.
    point.probes().any(|p| pre_one(p, regs))
}

/// Runs `p`'s pre handler, if it is enabled; true when the handler
/// redirected execution.
#[inline(always)]
fn pre_one(p: &Probe, regs: &mut bindings::pt_regs) -> bool {
    if p.disabled.load(Ordering::Relaxed) {
        return false;
    }
    // SAFETY: `user` is valid while registered.
    match unsafe { (*p.user()).pre_handler } {
        Some(pre) => {
            let ip = crate::arch::regs::ip(regs);
            // SAFETY: the contract of kp_pre_handler_t.
            let redirected = unsafe { pre(p.user(), regs) != 0 };
            // A handler that claims a redirect without moving the
            // instruction pointer would resume inside the probed
            // instruction (x86_64: ip is its address + 1) or hit the probe
            // again forever (arm64): run the instruction instead.
            redirected && crate::arch::regs::ip(regs) != ip
        }
        None => false,
    }
}

/// Runs the enabled probes' post handlers. The caller marks this CPU busy.
#[inline(always)]
fn run_post(point: &Point, regs: &mut bindings::pt_regs) {
    if !point.post.load(Ordering::Relaxed) {
        return;
    }
    if let Some(p) = point.single() {
        post_one(p, regs);
        return;
    }
    // `post_one` skips disabled probes.
    for p in point.probes() {
        post_one(p, regs);
    }
}

/// Runs `p`'s post handler, if it is enabled and has one.
#[inline(always)]
fn post_one(p: &Probe, regs: &mut bindings::pt_regs) {
    if p.disabled.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: `user` is valid while registered.
    if let Some(post) = unsafe { (*p.user()).post_handler } {
        // SAFETY: the contract of kp_post_handler_t.
        unsafe { post(p.user(), regs, 0) };
    }
}

/// Reserves a level for `f` and sends the CPU to the out-of-line copy.
fn step(cpu: Cpu, mut f: Frame, regs: &mut bindings::pt_regs) {
    // SAFETY: the frame's point is live (the caller found it).
    let point = unsafe { &*f.point };
    arch::Arch::setup_step(point.addr, &point.insn, regs, &mut f.saved);
    // Depth was checked by the caller; push cannot fail.
    let _ = cpu.push(f);
}

/// A trap `trapnr` other than a breakpoint at `regs`, with interrupts off.
///
/// - This CPU runs an out-of-line copy and the fault is in it: the probes'
///   fault handlers run (for a hit whose handlers ran), seeing the
///   instruction pointer at the probed instruction; one that returns
///   non-zero has fixed the registers and the trap is handled (true).
///   Otherwise the step is abandoned with the instruction pointer back at
///   the probed instruction, so that the kernel reports the fault where it
///   really is (false; instructions with an exception-table fixup are never
///   probed).
/// - This CPU runs a pre or post handler: the fault handlers get the trap
///   in the handler's context (the kernel's kprobes did the same); unhandled,
///   it is the kernel's (an oops, after which this CPU's hit state stays busy).
/// - A fault inside a fault handler is never offered again.
pub(crate) fn on_fault(regs: &mut bindings::pt_regs, trapnr: i32) -> bool {
    // SAFETY: trap context, interrupts off.
    let cpu = unsafe { Cpu::this() };
    let d = cpu.depth();
    if d == 0 {
        return false;
    }
    let f = cpu.frame(d.saturating_sub(1));
    if f.point.is_null() {
        // A kretprobe handler's busy marker: no fault handler there.
        return false;
    }
    // SAFETY: a point cannot be freed while a CPU is in one of its hits
    // (interrupts are off).
    let point = unsafe { &*f.point };
    match f.stage {
        stage::HANDLERS => {
            // A pre or post handler faulted: offer it to the fault handlers
            // (in the handler's context), as the kernel's kprobes did.
            cpu.set_frame(
                d.saturating_sub(1),
                Frame {
                    stage: stage::FAULTING,
                    ..f
                },
            );
            let handled = run_fault_handlers(cpu, point, regs, trapnr);
            cpu.set_frame(d.saturating_sub(1), f);
            handled
        }
        stage::STEPPING | stage::STEPPING_MISSED => {
            if !arch::Arch::in_copy(arch::regs::ip(regs), &point.insn) {
                return false;
            }
            arch::Arch::abort_step(&point.insn, regs, f.saved);
            // Handlers see the fault at the probed instruction, not in the
            // slot.
            arch::regs::set_ip(regs, point.addr);
            let mut handled = false;
            if f.stage == stage::STEPPING {
                cpu.set_frame(
                    d.saturating_sub(1),
                    Frame {
                        stage: stage::FAULTING,
                        ..f
                    },
                );
                handled = run_fault_handlers(cpu, point, regs, trapnr);
            }
            cpu.pop();
            handled
        }
        // A fault handler faulted, or anything else: the kernel's.
        _ => false,
    }
}

/// Whether this CPU is inside a hit (handlers, a step): the only time a
/// fault may be a probe's. Interrupts off.
pub(crate) fn in_hit() -> bool {
    // SAFETY: interrupts are off (the caller's contract).
    unsafe { Cpu::this() }.depth() > 0
}

/// Faults in a row a handler may claim to fix without changing a register.
const MAX_FAULT_RETRIES: usize = 8;

/// Whether two register frames are byte for byte the same.
fn same_regs(a: &bindings::pt_regs, b: &bindings::pt_regs) -> bool {
    let n = core::mem::size_of::<bindings::pt_regs>();
    // SAFETY: both are whole `pt_regs`, plain integers without padding
    // that could be uninitialised (every field is a machine word).
    unsafe {
        core::slice::from_raw_parts((a as *const bindings::pt_regs).cast::<u8>(), n)
            == core::slice::from_raw_parts((b as *const bindings::pt_regs).cast::<u8>(), n)
    }
}

/// Runs the enabled probes' fault handlers until one handles the trap.
fn run_fault_handlers(cpu: Cpu, point: &Point, regs: &mut bindings::pt_regs, trapnr: i32) -> bool {
    for p in enabled(point) {
        // SAFETY: `user` is valid while registered.
        if let Some(fh) = unsafe { (*p.user()).fault_handler } {
            let before = *regs;
            // SAFETY: the contract of kp_fault_handler_t.
            let handled = unsafe { fh(p.user(), regs, trapnr) } != 0;
            if handled && !same_regs(&before, regs) {
                cpu.clear_fault_retries();
                return true;
            }
            // "Handled" with no register changed: a fix of memory may make
            // the retry work, but the same trap again and again means
            // nothing was fixed; past a few in a row, the kernel handles it
            // rather than this CPU faulting for ever.
            if handled {
                if cpu.bump_fault_retries() <= MAX_FAULT_RETRIES {
                    return true;
                }
                cpu.clear_fault_retries();
                return false;
            }
        }
    }
    false
}

/// The out-of-line copy of the instruction at `addr` ended in a call rather
/// than a breakpoint (`arch/*/post.rs`): finish the step as
/// [`on_step_done`] does, with `regs` the state after the copy (interrupts
/// still off since the breakpoint). Returns where execution goes on unless
/// a post handler moved `regs.ip` from there.
// One caller (the backend's trap glue, through `Core`): inlined there, as
// when the glue called it by name.
#[inline(always)]
pub(crate) fn on_step_jump(addr: usize, regs: &mut bindings::pt_regs) -> usize {
    // SAFETY: interrupts are off.
    let cpu = unsafe { Cpu::this() };
    let d = cpu.depth();
    let f = (d > 0).then(|| cpu.frame(d.saturating_sub(1))).filter(|f| {
        (f.stage == stage::STEPPING || f.stage == stage::STEPPING_MISSED)
            // SAFETY: a point cannot be freed while a CPU steps it.
            && !f.point.is_null() && unsafe { (*f.point).addr } == addr
    });
    let Some(f) = f else {
        // Every entry into a copy pushed its frame: not reached. Resume at
        // the copy's jump back, loudly.
        pr_err!("step of {:#x} ended with no step in progress\n", addr);
        return arch::regs::ip(regs);
    };
    // SAFETY: as above.
    end_step(cpu, d, f, unsafe { &*f.point }, regs)
}

/// Ends the step of `f`, this CPU's top frame (level `d - 1`), on `point`:
/// resumes after the instruction, runs the post handlers of a hit whose
/// handlers ran, frees the level. Returns where execution goes on unless a
/// post handler moved `regs.ip` from there.
// Inline: a call and return cost a TB lookup each under TCG (about 60 ns
// of the x86_64 post path, bench row 2).
#[inline(always)]
fn end_step(cpu: Cpu, d: usize, f: Frame, point: &Point, regs: &mut bindings::pt_regs) -> usize {
    arch::Arch::finish_step(point.addr, &point.insn, regs, f.saved);
    let next = arch::regs::ip(regs);
    if f.stage == stage::STEPPING {
        // Keep the level while the post handlers run (busy).
        cpu.set_stage(d.saturating_sub(1), stage::HANDLERS);
        run_post(point, regs);
    }
    cpu.pop();
    next
}

/// A breakpoint at `addr` fired; if it ends the out-of-line copy this CPU is
/// running, finish the step and run the post handlers.
// One caller (the backend's trap glue, through `Core`): inlined there, as
// when the glue called it by name.
#[inline(always)]
pub(crate) fn on_step_done(addr: usize, regs: &mut bindings::pt_regs) -> bool {
    // SAFETY: trap context, interrupts off.
    let cpu = unsafe { Cpu::this() };
    let d = cpu.depth();
    if d == 0 {
        return false;
    }
    let f = cpu.frame(d.saturating_sub(1));
    if f.stage != stage::STEPPING && f.stage != stage::STEPPING_MISSED {
        return false;
    }
    // SAFETY: a point cannot be freed while a CPU steps it (IRQs are off).
    let point = unsafe { &*f.point };
    if !arch::Arch::is_step_done(addr, &point.insn) {
        return false;
    }
    cpu.count_step_trap();
    end_step(cpu, d, f, point, regs);
    true
}

/// Hit states an oops reset (debugfs `stats`: `oops_resets`).
pub(crate) static OOPS_RESETS: core::sync::atomic::AtomicUsize =
    core::sync::atomic::AtomicUsize::new(0);

/// The kernel is reporting an oops on this CPU (`DIE_OOPS`, from the die
/// notifier in `src/helpers.c`), outside interrupt context, so it ends the
/// current task rather than the machine: every hit level in progress on this
/// CPU belongs to that task (levels nest, and a task holds them with
/// interrupts off), and none of it will ever finish. A handler that oopses
/// would otherwise leave this CPU busy for good: every later hit on it
/// counted as missed, its handlers never run. Empties the state and gives
/// back a kretprobe instance an entry handler was filling in. Returns how
/// many levels were in progress; `*addr` and `*stage` get the innermost
/// one's probe address (0 inside a kretprobe return handler) and
/// [`stage`], for the notifier's report. Interrupts are off.
///
/// # Safety
///
/// `addr` and `stage` are valid for writes.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_hit_oops(addr: *mut usize, stage: *mut usize) -> usize {
    // SAFETY: the die path runs with interrupts off.
    let cpu = unsafe { Cpu::this() };
    let depth = cpu.depth();
    if depth == 0 {
        return 0;
    }
    let top = cpu.reset_after_oops(crate::kretprobe::abandon_claim);
    OOPS_RESETS.fetch_add(1, Ordering::Relaxed);
    let (a, s) = top.map_or((0, 0), |f| {
        let a = if f.point.is_null() {
            0
        } else {
            // SAFETY: a point stays allocated while a CPU is inside its hit.
            unsafe { (*f.point).addr }
        };
        (a, f.stage)
    });
    // SAFETY: the caller's contract.
    unsafe {
        addr.write(a);
        stage.write(s);
    }
    depth
}

extern "C" {
    fn kp_helper_oops_hook_register() -> kernel::ffi::c_int;
    fn kp_helper_oops_hook_unregister();
}

/// Hooks oops reports ([`kp_hit_oops`]). Process context, at engine load;
/// a failure is reported and leaves the engine without oops recovery.
pub(crate) fn init() {
    // SAFETY: process context; the notifier block is static.
    let r = unsafe { kp_helper_oops_hook_register() };
    if r != 0 {
        pr_warn!(
            "no die notifier ({}): a handler that oopses leaves its CPU busy\n",
            r
        );
    }
}

/// Unhooks oops reports. At engine unload.
pub(crate) fn exit() {
    // SAFETY: plain call (unregistering an unregistered block is harmless).
    unsafe { kp_helper_oops_hook_unregister() };
}
