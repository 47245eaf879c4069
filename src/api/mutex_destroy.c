#include <errno.h>
#include <stdlib.h>

#include "core/internal.h"
#include "base/lockorder.h"

static int
dmutex_destroy_impl(dmutex_t *m)
{
	struct dmutex__mutex *mx;
	struct dmutex__entry *e;
	unsigned long magic;
	int busy;

	if (!m)
		return EINVAL;
	magic = __atomic_load_n(&m->__magic, __ATOMIC_ACQUIRE);
	if (magic != DMUTEX__MAGIC_INIT && magic != DMUTEX__MAGIC_STATIC)
		return EINVAL;
	mx = __atomic_load_n((struct dmutex__mutex **)&m->__impl, __ATOMIC_ACQUIRE);
	if (mx) {
		e = mx->entry;
		/* The answer to the last unlock's release, if still to come
		 * (bounded by a command timeout): a program that destroys its
		 * mutexes before it exits leaves nothing held even if that
		 * connection broke, and still hears an onlost. */
		dmutex__rel_settle_now(e);
		dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
		/* The renewer giving back an idle kept lease is the library's
		 * business, bounded by a command timeout: an unlocked mutex is
		 * not busy because of it (seen as EBUSY from a torture worker's
		 * destroy right after its last unlock). */
		while (e->dropping)
			pthread_cond_wait(&e->cv, &e->mu);
		busy = e->held || e->acquiring;
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		if (busy)
			return EBUSY;
		/* A lease kept for the process (lease_cache.c) goes back now: the
		 * renewer must not keep an entry that is about to be freed. */
		dmutex__renewer_give_back(e, dmutex__now_ns() +
				(int64_t)e->client->cfg.command_timeout_ms * DMUTEX__MS);
		__atomic_fetch_sub(&e->client->mutexes, 1, __ATOMIC_ACQ_REL);
		dmutex__entry_put(e);
		free(mx);
	}
	__atomic_store_n(&m->__impl, NULL, __ATOMIC_RELEASE);
	__atomic_store_n(&m->__magic, DMUTEX__MAGIC_DESTROYED, __ATOMIC_RELEASE);
	return 0;
}

int
dmutex_destroy(dmutex_t *m)
{
	int cs = dmutex__nocancel(), err = dmutex_destroy_impl(m);

	dmutex__cancel_restore(cs);
	return err;
}
