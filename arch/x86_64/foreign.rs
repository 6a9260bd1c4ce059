// SPDX-License-Identifier: GPL-2.0

//! Someone else's patches in text the engine decodes: the kernel's
//! kprobes' int3 and optprobe jumps, kgdb-style breakpoints; where the
//! engine cannot know the original bytes, it refuses (`-EBUSY`).

use super::*;

/// The first bytes of the kernel's optprobe detour template
/// (`optprobe_template_entry` up to `optprobe_template_clac`, the part
/// the kernel copies unchanged into every detour), read at init; length 0
/// without CONFIG_OPTPROBES.
pub(super) static OPTPROBE_HEAD: [core::sync::atomic::AtomicU8; 8] =
    [const { core::sync::atomic::AtomicU8::new(0) }; 8];

pub(super) static OPTPROBE_HEAD_LEN: core::sync::atomic::AtomicUsize =
    core::sync::atomic::AtomicUsize::new(0);

pub(super) fn init_optprobe_head() {
    let (Some(entry), Some(clac)) = (
        crate::symbols::lookup_name(kernel::c_str!("optprobe_template_entry")),
        crate::symbols::lookup_name(kernel::c_str!("optprobe_template_clac")),
    ) else {
        return;
    };
    let n = clac.wrapping_sub(entry);
    if !(1..=OPTPROBE_HEAD.len()).contains(&n) {
        return;
    }
    let Ok(b) = read_text(&RegGuard::lock(), entry) else {
        return;
    };
    for (slot, &v) in OPTPROBE_HEAD.iter().zip(b.iter()).take(n) {
        slot.store(v, Ordering::Relaxed);
    }
    OPTPROBE_HEAD_LEN.store(n, Ordering::Release);
}

/// Whether `t` holds the start of a kernel optprobe detour.
pub(super) fn is_optprobe_detour(t: usize) -> bool {
    let n = OPTPROBE_HEAD_LEN.load(Ordering::Acquire);
    if n == 0 {
        return false;
    }
    let mut b = [0u8; 8];
    // SAFETY: a nofault read into a local of 8 bytes.
    if unsafe { bindings::copy_from_kernel_nofault(b.as_mut_ptr().cast(), t as *const _, n) } != 0 {
        return false;
    }
    OPTPROBE_HEAD
        .iter()
        .zip(b.iter())
        .take(n)
        .all(|(h, &v)| h.load(Ordering::Relaxed) == v)
}

/// Whether every byte from `pc` to `fend` is an `int3`: padding at the end
/// of a function (after a `ud2`, a call that does not return, a `ret`).
pub(super) fn int3_to_end(g: &RegGuard, pc: usize, fend: usize) -> bool {
    let mut at = pc;
    while at < fend {
        let Ok(b) = read_text(g, at) else {
            return false;
        };
        let n = (fend - at).min(b.len());
        if b.iter().take(n).any(|&c| c != INT3) {
            return false;
        }
        at += n;
    }
    true
}

/// Whether the instruction at `pc` (`insn`, decoded from `bytes` as
/// `read_text` shows them: our own breakpoints and jumps already replaced
/// by the original bytes; `prev`: the class of the instruction before it;
/// `fend`: the function's end) is someone else's patch, whose original
/// instructions, and so the boundaries after it, are unknown:
///
/// - an `int3` that is neither padding to the function's end nor padding
///   after a `ret` or `jmp` (the compiler's straight-line-speculation
///   padding, and the kernel's own: alternatives that shorten a `jmp` fill
///   the rest with `int3`, on any config): the kernel's kprobes, kgdb, a
///   text_poke_bp() in progress. (A kernel kprobe on the instruction after
///   a `ret` or `jmp` looks the same as that padding: docs/status.md, Known
///   limits.)
/// - a `jmp rel32` to the start of a kernel optprobe detour (its first
///   bytes are the kernel's template): a jump-optimized kernel kprobe, whose
///   5 bytes cover more than one instruction. Other jumps out of text
///   (freed init code, ITS thunks, BPF images) are real instructions.
pub(super) fn foreign_patch(
    g: &RegGuard,
    pc: usize,
    insn: &decode::Insn,
    bytes: &[u8],
    prev: Option<Class>,
    fend: usize,
) -> Option<&'static str> {
    match insn.class {
        Class::Int3 => {
            let after_jump = matches!(
                prev,
                Some(Class::Ret | Class::JmpRel | Class::JmpIndirect | Class::Int3)
            );
            (!after_jump && !int3_to_end(g, pc, fend)).then_some("someone else's int3")
        }
        Class::JmpRel if insn.rel_len == 4 => {
            let t = insn.rel_target(pc as u64, bytes)? as usize;
            is_optprobe_detour(t).then_some("the kernel's jump-optimized kprobe")
        }
        _ => None,
    }
}
