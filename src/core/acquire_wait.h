/*
 * The wait of an acquisition (a mutex's, a rwlock's), written once.  The
 * caller describes one try, a request to the backend; this loop repeats it:
 * on a backend failure after a backoff, within an I/O budget; when the lock
 * is held by someone else, after subscribing to its wake channel (at once,
 * so that a release in between is not missed) and then after a wake-up or
 * the holder's remaining lease, until the caller's deadline.
 *
 * A callback, not a step function the caller loops over: the retry rules
 * (what gives up with EIO, what resets the budget, when to subscribe, what
 * sequence a wait starts from) then live in one place, and a try is only
 * the request and what its answer means to its kind of lock.  It adds no
 * I/O: an uncontended acquisition is one try, one round trip, as before.
 */
#ifndef DMUTEX_CORE_ACQUIRE_WAIT_H
#define DMUTEX_CORE_ACQUIRE_WAIT_H

#include <stdint.h>

struct dmutex_client;
struct dmutex__wsub;

/* What one try returns. */
enum {
	DMUTEX__TRY_DONE,       /* finished: t->err is the result */
	DMUTEX__TRY_AGAIN,      /* try again at once */
	DMUTEX__TRY_FAILED,     /* the backend failed (counted by the try) */
	DMUTEX__TRY_BUSY,       /* held by someone else */
};

struct dmutex__try {
	int64_t now;            /* FAILED, BUSY: when the answer came */
	int err;                /* DONE */
	int refused;            /* FAILED: a "no" that asking again will not change */
	int64_t bound;          /* BUSY: wake by then at the latest (a lost wake-up) */
	int no_wake;            /* BUSY: the channel will not tell; sleep to bound */
};

struct dmutex__acquire {
	/* Set by the caller. */
	struct dmutex_client *c;
	const char *what;       /* log lines: "<what> '<name>': ..." */
	const char *name;
	int trylock;            /* one try: busy is EBUSY, a failure EIO */
	int bad_deadline;       /* busy is EINVAL (logged) */
	int presub;             /* subscribe first, without waiting for it */
	int64_t until;          /* busy past it is ETIMEDOUT (INT64_MAX: none) */
	/* The wake channel (caller frees with the loop: NULL is out of memory). */
	char *(*channel)(void *arg);
	/* Fair: the token whose hand-over to hear on the channel, or NULL. */
	const char *want;
	/* Non-fair: ask that the grant come on the waiter's own list, which
	 * its waiting thread pops itself (backend.h wake_pop). */
	int pop;
	/* The channel is the waiter's own (a mutex's, with its token): once
	 * the lock is taken nobody publishes there for us, and it is given
	 * up late (backend.h wake_unsub_late). */
	int own_channel;
	int (*try)(void *arg, struct dmutex__acquire *aq, struct dmutex__try *t);
	void *arg;
	/* The loop's. */
	struct dmutex__wsub *sub;       /* the subscription, once made */
	char *wake;                     /* its channel */
	int64_t io_budget, io_until;
	int io_attempt;
	int failing;                    /* a try failed before the deadline */
};

/* Run aq's tries until one is DONE or the rules above end the wait; the
 * subscription is dropped before returning.  The try's result, or EBUSY,
 * ETIMEDOUT, EINVAL (bad deadline), EIO (backend failing). */
int dmutex__acquire_wait(struct dmutex__acquire *aq);

/*
 * The deadline every request of a call begun at `start` with deadline
 * `until` (INT64_MAX: none) carries to the backend (backend.h's
 * dmutex__acq.deadline and its kin): 0 without one (the backend's own
 * timeouts bound each request); else the caller's, so that a server that
 * does not answer cannot hold a timed call up for a command timeout past
 * it.  But never sooner than DMUTEX__AT_ONCE_MS (at most a command
 * timeout) after the call began: what is free at once is taken whatever
 * the deadline (POSIX), and its request needs the time of an answer.
 */
int64_t dmutex__timed_deadline(const struct dmutex_client *c, int64_t start, int64_t until);

/* For a try that starts over with a new token (a new channel): drop the
 * subscription; the next busy answer subscribes anew. */
void dmutex__acquire_unsubscribe(struct dmutex__acquire *aq);

#endif
