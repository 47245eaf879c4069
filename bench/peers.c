/*
 * The peers, against the same server in the same run.  Each is a program in
 * the peers directory, run once per measurement:
 *
 *   PROGRAM URL uncontended ITERATIONS   ->  uncontended MEDIAN_NS P99_NS
 *   PROGRAM URL handoff PROCS SECONDS    ->  handoff PROCS ACQ_PER_S MEDIAN_NS
 *                                            P99_NS MIN_SHARE MAX_SHARE
 *
 * plus "name TEXT" and, on failure, "error TEXT" (shares are fractions).
 * Each measurement is taken for dmutex and then for every peer back to
 * back: on a shared machine, figures taken minutes apart would compare
 * the machine's moods, not the libraries.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

struct peer_cmd {
	const char *name;
	const char *interp;     /* absolute path, or a name looked up in PATH */
	const char *script;
	const char *needs;      /* a file in the peers dir the peer needs */
};

static const struct peer_cmd cmds[] = {
	/* Debian's python3-redis: /usr/bin/python3, not a pyenv's python3. */
	{ "redis-py Lock (Debian python3-redis)", "/usr/bin/python3", "redis_py_lock.py", NULL },
	{ "node-redlock (npm redlock + ioredis)", "node", "redlock_bench.js", "node_modules/redlock" },
};
#define NCMDS (sizeof cmds / sizeof *cmds)

static void
run_one(struct bench *b, const struct peer_cmd *pc, const char *url, const char *args,
		struct peer *p)
{
	char cmd[2048], line[512];
	FILE *f;
	int st;

	if (!p->ok)
		return;
	snprintf(cmd, sizeof cmd, "'%s' '%s/%s' '%s' %s", pc->interp, b->opt.peers_dir, pc->script,
			url, args);
	if (!b->opt.json)
		fprintf(stderr, "bench: peer: %s %s\n", pc->script, args);
	fflush(NULL);
	if (!(f = popen(cmd, "r"))) {
		p->ok = 0;
		snprintf(p->why, sizeof p->why, "cannot run %s", pc->interp);
		return;
	}
	while (fgets(line, sizeof line, f)) {
		struct peer_handoff h;
		line[strcspn(line, "\n")] = '\0';
		if (!strncmp(line, "name ", 5)) {
			snprintf(p->name, sizeof p->name, "%.90s", line + 5);
		} else if (!strncmp(line, "uncontended ", 12)) {
			sscanf(line + 12, "%lf %lf", &p->unc_median_ns, &p->unc_p99_ns);
		} else if (!strncmp(line, "handoff ", 8) && p->nh < HANDOFF_SETS &&
				sscanf(line + 8, "%d %lf %lf %lf %lf %lf", &h.procs, &h.acq_per_s, &h.median_ns,
					&h.p99_ns, &h.min_share, &h.max_share) == 6) {
			p->h[p->nh++] = h;
		} else if (!strncmp(line, "error ", 6)) {
			p->ok = 0;
			snprintf(p->why, sizeof p->why, "%.190s", line + 6);
		}
	}
	st = pclose(f);
	if (st != 0 && p->ok) {
		p->ok = 0;
		snprintf(p->why, sizeof p->why, "%s %s: exit status %d", pc->script, args, st);
	}
}

size_t
bench_peers(struct bench *b, struct peer *out, size_t max)
{
	char url[1024], args[64], path[1024];
	size_t n = NCMDS < max ? NCMDS : max;

	if (b->tgt.path[0]) {
		fprintf(stderr, "bench: the peers need a TCP server, not %s\n", b->tgt.url);
		return 0;
	}
	if (b->tgt.pass[0])
		snprintf(url, sizeof url, "redis://%s:%s@%s:%d/%d", b->tgt.user, b->tgt.pass,
				b->tgt.host, b->tgt.port, b->tgt.db);
	else
		snprintf(url, sizeof url, "redis://%s:%d/%d", b->tgt.host, b->tgt.port, b->tgt.db);
	for (size_t i = 0; i < n; i++) {
		memset(&out[i], 0, sizeof out[i]);
		snprintf(out[i].name, sizeof out[i].name, "%s", cmds[i].name);
		out[i].ok = 1;
		if (cmds[i].needs) {
			snprintf(path, sizeof path, "%s/%s", b->opt.peers_dir, cmds[i].needs);
			if (access(path, F_OK)) {
				out[i].ok = 0;
				snprintf(out[i].why, sizeof out[i].why,
						"%.120s missing (scripts/bench --peers installs it)", path);
			}
		}
	}

	/* Scenario 2, then each process count of scenario 4: dmutex first,
	 * the peers right after it. */
	bench_uncontended(b);
	snprintf(args, sizeof args, "uncontended %d", b->opt.quick ? 1000 : 3000);
	for (size_t i = 0; i < n; i++)
		run_one(b, &cmds[i], url, args, &out[i]);
	for (int k = 0; k < HANDOFF_SETS; k++) {
		size_t n0 = rows_count();

		if (!bench_handoff_one(b, bench_handoff_procs[k]) && rows_count() > n0)
			bench_handoff_judge(rows_at(n0), bench_handoff_procs[k]);
		snprintf(args, sizeof args, "handoff %d %d", bench_handoff_procs[k],
				b->opt.quick ? 1 : 3);
		for (size_t i = 0; i < n; i++)
			run_one(b, &cmds[i], url, args, &out[i]);
	}

	if (n < max) {
		memset(&out[n], 0, sizeof out[n]);
		snprintf(out[n].name, sizeof out[n].name, "a C or C++ lock from Debian");
		snprintf(out[n].why, sizeof out[n].why,
				"none packaged in Debian 12 (apt-cache search redis: clients only — "
				"libhiredis, libpocoredis80 — no lock)");
		n++;
	}
	return n;
}
