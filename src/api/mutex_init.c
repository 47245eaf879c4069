#include <errno.h>
#include <stdlib.h>

#include "core/internal.h"

static int
dmutex_init_impl(dmutex_t *m, const char *name, const dmutex_attr_t *attr)
{
	struct dmutex__mutex *mx;
	struct dmutex_client *c;
	size_t len;
	int err;

	if (!m)
		return EINVAL;
	if ((err = dmutex__name_ok(name, &len)))
		return err;
	if (attr && attr->__magic != DMUTEX__ATTR_MAGIC) {
		dmutex__log(DMUTEX_LOG_ERROR, "dmutex_init('%s'): attributes not initialized", name);
		return EINVAL;
	}
	c = attr ? attr->__client : NULL;
	if (!c && (err = dmutex__client_default(&c)))
		return err;
	if (attr && (attr->__flags & DMUTEX__ATTR_FAIR) && c->be->quorum) {
		/* Two masters could hand the lock to two different heads. */
		dmutex__log(DMUTEX_LOG_ERROR, "dmutex_init('%s'): a fair lock over Redlock is not supported",
				name);
		return ENOTSUP;
	}
	if (!(mx = calloc(1, sizeof *mx)))
		return ENOMEM;
	mx->fair = attr && (attr->__flags & DMUTEX__ATTR_FAIR);
	mx->cache = !attr || !(attr->__flags & DMUTEX__ATTR_NOCACHE);
	mx->type = attr ? attr->__type : DMUTEX_DEFAULT;
	mx->robust = attr ? attr->__robust : DMUTEX_STALLED;
	mx->lease_ms = dmutex__backend_lease(c->be, attr && attr->__lease_ms ? attr->__lease_ms
			: c->cfg.lease_ms);
	mx->onlost = attr ? attr->__onlost : NULL;
	mx->onlost_arg = attr ? attr->__onlost_arg : NULL;
	if ((err = dmutex__entry_get(c, name, &mx->entry))) {
		free(mx);
		return err;
	}
	__atomic_fetch_add(&c->mutexes, 1, __ATOMIC_ACQ_REL);
	m->__static_name = NULL;
	__atomic_store_n(&m->__impl, mx, __ATOMIC_RELEASE);
	__atomic_store_n(&m->__magic, DMUTEX__MAGIC_INIT, __ATOMIC_RELEASE);
	return 0;
}

int
dmutex_init(dmutex_t *m, const char *name, const dmutex_attr_t *attr)
{
	int cs = dmutex__nocancel(), err = dmutex_init_impl(m, name, attr);

	dmutex__cancel_restore(cs);
	return err;
}
