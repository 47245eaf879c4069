/*
 * The per-lock counters a backend stores for operators (src/core/metrics.c
 * gathers them in the process; backend.h's counters_* operations add and
 * trim them; the CLI reads them): which counters there are, and one
 * name's batch.  Part of the face, with backend.h.
 */
#ifndef DMUTEX_BACKEND_COUNTS_H
#define DMUTEX_BACKEND_COUNTS_H

#include <stdint.h>

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

/* One name's counts not yet added to the backend. */
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

#endif
