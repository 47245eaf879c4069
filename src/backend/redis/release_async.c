/*
 * Asynchronous release on one Redis master (issue 15 item 2): the release
 * is written to a pooled connection and the connection goes back to the
 * pool owing its answer (conn.h, struct dmutex__conn_owed).  The next user
 * of that connection sends its own request behind it and reads the answer
 * on the way to its own; dmutex__redis_ticket_wait reads it for whoever needs it
 * sooner.  The answer is only recorded here (no lock taken, no user code
 * run: the reader may be any thread in any call); the core acts on it.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "base/base.h"
#include "base/log.h"
#include "node.h"
#include "backend/redis/scripts/scripts.h"
#include "topology.h"

/* scripts_ok has a bit per script. */
_Static_assert(DMUTEX__SCRIPT_COUNT <= 64, "conn.h scripts_ok: one bit per script");

struct ticket {
	struct dmutex__rel_ticket face; /* first: what the core holds */
	struct dmutex__conn_owed owed;
	struct dmutex__backend *be;
	struct dmutex__node *node;
	const struct dmutex__conn *conn;  /* where the answer comes; compared only */
	int state;                      /* atomic: DMUTEX__TICKET_* */
	unsigned refs;                  /* atomic */
	int mode;
	int by_sha;                     /* 0 once resent by source after NOSCRIPT */
	int64_t until_ns;               /* for rescue: the lease's end */
	dmutex__rescue_fn rescue;
	void *rescue_arg;
	char token[DMUTEX__TOKEN_HEX + 1];
	char name[];
};

static struct ticket *
ticket_of(const struct dmutex__rel_ticket *f)
{
	return (struct ticket *)f;
}

int
dmutex__redis_ticket_state(const struct dmutex__rel_ticket *f)
{
	return __atomic_load_n(&ticket_of(f)->state, __ATOMIC_ACQUIRE);
}

void
dmutex__redis_ticket_ref(struct dmutex__rel_ticket *f)
{
	__atomic_add_fetch(&ticket_of(f)->refs, 1, __ATOMIC_ACQ_REL);
}

void
dmutex__redis_ticket_put(struct dmutex__rel_ticket *f)
{
	struct ticket *t = ticket_of(f);

	if (t && !__atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL))
		free(t);
}

static int
append(struct ticket *t, struct dmutex__conn *c)
{
	struct dmutex__rel_argv x;

	dmutex__rel_argv(t->be, t->name, t->token, t->mode, &x);
	if (dmutex__node_script_append(t->node, c, DMUTEX__REL_SCRIPT(t->mode), t->by_sha, 2,
			DMUTEX__REL_NARGS(t->mode), x.argv, NULL))
		return -1;
	dmutex__conn_owe(c, &t->owed);
	return 0;
}

static void
settle(struct ticket *t, int state)
{
	__atomic_store_n(&t->state, state, __ATOMIC_RELEASE);
	dmutex__redis_ticket_put(&t->face);
}

/* It may not have run: the core releases again in the background (a
 * fork child's copy is the parent's to finish). */
static void
settle_unknown(struct ticket *t, const struct dmutex__conn *c)
{
	if (!c->abandoned)
		t->rescue(t->rescue_arg, t->name, t->token, t->until_ns);
	settle(t, DMUTEX__TICKET_UNKNOWN);
}

/* Its answer says it did not run (an error, NOSCRIPT not sent again): no
 * rescue, so that nothing else releases it meanwhile, and the core's
 * release that follows (dmutex__rel_settle) has the only answer; a "not
 * ours" then is a hold lost (a restart that lost it answers -LOADING
 * while it loads).  A fork child's copy is the parent's to finish. */
static void
settle_not_run(struct ticket *t, const struct dmutex__conn *c)
{
	if (c->abandoned)
		settle(t, DMUTEX__TICKET_UNKNOWN);
	else
		settle(t, DMUTEX__TICKET_NOT_RUN);
}

/* The connection's reader met our answer (or c is freed: reply NULL). */
static void
done(struct dmutex__conn *c, struct dmutex__conn_owed *o, void *v)
{
	struct ticket *t = (struct ticket *)((char *)o - offsetof(struct ticket, owed));
	const char *display = t->node->addr->display;
	redisReply *r = v;
	int released;

	if (!r) {
		settle_unknown(t, c);
		return;
	}
	if (!dmutex__node_noscript(r))
		c->scripts_ok |= 1ull << DMUTEX__REL_SCRIPT(t->mode);
	else
		c->scripts_ok = 0;
	if (t->by_sha && dmutex__node_noscript(r)) {
		/* The server lost its scripts (restart, SCRIPT FLUSH): the
		 * release did not run.  Again by source on this connection
		 * when nobody else's request is in flight on it (then it
		 * simply comes next; node_put or conn_settle sends it), else
		 * (inside a caller's MULTI, say) in the background. */
		freeReplyObject(r);
		t->by_sha = 0;
		if (c->pending > c->nowed || append(t, c))
			settle_not_run(t, c);
		return;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		/* Not run (LOADING, READONLY, NOPERM...): the core releases
		 * again with retries, or the lease ends. */
		dmutex__log(dmutex__node_transient(r) ? DMUTEX_LOG_WARN : DMUTEX_LOG_ERROR,
				"%s: release of '%s' failed: %s", display, t->name, r->str);
		freeReplyObject(r);
		settle_not_run(t, c);
		return;
	}
	if (dmutex__rel_reply(display, t->name, r, &released)) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: release of '%s': unexpected reply shape", display,
				t->name);
		freeReplyObject(r);
		settle_unknown(t, c);
		return;
	}
	freeReplyObject(r);
	settle(t, released ? DMUTEX__TICKET_RELEASED : DMUTEX__TICKET_NOT_OURS);
}

/* A pooled connection fit to carry a request we will not wait for: one
 * that turns out closed (a restarted server) would swallow it silently. */
static struct dmutex__conn *
usable_conn(struct dmutex__node *n, int64_t deadline)
{
	struct dmutex__conn *c;

	for (int attempt = 0; attempt < 2; attempt++) {
		if (!(c = dmutex__node_get_by(n, deadline)))
			return NULL;
		/* Answers already here are read now too: a socket closed with
		 * unread input (exit right after this unlock) is reset, and a
		 * reset may drop what we are about to send. */
		if (!dmutex__conn_check(c) &&
				(!n->loc || c->gen == n->loc->ops->gen(n->loc)))
			return c;
		/* The rest of the pool is suspect too: a fresh one next. */
		c->err = 1;
		dmutex__node_put(n, c);
		dmutex__node_drop_idle(n);
	}
	return NULL;
}

int
dmutex__backend_redis_release_async(struct dmutex__backend *be, struct dmutex__node *n,
		const char *name, const char *token, int mode, int64_t deadline, int64_t until_ns,
		dmutex__rescue_fn rescue, void *rescue_arg, struct dmutex__rel_ticket **out)
{
	size_t len = strlen(name);
	struct ticket *t;
	struct dmutex__conn *c;

	*out = NULL;
	if (n->route || !(c = usable_conn(n, deadline)))
		return EIO;
	if (!(t = calloc(1, sizeof *t + len + 1))) {
		dmutex__node_put(n, c);
		return EIO;
	}
	t->face.ops = be->ops;
	t->owed.done = done;
	t->be = be;
	t->node = n;
	t->conn = c;
	t->refs = 2;
	t->mode = mode;
	/* By SHA only where the server is known to have it: nobody may read
	 * this answer for a while, and a NOSCRIPT unread is a release not
	 * run (a restarted server's connections are all new: by source). */
	t->by_sha = (c->scripts_ok >> DMUTEX__REL_SCRIPT(mode)) & 1;
	t->until_ns = until_ns;
	t->rescue = rescue;
	t->rescue_arg = rescue_arg;
	memcpy(t->token, token, sizeof t->token);
	memcpy(t->name, name, len + 1);
	if (append(t, c)) {
		dmutex__node_put(n, c);
		free(t);
		return EIO;
	}
	/* Wholly in the kernel before unlock returns: exit or fork right
	 * after loses nothing.  A failure breaks c, and node_put's free
	 * settles the ticket UNKNOWN (rescued). */
	dmutex__conn_flush(c, deadline);
	dmutex__node_put(n, c);
	*out = &t->face;
	return 0;
}

static int
is_settled(void *arg)
{
	return dmutex__redis_ticket_state(arg) != DMUTEX__TICKET_PENDING;
}

int
dmutex__redis_ticket_wait(struct dmutex__rel_ticket *f, int64_t deadline)
{
	struct ticket *t = ticket_of(f);
	struct dmutex__conn *c;
	int st;

	while ((st = dmutex__redis_ticket_state(f)) == DMUTEX__TICKET_PENDING) {
		if (dmutex__node_take(t->node, t->conn, deadline, is_settled, f, &c))
			break;
		if (c) {
			/* Ours now: read what it owes (a failure frees it in
			 * node_put, which settles the rest UNKNOWN). */
			dmutex__conn_settle(c, deadline);
			dmutex__node_put(t->node, c);
		}
	}
	return st;
}
