/*
 * Scenario 5: 1, 2, 4 and 8 threads of one process on one lock.  Threads of
 * a process queue locally, so the Redis commands per acquisition should not
 * grow with their number: counted from INFO commandstats before and after
 * (every command, the ones scripts call inside included; INFO excluded).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "dmutex.h"

#define MAX_THREADS 8

struct shared {
	dmutex_t m;
	pthread_barrier_t start;
	int64_t stop_ns;
	atomic_int inside;
	atomic_long overlaps, errors;
	long count[MAX_THREADS];
};

struct worker {
	struct shared *sh;
	int idx;
};

static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	struct shared *sh = w->sh;

	pthread_barrier_wait(&sh->start);
	while (bench_now_ns() < sh->stop_ns) {
		if (dmutex_lock(&sh->m)) {
			atomic_fetch_add(&sh->errors, 1);
			break;
		}
		if (atomic_fetch_add(&sh->inside, 1) != 0)
			atomic_fetch_add(&sh->overlaps, 1);
		sh->count[w->idx]++;
		atomic_fetch_sub(&sh->inside, 1);
		if (dmutex_unlock(&sh->m)) {
			atomic_fetch_add(&sh->errors, 1);
			break;
		}
	}
	return NULL;
}

/* Returns commands per acquisition, or a negative value on failure. */
static double
run(struct bench *b, dmutex_client_t *cli, redisContext *c, int nthreads, double base)
{
	static struct shared sh;
	struct worker w[MAX_THREADS];
	pthread_t t[MAX_THREADS];
	struct cmdstats before, after;
	dmutex_attr_t a;
	char name[64], label[64];
	int64_t t0, t1;
	long total = 0, lo = -1, hi = 0;
	double per;
	struct row *r;

	memset(&sh, 0, sizeof sh);
	snprintf(name, sizeof name, "%s:threads%d", b->run_id, nthreads);
	dmutex_attr_init(&a);
	dmutex_attr_setclient(&a, cli);
	if (dmutex_init(&sh.m, name, &a))
		return -1;
	dmutex_attr_destroy(&a);
	pthread_barrier_init(&sh.start, NULL, (unsigned)nthreads + 1);
	for (int i = 0; i < nthreads; i++) {
		w[i] = (struct worker){ &sh, i };
		pthread_create(&t[i], NULL, worker_main, &w[i]);
	}
	bench_cmdstats(c, &before);
	t0 = bench_now_ns();
	sh.stop_ns = t0 + (b->opt.quick ? 500 : 2000) * (int64_t)1000000;
	pthread_barrier_wait(&sh.start);
	for (int i = 0; i < nthreads; i++)
		pthread_join(t[i], NULL);
	t1 = bench_now_ns();
	bench_cmdstats(c, &after);
	pthread_barrier_destroy(&sh.start);
	dmutex_destroy(&sh.m);
	if (atomic_load(&sh.errors))
		return -1;
	for (int i = 0; i < nthreads; i++) {
		total += sh.count[i];
		if (lo < 0 || sh.count[i] < lo)
			lo = sh.count[i];
		if (sh.count[i] > hi)
			hi = sh.count[i];
	}
	per = (double)(after.total - before.total) / (double)total;
	snprintf(label, sizeof label, "%d thread%s of one process, one lock", nthreads,
			nthreads > 1 ? "s" : "");
	r = row_new(5, label);
	row_metric(r, "threads", nthreads, "");
	row_metric(r, "acq/s", (double)total / (double)(t1 - t0) * 1e9, "/s");
	row_metric(r, "redis commands/acq", per, "");
	row_metric(r, "of which requests", (double)(after.client - before.client) / (double)total, "");
	row_metric(r, "min share", 100.0 * lo / total, "%");
	row_metric(r, "max share", 100.0 * hi / total, "%");
	row_metric(r, "overlaps", (double)atomic_load(&sh.overlaps), "");
	if (base > 0)
		row_target(r, per <= base * 1.05 ? MET_YES : MET_NO,
				"commands/acq ≤ 1 thread's (%.2f) + 5 %%", base);
	if (atomic_load(&sh.overlaps))
		row_note(r, "MUTUAL EXCLUSION VIOLATED: %ld overlapping holds", atomic_load(&sh.overlaps));
	return per;
}

int
bench_threads(struct bench *b)
{
	static const int counts[] = { 1, 2, 4, 8 };
	dmutex_client_t *cli;
	redisContext *c = bench_connect(&b->tgt);
	double base = 0;
	int err, rc = 0;

	if (!c)
		return -1;
	if ((err = dmutex_client_open(&cli, b->tgt.url))) {
		fprintf(stderr, "bench: dmutex_client_open: %s\n", dmutex_strerror(err));
		redisFree(c);
		return -1;
	}
	for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
		double per = run(b, cli, c, counts[i], base);
		if (per < 0) {
			fprintf(stderr, "bench: threads: %d threads failed\n", counts[i]);
			rc = -1;
			break;
		}
		if (i == 0)
			base = per;
	}
	dmutex_client_close(cli);
	redisFree(c);
	return rc;
}
