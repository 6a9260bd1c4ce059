// SPDX-License-Identifier: GPL-2.0

//! Function entries: where a probe on one goes (past `bti c` and ftrace's
//! patchable entry), and entries served by ftrace.

use super::*;

// A pre handler's "return to the caller" at an entry served by ftrace
// resumes here (`ftrace_fixup_redirect`): `ret` returns through x30 as the
// last ftrace callback left it. (Reached by ftrace_caller's `ret x9`: a RET
// is not a BTI branch, no landing pad needed.)
core::arch::global_asm!(
    ".pushsection .text.kp_tramp, \"ax\", %progbits",
    ".globl kp_arm64_return_stub",
    ".type kp_arm64_return_stub, %function",
    ".balign 4",
    "kp_arm64_return_stub:",
    "ret",
    ".size kp_arm64_return_stub, . - kp_arm64_return_stub",
    ".popsection",
);

extern "C" {
    fn kp_arm64_return_stub();
}

/// Where a function's ftrace site can be: its first three instructions
/// (`bti c`, `mov x9, x30`, then the site).
const FTRACE_ENTRY_SPAN: usize = 12;

impl Entries for Arch {
    /// The site is the patchable entry's second instruction (`bl
    /// ftrace_caller` when armed); the pre handler sees pc at it, as at a
    /// BRK, and the post handler past it (the function's first own
    /// instruction).
    const FTRACE_SITE_LEN: usize = 4;
    const FTRACE_PRE_IP_OFFSET: usize = 0;
    /// ftrace's registers at the site (`DYNAMIC_FTRACE_WITH_ARGS`): x0-x8,
    /// fp, lr, sp, pc (`kp_arch_fregs_to_regs()` in helpers.c).
    const FTRACE_FULL_REGS: bool = false;
    /// An ftrace call site (the `nop`/`bl` at function + 4) owns the 8-byte ops
    /// literal before the function (CALL_OPS) and the `mov x9, x30` before it:
    /// an address is refused when a site lies within the next 12 bytes.
    const FTRACE_GUARD: usize = 12;

    /// Where a probe asked for at a function's entry really goes: past the
    /// BTI landing pad (`bti c`) of BTI kernels, and past the two
    /// patchable-entry instructions ftrace owns (`mov x9, x30` and a NOP or
    /// `bl ftrace_caller`), which ftrace may rewrite at any time. On a
    /// PAC/shadow-call-stack kernel that is before `paciasp` and the shadow
    /// stack push: a kretprobe's new return address is the one signed and
    /// pushed.
    fn entry_probe_address(g: &RegGuard, start: usize, size: usize) -> usize {
        // ftrace knows its site even under someone else's BRK.
        if let Some(site) = Self::ftrace_entry_site(g, start, size) {
            if site + 4 - start < size {
                return site + 4;
            }
        }
        let Ok(first) = read_insn(g, start) else {
            return start;
        };
        let at = if (first == BTI_C || first == BTI_JC) && size > 4 {
            start + 4
        } else {
            start
        };
        let (Ok(a), Ok(b)) = (read_insn(g, at), read_insn(g, at + 4)) else {
            return at;
        };
        let second_is_ftrace = b == NOP || matches!(decode::classify(b), Class::Bl { .. });
        if (a == MOV_X9_X30 || a == NOP) && second_is_ftrace && size > at - start + 8 {
            at + 8
        } else {
            at
        }
    }

    /// A function's ftrace call site (past `bti c`, the `mov x9, x30`
    /// before it), if it has one: entry probes there are served by the
    /// engine's `ftrace_ops` (`src/ftrace.c`) without a BRK.
    /// Asked of ftrace, not decoded: someone else's BRK may sit on the
    /// `bti c` (the kernel's kprobe on the symbol, on a BTI kernel).
    fn ftrace_entry_site(_g: &RegGuard, start: usize, size: usize) -> Option<usize> {
        let last = start
            .checked_add(size.min(FTRACE_ENTRY_SPAN))?
            .checked_sub(1)?;
        crate::symbols::ftrace_location_range(start, last).filter(|&s| s != 0 && s - start < size)
    }

    /// An inert instruction record for a point served by ftrace.
    fn ftrace_insn(g: &RegGuard, addr: usize) -> ArchInsn {
        ArchInsn {
            orig: read_insn(g, addr).unwrap_or(NOP),
            simulated: false,
            slot: 0,
            boost: false,
        }
    }

    /// After a pre handler on the ftrace path redirected execution: ftrace
    /// takes the new pc (and x0-x8, fp, lr) but restores the stack pointer
    /// itself. At an entry nothing is on the stack yet, so the usual
    /// redirect, "return to the caller" (pc = lr), needs no stack change;
    /// it becomes a `ret` stub's, which returns through x30 as the last
    /// ftrace callback leaves it: the function graph tracer, whose callback
    /// may run after the engine's, hijacks the function's return through
    /// lr, and a jump straight to the caller would leave its frame on the
    /// task's shadow stack (its next return would find the wrong frame and
    /// panic). A redirect that also moved the stack pointer is undone whole
    /// (false; the function then runs normally).
    fn ftrace_fixup_redirect(regs: &mut bindings::pt_regs, orig_sp: usize, orig_ip: usize) -> bool {
        if regs::sp(regs) == orig_sp {
            if Some(regs::ip(regs)) == regs::x(regs, 30) {
                regs::set_ip(regs, kp_arm64_return_stub as *const () as usize);
            }
            return true;
        }
        regs::set_sp(regs, orig_sp);
        regs::set_ip(regs, orig_ip);
        false
    }

    /// Whether a BRK sits at `addr` now (read under `text_mutex`, which every
    /// text writer holds). Process context.
    fn breakpoint_at(addr: usize) -> bool {
        let _text = crate::symbols::TextLock::lock();
        // SAFETY: `addr` is kernel or module text, 4-byte aligned.
        decode::is_brk(unsafe { core::ptr::read_volatile(addr as *const u32) }).is_some()
    }
}
