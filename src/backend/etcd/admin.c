/*
 * Operators' views over etcd (backend.h "operators' views"): what `dmutex
 * status`, `list` and `reset` show and do, read from the keys of etcd.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/etcd/etcd.h"
#include "base/log.h"

static json_t *
range(const char *key, int prefix)
{
	char end[DMUTEX__ETCD_KEY_MAX];
	json_t *r;

	dmutex__etcd_prefix_end(key, end);
	if ((r = dmutex__etcd_key(key, prefix ? end : NULL)) && prefix) {
		json_object_set_new(r, "sort_target", json_string("CREATE"));
		json_object_set_new(r, "sort_order", json_string("ASCEND"));
	}
	return r ? json_pack("{s:o}", "request_range", r) : NULL;
}

/* The value of kv as a string into out[len]; "" if none. */
static void
value(const json_t *kv, char *out, size_t len)
{
	if (!kv || dmutex__etcd_unb64(json_string_value(json_object_get(kv, "value")), out, len) < 0)
		out[0] = '\0';
}

long long
dmutex__etcd_lease_left(struct dmutex__etcd *e, int64_t id)
{
	int bad = 0;
	int64_t ttl;
	json_t *req, *rep = NULL;

	if (id <= 0 || !(req = json_pack("{s:I}", "ID", (json_int_t)id)))
		return -1;
	if (dmutex__etcd_call(e->http, "/v3/lease/timetolive", req, &rep, 0, NULL, NULL)) {
		json_decref(req);
		return -1;
	}
	json_decref(req);
	ttl = dmutex__etcd_int(rep, "TTL", &bad);
	json_decref(rep);
	return bad || ttl < 0 ? -1 : (long long)ttl * 1000;
}

/* The lease left of the head's lease, in ms; -1 unknown. */
static long long
lease_left(struct dmutex__etcd *e, const json_t *kv)
{
	int bad = 0;
	int64_t id = dmutex__etcd_int(kv, "lease", &bad);

	return bad ? -1 : dmutex__etcd_lease_left(e, id);
}

int
dmutex__etcd_inspect(struct dmutex__backend *be, const char *name, struct dmutex__lock_view *v)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	char q[DMUTEX__ETCD_KEY_MAX], s[DMUTEX__ETCD_KEY_MAX], n[DMUTEX__ETCD_KEY_MAX];
	char state[DMUTEX__TOKEN_HEX + 8];
	json_t *req, *rep = NULL, *rq, *rs, *rn, *head;
	int err, bad = 0;

	memset(v, 0, sizeof *v);
	v->waiters = v->lease_left_ms = -1;
	dmutex__etcd_name_key(e, q, "m", name, "q/");
	dmutex__etcd_name_key(e, s, "m", name, "s");
	dmutex__etcd_name_key(e, n, "m", name, DMUTEX__ETCD_MARK);
	if (!(req = json_pack("{s:[o,o,o]}", "success", range(q, 1), range(s, 0), range(n, 0))))
		return ENOMEM;
	err = dmutex__etcd_txn(e, req, &rep, 0, NULL, NULL);
	json_decref(req);
	if (err)
		return err;
	rq = dmutex__etcd_resp(rep, 0, "range", "the queue");
	rs = dmutex__etcd_resp(rep, 1, "range", "the state");
	rn = dmutex__etcd_resp(rep, 2, "range", "the mark");
	if (!rq || !rs || !rn) {
		json_decref(rep);
		return EIO;
	}
	head = dmutex__etcd_first_kv(rq);
	value(dmutex__etcd_first_kv(rs), state, sizeof state);
	v->notrec = dmutex__etcd_first_kv(rn) != NULL;
	v->held = head != NULL;
	v->exists = v->held || state[0] || v->notrec;
	if (head) {
		char *tok;
		/* "<host> <pid> <tid> <token>" (etcd.h): the owner, then the token. */
		value(head, v->owner, sizeof v->owner);
		if ((tok = strrchr(v->owner, ' ')))
			*tok++ = '\0';
		v->fence = (uint64_t)dmutex__etcd_int(head, "create_revision", &bad);
		v->waiters = (long long)json_array_size(json_object_get(rq, "kvs")) - 1;
		v->lease_left_ms = lease_left(e, head);
		/* A state that is not the head's: the head has not claimed it yet
		 * after a death (it will get EOWNERDEAD if robust). */
		v->owner_died = state[0] && (!tok || strcmp(tok, state));
	} else {
		v->waiters = 0;
		v->owner_died = state[0] != 0;
	}
	json_decref(rep);
	return 0;
}

/* "<prefix><kind>/<len>:<name>/..." -> name (its length), NULL if not ours. */
static const char *
name_of(const char *key, size_t plen, const char *kind, size_t *len)
{
	size_t klen = strlen(kind);
	const char *p = key + plen + klen + 1;
	char *colon;
	unsigned long n;

	if (strncmp(key + plen, kind, klen) || key[plen + klen] != '/')
		return NULL;
	n = strtoul(p, &colon, 10);
	if (*colon != ':' || !n || strlen(colon + 1) < n + 1 || colon[1 + n] != '/')
		return NULL;
	*len = n;
	return colon + 1;
}

int
dmutex__etcd_names_of(struct dmutex__backend *be, const char *kind,
		int (*fn)(void *arg, const char *name), void *arg)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	char m[DMUTEX__ETCD_KEY_MAX], end[DMUTEX__ETCD_KEY_MAX], key[DMUTEX__ETCD_KEY_MAX];
	char last[DMUTEX__ETCD_KEY_MAX] = "";
	json_t *req, *rep = NULL, *kvs;
	size_t plen = strlen(be->cfg.prefix);
	int err, stop = 0;

	snprintf(m, sizeof m, "%s%s/", be->cfg.prefix, kind);
	dmutex__etcd_prefix_end(m, end);
	if (!(req = dmutex__etcd_key(m, end)))
		return ENOMEM;
	json_object_set_new(req, "keys_only", json_true());
	err = dmutex__etcd_call(e->http, "/v3/kv/range", req, &rep, 0, NULL, NULL);
	json_decref(req);
	if (err)
		return err;
	kvs = json_object_get(rep, "kvs");
	/* Sorted by key: one name's keys are together. */
	for (size_t i = 0; i < json_array_size(kvs) && !stop; i++) {
		const char *nm;
		size_t len;
		if (dmutex__etcd_unb64(json_string_value(json_object_get(json_array_get(kvs, i), "key")),
				key, sizeof key) < 0 || !(nm = name_of(key, plen, kind, &len)))
			continue;
		if (strlen(last) == len && !memcmp(last, nm, len))
			continue;
		memcpy(last, nm, len);
		last[len] = '\0';
		stop = fn(arg, last);
	}
	json_decref(rep);
	return stop;
}

int
dmutex__etcd_names(struct dmutex__backend *be, int (*fn)(void *arg, const char *name), void *arg)
{
	return dmutex__etcd_names_of(be, "m", fn, arg);
}

int
dmutex__etcd_reset(struct dmutex__backend *be, const char *name, int force, int *result)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	char q[DMUTEX__ETCD_KEY_MAX], qe[DMUTEX__ETCD_KEY_MAX], s[DMUTEX__ETCD_KEY_MAX];
	char n[DMUTEX__ETCD_KEY_MAX];
	json_t *cmp, *req, *rep = NULL, *dq, *ds, *dn;
	int err, bad = 0;

	dmutex__etcd_name_key(e, q, "m", name, "q/");
	dmutex__etcd_prefix_end(q, qe);
	dmutex__etcd_name_key(e, s, "m", name, "s");
	dmutex__etcd_name_key(e, n, "m", name, DMUTEX__ETCD_MARK);
	/* Without force: only while nobody holds it (nor waits). */
	cmp = force ? json_array() : json_pack("[o]", dmutex__etcd_cmp_none(q, qe));
	dq = dmutex__etcd_op_del(q, qe);
	ds = dmutex__etcd_op_del(s, NULL);
	dn = dmutex__etcd_op_del(n, NULL);
	req = json_pack("{s:o, s:[o,o,o]}", "compare", cmp, "success", dq, ds, dn);
	if (!req)
		return ENOMEM;
	err = dmutex__etcd_txn(e, req, &rep, 0, NULL, NULL);
	json_decref(req);
	if (err)
		return err;
	if (!dmutex__etcd_bool(rep, "succeeded")) {
		*result = DMUTEX__RESET_HELD;
	} else {
		int64_t deleted = 0;
		for (size_t i = 0; i < 3; i++) {
			json_t *d = dmutex__etcd_resp(rep, i, "delete_range", "a reset");
			deleted += d ? dmutex__etcd_int(d, "deleted", &bad) : 0;
		}
		*result = deleted ? DMUTEX__RESET_DONE : DMUTEX__RESET_NOTHING;
	}
	json_decref(rep);
	return 0;
}

int
dmutex__etcd_mutex_fresh(struct dmutex__backend *be, const char *name, int *dropped)
{
	int result, err = dmutex__etcd_reset(be, name, 0, &result);

	if (!err)
		*dropped = result == DMUTEX__RESET_DONE ? 1 : result == DMUTEX__RESET_HELD ? -1 : 0;
	return err;
}
