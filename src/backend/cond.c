/* The backend calls of condition variables: one script on every node, a
 * majority of answers required (one node: that node). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "cond.h"
#include "keys.h"
#include "node.h"
#include "scripts.h"

struct cargs {
	char wk[DMUTEX__KEY_MAX], sk[DMUTEX__KEY_MAX], ik[DMUTEX__KEY_MAX], ch[DMUTEX__CHANNEL_MAX];
	char ttl[16], ack[16];
};

/* What the nodes answered. */
struct tally {
	size_t answered;        /* with an integer */
	size_t zero;            /* ... that was 0 */
	long long sum;
};

void
dmutex__cond_channel(const struct dmutex__cond *cx, const char *token, char *out)
{
	snprintf(out, DMUTEX__CHANNEL_MAX, "%scwake:{%s}:%s", cx->client->cfg.prefix, cx->name,
			token ? token : "");
}

unsigned
dmutex__cond_ttl_ms(const struct dmutex__cond *cx)
{
	return cx->client->cfg.lease_ms;
}

static void
fill(const struct dmutex__cond *cx, struct cargs *a)
{
	unsigned ttl = dmutex__cond_ttl_ms(cx);

	dmutex__key(a->wk, cx->client->cfg.prefix, "cond", cx->name);
	dmutex__key(a->sk, cx->client->cfg.prefix, "csig", cx->name);
	dmutex__key(a->ik, cx->client->cfg.prefix, "cinfo", cx->name);
	dmutex__cond_channel(cx, NULL, a->ch);
	snprintf(a->ttl, sizeof a->ttl, "%u", ttl);
	/* A woken waiter acknowledges in one round trip; a third of the
	 * registration's life is ample, and bounds a frozen waiter's hold on
	 * a wake-up. */
	snprintf(a->ack, sizeof a->ack, "%u", ttl / 3 ? ttl / 3 : 1);
}

static int
call_all(struct dmutex__cond *cx, const char *what, int script, int nkeys, int argc,
		const char **argv, struct tally *t)
{
	struct dmutex__backend *be = cx->client->be;

	memset(t, 0, sizeof *t);
	for (size_t i = 0; i < be->nnodes; i++) {
		int md = 0;
		redisReply *r = dmutex__node_call(&be->nodes[i], script, nkeys, argc, argv, &md);

		if (r && r->type == REDIS_REPLY_INTEGER) {
			t->answered++;
			t->zero += r->integer == 0;
			t->sum += r->integer;
		} else if (r) {
			dmutex__log(DMUTEX_LOG_ERROR, "%s: %s of condition variable '%s': unexpected reply shape",
					be->nodes[i].addr->display, what, cx->name);
		}
		if (r)
			freeReplyObject(r);
	}
	if (t->answered < be->nnodes / 2 + 1) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s of condition variable '%s': %zu of %zu backend nodes answered",
				what, cx->name, t->answered, be->nnodes);
		return EIO;
	}
	return 0;
}

int
dmutex__cond_register(struct dmutex__cond *cx, const char *token)
{
	struct cargs a;
	struct tally t;

	char info[512];

	fill(cx, &a);
	/* Who waits, for operators: host pid tid since_ms hostid. */
	snprintf(info, sizeof info, "%s %ld %ld %" PRId64 " %s", cx->client->host, (long)getpid(),
			dmutex__tid(), dmutex__wall_ms(), cx->client->hostid);
	const char *argv[] = { a.wk, a.ik, token, a.ttl, info };
	return call_all(cx, "wait", DMUTEX__SCRIPT_COND_REGISTER, 2, 5, argv, &t);
}

int
dmutex__cond_refresh(struct dmutex__cond *cx, const char *token, int *still)
{
	struct cargs a;
	struct tally t;
	int err;

	fill(cx, &a);
	const char *argv[] = { a.wk, a.sk, a.ik, token, a.ttl, a.ch, a.ack };
	if ((err = call_all(cx, "refresh", DMUTEX__SCRIPT_COND_REFRESH, 3, 7, argv, &t)))
		return err;
	/* Woken on any node counts: a spurious wake-up at worst. */
	*still = t.zero == 0;
	return 0;
}

int
dmutex__cond_leave(struct dmutex__cond *cx, const char *token, int *still)
{
	struct cargs a;
	struct tally t;
	int err;

	fill(cx, &a);
	const char *argv[] = { a.wk, a.sk, a.ik, token };
	if ((err = call_all(cx, "leave", DMUTEX__SCRIPT_COND_LEAVE, 3, 4, argv, &t)))
		return err;
	*still = t.zero == 0;
	return 0;
}

int
dmutex__cond_wake(struct dmutex__cond *cx, int all)
{
	struct cargs a;
	struct tally t;

	fill(cx, &a);
	const char *argv[] = { a.wk, a.sk, a.ch, a.ack, all ? "1" : "0" };
	return call_all(cx, all ? "broadcast" : "signal", DMUTEX__SCRIPT_COND_SIGNAL, 2, 5, argv, &t);
}
