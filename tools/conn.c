/*
 * Direct connections for the operator views: the library's URL parser and
 * its authenticated connect, so that an address, password, db or prefix
 * means exactly what it means to the library.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

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
		if ((err = dmutex__node_init(&cc->nodes[i], &cc->cfg.nodes[i],
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

int
cli_conn_connect(struct cli_conn *cc, int quiet)
{
	int status = 0;

	for (size_t i = 0; i < cc->cfg.nnodes; i++) {
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
		for (size_t i = 0; i < cc->cfg.nnodes; i++) {
			if (cc->ctx && cc->ctx[i])
				dmutex__conn_free(cc->ctx[i]);
			dmutex__node_fini(&cc->nodes[i]);
		}
	}
	free(cc->ctx);
	free(cc->nodes);
	dmutex__config_free(&cc->cfg);
	memset(cc, 0, sizeof *cc);
}

const char *
cli_conn_node(const struct cli_conn *cc, size_t i)
{
	return cc->cfg.nodes[i].display;
}
