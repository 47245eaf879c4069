/*
 * The subscriber thread of a client: one pub/sub connection per node,
 * driven with poll(2) so that subscriptions can be added while it waits.
 * A release publishes on the lock's channel; the message bumps the
 * subscription's sequence and wakes the thread waiting on it.
 *
 * When a connection breaks, every sequence is bumped too: a release may
 * have been missed, so waiters look again (a spurious wake-up, never a
 * lost one).
 *
 * A non-fair waiter that pops its grant (dmutex__redis_wsub_pop): its
 * waiting thread blocks in BLPOP on a list of its own, where the release
 * pushes the grant (wake_queue.lua), so Redis wakes that thread itself,
 * with no relay through this one.  The subscription stays: the release's
 * "g?" counts it (a dead or departed waiter is skipped, nothing written
 * for it), and every other message on the channel (an older client's "r",
 * a lock made not recoverable, a reset, the shim's mutex_fresh.lua) and a
 * lost subscription make this thread push a wake-up into that list
 * (wake_push.lua): the waiting thread looks again at once.
 *
 * Sharded (a cluster, backend.h sub_route): a channel is subscribed with
 * SSUBSCRIBE on the one node serving its slot, connected to when first
 * needed.  A node that gives the slot away unsubscribes us itself
 * (sunsubscribe): the sequence is bumped, the slot map refreshed, and the
 * channel subscribed again where it now lives.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "base/base.h"
#include "base/log.h"
#include "node.h"
#include "crc16.h"
#include "grant.h"
#include "waiter.h"
#include "backend/redis/scripts/scripts.h"

enum { ST_NONE, ST_SUB_SENT, ST_SUBSCRIBED, ST_UNSUB_SENT };

struct dmutex__wsub {
	struct dmutex__wsub *next;
	char *channel;
	unsigned refs;
	uint64_t seq;                   /* written under waiter.mu, atomically */
	uint64_t heard;                 /* the moves of seq that were messages, likewise */
	int confirmed;
	int target;                     /* sharded: the node serving it, -1 unknown */
	/* A fair lock's waiter: the token a hand-over must name to wake it
	 * (fair_release.lua publishes "h:<token>[:<grant>]"); "" wakes on
	 * everything.  handed: the grant of a hand-over to it, if any. */
	char want[DMUTEX__TOKEN_HEX + 1];
	unsigned nnotify;               /* held by kept leases: tell w->notify */
	char handed[DMUTEX__HANDED_MAX];
	int has_handed;
	/* A fair waiter's own grant list (dmutex__redis_waiter_sub_own): no
	 * subscription, the waiting thread pops it itself; only that thread
	 * touches it.  refused: BLPOP is denied, sleep instead. */
	int own, refused;
	/* A non-fair waiter that pops its grant list (dmutex__redis_wsub_pop,
	 * above); push: a wake-up to push there (this thread, after its
	 * poll); lost: its subscription was lost, push again once it is back. */
	int pop, push, lost;
	/* Its waiters' own: a message on one channel wakes the threads
	 * waiting for that one, not every thread of the process (a broadcast
	 * to 1,000 waiters woke each of them for every other's message). */
	pthread_cond_t cv;
	unsigned char state[];          /* per node */
};

struct wnode {
	struct dmutex__node *node;
	struct dmutex__conn *ctx;
	int64_t retry_ns;
	int64_t backoff_ns;
};

struct dmutex__waiter {
	pthread_mutex_t mu;             /* leaf */
	pthread_t thread;
	int running, stop;
	int pipe[2];
	struct dmutex__wsub *subs;
	size_t nnodes;
	struct wnode *nodes;
	struct dmutex__backend *be;
	int sharded;
	int stale;                      /* sharded: the slot map needs a refresh */
	/* Called by the thread, with no lock held, after a message (or a lost
	 * connection) on a subscription with nnotify > 0: set by kick. */
	void (*notify)(void *);
	void *notify_arg;
	int kick;
	/* A subscription asked for without waking the thread (until_ns 0):
	 * the next request wakes it whatever it asks. */
	int deferred;
};

static pthread_mutex_t create_mu = PTHREAD_MUTEX_INITIALIZER;

void
dmutex__redis_waiter_create_lock(void)
{
	pthread_mutex_lock(&create_mu);
}

void
dmutex__redis_waiter_create_unlock(void)
{
	pthread_mutex_unlock(&create_mu);
}

static void
init_sync(struct dmutex__waiter *w)
{
	pthread_mutex_init(&w->mu, NULL);
}

static struct dmutex__waiter *
get_waiter(struct dmutex__backend *be)
{
	struct dmutex__waiter *w;

	pthread_mutex_lock(&create_mu);
	if (!(w = be->waiter) && (w = calloc(1, sizeof *w))) {
		w->be = be;
		w->sharded = be->ops->sub_route != NULL;
		w->nnodes = be->ops->sub_node ? be->nsub : be->nnodes;
		if (!(w->nodes = calloc(w->nnodes, sizeof *w->nodes))) {
			free(w);
			w = NULL;
		} else {
			/* Sub nodes are looked up when first needed. */
			for (size_t i = 0; i < w->nnodes && !be->ops->sub_node; i++)
				w->nodes[i].node = &be->nodes[i];
			w->pipe[0] = w->pipe[1] = -1;
			init_sync(w);
			be->waiter = w;
		}
	}
	pthread_mutex_unlock(&create_mu);
	return w;
}

/* Under w->mu. */
static void
poke(struct dmutex__waiter *w)
{
	char b = 1;

	w->deferred = 0;
	if (w->pipe[1] >= 0 && write(w->pipe[1], &b, 1) < 0 && errno != EAGAIN)
		dmutex__log(DMUTEX_LOG_DEBUG, "waiter: cannot poke: %s", strerror(errno));
}

static struct dmutex__wsub *
find(struct dmutex__waiter *w, const char *ch, size_t len)
{
	for (struct dmutex__wsub *s = w->subs; s; s = s->next)
		if (strlen(s->channel) == len && !memcmp(s->channel, ch, len))
			return s;
	return NULL;
}

/* The next connection attempt of a node, with a back-off that only a
 * working connection (a confirmed reply) resets: a server that accepts and
 * then resets every connection must not make us spin. */
static void
schedule_retry(struct wnode *wn)
{
	wn->retry_ns = dmutex__now_ns() + wn->backoff_ns;
	wn->backoff_ns = wn->backoff_ns ? wn->backoff_ns * 2 : 50 * DMUTEX__MS;
	if (wn->backoff_ns > 1000 * DMUTEX__MS)
		wn->backoff_ns = 1000 * DMUTEX__MS;
}

/*
 * Under w->mu: something may have been published on s that nobody heard
 * (a message, a lost connection, a subscription that landed late or moved).
 * Waiters look again; a kept lease counts as asked back, and its client's
 * renewal thread must hear of it now: nobody may be about to lock or
 * unlock it, and otherwise it would keep the lease until its idle end
 * (a third of a lease) while another process waits.
 */
static void
bump(struct dmutex__waiter *w, struct dmutex__wsub *s)
{
	__atomic_fetch_add(&s->seq, 1, __ATOMIC_RELEASE);
	w->kick |= s->nnotify > 0;
	pthread_cond_broadcast(&s->cv);
}

/* Under w->mu: every waiting thread looks again (stop, fork). */
static void
wake_all(struct dmutex__waiter *w)
{
	for (struct dmutex__wsub *s = w->subs; s; s = s->next)
		pthread_cond_broadcast(&s->cv);
}

static void
sub_cv_init(struct dmutex__wsub *s)
{
	dmutex__cond_init_mono(&s->cv);
}

static void
drop_node(struct dmutex__waiter *w, size_t i, const char *why)
{
	struct wnode *wn = &w->nodes[i];

	dmutex__log(DMUTEX_LOG_DEBUG, "%s: wake-up connection lost: %s", wn->node->addr->display, why);
	schedule_retry(wn);
	pthread_mutex_lock(&w->mu);
	/* Under w->mu, which fork() holds (client.c, atfork_prepare): a
	 * child sees the context whole or gone, never closed with its
	 * pointer still set.  Its atfork handler closes the socket of what
	 * it sees (forget_inherited), and would close whatever file the
	 * parent had opened under the freed number meanwhile (a server spawn
	 * of the test harness found its /dev/null closed in its child). */
	dmutex__conn_free(wn->ctx);
	wn->ctx = NULL;
	for (struct dmutex__wsub *s = w->subs; s; s = s->next) {
		s->state[i] = ST_NONE;
		bump(w, s);
		/* Its thread, in BLPOP, hears no bump: a wake-up in its list
		 * now, and again once subscribed (a release meanwhile counted
		 * nobody and skipped it: it must queue again, listened to). */
		s->push |= s->pop;
		/* Any of them: a wait may turn to BLPOP before it is back. */
		s->lost = 1;
	}
	pthread_mutex_unlock(&w->mu);
}

/* Channels per (UN)SUBSCRIBE command. */
#define SUB_BATCH 32

/* Append cmd with the *n channels of ch to ctx, if any (one command:
 * Redis answers each channel on its own, as on_reply reads them); none
 * are left. */
static void
append_subs(struct dmutex__conn *ctx, const char *cmd, const char **ch, size_t *n)
{
	const char *argv[1 + SUB_BATCH];

	if (!*n)
		return;
	argv[0] = cmd;
	memcpy(argv + 1, ch, *n * sizeof *ch);
	(void)dmutex__conn_append_argv(ctx, (int)(1 + *n), argv, NULL);
	*n = 0;
}

/* Under w->mu: queue SUBSCRIBE/UNSUBSCRIBE for what changed, free what
 * nobody wants any more.  The channels that change on a node in one pass
 * go in one SUBSCRIBE and one UNSUBSCRIBE (issue 28: a condition wait
 * subscribes its own channel and its mutex's, and leaves both: four
 * commands in INFO stats, two now).  Sharded pub/sub sends one channel a
 * command: the channels of one SSUBSCRIBE must share a slot. */
static void
sync_subs(struct dmutex__waiter *w)
{
	struct dmutex__wsub **pp = &w->subs, *s;
	size_t batch = w->sharded ? 1 : SUB_BATCH;
	const char *subcmd = w->sharded ? "SSUBSCRIBE" : "SUBSCRIBE";
	const char *unsubcmd = w->sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE";

	for (size_t i = 0; i < w->nnodes; i++) {
		struct dmutex__conn *ctx = w->nodes[i].ctx;
		const char *sub[SUB_BATCH], *unsub[SUB_BATCH];
		size_t nsub = 0, nunsub = 0;

		if (!ctx)
			continue;
		for (s = w->subs; s; s = s->next) {
			int want = s->refs && (!w->sharded || s->target == (int)i);
			if (want && s->state[i] == ST_NONE) {
				sub[nsub++] = s->channel;
				s->state[i] = ST_SUB_SENT;
			} else if (!want && (s->state[i] == ST_SUB_SENT || s->state[i] == ST_SUBSCRIBED)) {
				unsub[nunsub++] = s->channel;
				s->state[i] = ST_UNSUB_SENT;
				/* A thread that reuses this record must wait for its
				 * own SUBSCRIBE to land, not trust the old one. */
				s->confirmed = 0;
			}
			if (nsub == batch)
				append_subs(ctx, subcmd, sub, &nsub);
			if (nunsub == batch)
				append_subs(ctx, unsubcmd, unsub, &nunsub);
		}
		append_subs(ctx, subcmd, sub, &nsub);
		append_subs(ctx, unsubcmd, unsub, &nunsub);
	}
	while ((s = *pp)) {
		int any = 0;
		for (size_t i = 0; i < w->nnodes; i++)
			any |= s->state[i] != ST_NONE;
		if (!s->refs && !any) {
			*pp = s->next;
			pthread_cond_destroy(&s->cv);   /* nobody waits: no refs */
			free(s->channel);
			free(s);
			continue;
		}
		pp = &s->next;
	}
}

/* A cluster node answered an SSUBSCRIBE with "MOVED slot host:port": our
 * map was out of date.  The channels of that slot we asked it for are to
 * be asked where the slot went (the others on this connection stay). */
static int
moved(struct dmutex__waiter *w, size_t node, const char *err)
{
	long slot = strtol(err + 6, NULL, 10);

	dmutex__log(DMUTEX_LOG_DEBUG, "%s: subscribe: %s", w->nodes[node].node->addr->display, err);
	pthread_mutex_lock(&w->mu);
	for (struct dmutex__wsub *s = w->subs; s; s = s->next)
		if (s->state[node] == ST_SUB_SENT &&
				(long)dmutex__key_slot(s->channel, strlen(s->channel)) == slot) {
			s->state[node] = ST_NONE;
			bump(w, s);
		}
	pthread_mutex_unlock(&w->mu);
	return 1;
}

/* A message "h:<token>[:<grant>]" (fair_release.lua): 1 if the lock went
 * to another waiter, nothing for ours to do.  Handed to ours: keep what
 * it was granted ("" if it is to claim it). */
static int
take_grant(struct dmutex__wsub *s, const char *msg, size_t mlen)
{
	const char *tok, *end;
	size_t len;

	if (!s->want[0] || mlen <= 2 || memcmp(msg, "h:", 2))
		return 0;
	tok = msg + 2;
	end = memchr(tok, ':', mlen - 2);
	len = end ? (size_t)(end - tok) : mlen - 2;
	if (len != strlen(s->want) || memcmp(tok, s->want, len))
		return 1;
	len = end ? mlen - 2 - len - 1 : 0;
	if (len >= sizeof s->handed)
		len = 0;        /* not ours to read: claim it */
	memcpy(s->handed, end ? end + 1 : "", len);
	s->handed[len] = 0;
	s->has_handed = 1;
	return 0;
}

/* A non-fair lock granted to our waiter by the release that popped it
 * (wake_queue.lua): "g:<fence>:<died>:<lease>:<stamp>", on the waiter's own
 * channel.  Kept as a fair hand-over's grant is (mutex_lock.c takes it). */
static void
take_nonfair_grant(struct dmutex__wsub *s, const char *msg, size_t mlen)
{
	size_t len;

	if (s->want[0] || mlen <= 2 || memcmp(msg, "g:", 2) || (len = mlen - 2) >= sizeof s->handed)
		return;
	memcpy(s->handed, msg + 2, len);
	s->handed[len] = 0;
	s->has_handed = 1;
}

/* A fair lock handed to another waiter: nothing for ours to do (above). */
static int
for_another(struct dmutex__wsub *s, const redisReply *msg)
{
	/* "k": a process asks for a kept lease back (acquire.lua): news for
	 * its holder only.  A waiter that woke on it would ask again and
	 * publish it again: a hot loop.  (Not "w": rw_release.lua wakes a
	 * read-write lock's waiters with that one.) */
	if (msg->type == REDIS_REPLY_STRING && msg->len == 1 && msg->str[0] == 'k')
		return !s->nnotify;
	/* "g?": a release asking whether a grant would be heard here; the
	 * grant itself follows in the same script (wake_queue.lua).  Woken on
	 * it, the waiter would ask before the grant arrives. */
	if (msg->type == REDIS_REPLY_STRING && msg->len == 2 && !memcmp(msg->str, "g?", 2))
		return 1;
	if (msg->type == REDIS_REPLY_STRING)
		take_nonfair_grant(s, msg->str, msg->len);
	return msg->type == REDIS_REPLY_STRING && take_grant(s, msg->str, msg->len);
}

/* -1 if the server refused a (UN)SUBSCRIBE: the connection is then
 * dropped and everything subscribed again on a new one (a server still
 * loading its data after a restart answers LOADING to the first). */
static int
on_reply(struct dmutex__waiter *w, size_t node, redisReply *r)
{
	struct dmutex__wsub *s;
	const char *kind;

	if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
			r->element[0]->type != REDIS_REPLY_STRING ||
			r->element[1]->type != REDIS_REPLY_STRING) {
		if (r->type == REDIS_REPLY_ERROR && w->sharded && !strncmp(r->str, "MOVED ", 6))
			return moved(w, node, r->str);
		if (r->type == REDIS_REPLY_ERROR) {
			dmutex__log(DMUTEX_LOG_WARN, "%s: subscribe failed: %s",
					w->nodes[node].node->addr->display, r->str);
			return -1;
		}
		return 0;
	}
	kind = r->element[0]->str;
	/* smessage, ssubscribe, sunsubscribe: the same with sharded pub/sub. */
	if (w->sharded && kind[0] == 's')
		kind++;
	pthread_mutex_lock(&w->mu);
	if ((s = find(w, r->element[1]->str, r->element[1]->len))) {
		if (!strcmp(kind, "message")) {
			if (!for_another(s, r->element[2])) {
				__atomic_fetch_add(&s->heard, 1, __ATOMIC_RELEASE);
				bump(w, s);
				/* Its grant comes on its list, never here: whatever
				 * this is, its thread must look again. */
				s->push |= s->pop;
			}
		} else if (!strcmp(kind, "subscribe")) {
			/* The connection works: the next loss retries at once. */
			w->nodes[node].backoff_ns = 0;
			if (s->state[node] == ST_SUB_SENT)
				s->state[node] = ST_SUBSCRIBED;
			/* A release published before the first subscription landed
			 * reached nobody: make the waiter ask again (one spurious
			 * wake).  Later nodes add nothing: a release publishes on
			 * every node. */
			if (!s->confirmed || s->lost) {
				bump(w, s);
				/* A thread already in BLPOP hears no bump (it
				 * may have gone there unconfirmed, or since the
				 * loss): a wake-up in its list. */
				s->push |= s->pop;
			}
			s->confirmed = 1;
			s->lost = 0;
		} else if (!strcmp(kind, "unsubscribe")) {
			if (s->state[node] == ST_UNSUB_SENT) {
				s->state[node] = ST_NONE;
			} else if (s->state[node] != ST_NONE) {
				/* Not asked for: the node gave the slot away.  A
				 * release may be published where it went before we
				 * subscribe there: look again now. */
				s->state[node] = ST_NONE;
				bump(w, s);
				w->stale = 1;
			}
		}
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&w->mu);
	return 0;
}

static void
read_node(struct dmutex__waiter *w, size_t i)
{
	struct dmutex__conn *ctx = w->nodes[i].ctx;
	void *v;
	int rc;

	if (dmutex__conn_fill(ctx)) {
		drop_node(w, i, ctx->errstr);
		return;
	}
	for (;;) {
		if (dmutex__conn_next(ctx, &v)) {
			drop_node(w, i, ctx->errstr);
			return;
		}
		if (!v)
			return;
		if ((rc = on_reply(w, i, v)) > 0) {
			/* Outside w->mu: the backend may ask the cluster. */
			w->be->ops->sub_stale(w->be, ((redisReply *)v)->str);
			freeReplyObject(v);
			continue;
		}
		if (rc) {
			freeReplyObject(v);
			/* Not at once (drop_node backs off): a loading server
			 * says the same again. */
			drop_node(w, i, "subscribe refused");
			pthread_mutex_lock(&w->mu);
			w->stale |= w->sharded;
			pthread_mutex_unlock(&w->mu);
			return;
		}
		freeReplyObject(v);
	}
}

static void
flush_node(struct dmutex__waiter *w, size_t i)
{
	struct dmutex__conn *ctx = w->nodes[i].ctx;

	/* Never blocks: what does not fit now goes when poll says POLLOUT. */
	if (ctx && dmutex__conn_write(ctx) < 0)
		drop_node(w, i, ctx->errstr);
}

/* Under w->mu, sharded: where each channel lives now, and which nodes that
 * makes needed.  1 if some channel's node is not known. */
static int
route_subs(struct dmutex__waiter *w, unsigned char *need)
{
	int unknown = 0;

	memset(need, 0, w->nnodes);
	for (struct dmutex__wsub *s = w->subs; s; s = s->next) {
		s->target = w->be->ops->sub_route(w->be, s->channel);
		if (s->target >= (int)w->nnodes)
			s->target = -1;
		if (s->target >= 0)
			need[s->target] = 1;
		unknown |= s->refs && s->target < 0;
		/* Still subscribed elsewhere: keep that connection to undo it. */
		for (size_t i = 0; i < w->nnodes; i++)
			need[i] |= s->state[i] != ST_NONE;
	}
	if (unknown)
		w->stale = 1;
	return unknown;
}

/* Push the wake-ups that pop-mode waiters are owed (above), outside w->mu:
 * one script call each, on an ordinary connection.  A waiter whose push
 * fails (the server is down) finds out itself: its BLPOP fails too, and it
 * looks again.  Rare: never on the way of a grant. */
static void
push_wakes(struct dmutex__waiter *w)
{
	struct dmutex__node *n = &w->be->nodes[0];

	for (;;) {
		char key[DMUTEX__KEY_MAX + DMUTEX__TOKEN_HEX + 2] = "";
		const char *argv[3] = { key, "r", "10000" };
		redisReply *r;
		int md;

		pthread_mutex_lock(&w->mu);
		for (struct dmutex__wsub *s = w->subs; s && !key[0]; s = s->next)
			if (s->push) {
				s->push = 0;
				if (s->pop && s->refs && strlen(s->channel) < sizeof key)
					strcpy(key, s->channel);
			}
		pthread_mutex_unlock(&w->mu);
		if (!key[0])
			return;
		r = dmutex__node_call_by(n, DMUTEX__SCRIPT_WAKE_PUSH, 1, 3, argv, &md,
				dmutex__now_ns() + (int64_t)n->command_ms * DMUTEX__MS);
		if (r) {
			freeReplyObject(r);
			continue;
		}
		/* The server is out of reach: the others' pushes would each
		 * wait out a command timeout here, while this thread reads
		 * nothing; their BLPOPs fail as this did, and they look again. */
		dmutex__log(DMUTEX_LOG_DEBUG, "%s: cannot push a wake-up", key);
		pthread_mutex_lock(&w->mu);
		for (struct dmutex__wsub *s = w->subs; s; s = s->next)
			s->push = 0;
		pthread_mutex_unlock(&w->mu);
		return;
	}
}

/* The poke pipe, emptied (non-blocking). */
static void
drain(int fd)
{
	char buf[64];

	while (read(fd, buf, sizeof buf) > 0)
		;
}

static void *
waiter_main(void *arg)
{
	struct dmutex__waiter *w = arg;
	struct pollfd *pf = calloc(w->nnodes + 1, sizeof *pf);
	unsigned char *need = calloc(w->nnodes, 1);

	if (!pf || !need) {
		free(pf);
		free(need);
		return NULL;
	}
	dmutex__own_thread_begin();
	pthread_mutex_lock(&w->mu);
	while (!w->stop) {
		int64_t now = dmutex__now_ns(), next = INT64_MAX;
		int timeout, stale;

		if (w->sharded && route_subs(w, need))
			next = now + 50 * DMUTEX__MS;   /* a slot's owner unknown: again soon */
		stale = w->stale;
		w->stale = 0;
		pthread_mutex_unlock(&w->mu);
		if (stale)
			w->be->ops->sub_stale(w->be, NULL);
		/* Connect what is down, with backoff; outside the lock. */
		for (size_t i = 0; i < w->nnodes; i++) {
			struct wnode *wn = &w->nodes[i];
			if (wn->ctx || (w->sharded && !need[i]))
				continue;
			if (!wn->node && !(wn->node = w->be->ops->sub_node(w->be, i))) {
				if (now >= wn->retry_ns)
					schedule_retry(wn);
				continue;
			}
			if (now >= wn->retry_ns && !(wn->ctx = dmutex__node_connect(wn->node)))
				schedule_retry(wn);
		}
		pthread_mutex_lock(&w->mu);
		sync_subs(w);
		pthread_mutex_unlock(&w->mu);
		/* The retry times are read after the flush: a connection that
		 * fails its first write is down again, and a poll without a
		 * timeout would then wait for ever (a server restarted while
		 * we connected to its dying listener). */
		for (size_t i = 0; i < w->nnodes; i++) {
			struct wnode *wn = &w->nodes[i];

			flush_node(w, i);
			/* Only a node we want and do not have brings the next
			 * pass forward: a sharded waiter's unneeded nodes keep a
			 * retry time long past (0 for one never connected), and
			 * a poll timeout taken from it would be 0 on every pass,
			 * a busy loop. */
			if (!wn->ctx && !(w->sharded && !need[i]) && wn->retry_ns < next)
				next = wn->retry_ns;
		}

		pf[0].fd = w->pipe[0];
		pf[0].events = POLLIN;
		for (size_t i = 0; i < w->nnodes; i++) {
			pf[i + 1].fd = w->nodes[i].ctx ? w->nodes[i].ctx->fd : -1;
			pf[i + 1].events = POLLIN;
			if (w->nodes[i].ctx && w->nodes[i].ctx->outoff < w->nodes[i].ctx->outlen)
				pf[i + 1].events |= POLLOUT;
			pf[i + 1].revents = 0;
		}
		now = dmutex__now_ns();
		/* Never for ever: once a second, whether the program has
		 * ended under us (base.h, dmutex__exit_if_alone). */
		if (next - now > DMUTEX__ALONE_LOOK_MS * DMUTEX__MS)
			next = now + DMUTEX__ALONE_LOOK_MS * DMUTEX__MS;
		timeout = next <= now ? 0 : (int)((next - now) / DMUTEX__MS + 1);
		dmutex__exit_if_alone();
		if (poll(pf, w->nnodes + 1, timeout) > 0) {
			if (pf[0].revents)
				drain(w->pipe[0]);
			for (size_t i = 0; i < w->nnodes; i++)
				if ((pf[i + 1].revents & ~POLLOUT) && w->nodes[i].ctx)
					read_node(w, i);
		}
		push_wakes(w);
		pthread_mutex_lock(&w->mu);
		if (w->kick && w->notify) {
			void (*fn)(void *) = w->notify;
			void *arg = w->notify_arg;
			w->kick = 0;
			pthread_mutex_unlock(&w->mu);
			fn(arg);
			pthread_mutex_lock(&w->mu);
		}
	}
	pthread_mutex_unlock(&w->mu);
	dmutex__own_thread_end();
	free(pf);
	free(need);
	return NULL;
}

/* Under w->mu. */
static int
ensure_running(struct dmutex__waiter *w)
{
	sigset_t all, old;
	int err;

	if (w->running)
		return 0;
	if (pipe2(w->pipe, O_NONBLOCK | O_CLOEXEC)) {
		dmutex__log(DMUTEX_LOG_ERROR, "waiter: pipe: %s", strerror(errno));
		w->pipe[0] = w->pipe[1] = -1;
		return errno;
	}
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&w->thread, NULL, waiter_main, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		dmutex__log(DMUTEX_LOG_ERROR, "cannot start the wake-up thread: %s", strerror(err));
		close(w->pipe[0]);
		close(w->pipe[1]);
		w->pipe[0] = w->pipe[1] = -1;
		return err;
	}
	w->running = 1;
	return 0;
}

struct dmutex__wsub *
dmutex__redis_waiter_sub(struct dmutex__backend *be, const char *channel, int64_t until_ns)
{
	struct dmutex__waiter *w = get_waiter(be);
	struct dmutex__wsub *s;
	size_t len = strlen(channel);
	struct timespec ts;

	if (!w)
		return NULL;
	pthread_mutex_lock(&w->mu);
	if (ensure_running(w)) {
		pthread_mutex_unlock(&w->mu);
		return NULL;
	}
	if (!(s = find(w, channel, len))) {
		if (!(s = calloc(1, sizeof *s + w->nnodes)) || !(s->channel = strdup(channel))) {
			free(s);
			pthread_mutex_unlock(&w->mu);
			return NULL;
		}
		sub_cv_init(s);
		s->next = w->subs;
		w->subs = s;
	}
	/* until_ns 0: not waited for, and the thread not woken: the caller's
	 * next request, made at once, wakes it, and the pass that follows
	 * sends both channels in one SUBSCRIBE (sync_subs; issue 28: a
	 * condition wait subscribes its mutex's channel, then its own). */
	if (!until_ns) {
		if (!s->refs++ || !s->confirmed)
			w->deferred = 1;
		pthread_mutex_unlock(&w->mu);
		return s;
	}
	/* A channel already wanted and confirmed gives the thread nothing to
	 * do: waking it would only take a CPU from the caller (a condition
	 * wait's taking back of its mutex, whose channel the wait holds). */
	if (!s->refs++ || !s->confirmed || w->deferred)
		poke(w);
	dmutex__ns_to_ts(until_ns, &ts);
	while (!s->confirmed && !w->stop && dmutex__now_ns() < until_ns)
		if (pthread_cond_timedwait(&s->cv, &w->mu, &ts) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&w->mu);
	return s;
}

struct dmutex__wsub *
dmutex__redis_waiter_sub_notify(struct dmutex__backend *be, const char *channel, int64_t until_ns,
		void (*notify)(void *), void *arg)
{
	struct dmutex__wsub *s = dmutex__redis_waiter_sub(be, channel, until_ns);
	struct dmutex__waiter *w = be->waiter;

	if (s) {
		pthread_mutex_lock(&w->mu);
		s->nnotify++;
		w->notify = notify;
		w->notify_arg = arg;
		pthread_mutex_unlock(&w->mu);
	}
	return s;
}

void
dmutex__redis_waiter_unsub_notify(struct dmutex__backend *be, struct dmutex__wsub *s)
{
	struct dmutex__waiter *w = be->waiter;

	pthread_mutex_lock(&w->mu);
	s->nnotify--;
	pthread_mutex_unlock(&w->mu);
	dmutex__redis_waiter_unsub(be, s);
}

struct dmutex__wsub *
dmutex__redis_waiter_sub_own(struct dmutex__backend *be, const char *key)
{
	struct dmutex__wsub *s;

	/* One master only: Redlock has no fair locks. */
	if (be->nnodes != 1 || !(s = calloc(1, sizeof *s)))
		return NULL;
	if (!(s->channel = strdup(key))) {
		free(s);
		return NULL;
	}
	s->own = s->confirmed = 1;
	s->refs = 1;
	return s;
}

/* The waiting thread pops its grant list itself (grant.c): a message moves
 * the sequence, as the listener's would. */
static int
own_wait(struct dmutex__backend *be, struct dmutex__wsub *s, uint64_t seq, int64_t until_ns)
{
	char msg[DMUTEX__HANDED_MAX + DMUTEX__TOKEN_HEX + 8];
	int rc;

	if (s->seq != seq)
		return 1;
	if (s->refused) {
		dmutex__sleep_until(until_ns);
		return 0;
	}
	rc = dmutex__redis_grant_pop(be, s->channel, until_ns, msg, sizeof msg);
	if (rc == 0)
		return 0;
	/* Refused: the caller's next try says whether the lock is still
	 * busy; after that, sleep to the bound, which it still keeps.
	 * Failed: not at once again (a server that answers the try but fails
	 * the BLPOP, as a demoted master's UNBLOCKED, must not make a loop). */
	s->refused = rc == -1;
	if (rc == -2) {
		int64_t soon = dmutex__now_ns() + 50 * DMUTEX__MS;
		dmutex__sleep_until(soon < until_ns ? soon : until_ns);
	}
	if (rc == 1)
		take_grant(s, msg, strlen(msg));
	s->seq++;
	return 1;
}

int
dmutex__redis_wsub_confirmed(struct dmutex__backend *be, struct dmutex__wsub *s, int64_t until_ns)
{
	struct dmutex__waiter *w = be->waiter;
	struct timespec ts;
	int ok;

	if (s->own)
		return 1;
	dmutex__ns_to_ts(until_ns, &ts);
	pthread_mutex_lock(&w->mu);
	while (!s->confirmed && !w->stop && dmutex__now_ns() < until_ns)
		if (pthread_cond_timedwait(&s->cv, &w->mu, &ts) == ETIMEDOUT)
			break;
	ok = s->confirmed;
	pthread_mutex_unlock(&w->mu);
	return ok;
}

uint64_t
dmutex__redis_wsub_seq(struct dmutex__backend *be, struct dmutex__wsub *s)
{
	/* Without waiter.mu: a kept lease's every local lock and unlock
	 * asks (lease_cache.c).  Changed only under waiter.mu, atomically. */
	(void)be;
	return __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
}

uint64_t
dmutex__redis_wsub_heard(struct dmutex__backend *be, struct dmutex__wsub *s)
{
	/* As the sequence, and moved before it. */
	(void)be;
	return __atomic_load_n(&s->heard, __ATOMIC_ACQUIRE);
}

/* A non-fair waiter that pops its grant list (above): BLPOP until a grant
 * or a wake-up lands, or until_ns.  The grant is kept as the listener keeps
 * one it hears (take_nonfair_grant); anything else only makes the caller
 * look again.  Refused (an ACL without BLPOP): the listener relays from
 * now on, and the caller's next request says so (wake_pop, ask = 0). */
static int
pop_wait(struct dmutex__backend *be, struct dmutex__wsub *s, uint64_t seq, int64_t until_ns)
{
	struct dmutex__waiter *w = be->waiter;
	char msg[DMUTEX__HANDED_MAX + 8];
	int rc;

	if (__atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) != seq)
		return 1;
	rc = dmutex__redis_grant_pop(be, s->channel, until_ns, msg, sizeof msg);
	if (rc == 0)
		return __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) != seq;
	if (rc == -2) {
		/* Failed: not at once again (as own_wait). */
		int64_t soon = dmutex__now_ns() + 50 * DMUTEX__MS;
		dmutex__sleep_until(soon < until_ns ? soon : until_ns);
	}
	pthread_mutex_lock(&w->mu);
	if (rc == 1)
		take_nonfair_grant(s, msg, strlen(msg));
	else if (rc == -1)
		__atomic_store_n(&s->pop, 0, __ATOMIC_RELEASE);
	bump(w, s);
	pthread_mutex_unlock(&w->mu);
	return 1;
}

static void
unlock_mu(void *mu)
{
	pthread_mutex_unlock(mu);
}

int
dmutex__redis_wsub_wait(struct dmutex__backend *be, struct dmutex__wsub *s, uint64_t seq, int64_t until_ns)
{
	struct dmutex__waiter *w = be->waiter;
	struct timespec ts;
	int woke;

	if (s->own)
		return own_wait(be, s, seq, until_ns);
	if (__atomic_load_n(&s->pop, __ATOMIC_ACQUIRE))
		return pop_wait(be, s, seq, until_ns);
	dmutex__ns_to_ts(until_ns, &ts);
	pthread_mutex_lock(&w->mu);
	/* A condition wait's caller may be cancelled here (the one
	 * cancellation point of the library, cond_wait.c): leave w->mu free. */
	pthread_cleanup_push(unlock_mu, &w->mu);
	while (s->seq == seq && !w->stop)
		if (pthread_cond_timedwait(&s->cv, &w->mu, &ts) == ETIMEDOUT)
			break;
	woke = s->seq != seq;
	pthread_cleanup_pop(1);
	return woke;
}

void
dmutex__redis_wsub_want(struct dmutex__backend *be, struct dmutex__wsub *s, const char *token)
{
	struct dmutex__waiter *w = be->waiter;

	if (s->own) {
		snprintf(s->want, sizeof s->want, "%s", token ? token : "");
		s->has_handed = 0;
		return;
	}
	pthread_mutex_lock(&w->mu);
	snprintf(s->want, sizeof s->want, "%s", token ? token : "");
	s->has_handed = 0;
	pthread_mutex_unlock(&w->mu);
}

int
dmutex__redis_wsub_handed(struct dmutex__backend *be, struct dmutex__wsub *s, char *out)
{
	struct dmutex__waiter *w = be->waiter;
	int has;

	if (s->own) {
		if ((has = s->has_handed))
			memcpy(out, s->handed, sizeof s->handed);
		s->has_handed = 0;
		return has;
	}
	pthread_mutex_lock(&w->mu);
	if ((has = s->has_handed))
		memcpy(out, s->handed, sizeof s->handed);
	s->has_handed = 0;
	pthread_mutex_unlock(&w->mu);
	return has;
}

int
dmutex__redis_wsub_pop(struct dmutex__backend *be, struct dmutex__wsub *s, int ask)
{
	struct dmutex__waiter *w = be->waiter;
	int pop;

	/* One master, not sharded: the list is BLPOPped on nodes[0]. */
	if (s->own || be->nnodes != 1 || w->sharded)
		return 0;
	pthread_mutex_lock(&w->mu);
	if (ask)
		__atomic_store_n(&s->pop, 1, __ATOMIC_RELEASE);
	pop = s->pop;
	pthread_mutex_unlock(&w->mu);
	return pop;
}

/* late: the channel goes at the thread's next pass, not at once (one
 * master only: waiter.h). */
static void
unsub(struct dmutex__backend *be, struct dmutex__wsub *s, int late)
{
	struct dmutex__waiter *w = be->waiter;

	if (s->own) {
		free(s->channel);
		free(s);
		return;
	}
	pthread_mutex_lock(&w->mu);
	s->want[0] = 0;
	s->has_handed = 0;
	__atomic_store_n(&s->pop, 0, __ATOMIC_RELEASE);
	s->push = s->lost = 0;
	if (!--s->refs && !(late && be->nnodes == 1 && !w->sharded))
		poke(w);
	pthread_mutex_unlock(&w->mu);
}

void
dmutex__redis_waiter_unsub(struct dmutex__backend *be, struct dmutex__wsub *s)
{
	unsub(be, s, 0);
}

void
dmutex__redis_waiter_unsub_late(struct dmutex__backend *be, struct dmutex__wsub *s)
{
	unsub(be, s, 1);
}

/*
 * In a fork child the wake-up thread is gone but may have been using its
 * contexts at the moment of fork (it does so without w->mu): close our copy
 * of the socket and drop the context without touching its buffers.
 */
static void
forget_inherited(struct dmutex__waiter *w)
{
	for (size_t i = 0; i < w->nnodes; i++)
		if (w->nodes[i].ctx) {
			close(w->nodes[i].ctx->fd);
			w->nodes[i].ctx = NULL;
		}
}

static void
free_state(struct dmutex__waiter *w)
{
	struct dmutex__wsub *s, *next;

	/* Not pthread_cond_destroy: in a fork child it would wait for the
	 * parent's threads that waited on it (a glibc condition variable
	 * holds nothing else). */
	for (s = w->subs; s; s = next) {
		next = s->next;
		free(s->channel);
		free(s);
	}
	w->subs = NULL;
	for (size_t i = 0; i < w->nnodes; i++) {
		if (w->nodes[i].ctx)
			dmutex__conn_free(w->nodes[i].ctx);
		w->nodes[i].ctx = NULL;
		w->nodes[i].retry_ns = 0;
		w->nodes[i].backoff_ns = 0;
	}
	if (w->pipe[0] >= 0) {
		close(w->pipe[0]);
		close(w->pipe[1]);
	}
	w->pipe[0] = w->pipe[1] = -1;
	w->running = 0;
	w->stop = 0;
}

void
dmutex__redis_waiter_stop(struct dmutex__backend *be)
{
	struct dmutex__waiter *w = be->waiter;
	int running;

	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	running = w->running;
	w->stop = 1;
	poke(w);
	wake_all(w);
	pthread_mutex_unlock(&w->mu);
	if (running)
		pthread_join(w->thread, NULL);
	free_state(w);
	pthread_mutex_destroy(&w->mu);
	free(w->nodes);
	free(w);
	be->waiter = NULL;
}

void
dmutex__redis_waiter_lock(struct dmutex__backend *be)
{
	if (be->waiter)
		pthread_mutex_lock(&be->waiter->mu);
}

void
dmutex__redis_waiter_unlock(struct dmutex__backend *be)
{
	if (be->waiter)
		pthread_mutex_unlock(&be->waiter->mu);
}

void
dmutex__redis_waiter_atfork_child(struct dmutex__backend *be)
{
	struct dmutex__waiter *w = be->waiter;

	if (!w)
		return;
	/* No thread here, and the pipe is shared with the parent: make our
	 * own on first use. */
	forget_inherited(w);
	free_state(w);
	init_sync(w);
}
