/*
 * The tool's door (core/admin.h), the backend's half: the masters a URL
 * names, found as the library finds them (Sentinel asked, a cluster's
 * slot map read), connected with the library's authenticated connect, and
 * where a lock's keys and counters live.  The tool reads and writes the
 * keys itself over these connections.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/admin.h"
#include "conn.h"
#include "counters.h"
#include "keys.h"
#include "sentinel.h"
#include "slotmap.h"

_Static_assert(DMUTEX__ADMIN_KEY_MAX == DMUTEX__KEY_MAX, "core/admin.h's key size is not the backend's");

struct dmutex__admin {
	const struct dmutex__backend_cfg *cfg;
	size_t nnodes;                  /* cfg->nnodes; a cluster: its masters, once resolved */
	struct dmutex__node *nodes;     /* nnodes */
	/* A cluster: the slot map read at resolve, and the map's member index
	 * of each node. */
	struct dmutex__slotmap *map;
	int *member;
};

static void
nodes_free(struct dmutex__admin *a)
{
	for (size_t i = 0; a->nodes && i < a->nnodes; i++)
		dmutex__node_fini(&a->nodes[i]);
	free(a->nodes);
}

int
dmutex__admin_open(const struct dmutex__backend_cfg *cfg, struct dmutex__admin **out)
{
	struct dmutex__admin *a = calloc(1, sizeof *a);
	int err;

	if (!a)
		return ENOMEM;
	a->cfg = cfg;
	/* A cluster's nodes are known once resolved (dmutex__admin_resolve). */
	if (cfg->nodes[0].cluster) {
		*out = a;
		return 0;
	}
	if (!(a->nodes = calloc(cfg->nnodes, sizeof *a->nodes))) {
		free(a);
		return ENOMEM;
	}
	for (size_t i = 0; i < cfg->nnodes; i++) {
		/* A file the URL names (password_file, tls_*) is unusable:
		 * logged, naming it. */
		if ((err = dmutex__master_init(&a->nodes[i], &cfg->nodes[i],
				cfg->connect_timeout_ms, cfg->command_timeout_ms))) {
			a->nnodes = i;
			nodes_free(a);
			free(a);
			return err == ENOMEM ? ENOMEM : EINVAL;
		}
	}
	a->nnodes = cfg->nnodes;
	*out = a;
	return 0;
}

/* The masters of a cluster, from the slot map the seeds give: each a node
 * of its own, serving the slots the map says. */
int
dmutex__admin_resolve(struct dmutex__admin *a)
{
	const struct dmutex__node_addr *tmpl = &a->cfg->nodes[0];
	int64_t deadline = dmutex__now_ns() + (int64_t)a->cfg->connect_timeout_ms * DMUTEX__MS;
	size_t n = 0;

	if (!tmpl->cluster || a->map)
		return 0;
	if (!(a->map = calloc(1, sizeof *a->map)))
		return ENOMEM;
	dmutex__slotmap_init(a->map, tmpl, a->cfg->connect_timeout_ms, a->cfg->command_timeout_ms);
	/* Logged (no seed answered, or a file of the URL is unusable). */
	if (dmutex__slotmap_refresh(a->map, deadline, 1, 1))
		return EIO;
	if (!(a->nodes = calloc(DMUTEX__MEMBERS_MAX, sizeof *a->nodes)) ||
			!(a->member = calloc(DMUTEX__MEMBERS_MAX, sizeof *a->member)))
		return ENOMEM;
	for (size_t m = 0; m < DMUTEX__MEMBERS_MAX && dmutex__slotmap_node(a->map, m); m++) {
		int serves = 0;
		for (unsigned slot = 0; slot < DMUTEX__SLOTS && !serves; slot++)
			serves = dmutex__slotmap_owner(a->map, slot) == (int)m;
		/* A replica (a seed) serves none: its keys are its master's. */
		if (!serves)
			continue;
		if (dmutex__node_init(&a->nodes[n], dmutex__slotmap_node(a->map, m)->addr,
				a->cfg->connect_timeout_ms, a->cfg->command_timeout_ms))
			return ENOMEM;
		a->member[n++] = (int)m;
		a->nnodes = n;
	}
	return 0;
}

void
dmutex__admin_close(struct dmutex__admin *a)
{
	if (!a)
		return;
	nodes_free(a);
	free(a->member);
	if (a->map)
		dmutex__slotmap_fini(a->map);
	free(a->map);
	free(a);
}

size_t
dmutex__admin_masters(const struct dmutex__admin *a)
{
	return a->nnodes;
}

int
dmutex__admin_cluster(const struct dmutex__admin *a)
{
	return a->cfg->nodes[0].cluster;
}

const char *
dmutex__admin_master_name(const struct dmutex__admin *a, size_t i)
{
	return a->nodes[i].addr->display;
}

const char *
dmutex__admin_url_name(const struct dmutex__admin *a)
{
	return a->cfg->nodes[0].display;
}

struct dmutex__conn *
dmutex__admin_connect(struct dmutex__admin *a, size_t i)
{
	/* NULL: the library logged why (refused, timeout, AUTH, SELECT). */
	return dmutex__node_connect(&a->nodes[i]);
}

int
dmutex__admin_serves(const struct dmutex__admin *a, size_t i, const char *name)
{
	char key[DMUTEX__KEY_MAX];

	if (!a->map)
		return 1;
	dmutex__key(key, a->cfg->prefix, "meta", name);
	return dmutex__slotmap_owner(a->map, dmutex__key_slot(key, strlen(key))) == a->member[i];
}

size_t
dmutex__admin_counters_master(const struct dmutex__admin *a)
{
	char key[DMUTEX__MET_KEY_MAX];
	int owner;

	if (!a->map)
		return 0;
	dmutex__met_key(key, a->cfg->prefix, "total", NULL);
	owner = dmutex__slotmap_owner(a->map, dmutex__key_slot(key, strlen(key)));
	for (size_t i = 0; i < a->nnodes; i++)
		if (a->member[i] == owner)
			return i;
	return 0;
}

int
dmutex__admin_key(char *buf, const char *prefix, const char *kind, const char *name)
{
	return dmutex__key(buf, prefix, kind, name);
}

int
dmutex__admin_met_key(char *buf, const char *prefix, const char *what, const char *name)
{
	_Static_assert(DMUTEX__ADMIN_MET_KEY_MAX == DMUTEX__MET_KEY_MAX, "the door's key size");
	return dmutex__met_key(buf, prefix, what, name);
}

const char *
dmutex__admin_met_field(int f)
{
	return dmutex__met_fields[f];
}

const char *
dmutex__admin_conn_error(const struct dmutex__conn *c)
{
	return c->errstr;
}
