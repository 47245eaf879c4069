/* The backend for one Redis master. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fair.h"
#include "base/base.h"
#include "base/log.h"
#include "node.h"
#include "backend/redis/scripts/scripts.h"
#include "sentinel.h"
#include "topology.h"

struct redis_backend {
	struct dmutex__backend base;
	struct dmutex__node node;
};

static struct dmutex__node *
node_of(struct dmutex__backend *be)
{
	return &((struct redis_backend *)be)->node;
}

/*
 * `SET lock value NX PX lease GET`: nil, the lock was free and is ours
 * (no fencing token yet: dmutex_fence asks for one, fence.lua); else the
 * holder's value.  0 answered (a filled), 1 only the script can answer,
 * -EIO failed (a->refused, a->maybe_done set).
 */
static int
take_plain(struct dmutex__node *n, struct dmutex__acq *a,
		struct dmutex__acq_argv *x)
{
	redisReply *r;
	int md, rc;

	r = dmutex__node_call_within(n, DMUTEX__CMD_TAKE, 1, 6, x->take, &md, a->deadline);
	if (!r) {
		a->refused = md == DMUTEX__REFUSED;
		a->maybe_done = md == 1;
		return -EIO;
	}
	if (r->type == REDIS_REPLY_NIL) {
		a->status = DMUTEX__ACQ_OK;
		a->fence = 0;
		a->died = 0;
		rc = 0;
	} else if (r->type == REDIS_REPLY_STRING) {
		rc = dmutex__take_busy(n->addr->display, r->str, r->len, a);
		if (rc < 0 || (rc == 0 && a->status == DMUTEX__ACQ_VERSION)) {
			a->refused = 1;
			rc = -EIO;
		}
	} else {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: acquire of '%s': unexpected reply to SET",
				n->addr->display, a->name);
		/* It may have taken the lock all the same. */
		a->maybe_done = 1;
		rc = -EIO;
	}
	freeReplyObject(r);
	return rc;
}

int
dmutex__backend_redis_acquire(struct dmutex__backend *be, struct dmutex__node *n,
		struct dmutex__acq *a)
{
	struct dmutex__acq_argv x;
	redisReply *r;
	int md;

	a->maybe_done = a->refused = 0;
	if (a->fair) {
		struct dmutex__fair_acq_argv f;
		dmutex__fair_acq_argv(be, a, &f);
		/* A trylock's or timed lock's deadline bounds the call, its
		 * dial included. */
		r = dmutex__node_call_within(n, DMUTEX__SCRIPT_FAIR_ACQUIRE, DMUTEX__FAIR_ACQ_NKEYS,
				DMUTEX__FAIR_ACQ_ARGC, f.argv, &md, a->deadline);
	} else {
		dmutex__acq_argv(be, a, &x);
		if (!a->robust && !a->wait && x.argv[8][0] == '0') {
			/* The common case, a free lock, in one plain command
			 * (acquire.lua says what else it serves). */
			int take = take_plain(n, a, &x);
			if (take <= 0)
				return -take;
		}
		r = dmutex__node_call_within(n, DMUTEX__SCRIPT_ACQUIRE, 2, DMUTEX__ACQ_ARGC, x.argv, &md,
				a->deadline);
	}
	if (!r) {
		a->refused = md == DMUTEX__REFUSED;
		a->maybe_done = md == 1;
		return EIO;
	}
	if (dmutex__acq_reply(n->addr->display, r, a)) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: acquire of '%s': unexpected reply (shape, or a number out of range)",
				n->addr->display, a->name);
		freeReplyObject(r);
		/* It may have taken the lock all the same. */
		a->maybe_done = 1;
		return EIO;
	}
	freeReplyObject(r);
	if (a->status == DMUTEX__ACQ_VERSION) {
		a->refused = 1;
		return EIO;
	}
	return 0;
}

static int
redis_acquire(struct dmutex__backend *be, struct dmutex__acq *a)
{
	return dmutex__backend_redis_acquire(be, node_of(be), a);
}

int
dmutex__backend_redis_release(struct dmutex__backend *be, struct dmutex__node *n,
		const char *name, const char *token, int mode, int64_t deadline,
		struct dmutex__handoff *next, int *released, int *maybe_done)
{
	struct dmutex__rel_argv x;
	redisReply *r;
	int bad;

	if (next)
		next->granted = 0;
	if (mode & DMUTEX__REL_FAIR) {
		struct dmutex__fair_rel_argv f;
		dmutex__fair_rel_argv(be, name, token, mode & ~DMUTEX__REL_FAIR, next, &f);
		r = dmutex__node_call_by(n, DMUTEX__SCRIPT_FAIR_RELEASE, DMUTEX__FAIR_REL_NKEYS,
				DMUTEX__FAIR_REL_ARGC, f.argv, maybe_done, deadline);
	} else {
		dmutex__rel_argv(be, name, token, mode, &x);
		r = dmutex__node_call_by(n, DMUTEX__REL_SCRIPT(mode), 2, DMUTEX__REL_NARGS(mode), x.argv,
				maybe_done, deadline);
	}
	if (!r) {
		*maybe_done = *maybe_done == 1;
		return EIO;
	}
	bad = next && r->type == REDIS_REPLY_ARRAY ? dmutex__rel_to_reply(r, next, released)
		: dmutex__rel_reply(n->addr->display, name, r, released);
	if (bad) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: release of '%s': unexpected reply shape",
				n->addr->display, name);
		freeReplyObject(r);
		*maybe_done = 1;
		return EIO;
	}
	freeReplyObject(r);
	return 0;
}

static int
redis_release(struct dmutex__backend *be, const char *name, const char *token,
		int mode, int64_t deadline, int *released, int *maybe_done)
{
	return dmutex__backend_redis_release(be, node_of(be), name, token, mode, deadline, NULL,
			released, maybe_done);
}

static int
redis_release_to(struct dmutex__backend *be, const char *name, const char *token, int mode,
		int64_t deadline, struct dmutex__handoff *next, int *released, int *maybe_done)
{
	return dmutex__backend_redis_release(be, node_of(be), name, token, mode, deadline, next,
			released, maybe_done);
}

static int
redis_release_async(struct dmutex__backend *be, const char *name, const char *token, int mode,
		int64_t deadline, int64_t until_ns, dmutex__rescue_fn rescue, void *rescue_arg,
		struct dmutex__rel_ticket **out)
{
	return dmutex__backend_redis_release_async(be, node_of(be), name, token, mode, deadline,
			until_ns, rescue, rescue_arg, out);
}

int
dmutex__backend_redis_fence(struct dmutex__backend *be, struct dmutex__node *n, const char *name,
		const char *token, unsigned lease_ms, int64_t deadline, uint64_t *fence, int *refused)
{
	char lk[DMUTEX__KEY_MAX], mk[DMUTEX__KEY_MAX], keep[24];
	const char *argv[4] = { lk, mk, token, keep };
	redisReply *r;
	long long st;
	int md;

	*refused = 0;
	dmutex__key(lk, be->cfg.prefix, "lock", name);
	dmutex__key(mk, be->cfg.prefix, "meta", name);
	dmutex__udec(keep, (unsigned long long)lease_ms + be->cfg.idle_ms);
	if (!(r = dmutex__node_call_by(n, DMUTEX__SCRIPT_FENCE, 2, 4, argv, &md, deadline))) {
		*refused = md == DMUTEX__REFUSED;
		return EIO;
	}
	if (dmutex__int_elem_in(r, 0, 0, 1, &st) || (st == 1 && dmutex__fence_elem(r, 1, fence))) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: fencing token of '%s': unexpected reply", n->addr->display,
				name);
		freeReplyObject(r);
		/* A server that answers this would answer it again. */
		*refused = 1;
		return EIO;
	}
	freeReplyObject(r);
	return st == 1 ? 0 : ENOLCK;
}

static int
redis_fence(struct dmutex__backend *be, const char *name, const char *token, unsigned lease_ms,
		int64_t deadline, uint64_t *fence, int *refused)
{
	return dmutex__backend_redis_fence(be, node_of(be), name, token, lease_ms, deadline, fence,
			refused);
}

static int
redis_cache(struct dmutex__backend *be, const char *name, const char *token, unsigned block,
		int batch, int64_t deadline, uint64_t *last, int *result)
{
	struct dmutex__node *n = node_of(be);
	char lk[DMUTEX__KEY_MAX], mk[DMUTEX__KEY_MAX], nb[16], keep[24];
	const char *argv[6] = { lk, mk, token, nb, keep, batch ? "1" : "0" };
	redisReply *r;
	long long st;
	int md;

	dmutex__key(lk, be->cfg.prefix, "lock", name);
	dmutex__key(mk, be->cfg.prefix, "meta", name);
	snprintf(nb, sizeof nb, "%u", block);
	dmutex__udec(keep, (unsigned long long)be->cfg.lease_ms + be->cfg.idle_ms);
	*result = 0;
	if (!(r = dmutex__node_call_by(n, DMUTEX__SCRIPT_LEASE_CACHE, 2, 6, argv, &md, deadline))) {
		if (md == DMUTEX__REFUSED)
			*result = -1;
		return EIO;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_INTEGER ||
			(st = r->element[0]->integer) < 0 || st > 3 || (st == 3 && !batch) ||
			((st == 1 || st == 3) && (block ? dmutex__fence_elem(r, 1, last)
				: dmutex__fence_elem0(r, 1, last)))) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: lease cache of '%s': unexpected reply", n->addr->display, name);
		freeReplyObject(r);
		/* A server that answers this would answer it again. */
		*result = -1;
		return EIO;
	}
	*result = (int)st;
	freeReplyObject(r);
	return 0;
}

/* Renew chunks in flight at once: enough to keep the server busy through
 * a round trip, few enough that the next chunk's wait starts from the
 * previous reply, not from a send of the whole batch. */
#define RENEW_WINDOW 8

/*
 * One pipeline of renew.lua chunks, at most RENEW_WINDOW in flight.  Two
 * bounds: the whole call ends by `until` (the earliest lease deadline it
 * guards, or what the holds left for later can wait), and each reply gets
 * command_timeout_ms from the previous one (or from the start), not the
 * whole batch: 100,000 holds are 391 chunks, whose replies take longer
 * than one command timeout in all on a loaded machine.  A chunk that times
 * out leaves its holds and those behind it at -1 (the renewer asks again
 * while their leases have time); the chunks answered before it count.
 */
static void
redis_renew(struct dmutex__backend *be, struct dmutex__renewal *rn, size_t n, int64_t until)
{
	struct dmutex__node *node = node_of(be);
	size_t chunks = (n + DMUTEX__RENEW_CHUNK - 1) / DMUTEX__RENEW_CHUNK, sent = 0, k;
	struct dmutex__renew_argv x = { 0 };
	unsigned char *noscript = NULL;
	int *res = NULL;
	struct dmutex__conn *ctx;
	int64_t step = (int64_t)node->command_ms * DMUTEX__MS, now = dmutex__now_ns();
	void *v;
	int md;

	for (size_t i = 0; i < n; i++)
		rn[i].result = -1;
	if (!n || until <= now || !(ctx = dmutex__node_get_by(node, until < now + step ? until : now + step)))
		return;
	noscript = calloc(chunks, 1);
	res = malloc(DMUTEX__RENEW_CHUNK * sizeof *res);
	if (!noscript || !res || dmutex__renew_argv_init(&x))
		goto out;

	for (size_t c = 0; c < chunks; c++) {
		int64_t deadline;
		/* Keep the window full; hiredis formats each command into its
		 * own buffer, so the chunk buffers can be reused. */
		for (; sent < chunks && sent < c + RENEW_WINDOW; sent++) {
			k = dmutex__renew_chunk(be, rn, n, sent, &x);
			if (dmutex__node_script_append(node, ctx, DMUTEX__SCRIPT_RENEW, 1,
					(int)DMUTEX__RENEW_NKEYS(k), (int)DMUTEX__RENEW_ARGC(k), x.argv, NULL))
				break;
		}
		if (c >= sent)
			break;
		deadline = dmutex__now_ns() + step;
		if (deadline > until)
			deadline = until;
		if (dmutex__conn_get(ctx, &v, deadline)) {
			dmutex__log(DMUTEX_LOG_WARN, "%s: renew: %s (%zu of %zu locks answered)",
					node->addr->display, ctx->errstr, c * DMUTEX__RENEW_CHUNK, n);
			dmutex__node_drop_idle(node);
			goto out;
		}
		k = dmutex__renew_chunk(be, rn, n, c, &x);
		if (dmutex__node_noscript(v)) {
			noscript[c] = 1;
		} else {
			dmutex__renew_reply(node->addr->display, v, k, res);
			for (size_t i = 0; i < k; i++)
				rn[c * DMUTEX__RENEW_CHUNK + i].result = res[i];
		}
		freeReplyObject(v);
	}
	/* A restarted server forgot the script: redo those chunks one by one,
	 * which loads it by source. */
	for (size_t c = 0; c < sent; c++) {
		redisReply *r;
		int64_t deadline = dmutex__now_ns() + step;
		if (!noscript[c])
			continue;
		k = dmutex__renew_chunk(be, rn, n, c, &x);
		r = dmutex__node_script(node, ctx, DMUTEX__SCRIPT_RENEW, (int)DMUTEX__RENEW_NKEYS(k),
				(int)DMUTEX__RENEW_ARGC(k), x.argv, NULL, &md, deadline < until ? deadline : until);
		if (!r)
			break;
		dmutex__renew_reply(node->addr->display, r, k, res);
		for (size_t i = 0; i < k; i++)
			rn[c * DMUTEX__RENEW_CHUNK + i].result = res[i];
		freeReplyObject(r);
	}
out:
	dmutex__renew_argv_free(&x);
	free(noscript);
	free(res);
	dmutex__node_put(node, ctx);
}

char *
dmutex__redis_channel(struct dmutex__backend *be, const char *name)
{
	char buf[DMUTEX__KEY_MAX];
	dmutex__key(buf, be->cfg.prefix, "wake", name);
	return strdup(buf);
}

static void
redis_atfork_child(struct dmutex__backend *be)
{
	dmutex__backend_child_nodes(be);
	dmutex__node_atfork_child(node_of(be));
}

static void
redis_destroy(struct dmutex__backend *be)
{
	dmutex__node_fini(node_of(be));
	free(be);
}

static const struct dmutex__backend_ops redis_ops = {
	.acquire = redis_acquire,
	.release = redis_release,
	.release_to = redis_release_to,
	.release_async = redis_release_async,
	.ticket_state = dmutex__redis_ticket_state,
	.ticket_wait = dmutex__redis_ticket_wait,
	.ticket_ref = dmutex__redis_ticket_ref,
	.ticket_put = dmutex__redis_ticket_put,
	.renew = redis_renew,
	.cache = redis_cache,
	.fence = redis_fence,
	.channel = dmutex__redis_channel,
	.atfork_child = redis_atfork_child,
	.destroy = redis_destroy,
	.verify = dmutex__backend_verify_nodes,
	.atfork_prepare = dmutex__backend_lock_nodes,
	.atfork_parent = dmutex__backend_unlock_nodes,
	DMUTEX__REDIS_WAKE_OPS,
	DMUTEX__REDIS_COND_OPS,
	DMUTEX__REDIS_ONE_MASTER_OPS,
	DMUTEX__REDIS_ADMIN_OPS,
};

int
dmutex__backend_redis_create(const struct dmutex__backend_cfg *cfg, struct dmutex__backend **out)
{
	struct redis_backend *rb = calloc(1, sizeof *rb);
	int err;

	if (!rb)
		return ENOMEM;
	if ((err = dmutex__master_init(&rb->node, &cfg->nodes[0], cfg->connect_timeout_ms,
			cfg->command_timeout_ms))) {
		free(rb);
		return err;
	}
	/* Without it failovers are still followed, at the first error. */
	if ((err = dmutex__master_watch(&rb->node)))
		dmutex__log(DMUTEX_LOG_WARN, "%s: cannot start the thread that follows failovers: %s",
				rb->node.addr->display, strerror(err));
	rb->base.ops = &redis_ops;
	rb->base.cfg = *cfg;
	rb->base.nodes = &rb->node;
	rb->base.nnodes = 1;
	*out = &rb->base;
	return 0;
}
