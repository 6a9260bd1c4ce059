// SPDX-License-Identifier: GPL-2.0

//! Symbol resolution through the kernel's kallsyms, without the kernel's kprobes.
//!
//! `kallsyms_lookup_name()` is not exported to modules, and the usual trick of
//! resolving it through a kprobe is off limits for this engine. What is
//! exported is `sprint_symbol()`, which prints `name+off/size` for any address.
//! `kallsyms_lookup_name()` sits a few functions before `sprint_symbol()` in
//! `kernel/kallsyms.c`, so at load time we walk backwards symbol by symbol from
//! `sprint_symbol()` (each step: the symbol containing `start - 1`) until we
//! reach it, then call it through that address. Reading `/proc/kallsyms` would
//! be the other way, but that file has no `read_iter`, so `kernel_read()` fails.

use crate::ksym::{parse_sprint_symbol, SymInfo};
use core::sync::atomic::{AtomicUsize, Ordering};
use kernel::bindings;
use kernel::ffi::{c_char, c_ulong};
use kernel::{c_str, prelude::*, str::CStr};

/// `KSYM_SYMBOL_LEN` rounded up: room for `name+off/size [module buildid]`.
const SYM_BUF: usize = 1024;

/// How many symbols the backward walk may step over before giving up.
const MAX_WALK: usize = 256;

type LookupNameFn = unsafe extern "C" fn(*const c_char) -> c_ulong;

static LOOKUP_NAME: AtomicUsize = AtomicUsize::new(0);
static ON_EACH_SYMBOL: AtomicUsize = AtomicUsize::new(0);
static ON_EACH_MATCH: AtomicUsize = AtomicUsize::new(0);
static SEARCH_EXTABLES: AtomicUsize = AtomicUsize::new(0);
/// `ftrace_graph_ret_addr()` and `return_to_handler` (function graph
/// tracer; 0 without it).
static GRAPH_RET_ADDR: AtomicUsize = AtomicUsize::new(0);
static RETURN_TO_HANDLER: AtomicUsize = AtomicUsize::new(0);

/// The lock a reserved-text check must run under, as the kernel's kprobes
/// take it (`check_kprobe_address_safe()`, `prepare_kprobe()`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum CheckLock {
    /// The check locks what it needs itself.
    None,
    /// `jump_label_lock()`.
    JumpLabel,
    /// `text_mutex` (`alternatives_text_reserved()` asserts it).
    Text,
}

/// Text other kernel code rewrites at run time: a probe there would be
/// overwritten, or would make that code find unexpected bytes and BUG().
/// Each is `int f(void *start, void *end)` (non-zero: reserved), resolved
/// when the kernel has it (they depend on the configuration).
const RESERVED_CHECKS: [(&str, &CStr, CheckLock); 3] = [
    (
        JUMP_LABEL_SITE,
        kernel::c_str!("jump_label_text_reserved"),
        CheckLock::JumpLabel,
    ),
    (
        "a static-call site",
        kernel::c_str!("static_call_text_reserved"),
        CheckLock::None,
    ),
    (
        "an alternatives/SMP-lock site",
        kernel::c_str!("alternatives_text_reserved"),
        CheckLock::Text,
    ),
];
/// What [`reserved_by`] says of a jump-label site (checked first).
pub(crate) const JUMP_LABEL_SITE: &str = "a jump-label site";
/// `jump_label_lock`, `jump_label_unlock`, `text_mutex`: not exported;
/// resolved at load like the checks they guard.
static JUMP_LABEL_LOCK: AtomicUsize = AtomicUsize::new(0);
static JUMP_LABEL_UNLOCK: AtomicUsize = AtomicUsize::new(0);
static TEXT_MUTEX: AtomicUsize = AtomicUsize::new(0);
static RESERVED_FNS: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];
/// `unsigned long ftrace_location_range(unsigned long, unsigned long)`.
static FTRACE_LOCATION_RANGE: AtomicUsize = AtomicUsize::new(0);
static MODULE_TEXT_ADDRESS: AtomicUsize = AtomicUsize::new(0);
static STEXT: AtomicUsize = AtomicUsize::new(0);
/// `_text`: the image's first text byte (before `_stext` on arm64).
static TEXT: AtomicUsize = AtomicUsize::new(0);
static ETEXT: AtomicUsize = AtomicUsize::new(0);

/// A symbol found by address, copied out of `sprint_symbol()`'s buffer.
pub(crate) struct Symbol {
    buf: [u8; SYM_BUF],
    /// Start address of the symbol.
    pub(crate) start: usize,
    /// Size in bytes.
    pub(crate) size: usize,
    /// Whether the symbol belongs to a module (not vmlinux).
    pub(crate) in_module: bool,
}

impl Symbol {
    /// The text as `sprint_symbol()` printed it, for messages.
    pub(crate) fn text(&self) -> &str {
        let end = self.buf.iter().position(|&c| c == 0).unwrap_or(0);
        core::str::from_utf8(&self.buf[..end]).unwrap_or("?")
    }

    /// Writes `name+0xoff [module]` (the kernel's `%pS` without the size).
    pub(crate) fn write_short(&self, w: &mut impl core::fmt::Write) -> core::fmt::Result {
        let Some(i) = parse_sprint_symbol(&self.buf) else {
            return w.write_str("?");
        };
        let name = core::str::from_utf8(i.name).unwrap_or("?");
        write!(w, "{}+{:#x}", name, i.offset)?;
        if let Some(m) = i.module {
            write!(w, " [{}]", core::str::from_utf8(m).unwrap_or("?"))?;
        }
        Ok(())
    }

    /// The symbol's name.
    pub(crate) fn name(&self) -> &[u8] {
        match parse_sprint_symbol(&self.buf) {
            Some(i) => i.name,
            None => b"",
        }
    }
}

/// Where a symbol starts and how long it is, without its name.
#[derive(Clone, Copy)]
pub(crate) struct Bounds {
    /// Start address of the symbol.
    pub(crate) start: usize,
    /// Size in bytes.
    pub(crate) size: usize,
}

/// `int kallsyms_lookup_size_offset(unsigned long, unsigned long *,
/// unsigned long *)`: not exported; resolved at load.
static LOOKUP_SIZE_OFFSET: AtomicUsize = AtomicUsize::new(0);

/// The bounds of the symbol that contains `addr`: what registration needs,
/// at a fraction of [`symbol_at`]'s cost (no name is decompressed or
/// printed).
pub(crate) fn bounds(addr: usize) -> Option<Bounds> {
    let f = LOOKUP_SIZE_OFFSET.load(Ordering::Acquire);
    if f == 0 {
        return symbol_at(addr).map(|s| Bounds {
            start: s.start,
            size: s.size,
        });
    }
    let (mut size, mut offset): (c_ulong, c_ulong) = (0, 0);
    // SAFETY: `f` is `kallsyms_lookup_size_offset`, resolved in `init`, with
    // the C signature given above; any address is a valid argument.
    let found = unsafe {
        let f: unsafe extern "C" fn(c_ulong, *mut c_ulong, *mut c_ulong) -> kernel::ffi::c_int =
            core::mem::transmute(f);
        f(addr as c_ulong, &mut size, &mut offset)
    };
    if found == 0 {
        return None;
    }
    Some(Bounds {
        start: addr.checked_sub(offset)?,
        size,
    })
}

/// Prints the symbol containing an address as `sprint_symbol()` does (or the
/// address, in no symbol), looked up when printed: for messages.
pub(crate) struct Shown(pub(crate) usize);

impl core::fmt::Display for Shown {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match symbol_at(self.0) {
            Some(s) => f.write_str(s.text()),
            None => write!(f, "{:#x}", self.0),
        }
    }
}

/// Looks up the symbol that contains `addr`.
pub(crate) fn symbol_at(addr: usize) -> Option<Symbol> {
    let mut s = Symbol {
        buf: [0; SYM_BUF],
        start: 0,
        size: 0,
        in_module: false,
    };
    // SAFETY: `buf` is larger than KSYM_SYMBOL_LEN, the most `sprint_symbol`
    // writes; any address is a valid argument.
    unsafe { bindings::sprint_symbol(s.buf.as_mut_ptr().cast(), addr) };
    let SymInfo {
        offset,
        size,
        module,
        ..
    } = parse_sprint_symbol(&s.buf)?;
    s.start = addr.checked_sub(offset as usize)?;
    s.size = size as usize;
    s.in_module = module.is_some();
    Some(s)
}

/// Finds `kallsyms_lookup_name` by walking back from `sprint_symbol`.
fn find_lookup_name() -> Option<usize> {
    let mut start = bindings::sprint_symbol as *const () as usize;
    for _ in 0..MAX_WALK {
        let prev = symbol_at(start.checked_sub(1)?)?;
        if prev.name() == b"kallsyms_lookup_name" && !prev.in_module {
            return Some(prev.start);
        }
        start = prev.start;
    }
    None
}

/// Resolves the kernel symbols the engine needs. Process context only.
pub(crate) fn init() -> Result {
    let Some(f) = find_lookup_name() else {
        pr_err!("cannot locate kallsyms_lookup_name near sprint_symbol\n");
        return Err(ENOENT);
    };
    LOOKUP_NAME.store(f, Ordering::Release);
    // Cross-check the walk before trusting it.
    if lookup_name(c_str!("sprint_symbol")) != Some(bindings::sprint_symbol as *const () as usize) {
        pr_err!("kallsyms_lookup_name at {:#x} gives wrong results\n", f);
        LOOKUP_NAME.store(0, Ordering::Release);
        return Err(ENOENT);
    }
    let (Some(s), Some(e)) = (lookup_name(c_str!("_stext")), lookup_name(c_str!("_etext"))) else {
        pr_err!("cannot resolve _stext/_etext\n");
        return Err(ENOENT);
    };
    // Not exported either; used to tell module text from module data.
    let Some(m) = lookup_name(c_str!("__module_text_address")) else {
        pr_err!("cannot resolve __module_text_address\n");
        return Err(ENOENT);
    };
    MODULE_TEXT_ADDRESS.store(m, Ordering::Release);
    // Not exported; used once at load to enumerate the blacklist.
    let Some(each) = lookup_name(c_str!("kallsyms_on_each_symbol")) else {
        pr_err!("cannot resolve kallsyms_on_each_symbol\n");
        return Err(ENOENT);
    };
    ON_EACH_SYMBOL.store(each, Ordering::Release);
    let Some(each) = lookup_name(c_str!("kallsyms_on_each_match_symbol")) else {
        pr_err!("cannot resolve kallsyms_on_each_match_symbol\n");
        return Err(ENOENT);
    };
    ON_EACH_MATCH.store(each, Ordering::Release);
    // Not exported; tells instructions with an exception-table fixup.
    let Some(search) = lookup_name(c_str!("search_exception_tables")) else {
        pr_err!("cannot resolve search_exception_tables\n");
        return Err(ENOENT);
    };
    SEARCH_EXTABLES.store(search, Ordering::Release);
    for (slot, (_, name, _)) in RESERVED_FNS.iter().zip(RESERVED_CHECKS.iter()) {
        slot.store(lookup_name(name).unwrap_or(0), Ordering::Release);
    }
    for (slot, name) in [
        (&JUMP_LABEL_LOCK, c_str!("jump_label_lock")),
        (&JUMP_LABEL_UNLOCK, c_str!("jump_label_unlock")),
        (&TEXT_MUTEX, c_str!("text_mutex")),
    ] {
        slot.store(lookup_name(name).unwrap_or(0), Ordering::Release);
    }
    FTRACE_LOCATION_RANGE.store(
        lookup_name(c_str!("ftrace_location_range")).unwrap_or(0),
        Ordering::Release,
    );
    LOOKUP_SIZE_OFFSET.store(
        lookup_name(c_str!("kallsyms_lookup_size_offset")).unwrap_or(0),
        Ordering::Release,
    );
    // Not exported; a kretprobe entry after the function graph tracer's
    // finds its return address replaced by `return_to_handler`.
    if let (Some(f), Some(r)) = (
        lookup_name(c_str!("ftrace_graph_ret_addr")),
        lookup_name(c_str!("return_to_handler")),
    ) {
        GRAPH_RET_ADDR.store(f, Ordering::Release);
        RETURN_TO_HANDLER.store(r, Ordering::Release);
    }
    STEXT.store(s, Ordering::Relaxed);
    ETEXT.store(e, Ordering::Relaxed);
    TEXT.store(
        lookup_name(c_str!("_text")).unwrap_or(s).min(s),
        Ordering::Relaxed,
    );
    Ok(())
}

/// Resolves `name` (`"sym"` or `"module:sym"`) to an address.
pub(crate) fn lookup_name(name: &CStr) -> Option<usize> {
    let f = LOOKUP_NAME.load(Ordering::Acquire);
    if f == 0 {
        return None;
    }
    // SAFETY: `f` was verified in `init` to be `kallsyms_lookup_name`, whose C
    // signature is `unsigned long (const char *)`; `name` is NUL-terminated.
    let addr = unsafe {
        let lookup: LookupNameFn = core::mem::transmute(f);
        lookup(name.as_char_ptr())
    };
    (addr != 0).then_some(addr as usize)
}

extern "C" {
    fn kp_helper_is_module_text(module_text_address_fn: usize, addr: usize) -> bool;
}

/// Whether `addr` lies in the core text of a loaded module that is not
/// going away (init text is refused: it is freed after init).
pub(crate) fn in_module_text(addr: usize) -> bool {
    let f = MODULE_TEXT_ADDRESS.load(Ordering::Acquire);
    // SAFETY: `f` is `__module_text_address`, resolved and non-zero after
    // `init`; the helper calls it with preemption disabled as it requires.
    f != 0 && unsafe { kp_helper_is_module_text(f, addr) }
}

extern "C" {
    fn kp_helper_module_blacklisted(
        module_text_address_fn: usize,
        addr: usize,
        fstart: usize,
    ) -> *const c_char;
}

/// Why the loaded module whose text holds `addr` (in the function starting
/// at `fstart`) forbids probing it: its own `NOKPROBE_SYMBOL()` list, its
/// `.kprobes.text` or `.noinstr.text`.
pub(crate) fn module_blacklisted(addr: usize, fstart: usize) -> Option<&'static CStr> {
    let f = MODULE_TEXT_ADDRESS.load(Ordering::Acquire);
    if f == 0 {
        return None;
    }
    // SAFETY: `f` is `__module_text_address`, resolved in `init`; the
    // helper calls it with preemption disabled as it requires.
    let why = unsafe { kp_helper_module_blacklisted(f, addr, fstart) };
    // SAFETY: the helper returns NULL or a static NUL-terminated string.
    (!why.is_null()).then(|| unsafe { CStr::from_char_ptr(why) })
}

type EachSymbolFn = unsafe extern "C" fn(
    unsafe extern "C" fn(*mut kernel::ffi::c_void, *const c_char, c_ulong) -> kernel::ffi::c_int,
    *mut kernel::ffi::c_void,
) -> kernel::ffi::c_int;

/// Calls `f(name, address)` for every vmlinux symbol until it returns false.
/// Process context (it may sleep between symbols).
pub(crate) fn for_each_symbol<F: FnMut(&[u8], usize) -> bool>(mut f: F) {
    /// # Safety
    ///
    /// Called by kallsyms with the `F` below as `data`.
    unsafe extern "C" fn tramp<F: FnMut(&[u8], usize) -> bool>(
        data: *mut kernel::ffi::c_void,
        name: *const c_char,
        addr: c_ulong,
    ) -> kernel::ffi::c_int {
        // SAFETY: `data` is the `F` passed below, alive for the whole walk;
        // `name` is a NUL-terminated symbol name.
        let (f, name) = unsafe { (&mut *data.cast::<F>(), CStr::from_char_ptr(name)) };
        // A non-zero return stops the walk.
        kernel::ffi::c_int::from(!f(name.as_bytes(), addr))
    }
    let each = ON_EACH_SYMBOL.load(Ordering::Acquire);
    if each == 0 {
        return;
    }
    // SAFETY: `each` is `kallsyms_on_each_symbol` (resolved in `init`) with
    // this C signature; the callback and its data match.
    unsafe {
        let each: EachSymbolFn = core::mem::transmute(each);
        each(tramp::<F>, &mut f as *mut F as *mut kernel::ffi::c_void);
    }
}

type EachMatchFn = unsafe extern "C" fn(
    unsafe extern "C" fn(*mut kernel::ffi::c_void, c_ulong) -> kernel::ffi::c_int,
    *const c_char,
    *mut kernel::ffi::c_void,
) -> kernel::ffi::c_int;

/// Calls `f(address)` for every vmlinux symbol named `name` (static
/// functions may share a name). Process context.
pub(crate) fn for_each_match<F: FnMut(usize)>(name: &CStr, mut f: F) {
    /// # Safety
    ///
    /// Called by kallsyms with the `F` below as `data`.
    unsafe extern "C" fn tramp<F: FnMut(usize)>(
        data: *mut kernel::ffi::c_void,
        addr: c_ulong,
    ) -> kernel::ffi::c_int {
        // SAFETY: `data` is the `F` passed below, alive for the whole walk.
        unsafe { (*data.cast::<F>())(addr) };
        0
    }
    let each = ON_EACH_MATCH.load(Ordering::Acquire);
    if each == 0 {
        return;
    }
    // SAFETY: `each` is `kallsyms_on_each_match_symbol` (resolved in `init`)
    // with this C signature; `name` is NUL-terminated.
    unsafe {
        let each: EachMatchFn = core::mem::transmute(each);
        each(
            tramp::<F>,
            name.as_char_ptr(),
            &mut f as *mut F as *mut kernel::ffi::c_void,
        );
    }
}

/// `return_to_handler`, the function graph tracer's return hook (0 without
/// the tracer).
pub(crate) fn return_to_handler() -> usize {
    RETURN_TO_HANDLER.load(Ordering::Acquire)
}

/// The real return address behind `ret` when `ret` is the function graph
/// tracer's `return_to_handler` (it hijacked this return before the
/// engine): the address its shadow stack saved for the frame whose return
/// slot (x86_64) or frame pointer (arm64) is `retp`, as the unwinders ask
/// it. `None` when `ret` is not the tracer's, or it has no entry for that
/// frame. The current task, preemption off.
pub(crate) fn graph_return_address(ret: usize, retp: usize) -> Option<usize> {
    let r = RETURN_TO_HANDLER.load(Ordering::Acquire);
    if r == 0 || ret != r {
        return None;
    }
    let f = GRAPH_RET_ADDR.load(Ordering::Acquire);
    let mut idx: kernel::ffi::c_int = 0;
    // SAFETY: `f` is `ftrace_graph_ret_addr`, resolved with
    // `return_to_handler` in `init`, with the C signature `unsigned long
    // (struct task_struct *, int *, unsigned long, unsigned long *)`; it only
    // reads the current task's shadow stack.
    let real = unsafe {
        let g: unsafe extern "C" fn(
            *mut bindings::task_struct,
            *mut kernel::ffi::c_int,
            c_ulong,
            *mut c_ulong,
        ) -> c_ulong = core::mem::transmute(f);
        g(
            bindings::get_current(),
            &mut idx,
            ret as c_ulong,
            retp as *mut c_ulong,
        )
    } as usize;
    (real != ret).then_some(real)
}

/// Whether the instruction at `addr` has an exception-table entry (a fixup
/// for a fault it may take, e.g. a user access). Process context.
pub(crate) fn has_extable_entry(addr: usize) -> bool {
    let f = SEARCH_EXTABLES.load(Ordering::Acquire);
    if f == 0 {
        return true; // cannot tell: be safe
    }
    // SAFETY: `f` is `search_exception_tables`, resolved in `init`, with the
    // C signature `const struct exception_table_entry *(unsigned long)`;
    // it takes the RCU read lock it needs itself.
    unsafe {
        let search: unsafe extern "C" fn(c_ulong) -> *const kernel::ffi::c_void =
            core::mem::transmute(f);
        !search(addr).is_null()
    }
}

/// Where the exception fixup of the instruction at `addr` lands, if it has
/// one. Process context.
// Only the x86_64 jump optimization needs it.
#[cfg_attr(not(CONFIG_X86_64), allow(dead_code))]
pub(crate) fn extable_landing(addr: usize) -> Option<usize> {
    let f = SEARCH_EXTABLES.load(Ordering::Acquire);
    if f == 0 {
        return None;
    }
    // SAFETY: as in `has_extable_entry`; a found entry lives in the kernel's
    // or a live module's table (the caller's text is live: registration
    // lock, module notifier).
    unsafe {
        let search: unsafe extern "C" fn(c_ulong) -> *const bindings::exception_table_entry =
            core::mem::transmute(f);
        let e = search(addr);
        if e.is_null() {
            return None;
        }
        // `fixup` is relative to its own address (x86_64 and arm64 alike).
        let at = core::ptr::addr_of!((*e).fixup);
        Some((at as usize).wrapping_add(*at as isize as usize))
    }
}

/// The kernel's `text_mutex`, held: every writer of kernel text takes it
/// (`text_poke()` asserts it), which orders the engine's writes with jump
/// labels, static calls, alternatives and ftrace. Process context.
pub(crate) struct TextLock {
    _held: CheckGuard,
}

impl TextLock {
    /// Takes `text_mutex` (nothing when it could not be resolved).
    pub(crate) fn lock() -> Self {
        TextLock {
            _held: CheckGuard::lock(CheckLock::Text),
        }
    }
}

/// Holds the lock of one reserved-text check (process context).
struct CheckGuard(CheckLock);

impl CheckGuard {
    fn lock(l: CheckLock) -> Self {
        let (lock, mutex) = (
            JUMP_LABEL_LOCK.load(Ordering::Acquire),
            TEXT_MUTEX.load(Ordering::Acquire),
        );
        let l = match l {
            CheckLock::JumpLabel if lock != 0 && JUMP_LABEL_UNLOCK.load(Ordering::Acquire) != 0 => {
                // SAFETY: `jump_label_lock`, resolved in `init`: `void (void)`.
                unsafe { core::mem::transmute::<usize, unsafe extern "C" fn()>(lock)() };
                l
            }
            CheckLock::Text if mutex != 0 => {
                // SAFETY: `text_mutex`, resolved in `init`, is a `struct mutex`.
                unsafe { bindings::mutex_lock(mutex as *mut bindings::mutex) };
                l
            }
            _ => CheckLock::None,
        };
        CheckGuard(l)
    }
}

impl Drop for CheckGuard {
    fn drop(&mut self) {
        match self.0 {
            CheckLock::JumpLabel => {
                let f = JUMP_LABEL_UNLOCK.load(Ordering::Acquire);
                if f != 0 {
                    // SAFETY: `jump_label_unlock`: `void (void)`; locked in
                    // `lock`.
                    unsafe { core::mem::transmute::<usize, unsafe extern "C" fn()>(f)() };
                }
            }
            CheckLock::Text => {
                // SAFETY: locked in `lock`.
                unsafe {
                    bindings::mutex_unlock(
                        TEXT_MUTEX.load(Ordering::Acquire) as *mut bindings::mutex
                    )
                };
            }
            CheckLock::None => {}
        }
    }
}

/// What [`reserved_by`] says of an ftrace call site.
pub(crate) const FTRACE_SITE: &str = "an ftrace call site";

/// Why the text at `addr` belongs to another kernel text-patching user, if
/// it does: jump labels, static calls, alternatives, or an ftrace call site
/// within `[addr, addr + ftrace_guard]` (the arch says how far ftrace's
/// bytes reach back, e.g. arm64's per-function ops literal).
pub(crate) fn reserved_by(addr: usize, ftrace_guard: usize) -> Option<&'static str> {
    reserved_range_by(addr, addr + 1, ftrace_guard)
}

/// [`reserved_by`] for any byte of `[start, end)`.
pub(crate) fn reserved_range_by(
    start: usize,
    end: usize,
    ftrace_guard: usize,
) -> Option<&'static str> {
    let last = end - 1;
    for (slot, (why, _, lock)) in RESERVED_FNS.iter().zip(RESERVED_CHECKS.iter()) {
        let f = slot.load(Ordering::Acquire);
        if f == 0 {
            continue;
        }
        let _held = CheckGuard::lock(*lock);
        // SAFETY: `f` is the named kernel function, resolved in `init`, with
        // the C signature `int (void *, void *)`; its lock is held.
        let reserved = unsafe {
            let f: unsafe extern "C" fn(usize, usize) -> kernel::ffi::c_int =
                core::mem::transmute(f);
            f(start, last) != 0
        };
        if reserved {
            return Some(why);
        }
    }
    if ftrace_location_range(start, last + ftrace_guard).is_some_and(|site| site != 0) {
        return Some(FTRACE_SITE);
    }
    None
}

/// `ftrace_location_range(start, last)`: the first ftrace call site in
/// `start..=last`, 0 if none; `None` when the function could not be
/// resolved.
fn ftrace_location_range(start: usize, last: usize) -> Option<usize> {
    let f = FTRACE_LOCATION_RANGE.load(Ordering::Acquire);
    if f == 0 {
        return None;
    }
    // SAFETY: `f` is `ftrace_location_range`, resolved in `init`, with the C
    // signature `unsigned long (unsigned long, unsigned long)`.
    let site = unsafe {
        let f: unsafe extern "C" fn(c_ulong, c_ulong) -> c_ulong = core::mem::transmute(f);
        f(start as c_ulong, last as c_ulong)
    };
    Some(site as usize)
}

/// Whether ftrace has a call site anywhere in `start..=last`; `None` when
/// `ftrace_location_range` could not be resolved.
pub(crate) fn has_ftrace_site(start: usize, last: usize) -> Option<bool> {
    ftrace_location_range(start, last).map(|site| site != 0)
}

/// Whether `addr` is exactly an ftrace call site.
pub(crate) fn is_ftrace_site(addr: usize) -> bool {
    ftrace_location_range(addr, addr) == Some(addr)
}

/// Whether `addr` lies in the kernel image's text, head text included
/// (`_text` .. `_etext`).
pub(crate) fn in_kernel_image_text(addr: usize) -> bool {
    (TEXT.load(Ordering::Relaxed)..ETEXT.load(Ordering::Relaxed)).contains(&addr)
}

/// Whether `addr` lies in the core kernel's `.text` (`_stext` .. `_etext`).
pub(crate) fn in_kernel_text(addr: usize) -> bool {
    (STEXT.load(Ordering::Relaxed)..ETEXT.load(Ordering::Relaxed)).contains(&addr)
}
