/* Which backend a URL names: the one place that knows every topology. */
#include "dmutex_config.h"
#include "backend/redis/topology.h"
#include "backend/redis/waiter.h"
#if DMUTEX_HAVE_ETCD
#include "backend/etcd/etcd.h"
#endif

int
dmutex__backend_create(const struct dmutex__backend_cfg *cfg, struct dmutex__backend **out)
{
#if DMUTEX_HAVE_ETCD
	if (cfg->nodes[0].etcd)
		return dmutex__backend_etcd_create(cfg, out);
#endif
	if (cfg->nodes[0].cluster)
		return dmutex__backend_cluster_create(cfg, out);
	if (cfg->nnodes > 1)
		return dmutex__backend_redlock_create(cfg, out);
	return dmutex__backend_redis_create(cfg, out);
}

/* Every kind of backend's creation lock, taken in one order: Redis's
 * listener's, then etcd's. */
void
dmutex__waiter_create_lock(void)
{
	dmutex__redis_waiter_create_lock();
#if DMUTEX_HAVE_ETCD
	dmutex__etcd_watch_create_lock();
#endif
}

void
dmutex__waiter_create_unlock(void)
{
#if DMUTEX_HAVE_ETCD
	dmutex__etcd_watch_create_unlock();
#endif
	dmutex__redis_waiter_create_unlock();
}
