// SPDX-License-Identifier: GPL-2.0

//! The classic kprobe example (samples/kprobes/kprobe_example.c), in Rust.
//!
//! Probes `do_sys_open` (or the symbol given as `symbol=`) and prints, for the
//! first hits, the probe address, the registers the handlers see and the file
//! name being opened; at unload it prints the totals.

#[path = "../src/api.rs"]
mod kp;

use core::sync::atomic::{AtomicUsize, Ordering};
use kernel::bindings;
use kernel::ffi::{c_int, c_ulong};
use kernel::prelude::*;
use kp::KpKprobe;

module! {
    type: KprobeExample,
    name: "kprobe_example",
    author: "kprobes-rs developers",
    description: "The classic kprobe example on the Rust kprobes engine",
    license: "GPL",
}

/// Hits printed in full; the rest are only counted.
const VERBOSE_HITS: usize = 12;

static PRE: AtomicUsize = AtomicUsize::new(0);
static POST: AtomicUsize = AtomicUsize::new(0);

/// The probe. The engine keeps a pointer to it until unregister, so it lives
/// in a `static mut` that only init and exit touch.
static mut PROBE: KpKprobe = KpKprobe::new();

/// Prints the probe address, registers, task and file name.
///
/// # Safety
///
/// Called by the engine with its probe and a valid trap frame.
unsafe extern "C" fn handler_pre(p: *mut KpKprobe, regs: *mut bindings::pt_regs) -> c_int {
    let n = PRE.fetch_add(1, Ordering::Relaxed);
    if n >= VERBOSE_HITS {
        return 0;
    }
    // SAFETY: the engine passes its probe and the trap frame.
    let (p, regs) = unsafe { (&*p, &*regs) };
    let mut name = [0u8; 64];
    let (ip, flags) = (kp::regs::ip(regs), kp::regs::flags(regs));
    // do_sys_open(int dfd, const char __user *filename, int flags, umode_t mode)
    let file = kp::regs::arg(regs, 1).unwrap_or(0);
    // SAFETY: nofault copy of the user-space file name into a local buffer.
    let left = unsafe {
        bindings::copy_from_user_nofault(name.as_mut_ptr().cast(), file as *const _, name.len() - 1)
    };
    let len = name.iter().position(|&c| c == 0).unwrap_or(name.len() - 1);
    let shown = if left == 0 || len > 0 {
        core::str::from_utf8(&name[..len]).unwrap_or("?")
    } else {
        "?"
    };
    // SAFETY: `current` is valid in the probed task's context.
    let comm = unsafe { (*bindings::get_current()).comm };
    let comm_len = comm.iter().position(|&c| c == 0).unwrap_or(comm.len());
    let comm = core::str::from_utf8(
        // SAFETY: `c_char` and `u8` have the same layout.
        unsafe { core::slice::from_raw_parts(comm.as_ptr().cast::<u8>(), comm_len) },
    )
    .unwrap_or("?");
    // The register names of the classic example on each architecture.
    #[cfg(CONFIG_X86_64)]
    pr_info!(
        "<do_sys_open> p->addr = {:p}, ip = {:#x}, flags = {:#x}, comm = {}, filename = \"{}\"\n",
        p.addr,
        ip,
        flags,
        comm,
        shown
    );
    #[cfg(CONFIG_ARM64)]
    pr_info!(
        "<do_sys_open> p->addr = {:p}, pc = {:#x}, pstate = {:#x}, x0 = {:#x}, x1 = {:#x}, comm = {}, filename = \"{}\"\n",
        p.addr,
        ip,
        flags,
        kp::regs::x(regs, 0).unwrap_or(0),
        kp::regs::x(regs, 1).unwrap_or(0),
        comm,
        shown
    );
    0
}

/// Prints the flags after the probed instruction ran.
///
/// # Safety
///
/// Called by the engine with a valid trap frame.
unsafe extern "C" fn handler_post(_p: *mut KpKprobe, regs: *mut bindings::pt_regs, _f: c_ulong) {
    if POST.fetch_add(1, Ordering::Relaxed) < 3 {
        // SAFETY: the engine passes the trap frame.
        let regs = unsafe { &*regs };
        let flags = kp::regs::flags(regs);
        #[cfg(CONFIG_X86_64)]
        pr_info!("<do_sys_open> post_handler: flags = {:#x}\n", flags);
        #[cfg(CONFIG_ARM64)]
        pr_info!("<do_sys_open> post_handler: pstate = {:#x}\n", flags);
    }
}

struct KprobeExample;

impl kernel::Module for KprobeExample {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        // SAFETY: init runs once, before any other access to PROBE.
        let p = unsafe { &mut *core::ptr::addr_of_mut!(PROBE) };
        p.symbol_name = c"do_sys_open".as_ptr().cast();
        p.pre_handler = Some(handler_pre);
        p.post_handler = Some(handler_post);
        // SAFETY: PROBE is static; exit unregisters it.
        let r = unsafe { kp::kp_register_kprobe(p) };
        if r < 0 {
            pr_err!("register_kprobe failed, returned {}\n", r);
            return Err(Error::from_errno(r));
        }
        pr_info!("Planted kprobe at {:p}\n", p.addr);
        Ok(KprobeExample)
    }
}

impl Drop for KprobeExample {
    fn drop(&mut self) {
        // SAFETY: registered in init; nothing else touches PROBE.
        let p = unsafe { &mut *core::ptr::addr_of_mut!(PROBE) };
        // SAFETY: as above.
        unsafe { kp::kp_unregister_kprobe(p) };
        pr_info!(
            "kprobe at {:p} unregistered: {} hits, {} post, {} missed\n",
            p.addr,
            PRE.load(Ordering::Relaxed),
            POST.load(Ordering::Relaxed),
            p.nmissed
        );
    }
}
