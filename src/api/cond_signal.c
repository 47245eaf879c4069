/* signal and broadcast: one script run on the backend each. */
#include "core/bind.h"
#include "core/cond.h"

static int
dcond_signal_impl(dcond_t *c)
{
	struct dmutex__cond *cx;
	int err;

	if ((err = dmutex__cond_resolve(c, &cx)))
		return err;
	/* A waiter it wakes may destroy c before this returns. */
	dmutex__obj_hold(&cx->users);
	err = dmutex__cond_wake(cx->client->be, cx->name, 0, &cx->busy);
	dmutex__cond_put(cx);
	return err;
}

static int
dcond_broadcast_impl(dcond_t *c)
{
	struct dmutex__cond *cx;
	int err;

	if ((err = dmutex__cond_resolve(c, &cx)))
		return err;
	/* A waiter it wakes may destroy c before this returns. */
	dmutex__obj_hold(&cx->users);
	err = dmutex__cond_wake(cx->client->be, cx->name, 1, &cx->busy);
	dmutex__cond_put(cx);
	return err;
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
