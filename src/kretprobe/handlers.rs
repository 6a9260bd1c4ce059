// SPDX-License-Identifier: GPL-2.0

//! At a hit: the entry probe's pre handler takes an instance and hijacks
//! the return; the return trampoline's callback runs the return handler.

use super::*;

/// Counts a missed return in `rp`'s `nmissed` and under its cause.
///
/// # Safety
///
/// `rp` is a live kretprobe.
pub(crate) unsafe fn count_missed(rp: *mut KpKretprobe, cause: &AtomicUsize) {
    // SAFETY: `nmissed` is a naturally aligned int of a live kretprobe.
    unsafe { AtomicI32::from_ptr(core::ptr::addr_of_mut!((*rp).nmissed)) }
        .fetch_add(1, Ordering::Relaxed);
    crate::missed::count(cause);
}

/// The entry probe's pre handler: take an instance, run the entry handler,
/// hijack the return.
///
/// # Safety
///
/// Called by the engine's trap path with the `kp` of a registered
/// kretprobe.
pub(super) unsafe extern "C" fn kret_entry(
    p: *mut KpKprobe,
    regs: *mut bindings::pt_regs,
) -> c_int {
    // `kp` is the first field of the `repr(C)` kretprobe.
    let rp = p.cast::<KpKretprobe>();
    // SAFETY: `rp` is registered, so valid; trap frame from the engine.
    let (pool, regs) = unsafe { ((*rp).kp_private.cast::<Pool>(), &mut *regs) };
    if pool.is_null() {
        return 0;
    }
    // SAFETY: a registered kretprobe's pool is live.
    let pool = unsafe { &*pool };
    // This call on the function graph tracer's shadow stack, if it takes it.
    if let Some(h) = pool
        .graph
        .and_then(|r| crate::kretprobe::graph::push(r, rp, regs))
    {
        // SAFETY: `rp` is live.
        if let Some(eh) = unsafe { (*rp).entry_handler } {
            // SAFETY: the handler contract; the record lives on this
            // task's shadow stack until the function returns.
            if unsafe { eh(&mut *h, regs) } != 0 {
                return 0;
            }
        }
        crate::kretprobe::graph::arm(h);
        return 0;
    }
    let Some(inst) = (0..pool.n).map(|i| pool.instance(i)).find(|&inst| {
        // SAFETY: in range.
        unsafe { &(*inst).state }
            .compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }) else {
        // SAFETY: `rp` is live.
        unsafe { count_missed(rp, &crate::missed::KRET_NO_INSTANCE) };
        return 0;
    };
    // SAFETY: we own the instance until we release it.
    let inst = unsafe { &mut *inst };
    inst.header.rp = rp;
    inst.header.fp = arch::regs::sp(regs);
    let ret = arch::Arch::kret_return_address(regs);
    let real = crate::symbols::graph_return_address(ret, arch::Arch::kret_graph_retp(regs));
    inst.via_graph = real.is_some();
    if inst.via_graph {
        VIA_GRAPH.fetch_add(1, Ordering::Relaxed);
    }
    inst.header.ret_addr = real.unwrap_or(ret);
    let release = |inst: &Instance| inst.state.store(FREE, Ordering::Release);
    // SAFETY: `rp` is live.
    if let Some(eh) = unsafe { (*rp).entry_handler } {
        // SAFETY: pre handlers run with interrupts off.
        let cpu = unsafe { Cpu::this() };
        // Should the handler oops, the oops notifier gives the instance back.
        cpu.set_claim(core::ptr::from_mut(inst) as usize);
        // SAFETY: the handler contract.
        let skip = unsafe { eh(&mut inst.header, regs) } != 0;
        cpu.set_claim(0);
        if skip {
            release(inst);
            return 0;
        }
    }
    // SAFETY: plain call; pins the engine for the outstanding return.
    if !unsafe { kp_helper_module_get() } {
        // The engine is going away: the return cannot be waited for.
        release(inst);
        // SAFETY: `rp` is live.
        unsafe { count_missed(rp, &crate::missed::KRET_UNLOADING) };
        return 0;
    }
    pool.inflight.fetch_add(1, Ordering::AcqRel);
    arch::Arch::kret_hijack(regs, inst.stub);
    inst.state.store(HIJACKED, Ordering::Release);
    0
}

/// Runs `call` (a return handler of `rp`) with this CPU marked busy, so
/// that probes hit from it count as missed; when this CPU's hit levels are
/// all taken, counts a nested miss instead. Shared by the pool's return
/// trampolines and the shadow stack's return callback.
///
/// # Safety
///
/// Interrupts are off; `rp` is a live kretprobe for the call.
// Inline: a call and its return are a TB lookup each under TCG.
#[inline(always)]
pub(crate) unsafe fn run_return_handler(rp: *mut KpKretprobe, call: impl FnOnce()) {
    // SAFETY: interrupts are off (the contract).
    let cpu = unsafe { Cpu::this() };
    let busy = Frame {
        point: core::ptr::null(),
        stage: stage::HANDLERS,
        saved: 0,
    };
    if cpu.push(busy).is_some() {
        call();
        cpu.pop();
    } else {
        // Too deeply nested to run a handler safely: count it.
        // SAFETY: `rp` is live (the contract).
        unsafe { count_missed(rp, &crate::missed::KRET_NESTED) };
    }
}

/// The arch trampoline's callback: the function whose return went to stub
/// `index` returned with `regs`. Runs the handler (if the kretprobe is still
/// registered) and returns where the return goes. Before the handler runs,
/// `publish` gets that address, for the arch to put where an unwinder
/// looks for the trampoline's return address: a stack trace taken from the
/// handler (or from an interrupt on top of it) then walks on to the real
/// caller. Interrupts are off.
// One caller (the backend's trap glue, through `Core`): inlined there, as
// when the glue called it by name.
#[inline(always)]
pub(crate) fn on_return(
    index: usize,
    regs: &mut bindings::pt_regs,
    publish: impl FnOnce(usize),
) -> usize {
    let inst = STUBS
        .get(index)
        .map_or(null_mut(), |s| s.load(Ordering::Acquire));
    if inst.is_null() {
        // Cannot happen while a hijacked return is outstanding: its pool and
        // stubs are kept until it comes back.
        panic!("kprobes: return through an unknown kretprobe stub");
    }
    // SAFETY: an instance with an outstanding return stays allocated.
    let inst = unsafe { &mut *inst };
    // SAFETY: as above, for its pool.
    let pool = unsafe { &*inst.pool };
    // The handler sees the real return address; the return goes where the
    // hijacked slot pointed (the function graph tracer's handler, if it
    // came first, which then returns to the same real address).
    let ret = if inst.via_graph {
        crate::symbols::return_to_handler()
    } else {
        inst.header.ret_addr
    };
    publish(ret);
    arch::regs::set_ip(regs, inst.header.ret_addr);
    let rp = pool.rp.load(Ordering::Acquire);
    if !rp.is_null() {
        // SAFETY: `rp` stays valid until unregister, which waits for
        // handlers running with interrupts off; so are they here.
        unsafe {
            run_return_handler(rp, || {
                if let Some(h) = (*rp).handler {
                    // SAFETY: the handler contract.
                    h(&mut inst.header, regs);
                }
            })
        };
    }
    inst.state.store(FREE, Ordering::Release);
    pool.inflight.fetch_sub(1, Ordering::AcqRel);
    // SAFETY: balances the reference taken at the entry.
    unsafe { kp_helper_module_put() };
    ret
}
