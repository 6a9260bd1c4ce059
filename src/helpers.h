/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Prototypes of the C helpers the Rust engine calls, and of the Rust
 * functions the C glue calls. The Rust side declares the same signatures in
 * its `extern "C"` blocks.
 */
#ifndef _KP_HELPERS_H
#define _KP_HELPERS_H

#include <linux/percpu-defs.h>
#include <linux/types.h>

struct page;
struct pt_regs;
struct module;
struct cpumask;

/*
 * Calls through resolved addresses of unexported kernel functions (see
 * src/kfuncs.c): unchecked by kCFI on IBT kernels, whose sealed functions
 * have their hash zeroed; the type is always the kernel's own.
 */
#ifdef CONFIG_X86_KERNEL_IBT
#define KP_KCALL __nocfi
#else
#define KP_KCALL
#endif

/* The function at fn, with f's declared type. */
#define KP_FN(f, fn) ((typeof(&f))(fn))

/*
 * src/kfuncs.c: calls into the unexported kernel functions src/symbols.rs
 * resolves, each at the address (function or gate) passed first.
 */
unsigned long kp_call_kallsyms_lookup_name(void *fn, const char *name);
int kp_call_kallsyms_lookup_size_offset(void *fn, unsigned long addr, unsigned long *size,
					unsigned long *offset);
int kp_call_kallsyms_on_each_symbol(void *fn, void *data);
int kp_call_kallsyms_on_each_match_symbol(void *fn, const char *name, void *data);
int kp_call_module_kallsyms_on_each_symbol(void *fn, const char *modname, void *data);
bool kp_call_search_exception_tables(void *fn, unsigned long addr, unsigned long *fixup);
unsigned long kp_call_ftrace_location_range(void *fn, unsigned long start, unsigned long end);
struct module *kp_call_module_text_address(void *fn, unsigned long addr);
int kp_call_text_reserved(void *fn, unsigned int which, void *lock, void *unlock, void *start,
			  void *end);
unsigned long kp_call_ftrace_graph_ret_addr(void *fn, unsigned long ret, unsigned long *retp);
void kp_call_tracing_reset_all_online_cpus(void *fn);
struct dentry;
struct file_operations;
struct dentry *kp_call_tracefs_create_dir(void *fn, const char *name, struct dentry *parent);
struct dentry *kp_call_tracefs_create_file(void *fn, const char *name, umode_t mode,
					   struct dentry *parent, void *data,
					   const struct file_operations *fops);
void kp_call_tracefs_remove(void *fn, struct dentry *dentry);
void kp_call_tracing_log_err(void *fn, const char *loc, const char *cmd, const char **errs,
			     u8 type, u16 pos);
struct trace_event_call;
unsigned int kp_call_trace_call_bpf(void *fn, struct trace_event_call *call, void *ctx);
int kp_call_stop_machine_cpuslocked(void *fn, int (*cb)(void *), void *data,
				    const struct cpumask *cpus);
/* src/symbols.rs: one step of a kallsyms walk. */
int kp_symbols_each(void *data, const char *name, unsigned long addr);
int kp_symbols_each_match(void *data, unsigned long addr);

/* src/fgraph.c: the function graph tracer's shadow stack for return probes. */
struct kp_graph_push {
	int size;	/* bytes of record to reserve */
	void *record;	/* where, if reserved */
};
bool kp_graph_init(unsigned long reg, unsigned long unreg, unsigned long enter,
		   unsigned long reserve, unsigned long retrieve);
int kp_graph_register(unsigned long proxy_site);
void kp_graph_unregister(void);
void kp_graph_exit(void);
int kp_graph_push(struct kp_graph_push *p, unsigned long ret, unsigned long *retp,
		  unsigned long fp);
void kp_graph_proxy(void);
unsigned long kp_graph_proxy_addr(void);
/* src/kretprobe/graph.rs */
void kp_graph_leave(unsigned long retval, void *block, int size);

/* src/helpers.c */
unsigned int kp_helper_notifier_callbacks(void *head, unsigned long *out, unsigned int max);
void kp_helper_reg_lock(void);
int kp_helper_point_cache_init(size_t size, size_t align);
void kp_helper_point_cache_exit(void);
void *kp_helper_point_alloc(void);
void kp_helper_point_free(void *p);
void kp_helper_reg_unlock(void);
/* The per-CPU hit state (src/percpu.rs owns its layout; 64 words). */
DECLARE_PER_CPU(unsigned long[64], kp_cpu_area);
void *kp_helper_this_cpu_ptr(void __percpu *p);
u64 kp_helper_cpu_area_sum(unsigned int word);
int kp_helper_exit_hook_register(void);
void kp_helper_exit_hook_unregister(void);
bool kp_helper_on_task_stack(unsigned long addr);
int kp_helper_oops_hook_register(void);
void kp_helper_oops_hook_unregister(void);
void kp_kret_task_exit(void);
unsigned long kp_hit_oops(unsigned long *addr, unsigned long *stage);
void *kp_helper_text_page(unsigned long addr);
void *kp_helper_vmap_page(void *page);
bool kp_helper_within_this_module(unsigned long addr);
bool kp_helper_module_get(void);
void kp_helper_module_put(void);
bool kp_helper_is_module_text(void *module_text_address_fn, unsigned long addr);
/* Bits of kp_helper_module_sections() (src/symbols/mod.rs has them too). */
#define KP_MOD_NOINSTR		1
#define KP_MOD_KPROBES_TEXT	2
#define KP_MOD_NOKPROBE		4
unsigned int kp_helper_module_sections(void *module_text_address_fn, unsigned long addr,
				       unsigned long fstart);

int kp_helper_register_module_notifier(void);
void kp_helper_unregister_module_notifier(void);
struct module;
bool kp_helper_within_module(unsigned long addr, struct module *mod);
const char *kp_helper_module_name(struct module *mod);
struct seq_file;
int kp_helper_debugfs_init(const char *dir);
void kp_helper_debugfs_file(const char *name, umode_t mode, unsigned long which);
void kp_helper_debugfs_exit(void);
int kp_helper_debugfs_std_file(const char *name, umode_t mode, unsigned long which);
int kp_helper_sysctl_init(void);
void kp_helper_debugfs_events_file(const char *name, unsigned long which);
int kp_helper_tracefs_init(void *create_dir, void *create_file, void *remove, const char *dir);
int kp_helper_tracefs_file(const char *name, umode_t mode, unsigned long which, bool events);
int kp_helper_tracefs_std_file(unsigned int i, const char *name, umode_t mode,
			       unsigned long which, bool events);
int kp_helper_tracefs_readme(const char *text, size_t len);
extern const size_t kp_dentry_name_offset, kp_file_dentry_offset;
extern const size_t kp_param_max_stack;
void kp_helper_tracefs_exit(void);
void kp_helper_seq_write(struct seq_file *m, const char *data, size_t len);

/* jump optimization (src/optimize.rs) */
void kp_helper_opt_schedule(void);
void kp_helper_opt_run_now(void);
void kp_helper_opt_cancel(void);
void kp_optimizer_run(void);
u64 __percpu *kp_helper_counter_alloc(void);
void kp_helper_counter_free(u64 __percpu *c);
void kp_helper_counter_inc(u64 __percpu *c);
u64 kp_helper_counter_sum(u64 __percpu *c);

/* arch/x86_64/helpers.c */
int kp_helper_register_die_notifier(unsigned long chain_addr);
void kp_helper_unregister_die_notifier(void);
void kp_helper_sync_all_cores(void);
/* Rust, arch/x86_64/trap.rs */
bool kp_x86_int3(struct pt_regs *regs);
bool kp_x86_fault(struct pt_regs *regs, int trapnr);

/* arch/arm64/helpers.c */
/* Arches whose ftrace sites save only argument registers
 * (DYNAMIC_FTRACE_WITH_ARGS without _REGS): the handlers' pt_regs (zero
 * where ftrace saved nothing) filled from the site's ftrace_regs, with
 * interrupts saved as flags, and what goes back (zeroing again what the
 * handlers set that cannot). */
struct ftrace_regs;
struct pt_regs;
void kp_arch_fregs_to_regs(struct ftrace_regs *fregs, struct pt_regs *regs,
			   unsigned long flags);
void kp_arch_regs_to_fregs(struct pt_regs *regs, struct ftrace_regs *fregs);

int kp_helper_arm64_brk_hook_init(void);
void kp_helper_arm64_brk_hook_exit(void);
void kp_helper_isb(void);
/* Rust, arch/arm64/trap.rs */
bool kp_arm64_brk(unsigned long esr, struct pt_regs *regs);

#endif /* _KP_HELPERS_H */
