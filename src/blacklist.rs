// SPDX-License-Identifier: GPL-2.0

//! Places that must never be probed.
//!
//! Built once at load, read-only afterwards. Derived the way the kernel's
//! kprobes derive theirs (`kernel/kprobes.c: populate_kprobe_blacklist()` and
//! `arch_populate_kprobe_blacklist()`), from data found through kallsyms:
//!
//! - every function the kernel source marks `NOKPROBE_SYMBOL()`,
//!   `__kprobes`, `nokprobe_inline` or (assembly) `NOKPROBE()`, by name
//!   ([`crate::nokprobe`]), range = the whole function: a kernel without
//!   kprobes keeps no trace of them. Where it has kprobes, its live list
//!   (a symbol `_kbl_addr_<function>` per entry, which kallsyms keeps; the
//!   `_kprobe_blacklist` section itself is freed after boot) and its
//!   `.kprobes.text` add what the names lack, as [`crate::nokprobe::STALE`];
//! - the text sections the kernel cannot take a breakpoint in:
//!   `.kprobes.text`, `.noinstr.text` (which includes `.cpuidle.text`),
//!   `.entry.text`, `.irqentry.text`, `.softirqentry.text`, and per arch
//!   the ranges the backend names (arm64: hyp and idmap text);
//! - every function those sections call or jump to directly (one level;
//!   found by decoding them with the arch decoder): entry code runs them
//!   before any recursion check can happen;
//! - per arch ([`crate::arch::BLACKLIST_FUNCS`]): the functions our own
//!   trap path runs through before it can detect recursion (most are
//!   already `NOKPROBE_SYMBOL`; listing them documents the dependency), and
//!   assembly marked `_ASM_NOKPROBE` through macros;
//! - everything the trap path calls, derived from the running kernel's
//!   code: from the roots [`crate::arch::TRAP_ROOTS`] (the functions a
//!   kernel breakpoint runs through to reach the engine, and back), every
//!   function reached by direct calls and tail jumps, [`TRAP_DEPTH`] calls
//!   deep, found by decoding them. A breakpoint in any of them is hit again
//!   before the engine's re-entry guard can see the first hit
//!   (`__rcu_read_lock`, which `notify_die()` takes on x86_64 with
//!   PREEMPT_RCU, recursed until the stack overflowed). What this
//!   over-approximates (callees on paths a breakpoint never takes, such as
//!   `rcu_read_unlock_special()`'s work outside NMI context) is refused with
//!   the reason "called on the engine trap path". The oops and printing
//!   paths ([`TRAP_STOP_PREFIXES`]) are not followed: the machine is dying
//!   when the trap path takes them;
//! - per arch ([`crate::arch::BLACKLIST_SPANS`]): assembly that other code
//!   copies or that has inner labels, as address spans (ftrace's
//!   trampolines: x86_64 copies `ftrace_caller` into each ops' trampoline,
//!   a breakpoint in the template would be copied with it);
//! - the sanitizers' runtime ([`SANITIZER_PREFIXES`]): instrumented code,
//!   the engine's trap path included, calls it on every checked access;
//! - the engine module itself (checked dynamically, it has no fixed range);
//! - a loaded module's own `NOKPROBE_SYMBOL()` list (its `_kprobe_blacklist`
//!   section stays with the module), `.kprobes.text` and `.noinstr.text`,
//!   read from its `struct module` at each check.
//!
//! Exception-table fixup sites and jump-label sites are refused by the
//! registration checks, not listed here.

use crate::arch::reason::TRAP;
use crate::arch::{Refusals, Steps};
use crate::{nokprobe, symbols};
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::c_str;
use kernel::ffi::c_void;
use kernel::prelude::*;
use kernel::str::CStr;

extern "C" {
    /// src/helpers.c: the callbacks of an atomic notifier chain.
    fn kp_helper_notifier_callbacks(head: *mut c_void, out: *mut usize, max: u32) -> u32;
}

/// Reason: reached by direct calls from [`crate::arch::TRAP_ROOTS`].
pub(crate) const TRAP_CALLEE: &CStr = c_str!("called on the engine trap path");

/// How many calls deep the trap path's callees are followed from
/// [`crate::arch::TRAP_ROOTS`]. `kp_trap_path` probes every instruction one
/// level further and checks that the trap path still runs.
pub(crate) const TRAP_DEPTH: usize = 3;

/// Functions whose callees the trap-path closure does not follow: oops,
/// panic and printing paths, which a breakpoint only takes when the
/// machine is already dying (`exc_int3()` calls `die()` for a breakpoint
/// nobody owns). The functions themselves are still refused when reached.
const TRAP_STOP_PREFIXES: &[&[u8]] = &[
    b"die",
    b"__die",
    b"oops_",
    b"panic",
    b"nmi_panic",
    b"__warn",
    b"warn_",
    b"report_bug",
    b"_printk",
    b"printk",
    b"vprintk",
    b"__printk",
    b"dump_stack",
    b"show_",
    b"bust_spinlocks",
    b"console_",
    b"do_exit",
    b"make_task_dead",
    b"__stack_chk_fail",
    // Only when a preempt count drops to zero, which it never does in the
    // NMI-like context a breakpoint runs in.
    b"preempt_schedule",
    b"__schedule",
];

/// The same, by substring: the Rust runtime's panic paths in vmlinux
/// (`core::panicking::*`, `rust_begin_unwind`).
const TRAP_STOP_SUBSTRINGS: &[&[u8]] = &[b"panicking", b"rust_begin_unwind"];

/// One refused range.
pub(crate) struct Range {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) reason: &'static CStr,
}

static LIST: AtomicPtr<KVec<Range>> = AtomicPtr::new(core::ptr::null_mut());

/// Section boundary symbols, as (start, end, reason).
const SECTIONS: &[(&CStr, &CStr, &CStr)] = &[
    (
        c_str!("__kprobes_text_start"),
        c_str!("__kprobes_text_end"),
        c_str!(".kprobes.text"),
    ),
    (
        c_str!("__noinstr_text_start"),
        c_str!("__noinstr_text_end"),
        c_str!(".noinstr.text"),
    ),
    (
        c_str!("__entry_text_start"),
        c_str!("__entry_text_end"),
        c_str!(".entry.text"),
    ),
    (
        c_str!("__irqentry_text_start"),
        c_str!("__irqentry_text_end"),
        c_str!(".irqentry.text"),
    ),
    (
        c_str!("__softirqentry_text_start"),
        c_str!("__softirqentry_text_end"),
        c_str!(".softirqentry.text"),
    ),
];

/// The runtime of the compiler's instrumentation (KASAN, KCSAN, KMSAN,
/// UBSAN, KCOV), by symbol prefix. Instrumented code calls it on every
/// checked access, the engine's own trap path included (its Rust and C are
/// instrumented like the rest): a breakpoint there recurses on every hit
/// and, when not, is hit so often that the machine does nothing else (a
/// probe in `kasan_check_range` stopped the debug kernel). The kernel's
/// kprobes do not list them; tracing them is of no use.
const SANITIZER_PREFIXES: &[&[u8]] = &[
    b"__asan_",
    b"kasan_",
    b"__kasan_",
    b"__hwasan_",
    b"__kcsan_",
    b"kcsan_",
    b"__tsan_",
    b"__msan_",
    b"kmsan_",
    b"__kmsan_",
    b"__ubsan_handle_",
    b"__sanitizer_cov_",
];

fn add(v: &mut KVec<Range>, start: usize, end: usize, reason: &'static CStr) -> Result {
    if start < end {
        v.push(Range { start, end, reason }, GFP_KERNEL)?;
    }
    Ok(())
}

fn add_section(v: &mut KVec<Range>, s: &CStr, e: &CStr, reason: &'static CStr) -> Result {
    if let (Some(s), Some(e)) = (symbols::lookup_name(s), symbols::lookup_name(e)) {
        add(v, s, e, reason)?;
    }
    Ok(())
}

fn add_function(v: &mut KVec<Range>, addr: usize, reason: &'static CStr) -> Result {
    if let Some(sym) = symbols::symbol_at(addr) {
        add(v, sym.start, sym.start.saturating_add(sym.size), reason)?;
    }
    Ok(())
}

/// Refuses every vmlinux function named `func` (static functions can
/// share a name) as [`nokprobe::STALE`]; `func` is a kallsyms name.
fn add_stale(v: &mut KVec<Range>, func: &[u8]) -> Result {
    let mut buf = [0u8; crate::ksym::KSYM_NAME_LEN];
    let Some(cname) = buf.get_mut(..func.len().saturating_add(1)) else {
        return Ok(());
    };
    if let Some(d) = cname.get_mut(..func.len()) {
        d.copy_from_slice(func);
    }
    let Ok(cname) = CStr::from_bytes_with_nul(cname) else {
        return Ok(());
    };
    add_named(v, cname, nokprobe::STALE)
}

/// Refuses every vmlinux function named `name`.
fn add_named(v: &mut KVec<Range>, name: &CStr, reason: &'static CStr) -> Result {
    let mut r = Ok(());
    symbols::for_each_match(name, |a| {
        if r.is_ok() {
            r = add_function(v, a, reason);
        }
    });
    r
}

/// Builds the list. Process context, after `symbols::init()`.
pub(crate) fn init() -> Result {
    let mut v = KVec::new();
    for &(s, e, reason) in Iterator::chain(SECTIONS.iter(), crate::arch::BLACKLIST_SECTIONS) {
        add_section(&mut v, s, e, reason)?;
    }
    // Functions that code in those sections calls or jumps to directly: an
    // entry path runs them before any recursion check (arm64's noinstr
    // context tracking calls an out-of-line preempt_count() in .text, for
    // instance; a breakpoint there recurses forever). One level deep.
    let nsec = v.len();
    let mut callees = 0usize;
    // Except, where the arch says so, the scheduler's own text (see
    // `SCHED_TEXT_CALLEES_PROBEABLE`).
    let sched = match (
        symbols::lookup_name(c_str!("__sched_text_start")),
        symbols::lookup_name(c_str!("__sched_text_end")),
    ) {
        (Some(a), Some(b)) if crate::arch::SCHED_TEXT_CALLEES_PROBEABLE => a..b,
        _ => 0..0,
    };
    for i in 0..nsec {
        let (start, end) = (v.as_slice()[i].start, v.as_slice()[i].end);
        let mut r = Ok(());
        crate::arch::Arch::for_each_direct_branch(start, end, |target| {
            if r.is_err()
                || sched.contains(&target)
                || v.as_slice()
                    .iter()
                    .any(|x| (x.start..x.end).contains(&target))
            {
                return;
            }
            if let Some(sym) = symbols::symbol_at(target) {
                r = add(
                    &mut v,
                    sym.start,
                    sym.start.saturating_add(sym.size),
                    c_str!("called from noinstr/entry code"),
                );
                callees += 1;
            }
        });
        r?;
    }
    // Text other kernel code rewrites while it runs, a section of its own:
    // the static-call trampolines (`__SCT__*`, HAVE_STATIC_CALL), which
    // `static_call_update()` validates and rewrites (a breakpoint there is
    // a BUG() in `__static_call_validate()`). Their targets are ordinary
    // functions: not followed.
    add_section(
        &mut v,
        c_str!("__static_call_text_start"),
        c_str!("__static_call_text_end"),
        c_str!("static-call trampolines (static_call_update() rewrites them)"),
    )?;
    for &(first, last, reason) in crate::arch::BLACKLIST_SPANS {
        let (a, b) = (symbols::lookup_name(first), symbols::lookup_name(last));
        if a.is_some() != b.is_some() {
            // The arch lists the spans of each kernel configuration; the
            // one this kernel has is elsewhere in the list.
            pr_info!(
                "blacklist: span {}..{}: {} not in this kernel\n",
                first.to_str().unwrap_or("?"),
                last.to_str().unwrap_or("?"),
                if a.is_none() { first } else { last }
                    .to_str()
                    .unwrap_or("?")
            );
        }
        if let (Some(a), Some(b)) = (a, b) {
            if let Some(lb) = symbols::symbol_at(b) {
                let end = lb.start.saturating_add(lb.size);
                // A span is a few hundred bytes of one assembly file; a
                // symbol laid out elsewhere must not refuse half the kernel.
                if a < end && end - a <= MAX_SPAN {
                    add(&mut v, a, end, reason)?;
                } else {
                    pr_warn!("blacklist: span {:#x}-{:#x} ignored\n", a, end);
                }
            }
        }
    }
    let trap = add_trap_callees(&mut v)?;
    let sections = v.len();
    // A kernel with kprobes: what its `.kprobes.text` holds must be in the
    // list from the source too (the section itself is refused above).
    let kprobes_text = match (
        symbols::lookup_name(c_str!("__kprobes_text_start")),
        symbols::lookup_name(c_str!("__kprobes_text_end")),
    ) {
        (Some(a), Some(b)) => a..b,
        _ => 0..0,
    };
    let (mut listed, mut sanitizer) = (0usize, 0usize);
    let mut r = Ok(());
    symbols::for_each_symbol(|name, addr| {
        let before = v.len();
        let text = symbols::in_kernel_text(addr);
        let count = if SANITIZER_PREFIXES.iter().any(|p| name.starts_with(p)) && text {
            r = add_function(
                &mut v,
                addr,
                c_str!("sanitizer runtime (instrumented code calls it)"),
            );
            &mut sanitizer
        } else if nokprobe::listed(name) && text {
            r = add_function(&mut v, addr, c_str!("NOKPROBE_SYMBOL"));
            &mut listed
        } else if kprobes_text.contains(&addr) && !nokprobe::is_section_marker(name) {
            nokprobe::warn_stale(name);
            r = add_function(&mut v, addr, nokprobe::STALE);
            &mut listed
        } else {
            // The live list, where the kernel has kprobes: what the list
            // from the source lacks (a newer kernel than it was made from).
            match name.strip_prefix(b"_kbl_addr_") {
                Some(func) if !nokprobe::listed(func) => {
                    nokprobe::warn_stale(func);
                    r = add_stale(&mut v, func);
                    &mut listed
                }
                _ => return true,
            }
        };
        *count = count.saturating_add(v.len().saturating_sub(before));
        r.is_ok()
    });
    r?;
    for &(name, reason) in crate::arch::BLACKLIST_FUNCS {
        add_named(&mut v, name, reason)?;
    }
    let n = v.len();
    let b = KBox::new(v, GFP_KERNEL)?;
    LIST.store(KBox::into_raw(b), Ordering::Release);
    pr_info!(
        "blacklist: {} ranges: {} sections, {} their callees, {} trap path ({} roots, \
         {} calls deep), {} NOKPROBE_SYMBOL, {} sanitizer runtime, {} arch\n",
        n,
        nsec,
        callees,
        trap.added,
        trap.roots,
        TRAP_DEPTH,
        listed,
        sanitizer,
        n.saturating_sub(sections)
            .saturating_sub(listed)
            .saturating_sub(sanitizer)
    );
    Ok(())
}

/// Longest [`crate::arch::BLACKLIST_SPANS`] entry taken.
const MAX_SPAN: usize = 0x4000;

/// What [`add_trap_callees`] found.
struct TrapClosure {
    roots: usize,
    added: usize,
}

/// Adds every function the trap path reaches by direct calls, up to
/// [`TRAP_DEPTH`] calls below the arch's [`crate::arch::TRAP_ROOTS`].
fn add_trap_callees(v: &mut KVec<Range>) -> Result<TrapClosure> {
    // Functions to scan, with their depth in calls below the roots.
    let mut queue: KVec<(usize, usize, usize)> = KVec::new();
    // Functions reached, with the least depth they were reached at: one
    // first reached deep (through a kernel function queued before the
    // engine's own code, which keeps depth 0) is scanned again when a
    // shorter path turns up, or its callees within the depth would be
    // left out (three more functions on arm64-hardened).
    let mut seen: KVec<(usize, usize)> = KVec::new();
    let reached = |seen: &KVec<(usize, usize)>, a: usize| seen.iter().any(|&(s, _)| s == a);
    let mut res = Ok(());
    for &name in crate::arch::TRAP_ROOTS {
        let mut found = false;
        symbols::for_each_match(name, |a| {
            found = true;
            if let Some(s) = symbols::symbol_at(a) {
                if !reached(&seen, s.start) {
                    let end = s.start.saturating_add(s.size);
                    res = res
                        .and_then(|()| seen.push((s.start, 0), GFP_KERNEL).map_err(Error::from))
                        .and_then(|()| {
                            queue
                                .push((s.start, end, 0), GFP_KERNEL)
                                .map_err(Error::from)
                        })
                        .and_then(|()| add(v, s.start, end, TRAP));
                }
            }
        });
        if !found {
            // Inlined into its caller on this kernel (do_int3 may be), or
            // renamed: the derivation covers less, say so.
            pr_info!(
                "blacklist: trap-path root {} not in this kernel\n",
                name.to_str().unwrap_or("?")
            );
        }
    }
    res?;
    if let Some(b) = symbols::bounds(crate::arch::Arch::trap_entry()) {
        seen.push((b.start, 0), GFP_KERNEL)?;
        queue.push((b.start, b.start.saturating_add(b.size), 0), GFP_KERNEL)?;
    }
    // The die chain's callbacks: `notify_die()` calls each through a
    // pointer on every kernel breakpoint, the highest priority first (the
    // hardware-breakpoint code's, `hw_breakpoint_exceptions_notify`, runs
    // before the engine's): a breakpoint in one of them is hit again before
    // the engine sees the first. Direct-call decoding cannot find them.
    // Read at load: a die notifier registered later is not covered.
    let mut cbs = [0usize; 32];
    let chain = symbols::lookup_name(c_str!("die_chain")).unwrap_or(0);
    let mut n = 0;
    if chain != 0 {
        // SAFETY: `die_chain` is the kernel's `struct atomic_notifier_head`;
        // `cbs` has room for the count given.
        let got = unsafe {
            kp_helper_notifier_callbacks(chain as *mut c_void, cbs.as_mut_ptr(), cbs.len() as u32)
        };
        n = got as usize;
    }
    for &cb in cbs.iter().take(n) {
        let Some(s) = symbols::symbol_at(cb) else {
            continue;
        };
        if reached(&seen, s.start) {
            continue;
        }
        let end = s.start.saturating_add(s.size);
        seen.push((s.start, 0), GFP_KERNEL)?;
        queue.push((s.start, end, 0), GFP_KERNEL)?;
        add(v, s.start, end, TRAP)?;
    }
    let roots = seen.len();
    let mut added = 0usize;
    let mut i = 0;
    while let Some(&(start, end, depth)) = queue.get(i) {
        i += 1;
        let mut r = Ok(());
        crate::arch::Arch::for_each_direct_branch(start, end, |t| {
            if r.is_err() || (start..end).contains(&t) {
                return;
            }
            if !symbols::in_kernel_text(t) && !symbols::in_module_text(t) {
                return;
            }
            // The engine's own functions are one body of code to the trap
            // path: its internal calls do not count against the depth.
            let d = if crate::symbols::is_engine_address(t) {
                depth
            } else {
                depth + 1
            };
            if d > TRAP_DEPTH {
                return;
            }
            let Some(b) = symbols::bounds(t) else {
                return;
            };
            // Reached before: scanned again only if now shallower.
            let prior = seen.iter().position(|&(a, _)| a == b.start);
            if prior.is_some_and(|i| seen.get(i).is_some_and(|&(_, pd)| pd <= d)) {
                return;
            }
            let Some(mut s) = symbols::symbol_at(t) else {
                return;
            };
            let mut fstart = s.start;
            // With call-depth tracking (or kCFI) a direct call may target
            // the padding before a function (`__pfx_foo`, `__cfi_foo`):
            // the function is the symbol that follows it.
            if s.name().starts_with(b"__pfx_") || s.name().starts_with(b"__cfi_") {
                match symbols::symbol_at(s.start.saturating_add(s.size)) {
                    Some(f) => s = f,
                    None => return,
                }
            }
            let fend = s.start.saturating_add(s.size);
            fstart = fstart.min(s.start);
            if prior.is_some() {
                for e in seen.iter_mut() {
                    if e.0 == b.start || e.0 == s.start {
                        e.1 = d;
                    }
                }
            } else {
                r = seen
                    .push((b.start, d), GFP_KERNEL)
                    .and_then(|()| seen.push((s.start, d), GFP_KERNEL))
                    .map_err(Error::from);
            }
            if r.is_ok() && !v.iter().any(|x| (x.start..x.end).contains(&s.start)) {
                r = add(v, fstart, fend, TRAP_CALLEE);
                added += 1;
            }
            let name = s.name();
            let stop = TRAP_STOP_PREFIXES.iter().any(|p| name.starts_with(p))
                || TRAP_STOP_SUBSTRINGS
                    .iter()
                    .any(|p| name.windows(p.len()).any(|w| w == *p));
            // Expanded further below the depth limit; engine code always
            // (its own callees keep its depth).
            if r.is_ok() && !stop && (d < TRAP_DEPTH || d == depth) {
                r = queue
                    .push((s.start, fend, d), GFP_KERNEL)
                    .map_err(Error::from);
            }
        });
        r?;
    }
    Ok(TrapClosure { roots, added })
}

/// Frees the list at unload.
pub(crate) fn exit() {
    let p = LIST.swap(core::ptr::null_mut(), Ordering::AcqRel);
    if !p.is_null() {
        // SAFETY: allocated in `init`; readers are registration paths, which
        // cannot run during unload.
        drop(unsafe { KBox::from_raw(p) });
    }
}

/// Every refused range, in the order `init` found them (a function may be
/// in several, for different reasons).
pub(crate) fn ranges() -> &'static [Range] {
    let p = LIST.load(Ordering::Acquire);
    if p.is_null() {
        return &[];
    }
    // SAFETY: set once in `init`, freed only at unload.
    unsafe { (*p).as_slice() }
}

/// Whether `addr` is in a `__cfi_` or `__pfx_` symbol: the padding and the
/// kCFI type hash the compiler puts before a function (CALL_PADDING,
/// CFI_CLANG). The kernel's kprobes refuse them (`is_cfi_preamble_symbol()`):
/// a breakpoint or a jump there corrupts the hash every indirect call to the
/// function checks. Such symbols are a few words long: only short symbols
/// are looked up by name.
fn in_preamble(addr: usize) -> bool {
    match symbols::bounds(addr) {
        Some(b) if b.size <= 64 => {}
        _ => return false,
    }
    symbols::symbol_at(addr).is_some_and(|s| {
        let n = s.name();
        n.starts_with(b"__cfi_") || n.starts_with(b"__pfx_")
    })
}

/// Why `addr` must not be probed, if it must not.
pub(crate) fn check(addr: usize) -> Option<&'static CStr> {
    if crate::symbols::is_engine_address(addr) {
        return Some(c_str!("the engine's own code"));
    }
    ranges()
        .iter()
        .find(|r| (r.start..r.end).contains(&addr))
        .map(|r| r.reason)
        .or_else(|| {
            in_preamble(addr).then_some(c_str!(
                "a function's padding or kCFI preamble (__pfx_/__cfi_), not code"
            ))
        })
        .or_else(|| {
            // A module's own list, read at each check: modules come and go.
            symbols::in_module_text(addr)
                .then(|| symbols::bounds(addr))
                .flatten()
                .and_then(|b| symbols::module_blacklisted(addr, b.start))
        })
}

/// `kp_blacklisted()`: why `addr` cannot be probed (a static NUL-terminated
/// string), or NULL when the blacklist does not refuse it. The query API
/// behind the debugfs file, for clients and tests.
#[no_mangle]
pub extern "C" fn kp_blacklisted(addr: usize) -> *const kernel::ffi::c_char {
    check(addr).map_or(core::ptr::null(), |r| r.as_char_ptr())
}

/// `kp_blacklist_range()`: the `idx`-th refused range (`*start`, `*end`)
/// and why (a static NUL-terminated string), or NULL past the last. The
/// same list as the debugfs file, for tests and tools that walk it.
///
/// # Safety
///
/// `start` and `end` are valid for writes (or null, then not written).
#[no_mangle]
pub unsafe extern "C" fn kp_blacklist_range(
    idx: usize,
    start: *mut usize,
    end: *mut usize,
) -> *const kernel::ffi::c_char {
    let Some(r) = ranges().get(idx) else {
        return core::ptr::null();
    };
    // SAFETY: per the function's contract.
    unsafe {
        if let Some(s) = start.as_mut() {
            *s = r.start;
        }
        if let Some(e) = end.as_mut() {
            *e = r.end;
        }
    }
    r.reason.as_char_ptr()
}
