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
 * With several nodes (Redlock) every call goes to each node; registering
 * and waking need a majority, so that any waker meets any waiter on at
 * least one node. */
void dmutex__redis_cond_channel(struct dmutex__backend *be, const char *name, const char *token,
		char *out);
unsigned dmutex__redis_cond_ttl_ms(struct dmutex__backend *be);
int dmutex__redis_cond_register(struct dmutex__backend *be, const char *name, const char *token);
int dmutex__redis_cond_refresh(struct dmutex__backend *be, const char *name, const char *token,
		int *still);
int dmutex__redis_cond_leave(struct dmutex__backend *be, const char *name, const char *token,
		int *still);
int dmutex__redis_cond_wake(struct dmutex__backend *be, const char *name, int all, int *busy);
int dmutex__redis_cond_leave_start(struct dmutex__backend *be, const char *name, const char *token,
		struct dmutex__cond_leaving *l);
int dmutex__redis_cond_leave_end(struct dmutex__backend *be, const char *name, const char *token,
		struct dmutex__cond_leaving *l, int *still);

/* ---- read-write locks, one master ---- */
int dmutex__redis_rw_acquire(struct dmutex__backend *be, const char *name, struct dmutex__rw_acq *a);
int dmutex__redis_rw_release(struct dmutex__backend *be, const char *name, int op, const char *token,
		int *released, int *maybe_done);
void dmutex__redis_rw_renew(struct dmutex__backend *be, struct dmutex__renewal *rn, size_t n,
		int64_t deadline);
char *dmutex__redis_rw_channel(struct dmutex__backend *be, const char *name);

/* ---- semaphores, one master ----
 * An op's result is kept under a key named by its token (sem_ops.c). */
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
void dmutex__redis_sem_channel(struct dmutex__backend *be, const char *name, char *out);
/* fresh.c */
int dmutex__redis_mutex_fresh(struct dmutex__backend *be, const char *name, int *dropped);

/* ---- barriers, one master ---- */
#define DMUTEX__BARRIER_OPKEY_MAX (DMUTEX__KEY_MAX + DMUTEX__TOKEN_HEX + 2)
int dmutex__redis_barrier_create(struct dmutex__backend *be, const char *name, unsigned count,
		long long *other);
int dmutex__redis_barrier_arrive(struct dmutex__backend *be, const char *name, unsigned count,
		struct dmutex__op *o, long long *gen, int *serial);
int dmutex__redis_barrier_gen(struct dmutex__backend *be, const char *name, unsigned count,
		long long *gen);
int dmutex__redis_barrier_time(struct dmutex__backend *be, const char *name, unsigned count,
		long long *ms);
void dmutex__redis_barrier_channel(struct dmutex__backend *be, const char *name, char *out);

#endif
