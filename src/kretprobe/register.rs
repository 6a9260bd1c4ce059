// SPDX-License-Identifier: GPL-2.0

//! Registering and unregistering kretprobes (one and in batches), and
//! what the registry asks of them.

use super::*;

fn register(rp: &mut KpKretprobe) -> Result {
    if !rp.kp_private.is_null() || rp.kp.is_registered() {
        pr_err!("kretprobe {:p} is already registered\n", rp);
        return Err(EINVAL);
    }
    if rp.kp.pre_handler.is_some() || rp.kp.post_handler.is_some() {
        pr_err!("kretprobe: kp.pre_handler/post_handler belong to the engine\n");
        return Err(EINVAL);
    }
    let sym = crate::resolve::function_entry(&RegGuard::lock(), &rp.kp)?;
    let name = sym.name();
    if KRET_BLACKLIST.contains(&name) {
        pr_err!(
            "kretprobe: {} does not return normally or switches stacks\n",
            sym.text()
        );
        return Err(EINVAL);
    }
    let n = if rp.maxactive > 0 {
        rp.maxactive as usize
    } else {
        default_maxactive()
    };
    let pool = alloc_pool(rp, n, rp.data_size)?;
    // A stub per instance: slots freed before wait for a reclaim.
    crate::registry::reclaim_slots_for(n);
    {
        let g = RegGuard::lock();
        reap(&g);
        if let Err(e) = make_stubs(pool) {
            free_pool(&g, pool);
            return Err(e);
        }
        let graph = crate::kretprobe::graph::attach(&g, sym.start, sym.size, rp.data_size);
        // SAFETY: the pool is ours, not yet published.
        unsafe { (*pool).graph = graph };
    }
    rp.kp_private = pool.cast();
    rp.nmissed = 0;
    rp.kp.pre_handler = Some(kret_entry);
    // `rp.kp` lives as long as `rp`, which the client keeps until
    // unregistering.
    if let Err(e) = crate::registry::register_kret_entry(&mut rp.kp) {
        rp.kp.pre_handler = None;
        rp.kp_private = null_mut();
        let g = RegGuard::lock();
        // SAFETY: never published: ours.
        if let Some(r) = unsafe { (*pool).graph } {
            crate::kretprobe::graph::detach(&g, r);
        }
        free_pool(&g, pool);
        return Err(e);
    }
    Ok(())
}

/// `kp_register_kretprobe()`.
///
/// # Safety
///
/// `rp` is null or points to a `KpKretprobe` that stays valid and unmoved
/// until `kp_unregister_kretprobe(rp)` returns.
#[no_mangle]
pub unsafe extern "C" fn kp_register_kretprobe(rp: *mut KpKretprobe) -> c_int {
    // SAFETY: per the function's contract.
    match unsafe { rp.as_mut() }.ok_or(EINVAL).and_then(register) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// `kp_unregister_kretprobe()`.
///
/// # Safety
///
/// `rp` is null or a kretprobe passed to `kp_register_kretprobe()`.
#[no_mangle]
pub unsafe extern "C" fn kp_unregister_kretprobe(rp: *mut KpKretprobe) {
    // SAFETY: per the function's contract.
    let Some(rp) = (unsafe { rp.as_mut() }) else {
        return;
    };
    let pool = rp.kp_private.cast::<Pool>();
    if pool.is_null() {
        return;
    }
    // No new entries after this (it waits for running entry handlers).
    crate::registry::unregister(&mut rp.kp);
    // SAFETY: the pool lives until reaped, which needs it dead first.
    if let Some(r) = unsafe { (*pool).graph } {
        // No handler runs for calls in flight on shadow stacks after this.
        crate::kretprobe::graph::detach(&RegGuard::lock(), r);
    }
    // SAFETY: as above.
    unsafe { (*pool).rp.store(null_mut(), Ordering::Release) };
    // Handlers running on a return see the old pointer; wait for them (they
    // run with interrupts off).
    // SAFETY: process context.
    unsafe { bindings::synchronize_rcu() };
    rp.kp.pre_handler = None;
    rp.kp_private = null_mut();
    let g = RegGuard::lock();
    // SAFETY: the pool is dead now, and on no list.
    unsafe { add_zombie(&g, pool) };
    reap(&g);
}

/// `kp_register_kretprobes()`: registers `num` kretprobes, all or nothing:
/// when one fails, those already registered are unregistered and its error
/// returned.
///
/// # Safety
///
/// `rps` points to `num` pointers, each valid as for
/// `kp_register_kretprobe()`.
#[no_mangle]
pub unsafe extern "C" fn kp_register_kretprobes(rps: *mut *mut KpKretprobe, num: c_int) -> c_int {
    if rps.is_null() || num <= 0 {
        return EINVAL.to_errno();
    }
    for i in 0..num as usize {
        // SAFETY: per the function's contract.
        let r = unsafe { kp_register_kretprobe(*rps.add(i)) };
        if r != 0 {
            // SAFETY: the first `i` were registered just above.
            unsafe { kp_unregister_kretprobes(rps, i as c_int) };
            return r;
        }
    }
    0
}

/// `kp_unregister_kretprobes()`: as `kp_unregister_kretprobe()` for each,
/// with one wait for the entry probes and one for running return handlers
/// for the whole batch (the kernel's `unregister_kretprobes()` does the
/// same).
///
/// # Safety
///
/// `rps` points to `num` pointers, each null or a kretprobe passed to
/// `kp_register_kretprobe()`.
#[no_mangle]
pub unsafe extern "C" fn kp_unregister_kretprobes(rps: *mut *mut KpKretprobe, num: c_int) {
    if rps.is_null() || num <= 0 {
        return;
    }
    let n = num as usize;
    let (Ok(mut kps), Ok(mut rpv)) = (
        KVec::<*mut KpKprobe>::with_capacity(n, GFP_KERNEL),
        KVec::<*mut KpKretprobe>::with_capacity(n, GFP_KERNEL),
    ) else {
        // No memory for the batch: one by one, a wait each.
        for i in 0..n {
            // SAFETY: per the function's contract.
            unsafe { kp_unregister_kretprobe(*rps.add(i)) };
        }
        return;
    };
    for i in 0..n {
        // SAFETY: per the function's contract.
        let rp = unsafe { *rps.add(i) };
        // SAFETY: null or a kretprobe passed to registration. The same
        // kretprobe twice in the batch is taken once.
        if rp.is_null() || unsafe { (*rp).kp_private.is_null() } || rpv.contains(&rp) {
            continue;
        }
        // Capacity was reserved for all of them.
        // SAFETY: `rp` is valid; its first field is the entry probe.
        let _ = kps.push(unsafe { core::ptr::addr_of_mut!((*rp).kp) }, GFP_KERNEL);
        let _ = rpv.push(rp, GFP_KERNEL);
    }
    if rpv.is_empty() {
        return;
    }
    // No new entries after this (one grace period for all of them).
    // SAFETY: registered entry probes.
    unsafe { crate::registry::kp_unregister_kprobes(kps.as_mut_ptr(), kps.len() as c_int) };
    {
        let g = RegGuard::lock();
        for &rp in rpv.iter() {
            // SAFETY: the pool lives until reaped, which needs it dead first.
            if let Some(r) = unsafe { (*(*rp).kp_private.cast::<Pool>()).graph } {
                crate::kretprobe::graph::detach(&g, r);
            }
        }
    }
    for &rp in rpv.iter() {
        // SAFETY: the pool lives until reaped, which needs it dead first.
        unsafe {
            (*(*rp).kp_private.cast::<Pool>())
                .rp
                .store(null_mut(), Ordering::Release)
        };
    }
    // Handlers running on a return see the old pointers; wait for them.
    // SAFETY: process context.
    unsafe { bindings::synchronize_rcu() };
    let g = RegGuard::lock();
    for &rp in rpv.iter() {
        // SAFETY: as in `kp_unregister_kretprobe`: the pool is dead now,
        // and on no list.
        unsafe {
            let pool = (*rp).kp_private.cast::<Pool>();
            (*rp).kp.pre_handler = None;
            (*rp).kp_private = null_mut();
            add_zombie(&g, pool);
        }
    }
    reap(&g);
}

/// Whether `kp` is the entry probe of a kretprobe (its pre handler is the
/// engine's).
fn is_entry_probe(kp: &KpKprobe) -> bool {
    kp.pre_handler.map_or(0, |f| f as usize) == kret_entry as *const () as usize
}

/// When `kp` is the entry probe of a kretprobe, detaches the kretprobe's
/// pool: returns still in flight run no handler any more (the module that
/// holds the handler is going away) and the pool waits for them as a
/// zombie. The caller then unregisters `kp`, which waits a grace period.
pub(crate) fn forget_if_kretprobe(g: &RegGuard, kp: *mut KpKprobe) {
    // SAFETY: the caller passes a registered probe's valid struct.
    if !is_entry_probe(unsafe { &*kp }) {
        return;
    }
    let rp = kp.cast::<KpKretprobe>();
    // SAFETY: `kp` is the first field of a live kretprobe.
    let pool = unsafe { (*rp).kp_private.cast::<Pool>() };
    if pool.is_null() {
        return;
    }
    // SAFETY: the pool lives until reaped.
    if let Some(r) = unsafe { (*pool).graph } {
        crate::kretprobe::graph::detach(g, r);
    }
    // SAFETY: the pool lives until reaped; a registered kretprobe's pool
    // is on no list.
    unsafe {
        (*pool).rp.store(null_mut(), Ordering::Release);
        (*rp).kp_private = null_mut();
        add_zombie(g, pool);
    }
}

/// How many instances a kretprobe gets when it asks for none
/// (`maxactive` 0): the kernel's `max(10, 2 * num_possible_cpus())`.
pub(crate) fn default_maxactive() -> usize {
    extern "C" {
        fn kp_helper_num_possible_cpus() -> kernel::ffi::c_uint;
    }
    // SAFETY: reads the possible-CPU mask.
    core::cmp::max(10, 2 * unsafe { kp_helper_num_possible_cpus() } as usize)
}
