/*
 * Redis Sentinel: where the master of a redis-sentinel:// URL is.  The
 * master's node (node.c) asks here before it dials, and says here when what
 * it was told proved wrong; nothing above the node knows of sentinels.
 *
 *  - The address comes from any sentinel that answers SENTINEL
 *    get-master-addr-by-name, the one that answered last asked first; node.c
 *    checks it with ROLE after connecting.
 *  - It is kept until proved wrong (a connection that fails, ROLE not
 *    master, READONLY: dmutex__sentinel_stale) or until a sentinel announces
 *    +switch-master (the watch thread), and then asked again.
 *  - Every change bumps a generation: a connection dialled for an older one
 *    is closed instead of pooled, so no request goes to a demoted master
 *    once a sentinel has said so.
 *
 * The sentinels are nodes of their own (node.h); the master's node sees
 * them only as its locator, so node.c does not include this.
 */
#ifndef DMUTEX_SENTINEL_H
#define DMUTEX_SENTINEL_H

#include <stddef.h>
#include <stdint.h>

struct dmutex__node;
struct dmutex__node_addr;

/*
 * dmutex__node_init, and for a redis-sentinel:// template (addr->master_name
 * set) the sentinels that name its master: reads their password files and
 * TLS files too.  0, EINVAL (a file: logged) or ENOMEM; on failure nothing
 * is left to finish.  dmutex__node_fini frees the sentinels with the node.
 */
int dmutex__master_init(struct dmutex__node *n, const struct dmutex__node_addr *addr,
		unsigned connect_ms, unsigned command_ms);

/*
 * Start the thread that follows +switch-master on one sentinel at a time;
 * on a switch it drops master's idle connections.  0 (also for a node
 * without sentinels) or an errno (no thread: failovers are still
 * followed, on the first error).
 */
int dmutex__master_watch(struct dmutex__node *master);

#endif
