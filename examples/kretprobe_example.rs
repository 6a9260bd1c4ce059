// SPDX-License-Identifier: GPL-2.0

//! The classic kretprobe example (samples/kprobes/kretprobe_example.c), in
//! Rust on this engine's safe API: times the function given as `func=`
//! (default `do_sys_open`). The entry handler skips kernel threads and keeps
//! the entry time as the call's typed data; the return handler prints what
//! the function returned and how long it took; unloading prints how many
//! calls were missed.

#[path = "../src/api.rs"]
mod kp;

use kernel::prelude::*;
use kp::{Regs, ReturnInfo, Target};

module! {
    type: KretprobeExample,
    name: "kretprobe_example",
    author: "kprobes-rs developers",
    description: "The classic kretprobe example on the Rust kprobes engine",
    license: "GPL",
}

kp::string_param!(unsafe fn func = kp_param_func[512]);

struct Timing {
    name: &'static str,
}

impl kp::KretprobeHandler for Timing {
    /// The entry time (`ktime_get_mono_fast_ns()`: handlers may run in NMI
    /// context, where `ktime_get()` is not safe).
    type Data = i64;

    fn entry(&self, _regs: &Regs) -> Option<i64> {
        // Skip kernel threads, as the classic example does.
        if kp::current_pid().1 {
            return None;
        }
        // SAFETY: plain clock read.
        Some(unsafe { kernel::bindings::ktime_get_mono_fast_ns() as i64 })
    }

    fn ret(&self, entry_stamp: i64, _info: &ReturnInfo, regs: &mut Regs) {
        // SAFETY: plain clock read.
        let delta = unsafe { kernel::bindings::ktime_get_mono_fast_ns() as i64 } - entry_stamp;
        let (pid, _) = kp::current_pid();
        pr_info!(
            "{} returned {} and took {} ns to execute (comm {}, pid {})\n",
            self.name,
            regs.return_value() as isize,
            delta,
            kp::Comm::current().as_str(),
            pid
        );
    }
}

struct KretprobeExample {
    rp: Option<Pin<KBox<kp::Kretprobe<Timing>>>>,
}

impl kernel::Module for KretprobeExample {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let f = func();
        let name = f.to_str().unwrap_or("?");
        // maxactive 20, as the classic example.
        let rp = kp::Kretprobe::register_maxactive(Target::Symbol(f), 20, Timing { name })
            .inspect_err(|e| pr_err!("register_kretprobe failed, returned {}\n", e.to_errno()))?;
        pr_info!("Planted return probe at {}: {:#x}\n", name, rp.addr());
        Ok(KretprobeExample { rp: Some(rp) })
    }
}

impl Drop for KretprobeExample {
    fn drop(&mut self) {
        if let Some(rp) = self.rp.take() {
            let (addr, name, missed) = (rp.addr(), rp.handler().name, rp.nmissed());
            drop(rp);
            pr_info!("kretprobe at {:#x} unregistered\n", addr);
            pr_info!("Missed probing {} instances of {}\n", missed, name);
        }
    }
}
