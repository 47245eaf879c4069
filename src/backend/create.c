/* Which backend a URL names: the one place that knows every topology. */
#include "backend/redis/topology.h"
#include "backend/redis/waiter.h"

int
dmutex__backend_create(const struct dmutex__backend_cfg *cfg, struct dmutex__backend **out)
{
	if (cfg->nodes[0].cluster)
		return dmutex__backend_cluster_create(cfg, out);
	if (cfg->nnodes > 1)
		return dmutex__backend_redlock_create(cfg, out);
	return dmutex__backend_redis_create(cfg, out);
}

/* Every kind of backend's creation lock, taken in one order (a second
 * kind with its own listener adds its lock here). */
void
dmutex__waiter_create_lock(void)
{
	dmutex__redis_waiter_create_lock();
}

void
dmutex__waiter_create_unlock(void)
{
	dmutex__redis_waiter_create_unlock();
}
