/*
 * dmutex: a distributed flock(1) for shell users, and an operator's view of
 * the locks in Redis.  See dmutex(1).
 *
 * This file only dispatches: it reads the options that come before the
 * command name and hands the rest to the subcommand.  A subcommand is one
 * file (cli_cmd_NAME in NAME.c) and a row of the table below; what
 * subcommands share lives in helper files (cli.c, conn.c, inspect.c...),
 * never here, so that nothing depends on main.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "dmutex_config.h"
#include "cli.h"

static const struct {
	const char *name;
	int (*run)(int argc, char **argv, const char *url);
	const char *args;
	const char *what;
} commands[] = {
	{ "run", cli_cmd_run,
	  "[-n | -w SECONDS] [--lease MS] [--robust] [--grace SECONDS] NAME -- COMMAND [ARGS...]",
	  "hold lock NAME while COMMAND runs; exit with COMMAND's status" },
	{ "status", cli_cmd_status, "[--json] NAME...",
	  "holder, since when, lease left, fencing token, robust state, waiters" },
	{ "list", cli_cmd_list, "[--json] [PATTERN]",
	  "every lock under the prefix (PATTERN: a Redis glob, default *)" },
	{ "reset", cli_cmd_reset, "[--force] NAME",
	  "force-release NAME and clear an owner-died or not-recoverable state" },
	{ "metrics", cli_cmd_metrics, "[--top N] [--listen ADDR:PORT]",
	  "per-lock counters of every process, Prometheus text format (or served over HTTP)" },
	{ "top", cli_cmd_top, "[--interval SECONDS] [--names N] [--once]",
	  "a live view of the locks, most contended first (q quits)" },
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void
usage(FILE *f)
{
	fputs("usage: dmutex [--url URL] COMMAND [ARGS...]\n\n", f);
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  dmutex %s %s\n        %s\n", commands[i].name, commands[i].args,
				commands[i].what);
	fputs("\nThe backend is --url URL, else $DMUTEX_URL, else redis://127.0.0.1:6379.\n"
	      "`dmutex COMMAND --help` describes one command; exit statuses are in dmutex(1).\n", f);
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "url", required_argument, NULL, 'u' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 }
	};
	const char *url = NULL;
	const char *cmd;
	int c;

	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'u':
			url = optarg;
			break;
		case 'h':
			usage(stdout);
			return CLI_OK;
		case 'V':
			printf("dmutex %s\n", DMUTEX_VERSION);
			return CLI_OK;
		default:
			usage(stderr);
			return CLI_USAGE;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return CLI_USAGE;
	}
	cmd = argv[optind];
	argc -= optind;
	argv += optind;
	optind = 0;     /* glibc: start the subcommand's getopt afresh */
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(cmd, commands[i].name))
			return commands[i].run(argc, argv, url);
	if (!strcmp(cmd, "help")) {
		usage(stdout);
		return CLI_OK;
	}
	fprintf(stderr, "dmutex: unknown command '%s' (", cmd);
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(stderr, "%s%s", i ? ", " : "", commands[i].name);
	fputs(")\n", stderr);
	return CLI_USAGE;
}
