// SPDX-License-Identifier: GPL-2.0

//! The probe registry and the arch-independent hit path.
//!
//! Registration resolves and validates the address, lets the arch backend
//! prepare the instruction, publishes the probe in a fixed table and arms it.
//! The trap path looks probes up without locks: a slot is an `AtomicPtr`, and
//! a probe is freed only after it left the table and `synchronize_rcu()`
//! returned (trap handlers run with interrupts off, which RCU waits for).
//!
//! Not yet here (see README status): several probes on one address
//! (aggregation), enable/disable, batch registration, module lifecycle.

use crate::abi::KpKprobe;
use crate::arch;
use crate::percpu::{self, stage, Frame, MAX_DEPTH};
use crate::symbols;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use kernel::bindings;
use kernel::ffi::{c_int, c_ulong};
use kernel::prelude::*;
use kernel::str::CStr;

/// Most probes armed at once.
pub(crate) const MAX_PROBES: usize = 512;

/// One armed probe.
pub(crate) struct Probe {
    /// The probed address.
    pub(crate) addr: usize,
    /// The client's description; it outlives the registration.
    user: *mut KpKprobe,
    /// The prepared instruction.
    pub(crate) insn: arch::ArchInsn,
    /// Hits whose handlers ran.
    hits: AtomicU64,
}

static TABLE: [AtomicPtr<Probe>; MAX_PROBES] = [const { AtomicPtr::new(null_mut()) }; MAX_PROBES];

extern "C" {
    fn kp_helper_reg_lock();
    fn kp_helper_reg_unlock();
}

/// Holds the registration mutex.
struct RegGuard;

impl RegGuard {
    fn lock() -> Self {
        // SAFETY: process context (all callers are registration paths).
        unsafe { kp_helper_reg_lock() };
        RegGuard
    }
}

impl Drop for RegGuard {
    fn drop(&mut self) {
        // SAFETY: we hold the lock (INVARIANT of `RegGuard`).
        unsafe { kp_helper_reg_unlock() };
    }
}

/// Finds the probe at `addr`. Lock-free; call from the trap path.
pub(crate) fn lookup(addr: usize) -> Option<&'static Probe> {
    for slot in &TABLE {
        let p = slot.load(Ordering::Acquire);
        if p.is_null() {
            continue;
        }
        // SAFETY: a non-null table entry points to a live `Probe`; it is freed
        // only after leaving the table and an RCU grace period, and callers
        // are the trap path (interrupts off) or hold the registration lock.
        let probe = unsafe { &*p };
        if probe.addr == addr {
            return Some(probe);
        }
    }
    None
}

/// Resolves where `p` asks to probe, before any validation.
fn requested_address(p: &KpKprobe) -> Result<usize> {
    match (p.addr.is_null(), p.symbol_name.is_null()) {
        (false, true) => (p.addr as usize)
            .checked_add(p.offset as usize)
            .ok_or(EINVAL),
        (true, false) => {
            // SAFETY: the client promises a NUL-terminated string.
            let name = unsafe { CStr::from_char_ptr(p.symbol_name) };
            if crate::ksym::parse_sym_spec(name.as_bytes()).is_none() {
                pr_err!(
                    "'{}' is not a symbol name\n",
                    name.to_str().unwrap_or("?")
                );
                return Err(EINVAL);
            }
            let Some(base) = symbols::lookup_name(name) else {
                pr_err!(
                    "unknown symbol '{}'\n",
                    name.to_str().unwrap_or("?")
                );
                return Err(ENOENT);
            };
            // An offset past the function's end is caught by `validate`.
            base.checked_add(p.offset as usize).ok_or(EINVAL)
        }
        (false, false) => {
            pr_err!("give either addr or symbol_name, not both\n");
            Err(EINVAL)
        }
        (true, true) => {
            pr_err!("neither addr nor symbol_name given\n");
            Err(EINVAL)
        }
    }
}

/// Checks that `addr` is in text and finds its function.
fn validate(addr: usize) -> Result<symbols::Symbol> {
    let Some(sym) = symbols::symbol_at(addr) else {
        pr_err!("{:#x} is in no symbol\n", addr);
        return Err(EINVAL);
    };
    if addr - sym.start >= sym.size {
        pr_err!("{:#x} is past the end of {}\n", addr, sym.text());
        return Err(EINVAL);
    }
    let text = if sym.in_module {
        symbols::in_module_text(addr)
    } else {
        symbols::in_kernel_text(addr)
    };
    if !text {
        pr_err!(
            "{} ({:#x}) is not in kernel or module text\n",
            sym.text(),
            addr
        );
        return Err(EINVAL);
    }
    if crate::is_engine_address(addr) {
        pr_err!("{} is the engine's own code\n", sym.text());
        return Err(EINVAL);
    }
    Ok(sym)
}

fn do_register(p: &mut KpKprobe) -> Result {
    if !p.kp_private.is_null() {
        pr_err!("probe {:p} is already registered\n", p);
        return Err(EINVAL);
    }
    let mut addr = requested_address(p)?;
    let sym = validate(addr)?;
    if addr == sym.start {
        // Function entry: step over what the arch reserves there (ftrace site).
        addr = arch::entry_probe_address(sym.start, sym.size);
    }
    let _guard = RegGuard::lock();
    if lookup(addr).is_some() {
        pr_err!(
            "{} already has a probe (aggregation not yet supported)\n",
            sym.text()
        );
        return Err(EBUSY);
    }
    let free = TABLE
        .iter()
        .find(|s| s.load(Ordering::Relaxed).is_null())
        .ok_or(ENOSPC)?;
    let insn = arch::prepare(addr, sym.start, sym.size)?;
    let probe = match KBox::new(
        Probe {
            addr,
            user: p,
            insn,
            hits: AtomicU64::new(0),
        },
        GFP_KERNEL,
    ) {
        Ok(b) => KBox::into_raw(b),
        Err(e) => {
            arch::release(insn);
            return Err(e.into());
        }
    };
    free.store(probe, Ordering::Release);
    // SAFETY: `probe` was just allocated and published; only we free it.
    if let Err(e) = arch::arm(addr, unsafe { &(*probe).insn }) {
        free.store(null_mut(), Ordering::Release);
        // SAFETY: nothing armed, so no CPU can hold the pointer.
        let b = unsafe { KBox::from_raw(probe) };
        arch::release(b.insn);
        return Err(e);
    }
    p.addr = addr as *mut _;
    p.kp_private = probe.cast();
    Ok(())
}

/// `kp_register_kprobe()`: registers and arms a probe.
///
/// # Safety
///
/// `p` is null or points to a `KpKprobe` that stays valid and unmoved until
/// `kp_unregister_kprobe(p)` returns.
#[no_mangle]
pub unsafe extern "C" fn kp_register_kprobe(p: *mut KpKprobe) -> c_int {
    // SAFETY: per the function's contract.
    let Some(p) = (unsafe { p.as_mut() }) else {
        return EINVAL.to_errno();
    };
    match do_register(p) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// `kp_unregister_kprobe()`: disarms and forgets a probe; on return no CPU runs
/// its handlers.
///
/// # Safety
///
/// `p` is null or a probe passed to `kp_register_kprobe()`.
#[no_mangle]
pub unsafe extern "C" fn kp_unregister_kprobe(p: *mut KpKprobe) {
    // SAFETY: per the function's contract.
    let Some(p) = (unsafe { p.as_mut() }) else {
        return;
    };
    let probe = p.kp_private.cast::<Probe>();
    if probe.is_null() {
        return;
    }
    let guard = RegGuard::lock();
    let Some(slot) = TABLE.iter().find(|s| s.load(Ordering::Relaxed) == probe) else {
        pr_err!("unregister of unknown probe {:p}\n", p);
        return;
    };
    remove(slot, guard);
    p.kp_private = null_mut();
}

/// Disarms the probe in `slot`, waits for every CPU to leave it, frees it.
fn remove(slot: &AtomicPtr<Probe>, guard: RegGuard) {
    let probe = slot.load(Ordering::Relaxed);
    // SAFETY: `probe` is live while in the table and we hold the lock.
    let addr = unsafe { (*probe).addr };
    // SAFETY: as above.
    if let Err(e) = arch::disarm(addr, unsafe { &(*probe).insn }) {
        // Leave it in the table: the breakpoint may still be there.
        pr_err!("cannot restore text at {:#x}: {:?}\n", addr, e);
        return;
    }
    slot.store(null_mut(), Ordering::Release);
    drop(guard);
    // SAFETY: process context. After this no trap handler can still use the
    // probe or be executing its out-of-line copy (both run with IRQs off).
    unsafe { bindings::synchronize_rcu() };
    // SAFETY: the probe left the table and a grace period passed.
    let b = unsafe { KBox::from_raw(probe) };
    let _guard = RegGuard::lock();
    arch::release(b.insn);
}

/// Unregisters every probe (engine unload).
pub(crate) fn remove_all() {
    for slot in &TABLE {
        let guard = RegGuard::lock();
        let p = slot.load(Ordering::Relaxed);
        if p.is_null() {
            continue;
        }
        // SAFETY: live while in the table; the client's struct is still valid
        // because the client module holds a reference to us until it is gone.
        let (user, addr) = unsafe { ((*p).user, (*p).addr) };
        pr_warn!("probe at {:#x} still registered at unload\n", addr);
        remove(slot, guard);
        // SAFETY: see above.
        unsafe { (*user).kp_private = null_mut() };
    }
}

/// Trap path: a breakpoint at `addr` fired. Returns whether it was ours; if
/// so `regs` now says where to resume.
pub(crate) fn on_break(addr: usize, regs: &mut bindings::pt_regs) -> bool {
    let Some(probe) = lookup(addr) else {
        return false;
    };
    // SAFETY: trap context, interrupts off.
    let cpu = unsafe { percpu::this_cpu() };
    if cpu.depth >= MAX_DEPTH {
        // Cannot track another level; let the kernel report it loudly.
        return false;
    }
    let user = probe.user;
    if cpu.depth > 0 {
        // A probe hit while this CPU handles another one: count it, skip the
        // handlers, still run the instruction.
        // SAFETY: `user` outlives the registration.
        unsafe { (*user).nmissed = (*user).nmissed.wrapping_add(1) };
        push_and_step(cpu, probe, stage::STEPPING_MISSED, regs);
        return true;
    }
    cpu.frames[0] = Frame {
        probe,
        stage: stage::HANDLERS,
        saved: 0,
    };
    cpu.depth = 1;
    probe.hits.fetch_add(1, Ordering::Relaxed);
    // SAFETY: `user` outlives the registration.
    if let Some(pre) = unsafe { (*user).pre_handler } {
        // SAFETY: the handler contract of kp_pre_handler_t.
        if unsafe { pre(user, regs) } != 0 {
            // The handler redirected execution: no step, no post handler.
            cpu.depth = 0;
            return true;
        }
    }
    cpu.depth = 0;
    push_and_step(cpu, probe, stage::STEPPING, regs);
    true
}

fn push_and_step(
    cpu: &mut percpu::CpuState,
    probe: &Probe,
    stage: usize,
    regs: &mut bindings::pt_regs,
) {
    let f = &mut cpu.frames[cpu.depth];
    f.probe = probe;
    f.stage = stage;
    arch::setup_step(probe.addr, &probe.insn, regs, &mut f.saved);
    cpu.depth += 1;
}

/// Trap path: a breakpoint at `addr` fired; if it ends the displaced copy this
/// CPU is stepping, finish the step and run the post handler.
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
    // SAFETY: the frame's probe cannot be freed while this CPU steps it.
    let probe = unsafe { &*f.probe };
    if !arch::is_step_done(addr, &probe.insn) {
        return false;
    }
    arch::finish_step(probe.addr, &probe.insn, regs, f.saved);
    cpu.depth -= 1;
    if f.stage == stage::STEPPING {
        let user = probe.user;
        // SAFETY: `user` outlives the registration.
        if let Some(post) = unsafe { (*user).post_handler } {
            cpu.frames[cpu.depth].stage = stage::HANDLERS;
            cpu.depth += 1;
            // SAFETY: the handler contract of kp_post_handler_t.
            unsafe { post(user, regs, 0 as c_ulong) };
            cpu.depth -= 1;
        }
    }
    true
}
