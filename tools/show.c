/* Small pieces of output shared by status, list, reset and run. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"

long long
cli_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void
cli_duration(char *buf, size_t len, long long ms)
{
	long long s;

	if (ms < 0)
		ms = 0;     /* clocks of two hosts disagree: "0 s" beats "-2 s" */
	s = ms / 1000;
	if (ms < 10000)
		snprintf(buf, len, "%lld.%lld s", s, ms % 1000 / 100);
	else if (s < 60)
		snprintf(buf, len, "%lld s", s);
	else if (s < 3600)
		snprintf(buf, len, "%lld min %lld s", s / 60, s % 60);
	else if (s < 86400)
		snprintf(buf, len, "%lld h %lld min", s / 3600, s % 3600 / 60);
	else
		snprintf(buf, len, "%lld d %lld h", s / 86400, s % 86400 / 3600);
}

void
cli_name_text(char buf[CLI_NAME_TEXT], const char *name)
{
	cli_text(buf, CLI_NAME_TEXT, name);
}

const char *
cli_robust_text(int robust)
{
	return robust == ROBUST_NOTREC ? "not recoverable"
		: robust == ROBUST_OWNER_DIED ? "owner died"
		: robust == ROBUST_EXPIRED ? "expired" : "consistent";
}

const char *
cli_robust_json(int robust)
{
	return robust == ROBUST_NOTREC ? "not_recoverable"
		: robust == ROBUST_OWNER_DIED ? "owner_died"
		: robust == ROBUST_EXPIRED ? "expired" : "consistent";
}

void
cli_holder(char *buf, size_t len, const struct cli_lock *l, int with_tid)
{
	char pid[32] = "", tid[32] = "", host[CLI_TEXT_MAX(sizeof l->host)];

	if (l->pid >= 0)
		snprintf(pid, sizeof pid, " pid %lld", l->pid);
	if (with_tid && l->tid >= 0)
		snprintf(tid, sizeof tid, " tid %lld", l->tid);
	if (!l->host[0] && l->pid < 0)
		snprintf(buf, len, "an unknown holder");
	else
		snprintf(buf, len, "%s%s%s%s", l->host[0] ? cli_text(host, sizeof host, l->host) : "?",
				pid, tid,
				l->held && l->alive == 0 ? " (process gone)" : "");
}

void
cli_since(FILE *f, long long since_ms)
{
	char when[64], ago[32];
	time_t t = (time_t)(since_ms / 1000);
	struct tm tm;

	localtime_r(&t, &tm);
	strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %z", &tm);
	cli_duration(ago, sizeof ago, cli_wall_ms() - since_ms);
	fprintf(f, "  since:       %s (%s ago)\n", when, ago);
}

const char *
cli_alive_text(const struct cli_lock *l)
{
	return !l->held || l->alive < 0 ? "" : l->alive ? "alive" : "process gone";
}
