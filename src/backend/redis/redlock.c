/*
 * Redlock: one lock over N independent Redis masters.
 *
 * Every call goes to all nodes at once: one request per node on a pooled
 * connection, replies gathered with poll(2) until each node answered or the
 * per-node timeout passed (a small fraction of the lease).  A node that
 * cannot be connected to is skipped for a short while, so a dead node costs
 * nothing and a stalled one costs one per-node timeout.
 *
 * Acquire succeeds with a quorum (N/2 + 1) and positive validity
 * (lease - elapsed - drift, on CLOCK_MONOTONIC from before the requests);
 * otherwise it is released on every node, including those that seemed to
 * fail, and the caller retries.  Fencing tokens: the maximum of the
 * acquiring nodes' counters, written back to a quorum before the lock call
 * returns (see README, "Redlock").
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "base/base.h"
#include "base/log.h"
#include "node.h"
#include "backend/redis/scripts/scripts.h"
#include "topology.h"

#define NODE_TIMEOUT_MIN_MS 50u  /* a loaded machine needs more than 10 */
#define NODE_TIMEOUT_MAX_MS 300u
/* How long a node that refused a connection or did not answer is skipped. */
#define DOWN_NS (200 * DMUTEX__MS)

struct redlock {
	struct dmutex__backend base;
	size_t quorum;
	int64_t *down_until;            /* atomic, per node */
	struct dmutex__node nodes[];
};

enum { CALL_FAILED, CALL_PENDING, CALL_DONE, CALL_LOST };

struct call {
	struct dmutex__conn *c;
	redisReply *r;                  /* CALL_DONE: never an error reply */
	int state;
	int by_sha;
	int pooled;                     /* the connection came from the pool */
	int refused;                    /* the node answered with an error */
	int resent;                     /* sent again after the first request's
					 * answer was lost: the first may have run */
};

static struct redlock *
rl_of(struct dmutex__backend *be)
{
	return (struct redlock *)be;
}

static unsigned
node_timeout(struct redlock *rl, unsigned lease_ms)
{
	unsigned t = rl->base.cfg.node_timeout_ms;

	if (t)
		return t;
	t = lease_ms / 20;              /* 5 % of the lease */
	return t < NODE_TIMEOUT_MIN_MS ? NODE_TIMEOUT_MIN_MS
		: t > NODE_TIMEOUT_MAX_MS ? NODE_TIMEOUT_MAX_MS : t;
}

static void
lose(struct call *k)
{
	/* A reply is outstanding on this connection: it cannot be reused. */
	dmutex__conn_free(k->c);
	k->c = NULL;
	k->state = CALL_LOST;
}

/* A script call is a few hundred bytes: it fits the socket buffer of a
 * fresh or idle connection, so this rarely waits at all. */
static int
flush(struct dmutex__conn *c, unsigned timeout_ms)
{
	return dmutex__conn_flush(c, dmutex__now_ns() + (int64_t)timeout_ms * DMUTEX__MS);
}

static int
write_on(struct call *k, int script, int nkeys, int argc, const char **argv, unsigned timeout_ms)
{
	k->by_sha = 1;
	if (dmutex__node_script_append(NULL, k->c, script, 1, nkeys, argc, argv, NULL) ||
			flush(k->c, timeout_ms))
		return -1;
	k->state = CALL_PENDING;
	return 0;
}

/*
 * A pooled connection that fails at once is most likely stale (the node
 * restarted): empty the pool and send again on a fresh connection.  Safe
 * because every script is idempotent by token.  0 if resent.
 */
static int
resend_fresh(struct redlock *rl, size_t i, struct call *k, int script, int nkeys, int argc,
		const char **argv, unsigned timeout_ms)
{
	struct dmutex__node *n = &rl->nodes[i];

	if (!k->pooled)
		return -1;
	dmutex__conn_free(k->c);
	dmutex__node_drop_idle(n);
	k->pooled = 0;
	if (!(k->c = dmutex__node_connect_timeout(n, timeout_ms))) {
		__atomic_store_n(&rl->down_until[i], dmutex__now_ns() + DOWN_NS, __ATOMIC_RELAXED);
		k->state = CALL_LOST;   /* the first request may have gone out */
		return 0;
	}
	if (write_on(k, script, nkeys, argc, argv, timeout_ms))
		lose(k);
	return 0;
}

static void
send_one(struct redlock *rl, size_t i, struct call *k, int script, int nkeys, int argc,
		const char **argv, unsigned timeout_ms)
{
	struct dmutex__node *n = &rl->nodes[i];
	int64_t now = dmutex__now_ns();

	memset(k, 0, sizeof *k);
	k->state = CALL_FAILED;
	if (__atomic_load_n(&rl->down_until[i], __ATOMIC_RELAXED) > now)
		return;
	if ((k->c = dmutex__node_pooled(n))) {
		k->pooled = 1;
	} else if (!(k->c = dmutex__node_connect_timeout(n, timeout_ms))) {
		__atomic_store_n(&rl->down_until[i], now + DOWN_NS, __ATOMIC_RELAXED);
		return;
	}
	if (write_on(k, script, nkeys, argc, argv, timeout_ms) &&
			resend_fresh(rl, i, k, script, nkeys, argc, argv, timeout_ms))
		lose(k);
}

/* Read what node i has for us; 1 while still waiting. */
static int
receive_one(struct redlock *rl, size_t i, struct call *k, int script, int nkeys, int argc,
		const char **argv, unsigned timeout_ms)
{
	void *v;

	if (dmutex__conn_fill(k->c)) {
		k->resent = 1;
		if (resend_fresh(rl, i, k, script, nkeys, argc, argv, timeout_ms))
			lose(k);
		return 0;
	}
	for (;;) {
		if (dmutex__conn_next(k->c, &v)) {
			lose(k);
			return 0;
		}
		if (!v)
			return 1;
		if (k->by_sha && dmutex__node_noscript(v)) {
			/* This node restarted and forgot the script. */
			freeReplyObject(v);
			k->by_sha = 0;
			if (dmutex__node_script_append(NULL, k->c, script, 0, nkeys, argc, argv, NULL) ||
					flush(k->c, timeout_ms)) {
				lose(k);
				return 0;
			}
			continue;
		}
		if (((redisReply *)v)->type == REDIS_REPLY_ERROR) {
			dmutex__log(DMUTEX_LOG_ERROR, "%s: %s script failed: %s", rl->nodes[i].addr->display,
					dmutex__script_name(script), ((redisReply *)v)->str);
			k->refused = !dmutex__node_transient(v);
			freeReplyObject(v);
			k->state = CALL_FAILED;
		} else {
			k->r = v;
			k->state = CALL_DONE;
		}
		dmutex__node_put(&rl->nodes[i], k->c);
		k->c = NULL;
		return 0;
	}
}

/*
 * The same script on every node at once, for at most timeout_ms and never
 * past until (the call's deadline: its phases, and each node's dial, share
 * it).  With no time left nothing is sent: every call CALL_FAILED.
 */
static void
parallel(struct redlock *rl, int script, int nkeys, int argc, const char **argv,
		unsigned timeout_ms, int64_t until, struct call *calls)
{
	size_t n = rl->base.nnodes;
	int64_t now = dmutex__now_ns(), deadline = now + (int64_t)timeout_ms * DMUTEX__MS;
	struct pollfd pf[n];
	size_t idx[n];

	if (until < deadline) {
		deadline = until;
		timeout_ms = until > now ? (unsigned)((until - now + DMUTEX__MS - 1) / DMUTEX__MS) : 0;
	}
	for (size_t i = 0; i < n; i++) {
		if (!timeout_ms || dmutex__now_ns() >= deadline) {
			memset(&calls[i], 0, sizeof calls[i]);
			calls[i].state = CALL_FAILED;
			continue;
		}
		/* Dials are sequential: each gets what is left, not a full timeout. */
		int64_t left = deadline - dmutex__now_ns();
		unsigned t = left / DMUTEX__MS < (int64_t)timeout_ms
			? (unsigned)((left + DMUTEX__MS - 1) / DMUTEX__MS) : timeout_ms;
		send_one(rl, i, &calls[i], script, nkeys, argc, argv, t);
	}
	for (;;) {
		size_t np = 0;
		int64_t left = deadline - dmutex__now_ns();

		for (size_t i = 0; i < n; i++)
			if (calls[i].state == CALL_PENDING) {
				pf[np].fd = calls[i].c->fd;
				pf[np].events = dmutex__conn_events(calls[i].c, POLLIN);
				pf[np].revents = 0;
				idx[np++] = i;
			}
		if (!np || left <= 0)
			break;
		if (poll(pf, np, (int)((left + DMUTEX__MS - 1) / DMUTEX__MS)) <= 0)
			continue;
		for (size_t j = 0; j < np; j++)
			if (pf[j].revents) {
				int64_t l = deadline - dmutex__now_ns();
				unsigned t = l <= 0 ? 1 : l / DMUTEX__MS < (int64_t)timeout_ms
					? (unsigned)((l + DMUTEX__MS - 1) / DMUTEX__MS) : timeout_ms;
				receive_one(rl, idx[j], &calls[idx[j]], script, nkeys, argc, argv, t);
			}
	}
	for (size_t i = 0; i < n; i++)
		if (calls[i].state == CALL_PENDING) {
			dmutex__log(DMUTEX_LOG_DEBUG, "%s: no answer within %u ms", rl->nodes[i].addr->display,
					timeout_ms);
			lose(&calls[i]);
			/* A stalled node accepts connections (the kernel's backlog)
			 * but answers nothing: skip it for a while like a dead one,
			 * or every call would wait out its timeout. */
			__atomic_store_n(&rl->down_until[i], dmutex__now_ns() + DOWN_NS, __ATOMIC_RELAXED);
		}
}

static void
free_calls(struct call *calls, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (calls[i].r)
			freeReplyObject(calls[i].r);
}

/*
 * Release on every node; 1 if some node may still carry the token.  *ran:
 * whether the release may have run on a node that gave no usable answer
 * (its request sent and no answer read, an answer that does not parse, or
 * an error read for a request sent again).  A node that was not asked
 * (down, or no time left) or refused it with an error (-LOADING,
 * READONLY: the script never ran) did not run it, so that a "not ours"
 * found later on a quorum is a loss, as on one Redis (docs/faults.md
 * #28); such a node may still carry the token all the same.
 *
 * A release resent on a node (its first answer was lost with the
 * connection) that finds no key counts as released there: the first one
 * most likely took it.  (Or the key had expired, or been deleted, just
 * before: a loss this cannot see, as a retry of dmutex__release cannot.)
 * Another holder's key there is not ours, resent or not.
 */
static int
release_everywhere(struct redlock *rl, const char *name, const char *token, int mode,
		unsigned timeout_ms, int64_t until, size_t *released, size_t *not_ours, size_t *lost,
		int *ran)
{
	size_t n = rl->base.nnodes;
	struct dmutex__rel_argv x;
	struct call calls[n];
	int unsure = 0;

	*released = *not_ours = *lost = 0;
	*ran = 0;
	dmutex__rel_argv(&rl->base, name, token, mode, &x);
	parallel(rl, DMUTEX__REL_SCRIPT(mode), 2, DMUTEX__REL_NARGS(mode), x.argv, timeout_ms, until, calls);
	for (size_t i = 0; i < n; i++) {
		int rel;
		if (calls[i].state == CALL_DONE && !dmutex__rel_reply(rl->base.nodes[i].addr->display, name, calls[i].r, &rel)) {
			if (rel || (calls[i].resent && calls[i].r->integer == DMUTEX__REL_GONE))
				++*released;
			else
				++*not_ours;
		} else {
			++*lost;
			unsure = 1;
			*ran |= calls[i].state != CALL_FAILED || calls[i].resent;
		}
	}
	free_calls(calls, n);
	return unsure;
}

static int
raise_fence(struct redlock *rl, const char *meta_key, uint64_t fence, unsigned lease_ms,
		unsigned timeout_ms, int64_t until)
{
	size_t n = rl->base.nnodes, ok = 0;
	char v[24], keep[24];
	const char *argv[3] = { meta_key, v, keep };
	struct call calls[n];

	snprintf(v, sizeof v, "%" PRIu64, fence);
	snprintf(keep, sizeof keep, "%llu",
			(unsigned long long)lease_ms + rl->base.cfg.idle_ms);
	parallel(rl, DMUTEX__SCRIPT_FENCE_RAISE, 1, 3, argv, timeout_ms, until, calls);
	for (size_t i = 0; i < n; i++)
		ok += calls[i].state == CALL_DONE && calls[i].r->type == REDIS_REPLY_INTEGER &&
			calls[i].r->integer == 1;       /* fence_raise.lua's only answer */
	free_calls(calls, n);
	return ok >= rl->quorum ? 0 : -1;
}

/* What the nodes answered an acquire. */
struct votes {
	size_t ok, busy, notrec, down, refused;
	size_t at_max;                  /* ok nodes whose token is the highest */
	uint64_t fence;                 /* the highest token of the ok nodes */
	long long pttl;                 /* busy: the longest remaining lease; -1 unknown */
	int died, maybe;
};

/* Count the answers in calls[0..nnodes) (and free them). */
static void
tally(struct redlock *rl, const struct dmutex__acq *a, struct call *calls, struct votes *v)
{
	size_t n = rl->base.nnodes;
	uint64_t fences[n];

	*v = (struct votes){ .pttl = -1 };
	for (size_t i = 0; i < n; i++) {
		struct dmutex__acq one = *a;
		fences[i] = 0;
		/* A token '0' says "not assigned yet", which acquire.lua never
		 * answers Redlock (step 1): a broken reply here. */
		int bad = calls[i].state == CALL_DONE &&
			(dmutex__acq_reply(rl->nodes[i].addr->display, calls[i].r, &one) ||
			 (one.status == DMUTEX__ACQ_OK && !one.fence));
		if (bad)
			dmutex__log(DMUTEX_LOG_ERROR, "%s: acquire of '%s': unexpected reply (shape, or a number out of range)",
					rl->nodes[i].addr->display, a->name);
		if (calls[i].state != CALL_DONE || bad || one.status == DMUTEX__ACQ_VERSION) {
			v->down++;
			v->refused += calls[i].refused || (!bad && calls[i].state == CALL_DONE);
			v->maybe |= calls[i].state == CALL_LOST || calls[i].state == CALL_DONE;
			continue;
		}
		if (one.status == DMUTEX__ACQ_OK) {
			v->ok++;
			fences[i] = one.fence;
			v->fence = one.fence > v->fence ? one.fence : v->fence;
			v->died |= one.died;
		} else if (one.status == DMUTEX__ACQ_BUSY) {
			v->busy++;
			v->pttl = one.pttl_ms > v->pttl ? one.pttl_ms : v->pttl;
		} else {
			v->notrec++;
		}
	}
	free_calls(calls, n);
	for (size_t i = 0; i < n; i++)
		v->at_max += fences[i] == v->fence && v->fence;
}

static int
rl_acquire(struct dmutex__backend *be, struct dmutex__acq *a)
{
	struct redlock *rl = rl_of(be);
	size_t n = be->nnodes;
	unsigned nt = node_timeout(rl, a->lease_ms);
	int64_t t0 = dmutex__now_ns();
	int64_t valid_until = t0 + (int64_t)a->lease_ms * DMUTEX__MS - DMUTEX__DRIFT_NS(a->lease_ms);
	struct dmutex__acq_argv x;
	struct call calls[n];
	struct votes v;
	int raise_failed = 0;
	/* A trylock's deadline covers the three rounds (acquire, write-back,
	 * give-back) together; a blocking lock's attempts have only nt each. */
	int64_t until = a->deadline ? a->deadline : INT64_MAX;

	a->maybe_done = a->refused = a->split = 0;
	dmutex__acq_argv(be, a, &x);
	parallel(rl, DMUTEX__SCRIPT_ACQUIRE, 2, DMUTEX__ACQ_ARGC, x.argv, nt, until, calls);
	tally(rl, a, calls, &v);

	/* The token must stand on a quorum before we return it.  When a
	 * quorum of the acquiring nodes already counted to it (nodes in step,
	 * the usual case) that is so without the write-back round. */
	if (v.ok >= rl->quorum && dmutex__now_ns() < valid_until &&
			(v.at_max >= rl->quorum ||
			 !(raise_failed = raise_fence(rl, x.mk, v.fence, a->lease_ms, nt, until))) &&
			dmutex__now_ns() < valid_until) {
		a->status = DMUTEX__ACQ_OK;
		a->fence = v.fence;
		a->died = v.died;
		return 0;
	}
	if (v.ok || v.maybe) {
		/* A failed attempt gives back what it took, everywhere. */
		size_t rel, nours, lost;
		int ran;
		if (release_everywhere(rl, a->name, a->token, DMUTEX__REL_ABANDON, nt, until, &rel, &nours,
				&lost, &ran))
			a->maybe_done = 1;
	}
	if (raise_failed) {
		/* No quorum confirmed the token: a backend failure, not a holder. */
		dmutex__log(DMUTEX_LOG_ERROR, "'%s': the token could not be written back to a quorum",
				a->name);
		return EIO;
	}
	if (v.ok >= rl->quorum)
		dmutex__log(DMUTEX_LOG_WARN, "'%s': quorum reached too late (validity gone); retrying", a->name);
	if (v.notrec) {
		a->status = DMUTEX__ACQ_NOTREC;
		return 0;
	}
	if (v.down > n - rl->quorum) {
		/* No quorum can answer: fail fast. */
		a->refused = v.refused > n - rl->quorum;
		dmutex__log(DMUTEX_LOG_ERROR, "'%s': only %zu of %zu nodes answered, %zu needed",
				a->name, n - v.down, n, rl->quorum);
		return EIO;
	}
	a->status = DMUTEX__ACQ_BUSY;
	if (v.busy >= rl->quorum)
		a->pttl_ms = v.pttl;      /* a real holder: wait for its release or lease */
	else {
		/* Split between contenders, nobody has a quorum: everyone gave
		 * back what they took; try again after a random delay. */
		a->pttl_ms = nt + dmutex__random_uniform(2 * nt + 1);
		a->split = 1;
	}
	return 0;
}

static int
rl_release(struct dmutex__backend *be, const char *name, const char *token,
		int mode, int64_t deadline, int *released, int *maybe_done)
{
	struct redlock *rl = rl_of(be);
	size_t rel, nours, lost;
	int ran;

	release_everywhere(rl, name, token, mode, node_timeout(rl, be->cfg.lease_ms) * 2, deadline, &rel,
			&nours, &lost, &ran);
	*maybe_done = 0;
	if (rel >= rl->quorum || nours >= rl->quorum) {
		*released = rel >= rl->quorum;
		return 0;
	}
	/* The caller learns that a quorum could not confirm, and whether a
	 * request of ours may have run: one that released a node counts too,
	 * as that node's "not ours" later would be our own doing (a retry
	 * asks every node again, and cannot tell). */
	*maybe_done = ran || rel > 0;
	dmutex__log(DMUTEX_LOG_WARN, "release of '%s': %zu released, %zu not ours, %zu no answer; "
			"no quorum", name, rel, nours, lost);
	return EIO;
}

static void
rl_renew(struct dmutex__backend *be, struct dmutex__renewal *rn, size_t n, int64_t deadline)
{
	struct redlock *rl = rl_of(be);
	size_t nn = be->nnodes, chunks = (n + DMUTEX__RENEW_CHUNK - 1) / DMUTEX__RENEW_CHUNK;
	struct dmutex__renew_argv x = { 0 };
	int *res = malloc(DMUTEX__RENEW_CHUNK * sizeof *res);
	int *ones = calloc(DMUTEX__RENEW_CHUNK, sizeof *ones);
	int *zeros = calloc(DMUTEX__RENEW_CHUNK, sizeof *zeros);
	struct call calls[nn];

	for (size_t i = 0; i < n; i++)
		rn[i].result = -1;
	if (!res || !ones || !zeros || dmutex__renew_argv_init(&x))
		goto out;
	for (size_t c = 0; c < chunks; c++) {
		size_t k = dmutex__renew_chunk(be, rn, n, c, &x);
		unsigned nt = node_timeout(rl, rn[c * DMUTEX__RENEW_CHUNK].lease_ms);
		int64_t left = deadline - dmutex__now_ns();

		/* Never past the lease deadline these renewals guard. */
		if (left <= 0)
			break;
		if (left / DMUTEX__MS < (int64_t)nt)
			nt = (unsigned)(left / DMUTEX__MS) + 1;
		memset(ones, 0, k * sizeof *ones);
		memset(zeros, 0, k * sizeof *zeros);
		parallel(rl, DMUTEX__SCRIPT_RENEW, (int)DMUTEX__RENEW_NKEYS(k), (int)DMUTEX__RENEW_ARGC(k), x.argv, nt,
				deadline, calls);
		for (size_t i = 0; i < nn; i++) {
			if (calls[i].state != CALL_DONE)
				continue;
			dmutex__renew_reply(rl->nodes[i].addr->display, calls[i].r, k, res);
			for (size_t j = 0; j < k; j++) {
				ones[j] += res[j] == 1;
				zeros[j] += res[j] == 0;
			}
		}
		free_calls(calls, nn);
		for (size_t j = 0; j < k; j++)
			rn[c * DMUTEX__RENEW_CHUNK + j].result = (size_t)ones[j] >= rl->quorum ? 1
				: (size_t)zeros[j] > nn - rl->quorum ? 0 : -1;
	}
out:
	dmutex__renew_argv_free(&x);
	free(res);
	free(ones);
	free(zeros);
}

static void
rl_atfork_child(struct dmutex__backend *be)
{
	dmutex__backend_child_nodes(be);
	for (size_t i = 0; i < be->nnodes; i++)
		dmutex__node_atfork_child(&rl_of(be)->nodes[i]);
}

static void
rl_destroy(struct dmutex__backend *be)
{
	struct redlock *rl = rl_of(be);
	for (size_t i = 0; i < be->nnodes; i++)
		dmutex__node_fini(&rl->nodes[i]);
	free(rl->down_until);
	free(rl);
}

static const struct dmutex__backend_ops redlock_ops = {
	.acquire = rl_acquire,
	.release = rl_release,
	.renew = rl_renew,
	.channel = dmutex__redis_channel,
	.atfork_child = rl_atfork_child,
	.destroy = rl_destroy,
	.verify = dmutex__backend_verify_nodes,
	.atfork_prepare = dmutex__backend_lock_nodes,
	.atfork_parent = dmutex__backend_unlock_nodes,
	DMUTEX__REDIS_WAKE_OPS,
	DMUTEX__REDIS_COND_OPS,
	/* rwlocks, semaphores, barriers: one master only (NULL) */
	DMUTEX__REDIS_ADMIN_OPS,
};

int
dmutex__backend_redlock_create(const struct dmutex__backend_cfg *cfg, struct dmutex__backend **out)
{
	size_t n = cfg->nnodes;
	struct redlock *rl = calloc(1, sizeof *rl + n * sizeof rl->nodes[0]);

	if (!rl || !(rl->down_until = calloc(n, sizeof *rl->down_until))) {
		free(rl);
		return ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		int err = dmutex__node_init(&rl->nodes[i], &cfg->nodes[i],
				cfg->connect_timeout_ms, cfg->command_timeout_ms);
		if (err) {
			while (i--)
				dmutex__node_fini(&rl->nodes[i]);
			free(rl->down_until);
			free(rl);
			return err;
		}
	}
	rl->quorum = n / 2 + 1;
	rl->base.ops = &redlock_ops;
	rl->base.cfg = *cfg;
	rl->base.nodes = rl->nodes;
	rl->base.nnodes = n;
	rl->base.quorum = 1;
	*out = &rl->base;
	return 0;
}
