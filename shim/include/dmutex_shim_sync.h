/*
 * Spin locks and barriers through the pthread shim (included by the shim's
 * pthread.h).  Not an API of its own: programs use the pthread names.
 *
 * Spin locks become distributed mutexes: spinning across a network has no
 * meaning, and a spin lock guards shared state exactly as a mutex does.
 * pthread_spin_init names one by its call site, as pthread_mutex_init does;
 * pshared is ignored.
 *
 * Barriers become dbarrier_t: the count is the TOTAL number of waiters
 * across all processes (a program whose count meant threads per process
 * must change it, or keep that barrier out of the shim).  Processes that
 * initialize one barrier with different counts get EINVAL and a log line.
 * A barrier is named by its pthread_barrier_init call site.
 */
#ifndef DMUTEX_SHIM_SYNC_H
#define DMUTEX_SHIM_SYNC_H

#include <errno.h>

#include "dmutex.h"
#include "dmutex_shim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fixed-size, caller-allocated.  Fields are private. */
typedef struct dmutex_shim_barrierattr {
	unsigned long __magic;
	int __pshared;
} dmutex_shim_barrierattr_t;

#define DMUTEX__SHIM_BATTR_MAGIC 0x62617474UL /* "batt" */

/* pthread_barrier_init: site is "FILE:LINE" of the call.  0; EINVAL (NULL
 * b, count 0, attr not initialized, another count than the barrier has);
 * ENOTSUP (several masters); ENOMEM.  The backend being away is waited
 * out. */
DMUTEX_EXPORT int dmutex_shim_barrier_init(dbarrier_t *b, const dmutex_shim_barrierattr_t *attr,
		unsigned count, const char *site);
/* pthread_barrier_destroy: 0; EINVAL (not initialized); EBUSY (a thread of
 * this process waits on it). */
DMUTEX_EXPORT int dmutex_shim_barrier_destroy(dbarrier_t *b);
/* pthread_barrier_wait: PTHREAD_BARRIER_SERIAL_THREAD for one waiter per
 * cycle, 0 for the others; EINVAL; EIO (the client's retry_window_ms
 * passed since a try went unanswered: whether the arrival counted is
 * unknown; never twice).  The backend being away is otherwise waited out,
 * with the same request id, so that the arrival counts once. */
DMUTEX_EXPORT int dmutex_shim_barrier_wait(dbarrier_t *b);

static __inline__ int
dmutex_shim_barrierattr_init(dmutex_shim_barrierattr_t *a)
{
	if (!a)
		return EINVAL;
	a->__magic = DMUTEX__SHIM_BATTR_MAGIC;
	/* PTHREAD_PROCESS_PRIVATE (0), as pthread's: only stored, every
	 * barrier being shared (the values: shim/pthread_barrier.c). */
	a->__pshared = 0;
	return 0;
}

static __inline__ int
dmutex_shim_barrierattr_destroy(dmutex_shim_barrierattr_t *a)
{
	if (!a || a->__magic != DMUTEX__SHIM_BATTR_MAGIC)
		return EINVAL;
	a->__magic = 0;
	return 0;
}

/* Either value is accepted and returned by get; every barrier is shared
 * regardless. */
static __inline__ int
dmutex_shim_barrierattr_setpshared(dmutex_shim_barrierattr_t *a, int pshared)
{
	if (!a || a->__magic != DMUTEX__SHIM_BATTR_MAGIC || (pshared != 0 && pshared != 1))
		return EINVAL;
	a->__pshared = pshared;
	return 0;
}

static __inline__ int
dmutex_shim_barrierattr_getpshared(const dmutex_shim_barrierattr_t *a, int *pshared)
{
	if (!a || a->__magic != DMUTEX__SHIM_BATTR_MAGIC || !pshared)
		return EINVAL;
	*pshared = a->__pshared;
	return 0;
}

#ifdef __cplusplus
}
#endif

/* ---- spin locks: distributed mutexes ---- */

#define pthread_spinlock_t dmutex_t
#undef pthread_spin_init
#define pthread_spin_init pthread_spin_init__only_callable_through_the_dmutex_shim
#define pthread_spin_init__only_callable_through_the_dmutex_shim(l, p) \
	((void)(p), dmutex_shim_mutex_init((l), (const dmutex_attr_t *)0, DMUTEX__SHIM_HERE))
#undef pthread_spin_destroy
#define pthread_spin_destroy dmutex_shim_mutex_destroy
#undef pthread_spin_lock
#define pthread_spin_lock dmutex_shim_mutex_lock
#undef pthread_spin_trylock
#define pthread_spin_trylock dmutex_shim_mutex_trylock
#undef pthread_spin_unlock
#define pthread_spin_unlock dmutex_shim_mutex_unlock

/* ---- barriers ---- */

#define pthread_barrier_t dbarrier_t
#define pthread_barrierattr_t dmutex_shim_barrierattr_t
#undef pthread_barrier_init
#define pthread_barrier_init pthread_barrier_init__only_callable_through_the_dmutex_shim
#define pthread_barrier_init__only_callable_through_the_dmutex_shim(b, a, n) \
	dmutex_shim_barrier_init((b), (a), (n), DMUTEX__SHIM_HERE)
#undef pthread_barrier_destroy
#define pthread_barrier_destroy dmutex_shim_barrier_destroy
#undef pthread_barrier_wait
#define pthread_barrier_wait dmutex_shim_barrier_wait
#undef pthread_barrierattr_init
#define pthread_barrierattr_init dmutex_shim_barrierattr_init
#undef pthread_barrierattr_destroy
#define pthread_barrierattr_destroy dmutex_shim_barrierattr_destroy
#undef pthread_barrierattr_setpshared
#define pthread_barrierattr_setpshared dmutex_shim_barrierattr_setpshared
#undef pthread_barrierattr_getpshared
#define pthread_barrierattr_getpshared dmutex_shim_barrierattr_getpshared

#endif
