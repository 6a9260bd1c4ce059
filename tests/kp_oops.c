// SPDX-License-Identifier: GPL-2.0
/*
 * kp_oops: probe handlers, and a probed function, that oops on purpose, for
 * the guest's oops-recovery checks (run_oops in qemu/guest-lib.sh).
 *
 * Writing a case name to /sys/kernel/debug/kp_oops/trigger arms that case's
 * handler for one call and calls its function from the writing task; the
 * oops ends the task (the kernel's make_task_dead()), and the machine must
 * go on with nothing of the engine's left busy or leaked. Reading
 * /sys/kernel/debug/kp_oops/witness then calls every probed function once
 * (the entry-probed ones on every CPU) with nothing armed and reports what
 * each probe saw, for the guest to compare with what it should be. (debugfs
 * files without the removal protection, as lkdtm's: a module parameter's
 * store runs under the parameters' mutex, which the dead task would hold
 * for good.)
 *
 * Cases (each handler oopses by writing through a NULL pointer):
 *   pre    an entry probe's pre handler (x86_64: the ftrace path; arm64: the
 *          BRK path, in the debug exception, which is not interrupt context)
 *   post   an entry probe's post handler
 *   entry  a kretprobe's entry handler, while it holds a claimed instance
 *   ret    a kretprobe's return handler (the return trampoline)
 *   body   the kretprobe'd function itself, with its return hijacked
 *          (x86_64 rewinds the stack before ending the task)
 *   opt    x86_64: a jump-optimized mid-function probe's pre handler (the
 *          detour; waits up to 10 s for the optimizer)
 *
 * Every kretprobe has maxactive 1: an instance an oops leaked would make
 * every later call a miss. The x86_64 int3 path is not a case: the kernel
 * runs it as an NMI, and an oops there panics (the kernel's kprobes too).
 *
 * The module sets panic_on_oops to 0 while it is loaded (the guest boots
 * with oops=panic) and restores it when it goes.
 */
#include <linux/compiler.h>
#include <linux/debugfs.h>
#include <linux/fs.h>
#include <linux/uaccess.h>
#include <linux/delay.h>
#include <linux/module.h>
#include <linux/smp.h>
#include <linux/string.h>
#include <linux/atomic.h>
#ifdef CONFIG_X86_64
#include <asm/ibt.h>
#endif
#include "../include/kp_kprobes.h"

/* Never set: the handlers write through it. */
static int *volatile kp_oops_null;
/* The case whose handler oopses on its next call (0: none). */
static int kp_oops_armed;
static int kp_oops_sink;

enum { C_PRE = 1, C_POST, C_ENTRY, C_RET, C_BODY, C_OPT, C_N };
static const char *const kp_oops_names[C_N] = {
	[C_PRE] = "pre", [C_POST] = "post", [C_ENTRY] = "entry",
	[C_RET] = "ret", [C_BODY] = "body", [C_OPT] = "opt",
};
/* Handler calls per case, with nothing armed. */
static atomic_t kp_oops_hits[C_N];

/*
 * One oops for case c if it is armed (the arming is used up first). The
 * write is not instrumented: under KASAN its shadow check of NULL would
 * fault first, as a general protection fault on the shadow address, where
 * every kernel should report the same NULL pointer write.
 */
static __no_sanitize_address void kp_oops_maybe(int c)
{
	if (READ_ONCE(kp_oops_armed) == c) {
		WRITE_ONCE(kp_oops_armed, 0);
		*kp_oops_null = c;
	}
	atomic_inc(&kp_oops_hits[c]);
}

int kp_oops_pre_fn(int x);
int kp_oops_post_fn(int x);
int kp_oops_entry_fn(int x);
int kp_oops_ret_fn(int x);
int kp_oops_body_fn(int x);
int kp_oops_opt_fn(int x);

noinline int kp_oops_pre_fn(int x)
{
	barrier_data(&x);
	return x + 1;
}

noinline int kp_oops_post_fn(int x)
{
	barrier_data(&x);
	return x + 2;
}

noinline int kp_oops_entry_fn(int x)
{
	barrier_data(&x);
	return x + 3;
}

noinline int kp_oops_ret_fn(int x)
{
	barrier_data(&x);
	return x + 4;
}

/* Oopses itself when armed, inside its own (kretprobe'd) frame (no KASAN
 * check of the write, as above). */
noinline __no_sanitize_address int kp_oops_body_fn(int x)
{
	barrier_data(&x);
	if (READ_ONCE(kp_oops_armed) == C_BODY) {
		WRITE_ONCE(kp_oops_armed, 0);
		*kp_oops_null = x;
	}
	return x + 5;
}

/* Straight-line code after the ftrace site, long enough for a jump. */
noinline int kp_oops_opt_fn(int x)
{
	int a = x * 3;

	barrier_data(&a);
	WRITE_ONCE(kp_oops_sink, a ^ 0x55);
	barrier_data(&x);
	return x + a + READ_ONCE(kp_oops_sink);
}

static int kp_oops_pre(struct kp_kprobe *p, struct pt_regs *regs)
{
	kp_oops_maybe(C_PRE);
	return 0;
}

static int kp_oops_post_pre(struct kp_kprobe *p, struct pt_regs *regs)
{
	return 0;
}

static void kp_oops_post(struct kp_kprobe *p, struct pt_regs *regs,
			 unsigned long flags)
{
	kp_oops_maybe(C_POST);
}

static int kp_oops_opt_pre(struct kp_kprobe *p, struct pt_regs *regs)
{
	kp_oops_maybe(C_OPT);
	return 0;
}

static int kp_oops_entry_h(struct kp_kretprobe_instance *ri,
			   struct pt_regs *regs)
{
	kp_oops_maybe(C_ENTRY);
	return 0;
}

static int kp_oops_ret_h(struct kp_kretprobe_instance *ri, struct pt_regs *regs)
{
	kp_oops_maybe(C_RET);
	return 0;
}

static int kp_oops_body_ret_h(struct kp_kretprobe_instance *ri,
			      struct pt_regs *regs)
{
	atomic_inc(&kp_oops_hits[C_BODY]);
	return 0;
}

static struct kp_kprobe kp_oops_kp_pre = {
	.addr = (void *)kp_oops_pre_fn,
	.pre_handler = kp_oops_pre,
};
static struct kp_kprobe kp_oops_kp_post = {
	.addr = (void *)kp_oops_post_fn,
	.pre_handler = kp_oops_post_pre,
	.post_handler = kp_oops_post,
};
static struct kp_kprobe kp_oops_kp_opt = {
	.pre_handler = kp_oops_opt_pre,
};
static struct kp_kretprobe kp_oops_rp_entry = {
	.kp.addr = (void *)kp_oops_entry_fn,
	.entry_handler = kp_oops_entry_h,
	.maxactive = 1,
};
static struct kp_kretprobe kp_oops_rp_ret = {
	.kp.addr = (void *)kp_oops_ret_fn,
	.handler = kp_oops_ret_h,
	.maxactive = 1,
};
static struct kp_kretprobe kp_oops_rp_body = {
	.kp.addr = (void *)kp_oops_body_fn,
	.handler = kp_oops_body_ret_h,
	.maxactive = 1,
};

static int (*const kp_oops_fns[C_N])(int) = {
	[C_PRE] = kp_oops_pre_fn, [C_POST] = kp_oops_post_fn,
	[C_ENTRY] = kp_oops_entry_fn, [C_RET] = kp_oops_ret_fn,
	[C_BODY] = kp_oops_body_fn, [C_OPT] = kp_oops_opt_fn,
};

static int kp_oops_case(const char *val)
{
	int c;

	for (c = 1; c < C_N; c++)
		if (sysfs_streq(val, kp_oops_names[c]))
			return c;
	return -EINVAL;
}

/* Whether the mid-function probe is jump-optimized (waits up to 10 s). */
static bool kp_oops_opt_ready(void)
{
	int i;

	if (!(kp_oops_kp_opt.flags & KP_FLAG_REGISTERED))
		return false;
	for (i = 0; i < 1000; i++) {
		if (READ_ONCE(kp_oops_kp_opt.flags) & KP_FLAG_OPTIMIZED)
			return true;
		msleep(10);
	}
	return false;
}

static ssize_t kp_oops_trigger(struct file *f, const char __user *ubuf,
			       size_t len, loff_t *pos)
{
	char val[16];
	int c;

	if (len >= sizeof(val))
		return -EINVAL;
	if (copy_from_user(val, ubuf, len))
		return -EFAULT;
	val[len] = 0;
	c = kp_oops_case(val);
	if (c < 0)
		return c;
	if (c == C_OPT && !kp_oops_opt_ready())
		return -EOPNOTSUPP;
	pr_info("kp_oops: case %s: this task oopses now\n", kp_oops_names[c]);
	WRITE_ONCE(kp_oops_armed, c);
	kp_oops_fns[c](c);
	/* Not reached when the case works. */
	WRITE_ONCE(kp_oops_armed, 0);
	pr_err("kp_oops: case %s did not oops\n", kp_oops_names[c]);
	return -EIO;
}

static void kp_oops_on_cpu(void *unused)
{
	kp_oops_pre_fn(0);
	kp_oops_post_fn(0);
}

/*
 * "pre H M post H M entry H M ret H M body H M opt H M cpus N": for each
 * case the handler calls seen by this read (H) and the probe's missed count
 * (M, total); pre and post are called on every online CPU, the rest once
 * here. opt is "- -" where it does not apply.
 */
static ssize_t kp_oops_witness(struct file *f, char __user *ubuf, size_t len,
			       loff_t *pos)
{
	int before[C_N], c, n = 0;
	unsigned long missed[C_N];
	char buf[160];

	if (*pos)
		return 0;
	for (c = 1; c < C_N; c++)
		before[c] = atomic_read(&kp_oops_hits[c]);
	on_each_cpu(kp_oops_on_cpu, NULL, 1);
	kp_oops_entry_fn(0);
	kp_oops_ret_fn(0);
	kp_oops_body_fn(0);
	if (kp_oops_kp_opt.flags & KP_FLAG_REGISTERED)
		kp_oops_opt_fn(0);
	missed[C_PRE] = kp_oops_kp_pre.nmissed;
	missed[C_POST] = kp_oops_kp_post.nmissed;
	missed[C_ENTRY] = kp_oops_rp_entry.nmissed + kp_oops_rp_entry.kp.nmissed;
	missed[C_RET] = kp_oops_rp_ret.nmissed + kp_oops_rp_ret.kp.nmissed;
	missed[C_BODY] = kp_oops_rp_body.nmissed + kp_oops_rp_body.kp.nmissed;
	missed[C_OPT] = kp_oops_kp_opt.nmissed;
	for (c = 1; c < C_N; c++) {
		if (c == C_OPT && !(kp_oops_kp_opt.flags & KP_FLAG_REGISTERED))
			n += scnprintf(buf + n, sizeof(buf) - n, "%s - - ", kp_oops_names[c]);
		else
			n += scnprintf(buf + n, sizeof(buf) - n, "%s %d %lu ", kp_oops_names[c],
				       atomic_read(&kp_oops_hits[c]) - before[c], missed[c]);
	}
	n += scnprintf(buf + n, sizeof(buf) - n, "cpus %u\n", num_online_cpus());
	return simple_read_from_buffer(ubuf, len, pos, buf, n);
}

static const struct file_operations kp_oops_trigger_fops = {
	.owner = THIS_MODULE,
	.write = kp_oops_trigger,
};

static const struct file_operations kp_oops_witness_fops = {
	.owner = THIS_MODULE,
	.read = kp_oops_witness,
};

static struct dentry *kp_oops_dir;

static int *kp_oops_panic_on_oops;
static int kp_oops_saved_panic;

/*
 * x86_64: the first instruction after the ftrace site of kp_oops_opt_fn
 * (past its ENDBR, live or sealed, on IBT kernels).
 */
static int kp_oops_register_opt(void)
{
#ifdef CONFIG_X86_64
	unsigned long at = (unsigned long)kp_oops_opt_fn;
	struct kp_insn insn;
	int r;

	/* Opaque: objtool takes kp_oops_opt_fn + 4 for a pointer to code. */
	OPTIMIZER_HIDE_VAR(at);
	if (is_endbr(*(u32 *)at))
		at += ENDBR_INSN_SIZE;
	r = kp_decode_insn(at, &insn);
	if (r)
		return r;
	kp_oops_kp_opt.addr = (void *)(at + insn.len);
	return kp_register_kprobe(&kp_oops_kp_opt);
#else
	return 0;
#endif
}

static int __init kp_oops_init(void)
{
	struct kp_kprobe *kps[] = { &kp_oops_kp_pre, &kp_oops_kp_post };
	int r;

	kp_oops_panic_on_oops = (int *)kp_lookup_symbol("panic_on_oops", NULL);
	if (!kp_oops_panic_on_oops) {
		pr_err("kp_oops: no panic_on_oops symbol\n");
		return -ENOENT;
	}
	r = kp_register_kprobes(kps, ARRAY_SIZE(kps));
	if (r)
		return r;
	r = kp_register_kretprobe(&kp_oops_rp_entry);
	if (r)
		goto out_kps;
	r = kp_register_kretprobe(&kp_oops_rp_ret);
	if (r)
		goto out_entry;
	r = kp_register_kretprobe(&kp_oops_rp_body);
	if (r)
		goto out_ret;
	r = kp_oops_register_opt();
	if (r)
		goto out_body;
	kp_oops_dir = debugfs_create_dir("kp_oops", NULL);
	debugfs_create_file_unsafe("trigger", 0200, kp_oops_dir, NULL, &kp_oops_trigger_fops);
	debugfs_create_file_unsafe("witness", 0400, kp_oops_dir, NULL, &kp_oops_witness_fops);
	kp_oops_saved_panic = READ_ONCE(*kp_oops_panic_on_oops);
	WRITE_ONCE(*kp_oops_panic_on_oops, 0);
	return 0;
out_body:
	kp_unregister_kretprobe(&kp_oops_rp_body);
out_ret:
	kp_unregister_kretprobe(&kp_oops_rp_ret);
out_entry:
	kp_unregister_kretprobe(&kp_oops_rp_entry);
out_kps:
	kp_unregister_kprobes(kps, ARRAY_SIZE(kps));
	return r;
}

static void __exit kp_oops_exit(void)
{
	struct kp_kprobe *kps[] = { &kp_oops_kp_pre, &kp_oops_kp_post };

	debugfs_remove(kp_oops_dir);
	WRITE_ONCE(*kp_oops_panic_on_oops, kp_oops_saved_panic);
	if (kp_oops_kp_opt.flags & KP_FLAG_REGISTERED)
		kp_unregister_kprobe(&kp_oops_kp_opt);
	kp_unregister_kretprobe(&kp_oops_rp_body);
	kp_unregister_kretprobe(&kp_oops_rp_ret);
	kp_unregister_kretprobe(&kp_oops_rp_entry);
	kp_unregister_kprobes(kps, ARRAY_SIZE(kps));
}

module_init(kp_oops_init);
module_exit(kp_oops_exit);
MODULE_DESCRIPTION("kprobes-rs: handlers that oops, for the oops-recovery checks");
MODULE_LICENSE("GPL");
