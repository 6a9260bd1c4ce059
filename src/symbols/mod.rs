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
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use kernel::bindings;
use kernel::ffi::{c_char, c_int, c_uint, c_ulong, c_void};
use kernel::{c_str, prelude::*, str::CStr};

pub(crate) mod reserved;
pub(crate) use reserved::{
    ftrace_location_range, has_extable_entry, has_ftrace_site, in_kernel_image_text,
    in_kernel_text, is_ftrace_site, reserved_by, TextLock, FTRACE_SITE,
};

/// `KSYM_SYMBOL_LEN` rounded up: room for `name+off/size [module buildid]`.
const SYM_BUF: usize = 1024;

/// How many symbols the backward walk may step over before giving up.
const MAX_WALK: usize = 256;

// The calls into what `init` resolves, made in C with the types the
// kernel's headers declare (src/kfuncs.c says why: kCFI, sealed functions
// under IBT). Each takes the address to call first: the function, or the
// arch's gate to it ([`gate`]).
extern "C" {
    fn kp_call_kallsyms_lookup_name(f: usize, name: *const c_char) -> c_ulong;
    fn kp_call_kallsyms_lookup_size_offset(
        f: usize,
        addr: usize,
        size: *mut c_ulong,
        offset: *mut c_ulong,
    ) -> c_int;
    fn kp_call_kallsyms_on_each_symbol(f: usize, data: *mut c_void) -> c_int;
    fn kp_call_kallsyms_on_each_match_symbol(
        f: usize,
        name: *const c_char,
        data: *mut c_void,
    ) -> c_int;
    fn kp_call_module_kallsyms_on_each_symbol(
        f: usize,
        modname: *const c_char,
        data: *mut c_void,
    ) -> c_int;
    fn kp_call_search_exception_tables(f: usize, addr: usize, fixup: *mut usize) -> bool;
    fn kp_call_ftrace_location_range(f: usize, start: usize, end: usize) -> c_ulong;
    fn kp_call_text_reserved(
        f: usize,
        which: c_uint,
        lock: usize,
        unlock: usize,
        start: usize,
        end: usize,
    ) -> c_int;
    fn kp_call_ftrace_graph_ret_addr(f: usize, ret: usize, retp: *mut c_ulong) -> c_ulong;
}

/// The address through which the engine calls the kernel function at
/// `addr`: the function itself, or where the arch needs one (x86_64 with
/// IBT, whose kernel seals functions vmlinux never calls through a
/// pointer) a gate in the engine's text that jumps there. 0 stays 0.
fn gate(addr: usize) -> usize {
    if addr == 0 {
        return 0;
    }
    match <crate::arch::Arch as crate::arch::Insns>::call_gate(addr) {
        Ok(g) => g,
        Err(_) => {
            pr_err!("no call gate for {:#x}\n", addr);
            0
        }
    }
}

/// Resolves a function the engine calls, and gives the address to call it
/// through (see [`gate`]); `None` when the kernel has no such function.
/// Process context, at load.
pub(crate) fn lookup_function(name: &'static CStr) -> Option<usize> {
    let g = gate(lookup_name(name)?);
    record_call(name, g);
    (g != 0).then_some(g)
}

/// Every function [`lookup_function`] resolved: its name and the address
/// the engine calls (for `kp_resolved_call()`). Written at load only.
static CALLS: [(AtomicPtr<c_char>, AtomicUsize); 32] =
    [const { (AtomicPtr::new(core::ptr::null_mut()), AtomicUsize::new(0)) }; 32];

fn record_call(name: &'static CStr, call: usize) {
    if let Some((n, c)) = CALLS
        .iter()
        .find(|(n, _)| n.load(Ordering::Acquire).is_null())
    {
        c.store(call, Ordering::Relaxed);
        n.store(name.as_char_ptr().cast_mut(), Ordering::Release);
    }
}

/// `kp_resolved_call()`: the `idx`-th kernel function the engine resolved
/// by name and calls through a pointer: its name (a static NUL-terminated
/// string, NULL past the last) and, in `*call`, the address the engine
/// calls it through (the function, or its gate; 0 if no gate could be
/// made). For tests: on an IBT kernel every such address must hold an
/// ENDBR, as the kernel seals functions it never calls through pointers.
///
/// # Safety
///
/// `call` is valid for a write (or null).
#[no_mangle]
pub unsafe extern "C" fn kp_resolved_call(idx: usize, call: *mut usize) -> *const c_char {
    let Some((n, c)) = CALLS.get(idx) else {
        return core::ptr::null();
    };
    let name = n.load(Ordering::Acquire);
    if !name.is_null() && !call.is_null() {
        // SAFETY: the caller's contract.
        unsafe { *call = c.load(Ordering::Relaxed) };
    }
    name
}

static LOOKUP_NAME: AtomicUsize = AtomicUsize::new(0);
static ON_EACH_SYMBOL: AtomicUsize = AtomicUsize::new(0);
static ON_EACH_MATCH: AtomicUsize = AtomicUsize::new(0);
/// `module_kallsyms_on_each_symbol()` (0: not found; then module symbols
/// are not counted by [`count_named`]).
static ON_EACH_MODULE_SYMBOL: AtomicUsize = AtomicUsize::new(0);
static SEARCH_EXTABLES: AtomicUsize = AtomicUsize::new(0);
/// `ftrace_graph_ret_addr()` and `return_to_handler` (function graph
/// tracer; 0 without it).
static GRAPH_RET_ADDR: AtomicUsize = AtomicUsize::new(0);
static RETURN_TO_HANDLER: AtomicUsize = AtomicUsize::new(0);

/// Text other kernel code rewrites at run time: a probe there would be
/// overwritten, or would make that code find unexpected bytes and BUG().
/// Each is `int f(void *start, void *end)` (non-zero: reserved), resolved
/// when the kernel has it (they depend on the configuration), and called
/// under the lock the kernel's kprobes take for it
/// (`check_kprobe_address_safe()`, `prepare_kprobe()`): `jump_label_lock()`
/// (src/kfuncs.c takes it), none, `text_mutex` (`alternatives_text_reserved()`
/// asserts it). The index is `kp_call_text_reserved()`'s `which`.
const RESERVED_CHECKS: [(&str, &CStr); 3] = [
    (JUMP_LABEL_SITE, kernel::c_str!("jump_label_text_reserved")),
    (
        "a static-call site",
        kernel::c_str!("static_call_text_reserved"),
    ),
    (
        "an alternatives/SMP-lock site",
        kernel::c_str!("alternatives_text_reserved"),
    ),
];
/// The index of the check that wants `text_mutex` held.
const RESERVED_TEXT_LOCKED: usize = 2;
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

    /// Name, offset and module (`None`: vmlinux), as `%pS` gives them.
    pub(crate) fn parts(&self) -> Option<(&str, u64, Option<&str>)> {
        let i = parse_sprint_symbol(&self.buf)?;
        let s = |b| core::str::from_utf8(b).unwrap_or("?");
        Some((s(i.name), i.offset, i.module.map(s)))
    }

    /// Writes `name+0xoff [module]` (the kernel's `%pS` without the size).
    pub(crate) fn write_short(&self, w: &mut impl core::fmt::Write) -> core::fmt::Result {
        let Some((name, offset, module)) = self.parts() else {
            return w.write_str("?");
        };
        write!(w, "{}+{:#x}", name, offset)?;
        module.map_or(Ok(()), |m| write!(w, " [{}]", m))
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

/// `kallsyms_lookup_size_offset()`: not exported; resolved at load.
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
    // SAFETY: `f` is `kallsyms_lookup_size_offset` (or its gate), resolved
    // in `init`; any address is a valid argument.
    let found = unsafe { kp_call_kallsyms_lookup_size_offset(f, addr, &mut size, &mut offset) };
    if found == 0 {
        return None;
    }
    let start = addr.checked_sub(offset)?;
    covers(addr, start).then_some(Bounds { start, size })
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
    // SAFETY: `buf` past the headroom is larger than KSYM_SYMBOL_LEN, the
    // most `sprint_symbol` writes, and the headroom takes what it writes
    // before its buffer (see `SPRINT_HEADROOM`); any address is valid.
    unsafe {
        bindings::sprint_symbol(
            s.buf.as_mut_ptr().add(crate::ksym::SPRINT_HEADROOM).cast(),
            addr,
        )
    };
    crate::ksym::settle_sprint_symbol(&mut s.buf);
    let SymInfo {
        offset,
        size,
        module,
        ..
    } = parse_sprint_symbol(&s.buf)?;
    s.start = addr.checked_sub(offset as usize)?;
    s.size = size as usize;
    s.in_module = module.is_some();
    if s.in_module && !covers(addr, s.start) {
        return None;
    }
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
    LOOKUP_NAME.store(gate(f), Ordering::Release);
    record_call(
        c_str!("kallsyms_lookup_name"),
        LOOKUP_NAME.load(Ordering::Relaxed),
    );
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
    let Some(m) = lookup_function(c_str!("__module_text_address")) else {
        pr_err!("cannot resolve __module_text_address\n");
        return Err(ENOENT);
    };
    MODULE_TEXT_ADDRESS.store(m, Ordering::Release);
    // Not exported; used once at load to enumerate the blacklist.
    let Some(each) = lookup_function(c_str!("kallsyms_on_each_symbol")) else {
        pr_err!("cannot resolve kallsyms_on_each_symbol\n");
        return Err(ENOENT);
    };
    ON_EACH_SYMBOL.store(each, Ordering::Release);
    let Some(each) = lookup_function(c_str!("kallsyms_on_each_match_symbol")) else {
        pr_err!("cannot resolve kallsyms_on_each_match_symbol\n");
        return Err(ENOENT);
    };
    ON_EACH_MATCH.store(each, Ordering::Release);
    // Not exported; counts a name's symbols in modules (probe events
    // refuse a name that is not unique, as the kernel's do).
    ON_EACH_MODULE_SYMBOL.store(
        lookup_function(c_str!("module_kallsyms_on_each_symbol")).unwrap_or(0),
        Ordering::Release,
    );
    // Not exported; tells instructions with an exception-table fixup.
    let Some(search) = lookup_function(c_str!("search_exception_tables")) else {
        pr_err!("cannot resolve search_exception_tables\n");
        return Err(ENOENT);
    };
    SEARCH_EXTABLES.store(search, Ordering::Release);
    for (slot, (_, name)) in RESERVED_FNS.iter().zip(RESERVED_CHECKS.iter()) {
        slot.store(lookup_function(name).unwrap_or(0), Ordering::Release);
    }
    for (slot, name) in [
        (&JUMP_LABEL_LOCK, c_str!("jump_label_lock")),
        (&JUMP_LABEL_UNLOCK, c_str!("jump_label_unlock")),
    ] {
        slot.store(lookup_function(name).unwrap_or(0), Ordering::Release);
    }
    TEXT_MUTEX.store(
        lookup_name(c_str!("text_mutex")).unwrap_or(0),
        Ordering::Release,
    );
    FTRACE_LOCATION_RANGE.store(
        lookup_function(c_str!("ftrace_location_range")).unwrap_or(0),
        Ordering::Release,
    );
    LOOKUP_SIZE_OFFSET.store(
        lookup_function(c_str!("kallsyms_lookup_size_offset")).unwrap_or(0),
        Ordering::Release,
    );
    // Not exported; a kretprobe entry after the function graph tracer's
    // finds its return address replaced by `return_to_handler`.
    if let (Some(f), Some(r)) = (
        lookup_function(c_str!("ftrace_graph_ret_addr")),
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
    // SAFETY: `f` was verified in `init` to be `kallsyms_lookup_name` (or
    // its gate); `name` is NUL-terminated.
    let addr = unsafe { kp_call_kallsyms_lookup_name(f, name.as_char_ptr()) };
    (addr != 0).then_some(addr as usize)
}

extern "C" {
    fn kp_helper_is_module_text(module_text_address_fn: usize, addr: usize) -> bool;
    fn kp_helper_module_symbol_covers(
        module_text_address_fn: usize,
        addr: usize,
        start: usize,
    ) -> bool;
}

/// Whether a symbol kallsyms found for `addr`, starting at `start`, can
/// hold it: false for module text before the module's first text symbol
/// (arm64 PLT veneers), which kallsyms attributes to the nearest symbol
/// below in the module's whole table, a data symbol in another allocation
/// (strict module RWX), with a size reaching from there. Registration and
/// the trap-path derivation would otherwise take that span for a function.
fn covers(addr: usize, start: usize) -> bool {
    let f = MODULE_TEXT_ADDRESS.load(Ordering::Acquire);
    // SAFETY: `f` is `__module_text_address`, resolved and non-zero after
    // `init`; the helper calls it with preemption disabled as it requires.
    f == 0 || unsafe { kp_helper_module_symbol_covers(f, addr, start) }
}

extern "C" {
    fn kp_helper_within_this_module(addr: usize) -> bool;
    fn kp_helper_within_module(addr: usize, module: *mut c_void) -> bool;
}

/// Whether `addr` is in any memory of `module`.
pub(crate) fn within_module(addr: usize, module: *mut c_void) -> bool {
    // SAFETY: a range check against a live module (the notifier's argument).
    unsafe { kp_helper_within_module(addr, module) }
}

/// Whether `addr` belongs to the engine itself (never probe-able).
pub(crate) fn is_engine_address(addr: usize) -> bool {
    // SAFETY: a pure range check against THIS_MODULE's memory.
    unsafe { kp_helper_within_this_module(addr) }
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
    fn kp_helper_module_sections(module_text_address_fn: usize, addr: usize, fstart: usize) -> u32;
}

/// What a module refuses, as `kp_helper_module_sections()` reports it (its
/// `KP_MOD_*` bits, `src/helpers.h`), with the reason; the first that
/// applies is given.
const MODULE_REFUSALS: [(u32, &CStr); 3] = [
    (4, kernel::c_str!("NOKPROBE_SYMBOL in its module")),
    (2, kernel::c_str!("the module's .kprobes.text")),
    (1, kernel::c_str!("the module's .noinstr.text")),
];

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
    let bits = unsafe { kp_helper_module_sections(f, addr, fstart) };
    MODULE_REFUSALS
        .iter()
        .find(|(bit, _)| bits & bit != 0)
        .map(|&(_, why)| why)
}

/// The closure behind one walk of [`for_each_symbol`].
type EachSymbol<'a> = &'a mut dyn FnMut(&[u8], usize) -> bool;
/// The closure behind one walk of [`for_each_match`].
type EachMatch<'a> = &'a mut dyn FnMut(usize);

/// One step of [`for_each_symbol`]'s walk, called by `kallsyms_on_each_symbol`
/// through src/kfuncs.c.
///
/// # Safety
///
/// `data` is the [`EachSymbol`] the walk was started with; `name` is a
/// NUL-terminated symbol name.
#[no_mangle]
unsafe extern "C" fn kp_symbols_each(
    data: *mut c_void,
    name: *const c_char,
    addr: c_ulong,
) -> c_int {
    // SAFETY: the function's contract.
    let (f, name) = unsafe {
        (
            &mut *data.cast::<EachSymbol<'_>>(),
            CStr::from_char_ptr(name),
        )
    };
    // A non-zero return stops the walk.
    c_int::from(!f(name.as_bytes(), addr))
}

/// One step of [`for_each_match`]'s walk.
///
/// # Safety
///
/// `data` is the [`EachMatch`] the walk was started with.
#[no_mangle]
unsafe extern "C" fn kp_symbols_each_match(data: *mut c_void, addr: c_ulong) -> c_int {
    // SAFETY: the function's contract.
    unsafe { (*data.cast::<EachMatch<'_>>())(addr) };
    0
}

/// Calls `f(name, address)` for every vmlinux symbol until it returns false.
/// Process context (it may sleep between symbols).
pub(crate) fn for_each_symbol<F: FnMut(&[u8], usize) -> bool>(mut f: F) {
    let each = ON_EACH_SYMBOL.load(Ordering::Acquire);
    if each == 0 {
        return;
    }
    let mut walk: EachSymbol<'_> = &mut f;
    // SAFETY: `each` is `kallsyms_on_each_symbol` (or its gate), resolved
    // in `init`; `walk` outlives the call, as `kp_symbols_each` wants.
    unsafe { kp_call_kallsyms_on_each_symbol(each, (&mut walk as *mut EachSymbol<'_>).cast()) };
}

/// Calls `f(address)` for every vmlinux symbol named `name` (static
/// functions may share a name). Process context.
pub(crate) fn for_each_match<F: FnMut(usize)>(name: &CStr, mut f: F) {
    let each = ON_EACH_MATCH.load(Ordering::Acquire);
    if each == 0 {
        return;
    }
    let mut walk: EachMatch<'_> = &mut f;
    // SAFETY: `each` is `kallsyms_on_each_match_symbol` (or its gate),
    // resolved in `init`; `name` is NUL-terminated; `walk` outlives the
    // call, as `kp_symbols_each_match` wants.
    unsafe {
        kp_call_kallsyms_on_each_match_symbol(
            each,
            name.as_char_ptr(),
            (&mut walk as *mut EachMatch<'_>).cast(),
        )
    };
}

/// Calls `f(name, address)` for the symbols of every loaded module
/// (`module` `None`) or of module `module`, until it returns false;
/// `false` if the walk is not available. Process context (it takes
/// `module_mutex`).
fn each_module_symbol(module: Option<&CStr>, mut f: impl FnMut(&[u8], usize) -> bool) -> bool {
    let each = ON_EACH_MODULE_SYMBOL.load(Ordering::Acquire);
    if each == 0 {
        return false;
    }
    let mut walk: EachSymbol<'_> = &mut f;
    // SAFETY: `each` is `module_kallsyms_on_each_symbol` (or its gate),
    // resolved in `init`; `module` is NULL or NUL-terminated; `walk`
    // outlives the call, as `kp_symbols_each` wants.
    unsafe {
        kp_call_module_kallsyms_on_each_symbol(
            each,
            module.map_or(core::ptr::null(), |m| m.as_char_ptr()),
            (&mut walk as *mut EachSymbol<'_>).cast(),
        )
    };
    true
}

/// How many symbols are named `name`: in vmlinux and every loaded module
/// (`module` `None`), or in the loaded module `module` only; as the
/// kernel's `number_of_same_symbols()` counts them for probe events.
/// Process context.
pub(crate) fn count_named(module: Option<&CStr>, name: &CStr) -> usize {
    let mut n = 0usize;
    if module.is_none() {
        for_each_match(name, |_| n += 1);
    }
    let want = name.as_bytes();
    each_module_symbol(module, |s, _| {
        n += usize::from(s == want);
        true
    });
    n
}

/// Whether module `module` is loaded (has a symbol); `true` when that
/// cannot be told, so that nothing waits for a module that is there.
/// Process context.
pub(crate) fn module_loaded(module: &CStr) -> bool {
    let mut any = false;
    !each_module_symbol(Some(module), |_, _| {
        any = true;
        false
    }) || any
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
    if f == 0 {
        return None;
    }
    // SAFETY: `f` is `ftrace_graph_ret_addr` (or its gate), resolved with
    // `return_to_handler` in `init`; it only reads the current task's
    // shadow stack.
    let real = unsafe { kp_call_ftrace_graph_ret_addr(f, ret, retp as *mut c_ulong) } as usize;
    (real != ret).then_some(real)
}
