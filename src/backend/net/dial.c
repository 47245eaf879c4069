#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "dial.h"
#include "base/base.h"
#include "base/log.h"

/*
 * Every dial thread is joined, never detached.  A thread is not gone when
 * its function returns: its thread-specific destructors run after, and
 * OpenSSL frees the thread's error queue and random generators there.  A
 * detached dial thread could still be on that path when the process
 * exited; OPENSSL_cleanup (an atexit handler) deletes OpenSSL's keys, glibc
 * then drops the thread's values without calling their destructor, and
 * LeakSanitizer reported ~10 KB leaked in libcrypto (the CLI over TLS).
 * So the caller joins the thread it waited for, and a thread it gave up on
 * is kept on a list and joined later: by the next dial, or at exit before
 * OpenSSL's cleanup (dmutex__dial_reap_at_exit).
 */
struct dial {
	pthread_mutex_t mu;
	pthread_cond_t cv;              /* CLOCK_MONOTONIC */
	int done, abandoned;
	int detached;                   /* given up on after the exit's reap: the
	                                 * thread frees d itself, nobody joins it */
	int dropped;                    /* atomic: drop(arg) ran, the thread is leaving */
	void (*fn)(void *);
	void (*drop)(void *);
	void *arg;
	pthread_t thread;
	pid_t pid;                      /* a fork child joins none of its parent's */
	struct dial *next;              /* on the abandoned list */
};

/* Threads given up on, not yet joined: pushed and taken whole with atomic
 * operations, so that whoever takes an entry owns it (no lock to order or
 * to find held in a fork child). */
static struct dial *abandoned;
/* The exit's reap has run (atomic): a thread given up on after it (another
 * thread of ours still dialling while the process exits) would never be
 * joined, so it is detached instead. */
static int exiting;

static void
dial_free(struct dial *d)
{
	pthread_cond_destroy(&d->cv);
	pthread_mutex_destroy(&d->mu);
	free(d);
}

static void
push_abandoned(struct dial *d)
{
	d->next = __atomic_load_n(&abandoned, __ATOMIC_ACQUIRE);
	while (!__atomic_compare_exchange_n(&abandoned, &d->next, d, 0, __ATOMIC_ACQ_REL,
			__ATOMIC_ACQUIRE))
		;
}

/* Join the abandoned threads that have finished their work; with wait,
 * wait for the others until deadline (CLOCK_MONOTONIC ns). */
static void
reap(int wait, int64_t deadline)
{
	struct dial *d = __atomic_exchange_n(&abandoned, NULL, __ATOMIC_ACQ_REL), *next;
	pid_t me = getpid();

	for (; d; d = next) {
		next = d->next;
		/* Polled, not pthread_clockjoin_np: the sanitizers know a
		 * thread is joined only through the calls they intercept. */
		while (wait && d->pid == me && !__atomic_load_n(&d->dropped, __ATOMIC_ACQUIRE) &&
				dmutex__now_ns() < deadline) {
			struct timespec ms = { 0, 1000000 };
			nanosleep(&ms, NULL);
		}
		/* Its work is done: what is left (its destructors) is short. */
		if (d->pid == me && __atomic_load_n(&d->dropped, __ATOMIC_ACQUIRE)) {
			pthread_join(d->thread, NULL);
			dial_free(d);
		} else {
			/* Still working (a hung DNS lookup), or a thread of our
			 * parent, which does not exist here: kept, reachable. */
			push_abandoned(d);
		}
	}
}

/* Bound of the wait at exit for threads still working: they stop at their
 * own deadline, which has passed (they were given up on at it). */
#define EXIT_WAIT_MS 2000

static void
reap_at_exit(void)
{
	__atomic_store_n(&exiting, 1, __ATOMIC_RELEASE);
	reap(1, dmutex__now_ns() + (int64_t)EXIT_WAIT_MS * DMUTEX__MS);
}

static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static void
register_exit(void)
{
	/* Nothing to do if it fails: threads then end as before, unjoined. */
	if (atexit(reap_at_exit))
		dmutex__log(DMUTEX_LOG_WARN, "cannot register the dial threads' exit handler");
}

void
dmutex__dial_reap_at_exit(void)
{
	pthread_once(&exit_once, register_exit);
}

static void *
dial_main(void *p)
{
	struct dial *d = p;
	int abandoned, detached;

	dmutex__own_thread_begin();
	d->fn(d->arg);
	dmutex__own_thread_end();
	pthread_mutex_lock(&d->mu);
	d->done = 1;
	abandoned = d->abandoned;
	detached = d->detached;
	pthread_cond_signal(&d->cv);
	pthread_mutex_unlock(&d->mu);
	/* Not abandoned: the caller owns d from here on, and joins us. */
	if (abandoned) {
		d->drop(d->arg);
		if (detached)
			dial_free(d);
		else
			__atomic_store_n(&d->dropped, 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

/* Whether a dialer's stack could be mapped now. */
static int
stack_maps(void)
{
	void *p = mmap(NULL, DMUTEX__DIAL_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return 0;
	munmap(p, DMUTEX__DIAL_STACK);
	return 1;
}

int
dmutex__dial_run(void (*fn)(void *), void (*drop)(void *), void *arg, int64_t deadline)
{
	struct dial *d;
	pthread_attr_t at;
	sigset_t all, old;
	int err;

	/* Threads given up on earlier and finished since: joined now, so
	 * that they do not pile up (each keeps its stack until joined). */
	if (__atomic_load_n(&abandoned, __ATOMIC_ACQUIRE))
		reap(0, 0);
	if (!(d = calloc(1, sizeof *d)))
		return ENOMEM;
	d->fn = fn;
	d->drop = drop;
	d->arg = arg;
	d->pid = getpid();
	pthread_mutex_init(&d->mu, NULL);
	dmutex__cond_init_mono(&d->cv);

	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, DMUTEX__DIAL_STACK);
	/* Library threads take no signals meant for the application. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&d->thread, &at, dial_main, d);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&at);
	if (err) {
		dial_free(d);
		/* pthread_create says EAGAIN for a stack it could not map
		 * (RLIMIT_AS, memory full) as for a thread limit: which one
		 * matters to the caller (pthread_mutex_init's ENOMEM). */
		if (err == EAGAIN && !stack_maps())
			err = ENOMEM;
		dmutex__short_note(err);
		return err;
	}

	pthread_mutex_lock(&d->mu);
	while (!d->done) {
		struct timespec ts = { (time_t)(deadline / 1000000000), (long)(deadline % 1000000000) };
		/* A timeout counts only when our own clock agrees: a wrapped
		 * pthread_cond_* (libfaketime) may wake us early. */
		if (pthread_cond_clockwait(&d->cv, &d->mu, CLOCK_MONOTONIC, &ts) == ETIMEDOUT &&
				!d->done && dmutex__now_ns() >= deadline) {
			pthread_t th = d->thread;
			int detach = __atomic_load_n(&exiting, __ATOMIC_ACQUIRE) && d->pid == getpid();

			d->abandoned = 1;
			d->detached = detach;
			pthread_mutex_unlock(&d->mu);
			/* d may be freed by its thread from here on if detached. */
			if (detach)
				pthread_detach(th);
			else
				push_abandoned(d);
			return ETIMEDOUT;
		}
	}
	pthread_mutex_unlock(&d->mu);
	/* Until its destructors have run: they free what OpenSSL keeps per
	 * thread, and the process may exit as soon as we return. */
	pthread_join(d->thread, NULL);
	dial_free(d);
	return 0;
}
