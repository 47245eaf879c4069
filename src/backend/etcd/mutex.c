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

/* make: an acquisition's (token gets a slot for its own key, etcd.h):
 * 0, or ENOMEM. */
static int
make_keys(struct dmutex__etcd *e, const char *name, const char *token, int make, struct keys *k)
{
	dmutex__etcd_name_key(e, k->q, "m", name, "q/");
	dmutex__etcd_prefix_end(k->q, k->q_end);
	dmutex__etcd_name_key(e, k->s, "m", name, "s");
	dmutex__etcd_name_key(e, k->n, "m", name, DMUTEX__ETCD_MARK);
	return dmutex__etcd_own_key(e, k->q, token, make, k->own);
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

/* A hold key's value: who holds it, for `dmutex status`, and the hold's
 * token (the key's name is not: etcd.h, own keys). */
static void
who_of(const struct dmutex__etcd *e, const struct dmutex__acq *a, char *who, size_t len)
{
	snprintf(who, len, "%s %ld %ld %s", e->base.cfg.host ? e->base.cfg.host : "",
			(long)*e->base.cfg.pid, a->tid, a->token);
}

/* The uncontended lock's request, the hot path, built by hand (no JSON
 * tree, no allocation): a free lock (nobody queued) is ours with one put;
 * nothing on failure (etcd parses every op of a txn, run or not: a failure
 * branch cost the uncontended lock ~45 us of etcd's time), the waiter
 * queues with queue_txn next. */
static int
plain_txn(struct dmutex__etcd *e, struct dmutex__acq *a, const struct keys *k, int64_t lease,
		json_t **rep, int *won)
{
	int64_t rev;
	const char *rest;
	char *text;
	int err;
	char who[300], wb[DMUTEX__ETCD_B64_LEN(sizeof who)];
	char nr[DMUTEX__ETCD_B64_LEN(DMUTEX__ETCD_KEY_MAX)], end[sizeof nr], own[sizeof nr];
	char body[4 * sizeof nr + sizeof wb];
	int n;

	who_of(e, a, who, sizeof who);
	if (dmutex__etcd_b64_to(k->q_end, strlen(k->q_end), end, sizeof end)
			|| dmutex__etcd_b64_to(k->own, strlen(k->own), own, sizeof own)
			|| dmutex__etcd_b64_to(k->n, strlen(k->n), nr, sizeof nr)
			|| dmutex__etcd_b64_to(who, strlen(who), wb, sizeof wb))
		return EINVAL;          /* not with keys of DMUTEX__ETCD_KEY_MAX */
	/* The not-recoverable mark is every locker's (README "ENOTRECOVERABLE
	 * is per name"): the range from it to the queue's end holds the mark
	 * and the queue (etcd.h), so one compare says "nobody queued, not
	 * marked" (a second compare cost up to ~5% of the cycle); queue_txn or
	 * read_txn reads which. */
	n = snprintf(body, sizeof body, "{\"compare\":[{\"key\":\"%s\",\"range_end\":\"%s\","
			"\"target\":\"VERSION\",\"result\":\"EQUAL\",\"version\":\"0\"}],"
			"\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\","
			"\"lease\":\"%lld\"}}]}", nr, end, own, wb, (long long)lease);
	if (n < 0 || (size_t)n >= sizeof body)
		return EINVAL;
	if ((err = dmutex__etcd_post_text(e->http, "/v3/kv/txn", body, (size_t)n, &text, rep,
			a->deadline, &a->maybe_done, &a->refused)))
		return err;
	/* Read from the text: applied, its revision the fence; or not (etcd
	 * leaves out a false "succeeded": the header alone).  Any other
	 * shape is parsed whole and read as any answer. */
	*won = 0;
	if (text && !dmutex__etcd_text_header(text, &rev, &rest)
			&& !strncmp(rest, ",\"succeeded\":true", 17) && (rest[17] == ',' || rest[17] == '}')) {
		*won = 1;
		a->fence = (uint64_t)rev;
	} else if (text && !dmutex__etcd_text_header(text, &rev, &rest) && !strcmp(rest, "}")) {
		*won = 0;
	} else if (text && !(*rep = json_loads(text, 0, NULL))) {
		dmutex__log(DMUTEX_LOG_ERROR, "etcd: unexpected reply to /v3/kv/txn: %.60s", text);
		err = EIO;
	} else {
		*won = dmutex__etcd_bool(*rep, "succeeded");
	}
	free(text);
	return err;
}

/* A waiter of a lock not robust that found it taken: queue its key and
 * read the head (and who is next), the robust state (a robust head's
 * release may mark the lock, which the watch does not show) and the mark. */
static json_t *
queue_txn(struct dmutex__etcd *e, const struct dmutex__acq *a, const struct keys *k, int64_t lease)
{
	char who[300];

	who_of(e, a, who, sizeof who);
	return json_pack("{s:[o,o,o,o]}", "success", dmutex__etcd_op_put(k->own, who, lease),
			op_range(k->q, k->q_end, 1), op_range(k->s, NULL, 0), op_range(k->n, NULL, 0));
}

/* A robust lock's acquisition txn: a free lock (nobody queued, not "not
 * recoverable") is ours at once, its robust state read and set; else
 * queue (wait) and read the head, the state and the not-recoverable mark. */
static json_t *
acquire_txn(struct dmutex__etcd *e, const struct dmutex__acq *a, const struct keys *k, int64_t lease)
{
	char who[300];

	who_of(e, a, who, sizeof who);
	return json_pack("{s:[o,o], s:[o,o,o], s:[o,o,o,o]}",
		"compare", dmutex__etcd_cmp_none(k->q, k->q_end),
			dmutex__etcd_cmp_none(k->n, NULL),
		"success", op_range(k->s, NULL, 0), dmutex__etcd_op_put(k->own, who, lease),
			dmutex__etcd_op_put(k->s, a->token, 0),
		"failure", a->wait ? dmutex__etcd_op_put(k->own, who, lease) : op_range(k->own, NULL, 0),
			op_range(k->q, k->q_end, 1), op_range(k->s, NULL, 0), op_range(k->n, NULL, 0));
}

/* Our key, the queue, the robust state and the mark: a read, no Raft
 * commit. */
static json_t *
read_txn(const struct keys *k)
{
	return json_pack("{s:[o,o,o,o]}", "success", op_range(k->own, NULL, 0),
			op_range(k->q, k->q_end, 1), op_range(k->s, NULL, 0), op_range(k->n, NULL, 0));
}

/* One try's txn (two for a lock not robust found taken): 0, *won 1 if
 * the first took the lock, and *rep (NULL: the hot path's answer, read
 * by plain_txn); *queued 1 if *rep is the second's answer (the queue
 * read). */
static int
take_txn(struct dmutex__etcd *e, struct dmutex__acq *a, const struct keys *k, int64_t lease,
		json_t **rep, int *won, int *queued)
{
	json_t *req;
	int err;

	*queued = *won = 0;
	if (a->robust) {
		if (!(req = acquire_txn(e, a, k, lease)))
			return ENOMEM;
		err = dmutex__etcd_txn(e, req, rep, a->deadline, &a->maybe_done, &a->refused);
		json_decref(req);
		*won = !err && dmutex__etcd_bool(*rep, "succeeded");
		return err;
	}
	if ((err = plain_txn(e, a, k, lease, rep, won)) || *won)
		return err;
	/* Not applied (the compare failed): a waiter queues now; a try that
	 * will not wait reads the queue (our key may be its head: a try
	 * asked again after a lost answer). */
	json_decref(*rep);
	*rep = NULL;
	*queued = 1;
	if (!(req = a->wait ? queue_txn(e, a, k, lease) : read_txn(k)))
		return ENOMEM;
	err = dmutex__etcd_txn(e, req, rep, a->deadline, a->wait ? &a->maybe_done : NULL,
			&a->refused);
	json_decref(req);
	return err;
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
	req = json_pack("{s:[o], s:[o]}", "compare", dmutex__etcd_cmp(k->own, NULL, "CREATE", "EQUAL", r),
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
	int64_t rev, head_rev;
	int bad = 0;

	if (!json_is_object(next)
			|| dmutex__etcd_unb64(json_string_value(json_object_get(head, "key")), hk, sizeof hk) < 0
			|| dmutex__etcd_unb64(json_string_value(json_object_get(next, "key")), nk, sizeof nk) < 0
			|| strcmp(nk, k->own) || (rev = dmutex__etcd_int(next, "create_revision", &bad)) <= 0
			|| (head_rev = dmutex__etcd_int(head, "create_revision", &bad)) <= 0
			|| bad || dmutex__etcd_int(next, "lease", &bad) != lease || bad)
		return;
	dmutex__etcd_second_set(e, a->token, hk, head_rev, k->own, rev, lease);
}

/* The failure branch: queued or not, the head is ours or someone's. */
static int
read_queue(struct dmutex__etcd *e, struct dmutex__acq *a, const struct keys *k, const json_t *rep,
		int64_t lease)
{
	json_t *head = dmutex__etcd_resp(rep, 1, "range", "the queue"), *st = NULL, *nr = NULL, *kv;
	char key[DMUTEX__ETCD_KEY_MAX];
	int bad = 0;

	if (!(st = dmutex__etcd_resp(rep, 2, "range", "the state"))
			|| !(nr = dmutex__etcd_resp(rep, 3, "range", "the mark")))
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
		/* Not behind a robust head (its state is there): its
		 * release may mark the lock not recoverable, which the
		 * watch on the queue does not show. */
		if (kv && a->wait && !a->robust && !dmutex__etcd_first_kv(st))
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

	if (!(req = read_txn(k)))
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
	/* Nothing of ours put, or it is known gone: the key's name is free
	 * for the next hold (a hold, a queued key or a maybe is released by
	 * the core, which frees it then). */
	if (!a->maybe_done && (err || a->status != DMUTEX__ACQ_OK)
			&& !(a->wait && !err && a->status == DMUTEX__ACQ_BUSY))
		dmutex__etcd_own_free(e, a->token);
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
	json_t *rep = NULL;
	int64_t lease, rev;
	int err, bad = 0, queued, won;

	a->maybe_done = a->refused = a->died = a->split = 0;
	a->pttl_ms = -1;
	/* One deadline for the whole try, its keep-alive, read and write
	 * included: a try is bounded by one command timeout, and by the
	 * caller's deadline when that comes first (trylock, a timed lock). */
	int64_t own = dmutex__now_ns() + (int64_t)be->cfg.command_timeout_ms * DMUTEX__MS;
	if (!a->deadline || a->deadline > own)
		a->deadline = own;
	if ((err = make_keys(e, a->name, a->token, 1, &k)))
		return err;     /* nothing sent */
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
		if (!(err = take_txn(e, a, &k, lease, &rep, &won, &queued)) || !a->refused)
			break;
		dmutex__etcd_lease_forget(e, lease);
	}
	if (err)
		return err;
	if (queued || !won) {
		err = read_queue(e, a, &k, rep, lease);
	} else {
		json_t *st = a->robust ? dmutex__etcd_resp(rep, 0, "range", "the state") : NULL;
		/* No answer to read: plain_txn read the fence from its text. */
		if (rep)
			a->fence = (uint64_t)dmutex__etcd_int(json_object_get(rep, "header"),
					"revision", &bad);
		if ((a->robust && !st) || bad || !a->fence)
			err = EIO;
		a->died = !err && a->robust && died(st, a->token);
		a->status = DMUTEX__ACQ_OK;
		a->maybe_done = err != 0;
	}
	json_decref(rep);
	return settled(e, a, err);
}

/* A hold not robust ends with one delete (no txn; its body built by
 * hand, the hot path): it counts what it deleted, 1 while the hold was
 * still ours. */
static int
release_plain(struct dmutex__etcd *e, const char *own, int64_t deadline, int *released,
		int *maybe_done)
{
	char k[DMUTEX__ETCD_B64_LEN(DMUTEX__ETCD_KEY_MAX)], body[sizeof k + 16], *text;
	const char *rest;
	json_t *rep = NULL;
	int64_t rev;
	int err, bad = 0, n;

	if (dmutex__etcd_b64_to(own, strlen(own), k, sizeof k)
			|| (n = snprintf(body, sizeof body, "{\"key\":\"%s\"}", k)) < 0
			|| (size_t)n >= sizeof body)
		return EINVAL;          /* not with keys of DMUTEX__ETCD_KEY_MAX */
	err = dmutex__etcd_post_text(e->http, "/v3/kv/deleterange", body, (size_t)n, &text, &rep,
			deadline, maybe_done, NULL);
	/* From the text: "deleted" follows the header, or is left out (0). */
	if (!err && text && !dmutex__etcd_text_header(text, &rev, &rest)
			&& (!strcmp(rest, "}") || !strncmp(rest, ",\"deleted\":\"", 12))) {
		*released = *rest == ',' && strtoll(rest + 12, NULL, 10) > 0;
		free(text);
		return 0;
	}
	if (!err && text && !(rep = json_loads(text, 0, NULL)))
		bad = 1;
	free(text);
	if (!err) {
		*released = dmutex__etcd_int(rep, "deleted", &bad) > 0;
		if (bad) {
			dmutex__log(DMUTEX_LOG_ERROR, "etcd: unexpected reply to /v3/kv/deleterange");
			/* It was answered: the delete ran. */
			err = EIO;
			*maybe_done = 1;
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
	make_keys(e, name, token, 0, &k);       /* a lookup: never fails */
	mode &= ~DMUTEX__REL_FAIR;
	/* A death keeps the state (the next locker gets EOWNERDEAD); every
	 * other end of a robust hold takes back our state, if it is ours (a
	 * clean unlock of a hold not robust has none: one delete). */
	robust = dmutex__etcd_tok_take(e, &e->robust, token);
	dmutex__etcd_tok_take(e, &e->queued, token);
	dmutex__etcd_second_ready(e, token, -1, NULL);
	if (mode == DMUTEX__REL_CLEAN && !robust) {
		err = release_plain(e, k.own, deadline, released, maybe_done);
		goto out;
	}
	ops = json_pack("[o]", dmutex__etcd_op_del(k.own, NULL));
	if (ops && mode != DMUTEX__REL_DIED && (mode != DMUTEX__REL_CLEAN || robust))
		json_array_append_new(ops, json_pack("{s:{s:[o], s:[o]}}", "request_txn",
				"compare", dmutex__etcd_cmp(k.s, NULL, "VALUE", "EQUAL", token),
				"success", dmutex__etcd_op_del(k.s, NULL)));
	if (ops && mode == DMUTEX__REL_NOTREC)
		json_array_append_new(ops, dmutex__etcd_op_put(k.n, "notrecoverable", 0));
	req = ops ? json_pack("{s:[o], s:o}", "compare", dmutex__etcd_cmp(k.own, NULL, "VERSION", "GREATER", "0"),
			"success", ops) : NULL;
	if (!req)
		return ENOMEM;
	err = dmutex__etcd_txn(e, req, &rep, deadline, maybe_done, NULL);
	json_decref(req);
	if (!err)
		*released = dmutex__etcd_bool(rep, "succeeded");
	json_decref(rep);
out:
	/* Answered: the key is gone (or was not there), its name free. */
	if (!err)
		dmutex__etcd_own_free(e, token);
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
