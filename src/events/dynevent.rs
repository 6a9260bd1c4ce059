// SPDX-License-Identifier: GPL-2.0

//! `<tracefs>/dynamic_events` for the engine's events, where the kernel
//! has that file but no kprobe events of its own (the C side, and what it
//! resolves: `src/dynevent.c`). A `p:`/`r:` line written there is run as
//! on `kprobe_events`; a `-:`/`!p:` line, or `echo >`, reaches the sites
//! through the kernel's `dyn_event_release()` and the callbacks here; the
//! listing shows each site's line among the other dynamic events.
//!
//! The trace core calls `show`, `is_busy`, `free` and `match` with
//! `event_mutex` held, the outer lock of the events ([`Locked`]), so the
//! sites they reach cannot change meanwhile; `create` runs under the
//! kernel's `dyn_event_ops_mutex`, and takes the events' locks after it,
//! as the kernel's kprobe events do.

use super::*;
use crate::event_parse as ep;
use kernel::bindings;
use kernel::ffi::{c_char, c_int};
use kernel::str::CStr;

extern "C" {
    fn kp_dyn_enabled() -> bool;
    fn kp_dyn_new(site: *mut c_void) -> *mut c_void;
    fn kp_dyn_add(d: *mut c_void);
    fn kp_dyn_free(d: *mut c_void);
    fn kp_dyn_init(register_fn: usize, ops_mutex: usize, list: usize) -> c_int;
    fn kp_dyn_exit();
}

/// Registers the engine's operations with `dynamic_events`, where this
/// kernel has the file and no kprobe events: `dyn_event_register()`,
/// `dyn_event_ops_mutex` and `dyn_event_list` (kernel/trace/, none
/// exported) are resolved by name. Without them (or without
/// `event_mutex`) `dynamic_events` keeps refusing `p:` lines, as before
/// the engine loaded (`-EINVAL`); `kprobe_events` works as ever.
///
/// The last step of the engine's load: from then on lines come in from
/// outside, and the rest of the engine must be ready for them.
pub(crate) fn init() {
    if !cfg!(CONFIG_DYNAMIC_EVENTS) || cfg!(CONFIG_KPROBE_EVENTS) {
        return;
    }
    let have_event_mutex = crate::symbols::lookup_name(kernel::c_str!("event_mutex")).is_some();
    use crate::symbols::{lookup_function, lookup_name};
    let found = (
        lookup_function(kernel::c_str!("dyn_event_register")),
        lookup_name(kernel::c_str!("dyn_event_ops_mutex")),
        lookup_name(kernel::c_str!("dyn_event_list")),
    );
    let (Some(reg), Some(mutex), Some(list), true) = (found.0, found.1, found.2, have_event_mutex)
    else {
        pr_warn!("dynamic_events: the kernel's dynamic event list not found: probe lines are refused there\n");
        return;
    };
    // SAFETY: the kernel's function (or its gate), mutex and list head,
    // all living forever; called once, at load.
    let r = unsafe { kp_dyn_init(reg, mutex, list) };
    if r == -(bindings::ENODEV as c_int) {
        pr_warn!("dynamic_events: built without the kernel's kernel/trace/trace_dynevent.h: probe lines are refused there\n");
    } else if r != 0 {
        pr_warn!("dynamic_events: registration failed ({})\n", r);
    }
}

/// Takes the operations off the kernel's list (the first step of the
/// engine's unload: no new event comes through `dynamic_events`
/// afterwards). Idempotent.
pub(crate) fn exit() {
    // SAFETY: process context; idempotent.
    unsafe { kp_dyn_exit() };
}

/// A new site's `dynamic_events` entry (null where the engine does not
/// serve the file); `Err` when out of memory.
pub(super) fn entry_for(site: &Site) -> core::result::Result<*mut c_void, Error> {
    // SAFETY: reads a flag set at load.
    if !unsafe { kp_dyn_enabled() } {
        return Ok(core::ptr::null_mut());
    }
    let p = core::ptr::from_ref(site).cast_mut().cast::<c_void>();
    // SAFETY: `site` is boxed: the entry's pointer to it stays valid for
    // as long as the site, which frees the entry when dropped.
    let d = unsafe { kp_dyn_new(p) };
    if d.is_null() {
        Err(ENOMEM)
    } else {
        Ok(d)
    }
}

/// Lists a site that is now on its event, after the dynamic events
/// defined before it. The caller holds [`Locked`].
pub(super) fn list(site: &Site) {
    if !site.dynev.is_null() {
        // SAFETY: the site's own entry, under `event_mutex`.
        unsafe { kp_dyn_add(site.dynev) };
    }
}

/// Unlists and frees a site's entry (`Site::drop`, under [`Locked`]).
pub(super) fn drop_entry(d: *mut c_void) {
    // SAFETY: null or the site's own entry, freed once (at its drop);
    // under `event_mutex` (the events are dropped only under `Locked`).
    unsafe { kp_dyn_free(d) };
}

/// `create`: a line written to `dynamic_events`. `-ECANCELED` for a line
/// that is not a kprobe definition (another kind of dynamic event; the
/// kernel's kprobe events' own test: a `p`/`r` command and a location that
/// is no uprobe's `PATH:OFFSET`), else as `kprobe_events` takes it.
///
/// # Safety
///
/// `raw` is NUL-terminated.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_ev_dyn_create(raw: *const c_char) -> c_int {
    // SAFETY: per the function's contract.
    let bytes = unsafe { CStr::from_char_ptr(raw) }.as_bytes();
    let mut words = bytes.split(|&c| ep::is_space(c)).filter(|w| !w.is_empty());
    let Some(cmd) = words.next() else {
        // argv_split() found no word: the kernel's trace_probe_create()
        // takes that as done.
        return 0;
    };
    let canceled = -(bindings::ECANCELED as c_int);
    if !matches!(cmd.first(), Some(b'p' | b'r')) {
        return canceled;
    }
    match words.next() {
        None => return canceled,
        Some(loc) if loc.contains(&b'/') && loc.contains(&b':') => return canceled,
        Some(_) => {}
    }
    if let Err(e) = admin() {
        return e.to_errno();
    }
    // SAFETY: NUL-terminated per the contract.
    unsafe { kp_event_command(raw) }
}

/// The site whose entry the trace core passed.
///
/// # Safety
///
/// `site` is a listed site's; `event_mutex` is held.
unsafe fn site<'a>(site: *mut c_void) -> &'a Site {
    // SAFETY: a listed site lives until it is unlisted, which takes
    // `event_mutex`; nothing changes it without that mutex (`Locked`).
    unsafe { &*site.cast::<Site>() }
}

/// `show`: the site's `kprobe_events` line (its length in `len`).
///
/// # Safety
///
/// As [`site`]; `len` is writable.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_ev_dyn_def(s: *mut c_void, len: *mut usize) -> *const c_char {
    // SAFETY: per the function's contract.
    let s = unsafe { site(s) };
    // SAFETY: as above.
    unsafe { *len = s.def.len() };
    s.def.as_ptr().cast()
}

/// `is_busy`: the site's event is enabled.
///
/// # Safety
///
/// As [`site`].
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_ev_dyn_busy(s: *mut c_void) -> bool {
    // SAFETY: per the function's contract; a listed site's event is
    // registered with the trace core.
    unsafe { kp_tev_enabled((*site(s).ev).tev) }
}

/// `match`: `-:[SYSTEM/]EVENT [WORDS]` (or `!p:...`) names the site, as
/// the kernel's `trace_kprobe_match()` decides (an empty event: every
/// event of the group).
///
/// # Safety
///
/// As [`site`]; `system` is null or NUL-terminated, `event` and the
/// `argc` strings of `argv` are NUL-terminated.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_ev_dyn_match(
    system: *const c_char,
    event: *const c_char,
    argc: c_int,
    argv: *const *const c_char,
    s: *mut c_void,
) -> bool {
    // SAFETY: per the function's contract.
    let (s, event) = unsafe { (site(s), CStr::from_char_ptr(event).as_bytes()) };
    // SAFETY: a listed site's event lives at least as long.
    let ev = unsafe { &*s.ev };
    if !event.is_empty() && event != ev.name_str().as_bytes() {
        return false;
    }
    if !system.is_null() {
        // SAFETY: NUL-terminated per the contract.
        let system = unsafe { CStr::from_char_ptr(system) }.as_bytes();
        if system != ev.group_str().as_bytes() {
            return false;
        }
    }
    let n = usize::try_from(argc).unwrap_or(0);
    let words = (0..n).map(|i| {
        // SAFETY: `argv` has `argc` NUL-terminated strings.
        unsafe { CStr::from_char_ptr(*argv.add(i)) }.as_bytes()
    });
    words_match(s.body(), words)
}

/// `free`: removes the site (its event with it if it was the last one:
/// `-EBUSY` while that is enabled), as the kernel's
/// `unregister_trace_kprobe()`. The trace core resets the buffers after.
///
/// # Safety
///
/// As [`site`].
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_ev_dyn_free(s: *mut c_void) -> c_int {
    // The engine's rule for its events, whatever the file's mode: the
    // administrator only (the kernel then stops its removal loop here).
    if let Err(e) = admin() {
        return e.to_errno();
    }
    let target = s.cast_const().cast::<Site>();
    let mut g = Locked::under_event_mutex();
    let found = g.events().iter().enumerate().find_map(|(i, e)| {
        e.sites
            .iter()
            .position(|x| core::ptr::eq(&**x, target))
            .map(|k| (i, k))
    });
    let Some((i, k)) = found else {
        return -(bindings::ENOENT as c_int);
    };
    match remove_site(&mut g, i, k) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}
