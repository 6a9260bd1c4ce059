// SPDX-License-Identifier: GPL-2.0

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
//! The step without a second trap, for boostable instructions whose probes
//! have post (or fault) handlers.
//!
//! The kernel's x86 kprobes end every step that needs a post handler with a
//! second int3 after the out-of-line copy. For an instruction that can run
//! out of line and be followed by a jump (the boostable set), this backend
//! ends the copy with a call instead:
//!
//! ```text
//!   slot + 0        the instruction, relocated
//!   slot + len      push $addr                   68 imm32
//!   slot + len + 5  call kp_x86_post_common      e8 rel32
//!   slot + len + 10 jmp addr + len               e9 rel32
//! ```
//!
//! The breakpoint's handler sends the CPU there with interrupts off, as for
//! the int3-ended copy; `kp_x86_post_common` builds a `struct pt_regs` (the
//! state after the instruction) and calls [`kp_x86_post_hit`], which
//! finishes the step through the core (`Core::on_step_jump`: the post
//! handlers, the interrupt flag the breakpoint saved) and picks where to
//! resume: the next instruction (straight there: the slot's jump back is
//! left for nothing but a stray return), or where a post handler
//! redirected execution. One trap per hit instead of two. A fault
//! in the copy is handled as for the int3-ended copy: the copy is at the
//! same place.

use crate::arch::Core;
use crate::entries::Engine;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::bindings;
use kernel::prelude::*;

extern "C" {
    fn kp_x86_post_common();
}

/// Where the copy's `call` goes.
pub(super) fn common() -> usize {
    kp_x86_post_common as *const () as usize
}

/// Bytes after the instruction: `push imm32`, `call rel32`, `jmp rel32`.
pub(super) const TAIL_LEN: usize = 15;

/// Writes the tail after the copy at `code[at..]` (running at `base + at`)
/// of the instruction at `addr`, `len` bytes long. `ERANGE` when `addr`
/// does not fit a sign-extended `push imm32` or a target is out of `rel32`
/// reach.
pub(super) fn put_tail(code: &mut [u8], at: usize, base: usize, addr: usize, len: usize) -> Result {
    let imm = i32::try_from(addr as i64).map_err(|_| ERANGE)?;
    let [op, b0, b1, b2, b3] = code
        .get_mut(at..at.checked_add(5).ok_or(ERANGE)?)
        .ok_or(ERANGE)?
    else {
        return Err(ERANGE);
    };
    *op = 0x68;
    [*b0, *b1, *b2, *b3] = imm.to_le_bytes();
    super::put_rel32(code, at.wrapping_add(5), 0xe8, base, common())?;
    super::put_rel32(
        code,
        at.wrapping_add(10),
        0xe9,
        base,
        addr.wrapping_add(len),
    )
}

/// Set once a redirect could not be honoured (reported once).
static REDIRECT_REFUSED: AtomicBool = AtomicBool::new(false);

/// Called by `kp_x86_post_common` with the frame it built.
///
/// # Safety
///
/// `regs` is the trampoline's `pt_regs`, with the resume address and the
/// probed address in the two words above it; interrupts are off (since the
/// breakpoint).
#[no_mangle]
// In the trampolines' page (`trampolines.S`): their call is a direct jump.
#[link_section = ".text.kp_tramp"]
unsafe extern "C" fn kp_x86_post_hit(regs: *mut bindings::pt_regs) {
    // SAFETY: per the function's contract.
    let (regs, f) = unsafe { super::tramp_enter(regs, super::Entry::PushAddr) };
    // The state after the instruction: its stack pointer (below the two
    // words), `ip` set by the core to the next instruction.
    regs.sp = f.sp;
    let next = Engine::on_step_jump(f.addr, regs);
    // Straight to the next instruction rather than through the slot's jump
    // back: one indirect branch less, an emulator's costliest step (a TB
    // lookup under QEMU's TCG).
    let to = if regs.ip == next {
        next
    } else if regs.sp == f.sp {
        // A post handler redirected execution, keeping the stack.
        regs.ip
    } else {
        // Only a new instruction pointer can be honoured here.
        if !REDIRECT_REFUSED.swap(true, Ordering::Relaxed) {
            pr_err!(
                "probe at {:#x}: a post handler moved the stack pointer; ignored\n",
                f.addr
            );
        }
        regs.sp = f.sp;
        f.resume
    };
    // SAFETY: as above.
    unsafe { super::tramp_leave(&f, to) };
}
