// SPDX-License-Identifier: GPL-2.0

//! Return probes on the function graph tracer's per-task shadow stack.
//!
//! Where a kretprobe'd function's entry is an ftrace call site, its calls
//! keep their per-call state on the shadow stack of the kernel's function
//! graph infrastructure (`kernel/trace/fgraph.c`, several users at once
//! since 6.9) instead of in the kretprobe's fixed pool, so any number of
//! tasks can sleep inside the function with nothing to run out of. Why
//! fgraph and not an engine-owned per-task stack: a module cannot add a
//! field to `task_struct`, so an own stack needs a task-keyed table looked
//! up on every entry and return and allocated in the hit path (where an
//! allocation may fail, or be impossible in NMI), and its return
//! trampoline would be one more address every unwinder stops at; fgraph's
//! `return_to_handler` is the one every unwinder of the kernel already
//! translates back to the real caller (`ftrace_graph_ret_addr()`: ORC,
//! frame pointers, "guess" on x86_64, frame records on arm64,
//! `/proc/PID/stack`), and its stacks are allocated for every task when the
//! first graph user registers.
//!
//! 6.12's graph callbacks get no registers (that came with 6.14), and the
//! kretprobe's entry probe has them all, so the engine enters fgraph
//! itself, from the entry probe, the way an arch's `prepare_ftrace_return()`
//! does from ftrace (`kp_graph_push()`, `src/fgraph.c`): fgraph pushes a
//! frame for the call (the real return address, its slot or frame pointer),
//! the engine's graph entry callback reserves this call's record, the entry
//! handler fills it in, and the return address becomes `return_to_handler`.
//! On return fgraph calls [`kp_graph_leave`] with the return value. The
//! engine's `fgraph_ops` filters one function of its own that nothing
//! calls (`kp_graph_proxy()`, the function its frames stand for), so
//! ftrace never sends fgraph a real call for it: the probed functions keep
//! their ftrace sites to the engine alone (x86_64: the direct call), and
//! the cost per call is fgraph's push and pop. A kretprobe whose call
//! fgraph does not take (shadow stack full, tracing paused, the tracer shut
//! down) uses its pool for that call.
//!
//! Registers at return: the return value (x86_64 `ax`, arm64 `x0`), the
//! instruction pointer (the real return address), the stack pointer as
//! after the return, and the frame pointer (x86_64 `bp`, arm64 `x29`, both
//! callee-saved: taken at the entry). Everything else reads 0. A record
//! runs its handler only while its kretprobe's registration (a
//! generation, random per engine load) is live: unregistering removes the
//! generation and waits a grace period.

use crate::abi::{KpKretprobe, KpKretprobeInstance};
use crate::arch;
use crate::arch::{Entries, Returns};
use crate::lock::{RegGuard, RegLocked};
use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use kernel::bindings;
use kernel::ffi::{c_int, c_ulong, c_void};
use kernel::prelude::*;

/// The largest record fgraph reserves per call and user
/// (`FGRAPH_MAX_DATA_SIZE`).
const MAX_RECORD: usize = 256;

/// A record's states.
const PENDING: u32 = 0;
const ARMED: u32 = 1;

/// One call's record on the shadow stack.
#[repr(C)]
struct Rec {
    /// Bytes of this record, header and data included.
    len: u32,
    /// [`PENDING`] or [`ARMED`]; only the owning task writes it.
    state: u32,
    /// The registration this record belongs to.
    gen: u64,
    /// The frame pointer at the entry (callee-saved: the same at return).
    entry_fp: usize,
    header: KpKretprobeInstance,
    // The client's data follows.
}

const REC_SIZE: usize = core::mem::size_of::<Rec>();

/// `struct kp_graph_push` (`src/helpers.h`).
#[repr(C)]
struct Push {
    size: c_int,
    record: *mut c_void,
}

/// The live registrations' generations, sorted; replaced whole (read with
/// interrupts off, freed a grace period after being replaced).
struct Live {
    gens: KVec<u64>,
}

static LIVE: AtomicPtr<Live> = AtomicPtr::new(null_mut());
/// Generations of registrations (0: none). Seeded at random at load: a
/// record left on a shadow stack by an earlier load of the engine (whose
/// `fgraph_ops` may have had the same index) must not match.
static GEN: AtomicU64 = AtomicU64::new(1);
/// Kretprobes served; the `fgraph_ops` is registered while non-zero
/// (registration lock).
static USERS: RegLocked<usize> = RegLocked::new(0);
/// Generation lists replaced without waiting (registration lock): freed
/// after the next grace period the engine waits for.
static RETIRED: RegLocked<KVec<usize>> = RegLocked::new(KVec::new());
/// Whether the kernel functions this needs were found at load.
static AVAILABLE: AtomicBool = AtomicBool::new(false);
/// The proxy's ftrace site (the ops' filter).
static PROXY_SITE: AtomicUsize = AtomicUsize::new(0);

/// Returns served through the shadow stack since load (`stats`).
pub(crate) static RETURNS: AtomicUsize = AtomicUsize::new(0);

extern "C" {
    fn kp_graph_init(
        reg: usize,
        unreg: usize,
        enter: usize,
        reserve: usize,
        retrieve: usize,
    ) -> bool;
    fn kp_graph_register(proxy_site: c_ulong) -> c_int;
    fn kp_graph_unregister();
    fn kp_graph_exit();
    fn kp_graph_push(p: *mut Push, ret: c_ulong, retp: *mut c_ulong, fp: c_ulong) -> c_int;
    fn kp_graph_proxy_addr() -> c_ulong;
    fn get_random_u64() -> u64;
}

/// Finds what this needs. At engine load, after `symbols::init`.
pub(crate) fn init() {
    use crate::symbols::lookup_function as f;
    use kernel::c_str;
    if crate::symbols::return_to_handler() == 0 {
        return;
    }
    // SAFETY: plain call.
    let proxy = unsafe { kp_graph_proxy_addr() };
    let Some(site) = crate::symbols::ftrace_location_range(proxy, proxy + 16).filter(|&s| s != 0)
    else {
        return;
    };
    let (Some(reg), Some(unreg), Some(enter), Some(reserve), Some(retrieve)) = (
        f(c_str!("register_ftrace_graph")),
        f(c_str!("unregister_ftrace_graph")),
        f(c_str!("function_graph_enter")),
        f(c_str!("fgraph_reserve_data")),
        f(c_str!("fgraph_retrieve_data")),
    ) else {
        return;
    };
    PROXY_SITE.store(site, Ordering::Relaxed);
    // SAFETY: plain call.
    GEN.store(unsafe { get_random_u64() } | 1, Ordering::Relaxed);
    // SAFETY: the functions of those names; false without
    // FUNCTION_GRAPH_RETVAL (no return value for the handlers).
    let ok = unsafe { kp_graph_init(reg, unreg, enter, reserve, retrieve) };
    AVAILABLE.store(ok, Ordering::Release);
    if !ok {
        pr_info!("return probes use instance pools only (no FUNCTION_GRAPH_RETVAL)\n");
    }
}

fn available() -> bool {
    AVAILABLE.load(Ordering::Acquire)
}

/// At engine unload, every kretprobe gone: the `fgraph_ops` is
/// unregistered already (it went with the last kretprobe); this makes
/// sure.
pub(crate) fn stop() {
    let g = RegGuard::lock();
    // SAFETY: `USERS` is the registration lock's.
    let n = unsafe { &mut *USERS.get(&g) };
    if *n > 0 {
        // SAFETY: the ops is registered.
        unsafe { kp_graph_unregister() };
        *n = 0;
    }
}

/// At engine unload, after `synchronize_rcu_tasks()` (fgraph reads the
/// callback pointers without holding anything, so a task may have been
/// inside them until then): frees what is left.
pub(crate) fn exit() {
    // SAFETY: the ops is unregistered (`stop`).
    unsafe { kp_graph_exit() };
    let g = RegGuard::lock();
    free_retired(&g);
    let t = LIVE.swap(null_mut(), Ordering::AcqRel);
    if !t.is_null() {
        // SAFETY: no callback runs any more.
        drop(unsafe { KBox::from_raw(t) });
    }
}

/// Frees the retired lists. Registration lock held, a grace period after
/// they were replaced.
fn free_retired(g: &RegGuard) {
    // SAFETY: `RETIRED` is the registration lock's.
    let r = unsafe { &mut *RETIRED.get(g) };
    for &t in core::mem::take(r).iter() {
        // SAFETY: replaced a grace period ago: nobody reads it.
        drop(unsafe { KBox::from_raw(t as *mut Live) });
    }
}

/// A kretprobe's registration on the shadow stack.
#[derive(Clone, Copy)]
pub(crate) struct Reg {
    gen: u64,
    len: usize,
}

fn current(_g: &RegGuard) -> &'static [u64] {
    let t = LIVE.load(Ordering::Acquire);
    if t.is_null() {
        &[]
    } else {
        // SAFETY: only replaced under the registration lock, which the
        // caller holds.
        unsafe { &(*t).gens }
    }
}

/// Publishes `gens` as the live list. With `wait`, returns a grace period
/// later (no return callback reads the old list or runs a handler it
/// allowed) and frees the old ones; else the old one waits for the next
/// such wait. Registration lock held.
fn publish(g: &RegGuard, gens: KVec<u64>, wait: bool) -> Result {
    let new = KBox::into_raw(KBox::new(Live { gens }, GFP_KERNEL)?);
    let old = LIVE.swap(new, Ordering::AcqRel);
    if !old.is_null() && !wait {
        // SAFETY: `RETIRED` is the registration lock's.
        let r = unsafe { &mut *RETIRED.get(g) };
        if r.push(old as usize, GFP_KERNEL).is_ok() {
            return Ok(());
        }
    }
    // Return callbacks read the list with interrupts off.
    // SAFETY: process context.
    unsafe { bindings::synchronize_rcu() };
    if !old.is_null() {
        // SAFETY: nobody reads it any more.
        drop(unsafe { KBox::from_raw(old) });
    }
    free_retired(g);
    Ok(())
}

/// Serves `rp`'s returns through the shadow stack when its function's
/// entry is an ftrace site (elsewhere the pool serves, as before) and its
/// data fits a record. `None`: its pool only. Registration lock held.
pub(crate) fn attach(g: &RegGuard, start: usize, size: usize, data_size: usize) -> Option<Reg> {
    if !available() {
        return None;
    }
    let entry = arch::Arch::entry_probe_address(g, start, size);
    crate::symbols::ftrace_location_range(start, entry.checked_sub(1)?)
        .filter(|&s| s != 0 && entry > start)?;
    let len = REC_SIZE.checked_add(data_size)?.checked_add(7)? & !7;
    if len > MAX_RECORD {
        return None;
    }
    let mut gen = GEN.fetch_add(1, Ordering::Relaxed);
    if gen == 0 {
        gen = GEN.fetch_add(1, Ordering::Relaxed);
    }
    let old = current(g);
    let mut v = KVec::with_capacity(old.len() + 1, GFP_KERNEL).ok()?;
    // Sorted (generations grow, but may wrap once).
    let pos = old.partition_point(|&x| x < gen);
    for &x in old.iter().take(pos) {
        let _ = v.push(x, GFP_KERNEL);
    }
    let _ = v.push(gen, GFP_KERNEL);
    for &x in old.iter().skip(pos) {
        let _ = v.push(x, GFP_KERNEL);
    }
    // SAFETY: `USERS` is the registration lock's.
    let n = unsafe { &mut *USERS.get(g) };
    // SAFETY: the proxy's ftrace site.
    if *n == 0 && unsafe { kp_graph_register(PROXY_SITE.load(Ordering::Relaxed) as c_ulong) } != 0 {
        return None;
    }
    *n += 1;
    // Nothing can hold a record of this generation yet: no wait.
    if publish(g, v, false).is_err() {
        release(g);
        return None;
    }
    Some(Reg { gen, len })
}

/// One user fewer; the ops goes with the last. Registration lock held.
fn release(g: &RegGuard) {
    // SAFETY: `USERS` is the registration lock's.
    let n = unsafe { &mut *USERS.get(g) };
    if *n == 1 {
        // SAFETY: registered while there are users.
        unsafe { kp_graph_unregister() };
    }
    *n = n.saturating_sub(1);
}

/// Stops serving a registration: its records still on tasks' shadow
/// stacks run no handler after this returns (a grace period). The entry
/// probe is already gone. Registration lock held.
pub(crate) fn detach(g: &RegGuard, r: Reg) {
    let old = current(g);
    let Ok(pos) = old.binary_search(&r.gen) else {
        return;
    };
    let Ok(mut v) = KVec::with_capacity(old.len(), GFP_KERNEL) else {
        // No memory for a new list: stop the handlers in place.
        detach_in_place(pos);
        release(g);
        return;
    };
    for (i, &x) in old.iter().enumerate() {
        if i != pos {
            let _ = v.push(x, GFP_KERNEL);
        }
    }
    if publish(g, v, true).is_err() {
        detach_in_place(pos);
    }
    release(g);
}

/// Zeroes entry `pos` of the current list (generation 0 matches no record)
/// and waits a grace period. Registration lock held.
fn detach_in_place(pos: usize) {
    let t = LIVE.load(Ordering::Acquire);
    if t.is_null() {
        return;
    }
    // SAFETY: the list is replaced only under the registration lock, which
    // the caller holds; the write is one aligned word that readers load
    // atomically (`is_live`), made through a raw pointer (others read the
    // list meanwhile: no `&mut` to it).
    unsafe {
        let gens: &KVec<u64> = &(*t).gens;
        if let Some(x) = gens.get(pos) {
            AtomicU64::from_ptr(core::ptr::from_ref(x).cast_mut()).store(0, Ordering::Release);
        }
        bindings::synchronize_rcu();
    }
}

/// Kretprobes served through the shadow stack now (registration lock).
pub(crate) fn probes(g: &RegGuard) -> usize {
    current(g).iter().filter(|&&x| x != 0).count()
}

/// Whether generation `gen` is live. Interrupts off.
fn is_live(gen: u64) -> bool {
    let t = LIVE.load(Ordering::Acquire);
    if t.is_null() || gen == 0 {
        return false;
    }
    // SAFETY: freed only a grace period after being replaced; the caller
    // runs with interrupts off.
    let gens = unsafe { &(*t).gens };
    let load = |x: &u64| {
        // SAFETY: an aligned word of a live list.
        unsafe { AtomicU64::from_ptr(core::ptr::from_ref(x).cast_mut()) }.load(Ordering::Acquire)
    };
    // Sorted but for entries zeroed in place (`detach_in_place`, out of
    // memory): a miss looks again the long way.
    gens.binary_search_by(|x| load(x).cmp(&gen)).is_ok() || gens.iter().any(|x| load(x) == gen)
}

/// At a kretprobe's entry probe: pushes this call on the current task's
/// shadow stack with a record for registration `reg`, and sends the
/// function's return to `return_to_handler`. The record's header, for the
/// entry handler; `None`: fgraph did not take the call (the pool serves
/// it). Interrupts off (trap path).
pub(crate) fn push(
    reg: Reg,
    rp: *mut KpKretprobe,
    regs: &mut bindings::pt_regs,
) -> Option<&'static mut KpKretprobeInstance> {
    let rth = crate::symbols::return_to_handler();
    let ret = arch::Arch::kret_return_address(regs);
    let retp = arch::Arch::kret_graph_retp(regs);
    let fp = arch::Arch::kret_frame_pointer(regs);
    let mut p = Push {
        size: reg.len as c_int,
        record: null_mut(),
    };
    // SAFETY: the current task's call at its entry: `ret` is its return
    // address, kept at `retp` (x86_64) / with frame pointer `fp` (arm64).
    if unsafe { kp_graph_push(&mut p, ret, retp as *mut c_ulong, fp) } != 0 {
        return None;
    }
    // Pushed: the return goes through fgraph from now on.
    arch::Arch::kret_hijack(regs, rth);
    let r = p.record.cast::<Rec>();
    if r.is_null() {
        // Another graph user's frame, no room left for ours.
        // SAFETY: `rp` is live (its entry probe is running).
        unsafe { crate::kretprobe::count_missed(rp, &crate::missed::KRET_NO_INSTANCE) };
        return None;
    }
    // A function that fgraph's own return hook already returns through
    // (the function graph tracer came first): the real caller is on the
    // shadow stack.
    let real = if ret == rth {
        crate::symbols::graph_return_address(ret, retp).unwrap_or(ret)
    } else {
        ret
    };
    // SAFETY: `len` bytes reserved for this call on the current task's
    // shadow stack, which live until the function returns; 8-aligned.
    let r = unsafe { &mut *r };
    r.len = reg.len as u32;
    r.state = PENDING;
    r.gen = reg.gen;
    r.entry_fp = fp;
    r.header.rp = rp;
    r.header.fp = arch::regs::sp(regs);
    r.header.ret_addr = real;
    Some(&mut r.header)
}

/// Marks a pushed record armed: its return runs the handler.
pub(crate) fn arm(h: &mut KpKretprobeInstance) {
    let off = REC_SIZE - core::mem::size_of::<KpKretprobeInstance>();
    // SAFETY: `h` is the header of a `Rec` (from `push`), `off` bytes in.
    let r = unsafe { &mut *core::ptr::from_mut(h).cast::<u8>().sub(off).cast::<Rec>() };
    r.state = ARMED;
}

/// Zeroes `slot` a word at a time and returns it. Not `mem::zeroed()`: an
/// all-zero struct this size is a call to `memset()`, which x86_64 runs as
/// `rep stosb`, one emulated store per byte under QEMU's TCG (12% of QEMU's
/// time in the kretprobe bench row, more than the rest of the return path:
/// `scripts/bench-profile.sh`). Volatile stores are not merged back into a
/// `memset()`.
#[inline(always)]
fn zeroed_regs(slot: &mut core::mem::MaybeUninit<bindings::pt_regs>) -> &mut bindings::pt_regs {
    const WORDS: usize = core::mem::size_of::<bindings::pt_regs>() / 8;
    const _: () = assert!(core::mem::size_of::<bindings::pt_regs>() % 8 == 0);
    let p = slot.as_mut_ptr().cast::<u64>();
    for i in 0..WORDS {
        // SAFETY: `i` words into `slot`, which holds `WORDS` of them (and
        // `pt_regs` is 8-byte aligned: all its fields are 64-bit or paired).
        unsafe { core::ptr::write_volatile(p.add(i), 0) };
    }
    // SAFETY: every byte is written; all-zero is a valid `pt_regs`.
    unsafe { slot.assume_init_mut() }
}

/// The graph return callback (`src/fgraph.c`, interrupts off): runs the
/// handler of this call's record if armed and still registered.
#[no_mangle]
pub(crate) extern "C" fn kp_graph_leave(retval: c_ulong, block: *mut c_void, size: c_int) {
    if block.is_null() || (size.max(0) as usize) < REC_SIZE {
        return;
    }
    // SAFETY: the record `push` reserved for this call (fgraph hands back
    // what our entry callback reserved), at least `REC_SIZE` bytes.
    let r = unsafe { &mut *block.cast::<Rec>() };
    if r.state != ARMED {
        return;
    }
    r.state = PENDING;
    if !is_live(r.gen) {
        return;
    }
    RETURNS.fetch_add(1, Ordering::Relaxed);
    let rp = r.header.rp;
    // SAFETY: a registered kretprobe (its generation is live; unregistering
    // waits a grace period after retiring it).
    let Some(h) = (unsafe { (*rp).handler }) else {
        return;
    };
    let mut slot = core::mem::MaybeUninit::<bindings::pt_regs>::uninit();
    let regs = zeroed_regs(&mut slot);
    arch::Arch::kret_graph_regs(regs, r.header.fp, r.entry_fp, r.header.ret_addr, retval);
    let fp = r.entry_fp;
    // SAFETY: interrupts are off; `rp` is live (above).
    unsafe {
        crate::kretprobe::run_return_handler(rp, || {
            // SAFETY: the handler contract; the frame record the arch
            // builds shows the real caller to unwinders in the handler.
            arch::Arch::kret_call_handler(h, &mut r.header, regs, fp)
        })
    };
}
