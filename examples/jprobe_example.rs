// SPDX-License-Identifier: GPL-2.0

//! The classic jprobe example, done safely: the handler receives
//! `do_filp_open()`'s arguments typed, read from the registers (and stack)
//! per the calling convention, with no stack mirroring and no
//! `jprobe_return()`. Prints the dfd and the file name (`struct filename`'s
//! `name`); parameter `testfile=NAME` reports only opens of that file.

#[path = "../src/api.rs"]
mod kp;

use core::ffi::c_void;
use core::sync::atomic::{AtomicUsize, Ordering};
use kernel::prelude::*;
use kp::Regs;

module! {
    type: JprobeExample,
    name: "jprobe_example",
    author: "kprobes-rs developers",
    description: "Typed function arguments (what jprobes gave) on the Rust kprobes engine",
    license: "GPL",
}

kp::string_param!(unsafe fn testfile = kp_param_testfile[256]);

/// Calls reported when no `testfile` is given.
const VERBOSE: usize = 8;

struct FilpOpen {
    calls: AtomicUsize,
    reported: AtomicUsize,
}

impl kp::EntryHandler for FilpOpen {
    /// `struct file *do_filp_open(int dfd, struct filename *pathname,
    /// const struct open_flags *op)`.
    type Args = (i32, *const c_void, *const c_void);

    fn entry(&self, (dfd, pathname, _op): Self::Args, _regs: &Regs) {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        // `struct filename` starts with `const char *name`.
        let mut buf = [0u8; 256];
        let name = kp::read_kernel::<usize>(pathname as usize)
            .and_then(|p| kp::read_kernel_str(p, &mut buf))
            .unwrap_or(b"?");
        let want = testfile().to_bytes();
        if (want.is_empty() && n < VERBOSE) || (!want.is_empty() && name == want) {
            self.reported.fetch_add(1, Ordering::Relaxed);
            let (pid, _) = kp::current_pid();
            pr_info!(
                "jprobe: do_filp_open(dfd = {}, pathname->name = \"{}\") comm = {}, pid = {}\n",
                dfd,
                core::str::from_utf8(name).unwrap_or("?"),
                kp::Comm::current().as_str(),
                pid
            );
        }
    }
}

struct JprobeExample {
    probe: Option<Pin<KBox<kp::EntryProbe<FilpOpen>>>>,
}

impl kernel::Module for JprobeExample {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let h = FilpOpen {
            calls: AtomicUsize::new(0),
            reported: AtomicUsize::new(0),
        };
        let probe = kp::EntryProbe::register_entry(c"do_filp_open", h)
            .inspect_err(|e| pr_err!("register failed, returned {}\n", e.to_errno()))?;
        pr_info!(
            "Planted typed entry probe at do_filp_open ({:#x})\n",
            probe.addr()
        );
        Ok(JprobeExample { probe: Some(probe) })
    }
}

impl Drop for JprobeExample {
    fn drop(&mut self) {
        if let Some(p) = self.probe.take() {
            let h = p.entry_handler();
            let (calls, reported) = (
                h.calls.load(Ordering::Relaxed),
                h.reported.load(Ordering::Relaxed),
            );
            drop(p);
            pr_info!(
                "jprobe at do_filp_open unregistered: {} calls, {} reported\n",
                calls,
                reported
            );
        }
    }
}
