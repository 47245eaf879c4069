/*
 * Per-lock counters (issue 17.7): kept in the process, per client and lock
 * name, and added to Redis by the renewal thread at most once a second
 * (never per acquisition), where `dmutex metrics` and `dmutex top` read
 * every process's sums.
 *
 * What is counted: backend/counts.h; the calls that add them: backend.h
 * (counters_*); their layout in Redis: backend/redis/counters.h.
 */
#ifndef DMUTEX_METRICS_H
#define DMUTEX_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "dmutex.h"

struct dmutex_client;
struct dmutex__entry;

int dmutex__met_init(struct dmutex_client *c);
void dmutex__met_free(struct dmutex_client *c);
void dmutex__met_atfork_child(struct dmutex_client *c);

/* The hooks, for e's name on e's client; cheap (a few additions under a
 * leaf mutex, the name's record found through e), never any I/O. */
void dmutex__met_acquired(struct dmutex__entry *e, int64_t start_ns, int64_t now_ns, int contended);
/* A hold of e's name ended, after held_ns, however it ended: the caller
 * (hold.c dmutex__entry_end_counted / _take_counted) says so once per
 * hold.  held_ns < 0: no hold was counted, nothing to do. */
void dmutex__met_hold_ended(struct dmutex__entry *e, int64_t held_ns);
void dmutex__met_count(struct dmutex__entry *e, int field);

/* The histograms' bucket of a wait or hold of ns. */
static inline int
dmutex__met_bucket(int64_t ns)
{
	static const double bounds[] = DMUTEX__MET_BOUNDS;
	double s = (double)ns;
	int i = 0;

	/* Seconds scaled, not ns divided: no division on the lock path, where
	 * most waits and holds stop at the first bound. */
	while (i < DMUTEX__MET_BUCKETS - 1 && s > bounds[i] * 1e9)
		i++;
	return i;
}

/* The entries' own counts (internal.h met_local; hold.c counts and folds
 * them).  Under e->mu, its first count since it was last folded: put e,
 * with a reference, on the list to fold (the counters' mutex is taken
 * under e->mu only here, once per fold, not once per hold). */
void dmutex__met_queue(struct dmutex__entry *e);
/* Folding, one at a time: take the list (NULL: nothing to fold), add each
 * entry's counts taken from it, then end.  No lock held at begin. */
struct dmutex__entry *dmutex__met_fold_begin(struct dmutex_client *c);
void dmutex__met_fold(struct dmutex__entry *e, const struct dmutex__met_local *l);
void dmutex__met_fold_end(struct dmutex_client *c);

/* CLOCK_MONOTONIC ns when a flush is due; INT64_MAX when nothing waits. */
int64_t dmutex__met_due(struct dmutex_client *c);
/* Add the counters gathered since the last flush to Redis (the backend's
 * node for them: any topology),
 * giving up at `until` (CLOCK_MONOTONIC ns): the renewal thread passes its
 * next renewal, so that a slow or stopped server never delays one. */
void dmutex__met_flush(struct dmutex_client *c, int64_t until);
/* This process's totals on c, of one lock (name) or all (NULL), into out.
 * The caller (client_metrics.c) checks the arguments and resolves the
 * default client: metrics is given its client, it does not find one. */
void dmutex__met_totals(struct dmutex_client *c, const char *name, dmutex_metrics_t *out);

#endif
