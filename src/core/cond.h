/*
 * Condition variables: the private state behind a dcond_t, and the backend
 * calls that the public dcond_* calls are built from.
 *
 * In Redis (default prefix), per condition variable NAME:
 *   dmutex:cond:{NAME}         zset: waiter token -> registration expiry
 *                              (server ms); refreshed while the waiter lives
 *   dmutex:csig:{NAME}         zset: token of a waiter that a signal woke ->
 *                              acknowledgement deadline; a wake-up nobody
 *                              acknowledged in time is given to another waiter
 *   dmutex:cwake:{NAME}:TOKEN  channel: the one waiting thread's wake-up
 *
 * The backend calls: backend/backend.h (cond_*).
 */
#ifndef DMUTEX_COND_H
#define DMUTEX_COND_H

#include <time.h>

#include "internal.h"
#include "backend/backend.h"

#define DCOND__MAGIC_INIT 0x44434e44UL /* "DCND" */
#define DCOND__ATTR_MAGIC 0x63617474UL /* "catt" */

struct dmutex__cond {
	struct dmutex_client *client;
	clockid_t clock;                /* of dcond_timedwait */
	unsigned waiters;               /* atomic: threads of this process waiting */
	unsigned users;                 /* atomic: bind.h, dmutex__obj_hold */
	int busy;                       /* atomic, a hint: whether the last
	                                 * signals found waiters (cond_wake) */
	char name[];
};

/* Drop a user of cx (bind.h): the last one frees it. */
void dmutex__cond_put(struct dmutex__cond *cx);

/* The state behind c, binding a statically initialized one on first use. */
int dmutex__cond_resolve(dcond_t *c, struct dmutex__cond **out);

#endif
