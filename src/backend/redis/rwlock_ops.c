/* The backend calls of read-write locks: scripts on the one node.  (Shares
 * over several masters would need a quorum per share and per intent; not
 * offered: drwlock_init refuses such a client with ENOTSUP.) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "keys.h"
#include "base/log.h"
#include "node.h"
#include "sync.h"
#include "backend/redis/scripts/scripts.h"

/* Holds per renew script call: bounds one script's run time in Redis. */
#define RENEW_CHUNK 128

struct rw_keys {
	char h[DMUTEX__KEY_MAX], rd[DMUTEX__KEY_MAX], q[DMUTEX__KEY_MAX];
};

static void
keys_of(struct dmutex__backend *be, const char *name, struct rw_keys *k)
{
	dmutex__key(k->h, be->cfg.prefix, "rw", name);
	dmutex__key(k->rd, be->cfg.prefix, "rwr", name);
	dmutex__key(k->q, be->cfg.prefix, "rwq", name);
}

/* Idle keys live this long after their last use: longer than any lease
 * they carry, so that no valid share or writer is swept with them. */
static void
gc_ms(unsigned lease_ms, char *out, size_t size)
{
	snprintf(out, size, "%llu", 3ULL * lease_ms + 60000);
}

char *
dmutex__redis_rw_channel(struct dmutex__backend *be, const char *name)
{
	char buf[DMUTEX__KEY_MAX];

	dmutex__key(buf, be->cfg.prefix, "rwwake", name);
	return strdup(buf);
}

static int
int_at(const redisReply *r, size_t i, long long *out)
{
	if (r->type != REDIS_REPLY_ARRAY || i >= r->elements ||
			r->element[i]->type != REDIS_REPLY_INTEGER)
		return -1;
	*out = r->element[i]->integer;
	return 0;
}

int
dmutex__redis_rw_acquire(struct dmutex__backend *be, const char *name, struct dmutex__rw_acq *a)
{
	struct dmutex__node *n = &be->nodes[0];
	struct rw_keys k;
	char op[2] = { (char)a->op, 0 }, lease[16], gc[24], who[400];
	long long st, v1, v2;
	redisReply *r;
	int md = 0;

	a->maybe_done = a->refused = 0;
	keys_of(be, name, &k);
	snprintf(lease, sizeof lease, "%u", a->lease_ms);
	gc_ms(a->lease_ms, gc, sizeof gc);
	/* Who writes, for operators (dmutex status), as a mutex's hold
	 * records it; a reader's share records nobody: not sent. */
	if (a->op == 'w')
		dmutex__redis_who(be, a->tid, who, sizeof who);
	const char *argv[] = { k.h, k.rd, k.q, op, a->token, lease, a->wait ? "1" : "0", gc, who };
	if (!(r = dmutex__node_call_within(n, DMUTEX__SCRIPT_RW_ACQUIRE, 3, a->op == 'w' ? 9 : 8, argv,
			&md, a->deadline))) {
		a->refused = md == DMUTEX__REFUSED;
		a->maybe_done = md == 1;
		return EIO;
	}
	if (int_at(r, 0, &st) || int_at(r, 1, &v1) || (st == 0 && int_at(r, 2, &v2)) ||
			st < 0 || st > 1 || (st == 0 && (v1 < 0 || v2 < 0 || v2 >= (1 << 20) ||
			v1 >= (1LL << 43))) || (st == 1 && (v1 < 0 || v1 > 86400000LL))) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: rwlock '%s': unexpected reply to an acquire",
				n->addr->display, name);
		freeReplyObject(r);
		a->maybe_done = 1;
		return EIO;
	}
	a->taken = st == 0;
	if (a->taken)
		a->fence = (uint64_t)v1 << 20 | (uint64_t)v2;
	else
		a->pttl_ms = v1;
	freeReplyObject(r);
	return 0;
}

int
dmutex__redis_rw_release(struct dmutex__backend *be, const char *name, int op, const char *token,
		int *released, int *maybe_done)
{
	struct dmutex__node *n = &be->nodes[0];
	struct rw_keys k;
	char o[2] = { (char)op, 0 }, ch[DMUTEX__KEY_MAX];
	redisReply *r;

	keys_of(be, name, &k);
	dmutex__key(ch, be->cfg.prefix, "rwwake", name);
	const char *argv[] = { k.h, k.rd, k.q, o, token, ch };
	if (!(r = dmutex__node_call(n, DMUTEX__SCRIPT_RW_RELEASE, 3, 6, argv, maybe_done))) {
		*maybe_done = *maybe_done == 1;
		return EIO;
	}
	/* rw_release.lua: 1 released, 0 not ours (or an intent's ZREM count). */
	long long v;
	if (dmutex__int_in(r, 0, 1, &v)) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: rwlock '%s': unexpected reply to a release (shape, "
				"or a number out of range)", n->addr->display, name);
		freeReplyObject(r);
		*maybe_done = 1;
		return EIO;
	}
	*released = v == 1;
	freeReplyObject(r);
	return 0;
}

/* One chunk: 3 keys and 3 arguments per hold, then the GC time. */
static void
renew_chunk(struct dmutex__backend *be, struct dmutex__node *node, struct dmutex__conn *conn,
		struct dmutex__renewal *rn, size_t k, int64_t deadline)
{
	struct rw_keys *keys = malloc(k * sizeof *keys);
	char (*leases)[16] = malloc(k * sizeof *leases), (*ops)[2] = malloc(k * sizeof *ops);
	const char **argv = malloc((6 * k + 1) * sizeof *argv);
	char gc[24];
	unsigned longest = 0;
	redisReply *r = NULL;
	int md;

	if (!keys || !leases || !ops || !argv)
		goto out;
	for (size_t i = 0; i < k; i++) {
		keys_of(be, rn[i].name, &keys[i]);
		snprintf(leases[i], sizeof leases[i], "%u", rn[i].lease_ms);
		ops[i][0] = (char)rn[i].rw;
		ops[i][1] = 0;
		argv[3 * i] = keys[i].h;
		argv[3 * i + 1] = keys[i].rd;
		argv[3 * i + 2] = keys[i].q;
		argv[3 * k + 3 * i] = ops[i];
		argv[3 * k + 3 * i + 1] = rn[i].token;
		argv[3 * k + 3 * i + 2] = leases[i];
		if (rn[i].lease_ms > longest)
			longest = rn[i].lease_ms;
	}
	gc_ms(longest, gc, sizeof gc);
	argv[6 * k] = gc;
	r = conn ? dmutex__node_script(node, conn, DMUTEX__SCRIPT_RW_RENEW, (int)(3 * k),
			(int)(6 * k + 1), argv, NULL, &md, deadline)
		: dmutex__node_call_by(node, DMUTEX__SCRIPT_RW_RENEW, (int)(3 * k), (int)(6 * k + 1),
			argv, &md, deadline);
	if (r && r->type == REDIS_REPLY_ARRAY && r->elements == k) {
		/* rw_renew.lua: 1 renewed, 2 renewed and a writer waits, 0 not
		 * ours; anything else leaves the result -1 (failed). */
		for (size_t i = 0; i < k; i++) {
			long long v;
			if (!dmutex__int_elem_in(r, i, 0, 2, &v)) {
				rn[i].result = v != 0;
				rn[i].writer_waits = v == 2;
			}
		}
	} else if (r) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: rwlock renew: unexpected reply shape", node->addr->display);
	}
out:
	if (r)
		freeReplyObject(r);
	free(keys);
	free(leases);
	free(ops);
	free(argv);
}

void
dmutex__redis_rw_renew(struct dmutex__backend *be, struct dmutex__renewal *rn, size_t n, int64_t until)
{
	struct dmutex__node *node = &be->nodes[0];
	int64_t now = dmutex__now_ns(), deadline = now + (int64_t)node->command_ms * DMUTEX__MS;
	struct dmutex__conn *conn;

	for (size_t i = 0; i < n; i++) {
		rn[i].result = -1;
		rn[i].writer_waits = 0;
	}
	if (until < deadline)
		deadline = until;
	if (!n || deadline <= now)
		return;
	if (node->route) {
		/* A cluster: one script per hold, each on the node of its slot. */
		for (size_t i = 0; i < n && dmutex__now_ns() < deadline; i++)
			renew_chunk(be, node, NULL, rn + i, 1, deadline);
		return;
	}
	if (!(conn = dmutex__node_get_by(node, deadline)))
		return;
	for (size_t lo = 0; lo < n && !conn->err; lo += RENEW_CHUNK)
		renew_chunk(be, node, conn, rn + lo, n - lo < RENEW_CHUNK ? n - lo : RENEW_CHUNK, deadline);
	dmutex__node_put(node, conn);
}
