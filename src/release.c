#include <errno.h>

#include "backend.h"
#include "internal.h"

/*
 * Release by token, retrying within the command timeout.  Compare-and-delete
 * is idempotent, but its answer is not: a retry after a lost reply finds the
 * key gone and says "not ours" although our first attempt deleted it.  So a
 * "not ours" that follows a possibly-applied attempt counts as released.
 */
int
dmutex__release(struct dmutex_client *c, const char *name, const char *token, int mode)
{
	struct dmutex__backend *be = c->be;
	int64_t until = dmutex__now_ns() + (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS;
	int released = 0, maybe = 0, any_maybe = 0, err;

	for (int attempt = 0;; attempt++) {
		err = be->ops->release(be, name, token, mode, &released, &maybe);
		any_maybe |= maybe;
		if (!err)
			return released || any_maybe ? 0 : ENOLCK;
		if (attempt >= 2 || dmutex__now_ns() >= until)
			return EIO;
		dmutex__sleep_until(dmutex__now_ns() + 20 * DMUTEX__MS * (attempt + 1));
	}
}
