/* Fair locks' script arguments (README "Fair locks"): the usual lock and
 * release arguments plus the name's queue and places. */
#ifndef DMUTEX_BACKEND_FAIR_H
#define DMUTEX_BACKEND_FAIR_H

#include "common.h"

#define DMUTEX__FAIR_ACQ_NKEYS 5
/* 5 keys (the fifth the caller's grant list); token, lease, host, pid, tid, since, hostid, robust, keep, wait,
 * stamp, fresh (fair_acquire.lua: a fair lock keeps the version-2 hash) */
#define DMUTEX__FAIR_ACQ_ARGC 17
#define DMUTEX__FAIR_REL_NKEYS 4
#define DMUTEX__FAIR_REL_ARGC (DMUTEX__REL_ARGC + 9)

struct dmutex__fair_acq_argv {
	char lk[DMUTEX__KEY_MAX], mk[DMUTEX__KEY_MAX], qk[DMUTEX__KEY_MAX], pk[DMUTEX__KEY_MAX];
	char gk[DMUTEX__CHANNEL_MAX];
	char lease[24], pid[24], tid[24], since[24], keep[24], stamp[24]; /* dmutex__udec: 21 bytes at most */
	const char *argv[DMUTEX__FAIR_ACQ_ARGC];
};

struct dmutex__fair_rel_argv {
	struct dmutex__rel_argv base;
	char qk[DMUTEX__KEY_MAX], pk[DMUTEX__KEY_MAX], lease[16];
	char nlease[16], npid[24], ntid[24];       /* the next thread's hold */
	const char *argv[DMUTEX__FAIR_REL_ARGC];
};

/* A fair waiter's grant list: the wake channel, ':', its token (the list
 * fair_release.lua pushes a hand-over to, fair_acquire.lua's KEYS[5]).
 * out has DMUTEX__CHANNEL_MAX bytes. */
void dmutex__fair_grant_key(struct dmutex__backend *be, const char *name, const char *token, char *out);
void dmutex__fair_acq_argv(struct dmutex__backend *be, const struct dmutex__acq *a,
		struct dmutex__fair_acq_argv *x);
/* mode without DMUTEX__REL_FAIR; next: the thread to hand the lock to, or
 * NULL. */
void dmutex__fair_rel_argv(struct dmutex__backend *be, const char *name, const char *token,
		int mode, const struct dmutex__handoff *next, struct dmutex__fair_rel_argv *x);

#endif
