/*
 * Condition variables over etcd.  A waiter is a key
 *   <prefix>c/<n>/w/<token>   (value: host pid tid, for operators)
 * on the client's shared lease of the registration's length, made before
 * the waiter releases its mutex; the waiter watches its own key's
 * deletion.  A signal deletes the oldest waiter's key (lowest create
 * revision: first come, first woken), a broadcast every key under the
 * name, so the wake-up is the deletion itself: no message that could be
 * lost between two requests.  A waiter whose process died keeps its key
 * until its lease ends (no keep-alive comes): until then a signal may
 * go to it and be lost, as README "etcd" says; the lease is the
 * registration's length (the client's lease), refreshed by the waiter
 * every third of it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/etcd/prims.h"
#include "base/log.h"

static void
waiter_key(struct dmutex__etcd *e, const char *name, const char *token, char *out)
{
	char part[DMUTEX__TOKEN_HEX + 4];

	snprintf(part, sizeof part, "w/%s", token ? token : "");
	dmutex__etcd_name_key(e, out, "c", name, part);
}

void
dmutex__etcd_cond_channel(struct dmutex__backend *be, const char *name, const char *token,
		char *out)
{
	char k[DMUTEX__ETCD_KEY_MAX];

	waiter_key(dmutex__etcd_of(be), name, token, k);
	/* 'd': its deletion (a wake-up, or its lease's end) */
	if (snprintf(out, DMUTEX__CHANNEL_MAX, "d:%s", k) >= DMUTEX__CHANNEL_MAX)
		out[0] = '\0';
}

unsigned
dmutex__etcd_cond_ttl_ms(struct dmutex__backend *be)
{
	return be->cfg.lease_ms;
}

static int64_t
deadline_of(struct dmutex__backend *be)
{
	return dmutex__now_ns() + (int64_t)be->cfg.command_timeout_ms * DMUTEX__MS;
}

int
dmutex__etcd_cond_register(struct dmutex__backend *be, const char *name, const char *token)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	char k[DMUTEX__ETCD_KEY_MAX], who[300];
	int64_t lease, deadline = deadline_of(be);
	json_t *req, *rep = NULL;
	int err, refused = 0;

	if ((err = dmutex__etcd_lease_for(e, dmutex__etcd_cond_ttl_ms(be), deadline, &lease)))
		return err;
	waiter_key(e, name, token, k);
	snprintf(who, sizeof who, "%s %ld", be->cfg.host ? be->cfg.host : "", (long)*be->cfg.pid);
	if (!(req = json_pack("{s:[o]}", "success", dmutex__etcd_op_put(k, who, lease))))
		return ENOMEM;
	err = dmutex__etcd_txn(e, req, &rep, deadline, NULL, &refused);
	json_decref(req);
	json_decref(rep);
	if (err && refused)
		dmutex__etcd_lease_forget(e, lease);    /* "requested lease not found" */
	return err;
}

/* Still registered?  Keeps the registration's lease alive on the way. */
int
dmutex__etcd_cond_refresh(struct dmutex__backend *be, const char *name, const char *token,
		int *still)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	char k[DMUTEX__ETCD_KEY_MAX];
	int64_t lease;
	json_t *r, *req, *rep = NULL, *rng;
	int err, bad = 0;

	if ((err = dmutex__etcd_lease_for(e, dmutex__etcd_cond_ttl_ms(be), deadline_of(be), &lease)))
		return err;
	waiter_key(e, name, token, k);
	if (!(r = dmutex__etcd_key(k, NULL)))
		return ENOMEM;
	json_object_set_new(r, "count_only", json_true());
	if (!(req = json_pack("{s:[{s:o}]}", "success", "request_range", r)))
		return ENOMEM;
	err = dmutex__etcd_txn(e, req, &rep, 0, NULL, NULL);
	json_decref(req);
	if (!err && !(rng = dmutex__etcd_resp(rep, 0, "range", "a waiter's key")))
		err = EIO;
	if (!err)
		*still = dmutex__etcd_int(rng, "count", &bad) > 0;
	json_decref(rep);
	return err ? err : bad ? EIO : 0;
}

/* Leave: delete our key; still = it was there (nobody woke us). */
int
dmutex__etcd_cond_leave(struct dmutex__backend *be, const char *name, const char *token,
		int *still)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	char k[DMUTEX__ETCD_KEY_MAX];
	int r;

	waiter_key(e, name, token, k);
	if ((r = dmutex__etcd_delete(e, k)) < 0)
		return -r;
	*still = r;
	return 0;
}

/* The oldest waiter's key and create revision: 1, 0 none, or -errno. */
static int
oldest(struct dmutex__etcd *e, const char *pre, const char *end, char *key, long long *rev)
{
	json_t *r = dmutex__etcd_key(pre, end), *req, *rep = NULL, *kv;
	int err, bad = 0;

	if (!r)
		return -ENOMEM;
	json_object_set_new(r, "sort_target", json_string("CREATE"));
	json_object_set_new(r, "sort_order", json_string("ASCEND"));
	json_object_set_new(r, "limit", json_integer(1));
	json_object_set_new(r, "keys_only", json_true());
	if (!(req = json_pack("{s:[{s:o}]}", "success", "request_range", r)))
		return -ENOMEM;
	err = dmutex__etcd_txn(e, req, &rep, 0, NULL, NULL);
	json_decref(req);
	if (err)
		return -err;
	json_t *rng = dmutex__etcd_resp(rep, 0, "range", "the waiters");
	kv = rng ? dmutex__etcd_first_kv(rng) : NULL;
	err = rng ? 0 : EIO;
	if (kv && (dmutex__etcd_unb64(json_string_value(json_object_get(kv, "key")), key,
			DMUTEX__ETCD_KEY_MAX) < 0 || !(*rev = dmutex__etcd_int(kv, "create_revision", &bad)) || bad))
		err = EIO;
	json_decref(rep);
	return err ? -err : kv != NULL;
}

/* Delete key if it is still the one made at rev: 1, 0 gone meanwhile. */
static int
delete_if(struct dmutex__etcd *e, const char *key, long long rev)
{
	json_t *c = dmutex__etcd_key(key, NULL), *d = dmutex__etcd_op_del(key, NULL), *req, *rep = NULL;
	char v[24];
	int err, ok;

	if (!c || !d) {
		json_decref(c);
		json_decref(d);
		return -ENOMEM;
	}
	snprintf(v, sizeof v, "%lld", rev);
	json_object_set_new(c, "target", json_string("CREATE"));
	json_object_set_new(c, "result", json_string("EQUAL"));
	json_object_set_new(c, "create_revision", json_string(v));
	if (!(req = json_pack("{s:[o], s:[o]}", "compare", c, "success", d)))
		return -ENOMEM;
	err = dmutex__etcd_txn(e, req, &rep, 0, NULL, NULL);
	json_decref(req);
	ok = !err && dmutex__etcd_bool(rep, "succeeded");
	json_decref(rep);
	return err ? -err : ok;
}

int
dmutex__etcd_cond_wake(struct dmutex__backend *be, const char *name, int all, int *busy)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	char pre[DMUTEX__ETCD_KEY_MAX], end[DMUTEX__ETCD_KEY_MAX], key[DMUTEX__ETCD_KEY_MAX];
	long long rev = 0;
	int r;

	(void)busy;     /* a wake-up is one range read already */
	dmutex__etcd_name_key(e, pre, "c", name, "w/");
	dmutex__etcd_prefix_end(pre, end);
	if (all) {
		/* every waiter registered now: their keys, at once */
		json_t *req, *rep = NULL;
		if (!(req = json_pack("{s:[o]}", "success", dmutex__etcd_op_del(pre, end))))
			return ENOMEM;
		r = dmutex__etcd_txn(e, req, &rep, 0, NULL, NULL);
		json_decref(req);
		json_decref(rep);
		return r;
	}
	/* The oldest; if it left between the read and the delete, the next. */
	while ((r = oldest(e, pre, end, key, &rev)) == 1)
		if ((r = delete_if(e, key, rev)) != 0)
			break;
	return r < 0 ? -r : 0;
}

int
dmutex__etcd_cond_leave_start(struct dmutex__backend *be, const char *name, const char *token,
		struct dmutex__cond_leaving *l)
{
	(void)be, (void)name, (void)token, (void)l;
	return ENOTSUP;         /* the caller leaves at once (one delete) */
}

int
dmutex__etcd_cond_leave_end(struct dmutex__backend *be, const char *name, const char *token,
		struct dmutex__cond_leaving *l, int *still)
{
	(void)l;
	return dmutex__etcd_cond_leave(be, name, token, still);
}
