// SPDX-License-Identifier: GPL-2.0

//! `kp_kernel`: a probe on a real kernel function, hit from user space.

use crate::kp::KpKprobe;
use crate::kunit::Test;
use crate::util::{arg, register, run, unregister};
use core::sync::atomic::{AtomicUsize, Ordering};
use kernel::bindings;
use kernel::ffi::c_int;

/// The file name the user-space helper opens.
const MARKER: &[u8] = b"/kp_kunit_marker_file";
static MARKER_HITS: AtomicUsize = AtomicUsize::new(0);
static OPEN_HITS: AtomicUsize = AtomicUsize::new(0);

/// Pre handler on `do_sys_open`: counts opens of [`MARKER`].
///
/// # Safety
///
/// Called by the engine with a valid trap frame.
unsafe extern "C" fn open_pre(_p: *mut KpKprobe, regs: *mut bindings::pt_regs) -> c_int {
    // SAFETY: the engine passes the trap frame.
    let regs = unsafe { &*regs };
    OPEN_HITS.fetch_add(1, Ordering::SeqCst);
    // do_sys_open(int dfd, const char __user *filename, int flags, umode_t mode)
    let mut buf = [0u8; 32];
    // SAFETY: a nofault copy from the user pointer into a local buffer.
    let left = unsafe {
        bindings::copy_from_user_nofault(
            buf.as_mut_ptr().cast(),
            arg(regs, 1) as *const _,
            MARKER.len() + 1,
        )
    };
    if left == 0 && &buf[..MARKER.len()] == MARKER && buf[MARKER.len()] == 0 {
        MARKER_HITS.fetch_add(1, Ordering::SeqCst);
    }
    0
}

fn cat_marker() -> c_int {
    run(c"/bin/cat", &[c"/kp_kunit_marker_file"])
}

fn kernel_do_sys_open(t: &mut Test) {
    MARKER_HITS.store(0, Ordering::SeqCst);
    OPEN_HITS.store(0, Ordering::SeqCst);
    let mut p = KpKprobe::new();
    p.symbol_name = c"do_sys_open".as_ptr().cast();
    p.pre_handler = Some(open_pre);
    kp_expect_eq!(t, register(&mut p), 0);
    t.info(format_args!("do_sys_open probed at {:p}", p.addr));
    for _ in 0..3 {
        // cat exits 1: the file does not exist. The open still happened.
        let r = cat_marker();
        kp_expect!(t, r >= 0, "call_usermodehelper: {}", r);
    }
    kp_expect_eq!(t, MARKER_HITS.load(Ordering::SeqCst), 3);
    kp_expect!(t, OPEN_HITS.load(Ordering::SeqCst) >= 3);
    unregister(&mut p);
    cat_marker();
    kp_expect_eq!(t, MARKER_HITS.load(Ordering::SeqCst), 3);
    kp_expect_eq!(t, p.nmissed, 0);
}

kunit_suite!(kp_kernel, "kp_kernel", [kernel_do_sys_open]);
