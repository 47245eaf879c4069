/*
 * The checks dmutex_client_open makes on each node (check.h).  A confined
 * ACL user (`~dmutex:* +@all` on Redis 7, where channels are denied by
 * default) used to be accepted and then failed at every unlock: better to
 * say at open exactly what the user lacks.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "base/base.h"
#include "base/log.h"
#include "keys.h"
#include "backend/redis/scripts/scripts.h"

static int
noperm(const redisReply *r)
{
	/* Commands: "NOPERM ...".  Inside a script Redis 7 says "ERR The user
	 * executing the script can't ...". */
	return r->type == REDIS_REPLY_ERROR &&
		(!strncmp(r->str, "NOPERM", 6) || strstr(r->str, "user executing the script can't"));
}

static int
refuse(const struct dmutex__node *n, const char *prefix, const char *what, const char *why)
{
	dmutex__log(DMUTEX_LOG_ERROR, "%s: access refused: this user may not %s (Redis: %s); "
			"dmutex needs the ACL rules ~%s* &%s* and the commands listed in "
			"dmutex_client_open(3)", n->addr->display, what, why, prefix, prefix);
	return EACCES;
}

static int
no_answer(const struct dmutex__node *n, struct dmutex__conn *c, const char *what)
{
	dmutex__log(DMUTEX_LOG_ERROR, "%s: %s: %s", n->addr->display, what, c->errstr);
	return EIO;
}

/* One command by argv, bounded by command_timeout_ms on its own: the
 * checks are several exchanges, made once per open, and one budget for
 * all of them failed opens on a loaded machine.  NULL when there is no
 * reply (logged by the caller). */
static redisReply *
call(struct dmutex__conn *c, int argc, const char **argv)
{
	void *v;

	if (dmutex__conn_append_argv(c, argc, argv, NULL) ||
			dmutex__conn_get(c, &v, dmutex__conn_deadline(c)))
		return NULL;
	return v;
}

/* The scripts' commands, by the probe script, and EVAL itself. */
static int
check_scripts(struct dmutex__node *n, struct dmutex__conn *c, const char *prefix,
		const char *key, const char *chan)
{
	const struct dmutex__script *s = &dmutex__node_scripts(n)[DMUTEX__SCRIPT_PROBE];
	const char *evalsha[] = { "EVALSHA", s->sha, "1", key, chan };
	const char *eval[] = { "EVAL", s->src, "1", key, chan };
	char what[2 * DMUTEX__KEY_MAX + 64];
	redisReply *r;
	int rc = 0;

	if (!(r = call(c, 5, evalsha)))
		return no_answer(n, c, "checking permissions");
	if (dmutex__node_noscript(r)) {
		freeReplyObject(r);
		if (!(r = call(c, 5, eval)))
			return no_answer(n, c, "checking permissions");
	}
	if (noperm(r)) {
		/* Redis checks the command, then the keys it is given. */
		if (strstr(r->str, "keys"))
			snprintf(what, sizeof what, "access keys matching %s* (tried %s)", prefix, key);
		else
			snprintf(what, sizeof what, "run EVALSHA or EVAL");
		rc = refuse(n, prefix, what, r->str);
	} else if (r->type == REDIS_REPLY_ERROR) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: checking permissions: %s", n->addr->display, r->str);
		rc = EIO;
	} else if (r->type != REDIS_REPLY_ARRAY || (r->elements != 0 && (r->elements != 2 ||
			r->element[0]->type != REDIS_REPLY_STRING ||
			r->element[1]->type != REDIS_REPLY_STRING))) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: checking permissions: unexpected reply shape",
				n->addr->display);
		rc = EIO;
	} else if (r->elements == 2 && !strcasecmp(r->element[0]->str, "SET") &&
			strstr(r->element[1]->str, "syntax")) {
		/* probe.lua: a lock is taken with SET ... NX PX ... GET. */
		dmutex__log(DMUTEX_LOG_ERROR, "%s: this server refuses SET with both NX and GET (%s): "
				"dmutex needs Redis 7.0 or later", n->addr->display, r->element[1]->str);
		rc = EIO;
	} else if (r->elements == 2) {
		if (!strcasecmp(r->element[0]->str, "PUBLISH") ||
				!strcasecmp(r->element[0]->str, "SPUBLISH"))
			snprintf(what, sizeof what, "publish to channels matching %s* (tried %s)",
					prefix, chan);
		else
			snprintf(what, sizeof what, "run %.32s in a script", r->element[0]->str);
		rc = refuse(n, prefix, what, r->element[1]->str);
	}
	freeReplyObject(r);
	if (rc)
		return rc;

	/* EVALSHA falls back to EVAL after a server restart flushed the
	 * script cache: both must be allowed. */
	const char *trivial[] = { "EVAL", "return 1", "0" };
	if (!(r = call(c, 3, trivial)))
		return no_answer(n, c, "checking permissions");
	if (noperm(r))
		rc = refuse(n, prefix, "run EVAL", r->str);
	freeReplyObject(r);
	return rc;
}

/* Waiters subscribe to a channel per lock; the connection leaves
 * subscriber mode again when it unsubscribes from its only channel. */
static int
check_subscribe(struct dmutex__node *n, struct dmutex__conn *c, const char *prefix,
		const char *chan)
{
	/* A cluster's wake-ups are sharded. */
	const char *sub[] = { n->sharded ? "SSUBSCRIBE" : "SUBSCRIBE", chan };
	const char *unsub[] = { n->sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE", chan };
	char what[2 * DMUTEX__KEY_MAX + 64];
	redisReply *r;
	int rc = 0;

	if (!(r = call(c, 2, sub)))
		return no_answer(n, c, "checking permissions");
	if (noperm(r)) {
		if (strstr(r->str, "channel"))
			snprintf(what, sizeof what, "subscribe to channels matching %s* (tried %s)",
					prefix, chan);
		else
			snprintf(what, sizeof what, "run %s", sub[0]);
		rc = refuse(n, prefix, what, r->str);
		freeReplyObject(r);
		return rc;
	}
	if (r->type != REDIS_REPLY_ARRAY) {
		freeReplyObject(r);
		dmutex__log(DMUTEX_LOG_ERROR, "%s: checking permissions: %s: unexpected reply",
				n->addr->display, sub[0]);
		return EIO;
	}
	freeReplyObject(r);
	if (!(r = call(c, 2, unsub)))
		return no_answer(n, c, "checking permissions");
	if (noperm(r))
		rc = refuse(n, prefix, n->sharded ? "run SUNSUBSCRIBE" : "run UNSUBSCRIBE", r->str);
	else if (r->type != REDIS_REPLY_ARRAY)
		rc = EIO;
	freeReplyObject(r);
	return rc;
}

/* A fair lock's waiter pops its hand-over with BLPOP (grant.c), not from a
 * script.  On a list pushed first, so that it does not block. */
static int
check_blpop(struct dmutex__node *n, struct dmutex__conn *c, const char *prefix, const char *key)
{
	const char *push[] = { "RPUSH", key, "probe" };
	const char *pop[] = { "BLPOP", key, "1" };
	redisReply *r;
	int rc = 0;

	if (!(r = call(c, 3, push)))
		return no_answer(n, c, "checking permissions");
	if (noperm(r))
		rc = refuse(n, prefix, "run RPUSH", r->str);
	freeReplyObject(r);
	if (rc)
		return rc;
	if (!(r = call(c, 3, pop)))
		return no_answer(n, c, "checking permissions");
	/* Only a refusal matters here: anything else, a fair waiter's
	 * BLPOP meets again and handles (grant.c). */
	if (noperm(r))
		rc = refuse(n, prefix, "run BLPOP", r->str);
	freeReplyObject(r);
	return rc;
}

/* The info lines about what we may not read: once per process, not per open. */
static int said_no_config, said_no_info;

static int
once(int *flag)
{
	return !__atomic_exchange_n(flag, 1, __ATOMIC_ACQ_REL);
}

/*
 * An evicting maxmemory-policy may drop a held lock's key under memory
 * pressure: the next locker gets it while the holder still works, and
 * nothing tells either.  Every dmutex key has a TTL while in use, so the
 * volatile-* policies are as unsafe as allkeys-*.
 */
static int
check_policy(struct dmutex__node *n, struct dmutex__conn *c)
{
	const char *get[] = { "CONFIG", "GET", "maxmemory-policy" };
	redisReply *r;

	if (!(r = call(c, 3, get)))
		return no_answer(n, c, "reading maxmemory-policy");
	if (r->type == REDIS_REPLY_ERROR) {
		if (once(&said_no_config))
			dmutex__log(DMUTEX_LOG_INFO, "%s: cannot read maxmemory-policy (Redis: %s); "
					"make sure it is noeviction: an evicting policy may drop a held "
					"lock", n->addr->display, r->str);
	} else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
			r->element[1]->type == REDIS_REPLY_STRING &&
			(!strncmp(r->element[1]->str, "allkeys-", 8) ||
			 !strncmp(r->element[1]->str, "volatile-", 9))) {
		dmutex__log(DMUTEX_LOG_WARN, "%s: maxmemory-policy is %.40s: when Redis reaches "
				"maxmemory it may evict a held lock's key and two holders overlap "
				"silently; set maxmemory-policy noeviction", n->addr->display,
				r->element[1]->str);
	}
	freeReplyObject(r);
	return 0;
}

/* The server's identity: the same server written two ways (127.0.0.1 and
 * localhost) has one run_id. */
static int
read_run_id(struct dmutex__node *n, struct dmutex__conn *c, char run_id[DMUTEX__RUN_ID_MAX])
{
	const char *info[] = { "INFO", "server" };
	redisReply *r;
	const char *p;
	size_t k;

	if (!(r = call(c, 2, info)))
		return no_answer(n, c, "reading the server's run_id");
	if (r->type == REDIS_REPLY_ERROR) {
		if (once(&said_no_info))
			dmutex__log(DMUTEX_LOG_INFO, "%s: cannot read INFO (Redis: %s); a Redlock "
					"URL naming one server twice is then not detected", n->addr->display,
					r->str);
	} else if (r->type == REDIS_REPLY_STRING &&
			(p = strstr(r->str, "\nrun_id:"))) {
		p += 8;
		k = strcspn(p, "\r\n");
		if (k && k < DMUTEX__RUN_ID_MAX) {
			memcpy(run_id, p, k);
			run_id[k] = '\0';
		}
	}
	freeReplyObject(r);
	return 0;
}

int
dmutex__node_check(struct dmutex__node *n, struct dmutex__conn *c, const char *prefix,
		const char *name, char run_id[DMUTEX__RUN_ID_MAX])
{
	char tok[DMUTEX__TOKEN_HEX + 1], key[DMUTEX__KEY_MAX], chan[DMUTEX__KEY_MAX];
	int rc;

	run_id[0] = '\0';
	/* A scratch name of its own: clients opening at once do not meet. */
	if (name)
		snprintf(tok, sizeof tok, "%s", name);
	else if (dmutex__token(tok))
		return EIO;
	dmutex__key(key, prefix, "probe", tok);
	dmutex__key(chan, prefix, "probe", tok);
	if ((rc = check_scripts(n, c, prefix, key, chan)) ||
			(rc = check_subscribe(n, c, prefix, chan)) ||
			(rc = check_blpop(n, c, prefix, key)) ||
			(rc = check_policy(n, c)))
		return rc;
	return read_run_id(n, c, run_id);
}
