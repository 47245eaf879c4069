/*
 * Binding: from a handle (dmutex_t, dcond_t, ...: bind.h) to its private object and, for a
 * static initializer, to the default client on first use.  This sits above
 * client.c and hold.c and calls both; neither calls back (internal.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "bind.h"
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

/* Bind a statically initialized handle to the default client on first use. */
static int
bind_static(const struct dmutex__kind *k, struct dmutex__handle h, void **out)
{
	const char *name = h.static_name;
	char buf[DMUTEX_NAME_MAX + 1];
	struct dmutex_client *c;
	void *obj, *expected = NULL;
	int type = DMUTEX_DEFAULT, err;
	size_t len;

	/* A layer's initializer is named by that layer (static_name.h). */
	if ((err = dmutex__static_name(k->static_kind, h.h, h.tag, &name, buf, &type)))
		return err;
	if ((err = dmutex__name_ok(name, &len)))
		return err;
	if (k->static_ok && (err = k->static_ok(h.h, name)))
		return err;
	if ((err = dmutex__client_default(&c)))
		return err;
	if ((err = k->open_static(c, name, len, h.h, type, &obj)))
		return err;
	if (!__atomic_compare_exchange_n(h.impl, &expected, obj, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		/* Another thread bound it first. */
		k->close(obj);
		obj = expected;
	}
	*out = obj;
	return 0;
}

int
dmutex__resolve_handle(const struct dmutex__kind *k, struct dmutex__handle h, void **out)
{
	int err = dmutex__resolve_object(h.h, h.magic, h.impl, k->init_magic, k->static_magic, k->what, out);

	return err == DMUTEX__UNBOUND ? bind_static(k, h, out) : err;
}

int
dmutex__destroy_object(const struct dmutex__kind *k, struct dmutex__handle h)
{
	unsigned long magic;
	void *obj;
	int err;

	if (!h.h)
		return EINVAL;
	magic = __atomic_load_n(h.magic, __ATOMIC_ACQUIRE);
	if (magic != k->init_magic && magic != k->static_magic) {
		if (k->destroy_call)
			dmutex__log(DMUTEX_LOG_ERROR, "%s: %s %p is %s", k->destroy_call, k->what, h.h,
					magic == DMUTEX__MAGIC_DESTROYED ? "destroyed" : "not initialized");
		return EINVAL;
	}
	if ((obj = __atomic_load_n(h.impl, __ATOMIC_ACQUIRE))) {
		if (k->retire && (err = k->retire(obj)))
			return err;
		k->close(obj);
	}
	__atomic_store_n(h.impl, NULL, __ATOMIC_RELEASE);
	__atomic_store_n(h.magic, DMUTEX__MAGIC_DESTROYED, __ATOMIC_RELEASE);
	return 0;
}
