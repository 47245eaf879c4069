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
 */
#ifndef DMUTEX_SENTINEL_H
#define DMUTEX_SENTINEL_H

#include <stddef.h>
#include <stdint.h>

struct dmutex__node;
struct dmutex__node_addr;
struct dmutex__sentinel;

/* For the master template addr (addr->master_name set): reads the
 * sentinels' password files and TLS files.  0, EINVAL (a file: logged) or
 * ENOMEM. */
int dmutex__sentinel_new(const struct dmutex__node_addr *addr, unsigned connect_ms,
		unsigned command_ms, struct dmutex__sentinel **out);
/* Stops the watch thread (if any) and frees everything. */
void dmutex__sentinel_free(struct dmutex__sentinel *s);
void dmutex__sentinel_atfork_child(struct dmutex__sentinel *s);

/*
 * The master's address into host (NUL-terminated) and *port, and the
 * generation it belongs to into *gen: the known one, or asked of the
 * sentinels by deadline (CLOCK_MONOTONIC ns).  0, or -1 with why filled
 * (no sentinel answered, none knows the master).
 */
int dmutex__sentinel_locate(struct dmutex__sentinel *s, int64_t deadline, char *host,
		size_t hostlen, int *port, unsigned *gen, char *why, size_t whylen);
/* The address of generation gen proved wrong: ask again next time (no-op
 * if it changed meanwhile). */
void dmutex__sentinel_stale(struct dmutex__sentinel *s, unsigned gen);
/* The current generation. */
unsigned dmutex__sentinel_gen(struct dmutex__sentinel *s);

/*
 * Start the thread that follows +switch-master on one sentinel at a time;
 * on a switch it drops master's idle connections.  0 or an errno (no
 * thread: failovers are still followed, on the first error).
 */
int dmutex__sentinel_watch(struct dmutex__sentinel *s, struct dmutex__node *master);

#endif
