// SPDX-License-Identifier: GPL-2.0

//! Points and probe records: the `Point` of each probed address in a hash
//! table read without locks at every hit, the engine's `Probe` record in each
//! client's struct, and the chains of all registered probes (registration
//! lock). The bottom of the registry: nothing here arms, disarms or frees.

use crate::abi::{KpKprobe, KP_FLAG_OPTIMIZED, KP_FLAG_REGISTERED, KP_PRIVATE_WORDS};
use crate::arch;
use crate::lock::{RegGuard, RegLocked};
use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use kernel::prelude::*;

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
    pub(super) point: AtomicPtr<Point>,
    /// Next in the list of all probes (registration lock).
    pub(super) next_all: *mut Probe,
    /// Registered but not armed.
    pub(crate) disabled: AtomicBool,
    /// Whether the client's struct had a post or fault handler at
    /// registration ([`needs_step`]; as the kernel's kprobes decide an
    /// aggregate's post handler at registration).
    pub(super) step: bool,
    /// The entry probe of a kretprobe (registered by `crate::kretprobe`
    /// through [`super::register_kret_entry`]): its struct is the first
    /// field of a `KpKretprobe`.
    pub(crate) kret: bool,
}

const _: () = assert!(
    core::mem::size_of::<Probe>() <= core::mem::size_of::<[usize; KP_PRIVATE_WORDS]>()
        && core::mem::align_of::<Probe>() <= core::mem::align_of::<usize>()
);

/// The client struct and handler addresses of `p` (and, for a kretprobe's
/// entry probe, of the kretprobe's handlers): if a module holding any of
/// them unloads, the probe goes with it. Read when a module goes (the
/// client's struct is valid while registered), not kept per probe.
pub(super) fn owner_addrs(p: &KpKprobe, kret: bool) -> [usize; 6] {
    let (mut h, mut eh) = (0, 0);
    if kret {
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
    pub(super) fn of(p: *mut KpKprobe) -> *mut Probe {
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
    pub(super) fn nmissed(&self) -> &AtomicUsize {
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
pub(super) const LIST_TAG: usize = 1;

/// What `Point::probes` holds.
pub(super) enum Held {
    /// No probe (a point kept because its text could not be restored).
    Nothing,
    /// The only probe, while no second one ever joined.
    One(*mut Probe),
    /// The probes, once a second one joined.
    List(*mut ProbeList),
}

impl Held {
    pub(super) fn decode(v: *mut u8) -> Held {
        if v.is_null() {
            Held::Nothing
        } else if v as usize & LIST_TAG != 0 {
            Held::List(v.wrapping_sub(LIST_TAG).cast())
        } else {
            Held::One(v.cast())
        }
    }

    pub(super) fn list(l: *mut ProbeList) -> *mut u8 {
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
    pub(super) probes: AtomicPtr<u8>,
    /// Next point in the hash chain.
    pub(super) next: AtomicPtr<Point>,
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
    pub(super) fn kp_helper_point_cache_init(size: usize, align: usize) -> kernel::ffi::c_int;
    pub(super) fn kp_helper_point_cache_exit();
    pub(super) fn kp_helper_point_alloc() -> *mut kernel::ffi::c_void;
    pub(super) fn kp_helper_point_free(p: *mut kernel::ffi::c_void);
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
pub(super) fn alloc_point(point: Point) -> Result<*mut Point> {
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

    pub(super) fn held(&self) -> Held {
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
    pub(super) fn list(&self) -> Option<&ProbeList> {
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

pub(super) const HASH_BITS: u32 = 10;

pub(super) static TABLE: [AtomicPtr<Point>; 1 << HASH_BITS] =
    [const { AtomicPtr::new(null_mut()) }; 1 << HASH_BITS];

pub(super) fn bucket(addr: usize) -> &'static AtomicPtr<Point> {
    let h = (addr as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - HASH_BITS);
    &TABLE[h as usize]
}

pub(super) const ALL_BITS: u32 = 8;

/// Every registered probe, GONE ones included, in chains hashed by the
/// record's address (registration lock): telling a registered record from a
/// stale or copied struct and dropping one stay cheap with thousands
/// registered.
pub(super) static ALL: RegLocked<[*mut Probe; 1 << ALL_BITS]> =
    RegLocked::new([null_mut(); 1 << ALL_BITS]);

/// The chain head of `probe`'s bucket in `ALL`. Registration lock held.
pub(super) fn all_head(g: &RegGuard, probe: *const Probe) -> *mut *mut Probe {
    let h = (probe as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - ALL_BITS);
    // `h` is below the bucket count (the top ALL_BITS bits).
    ALL.get(g).cast::<*mut Probe>().wrapping_add(h as usize)
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
pub(super) fn for_each_probe(g: &RegGuard, mut f: impl FnMut(&Probe)) {
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

pub(super) fn add_to_all(g: &RegGuard, probe: *mut Probe) {
    let head = all_head(g, probe);
    // SAFETY: registration lock held; `probe` is live.
    unsafe {
        (*probe).next_all = *head;
        *head = probe;
    }
}

/// The link in `ALL` that points to `probe`, if it is there (whatever
/// `probe` is: only listed records are dereferenced).
pub(super) fn all_link(g: &RegGuard, probe: *const Probe) -> Option<*mut *mut Probe> {
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

pub(super) fn remove_from_all(g: &RegGuard, probe: *mut Probe) {
    if let Some(link) = all_link(g, probe) {
        // SAFETY: registration lock held; `probe` is listed, hence live.
        unsafe { *link = (*probe).next_all };
    }
}

/// Zeroes the record in the client's struct and clears
/// `KP_FLAG_REGISTERED` (after unregistration, or a failed registration).
pub(super) fn clear_record(probe: *mut Probe) {
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

/// Whether `probe` is a registered probe's record. Registration lock held.
pub(super) fn is_registered(g: &RegGuard, probe: *const Probe) -> bool {
    all_link(g, probe).is_some()
}
