/*
 * What every part of the dmutex command shares: its messages, the rule that
 * picks the backend URL, and the checks of arguments that several
 * subcommands take.  It depends on nothing else of the command, so that
 * main (dmutex.c), the subcommands and their helpers all stand above it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmutex.h"
#include "cli.h"

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
