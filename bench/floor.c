/*
 * Scenario 1, the floor: what no Redis lock on one server can beat.  A PING
 * round trip, and the hand-made lock cycle (hand.c).  The two are measured
 * alternately, so that both see the same machine: on a shared machine the
 * round trip drifts, and a ratio of two figures taken at different
 * moments would measure the drift.
 *
 * On a small virtual machine the round trip has two modes: client and
 * server on one CPU (a wake-up is a context switch) or on two (a wake-up
 * crosses CPUs, which a hypervisor makes dear).  When the server is ours,
 * both are measured by pinning, so that the table says which is which.
 */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <unistd.h>

#include "bench.h"

static int64_t
ping_once(redisContext *c)
{
	int64_t t0 = bench_now_ns();
	freeReplyObject(bench_cmd(c, "PING"));
	return bench_now_ns() - t0;
}

double
bench_ping_median(redisContext *c, int n)
{
	struct samples s;
	double v;

	samples_init(&s, (size_t)n);
	for (int i = 0; i < n; i++)
		samples_add(&s, ping_once(c));
	v = samples_pct(&s, 50);
	samples_free(&s);
	return v;
}

/* Median PING with the server on CPU 0 and this thread on client_cpu;
 * both get their CPUs back after.  0 when they cannot be pinned. */
static double
pinned_ping(struct bench *b, redisContext *c, int client_cpu, int n)
{
	cpu_set_t all_server, all_self, one;
	double v = 0;

	if (sched_getaffinity(b->server_pid, sizeof all_server, &all_server) ||
			pthread_getaffinity_np(pthread_self(), sizeof all_self, &all_self))
		return 0;
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	if (sched_setaffinity(b->server_pid, sizeof one, &one) == 0) {
		CPU_ZERO(&one);
		CPU_SET(client_cpu, &one);
		if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0) {
			bench_ping_median(c, n / 4);       /* settle */
			v = bench_ping_median(c, n);
		}
	}
	pthread_setaffinity_np(pthread_self(), sizeof all_self, &all_self);
	sched_setaffinity(b->server_pid, sizeof all_server, &all_server);
	return v;
}

static void
pinned_rows(struct bench *b, redisContext *c)
{
	struct row *r;

	if (!b->server_pid || sysconf(_SC_NPROCESSORS_ONLN) < 2)
		return;
	b->ping_same_ns = pinned_ping(b, c, 0, 2000);
	b->ping_cross_ns = pinned_ping(b, c, 1, 2000);
	if (!b->ping_same_ns || !b->ping_cross_ns) {
		b->ping_same_ns = b->ping_cross_ns = 0;
		return;
	}
	r = row_new(1, "PING, client and server pinned to one CPU");
	r->median_ns = b->ping_same_ns;
	r->ratio = b->ping_same_ns / b->ping_ns;
	snprintf(r->ratio_to, sizeof r->ratio_to, "PING");
	r = row_new(1, "PING, client and server pinned to two CPUs");
	r->median_ns = b->ping_cross_ns;
	r->ratio = b->ping_cross_ns / b->ping_ns;
	snprintf(r->ratio_to, sizeof r->ratio_to, "PING");
}

int
bench_floor(struct bench *b)
{
	const int n = b->opt.quick ? 5000 : 20000;
	struct samples ping, cyc;
	struct hand h;
	struct row *r;
	int err = 0;

	if (hand_init(&h, b, "floor"))
		return -1;
	samples_init(&ping, (size_t)n);
	samples_init(&cyc, (size_t)n);
	for (int i = 0; i < n + n / 10 && !err; i++) {
		int64_t p = ping_once(h.c), t0 = bench_now_ns();
		err = hand_cycle(&h);
		if (i >= n / 10) {      /* the first tenth warms up */
			samples_add(&ping, p);
			samples_add(&cyc, bench_now_ns() - t0);
		}
	}
	if (err) {
		fprintf(stderr, "bench: the hand-made cycle did not lock and unlock\n");
		goto out;
	}
	b->ping_ns = samples_pct(&ping, 50);
	b->cycle_ns = samples_pct(&cyc, 50);

	r = row_new(1, "PING round trip (hiredis)");
	r->median_ns = b->ping_ns;
	r->p99_ns = samples_pct(&ping, 99);
	r->ratio = 1;
	snprintf(r->ratio_to, sizeof r->ratio_to, "PING");
	row_metric(r, "samples", (double)ping.n, "");

	r = row_new(1, "hand-made cycle: SET NX PX + EVALSHA del");
	r->median_ns = b->cycle_ns;
	r->p99_ns = samples_pct(&cyc, 99);
	r->ratio = b->cycle_ns / b->ping_ns;
	snprintf(r->ratio_to, sizeof r->ratio_to, "PING");
	row_metric(r, "samples", (double)cyc.n, "");

	pinned_rows(b, h.c);
out:
	samples_free(&ping);
	samples_free(&cyc);
	hand_fini(&h);
	return err;
}
