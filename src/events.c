// SPDX-License-Identifier: GPL-2.0
/*
 * C glue for kprobe_events (src/events/): the structs the kernel's trace
 * event core wants (trace_event_call, trace_event_class, field and output
 * callbacks, the list of enabled trace_event_files) and the record write,
 * built from static inlines and macros Rust cannot reach. What an event
 * contains, how its arguments are fetched, laid out and printed is decided
 * in Rust; these functions only hand over.
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/rculist.h>
#include <linux/mutex.h>
#include <linux/trace_events.h>
#include <linux/trace_seq.h>
#include <linux/ptrace.h>
#include <linux/perf_event.h>
#include <linux/kprobes.h>
#include "helpers.h"

struct kp_tev;

/* Called from src/events/. */
void kp_events_lock(void);
void kp_events_unlock(void);
struct kp_tev *kp_tev_create(void *owner, const char *group, const char *name,
			     char *print_fmt, bool is_return, ssize_t fixed_args);
int kp_tev_register(struct kp_tev *t);
int kp_tev_unregister(struct kp_tev *t);
void kp_tev_free(struct kp_tev *t);
bool kp_tev_enabled(struct kp_tev *t);
int kp_tev_id(struct kp_tev *t);
void kp_tev_record(struct kp_tev *t, const void *site, struct pt_regs *regs,
		   unsigned long ip, unsigned long ret_ip, const void *edata);
void kp_events_event_lock(void);
void kp_events_event_unlock(void);
void kp_events_event_assert_held(void);

/* Implemented in src/events/: `owner` is the event, `site` the probed place
 * of it that hit (its fetch programs). */
int kp_ev_define_fields(void *owner, struct trace_event_call *call);
size_t kp_ev_args_size(const void *site, struct pt_regs *regs, const void *edata);
void kp_ev_store_args(const void *site, struct pt_regs *regs, const void *edata,
		      void *entry, size_t head, size_t size);
void kp_ev_print_args(void *owner, struct trace_seq *s, void *entry, int size);
const char *kp_ev_name(void *owner);
int kp_ev_arm(void *owner, bool on);

/* The record heads, as the kernel's kprobe events lay them out. */
struct kp_entry_head {
	struct trace_entry ent;
	unsigned long ip;
};

struct kp_ret_entry_head {
	struct trace_entry ent;
	unsigned long func;
	unsigned long ret_ip;
};

/* The record heads' sizes, for src/events/ (one definition of the layout:
 * these structs). */
const size_t kp_ev_head_sizes[2] = {
	sizeof(struct kp_entry_head),
	sizeof(struct kp_ret_entry_head),
};

struct kp_file_link {
	struct trace_event_file *file;
	struct list_head list;
};

/*
 * Up to `probes`, the shape of the kernel's struct trace_probe_event
 * (kernel/trace/trace_probe.h), which the kernel assumes around every
 * TRACE_EVENT_FL_KPROBE event: attaching a bpf_override_return() program
 * (CONFIG_BPF_KPROBE_OVERRIDE) first asks trace_kprobe_on_func_entry()
 * and trace_kprobe_error_injectable(), which take the event's first
 * trace_probe (container_of(call, struct trace_probe_event, call), then
 * its probes list) as the `tp` of a struct trace_kprobe
 * (kernel/trace/trace_kprobe.c) and read that kprobe's address, symbol
 * and offset. An empty list would make them warn. The list holds a
 * stand-in instead: `stand_in.tp` (list first, as in struct trace_probe)
 * after zeroes at least as long as what precedes `tp` in a trace_kprobe,
 * so the kprobe they read has no address and no symbol: not a function
 * entry, not injectable, and the kernel refuses the program with -EINVAL,
 * quietly. No override on our events: nothing else reads the stand-in.
 */
struct kp_tev {
	unsigned int tpe_flags;		/* trace_probe_event.flags: 0 */
	struct trace_event_class class;
	struct trace_event_call call;
	struct list_head files;		/* kp_file_link, RCU */
	struct list_head probes;	/* trace_probe_event.probes: stand_in.tp */
	void *owner;			/* the Rust event */
	ssize_t fixed_args;		/* the arguments' bytes, -1: strings */
	bool is_return;
	bool registered;
	atomic_t perf_users;		/* perf events attached */
	struct {
		/* struct trace_kprobe's devent, rp, nhit and symbol: zero */
		char before_tp[1024];
		/* struct trace_probe: list, then zeroes */
		struct list_head tp;
		char after_tp[64];
	} stand_in;
};

static DEFINE_MUTEX(kp_events_mutex);

/* The trace event core's event_mutex (not exported; src/events/ resolves
 * it at load): trace_add_event_call() and trace_remove_event_call() want it
 * held, as the kernel's dynamic events hold it. */
static struct mutex *kp_event_mutex;

void kp_events_set_event_mutex(struct mutex *m);
void kp_events_set_event_mutex(struct mutex *m)
{
	kp_event_mutex = m;
}

/* The trace event core's list of every event call (ftrace_events,
 * kernel/trace/trace.h; not exported), resolved at load: NULL if not. */
static struct list_head *kp_ftrace_events;

void kp_events_set_ftrace_events(struct list_head *l);
void kp_events_set_ftrace_events(struct list_head *l)
{
	kp_ftrace_events = l;
}

/* Whether an event call system/name exists, the kernel's own built-in
 * ones (ftrace/function, ...) included: find_trace_event_call() of
 * kernel/trace/trace_events.c. event_mutex held. */
static bool kp_event_call_exists(const char *system, const char *name)
{
	struct trace_event_call *call;
	const char *n;

	list_for_each_entry(call, kp_ftrace_events, list) {
		if (!call->class || !call->class->system || strcmp(system, call->class->system))
			continue;
		n = trace_event_name(call);
		if (n && !strcmp(name, n))
			return true;
	}
	return false;
}

/*
 * trace_call_bpf() (kernel/trace/bpf_trace.c; not exported), resolved by
 * src/events/ at load: runs the BPF programs attached to an event through
 * perf (PERF_EVENT_IOC_SET_BPF, a BPF perf link), as the kernel's
 * kprobe_perf_func() does. NULL: none is found, and attached programs do
 * not run (the engine said so at load).
 */
static void *kp_trace_call_bpf;

void kp_events_set_trace_call_bpf(void *fn);
void kp_events_set_trace_call_bpf(void *fn)
{
	kp_trace_call_bpf = fn;
}

/* The trace core's event_mutex: the outer lock of every change to the
 * probe events (src/events/ takes it before its own events mutex, the
 * order the kernel's dynamic events have: the trace core calls kp_reg()
 * and the dynamic_events callbacks with it held, and those reach the
 * events). NULL where it was not found: then no event exists. */
void kp_events_event_lock(void)
{
	if (kp_event_mutex)
		mutex_lock(kp_event_mutex);
}

void kp_events_event_unlock(void)
{
	if (kp_event_mutex)
		mutex_unlock(kp_event_mutex);
}

/* The caller says the trace core holds event_mutex for it. */
void kp_events_event_assert_held(void)
{
	if (kp_event_mutex)
		lockdep_assert_held(kp_event_mutex);
}

void kp_events_lock(void)
{
	mutex_lock(&kp_events_mutex);
}

void kp_events_unlock(void)
{
	mutex_unlock(&kp_events_mutex);
}

static struct kp_tev *tev_of(struct trace_event_call *call)
{
	return container_of(call, struct kp_tev, call);
}

static int kp_define_fields(struct trace_event_call *call)
{
	struct kp_tev *t = tev_of(call);
	int ret;

	if (t->is_return) {
		ret = trace_define_field(call, "unsigned long", "__probe_func",
					 offsetof(struct kp_ret_entry_head, func),
					 sizeof(unsigned long), 0, FILTER_OTHER);
		if (!ret)
			ret = trace_define_field(call, "unsigned long", "__probe_ret_ip",
						 offsetof(struct kp_ret_entry_head, ret_ip),
						 sizeof(unsigned long), 0, FILTER_OTHER);
	} else {
		ret = trace_define_field(call, "unsigned long", "__probe_ip",
					 offsetof(struct kp_entry_head, ip),
					 sizeof(unsigned long), 0, FILTER_OTHER);
	}
	return ret ?: kp_ev_define_fields(t->owner, call);
}

static struct trace_event_fields kp_fields_array[] = {
	{ .type = TRACE_FUNCTION_TYPE, .define_fields = kp_define_fields },
	{}
};

static enum print_line_t kp_print(struct trace_iterator *iter, int flags,
				  struct trace_event *event)
{
	struct trace_event_call *call = container_of(event, struct trace_event_call, event);
	struct kp_tev *t = tev_of(call);
	struct trace_seq *s = &iter->seq;

	/* A record shorter than our header is not ours (see kp_ev_print_args). */
	if (iter->ent_size < (int)(t->is_return ? sizeof(struct kp_ret_entry_head) :
						  sizeof(struct kp_entry_head))) {
		trace_seq_printf(s, "%s: (bad record)\n", kp_ev_name(t->owner));
		return trace_handle_return(s);
	}
	if (t->is_return) {
		struct kp_ret_entry_head *h = (void *)iter->ent;

		trace_seq_printf(s, "%s: (%pS <- %ps)", kp_ev_name(t->owner),
				 (void *)h->ret_ip, (void *)h->func);
	} else {
		struct kp_entry_head *h = (void *)iter->ent;

		trace_seq_printf(s, "%s: (%pS)", kp_ev_name(t->owner), (void *)h->ip);
	}
	kp_ev_print_args(t->owner, s, iter->ent, iter->ent_size);
	trace_seq_putc(s, '\n');
	return trace_handle_return(s);
}

static struct trace_event_functions kp_funcs = {
	.trace = kp_print,
};

/* Before a user is added: arms the probe if it is the first. */
static int kp_tev_first_user(struct kp_tev *t)
{
	return kp_tev_enabled(t) ? 0 : kp_ev_arm(t->owner, true);
}

/* After a user went: disarms the probe if it was the last. */
static void kp_tev_user_gone(struct kp_tev *t)
{
	if (!kp_tev_enabled(t))
		kp_ev_arm(t->owner, false);
}

static int kp_reg(struct trace_event_call *call, enum trace_reg type, void *data)
{
	struct kp_tev *t = tev_of(call);
	struct trace_event_file *file = data;
	struct kp_file_link *l;
	int ret;

	/* The probe is armed while the event has a user (kp_ev_arm); reg runs
	 * under event_mutex, so users come and go one at a time, and the
	 * sites kp_ev_arm() walks do not change meanwhile (they change under
	 * it too). */
	switch (type) {
	case TRACE_REG_REGISTER:
	case TRACE_REG_UNREGISTER:
#ifdef CONFIG_PERF_EVENTS
	case TRACE_REG_PERF_REGISTER:
	case TRACE_REG_PERF_UNREGISTER:
#endif
		if (kp_event_mutex)
			lockdep_assert_held(kp_event_mutex);
		break;
	default:
		break;
	}
	switch (type) {
	case TRACE_REG_REGISTER:
		/* An enabled event pins the engine (and its handlers). */
		if (!try_module_get(THIS_MODULE))
			return -ENODEV;
		l = kmalloc(sizeof(*l), GFP_KERNEL);
		if (!l) {
			module_put(THIS_MODULE);
			return -ENOMEM;
		}
		ret = kp_tev_first_user(t);
		if (ret) {
			kfree(l);
			module_put(THIS_MODULE);
			return ret;
		}
		l->file = file;
		list_add_tail_rcu(&l->list, &t->files);
		return 0;
	case TRACE_REG_UNREGISTER:
		list_for_each_entry(l, &t->files, list) {
			if (l->file == file) {
				list_del_rcu(&l->list);
				kp_tev_user_gone(t);
				/* Hits run with interrupts off: an RCU-sched
				 * grace period covers them. */
				synchronize_rcu();
				kfree(l);
				module_put(THIS_MODULE);
				return 0;
			}
		}
		return -ENOENT;
#ifdef CONFIG_PERF_EVENTS
	case TRACE_REG_PERF_REGISTER:
		/* The perf core has set up call->perf_events. */
		if (!try_module_get(THIS_MODULE))
			return -ENODEV;
		ret = kp_tev_first_user(t);
		if (ret) {
			module_put(THIS_MODULE);
			return ret;
		}
		atomic_inc(&t->perf_users);
		return 0;
	case TRACE_REG_PERF_UNREGISTER:
		atomic_dec(&t->perf_users);
		kp_tev_user_gone(t);
		module_put(THIS_MODULE);
		return 0;
	case TRACE_REG_PERF_OPEN:
	case TRACE_REG_PERF_CLOSE:
	case TRACE_REG_PERF_ADD:
	case TRACE_REG_PERF_DEL:
		return 0;
#endif
	default:
		return -EOPNOTSUPP;
	}
}

/* A new, unregistered event; the strings must outlive it. fixed_args: the
 * bytes of its arguments in every record, or -1 when they depend on the hit
 * (strings: measured at each one). */
struct kp_tev *kp_tev_create(void *owner, const char *group, const char *name,
			     char *print_fmt, bool is_return, ssize_t fixed_args)
{
	struct kp_tev *t = kzalloc(sizeof(*t), GFP_KERNEL);

	if (!t)
		return NULL;
	INIT_LIST_HEAD(&t->files);
	INIT_LIST_HEAD(&t->probes);
#ifdef CONFIG_KPROBES
	/* What precedes tp in struct trace_kprobe: a dyn_event (three
	 * words), a kretprobe, two pointers. */
	BUILD_BUG_ON(sizeof(struct kretprobe) + 8 * sizeof(void *) >
		     sizeof(t->stand_in.before_tp));
#endif
	list_add(&t->stand_in.tp, &t->probes);
	INIT_LIST_HEAD(&t->class.fields);
	t->owner = owner;
	t->fixed_args = fixed_args;
	t->is_return = is_return;
	t->class.system = group;
	t->class.fields_array = kp_fields_array;
	t->class.reg = kp_reg;
	t->call.class = &t->class;
	t->call.name = (char *)name;
	t->call.print_fmt = print_fmt;
	t->call.event.funcs = &kp_funcs;
	t->call.flags = TRACE_EVENT_FL_KPROBE;
	return t;
}

/* -EEXIST when group/name is taken (by us or anyone), else 0 or -errno.
 * event_mutex held (kp_events_event_lock()). */
int kp_tev_register(struct kp_tev *t)
{
	int ret;

	/* Without the list of every event call the kernel's built-in names
	 * (ftrace/function) could not be refused: no events. (Both are data
	 * symbols of kernel/trace/, found or not together.) */
	if (!kp_event_mutex || !kp_ftrace_events)
		return -ENODEV;
	lockdep_assert_held(kp_event_mutex);
	if (kp_event_call_exists(t->class.system, t->call.name))
		return -EEXIST;
	ret = -ENODEV;
	if (register_trace_event(&t->call.event)) {
		ret = trace_add_event_call(&t->call);
		if (ret)
			unregister_trace_event(&t->call.event);
		else
			t->registered = true;
	}
	return ret;
}

/* -EBUSY while the event is enabled or open somewhere. event_mutex held. */
int kp_tev_unregister(struct kp_tev *t)
{
	int ret;

	if (!t->registered)
		return 0;
	lockdep_assert_held(kp_event_mutex);
	if (!list_empty(&t->files) || atomic_read(&t->perf_users)) {
		ret = -EBUSY;
	} else {
		/* This also unregisters the trace_event (as for the kernel's
		 * probe events: trace_probe_unregister_event_call()). */
		ret = trace_remove_event_call(&t->call);
		if (!ret)
			t->registered = false;
	}
	return ret;
}

void kp_tev_free(struct kp_tev *t)
{
	kfree(t);
}

/* Whether some trace instance or perf event has the event enabled. */
bool kp_tev_enabled(struct kp_tev *t)
{
	return !list_empty(&t->files) || atomic_read(&t->perf_users);
}

/* The event's type id (tracefs `id`, perf's PERF_TYPE_TRACEPOINT config). */
int kp_tev_id(struct kp_tev *t)
{
	return t->call.event.type;
}

/* The head of a record: the probe address (return probes: the function and
 * where it returns to). */
static void kp_fill_head(struct kp_tev *t, void *entry, unsigned long ip,
			 unsigned long ret_ip)
{
	if (t->is_return) {
		struct kp_ret_entry_head *h = entry;

		h->func = ip;
		h->ret_ip = ret_ip;
	} else {
		((struct kp_entry_head *)entry)->ip = ip;
	}
}

#ifdef CONFIG_PERF_EVENTS
/* The record for perf, built like the trace buffer's (kprobe_perf_func()). */
static void kp_tev_perf(struct kp_tev *t, const void *site, struct pt_regs *regs,
			unsigned long ip, unsigned long ret_ip, const void *edata,
			size_t head_size, ssize_t args)
{
	struct hlist_head *head;
	int size, rctx;
	void *entry;

#ifdef CONFIG_BPF_EVENTS
	/* As kprobe_perf_func(): the programs first, on every CPU; one that
	 * returns 0 drops the perf record. */
	if (bpf_prog_array_valid(&t->call)) {
		unsigned long orig_ip = instruction_pointer(regs);
		/* Without trace_call_bpf() the programs cannot run: they
		 * filter nothing out either. */
		unsigned int ret = 1;

		if (kp_trace_call_bpf)
			ret = kp_call_trace_call_bpf(kp_trace_call_bpf, &t->call, regs);
		/* Only bpf_override_return() moves it, and it cannot be
		 * attached here (struct kp_tev): never resume elsewhere. */
		if (WARN_ON_ONCE(instruction_pointer(regs) != orig_ip))
			instruction_pointer_set(regs, orig_ip);
		if (!ret)
			return;
	}
#endif
	head = this_cpu_ptr(t->call.perf_events);
	if (hlist_empty(head))
		return;
	/* -1: the trace buffer did not need it (not measured yet). */
	if (args < 0)
		args = kp_ev_args_size(site, regs, edata);
	size = ALIGN(head_size + args + sizeof(u32), sizeof(u64)) - sizeof(u32);
	/* perf_trace_buf_alloc() WARNs above this. */
	if (size > PERF_MAX_TRACE_SIZE)
		return;
	entry = perf_trace_buf_alloc(size, NULL, &rctx);
	if (!entry)
		return;
	kp_fill_head(t, entry, ip, ret_ip);
	memset(entry + head_size, 0, size - head_size);
	kp_ev_store_args(site, regs, edata, entry, head_size, args);
	perf_trace_buf_submit(entry, size, rctx, t->call.event.type, 1, regs,
			      head, NULL);
}
#endif

/* Writes one record to every instance that has the event enabled.
 * Trap context (interrupts off). site: the probed place that hit; edata: a
 * return probe's data saved at the function's entry (its $argN values),
 * else NULL. */
void kp_tev_record(struct kp_tev *t, const void *site, struct pt_regs *regs,
		   unsigned long ip, unsigned long ret_ip, const void *edata)
{
	struct kp_file_link *l;
	size_t head = t->is_return ? sizeof(struct kp_ret_entry_head)
				   : sizeof(struct kp_entry_head);
	/* The arguments' size: fixed, or measured once per hit, when first
	 * needed. */
	ssize_t size = t->fixed_args;

	/* The trace and perf buffers want preemption off in the counter too,
	 * not only interrupts (the kretprobe trampoline only masks them). With
	 * preemption off this is an RCU reader for t->files, as the kernel's
	 * kprobe events walk their links from the kprobe handler: no
	 * rcu_read_lock(), an out-of-line call each way on PREEMPT_RCU. */
	preempt_disable_notrace();
	list_for_each_entry_rcu(l, &t->files, list) {
		struct trace_event_file *file = l->file;
		struct trace_event_buffer fbuffer;
		void *entry;

		if (trace_trigger_soft_disabled(file))
			continue;
		if (size < 0)
			size = kp_ev_args_size(site, regs, edata);
		entry = trace_event_buffer_reserve(&fbuffer, file, head + size);
		if (!entry)
			continue;
		fbuffer.regs = regs;
		kp_fill_head(t, entry, ip, ret_ip);
		kp_ev_store_args(site, regs, edata, entry, head, size);
		trace_event_buffer_commit(&fbuffer);
	}
#ifdef CONFIG_PERF_EVENTS
	if (atomic_read(&t->perf_users))
		kp_tev_perf(t, site, regs, ip, ret_ip, edata, head, size);
#endif
	preempt_enable_notrace();
}
