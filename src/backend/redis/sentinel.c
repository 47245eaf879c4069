#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "base/log.h"
#include "node.h"
#include "sentinel.h"

/* After a watch connection failed: the pause before the next sentinel. */
#define WATCH_RETRY_MS 500
#define HOST_LEN 256

struct dmutex__sentinel {
	struct dmutex__locator loc;             /* first: the master node's view of us */
	const struct dmutex__node_addr *addr;   /* the master template */
	struct dmutex__node *nodes;             /* the sentinels */
	size_t n;
	unsigned command_ms;
	pthread_mutex_t mu;                     /* leaf: the fields below */
	char host[HOST_LEN];                    /* the master last named; "" none yet */
	int port;
	int valid;                              /* 0: ask again before use */
	unsigned gen;
	size_t next;                            /* the sentinel asked first */
	/* The watch thread. */
	struct dmutex__node *master;
	pthread_t thread;
	int running;
	int stop[2];                            /* a pipe: written to stop it */
};

static void sentinel_free(struct dmutex__sentinel *s);

static int
sentinel_new(const struct dmutex__node_addr *addr, unsigned connect_ms,
		unsigned command_ms, struct dmutex__sentinel **out)
{
	struct dmutex__sentinel *s = calloc(1, sizeof *s);
	int err = 0;

	if (!s || !(s->nodes = calloc(addr->nsentinels, sizeof *s->nodes))) {
		free(s);
		return ENOMEM;
	}
	s->addr = addr;
	s->command_ms = command_ms;
	s->stop[0] = s->stop[1] = -1;
	for (; s->n < addr->nsentinels; s->n++)
		if ((err = dmutex__node_init(&s->nodes[s->n], &addr->sentinels[s->n], connect_ms,
				command_ms)))
			break;
	if (err) {
		sentinel_free(s);
		return err;
	}
	pthread_mutex_init(&s->mu, NULL);
	*out = s;
	return 0;
}

static void
sentinel_free(struct dmutex__sentinel *s)
{
	if (!s)
		return;
	if (s->running) {
		/* A byte on the pipe ends the thread's poll at once. */
		while (write(s->stop[1], "", 1) < 0 && errno == EINTR)
			;
		pthread_join(s->thread, NULL);
	}
	if (s->stop[0] >= 0) {
		close(s->stop[0]);
		close(s->stop[1]);
	}
	for (size_t i = 0; i < s->n; i++)
		dmutex__node_fini(&s->nodes[i]);
	if (s->n == s->addr->nsentinels)
		pthread_mutex_destroy(&s->mu);
	free(s->nodes);
	free(s);
}

static void
sentinel_atfork_child(struct dmutex__sentinel *s)
{
	/* The watch thread stayed in the parent; the child follows failovers
	 * by asking again after an error.  What it knew may have been half
	 * written when the parent forked: forget it. */
	s->running = 0;
	if (s->stop[0] >= 0) {
		close(s->stop[0]);
		close(s->stop[1]);
		s->stop[0] = s->stop[1] = -1;
	}
	pthread_mutex_init(&s->mu, NULL);
	s->valid = 0;
	s->gen++;
	for (size_t i = 0; i < s->n; i++)
		dmutex__node_atfork_child(&s->nodes[i]);
}

static unsigned
sentinel_gen(struct dmutex__sentinel *s)
{
	unsigned gen;

	pthread_mutex_lock(&s->mu);
	gen = s->gen;
	pthread_mutex_unlock(&s->mu);
	return gen;
}

static void
sentinel_stale(struct dmutex__sentinel *s, unsigned gen)
{
	pthread_mutex_lock(&s->mu);
	if (s->gen == gen && s->valid) {
		s->valid = 0;
		s->gen++;
	}
	pthread_mutex_unlock(&s->mu);
}

/* Record the master: 2 if it replaced another, 1 if it is the first, 0 if
 * the same as before. */
static int
set_master(struct dmutex__sentinel *s, const char *host, int port, size_t from, unsigned *gen)
{
	int changed;

	pthread_mutex_lock(&s->mu);
	changed = strcmp(s->host, host) || s->port != port ? 1 + !!s->host[0] : 0;
	if (changed) {
		snprintf(s->host, sizeof s->host, "%s", host);
		s->port = port;
		s->gen++;
	} else if (!s->valid) {
		s->gen++;
	}
	s->valid = 1;
	s->next = from;
	if (gen)
		*gen = s->gen;
	pthread_mutex_unlock(&s->mu);
	return changed;
}

/* A decimal port, 1 .. 65535. */
static int
parse_port(const char *p, size_t len)
{
	long v = 0;

	if (!len || len > 5)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -1;
		v = v * 10 + (p[i] - '0');
	}
	return v >= 1 && v <= 65535 ? (int)v : -1;
}

/* Ask sentinel i.  0 with host and port, or -1 with why filled. */
static int
ask(struct dmutex__sentinel *s, size_t i, int64_t deadline, char *host, int *port,
		char *why, size_t whylen)
{
	struct dmutex__node *sn = &s->nodes[i];
	struct dmutex__conn *c = dmutex__node_get_by(sn, deadline);
	int64_t by = dmutex__now_ns() + (int64_t)s->command_ms * DMUTEX__MS;
	redisReply *r;
	int rc = -1;

	if (!c) {
		snprintf(why, whylen, "%s: unreachable", sn->addr->display);
		return -1;
	}
	if (by > deadline)
		by = deadline;
	r = dmutex__conn_command(c, by, "SENTINEL get-master-addr-by-name %s", s->addr->master_name);
	if (!r) {
		snprintf(why, whylen, "%s: %s", sn->addr->display, c->errstr);
	} else if (r->type == REDIS_REPLY_ERROR) {
		snprintf(why, whylen, "%s: %s", sn->addr->display, r->str);
	} else if (r->type != REDIS_REPLY_ARRAY) {
		snprintf(why, whylen, "%s does not know a master named '%s'", sn->addr->display,
				s->addr->master_name);
	} else if (r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING
			|| r->element[1]->type != REDIS_REPLY_STRING || !r->element[0]->len
			|| r->element[0]->len >= HOST_LEN
			|| memchr(r->element[0]->str, 0, r->element[0]->len)
			|| (*port = parse_port(r->element[1]->str, r->element[1]->len)) < 0) {
		snprintf(why, whylen, "%s: unexpected reply to SENTINEL get-master-addr-by-name",
				sn->addr->display);
	} else {
		memcpy(host, r->element[0]->str, r->element[0]->len + 1);
		rc = 0;
	}
	if (r)
		freeReplyObject(r);
	dmutex__node_put(sn, c);
	return rc;
}

/* Every sentinel in turn, the last one that answered first. */
static int
ask_all(struct dmutex__sentinel *s, int64_t deadline, char *host, int *port, size_t *from,
		char *why, size_t whylen)
{
	size_t first;

	pthread_mutex_lock(&s->mu);
	first = s->next;
	pthread_mutex_unlock(&s->mu);
	for (size_t k = 0; k < s->n && dmutex__now_ns() < deadline; k++) {
		size_t i = (first + k) % s->n;
		if (!ask(s, i, deadline, host, port, why, whylen)) {
			*from = i;
			return 0;
		}
	}
	return -1;
}

static int
sentinel_locate(struct dmutex__sentinel *s, int64_t deadline, char *host,
		size_t hostlen, int *port, unsigned *gen, char *why, size_t whylen)
{
	char h[HOST_LEN];
	size_t from;
	int p;

	pthread_mutex_lock(&s->mu);
	if (s->valid && strlen(s->host) < hostlen) {
		memcpy(host, s->host, strlen(s->host) + 1);
		*port = s->port;
		*gen = s->gen;
		pthread_mutex_unlock(&s->mu);
		return 0;
	}
	pthread_mutex_unlock(&s->mu);
	snprintf(why, whylen, "no sentinel answered in time");
	if (ask_all(s, deadline, h, &p, &from, why, whylen))
		return -1;
	if (strlen(h) >= hostlen) {
		snprintf(why, whylen, "master host name too long");
		return -1;
	}
	if (set_master(s, h, p, from, gen))
		dmutex__log(DMUTEX_LOG_INFO, "%s: the master is %s:%d (by %s)", s->addr->display, h, p,
				s->nodes[from].addr->display);
	memcpy(host, h, strlen(h) + 1);
	*port = p;
	return 0;
}

/* --- The watch thread: +switch-master ----------------------------------- */

/* Wait ms or until told to stop: 1 stop. */
static int
pause_or_stop(struct dmutex__sentinel *s, int ms)
{
	struct pollfd pf = { .fd = s->stop[0], .events = POLLIN };

	return poll(&pf, 1, ms) > 0;
}

static void
switched(struct dmutex__sentinel *s, const char *host, int port, size_t from)
{
	if (set_master(s, host, port, from, NULL) != 2)
		return;
	dmutex__log(DMUTEX_LOG_WARN, "%s: failover: the master is now %s:%d (%s)",
			s->addr->display, host, port, s->nodes[from].addr->display);
	/* Pooled connections go to the old master, which may still take
	 * writes until the sentinels demote it. */
	dmutex__node_drop_idle(s->master);
}

/* "message" "+switch-master" "NAME OLDIP OLDPORT NEWIP NEWPORT". */
static void
on_message(struct dmutex__sentinel *s, const redisReply *r, size_t from)
{
	const char *name = s->addr->master_name, *m;
	size_t nl = strlen(name);
	char host[HOST_LEN];
	int port;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 || r->element[2]->type != REDIS_REPLY_STRING)
		return;
	m = r->element[2]->str;
	if (strncmp(m, name, nl) || m[nl] != ' ')
		return;
	if (sscanf(m + nl + 1, "%*s %*d %255s %d", host, &port) != 2 || port < 1 || port > 65535)
		return;
	switched(s, host, port, from);
}

/* Subscribed to sentinel i until its connection fails or we stop: 1 stop. */
static int
watch_one(struct dmutex__sentinel *s, size_t i)
{
	struct dmutex__conn *c = dmutex__node_connect(&s->nodes[i]);
	char host[HOST_LEN], why[200];
	int port, stop = 0;
	size_t from;
	void *v;

	if (!c)
		return 0;
	if (dmutex__conn_appendf(c, "SUBSCRIBE +switch-master")
			|| dmutex__conn_get(c, &v, dmutex__conn_deadline(c))) {
		dmutex__conn_free(c);
		return 0;
	}
	freeReplyObject(v);
	/* A switch announced before we listened: ask once now. */
	if (!ask_all(s, dmutex__now_ns() + (int64_t)s->command_ms * DMUTEX__MS, host, &port, &from,
			why, sizeof why))
		switched(s, host, port, from);
	while (!stop) {
		struct pollfd pf[2] = {
			{ .fd = c->fd, .events = dmutex__conn_events(c, POLLIN) },
			{ .fd = s->stop[0], .events = POLLIN },
		};
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pf[1].revents) {
			stop = 1;
			break;
		}
		if (dmutex__conn_fill(c))
			break;
		for (;;) {
			if (dmutex__conn_next(c, &v)) {
				v = NULL;
				c->err = 1;
			}
			if (!v)
				break;
			on_message(s, v, i);
			freeReplyObject(v);
		}
		if (c->err)
			break;
	}
	dmutex__conn_free(c);
	return stop;
}

static void *
watch_main(void *arg)
{
	struct dmutex__sentinel *s = arg;
	size_t first;

	dmutex__own_thread_begin();
	pthread_mutex_lock(&s->mu);
	first = s->next;
	pthread_mutex_unlock(&s->mu);
	for (size_t i = first;; i = (i + 1) % s->n) {
		if (watch_one(s, i) || pause_or_stop(s, WATCH_RETRY_MS))
			break;
		dmutex__exit_if_alone();
	}
	dmutex__own_thread_end();
	return NULL;
}

static int
sentinel_watch(struct dmutex__sentinel *s, struct dmutex__node *master)
{
	sigset_t all, old;
	int err;

	if (pipe2(s->stop, O_CLOEXEC))
		return errno;
	s->master = master;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&s->thread, NULL, watch_main, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		close(s->stop[0]);
		close(s->stop[1]);
		s->stop[0] = s->stop[1] = -1;
		return err;
	}
	s->running = 1;
	return 0;
}

/* ---- the master node's locator ---- */

static struct dmutex__sentinel *
of(struct dmutex__locator *l)
{
	return (struct dmutex__sentinel *)l;
}

static int
loc_locate(struct dmutex__locator *l, int64_t deadline, char *host, size_t hostlen, int *port,
		unsigned *gen, char *why, size_t whylen)
{
	return sentinel_locate(of(l), deadline, host, hostlen, port, gen, why, whylen);
}

static void
loc_stale(struct dmutex__locator *l, unsigned gen)
{
	sentinel_stale(of(l), gen);
}

static unsigned
loc_gen(struct dmutex__locator *l)
{
	return sentinel_gen(of(l));
}

static void
loc_atfork_child(struct dmutex__locator *l)
{
	sentinel_atfork_child(of(l));
}

static void
loc_free(struct dmutex__locator *l)
{
	sentinel_free(of(l));
}

static const struct dmutex__locator_ops locator_ops = {
	.locate = loc_locate,
	.stale = loc_stale,
	.gen = loc_gen,
	.atfork_child = loc_atfork_child,
	.free = loc_free,
};

int
dmutex__master_init(struct dmutex__node *n, const struct dmutex__node_addr *addr,
		unsigned connect_ms, unsigned command_ms)
{
	struct dmutex__sentinel *s;
	int err;

	if ((err = dmutex__node_init(n, addr, connect_ms, command_ms)) || !addr->master_name)
		return err;
	if ((err = sentinel_new(addr, connect_ms, command_ms, &s))) {
		dmutex__node_fini(n);
		return err;
	}
	s->loc.ops = &locator_ops;
	n->loc = &s->loc;
	return 0;
}

int
dmutex__master_watch(struct dmutex__node *master)
{
	if (!master->loc || master->loc->ops != &locator_ops)
		return 0;
	return sentinel_watch(of(master->loc), master);
}
