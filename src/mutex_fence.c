#include <errno.h>

#include "internal.h"
#include "lockorder.h"

static int
dmutex_fence_impl(dmutex_t *m, uint64_t *token)
{
	struct dmutex__mutex *mx;
	struct dmutex__entry *e;
	struct dmutex__lost lost;
	int err;

	if ((err = dmutex__resolve(m, &mx)))
		return err;
	if (!token)
		return EINVAL;
	e = mx->entry;
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	if (!e->held || !pthread_equal(e->owner, pthread_self())) {
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		/* Our last release, unanswered, may prove not ours (ENOLCK). */
		dmutex__rel_settle(e, 1);
		dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
		err = dmutex__rel_nolck(e) ? ENOLCK : EPERM;
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		return err;
	}
	/* The holder's own clock decides, not the renewer's last word. */
	dmutex__entry_check_lost(e, dmutex__now_ns(), &lost);
	if (e->lost)
		err = ENOLCK;
	else
		*token = e->fence;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	dmutex__lost_report(e, &lost);
	return err;
}

int
dmutex_fence(dmutex_t *m, uint64_t *token)
{
	int cs = dmutex__nocancel(), err = dmutex_fence_impl(m, token);

	dmutex__cancel_restore(cs);
	return err;
}
