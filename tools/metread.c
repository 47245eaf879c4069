/*
 * The per-lock counters every process added to Redis (src/core/metrics.h): the
 * busiest names one by one and the rest summed, so that a million names
 * cost a scrape only `top` rows.  metrics and top read through here.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void
hash_into(const redisReply *r, uint64_t v[DMUTEX__MET_NFIELDS])
{
	memset(v, 0, DMUTEX__MET_NFIELDS * sizeof *v);
	if (!r || r->type != REDIS_REPLY_ARRAY)
		return;
	for (size_t i = 0; i + 1 < r->elements; i += 2) {
		if (r->element[i]->type != REDIS_REPLY_STRING ||
		    r->element[i + 1]->type != REDIS_REPLY_STRING)
			continue;
		for (int f = 0; f < DMUTEX__MET_NFIELDS; f++)
			if (!strcmp(r->element[i]->str, dmutex__admin_met_field(f)))
				v[f] = strtoull(r->element[i + 1]->str, NULL, 10);
	}
}

static int
failed(struct dmutex__conn *c)
{
	const char *why = dmutex__admin_conn_error(c);

	cli_err("backend failed: %s", *why ? why : "connection lost");
	return CLI_BACKEND;
}

int
cli_metrics_read(struct dmutex__conn *c, const char *prefix, size_t top, struct cli_metrics *out)
{
	char key[DMUTEX__ADMIN_MET_KEY_MAX];
	int64_t deadline = dmutex__conn_deadline(c);
	redisReply *idx, *tot;
	uint64_t total[DMUTEX__MET_NFIELDS];
	size_t n;
	int status = 0;

	memset(out, 0, sizeof *out);
	dmutex__admin_met_key(key, prefix, "index", NULL);
	if (!(idx = dmutex__conn_command(c, deadline, "ZREVRANGE %b 0 %lld", key, strlen(key),
			(long long)top - 1)))
		return failed(c);
	dmutex__admin_met_key(key, prefix, "total", NULL);
	if (!(tot = dmutex__conn_command(c, deadline, "HGETALL %b", key, strlen(key)))) {
		freeReplyObject(idx);
		return failed(c);
	}
	if (idx->type == REDIS_REPLY_ERROR || tot->type == REDIS_REPLY_ERROR) {
		cli_err("cannot read the counters: %s",
				idx->type == REDIS_REPLY_ERROR ? idx->str : tot->str);
		status = CLI_BACKEND;
		goto out;
	}
	/* A member that is not a string (a broken or hostile server) names no
	 * counters: refused, as any reply of the wrong shape. */
	for (size_t i = 0; idx->type == REDIS_REPLY_ARRAY && i < idx->elements; i++)
		if (idx->element[i]->type != REDIS_REPLY_STRING) {
			cli_err("cannot read the counters: the index holds a member that is not a string");
			status = CLI_BACKEND;
			goto out;
		}
	hash_into(tot, total);
	n = idx->type == REDIS_REPLY_ARRAY && top ? idx->elements : 0;
	if (!(out->sets = calloc(n + 1, sizeof *out->sets))) {
		cli_err("out of memory");
		status = CLI_INTERNAL;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		dmutex__admin_met_key(key, prefix, "n:", idx->element[i]->str);
		if (dmutex__conn_appendf(c, "HGETALL %b", key, strlen(key))) {
			status = failed(c);
			goto out;
		}
	}
	for (size_t i = 0; i < n; i++) {
		void *r = NULL;
		struct cli_metset *s = &out->sets[out->n];
		if (dmutex__conn_get(c, &r, deadline)) {
			status = failed(c);
			goto out;
		}
		hash_into(r, s->v);
		/* Expired (idle for idle_ms) and not yet out of the index
		 * (src/backend/redis/counters.h): nothing to show. */
		int empty = !r || ((redisReply *)r)->type != REDIS_REPLY_ARRAY || !((redisReply *)r)->elements;
		freeReplyObject(r);
		if (empty)
			continue;
		if (!(s->name = strdup(idx->element[i]->str))) {
			cli_err("out of memory");
			status = CLI_INTERNAL;
			goto out;
		}
		out->n++;
		for (int f = 0; f < DMUTEX__MET_NFIELDS; f++)
			total[f] -= total[f] >= s->v[f] ? s->v[f] : total[f];
	}
	/* The names past the top, summed: present when there are any. */
	for (int f = 0; f < DMUTEX__MET_NFIELDS; f++)
		if (total[f]) {
			struct cli_metset *s = &out->sets[out->n++];
			s->other = 1;
			memcpy(s->v, total, sizeof total);
			break;
		}
out:
	freeReplyObject(idx);
	freeReplyObject(tot);
	if (status)
		cli_metrics_free(out);
	return status;
}

void
cli_metrics_free(struct cli_metrics *m)
{
	for (size_t i = 0; i < m->n; i++)
		free(m->sets[i].name);
	free(m->sets);
	memset(m, 0, sizeof *m);
}
