/* A mutex started afresh when no process uses it (the shim's users.c):
 * one script on the one master. */
#include <errno.h>

#include "common.h"
#include "keys.h"
#include "base/log.h"
#include "node.h"
#include "backend/redis/scripts/scripts.h"
#include "sync.h"

int
dmutex__redis_mutex_fresh(struct dmutex__backend *be, const char *name, int *dropped)
{
	char lk[DMUTEX__KEY_MAX], mk[DMUTEX__KEY_MAX], ch[DMUTEX__KEY_MAX];
	long long r;
	int md = 0, err = EIO;
	redisReply *rep;

	dmutex__key(lk, be->cfg.prefix, "lock", name);
	dmutex__key(mk, be->cfg.prefix, "meta", name);
	dmutex__key(ch, be->cfg.prefix, "wake", name);
	const char *argv[] = { lk, mk, ch };
	if (!(rep = dmutex__node_call_within(&be->nodes[0], DMUTEX__SCRIPT_MUTEX_FRESH, 2, 3, argv, &md, 0))) {
		dmutex__log(DMUTEX_LOG_ERROR, "mutex '%s': starting it afresh: the backend did not answer", name);
		return EIO;
	}
	if (!dmutex__int_in(rep, -1, 1, &r)) {
		*dropped = (int)r;
		err = 0;
	} else {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: mutex '%s': starting it afresh: %s", be->nodes[0].addr->display,
				name, rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
	}
	freeReplyObject(rep);
	return err;
}
