/*
 * Barriers: the private state behind a dbarrier_t, and its backend calls.
 *
 * In Redis (default prefix), per barrier NAME:
 *   dmutex:barrier:{NAME}          hash: count, gen (cycles completed),
 *                                  arrived (in the current cycle)
 *   dmutex:barop:{NAME}:TOKEN      one arrival's result, kept for
 *                                  retry_window_ms and a second more, so
 *                                  that a retried call is not counted twice
 *   dmutex:barwake:{NAME}          channel: a completed cycle publishes
 */
#ifndef DMUTEX_BARRIER_H
#define DMUTEX_BARRIER_H

#include "internal.h"
#include "retry.h"
#include "backend/backend.h"

#define DBARRIER__MAGIC_INIT 0x44424152UL /* "DBAR" */

struct dmutex__barrier {
	struct dmutex_client *client;
	unsigned count;
	unsigned waiters;               /* atomic: threads of this process waiting */
	unsigned users;                 /* atomic: bind.h, dmutex__obj_hold */
	char name[];
};

/* dbarrier_wait as the caller's operation o: the shim asks again with the
 * same one while the backend is away and o->expired is not set, so the
 * arrival counts once (retry.h). */
int dmutex__barrier_wait_op(dbarrier_t *b, struct dmutex__op *o);

#endif
