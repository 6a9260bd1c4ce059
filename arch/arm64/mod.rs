// SPDX-License-Identifier: GPL-2.0

//! arm64 backend: not written yet (issue "arm64 backend").
//!
//! The engine loads and its arch-independent paths (symbol resolution,
//! validation, error reporting) run on arm64; every probe that reaches the
//! backend is refused with -EOPNOTSUPP and a log line. The BRK path (an
//! `ftrace_ops` on `do_el1_brk64`, see DESIGN.md), the instruction classifier,
//! simulation and out-of-line stepping come with that issue.

use kernel::bindings;
use kernel::prelude::*;

/// Backend name, for messages.
pub(crate) const NAME: &str = "arm64 (probing not yet supported)";

/// A prepared probed instruction (none can be prepared yet).
#[derive(Clone, Copy)]
pub(crate) struct ArchInsn {
    orig: u32,
}

pub(crate) fn entry_probe_address(start: usize, _size: usize) -> usize {
    start
}

pub(crate) fn prepare(addr: usize, _fstart: usize, _fsize: usize) -> Result<ArchInsn> {
    pr_err!(
        "arm64: cannot probe {:#x}: the arm64 backend is not written yet\n",
        addr
    );
    Err(crate::errno::eopnotsupp())
}

pub(crate) fn release(_insn: ArchInsn) {}

pub(crate) fn arm(_addr: usize, _insn: &ArchInsn) -> Result {
    Err(crate::errno::eopnotsupp())
}

pub(crate) fn disarm(_addr: usize, _insn: &ArchInsn) -> Result {
    Err(crate::errno::eopnotsupp())
}

pub(crate) fn setup_step(
    _addr: usize,
    _insn: &ArchInsn,
    _regs: &mut bindings::pt_regs,
    _saved: &mut usize,
) {
}

pub(crate) fn is_step_done(_trap_addr: usize, _insn: &ArchInsn) -> bool {
    false
}

pub(crate) fn finish_step(
    _addr: usize,
    insn: &ArchInsn,
    _regs: &mut bindings::pt_regs,
    _saved: usize,
) {
    let _ = insn.orig;
}

pub(crate) fn init() -> Result {
    Ok(())
}

pub(crate) fn exit() {}

const TRAP: &kernel::str::CStr = kernel::c_str!("engine trap path");
const ASM: &kernel::str::CStr = kernel::c_str!("asm NOKPROBE");

/// Functions never to probe, with the reason: the arm64 trap path (BRK
/// exception entry and the ftrace route to it; see DESIGN.md), and assembly
/// marked `NOKPROBE`. See `src/blacklist.rs`.
pub(crate) const BLACKLIST_FUNCS: &[(&kernel::str::CStr, &kernel::str::CStr)] = &[
    (kernel::c_str!("do_el1_brk64"), TRAP),
    (kernel::c_str!("el1_dbg"), TRAP),
    (kernel::c_str!("el1h_64_sync_handler"), TRAP),
    (kernel::c_str!("call_el1_break_hook"), TRAP),
    (kernel::c_str!("ftrace_caller"), TRAP),
    (kernel::c_str!("ftrace_ops_list_func"), TRAP),
    (kernel::c_str!("arch_ftrace_ops_list_func"), TRAP),
    // NOKPROBE() in arch/arm64/kernel/{entry,entry-ftrace}.S.
    (kernel::c_str!("_mcount"), ASM),
    (kernel::c_str!("cpu_switch_to"), ASM),
    (kernel::c_str!("ret_from_fork"), ASM),
    (kernel::c_str!("call_on_irq_stack"), ASM),
    (kernel::c_str!("__sdei_asm_entry_trampoline"), ASM),
    (kernel::c_str!("__sdei_asm_exit_trampoline"), ASM),
    (kernel::c_str!("__sdei_asm_handler"), ASM),
    (kernel::c_str!("__sdei_handler_abort"), ASM),
];

/// Hypervisor and identity-mapped text, as `arch_populate_kprobe_blacklist()`.
pub(crate) const BLACKLIST_SECTIONS: &[(
    &kernel::str::CStr,
    &kernel::str::CStr,
    &kernel::str::CStr,
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
