// SPDX-License-Identifier: GPL-2.0

//! The engine's C ABI: `struct kp_kprobe` and the exported functions.
//!
//! C header: [`include/kp_kprobes.h`](../include/kp_kprobes.h). This file is the
//! Rust mirror of that header; client Rust modules include it too (through the
//! API file), so engine and clients share one definition.

use kernel::bindings::pt_regs;
use kernel::ffi::{c_char, c_int, c_uint, c_ulong, c_void};

/// `kp_pre_handler_t`: non-zero return means "I changed the registers, skip the
/// probed instruction".
pub type PreHandler = unsafe extern "C" fn(*mut KpKprobe, *mut pt_regs) -> c_int;
/// `kp_post_handler_t`.
pub type PostHandler = unsafe extern "C" fn(*mut KpKprobe, *mut pt_regs, c_ulong);
/// `kp_fault_handler_t`: the displaced copy of the probed instruction raised
/// trap `trapnr`; non-zero return means "handled, I fixed the registers".
pub type FaultHandler = unsafe extern "C" fn(*mut KpKprobe, *mut pt_regs, c_int) -> c_int;

/// `KP_FLAG_GONE`: the probed text went away.
pub const KP_FLAG_GONE: c_uint = 1;
/// `KP_FLAG_DISABLED`: registered but not armed.
pub const KP_FLAG_DISABLED: c_uint = 2;
/// `KP_FLAG_FTRACE` (out): served by ftrace at a function's call site.
pub const KP_FLAG_FTRACE: c_uint = 4;
/// `KP_FLAG_OPTIMIZED` (out): the breakpoint is replaced by a jump to a
/// detour (x86_64 jump optimization); set and cleared by the engine.
pub const KP_FLAG_OPTIMIZED: c_uint = 8;

/// `KP_FLAG_REGISTERED` (out): registered (set and cleared by the engine).
pub const KP_FLAG_REGISTERED: c_uint = 16;
/// `KP_FLAG_FULL_REGS` (in): the handlers need every register, where an
/// entry served by ftrace would give only some (arm64: a breakpoint past
/// the patchable entry instead).
pub const KP_FLAG_FULL_REGS: c_uint = 32;

/// Words of engine-private state in `struct kp_kprobe`.
pub const KP_PRIVATE_WORDS: usize = 3;

/// `struct kp_kprobe`, under its C name: kCFI's type hash of a handler
/// (`int (struct kp_kprobe *, struct pt_regs *)`) names the structs its
/// pointers point to, and rustc names a `#[repr(C)]` struct by its own
/// name there (for cross-language CFI), so the Rust and C handler types
/// agree only when the names do. The same for the structs below.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct kp_kprobe {
    /// In: the address to probe, or null to use `symbol_name` + `offset`.
    /// Out: the address actually probed.
    pub addr: *mut c_void,
    /// `"symbol"` or `"module:symbol"`, or null when `addr` is given.
    pub symbol_name: *const c_char,
    /// Runs before the probed instruction.
    pub pre_handler: Option<PreHandler>,
    /// Runs after the probed instruction.
    pub post_handler: Option<PostHandler>,
    /// Runs when the probed instruction faults while executing out of line.
    pub fault_handler: Option<FaultHandler>,
    /// Hits whose handlers did not run.
    pub nmissed: c_ulong,
    /// Byte offset from `symbol_name`.
    pub offset: c_uint,
    /// `KP_FLAG_*`.
    pub flags: c_uint,
    /// Engine-private: zero before registration and after unregistration.
    /// The engine keeps its record of the probe here, as the kernel keeps
    /// its own in `struct kprobe`: a probe alone at its address costs the
    /// engine one small record for the address and nothing else.
    pub kp_private: [c_ulong; KP_PRIVATE_WORDS],
}

/// `struct kp_kprobe`.
pub type KpKprobe = kp_kprobe;

/// `struct kp_kretprobe_instance` (the part clients see; `data` follows).
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct kp_kretprobe_instance {
    /// The kretprobe.
    pub rp: *mut KpKretprobe,
    /// The real return address of this call.
    pub ret_addr: c_ulong,
    /// The stack pointer at the function's entry.
    pub fp: c_ulong,
}

impl KpKretprobeInstance {
    /// The client's per-instance data (`data_size` bytes, 8-byte aligned).
    pub fn data(&mut self) -> *mut u8 {
        // SAFETY: `data` directly follows the header (flexible array member).
        unsafe { (self as *mut Self).add(1).cast() }
    }
}

/// `struct kp_kretprobe_instance`.
pub type KpKretprobeInstance = kp_kretprobe_instance;

/// `kp_kretprobe_handler_t`.
pub type KretHandler = unsafe extern "C" fn(*mut KpKretprobeInstance, *mut pt_regs) -> c_int;

/// `struct kp_kretprobe`.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct kp_kretprobe {
    /// Where to probe (a function entry); its handlers belong to the engine.
    pub kp: KpKprobe,
    /// Runs when the function returns.
    pub handler: Option<KretHandler>,
    /// Runs at the entry; non-zero means "do not track this call".
    pub entry_handler: Option<KretHandler>,
    /// Calls tracked at once; <= 0 for the default.
    pub maxactive: c_int,
    /// Calls not tracked because every instance was in use.
    pub nmissed: c_int,
    /// Bytes of per-instance data.
    pub data_size: usize,
    /// Engine-private; null before registration.
    pub kp_private: *mut c_void,
}

/// `struct kp_kretprobe`.
pub type KpKretprobe = kp_kretprobe;

impl KpKretprobe {
    /// An empty return probe description.
    pub const fn new() -> Self {
        Self {
            kp: KpKprobe::new(),
            handler: None,
            entry_handler: None,
            maxactive: 0,
            nmissed: 0,
            data_size: 0,
            kp_private: core::ptr::null_mut(),
        }
    }
}

impl Default for KpKretprobe {
    fn default() -> Self {
        Self::new()
    }
}

impl KpKprobe {
    /// An empty probe description, to be filled in before registration.
    pub const fn new() -> Self {
        Self {
            addr: core::ptr::null_mut(),
            symbol_name: core::ptr::null(),
            offset: 0,
            pre_handler: None,
            post_handler: None,
            fault_handler: None,
            flags: 0,
            nmissed: 0,
            kp_private: [0; KP_PRIVATE_WORDS],
        }
    }

    /// Whether the engine holds this probe (`KP_FLAG_REGISTERED`).
    pub fn is_registered(&self) -> bool {
        self.flags & KP_FLAG_REGISTERED != 0
    }
}

impl Default for KpKprobe {
    fn default() -> Self {
        Self::new()
    }
}

/// `KP_INSN_CALL`: the instruction is a call.
pub const KP_INSN_CALL: c_uint = 1;
/// `KP_INSN_BRANCH`: a direct (relative) branch or call; `target` is valid.
pub const KP_INSN_BRANCH: c_uint = 2;

/// `struct kp_insn`: one instruction, as `kp_decode_insn()` describes it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KpInsn {
    /// Its address.
    pub addr: c_ulong,
    /// Its length in bytes.
    pub len: c_uint,
    /// `KP_INSN_*`.
    pub flags: c_uint,
    /// Where a direct branch or call goes (with `KP_INSN_BRANCH`).
    pub target: c_ulong,
}

/// `struct kp_stats`: a snapshot of the engine's state.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct KpStats {
    /// Registered kprobes (a kretprobe's entry probe too).
    pub probes: c_ulong,
    /// Probed addresses.
    pub points: c_ulong,
    /// Out-of-line slots and jump-optimization detours in use (not those
    /// waiting for every task to leave them).
    pub slots: c_ulong,
    /// Return instances allocated (those of unregistered kretprobes with
    /// calls in flight too).
    pub kretprobe_instances: c_ulong,
    /// Defined probe events.
    pub events: c_ulong,
    /// Out-of-line copies ended by a second trap since the engine loaded.
    pub step_traps: u64,
    /// Function entries whose ftrace site calls the engine directly
    /// (x86_64), parked ones too.
    pub ftrace_direct: c_ulong,
    /// Of those, sites no probe uses any more, kept for a while
    /// (`kp_ftrace_release()`).
    pub ftrace_parked: c_ulong,
    /// Calls of kretprobe'd functions whose return is hijacked right now.
    pub kretprobe_inflight: c_ulong,
    /// Probe hits in progress over every CPU (0 on a quiet machine).
    pub hits_in_progress: c_ulong,
    /// Oopses inside a probe hit after which the engine reset that CPU's
    /// hit state, since the engine loaded.
    pub oops_resets: c_ulong,
    /// Kretprobe entries that found the return already hijacked by the
    /// function graph tracer (the real caller taken from its shadow stack),
    /// since the engine loaded.
    pub kretprobe_via_graph: c_ulong,
    /// Misses by cause since the engine loaded (the probes' and kretprobes'
    /// own `nmissed` count them too): hits on a CPU already handling one
    /// (no handler ran);
    pub missed_reentry: c_ulong,
    /// kretprobe entries that found every instance taken (`maxactive`);
    pub missed_kret_no_instance: c_ulong,
    /// kretprobe entries while the engine was being unloaded;
    pub missed_kret_unloading: c_ulong,
    /// returns whose handler did not run (this CPU's hit levels all taken).
    pub missed_kret_nested: c_ulong,
    /// Hijacked returns given back because their task exited inside the
    /// function (not missed: the function never returned), since load.
    pub kretprobe_task_exits: c_ulong,
    /// Returns served through the function graph tracer's shadow stack (no
    /// instance used), since the engine loaded.
    pub kretprobe_shadow_returns: c_ulong,
    /// Kretprobes whose returns the shadow stack serves now.
    pub kretprobe_shadow_probes: c_ulong,
    /// The jump optimizer's waits for every task to leave the bytes its
    /// jumps cover (those with jumps to write), begun since the engine
    /// loaded (a jump is written only after a wait that began once it was
    /// prepared);
    pub opt_waits: c_ulong,
    /// and ended.
    pub opt_waits_done: c_ulong,
}
