// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel's samples/kprobes/kprobe_example.c, ported to the Rust engine's
 * C interface (include/kp_kprobes.h): the same structure and handlers with
 * kp_-prefixed names. Probes kernel_clone() (parameter `symbol`) and prints
 * the probe address and registers at each hit.
 */
#define pr_fmt(fmt) "%s: " fmt, __func__

#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/kallsyms.h>
#include <linux/ptrace.h>
#include "../include/kp_kprobes.h"

static char symbol[KSYM_NAME_LEN] = "kernel_clone";
module_param_string(symbol, symbol, KSYM_NAME_LEN, 0444);

/* For each probe you need to allocate a kp_kprobe structure */
static struct kp_kprobe kp = {
	.symbol_name	= symbol,
};

/* pre_handler: called just before the probed instruction is executed */
static int handler_pre(struct kp_kprobe *p, struct pt_regs *regs)
{
#ifdef CONFIG_X86
	pr_info("<%s> p->addr = 0x%px, ip = %lx, flags = 0x%lx\n",
		p->symbol_name, p->addr, regs->ip, regs->flags);
#endif
#ifdef CONFIG_ARM64
	pr_info("<%s> p->addr = 0x%px, pc = 0x%lx, pstate = 0x%lx\n",
		p->symbol_name, p->addr, (long)regs->pc, (long)regs->pstate);
#endif
	return 0;
}

/* post_handler: called after the probed instruction is executed */
static void handler_post(struct kp_kprobe *p, struct pt_regs *regs,
			 unsigned long flags)
{
#ifdef CONFIG_X86
	pr_info("<%s> p->addr = 0x%px, flags = 0x%lx\n",
		p->symbol_name, p->addr, regs->flags);
#endif
#ifdef CONFIG_ARM64
	pr_info("<%s> p->addr = 0x%px, pstate = 0x%lx\n",
		p->symbol_name, p->addr, (long)regs->pstate);
#endif
}

static int __init kprobe_init(void)
{
	int ret;

	if (kp_kprobe_abi_size != sizeof(struct kp_kprobe)) {
		pr_err("kprobes.ko was built with another struct kp_kprobe\n");
		return -EINVAL;
	}
	kp.pre_handler = handler_pre;
	kp.post_handler = handler_post;
	ret = kp_register_kprobe(&kp);
	if (ret < 0) {
		pr_err("kp_register_kprobe failed, returned %d\n", ret);
		return ret;
	}
	pr_info("Planted kprobe at %px\n", kp.addr);
	return 0;
}

static void __exit kprobe_exit(void)
{
	kp_unregister_kprobe(&kp);
	pr_info("kprobe at %px unregistered, %lu missed\n", kp.addr, kp.nmissed);
}

module_init(kprobe_init)
module_exit(kprobe_exit)
MODULE_DESCRIPTION("samples/kprobes/kprobe_example.c on the Rust kprobes engine");
MODULE_LICENSE("GPL");
