// SPDX-License-Identifier: GPL-2.0

//! The C entry points of the probe API (`include/kp_kprobes.h`), exported
//! with `EXPORT_SYMBOL_GPL` in `src/helpers.c`.

use super::*;
use crate::abi::KpKprobe;
use crate::lock::RegGuard;
use kernel::prelude::*;

/// `kp_register_kprobe()`: registers (and, unless `KP_FLAG_DISABLED`, arms) a
/// probe.
///
/// # Safety
///
/// `p` is null or points to a `KpKprobe` that stays valid and unmoved until
/// `kp_unregister_kprobe(p)` returns.
#[no_mangle]
pub unsafe extern "C" fn kp_register_kprobe(p: *mut KpKprobe) -> kernel::ffi::c_int {
    // SAFETY: per the function's contract.
    let Some(p) = (unsafe { p.as_mut() }) else {
        return EINVAL.to_errno();
    };
    match register(p, false) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// `kp_unregister_kprobe()`: disarms and forgets a probe; on return no CPU
/// runs its handlers.
///
/// # Safety
///
/// `p` is null or a probe passed to `kp_register_kprobe()`.
#[no_mangle]
pub unsafe extern "C" fn kp_unregister_kprobe(p: *mut KpKprobe) {
    // SAFETY: per the function's contract.
    if let Some(p) = unsafe { p.as_mut() } {
        unregister(p);
    }
}

/// `kp_register_kprobes()`: registers `num` probes, all or nothing: when one
/// fails, those already registered are unregistered and its error returned.
///
/// # Safety
///
/// `kps` points to `num` pointers, each valid as for `kp_register_kprobe()`.
#[no_mangle]
pub unsafe extern "C" fn kp_register_kprobes(
    kps: *mut *mut KpKprobe,
    num: kernel::ffi::c_int,
) -> kernel::ffi::c_int {
    if kps.is_null() || num <= 0 {
        return EINVAL.to_errno();
    }
    for i in 0..num as usize {
        // SAFETY: per the function's contract.
        let r = unsafe { kp_register_kprobe(*kps.add(i)) };
        if r != 0 {
            for j in (0..i).rev() {
                // SAFETY: registered just above.
                unsafe { kp_unregister_kprobe(*kps.add(j)) };
            }
            return r;
        }
    }
    0
}

/// `kp_unregister_kprobes()`.
///
/// # Safety
///
/// `kps` points to `num` pointers to probes (registered or not).
#[no_mangle]
pub unsafe extern "C" fn kp_unregister_kprobes(kps: *mut *mut KpKprobe, num: kernel::ffi::c_int) {
    if kps.is_null() || num <= 0 {
        return;
    }
    let n = num as usize;
    // One grace period for the whole batch, as the kernel's
    // unregister_kprobes(): detach all, wait once, free all.
    let Ok(mut done) = KVec::<(Retired, *mut Probe)>::with_capacity(n, GFP_KERNEL) else {
        for i in 0..n {
            // SAFETY: per the function's contract.
            unsafe { kp_unregister_kprobe(*kps.add(i)) };
        }
        return;
    };
    let g = RegGuard::lock();
    for i in 0..n {
        // SAFETY: per the function's contract.
        let Some(p) = (unsafe { (*kps.add(i)).as_mut() }) else {
            continue;
        };
        let probe = Probe::of(p);
        if !p.is_registered() || !is_registered(&g, probe) {
            continue;
        }
        let r = detach_begin(&g, probe);
        // Capacity was reserved for all of them.
        let _ = done.push((r, probe), GFP_KERNEL);
    }
    synchronize(&g);
    for (r, probe) in done {
        r.finish(&g);
        remove_from_all(&g, probe);
        // Detached, unlisted, and a grace period passed.
        clear_record(probe);
    }
}

/// `kp_disable_kprobe()`: keeps the probe registered but stops its handlers;
/// the original instruction is restored when no enabled probe is left there.
///
/// # Safety
///
/// `p` is null or a registered probe.
#[no_mangle]
pub unsafe extern "C" fn kp_disable_kprobe(p: *mut KpKprobe) -> kernel::ffi::c_int {
    // SAFETY: per the function's contract.
    match unsafe { p.as_mut() }
        .ok_or(EINVAL)
        .and_then(|p| set_disabled(p, true))
    {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// `kp_enable_kprobe()`.
///
/// # Safety
///
/// `p` is null or a registered probe.
#[no_mangle]
pub unsafe extern "C" fn kp_enable_kprobe(p: *mut KpKprobe) -> kernel::ffi::c_int {
    // SAFETY: per the function's contract.
    match unsafe { p.as_mut() }
        .ok_or(EINVAL)
        .and_then(|p| set_disabled(p, false))
    {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}
