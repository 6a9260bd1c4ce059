// SPDX-License-Identifier: GPL-2.0

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
use crate::percpu::{self, stage, CpuState, Frame, MAX_DEPTH};
use crate::registry::{self, Point, Probe};
use core::sync::atomic::Ordering;
use kernel::bindings;

/// Iterates the enabled probes of `point`.
fn enabled(point: &Point) -> impl Iterator<Item = &Probe> {
    point
        .probes()
        .iter()
        // SAFETY: listed probes outlive a grace period after leaving the list.
        .map(|&p| unsafe { &*p })
        .filter(|p| !p.disabled.load(Ordering::Relaxed))
}

/// A breakpoint at `addr` fired. Returns whether it was ours; if so `regs`
/// say where to resume.
pub(crate) fn on_break(addr: usize, regs: &mut bindings::pt_regs) -> bool {
    let Some(point) = registry::lookup(addr) else {
        return false;
    };
    // SAFETY: trap context, interrupts off.
    let cpu = unsafe { percpu::this_cpu() };
    if cpu.depth >= MAX_DEPTH {
        // Nested deeper than we track: let the kernel report it loudly.
        return false;
    }
    if cpu.depth > 0 {
        for p in enabled(point) {
            p.count_missed();
        }
        if !arch::simulate(point.addr, &point.insn, regs) {
            push_and_step(cpu, point, stage::STEPPING_MISSED, regs);
        }
        return true;
    }
    cpu.frames[0] = Frame {
        point,
        stage: stage::HANDLERS,
        saved: 0,
    };
    cpu.depth = 1;
    for p in enabled(point) {
        p.hits.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `user` is valid while registered.
        if let Some(pre) = unsafe { (*p.user).pre_handler } {
            // SAFETY: the contract of kp_pre_handler_t.
            if unsafe { pre(p.user, regs) } != 0 {
                // The handler redirected execution: no step, no post.
                cpu.depth = 0;
                return true;
            }
        }
    }
    if arch::simulate(point.addr, &point.insn, regs) {
        // Done in place: straight to the post handlers (still depth 1).
        run_post(point, regs);
        cpu.depth = 0;
    } else {
        cpu.depth = 0;
        push_and_step(cpu, point, stage::STEPPING, regs);
    }
    true
}

/// Runs the enabled probes' post handlers. The caller marks this CPU busy.
fn run_post(point: &Point, regs: &mut bindings::pt_regs) {
    for p in enabled(point) {
        // SAFETY: `user` is valid while registered.
        if let Some(post) = unsafe { (*p.user).post_handler } {
            // SAFETY: the contract of kp_post_handler_t.
            unsafe { post(p.user, regs, 0) };
        }
    }
}

fn push_and_step(cpu: &mut CpuState, point: &Point, stage: usize, regs: &mut bindings::pt_regs) {
    let f = &mut cpu.frames[cpu.depth];
    f.point = point;
    f.stage = stage;
    arch::setup_step(point.addr, &point.insn, regs, &mut f.saved);
    cpu.depth += 1;
}

/// A breakpoint at `addr` fired; if it ends the out-of-line copy this CPU is
/// running, finish the step and run the post handlers.
pub(crate) fn on_step_done(addr: usize, regs: &mut bindings::pt_regs) -> bool {
    // SAFETY: trap context, interrupts off.
    let cpu = unsafe { percpu::this_cpu() };
    if cpu.depth == 0 {
        return false;
    }
    let f = cpu.frames[cpu.depth - 1];
    if f.stage != stage::STEPPING && f.stage != stage::STEPPING_MISSED {
        return false;
    }
    // SAFETY: a point cannot be freed while a CPU steps it (IRQs are off).
    let point = unsafe { &*f.point };
    if !arch::is_step_done(addr, &point.insn) {
        return false;
    }
    arch::finish_step(point.addr, &point.insn, regs, f.saved);
    cpu.depth -= 1;
    if f.stage == stage::STEPPING {
        cpu.frames[cpu.depth].stage = stage::HANDLERS;
        cpu.depth += 1;
        run_post(point, regs);
        cpu.depth -= 1;
    }
    true
}
