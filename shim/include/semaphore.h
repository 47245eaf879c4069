/*
 * The dmutex <semaphore.h>: with this directory first on the include path
 * (pkg-config dmutex-shim), POSIX semaphores are dmutex ones, shared by
 * every process on every host that uses the same backend ($DMUTEX_URL).
 *
 * sem_open names are used as given, like system-wide POSIX names; sem_init
 * semaphores are named by their definition site, as mutexes are (see
 * pthread.h).  The first creator's value applies; a later sem_init or
 * sem_open(O_CREAT) with another value joins the existing one.
 *
 * Unlike the rest of dmutex these calls set errno and return -1, as POSIX
 * requires.  Signal handlers installed with sigaction or signal (mapped
 * below) may call sem_post, which hands the post to a thread of the
 * library's (it talks to the network), and interrupt a sem_wait or
 * sem_timedwait on their thread with EINTR.  A handler installed without
 * this header (another unit, a library) has neither.
 */
#pragma GCC system_header

#ifndef DMUTEX_SHIM_SEMAPHORE_H
#define DMUTEX_SHIM_SEMAPHORE_H

#ifdef __cplusplus
#error "the dmutex shim is for C; from C++ use dmutex's own API"
#endif

#include_next <semaphore.h>
#include <fcntl.h>      /* O_CREAT, O_EXCL for sem_open */

#include "dmutex_shim.h"
#include "dmutex_shim_sem.h"

/* SEM_FAILED is ((sem_t *) 0) or similar: with sem_t below it names dsem_t. */
#define sem_t dsem_t

#undef SEM_VALUE_MAX
#define SEM_VALUE_MAX ((int)DSEM_VALUE_MAX)

/* sem_init records its call site, so it can only be called. */
#undef sem_init
#define sem_init sem_init__only_callable_through_the_dmutex_shim
#define sem_init__only_callable_through_the_dmutex_shim(s, p, v) \
	dmutex_shim_sem_init((s), (p), (v), DMUTEX__SHIM_HERE)

#undef sem_destroy
#define sem_destroy dmutex_shim_sem_destroy
#undef sem_wait
#define sem_wait dmutex_shim_sem_wait
#undef sem_trywait
#define sem_trywait dmutex_shim_sem_trywait
#undef sem_timedwait
#define sem_timedwait dmutex_shim_sem_timedwait
#undef sem_clockwait
#define sem_clockwait dmutex_shim_sem_clockwait
#undef sem_post
#define sem_post dmutex_shim_sem_post
#undef sem_getvalue
#define sem_getvalue dmutex_shim_sem_getvalue
#undef sem_open
#define sem_open dmutex_shim_sem_open
#undef sem_close
#define sem_close dmutex_shim_sem_close
#undef sem_unlink
#define sem_unlink dmutex_shim_sem_unlink

/* Signal handlers, so that sem_post in one is safe and sem_wait returns
 * EINTR (dmutex_shim_sem.h).  Function-like: `struct sigaction` stays. */
#include <signal.h>
#define sigaction(sig, act, old) dmutex_shim_sigaction((sig), (act), (old))
#define signal(sig, handler) dmutex_shim_signal((sig), (handler))

#endif
