#include <errno.h>

#include "backend/backend.h"
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
	return dmutex__release_by(c, name, token, mode,
			dmutex__now_ns() + (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS);
}

int
dmutex__release_by(struct dmutex_client *c, const char *name, const char *token, int mode,
		int64_t until)
{
	return dmutex__release_to(c, name, token, mode, until, NULL);
}

/* A retry after a lost answer cannot tell whether the first handed the
 * lock to next: it finds the lock not ours, next->granted 0, and next asks
 * with the token it was offered (a lock handed to it is then already its
 * own, fair_acquire.lua). */
static int
release_to(struct dmutex_client *c, const char *name, const char *token, int mode,
		int64_t until, struct dmutex__handoff *next, int *ran)
{
	struct dmutex__backend *be = c->be;
	int released = 0, maybe = 0, any_maybe = 0, err;

	if (next && !be->ops->release_to)
		next = NULL;

	/* Every attempt ends by until, not each its own command timeout: the
	 * EIO of an unlock comes within command_timeout_ms in total. */
	for (int attempt = 0;; attempt++) {
		if (dmutex__now_ns() >= until)
			return EIO;
		err = next ? be->ops->release_to(be, name, token, mode, until, next, &released, &maybe)
			: be->ops->release(be, name, token, mode, until, &released, &maybe);
		any_maybe |= maybe;
		*ran = any_maybe;
		if (!err)
			return released || any_maybe ? 0 : ENOLCK;
		if (attempt >= 2)
			return EIO;
		int64_t wake = dmutex__now_ns() + 20 * DMUTEX__MS * (attempt + 1);
		dmutex__sleep_until(wake < until ? wake : until);
	}
}

int
dmutex__release_to(struct dmutex_client *c, const char *name, const char *token, int mode,
		int64_t until, struct dmutex__handoff *next)
{
	int ran = 0;

	return release_to(c, name, token, mode, until, next, &ran);
}

int
dmutex__release_sure(struct dmutex_client *c, const char *name, const char *token, int mode,
		int64_t until, int *ran)
{
	*ran = 0;
	return release_to(c, name, token, mode, until, NULL, ran);
}

int
dmutex__release_to_sure(struct dmutex_client *c, const char *name, const char *token, int mode,
		int64_t until, struct dmutex__handoff *next, int *ran)
{
	*ran = 0;
	return release_to(c, name, token, mode, until, next, ran);
}
