// SPDX-License-Identifier: GPL-2.0

//! [`Kretprobe`]: a return probe with per-call data of the client's type.

use super::*;

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

    /// Whether [`Self::entry`] needs every register
    /// ([`KprobeHandler::FULL_REGS`]).
    const FULL_REGS: bool = false;
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
        if H::FULL_REGS {
            raw.kp.flags |= KP_FLAG_FULL_REGS;
        }
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
