/* The backend calls of barriers: one script on the one node. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "barrier.h"
#include "keys.h"
#include "node.h"
#include "scripts.h"

#define OP_TTL_MS "60000"

void
dmutex__barrier_channel(const struct dmutex__barrier *bx, char *out)
{
	dmutex__key(out, bx->client->cfg.prefix, "barwake", bx->name);
}

/* One script call; the reply in *out (caller frees), or EIO (logged). */
static int
call(struct dmutex_client *c, const char *name, const char *what, int script, int nkeys,
		int argc, const char **argv, int want_array, redisReply **out)
{
	struct dmutex__backend *be = c->be;
	int md = 0;
	redisReply *r = dmutex__node_call(&be->nodes[0], script, nkeys, argc, argv, &md);

	if (r && (want_array ? r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
			r->element[0]->type == REDIS_REPLY_INTEGER &&
			r->element[1]->type == REDIS_REPLY_INTEGER : r->type == REDIS_REPLY_INTEGER)) {
		*out = r;
		return 0;
	}
	if (r)
		dmutex__log(DMUTEX_LOG_ERROR, "%s: %s of barrier '%s': %s", be->nodes[0].addr->display,
				what, name, r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply shape");
	else
		dmutex__log(DMUTEX_LOG_ERROR, "%s of barrier '%s': the backend did not answer", what, name);
	if (r)
		freeReplyObject(r);
	return EIO;
}

int
dmutex__barrier_create(struct dmutex_client *c, const char *name, unsigned count,
		long long *other)
{
	char k[DMUTEX__KEY_MAX], n[16];
	redisReply *r;
	int err;

	dmutex__key(k, c->cfg.prefix, "barrier", name);
	snprintf(n, sizeof n, "%u", count);
	const char *argv[] = { k, n };
	if ((err = call(c, name, "init", DMUTEX__SCRIPT_BARRIER_INIT, 1, 2, argv, 0, &r)))
		return err;
	*other = r->integer < 0 ? -r->integer : 0;
	freeReplyObject(r);
	return 0;
}

static int
wait_call(struct dmutex__barrier *bx, const char *what, const char *op, const char *token,
		long long *gen, int *serial)
{
	char k[DMUTEX__KEY_MAX], ok[DMUTEX__BARRIER_OPKEY_MAX], ch[DMUTEX__KEY_MAX], n[16];
	redisReply *r;
	int err;

	dmutex__key(k, bx->client->cfg.prefix, "barrier", bx->name);
	snprintf(ok, sizeof ok, "%sbarop:{%s}:%s", bx->client->cfg.prefix, bx->name, token);
	dmutex__barrier_channel(bx, ch);
	snprintf(n, sizeof n, "%u", bx->count);
	const char *argv[] = { k, ok, op, n, ch, OP_TTL_MS };
	if ((err = call(bx->client, bx->name, what, DMUTEX__SCRIPT_BARRIER_WAIT, 2, 6, argv, 1, &r)))
		return err;
	*gen = r->element[0]->integer;
	*serial = r->element[1]->integer == 1;
	freeReplyObject(r);
	return 0;
}

int
dmutex__barrier_arrive(struct dmutex__barrier *bx, const char *token, long long *gen,
		int *serial)
{
	return wait_call(bx, "wait", "a", token, gen, serial);
}

int
dmutex__barrier_gen(struct dmutex__barrier *bx, long long *gen)
{
	int serial;

	return wait_call(bx, "check", "g", "-", gen, &serial);
}
