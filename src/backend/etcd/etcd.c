/*
 * The etcd backend's table (etcd.h): made from the URL, checked at open,
 * kept across fork, and the few operations with nothing etcd-specific to
 * say.  Per-lock counters are not stored in etcd (each would be a write
 * through its Raft log): counters_* accept and drop them, so `dmutex
 * status` shows no counts for an etcd lock (README "etcd").
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/etcd/etcd.h"
/* The other primitives' operations (cond.c rw.c sem.c barrier.c), each
 * set of the table given by a macro. */
#include "backend/etcd/prims.h"
#include "base/log.h"

static int
etcd_verify(struct dmutex__backend *be, size_t *up, size_t *need)
{
	int err = dmutex__etcd_verify(dmutex__etcd_of(be)->http, be->cfg.prefix);

	*need = 1;
	*up = !err;
	return err;
}

static void
etcd_why(struct dmutex__backend *be, char *out, size_t len)
{
	dmutex__etcd_why(dmutex__etcd_of(be)->http, out, len);
}

static void
etcd_destroy(struct dmutex__backend *be)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);

	dmutex__etcd_wake_stop(be);
	/* Our keys go now, not a lease later (a client closes with no hold). */
	dmutex__etcd_lease_revoke_all(e);
	dmutex__etcd_http_free(e->http);
	pthread_mutex_destroy(&e->grant_mu);
	pthread_mutex_destroy(&e->mu);
	pthread_mutex_destroy(&e->watch_mu);
	free(e->leases);
	for (size_t i = 0; i < e->nseconds; i++) {
		free(e->seconds[i].head);
		free(e->seconds[i].own);
	}
	for (size_t i = 0; i < DMUTEX__ETCD_SLOT_BUCKETS; i++)
		while (e->slots[i]) {
			struct dmutex__etcd_slot *s = e->slots[i];
			e->slots[i] = s->next;
			free(s);
		}
	free(e->free_slots);
	free(e->seconds);
	free(e->gone);
	free(e->robust.v);
	free(e->queued.v);
	free(e);
}

static void
etcd_atfork_prepare(struct dmutex__backend *be)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);

	pthread_mutex_lock(&e->grant_mu);
	pthread_mutex_lock(&e->mu);
	dmutex__etcd_http_lock(e->http);
}

static void
etcd_atfork_parent(struct dmutex__backend *be)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);

	dmutex__etcd_http_unlock(e->http);
	pthread_mutex_unlock(&e->mu);
	pthread_mutex_unlock(&e->grant_mu);
}

/* The child keeps no lease of its parent's (its holds are its own) and
 * no connection. */
static void
etcd_atfork_child(struct dmutex__backend *be)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);

	pthread_mutex_init(&e->grant_mu, NULL);
	pthread_mutex_init(&e->mu, NULL);
	dmutex__etcd_http_atfork_child(e->http);
	for (size_t i = 0; i < e->nleases; i++)
		e->leases[i].id = 0;
}

static int
etcd_counters_add(struct dmutex__backend *be, const struct dmutex__count *v, size_t n,
		int *multi_ok, int64_t until)
{
	(void)be, (void)v, (void)n, (void)multi_ok, (void)until;
	return DMUTEX__CNT_SENT;
}

static int
etcd_counters_trim(struct dmutex__backend *be, size_t max, int64_t until)
{
	(void)be, (void)max, (void)until;
	return 0;
}

static int
etcd_counters_adopt(struct dmutex__backend *be, unsigned long long *cursor, size_t max,
		int64_t until)
{
	(void)be, (void)cursor, (void)max, (void)until;
	return 0;
}

static const struct dmutex__backend_ops etcd_ops = {
	.acquire = dmutex__etcd_acquire,
	.release = dmutex__etcd_release,
	/* release_to, release_async, cache, fence: NULL (the face's
	 * synchronous paths; acquire always assigns the fence). */
	.renew = dmutex__etcd_renew,
	.channel = dmutex__etcd_channel,
	.atfork_child = etcd_atfork_child,
	.destroy = etcd_destroy,
	.verify = etcd_verify,
	.atfork_prepare = etcd_atfork_prepare,
	.atfork_parent = etcd_atfork_parent,
	DMUTEX__ETCD_WAKE_OPS,
	DMUTEX__ETCD_COND_OPS,
	DMUTEX__ETCD_RW_OPS,
	DMUTEX__ETCD_SEM_OPS,
	DMUTEX__ETCD_BARRIER_OPS,
	.counters_add = etcd_counters_add,
	.counters_trim = etcd_counters_trim,
	.counters_adopt = etcd_counters_adopt,
	.why = etcd_why,
	.lease = dmutex__etcd_lease,
	.inspect = dmutex__etcd_inspect,
	.names = dmutex__etcd_names,
	.reset = dmutex__etcd_reset,
	.rw_inspect = dmutex__etcd_rw_inspect,
	.rw_names = dmutex__etcd_rw_names,
	.rw_reset = dmutex__etcd_rw_reset,
};

int
dmutex__backend_etcd_create(const struct dmutex__backend_cfg *cfg, struct dmutex__backend **out)
{
	struct dmutex__etcd *e = calloc(1, sizeof *e);
	int err;

	if (!e)
		return ENOMEM;
	if ((err = dmutex__etcd_http_new(&cfg->nodes[0], cfg->connect_timeout_ms,
			cfg->command_timeout_ms, &e->http))) {
		free(e);
		return err;
	}
	pthread_mutex_init(&e->grant_mu, NULL);
	pthread_mutex_init(&e->mu, NULL);
	pthread_mutex_init(&e->watch_mu, NULL);
	e->base.ops = &etcd_ops;
	e->base.cfg = *cfg;
	*out = &e->base;
	return 0;
}
