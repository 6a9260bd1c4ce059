// SPDX-License-Identifier: GPL-2.0
/*
 * C glue for probes on ftrace call sites (src/ftrace.rs): one ftrace_ops for
 * the engine whose filter holds the armed sites, and its callback, which
 * hands the saved registers to the Rust hit path (src/hit.rs,
 * kp_ftrace_hit). Built from what Rust cannot reach: the ops struct,
 * ftrace_get_regs() and the recursion-protection inlines.
 */
#include <linux/module.h>
#include <linux/ftrace.h>
#include <linux/irqflags.h>
#include <linux/ptrace.h>
#include <linux/trace_recursion.h>

/* Implemented in src/hit.rs. */
void kp_ftrace_hit(unsigned long ip, struct pt_regs *regs);

int kp_ftrace_arm(unsigned long ip);
int kp_ftrace_disarm(unsigned long ip);
bool kp_ftrace_available(void);

#ifdef CONFIG_DYNAMIC_FTRACE_WITH_REGS
static void notrace kp_ftrace_func(unsigned long ip, unsigned long parent_ip,
				   struct ftrace_ops *ops,
				   struct ftrace_regs *fregs)
{
	struct pt_regs *regs = ftrace_get_regs(fregs);
	unsigned long flags;
	int bit;

	if (!regs)
		return;
	bit = ftrace_test_recursion_trylock(ip, parent_ip);
	if (bit < 0)
		return;
	/* Handlers run with interrupts off, as on the breakpoint path. */
	local_irq_save(flags);
	kp_ftrace_hit(ip, regs);
	local_irq_restore(flags);
	ftrace_test_recursion_unlock(bit);
}

static struct ftrace_ops kp_entry_ops = {
	.func = kp_ftrace_func,
	.flags = FTRACE_OPS_FL_SAVE_REGS,
};

/* Armed sites; the ops is registered while there is one. Callers hold the
 * engine's registration lock. */
static unsigned int kp_entry_users;

bool kp_ftrace_available(void)
{
	return true;
}

int kp_ftrace_arm(unsigned long ip)
{
	int ret = ftrace_set_filter_ip(&kp_entry_ops, ip, 0, 0);

	if (ret)
		return ret;
	if (!kp_entry_users) {
		ret = register_ftrace_function(&kp_entry_ops);
		if (ret) {
			ftrace_set_filter_ip(&kp_entry_ops, ip, 1, 0);
			return ret;
		}
	}
	kp_entry_users++;
	return 0;
}

int kp_ftrace_disarm(unsigned long ip)
{
	int ret;

	if (kp_entry_users == 1) {
		ret = unregister_ftrace_function(&kp_entry_ops);
		if (ret)
			return ret;
	}
	kp_entry_users--;
	return ftrace_set_filter_ip(&kp_entry_ops, ip, 1, 0);
}
#else
/* Without full registers at ftrace sites (arm64 of 6.12), entry probes use
 * the breakpoint path. */
bool kp_ftrace_available(void)
{
	return false;
}

int kp_ftrace_arm(unsigned long ip)
{
	return -EOPNOTSUPP;
}

int kp_ftrace_disarm(unsigned long ip)
{
	return -EOPNOTSUPP;
}
#endif
