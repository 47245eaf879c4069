/*
 * Cancellation (PLAN design 3, issue 12 item 1).  Every public call runs
 * with cancellation disabled, so that a thread cancelled anywhere inside
 * (a local wait, Redis I/O, a log line's write) never unwinds holding an
 * internal mutex or half-way through a table update: a pending request
 * waits for the next cancellation point outside the library.  The only
 * cancellation points the library keeps are the ones POSIX names among
 * its calls: the condition waits (cond_wait.c re-enables the caller's
 * state around its sleep, with a cleanup handler).  Asynchronous
 * cancellation is not supported (README).
 */
#include <pthread.h>

#include "base.h"

int
dmutex__nocancel(void)
{
	int cs;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
	return cs;
}

void
dmutex__cancel_restore(int cs)
{
	pthread_setcancelstate(cs, NULL);
}
