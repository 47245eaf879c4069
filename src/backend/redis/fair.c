/* Arguments of fair_acquire.lua and fair_release.lua: the keys of the
 * usual scripts, then the queue's two, then the usual arguments (and for
 * the release the client's lease, a hand-over's when no hold says one). */
#include <stdio.h>
#include <string.h>

#include "fair.h"
#include "base/base.h"
#include "base/log.h"

static void
queue_keys(struct dmutex__backend *be, const char *name, char *qk, char *pk)
{
	dmutex__key(qk, be->cfg.prefix, "queue", name);
	dmutex__key(pk, be->cfg.prefix, "qlive", name);
}

void
dmutex__fair_grant_key(struct dmutex__backend *be, const char *name, const char *token, char *out)
{
	size_t len = (size_t)dmutex__key(out, be->cfg.prefix, "wake", name);

	/* Never cut (keys.h): room for ':' and a token behind it. */
	out[len] = ':';
	memcpy(out + len + 1, token, DMUTEX__TOKEN_HEX);
	out[len + 1 + DMUTEX__TOKEN_HEX] = '\0';
}

void
dmutex__fair_acq_argv(struct dmutex__backend *be, const struct dmutex__acq *a,
		struct dmutex__fair_acq_argv *x)
{
	dmutex__key(x->lk, be->cfg.prefix, "lock", a->name);
	dmutex__key(x->mk, be->cfg.prefix, "meta", a->name);
	queue_keys(be, a->name, x->qk, x->pk);
	dmutex__fair_grant_key(be, a->name, a->token, x->gk);
	dmutex__udec(x->lease, a->lease_ms);
	/* The client's, kept right across fork (client.c). */
	dmutex__udec(x->pid, (unsigned long long)*be->cfg.pid);
	dmutex__udec(x->tid, (unsigned long long)a->tid);
	dmutex__udec(x->since, (unsigned long long)dmutex__wall_ms());
	dmutex__udec(x->keep, (unsigned long long)a->lease_ms + be->cfg.idle_ms);
	x->argv[0] = x->lk;
	x->argv[1] = x->mk;
	x->argv[2] = x->qk;
	x->argv[3] = x->pk;
	x->argv[4] = x->gk;
	x->argv[5] = a->token;
	x->argv[6] = x->lease;
	x->argv[7] = be->cfg.host;
	x->argv[8] = x->pid;
	x->argv[9] = x->tid;
	x->argv[10] = x->since;
	x->argv[11] = be->cfg.hostid;
	x->argv[12] = a->robust ? "1" : "0";
	x->argv[13] = x->keep;
	x->argv[14] = a->wait ? "1" : "0";
	/* The request's send time: its queued details keep it, and the
	 * hand-over echoes it (mutex_lock.c granted()). */
	dmutex__udec(x->stamp, (unsigned long long)a->stamp);
	x->argv[15] = x->stamp;
	/* A token no request carried yet is in no queue (fair_acquire.lua). */
	x->argv[16] = a->fresh ? "1" : "0";
}

void
dmutex__fair_rel_argv(struct dmutex__backend *be, const char *name, const char *token,
		int mode, const struct dmutex__handoff *next, struct dmutex__fair_rel_argv *x)
{
	const char **n = &x->argv[DMUTEX__REL_ARGC + 3];

	dmutex__rel_argv(be, name, token, mode, &x->base);
	queue_keys(be, name, x->qk, x->pk);
	snprintf(x->lease, sizeof x->lease, "%u", be->cfg.lease_ms);
	x->argv[0] = x->base.argv[0];
	x->argv[1] = x->base.argv[1];
	x->argv[2] = x->qk;
	x->argv[3] = x->pk;
	memcpy(&x->argv[4], &x->base.argv[2], (DMUTEX__REL_ARGC - 2) * sizeof x->argv[0]);
	x->argv[DMUTEX__REL_ARGC + 2] = x->lease;
	/* The next thread's hold, as fair_acquire.lua records one. */
	snprintf(x->nlease, sizeof x->nlease, "%u", next ? next->lease_ms : 0);
	snprintf(x->npid, sizeof x->npid, "%ld", (long)*be->cfg.pid);
	snprintf(x->ntid, sizeof x->ntid, "%ld", next ? next->tid : 0);
	n[0] = next ? next->token : "";
	n[1] = x->nlease;
	n[2] = be->cfg.host;
	n[3] = x->npid;
	n[4] = x->ntid;
	n[5] = be->cfg.hostid;
}
