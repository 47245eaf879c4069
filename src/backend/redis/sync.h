/*
 * The backend calls of condition variables, read-write locks, semaphores
 * and barriers (cond.c, rwlock.c, sem.c, barrier.c here): part of the
 * backend's interface, with backend.h and waiter.h.  Each names its object
 * by backend and name; the core's private state (src/core/cond.h, rwlock.h,
 * sem.h, barrier.h) stays the core's.  Keys and channels are listed in
 * those headers.
 */
#ifndef DMUTEX_BACKEND_SYNC_H
#define DMUTEX_BACKEND_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "base/base.h"

/* A channel name with a token after it: prefix + "cwake:{NAME}:" + token. */
#define DMUTEX__CHANNEL_MAX (DMUTEX__KEY_MAX + DMUTEX__TOKEN_HEX + 2)

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
void dmutex__cond_channel(struct dmutex__backend *be, const char *name, const char *token,
		char *out);
/* How long a registration lives without a refresh, and how long a woken
 * waiter has to acknowledge: from the client's lease. */
unsigned dmutex__cond_ttl_ms(struct dmutex__backend *be);
int dmutex__cond_register(struct dmutex__backend *be, const char *name, const char *token);
int dmutex__cond_refresh(struct dmutex__backend *be, const char *name, const char *token,
		int *still);
int dmutex__cond_leave(struct dmutex__backend *be, const char *name, const char *token,
		int *still);
int dmutex__cond_wake(struct dmutex__backend *be, const char *name, int all);
/* leave, in two halves around the caller's next round trip (a woken
 * waiter taking its mutex back), so that both cost one: start sends the
 * script without waiting, end reads its answer (or, if that failed, leaves
 * the slow way).  start: 0, or ENOTSUP when it cannot go ahead alone
 * (several nodes, a cluster, no connection): the caller leaves at once. */
struct dmutex__cond_leaving {
	struct dmutex__node *node;
	struct dmutex__conn *conn;
	int64_t until;
};
int dmutex__cond_leave_start(struct dmutex__backend *be, const char *name, const char *token,
		struct dmutex__cond_leaving *l);
int dmutex__cond_leave_end(struct dmutex__backend *be, const char *name, const char *token,
		struct dmutex__cond_leaving *l, int *still);

/* ---- read-write locks, one master ----
 * op 'r' share, 'w' write lock, 'q' (release only) a waiting writer's
 * intent.  0 or EIO (logged); *maybe_done as backend.h. */
struct dmutex__rw_acq {
	int op;
	const char *token;
	unsigned lease_ms;
	int wait;               /* a writer that will wait: register its intent */
	/* out */
	int taken;
	uint64_t fence;
	long long pttl_ms;      /* not taken: the blocking hold ends in at most this */
	int maybe_done;
	int refused;
};
int dmutex__rw_acquire(struct dmutex__backend *be, const char *name, struct dmutex__rw_acq *a);
/* 0 and *released (1 while still valid, 0 not ours), or EIO. */
int dmutex__rw_release(struct dmutex__backend *be, const char *name, int op, const char *token,
		int *released, int *maybe_done);
/* The renewal thread's batch of rw holds (rn[i].rw 'r' or 'w'); fills
 * result and writer_waits, ending by deadline (CLOCK_MONOTONIC ns). */
void dmutex__rw_renew(struct dmutex__backend *be, struct dmutex__renewal *rn, size_t n,
		int64_t deadline);
/* The wake channel. Caller frees. */
char *dmutex__rw_channel(struct dmutex__backend *be, const char *name);

/* ---- an operation asked again after a lost reply (semaphores, barriers) ----
 * Every try carries one token; the server keeps the result under it for
 * window_ms and a second more, so a try that finds it is not applied
 * twice.  A first try carries deadline_ms 0; a retry carries the server's
 * time (ms) after which it is refused (DMUTEX__OP_REFUSED) rather than
 * applied, set by the core no later than the server's time at the first
 * try plus the window: one that reaches the server when the result may be
 * gone is never applied again.  The backend reads token, window_ms and
 * deadline_ms, and sets maybe_done; the rest is the core's (src/core/retry.c). */
struct dmutex__op {
	char token[DMUTEX__TOKEN_HEX + 1];
	unsigned window_ms;     /* the client's retry_window_ms */
	long long deadline_ms;  /* 0: none (no try lost since the last answer) */
	int maybe_done;         /* the latest try failed (EIO) but may have been
	                         * applied: it reached Redis, its answer did not
	                         * come back (or made no sense) */
	int64_t sent;           /* CLOCK_MONOTONIC ns: the latest try went out */
	int64_t lost_at;        /* the first try since the last answer went out; 0: none */
	int expired;            /* gave up: whether it was applied is unknown */
};
#define DMUTEX__OP_REFUSED (-2LL)

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
int dmutex__sem_create(struct dmutex__backend *be, const char *name, unsigned value, int flags,
		int *created);
int dmutex__sem_take(struct dmutex__backend *be, const char *name, unsigned init,
		struct dmutex__op *o, long long *taken);
int dmutex__sem_post(struct dmutex__backend *be, const char *name, unsigned init,
		struct dmutex__op *o, long long *value);
int dmutex__sem_time(struct dmutex__backend *be, const char *name, long long *ms);
int dmutex__sem_get(struct dmutex__backend *be, const char *name, unsigned init,
		long long *value);
int dmutex__sem_unlink(struct dmutex__backend *be, const char *name, int *existed);
/* The wake channel into out[DMUTEX__KEY_MAX]. */
void dmutex__sem_channel(struct dmutex__backend *be, const char *name, char *out);

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
#define DMUTEX__OP_REFUSED_GEN (-1LL)
int dmutex__barrier_create(struct dmutex__backend *be, const char *name, unsigned count,
		long long *other);
int dmutex__barrier_arrive(struct dmutex__backend *be, const char *name, unsigned count,
		struct dmutex__op *o, long long *gen, int *serial);
int dmutex__barrier_gen(struct dmutex__backend *be, const char *name, unsigned count,
		long long *gen);
int dmutex__barrier_time(struct dmutex__backend *be, const char *name, unsigned count,
		long long *ms);
/* The wake channel into out[DMUTEX__KEY_MAX]. */
void dmutex__barrier_channel(struct dmutex__backend *be, const char *name, char *out);

#endif
