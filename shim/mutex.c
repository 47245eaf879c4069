/*
 * The pthread shim's mutex calls: pthread behaviour on top of dmutex.  A
 * pthread program does not expect its mutex calls to fail because a server
 * is away, and would run unprotected if they did: blocking calls wait for
 * the backend instead (see shim/dmutex_shim.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#include "internal.h"
#include "name.h"
#include "object.h"
#include "stamp.h"

/* shim/pthread.h maps the robustness calls straight to dmutex's. */
_Static_assert((int)PTHREAD_MUTEX_STALLED == (int)DMUTEX_STALLED && (int)PTHREAD_MUTEX_ROBUST == (int)DMUTEX_ROBUST,
		"pthread and dmutex robustness values differ");

/* Back off between attempts while the backend is away: 50 ms doubling to
 * 1 s (each dmutex attempt already retried for a few command timeouts). */
static void
backoff(int attempt)
{
	int64_t d = 50 * DMUTEX__MS << (attempt < 5 ? attempt : 5);
	dmutex__sleep_until(dmutex__now_ns() + (d < 1000 * DMUTEX__MS ? d : 1000 * DMUTEX__MS));
}

static int
attr_ok(const dmutex_attr_t *a)
{
	return a && a->__magic == DMUTEX__ATTR_MAGIC;
}

/* dmutex_attr_t's __reserved[1]: the pshared value, only stored (a dmutex
 * is shared by nature; stamp.h says what shared memory may do). */
#define ATTR_PSHARED 1

#define STAMP(m) DMUTEX__SHIM_STAMP(m)

int
dmutex_shim_mutex_init(dmutex_t *m, const dmutex_attr_t *a, const char *site)
{
	char name[DMUTEX_NAME_MAX + 1];
	const char *given = attr_ok(a) ? a->__reserved[0] : NULL;
	int err;

	if (!m)
		return EINVAL;
	if (given)
		dmutex__shim_site_release(DMUTEX__SHIM_MUTEX, m);
	else if ((err = dmutex__shim_site_name(DMUTEX__SHIM_MUTEX, m, site, name)))
		return err;
	for (int attempt = 0; (err = dmutex_init(m, given ? given : name, a)) == EIO; attempt++) {
		if (attempt % 10 == 0)	/* the first, then every tenth */
			dmutex__log(DMUTEX_LOG_WARN, "pthread_mutex_init('%s'): waiting for the backend",
				given ? given : name);
		backoff(attempt);
	}
	if (err && !given)
		dmutex__shim_site_release(DMUTEX__SHIM_MUTEX, m);
	if (!err)
		dmutex__shim_stamp(STAMP(m), attr_ok(a) ? (int)(uintptr_t)a->__reserved[ATTR_PSHARED] : 0);
	return err;
}

int
dmutex_shim_mutex_destroy(dmutex_t *m)
{
	int err = dmutex__shim_mutex_ready(m, "pthread_mutex_destroy");

	if (!err)
		err = dmutex_destroy(m);
	if (!err)
		dmutex__shim_site_release(DMUTEX__SHIM_MUTEX, m);
	return err;
}

int
dmutex_shim_mutex_lock(dmutex_t *m)
{
	int err;

	if ((err = dmutex__shim_mutex_ready(m, "pthread_mutex_lock")))
		return err;
	for (int attempt = 0; (err = dmutex_lock(m)) == EIO; attempt++) {
		if (attempt % 10 == 0)	/* the first, then every tenth */
			dmutex__log(DMUTEX_LOG_WARN, "pthread_mutex_lock: waiting for the backend");
		backoff(attempt);
	}
	return err;
}

int
dmutex_shim_mutex_trylock(dmutex_t *m)
{
	int err = dmutex__shim_mutex_ready(m, "pthread_mutex_trylock");

	if (!err)
		err = dmutex_trylock(m);

	/* "Not now" is what a trylock caller is ready for. */
	return err == EIO ? EBUSY : err;
}

static int
passed(clockid_t clock, const struct timespec *at)
{
	struct timespec now;

	clock_gettime(clock, &now);
	return now.tv_sec > at->tv_sec || (now.tv_sec == at->tv_sec && now.tv_nsec >= at->tv_nsec);
}

int
dmutex_shim_mutex_clocklock(dmutex_t *m, clockid_t clock, const struct timespec *at)
{
	int err;

	if ((err = dmutex__shim_mutex_ready(m, "pthread_mutex_clocklock")))
		return err;
	for (int attempt = 0; (err = dmutex_clocklock(m, clock, at)) == EIO; attempt++) {
		if (passed(clock, at))
			return ETIMEDOUT;
		if (attempt % 10 == 0)	/* the first, then every tenth */
			dmutex__log(DMUTEX_LOG_WARN, "pthread_mutex_timedlock: waiting for the backend");
		backoff(attempt);
	}
	return err;
}

int
dmutex_shim_mutex_timedlock(dmutex_t *m, const struct timespec *at)
{
	return dmutex_shim_mutex_clocklock(m, CLOCK_REALTIME, at);
}

int
dmutex_shim_mutex_unlock(dmutex_t *m)
{
	int err = dmutex__shim_mutex_ready(m, "pthread_mutex_unlock");

	if (!err)
		err = dmutex_unlock(m);
	/* Not confirmed: the hold is forgotten here, the release retried in
	 * the background, and the lease ends it anyway (logged). */
	return err == EIO ? 0 : err;
}

/* ---- attributes, with pthread's values ---- */

int
dmutex_shim_mutexattr_settype(dmutex_attr_t *a, int type)
{
	switch (type) {
	case PTHREAD_MUTEX_NORMAL:
	case PTHREAD_MUTEX_ADAPTIVE_NP:
		return dmutex_attr_settype(a, DMUTEX_NORMAL);
	case PTHREAD_MUTEX_ERRORCHECK:
		return dmutex_attr_settype(a, DMUTEX_ERRORCHECK);
	case PTHREAD_MUTEX_RECURSIVE:
		return dmutex_attr_settype(a, DMUTEX_RECURSIVE);
	}
	dmutex__log(DMUTEX_LOG_ERROR, "pthread_mutexattr_settype: unknown type %d", type);
	return EINVAL;
}

int
dmutex_shim_mutexattr_gettype(const dmutex_attr_t *a, int *type)
{
	int t, err;

	if (!type || (err = dmutex_attr_gettype(a, &t)))
		return EINVAL;
	*type = t == DMUTEX_RECURSIVE ? PTHREAD_MUTEX_RECURSIVE
		: t == DMUTEX_ERRORCHECK ? PTHREAD_MUTEX_ERRORCHECK : PTHREAD_MUTEX_NORMAL;
	return 0;
}

int
dmutex_shim_mutexattr_setpshared(dmutex_attr_t *a, int pshared)
{
	/* Only stored: a dmutex is shared by nature (stamp.h for shared memory). */
	if (!attr_ok(a))
		return EINVAL;
	if (pshared != PTHREAD_PROCESS_PRIVATE && pshared != PTHREAD_PROCESS_SHARED) {
		dmutex__log(DMUTEX_LOG_ERROR, "pthread_mutexattr_setpshared: unknown value %d", pshared);
		return EINVAL;
	}
	a->__reserved[ATTR_PSHARED] = (void *)(uintptr_t)pshared;
	return 0;
}

int
dmutex_shim_mutexattr_getpshared(const dmutex_attr_t *a, int *pshared)
{
	if (!attr_ok(a) || !pshared)
		return EINVAL;
	*pshared = (int)(uintptr_t)a->__reserved[ATTR_PSHARED];
	return 0;
}

int
dmutex_shim_mutexattr_setprotocol(dmutex_attr_t *a, int protocol)
{
	if (!attr_ok(a))
		return EINVAL;
	if (protocol == PTHREAD_PRIO_NONE)
		return 0;
	if (protocol == PTHREAD_PRIO_INHERIT || protocol == PTHREAD_PRIO_PROTECT) {
		dmutex__log(DMUTEX_LOG_ERROR, "pthread_mutexattr_setprotocol: priority %s has no meaning for a "
				"lock held across hosts", protocol == PTHREAD_PRIO_INHERIT ? "inheritance" : "ceilings");
		return ENOTSUP;
	}
	return EINVAL;
}

int
dmutex_shim_mutexattr_getprotocol(const dmutex_attr_t *a, int *protocol)
{
	if (!attr_ok(a) || !protocol)
		return EINVAL;
	*protocol = PTHREAD_PRIO_NONE;
	return 0;
}

int
dmutex_shim_mutexattr_setname_np(dmutex_attr_t *a, const char *name)
{
	const char *copy;
	size_t len;
	int err;

	if (!attr_ok(a))
		return EINVAL;
	if ((err = dmutex__name_ok(name, &len)))
		return err;
	if (!(copy = dmutex__shim_intern(name)))
		return ENOMEM;
	a->__reserved[0] = (void *)(uintptr_t)copy;
	return 0;
}
