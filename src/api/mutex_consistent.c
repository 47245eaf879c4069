#include <errno.h>

#include "core/internal.h"
#include "base/lockorder.h"

static int
dmutex_consistent_impl(dmutex_t *m)
{
	struct dmutex__mutex *mx;
	struct dmutex__entry *e;
	int err;

	if ((err = dmutex__resolve(m, &mx)))
		return err;
	e = mx->entry;
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	if (!e->held || !pthread_equal(e->owner, pthread_self()))
		err = EPERM;
	else if (mx->robust != DMUTEX_ROBUST || !e->inconsistent)
		err = EINVAL;
	else
		e->inconsistent = 0;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	return err;
}

int
dmutex_consistent(dmutex_t *m)
{
	int cs = dmutex__nocancel(), err = dmutex_consistent_impl(m);

	dmutex__cancel_restore(cs);
	return err;
}
