/*
 * pthread read-write locks through the shim: drwlock_t named by definition
 * site, the backend being away waited out (a pthread program does not
 * expect its lock calls to fail because a server is away).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#include "include/dmutex_shim_rwlock.h"
#include "core/shim.h"
#include "pause.h"
#include "name.h"

/* Local objects are for mutexes and condition variables: a rwlock from a
 * local site is distributed all the same (never unprotected). */
static const char *
site_of(const char *site)
{
	return site && site[0] == DMUTEX__SHIM_LOCAL_MARK[0] ? site + 1 : site;
}

static int
init_named(drwlock_t *rw, const char *name)
{
	int err;

	for (int attempt = 0; (err = drwlock_init(rw, name, NULL)) == EIO; attempt++) {
		if (attempt % 10 == 0)
			dmutex__log(DMUTEX_LOG_WARN, "pthread_rwlock_init('%s'): waiting for the backend", name);
		dmutex__shim_backoff(attempt);
	}
	return err;
}

int
dmutex_shim_rwlock_init(drwlock_t *rw, const dmutex_shim_rwlockattr_t *a, const char *site)
{
	char name[DMUTEX_NAME_MAX + 1];
	int err;

	if (!rw || (a && a->__magic != DMUTEX__SHIM_RWATTR_MAGIC))
		return EINVAL;
	if ((err = dmutex__shim_site_name(DMUTEX__SHIM_RWLOCK, rw, site_of(site), name)))
		return err;
	if ((err = init_named(rw, name)))
		dmutex__shim_site_release(DMUTEX__SHIM_RWLOCK, rw);
	return err;
}

/*
 * PTHREAD_RWLOCK_INITIALIZER records the site; the first use names and
 * binds the lock.  Binding is serialized here (the core's static binding
 * knows plain names only), and every shim call comes through this first,
 * so no call sees a half-bound object.
 */
static pthread_mutex_t bind_mu = PTHREAD_MUTEX_INITIALIZER;

static int
bind(drwlock_t *rw)
{
	char name[DMUTEX_NAME_MAX + 1];
	drwlock_t tmp;
	int err = 0;

	if (!rw)
		return EINVAL;
	if (__atomic_load_n(&rw->__magic, __ATOMIC_ACQUIRE) != DRWLOCK__MAGIC_STATIC ||
			rw->__reserved[0] != DMUTEX__SHIM_SITE)
		return 0;
	pthread_mutex_lock(&bind_mu);
	if (__atomic_load_n(&rw->__magic, __ATOMIC_ACQUIRE) == DRWLOCK__MAGIC_STATIC &&
			!(err = dmutex__shim_static_name(DMUTEX__SHIM_RWLOCK, rw, site_of(rw->__static_name), name)) &&
			!(err = init_named(&tmp, name))) {
		__atomic_store_n(&rw->__impl, tmp.__impl, __ATOMIC_RELEASE);
		__atomic_store_n(&rw->__magic, tmp.__magic, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&bind_mu);
	return err;
}

int
dmutex_shim_rwlock_destroy(drwlock_t *rw)
{
	int err;

	if (rw && __atomic_load_n(&rw->__magic, __ATOMIC_ACQUIRE) == DRWLOCK__MAGIC_STATIC &&
			rw->__reserved[0] == DMUTEX__SHIM_SITE) {
		/* Never used: nothing to forget but the object. */
		__atomic_store_n(&rw->__magic, DMUTEX__MAGIC_DESTROYED, __ATOMIC_RELEASE);
		return 0;
	}
	if (!(err = drwlock_destroy(rw)))
		dmutex__shim_site_release(DMUTEX__SHIM_RWLOCK, rw);
	return err;
}

/* A blocking call: while the backend is away, ask again. */
static int
blocking(drwlock_t *rw, int write, clockid_t clock, const struct timespec *at)
{
	int err;

	if ((err = bind(rw)))
		return err;
	for (int attempt = 0;; attempt++) {
		if (at)
			err = write ? drwlock_clockwrlock(rw, clock, at) : drwlock_clockrdlock(rw, clock, at);
		else
			err = write ? drwlock_wrlock(rw) : drwlock_rdlock(rw);
		if (err != EIO)
			return err;
		if (attempt % 10 == 0)
			dmutex__log(DMUTEX_LOG_WARN, "pthread_rwlock_%slock: waiting for the backend",
					write ? "wr" : "rd");
		dmutex__shim_backoff(attempt);
	}
}

int
dmutex_shim_rwlock_rdlock(drwlock_t *rw)
{
	return blocking(rw, 0, CLOCK_REALTIME, NULL);
}

int
dmutex_shim_rwlock_wrlock(drwlock_t *rw)
{
	return blocking(rw, 1, CLOCK_REALTIME, NULL);
}

int
dmutex_shim_rwlock_clockrdlock(drwlock_t *rw, clockid_t clock, const struct timespec *at)
{
	return at ? blocking(rw, 0, clock, at) : EINVAL;
}

int
dmutex_shim_rwlock_clockwrlock(drwlock_t *rw, clockid_t clock, const struct timespec *at)
{
	return at ? blocking(rw, 1, clock, at) : EINVAL;
}

int
dmutex_shim_rwlock_timedrdlock(drwlock_t *rw, const struct timespec *at)
{
	return dmutex_shim_rwlock_clockrdlock(rw, CLOCK_REALTIME, at);
}

int
dmutex_shim_rwlock_timedwrlock(drwlock_t *rw, const struct timespec *at)
{
	return dmutex_shim_rwlock_clockwrlock(rw, CLOCK_REALTIME, at);
}

int
dmutex_shim_rwlock_tryrdlock(drwlock_t *rw)
{
	int err = bind(rw);

	if (!err)
		err = drwlock_tryrdlock(rw);
	/* pthread callers know EBUSY, not EIO: the lock is not available. */
	return err == EIO ? EBUSY : err;
}

int
dmutex_shim_rwlock_trywrlock(drwlock_t *rw)
{
	int err = bind(rw);

	if (!err)
		err = drwlock_trywrlock(rw);
	return err == EIO ? EBUSY : err;
}

int
dmutex_shim_rwlock_unlock(drwlock_t *rw)
{
	int err = bind(rw);

	if (!err)
		err = drwlock_unlock(rw);
	/* Forgotten here; it ends in the backend with its lease at the latest. */
	return err == EIO ? 0 : err;
}
