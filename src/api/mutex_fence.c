#include <errno.h>
#include <string.h>

#include "core/internal.h"
#include "base/lockorder.h"
#include "base/log.h"

/*
 * Under e->mu, held by the caller (a hold taken from Redis; a local hold
 * on a kept lease takes a reserved token instead, dmutex__cache_fence:
 * the lock value's token is its lease's first hold's): the hold took the
 * lock with the plain SET (src/backend/redis/redis.c), which hands out no
 * token; ask Redis for one now (fence.lua), outside e->mu.  Only the holding thread changes the
 * hold, so it is the same hold after; the renewer may have found it lost
 * meanwhile.  A lock that no longer carries our token means the hold is
 * lost: reported as the renewer would.
 *
 * A failure to get an answer is asked again, with backoff, for as long
 * as the hold lasts (the renewer keeps extending it meanwhile): the hold
 * ends with a token or lost, as a caller can act on, never "maybe".  Only
 * a refusal (an ACL, foreign data) gives up at once: EIO.
 */
static int
assign(struct dmutex__entry *e, struct dmutex__lost *lost)
{
	struct dmutex__backend *be = e->client->be;
	char token[sizeof e->token];
	unsigned lease_ms = e->lease_ms;
	uint64_t fence = 0;
	int err, refused;

	if (!be->ops->fence)
		return 0;
	memcpy(token, e->token, sizeof token);
	for (int attempt = 0;; attempt++) {
		/* An answer after the hold's end could not vouch for it: no
		 * call outlives the deadline, whatever the command timeout. */
		int64_t until = e->deadline_ns;
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		err = be->ops->fence(be, e->name, token, lease_ms, until, &fence, &refused);
		dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
		if (err != EIO || refused || e->lost)
			break;
		dmutex__entry_check_lost(e, dmutex__now_ns(), lost);
		if (e->lost)
			return 0;
		dmutex__entry_backoff(e, attempt, lost);
		if (e->lost)
			return 0;
	}
	if (err == ENOLCK && !e->lost) {
		dmutex__log(DMUTEX_LOG_WARN, "'%s': the lock no longer carries this hold's token", e->name);
		e->deadline_ns = dmutex__now_ns();
		dmutex__entry_check_lost(e, e->deadline_ns, lost);
		return 0;
	}
	if (!err && !e->fence)
		e->fence = fence;
	return e->lost ? 0 : err;
}

static int
dmutex_fence_impl(dmutex_t *m, uint64_t *token)
{
	struct dmutex__mutex *mx;
	struct dmutex__entry *e;
	struct dmutex__lost lost;
	struct dmutex__suspects sus = { 0 };
	int err;

	if ((err = dmutex__resolve(m, &mx)))
		return err;
	if (!token)
		return EINVAL;
	e = mx->entry;
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	if (!e->held || !pthread_equal(e->owner, pthread_self())) {
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		/* Not ours to fence.  The last release of it, if still
		 * unanswered, is waited for and acted on first (onlost, if it
		 * was not ours): what Redis holds is known when this returns,
		 * as the header says; the loss is not this call's to return. */
		dmutex__rel_settle_now(e);
		return EPERM;
	}
	/* The holder's own clock decides, not the renewer's last word. */
	dmutex__entry_check_lost(e, dmutex__now_ns(), &lost);
	if (e->lost)
		err = ENOLCK;
	else if (!e->fence && (err = e->kept ? dmutex__cache_fence(e, &lost, &sus)
				: assign(e, &lost)) == 0 && e->lost)
		err = ENOLCK;
	if (!err)
		*token = e->fence;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	dmutex__lost_report(e, &lost);
	dmutex__kept_report(e, &sus);
	return err;
}

int
dmutex_fence(dmutex_t *m, uint64_t *token)
{
	int cs = dmutex__nocancel(), err = dmutex_fence_impl(m, token);

	dmutex__cancel_restore(cs);
	return err;
}
