/*
 * The program's signal handlers, run through a trampoline of the shim's
 * (sigwrap.c): what a semaphore call needs to know of them.
 */
#ifndef DMUTEX_SHIM_SIGWRAP_H
#define DMUTEX_SHIM_SIGWRAP_H

#include "dmutex.h"

/* Whether the calling thread is inside a handler of the program's. */
int dmutex__shim_in_handler(void);
/* sem_post from a handler: handed to a thread of ours through a pipe,
 * which calls post(s) (semaphore.c's, passed down so that the files do not
 * call each other).  0, or EAGAIN (no such thread, or the pipe full). */
int dmutex__shim_post_deferred(dsem_t *s, int (*post)(dsem_t *));
/* At the start of a semaphore wait: handlers that ran before it do not
 * interrupt it. */
void dmutex__shim_wait_begin(void);
/* Outside a handler, before a semaphore call: wait until every post handed
 * over by handlers so far has been made (the calling thread's own handler
 * returned before it, so the call must see its post). */
void dmutex__shim_posts_settle(void);
int dmutex__shim_interrupted(void);

#endif
