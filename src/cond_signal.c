/* signal and broadcast: one script run on the backend each. */
#include "cond.h"

int
dcond_signal(dcond_t *c)
{
	struct dmutex__cond *cx;
	int err;

	if ((err = dmutex__cond_resolve(c, &cx)))
		return err;
	return dmutex__cond_wake(cx, 0);
}

int
dcond_broadcast(dcond_t *c)
{
	struct dmutex__cond *cx;
	int err;

	if ((err = dmutex__cond_resolve(c, &cx)))
		return err;
	return dmutex__cond_wake(cx, 1);
}
