#include <errno.h>
#include <string.h>

#include "core/internal.h"

static int
ok(const dmutex_attr_t *a)
{
	return a && a->__magic == DMUTEX__ATTR_MAGIC;
}

int
dmutex_attr_init(dmutex_attr_t *a)
{
	if (!a)
		return EINVAL;
	memset(a, 0, sizeof *a);
	a->__magic = DMUTEX__ATTR_MAGIC;
	a->__type = DMUTEX_DEFAULT;
	a->__robust = DMUTEX_STALLED;
	return 0;
}

int
dmutex_attr_destroy(dmutex_attr_t *a)
{
	if (!ok(a))
		return EINVAL;
	a->__magic = 0;
	return 0;
}

int
dmutex_attr_settype(dmutex_attr_t *a, int type)
{
	if (!ok(a) || (type != DMUTEX_NORMAL && type != DMUTEX_ERRORCHECK && type != DMUTEX_RECURSIVE))
		return EINVAL;
	a->__type = type;
	return 0;
}

int
dmutex_attr_gettype(const dmutex_attr_t *a, int *type)
{
	if (!ok(a) || !type)
		return EINVAL;
	*type = a->__type;
	return 0;
}

int
dmutex_attr_setrobust(dmutex_attr_t *a, int robust)
{
	if (!ok(a) || (robust != DMUTEX_STALLED && robust != DMUTEX_ROBUST))
		return EINVAL;
	a->__robust = robust;
	return 0;
}

int
dmutex_attr_getrobust(const dmutex_attr_t *a, int *robust)
{
	if (!ok(a) || !robust)
		return EINVAL;
	*robust = a->__robust;
	return 0;
}

int
dmutex_attr_setlease(dmutex_attr_t *a, unsigned lease_ms)
{
	if (!ok(a))
		return EINVAL;
	if (lease_ms < DMUTEX_LEASE_MIN || lease_ms > DMUTEX_LEASE_MAX) {
		dmutex__log(DMUTEX_LOG_ERROR, "lease %u ms is outside %u ms .. %u ms",
				lease_ms, DMUTEX_LEASE_MIN, DMUTEX_LEASE_MAX);
		return EINVAL;
	}
	a->__lease_ms = lease_ms;
	return 0;
}

int
dmutex_attr_getlease(const dmutex_attr_t *a, unsigned *lease_ms)
{
	if (!ok(a) || !lease_ms)
		return EINVAL;
	*lease_ms = a->__lease_ms;
	return 0;
}

int
dmutex_attr_setclient(dmutex_attr_t *a, dmutex_client_t *client)
{
	if (!ok(a))
		return EINVAL;
	a->__client = client;
	return 0;
}

int
dmutex_attr_setonlost(dmutex_attr_t *a, void (*onlost)(const char *, void *), void *arg)
{
	if (!ok(a))
		return EINVAL;
	a->__onlost = onlost;
	a->__onlost_arg = arg;
	return 0;
}

int
dmutex_attr_setfair(dmutex_attr_t *a, int fair)
{
	if (!ok(a) || (fair != 0 && fair != 1))
		return EINVAL;
	a->__flags = fair ? a->__flags | DMUTEX__ATTR_FAIR : a->__flags & ~DMUTEX__ATTR_FAIR;
	return 0;
}

int
dmutex_attr_getfair(const dmutex_attr_t *a, int *fair)
{
	if (!ok(a) || !fair)
		return EINVAL;
	*fair = (a->__flags & DMUTEX__ATTR_FAIR) != 0;
	return 0;
}

int
dmutex_attr_setleasecache(dmutex_attr_t *a, int on)
{
	if (!ok(a) || (on != 0 && on != 1))
		return EINVAL;
	a->__flags = on ? a->__flags & ~DMUTEX__ATTR_NOCACHE : a->__flags | DMUTEX__ATTR_NOCACHE;
	return 0;
}

int
dmutex_attr_getleasecache(const dmutex_attr_t *a, int *on)
{
	if (!ok(a) || !on)
		return EINVAL;
	*on = !(a->__flags & DMUTEX__ATTR_NOCACHE);
	return 0;
}
