/*
 * The renewal thread's batch (ops->renew): each lease length's shared
 * lease kept alive once (or not at all if that was done less than a
 * sixth of the lease ago: lease.c's recent), then one read-only txn per 100 holds says which
 * keys are still there.  A lease that expired took its keys with it: its
 * holds are lost (0), and the next hold gets a new lease.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/etcd/etcd.h"
#include "base/log.h"

/* etcd's default --max-txn-ops is 128. */
#define BATCH 100

/* Keep each lease length of r[] alive: its result -1 on no answer, 0
 * expired, else left for the keys' check (1). */
static void
keep_leases(struct dmutex__etcd *e, struct dmutex__renewal *r, size_t n, int64_t deadline)
{
	for (size_t i = 0; i < n; i++)
		r[i].result = 2;        /* not looked at yet */
	for (size_t i = 0; i < n; i++) {
		int res;
		if (r[i].result != 2)
			continue;
		res = dmutex__etcd_lease_keep(e, r[i].lease_ms, deadline);
		for (size_t j = i; j < n; j++)
			if (r[j].result == 2 && r[j].lease_ms == r[i].lease_ms)
				r[j].result = res;
	}
}

/* Whether the keys of r[0..n) (those still 1) exist: one txn. */
static void
check_keys(struct dmutex__etcd *e, struct dmutex__renewal *r, size_t n, int64_t deadline)
{
	json_t *ops = json_array(), *req, *rep = NULL, *resp;
	size_t m = 0, idx[BATCH];
	int err;

	for (size_t i = 0; i < n && ops; i++) {
		char q[DMUTEX__ETCD_KEY_MAX], own[DMUTEX__ETCD_KEY_MAX];
		json_t *k;
		if (r[i].result != 1)
			continue;
		dmutex__etcd_name_key(e, q, "m", r[i].name, "q/");
		dmutex__etcd_own_key(e, q, r[i].token, 0, own);
		if ((k = dmutex__etcd_key(own, NULL))) {
			json_object_set_new(k, "keys_only", json_true());
			json_array_append_new(ops, json_pack("{s:o}", "request_range", k));
		}
		idx[m++] = i;
	}
	if (!m || !ops || !(req = json_pack("{s:o}", "success", ops))) {
		for (size_t j = 0; m && j < m; j++)
			r[idx[j]].result = -1;
		if (!m)
			json_decref(ops);
		return;
	}
	err = dmutex__etcd_txn(e, req, &rep, deadline, NULL, NULL);
	json_decref(req);
	for (size_t j = 0; j < m; j++) {
		resp = err ? NULL : dmutex__etcd_resp(rep, j, "range", "a renewal's key");
		r[idx[j]].result = !resp ? -1 : dmutex__etcd_first_kv(resp) ? 1 : 0;
	}
	json_decref(rep);
}

void
dmutex__etcd_renew(struct dmutex__backend *be, struct dmutex__renewal *r, size_t n,
		int64_t deadline)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);

	keep_leases(e, r, n, deadline);
	for (size_t i = 0; i < n; i += BATCH)
		check_keys(e, r + i, n - i < BATCH ? n - i : BATCH, deadline);
	for (size_t i = 0; i < n; i++)
		r[i].writer_waits = 0;
}
