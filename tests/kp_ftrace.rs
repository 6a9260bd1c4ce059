// SPDX-License-Identifier: GPL-2.0

//! `kp_ftrace`: probes at a kernel function's entry, served through ftrace
//! at the function's call site (`KP_FLAG_FTRACE`) on both arches (arm64:
//! the engine's shared ftrace_ops with ftrace's argument registers; a
//! probe that needs every register takes a BRK past the patchable entry).
//! The handlers see what the kernel's kprobes show: the pre handler ip one
//! past the site on x86_64 (as after an int3), at the site on arm64 (as at
//! a BRK), the post handler ip past the site's instruction, redirection
//! honoured, kretprobes on the same entry.
//!
//! On x86_64 the site becomes a direct call to the engine's trampoline,
//! kept (parked) for a while after its last probe goes; where someone else
//! holds the function's direct call, the engine's shared ftrace_ops serves
//! it instead (`src/ftrace.c`).
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
    fn kp_test_foreign_direct(ip: usize, on: bool) -> kernel::ffi::c_int;
    fn kp_test_kernel_kprobe(sym: *const core::ffi::c_char, on: bool) -> kernel::ffi::c_int;
    fn kp_test_kernel_kprobe_hits() -> usize;
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
        if self.redirect {
            // SAFETY: jiffies_to_msecs() has no side effect; any u32 is a
            // result its caller (this suite) accepts. `Redirected` follows.
            if let Some(r) = unsafe { regs.return_now(7) } {
                return Next::Redirected(r);
            }
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
    // The engine's report: ftrace serves entries on both arches.
    kp_expect!(t, p.probe().is_ftrace(), "served by ftrace");
    let f = kp::lookup_symbol(c"jiffies_to_msecs").map_or(0, |s| s.addr);
    // x86_64: the ftrace site is the entry (or past endbr64); arm64: past
    // the two patchable-entry instructions (and a BTI kernel's `bti c`).
    kp_expect!(
        t,
        p.addr() >= f && p.addr() <= f + 8 + if cfg!(CONFIG_ARM64_BTI_KERNEL) { 4 } else { 0 },
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

/// Takes a stack trace in its pre handler, for this suite's calls only.
struct EntryTracer;

static ENTRY_TRACE: crate::util::Trace = crate::util::Trace::new();

impl kp::KprobeHandler for EntryTracer {
    fn pre(&self, _p: &Probe, regs: &mut Regs) -> Next {
        if ours(regs) {
            ENTRY_TRACE.take();
        }
        Next::Continue
    }
}

#[inline(never)]
fn entry_trace_caller() -> u32 {
    black_box(call(OURS))
}

/// A stack trace taken in a pre handler at a function's entry goes through
/// the probed function to its caller: on x86_64 from the ftrace direct
/// trampoline (the site's call's return address; decisive on the ORC
/// kernels), on arm64 through `ftrace_caller`, which makes a frame record for the
/// site's caller (a BRK's exception frame would not: the function has no
/// frame record yet at its entry, and the link register is no frame).
fn ftrace_entry_stack_trace(t: &mut Test) {
    let want = call(OURS);
    let p = match kp::Kprobe::register(Target::Symbol(c"jiffies_to_msecs"), EntryTracer) {
        Ok(p) => p,
        Err(e) => {
            kp_expect!(t, false, "register: {:?}", e);
            return;
        }
    };
    ENTRY_TRACE.clear();
    kp_expect_eq!(t, entry_trace_caller(), want);
    drop(p);
    let (words, n) = ENTRY_TRACE.get();
    let trace = words.get(..n).unwrap_or(&[]);
    let ok = crate::util::show_trace(
        t,
        "in a pre handler at a function's entry",
        trace,
        "entry_trace_caller",
    );
    kp_expect!(t, ok, "the caller is not in the trace");
    kp_expect!(
        t,
        crate::util::trace_has(trace, "jiffies_to_msecs"),
        "the probed function is not in the trace"
    );
}

/// A pre handler's return-to-caller at an entry while the function graph
/// tracer traces the function, the tracer there first (so that on arm64 its
/// ftrace callback runs after the engine's and hijacks the return through
/// lr after the handler decided to return): the call returns the handler's
/// value, and the tracer's shadow stack stays balanced (an unbalanced one
/// panics at the next traced return), checked by calls after.
fn ftrace_entry_redirect_under_function_graph(t: &mut Test) {
    let want = call(OURS);
    let sh = |cmd: &core::ffi::CStr| crate::util::run(c"/bin/sh", &[c"-c", cmd]);
    let on = sh(c"cd /sys/kernel/tracing && echo jiffies_to_msecs >set_graph_function && echo function_graph >current_tracer");
    if on != 0 {
        // The KTAP skip says why (no function graph tracer in this kernel).
        t.skip("the function graph tracer cannot be enabled");
        sh(c"cd /sys/kernel/tracing && echo >set_graph_function");
        return;
    }
    kp::ftrace_release();
    match kp::Kprobe::register(Target::Symbol(c"jiffies_to_msecs"), entry(true)) {
        Ok(p) => {
            for _ in 0..4 {
                kp_expect_eq!(t, call(OURS), 7);
            }
            kp_expect_eq!(t, p.handler().pre.load(Ordering::SeqCst), 4);
            drop(p);
        }
        Err(e) => kp_expect!(t, false, "register: {:?}", e),
    }
    // Traced returns after: the shadow stack is as it was.
    for _ in 0..4 {
        kp_expect_eq!(t, call(OURS), want);
    }
    kp_expect_eq!(
        t,
        sh(c"cd /sys/kernel/tracing && echo nop >current_tracer && echo >set_graph_function"),
        0
    );
    kp::ftrace_release();
}

/// A return probe on a function the function graph tracer traces (the
/// tracer there first): both hijack the return, each call's handler runs
/// once with the real return value, and traced returns stay balanced.
fn ftrace_kretprobe_under_function_graph(t: &mut Test) {
    let sh = |cmd: &core::ffi::CStr| crate::util::run(c"/bin/sh", &[c"-c", cmd]);
    let on = sh(c"cd /sys/kernel/tracing && echo jiffies_to_msecs >set_graph_function && echo 1 >max_graph_depth && echo function_graph >current_tracer");
    if on != 0 {
        t.skip("the function graph tracer cannot be enabled");
        sh(c"cd /sys/kernel/tracing && echo >set_graph_function && echo 0 >max_graph_depth");
        return;
    }
    let want = call(OURS);
    kp::ftrace_release();
    let ret = Ret {
        returns: AtomicUsize::new(0),
        value: AtomicUsize::new(usize::MAX),
        ret_addr: AtomicUsize::new(0),
    };
    match kp::Kretprobe::register(Target::Symbol(c"jiffies_to_msecs"), ret) {
        Ok(rp) => {
            for _ in 0..4 {
                kp_expect_eq!(t, call(OURS), want);
            }
            kp_expect_eq!(t, rp.handler().returns.load(Ordering::SeqCst), 4);
            kp_expect_eq!(t, rp.handler().value.load(Ordering::SeqCst), want as usize);
            drop(rp);
        }
        Err(e) => kp_expect!(t, false, "register: {:?}", e),
    }
    for _ in 0..4 {
        kp_expect_eq!(t, call(OURS), want);
    }
    kp_expect_eq!(
        t,
        sh(c"cd /sys/kernel/tracing && echo nop >current_tracer && echo >set_graph_function && echo 0 >max_graph_depth"),
        0
    );
    kp::ftrace_release();
}

/// Reads the argument, the return address and (arm64) x19 at the entry,
/// and changes the argument to 77.
struct ArgChanger<const FULL: bool> {
    arg: AtomicUsize,
    ret: AtomicUsize,
    x19: AtomicUsize,
    /// The CPU of the last hit, and the hits on the same CPU as the one
    /// before (where a stale x19 would show).
    last_cpu: AtomicUsize,
    same_cpu: AtomicUsize,
}

impl<const FULL: bool> kp::KprobeHandler for ArgChanger<FULL> {
    const FULL_REGS: bool = FULL;

    fn pre(&self, _p: &Probe, regs: &mut Regs) -> Next {
        if !ours(regs) {
            return Next::Continue;
        }
        self.arg.store(regs.arg(0).unwrap_or(0), Ordering::SeqCst);
        let cpu = this_cpu() as usize;
        if self.last_cpu.swap(cpu, Ordering::SeqCst) == cpu {
            self.same_cpu.fetch_add(1, Ordering::SeqCst);
        }
        #[cfg(CONFIG_ARM64)]
        {
            self.ret.store(regs.lr(), Ordering::SeqCst);
            self.x19
                .fetch_max(regs.x(19).unwrap_or(1), Ordering::SeqCst);
            // Not given back on the ftrace path (said once in the log), and
            // the next hit must not see it.
            if !FULL {
                // SAFETY: on the ftrace path the change never reaches the
                // CPU's x19.
                unsafe { regs.set_x(19, 0x5a) };
            }
        }
        #[cfg(CONFIG_X86_64)]
        {
            let mut w = 0usize;
            // SAFETY: a nofault read of the word at the entry's stack
            // pointer (the return address).
            unsafe {
                kernel::bindings::copy_from_kernel_nofault(
                    (&mut w as *mut usize).cast(),
                    regs.sp() as *const _,
                    8,
                )
            };
            self.ret.store(w, Ordering::SeqCst);
        }
        // SAFETY: jiffies_to_msecs() is pure; any argument is valid.
        unsafe { regs.set_arg(0, 77) };
        Next::Continue
    }
}

fn arg_changer<const FULL: bool>() -> ArgChanger<FULL> {
    ArgChanger {
        arg: AtomicUsize::new(0),
        ret: AtomicUsize::new(0),
        x19: AtomicUsize::new(0),
        last_cpu: AtomicUsize::new(usize::MAX),
        same_cpu: AtomicUsize::new(0),
    }
}

#[inline(never)]
fn arg_changer_caller() -> u32 {
    black_box(call(OURS))
}

/// The registers a pre handler at an entry reads and changes. Through
/// ftrace: the argument (changed, the function computes with the new one),
/// the return address (into the caller); on arm64, where ftrace saves only
/// x0-x8, fp, lr, sp and pc, x19 reads 0, also at the hit after a handler
/// set it (a change that cannot be given back). A handler that needs every
/// register (`FULL_REGS`) takes a BRK on arm64 and keeps ftrace on x86_64,
/// with the same results.
fn ftrace_entry_registers(t: &mut Test) {
    let want77 = call(77);
    fn check<const FULL: bool>(t: &mut Test, want77: u32) {
        let p = match kp::Kprobe::register(
            Target::Symbol(c"jiffies_to_msecs"),
            arg_changer::<FULL>(),
        ) {
            Ok(p) => p,
            Err(e) => {
                kp_expect!(t, false, "register (full: {}): {:?}", FULL, e);
                return;
            }
        };
        kp_expect_eq!(
            t,
            p.probe().is_ftrace(),
            !FULL || cfg!(CONFIG_X86_64),
            "served by ftrace (full registers: {})",
            FULL
        );
        // Again and again: a register a handler set that ftrace cannot give
        // back (arm64) reads 0 again at the next hit on that CPU.
        for _ in 0..8 {
            kp_expect_eq!(t, arg_changer_caller(), want77, "full: {}", FULL);
        }
        let h = p.handler();
        kp_expect_eq!(t, h.arg.load(Ordering::SeqCst), OURS);
        let ret = h.ret.load(Ordering::SeqCst);
        kp_expect!(
            t,
            crate::util::trace_has(&[ret], "arg_changer_caller"),
            "return address {:#x} (full: {})",
            ret,
            FULL
        );
        if cfg!(CONFIG_ARM64) && !FULL {
            kp_expect_eq!(t, h.x19.load(Ordering::SeqCst), 0);
            kp_expect!(
                t,
                h.same_cpu.load(Ordering::SeqCst) >= 1,
                "no two hits on one CPU"
            );
        }
    }
    check::<false>(t, want77);
    check::<true>(t, want77);
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

/// The five bytes at `site` (x86_64's ftrace site), as a little-endian
/// integer.
fn site_bytes(site: usize) -> u64 {
    // SAFETY: kernel text, mapped and readable; 8 bytes are within the
    // function.
    let w = unsafe { core::ptr::read_volatile(site as *const u64) };
    w & 0xff_ffff_ffff
}

/// `call target` at `site`, as [`site_bytes`] shows it.
fn call_bytes(site: usize, target: usize) -> u64 {
    let rel = (target as i64 - (site as i64 + 5)) as i32 as u32;
    0xe8 | (u64::from(rel) << 8)
}

/// ftrace's NOP at an untraced site (`nopl 0x0(%rax,%rax,1)`).
const FTRACE_NOP: u64 = 0x00_44_1f_0f;

/// The site of `jiffies_to_msecs()`: its entry, or past its `endbr64`.
fn entry_site() -> usize {
    let f = kp::lookup_symbol(c"jiffies_to_msecs").map_or(0, |s| s.addr);
    // SAFETY: kernel text.
    let w = unsafe { core::ptr::read_volatile(f as *const u32) };
    if w == 0xfa1e_0ff3 {
        f + 4
    } else {
        f
    }
}

/// Waits up to `ms` milliseconds for no parked site and `direct` direct
/// sites (the worker takes a parked site out of the table, then down);
/// true if so.
fn wait_released(ms: u32, direct: usize) -> bool {
    let done = || {
        let s = kp::stats();
        s.ftrace_parked == 0 && s.ftrace_direct == direct
    };
    for _ in 0..ms / 20 {
        if done() {
            return true;
        }
        // SAFETY: process context.
        unsafe { kernel::bindings::msleep(20) };
    }
    done()
}

/// x86_64: an entry probe's site calls the engine's trampoline directly;
/// after the last probe goes the site stays (parked, still correct), is
/// reused by the next probe, is taken down by the engine's worker after
/// about two seconds or at once by `kp_ftrace_release()`, and then holds
/// ftrace's NOP again. arm64: served by the engine's shared ftrace_ops,
/// no direct site.
fn ftrace_direct_site_lifecycle(t: &mut Test) {
    if !cfg!(CONFIG_X86_64) {
        let p = kp::Kprobe::register(Target::Symbol(c"jiffies_to_msecs"), entry(false));
        kp_expect!(t, p.is_ok_and(|p| p.probe().is_ftrace()));
        kp_expect_eq!(t, kp::stats().ftrace_direct, 0);
        return;
    }
    kp::ftrace_release();
    let s0 = kp::stats();
    kp_expect_eq!(t, s0.ftrace_parked, 0);
    let site = entry_site();
    kp_expect_eq!(
        t,
        site_bytes(site),
        FTRACE_NOP,
        "untraced site at {:#x}",
        site
    );
    let tramp = kp::lookup_symbol(c"kp_x86_ftrace_direct").map_or(0, |s| s.addr);
    kp_expect!(t, tramp != 0);
    let want = call(OURS);

    let Ok(p) = kp::Kprobe::register(Target::Symbol(c"jiffies_to_msecs"), entry(false)) else {
        kp_expect!(t, false, "register");
        return;
    };
    kp_expect_eq!(t, p.addr(), site);
    let s1 = kp::stats();
    kp_expect_eq!(t, s1.ftrace_direct, s0.ftrace_direct + 1);
    kp_expect_eq!(t, s1.ftrace_parked, 0);
    kp_expect_eq!(t, site_bytes(site), call_bytes(site, tramp), "direct call");
    kp_expect_eq!(t, call(OURS), want);
    kp_expect_eq!(t, p.handler().pre.load(Ordering::SeqCst), 1);
    kp_expect_eq!(t, p.handler().post.load(Ordering::SeqCst), 1);
    drop(p);

    // Parked: still the direct call, no probe, the function unchanged.
    let s2 = kp::stats();
    kp_expect_eq!(t, s2.ftrace_direct, s1.ftrace_direct);
    kp_expect_eq!(t, s2.ftrace_parked, 1);
    kp_expect_eq!(t, site_bytes(site), call_bytes(site, tramp));
    kp_expect_eq!(t, call(OURS), want);

    // Reused by the next probe.
    let Ok(p) = kp::Kprobe::register(Target::Symbol(c"jiffies_to_msecs"), entry(false)) else {
        kp_expect!(t, false, "register again");
        return;
    };
    let s3 = kp::stats();
    kp_expect_eq!(t, s3.ftrace_direct, s1.ftrace_direct);
    kp_expect_eq!(t, s3.ftrace_parked, 0);
    kp_expect_eq!(t, call(OURS), want);
    kp_expect_eq!(t, p.handler().pre.load(Ordering::SeqCst), 1);
    drop(p);

    // The worker takes it down (two seconds parked, then a tasks-RCU wait).
    kp_expect!(
        t,
        wait_released(10_000, s0.ftrace_direct),
        "parked site reaped"
    );
    kp_expect_eq!(t, kp::stats().ftrace_direct, s0.ftrace_direct);
    kp_expect_eq!(t, site_bytes(site), FTRACE_NOP, "NOP back");
    kp_expect_eq!(t, call(OURS), want);

    // kp_ftrace_release() does it at once.
    let p = kp::Kprobe::register(Target::Symbol(c"jiffies_to_msecs"), entry(false));
    kp_expect!(t, p.is_ok());
    drop(p);
    kp_expect_eq!(t, kp::stats().ftrace_parked, 1);
    kp_expect_eq!(t, kp::ftrace_release(), 1);
    kp_expect_eq!(t, kp::stats().ftrace_parked, 0);
    kp_expect_eq!(t, kp::stats().ftrace_direct, s0.ftrace_direct);
    kp_expect_eq!(t, site_bytes(site), FTRACE_NOP);
}

/// x86_64: with someone else's direct call on the function (a BPF
/// trampoline would hold one), the engine serves the entry through its
/// shared ftrace_ops: same handler view, and both run.
fn ftrace_entry_beside_foreign_direct(t: &mut Test) {
    if !cfg!(CONFIG_X86_64) {
        // SAFETY: a query that fails without direct calls.
        kp_expect!(t, unsafe { kp_test_foreign_direct(0, true) } != 0);
        return;
    }
    kp::ftrace_release();
    let site = entry_site();
    // SAFETY: `site` is the function's ftrace site.
    let r = unsafe { kp_test_foreign_direct(site, true) };
    kp_expect_eq!(t, r, 0, "foreign direct call");
    if r != 0 {
        return;
    }
    let s0 = kp::stats();
    let want = call(OURS);
    let p = kp::Kprobe::register(Target::Symbol(c"jiffies_to_msecs"), entry(false));
    if let Ok(p) = &p {
        kp_expect!(t, p.probe().is_ftrace());
        kp_expect_eq!(t, kp::stats().ftrace_direct, s0.ftrace_direct, "not direct");
        kp_expect_eq!(t, call(OURS), want);
        let h = p.handler();
        kp_expect_eq!(t, h.pre.load(Ordering::SeqCst), 1);
        kp_expect_eq!(t, h.post.load(Ordering::SeqCst), 1);
        kp_expect_eq!(t, h.pre_ip.load(Ordering::SeqCst), site + PRE_IP_OFFSET);
        kp_expect_eq!(t, h.post_ip.load(Ordering::SeqCst), site + 5);
    } else {
        kp_expect!(t, false, "register beside a foreign direct call");
    }
    drop(p);
    // Nothing parked: the shared ops let go of the site at once.
    kp_expect_eq!(t, kp::stats().ftrace_parked, 0);
    // SAFETY: registered above.
    kp_expect_eq!(t, unsafe { kp_test_foreign_direct(site, false) }, 0);
    kp_expect_eq!(t, site_bytes(site), FTRACE_NOP);
    kp_expect_eq!(t, call(OURS), want);
}

/// A kprobe of the kernel's own with a post handler on the same entry as
/// the engine's probe: both register, whichever comes first, and both see
/// the call. x86_64: the kernel's is an IPMODIFY ftrace user beside the
/// engine's direct call; arm64: the kernel's is a BRK past the patchable
/// entry, the engine's is served at the ftrace site before it.
fn ftrace_entry_beside_kernel_kprobe(t: &mut Test) {
    if !crate::util::kernel_kprobes(t) {
        return;
    }
    let want = call(OURS);
    for ours_first in [true, false] {
        // No parked site: each order registers ftrace's side from scratch.
        kp::ftrace_release();
        let sym = c"jiffies_to_msecs";
        let mut p = None;
        if ours_first {
            p = kp::Kprobe::register(Target::Symbol(sym), entry(false)).ok();
        }
        // SAFETY: a static NUL-terminated name; unregistered below.
        let r = unsafe { kp_test_kernel_kprobe(sym.as_ptr(), true) };
        kp_expect_eq!(t, r, 0, "the kernel's kprobe (ours first: {})", ours_first);
        if !ours_first {
            p = kp::Kprobe::register(Target::Symbol(sym), entry(false)).ok();
        }
        kp_expect!(t, p.is_some(), "our probe (ours first: {})", ours_first);
        kp_expect_eq!(t, call(OURS), want);
        if let Some(p) = &p {
            kp_expect_eq!(t, p.handler().pre.load(Ordering::SeqCst), 1);
            kp_expect_eq!(t, p.handler().post.load(Ordering::SeqCst), 1);
            kp_expect_eq!(
                t,
                p.handler().pre_ip.load(Ordering::SeqCst),
                p.addr() + PRE_IP_OFFSET
            );
        }
        if r == 0 {
            // SAFETY: a plain counter.
            kp_expect!(t, unsafe { kp_test_kernel_kprobe_hits() } >= 1);
            // SAFETY: registered above.
            unsafe { kp_test_kernel_kprobe(sym.as_ptr(), false) };
        }
        // Ours alone again.
        kp_expect_eq!(t, call(OURS), want);
        if let Some(p) = &p {
            kp_expect_eq!(t, p.handler().pre.load(Ordering::SeqCst), 2);
        }
        drop(p);
    }
    kp::ftrace_release();
}

kunit_suite!(
    kp_ftrace,
    "kp_ftrace",
    [
        ftrace_entry_pre_post,
        ftrace_entry_redirect,
        ftrace_entry_redirect_under_function_graph,
        ftrace_kretprobe_under_function_graph,
        ftrace_entry_stack_trace,
        ftrace_entry_registers,
        ftrace_entry_kretprobe_and_aggregate,
        ftrace_direct_site_lifecycle,
        ftrace_entry_beside_foreign_direct,
        ftrace_entry_beside_kernel_kprobe
    ]
);
