// SPDX-License-Identifier: GPL-2.0

//! The classic offset probe (the arm64 kprobes tutorial's `_do_fork` example):
//! a kprobe inside `kernel_clone`, on the instruction right after the call to
//! `pid_vnr()`, where the return register holds the new task's pid.
//!
//! The offset is found at load time by decoding `kernel_clone` with the
//! engine's instruction decoder and looking for the call whose target is
//! `pid_vnr` (parameter `offset=0x..` overrides it); the module says which.

#[path = "../src/api.rs"]
mod kp;

use core::sync::atomic::{AtomicUsize, Ordering};
use kernel::prelude::*;
use kp::{Next, Probe, Regs, Target};

module! {
    type: OffsetExample,
    name: "offset_example",
    author: "kprobes-rs developers",
    description: "An offset kprobe in kernel_clone reading pid_vnr's result",
    license: "GPL",
}

kp::string_param!(unsafe fn offset_param = kp_param_offset[32]);

struct ChildPid {
    hits: AtomicUsize,
}

impl kp::KprobeHandler for ChildPid {
    fn pre(&self, p: &Probe, regs: &mut Regs) -> Next {
        self.hits.fetch_add(1, Ordering::Relaxed);
        let (pid, _) = kp::current_pid();
        pr_info!(
            "<kernel_clone> p->addr = {:#x}: child pid = {} (parent {}, comm {})\n",
            p.addr(),
            regs.return_value() as i32,
            pid,
            kp::Comm::current().as_str()
        );
        Next::Continue
    }
}

/// Parses `0x...` or decimal.
fn parse_offset(s: &[u8]) -> Option<u32> {
    let s = core::str::from_utf8(s).ok()?;
    match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The offset of the instruction after `kernel_clone`'s call to `pid_vnr`.
fn find_offset() -> Result<u32> {
    let f = kp::lookup_symbol(c"kernel_clone").ok_or(ENOENT)?;
    let pid_vnr = kernel::bindings::pid_vnr as *const () as usize;
    for i in kp::instructions(f) {
        if i.is_call && i.target == Some(pid_vnr) {
            pr_info!(
                "found by decoding kernel_clone ({} bytes) at load time: call pid_vnr at +{:#x}, \
                 next instruction at +{:#x}\n",
                f.size,
                i.addr - f.addr,
                i.next() - f.addr
            );
            return Ok((i.next() - f.addr) as u32);
        }
    }
    pr_err!("no call to pid_vnr found in kernel_clone; give offset=\n");
    Err(ENOENT)
}

struct OffsetExample {
    probe: Option<Pin<KBox<kp::Kprobe<ChildPid>>>>,
}

impl kernel::Module for OffsetExample {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let given = offset_param().to_bytes();
        let off = if given.is_empty() {
            find_offset()?
        } else {
            let off = parse_offset(given).ok_or(EINVAL)?;
            pr_info!("offset {:#x} given as module parameter\n", off);
            off
        };
        let probe = kp::Kprobe::register(
            Target::SymbolOffset(c"kernel_clone", off),
            ChildPid {
                hits: AtomicUsize::new(0),
            },
        )
        .inspect_err(|e| pr_err!("register_kprobe failed, returned {}\n", e.to_errno()))?;
        pr_info!(
            "Planted kprobe at kernel_clone+{:#x} ({:#x})\n",
            off,
            probe.addr()
        );
        Ok(OffsetExample { probe: Some(probe) })
    }
}

impl Drop for OffsetExample {
    fn drop(&mut self) {
        if let Some(p) = self.probe.take() {
            let hits = p.handler().hits.load(Ordering::Relaxed);
            drop(p);
            pr_info!("kprobe in kernel_clone unregistered after {} hits\n", hits);
        }
    }
}
