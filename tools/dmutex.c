/*
 * dmutex: a distributed flock(1) for shell users, and an operator's view of
 * the locks in Redis.  See dmutex(1).
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmutex.h"
#include "dmutex_config.h"
#include "cli.h"

static const char usage[] =
	"usage: dmutex [--url URL] COMMAND [ARGS...]\n"
	"\n"
	"  dmutex run [-n | -w SECONDS] [--lease MS] [--robust] [--grace SECONDS] NAME -- COMMAND [ARGS...]\n"
	"        hold lock NAME while COMMAND runs; exit with COMMAND's status\n"
	"  dmutex status [--json] NAME...\n"
	"        holder, since when, lease left, fencing token, robust state, waiters\n"
	"  dmutex list [--json] [PATTERN]\n"
	"        every lock under the prefix (PATTERN: a Redis glob, default *)\n"
	"  dmutex reset [--force] NAME\n"
	"        force-release NAME and clear an owner-died or not-recoverable state\n"
	"\n"
	"The backend is --url URL, else $DMUTEX_URL, else redis://127.0.0.1:6379.\n"
	"`dmutex COMMAND --help` describes one command; exit statuses are in dmutex(1).\n";

void
cli_err(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fprintf(stderr, "dmutex: %s\n", msg);
}

const char *
cli_url(const char *opt_url)
{
	const char *u = opt_url;

	if (!u || !*u)
		u = getenv("DMUTEX_URL");
	if (!u || !*u)
		u = "redis://127.0.0.1:6379";
	return u;
}

int
cli_check_name(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > DMUTEX_NAME_MAX) {
		cli_err("a lock name is 1 to %d bytes, not %zu", DMUTEX_NAME_MAX, n);
		return CLI_USAGE;
	}
	return 0;
}

int
cli_parse_seconds(const char *s, int64_t *ms)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 0) || v > 1e9)
		return -1;
	*ms = (int64_t)(v * 1000 + 0.5);
	return 0;
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

	/* Before anything opens a descriptor: COMMAND inherits only these. */
	cli_fd_snapshot();
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'u':
			url = optarg;
			break;
		case 'h':
			fputs(usage, stdout);
			return CLI_OK;
		case 'V':
			printf("dmutex %s\n", DMUTEX_VERSION);
			return CLI_OK;
		default:
			fputs(usage, stderr);
			return CLI_USAGE;
		}
	}
	if (optind >= argc) {
		fputs(usage, stderr);
		return CLI_USAGE;
	}
	cmd = argv[optind];
	argc -= optind;
	argv += optind;
	optind = 0;     /* glibc: start the subcommand's getopt afresh */
	if (!strcmp(cmd, "run"))
		return cli_run(argc, argv, url);
	if (!strcmp(cmd, "status"))
		return cli_status(argc, argv, url);
	if (!strcmp(cmd, "list"))
		return cli_list(argc, argv, url);
	if (!strcmp(cmd, "reset"))
		return cli_reset(argc, argv, url);
	if (!strcmp(cmd, "help")) {
		fputs(usage, stdout);
		return CLI_OK;
	}
	cli_err("unknown command '%s' (run, status, list, reset)", cmd);
	return CLI_USAGE;
}
