/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The x86_64 backend's register-saving trampolines: the kretprobe return
 * trampoline, the jump-optimization detours' common part, the post tail of
 * boosted steps and the ftrace direct-call entry, plus the stub that returns
 * from a probed function at its entry. What each does, and the Rust
 * functions they call, are described in kretprobe.rs, opt.rs, post.rs and
 * ftrace.rs.
 *
 * Assembly rather than Rust's global_asm!: production kernels need the
 * kernel's own macros here, which Rust cannot reach: RET returns through
 * the return thunk under MITIGATION_RETHUNK (a bare ret is refused by
 * objtool), ANNOTATE_NOENDBR tells IBT's objtool pass that these are only
 * reached by direct jumps and calls (from the engine's stubs, slots and
 * ftrace sites, which the engine writes at run time) although Rust takes
 * their addresses, and the objtool annotations come from the kernel's
 * headers instead of copies of their section tricks.
 *
 * Each is entered by a call (or, for the kretprobe trampoline, a stub's
 * jump after a push that took the place of the return address): an
 * UNWIND_HINT_FUNC at the entry tells objtool that the word at the stack
 * pointer is a return address, so that it follows the pushes and pops and
 * writes ORC entries for every instruction. An unwinder (ORC on production
 * kernels) then walks through a trampoline to whatever that word holds:
 * the probed function for an ftrace site's call, the real caller for a
 * kretprobe (kp_x86_kret_return() puts it there before any handler runs),
 * and the engine's slot for a detour or post tail (no unwind data there:
 * the walk stops, as it does in the kernel's optprobe detours).
 */
#include <linux/linkage.h>
#include <linux/objtool.h>
#include <asm/asm-offsets.h>
#include <asm/nospec-branch.h>
#include <asm/segment.h>
#include <asm/unwind_hints.h>

/*
 * Builds a struct pt_regs below what the entry pushed (ip and sp for the
 * callee to fill in), masks interrupts, and points %rdi at it.
 */
.macro KP_SAVE_REGS
	pushq	$__KERNEL_DS		/* ss */
	pushq	%rsp			/* sp */
	pushfq
	cli
	pushq	$__KERNEL_CS		/* cs */
	pushq	$0			/* ip */
	pushq	$-1			/* orig_ax */
	pushq	%rdi
	pushq	%rsi
	pushq	%rdx
	pushq	%rcx
	pushq	%rax
	pushq	%r8
	pushq	%r9
	pushq	%r10
	pushq	%r11
	pushq	%rbx
	pushq	%rbp
	pushq	%r12
	pushq	%r13
	pushq	%r14
	pushq	%r15
	movq	%rsp, %rdi
.endm

/*
 * Restores every register and the flags from the pt_regs and drops it,
 * leaving the stack pointer at the words the entry pushed (lea, so that
 * the restored flags stay).
 */
.macro KP_RESTORE_REGS
	popq	%r15
	popq	%r14
	popq	%r13
	popq	%r12
	popq	%rbp
	popq	%rbx
	popq	%r11
	popq	%r10
	popq	%r9
	popq	%r8
	popq	%rax
	popq	%rcx
	popq	%rdx
	popq	%rsi
	popq	%rdi
	addq	$24, %rsp		/* orig_ax, ip, cs */
	popfq
	leaq	16(%rsp), %rsp		/* sp, ss */
.endm

/*
 * The end of a trampoline entered by "push $addr; call": [rsp] is where the
 * handler said to go, [rsp + 8] the pushed address. Moves the first over
 * the second (pop to memory addresses the stack after the pop) and returns
 * there, flags untouched: "ret $8" through the return thunk.
 */
.macro KP_RET_DROP_WORD
	popq	(%rsp)
	UNWIND_HINT_FUNC
	RET
.endm

	.pushsection .text.kp_kret, "ax"

/*
 * Kretprobe return: an instance's stub pushed its slot index and jumped
 * here; kp_x86_kret_return() overwrites the index with the real return
 * address.
 */
SYM_CODE_START(kp_x86_kret_trampoline)
	ANNOTATE_NOENDBR
	UNWIND_HINT_FUNC
	KP_SAVE_REGS
	call	kp_x86_kret_return
	KP_RESTORE_REGS
	RET
SYM_CODE_END(kp_x86_kret_trampoline)

/*
 * After the handler's call in the detour and the post tail, until the
 * return: the state the entry's UNWIND_HINT_FUNC left the pushes at, the
 * pt_regs above the two words (an unwind from here stops at the engine's
 * slot, as it does in the kernel's optprobe detours). A CALL-type hint:
 * objtool gives a FUNC-type one the function-entry state whatever its
 * offset says.
 */
.macro KP_HINT_AFTER_CALL
	UNWIND_HINT type=UNWIND_HINT_TYPE_CALL sp_reg=ORC_REG_SP sp_offset=PTREGS_SIZE+8
.endm

/*
 * Jump-optimization detour: [rsp] = where to resume (the detour's relocated
 * instructions), [rsp + 8] = the probed address.
 *
 * While the handlers run, an unwinder (stack traces in a handler, perf, an
 * NMI) sees the probed code where it stands: an interrupt-style frame below
 * the pt_regs holds the probed address itself (the handlers' pt_regs holds
 * it + 1, as after a breakpoint, which for a one-byte push or pop would
 * give the unwinder the stack layout after it) and the stack pointer before
 * the two words, and an UNWIND_HINT_IRET_REGS at the call points ORC at it.
 * The walk goes on through the probed function to its real caller.
 */
SYM_CODE_START(kp_x86_opt_common)
	ANNOTATE_NOENDBR
	UNWIND_HINT_FUNC
	KP_SAVE_REGS
	leaq	PTREGS_SIZE+16(%rdi), %rax	/* the probed code's sp */
	pushq	$__KERNEL_DS			/* ss */
	pushq	%rax				/* sp */
	pushq	pt_regs_flags(%rdi)		/* flags */
	pushq	$__KERNEL_CS			/* cs */
	pushq	PTREGS_SIZE+8(%rdi)		/* ip: the probed address */
	UNWIND_HINT_IRET_REGS
	call	kp_x86_opt_hit
	leaq	5*8(%rsp), %rsp
	KP_HINT_AFTER_CALL
	KP_RESTORE_REGS
	KP_RET_DROP_WORD
SYM_CODE_END(kp_x86_opt_common)

/*
 * Post tail of a boosted step: [rsp] = the jump back in the slot,
 * [rsp + 8] = the probed address.
 *
 * The handlers' pt_regs is the unwinder's view too (UNWIND_HINT_REGS at
 * the call): the post path sets its ip to the next instruction before any
 * post handler runs (until then it holds the probed address, and sp the
 * stack pointer after the stepped instruction).
 */
SYM_CODE_START(kp_x86_post_common)
	ANNOTATE_NOENDBR
	UNWIND_HINT_FUNC
	KP_SAVE_REGS
	/* Until the post path sets them: the probed code's stack pointer, and
	 * the probed address (the continuation is not known here) */
	leaq	PTREGS_SIZE+16(%rdi), %rax
	movq	%rax, pt_regs_sp(%rdi)
	movq	PTREGS_SIZE+8(%rdi), %rax
	movq	%rax, pt_regs_flags-16(%rdi)	/* ip */
	UNWIND_HINT_REGS
	call	kp_x86_post_hit
	KP_HINT_AFTER_CALL
	KP_RESTORE_REGS
	KP_RET_DROP_WORD
SYM_CODE_END(kp_x86_post_common)

/*
 * An ftrace site's direct call: [rsp] = site + 5, [rsp + 8] = the caller's
 * return address. Make it [rsp] = site + 5 (where to resume), [rsp + 8] =
 * site (the probed address) above the caller's return address; the subq
 * changes the flags at a function entry, where nothing relies on them.
 *
 * For unwinders: the word the call pushed holds the site from the subq on,
 * not a return address (ORC would look up site - 1, outside the function
 * on a kernel without ENDBR), so from there the hints point past it at the
 * caller's return address, the state of a function entry; while the
 * handlers run, an interrupt-style frame holds the site itself and the
 * probed code's stack pointer (as in kp_x86_opt_common), so that a walk
 * goes through the probed function to its caller.
 */
.macro KP_HINT_PAST_SITE offset:req
	UNWIND_HINT type=UNWIND_HINT_TYPE_CALL sp_reg=ORC_REG_SP sp_offset=\offset
.endm

SYM_CODE_START(kp_x86_ftrace_direct)
	ANNOTATE_NOENDBR
	UNWIND_HINT_FUNC
	pushq	(%rsp)
	subq	$5, 8(%rsp)
	KP_HINT_PAST_SITE 24
	KP_SAVE_REGS
	leaq	PTREGS_SIZE+16(%rdi), %rax	/* the probed code's sp */
	pushq	$__KERNEL_DS			/* ss */
	pushq	%rax				/* sp */
	pushq	pt_regs_flags(%rdi)		/* flags */
	pushq	$__KERNEL_CS			/* cs */
	pushq	PTREGS_SIZE+8(%rdi)		/* ip: the site */
	UNWIND_HINT_IRET_REGS
	call	kp_x86_ftrace_hit
	leaq	5*8(%rsp), %rsp
	KP_HINT_PAST_SITE PTREGS_SIZE+24
	KP_RESTORE_REGS
	KP_RET_DROP_WORD
SYM_CODE_END(kp_x86_ftrace_direct)

/*
 * Returns from a probed function at its entry (a pre handler's
 * return_now()): the caller's return address is still on the stack.
 */
SYM_CODE_START(kp_x86_return_stub)
	ANNOTATE_NOENDBR
	UNWIND_HINT_FUNC
	RET
SYM_CODE_END(kp_x86_return_stub)

	.popsection
