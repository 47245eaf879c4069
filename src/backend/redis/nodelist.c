/*
 * What the topologies with a fixed list of nodes (one Redis, Redlock) share
 * behind backend.h: the checks made at open, and the fork locking of their
 * nodes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/base.h"
#include "base/log.h"
#include "base/lockorder.h"
#include "node.h"
#include "topology.h"

static void
set_quiet(struct dmutex__backend *be, int quiet)
{
	for (size_t i = 0; i < be->nnodes; i++) {
		struct dmutex__node *node = &be->nodes[i];
		pthread_mutex_lock(&node->mu);
		/* 2: failures while opening are summed up by the caller
		 * (client.c), the node's own lines go to DEBUG (node.c). */
		node->down_logged = quiet ? 2 : 0;
		if (quiet)
			node->last_err[0] = '\0';
		pthread_mutex_unlock(&node->mu);
	}
}

/* The same server listed twice would cast several Redlock votes: one server
 * could make a quorum alone, and every clean unlock would see "its" other
 * copies already released.  Written the same way, or two ways (127.0.0.1
 * and localhost, two databases) with one run_id. */
static int
duplicate(const struct dmutex__backend *be, char (*run_id)[DMUTEX__RUN_ID_MAX])
{
	for (size_t i = 0; i < be->nnodes; i++)
		for (size_t j = 0; j < i; j++) {
			const struct dmutex__node_addr *a = be->nodes[i].addr, *b = be->nodes[j].addr;
			int same_addr = a->port == b->port &&
				!strcmp(a->host ? a->host : "", b->host ? b->host : "") &&
				!strcmp(a->path ? a->path : "", b->path ? b->path : "");
			if (!same_addr && (!run_id[i][0] || strcmp(run_id[i], run_id[j])))
				continue;
			dmutex__log(DMUTEX_LOG_ERROR, "Redlock URL lists one server twice: %s and %s are %s; "
					"Redlock needs independent servers", b->display, a->display,
					same_addr ? "the same address" : "the same server (same run_id)");
			return EINVAL;
		}
	return 0;
}

int
dmutex__backend_verify_nodes(struct dmutex__backend *be, size_t *up_out, size_t *need_out)
{
	size_t up = 0, n = be->nnodes, need = n > 1 ? n / 2 + 1 : 1;
	char (*run_id)[DMUTEX__RUN_ID_MAX] = calloc(n, sizeof *run_id);
	int refused = 0, err;

	if (!run_id)
		return ENOMEM;
	/* Connect, authenticate, PING and check each node once so that a
	 * wrong address, password or ACL shows at open, not at the first
	 * lock.  Redlock works with a minority down, so it needs only a
	 * quorum now; a node that answers but refuses what we need is a
	 * configuration error all the same. */
	set_quiet(be, 1);
	for (size_t i = 0; i < n && !refused; i++) {
		struct dmutex__node *node = &be->nodes[i];
		struct dmutex__conn *ctx = dmutex__node_get(node);
		int64_t deadline = dmutex__now_ns() + (int64_t)node->command_ms * DMUTEX__MS;
		redisReply *r;
		int rc;
		if (!ctx)
			continue;
		r = dmutex__conn_command(ctx, deadline, "PING");
		if (!r || r->type == REDIS_REPLY_ERROR) {
			dmutex__log(DMUTEX_LOG_ERROR, "%s: PING failed: %s", node->addr->display,
					r ? r->str : ctx->errstr);
			pthread_mutex_lock(&node->mu);
			snprintf(node->last_err, sizeof node->last_err, "PING failed: %s",
					r ? r->str : ctx->errstr);
			pthread_mutex_unlock(&node->mu);
			if (r)
				freeReplyObject(r);
			dmutex__conn_free(ctx);
			continue;
		}
		freeReplyObject(r);
		if ((rc = dmutex__node_check(node, ctx, be->cfg.prefix, NULL, run_id[i]))) {
			dmutex__conn_free(ctx);
			refused = rc == EACCES;
			continue;
		}
		dmutex__node_put(node, ctx);
		up++;
	}
	set_quiet(be, 0);
	err = refused ? EACCES : n > 1 ? duplicate(be, run_id) : 0;
	free(run_id);
	*up_out = up;
	*need_out = need;
	if (err)
		return err;
	return up >= need ? 0 : EIO;
}

void
dmutex__backend_lock_nodes(struct dmutex__backend *be)
{
	for (size_t i = 0; i < be->nnodes; i++)
		dmutex__mu_lock(&be->nodes[i].mu, DMUTEX__LK_NODE, "fork: node.mu");
}

void
dmutex__backend_child_nodes(struct dmutex__backend *be)
{
	/* The child made them anew: only the lock-order count is dropped. */
	for (size_t i = 0; i < be->nnodes; i++)
		dmutex__lo_released(DMUTEX__LK_NODE);
}

void
dmutex__backend_unlock_nodes(struct dmutex__backend *be)
{
	for (size_t i = 0; i < be->nnodes; i++)
		dmutex__mu_unlock(&be->nodes[i].mu, DMUTEX__LK_NODE);
}

void
dmutex__redis_why(struct dmutex__backend *be, char *out, size_t len)
{
	size_t k = 0;

	out[0] = '\0';
	for (size_t i = 0; i < be->nnodes && k < len; i++) {
		struct dmutex__node *node = &be->nodes[i];
		pthread_mutex_lock(&node->mu);
		if (node->last_err[0])
			k += (size_t)snprintf(out + k, len - k, "%s%s%s%s", k ? "; " : "",
					be->nnodes > 1 ? node->addr->display : "", be->nnodes > 1 ? ": " : "",
					node->last_err);
		pthread_mutex_unlock(&node->mu);
	}
}
