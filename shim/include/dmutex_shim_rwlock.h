/*
 * Read-write locks through the pthread shim (included by the shim's
 * pthread.h).  Not an API of its own: programs use the pthread names.
 *
 * Every pthread_rwlock_* call and PTHREAD_RWLOCK_INITIALIZER map to
 * drwlock_t (see drwlock_rdlock(3)): readers share across processes, a
 * writer is alone, writers are preferred (so the glibc kind
 * PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP is what every lock does; the
 * kind attribute round-trips and chooses nothing), and a read-write lock is
 * named by its definition site, as a mutex: NAMESPACE/BASENAME:LINE[#N].
 * pshared round-trips and chooses nothing.  Read-write locks are always
 * distributed: DMUTEX_SHIM_LOCAL and -DDMUTEX_SHIM_LOCAL_FILE do not apply
 * to them, and a zero-filled pthread_rwlock_t (no initializer) is EINVAL.
 * As for mutexes, the blocking calls wait for a backend that is away
 * rather than fail.
 */
#ifndef DMUTEX_SHIM_RWLOCK_H
#define DMUTEX_SHIM_RWLOCK_H

#include <errno.h>

#include "dmutex.h"
#include "dmutex_shim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fixed-size, caller-allocated.  Fields are private. */
typedef struct dmutex_shim_rwlockattr {
	unsigned long __magic;
	int __pshared;
	int __kind;
} dmutex_shim_rwlockattr_t;

#define DMUTEX__SHIM_RWATTR_MAGIC 0x72776174UL /* "rwat" */

#define DMUTEX__SHIM_RWLOCK_INITIALIZER \
	{ DRWLOCK__MAGIC_STATIC, DMUTEX__SHIM_HERE, 0, { DMUTEX__SHIM_SITE, 0, 0, 0, 0 } }

/* pthread_rwlock_init: site is "FILE:LINE" of the call.  0; EINVAL (NULL
 * rw, attr not initialized); ENOTSUP (several masters); ENOMEM.  The
 * backend being away is waited out. */
DMUTEX_EXPORT int dmutex_shim_rwlock_init(drwlock_t *rw, const dmutex_shim_rwlockattr_t *attr,
		const char *site);
/* pthread_rwlock_destroy: 0; EINVAL; EBUSY (held or waited for here). */
DMUTEX_EXPORT int dmutex_shim_rwlock_destroy(drwlock_t *rw);
/* pthread_rwlock_rdlock, the backend waited out: 0; EDEADLK; EAGAIN;
 * ENOLCK; EINVAL; ENOMEM. */
DMUTEX_EXPORT int dmutex_shim_rwlock_rdlock(drwlock_t *rw);
/* pthread_rwlock_tryrdlock: 0; EBUSY (also while the backend is away);
 * EAGAIN; ENOLCK; EINVAL; ENOMEM. */
DMUTEX_EXPORT int dmutex_shim_rwlock_tryrdlock(drwlock_t *rw);
/* pthread_rwlock_timedrdlock: as dmutex_shim_rwlock_rdlock, plus ETIMEDOUT. */
DMUTEX_EXPORT int dmutex_shim_rwlock_timedrdlock(drwlock_t *rw, const struct timespec *at);
/* pthread_rwlock_clockrdlock: as dmutex_shim_rwlock_timedrdlock. */
DMUTEX_EXPORT int dmutex_shim_rwlock_clockrdlock(drwlock_t *rw, clockid_t clock,
		const struct timespec *at);
/* pthread_rwlock_wrlock, the backend waited out: 0; EDEADLK; EINVAL;
 * ENOMEM. */
DMUTEX_EXPORT int dmutex_shim_rwlock_wrlock(drwlock_t *rw);
/* pthread_rwlock_trywrlock: 0; EBUSY (also while the backend is away);
 * EINVAL; ENOMEM. */
DMUTEX_EXPORT int dmutex_shim_rwlock_trywrlock(drwlock_t *rw);
/* pthread_rwlock_timedwrlock: as dmutex_shim_rwlock_wrlock, plus ETIMEDOUT. */
DMUTEX_EXPORT int dmutex_shim_rwlock_timedwrlock(drwlock_t *rw, const struct timespec *at);
/* pthread_rwlock_clockwrlock: as dmutex_shim_rwlock_timedwrlock. */
DMUTEX_EXPORT int dmutex_shim_rwlock_clockwrlock(drwlock_t *rw, clockid_t clock,
		const struct timespec *at);
/* pthread_rwlock_unlock: 0 (also for a release the backend did not
 * confirm: it ends with its lease); EPERM; ENOLCK; EINVAL. */
DMUTEX_EXPORT int dmutex_shim_rwlock_unlock(drwlock_t *rw);

static __inline__ int
dmutex_shim_rwlockattr_init(dmutex_shim_rwlockattr_t *a)
{
	if (!a)
		return EINVAL;
	a->__magic = DMUTEX__SHIM_RWATTR_MAGIC;
	a->__pshared = 0;       /* PTHREAD_PROCESS_PRIVATE, as POSIX's default */
	a->__kind = 0;          /* PTHREAD_RWLOCK_PREFER_READER_NP, glibc's default */
	return 0;
}

static __inline__ int
dmutex_shim_rwlockattr_destroy(dmutex_shim_rwlockattr_t *a)
{
	if (!a || a->__magic != DMUTEX__SHIM_RWATTR_MAGIC)
		return EINVAL;
	a->__magic = 0;
	return 0;
}

/* Either value round-trips; every lock is shared regardless. */
static __inline__ int
dmutex_shim_rwlockattr_setpshared(dmutex_shim_rwlockattr_t *a, int pshared)
{
	if (!a || a->__magic != DMUTEX__SHIM_RWATTR_MAGIC || (pshared != 0 && pshared != 1))
		return EINVAL;
	a->__pshared = pshared;
	return 0;
}

static __inline__ int
dmutex_shim_rwlockattr_getpshared(const dmutex_shim_rwlockattr_t *a, int *pshared)
{
	if (!a || a->__magic != DMUTEX__SHIM_RWATTR_MAGIC || !pshared)
		return EINVAL;
	*pshared = a->__pshared;
	return 0;
}

/* glibc's kinds 0..2 round-trip; every lock prefers writers regardless. */
static __inline__ int
dmutex_shim_rwlockattr_setkind_np(dmutex_shim_rwlockattr_t *a, int kind)
{
	if (!a || a->__magic != DMUTEX__SHIM_RWATTR_MAGIC || kind < 0 || kind > 2)
		return EINVAL;
	a->__kind = kind;
	return 0;
}

static __inline__ int
dmutex_shim_rwlockattr_getkind_np(const dmutex_shim_rwlockattr_t *a, int *kind)
{
	if (!a || a->__magic != DMUTEX__SHIM_RWATTR_MAGIC || !kind)
		return EINVAL;
	*kind = a->__kind;
	return 0;
}

#ifdef __cplusplus
}
#endif

/* ---- the pthread names ---- */

#define pthread_rwlock_t drwlock_t
#define pthread_rwlockattr_t dmutex_shim_rwlockattr_t
#undef PTHREAD_RWLOCK_INITIALIZER
#define PTHREAD_RWLOCK_INITIALIZER DMUTEX__SHIM_RWLOCK_INITIALIZER
#ifdef PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP
#undef PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP
#define PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP DMUTEX__SHIM_RWLOCK_INITIALIZER
#endif
#undef pthread_rwlock_init
#define pthread_rwlock_init pthread_rwlock_init__only_callable_through_the_dmutex_shim
#define pthread_rwlock_init__only_callable_through_the_dmutex_shim(rw, a) \
	dmutex_shim_rwlock_init((rw), (a), DMUTEX__SHIM_HERE)
#undef pthread_rwlock_destroy
#define pthread_rwlock_destroy dmutex_shim_rwlock_destroy
#undef pthread_rwlock_rdlock
#define pthread_rwlock_rdlock dmutex_shim_rwlock_rdlock
#undef pthread_rwlock_tryrdlock
#define pthread_rwlock_tryrdlock dmutex_shim_rwlock_tryrdlock
#undef pthread_rwlock_timedrdlock
#define pthread_rwlock_timedrdlock dmutex_shim_rwlock_timedrdlock
#undef pthread_rwlock_clockrdlock
#define pthread_rwlock_clockrdlock dmutex_shim_rwlock_clockrdlock
#undef pthread_rwlock_wrlock
#define pthread_rwlock_wrlock dmutex_shim_rwlock_wrlock
#undef pthread_rwlock_trywrlock
#define pthread_rwlock_trywrlock dmutex_shim_rwlock_trywrlock
#undef pthread_rwlock_timedwrlock
#define pthread_rwlock_timedwrlock dmutex_shim_rwlock_timedwrlock
#undef pthread_rwlock_clockwrlock
#define pthread_rwlock_clockwrlock dmutex_shim_rwlock_clockwrlock
#undef pthread_rwlock_unlock
#define pthread_rwlock_unlock dmutex_shim_rwlock_unlock
#undef pthread_rwlockattr_init
#define pthread_rwlockattr_init dmutex_shim_rwlockattr_init
#undef pthread_rwlockattr_destroy
#define pthread_rwlockattr_destroy dmutex_shim_rwlockattr_destroy
#undef pthread_rwlockattr_setpshared
#define pthread_rwlockattr_setpshared dmutex_shim_rwlockattr_setpshared
#undef pthread_rwlockattr_getpshared
#define pthread_rwlockattr_getpshared dmutex_shim_rwlockattr_getpshared
#undef pthread_rwlockattr_setkind_np
#define pthread_rwlockattr_setkind_np dmutex_shim_rwlockattr_setkind_np
#undef pthread_rwlockattr_getkind_np
#define pthread_rwlockattr_getkind_np dmutex_shim_rwlockattr_getkind_np

#endif
