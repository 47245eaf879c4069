/*
 * Asynchronous release on one Redis master (issue 15 item 2): the release
 * is written to a pooled connection and the connection goes back to the
 * pool owing its answer (conn.h, struct dmutex__conn_owed).  The next user
 * of that connection sends its own request behind it and reads the answer
 * on the way to its own; dmutex__ticket_wait reads it for whoever needs it
 * sooner.  The answer is only recorded here (no lock taken, no user code
 * run: the reader may be any thread in any call); the core acts on it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "base.h"
#include "log.h"
#include "node.h"
#include "scripts.h"
#include "topology.h"

struct dmutex__rel_ticket {
	struct dmutex__conn_owed owed;  /* first: done is given &owed */
	struct dmutex__backend *be;
	struct dmutex__node *node;
	const struct dmutex__conn *conn;  /* where the answer comes; compared only */
	int state;                      /* atomic: DMUTEX__TICKET_* */
	unsigned refs;                  /* atomic */
	int mode;
	int by_sha;                     /* 0 once resent by source after NOSCRIPT */
	char token[DMUTEX__TOKEN_HEX + 1];
	char name[];
};

int
dmutex__ticket_state(const struct dmutex__rel_ticket *t)
{
	return __atomic_load_n(&t->state, __ATOMIC_ACQUIRE);
}

void
dmutex__ticket_ref(struct dmutex__rel_ticket *t)
{
	__atomic_add_fetch(&t->refs, 1, __ATOMIC_ACQ_REL);
}

void
dmutex__ticket_put(struct dmutex__rel_ticket *t)
{
	if (t && !__atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL))
		free(t);
}

static int
append(struct dmutex__rel_ticket *t, struct dmutex__conn *c)
{
	struct dmutex__rel_argv x;

	dmutex__rel_argv(t->be, t->name, t->token, t->mode, &x);
	if (dmutex__node_script_append(t->node, c, DMUTEX__SCRIPT_RELEASE, t->by_sha, 2,
			DMUTEX__REL_ARGC, x.argv, NULL))
		return -1;
	dmutex__conn_owe(c, &t->owed);
	return 0;
}

static void
settle(struct dmutex__rel_ticket *t, int state)
{
	__atomic_store_n(&t->state, state, __ATOMIC_RELEASE);
	dmutex__ticket_put(t);
}

/* The connection's reader met our answer (or c is freed: reply NULL). */
static void
done(struct dmutex__conn *c, struct dmutex__conn_owed *o, void *v)
{
	struct dmutex__rel_ticket *t = (struct dmutex__rel_ticket *)o;
	const char *display = t->node->addr->display;
	redisReply *r = v;
	int released;

	if (!r) {
		settle(t, DMUTEX__TICKET_UNKNOWN);
		return;
	}
	if (t->by_sha && dmutex__node_noscript(r)) {
		/* The server lost its scripts (restart, SCRIPT FLUSH): the
		 * release did not run.  Again by source, on this connection, so
		 * that it stays before whatever this connection sends next; the
		 * reader owes it like the first (node_put sends it). */
		freeReplyObject(r);
		t->by_sha = 0;
		if (append(t, c))
			settle(t, DMUTEX__TICKET_UNKNOWN);
		return;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		/* Not run (LOADING, READONLY, NOPERM...): the core releases
		 * again with retries, or the lease ends. */
		dmutex__log(dmutex__node_transient(r) ? DMUTEX_LOG_WARN : DMUTEX_LOG_ERROR,
				"%s: release of '%s' failed: %s", display, t->name, r->str);
		freeReplyObject(r);
		settle(t, DMUTEX__TICKET_UNKNOWN);
		return;
	}
	if (dmutex__rel_reply(display, t->name, r, &released)) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: release of '%s': unexpected reply shape", display,
				t->name);
		freeReplyObject(r);
		settle(t, DMUTEX__TICKET_UNKNOWN);
		return;
	}
	freeReplyObject(r);
	settle(t, released ? DMUTEX__TICKET_RELEASED : DMUTEX__TICKET_NOT_OURS);
}

int
dmutex__backend_redis_release_async(struct dmutex__backend *be, struct dmutex__node *n,
		const char *name, const char *token, int mode, int64_t deadline,
		struct dmutex__rel_ticket **out)
{
	size_t len = strlen(name);
	struct dmutex__rel_ticket *t;
	struct dmutex__conn *c;

	*out = NULL;
	if (n->route || !(c = dmutex__node_get_by(n, deadline)))
		return EIO;
	/* Answers already here are read now: a socket closed with unread
	 * input (exit right after this unlock) is reset, not closed, and a
	 * reset may drop what we are about to send. */
	if (dmutex__conn_settle_now(c) || !(t = calloc(1, sizeof *t + len + 1))) {
		dmutex__node_put(n, c);
		return EIO;
	}
	t->owed.done = done;
	t->be = be;
	t->node = n;
	t->conn = c;
	t->refs = 2;
	t->mode = mode;
	t->by_sha = 1;
	memcpy(t->token, token, sizeof t->token);
	memcpy(t->name, name, len + 1);
	if (append(t, c)) {
		dmutex__node_put(n, c);
		free(t);
		return EIO;
	}
	/* Wholly in the kernel before unlock returns: exit or fork right
	 * after loses nothing.  A failure breaks c, and node_put's free
	 * settles the ticket UNKNOWN: the core releases again. */
	dmutex__conn_flush(c, deadline);
	dmutex__node_put(n, c);
	*out = t;
	return 0;
}

static int
is_settled(void *arg)
{
	return dmutex__ticket_state(arg) != DMUTEX__TICKET_PENDING;
}

int
dmutex__ticket_wait(struct dmutex__rel_ticket *t, int64_t deadline)
{
	struct dmutex__conn *c;
	int st;

	while ((st = dmutex__ticket_state(t)) == DMUTEX__TICKET_PENDING) {
		if (dmutex__node_take(t->node, t->conn, deadline, is_settled, t, &c))
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
