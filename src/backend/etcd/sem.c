/*
 * Counting semaphores over etcd (prims.h has the keys): the value key
 * holds "FREE INIT"; take and post are read-modify-writes whose results
 * are kept for the retry window, as sem_op.lua keeps them in Redis.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/etcd/prims.h"
#include "base/log.h"

static void
keys(struct dmutex__etcd *e, const char *name, const char *token, char *v, char *op)
{
	dmutex__etcd_name_key(e, v, "s", name, "v");
	if (op) {
		char part[DMUTEX__TOKEN_HEX + 4];
		snprintf(part, sizeof part, "o/%s", token);
		dmutex__etcd_name_key(e, op, "s", name, part);
	}
}

/* "FREE INIT" into *free; 0, or EIO (logged) if it is not ours. */
static int
parse(const char *name, const char *val, long long *free_permits)
{
	long long f, init;
	char tail;

	if (sscanf(val, "%lld %lld%c", &f, &init, &tail) != 2 || f < 0 || f > DSEM_VALUE_MAX) {
		dmutex__log(DMUTEX_LOG_ERROR, "etcd: semaphore '%s' holds data dmutex did not write", name);
		return EIO;
	}
	*free_permits = f;
	return 0;
}

struct sem_arg {
	const char *name;
	unsigned init;
	int take;
};

/* take: "1" with one permit fewer, or "0" changing nothing (not kept);
 * post: the new value, or "-1" at DSEM_VALUE_MAX.  A missing semaphore
 * is made afresh with the creator's value, as in Redis. */
static int
sem_apply(void *arg, const char *cur, char *nv, char *res, int *keep)
{
	struct sem_arg *a = arg;
	long long v = a->init;
	int err;

	if (cur && (err = parse(a->name, cur, &v)))
		return err;
	if (a->take) {
		*keep = v > 0;
		snprintf(res, DMUTEX__ETCD_VAL_MAX, "%d", v > 0);
		if (v > 0 || !cur)
			snprintf(nv, DMUTEX__ETCD_VAL_MAX, "%lld %u", v > 0 ? v - 1 : v, a->init);
	} else if (v >= DSEM_VALUE_MAX) {
		snprintf(res, DMUTEX__ETCD_VAL_MAX, "-1");
		if (!cur)
			snprintf(nv, DMUTEX__ETCD_VAL_MAX, "%lld %u", v, a->init);
	} else {
		snprintf(res, DMUTEX__ETCD_VAL_MAX, "%lld", v + 1);
		snprintf(nv, DMUTEX__ETCD_VAL_MAX, "%lld %u", v + 1, a->init);
	}
	return 0;
}

static int
op(struct dmutex__backend *be, const char *name, unsigned init, int take,
		struct dmutex__op *o, long long lo, long long hi, long long *out)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	char k[DMUTEX__ETCD_KEY_MAX], ok[DMUTEX__ETCD_KEY_MAX], res[DMUTEX__ETCD_VAL_MAX];
	struct sem_arg a = { name, init, take };
	int refused, err;

	keys(e, name, o->token, k, ok);
	if ((err = dmutex__etcd_rmw(e, k, ok, o, sem_apply, &a, res, &refused)))
		return err;
	if (refused) {
		*out = DMUTEX__OP_REFUSED;
		return 0;
	}
	char *end;
	*out = strtoll(res, &end, 10);
	if (*end || *out < lo || *out > hi) {
		dmutex__log(DMUTEX_LOG_ERROR, "etcd: %s of semaphore '%s': unexpected result '%s'",
				take ? "wait" : "post", name, res);
		o->maybe_done = 1;      /* it ran */
		return EIO;
	}
	return 0;
}

int
dmutex__etcd_sem_take(struct dmutex__backend *be, const char *name, unsigned init,
		struct dmutex__op *o, long long *taken)
{
	return op(be, name, init, 1, o, 0, 1, taken);
}

int
dmutex__etcd_sem_post(struct dmutex__backend *be, const char *name, unsigned init,
		struct dmutex__op *o, long long *value)
{
	return op(be, name, init, 0, o, -1, DSEM_VALUE_MAX, value);
}

int
dmutex__etcd_sem_create(struct dmutex__backend *be, const char *name, unsigned value, int flags,
		int *created)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	char k[DMUTEX__ETCD_KEY_MAX], v[DMUTEX__ETCD_VAL_MAX], cur[DMUTEX__ETCD_VAL_MAX];
	int r;

	keys(e, name, NULL, k, NULL);
	if (flags & DSEM_NOCREATE) {
		r = dmutex__etcd_get(e, k, cur);
		if (r < 0)
			return -r;
		*created = r ? 0 : -2;
		return 0;
	}
	snprintf(v, sizeof v, "%u %u", value, value);
	if ((r = dmutex__etcd_create(e, k, v, cur)) < 0)
		return -r;
	*created = r ? 1 : flags & DSEM_EXCL ? -1 : 0;
	return 0;
}

int
dmutex__etcd_sem_time(struct dmutex__backend *be, const char *name, long long *ms)
{
	(void)be, (void)name;
	return dmutex__etcd_time_ms(ms);
}

int
dmutex__etcd_sem_get(struct dmutex__backend *be, const char *name, unsigned init,
		long long *value)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	char k[DMUTEX__ETCD_KEY_MAX], cur[DMUTEX__ETCD_VAL_MAX];
	int r;

	keys(e, name, NULL, k, NULL);
	if ((r = dmutex__etcd_get(e, k, cur)) < 0)
		return -r;
	if (!r) {
		*value = init;  /* as the next take would make it */
		return 0;
	}
	return parse(name, cur, value);
}

int
dmutex__etcd_sem_unlink(struct dmutex__backend *be, const char *name, int *existed)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	char k[DMUTEX__ETCD_KEY_MAX];
	int r;

	keys(e, name, NULL, k, NULL);
	if ((r = dmutex__etcd_delete(e, k)) < 0)
		return -r;
	*existed = r;
	return 0;
}

void
dmutex__etcd_sem_channel(struct dmutex__backend *be, const char *name, char *out)
{
	char k[DMUTEX__ETCD_KEY_MAX];

	keys(dmutex__etcd_of(be), name, NULL, k, NULL);
	/* prefix, name and kind fit in DMUTEX__KEY_MAX with room for "k:" */
	if (snprintf(out, DMUTEX__KEY_MAX, "k:%s", k) >= DMUTEX__KEY_MAX)
		out[0] = '\0';
}
