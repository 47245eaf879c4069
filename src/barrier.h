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
#include "keys.h"

#define DBARRIER__MAGIC_INIT 0x44424152UL /* "DBAR" */
#define DMUTEX__BARRIER_OPKEY_MAX (DMUTEX__KEY_MAX + DMUTEX__TOKEN_HEX + 2)

struct dmutex__barrier {
	struct dmutex_client *client;
	unsigned count;
	unsigned waiters;               /* atomic: threads of this process waiting */
	char name[];
};

/*
 * Backend calls; 0 or EIO (logged).
 * create: *other = 0 if it is (now) a barrier of this count, else the count
 *         it has.
 * arrive: *gen = the cycle arrived in, *serial = 1 if this arrival
 *         completed it.  The same token again returns the first result.
 * gen:    *gen = cycles completed.
 */
int dmutex__barrier_create(struct dmutex_client *c, const char *name, unsigned count,
		long long *other);
int dmutex__barrier_arrive(struct dmutex__barrier *bx, const char *token, long long *gen,
		int *serial);
int dmutex__barrier_gen(struct dmutex__barrier *bx, long long *gen);
void dmutex__barrier_channel(const struct dmutex__barrier *bx, char *out);

/* dbarrier_wait with the caller's request id: the shim asks again with the
 * same one while the backend is away, so the arrival counts once. */
int dmutex__barrier_wait_token(dbarrier_t *b, const char *token);

#endif
