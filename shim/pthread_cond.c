/* The pthread shim's condition variable calls: pthread behaviour on top of
 * dcond (see shim/include/dmutex_shim.h). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "core/shim.h"
#include "pause.h"
#include "local.h"
#include "name.h"
#include "object.h"
#include "stamp.h"

/* dcond_attr_t's __reserved[0]: the pshared value, only stored. */
#define ATTR_PSHARED 0
#define STAMP(o) DMUTEX__SHIM_STAMP(o)

/*
 * Both objects ready for the call (object.h): *lc and *lm set when they
 * are local.  One local and one distributed cannot make a wait: a local
 * condition variable wakes no other process, a distributed one cannot
 * release a local mutex atomically with registering the waiter.
 */
static int
usable(dcond_t *c, dmutex_t *m, const char *call, pthread_cond_t **lc, pthread_mutex_t **lm)
{
	int err = dmutex__shim_cond_ready(c, call, lc);

	*lm = NULL;
	if (!err && m)
		err = dmutex__shim_mutex_ready(m, call, lm);
	if (!err && m && !*lc != !*lm) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: the condition variable %p is %s and the mutex %p is %s; "
				"make both local (DMUTEX_SHIM_LOCAL) or neither", call, (void *)c,
				*lc ? "local" : "distributed", (void *)m, *lm ? "local" : "distributed");
		err = EINVAL;
	}
	return err;
}

static int
init_local(dcond_t *c, const dcond_attr_t *a, const char *site, const char *name)
{
	struct dmutex__shim_lcond *l = (struct dmutex__shim_lcond *)(void *)c;
	pthread_condattr_t pa;
	clockid_t clock;
	int err;

	pthread_condattr_init(&pa);
	if (a && !dcond_attr_getclock(a, &clock)) {
		pthread_condattr_setclock(&pa, clock);
		pthread_condattr_setpshared(&pa, (int)(uintptr_t)a->__reserved[ATTR_PSHARED]);
	}
	err = pthread_cond_init(&l->cv, &pa);
	pthread_condattr_destroy(&pa);
	if (err)
		return err;
	l->site = site;
	__atomic_store_n(&l->magic, DCOND__SHIM_LOCAL_INIT, __ATOMIC_RELEASE);
	dmutex__shim_announce(c, "condition variable", name, site, 1);
	return 0;
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
	if (dmutex__shim_is_local(site, name)) {
		if (a && a->__magic != DCOND__ATTR_MAGIC)
			err = EINVAL;
		else
			err = init_local(c, a, site, name);
		if (err)
			dmutex__shim_site_release(DMUTEX__SHIM_COND, c);
		return err;
	}
	for (int attempt = 0; (err = dcond_init(c, name, a)) == EIO; attempt++) {
		if (attempt % 10 == 0)	/* the first, then every tenth */
			dmutex__log(DMUTEX_LOG_WARN, "pthread_cond_init('%s'): waiting for the backend", name);
		dmutex__shim_pause_ms(attempt < 4 ? 50 << attempt : 1000);
	}
	if (err) {
		dmutex__shim_site_release(DMUTEX__SHIM_COND, c);
	} else {
		c->__reserved[0] = NULL;
		dmutex__shim_stamp(STAMP(c), a ? (int)(uintptr_t)a->__reserved[ATTR_PSHARED] : 0);
		dmutex__shim_announce(c, "condition variable", name, site, 0);
	}
	return err;
}

static int
all_zero(const void *obj, size_t size)
{
	const unsigned char *p = obj;

	for (size_t i = 0; i < size; i++)
		if (p[i])
			return 0;
	return 1;
}

int
dmutex_shim_cond_destroy(dcond_t *c)
{
	int64_t until = dmutex__now_ns() + 2000 * DMUTEX__MS;
	pthread_cond_t *lc;
	pthread_mutex_t *lm;
	int err;

	/* All zeros is what PTHREAD_COND_INITIALIZER makes: nothing was ever
	 * bound, nothing to free.  Programs reuse a destroyed condition
	 * variable's memory so and destroy it again (LTP pthread_cond_destroy
	 * 2-1, in a shared mapping, where a zero-filled one is otherwise
	 * refused: object.c). */
	if (c && all_zero(c, sizeof *c))
		return 0;
	if ((err = usable(c, NULL, "pthread_cond_destroy", &lc, &lm)))
		return err;
	if (lc) {
		if ((err = pthread_cond_destroy(lc)))
			return err;
		if (c->__magic == DCOND__SHIM_LOCAL_STATIC)
			free(c->__impl);
		c->__impl = NULL;
		__atomic_store_n(&c->__magic, DMUTEX__MAGIC_DESTROYED, __ATOMIC_RELEASE);
		dmutex__shim_site_release(DMUTEX__SHIM_COND, c);
		return 0;
	}
	/* POSIX lets a program destroy a condition variable as soon as it has
	 * woken every waiter; woken waiters may still be leaving (one round
	 * trip).  Give them that time. */
	while ((err = dcond_destroy(c)) == EBUSY && dmutex__now_ns() < until)
		dmutex__shim_pause_ms(1);
	if (!err)
		dmutex__shim_site_release(DMUTEX__SHIM_COND, c);
	return err;
}

/* dcond's EIO means the wait could not even be registered, and the mutex
 * is still held: after a pause, a spurious wake-up, so that the caller
 * looks at its predicate and waits again.  Its ENOLCK means the mutex is
 * held again, on a new hold, the one given up by the wait having been lost
 * (logged, onlost): to a pthread caller, which knows no ENOLCK here, a
 * wake-up like any other (its predicate is looked at under the mutex). */
int
dmutex_shim_cond_wait(dcond_t *c, dmutex_t *m)
{
	pthread_cond_t *lc;
	pthread_mutex_t *lm;
	int err = usable(c, m, "pthread_cond_wait", &lc, &lm);

	if (!err && lc)
		return pthread_cond_wait(lc, lm);
	if (!err)
		err = dcond_wait(c, m);
	if (err == ENOLCK)
		return 0;
	if (err != EIO)
		return err;
	dmutex__shim_pause_ms(100);
	return 0;
}

int
dmutex_shim_cond_clockwait(dcond_t *c, dmutex_t *m, clockid_t clock, const struct timespec *at)
{
	struct timespec now;
	pthread_cond_t *lc;
	pthread_mutex_t *lm;
	int err = usable(c, m, "pthread_cond_clockwait", &lc, &lm);

	if (!err && lc)
		return pthread_cond_clockwait(lc, lm, clock, at);
	if (!err)
		err = dcond_clockwait(c, m, clock, at);
	if (err == ENOLCK)
		return 0;
	if (err != EIO)
		return err;
	dmutex__shim_pause_ms(100);
	clock_gettime(clock, &now);
	if (now.tv_sec > at->tv_sec || (now.tv_sec == at->tv_sec && now.tv_nsec >= at->tv_nsec))
		return ETIMEDOUT;
	return 0;
}

int
dmutex_shim_cond_timedwait(dcond_t *c, dmutex_t *m, const struct timespec *at)
{
	pthread_cond_t *lc;
	pthread_mutex_t *lm;
	clockid_t clock;
	int err;

	if ((err = usable(c, m, "pthread_cond_timedwait", &lc, &lm)))
		return err;
	if (lc)
		return pthread_cond_timedwait(lc, lm, at);
	if ((err = dmutex__shim_cond_clock(c, &clock)))
		return err;
	return dmutex_shim_cond_clockwait(c, m, clock, at);
}

/* A signal that did not reach the backend would be a lost wake-up. */
static int
wake(dcond_t *c, int all)
{
	pthread_cond_t *lc;
	pthread_mutex_t *lm;
	int err;

	if ((err = usable(c, NULL, all ? "pthread_cond_broadcast" : "pthread_cond_signal", &lc, &lm)))
		return err;
	if (lc)
		return all ? pthread_cond_broadcast(lc) : pthread_cond_signal(lc);
	for (int attempt = 0; (err = all ? dcond_broadcast(c) : dcond_signal(c)) == EIO; attempt++) {
		if (attempt % 10 == 0)	/* the first, then every tenth */
			dmutex__log(DMUTEX_LOG_WARN, "pthread_cond_%s: waiting for the backend", all ? "broadcast" : "signal");
		dmutex__shim_pause_ms(attempt < 4 ? 50 << attempt : 1000);
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
