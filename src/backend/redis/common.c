#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "base/base.h"
#include "base/log.h"

int
dmutex__int_in(const redisReply *r, long long lo, long long hi, long long *out)
{
	if (r->type != REDIS_REPLY_INTEGER || r->integer < lo || r->integer > hi)
		return -1;
	*out = r->integer;
	return 0;
}

int
dmutex__int_elem_in(const redisReply *r, size_t i, long long lo, long long hi, long long *out)
{
	if (r->type != REDIS_REPLY_ARRAY || i >= r->elements)
		return -1;
	return dmutex__int_in(r->element[i], lo, hi, out);
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

void
dmutex__redis_who(const struct dmutex__backend *be, long tid, char *buf, size_t len)
{
	/* The pid is the client's, kept right across fork (client.c): getpid
	 * is a system call a lock otherwise.  The host name has no spaces;
	 * it goes last all the same, where a reader takes the rest. */
	snprintf(buf, len, "%llu %llu %ld %s %s", (unsigned long long)dmutex__wall_ms(),
			(unsigned long long)*be->cfg.pid, tid, *be->cfg.hostid ? be->cfg.hostid : "-",
			be->cfg.host);
}

void
dmutex__acq_argv(struct dmutex__backend *be, const struct dmutex__acq *a, struct dmutex__acq_argv *x)
{
	int tail;
	size_t len;

	dmutex__key(x->lk, be->cfg.prefix, "lock", a->name);
	dmutex__key(x->mk, be->cfg.prefix, "meta", a->name);
	dmutex__key(x->ch, be->cfg.prefix, "wake", a->name);
	dmutex__udec(x->lease, a->lease_ms);
	/* The meta hash's time to live, summed here: a Lua number that
	 * redis.call turns back into a string costs Redis more than the rest
	 * of the PEXPIRE (acquire.lua). */
	dmutex__udec(x->keep, (unsigned long long)a->lease_ms + be->cfg.idle_ms);
	tail = snprintf(x->value, sizeof x->value, "3 %s - 0 - ", a->token);
	len = (size_t)snprintf(x->value + tail, sizeof x->value - (size_t)tail, "%u ", a->lease_ms);
	dmutex__redis_who(be, (long)a->tid, x->value + tail + len, sizeof x->value - (size_t)tail - len);
	x->argv[0] = x->lk;
	x->argv[1] = x->mk;
	x->argv[2] = a->token;
	x->argv[3] = x->lease;
	x->argv[4] = x->value + tail;
	x->argv[5] = a->robust ? "1" : "0";
	x->argv[6] = x->keep;
	x->argv[7] = a->wait ? "1" : "0";
	x->argv[8] = dmutex__fence_at_acquire(be);
	x->argv[9] = x->ch;
	dmutex__udec(x->stamp, (unsigned long long)a->stamp);
	x->argv[10] = x->stamp;
	x->argv[11] = a->pop ? "1" : "0";
	x->take[0] = x->lk;
	x->take[1] = x->value;
	x->take[2] = "NX";
	x->take[3] = "PX";
	x->take[4] = x->lease;
	x->take[5] = "GET";
}

const char *
dmutex__fence_at_acquire(const struct dmutex__backend *be)
{
	/* Redlock: a token at once, counted on from the counter, so that the
	 * nodes stay in step and the fencing write-back round is rare.  A
	 * Cluster: a token at once too, from the clock: the lock key and the
	 * meta hash live in one slot, but during a slot's migration they may
	 * be on two nodes, and a later fence.lua (both keys) would wait for
	 * the migration to end while the hold's lease runs, where the plain
	 * SET (one key) went through (acquire.lua). */
	if (be->nnodes > 1)
		return "1";
	return be->cfg.nodes[0].cluster ? "2" : "0";
}

int
dmutex__take_busy(const char *display, const char *val, size_t len, struct dmutex__acq *a)
{
	static const char notrec[] = "3 notrec";
	const char *tok, *flags;
	size_t tl = strlen(a->token);

	if (len == sizeof notrec - 1 && !memcmp(val, notrec, len)) {
		a->status = DMUTEX__ACQ_NOTREC;
		return 0;
	}
	if (len < 2 || memchr(val, '\0', len) || val[1] != ' ') {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: WRONGTYPE: the lock key of '%s' holds data dmutex did not write",
				display, a->name);
		return -1;
	}
	if (val[0] != '3') {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: the keys of '%s' were written by dmutex key version "
				"%c; this library reads and writes version 3 only", display, a->name, val[0]);
		a->status = DMUTEX__ACQ_VERSION;
		return 0;
	}
	/* "3 token fence died flags ...": ours already, or kept. */
	tok = val + 2;
	if (len > 2 + tl && !memcmp(tok, a->token, tl) && tok[tl] == ' ')
		return 1;
	flags = val;
	for (int sp = 0; sp < 4 && (flags = memchr(flags, ' ', len - (size_t)(flags - val))); sp++)
		flags++;
	if (!flags) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: WRONGTYPE: the lock key of '%s' holds data dmutex did not write",
				display, a->name);
		return -1;
	}
	for (; (size_t)(flags - val) < len && *flags != ' '; flags++)
		if (*flags == 'c')
			return 1;
	a->status = DMUTEX__ACQ_BUSY;
	a->pttl_ms = -1;
	return 0;
}

/* A fencing token: a decimal string (acquire.lua: it may pass 2^53),
 * 1 .. INT64_MAX (what HINCRBY can count to). */
int
dmutex__fence_elem(const redisReply *r, size_t i, uint64_t *out)
{
	const redisReply *e;
	uint64_t v = 0;

	if (r->type != REDIS_REPLY_ARRAY || i >= r->elements)
		return -1;
	e = r->element[i];
	if (e->type == REDIS_REPLY_INTEGER) {
		if (e->integer <= 0)
			return -1;
		*out = (uint64_t)e->integer;
		return 0;
	}
	if (e->type != REDIS_REPLY_STRING || e->len < 1 || e->len > 19)
		return -1;
	for (size_t k = 0; k < e->len; k++) {
		if (e->str[k] < '0' || e->str[k] > '9')
			return -1;
		v = v * 10 + (uint64_t)(e->str[k] - '0');
	}
	if (!v || v > INT64_MAX)
		return -1;
	*out = v;
	return 0;
}

int
dmutex__fence_elem0(const redisReply *r, size_t i, uint64_t *out)
{
	const redisReply *e;

	if (r->type == REDIS_REPLY_ARRAY && i < r->elements && (e = r->element[i])->type ==
			REDIS_REPLY_STRING && e->len == 1 && e->str[0] == '0') {
		*out = 0;
		return 0;
	}
	return dmutex__fence_elem(r, i, out);
}

int
dmutex__acq_reply(const char *display, const redisReply *r, struct dmutex__acq *a)
{
	long long st, v2 = 0, v1 = 0;
	uint64_t fence = 0;

	if (int_elem(r, 0, &st) || st < 0 || st > 3)
		return -1;
	if (st == DMUTEX__ACQ_OK && (dmutex__fence_elem0(r, 1, &fence) || int_elem(r, 2, &v2)))
		return -1;
	/* A holder's remaining lease is at most the longest lease (24 h), or
	 * -1/-2 (no expiry, no key): anything else would overflow the
	 * deadline computed from it. */
	if (st == DMUTEX__ACQ_BUSY && (int_elem(r, 1, &v1) || v1 < -2 || v1 > DMUTEX__PTTL_MAX))
		return -1;
	if (st == DMUTEX__ACQ_VERSION) {
		const redisReply *v = r->elements > 1 ? r->element[1] : NULL;
		dmutex__log(DMUTEX_LOG_ERROR, "%s: the keys of '%s' were written by dmutex key version "
				"%.16s; this library reads and writes version 3 only", display, a->name,
				v && v->type == REDIS_REPLY_STRING ? v->str : "?");
	}
	a->status = (int)st;
	if (st == DMUTEX__ACQ_OK) {
		a->fence = fence;
		a->died = v2 != 0;
	} else if (st == DMUTEX__ACQ_BUSY) {
		a->pttl_ms = v1;
	}
	return 0;
}

void
dmutex__rel_argv(struct dmutex__backend *be, const char *name, const char *token, int mode,
		struct dmutex__rel_argv *x)
{
	const char *prefix = be->cfg.prefix;

	dmutex__key(x->lk, prefix, "lock", name);
	dmutex__key(x->mk, prefix, "meta", name);
	dmutex__key(x->ch, prefix, "wake", name);
	dmutex__udec(x->mode, (unsigned)mode);
	dmutex__udec(x->idle, be->cfg.idle_ms);
	x->argv[0] = x->lk;
	x->argv[1] = x->mk;
	x->argv[2] = token;
	x->argv[3] = x->mode;
	x->argv[4] = x->ch;
	x->argv[5] = x->idle;
}

int
dmutex__rel_to_reply(const redisReply *r, struct dmutex__handoff *next, int *released)
{
	long long st, died;
	uint64_t fence;

	if (r->elements != 3 || int_elem(r, 0, &st) || st != 1 || dmutex__fence_elem(r, 1, &fence) ||
			int_elem(r, 2, &died) || (died != 0 && died != 1))
		return -1;
	next->granted = 1;
	next->fence = fence;
	next->died = died != 0;
	*released = 1;
	return 0;
}

int
dmutex__rel_reply(const char *display, const char *name, const redisReply *r, int *released)
{
	if (r->type != REDIS_REPLY_INTEGER || r->integer < 0 || r->integer > DMUTEX__REL_GONE)
		return -1;
	/* 2: released, but the PUBLISH was refused (release.lua). */
	if (r->integer == 2)
		dmutex__log(DMUTEX_LOG_WARN, "%s: released '%s' but its waiters were not told: the ACL "
				"denies the wake channel (they wait for the lease to end); see "
				"dmutex_client_open(3) for the ACL dmutex needs", display, name);
	*released = r->integer == 1 || r->integer == 2;
	return 0;
}

int
dmutex__renew_argv_init(struct dmutex__renew_argv *x)
{
	x->keys = malloc(2 * DMUTEX__RENEW_CHUNK * sizeof *x->keys);
	x->leases = malloc(DMUTEX__RENEW_CHUNK * sizeof *x->leases);
	x->argv = malloc(DMUTEX__RENEW_ARGC(DMUTEX__RENEW_CHUNK) * sizeof *x->argv);
	if (x->keys && x->leases && x->argv)
		return 0;
	dmutex__renew_argv_free(x);
	return -1;
}

void
dmutex__renew_argv_free(struct dmutex__renew_argv *x)
{
	free(x->keys);
	free(x->leases);
	free(x->argv);
	x->keys = NULL;
	x->leases = NULL;
	x->argv = NULL;
}

size_t
dmutex__renew_chunk(struct dmutex__backend *be, const struct dmutex__renewal *rn, size_t n,
		size_t c, struct dmutex__renew_argv *x)
{
	size_t lo = c * DMUTEX__RENEW_CHUNK;
	size_t k = n - lo < DMUTEX__RENEW_CHUNK ? n - lo : DMUTEX__RENEW_CHUNK;

	snprintf(x->idle, sizeof x->idle, "%u", be->cfg.idle_ms);
	x->argv[2 * k] = x->idle;
	for (size_t i = 0; i < k; i++) {
		dmutex__key(x->keys[2 * i], be->cfg.prefix, "lock", rn[lo + i].name);
		dmutex__key(x->keys[2 * i + 1], be->cfg.prefix, "meta", rn[lo + i].name);
		snprintf(x->leases[i], sizeof x->leases[i], "%u", rn[lo + i].lease_ms);
		x->argv[2 * i] = x->keys[2 * i];
		x->argv[2 * i + 1] = x->keys[2 * i + 1];
		x->argv[2 * k + 1 + 2 * i] = rn[lo + i].token;
		x->argv[2 * k + 2 + 2 * i] = x->leases[i];
	}
	return k;
}

void
dmutex__renew_reply(const char *display, const redisReply *r, size_t k, int *out)
{
	for (size_t i = 0; i < k; i++)
		out[i] = -1;
	if (r->type == REDIS_REPLY_ARRAY && r->elements == k) {
		for (size_t i = 0; i < k; i++)
			if (r->element[i]->type == REDIS_REPLY_INTEGER)
				out[i] = r->element[i]->integer == 1;
		return;
	}
	dmutex__log(DMUTEX_LOG_ERROR, "%s: renew: %s", display,
			r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply shape");
}
