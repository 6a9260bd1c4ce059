// SPDX-License-Identifier: GPL-2.0

//! The classic kretprobe example (samples/kprobes/kretprobe_example.c), in
//! Rust on this engine: times `do_sys_open` (entry_handler stores the entry
//! time in the instance's data) and prints what it returned and how long it
//! took, for the first calls; totals at unload.

#[path = "../src/api.rs"]
mod kp;

use core::sync::atomic::{AtomicUsize, Ordering};
use kernel::bindings;
use kernel::ffi::c_int;
use kernel::prelude::*;
use kp::{KpKretprobe, KpKretprobeInstance};

module! {
    type: KretprobeExample,
    name: "kretprobe_example",
    author: "kprobes-rs developers",
    description: "The classic kretprobe example on the Rust kprobes engine",
    license: "GPL",
}

/// Returns printed in full; the rest are only counted.
const VERBOSE: usize = 8;

static RETURNS: AtomicUsize = AtomicUsize::new(0);

/// Per-instance data: the entry time.
#[repr(C)]
struct MyData {
    entry_stamp: i64,
}

/// The kretprobe. The engine keeps a pointer to it until unregister.
static mut RP: KpKretprobe = KpKretprobe::new();

/// Stores the entry time.
///
/// # Safety
///
/// Called by the engine with an instance carrying a `MyData`.
unsafe extern "C" fn entry_handler(
    ri: *mut KpKretprobeInstance,
    _regs: *mut bindings::pt_regs,
) -> c_int {
    // SAFETY: the engine passes a live instance; `data_size` is a `MyData`.
    let data = unsafe { (*ri).data().cast::<MyData>() };
    // SAFETY: as above.
    unsafe { (*data).entry_stamp = bindings::ktime_get() };
    0
}

/// Prints the return value and the duration.
///
/// # Safety
///
/// As [`entry_handler`].
unsafe extern "C" fn ret_handler(
    ri: *mut KpKretprobeInstance,
    regs: *mut bindings::pt_regs,
) -> c_int {
    if RETURNS.fetch_add(1, Ordering::Relaxed) >= VERBOSE {
        return 0;
    }
    // SAFETY: the engine passes a live instance and frame.
    let (ri, regs) = unsafe { (&mut *ri, &*regs) };
    // SAFETY: `data_size` is a `MyData`, set by `entry_handler`.
    let start = unsafe { (*ri.data().cast::<MyData>()).entry_stamp };
    // SAFETY: plain call.
    let delta = unsafe { bindings::ktime_get() } - start;
    let retval = kp::regs::return_value(regs) as isize;
    pr_info!(
        "do_sys_open returned {} and took {} ns to execute\n",
        retval,
        delta
    );
    0
}

struct KretprobeExample;

impl kernel::Module for KretprobeExample {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        // SAFETY: init runs once, before any other access to RP.
        let rp = unsafe { &mut *core::ptr::addr_of_mut!(RP) };
        rp.kp.symbol_name = c"do_sys_open".as_ptr().cast();
        rp.handler = Some(ret_handler);
        rp.entry_handler = Some(entry_handler);
        rp.data_size = core::mem::size_of::<MyData>();
        rp.maxactive = 20;
        // SAFETY: RP is static; exit unregisters it.
        let r = unsafe { kp::kp_register_kretprobe(rp) };
        if r < 0 {
            pr_err!("register_kretprobe failed, returned {}\n", r);
            return Err(Error::from_errno(r));
        }
        pr_info!("Planted return probe at do_sys_open: {:p}\n", rp.kp.addr);
        Ok(KretprobeExample)
    }
}

impl Drop for KretprobeExample {
    fn drop(&mut self) {
        // SAFETY: registered in init; nothing else touches RP.
        let rp = unsafe { &mut *core::ptr::addr_of_mut!(RP) };
        // SAFETY: as above.
        unsafe { kp::kp_unregister_kretprobe(rp) };
        pr_info!(
            "kretprobe at {:p} unregistered: {} returns, missed probing {} instances of do_sys_open\n",
            rp.kp.addr,
            RETURNS.load(Ordering::Relaxed),
            rp.nmissed
        );
    }
}
