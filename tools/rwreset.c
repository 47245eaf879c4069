/*
 * dmutex reset's half for a read-write lock: the writer and every read
 * share dropped (only with --force while one is held), the waiting
 * writers' intents with them, and everyone waiting woken to try again.
 * The last fencing token (fms, fseq in the state hash) stays, so a writer
 * after the reset gets a greater one even within the same millisecond.
 * The holders learn it as of any lost key: their next renewal finds their
 * share or writer gone (rw_renew.lua), their onlost runs and their unlock
 * says ENOLCK.  As reset.c's, the check and the change are one
 * WATCH/MULTI/EXEC transaction.  Over etcd the backend does it in one
 * txn (cli_rw_reset_view), said by the same words.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* As reset.c's: a lock passed on every millisecond changes under a few. */
#define ATTEMPTS 100

struct rwkeys {
	char h[DMUTEX__ADMIN_KEY_MAX], rd[DMUTEX__ADMIN_KEY_MAX], q[DMUTEX__ADMIN_KEY_MAX];
	char ch[DMUTEX__ADMIN_KEY_MAX];
};

static int
simple(struct dmutex__conn *c, redisReply *r)
{
	int ok = r && r->type != REDIS_REPLY_ERROR;

	if (!r)
		cli_err("backend failed: %s", dmutex__admin_conn_error(c));
	else if (!ok)
		cli_err("backend refused: %s", r->str);
	if (r)
		freeReplyObject(r);
	return ok ? 0 : CLI_BACKEND;
}

#define CMD(c, ...) simple((c), dmutex__conn_command((c), dmutex__conn_deadline(c), __VA_ARGS__))

void
cli_rw_say_refused(const struct cli_rwlock *rw, const char *node)
{
	char what[64];

	if (rw->writing)
		snprintf(what, sizeof what, "written (fence %lld)", rw->fence);
	else
		cli_rw_state(what, sizeof what, rw);
	cli_err("read-write lock '%s' is %s%s%s; use --force to release it anyway (the holders "
			"are told they lost it at their next renewal)", rw->name, what,
			node ? " on " : "", node ? node : "");
}

/* The transaction: drop what rw found, wake the waiters (a cluster's
 * listen with SSUBSCRIBE).  0 or CLI_BACKEND. */
static int
queue_reset(struct dmutex__conn *c, int cluster, const struct cli_rwlock *rw,
		const struct rwkeys *k)
{
	int status;

	if ((status = CMD(c, "MULTI")))
		return status;
	if (rw->has_writer && (status = CMD(c, "HDEL %b w wexp wo", k->h, strlen(k->h))))
		return status;
	if ((rw->shares_kept || rw->intents_kept) &&
			(status = CMD(c, "DEL %b %b", k->rd, strlen(k->rd), k->q, strlen(k->q))))
		return status;
	return CMD(c, "%s %b w", cluster ? "SPUBLISH" : "PUBLISH", k->ch, strlen(k->ch));
}

static void
say_reset(const struct cli_rwlock *rw, const char *on)
{
	char name[CLI_NAME_TEXT];

	cli_name_text(name, rw->name);
	printf("reset read-write lock '%s'%s:", name, on);
	if (rw->writing)
		printf(" released the write lock (fence %lld);", rw->fence);
	if (rw->readers > 0)
		printf(" released %lld read share%s;", rw->readers, rw->readers == 1 ? "" : "s");
	if (rw->writers_waiting > 0)
		printf(" woke %lld waiting writer%s;", rw->writers_waiting,
				rw->writers_waiting == 1 ? "" : "s");
	if ((rw->has_writer && !rw->writing) || rw->shares_kept > rw->readers ||
			rw->intents_kept > rw->writers_waiting)
		printf(" removed ended leases;");
	printf(" fence kept\n");
}

/* What to do with rw: 1 reset it, 0 nothing, -1 absent, else a status. */
static int
decide(const struct cli_rwlock *rw, int force, const char *node)
{
	if (rw->error[0]) {
		cli_err("'%s': %s", rw->name, rw->error);
		return CLI_BACKEND;
	}
	if (!rw->exists)
		return -1;
	if ((rw->writing || rw->readers > 0) && !force) {
		cli_rw_say_refused(rw, node);
		return CLI_REFUSED;
	}
	return rw->has_writer || rw->shares_kept || rw->intents_kept;
}

static void
unwatch(struct dmutex__conn *c)
{
	redisReply *r;

	/* A reused connection starts clean; errors here change nothing. */
	if ((r = dmutex__conn_command(c, dmutex__conn_deadline(c), "DISCARD")))
		freeReplyObject(r);
	if ((r = dmutex__conn_command(c, dmutex__conn_deadline(c), "UNWATCH")))
		freeReplyObject(r);
}

/* One attempt: 0 done (*what set), 1 changed under us, else a status. */
static int
attempt(struct dmutex__conn *c, int cluster, const char *prefix, const char *name, int force,
		const char *node, const struct rwkeys *k, int *what)
{
	struct cli_rwlock rw;
	char on[600] = "", text[512];
	redisReply *r;
	int status, d;

	if ((status = CMD(c, "WATCH %b %b %b", k->h, strlen(k->h), k->rd, strlen(k->rd), k->q,
			strlen(k->q))))
		return status;
	if ((status = cli_rw_inspect(c, prefix, name, &rw)))
		goto abort;
	if ((d = decide(&rw, force, node)) != 1) {
		if (d <= 0)
			*what = d;
		else
			status = d;
		goto abort;
	}
	if ((status = queue_reset(c, cluster, &rw, k)))
		goto abort;
	if (!(r = dmutex__conn_command(c, dmutex__conn_deadline(c), "EXEC"))) {
		cli_rwlock_free(&rw);
		return simple(c, NULL);
	}
	if (r->type == REDIS_REPLY_NIL) {
		freeReplyObject(r);
		cli_rwlock_free(&rw);
		return 1;
	}
	if (!(status = simple(c, r))) {
		if (node)
			snprintf(on, sizeof on, " on %s", cli_text(text, sizeof text, node));
		*what = 1;
		say_reset(&rw, on);
	}
	cli_rwlock_free(&rw);
	return status;
abort:
	cli_rwlock_free(&rw);
	unwatch(c);
	return status;
}

int
cli_rw_reset_node(struct dmutex__conn *c, int cluster, const char *prefix, const char *name,
		int force, const char *node, int *what)
{
	struct rwkeys k;
	int status;

	dmutex__admin_key(k.h, prefix, "rw", name);
	dmutex__admin_key(k.rd, prefix, "rwr", name);
	dmutex__admin_key(k.q, prefix, "rwq", name);
	dmutex__admin_key(k.ch, prefix, "rwwake", name);
	for (int i = 0; i < ATTEMPTS; i++)
		if ((status = attempt(c, cluster, prefix, name, force, node, &k, what)) != 1)
			return status;
	cli_err("read-write lock '%s' keeps changing; nothing of it was reset", name);
	return CLI_BACKEND;
}

int
cli_rw_reset_view(struct dmutex__admin_view *v, const char *name, int force, int *what)
{
	struct dmutex__rwlock_view gone;
	struct cli_rwlock rw;
	int result, err, status;

	*what = 0;
	if ((err = dmutex__admin_view_rw_reset(v, name, force, &result, &gone))) {
		cli_err("read-write lock '%s': the backend failed (%s); nothing of it was reset", name,
				strerror(err));
		return CLI_BACKEND;
	}
	if (result == DMUTEX__RESET_HELD) {
		cli_err("read-write lock '%s' was taken meanwhile; use --force to release it anyway",
				name);
		return CLI_REFUSED;
	}
	if (result == DMUTEX__RESET_NOTHING)
		return 0;
	/* What the txn itself deleted: exact, whatever changed since the
	 * look that let it go ahead. */
	if ((status = cli_rw_of_view(&rw, name, &gone)))
		return status;
	*what = 1;
	say_reset(&rw, "");
	cli_rwlock_free(&rw);
	return 0;
}
