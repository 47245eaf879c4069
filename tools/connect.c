/*
 * Direct connections for the operator views: the library's URL parser and
 * its authenticated connect, so that an address, password, db or prefix
 * means exactly what it means to the library.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/internal.h"
#include "backend/redis/keys.h"
#include "core/metrics.h"
#include "backend/redis/sentinel.h"
#include "backend/redis/slotmap.h"

int
cli_conn_parse(struct cli_conn *cc, const char *url)
{
	int err;

	memset(cc, 0, sizeof *cc);
	/* The parser logged the problem (never the password). */
	if ((err = dmutex__url_parse(url, &cc->cfg))) {
		if (err == ENOMEM) {
			cli_err("out of memory");
			return CLI_INTERNAL;
		}
		if (err == ENOTSUP)
			cli_err("unsupported backend URL");
		else
			cli_err("bad backend URL");
		return CLI_BADURL;
	}
	/* A cluster's nodes are known once connected (cluster_connect). */
	if (cc->cfg.nodes[0].cluster)
		return 0;
	cc->nnodes = cc->cfg.nnodes;
	cc->nodes = calloc(cc->cfg.nnodes, sizeof *cc->nodes);
	cc->ctx = calloc(cc->cfg.nnodes, sizeof *cc->ctx);
	if (!cc->nodes || !cc->ctx) {
		free(cc->nodes);
		free(cc->ctx);
		dmutex__config_free(&cc->cfg);
		memset(cc, 0, sizeof *cc);
		cli_err("out of memory");
		return CLI_INTERNAL;
	}
	for (size_t i = 0; i < cc->cfg.nnodes; i++) {
		/* A file the URL names (password_file, tls_*) is unusable:
		 * logged, naming it. */
		if ((err = dmutex__master_init(&cc->nodes[i], &cc->cfg.nodes[i],
				cc->cfg.connect_timeout_ms, cc->cfg.command_timeout_ms))) {
			while (i--)
				dmutex__node_fini(&cc->nodes[i]);
			free(cc->nodes);
			free(cc->ctx);
			dmutex__config_free(&cc->cfg);
			memset(cc, 0, sizeof *cc);
			if (err == ENOMEM) {
				cli_err("out of memory");
				return CLI_INTERNAL;
			}
			cli_err("bad backend URL");
			return CLI_BADURL;
		}
	}
	return 0;
}

/* The masters of a cluster, from the slot map the seeds give: each a node
 * of its own, serving the slots the map says. */
static int
cluster_connect(struct cli_conn *cc, int quiet)
{
	const struct dmutex__node_addr *tmpl = &cc->cfg.nodes[0];
	int64_t deadline = dmutex__now_ns() + (int64_t)cc->cfg.connect_timeout_ms * DMUTEX__MS;
	size_t n = 0;

	if (!(cc->map = calloc(1, sizeof *cc->map)))
		goto oom;
	dmutex__slotmap_init(cc->map, tmpl, cc->cfg.connect_timeout_ms, cc->cfg.command_timeout_ms);
	/* Logged (no seed answered, or a file of the URL is unusable). */
	if (dmutex__slotmap_refresh(cc->map, deadline, 1, 1)) {
		if (!quiet)
			cli_err("backend unreachable or refusing: %s", tmpl->display);
		return CLI_BACKEND;
	}
	if (!(cc->nodes = calloc(DMUTEX__MEMBERS_MAX, sizeof *cc->nodes)) ||
			!(cc->ctx = calloc(DMUTEX__MEMBERS_MAX, sizeof *cc->ctx)) ||
			!(cc->member = calloc(DMUTEX__MEMBERS_MAX, sizeof *cc->member)))
		goto oom;
	for (size_t m = 0; m < DMUTEX__MEMBERS_MAX && dmutex__slotmap_node(cc->map, m); m++) {
		int serves = 0;
		for (unsigned slot = 0; slot < DMUTEX__SLOTS && !serves; slot++)
			serves = dmutex__slotmap_owner(cc->map, slot) == (int)m;
		/* A replica (a seed) serves none: its keys are its master's. */
		if (!serves)
			continue;
		if (dmutex__node_init(&cc->nodes[n], dmutex__slotmap_node(cc->map, m)->addr,
				cc->cfg.connect_timeout_ms, cc->cfg.command_timeout_ms))
			goto oom;
		cc->member[n++] = (int)m;
		cc->nnodes = n;
	}
	return 0;
oom:
	cli_err("out of memory");
	return CLI_INTERNAL;
}

int
cli_conn_serves(const struct cli_conn *cc, size_t i, const char *name)
{
	char key[DMUTEX__KEY_MAX];

	if (!cc->map)
		return 1;
	dmutex__key(key, cc->cfg.prefix, "meta", name);
	return dmutex__slotmap_owner(cc->map, dmutex__key_slot(key, strlen(key))) == cc->member[i];
}

struct dmutex__conn *
cli_conn_of(const struct cli_conn *cc, const char *name)
{
	for (size_t i = 0; i < cc->nnodes; i++)
		if (cli_conn_serves(cc, i, name))
			return cc->ctx[i];
	return cc->ctx[0];
}

struct dmutex__conn *
cli_conn_counters(const struct cli_conn *cc)
{
	char key[DMUTEX__MET_KEY_MAX];
	int owner;

	if (!cc->map)
		return cc->ctx[0];
	dmutex__met_key(key, cc->cfg.prefix, "total", NULL);
	owner = dmutex__slotmap_owner(cc->map, dmutex__key_slot(key, strlen(key)));
	for (size_t i = 0; i < cc->nnodes; i++)
		if (cc->member[i] == owner)
			return cc->ctx[i];
	return cc->ctx[0];
}

int
cli_conn_connect(struct cli_conn *cc, int quiet)
{
	int status = 0;

	if (cc->cfg.nodes[0].cluster && !cc->map && (status = cluster_connect(cc, quiet)))
		return status;
	for (size_t i = 0; i < cc->nnodes; i++) {
		if (cc->ctx[i])
			continue;
		/* NULL: the library logged why (refused, timeout, AUTH, SELECT). */
		cc->ctx[i] = dmutex__node_connect(&cc->nodes[i]);
		if (!cc->ctx[i]) {
			if (!quiet)
				cli_err("backend unreachable or refusing: %s", cli_conn_node(cc, i));
			status = CLI_BACKEND;
		}
	}
	return status;
}

int
cli_conn_open(struct cli_conn *cc, const char *url)
{
	int status;

	if ((status = cli_conn_parse(cc, url)))
		return status;
	if ((status = cli_conn_connect(cc, 0)))
		cli_conn_close(cc);
	return status;
}

void
cli_conn_close(struct cli_conn *cc)
{
	if (cc->nodes) {
		for (size_t i = 0; i < cc->nnodes; i++) {
			if (cc->ctx && cc->ctx[i])
				dmutex__conn_free(cc->ctx[i]);
			dmutex__node_fini(&cc->nodes[i]);
		}
	}
	free(cc->ctx);
	free(cc->nodes);
	free(cc->member);
	if (cc->map)
		dmutex__slotmap_fini(cc->map);
	free(cc->map);
	dmutex__config_free(&cc->cfg);
	memset(cc, 0, sizeof *cc);
}

const char *
cli_conn_node(const struct cli_conn *cc, size_t i)
{
	return cc->nodes[i].addr->display;
}
