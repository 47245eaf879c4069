/*
 * A store the tool reads through the library (etcd): its URL opened, and
 * a lock as the backend reports it (core/admin.h, backend/view.h) in the
 * struct cli_lock that status, list and reset show, and a read-write lock
 * in the struct cli_rwlock that they show of Redis's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int
cli_view_open(const char *url, struct dmutex__admin_view **v)
{
	int err = dmutex__admin_view_open(url, v);

	switch (err) {
	case 0:
		return 0;
	case ENOENT:
		return -1;
	case EINVAL:
	case ENOTSUP:
		return CLI_BADURL;
	case ENOMEM:
		cli_err("out of memory");
		return CLI_INTERNAL;
	default:
		cli_err("backend unreachable or refusing: %s", url);
		return CLI_BACKEND;
	}
}

int
cli_view_lock(struct dmutex__admin_view *v, const char *name, struct cli_lock *l)
{
	struct dmutex__lock_view lv;
	int err;

	memset(l, 0, sizeof *l);
	l->pid = l->tid = l->since_ms = l->lease_ms = l->pttl_ms = -1;
	l->fence = l->fence_counter = l->cond_waiters = l->waiters = -1;
	l->alive = l->robust_recorded = -1;
	if (!(l->name = strdup(name))) {
		cli_err("out of memory");
		return CLI_INTERNAL;
	}
	if ((err = dmutex__admin_view_lock(v, name, &lv))) {
		snprintf(l->error, sizeof l->error, "the backend failed (%s)", strerror(err));
		return 0;
	}
	l->exists = lv.exists;
	l->held = lv.held;
	if (lv.held) {
		if (sscanf(lv.owner, "%255s %lld %lld", l->host, &l->pid, &l->tid) != 3)
			l->host[0] = '\0', l->pid = l->tid = -1;
		l->fence = (long long)lv.fence;
		l->pttl_ms = lv.lease_left_ms;
	}
	l->waiters = lv.waiters;
	l->robust = lv.notrec ? ROBUST_NOTREC : lv.owner_died ? ROBUST_OWNER_DIED : ROBUST_CONSISTENT;
	return 0;
}

int
cli_rw_of_view(struct cli_rwlock *rw, const char *name, const struct dmutex__rwlock_view *rv)
{
	memset(rw, 0, sizeof *rw);
	/* The writer's key records no holder: no writer shown, as an older
	 * Redis client's. */
	cli_rwlock_unknown(rw);
	if (!(rw->name = strdup(name))) {
		cli_err("out of memory");
		return CLI_INTERNAL;
	}
	if (rv->error[0]) {
		snprintf(rw->error, sizeof rw->error, "%s", rv->error);
		return 0;
	}
	rw->exists = rv->exists;
	rw->writing = rw->has_writer = rv->writing;
	/* A token is the writer's key's revision: none is kept once it goes
	 * (the next is greater all the same), so no last fence. */
	if (rv->writing) {
		rw->fence = (long long)rv->fence;
		rw->write_left_ms = rv->write_left_ms;
	}
	rw->readers = rw->shares_kept = rv->readers;
	rw->read_left_ms = rv->read_left_ms;
	rw->writers_waiting = rw->intents_kept = rv->writers_waiting;
	return 0;
}

int
cli_view_rwlock(struct dmutex__admin_view *v, const char *name, struct cli_rwlock *rw)
{
	struct dmutex__rwlock_view rv;
	int err = dmutex__admin_view_rwlock(v, name, &rv);

	if (err) {
		memset(&rv, 0, sizeof rv);
		snprintf(rv.error, sizeof rv.error, "the backend failed (%s)", strerror(err));
	}
	return cli_rw_of_view(rw, name, &rv);
}
