// SPDX-License-Identifier: GPL-2.0

//! `kp_smoke`: the engine is there and refuses bad requests (every arch).

use crate::kp::{self, KpKprobe};
use crate::kunit::Test;
use crate::targets::kp_kunit_args;
use crate::util::{register, unregister, EINVAL, ENOENT};
use core::sync::atomic::AtomicU64;

static DATA_WORD: AtomicU64 = AtomicU64::new(0);

fn smoke_unknown_symbol(t: &mut Test) {
    let mut p = KpKprobe::new();
    p.symbol_name = c"kp_no_such_symbol_anywhere".as_ptr().cast();
    kp_expect_eq!(t, register(&mut p), ENOENT);
    p.symbol_name = c"nosuchmodule:kp_no_such_symbol".as_ptr().cast();
    kp_expect_eq!(t, register(&mut p), ENOENT);
    // A symbol of a module that is loaded, under the wrong module name.
    p.symbol_name = c"kprobes:kp_kunit_args".as_ptr().cast();
    kp_expect_eq!(t, register(&mut p), ENOENT);
    kp_expect!(t, crate::util::cleared(&p));
}

fn smoke_bad_requests(t: &mut Test) {
    let mut p = KpKprobe::new();
    // Neither address nor symbol.
    kp_expect_eq!(t, register(&mut p), EINVAL);
    // Both.
    p.symbol_name = c"kp_kunit_args".as_ptr().cast();
    p.addr = kp_kunit_args as *mut _;
    kp_expect_eq!(t, register(&mut p), EINVAL);
    // Not a symbol name.
    p.addr = core::ptr::null_mut();
    p.symbol_name = c"kp kunit target".as_ptr().cast();
    kp_expect_eq!(t, register(&mut p), EINVAL);
    // Data, not text.
    p.symbol_name = core::ptr::null();
    p.addr = &DATA_WORD as *const _ as *mut _;
    kp_expect_eq!(t, register(&mut p), EINVAL);
    // The engine's own code.
    p.addr = kp::kp_register_kprobe as *mut _;
    kp_expect_eq!(t, register(&mut p), EINVAL);
    // An offset past the end of the function.
    p.addr = core::ptr::null_mut();
    p.symbol_name = c"kp_kunit_args".as_ptr().cast();
    p.offset = 0x10_0000;
    kp_expect_eq!(t, register(&mut p), EINVAL);
    // Blacklisted: notify_die is on the trap path (and NOKPROBE_SYMBOL).
    p.offset = 0;
    p.symbol_name = c"notify_die".as_ptr().cast();
    kp_expect_eq!(t, register(&mut p), EINVAL);
    // An ftrace call site. x86_64: inside the 5-byte NOP at the entry, not
    // an instruction boundary (-EILSEQ, as the kernel's kprobes say);
    // arm64: the site (the NOP at entry + 4), served through ftrace, but
    // not for a probe that needs every register, which would need a BRK
    // on an instruction ftrace rewrites (-EBUSY).
    p.symbol_name = c"do_sys_open".as_ptr().cast();
    let f = kp::lookup_symbol(c"do_sys_open").map_or(0, |s| s.addr);
    // Past the landing pad for indirect calls, if any (ENDBR, BTI).
    p.offset = (crate::util::body(f) - f) as u32 + if cfg!(CONFIG_X86_64) { 1 } else { 4 };
    let want = if cfg!(CONFIG_X86_64) {
        kernel::bindings::EILSEQ
    } else {
        p.flags = kp::KP_FLAG_FULL_REGS;
        kernel::bindings::EBUSY
    };
    let r = register(&mut p);
    kp_expect_eq!(t, r, -(want as kernel::ffi::c_int));
    if r == 0 {
        unregister(&mut p);
    }
    if cfg!(CONFIG_ARM64) {
        p.flags = 0;
        let r = register(&mut p);
        kp_expect_eq!(t, r, 0, "the site through ftrace");
        if r == 0 {
            kp_expect!(t, p.flags & kp::KP_FLAG_FTRACE != 0);
            unregister(&mut p);
        }
    }
    p.flags = 0;
    p.offset = 0;
    // A null probe.
    // SAFETY: null is explicitly allowed and refused.
    let r = unsafe { kp::kp_register_kprobe(core::ptr::null_mut()) };
    kp_expect_eq!(t, r, EINVAL);
    // Batch with nothing in it.
    // SAFETY: null is explicitly allowed and refused.
    let r = unsafe { kp::kp_register_kprobes(core::ptr::null_mut(), 3) };
    kp_expect_eq!(t, r, EINVAL);
    // Enable/disable of a probe that is not registered.
    kp_expect_eq!(t, crate::util::enable(&mut p), EINVAL);
    kp_expect!(t, crate::util::cleared(&p));
}

fn smoke_abi_size(t: &mut Test) {
    extern "C" {
        static kp_kprobe_abi_size: usize;
    }
    // SAFETY: a plain exported constant.
    let engine = unsafe { kp_kprobe_abi_size };
    kp_expect_eq!(t, engine, core::mem::size_of::<KpKprobe>());
    // The C header's layout (compiled by the C compiler in
    // tests/helpers.c) is src/abi.rs's, field by field.
    extern "C" {
        static kp_test_c_layout: [usize; 29];
    }
    use core::mem::{offset_of, size_of};
    use kp::KpKretprobe as R;
    use kp::KpStats as S;
    use KpKprobe as K;
    let rust = [
        size_of::<K>(),
        offset_of!(K, addr),
        offset_of!(K, symbol_name),
        offset_of!(K, pre_handler),
        offset_of!(K, post_handler),
        offset_of!(K, fault_handler),
        offset_of!(K, nmissed),
        offset_of!(K, offset),
        offset_of!(K, flags),
        offset_of!(K, kp_private),
        size_of::<R>(),
        offset_of!(R, handler),
        offset_of!(R, entry_handler),
        offset_of!(R, maxactive),
        offset_of!(R, nmissed),
        offset_of!(R, data_size),
        offset_of!(R, kp_private),
        size_of::<S>(),
        offset_of!(S, step_traps),
        offset_of!(S, kretprobe_via_graph),
        offset_of!(S, missed_reentry),
        offset_of!(S, missed_kret_no_instance),
        offset_of!(S, missed_kret_unloading),
        offset_of!(S, missed_kret_nested),
        offset_of!(S, kretprobe_task_exits),
        offset_of!(S, kretprobe_shadow_returns),
        offset_of!(S, kretprobe_shadow_probes),
        offset_of!(S, opt_waits),
        offset_of!(S, opt_waits_done),
    ];
    // SAFETY: a constant array defined in tests/helpers.c.
    let c = unsafe { kp_test_c_layout };
    for (i, (r, c)) in rust.iter().zip(c.iter()).enumerate() {
        kp_expect_eq!(t, *r, *c, "layout item {}", i);
    }
}

/// Parses the start address of a `0x<start>-0x<end>\t<symbol>` line.
fn range_start(line: &[u8]) -> Option<usize> {
    let hex = line.strip_prefix(b"0x")?;
    let end = hex.iter().position(|&c| c == b'-')?;
    let mut v = 0usize;
    for &c in &hex[..end] {
        v = v.checked_mul(16)? + (c as char).to_digit(16)? as usize;
    }
    Some(v)
}

/// Every range the kernel's own kprobes refuse (their debugfs blacklist,
/// a reference this project did not write) is refused by the engine too.
/// debugfs files cannot be read with `kernel_read()`, so the guest job
/// copies the file to tmpfs before loading this module.
fn smoke_blacklist_covers_the_kernels(t: &mut Test) {
    if !crate::util::kernel_kprobes(t) {
        return;
    }
    use kernel::bindings;
    let path = c"/tmp/kernel-kprobes-blacklist";
    // SAFETY: a NUL-terminated path; O_RDONLY.
    let f = unsafe { bindings::filp_open(path.as_ptr().cast(), 0, 0) };
    if (f as isize) < 0 && (f as isize) > -4096 {
        kp_expect!(t, false, "cannot open {:?}: {}", path, f as isize);
        return;
    }
    let mut buf = [0u8; 512];
    let mut carry = 0usize;
    let mut pos: bindings::loff_t = 0;
    let (mut total, mut missed) = (0usize, 0usize);
    loop {
        // SAFETY: `f` is open; the destination is our buffer past `carry`.
        let n = unsafe {
            bindings::kernel_read(
                f,
                buf[carry..].as_mut_ptr().cast(),
                buf.len() - carry,
                &mut pos,
            )
        };
        if n <= 0 {
            break;
        }
        let len = carry + n as usize;
        let mut start = 0;
        while let Some(nl) = buf[start..len].iter().position(|&c| c == b'\n') {
            let line = &buf[start..start + nl];
            if let Some(a) = range_start(line) {
                total += 1;
                // SAFETY: a pure query.
                if unsafe { kp::kp_blacklisted(a) }.is_null() {
                    missed += 1;
                    if missed <= 10 {
                        t.info(format_args!(
                            "not refused: {}",
                            core::str::from_utf8(line).unwrap_or("?")
                        ));
                    }
                }
            }
            start += nl + 1;
        }
        buf.copy_within(start..len, 0);
        carry = len - start;
        if carry == buf.len() {
            carry = 0; // an absurdly long line: drop it
        }
    }
    // SAFETY: opened above.
    unsafe { bindings::filp_close(f, core::ptr::null_mut()) };
    t.info(format_args!(
        "kernel blacklist: {} ranges, {} not refused by the engine",
        total, missed
    ));
    kp_expect!(t, total > 0);
    kp_expect_eq!(t, missed, 0);
    // And the list the engine compiles in from the kernel source
    // (`scripts/gen-nokprobe.py`) has every NOKPROBE_SYMBOL() of this
    // kernel: the engine adds what it lacks under its own reason.
    let Ok(list) = crate::util::ranges() else {
        kp_expect!(t, false, "out of memory");
        return;
    };
    let listed = list
        .iter()
        .filter(|r| r.reason == b"NOKPROBE_SYMBOL")
        .count();
    let stale = list
        .iter()
        .filter(|r| r.reason.starts_with(b"NOKPROBE_SYMBOL,"))
        .count();
    t.info(format_args!(
        "{} functions refused from the source list, {} only from the kernel's",
        listed, stale
    ));
    kp_expect!(t, listed > 0);
    kp_expect_eq!(
        t,
        stale,
        0,
        "regenerate with scripts/gen-nokprobe.py (names in the log)"
    );
}

/// What the kernel marks `NOKPROBE_SYMBOL()` or `__kprobes` is refused on
/// every kernel, also one built without kprobes, which keeps no trace of
/// either (the engine's list is read from the kernel source). Drawn by
/// kp_mass on arm64-hardened: a BRK in `save_return_addr()`, which
/// lockdep's irq tracing reaches on the BRK exception's own way out, hit
/// itself until `die()` deadlocked both CPUs.
fn smoke_nokprobe_from_source(t: &mut Test) {
    let names: &[&core::ffi::CStr] = if cfg!(CONFIG_ARM64) {
        &[
            c"return_address",
            c"save_return_addr",
            c"do_page_fault",
            c"do_translation_fault",
            c"do_mem_abort",
            c"notifier_call_chain",
            c"bsearch",
        ]
    } else {
        // Reached through pointers (NMI handlers) or from the oops path:
        // not derived from the trap path or the entry code.
        &[
            c"perf_event_nmi_handler",
            c"nmi_cpu_backtrace_handler",
            c"oops_begin",
            c"do_trap",
            c"notifier_call_chain",
            c"bsearch",
        ]
    };
    let Ok(list) = crate::util::ranges() else {
        kp_expect!(t, false, "out of memory");
        return;
    };
    for &name in names {
        let f = kp::lookup_symbol(name).map_or(0, |s| s.addr);
        kp_expect!(t, f != 0, "{:?} not found", name);
        if f == 0 {
            continue;
        }
        // Refused for that reason (other rules may refuse it too).
        let listed = list
            .iter()
            .any(|r| r.start == f && r.reason == b"NOKPROBE_SYMBOL");
        kp_expect!(t, listed, "{:?} is not refused as NOKPROBE_SYMBOL", name);
        // Its entry, and on arm64 past the ftrace site (at most +0xc).
        let offs: &[u32] = if cfg!(CONFIG_ARM64) { &[0, 0x10] } else { &[0] };
        for &off in offs {
            let mut p = KpKprobe::new();
            p.symbol_name = name.as_ptr().cast();
            p.offset = off;
            let r = register(&mut p);
            kp_expect_eq!(t, r, EINVAL, "{:?}+{}", name, off);
            if r == 0 {
                unregister(&mut p);
            }
        }
    }
    // The stack walker the engine's own BRK exit can reach still works.
    crate::util::Trace::new().take();
}

extern "C" {
    fn kp_test_nokprobe(value: core::ffi::c_int) -> core::ffi::c_int;
}

/// A function this module lists with `NOKPROBE_SYMBOL()` (in its own
/// `_kprobe_blacklist`) is refused, by name and by address, and the query
/// API says why; a plain one next to it is not.
fn smoke_module_blacklist(t: &mut Test) {
    if !cfg!(CONFIG_KPROBES) {
        t.skip("NOKPROBE_SYMBOL() lists nothing in a kernel without kprobes");
        return;
    }
    let a = kp_test_nokprobe as *const () as usize;
    // SAFETY: the query takes any address.
    let why = unsafe { kp::kp_blacklisted(a) };
    kp_expect!(t, !why.is_null());
    if !why.is_null() {
        // SAFETY: a static NUL-terminated reason.
        let why = unsafe { kernel::str::CStr::from_char_ptr(why.cast()) };
        t.info(format_args!(
            "kp_test_nokprobe: {}",
            why.to_str().unwrap_or("?")
        ));
    }
    let mut p = KpKprobe::new();
    p.symbol_name = c"kp_test_nokprobe".as_ptr().cast();
    kp_expect_eq!(t, register(&mut p), EINVAL);
    let mut p = KpKprobe::new();
    p.addr = a as *mut _;
    kp_expect_eq!(t, register(&mut p), EINVAL);
    kp_expect!(t, crate::util::cleared(&p));
    // The function is still fine to call.
    // SAFETY: a plain C function.
    kp_expect_eq!(t, unsafe { kp_test_nokprobe(1) }, 3);
    let mut p = KpKprobe::new();
    p.symbol_name = c"kp_test_c_target".as_ptr().cast();
    kp_expect_eq!(t, register(&mut p), 0);
    crate::util::unregister(&mut p);
}

/// Every kernel function the engine resolved by name and calls through a
/// pointer is called where an indirect call may land. On an IBT kernel the
/// kernel sealed most of them at boot (their ENDBR overwritten, their kCFI
/// hash zeroed): the engine must call a gate of its own, `endbr64; jmp
/// <function>`. Elsewhere it calls the function itself.
fn smoke_resolved_calls_land(t: &mut Test) {
    let (mut n, mut gated) = (0, 0);
    for idx in 0.. {
        let mut call = 0usize;
        // SAFETY: `call` is writable.
        let name = unsafe { kp::kp_resolved_call(idx, &mut call) };
        if name.is_null() {
            break;
        }
        // SAFETY: a static NUL-terminated name.
        let name = unsafe { core::ffi::CStr::from_ptr(name.cast()) };
        n += 1;
        let Some(addr) = kp::lookup_symbol(name).map(|s| s.addr) else {
            t.fail(
                file!(),
                line!(),
                format_args!("{:?}: resolved, but not found again", name),
            );
            continue;
        };
        kp_expect!(t, call != 0);
        if call == addr {
            #[cfg(CONFIG_X86_KERNEL_IBT)]
            t.fail(
                file!(),
                line!(),
                format_args!("{:?}: called directly on an IBT kernel", name),
            );
            continue;
        }
        gated += 1;
        // The gate: endbr64, then jmp rel32 to the function.
        let Some(b) = crate::kp_random::read_text(call, 9) else {
            t.fail(
                file!(),
                line!(),
                format_args!("{:?}: gate {:#x} unreadable", name, call),
            );
            continue;
        };
        kp_expect!(t, b[..4] == [0xf3, 0x0f, 0x1e, 0xfa]);
        kp_expect_eq!(t, b[4], 0xe9);
        let rel = i32::from_le_bytes([b[5], b[6], b[7], b[8]]);
        kp_expect_eq!(t, (call + 9).wrapping_add(rel as isize as usize), addr);
    }
    t.info(format_args!(
        "{} resolved functions called, {} through gates",
        n, gated
    ));
    // kallsyms_lookup_name, the first, and the reserved-text checks at least.
    kp_expect!(t, n >= 8);
}

/// The static-call trampolines (`__SCT__*`, x86_64): `static_call_update()`
/// checks their bytes and BUG()s on anything else, so a probe there crashes
/// the machine the next time the call is retargeted (the function graph
/// tracer retargets `__SCT__fgraph_func`/`__SCT__fgraph_retfunc` whenever its
/// number of users goes between one and two). Refused, the whole section.
fn smoke_static_call_trampolines(t: &mut Test) {
    if !cfg!(CONFIG_X86_64) {
        t.skip("no static-call trampolines on this arch");
        return;
    }
    for name in [c"__SCT__fgraph_retfunc", c"__SCT__fgraph_func"] {
        for off in [0u32, 1] {
            let mut p = KpKprobe::new();
            p.symbol_name = name.as_ptr().cast();
            p.offset = off;
            kp_expect_eq!(t, register(&mut p), EINVAL, "{:?}+{}", name, off);
            kp_expect!(t, crate::util::cleared(&p));
        }
    }
}

/// arm64 kCFI kernels: the word before a function indirect calls reach is
/// its type hash, which every such call reads and compares; kallsyms counts
/// it in the symbol before. A probe there is refused (a BRK in its place
/// failed the check of every call: a CFI oops, drawn by kp_mass on
/// arm64-hardened, at `save_return_addr`, the stack walker's callback).
/// The function's own entry still works.
fn smoke_kcfi_type_hash(t: &mut Test) {
    if !(cfg!(CONFIG_ARM64) && cfg!(CONFIG_CFI_CLANG)) {
        t.skip("no kCFI type hash words before functions here (x86_64 refuses its __cfi_ preambles by name)");
        return;
    }
    let f = kp::lookup_symbol(c"save_return_addr").map_or(0, |s| s.addr);
    kp_expect!(t, f != 0, "save_return_addr not found");
    if f == 0 {
        return;
    }
    let mut p = KpKprobe::new();
    p.addr = (f - 4) as *mut _;
    let r = register(&mut p);
    kp_expect_eq!(t, r, EINVAL, "the type hash at {:#x}", f - 4);
    if r == 0 {
        unregister(&mut p);
    }
    kp_expect!(t, crate::util::cleared(&p));
    // A stack trace calls save_return_addr through a pointer (checked).
    crate::util::Trace::new().take();
}

/// x86_64: the engine's die notifier is the first on the die chain, ahead
/// of the other INT_MAX ones (hw_breakpoint's, the kernel's kprobes'),
/// which `register_die_notifier()` alone would put it after: two indirect
/// calls less per int3 of ours. arm64 takes its BRK through
/// `do_el1_brk64()`, not the die chain.
fn smoke_die_notifier_first(t: &mut Test) {
    if !cfg!(CONFIG_X86_64) {
        t.skip("arm64's BRKs do not go through the die chain");
        return;
    }
    let (Some(chain), Some(nb)) = (
        kp::lookup_symbol(c"die_chain"),
        kp::lookup_symbol(c"kp_die_nb"),
    ) else {
        kp_expect!(t, false, "die_chain or kp_die_nb not found");
        return;
    };
    let off = core::mem::offset_of!(kernel::bindings::atomic_notifier_head, head);
    let head = kp::read_kernel::<usize>(chain.addr + off);
    kp_expect_eq!(t, head, Some(nb.addr), "the die chain's first block");
}

kunit_suite!(
    kp_smoke,
    "kp_smoke",
    [
        smoke_unknown_symbol,
        smoke_bad_requests,
        smoke_abi_size,
        smoke_blacklist_covers_the_kernels,
        smoke_nokprobe_from_source,
        smoke_module_blacklist,
        smoke_resolved_calls_land,
        smoke_static_call_trampolines,
        smoke_kcfi_type_hash,
        smoke_die_notifier_first
    ]
);
