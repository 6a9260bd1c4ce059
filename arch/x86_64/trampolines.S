/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The x86_64 backend's register-saving trampolines: the kretprobe return
 * trampoline, the jump-optimization detours (one per optimized probe,
 * assembled here with their unwind data) and their redirect exit, the post
 * tail of boosted steps and the ftrace direct-call entry, plus the stub that
 * returns from a probed function at its entry. What each does, and the Rust
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
 * Each but the detours (below) is entered by a call (or, for the kretprobe
 * trampoline, a stub's jump after a push that took the place of the
 * return address; for the detours' redirect exit, a jump from one): an
 * UNWIND_HINT_FUNC at the entry tells objtool that the word at the stack
 * pointer is a return address, so that it follows the pushes and pops and
 * writes ORC entries for every instruction. An unwinder (ORC on production
 * kernels) then walks through a trampoline to whatever that word holds:
 * the probed function for an ftrace site's call, the real caller for a
 * kretprobe (kp_x86_kret_return() puts it there before any handler runs).
 * A detour's handlers are walked to the probed function (a hint at the
 * detour's call takes the word it pushed first as the return address); a
 * post tail's through its pt_regs. Otherwise the engine's slot or detour
 * ends the walk (no unwind data there, as in the kernel's optprobe
 * detours).
 *
 * Each call from a trampoline, and each return, is an indirect branch for
 * an emulator: QEMU's TCG looks the target up (helper_lookup_tb_ptr, the
 * largest single cost of a hit there; scripts/bench-profile.sh), as it does
 * for a direct branch to another page. The trampolines make as few as the
 * handlers' contract allows.
 */
#include <linux/linkage.h>
#include <linux/objtool.h>
#include <asm/alternative.h>
#include <asm/asm-offsets.h>
#include <asm/cpufeatures.h>
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
 * leaving the stack pointer at the words the entry pushed, or past `drop`
 * - 16 bytes of them (lea, so that the restored flags stay).
 */
.macro KP_RESTORE_REGS drop=16
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
	leaq	\drop(%rsp), %rsp	/* sp, ss (and what the entry pushed) */
.endm

/*
 * A return that leaves the arithmetic flags as the popfq before it restored
 * them, for a return into the middle of probed code, where they may be
 * live: through the return thunk (RET), except under call-depth tracking
 * (X86_FEATURE_CALL_DEPTH: retbleed=stuff, its=stuff), whose thunk,
 * call_depth_return_thunk, shifts the per-CPU depth with a sarq that
 * changes them; there a bare ret, as the kernel's ftrace_regs_caller and
 * return_to_handler return after a call that was not accounted (neither
 * was the call from the engine's slot, detour or ftrace site that entered
 * here, nor the kretprobe stub's jump). Every trampoline but the return
 * stub (a probed function's own return) leaves this way.
 */
.macro KP_RET_KEEP_FLAGS
	ALTERNATIVE __stringify(RET), \
		    __stringify(ANNOTATE_UNRET_SAFE; ret; int3), \
		    X86_FEATURE_CALL_DEPTH
.endm

/*
 * The end of a trampoline entered by "push $addr; call": [rsp] is where the
 * handler said to go, [rsp + 8] the pushed address. Moves the first over
 * the second (pop to memory addresses the stack after the pop) and returns
 * there, flags untouched: "ret $8".
 */
.macro KP_RET_DROP_WORD
	popq	(%rsp)
	UNWIND_HINT_FUNC
	KP_RET_KEEP_FLAGS
.endm

/*
 * One page for the trampolines and the Rust functions they call (their
 * #[link_section]; this object is linked first, Kbuild): the calls between
 * them stay in the page, where an emulator chains them.
 * scripts/build-modules.sh checks that the section fits.
 */
	.pushsection .text.kp_tramp, "ax"
	.balign 4096

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
	/* (The function's own return, through the thunk, already paid for
	 * its call.) */
	KP_RET_KEEP_FLAGS
SYM_CODE_END(kp_x86_kret_trampoline)

/*
 * After the handler's call in the post tail, until the return: the state
 * the entry's UNWIND_HINT_FUNC left the pushes at, the pt_regs above the
 * two words (an unwind from here stops at the engine's slot, as it does in
 * the kernel's optprobe detours). A CALL-type hint:
 * objtool gives a FUNC-type one the function-entry state whatever its
 * offset says.
 */
.macro KP_HINT_AFTER_CALL
	UNWIND_HINT type=UNWIND_HINT_TYPE_CALL sp_reg=ORC_REG_SP sp_offset=PTREGS_SIZE+8
.endm

/*
 * A jump-optimization detour that a handler redirected (kp_x86_opt_hit()
 * returned non-zero): the word above the pt_regs, the return address into
 * the probed instruction until then, now holds where to go. Restores every
 * register and the flags and returns there, dropping the word.
 */
SYM_CODE_START(kp_x86_opt_redirect)
	ANNOTATE_NOENDBR
	UNWIND_HINT type=UNWIND_HINT_TYPE_CALL sp_reg=ORC_REG_SP sp_offset=PTREGS_SIZE+8
	KP_RESTORE_REGS
	UNWIND_HINT_FUNC
	KP_RET_KEEP_FLAGS
SYM_CODE_END(kp_x86_opt_redirect)

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
 * An ftrace site's direct call: [rsp] = site + 5, the call's return address,
 * which is also where to resume unless a pre handler redirects (it is then
 * rewritten). The word stays a return address into the probed function, so
 * an unwinder walks from the handlers through here to the probed function
 * and its caller (a function's entry state at the site, as in the kernel's
 * ftrace_regs_caller).
 */
SYM_CODE_START(kp_x86_ftrace_direct)
	ANNOTATE_NOENDBR
	UNWIND_HINT_FUNC
	KP_SAVE_REGS
	call	kp_x86_ftrace_hit
	KP_RESTORE_REGS
	/* (A pre handler may redirect into the function.) */
	KP_RET_KEEP_FLAGS
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

/*
 * Jump-optimization detours (opt.rs): KP_OPT_NDETOURS copies of one
 * template, KP_OPT_DETOUR_SIZE bytes apart, each the whole detour of one
 * optimized probe, as the kernel copies its optprobe template into a slot.
 * Per probe the engine writes only the pushed word and, past the template,
 * the relocated instructions and the jump back (int3 until then). A hit
 * thus makes one call (to kp_x86_opt_hit) and no return from a common part.
 *
 * Assembled rather than copied at run time so that objtool writes each
 * copy's unwind data: at the call the pushed word, addr + 1, is the return
 * address of a call made from the probed instruction (an unwinder looks up
 * the instruction before a return address: the probed one, whatever its
 * length), and the stack pointer past it the probed code's, so a stack
 * trace in a handler walks through the probed function to its caller.
 * Before and after the call the state is undefined for an unwinder (the
 * probed code's frame, which the template cannot know), as in the kernel's
 * optprobe detours.
 *
 * kp_x86_opt_hit() returns zero to go on (registers and flags restored,
 * the word dropped with a lea, which keeps the flags, then the relocated
 * instructions), non-zero after a redirect (kp_x86_opt_redirect).
 */
#define KP_OPT_DETOUR_SIZE	128
#define KP_OPT_NDETOURS		1024

.macro KP_OPT_DETOUR head=
.Lkp_opt_start\@:
	UNWIND_HINT_UNDEFINED
	.byte	0x68			/* push $imm32: addr + 1, per probe */
	.long	0
	KP_SAVE_REGS
	UNWIND_HINT type=UNWIND_HINT_TYPE_CALL sp_reg=ORC_REG_SP sp_offset=PTREGS_SIZE+8
	call	kp_x86_opt_hit
	UNWIND_HINT_UNDEFINED
	testl	%eax, %eax
	jnz	kp_x86_opt_redirect
	KP_RESTORE_REGS drop=24		/* and the pushed word */
.ifnb \head
\head:
.endif
	.org	.Lkp_opt_start\@ + KP_OPT_DETOUR_SIZE, 0xcc
.endm

	.pushsection .text.kp_detours, "ax"
	.balign 4096
SYM_CODE_START(kp_x86_opt_detours)
	ANNOTATE_NOENDBR
	KP_OPT_DETOUR .Lkp_opt_head
	.rept	KP_OPT_NDETOURS - 1
	KP_OPT_DETOUR
	.endr
SYM_CODE_END(kp_x86_opt_detours)
	.popsection

/*
 * The detours' layout, checked against opt.rs's at load: bytes per detour,
 * detours, where the relocated instructions start in one.
 */
	.pushsection .rodata, "a"
	.balign 8
SYM_DATA_START(kp_x86_opt_layout)
	.quad	KP_OPT_DETOUR_SIZE
	.quad	KP_OPT_NDETOURS
	.quad	.Lkp_opt_head - kp_x86_opt_detours
SYM_DATA_END(kp_x86_opt_layout)
	.popsection
