/* Which processes use a semaphore or robust mutex of the shim's (users.c):
 * the state a previous run left is not this run's. */
#ifndef DMUTEX_SHIM_USERS_H
#define DMUTEX_SHIM_USERS_H

#include "dmutex.h"

/*
 * The calling process uses the object `name` until it leaves (or exits).
 * The first process to join when none uses it calls fresh(name) first,
 * which drops what earlier processes left (0, or its errno); the last to
 * leave calls last(name) likewise.  Joined once per process: a process
 * joining again counts up, and leaves when it has left as often.  0;
 * EIO (the backend: ask again), ENOMEM, EAGAIN (no thread of ours), or
 * fresh's error.  A client over several masters has no read-write locks:
 * 0, and no run is told from the next.
 */
int dmutex__shim_users_join(const char *name, int (*fresh)(const char *name),
		int (*last)(const char *name));
void dmutex__shim_users_leave(const char *name);
/* In a forked child, before its first use of what its parent joined: the
 * child's own shares of them (never afresh). */
void dmutex__shim_users_adopt(void);

#endif
