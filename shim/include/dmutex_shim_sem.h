/*
 * What shim/include/semaphore.h maps the POSIX semaphore names onto.  Not an API of
 * its own: programs use the sem_* names.
 *
 * These follow POSIX, not dmutex's convention: 0 (or a pointer) on success,
 * -1 (or SEM_FAILED) with errno set on failure.  The backend being away is
 * not an error: init, open, wait and post wait for it (a warning now and
 * then), asking again with the same request id so that no retry takes or
 * returns a second permit; trywait says EAGAIN, the timed waits ETIMEDOUT
 * at their deadline.  Only a wait or post whose try went unanswered (it may
 * have been applied) is not asked again once the client's retry_window_ms
 * has passed since that try: EIO, whether it was applied is unknown (the
 * backend keeps the result no longer).
 */
#ifndef DMUTEX_SHIM_SEM_H
#define DMUTEX_SHIM_SEM_H

#include <time.h>

#include "dmutex.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * sem_init: the semaphore is named by the definition site, "FILE:LINE" of
 * the call, as pthread_mutex_init names a mutex.  pshared is ignored (every
 * semaphore is shared).  0; -1 with errno EINVAL (NULL s, value above
 * SEM_VALUE_MAX, bad namespace), ENOTSUP (several masters), ENOMEM.
 */
DMUTEX_EXPORT int dmutex_shim_sem_init(dsem_t *s, int pshared, unsigned value, const char *site);
/* sem_destroy: 0; -1 with errno EINVAL (not initialized), EBUSY (a thread
 * of this process waits on it). */
DMUTEX_EXPORT int dmutex_shim_sem_destroy(dsem_t *s);
/* sem_wait: 0; -1 with errno EINVAL, EIO (retry_window_ms passed with a
 * try unanswered: a permit taken or not).  Never EINTR. */
DMUTEX_EXPORT int dmutex_shim_sem_wait(dsem_t *s);
/* sem_trywait: 0; -1 with errno EAGAIN (no permit free, or the backend is
 * away), EINVAL, EIO (as sem_wait, with a retry_window_ms shorter than its
 * few tries). */
DMUTEX_EXPORT int dmutex_shim_sem_trywait(dsem_t *s);
/* sem_timedwait: 0; -1 with errno ETIMEDOUT, EINVAL (also a bad deadline
 * when it would wait), EIO (as sem_wait). */
DMUTEX_EXPORT int dmutex_shim_sem_timedwait(dsem_t *s, const struct timespec *abstime);
/* sem_clockwait: as sem_timedwait on CLOCK_REALTIME or CLOCK_MONOTONIC
 * (else -1 with errno EINVAL, or ETIMEDOUT). */
DMUTEX_EXPORT int dmutex_shim_sem_clockwait(dsem_t *s, clockid_t clock,
		const struct timespec *abstime);
/* sem_post: 0; -1 with errno EOVERFLOW, EINVAL, EIO (retry_window_ms
 * passed with a try unanswered: posted once or not at all).  Not
 * async-signal-safe. */
DMUTEX_EXPORT int dmutex_shim_sem_post(dsem_t *s);
/* sem_getvalue: 0; -1 with errno EINVAL. */
DMUTEX_EXPORT int dmutex_shim_sem_getvalue(dsem_t *s, int *value);
/*
 * sem_open(name, oflag[, mode, value]): the semaphore `name`, used as given
 * (like a system-wide POSIX name), the same object for the same name in one
 * process until its last sem_close.  O_CREAT creates it with value unless it
 * exists (the first creator's value applies); O_CREAT|O_EXCL fails if it
 * exists; mode is ignored (no permission checks).  The object, or SEM_FAILED with errno EEXIST,
 * ENOENT (no O_CREAT and it does not exist), EINVAL (bad name, value above
 * SEM_VALUE_MAX), ENAMETOOLONG (longer than NAME_MAX after its leading
 * slashes), ENOTSUP, ENOMEM.
 */
DMUTEX_EXPORT dsem_t *dmutex_shim_sem_open(const char *name, int oflag, ...);
/* sem_close: 0; -1 with errno EINVAL (not from sem_open). */
DMUTEX_EXPORT int dmutex_shim_sem_close(dsem_t *s);
/* sem_unlink: the name is gone (sem_open without O_CREAT: ENOENT; with it:
 * a new semaphore); processes that have the old one open go on using it
 * (a generation of the name, semaphore.c).  0; -1 with errno ENOENT,
 * EINVAL, ENAMETOOLONG. */
DMUTEX_EXPORT int dmutex_shim_sem_unlink(const char *name);

#ifdef __cplusplus
}
#endif

#endif
