// SPDX-License-Identifier: GPL-2.0

//! The classic kprobe example (samples/kprobes/kprobe_example.c and the
//! kprobes tutorial), in Rust on this engine's safe API.
//!
//! Probes `do_sys_open` (parameter `symbol=` to change it). The pre-handler
//! prints the probe address, ip/pc, flags/pstate and the first argument
//! registers; the post-handler prints the flags. With `testfile=NAME` only
//! opens of that file are reported, with the dfd and the name, as in the
//! tutorial; without it the first hits are.

#[path = "../src/api.rs"]
mod kp;

use core::sync::atomic::{AtomicUsize, Ordering};
use kernel::prelude::*;
use kp::{Next, Probe, Regs, Target};

module! {
    type: KprobeExample,
    name: "kprobe_example",
    author: "kprobes-rs developers",
    description: "The classic kprobe example on the Rust kprobes engine",
    license: "GPL",
}

kp::string_param!(unsafe fn symbol = kp_param_symbol[512]);
kp::string_param!(unsafe fn testfile = kp_param_testfile[256]);

/// Hits reported in full when no `testfile` is given.
const VERBOSE_HITS: usize = 8;

struct Sample {
    name: &'static str,
    hits: AtomicUsize,
    reported: AtomicUsize,
    /// Post-handler lines still to print (one per reported hit).
    posts: AtomicUsize,
}

impl Sample {
    /// The file name `do_sys_open(dfd, filename, flags, mode)` opens.
    fn opened<'a>(&self, regs: &Regs, buf: &'a mut [u8]) -> Option<&'a [u8]> {
        if self.name != "do_sys_open" {
            return None;
        }
        kp::read_user_str(regs.arg(1)?, buf)
    }
}

impl kp::KprobeHandler for Sample {
    const POST_HANDLER: bool = true;

    fn pre(&self, p: &Probe, regs: &mut Regs) -> Next {
        let n = self.hits.fetch_add(1, Ordering::Relaxed);
        let mut buf = [0u8; 256];
        let file = self.opened(regs, &mut buf);
        let want = testfile().to_bytes();
        if want.is_empty() {
            if n >= VERBOSE_HITS {
                return Next::Continue;
            }
        } else if file != Some(want) {
            return Next::Continue;
        }
        self.reported.fetch_add(1, Ordering::Relaxed);
        self.posts.fetch_add(1, Ordering::Relaxed);
        #[cfg(CONFIG_X86_64)]
        pr_info!(
            "<{}> p->addr = {:#x}, ip = {:#x}, flags = {:#x}, di = {:#x}, si = {:#x}, dx = {:#x}\n",
            self.name,
            p.addr(),
            regs.ip(),
            regs.flags(),
            regs.di(),
            regs.si(),
            regs.dx()
        );
        #[cfg(CONFIG_ARM64)]
        pr_info!(
            "<{}> p->addr = {:#x}, pc = {:#x}, pstate = {:#x}, x0 = {:#x}, x1 = {:#x}, x2 = {:#x}\n",
            self.name,
            p.addr(),
            regs.pc(),
            regs.pstate(),
            regs.x(0).unwrap_or(0),
            regs.x(1).unwrap_or(0),
            regs.x(2).unwrap_or(0)
        );
        if let Some(f) = file {
            pr_info!(
                "<{}> dfd = {}, filename = \"{}\", flags = {:#x}, comm = {}\n",
                self.name,
                regs.arg(0).unwrap_or(0) as i32,
                core::str::from_utf8(f).unwrap_or("?"),
                regs.arg(2).unwrap_or(0) as u32,
                kp::Comm::current().as_str()
            );
        }
        Next::Continue
    }

    fn post(&self, p: &Probe, regs: &mut Regs) {
        if self
            .posts
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1))
            .is_ok()
        {
            #[cfg(CONFIG_X86_64)]
            pr_info!(
                "<{}> p->addr = {:#x}, flags = {:#x}\n",
                self.name,
                p.addr(),
                regs.flags()
            );
            #[cfg(CONFIG_ARM64)]
            pr_info!(
                "<{}> p->addr = {:#x}, pstate = {:#x}\n",
                self.name,
                p.addr(),
                regs.pstate()
            );
        }
    }
}

struct KprobeExample {
    probe: Option<Pin<KBox<kp::Kprobe<Sample>>>>,
}

impl kernel::Module for KprobeExample {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let sym = symbol();
        let sample = Sample {
            name: sym.to_str().unwrap_or("?"),
            hits: AtomicUsize::new(0),
            reported: AtomicUsize::new(0),
            posts: AtomicUsize::new(0),
        };
        let probe = kp::Kprobe::register(Target::Symbol(sym), sample).inspect_err(|e| {
            pr_err!("register_kprobe failed, returned {}\n", e.to_errno());
        })?;
        pr_info!("Planted kprobe at {:#x}\n", probe.addr());
        if !testfile().is_empty() {
            pr_info!(
                "reporting only opens of {}\n",
                testfile().to_str().unwrap_or("?")
            );
        }
        Ok(KprobeExample { probe: Some(probe) })
    }
}

impl Drop for KprobeExample {
    fn drop(&mut self) {
        let Some(probe) = self.probe.take() else {
            return;
        };
        let addr = probe.addr();
        // Dropping the guard unregisters; read the counters first.
        let s = probe.handler();
        let (hits, reported) = (
            s.hits.load(Ordering::Relaxed),
            s.reported.load(Ordering::Relaxed),
        );
        let missed = probe.nmissed();
        drop(probe);
        pr_info!(
            "kprobe at {:#x} unregistered: {} hits, {} reported, {} missed\n",
            addr,
            hits,
            reported,
            missed
        );
    }
}
