/*
 * Scenario 7: 4 threads, each on its own lock name: the library should get
 * out of the way and scale like the hand-made cycle on 4 connections.
 * Next to it, the raw write rate of the same server: pipelined SET, by
 * hiredis here and by redis-benchmark when it is installed.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "dmutex.h"

#define NTHREADS 4
#define PIPELINE 16
#define LAT_CAP 400000

struct worker {
	struct bench *b;
	int idx;
	int by_hand;
	dmutex_client_t *cli;
	pthread_barrier_t *start;
	atomic_int *stop;
	long count;
	int failed;
	struct samples lat;
};

static int
hand_loop(struct worker *w)
{
	struct hand h;
	char what[32];

	snprintf(what, sizeof what, "indep%d", w->idx);
	if (hand_init(&h, w->b, what)) {
		pthread_barrier_wait(w->start);
		return -1;
	}
	pthread_barrier_wait(w->start);
	while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
		int64_t t0 = bench_now_ns();
		if (hand_cycle(&h)) {
			hand_fini(&h);
			return -1;
		}
		samples_add(&w->lat, bench_now_ns() - t0);
		w->count++;
	}
	hand_fini(&h);
	return 0;
}

static int
lib_loop(struct worker *w)
{
	dmutex_attr_t a;
	dmutex_t m;
	char name[64];
	int err;

	snprintf(name, sizeof name, "%s:indep:%d", w->b->run_id, w->idx);
	dmutex_attr_init(&a);
	dmutex_attr_setclient(&a, w->cli);
	err = dmutex_init(&m, name, &a);
	dmutex_attr_destroy(&a);
	pthread_barrier_wait(w->start);
	if (err)
		return -1;
	while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
		int64_t t0 = bench_now_ns();
		if ((err = dmutex_lock(&m)) || (err = dmutex_unlock(&m)))
			break;
		samples_add(&w->lat, bench_now_ns() - t0);
		w->count++;
	}
	dmutex_destroy(&m);
	return err ? -1 : 0;
}

static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	w->failed = w->by_hand ? hand_loop(w) : lib_loop(w);
	return NULL;
}

/* One slice: NTHREADS workers for slice_ns; adds to *count, *elapsed_ns
 * and the latencies. */
/* Where a slice's CPU went: this process (the workers, and the library's
 * threads) and Redis (commandstats), summed over the slices. */
struct cpu {
	int64_t client_ns;
	long long redis_usec;
};

static int
run(struct bench *b, int by_hand, dmutex_client_t *cli, int64_t slice_ns, long *count,
		int64_t *elapsed_ns, struct samples *lat, redisContext *stats, struct cpu *cpu)
{
	struct cmdstats s0, s1;
	int64_t c0;
	struct worker w[NTHREADS];
	pthread_t t[NTHREADS];
	pthread_barrier_t start;
	atomic_int stop = 0;
	int64_t t0;
	int failed = 0;

	pthread_barrier_init(&start, NULL, NTHREADS + 1);
	for (int i = 0; i < NTHREADS; i++) {
		w[i] = (struct worker){ .b = b, .idx = i, .by_hand = by_hand, .cli = cli,
			.start = &start, .stop = &stop };
		samples_init(&w[i].lat, LAT_CAP);
		pthread_create(&t[i], NULL, worker_main, &w[i]);
	}
	pthread_barrier_wait(&start);
	bench_cmdstats(stats, &s0);
	c0 = bench_process_cpu_ns();
	t0 = bench_now_ns();
	/* The passage of time is the measure: run for the slice, then stop. */
	bench_sleep_ns(slice_ns);
	atomic_store(&stop, 1);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);
	*elapsed_ns += bench_now_ns() - t0;
	cpu->client_ns += bench_process_cpu_ns() - c0;
	bench_cmdstats(stats, &s1);
	cpu->redis_usec += s1.usec_client - s0.usec_client;
	for (int i = 0; i < NTHREADS; i++) {
		*count += w[i].count;
		failed |= w[i].failed;
		for (size_t k = 0; k < w[i].lat.n; k++)
			samples_add(lat, w[i].lat.v[k]);
		samples_free(&w[i].lat);
	}
	pthread_barrier_destroy(&start);
	return failed ? -1 : 0;
}

static double
pipelined_set(struct bench *b)
{
	redisContext *c = bench_connect(&b->tgt);
	const long n = b->opt.quick ? 200000 : 500000;
	char key[96];
	int64_t t0;
	void *rep;

	if (!c)
		return -1;
	t0 = bench_now_ns();
	for (long i = 0; i < n; i += PIPELINE) {
		for (int k = 0; k < PIPELINE; k++) {
			snprintf(key, sizeof key, "%s:set:%ld", b->run_id, (i + k) % 1000);
			redisAppendCommand(c, "SET %s xxx", key);
		}
		for (int k = 0; k < PIPELINE; k++) {
			if (redisGetReply(c, &rep) != REDIS_OK) {
				redisFree(c);
				return -1;
			}
			freeReplyObject(rep);
		}
	}
	t0 = bench_now_ns() - t0;
	redisFree(c);
	return (double)n / (double)t0 * 1e9;
}

/* redis-benchmark -P 16 -t set -q against the same server, when installed. */
static double
redis_benchmark(struct bench *b)
{
	char cmd[1024], line[512];
	double v = -1;
	FILE *p;

	if (b->tgt.path[0] || b->tgt.pass[0])
		return -1;
	snprintf(cmd, sizeof cmd,
			"redis-benchmark -h %s -p %d -P %d -t set -q -n %d 2>/dev/null",
			b->tgt.host, b->tgt.port, PIPELINE, b->opt.quick ? 200000 : 500000);
	if (!(p = popen(cmd, "r")))
		return -1;
	/* "SET: 812345.69 requests per second, p50=..." after progress lines
	 * separated by carriage returns */
	while (fgets(line, sizeof line, p)) {
		char *s = strrchr(line, '\r');
		s = s ? s + 1 : line;
		sscanf(s, "SET: %lf", &v);
	}
	pclose(p);
	return v;
}

int
bench_independent(struct bench *b)
{
	struct samples hl, ll;
	dmutex_client_t *cli;
	double hand, lib, set_pipe, set_rb;
	const int slices = b->opt.quick ? 2 : 6;
	const int64_t slice = 500 * (int64_t)1000000;
	long n[2] = { 0, 0 };
	int64_t ns[2] = { 0, 0 };
	struct cpu cpu[2] = { { 0, 0 }, { 0, 0 } };
	redisContext *stats;
	struct row *r;
	int err;

	if ((err = dmutex_client_open(&cli, b->tgt.url))) {
		fprintf(stderr, "bench: dmutex_client_open: %s\n", dmutex_strerror(err));
		return -1;
	}
	if (!(stats = bench_connect(&b->tgt))) {
		dmutex_client_close(cli);
		return -1;
	}
	samples_init(&hl, NTHREADS * LAT_CAP);
	samples_init(&ll, NTHREADS * LAT_CAP);
	/* Hand-made and library in alternating slices, so that both see the
	 * same machine. */
	for (int k = 0; k < slices && !err; k++)
		for (int j = 0; j < 2 && !err; j++) {
			int by_hand = (k + j) % 2;
			if (run(b, by_hand, by_hand ? NULL : cli, slice, &n[by_hand], &ns[by_hand],
					by_hand ? &hl : &ll, stats, &cpu[by_hand]))
				err = EIO;
		}
	if (err) {
		fprintf(stderr, "bench: independent locks failed\n");
		goto out;
	}
	hand = (double)n[1] / (double)ns[1] * 1e9;
	lib = (double)n[0] / (double)ns[0] * 1e9;
	b->cycle4_per_s = hand;
	set_pipe = pipelined_set(b);
	set_rb = redis_benchmark(b);

	r = row_new(7, "4 threads, hand-made cycle, distinct keys");
	r->median_ns = samples_pct(&hl, 50);
	r->p99_ns = samples_pct(&hl, 99);
	r->ratio = r->median_ns / b->cycle_ns;
	snprintf(r->ratio_to, sizeof r->ratio_to, "cycle");
	row_metric(r, "cycles/s", hand, "/s");
	/* On a machine with fewer cores than threads plus Redis, throughput
	 * is the CPU one cycle costs, client and server together. */
	row_metric(r, "client CPU/cycle", (double)cpu[1].client_ns / (double)n[1], "ns");
	row_metric(r, "redis CPU/cycle", (double)cpu[1].redis_usec * 1e3 / (double)n[1], "ns");
	row_note(r, "timed in %d slices of 0.5 s alternating with the row below", slices);

	r = row_new(7, "4 threads, dmutex lock+unlock, distinct names");
	r->median_ns = samples_pct(&ll, 50);
	r->p99_ns = samples_pct(&ll, 99);
	r->ratio = r->median_ns / samples_pct(&hl, 50);
	snprintf(r->ratio_to, sizeof r->ratio_to, "4-thread cycle");
	row_metric(r, "acq/s", lib, "/s");
	row_metric(r, "of hand-made", 100 * lib / hand, "%");
	row_metric(r, "client CPU/cycle", (double)cpu[0].client_ns / (double)n[0], "ns");
	row_metric(r, "redis CPU/cycle", (double)cpu[0].redis_usec * 1e3 / (double)n[0], "ns");
	row_metric(r, "pipelined SET/s (hiredis, -P 16)", set_pipe > 0 ? set_pipe : NAN, "/s");
	row_metric(r, "redis-benchmark -P 16 -t set", set_rb > 0 ? set_rb : NAN, "/s");
	row_metric(r, "SETs per lock+unlock", set_pipe > 0 ? set_pipe / lib : NAN, "");
out:
	samples_free(&hl);
	samples_free(&ll);
	redisFree(stats);
	dmutex_client_close(cli);
	return err ? -1 : 0;
}
