/*
 * A dmutex_t's object (struct dmutex__mutex) as a kind of handle (bind.h):
 * its static binding, its destruction, its resolution.
 */
#include <errno.h>
#include <stdlib.h>

#include "base/lockorder.h"
#include "core/bind.h"
#include "core/internal.h"
#include "core/static_name.h"

static int
open_static(struct dmutex_client *c, const char *name, size_t len, const void *h, int type, void **out)
{
	struct dmutex__mutex *mx;
	int err;

	(void)len;
	(void)h;
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
	/* The client counts what points into it: not closed under a mutex. */
	__atomic_fetch_add(&c->mutexes, 1, __ATOMIC_ACQ_REL);
	*out = mx;
	return 0;
}

static int
retire(void *obj)
{
	struct dmutex__mutex *mx = obj;
	struct dmutex__entry *e = mx->entry;
	int busy;

	/* The answer to the last unlock's release, if still to come (bounded
	 * by a command timeout): a program that destroys its mutexes before
	 * it exits leaves nothing held even if that connection broke, and
	 * still hears an onlost. */
	dmutex__rel_settle_now(e);
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	/* The renewer giving back an idle kept lease is the library's
	 * business, bounded by a command timeout: an unlocked mutex is not
	 * busy because of it (seen as EBUSY from a torture worker's destroy
	 * right after its last unlock). */
	while (e->dropping)
		pthread_cond_wait(&e->cv, &e->mu);
	busy = e->held || e->acquiring;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	if (busy)
		return EBUSY;
	/* The handler's argument may not outlive us: an orphan of an unlock
	 * that said EIO reports a hold it finds lost from now on by the log
	 * and the lost metric only (README "When the report comes"). */
	dmutex__renewer_orphans_dismiss(e, mx->onlost, mx->onlost_arg);
	/* A lease kept for the process (lease_cache.c) goes back now: the
	 * renewer must not keep an entry that is about to be freed. */
	dmutex__renewer_give_back(e, dmutex__now_ns() +
			(int64_t)e->client->cfg.command_timeout_ms * DMUTEX__MS);
	return 0;
}

static void
close_mutex(void *obj)
{
	struct dmutex__mutex *mx = obj;
	struct dmutex__entry *e = mx->entry;

	__atomic_fetch_sub(&e->client->mutexes, 1, __ATOMIC_ACQ_REL);
	dmutex__entry_put(e);
	free(mx);
}

/* Silent at destroy (no destroy_call), as dmutex_destroy always was. */
const struct dmutex__kind dmutex__mutex_kind = {
	.what = "mutex", .init_magic = DMUTEX__MAGIC_INIT, .static_magic = DMUTEX__MAGIC_STATIC,
	.static_kind = DMUTEX__STATIC_MUTEX, .open_static = open_static, .retire = retire,
	.close = close_mutex,
};

int
dmutex__resolve(dmutex_t *m, struct dmutex__mutex **out)
{
	void *mx;
	int err = dmutex__resolve_handle(&dmutex__mutex_kind, DMUTEX__HANDLE(m, m ? m->__reserved[0] : NULL), &mx);

	if (!err)
		*out = mx;
	return err;
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
