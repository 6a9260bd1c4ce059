// SPDX-License-Identifier: GPL-2.0

//! kretprobes: handlers at function return.
//!
//! A kretprobe is an entry probe (an ordinary [`KpKprobe`] whose pre handler
//! is [`kret_entry`]) plus a pool of `maxactive` preallocated instances. At
//! the entry a free instance is taken, the client's entry_handler runs, and
//! the return address is replaced ("hijacked") by the address of the
//! instance's own *stub*: a few instructions in the engine's slot area that
//! jump to the arch trampoline with the stub's identity (x86_64: the stub
//! pushes its slot index; arm64: x30 still holds the stub address). The
//! trampoline saves a full `pt_regs` and calls [`on_return`], which finds
//! the instance from the stub in O(1), runs the handler with `ip`/`pc` set
//! to the real return address, frees the instance and hands the real
//! return address back for the trampoline to return to. No per-task state
//! and no lookup tables are needed; recursion and many tasks just use more
//! instances. When none is free the call is not tracked (`nmissed`).
//!
//! Where the function's entry is an ftrace site, the entry probe first
//! offers the call to the function graph tracer's per-task shadow stack
//! ([`crate::kretprobe::graph`]): no pool to exhaust, and unwinders see the real
//! caller. The pool serves what fgraph does not take, and every other
//! entry.
//!
//! Lifetime: unregistering stops new entries (the entry probe goes away)
//! and marks the pool dead, so returns still in flight run no handler but
//! still return correctly; the pool (instances, stubs) is freed once the
//! last of them came back (checked on later registrations and at unload).
//! Each hijacked return holds a reference on the engine module, so the
//! engine cannot be unloaded while one is outstanding.
//!
//! Task exit: a task that exits inside a probed function (it calls
//! `do_exit()`, directly or through `kthread_exit()`, `do_group_exit()`,
//! ...) never returns through the hijacked frames of its callers. On the
//! `sched_process_exit` tracepoint, which runs in `do_exit()` on the exiting
//! task, [`kp_kret_task_exit`] recycles every instance whose frame lies on
//! that task's stack (the callers of `do_exit()`, or frames an oops
//! abandoned), as the kernel's `rethook_flush_task()` does: no handler runs
//! for them, the instance goes back to its pool and the module reference is
//! dropped. An oops inside an entry handler leaves its instance claimed, not
//! hijacked: the trap path records the claim per hit level, and the oops
//! notifier gives it back ([`abandon_claim`]).

use crate::abi::{KpKprobe, KpKretprobe, KpKretprobeInstance};
use crate::arch;
use crate::arch::Returns;
use crate::lock::{RegGuard, RegLocked};
use crate::percpu::{stage, Cpu, Frame};
use crate::slots;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicI32, AtomicPtr, AtomicU8, AtomicUsize, Ordering};
use kernel::bindings;
use kernel::ffi::c_int;
use kernel::prelude::*;

pub(crate) mod graph;
mod handlers;
mod register;

use handlers::kret_entry;
pub(crate) use handlers::{count_missed, on_return, run_return_handler};
pub(crate) use register::{default_maxactive, forget_if_kretprobe};
pub use register::{
    kp_register_kretprobe, kp_register_kretprobes, kp_unregister_kretprobe,
    kp_unregister_kretprobes,
};

/// The engine-private part of an instance, followed by the client-visible
/// header and the client's data.
#[repr(C)]
struct Instance {
    pool: *const Pool,
    /// [`FREE`], [`CLAIMED`] (an entry is filling it in) or [`HIJACKED`]
    /// (a return is outstanding; `header` is complete).
    state: AtomicU8,
    /// The function graph tracer had hijacked this return first: the stub
    /// returns to its `return_to_handler`, and `header.ret_addr` is the
    /// real caller the tracer saved.
    via_graph: bool,
    stub: usize,
    header: KpKretprobeInstance,
    // `data_size` bytes follow.
}

/// An instance's states.
const FREE: u8 = 0;
const CLAIMED: u8 = 1;
const HIJACKED: u8 = 2;

/// One kretprobe's instances.
struct Pool {
    /// The client's kretprobe; null once unregistered.
    rp: AtomicPtr<KpKretprobe>,
    /// Hijacked returns not yet back.
    inflight: AtomicUsize,
    /// Number of instances.
    n: usize,
    /// Bytes per instance.
    stride: usize,
    /// The instances (u64 for alignment).
    mem: PoolMem,
    /// Next dead pool waiting for its returns (registration lock).
    next_zombie: *mut Pool,
    /// Where the function graph tracer's shadow stack serves this
    /// kretprobe's calls (`src/kretprobe/graph.rs`); the pool is the fallback.
    graph: Option<crate::kretprobe::graph::Reg>,
}

/// A pool's instances: from the slab while small; whole pages (vmalloc)
/// from [`VMALLOC_FROM`] bytes on, where the slab's power-of-two sizes
/// would waste up to half.
enum PoolMem {
    Slab(KVec<u64>),
    Pages(VVec<u64>),
}

/// Pools from this size on are vmalloc'd.
const VMALLOC_FROM: usize = 4 * 4096;

impl PoolMem {
    /// `words` zeroed words.
    fn zeroed(words: usize) -> Result<Self> {
        fn fill<A: kernel::alloc::Allocator>(words: usize) -> Result<kernel::alloc::Vec<u64, A>> {
            // A failure is reported as -ENOMEM to the registering caller;
            // vmalloc's own warning (with a stack dump) would add nothing.
            let gfp = GFP_KERNEL | kernel::alloc::flags::__GFP_NOWARN;
            let mut v = kernel::alloc::Vec::with_capacity(words, gfp)?;
            v.extend_with(words, 0u64, gfp)?;
            Ok(v)
        }
        Ok(if words * 8 >= VMALLOC_FROM {
            PoolMem::Pages(fill(words)?)
        } else {
            PoolMem::Slab(fill(words)?)
        })
    }

    fn as_ptr(&self) -> *const u64 {
        match self {
            PoolMem::Slab(v) => v.as_ptr(),
            PoolMem::Pages(v) => v.as_ptr(),
        }
    }
}

impl Pool {
    fn instance(&self, i: usize) -> *mut Instance {
        // SAFETY: `i < n`; `mem` holds `n * stride` bytes, stride a multiple
        // of 8 and at least the size of `Instance`.
        unsafe { self.mem.as_ptr().cast::<u8>().add(i * self.stride) as *mut Instance }
    }
}

/// Entries whose return the function graph tracer had hijacked first
/// (debugfs `stats`: `kretprobe_via_graph`).
pub(crate) static VIA_GRAPH: AtomicUsize = AtomicUsize::new(0);

/// Hijacked returns given back because their task exited inside the
/// function (debugfs `stats`: `kretprobe_task_exits`).
pub(crate) static TASK_EXITS: AtomicUsize = AtomicUsize::new(0);

/// Which instance each stub slot belongs to (indexed by slot index).
static STUBS: [AtomicPtr<Instance>; arch::NSLOTS] =
    [const { AtomicPtr::new(null_mut()) }; arch::NSLOTS];

/// Return instances allocated (each has its stub). Registration lock held.
pub(crate) fn instances(_g: &RegGuard) -> usize {
    STUBS
        .iter()
        .take(STUBS_END.load(Ordering::Relaxed))
        .filter(|s| !s.load(Ordering::Relaxed).is_null())
        .count()
}

/// Calls whose return is hijacked now. Registration lock held (no pool is
/// freed meanwhile).
pub(crate) fn inflight(_g: &RegGuard) -> usize {
    STUBS
        .iter()
        .take(STUBS_END.load(Ordering::Relaxed))
        .map(|s| s.load(Ordering::Acquire))
        // SAFETY: a published instance stays allocated while the lock is
        // held (`free_pool` runs under it).
        .filter(|&i| !i.is_null() && unsafe { &*i }.state.load(Ordering::Relaxed) == HIJACKED)
        .count()
}

/// Pools allocated (live or dead): task exits look for instances only
/// while there are some.
static POOLS: AtomicUsize = AtomicUsize::new(0);

/// One past the highest stub slot index ever published: task exits look
/// at `STUBS[..STUBS_END]` only (slots are taken lowest first, so this
/// stays near the number of instances rather than the slot count).
static STUBS_END: AtomicUsize = AtomicUsize::new(0);

/// Dead pools with returns still in flight (registration lock).
static ZOMBIES: RegLocked<*mut Pool> = RegLocked::new(null_mut());

/// Puts a dead pool on the zombie list. Registration lock held.
///
/// # Safety
///
/// `pool` is a live pool that is on no list.
unsafe fn add_zombie(g: &RegGuard, pool: *mut Pool) {
    let head = ZOMBIES.get(g);
    // SAFETY: `g` holds the list's lock; `pool` is live (the contract).
    unsafe {
        (*pool).next_zombie = *head;
        *head = pool;
    }
}

extern "C" {
    fn kp_helper_module_get() -> bool;
    fn kp_helper_module_put();
    fn kp_helper_exit_hook_register() -> c_int;
    fn kp_helper_exit_hook_unregister();
    fn kp_helper_on_task_stack(addr: usize) -> bool;
}

/// Functions whose returns must not be hijacked: they switch stacks or
/// never return normally (the kernel's `kretprobe_blacklist` has the
/// first; the others are `__noreturn`).
const KRET_BLACKLIST: &[&[u8]] = &[
    b"__switch_to",
    b"__switch_to_asm",
    b"cpu_switch_to",
    b"do_exit",
    b"do_group_exit",
    b"make_task_dead",
    b"kthread_exit",
    b"panic",
    // Never returns either (the dying task's last schedule).
    b"do_task_dead",
    // Between `do_exit()` and the engine's exit hook when another callback
    // shares the tracepoint: its frame is live while the hook recycles
    // this task's instances.
    b"__traceiter_sched_process_exit",
];

fn free_pool(_g: &RegGuard, pool: *mut Pool) {
    // SAFETY: the caller owns the pool: dead and with nothing in flight, or
    // never published.
    let p = unsafe { KBox::from_raw(pool) };
    let mut published = false;
    for i in 0..p.n {
        // SAFETY: in range.
        let inst = unsafe { &*p.instance(i) };
        if inst.stub != 0 {
            STUBS[slots::index_of(inst.stub)].store(null_mut(), Ordering::Release);
            published = true;
        }
    }
    if published {
        // A task exit may be looking at the instances (`kp_kret_task_exit`,
        // preemption off).
        // SAFETY: process context.
        unsafe { bindings::synchronize_rcu_expedited() };
    }
    for i in 0..p.n {
        // SAFETY: in range.
        let inst = unsafe { &*p.instance(i) };
        if inst.stub != 0 {
            arch::Arch::clear_kret_stub(inst.stub);
            slots::free(inst.stub);
        }
    }
    POOLS.fetch_sub(1, Ordering::Relaxed);
}

/// The `sched_process_exit` tracepoint: the current task is in `do_exit()`
/// and its callers' frames will never return. Recycles the instances
/// hijacked in them (see the module docs). Preemption is off.
#[no_mangle]
pub(crate) extern "C" fn kp_kret_task_exit() {
    if POOLS.load(Ordering::Acquire) == 0 {
        return;
    }
    let end = STUBS_END.load(Ordering::Acquire);
    for s in STUBS.iter().take(end) {
        let inst = s.load(Ordering::Acquire);
        if inst.is_null() {
            continue;
        }
        // SAFETY: a published instance stays allocated until a grace
        // period after it is unpublished (`free_pool`); preemption is off.
        let inst = unsafe { &*inst };
        // Acquire: `header` as the entry completed it (a claimed instance
        // may still hold a previous call's frame).
        if inst.state.load(Ordering::Acquire) != HIJACKED {
            continue;
        }
        // Only this task's frames lie on its stack (interrupts and NMIs
        // run on their own stacks), and none of them is live: those above
        // this frame are the callers of `do_exit()`, and any below it were
        // abandoned when an oops rewound the stack (x86_64
        // `rewind_stack_and_make_dead()`) or already returned. An instance
        // an interrupt is taking right now is on another stack.
        // SAFETY: a range check against the current task's stack.
        if !unsafe { kp_helper_on_task_stack(inst.header.fp) } {
            continue;
        }
        // SAFETY: an instance in flight keeps its pool.
        let pool = unsafe { &*inst.pool };
        // Only this task could return through it, and it never will.
        inst.state.store(FREE, Ordering::Release);
        pool.inflight.fetch_sub(1, Ordering::AcqRel);
        TASK_EXITS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: balances the reference taken at the entry.
        unsafe { kp_helper_module_put() };
    }
}

/// An oops ended the entry handler that was filling in instance `inst`
/// (recorded by [`kret_entry`] with `Cpu::set_claim`): it goes back to its
/// pool. Die path, interrupts off.
pub(crate) fn abandon_claim(inst: usize) {
    // SAFETY: a claimed instance keeps its pool allocated (a pool is freed
    // only with all its instances free, after a grace period).
    let inst = unsafe { &*(inst as *const Instance) };
    // The claim was taken before the module reference (none to drop).
    let _ = inst
        .state
        .compare_exchange(CLAIMED, FREE, Ordering::Release, Ordering::Relaxed);
}

/// Hooks task exit. Process context, at engine load.
pub(crate) fn init() {
    // SAFETY: plain call; the probe is a static function.
    let r = unsafe { kp_helper_exit_hook_register() };
    if r != 0 {
        pr_warn!(
            "no sched_process_exit tracepoint ({}): kretprobe instances of tasks that \
             exit inside a probed function are not recovered\n",
            r
        );
    }
}

/// Unhooks task exit (waits for running callbacks). At engine unload.
pub(crate) fn exit() {
    // SAFETY: plain call.
    unsafe { kp_helper_exit_hook_unregister() };
}

/// Frees dead pools whose returns all came back. Registration lock held.
fn reap(g: &RegGuard) {
    // SAFETY: `g` holds the list's lock; its members are live pools.
    unsafe {
        let mut link: *mut *mut Pool = ZOMBIES.get(g);
        while !(*link).is_null() {
            let p = *link;
            if (*p).inflight.load(Ordering::Acquire) == 0 {
                *link = (*p).next_zombie;
                free_pool(g, p);
            } else {
                link = core::ptr::addr_of_mut!((*p).next_zombie);
            }
        }
    }
}

/// Whether any dead pool still waits for returns (engine unload).
pub(crate) fn reap_all() -> bool {
    let g = RegGuard::lock();
    reap(&g);
    // SAFETY: `g` holds the list's lock.
    !unsafe { *ZOMBIES.get(&g) }.is_null()
}

fn alloc_pool(rp: *mut KpKretprobe, n: usize, data_size: usize) -> Result<*mut Pool> {
    let stride = (core::mem::size_of::<Instance>() + data_size + 7) & !7;
    let words = n.checked_mul(stride).ok_or(EINVAL)? / 8;
    let mem = PoolMem::zeroed(words)?;
    let pool = KBox::into_raw(KBox::new(
        Pool {
            rp: AtomicPtr::new(rp),
            inflight: AtomicUsize::new(0),
            n,
            stride,
            mem,
            next_zombie: null_mut(),
            graph: None,
        },
        GFP_KERNEL,
    )?);
    POOLS.fetch_add(1, Ordering::Relaxed);
    Ok(pool)
}

/// Gives every instance its stub. Registration lock held.
fn make_stubs(pool: *mut Pool) -> Result {
    // SAFETY: the pool is ours, not yet published.
    let p = unsafe { &*pool };
    for i in 0..p.n {
        let inst = p.instance(i);
        let stub = slots::alloc().ok_or(ENOSPC)?;
        // SAFETY: in range, not yet shared.
        unsafe {
            (*inst).pool = pool;
            (*inst).stub = stub;
        }
        let index = slots::index_of(stub);
        arch::Arch::write_kret_stub(stub, index)?;
        STUBS[index].store(inst, Ordering::Release);
        STUBS_END.fetch_max(index + 1, Ordering::Release);
    }
    arch::Arch::kret_stubs_written();
    Ok(())
}
