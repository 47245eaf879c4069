/*
 * torture: the fault-injecting mutual-exclusion checker (see torture.h).
 *
 *   torture [--nodes N] [--procs K] [--threads T] [--lease MS] [--cmd-timeout MS]
 *           [--seconds S | --deterministic] [--seed X] [--faults a,b,...|all]
 *           [--work MS] [--keep] [--expect-all] [--unsafe]
 *           [--lease-cache on|off] [--async-release 0|1] [--idle MS] [--fair]
 *           [--rwlock]
 *   torture check DIR        re-run the checker on a kept run directory
 *
 * TORTURE_SECONDS and TORTURE_SEED override --seconds and --seed, so that
 * `meson test --suite soak` can be made longer, or replay a printed seed.
 * --lease-cache and --async-release choose the variant (README "The fast
 * paths"): the workers' URL says them, and the checker's report windows
 * follow them.  --idle sets idle_ms, the server-side window that
 * outage_long outlasts.  DMUTEX_BIN names the dmutex command (key_reset).
 * --rwlock: each worker shares one read-write lock between its threads,
 * half the rounds writing (fenced, as a mutex's), half reading; one Redis
 * only (drwlock_init(3)); key_reset is `dmutex reset --force` of the
 * read-write lock.
 * Prints one summary line; exits 0 only with zero violations.  A failed
 * run's directory (history files, worker logs, history.txt) is kept.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "run.h"

static struct tt_run R;

static void
usage(void)
{
	fprintf(stderr, "usage: torture [--nodes N] [--procs K] [--threads T] [--lease MS] [--cmd-timeout MS]\n"
			"               [--seconds S | --deterministic] [--seed X] [--faults a,b,...|all]\n"
			"               [--work MS] [--keep] [--expect-all] [--unsafe]\n"
			"               [--lease-cache on|off] [--async-release 0|1] [--idle MS] [--fair]\n"
			"               [--rwlock]\n"
			"       torture check DIR\n"
			"faults:");
	for (int i = 0; i < TT_NFAULTS; i++)
		fprintf(stderr, " %s", tt_fault_names[i]);
	fputc('\n', stderr);
	exit(2);
}

static unsigned
parse_faults(const char *s)
{
	unsigned m = 0;
	char buf[512], *save = NULL;

	if (!strcmp(s, "all"))
		return (1u << TT_NFAULTS) - 1;
	if (!strcmp(s, "none"))
		return 0;
	snprintf(buf, sizeof buf, "%s", s);
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int i;
		for (i = 0; i < TT_NFAULTS && strcmp(t, tt_fault_names[i]); i++)
			;
		if (i == TT_NFAULTS) {
			fprintf(stderr, "torture: unknown fault '%s'\n", t);
			usage();
		}
		m |= 1u << i;
	}
	return m;
}

/* ---- the resource's final state ---- */

static int
read_resource(const struct th_redis *res, int64_t *value, uint64_t **log, size_t *n)
{
	redisReply *rep;
	long long v = th_redis_int(res, "GET value");

	*value = v == LLONG_MIN ? 0 : v;
	if (!(rep = th_redis_cmd(res, "LRANGE log 0 -1")) || rep->type != REDIS_REPLY_ARRAY) {
		if (rep)
			freeReplyObject(rep);
		return -1;
	}
	*n = rep->elements;
	*log = malloc((rep->elements + 1) * sizeof **log);
	for (size_t i = 0; i < rep->elements; i++)
		(*log)[i] = strtoull(rep->element[i]->str, NULL, 10);
	freeReplyObject(rep);
	return 0;
}

/* The variant as the workers run it: the library's defaults are a kept
 * lease and an asynchronous release on one Redis, neither on Redlock. */
static struct tt_checkcfg
checkcfg_of(const struct tt_cfg *cfg)
{
	struct tt_checkcfg cc = { .lease_ms = cfg->lease_ms, .cmd_ms = cfg->cmd_ms, .nodes = cfg->nodes,
		.rwlock = cfg->rwlock };

	cc.lease_cache = cfg->nodes == 1 && cfg->lease_cache != 0;
	cc.async_release = cfg->nodes == 1 && cfg->async_release != 0;
	return cc;
}

/* Saved beside the histories, for `torture check DIR`. */
static void
save_resource(const char *dir, int64_t value, const uint64_t *log, size_t n, const struct tt_cfg *cfg)
{
	char path[600];
	FILE *f;

	snprintf(path, sizeof path, "%s/resource.txt", dir);
	if (!(f = fopen(path, "we")))
		return;
	fprintf(f, "%" PRId64 " %u %u %d %zu %d %d %d\n", value, cfg->lease_ms, cfg->cmd_ms, cfg->nodes, n,
			checkcfg_of(cfg).lease_cache, checkcfg_of(cfg).async_release, cfg->rwlock);
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%" PRIu64 "\n", log[i]);
	fclose(f);
}

static void
print_summary(const struct tt_cfg *cfg, const struct tt_summary *s, double secs, int extra)
{
	printf("torture: %snodes=%d workers=%dx%d seed=%" PRIu64 " %s %.1fs ops=%" PRIu64 " threads=%" PRIu64 " (%" PRIu64 " ended holding) holds=%" PRIu64 " (%" PRIu64 " after a condition wait)"
			" faults[", cfg->rwlock ? "rwlock " : "", cfg->nodes, cfg->procs, cfg->threads, cfg->seed,
			cfg->deterministic ? "deterministic" : "random", secs, s->ops, s->threads, s->ended_holding, s->holds, s->cond_waits);
	for (int i = 0, first = 1; i < TT_NFAULTS; i++)
		if (s->faults[i] || (cfg->faults & (1u << i) && tt_fault_applies(i, cfg->nodes))) {
			printf("%s%s=%" PRIu64, first ? "" : " ", tt_fault_names[i], s->faults[i]);
			first = 0;
		}
	printf("] cache=%s async=%s lost_reported=%" PRIu64 " (onlost %" PRIu64 ", unlock ENOLCK %" PRIu64 ", late %" PRIu64 ") lock_enolck=%" PRIu64 " stale_rejected=%" PRIu64
			" writes_accepted=%" PRIu64 " value=%" PRId64 " lock_eio=%" PRIu64 " unlock_eio=%" PRIu64
			" lock_timeouts=%" PRIu64 " ownerdead=%" PRIu64 " killed=%" PRIu64 " kept_samples=%" PRIu64 " keys_taken=%" PRIu64 " violations=%" PRIu64 "\n",
			checkcfg_of(cfg).lease_cache ? "on" : "off", checkcfg_of(cfg).async_release ? "on" : "off",
			s->holds_lost, s->lost_by_onlost, s->lost_at_unlock, s->late_reports, s->lock_enolck, s->stale_rejected, s->writes_accepted,
			s->final_value, s->lock_eio, s->unlock_eio, s->lock_timeout, s->ownerdead, s->killed,
			s->kept_samples, s->keys_taken, s->violations + (uint64_t)extra);
	fflush(stdout);
}

static int
check_only(const char *dir)
{
	char path[600];
	FILE *f;
	int64_t value;
	size_t n;
	uint64_t *log;
	struct tt_summary s;
	struct tt_cfg cfg = { 0 };
	struct tt_checkcfg cc;

	snprintf(path, sizeof path, "%s/resource.txt", dir);
	if (!(f = fopen(path, "re")) || fscanf(f, "%" SCNd64 " %u %u %d %zu %d %d %d", &value, &cc.lease_ms, &cc.cmd_ms,
			&cc.nodes, &n, &cc.lease_cache, &cc.async_release, &cc.rwlock) != 8) {
		fprintf(stderr, "torture check: %s: unreadable\n", path);
		return 2;
	}
	log = malloc((n + 1) * sizeof *log);
	for (size_t i = 0; i < n; i++)
		if (fscanf(f, "%" SCNu64, &log[i]) != 1)
			return 2;
	fclose(f);
	tt_check(dir, &s, value, log, n, &cc);
	cfg.nodes = cc.nodes;
	cfg.lease_ms = cc.lease_ms;
	cfg.lease_cache = cc.lease_cache;
	cfg.async_release = cc.async_release;
	cfg.rwlock = cc.rwlock;
	print_summary(&cfg, &s, 0, 0);
	free(log);
	return s.violations ? 1 : 0;
}

/* ---- set-up and tear-down ---- */

static int
setup(struct tt_run *r)
{
	const char *tmp = getenv("TMPDIR");
	char *u = r->url;
	size_t left = sizeof r->url;
	ssize_t len;
	char variant[128] = "";

	/* The variant: client-wide options, on the first URL's query. */
	if (r->cfg.lease_cache >= 0)
		snprintf(variant + strlen(variant), sizeof variant - strlen(variant), "&lease_cache=%s",
				r->cfg.lease_cache ? "on" : "off");
	if (r->cfg.async_release >= 0)
		snprintf(variant + strlen(variant), sizeof variant - strlen(variant), "&async_release=%d",
				r->cfg.async_release);
	if (r->cfg.idle_ms)
		snprintf(variant + strlen(variant), sizeof variant - strlen(variant), "&idle_ms=%u", r->cfg.idle_ms);
	snprintf(r->dir, sizeof r->dir, "%s/torture-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(r->dir)) {
		perror("torture: mkdtemp");
		return -1;
	}
	if ((len = readlink("/proc/self/exe", r->exe, sizeof r->exe - 1)) <= 0)
		return -1;
	r->exe[len] = '\0';
	if (!(r->sh = tt_shared_map(r->dir, 1)))
		return -1;
	char path[600];
	snprintf(path, sizeof path, "%s/nemesis.hist", r->dir);
	if ((r->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)) < 0)
		return -1;
	for (int i = 0; i < r->cfg.nodes; i++) {
		/* Restarts keep every acknowledged write (docs/faults.md #17's remedy). */
		if (th_redis_start(&r->lock[i], "appendonly yes\nappendfsync always\n"))
			return -1;
		if (!(r->px[i] = th_proxy_start(r->lock[i].port)))
			return -1;
		if (!(r->dp[i] = tt_dproxy_start(th_proxy_port(r->px[i]))))
			return -1;
		int n = i == 0 ? snprintf(u, left, "redis://127.0.0.1:%d?command_timeout_ms=%u&connect_timeout_ms=%u%s",
				tt_dproxy_port(r->dp[i]), r->cfg.cmd_ms, r->cfg.cmd_ms, variant)
			: snprintf(u, left, ",redis://127.0.0.1:%d", tt_dproxy_port(r->dp[i]));
		u += n;
		left -= (size_t)n;
	}
	if (th_redis_start(&r->res, NULL))
		return -1;
	return 0;
}

static void
teardown(struct tt_run *r, int keep)
{
	for (int w = 0; w < r->nworkers; w++)
		if (r->alive[w]) {
			kill(r->pid[w], SIGCONT);
			kill(r->pid[w], SIGKILL);
			waitpid(r->pid[w], NULL, 0);
		}
	tt_sampler_stop(r);
	for (int i = 0; i < r->cfg.nodes; i++) {
		tt_dproxy_stop(r->dp[i]);
		th_proxy_stop(r->px[i]);
		th_redis_stop(&r->lock[i]);
	}
	th_redis_stop(&r->res);
	if (r->sh)
		munmap(r->sh, sizeof *r->sh);
	if (r->fd > 0)
		close(r->fd);
	if (r->dir[0] && !keep)
		tt_rmtree(r->dir);
	else if (r->dir[0])
		fprintf(stderr, "torture: run directory kept: %s\n", r->dir);
}

/* A read-write lock's hash and sets stay (its fence, idle expiry): held
 * is a writer or a share whose lease has not ended, by the server's clock
 * (the sampler's script). */
static int
rw_held(const struct th_redis *s)
{
	redisReply *rep = th_redis_cmd(s, "EVAL %s 2 " TT_RW_KEYS, tt_rw_sample_lua);
	int held = !rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 3 ||
		rep->element[1]->type != REDIS_REPLY_INTEGER || rep->element[2]->type != REDIS_REPLY_INTEGER ||
		rep->element[1]->integer > 0 || rep->element[2]->integer > 0;

	if (rep)
		freeReplyObject(rep);
	return held;
}

static int
lock_keys_gone(struct tt_run *r)
{
	for (int i = 0; i < r->cfg.nodes; i++)
		if (r->cfg.rwlock ? rw_held(&r->lock[i])
			: th_redis_int(&r->lock[i], "EXISTS dmutex:lock:{" TT_LOCK_NAME "}") != 0)
			return 0;
	return 1;
}

static int
gone_cond(void *arg)
{
	return lock_keys_gone(arg);
}

/* Tell the workers to stop and reap them: each finishes its round. */
static int
stop_workers(struct tt_run *r)
{
	int hung = 0;
	long long until = th_now_ms() + 20000 + 4LL * r->cfg.lease_ms;

	atomic_store(&r->sh->stop, 1);
	for (int w = 0; w < r->nworkers; w++) {
		if (!r->alive[w])
			continue;
		long long left = until - th_now_ms();
		int st = th_wait_child(r->pid[w], left > 0 ? (int)left : 0);
		if (st < 0) {
			fprintf(stderr, "VIOLATION: hung: worker %d (pid %d) did not stop\n", w, r->pid[w]);
			hung++;
		}
		r->alive[w] = 0;
		tt_nrec(r, N_EXITED, 0, st < 0 ? 1000 : st, (uint64_t)r->pid[w], 0);
	}
	return hung;
}

int
main(int argc, char **argv)
{
	struct tt_cfg *cfg = &R.cfg;
	struct tt_summary s;
	int64_t value = 0;
	uint64_t *log = NULL;
	size_t nlog = 0;
	int extra = 0, expect_all = 0;
	const char *env;

	if (argc > 1 && !strcmp(argv[1], "worker"))
		return tt_worker_main(argc, argv);
	if (argc == 3 && !strcmp(argv[1], "check"))
		return check_only(argv[2]);

	*cfg = (struct tt_cfg){ .nodes = 1, .procs = 3, .threads = 2, .lease_ms = 500, .cmd_ms = 100,
		.seconds = 20, .faults = (1u << TT_NFAULTS) - 1, .work_ms = 10,
		.lease_cache = -1, .async_release = -1, .dmutex_bin = getenv("DMUTEX_BIN") };
	cfg->seed = ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--deterministic"))
			cfg->deterministic = 1;
		else if (!strcmp(a, "--keep"))
			cfg->keep = 1;
		else if (!strcmp(a, "--expect-all"))
			expect_all = 1;
		else if (!strcmp(a, "--unsafe"))
			cfg->unsafe = 1;
		else if (!strcmp(a, "--fair"))
			cfg->fair = 1;
		else if (!strcmp(a, "--rwlock"))
			cfg->rwlock = 1;
		else if (!v)
			usage();
		else if (i++, !strcmp(a, "--nodes"))
			cfg->nodes = atoi(v);
		else if (!strcmp(a, "--procs"))
			cfg->procs = atoi(v);
		else if (!strcmp(a, "--threads"))
			cfg->threads = atoi(v);
		else if (!strcmp(a, "--lease"))
			cfg->lease_ms = (unsigned)atoi(v);
		else if (!strcmp(a, "--cmd-timeout"))
			cfg->cmd_ms = (unsigned)atoi(v);
		else if (!strcmp(a, "--seconds"))
			cfg->seconds = atof(v);
		else if (!strcmp(a, "--seed"))
			cfg->seed = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--faults"))
			cfg->faults = parse_faults(v);
		else if (!strcmp(a, "--work"))
			cfg->work_ms = (unsigned)atoi(v);
		else if (!strcmp(a, "--lease-cache"))
			cfg->lease_cache = !strcmp(v, "on");
		else if (!strcmp(a, "--async-release"))
			cfg->async_release = atoi(v) != 0;
		else if (!strcmp(a, "--idle"))
			cfg->idle_ms = (unsigned)atoi(v);
		else
			usage();
	}
	/* A fair mutex never keeps its lease (README "Cached leases"): the
	 * checker's windows are those of a run without the cache. */
	if (cfg->fair)
		cfg->lease_cache = 0;
	/* A read-write lock neither keeps its lease nor releases in the
	 * background (drwlock_unlock waits for its answer); one Redis only. */
	if (cfg->rwlock) {
		cfg->lease_cache = cfg->async_release = 0;
		if (cfg->nodes != 1 || cfg->fair)
			usage();
	}
	if ((env = getenv("TORTURE_SECONDS")) && *env)
		cfg->seconds = atof(env);
	if ((env = getenv("TORTURE_SEED")) && *env)
		cfg->seed = strtoull(env, NULL, 10);
	if (cfg->nodes < 1 || cfg->nodes > TT_MAX_NODES || cfg->procs < 2 || cfg->procs > 16 ||
	    cfg->threads < 1 || cfg->threads > TT_MAX_THREADS || cfg->lease_ms < 100 || cfg->cmd_ms < 1)
		usage();
	R.rng = cfg->seed;
	printf("torture: seed %" PRIu64 " (replay the schedule: TORTURE_SEED=%" PRIu64 ")\n", cfg->seed, cfg->seed);
	fflush(stdout);

	signal(SIGPIPE, SIG_IGN);
	int64_t t0 = tt_now_ns();
	if (setup(&R)) {
		fprintf(stderr, "torture: set-up failed\n");
		teardown(&R, 1);
		return 2;
	}
	for (int i = 0; i < cfg->procs; i++)
		if (tt_spawn_worker(&R)) {
			teardown(&R, 1);
			return 2;
		}
	if (tt_sampler_start(&R) || tt_nemesis(&R)) {
		fprintf(stderr, "torture: the nemesis failed\n");
		teardown(&R, 1);
		return 2;
	}
	tt_nrec(&R, N_END, 0, 0, 0, 0);
	extra += stop_workers(&R);
	tt_sampler_stop(&R);
	/* Every hold ended: no key may outlive its lease (stranded). */
	if (!th_wait_until(gone_cond, &R, (int)cfg->lease_ms + 1000)) {
		fprintf(stderr, "VIOLATION: stranded: the lock key is still there %u ms after every worker stopped\n",
				cfg->lease_ms + 1000);
		extra++;
	}
	if (read_resource(&R.res, &value, &log, &nlog)) {
		fprintf(stderr, "torture: cannot read the resource\n");
		teardown(&R, 1);
		return 2;
	}
	save_resource(R.dir, value, log, nlog, cfg);
	struct tt_checkcfg cc = checkcfg_of(cfg);
	tt_check(R.dir, &s, value, log, nlog, &cc);
	print_summary(cfg, &s, (double)(tt_now_ns() - t0) / 1e9, extra);
	if (expect_all) {
		/* A deterministic run must have shown each fault and its effect. */
		for (int i = 0; i < TT_NFAULTS; i++)
			if ((cfg->faults & (1u << i)) && tt_fault_applies(i, cfg->nodes) && !s.faults[i]) {
				fprintf(stderr, "FAILED: fault %s was never injected\n", tt_fault_names[i]);
				extra++;
			}
		if (!s.holds_lost || !s.lost_by_onlost) {
			fprintf(stderr, "FAILED: no hold was lost and reported: the faults proved nothing\n");
			extra++;
		}
		int lossy = 0;
		for (int i = 0; i < TT_NFAULTS; i++)
			lossy |= tt_fault_loses_keys(i) && (cfg->faults & (1u << i)) && tt_fault_applies(i, cfg->nodes);
		if (lossy && !s.keys_taken) {
			fprintf(stderr, "FAILED: no fault took the lock's key from under a hold\n");
			extra++;
		}
		if (!s.stale_rejected) {
			fprintf(stderr, "FAILED: no stale write was rejected: the stalled holder never wrote late\n");
			extra++;
		}
		if (s.writes_accepted < 50) {
			fprintf(stderr, "FAILED: only %" PRIu64 " writes accepted\n", s.writes_accepted);
			extra++;
		}
	}
	free(log);
	if (cfg->unsafe) {
		/* The checker's self-test: one worker ignored the others' lock. */
		int caught = s.violations > 0;
		teardown(&R, cfg->keep);
		printf("torture: self-test: the checker %s the unsafe worker\n", caught ? "caught" : "MISSED");
		return caught ? 0 : 1;
	}
	teardown(&R, cfg->keep || s.violations || extra);
	return s.violations || extra ? 1 : 0;
}
