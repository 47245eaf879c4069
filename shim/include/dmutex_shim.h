/*
 * What shim/include/pthread.h maps the pthread names onto: the static initializers
 * and a dmutex_shim_* call for each pthread call whose behaviour differs
 * from the plain dmutex/dcond one.  Not an API of its own: programs use the
 * pthread names.
 *
 * Through the shim a pthread call never fails because the backend is down:
 * init, lock, the re-lock of a condition wait and signal/broadcast wait for
 * it (logging a warning now and then); trylock says EBUSY, timedlock
 * ETIMEDOUT at its deadline; an unlock the backend did not confirm is done
 * in the background (the lease ends it anyway) and returns 0.
 */
#ifndef DMUTEX_SHIM_H
#define DMUTEX_SHIM_H

#include <stdint.h>
#include <time.h>

#include "dmutex.h"

#ifdef __cplusplus
extern "C" {
#endif

/* __reserved[0] of a dmutex_t/dcond_t made by the shim's static
 * initializers: __static_name is the definition site "FILE:LINE", named
 * NAMESPACE/BASENAME:LINE when it binds; __reserved[1] is the mutex type. */
#define DMUTEX__SHIM_SITE ((void *)(uintptr_t)0x73697465u) /* "site" */

#define DMUTEX__SHIM_STR2(x) #x
#define DMUTEX__SHIM_STR(x) DMUTEX__SHIM_STR2(x)
/* A site from a translation unit compiled with -DDMUTEX_SHIM_LOCAL_FILE
 * starts with this mark: its mutexes and condition variables stay local to
 * each process (plain pthread objects). */
#define DMUTEX__SHIM_LOCAL_MARK "\001"
#ifdef DMUTEX_SHIM_LOCAL_FILE
#define DMUTEX__SHIM_HERE DMUTEX__SHIM_LOCAL_MARK __FILE__ ":" DMUTEX__SHIM_STR(__LINE__)
#else
#define DMUTEX__SHIM_HERE __FILE__ ":" DMUTEX__SHIM_STR(__LINE__)
#endif

#define DMUTEX__SHIM_MUTEX_INITIALIZER(type) \
	{ DMUTEX__MAGIC_STATIC, DMUTEX__SHIM_HERE, 0, \
	  { DMUTEX__SHIM_SITE, (void *)(uintptr_t)(type), 0, 0, 0 } }
#define DMUTEX__SHIM_COND_INITIALIZER \
	{ DCOND__MAGIC_STATIC, DMUTEX__SHIM_HERE, 0, { DMUTEX__SHIM_SITE, 0, 0, 0, 0 } }

/* mutexes: site is "FILE:LINE" of the pthread_mutex_init call */
DMUTEX_EXPORT int dmutex_shim_mutex_init(dmutex_t *m, const dmutex_attr_t *attr, const char *site);
DMUTEX_EXPORT int dmutex_shim_mutex_destroy(dmutex_t *m);
DMUTEX_EXPORT int dmutex_shim_mutex_lock(dmutex_t *m);
DMUTEX_EXPORT int dmutex_shim_mutex_trylock(dmutex_t *m);
DMUTEX_EXPORT int dmutex_shim_mutex_timedlock(dmutex_t *m, const struct timespec *abstime);
DMUTEX_EXPORT int dmutex_shim_mutex_clocklock(dmutex_t *m, clockid_t clock,
		const struct timespec *abstime);
DMUTEX_EXPORT int dmutex_shim_mutex_unlock(dmutex_t *m);
DMUTEX_EXPORT int dmutex_shim_mutex_consistent(dmutex_t *m);

/* mutex attributes, with the pthread values of type, pshared, protocol */
DMUTEX_EXPORT int dmutex_shim_mutexattr_settype(dmutex_attr_t *attr, int type);
DMUTEX_EXPORT int dmutex_shim_mutexattr_gettype(const dmutex_attr_t *attr, int *type);
DMUTEX_EXPORT int dmutex_shim_mutexattr_setpshared(dmutex_attr_t *attr, int pshared);
DMUTEX_EXPORT int dmutex_shim_mutexattr_getpshared(const dmutex_attr_t *attr, int *pshared);
DMUTEX_EXPORT int dmutex_shim_mutexattr_setprotocol(dmutex_attr_t *attr, int protocol);
DMUTEX_EXPORT int dmutex_shim_mutexattr_getprotocol(const dmutex_attr_t *attr, int *protocol);
/* The mutex's name instead of its definition site (copied). */
DMUTEX_EXPORT int dmutex_shim_mutexattr_setname_np(dmutex_attr_t *attr, const char *name);

/* condition variables */
DMUTEX_EXPORT int dmutex_shim_cond_init(dcond_t *c, const dcond_attr_t *attr, const char *site);
DMUTEX_EXPORT int dmutex_shim_cond_destroy(dcond_t *c);
DMUTEX_EXPORT int dmutex_shim_cond_wait(dcond_t *c, dmutex_t *m);
DMUTEX_EXPORT int dmutex_shim_cond_timedwait(dcond_t *c, dmutex_t *m, const struct timespec *abstime);
DMUTEX_EXPORT int dmutex_shim_cond_clockwait(dcond_t *c, dmutex_t *m, clockid_t clock,
		const struct timespec *abstime);
DMUTEX_EXPORT int dmutex_shim_cond_signal(dcond_t *c);
DMUTEX_EXPORT int dmutex_shim_cond_broadcast(dcond_t *c);
DMUTEX_EXPORT int dmutex_shim_condattr_setpshared(dcond_attr_t *attr, int pshared);
DMUTEX_EXPORT int dmutex_shim_condattr_getpshared(const dcond_attr_t *attr, int *pshared);

#ifdef __cplusplus
}
#endif

#endif /* DMUTEX_SHIM_H */
