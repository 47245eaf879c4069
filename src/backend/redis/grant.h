/* A fair waiter's wait for its hand-over, by BLPOP on its grant list
 * (grant.c; README "Fair locks"). */
#ifndef DMUTEX_GRANT_H
#define DMUTEX_GRANT_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* Wait on the backend's one master (not Redlock) until a message comes
 * on the list `key` or until_ns: 1 with msg[cap] the message (cut to fit),
 * 0 none came, -1 refused (an error that asking again would repeat: the
 * ACL denies BLPOP or the key), -2 failed (the connection; ask again). */
int dmutex__redis_grant_pop(struct dmutex__backend *be, const char *key, int64_t until_ns, char *msg,
		size_t cap);

#endif
