/*
 * The lock hierarchy, checkable.  A thread takes internal mutexes only in
 * increasing level (equal levels: several locks of one kind, e.g. every
 * node of every client in fork's prepare handler).  Builds without NDEBUG
 * record each thread's held levels and abort, naming both locks, on a
 * violation; release builds compile the checks away.
 *
 * Wrapped: default_mu, clients_mu, fold_mu, client.mu, renewer.mu and log_mu
 * everywhere; entry.mu in the core's files (mutex_*.c, cond_wait.c,
 * renewer.c, client.c); waiter.mu, create_mu and node.mu where fork's
 * prepare handler takes them (their own files are the backend's).  log_mu is a leaf: nothing
 * is taken while it is held, so the prepare handler takes it last — the
 * order a reconnecting thread (node.mu, then a log line) also uses.
 */
#ifndef DMUTEX_LOCKORDER_H
#define DMUTEX_LOCKORDER_H

#include <pthread.h>

enum dmutex__lock_level {
	DMUTEX__LK_DEFAULT = 1,   /* client.c default_mu: opening the default client */
	DMUTEX__LK_CREATE,        /* waiter.c create_mu */
	DMUTEX__LK_CLIENTS,       /* client.c clients_mu: the list of clients */
	DMUTEX__LK_METFOLD,       /* metrics.c fold_mu: folding entries' counts */
	DMUTEX__LK_ENTRY,         /* entry.mu: one lock name's local state */
	DMUTEX__LK_CLIENT,        /* client.mu: the hold table */
	DMUTEX__LK_RENEWER,       /* renewer.mu */
	DMUTEX__LK_WAITER,        /* waiter.mu */
	DMUTEX__LK_NODE,          /* node.mu: a server's idle connections */
	DMUTEX__LK_LOG,           /* log.c log_mu: a leaf */
	DMUTEX__LK_NLEVELS
};

#ifndef NDEBUG
/* A thread's held locks: how many of each level, and the levels with any
 * as bits, so that a check is one shift. */
struct dmutex__lo {
	unsigned mask;
	unsigned short n[DMUTEX__LK_NLEVELS];
};
/* This thread's.  Thread-local in a shared library: a call into the
 * dynamic linker, so a fast path fetches it once (DMUTEX__LO_SELF). */
struct dmutex__lo *dmutex__lo_self(void);
/* Abort, naming both locks / the lock released but not held. */
_Noreturn void dmutex__lo_violated(int level, const char *what, unsigned mask);
_Noreturn void dmutex__lo_unheld(int level);

/* Call right after taking / right before dropping a lock of that level. */
static inline void
dmutex__lo_acquired_by(struct dmutex__lo *lo, int level, const char *what)
{
	if (lo->mask >> (level + 1))
		dmutex__lo_violated(level, what, lo->mask);
	lo->n[level]++;
	lo->mask |= 1u << level;
}

static inline void
dmutex__lo_released_by(struct dmutex__lo *lo, int level)
{
	if (!lo->n[level])
		dmutex__lo_unheld(level);
	if (!--lo->n[level])
		lo->mask &= ~(1u << level);
}

#define dmutex__lo_acquired(level, what) dmutex__lo_acquired_by(dmutex__lo_self(), level, what)
#define dmutex__lo_released(level) dmutex__lo_released_by(dmutex__lo_self(), level)
/* A fast path that takes and drops locks: DMUTEX__LO_SELF(lo) once, then
 * dmutex__mu_lock_by(lo, ...) / dmutex__mu_unlock_by(lo, ...). */
#define DMUTEX__LO_SELF(lo) struct dmutex__lo *lo = dmutex__lo_self()
#define dmutex__mu_lock_by(lo, mu, level, what) \
	(pthread_mutex_lock(mu), dmutex__lo_acquired_by(lo, level, what))
#define dmutex__mu_unlock_by(lo, mu, level) \
	(dmutex__lo_released_by(lo, level), pthread_mutex_unlock(mu))
#else
#define dmutex__lo_acquired(level, what) ((void)(level), (void)(what))
#define dmutex__lo_released(level) ((void)(level))
#define DMUTEX__LO_SELF(lo) enum { lo }
#define dmutex__mu_lock_by(lo, mu, level, what) ((void)(lo), dmutex__mu_lock(mu, level, what))
#define dmutex__mu_unlock_by(lo, mu, level) ((void)(lo), dmutex__mu_unlock(mu, level))
#endif

/* pthread_mutex_lock/unlock with the check. */
#define dmutex__mu_lock(mu, level, what) \
	(pthread_mutex_lock(mu), dmutex__lo_acquired(level, what))
#define dmutex__mu_unlock(mu, level) \
	(dmutex__lo_released(level), pthread_mutex_unlock(mu))

#endif
