/*
 * Barriers: the private state behind a dbarrier_t, and its backend calls.
 *
 * In Redis (default prefix), per barrier NAME:
 *   dmutex:barrier:{NAME}          hash: count, gen (cycles completed),
 *                                  arrived (in the current cycle)
 *   dmutex:barop:{NAME}:TOKEN      one arrival's result, kept a while so
 *                                  that a retried call is not counted twice
 *   dmutex:barwake:{NAME}          channel: a completed cycle publishes
 */
#ifndef DMUTEX_BARRIER_H
#define DMUTEX_BARRIER_H

#include "internal.h"
#include "sync.h"

#define DBARRIER__MAGIC_INIT 0x44424152UL /* "DBAR" */

struct dmutex__barrier {
	struct dmutex_client *client;
	unsigned count;
	unsigned waiters;               /* atomic: threads of this process waiting */
	char name[];
};

/* dbarrier_wait with the caller's request id: the shim asks again with the
 * same one while the backend is away, so the arrival counts once. */
int dmutex__barrier_wait_token(dbarrier_t *b, const char *token);

#endif
