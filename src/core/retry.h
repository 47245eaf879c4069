/*
 * An operation of a semaphore or barrier asked again after a lost reply
 * (struct dmutex__op, src/backend/backend.h): the same token on every try,
 * for no longer than the client's retry_window_ms since the first try
 * that may have been applied went unanswered.  Past that the server may
 * have forgotten the result, so a retry could be applied twice: the caller
 * is told EIO, "whether it was applied is unknown", instead.  Implemented
 * in retry.c.
 */
#ifndef DMUTEX_RETRY_H
#define DMUTEX_RETRY_H

#include "backend/backend.h"

/* A new token; the window is set by the first try (0 here). 0 or EIO. */
int dmutex__op_init(struct dmutex__op *o);

/* Reads the server's time (ms) for the object of arg: 0 or EIO. */
typedef int dmutex__op_clock(void *arg, long long *ms);

/*
 * Before a try (what, kind, name: "post", "semaphore", its name, for the
 * log line).  After a lost try this reads the server's time once, to set
 * the deadline the retries carry.  0: go on; EIO: not now (the time not
 * read), or given up (o->expired, logged).
 */
int dmutex__op_begin(struct dmutex__op *o, unsigned window_ms, dmutex__op_clock *clock,
		void *arg, const char *what, const char *kind, const char *name);
/* After the try: err is the backend's (0 or EIO), refused whether the
 * server refused a retry past its deadline.  Returns what the caller
 * returns: err, or EIO given up (logged). */
int dmutex__op_end(struct dmutex__op *o, int err, int refused, const char *what,
		const char *kind, const char *name);

#endif
