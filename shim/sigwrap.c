/*
 * Signal handlers of a program built through the shim (semaphore.h maps
 * sigaction and signal here).  POSIX lets a handler call sem_post, and
 * makes sem_wait return EINTR when a handler interrupted it; a distributed
 * semaphore talks to the network, takes locks and allocates, none of which
 * a handler may do.  So each handler the program installs runs inside a
 * trampoline of ours that counts, per thread, that a handler runs and has
 * run:
 *  - a sem_post inside a handler writes the semaphore's address to a pipe
 *    (write(2) is async-signal-safe) and returns 0; a thread of ours reads
 *    it and posts, as the handler's thread would have;
 *  - a semaphore wait looks, while it sleeps, whether a handler has run on
 *    its thread since it began (a tick of SIGNAL_TICK_MS): then EINTR;
 *  - a semaphore call outside a handler first waits until every post a
 *    handler had handed over when the call began has been made: the
 *    handler returned after its sem_post, so what its thread does next
 *    must see the post, as it would natively (LTP sem_post 6-1 read the
 *    value right after the handler and found it not yet posted).
 * Dispositions SIG_DFL and SIG_IGN are set as given.  What sigaction and
 * signal return as the old action is the program's own, never ours.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/shim.h"
#include "include/dmutex_shim_sem.h"
#include "sigwrap.h"

static struct sigaction user[NSIG];     /* the program's action, per signal */
static _Thread_local volatile sig_atomic_t in_handler;
static _Thread_local volatile unsigned handled;
static _Thread_local unsigned wait_mark;

static pthread_once_t poster_once = PTHREAD_ONCE_INIT;
static int poster_pipe[2] = { -1, -1 };
static int (*poster_post)(dsem_t *);    /* atomic; sem_post's own, given by it */
static _Thread_local int is_poster;

/* Deferred posts handed over and made (or failed to be handed over):
 * atomic, counted up only, so a call compares the two.  A handler counts
 * its post before it writes it, so that no call can see it made before it
 * is counted as handed over. */
static unsigned long handed, settled;
static pthread_mutex_t settled_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t settled_cv = PTHREAD_COND_INITIALIZER;

static void
trampoline(int sig, siginfo_t *si, void *ctx)
{
	struct sigaction *a = &user[sig];

	in_handler++;
	handled++;
	if (a->sa_flags & SA_SIGINFO)
		a->sa_sigaction(sig, si, ctx);
	else if (a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN)
		a->sa_handler(sig);
	in_handler--;
}

/* The deferred posts: one at a time, in the order the handlers wrote them. */
static void *
poster_main(void *arg)
{
	dsem_t *s;

	(void)arg;
	is_poster = 1;
	dmutex__shim_own_thread();
	for (;;) {
		struct pollfd pf = { poster_pipe[0], POLLIN, 0 };
		ssize_t n;

		/* Never for ever: the program may have ended under us. */
		if (poll(&pf, 1, 1000) <= 0) {
			dmutex__shim_exit_if_alone();
			continue;
		}
		n = read(poster_pipe[0], &s, sizeof s);
		if (n == (ssize_t)sizeof s) {
			__atomic_load_n(&poster_post, __ATOMIC_ACQUIRE)(s);
			pthread_mutex_lock(&settled_mu);
			__atomic_fetch_add(&settled, 1, __ATOMIC_ACQ_REL);
			pthread_cond_broadcast(&settled_cv);
			pthread_mutex_unlock(&settled_mu);
		} else if (n < 0 && errno != EINTR) {
			return NULL;
		}
	}
}

static void
poster_thread(void)
{
	sigset_t all, old;
	pthread_t t;

	/* Ours: no signal of the program's is delivered here. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (pthread_create(&t, NULL, poster_main, NULL)) {
		close(poster_pipe[0]);
		close(poster_pipe[1]);
		poster_pipe[0] = poster_pipe[1] = -1;
	} else {
		pthread_detach(t);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/*
 * A forked child has no poster: the parent's would read the child's posts
 * from the pipe they share and count them made in the parent, and the
 * child's semaphore calls would wait for them for ever.  The child gets a
 * pipe of its own at once (a handler may write to it), and its poster
 * thread at its next semaphore call outside a handler; posts the parent
 * had not made are the parent's.
 */
static int poster_wanted;       /* atomic: the child's poster is to start */

static void
poster_child(void)
{
	if (poster_pipe[0] < 0)
		return;
	close(poster_pipe[0]);
	close(poster_pipe[1]);
	poster_pipe[0] = poster_pipe[1] = -1;
	pthread_mutex_init(&settled_mu, NULL);
	pthread_cond_init(&settled_cv, NULL);
	__atomic_store_n(&settled, __atomic_load_n(&handed, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
	if (!pipe2(poster_pipe, O_CLOEXEC))
		__atomic_store_n(&poster_wanted, 1, __ATOMIC_RELEASE);
}

static void
poster_start(void)
{
	if (pipe2(poster_pipe, O_CLOEXEC))
		return;
	pthread_atfork(NULL, NULL, poster_child);
	poster_thread();
}

int
dmutex__shim_in_handler(void)
{
	return in_handler > 0;
}

int
dmutex__shim_post_deferred(dsem_t *s, int (*post)(dsem_t *))
{
	int fd = poster_pipe[1];

	__atomic_store_n(&poster_post, post, __ATOMIC_RELEASE);
	__atomic_fetch_add(&handed, 1, __ATOMIC_ACQ_REL);

	/* A pointer is less than PIPE_BUF: written whole or not at all.  One
	 * not written is settled at once (lock-free atomics only, here). */
	if (fd < 0 || write(fd, &s, sizeof s) != (ssize_t)sizeof s) {
		__atomic_fetch_add(&settled, 1, __ATOMIC_ACQ_REL);
		return EAGAIN;
	}
	return 0;
}

void
dmutex__shim_posts_settle(void)
{
	unsigned long want = __atomic_load_n(&handed, __ATOMIC_ACQUIRE);
	struct timespec at;
	int cs;

	/* The poster itself must not wait for its own posts; a handler may
	 * not wait at all. */
	if (is_poster || in_handler)
		return;
	if (__atomic_exchange_n(&poster_wanted, 0, __ATOMIC_ACQ_REL))
		poster_thread();
	if ((long)(__atomic_load_n(&settled, __ATOMIC_ACQUIRE) - want) >= 0)
		return;
	/* Not a cancellation point: cancelled in the wait below, the thread
	 * would leave settled_mu locked for every later semaphore call. */
	cs = dmutex__nocancel();
	pthread_mutex_lock(&settled_mu);
	/* A post settled by a failed write is not broadcast (a handler may
	 * not signal): look again every 10 ms. */
	while ((long)(__atomic_load_n(&settled, __ATOMIC_ACQUIRE) - want) < 0) {
		clock_gettime(CLOCK_REALTIME, &at);
		at.tv_nsec += 10 * 1000 * 1000;
		if (at.tv_nsec >= 1000000000) {
			at.tv_sec++;
			at.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&settled_cv, &settled_mu, &at);
	}
	pthread_mutex_unlock(&settled_mu);
	dmutex__cancel_restore(cs);
}

void
dmutex__shim_wait_begin(void)
{
	wait_mark = handled;
}

int
dmutex__shim_interrupted(void)
{
	return handled != wait_mark;
}

/* The program's old action from what the kernel had: ours means its own. */
static void
old_action(int sig, const struct sigaction *had, const struct sigaction *mine, struct sigaction *old)
{
	if (!old)
		return;
	if ((had->sa_flags & SA_SIGINFO) && had->sa_sigaction == trampoline)
		*old = *mine;
	else
		*old = *had;
	(void)sig;
}

int
dmutex_shim_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	struct sigaction had, mine, wrapped;

	if (sig <= 0 || sig >= NSIG || !act || act->sa_handler == SIG_DFL || act->sa_handler == SIG_IGN ||
			sig == SIGKILL || sig == SIGSTOP) {
		mine = sig > 0 && sig < NSIG ? user[sig] : (struct sigaction){ 0 };
		if (sigaction(sig, act, &had))
			return -1;
		if (act && sig > 0 && sig < NSIG)
			user[sig] = *act;
		old_action(sig, &had, &mine, old);
		return 0;
	}
	pthread_once(&poster_once, poster_start);
	dmutex__shim_set_interrupted(dmutex__shim_interrupted);
	mine = user[sig];
	user[sig] = *act;
	wrapped = *act;
	wrapped.sa_flags |= SA_SIGINFO;
	wrapped.sa_sigaction = trampoline;
	if (sigaction(sig, &wrapped, &had)) {
		user[sig] = mine;
		return -1;
	}
	old_action(sig, &had, &mine, old);
	return 0;
}

sighandler_t
dmutex_shim_signal(int sig, sighandler_t handler)
{
	struct sigaction a, old;

	/* glibc's signal(): BSD semantics, restarting, the signal blocked
	 * while its handler runs. */
	memset(&a, 0, sizeof a);
	a.sa_handler = handler;
	a.sa_flags = SA_RESTART;
	sigemptyset(&a.sa_mask);
	if (dmutex_shim_sigaction(sig, &a, &old))
		return SIG_ERR;
	return (old.sa_flags & SA_SIGINFO) ? (sighandler_t)(void (*)(void))old.sa_sigaction : old.sa_handler;
}
