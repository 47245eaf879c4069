/*
 * An operator's view of one lock, as a backend that the tool cannot read
 * itself reports it (ops->inspect; etcd).  Here, below the face, so that
 * core/admin.h (the tool's door) carries it without the whole face.
 */
#ifndef DMUTEX_BACKEND_VIEW_H
#define DMUTEX_BACKEND_VIEW_H

#include <stdint.h>

struct dmutex__lock_view {
	int exists;             /* any key of the lock */
	int held;
	char owner[300];        /* the holder's record "host pid tid"; "" unknown */
	uint64_t fence;         /* the hold's fencing token; 0: none */
	long long waiters;      /* queued behind the holder; -1 unknown */
	long long lease_left_ms;        /* the holder's lease left; -1 unknown */
	int owner_died;         /* a holder died holding it: a robust locker's next
	                         * lock is EOWNERDEAD */
	int notrec;             /* not recoverable until reset */
};

/* ops->reset's results. */
enum { DMUTEX__RESET_DONE = 0, DMUTEX__RESET_NOTHING = 1, DMUTEX__RESET_HELD = 2 };

#endif
