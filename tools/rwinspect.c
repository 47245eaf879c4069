/*
 * What Redis holds about one read-write lock (src/core/rwlock.h): the
 * state hash (the writer's token and lease end, the last fencing token),
 * the read shares and the waiting writers' intents, both sorted sets
 * scored by lease end.  Leases live inside the keys as server times, so
 * the server's clock (TIME) is read first: a share or writer whose lease
 * ended is still there until the next lock call sweeps it, and holds
 * nothing.
 */
#define NREPLIES 6
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int
connection_failed(struct dmutex__conn *c)
{
	const char *why = dmutex__admin_conn_error(c);

	cli_err("backend failed: %s", *why ? why : "connection lost");
	return CLI_BACKEND;
}

int
cli_rw_time(struct dmutex__conn *c, long long *now_ms)
{
	redisReply *r = dmutex__conn_command(c, dmutex__conn_deadline(c), "TIME");
	int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
		r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING;

	if (!r)
		return connection_failed(c);
	if (ok)
		*now_ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
	else
		cli_err("backend refused TIME: %s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
	freeReplyObject(r);
	return ok ? 0 : CLI_BACKEND;
}

int
cli_rw_append(struct dmutex__conn *c, const char *prefix, const char *name, long long now_ms)
{
	char h[DMUTEX__ADMIN_KEY_MAX], rd[DMUTEX__ADMIN_KEY_MAX], q[DMUTEX__ADMIN_KEY_MAX];
	char after[32];

	dmutex__admin_key(h, prefix, "rw", name);
	dmutex__admin_key(rd, prefix, "rwr", name);
	dmutex__admin_key(q, prefix, "rwq", name);
	/* Exclusive: a lease ending now has ended (rw_acquire.lua sweeps <= now). */
	snprintf(after, sizeof after, "(%lld", now_ms);
	if (dmutex__conn_appendf(c, "HGETALL %b", h, strlen(h)) ||
	    dmutex__conn_appendf(c, "ZCOUNT %b %s +inf", rd, strlen(rd), after) ||
	    dmutex__conn_appendf(c, "ZRANGE %b -1 -1 WITHSCORES", rd, strlen(rd)) ||
	    dmutex__conn_appendf(c, "ZCARD %b", rd, strlen(rd)) ||
	    dmutex__conn_appendf(c, "ZCOUNT %b %s +inf", q, strlen(q), after) ||
	    dmutex__conn_appendf(c, "ZCARD %b", q, strlen(q)))
		return connection_failed(c);
	return 0;
}

/* A hash reply's field, or NULL. */
static const char *
field(const redisReply *r, const char *name)
{
	for (size_t i = 0; i + 1 < r->elements; i += 2)
		if (r->element[i]->type == REDIS_REPLY_STRING && !strcmp(r->element[i]->str, name) &&
		    r->element[i + 1]->type == REDIS_REPLY_STRING)
			return r->element[i + 1]->str;
	return NULL;
}

/* A whole non-negative decimal number, or -1. */
static long long
num(const char *s)
{
	char *end;
	long long v;

	if (!s || *s < '0' || *s > '9')
		return -1;
	v = strtoll(s, &end, 10);
	return *end ? -1 : v;
}

/* Who writes, from 'wo': "token since_ms pid tid hostid host"
 * (rw_acquire.lua).  Shown only under the writer's own token: a client
 * that records none leaves an older writer's record behind.  A record
 * that does not parse is shown as none, as an older client's is; the
 * lock itself is still read right. */
static void
writer_of(struct cli_rwlock *rw, const char *w, const char *wo)
{
	size_t tl = strlen(w);
	long long since, pid, tid;
	char hostid[64];
	int at = 0;

	if (!wo || strncmp(wo, w, tl) || wo[tl] != ' ')
		return;
	if (sscanf(wo + tl + 1, "%lld %lld %lld %63s %n", &since, &pid, &tid, hostid, &at) < 4 ||
	    !at || !wo[tl + 1 + at] || since < 0 || pid <= 0 || tid < 0)
		return;
	snprintf(rw->writer_host, sizeof rw->writer_host, "%s", wo + tl + 1 + at);
	snprintf(rw->writer_hostid, sizeof rw->writer_hostid, "%s", strcmp(hostid, "-") ? hostid : "");
	rw->writer_since_ms = since;
	rw->writer_pid = pid;
	rw->writer_tid = tid;
	rw->writer_alive = cli_pid_alive(rw->writer_hostid, pid);
}

/* The state hash: 0, or -1 with rw->error set when it is not one
 * rw_acquire.lua writes (it always sets fms and fseq with a writer). */
static int
state_of(struct cli_rwlock *rw, const char *key, const redisReply *h, long long now)
{
	const char *w = field(h, "w");
	long long wexp = num(field(h, "wexp")), fms = num(field(h, "fms"));
	long long fseq = num(field(h, "fseq"));

	if (!h->elements)
		return 0;
	if (fms < 0 || fseq < 0 || fseq >= 1 << 20 || fms >= 1LL << 43 || (w && wexp < 0)) {
		snprintf(rw->error, sizeof rw->error, "%.80s: not a value dmutex writes", key);
		return -1;
	}
	rw->has_writer = w != NULL;
	rw->fence = fms << 20 | fseq;
	rw->writing = w && wexp > now;
	if (rw->writing) {
		rw->write_left_ms = wexp - now;
		writer_of(rw, w, field(h, "wo"));
	}
	return 0;
}

static long long
integer(const redisReply *r)
{
	return r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
}

static void
fill(struct cli_rwlock *rw, const char *prefix, long long now, redisReply *const rep[NREPLIES])
{
	static const char *const kind[NREPLIES] = { "rw", "rwr", "rwr", "rwr", "rwq", "rwq" };
	const redisReply *last = rep[2];
	char key[DMUTEX__ADMIN_KEY_MAX];

	/* Someone else's data under our key names: say which key, never guess. */
	for (int i = 0; i < NREPLIES; i++) {
		if (rep[i]->type != REDIS_REPLY_ERROR)
			continue;
		dmutex__admin_key(key, prefix, kind[i], rw->name);
		snprintf(rw->error, sizeof rw->error, "%.80s: %.160s", key, rep[i]->str);
		return;
	}
	dmutex__admin_key(key, prefix, "rw", rw->name);
	if (rep[0]->type != REDIS_REPLY_ARRAY || state_of(rw, key, rep[0], now))
		return;
	rw->readers = integer(rep[1]);
	rw->shares_kept = integer(rep[3]);
	rw->writers_waiting = integer(rep[4]);
	rw->intents_kept = integer(rep[5]);
	if (rw->readers > 0 && last->type == REDIS_REPLY_ARRAY && last->elements == 2 &&
	    last->element[1]->type == REDIS_REPLY_STRING)
		rw->read_left_ms = (long long)strtod(last->element[1]->str, NULL) - now;
	rw->exists = rep[0]->elements > 0 || rw->shares_kept > 0 || rw->intents_kept > 0;
}

int
cli_rw_read(struct dmutex__conn *c, const char *prefix, const char *name, long long now_ms,
		struct cli_rwlock *rw)
{
	redisReply *rep[NREPLIES] = { NULL };
	int64_t deadline = dmutex__conn_deadline(c);   /* for all of them together */
	int status = 0;

	memset(rw, 0, sizeof *rw);
	cli_rwlock_unknown(rw);
	if (!(rw->name = strdup(name))) {
		cli_err("out of memory");
		status = CLI_INTERNAL;
	}
	/* Read them all even after a failure, to keep the pipeline in step. */
	for (int i = 0; i < NREPLIES; i++) {
		void *r = NULL;
		if (dmutex__conn_get(c, &r, deadline)) {
			status = connection_failed(c);
			break;
		}
		rep[i] = r;
	}
	if (!status)
		fill(rw, prefix, now_ms, rep);
	for (int i = 0; i < NREPLIES; i++)
		if (rep[i])
			freeReplyObject(rep[i]);
	return status;
}

int
cli_rw_inspect(struct dmutex__conn *c, const char *prefix, const char *name, struct cli_rwlock *rw)
{
	long long now;
	int status;

	memset(rw, 0, sizeof *rw);
	if ((status = cli_rw_time(c, &now)) || (status = cli_rw_append(c, prefix, name, now)))
		return status;
	return cli_rw_read(c, prefix, name, now, rw);
}

void
cli_rwlock_unknown(struct cli_rwlock *rw)
{
	rw->write_left_ms = rw->read_left_ms = rw->fence = -1;
	rw->writer_pid = rw->writer_tid = rw->writer_since_ms = -1;
	rw->writer_alive = -1;
}

void
cli_rwlock_free(struct cli_rwlock *rw)
{
	free(rw->name);
	rw->name = NULL;
}
