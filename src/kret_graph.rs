// SPDX-License-Identifier: GPL-2.0

//! Return probes on the function graph tracer's per-task shadow stack.
//!
//! Where a kretprobe'd function's entry is an ftrace call site, its calls
//! keep their per-call state on the shadow stack of the kernel's function
//! graph infrastructure (`kernel/trace/fgraph.c`, several users at once
//! since 6.9) instead of in the kretprobe's fixed pool, so any number of
//! tasks can sleep inside the function with nothing to run out of. The
//! engine registers one `fgraph_ops` (`src/fgraph.c`) whose filter holds
//! these sites. Why fgraph and not an engine-owned per-task stack: a
//! module cannot add a field to `task_struct`, so an own stack needs a
//! task-keyed table looked up on every entry and return and allocated in
//! the hit path (where an allocation may fail, or be impossible in NMI),
//! and its return trampoline would be one more address every unwinder
//! stops at; fgraph's `return_to_handler` is the one every unwinder of the
//! kernel already translates back to the real caller
//! (`ftrace_graph_ret_addr()`: ORC, frame pointers, "guess" on x86_64,
//! frame records on arm64, `/proc/PID/stack`), and its stacks are
//! allocated for every task when the first graph user registers.
//!
//! 6.12's graph callbacks get no registers (that came with 6.14), so the
//! work is split:
//!
//! 1. At the ftrace site, the graph entry callback ([`kp_graph_enter`])
//!    reserves one block of per-call data for every kretprobe on that
//!    function (the layout comes from the current [`Table`]) and marks
//!    each record *pending*; fgraph hijacks the return.
//! 2. The kretprobe's entry probe runs right after (x86_64: the site's
//!    direct call to the engine runs after ftrace's callbacks; arm64: the
//!    BRK sits on the first instruction after the site) with the full
//!    registers: [`claim`] finds this call's frame on top of the shadow
//!    stack (same function, same return-address slot or frame pointer,
//!    `return_to_handler` as the return address), and the entry handler
//!    fills the record in; the record becomes *armed*.
//! 3. On return fgraph calls [`kp_graph_leave`] with the return value;
//!    armed records of kretprobes still registered run their handler.
//!
//! When step 2 finds no frame (fgraph skipped the call: shadow stack full,
//! tracing paused, recursion; or the engine's callback ran before fgraph's)
//! the kretprobe falls back to its instance pool, as at every other entry.
//!
//! Registers at return: the return value (x86_64 `ax`, arm64 `x0`), the
//! instruction pointer (the real return address), the stack pointer as
//! after the return, and the frame pointer (x86_64 `bp`, arm64 `x29`, both
//! callee-saved: taken at the entry). Everything else reads 0. The
//! records stay valid only while the kretprobe is registered: a record
//! carries the registration's generation, checked against the current
//! [`Table`] before its handler runs, and unregistering waits a grace
//! period after removing it.

use crate::abi::{KpKretprobe, KpKretprobeInstance};
use crate::arch;
use crate::arch::{Entries, Returns};
use crate::lock::{RegGuard, RegLocked};
use crate::percpu::{stage, Cpu, Frame};
use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use kernel::bindings;
use kernel::ffi::{c_int, c_ulong, c_void};
use kernel::prelude::*;

/// The largest block fgraph reserves per call and user
/// (`FGRAPH_MAX_DATA_SIZE`).
const MAX_BLOCK: usize = 256;
/// Kretprobes per function the shadow stack serves (more use their pool).
const MAX_RECS: usize = 4;

/// A record's states.
const PENDING: u32 = 0;
const ARMED: u32 = 1;

/// One kretprobe's per-call record in a shadow-stack block.
#[repr(C)]
struct Rec {
    /// Bytes of this record, header and data included (multiple of 8).
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

/// A kretprobe's place in a function's layout.
#[derive(Clone, Copy)]
struct Tpl {
    rp: *mut KpKretprobe,
    gen: u64,
    len: u32,
}

/// One function whose returns the shadow stack serves.
#[derive(Clone, Copy)]
struct Site {
    /// The ftrace site (what fgraph reports as the function).
    ip: usize,
    n: usize,
    tpl: [Tpl; MAX_RECS],
}

impl Site {
    fn size(&self) -> usize {
        self.tpl[..self.n].iter().map(|t| t.len as usize).sum()
    }
}

/// The current layout, sorted by `ip`; replaced whole (read under
/// preemption off, freed a grace period after being replaced).
struct Table {
    sites: KVec<Site>,
}

static TABLE: AtomicPtr<Table> = AtomicPtr::new(null_mut());
/// Generations of registrations (0: none). Seeded at random at load: a
/// record left on a shadow stack by an earlier load of the engine (whose
/// `fgraph_ops` may have had the same index) must not match.
static GEN: AtomicU64 = AtomicU64::new(1);
/// Sites in the `fgraph_ops`' filter; registered while non-zero
/// (registration lock).
static FILTERED: RegLocked<usize> = RegLocked::new(0);
/// Layouts replaced without waiting (registration lock): freed after the
/// next grace period the engine waits for.
static RETIRED: RegLocked<KVec<usize>> = RegLocked::new(KVec::new());
/// Whether the kernel functions this needs were found at load.
static AVAILABLE: AtomicBool = AtomicBool::new(false);

/// Returns served through the shadow stack since load (`stats`).
pub(crate) static RETURNS: AtomicUsize = AtomicUsize::new(0);

extern "C" {
    fn kp_graph_init(reg: usize, unreg: usize, reserve: usize, retrieve: usize, top: usize)
        -> bool;
    fn kp_graph_add(ip: c_ulong, first: bool) -> c_int;
    fn kp_graph_remove(ip: c_ulong, last: bool);
    fn kp_graph_exit();
    fn get_random_u64() -> u64;
    fn kp_graph_reserve(size: c_int) -> *mut c_void;
    fn kp_graph_top(
        func: *mut c_ulong,
        ret: *mut c_ulong,
        retp: *mut c_ulong,
        size: *mut c_int,
    ) -> *mut c_void;
}

/// Finds what this needs. At engine load, after `symbols::init`.
pub(crate) fn init() {
    use crate::symbols::lookup_function as f;
    use kernel::c_str;
    if crate::symbols::return_to_handler() == 0 {
        return;
    }
    let (Some(reg), Some(unreg), Some(reserve), Some(retrieve), Some(top)) = (
        f(c_str!("register_ftrace_graph")),
        f(c_str!("unregister_ftrace_graph")),
        f(c_str!("fgraph_reserve_data")),
        f(c_str!("fgraph_retrieve_data")),
        f(c_str!("ftrace_graph_get_ret_stack")),
    ) else {
        return;
    };
    // SAFETY: plain call.
    GEN.store(unsafe { get_random_u64() } | 1, Ordering::Relaxed);
    // SAFETY: the functions of those names; false without
    // FUNCTION_GRAPH_RETVAL (no return value for the handlers).
    let ok = unsafe { kp_graph_init(reg, unreg, reserve, retrieve, top) };
    AVAILABLE.store(ok, Ordering::Release);
    if !ok {
        pr_info!("return probes use instance pools only (no FUNCTION_GRAPH_RETVAL)\n");
    }
}

/// Whether return probes can use the shadow stack on this kernel.
pub(crate) fn available() -> bool {
    AVAILABLE.load(Ordering::Acquire)
}

/// At engine unload, every kretprobe gone: the `fgraph_ops` is
/// unregistered already (its last site went with the last kretprobe);
/// this makes sure.
pub(crate) fn stop() {
    let g = RegGuard::lock();
    // SAFETY: `FILTERED` is the registration lock's.
    let n = unsafe { &mut *FILTERED.get(&g) };
    if *n > 0 {
        // SAFETY: the ops is registered: unregisters it.
        unsafe { kp_graph_remove(0, true) };
        *n = 0;
    }
}

/// At engine unload, after `synchronize_rcu_tasks()` (fgraph reads the
/// callback pointers without holding anything, so a task may have been
/// inside them until then): frees the layout.
pub(crate) fn exit() {
    // SAFETY: the ops is unregistered (`stop`).
    unsafe { kp_graph_exit() };
    let g = RegGuard::lock();
    free_retired(&g);
    let t = TABLE.swap(null_mut(), Ordering::AcqRel);
    if !t.is_null() {
        // SAFETY: no callback runs any more.
        drop(unsafe { KBox::from_raw(t) });
    }
}

/// Frees the retired layouts. Registration lock held, a grace period after
/// they were replaced.
fn free_retired(g: &RegGuard) {
    // SAFETY: `RETIRED` is the registration lock's.
    let r = unsafe { &mut *RETIRED.get(g) };
    for &t in core::mem::take(r).iter() {
        // SAFETY: replaced a grace period ago: nobody reads it.
        drop(unsafe { KBox::from_raw(t as *mut Table) });
    }
}

/// A kretprobe's registration on the shadow stack.
#[derive(Clone, Copy)]
pub(crate) struct Reg {
    pub(crate) gen: u64,
    pub(crate) site: usize,
}

fn current(_g: &RegGuard) -> &'static [Site] {
    let t = TABLE.load(Ordering::Acquire);
    if t.is_null() {
        &[]
    } else {
        // SAFETY: only replaced under the registration lock, which the
        // caller holds.
        unsafe { &(*t).sites }
    }
}

/// Publishes `sites` as the layout. With `wait`, returns a grace period
/// later (no callback reads the old layout or runs a handler it allowed)
/// and frees the old ones; else the old one waits for the next such wait.
/// Registration lock held.
fn publish(g: &RegGuard, sites: KVec<Site>, wait: bool) -> Result {
    let new = KBox::into_raw(KBox::new(Table { sites }, GFP_KERNEL)?);
    let old = TABLE.swap(new, Ordering::AcqRel);
    if old.is_null() {
        return Ok(());
    }
    if !wait {
        // SAFETY: `RETIRED` is the registration lock's.
        let r = unsafe { &mut *RETIRED.get(g) };
        if r.push(old as usize, GFP_KERNEL).is_ok() {
            return Ok(());
        }
    }
    // Callbacks that read the old table run with preemption off.
    // SAFETY: process context.
    unsafe { bindings::synchronize_rcu() };
    // SAFETY: nobody reads it any more.
    drop(unsafe { KBox::from_raw(old) });
    free_retired(g);
    Ok(())
}

/// Puts `site` in the ops' filter, registering the ops with it when it is
/// the first. Registration lock held.
fn filter_add(g: &RegGuard, site: usize) -> Result {
    // SAFETY: `FILTERED` is the registration lock's.
    let n = unsafe { &mut *FILTERED.get(g) };
    // SAFETY: an ftrace site.
    let r = unsafe { kp_graph_add(site as c_ulong, *n == 0) };
    if r != 0 {
        return Err(Error::from_errno(r));
    }
    *n += 1;
    Ok(())
}

/// Takes `site` out of the ops' filter; the last one goes by
/// unregistering the ops (an empty filter would trace every function).
/// Registration lock held.
fn filter_remove(g: &RegGuard, site: usize) {
    // SAFETY: `FILTERED` is the registration lock's.
    let n = unsafe { &mut *FILTERED.get(g) };
    if *n == 0 {
        return;
    }
    // SAFETY: a site `filter_add` added.
    unsafe { kp_graph_remove(site as c_ulong, *n == 1) };
    *n -= 1;
}

/// Serves `rp`'s returns through the shadow stack when its function's
/// entry is an ftrace site and its data fits. `None`: it uses its pool
/// only. Registration lock held.
pub(crate) fn attach(
    g: &RegGuard,
    rp: *mut KpKretprobe,
    start: usize,
    size: usize,
    data_size: usize,
) -> Option<Reg> {
    if !available() {
        return None;
    }
    // The function's ftrace site, right before where its entry probe goes.
    let entry = arch::Arch::entry_probe_address(start, size);
    let site = crate::symbols::ftrace_location_range(start, entry.checked_sub(1)?)
        .filter(|&s| s != 0 && entry > start)?;
    let len = REC_SIZE.checked_add(data_size)?.checked_add(7)? & !7;
    let old = current(g);
    let pos = old.partition_point(|s| s.ip < site);
    let existing = old.get(pos).filter(|s| s.ip == site).copied();
    let mut s = existing.unwrap_or(Site {
        ip: site,
        n: 0,
        tpl: [Tpl {
            rp: null_mut(),
            gen: 0,
            len: 0,
        }; MAX_RECS],
    });
    if s.n >= MAX_RECS || s.size() + len > MAX_BLOCK {
        return None;
    }
    let mut gen = GEN.fetch_add(1, Ordering::Relaxed);
    if gen == 0 {
        gen = GEN.fetch_add(1, Ordering::Relaxed);
    }
    s.tpl[s.n] = Tpl {
        rp,
        gen,
        len: len as u32,
    };
    s.n += 1;
    let mut v = KVec::with_capacity(old.len() + 1, GFP_KERNEL).ok()?;
    for (i, x) in old.iter().enumerate() {
        if i == pos {
            let _ = v.push(s, GFP_KERNEL);
            if existing.is_some() {
                continue;
            }
        }
        let _ = v.push(*x, GFP_KERNEL);
    }
    if pos == old.len() {
        let _ = v.push(s, GFP_KERNEL);
    }
    if existing.is_none() && filter_add(g, site).is_err() {
        return None;
    }
    // Nothing can hold a record of this generation yet: no wait.
    if publish(g, v, false).is_err() {
        if existing.is_none() {
            filter_remove(g, site);
        }
        return None;
    }
    Some(Reg { gen, site })
}

/// Stops serving a registration: its records still on tasks' shadow
/// stacks run no handler after this returns (a grace period). The entry
/// probe is already gone or disabled. Registration lock held.
pub(crate) fn detach(g: &RegGuard, r: Reg) {
    let old = current(g);
    let Some(pos) = old.iter().position(|s| s.ip == r.site) else {
        return;
    };
    let mut s = old[pos];
    let Some(i) = s.tpl[..s.n].iter().position(|t| t.gen == r.gen) else {
        return;
    };
    s.tpl.copy_within(i + 1..s.n, i);
    s.n -= 1;
    let Ok(mut v) = KVec::with_capacity(old.len(), GFP_KERNEL) else {
        // No memory for a new layout: stop the handlers in place.
        detach_in_place(pos, i);
        return;
    };
    for (j, x) in old.iter().enumerate() {
        if j != pos || s.n > 0 {
            let _ = v.push(if j == pos { s } else { *x }, GFP_KERNEL);
        }
    }
    // The layout first (a grace period: no handler of this registration
    // runs after it), then the filter.
    if publish(g, v, true).is_err() {
        // The old layout stays, its template zeroed.
        detach_in_place(pos, i);
        return;
    }
    if s.n == 0 {
        filter_remove(g, r.site);
    }
}

/// A module is going away: its functions leave the layout and the filter
/// while ftrace still knows their sites (kretprobes on them are gone
/// already: their entry probes are). Later detaches find nothing to do.
pub(crate) fn module_going(module: *mut c_void) {
    let g = RegGuard::lock();
    let old = current(&g);
    let within = |a: usize| crate::within_module(a, module);
    if !old.iter().any(|s| within(s.ip)) {
        return;
    }
    let Ok(mut v) = KVec::with_capacity(old.len(), GFP_KERNEL) else {
        for (pos, s) in old.iter().enumerate() {
            if within(s.ip) {
                for i in 0..s.n {
                    detach_in_place(pos, i);
                }
            }
        }
        return;
    };
    let mut gone = KVec::new();
    for s in old {
        if within(s.ip) {
            let _ = gone.push(s.ip, GFP_KERNEL);
        } else {
            let _ = v.push(*s, GFP_KERNEL);
        }
    }
    if publish(&g, v, true).is_err() {
        return;
    }
    for ip in gone.iter() {
        filter_remove(&g, *ip);
    }
}

/// Zeroes template `i` of site `pos` in the current layout: generation 0
/// matches no record (a registration's is never 0), so no handler runs
/// for it after the grace period this waits.
fn detach_in_place(pos: usize, i: usize) {
    let t = TABLE.load(Ordering::Acquire);
    if t.is_null() {
        return;
    }
    // SAFETY: the table is replaced only under the registration lock, which
    // the caller holds; the write is one aligned word that readers load
    // atomically (`gen_of`), made through a raw pointer (others read the
    // table meanwhile: no `&mut` to it).
    unsafe {
        let sites = &(*t).sites;
        if let Some(tpl) = sites.get(pos).and_then(|s| s.tpl.get(i)) {
            AtomicU64::from_ptr(core::ptr::addr_of!(tpl.gen).cast_mut())
                .store(0, Ordering::Release);
        }
        bindings::synchronize_rcu();
    }
}

/// Functions served through the shadow stack now (registration lock).
pub(crate) fn sites(g: &RegGuard) -> usize {
    current(g).len()
}

/// The site's templates, preemption off.
fn lookup(ip: usize) -> Option<&'static Site> {
    let t = TABLE.load(Ordering::Acquire);
    if t.is_null() {
        return None;
    }
    // SAFETY: freed only a grace period after being replaced; the caller
    // runs with preemption off.
    let sites = unsafe { &(*t).sites };
    sites
        .binary_search_by(|s| s.ip.cmp(&ip))
        .ok()
        .and_then(|i| sites.get(i))
}

fn gen_of(t: &Tpl) -> u64 {
    // SAFETY: an aligned word of a live table (see `detach`).
    unsafe { AtomicU64::from_ptr(core::ptr::addr_of!(t.gen).cast_mut()) }.load(Ordering::Acquire)
}

/// The graph entry callback (`src/fgraph.c`, preemption off): reserves
/// this call's records. Non-zero: hook the return.
#[no_mangle]
pub(crate) extern "C" fn kp_graph_enter(func: c_ulong) -> c_int {
    let Some(s) = lookup(func) else {
        return 0;
    };
    let size = s.size();
    if size == 0 {
        return 0;
    }
    // SAFETY: called from the entry callback, as fgraph requires.
    let block = unsafe { kp_graph_reserve(size as c_int) }.cast::<u8>();
    if block.is_null() {
        return 0;
    }
    let mut off = 0;
    for t in &s.tpl[..s.n] {
        // SAFETY: `size` bytes were reserved, the sum of the lengths; each
        // length is a multiple of 8 and at least `REC_SIZE`.
        unsafe {
            let r = block.add(off).cast::<Rec>();
            (*r).len = t.len;
            (*r).state = PENDING;
            (*r).gen = gen_of(t);
            (*r).header.rp = t.rp;
        }
        off += t.len as usize;
    }
    1
}

/// Walks the records of a block.
fn records(block: *mut u8, size: usize, mut f: impl FnMut(&mut Rec) -> bool) {
    let mut off = 0;
    while off + REC_SIZE <= size {
        // SAFETY: inside the block, 8-aligned; written by `kp_graph_enter`.
        let r = unsafe { &mut *block.add(off).cast::<Rec>() };
        let len = r.len as usize;
        if len < REC_SIZE || off + len > size || !f(r) {
            return;
        }
        off += len;
    }
}

/// At a kretprobe's entry probe: this call's record of registration
/// `reg`, when fgraph hooked the call. Interrupts off (trap path).
pub(crate) fn claim(
    reg: Reg,
    regs: &bindings::pt_regs,
) -> Option<&'static mut KpKretprobeInstance> {
    let rth = crate::symbols::return_to_handler();
    if arch::Arch::kret_return_address(regs) != rth {
        return None;
    }
    let (mut func, mut ret, mut retp, mut size) = (0, 0, 0, 0);
    // SAFETY: reads the current task's shadow stack.
    let block = unsafe { kp_graph_top(&mut func, &mut ret, &mut retp, &mut size) }.cast::<u8>();
    if block.is_null() || func != reg.site || retp != arch::Arch::kret_graph_retp(regs) {
        return None;
    }
    // A tail call from another hooked function keeps the tracer's address.
    let ret = if ret == rth {
        crate::symbols::graph_return_address(ret, retp)?
    } else {
        ret
    };
    let mut found: Option<*mut Rec> = None;
    records(block, size.max(0) as usize, |r| {
        if r.gen == reg.gen && r.state == PENDING {
            found = Some(r);
            false
        } else {
            true
        }
    });
    // SAFETY: this call's record on the current task's shadow stack, which
    // lives until the function returns.
    let r = unsafe { &mut *found? };
    r.entry_fp = arch::Arch::kret_frame_pointer(regs);
    r.header.fp = arch::regs::sp(regs);
    r.header.ret_addr = ret;
    Some(&mut r.header)
}

/// Marks a claimed record armed: its return runs the handler.
pub(crate) fn arm(h: &mut KpKretprobeInstance) {
    // SAFETY: `h` is the header of a `Rec` (from `claim`).
    let r = unsafe {
        &mut *(core::ptr::from_mut(h)
            .cast::<u8>()
            .sub(REC_SIZE - core::mem::size_of::<KpKretprobeInstance>()))
        .cast::<Rec>()
    };
    r.state = ARMED;
}

/// The graph return callback (`src/fgraph.c`, interrupts off): runs the
/// handlers of this call's armed records.
#[no_mangle]
pub(crate) extern "C" fn kp_graph_leave(
    func: c_ulong,
    retval: c_ulong,
    block: *mut c_void,
    size: c_int,
) {
    let Some(s) = lookup(func) else {
        return;
    };
    records(block.cast(), size.max(0) as usize, |r| {
        if r.state != ARMED {
            return true;
        }
        r.state = PENDING;
        // Still registered: its generation (and kretprobe) is in the
        // current layout.
        if !s.tpl[..s.n]
            .iter()
            .any(|t| gen_of(t) == r.gen && t.rp == r.header.rp)
        {
            return true;
        }
        RETURNS.fetch_add(1, Ordering::Relaxed);
        let rp = r.header.rp;
        // SAFETY: a registered kretprobe (checked above; unregistering
        // waits a grace period after taking it out of the layout).
        let Some(h) = (unsafe { (*rp).handler }) else {
            return true;
        };
        // SAFETY: all-zero is a valid `pt_regs`.
        let mut regs: bindings::pt_regs = unsafe { core::mem::zeroed() };
        arch::Arch::kret_graph_regs(
            &mut regs,
            r.header.fp,
            r.entry_fp,
            r.header.ret_addr,
            retval,
        );
        // SAFETY: interrupts are off.
        let cpu = unsafe { Cpu::this() };
        let busy = Frame {
            point: core::ptr::null(),
            stage: stage::HANDLERS,
            saved: 0,
        };
        if cpu.push(busy).is_some() {
            // SAFETY: the handler contract; the frame record the arch
            // builds shows the real caller to unwinders in the handler.
            unsafe { arch::Arch::kret_call_handler(h, &mut r.header, &mut regs, r.entry_fp) };
            cpu.pop();
        } else {
            // SAFETY: as above.
            unsafe { crate::kretprobe::count_missed(rp, &crate::stats::missed::KRET_NESTED) };
        }
        true
    });
}
