/*
 * Binding: from a dmutex_t (or a dcond_t) to its private object and, for a
 * static initializer, to the default client on first use.  This sits above
 * client.c and hold.c and calls both; neither calls back (internal.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "static_name.h"

static dmutex__static_namer *namer;

void
dmutex__set_static_namer(dmutex__static_namer *fn)
{
	__atomic_store_n(&namer, fn, __ATOMIC_RELEASE);
}

int
dmutex__static_name(int kind, const void *obj, const void *tag, const char **name,
		char buf[DMUTEX_NAME_MAX + 1], int *type)
{
	dmutex__static_namer *fn;
	int err;

	if (!tag)
		return 0;
	if (!(fn = __atomic_load_n(&namer, __ATOMIC_ACQUIRE))) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s %p has a static initializer of a layer that is not linked",
				kind == DMUTEX__STATIC_MUTEX ? "mutex" : "condition variable", obj);
		return EINVAL;
	}
	if (!(err = fn(kind, obj, buf, type)))
		*name = buf;
	return err;
}

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

/* Bind a statically initialized mutex to the default client on first use. */
static int
bind_static(dmutex_t *m, struct dmutex__mutex **out)
{
	struct dmutex__mutex *mx, *expected = NULL;
	struct dmutex_client *c;
	const char *name = m->__static_name;
	char buf[DMUTEX_NAME_MAX + 1];
	int type = DMUTEX_DEFAULT, err;
	size_t len;

	/* A layer's initializer is named by that layer (static_name.h). */
	if ((err = dmutex__static_name(DMUTEX__STATIC_MUTEX, m, m->__reserved[0], &name, buf, &type)))
		return err;
	if ((err = dmutex__name_ok(name, &len)))
		return err;
	if ((err = dmutex__client_default(&c)))
		return err;
	if (!(mx = calloc(1, sizeof *mx)))
		return ENOMEM;
	mx->type = type;
	mx->robust = DMUTEX_STALLED;
	mx->lease_ms = c->cfg.lease_ms;
	mx->cache = 1;
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

struct dmutex__mutex *
dmutex__resolve_bound(dmutex_t *m)
{
	unsigned long magic;

	if (!m)
		return NULL;
	magic = __atomic_load_n(&m->__magic, __ATOMIC_ACQUIRE);
	if (magic != DMUTEX__MAGIC_INIT && magic != DMUTEX__MAGIC_STATIC)
		return NULL;
	return __atomic_load_n(&m->__impl, __ATOMIC_ACQUIRE);
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
