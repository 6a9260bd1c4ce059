// SPDX-License-Identifier: GPL-2.0

//! `kp_ftrace`: probes at a kernel function's entry. On x86_64 they are
//! served by the engine's ftrace_ops at the function's ftrace call site
//! (`KP_FLAG_FTRACE`); on arm64 (no ftrace registers in 6.12) by a BRK past
//! the patchable entry. Either way the handlers see what the kernel's
//! kprobes show: the pre handler ip one past the site on x86_64 (as after an
//! int3), the post handler ip past the site's instruction, redirection
//! honoured, kretprobes on the same entry.
//!
//! The target is `jiffies_to_msecs()` (traced: it starts with an ftrace
//! call site on x86_64), which the rest of the kernel may call at the same
//! time: handlers act only on this suite's own argument value.

use crate::kp::{self, Next, Probe, Regs, ReturnInfo, Target};
use crate::kunit::Test;
use crate::util::{insn_len_at, this_cpu, PRE_IP_OFFSET};
use core::hint::black_box;
use core::sync::atomic::{AtomicUsize, Ordering};

extern "C" {
    fn jiffies_to_msecs(j: usize) -> u32;
}

/// The argument the handlers look for (no one else converts this many
/// jiffies).
const OURS: usize = 0x7e57_0000_5eed;

fn call(j: usize) -> u32 {
    // SAFETY: a pure conversion.
    unsafe { jiffies_to_msecs(black_box(j)) }
}

fn ours(regs: &Regs) -> bool {
    regs.arg(0) == Some(OURS)
}

struct Entry {
    pre: AtomicUsize,
    post: AtomicUsize,
    pre_ip: AtomicUsize,
    post_ip: AtomicUsize,
    /// CPU + 1 of a hit of ours whose post handler is due (the first
    /// instruction may already have changed the argument register).
    post_due: AtomicUsize,
    redirect: bool,
}

impl kp::KprobeHandler for Entry {
    const POST_HANDLER: bool = true;

    fn pre(&self, _p: &Probe, regs: &mut Regs) -> Next {
        if !ours(regs) {
            return Next::Continue;
        }
        self.pre.fetch_add(1, Ordering::SeqCst);
        self.pre_ip.store(regs.ip(), Ordering::SeqCst);
        self.post_due
            .store(this_cpu() as usize + 1, Ordering::SeqCst);
        // SAFETY: jiffies_to_msecs() has no side effect; any u32 is a
        // result its caller (this suite) accepts. `Redirected` follows.
        if self.redirect && unsafe { regs.return_now(7) } {
            return Next::Redirected;
        }
        Next::Continue
    }

    fn post(&self, _p: &Probe, regs: &mut Regs) {
        // Pre and post of one hit run on one CPU with interrupts off.
        let me = this_cpu() as usize + 1;
        if self
            .post_due
            .compare_exchange(me, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            self.post.fetch_add(1, Ordering::SeqCst);
            self.post_ip.store(regs.ip(), Ordering::SeqCst);
        }
    }
}

fn entry(redirect: bool) -> Entry {
    Entry {
        pre: AtomicUsize::new(0),
        post: AtomicUsize::new(0),
        pre_ip: AtomicUsize::new(0),
        post_ip: AtomicUsize::new(0),
        post_due: AtomicUsize::new(0),
        redirect,
    }
}

fn ftrace_entry_pre_post(t: &mut Test) {
    let (want, want77) = (call(OURS), call(77));
    let p = match kp::Kprobe::register(Target::Symbol(c"jiffies_to_msecs"), entry(false)) {
        Ok(p) => p,
        Err(e) => {
            kp_expect!(t, false, "register: {:?}", e);
            return;
        }
    };
    // The engine's report; ftrace serves entries on x86_64 only.
    kp_expect_eq!(
        t,
        p.probe().is_ftrace(),
        cfg!(CONFIG_X86_64),
        "served by ftrace"
    );
    let f = kp::lookup_symbol(c"jiffies_to_msecs").map_or(0, |s| s.addr);
    // x86_64: the ftrace site is the entry (or past endbr64); arm64: past
    // the two patchable-entry instructions.
    kp_expect!(
        t,
        p.addr() >= f && p.addr() <= f + 8,
        "addr {:#x} fn {:#x}",
        p.addr(),
        f
    );
    kp_expect_eq!(t, call(OURS), want);
    kp_expect_eq!(t, call(77), want77);
    let h = p.handler();
    kp_expect_eq!(t, h.pre.load(Ordering::SeqCst), 1);
    kp_expect_eq!(t, h.post.load(Ordering::SeqCst), 1);
    kp_expect_eq!(t, h.pre_ip.load(Ordering::SeqCst), p.addr() + PRE_IP_OFFSET);
    kp_expect_eq!(
        t,
        h.post_ip.load(Ordering::SeqCst),
        p.addr() + insn_len_at(p.addr())
    );
    // Disabled: no handler runs, and it comes back.
    kp_expect!(t, p.disable().is_ok());
    kp_expect_eq!(t, call(OURS), want);
    kp_expect_eq!(t, h.pre.load(Ordering::SeqCst), 1);
    kp_expect!(t, p.enable().is_ok());
    kp_expect_eq!(t, call(OURS), want);
    kp_expect_eq!(t, h.pre.load(Ordering::SeqCst), 2);
}

fn ftrace_entry_redirect(t: &mut Test) {
    let (want, want5) = (call(OURS), call(5));
    let p = match kp::Kprobe::register(Target::Symbol(c"jiffies_to_msecs"), entry(true)) {
        Ok(p) => p,
        Err(e) => {
            kp_expect!(t, false, "register: {:?}", e);
            return;
        }
    };
    // The function does not run: the handler's value comes back.
    kp_expect_eq!(t, call(OURS), 7);
    kp_expect_eq!(t, p.handler().pre.load(Ordering::SeqCst), 1);
    kp_expect_eq!(
        t,
        p.handler().post.load(Ordering::SeqCst),
        0,
        "no post after a redirect"
    );
    // Others' calls are not affected.
    kp_expect_eq!(t, call(5), want5);
    drop(p);
    kp_expect_eq!(t, call(OURS), want);
}

struct Ret {
    returns: AtomicUsize,
    value: AtomicUsize,
    ret_addr: AtomicUsize,
}

impl kp::KretprobeHandler for Ret {
    type Data = ();

    fn entry(&self, regs: &Regs) -> Option<()> {
        ours(regs).then_some(())
    }

    fn ret(&self, _d: (), info: &ReturnInfo, regs: &mut Regs) {
        self.returns.fetch_add(1, Ordering::SeqCst);
        self.value.store(regs.return_value(), Ordering::SeqCst);
        self.ret_addr.store(info.ret_addr(), Ordering::SeqCst);
    }
}

fn ftrace_entry_kretprobe_and_aggregate(t: &mut Test) {
    let want = call(OURS);
    let rp = kp::Kretprobe::register(
        Target::Symbol(c"jiffies_to_msecs"),
        Ret {
            returns: AtomicUsize::new(0),
            value: AtomicUsize::new(usize::MAX),
            ret_addr: AtomicUsize::new(0),
        },
    );
    // A kprobe on the same entry joins the kretprobe's point.
    let p = kp::Kprobe::register(Target::Symbol(c"jiffies_to_msecs"), entry(false));
    let (Ok(rp), Ok(p)) = (rp, p) else {
        kp_expect!(t, false, "register failed");
        return;
    };
    kp_expect_eq!(t, rp.addr(), p.addr());
    kp_expect_eq!(t, call(OURS), want);
    kp_expect_eq!(t, rp.handler().returns.load(Ordering::SeqCst), 1);
    kp_expect_eq!(t, rp.handler().value.load(Ordering::SeqCst) as u32, want);
    let sym = crate::util::Sym::of(rp.handler().ret_addr.load(Ordering::SeqCst));
    kp_expect!(
        t,
        sym.bytes().ends_with(b"[kprobes_kunit]"),
        "returns to {}",
        sym.as_str()
    );
    kp_expect_eq!(t, p.handler().pre.load(Ordering::SeqCst), 1);
    drop(rp);
    kp_expect_eq!(t, call(OURS), want);
    kp_expect_eq!(t, p.handler().pre.load(Ordering::SeqCst), 2);
}

kunit_suite!(
    kp_ftrace,
    "kp_ftrace",
    [
        ftrace_entry_pre_post,
        ftrace_entry_redirect,
        ftrace_entry_kretprobe_and_aggregate
    ]
);
