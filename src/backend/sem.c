/* The backend calls of counting semaphores: one script on the one node.
 * (A semaphore over several masters would need a quorum per permit; not
 * offered: dsem_init refuses such a client with ENOTSUP.) */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "keys.h"
#include "node.h"
#include "scripts.h"
#include "sem.h"

/* How long a take's or post's result is kept for a retry of the same
 * call: far longer than any retry takes. */
#define OP_TTL_MS "60000"

void
dmutex__sem_channel_of(const struct dmutex__sem *sx, char *out)
{
	dmutex__key(out, sx->client->cfg.prefix, "semwake", sx->name);
}

/* One script call; 0 and *out, an integer from lo to hi (each script's
 * answers), or EIO (logged). */
static int
call(struct dmutex_client *c, const char *name, const char *what, int script, int nkeys,
		int argc, const char **argv, long long lo, long long hi, long long *out)
{
	struct dmutex__backend *be = c->be;
	int md = 0, err = EIO;
	redisReply *r = dmutex__node_call(&be->nodes[0], script, nkeys, argc, argv, &md);

	if (r && !dmutex__int_in(r, lo, hi, out)) {
		err = 0;
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
dmutex__sem_create(struct dmutex_client *c, const char *name, unsigned value, int flags,
		int *created)
{
	char k[DMUTEX__KEY_MAX], v[16];
	long long r;
	int err;

	dmutex__key(k, c->cfg.prefix, "sem", name);
	snprintf(v, sizeof v, "%u", value);
	const char *argv[] = { k, v, flags & DSEM_EXCL ? "1" : flags & DSEM_NOCREATE ? "2" : "0" };
	if ((err = call(c, name, "init", DMUTEX__SCRIPT_SEM_INIT, 1, 3, argv, -2, 1, &r)))
		return err;
	*created = (int)r;
	return 0;
}

static int
op(struct dmutex__sem *sx, const char *what, const char *code, const char *token,
		long long lo, long long hi, long long *out)
{
	char k[DMUTEX__KEY_MAX], ok[DMUTEX__SEM_OPKEY_MAX], ch[DMUTEX__KEY_MAX];
	char v[16], max[16];

	dmutex__key(k, sx->client->cfg.prefix, "sem", sx->name);
	snprintf(ok, sizeof ok, "%ssemop:{%s}:%s", sx->client->cfg.prefix, sx->name, token);
	dmutex__sem_channel_of(sx, ch);
	snprintf(v, sizeof v, "%u", sx->value);
	snprintf(max, sizeof max, "%u", DSEM_VALUE_MAX);
	const char *argv[] = { k, ok, code, v, max, ch, OP_TTL_MS };
	return call(sx->client, sx->name, what, DMUTEX__SCRIPT_SEM_OP, 2, 7, argv, lo, hi, out);
}

int
dmutex__sem_take(struct dmutex__sem *sx, const char *token, int *taken)
{
	long long r;
	int err = op(sx, "wait", "t", token, 0, 1, &r);

	if (!err)
		*taken = r == 1;
	return err;
}

int
dmutex__sem_post(struct dmutex__sem *sx, const char *token, long long *value)
{
	/* The new value, or -1 at the maximum. */
	return op(sx, "post", "p", token, -1, DSEM_VALUE_MAX, value);
}

int
dmutex__sem_get(struct dmutex__sem *sx, long long *value)
{
	char k[DMUTEX__KEY_MAX], v[16];

	dmutex__key(k, sx->client->cfg.prefix, "sem", sx->name);
	snprintf(v, sizeof v, "%u", sx->value);
	const char *argv[] = { k, "g", v };
	return call(sx->client, sx->name, "getvalue", DMUTEX__SCRIPT_SEM_GET, 1, 3, argv, 0,
			DSEM_VALUE_MAX, value);
}

int
dmutex__sem_unlink(struct dmutex_client *c, const char *name, int *existed)
{
	char k[DMUTEX__KEY_MAX];
	long long r;
	int err;

	dmutex__key(k, c->cfg.prefix, "sem", name);
	const char *argv[] = { k, "u", "0" };
	if ((err = call(c, name, "unlink", DMUTEX__SCRIPT_SEM_GET, 1, 3, argv, 0, 1, &r)))
		return err;
	*existed = r > 0;
	return 0;
}
