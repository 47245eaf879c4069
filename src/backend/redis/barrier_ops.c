/* The backend calls of barriers: one script on the one node. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <limits.h>

#include "common.h"
#include "keys.h"
#include "base/log.h"
#include "node.h"
#include "backend/redis/scripts/scripts.h"
#include "sync.h"

void
dmutex__redis_barrier_channel(struct dmutex__backend *be, const char *name, char *out)
{
	dmutex__key(out, be->cfg.prefix, "barwake", name);
}

/* The numbers a script answers: one integer (n 1) or an array of two
 * (n 2), each from range[i][0] to range[i][1]. */
struct want {
	int n;
	long long range[2][2];
};

/* One script call; the numbers in out[], or EIO (logged) and, if
 * maybe_done is not NULL, whether the script may have run all the same. */
static int
call(struct dmutex__backend *be, const char *name, const char *what, int script, int nkeys,
		int argc, const char **argv, const struct want *w, long long *out, int *maybe_done)
{
	int md = 0;
	redisReply *r = dmutex__node_call(&be->nodes[0], script, nkeys, argc, argv, &md);

	if (maybe_done)
		*maybe_done = r || md == 1;
	if (r && (w->n == 1 ? !dmutex__int_in(r, w->range[0][0], w->range[0][1], &out[0])
			: r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
			!dmutex__int_elem_in(r, 0, w->range[0][0], w->range[0][1], &out[0]) &&
			!dmutex__int_elem_in(r, 1, w->range[1][0], w->range[1][1], &out[1]))) {
		freeReplyObject(r);
		if (maybe_done)
			*maybe_done = 0;
		return 0;
	}
	if (r)
		dmutex__log(DMUTEX_LOG_ERROR, "%s: %s of barrier '%s': %s", be->nodes[0].addr->display,
				what, name, r->type == REDIS_REPLY_ERROR ? r->str
				: "unexpected reply (shape, or a number out of range)");
	else
		dmutex__log(DMUTEX_LOG_ERROR, "%s of barrier '%s': the backend did not answer", what, name);
	if (r)
		freeReplyObject(r);
	return EIO;
}

int
dmutex__redis_barrier_create(struct dmutex__backend *be, const char *name, unsigned count,
		long long *other)
{
	/* 1 created, 0 joined, -N: it exists with count N (1 .. INT_MAX). */
	static const struct want w = { 1, { { -INT_MAX, 1 } } };
	char k[DMUTEX__KEY_MAX], n[16];
	long long v;
	int err;

	dmutex__key(k, be->cfg.prefix, "barrier", name);
	snprintf(n, sizeof n, "%u", count);
	const char *argv[] = { k, n };
	if ((err = call(be, name, "init", DMUTEX__SCRIPT_BARRIER_INIT, 1, 2, argv, &w, &v, NULL)))
		return err;
	*other = v < 0 ? -v : 0;
	return 0;
}

static int
wait_call(struct dmutex__backend *be, const char *name, unsigned count, const char *what,
		const char *op, struct dmutex__op *o, long long *gen, int *serial)
{
	/* { generation (a counter: never negative; -1 a retry refused),
	 *   serial (0 or 1) } */
	static const struct want w = { 2, { { DMUTEX__OP_REFUSED_GEN, LLONG_MAX }, { 0, 1 } } };
	char k[DMUTEX__KEY_MAX], ok[DMUTEX__BARRIER_OPKEY_MAX], ch[DMUTEX__KEY_MAX], n[16];
	char window[16], deadline[24];
	long long v[2];
	int err;

	dmutex__key(k, be->cfg.prefix, "barrier", name);
	snprintf(ok, sizeof ok, "%sbarop:{%s}:%s", be->cfg.prefix, name, o ? o->token : "-");
	dmutex__redis_barrier_channel(be, name, ch);
	snprintf(n, sizeof n, "%u", count);
	snprintf(window, sizeof window, "%u", o ? o->window_ms : 0);
	snprintf(deadline, sizeof deadline, "%lld", o ? o->deadline_ms : 0);
	const char *argv[] = { k, ok, op, n, ch, window, deadline };
	if ((err = call(be, name, what, DMUTEX__SCRIPT_BARRIER_WAIT, 2, 7, argv, &w, v,
			o ? &o->maybe_done : NULL)))
		return err;
	/* Refused only an arrival retried, which carries a deadline. */
	if (v[0] == DMUTEX__OP_REFUSED_GEN && (*op != 'a' || !o->deadline_ms || v[1])) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: %s of barrier '%s': unexpected reply (%lld, %lld)",
				be->nodes[0].addr->display, what, name, v[0], v[1]);
		if (o)
			o->maybe_done = 1;      /* the script ran */
		return EIO;
	}
	*gen = v[0];
	*serial = v[1] == 1;
	return 0;
}

int
dmutex__redis_barrier_arrive(struct dmutex__backend *be, const char *name, unsigned count,
		struct dmutex__op *o, long long *gen, int *serial)
{
	return wait_call(be, name, count, "wait", "a", o, gen, serial);
}

int
dmutex__redis_barrier_gen(struct dmutex__backend *be, const char *name, unsigned count,
		long long *gen)
{
	int serial;

	return wait_call(be, name, count, "check", "g", NULL, gen, &serial);
}

int
dmutex__redis_barrier_time(struct dmutex__backend *be, const char *name, unsigned count,
		long long *ms)
{
	int err, serial;

	if (!(err = wait_call(be, name, count, "time", "t", NULL, ms, &serial)) && *ms < 1) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: time of barrier '%s': unexpected reply (%lld)",
				be->nodes[0].addr->display, name, *ms);
		return EIO;
	}
	return err;
}
