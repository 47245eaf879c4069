/* The backend calls of counting semaphores: one script on the one node.
 * (A semaphore over several masters would need a quorum per permit; not
 * offered: dsem_init refuses such a client with ENOTSUP.) */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "keys.h"
#include "base/log.h"
#include "node.h"
#include "backend/redis/scripts/scripts.h"
#include "sync.h"

void
dmutex__redis_sem_channel(struct dmutex__backend *be, const char *name, char *out)
{
	dmutex__key(out, be->cfg.prefix, "semwake", name);
}

/* One script call, by deadline too if it comes first (0: none); 0 and
 * *out, an integer from lo to hi (each script's answers), or EIO (logged)
 * and, if maybe_done is not NULL, whether the script may have run all the
 * same. */
static int
call(struct dmutex__backend *be, const char *name, const char *what, int script, int nkeys,
		int argc, const char **argv, long long lo, long long hi, long long *out,
		int *maybe_done, int64_t deadline)
{
	int md = 0, err = EIO;
	redisReply *r = dmutex__node_call_within(&be->nodes[0], script, nkeys, argc, argv, &md, deadline);

	if (maybe_done)
		*maybe_done = r || md == 1;
	if (r && !dmutex__int_in(r, lo, hi, out)) {
		err = 0;
		if (maybe_done)
			*maybe_done = 0;
	} else if (r) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: %s of semaphore '%s': %s", be->nodes[0].addr->display,
				what, name, r->type == REDIS_REPLY_ERROR ? r->str
				: "unexpected reply (shape, or a number out of range)");
	} else {
		dmutex__log(DMUTEX_LOG_ERROR, "%s of semaphore '%s': the backend did not answer", what, name);
	}
	if (r)
		freeReplyObject(r);
	return err;
}

int
dmutex__redis_sem_create(struct dmutex__backend *be, const char *name, unsigned value, int flags,
		int *created)
{
	char k[DMUTEX__KEY_MAX], v[16];
	long long r;
	int err;

	dmutex__key(k, be->cfg.prefix, "sem", name);
	snprintf(v, sizeof v, "%u", value);
	const char *argv[] = { k, v, flags & DSEM_EXCL ? "1" : flags & DSEM_NOCREATE ? "2" : "0" };
	if ((err = call(be, name, "init", DMUTEX__SCRIPT_SEM_INIT, 1, 3, argv, -2, 1, &r, NULL, 0)))
		return err;
	*created = (int)r;
	return 0;
}

static int
op(struct dmutex__backend *be, const char *name, unsigned init, const char *what,
		const char *code, struct dmutex__op *o, long long lo, long long hi,
		long long *out)
{
	char k[DMUTEX__KEY_MAX], ok[DMUTEX__SEM_OPKEY_MAX], ch[DMUTEX__KEY_MAX];
	char v[16], max[16], window[16], deadline[24];
	int err;

	dmutex__key(k, be->cfg.prefix, "sem", name);
	snprintf(ok, sizeof ok, "%ssemop:{%s}:%s", be->cfg.prefix, name, o->token);
	dmutex__redis_sem_channel(be, name, ch);
	snprintf(v, sizeof v, "%u", init);
	snprintf(max, sizeof max, "%u", DSEM_VALUE_MAX);
	snprintf(window, sizeof window, "%u", o->window_ms);
	snprintf(deadline, sizeof deadline, "%lld", o->deadline_ms);
	const char *argv[] = { k, ok, code, v, max, ch, window, deadline };
	if ((err = call(be, name, what, DMUTEX__SCRIPT_SEM_OP, 2, 8, argv, DMUTEX__OP_REFUSED, hi, out,
			&o->maybe_done, o->until)))
		return err;
	/* Refused only a retry, which carries a deadline. */
	if (*out == DMUTEX__OP_REFUSED ? !o->deadline_ms : *out < lo) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: %s of semaphore '%s': unexpected reply (%lld)",
				be->nodes[0].addr->display, what, name, *out);
		o->maybe_done = 1;      /* the script ran */
		return EIO;
	}
	return 0;
}

int
dmutex__redis_sem_take(struct dmutex__backend *be, const char *name, unsigned init,
		struct dmutex__op *o, long long *taken)
{
	return op(be, name, init, "wait", "t", o, 0, 1, taken);
}

int
dmutex__redis_sem_post(struct dmutex__backend *be, const char *name, unsigned init,
		struct dmutex__op *o, long long *value)
{
	/* The new value, or -1 at the maximum. */
	return op(be, name, init, "post", "p", o, -1, DSEM_VALUE_MAX, value);
}

int
dmutex__redis_sem_time(struct dmutex__backend *be, const char *name, long long *ms)
{
	char k[DMUTEX__KEY_MAX];

	dmutex__key(k, be->cfg.prefix, "sem", name);
	const char *argv[] = { k, "t", "0" };
	return call(be, name, "time", DMUTEX__SCRIPT_SEM_GET, 1, 3, argv, 1, LLONG_MAX, ms, NULL, 0);
}

int
dmutex__redis_sem_get(struct dmutex__backend *be, const char *name, unsigned init,
		long long *value)
{
	char k[DMUTEX__KEY_MAX], v[16];

	dmutex__key(k, be->cfg.prefix, "sem", name);
	snprintf(v, sizeof v, "%u", init);
	const char *argv[] = { k, "g", v };
	return call(be, name, "getvalue", DMUTEX__SCRIPT_SEM_GET, 1, 3, argv, 0,
			DSEM_VALUE_MAX, value, NULL, 0);
}

int
dmutex__redis_sem_unlink(struct dmutex__backend *be, const char *name, int *existed)
{
	char k[DMUTEX__KEY_MAX];
	long long r;
	int err;

	dmutex__key(k, be->cfg.prefix, "sem", name);
	const char *argv[] = { k, "u", "0" };
	if ((err = call(be, name, "unlink", DMUTEX__SCRIPT_SEM_GET, 1, 3, argv, 0, 1, &r, NULL, 0)))
		return err;
	*existed = r > 0;
	return 0;
}
