// SPDX-License-Identifier: GPL-2.0

//! `kp_hostile`: a table of bad arguments for every entry point of the
//! engine's C ABI, each with the error it must return, and checks that
//! nothing was registered or disturbed by them (`kp_smoke` and `kp_probe`
//! hold the first refusals; this is the complete table).

use crate::kp::{self, KpInsn, KpKprobe, KpKretprobe};
use crate::kunit::Test;
use crate::targets::{args_expected, kp_kunit_args, kp_kunit_target};
use crate::util::{register, unregister, EINVAL, ENOENT};
use core::hint::black_box;
use kernel::bindings;
use kernel::ffi::c_int;

const EILSEQ: c_int = -(bindings::EILSEQ as c_int);
const EFAULT: c_int = -(bindings::EFAULT as c_int);

/// A read-only string (rodata).
static RODATA: &core::ffi::CStr = c"kprobes-rs rodata";
/// A data word.
static mut DATA: u64 = 0;

/// How a bad request is built.
enum Req {
    Addr(usize),
    Sym(&'static core::ffi::CStr, u32),
}

fn kprobe_table(t: &mut Test) {
    let data = core::ptr::addr_of!(DATA) as usize;
    let target = kp_kunit_target as *const () as usize;
    let table: [(&str, Req, c_int); 16] = [
        ("user address", Req::Addr(0x1000), EINVAL),
        ("user address (high)", Req::Addr(0x7fff_ffff_0000), EINVAL),
        ("null address, no symbol", Req::Addr(0), EINVAL),
        ("non-canonical", Req::Addr(0xdead_0000_0000_0000), EINVAL),
        ("kernel data", Req::Addr(data), EINVAL),
        ("kernel rodata", Req::Addr(RODATA.as_ptr() as usize), EINVAL),
        (
            "the engine's own code",
            Req::Addr(kp::kp_register_kprobe as *const () as usize),
            EINVAL,
        ),
        (
            "last byte of the address space",
            Req::Addr(usize::MAX),
            EINVAL,
        ),
        ("empty symbol (not a name)", Req::Sym(c"", 0), EINVAL),
        (
            "unknown symbol",
            Req::Sym(c"kp_no_such_function", 0),
            ENOENT,
        ),
        (
            "symbol of a module not loaded",
            Req::Sym(c"kp_no_such_mod:kp_kunit_args", 0),
            ENOENT,
        ),
        ("huge offset", Req::Sym(c"kp_kunit_args", u32::MAX), EINVAL),
        (
            "offset past the end",
            Req::Sym(c"kp_kunit_target", 0x1000),
            EINVAL,
        ),
        (
            "blacklisted: the trap path",
            Req::Sym(c"notify_die", 0),
            EINVAL,
        ),
        // Without the kernel's kprobes (NOKPROBE_SYMBOL() is empty there)
        // the notifier chain the breakpoint goes through: the engine's
        // trap-path derivation must find it on its own.
        (
            "blacklisted: NOKPROBE_SYMBOL, or the trap path",
            Req::Sym(
                if cfg!(CONFIG_KPROBES) {
                    c"kprobe_exceptions_notify"
                } else {
                    c"atomic_notifier_call_chain"
                },
                0,
            ),
            EINVAL,
        ),
        (
            "mid-instruction (x86_64) / misaligned (arm64)",
            Req::Addr(target + 1),
            EILSEQ,
        ),
    ];
    for (what, req, want) in table {
        let mut p = KpKprobe::new();
        match req {
            Req::Addr(a) => p.addr = a as *mut _,
            Req::Sym(s, off) => {
                p.symbol_name = s.as_ptr().cast();
                p.offset = off;
            }
        }
        let r = register(&mut p);
        if r == 0 {
            unregister(&mut p);
        }
        kp_expect_eq!(t, r, want, "{}", what);
        kp_expect!(t, crate::util::cleared(&p), "{}: left registered", what);
    }
    // The probed code is intact after all of it.
    kp_expect_eq!(t, kp_kunit_args(black_box(3), 4, 5), args_expected(3, 4, 5));
}

fn lifecycle_misuse(t: &mut Test) {
    let mut p = KpKprobe::new();
    // Never registered: unregister (single and batch) and disable are harmless.
    unregister(&mut p);
    let mut list = [&mut p as *mut KpKprobe];
    // SAFETY: a valid array of one unregistered probe.
    unsafe { kp::kp_unregister_kprobes(list.as_mut_ptr(), 1) };
    // SAFETY: null and a non-positive count are refused, not dereferenced.
    unsafe {
        kp::kp_unregister_kprobes(core::ptr::null_mut(), 1);
        kp::kp_unregister_kprobe(core::ptr::null_mut());
        kp_expect_eq!(t, kp::kp_register_kprobes(list.as_mut_ptr(), 0), EINVAL);
        kp_expect_eq!(t, kp::kp_register_kprobes(list.as_mut_ptr(), -1), EINVAL);
        kp_expect_eq!(t, kp::kp_disable_kprobe(core::ptr::null_mut()), EINVAL);
        kp_expect_eq!(t, kp::kp_enable_kprobe(core::ptr::null_mut()), EINVAL);
    }
    kp_expect_eq!(t, crate::util::disable(&mut p), EINVAL);
    // Registered: twice is refused; unregistered twice is harmless.
    p.symbol_name = c"kp_kunit_args".as_ptr().cast();
    kp_expect_eq!(t, register(&mut p), 0);
    kp_expect_eq!(t, register(&mut p), EINVAL);
    // The same struct in a batch with itself: all or nothing.
    let mut q = KpKprobe::new();
    q.symbol_name = c"kp_kunit_args".as_ptr().cast();
    let mut twice = [&mut q as *mut KpKprobe, &mut q as *mut KpKprobe];
    // SAFETY: valid pointers (to the same probe).
    let r = unsafe { kp::kp_register_kprobes(twice.as_mut_ptr(), 2) };
    kp_expect_eq!(t, r, EINVAL);
    kp_expect!(
        t,
        crate::util::cleared(&q),
        "the batch left its first probe"
    );
    // The engine's record is in the struct: one whose private words are
    // not zero, or that claims to be registered, is refused; a bitwise
    // copy of a registered one is neither registered again nor
    // unregisters the original.
    let mut z = KpKprobe::new();
    z.symbol_name = c"kp_kunit_args".as_ptr().cast();
    z.kp_private[1] = 1;
    kp_expect_eq!(t, register(&mut z), EINVAL);
    z.kp_private = [0; kp::KP_PRIVATE_WORDS];
    z.flags = kp::KP_FLAG_REGISTERED;
    kp_expect_eq!(t, register(&mut z), EINVAL);
    let probes = kp::stats().probes;
    // SAFETY: a bitwise copy, only passed to the engine as a struct.
    let mut copy = unsafe { core::ptr::read(&p) };
    kp_expect!(t, copy.is_registered());
    kp_expect_eq!(t, register(&mut copy), EINVAL);
    unregister(&mut copy);
    kp_expect!(t, p.is_registered() && !crate::util::cleared(&p));
    kp_expect_eq!(t, kp::stats().probes, probes);
    unregister(&mut p);
    unregister(&mut p);
    kp_expect!(t, crate::util::cleared(&p));
    kp_expect_eq!(t, kp_kunit_args(black_box(1), 2, 3), args_expected(1, 2, 3));
}

fn kretprobe_table(t: &mut Test) {
    // SAFETY: null is refused.
    let r = unsafe { kp::kp_register_kretprobe(core::ptr::null_mut()) };
    kp_expect_eq!(t, r, EINVAL);
    // SAFETY: null is ignored.
    unsafe { kp::kp_unregister_kretprobe(core::ptr::null_mut()) };
    let table: [(&str, &core::ffi::CStr, u32, c_int); 5] = [
        ("not a function entry", c"kp_kunit_args", 4, EINVAL),
        ("switches stacks", c"__switch_to", 0, EINVAL),
        ("never returns", c"do_exit", 0, EINVAL),
        ("unknown", c"kp_no_such_function", 0, ENOENT),
        ("blacklisted", c"notify_die", 0, EINVAL),
    ];
    for (what, sym, off, want) in table {
        let mut rp = KpKretprobe::new();
        rp.kp.symbol_name = sym.as_ptr().cast();
        rp.kp.offset = off;
        // SAFETY: `rp` outlives the call; unregistered below if accepted.
        let r = unsafe { kp::kp_register_kretprobe(&mut rp) };
        if r == 0 {
            // SAFETY: registered just above.
            unsafe { kp::kp_unregister_kretprobe(&mut rp) };
        }
        kp_expect_eq!(t, r, want, "{}", what);
    }
    // The engine's pre handler slot belongs to the engine.
    let mut rp = KpKretprobe::new();
    rp.kp.symbol_name = c"kp_kunit_args".as_ptr().cast();
    /// A pre handler the engine must refuse to replace.
    ///
    /// # Safety
    ///
    /// Never called.
    unsafe extern "C" fn pre(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
        0
    }
    rp.kp.pre_handler = Some(pre);
    // SAFETY: as above.
    kp_expect_eq!(t, unsafe { kp::kp_register_kretprobe(&mut rp) }, EINVAL);
}

fn queries_and_events(t: &mut Test) {
    // SAFETY: null out / name are refused or answered 0.
    unsafe {
        kp_expect_eq!(t, kp::kp_decode_insn(0x1000, core::ptr::null_mut()), EINVAL);
        kp_expect_eq!(
            t,
            kp::kp_lookup_symbol(core::ptr::null(), core::ptr::null_mut()),
            0
        );
        kp_expect_eq!(t, kp::kp_event_command(core::ptr::null()), EINVAL);
        // Past the end: NULL; null out-pointers are not written.
        kp_expect!(
            t,
            kp::kp_blacklist_range(usize::MAX, core::ptr::null_mut(), core::ptr::null_mut())
                .is_null()
        );
        kp_expect!(
            t,
            !kp::kp_blacklist_range(0, core::ptr::null_mut(), core::ptr::null_mut()).is_null()
        );
        kp_expect_eq!(
            t,
            kp::kp_event_id(core::ptr::null(), core::ptr::null()),
            EINVAL
        );
    }
    let mut out = KpInsn {
        addr: 0,
        len: 0,
        flags: 0,
        target: 0,
    };
    // SAFETY: `out` is writable.
    kp_expect_eq!(t, unsafe { kp::kp_decode_insn(0x1000, &mut out) }, EFAULT);
    // Event lines that must fail, each with its errno; none may stay.
    let bad: [(&core::ffi::CStr, c_int); 8] = [
        (c"p:kp_hostile/e1 0x1000", EINVAL),
        (c"p:kp_hostile/e2 notify_die", EINVAL),
        (
            c"p:kp_hostile/e3 kp_test_c_args a=+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(%sp)))))))))))))))",
            EINVAL,
        ),
        (c"p:kp_hostile/e4 kp_test_c_args a=$comm:u8", EINVAL),
        (c"r:kp_hostile/e5 kp_test_c_args+4", EINVAL),
        (c"p: kp_test_c_args", EINVAL),
        (c"p:kp_hostile/e7 kp_test_c_args \\xyz", EINVAL),
        (c"-:kp_hostile/never", ENOENT),
    ];
    for (line, want) in bad {
        // SAFETY: NUL-terminated.
        let r = unsafe { kp::kp_event_command(line.as_ptr().cast()) };
        kp_expect_eq!(t, r, want, "{:?}", line);
    }
    kp_expect_eq!(
        t,
        kp::event_id(Some(c"kp_hostile"), c"e1"),
        Err(kernel::error::code::ENOENT)
    );
    // A name already taken: a second line appends a site, of the same
    // kind only.
    kp_expect_eq!(
        t,
        kp::event_command(c"p:kp_hostile/ok kp_test_c_args"),
        Ok(())
    );
    kp_expect_eq!(
        t,
        kp::event_command(c"r:kp_hostile/ok kp_test_c_args"),
        Err(kernel::error::code::EEXIST)
    );
    kp_expect_eq!(t, kp::event_command(c"-:kp_hostile/ok"), Ok(()));
}

kunit_suite!(
    kp_hostile,
    "kp_hostile",
    [
        kprobe_table,
        lifecycle_misuse,
        kretprobe_table,
        queries_and_events
    ]
);
