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

/* A read-write lock (drwlock_t) as ops->rw_inspect reports it: other keys
 * than the mutex's of the same name.  The stores keep no writer's
 * details (its token only), so there is no owner here. */
struct dmutex__rwlock_view {
	int exists;             /* any key of it */
	int writing;            /* a writer holds it */
	uint64_t fence;         /* the writer's token; 0: none writes */
	long long write_left_ms;        /* the writer's lease left; -1 none or unknown */
	long long readers;      /* read shares (one per process) */
	long long read_left_ms; /* the longest share's lease left; -1 none or unknown */
	long long writers_waiting;      /* waiting writers' intents */
	/* Non-empty: a key of it holds what dmutex does not write (which
	 * key, and why); nothing above is then set. */
	char error[256];
};

/* ops->reset's and ops->rw_reset's results. */
enum { DMUTEX__RESET_DONE = 0, DMUTEX__RESET_NOTHING = 1, DMUTEX__RESET_HELD = 2 };

#endif
