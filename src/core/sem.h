/*
 * Counting semaphores: the private state behind a dsem_t, and the backend
 * calls the public dsem_* calls are built from.
 *
 * In Redis (default prefix), per semaphore NAME:
 *   dmutex:sem:{NAME}          hash: v (free permits), init (creator's value)
 *   dmutex:semop:{NAME}:TOKEN  the result of one take or post, kept for
 *                              retry_window_ms and a second more, so that
 *                              a retried call is not applied twice
 *   dmutex:semwake:{NAME}      channel: a post publishes, waiters try again
 */
#ifndef DMUTEX_SEM_H
#define DMUTEX_SEM_H

#include "internal.h"
#include "retry.h"
#include "backend/backend.h"

#define DSEM__MAGIC_INIT 0x4453454dUL /* "DSEM" */

struct dmutex__sem {
	struct dmutex_client *client;
	unsigned value;                 /* initial value, used if it is recreated */
	unsigned waiters;               /* atomic: threads of this process waiting */
	unsigned users;                 /* atomic: bind.h, dmutex__obj_hold */
	char name[];
};

int dmutex__sem_resolve(dsem_t *s, struct dmutex__sem **out);
/* Drop a user of sx (bind.h): the last one frees it. */
void dmutex__sem_put(struct dmutex__sem *sx);

/*
 * Take or post as the operation o (one token: applied at most once),
 * asking again while the backend fails, for up to DMUTEX__SEM_TRIES calls
 * and within the client's retry_window_ms (retry.h).  So a lost reply
 * costs neither a permit nor a post unless the backend stays unreachable
 * through every try.  0 or the last error; o->expired once given up.
 */
#define DMUTEX__SEM_TRIES 3
int dmutex__sem_take_once(struct dmutex__sem *sx, struct dmutex__op *o, int *taken);
int dmutex__sem_post_once(struct dmutex__sem *sx, struct dmutex__op *o, long long *value);

/*
 * dsem_wait/trywait (try_only) and the timed ones (until on
 * CLOCK_MONOTONIC, INT64_MAX none), and dsem_post, as the caller's
 * operation o: the shim asks again with the same one while the backend is
 * away and o->expired is not set, so that no retry takes or returns a
 * second permit.  cs: the cancellation state its sleep runs with (the
 * caller's for the shim's sem_wait, a cancellation point; else
 * PTHREAD_CANCEL_DISABLE); the rest runs with cancellation disabled.
 */
int dmutex__sem_wait_until(dsem_t *s, struct dmutex__op *o, int64_t until, int try_only, int cs);
int dmutex__sem_post_op(dsem_t *s, struct dmutex__op *o);
/* A realtime or monotonic deadline as CLOCK_MONOTONIC ns (INT64_MAX: none);
 * EINVAL for another clock or a bad tv_nsec (logged, naming sx). */
int dmutex__sem_deadline(const char *name, clockid_t clock, const struct timespec *at,
		int64_t *until);

#endif
