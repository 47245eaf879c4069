/* URL grammar of API.md: parsed into a client configuration. */
#ifndef DMUTEX_URL_H
#define DMUTEX_URL_H

#include <stddef.h>

#include "backend/backend.h"       /* struct dmutex__node_addr: what a URL names */

struct dmutex__config {
	struct dmutex__node_addr *nodes;
	size_t nnodes;                /* 1, or N for Redlock (redis://, rediss://
	                               * and unix:// only) */
	unsigned connect_timeout_ms;  /* default 2000, 1 .. 600000 */
	unsigned command_timeout_ms;  /* default 1000, 1 .. 600000 */
	unsigned lease_ms;            /* default 10000, 100 .. 86400000 */
	unsigned node_timeout_ms;     /* Redlock per-node timeout; 0 (default): 5 % of
	                               * the lease, 50 .. 300 ms; 1 .. 600000 */
	char *prefix;                 /* default "dmutex:", 0 .. 128 bytes */
	unsigned metrics;             /* per-lock counters: 1 (default) or 0 (none) */
	unsigned async_release;       /* unlock does not wait for the release's answer:
	                               * 1 (default), or 0 (README "How it works") */
	unsigned lease_cache;         /* keep leases in the process (README "Cached
	                               * leases"): 1 (on, the default), 0 (off) */
	unsigned idle_ms;             /* a name's state in Redis expires this long
	                               * after its last use (lease end): default
	                               * 3600000, 100 .. 2592000000 (30 days) */
	unsigned retry_window_ms;     /* a semaphore's or barrier's operation whose
	                               * reply was lost is asked again for this
	                               * long at most, and the server keeps its
	                               * result a second longer: default
	                               * max(60000, 3 x command_timeout_ms),
	                               * 100 .. 86400000 */
};

#define DMUTEX__IDLE_DEFAULT 3600000u
/* lease_cache: on (README "Cached leases"); lease_cache=off turns it off. */
#define DMUTEX__LEASE_CACHE_DEFAULT 1u
#define DMUTEX__IDLE_MIN 100u
#define DMUTEX__IDLE_MAX 2592000000u

#define DMUTEX__RETRY_WINDOW_DEFAULT 60000u
#define DMUTEX__RETRY_WINDOW_MIN 100u
#define DMUTEX__RETRY_WINDOW_MAX 86400000u

#define DMUTEX__CONNECT_TIMEOUT_DEFAULT 2000u
#define DMUTEX__COMMAND_TIMEOUT_DEFAULT 1000u
#define DMUTEX__PREFIX_MAX 128u

#define DMUTEX__SENTINEL_PORT_DEFAULT 26379

/*
 * Parse `url` (never NULL here) into *cfg.  Returns 0; EINVAL with a log line
 * naming the problem (and never the password); ENOTSUP for rediss:// when
 * built without TLS (DMUTEX_HAVE_TLS 0); ENOMEM.  No file is opened here.  On error *cfg is
 * left empty (nothing to free, though freeing is harmless).
 */
int dmutex__url_parse(const char *url, struct dmutex__config *cfg);
void dmutex__config_free(struct dmutex__config *cfg);

#endif
