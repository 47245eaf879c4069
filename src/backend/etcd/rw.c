/*
 * Read-write locks over etcd, writer-preferring as the Redis version
 * (rw_acquire.lua).  Keys, under the URL's prefix (<n> as in etcd.h), each
 * on the client's shared lease of the hold's length, so a dead holder's
 * go with its lease:
 *   <prefix>r/<n>/r/<token>  a read share (one per process that reads)
 *   <prefix>r/<n>/w/<token>  the write lock; its create revision is the
 *                            fencing token
 *   <prefix>r/<n>/q/<token>  a waiting writer's intent: while one is there
 *                            no new share is given, so readers drain
 * A share: one txn, "no writer and no intent" -> put the share; a write
 * lock: "no writer and no share" -> put it and drop our intent, else
 * (waiting) put the intent.  Both answer a retry after a lost reply from
 * the key it left.  Waiters watch the deletions under <prefix>r/<n>/.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/etcd/prims.h"
#include "base/log.h"

struct rwkeys {
	char base[DMUTEX__ETCD_KEY_MAX];
	char pre[3][DMUTEX__ETCD_KEY_MAX], end[3][DMUTEX__ETCD_KEY_MAX];     /* r/ w/ q/ */
	char own[3][DMUTEX__ETCD_KEY_MAX + DMUTEX__TOKEN_HEX];
};
enum { R, W, Q };

static void
rwkeys(struct dmutex__etcd *e, const char *name, const char *token, struct rwkeys *k)
{
	static const char *part[3] = { "r/", "w/", "q/" };

	dmutex__etcd_name_key(e, k->base, "r", name, "");
	for (int i = 0; i < 3; i++) {
		dmutex__etcd_name_key(e, k->pre[i], "r", name, part[i]);
		dmutex__etcd_prefix_end(k->pre[i], k->end[i]);
		snprintf(k->own[i], sizeof k->own[i], "%s%s", k->pre[i], token ? token : "");
	}
}

static json_t *
range(const char *key, const char *end)
{
	json_t *r = dmutex__etcd_key(key, end);

	if (r && end) {
		json_object_set_new(r, "count_only", json_true());
		json_object_set_new(r, "limit", json_integer(1));
	}
	return r ? json_pack("{s:o}", "request_range", r) : NULL;
}

static json_t *
acquire_req(const struct dmutex__rw_acq *a, const struct rwkeys *k, int64_t lease)
{
	if (a->op == 'r')
		return json_pack("{s:[o,o], s:[o], s:[o]}",
			"compare", dmutex__etcd_cmp_none(k->pre[W], k->end[W]),
				dmutex__etcd_cmp_none(k->pre[Q], k->end[Q]),
			"success", dmutex__etcd_op_put(k->own[R], NULL, lease),
			"failure", range(k->own[R], NULL));
	return a->wait
		? json_pack("{s:[o,o], s:[o,o,o], s:[o,o]}",
			"compare", dmutex__etcd_cmp_none(k->pre[W], k->end[W]),
				dmutex__etcd_cmp_none(k->pre[R], k->end[R]),
			"success", dmutex__etcd_op_put(k->own[W], NULL, lease),
				dmutex__etcd_op_del(k->own[Q], NULL), range(k->own[W], NULL),
			"failure", range(k->own[W], NULL), dmutex__etcd_op_put(k->own[Q], NULL, lease))
		: json_pack("{s:[o,o], s:[o,o,o], s:[o]}",
			"compare", dmutex__etcd_cmp_none(k->pre[W], k->end[W]),
				dmutex__etcd_cmp_none(k->pre[R], k->end[R]),
			"success", dmutex__etcd_op_put(k->own[W], NULL, lease),
				dmutex__etcd_op_del(k->own[Q], NULL), range(k->own[W], NULL),
			"failure", range(k->own[W], NULL));
}

/* The write lock's fence: its key's create revision, from a range. */
static int
fence_of(const json_t *rng, uint64_t *fence)
{
	json_t *kv = rng ? dmutex__etcd_first_kv(rng) : NULL;
	int bad = 0;

	*fence = kv ? (uint64_t)dmutex__etcd_int(kv, "create_revision", &bad) : 0;
	if (!kv || bad || !*fence) {
		dmutex__log(DMUTEX_LOG_ERROR, "etcd: unexpected reply to a write lock's txn: no create "
				"revision");
		return EIO;
	}
	return 0;
}

int
dmutex__etcd_rw_acquire(struct dmutex__backend *be, const char *name, struct dmutex__rw_acq *a)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	int64_t deadline = dmutex__now_ns() + (int64_t)be->cfg.command_timeout_ms * DMUTEX__MS;
	struct rwkeys k;
	json_t *req, *rep = NULL, *rng;
	int64_t lease;
	int err, ok;

	a->taken = 0;
	a->fence = 0;
	a->maybe_done = a->refused = 0;
	a->pttl_ms = a->lease_ms;       /* a blocking hold ends within a lease (if not woken) */
	/* A timed lock's deadline, when it comes first. */
	if (a->deadline && a->deadline < deadline)
		deadline = a->deadline;
	if ((err = dmutex__etcd_lease_for(e, a->lease_ms, deadline, &lease)))
		return err;
	rwkeys(e, name, a->token, &k);
	if (!(req = acquire_req(a, &k, lease)))
		return ENOMEM;
	err = dmutex__etcd_txn(e, req, &rep, deadline, &a->maybe_done, &a->refused);
	json_decref(req);
	if (err) {
		if (a->refused)
			dmutex__etcd_lease_forget(e, lease);
		return err;
	}
	ok = dmutex__etcd_bool(rep, "succeeded");
	/* Not taken now: our key from an earlier try whose reply was lost? */
	rng = dmutex__etcd_resp(rep, ok ? (a->op == 'r' ? 0 : 2) : 0, ok && a->op == 'r' ? "put" : "range",
			"a read-write lock's key");
	if (!rng)
		err = EIO;
	else if (ok || dmutex__etcd_first_kv(rng))
		a->taken = 1;
	if (!err && a->taken && a->op == 'w')
		err = fence_of(rng, &a->fence);
	json_decref(rep);
	if (err)
		a->maybe_done = 1;      /* it ran: what it did is unknown */
	return err;
}

int
dmutex__etcd_rw_release(struct dmutex__backend *be, const char *name, int op, const char *token,
		int *released, int *maybe_done)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	struct rwkeys k;
	json_t *req, *rep = NULL, *d;
	int err, bad = 0;

	*released = 0;
	*maybe_done = 0;
	rwkeys(e, name, token, &k);
	/* A writer's release also drops its intent (an acquire whose reply
	 * was lost); the intent alone ('q') is a plain delete. */
	if (op == 'q')
		req = json_pack("{s:[o]}", "success", dmutex__etcd_op_del(k.own[Q], NULL));
	else if (op == 'r')
		req = json_pack("{s:[o]}", "success", dmutex__etcd_op_del(k.own[R], NULL));
	else
		req = json_pack("{s:[o,o]}", "success", dmutex__etcd_op_del(k.own[W], NULL),
				dmutex__etcd_op_del(k.own[Q], NULL));
	if (!req)
		return ENOMEM;
	err = dmutex__etcd_txn(e, req, &rep, 0, maybe_done, NULL);
	json_decref(req);
	if (err)
		return err;
	d = dmutex__etcd_resp(rep, 0, "delete_range", "a read-write lock's release");
	if (!d)
		err = EIO;
	else
		*released = dmutex__etcd_int(d, "deleted", &bad) > 0;
	if (bad)
		err = EIO;
	/* Answered, but not readably: the delete ran, so a "not ours" found
	 * after it proves nothing (no loss reported on it). */
	if (err)
		*maybe_done = 1;
	json_decref(rep);
	return err;
}

/* Keep each lease length of rn[] alive once: -1 no answer, 0 expired, 1
 * alive (its keys then checked). */
static void
keep_leases(struct dmutex__etcd *e, struct dmutex__renewal *rn, size_t n, int64_t deadline)
{
	for (size_t i = 0; i < n; i++)
		rn[i].result = 2;
	for (size_t i = 0; i < n; i++) {
		if (rn[i].result != 2)
			continue;
		int r = dmutex__etcd_lease_keep(e, rn[i].lease_ms, deadline);
		for (size_t j = i; j < n; j++)
			if (rn[j].result == 2 && rn[j].lease_ms == rn[i].lease_ms)
				rn[j].result = r;
	}
}

/* etcd's default --max-txn-ops is 128: two ranges a hold. */
#define BATCH 60

static void
check_batch(struct dmutex__etcd *e, struct dmutex__renewal *rn, size_t n, int64_t deadline)
{
	json_t *ops = json_array(), *req = NULL, *rep = NULL;
	size_t idx[BATCH], m = 0;
	int err;

	for (size_t i = 0; i < n && ops; i++) {
		struct rwkeys k;
		if (rn[i].result != 1)
			continue;
		rwkeys(e, rn[i].name, rn[i].token, &k);
		json_array_append_new(ops, range(k.own[rn[i].rw == 'r' ? R : W], NULL));
		json_array_append_new(ops, range(k.pre[Q], k.end[Q]));
		idx[m++] = i;
	}
	if (m && ops)
		req = json_pack("{s:o}", "success", ops);
	else
		json_decref(ops);
	err = req ? dmutex__etcd_txn(e, req, &rep, deadline, NULL, NULL) : m ? ENOMEM : 0;
	json_decref(req);
	for (size_t j = 0; j < m; j++) {
		json_t *own = err ? NULL : dmutex__etcd_resp(rep, 2 * j, "range", "a renewal's key");
		json_t *q = err ? NULL : dmutex__etcd_resp(rep, 2 * j + 1, "range", "the intents");
		int bad = 0;
		struct dmutex__renewal *r = &rn[idx[j]];
		r->result = !own || !q ? -1 : dmutex__etcd_first_kv(own) ? 1 : 0;
		r->writer_waits = r->rw == 'r' && q && dmutex__etcd_int(q, "count", &bad) > 0;
	}
	json_decref(rep);
}

void
dmutex__etcd_rw_renew(struct dmutex__backend *be, struct dmutex__renewal *rn, size_t n,
		int64_t deadline)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);

	for (size_t i = 0; i < n; i++)
		rn[i].writer_waits = 0;
	keep_leases(e, rn, n, deadline);
	for (size_t i = 0; i < n; i += BATCH)
		check_batch(e, rn + i, n - i < BATCH ? n - i : BATCH, deadline);
}

char *
dmutex__etcd_rw_channel(struct dmutex__backend *be, const char *name)
{
	char base[DMUTEX__ETCD_KEY_MAX], *ch;

	dmutex__etcd_name_key(dmutex__etcd_of(be), base, "r", name, "");
	if ((ch = malloc(strlen(base) + 4)))
		sprintf(ch, "dp:%s", base);
	return ch;
}
