// SPDX-License-Identifier: GPL-2.0

//! Function-entry probes through an ftrace direct call: the site of a
//! probed function's entry (`call __fentry__`) calls
//! `kp_x86_ftrace_direct` itself (`src/ftrace.c` registers the per-site
//! direct `ftrace_ops`), instead of ftrace's `ftrace_regs_caller` and the
//! engine's callback. No trap, no ftrace list walk, no recursion bits.
//!
//! ```text
//! entry:  [rsp] = site + 5 (the call's return), [rsp + 8] = the caller's
//!         return address
//!   (pt_regs, as the jump-optimization detour builds it; interrupts off)
//!   call kp_x86_ftrace_hit
//!   (registers back from pt_regs)
//!   ret                 to the function past the site, or where a pre
//!                       handler redirected (the word is rewritten)
//! ```
//!
//! The word the site's call pushed stays a return address into the probed
//! function, so that an unwinder in a handler (ORC on production kernels)
//! walks through the trampoline, which has unwind hints, to the probed
//! function and its caller, as through the kernel's `ftrace_regs_caller`.
//! The handlers see the kernel's kprobes-on-ftrace view
//! (`Core::on_ftrace`): the instruction pointer one past the site and the
//! stack pointer at the site (the caller's return address on top). When
//! another ftrace user traces the function as well, `ftrace_regs_caller`
//! runs its callbacks and jumps here with the same stack.

use super::*;
use crate::arch::Core;
use crate::entries::Engine;
use kernel::bindings;

/// Called by `kp_x86_ftrace_direct` with the frame it built.
///
/// # Safety
///
/// `regs` is the trampoline's `pt_regs`, with the site's return address
/// above it; interrupts are off.
#[no_mangle]
// In the trampolines' page (`trampolines.S`): their call is a direct jump.
#[link_section = ".text.kp_tramp"]
unsafe extern "C" fn kp_x86_ftrace_hit(regs: *mut bindings::pt_regs) {
    // SAFETY: per the function's contract.
    let (regs, f) = unsafe { super::tramp_enter(regs, super::Entry::FtraceSite) };
    // As ftrace's saved registers show the site: the stack pointer there,
    // the instruction pointer past it.
    regs.sp = f.sp;
    regs.ip = f.resume;
    // SAFETY: interrupts are off (the trampoline masked them).
    unsafe { Engine::on_ftrace(f.addr, regs, true) };
    let to = regs.ip;
    // SAFETY: as above.
    unsafe { super::tramp_leave(&f, to) };
}

// ---- Entry probes: where they go, and the ftrace path's fixups ----

extern "C" {
    fn kp_x86_return_stub();
}

/// Where the pre handler sees the instruction pointer on the ftrace path,
/// relative to the site: one past it, as after an int3.
pub(super) const FTRACE_PRE_IP_OFFSET: usize = 1;

/// Whether the `call rel32` at `addr` calls into ftrace (a traced function).
pub(super) fn is_ftrace_call(addr: usize, b: &[u8]) -> bool {
    let rel = i32::from_le_bytes([b[1], b[2], b[3], b[4]]);
    let target = (addr as i64 + 5 + rel as i64) as usize;
    match crate::symbols::symbol_at(target) {
        Some(s) => s.name().starts_with(b"ftrace_") || s.name() == b"__fentry__",
        None => false,
    }
}

impl Entries for Arch {
    const FTRACE_SITE_LEN: usize = FTRACE_SITE_LEN;

    const FTRACE_PRE_IP_OFFSET: usize = FTRACE_PRE_IP_OFFSET;

    /// How far before an ftrace call site its bytes reach: none on x86_64
    /// (the 5-byte site itself is checked).
    const FTRACE_GUARD: usize = 0;

    /// Where a probe asked for at a function's entry goes when it does not
    /// take the ftrace path (debugfs `ftrace` 0): past `endbr64` and past the
    /// ftrace call site, whose bytes belong to ftrace (it rewrites them at any
    /// time, and they may call anything: ftrace's trampolines, a BPF
    /// trampoline, this engine's parked direct sites). The first real
    /// instruction is probed.
    fn entry_probe_address(g: &RegGuard, start: usize, size: usize) -> usize {
        let Ok(b) = read_text(g, start) else {
            return start;
        };
        let mut at = 0;
        if starts_with_endbr(&b) {
            at = 4;
        }
        if crate::symbols::is_ftrace_site(start + at)
            || b[at..at + 5] == FTRACE_NOP
            || b[at] == CALL_REL32 && is_ftrace_call(start + at, &b[at..])
        {
            at += 5;
        }
        if at < size {
            start + at
        } else {
            start
        }
    }

    /// Where a function's ftrace call site is (past `endbr64`), if it has one:
    /// entry probes there take the engine's ftrace path (`src/ftrace.rs`).
    fn ftrace_entry_site(g: &RegGuard, start: usize, _size: usize) -> Option<usize> {
        let b = read_text(g, start).ok()?;
        let at = if starts_with_endbr(&b) {
            start + 4
        } else {
            start
        };
        crate::symbols::is_ftrace_site(at).then_some(at)
    }

    /// An inert instruction record for a point served by ftrace (no slot, no
    /// breakpoint: the 5-byte call site).
    fn ftrace_insn(g: &RegGuard, addr: usize) -> ArchInsn {
        ArchInsn {
            slot: 0,
            len: FTRACE_SITE_LEN as u8,
            orig: read_text(g, addr).unwrap_or([0; MAX_INSN_LEN]),
            emulate: None,
            boostable: false,
            post_tail: false,
        }
    }

    /// After a pre handler on the ftrace path redirected execution: ftrace
    /// honours a new instruction pointer but not a new stack pointer. The usual
    /// redirect at an entry, "return to the caller" (ip = the return address at
    /// `orig_sp`, sp = `orig_sp` + 8), becomes a jump to a `ret` with the stack
    /// left as it was (the kernel's `override_function_with_return()` does the
    /// same). Any other stack change cannot be honoured: it is undone together
    /// with the redirect (false; the function then runs normally).
    fn ftrace_fixup_redirect(regs: &mut bindings::pt_regs, orig_sp: usize, orig_ip: usize) -> bool {
        if regs.sp == orig_sp {
            return true;
        }
        let mut ret = 0usize;
        // SAFETY: a nofault read of the word at the entry's stack pointer.
        let readable = unsafe {
            bindings::copy_from_kernel_nofault(
                (&mut ret as *mut usize).cast(),
                orig_sp as *const _,
                8,
            )
        } == 0;
        let new_sp = regs.sp;
        regs.sp = orig_sp;
        if readable && new_sp == orig_sp + 8 && regs.ip == ret {
            regs.ip = kp_x86_return_stub as *const () as usize;
            return true;
        }
        regs.ip = orig_ip;
        false
    }

    /// Whether an `int3` sits at `addr` now (read under `text_mutex`, which
    /// every text writer holds, ftrace's `text_poke_bp()` included, so a
    /// breakpoint it places for a moment is not seen). Process context.
    fn breakpoint_at(addr: usize) -> bool {
        let _text = crate::symbols::TextLock::lock();
        // SAFETY: `addr` is kernel or module text (a function's ftrace site).
        unsafe { core::ptr::read_volatile(addr as *const u8) == INT3 }
    }
}
