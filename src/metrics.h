/*
 * Per-lock counters (issue 17.7): kept in the process, per client and lock
 * name, and added to Redis by the renewal thread at most once a second
 * (never per acquisition), where `dmutex metrics` and `dmutex top` read
 * every process's sums.
 *
 * In Redis, all in one cluster slot (hash tag {metrics}) so that one
 * MULTI/EXEC adds a batch:
 *   PREFIXmetrics:{metrics}:total     hash: every name summed
 *   PREFIXmetrics:{metrics}:index     zset: name -> acquisitions (the top names)
 *   PREFIXmetrics:{metrics}:n:NAME    hash: one name's counters
 * Fields: the names of dmutex__met_fields, histogram buckets not cumulative.
 */
#ifndef DMUTEX_METRICS_H
#define DMUTEX_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dmutex.h"

/* Upper bounds of the wait and hold histograms, seconds; then +Inf. */
#define DMUTEX__MET_BUCKETS 10
#define DMUTEX__MET_BOUNDS { 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10 }

enum {
	DMUTEX__MET_ACQ,                /* acquisitions */
	DMUTEX__MET_CONTENDED,          /* ... that had to wait for another holder */
	DMUTEX__MET_LOST,               /* leases lost */
	DMUTEX__MET_RENEWALS,           /* renewals confirmed */
	DMUTEX__MET_ERRORS,             /* backend calls that failed (EIO) */
	DMUTEX__MET_WAIT_US,            /* wait time, microseconds, summed */
	DMUTEX__MET_WAIT_B0,            /* .. + DMUTEX__MET_BUCKETS - 1 */
	DMUTEX__MET_HOLDS = DMUTEX__MET_WAIT_B0 + DMUTEX__MET_BUCKETS,   /* holds ended */
	DMUTEX__MET_HOLD_US,
	DMUTEX__MET_HOLD_B0,
	DMUTEX__MET_NFIELDS = DMUTEX__MET_HOLD_B0 + DMUTEX__MET_BUCKETS
};

/* "acq", "contended", ..., "wait_b0".., "hold_b9": the Redis hash fields. */
extern const char *const dmutex__met_fields[DMUTEX__MET_NFIELDS];

#define DMUTEX__MET_KEY_MAX (128 + 32 + 512)
static inline int
dmutex__met_key(char *buf, const char *prefix, const char *what, const char *name)
{
	return snprintf(buf, DMUTEX__MET_KEY_MAX, "%smetrics:{metrics}:%s%s", prefix, what,
			name ? name : "");
}

struct dmutex_client;

int dmutex__met_init(struct dmutex_client *c);
void dmutex__met_free(struct dmutex_client *c);
void dmutex__met_atfork_child(struct dmutex_client *c);

/* The hooks; cheap (a hash lookup under a leaf mutex), never any I/O. */
void dmutex__met_acquired(struct dmutex_client *c, const char *name, int64_t start_ns,
		int64_t now_ns, int contended);
void dmutex__met_released(struct dmutex_client *c, const char *name, int64_t now_ns);
void dmutex__met_count(struct dmutex_client *c, const char *name, int field);

/* CLOCK_MONOTONIC ns when a flush is due; INT64_MAX when nothing waits. */
int64_t dmutex__met_due(struct dmutex_client *c);
/* Add the counters gathered since the last flush to Redis (first node),
 * giving up at `until` (CLOCK_MONOTONIC ns): the renewal thread passes its
 * next renewal, so that a slow or stopped server never delays one. */
void dmutex__met_flush(struct dmutex_client *c, int64_t until);
/* This process's totals on c, of one lock (name) or all (NULL), into out.
 * The caller (client_metrics.c) checks the arguments and resolves the
 * default client: metrics is given its client, it does not find one. */
void dmutex__met_totals(struct dmutex_client *c, const char *name, dmutex_metrics_t *out);

#endif
