// SPDX-License-Identifier: GPL-2.0

//! `kp_api`: the safe Rust API of `src/api.rs` as a client uses it: guards
//! that unregister on drop, enable/disable, typed entry arguments for 0 to
//! 10 parameters (register and stack ones), register setters that change
//! what the probed code does, kretprobes with typed per-call data, and the
//! nofault memory readers.

use crate::kp::{self, Args, Next, Probe, Regs, ReturnInfo, Target};
use crate::kunit::Test;
use crate::targets::{addr_of, kp_kunit_target};
use crate::util::{text_word, Sym};
use core::hint::black_box;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

static HITS: AtomicUsize = AtomicUsize::new(0);
static SEEN: [AtomicU64; 10] = [const { AtomicU64::new(0) }; 10];

fn reset() {
    HITS.store(0, Ordering::SeqCst);
    for s in &SEEN {
        s.store(u64::MAX, Ordering::SeqCst);
    }
}

fn seen(i: usize) -> u64 {
    SEEN[i].load(Ordering::SeqCst)
}

/// Counts hits; optionally rewrites the first argument or returns at once.
struct Counter {
    hits: AtomicUsize,
    set_arg0: Option<usize>,
    return_now: Option<usize>,
}

impl Counter {
    fn new() -> Self {
        Counter {
            hits: AtomicUsize::new(0),
            set_arg0: None,
            return_now: None,
        }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl kp::KprobeHandler for Counter {
    fn pre(&self, _probe: &Probe, regs: &mut Regs) -> Next {
        self.hits.fetch_add(1, Ordering::SeqCst);
        if let Some(v) = self.set_arg0 {
            // SAFETY: the target divides its u32 argument; any value works.
            unsafe { regs.set_arg(0, v) };
        }
        match self.return_now {
            // SAFETY: at the entry of `kp_kunit_target`, which has no side
            // effects; `Redirected` follows.
            Some(v) => match unsafe { regs.return_now(v) } {
                Some(r) => Next::Redirected(r),
                None => Next::Continue,
            },
            None => Next::Continue,
        }
    }
}

fn target_addr() -> usize {
    crate::util::body(addr_of(kp_kunit_target as *const ()))
}

fn api_guard_drop_unregisters(t: &mut Test) {
    let before = text_word(target_addr());
    let probe = match kp::Kprobe::register(Target::Symbol(c"kp_kunit_target"), Counter::new()) {
        Ok(p) => p,
        Err(e) => {
            kp_expect!(t, false, "register: {:?}", e);
            return;
        }
    };
    kp_expect_eq!(t, probe.addr(), target_addr());
    kp_expect!(
        t,
        text_word(target_addr()) != before,
        "no breakpoint written"
    );
    kp_expect_eq!(t, kp_kunit_target(black_box(9)), 3);
    kp_expect_eq!(t, probe.handler().hits(), 1);
    kp_expect!(t, probe.probe().is_enabled());

    kp_expect!(t, probe.disable().is_ok());
    kp_expect!(t, !probe.probe().is_enabled());
    kp_expect_eq!(t, text_word(target_addr()), before);
    kp_expect_eq!(t, kp_kunit_target(black_box(9)), 3);
    kp_expect_eq!(t, probe.handler().hits(), 1);
    kp_expect!(t, probe.enable().is_ok());
    kp_expect_eq!(t, kp_kunit_target(black_box(9)), 3);
    kp_expect_eq!(t, probe.handler().hits(), 2);
    kp_expect_eq!(t, probe.nmissed(), 0);

    // A second guard on the same address; dropping the first leaves it.
    let second = kp::Kprobe::register(Target::Address(target_addr()), Counter::new());
    kp_expect!(t, second.is_ok());
    drop(probe);
    kp_expect_eq!(t, kp_kunit_target(black_box(9)), 3);
    if let Ok(s) = &second {
        kp_expect_eq!(t, s.handler().hits(), 1);
    }
    drop(second);
    kp_expect_eq!(
        t,
        text_word(target_addr()),
        before,
        "text not restored by drop"
    );
    kp_expect_eq!(t, kp_kunit_target(black_box(9)), 3);
}

fn api_errors(t: &mut Test) {
    let e = kp::Kprobe::register(Target::Symbol(c"kp_no_such_symbol_xyz"), Counter::new());
    kp_expect_eq!(t, e.err(), Some(kernel::error::code::ENOENT));
    let e = kp::Kprobe::register(
        Target::SymbolOffset(c"kp_kunit_target", 0x10_0000),
        Counter::new(),
    );
    kp_expect_eq!(t, e.err(), Some(kernel::error::code::EINVAL));
    // The middle of an instruction (x86_64) or a misaligned address (arm64).
    let e = kp::Kprobe::register(Target::Address(target_addr() + 1), Counter::new());
    kp_expect!(t, e.is_err(), "mid-instruction address accepted");
    let e = kp::Kprobe::register(
        Target::Address(addr_of(&HITS as *const _ as *const ())),
        Counter::new(),
    );
    kp_expect_eq!(t, e.err(), Some(kernel::error::code::EINVAL));
    struct R;
    impl kp::KretprobeHandler for R {
        type Data = ();
        fn entry(&self, _regs: &Regs) -> Option<()> {
            Some(())
        }
        fn ret(&self, _d: (), _i: &ReturnInfo, _regs: &mut Regs) {}
    }
    let e = kp::Kretprobe::register(Target::SymbolOffset(c"kp_kunit_target", 4), R);
    kp_expect_eq!(t, e.err(), Some(kernel::error::code::EINVAL));
}

fn api_setters_redirect(t: &mut Test) {
    // Setting an argument register: the function computes with the new value.
    let mut c = Counter::new();
    c.set_arg0 = Some(30);
    let p = kp::Kprobe::register(Target::Symbol(c"kp_kunit_target"), c);
    kp_expect!(t, p.is_ok());
    kp_expect_eq!(t, kp_kunit_target(black_box(9)), 10);
    drop(p);
    // Returning at once: the function does not run, the caller sees 1234.
    let mut c = Counter::new();
    c.return_now = Some(1234);
    let p = kp::Kprobe::register(Target::Symbol(c"kp_kunit_target"), c);
    kp_expect!(t, p.is_ok());
    kp_expect_eq!(t, kp_kunit_target(black_box(9)), 1234);
    if let Ok(p) = &p {
        kp_expect_eq!(t, p.handler().hits(), 1);
    }
    drop(p);
    kp_expect_eq!(t, kp_kunit_target(black_box(9)), 3);
}

/// Records entry data and the return value; entry does not track `value` 7.
struct Timer {
    returns: AtomicUsize,
    ret_addr: AtomicUsize,
}

/// Per-call data of [`Timer`].
#[derive(Clone, Copy)]
struct Call {
    arg: u64,
    stamp: i64,
    marker: u8,
}

impl kp::KretprobeHandler for Timer {
    type Data = Call;

    fn entry(&self, regs: &Regs) -> Option<Call> {
        let arg = regs.arg(0)? as u32 as u64;
        (arg != 7).then(|| Call {
            arg,
            // SAFETY: plain clock read.
            stamp: unsafe { kernel::bindings::ktime_get_mono_fast_ns() as i64 },
            marker: 0x5a,
        })
    }

    fn ret(&self, d: Call, info: &ReturnInfo, regs: &mut Regs) {
        self.returns.fetch_add(1, Ordering::SeqCst);
        // SAFETY: plain clock read.
        let now = unsafe { kernel::bindings::ktime_get_mono_fast_ns() as i64 };
        SEEN[0].store(d.arg, Ordering::SeqCst);
        SEEN[1].store(regs.return_value() as u64, Ordering::SeqCst);
        SEEN[2].store(u64::from(d.marker), Ordering::SeqCst);
        SEEN[3].store((now >= d.stamp) as u64, Ordering::SeqCst);
        self.ret_addr.store(info.ret_addr(), Ordering::SeqCst);
        // SAFETY: the caller only compares the u32 result.
        unsafe { regs.set_return_value(regs.return_value() + 1000) };
    }
}

fn api_kretprobe_typed_data(t: &mut Test) {
    reset();
    let rp = kp::Kretprobe::register_maxactive(
        Target::Symbol(c"kp_kunit_target"),
        4,
        Timer {
            returns: AtomicUsize::new(0),
            ret_addr: AtomicUsize::new(0),
        },
    );
    let rp = match rp {
        Ok(rp) => rp,
        Err(e) => {
            kp_expect!(t, false, "register: {:?}", e);
            return;
        }
    };
    kp_expect_eq!(t, rp.addr(), target_addr());
    // The return handler changes the value the caller sees.
    kp_expect_eq!(t, kp_kunit_target(black_box(30)), 1010);
    kp_expect_eq!(t, seen(0), 30);
    kp_expect_eq!(t, seen(1), 10);
    kp_expect_eq!(t, seen(2), 0x5a);
    kp_expect_eq!(t, seen(3), 1);
    let ret = rp.handler().ret_addr.load(Ordering::SeqCst);
    let sym = Sym::of(ret);
    kp_expect!(
        t,
        sym.bytes().ends_with(b"[kprobes_kunit]"),
        "return address {:#x} is {}",
        ret,
        sym.as_str()
    );
    // entry returning None: not tracked, the value is untouched.
    kp_expect_eq!(t, kp_kunit_target(black_box(7)), 2);
    kp_expect_eq!(t, rp.handler().returns.load(Ordering::SeqCst), 1);
    kp_expect_eq!(t, rp.nmissed(), 0);
    drop(rp);
    kp_expect_eq!(t, kp_kunit_target(black_box(30)), 10);
}

/// Declares a target with `$n` `u64` parameters, an [`kp::EntryHandler`]
/// that records them typed, and a case that checks them.
macro_rules! arity_case {
    ($case:ident, $target:ident, $name:literal, [$($a:ident $i:tt),*]) => {
        #[no_mangle]
        #[inline(never)]
        extern "C" fn $target($($a: u64),*) -> u64 {
            black_box(0x77u64) $(^ black_box($a).rotate_left($i))*
        }

        fn $case(t: &mut Test) {
            struct H;
            impl kp::EntryHandler for H {
                type Args = ($(arity_case!(@u64 $a),)*);
                #[allow(unused_variables)]
                fn entry(&self, args: Self::Args, _regs: &Regs) {
                    HITS.fetch_add(1, Ordering::SeqCst);
                    $(SEEN[$i].store(args.$i, Ordering::SeqCst);)*
                }
            }
            reset();
            let p = match kp::EntryProbe::register_entry($name, H) {
                Ok(p) => p,
                Err(e) => {
                    kp_expect!(t, false, "register {:?}: {:?}", $name, e);
                    return;
                }
            };
            let r = $target($(black_box(VALUES[$i])),*);
            kp_expect_eq!(t, r, 0x77u64 $(^ VALUES[$i].rotate_left($i))*);
            kp_expect_eq!(t, HITS.load(Ordering::SeqCst), 1);
            $(kp_expect_eq!(t, seen($i), VALUES[$i], "argument {}", $i);)*
            kp_expect_eq!(t, p.unreadable(), 0);
            drop(p);
            $target($(black_box(VALUES[$i])),*);
            kp_expect_eq!(t, HITS.load(Ordering::SeqCst), 1, "ran after drop");
        }
    };
    (@u64 $a:ident) => { u64 };
}

/// Distinct values, none of which a register would hold by chance.
const VALUES: [u64; 10] = [
    0x1111_2222_3333_0000,
    0xa1,
    0xffff_ffff_ffff_fff2,
    0x8000_0000_0000_0003,
    0x0123_4567_89ab_cde4,
    0x5,
    0xdead_beef_0000_0006,
    0x7777_0000_0000_0007,
    0xfeed_face_cafe_0008,
    0x9999_9999_9999_9999,
];

arity_case!(api_entry_args0, kp_kunit_args0, c"kp_kunit_args0", []);
arity_case!(api_entry_args1, kp_kunit_args1, c"kp_kunit_args1", [a 0]);
arity_case!(api_entry_args2, kp_kunit_args2, c"kp_kunit_args2", [a 0, b 1]);
arity_case!(api_entry_args3, kp_kunit_args3, c"kp_kunit_args3", [a 0, b 1, c 2]);
arity_case!(api_entry_args4, kp_kunit_args4, c"kp_kunit_args4", [a 0, b 1, c 2, d 3]);
arity_case!(api_entry_args5, kp_kunit_args5, c"kp_kunit_args5", [a 0, b 1, c 2, d 3, e 4]);
arity_case!(
    api_entry_args6,
    kp_kunit_args6,
    c"kp_kunit_args6",
    [a 0, b 1, c 2, d 3, e 4, f 5]
);
arity_case!(
    api_entry_args7,
    kp_kunit_args7,
    c"kp_kunit_args7",
    [a 0, b 1, c 2, d 3, e 4, f 5, g 6]
);
arity_case!(
    api_entry_args8,
    kp_kunit_args8,
    c"kp_kunit_args8",
    [a 0, b 1, c 2, d 3, e 4, f 5, g 6, h 7]
);
arity_case!(
    api_entry_args10,
    kp_kunit_args10,
    c"kp_kunit_args10",
    [a 0, b 1, c 2, d 3, e 4, f 5, g 6, h 7, i 8, j 9]
);

/// Mixed parameter types, narrow ones in registers and on the stack.
#[no_mangle]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
extern "C" fn kp_kunit_mixed(
    a: i8,
    b: u16,
    c: i32,
    d: bool,
    e: *const u8,
    f: i64,
    g: u8,
    h: i16,
    i: u32,
    j: i8,
) -> i64 {
    black_box(a as i64 + b as i64 + c as i64 + d as i64 + e as i64 + f + g as i64)
        + black_box(h as i64 + i as i64 + j as i64)
}

type Mixed = (i8, u16, i32, bool, *const u8, i64, u8, i16, u32, i8);

struct MixedH;

impl kp::EntryHandler for MixedH {
    type Args = Mixed;

    fn entry(&self, a: Mixed, _regs: &Regs) {
        HITS.fetch_add(1, Ordering::SeqCst);
        let v = [
            a.0 as u64, a.1 as u64, a.2 as u64, a.3 as u64, a.4 as u64, a.5 as u64, a.6 as u64,
            a.7 as u64, a.8 as u64, a.9 as u64,
        ];
        for (s, v) in SEEN.iter().zip(v) {
            s.store(v, Ordering::SeqCst);
        }
    }
}

fn api_entry_mixed_types(t: &mut Test) {
    reset();
    let p = kp::EntryProbe::register_entry(c"kp_kunit_mixed", MixedH);
    kp_expect!(t, p.is_ok());
    let ptr = c"x".as_ptr().cast::<u8>();
    let r = kp_kunit_mixed(
        black_box(-5),
        black_box(0xfffe),
        black_box(-70000),
        black_box(true),
        black_box(ptr),
        black_box(-(1 << 40)),
        black_box(0xfd),
        black_box(-300),
        black_box(0xffff_fff0),
        black_box(-128),
    );
    kp_expect!(t, r != 0);
    let want: [u64; 10] = [
        -5i8 as u64,
        0xfffe,
        -70000i32 as u64,
        1,
        ptr as u64,
        -(1i64 << 40) as u64,
        0xfd,
        -300i16 as u64,
        0xffff_fff0,
        -128i8 as u64,
    ];
    kp_expect_eq!(t, HITS.load(Ordering::SeqCst), 1);
    for (i, w) in want.iter().enumerate() {
        kp_expect_eq!(t, seen(i), *w, "argument {}", i);
    }
    // `Args` is also usable on its own from any handler.
    let _ = <Mixed as Args>::fetch;
}

static TEXT: &core::ffi::CStr = c"kprobes-rs nofault reader";

fn api_nofault_readers(t: &mut Test) {
    let mut buf = [0u8; 64];
    let a = TEXT.as_ptr() as usize;
    kp_expect_eq!(
        t,
        kp::read_kernel_str(a, &mut buf),
        Some(&b"kprobes-rs nofault reader"[..])
    );
    let mut small = [0u8; 7];
    kp_expect_eq!(t, kp::read_kernel_str(a, &mut small), Some(&b"kprobes"[..]));
    kp_expect_eq!(t, kp::read_kernel_str(0x10, &mut buf), None);
    kp_expect_eq!(t, kp::read_kernel::<u64>(0), None);
    kp_expect_eq!(t, kp::read_kernel::<u8>(a), Some(b'k'));
    // A kernel address is not a user string.
    kp_expect_eq!(t, kp::read_user_str(a, &mut buf), None);
    kp_expect!(t, !kp::Comm::current().as_str().is_empty());
    let (pid, kthread) = kp::current_pid();
    kp_expect!(t, pid > 0 && kthread, "pid {} kthread {}", pid, kthread);
}

fn api_symbols_and_decoding(t: &mut Test) {
    use crate::targets::kp_kunit_sleeper;
    let f = kp::lookup_symbol(c"kp_kunit_sleeper");
    kp_expect_eq!(
        t,
        f.map(|f| f.addr),
        Some(addr_of(kp_kunit_sleeper as *const ()))
    );
    kp_expect!(t, kp::lookup_symbol(c"kp_no_such_symbol_xyz").is_none());
    kp_expect!(
        t,
        kp::lookup_symbol(c"kprobes_kunit:kp_kunit_sleeper").is_some()
    );
    let Some(f) = f else { return };
    kp_expect!(t, f.size > 0);
    let msleep = kernel::bindings::msleep as *const () as usize;
    let (mut n, mut end, mut calls, mut to_msleep) = (0, f.addr, 0, 0);
    for i in kp::instructions(f) {
        kp_expect_eq!(t, i.addr, end, "walk is contiguous");
        end = i.next();
        n += 1;
        if i.is_call {
            calls += 1;
            // arm64 modules may reach the kernel through a PLT veneer.
            if i.target == Some(msleep) || cfg!(CONFIG_ARM64) {
                to_msleep += 1;
            }
        }
    }
    kp_expect!(t, n > 3, "{} instructions", n);
    kp_expect_eq!(t, end, f.addr + f.size, "walk ends at the symbol's end");
    kp_expect!(
        t,
        calls >= 1 && to_msleep >= 1,
        "{} calls, {} to msleep",
        calls,
        to_msleep
    );
    kp_expect_eq!(
        t,
        kp::Insn::decode(0).err(),
        Some(kernel::error::code::EFAULT)
    );
    if cfg!(CONFIG_ARM64) {
        kp_expect_eq!(
            t,
            kp::Insn::decode(f.addr + 2).err(),
            Some(kernel::error::code::EINVAL)
        );
    }
}

/// Fixes a faulting instruction: records the trap, puts `value` in the
/// return-value register (rax, x0) and resumes after the instruction.
pub(crate) struct FaultFixer {
    pub(crate) pre: AtomicUsize,
    pub(crate) faults: AtomicUsize,
    pub(crate) trapnr: AtomicUsize,
    pub(crate) len: usize,
    pub(crate) value: usize,
}

impl kp::KprobeHandler for FaultFixer {
    const FAULT_HANDLER: bool = true;

    fn pre(&self, _probe: &Probe, _regs: &mut Regs) -> Next {
        self.pre.fetch_add(1, Ordering::SeqCst);
        Next::Continue
    }

    fn fault(&self, probe: &Probe, regs: &mut Regs, trapnr: i32) -> Option<kp::Fixed> {
        self.faults.fetch_add(1, Ordering::SeqCst);
        self.trapnr.store(trapnr as usize, Ordering::SeqCst);
        // SAFETY: the targets' asm reads the return-value register right
        // after the faulting instruction, whose length is `len`: resuming
        // there is what the instruction would have done, with the
        // handler's value.
        unsafe {
            regs.set_return_value(self.value);
            Some(regs.redirect(probe.addr() + self.len).into())
        }
    }
}

/// The fault handler runs for a #DE and a #GP raised by the displaced copy
/// (x86_64: DIE_TRAP and DIE_GPF), fixes the registers, and execution goes
/// on after the instruction; without a fault the handler does not run.
/// Runs in the x86_64-only suite `kp_x86_emu` (arm64's case, a data
/// abort, is `kp_arm64_sim.arm64_fault_handler`).
#[cfg(CONFIG_X86_64)]
pub(crate) fn api_fault_handler(t: &mut Test) {
    use crate::targets::{kp_kunit_div, kp_kunit_load};
    const X86_TRAP_DE: usize = 0;
    const X86_TRAP_GP: usize = 13;
    let word: u64 = 0x1234_5678;
    let cases: [(&str, usize, usize, u64); 2] = [
        ("div", kp_kunit_div(10, 2).1, X86_TRAP_DE, 0xdead),
        (
            "load",
            kp_kunit_load(&word as *const u64 as usize).1,
            X86_TRAP_GP,
            0xfeed,
        ),
    ];
    for (name, at, trap, value) in cases {
        let len = kp::Insn::decode(at).map(|i| i.len).unwrap_or(0);
        kp_expect!(t, len >= 2, "{}: instruction length {}", name, len);
        let fixer = FaultFixer {
            pre: AtomicUsize::new(0),
            faults: AtomicUsize::new(0),
            trapnr: AtomicUsize::new(usize::MAX),
            len,
            value: value as usize,
        };
        let p = match kp::Kprobe::register(Target::Address(at), fixer) {
            Ok(p) => p,
            Err(e) => {
                kp_expect!(t, false, "{}: register: {:?}", name, e);
                continue;
            }
        };
        // No fault: the handler does not run, the result is right.
        let ok = match name {
            "div" => kp_kunit_div(black_box(100), black_box(5)).0,
            _ => kp_kunit_load(black_box(&word as *const u64 as usize)).0,
        };
        kp_expect_eq!(t, ok, if name == "div" { 20 } else { word }, "{}", name);
        kp_expect_eq!(t, p.handler().faults.load(Ordering::SeqCst), 0, "{}", name);
        // A fault in the copy: handled, the value comes from the handler.
        let fixed = match name {
            "div" => kp_kunit_div(black_box(100), black_box(0)).0,
            _ => kp_kunit_load(black_box(0xdead_0000_0000_0000)).0,
        };
        kp_expect_eq!(t, fixed, value, "{}", name);
        let h = p.handler();
        kp_expect_eq!(t, h.faults.load(Ordering::SeqCst), 1, "{}", name);
        kp_expect_eq!(t, h.trapnr.load(Ordering::SeqCst), trap, "{}", name);
        kp_expect_eq!(t, h.pre.load(Ordering::SeqCst), 2, "{}", name);
        // Still armed and working after the fault.
        let again = match name {
            "div" => kp_kunit_div(black_box(9), black_box(3)).0,
            _ => kp_kunit_load(black_box(&word as *const u64 as usize)).0,
        };
        kp_expect_eq!(t, again, if name == "div" { 3 } else { word }, "{}", name);
        kp_expect_eq!(t, h.pre.load(Ordering::SeqCst), 3, "{}", name);
    }
}

/// Fixes a #DE by writing the divisor in memory, changing no register: the
/// fault is a retry.
#[cfg(CONFIG_X86_64)]
struct MemoryFixer {
    divisor: AtomicU64,
    pre: AtomicUsize,
    faults: AtomicUsize,
}

#[cfg(CONFIG_X86_64)]
impl kp::KprobeHandler for MemoryFixer {
    const FAULT_HANDLER: bool = true;

    fn pre(&self, _probe: &Probe, _regs: &mut Regs) -> Next {
        self.pre.fetch_add(1, Ordering::SeqCst);
        Next::Continue
    }

    fn fault(&self, _probe: &Probe, _regs: &mut Regs, _trapnr: i32) -> Option<kp::Fixed> {
        self.faults.fetch_add(1, Ordering::SeqCst);
        self.divisor.store(4, Ordering::SeqCst);
        // SAFETY: the divisor the instruction reads is no longer zero: run
        // again, it does not fault.
        Some(unsafe { kp::Fixed::new() })
    }
}

/// A fault handler that fixes memory, not registers: the instruction is
/// retried and succeeds (one fault, the pre-handler runs again for the
/// retry).
#[cfg(CONFIG_X86_64)]
pub(crate) fn api_fault_handler_fixes_memory(t: &mut Test) {
    use crate::targets::kp_kunit_div_mem;
    let probe_divisor = 1u64;
    let at = kp_kunit_div_mem(8, &probe_divisor).1;
    let fixer = MemoryFixer {
        divisor: AtomicU64::new(0),
        pre: AtomicUsize::new(0),
        faults: AtomicUsize::new(0),
    };
    let p = match kp::Kprobe::register(Target::Address(at), fixer) {
        Ok(p) => p,
        Err(e) => {
            kp_expect!(t, false, "register: {:?}", e);
            return;
        }
    };
    let h = p.handler();
    let q = kp_kunit_div_mem(black_box(100), h.divisor.as_ptr()).0;
    kp_expect_eq!(t, q, 25);
    kp_expect_eq!(t, h.faults.load(Ordering::SeqCst), 1);
    kp_expect_eq!(t, h.pre.load(Ordering::SeqCst), 2);
}

/// A pre-handler that faults: #GP on a non-canonical load in the handler.
#[cfg(CONFIG_X86_64)]
struct FaultyPre {
    at: usize,
    len: usize,
    faults: AtomicUsize,
    trapnr: AtomicUsize,
    loaded: AtomicU64,
}

#[cfg(CONFIG_X86_64)]
impl kp::KprobeHandler for FaultyPre {
    const FAULT_HANDLER: bool = true;

    fn pre(&self, _probe: &Probe, _regs: &mut Regs) -> Next {
        let (v, _) = crate::targets::kp_kunit_load(black_box(0xdead_0000_0000_0000));
        self.loaded.store(v, Ordering::SeqCst);
        Next::Continue
    }

    fn fault(&self, _probe: &Probe, regs: &mut Regs, trapnr: i32) -> Option<kp::Fixed> {
        if regs.ip() != self.at {
            return None;
        }
        self.faults.fetch_add(1, Ordering::SeqCst);
        self.trapnr.store(trapnr as usize, Ordering::SeqCst);
        // SAFETY: resumes the handler's own load after the instruction, with
        // the value in rax that the asm reads.
        unsafe {
            regs.set_ax(0xbeef);
            Some(regs.redirect(self.at + self.len).into())
        }
    }
}

/// A fault inside a pre-handler reaches the fault handler in the handler's
/// context (as in the kernel's kprobes); fixed up, the probed function runs
/// on normally.
#[cfg(CONFIG_X86_64)]
pub(crate) fn api_fault_in_handler(t: &mut Test) {
    let word: u64 = 1;
    let at = crate::targets::kp_kunit_load(&word as *const u64 as usize).1;
    let len = kp::Insn::decode(at).map(|i| i.len).unwrap_or(0);
    let h = FaultyPre {
        at,
        len,
        faults: AtomicUsize::new(0),
        trapnr: AtomicUsize::new(usize::MAX),
        loaded: AtomicU64::new(0),
    };
    let p = match kp::Kprobe::register(Target::Symbol(c"kp_kunit_target"), h) {
        Ok(p) => p,
        Err(e) => {
            kp_expect!(t, false, "register: {:?}", e);
            return;
        }
    };
    kp_expect_eq!(t, kp_kunit_target(black_box(9)), 3);
    let h = p.handler();
    kp_expect_eq!(t, h.faults.load(Ordering::SeqCst), 1);
    kp_expect_eq!(t, h.trapnr.load(Ordering::SeqCst), 13);
    kp_expect_eq!(t, h.loaded.load(Ordering::SeqCst), 0xbeef);
    kp_expect_eq!(t, p.nmissed(), 0);
    // The CPU's hit state is clean: the next hit runs the handler again.
    kp_expect_eq!(t, kp_kunit_target(black_box(12)), 4);
    kp_expect_eq!(t, h.faults.load(Ordering::SeqCst), 2);
}

kunit_suite!(
    kp_api,
    "kp_api",
    [
        api_guard_drop_unregisters,
        api_errors,
        api_setters_redirect,
        api_kretprobe_typed_data,
        api_entry_args0,
        api_entry_args1,
        api_entry_args2,
        api_entry_args3,
        api_entry_args4,
        api_entry_args5,
        api_entry_args6,
        api_entry_args7,
        api_entry_args8,
        api_entry_args10,
        api_entry_mixed_types,
        api_nofault_readers,
        api_symbols_and_decoding
    ]
);
