/*
 * Scenario 6: one process holding 1,000 and then 10,000 locks with a 3 s
 * lease, and (full mode) 100,000 with a 30 s lease (issue 15 item 6: none
 * lost, the library's CPU under 5 % of a core).  The main thread sleeps while holding them, so the CPU the
 * process uses meanwhile is the library's (its renewal thread; the wake-up
 * thread has nothing to do here).  Renewal runs every third of a lease: a
 * "tick" below is one such period, in which every lock is renewed once.
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "dmutex.h"

#define LOCKS_PER_CALL 256      /* the library's renew chunk, for the ideal */

static atomic_long lost_calls;

static void
on_lost(const char *name, void *arg)
{
	(void)name;
	(void)arg;
	atomic_fetch_add(&lost_calls, 1);
}

static int
run(struct bench *b, redisContext *c, int nlocks, unsigned lease_ms, int64_t hold_ns)
{
	dmutex_client_t *cli;
	dmutex_attr_t a;
	dmutex_t *ms = calloc((size_t)nlocks, sizeof *ms);
	struct cmdstats before, after;
	int64_t t0, t1, cpu0, cpu1, thr0, thr1, lock_ns;
	long enolck = 0, failed = 0;
	int inited = 0, locked = 0, err;
	char name[64], label[64];
	double ticks, calls, periods_cpu = 0;
	struct row *r = NULL;
	struct samples first = { 0 }, last = { 0 };

	if (!ms)
		return -1;
	atomic_store(&lost_calls, 0);
	if ((err = dmutex_client_open(&cli, b->tgt.url))) {
		fprintf(stderr, "bench: dmutex_client_open: %s\n", dmutex_strerror(err));
		free(ms);
		return -1;
	}
	dmutex_attr_init(&a);
	dmutex_attr_setclient(&a, cli);
	dmutex_attr_setlease(&a, lease_ms);
	dmutex_attr_setonlost(&a, on_lost, NULL);
	for (; inited < nlocks; inited++) {
		snprintf(name, sizeof name, "%s:renew%d:%d", b->run_id, nlocks, inited);
		if ((err = dmutex_init(&ms[inited], name, &a)))
			goto out;
	}
	samples_init(&first, 1000);
	samples_init(&last, 1000);
	t0 = bench_now_ns();
	for (; locked < nlocks; locked++) {
		int64_t t = bench_now_ns();
		if ((err = dmutex_lock(&ms[locked])))
			goto out;
		t = bench_now_ns() - t;
		if (locked < 1000)
			samples_add(&first, t);
		if (locked >= nlocks - 1000)
			samples_add(&last, t);
	}
	lock_ns = bench_now_ns() - t0;

	bench_cmdstats(c, &before);
	cpu0 = bench_process_cpu_ns();
	thr0 = bench_other_threads_cpu_ns();
	t0 = bench_now_ns();
	/* The passage of time is what is measured: hold, and let renewal run. */
	bench_sleep_ns(hold_ns);
	t1 = bench_now_ns();
	thr1 = bench_other_threads_cpu_ns();
	cpu1 = bench_process_cpu_ns();
	bench_cmdstats(c, &after);

	ticks = (double)(t1 - t0) / ((double)lease_ms * 1e6 / 3);
	calls = (double)(after.client - before.client);
	periods_cpu = (double)(thr1 - thr0) / ((double)(t1 - t0) / 1e9);
	snprintf(label, sizeof label, "renewal, %d locks held, %u s lease", nlocks, lease_ms / 1000);
	r = row_new(6, label);
	row_metric(r, "locks", nlocks, "");
	row_metric(r, "held for", (double)(t1 - t0), "ns");
	row_metric(r, "requests/tick", calls / ticks, "");
	row_metric(r, "ideal requests/tick", ceil((double)nlocks / LOCKS_PER_CALL), "");
	row_metric(r, "commands/tick (with script-internal)",
			(double)(after.total - before.total) / ticks, "");
	row_metric(r, "renewals per request", calls > 0 ? nlocks * ticks / calls : NAN, "");
	row_metric(r, "library CPU per s", periods_cpu, "ns");
	row_metric(r, "of a core", periods_cpu / 1e7, "%");
	row_metric(r, "process CPU per s", (double)(cpu1 - cpu0) / ((double)(t1 - t0) / 1e9), "ns");
	row_metric(r, "redis CPU per s",
			(double)(after.usec_client - before.usec_client) * 1e3 / ((double)(t1 - t0) / 1e9),
			"ns");
	row_metric(r, "time to lock all", (double)lock_ns, "ns");
	/* Does taking a lock get dearer with the number already held? */
	row_metric(r, "lock median, first 1000", samples_pct(&first, 50), "ns");
	row_metric(r, "lock median, last 1000", samples_pct(&last, 50), "ns");
out:
	for (int i = 0; i < locked; i++) {
		int e = dmutex_unlock(&ms[i]);
		if (e == ENOLCK)
			enolck++;
		else if (e)
			failed++;
	}
	if (!err && locked == nlocks) {
		long lost = atomic_load(&lost_calls);
		row_metric(r, "onlost calls", (double)lost, "");
		row_metric(r, "unlock ENOLCK", (double)enolck, "");
		if (nlocks >= 100000)
			row_target(r, lost == 0 && enolck == 0 && failed == 0 && periods_cpu / 1e7 < 5
					? MET_YES : MET_NO, "0 leases lost, library CPU < 5 %% of a core");
		else
			row_target(r, lost == 0 && enolck == 0 && failed == 0 ? MET_YES : MET_NO,
					"0 leases lost");
	}
	for (int i = 0; i < inited; i++)
		dmutex_destroy(&ms[i]);
	dmutex_attr_destroy(&a);
	dmutex_client_close(cli);
	free(ms);
	samples_free(&first);
	samples_free(&last);
	if (err)
		fprintf(stderr, "bench: renewal, %d locks: %s\n", nlocks, dmutex_strerror(err));
	return err || failed ? -1 : 0;
}

int
bench_renewal(struct bench *b)
{
	int64_t hold = (b->opt.quick ? 4000 : 15000) * (int64_t)1000000;
	redisContext *c = bench_connect(&b->tgt);
	int rc;

	if (!c)
		return -1;
	rc = run(b, c, 1000, 3000, hold);
	rc |= run(b, c, 10000, 3000, hold);
	/* Two and a half renewal periods of a 30 s lease. */
	if (!b->opt.quick)
		rc |= run(b, c, 100000, 30000, 25000 * (int64_t)1000000);
	redisFree(c);
	return rc;
}
