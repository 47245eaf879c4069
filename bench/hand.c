/*
 * The minimal correct single-server lock cycle, by hand with hiredis: take
 * with SET k token NX PX (a fresh random token per hold), release with a
 * compare-and-delete script by EVALSHA.  Nothing a correct lock can skip.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

static const char cad_lua[] =
	"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";

int
hand_init(struct hand *h, const struct bench *b, const char *what)
{
	redisReply *r;

	memset(h, 0, sizeof *h);
	if (!(h->c = bench_connect(&b->tgt)))
		return -1;
	r = bench_cmd(h->c, "SCRIPT LOAD %s", cad_lua);
	if (r->type != REDIS_REPLY_STRING) {
		fprintf(stderr, "bench: SCRIPT LOAD failed\n");
		freeReplyObject(r);
		hand_fini(h);
		return -1;
	}
	snprintf(h->sha, sizeof h->sha, "%s", r->str);
	freeReplyObject(r);
	snprintf(h->key, sizeof h->key, "%s:hand:%s", b->run_id, what);
	return 0;
}

int
hand_cycle(struct hand *h)
{
	char tok[33];
	redisReply *r;
	int ok;

	bench_token(tok);
	r = bench_cmd(h->c, "SET %s %s NX PX 10000", h->key, tok);
	ok = r->type == REDIS_REPLY_STATUS;
	freeReplyObject(r);
	r = bench_cmd(h->c, "EVALSHA %s 1 %s %s", h->sha, h->key, tok);
	ok = ok && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
	freeReplyObject(r);
	return ok ? 0 : -1;
}

void
hand_fini(struct hand *h)
{
	if (h->c)
		redisFree(h->c);
	h->c = NULL;
}
