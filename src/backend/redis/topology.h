/* Inside the backend: the topologies behind backend.h and what they share. */
#ifndef DMUTEX_TOPOLOGY_H
#define DMUTEX_TOPOLOGY_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "counters.h"
#include "sync.h"
#include "waiter.h"

struct dmutex__node;

int dmutex__backend_redis_create(const struct dmutex__backend_cfg *cfg, struct dmutex__backend **out);
int dmutex__backend_redlock_create(const struct dmutex__backend_cfg *cfg, struct dmutex__backend **out);
int dmutex__backend_cluster_create(const struct dmutex__backend_cfg *cfg, struct dmutex__backend **out);

/* One master's acquire and release, on node n (a cluster: its face). */
int dmutex__backend_redis_acquire(struct dmutex__backend *be, struct dmutex__node *n,
		struct dmutex__acq *a);
int dmutex__backend_redis_release(struct dmutex__backend *be, struct dmutex__node *n,
		const char *name, const char *token, int mode, int64_t deadline,
		struct dmutex__handoff *next, int *released, int *maybe_done);

/* ops->fence on node n (fence.lua). */
int dmutex__backend_redis_fence(struct dmutex__backend *be, struct dmutex__node *n, const char *name,
		const char *token, unsigned lease_ms, int64_t deadline, uint64_t *fence, int *refused);

/* release_async (release_async.c) on node n: one Redis, or Sentinel's
 * master; and the ticket_* operations that read what it made. */
int dmutex__backend_redis_release_async(struct dmutex__backend *be, struct dmutex__node *n,
		const char *name, const char *token, int mode, int64_t deadline, int64_t until_ns,
		dmutex__rescue_fn rescue, void *rescue_arg, struct dmutex__rel_ticket **out);
int dmutex__redis_ticket_state(const struct dmutex__rel_ticket *t);
int dmutex__redis_ticket_wait(struct dmutex__rel_ticket *t, int64_t deadline);
void dmutex__redis_ticket_ref(struct dmutex__rel_ticket *t);
void dmutex__redis_ticket_put(struct dmutex__rel_ticket *t);

/* ops->channel: the wake channel of a lock, the same on every topology
 * (redis.c).  Caller frees. */
char *dmutex__redis_channel(struct dmutex__backend *be, const char *name);
/* ops->why for nodes[0..nnodes) (nodelist.c). */
void dmutex__redis_why(struct dmutex__backend *be, char *out, size_t len);

/* verify for nodes[0..nnodes) (one Redis, Redlock; nodelist.c): each node
 * reachable and checked (check.h), a majority up, no server listed twice. */
int dmutex__backend_verify_nodes(struct dmutex__backend *be, size_t *up, size_t *need);
/* atfork_prepare / atfork_parent for nodes[0..nnodes). */
void dmutex__backend_lock_nodes(struct dmutex__backend *be);
void dmutex__backend_unlock_nodes(struct dmutex__backend *be);
/* In atfork_child: what dmutex__backend_lock_nodes took, forgotten by the
 * lock-order checker (the mutexes themselves are made anew). */
void dmutex__backend_child_nodes(struct dmutex__backend *be);

/*
 * What every Redis topology's table holds alike: the same code behind
 * the operations, whatever the nodes (each reaches its node through
 * be->nodes, a cluster's face routing by key).  Spelled out once here,
 * named in each table.
 */
#define DMUTEX__REDIS_WAKE_OPS \
	.wake_sub = dmutex__redis_waiter_sub, \
	.wake_sub_notify = dmutex__redis_waiter_sub_notify, \
	.wake_unsub_notify = dmutex__redis_waiter_unsub_notify, \
	.wake_sub_own = dmutex__redis_waiter_sub_own, \
	.wake_confirmed = dmutex__redis_wsub_confirmed, \
	.wake_seq = dmutex__redis_wsub_seq, \
	.wake_heard = dmutex__redis_wsub_heard, \
	.wake_wait = dmutex__redis_wsub_wait, \
	.wake_want = dmutex__redis_wsub_want, \
	.wake_handed = dmutex__redis_wsub_handed, \
	.wake_pop = dmutex__redis_wsub_pop, \
	.wake_unsub = dmutex__redis_waiter_unsub, \
	.wake_unsub_late = dmutex__redis_waiter_unsub_late, \
	.wake_stop = dmutex__redis_waiter_stop, \
	.wake_lock = dmutex__redis_waiter_lock, \
	.wake_unlock = dmutex__redis_waiter_unlock, \
	.wake_atfork_child = dmutex__redis_waiter_atfork_child, \
	.wake_one = 1

#define DMUTEX__REDIS_COND_OPS \
	.cond_channel = dmutex__redis_cond_channel, \
	.cond_ttl_ms = dmutex__redis_cond_ttl_ms, \
	.cond_register = dmutex__redis_cond_register, \
	.cond_refresh = dmutex__redis_cond_refresh, \
	.cond_leave = dmutex__redis_cond_leave, \
	.cond_wake = dmutex__redis_cond_wake, \
	.cond_leave_start = dmutex__redis_cond_leave_start, \
	.cond_leave_end = dmutex__redis_cond_leave_end

/* One master only (not Redlock): read-write locks, semaphores, barriers. */
#define DMUTEX__REDIS_ONE_MASTER_OPS \
	.rw_acquire = dmutex__redis_rw_acquire, \
	.rw_release = dmutex__redis_rw_release, \
	.rw_renew = dmutex__redis_rw_renew, \
	.rw_channel = dmutex__redis_rw_channel, \
	.sem_create = dmutex__redis_sem_create, \
	.sem_take = dmutex__redis_sem_take, \
	.sem_post = dmutex__redis_sem_post, \
	.sem_time = dmutex__redis_sem_time, \
	.sem_get = dmutex__redis_sem_get, \
	.sem_unlink = dmutex__redis_sem_unlink, \
	.sem_channel = dmutex__redis_sem_channel, \
	.mutex_fresh = dmutex__redis_mutex_fresh, \
	.barrier_create = dmutex__redis_barrier_create, \
	.barrier_arrive = dmutex__redis_barrier_arrive, \
	.barrier_gen = dmutex__redis_barrier_gen, \
	.barrier_time = dmutex__redis_barrier_time, \
	.barrier_channel = dmutex__redis_barrier_channel

#define DMUTEX__REDIS_ADMIN_OPS \
	.counters_add = dmutex__redis_counters, \
	.counters_trim = dmutex__redis_counters_trim, \
	.counters_adopt = dmutex__redis_counters_adopt, \
	.why = dmutex__redis_why

#endif
