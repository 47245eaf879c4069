/*
 * The tool's door (admin.h), the core's half: a URL parsed exactly as a
 * client parses it, and what the backend is told of it.  The masters it
 * names are the backend's half (backend/redis/admin.c); the tool hands
 * one to the other, since the core reaches a backend only through its
 * table.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admin.h"
#include "internal.h"     /* with admin.h: the compiler checks they agree */
#include "url.h"

struct dmutex__admin_url {
	struct dmutex__config cfg;
	struct dmutex__backend_cfg be;
};

int
dmutex__admin_parse(const char *url, struct dmutex__admin_url **out)
{
	struct dmutex__admin_url *u = calloc(1, sizeof *u);
	int err;

	if (!u)
		return ENOMEM;
	if ((err = dmutex__url_parse(url, &u->cfg))) {
		free(u);
		return err;
	}
	/* These calls read Redis keys themselves (admin.h says why); etcd
	 * answers through dmutex__admin_view_* instead, and keeps no counters. */
	if (u->cfg.nodes[0].etcd) {
		dmutex__log(DMUTEX_LOG_ERROR, "dmutex metrics and top read Redis only: an etcd "
				"backend keeps no per-lock counters");
		dmutex__config_free(&u->cfg);
		free(u);
		return ENOTSUP;
	}
	u->be.nodes = u->cfg.nodes;
	u->be.nnodes = u->cfg.nnodes;
	u->be.connect_timeout_ms = u->cfg.connect_timeout_ms;
	u->be.command_timeout_ms = u->cfg.command_timeout_ms;
	u->be.lease_ms = u->cfg.lease_ms;
	u->be.node_timeout_ms = u->cfg.node_timeout_ms;
	u->be.idle_ms = u->cfg.idle_ms;
	u->be.prefix = u->cfg.prefix;
	*out = u;
	return 0;
}

void
dmutex__admin_url_free(struct dmutex__admin_url *u)
{
	if (!u)
		return;
	dmutex__config_free(&u->cfg);
	free(u);
}

const struct dmutex__backend_cfg *
dmutex__admin_url_cfg(const struct dmutex__admin_url *u)
{
	return &u->be;
}

const char *
dmutex__admin_url_prefix(const struct dmutex__admin_url *u)
{
	return u->cfg.prefix;
}

unsigned
dmutex__admin_command_ms(const char *url)
{
	struct dmutex__config cfg;
	unsigned command_ms = DMUTEX__COMMAND_TIMEOUT_DEFAULT;

	if (dmutex__url_parse(url, &cfg) == 0) {
		command_ms = cfg.command_timeout_ms;
		dmutex__config_free(&cfg);
	}
	return command_ms;
}

struct dmutex__admin_view {
	struct dmutex__config cfg;
	struct dmutex__backend *be;
	char host[256], hostid[128];
	pid_t pid;
};

void
dmutex__admin_view_close(struct dmutex__admin_view *v)
{
	if (!v)
		return;
	if (v->be)
		v->be->ops->destroy(v->be);
	dmutex__config_free(&v->cfg);
	free(v);
}

static int
view_verify(struct dmutex__admin_view *v)
{
	size_t up = 0, need = 1;
	char why[1024];
	int err = v->be->ops->verify(v->be, &up, &need);

	if (err == EIO) {
		dmutex__backend_why(v->be, why, sizeof why);
		dmutex__log(DMUTEX_LOG_ERROR, "cannot reach %s%s%s", v->cfg.nodes[0].display,
				why[0] ? ": " : "", why);
	}
	return err;
}

int
dmutex__admin_view_open(const char *url, struct dmutex__admin_view **out)
{
	struct dmutex__admin_view *v = calloc(1, sizeof *v);
	int err;

	if (!v)
		return ENOMEM;
	if ((err = dmutex__url_parse(url, &v->cfg))) {
		free(v);
		return err;
	}
	if (!v->cfg.nodes[0].etcd) {
		dmutex__admin_view_close(v);
		return ENOENT;
	}
	v->pid = getpid();
	if (gethostname(v->host, sizeof v->host - 1))
		strcpy(v->host, "unknown");
	dmutex__hostid(v->hostid, sizeof v->hostid);
	{
		const struct dmutex__backend_cfg bc = {
			.nodes = v->cfg.nodes, .nnodes = v->cfg.nnodes,
			.connect_timeout_ms = v->cfg.connect_timeout_ms,
			.command_timeout_ms = v->cfg.command_timeout_ms,
			.lease_ms = v->cfg.lease_ms, .node_timeout_ms = v->cfg.node_timeout_ms,
			.idle_ms = v->cfg.idle_ms, .prefix = v->cfg.prefix,
			.host = v->host, .hostid = v->hostid, .pid = &v->pid,
		};
		err = dmutex__backend_create(&bc, &v->be);
	}
	if (!err && !v->be->ops->inspect)
		err = ENOTSUP;
	if (!err)
		err = view_verify(v);
	if (err) {
		dmutex__admin_view_close(v);
		return err;
	}
	*out = v;
	return 0;
}

int
dmutex__admin_view_lock(struct dmutex__admin_view *v, const char *name,
		struct dmutex__lock_view *out)
{
	return v->be->ops->inspect(v->be, name, out);
}

int
dmutex__admin_view_names(struct dmutex__admin_view *v, int (*fn)(void *arg, const char *name),
		void *arg)
{
	return v->be->ops->names(v->be, fn, arg);
}

int
dmutex__admin_view_reset(struct dmutex__admin_view *v, const char *name, int force, int *result)
{
	return v->be->ops->reset(v->be, name, force, result);
}

int
dmutex__admin_view_rwlock(struct dmutex__admin_view *v, const char *name,
		struct dmutex__rwlock_view *out)
{
	if (!v->be->ops->rw_inspect)
		return ENOTSUP;
	return v->be->ops->rw_inspect(v->be, name, out);
}

int
dmutex__admin_view_rw_names(struct dmutex__admin_view *v,
		int (*fn)(void *arg, const char *name), void *arg)
{
	if (!v->be->ops->rw_names)
		return ENOTSUP;
	return v->be->ops->rw_names(v->be, fn, arg);
}

int
dmutex__admin_view_rw_reset(struct dmutex__admin_view *v, const char *name, int force,
		int *result, struct dmutex__rwlock_view *removed)
{
	if (!v->be->ops->rw_reset)
		return ENOTSUP;
	return v->be->ops->rw_reset(v->be, name, force, result, removed);
}
