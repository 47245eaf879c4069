/*
 * Semaphores, barriers, read-write locks and condition variables over
 * etcd (sem.c, barrier.c, rw.c and cond.c: their keys are described
 * there) and the read-modify-write that
 * semaphores and barriers share (counter.c).
 *
 * keys, under the URL's prefix (<n> as in etcd.h):
 *   <prefix>s/<n>/v          a semaphore: "FREE INIT" (no lease)
 *   <prefix>b/<n>/v          a barrier: "COUNT GEN ARRIVED" (no lease)
 *   <prefix>s/<n>/o/<token>  an operation's result (post, take, arrive),
 *   <prefix>b/<n>/o/<token>  on a lease that outlives the retry window by
 *                            ten seconds: a try asked again after a lost
 *                            reply finds it and is not applied twice
 * A change is one txn comparing the value key's mod revision with the one
 * read (and that the result key is still absent): two clients that read
 * the same value cannot both write it; the loser reads again.
 * Wake channels: "k:<value key>": every change of the value wakes the
 * waiters, who look again (a wake-up may be spurious, never lost).
 *
 * etcd has no clock we can read: the "server time" a retry's deadline is
 * counted on (struct dmutex__op) is this machine's CLOCK_REALTIME, and a
 * retry past it is refused here before it is sent; the ten seconds of the
 * result's lease beyond the window cover a try held up on its way.
 */
#ifndef DMUTEX_ETCD_PRIMS_H
#define DMUTEX_ETCD_PRIMS_H

#include <stddef.h>

#include "backend/etcd/etcd.h"

/* A value's text: "1 2 3" (the largest is a barrier's three numbers). */
#define DMUTEX__ETCD_VAL_MAX 96

/*
 * One read-modify-write of key, its result kept under opkey (NULL: not
 * kept, no op).  apply(arg, cur, nv, res, &keep) sees the current value
 * (NULL: missing) and writes the new value into nv (empty: no change)
 * and the result into res (both DMUTEX__ETCD_VAL_MAX); keep 0 leaves
 * nothing under opkey (a take that found nothing free); returns 0 or EIO
 * (a value dmutex did not write: logged by apply).
 * 0 and res (the first try's result if opkey already had one); *refused
 * 1 (res untouched) for a retry past o->deadline_ms; EIO (o->maybe_done
 * set when a txn may have been applied); ENOMEM.
 */
typedef int dmutex__etcd_apply(void *arg, const char *cur, char *nv, char *res, int *keep);
int dmutex__etcd_rmw(struct dmutex__etcd *e, const char *key, const char *opkey,
		struct dmutex__op *o, dmutex__etcd_apply *apply, void *arg, char *res,
		int *refused);
/* The value of key into out (DMUTEX__ETCD_VAL_MAX): 1, 0 missing, or
 * -EIO / -ENOMEM. */
int dmutex__etcd_get(struct dmutex__etcd *e, const char *key, char *out);
/* Put value at key if missing: 1 put, 0 it exists (its value in out), or
 * -EIO / -ENOMEM. */
int dmutex__etcd_create(struct dmutex__etcd *e, const char *key, const char *value, char *out);
/* Delete key: 1 deleted, 0 missing, or -EIO / -ENOMEM. */
int dmutex__etcd_delete(struct dmutex__etcd *e, const char *key);
/* This machine's CLOCK_REALTIME in ms: what stands for etcd's clock. */
int dmutex__etcd_time_ms(long long *ms);

/* ---- sem.c ---- */
int dmutex__etcd_sem_create(struct dmutex__backend *be, const char *name, unsigned value,
		int flags, int *created);
int dmutex__etcd_sem_take(struct dmutex__backend *be, const char *name, unsigned init,
		struct dmutex__op *o, long long *taken);
int dmutex__etcd_sem_post(struct dmutex__backend *be, const char *name, unsigned init,
		struct dmutex__op *o, long long *value);
int dmutex__etcd_sem_time(struct dmutex__backend *be, const char *name, long long *ms);
int dmutex__etcd_sem_get(struct dmutex__backend *be, const char *name, unsigned init,
		long long *value);
int dmutex__etcd_sem_unlink(struct dmutex__backend *be, const char *name, int *existed);
void dmutex__etcd_sem_channel(struct dmutex__backend *be, const char *name, char *out);
/* admin.c */
int dmutex__etcd_mutex_fresh(struct dmutex__backend *be, const char *name, int *dropped);

#define DMUTEX__ETCD_SEM_OPS \
	.sem_create = dmutex__etcd_sem_create, \
	.sem_take = dmutex__etcd_sem_take, \
	.sem_post = dmutex__etcd_sem_post, \
	.sem_time = dmutex__etcd_sem_time, \
	.sem_get = dmutex__etcd_sem_get, \
	.sem_unlink = dmutex__etcd_sem_unlink, \
	.sem_channel = dmutex__etcd_sem_channel, \
	.mutex_fresh = dmutex__etcd_mutex_fresh

/* ---- barrier.c ---- */
int dmutex__etcd_barrier_create(struct dmutex__backend *be, const char *name, unsigned count,
		long long *other);
int dmutex__etcd_barrier_arrive(struct dmutex__backend *be, const char *name, unsigned count,
		struct dmutex__op *o, long long *gen, int *serial);
int dmutex__etcd_barrier_gen(struct dmutex__backend *be, const char *name, unsigned count,
		long long *gen);
int dmutex__etcd_barrier_time(struct dmutex__backend *be, const char *name, unsigned count,
		long long *ms);
void dmutex__etcd_barrier_channel(struct dmutex__backend *be, const char *name, char *out);

#define DMUTEX__ETCD_BARRIER_OPS \
	.barrier_create = dmutex__etcd_barrier_create, \
	.barrier_arrive = dmutex__etcd_barrier_arrive, \
	.barrier_gen = dmutex__etcd_barrier_gen, \
	.barrier_time = dmutex__etcd_barrier_time, \
	.barrier_channel = dmutex__etcd_barrier_channel

/* ---- cond.c ---- */
void dmutex__etcd_cond_channel(struct dmutex__backend *be, const char *name, const char *token,
		char *out);
unsigned dmutex__etcd_cond_ttl_ms(struct dmutex__backend *be);
int dmutex__etcd_cond_register(struct dmutex__backend *be, const char *name, const char *token);
int dmutex__etcd_cond_refresh(struct dmutex__backend *be, const char *name, const char *token,
		int *still);
int dmutex__etcd_cond_leave(struct dmutex__backend *be, const char *name, const char *token,
		int *still);
int dmutex__etcd_cond_wake(struct dmutex__backend *be, const char *name, int all, int *busy);
int dmutex__etcd_cond_leave_start(struct dmutex__backend *be, const char *name, const char *token,
		struct dmutex__cond_leaving *l);
int dmutex__etcd_cond_leave_end(struct dmutex__backend *be, const char *name, const char *token,
		struct dmutex__cond_leaving *l, int *still);

#define DMUTEX__ETCD_COND_OPS \
	.cond_channel = dmutex__etcd_cond_channel, \
	.cond_ttl_ms = dmutex__etcd_cond_ttl_ms, \
	.cond_register = dmutex__etcd_cond_register, \
	.cond_refresh = dmutex__etcd_cond_refresh, \
	.cond_leave = dmutex__etcd_cond_leave, \
	.cond_wake = dmutex__etcd_cond_wake, \
	.cond_leave_start = dmutex__etcd_cond_leave_start, \
	.cond_leave_end = dmutex__etcd_cond_leave_end

/* ---- rw.c ---- */
int dmutex__etcd_rw_acquire(struct dmutex__backend *be, const char *name, struct dmutex__rw_acq *a);
int dmutex__etcd_rw_release(struct dmutex__backend *be, const char *name, int op, const char *token,
		int *released, int *maybe_done);
void dmutex__etcd_rw_renew(struct dmutex__backend *be, struct dmutex__renewal *rn, size_t n,
		int64_t deadline);
char *dmutex__etcd_rw_channel(struct dmutex__backend *be, const char *name);

#define DMUTEX__ETCD_RW_OPS \
	.rw_acquire = dmutex__etcd_rw_acquire, \
	.rw_release = dmutex__etcd_rw_release, \
	.rw_renew = dmutex__etcd_rw_renew, \
	.rw_channel = dmutex__etcd_rw_channel

#endif
