// SPDX-License-Identifier: GPL-2.0

//! `kp_arm64_sim`: a probe on each instruction class the arm64 backend
//! simulates (and one it steps out of line), inside purpose-built assembly
//! functions. Each function's results with the probe must equal its results
//! without it, and the probe must fire on every call.

use crate::insn_table::ENTRY_PAD;
use crate::kp::{self, Target};
use crate::kunit::Test;
use core::hint::black_box;
use core::sync::atomic::{AtomicUsize, Ordering};

/// The landing pads of BTI kernels (every function is called through a
/// pointer here; `br`/`blr` land on the labels), as the compiler emits them:
/// `bti c` where `blr` lands, `bti j` where `br` lands. Empty elsewhere
/// (`insn_table::ENTRY_PAD`).
#[cfg(CONFIG_ARM64_BTI_KERNEL)]
macro_rules! bti {
    (c) => {
        "bti c"
    };
    (j) => {
        "bti j"
    };
}
#[cfg(not(CONFIG_ARM64_BTI_KERNEL))]
macro_rules! bti {
    ($_:ident) => {
        ""
    };
}

core::arch::global_asm!(
    ".pushsection .text.kp_sim, \"ax\", %progbits",
    ".macro KP_FN name",
    ".globl \\name",
    ".type \\name, %function",
    ".balign 8",
    "\\name:",
    bti!(c),
    ".endm",
    // adr / adrp: return an address computed from the pc.
    "KP_FN kp_sim_adr",
    "adr x0, .",
    "ret",
    "KP_FN kp_sim_adrp",
    "adrp x0, kp_sim_adrp",
    "ret",
    // b / bl
    "KP_FN kp_sim_b",
    "b 1f",
    "mov x0, #1",
    "ret",
    "1: mov x0, #2",
    "ret",
    "KP_FN kp_sim_bl",
    "mov x9, x30",
    "bl 1f",
    "mov x30, x9",
    "ret",
    "1: mov x0, #3",
    "ret",
    // b.cond: compare x0 with x1, return 1 when the condition holds.
    ".macro KP_BCOND name, cond",
    "KP_FN \\name",
    "cmp x0, x1",
    "b.\\cond 1f",
    "mov x0, #0",
    "ret",
    "1: mov x0, #1",
    "ret",
    ".endm",
    "KP_BCOND kp_sim_b_eq, eq",
    "KP_BCOND kp_sim_b_ne, ne",
    "KP_BCOND kp_sim_b_hs, hs",
    "KP_BCOND kp_sim_b_lo, lo",
    "KP_BCOND kp_sim_b_mi, mi",
    "KP_BCOND kp_sim_b_pl, pl",
    "KP_BCOND kp_sim_b_vs, vs",
    "KP_BCOND kp_sim_b_vc, vc",
    "KP_BCOND kp_sim_b_hi, hi",
    "KP_BCOND kp_sim_b_ls, ls",
    "KP_BCOND kp_sim_b_ge, ge",
    "KP_BCOND kp_sim_b_lt, lt",
    "KP_BCOND kp_sim_b_gt, gt",
    "KP_BCOND kp_sim_b_le, le",
    // cbz / cbnz / tbz / tbnz
    ".macro KP_TEST name, insn:vararg",
    "KP_FN \\name",
    "\\insn, 1f",
    "mov x0, #0",
    "ret",
    "1: mov x0, #1",
    "ret",
    ".endm",
    "KP_TEST kp_sim_cbz_x, cbz x0",
    "KP_TEST kp_sim_cbnz_x, cbnz x0",
    "KP_TEST kp_sim_cbz_w, cbz w0",
    "KP_TEST kp_sim_tbz_3, tbz x0, #3",
    "KP_TEST kp_sim_tbnz_63, tbnz x0, #63",
    // ldr (literal): x, w, sw
    "KP_FN kp_sim_ldr_x",
    "ldr x0, 1f",
    "ret",
    ".balign 8",
    "1: .quad 0x1122334455667788",
    "KP_FN kp_sim_ldr_w",
    "ldr w0, 1f",
    "ret",
    "1: .word 0x80000001",
    "KP_FN kp_sim_ldrsw",
    "ldrsw x0, 1f",
    "ret",
    "1: .word 0x80000001",
    // br / blr / ret
    "KP_FN kp_sim_br",
    "adr x1, 1f",
    "br x1",
    "mov x0, #0",
    "ret",
    "1:",
    bti!(j),
    "mov x0, #4",
    "ret",
    "KP_FN kp_sim_blr",
    "mov x9, x30",
    "adr x1, 1f",
    "blr x1",
    "mov x30, x9",
    "ret",
    "1:",
    bti!(c),
    "mov x0, #5",
    "ret",
    "KP_FN kp_sim_ret",
    "mov x0, #7",
    "ret",
    // Out of line (boosted without a post handler, stepped with one):
    // data processing, flags set and read, stack pushes and pops with
    // write-back, loads and stores, a division (by zero too), a NOP.
    "KP_FN kp_sim_step_add",
    "add x0, x0, x1, lsl #1",
    "ret",
    "KP_FN kp_step_stack",
    "stp x29, x30, [sp, #-32]!",
    "mov x29, sp",
    "str x0, [sp, #16]",
    "ldr x2, [sp, #16]",
    "eor x0, x2, x1, ror #7",
    "ldp x29, x30, [sp], #32",
    "ret",
    "KP_FN kp_step_flags",
    "cmp x0, x1",
    "cset x0, lt",
    "ret",
    "KP_FN kp_step_adds",
    "adds x2, x0, x1",
    "cset x0, cs",
    "ret",
    "KP_FN kp_step_madd",
    "madd x0, x0, x1, x1",
    "ret",
    "KP_FN kp_step_udiv",
    "udiv x0, x0, x1",
    "ret",
    "KP_FN kp_step_nop",
    "nop",
    "sub x0, x0, x1",
    "ret",
    ".popsection",
);

insn_table!(
    FUNCS:
    kp_sim_adr @ 0, kp_sim_adrp @ 0, kp_sim_b @ 0, kp_sim_bl @ 4,
    kp_sim_b_eq @ 4, kp_sim_b_ne @ 4, kp_sim_b_hs @ 4, kp_sim_b_lo @ 4,
    kp_sim_b_mi @ 4, kp_sim_b_pl @ 4, kp_sim_b_vs @ 4, kp_sim_b_vc @ 4,
    kp_sim_b_hi @ 4, kp_sim_b_ls @ 4, kp_sim_b_ge @ 4, kp_sim_b_lt @ 4,
    kp_sim_b_gt @ 4, kp_sim_b_le @ 4,
    kp_sim_cbz_x @ 0, kp_sim_cbnz_x @ 0, kp_sim_cbz_w @ 0, kp_sim_tbz_3 @ 0, kp_sim_tbnz_63 @ 0,
    kp_sim_ldr_x @ 0, kp_sim_ldr_w @ 0, kp_sim_ldrsw @ 0,
    kp_sim_br @ 4, kp_sim_blr @ 8, kp_sim_ret @ 4,
);

extern "C" {
    fn kp_sim_step_add(a: u64, b: u64) -> u64;
    fn kp_step_stack(a: u64, b: u64) -> u64;
    fn kp_step_flags(a: u64, b: u64) -> u64;
    fn kp_step_adds(a: u64, b: u64) -> u64;
    fn kp_step_madd(a: u64, b: u64) -> u64;
    fn kp_step_udiv(a: u64, b: u64) -> u64;
    fn kp_step_nop(a: u64, b: u64) -> u64;
}

/// Instructions that run out of line (every instruction of `kp_step_stack`).
const STEPPED: &[crate::insn_table::Entry] = &[
    (c"kp_sim_step_add", kp_sim_step_add, ENTRY_PAD),
    (c"kp_step_stack", kp_step_stack, ENTRY_PAD),
    (c"kp_step_stack", kp_step_stack, ENTRY_PAD + 4),
    (c"kp_step_stack", kp_step_stack, ENTRY_PAD + 8),
    (c"kp_step_stack", kp_step_stack, ENTRY_PAD + 12),
    (c"kp_step_stack", kp_step_stack, ENTRY_PAD + 16),
    (c"kp_step_stack", kp_step_stack, ENTRY_PAD + 20),
    (c"kp_step_flags", kp_step_flags, ENTRY_PAD),
    (c"kp_step_flags", kp_step_flags, ENTRY_PAD + 4),
    (c"kp_step_adds", kp_step_adds, ENTRY_PAD),
    (c"kp_step_madd", kp_step_madd, ENTRY_PAD),
    (c"kp_step_udiv", kp_step_udiv, ENTRY_PAD),
    (c"kp_step_nop", kp_step_nop, ENTRY_PAD),
    // The branch targets of `kp_sim_br` and `kp_sim_blr`: on BTI kernels
    // their landing pads (`bti j`, `bti c`), reached with BTYPE set.
    (c"kp_sim_br", kp_sim_br, ENTRY_PAD + 16),
    (c"kp_sim_blr", kp_sim_blr, ENTRY_PAD + 20),
];

/// Each simulated class: no second trap, with or without a post handler.
fn arm64_simulated_classes(t: &mut Test) {
    crate::insn_table::check(t, FUNCS, true, |_, _| 1, Some(|_, _| 0));
}

/// Instructions run out of line: boosted (the copy branches back)
/// without a post handler, stepped with one (all of DAIF masked; the copy
/// branches to the post trampoline, which returns with `eret`): no second
/// trap either way, the post handler on every hit, results (flags and
/// stack write-back included) as without the probe.
fn arm64_boosted_and_stepped(t: &mut Test) {
    crate::insn_table::check(t, STEPPED, true, |_, _| 1, Some(|_, _| 0));
}

/// A data abort in the out-of-line copy of a probed load (stepped: a fault
/// handler keeps it from boosting) reaches the probe's fault handler
/// through the engine's hook on `do_mem_abort()`, with the exception class
/// as the trap number (0x25, data abort at EL1); the handler's fix stands
/// and execution goes on after the load. Without a fault the handler does
/// not run; the probe still works after.
fn arm64_fault_handler(t: &mut Test) {
    use crate::targets::kp_kunit_load;
    const ESR_EC_DABT_CUR: usize = 0x25;
    let word: u64 = 0x1234_5678;
    let at = kp_kunit_load(&word as *const u64 as usize).1;
    let fixer = crate::kp_api::FaultFixer {
        pre: AtomicUsize::new(0),
        faults: AtomicUsize::new(0),
        trapnr: AtomicUsize::new(usize::MAX),
        len: 4,
        value: 0xfeed,
    };
    let p = match kp::Kprobe::register(Target::Address(at), fixer) {
        Ok(p) => p,
        Err(e) => {
            kp_expect!(t, false, "register: {:?}", e);
            return;
        }
    };
    let ok = kp_kunit_load(black_box(&word as *const u64 as usize)).0;
    kp_expect_eq!(t, ok, word);
    let h = p.handler();
    kp_expect_eq!(t, h.faults.load(Ordering::SeqCst), 0);
    // NULL + 0x10: unmapped, a translation fault at EL1.
    let fixed = kp_kunit_load(black_box(0x10)).0;
    kp_expect_eq!(t, fixed, 0xfeed);
    kp_expect_eq!(t, h.faults.load(Ordering::SeqCst), 1);
    kp_expect_eq!(t, h.trapnr.load(Ordering::SeqCst), ESR_EC_DABT_CUR);
    kp_expect_eq!(t, h.pre.load(Ordering::SeqCst), 2);
    let again = kp_kunit_load(black_box(&word as *const u64 as usize)).0;
    kp_expect_eq!(t, again, word);
    kp_expect_eq!(t, h.pre.load(Ordering::SeqCst), 3);
    kp_expect_eq!(t, p.nmissed(), 0);
}

extern "C" {
    fn kp_test_foreign_callback(ip: usize, f: extern "C" fn(), on: bool) -> core::ffi::c_int;
    fn kp_test_foreign_callback_via_list() -> bool;
    fn kp_test_c_target(value: core::ffi::c_int) -> core::ffi::c_int;
}

/// Counts its hits and calls `inner` (when set) from its pre handler; a
/// post handler keeps the probe on its BRK (no boost, no jump).
struct Nesting {
    pre: AtomicUsize,
    inner: bool,
}

impl kp::KprobeHandler for Nesting {
    const POST_HANDLER: bool = true;

    fn pre(&self, _p: &kp::Probe, _regs: &mut kp::Regs) -> kp::Next {
        self.pre.fetch_add(1, Ordering::SeqCst);
        if self.inner {
            black_box(crate::targets::kp_kunit_target2(black_box(10)));
        }
        kp::Next::Continue
    }

    fn post(&self, _p: &kp::Probe, _regs: &mut kp::Regs) {}
}

/// What someone else's ftrace callback calls: the outer probed function.
extern "C" fn foreign_callback_calls() {
    black_box(crate::targets::kp_kunit_target(black_box(10)));
}

/// A probe hit inside someone else's ftrace callback, whose handler calls a
/// second probed function. Where that callback runs through ftrace's list
/// function (arm64-hardened: no CALL_OPS), the first BRK reaches the
/// engine's hook one recursion level deep and a second BRK would be dropped
/// by ftrace's guard and reach `die()` (the machine died here before): the
/// engine counts the first as missed and runs no handler. Where it is
/// called directly, the first probe's handler runs and the second, inside
/// it, is missed, as any hit inside a handler. Either way the functions
/// return their values.
fn arm64_hit_inside_foreign_ftrace_callback(t: &mut Test) {
    let f = kp_test_c_target as *const () as usize;
    let outer = match kp::Kprobe::register(
        Target::Symbol(c"kp_kunit_target"),
        Nesting {
            pre: AtomicUsize::new(0),
            inner: true,
        },
    ) {
        Ok(p) => p,
        Err(e) => {
            kp_expect!(t, false, "register outer: {:?}", e);
            return;
        }
    };
    let inner = match kp::Kprobe::register(
        Target::Symbol(c"kp_kunit_target2"),
        Nesting {
            pre: AtomicUsize::new(0),
            inner: false,
        },
    ) {
        Ok(p) => p,
        Err(e) => {
            kp_expect!(t, false, "register inner: {:?}", e);
            return;
        }
    };
    // Outside any callback: both handlers would run; the outer's calls
    // the inner's function inside it (missed there).
    foreign_callback_calls();
    kp_expect_eq!(t, outer.handler().pre.load(Ordering::SeqCst), 1);
    kp_expect_eq!(t, inner.nmissed(), 1);
    // SAFETY: `f` is a C function of this module with an ftrace site; the
    // callback is a plain function.
    let r = unsafe { kp_test_foreign_callback(f, foreign_callback_calls, true) };
    kp_expect_eq!(t, r, 0);
    if r != 0 {
        return;
    }
    // SAFETY: a C function of this module.
    let v = unsafe { kp_test_c_target(black_box(7)) };
    // SAFETY: registered above.
    let r = unsafe { kp_test_foreign_callback(f, foreign_callback_calls, false) };
    kp_expect_eq!(t, r, 0);
    // SAFETY: reads a flag.
    let via_list = unsafe { kp_test_foreign_callback_via_list() };
    kp_expect_eq!(t, v, 7 / 3 + 1);
    t.info(format_args!(
        "the callback ran {}",
        if via_list {
            "through ftrace's list function"
        } else {
            "directly"
        }
    ));
    if via_list {
        kp_expect_eq!(t, outer.handler().pre.load(Ordering::SeqCst), 1);
        kp_expect_eq!(t, outer.nmissed(), 1);
        kp_expect_eq!(t, inner.nmissed(), 1);
    } else {
        kp_expect_eq!(t, outer.handler().pre.load(Ordering::SeqCst), 2);
        kp_expect_eq!(t, outer.nmissed(), 0);
        kp_expect_eq!(t, inner.nmissed(), 2);
    }
    kp_expect_eq!(t, inner.handler().pre.load(Ordering::SeqCst), 0);
}

kunit_suite!(
    kp_arm64_sim,
    "kp_arm64_sim",
    [
        arm64_simulated_classes,
        arm64_boosted_and_stepped,
        arm64_fault_handler,
        arm64_hit_inside_foreign_ftrace_callback
    ]
);
