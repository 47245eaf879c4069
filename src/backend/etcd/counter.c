/*
 * The read-modify-write of a small value key that semaphores and
 * barriers share (prims.h): read, compute, write if the key's mod
 * revision is still the one read, with the operation's result kept on a
 * lease for its retry window.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/etcd/prims.h"
#include "base/base.h"
#include "base/log.h"

/* Each retry of a lost compare is a fresh read: a few hundred clients
 * changing one value at once lose at most that many times each. */
#define RMW_TRIES 1000
/* The result's lease beyond the retry window (prims.h). */
#define RESULT_MARGIN_MS 10000u

static json_t *
req_range(const char *key)
{
	json_t *r = dmutex__etcd_key(key, NULL);
	return r ? json_pack("{s:o}", "request_range", r) : NULL;
}

/* Compare key's target ("MOD", "CREATE", "VERSION") EQUAL or GREATER rev. */
static json_t *
req_cmp(const char *key, const char *target, const char *result, long long rev)
{
	char v[24];

	snprintf(v, sizeof v, "%lld", rev);
	return dmutex__etcd_cmp(key, NULL, target, result, v);
}

/* The value of the first kv of a range response into out: 1, 0 none,
 * -EIO not a value of ours.  *mod (may be NULL) its mod revision. */
static int
kv_value(const json_t *range, char *out, long long *mod)
{
	json_t *kv = range ? dmutex__etcd_first_kv(range) : NULL;
	int bad = 0;

	if (!range)
		return -EIO;
	if (!kv)
		return 0;
	long n = dmutex__etcd_unb64(json_string_value(json_object_get(kv, "value")), out,
			DMUTEX__ETCD_VAL_MAX - 1);
	if (mod)
		*mod = (long long)dmutex__etcd_int(kv, "mod_revision", &bad);
	if (n < 0 || bad) {
		dmutex__log(DMUTEX_LOG_ERROR, "etcd: a value dmutex did not write (or an unexpected "
				"reply)");
		return -EIO;
	}
	out[n] = '\0';
	return 1;
}

/* One txn; 0 and *rep, or the error (maybe_done may be NULL). */
static int
txn(struct dmutex__etcd *e, json_t *req, json_t **rep, int *maybe_done, int64_t deadline)
{
	int md = 0, err;

	if (!req)
		return ENOMEM;
	err = dmutex__etcd_txn(e, req, rep, deadline, &md, NULL);
	json_decref(req);
	if (maybe_done && err && md)
		*maybe_done = 1;
	return err;
}

int
dmutex__etcd_time_ms(long long *ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	*ms = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	return 0;
}

int
dmutex__etcd_get(struct dmutex__etcd *e, const char *key, char *out)
{
	json_t *rep = NULL;
	int err = txn(e, json_pack("{s:[o]}", "success", req_range(key)), &rep, NULL, 0);
	int r;

	if (err)
		return -err;
	r = kv_value(dmutex__etcd_resp(rep, 0, "range", "a value"), out, NULL);
	json_decref(rep);
	return r;
}

int
dmutex__etcd_create(struct dmutex__etcd *e, const char *key, const char *value, char *out)
{
	json_t *rep = NULL;
	int err = txn(e, json_pack("{s:[o], s:[o], s:[o]}",
			"compare", req_cmp(key, "CREATE", "EQUAL", 0),
			"success", dmutex__etcd_op_put(key, value, 0), "failure", req_range(key)), &rep, NULL, 0);
	int r;

	if (err)
		return -err;
	if (dmutex__etcd_bool(rep, "succeeded"))
		r = 1;
	else if ((r = kv_value(dmutex__etcd_resp(rep, 0, "range", "a value"), out, NULL)) == 1)
		r = 0;
	else if (r == 0)
		r = -EIO;       /* deleted between the compare and the read: cannot be */
	json_decref(rep);
	return r;
}

int
dmutex__etcd_delete(struct dmutex__etcd *e, const char *key)
{
	json_t *rep = NULL;
	int err = txn(e, json_pack("{s:[o]}", "success", dmutex__etcd_op_del(key, NULL)), &rep, NULL, 0);
	int bad = 0;
	long long n;

	if (err)
		return -err;
	json_t *r = dmutex__etcd_resp(rep, 0, "delete_range", "a delete");
	n = r ? (long long)dmutex__etcd_int(r, "deleted", &bad) : -1;
	json_decref(rep);
	return n < 0 || bad ? -EIO : n > 0;
}

/* The first read: the result of an earlier try, or the current value. */
static int
first_read(struct dmutex__etcd *e, const char *key, const char *opkey, char *res, char *cur, long long *mod, int *found, int *have,
		int64_t deadline)
{
	json_t *rep = NULL;
	json_t *req = opkey
		? json_pack("{s:[o], s:[o], s:[o]}", "compare", req_cmp(opkey, "VERSION", "GREATER", 0),
			"success", req_range(opkey), "failure", req_range(key))
		: json_pack("{s:[o]}", "success", req_range(key));
	int err = txn(e, req, &rep, NULL, deadline), r;

	if (err)
		return err;
	*found = opkey && dmutex__etcd_bool(rep, "succeeded");
	r = kv_value(dmutex__etcd_resp(rep, 0, "range", "a value"), *found ? res : cur, mod);
	json_decref(rep);
	if (r < 0)
		return -r;
	*have = r;
	return 0;
}

/* One request's deadline: a command timeout from now, or o's (a timed
 * wait's) when that comes first. */
static int64_t
within(const struct dmutex__etcd *e, const struct dmutex__op *o)
{
	int64_t own = dmutex__now_ns() + (int64_t)e->base.cfg.command_timeout_ms * DMUTEX__MS;

	return o && o->until && o->until < own ? o->until : own;
}

/* The write: value and result if nothing changed since the read; else
 * read again (into res if another try of ours won, else cur). */
static int
write_back(struct dmutex__etcd *e, const char *key, const char *opkey, const char *nv,
		const char *res, int keep, int64_t lease, struct dmutex__op *o, char *cur,
		long long *mod, int *have, int *done, char *won)
{
	json_t *cmp = json_array(), *ok = json_array(), *fail = json_array(), *rep = NULL;
	int err, r;

	json_array_append_new(cmp, *have ? req_cmp(key, "MOD", "EQUAL", *mod)
			: req_cmp(key, "CREATE", "EQUAL", 0));
	if (nv[0])
		json_array_append_new(ok, dmutex__etcd_op_put(key, nv, 0));
	if (opkey && keep) {
		json_array_append_new(cmp, req_cmp(opkey, "VERSION", "EQUAL", 0));
		json_array_append_new(ok, dmutex__etcd_op_put(opkey, res, lease));
	}
	json_array_append_new(fail, req_range(opkey ? opkey : key));
	json_array_append_new(fail, req_range(key));
	err = txn(e, json_pack("{s:o, s:o, s:o}", "compare", cmp, "success", ok, "failure", fail),
			&rep, o ? &o->maybe_done : NULL, within(e, o));
	if (err)
		return err;
	*done = dmutex__etcd_bool(rep, "succeeded");
	if (!*done && opkey && (r = kv_value(dmutex__etcd_resp(rep, 0, "range", "a result"),
			won, NULL)) != 0) {
		*done = 2;      /* a lost try of ours had been applied after all */
		err = r < 0 ? -r : 0;
	} else if (!*done) {
		r = kv_value(dmutex__etcd_resp(rep, 1, "range", "a value"), cur, mod);
		err = r < 0 ? -r : 0;
		*have = r > 0;
	}
	json_decref(rep);
	return err;
}

int
dmutex__etcd_rmw(struct dmutex__etcd *e, const char *key, const char *opkey,
		struct dmutex__op *o, dmutex__etcd_apply *apply, void *arg, char *res,
		int *refused)
{
	char cur[DMUTEX__ETCD_VAL_MAX], nv[DMUTEX__ETCD_VAL_MAX], mine[DMUTEX__ETCD_VAL_MAX];
	long long mod = 0, now;
	int64_t lease = 0;
	int found = 0, have = 0, err, keep;

	*refused = 0;
	if ((err = first_read(e, key, opkey, res, cur, &mod, &found, &have, within(e, o))) || found)
		return err;
	if (o && o->deadline_ms && !dmutex__etcd_time_ms(&now) && now > o->deadline_ms) {
		*refused = 1;
		return 0;
	}
	if (opkey && (err = dmutex__etcd_lease_for(e, o->window_ms + RESULT_MARGIN_MS, within(e, o),
			&lease)))
		return err;
	for (int i = 0; i < RMW_TRIES; i++) {
		int done = 0;
		nv[0] = '\0';
		keep = 1;
		if ((err = apply(arg, have ? cur : NULL, nv, mine, &keep)))
			return err;
		if (!nv[0] && !keep) {
			memcpy(res, mine, sizeof mine);
			return 0;
		}
		if ((err = write_back(e, key, opkey, nv, mine, keep, lease, o, cur, &mod, &have,
				&done, res)))
			return err;
		if (done == 1)
			memcpy(res, mine, sizeof mine);
		if (done)
			return 0;
	}
	dmutex__log(DMUTEX_LOG_ERROR, "etcd: a change of '%s' lost %d races in a row", key, RMW_TRIES);
	return EIO;
}
