/*
 * dmutex — distributed pthread-style mutexes over Redis.
 *
 * Every function returns 0 or a positive errno value, like pthreads; none
 * sets or relies on errno, and none returns EINTR.  All calls are
 * thread-safe.  See dmutex(7) / README.md for the full semantics.
 */
#ifndef DMUTEX_H
#define DMUTEX_H

#include <stdint.h>
#include <sys/types.h> /* clockid_t, even in strict ISO C mode */
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DMUTEX_BUILDING) && defined(__GNUC__)
#define DMUTEX_EXPORT __attribute__((visibility("default")))
#else
#define DMUTEX_EXPORT
#endif

#define DMUTEX_VERSION_MAJOR 0
#define DMUTEX_VERSION_MINOR 1
#define DMUTEX_VERSION_PATCH 0

/* Lock names are 1 to DMUTEX_NAME_MAX bytes, copied on init. */
#define DMUTEX_NAME_MAX 512

/* Lease bounds in milliseconds. */
#define DMUTEX_LEASE_MIN     100u
#define DMUTEX_LEASE_MAX     86400000u
#define DMUTEX_LEASE_DEFAULT 10000u

/* Mutex types (mirror PTHREAD_MUTEX_*). */
enum {
	DMUTEX_NORMAL = 0,
	DMUTEX_ERRORCHECK = 1,
	DMUTEX_RECURSIVE = 2,
	DMUTEX_DEFAULT = DMUTEX_NORMAL
};

/* Robustness (mirror PTHREAD_MUTEX_STALLED / _ROBUST). */
enum {
	DMUTEX_STALLED = 0,
	DMUTEX_ROBUST = 1
};

/* Log levels. */
enum {
	DMUTEX_LOG_ERROR = 0,
	DMUTEX_LOG_WARN = 1,
	DMUTEX_LOG_INFO = 2,
	DMUTEX_LOG_DEBUG = 3
};

/* A connection to the backend: one Redis, or several for Redlock. Opaque. */
typedef struct dmutex_client dmutex_client_t;

/* Fixed-size, caller-allocated.  Fields are private. */
typedef struct dmutex_attr {
	/* private */
	unsigned long __magic;
	int __type;
	int __robust;
	unsigned __lease_ms;
	dmutex_client_t *__client;
	void (*__onlost)(const char *name, void *arg);
	void *__onlost_arg;
	void *__reserved[4];
} dmutex_attr_t;

/* Fixed-size, caller-allocated.  Fields are private. */
typedef struct dmutex {
	/* private */
	unsigned long __magic;
	const char *__static_name;  /* set by DMUTEX_INITIALIZER only */
	void *__impl;               /* bound lazily for static mutexes */
	void *__reserved[5];
} dmutex_t;

#define DMUTEX__MAGIC_STATIC 0x646d7574UL /* "dmut" */

/*
 * Static initializer: default attributes, default client.  The first use
 * binds the mutex, thread-safely, to the default client.  `name` must be a
 * string with static storage duration (normally a literal).
 */
#define DMUTEX_INITIALIZER(name) \
	{ DMUTEX__MAGIC_STATIC, (name), 0, { 0, 0, 0, 0, 0 } }

/* ---- clients ---------------------------------------------------------- */

/*
 * Open a client for `url` (NULL: $DMUTEX_URL, else redis://127.0.0.1:6379).
 * Connects and authenticates once to fail early.
 * Returns 0; EINVAL (NULL client, malformed URL, unknown option, value out
 * of range); ENOTSUP (rediss:// in a build without TLS); EIO (backend
 * unreachable, authentication refused); ENOMEM.
 */
DMUTEX_EXPORT int dmutex_client_open(dmutex_client_t **client, const char *url);

/*
 * Close a client.  Returns 0; EINVAL (NULL); EBUSY while a mutex is held
 * through it (nothing is closed then).
 */
DMUTEX_EXPORT int dmutex_client_close(dmutex_client_t *client);

/* ---- attributes ------------------------------------------------------- */

/* 0; EINVAL (NULL). */
DMUTEX_EXPORT int dmutex_attr_init(dmutex_attr_t *attr);
/* 0; EINVAL (NULL or not initialized). */
DMUTEX_EXPORT int dmutex_attr_destroy(dmutex_attr_t *attr);
/* 0; EINVAL (NULL, not initialized, unknown type). */
DMUTEX_EXPORT int dmutex_attr_settype(dmutex_attr_t *attr, int type);
/* 0; EINVAL (NULL, not initialized). */
DMUTEX_EXPORT int dmutex_attr_gettype(const dmutex_attr_t *attr, int *type);
/* 0; EINVAL (NULL, not initialized, not DMUTEX_STALLED/DMUTEX_ROBUST). */
DMUTEX_EXPORT int dmutex_attr_setrobust(dmutex_attr_t *attr, int robust);
/* 0; EINVAL (NULL, not initialized). */
DMUTEX_EXPORT int dmutex_attr_getrobust(const dmutex_attr_t *attr, int *robust);
/* 0; EINVAL (NULL, not initialized, lease outside 100 ms .. 24 h). */
DMUTEX_EXPORT int dmutex_attr_setlease(dmutex_attr_t *attr, unsigned lease_ms);
/* 0; EINVAL (NULL, not initialized).  0 in *lease_ms means "the client's". */
DMUTEX_EXPORT int dmutex_attr_getlease(const dmutex_attr_t *attr, unsigned *lease_ms);
/* 0; EINVAL (NULL attr, not initialized).  NULL client: the default one. */
DMUTEX_EXPORT int dmutex_attr_setclient(dmutex_attr_t *attr, dmutex_client_t *client);
/*
 * Called once, from the library's renewal thread (or from the holder's own
 * dmutex_unlock/dmutex_fence if it notices first), when a hold is lost.
 * 0; EINVAL (NULL attr, not initialized).  NULL onlost removes the handler.
 */
DMUTEX_EXPORT int dmutex_attr_setonlost(dmutex_attr_t *attr,
		void (*onlost)(const char *name, void *arg), void *arg);

/* ---- mutexes ---------------------------------------------------------- */

/*
 * 0; EINVAL (NULL m, bad name: NULL, empty or longer than DMUTEX_NAME_MAX,
 * bad attr); EIO/EINVAL/ENOTSUP from opening the default client when attr
 * names none; ENOMEM.
 */
DMUTEX_EXPORT int dmutex_init(dmutex_t *m, const char *name, const dmutex_attr_t *attr);
/* 0; EINVAL (NULL, uninitialized, destroyed); EBUSY (held in this process). */
DMUTEX_EXPORT int dmutex_destroy(dmutex_t *m);
/*
 * 0; EOWNERDEAD (robust: acquired, previous owner died); ENOTRECOVERABLE;
 * EDEADLK (NORMAL/ERRORCHECK owner locks again); EAGAIN (recursion count
 * would pass INT_MAX); EINVAL (NULL, uninitialized, destroyed); EIO (backend
 * failed for command_timeout_ms x 3, lock not taken).
 */
DMUTEX_EXPORT int dmutex_lock(dmutex_t *m);
/* As dmutex_lock, plus EBUSY when held by anyone (including the owner of a
 * NORMAL/ERRORCHECK mutex); EIO after one attempt. */
DMUTEX_EXPORT int dmutex_trylock(dmutex_t *m);
/* As dmutex_lock, plus ETIMEDOUT; EINVAL for a bad tv_nsec only when it
 * would block. */
DMUTEX_EXPORT int dmutex_timedlock(dmutex_t *m, const struct timespec *abs_realtime);
/* As dmutex_timedlock; EINVAL for a clock other than CLOCK_REALTIME and
 * CLOCK_MONOTONIC. */
DMUTEX_EXPORT int dmutex_clocklock(dmutex_t *m, clockid_t clock,
		const struct timespec *abstime);
/*
 * 0; EPERM (caller does not hold it); ENOLCK (the hold was lost; it is
 * forgotten); EIO (release not confirmed; the hold is forgotten locally and
 * the release retried in the background until the lease ends); EINVAL.
 */
DMUTEX_EXPORT int dmutex_unlock(dmutex_t *m);
/* 0; EINVAL (not robust, or not inconsistent, or bad m); EPERM (not held
 * by the caller). */
DMUTEX_EXPORT int dmutex_consistent(dmutex_t *m);
/* 0 and *token; EPERM (not held by the caller); ENOLCK (hold lost); EINVAL. */
DMUTEX_EXPORT int dmutex_fence(dmutex_t *m, uint64_t *token);

/* A static string for any value the library returns; never NULL. */
DMUTEX_EXPORT const char *dmutex_strerror(int err);

/* ---- logging ---------------------------------------------------------- */

/*
 * Route log messages to `log` (NULL restores the default: messages at or
 * above $DMUTEX_LOG — off|error|warn|info|debug, default warn — to stderr,
 * prefixed "dmutex: ").  Passwords never appear in messages.
 */
DMUTEX_EXPORT void dmutex_set_logger(void (*log)(int level, const char *msg, void *arg),
		void *arg);

#ifdef __cplusplus
}
#endif

#endif /* DMUTEX_H */
