/* The slot map of a Redis Cluster (slotmap.h), from CLUSTER SLOTS. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/log.h"
#include "slotmap.h"

/* A refresh that got an answer this recently is not made again: a burst of
 * MOVED replies during a migration refreshes once. */
#define REFRESH_MIN_NS (100 * DMUTEX__MS)

int
dmutex__slotmap_init(struct dmutex__slotmap *m, const struct dmutex__node_addr *tmpl,
		unsigned connect_ms, unsigned command_ms)
{
	memset(m, 0, sizeof *m);
	m->tmpl = tmpl;
	m->connect_ms = connect_ms;
	m->command_ms = command_ms;
	memset(m->owner, DMUTEX__NO_OWNER, sizeof m->owner);
	pthread_mutex_init(&m->mu, NULL);
	return 0;
}

static void
addr_fini(struct dmutex__node_addr *a)
{
	free(a->host);
	free(a->display);
}

void
dmutex__slotmap_fini(struct dmutex__slotmap *m)
{
	for (size_t i = 0; i < m->nmembers; i++) {
		dmutex__node_fini(&m->member[i]->node);
		addr_fini(&m->member[i]->addr);
		free(m->member[i]);
		m->member[i] = NULL;
	}
	m->nmembers = 0;
	pthread_mutex_destroy(&m->mu);
}

void
dmutex__slotmap_atfork_child(struct dmutex__slotmap *m)
{
	pthread_mutex_init(&m->mu, NULL);
	m->refreshing = 0;
	for (size_t i = 0; i < m->nmembers; i++)
		dmutex__node_atfork_child(&m->member[i]->node);
}

struct dmutex__node *
dmutex__slotmap_node(struct dmutex__slotmap *m, size_t i)
{
	struct dmutex__member *mb;

	if (i >= DMUTEX__MEMBERS_MAX || !(mb = __atomic_load_n(&m->member[i], __ATOMIC_ACQUIRE)))
		return NULL;
	return &mb->node;
}

/* Under m->mu. */
static int
find(const struct dmutex__slotmap *m, const char *host, int port)
{
	for (size_t i = 0; i < m->nmembers; i++)
		if (m->member[i]->addr.port == port && !strcmp(m->member[i]->addr.host, host))
			return (int)i;
	return -1;
}

/* A member's address: the template's credentials and TLS options (shared,
 * not copied: the template outlives the map), its own host and port. */
static struct dmutex__member *
member_new(const struct dmutex__slotmap *m, const char *host, int port)
{
	struct dmutex__member *mb = calloc(1, sizeof *mb);
	int v6 = strchr(host, ':') != NULL;
	size_t dlen = strlen(host) + 64;

	if (!mb)
		return NULL;
	mb->addr = *m->tmpl;
	mb->addr.cluster = 0;
	mb->addr.seeds = NULL;
	mb->addr.nseeds = 0;
	mb->addr.port = port;
	mb->addr.host = strdup(host);
	mb->addr.display = malloc(dlen);
	if (!mb->addr.host || !mb->addr.display) {
		addr_fini(&mb->addr);
		free(mb);
		return NULL;
	}
	snprintf(mb->addr.display, dlen, "cluster node %s%s%s:%d", v6 ? "[" : "", host,
			v6 ? "]" : "", port);
	if (dmutex__node_init(&mb->node, &mb->addr, m->connect_ms, m->command_ms)) {
		addr_fini(&mb->addr);
		free(mb);
		return NULL;
	}
	mb->node.sharded = 1;
	mb->node.redirects = 1;
	return mb;
}

int
dmutex__slotmap_member(struct dmutex__slotmap *m, const char *host, int port)
{
	struct dmutex__member *mb;
	int i;

	pthread_mutex_lock(&m->mu);
	if ((i = find(m, host, port)) >= 0 || m->nmembers == DMUTEX__MEMBERS_MAX) {
		pthread_mutex_unlock(&m->mu);
		if (i < 0)
			dmutex__log(DMUTEX_LOG_ERROR, "%s: more than %d cluster nodes; %s:%d not used",
					m->tmpl->display, DMUTEX__MEMBERS_MAX, host, port);
		return i;
	}
	pthread_mutex_unlock(&m->mu);
	/* Set up outside the lock (it reads password and certificate files);
	 * a thread that added the same address meanwhile wins. */
	if (!(mb = member_new(m, host, port))) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: cannot set up cluster node %s:%d",
				m->tmpl->display, host, port);
		return -1;
	}
	pthread_mutex_lock(&m->mu);
	if ((i = find(m, host, port)) < 0 && m->nmembers < DMUTEX__MEMBERS_MAX) {
		i = (int)m->nmembers;
		__atomic_store_n(&m->member[m->nmembers], mb, __ATOMIC_RELEASE);
		m->nmembers++;
		mb = NULL;
	}
	pthread_mutex_unlock(&m->mu);
	if (mb) {
		dmutex__node_fini(&mb->node);
		addr_fini(&mb->addr);
		free(mb);
	}
	return i;
}

int
dmutex__slotmap_owner(struct dmutex__slotmap *m, unsigned slot)
{
	int o;

	pthread_mutex_lock(&m->mu);
	o = m->owner[slot % DMUTEX__SLOTS];
	pthread_mutex_unlock(&m->mu);
	return o == DMUTEX__NO_OWNER ? -1 : o;
}

void
dmutex__slotmap_set(struct dmutex__slotmap *m, unsigned slot, int member)
{
	pthread_mutex_lock(&m->mu);
	m->owner[slot % DMUTEX__SLOTS] = member < 0 ? DMUTEX__NO_OWNER : (unsigned char)member;
	pthread_mutex_unlock(&m->mu);
}

/*
 * CLUSTER SLOTS: an array of [start, end, [host, port, id, ...], replicas...].
 * An empty host means "the address you asked" (Redis 7 when it does not know
 * its own).  Fills owner; -1 when the reply has another shape.
 */
static int
parse_slots(struct dmutex__slotmap *m, const redisReply *r, const struct dmutex__node_addr *asked,
		unsigned char *owner)
{
	if (r->type != REDIS_REPLY_ARRAY)
		return -1;
	for (size_t i = 0; i < r->elements; i++) {
		const redisReply *e = r->element[i], *who;
		const char *host;
		long long lo, hi;
		int mi;

		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
				e->element[0]->type != REDIS_REPLY_INTEGER ||
				e->element[1]->type != REDIS_REPLY_INTEGER ||
				(who = e->element[2])->type != REDIS_REPLY_ARRAY || who->elements < 2 ||
				who->element[0]->type != REDIS_REPLY_STRING ||
				who->element[1]->type != REDIS_REPLY_INTEGER)
			return -1;
		lo = e->element[0]->integer;
		hi = e->element[1]->integer;
		if (lo < 0 || hi >= DMUTEX__SLOTS || lo > hi || who->element[1]->integer < 1 ||
				who->element[1]->integer > 65535)
			return -1;
		host = who->element[0]->len && strcmp(who->element[0]->str, "?")
			? who->element[0]->str : asked->host;
		if ((mi = dmutex__slotmap_member(m, host, (int)who->element[1]->integer)) < 0)
			continue;
		memset(owner + lo, mi, (size_t)(hi - lo + 1));
	}
	return 0;
}

/* CLUSTER SLOTS from one node: 0, or -1 (why filled). */
static int
ask_node(struct dmutex__slotmap *m, struct dmutex__node *n, int64_t deadline,
		unsigned char *owner, char *why, size_t whylen)
{
	struct dmutex__conn *c = dmutex__node_get_by(n, deadline);
	redisReply *r;
	int rc = -1;

	if (!c) {
		snprintf(why, whylen, "%s: cannot connect", n->addr->display);
		return -1;
	}
	if (!(r = dmutex__conn_command(c, deadline, "CLUSTER SLOTS"))) {
		snprintf(why, whylen, "%s: %s", n->addr->display, c->errstr);
		dmutex__node_put(n, c);
		return -1;
	}
	if (r->type == REDIS_REPLY_ERROR)
		snprintf(why, whylen, "%s: CLUSTER SLOTS: %s", n->addr->display, r->str);
	else if (parse_slots(m, r, n->addr, owner))
		snprintf(why, whylen, "%s: CLUSTER SLOTS: unexpected reply shape", n->addr->display);
	else
		rc = 0;
	freeReplyObject(r);
	dmutex__node_put(n, c);
	return rc;
}

int
dmutex__slotmap_refresh(struct dmutex__slotmap *m, int64_t deadline, int force, int loud)
{
	unsigned char *owner = malloc(DMUTEX__SLOTS);
	char why[256] = "no node to ask";
	size_t known;
	int rc = -1;

	if (!owner)
		return ENOMEM;
	pthread_mutex_lock(&m->mu);
	if (!force && (m->refreshing || dmutex__now_ns() - m->refreshed_ns < REFRESH_MIN_NS)) {
		pthread_mutex_unlock(&m->mu);
		free(owner);
		return 0;
	}
	m->refreshing = 1;
	known = m->nmembers;
	pthread_mutex_unlock(&m->mu);

	/* The members first (they are the cluster as we last saw it), then
	 * the seeds, which may be new to us: each a member once asked. */
	for (size_t i = 0; rc && i < known + m->tmpl->nseeds && dmutex__now_ns() < deadline; i++) {
		int mi = (int)i;
		if (i >= known) {
			const struct dmutex__node_addr *s = &m->tmpl->seeds[i - known];
			if ((mi = dmutex__slotmap_member(m, s->host, s->port)) < 0 || (size_t)mi < known)
				continue;
		}
		memset(owner, DMUTEX__NO_OWNER, DMUTEX__SLOTS);
		rc = ask_node(m, dmutex__slotmap_node(m, (size_t)mi), deadline, owner, why, sizeof why);
	}
	pthread_mutex_lock(&m->mu);
	if (!rc) {
		memcpy(m->owner, owner, DMUTEX__SLOTS);
		m->refreshed_ns = dmutex__now_ns();
	}
	m->refreshing = 0;
	pthread_mutex_unlock(&m->mu);
	free(owner);
	if (rc && loud)
		dmutex__log(DMUTEX_LOG_ERROR, "%s: cannot read the cluster's slot map (%s)",
				m->tmpl->display, why);
	return rc ? EIO : 0;
}
