/* POSIX semaphores through the shim: dsem_t with errno, waiting out a
 * backend that is away, named ones shared by name. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/dmutex_shim_sem.h"
#include "local.h"
#include "name.h"
#include "sigwrap.h"
#include "users.h"
#include "core/shim.h"
#include "pause.h"

#define NO_DEADLINE INT64_MAX

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

/*
 * The names of semaphores this process destroyed.  Every process runs the
 * same sem_init at the same line to share a semaphore, and the first
 * creator's value applies; but a process that destroys one and initializes
 * it again means a fresh one with the new value (POSIX; LTP sem_timedwait
 * 11-1), as sem_init of a shared semaphore would be for every process
 * using it.  Interned names: the same pointer for the same name.
 */
static pthread_mutex_t gone_mu = PTHREAD_MUTEX_INITIALIZER;
static const char **gone;
static size_t n_gone, cap_gone;

static void
gone_add(const char *name)
{
	const char *in = dmutex__shim_intern(name), **more;
	size_t i;

	if (!in)
		return;
	pthread_mutex_lock(&gone_mu);
	for (i = 0; i < n_gone && gone[i] != in; i++)
		;
	if (i == n_gone && n_gone == cap_gone &&
			(more = realloc(gone, (cap_gone ? 2 * cap_gone : 8) * sizeof *gone))) {
		gone = more;
		cap_gone = cap_gone ? 2 * cap_gone : 8;
	}
	if (i == n_gone && n_gone < cap_gone)
		gone[n_gone++] = in;
	pthread_mutex_unlock(&gone_mu);
}

/* 1 if this process destroyed name (forgotten now). */
static int
gone_take(const char *name)
{
	const char *in = dmutex__shim_intern(name);
	int found = 0;

	pthread_mutex_lock(&gone_mu);
	for (size_t i = 0; in && i < n_gone && !found; i++)
		if ((found = gone[i] == in))
			gone[i] = gone[--n_gone];
	pthread_mutex_unlock(&gone_mu);
	return found;
}

/* users.c: the count no process of this run made, or the last one's,
 * goes (ENOENT: it was gone already). */
static int
drop_count(const char *name)
{
	int err = dsem_unlink(name, NULL);

	return err == ENOENT ? 0 : err;
}

static int sem_destroy_impl(dsem_t *s);

static int
sem_init_impl(dsem_t *s, int pshared, unsigned value, const char *site)
{
	char name[DMUTEX_NAME_MAX + 1];
	int err;

	(void)pshared;  /* every dmutex semaphore is shared */
	if (!s)
		return fail(EINVAL);
	/* Initialized again without sem_destroy (glibc sets the new value):
	 * destroyed first, as pthread_mutex_init's forget_old does.  Else
	 * the process would use it twice, its one sem_destroy would not
	 * leave (users.c), and the old object would be unreachable. */
	if (dmutex__shim_site_live(DMUTEX__SHIM_SEM, s))
		sem_destroy_impl(s);
	if ((err = dmutex__shim_site_name(DMUTEX__SHIM_SEM, s, site, name)))
		return fail(err);
	/* Afresh: the old count goes (ENOENT: it was gone already). */
	if (gone_take(name))
		for (int attempt = 0; dsem_unlink(name, NULL) == EIO; attempt++) {
			waiting("sem_init", attempt);
			dmutex__shim_backoff(attempt);
		}
	for (int attempt = 0; (err = dmutex__shim_users_join(name, drop_count, drop_count)) == EIO;
			attempt++) {
		waiting("sem_init", attempt);
		dmutex__shim_backoff(attempt);
	}
	if (err) {
		dmutex__shim_site_release(DMUTEX__SHIM_SEM, s);
		return fail(err);
	}
	for (int attempt = 0; (err = dsem_init(s, name, value, NULL, 0)) == EIO; attempt++) {
		waiting("sem_init", attempt);
		dmutex__shim_backoff(attempt);
	}
	if (err) {
		dmutex__shim_users_leave(name);
		dmutex__shim_site_release(DMUTEX__SHIM_SEM, s);
	}
	return fail(err);
}

/* Not a cancellation point (POSIX names none among sem_init and
 * sem_destroy): a thread cancelled half-way would leave the users' count
 * (users.c) and the backend's state half made. */
int
dmutex_shim_sem_init(dsem_t *s, int pshared, unsigned value, const char *site)
{
	int cs = dmutex__nocancel(), err = sem_init_impl(s, pshared, value, site);

	dmutex__cancel_restore(cs);
	return err;
}

/* Before a semaphore call (outside a handler): the posts handlers handed
 * over are made, and a forked child has its own users' shares (users.c)
 * of what its parent initialized. */
static void
settle(void)
{
	dmutex__shim_posts_settle();
	dmutex__shim_users_adopt();
}

static int
sem_destroy_impl(dsem_t *s)
{
	const char *name = NULL;
	char copy[DMUTEX_NAME_MAX + 1] = "";
	int err;

	/* A handler's post still on its way must not find s gone. */
	settle();
	/* Not one from sem_open (named_list): those have sem_close. */
	if (!dmutex__shim_sem_name(s, &name) && name)
		snprintf(copy, sizeof copy, "%s", name);
	if ((err = dsem_destroy(s)))
		return fail(err);
	dmutex__shim_site_release(DMUTEX__SHIM_SEM, s);
	if (copy[0]) {
		gone_add(copy);
		dmutex__shim_users_leave(copy);
	}
	return 0;
}

int
dmutex_shim_sem_destroy(dsem_t *s)
{
	int cs = dmutex__nocancel(), err = sem_destroy_impl(s);

	dmutex__cancel_restore(cs);
	return err;
}

/* Ask again with the same request id while the backend is away, until the
 * retry window has passed since a try went unanswered: then EIO (logged),
 * whether a permit was taken unknown.  A trywait or a wait past its
 * deadline gives up at once (EAGAIN, ETIMEDOUT) only while no try may
 * have been applied. */
static int
wait_until_nocancel(dsem_t *s, int64_t until, int try_only, int cs)
{
	struct dmutex__shim_op o;
	int err;

	settle();
	dmutex__shim_wait_begin();
	if ((err = dmutex__shim_op_init(&o)))
		return err;
	for (int attempt = 0; (err = dmutex__shim_sem_wait(s, &o, until, try_only, cs)) == EIO &&
			!dmutex__shim_op_expired(&o); attempt++) {
		/* A try that may have taken a permit is asked again until it is
		 * answered: EAGAIN or ETIMEDOUT now would leave that permit
		 * taken with nobody holding it. */
		if (!dmutex__shim_op_pending(&o) && try_only)
			return EAGAIN;
		if (!dmutex__shim_op_pending(&o) && dmutex__now_ns() >= until)
			return ETIMEDOUT;
		waiting("sem_wait", attempt);
		dmutex__shim_backoff(attempt);
	}
	return err;
}

/* sem_wait and the timed waits are cancellation points (POSIX): a cancel
 * pending at the call acts at once, and one that comes while the wait
 * sleeps acts there, with no permit taken.  Everything else (the requests
 * to the backend) runs with cancellation disabled, so no request is cut
 * half-way.  sem_trywait is not one. */
static int
wait_until(dsem_t *s, int64_t until, int try_only)
{
	int cs = dmutex__nocancel(), err;

	if (!try_only && cs == PTHREAD_CANCEL_ENABLE) {
		dmutex__cancel_restore(cs);
		pthread_testcancel();
		dmutex__nocancel();
	}
	err = wait_until_nocancel(s, until, try_only, try_only ? PTHREAD_CANCEL_DISABLE : cs);
	dmutex__cancel_restore(cs);
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
	int cs = dmutex__nocancel(), err, bad;

	/* Naming a static semaphore may ask the backend. */
	err = dmutex__shim_sem_name(s, &name);
	dmutex__cancel_restore(cs);
	if (err)
		return fail(err);
	/* POSIX: the deadline is not examined if a permit is free at once. */
	if ((bad = dmutex__sem_deadline(name, clock, at, &until))) {
		if (!dmutex_shim_sem_trywait(s))
			return 0;
		return fail(errno == EAGAIN ? bad : errno);
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
	int cs, err;

	/* POSIX lets a signal handler post; a network call may not run
	 * there (sigwrap.c). */
	if (dmutex__shim_in_handler())
		return fail(dmutex__shim_post_deferred(s, dmutex_shim_sem_post));
	/* Not a cancellation point: a post is made whole or not at all. */
	cs = dmutex__nocancel();
	settle();
	if (!(err = dmutex__shim_op_init(&o))) {
		/* As wait_until: EIO once the window has passed, posted or not. */
		for (int attempt = 0; (err = dmutex__shim_sem_post(s, &o)) == EIO &&
				!dmutex__shim_op_expired(&o); attempt++) {
			waiting("sem_post", attempt);
			dmutex__shim_backoff(attempt);
		}
	}
	dmutex__cancel_restore(cs);
	return fail(err);
}

int
dmutex_shim_sem_getvalue(dsem_t *s, int *value)
{
	int cs, err;

	cs = dmutex__nocancel();
	settle();
	for (int attempt = 0; (err = dsem_getvalue(s, value)) == EIO; attempt++) {
		waiting("sem_getvalue", attempt);
		dmutex__shim_backoff(attempt);
	}
	dmutex__cancel_restore(cs);
	return fail(err);
}

/* ---- named semaphores: one object per name per process ---- */

/* As glibc, whose semaphore is the file /dev/shm/sem.NAME: a name whose
 * file name would pass NAME_MAX ("sem." and the name after its leading
 * slashes: 252 bytes and more) is ENAMETOOLONG (LTP sem_unlink 5-1; the
 * backend's own limit is DMUTEX_NAME_MAX). */
#define SEM_FILE_PREFIX_LEN (sizeof "sem." - 1)
static int
name_too_long(const char *name)
{
	while (name && *name == '/')
		name++;
	return name && strnlen(name, NAME_MAX + 1) > NAME_MAX - SEM_FILE_PREFIX_LEN;
}

struct named {
	struct named *next;
	dsem_t sem;             /* first: sem_close finds the entry by it */
	unsigned refs;
	char name[];
};

static pthread_mutex_t named_mu = PTHREAD_MUTEX_INITIALIZER;
static struct named *named_list;

/*
 * POSIX: after sem_unlink the name is gone (sem_open without O_CREAT is
 * ENOENT, with it makes a new semaphore) while those that have the old one
 * open go on using it.  The backend has one semaphore per name, so a POSIX
 * name has generations: the counter semaphore NAME;gens holds the current
 * one (none: 0); generation 0 lives under NAME, generation G under
 * NAME;gen=G.  sem_unlink moves the counter on and leaves the old
 * generation to those that have it, until it is idle for idle_ms.
 */
#define GENS ";gens"
#define GEN ";gen="

static int
gen_name(const char *name, unsigned gen, char out[DMUTEX_NAME_MAX + 1])
{
	int n = gen ? snprintf(out, DMUTEX_NAME_MAX + 1, "%s" GEN "%u", name, gen)
		: snprintf(out, DMUTEX_NAME_MAX + 1, "%s", name);

	return n < 0 || n > DMUTEX_NAME_MAX ? ENAMETOOLONG : 0;
}

/* Open sem (flags of dsem_init) under backend name bn, the backend's
 * absence waited out. */
static int
open_patient(dsem_t *sem, const char *call, const char *bn, unsigned value, int flags)
{
	int err;

	for (int attempt = 0; (err = dsem_init(sem, bn, value, NULL, flags)) == EIO; attempt++) {
		waiting(call, attempt);
		dmutex__shim_backoff(attempt);
	}
	return err;
}

/* The counter of name: 0; ENOENT (never unlinked) unless create. */
static int
gens_open(dsem_t *g, const char *call, const char *name, int create)
{
	char cn[DMUTEX_NAME_MAX + 1];
	int n = snprintf(cn, sizeof cn, "%s" GENS, name);

	if (n < 0 || n > DMUTEX_NAME_MAX)
		return ENAMETOOLONG;
	return open_patient(g, call, cn, 0, create ? 0 : DSEM_NOCREATE);
}

/* The backend name of name's current generation. */
static int
current(const char *call, const char *name, char bn[DMUTEX_NAME_MAX + 1])
{
	dsem_t g;
	int v = 0, err = gens_open(&g, call, name, 0);

	if (err == ENOENT)
		return gen_name(name, 0, bn);
	if (err)
		return err;
	for (int attempt = 0; (err = dsem_getvalue(&g, &v)) == EIO; attempt++) {
		waiting(call, attempt);
		dmutex__shim_backoff(attempt);
	}
	dsem_destroy(&g);
	return err ? err : gen_name(name, (unsigned)v, bn);
}

static dsem_t *
sem_open_impl(const char *name, int oflag, unsigned value)
{
	char bn[DMUTEX_NAME_MAX + 1];
	struct named *n;
	size_t len;
	int err, flags;

	dmutex__shim_in_effect();
	if (name_too_long(name)) {
		errno = ENAMETOOLONG;
		return NULL;
	}
	if ((err = dmutex__name_ok(name, &len)) || (err = current("sem_open", name, bn))) {
		errno = err;
		return NULL;
	}
	len = strlen(bn);
	flags = !(oflag & O_CREAT) ? DSEM_NOCREATE : (oflag & O_EXCL) ? DSEM_EXCL : 0;
	/* Held across the backend call: two threads opening one name get one
	 * object.  sem_open is rare; the wait is one round trip. */
	pthread_mutex_lock(&named_mu);
	for (n = named_list; n; n = n->next)
		if (!strcmp(n->name, bn))
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
		memcpy(n->name, bn, len + 1);
		if ((err = open_patient(&n->sem, "sem_open", bn, value, flags))) {
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

/* sem_open, sem_close and sem_unlink are not cancellation points: each
 * holds the list's mutex or a half-made generation across its requests. */
dsem_t *
dmutex_shim_sem_open(const char *name, int oflag, ...)
{
	unsigned value = 0;
	dsem_t *s;
	int cs, err;

	if (oflag & O_CREAT) {
		va_list ap;

		va_start(ap, oflag);
		(void)va_arg(ap, int);          /* mode_t, promoted: ignored */
		value = va_arg(ap, unsigned);
		va_end(ap);
	}
	cs = dmutex__nocancel();
	s = sem_open_impl(name, oflag, value);
	err = errno;
	dmutex__cancel_restore(cs);
	errno = err;
	return s;
}

static int
sem_close_impl(dsem_t *s)
{
	struct named **pp, *n;
	int err = EINVAL;

	settle();
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
dmutex_shim_sem_close(dsem_t *s)
{
	int cs = dmutex__nocancel(), rc = sem_close_impl(s), err = errno;

	dmutex__cancel_restore(cs);
	errno = err;
	return rc;
}

static int
sem_unlink_impl(const char *name)
{
	char bn[DMUTEX_NAME_MAX + 1];
	dsem_t t;
	size_t len;
	int err;

	if (name_too_long(name))
		return fail(ENAMETOOLONG);
	settle();
	/* ENOENT unless the current generation exists */
	if ((err = dmutex__name_ok(name, &len)) || (err = current("sem_unlink", name, bn)) ||
			(err = open_patient(&t, "sem_unlink", bn, 0, DSEM_NOCREATE)))
		return fail(err);
	dsem_destroy(&t);
	if ((err = gens_open(&t, "sem_unlink", name, 1)))
		return fail(err);
	for (int attempt = 0; (err = dsem_post(&t)) == EIO; attempt++) {
		waiting("sem_unlink", attempt);
		dmutex__shim_backoff(attempt);
	}
	dsem_destroy(&t);
	return fail(err);
}

int
dmutex_shim_sem_unlink(const char *name)
{
	int cs = dmutex__nocancel(), rc = sem_unlink_impl(name), err = errno;

	dmutex__cancel_restore(cs);
	errno = err;
	return rc;
}
