/*
 * A fair waiter's wait for its hand-over (README "Fair locks"): `BLPOP` on
 * its own grant list, on a connection of its own, so that a release
 * (fair_release.lua pushes the hand-over there) reaches the waiting thread
 * through Redis alone, as a `BLPOP`/`RPUSH` lock's does: no subscription
 * to make first, and no listener thread to relay it.
 */
#include <stdio.h>
#include <string.h>

#include "grant.h"
#include "base/base.h"
#include "backend/redis/scripts/scripts.h"
#include "node.h"

int
dmutex__redis_grant_pop(struct dmutex__backend *be, const char *key, int64_t until_ns, char *msg,
		size_t cap)
{
	struct dmutex__node *n = &be->nodes[0];
	int64_t left = until_ns - dmutex__now_ns();
	long long ms;
	char secs[32];
	const char *argv[2] = { key, secs };
	redisReply *r, *v;
	int md, rc = 0;

	if (left <= 0)
		return 0;
	/* Whole milliseconds, rounded up: BLPOP's 0 would wait for ever. */
	ms = (left + DMUTEX__MS - 1) / DMUTEX__MS;
	snprintf(secs, sizeof secs, "%lld.%03lld", ms / 1000, ms % 1000);
	/* The server answers by the timeout; the reply gets a command timeout
	 * more to arrive.  One attempt: a BLPOP whose connection broke may
	 * have popped the grant, and a second BLPOP on a fresh connection
	 * would wait to the bound for a grant already taken (the lock held in
	 * our name meanwhile); -2 makes the waiter ask, and find it its own. */
	r = dmutex__node_call_once(n, DMUTEX__CMD_BLPOP, 1, 2, argv, &md,
			until_ns + (int64_t)n->command_ms * DMUTEX__MS);
	if (!r)
		return md == DMUTEX__REFUSED ? -1 : -2;
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
			(v = r->element[1])->type == REDIS_REPLY_STRING && cap) {
		size_t len = v->len < cap - 1 ? v->len : cap - 1;
		memcpy(msg, v->str, len);
		msg[len] = '\0';
		rc = 1;
	}
	freeReplyObject(r);
	return rc;
}
