// SPDX-License-Identifier: GPL-2.0

//! kprobes.ko: a kernel probe engine written in Rust.
//!
//! The engine patches probed instructions with a breakpoint, catches the trap
//! itself, runs the client's handlers with the saved registers, executes the
//! displaced original instruction and resumes. It never calls the kernel's own
//! kprobes, kretprobes, rethook or fprobe code.
//!
//! Layout: arch-independent engine in `src/`, one backend per architecture in
//! `arch/<arch>/` behind the interface documented in `docs/arch-interface.md`.

pub mod abi;
mod blacklist;
// The kernel's BTF, read; pure and host-tested.
#[allow(dead_code, unreachable_pub)]
mod btf;
mod debugfs;
mod entries;
mod errno;
// The kprobe_events grammar, pure and host-tested.
#[allow(dead_code, unreachable_pub)]
mod event_parse;
mod events;
mod ftrace;
mod hit;
mod kretprobe;
// Pure logic shared with the host tests: `pub` there, partly unused here.
#[allow(dead_code, unreachable_pub)]
mod ksym;
mod lock;
mod missed;
mod nokprobe;
mod nokprobe_names;
mod optimize;
mod percpu;
mod plist;
mod query;
mod registry;
mod resolve;
mod slots;
mod stats;
mod symbols;
mod text;

// The architecture backend behind its traits (`src/arch.rs`).
mod arch;

use crate::arch::Traps;
use kernel::prelude::*;

pub use blacklist::{kp_blacklist_range, kp_blacklisted};
pub use events::{kp_event_command, kp_event_id};
pub use ftrace::kp_ftrace_release;
pub use kretprobe::{
    kp_register_kretprobe, kp_register_kretprobes, kp_unregister_kretprobe,
    kp_unregister_kretprobes,
};
pub use optimize::kp_opt_detour_limit;
pub use query::{kp_decode_insn, kp_lookup_symbol};
pub use registry::{
    kp_disable_kprobe, kp_enable_kprobe, kp_register_kprobe, kp_register_kprobes,
    kp_unregister_kprobe, kp_unregister_kprobes,
};
pub use stats::kp_get_stats;
pub use symbols::kp_resolved_call;

module! {
    type: KprobesEngine,
    name: "kprobes",
    author: "kprobes-rs developers",
    description: "Kernel probe engine in Rust (kprobes, without the kernel's kprobes)",
    license: "GPL",
}

/// `sizeof(struct kp_kprobe)` as built, for C clients to check.
#[no_mangle]
pub static kp_kprobe_abi_size: usize = core::mem::size_of::<abi::KpKprobe>();

extern "C" {
    fn kp_helper_register_module_notifier() -> kernel::ffi::c_int;
    fn kp_helper_unregister_module_notifier();
    fn kp_helper_module_name(module: *mut kernel::ffi::c_void) -> *const kernel::ffi::c_char;
}

/// `MODULE_STATE_COMING`.
const MODULE_STATE_COMING: kernel::ffi::c_ulong =
    kernel::bindings::module_state_MODULE_STATE_COMING as _;

/// `MODULE_STATE_GOING`.
const MODULE_STATE_GOING: kernel::ffi::c_ulong =
    kernel::bindings::module_state_MODULE_STATE_GOING as _;

/// Module notifier (C glue in helpers.c): a module's text is going away, or
/// a module is coming (probe events may wait for it).
///
/// # Safety
///
/// Called by the module notifier chain with a live module.
#[no_mangle]
pub(crate) unsafe extern "C" fn kp_module_event(
    event: kernel::ffi::c_ulong,
    module: *mut kernel::ffi::c_void,
) {
    if event == MODULE_STATE_GOING {
        registry::module_going(module, kretprobe::forget_if_kretprobe);
    } else if event == MODULE_STATE_COMING {
        // SAFETY: a live module; its name is NUL-terminated.
        let name = unsafe { kernel::str::CStr::from_char_ptr(kp_helper_module_name(module)) };
        events::module_coming(name.as_bytes());
    }
}

struct KprobesEngine;

impl kernel::Module for KprobesEngine {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        registry::init()?;
        registry::hooks::set(&optimize::HOOKS);
        if let Err(e) = symbols::init().and_then(|()| blacklist::init()) {
            registry::exit();
            return Err(e);
        }
        if let Err(e) = arch::Arch::init() {
            blacklist::exit();
            registry::exit();
            return Err(e);
        }
        // SAFETY: process context; the notifier block is static.
        let r = unsafe { kp_helper_register_module_notifier() };
        if r != 0 {
            arch::Arch::exit();
            blacklist::exit();
            registry::exit();
            return Err(Error::from_errno(r));
        }
        events::init();
        kretprobe::init();
        kretprobe::graph::init();
        hit::init();
        if let Err(e) = debugfs::init() {
            // Everything above is set up: the unload path takes it down.
            drop(KprobesEngine);
            return Err(e);
        }
        // Last: from here on lines come in from outside (`dynamic_events`).
        events::dynevent::init();
        pr_info!("engine loaded ({})\n", arch::NAME);
        Ok(KprobesEngine)
    }
}

impl Drop for KprobesEngine {
    fn drop(&mut self) {
        // First: no event comes in through `dynamic_events` any more.
        events::dynevent::exit();
        debugfs::exit();
        // No optimizer run from here on (probes are unoptimized as they go).
        optimize::exit();
        // Trace events first (none is enabled: an enabled one pins us).
        events::exit();
        registry::remove_all();
        // Parked ftrace sites still call into this module.
        ftrace::exit();
        if kretprobe::reap_all() {
            // Cannot happen: every outstanding return holds a module reference.
            pr_err!("kretprobe returns still outstanding at unload\n");
        }
        kretprobe::exit();
        kretprobe::graph::stop();
        hit::exit();
        registry::exit();
        // SAFETY: registered in init.
        unsafe { kp_helper_unregister_module_notifier() };
        arch::Arch::exit();
        blacklist::exit();
        // A task may still be in the last instructions of a kretprobe
        // trampoline (after dropping its module reference), possibly
        // preempted there: wait until every task has left such code.
        // SAFETY: process context.
        unsafe { kernel::bindings::synchronize_rcu_tasks() };
        // The same for the function graph tracer's callbacks.
        kretprobe::graph::exit();
        pr_info!("engine unloaded\n");
    }
}
