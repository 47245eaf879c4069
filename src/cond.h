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
 * With several nodes (Redlock) every call goes to each node; registering
 * and waking need a majority, so that any waker meets any waiter on at
 * least one node.
 */
#ifndef DMUTEX_COND_H
#define DMUTEX_COND_H

#include <time.h>

#include "internal.h"
#include "keys.h"

#define DCOND__MAGIC_INIT 0x44434e44UL /* "DCND" */
#define DCOND__ATTR_MAGIC 0x63617474UL /* "catt" */

struct dmutex__cond {
	struct dmutex_client *client;
	clockid_t clock;                /* of dcond_timedwait */
	unsigned waiters;               /* atomic: threads of this process waiting */
	char name[];
};

/* The state behind c, binding a statically initialized one on first use. */
int dmutex__cond_resolve(dcond_t *c, struct dmutex__cond **out);

/* A channel name: prefix + "cwake:{NAME}:" + token. */
#define DMUTEX__CHANNEL_MAX (DMUTEX__KEY_MAX + DMUTEX__TOKEN_HEX + 2)
void dmutex__cond_channel(const struct dmutex__cond *cx, const char *token, char *out);

/* How long a registration lives without a refresh, and how long a woken
 * waiter has to acknowledge: from the client's lease. */
unsigned dmutex__cond_ttl_ms(const struct dmutex__cond *cx);

/*
 * Backend calls; each 0 or EIO (fewer than a majority of nodes answered).
 * register: add token to the waiters.
 * refresh:  *still = 1 if token is still a waiter (its expiry moved on),
 *           0 if a wake-up took it (or it expired).  Also hands on the
 *           wake-ups nobody acknowledged.
 * leave:    remove token and acknowledge its wake-up; *still = 1 if it was
 *           still a waiter on every node that answered, i.e. nobody woke it.
 * wake:     all = 0: wake one live waiter (signal); 1: every waiter.
 */
int dmutex__cond_register(struct dmutex__cond *cx, const char *token);
int dmutex__cond_refresh(struct dmutex__cond *cx, const char *token, int *still);
int dmutex__cond_leave(struct dmutex__cond *cx, const char *token, int *still);
int dmutex__cond_wake(struct dmutex__cond *cx, int all);

#endif
