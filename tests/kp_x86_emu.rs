// SPDX-License-Identifier: GPL-2.0

//! `kp_x86_emu`: a probe on each instruction class the x86_64 backend
//! emulates (and a RIP-relative one it steps out of line), inside
//! purpose-built assembly functions. Each function's results with the probe
//! must equal its results without it, and the probe must fire as often as
//! the instruction runs.

use crate::kunit::Test;

core::arch::global_asm!(
    crate::util::x86_safe_macro!(),
    ".pushsection .text.kp_emu, \"ax\", @progbits",
    ".macro KP_FN name",
    ".p2align 4",
    // The suite calls these through pointers (its table): on IBT kernels
    // each starts with ENDBR, and the table's offsets skip it
    // (`insn_table::ENTRY_PAD`). Like the compiler's functions there, each
    // is preceded by 16 bytes of padding: the kernel seals an ENDBR that
    // objtool finds unused (kp_emu_ret_imm_callee, only called directly)
    // and, under kCFI, zeroes the type hash it expects in those 16 bytes.
    ".if {ibt}",
    ".skip 16, 0xcc",
    ".endif",
    ".globl \\name",
    ".type \\name, @function",
    "\\name:",
    ".if {ibt}",
    "endbr64",
    ".endif",
    ".endm",
    ".macro KP_END name",
    ".size \\name, . - \\name",
    ".endm",
    // jmp rel8 / rel32 over code that is reached another way (objtool
    // rejects unreachable code): 1 when rdi is 0, else 2.
    "KP_FN kp_emu_jmp8",
    "jmp 1f",
    "2: mov $1, %eax",
    "KP_SAFE ret",
    "1: test %rdi, %rdi",
    "jz 2b",
    "mov $2, %eax",
    "KP_SAFE ret",
    "KP_END kp_emu_jmp8",
    "KP_FN kp_emu_jmp32",
    ".byte 0xe9",
    ".long 1f - 3f",
    "3:",
    "2: mov $1, %eax",
    "KP_SAFE ret",
    "1: test %rdi, %rdi",
    "jz 2b",
    "mov $2, %eax",
    "KP_SAFE ret",
    "KP_END kp_emu_jmp32",
    // Targets of the indirect jumps and calls below.
    "KP_FN kp_emu_ret4",
    "mov $4, %eax",
    "KP_SAFE ret",
    "KP_END kp_emu_ret4",
    "KP_FN kp_emu_sum",
    "lea (%rdi,%rsi), %rax",
    "KP_SAFE ret",
    "KP_END kp_emu_sum",
    // call rel32: the callee's result + 1
    "KP_FN kp_emu_callee5",
    "mov $5, %eax",
    "KP_SAFE ret",
    "KP_END kp_emu_callee5",
    "KP_FN kp_emu_call",
    "call kp_emu_callee5",
    "add $1, %rax",
    "KP_SAFE ret",
    "KP_END kp_emu_call",
    // jcc rel8: 1 when `cmp %rsi, %rdi` sets the condition (probe at +3)
    ".macro KP_JCC name, cc",
    "KP_FN \\name",
    "cmp %rsi, %rdi",
    "j\\cc 1f",
    "xor %eax, %eax",
    "KP_SAFE ret",
    "1: mov $1, %eax",
    "KP_SAFE ret",
    "KP_END \\name",
    ".endm",
    "KP_JCC kp_emu_jo, o",
    "KP_JCC kp_emu_jno, no",
    "KP_JCC kp_emu_jb, b",
    "KP_JCC kp_emu_jae, ae",
    "KP_JCC kp_emu_je, e",
    "KP_JCC kp_emu_jne, ne",
    "KP_JCC kp_emu_jbe, be",
    "KP_JCC kp_emu_ja, a",
    "KP_JCC kp_emu_js, s",
    "KP_JCC kp_emu_jns, ns",
    "KP_JCC kp_emu_jp, p",
    "KP_JCC kp_emu_jnp, np",
    "KP_JCC kp_emu_jl, l",
    "KP_JCC kp_emu_jge, ge",
    "KP_JCC kp_emu_jle, le",
    "KP_JCC kp_emu_jg, g",
    // jcc rel32 (0f 8c: jl)
    "KP_FN kp_emu_jl32",
    "cmp %rsi, %rdi",
    ".byte 0x0f, 0x8c",
    ".long 1f - 2f",
    "2: xor %eax, %eax",
    "KP_SAFE ret",
    "1: mov $1, %eax",
    "KP_SAFE ret",
    "KP_END kp_emu_jl32",
    // loop: counts down from (rdi & 7) + 1 (probe on `loop`, at +16)
    "KP_FN kp_emu_loop",
    "mov %rdi, %rcx",
    "and $7, %rcx",
    "add $1, %rcx",
    "xor %eax, %eax",
    "2: inc %rax",
    "loop 2b",
    "KP_SAFE ret",
    "KP_END kp_emu_loop",
    // jrcxz (probe at +3)
    "KP_FN kp_emu_jrcxz",
    "mov %rdi, %rcx",
    "jrcxz 1f",
    "xor %eax, %eax",
    "KP_SAFE ret",
    "1: mov $1, %eax",
    "KP_SAFE ret",
    "KP_END kp_emu_jrcxz",
    // loopne: rcx = rdi | 2, then taken while rcx - 1 != 0 and rdi != rsi (probe at +10)
    "KP_FN kp_emu_loopne",
    "mov %rdi, %rcx",
    "or $2, %rcx",
    "cmp %rsi, %rdi",
    "loopne 1f",
    "xor %eax, %eax",
    "KP_SAFE ret",
    "1: mov %rcx, %rax",
    "KP_SAFE ret",
    "KP_END kp_emu_loopne",
    // ret (probe at +3)
    "KP_FN kp_emu_ret",
    "mov %rdi, %rax",
    "KP_SAFE ret",
    "KP_END kp_emu_ret",
    // ret $8 (probe on kp_emu_ret_imm_callee+5): pops the pushed rdi
    "KP_FN kp_emu_ret_imm_callee",
    "mov 8(%rsp), %rax",
    "KP_SAFE ret $8",
    "KP_END kp_emu_ret_imm_callee",
    "KP_FN kp_emu_ret_imm",
    "push %rdi",
    "call kp_emu_ret_imm_callee",
    "KP_SAFE ret",
    "KP_END kp_emu_ret_imm",
    // The callee pops the push: tell objtool (STACK_FRAME_NON_STANDARD).
    ".pushsection .discard.func_stack_frame_non_standard, \"aw\"",
    ".long kp_emu_ret_imm - .",
    ".popsection",
    // jmp *%reg (probe at +12, run only when rdi != 0): 4, or 0 for rdi 0.
    "KP_FN kp_emu_jmp_rdx",
    "test %rdi, %rdi",
    "jz 2f",
    "lea kp_emu_ret4(%rip), %rdx",
    "KP_SAFE jmp *%rdx",
    "2: xor %eax, %eax",
    "KP_SAFE ret",
    "KP_END kp_emu_jmp_rdx",
    "KP_FN kp_emu_jmp_r11",
    "test %rdi, %rdi",
    "jz 2f",
    "lea kp_emu_ret4(%rip), %r11",
    "KP_SAFE jmp *%r11",
    "2: xor %eax, %eax",
    "KP_SAFE ret",
    "KP_END kp_emu_jmp_r11",
    // call *%reg (probe at +7): rdi + rsi + 1
    "KP_FN kp_emu_call_rdx",
    "lea kp_emu_sum(%rip), %rdx",
    "KP_SAFE call *%rdx",
    "add $1, %rax",
    "KP_SAFE ret",
    "KP_END kp_emu_call_rdx",
    "KP_FN kp_emu_call_r10",
    "lea kp_emu_sum(%rip), %r10",
    "KP_SAFE call *%r10",
    "add $1, %rax",
    "KP_SAFE ret",
    "KP_END kp_emu_call_r10",
    // Plain instructions, boosted or stepped depending on the post handler:
    // push (+0, boostable) and pop (+1).
    "KP_FN kp_plain_push",
    "push %rdi",
    "pop %rax",
    "add %rsi, %rax",
    "KP_SAFE ret",
    "KP_END kp_plain_push",
    "KP_FN kp_plain_pop",
    "push %rdi",
    "pop %rax",
    "add %rsi, %rax",
    "KP_SAFE ret",
    "KP_END kp_plain_pop",
    // A lock RMW on the stack (+1, never boosted): a + b.
    "KP_FN kp_plain_lock",
    "push %rdi",
    "lock addq %rsi, (%rsp)",
    "pop %rax",
    "KP_SAFE ret",
    "KP_END kp_plain_lock",
    // A string op (+4, never boosted): returns a.
    "KP_FN kp_plain_lods",
    "push %rdi",
    "mov %rsp, %rsi",
    "lodsq",
    "pop %rcx",
    "KP_SAFE ret",
    "KP_END kp_plain_lods",
    // A RIP-relative store (+0, boosted with its displacement re-aimed).
    "KP_FN kp_plain_ripstore",
    "mov %rdi, kp_plain_cell(%rip)",
    "mov kp_plain_cell(%rip), %rax",
    "add %rsi, %rax",
    "KP_SAFE ret",
    "KP_END kp_plain_ripstore",
    // The arithmetic flags a boosted instruction (+0) leaves, read right
    // after it: with a post handler the copy returns through the post
    // trampoline, whose return must not change them (a return thunk may:
    // call_depth_return_thunk's `sarq` under retbleed=stuff).
    "KP_FN kp_plain_cmpflags",
    "cmp %rsi, %rdi",
    "pushfq",
    "pop %rax",
    "and $0x8d5, %eax",
    "KP_SAFE ret",
    "KP_END kp_plain_cmpflags",
    // Stepped out of line with a re-aimed RIP-relative operand (probe at 0).
    "KP_FN kp_emu_riprel",
    "mov kp_emu_literal(%rip), %rax",
    "add %rdi, %rax",
    "KP_SAFE ret",
    "KP_END kp_emu_riprel",
    ".popsection",
    ".pushsection .rodata",
    ".p2align 3",
    "kp_emu_literal: .quad 0x1122334455667788",
    ".popsection",
    ".pushsection .data",
    ".p2align 3",
    "kp_plain_cell: .quad 0",
    ".popsection",
    ".purgem KP_SAFE",
    ibt = const crate::insn_table::ENTRY_PAD / 4,
    options(att_syntax),
);

insn_table!(
    FUNCS:
    kp_emu_jmp8 @ 0, kp_emu_jmp32 @ 0, kp_emu_call @ 0,
    kp_emu_jo @ 3, kp_emu_jno @ 3, kp_emu_jb @ 3, kp_emu_jae @ 3,
    kp_emu_je @ 3, kp_emu_jne @ 3, kp_emu_jbe @ 3, kp_emu_ja @ 3,
    kp_emu_js @ 3, kp_emu_jns @ 3, kp_emu_jp @ 3, kp_emu_jnp @ 3,
    kp_emu_jl @ 3, kp_emu_jge @ 3, kp_emu_jle @ 3, kp_emu_jg @ 3,
    kp_emu_jl32 @ 3,
    kp_emu_loop @ 16, kp_emu_jrcxz @ 3, kp_emu_loopne @ 10,
    kp_emu_ret @ 3, kp_emu_ret_imm => kp_emu_ret_imm_callee @ 5,
    kp_emu_jmp_rdx @ 12, kp_emu_jmp_r11 @ 12, kp_emu_call_rdx @ 7, kp_emu_call_r10 @ 7,
    kp_emu_riprel @ 0,
    kp_plain_push @ 0, kp_plain_pop @ 1, kp_plain_lock @ 1, kp_plain_lods @ 4, kp_plain_ripstore @ 0,
    kp_plain_cmpflags @ 0,
);

/// How often the probed instruction runs for one call: once, except in the
/// loop, which runs `loop` (a & 7) + 1 times, and in the indirect jumps,
/// which are skipped when a is 0.
fn runs(name: &core::ffi::CStr, a: u64) -> usize {
    if name == c"kp_emu_loop" {
        (a & 7) as usize + 1
    } else if name == c"kp_emu_jmp_rdx" || name == c"kp_emu_jmp_r11" {
        usize::from(a != 0)
    } else {
        1
    }
}

/// Second traps per run: emulated instructions take none; boostable ones
/// none either (without a post handler the copy jumps back, with one it
/// ends in a call to the post trampoline); the lock RMW and the string op
/// are never boosted and always end in a second int3.
fn traps(name: &core::ffi::CStr, _post: bool) -> usize {
    usize::from(name == c"kp_plain_lock" || name == c"kp_plain_lods")
}

/// Every function of the table, probed without a post handler (plain
/// instructions are then boosted where possible) and with one.
fn x86_emulated_and_stepped_classes(t: &mut Test) {
    crate::insn_table::check(t, FUNCS, true, runs, Some(traps));
}

use crate::kp_api::{api_fault_handler, api_fault_handler_fixes_memory, api_fault_in_handler};

kunit_suite!(
    kp_x86_emu,
    "kp_x86_emu",
    [
        x86_emulated_and_stepped_classes,
        api_fault_handler,
        api_fault_handler_fixes_memory,
        api_fault_in_handler
    ]
);
