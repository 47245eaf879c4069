/* Per-lock counters into Redis (counters.h): one MULTI/EXEC on the node
 * that serves their slot, on any topology. */
#include <string.h>

#include <hiredis/hiredis.h>

#include "base.h"
#include "counters.h"
#include "log.h"
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
			"MULTI, EXEC, HINCRBY, ZINCRBY; ?metrics=0 turns them off)", why);
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

int
dmutex__backend_counters(struct dmutex__backend *be, const struct dmutex__count *v,
		size_t n, int *multi_ok, int64_t until)
{
	char tk[DMUTEX__MET_KEY_MAX], ik[DMUTEX__MET_KEY_MAX], nk[DMUTEX__MET_KEY_MAX];
	unsigned long long sum[DMUTEX__MET_NFIELDS] = { 0 };
	const char *pre = be->cfg.prefix;
	struct dmutex__node *nd;
	struct dmutex__conn *cn;
	int64_t deadline;
	size_t q = 0;
	int bad = 0, st = DMUTEX__CNT_SENT;

	dmutex__met_key(tk, pre, "total", NULL);
	dmutex__met_key(ik, pre, "index", NULL);
	/* A cluster's face is never dialled: the member serving the slot
	 * of {metrics} takes them (every key has that hash tag). */
	nd = be->ops->node_of ? be->ops->node_of(be, tk) : &be->nodes[0];
	if (!nd || !(cn = dmutex__node_get_by(nd, until)))
		return DMUTEX__CNT_NOT_SENT;
	deadline = dmutex__conn_deadline(cn);
	if (deadline > until)
		deadline = until;
	if (!*multi_ok) {
		/* Once per client, MULTI alone: refused (an ACL without it),
		 * the increments that follow would run one by one, half of
		 * them refused too.  Then the counters stay in the process. */
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
	} else {
		bad |= dmutex__conn_appendf(cn, "MULTI");
		q++;
	}
	for (size_t i = 0; i < n && !bad; i++) {
		dmutex__met_key(nk, pre, "n:", v[i].name);
		for (int f = 0; f < DMUTEX__MET_NFIELDS && !bad; f++) {
			unsigned long long d = (unsigned long long)v[i].delta[f];
			if (!d)
				continue;
			sum[f] += d;
			bad |= append4(cn, "HINCRBY", nk, dmutex__met_fields[f], d, NULL, 0);
			q++;
			if (f == DMUTEX__MET_ACQ) {
				bad |= append4(cn, "ZINCRBY", ik, NULL, d, v[i].name, strlen(v[i].name));
				q++;
			}
		}
	}
	/* The total once per batch, not once per name: the same sums, and
	 * a batch of names each locked once (fresh names) costs Redis half
	 * the commands. */
	for (int f = 0; f < DMUTEX__MET_NFIELDS && !bad; f++)
		if (sum[f]) {
			bad |= append4(cn, "HINCRBY", tk, dmutex__met_fields[f], sum[f], NULL, 0);
			q++;
		}
	bad |= dmutex__conn_appendf(cn, "EXEC");
	q++;
	for (size_t i = 0; i < q && !bad; i++) {
		redisReply *r = NULL;
		if (dmutex__conn_get(cn, (void **)&r, deadline)) {
			bad = 1;
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
	if (bad) {
		dmutex__conn_free(cn);
		/* Sent, maybe in part: the server may have applied it. */
		return DMUTEX__CNT_MAYBE;
	}
	dmutex__node_put(nd, cn);
	return st;
}
