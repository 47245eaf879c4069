/*
 * dmutex-bench [--quick] [--json] [--diag] [--only 1,2,...] [--peers DIR]
 *
 * Starts its own redis-server on a free loopback port (or uses $DMUTEX_URL),
 * measures the floor first, then each scenario, and prints one table.
 * Scenario 14 (bench/etcd.c, in a build with -Detcd) starts its own etcd
 * member and prints etcd's rows beside Redis's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "dmutex.h"
#include "harness.h"

#define ALL_SCENARIOS 0xfcfeu   /* bits 1..7, 10..15 */

static void
usage(FILE *f)
{
	fprintf(f, "usage: dmutex-bench [--quick] [--json] [--diag] [--only 1,2,...] [--peers DIR]\n"
			"  --quick      short runs and small counts (the whole run < 1 minute)\n"
			"  --json       JSON on stdout instead of the table\n"
			"  --diag       also the diagnostic rows that judge nothing (scenario 10:\n"
			"               where the fair mutex's time goes, 18 s more in full mode)\n"
			"  --only LIST  run only these scenarios (1 always runs: the floor)\n"
			"  --peers DIR  scenarios 1, 2 and 4 only, each next to the same measurement\n"
			"               of the peers in DIR (redis-py, node-redlock), same server\n"
			"Uses $DMUTEX_URL if set, else starts redis-server on a free port.\n");
}

/* The hiredis side of $DMUTEX_URL: redis://[[user]:pass@]host[:port][/db]
 * or unix://[[user]:pass@]/path[?db=N].  Options are the library's. */
static int
parse_target(struct bench_target *t, const char *url)
{
	const char *p, *end, *at, *q;
	int is_unix;

	memset(t, 0, sizeof *t);
	snprintf(t->url, sizeof t->url, "%s", url);
	if (!strncmp(url, "redis://", 8))
		is_unix = 0;
	else if (!strncmp(url, "unix://", 7))
		is_unix = 1;
	else
		return -1;
	if (strchr(url, ','))
		return -1;      /* several servers: the floor would be ambiguous */
	p = url + (is_unix ? 7 : 8);
	q = strchr(p, '?');
	end = q ? q : p + strlen(p);
	at = memchr(p, '@', (size_t)(end - p));
	if (at) {
		const char *colon = memchr(p, ':', (size_t)(at - p));
		if (colon) {
			snprintf(t->user, sizeof t->user, "%.*s", (int)(colon - p), p);
			snprintf(t->pass, sizeof t->pass, "%.*s", (int)(at - colon - 1), colon + 1);
		} else {
			snprintf(t->pass, sizeof t->pass, "%.*s", (int)(at - p), p);
		}
		p = at + 1;
	}
	if (is_unix) {
		snprintf(t->path, sizeof t->path, "%.*s", (int)(end - p), p);
		if (q && (q = strstr(q, "db=")))
			t->db = atoi(q + 3);
		return 0;
	}
	{
		const char *slash = memchr(p, '/', (size_t)(end - p)), *hend = slash ? slash : end;
		const char *colon = memchr(p, ':', (size_t)(hend - p));
		if (*p == '[')
			return -1;      /* IPv6: not needed by the benchmark */
		snprintf(t->host, sizeof t->host, "%.*s", (int)((colon ? colon : hend) - p), p);
		t->port = colon ? atoi(colon + 1) : 6379;
		if (slash)
			t->db = atoi(slash + 1);
	}
	return t->host[0] ? 0 : -1;
}

static void
machine(struct bench *b)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	struct utsname u;
	char line[512];
	time_t now = time(NULL);
	redisContext *c;

	b->nproc = (int)sysconf(_SC_NPROCESSORS_ONLN);
	snprintf(b->cpu, sizeof b->cpu, "unknown CPU");
	while (f && fgets(line, sizeof line, f)) {
		char *v = strchr(line, ':');
		if (!strncmp(line, "model name", 10) && v) {
			v += strspn(v + 1, " \t") + 1;
			v[strcspn(v, "\n")] = '\0';
			snprintf(b->cpu, sizeof b->cpu, "%s", v);
			break;
		}
	}
	if (f)
		fclose(f);
	if (uname(&u) == 0)
		snprintf(b->kernel, sizeof b->kernel, "%s %s", u.sysname, u.release);
	strftime(b->started, sizeof b->started, "%Y-%m-%d %H:%M UTC", gmtime(&now));
	/* Others' work on the machine shows in the figures: say how much. */
	snprintf(b->loadavg, sizeof b->loadavg, "?");
	if ((f = fopen("/proc/loadavg", "r"))) {
		if (fscanf(f, "%31s", b->loadavg) != 1)
			snprintf(b->loadavg, sizeof b->loadavg, "?");
		fclose(f);
	}
	snprintf(b->redis_version, sizeof b->redis_version, "?");
	if ((c = bench_connect(&b->tgt))) {
		redisReply *r = bench_cmd(c, "INFO server");
		char *v = r->type == REDIS_REPLY_STRING ? strstr(r->str, "redis_version:") : NULL;
		if (v)
			sscanf(v + 14, "%31[^\r\n]", b->redis_version);
		freeReplyObject(r);
		redisFree(c);
	}
}

/* On a server that is not ours, take away what the run left: lock names
 * all carry the run id, and dmutex keeps a meta key per name. */
static void
cleanup(const struct bench *b)
{
	redisContext *c = bench_connect(&b->tgt);
	char cursor[32] = "0", pattern[64];
	long removed = 0;

	if (!c)
		return;
	snprintf(pattern, sizeof pattern, "*%s*", b->run_id);
	do {
		redisReply *r = bench_cmd(c, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
		if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
			freeReplyObject(r);
			break;
		}
		snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
		for (size_t i = 0; i < r->element[1]->elements; i++) {
			redisReply *k = r->element[1]->element[i];
			freeReplyObject(bench_cmd(c, "DEL %b", k->str, k->len));
			removed++;
		}
		freeReplyObject(r);
	} while (strcmp(cursor, "0"));
	redisFree(c);
	if (!b->opt.json)
		fprintf(stderr, "bench: removed %ld keys of this run from %s\n", removed, b->tgt.url);
}

static int
parse_only(const char *s, unsigned *mask)
{
	*mask = 1u << 1;
	while (*s) {
		char *end;
		long v = strtol(s, &end, 10);
		if (end == s || v < 1 || (v > 7 && (v < 10 || v > 15)))
			return -1;
		*mask |= 1u << v;
		s = end + (*end == ',');
		if (*end && *end != ',')
			return -1;
	}
	return 0;
}

int
main(int argc, char **argv)
{
	static struct bench b;
	static char cmdline[1024];
	struct th_redis srv = { 0 };
	struct peer peers[4];
	size_t npeers = 0;
	const char *url = getenv("DMUTEX_URL"), *shown = getenv("BENCH_COMMAND");
	int only = 0, rc = 0;

	b.opt.scenarios = ALL_SCENARIOS;
	for (int i = 1; i < argc; i++) {
		size_t len = strlen(cmdline);
		snprintf(cmdline + len, sizeof cmdline - len, "%s%s", len ? " " : "", argv[i]);
		if (!strcmp(argv[i], "--quick")) {
			b.opt.quick = 1;
		} else if (!strcmp(argv[i], "--json")) {
			b.opt.json = 1;
		} else if (!strcmp(argv[i], "--diag")) {
			b.opt.diag = 1;
		} else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
			if (parse_only(argv[++i], &b.opt.scenarios)) {
				usage(stderr);
				return 2;
			}
			only = 1;
			len = strlen(cmdline);
			snprintf(cmdline + len, sizeof cmdline - len, " %s", argv[i]);
		} else if (!strcmp(argv[i], "--peers") && i + 1 < argc) {
			b.opt.peers_dir = argv[++i];
			len = strlen(cmdline);
			snprintf(cmdline + len, sizeof cmdline - len, " %s", argv[i]);
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (b.opt.peers_dir && only) {
		fprintf(stderr, "bench: --peers runs scenarios 1, 2 and 4; --only does not apply\n");
		return 2;
	}
	if (shown && *shown) {
		b.opt.cmdline = shown;
	} else {
		static char full[1200];
		snprintf(full, sizeof full, "dmutex-bench%s%s", cmdline[0] ? " " : "", cmdline);
		b.opt.cmdline = full;
	}
	snprintf(b.run_id, sizeof b.run_id, "bench%ld", (long)getpid());

	if (url && *url) {
		if (parse_target(&b.tgt, url)) {
			fprintf(stderr, "bench: DMUTEX_URL must be one redis:// or unix:// server\n");
			return 2;
		}
	} else {
		if (th_redis_start(&srv, NULL)) {
			fprintf(stderr, "bench: cannot start redis-server\n");
			return 2;
		}
		parse_target(&b.tgt, srv.url);
		b.server_pid = (int)srv.pid;
	}
	/* The scenarios time round trips to Redis against the hand-made
	 * cycle: a kept lease (on by default, README "Cached leases") would
	 * serve a loop on one name with none.  Scenario 11 measures the cache
	 * with lease_cache=on and off of its own (cache.c). */
	if (!strstr(b.tgt.url, "lease_cache=") &&
	    strlen(b.tgt.url) + sizeof "?lease_cache=off" <= sizeof b.tgt.url)
		strcat(b.tgt.url, strchr(b.tgt.url, '?') ? "&lease_cache=off" : "?lease_cache=off");
	machine(&b);
	if (!b.opt.json)
		fprintf(stderr, "bench: %s mode against %s\n", b.opt.quick ? "quick" : "full", b.tgt.url);

	/* The floor first: every ratio divides by it. */
	if (bench_floor(&b)) {
		rc = 1;
		goto out;
	}
	if (b.opt.peers_dir) {
		/* Scenarios 2 and 4, each next to the same measurement of the peers. */
		npeers = bench_peers(&b, peers, sizeof peers / sizeof *peers);
	} else {
		if ((b.opt.scenarios & (1u << 2)) && bench_uncontended(&b))
			rc = 1;
		if ((b.opt.scenarios & (1u << 3)) && bench_relock(&b))
			rc = 1;
		if ((b.opt.scenarios & (1u << 4)) && bench_handoff(&b))
			rc = 1;
		if ((b.opt.scenarios & (1u << 5)) && bench_threads(&b))
			rc = 1;
		if ((b.opt.scenarios & (1u << 6)) && bench_renewal(&b))
			rc = 1;
		if ((b.opt.scenarios & (1u << 7)) && bench_independent(&b))
			rc = 1;
		if ((b.opt.scenarios & (1u << 10)) && bench_fair(&b))
			rc = 1;
		if ((b.opt.scenarios & (1u << 11)) && bench_cache(&b))
			rc = 1;
		if ((b.opt.scenarios & (1u << 12)) && bench_fresh(&b))
			rc = 1;
		if ((b.opt.scenarios & (1u << 13)) && bench_cond(&b))
			rc = 1;
#ifdef DMUTEX_BENCH_ETCD
		if ((b.opt.scenarios & (1u << 14)) && bench_etcd(&b))
			rc = 1;
#endif
		if ((b.opt.scenarios & (1u << 15)) && bench_pool(&b))
			rc = 1;
	}

	if (b.opt.json) {
		report_json(&b, peers, npeers);
	} else {
		report_table(&b);
		if (b.opt.peers_dir)
			report_peers(&b, peers, npeers);
	}
out:
	if (srv.pid)
		th_redis_stop(&srv);
	else
		cleanup(&b);
	return rc;
}
