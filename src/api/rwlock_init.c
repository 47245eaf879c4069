/* drwlock_t: binding, creation, destruction, and the reader table. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/lockorder.h"
#include "core/bind.h"
#include "core/rwlock.h"

static int
open_rw(struct dmutex_client *c, const char *name, const dmutex_attr_t *attr,
		struct dmutex__rwlock **out)
{
	struct dmutex__rwlock *rx;
	int err;

	if (c->be->quorum) {
		dmutex__log(DMUTEX_LOG_ERROR, "rwlock '%s': a client over several masters cannot hold a rwlock",
				name);
		return ENOTSUP;
	}
	if (!(rx = calloc(1, sizeof *rx)))
		return ENOMEM;
	rx->lease_ms = dmutex__backend_lease(c->be, attr && attr->__lease_ms ? attr->__lease_ms
			: c->cfg.lease_ms);
	rx->onlost = attr ? attr->__onlost : NULL;
	rx->onlost_arg = attr ? attr->__onlost_arg : NULL;
	if ((err = dmutex__entry_get_kind(c, name, DMUTEX__KIND_RW, &rx->entry))) {
		free(rx);
		return err;
	}
	/* The client counts what points into it: not closed under a lock. */
	__atomic_fetch_add(&c->mutexes, 1, __ATOMIC_ACQ_REL);
	*out = rx;
	return 0;
}

static int
init_impl(drwlock_t *rw, const char *name, const dmutex_attr_t *attr)
{
	struct dmutex__rwlock *rx;
	struct dmutex_client *c;
	size_t len;
	int err;

	if (!rw)
		return EINVAL;
	if ((err = dmutex__name_ok(name, &len)))
		return err;
	if (attr && attr->__magic != DMUTEX__ATTR_MAGIC) {
		dmutex__log(DMUTEX_LOG_ERROR, "drwlock_init('%s'): attributes not initialized", name);
		return EINVAL;
	}
	if (attr && (attr->__type != DMUTEX_DEFAULT || attr->__robust != DMUTEX_STALLED)) {
		dmutex__log(DMUTEX_LOG_ERROR, "drwlock_init('%s'): a rwlock takes no mutex type and no robustness",
				name);
		return EINVAL;
	}
	c = attr ? attr->__client : NULL;
	if (!c && (err = dmutex__client_default(&c)))
		return err;
	if ((err = open_rw(c, name, attr, &rx)))
		return err;
	rw->__static_name = NULL;
	__atomic_store_n(&rw->__impl, rx, __ATOMIC_RELEASE);
	__atomic_store_n(&rw->__magic, DRWLOCK__MAGIC_INIT, __ATOMIC_RELEASE);
	return 0;
}

int
drwlock_init(drwlock_t *rw, const char *name, const dmutex_attr_t *attr)
{
	int cs = dmutex__nocancel(), err = init_impl(rw, name, attr);

	dmutex__cancel_restore(cs);
	return err;
}

static void
close_rw(void *obj)
{
	struct dmutex__rwlock *rx = obj;
	struct dmutex_client *c = rx->entry->client;

	dmutex__entry_put(rx->entry);
	__atomic_fetch_sub(&c->mutexes, 1, __ATOMIC_ACQ_REL);
	free(rx);
}

static int
open_static(struct dmutex_client *c, const char *name, size_t len, const void *h, int type, void **out)
{
	struct dmutex__rwlock *rx;
	int err;

	(void)len;
	(void)h;
	(void)type;
	if (!(err = open_rw(c, name, NULL, &rx)))
		*out = rx;
	return err;
}

static int
retire(void *obj)
{
	struct dmutex__rwlock *rx = obj;
	struct dmutex__entry *e = rx->entry;
	int busy;

	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	busy = e->held || e->acquiring || e->rw_wwait || e->ngone;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	if (busy)
		return EBUSY;
	/* The handler's argument may not outlive us: a release of an unlock
	 * that said EIO reports a hold it finds lost from now on by the log
	 * and the lost metric only, as a mutex's does. */
	dmutex__renewer_orphans_dismiss(e, rx->onlost, rx->onlost_arg);
	return 0;
}

static const struct dmutex__kind kind = {
	.what = "rwlock", .destroy_call = "drwlock_destroy",
	.init_magic = DRWLOCK__MAGIC_INIT, .static_magic = DRWLOCK__MAGIC_STATIC,
	.open_static = open_static, .retire = retire, .close = close_rw,
};

int
dmutex__rwlock_resolve(drwlock_t *rw, struct dmutex__rwlock **out)
{
	void *rx;
	int err = dmutex__resolve_handle(&kind, DMUTEX__HANDLE(rw, NULL), &rx);

	if (!err)
		*out = rx;
	return err;
}

int
drwlock_destroy(drwlock_t *rw)
{
	int cs = dmutex__nocancel(), err = dmutex__destroy_object(&kind, DMUTEX__HANDLE(rw, NULL));

	dmutex__cancel_restore(cs);
	return err;
}

struct dmutex__reader *
dmutex__rw_reader(struct dmutex__entry *e, pthread_t self)
{
	if (!e->held || e->rw_write)
		return NULL;
	for (size_t i = 0; i < e->nreaders; i++)
		if (pthread_equal(e->readers[i].thread, self))
			return &e->readers[i];
	return NULL;
}

void
dmutex__rw_reader_drop(struct dmutex__entry *e, struct dmutex__reader *r)
{
	*r = e->readers[--e->nreaders];
}

struct dmutex__reader *
dmutex__rw_gone_reader(struct dmutex__entry *e, pthread_t self)
{
	for (size_t i = 0; i < e->ngone; i++)
		if (pthread_equal(e->rw_gone[i].thread, self))
			return &e->rw_gone[i];
	return NULL;
}

void
dmutex__rw_gone_drop(struct dmutex__entry *e, struct dmutex__reader *r)
{
	*r = e->rw_gone[--e->ngone];
	if (!e->ngone)
		dmutex__entry_wake(e);
}
