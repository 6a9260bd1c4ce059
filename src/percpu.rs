// SPDX-License-Identifier: GPL-2.0

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
//! Per-CPU hit state: which probe this CPU is handling, and how far.
//!
//! The storage is a `DEFINE_PER_CPU` array in `src/helpers.c` (a macro Rust
//! cannot expand); this file owns its layout. It is only touched from the
//! trap path, with interrupts off on one CPU; traps can still nest (NMIs,
//! probes hit by handlers), which [`Cpu`] accounts for.

use crate::arch::Traps;
use crate::registry::Point;
use kernel::build_assert;

/// What a frame is doing (plain integers so that a zeroed area is valid).
pub(crate) mod stage {
    /// Handlers are running (pre or post).
    pub(crate) const HANDLERS: usize = 1;
    /// The displaced copy is executing; the handlers ran.
    pub(crate) const STEPPING: usize = 2;
    /// The displaced copy is executing for a hit whose handlers were skipped.
    pub(crate) const STEPPING_MISSED: usize = 3;
    /// Fault handlers are running (a fault now is not offered to them again).
    pub(crate) const FAULTING: usize = 4;
}

/// One probe hit in progress on this CPU.
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct Frame {
    pub(crate) point: *const Point,
    pub(crate) stage: usize,
    /// Arch state saved across the step (x86_64: the interrupt flag; arm64:
    /// PSTATE as the breakpoint found it).
    pub(crate) saved: usize,
}

/// Hits can nest: a probe hit inside a handler (missed) or from an NMI while
/// another hit steps. Deeper nesting than this is refused.
pub(crate) const MAX_DEPTH: usize = 4;

#[repr(C)]
pub(crate) struct CpuState {
    pub(crate) depth: usize,
    pub(crate) frames: [Frame; MAX_DEPTH],
    /// Out-of-line copies this CPU finished with a second trap.
    pub(crate) step_traps: usize,
    /// Faults in a row that a fault handler claimed to have fixed without
    /// changing a register (see `hit::run_fault_handlers`).
    pub(crate) fault_retries: usize,
    /// Per level: the kretprobe instance its entry handler is filling in
    /// (0: none), so that an oops in that handler can give it back
    /// ([`Cpu::reset_after_oops`]).
    pub(crate) claims: [usize; MAX_DEPTH],
}

extern "C" {
    /// The per-CPU area (`DEFINE_PER_CPU` in helpers.c): written only
    /// through [`Cpu`], by the CPU that owns each copy. Its symbol is a
    /// per-CPU offset, not an address: only ever taken raw, never borrowed.
    static kp_cpu_area: kernel::types::Opaque<[usize; CPU_WORDS]>;
    fn kp_helper_cpu_area_sum(word: kernel::ffi::c_uint) -> u64;
}

/// Out-of-line copies finished with a second trap, over every CPU.
pub(crate) fn step_traps() -> u64 {
    let word = core::mem::offset_of!(CpuState, step_traps) / 8;
    // SAFETY: reads the per-CPU area; `word` is within it (`Cpu::this`
    // checks the size).
    unsafe { kp_helper_cpu_area_sum(word as _) }
}

/// Hit levels in progress, over every CPU (0 whenever the machine is
/// quiet: a non-zero count that stays is a CPU stuck busy).
pub(crate) fn hits_in_progress() -> u64 {
    let word = core::mem::offset_of!(CpuState, depth) / 8;
    // SAFETY: as in `step_traps`.
    unsafe { kp_helper_cpu_area_sum(word as _) }
}

/// Words in the C per-CPU area (`KP_CPU_WORDS` in helpers.c).
const CPU_WORDS: usize = 64;

/// This CPU's hit state.
///
/// Traps nest (an NMI, or a probe hit inside a handler, interrupts the
/// code below at any instruction), so the state is never borrowed: every
/// access is a volatile load or store through this pointer, and a level is
/// reserved (depth raised) before its frame is written, so a nested trap
/// always works on the frames above.
///
/// INVARIANT: `0` points to this CPU's zero-initialised area; frames below
/// `depth` belong to traps in progress on this CPU.
#[derive(Clone, Copy)]
pub(crate) struct Cpu(*mut CpuState);

impl Cpu {
    /// This CPU's state.
    ///
    /// # Safety
    ///
    /// Call only with interrupts disabled (trap context), and use the result
    /// only until the trap handler returns.
    #[inline(always)]
    pub(crate) unsafe fn this() -> Self {
        build_assert!(core::mem::size_of::<CpuState>() <= CPU_WORDS * 8);
        // SAFETY: the per-CPU area is CPU_WORDS words, large enough and
        // suitably aligned for `CpuState` (checked above); all-zero is a
        // valid `CpuState` (depth 0; frames are plain integers and pointers).
        // The caller cannot migrate.
        Cpu(unsafe {
            crate::arch::Arch::this_cpu_ptr(core::ptr::addr_of!(kp_cpu_area).cast_mut()).cast()
        })
    }

    /// Traps in progress on this CPU.
    #[inline(always)]
    pub(crate) fn depth(self) -> usize {
        // SAFETY: type invariant; nested traps restore `depth` before they
        // return, so a plain volatile read sees this level's value.
        unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*self.0).depth)) }
    }

    #[inline(always)]
    fn set_depth(self, d: usize) {
        // SAFETY: type invariant.
        unsafe { core::ptr::write_volatile(core::ptr::addr_of_mut!((*self.0).depth), d) };
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    }

    /// Reserves the next level and fills its frame; returns its index, or
    /// `None` when nesting is too deep.
    #[inline(always)]
    pub(crate) fn push(self, f: Frame) -> Option<usize> {
        let d = self.depth();
        if d >= MAX_DEPTH {
            return None;
        }
        // `d < MAX_DEPTH`: cannot wrap.
        self.set_depth(d.wrapping_add(1));
        self.set_frame(d, f);
        Some(d)
    }

    /// Reserves the first level for a hit whose handlers run now (stage
    /// HANDLERS; nothing saved). The trap-less paths' cheap [`Self::push`]:
    /// the caller saw depth 0.
    #[inline(always)]
    pub(crate) fn push_first_handlers(self, point: *const Point) {
        self.set_depth(1);
        // SAFETY: type invariant; level 0 is now ours.
        unsafe {
            let f = core::ptr::addr_of_mut!((*self.0).frames[0]);
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*f).point), point);
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*f).stage), stage::HANDLERS);
        }
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    }

    /// Counts a copy finished by a second trap.
    pub(crate) fn count_step_trap(self) {
        // SAFETY: type invariant. A nested trap between the load and the
        // store (an NMI) may lose its own count: statistics only.
        unsafe {
            let p = core::ptr::addr_of_mut!((*self.0).step_traps);
            core::ptr::write_volatile(p, core::ptr::read_volatile(p).wrapping_add(1));
        }
    }

    /// One more fault in a row "fixed" with no register changed; returns
    /// how many there were.
    pub(crate) fn bump_fault_retries(self) -> usize {
        // SAFETY: type invariant; interrupts are off (trap context).
        unsafe {
            let p = core::ptr::addr_of_mut!((*self.0).fault_retries);
            let n = core::ptr::read_volatile(p).saturating_add(1);
            core::ptr::write_volatile(p, n);
            n
        }
    }

    /// A fault handled with a real fix, or given up on: the count restarts.
    pub(crate) fn clear_fault_retries(self) {
        // SAFETY: type invariant; interrupts are off (trap context).
        unsafe { core::ptr::write_volatile(core::ptr::addr_of_mut!((*self.0).fault_retries), 0) };
    }

    /// Records (or, with 0, forgets) the kretprobe instance whose entry
    /// handler the top level is about to run.
    #[inline(always)]
    pub(crate) fn set_claim(self, inst: usize) {
        let top = self.depth().saturating_sub(1).min(MAX_DEPTH - 1);
        // SAFETY: type invariant; `top` indexes `claims`.
        unsafe {
            let c = core::ptr::addr_of_mut!((*self.0).claims)
                .cast::<usize>()
                .add(top);
            core::ptr::write_volatile(c, inst);
        }
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    }

    /// An oops ends the context that holds every level in progress on this
    /// CPU (the caller checked it is not an interrupt; those panic): empties
    /// the state and calls `release` with each level's claimed instance.
    /// Returns the innermost frame that was in progress, if any.
    pub(crate) fn reset_after_oops(self, mut release: impl FnMut(usize)) -> Option<Frame> {
        let depth = self.depth().min(MAX_DEPTH);
        for i in 0..MAX_DEPTH {
            // SAFETY: type invariant; `i` indexes `claims`.
            let c = unsafe {
                core::ptr::addr_of_mut!((*self.0).claims)
                    .cast::<usize>()
                    .add(i)
            };
            // SAFETY: as above.
            let inst = unsafe { core::ptr::read_volatile(c) };
            if inst != 0 {
                if i < depth {
                    release(inst);
                }
                // SAFETY: as above.
                unsafe { core::ptr::write_volatile(c, 0) };
            }
        }
        let top = (depth > 0).then(|| self.frame(depth.saturating_sub(1)));
        self.set_depth(0);
        self.clear_fault_retries();
        top
    }

    /// Drops the top level.
    #[inline(always)]
    pub(crate) fn pop(self) {
        // Never below zero, even for an unbalanced pop.
        self.set_depth(self.depth().saturating_sub(1));
    }

    /// Where frame `i` is; an `i` past the last level (a bug) is clamped
    /// to it rather than indexed out of the array (a panic here would be
    /// one in trap context).
    #[inline(always)]
    fn frame_ptr(self, i: usize) -> *mut Frame {
        const LAST: usize = MAX_DEPTH - 1;
        // SAFETY: type invariant: `self.0` is this CPU's state; the offset
        // stays inside `frames`.
        unsafe {
            core::ptr::addr_of_mut!((*self.0).frames)
                .cast::<Frame>()
                .add(i.min(LAST))
        }
    }

    /// Frame `i` (below `depth`).
    #[inline(always)]
    pub(crate) fn frame(self, i: usize) -> Frame {
        // SAFETY: type invariant; the index is clamped into the array.
        unsafe { core::ptr::read_volatile(self.frame_ptr(i)) }
    }

    /// Changes the stage of frame `i` (a level this trap reserved).
    #[inline(always)]
    pub(crate) fn set_stage(self, i: usize, stage: usize) {
        // SAFETY: type invariant; the index is clamped into the array.
        unsafe {
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*self.frame_ptr(i)).stage), stage)
        };
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    }

    /// Overwrites frame `i` (a level this trap reserved).
    #[inline(always)]
    pub(crate) fn set_frame(self, i: usize, f: Frame) {
        // SAFETY: type invariant; the index is clamped into the array.
        unsafe { core::ptr::write_volatile(self.frame_ptr(i), f) };
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    }
}

extern "C" {
    fn kp_helper_counter_alloc() -> *mut u64;
    fn kp_helper_counter_free(c: *mut u64);
    fn kp_helper_counter_sum(c: *mut u64) -> u64;
}

/// A per-CPU event counter: an increment is one non-atomic per-CPU add
/// (no lock-prefixed instruction, no shared cache line on the hit path);
/// reading sums the CPUs.
///
/// INVARIANT: `0` is a live `alloc_percpu(u64)` area, freed on drop.
pub(crate) struct Counter(*mut u64);

// SAFETY: each CPU writes only its own slot (interrupts off); readers sum
// plain loads of aligned words.
unsafe impl Sync for Counter {}
// SAFETY: as above; the area is not tied to a thread.
unsafe impl Send for Counter {}

impl Counter {
    /// A zeroed counter (`alloc_percpu` zeroes). Process context.
    pub(crate) fn new() -> kernel::error::Result<Self> {
        // SAFETY: plain allocation.
        let c = unsafe { kp_helper_counter_alloc() };
        if c.is_null() {
            return Err(kernel::error::code::ENOMEM);
        }
        Ok(Counter(c))
    }

    /// Counts one on this CPU. Interrupts off.
    #[inline(always)]
    pub(crate) fn inc(&self) {
        // SAFETY: live per type invariant; the caller keeps this CPU.
        unsafe { crate::arch::Arch::this_cpu_inc(self.0) };
    }

    /// The total over every CPU.
    pub(crate) fn sum(&self) -> u64 {
        // SAFETY: live per type invariant.
        unsafe { kp_helper_counter_sum(self.0) }
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once.
        unsafe { kp_helper_counter_free(self.0) };
    }
}
