/*
 * Per-lock counters in Redis (metrics.c gathers them in the process, the
 * CLI reads them): their layout, and the backend call that adds a batch.
 * Part of the backend's interface, with backend.h.
 *
 * All in one cluster slot (hash tag {metrics}) so that one
 * MULTI/EXEC adds a batch:
 *   PREFIXmetrics:{metrics}:total     hash: every name summed
 *   PREFIXmetrics:{metrics}:index     zset: name -> acquisitions (the top names)
 *   PREFIXmetrics:{metrics}:seen      zset: name -> wall-clock ms of its last batch
 *   PREFIXmetrics:{metrics}:n:NAME    hash: one name's counters
 * Fields: the names of dmutex__met_fields, histogram buckets not cumulative.
 *
 * Bounded like the names' own state (README "Memory: idle names expire"):
 * n:NAME expires idle_ms after its last batch, and the names whose last
 * batch is older than idle_ms leave index and seen (dmutex__backend_
 * counters_trim), so a program that locks job:<uuid> once per job does
 * not fill Redis with counters either.  Only total, one hash, stays.
 * A batch writes index and seen together; a name in index without seen
 * (written by a version before seen, or a set changed by hand) is given
 * one by dmutex__backend_counters_adopt, and so leaves in turn.
 */
#ifndef DMUTEX_BACKEND_COUNTERS_H
#define DMUTEX_BACKEND_COUNTERS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct dmutex__backend;

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

/* One name's counts not yet in Redis. */
struct dmutex__count {
	char *name;
	uint64_t delta[DMUTEX__MET_NFIELDS];
};

/* What dmutex__backend_counters did with a batch. */
enum {
	DMUTEX__CNT_SENT = 0,
	DMUTEX__CNT_MAYBE = 1,          /* given up after it may have been applied: drop it
	                                 * (a count is never added twice) */
	DMUTEX__CNT_REFUSED = 2,        /* the server refuses them (ACL): logged; never again */
	DMUTEX__CNT_NOT_SENT = -1       /* nothing applied: send it again later */
};

/*
 * Add v[0..n) to Redis in one MULTI/EXEC of plain HINCRBYs and a ZINCRBY
 * (not a script: the library's script calls stay what they were, and the
 * tests that count them still mean what they say), on the node serving
 * the {metrics} slot (Redlock: the first), done by `until` (CLOCK_MONOTONIC
 * ns).  *multi_ok is the caller's: 0 until MULTI was accepted once (then
 * it is sent alone first, so that an ACL without it is told apart).
 */
int dmutex__backend_counters(struct dmutex__backend *be, const struct dmutex__count *v,
		size_t n, int *multi_ok, int64_t until);

/*
 * Take the names whose last batch is older than idle_ms out of index and
 * seen, at most `max` of them, by `until`.  The number taken out, or -1 if
 * the server could not be asked.  Every process does it now and then; two
 * at once remove the same names twice, which is harmless.
 */
int dmutex__backend_counters_trim(struct dmutex__backend *be, size_t max, int64_t until);

/*
 * Give the names of index that have no time in seen the present one
 * (ZADD NX: a name's own time stays), so that trim takes them out idle_ms
 * later unless they are counted again.  One page of about `max` names of
 * a ZSCAN of index from *cursor, by `until`; *cursor 0 starts a pass,
 * which is made only when index has more names than seen (a batch writes
 * both, trim takes names out of both: more in index means some have no
 * time), so that the usual cost is two ZCARDs.  1 when the pass goes on
 * (*cursor set for the next page), 0 when it is over or not needed, -1 if
 * the server could not be asked.
 */
int dmutex__backend_counters_adopt(struct dmutex__backend *be, unsigned long long *cursor,
		size_t max, int64_t until);

#endif
