#include <errno.h>
#include <string.h>

#include "core/cond.h"

static int
ok(const dcond_attr_t *a)
{
	return a && a->__magic == DCOND__ATTR_MAGIC;
}

int
dcond_attr_init(dcond_attr_t *a)
{
	if (!a)
		return EINVAL;
	memset(a, 0, sizeof *a);
	a->__magic = DCOND__ATTR_MAGIC;
	a->__clock = CLOCK_REALTIME;
	return 0;
}

int
dcond_attr_destroy(dcond_attr_t *a)
{
	if (!ok(a))
		return EINVAL;
	a->__magic = 0;
	return 0;
}

int
dcond_attr_setclock(dcond_attr_t *a, clockid_t clock)
{
	if (!ok(a))
		return EINVAL;
	if (clock != CLOCK_REALTIME && clock != CLOCK_MONOTONIC) {
		dmutex__log(DMUTEX_LOG_ERROR, "dcond_attr_setclock: clock %d is neither CLOCK_REALTIME nor CLOCK_MONOTONIC",
				(int)clock);
		return EINVAL;
	}
	a->__clock = clock;
	return 0;
}

int
dcond_attr_getclock(const dcond_attr_t *a, clockid_t *clock)
{
	if (!ok(a) || !clock)
		return EINVAL;
	*clock = a->__clock;
	return 0;
}

int
dcond_attr_setclient(dcond_attr_t *a, dmutex_client_t *client)
{
	if (!ok(a))
		return EINVAL;
	a->__client = client;
	return 0;
}
