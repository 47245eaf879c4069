/*
 * The Redis operations of condition variables, read-write locks,
 * semaphores and barriers (cond_ops.c, rwlock_ops.c, sem_ops.c,
 * barrier_ops.c): what the tables of redis.c, redlock.c and cluster.c put
 * behind backend.h's cond_*, rw_*, sem_* and barrier_* operations, whose
 * comments there say what each does.  Keys and channels are listed in
 * src/core/cond.h, rwlock.h, sem.h and barrier.h.
 */
#ifndef DMUTEX_BACKEND_SYNC_H
#define DMUTEX_BACKEND_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "base/base.h"

/* ---- condition variables ----
 * Each 0 or EIO (fewer than a majority of nodes answered).
 * register: add token to the waiters.
 * refresh:  *still = 1 if token is still a waiter (its expiry moved on),
 *           0 if a wake-up took it (or it expired).  Also hands on the
 *           wake-ups nobody acknowledged.
 * leave:    remove token and acknowledge its wake-up; *still = 1 if it was
 *           still a waiter on every node that answered, i.e. nobody woke it.
 * wake:     all = 0: wake one live waiter (signal); 1: every waiter.
 * With several nodes (Redlock) every call goes to each node; registering
 * and waking need a majority, so that any waker meets any waiter on at
 * least one node. */
void dmutex__redis_cond_channel(struct dmutex__backend *be, const char *name, const char *token,
		char *out);
/* How long a registration lives without a refresh, and how long a woken
 * waiter has to acknowledge: from the client's lease. */
unsigned dmutex__redis_cond_ttl_ms(struct dmutex__backend *be);
int dmutex__redis_cond_register(struct dmutex__backend *be, const char *name, const char *token);
int dmutex__redis_cond_refresh(struct dmutex__backend *be, const char *name, const char *token,
		int *still);
int dmutex__redis_cond_leave(struct dmutex__backend *be, const char *name, const char *token,
		int *still);
int dmutex__redis_cond_wake(struct dmutex__backend *be, const char *name, int all);
int dmutex__redis_cond_leave_start(struct dmutex__backend *be, const char *name, const char *token,
		struct dmutex__cond_leaving *l);
int dmutex__redis_cond_leave_end(struct dmutex__backend *be, const char *name, const char *token,
		struct dmutex__cond_leaving *l, int *still);

/* ---- read-write locks, one master ---- */
int dmutex__redis_rw_acquire(struct dmutex__backend *be, const char *name, struct dmutex__rw_acq *a);
/* 0 and *released (1 while still valid, 0 not ours), or EIO. */
int dmutex__redis_rw_release(struct dmutex__backend *be, const char *name, int op, const char *token,
		int *released, int *maybe_done);
/* The renewal thread's batch of rw holds (rn[i].rw 'r' or 'w'); fills
 * result and writer_waits, ending by deadline (CLOCK_MONOTONIC ns). */
void dmutex__redis_rw_renew(struct dmutex__backend *be, struct dmutex__renewal *rn, size_t n,
		int64_t deadline);
/* The wake channel. Caller frees. */
char *dmutex__redis_rw_channel(struct dmutex__backend *be, const char *name);

/* ---- semaphores, one master ----
 * 0 or EIO (the node did not answer, or answered an error).  `init` is
 * the creator's value, used if the semaphore must be made again.
 * create:  flags DSEM_EXCL / DSEM_NOCREATE; *created = 1 created,
 *          0 existed, -1 existed and DSEM_EXCL, -2 missing and DSEM_NOCREATE.
 * take:    *taken = 1 or 0 (none free), or DMUTEX__OP_REFUSED.
 * post:    *value = the new value, -1 at DSEM_VALUE_MAX, or
 *          DMUTEX__OP_REFUSED.
 * get:     *value = free permits.
 * unlink:  *existed = 1 or 0.
 * time:    *ms = the server's time (ms since the epoch, its clock).
 * take and post carry the caller's dmutex__op: the same token again is not
 * applied twice, it returns the first call's result, kept for the op's
 * window and a second more; a try with a deadline that reaches the server
 * after it, when that result may be gone, is refused. */
#define DMUTEX__SEM_OPKEY_MAX (DMUTEX__KEY_MAX + DMUTEX__TOKEN_HEX + 2)
int dmutex__redis_sem_create(struct dmutex__backend *be, const char *name, unsigned value, int flags,
		int *created);
int dmutex__redis_sem_take(struct dmutex__backend *be, const char *name, unsigned init,
		struct dmutex__op *o, long long *taken);
int dmutex__redis_sem_post(struct dmutex__backend *be, const char *name, unsigned init,
		struct dmutex__op *o, long long *value);
int dmutex__redis_sem_time(struct dmutex__backend *be, const char *name, long long *ms);
int dmutex__redis_sem_get(struct dmutex__backend *be, const char *name, unsigned init,
		long long *value);
int dmutex__redis_sem_unlink(struct dmutex__backend *be, const char *name, int *existed);
/* The wake channel into out[DMUTEX__KEY_MAX]. */
void dmutex__redis_sem_channel(struct dmutex__backend *be, const char *name, char *out);

/* ---- barriers, one master ----
 * 0 or EIO (logged).
 * create: *other = 0 if it is (now) a barrier of this count, else the count
 *         it has.
 * arrive: *gen = the cycle arrived in, *serial = 1 if this arrival
 *         completed it; *gen = DMUTEX__OP_REFUSED_GEN a retry refused.
 *         The same token again returns the first result (as semaphores).
 * gen:    *gen = cycles completed.
 * time:   *ms = the server's time (ms since the epoch, its clock). */
#define DMUTEX__BARRIER_OPKEY_MAX (DMUTEX__KEY_MAX + DMUTEX__TOKEN_HEX + 2)
int dmutex__redis_barrier_create(struct dmutex__backend *be, const char *name, unsigned count,
		long long *other);
int dmutex__redis_barrier_arrive(struct dmutex__backend *be, const char *name, unsigned count,
		struct dmutex__op *o, long long *gen, int *serial);
int dmutex__redis_barrier_gen(struct dmutex__backend *be, const char *name, unsigned count,
		long long *gen);
int dmutex__redis_barrier_time(struct dmutex__backend *be, const char *name, unsigned count,
		long long *ms);
/* The wake channel into out[DMUTEX__KEY_MAX]. */
void dmutex__redis_barrier_channel(struct dmutex__backend *be, const char *name, char *out);

#endif
