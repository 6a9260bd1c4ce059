// SPDX-License-Identifier: GPL-2.0

//! `kp_arm64_sim`: a probe on each instruction class the arm64 backend
//! simulates (and one it steps out of line), inside purpose-built assembly
//! functions. Each function's results with the probe must equal its results
//! without it, and the probe must fire on every call.

use crate::kp::KpKprobe;
use crate::kunit::Test;
use crate::util::{register, text_word, unregister};
use core::sync::atomic::{AtomicUsize, Ordering};
use kernel::bindings;
use kernel::ffi::c_int;

core::arch::global_asm!(
    ".pushsection .text.kp_sim, \"ax\", %progbits",
    ".macro KP_FN name",
    ".globl \\name",
    ".type \\name, %function",
    ".balign 8",
    "\\name:",
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
    "1: mov x0, #4",
    "ret",
    "KP_FN kp_sim_blr",
    "mov x9, x30",
    "adr x1, 1f",
    "blr x1",
    "mov x30, x9",
    "ret",
    "1: mov x0, #5",
    "ret",
    "KP_FN kp_sim_ret",
    "mov x0, #7",
    "ret",
    // Stepped out of line: an ordinary data-processing instruction.
    "KP_FN kp_sim_step_add",
    "add x0, x0, x1, lsl #1",
    "ret",
    ".popsection",
);

type Func = unsafe extern "C" fn(u64, u64) -> u64;

macro_rules! funcs {
    ($($name:ident @ $off:literal),+ $(,)?) => {
        extern "C" {
            $(fn $name(a: u64, b: u64) -> u64;)+
        }
        /// (name, function, offset of the probed instruction).
        const FUNCS: &[(&core::ffi::CStr, Func, u32)] = &[
            $((
                // SAFETY: a literal without interior NUL.
                unsafe { core::ffi::CStr::from_bytes_with_nul_unchecked(concat!(stringify!($name), "\0").as_bytes()) },
                $name,
                $off,
            ),)+
        ];
    };
}

funcs!(
    kp_sim_adr @ 0, kp_sim_adrp @ 0, kp_sim_b @ 0, kp_sim_bl @ 4,
    kp_sim_b_eq @ 4, kp_sim_b_ne @ 4, kp_sim_b_hs @ 4, kp_sim_b_lo @ 4,
    kp_sim_b_mi @ 4, kp_sim_b_pl @ 4, kp_sim_b_vs @ 4, kp_sim_b_vc @ 4,
    kp_sim_b_hi @ 4, kp_sim_b_ls @ 4, kp_sim_b_ge @ 4, kp_sim_b_lt @ 4,
    kp_sim_b_gt @ 4, kp_sim_b_le @ 4,
    kp_sim_cbz_x @ 0, kp_sim_cbnz_x @ 0, kp_sim_cbz_w @ 0, kp_sim_tbz_3 @ 0, kp_sim_tbnz_63 @ 0,
    kp_sim_ldr_x @ 0, kp_sim_ldr_w @ 0, kp_sim_ldrsw @ 0,
    kp_sim_br @ 4, kp_sim_blr @ 8, kp_sim_ret @ 4,
    kp_sim_step_add @ 0,
);

/// Argument pairs: equal, less, greater (signed and unsigned), overflow,
/// zero, high bits, bit 3, bit 63, a 32-bit zero with high bits set.
const ARGS: &[(u64, u64)] = &[
    (0, 0),
    (5, 5),
    (3, 9),
    (9, 3),
    (u64::MAX, 1),
    (1, u64::MAX),
    (i64::MAX as u64, u64::MAX),
    (i64::MIN as u64, 1),
    (8, 0),
    (1 << 63, 0),
    (1 << 32, 0),
    (0x7, 0),
];

static HITS: AtomicUsize = AtomicUsize::new(0);

/// Counts hits.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn count(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    HITS.fetch_add(1, Ordering::SeqCst);
    0
}

fn arm64_simulated_classes(t: &mut Test) {
    for &(name, f, off) in FUNCS {
        let mut expected = [0u64; ARGS.len()];
        for (e, &(a, b)) in expected.iter_mut().zip(ARGS) {
            // SAFETY: the assembly functions take two integers, return one.
            *e = unsafe { f(a, b) };
        }
        let mut p = KpKprobe::new();
        p.symbol_name = name.as_ptr().cast();
        p.offset = off;
        p.pre_handler = Some(count);
        HITS.store(0, Ordering::SeqCst);
        let r = register(&mut p);
        kp_expect_eq!(t, r, 0, "{:?}+{}", name, off);
        if r != 0 {
            continue;
        }
        let at = p.addr as usize;
        let armed_word = text_word(at);
        for (&e, &(a, b)) in expected.iter().zip(ARGS) {
            // SAFETY: as above.
            let got = unsafe { f(a, b) };
            kp_expect_eq!(
                t,
                got,
                e,
                "{:?}({:#x}, {:#x}) probed at +{}",
                name,
                a,
                b,
                off
            );
        }
        kp_expect_eq!(t, HITS.load(Ordering::SeqCst), ARGS.len(), "{:?}", name);
        unregister(&mut p);
        kp_expect!(
            t,
            text_word(at) != armed_word,
            "{:?}: BRK still there",
            name
        );
    }
}

kunit_suite!(kp_arm64_sim, "kp_arm64_sim", [arm64_simulated_classes]);
