/*
 * Barriers over etcd (prims.h has the keys): the value key holds
 * "COUNT GEN ARRIVED"; an arrival is a read-modify-write whose result
 * "GEN SERIAL" is kept for the retry window, as barrier_wait.lua keeps it
 * in Redis.  The arrival that completes a cycle moves GEN on; every
 * change wakes the waiters, who read GEN.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/etcd/prims.h"
#include "base/log.h"

static void
keys(struct dmutex__etcd *e, const char *name, const char *token, char *v, char *op)
{
	dmutex__etcd_name_key(e, v, "b", name, "v");
	if (op) {
		char part[DMUTEX__TOKEN_HEX + 4];
		snprintf(part, sizeof part, "o/%s", token);
		dmutex__etcd_name_key(e, op, "b", name, part);
	}
}

struct state {
	long long count, gen, arrived;
};

static int
parse(const char *name, const char *val, struct state *s)
{
	char tail;

	if (sscanf(val, "%lld %lld %lld%c", &s->count, &s->gen, &s->arrived, &tail) != 3 ||
	    s->count < 1 || s->gen < 0 || s->arrived < 0) {
		dmutex__log(DMUTEX_LOG_ERROR, "etcd: barrier '%s' holds data dmutex did not write", name);
		return EIO;
	}
	return 0;
}

struct arrive_arg {
	const char *name;
	unsigned count;
};

/* A missing barrier (unlinked, or the data lost) is made afresh with the
 * caller's count, as in Redis. */
static int
arrive_apply(void *arg, const char *cur, char *nv, char *res, int *keep)
{
	struct arrive_arg *a = arg;
	struct state s = { a->count, 0, 0 };
	int err;

	if (cur && (err = parse(a->name, cur, &s)))
		return err;
	*keep = 1;
	if (s.arrived + 1 >= s.count) {
		snprintf(nv, DMUTEX__ETCD_VAL_MAX, "%lld %lld 0", s.count, s.gen + 1);
		snprintf(res, DMUTEX__ETCD_VAL_MAX, "%lld 1", s.gen);
	} else {
		snprintf(nv, DMUTEX__ETCD_VAL_MAX, "%lld %lld %lld", s.count, s.gen, s.arrived + 1);
		snprintf(res, DMUTEX__ETCD_VAL_MAX, "%lld 0", s.gen);
	}
	return 0;
}

int
dmutex__etcd_barrier_create(struct dmutex__backend *be, const char *name, unsigned count,
		long long *other)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	char k[DMUTEX__ETCD_KEY_MAX], v[DMUTEX__ETCD_VAL_MAX], cur[DMUTEX__ETCD_VAL_MAX];
	struct state s;
	int r, err;

	keys(e, name, NULL, k, NULL);
	snprintf(v, sizeof v, "%u 0 0", count);
	if ((r = dmutex__etcd_create(e, k, v, cur)) < 0)
		return -r;
	if (r) {
		*other = 0;
		return 0;
	}
	if ((err = parse(name, cur, &s)))
		return err;
	*other = s.count == count ? 0 : s.count;
	return 0;
}

int
dmutex__etcd_barrier_arrive(struct dmutex__backend *be, const char *name, unsigned count,
		struct dmutex__op *o, long long *gen, int *serial)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	char k[DMUTEX__ETCD_KEY_MAX], ok[DMUTEX__ETCD_KEY_MAX], res[DMUTEX__ETCD_VAL_MAX], tail;
	struct arrive_arg a = { name, count };
	int refused, err, s;

	keys(e, name, o->token, k, ok);
	if ((err = dmutex__etcd_rmw(e, k, ok, o, arrive_apply, &a, res, &refused)))
		return err;
	if (refused) {
		*gen = DMUTEX__OP_REFUSED_GEN;
		*serial = 0;
		return 0;
	}
	if (sscanf(res, "%lld %d%c", gen, &s, &tail) != 2 || *gen < 0 || (s != 0 && s != 1)) {
		dmutex__log(DMUTEX_LOG_ERROR, "etcd: arrival at barrier '%s': unexpected result '%s'",
				name, res);
		o->maybe_done = 1;
		return EIO;
	}
	*serial = s;
	return 0;
}

int
dmutex__etcd_barrier_gen(struct dmutex__backend *be, const char *name, unsigned count,
		long long *gen)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	char k[DMUTEX__ETCD_KEY_MAX], cur[DMUTEX__ETCD_VAL_MAX];
	struct state s;
	int r, err;

	(void)count;
	keys(e, name, NULL, k, NULL);
	if ((r = dmutex__etcd_get(e, k, cur)) < 0)
		return -r;
	if (!r) {
		*gen = 0;
		return 0;
	}
	if ((err = parse(name, cur, &s)))
		return err;
	*gen = s.gen;
	return 0;
}

int
dmutex__etcd_barrier_time(struct dmutex__backend *be, const char *name, unsigned count,
		long long *ms)
{
	(void)be, (void)name, (void)count;
	return dmutex__etcd_time_ms(ms);
}

void
dmutex__etcd_barrier_channel(struct dmutex__backend *be, const char *name, char *out)
{
	char k[DMUTEX__ETCD_KEY_MAX];

	keys(dmutex__etcd_of(be), name, NULL, k, NULL);
	/* prefix, name and kind fit in DMUTEX__KEY_MAX with room for "k:" */
	if (snprintf(out, DMUTEX__KEY_MAX, "k:%s", k) >= DMUTEX__KEY_MAX)
		out[0] = '\0';
}
