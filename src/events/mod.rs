// SPDX-License-Identifier: GPL-2.0

//! kprobe_events: probes defined by text, recorded as real trace events.
//!
//! `/sys/kernel/debug/kp/kprobe_events` takes the lines of
//! `Documentation/trace/kprobetrace.rst` (grammar in `event_parse.rs`): `>`
//! replaces every event (refused with `-EBUSY` while one is enabled), `>>`
//! appends. Each `p`/`r` line becomes an engine kprobe or kretprobe plus a
//! trace event registered with the kernel's trace event core
//! (`src/events.c`), so `/sys/kernel/tracing/events/<GRP>/<EVENT>/` has
//! `enable`, `filter`, `format`, `id`, and records land in the trace buffer:
//! `<event>: (sym+off) name=value ...`. `kprobe_profile` shows hits and
//! misses per event; `error_log` explains refused lines in the kernel's
//! format.
//!
//! Records follow the kernel's kprobe events: a `trace_entry`, the probe
//! address (return probes: function and return address), then the arguments
//! packed in order; strings as `__data_loc char[]` with their bytes after
//! the fixed part (at most [`MAX_STRING`] bytes each here). A failed memory
//! read stores 0, or an empty string printed `(fault)`, and never faults.
//!
//! Layout: `control.rs` (the files), `sites.rs` (appending and removing
//! sites), `compile.rs` (line to event), `modules.rs` (sites on modules
//! not loaded yet), `fetch.rs` (fetch programs at a hit), `record.rs` (the
//! trace event's callbacks), `log.rs` (`error_log`), `dynevent.rs` (the
//! kernel's `dynamic_events`).

use crate::abi::KpKretprobe;
use crate::event_parse::{self as ep, Op, Type};
use crate::lock::{EventsGuard, LockedBy};
use kernel::bindings::pt_regs;
use kernel::ffi::{c_char, c_int, c_void};
use kernel::prelude::*;

pub(crate) mod btf;
mod compile;
mod control;
pub(crate) mod dynevent;
mod fetch;
mod log;
mod modules;
mod record;
mod sites;

use compile::*;
pub(crate) use control::*;
pub use control::{kp_event_command, kp_event_id};
use fetch::*;
pub(crate) use log::*;
pub(crate) use modules::module_coming;
use modules::*;
use record::*;
use sites::*;

/// Longest string argument stored, NUL included (the kernel's
/// `MAX_STRING_SIZE`, `PATH_MAX`). A record must still fit the trace
/// buffer's page: a longer one is dropped, as the kernel's are.
pub(crate) const MAX_STRING: usize = 4096;

/// Error log entries kept.
pub(super) const ERROR_LOG_LEN: usize = 8;

/// Longest command kept in the error log.
pub(super) const ERROR_CMD_LEN: usize = 256;

/// This architecture's `%REG` names.
pub(super) const REGS: &ep::RegTable = crate::arch::event_regs::EVENT_REGS;

extern "C" {
    fn kp_events_set_event_mutex(m: *mut c_void);
    fn kp_events_set_ftrace_events(l: *mut c_void);
    #[cfg(CONFIG_BPF_EVENTS)]
    fn kp_events_set_trace_call_bpf(f: *mut c_void);
    fn kp_tev_create(
        owner: *mut c_void,
        group: *const c_char,
        name: *const c_char,
        print_fmt: *mut c_char,
        is_return: bool,
        fixed_args: isize,
    ) -> *mut c_void;
    fn kp_tev_register(t: *mut c_void) -> c_int;
    fn kp_tev_unregister(t: *mut c_void) -> c_int;
    fn kp_tev_free(t: *mut c_void);
    fn kp_tev_enabled(t: *mut c_void) -> bool;
    fn kp_tev_id(t: *mut c_void) -> c_int;
    fn kp_tev_record(
        t: *mut c_void,
        site: *const c_void,
        regs: *mut pt_regs,
        ip: usize,
        ret_ip: usize,
        edata: *const c_void,
    );
    fn trace_define_field(
        call: *mut c_void,
        ty: *const c_char,
        name: *const c_char,
        offset: c_int,
        size: c_int,
        is_signed: c_int,
        filter_type: c_int,
    ) -> c_int;
    fn trace_seq_putmem(s: *mut c_void, mem: *const c_void, len: core::ffi::c_uint);
    fn snprintf(buf: *mut c_char, size: usize, fmt: *const c_char, ...) -> c_int;
}

extern "C" {
    /// `sizeof` the record heads of `src/events.c` (entry, return).
    static kp_ev_head_sizes: [usize; 2];
}

/// Bytes before the arguments: `trace_entry` + ip, or + func + ret_ip
/// (the C structs' sizes).
pub(super) fn head_size(is_return: bool) -> usize {
    // SAFETY: a constant array of the C glue.
    unsafe { kp_ev_head_sizes[usize::from(is_return)] }
}

/// One operation of a compiled fetch program: the parser's, with every
/// `@SYM` resolved to an [`Op::Addr`] (so nothing borrows the line).
pub(super) type COp = Op<'static>;

/// A compiled fetch argument of one site.
pub(super) struct Arg {
    pub(super) ops: [COp; ep::MAX_OPS],
    /// An immediate string's bytes (`\"TEXT"`; the op is
    /// `Op::ImmStr("")`), else empty.
    pub(super) imm: KVec<u8>,
    pub(super) nops: usize,
    pub(super) ty: Type,
    /// Elements of an array type (`TYPE[N]`), 0 for one value.
    pub(super) count: u8,
    /// Offset of the field after the head.
    pub(super) offset: usize,
    /// Bytes in the fixed part (4 per string: a `__data_loc`).
    pub(super) size: usize,
    /// The `pt_regs` word the value is, when the program is one register
    /// read into a plain field (no bitfield, no string): the hit stores it
    /// straight, without running the program (most arguments; each
    /// program run cost about 100 ns under TCG, its indirect branches).
    pub(super) reg: Option<u16>,
}

/// A field of an event's records: the same at every site of the event
/// (an appended site must have the same names and types).
pub(super) struct Field {
    /// NUL-terminated.
    pub(super) name: KVec<u8>,
    /// The C type `format` shows, NUL-terminated: the kernel's (`u8` for
    /// `char`, `u64` for `symbol`), `[N]` after an array's.
    pub(super) c_type: KVec<u8>,
    pub(super) ty: Type,
    /// Elements of an array type, 0 for one value.
    pub(super) count: u8,
    /// Offset after the head.
    pub(super) offset: usize,
    /// Bytes in the fixed part.
    pub(super) size: usize,
}

/// One probed place of an event, one line of `kprobe_events` (the kernel's
/// `trace_kprobe`): a second `p:GRP/EVENT` line appends one (perf does,
/// for each inlined copy of a function). `rp` comes first so that the
/// engine's probe pointer is the site's (`#[repr(C)]`); a plain probe uses
/// `rp.kp`.
#[repr(C)]
pub(crate) struct Site {
    pub(super) rp: KpKretprobe,
    /// The event (boxed, outlives its sites).
    pub(super) ev: *const Event,
    /// The canonical definition line (no NUL).
    pub(super) def: KVec<u8>,
    /// This site's fetch programs, laid out as the event's fields.
    pub(super) args: KVec<Arg>,
    /// A return site's `$argN` numbers (0-based, distinct), saved at the
    /// function's entry in this order, a word each (the kretprobe's data).
    pub(super) entry_args: KVec<u32>,
    pub(super) hits: crate::percpu::Counter,
    /// Definition order across every event (the listing's).
    pub(super) seq: u64,
    /// `MODULE` of a `MODULE:SYMBOL` location (no NUL; may be empty).
    pub(super) module: Option<KVec<u8>>,
    /// The probe is registered with the engine: not while its module is
    /// not loaded (the site waits for it, as the kernel's do). Changed
    /// under [`Locked`].
    pub(super) registered: core::sync::atomic::AtomicBool,
    /// The site's entry on the kernel's `dyn_event_list` (`src/dynevent.c`),
    /// where the engine serves `dynamic_events`; else null. Listed once
    /// the site is on its event, unlisted and freed with the site.
    pub(super) dynev: *mut c_void,
}

impl Drop for Site {
    fn drop(&mut self) {
        dynevent::drop_entry(self.dynev);
    }
}

impl Site {
    fn is_registered(&self) -> bool {
        self.registered.load(core::sync::atomic::Ordering::Relaxed)
    }

    fn set_registered(&self, on: bool) {
        self.registered
            .store(on, core::sync::atomic::Ordering::Relaxed)
    }

    /// The definition after the `p:GRP/EVENT` word: location and
    /// arguments, as the kernel compares and matches them.
    fn body(&self) -> &[u8] {
        match self.def.iter().position(|&c| c == b' ') {
            Some(i) => &self.def[i + 1..],
            None => &[],
        }
    }

    fn nmissed(&self, is_return: bool) -> usize {
        if is_return {
            self.rp.nmissed.max(0) as usize
        } else {
            self.rp.kp.nmissed
        }
    }
}

/// One event: a trace event and the sites that record it.
pub(crate) struct Event {
    pub(super) is_return: bool,
    pub(super) tev: *mut c_void,
    /// NUL-terminated group and event names and print format.
    pub(super) group: KVec<u8>,
    pub(super) name: KVec<u8>,
    pub(super) print_fmt: KVec<u8>,
    pub(super) fields: KVec<Field>,
    /// Size of the arguments' fixed part.
    pub(super) fixed: usize,
    /// Changed under [`Locked`] (`event_mutex` and the events mutex):
    /// arming at enable (`kp_ev_arm`) and `dynamic_events` read them under
    /// `event_mutex` alone.
    pub(super) sites: KVec<KBox<Site>>,
}

impl Event {
    fn name_str(&self) -> &str {
        text(&self.name)
    }

    fn group_str(&self) -> &str {
        text(&self.group)
    }
}

extern "C" {
    fn kp_events_event_lock();
    fn kp_events_event_unlock();
    fn kp_events_event_assert_held();
}

/// Holds the trace core's `event_mutex`: the outer lock of the events
/// (every change to an event or its sites holds it, as the trace core's
/// callbacks into them do: enabling (`kp_ev_arm`), `dynamic_events`).
struct EventMutex {
    /// Taken here (released at drop), not held by a caller.
    taken: bool,
}

impl EventMutex {
    fn lock() -> Self {
        // SAFETY: a mutex of the kernel's (or nothing, where it was not
        // found: then no event exists). Process context.
        unsafe { kp_events_event_lock() };
        EventMutex { taken: true }
    }

    /// The trace core holds it for this task (lockdep checks).
    fn held() -> Self {
        // SAFETY: an assertion.
        unsafe { kp_events_event_assert_held() };
        EventMutex { taken: false }
    }
}

impl Drop for EventMutex {
    fn drop(&mut self) {
        if self.taken {
            // SAFETY: taken in `lock`.
            unsafe { kp_events_event_unlock() };
        }
    }
}

/// The events, in definition order.
pub(super) static EVENTS: LockedBy<KVec<KBox<Event>>, EventsGuard> = LockedBy::new(KVec::new());

/// Holds `event_mutex`, then the events mutex (released in the reverse
/// order: fields drop in declaration order).
pub(super) struct Locked {
    g: EventsGuard,
    _em: EventMutex,
}

impl Locked {
    fn lock() -> Self {
        let em = EventMutex::lock();
        Locked {
            g: EventsGuard::lock(),
            _em: em,
        }
    }

    /// From a callback the trace core makes with `event_mutex` held.
    fn under_event_mutex() -> Self {
        let em = EventMutex::held();
        Locked {
            g: EventsGuard::lock(),
            _em: em,
        }
    }

    fn events(&mut self) -> &mut KVec<KBox<Event>> {
        EVENTS.get_mut(&mut self.g)
    }

    fn log(&mut self) -> &mut ErrorLog {
        ERROR_LOG.get_mut(&mut self.g)
    }
}

/// The group of an event defined without one: the kernel's `kprobes` where
/// the kernel has no kprobe events (the engine's files are the standard
/// ones there), else `kprobes_rs`, beside the kernel's.
pub(crate) fn default_group() -> &'static str {
    if cfg!(CONFIG_KPROBE_EVENTS) {
        ep::DEFAULT_GROUP
    } else {
        ep::KERNEL_DEFAULT_GROUP
    }
}

/// Defined events.
pub(crate) fn count() -> usize {
    Locked::lock().events().len()
}

/// `void tracing_reset_all_online_cpus(void)` (kernel/trace/trace.c, not
/// exported), resolved at init; 0 if missing (then old records stay in the
/// buffer after a removal, and are still read within their bounds).
pub(super) static RESET_BUFFERS: core::sync::atomic::AtomicUsize =
    core::sync::atomic::AtomicUsize::new(0);

extern "C" {
    /// src/kfuncs.c.
    fn kp_call_tracing_reset_all_online_cpus(f: usize);
}

/// After events were removed: resets the trace buffers that recorded a
/// removed event (the trace core marks them `clear_trace` when an event
/// that was ever enabled is removed), as the kernel's `dyn_event_release()`
/// does, so that a new event reusing a removed one's type id never has the
/// old records read with its own layout.
pub(super) fn reset_buffers() {
    let f = RESET_BUFFERS.load(core::sync::atomic::Ordering::Acquire);
    if f != 0 {
        // SAFETY: `f` is `tracing_reset_all_online_cpus` (or its gate),
        // resolved in `init`; process context.
        unsafe { kp_call_tracing_reset_all_online_cpus(f) };
    }
}

/// Finds the trace event core's `event_mutex` (not exported) for the C glue
/// (without it probe events are refused, `-ENODEV`; probes still work) and
/// [`RESET_BUFFERS`].
pub(crate) fn init() {
    RESET_BUFFERS.store(
        crate::symbols::lookup_function(kernel::c_str!("tracing_reset_all_online_cpus"))
            .unwrap_or(0),
        core::sync::atomic::Ordering::Release,
    );
    // BPF programs attached to our events (`PERF_EVENT_IOC_SET_BPF`) run
    // through it, as on the kernel's kprobe events.
    #[cfg(CONFIG_BPF_EVENTS)]
    match crate::symbols::lookup_function(kernel::c_str!("trace_call_bpf")) {
        // SAFETY: the kernel's `trace_call_bpf` (or its gate), lives
        // forever; the C glue calls it with its declared type.
        Some(f) => unsafe { kp_events_set_trace_call_bpf(f as *mut c_void) },
        None => pr_warn!("trace_call_bpf not found: BPF programs on probe events will not run\n"),
    }
    // Every event call, the kernel's built-in ones too: a name taken by
    // one of those (ftrace/function) is refused as the kernel refuses it.
    match crate::symbols::lookup_name(kernel::c_str!("ftrace_events")) {
        // SAFETY: the kernel's `struct list_head ftrace_events`, lives
        // forever; read under `event_mutex` only.
        Some(l) => unsafe { kp_events_set_ftrace_events(l as *mut c_void) },
        None => pr_warn!("ftrace_events not found: kprobe_events disabled\n"),
    }
    match crate::symbols::lookup_name(kernel::c_str!("event_mutex")) {
        // SAFETY: the kernel's `struct mutex event_mutex`, lives forever.
        Some(m) => unsafe { kp_events_set_event_mutex(m as *mut c_void) },
        None => pr_warn!("event_mutex not found: kprobe_events disabled\n"),
    }
    btf::init();
}

/// Removes every event at engine unload (none can be enabled: enabling one
/// pins the module; and `dynamic_events` brings no new one: `dynevent::exit`
/// ran first).
pub(crate) fn exit() {
    let _ = kp_events_clear();
    // The list is a static: free its buffer (kmemleak found it).
    let mut g = Locked::lock();
    drop(core::mem::take(g.events()));
    drop(g);
    btf::exit();
}
