// SPDX-License-Identifier: GPL-2.0
/*
 * C glue for return probes on the function graph tracer's shadow stack
 * (src/kret_graph.rs): the engine's fgraph_ops, its two callbacks (C, so
 * that they carry the kCFI type hash fgraph's indirect calls check), and
 * the calls into fgraph's unexported functions, resolved by name at load
 * (register_ftrace_graph, unregister_ftrace_graph, fgraph_reserve_data,
 * fgraph_retrieve_data, ftrace_graph_get_ret_stack). Without them, or
 * without CONFIG_FUNCTION_GRAPH_RETVAL (the handlers need the return
 * value), kp_graph_init() says no and every return probe uses its pool.
 *
 * The ops' filter holds the ftrace sites of the functions served; it is
 * never empty while the ops is registered (an empty filter traces every
 * function): the first site is set before registering, the last removed
 * by unregistering. kp_graph_add/remove run under the engine's
 * registration lock.
 */
#include <linux/ftrace.h>
#include <linux/irqflags.h>
#include <linux/preempt.h>
#include <linux/sched.h>

#include "helpers.h"

#if defined(CONFIG_FUNCTION_GRAPH_RETVAL) && defined(CONFIG_DYNAMIC_FTRACE)

static void *kp_fn_register, *kp_fn_unregister, *kp_fn_reserve, *kp_fn_retrieve, *kp_fn_top;

/* fgraph calls this at each site in the filter, before the function runs.
 * Preemption may be on (arm64 calls the graph ops' function directly). */
static int notrace kp_graph_entryfunc(struct ftrace_graph_ent *trace, struct fgraph_ops *gops)
{
	int r;

	preempt_disable_notrace();
	r = kp_graph_enter(trace->func);
	preempt_enable_notrace();
	return r;
}

/* ... and this when a hooked call returns, before return_to_handler goes
 * back to the real caller. Handlers run with interrupts off, as on the
 * engine's own return trampolines. */
static void KP_KCALL notrace kp_graph_retfunc(struct ftrace_graph_ret *trace,
					      struct fgraph_ops *gops)
{
	unsigned long flags;
	int size = 0;
	void *data = KP_FN(fgraph_retrieve_data, kp_fn_retrieve)(gops->idx, &size);

	if (!data)
		return;
	local_irq_save(flags);
	kp_graph_leave(trace->func, trace->retval, data, size);
	local_irq_restore(flags);
}

static struct fgraph_ops kp_gops = {
	.entryfunc = kp_graph_entryfunc,
	.retfunc = kp_graph_retfunc,
};

bool kp_graph_init(unsigned long reg, unsigned long unreg, unsigned long reserve,
		   unsigned long retrieve, unsigned long top)
{
	kp_fn_register = (void *)reg;
	kp_fn_unregister = (void *)unreg;
	kp_fn_reserve = (void *)reserve;
	kp_fn_retrieve = (void *)retrieve;
	kp_fn_top = (void *)top;
	return true;
}

KP_KCALL int kp_graph_add(unsigned long ip, bool first)
{
	int r = ftrace_set_filter_ip(&kp_gops.ops, ip, 0, 0);

	if (r || !first)
		return r;
	r = KP_FN(register_ftrace_graph, kp_fn_register)(&kp_gops);
	if (r)
		ftrace_set_filter_ip(&kp_gops.ops, ip, 1, 0);
	return r;
}

/* The filter's hash is kept (emptied) across unregistering: ftrace_free_filter()
 * frees it without resetting the ops' pointers, so it is only for the end. */
KP_KCALL void kp_graph_remove(unsigned long ip, bool last)
{
	if (last)
		KP_FN(unregister_ftrace_graph, kp_fn_unregister)(&kp_gops);
	if (ip && ftrace_set_filter_ip(&kp_gops.ops, ip, 1, 0))
		pr_warn("kprobes: %pS stays in the return probes' function graph filter\n",
			(void *)ip);
}

/* At engine unload, the ops unregistered. */
void kp_graph_exit(void)
{
	ftrace_free_filter(&kp_gops.ops);
}

/* From the entry callback only (fgraph's rule). */
KP_KCALL notrace void *kp_graph_reserve(int size)
{
	return KP_FN(fgraph_reserve_data, kp_fn_reserve)(kp_gops.idx, size);
}

/* The current task's newest shadow-stack frame and the engine's data in it. */
KP_KCALL notrace void *kp_graph_top(unsigned long *func, unsigned long *ret,
				    unsigned long *retp, int *size)
{
	struct ftrace_ret_stack *rs = KP_FN(ftrace_graph_get_ret_stack, kp_fn_top)(current, 0);

	if (!rs)
		return NULL;
	*func = rs->func;
	*ret = rs->ret;
	*retp = (unsigned long)rs->retp;
	return KP_FN(fgraph_retrieve_data, kp_fn_retrieve)(kp_gops.idx, size);
}

#else /* no return value from the function graph tracer */

bool kp_graph_init(unsigned long reg, unsigned long unreg, unsigned long reserve,
		   unsigned long retrieve, unsigned long top)
{
	return false;
}

int kp_graph_add(unsigned long ip, bool first)
{
	return -EOPNOTSUPP;
}

void kp_graph_remove(unsigned long ip, bool last)
{
}

void kp_graph_exit(void)
{
}

void *kp_graph_reserve(int size)
{
	return NULL;
}

void *kp_graph_top(unsigned long *func, unsigned long *ret, unsigned long *retp, int *size)
{
	return NULL;
}

#endif
