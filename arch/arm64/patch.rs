// SPDX-License-Identifier: GPL-2.0

//! Writing instructions into live arm64 text.
//!
//! The architecture allows another CPU to execute an instruction while it
//! is being replaced only when both the old and the new one are in a small
//! set (B, BL, BRK, NOP, ISB, ...); a probe replaces arbitrary instructions.
//! So, like the kernel's `aarch64_insn_patch_text()`, we stop every CPU
//! (`stop_machine()`): one writes through a writable alias and cleans and
//! invalidates the caches to the point of unification for the written
//! range, the others wait, then every CPU executes an ISB before going back
//! to normal code. The kernel lets the last CPU to arrive write; here the
//! first does, which is equally safe: the callback runs only once every
//! CPU is in the stopper with interrupts off, and the others spin in this
//! callback (not in patched text) until the writer is done.
//!
//! Locks as the kernel's kprobes take them around `aarch64_insn_patch_text()`:
//! `cpus_read_lock()`, then `text_mutex` (every writer of kernel text holds
//! it), then `stop_machine_cpuslocked()` (not exported: resolved through
//! kallsyms; without it, plain `stop_machine()` and no `text_mutex`, which
//! would invert the kernel's lock order).

use crate::text;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use kernel::ffi::{c_int, c_void};
use kernel::prelude::*;

extern "C" {
    fn stop_machine(
        f: unsafe extern "C" fn(*mut c_void) -> c_int,
        data: *mut c_void,
        cpus: *const c_void,
    ) -> c_int;
    fn kp_helper_cpus_read_lock();
    fn kp_helper_cpus_read_unlock();
    /// src/kfuncs.c: `stop_machine_cpuslocked()` at `f`.
    fn kp_call_stop_machine_cpuslocked(
        f: usize,
        cb: unsafe extern "C" fn(*mut c_void) -> c_int,
        data: *mut c_void,
        cpus: *const c_void,
    ) -> c_int;
    fn caches_clean_inval_pou(start: usize, end: usize);
    fn kp_helper_isb();
    fn kick_all_cpus_sync();
    static __cpu_online_mask: c_void;
    /// `atomic_t __num_online_cpus`.
    static __num_online_cpus: AtomicI32;
}

/// `stop_machine_cpuslocked()`, resolved at load (0: not found).
static STOP_MACHINE_CPUSLOCKED: AtomicUsize = AtomicUsize::new(0);

/// Resolves what patching needs. Process context, after `symbols::init()`.
pub(super) fn init() {
    let f = crate::symbols::lookup_function(kernel::c_str!("stop_machine_cpuslocked")).unwrap_or(0);
    STOP_MACHINE_CPUSLOCKED.store(f, Ordering::Release);
}

struct Job<'a> {
    addr: usize,
    alias: *mut u32,
    insns: &'a [u32],
    /// What the text must still hold, word for word, to be written.
    expect: &'a [u32],
    /// Set by the writer when it did not (someone else's patch).
    busy: AtomicBool,
    /// CPUs that entered; the writer adds one more when done.
    count: AtomicUsize,
}

/// `stop_machine()` callback, run on every online CPU with interrupts off.
///
/// # Safety
///
/// `data` is the `Job` of [`write_insns`], alive during the stop.
unsafe extern "C" fn patch_cb(data: *mut c_void) -> c_int {
    // SAFETY: per the function's contract.
    let job = unsafe { &*data.cast::<Job<'_>>() };
    // SAFETY: reads an atomic counter of the kernel.
    let cpus = unsafe { __num_online_cpus.load(Ordering::Relaxed) } as usize;
    if job.count.fetch_add(1, Ordering::AcqRel) == 0 {
        // Every other CPU is stopped: nobody writes text meanwhile.
        let same = job.expect.iter().enumerate().all(|(i, &w)| {
            // SAFETY: `addr` is mapped text covering `expect.len()` words.
            unsafe { core::ptr::read_volatile((job.addr as *const u32).add(i)) == w }
        });
        job.busy.store(!same, Ordering::Relaxed);
        for (i, &w) in job.insns.iter().enumerate().filter(|_| same) {
            // SAFETY: `alias` maps the page(s) of the target writable and
            // covers `insns.len()` words.
            unsafe { core::ptr::write_volatile(job.alias.add(i), w) };
        }
        // SAFETY: cache maintenance by VA on mapped kernel text.
        unsafe { caches_clean_inval_pou(job.addr, job.addr + job.insns.len() * 4) };
        // Release the others (count becomes cpus + 1).
        job.count.fetch_add(1, Ordering::Release);
    } else {
        while job.count.load(Ordering::Acquire) <= cpus {
            core::hint::spin_loop();
        }
    }
    // SAFETY: a context synchronisation barrier on this CPU.
    unsafe { kp_helper_isb() };
    0
}

/// Writes `insns` at `addr` (4-byte aligned, within one page) that no CPU
/// executes (a slot or stub not yet published, or one every task has
/// left), as the kernel's `aarch64_insn_patch_text_nosync()`: through the
/// alias, then cleaning and invalidating to the point of unification. Before
/// anything branches there, the publisher makes every CPU synchronise its
/// context (the `stop_machine()` of arming, or [`sync_all`]). Process
/// context; registration lock held.
///
/// # Safety
///
/// `[addr, addr + 4 * insns.len())` is a slot or stub of the engine's own
/// area that no CPU executes, and nothing branches there until published.
pub(crate) unsafe fn write_idle(addr: usize, insns: &[u32]) -> Result {
    if addr % 4 != 0 || addr % 4096 + insns.len() * 4 > 4096 {
        return Err(EINVAL);
    }
    // SAFETY: the words' own bytes, in memory order (as they are fetched).
    let bytes =
        unsafe { core::slice::from_raw_parts(insns.as_ptr().cast::<u8>(), insns.len() * 4) };
    // SAFETY: idle text of the engine's (the caller's contract).
    unsafe { text::write(addr, bytes) }?;
    // SAFETY: cache maintenance by VA on mapped kernel text.
    unsafe { caches_clean_inval_pou(addr, addr + insns.len() * 4) };
    Ok(())
}

/// Makes every CPU execute a context synchronisation event (an IPI and
/// back), after [`write_idle`] and before publishing what it wrote.
pub(crate) fn sync_all() {
    // SAFETY: process context.
    unsafe { kick_all_cpus_sync() };
}

/// Writes `insns` at `addr` (4-byte aligned, within one page) while no
/// other CPU runs, if the text there still holds `expect` (checked while
/// every CPU is stopped: `EBUSY` otherwise, someone else's patch stays).
/// Process context; registration lock held.
///
/// # Safety
///
/// `addr` is an instruction the engine prepared (its BRK, or the original
/// instruction back), or `insns` are otherwise what that text may hold
/// when every CPU resumes.
pub(crate) unsafe fn write_insns(addr: usize, expect: &[u32], insns: &[u32]) -> Result {
    if addr % 4 != 0 || addr % 4096 + insns.len() * 4 > 4096 {
        return Err(EINVAL);
    }
    // SAFETY: text the caller owns for this write (the contract).
    let alias = unsafe { text::Alias::new(addr) }?;
    let job = Job {
        addr,
        alias: alias.ptr().cast(),
        insns,
        expect,
        busy: AtomicBool::new(false),
        count: AtomicUsize::new(0),
    };
    let data = &job as *const Job<'_> as *mut c_void;
    let cpus = core::ptr::addr_of!(__cpu_online_mask);
    let r = match STOP_MACHINE_CPUSLOCKED.load(Ordering::Acquire) {
        0 => {
            // SAFETY: `patch_cb` matches cpu_stop_fn_t; `job` outlives the
            // call; `stop_machine` takes the hotplug lock itself.
            unsafe { stop_machine(patch_cb, data, cpus) }
        }
        f => {
            // SAFETY: `f` is `stop_machine_cpuslocked` (or its gate), which
            // wants the CPU hotplug lock held, taken here before
            // `text_mutex` as the kernel does; `patch_cb` matches
            // cpu_stop_fn_t; `job` outlives the call.
            unsafe {
                kp_helper_cpus_read_lock();
                let r = {
                    let _text = crate::symbols::TextLock::lock();
                    kp_call_stop_machine_cpuslocked(f, patch_cb, data, cpus)
                };
                kp_helper_cpus_read_unlock();
                r
            }
        }
    };
    if r != 0 {
        return Err(Error::from_errno(r));
    }
    if job.busy.load(Ordering::Relaxed) {
        return Err(EBUSY);
    }
    Ok(())
}
