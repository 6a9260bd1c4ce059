/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kp_compat.h - build a module written against <linux/kprobes.h> on the
 * kprobes-rs engine instead: include this header in its place and nothing
 * else changes. struct kprobe, struct kretprobe, struct kretprobe_instance,
 * their handler types, flags, (un)register, enable/disable and the small
 * helpers become the engine's (kp_kprobes.h), so the module links against
 * kprobes.ko and never against the kernel's kprobes, on a kernel with them
 * or without (CONFIG_KPROBES=n).
 *
 * The kernel's own header is included first, for what a module takes from
 * it (__kprobes, NOKPROBE_SYMBOL(), KSYM_NAME_LEN, regs_return_value()) and
 * so that a later include of it is a no-op; the renames below then apply to
 * the module's own code only.
 *
 * What differs from the kernel's kprobes, and what has no equivalent:
 * - p->addr is `void *` (the kernel's is `kprobe_opcode_t *`): arithmetic
 *   on it counts bytes, where on arm64 the kernel's counts instructions.
 * - After registration p->addr is where the engine probes: on arm64 a
 *   function entry is probed past its patchable entry (kernel_clone+8),
 *   where the kernel's kprobes report +0.
 * - KPROBE_FLAG_ON_FUNC_ENTRY is 0: the engine does not report it. The
 *   other flags keep their meaning (the engine's values).
 * - kprobe_running(), get_kprobe(), kprobe_on_func_entry(),
 *   kprobe_fault_handler and the kprobe optimization and instruction-slot
 *   interfaces have no equivalent: a module that uses them fails to build,
 *   with the reason.
 * - get_kretprobe_retaddr() is the real return address of the call, as
 *   the kernel's; a kretprobe's nmissed counts what the engine's does (see
 *   kp_kprobes.h); maxactive <= 0 means max(10, 2 * possible CPUs).
 */
#ifndef _KP_COMPAT_H
#define _KP_COMPAT_H

#include <linux/kprobes.h>
#include <linux/printk.h>
#include "kp_kprobes.h"

#define kprobe			kp_kprobe
#define kretprobe		kp_kretprobe
#define kretprobe_instance	kp_kretprobe_instance
#define kprobe_pre_handler_t	kp_pre_handler_t
#define kprobe_post_handler_t	kp_post_handler_t
#define kretprobe_handler_t	kp_kretprobe_handler_t

#define register_kprobe		kp_register_kprobe
#define unregister_kprobe	kp_unregister_kprobe
#define register_kprobes	kp_register_kprobes
#define unregister_kprobes	kp_unregister_kprobes
#define enable_kprobe		kp_enable_kprobe
#define disable_kprobe		kp_disable_kprobe
#define register_kretprobe	kp_register_kretprobe
#define unregister_kretprobe	kp_unregister_kretprobe
#define register_kretprobes	kp_register_kretprobes
#define unregister_kretprobes	kp_unregister_kretprobes

#undef KPROBE_FLAG_GONE
#undef KPROBE_FLAG_DISABLED
#undef KPROBE_FLAG_OPTIMIZED
#undef KPROBE_FLAG_FTRACE
#undef KPROBE_FLAG_ON_FUNC_ENTRY
#define KPROBE_FLAG_GONE		KP_FLAG_GONE
#define KPROBE_FLAG_DISABLED		KP_FLAG_DISABLED
#define KPROBE_FLAG_OPTIMIZED		KP_FLAG_OPTIMIZED
#define KPROBE_FLAG_FTRACE		KP_FLAG_FTRACE
#define KPROBE_FLAG_ON_FUNC_ENTRY	0

#define kprobe_gone		kp_compat_kprobe_gone
#define kprobe_disabled		kp_compat_kprobe_disabled
#define kprobe_optimized	kp_compat_kprobe_optimized
#define kprobe_ftrace		kp_compat_kprobe_ftrace
#define enable_kretprobe	kp_compat_enable_kretprobe
#define disable_kretprobe	kp_compat_disable_kretprobe
#define get_kretprobe		kp_compat_get_kretprobe
#define get_kretprobe_retaddr	kp_compat_get_kretprobe_retaddr
#define dump_kprobe		kp_compat_dump_kprobe

static inline bool kp_compat_kprobe_gone(struct kp_kprobe *p)
{
	return p->flags & KP_FLAG_GONE;
}

static inline bool kp_compat_kprobe_disabled(struct kp_kprobe *p)
{
	return p->flags & (KP_FLAG_DISABLED | KP_FLAG_GONE);
}

static inline bool kp_compat_kprobe_optimized(struct kp_kprobe *p)
{
	return p->flags & KP_FLAG_OPTIMIZED;
}

static inline bool kp_compat_kprobe_ftrace(struct kp_kprobe *p)
{
	return p->flags & KP_FLAG_FTRACE;
}

static inline int kp_compat_enable_kretprobe(struct kp_kretprobe *rp)
{
	return kp_enable_kprobe(&rp->kp);
}

static inline int kp_compat_disable_kretprobe(struct kp_kretprobe *rp)
{
	return kp_disable_kprobe(&rp->kp);
}

static inline struct kp_kretprobe *
kp_compat_get_kretprobe(struct kp_kretprobe_instance *ri)
{
	return ri->rp;
}

static inline unsigned long
kp_compat_get_kretprobe_retaddr(struct kp_kretprobe_instance *ri)
{
	return ri->ret_addr;
}

/* As the kernel's dump_kprobe(). */
static inline void kp_compat_dump_kprobe(struct kp_kprobe *kp)
{
	pr_err("Dump kprobe:\n.symbol_name = %s, .offset = %x, .addr = %pS\n",
	       kp->symbol_name, kp->offset, kp->addr);
}

/* No equivalent: a build error naming the reason, only where used. */
#define KP_COMPAT_NONE(name, why)					\
	extern void __compiletime_error(#name "(): " why)		\
		kp_compat_none_##name(void)

KP_COMPAT_NONE(kprobe_running, "the kprobes-rs engine keeps no current kprobe per CPU");
KP_COMPAT_NONE(get_kprobe, "the kprobes-rs engine does not look probes up by address");
KP_COMPAT_NONE(kprobe_on_func_entry, "not in the kprobes-rs engine: use kp_lookup_symbol()");
#define kprobe_running(...)	({ kp_compat_none_kprobe_running(); (struct kp_kprobe *)NULL; })
#define get_kprobe(...)		({ kp_compat_none_get_kprobe(); (struct kp_kprobe *)NULL; })
#define kprobe_on_func_entry(...) ({ kp_compat_none_kprobe_on_func_entry(); -EINVAL; })

#endif /* _KP_COMPAT_H */
