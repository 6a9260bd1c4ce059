// SPDX-License-Identifier: GPL-2.0
/*
 * <tracefs>/dynamic_events for the engine's probe events (src/events/),
 * where the kernel has the file (CONFIG_DYNAMIC_EVENTS: uprobe, synthetic
 * or fprobe events bring it) but no kprobe events of its own: `p:`/`r:`
 * lines written there define events as on kprobe_events, `-:`/`!p:` lines
 * remove them, reading lists them among the other dynamic events, and
 * `echo > dynamic_events` removes them with the rest. As the kernel's
 * trace_kprobe does: a struct dyn_event_operations on the kernel's list
 * (dyn_event_register(), not exported: resolved at load), and a struct
 * dyn_event per site on dyn_event_list, under event_mutex.
 *
 * The kernel has no dyn_event_unregister(): at unload the operations leave
 * the list under dyn_event_ops_mutex (create() runs under it, so none is
 * running then), after which nothing reaches them; every site leaves
 * dyn_event_list before it is freed, under event_mutex, under which the
 * trace core calls the other operations.
 *
 * The kernel's private header (kernel/trace/trace_dynevent.h, via
 * -I$(srctree)/kernel/trace in Kbuild) gives the structs' layout.
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/seq_file.h>
#include "helpers.h"

/* Called from src/events/. */
bool kp_dyn_enabled(void);
void *kp_dyn_new(void *site);
void kp_dyn_add(void *d);
void kp_dyn_free(void *d);
int kp_dyn_init(void *register_fn, struct mutex *ops_mutex, struct list_head *list);
void kp_dyn_exit(void);

/* src/events.c. */
void kp_events_event_assert_held(void);

/* (Built against headers without kernel/trace/, e.g. a distribution's
 * headers package: no dynamic_events, said at load.) */
#if defined(CONFIG_DYNAMIC_EVENTS) && !defined(CONFIG_KPROBE_EVENTS) && \
	__has_include("trace_dynevent.h")
#include "trace_dynevent.h"

/* Implemented in src/events/dynevent.rs: `site` is the engine's. */
int kp_ev_dyn_create(const char *raw_command);
const char *kp_ev_dyn_def(void *site, size_t *len);
bool kp_ev_dyn_busy(void *site);
int kp_ev_dyn_free(void *site);
bool kp_ev_dyn_match(const char *system, const char *event, int argc,
		     const char **argv, void *site);

/* A site's entry on dyn_event_list. */
struct kp_dyn {
	struct dyn_event dev;
	void *site;
};

static void *site_of(struct dyn_event *ev)
{
	return container_of(ev, struct kp_dyn, dev)->site;
}

static int kp_dyn_create(const char *raw_command)
{
	return kp_ev_dyn_create(raw_command);
}

static int kp_dyn_show(struct seq_file *m, struct dyn_event *ev)
{
	size_t len;
	const char *def = kp_ev_dyn_def(site_of(ev), &len);

	seq_write(m, def, len);
	seq_putc(m, '\n');
	return 0;
}

static bool kp_dyn_is_busy(struct dyn_event *ev)
{
	return kp_ev_dyn_busy(site_of(ev));
}

static int kp_dyn_free_ev(struct dyn_event *ev)
{
	return kp_ev_dyn_free(site_of(ev));
}

static bool kp_dyn_match(const char *system, const char *event, int argc,
			 const char **argv, struct dyn_event *ev)
{
	return kp_ev_dyn_match(system, event, argc, argv, site_of(ev));
}

static struct dyn_event_operations kp_dyn_ops = {
	.create = kp_dyn_create,
	.show = kp_dyn_show,
	.is_busy = kp_dyn_is_busy,
	.free = kp_dyn_free_ev,
	.match = kp_dyn_match,
};

/* Resolved at load; kp_dyn_on once the operations are on the list. */
static struct mutex *kp_dyn_ops_mutex;
static struct list_head *kp_dyn_list;
static bool kp_dyn_on;

bool kp_dyn_enabled(void)
{
	return READ_ONCE(kp_dyn_on);
}

/* A site's entry, not on the list yet; NULL: no memory. */
void *kp_dyn_new(void *site)
{
	struct kp_dyn *d = kzalloc(sizeof(*d), GFP_KERNEL);

	if (d) {
		dyn_event_init(&d->dev, &kp_dyn_ops);
		d->site = site;
	}
	return d;
}

/* Lists a site (after the others, as dyn_event_add()). event_mutex held. */
void kp_dyn_add(void *p)
{
	struct kp_dyn *d = p;

	kp_events_event_assert_held();
	list_add_tail(&d->dev.list, kp_dyn_list);
}

/* Unlists (if listed) and frees a site's entry. event_mutex held. */
void kp_dyn_free(void *p)
{
	struct kp_dyn *d = p;

	if (!d)
		return;
	kp_events_event_assert_held();
	list_del_init(&d->dev.list);
	kfree(d);
}

KP_KCALL int kp_dyn_init(void *register_fn, struct mutex *ops_mutex, struct list_head *list)
{
	int ret;

	kp_dyn_ops_mutex = ops_mutex;
	kp_dyn_list = list;
	ret = KP_FN(dyn_event_register, register_fn)(&kp_dyn_ops);
	WRITE_ONCE(kp_dyn_on, !ret);
	return ret;
}

/* Before the events go (no new one can come through dynamic_events). */
void kp_dyn_exit(void)
{
	if (!READ_ONCE(kp_dyn_on))
		return;
	mutex_lock(kp_dyn_ops_mutex);
	list_del_init(&kp_dyn_ops.list);
	mutex_unlock(kp_dyn_ops_mutex);
	WRITE_ONCE(kp_dyn_on, false);
}

#else /* the kernel's kprobe events own dynamic_events' p: lines, or no file */

bool kp_dyn_enabled(void)
{
	return false;
}

void *kp_dyn_new(void *site)
{
	return NULL;
}

void kp_dyn_add(void *d)
{
}

void kp_dyn_free(void *d)
{
}

int kp_dyn_init(void *register_fn, struct mutex *ops_mutex, struct list_head *list)
{
	return -ENODEV;
}

void kp_dyn_exit(void)
{
}

#endif
