#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/bind.h"
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
	cx->users = 1;
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

static int
open_static(struct dmutex_client *c, const char *name, size_t len, const void *h, int type, void **out)
{
	(void)h;
	(void)type;
	return (*out = make(c, name, len, CLOCK_REALTIME)) ? 0 : ENOMEM;
}

static int
retire(void *obj)
{
	struct dmutex__cond *cx = obj;

	return __atomic_load_n(&cx->waiters, __ATOMIC_ACQUIRE) ? EBUSY : 0;
}

void
dmutex__cond_put(struct dmutex__cond *cx)
{
	if (!dmutex__obj_drop(&cx->users))
		return;
	__atomic_fetch_sub(&cx->client->mutexes, 1, __ATOMIC_ACQ_REL);
	free(cx);
}

static void
close_cond(void *obj)
{
	dmutex__cond_put(obj);
}

const struct dmutex__kind dmutex__cond_kind = {
	.what = "condition variable", .destroy_call = "dcond_destroy",
	.init_magic = DCOND__MAGIC_INIT, .static_magic = DCOND__MAGIC_STATIC,
	.static_kind = DMUTEX__STATIC_COND, .open_static = open_static, .retire = retire,
	.close = close_cond,
};

int
dmutex__cond_resolve(dcond_t *c, struct dmutex__cond **out)
{
	void *cx;
	int err = dmutex__resolve_handle(&dmutex__cond_kind, DMUTEX__HANDLE(c, c ? c->__reserved[0] : NULL), &cx);

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
