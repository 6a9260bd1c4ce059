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
#include <linux/mm.h>
#include <linux/uaccess.h>
#include <asm/sections.h>
#include "../include/kp_kprobes.h"
#include "helpers.h"

EXPORT_SYMBOL_GPL(kp_register_kprobe);
EXPORT_SYMBOL_GPL(kp_unregister_kprobe);
EXPORT_SYMBOL_GPL(kp_kprobe_abi_size);

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

/* Per-CPU hit state; its layout is owned by src/percpu.rs (KP_CPU_WORDS). */
#define KP_CPU_WORDS 64
static DEFINE_PER_CPU(unsigned long[KP_CPU_WORDS], kp_cpu_area);

/* Only from a context that cannot migrate (trap handlers). */
void *kp_helper_this_cpu_area(void)
{
	return this_cpu_ptr(&kp_cpu_area);
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
 * Whether addr is in a loaded module's text. __module_text_address() is not
 * exported; the caller passes its address (resolved through kallsyms at load,
 * src/symbols.rs) and we call it with preemption off, as it requires.
 */
bool kp_helper_is_module_text(void *module_text_address_fn, unsigned long addr)
{
	struct module *(*fn)(unsigned long) = module_text_address_fn;
	bool ret;

	preempt_disable();
	ret = fn(addr) != NULL;
	preempt_enable();
	return ret;
}
