// SPDX-License-Identifier: GPL-2.0
/*
 * x86_64 C glue for the Rust backend: the die-notifier block (a struct with a
 * C callback) and sync_core(), a static inline. All logic is in Rust
 * (arch/x86_64/trap.rs).
 */
#include <linux/irqflags.h>
#include <linux/kdebug.h>
#include <linux/notifier.h>
#include <linux/ptrace.h>
#include <linux/stddef.h>
#include <linux/build_bug.h>
#include <asm/sync_core.h>
#include "../../src/helpers.h"

/* arch/x86_64/regs.rs mirrors struct pt_regs; keep the two in step. */
static_assert(offsetof(struct pt_regs, r15) == 0);
static_assert(offsetof(struct pt_regs, bp) == 4 * 8);
static_assert(offsetof(struct pt_regs, ax) == 10 * 8);
static_assert(offsetof(struct pt_regs, di) == 14 * 8);
static_assert(offsetof(struct pt_regs, ip) == 16 * 8);
static_assert(offsetof(struct pt_regs, flags) == 18 * 8);
static_assert(offsetof(struct pt_regs, sp) == 19 * 8);
static_assert(sizeof(struct pt_regs) == 21 * 8);

static notrace int kp_die_notify_c(struct notifier_block *nb, unsigned long val,
			   void *data)
{
	struct die_args *args = data;

	switch (val) {
	case DIE_INT3:
		return kp_x86_int3(args->regs) ? NOTIFY_STOP : NOTIFY_DONE;
	case DIE_GPF:
	case DIE_TRAP:
		/* A fault in an out-of-line copy (fault_handler). */
		return kp_x86_fault(args->regs, args->trapnr) ? NOTIFY_STOP : NOTIFY_DONE;
	default:
		return NOTIFY_DONE;
	}
}

static struct notifier_block kp_die_nb = {
	.notifier_call = kp_die_notify_c,
	/* Our int3s are ours alone: look at them before anyone else does. */
	.priority = INT_MAX,
};

/*
 * Registers kp_die_nb and, when the die chain was found by name (chain_addr:
 * die_chain's address, 0 if not), moves it to the chain's head.
 * register_die_notifier() puts a block after those of its priority, and
 * hw_breakpoint's and the kernel's kprobes' are INT_MAX too: every int3 of
 * ours went through their callbacks first, two indirect calls (retpolines
 * and return thunks where the kernel has them; two TB lookups each under
 * QEMU's TCG). The address is trusted only if our block is found on the
 * chain it names. At load, before any probe exists, so no int3 of ours can
 * come while the block is off the chain. Priorities stay ordered (ours is
 * the highest); later registrations of INT_MAX go after it.
 */
int kp_helper_register_die_notifier(unsigned long chain_addr)
{
	struct atomic_notifier_head *chain = (void *)chain_addr;
	struct notifier_block *n;
	unsigned long flags;
	bool found = false, first;
	int r;

	r = register_die_notifier(&kp_die_nb);
	if (r || !chain)
		return r;
	spin_lock_irqsave(&chain->lock, flags);
	n = rcu_dereference_protected(chain->head, lockdep_is_held(&chain->lock));
	first = n == &kp_die_nb;
	for (; n; n = rcu_dereference_protected(n->next, lockdep_is_held(&chain->lock))) {
		if (n == &kp_die_nb) {
			found = true;
			break;
		}
	}
	spin_unlock_irqrestore(&chain->lock, flags);
	if (!found || first)
		return 0;
	/* Off the chain (this waits for running callbacks), then first. */
	unregister_die_notifier(&kp_die_nb);
	spin_lock_irqsave(&chain->lock, flags);
	RCU_INIT_POINTER(kp_die_nb.next,
			 rcu_dereference_protected(chain->head, lockdep_is_held(&chain->lock)));
	rcu_assign_pointer(chain->head, &kp_die_nb);
	spin_unlock_irqrestore(&chain->lock, flags);
	return 0;
}

void kp_helper_unregister_die_notifier(void)
{
	unregister_die_notifier(&kp_die_nb);
}

static void kp_sync_core_ipi(void *unused)
{
	sync_core();
}

/* Serialise every CPU after a text change (like text_poke_sync()). */
void kp_helper_sync_all_cores(void)
{
	on_each_cpu(kp_sync_core_ipi, NULL, 1);
}

bool kp_x86_lockdep_irqs_enabled(void);

/*
 * Whether lockdep believes this CPU's interrupts on (its hardirqs_enabled,
 * which raw masking does not change): what a register-saving trampoline
 * must give back to lockdep on its way out.
 */
bool kp_x86_lockdep_irqs_enabled(void)
{
#ifdef CONFIG_PROVE_LOCKING
	return lockdep_hardirqs_enabled();
#else
	return false;
#endif
}
