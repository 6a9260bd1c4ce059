// SPDX-License-Identifier: GPL-2.0
/*
 * kp_bench: the Rust engine's kprobes against the kernel's own, in one boot.
 *
 * A C client of the engine (through include/kp_kprobes.h) that also uses the
 * kernel's kprobes API on the same targets; the engine itself never calls
 * the kernel's kprobes. Per-hit cost = (time with probe - time without) /
 * calls, KP_BENCH_CALLS calls per measurement, `reps` repetitions (5 by
 * default, up to KP_BENCH_MAX_REPS) interleaved between the two engines;
 * median, min and max are printed as
 * "KP-BENCH <row> ours <med> <min> <max> kernel <med> <min> <max>" (ns).
 * The guest job turns both engines' jump optimization off first, so that
 * both sides use their breakpoint path, then on again for one more load
 * with rows=kprobe-mid-opt (row 3): both sides' jump-optimized probe on
 * the same instruction, measured once each side reports it optimized
 * (ours: KP_FLAG_OPTIMIZED; the kernel's: its jump in the text); on arm64,
 * where the kernel has no optprobes, against the kernel's BRK probe. Row 6 (event-3args): the same kprobe event on
 * each side in turn, enabled with trace_set_clr_event(): the per-hit cost
 * then includes writing a record to the trace buffer.
 */
#include <linux/module.h>
#include <linux/kprobes.h>
#include <linux/ktime.h>
#include <linux/slab.h>
#include <linux/sort.h>
#include <linux/kthread.h>
#include <linux/completion.h>
#include <linux/cpumask.h>
#include <linux/delay.h>
#include <linux/trace_events.h>
#include "../include/kp_kprobes.h"

#define KP_BENCH_CALLS 1000000
#define KP_BENCH_MAX_REPS 31
#define KP_BENCH_NPROBES 1000

/* Offset of a mid-function instruction past the ftrace patchable entry. */
#ifdef CONFIG_X86_64
#define MID_OFFSET 5	/* after the 5-byte __fentry__ NOP */
#define MID_LOC "kp_bench_target+5"
#define EV_ARGS "a=%di", "b=%si", "c=%dx"
#define EV_ARGS_LINE "a=%di b=%si c=%dx"
#else
#define MID_OFFSET 8	/* after mov x9, x30; nop */
#define MID_LOC "kp_bench_target+8"
#define EV_ARGS "a=%x0", "b=%x1", "c=%x2"
#define EV_ARGS_LINE "a=%x0 b=%x1 c=%x2"
#endif
/* Row 6: the same event on both sides (the kernel's in group "kprobes",
 * ours in "kprobes_rs"), defined while the module loads, enabled in turn. */
#define EV_NAME "kp_bench_ev"

static volatile int sink;

/* Rows to run: "all" (every row but kprobe-mid-opt, which needs jump
 * optimization on), or a comma-separated list of row names, "allcpus" and
 * "register" standing for rows 9 and 7 (KP_CMDLINE=kp_bench_rows=... in
 * make bench). */
static char rows[128] = "all";
module_param_string(rows, rows, sizeof(rows), 0444);
/* Set by the guest job once both jump optimizations are on: row 3 runs
 * only then. */
static bool opt;
module_param(opt, bool, 0444);

/* Repetitions per row (the guest job's kp_bench_reps=N). */
static int reps = 5;
module_param(reps, int, 0444);

static bool want(const char *name)
{
	size_t n = strlen(name);
	const char *p = rows;

	if (!strcmp(rows, "all"))
		return strcmp(name, "kprobe-mid-opt") != 0;
	/* "none": load for the memory row only. */
	while ((p = strstr(p, name))) {
		if ((p == rows || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
			return true;
		p += n;
	}
	return false;
}

/*
 * x86_64 (clang): the ftrace NOP, then lea; add; sar; xor; ret. The probe
 * at MID_OFFSET (the lea) has 6 bytes of instructions both engines can run
 * out of line before the sar, so both can also jump-optimize it (row 3; the
 * kernel does not boost `inc`, which x * 3 + 1 compiles to).
 */
static noinline int kp_bench_target(int x)
{
	return (x * 3 + 5) ^ (x >> 5);
}

static int empty_pre(struct kprobe *p, struct pt_regs *regs) { return 0; }
static void empty_post(struct kprobe *p, struct pt_regs *regs, unsigned long f) { }
static int kp_empty_pre(struct kp_kprobe *p, struct pt_regs *regs) { return 0; }
static void kp_empty_post(struct kp_kprobe *p, struct pt_regs *regs, unsigned long f) { }
static int empty_ret(struct kretprobe_instance *ri, struct pt_regs *regs) { return 0; }
static int kp_empty_ret(struct kp_kretprobe_instance *ri, struct pt_regs *regs) { return 0; }

static u64 run_calls(void)
{
	u64 t0 = ktime_get_ns();
	int i;

	for (i = 0; i < KP_BENCH_CALLS; i++)
		sink = kp_bench_target(i);
	return ktime_get_ns() - t0;
}

/* ps of per-call cost above the unprobed baseline. */
static s64 per_hit(u64 probed, u64 base)
{
	return ((s64)probed - (s64)base) * 1000 / KP_BENCH_CALLS;
}

enum side { OURS, KERNEL };
enum row {
	ROW_KPROBE, ROW_KPROBE_POST, ROW_KPROBE_OPT, ROW_KPROBE_ENTRY, ROW_KRETPROBE, ROW_EVENT,
	NROWS
};
static const char *const row_names[NROWS] = {
	"kprobe-mid", "kprobe-mid-post", "kprobe-mid-opt", "kprobe-entry", "kretprobe",
	"event-3args",
};

/*
 * Row 6: EV_NAME with the identical probe and arguments on both sides,
 * `p:<group>/kp_bench_ev kp_bench_target+MID a=... b=... c=...`: the
 * kernel's through its dynamic-event API (as `echo ... >>
 * /sys/kernel/tracing/kprobe_events` does), ours through
 * kp_event_command(). Each side's event exists only for its own
 * measurement: the kernel's int3 handler claims every breakpoint at an
 * address where it has a kprobe, enabled or not, so ours would never fire
 * while the kernel's is defined.
 */
static bool event_defined[2];

static int define_event(enum side side)
{
	struct dynevent_cmd cmd;
	char *buf;
	int ret;

	if (side == OURS) {
		ret = kp_event_command("p:" EV_NAME " " MID_LOC " " EV_ARGS_LINE);
	} else {
		buf = kzalloc(MAX_DYNEVENT_CMD_LEN, GFP_KERNEL);
		if (!buf)
			return -ENOMEM;
		kprobe_event_cmd_init(&cmd, buf, MAX_DYNEVENT_CMD_LEN);
		ret = kprobe_event_gen_cmd_start(&cmd, EV_NAME, MID_LOC, EV_ARGS);
		if (!ret)
			ret = kprobe_event_gen_cmd_end(&cmd);
		kfree(buf);
	}
	event_defined[side] = !ret;
	return ret;
}

static void delete_event(enum side side)
{
	if (!event_defined[side])
		return;
	if (side == OURS)
		kp_event_command("-:" EV_NAME);
	else
		kprobe_event_delete(EV_NAME);
	event_defined[side] = false;
}

static int set_event(enum side side, int on)
{
	return trace_set_clr_event(side == KERNEL ? "kprobes" : "kprobes_rs", EV_NAME, on);
}

/*
 * Row 3: waits (up to 10 s) until the side's probe is jump-optimized: its
 * instruction is a jump to a detour instead of a breakpoint (x86_64: jmp
 * rel32 instead of int3; arm64: B instead of BRK), and ours says so in its
 * flags (the kernel's flag is on its internal aggregate, out of a module's
 * reach). The kernel's arm64 kprobes have no jump optimization (6.12): its
 * side of the row is its BRK probe.
 */
static bool jumped(unsigned long addr)
{
#ifdef CONFIG_X86_64
	return READ_ONCE(*(u8 *)addr) == 0xe9;
#else
	return (READ_ONCE(*(u32 *)addr) >> 26) == 0x05;
#endif
}

static int wait_optimized(enum side side, struct kp_kprobe *kkp, unsigned long addr)
{
	int i;

	if (side == KERNEL && !IS_ENABLED(CONFIG_X86_64))
		return 0;
	for (i = 0; i < 1000; i++) {
		if (jumped(addr) &&
		    (side == KERNEL || READ_ONCE(kkp->flags) & KP_FLAG_OPTIMIZED))
			return 0;
		msleep(10);
	}
	pr_err("KP-BENCH kprobe-mid-opt: the %s probe was not optimized\n",
	       side == OURS ? "engine's" : "kernel's");
	return -ETIMEDOUT;
}

static void disarm(enum row row, enum side side, struct kprobe *kp,
		   struct kp_kprobe *kkp, struct kretprobe *rp, struct kp_kretprobe *krp)
{
	if (row == ROW_EVENT) {
		set_event(side, 0);
		delete_event(side);
	} else if (row == ROW_KRETPROBE) {
		if (side == KERNEL)
			unregister_kretprobe(rp);
		else
			kp_unregister_kretprobe(krp);
	} else if (side == KERNEL) {
		unregister_kprobe(kp);
	} else {
		kp_unregister_kprobe(kkp);
	}
	/* An entry site the engine called directly stays parked (still
	 * calling the engine) for a while after its probe went: take it down,
	 * so that the next unprobed baseline, and the kernel's turn, run the
	 * function as it is without the engine. */
	if (side == OURS)
		kp_ftrace_release();
}

static int arm(enum row row, enum side side, struct kprobe *kp,
	       struct kp_kprobe *kkp, struct kretprobe *rp, struct kp_kretprobe *krp)
{
	/* Row 4: the function's entry, each side's fastest mechanism (both
	 * use ftrace on x86_64; arm64: the kernel's BRK vs ours). */
	unsigned long off = row == ROW_KPROBE_ENTRY ? 0 : MID_OFFSET;

	int ret;

	switch (row) {
	case ROW_KPROBE:
	case ROW_KPROBE_POST:
	case ROW_KPROBE_OPT:
	case ROW_KPROBE_ENTRY:
		if (side == KERNEL) {
			memset(kp, 0, sizeof(*kp));
			kp->addr = (kprobe_opcode_t *)((unsigned long)kp_bench_target + off);
			kp->pre_handler = empty_pre;
			if (row == ROW_KPROBE_POST)
				kp->post_handler = empty_post;
			ret = register_kprobe(kp);
		} else {
			memset(kkp, 0, sizeof(*kkp));
			kkp->addr = (void *)((unsigned long)kp_bench_target + off);
			kkp->pre_handler = kp_empty_pre;
			if (row == ROW_KPROBE_POST)
				kkp->post_handler = kp_empty_post;
			ret = kp_register_kprobe(kkp);
		}
		if (!ret && row == ROW_KPROBE_OPT) {
			ret = wait_optimized(side, kkp, (unsigned long)kp_bench_target + off);
			if (ret)
				disarm(row, side, kp, kkp, rp, krp);
		}
		return ret;
	case ROW_EVENT:
		ret = define_event(side);
		if (!ret) {
			ret = set_event(side, 1);
			if (ret)
				delete_event(side);
		}
		return ret;
	default:
		if (side == KERNEL) {
			memset(rp, 0, sizeof(*rp));
			rp->kp.addr = (kprobe_opcode_t *)kp_bench_target;
			rp->handler = empty_ret;
			rp->maxactive = 4;
			return register_kretprobe(rp);
		}
		memset(krp, 0, sizeof(*krp));
		krp->kp.addr = (void *)kp_bench_target;
		krp->handler = kp_empty_ret;
		krp->maxactive = 4;
		return kp_register_kretprobe(krp);
	}
}

static int cmp_s64(const void *a, const void *b)
{
	s64 x = *(const s64 *)a, y = *(const s64 *)b;

	return x < y ? -1 : x > y;
}

/* Values in picoseconds; printed in ns as median, min, max. */
static void report(const char *name, s64 *ours, s64 *kern)
{
	sort(ours, reps, sizeof(s64), cmp_s64, NULL);
	sort(kern, reps, sizeof(s64), cmp_s64, NULL);
	pr_info("KP-BENCH %s ours %lld %lld %lld kernel %lld %lld %lld\n", name,
		ours[reps / 2] / 1000, ours[0] / 1000, ours[reps - 1] / 1000,
		kern[reps / 2] / 1000, kern[0] / 1000, kern[reps - 1] / 1000);
}

static int bench_hits(void)
{
	static struct kprobe kp;
	static struct kp_kprobe kkp;
	static struct kretprobe rp;
	static struct kp_kretprobe krp;
	s64 res[2][KP_BENCH_MAX_REPS], calls[2 * KP_BENCH_MAX_REPS], unprobed;
	int row, rep, side, ret;

	for (row = 0; row < NROWS; row++) {
		if (!want(row_names[row]) || (row == ROW_KPROBE_OPT && !opt))
			continue;
		for (rep = 0; rep < reps; rep++) {
			for (side = 0; side < 2; side++) {
				u64 base = run_calls(), probed;

				ret = arm(row, side, &kp, &kkp, &rp, &krp);
				if (ret) {
					pr_err("KP-BENCH %s: %s registration failed: %d\n",
					       row_names[row], side == OURS ? "our" : "kernel", ret);
					return ret;
				}
				probed = run_calls();
				disarm(row, side, &kp, &kkp, &rp, &krp);
				res[side][rep] = per_hit(probed, base);
				calls[2 * rep + side] = per_hit(base, 0);
			}
		}
		report(row_names[row], res[OURS], res[KERNEL]);
		/* A probe that did not fire costs nothing (give or take the
		 * noise between two runs); a hit on any path costs more than
		 * an unprobed call (the median one: the slowest run, which an
		 * emulator's host can stretch, once made the cheapest hits
		 * look absent). */
		sort(calls, 2 * reps, sizeof(s64), cmp_s64, NULL);
		unprobed = calls[reps];
		for (side = 0; side < 2; side++) {
			if (res[side][reps / 2] < unprobed) {
				pr_err("KP-BENCH %s: the %s probe did not fire\n",
				       row_names[row], side == OURS ? "engine's" : "kernel's");
				return -EIO;
			}
		}
	}
	return 0;
}

/*
 * Row 9: every online CPU calls the probed function at once (one kthread per
 * CPU, released together); per-hit cost averaged over the CPUs. Compare with
 * row 1 (one CPU) for how each engine scales.
 */
#define KP_BENCH_ALL_CALLS (KP_BENCH_CALLS / 4)

static struct {
	atomic_t ready, go, left;
	u64 ns[NR_CPUS];
	struct completion done;
} all;

static int all_cpus_thread(void *data)
{
	int cpu = (long)data, i;
	u64 t0;

	atomic_inc(&all.ready);
	while (!atomic_read(&all.go))
		cpu_relax();
	t0 = ktime_get_ns();
	for (i = 0; i < KP_BENCH_ALL_CALLS; i++)
		sink = kp_bench_target(i);
	all.ns[cpu] = ktime_get_ns() - t0;
	if (atomic_dec_and_test(&all.left))
		complete(&all.done);
	return 0;
}

/* Mean ns per CPU for KP_BENCH_ALL_CALLS calls on every online CPU at once. */
static s64 run_all_cpus(void)
{
	unsigned int n = num_online_cpus(), cpu;
	u64 sum = 0;

	atomic_set(&all.ready, 0);
	atomic_set(&all.go, 0);
	atomic_set(&all.left, n);
	init_completion(&all.done);
	for_each_online_cpu(cpu) {
		struct task_struct *t = kthread_create(all_cpus_thread, (void *)(long)cpu,
						       "kp_bench/%u", cpu);

		if (IS_ERR(t))
			return PTR_ERR(t);
		kthread_bind(t, cpu);
		wake_up_process(t);
	}
	while (atomic_read(&all.ready) < n)
		schedule_timeout_uninterruptible(1);
	atomic_set(&all.go, 1);
	wait_for_completion(&all.done);
	for_each_online_cpu(cpu)
		sum += all.ns[cpu];
	return sum / n;
}

static int bench_all_cpus(void)
{
	static struct kprobe kp;
	static struct kp_kprobe kkp;
	s64 res[2][KP_BENCH_MAX_REPS];
	int rep, side, ret;
	char name[48];

	for (rep = 0; rep < reps; rep++) {
		for (side = 0; side < 2; side++) {
			s64 base = run_all_cpus(), probed;

			if (base < 0)
				return base;
			ret = arm(ROW_KPROBE, side, &kp, &kkp, NULL, NULL);
			if (ret)
				return ret;
			probed = run_all_cpus();
			disarm(ROW_KPROBE, side, &kp, &kkp, NULL, NULL);
			if (probed < 0)
				return probed;
			res[side][rep] = (probed - base) * 1000 / KP_BENCH_ALL_CALLS;
		}
	}
	snprintf(name, sizeof(name), "kprobe-mid-allcpus(%u)", num_online_cpus());
	report(name, res[OURS], res[KERNEL]);
	return 0;
}

/*
 * Row 7: register + unregister of KP_BENCH_NPROBES probes with the batch
 * API, per probe. All on one address (both engines aggregate them): distinct
 * probe-able addresses that both engines accept alike are not at hand in a
 * module yet; the row therefore measures the aggregation path.
 */
static int bench_register(void)
{
	struct kprobe *kps;
	struct kp_kprobe *kkps;
	struct kprobe **kpp;
	struct kp_kprobe **kkpp;
	s64 res[2][KP_BENCH_MAX_REPS];
	int i, rep, ret = -ENOMEM;

	kps = kcalloc(KP_BENCH_NPROBES, sizeof(*kps), GFP_KERNEL);
	kkps = kcalloc(KP_BENCH_NPROBES, sizeof(*kkps), GFP_KERNEL);
	kpp = kcalloc(KP_BENCH_NPROBES, sizeof(*kpp), GFP_KERNEL);
	kkpp = kcalloc(KP_BENCH_NPROBES, sizeof(*kkpp), GFP_KERNEL);
	if (!kps || !kkps || !kpp || !kkpp)
		goto out;
	for (rep = 0; rep < reps; rep++) {
		u64 t0;

		for (i = 0; i < KP_BENCH_NPROBES; i++) {
			memset(&kps[i], 0, sizeof(kps[i]));
			kps[i].addr = (kprobe_opcode_t *)((unsigned long)kp_bench_target + MID_OFFSET);
			kps[i].pre_handler = empty_pre;
			kpp[i] = &kps[i];
			memset(&kkps[i], 0, sizeof(kkps[i]));
			kkps[i].addr = (void *)((unsigned long)kp_bench_target + MID_OFFSET);
			kkps[i].pre_handler = kp_empty_pre;
			kkpp[i] = &kkps[i];
		}
		t0 = ktime_get_ns();
		ret = kp_register_kprobes(kkpp, KP_BENCH_NPROBES);
		if (ret)
			goto out;
		kp_unregister_kprobes(kkpp, KP_BENCH_NPROBES);
		res[OURS][rep] = (ktime_get_ns() - t0) * 1000 / KP_BENCH_NPROBES;
		t0 = ktime_get_ns();
		ret = register_kprobes(kpp, KP_BENCH_NPROBES);
		if (ret)
			goto out;
		unregister_kprobes(kpp, KP_BENCH_NPROBES);
		res[KERNEL][rep] = (ktime_get_ns() - t0) * 1000 / KP_BENCH_NPROBES;
	}
	report("register+unregister-per-probe(1000,aggregated)", res[OURS], res[KERNEL]);
	ret = 0;
out:
	kfree(kps);
	kfree(kkps);
	kfree(kpp);
	kfree(kkpp);
	return ret;
}

/*
 * Row 8: memory. The guest job measures what each engine allocates while
 * this module registers, on its request (a write to the `mem` parameter,
 * from the measuring shell, which traces its own allocations):
 * "probes-ours" / "probes-kernel": MEM_N probes on distinct instructions
 * (the NOPs of kp_bench_nops), batch API; "kret-ours:N" / "kret-kernel:N":
 * one kretprobe with maxactive N on kp_bench_target; "release": unregister
 * all. The client structs are static: only the engines allocate.
 */
#define MEM_N 1000
#ifdef CONFIG_X86_64
#define NOP_LEN 1
#else
#define NOP_LEN 4
#endif
/* First probed NOP: past the entry and a few NOPs (the compiler's prologue,
 * if any, stays unprobed). */
#define MEM_FIRST (MID_OFFSET + 4 * NOP_LEN)

static noinline void kp_bench_nops(void)
{
	asm volatile(".rept " __stringify(MEM_N + 8) "\n\tnop\n\t.endr");
}

static struct {
	struct kprobe kps[MEM_N], *kpp[MEM_N];
	struct kp_kprobe kkps[MEM_N], *kkpp[MEM_N];
	struct kretprobe rp;
	struct kp_kretprobe krp;
	bool probes[2], kret[2];
} mem;
static DEFINE_MUTEX(mem_lock);

static int mem_probes(enum side side)
{
	unsigned long base = (unsigned long)kp_bench_nops + MEM_FIRST;
	int i, ret;

	for (i = 0; i < MEM_N; i++) {
		if (side == KERNEL) {
			memset(&mem.kps[i], 0, sizeof(mem.kps[i]));
			mem.kps[i].addr = (kprobe_opcode_t *)(base + i * NOP_LEN);
			mem.kps[i].pre_handler = empty_pre;
			mem.kpp[i] = &mem.kps[i];
		} else {
			memset(&mem.kkps[i], 0, sizeof(mem.kkps[i]));
			mem.kkps[i].addr = (void *)(base + i * NOP_LEN);
			mem.kkps[i].pre_handler = kp_empty_pre;
			mem.kkpp[i] = &mem.kkps[i];
		}
	}
	ret = side == KERNEL ? register_kprobes(mem.kpp, MEM_N) :
			       kp_register_kprobes(mem.kkpp, MEM_N);
	mem.probes[side] = !ret;
	return ret;
}

static int mem_kret(enum side side, int n)
{
	int ret;

	if (side == KERNEL) {
		memset(&mem.rp, 0, sizeof(mem.rp));
		mem.rp.kp.addr = (kprobe_opcode_t *)kp_bench_target;
		mem.rp.handler = empty_ret;
		mem.rp.maxactive = n;
		ret = register_kretprobe(&mem.rp);
	} else {
		memset(&mem.krp, 0, sizeof(mem.krp));
		mem.krp.kp.addr = (void *)kp_bench_target;
		mem.krp.handler = kp_empty_ret;
		mem.krp.maxactive = n;
		ret = kp_register_kretprobe(&mem.krp);
	}
	mem.kret[side] = !ret;
	return ret;
}

static void mem_release(void)
{
	if (mem.probes[KERNEL])
		unregister_kprobes(mem.kpp, MEM_N);
	if (mem.probes[OURS])
		kp_unregister_kprobes(mem.kkpp, MEM_N);
	if (mem.kret[KERNEL])
		unregister_kretprobe(&mem.rp);
	if (mem.kret[OURS])
		kp_unregister_kretprobe(&mem.krp);
	memset(mem.probes, 0, sizeof(mem.probes));
	memset(mem.kret, 0, sizeof(mem.kret));
}

static int mem_set(const char *val, const struct kernel_param *kp)
{
	enum side side = strstr(val, "kernel") ? KERNEL : OURS;
	const char *colon = strchr(val, ':');
	int n = 0, ret;

	if (colon && kstrtoint(colon + 1, 10, &n))
		return -EINVAL;
	mutex_lock(&mem_lock);
	if (sysfs_streq(val, "release")) {
		mem_release();
		ret = 0;
	} else if (sysfs_streq(val, "probes-ours") || sysfs_streq(val, "probes-kernel")) {
		ret = mem.probes[side] ? -EBUSY : mem_probes(side);
	} else if (!strncmp(val, "kret-", 5) && colon && n > 0) {
		ret = mem.kret[side] ? -EBUSY : mem_kret(side, n);
	} else {
		ret = -EINVAL;
	}
	mutex_unlock(&mem_lock);
	if (ret)
		pr_err("KP-BENCH memory: '%s': %d\n", val, ret);
	return ret;
}

static const struct kernel_param_ops mem_ops = { .set = mem_set };
module_param_cb(mem, &mem_ops, NULL, 0200);

static int __init kp_bench_init(void)
{
	int ret;

	if (reps < 1 || reps > KP_BENCH_MAX_REPS) {
		pr_err("KP-BENCH reps=%d: 1 to %d\n", reps, KP_BENCH_MAX_REPS);
		return -EINVAL;
	}
	pr_info("KP-BENCH start: %d calls x %d reps, mid offset %d\n",
		KP_BENCH_CALLS, reps, MID_OFFSET);
	/* For the memory row: a registered probe also costs its client's
	 * struct (the kernel keeps its per-probe state in it). */
	pr_info("KP-BENCH-SIZES ours %zu kernel %zu\n",
		sizeof(struct kp_kprobe), sizeof(struct kprobe));
	ret = bench_hits();
	if (!ret && want("allcpus"))
		ret = bench_all_cpus();
	if (!ret && want("register"))
		ret = bench_register();
	pr_info("KP-BENCH done: %d\n", ret);
	return ret;
}

static void __exit kp_bench_exit(void)
{
	mutex_lock(&mem_lock);
	mem_release();
	mutex_unlock(&mem_lock);
}

module_init(kp_bench_init);
module_exit(kp_bench_exit);
MODULE_DESCRIPTION("kprobes-rs against the kernel's kprobes, side by side");
MODULE_LICENSE("GPL");
