/*
 * Direct connections for the operator views, through the library's door
 * (core/admin.h): its URL parser, its masters (Sentinel asked, a
 * cluster's slot map read) and its authenticated connect, so that an
 * address, password, db or prefix means exactly what it means to the
 * library.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* A URL the library refused: its status, said. */
static int
bad_url(int err)
{
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

/* Room for a connection per master, once they are known. */
static int
conns_alloc(struct cli_conn *cc)
{
	size_t n = dmutex__admin_masters(cc->adm);

	cc->nnodes = n;
	if (!(cc->ctx = calloc(n ? n : 1, sizeof *cc->ctx))) {
		cli_err("out of memory");
		return CLI_INTERNAL;
	}
	return 0;
}

int
cli_conn_parse(struct cli_conn *cc, const char *url)
{
	int err;

	memset(cc, 0, sizeof *cc);
	/* The parser logged the problem (never the password). */
	if ((err = dmutex__admin_parse(url, &cc->url)))
		return bad_url(err);
	cc->prefix = dmutex__admin_url_prefix(cc->url);
	/* A file the URL names (password_file, tls_*) is unusable: logged,
	 * naming it.  A cluster's masters are known once connected. */
	if ((err = dmutex__admin_open(dmutex__admin_url_cfg(cc->url), &cc->adm))) {
		dmutex__admin_url_free(cc->url);
		memset(cc, 0, sizeof *cc);
		return bad_url(err == ENOMEM ? ENOMEM : EINVAL);
	}
	cc->cluster = dmutex__admin_cluster(cc->adm);
	if (dmutex__admin_masters(cc->adm) && (err = conns_alloc(cc))) {
		cli_conn_close(cc);
		return err;
	}
	return 0;
}

/* The masters of a cluster, from the slot map the seeds give. */
static int
cluster_connect(struct cli_conn *cc, int quiet)
{
	int err = dmutex__admin_resolve(cc->adm);

	if (err == EIO) {
		if (!quiet)
			cli_err("backend unreachable or refusing: %s", dmutex__admin_url_name(cc->adm));
		return CLI_BACKEND;
	}
	if (err) {
		cli_err("out of memory");
		return CLI_INTERNAL;
	}
	return conns_alloc(cc);
}

int
cli_conn_serves(const struct cli_conn *cc, size_t i, const char *name)
{
	return dmutex__admin_serves(cc->adm, i, name);
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
	return cc->ctx[dmutex__admin_counters_master(cc->adm)];
}

int
cli_conn_connect(struct cli_conn *cc, int quiet)
{
	int status = 0;

	if (!cc->ctx && (status = cluster_connect(cc, quiet)))
		return status;
	for (size_t i = 0; i < cc->nnodes; i++) {
		if (cc->ctx[i])
			continue;
		/* NULL: the library logged why (refused, timeout, AUTH, SELECT). */
		cc->ctx[i] = dmutex__admin_connect(cc->adm, i);
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
	for (size_t i = 0; cc->ctx && i < cc->nnodes; i++)
		if (cc->ctx[i])
			dmutex__conn_free(cc->ctx[i]);
	free(cc->ctx);
	dmutex__admin_close(cc->adm);
	dmutex__admin_url_free(cc->url);
	memset(cc, 0, sizeof *cc);
}

const char *
cli_conn_node(const struct cli_conn *cc, size_t i)
{
	return dmutex__admin_master_name(cc->adm, i);
}
