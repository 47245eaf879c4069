/* Inside the backend: the topologies behind backend.h and what they share. */
#ifndef DMUTEX_TOPOLOGY_H
#define DMUTEX_TOPOLOGY_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

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

/* release_async (release_async.c) on node n: one Redis, or Sentinel's master. */
int dmutex__backend_redis_release_async(struct dmutex__backend *be, struct dmutex__node *n,
		const char *name, const char *token, int mode, int64_t deadline, int64_t until_ns,
		dmutex__rescue_fn rescue, void *rescue_arg, struct dmutex__rel_ticket **out);

/* verify for nodes[0..nnodes) (one Redis, Redlock; nodelist.c): each node
 * reachable and checked (check.h), a majority up, no server listed twice. */
int dmutex__backend_verify_nodes(struct dmutex__backend *be, size_t *up, size_t *need);
/* atfork_prepare / atfork_parent for nodes[0..nnodes). */
void dmutex__backend_lock_nodes(struct dmutex__backend *be);
void dmutex__backend_unlock_nodes(struct dmutex__backend *be);
/* In atfork_child: what dmutex__backend_lock_nodes took, forgotten by the
 * lock-order checker (the mutexes themselves are made anew). */
void dmutex__backend_child_nodes(struct dmutex__backend *be);

#endif
