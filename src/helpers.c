// SPDX-License-Identifier: GPL-2.0
/*
 * Thin C helpers for the Rust engine: only what Rust cannot reach (static
 * inlines, macros, per-CPU and static-initialiser definitions) and the
 * EXPORT_SYMBOL_GPL lines for the engine's Rust `extern "C"` functions.
 * No logic lives here.
 */
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/percpu.h>
#include <linux/smp.h>
#include <linux/vmalloc.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/uaccess.h>
#include <linux/debugfs.h>
#include <linux/seq_file.h>
#include <linux/notifier.h>
#include <linux/capability.h>
#include <linux/workqueue.h>
#include <linux/tracepoint.h>
#include <linux/sched/task_stack.h>
#include <linux/kdebug.h>
#include <linux/preempt.h>
#include <linux/namei.h>
#include <linux/fs.h>
#include <linux/sysctl.h>
#include <asm/sections.h>
#include "../include/kp_kprobes.h"
#include "helpers.h"

EXPORT_SYMBOL_GPL(kp_register_kprobe);
EXPORT_SYMBOL_GPL(kp_unregister_kprobe);
EXPORT_SYMBOL_GPL(kp_register_kprobes);
EXPORT_SYMBOL_GPL(kp_unregister_kprobes);
EXPORT_SYMBOL_GPL(kp_enable_kprobe);
EXPORT_SYMBOL_GPL(kp_disable_kprobe);
EXPORT_SYMBOL_GPL(kp_blacklisted);
EXPORT_SYMBOL_GPL(kp_blacklist_range);
EXPORT_SYMBOL_GPL(kp_resolved_call);
EXPORT_SYMBOL_GPL(kp_register_kretprobe);
EXPORT_SYMBOL_GPL(kp_unregister_kretprobe);
EXPORT_SYMBOL_GPL(kp_register_kretprobes);
EXPORT_SYMBOL_GPL(kp_unregister_kretprobes);
EXPORT_SYMBOL_GPL(kp_kprobe_abi_size);
EXPORT_SYMBOL_GPL(kp_lookup_symbol);
EXPORT_SYMBOL_GPL(kp_decode_insn);
EXPORT_SYMBOL_GPL(kp_event_command);
EXPORT_SYMBOL_GPL(kp_event_id);
EXPORT_SYMBOL_GPL(kp_get_stats);
EXPORT_SYMBOL_GPL(kp_ftrace_release);
EXPORT_SYMBOL_GPL(kp_opt_detour_limit);

/* Serialises registration, unregistration and text patching. */
static DEFINE_MUTEX(kp_reg_mutex);

void kp_helper_reg_lock(void)
{
	mutex_lock(&kp_reg_mutex);
}

void kp_helper_reg_unlock(void)
{
	mutex_unlock(&kp_reg_mutex);
}

/*
 * Probed addresses' records (src/registry.rs `Point`): a cache of their
 * exact size, as they are the one allocation a registration makes (the
 * nearest kmalloc size would add a third on arm64).
 */
static struct kmem_cache *kp_point_cache;

int kp_helper_point_cache_init(size_t size, size_t align)
{
	kp_point_cache = kmem_cache_create("kp_point", size, align, 0, NULL);
	return kp_point_cache ? 0 : -ENOMEM;
}

void kp_helper_point_cache_exit(void)
{
	kmem_cache_destroy(kp_point_cache);
	kp_point_cache = NULL;
}

void *kp_helper_point_alloc(void)
{
	return kmem_cache_alloc(kp_point_cache, GFP_KERNEL);
}

void kp_helper_point_free(void *p)
{
	kmem_cache_free(kp_point_cache, p);
}

/* Per-CPU hit state; its layout is owned by src/percpu.rs (KP_CPU_WORDS). */
#define KP_CPU_WORDS 64
DEFINE_PER_CPU(unsigned long[KP_CPU_WORDS], kp_cpu_area);

/* Only from a context that cannot migrate (arm64; x86_64 inlines it). */
void *kp_helper_this_cpu_ptr(void __percpu *p)
{
	return this_cpu_ptr(p);
}

/*
 * Task exit (kretprobes): the sched_process_exit tracepoint, found by name
 * (the tracepoint itself is not exported to modules), runs in do_exit() on
 * the exiting task; returns hijacked in its callers never come back.
 */
static struct tracepoint *kp_tp_exit;

static void kp_find_exit_tp(struct tracepoint *tp, void *priv)
{
	if (!strcmp(tp->name, "sched_process_exit"))
		kp_tp_exit = tp;
}

static void kp_on_task_exit(void *data, struct task_struct *p)
{
	kp_kret_task_exit();
}

int kp_helper_exit_hook_register(void)
{
	for_each_kernel_tracepoint(kp_find_exit_tp, NULL);
	if (!kp_tp_exit)
		return -ENOENT;
	return tracepoint_probe_register(kp_tp_exit, kp_on_task_exit, NULL);
}

void kp_helper_exit_hook_unregister(void)
{
	if (!kp_tp_exit)
		return;
	tracepoint_probe_unregister(kp_tp_exit, kp_on_task_exit, NULL);
	tracepoint_synchronize_unregister();
	kp_tp_exit = NULL;
}

/* Whether addr lies anywhere on the current task's stack. */
bool kp_helper_on_task_stack(unsigned long addr)
{
	return object_is_on_stack((void *)addr);
}

/*
 * Oops recovery: DIE_OOPS is reported (x86_64 __die_body(), arm64 __die())
 * before the kernel decides between a panic (in interrupt context, or
 * panic_on_oops) and ending the current task (make_task_dead()). In the
 * second case the engine's hit levels on this CPU belong to that task and
 * would stay busy for good (src/hit.rs: kp_hit_oops()). In interrupt
 * context, including the x86_64 int3 handler (an NMI-like context), the
 * kernel panics anyway: nothing to recover, and nothing is touched.
 */
static notrace int kp_oops_notify_c(struct notifier_block *nb, unsigned long val,
			    void *data)
{
	unsigned long addr, stage;
	unsigned long depth;
	const char *what;

	if (val != DIE_OOPS || in_interrupt())
		return NOTIFY_DONE;
	depth = kp_hit_oops(&addr, &stage);
	if (!depth)
		return NOTIFY_DONE;
	switch (stage) {
	case 1: what = "its handlers"; break;
	case 2: case 3: what = "its displaced instruction"; break;
	case 4: what = "its fault handlers"; break;
	default: what = "?"; break;
	}
	if (addr)
		pr_warn("kprobes: oops inside the hit of the probe at %pS (%s); this CPU's %lu hit level(s) are reset\n",
			(void *)addr, what, depth);
	else
		pr_warn("kprobes: oops inside a kretprobe return handler; this CPU's %lu hit level(s) are reset\n",
			depth);
	return NOTIFY_DONE;
}

static struct notifier_block kp_oops_nb = {
	.notifier_call = kp_oops_notify_c,
	/* Last: a notifier that stops the chain (kgdb) lets the task go on,
	 * and then nothing may be reset. */
	.priority = INT_MIN,
};

int kp_helper_oops_hook_register(void)
{
	return register_die_notifier(&kp_oops_nb);
}

void kp_helper_oops_hook_unregister(void)
{
	unregister_die_notifier(&kp_oops_nb);
}

/* The sum over every CPU of word `word` of the per-CPU area. */
u64 kp_helper_cpu_area_sum(unsigned int word)
{
	u64 sum = 0;
	int cpu;

	if (word >= KP_CPU_WORDS)
		return 0;
	for_each_possible_cpu(cpu)
		sum += READ_ONCE(per_cpu(kp_cpu_area, cpu)[word]);
	return sum;
}

/* The page that backs a text address, for a writable alias. */
void *kp_helper_text_page(unsigned long addr)
{
	if (is_vmalloc_or_module_addr((void *)addr))
		return vmalloc_to_page((void *)addr);
	return pfn_to_page(__pa_symbol(addr) >> PAGE_SHIFT);
}

/* vmap() one page with PAGE_KERNEL (a macro, hence here). */
void *kp_helper_vmap_page(void *page)
{
	struct page *p = page;

	return vmap(&p, 1, VM_MAP, PAGE_KERNEL);
}

/* Whether addr is inside this module (its own code and data: never probed). */
bool kp_helper_within_this_module(unsigned long addr)
{
	return within_module(addr, THIS_MODULE);
}

/*
 * Where in its module addr (in the function starting at fstart) lies, as the
 * kernel's kprobes read a module's refusals when it comes: a KP_MOD_* bit
 * for each of its .noinstr.text, its .kprobes.text and its own
 * NOKPROBE_SYMBOL() list (the module's _kprobe_blacklist section); 0 when
 * none or no module's (src/symbols/mod.rs says why each refuses). Called
 * like kp_helper_is_module_text() below.
 */
unsigned int kp_helper_module_sections(void *module_text_address_fn, unsigned long addr,
				       unsigned long fstart)
{
	unsigned int where = 0;
	struct module *mod;
	unsigned long s;

	preempt_disable();
	mod = kp_call_module_text_address(module_text_address_fn, addr);
	if (mod) {
		s = (unsigned long)mod->noinstr_text_start;
		if (addr >= s && addr < s + mod->noinstr_text_size)
			where |= KP_MOD_NOINSTR;
#ifdef CONFIG_KPROBES
		{
			unsigned int i;

			s = (unsigned long)mod->kprobes_text_start;
			if (addr >= s && addr < s + mod->kprobes_text_size)
				where |= KP_MOD_KPROBES_TEXT;
			for (i = 0; i < mod->num_kprobe_blacklist; i++)
				if (mod->kprobe_blacklist[i] == fstart)
					where |= KP_MOD_NOKPROBE;
		}
#endif
	}
	preempt_enable();
	return where;
}

/*
 * Whether addr is in a loaded module's text. __module_text_address() is not
 * exported; the caller passes its address (resolved through kallsyms at load,
 * src/symbols.rs) and we call it with preemption off, as it requires.
 */
bool kp_helper_is_module_text(void *module_text_address_fn, unsigned long addr)
{
	struct module *mod;
	bool ret;

	preempt_disable();
	mod = kp_call_module_text_address(module_text_address_fn, addr);
	/*
	 * Not a module on its way out (its GOING notifier may have run), and
	 * not init text, which is freed once the module is live.
	 */
	ret = mod && mod->state != MODULE_STATE_GOING &&
	      !within_module_init(addr, mod);
	preempt_enable();
	return ret;
}

unsigned int kp_helper_num_possible_cpus(void);

/* num_possible_cpus(), a macro around cpumask_weight(). */
unsigned int kp_helper_num_possible_cpus(void)
{
	return num_possible_cpus();
}

/*
 * Whether the module symbol that kallsyms gave for addr, starting at start,
 * can contain it: both in the same text allocation of the module. For text
 * before a module's first text symbol (its PLT veneers on arm64, which
 * come first in its text) kallsyms takes the nearest symbol below addr in
 * the module's whole table, a data symbol in another allocation, and
 * reports a size reaching from there. True when addr is no module's text
 * (nothing to check here).
 */
bool kp_helper_module_symbol_covers(void *module_text_address_fn, unsigned long addr,
				    unsigned long start);

bool kp_helper_module_symbol_covers(void *module_text_address_fn, unsigned long addr,
				    unsigned long start)
{
	struct module *mod;
	bool ret = true;

	preempt_disable();
	mod = kp_call_module_text_address(module_text_address_fn, addr);
	if (mod) {
		ret = false;
		for_each_mod_mem_type(t) {
			if (mod_mem_type_is_text(t) && within_module_mem_type(addr, mod, t)) {
				ret = within_module_mem_type(start, mod, t) && start <= addr;
				break;
			}
		}
	}
	preempt_enable();
	return ret;
}

/*
 * The callbacks of an atomic notifier chain, up to max, read under RCU as
 * notifier_call_chain() reads it: the kernel's die_chain (static in
 * kernel/notifier.c, resolved by name), whose callbacks notify_die() calls
 * on every kernel breakpoint (src/blacklist.rs).
 */
unsigned int kp_helper_notifier_callbacks(void *head, unsigned long *out, unsigned int max)
{
	struct atomic_notifier_head *nh = head;
	struct notifier_block *nb;
	unsigned int n = 0;

	rcu_read_lock();
	for (nb = rcu_dereference(nh->head); nb && n < max; nb = rcu_dereference(nb->next))
		out[n++] = (unsigned long)nb->notifier_call;
	rcu_read_unlock();
	return n;
}

/* ---- module notifier: Rust sees (event, module) ---- */

void kp_module_event(unsigned long event, struct module *mod);

static int kp_module_notify_c(struct notifier_block *nb, unsigned long event,
			      void *data)
{
	kp_module_event(event, data);
	return NOTIFY_DONE;
}

static struct notifier_block kp_module_nb = {
	.notifier_call = kp_module_notify_c,
};

int kp_helper_register_module_notifier(void)
{
	return register_module_notifier(&kp_module_nb);
}

void kp_helper_unregister_module_notifier(void)
{
	unregister_module_notifier(&kp_module_nb);
}

bool kp_helper_within_module(unsigned long addr, struct module *mod)
{
	return within_module(addr, mod);
}

const char *kp_helper_module_name(struct module *mod)
{
	return mod->name;
}

/* ---- debugfs: seq_file files whose content Rust writes ---- */

/* Rust: writes the file's content through kp_helper_seq_write(). */
int kp_debugfs_show(struct seq_file *m, unsigned long which);
/* Rust (src/debugfs.rs): a write from user space; count or -errno. */
long kp_debugfs_write_user(unsigned long which, const char __user *ubuf, size_t count);
/* Rust (src/events/control.rs): kprobe_events' open and write policy. */
int kp_events_open_check(bool write, bool trunc);
long kp_events_write_user(const char __user *ubuf, size_t count);

static int kp_seq_show(struct seq_file *m, void *v)
{
	return kp_debugfs_show(m, (unsigned long)m->private);
}

static int kp_seq_open(struct inode *inode, struct file *file)
{
	return single_open(file, kp_seq_show, inode->i_private);
}

static ssize_t kp_seq_write(struct file *file, const char __user *ubuf,
			    size_t count, loff_t *ppos)
{
	struct seq_file *m = file->private_data;

	return kp_debugfs_write_user((unsigned long)m->private, ubuf, count);
}

static const struct file_operations kp_seq_fops = {
	.owner = THIS_MODULE,
	.open = kp_seq_open,
	.read = seq_read,
	.write = kp_seq_write,
	.llseek = seq_lseek,
	.release = single_release,
};

static int kp_events_open(struct inode *inode, struct file *file)
{
	int ret = kp_events_open_check(!!(file->f_mode & FMODE_WRITE),
				       !!(file->f_flags & O_TRUNC));

	return ret ?: single_open(file, kp_seq_show, inode->i_private);
}

static ssize_t kp_events_write_fop(struct file *file, const char __user *ubuf,
				   size_t count, loff_t *ppos)
{
	return kp_events_write_user(ubuf, count);
}

static const struct file_operations kp_events_fops = {
	.owner = THIS_MODULE,
	.open = kp_events_open,
	.read = seq_read,
	.write = kp_events_write_fop,
	.llseek = seq_lseek,
	.release = single_release,
};

static struct dentry *kp_debugfs_dir;

/* Creates /sys/kernel/debug/<dir>/ (not "kprobes": the kernel's own). */
int kp_helper_debugfs_init(const char *dir)
{
	kp_debugfs_dir = debugfs_create_dir(dir, NULL);
	return IS_ERR(kp_debugfs_dir) ? PTR_ERR(kp_debugfs_dir) : 0;
}

void kp_helper_debugfs_file(const char *name, umode_t mode, unsigned long which)
{
	debugfs_create_file(name, mode, kp_debugfs_dir, (void *)which,
			    &kp_seq_fops);
}

void kp_helper_debugfs_events_file(const char *name, unsigned long which)
{
	debugfs_create_file(name, 0600, kp_debugfs_dir, (void *)which,
			    &kp_events_fops);
}

/* /sys/kernel/debug/kprobes/, on a kernel without kprobes (whose own it is
 * otherwise): the kernel's list, enabled and blacklist, in its formats. */
static struct dentry *kp_std_debugfs_dir;

int kp_helper_debugfs_std_file(const char *name, umode_t mode, unsigned long which)
{
	struct dentry *d;

	if (!kp_std_debugfs_dir) {
		d = debugfs_create_dir("kprobes", NULL);
		if (IS_ERR(d))
			return PTR_ERR(d);
		kp_std_debugfs_dir = d;
	}
	d = debugfs_create_file(name, mode, kp_std_debugfs_dir, (void *)which, &kp_seq_fops);
	return IS_ERR(d) ? PTR_ERR(d) : 0;
}

#ifdef CONFIG_SYSCTL
/* Rust (src/debugfs.rs): jump optimization's switch. */
bool kp_std_optimize_get(void);
int kp_std_optimize_set(bool on);

/* debug.kprobes-optimization: the kernel's sysctl (proc_kprobes_optimization_
 * handler, kernel/kprobes.c), 0 or 1, on the engine's optimizer. */
static int kp_proc_optimization(const struct ctl_table *table, int write,
				void *buffer, size_t *length, loff_t *ppos)
{
	int on = kp_std_optimize_get();
	struct ctl_table t = *table;
	int ret;

	t.data = &on;
	ret = proc_dointvec_minmax(&t, write, buffer, length, ppos);
	if (!ret && write)
		ret = kp_std_optimize_set(on);
	return ret;
}

static struct ctl_table kp_sysctl_table[] = {
	{
		.procname = "kprobes-optimization",
		.maxlen = sizeof(int),
		.mode = 0644,
		.proc_handler = kp_proc_optimization,
		.extra1 = SYSCTL_ZERO,
		.extra2 = SYSCTL_ONE,
	},
};

static struct ctl_table_header *kp_sysctl;

int kp_helper_sysctl_init(void)
{
	kp_sysctl = register_sysctl("debug", kp_sysctl_table);
	return kp_sysctl ? 0 : -ENOMEM;
}

static void kp_helper_sysctl_exit(void)
{
	unregister_sysctl_table(kp_sysctl);
	kp_sysctl = NULL;
}
#else
int kp_helper_sysctl_init(void)
{
	return -ENODEV;
}

static void kp_helper_sysctl_exit(void)
{
}
#endif

void kp_helper_debugfs_exit(void)
{
	kp_helper_sysctl_exit();
	debugfs_remove(kp_std_debugfs_dir);
	kp_std_debugfs_dir = NULL;
	debugfs_remove(kp_debugfs_dir);
}

/*
 * The same probe-event files in tracefs, /sys/kernel/tracing/<dir>/, for
 * machines without debugfs (debugfs=off, lockdown). tracefs_create_dir(),
 * tracefs_create_file() and tracefs_remove() are not exported: src/debugfs.rs
 * resolves them by name and passes them in (src/kfuncs.c calls them); none
 * found, no tracefs files. The files' fops hold this module while open
 * (.owner), as tracefs has no removal proxy as debugfs has.
 */
static struct dentry *kp_tracefs_dir;
static void *kp_tracefs_create_file_fn, *kp_tracefs_remove_fn;

int kp_helper_tracefs_init(void *create_dir, void *create_file, void *remove, const char *dir)
{
	struct dentry *d = kp_call_tracefs_create_dir(create_dir, dir, NULL);

	/* NULL: not created (lockdown, a name taken, no memory). */
	if (IS_ERR_OR_NULL(d))
		return d ? PTR_ERR(d) : -ENOENT;
	kp_tracefs_dir = d;
	kp_tracefs_create_file_fn = create_file;
	kp_tracefs_remove_fn = remove;
	return 0;
}

int kp_helper_tracefs_file(const char *name, umode_t mode, unsigned long which, bool events)
{
	struct dentry *d;

	d = kp_call_tracefs_create_file(kp_tracefs_create_file_fn, name, mode, kp_tracefs_dir,
					(void *)which, events ? &kp_events_fops : &kp_seq_fops);
	return IS_ERR_OR_NULL(d) ? (d ? PTR_ERR(d) : -ENOENT) : 0;
}

/* For `%pd`/`%pD` probe-event arguments (src/events/control.rs): where a
 * dentry's name is, and a file's dentry. */
const size_t kp_dentry_name_offset = offsetof(struct dentry, d_name.name);
/* The kernel's PARAM_MAX_STACK (kernel/trace/trace_probe.h): the highest
 * $stackN and $argN of a probe event. */
const size_t kp_param_max_stack = THREAD_SIZE / sizeof(unsigned long);
const size_t kp_file_dentry_offset = offsetof(struct file, f_path.dentry);

/* The standard files at tracefs' top (kprobe_events, kprobe_profile) on a
 * kernel without kprobe events of its own: src/debugfs.rs. */
static struct dentry *kp_tracefs_std[2];

int kp_helper_tracefs_std_file(unsigned int i, const char *name, umode_t mode,
			       unsigned long which, bool events)
{
	struct dentry *d;

	if (i >= ARRAY_SIZE(kp_tracefs_std) || !kp_tracefs_dir)
		return -EINVAL;
	/* A name already there (someone else's kprobe_events): NULL. */
	d = kp_call_tracefs_create_file(kp_tracefs_create_file_fn, name, mode, NULL,
					(void *)which, events ? &kp_events_fops : &kp_seq_fops);
	if (IS_ERR_OR_NULL(d))
		return d ? PTR_ERR(d) : -EEXIST;
	kp_tracefs_std[i] = d;
	return 0;
}

/*
 * tracefs' README with the kprobe_events lines a kernel without kprobe
 * events leaves out (tools read it to learn what kprobe_events takes: perf,
 * the ftrace selftests' "requires:"). The kernel's file is static text; the
 * engine swaps its inode's file operations for ones that read the text
 * src/debugfs.rs composed, and puts the kernel's back at unload. Opens
 * made before keep the kernel's; ours hold this module while open.
 */
static struct dentry *kp_readme;
static const struct file_operations *kp_readme_orig;
static const char *kp_readme_text;
static size_t kp_readme_len;

static int kp_readme_open(struct inode *inode, struct file *filp)
{
	/* The kernel's open (tracing_open_generic: lockdown, tracing off). */
	return kp_readme_orig->open ? kp_readme_orig->open(inode, filp) : 0;
}

static ssize_t kp_readme_read(struct file *filp, char __user *ubuf, size_t cnt, loff_t *ppos)
{
	return simple_read_from_buffer(ubuf, cnt, ppos, kp_readme_text, kp_readme_len);
}

static const struct file_operations kp_readme_fops = {
	.owner = THIS_MODULE,
	.open = kp_readme_open,
	.read = kp_readme_read,
	.llseek = generic_file_llseek,
};

/* text: len bytes that stay until kp_helper_tracefs_exit(). 0 or -errno. */
int kp_helper_tracefs_readme(const char *text, size_t len)
{
	struct dentry *d;

	if (!kp_tracefs_std[0] || kp_readme)
		return -EINVAL;
	d = lookup_one_len_unlocked("README", kp_tracefs_std[0]->d_parent, 6);
	if (IS_ERR(d))
		return PTR_ERR(d);
	if (d_really_is_negative(d) || !d_inode(d)->i_fop) {
		dput(d);
		return -ENOENT;
	}
	kp_readme_text = text;
	kp_readme_len = len;
	kp_readme_orig = d_inode(d)->i_fop;
	kp_readme = d;
	WRITE_ONCE(d_inode(d)->i_fop, &kp_readme_fops);
	return 0;
}

void kp_helper_tracefs_exit(void)
{
	unsigned int i;

	if (kp_readme) {
		WRITE_ONCE(d_inode(kp_readme)->i_fop, kp_readme_orig);
		dput(kp_readme);
		kp_readme = NULL;
	}

	for (i = 0; i < ARRAY_SIZE(kp_tracefs_std); i++) {
		if (kp_tracefs_std[i])
			kp_call_tracefs_remove(kp_tracefs_remove_fn, kp_tracefs_std[i]);
		kp_tracefs_std[i] = NULL;
	}
	if (kp_tracefs_dir)
		kp_call_tracefs_remove(kp_tracefs_remove_fn, kp_tracefs_dir);
	kp_tracefs_dir = NULL;
}

void kp_helper_seq_write(struct seq_file *m, const char *data, size_t len)
{
	seq_write(m, data, len);
}

/* Pins the engine while a hijacked return is outstanding (any context). */
bool kp_helper_module_get(void)
{
	return try_module_get(THIS_MODULE);
}

void kp_helper_module_put(void)
{
	module_put(THIS_MODULE);
}

/* Per-CPU hit counters (src/percpu.rs). */
u64 __percpu *kp_helper_counter_alloc(void)
{
	return alloc_percpu(u64);
}

void kp_helper_counter_free(u64 __percpu *c)
{
	free_percpu(c);
}

/* Caller: interrupts off (trap, ftrace or detour context); arm64 only,
 * x86_64 inlines it. */
void kp_helper_counter_inc(u64 __percpu *c)
{
	__this_cpu_inc(*c);
}

u64 kp_helper_counter_sum(u64 __percpu *c)
{
	u64 sum = 0;
	int cpu;

	for_each_possible_cpu(cpu)
		sum += *per_cpu_ptr(c, cpu);
	return sum;
}

/* ---- jump optimization: the delayed optimizer work (src/optimize.rs) ---- */

static void kp_opt_work_fn(struct work_struct *work)
{
	kp_optimizer_run();
}

static DECLARE_DELAYED_WORK(kp_opt_work, kp_opt_work_fn);

/* As the kernel's OPTIMIZE_DELAY: let a batch of registrations settle. */
#define KP_OPT_DELAY 5

void kp_helper_opt_schedule(void)
{
	schedule_delayed_work(&kp_opt_work, KP_OPT_DELAY);
}

/* Runs the work now (after a run in progress). */
void kp_helper_opt_run_now(void)
{
	mod_delayed_work(system_wq, &kp_opt_work, 0);
}

void kp_helper_opt_cancel(void)
{
	cancel_delayed_work_sync(&kp_opt_work);
}
