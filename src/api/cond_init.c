#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cond.h"
#include "core/static_name.h"

static struct dmutex__cond *
make(struct dmutex_client *c, const char *name, size_t len, clockid_t clock)
{
	struct dmutex__cond *cx = calloc(1, sizeof *cx + len + 1);

	if (!cx)
		return NULL;
	cx->client = c;
	cx->clock = clock;
	memcpy(cx->name, name, len + 1);
	/* The client counts what points into it, so that it is not closed
	 * under a condition variable. */
	__atomic_fetch_add(&c->mutexes, 1, __ATOMIC_ACQ_REL);
	return cx;
}

static int
dcond_init_impl(dcond_t *c, const char *name, const dcond_attr_t *attr)
{
	struct dmutex__cond *cx;
	struct dmutex_client *cl;
	size_t len;
	int err;

	if (!c)
		return EINVAL;
	if ((err = dmutex__name_ok(name, &len)))
		return err;
	if (attr && attr->__magic != DCOND__ATTR_MAGIC) {
		dmutex__log(DMUTEX_LOG_ERROR, "dcond_init('%s'): attributes not initialized", name);
		return EINVAL;
	}
	cl = attr ? attr->__client : NULL;
	if (!cl && (err = dmutex__client_default(&cl)))
		return err;
	if (!(cx = make(cl, name, len, attr ? attr->__clock : CLOCK_REALTIME)))
		return ENOMEM;
	c->__static_name = NULL;
	__atomic_store_n(&c->__impl, cx, __ATOMIC_RELEASE);
	__atomic_store_n(&c->__magic, DCOND__MAGIC_INIT, __ATOMIC_RELEASE);
	return 0;
}

/* Bind a statically initialized condition variable on first use. */
static int
bind_static(dcond_t *c, struct dmutex__cond **out)
{
	struct dmutex__cond *cx, *expected = NULL;
	struct dmutex_client *cl;
	const char *name = c->__static_name;
	char buf[DMUTEX_NAME_MAX + 1];
	size_t len;
	int type, err;

	/* A layer's initializer is named by that layer (static_name.h). */
	if ((err = dmutex__static_name(DMUTEX__STATIC_COND, c, c->__reserved[0], &name, buf, &type)))
		return err;
	if ((err = dmutex__name_ok(name, &len)))
		return err;
	if ((err = dmutex__client_default(&cl)))
		return err;
	if (!(cx = make(cl, name, len, CLOCK_REALTIME)))
		return ENOMEM;
	if (!__atomic_compare_exchange_n(&c->__impl, (void **)&expected, cx, 0,
			__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		/* Another thread bound it first. */
		__atomic_fetch_sub(&cl->mutexes, 1, __ATOMIC_ACQ_REL);
		free(cx);
		cx = expected;
	}
	*out = cx;
	return 0;
}

int
dmutex__cond_resolve(dcond_t *c, struct dmutex__cond **out)
{
	void *cx;
	int err = dmutex__resolve_object(c, c ? &c->__magic : NULL, c ? &c->__impl : NULL,
			DCOND__MAGIC_INIT, DCOND__MAGIC_STATIC, "condition variable", &cx);

	if (err == DMUTEX__UNBOUND)
		return bind_static(c, out);
	if (!err)
		*out = cx;
	return err;
}

int
dcond_init(dcond_t *c, const char *name, const dcond_attr_t *attr)
{
	int cs = dmutex__nocancel(), err = dcond_init_impl(c, name, attr);

	dmutex__cancel_restore(cs);
	return err;
}
