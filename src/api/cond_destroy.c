#include <errno.h>
#include <stdlib.h>

#include "core/cond.h"

static int
dcond_destroy_impl(dcond_t *c)
{
	struct dmutex__cond *cx;
	unsigned long magic;

	if (!c)
		return EINVAL;
	magic = __atomic_load_n(&c->__magic, __ATOMIC_ACQUIRE);
	if (magic != DCOND__MAGIC_INIT && magic != DCOND__MAGIC_STATIC) {
		dmutex__log(DMUTEX_LOG_ERROR, "dcond_destroy: condition variable %p is %s", (void *)c,
				magic == DMUTEX__MAGIC_DESTROYED ? "destroyed" : "not initialized");
		return EINVAL;
	}
	if ((cx = __atomic_load_n((struct dmutex__cond **)&c->__impl, __ATOMIC_ACQUIRE))) {
		if (__atomic_load_n(&cx->waiters, __ATOMIC_ACQUIRE))
			return EBUSY;
		__atomic_fetch_sub(&cx->client->mutexes, 1, __ATOMIC_ACQ_REL);
		free(cx);
	}
	__atomic_store_n(&c->__impl, NULL, __ATOMIC_RELEASE);
	__atomic_store_n(&c->__magic, DMUTEX__MAGIC_DESTROYED, __ATOMIC_RELEASE);
	return 0;
}

int
dcond_destroy(dcond_t *c)
{
	int cs = dmutex__nocancel(), err = dcond_destroy_impl(c);

	dmutex__cancel_restore(cs);
	return err;
}
