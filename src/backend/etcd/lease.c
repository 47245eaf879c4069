/*
 * The shared leases (etcd.h): holds of one lease length share one etcd
 * lease, so that 10,000 holds cost one keep-alive a renewal, not 10,000.
 * A key put on the lease must outlive the hold the core counts from the
 * request's send time: the lease's TTL is the hold's lease plus a second,
 * and a lease whose last keep-alive went out more than TTL - lease ago is
 * kept alive before a hold is put on it.
 */
#include <errno.h>
#include <stdlib.h>

#include "backend/etcd/etcd.h"
#include "base/log.h"

/* etcd's smallest TTL with its default election timeout (1 s): 2 s. */
#define TTL_MIN_S 2

static int64_t
ttl_for(unsigned lease_ms)
{
	int64_t s = ((int64_t)lease_ms + 999) / 1000 + 1;

	return s < TTL_MIN_S ? TTL_MIN_S : s;
}

unsigned
dmutex__etcd_lease(struct dmutex__backend *be, unsigned lease_ms)
{
	static int said;
	unsigned s = (lease_ms + 999) / 1000, granted = (s < TTL_MIN_S ? TTL_MIN_S : s) * 1000;

	(void)be;
	if (granted != lease_ms && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		dmutex__log(DMUTEX_LOG_INFO, "etcd grants leases in whole seconds, %d s at least: "
				"a %u ms lease is %u ms (dmutex_getlease reports it)", TTL_MIN_S,
				lease_ms, granted);
	return granted;
}

/* Under mu: the slot of lease_ms, made if missing (NULL on ENOMEM). */
static struct dmutex__etcd_lease *
slot(struct dmutex__etcd *e, unsigned lease_ms)
{
	struct dmutex__etcd_lease *l;

	for (size_t i = 0; i < e->nleases; i++)
		if (e->leases[i].lease_ms == lease_ms)
			return &e->leases[i];
	if (!(l = realloc(e->leases, (e->nleases + 1) * sizeof *l)))
		return NULL;
	e->leases = l;
	l = &e->leases[e->nleases++];
	*l = (struct dmutex__etcd_lease){ .lease_ms = lease_ms };
	return l;
}

/* The lease's id if a key put on it now outlives lease_ms, else 0. */
static int64_t
usable(struct dmutex__etcd *e, unsigned lease_ms, int64_t now)
{
	struct dmutex__etcd_lease *l;
	int64_t id = 0;

	pthread_mutex_lock(&e->mu);
	if ((l = slot(e, lease_ms)) && l->id
			&& now - l->fresh_ns < (l->ttl_s * 1000 - (int64_t)lease_ms) * DMUTEX__MS)
		id = l->id;
	pthread_mutex_unlock(&e->mu);
	return id;
}

static void
record(struct dmutex__etcd *e, unsigned lease_ms, int64_t id, int64_t ttl_s, int64_t sent)
{
	struct dmutex__etcd_lease *l;

	pthread_mutex_lock(&e->mu);
	if ((l = slot(e, lease_ms))) {
		l->id = id;
		l->ttl_s = ttl_s;
		l->fresh_ns = sent;
	}
	pthread_mutex_unlock(&e->mu);
}

static int64_t
current(struct dmutex__etcd *e, unsigned lease_ms)
{
	struct dmutex__etcd_lease *l;
	int64_t id;

	pthread_mutex_lock(&e->mu);
	id = (l = slot(e, lease_ms)) ? l->id : 0;
	pthread_mutex_unlock(&e->mu);
	return id;
}

/* One keep-alive of id: 1 alive (recorded), 0 expired, -1 no answer. */
static int
keepalive(struct dmutex__etcd *e, unsigned lease_ms, int64_t id, int64_t deadline)
{
	json_t *req = json_pack("{s:I}", "ID", (json_int_t)id), *rep = NULL, *res;
	int64_t sent = dmutex__now_ns(), ttl;
	int bad = 0, err;

	if (!req)
		return -1;
	err = dmutex__etcd_call(e->http, "/v3/lease/keepalive", req, &rep, deadline, NULL, NULL);
	json_decref(req);
	if (err)
		return -1;
	res = json_object_get(rep, "result");
	ttl = dmutex__etcd_int(res, "TTL", &bad);
	if (!json_is_object(res) || bad || dmutex__etcd_int(res, "ID", &bad) != id) {
		dmutex__log(DMUTEX_LOG_ERROR, "etcd: unexpected reply to /v3/lease/keepalive");
		json_decref(rep);
		return -1;
	}
	json_decref(rep);
	if (ttl <= 0) {
		dmutex__etcd_lease_forget(e, id);
		return 0;
	}
	record(e, lease_ms, id, ttl, sent);
	return 1;
}

static int
grant(struct dmutex__etcd *e, unsigned lease_ms, int64_t deadline, int64_t *id)
{
	int64_t want = ttl_for(lease_ms), sent = dmutex__now_ns(), ttl;
	json_t *req = json_pack("{s:I}", "TTL", (json_int_t)want), *rep = NULL;
	int bad = 0, err;

	if (!req)
		return ENOMEM;
	err = dmutex__etcd_call(e->http, "/v3/lease/grant", req, &rep, deadline, NULL, NULL);
	json_decref(req);
	if (err)
		return err;
	*id = dmutex__etcd_int(rep, "ID", &bad);
	ttl = dmutex__etcd_int(rep, "TTL", &bad);
	json_decref(rep);
	if (bad || !*id || ttl <= 0) {
		dmutex__log(DMUTEX_LOG_ERROR, "etcd: unexpected reply to /v3/lease/grant");
		return EIO;
	}
	if (ttl > want) {
		static int said;
		if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
			dmutex__log(DMUTEX_LOG_INFO, "etcd granted a lease of %lld s for a %u ms lease "
					"(its minimum): a dead holder's lock frees that long after "
					"its last renewal", (long long)ttl, lease_ms);
	}
	record(e, lease_ms, *id, ttl, sent);
	return 0;
}

int
dmutex__etcd_lease_for(struct dmutex__etcd *e, unsigned lease_ms, int64_t deadline, int64_t *id)
{
	int err = 0, r;

	if ((*id = usable(e, lease_ms, dmutex__now_ns())))
		return 0;
	pthread_mutex_lock(&e->grant_mu);
	/* Another thread may have done it while we waited. */
	if (!(*id = usable(e, lease_ms, dmutex__now_ns()))) {
		int64_t old = current(e, lease_ms);
		r = old ? keepalive(e, lease_ms, old, deadline) : 0;
		if (r == 1)
			*id = old;
		else if (r == 0)
			err = grant(e, lease_ms, deadline, id);
		else
			err = EIO;
	}
	pthread_mutex_unlock(&e->grant_mu);
	return err;
}

/* Was the lease of lease_ms kept alive so lately that another keep-alive
 * now would only cost a round trip?  Less than lease/6 ago (the renewal
 * thread sends a batch as often as every 1/24 of the lease: one keep-alive
 * a batch was most of its requests), and never later than TTL - lease ago,
 * so that a hold renewed now (counted from now for lease_ms) is still
 * outlived by its key, as usable() requires of a new hold. */
static int
recent(struct dmutex__etcd *e, unsigned lease_ms, int64_t now)
{
	struct dmutex__etcd_lease *l;
	int64_t skip_ms;
	int r = 0;

	pthread_mutex_lock(&e->mu);
	if ((l = slot(e, lease_ms)) && l->id) {
		skip_ms = l->ttl_s * 1000 - (int64_t)lease_ms;
		if (skip_ms > (int64_t)lease_ms / 6)
			skip_ms = (int64_t)lease_ms / 6;
		r = now - l->fresh_ns < skip_ms * DMUTEX__MS;
	}
	pthread_mutex_unlock(&e->mu);
	return r;
}

int
dmutex__etcd_lease_keep(struct dmutex__etcd *e, unsigned lease_ms, int64_t deadline)
{
	int64_t id;
	int r;

	pthread_mutex_lock(&e->grant_mu);
	id = current(e, lease_ms);
	if (id && recent(e, lease_ms, dmutex__now_ns()))
		r = 1;
	else
		r = id ? keepalive(e, lease_ms, id, deadline) : 0;
	pthread_mutex_unlock(&e->grant_mu);
	return r;
}

void
dmutex__etcd_lease_forget(struct dmutex__etcd *e, int64_t id)
{
	pthread_mutex_lock(&e->mu);
	for (size_t i = 0; i < e->nleases; i++)
		if (e->leases[i].id == id)
			e->leases[i].id = 0;
	pthread_mutex_unlock(&e->mu);
}

void
dmutex__etcd_lease_revoke_all(struct dmutex__etcd *e)
{
	int64_t deadline = dmutex__now_ns() + (int64_t)e->base.cfg.command_timeout_ms * DMUTEX__MS;

	for (size_t i = 0; i < e->nleases; i++) {
		json_t *req, *rep = NULL;
		if (!e->leases[i].id)
			continue;
		if ((req = json_pack("{s:I}", "ID", (json_int_t)e->leases[i].id)) &&
				!dmutex__etcd_call(e->http, "/v3/lease/revoke", req, &rep, deadline, NULL, NULL))
			json_decref(rep);
		json_decref(req);
		e->leases[i].id = 0;
	}
}
