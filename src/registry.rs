// SPDX-License-Identifier: GPL-2.0

//! The probe registry: probe points, aggregation, enable/disable, lifecycle.
//!
//! A *point* is one probed address: the prepared instruction, whether the
//! breakpoint is armed, and the list of client *probes* on it, in registration
//! order (several probes on one address share one breakpoint, like the
//! kernel's aggregate kprobes). Points live in a hash table of singly linked
//! chains.
//!
//! Concurrency: every change happens under the registration mutex (process
//! context). The trap path ([`crate::hit`]) reads without locks: chain links
//! and probe lists are published with release stores and read with acquire
//! loads; anything unpublished is freed only after `synchronize_rcu()`, which
//! waits for every trap handler (they run with interrupts off) and every CPU
//! still executing an out-of-line copy (also with interrupts off).
//! Probe lists are copy-on-write: a change builds a new list, publishes it,
//! waits a grace period, then frees the old one.

use crate::abi::{
    KpKprobe, KP_FLAG_DISABLED, KP_FLAG_FTRACE, KP_FLAG_GONE, KP_FLAG_OPTIMIZED,
    KP_FLAG_REGISTERED, KP_PRIVATE_WORDS,
};
use crate::arch;
use crate::{optimize, symbols};
use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use kernel::bindings;
use kernel::prelude::*;
use kernel::str::CStr;

/// One client probe: the engine's record, kept in the client's
/// `struct kp_kprobe` (its `kp_private` words), as the kernel keeps its
/// per-probe state in `struct kprobe`: a probe alone at its address costs
/// its [`Point`] and nothing else (a second probe there adds the point's
/// list). The list of all probes is chained through these records: a
/// client that frees or overwrites a registered struct corrupts it (as it
/// already breaks every hit there).
#[repr(C)]
pub(crate) struct Probe {
    /// The point this probe sits on; null once the text went away (GONE).
    point: AtomicPtr<Point>,
    /// Next in the list of all probes (registration lock).
    next_all: *mut Probe,
    /// Registered but not armed.
    pub(crate) disabled: AtomicBool,
    /// Whether the client's struct had a post or fault handler at
    /// registration ([`needs_step`]; as the kernel's kprobes decide an
    /// aggregate's post handler at registration).
    step: bool,
}

const _: () = assert!(
    core::mem::size_of::<Probe>() <= core::mem::size_of::<[usize; KP_PRIVATE_WORDS]>()
        && core::mem::align_of::<Probe>() <= core::mem::align_of::<usize>()
);

/// The client struct and handler addresses of `p` (and, for a kretprobe's
/// entry probe, of the kretprobe's handlers): if a module holding any of
/// them unloads, the probe goes with it. Read when a module goes (the
/// client's struct is valid while registered), not kept per probe.
fn owner_addrs(p: &KpKprobe) -> [usize; 6] {
    let (mut h, mut eh) = (0, 0);
    if crate::kretprobe::is_entry_probe(p) {
        // SAFETY: a kretprobe's entry probe is the first field of its live
        // `KpKretprobe`.
        let rp = unsafe { &*(p as *const KpKprobe).cast::<crate::abi::KpKretprobe>() };
        h = rp.handler.map_or(0, |f| f as usize);
        eh = rp.entry_handler.map_or(0, |f| f as usize);
    }
    [
        p as *const KpKprobe as usize,
        p.pre_handler.map_or(0, |f| f as usize),
        p.post_handler.map_or(0, |f| f as usize),
        p.fault_handler.map_or(0, |f| f as usize),
        h,
        eh,
    ]
}

impl Probe {
    /// Where `p`'s record is (whether or not it holds one).
    fn of(p: *mut KpKprobe) -> *mut Probe {
        // SAFETY: only computes the address of a field of `*p`.
        unsafe { core::ptr::addr_of_mut!((*p).kp_private) }.cast()
    }

    /// The client's struct this record is in.
    #[inline(always)]
    pub(crate) fn user(&self) -> *mut KpKprobe {
        (self as *const Probe)
            .cast::<u8>()
            .wrapping_sub(core::mem::offset_of!(KpKprobe, kp_private))
            .cast::<KpKprobe>()
            .cast_mut()
    }

    /// The client's `nmissed`, as an atomic.
    #[inline(always)]
    fn nmissed(&self) -> &AtomicUsize {
        // SAFETY: the client's struct is valid while registered; `nmissed`
        // is a naturally aligned `unsigned long`, so it can be updated
        // atomically.
        unsafe { AtomicUsize::from_ptr(core::ptr::addr_of_mut!((*self.user()).nmissed)) }
    }

    /// The client's `nmissed`.
    pub(crate) fn missed(&self) -> usize {
        self.nmissed().load(Ordering::Relaxed)
    }

    /// Counts a missed hit in the client's `nmissed`.
    pub(crate) fn count_missed(&self) {
        self.nmissed().fetch_add(1, Ordering::Relaxed);
    }
}

/// The probes on one point, in registration order (`plist.rs`).
pub(crate) type ProbeList = crate::plist::PtrList<Probe>;

/// `Point::probes` holding a list (bit 0; probes are word-aligned).
const LIST_TAG: usize = 1;

/// What `Point::probes` holds.
enum Held {
    /// No probe (a point kept because its text could not be restored).
    Nothing,
    /// The only probe, while no second one ever joined.
    One(*mut Probe),
    /// The probes, once a second one joined.
    List(*mut ProbeList),
}

impl Held {
    fn decode(v: *mut u8) -> Held {
        if v.is_null() {
            Held::Nothing
        } else if v as usize & LIST_TAG != 0 {
            Held::List(v.wrapping_sub(LIST_TAG).cast())
        } else {
            Held::One(v.cast())
        }
    }

    fn list(l: *mut ProbeList) -> *mut u8 {
        l.cast::<u8>().wrapping_add(LIST_TAG)
    }
}

/// One probed address. The one allocation per probed address (a cache of
/// its exact size, `src/helpers.c`): keep it small.
pub(crate) struct Point {
    /// The probed address.
    pub(crate) addr: usize,
    /// The prepared instruction.
    pub(crate) insn: arch::ArchInsn,
    /// The probes here (see [`Held`]): the only one, or, once a second one
    /// joined, a list (never empty while the point is in the table); a
    /// single atomic word, so that a reader sees either, never a mix.
    probes: AtomicPtr<u8>,
    /// Next point in the hash chain.
    next: AtomicPtr<Point>,
    /// Served by the engine's ftrace_ops (an ftrace call site), not by a
    /// breakpoint.
    pub(crate) ftrace: bool,
    /// An ftrace point whose site calls the engine's trampoline directly
    /// (`src/ftrace.c`); false: through the shared `ftrace_ops`. Hits that
    /// come the other way (a dying direct site of an earlier point at this
    /// address) are not this point's.
    pub(crate) direct: AtomicBool,
    /// Whether an enabled probe here needs the step to end in a trap (a
    /// post or fault handler): the hit path's copy of
    /// [`Point::any_post_handler`], raised before such a probe can run and
    /// lowered after it stopped ([`refresh_post`]).
    pub(crate) post: AtomicBool,
    /// Whether the breakpoint is in the text.
    pub(crate) armed: AtomicBool,
    /// Jump optimization state (`optimize.rs`; nothing where the arch has
    /// none).
    pub(crate) opt: arch::OptState,
}

// The backend says how large a point may be (arm64 48 bytes; x86_64, with
// the jump optimizer's state, 128): the memory per probe `make bench`
// compares with the kernel's.
const _: () = assert!(core::mem::size_of::<Point>() <= arch::POINT_MAX_SIZE);

extern "C" {
    fn kp_helper_point_cache_init(size: usize, align: usize) -> kernel::ffi::c_int;
    fn kp_helper_point_cache_exit();
    fn kp_helper_point_alloc() -> *mut kernel::ffi::c_void;
    fn kp_helper_point_free(p: *mut kernel::ffi::c_void);
    fn kp_helper_module_get() -> bool;
}

/// Creates the points' cache. Engine init.
pub(crate) fn init() -> Result {
    // SAFETY: called once, before any registration.
    let r = unsafe {
        kp_helper_point_cache_init(
            core::mem::size_of::<Point>(),
            core::mem::align_of::<Point>(),
        )
    };
    if r != 0 {
        return Err(Error::from_errno(r));
    }
    Ok(())
}

/// Destroys the points' cache, unless a point had to be kept (its text
/// could not be restored: it stays, and so does the cache). Engine exit,
/// after [`remove_all`].
pub(crate) fn exit() {
    let g = RegGuard::lock();
    let (_, points) = counts(&g);
    if points != 0 {
        pr_err!(
            "{} points kept (text not restored); leaving their cache\n",
            points
        );
        return;
    }
    // SAFETY: no point is left.
    unsafe { kp_helper_point_cache_exit() };
}

/// Allocates `point` in the points' cache.
fn alloc_point(point: Point) -> Result<*mut Point> {
    // SAFETY: the cache exists while the engine is loaded.
    let p = unsafe { kp_helper_point_alloc() }.cast::<Point>();
    if p.is_null() {
        return Err(ENOMEM);
    }
    // SAFETY: fresh memory of the size and alignment of a `Point`.
    unsafe { p.write(point) };
    Ok(p)
}

impl Point {
    /// Whether an enabled probe here has a post or a fault handler (which
    /// need the step to end in a trap and to be tracked, so no boosting).
    /// Trap path, or registration lock held.
    pub(crate) fn any_post_handler(&self) -> bool {
        self.probes()
            .any(|p| !p.disabled.load(Ordering::Relaxed) && p.step)
    }

    fn held(&self) -> Held {
        Held::decode(self.probes.load(Ordering::Acquire))
    }

    /// The point's only probe, when it never had a second one. Trap path,
    /// or registration lock held.
    #[inline(always)]
    pub(crate) fn single(&self) -> Option<&Probe> {
        match self.held() {
            // SAFETY: a probe stays valid for a grace period after it
            // leaves the point.
            Held::One(p) => Some(unsafe { &*p }),
            _ => None,
        }
    }

    /// The probe list, when the point has one. Trap path, or registration
    /// lock held.
    fn list(&self) -> Option<&ProbeList> {
        match self.held() {
            // SAFETY: a published list stays valid for a grace period
            // after it is replaced; our callers are the trap path (IRQs
            // off) or hold the registration lock (no concurrent
            // replacement).
            Held::List(l) => Some(unsafe { &*l }),
            _ => None,
        }
    }

    /// The probes on this point, in registration order. Trap path, or
    /// registration lock held.
    pub(crate) fn probes(&self) -> impl Iterator<Item = &Probe> {
        let (one, list) = match self.held() {
            Held::Nothing => (None, None),
            Held::One(p) => (Some(p), None),
            // SAFETY: as in `list`.
            Held::List(l) => (None, Some(unsafe { &*l })),
        };
        Iterator::chain(one.into_iter(), list.into_iter().flat_map(|l| l.iter()))
            // SAFETY: a probe stays valid for a grace period after it
            // leaves the point, like the list itself.
            .map(|p| unsafe { &*p })
    }
}

const HASH_BITS: u32 = 10;
static TABLE: [AtomicPtr<Point>; 1 << HASH_BITS] =
    [const { AtomicPtr::new(null_mut()) }; 1 << HASH_BITS];

fn bucket(addr: usize) -> &'static AtomicPtr<Point> {
    let h = (addr as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - HASH_BITS);
    &TABLE[h as usize]
}

const ALL_BITS: u32 = 8;

/// Every registered probe, GONE ones included, in chains hashed by the
/// record's address (registration lock): telling a registered record from a
/// stale or copied struct and dropping one stay cheap with thousands
/// registered.
static ALL: RegLocked<[*mut Probe; 1 << ALL_BITS]> = RegLocked::new([null_mut(); 1 << ALL_BITS]);

/// The chain head of `probe`'s bucket in `ALL`. Registration lock held.
fn all_head(g: &RegGuard, probe: *const Probe) -> *mut *mut Probe {
    let h = (probe as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - ALL_BITS);
    // `h` is below the bucket count (the top ALL_BITS bits).
    ALL.get(g).cast::<*mut Probe>().wrapping_add(h as usize)
}

/// Whether probes are armed at all (debugfs `enabled`).
static GLOBAL_ENABLED: AtomicBool = AtomicBool::new(true);

extern "C" {
    fn kp_helper_reg_lock();
    fn kp_helper_reg_unlock();
}

/// Holds the registration mutex.
///
/// INVARIANT: while a `RegGuard` exists, this task holds the mutex.
pub(crate) struct RegGuard(());

/// A global that only registration paths touch, under the registration
/// mutex: reaching it takes a [`RegGuard`], so the "under the lock" claim
/// is checked by the compiler (as `LockedBy` does in `rust/kernel/sync/`).
/// What the pointer is used for stays `unsafe`: one access at a time.
pub(crate) struct RegLocked<T>(core::cell::UnsafeCell<T>);

// SAFETY: the value is only reached through `get`, which needs the
// registration mutex held: one task at a time.
unsafe impl<T> Sync for RegLocked<T> {}

impl<T> RegLocked<T> {
    pub(crate) const fn new(v: T) -> Self {
        RegLocked(core::cell::UnsafeCell::new(v))
    }

    /// The value, for as long as the lock is held.
    pub(crate) fn get(&self, _g: &RegGuard) -> *mut T {
        self.0.get()
    }
}

impl RegGuard {
    /// Takes the registration mutex. Process context.
    pub(crate) fn lock() -> Self {
        // SAFETY: process context (all callers are registration paths).
        unsafe { kp_helper_reg_lock() };
        RegGuard(())
    }
}

impl Drop for RegGuard {
    fn drop(&mut self) {
        // SAFETY: we hold the lock (type invariant).
        unsafe { kp_helper_reg_unlock() };
    }
}

/// Finds the point at `addr`. Lock-free; trap path or registration lock.
pub(crate) fn lookup(addr: usize) -> Option<&'static Point> {
    let mut p = bucket(addr).load(Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: a point reachable from the table is freed only after it was
        // unlinked and a grace period passed; see the module docs.
        let point = unsafe { &*p };
        if point.addr == addr {
            return Some(point);
        }
        p = point.next.load(Ordering::Acquire);
    }
    None
}

/// Calls `f` on every point. Registration lock held.
pub(crate) fn for_each_point(_g: &RegGuard, mut f: impl FnMut(&'static Point)) {
    for b in &TABLE {
        let mut p = b.load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: under the lock nothing is freed.
            let point = unsafe { &*p };
            p = point.next.load(Ordering::Acquire);
            f(point);
        }
    }
}

/// Calls `f` on every registered probe. Registration lock held.
fn for_each_probe(g: &RegGuard, mut f: impl FnMut(&Probe)) {
    // SAFETY: `g` holds the lock `ALL` is under; `f` cannot reach `ALL`
    // (the chains are not changed while they are walked).
    for &head in unsafe { &*ALL.get(g) } {
        let mut p = head;
        while !p.is_null() {
            // SAFETY: under the lock nothing is freed.
            let probe = unsafe { &*p };
            p = probe.next_all;
            f(probe);
        }
    }
}

/// Registered probes and probed addresses.
pub(crate) fn counts(g: &RegGuard) -> (usize, usize) {
    let (mut probes, mut points) = (0, 0);
    for_each_probe(g, |_| probes += 1);
    for_each_point(g, |_| points += 1);
    (probes, points)
}

/// Waits until no CPU can be in a trap handler or an out-of-line copy that
/// started before this call.
///
/// Expedited: registration and unregistration wait for a grace period at
/// each change of a point's probe list, and a normal grace period costs
/// tens of milliseconds; the expedited one (IPIs to the other CPUs) costs
/// microseconds, which keeps batch (un)registration of a thousand probes
/// in the kernel's range.
fn synchronize(g: &RegGuard) {
    // SAFETY: process context.
    unsafe { bindings::synchronize_rcu_expedited() };
    // Lists retired before this grace period can go now.
    for slot in &RETIRED {
        let old = slot.swap(null_mut(), Ordering::Relaxed);
        if !old.is_null() {
            // SAFETY: unpublished before the grace period that just ended.
            drop(unsafe { KBox::from_raw(old) });
        }
    }
    let _ = g;
}

/// Probe lists replaced when a probe joins a point, waiting for the next
/// grace period to be freed (registration lock): joining does not wait.
static RETIRED: [AtomicPtr<ProbeList>; 64] = [const { AtomicPtr::new(null_mut()) }; 64];

/// Publishes `new` as `point`'s list; the old one is freed after a later
/// grace period (at once if the queue is full).
fn publish_list(g: &RegGuard, point: &Point, new: KBox<ProbeList>) {
    let old = swap_list(g, point, new);
    match RETIRED.iter().find(|s| s.load(Ordering::Relaxed).is_null()) {
        Some(slot) => slot.store(old, Ordering::Relaxed),
        None => {
            synchronize(g);
            // SAFETY: unpublished before that grace period.
            drop(unsafe { KBox::from_raw(old) });
        }
    }
}

/// Makes `new` `point`'s list and returns the one it had. Registration lock
/// held; the point has a list.
fn swap_list(_g: &RegGuard, point: &Point, new: KBox<ProbeList>) -> *mut ProbeList {
    let old = point
        .probes
        .swap(Held::list(KBox::into_raw(new)), Ordering::AcqRel);
    match Held::decode(old) {
        Held::List(l) => l,
        // Our callers replace lists only.
        _ => null_mut(),
    }
}

/// Resolves where `p` asks to probe, before any validation.
fn requested_address(p: &KpKprobe) -> Result<usize> {
    match (p.addr.is_null(), p.symbol_name.is_null()) {
        (false, true) => (p.addr as usize)
            .checked_add(p.offset as usize)
            .ok_or(EINVAL),
        (true, false) => {
            // SAFETY: the client promises a NUL-terminated string.
            let name = unsafe { CStr::from_char_ptr(p.symbol_name) };
            let shown = name.to_str().unwrap_or("?");
            if crate::ksym::parse_sym_spec(name.as_bytes()).is_none() {
                pr_err!("'{}' is not a symbol name\n", shown);
                return Err(EINVAL);
            }
            let Some(base) = symbols::lookup_name(name) else {
                pr_err!("unknown symbol '{}'\n", shown);
                return Err(ENOENT);
            };
            // The offset must stay inside the named symbol (landing in the
            // next function would probe something else than asked).
            let size = symbols::bounds(base).map_or(0, |s| s.size);
            if p.offset as usize >= size.max(1) {
                pr_err!(
                    "offset {:#x} is past the end of '{}' ({} bytes)\n",
                    p.offset,
                    shown,
                    size
                );
                return Err(EINVAL);
            }
            base.checked_add(p.offset as usize).ok_or(EINVAL)
        }
        (false, false) => {
            pr_err!("give either addr or symbol_name, not both\n");
            Err(EINVAL)
        }
        (true, true) => {
            pr_err!("neither addr nor symbol_name given\n");
            Err(EINVAL)
        }
    }
}

/// Checks that `addr` is probe-able text and finds its function. `ftrace`:
/// the probe takes the ftrace path, so the site being ftrace's is fine.
fn validate(addr: usize, ftrace: bool) -> Result<symbols::Bounds> {
    let Some(bounds) = symbols::bounds(addr) else {
        pr_err!("{:#x} is in no symbol\n", addr);
        return Err(EINVAL);
    };
    // The symbol by name is printed for refusals only: that costs more
    // than all the checks.
    let name = || symbols::Shown(addr);
    if addr - bounds.start >= bounds.size {
        pr_err!("{:#x} is past the end of {}\n", addr, name());
        return Err(EINVAL);
    }
    // Kernel text, or a loaded module's core text.
    if !symbols::in_kernel_text(addr) && !symbols::in_module_text(addr) {
        pr_err!("{} ({:#x}) is not in kernel or module text\n", name(), addr);
        return Err(EINVAL);
    }
    if let Some(why) = symbols::reserved_by(addr, arch::FTRACE_GUARD) {
        if !(ftrace && why == symbols::FTRACE_SITE) {
            pr_err!("{} is {}: other kernel code rewrites it\n", name(), why);
            return Err(EBUSY);
        }
    }
    if symbols::has_extable_entry(addr) {
        // A fault there is fixed up through the exception table by the
        // faulting address; from an out-of-line copy that lookup would fail
        // and the fault would become an oops. The kernel's kprobes recover
        // through their page-fault hook, which a module cannot install.
        pr_err!(
            "{} has an exception-table fixup; refusing to probe it\n",
            name()
        );
        return Err(crate::errno::eopnotsupp());
    }
    if let Some(reason) = crate::blacklist::check(addr) {
        pr_err!(
            "{} is blacklisted: {}\n",
            name(),
            reason.to_str().unwrap_or("?")
        );
        return Err(EINVAL);
    }
    Ok(bounds)
}

/// Whether `point`'s breakpoint should be in the text.
fn wants_armed(point: &Point) -> bool {
    GLOBAL_ENABLED.load(Ordering::Relaxed)
        && point.probes().any(|p| !p.disabled.load(Ordering::Relaxed))
}

/// Writes the breakpoint, or makes the ftrace site call the engine.
fn arm_point(point: &Point) -> Result {
    if point.ftrace {
        let direct = crate::ftrace::arm(point.addr)?;
        // Before `armed`: which way this point's hits come (`Point::direct`).
        point.direct.store(direct, Ordering::Relaxed);
        Ok(())
    } else {
        arch::arm(point.addr, &point.insn)
    }
}

/// Undoes [`arm_point`] (a jump goes first).
fn disarm_point(g: &RegGuard, point: &Point) -> Result {
    if point.ftrace {
        crate::ftrace::disarm(point.addr)
    } else {
        optimize::unoptimize(g, point)?;
        arch::disarm(point.addr, &point.insn)
    }
}

/// [`disarm_point`], tried again a few times after a failure: restoring
/// text allocates (the vmap of a text alias, ftrace's filter hashes), and a
/// transient allocation failure must not leave a breakpoint behind. Process
/// context, registration lock held.
fn disarm_retrying(g: &RegGuard, point: &Point) -> Result {
    let mut r = disarm_point(g, point);
    for _ in 0..10 {
        if r.is_ok() {
            break;
        }
        // SAFETY: process context.
        unsafe { bindings::msleep(10) };
        r = disarm_point(g, point);
    }
    r
}

/// Sets `set` and clears `clear` in the `flags` of a client's struct, as
/// one atomic read-modify-write: clients and handlers on other CPUs read
/// the word concurrently (`Probe::flags()` in the Rust API, the C header's
/// users), and the engine's writes under its lock must not tear or lose
/// each other's bits.
///
/// # Safety
///
/// `u` is a live `struct kp_kprobe` (registered, or being registered or
/// unregistered under the registration lock).
pub(crate) unsafe fn update_flags(u: *mut KpKprobe, set: u32, clear: u32) {
    // SAFETY: `flags` is an aligned u32 of a live struct; every concurrent
    // access by the engine goes through this atomic view, readers use
    // volatile or atomic loads.
    let f = unsafe { core::sync::atomic::AtomicU32::from_ptr(core::ptr::addr_of_mut!((*u).flags)) };
    if set != 0 {
        f.fetch_or(set, Ordering::Release);
    }
    if clear != 0 {
        f.fetch_and(!clear, Ordering::Release);
    }
}

/// Sets or clears `KP_FLAG_OPTIMIZED` in the structs of `point`'s probes.
pub(crate) fn set_optimized_flag(_g: &RegGuard, point: &Point, on: bool) {
    for p in point.probes() {
        let (set, clear) = if on {
            (KP_FLAG_OPTIMIZED, 0)
        } else {
            (0, KP_FLAG_OPTIMIZED)
        };
        // SAFETY: listed probes and their structs are live under the lock.
        unsafe { update_flags(p.user(), set, clear) };
    }
}

/// Whether `p` needs the step to end in a trap (a post or fault handler):
/// no boosting, no jump optimization where it is enabled.
fn needs_step(p: &KpKprobe) -> bool {
    p.post_handler.is_some() || p.fault_handler.is_some()
}

/// Recomputes `point.post` after a probe that needs the step left or was
/// disabled (O(probes here): only then). Registration lock held.
fn refresh_post(point: &Point) {
    point
        .post
        .store(point.any_post_handler(), Ordering::Relaxed);
}

/// Adds `probe` to `point`'s probes, last. Registration lock held.
fn join(g: &RegGuard, point: &Point, probe: *mut Probe) -> Result {
    if let Some(list) = point.list() {
        if !list.try_push(probe) {
            let list = list.compacted()?;
            list.try_push(probe);
            publish_list(g, point, list);
        }
        return Ok(());
    }
    let Held::One(first) = point.held() else {
        // A point kept with no probe (its text could not be restored).
        point.probes.store(probe.cast(), Ordering::Release);
        return Ok(());
    };
    // The second probe: the point gets its list. Readers that still see
    // the single probe run it only, as before this registration; the
    // single probe is in the client's struct: nothing to free.
    let list = ProbeList::with_capacity(2)?;
    list.try_push(first);
    list.try_push(probe);
    point
        .probes
        .store(Held::list(KBox::into_raw(list)), Ordering::Release);
    Ok(())
}

/// Arms or disarms `point` to match [`wants_armed`], after its probes or
/// their state changed. Registration lock held.
fn sync_armed(g: &RegGuard, point: &Point) -> Result {
    let want = wants_armed(point);
    if want != point.armed.load(Ordering::Relaxed) {
        if want {
            arm_point(point)?;
        } else {
            disarm_point(g, point)?;
        }
        point.armed.store(want, Ordering::Relaxed);
    }
    if want && !point.ftrace {
        optimize::kick();
    }
    Ok(())
}

/// Unlinks `point` from its chain. Registration lock held.
fn unlink(_g: &RegGuard, point: &Point) {
    let target = point as *const Point as *mut Point;
    let mut link = bucket(point.addr);
    loop {
        let p = link.load(Ordering::Relaxed);
        if p.is_null() {
            return;
        }
        if p == target {
            link.store(point.next.load(Ordering::Relaxed), Ordering::Release);
            optimize::point_removed();
            return;
        }
        // SAFETY: under the lock chain members are live.
        link = unsafe { &(*p).next };
    }
}

/// Frees an unlinked point after a grace period.
fn free_point(g: &RegGuard, point: &'static Point) {
    synchronize(g);
    Retired {
        old_list: null_mut(),
        point: point as *const Point as *mut Point,
    }
    .finish(g);
}

fn add_to_all(g: &RegGuard, probe: *mut Probe) {
    let head = all_head(g, probe);
    // SAFETY: registration lock held; `probe` is live.
    unsafe {
        (*probe).next_all = *head;
        *head = probe;
    }
}

/// The link in `ALL` that points to `probe`, if it is there (whatever
/// `probe` is: only listed records are dereferenced).
fn all_link(g: &RegGuard, probe: *const Probe) -> Option<*mut *mut Probe> {
    let mut link = all_head(g, probe);
    // SAFETY: registration lock held; list members are live.
    unsafe {
        while !(*link).is_null() {
            if core::ptr::eq(*link, probe) {
                return Some(link);
            }
            link = core::ptr::addr_of_mut!((**link).next_all);
        }
    }
    None
}

fn remove_from_all(g: &RegGuard, probe: *mut Probe) {
    if let Some(link) = all_link(g, probe) {
        // SAFETY: registration lock held; `probe` is listed, hence live.
        unsafe { *link = (*probe).next_all };
    }
}

fn register_locked(
    g: &RegGuard,
    p: &mut KpKprobe,
    addr: usize,
    ftrace: bool,
    sym: &symbols::Bounds,
) -> Result {
    let disabled = p.flags & KP_FLAG_DISABLED != 0;
    // This probe needs the step and is enabled (see `Point::post`).
    let steps = needs_step(p) && !disabled;
    let probe = Probe::of(p);
    // SAFETY: the record's words in the client's struct (zero: see
    // `check_new`), which stays valid while registered.
    unsafe {
        probe.write(Probe {
            point: AtomicPtr::new(null_mut()),
            disabled: AtomicBool::new(disabled),
            step: needs_step(p),
            next_all: null_mut(),
        })
    };
    // On the error paths below: the client's struct as it was.
    let free_probe = || clear_record(probe);

    let point: &'static Point = match lookup(addr) {
        Some(point) => {
            // Join the aggregate; a probe that needs the step takes the
            // point off its jump first.
            if steps {
                if let Err(e) = optimize::unoptimize(g, point) {
                    free_probe();
                    return Err(e);
                }
                // Before its handlers can run (see `Point::post`).
                point.post.store(true, Ordering::Relaxed);
            }
            // In place when there is room; else a bigger copy replaces the
            // list (nobody needs to wait: the new list only adds a probe).
            if let Err(e) = join(g, point, probe) {
                free_probe();
                if steps {
                    refresh_post(point);
                }
                return Err(e);
            }
            point
        }
        None => {
            // A jump covering this address goes first.
            if let Err(e) = optimize::unoptimize_covering(g, addr) {
                free_probe();
                return Err(e);
            }
            let insn = if ftrace {
                arch::ftrace_insn(addr)
            } else {
                match arch::prepare(addr, sym.start, sym.size) {
                    Ok(i) => i,
                    Err(e) => {
                        free_probe();
                        return Err(e);
                    }
                }
            };
            let made = alloc_point(Point {
                addr,
                insn,
                probes: AtomicPtr::new(probe.cast()),
                next: AtomicPtr::new(bucket(addr).load(Ordering::Relaxed)),
                ftrace,
                direct: AtomicBool::new(false),
                post: AtomicBool::new(steps),
                armed: AtomicBool::new(false),
                opt: arch::OptState::none(),
            });
            let point = match made {
                Ok(p) => p,
                Err(e) => {
                    arch::release(insn);
                    free_probe();
                    return Err(e);
                }
            };
            bucket(addr).store(point, Ordering::Release);
            // SAFETY: just published; only the registration path frees it.
            unsafe { &*point }
        }
    };
    // SAFETY: `probe` is live.
    unsafe {
        (*probe)
            .point
            .store(point as *const _ as *mut _, Ordering::Release)
    };
    if let Err(e) = sync_armed(g, point) {
        // Undo: take the probe off the point again.
        detach(g, probe);
        free_probe();
        return Err(e);
    }
    add_to_all(g, probe);
    let mut set = KP_FLAG_REGISTERED;
    if point.ftrace {
        set |= KP_FLAG_FTRACE;
    }
    if point.opt.jumped() {
        set |= KP_FLAG_OPTIMIZED;
    }
    p.addr = addr as *mut _;
    // SAFETY: `p` is live; registration lock held.
    unsafe { update_flags(p, set, 0) };
    Ok(())
}

/// Zeroes the record in the client's struct and clears
/// `KP_FLAG_REGISTERED` (after unregistration, or a failed registration).
fn clear_record(probe: *mut Probe) {
    // SAFETY: `probe` is the record in a client's struct, no longer
    // reachable by any CPU (never published, or detached and a grace
    // period passed).
    unsafe {
        update_flags((*probe).user(), 0, KP_FLAG_REGISTERED);
        probe
            .cast::<u8>()
            .write_bytes(0, core::mem::size_of::<[usize; KP_PRIVATE_WORDS]>());
    }
}

/// What taking a probe off its point leaves to free once a grace period has
/// passed: the replaced probe list, or the unlinked point (with its list and
/// copy).
struct Retired {
    old_list: *mut ProbeList,
    point: *mut Point,
}

impl Retired {
    const NOTHING: Retired = Retired {
        old_list: null_mut(),
        point: null_mut(),
    };

    /// Frees what was retired. A grace period passed since it was.
    fn finish(self, _g: &RegGuard) {
        if !self.old_list.is_null() {
            // SAFETY: unpublished, and a grace period passed.
            drop(unsafe { KBox::from_raw(self.old_list) });
        }
        if !self.point.is_null() {
            // SAFETY: unlinked, and a grace period passed: nothing refers
            // to it or its list any more.
            let point = unsafe { &*self.point };
            if let Held::List(list) = point.held() {
                // SAFETY: as above, for its list.
                drop(unsafe { KBox::from_raw(list) });
            }
            arch::release(point.insn);
            // SAFETY: from the points' cache; nothing refers to it (above).
            unsafe { kp_helper_point_free(self.point.cast()) };
        }
    }
}

/// Takes `probe` off its point without waiting; the last probe out disarms
/// and unlinks the point. Until a grace period has passed, CPUs may still
/// run the probe's handlers and use what is retired.
fn detach_begin(g: &RegGuard, probe: *mut Probe) -> Retired {
    // SAFETY: `probe` is live under the lock.
    let pp = unsafe { (*probe).point.load(Ordering::Acquire) };
    if pp.is_null() {
        return Retired::NOTHING; // GONE: already off any point
    }
    // SAFETY: points are live under the lock.
    let point: &'static Point = unsafe { &*pp };
    // SAFETY: `probe` is live.
    unsafe { (*probe).point.store(null_mut(), Ordering::Release) };
    let list = point.list();
    let left = match list {
        Some(list) => {
            list.remove(probe);
            list.live()
        }
        // The only probe. The point goes, or, if its text cannot be
        // restored, stays with no probe: either way no hit may find this
        // probe from now on (its record is cleared after the grace
        // period).
        None => {
            point.probes.store(null_mut(), Ordering::Release);
            0
        }
    };
    if left == 0 {
        if point.armed.load(Ordering::Relaxed) {
            if let Err(e) = disarm_retrying(g, point) {
                // The breakpoint stays: keep the point (and its copy) with
                // no probe on it; hits just run the instruction. The
                // engine must then outlive it: a breakpoint or ftrace site
                // left behind by an unloaded engine would crash the machine
                // at its next hit.
                // SAFETY: plain call; never released (see above).
                let pinned = unsafe { kp_helper_module_get() };
                if !pinned {
                    // The engine is unloading (it cannot be pinned any
                    // more): keep trying, however long it takes, rather
                    // than leave.
                    pr_err!(
                        "cannot restore text at {:#x} while unloading: {:?}; retrying\n",
                        point.addr,
                        e
                    );
                    while disarm_retrying(g, point).is_err() {}
                    point.armed.store(false, Ordering::Relaxed);
                    unlink(g, point);
                    return Retired {
                        old_list: null_mut(),
                        point: pp,
                    };
                }
                pr_err!(
                    "cannot restore text at {:#x}: {:?}; leaving it armed, and the \
                     engine loaded for good\n",
                    point.addr,
                    e
                );
                return Retired::NOTHING;
            }
            point.armed.store(false, Ordering::Relaxed);
        }
        unlink(g, point);
        return Retired {
            old_list: null_mut(),
            point: pp,
        };
    }
    // SAFETY: `probe` is live.
    if unsafe { (*probe).step } {
        refresh_post(point);
    }
    let _ = sync_armed(g, point);
    // A list left mostly empty by many removals shrinks (if memory allows;
    // else it just stays larger than needed).
    let mut old_list = null_mut();
    let Some(list) = list else {
        return Retired::NOTHING;
    };
    if list.wants_compaction() {
        if let Ok(new) = list.compacted() {
            old_list = swap_list(g, point, new);
        }
    }
    Retired {
        old_list,
        point: null_mut(),
    }
}

/// Takes `probe` off its point and waits a grace period: on return no CPU
/// runs its handlers any more.
fn detach(g: &RegGuard, probe: *mut Probe) {
    let r = detach_begin(g, probe);
    synchronize(g);
    r.finish(g);
}

/// Whether `probe` is a registered probe's record. Registration lock held.
fn is_registered(g: &RegGuard, probe: *const Probe) -> bool {
    all_link(g, probe).is_some()
}

/// Detaches, unlists and clears a registered probe's record (in the
/// client's struct, see [`Probe`]).
fn drop_probe(g: &RegGuard, probe: *mut Probe) {
    detach(g, probe);
    remove_from_all(g, probe);
    // Detached, unlisted, and a grace period passed in `detach`.
    clear_record(probe);
}

/// Unregisters `p` (a no-op with a message when it is not registered).
fn unregister_locked(g: &RegGuard, p: &mut KpKprobe) {
    let probe = Probe::of(p);
    if !is_registered(g, probe) {
        pr_err!("unregister of unknown probe {:p}\n", p);
        return;
    }
    drop_probe(g, probe);
}

/// Validates a client's struct before registration.
fn check_new(g: &RegGuard, p: &mut KpKprobe) -> Result {
    if p.is_registered() || is_registered(g, Probe::of(p)) {
        pr_err!("probe {:p} is already registered\n", p);
        return Err(EINVAL);
    }
    if p.kp_private.iter().any(|&w| w != 0) {
        pr_err!("probe {:p}: kp_private is not zeroed\n", p);
        return Err(EINVAL);
    }
    Ok(())
}

/// Where a request for `addr` really probes, and whether through ftrace: a
/// function entry (or its ftrace site) goes to the ftrace site when the
/// ftrace path is on and the arch has it, else past what the arch reserves
/// there (see the backends).
fn adjust_entry(addr: usize) -> (usize, bool) {
    let ftrace = crate::ftrace::entry_enabled();
    match symbols::bounds(addr) {
        Some(s) if s.start == addr => match arch::ftrace_entry_site(s.start, s.size) {
            Some(site) if ftrace => (site, true),
            _ => (arch::entry_probe_address(s.start, s.size), false),
        },
        _ if ftrace && symbols::is_ftrace_site(addr) => (addr, true),
        _ => (addr, false),
    }
}

/// Where `p` will really probe (entry adjustment included), whether through
/// ftrace, validated, and the function it is in. Registration lock held: the
/// text cannot change under the checks (no point is freed, no module
/// finishes going away).
fn resolve(_g: &RegGuard, p: &KpKprobe) -> Result<(usize, bool, symbols::Bounds)> {
    let (addr, ftrace) = adjust_entry(requested_address(p)?);
    let sym = validate(addr, ftrace)?;
    Ok((addr, ftrace, sym))
}

/// For kretprobes: checks that `p` names a function entry (symbol + 0, or
/// the address of a function's first byte) that can be probed, and returns
/// that function.
pub(crate) fn function_entry(p: &KpKprobe) -> Result<symbols::Symbol> {
    let addr = requested_address(p)?;
    let Some(sym) = symbols::symbol_at(addr).filter(|s| s.start == addr) else {
        pr_err!("kretprobe: {:#x} is not a function entry\n", addr);
        return Err(EINVAL);
    };
    let (at, ftrace) = adjust_entry(addr);
    validate(at, ftrace)?;
    Ok(sym)
}

fn register(p: &mut KpKprobe) -> Result {
    let g = RegGuard::lock();
    check_new(&g, p)?;
    // Leftovers of an earlier registration, as the kernel clears them.
    // SAFETY: `p` is live (not registered, checked above).
    unsafe { update_flags(p, 0, !KP_FLAG_DISABLED) };
    p.nmissed = 0;
    let (addr, ftrace, sym) = resolve(&g, p)?;
    register_locked(&g, p, addr, ftrace, &sym)
}

/// `kp_register_kprobe()`: registers (and, unless `KP_FLAG_DISABLED`, arms) a
/// probe.
///
/// # Safety
///
/// `p` is null or points to a `KpKprobe` that stays valid and unmoved until
/// `kp_unregister_kprobe(p)` returns.
#[no_mangle]
pub unsafe extern "C" fn kp_register_kprobe(p: *mut KpKprobe) -> kernel::ffi::c_int {
    // SAFETY: per the function's contract.
    let Some(p) = (unsafe { p.as_mut() }) else {
        return EINVAL.to_errno();
    };
    match register(p) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// `kp_unregister_kprobe()`: disarms and forgets a probe; on return no CPU
/// runs its handlers.
///
/// # Safety
///
/// `p` is null or a probe passed to `kp_register_kprobe()`.
#[no_mangle]
pub unsafe extern "C" fn kp_unregister_kprobe(p: *mut KpKprobe) {
    // SAFETY: per the function's contract.
    let Some(p) = (unsafe { p.as_mut() }) else {
        return;
    };
    if !p.is_registered() {
        return;
    }
    let g = RegGuard::lock();
    unregister_locked(&g, p);
}

/// `kp_register_kprobes()`: registers `num` probes, all or nothing: when one
/// fails, those already registered are unregistered and its error returned.
///
/// # Safety
///
/// `kps` points to `num` pointers, each valid as for `kp_register_kprobe()`.
#[no_mangle]
pub unsafe extern "C" fn kp_register_kprobes(
    kps: *mut *mut KpKprobe,
    num: kernel::ffi::c_int,
) -> kernel::ffi::c_int {
    if kps.is_null() || num <= 0 {
        return EINVAL.to_errno();
    }
    for i in 0..num as usize {
        // SAFETY: per the function's contract.
        let r = unsafe { kp_register_kprobe(*kps.add(i)) };
        if r != 0 {
            for j in (0..i).rev() {
                // SAFETY: registered just above.
                unsafe { kp_unregister_kprobe(*kps.add(j)) };
            }
            return r;
        }
    }
    0
}

/// `kp_unregister_kprobes()`.
///
/// # Safety
///
/// `kps` points to `num` pointers to probes (registered or not).
#[no_mangle]
pub unsafe extern "C" fn kp_unregister_kprobes(kps: *mut *mut KpKprobe, num: kernel::ffi::c_int) {
    if kps.is_null() || num <= 0 {
        return;
    }
    let n = num as usize;
    // One grace period for the whole batch, as the kernel's
    // unregister_kprobes(): detach all, wait once, free all.
    let Ok(mut done) = KVec::<(Retired, *mut Probe)>::with_capacity(n, GFP_KERNEL) else {
        for i in 0..n {
            // SAFETY: per the function's contract.
            unsafe { kp_unregister_kprobe(*kps.add(i)) };
        }
        return;
    };
    let g = RegGuard::lock();
    for i in 0..n {
        // SAFETY: per the function's contract.
        let Some(p) = (unsafe { (*kps.add(i)).as_mut() }) else {
            continue;
        };
        let probe = Probe::of(p);
        if !p.is_registered() || !is_registered(&g, probe) {
            continue;
        }
        let r = detach_begin(&g, probe);
        // Capacity was reserved for all of them.
        let _ = done.push((r, probe), GFP_KERNEL);
    }
    synchronize(&g);
    for (r, probe) in done {
        r.finish(&g);
        remove_from_all(&g, probe);
        // Detached, unlisted, and a grace period passed.
        clear_record(probe);
    }
}

fn set_disabled(p: &mut KpKprobe, disabled: bool) -> Result {
    let probe = Probe::of(p);
    let g = RegGuard::lock();
    if !is_registered(&g, probe) {
        return Err(EINVAL);
    }
    // SAFETY: a known probe is live under the lock.
    let probe = unsafe { &*probe };
    if p.flags & KP_FLAG_GONE != 0 {
        return Err(EINVAL);
    }
    let pp = probe.point.load(Ordering::Relaxed);
    if !disabled && probe.step && !pp.is_null() {
        // SAFETY: points are live under the lock.
        let point = unsafe { &*pp };
        optimize::unoptimize(&g, point)?;
        // Before its handlers can run (see `Point::post`).
        point.post.store(true, Ordering::Relaxed);
    }
    probe.disabled.store(disabled, Ordering::Relaxed);
    let (set, clear) = if disabled {
        (KP_FLAG_DISABLED, 0)
    } else {
        (0, KP_FLAG_DISABLED)
    };
    // SAFETY: a registered probe's struct is live; lock held.
    unsafe { update_flags(p, set, clear) };
    if disabled && probe.step && !pp.is_null() {
        // SAFETY: points are live under the lock.
        refresh_post(unsafe { &*pp });
    }
    if !pp.is_null() {
        // SAFETY: points are live under the lock.
        let point = unsafe { &*pp };
        if let Err(e) = sync_armed(&g, point) {
            if !disabled {
                // Not armed (someone else's patch is there now, or no
                // memory): the probe stays disabled, as it was.
                probe.disabled.store(true, Ordering::Relaxed);
                // SAFETY: as above.
                unsafe { update_flags(p, KP_FLAG_DISABLED, 0) };
                if probe.step {
                    refresh_post(point);
                }
            }
            return Err(e);
        }
    }
    if disabled {
        // On return the handlers no longer run anywhere.
        synchronize(&g);
    }
    Ok(())
}

/// `kp_disable_kprobe()`: keeps the probe registered but stops its handlers;
/// the original instruction is restored when no enabled probe is left there.
///
/// # Safety
///
/// `p` is null or a registered probe.
#[no_mangle]
pub unsafe extern "C" fn kp_disable_kprobe(p: *mut KpKprobe) -> kernel::ffi::c_int {
    // SAFETY: per the function's contract.
    match unsafe { p.as_mut() }
        .ok_or(EINVAL)
        .and_then(|p| set_disabled(p, true))
    {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// `kp_enable_kprobe()`.
///
/// # Safety
///
/// `p` is null or a registered probe.
#[no_mangle]
pub unsafe extern "C" fn kp_enable_kprobe(p: *mut KpKprobe) -> kernel::ffi::c_int {
    // SAFETY: per the function's contract.
    match unsafe { p.as_mut() }
        .ok_or(EINVAL)
        .and_then(|p| set_disabled(p, false))
    {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// Arms (true) or disarms (false) every probe at once (debugfs `enabled`).
pub(crate) fn set_global_enabled(on: bool) -> Result {
    let g = RegGuard::lock();
    GLOBAL_ENABLED.store(on, Ordering::Relaxed);
    let mut r = Ok(());
    for_each_point(&g, |point| {
        if let Err(e) = sync_armed(&g, point) {
            r = Err(e);
        }
    });
    r
}

/// Whether probes are globally enabled.
pub(crate) fn global_enabled() -> bool {
    GLOBAL_ENABLED.load(Ordering::Relaxed)
}

/// A module is going away: its text loses its probes (they become GONE, the
/// client unregisters them later), and probes whose handlers or descriptions
/// live in it are unregistered (their owner forgot to).
pub(crate) fn module_going(module: *mut kernel::ffi::c_void) {
    let g = RegGuard::lock();
    let within = |a: usize| crate::within_module(a, module);
    // Probes owned by the going module: unregister them.
    loop {
        let mut victim: *mut Probe = null_mut();
        for_each_probe(&g, |q| {
            // SAFETY: the client's struct is valid while registered.
            if owner_addrs(unsafe { &*q.user() })
                .iter()
                .any(|&a| a != 0 && within(a))
            {
                victim = q as *const Probe as *mut Probe;
            }
        });
        if victim.is_null() {
            break;
        }
        // SAFETY: a listed record is live.
        let user = unsafe { (*victim).user() };
        pr_warn!(
            "module unloading with probe {:p} still registered; unregistering it\n",
            user
        );
        // The struct is valid while registered (module memory stays until
        // after this notifier). A kretprobe's pool must stop calling its
        // handler too, wherever its struct is.
        crate::kretprobe::forget_if_kretprobe(&g, user);
        drop_probe(&g, victim);
    }
    // Points in the going module's text: mark their probes GONE.
    loop {
        let mut gone: Option<&'static Point> = None;
        for_each_point(&g, |point| {
            if within(point.addr) {
                gone = Some(point);
            }
        });
        let Some(point) = gone else { break };
        for probe in point.probes() {
            probe.point.store(null_mut(), Ordering::Release);
            // SAFETY: the user struct is valid while registered.
            unsafe { update_flags(probe.user(), KP_FLAG_GONE, 0) };
        }
        // The text is about to be freed: no need to restore it, but make
        // sure no CPU still runs the copy before the slot is reused. An
        // ftrace site leaves the filter now (ftrace drops the module's
        // records after this notifier).
        if point.ftrace && point.armed.load(Ordering::Relaxed) {
            let _ = disarm_point(&g, point);
            point.armed.store(false, Ordering::Relaxed);
        }
        optimize::forget(&g, point);
        unlink(&g, point);
        free_point(&g, point);
    }
    crate::ftrace::module_going(&g, module);
}

/// Unregisters every probe at engine unload. Only a client bug leaves one
/// behind (client modules keep the engine loaded while they are, and a
/// module going away loses the probes whose struct or handlers were in
/// it): a struct the client allocated, kept registered after its module
/// went. Its record is in that struct (as every hit reads it, the client
/// must not have freed it).
pub(crate) fn remove_all() {
    let g = RegGuard::lock();
    loop {
        let mut first: *mut Probe = null_mut();
        for_each_probe(&g, |q| {
            if first.is_null() {
                first = q as *const Probe as *mut Probe;
            }
        });
        if first.is_null() {
            break;
        }
        // SAFETY: listed records are live.
        let addr = unsafe { (*first).point.load(Ordering::Relaxed) };
        pr_warn!(
            "a probe (point {:p}) is still registered at engine unload; removing it\n",
            addr
        );
        drop_probe(&g, first);
    }
    // Frees lists still waiting in the retired queue.
    synchronize(&g);
}

/// One line per probe for debugfs `list`.
pub(crate) fn write_list(w: &mut impl core::fmt::Write) -> core::fmt::Result {
    let g = RegGuard::lock();
    let mut r = Ok(());
    for_each_probe(&g, |q| {
        if r.is_err() {
            return;
        }
        // SAFETY: the user struct is valid while registered.
        let u = unsafe { &*q.user() };
        let pp = q.point.load(Ordering::Relaxed);
        let addr = u.addr as usize;
        let sym = symbols::symbol_at(addr);
        r = (|| {
            // `r` for a kretprobe's entry probe, as the kernel's list shows.
            let kind = if crate::kretprobe::is_entry_probe(u) {
                'r'
            } else {
                'k'
            };
            write!(w, "{:016x}  {}  ", addr, kind)?;
            match &sym {
                Some(s) => s.write_short(w)?,
                None => write!(w, "{:#x}", addr)?,
            }
            if pp.is_null() {
                write!(w, "  [GONE]")?;
            } else if q.disabled.load(Ordering::Relaxed) {
                write!(w, "  [DISABLED]")?;
            } else {
                // SAFETY: points are live under the lock.
                let point = unsafe { &*pp };
                if point.ftrace {
                    write!(w, "  [FTRACE]")?;
                } else if point.opt.jumped() {
                    write!(w, "  [OPTIMIZED]")?;
                } else if arch::boostable(&point.insn) && !point.any_post_handler() {
                    write!(w, "  [BOOSTED]")?;
                }
            }
            writeln!(w, "  missed={}", q.missed())
        })();
    });
    r
}
