/*
 * Per-lock counters in Redis (metrics.c gathers them in the process, the
 * CLI reads them): their layout, and the calls that fill backend.h's
 * counters_* operations (counters_ops.c).  What is counted: backend/counts.h.
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
 * batch is older than idle_ms leave index and seen (dmutex__redis_
 * counters_trim), so a program that locks job:<uuid> once per job does
 * not fill Redis with counters either.  Only total, one hash, stays.
 * A batch writes index and seen together; a name in index without seen
 * (written by a version before seen, or a set changed by hand) is given
 * one by dmutex__redis_counters_adopt, and so leaves in turn.
 */
#ifndef DMUTEX_BACKEND_COUNTERS_H
#define DMUTEX_BACKEND_COUNTERS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"

/* "acq", "contended", ..., "wait_b0".., "hold_b9": the Redis hash fields. */
extern const char *const dmutex__met_fields[DMUTEX__MET_NFIELDS];

#define DMUTEX__MET_KEY_MAX (128 + 32 + 512)
static inline int
dmutex__met_key(char *buf, const char *prefix, const char *what, const char *name)
{
	return snprintf(buf, DMUTEX__MET_KEY_MAX, "%smetrics:{metrics}:%s%s", prefix, what,
			name ? name : "");
}

/*
 * Add v[0..n) to Redis in one MULTI/EXEC of plain HINCRBYs and a ZINCRBY
 * (not a script: the library's script calls stay what they were, and the
 * tests that count them still mean what they say), on the node serving
 * the {metrics} slot (Redlock: the first), done by `until` (CLOCK_MONOTONIC
 * ns).  *multi_ok is the caller's: 0 until MULTI was accepted once (then
 * it is sent alone first, so that an ACL without it is told apart).
 */
int dmutex__redis_counters(struct dmutex__backend *be, const struct dmutex__count *v,
		size_t n, int *multi_ok, int64_t until);

/*
 * Take the names whose last batch is older than idle_ms out of index and
 * seen, at most `max` of them, by `until`.  The number taken out, or -1 if
 * the server could not be asked.  Every process does it now and then; two
 * at once remove the same names twice, which is harmless.
 */
int dmutex__redis_counters_trim(struct dmutex__backend *be, size_t max, int64_t until);

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
int dmutex__redis_counters_adopt(struct dmutex__backend *be, unsigned long long *cursor,
		size_t max, int64_t until);

#endif
