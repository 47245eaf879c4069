/*
 * Scenario 15: a classic thread pool with every object distributed
 * (issue 28 item 2): examples/pool.c built through the shim with its
 * queue's mutex and condition variables distributed too (pool-shim-all),
 * 3 processes x 200 jobs of 4 threads each, against the same program on
 * plain pthreads (pool), in the same run.
 *
 * Redis commands per job are judged as INFO stats counts them
 * (total_commands_processed: every command Redis ran, those a script ran
 * included, EVALSHA and the GET/SET/... inside it each counting), less
 * the INFOs of the counting; INFO commandstats's sum (INFO excluded) is
 * printed beside it, and its breakdown per command.  The job's own
 * work is 2 of them (GET and SET of the ledger).  Time per job is the
 * wall time from the first start to the last exit over the jobs, process
 * start and the client's connection included, for both programs alike.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define POOL_PROCS 3
#define POOL_JOBS 200
#define NCMD 64

struct cmdcount {
	char name[NCMD][48];
	long long calls[NCMD];
	int n;
	long long processed;    /* INFO stats total_commands_processed */
};

static void
count_commands(redisContext *c, struct cmdcount *out)
{
	redisReply *r = bench_cmd(c, "INFO commandstats");
	char *line, *save = NULL, *p;

	memset(out, 0, sizeof *out);
	for (line = r->type == REDIS_REPLY_STRING ? strtok_r(r->str, "\r\n", &save) : NULL; line;
			line = strtok_r(NULL, "\r\n", &save)) {
		char name[48];
		long long calls;

		if (sscanf(line, "cmdstat_%47[^:]:calls=%lld", name, &calls) != 2 || !strcmp(name, "info") ||
				out->n == NCMD)
			continue;
		snprintf(out->name[out->n], sizeof out->name[0], "%s", name);
		out->calls[out->n++] = calls;
	}
	freeReplyObject(r);
	r = bench_cmd(c, "INFO stats");
	if (r->type == REDIS_REPLY_STRING && (p = strstr(r->str, "total_commands_processed:")))
		out->processed = atoll(p + 25);
	freeReplyObject(r);
}

static long long
calls_of(const struct cmdcount *c, const char *name)
{
	for (int i = 0; i < c->n; i++)
		if (!strcmp(c->name[i], name))
			return c->calls[i];
	return 0;
}

/* The url as a user would write it: without the lease_cache=off that
 * main.c adds for the other scenarios. */
static void
user_url(const struct bench *b, char *out, size_t len)
{
	char *p;

	snprintf(out, len, "%s", b->tgt.url);
	if ((p = strstr(out, "lease_cache=off")) && p[15] == '\0')
		p[-1] = '\0';
}

/* Run POOL_PROCS copies of prog; the wall time in ns, or -1. */
static int64_t
run_pool(const struct bench *b, const char *prog, const char *key)
{
	char port[16], jobs[16], url[1024];
	pid_t pid[POOL_PROCS];
	int64_t t0;
	int bad = 0;

	snprintf(port, sizeof port, "%d", b->tgt.port);
	snprintf(jobs, sizeof jobs, "%d", POOL_JOBS);
	user_url(b, url, sizeof url);
	fflush(NULL);
	t0 = bench_now_ns();
	for (int i = 0; i < POOL_PROCS; i++) {
		if ((pid[i] = fork()) == 0) {
			if (!freopen("/dev/null", "w", stdout))
				_exit(126);
			setenv("DMUTEX_URL", url, 1);
			execl(prog, "pool", "-h", b->tgt.host, "-p", port, "-k", key, "-t", "4", "-n", jobs,
					(char *)NULL);
			_exit(127);
		}
		if (pid[i] < 0)
			return -1;
	}
	for (int i = 0; i < POOL_PROCS; i++) {
		int st;

		while (waitpid(pid[i], &st, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			bad = 1;
	}
	if (bad)
		fprintf(stderr, "bench: pool: %s failed\n", prog);
	return bad ? -1 : bench_now_ns() - t0;
}

static void
program_path(char *out, size_t len, const char *prog)
{
	const char *dir = getenv("BENCH_EXAMPLES");
	char self[PATH_MAX];
	ssize_t n;

	if (dir && *dir) {
		snprintf(out, len, "%s/%s", dir, prog);
		return;
	}
	n = readlink("/proc/self/exe", self, sizeof self - 1);
	self[n > 0 ? n : 0] = '\0';
	if (strrchr(self, '/'))
		*strrchr(self, '/') = '\0';
	snprintf(out, len, "%s/../examples/%s", self, prog);
}

int
bench_pool(struct bench *b)
{
	char native[PATH_MAX + 32], shim[PATH_MAX + 32], key[96], breakdown[400] = "";
	struct cmdcount before, after;
	redisContext *c;
	int64_t t_native, t_shim;
	double jobs = POOL_PROCS * POOL_JOBS, total = 0, per_job;
	struct row *r;

	program_path(native, sizeof native, "pool");
	program_path(shim, sizeof shim, "pool-shim-all");
	if (!b->tgt.host[0]) {
		/* examples/pool takes a host and a port, nothing else */
		fprintf(stderr, "bench: pool: skipped, the programs need a redis:// server\n");
		return 0;
	}
	if (access(native, X_OK) || access(shim, X_OK)) {
		fprintf(stderr, "bench: pool: needs %s and %s (ninja examples/pool "
				"examples/pool-shim-all, or $BENCH_EXAMPLES)\n", native, shim);
		return -1;
	}
	if (!(c = bench_connect(&b->tgt)))
		return -1;
	snprintf(key, sizeof key, "%s:pool:native", b->run_id);
	t_native = run_pool(b, native, key);
	snprintf(key, sizeof key, "%s:pool:ledger", b->run_id);
	count_commands(c, &before);
	t_shim = run_pool(b, shim, key);
	count_commands(c, &after);
	redisFree(c);
	if (t_native < 0 || t_shim < 0)
		return -1;

	r = row_new(15, "(why) thread pool on plain pthreads, 3 processes x 200 jobs");
	r->median_ns = t_native / jobs;
	row_metric(r, "time per job", t_native / jobs, "ns");
	r = row_new(15, "thread pool, every object distributed, 3 processes x 200 jobs");
	r->median_ns = t_shim / jobs;
	r->ratio = (double)t_shim / t_native;
	snprintf(r->ratio_to, sizeof r->ratio_to, "native pool");
	for (int i = 0; i < after.n; i++) {
		after.calls[i] -= calls_of(&before, after.name[i]);
		total += after.calls[i];
	}
	/* Most first, down to a tenth of a command per job. */
	for (;;) {
		int top = -1;
		size_t len = strlen(breakdown);

		for (int i = 0; i < after.n; i++)
			if (after.calls[i] >= jobs / 10 && (top < 0 || after.calls[i] > after.calls[top]))
				top = i;
		if (top < 0)
			break;
		snprintf(breakdown + len, sizeof breakdown - len, "%s%s %.1f", len ? ", " : "",
				after.name[top], after.calls[top] / jobs);
		after.calls[top] = 0;
	}
	/* Judged as the issue words it, by INFO stats: total_commands_processed
	 * counts the commands scripts run too; less the 2 INFOs of the
	 * counting itself (before's INFO stats, after's INFO commandstats). */
	per_job = (double)(after.processed - before.processed - 2) / jobs;
	row_metric(r, "time per job", t_shim / jobs, "ns");
	row_metric(r, "commands per job (commandstats)", total / jobs, "");
	row_metric(r, "INFO stats commands per job", per_job, "");
	row_target(r, per_job <= 20 ? MET_YES : MET_NO, "≤ 20 Redis commands per job (%.1f)", per_job);
	target_line("2: thread pool, every object distributed, 3 processes × 200 jobs: ≤ 20 Redis "
			"commands per job (INFO stats)", r->met, "%.1f commands per job (commandstats: %.1f); "
			"%.1f µs a job against %.1f µs native (%.2f×)", per_job, total / jobs,
			t_shim / jobs / 1e3, t_native / jobs / 1e3, (double)t_shim / t_native);
	row_note(r, "per job: %s", breakdown);
	if (!b->opt.json)
		fprintf(stderr, "bench: pool: per job: %s\n", breakdown);
	return 0;
}
