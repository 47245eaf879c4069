/*
 * hiredis writes with write(2), so a write on a connection the server has
 * reset raises SIGPIPE, whose default action kills the whole program.  The
 * library's own threads block every signal; calls made on an application
 * thread block SIGPIPE for the duration of the I/O and discard one that was
 * raised meanwhile, leaving the application's disposition alone.
 */
#include <signal.h>
#include <time.h>

#include "internal.h"

void
dmutex__sigpipe_block(struct dmutex__sigpipe *s)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, &s->old);
	s->was_blocked = sigismember(&s->old, SIGPIPE);
}

void
dmutex__sigpipe_restore(struct dmutex__sigpipe *s)
{
	sigset_t set, pending;
	struct timespec zero = { 0, 0 };

	if (s->was_blocked)
		return;
	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	if (!sigpending(&pending) && sigismember(&pending, SIGPIPE))
		sigtimedwait(&set, NULL, &zero);
	pthread_sigmask(SIG_SETMASK, &s->old, NULL);
}
