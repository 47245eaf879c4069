/* POSIX semaphores through the shim: dsem_t with errno, waiting out a
 * backend that is away, named ones shared by name. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "include/dmutex_shim_sem.h"
#include "name.h"
#include "sigwrap.h"
#include "core/shim.h"

#define NO_DEADLINE INT64_MAX

static void
backoff(int attempt)
{
	int64_t d = 50 * DMUTEX__MS << (attempt < 5 ? attempt : 5);

	dmutex__sleep_until(dmutex__now_ns() + (d < 1000 * DMUTEX__MS ? d : 1000 * DMUTEX__MS));
}

/* POSIX's way: -1 and errno. */
static int
fail(int err)
{
	if (!err)
		return 0;
	errno = err;
	return -1;
}

static void
waiting(const char *call, int attempt)
{
	if (attempt % 10 == 0)  /* the first, then every tenth */
		dmutex__log(DMUTEX_LOG_WARN, "%s: waiting for the backend", call);
}

int
dmutex_shim_sem_init(dsem_t *s, int pshared, unsigned value, const char *site)
{
	char name[DMUTEX_NAME_MAX + 1];
	int err;

	(void)pshared;  /* every dmutex semaphore is shared */
	if (!s)
		return fail(EINVAL);
	if ((err = dmutex__shim_site_name(DMUTEX__SHIM_SEM, s, site, name)))
		return fail(err);
	for (int attempt = 0; (err = dsem_init(s, name, value, NULL, 0)) == EIO; attempt++) {
		waiting("sem_init", attempt);
		backoff(attempt);
	}
	if (err)
		dmutex__shim_site_release(DMUTEX__SHIM_SEM, s);
	return fail(err);
}

int
dmutex_shim_sem_destroy(dsem_t *s)
{
	int err = dsem_destroy(s);

	if (!err)
		dmutex__shim_site_release(DMUTEX__SHIM_SEM, s);
	return fail(err);
}

/* Ask again with the same request id while the backend is away, until the
 * retry window has passed since a try went unanswered: then EIO (logged),
 * whether a permit was taken unknown.  A trywait or a wait past its
 * deadline gives up at once (EAGAIN, ETIMEDOUT) only while no try may
 * have been applied. */
static int
wait_until(dsem_t *s, int64_t until, int try_only)
{
	struct dmutex__shim_op o;
	int err;

	dmutex__shim_wait_begin();
	if ((err = dmutex__shim_op_init(&o)))
		return fail(err);
	for (int attempt = 0; (err = dmutex__shim_sem_wait(s, &o, until, try_only)) == EIO &&
			!dmutex__shim_op_expired(&o); attempt++) {
		/* A try that may have taken a permit is asked again until it is
		 * answered: EAGAIN or ETIMEDOUT now would leave that permit
		 * taken with nobody holding it. */
		if (!dmutex__shim_op_pending(&o) && try_only)
			return fail(EAGAIN);
		if (!dmutex__shim_op_pending(&o) && dmutex__now_ns() >= until)
			return fail(ETIMEDOUT);
		waiting("sem_wait", attempt);
		backoff(attempt);
	}
	return fail(err);
}

int
dmutex_shim_sem_wait(dsem_t *s)
{
	return wait_until(s, NO_DEADLINE, 0);
}

int
dmutex_shim_sem_trywait(dsem_t *s)
{
	return wait_until(s, NO_DEADLINE, 1);
}

int
dmutex_shim_sem_clockwait(dsem_t *s, clockid_t clock, const struct timespec *at)
{
	const char *name;
	int64_t until;
	int err;

	if ((err = dmutex__shim_sem_name(s, &name)))
		return fail(err);
	/* POSIX: the deadline is not examined if a permit is free at once. */
	if (dmutex__sem_deadline(name, clock, at, &until)) {
		if (!dmutex_shim_sem_trywait(s))
			return 0;
		return fail(errno == EAGAIN ? EINVAL : errno);
	}
	return wait_until(s, until, 0);
}

int
dmutex_shim_sem_timedwait(dsem_t *s, const struct timespec *at)
{
	return dmutex_shim_sem_clockwait(s, CLOCK_REALTIME, at);
}

int
dmutex_shim_sem_post(dsem_t *s)
{
	struct dmutex__shim_op o;
	int err;

	/* POSIX lets a signal handler post; a network call may not run
	 * there (sigwrap.c). */
	if (dmutex__shim_in_handler())
		return fail(dmutex__shim_post_deferred(s, dmutex_shim_sem_post));
	if ((err = dmutex__shim_op_init(&o)))
		return fail(err);
	/* As wait_until: EIO once the window has passed, posted or not. */
	for (int attempt = 0; (err = dmutex__shim_sem_post(s, &o)) == EIO && !dmutex__shim_op_expired(&o);
			attempt++) {
		waiting("sem_post", attempt);
		backoff(attempt);
	}
	return fail(err);
}

int
dmutex_shim_sem_getvalue(dsem_t *s, int *value)
{
	int err;

	for (int attempt = 0; (err = dsem_getvalue(s, value)) == EIO; attempt++) {
		waiting("sem_getvalue", attempt);
		backoff(attempt);
	}
	return fail(err);
}

/* ---- named semaphores: one object per name per process ---- */

struct named {
	struct named *next;
	dsem_t sem;             /* first: sem_close finds the entry by it */
	unsigned refs;
	char name[];
};

static pthread_mutex_t named_mu = PTHREAD_MUTEX_INITIALIZER;
static struct named *named_list;

dsem_t *
dmutex_shim_sem_open(const char *name, int oflag, ...)
{
	struct named *n;
	unsigned value = 0;
	size_t len;
	int err, flags;

	if ((err = dmutex__name_ok(name, &len))) {
		errno = err;
		return NULL;
	}
	if (oflag & O_CREAT) {
		va_list ap;

		va_start(ap, oflag);
		(void)va_arg(ap, int);          /* mode_t, promoted: ignored */
		value = va_arg(ap, unsigned);
		va_end(ap);
	}
	flags = !(oflag & O_CREAT) ? DSEM_NOCREATE : (oflag & O_EXCL) ? DSEM_EXCL : 0;
	/* Held across the backend call: two threads opening one name get one
	 * object.  sem_open is rare; the wait is one round trip. */
	pthread_mutex_lock(&named_mu);
	for (n = named_list; n; n = n->next)
		if (!strcmp(n->name, name))
			break;
	if (n) {
		if (flags == DSEM_EXCL) {
			err = EEXIST;
		} else {
			n->refs++;
			err = 0;
		}
	} else if (!(n = calloc(1, sizeof *n + len + 1))) {
		err = ENOMEM;
	} else {
		memcpy(n->name, name, len + 1);
		for (int attempt = 0; (err = dsem_init(&n->sem, name, value, NULL, flags)) == EIO; attempt++) {
			waiting("sem_open", attempt);
			backoff(attempt);
		}
		if (err) {
			free(n);
		} else {
			n->refs = 1;
			n->next = named_list;
			named_list = n;
		}
	}
	pthread_mutex_unlock(&named_mu);
	if (err) {
		errno = err;
		return NULL;
	}
	return &n->sem;
}

int
dmutex_shim_sem_close(dsem_t *s)
{
	struct named **pp, *n;
	int err = EINVAL;

	pthread_mutex_lock(&named_mu);
	for (pp = &named_list; *pp && &(*pp)->sem != s; pp = &(*pp)->next)
		;
	if ((n = *pp)) {
		if (n->refs > 1) {
			n->refs--;
			err = 0;
		} else if (!(err = dsem_destroy(&n->sem))) {
			*pp = n->next;
			free(n);
		}
	} else {
		dmutex__log(DMUTEX_LOG_ERROR, "sem_close: %p is not a semaphore from sem_open", (void *)s);
	}
	pthread_mutex_unlock(&named_mu);
	return fail(err);
}

int
dmutex_shim_sem_unlink(const char *name)
{
	int err;

	for (int attempt = 0; (err = dsem_unlink(name, NULL)) == EIO; attempt++) {
		waiting("sem_unlink", attempt);
		backoff(attempt);
	}
	return fail(err);
}
