/*
 * A store the tool reads through the library (etcd): its URL opened, and
 * a lock as the backend reports it (core/admin.h, backend/view.h) in the
 * struct cli_lock that status, list and reset show.
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
