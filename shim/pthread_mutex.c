/*
 * The pthread shim's mutex calls: pthread behaviour on top of dmutex.  A
 * pthread program does not expect its mutex calls to fail because a server
 * is away, and would run unprotected if they did: blocking calls wait for
 * the backend instead (see shim/include/dmutex_shim.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/shim.h"
#include "pause.h"
#include "name.h"
#include "local.h"
#include "users.h"
#include "object.h"
#include "stamp.h"

/* shim/include/pthread.h maps the robustness calls straight to dmutex's. */
_Static_assert((int)PTHREAD_MUTEX_STALLED == (int)DMUTEX_STALLED && (int)PTHREAD_MUTEX_ROBUST == (int)DMUTEX_ROBUST,
		"pthread and dmutex robustness values differ");

static int
attr_ok(const dmutex_attr_t *a)
{
	return a && a->__magic == DMUTEX__ATTR_MAGIC;
}

/* dmutex_attr_t's __reserved[1]: the pshared value, only stored (a dmutex
 * is shared by nature; stamp.h says what shared memory may do). */
#define ATTR_PSHARED 1

#define STAMP(m) DMUTEX__SHIM_STAMP(m)
/* A distributed mutex initialized by the shim: __reserved[1] is its site. */
#define SITE_SLOT 1

/* The pthread attributes of a local mutex made with dmutex attributes a. */
static void
local_attr(pthread_mutexattr_t *pa, const dmutex_attr_t *a)
{
	pthread_mutexattr_init(pa);
	if (!attr_ok(a))
		return;
	pthread_mutexattr_settype(pa, a->__type == DMUTEX_RECURSIVE ? PTHREAD_MUTEX_RECURSIVE
			: a->__type == DMUTEX_ERRORCHECK ? PTHREAD_MUTEX_ERRORCHECK : PTHREAD_MUTEX_NORMAL);
	pthread_mutexattr_setrobust(pa, a->__robust == DMUTEX_ROBUST ? PTHREAD_MUTEX_ROBUST : PTHREAD_MUTEX_STALLED);
	pthread_mutexattr_setpshared(pa, (int)(uintptr_t)a->__reserved[ATTR_PSHARED]);
}

static int
init_local(dmutex_t *m, const dmutex_attr_t *a, const char *site, const char *name)
{
	struct dmutex__shim_lmutex *l = (struct dmutex__shim_lmutex *)(void *)m;
	pthread_mutexattr_t pa;
	int err;

	local_attr(&pa, a);
	err = pthread_mutex_init(&l->mu, &pa);
	pthread_mutexattr_destroy(&pa);
	if (err)
		return err;
	l->site = site;
	l->pid = getpid();
	__atomic_store_n(&l->magic, DMUTEX__SHIM_LOCAL_INIT, __ATOMIC_RELEASE);
	dmutex__shim_announce(m, "mutex", name, site, 1);
	return 0;
}

/* Where a distributed mutex was defined, for messages. */
static const char *
site_of(const dmutex_t *m)
{
	if (m->__magic == DMUTEX__MAGIC_STATIC)
		return m->__reserved[0] == DMUTEX__SHIM_ZERO ? m->__reserved[4] : m->__static_name;
	return m->__reserved[SITE_SLOT] ? m->__reserved[SITE_SLOT] : "?";
}

/*
 * An init over a mutex this process initialized there and never destroyed
 * (POSIX leaves it undefined; glibc and musl make a new, unlocked mutex:
 * musl's pthread-robust-detach).  The old object is unreachable from now
 * on; its distributed lock, if held, would stay held on every host for the
 * life of the process, and the new mutex, of the same name, would wait for
 * it for ever.  It is destroyed first, its lock released.
 */
static void
forget_old(dmutex_t *m)
{
	char robust[DMUTEX_NAME_MAX + 1];
	int err;

	if (!dmutex__shim_site_live(DMUTEX__SHIM_MUTEX, m))
		return;
	if (!dmutex__shim_mutex_robust_name(m, robust))
		robust[0] = '\0';
	/* Its users (users.c) one fewer, as a destroy would make them. */
	if ((err = dmutex_destroy(m)) != EBUSY || !dmutex__mutex_release_now(m)) {
		if (!err && robust[0])
			dmutex__shim_users_leave(robust);
		return;
	}
	dmutex__log(DMUTEX_LOG_WARN, "pthread_mutex_init: the mutex defined at %s is initialized again without "
			"pthread_mutex_destroy while locked: its distributed lock is released now",
			dmutex__shim_site_text(site_of(m)));
	if (!dmutex_destroy(m) && robust[0])
		dmutex__shim_users_leave(robust);
}

/* users.c: a robust mutex that no process of this run uses starts
 * without the owner-died or not-recoverable state an earlier one left. */
static int
fresh(const char *name)
{
	return dmutex__shim_mutex_fresh(name);
}

/* A robust mutex's users (users.c): joined before it is made, left when
 * it is destroyed.  EIO: asked again, as every init is.  Only a mutex the
 * shim names from its line: a name the program gives may be shared with
 * processes not through the shim (dmutex_init, `dmutex run`), whose state
 * no shim process may drop because no shim process uses it. */
static int
join_robust(const dmutex_attr_t *a, const char *name)
{
	int err;

	if (!a || a->__robust != DMUTEX_ROBUST)
		return 0;
	for (int attempt = 0; (err = dmutex__shim_users_join(name, fresh, fresh)) == EIO; attempt++) {
		if (attempt % 10 == 0)	/* the first, then every tenth */
			dmutex__log(DMUTEX_LOG_WARN, "pthread_mutex_init('%s'): waiting for the backend", name);
		dmutex__shim_backoff(attempt);
	}
	return err;
}

static int
mutex_init_impl(dmutex_t *m, const dmutex_attr_t *a, const char *site)
{
	char name[DMUTEX_NAME_MAX + 1];
	const char *given = attr_ok(a) ? a->__reserved[0] : NULL;
	int err;

	if (!m)
		return EINVAL;
	forget_old(m);
	if (given)
		dmutex__shim_site_release(DMUTEX__SHIM_MUTEX, m);
	else if ((err = dmutex__shim_site_name(DMUTEX__SHIM_MUTEX, m, site, name)))
		return err;
	if (dmutex__shim_is_local(site, given ? given : name)) {
		if ((err = init_local(m, a, site, given ? given : name)) && !given)
			dmutex__shim_site_release(DMUTEX__SHIM_MUTEX, m);
		return err;
	}
	if (!given && (err = join_robust(a, name))) {
		dmutex__shim_site_release(DMUTEX__SHIM_MUTEX, m);
		return err;
	}
	for (int attempt = 0; (err = dmutex_init(m, given ? given : name, a)) == EIO; attempt++) {
		if (attempt % 10 == 0)	/* the first, then every tenth */
			dmutex__log(DMUTEX_LOG_WARN, "pthread_mutex_init('%s'): waiting for the backend",
				given ? given : name);
		dmutex__shim_backoff(attempt);
	}
	if (err && !given && a && a->__robust == DMUTEX_ROBUST)
		dmutex__shim_users_leave(name);
	if (err && !given)
		dmutex__shim_site_release(DMUTEX__SHIM_MUTEX, m);
	if (!err) {
		m->__reserved[0] = NULL;
		m->__reserved[SITE_SLOT] = (void *)(uintptr_t)site;
		dmutex__shim_stamp(STAMP(m), attr_ok(a) ? (int)(uintptr_t)a->__reserved[ATTR_PSHARED] : 0);
		dmutex__shim_announce(m, "mutex", given ? given : name, site, 0);
	}
	return err;
}

/* m is gone; a robust one's users (users.c) one fewer. */
static void
destroyed(dmutex_t *m, const char *robust)
{
	dmutex__shim_site_release(DMUTEX__SHIM_MUTEX, m);
	if (robust[0])
		dmutex__shim_users_leave(robust);
}

static int
mutex_destroy_impl(dmutex_t *m)
{
	char robust[DMUTEX_NAME_MAX + 1];
	pthread_mutex_t *l;
	int released, err = dmutex__shim_mutex_ready(m, "pthread_mutex_destroy", &l);

	if (!err && l) {
		/* EBUSY when locked, as glibc says; nothing outside the process waits. */
		if ((err = pthread_mutex_destroy(l)))
			return err;
		if (m->__magic == DMUTEX__SHIM_LOCAL_STATIC)
			free(m->__impl);
		m->__impl = NULL;
		__atomic_store_n(&m->__magic, DMUTEX__MAGIC_DESTROYED, __ATOMIC_RELEASE);
		dmutex__shim_site_release(DMUTEX__SHIM_MUTEX, m);
		return 0;
	}
	/* A given name has no users (join_robust). */
	if (err || !dmutex__shim_site_live(DMUTEX__SHIM_MUTEX, m) || !dmutex__shim_mutex_robust_name(m, robust))
		robust[0] = '\0';
	if (!err && (err = dmutex_destroy(m)) == EBUSY && (released = dmutex__mutex_release_now(m))) {
		/* glibc says EBUSY for a locked mutex that is not robust (0 for
		 * a robust one: musl's pthread_robust) and leaves it locked; a
		 * distributed lock left so would stall every other process
		 * until its lease ends, for a mutex the program has finished
		 * with. */
		err = released == 2 ? 0 : EBUSY;
		dmutex__log(DMUTEX_LOG_WARN, "pthread_mutex_destroy: the mutex defined at %s is locked: %s, and "
				"its distributed lock is released now and the mutex destroyed (a later pthread_mutex_init "
				"makes it anew)", dmutex__shim_site_text(site_of(m)), err ? "EBUSY" : "0 (robust)");
		if (!dmutex_destroy(m))
			destroyed(m, robust);
		return err;
	}
	if (!err)
		destroyed(m, robust);
	return err;
}

/* Neither is a cancellation point (POSIX): a thread cancelled in a
 * warning's write or a robust mutex's users (users.c) would leave them
 * half done. */
int
dmutex_shim_mutex_init(dmutex_t *m, const dmutex_attr_t *a, const char *site)
{
	int cs = dmutex__nocancel(), err = mutex_init_impl(m, a, site);

	dmutex__cancel_restore(cs);
	return err;
}

int
dmutex_shim_mutex_destroy(dmutex_t *m)
{
	int cs = dmutex__nocancel(), err = mutex_destroy_impl(m);

	dmutex__cancel_restore(cs);
	return err;
}

int
dmutex_shim_mutex_lock(dmutex_t *m)
{
	pthread_mutex_t *l;
	int err;

	if ((err = dmutex__shim_mutex_ready(m, "pthread_mutex_lock", &l)))
		return err;
	if (l)
		return pthread_mutex_lock(l);
	for (int attempt = 0; (err = dmutex_lock(m)) == EIO; attempt++) {
		if (attempt % 10 == 0)	/* the first, then every tenth */
			dmutex__log(DMUTEX_LOG_WARN, "pthread_mutex_lock: waiting for the backend");
		dmutex__shim_backoff(attempt);
	}
	return err;
}

int
dmutex_shim_mutex_trylock(dmutex_t *m)
{
	pthread_mutex_t *l;
	int err = dmutex__shim_mutex_ready(m, "pthread_mutex_trylock", &l);

	if (!err && l)
		return pthread_mutex_trylock(l);
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
	pthread_mutex_t *l;
	int err;

	if ((err = dmutex__shim_mutex_ready(m, "pthread_mutex_clocklock", &l)))
		return err;
	if (l)
		return pthread_mutex_clocklock(l, clock, at);
	for (int attempt = 0; (err = dmutex_clocklock(m, clock, at)) == EIO; attempt++) {
		if (passed(clock, at))
			return ETIMEDOUT;
		if (attempt % 10 == 0)	/* the first, then every tenth */
			dmutex__log(DMUTEX_LOG_WARN, "pthread_mutex_timedlock: waiting for the backend");
		dmutex__shim_backoff(attempt);
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
	pthread_mutex_t *l;
	int err = dmutex__shim_mutex_ready(m, "pthread_mutex_unlock", &l);

	if (!err && l)
		return pthread_mutex_unlock(l);
	if (!err)
		err = dmutex_unlock(m);
	/* Not confirmed: the hold is forgotten here, the release retried in
	 * the background, and the lease ends it anyway (logged). */
	return err == EIO ? 0 : err;
}

int
dmutex_shim_mutex_consistent(dmutex_t *m)
{
	pthread_mutex_t *l;
	int err = dmutex__shim_mutex_ready(m, "pthread_mutex_consistent", &l);

	if (!err && l)
		return pthread_mutex_consistent(l);
	return err ? err : dmutex_consistent(m);
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
