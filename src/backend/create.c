/* Which backend a URL names: the one place that knows every topology. */
#include "internal.h"
#include "topology.h"

int
dmutex__backend_create(struct dmutex_client *c, struct dmutex__backend **out)
{
	if (c->cfg.nodes[0].cluster)
		return dmutex__backend_cluster_create(c, out);
	if (c->cfg.nnodes > 1)
		return dmutex__backend_redlock_create(c, out);
	return dmutex__backend_redis_create(c, out);
}
