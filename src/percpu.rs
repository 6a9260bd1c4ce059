// SPDX-License-Identifier: GPL-2.0

//! Per-CPU hit state: which probe this CPU is handling, and how far.
//!
//! The storage is a `DEFINE_PER_CPU` array in `src/helpers.c` (a macro Rust
//! cannot expand); this file owns its layout. It is only touched from the trap
//! path, which runs with interrupts off on one CPU, so plain accesses suffice.

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
}

/// One probe hit in progress on this CPU.
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct Frame {
    pub(crate) point: *const Point,
    pub(crate) stage: usize,
    /// Arch state saved across the step (x86_64: the interrupt flag).
    pub(crate) saved: usize,
}

/// Hits can nest: a probe hit inside a handler (missed) or from an NMI while
/// another hit steps. Deeper nesting than this is refused.
pub(crate) const MAX_DEPTH: usize = 4;

#[repr(C)]
pub(crate) struct CpuState {
    pub(crate) depth: usize,
    pub(crate) frames: [Frame; MAX_DEPTH],
}

extern "C" {
    fn kp_helper_this_cpu_area() -> *mut usize;
}

/// Words in the C per-CPU area (`KP_CPU_WORDS` in helpers.c).
const CPU_WORDS: usize = 64;

/// This CPU's state.
///
/// # Safety
///
/// Call only with interrupts disabled (trap context), and do not keep the
/// reference past the trap handler.
pub(crate) unsafe fn this_cpu() -> &'static mut CpuState {
    build_assert!(core::mem::size_of::<CpuState>() <= CPU_WORDS * 8);
    // SAFETY: the per-CPU area is CPU_WORDS words, zero-initialised, large
    // enough and suitably aligned for `CpuState` (checked above); a zeroed
    // `CpuState` with depth 0 is valid because frames past `depth` are never
    // read. The caller guarantees exclusive access on this CPU.
    unsafe { &mut *kp_helper_this_cpu_area().cast::<CpuState>() }
}
