/*
 * A mutex over etcd (etcd.h has the keys): one txn takes a free lock, or
 * queues behind its holder; the queue's head holds it, its create revision
 * is the fencing token.  A waiter's key stays queued between its tries (it
 * keeps its place: every mutex is FIFO), and the answer says maybe_done so
 * that the core takes it back if the waiter gives up.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/etcd/etcd.h"
#include "base/log.h"

struct keys {
	char q[DMUTEX__ETCD_KEY_MAX], q_end[DMUTEX__ETCD_KEY_MAX], own[DMUTEX__ETCD_KEY_MAX];
	char s[DMUTEX__ETCD_KEY_MAX], n[DMUTEX__ETCD_KEY_MAX];
};

static void
make_keys(const struct dmutex__etcd *e, const char *name, const char *token, struct keys *k)
{
	dmutex__etcd_name_key(e, k->q, "m", name, "q/");
	dmutex__etcd_prefix_end(k->q, k->q_end);
	snprintf(k->own, sizeof k->own, "%s%s", k->q, token ? token : "");
	dmutex__etcd_name_key(e, k->s, "m", name, "s");
	dmutex__etcd_name_key(e, k->n, "m", name, "n");
}

static json_t *
op_range(const char *key, const char *end, int first)
{
	json_t *r = dmutex__etcd_key(key, end);

	if (r && first) {
		json_object_set_new(r, "sort_target", json_string("CREATE"));
		json_object_set_new(r, "sort_order", json_string("ASCEND"));
		/* The head, and who is next: a second in line can tell from
		 * the head's deletion alone that the lock is its. */
		json_object_set_new(r, "limit", json_string("2"));
	}
	return r ? json_pack("{s:o}", "request_range", r) : NULL;
}

/* A compare of key's target ("VERSION", "CREATE", "VALUE") with v. */
static json_t *
cmp(const char *key, const char *end, const char *target, const char *result, const char *v)
{
	json_t *c = dmutex__etcd_key(key, end);
	static const struct { const char *target, *field; } f[] = {
		{ "VERSION", "version" }, { "CREATE", "create_revision" }, { "VALUE", "value" } };

	for (size_t i = 0; c && i < sizeof f / sizeof *f; i++)
		if (!strcmp(f[i].target, target)) {
			char *b = strcmp(target, "VALUE") ? NULL : dmutex__etcd_b64(v, strlen(v));
			json_object_set_new(c, "target", json_string(target));
			json_object_set_new(c, "result", json_string(result));
			json_object_set_new(c, f[i].field, json_string(b ? b : v));
			free(b);
		}
	return c;
}

/* The acquisition txn: a free lock (nobody queued, not "not recoverable")
 * is ours at once, its robust state read and set; else queue (wait) and
 * read the head, the state and the not-recoverable mark. */
static json_t *
acquire_txn(struct dmutex__etcd *e, const struct dmutex__acq *a, const struct keys *k, int64_t lease)
{
	char who[300];

	snprintf(who, sizeof who, "%s %ld %ld", e->base.cfg.host ? e->base.cfg.host : "",
			(long)*e->base.cfg.pid, a->tid);
	/* Not robust: no state and no mark (EOWNERDEAD and ENOTRECOVERABLE
	 * are a robust lock's), as small a txn as a hand-made lock's. */
	if (!a->robust)
		return json_pack("{s:[o], s:[o], s:[o,o]}",
			"compare", cmp(k->q, k->q_end, "VERSION", "EQUAL", "0"),
			"success", dmutex__etcd_op_put(k->own, who, lease),
			"failure", a->wait ? dmutex__etcd_op_put(k->own, who, lease) : op_range(k->own, NULL, 0),
				op_range(k->q, k->q_end, 1));
	return json_pack("{s:[o,o], s:[o,o,o], s:[o,o,o,o]}",
		"compare", cmp(k->q, k->q_end, "VERSION", "EQUAL", "0"),
			cmp(k->n, NULL, "VERSION", "EQUAL", "0"),
		"success", op_range(k->s, NULL, 0), dmutex__etcd_op_put(k->own, who, lease),
			dmutex__etcd_op_put(k->s, a->token, 0),
		"failure", a->wait ? dmutex__etcd_op_put(k->own, who, lease) : op_range(k->own, NULL, 0),
			op_range(k->q, k->q_end, 1), op_range(k->s, NULL, 0), op_range(k->n, NULL, 0));
}

/* Did the holder before us die (its state left behind, not ours)? */
static int
died(const json_t *state_range, const char *token)
{
	json_t *kv = dmutex__etcd_first_kv(state_range);
	char v[DMUTEX__TOKEN_HEX + 8];

	if (!kv)
		return 0;
	return dmutex__etcd_unb64(json_string_value(json_object_get(kv, "value")), v, sizeof v) < 0
		|| strcmp(v, token);
}

/* We are the queue's head after waiting: record the robust state. */
static int
claim_state(struct dmutex__etcd *e, const struct dmutex__acq *a, const struct keys *k, int64_t rev)
{
	char r[24];
	json_t *req, *rep = NULL;
	int err, md = 0;

	snprintf(r, sizeof r, "%lld", (long long)rev);
	req = json_pack("{s:[o], s:[o]}", "compare", cmp(k->own, NULL, "CREATE", "EQUAL", r),
			"success", dmutex__etcd_op_put(k->s, a->token, 0));
	if (!req)
		return ENOMEM;
	err = dmutex__etcd_txn(e, req, &rep, a->deadline, &md, NULL);
	json_decref(req);
	if (!err && !dmutex__etcd_bool(rep, "succeeded"))
		err = EIO;      /* our key went meanwhile (its lease): not held */
	json_decref(rep);
	return err;
}

/* Second in line (head, then our key): remember the head, our key's
 * revision and lease, so that the head's deletion, heard on the watch,
 * hands us the lock with no round trip (etcd.h, the seconds). */
static void
note_second(struct dmutex__etcd *e, const struct dmutex__acq *a, const struct keys *k,
		const json_t *head, const json_t *next, int64_t lease)
{
	char hk[DMUTEX__ETCD_KEY_MAX], nk[DMUTEX__ETCD_KEY_MAX];
	int64_t rev;
	int bad = 0;

	if (!json_is_object(next)
			|| dmutex__etcd_unb64(json_string_value(json_object_get(head, "key")), hk, sizeof hk) < 0
			|| dmutex__etcd_unb64(json_string_value(json_object_get(next, "key")), nk, sizeof nk) < 0
			|| strcmp(nk, k->own) || (rev = dmutex__etcd_int(next, "create_revision", &bad)) <= 0
			|| bad || dmutex__etcd_int(next, "lease", &bad) != lease || bad)
		return;
	dmutex__etcd_second_set(e, a->token, hk, rev, lease);
}

/* The failure branch: queued or not, the head is ours or someone's. */
static int
read_queue(struct dmutex__etcd *e, struct dmutex__acq *a, const struct keys *k, const json_t *rep,
		int64_t lease)
{
	json_t *head = dmutex__etcd_resp(rep, 1, "range", "the queue"), *st = NULL, *nr = NULL, *kv;
	char key[DMUTEX__ETCD_KEY_MAX];
	int bad = 0;

	if (a->robust && (!(st = dmutex__etcd_resp(rep, 2, "range", "the state"))
			|| !(nr = dmutex__etcd_resp(rep, 3, "range", "the mark"))))
		return EIO;
	if (!head)
		return EIO;
	a->maybe_done = a->wait;
	if (nr && dmutex__etcd_first_kv(nr)) {
		a->status = DMUTEX__ACQ_NOTREC;
		return 0;
	}
	kv = dmutex__etcd_first_kv(head);
	if (!kv || dmutex__etcd_unb64(json_string_value(json_object_get(kv, "key")), key, sizeof key) < 0
			|| strcmp(key, k->own)) {
		a->status = DMUTEX__ACQ_BUSY;
		a->pttl_ms = -1;
		if (kv && a->wait && !a->robust)
			note_second(e, a, k, kv, json_array_get(json_object_get(head, "kvs"), 1), lease);
		return 0;
	}
	a->fence = (uint64_t)dmutex__etcd_int(kv, "create_revision", &bad);
	if (bad || !a->fence) {
		dmutex__log(DMUTEX_LOG_ERROR, "etcd: unexpected reply to a lock's txn: no create revision");
		return EIO;
	}
	a->status = DMUTEX__ACQ_OK;
	if (!a->robust)
		return 0;
	a->died = died(st, a->token);
	return claim_state(e, a, k, (int64_t)a->fence);
}

/* A waiter whose key is queued asks again: a read of the queue, no
 * write (no Raft commit).  EAGAIN: its key is gone (its lease ended):
 * queue it again. */
static int
recheck(struct dmutex__etcd *e, struct dmutex__acq *a, const struct keys *k, int64_t lease)
{
	json_t *req, *rep = NULL, *own;
	int err;

	req = a->robust ? json_pack("{s:[o,o,o,o]}", "success", op_range(k->own, NULL, 0),
			op_range(k->q, k->q_end, 1), op_range(k->s, NULL, 0), op_range(k->n, NULL, 0))
		: json_pack("{s:[o,o]}", "success", op_range(k->own, NULL, 0),
			op_range(k->q, k->q_end, 1));
	if (!req)
		return ENOMEM;
	err = dmutex__etcd_txn(e, req, &rep, a->deadline, NULL, &a->refused);
	json_decref(req);
	a->maybe_done = 1;      /* queued: taken back if the caller gives up */
	if (!err && !(own = dmutex__etcd_resp(rep, 0, "range", "our key")))
		err = EIO;
	if (!err && !dmutex__etcd_first_kv(own))
		err = EAGAIN;
	if (!err)
		err = read_queue(e, a, k, rep, lease);
	json_decref(rep);
	return err;
}

/* After an answer: whether our key stays queued for the next try. */
static void
note_queued(struct dmutex__etcd *e, const struct dmutex__acq *a, int err)
{
	int queued = !err && a->status == DMUTEX__ACQ_BUSY && a->wait;

	if (queued && !dmutex__etcd_tok_has(e, &e->queued, a->token))
		dmutex__etcd_tok_add(e, &e->queued, a->token);
	else if (!queued)
		dmutex__etcd_tok_take(e, &e->queued, a->token);
	if (!queued || a->robust)
		dmutex__etcd_second_ready(e, a->token, -1, NULL);
}

/* The end of every try: what the next try and the release must know. */
static int
settled(struct dmutex__etcd *e, struct dmutex__acq *a, int err)
{
	note_queued(e, a, err);
	/* Its release must clear the robust state: remembered (else taken
	 * back at once, which does). */
	if (!err && a->robust && a->status == DMUTEX__ACQ_OK
			&& !dmutex__etcd_tok_has(e, &e->robust, a->token)
			&& dmutex__etcd_tok_add(e, &e->robust, a->token)) {
		a->maybe_done = 1;
		err = EIO;
	}
	return err;
}

int
dmutex__etcd_acquire(struct dmutex__backend *be, struct dmutex__acq *a)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	struct keys k;
	json_t *req, *rep = NULL;
	int64_t lease, rev;
	int err, bad = 0;

	a->maybe_done = a->refused = a->died = a->split = 0;
	a->pttl_ms = -1;
	/* One deadline for the whole try, its keep-alive, read and write
	 * included: a try is bounded by one command timeout, and by the
	 * caller's deadline when that comes first (trylock, a timed lock). */
	int64_t own = dmutex__now_ns() + (int64_t)be->cfg.command_timeout_ms * DMUTEX__MS;
	if (!a->deadline || a->deadline > own)
		a->deadline = own;
	make_keys(e, a->name, a->token, &k);
	if (a->wait && dmutex__etcd_tok_has(e, &e->queued, a->token)) {
		/* The lease kept alive as for any try; the key on it read. */
		if ((err = dmutex__etcd_lease_for(e, a->lease_ms, a->deadline, &lease)))
			return err;
		if (!a->robust && dmutex__etcd_second_ready(e, a->token, lease, &rev)) {
			a->status = DMUTEX__ACQ_OK;
			a->fence = (uint64_t)rev;
			return settled(e, a, 0);
		}
		if ((err = recheck(e, a, &k, lease)) != EAGAIN)
			return settled(e, a, err);
		a->maybe_done = 0;
	}
	/* A refusal is most likely our lease gone (a pause, a long idle):
	 * once more on a new one. */
	for (int round = 0; round < 2; round++) {
		if ((err = dmutex__etcd_lease_for(e, a->lease_ms, a->deadline, &lease)))
			return err;
		if (!(req = acquire_txn(e, a, &k, lease)))
			return ENOMEM;
		err = dmutex__etcd_txn(e, req, &rep, a->deadline, &a->maybe_done, &a->refused);
		json_decref(req);
		if (!err || !a->refused)
			break;
		dmutex__etcd_lease_forget(e, lease);
	}
	if (err)
		return err;
	if (!dmutex__etcd_bool(rep, "succeeded")) {
		err = read_queue(e, a, &k, rep, lease);
	} else {
		json_t *st = a->robust ? dmutex__etcd_resp(rep, 0, "range", "the state") : NULL;
		json_t *hdr = json_object_get(rep, "header");
		a->fence = (uint64_t)dmutex__etcd_int(hdr, "revision", &bad);
		if ((a->robust && !st) || bad || !a->fence)
			err = EIO;
		a->died = !err && a->robust && died(st, a->token);
		a->status = DMUTEX__ACQ_OK;
		a->maybe_done = err != 0;
	}
	json_decref(rep);
	return settled(e, a, err);
}

/* A hold not robust ends with one delete (no txn): it counts what it
 * deleted, 1 while the hold was still ours. */
static int
release_plain(struct dmutex__etcd *e, const char *own, int64_t deadline, int *released,
		int *maybe_done)
{
	json_t *req = dmutex__etcd_key(own, NULL), *rep = NULL;
	int err, bad = 0;

	if (!req)
		return ENOMEM;
	err = dmutex__etcd_call(e->http, "/v3/kv/deleterange", req, &rep, deadline, maybe_done, NULL);
	json_decref(req);
	if (!err) {
		*released = dmutex__etcd_int(rep, "deleted", &bad) > 0;
		if (bad) {
			dmutex__log(DMUTEX_LOG_ERROR, "etcd: unexpected reply to /v3/kv/deleterange");
			err = EIO;
		}
	}
	json_decref(rep);
	return err;
}

int
dmutex__etcd_release(struct dmutex__backend *be, const char *name, const char *token,
		int mode, int64_t deadline, int *released, int *maybe_done)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	struct keys k;
	json_t *req, *ops, *rep = NULL;
	int err, robust;

	*released = *maybe_done = 0;
	make_keys(e, name, token, &k);
	mode &= ~DMUTEX__REL_FAIR;
	/* A death keeps the state (the next locker gets EOWNERDEAD); every
	 * other end of a robust hold takes back our state, if it is ours (a
	 * clean unlock of a hold not robust has none: one delete). */
	robust = dmutex__etcd_tok_take(e, &e->robust, token);
	dmutex__etcd_tok_take(e, &e->queued, token);
	dmutex__etcd_second_ready(e, token, -1, NULL);
	if (mode == DMUTEX__REL_CLEAN && !robust)
		return release_plain(e, k.own, deadline, released, maybe_done);
	ops = json_pack("[o]", dmutex__etcd_op_del(k.own, NULL));
	if (ops && mode != DMUTEX__REL_DIED && (mode != DMUTEX__REL_CLEAN || robust))
		json_array_append_new(ops, json_pack("{s:{s:[o], s:[o]}}", "request_txn",
				"compare", cmp(k.s, NULL, "VALUE", "EQUAL", token),
				"success", dmutex__etcd_op_del(k.s, NULL)));
	if (ops && mode == DMUTEX__REL_NOTREC)
		json_array_append_new(ops, dmutex__etcd_op_put(k.n, "notrecoverable", 0));
	req = ops ? json_pack("{s:[o], s:o}", "compare", cmp(k.own, NULL, "VERSION", "GREATER", "0"),
			"success", ops) : NULL;
	if (!req)
		return ENOMEM;
	err = dmutex__etcd_txn(e, req, &rep, deadline, maybe_done, NULL);
	json_decref(req);
	if (!err)
		*released = dmutex__etcd_bool(rep, "succeeded");
	json_decref(rep);
	return err;
}

char *
dmutex__etcd_channel(struct dmutex__backend *be, const char *name)
{
	char q[DMUTEX__ETCD_KEY_MAX], *ch;

	dmutex__etcd_name_key(dmutex__etcd_of(be), q, "m", name, "q/");
	if ((ch = malloc(strlen(q) + 4)))
		sprintf(ch, "dp:%s", q);
	return ch;
}
