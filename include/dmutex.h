/*
 * dmutex — distributed pthread-style mutexes over Redis (or etcd).
 *
 * Every function returns 0 or a positive errno value, like pthreads; none
 * sets or relies on errno, and none returns EINTR.  All calls are
 * thread-safe.  See dmutex(7) / README.md for the full semantics.
 */
#ifndef DMUTEX_H
#define DMUTEX_H

/*
 * Self-contained: it compiles included first and alone, in C99 or later and
 * in C++98 or later, strict (-std=c99 -pedantic) or not; in C89 only where
 * the C library has a C99 <stdint.h> for uint64_t, as glibc does
 * (tests/check_header.sh compiles each).  No struct tag is a bare library
 * name: C++ code may have a namespace dmutex.
 */
#include <errno.h>     /* the values the calls return: EOWNERDEAD, ENOLCK... */
#include <stdint.h>
#include <sys/types.h> /* clockid_t, even in strict ISO C mode */
#include <time.h>

/* Strict ISO C before C11 has no struct timespec in <time.h>: declared
 * here, so that the prototypes below name the same struct the caller
 * later gets from POSIX. */
struct timespec;

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
	unsigned long __flags;      /* the size of a pointer, as the slot it took */
	void *__reserved[3];
} dmutex_attr_t;

/* Fixed-size, caller-allocated.  Fields are private.  (The tag is not
 * `dmutex`, which C++ code may use as a namespace.) */
typedef struct dmutex_mutex {
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
 * Connects, authenticates and checks the server's permissions once to fail
 * early.
 * Returns 0; EINVAL (NULL client, malformed URL, unknown option, value out
 * of range, a Redlock URL naming one server twice); ENOTSUP (rediss:// in a build without TLS,
 * etcd:// in a build without etcd); EACCES (the ACL
 * denies a command, the keys or the channels dmutex needs: see
 * dmutex_client_open(3); logged; over etcd: a wrong user or password, or
 * a role that may not read the prefix); EIO (backend unreachable,
 * authentication refused); ENOMEM; EAGAIN (no thread could be started to
 * connect: a thread limit; ENOMEM when no memory was left for it; logged).
 * etcd://host:port,... (README "etcd"): the members of one etcd v3 cluster;
 * every mutex there is first-come first-served (waiters queue by etcd
 * revision), a fencing token is the hold's etcd create revision, and
 * leases are whole seconds, 2 s at least (rounded up; dmutex_getlease
 * reports the lease granted).
 */
DMUTEX_EXPORT int dmutex_client_open(dmutex_client_t **client, const char *url);

/*
 * Close a client.  Returns 0; EINVAL (NULL); EBUSY while a mutex is held
 * through it (nothing is closed then).
 */
DMUTEX_EXPORT int dmutex_client_close(dmutex_client_t *client);

/*
 * This client's own counters since it opened, for lock `name` or, with
 * name NULL, every name summed (a name never locked: all zero).  They are
 * what the client adds to Redis, where `dmutex metrics` shows the sums of
 * every process.  client NULL: the default client.
 * Returns 0; EINVAL (NULL out, name empty or longer than DMUTEX_NAME_MAX);
 * EIO, ENOMEM (client NULL and the default client cannot be opened).
 */
typedef struct dmutex_metrics {
	uint64_t acquisitions;          /* locks acquired */
	uint64_t contended;             /* ... that waited for another holder */
	uint64_t leases_lost;           /* holds lost (onlost) */
	uint64_t renewals;              /* lease renewals confirmed */
	uint64_t backend_errors;        /* backend calls that failed */
	uint64_t holds;                 /* holds ended (unlock, loss, thread end) */
	double wait_seconds;            /* time lock calls waited, acquired ones */
	double hold_seconds;            /* time the ended holds lasted */
} dmutex_metrics_t;
DMUTEX_EXPORT int dmutex_client_metrics(dmutex_client_t *client, const char *name,
		dmutex_metrics_t *out);

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
/* 0; EINVAL (NULL, not initialized).  0 in *lease_ms means "the client's":
 * dmutex_getlease gives the lease a mutex really uses. */
DMUTEX_EXPORT int dmutex_attr_getlease(const dmutex_attr_t *attr, unsigned *lease_ms);
/* 0; EINVAL (NULL attr, not initialized).  NULL client: the default one. */
DMUTEX_EXPORT int dmutex_attr_setclient(dmutex_attr_t *attr, dmutex_client_t *client);
/*
 * Called once, from the library's renewal thread (or from the holder's own
 * dmutex_unlock/dmutex_fence if it notices first), when a hold is lost.
 * No library lock is held while it runs, but on the renewal thread it
 * delays the renewal of the client's other holds: keep it short (set a
 * flag, signal a thread) and well under the shortest lease.
 * 0; EINVAL (NULL attr, not initialized).  NULL onlost removes the handler.
 */
DMUTEX_EXPORT int dmutex_attr_setonlost(dmutex_attr_t *attr,
		void (*onlost)(const char *name, void *arg), void *arg);
/*
 * fair 1: waiters across processes queue in Redis and the unlocking thread
 * hands the lock to the one that waited longest (no barging; README "Fair
 * locks"); every user of the name must be fair.  0 (the default): as
 * pthread mutexes.  dmutex_init of a fair mutex over Redlock is ENOTSUP.
 * Over etcd every mutex is fair across processes, whatever this says.
 * 0; EINVAL (NULL, not initialized, fair not 0 or 1).
 */
DMUTEX_EXPORT int dmutex_attr_setfair(dmutex_attr_t *attr, int fair);
/* 0; EINVAL (NULL, not initialized). */
DMUTEX_EXPORT int dmutex_attr_getfair(const dmutex_attr_t *attr, int *fair);
/*
 * Cached leases (README "Cached leases"), on by default: with on 1 (the
 * default), an unlock that no other process waits for may leave the lease
 * with the process, and its threads lock again with no round trip (unless
 * the client's URL says lease_cache=off).  0: every unlock of mutexes made
 * with attr releases in Redis, whatever the client says.  Robust and fair
 * mutexes never cache, nor do Redlock and Cluster clients.
 * 0; EINVAL (NULL, not initialized, on not 0 or 1).
 */
DMUTEX_EXPORT int dmutex_attr_setleasecache(dmutex_attr_t *attr, int on);
/* 0; EINVAL (NULL, not initialized). */
DMUTEX_EXPORT int dmutex_attr_getleasecache(const dmutex_attr_t *attr, int *on);

/* ---- mutexes ---------------------------------------------------------- */

/*
 * 0; EINVAL (NULL m, bad name: NULL, empty or longer than DMUTEX_NAME_MAX,
 * bad attr); ENOTSUP (a fair mutex over Redlock); EIO/EINVAL/ENOTSUP from
 * opening the default client when attr names none; ENOMEM.
 */
DMUTEX_EXPORT int dmutex_init(dmutex_t *m, const char *name, const dmutex_attr_t *attr);
/* 0; EINVAL (NULL, uninitialized, destroyed); EBUSY (held in this process).
 * Waits (up to command_timeout_ms) for the answer to the last asynchronous
 * release of the name, if still to come (dmutex_unlock).  A release still
 * retried in the background after an unlock's EIO goes on, but its onlost
 * is no longer called once this returns (its argument may be gone; a call
 * already under way is waited for): a loss it finds is reported by the log
 * and the lost metric only. */
DMUTEX_EXPORT int dmutex_destroy(dmutex_t *m);
/*
 * 0 and EOWNERDEAD (robust: previous owner died) return holding the lock;
 * every other result means "not acquired": ENOTRECOVERABLE; EDEADLK
 * (NORMAL/ERRORCHECK owner locks again, its hold lost or not); EAGAIN
 * (recursion count would pass INT_MAX); EINVAL (NULL, uninitialized,
 * destroyed); ENOMEM, or EAGAIN for a thread limit (no thread could be
 * started to connect to the server; logged); EIO (backend
 * failed for command_timeout_ms x 3, lock not taken).
 * A lock call never returns ENOLCK: a loss found late is reported by
 * onlost, by ENOLCK from that hold's unlock or fence, and in the log.  A
 * RECURSIVE owner that locks again a hold known lost ends that hold (it
 * was reported) and takes the lock anew, at the depth it counts.
 */
DMUTEX_EXPORT int dmutex_lock(dmutex_t *m);
/* As dmutex_lock, plus EBUSY when held by anyone (including the owner of a
 * NORMAL/ERRORCHECK mutex); EIO after one attempt, within
 * command_timeout_ms in total: retries, a new connection, a reply the
 * server trickles and every Redlock node and round included (a release the
 * attempt owes is finished in the background). */
DMUTEX_EXPORT int dmutex_trylock(dmutex_t *m);
/* As dmutex_lock, plus ETIMEDOUT; EINVAL for a bad tv_nsec only when it
 * would block (before EDEADLK).  Returns by the deadline whatever
 * command_timeout_ms says (at most about 0.2 s past it: a first request's
 * time to answer); ETIMEDOUT also when the server has not answered by
 * then, EIO when the backend failed before it. */
DMUTEX_EXPORT int dmutex_timedlock(dmutex_t *m, const struct timespec *abs_realtime);
/* As dmutex_timedlock; EINVAL for a clock other than CLOCK_REALTIME and
 * CLOCK_MONOTONIC. */
DMUTEX_EXPORT int dmutex_clocklock(dmutex_t *m, clockid_t clock,
		const struct timespec *abstime);
/*
 * 0; EPERM (caller does not hold it); ENOLCK (the hold was lost; it is
 * forgotten); EIO (synchronous release only: not confirmed within
 * command_timeout_ms in total, as for trylock; the hold is forgotten
 * locally and the release retried in the background until the lease
 * ends.  EIO means "unknown", not "the hold was sound": if every request
 * so far was refused without running (-LOADING, READONLY, BUSY) and a
 * retry then finds the lock not ours before the hold's deadline, the hold
 * had been lost, and that is reported later by onlost (unless the mutex
 * was destroyed meanwhile), a log line and the lost metric); EINVAL.
 *
 * On one Redis (or Sentinel's master) a clean release is asynchronous
 * (URL option async_release=1, the default): the release is written
 * whole into the connection's socket (so exit or fork right after loses
 * nothing) and unlock returns 0 without waiting for Redis's answer, which
 * the connection's next request reads on its way.  It cannot let two
 * holders overlap: the release deletes the key only if it still holds
 * our token, so until it runs the lock is at worst held a little longer
 * (never past its lease, no longer renewed) and never by two.  Meanwhile
 * another client may still find the lock taken (trylock EBUSY; a blocking
 * lock is woken by the release); a lock of the same name through this
 * client waits for the answer first.  An answer saying the key was not
 * ours (the hold had been lost unnoticed) is reported by the onlost
 * handler and a log line, from the client's renewal thread, within a few
 * milliseconds of the answer (bounded by command_timeout_ms); no later
 * call returns ENOLCK for it (that hold is over; a lock call never reports
 * a loss).  No answer (connection lost) retries the release in the
 * background until the lease ends; an error answer (-LOADING, READONLY:
 * it did not run) is asked again until an answer is sure, and a "not
 * ours" then is reported as above.  An unlock, fence or destroy of a
 * mutex no longer held waits (up to command_timeout_ms) for the answer,
 * then says EPERM.  Redlock, Cluster, fair mutexes, a lost or
 * not-recovered hold, the last hold of a kept lease, and async_release=0
 * release synchronously (Redlock must count a majority of answers to know
 * it released).  One unlock has one deadline, command_timeout_ms, shared
 * by every round trip in it (keeping a lease, then releasing it).
 */
DMUTEX_EXPORT int dmutex_unlock(dmutex_t *m);
/* 0; EINVAL (not robust, or not inconsistent, or bad m); EPERM (not held
 * by the caller). */
DMUTEX_EXPORT int dmutex_consistent(dmutex_t *m);
/*
 * 0 and *token; EPERM (not held by the caller); ENOLCK (hold lost); EIO
 * (the server refused to assign a token: an ACL, foreign data); EINVAL.
 * A hold that took a free lock with the plain SET (README "How it works")
 * has no token until its first dmutex_fence, which asks the server for
 * one: one round trip, in which the server checks the hold is still
 * live; a server that does not answer is asked again for as long as the
 * hold lasts (then ENOLCK).  Later calls in the hold, and holds under
 * Redlock and of fair mutexes, answer from the hold's local state and
 * clock.  A local hold on a kept lease takes the next token of a block its
 * process reserved; the first that asks reserves one (one round trip per
 * 4096 holds that ask, ENOLCK if the lease is found not ours).  On a
 * mutex the caller no longer holds it first waits for its last release's
 * answer, as dmutex_unlock says.
 *
 * What a token guarantees (the one statement; README "Fencing tokens" and
 * dmutex(7) repeat it).  A token is max(last + 1, T << 20 | u << 10): last
 * is the name's previous token as the granting master knows it, T that
 * master's clock in ms and u the microseconds within that ms (Redis TIME;
 * u keeps two grants of one ms apart when the name's state was lost
 * between them).  So:
 *  - It is strictly greater than every earlier token of the name that the
 *    granting master knows, always (expiry of the name's idle state and
 *    `dmutex reset` included).
 *  - The state can be lost: a Sentinel failover to a replica that missed
 *    the last writes (replication is asynchronous), a Cluster replica
 *    promoted, a server restarted without persistence or flushed.  A token
 *    granted after the loss is still greater than every lost one as long as
 *    the new master's clock, when it grants, is past the old master's clock
 *    when it granted the last lost token: the clocks of the servers must
 *    not differ (nor a clock step back) by as much as the time between
 *    the last lost grant and the first grant after the loss.  A Sentinel
 *    failover takes at least down-after-milliseconds, a restart the time to
 *    start Redis, so clocks kept by NTP are well inside it.
 *  - Not guaranteed: clocks further apart than that, or stepped back; and
 *    while two masters grant at once (an old master cut off by a partition
 *    keeps granting until Sentinel demotes it) mutual exclusion itself is
 *    broken: the tokens of the two masters interleave by clock, and a
 *    resource that refuses tokens below its largest still refuses every
 *    write older (by those clocks) than one it accepted.
 *  - Per name only: each name has its own counter, so two names' tokens
 *    are ordered by the clock part alone (two grants in one millisecond
 *    may tie, or come in the other order).  A resource guarded by several
 *    names keeps the largest token per name.
 * A hold whose state was lost is reported lost (onlost, ENOLCK) at its next
 * renewal, a third of the lease at most after the new master answers;
 * until then two holders may overlap, and only fencing protects the
 * resource.
 * Cached leases: a process that keeps a lease reserves a block of tokens
 * above the hold's when one of its local holds first asks (the name's
 * counter moves past the whole block, while the lease is still ours) and
 * hands them to its local holds that ask, in order, so they obey the same
 * rules.
 * If the kept lease's key is found gone (deleted, evicted, lost with a
 * failover), every hold granted on it since Redis last confirmed it is
 * reported lost (onlost, log), a running one also by ENOLCK from its
 * unlock and fence: a later holder's token is above theirs, so fencing
 * refuses their writes.
 * Over etcd (README "etcd") the token is the etcd revision that created
 * the hold's key, returned by the acquisition itself: strictly greater
 * than every earlier token of every name in that cluster, leader changes
 * and restarts included, with no clock involved.
 */
DMUTEX_EXPORT int dmutex_fence(dmutex_t *m, uint64_t *token);

/*
 * The lease of m's holds in ms: its attribute's, or its client's lease_ms
 * (default 10000).  A static mutex is bound to the default client first.
 * 0; EINVAL (NULL, uninitialized or destroyed m, NULL lease_ms); errors of
 * opening the default client for a static mutex.
 */
DMUTEX_EXPORT int dmutex_getlease(const dmutex_t *m, unsigned *lease_ms);

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

/* ====================================================================== */
/* condition variables                                                    */
/* ====================================================================== */

/*
 * dcond_t mirrors pthread_cond_t across processes and hosts: a waiter is
 * registered in the backend before its mutex is released, so no wake-up
 * is lost between the unlock and the sleep; dcond_signal wakes at least one
 * current waiter if there is one, dcond_broadcast every waiter registered
 * before it.  Spurious wake-ups happen (always wait in a loop on your
 * predicate); lost ones do not, also when a waiter dies.  Two dcond_t with
 * the same name on the same backend are the same condition variable.  The
 * mutex and the condition variable may live on different clients.
 */

/* Fixed-size, caller-allocated.  Fields are private. */
typedef struct dcond_attr {
	/* private */
	unsigned long __magic;
	clockid_t __clock;
	dmutex_client_t *__client;
	void *__reserved[4];
} dcond_attr_t;

/* Fixed-size, caller-allocated.  Fields are private. */
typedef struct dcond {
	/* private */
	unsigned long __magic;
	const char *__static_name;  /* set by DCOND_INITIALIZER only */
	void *__impl;               /* bound lazily for static ones */
	void *__reserved[5];
} dcond_t;

#define DCOND__MAGIC_STATIC 0x64636f6eUL /* "dcon" */

/*
 * Static initializer: default client, CLOCK_REALTIME for dcond_timedwait.
 * The first use binds it, thread-safely, to the default client.  `name`
 * must have static storage duration (normally a literal).
 */
#define DCOND_INITIALIZER(name) \
	{ DCOND__MAGIC_STATIC, (name), 0, { 0, 0, 0, 0, 0 } }

/* 0; EINVAL (NULL). */
DMUTEX_EXPORT int dcond_attr_init(dcond_attr_t *attr);
/* 0; EINVAL (NULL or not initialized). */
DMUTEX_EXPORT int dcond_attr_destroy(dcond_attr_t *attr);
/* The clock of dcond_timedwait's deadline.  0; EINVAL (NULL, not
 * initialized, a clock other than CLOCK_REALTIME and CLOCK_MONOTONIC). */
DMUTEX_EXPORT int dcond_attr_setclock(dcond_attr_t *attr, clockid_t clock);
/* 0; EINVAL (NULL, not initialized). */
DMUTEX_EXPORT int dcond_attr_getclock(const dcond_attr_t *attr, clockid_t *clock);
/* 0; EINVAL (NULL attr, not initialized).  NULL client: the default one. */
DMUTEX_EXPORT int dcond_attr_setclient(dcond_attr_t *attr, dmutex_client_t *client);

/*
 * 0; EINVAL (NULL c, bad name: NULL, empty or longer than DMUTEX_NAME_MAX,
 * bad attr); EIO/EINVAL/ENOTSUP from opening the default client when attr
 * names none; ENOMEM.
 */
DMUTEX_EXPORT int dcond_init(dcond_t *c, const char *name, const dcond_attr_t *attr);
/* 0; EINVAL (NULL, uninitialized, destroyed); EBUSY (a thread of this
 * process waits on it). */
DMUTEX_EXPORT int dcond_destroy(dcond_t *c);
/*
 * Release m, wait for a wake-up, take m again.  m must be held by the
 * calling thread (a recursive one may be held several times: it is released
 * whole and given back at the same depth).  On return m is held again,
 * except after EINVAL, EPERM and ENOTRECOVERABLE.
 * 0 (woken, or spuriously); EOWNERDEAD (robust m: taken back, its previous
 * owner died: make the state consistent, then dmutex_consistent);
 * ENOTRECOVERABLE (m cannot be taken back; it is not held); ENOLCK (the
 * hold of m had been lost before the wait released it, found by the
 * release or its answer; m is held again, on a new hold);
 * EPERM (m not held by the caller; nothing done); EINVAL (NULL,
 * uninitialized or destroyed c or m; nothing done); EIO (the backend could
 * not register the wait; m is still held, nothing else done); ENOMEM.
 * A backend failure after m was released is retried until m is held again.
 */
DMUTEX_EXPORT int dcond_wait(dcond_t *c, dmutex_t *m);
/* As dcond_wait, with a deadline on the attribute's clock (default
 * CLOCK_REALTIME), plus ETIMEDOUT (m is held again) and EINVAL for a NULL
 * deadline or a bad tv_nsec (nothing done). */
DMUTEX_EXPORT int dcond_timedwait(dcond_t *c, dmutex_t *m, const struct timespec *abstime);
/* As dcond_timedwait on `clock`; EINVAL for a clock other than
 * CLOCK_REALTIME and CLOCK_MONOTONIC. */
DMUTEX_EXPORT int dcond_clockwait(dcond_t *c, dmutex_t *m, clockid_t clock,
		const struct timespec *abstime);
/* Wake at least one current waiter, if any; the caller need not hold the
 * mutex.  0; EINVAL (NULL, uninitialized, destroyed); EIO (the backend did
 * not confirm within command_timeout_ms in total, retries, a new connection
 * and every Redlock node included: a waiter may or may not have been
 * woken). */
DMUTEX_EXPORT int dcond_signal(dcond_t *c);
/* Wake every waiter registered before the call.  As dcond_signal. */
DMUTEX_EXPORT int dcond_broadcast(dcond_t *c);

/* ---- counting semaphores ------------------------------------------------
 *
 * A dsem_t is a counting semaphore kept in the backend under its name: all
 * dsem_t of the same name on the same backend are one semaphore.  It has no
 * owner (as POSIX): a permit taken stays taken until someone posts, and a
 * process that dies neither returns nor loses permits.  The first creator's
 * initial value applies; a later dsem_init with another value joins the
 * existing semaphore (DSEM_EXCL refuses with EEXIST instead).  Waiters are
 * woken through the backend's pub/sub channel; they re-check on their own
 * only as a safety net, once per lease period.  One Redis master only: a
 * client over several masters (Redlock) gets ENOTSUP.
 */

/* The largest value a semaphore holds (as SEM_VALUE_MAX on Linux). */
#define DSEM_VALUE_MAX 2147483647U

/* dsem_init flags. */
#define DSEM_EXCL 1     /* fail with EEXIST if the semaphore already exists */
#define DSEM_NOCREATE 2 /* fail with ENOENT if it does not exist */

/* Fixed-size, caller-allocated.  Fields are private. */
typedef struct dsem {
	/* private */
	unsigned long __magic;
	const char *__static_name;  /* set by DSEM_INITIALIZER only */
	void *__impl;               /* bound lazily for static ones */
	unsigned __value;           /* DSEM_INITIALIZER's initial value */
	void *__reserved[4];
} dsem_t;

#define DSEM__MAGIC_STATIC 0x6473656dUL /* "dsem" */

/*
 * Static initializer: default client; the first use binds it, thread-safely,
 * and creates the semaphore with `value` unless it exists.  `name` must have
 * static storage duration (normally a literal).
 */
#define DSEM_INITIALIZER(name, value) \
	{ DSEM__MAGIC_STATIC, (name), 0, (value), { 0, 0, 0, 0 } }

/*
 * Open semaphore `name` through `client` (NULL: the default one), creating
 * it with `value` permits if it does not exist.  flags: 0, DSEM_EXCL or
 * DSEM_NOCREATE.  0; EEXIST (DSEM_EXCL and it exists); ENOENT
 * (DSEM_NOCREATE and it does not exist); EINVAL (NULL s, bad name, value >
 * DSEM_VALUE_MAX, unknown flag or both); ENOTSUP (client over several masters);
 * EIO (backend); ENOMEM; errors of opening the default client.
 */
DMUTEX_EXPORT int dsem_init(dsem_t *s, const char *name, unsigned value,
		dmutex_client_t *client, int flags);
/* Forget the local object; the semaphore stays in the backend (see
 * dsem_unlink).  0; EINVAL (NULL, uninitialized, destroyed); EBUSY (a
 * thread of this process waits on it). */
DMUTEX_EXPORT int dsem_destroy(dsem_t *s);
/* Delete semaphore `name` from the backend: the next use creates it afresh.
 * 0; ENOENT (it did not exist); EINVAL; EIO; errors of the default client. */
DMUTEX_EXPORT int dsem_unlink(const char *name, dmutex_client_t *client);
/*
 * Take a permit, waiting while there is none.  0; EINVAL (NULL,
 * uninitialized, destroyed); EIO (the backend failed a few tries with the
 * same request id, or the client's retry_window_ms passed since a try went
 * unanswered: no permit is held unless a try reached the backend and every
 * reply after it was lost: then one permit stays taken, as by a process
 * that died; never two);
 * ENOMEM.  Not a cancellation point; not interrupted by signals (no EINTR).
 */
DMUTEX_EXPORT int dsem_wait(dsem_t *s);
/* As dsem_wait without waiting: EAGAIN if there is no permit now. */
DMUTEX_EXPORT int dsem_trywait(dsem_t *s);
/* As dsem_wait with a CLOCK_REALTIME deadline: ETIMEDOUT; EINVAL for a NULL
 * deadline or a bad tv_nsec (checked only when it would wait).  Returns by
 * the deadline (at most about 0.2 s past it); EIO if the deadline cut a
 * take short that may have been applied. */
DMUTEX_EXPORT int dsem_timedwait(dsem_t *s, const struct timespec *abstime);
/* As dsem_timedwait on CLOCK_REALTIME or CLOCK_MONOTONIC (else EINVAL). */
DMUTEX_EXPORT int dsem_clockwait(dsem_t *s, clockid_t clock, const struct timespec *abstime);
/* Return a permit and wake waiters.  0; EOVERFLOW (at DSEM_VALUE_MAX);
 * EINVAL; EIO (not confirmed after a few tries with the same request id,
 * or within the client's retry_window_ms of a try that went unanswered:
 * the post may or may not have happened; it never happened twice).
 * Not async-signal-safe: do not call it from a signal handler. */
DMUTEX_EXPORT int dsem_post(dsem_t *s);
/* The current number of free permits (never negative).  0; EINVAL; EIO. */
DMUTEX_EXPORT int dsem_getvalue(dsem_t *s, int *value);

/* ---- barriers -----------------------------------------------------------
 *
 * A dbarrier_t is a barrier kept in the backend under its name: `count` is
 * the total number of waiters across all processes and hosts (not per
 * process).  When the count-th waiter arrives, all are released and the
 * barrier starts its next cycle (a generation counter in Redis), so one
 * object serves any number of cycles.  A waiter that dies (or never comes)
 * leaves the others waiting: restart it (its arrival completes the cycle),
 * or delete the barrier's key.  One Redis master only (else ENOTSUP).
 */

/* dbarrier_wait's value for exactly one waiter per cycle (as glibc's
 * PTHREAD_BARRIER_SERIAL_THREAD). */
#define DBARRIER_SERIAL_THREAD (-1)

/* Fixed-size, caller-allocated.  Fields are private. */
typedef struct dbarrier {
	/* private */
	unsigned long __magic;
	const char *__static_name;  /* set by DBARRIER_INITIALIZER only */
	void *__impl;               /* bound lazily for static ones */
	unsigned __count;           /* DBARRIER_INITIALIZER's count */
	void *__reserved[4];
} dbarrier_t;

#define DBARRIER__MAGIC_STATIC 0x64626172UL /* "dbar" */

/* Static initializer: default client; the first use binds it, thread-safely.
 * `name` must have static storage duration (normally a literal). */
#define DBARRIER_INITIALIZER(name, count) \
	{ DBARRIER__MAGIC_STATIC, (name), 0, (count), { 0, 0, 0, 0 } }

/*
 * Open barrier `name` for `count` waiters in all, through `client` (NULL:
 * the default one), creating it if it does not exist.  0; EINVAL (NULL b,
 * bad name, count 0 or above INT_MAX, or the barrier exists with another
 * count: logged with both counts); ENOTSUP (client over several masters);
 * EIO; ENOMEM; errors of opening the default client.
 */
DMUTEX_EXPORT int dbarrier_init(dbarrier_t *b, const char *name, unsigned count,
		dmutex_client_t *client);
/* Forget the local object; the barrier stays in the backend.  0; EINVAL
 * (NULL, uninitialized, destroyed); EBUSY (a thread of this process waits
 * on it). */
DMUTEX_EXPORT int dbarrier_destroy(dbarrier_t *b);
/*
 * Arrive and wait until count waiters have arrived in this cycle.
 * DBARRIER_SERIAL_THREAD for the one waiter whose arrival completed the
 * cycle, 0 for the others; EINVAL (NULL, uninitialized, destroyed); EIO
 * (the backend failed a few tries with the same request id, or the
 * client's retry_window_ms passed since a try went unanswered: whether
 * this arrival counted is unknown; it never counted twice); ENOMEM.  Not
 * a cancellation point; no EINTR.
 */
DMUTEX_EXPORT int dbarrier_wait(dbarrier_t *b);


/* ---- read-write locks ---------------------------------------------------
 *
 * A drwlock_t mirrors pthread_rwlock_t across processes and hosts: readers
 * share it, a writer holds it alone.  Two drwlock_t with the same name on
 * the same backend are one lock (a mutex of the same name is another lock).
 * Threads of one process that read at the same time hold ONE share in the
 * backend between them, counted locally; only the first reader and the last
 * unlock of such a group talk to the backend.
 *
 * Writers are preferred: while a writer waits, no new share is given to a
 * process, and a process that holds one stops letting more of its threads
 * join it once it learns a writer waits (at the latest at its share's next
 * renewal, a third of its lease), so that overlapping readers cannot starve
 * a writer.  A thread that already reads may read again (recursively) even
 * while writers wait, as POSIX asks.  Shares and the write lock have leases
 * renewed by the client's renewal thread like a mutex's; a process that dies
 * holding one blocks the others until that lease ends.  A writer gets a
 * fencing token (drwlock_fence).  One Redis master only: a client over
 * several masters (Redlock) gets ENOTSUP.
 *
 * Attributes are a dmutex_attr_t: its lease, client and onlost handler
 * apply; its type and robustness must stay the defaults (EINVAL otherwise:
 * a rwlock is never recursive for writers, and has no owner-died state).
 */

/* Fixed-size, caller-allocated.  Fields are private. */
typedef struct drwlock {
	/* private */
	unsigned long __magic;
	const char *__static_name;  /* set by DRWLOCK_INITIALIZER only */
	void *__impl;               /* bound lazily for static ones */
	void *__reserved[5];
} drwlock_t;

#define DRWLOCK__MAGIC_STATIC 0x6472776cUL /* "drwl" */

/* Static initializer: default attributes, default client; the first use
 * binds it, thread-safely.  `name` must have static storage duration. */
#define DRWLOCK_INITIALIZER(name) \
	{ DRWLOCK__MAGIC_STATIC, (name), 0, { 0, 0, 0, 0, 0 } }

/*
 * 0; EINVAL (NULL rw, bad name, bad attr, a non-default type or
 * robustness); ENOTSUP (client over several masters); EIO/EINVAL/ENOTSUP
 * from opening the default client when attr names none; ENOMEM.
 */
DMUTEX_EXPORT int drwlock_init(drwlock_t *rw, const char *name, const dmutex_attr_t *attr);
/* 0; EINVAL (NULL, uninitialized, destroyed); EBUSY (held or waited for by
 * a thread of this process). */
DMUTEX_EXPORT int drwlock_destroy(drwlock_t *rw);
/*
 * Take a read share.  0; EDEADLK (the caller holds the write lock);
 * EAGAIN (the caller's read count would pass INT_MAX); ENOLCK (the caller
 * reads already and the process's share is known lost; nothing changes);
 * EINVAL (NULL, uninitialized, destroyed); EIO (backend failed for
 * command_timeout_ms x 3, no share taken); ENOMEM.
 */
DMUTEX_EXPORT int drwlock_rdlock(drwlock_t *rw);
/* As drwlock_rdlock without waiting: EBUSY while a writer holds it or
 * waits for it (unless the caller reads already); EIO after one attempt. */
DMUTEX_EXPORT int drwlock_tryrdlock(drwlock_t *rw);
/* As drwlock_rdlock, plus ETIMEDOUT at the CLOCK_REALTIME deadline (by it,
 * as dmutex_timedlock); EINVAL for a NULL deadline or a bad tv_nsec only
 * when it would wait. */
DMUTEX_EXPORT int drwlock_timedrdlock(drwlock_t *rw, const struct timespec *abs_realtime);
/* As drwlock_timedrdlock on CLOCK_REALTIME or CLOCK_MONOTONIC (else EINVAL). */
DMUTEX_EXPORT int drwlock_clockrdlock(drwlock_t *rw, clockid_t clock,
		const struct timespec *abstime);
/*
 * Take the write lock.  0; EDEADLK (the caller holds it already, or reads:
 * no upgrade); EINVAL; EIO (as drwlock_rdlock); ENOMEM.
 */
DMUTEX_EXPORT int drwlock_wrlock(drwlock_t *rw);
/* As drwlock_wrlock without waiting: EBUSY when held by anyone, the caller
 * included (as glibc's pthread_rwlock_trywrlock); EIO after one attempt. */
DMUTEX_EXPORT int drwlock_trywrlock(drwlock_t *rw);
/* As drwlock_wrlock, plus ETIMEDOUT; EINVAL for a NULL deadline or a bad
 * tv_nsec only when it would wait. */
DMUTEX_EXPORT int drwlock_timedwrlock(drwlock_t *rw, const struct timespec *abs_realtime);
/* As drwlock_timedwrlock on CLOCK_REALTIME or CLOCK_MONOTONIC (else EINVAL). */
DMUTEX_EXPORT int drwlock_clockwrlock(drwlock_t *rw, clockid_t clock,
		const struct timespec *abstime);
/*
 * Give up the caller's write lock, or one level of its read share.
 * 0; EPERM (the caller neither reads nor writes it); ENOLCK (the hold was
 * lost: the caller's count is forgotten); EIO (release not confirmed: the
 * hold is forgotten locally and ends in the backend with its lease at the
 * latest); EINVAL.
 */
DMUTEX_EXPORT int drwlock_unlock(drwlock_t *rw);
/* The writer's fencing token: strictly greater than every earlier writer's
 * of the same name on the same backend.  0 and *token; EPERM (the caller
 * does not hold the write lock: readers have none); ENOLCK (the hold was
 * lost); EINVAL. */
DMUTEX_EXPORT int drwlock_fence(drwlock_t *rw, uint64_t *token);

#ifdef __cplusplus
}
#endif

#endif /* DMUTEX_H */
