/*
 * The tool's door (admin.h), the core's half: a URL parsed exactly as a
 * client parses it, and what the backend is told of it.  The masters it
 * names are the backend's half (backend/redis/admin.c); the tool hands
 * one to the other, since the core reaches a backend only through its
 * table.
 */
#include <errno.h>
#include <stdlib.h>

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
	/* The views below read Redis keys themselves (admin.h says why);
	 * over etcd only `dmutex run`, which locks through dmutex.h, works. */
	if (u->cfg.nodes[0].etcd) {
		dmutex__log(DMUTEX_LOG_ERROR, "dmutex status, list, reset, metrics and top read Redis "
				"only; over etcd:// use `dmutex run`, or etcdctl get --prefix '%s'",
				u->cfg.prefix);
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
