#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include "dial.h"
#include "base.h"
#include "log.h"

struct dial {
	pthread_mutex_t mu;
	pthread_cond_t cv;              /* CLOCK_MONOTONIC */
	int done, abandoned;
	void (*fn)(void *);
	void (*drop)(void *);
	void *arg;
};

static void
dial_free(struct dial *d)
{
	pthread_cond_destroy(&d->cv);
	pthread_mutex_destroy(&d->mu);
	free(d);
}

static void *
dial_main(void *p)
{
	struct dial *d = p;
	int abandoned;

	d->fn(d->arg);
	pthread_mutex_lock(&d->mu);
	d->done = 1;
	abandoned = d->abandoned;
	pthread_cond_signal(&d->cv);
	pthread_mutex_unlock(&d->mu);
	/* Not abandoned: the caller owns d from here on. */
	if (abandoned) {
		d->drop(d->arg);
		dial_free(d);
	}
	return NULL;
}

int
dmutex__dial_run(void (*fn)(void *), void (*drop)(void *), void *arg, int64_t deadline)
{
	struct dial *d = calloc(1, sizeof *d);
	pthread_condattr_t ca;
	pthread_attr_t at;
	pthread_t t;
	sigset_t all, old;
	int err;

	if (!d)
		return ENOMEM;
	d->fn = fn;
	d->drop = drop;
	d->arg = arg;
	pthread_mutex_init(&d->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->cv, &ca);
	pthread_condattr_destroy(&ca);

	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, DMUTEX__DIAL_STACK);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	/* Library threads take no signals meant for the application. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&t, &at, dial_main, d);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&at);
	if (err) {
		dial_free(d);
		return err;
	}

	pthread_mutex_lock(&d->mu);
	while (!d->done) {
		struct timespec ts = { (time_t)(deadline / 1000000000), (long)(deadline % 1000000000) };
		/* A timeout counts only when our own clock agrees: a wrapped
		 * pthread_cond_* (libfaketime) may wake us early. */
		if (pthread_cond_clockwait(&d->cv, &d->mu, CLOCK_MONOTONIC, &ts) == ETIMEDOUT &&
				!d->done && dmutex__now_ns() >= deadline) {
			d->abandoned = 1;
			pthread_mutex_unlock(&d->mu);
			return ETIMEDOUT;
		}
	}
	pthread_mutex_unlock(&d->mu);
	dial_free(d);
	return 0;
}
