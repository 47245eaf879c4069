/*
 * Wake-ups over Redis pub/sub: one subscriber thread per client, with one
 * pub/sub connection per node, delivers release notifications to the (at
 * most one per lock) thread of this process that waits on the backend for
 * that lock.  What fills backend.h's wake_* operations (DMUTEX__REDIS_WAKE_OPS
 * in topology.h); their comments there say what each does.
 */
#ifndef DMUTEX_WAITER_H
#define DMUTEX_WAITER_H

#include <stdint.h>

#include "backend/backend.h"

struct dmutex__backend;
struct dmutex__waiter;
struct dmutex__wsub;

/*
 * Subscribe to a lock's wake channel, starting the thread on first use.
 * Waits until a node confirms the subscription or until_ns.  Returns the
 * subscription (confirmed or not: an unconfirmed one still wakes when the
 * subscription lands) or NULL on ENOMEM.
 */
struct dmutex__wsub *dmutex__redis_waiter_sub(struct dmutex__backend *be, const char *channel,
		int64_t until_ns);
/* A fair waiter's own grant list `key` (fair_release.lua pushes its
 * hand-over there): no subscription and no listener, the waiting thread
 * pops it itself in wsub_wait (grant.c), and only that thread may use it.
 * NULL: not on this backend (Redlock), or ENOMEM; subscribe instead. */
struct dmutex__wsub *dmutex__redis_waiter_sub_own(struct dmutex__backend *be, const char *key);
/* As dmutex__redis_waiter_sub, for a kept lease (lease_cache.c): every message on
 * the channel, and a lost connection, also calls notify(arg) from the
 * wake-up thread with no lock held (one notify per backend: the last set).
 * Undone by dmutex__redis_waiter_unsub_notify. */
struct dmutex__wsub *dmutex__redis_waiter_sub_notify(struct dmutex__backend *be, const char *channel,
		int64_t until_ns, void (*notify)(void *), void *arg);
void dmutex__redis_waiter_unsub_notify(struct dmutex__backend *be, struct dmutex__wsub *s);
/* Wait until a node confirms s, or until_ns (a subscription made without
 * waiting, so that two go out together): 1 if one did. */
int dmutex__redis_wsub_confirmed(struct dmutex__backend *be, struct dmutex__wsub *s, int64_t until_ns);
/* The wake sequence: read it before asking the backend, wait on it after. */
uint64_t dmutex__redis_wsub_seq(struct dmutex__backend *be, struct dmutex__wsub *s);
/* How many moves of the sequence were messages (not a lost connection, a
 * late confirmation, a moved slot); moved before the sequence. */
uint64_t dmutex__redis_wsub_heard(struct dmutex__backend *be, struct dmutex__wsub *s);
/* Wait until the sequence moves past `seq` (1) or until_ns (0). */
int dmutex__redis_wsub_wait(struct dmutex__backend *be, struct dmutex__wsub *s, uint64_t seq,
		int64_t until_ns);
/* Wake only on hand-overs to `token` (and on every other message): a fair
 * lock's waiter.  NULL: wake on everything. */
void dmutex__redis_wsub_want(struct dmutex__backend *be, struct dmutex__wsub *s, const char *token);
/* The last hand-over to the wanted token, taken once: 1 with out set to
 * what it granted ("<fence>:<died>:<lease_ms>:<stamp>", or "" when the waiter is
 * to claim the lock itself), 0 if none came. */
int dmutex__redis_wsub_handed(struct dmutex__backend *be, struct dmutex__wsub *s, char *out);
int dmutex__redis_wsub_pop(struct dmutex__backend *be, struct dmutex__wsub *s, int ask);
void dmutex__redis_waiter_unsub(struct dmutex__backend *be, struct dmutex__wsub *s);
/* As dmutex__redis_waiter_unsub, without waking the thread: the channel goes
 * at its next pass (within DMUTEX__ALONE_LOOK_MS), with whatever that pass
 * sends (backend.h wake_unsub_late).  On Redlock and Cluster at once. */
void dmutex__redis_waiter_unsub_late(struct dmutex__backend *be, struct dmutex__wsub *s);

void dmutex__redis_waiter_stop(struct dmutex__backend *be);
/* fork: hold the lock under which waiters are created. */
void dmutex__redis_waiter_create_lock(void);
void dmutex__redis_waiter_create_unlock(void);
void dmutex__redis_waiter_lock(struct dmutex__backend *be);      /* fork prepare */
void dmutex__redis_waiter_unlock(struct dmutex__backend *be);    /* fork parent */
void dmutex__redis_waiter_atfork_child(struct dmutex__backend *be);

#endif
