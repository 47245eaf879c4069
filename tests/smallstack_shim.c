/*
 * A plain pthread program built through the shim (tests/meson.build), run
 * by tests/test_smallstack.c: its mutex and condition calls, the first of
 * which opens the default client, made from a thread with a
 * PTHREAD_STACK_MIN stack.  Exit status: 0, or the step that failed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Sanitizers put redzones around every frame (see test_smallstack.c). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STACK (256 * 1024)
#else
#define STACK PTHREAD_STACK_MIN
#endif

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static void *
body(void *arg)
{
	struct timespec ts;

	(void)arg;
	if (pthread_mutex_lock(&mu))
		return (void *)1;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 50 * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	if (pthread_cond_timedwait(&cv, &mu, &ts) != ETIMEDOUT)
		return (void *)2;
	if (pthread_cond_signal(&cv) || pthread_cond_broadcast(&cv))
		return (void *)3;
	if (pthread_mutex_unlock(&mu))
		return (void *)4;
	if (pthread_mutex_trylock(&mu))
		return (void *)5;
	if (pthread_mutex_unlock(&mu))
		return (void *)6;
	return NULL;
}

int
main(void)
{
	pthread_attr_t at;
	pthread_t t;
	void *rv;

	if (pthread_attr_init(&at) || pthread_attr_setstacksize(&at, STACK))
		return 10;
	if (pthread_create(&t, &at, body, NULL) || pthread_join(t, &rv))
		return 11;
	return (int)(intptr_t)rv;
}
