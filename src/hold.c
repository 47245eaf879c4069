/* Per-process lock records: one entry per (client, name), shared by every
 * dmutex_t of that name, holding the current hold's token, depth, fence,
 * deadline and lost flag. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "shim/name.h"

int
dmutex__name_ok(const char *name, size_t *len)
{
	size_t n;

	if (!name) {
		dmutex__log(DMUTEX_LOG_ERROR, "lock name is NULL");
		return EINVAL;
	}
	n = strnlen(name, DMUTEX_NAME_MAX + 1);
	if (n == 0 || n > DMUTEX_NAME_MAX) {
		dmutex__log(DMUTEX_LOG_ERROR, "lock name must be 1 to %d bytes (got %s)",
				DMUTEX_NAME_MAX, n ? "more" : "an empty one");
		return EINVAL;
	}
	*len = n;
	return 0;
}

static size_t
hash(const char *s)
{
	size_t h = 1469598103934665603ULL & (size_t)-1;
	while (*s)
		h = (h ^ (unsigned char)*s++) * (size_t)1099511628211ULL;
	return h;
}

static int
grow(struct dmutex_client *c)
{
	size_t ns = c->tab_size ? c->tab_size * 2 : 64;
	struct dmutex__entry **nt = calloc(ns, sizeof *nt);

	if (!nt)
		return ENOMEM;
	for (size_t i = 0; i < c->tab_size; i++) {
		struct dmutex__entry *e = c->tab[i], *next;
		for (; e; e = next) {
			next = e->next;
			e->next = nt[hash(e->name) & (ns - 1)];
			nt[hash(e->name) & (ns - 1)] = e;
		}
	}
	free(c->tab);
	c->tab = nt;
	c->tab_size = ns;
	return 0;
}

void
dmutex__entry_init_sync(struct dmutex__entry *e)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&e->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e->cv, &ca);
	pthread_condattr_destroy(&ca);
}

int
dmutex__entry_get(struct dmutex_client *c, const char *name, struct dmutex__entry **out)
{
	struct dmutex__entry *e;
	size_t len = strlen(name);

	pthread_mutex_lock(&c->mu);
	if (c->tab_size) {
		for (e = c->tab[hash(name) & (c->tab_size - 1)]; e; e = e->next)
			if (e->name_len == len && !memcmp(e->name, name, len)) {
				__atomic_fetch_add(&e->refs, 1, __ATOMIC_ACQ_REL);
				pthread_mutex_unlock(&c->mu);
				*out = e;
				return 0;
			}
	}
	if ((c->n_entries + 1) * 2 > c->tab_size && grow(c)) {
		pthread_mutex_unlock(&c->mu);
		return ENOMEM;
	}
	if (!(e = calloc(1, sizeof *e + len + 1))) {
		pthread_mutex_unlock(&c->mu);
		return ENOMEM;
	}
	e->client = c;
	e->refs = 1;
	e->name_len = len;
	memcpy(e->name, name, len + 1);
	dmutex__entry_init_sync(e);
	e->next = c->tab[hash(name) & (c->tab_size - 1)];
	c->tab[hash(name) & (c->tab_size - 1)] = e;
	c->n_entries++;
	pthread_mutex_unlock(&c->mu);
	*out = e;
	return 0;
}

void
dmutex__entry_put(struct dmutex__entry *e)
{
	struct dmutex_client *c = e->client;
	struct dmutex__entry **pp;

	pthread_mutex_lock(&c->mu);
	/* Atomic: the renewer takes refs under its own lock, not ours. */
	if (__atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL)) {
		pthread_mutex_unlock(&c->mu);
		return;
	}
	for (pp = &c->tab[hash(e->name) & (c->tab_size - 1)]; *pp != e; pp = &(*pp)->next)
		;
	*pp = e->next;
	c->n_entries--;
	pthread_mutex_unlock(&c->mu);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->cv);
	free(e);
}

void
dmutex__entry_mark_lost(struct dmutex__entry *e)
{
	e->lost = 1;
}

void
dmutex__entry_check_lost(struct dmutex__entry *e, int64_t now, struct dmutex__lost *out)
{
	out->report = 0;
	if (!e->held)
		return;
	if (now >= e->deadline_ns)
		e->lost = 1;
	if (!e->lost || e->lost_reported)
		return;
	e->lost_reported = 1;
	out->report = 1;
	out->fence = e->fence;
	out->cb = e->onlost;
	out->arg = e->onlost_arg;
}

void
dmutex__lost_report(const struct dmutex__entry *e, const struct dmutex__lost *l)
{
	if (!l->report)
		return;
	/* Outside e->mu: a user's logger or handler may call into us. */
	dmutex__log(DMUTEX_LOG_WARN, "lost the hold of '%s' (fence %llu)", e->name,
			(unsigned long long)l->fence);
	if (l->cb)
		l->cb(e->name, l->arg);
}

void
dmutex__entry_forget(struct dmutex__entry *e)
{
	if (e->held)
		__atomic_fetch_sub(&e->client->held, 1, __ATOMIC_ACQ_REL);
	e->held = 0;
	e->depth = 0;
	e->releasing = 0;
	e->lost = 0;
	e->lost_reported = 0;
	e->inconsistent = 0;
	e->gen++;
	memset(e->token, 0, sizeof e->token);
	pthread_cond_broadcast(&e->cv);
}

/* Bind a statically initialized mutex to the default client on first use. */
static int
bind_static(dmutex_t *m, struct dmutex__mutex **out)
{
	struct dmutex__mutex *mx, *expected = NULL;
	struct dmutex_client *c;
	const char *name = m->__static_name;
	char shim_name[DMUTEX_NAME_MAX + 1];
	int type = DMUTEX_DEFAULT, err;
	size_t len;

	/* A pthread shim initializer names its definition site and carries
	 * the type; the namespace is added now (shim_name.c). */
	if (m->__reserved[0] == DMUTEX__SHIM_SITE) {
		if ((err = dmutex__shim_static_name(DMUTEX__SHIM_MUTEX, m, name, shim_name)))
			return err;
		name = shim_name;
		type = (int)(uintptr_t)m->__reserved[1];
	}
	if ((err = dmutex__name_ok(name, &len)))
		return err;
	if ((err = dmutex__client_default(&c)))
		return err;
	if (!(mx = calloc(1, sizeof *mx)))
		return ENOMEM;
	mx->type = type;
	mx->robust = DMUTEX_STALLED;
	mx->lease_ms = c->cfg.lease_ms;
	if ((err = dmutex__entry_get(c, name, &mx->entry))) {
		free(mx);
		return err;
	}
	if (!__atomic_compare_exchange_n(&m->__impl, (void **)&expected, mx, 0,
			__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		/* Another thread bound it first. */
		dmutex__entry_put(mx->entry);
		free(mx);
		mx = expected;
	} else {
		__atomic_fetch_add(&c->mutexes, 1, __ATOMIC_ACQ_REL);
	}
	*out = mx;
	return 0;
}

int
dmutex__resolve_object(const void *obj, unsigned long *magic_p, void **impl_p,
		unsigned long init_magic, unsigned long static_magic, const char *what, void **out)
{
	unsigned long magic;

	if (!obj)
		return EINVAL;
	magic = __atomic_load_n(magic_p, __ATOMIC_ACQUIRE);
	if (magic != init_magic && magic != static_magic) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s %p is %s", what, obj,
				magic == DMUTEX__MAGIC_DESTROYED ? "destroyed" : "not initialized");
		return EINVAL;
	}
	if ((*out = __atomic_load_n(impl_p, __ATOMIC_ACQUIRE)))
		return 0;
	return magic == init_magic ? EINVAL : DMUTEX__UNBOUND;
}

int
dmutex__resolve(dmutex_t *m, struct dmutex__mutex **out)
{
	void *mx;
	int err = dmutex__resolve_object(m, m ? &m->__magic : NULL, m ? &m->__impl : NULL,
			DMUTEX__MAGIC_INIT, DMUTEX__MAGIC_STATIC, "mutex", &mx);

	if (err == DMUTEX__UNBOUND)
		return bind_static(m, out);
	if (!err)
		*out = mx;
	return err;
}
