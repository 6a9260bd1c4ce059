// SPDX-License-Identifier: GPL-2.0

//! What the arm64 backend refuses to probe: its trap path (the BRK
//! exception entry and the ftrace route to it, `helpers.c`), assembly
//! marked `NOKPROBE`, and the sections and spans refused whole.

use super::*;
use crate::arch::reason::TRAP;

impl Refusals for Arch {
    /// Functions never to probe, with the reason: the arm64 trap path (BRK
    /// exception entry and the ftrace route to it; see helpers.c), and assembly
    /// marked `NOKPROBE`. See `src/blacklist.rs`.
    const BLACKLIST_FUNCS: &'static [(&'static kernel::str::CStr, &'static kernel::str::CStr)] = &[
        (kernel::c_str!("do_el1_brk64"), TRAP),
        (kernel::c_str!("el1_brk64"), TRAP),
        (kernel::c_str!("ftrace_ops_test"), TRAP),
        (kernel::c_str!("hash_contains_ip"), TRAP),
        (kernel::c_str!("ftrace_lookup_ip"), TRAP),
        (kernel::c_str!("__ftrace_lookup_ip"), TRAP),
        (kernel::c_str!("el1h_64_sync_handler"), TRAP),
        (kernel::c_str!("call_el1_break_hook"), TRAP),
        (kernel::c_str!("ftrace_caller"), TRAP),
        (kernel::c_str!("ftrace_ops_list_func"), TRAP),
        (kernel::c_str!("arch_ftrace_ops_list_func"), TRAP),
        // The hit path pins the engine while a return is hijacked (a
        // kretprobe's entry, reached from the BRK hook through a pointer,
        // which the derivation does not follow). A BRK hit inside a hit
        // comes back through the hook's ftrace_ops, whose recursion guard
        // lets one such level through, not two: a kp_mass probe in
        // `try_module_get()`, hit by a kretprobe's entry inside a BRK taken
        // in an ftrace callback, was taken by the kernel for a stray BRK
        // (`die()`; both CPUs then spun on `die_lock`, interrupts masked).
        (kernel::c_str!("try_module_get"), TRAP),
        (kernel::c_str!("module_put"), TRAP),
        // The die notifier chain: the engine's oops recovery (its DIE_OOPS
        // notifier) runs from it, and so does die() for a stray exception.
        // NOKPROBE_SYMBOL() where the kernel has kprobes; a kernel without
        // them has no such list, and arm64's BRK path does not call it
        // (x86_64's int3 path does, so the derivation finds it there).
        (kernel::c_str!("notify_die"), TRAP),
        (kernel::c_str!("atomic_notifier_call_chain"), TRAP),
        (kernel::c_str!("notifier_call_chain"), TRAP),
        // The kernel's `__kprobes` is_spurious_el1_translation_fault(), which
        // clang inlines here where kprobes are off (arm64-hardened).
        (
            kernel::c_str!("__do_kernel_fault"),
            kernel::c_str!("inlines a __kprobes function of the kernel's"),
        ),
        // Assembly marked NOKPROBE() is in the generated list
        // (nokprobe_names.rs).
    ];

    /// The kernel's own list for this arch's code, read from its source
    /// (`scripts/gen-nokprobe.py`).
    const NOKPROBE_NAMES: &'static [&'static [u8]] = super::nokprobe_names::NOKPROBE_NAMES;

    /// Where a kernel BRK goes on its way to the engine's re-entry guard and
    /// back: the exception entry's handler, the BRK handler the engine's
    /// `ftrace_ops` sits on, and ftrace's dispatch to that ops (the roots of
    /// the derived trap-path blacklist, `src/blacklist.rs`).
    const TRAP_ROOTS: &'static [&'static kernel::str::CStr] = &[
        kernel::c_str!("el1h_64_sync_handler"),
        // The debug exception's entry and exit accounting (as x86_64's
        // `irqentry_nmi_enter/exit`), named on their own so that the depth
        // counts from them: lockdep's irq tracing on the way out calls
        // `return_address()` and its stack walk (a BRK there hit itself on
        // every way out: kp_mass, arm64-hardened).
        kernel::c_str!("arm64_enter_el1_dbg"),
        kernel::c_str!("arm64_exit_el1_dbg"),
        kernel::c_str!("do_el1_brk64"),
        kernel::c_str!("ftrace_ops_list_func"),
        kernel::c_str!("arch_ftrace_ops_list_func"),
        kernel::c_str!("ftrace_ops_assist_func"),
        // What a kretprobe's entry calls through resolved pointers, inside
        // the hit (and, at an entry served by ftrace, inside the engine's
        // ftrace callback): the function graph tracer's push and the
        // shadow stack's return-address lookup. A kp_mass probe in
        // `fgraph_reserve_data()` was taken there for a stray BRK
        // (`die()`; seed 0x81a31edd on arm64-hardened).
        kernel::c_str!("function_graph_enter"),
        kernel::c_str!("fgraph_reserve_data"),
        kernel::c_str!("fgraph_retrieve_data"),
        kernel::c_str!("ftrace_graph_ret_addr"),
    ];

    /// The engine's own trap entry: what it calls is on the trap path too.
    fn trap_entry() -> usize {
        trap::kp_arm64_brk as *const () as usize
    }

    /// ftrace's assembly (`arch/arm64/kernel/entry-ftrace.S`), first to last
    /// symbol: `ftrace_caller` has inner labels that split it in kallsyms, and
    /// every traced call (the engine's BRK hook among them) runs it.
    const BLACKLIST_SPANS: &'static [(
        &'static kernel::str::CStr,
        &'static kernel::str::CStr,
        &'static kernel::str::CStr,
    )] = &[
        (
            kernel::c_str!("ftrace_caller"),
            kernel::c_str!("ftrace_stub_direct_tramp"),
            crate::arch::reason::FTRACE_ASM,
        ),
        // Without direct calls (kCFI kernels: no CALL_OPS) there is no
        // `ftrace_stub_direct_tramp`, and the inner label `ftrace_call`
        // is a symbol of its own after `ftrace_caller`'s.
        (
            kernel::c_str!("ftrace_caller"),
            kernel::c_str!("ftrace_call"),
            crate::arch::reason::FTRACE_ASM,
        ),
        (
            kernel::c_str!("ftrace_stub"),
            kernel::c_str!("ftrace_stub_graph"),
            crate::arch::reason::FTRACE_ASM,
        ),
        (
            kernel::c_str!("return_to_handler"),
            kernel::c_str!("return_to_handler"),
            crate::arch::reason::FTRACE_ASM,
        ),
    ];

    /// No objtool on arm64: what noinstr code calls is refused whole
    /// (its context tracking calls an out-of-line `preempt_count()`).
    const SCHED_TEXT_CALLEES_PROBEABLE: bool = false;

    /// Hypervisor and identity-mapped text, as `arch_populate_kprobe_blacklist()`.
    const BLACKLIST_SECTIONS: &'static [(
        &'static kernel::str::CStr,
        &'static kernel::str::CStr,
        &'static kernel::str::CStr,
    )] = &[
        (
            kernel::c_str!("__hyp_text_start"),
            kernel::c_str!("__hyp_text_end"),
            kernel::c_str!("hyp text"),
        ),
        (
            kernel::c_str!("__hyp_idmap_text_start"),
            kernel::c_str!("__hyp_idmap_text_end"),
            kernel::c_str!("hyp idmap text"),
        ),
        (
            kernel::c_str!("__idmap_text_start"),
            kernel::c_str!("__idmap_text_end"),
            kernel::c_str!("idmap text"),
        ),
    ];
}
