/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kp_kprobes.h - C interface of the Rust kprobes engine (kprobes.ko).
 *
 * The shapes follow <linux/kprobes.h>, with every name prefixed `kp_` so that
 * both can be included in one translation unit and neither engine's symbols
 * clash with the other's. The Rust definition of the same ABI is src/abi.rs;
 * keep the two identical (the engine exports kp_kprobe_abi_size, its
 * sizeof(struct kp_kprobe), for clients and tests to compare).
 */
#ifndef _KP_KPROBES_H
#define _KP_KPROBES_H

#include <linux/types.h>

struct pt_regs;
struct kp_kprobe;

/* Return non-zero when the handler changed regs->ip/pc itself: the probed
 * instruction is then skipped and execution resumes at the new address.
 * Non-zero with regs->ip/pc unchanged is taken as zero (resuming there
 * would land inside the instruction, or hit the probe for ever). */
typedef int (*kp_pre_handler_t)(struct kp_kprobe *, struct pt_regs *);
typedef void (*kp_post_handler_t)(struct kp_kprobe *, struct pt_regs *,
				  unsigned long flags);
/* Trap `trapnr` (X86_TRAP_*) in the probed instruction while it runs out of
 * line (regs: ip at the probed instruction), or in this probe's pre or post
 * handler (regs: the handler's context), as the kernel's kprobes had it.
 * Return non-zero when the handler fixed regs (ip included) and execution
 * resumes there; zero lets the kernel handle the trap (for the instruction:
 * as if it had happened at the original address). Non-zero with no register
 * changed (a fix of memory) is a retry; after 8 such in a row on a CPU the
 * trap goes to the kernel instead of faulting for ever. x86_64: #GP and the traps
 * that reach notify_die(DIE_TRAP) (#DE, #BR, #SS, #NP, ...); page faults
 * reach no notifier. arm64: data and instruction aborts (trapnr: the exception
 * class, 0x25 for a data abort at EL1), through a hook on do_mem_abort(). */
typedef int (*kp_fault_handler_t)(struct kp_kprobe *, struct pt_regs *,
				  int trapnr);

/* kp_kprobe.flags */
#define KP_FLAG_GONE		1 /* the probed text went away */
#define KP_FLAG_DISABLED	2 /* registered but not armed */
#define KP_FLAG_FTRACE		4 /* out: served by ftrace at a call site */
#define KP_FLAG_OPTIMIZED	8 /* out: jump-optimized (x86_64), no trap */
#define KP_FLAG_REGISTERED	16 /* out: the engine holds this probe */
/* In: the handlers need every register. arm64 serves a function entry
 * through ftrace with x0-x8, fp, lr, sp and pc valid (the rest read 0);
 * with this flag it takes a breakpoint past the patchable entry instead,
 * with all registers. x86_64 has them all on both paths. */
#define KP_FLAG_FULL_REGS	32

/* Words of engine-private state in struct kp_kprobe. */
#define KP_PRIVATE_WORDS	3

struct kp_kprobe {
	/* In: the address to probe, or NULL to use symbol_name + offset.
	 * Out: the address actually probed. */
	void *addr;
	/* "symbol" or "module:symbol"; NULL when addr is given. */
	const char *symbol_name;
	kp_pre_handler_t pre_handler;
	kp_post_handler_t post_handler;
	kp_fault_handler_t fault_handler;
	/* Hits whose handlers were not run (re-entry on the same CPU). */
	unsigned long nmissed;
	unsigned int offset;
	unsigned int flags;
	/* Engine-private: zero before registration, zeroed again by
	 * unregistration; do not touch in between. The engine keeps its
	 * record of the probe here (as the kernel keeps its own in struct
	 * kprobe): a probe alone at its address costs the engine one small
	 * record for the address and nothing else. */
	unsigned long kp_private[KP_PRIVATE_WORDS];
};

/* Returns 0 or -errno: -ENOENT unknown symbol or module, -EINVAL bad request
 * (not text, past the function's end, blacklisted, already registered),
 * -EILSEQ not on an instruction boundary, -EOPNOTSUPP an instruction the
 * backend cannot probe, -EBUSY someone else's breakpoint, -ENOMEM, -ENOSPC. */
int kp_register_kprobe(struct kp_kprobe *p);
/* On return no CPU runs p's handlers any more. */
void kp_unregister_kprobe(struct kp_kprobe *p);
/* All or nothing: on failure the ones already registered are unregistered. */
int kp_register_kprobes(struct kp_kprobe **kps, int num);
void kp_unregister_kprobes(struct kp_kprobe **kps, int num);
/* A disabled probe stays registered but its handlers never run; the
 * original instruction is back when no enabled probe is left there. */
int kp_disable_kprobe(struct kp_kprobe *p);
int kp_enable_kprobe(struct kp_kprobe *p);
/* Why addr cannot be probed, or NULL if the blacklist allows it. */
const char *kp_blacklisted(unsigned long addr);
/* The idx-th refused range [*start, *end) and its reason; NULL past the
 * last (the list of /sys/kernel/debug/kp/blacklist). */
const char *kp_blacklist_range(unsigned long idx, unsigned long *start,
			       unsigned long *end);
/* The idx-th kernel function the engine resolved by name and calls through
 * a pointer (NULL past the last), and in *call the address it calls: the
 * function, or on IBT kernels a gate "endbr64; jmp <function>" (the kernel
 * seals functions vmlinux never calls through a pointer). For tests. */
const char *kp_resolved_call(unsigned long idx, unsigned long *call);

/* ---- return probes ---- */

struct kp_kretprobe;

/* One tracked call of a kretprobe'd function. */
struct kp_kretprobe_instance {
	/* The kretprobe (valid in handlers). */
	struct kp_kretprobe *rp;
	/* The real return address of this call. */
	unsigned long ret_addr;
	/* The stack pointer at the function's entry (identifies the frame). */
	unsigned long fp;
	/* data_size bytes for the client, 8-byte aligned. */
	char data[];
};

/* entry_handler: non-zero means "do not track this call". */
typedef int (*kp_kretprobe_handler_t)(struct kp_kretprobe_instance *,
				      struct pt_regs *);

struct kp_kretprobe {
	/* Where to probe: symbol_name / addr of a function entry; pre_handler
	 * and post_handler are the engine's (leave them NULL). */
	struct kp_kprobe kp;
	kp_kretprobe_handler_t handler;
	kp_kretprobe_handler_t entry_handler;
	/* Calls tracked at once; <= 0: max(10, 2 * possible CPUs). */
	int maxactive;
	/* Calls not tracked because every instance was in use. */
	int nmissed;
	size_t data_size;
	/* Engine-private, NULL before registration. */
	void *kp_private;
};

/* Only function entries: -EINVAL otherwise, and for functions that do not
 * return normally or switch stacks (__switch_to, do_exit, ...). */
int kp_register_kretprobe(struct kp_kretprobe *rp);
/* No new calls are tracked after this returns; calls still inside the
 * function return correctly later, without running the handler. */
void kp_unregister_kretprobe(struct kp_kretprobe *rp);
/* All or nothing, as kp_register_kprobes(); the batch unregister waits
 * once for the whole batch. */
int kp_register_kretprobes(struct kp_kretprobe **rps, int num);
void kp_unregister_kretprobes(struct kp_kretprobe **rps, int num);

/* ---- queries for probe writers ---- */

/* The address of name ("sym" or "module:sym"), 0 if unknown; *size (if not
 * NULL) gets the symbol's size. */
unsigned long kp_lookup_symbol(const char *name, unsigned long *size);

#define KP_INSN_CALL	1 /* a call, direct or indirect */
#define KP_INSN_BRANCH	2 /* a direct branch or call: target is valid */

struct kp_insn {
	unsigned long addr;
	unsigned int len;
	unsigned int flags;	/* KP_INSN_* */
	unsigned long target;
};

/* Describes the instruction at addr (as it was before the engine's own
 * breakpoints and jumps): 0, -EFAULT unreadable, -EILSEQ unknown
 * instruction, -EINVAL misaligned (arm64). Process context: takes the
 * engine's registration mutex. */
int kp_decode_insn(unsigned long addr, struct kp_insn *out);

/* ---- probe events (kprobe_events) from code ---- */

/* Runs one kprobe_events line, as `echo LINE >> kprobe_events` would: 0 or
 * -errno (the reason is in /sys/kernel/debug/kp/error_log). */
int kp_event_command(const char *line);
/* The trace event id of GROUP/EVENT (NULL group: "kprobes_rs"), as tracefs
 * `id` shows it and perf's PERF_TYPE_TRACEPOINT takes it; -ENOENT. */
int kp_event_id(const char *group, const char *event);

/* ---- engine state ---- */

struct kp_stats {
	unsigned long probes;	/* registered kprobes (a kretprobe's entry probe too) */
	unsigned long points;	/* probed addresses */
	unsigned long slots;	/* out-of-line slots and detours in use (not
				 * those waiting for every task to leave them) */
	unsigned long kretprobe_instances; /* return instances allocated, those
				 * of unregistered kretprobes with calls in flight too */
	unsigned long events;	/* defined probe events */
	unsigned long long step_traps; /* out-of-line copies ended by a second
				 * trap since the engine loaded */
	unsigned long ftrace_direct; /* function entries whose ftrace site calls
				 * the engine directly (x86_64), parked ones too */
	unsigned long ftrace_parked; /* of those, sites no probe uses any more,
				 * kept for a while (see kp_ftrace_release()) */
	unsigned long kretprobe_inflight; /* calls whose return is hijacked now */
	unsigned long hits_in_progress; /* probe hits in progress, every CPU
				 * (0 on a quiet machine) */
	unsigned long oops_resets; /* oopses inside a probe hit after which the
				 * engine reset that CPU's hit state */
	unsigned long kretprobe_via_graph; /* kretprobe entries that found the
				 * return hijacked by the function graph tracer */
	/* Misses by cause since the engine loaded (the probes' and kretprobes'
	 * own nmissed count them too): */
	unsigned long missed_reentry; /* hits on a CPU already handling one
				 * (no handler ran) */
	unsigned long missed_kret_no_instance; /* kretprobe entries that found
				 * every instance taken (maxactive) */
	unsigned long missed_kret_unloading; /* kretprobe entries while the
				 * engine was being unloaded */
	unsigned long missed_kret_nested; /* returns whose handler did not run
				 * (this CPU's hit levels all taken) */
	unsigned long kretprobe_task_exits; /* hijacked returns given back as
				 * their task exited inside the function */
	unsigned long kretprobe_shadow_returns; /* returns served through the
				 * function graph tracer's shadow stack (no
				 * instance used), since the engine loaded */
	unsigned long kretprobe_shadow_probes; /* kretprobes whose returns the
				 * shadow stack serves now */
	unsigned long opt_waits; /* the jump optimizer's waits for every task
				 * to leave the bytes its jumps cover (with
				 * jumps to write), begun */
	unsigned long opt_waits_done; /* and ended, since the engine loaded (a
				 * jump is written only after a wait that
				 * began once it was prepared) */
};

/* A snapshot of the engine's state (also /sys/kernel/debug/kp/stats):
 * 0, or -EINVAL for a NULL out. */
int kp_get_stats(struct kp_stats *out);

/*
 * Takes down now every parked direct ftrace site: a function entry whose
 * last probe went keeps calling the engine (which finds nothing to do) for
 * about two seconds, as taking the site down waits for every task to leave
 * the trampoline (tasks-RCU, tens to hundreds of ms). Meanwhile the
 * function's ftrace site is not restored and its direct call is taken (a
 * BPF trampoline there gets -EBUSY). Process context; sleeps. Returns how
 * many sites were released.
 */
int kp_ftrace_release(void);

/*
 * Hands out at most n jump-optimization detours from now on (x86_64, whose
 * detours are an area of 1024 in the engine's image; those in use stay,
 * and probes that find none keep their breakpoint until one is free).
 * Returns the previous bound, or -EOPNOTSUPP where the detours are
 * out-of-line slots (arm64). Process context.
 */
long kp_opt_detour_limit(unsigned long n);

/* Size of struct kp_kprobe as the engine was built with it. */
extern const size_t kp_kprobe_abi_size;

#endif /* _KP_KPROBES_H */
