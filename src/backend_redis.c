/* The backend for one Redis master. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "internal.h"
#include "keys.h"
#include "node.h"
#include "scripts.h"

/* Keys per renew script call: bounds one script's run time in Redis. */
#define RENEW_CHUNK 256

struct redis_backend {
	struct dmutex__backend base;
	struct dmutex__node node;
};

static struct dmutex__node *
node_of(struct dmutex__backend *be)
{
	return &((struct redis_backend *)be)->node;
}

static const char *
prefix_of(struct dmutex__backend *be)
{
	return be->client->cfg.prefix;
}

static int
int_elem(const redisReply *r, size_t i, long long *out)
{
	if (r->type != REDIS_REPLY_ARRAY || i >= r->elements ||
			r->element[i]->type != REDIS_REPLY_INTEGER)
		return -1;
	*out = r->element[i]->integer;
	return 0;
}

static int
redis_acquire(struct dmutex__backend *be, struct dmutex__acq *a)
{
	struct dmutex__node *n = node_of(be);
	struct dmutex_client *c = be->client;
	char lk[DMUTEX__KEY_MAX], mk[DMUTEX__KEY_MAX];
	char lease[16], pid[24], tid[24], since[24];
	const char *argv[8];
	redisReply *r;
	long long st, v1 = 0, v2 = 0;

	a->maybe_done = a->refused = 0;
	dmutex__key(lk, prefix_of(be), "lock", a->name);
	dmutex__key(mk, prefix_of(be), "meta", a->name);
	snprintf(lease, sizeof lease, "%u", a->lease_ms);
	snprintf(pid, sizeof pid, "%ld", (long)getpid());
	snprintf(tid, sizeof tid, "%ld", a->tid);
	snprintf(since, sizeof since, "%" PRId64, dmutex__wall_ms());
	argv[0] = lk;
	argv[1] = mk;
	argv[2] = a->token;
	argv[3] = lease;
	argv[4] = c->host;
	argv[5] = pid;
	argv[6] = tid;
	argv[7] = since;

	if (!(r = dmutex__node_call(n, DMUTEX__SCRIPT_ACQUIRE, 2, 8, argv, &a->maybe_done))) {
		a->refused = a->maybe_done == DMUTEX__REFUSED;
		a->maybe_done = a->maybe_done == 1;
		return EIO;
	}
	if (int_elem(r, 0, &st) || (st == DMUTEX__ACQ_OK && (int_elem(r, 1, &v1) || int_elem(r, 2, &v2) || v1 <= 0)) ||
			(st == DMUTEX__ACQ_BUSY && int_elem(r, 1, &v1)) || st < 0 || st > 2) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: acquire of '%s': unexpected reply shape",
				n->addr->display, a->name);
		freeReplyObject(r);
		/* It may have taken the lock all the same. */
		a->maybe_done = 1;
		return EIO;
	}
	a->status = (int)st;
	if (st == DMUTEX__ACQ_OK) {
		a->fence = (uint64_t)v1;
		a->died = v2 != 0;
	} else if (st == DMUTEX__ACQ_BUSY) {
		a->pttl_ms = v1;
	}
	freeReplyObject(r);
	return 0;
}

static int
redis_release(struct dmutex__backend *be, const char *name, const char *token,
		int mode, int *released, int *maybe_done)
{
	struct dmutex__node *n = node_of(be);
	char lk[DMUTEX__KEY_MAX], mk[DMUTEX__KEY_MAX], ch[DMUTEX__KEY_MAX], m[4];
	const char *argv[5] = { lk, mk, token, m, ch };
	redisReply *r;

	*maybe_done = 0;
	dmutex__key(lk, prefix_of(be), "lock", name);
	dmutex__key(mk, prefix_of(be), "meta", name);
	dmutex__key(ch, prefix_of(be), "wake", name);
	snprintf(m, sizeof m, "%d", mode);
	if (!(r = dmutex__node_call(n, DMUTEX__SCRIPT_RELEASE, 2, 5, argv, maybe_done))) {
		*maybe_done = *maybe_done == 1;
		return EIO;
	}
	if (r->type != REDIS_REPLY_INTEGER) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: release of '%s': unexpected reply shape",
				n->addr->display, name);
		freeReplyObject(r);
		*maybe_done = 1;
		return EIO;
	}
	*released = r->integer == 1;
	freeReplyObject(r);
	return 0;
}

/* Fill argv for renew.lua with chunk c of rn; returns its key count. */
static size_t
fill_chunk(struct dmutex__backend *be, struct dmutex__renewal *rn, size_t n, size_t c,
		char (*keys)[DMUTEX__KEY_MAX], char (*leases)[12], const char **argv)
{
	size_t lo = c * RENEW_CHUNK, k = n - lo < RENEW_CHUNK ? n - lo : RENEW_CHUNK;

	for (size_t i = 0; i < k; i++) {
		dmutex__key(keys[i], prefix_of(be), "lock", rn[lo + i].name);
		snprintf(leases[i], sizeof leases[i], "%u", rn[lo + i].lease_ms);
		argv[i] = keys[i];
		argv[k + 2 * i] = rn[lo + i].token;
		argv[k + 2 * i + 1] = leases[i];
	}
	return k;
}

static void
take_chunk(struct dmutex__node *node, struct dmutex__renewal *rn, size_t k, redisReply *r)
{
	if (r->type == REDIS_REPLY_ARRAY && r->elements == k) {
		for (size_t i = 0; i < k; i++)
			if (r->element[i]->type == REDIS_REPLY_INTEGER)
				rn[i].result = r->element[i]->integer == 1;
		return;
	}
	dmutex__log(DMUTEX_LOG_ERROR, "%s: renew: %s", node->addr->display,
			r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply shape");
}

static void
redis_renew(struct dmutex__backend *be, struct dmutex__renewal *rn, size_t n)
{
	struct dmutex__node *node = node_of(be);
	size_t chunks = (n + RENEW_CHUNK - 1) / RENEW_CHUNK, sent = 0, k;
	char (*keys)[DMUTEX__KEY_MAX] = NULL;
	char (*leases)[12] = NULL;
	const char **argv = NULL;
	unsigned char *noscript = NULL;
	redisContext *ctx;
	void *v;
	int md;

	for (size_t i = 0; i < n; i++)
		rn[i].result = -1;
	if (!n || !(ctx = dmutex__node_get(node)))
		return;
	keys = malloc(RENEW_CHUNK * sizeof *keys);
	leases = malloc(RENEW_CHUNK * sizeof *leases);
	argv = malloc(3 * RENEW_CHUNK * sizeof *argv);
	noscript = calloc(chunks, 1);
	if (!keys || !leases || !argv || !noscript)
		goto out;

	/* One pipeline: every chunk goes out before the first reply is read.
	 * hiredis formats each command into its own buffer, so the chunk
	 * buffers can be reused. */
	for (; sent < chunks; sent++) {
		k = fill_chunk(be, rn, n, sent, keys, leases, argv);
		if (dmutex__node_script_append(ctx, DMUTEX__SCRIPT_RENEW, (int)k, (int)(3 * k), argv, NULL))
			break;
	}
	for (size_t c = 0; c < sent; c++) {
		redisReply *r;
		if (redisGetReply(ctx, &v) != REDIS_OK) {
			dmutex__log(DMUTEX_LOG_WARN, "%s: renew: %s", node->addr->display, ctx->errstr);
			dmutex__node_drop_idle(node);
			goto out;
		}
		r = v;
		k = n - c * RENEW_CHUNK < RENEW_CHUNK ? n - c * RENEW_CHUNK : RENEW_CHUNK;
		if (r->type == REDIS_REPLY_ERROR && r->len >= 8 && !memcmp(r->str, "NOSCRIPT", 8))
			noscript[c] = 1;
		else
			take_chunk(node, rn + c * RENEW_CHUNK, k, r);
		freeReplyObject(r);
	}
	/* A restarted server forgot the script: redo those chunks one by one,
	 * which loads it by source. */
	for (size_t c = 0; c < sent; c++) {
		redisReply *r;
		if (!noscript[c])
			continue;
		k = fill_chunk(be, rn, n, c, keys, leases, argv);
		r = dmutex__node_script(node, ctx, DMUTEX__SCRIPT_RENEW, (int)k, (int)(3 * k), argv, NULL, &md);
		if (!r)
			break;
		take_chunk(node, rn + c * RENEW_CHUNK, k, r);
		freeReplyObject(r);
	}
out:
	free(keys);
	free(leases);
	free(argv);
	free(noscript);
	dmutex__node_put(node, ctx);
}

static char *
redis_channel(struct dmutex__backend *be, const char *name)
{
	char buf[DMUTEX__KEY_MAX];
	dmutex__key(buf, prefix_of(be), "wake", name);
	return strdup(buf);
}

static void
redis_atfork_child(struct dmutex__backend *be)
{
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
	.renew = redis_renew,
	.channel = redis_channel,
	.atfork_child = redis_atfork_child,
	.destroy = redis_destroy,
};

int
dmutex__backend_redis_create(struct dmutex_client *c, struct dmutex__backend **out)
{
	struct redis_backend *rb = calloc(1, sizeof *rb);
	if (!rb)
		return ENOMEM;
	dmutex__node_init(&rb->node, &c->cfg.nodes[0], c->cfg.connect_timeout_ms,
			c->cfg.command_timeout_ms);
	rb->base.ops = &redis_ops;
	rb->base.client = c;
	rb->base.nodes = &rb->node;
	rb->base.nnodes = 1;
	*out = &rb->base;
	return 0;
}
