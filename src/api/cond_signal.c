/* signal and broadcast: one script run on the backend each. */
#include "core/cond.h"

static int
dcond_signal_impl(dcond_t *c)
{
	struct dmutex__cond *cx;
	int err;

	if ((err = dmutex__cond_resolve(c, &cx)))
		return err;
	return dmutex__cond_wake(cx->client->be, cx->name, 0);
}

static int
dcond_broadcast_impl(dcond_t *c)
{
	struct dmutex__cond *cx;
	int err;

	if ((err = dmutex__cond_resolve(c, &cx)))
		return err;
	return dmutex__cond_wake(cx->client->be, cx->name, 1);
}

int
dcond_signal(dcond_t *c)
{
	int cs = dmutex__nocancel(), err = dcond_signal_impl(c);

	dmutex__cancel_restore(cs);
	return err;
}

int
dcond_broadcast(dcond_t *c)
{
	int cs = dmutex__nocancel(), err = dcond_broadcast_impl(c);

	dmutex__cancel_restore(cs);
	return err;
}
