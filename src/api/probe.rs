// SPDX-License-Identifier: GPL-2.0

//! [`Kprobe`]: a probe on an instruction, with the handlers of a
//! [`KprobeHandler`]; the tokens ([`Redirect`], [`Fixed`]) only the unsafe
//! register setters make.

use super::*;

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
    pub(super) fn fill(self, p: &mut KpKprobe) {
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
pub struct Redirect(pub(super) PhantomData<*mut ()>);

/// Proof that a fault handler fixed the faulting context, for
/// [`KprobeHandler::fault`]. Made by [`Fixed::new`] (unsafe: the caller
/// vouches that the code no longer faults, e.g. it was moved past the
/// faulting instruction) or from a [`Redirect`]. Like [`Redirect`], it
/// cannot outlive the handler call. (The engine also lets the kernel
/// handle a trap whose handler claimed a fix and changed no register.)
#[derive(PartialEq, Eq, Debug)]
pub struct Fixed(pub(super) PhantomData<*mut ()>);

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

    /// Whether the handlers need every register at a function's entry
    /// (`KP_FLAG_FULL_REGS`). arm64 serves an entry through ftrace with
    /// x0-x8, fp, lr, sp and pc valid (the others read 0, and a change to
    /// them is not given back); with this it takes a breakpoint past the
    /// patchable entry instead. x86_64 has every register on both paths.
    const FULL_REGS: bool = false;

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
    /// arm64: data and instruction aborts (`trapnr`: the exception class,
    /// 0x25 for a data abort at EL1), through the engine's hook on
    /// `do_mem_abort()`.
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
    pub(super) probe: Probe,
    pub(super) registered: bool,
    pub(super) handler: H,
    pub(super) _pin: PhantomPinned,
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
        if H::FULL_REGS {
            raw.flags |= KP_FLAG_FULL_REGS;
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
