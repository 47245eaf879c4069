/* The pthread shim's condition variable calls: pthread behaviour on top of
 * dcond (see shim/dmutex_shim.h). */
#include <errno.h>
#include <pthread.h>

#include "cond.h"
#include "name.h"
#include "object.h"
#include "stamp.h"

/* dcond_attr_t's __reserved[0]: the pshared value, only stored. */
#define ATTR_PSHARED 0
#define STAMP(o) DMUTEX__SHIM_STAMP(o)

/* Both objects may be handed to the core (object.h). */
static int
usable(dcond_t *c, dmutex_t *m, const char *call)
{
	int err = dmutex__shim_cond_ready(c, call);

	if (!err && m)
		err = dmutex__shim_mutex_ready(m, call);
	return err;
}

static void
pause_ms(int64_t ms)
{
	dmutex__sleep_until(dmutex__now_ns() + ms * DMUTEX__MS);
}

int
dmutex_shim_cond_init(dcond_t *c, const dcond_attr_t *a, const char *site)
{
	char name[DMUTEX_NAME_MAX + 1];
	int err;

	if (!c)
		return EINVAL;
	if ((err = dmutex__shim_site_name(DMUTEX__SHIM_COND, c, site, name)))
		return err;
	for (int attempt = 0; (err = dcond_init(c, name, a)) == EIO; attempt++) {
		if (attempt % 10 == 0)	/* the first, then every tenth */
			dmutex__log(DMUTEX_LOG_WARN, "pthread_cond_init('%s'): waiting for the backend", name);
		pause_ms(attempt < 4 ? 50 << attempt : 1000);
	}
	if (err)
		dmutex__shim_site_release(DMUTEX__SHIM_COND, c);
	else
		dmutex__shim_stamp(STAMP(c), a ? (int)(uintptr_t)a->__reserved[ATTR_PSHARED] : 0);
	return err;
}

int
dmutex_shim_cond_destroy(dcond_t *c)
{
	int64_t until = dmutex__now_ns() + 2000 * DMUTEX__MS;
	int err;

	if ((err = usable(c, NULL, "pthread_cond_destroy")))
		return err;
	/* POSIX lets a program destroy a condition variable as soon as it has
	 * woken every waiter; woken waiters may still be leaving (one round
	 * trip).  Give them that time. */
	while ((err = dcond_destroy(c)) == EBUSY && dmutex__now_ns() < until)
		pause_ms(1);
	if (!err)
		dmutex__shim_site_release(DMUTEX__SHIM_COND, c);
	return err;
}

/* dcond's EIO means the wait could not even be registered, and the mutex
 * is still held: after a pause, a spurious wake-up, so that the caller
 * looks at its predicate and waits again. */
int
dmutex_shim_cond_wait(dcond_t *c, dmutex_t *m)
{
	int err = usable(c, m, "pthread_cond_wait");

	if (!err)
		err = dcond_wait(c, m);
	if (err != EIO)
		return err;
	pause_ms(100);
	return 0;
}

int
dmutex_shim_cond_clockwait(dcond_t *c, dmutex_t *m, clockid_t clock, const struct timespec *at)
{
	struct timespec now;
	int err = usable(c, m, "pthread_cond_clockwait");

	if (!err)
		err = dcond_clockwait(c, m, clock, at);
	if (err != EIO)
		return err;
	pause_ms(100);
	clock_gettime(clock, &now);
	if (now.tv_sec > at->tv_sec || (now.tv_sec == at->tv_sec && now.tv_nsec >= at->tv_nsec))
		return ETIMEDOUT;
	return 0;
}

int
dmutex_shim_cond_timedwait(dcond_t *c, dmutex_t *m, const struct timespec *at)
{
	struct dmutex__cond *cx;
	int err;

	if ((err = usable(c, m, "pthread_cond_timedwait")) || (err = dmutex__cond_resolve(c, &cx)))
		return err;
	return dmutex_shim_cond_clockwait(c, m, cx->clock, at);
}

/* A signal that did not reach the backend would be a lost wake-up. */
static int
wake(dcond_t *c, int all)
{
	int err;

	if ((err = usable(c, NULL, (all ? "pthread_cond_broadcast" : "pthread_cond_signal"))))
		return err;
	for (int attempt = 0; (err = all ? dcond_broadcast(c) : dcond_signal(c)) == EIO; attempt++) {
		if (attempt % 10 == 0)	/* the first, then every tenth */
			dmutex__log(DMUTEX_LOG_WARN, "pthread_cond_%s: waiting for the backend", all ? "broadcast" : "signal");
		pause_ms(attempt < 4 ? 50 << attempt : 1000);
	}
	return err;
}

int
dmutex_shim_cond_signal(dcond_t *c)
{
	return wake(c, 0);
}

int
dmutex_shim_cond_broadcast(dcond_t *c)
{
	return wake(c, 1);
}

int
dmutex_shim_condattr_setpshared(dcond_attr_t *a, int pshared)
{
	clockid_t clock;

	/* Only stored: shared by nature (stamp.h for shared memory). */
	if (dcond_attr_getclock(a, &clock))
		return EINVAL;
	if (pshared != PTHREAD_PROCESS_PRIVATE && pshared != PTHREAD_PROCESS_SHARED) {
		dmutex__log(DMUTEX_LOG_ERROR, "pthread_condattr_setpshared: unknown value %d", pshared);
		return EINVAL;
	}
	a->__reserved[ATTR_PSHARED] = (void *)(uintptr_t)pshared;
	return 0;
}

int
dmutex_shim_condattr_getpshared(const dcond_attr_t *a, int *pshared)
{
	clockid_t clock;

	if (!pshared || dcond_attr_getclock(a, &clock))
		return EINVAL;
	*pshared = (int)(uintptr_t)a->__reserved[ATTR_PSHARED];
	return 0;
}
