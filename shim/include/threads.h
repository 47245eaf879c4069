/*
 * The dmutex shim's C11 <threads.h>.  Compiled with this directory first on
 * the include path (the shim's flags, dmutex-shim.pc), a program's mtx_t
 * and cnd_t are the shim's pthread mutexes and condition variables: named
 * after the line of their mtx_init/cnd_init call, distributed or kept local
 * (DMUTEX_SHIM_LOCAL, -DDMUTEX_SHIM_LOCAL_FILE) and logged exactly as the
 * pthread objects of shim/include/pthread.h, with C11's result codes.
 * Without it, glibc's mtx_lock would lock only the calling process: a
 * program built with the shim's flags would compile and run unprotected.
 *
 * call_once, tss_* and thrd_* stay the C library's: they are local to a
 * process by nature (a once flag, thread-specific storage, threads).
 *
 * The calls are inline wrappers of the dmutex_shim_mutex_* and
 * dmutex_shim_cond_* calls (dmutex_shim(3)); their log lines name the
 * pthread call each maps to.
 */
#pragma GCC system_header

#ifndef DMUTEX_SHIM_THREADS_H
#define DMUTEX_SHIM_THREADS_H

#ifdef __cplusplus
#error "the dmutex pthread shim is for C: in C++ it would also remap the standard library's own threads"
#endif

#include_next <threads.h>

#include <errno.h>
#include <time.h>

#include "dmutex_shim.h"

#define mtx_t dmutex_t
#define cnd_t dcond_t

/* C11 allows these results per call; any other failure is thrd_error. */
static inline int
dmutex__shim_thrd(int err, int also, int as)
{
	return err == 0 ? thrd_success : err == also ? as : thrd_error;
}

/* mtx_init records its call site, as pthread_mutex_init does: it can only
 * be called (as a function pointer the name is an undeclared identifier). */
static inline int
dmutex__shim_mtx_init(dmutex_t *m, int type, const char *site)
{
	dmutex_attr_t a;
	int err;

	if (type & ~(mtx_plain | mtx_recursive | mtx_timed))
		return thrd_error;
	if (!(type & mtx_recursive))
		return dmutex__shim_thrd(dmutex_shim_mutex_init(m, NULL, site), ENOMEM, thrd_nomem);
	if ((err = dmutex_attr_init(&a)) == 0 && (err = dmutex_attr_settype(&a, DMUTEX_RECURSIVE)) == 0)
		err = dmutex_shim_mutex_init(m, &a, site);
	dmutex_attr_destroy(&a);
	return dmutex__shim_thrd(err, ENOMEM, thrd_nomem);
}
#undef mtx_init
#define mtx_init mtx_init__only_callable_through_the_dmutex_shim
#define mtx_init__only_callable_through_the_dmutex_shim(m, type) \
	dmutex__shim_mtx_init((m), (type), DMUTEX__SHIM_HERE)

static inline int
dmutex__shim_mtx_lock(dmutex_t *m)
{
	return dmutex__shim_thrd(dmutex_shim_mutex_lock(m), 0, thrd_success);
}
static inline int
dmutex__shim_mtx_trylock(dmutex_t *m)
{
	return dmutex__shim_thrd(dmutex_shim_mutex_trylock(m), EBUSY, thrd_busy);
}
/* TIME_UTC is CLOCK_REALTIME */
static inline int
dmutex__shim_mtx_timedlock(dmutex_t *__restrict m, const struct timespec *__restrict at)
{
	return dmutex__shim_thrd(dmutex_shim_mutex_timedlock(m, at), ETIMEDOUT, thrd_timedout);
}
static inline int
dmutex__shim_mtx_unlock(dmutex_t *m)
{
	return dmutex__shim_thrd(dmutex_shim_mutex_unlock(m), 0, thrd_success);
}
static inline void
dmutex__shim_mtx_destroy(dmutex_t *m)
{
	(void)dmutex_shim_mutex_destroy(m);
}
#undef mtx_lock
#define mtx_lock dmutex__shim_mtx_lock
#undef mtx_trylock
#define mtx_trylock dmutex__shim_mtx_trylock
#undef mtx_timedlock
#define mtx_timedlock dmutex__shim_mtx_timedlock
#undef mtx_unlock
#define mtx_unlock dmutex__shim_mtx_unlock
#undef mtx_destroy
#define mtx_destroy dmutex__shim_mtx_destroy

static inline int
dmutex__shim_cnd_init(dcond_t *c, const char *site)
{
	return dmutex__shim_thrd(dmutex_shim_cond_init(c, NULL, site), ENOMEM, thrd_nomem);
}
#undef cnd_init
#define cnd_init cnd_init__only_callable_through_the_dmutex_shim
#define cnd_init__only_callable_through_the_dmutex_shim(c) \
	dmutex__shim_cnd_init((c), DMUTEX__SHIM_HERE)

static inline int
dmutex__shim_cnd_signal(dcond_t *c)
{
	return dmutex__shim_thrd(dmutex_shim_cond_signal(c), 0, thrd_success);
}
static inline int
dmutex__shim_cnd_broadcast(dcond_t *c)
{
	return dmutex__shim_thrd(dmutex_shim_cond_broadcast(c), 0, thrd_success);
}
static inline int
dmutex__shim_cnd_wait(dcond_t *c, dmutex_t *m)
{
	return dmutex__shim_thrd(dmutex_shim_cond_wait(c, m), 0, thrd_success);
}
static inline int
dmutex__shim_cnd_timedwait(dcond_t *__restrict c, dmutex_t *__restrict m,
		const struct timespec *__restrict at)
{
	/* cnd_init gave it the default clock, CLOCK_REALTIME: TIME_UTC */
	return dmutex__shim_thrd(dmutex_shim_cond_timedwait(c, m, at), ETIMEDOUT, thrd_timedout);
}
static inline void
dmutex__shim_cnd_destroy(dcond_t *c)
{
	(void)dmutex_shim_cond_destroy(c);
}
#undef cnd_signal
#define cnd_signal dmutex__shim_cnd_signal
#undef cnd_broadcast
#define cnd_broadcast dmutex__shim_cnd_broadcast
#undef cnd_wait
#define cnd_wait dmutex__shim_cnd_wait
#undef cnd_timedwait
#define cnd_timedwait dmutex__shim_cnd_timedwait
#undef cnd_destroy
#define cnd_destroy dmutex__shim_cnd_destroy

#endif /* DMUTEX_SHIM_THREADS_H */
