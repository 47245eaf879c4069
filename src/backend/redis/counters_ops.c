/* Per-lock counters into Redis (counters.h): one MULTI/EXEC on the node
 * that serves their slot, on any topology. */
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "base/base.h"
#include "counters.h"
#include "base/log.h"
#include "node.h"

const char *const dmutex__met_fields[DMUTEX__MET_NFIELDS] = {
	"acq", "contended", "lost", "renewals", "errors", "wait_us",
	"wait_b0", "wait_b1", "wait_b2", "wait_b3", "wait_b4",
	"wait_b5", "wait_b6", "wait_b7", "wait_b8", "wait_b9",
	"holds", "hold_us",
	"hold_b0", "hold_b1", "hold_b2", "hold_b3", "hold_b4",
	"hold_b5", "hold_b6", "hold_b7", "hold_b8", "hold_b9",
};

static void
refused(const char *why)
{
	dmutex__log(DMUTEX_LOG_WARN, "per-lock counters not stored: %s (they need "
			"MULTI, EXEC, HINCRBY, ZINCRBY, PEXPIRE, ZADD, ZRANGEBYSCORE, ZREM, "
			"ZCARD, ZSCAN; ?metrics=0 turns them off)", why);
}

/* "ZADD seen MS name MS name ...": when each name of the batch was last
 * counted, for dmutex__redis_counters_trim.  On the heap: the flush at
 * dmutex_client_close runs on the caller's stack, which may be small. */
static int
append_seen(struct dmutex__conn *cn, const char *sk, const struct dmutex__count *v, size_t n)
{
	char ms[24];
	size_t msl = dmutex__udec(ms, (unsigned long long)dmutex__wall_ms());
	const char **argv = malloc((2 + 2 * n) * sizeof *argv);
	size_t *lens = malloc((2 + 2 * n) * sizeof *lens);
	int rc = -1;

	if (argv && lens) {
		argv[0] = "ZADD";
		lens[0] = 4;
		argv[1] = sk;
		lens[1] = strlen(sk);
		for (size_t i = 0; i < n; i++) {
			argv[2 + 2 * i] = ms;
			lens[2 + 2 * i] = msl;
			argv[3 + 2 * i] = v[i].name;
			lens[3 + 2 * i] = strlen(v[i].name);
		}
		rc = dmutex__conn_append_argv(cn, (int)(2 + 2 * n), argv, lens);
	}
	free(argv);
	free(lens);
	return rc;
}

/* A connection to the node serving key's slot, and its deadline by until;
 * NULL if none.  A cluster's face is never dialled: the member serving the
 * slot of {metrics} takes them (every key has that hash tag). */
static struct dmutex__conn *
counters_conn(struct dmutex__backend *be, const char *key, struct dmutex__node **nd, int64_t until,
		int64_t *deadline)
{
	struct dmutex__conn *cn;

	*nd = be->ops->node_of ? be->ops->node_of(be, key) : &be->nodes[0];
	if (!*nd || !(cn = dmutex__node_get_by(*nd, until)))
		return NULL;
	*deadline = dmutex__conn_deadline(cn);
	if (*deadline > until)
		*deadline = until;
	return cn;
}

/* One command of three or four arguments, queued without a format string. */
static int
append4(struct dmutex__conn *cn, const char *cmd, const char *key, const char *a,
		unsigned long long d, const char *b, size_t blen)
{
	char num[24];
	const char *argv[4] = { cmd, key, NULL, NULL };
	size_t lens[4] = { strlen(cmd), strlen(key), 0, 0 };

	if (b) {
		/* ZINCRBY key increment member */
		lens[2] = dmutex__udec(num, d);
		argv[2] = num;
		argv[3] = b;
		lens[3] = blen;
	} else {
		/* HINCRBY key field increment */
		argv[2] = a;
		lens[2] = strlen(a);
		lens[3] = dmutex__udec(num, d);
		argv[3] = num;
	}
	return dmutex__conn_append_argv(cn, 4, argv, lens);
}

/* MULTI, sent alone the first time (*multi_ok 0), else queued (*q
 * counts it; *bad set if it could not be).  DMUTEX__CNT_SENT to go on,
 * else what the batch came to (cn freed or given back). */
static int
begin(struct dmutex__node *nd, struct dmutex__conn *cn, int64_t deadline, int *multi_ok,
		size_t *q, int *bad)
{
	if (*multi_ok) {
		*bad |= dmutex__conn_appendf(cn, "MULTI");
		(*q)++;
		return DMUTEX__CNT_SENT;
	}
	/* Once per client, MULTI alone: refused (an ACL without it), the
	 * increments that follow would run one by one, half of them refused
	 * too.  Then the counters stay in the process. */
	redisReply *r = dmutex__conn_command(cn, deadline, "MULTI");
	if (!r) {
		dmutex__conn_free(cn);
		return DMUTEX__CNT_NOT_SENT;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		refused(r->str);
		freeReplyObject(r);
		dmutex__node_put(nd, cn);
		return DMUTEX__CNT_REFUSED;
	}
	freeReplyObject(r);
	*multi_ok = 1;
	return DMUTEX__CNT_SENT;
}

/* Queue the batch's commands (none once bad) and EXEC behind MULTI; *q
 * counts them.  Nonzero if one could not be queued, or bad was. */
static int
append_batch(struct dmutex__backend *be, struct dmutex__conn *cn, const struct dmutex__count *v,
		size_t n, const char *tk, const char *ik, size_t *q, int bad)
{
	char nk[DMUTEX__MET_KEY_MAX], idle[24];
	unsigned long long sum[DMUTEX__MET_NFIELDS] = { 0 };
	const char *pre = be->cfg.prefix;

	idle[dmutex__udec(idle, be->cfg.idle_ms)] = '\0';
	for (size_t i = 0; i < n && !bad; i++) {
		dmutex__met_key(nk, pre, "n:", v[i].name);
		for (int f = 0; f < DMUTEX__MET_NFIELDS && !bad; f++) {
			unsigned long long d = (unsigned long long)v[i].delta[f];
			if (!d)
				continue;
			sum[f] += d;
			bad |= append4(cn, "HINCRBY", nk, dmutex__met_fields[f], d, NULL, 0);
			(*q)++;
			if (f == DMUTEX__MET_ACQ) {
				bad |= append4(cn, "ZINCRBY", ik, NULL, d, v[i].name, strlen(v[i].name));
				(*q)++;
			}
		}
		/* A name's counters live as long as its state would. */
		bad |= dmutex__conn_appendf(cn, "PEXPIRE %s %s", nk, idle);
		(*q)++;
	}
	if (!bad && n) {
		dmutex__met_key(nk, pre, "seen", NULL);
		bad |= append_seen(cn, nk, v, n);
		(*q)++;
	}
	/* The total once per batch, not once per name: the same sums, and
	 * a batch of names each locked once (fresh names) costs Redis half
	 * the commands. */
	for (int f = 0; f < DMUTEX__MET_NFIELDS && !bad; f++)
		if (sum[f]) {
			bad |= append4(cn, "HINCRBY", tk, dmutex__met_fields[f], sum[f], NULL, 0);
			(*q)++;
		}
	bad |= dmutex__conn_appendf(cn, "EXEC");
	(*q)++;
	return bad;
}

/* Read the q answers of a batch: DMUTEX__CNT_SENT, _NOT_SENT or
 * _REFUSED, with *bad set if one did not come. */
static int
exec_replies(struct dmutex__backend *be, struct dmutex__conn *cn, size_t q, int64_t deadline,
		int *bad)
{
	int st = DMUTEX__CNT_SENT;

	for (size_t i = 0; i < q && !*bad; i++) {
		redisReply *r = NULL;
		if (dmutex__conn_get(cn, (void **)&r, deadline)) {
			*bad = 1;
			break;
		}
		/* A command refused inside MULTI aborts the whole transaction:
		 * nothing was added.  A slot that moved (cluster) or a passing
		 * state is no refusal: the batch goes again.  Else said once,
		 * and not sent again. */
		if (r->type == REDIS_REPLY_ERROR && st == DMUTEX__CNT_SENT) {
			if (dmutex__node_redirect(r) || dmutex__node_transient(r)) {
				/* Moved, or passing (CLUSTERDOWN during a
				 * failover, LOADING, READONLY...): again later. */
				st = DMUTEX__CNT_NOT_SENT;
				if (be->ops->sub_stale && dmutex__node_redirect(r))
					be->ops->sub_stale(be, r->str);
			} else {
				st = DMUTEX__CNT_REFUSED;
				refused(r->str);
			}
		}
		freeReplyObject(r);
	}
	return st;
}

int
dmutex__redis_counters(struct dmutex__backend *be, const struct dmutex__count *v,
		size_t n, int *multi_ok, int64_t until)
{
	char tk[DMUTEX__MET_KEY_MAX], ik[DMUTEX__MET_KEY_MAX];
	struct dmutex__node *nd;
	struct dmutex__conn *cn;
	int64_t deadline;
	size_t q = 0;
	int bad = 0, st;

	dmutex__met_key(tk, be->cfg.prefix, "total", NULL);
	dmutex__met_key(ik, be->cfg.prefix, "index", NULL);
	if (!(cn = counters_conn(be, tk, &nd, until, &deadline)))
		return DMUTEX__CNT_NOT_SENT;
	if ((st = begin(nd, cn, deadline, multi_ok, &q, &bad)) != DMUTEX__CNT_SENT)
		return st;
	bad = append_batch(be, cn, v, n, tk, ik, &q, bad);
	st = exec_replies(be, cn, q, deadline, &bad);
	if (bad) {
		dmutex__conn_free(cn);
		/* Sent, maybe in part: the server may have applied it. */
		return DMUTEX__CNT_MAYBE;
	}
	dmutex__node_put(nd, cn);
	return st;
}

/* The ZCARD of index and of seen, pipelined: 1 if index has more names. */
static int
index_has_more(struct dmutex__conn *cn, const char *ik, const char *sk, int64_t deadline)
{
	long long card[2] = { -1, -1 };

	if (dmutex__conn_appendf(cn, "ZCARD %s", ik) || dmutex__conn_appendf(cn, "ZCARD %s", sk))
		return -1;
	for (int i = 0; i < 2; i++) {
		redisReply *r = NULL;
		if (dmutex__conn_get(cn, (void **)&r, deadline))
			return -1;
		if (r->type == REDIS_REPLY_INTEGER)
			card[i] = r->integer;
		else if (r->type == REDIS_REPLY_ERROR)
			dmutex__log(DMUTEX_LOG_DEBUG, "per-lock counters not trimmed: %s", r->str);
		freeReplyObject(r);
	}
	return card[0] >= 0 && card[1] >= 0 && card[0] > card[1];
}

int
dmutex__redis_counters_trim(struct dmutex__backend *be, size_t max, int64_t until)
{
	char ik[DMUTEX__MET_KEY_MAX], sk[DMUTEX__MET_KEY_MAX];
	long long cutoff = (long long)dmutex__wall_ms() - (long long)be->cfg.idle_ms;
	struct dmutex__node *nd;
	struct dmutex__conn *cn;
	redisReply *r;
	int64_t deadline;
	int bad = 0, n = 0;

	dmutex__met_key(ik, be->cfg.prefix, "index", NULL);
	dmutex__met_key(sk, be->cfg.prefix, "seen", NULL);
	if (!(cn = counters_conn(be, sk, &nd, until, &deadline)))
		return -1;
	if (!(r = dmutex__conn_command(cn, deadline, "ZRANGEBYSCORE %s -inf %lld LIMIT 0 %llu", sk, cutoff,
			(unsigned long long)max))) {
		dmutex__conn_free(cn);
		return -1;
	}
	if (r->type != REDIS_REPLY_ARRAY) {
		/* Refused (an ACL without it), or a stray type: not our keys
		 * to fix.  Said at debug level: the counters' own refusal is
		 * the warning an operator needs. */
		dmutex__log(DMUTEX_LOG_DEBUG, "per-lock counters not trimmed: %s",
				r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
		freeReplyObject(r);
		dmutex__node_put(nd, cn);
		return -1;
	}
	if (r->elements) {
		size_t k = r->elements;
		const char **argv = malloc((k + 2) * sizeof *argv);
		size_t *lens = malloc((k + 2) * sizeof *lens);
		bad = !argv || !lens;
		for (size_t i = 0; i < k && !bad; i++) {
			bad = r->element[i]->type != REDIS_REPLY_STRING;
			argv[i + 2] = bad ? NULL : r->element[i]->str;
			lens[i + 2] = bad ? 0 : r->element[i]->len;
		}
		if (!bad) {
			/* Both sets, in that order: a name is never in index
			 * without seen, so none is left behind for ever. */
			argv[0] = "ZREM";
			lens[0] = 4;
			argv[1] = ik;
			lens[1] = strlen(ik);
			bad |= dmutex__conn_append_argv(cn, (int)k + 2, argv, lens);
			argv[1] = sk;
			lens[1] = strlen(sk);
			bad |= dmutex__conn_append_argv(cn, (int)k + 2, argv, lens);
			for (int i = 0; i < 2 && !bad; i++) {
				redisReply *z = NULL;
				if (dmutex__conn_get(cn, (void **)&z, deadline)) {
					bad = 1;
					break;
				}
				freeReplyObject(z);
			}
			n = (int)k;
		}
		free(argv);
		free(lens);
	}
	freeReplyObject(r);
	if (bad) {
		dmutex__conn_free(cn);
		return -1;
	}
	dmutex__node_put(nd, cn);
	return n;
}

/* Pipelined, one reply per command appended; -1 if the connection failed.
 * *ttl_less (if given) gets for reply i the answer "no expiry" (-1). */
static int
replies(struct dmutex__conn *cn, size_t n, int64_t deadline, char *ttl_less)
{
	for (size_t i = 0; i < n; i++) {
		redisReply *r = NULL;
		if (dmutex__conn_get(cn, (void **)&r, deadline))
			return -1;
		if (ttl_less)
			ttl_less[i] = r->type == REDIS_REPLY_INTEGER && r->integer == -1;
		freeReplyObject(r);
	}
	return 0;
}

/*
 * One ZSCAN page of index names (page: name, score, name, score...): the
 * ones with no time in seen get the present one, and their hashes that
 * never expire (written before hashes expired) expire idle_ms from now,
 * as after a batch.  A hash with an expiry is left alone: a name counted
 * now keeps its own.  0; -1 out of memory or a stray reply; -2 the
 * connection failed.
 */
static int
adopt_page(struct dmutex__backend *be, struct dmutex__conn *cn, const char *sk,
		const redisReply *page, int64_t deadline)
{
	size_t k = page->elements / 2, msl, nexp = 0;
	const char **argv = malloc((3 + 2 * k) * sizeof *argv);
	size_t *lens = malloc((3 + 2 * k) * sizeof *lens);
	char *ttl_less = calloc(k + 1, 1);
	char ms[24], idle[24], nk[DMUTEX__MET_KEY_MAX];
	int rc = 0;

	if (!argv || !lens || !ttl_less) {
		rc = -1;
		goto out;
	}
	msl = dmutex__udec(ms, (unsigned long long)dmutex__wall_ms());
	idle[dmutex__udec(idle, be->cfg.idle_ms)] = '\0';
	argv[0] = "ZADD";
	lens[0] = 4;
	argv[1] = sk;
	lens[1] = strlen(sk);
	argv[2] = "NX";         /* only the names without a time get one */
	lens[2] = 2;
	for (size_t i = 0; i < k; i++) {
		const redisReply *name = page->element[2 * i];
		if (name->type != REDIS_REPLY_STRING) {
			rc = -1;
			goto out;
		}
		argv[3 + 2 * i] = ms;
		lens[3 + 2 * i] = msl;
		argv[4 + 2 * i] = name->str;
		lens[4 + 2 * i] = name->len;
	}
	if (dmutex__conn_append_argv(cn, (int)(3 + 2 * k), argv, lens)) {
		rc = -2;
		goto out;
	}
	for (size_t i = 0; i < k; i++) {
		dmutex__met_key(nk, be->cfg.prefix, "n:", page->element[2 * i]->str);
		if (dmutex__conn_appendf(cn, "PTTL %s", nk)) {
			rc = -2;
			goto out;
		}
	}
	/* Reply 0 is ZADD's; reply 1 + i the PTTL of name i. */
	if (replies(cn, 1 + k, deadline, ttl_less)) {
		rc = -2;
		goto out;
	}
	for (size_t i = 0; i < k; i++)
		if (ttl_less[1 + i]) {
			dmutex__met_key(nk, be->cfg.prefix, "n:", page->element[2 * i]->str);
			if (dmutex__conn_appendf(cn, "PEXPIRE %s %s", nk, idle)) {
				rc = -2;
				goto out;
			}
			nexp++;
		}
	if (nexp && replies(cn, nexp, deadline, NULL))
		rc = -2;
out:
	free(argv);
	free(lens);
	free(ttl_less);
	return rc;
}

int
dmutex__redis_counters_adopt(struct dmutex__backend *be, unsigned long long *cursor,
		size_t max, int64_t until)
{
	char ik[DMUTEX__MET_KEY_MAX], sk[DMUTEX__MET_KEY_MAX], cur[24];
	struct dmutex__node *nd;
	struct dmutex__conn *cn;
	redisReply *r;
	int64_t deadline;
	int rc;

	dmutex__met_key(ik, be->cfg.prefix, "index", NULL);
	dmutex__met_key(sk, be->cfg.prefix, "seen", NULL);
	if (!(cn = counters_conn(be, sk, &nd, until, &deadline)))
		return -1;
	if (!*cursor && (rc = index_has_more(cn, ik, sk, deadline)) <= 0) {
		if (rc < 0)
			dmutex__conn_free(cn);
		else
			dmutex__node_put(nd, cn);
		return rc;
	}
	cur[dmutex__udec(cur, *cursor)] = '\0';
	if (!(r = dmutex__conn_command(cn, deadline, "ZSCAN %s %s COUNT %llu", ik, cur,
			(unsigned long long)max))) {
		dmutex__conn_free(cn);
		return -1;
	}
	/* [next cursor, [name, score, name, score...]] */
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
			r->element[1]->type != REDIS_REPLY_ARRAY) {
		dmutex__log(DMUTEX_LOG_DEBUG, "per-lock counters not trimmed: %s",
				r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply to ZSCAN");
		freeReplyObject(r);
		dmutex__node_put(nd, cn);
		return -1;
	}
	rc = r->element[1]->elements >= 2 ? adopt_page(be, cn, sk, r->element[1], deadline) : 0;
	if (!rc)
		*cursor = strtoull(r->element[0]->str, NULL, 10);
	freeReplyObject(r);
	if (rc == -2) {
		dmutex__conn_free(cn);
		return -1;
	}
	dmutex__node_put(nd, cn);
	return rc < 0 ? -1 : *cursor != 0;
}
