/*
 * Scenario 12 (issue 15 item 2): dmutex_lock + dmutex_unlock on a fresh
 * name each time, which no cached lease can serve, against the hand-made
 * cycle timed in turn with it.  The asynchronous release leaves one round
 * trip per cycle, the acquire's: target <= 0.55x the hand-made cycle (two
 * round trips).  The same with ?async_release=0 (an unlock that waits for
 * its answer) shows what the asynchronous release saves.
 *
 * The names are made (dmutex_init) before the timed loop, and destroyed
 * after it: destroy waits for an answer still to come, so it stays out of
 * the timing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "dmutex.h"

enum { HAND, ASYNC, SYNC, NVARIANTS };

struct ctx {
	struct hand hand;
	dmutex_client_t *cli[NVARIANTS];        /* ASYNC, SYNC */
	dmutex_t *m[NVARIANTS];
	int nm[NVARIANTS];                      /* initialized */
	int next[NVARIANTS];                    /* the next fresh one */
};

static int
open_variant(struct ctx *x, struct bench *b, int v, int n)
{
	char url[sizeof b->tgt.url + 32], name[96];
	dmutex_attr_t a;
	int err;

	snprintf(url, sizeof url, "%s%sasync_release=%d", b->tgt.url,
			strchr(b->tgt.url, '?') ? "&" : "?", v == ASYNC);
	if ((err = dmutex_client_open(&x->cli[v], url))) {
		fprintf(stderr, "bench: dmutex_client_open(%s): %s\n", url, dmutex_strerror(err));
		return -1;
	}
	if (!(x->m[v] = calloc((size_t)n, sizeof *x->m[v])))
		return -1;
	dmutex_attr_init(&a);
	dmutex_attr_setclient(&a, x->cli[v]);
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof name, "%s:fresh:%d:%d", b->run_id, v, i);
		if ((err = dmutex_init(&x->m[v][i], name, &a))) {
			fprintf(stderr, "bench: dmutex_init: %s\n", dmutex_strerror(err));
			break;
		}
		x->nm[v]++;
	}
	dmutex_attr_destroy(&a);
	return err ? -1 : 0;
}

static void
teardown(struct ctx *x)
{
	for (int v = ASYNC; v < NVARIANTS; v++) {
		for (int i = 0; i < x->nm[v]; i++)
			dmutex_destroy(&x->m[v][i]);
		free(x->m[v]);
		if (x->cli[v])
			dmutex_client_close(x->cli[v]);
	}
	hand_fini(&x->hand);
}

static int
cycle(struct ctx *x, int v)
{
	dmutex_t *m;

	if (v == HAND)
		return hand_cycle(&x->hand);
	if (x->next[v] >= x->nm[v])
		return -1;
	m = &x->m[v][x->next[v]++];
	return dmutex_lock(m) || dmutex_unlock(m) ? -1 : 0;
}

int
bench_fresh(struct bench *b)
{
	static const char *const labels[NVARIANTS] = {
		[HAND] = "hand-made cycle, timed in turn with the two others",
		[ASYNC] = "dmutex_lock + dmutex_unlock, a fresh name each time",
		[SYNC] = "(what it saves) the same with ?async_release=0",
	};
	const int n = b->opt.quick ? 2000 : 8000, warm = n / 10;
	struct samples s[NVARIANTS];
	double med[NVARIANTS];
	struct ctx x;
	int err = 0;

	memset(&x, 0, sizeof x);
	if (hand_init(&x.hand, b, "fresh") || open_variant(&x, b, ASYNC, n + warm) ||
			open_variant(&x, b, SYNC, n + warm)) {
		teardown(&x);
		return -1;
	}
	for (int v = 0; v < NVARIANTS; v++)
		samples_init(&s[v], (size_t)n);
	for (int i = 0; i < n + warm && !err; i++) {
		/* In turn, starting with a different one each time. */
		for (int k = 0; k < NVARIANTS && !err; k++) {
			int v = (i + k) % NVARIANTS;
			int64_t t0 = bench_now_ns();
			err = cycle(&x, v);
			if (i >= warm)
				samples_add(&s[v], bench_now_ns() - t0);
		}
	}
	if (err) {
		fprintf(stderr, "bench: fresh: a cycle did not lock and unlock\n");
		goto out;
	}
	for (int v = 0; v < NVARIANTS; v++)
		med[v] = samples_pct(&s[v], 50);
	for (int k = 0; k < NVARIANTS; k++) {
		/* The library first, then the others. */
		int v = (k + ASYNC) % NVARIANTS;
		struct row *r = row_new(12, labels[v]);
		r->median_ns = med[v];
		r->p99_ns = samples_pct(&s[v], 99);
		r->ratio = med[v] / med[HAND];
		snprintf(r->ratio_to, sizeof r->ratio_to, "cycle");
		if (v == ASYNC) {
			row_metric(r, "× PING", med[v] / b->ping_ns, "x");
			row_target(r, r->ratio <= 0.55 ? MET_YES : MET_NO, "≤ 0.55× cycle");
			row_note(r, "unlock does not wait for the release's answer (README \"Asynchronous "
					"release\"); ratio to the hand-made cycle timed in turn with it");
		}
	}
out:
	for (int v = 0; v < NVARIANTS; v++)
		samples_free(&s[v]);
	teardown(&x);
	return err ? -1 : 0;
}
