// SPDX-License-Identifier: GPL-2.0
/*
 * C glue for return probes on the function graph tracer's shadow stack
 * (src/kretprobe/graph.rs): the engine's fgraph_ops, its two callbacks (C, so
 * that they carry the kCFI type hash fgraph's indirect calls check), and
 * the calls into fgraph's unexported functions, resolved by name at load
 * (register_ftrace_graph, unregister_ftrace_graph, function_graph_enter,
 * fgraph_reserve_data, fgraph_retrieve_data). Without them, or without
 * CONFIG_FUNCTION_GRAPH_RETVAL (the handlers need the return value),
 * kp_graph_init() says no and every return probe uses its pool.
 *
 * fgraph's entry callbacks get no registers in 6.12, and the engine's entry
 * probe has them all; so the engine enters fgraph itself, from the
 * kretprobe's entry probe (kp_graph_push(), as an arch's
 * prepare_ftrace_return() does from ftrace), and ftrace never sends a
 * real call to fgraph for the engine: the ops' filter holds one function,
 * kp_graph_proxy(), which nothing calls. fgraph runs the engine's entry
 * callback for each push (its filter test asks for the function pushed,
 * the proxy) and its return callback when the call returns.
 */
#include <linux/ftrace.h>
#include <linux/irqflags.h>
#include <linux/percpu.h>
#include <linux/preempt.h>
#include <linux/sched.h>

#include "helpers.h"

/* The function the engine's fgraph frames stand for; never called. */
noinline void kp_graph_proxy(void)
{
	barrier();
}

/* Its address, taken here (on IBT kernels an address-taken C function
 * keeps its ENDBR, which objtool wants wherever an address is taken). */
unsigned long kp_graph_proxy_addr(void)
{
	return (unsigned long)kp_graph_proxy;
}

#if defined(CONFIG_FUNCTION_GRAPH_RETVAL) && defined(CONFIG_DYNAMIC_FTRACE)

static void *kp_fn_register, *kp_fn_unregister, *kp_fn_enter, *kp_fn_reserve, *kp_fn_retrieve;
/* The proxy's ftrace site: what the ops' filter holds and what its frames
 * say they are for (x86_64: the function; arm64: the call in its
 * patchable entry). */
static unsigned long kp_proxy_site;
/* The push in progress on this CPU (its record's size in, its record out). */
static DEFINE_PER_CPU(struct kp_graph_push *, kp_graph_pending);

/* fgraph calls this for each frame kp_graph_push() pushes (and would for
 * a call of the proxy, which has none). */
static int KP_KCALL notrace kp_graph_entryfunc(struct ftrace_graph_ent *trace,
					       struct fgraph_ops *gops)
{
	struct kp_graph_push *p = this_cpu_read(kp_graph_pending);

	if (!p)
		return 0;
	this_cpu_write(kp_graph_pending, NULL);
	p->record = KP_FN(fgraph_reserve_data, kp_fn_reserve)(gops->idx, p->size);
	return p->record != NULL;
}

/* ... and this when such a frame's call returns, before return_to_handler
 * goes back to the real caller. Handlers run with interrupts off, as on the
 * engine's own return trampolines. */
static void KP_KCALL notrace kp_graph_retfunc(struct ftrace_graph_ret *trace,
					      struct fgraph_ops *gops)
{
	unsigned long flags;
	int size = 0;
	void *data;

	/* Only frames kp_graph_push() reserved a record in come here. */
	current->curr_ret_depth++;
	data = KP_FN(fgraph_retrieve_data, kp_fn_retrieve)(gops->idx, &size);
	if (!data)
		return;
	local_irq_save(flags);
	kp_graph_leave(trace->retval, data, size);
	local_irq_restore(flags);
}

static struct fgraph_ops kp_gops = {
	.entryfunc = kp_graph_entryfunc,
	.retfunc = kp_graph_retfunc,
};

bool kp_graph_init(unsigned long reg, unsigned long unreg, unsigned long enter,
		   unsigned long reserve, unsigned long retrieve)
{
	kp_fn_register = (void *)reg;
	kp_fn_unregister = (void *)unreg;
	kp_fn_enter = (void *)enter;
	kp_fn_reserve = (void *)reserve;
	kp_fn_retrieve = (void *)retrieve;
	return true;
}

/* Registers the ops, its filter the proxy's ftrace site. */
KP_KCALL int kp_graph_register(unsigned long proxy_site)
{
	int r = ftrace_set_filter_ip(&kp_gops.ops, proxy_site, 0, 1);

	if (r)
		return r;
	kp_proxy_site = proxy_site;
	r = KP_FN(register_ftrace_graph, kp_fn_register)(&kp_gops);
	if (r)
		ftrace_set_filter_ip(&kp_gops.ops, proxy_site, 1, 0);
	return r;
}

KP_KCALL void kp_graph_unregister(void)
{
	KP_FN(unregister_ftrace_graph, kp_fn_unregister)(&kp_gops);
}

/* At engine unload, the ops unregistered: its filter's memory. */
void kp_graph_exit(void)
{
	ftrace_free_filter(&kp_gops.ops);
}

/*
 * Pushes a shadow-stack frame for the current task's call whose return
 * address is ret, kept at retp (x86_64: the stack slot; arm64: the frame
 * pointer at the entry, fp, as prepare_ftrace_return() passes it), with a
 * record of p->size bytes (p->record). 0: pushed, and the caller sends the
 * return to return_to_handler. Interrupts off (the engine's entry probe).
 */
KP_KCALL notrace int kp_graph_push(struct kp_graph_push *p, unsigned long ret,
				   unsigned long *retp, unsigned long fp)
{
	struct kp_graph_push *outer;
	int r;

	if (unlikely(atomic_read(&current->tracing_graph_pause)))
		return -EBUSY;
	/* An NMI's push in between finds its own, and gives ours back. */
	outer = this_cpu_read(kp_graph_pending);
	this_cpu_write(kp_graph_pending, p);
	p->record = NULL;
	r = KP_FN(function_graph_enter, kp_fn_enter)(ret, kp_proxy_site, fp, retp);
	this_cpu_write(kp_graph_pending, outer);
	/*
	 * The engine's frame does not count in the task's graph depth (given
	 * back in kp_graph_retfunc(), before fgraph's own decrement): other
	 * graph users see the depths they would see without it. The function
	 * graph tracer's max_graph_depth counts it otherwise, and on arm64,
	 * where the engine's entry callback may run before the tracer's, the
	 * tracer then ignored a graph function at max depth after marking the
	 * task "inside" it, for good: it recorded everything the task did
	 * after (kretprobe-under-function-graph never finished reading it).
	 */
	if (!r && p->record)
		current->curr_ret_depth--;
	/* 0 with no record: another graph user (one tracing every function)
	 * took the frame and ours found no room; the frame is pushed all the
	 * same and the return must go through return_to_handler. */
	return r;
}

#else /* no return value from the function graph tracer */

bool kp_graph_init(unsigned long reg, unsigned long unreg, unsigned long enter,
		   unsigned long reserve, unsigned long retrieve)
{
	return false;
}

int kp_graph_register(unsigned long proxy_site)
{
	return -EOPNOTSUPP;
}

void kp_graph_unregister(void)
{
}

void kp_graph_exit(void)
{
}

int kp_graph_push(struct kp_graph_push *p, unsigned long ret, unsigned long *retp,
		  unsigned long fp)
{
	return -EOPNOTSUPP;
}

#endif
