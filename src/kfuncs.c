// SPDX-License-Identifier: GPL-2.0
/*
 * Calls into the kernel functions the engine needs but the kernel does not
 * export. src/symbols.rs resolves them by name at load (kallsyms, without
 * the kernel's kprobes) and passes the address to call; each call is made
 * here, in C, through a pointer of the type the kernel's own header
 * declares for the function (typeof), never a hand-written Rust signature:
 *
 *  - kCFI (CONFIG_CFI_CLANG) checks, at every indirect call, the type hash
 *    the compiler put before the target. A C call through typeof(&f) asks
 *    for exactly the hash the kernel's f carries (arm64, and x86_64 without
 *    IBT, check it at run time).
 *  - On x86_64 with IBT the kernel seals, at boot, every function whose
 *    address vmlinux never takes (apply_seal_endbr(): its ENDBR becomes a
 *    NOP, and with FineIBT built its kCFI hash is zeroed): an indirect call
 *    to kallsyms_lookup_name() & co. would fail the kCFI check, and on IBT
 *    hardware raise #CP. There the address passed in is a gate in the
 *    engine's own text ("endbr64; jmp <function>", written at load by the
 *    x86_64 backend, arch/x86_64/insn.rs): the indirect call lands on the
 *    gate's ENDBR and the direct jump needs none. The sealed hash cannot
 *    be checked, so these calls are __nocfi; their types still come from
 *    the kernel's headers.
 *
 * Callbacks the kernel calls back (kallsyms' walkers) are C functions of
 * the exact type the kernel declares, which call Rust directly.
 */
#include <linux/kallsyms.h>
#include <linux/trace_events.h>
#include <linux/extable.h>
#include <linux/ftrace.h>
#include <linux/module.h>
#include <linux/jump_label.h>
#include <linux/static_call.h>
#include <linux/stop_machine.h>
#include <linux/sched.h>
#include <linux/tracefs.h>
#ifdef CONFIG_X86
#include <asm/alternative.h>
#endif
#include "helpers.h"

/* kernel/trace/trace.h, which is private to kernel/trace/. */
void tracing_reset_all_online_cpus(void);


KP_KCALL unsigned long kp_call_kallsyms_lookup_name(void *fn, const char *name)
{
	return KP_FN(kallsyms_lookup_name, fn)(name);
}

KP_KCALL int kp_call_kallsyms_lookup_size_offset(void *fn, unsigned long addr,
						 unsigned long *size, unsigned long *offset)
{
	return KP_FN(kallsyms_lookup_size_offset, fn)(addr, size, offset);
}

static int kp_each_symbol_cb(void *data, const char *name, unsigned long addr)
{
	return kp_symbols_each(data, name, addr);
}

static int kp_each_match_cb(void *data, unsigned long addr)
{
	return kp_symbols_each_match(data, addr);
}

KP_KCALL int kp_call_kallsyms_on_each_symbol(void *fn, void *data)
{
	return KP_FN(kallsyms_on_each_symbol, fn)(kp_each_symbol_cb, data);
}

KP_KCALL int kp_call_kallsyms_on_each_match_symbol(void *fn, const char *name, void *data)
{
	return KP_FN(kallsyms_on_each_match_symbol, fn)(kp_each_match_cb, name, data);
}

/* Every symbol of the loaded module modname (every module: NULL). */
KP_KCALL int kp_call_module_kallsyms_on_each_symbol(void *fn, const char *modname, void *data)
{
	return KP_FN(module_kallsyms_on_each_symbol, fn)(modname, kp_each_symbol_cb, data);
}

/*
 * Whether the instruction at addr has an exception-table entry; if so,
 * *fixup is where its fixup lands (the field is relative to itself on
 * x86_64 and arm64 alike).
 */
KP_KCALL bool kp_call_search_exception_tables(void *fn, unsigned long addr,
					      unsigned long *fixup)
{
	const struct exception_table_entry *e;

	e = KP_FN(search_exception_tables, fn)(addr);
	if (!e)
		return false;
	*fixup = (unsigned long)&e->fixup + e->fixup;
	return true;
}

KP_KCALL unsigned long kp_call_ftrace_location_range(void *fn, unsigned long start,
						     unsigned long end)
{
	return KP_FN(ftrace_location_range, fn)(start, end);
}

KP_KCALL struct module *kp_call_module_text_address(void *fn, unsigned long addr)
{
	return KP_FN(__module_text_address, fn)(addr);
}

/*
 * The reserved-text checks, each int f(void *start, void *end): which
 * is 0 for jump labels (called under jump_label_lock(), also resolved:
 * lock and unlock), 1 for static calls, 2 for alternatives (text_mutex
 * held by the caller, as alternatives_text_reserved() asserts).
 */
KP_KCALL int kp_call_text_reserved(void *fn, unsigned int which, void *lock, void *unlock,
				   void *start, void *end)
{
	int r;

	switch (which) {
	case 0:
		if (lock)
			KP_FN(jump_label_lock, lock)();
		r = KP_FN(jump_label_text_reserved, fn)(start, end);
		if (lock)
			KP_FN(jump_label_unlock, unlock)();
		return r;
	case 1:
		return KP_FN(static_call_text_reserved, fn)(start, end);
#ifdef CONFIG_X86
	case 2:
		return KP_FN(alternatives_text_reserved, fn)(start, end);
#endif
	default:
		return 0;
	}
}

#ifdef CONFIG_FUNCTION_GRAPH_TRACER
KP_KCALL unsigned long kp_call_ftrace_graph_ret_addr(void *fn, unsigned long ret,
						     unsigned long *retp)
{
	int idx = 0;

	return KP_FN(ftrace_graph_ret_addr, fn)(current, &idx, ret, retp);
}
#else
unsigned long kp_call_ftrace_graph_ret_addr(void *fn, unsigned long ret, unsigned long *retp)
{
	return ret;
}
#endif

#ifdef CONFIG_BPF_EVENTS
KP_KCALL unsigned int kp_call_trace_call_bpf(void *fn, struct trace_event_call *call, void *ctx)
{
	return KP_FN(trace_call_bpf, fn)(call, ctx);
}
#endif

KP_KCALL void kp_call_tracing_reset_all_online_cpus(void *fn)
{
	KP_FN(tracing_reset_all_online_cpus, fn)();
}

/* kernel/trace/trace.h, private too. */
struct trace_array;
void tracing_log_err(struct trace_array *tr, const char *loc, const char *cmd,
		     const char **errs, u8 type, u16 pos);

/* An entry in the global tracing error_log. errs is kept by reference in
 * the entry (so it must be the kernel's own table); loc and cmd are copied. */
KP_KCALL void kp_call_tracing_log_err(void *fn, const char *loc, const char *cmd,
				      const char **errs, u8 type, u16 pos)
{
	KP_FN(tracing_log_err, fn)(NULL, loc, cmd, errs, type, pos);
}

KP_KCALL struct dentry *kp_call_tracefs_create_dir(void *fn, const char *name,
						   struct dentry *parent)
{
	return KP_FN(tracefs_create_dir, fn)(name, parent);
}

KP_KCALL struct dentry *kp_call_tracefs_create_file(void *fn, const char *name, umode_t mode,
						    struct dentry *parent, void *data,
						    const struct file_operations *fops)
{
	return KP_FN(tracefs_create_file, fn)(name, mode, parent, data, fops);
}

KP_KCALL void kp_call_tracefs_remove(void *fn, struct dentry *dentry)
{
	KP_FN(tracefs_remove, fn)(dentry);
}

KP_KCALL int kp_call_stop_machine_cpuslocked(void *fn, cpu_stop_fn_t cb, void *data,
					     const struct cpumask *cpus)
{
	return KP_FN(stop_machine_cpuslocked, fn)(cb, data, cpus);
}
