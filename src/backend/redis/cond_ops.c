/* The backend calls of condition variables: one script on every node, a
 * majority of answers required (one node: that node). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "keys.h"
#include "base/log.h"
#include "node.h"
#include "backend/redis/scripts/scripts.h"
#include "sync.h"

struct cargs {
	char wk[DMUTEX__KEY_MAX], sk[DMUTEX__KEY_MAX], ik[DMUTEX__KEY_MAX], ch[DMUTEX__CHANNEL_MAX];
	char ttl[16], ack[16];
};

/* What the nodes answered. */
struct tally {
	size_t answered;        /* with an integer */
	size_t zero;            /* ... that was 0 */
};

void
dmutex__redis_cond_channel(struct dmutex__backend *be, const char *name, const char *token, char *out)
{
	snprintf(out, DMUTEX__CHANNEL_MAX, "%scwake:{%s}:%s", be->cfg.prefix, name,
			token ? token : "");
}

unsigned
dmutex__redis_cond_ttl_ms(struct dmutex__backend *be)
{
	return be->cfg.lease_ms;
}

static void
fill(struct dmutex__backend *be, const char *name, struct cargs *a)
{
	unsigned ttl = dmutex__redis_cond_ttl_ms(be);

	dmutex__key(a->wk, be->cfg.prefix, "cond", name);
	dmutex__key(a->sk, be->cfg.prefix, "csig", name);
	dmutex__key(a->ik, be->cfg.prefix, "cinfo", name);
	dmutex__redis_cond_channel(be, name, NULL, a->ch);
	snprintf(a->ttl, sizeof a->ttl, "%u", ttl);
	/* A woken waiter acknowledges in one round trip; a third of the
	 * registration's life is ample, and bounds a frozen waiter's hold on
	 * a wake-up. */
	snprintf(a->ack, sizeof a->ack, "%u", ttl / 3 ? ttl / 3 : 1);
}

/* Every script answers an integer from 0 to max (1: still a waiter or not;
 * signal: how many it woke); anything else is a reply from something that
 * is not our script, counted as no answer.  Every node and retry ends by
 * until (CLOCK_MONOTONIC ns). */
static int
call_all_by(struct dmutex__backend *be, const char *name, const char *what, int script, int nkeys,
		int argc, const char **argv, long long max, struct tally *t, int64_t until)
{
	/* The nodes are asked one after the other, each given an equal share
	 * of what is left, so that one stalled node leaves time for the
	 * others' quorum. */
	memset(t, 0, sizeof *t);
	for (size_t i = 0; i < be->nnodes; i++) {
		int64_t now = dmutex__now_ns();
		int64_t by = now >= until ? now : now + (until - now) / (int64_t)(be->nnodes - i);
		int md = 0;
		redisReply *r = now >= until ? NULL
			: dmutex__node_call_by(&be->nodes[i], script, nkeys, argc, argv, &md, by);

		if (r && r->type == REDIS_REPLY_INTEGER && r->integer >= 0 && r->integer <= max) {
			t->answered++;
			t->zero += r->integer == 0;
		} else if (r) {
			dmutex__log(DMUTEX_LOG_ERROR, "%s: %s of condition variable '%s': unexpected reply "
					"(shape, or a number out of range)", be->nodes[i].addr->display, what, name);
		}
		if (r)
			freeReplyObject(r);
	}
	if (t->answered < be->nnodes / 2 + 1) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s of condition variable '%s': %zu of %zu backend nodes answered",
				what, name, t->answered, be->nnodes);
		return EIO;
	}
	return 0;
}

/* The same, within command_timeout_ms from now in total. */
static int
call_all(struct dmutex__backend *be, const char *name, const char *what, int script, int nkeys, int argc,
		const char **argv, long long max, struct tally *t)
{
	return call_all_by(be, name, what, script, nkeys, argc, argv, max, t,
			dmutex__now_ns() + (int64_t)be->cfg.command_timeout_ms * DMUTEX__MS);
}

int
dmutex__redis_cond_register(struct dmutex__backend *be, const char *name, const char *token)
{
	struct cargs a;
	struct tally t;

	char info[512];

	fill(be, name, &a);
	/* Who waits, for operators: host pid tid since_ms hostid. */
	snprintf(info, sizeof info, "%s %ld %ld %" PRId64 " %s", be->cfg.host, (long)getpid(),
			dmutex__tid(), dmutex__wall_ms(), be->cfg.hostid);
	const char *argv[] = { a.wk, a.ik, token, a.ttl, info };
	return call_all(be, name, "wait", DMUTEX__SCRIPT_COND_REGISTER, 2, 5, argv, 1, &t);
}

int
dmutex__redis_cond_refresh(struct dmutex__backend *be, const char *name, const char *token, int *still)
{
	struct cargs a;
	struct tally t;
	int err;

	fill(be, name, &a);
	const char *argv[] = { a.wk, a.sk, a.ik, token, a.ttl, a.ch, a.ack };
	if ((err = call_all(be, name, "refresh", DMUTEX__SCRIPT_COND_REFRESH, 3, 7, argv, 1, &t)))
		return err;
	/* Woken on any node counts: a spurious wake-up at worst. */
	*still = t.zero == 0;
	return 0;
}

int
dmutex__redis_cond_leave(struct dmutex__backend *be, const char *name, const char *token, int *still)
{
	struct cargs a;
	struct tally t;
	int err;

	fill(be, name, &a);
	const char *argv[] = { a.wk, a.sk, a.ik, token };
	if ((err = call_all(be, name, "leave", DMUTEX__SCRIPT_COND_LEAVE, 3, 4, argv, 1, &t)))
		return err;
	*still = t.zero == 0;
	return 0;
}

/*
 * A signal or broadcast: cond_signal.lua, which returns at once when the
 * waiters zset does not exist (no waiter registered).  A work queue
 * signals at every push and pop, mostly to nobody: when the last signal of
 * this condition variable found nobody (*busy 0), one server is asked
 * first with a plain EXISTS (1 command, where the script is 2: the EVALSHA
 * and its EXISTS), and the script runs only if the key is there, told so.
 * The EXISTS is the same read as the script's first: nothing between the
 * two reads can make a registered waiter miss the signal that it would
 * have got (a waiter registers before it releases the mutex; one
 * registered after the EXISTS waited after the signal).  *busy counts the
 * signals in a row that woke someone (up to 2): from the second on, the
 * next goes straight to the script, so that a condition variable whose
 * signals find waiters (a ping-pong) pays no extra round trip, while a
 * work queue's lone wake-up among signals to nobody does not make the
 * next one a script.  Several nodes each need a script (a majority): the
 * script alone.
 */
int
dmutex__redis_cond_wake(struct dmutex__backend *be, const char *name, int all, int *busy)
{
	int64_t until = dmutex__now_ns() + (int64_t)be->cfg.command_timeout_ms * DMUTEX__MS;
	struct cargs a;
	struct tally t;
	int err;

	fill(be, name, &a);
	const char *argv[] = { a.wk, a.sk, a.ch, a.ack, all ? "1" : "0", "0" };
	if (busy && be->nnodes == 1 && __atomic_load_n(busy, __ATOMIC_RELAXED) < 2) {
		int md = 0;
		redisReply *r = dmutex__node_call_by(&be->nodes[0], DMUTEX__CMD_EXISTS, 1, 1, argv, &md,
				until);

		if (r && r->type == REDIS_REPLY_INTEGER && r->integer == 0) {
			freeReplyObject(r);
			__atomic_store_n(busy, 0, __ATOMIC_RELAXED);
			return 0;
		}
		/* A key is there; anything else (no answer, an error logged) is
		 * the script's to find out and report. */
		if (r && r->type == REDIS_REPLY_INTEGER)
			argv[5] = "1";
		if (r)
			freeReplyObject(r);
	}
	/* PUBLISH counts receivers: at most one per client connection. */
	err = call_all_by(be, name, all ? "broadcast" : "signal", DMUTEX__SCRIPT_COND_SIGNAL, 2, 6, argv,
			INT_MAX, &t, until);
	if (!err && busy) {
		int b = __atomic_load_n(busy, __ATOMIC_RELAXED);

		__atomic_store_n(busy, t.zero < t.answered ? (b < 2 ? b + 1 : 2) : 0, __ATOMIC_RELAXED);
	}
	return err;
}

int
dmutex__redis_cond_leave_start(struct dmutex__backend *be, const char *name, const char *token,
		struct dmutex__cond_leaving *l)
{
	struct dmutex__node *n = &be->nodes[0];
	struct dmutex__conn *c;
	struct cargs a;

	memset(l, 0, sizeof *l);
	/* Several nodes need a majority, a cluster a route: the slow way. */
	if (be->nnodes != 1 || n->route)
		return ENOTSUP;
	l->until = dmutex__now_ns() + (int64_t)be->cfg.command_timeout_ms * DMUTEX__MS;
	/* An idle connection only: the caller keeps it until it holds the
	 * mutex again, and every waiter a broadcast woke would open one (a
	 * thousand connections, and connects timing out, for LTP
	 * pthread_cond_broadcast 1-2). */
	if (!(c = dmutex__node_pooled(n)))
		return EBUSY;
	/* It may carry an asynchronous release's answer, which the taking back
	 * of the mutex waits for (it looks for that connection in the pool):
	 * read it now, long arrived after the wait, rather than keep it. */
	if (c->nowed && dmutex__conn_settle(c, l->until)) {
		dmutex__conn_free(c);
		return ENOTSUP;
	}
	fill(be, name, &a);
	const char *argv[] = { a.wk, a.sk, a.ik, token };
	/* Sent now as far as the socket takes it; the rest goes with the
	 * flush in end. */
	if (dmutex__node_script_append(n, c, DMUTEX__SCRIPT_COND_LEAVE, 1, 3, 4, argv, NULL) ||
			dmutex__conn_write(c) < 0) {
		dmutex__conn_free(c);
		return ENOTSUP;
	}
	l->own[0] = n;
	l->own[1] = c;
	return 0;
}

int
dmutex__redis_cond_leave_end(struct dmutex__backend *be, const char *name, const char *token,
		struct dmutex__cond_leaving *l, int *still)
{
	struct dmutex__node *n = l->own[0];
	struct dmutex__conn *c = l->own[1];
	void *v = NULL;
	redisReply *r;

	l->own[1] = NULL;
	/* The mutex may have taken long: the answer has been here since. */
	l->until = dmutex__now_ns() + (int64_t)be->cfg.command_timeout_ms * DMUTEX__MS;
	if (dmutex__conn_get(c, &v, l->until)) {
		dmutex__conn_free(c);
		/* Leaving twice changes nothing: ask again, the slow way. */
		return dmutex__redis_cond_leave(be, name, token, still);
	}
	dmutex__node_put(n, c);
	r = v;
	if (r->type == REDIS_REPLY_INTEGER && (r->integer == 0 || r->integer == 1)) {
		*still = r->integer == 1;
		freeReplyObject(r);
		return 0;
	}
	/* NOSCRIPT (a restarted server), or anything else: the slow way,
	 * which loads the script and logs what is wrong. */
	freeReplyObject(r);
	return dmutex__redis_cond_leave(be, name, token, still);
}
