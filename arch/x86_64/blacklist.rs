// SPDX-License-Identifier: GPL-2.0

//! What the x86_64 backend adds to the blacklist: its entry and ftrace
//! assembly, the int3 path's roots for the derived trap-path list, and the
//! sections nobody may probe.

use super::*;
use crate::arch::reason::TRAP;

/// Assembly marked `_ASM_NOKPROBE` through a macro the list from the
/// source (`nokprobe_names.rs`) does not expand, or that its own section
/// of a kernel with kprobes refuses.
const ASM: &kernel::str::CStr = kernel::c_str!("asm NOKPROBE");

impl Refusals for Arch {
    /// Functions never to probe, with the reason: the x86_64 trap path up to the
    /// engine's recursion check (`exc_int3` -> `do_int3` -> `notify_die` -> the
    /// notifier chain; most are `noinstr` or `NOKPROBE_SYMBOL` already), and
    /// assembly marked `_ASM_NOKPROBE`. See `src/blacklist.rs`.
    const BLACKLIST_FUNCS: &'static [(&'static kernel::str::CStr, &'static kernel::str::CStr)] = &[
        (kernel::c_str!("exc_int3"), TRAP),
        (kernel::c_str!("do_int3"), TRAP),
        (kernel::c_str!("do_int3_user"), TRAP),
        (kernel::c_str!("poke_int3_handler"), TRAP),
        (kernel::c_str!("kprobe_int3_handler"), TRAP),
        (kernel::c_str!("notify_die"), TRAP),
        (kernel::c_str!("atomic_notifier_call_chain"), TRAP),
        (kernel::c_str!("notifier_call_chain"), TRAP),
        (kernel::c_str!("irqentry_nmi_enter"), TRAP),
        (kernel::c_str!("irqentry_nmi_exit"), TRAP),
        (kernel::c_str!("sync_core"), TRAP),
        // _ASM_NOKPROBE in arch/x86/entry/{thunk,entry}.S (THUNK macro).
        (kernel::c_str!("preempt_schedule_thunk"), ASM),
        (kernel::c_str!("preempt_schedule_notrace_thunk"), ASM),
        (kernel::c_str!("warn_thunk_thunk"), ASM),
        // _ASM_NOKPROBE in arch/x86/lib/retpoline.S (__EXPORT_THUNK) outside
        // the thunk span below (MITIGATION_SRSO, MITIGATION_RETHUNK).
        (kernel::c_str!("srso_alias_untrain_ret"), ASM),
        (kernel::c_str!("srso_alias_safe_ret"), ASM),
        (kernel::c_str!("srso_alias_return_thunk"), ASM),
        (kernel::c_str!("entry_untrain_ret"), ASM),
    ];

    /// The kernel's own list for this arch's code, read from its source
    /// (`scripts/gen-nokprobe.py`).
    const NOKPROBE_NAMES: &'static [&'static [u8]] = super::nokprobe_names::NOKPROBE_NAMES;

    /// Where a kernel breakpoint goes on its way to the engine's re-entry
    /// guard and back (`exc_int3()`'s kernel-mode branch): the roots of the
    /// derived trap-path blacklist (`src/blacklist.rs`). `exc_int3()` itself is
    /// noinstr; its user-mode branch (`do_int3_user()`) and `die()` are not on
    /// a kernel breakpoint's way.
    const TRAP_ROOTS: &'static [&'static kernel::str::CStr] = &[
        kernel::c_str!("poke_int3_handler"),
        kernel::c_str!("irqentry_nmi_enter"),
        kernel::c_str!("do_int3"),
        kernel::c_str!("notify_die"),
        kernel::c_str!("atomic_notifier_call_chain"),
        kernel::c_str!("notifier_call_chain"),
        kernel::c_str!("irqentry_nmi_exit"),
    ];

    /// The engine's own trap entry: what it calls is on the trap path too.
    fn trap_entry() -> usize {
        trap::kp_x86_int3 as *const () as usize
    }

    /// ftrace's assembly (`arch/x86/kernel/ftrace_64.S`), first to last symbol:
    /// `ftrace_caller` and `ftrace_regs_caller` are templates copied into each
    /// ops' trampoline (a breakpoint there would be copied with them), with
    /// inner labels that split them in kallsyms; `__fentry__` and the stubs are
    /// what call sites call.
    const BLACKLIST_SPANS: &'static [(
        &'static kernel::str::CStr,
        &'static kernel::str::CStr,
        &'static kernel::str::CStr,
    )] = &[
        // The retpoline and return thunks (MITIGATION_RETPOLINE: the
        // `.text..__x86.indirect_thunk` and `.text..__x86.return_thunk`
        // sections, laid out from the first to the last, arch/x86/lib/
        // retpoline.S, marked _ASM_NOKPROBE): every indirect call and return
        // of the trap path can go through them, as alternatives choose.
        (
            kernel::c_str!("__x86_indirect_thunk_array"),
            kernel::c_str!("__x86_return_thunk"),
            ASM,
        ),
        (
            kernel::c_str!("ftrace_stub"),
            kernel::c_str!("return_to_handler"),
            crate::arch::reason::FTRACE_ASM,
        ),
        (
            kernel::c_str!("ftrace_stub"),
            kernel::c_str!("ftrace_stub_direct_tramp"),
            crate::arch::reason::FTRACE_ASM,
        ),
    ];

    /// objtool checks x86_64's noinstr code: it calls out of it only
    /// between `instrumentation_begin()` and `_end()`. `schedule()`, which
    /// `syscall_exit_to_user_mode()` calls, is probed as the kernel's
    /// kprobes probe it.
    const SCHED_TEXT_CALLEES_PROBEABLE: bool = true;

    /// Arch-specific text sections that must not be probed (none beyond the
    /// generic list on x86_64: `.entry.text` is already there).
    const BLACKLIST_SECTIONS: &'static [(
        &'static kernel::str::CStr,
        &'static kernel::str::CStr,
        &'static kernel::str::CStr,
    )] = &[];
}
