/*
 * The backend for one Redis Cluster.  Every key of one lock, condition
 * variable, rwlock, semaphore or barrier carries the name as its hash tag
 * (keys.h), so each script runs on the one master serving that slot: the
 * slot of its first key.  A MOVED reply updates the map and the script goes
 * to the new owner; ASK (a slot being migrated, the key already gone) sends
 * it once to the importing node after ASKING; TRYAGAIN (the keys split
 * between the two during a migration) waits a little.  All of it within the
 * caller's deadline.  Scripts publish with SPUBLISH, and the waiter
 * subscribes with SSUBSCRIBE on the node serving the channel's slot: the
 * channel carries the same hash tag.
 *
 * The backend shows one node (its face) to the rest of the library: a
 * script call on it is routed as above (node.h, route).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "common.h"
#include "base/base.h"
#include "base/log.h"
#include "backend/redis/scripts/scripts.h"
#include "slotmap.h"
#include "topology.h"
#include "base/lockorder.h"

/* Redirections one call follows; more is a cluster that cannot agree. */
#define HOPS_MAX 16
#define TRYAGAIN_NS (2 * DMUTEX__MS)
#define TRYAGAIN_MAX_NS (50 * DMUTEX__MS)

struct cluster {
	struct dmutex__backend base;
	struct dmutex__node face;
	struct dmutex__slotmap map;
};

static struct cluster *
cl_of(struct dmutex__backend *be)
{
	return (struct cluster *)be;
}

static void
pause_until(int64_t t)
{
	int64_t left = t - dmutex__now_ns();
	struct timespec ts;

	if (left <= 0)
		return;
	ts.tv_sec = left / 1000000000;
	ts.tv_nsec = left % 1000000000;
	nanosleep(&ts, NULL);
}

/* "MOVED 3999 127.0.0.1:6381" or "ASK ...": the slot and the member; -1 if
 * it does not parse. */
static int
redirect_to(struct cluster *cl, const char *err, unsigned *slot)
{
	const char *p = strchr(err, ' '), *colon;
	char host[256];
	long s, port;
	char *end;

	if (!p || (s = strtol(p + 1, &end, 10)) < 0 || s >= DMUTEX__SLOTS || *end != ' ')
		return -1;
	p = end + 1;
	if (!(colon = strrchr(p, ':')) || (size_t)(colon - p) >= sizeof host)
		return -1;
	port = strtol(colon + 1, &end, 10);
	if (*end || port < 1 || port > 65535)
		return -1;
	/* An IPv6 address comes without brackets; "" means the node asked. */
	memcpy(host, p, (size_t)(colon - p));
	host[colon - p] = 0;
	if (!host[0])
		return -1;
	*slot = (unsigned)s;
	return dmutex__slotmap_member(&cl->map, host, (int)port);
}

static redisReply *
route(struct dmutex__node *face, int script, int nkeys, int argc, const char **argv,
		int *maybe_done, int64_t deadline)
{
	struct cluster *cl = face->route_arg;
	unsigned slot = nkeys > 0 ? dmutex__key_slot(argv[0], strlen(argv[0])) : 0, s;
	int ask = -1, ran = 0;
	int64_t pause = TRYAGAIN_NS;

	*maybe_done = 0;
	for (int hop = 0; hop < HOPS_MAX && dmutex__now_ns() < deadline; hop++) {
		int m = ask >= 0 ? ask : dmutex__slotmap_owner(&cl->map, slot), md = 0, to;
		struct dmutex__node *n;
		redisReply *r;

		if (m < 0) {
			dmutex__slotmap_refresh(&cl->map, deadline, 0, 0);
			if ((m = dmutex__slotmap_owner(&cl->map, slot)) < 0)
				break;
		}
		n = dmutex__slotmap_node(&cl->map, (size_t)m);
		r = ask >= 0 ? dmutex__node_call_asking(n, script, nkeys, argc, argv, &md, deadline)
			: dmutex__node_call_by(n, script, nkeys, argc, argv, &md, deadline);
		ran |= md == 1;
		ask = -1;
		if (!r) {
			/* A node gone (failover?): if the map now says another
			 * serves the slot, ask that one.  Scripts are idempotent
			 * by token, so one that may have run can run again. */
			if (md == DMUTEX__REFUSED)
				break;
			dmutex__slotmap_refresh(&cl->map, deadline, 0, 0);
			if (dmutex__slotmap_owner(&cl->map, slot) == m)
				break;
			continue;
		}
		if (md != DMUTEX__REDIRECT) {
			*maybe_done = md;
			return r;
		}
		dmutex__log(DMUTEX_LOG_DEBUG, "%s: %s script: %s", n->addr->display,
				dmutex__script_name(script), r->str);
		if (!strncmp(r->str, "TRYAGAIN", 8)) {
			/* The slot is being migrated and the keys of this name
			 * are not all on one side (or, for a name being created,
			 * on neither): nothing to do but wait for the migration
			 * to end, within the deadline. */
			int64_t t = dmutex__now_ns() + pause;
			pause_until(t < deadline ? t : deadline);
			pause = pause * 2 > TRYAGAIN_MAX_NS ? TRYAGAIN_MAX_NS : pause * 2;
			hop--;
		} else if ((to = redirect_to(cl, r->str, &s)) < 0) {
			dmutex__log(DMUTEX_LOG_ERROR, "%s: %s", n->addr->display, r->str);
			freeReplyObject(r);
			break;
		} else if (r->str[0] == 'M') {
			/* The slot moved for good: note it now, learn the rest of
			 * the map (other slots may have moved too) at most every
			 * 100 ms. */
			dmutex__slotmap_set(&cl->map, s, to);
			dmutex__slotmap_refresh(&cl->map, deadline, 0, 0);
			dmutex__slotmap_set(&cl->map, s, to);
		} else {
			ask = to;
		}
		freeReplyObject(r);
	}
	dmutex__log(DMUTEX_LOG_WARN, "%s: %s script: no answer for slot %u%s",
			face->addr->display, dmutex__script_name(script), slot,
			pause > TRYAGAIN_NS ? " in time (it is being migrated)"
			: dmutex__now_ns() >= deadline ? " in time" : "");
	*maybe_done = ran;
	return NULL;
}

static int
cl_acquire(struct dmutex__backend *be, struct dmutex__acq *a)
{
	return dmutex__backend_redis_acquire(be, &cl_of(be)->face, a);
}

static int
cl_release(struct dmutex__backend *be, const char *name, const char *token,
		int mode, int64_t deadline, int *released, int *maybe_done)
{
	return dmutex__backend_redis_release(be, &cl_of(be)->face, name, token, mode, deadline, NULL,
			released, maybe_done);
}

static int
cl_release_to(struct dmutex__backend *be, const char *name, const char *token, int mode,
		int64_t deadline, struct dmutex__handoff *next, int *released, int *maybe_done)
{
	return dmutex__backend_redis_release(be, &cl_of(be)->face, name, token, mode, deadline, next,
			released, maybe_done);
}

/* Renew on one master the holds of rn[] it serves (member[i] == m), one
 * script per hold, pipelined: one round trip.  A hold whose reply is not a
 * clean answer (NOSCRIPT, a redirection, an error, no reply) is left with
 * redo set. */
static void
renew_on(struct dmutex__backend *be, int m, struct dmutex__renewal *rn, size_t n,
		const int *member, unsigned char *redo, struct dmutex__renew_argv *x, int64_t deadline)
{
	struct cluster *cl = cl_of(be);
	struct dmutex__node *node = dmutex__slotmap_node(&cl->map, (size_t)m);
	struct dmutex__conn *c;
	size_t sent = 0, mine = 0;
	void *v;
	int res;

	for (size_t i = 0; i < n; i++)
		mine += member[i] == m;
	if (!mine)
		return;
	c = node ? dmutex__node_get_by(node, deadline) : NULL;

	for (size_t i = 0; i < n; i++) {
		size_t k;
		if (member[i] != m)
			continue;
		redo[i] = 1;
		if (!c || c->err)
			continue;
		k = dmutex__renew_chunk(be, rn + i, 1, 0, x);
		if (!dmutex__node_script_append(node, c, DMUTEX__SCRIPT_RENEW, 1,
				(int)DMUTEX__RENEW_NKEYS(k), (int)DMUTEX__RENEW_ARGC(k), x->argv, NULL))
			sent++;
	}
	for (size_t i = 0; c && i < n && sent; i++) {
		if (member[i] != m)
			continue;
		if (dmutex__conn_get(c, &v, deadline))
			break;          /* the rest stay to redo; c->err: not pooled */
		sent--;
		if (((redisReply *)v)->type != REDIS_REPLY_ERROR) {
			dmutex__renew_reply(node->addr->display, v, 1, &res);
			rn[i].result = res;
			redo[i] = 0;
		}
		freeReplyObject(v);
	}
	if (c)
		dmutex__node_put(node, c);
}

/* One script per hold (one script may not touch two slots), pipelined per
 * master; what did not come back clean is asked again one by one through
 * route(), which follows redirections and reloads scripts. */
static void
cl_renew(struct dmutex__backend *be, struct dmutex__renewal *rn, size_t n, int64_t until)
{
	struct cluster *cl = cl_of(be);
	int64_t deadline = dmutex__now_ns() + (int64_t)cl->face.command_ms * DMUTEX__MS;
	struct dmutex__renew_argv x = { 0 };
	int *member = malloc(n * sizeof *member);
	unsigned char *redo = calloc(n, 1);
	size_t again = 0;

	for (size_t i = 0; i < n; i++)
		rn[i].result = -1;
	if (until < deadline)
		deadline = until;
	if (!n || !member || !redo || dmutex__renew_argv_init(&x))
		goto out;
	for (size_t i = 0; i < n; i++) {
		dmutex__renew_chunk(be, rn + i, 1, 0, &x);
		member[i] = dmutex__slotmap_owner(&cl->map, dmutex__key_slot(x.argv[0],
				strlen(x.argv[0])));
		redo[i] = member[i] < 0;
	}
	for (int m = 0; m < DMUTEX__MEMBERS_MAX && dmutex__now_ns() < deadline; m++)
		renew_on(be, m, rn, n, member, redo, &x, deadline);
	for (size_t i = 0; i < n; i++)
		again += redo[i];
	if (again)
		dmutex__log(DMUTEX_LOG_DEBUG, "%s: renew: %zu of %zu asked again one by one",
				cl->face.addr->display, again, n);
	for (size_t i = 0; i < n && dmutex__now_ns() < deadline; i++) {
		size_t k;
		redisReply *r;
		int md, res;

		if (!redo[i])
			continue;
		k = dmutex__renew_chunk(be, rn + i, 1, 0, &x);
		r = route(&cl->face, DMUTEX__SCRIPT_RENEW, (int)DMUTEX__RENEW_NKEYS(k),
				(int)DMUTEX__RENEW_ARGC(k), x.argv, &md, deadline);
		if (!r)
			continue;
		dmutex__renew_reply(cl->face.addr->display, r, k, &res);
		rn[i].result = res;
		freeReplyObject(r);
	}
out:
	dmutex__renew_argv_free(&x);
	free(member);
	free(redo);
}

/* Each master: reachable, and the ACL lets us do what the scripts do, on a
 * scratch name of a slot it serves. */
static int
cl_verify(struct dmutex__backend *be, size_t *up_out, size_t *need_out)
{
	struct cluster *cl = cl_of(be);
	const char *prefix = be->cfg.prefix;
	int64_t deadline = dmutex__now_ns() + (int64_t)cl->map.connect_ms * DMUTEX__MS;
	size_t up = 0, masters = 0;
	int refused = 0;

	*up_out = 0;
	*need_out = 1;
	if (dmutex__slotmap_refresh(&cl->map, deadline, 1, 1))
		return EIO;
	for (size_t i = 0; i < DMUTEX__MEMBERS_MAX && !refused; i++) {
		struct dmutex__node *n = dmutex__slotmap_node(&cl->map, i);
		char tok[DMUTEX__TOKEN_HEX + 1], key[DMUTEX__KEY_MAX], run_id[DMUTEX__RUN_ID_MAX];
		struct dmutex__conn *c;
		int found = 0, rc;

		if (!n)
			break;
		for (int t = 0; t < 1000 && !found; t++) {
			if (dmutex__token(tok))
				return EIO;
			dmutex__key(key, prefix, "probe", tok);
			found = dmutex__slotmap_owner(&cl->map, dmutex__key_slot(key, strlen(key))) ==
				(int)i;
		}
		if (!found)
			continue;       /* a replica, or a master without slots */
		masters++;
		if (!(c = dmutex__node_get(n)))
			continue;
		if ((rc = dmutex__node_check(n, c, prefix, tok, run_id))) {
			dmutex__conn_free(c);
			refused = rc == EACCES;
			continue;
		}
		dmutex__node_put(n, c);
		up++;
	}
	*up_out = up;
	*need_out = masters;
	if (refused)
		return EACCES;
	if (up < masters)
		dmutex__log(up ? DMUTEX_LOG_WARN : DMUTEX_LOG_ERROR,
				"%s: %zu of %zu cluster masters reachable", cl->face.addr->display,
				up, masters);
	return up ? 0 : EIO;
}

/* The map first: no member is added while the members' pools are taken
 * (nobody holding a node's mutex waits for the map's, nor the reverse). */
static void
cl_atfork_prepare(struct dmutex__backend *be)
{
	struct cluster *cl = cl_of(be);

	pthread_mutex_lock(&cl->map.mu);
	dmutex__mu_lock(&cl->face.mu, DMUTEX__LK_NODE, "fork: node.mu");
	for (size_t i = 0; i < cl->map.nmembers; i++)
		dmutex__mu_lock(&cl->map.member[i]->node.mu, DMUTEX__LK_NODE, "fork: node.mu");
}

static void
cl_atfork_parent(struct dmutex__backend *be)
{
	struct cluster *cl = cl_of(be);

	for (size_t i = 0; i < cl->map.nmembers; i++)
		dmutex__mu_unlock(&cl->map.member[i]->node.mu, DMUTEX__LK_NODE);
	dmutex__mu_unlock(&cl->face.mu, DMUTEX__LK_NODE);
	pthread_mutex_unlock(&cl->map.mu);
}

static void
cl_atfork_child(struct dmutex__backend *be)
{
	struct cluster *cl = cl_of(be);

	/* What cl_atfork_prepare took: the face's and every member's. */
	for (size_t i = 0; i <= cl->map.nmembers; i++)
		dmutex__lo_released(DMUTEX__LK_NODE);
	dmutex__slotmap_atfork_child(&cl->map);
	pthread_mutex_init(&cl->face.mu, NULL);
}

static void
cl_destroy(struct dmutex__backend *be)
{
	struct cluster *cl = cl_of(be);

	dmutex__slotmap_fini(&cl->map);
	pthread_mutex_destroy(&cl->face.mu);
	free(cl);
}

static struct dmutex__node *
cl_sub_node(struct dmutex__backend *be, size_t i)
{
	return dmutex__slotmap_node(&cl_of(be)->map, i);
}

static int
cl_sub_route(struct dmutex__backend *be, const char *channel)
{
	return dmutex__slotmap_owner(&cl_of(be)->map, dmutex__key_slot(channel, strlen(channel)));
}

static void
cl_sub_stale(struct dmutex__backend *be, const char *moved)
{
	struct cluster *cl = cl_of(be);
	unsigned slot;
	int to;

	/* The node's word last: a refresh may read a node that has not heard
	 * of the move yet. */
	dmutex__slotmap_refresh(&cl->map, dmutex__now_ns() + (int64_t)cl->face.command_ms *
			DMUTEX__MS, 0, 0);
	if (moved && (to = redirect_to(cl, moved, &slot)) >= 0)
		dmutex__slotmap_set(&cl->map, slot, to);
}

/* The member serving key's slot: per-lock counters' MULTI (counters.c),
 * which the face's routing (scripts only) does not carry. */
static struct dmutex__node *
cl_node_of(struct dmutex__backend *be, const char *key)
{
	struct cluster *cl = cl_of(be);
	unsigned slot = dmutex__key_slot(key, strlen(key));
	int m = dmutex__slotmap_owner(&cl->map, slot);

	if (m < 0) {
		dmutex__slotmap_refresh(&cl->map, dmutex__now_ns() + (int64_t)cl->face.command_ms *
				DMUTEX__MS, 0, 0);
		m = dmutex__slotmap_owner(&cl->map, slot);
	}
	return m < 0 ? NULL : dmutex__slotmap_node(&cl->map, (size_t)m);
}

static const struct dmutex__backend_ops cluster_ops = {
	.acquire = cl_acquire,
	.release = cl_release,
	.release_to = cl_release_to,
	.renew = cl_renew,
	.channel = dmutex__redis_channel,
	.atfork_child = cl_atfork_child,
	.destroy = cl_destroy,
	.verify = cl_verify,
	.atfork_prepare = cl_atfork_prepare,
	.atfork_parent = cl_atfork_parent,
	.sub_node = cl_sub_node,
	.sub_route = cl_sub_route,
	.sub_stale = cl_sub_stale,
	.node_of = cl_node_of,
	DMUTEX__REDIS_WAKE_OPS,
	DMUTEX__REDIS_COND_OPS,
	DMUTEX__REDIS_ONE_MASTER_OPS,
	DMUTEX__REDIS_ADMIN_OPS,
};

int
dmutex__backend_cluster_create(const struct dmutex__backend_cfg *cfg, struct dmutex__backend **out)
{
	struct cluster *cl = calloc(1, sizeof *cl);
	const struct dmutex__node_addr *tmpl = &cfg->nodes[0];

	if (!cl)
		return ENOMEM;
	dmutex__slotmap_init(&cl->map, tmpl, cfg->connect_timeout_ms, cfg->command_timeout_ms);
	/* The face is never dialled: every call on it is routed. */
	cl->face.addr = tmpl;
	cl->face.connect_ms = cfg->connect_timeout_ms;
	cl->face.command_ms = cfg->command_timeout_ms;
	cl->face.sharded = 1;
	cl->face.route = route;
	cl->face.route_arg = cl;
	pthread_mutex_init(&cl->face.mu, NULL);
	cl->base.ops = &cluster_ops;
	cl->base.cfg = *cfg;
	cl->base.nodes = &cl->face;
	cl->base.nnodes = 1;
	cl->base.nsub = DMUTEX__MEMBERS_MAX;
	*out = &cl->base;
	return 0;
}
