/*
 * Scenario 11: cached leases (README "Cached leases", issue 15 item 1), on a
 * client opened with lease_cache=on (main.c turns it off for the others):
 *   - lock + unlock by one thread with no other process, against the
 *     hand-made cycle of scenario 1 (target: >= 100x faster);
 *   - 8 threads of one process on one lock: Redis commands per acquisition
 *     from INFO commandstats (target: <= 0.1);
 *   - scenario 4's contended handoff between 2 processes with caching on
 *     and off, one after the other (target: on within 1.2x of off).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "dmutex.h"

#define THREADS 8

/* base with lease_cache=on|off in place of the lease_cache=... it names
 * (main.c adds =off for the other scenarios unless the user's URL names
 * it, either way); -1 if it does not fit. */
static int
url_with(const char *base, const char *on, char *out, size_t len)
{
	const char *was = strstr(base, "lease_cache=");
	size_t n = was ? (size_t)(was - base) - 1 : strlen(base);
	const char *rest = was ? was + strcspn(was, "&") : "";

	if (n + 1 + strlen("lease_cache=") + strlen(on) + strlen(rest) + 1 > len)
		return -1;
	memcpy(out, base, n);
	out[n] = memchr(base, '?', n) ? '&' : '?';
	memcpy(out + n + 1, "lease_cache=", 12);
	memcpy(out + n + 13, on, strlen(on) + 1);
	strcat(out, rest);
	return 0;
}

static int
single(struct bench *b, const char *url)
{
	const int batch = 1000, batches = b->opt.quick ? 200 : 1000;
	struct samples s = { 0 };
	dmutex_client_t *cli = NULL;
	dmutex_attr_t a;
	dmutex_t m;
	char name[64];
	struct row *r;
	int err;

	if ((err = dmutex_client_open(&cli, url)))
		goto out;
	snprintf(name, sizeof name, "%s:cached", b->run_id);
	dmutex_attr_init(&a);
	dmutex_attr_setclient(&a, cli);
	err = dmutex_init(&m, name, &a);
	dmutex_attr_destroy(&a);
	if (err)
		goto out;
	/* The second hold keeps the lease; the rest are local. */
	for (int i = 0; i < 3 && !err; i++)
		if (!(err = dmutex_lock(&m)))
			err = dmutex_unlock(&m);
	samples_init(&s, (size_t)batches);
	if (!err)
		err = samples_lock_pairs(&s, &m, batches, batch);
	dmutex_destroy(&m);
	if (err)
		goto out;
	r = row_new(11, "cached lease: lock + unlock, one thread");
	r->median_ns = samples_pct(&s, 50);
	r->p99_ns = samples_pct(&s, 99);
	r->ratio = r->median_ns / b->ping_ns;
	snprintf(r->ratio_to, sizeof r->ratio_to, "PING");
	row_metric(r, "× faster than hand-made", b->cycle_ns / r->median_ns, "x");
	row_note(r, "median and p99 over batches of %d cycles; the hand-made cycle (scenario 1) was %.1f µs",
			batch, b->cycle_ns / 1e3);
	row_target(r, b->cycle_ns / r->median_ns >= 100 ? MET_YES : MET_NO, ">= 100x the hand-made cycle");
	target_line("5: cached re-lock (lock + unlock on a kept lease, one thread) ≥ 100× faster than "
			"the hand-made cycle", r->met, "median %.0f ns, hand-made cycle %.1f µs: %.0f×",
			r->median_ns, b->cycle_ns / 1e3, b->cycle_ns / r->median_ns);
out:
	samples_free(&s);
	if (cli)
		dmutex_client_close(cli);
	if (err)
		fprintf(stderr, "bench: cached: %s\n", dmutex_strerror(err));
	return err ? -1 : 0;
}

struct team {
	dmutex_t m;
	pthread_barrier_t start;
	int64_t stop_ns;
	atomic_int inside;
	atomic_long overlaps, errors, count;
};

static void *
member(void *arg)
{
	struct team *t = arg;
	long n = 0;

	pthread_barrier_wait(&t->start);
	while (bench_now_ns() < t->stop_ns) {
		if (dmutex_lock(&t->m)) {
			atomic_fetch_add(&t->errors, 1);
			break;
		}
		if (atomic_fetch_add(&t->inside, 1) != 0)
			atomic_fetch_add(&t->overlaps, 1);
		n++;
		atomic_fetch_sub(&t->inside, 1);
		if (dmutex_unlock(&t->m)) {
			atomic_fetch_add(&t->errors, 1);
			break;
		}
	}
	atomic_fetch_add(&t->count, n);
	return NULL;
}

static int
team(struct bench *b, const char *url)
{
	static struct team t;
	redisContext *c = bench_connect(&b->tgt);
	struct cmdstats before, after;
	dmutex_client_t *cli = NULL;
	pthread_t th[THREADS];
	dmutex_attr_t a;
	char name[64];
	int64_t t0, t1;
	double per;
	struct row *r;
	int err;

	if (!c)
		return -1;
	memset(&t, 0, sizeof t);
	if ((err = dmutex_client_open(&cli, url)))
		goto out;
	snprintf(name, sizeof name, "%s:cached%d", b->run_id, THREADS);
	dmutex_attr_init(&a);
	dmutex_attr_setclient(&a, cli);
	err = dmutex_init(&t.m, name, &a);
	dmutex_attr_destroy(&a);
	if (err)
		goto out;
	pthread_barrier_init(&t.start, NULL, THREADS + 1);
	for (int i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, member, &t);
	bench_cmdstats(c, &before);
	t0 = bench_now_ns();
	t.stop_ns = t0 + (b->opt.quick ? 500 : 2000) * (int64_t)1000000;
	pthread_barrier_wait(&t.start);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	t1 = bench_now_ns();
	bench_cmdstats(c, &after);
	pthread_barrier_destroy(&t.start);
	dmutex_destroy(&t.m);
	if (atomic_load(&t.errors) || !atomic_load(&t.count)) {
		err = -1;
		goto out;
	}
	per = (double)(after.total - before.total) / (double)atomic_load(&t.count);
	r = row_new(11, "cached lease: 8 threads of one process, one lock");
	row_metric(r, "acq/s", (double)atomic_load(&t.count) / (double)(t1 - t0) * 1e9, "/s");
	row_metric(r, "redis commands/acq", per, "");
	row_metric(r, "overlaps", (double)atomic_load(&t.overlaps), "");
	row_target(r, per <= 0.1 ? MET_YES : MET_NO, "<= 0.1 Redis commands per acquisition");
	target_line("5: ≤ 0.1 Redis commands per acquisition, 8 threads of one process", r->met,
			"%lld commands (commandstats) / %ld acquisitions = %.5f", after.total - before.total,
			atomic_load(&t.count), per);
	if (atomic_load(&t.overlaps))
		row_note(r, "MUTUAL EXCLUSION VIOLATED: %ld overlapping holds", atomic_load(&t.overlaps));
out:
	if (cli)
		dmutex_client_close(cli);
	redisFree(c);
	return err ? -1 : 0;
}

/* Scenario 4 with 2 processes on a URL with lease_cache=on|off: the
 * library's row and the hand-made one after it, relabelled, so that the
 * table shows them under 11 and scenario 4's verdicts see only its own
 * references. */
static struct row *
handoff(struct bench *b, const char *on)
{
	char saved[sizeof b->tgt.url];
	size_t n0 = rows_count();
	struct row *r;

	memcpy(saved, b->tgt.url, sizeof saved);
	if (url_with(saved, on, b->tgt.url, sizeof b->tgt.url))
		return NULL;
	bench_handoff_one(b, 2);
	memcpy(b->tgt.url, saved, sizeof saved);
	if (rows_count() < n0 + 1)
		return NULL;
	if (rows_count() > n0 + 1) {
		struct row *h = rows_at(n0 + 1);

		h->scenario = 11;
		snprintf(h->label, sizeof h->label, "(why) hand-made lock, pub/sub wake-up, no threads, "
				"2 processes, after lease_cache=%s", on);
	}
	r = rows_at(n0);
	r->scenario = 11;
	snprintf(r->label, sizeof r->label, "contended handoff, 2 processes, lease_cache=%s", on);
	return r;
}

int
bench_cache(struct bench *b)
{
	char url[sizeof b->tgt.url + 32];
	struct row *on, *off;
	int rc = 0;

	if (url_with(b->tgt.url, "on", url, sizeof url))
		return -1;
	rc |= single(b, url);
	rc |= team(b, url);
	off = handoff(b, "off");
	on = handoff(b, "on");
	if (on && off) {
		row_metric(on, "× caching off", on->median_ns / off->median_ns, "x");
		row_target(on, on->median_ns <= 1.2 * off->median_ns ? MET_YES : MET_NO,
				"handoff median <= 1.2x with caching off");
		target_line("5: a kept lease asked back by another process ≤ 1.2× the same hand-off "
				"without the cache (2 processes)", on->met, "hand-off median %.1f µs on / "
				"%.1f µs off = %.2f×", on->median_ns / 1e3, off->median_ns / 1e3,
				on->median_ns / off->median_ns);
	} else {
		rc = -1;
	}
	return rc;
}
