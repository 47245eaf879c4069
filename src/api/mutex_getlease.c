#include <errno.h>

#include "core/internal.h"

/*
 * The lease the mutex's holds really get: its attribute's, or its client's
 * lease_ms (dmutex_attr_getlease answers 0 for "the client's").  A static
 * mutex is bound to the default client first, as its first use would:
 * binding changes the object only behind its opaque pointer, so the const
 * promise of the interface holds for what a caller can see.
 */
static int
dmutex_getlease_impl(const dmutex_t *m, unsigned *lease_ms)
{
	struct dmutex__mutex *mx;
	int err;

	if (!lease_ms) {
		dmutex__log(DMUTEX_LOG_ERROR, "dmutex_getlease: NULL lease_ms");
		return EINVAL;
	}
	if ((err = dmutex__resolve((dmutex_t *)m, &mx)))
		return err;
	*lease_ms = mx->lease_ms;
	return 0;
}

int
dmutex_getlease(const dmutex_t *m, unsigned *lease_ms)
{
	int cs = dmutex__nocancel(), err = dmutex_getlease_impl(m, lease_ms);

	dmutex__cancel_restore(cs);
	return err;
}
