/*
 * dmutex reset [--force] NAME: force-release a lock and clear an owner-died
 * or not-recoverable state, saying exactly what was removed.  The
 * not-recoverable state is the lock key itself (key layout 3, "3 notrec"),
 * or the meta hash's state as key layout 2 wrote it.
 *
 * The meta hash goes too (the name is forgotten): tokens keep growing all
 * the same, as the next one starts from the server's clock (acquire.lua),
 * above every token handed out before.  The check and
 * the change are one WATCH/MULTI/EXEC transaction, so a lock taken between
 * them is never released without --force.  The read-write lock of the
 * same name (other keys) is reset with it, by the same rules (rwreset.c):
 * a reset leaves nothing held under the name.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
	"usage: dmutex reset [--force] [--url URL] NAME\n"
	"Release NAME whoever holds it (only with --force while it is held) and\n"
	"clear an owner-died or not-recoverable state; fencing tokens keep growing.\n"
	"A read-write lock of that name is reset too: its writer, read shares and\n"
	"waiting writers dropped (only with --force while written or read).\n";

/* Each attempt reads under a WATCH and commits only if nothing changed: a
 * lock handed from waiter to waiter every millisecond (a release grants
 * the next at once, README "Who a release wakes") changed under 10 in a
 * row in CI (torture-sync under load).  An attempt is a few round trips. */
#define ATTEMPTS 100

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

static void
say_refused(const struct cli_lock *l, const char *node)
{
	char holder[512], dur[32] = "";

	cli_holder(holder, sizeof holder, l, 1);
	if (l->since_ms >= 0) {
		strcpy(dur, " for ");
		cli_duration(dur + 5, sizeof dur - 5, cli_wall_ms() - l->since_ms);
	}
	cli_err("'%s' is held by %s%s%s%s; use --force to release it anyway "
			"(the holder is told it lost the lock at its next renewal)",
			l->name, holder, dur, node ? " on " : "", node ? node : "");
}

/* Queue the transaction's wake-ups: the lock's channel (older clients
 * listen there) and the own channel of every waiter queued for the lock
 * (README "Who a release wakes"), and its list, which then looks again
 * now, not at its bound (a third of its lease).  A member is the waiter's token, or '!'
 * and it for a Redlock waiter, whose channel is the token's.  A cluster's
 * waiters listen with SSUBSCRIBE, which only SPUBLISH reaches (the
 * library's scripts are rewritten so: embed_lua.py).  0 or CLI_BACKEND. */
static int
queue_wakes(struct dmutex__conn *c, int cluster, const char *ch, const redisReply *q)
{
	const char *pub = cluster ? "SPUBLISH" : "PUBLISH";
	int status;

	if ((status = simple(c, dmutex__conn_command(c, dmutex__conn_deadline(c), "%s %b r", pub, ch,
			strlen(ch)))))
		return status;
	for (size_t i = 0; i < q->elements; i++) {
		const char *tok = q->element[i]->str;
		size_t len = (size_t)q->element[i]->len;

		if (q->element[i]->type != REDIS_REPLY_STRING)
			continue;
		if (len && tok[0] == '!') {
			tok++;
			len--;
		}
		if ((status = simple(c, dmutex__conn_command(c, dmutex__conn_deadline(c), "%s %b:%b r", pub,
				ch, strlen(ch), tok, len))))
			return status;
		/* A waiter whose thread pops its grant from a list of that name
		 * (wake_queue.lua) hears it there at once, without its wake-up
		 * thread's relay; the list lives 10 s at most.  Not a Redlock
		 * waiter's (it never pops), nor on a cluster (neither). */
		if (cluster || q->element[i]->str[0] == '!')
			continue;
		if ((status = simple(c, dmutex__conn_command(c, dmutex__conn_deadline(c), "RPUSH %b:%b r",
				ch, strlen(ch), tok, len))) ||
				(status = simple(c, dmutex__conn_command(c, dmutex__conn_deadline(c),
				"PEXPIRE %b:%b 10000", ch, strlen(ch), tok, len))))
			return status;
	}
	return 0;
}

/* The transaction that resets what l found, the queue q (its waiters
 * woken, their details for a grant dropped with it, dk) included.  0 or
 * CLI_BACKEND. */
static int
queue_reset(struct dmutex__conn *c, int cluster, const struct cli_lock *l, const char *lk,
		const char *mk, const char *ch, const char *qk, const char *dk, const redisReply *q)
{
	int status;

	if ((status = simple(c, dmutex__conn_command(c, dmutex__conn_deadline(c), "MULTI"))))
		return status;
	if ((l->held || l->notrec_mark || l->reserved) &&
			(status = simple(c, dmutex__conn_command(c, dmutex__conn_deadline(c), "DEL %b", lk, strlen(lk)))))
		return status;
	if ((l->state[0] || l->notrec_mark) &&
			(status = simple(c, dmutex__conn_command(c, dmutex__conn_deadline(c), "DEL %b", mk, strlen(mk)))))
		return status;
	if ((status = queue_wakes(c, cluster, ch, q)))
		return status;
	if (q->elements)
		return simple(c, dmutex__conn_command(c, dmutex__conn_deadline(c), "DEL %b %b", qk, strlen(qk),
				dk, strlen(dk)));
	return 0;
}

/* What a reset of l did, on stdout; on: " on NODE" or "". */
static void
say_reset(const struct cli_lock *l, const char *name, const char *on, size_t queued)
{
	char holder[512], dur[32], fence[32];

	if (l->held) {
		cli_holder(holder, sizeof holder, l, 1);
		cli_duration(dur, sizeof dur, cli_wall_ms() - l->since_ms);
		if (l->fence >= 0)
			snprintf(fence, sizeof fence, "%lld", l->fence);
		printf("reset '%s'%s: released the hold of %s (fence %s, held for %s)\n",
				name, on, holder, l->fence >= 0 ? fence : "not assigned yet",
				l->since_ms >= 0 ? dur : "?");
	}
	if (l->notrec_mark || !strcmp(l->state, "notrec"))
		printf("reset '%s'%s: cleared the not-recoverable state\n", name, on);
	else if (!strcmp(l->state, "died") || (!strcmp(l->state, "held") && !l->held))
		printf("reset '%s'%s: cleared the owner-died state (its last holder %s)\n",
				name, on, !strcmp(l->state, "died") ? "exited holding it"
				: "stopped renewing without unlocking");
	else if (!l->held)
		printf("reset '%s'%s: %s, woke the %zu process%s waiting for it\n", name, on,
				l->reserved ? "dropped the reservation for the waiting process a release woke"
				: "free", queued, queued == 1 ? "" : "es");
}

/* One node.  *what: 0 nothing to do, 1 something removed, -1 no such lock.
 * The queue is read under the WATCH and emptied in the transaction, so a
 * waiter that queues meanwhile makes it run again, never is dropped
 * unwoken. */
static int
reset_node(struct dmutex__conn *c, int cluster, const char *prefix, const char *name, int force,
		const char *node, int *what)
{
	char lk[DMUTEX__ADMIN_KEY_MAX], mk[DMUTEX__ADMIN_KEY_MAX], ch[DMUTEX__ADMIN_KEY_MAX];
	char qk[DMUTEX__ADMIN_KEY_MAX], dk[DMUTEX__ADMIN_KEY_MAX];
	char holder[512], on[600] = "";
	struct cli_lock l;
	redisReply *r, *q = NULL;
	size_t queued;
	int status;

	dmutex__admin_key(lk, prefix, "lock", name);
	dmutex__admin_key(mk, prefix, "meta", name);
	dmutex__admin_key(ch, prefix, "wake", name);
	dmutex__admin_key(qk, prefix, "wq", name);
	dmutex__admin_key(dk, prefix, "wd", name);
	if (node)
		snprintf(on, sizeof on, " on %s", cli_text(holder, sizeof holder, node));
	for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
		if ((status = simple(c, dmutex__conn_command(c, dmutex__conn_deadline(c), "WATCH %b %b %b", lk,
				strlen(lk), mk, strlen(mk), qk, strlen(qk)))))
			return status;
		if ((status = cli_inspect(c, prefix, name, &l)))
			goto unwatch;
		if (l.error[0]) {
			cli_err("'%s': %s", name, l.error);
			status = CLI_BACKEND;
			goto unwatch;
		}
		q = dmutex__conn_command(c, dmutex__conn_deadline(c), "ZRANGE %b 0 -1", qk, strlen(qk));
		if (!q || q->type != REDIS_REPLY_ARRAY) {
			status = simple(c, q);
			q = NULL;
			status = status ? status : CLI_BACKEND;
			goto unwatch;
		}
		queued = q->elements;
		if (!l.exists && !queued) {
			*what = -1;
			goto unwatch;
		}
		if (l.held && !force) {
			say_refused(&l, node);
			status = CLI_REFUSED;
			goto unwatch;
		}
		/* A reservation (no hold) and a queue of waiters nobody wakes
		 * are reset too: the waiters look again at once. */
		if (!l.held && !l.reserved && !l.state[0] && !l.notrec_mark && !queued) {
			*what = 0;
			goto unwatch;
		}
		if ((status = queue_reset(c, cluster, &l, lk, mk, ch, qk, dk, q)))
			goto unwatch;
		freeReplyObject(q);
		q = NULL;
		if (!(r = dmutex__conn_command(c, dmutex__conn_deadline(c), "EXEC"))) {
			cli_lock_free(&l);
			return simple(c, NULL);
		}
		if (r->type == REDIS_REPLY_NIL) {
			/* It changed under us: look again. */
			freeReplyObject(r);
			cli_lock_free(&l);
			continue;
		}
		if ((status = simple(c, r))) {
			cli_lock_free(&l);
			return status;
		}
		*what = 1;
		say_reset(&l, name, on, queued);
		cli_lock_free(&l);
		return 0;
	}
	cli_err("'%s' keeps changing%s; nothing was reset", name, on);
	return CLI_BACKEND;
unwatch:
	if (q)
		freeReplyObject(q);
	cli_lock_free(&l);
	/* Drop the WATCH (and a MULTI begun) so a reused connection starts
	 * clean; errors here change nothing the caller needs to know. */
	if ((r = dmutex__conn_command(c, dmutex__conn_deadline(c), "DISCARD")))
		freeReplyObject(r);
	if ((r = dmutex__conn_command(c, dmutex__conn_deadline(c), "UNWATCH")))
		freeReplyObject(r);
	return status;
}

/* Without --force, a read-write lock of the name held on master n refuses
 * the reset before anything is touched, as a held mutex does.  0 or a
 * status (said). */
static int
rw_refuses(const struct cli_conn *cc, size_t n, const char *name)
{
	struct cli_rwlock rw;
	int status = cli_rw_inspect(cc->ctx[n], cc->prefix, name, &rw);

	if (!status && rw.error[0]) {
		cli_err("'%s': %s", name, rw.error);
		status = CLI_BACKEND;
	} else if (!status && (rw.writing || rw.readers > 0)) {
		cli_rw_say_refused(&rw, cc->nnodes > 1 ? cli_conn_node(cc, n) : NULL);
		status = CLI_REFUSED;
	}
	cli_rwlock_free(&rw);
	return status;
}

/* Over a store read through the library (etcd): the mutex l found, in
 * one transaction.  *what 1 something removed, else 0. */
static int
reset_view_mutex(struct dmutex__admin_view *v, const struct cli_lock *l, int force, int *what)
{
	int err, result = 0;

	*what = 0;
	if ((err = dmutex__admin_view_reset(v, l->name, force, &result))) {
		cli_err("'%s': the backend failed (%s); nothing was reset", l->name, strerror(err));
		return CLI_BACKEND;
	}
	if (result == DMUTEX__RESET_HELD) {
		cli_err("'%s' was taken meanwhile; use --force to release it anyway", l->name);
		return CLI_REFUSED;
	}
	if (result == DMUTEX__RESET_NOTHING)
		return 0;
	*what = 1;
	if (l->held) {
		char host[4 * sizeof l->host];

		/* The store's bytes, escaped as every view's are. */
		printf("reset '%s': released the hold of %s pid %lld (fence %lld)\n", l->name,
				cli_text(host, sizeof host, l->host), l->pid, l->fence);
	} else {
		printf("reset '%s': cleared the %s state\n", l->name,
				l->robust == ROBUST_NOTREC ? "not-recoverable" : "owner-died");
	}
	return 0;
}

/* What the look found stops the reset before anything is touched, as
 * over Redis: unreadable, or (no force) the mutex held or the read-write
 * lock written or read.  0 or a status (said). */
static int
view_refuses(const struct cli_lock *l, const struct cli_rwlock *rw, int force)
{
	if (l->error[0] || rw->error[0]) {
		if (l->error[0])
			cli_err("'%s': %s", l->name, l->error);
		if (rw->error[0])
			cli_err("'%s': %s", rw->name, rw->error);
		return CLI_BACKEND;
	}
	if (force)
		return 0;
	if (l->held) {
		say_refused(l, NULL);
		return CLI_REFUSED;
	}
	if (rw->writing || rw->readers > 0) {
		cli_rw_say_refused(rw, NULL);
		return CLI_REFUSED;
	}
	return 0;
}

/* Over a store read through the library (etcd): the mutex and the
 * read-write lock of the name, each in one transaction. */
static int
reset_view(struct dmutex__admin_view *v, const char *name, int force)
{
	struct cli_lock l;
	struct cli_rwlock rw = { 0 };
	int status, mx = 0, rx = 0;

	if (!(status = cli_view_lock(v, name, &l)) && !(status = cli_view_rwlock(v, name, &rw)) &&
	    !(status = view_refuses(&l, &rw, force))) {
		if (!l.exists && !rw.exists) {
			cli_err("no such lock '%s'", name);
			status = CLI_NOLOCK;
		} else if ((!l.exists || !(status = reset_view_mutex(v, &l, force, &mx))) &&
				(!rw.exists || !(status = cli_rw_reset_view(v, name, force, &rx))) &&
				!mx && !rx) {
			printf("'%s' is free and consistent: nothing to reset\n", name);
		}
	}
	cli_lock_free(&l);
	cli_rwlock_free(&rw);
	return status;
}

int
cli_cmd_reset(int argc, char **argv, const char *url)
{
	static const struct option opts[] = {
		{ "force", no_argument, NULL, 'f' },
		{ "url", required_argument, NULL, 'u' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_conn cc;
	struct dmutex__admin_view *view;
	const char *name;
	int force = 0, status, c, absent = 0, removed = 0;

	while ((c = getopt_long(argc, argv, "+fh", opts, NULL)) != -1) {
		switch (c) {
		case 'f': force = 1; break;
		case 'u': url = optarg; break;
		case 'h': fputs(usage, stdout); return CLI_OK;
		default: fputs(usage, stderr); return CLI_USAGE;
		}
	}
	if (argc - optind != 1) {
		fputs(usage, stderr);
		return CLI_USAGE;
	}
	name = argv[optind];
	if (cli_check_name(name))
		return CLI_USAGE;
	if ((status = cli_view_open(cli_url(url), &view)) >= 0) {
		if (!status) {
			status = reset_view(view, name, force);
			dmutex__admin_view_close(view);
		}
		return status;
	}
	/* A reset needs every node: a half-reset Redlock lock helps nobody. */
	if ((status = cli_conn_open(&cc, cli_url(url))))
		return status;
	if (!force) {
		/* Refuse before touching any node. */
		for (size_t n = 0; n < cc.nnodes; n++) {
			struct cli_lock l;
			if (!cli_conn_serves(&cc, n, name))
				continue;
			if ((status = cli_inspect(cc.ctx[n], cc.prefix, name, &l))) {
				cli_lock_free(&l);
				goto out;
			}
			if (l.held) {
				say_refused(&l, cc.nnodes > 1 ? cli_conn_node(&cc, n) : NULL);
				status = CLI_REFUSED;
			}
			cli_lock_free(&l);
			if (status || (status = rw_refuses(&cc, n, name)))
				goto out;
		}
	}
	for (size_t n = 0; n < cc.nnodes; n++) {
		const char *node = cc.nnodes > 1 ? cli_conn_node(&cc, n) : NULL;
		int what = 0, rw = 0;
		if (!cli_conn_serves(&cc, n, name)) {
			absent++;      /* a cluster: another master's name */
			continue;
		}
		/* The read-write lock of the name too: a reset leaves nothing
		 * held under it. */
		if ((status = reset_node(cc.ctx[n], cc.cluster, cc.prefix, name, force, node, &what)) ||
				(status = cli_rw_reset_node(cc.ctx[n], cc.cluster, cc.prefix, name, force,
				node, &rw)))
			goto out;
		absent += what < 0 && rw < 0;
		removed += what > 0 || rw > 0;
	}
	if (absent == (int)cc.nnodes) {
		cli_err("no such lock '%s'", name);
		status = CLI_NOLOCK;
	} else if (!removed) {
		printf("'%s' is free and consistent: nothing to reset\n", name);
	}
out:
	cli_conn_close(&cc);
	return status;
}
