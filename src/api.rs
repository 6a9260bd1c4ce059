// SPDX-License-Identifier: GPL-2.0

//! The engine's API for client Rust modules.
//!
//! A client module includes this one file and links against the functions
//! `kprobes.ko` exports (C header: `include/kp_kprobes.h`, Rust mirror of
//! the ABI: `src/abi.rs`):
//!
//! ```ignore
//! #[path = "/path/to/kprobes-rs/src/api.rs"]
//! mod kp;
//! ```
//!
//! Safe types, no `unsafe` in the client:
//!
//! - [`Kprobe`]: a probe on an instruction; handlers are the methods of a
//!   [`KprobeHandler`] the client implements on its own state.
//!   [`Kprobe::register`] returns a pinned box; dropping it unregisters.
//! - [`EntryProbe`]: the safe replacement of jprobes: a probe at a function's
//!   entry whose handler ([`EntryHandler`]) receives the function's arguments
//!   typed ([`Args`]: tuples of integers, `bool` and raw pointers, register and
//!   stack arguments per the calling convention). Nothing is mirrored or
//!   copied back: the handler sees the values, the function runs unchanged.
//! - [`Kretprobe`]: a return probe with a per-call data type
//!   ([`KretprobeHandler::Data`]) filled at the entry and handed back at the
//!   return.
//! - [`Regs`]: the probed context's registers with named accessors per
//!   architecture, [`Regs::arg`], [`Regs::return_value`] and setters.
//! - [`read_kernel`], [`read_kernel_str`], [`read_user_str`]: memory reads
//!   that never fault, for handlers following pointers.
//! - [`lookup_symbol`], [`Insn`], [`instructions`]: find a function and walk
//!   its instructions (to place an offset probe, for example).
//!
//! The raw C ABI ([`KpKprobe`], [`kp_register_kprobe`], ...) stays available
//! for clients that want it.

// A client uses only part of the API.
#![allow(dead_code, unreachable_pub)]

#[path = "abi.rs"]
pub mod abi;

pub use abi::*;

/// Register accessors for this architecture.
#[cfg(CONFIG_X86_64)]
#[path = "../arch/x86_64/regs.rs"]
pub mod regs;
/// Register accessors for this architecture.
#[cfg(CONFIG_ARM64)]
#[path = "../arch/arm64/regs.rs"]
pub mod regs;

pub use regs::{Location, Regs};

use core::cell::UnsafeCell;
use core::ffi::CStr;
use core::marker::{PhantomData, PhantomPinned};
use core::pin::Pin;
use core::sync::atomic::{AtomicUsize, Ordering};
use kernel::alloc::{flags::GFP_KERNEL, KBox};
use kernel::bindings::{self, pt_regs};
use kernel::error::{to_result, Result};
use kernel::ffi::{c_int, c_ulong};

extern "C" {
    /// Registers `p`; returns 0 or a negative errno.
    pub fn kp_register_kprobe(p: *mut KpKprobe) -> c_int;
    /// Unregisters `p`; on return no CPU runs its handlers any more.
    pub fn kp_unregister_kprobe(p: *mut KpKprobe);
    /// Registers `num` probes, all or nothing.
    pub fn kp_register_kprobes(kps: *mut *mut KpKprobe, num: c_int) -> c_int;
    /// Unregisters `num` probes.
    pub fn kp_unregister_kprobes(kps: *mut *mut KpKprobe, num: c_int);
    /// Stops a probe's handlers without unregistering it.
    pub fn kp_disable_kprobe(p: *mut KpKprobe) -> c_int;
    /// Registers a return probe.
    pub fn kp_register_kretprobe(rp: *mut KpKretprobe) -> c_int;
    /// Unregisters a return probe.
    pub fn kp_unregister_kretprobe(rp: *mut KpKretprobe);
    /// Why `addr` cannot be probed, or null.
    pub fn kp_blacklisted(addr: usize) -> *const core::ffi::c_char;
    /// `kp_blacklist_range()`: the `idx`-th refused range and its reason,
    /// NULL past the last.
    pub fn kp_blacklist_range(
        idx: usize,
        start: *mut usize,
        end: *mut usize,
    ) -> *const core::ffi::c_char;
    /// Re-enables a disabled probe.
    pub fn kp_enable_kprobe(p: *mut KpKprobe) -> c_int;
    /// The address of a symbol (0 if unknown), and its size.
    pub fn kp_lookup_symbol(name: *const kernel::ffi::c_char, size: *mut c_ulong) -> c_ulong;
    /// Describes the instruction at `addr`.
    pub fn kp_decode_insn(addr: c_ulong, out: *mut KpInsn) -> c_int;
    /// Runs one `kprobe_events` line.
    pub fn kp_event_command(line: *const kernel::ffi::c_char) -> c_int;
    /// The trace event id of a probe event.
    pub fn kp_event_id(
        group: *const kernel::ffi::c_char,
        event: *const kernel::ffi::c_char,
    ) -> c_int;
    /// A snapshot of the engine's state.
    pub fn kp_get_stats(out: *mut KpStats) -> c_int;
    /// Takes down the parked direct ftrace sites.
    pub fn kp_ftrace_release() -> c_int;
}

/// A snapshot of the engine's state: probes, probed addresses, slots,
/// return instances, events, second traps taken. Process context.
pub fn stats() -> KpStats {
    let mut s = KpStats::default();
    // SAFETY: `s` is a valid `struct kp_stats`; the call cannot fail with it.
    unsafe { kp_get_stats(&mut s) };
    s
}

/// Takes down now every parked direct ftrace site (x86_64: a function entry
/// whose last probe went keeps calling the engine for about two seconds;
/// meanwhile its ftrace site is not restored and a BPF trampoline cannot
/// attach there). Returns how many were released. Process context; sleeps.
pub fn ftrace_release() -> usize {
    // SAFETY: process context.
    unsafe { kp_ftrace_release() as usize }
}

/// Runs one `kprobe_events` line (`p:...`, `r:...`, `-:...`), as writing it
/// to `/sys/kernel/debug/kp/kprobe_events` with `>>` would. The reason for a
/// refusal is in `error_log`.
pub fn event_command(line: &CStr) -> Result {
    // SAFETY: NUL-terminated.
    to_result(unsafe { kp_event_command(line.as_ptr().cast()) })
}

/// The trace event id of a probe event (`None` group: the default group),
/// for `PERF_TYPE_TRACEPOINT` counters.
pub fn event_id(group: Option<&CStr>, event: &CStr) -> Result<u32> {
    let g = group.map_or(core::ptr::null(), |g| g.as_ptr().cast());
    // SAFETY: NUL-terminated or null.
    let r = unsafe { kp_event_id(g, event.as_ptr().cast()) };
    to_result(r.min(0))?;
    Ok(r as u32)
}

/// Where to probe.
#[derive(Clone, Copy)]
pub enum Target<'a> {
    /// A function's entry: `"symbol"` or `"module:symbol"`.
    Symbol(&'a CStr),
    /// An instruction at a byte offset into a function.
    SymbolOffset(&'a CStr, u32),
    /// An instruction's address.
    Address(usize),
}

impl Target<'_> {
    fn fill(self, p: &mut KpKprobe) {
        match self {
            Target::Symbol(s) => p.symbol_name = s.as_ptr().cast(),
            Target::SymbolOffset(s, off) => {
                p.symbol_name = s.as_ptr().cast();
                p.offset = off;
            }
            Target::Address(a) => p.addr = a as *mut _,
        }
    }
}

/// What a pre-handler wants the engine to do next.
#[derive(PartialEq, Eq, Debug)]
pub enum Next {
    /// Run the probed instruction (then the post-handler) and go on.
    Continue,
    /// The handler moved the instruction pointer, which the [`Redirect`]
    /// proves: skip the probed instruction and the post-handler, resume
    /// where the registers say.
    Redirected(Redirect),
}

/// Proof that a handler moved the instruction pointer, for
/// [`Next::Redirected`]. Only the unsafe setters that move it make one
/// ([`Regs::redirect`], [`Regs::return_now`]), so safe code cannot claim a
/// redirect it did not make (which would resume inside the probed
/// instruction on x86_64, or hit the probe again for ever on arm64). It is
/// neither `Send` nor `Sync`: it cannot be kept in handler state or a
/// static for a later call. (The engine also runs the instruction when a
/// "redirect" left the instruction pointer where it was.)
#[derive(PartialEq, Eq, Debug)]
pub struct Redirect(PhantomData<*mut ()>);

/// Proof that a fault handler fixed the faulting context, for
/// [`KprobeHandler::fault`]. Made by [`Fixed::new`] (unsafe: the caller
/// vouches that the code no longer faults, e.g. it was moved past the
/// faulting instruction) or from a [`Redirect`]. Like [`Redirect`], it
/// cannot outlive the handler call. (The engine also lets the kernel
/// handle a trap whose handler claimed a fix and changed no register.)
#[derive(PartialEq, Eq, Debug)]
pub struct Fixed(PhantomData<*mut ()>);

impl Fixed {
    /// Claims the trap is fixed.
    ///
    /// # Safety
    ///
    /// The registers were changed so that the faulting code, resumed with
    /// them, does not fault the same way again and keeps its invariants
    /// (see [`Regs`]).
    pub unsafe fn new() -> Self {
        Fixed(PhantomData)
    }
}

impl From<Redirect> for Fixed {
    fn from(_: Redirect) -> Self {
        Fixed(PhantomData)
    }
}

/// A registered probe as its handlers see it.
#[repr(transparent)]
pub struct Probe(UnsafeCell<KpKprobe>);

// SAFETY: the engine updates the fields of a registered probe under its own
// synchronisation; this type only reads them (volatile) and passes the
// pointer to the engine's thread-safe entry points.
unsafe impl Sync for Probe {}
// SAFETY: as above; the raw pointers inside belong to the engine.
unsafe impl Send for Probe {}

impl Probe {
    fn raw(&self) -> *mut KpKprobe {
        self.0.get()
    }

    /// The address probed (resolved at registration).
    pub fn addr(&self) -> usize {
        // SAFETY: `raw()` is valid while `self` lives; the engine writes the
        // field only during registration.
        unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*self.raw()).addr)) as usize }
    }

    /// Hits whose handlers did not run (re-entered from another handler).
    pub fn nmissed(&self) -> usize {
        // SAFETY: as in `addr`; the engine counts concurrently, a torn read
        // is impossible for an aligned word.
        unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*self.raw()).nmissed)) }
    }

    fn flags(&self) -> u32 {
        // SAFETY: as in `addr`.
        unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*self.raw()).flags)) }
    }

    /// Whether the handlers run at hits (see [`Kprobe::disable`]).
    pub fn is_enabled(&self) -> bool {
        self.flags() & (KP_FLAG_DISABLED | KP_FLAG_GONE) == 0
    }

    /// Whether the probed text went away (its module was unloaded).
    pub fn is_gone(&self) -> bool {
        self.flags() & KP_FLAG_GONE != 0
    }

    /// Whether the probe is served by ftrace at a function's call site
    /// (no breakpoint; x86_64).
    pub fn is_ftrace(&self) -> bool {
        self.flags() & KP_FLAG_FTRACE != 0
    }

    /// Whether the breakpoint is currently replaced by a jump (x86_64 jump
    /// optimization, after the probe settled; no trap per hit).
    pub fn is_optimized(&self) -> bool {
        self.flags() & KP_FLAG_OPTIMIZED != 0
    }
}

/// The handlers of a [`Kprobe`], implemented by the client on its own state.
///
/// Handlers run in the probed context with interrupts off and preemption
/// disabled: they must not sleep. A breakpoint hit is an NMI-like context
/// (x86_64 `exc_int3`): use what is NMI-safe there, e.g.
/// `ktime_get_mono_fast_ns()`, not `ktime_get()` (lockdep says why). A probe hit inside a handler does not run
/// handlers again (it counts in that probe's [`Probe::nmissed`]).
pub trait KprobeHandler: Send + Sync + Sized + 'static {
    /// Whether [`Self::post`] is wanted. A probe without a post-handler can
    /// resume without a second trap (boosting), so leave it `false` unless
    /// needed.
    const POST_HANDLER: bool = false;

    /// Runs before the probed instruction.
    fn pre(&self, _probe: &Probe, _regs: &mut Regs) -> Next {
        Next::Continue
    }

    /// Runs after the probed instruction (only if [`Self::POST_HANDLER`]).
    fn post(&self, _probe: &Probe, _regs: &mut Regs) {}

    /// Whether [`Self::fault`] is wanted (it also prevents boosting).
    const FAULT_HANDLER: bool = false;

    /// Trap `trapnr` (`X86_TRAP_*`) in the probed instruction while it ran
    /// out of line (`regs` at the probed instruction), or in [`Self::pre`] /
    /// [`Self::post`] (`regs` of the handler's own context); only if
    /// [`Self::FAULT_HANDLER`]. Return a [`Fixed`] after fixing `regs`,
    /// instruction pointer included (for example past the instruction,
    /// `unsafe { regs.redirect(..) }.into()`); `None` lets the kernel handle
    /// the trap (for the probed instruction: as if it happened at the probed
    /// address). A `Fixed` with no register changed (a fix of memory) is a
    /// retry; after 8 such in a row on a CPU the trap goes to the kernel
    /// instead of faulting for ever. x86_64: #GP and the traps that reach
    /// `notify_die(DIE_TRAP)`; page faults reach no hook a module can use.
    /// arm64: never called (a fault there goes straight to `die()`).
    fn fault(&self, _probe: &Probe, _regs: &mut Regs, _trapnr: i32) -> Option<Fixed> {
        None
    }
}

/// A registered kprobe with its handler state `H`; dropping it unregisters
/// (when the drop returns, no CPU runs the handlers any more).
// INVARIANT: while `registered`, the engine holds a pointer to `probe`, which
// is why the type is pinned and `!Unpin`.
#[repr(C)]
pub struct Kprobe<H: KprobeHandler> {
    probe: Probe,
    registered: bool,
    handler: H,
    _pin: PhantomPinned,
}

/// The engine's pre-handler for a `Kprobe<H>`.
///
/// # Safety
///
/// `p` is the `probe` field of a registered `Kprobe<H>`, `regs` the trap frame.
unsafe extern "C" fn kprobe_pre<H: KprobeHandler>(p: *mut KpKprobe, regs: *mut pt_regs) -> c_int {
    // SAFETY: `probe` is the first field of the `#[repr(C)]` `Kprobe<H>`,
    // which is alive while registered; `regs` is exclusively ours.
    let (kp, regs) = unsafe { (&*p.cast::<Kprobe<H>>(), Regs::from_raw(regs)) };
    match kp.handler.pre(&kp.probe, regs) {
        Next::Continue => 0,
        Next::Redirected(_) => 1,
    }
}

/// The engine's post-handler for a `Kprobe<H>`.
///
/// # Safety
///
/// As [`kprobe_pre`].
unsafe extern "C" fn kprobe_post<H: KprobeHandler>(
    p: *mut KpKprobe,
    regs: *mut pt_regs,
    _flags: c_ulong,
) {
    // SAFETY: as in `kprobe_pre`.
    let (kp, regs) = unsafe { (&*p.cast::<Kprobe<H>>(), Regs::from_raw(regs)) };
    kp.handler.post(&kp.probe, regs);
}

/// The engine's fault handler for a `Kprobe<H>`.
///
/// # Safety
///
/// As [`kprobe_pre`].
unsafe extern "C" fn kprobe_fault<H: KprobeHandler>(
    p: *mut KpKprobe,
    regs: *mut pt_regs,
    trapnr: c_int,
) -> c_int {
    // SAFETY: as in `kprobe_pre`.
    let (kp, regs) = unsafe { (&*p.cast::<Kprobe<H>>(), Regs::from_raw(regs)) };
    kp.handler.fault(&kp.probe, regs, trapnr).is_some() as c_int
}

impl<H: KprobeHandler> Kprobe<H> {
    /// Probes `target` with `handler`'s methods. Errors are the engine's:
    /// `ENOENT` unknown symbol or module, `EINVAL` not probe-able (not text,
    /// past the function's end, blacklisted), `EILSEQ` not on an instruction
    /// boundary, `EOPNOTSUPP` an instruction the backend cannot probe, `EBUSY`
    /// someone else's breakpoint, `ENOMEM`, `ENOSPC`.
    pub fn register(target: Target<'_>, handler: H) -> Result<Pin<KBox<Self>>> {
        let mut b = KBox::pin(
            Kprobe {
                probe: Probe(UnsafeCell::new(KpKprobe::new())),
                registered: false,
                handler,
                _pin: PhantomPinned,
            },
            GFP_KERNEL,
        )?;
        // SAFETY: nothing is moved out of the pinned box.
        let this = unsafe { Pin::get_unchecked_mut(b.as_mut()) };
        let raw = this.probe.0.get_mut();
        target.fill(raw);
        raw.pre_handler = Some(kprobe_pre::<H>);
        if H::POST_HANDLER {
            raw.post_handler = Some(kprobe_post::<H>);
        }
        if H::FAULT_HANDLER {
            raw.fault_handler = Some(kprobe_fault::<H>);
        }
        // The engine's pointer covers the whole object (the trampolines
        // reach `handler` through it): `probe` is its first field.
        let this: *mut Self = this;
        let raw = this.cast::<KpKprobe>();
        // SAFETY: the probe stays at this address until `drop` unregisters it.
        let r = unsafe { kp_register_kprobe(raw) };
        // The name was only needed to resolve it and is only borrowed.
        // SAFETY: the engine never reads `symbol_name` after registration.
        unsafe { core::ptr::addr_of_mut!((*raw).symbol_name).write(core::ptr::null()) };
        to_result(r)?;
        // SAFETY: `this` is the live, pinned object; handlers never read
        // `registered`.
        unsafe { (*this).registered = true };
        Ok(b)
    }

    /// The handler state.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// The probe (address, counters, state).
    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    /// The address probed.
    pub fn addr(&self) -> usize {
        self.probe.addr()
    }

    /// Hits whose handlers did not run.
    pub fn nmissed(&self) -> usize {
        self.probe.nmissed()
    }

    /// Stops the handlers without unregistering; the original instruction is
    /// back when no enabled probe is left at the address.
    pub fn disable(&self) -> Result {
        // SAFETY: registered (an unregistered `Kprobe` is never returned).
        to_result(unsafe { kp_disable_kprobe(self.probe.raw()) })
    }

    /// Re-arms a disabled probe.
    pub fn enable(&self) -> Result {
        // SAFETY: as in `disable`.
        to_result(unsafe { kp_enable_kprobe(self.probe.raw()) })
    }
}

impl<H: KprobeHandler> Drop for Kprobe<H> {
    fn drop(&mut self) {
        if self.registered {
            // SAFETY: registered at this (pinned) address.
            unsafe { kp_unregister_kprobe(self.probe.raw()) };
        }
    }
}

/// A value an integer argument register (or stack slot) can be read as.
pub trait FromArg: Sized {
    /// Converts a full register; narrower types take the low bits, as the
    /// calling conventions leave the upper ones unspecified.
    fn from_arg(v: usize) -> Self;
}

macro_rules! from_arg_int {
    ($($t:ty),*) => {
        $(impl FromArg for $t {
            #[allow(clippy::unnecessary_cast)]
            fn from_arg(v: usize) -> Self {
                v as $t
            }
        })*
    };
}
from_arg_int!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

impl FromArg for bool {
    fn from_arg(v: usize) -> Self {
        v as u8 != 0
    }
}

impl<T> FromArg for *const T {
    fn from_arg(v: usize) -> Self {
        v as *const T
    }
}

impl<T> FromArg for *mut T {
    fn from_arg(v: usize) -> Self {
        v as *mut T
    }
}

/// A function's argument list as a tuple of [`FromArg`] types (up to 10).
pub trait Args: Sized {
    /// Reads the arguments at the function's entry (`None` if a stack
    /// argument could not be read).
    fn fetch(regs: &Regs) -> Option<Self>;
}

macro_rules! args_tuple {
    ($($t:ident $i:tt),*) => {
        impl<$($t: FromArg),*> Args for ($($t,)*) {
            #[allow(unused_variables)]
            fn fetch(regs: &Regs) -> Option<Self> {
                Some(($($t::from_arg(regs.arg($i)?),)*))
            }
        }
    };
}
args_tuple!();
args_tuple!(A 0);
args_tuple!(A 0, B 1);
args_tuple!(A 0, B 1, C 2);
args_tuple!(A 0, B 1, C 2, D 3);
args_tuple!(A 0, B 1, C 2, D 3, E 4);
args_tuple!(A 0, B 1, C 2, D 3, E 4, F 5);
args_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
args_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
args_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
args_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);

/// The handler of an [`EntryProbe`]: receives the probed function's
/// arguments typed (what jprobes gave, without mirroring the stack).
pub trait EntryHandler: Send + Sync + Sized + 'static {
    /// The function's parameter types, as a tuple: for
    /// `int do_filp_open(int dfd, struct filename *name, const struct
    /// open_flags *op)` that is `(i32, *const filename, *const open_flags)`.
    type Args: Args;

    /// Runs at each call, before the function's first instruction.
    fn entry(&self, args: Self::Args, regs: &Regs);
}

/// The [`KprobeHandler`] behind an [`EntryProbe`].
pub struct Entry<H> {
    handler: H,
    unreadable: AtomicUsize,
}

impl<H: EntryHandler> KprobeHandler for Entry<H> {
    fn pre(&self, _probe: &Probe, regs: &mut Regs) -> Next {
        match H::Args::fetch(regs) {
            Some(args) => self.handler.entry(args, &*regs),
            None => {
                self.unreadable.fetch_add(1, Ordering::Relaxed);
            }
        }
        Next::Continue
    }
}

/// A typed function-entry probe (see [`EntryHandler`]).
pub type EntryProbe<H> = Kprobe<Entry<H>>;

impl<H: EntryHandler> Kprobe<Entry<H>> {
    /// Probes the entry of `function` (`"symbol"` or `"module:symbol"`).
    /// Only the entry: that is where the arguments are where the calling
    /// convention puts them.
    pub fn register_entry(function: &CStr, handler: H) -> Result<Pin<KBox<Self>>> {
        Self::register(
            Target::Symbol(function),
            Entry {
                handler,
                unreadable: AtomicUsize::new(0),
            },
        )
    }

    /// The client's handler.
    pub fn entry_handler(&self) -> &H {
        &self.handler.handler
    }

    /// Calls whose stack arguments could not be read (the handler did not
    /// run for them).
    pub fn unreadable(&self) -> usize {
        self.handler.unreadable.load(Ordering::Relaxed)
    }
}

/// One tracked call of a kretprobe'd function, as its return handler sees it.
#[repr(transparent)]
pub struct ReturnInfo(KpKretprobeInstance);

impl ReturnInfo {
    /// Where the function returns to (its caller).
    pub fn ret_addr(&self) -> usize {
        self.0.ret_addr
    }

    /// The stack pointer at the function's entry (identifies the frame).
    pub fn frame(&self) -> usize {
        self.0.fp
    }
}

/// The handlers of a [`Kretprobe`].
pub trait KretprobeHandler: Send + Sync + Sized + 'static {
    /// Data kept per tracked call, from [`Self::entry`] to [`Self::ret`]
    /// (`()` for none). `Copy`: a call still in flight when the probe is
    /// unregistered returns without running [`Self::ret`], and its data is
    /// simply forgotten. At most 8-byte alignment.
    type Data: Copy + Send + 'static;

    /// Runs at the function's entry; `None` means "do not track this call"
    /// (then [`Self::ret`] does not run for it).
    fn entry(&self, regs: &Regs) -> Option<Self::Data>;

    /// Runs when a tracked call returns, with what [`Self::entry`] stored;
    /// [`Regs::return_value`] is the return value (and can be changed).
    fn ret(&self, data: Self::Data, info: &ReturnInfo, regs: &mut Regs);
}

/// A registered return probe with its handler state `H`; dropping it
/// unregisters. Calls still inside the function then return normally.
// INVARIANT: as for `Kprobe`.
#[repr(C)]
pub struct Kretprobe<H: KretprobeHandler> {
    raw: UnsafeCell<KpKretprobe>,
    registered: bool,
    handler: H,
    _pin: PhantomPinned,
}

// SAFETY: the engine synchronises the fields it writes; this type only reads
// them (volatile) and calls the engine's thread-safe entry points. `H` is
// `Send + Sync`.
unsafe impl<H: KretprobeHandler> Sync for Kretprobe<H> {}
// SAFETY: as above.
unsafe impl<H: KretprobeHandler> Send for Kretprobe<H> {}

/// The engine's entry handler for a `Kretprobe<H>`.
///
/// # Safety
///
/// `ri` is a live instance of a registered `Kretprobe<H>` with
/// `size_of::<H::Data>()` bytes of data; `regs` is the trap frame.
unsafe extern "C" fn kret_entry<H: KretprobeHandler>(
    ri: *mut KpKretprobeInstance,
    regs: *mut pt_regs,
) -> c_int {
    // SAFETY: `raw` is the first field of the `#[repr(C)]` `Kretprobe<H>`,
    // alive while registered; `regs` is exclusively ours.
    let (rp, regs) = unsafe { (&*(*ri).rp.cast::<Kretprobe<H>>(), Regs::from_raw(regs)) };
    match rp.handler.entry(&*regs) {
        Some(d) => {
            // SAFETY: the instance has room for `H::Data`, 8-byte aligned
            // (checked at registration).
            unsafe { (*ri).data().cast::<H::Data>().write(d) };
            0
        }
        None => 1,
    }
}

/// The engine's return handler for a `Kretprobe<H>`.
///
/// # Safety
///
/// As [`kret_entry`], for an instance whose entry handler stored a `Data`.
unsafe extern "C" fn kret_ret<H: KretprobeHandler>(
    ri: *mut KpKretprobeInstance,
    regs: *mut pt_regs,
) -> c_int {
    // SAFETY: as in `kret_entry`; the data was written there.
    let (rp, regs, d) = unsafe {
        (
            &*(*ri).rp.cast::<Kretprobe<H>>(),
            Regs::from_raw(regs),
            (*ri).data().cast::<H::Data>().read(),
        )
    };
    // SAFETY: `ReturnInfo` is a transparent instance header.
    let info = unsafe { &*ri.cast::<ReturnInfo>() };
    rp.handler.ret(d, info, regs);
    0
}

impl<H: KretprobeHandler> Kretprobe<H> {
    /// Probes the returns of the function at `target` (an entry: a symbol, or
    /// an address) with the default number of calls tracked at once.
    pub fn register(target: Target<'_>, handler: H) -> Result<Pin<KBox<Self>>> {
        Self::register_maxactive(target, 0, handler)
    }

    /// As [`Self::register`], tracking at most `maxactive` calls at once
    /// (0: the default, max(10, 2 * possible CPUs)); calls beyond that are
    /// counted in [`Self::nmissed`].
    pub fn register_maxactive(
        target: Target<'_>,
        maxactive: u32,
        handler: H,
    ) -> Result<Pin<KBox<Self>>> {
        const { assert!(core::mem::align_of::<H::Data>() <= 8) };
        let mut b = KBox::pin(
            Kretprobe {
                raw: UnsafeCell::new(KpKretprobe::new()),
                registered: false,
                handler,
                _pin: PhantomPinned,
            },
            GFP_KERNEL,
        )?;
        // SAFETY: nothing is moved out of the pinned box.
        let this = unsafe { Pin::get_unchecked_mut(b.as_mut()) };
        let raw = this.raw.get_mut();
        target.fill(&mut raw.kp);
        raw.entry_handler = Some(kret_entry::<H>);
        raw.handler = Some(kret_ret::<H>);
        raw.data_size = core::mem::size_of::<H::Data>();
        raw.maxactive = maxactive.min(c_int::MAX as u32) as c_int;
        // Whole-object pointer, as in `Kprobe::register`.
        let this: *mut Self = this;
        let raw = this.cast::<KpKretprobe>();
        // SAFETY: the kretprobe stays here until `drop` unregisters it.
        let r = unsafe { kp_register_kretprobe(raw) };
        // SAFETY: the engine never reads `symbol_name` after registration.
        unsafe { core::ptr::addr_of_mut!((*raw).kp.symbol_name).write(core::ptr::null()) };
        to_result(r)?;
        // SAFETY: as in `Kprobe::register`.
        unsafe { (*this).registered = true };
        Ok(b)
    }

    /// The handler state.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// The function entry probed.
    pub fn addr(&self) -> usize {
        // SAFETY: written by the engine only during registration.
        unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*self.raw.get()).kp.addr)) as usize }
    }

    /// Calls not tracked because every instance was in use.
    pub fn nmissed(&self) -> usize {
        // SAFETY: an aligned word the engine updates; volatile read.
        let n = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*self.raw.get()).nmissed)) };
        n.max(0) as usize
    }
}

impl<H: KretprobeHandler> Drop for Kretprobe<H> {
    fn drop(&mut self) {
        if self.registered {
            // SAFETY: registered at this (pinned) address.
            unsafe { kp_unregister_kretprobe(self.raw.get()) };
        }
    }
}

impl Regs {
    /// Integer argument `n` (0-based) of the function whose entry these
    /// registers are stopped at, per the calling convention; stack arguments
    /// are read without faulting (`None` if unreadable).
    pub fn arg(&self, n: usize) -> Option<usize> {
        match self.arg_location(n) {
            Location::Register(v) => Some(v),
            Location::Stack(a) => read_kernel::<usize>(a),
        }
    }

    /// The return address, at a function's entry.
    pub fn entry_return_address(&self) -> Option<usize> {
        match self.return_address_location() {
            Location::Register(v) => Some(v),
            Location::Stack(a) => read_kernel::<usize>(a),
        }
    }

    /// At a function's entry: makes the function return `value` at once
    /// without running it; the pre-handler then returns
    /// `Next::Redirected(token)`. `None` if the return address was
    /// unreadable (nothing changed).
    ///
    /// # Safety
    ///
    /// The registers are stopped at the entry of a function that may be
    /// skipped (its callers need no side effect of it), `value` is what its
    /// callers may receive, and the pre-handler then returns
    /// [`Next::Redirected`] (with [`Next::Continue`] the function would run
    /// with a stack pointer already moved past its return address).
    pub unsafe fn return_now(&mut self, value: usize) -> Option<Redirect> {
        let ret = self.entry_return_address()?;
        // SAFETY: the caller's contract.
        unsafe { self.return_to(ret, value) };
        Some(Redirect(PhantomData))
    }

    /// Resumes the probed code at `ip` instead of the probed instruction;
    /// the pre-handler then returns `Next::Redirected(token)` (or a fault
    /// handler `Some(token.into())`).
    ///
    /// # Safety
    ///
    /// As [`Regs::set_ip`]: the code at `ip` runs with these registers and
    /// keeps its invariants (see [`Regs`]).
    pub unsafe fn redirect(&mut self, ip: usize) -> Redirect {
        // SAFETY: the caller's contract.
        unsafe { self.set_ip(ip) };
        Redirect(PhantomData)
    }
}

/// Types any bit pattern of which is a valid value.
///
/// # Safety
///
/// Implementors must have no invalid bit patterns and no padding.
pub unsafe trait Pod: Copy {}

macro_rules! pod {
    ($($t:ty),*) => {
        // SAFETY: integers: every bit pattern is valid.
        $(unsafe impl Pod for $t {})*
    };
}
pod!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);
// SAFETY: any address is a valid raw pointer value.
unsafe impl<T> Pod for *const T {}
// SAFETY: as above.
unsafe impl<T> Pod for *mut T {}

/// Reads a `T` from kernel memory at `addr` without faulting (`None` if the
/// address is not mapped or is a user address).
pub fn read_kernel<T: Pod>(addr: usize) -> Option<T> {
    let mut v = core::mem::MaybeUninit::<T>::uninit();
    // SAFETY: the nofault copy checks the source; the destination is ours.
    let r = unsafe {
        bindings::copy_from_kernel_nofault(
            v.as_mut_ptr().cast(),
            addr as *const _,
            core::mem::size_of::<T>(),
        )
    };
    // SAFETY: fully written on success; any bit pattern is a `T`.
    (r == 0).then(|| unsafe { v.assume_init() })
}

const PAGE: usize = 4096;

/// Reads a NUL-terminated string into `buf` page by page with `copy`
/// (0 on success), stopping at the first NUL or when `buf` is full. Returns
/// the bytes before the NUL, or `None` if the first byte is unreadable.
fn read_str(
    addr: usize,
    buf: &mut [u8],
    copy: impl Fn(*mut u8, usize, usize) -> bool,
) -> Option<&[u8]> {
    let mut done = 0;
    while done < buf.len() {
        let at = addr.wrapping_add(done);
        let chunk = (PAGE - at % PAGE).min(buf.len() - done);
        if !copy(buf[done..].as_mut_ptr(), at, chunk) {
            break;
        }
        if let Some(nul) = buf[done..done + chunk].iter().position(|&c| c == 0) {
            return Some(&buf[..done + nul]);
        }
        done += chunk;
    }
    (done > 0).then(|| &buf[..done])
}

/// Reads a NUL-terminated kernel string at `addr` into `buf` without
/// faulting: the bytes before the NUL (truncated to `buf`), or `None` if
/// unreadable.
pub fn read_kernel_str(addr: usize, buf: &mut [u8]) -> Option<&[u8]> {
    read_str(addr, buf, |dst, src, n| {
        // SAFETY: nofault copy into `n` bytes of `buf`.
        unsafe { bindings::copy_from_kernel_nofault(dst.cast(), src as *const _, n) == 0 }
    })
}

/// As [`read_kernel_str`] for a user-space string (a system call's
/// argument): never faults, never sleeps.
pub fn read_user_str(addr: usize, buf: &mut [u8]) -> Option<&[u8]> {
    read_str(addr, buf, |dst, src, n| {
        // SAFETY: nofault copy into `n` bytes of `buf`.
        unsafe { bindings::copy_from_user_nofault(dst.cast(), src as *const _, n) == 0 }
    })
}

/// The current task's name (`comm`).
pub struct Comm([kernel::ffi::c_char; 16]);

impl Comm {
    /// The name of the task running now.
    pub fn current() -> Self {
        // SAFETY: `current` is always valid; `comm` is a fixed array.
        let comm = unsafe { (*bindings::get_current()).comm };
        Comm(comm)
    }

    /// As text (`"?"` if not UTF-8).
    pub fn as_str(&self) -> &str {
        let n = self.0.iter().position(|&c| c == 0).unwrap_or(self.0.len());
        core::str::from_utf8(&self.0[..n]).unwrap_or("?")
    }
}

/// The current task's pid (thread id) and whether it is a kernel thread.
pub fn current_pid() -> (i32, bool) {
    let t = bindings::get_current;
    // SAFETY: `current` is always valid; `pid` is fixed for a task's life and
    // `flags` is a word read without forming a reference.
    unsafe {
        let t = t();
        (
            core::ptr::addr_of!((*t).pid).read(),
            core::ptr::addr_of!((*t).flags).read_volatile() & bindings::PF_KTHREAD != 0,
        )
    }
}

/// A function (or other symbol) found by name.
#[derive(Clone, Copy, Debug)]
pub struct Symbol {
    /// Its address.
    pub addr: usize,
    /// Its size in bytes (0 if unknown).
    pub size: usize,
}

/// Finds `name` (`"sym"` or `"module:sym"`) in the kernel's symbol table.
pub fn lookup_symbol(name: &CStr) -> Option<Symbol> {
    let mut size: c_ulong = 0;
    // SAFETY: `name` is NUL-terminated, `size` writable.
    let addr = unsafe { kp_lookup_symbol(name.as_ptr().cast(), &mut size) };
    (addr != 0).then_some(Symbol { addr, size })
}

/// One instruction of kernel or module text, decoded by the engine's arch
/// backend.
#[derive(Clone, Copy, Debug)]
pub struct Insn {
    /// Its address.
    pub addr: usize,
    /// Its length in bytes.
    pub len: usize,
    /// A call (direct or indirect).
    pub is_call: bool,
    /// Where it branches or calls to, for a direct branch.
    pub target: Option<usize>,
}

impl Insn {
    /// Decodes the instruction at `addr`: `EFAULT` if unreadable, `EILSEQ` if
    /// not a known instruction, `EINVAL` if misaligned (arm64).
    pub fn decode(addr: usize) -> Result<Insn> {
        let mut raw = KpInsn {
            addr: 0,
            len: 0,
            flags: 0,
            target: 0,
        };
        // SAFETY: `raw` is writable.
        to_result(unsafe { kp_decode_insn(addr, &mut raw) })?;
        Ok(Insn {
            addr,
            len: raw.len as usize,
            is_call: raw.flags & KP_INSN_CALL != 0,
            target: (raw.flags & KP_INSN_BRANCH != 0).then_some(raw.target),
        })
    }

    /// The address of the next instruction.
    pub fn next(&self) -> usize {
        self.addr.saturating_add(self.len)
    }
}

/// The instructions of a function, decoded linearly from its start (the
/// iteration stops at the end or at the first undecodable byte).
pub fn instructions(f: Symbol) -> impl Iterator<Item = Insn> {
    let end = f.addr.saturating_add(f.size);
    let mut at = f.addr;
    core::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let i = Insn::decode(at).ok()?;
        // A zero length (never from the decoders) must not loop for ever.
        at = if i.len == 0 { end } else { i.next() };
        Some(i)
    })
}

/// Declares a safe accessor for a string module parameter that the client's C
/// glue defines with `KP_STRING_PARAM(name, size, ...)` (`examples/params.h`;
/// the `module!` macro of this kernel's Rust cannot declare parameters):
///
/// ```ignore
/// kp::string_param!(unsafe fn symbol = kp_param_symbol[512]);
/// ```
///
/// `unsafe` acknowledges the contract: the C buffer is at least that size.
#[allow(unused_macros)]
macro_rules! string_param {
    (unsafe $vis:vis fn $fn:ident = $sym:ident[$n:literal]) => {
        $vis fn $fn() -> &'static core::ffi::CStr {
            extern "C" {
                static $sym: [u8; $n];
            }
            // SAFETY: the C side defines a NUL-terminated buffer of this size,
            // read-only (0444) and set before the module's init runs.
            let b = unsafe { &*core::ptr::addr_of!($sym) };
            core::ffi::CStr::from_bytes_until_nul(b).unwrap_or(c"")
        }
    };
}
#[allow(unused_imports)]
pub(crate) use string_param;
