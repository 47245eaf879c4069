/* What dmutex_client_open checks on each node before it accepts a URL. */
#ifndef DMUTEX_CHECK_H
#define DMUTEX_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "node.h"

#define DMUTEX__RUN_ID_MAX 48

/*
 * On connection c to node n, each exchange bounded by command_timeout_ms:
 *  - the ACL lets this user do everything the library does (the scripts'
 *    commands on a scratch key, PUBLISH and SUBSCRIBE on a scratch channel,
 *    all under prefix): else EACCES and one log line naming what is
 *    missing;
 *  - maxmemory-policy: a policy that may evict our keys is warned about;
 *  - the server's run_id into run_id ("" when INFO is refused), for
 *    Redlock's duplicate check.
 * The scratch key and channel are named after `name` (a cluster: one whose
 * slot n serves), or after a random token when it is NULL.
 * 0, EACCES, or EIO (no answer; logged).  On an error the connection may
 * be in any state: the caller closes it.
 */
int dmutex__node_check(struct dmutex__node *n, struct dmutex__conn *c, const char *prefix,
		const char *name, char run_id[DMUTEX__RUN_ID_MAX]);

#endif
