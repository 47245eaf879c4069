/*
 * dmutex-bench-prims: the read-write lock and the semaphore, measured
 * against a redis-server of its own (not part of the test suite).
 *
 *  1. rdlock/unlock by N threads of one process: Redis round trips per
 *     acquisition (INFO commandstats: script calls and pub/sub commands,
 *     not the commands a script runs inside), which stays flat or falls
 *     with N because threads that read at once share one share.
 *  2. a writer's wait while two reader clients keep overlapping read
 *     sections going, as a fraction of the readers' lease.
 *  3. semaphore take+post throughput against the floor: a PING round trip
 *     measured in the same run.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dmutex.h"
#include "harness.h"

static struct th_redis srv;

static double
now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Round trips the server saw since the last reset: script calls and
 * pub/sub (un)subscriptions, not what a script runs inside. */
static long long
round_trips(void)
{
	static const char *const names[] = { "evalsha", "eval", "subscribe", "unsubscribe", "ping" };
	redisReply *r = th_redis_cmd(&srv, "INFO commandstats");
	long long total = 0;

	for (size_t i = 0; r && r->str && i < sizeof names / sizeof names[0]; i++) {
		char key[64];
		const char *p;

		snprintf(key, sizeof key, "cmdstat_%s:calls=", names[i]);
		if ((p = strstr(r->str, key)))
			total += atoll(p + strlen(key));
	}
	if (r)
		freeReplyObject(r);
	return total;
}

static void
reset_stats(void)
{
	redisReply *r = th_redis_cmd(&srv, "CONFIG RESETSTAT");
	if (r)
		freeReplyObject(r);
}

/* ---- 1. readers of one process ---- */

#define RD_ITERS 400
static drwlock_t rd_rw;

static void *
reader(void *arg)
{
	struct timespec work = { 0, 200000 };   /* 0.2 ms of reading */

	(void)arg;
	for (int i = 0; i < RD_ITERS; i++) {
		drwlock_rdlock(&rd_rw);
		nanosleep(&work, NULL);
		drwlock_unlock(&rd_rw);
	}
	return NULL;
}

static void
bench_readers(dmutex_client_t *c)
{
	dmutex_attr_t a;
	double base = 0;

	dmutex_attr_init(&a);
	dmutex_attr_setclient(&a, c);
	drwlock_init(&rd_rw, "bench-rd", &a);
	printf("1. rdlock+unlock by N threads of one process (%d each, 0.2 ms inside)\n", RD_ITERS);
	for (int n = 1; n <= 16; n *= 2) {
		pthread_t t[16];
		long long trips;
		double t0, secs, per;

		reset_stats();
		t0 = now_s();
		for (int i = 0; i < n; i++)
			pthread_create(&t[i], NULL, reader, NULL);
		for (int i = 0; i < n; i++)
			pthread_join(t[i], NULL);
		secs = now_s() - t0;
		trips = round_trips() - 1;      /* the RESETSTAT's own round trip is not counted; INFO is not listed */
		per = (double)trips / (n * RD_ITERS);
		if (n == 1)
			base = per;
		printf("   N=%2d  %8.0f acq/s  %.3f round trips/acq  ratio to N=1: %.2f\n",
				n, n * RD_ITERS / secs, per, base > 0 ? per / base : 0);
	}
	drwlock_destroy(&rd_rw);
}

/* ---- 2. a writer under reader load ---- */

#define LEASE 1000
static atomic_int stop_readers;

struct rproc { dmutex_client_t *c; drwlock_t rw; pthread_t t[2]; };

static void *
overlapping_reader(void *arg)
{
	drwlock_t *rw = arg;
	struct timespec work = { 0, 30 * 1000000L };

	while (!atomic_load(&stop_readers)) {
		drwlock_rdlock(rw);
		nanosleep(&work, NULL);
		drwlock_unlock(rw);
	}
	return NULL;
}

static void
bench_writer(void)
{
	char url[700];
	struct rproc rp[2];
	dmutex_client_t *wc;
	dmutex_attr_t a;
	drwlock_t w;
	double worst = 0, sum = 0;
	const int trials = 5;

	snprintf(url, sizeof url, "%s?lease_ms=%d", srv.url, LEASE);
	atomic_store(&stop_readers, 0);
	/* Two clients: two "processes" as far as the backend is concerned. */
	for (int i = 0; i < 2; i++) {
		dmutex_client_open(&rp[i].c, url);
		dmutex_attr_init(&a);
		dmutex_attr_setclient(&a, rp[i].c);
		drwlock_init(&rp[i].rw, "bench-w", &a);
		for (int k = 0; k < 2; k++) {
			pthread_create(&rp[i].t[k], NULL, overlapping_reader, &rp[i].rw);
			nanosleep(&(struct timespec){ 0, 15 * 1000000L }, NULL);
		}
	}
	dmutex_client_open(&wc, url);
	dmutex_attr_init(&a);
	dmutex_attr_setclient(&a, wc);
	drwlock_init(&w, "bench-w", &a);
	for (int i = 0; i < trials; i++) {
		double t0 = now_s(), d;
		drwlock_wrlock(&w);
		d = now_s() - t0;
		drwlock_unlock(&w);
		sum += d;
		if (d > worst)
			worst = d;
		nanosleep(&(struct timespec){ 0, 200 * 1000000L }, NULL);
	}
	atomic_store(&stop_readers, 1);
	for (int i = 0; i < 2; i++) {
		for (int k = 0; k < 2; k++)
			pthread_join(rp[i].t[k], NULL);
		drwlock_destroy(&rp[i].rw);
		dmutex_client_close(rp[i].c);
	}
	drwlock_destroy(&w);
	dmutex_client_close(wc);
	printf("2. writer wait under 2 reader clients x 2 overlapping threads (30 ms inside), lease %d ms\n", LEASE);
	printf("   mean %.0f ms, worst %.0f ms over %d tries; worst / lease = %.2f (bound: 1/3 + a read section)\n",
			sum / trials * 1000, worst * 1000, trials, worst * 1000 / LEASE);
}

/* ---- 3. semaphore throughput vs the floor ---- */

static void
bench_sem(dmutex_client_t *c)
{
	redisContext *rc = th_redis_connect(&srv, NULL, NULL);
	const int pings = 2000, ops = 1000;
	double t0, ping_s, sem_s;
	dsem_t s;

	t0 = now_s();
	for (int i = 0; i < pings; i++)
		freeReplyObject(redisCommand(rc, "PING"));
	ping_s = (now_s() - t0) / pings;
	redisFree(rc);
	dsem_init(&s, "bench-sem", 1, c, 0);
	t0 = now_s();
	for (int i = 0; i < ops; i++) {
		dsem_wait(&s);
		dsem_post(&s);
	}
	sem_s = (now_s() - t0) / (2 * ops);
	dsem_destroy(&s);
	dsem_unlink("bench-sem", c);
	printf("3. semaphore: %.1f us per wait or post (%.0f ops/s); PING round trip %.1f us; ratio %.2f\n",
			sem_s * 1e6, 1 / sem_s, ping_s * 1e6, sem_s / ping_s);
}

int
main(void)
{
	dmutex_client_t *c;

	if (th_redis_start(&srv, NULL)) {
		fprintf(stderr, "redis-server did not start\n");
		return 1;
	}
	if (dmutex_client_open(&c, srv.url)) {
		fprintf(stderr, "cannot open a client\n");
		return 1;
	}
	bench_readers(c);
	bench_writer();
	bench_sem(c);
	dmutex_client_close(c);
	th_redis_stop(&srv);
	return 0;
}
