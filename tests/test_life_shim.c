/*
 * The life cycle through the pthread shim: an ordinary pthread program
 * (built with the shim's pthread.h) against a real redis-server.
 *
 *   cancel       a pool of workers cancelled in pthread_cond_wait: each
 *                cleanup handler runs holding the mutex; pthread_cond_destroy
 *                then returns 0; pthread_mutex_lock is no cancellation
 *                point (issue 12 item 1).
 *   thread-exit  a PTHREAD_MUTEX_ROBUST mutex whose owner thread exits:
 *                the next locker gets EOWNERDEAD at once (issue 12 item 4).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

enum { POOL = 4 };

static struct th_redis srv;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static atomic_int waiting, handler_held, failures;
static int go;

#define CHECK(expr, want) do { \
	int rc_ = (expr); \
	if (rc_ != (want)) { \
		fprintf(stderr, "%s:%d: %s = %d, want %d\n", __FILE__, __LINE__, #expr, rc_, (want)); \
		atomic_fetch_add(&failures, 1); \
	} \
} while (0)

static void
handler(void *arg)
{
	(void)arg;
	if (pthread_mutex_unlock(&mu) == 0)
		atomic_fetch_add(&handler_held, 1);
}

static void *
worker(void *arg)
{
	(void)arg;
	CHECK(pthread_mutex_lock(&mu), 0);
	pthread_cleanup_push(handler, NULL);
	atomic_fetch_add(&waiting, 1);
	while (!go)
		CHECK(pthread_cond_wait(&cv, &mu), 0);
	pthread_cleanup_pop(1);
	return NULL;
}

static int
all_waiting(void *arg)
{
	(void)arg;
	if (atomic_load(&waiting) < POOL || pthread_mutex_trylock(&mu))
		return 0;
	pthread_mutex_unlock(&mu);
	return 1;
}

static struct timespec
in_ms(long ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

static int
case_cancel(void)
{
	pthread_t pool[POOL];
	void *ret;

	for (int i = 0; i < POOL; i++)
		pthread_create(&pool[i], NULL, worker, NULL);
	if (!th_wait_until(all_waiting, NULL, 10000)) {
		fprintf(stderr, "cancel: the workers did not all wait\n");
		return 1;
	}
	for (int i = 0; i < POOL; i++)
		pthread_cancel(pool[i]);
	for (int i = 0; i < POOL; i++) {
		struct timespec ts = in_ms(10000);
		if (pthread_timedjoin_np(pool[i], &ret, &ts) || ret != PTHREAD_CANCELED) {
			fprintf(stderr, "cancel: worker %d not cancelled in time\n", i);
			return 1;
		}
	}
	if (atomic_load(&handler_held) != POOL) {
		fprintf(stderr, "cancel: %d of %d handlers held the mutex\n", atomic_load(&handler_held), POOL);
		atomic_fetch_add(&failures, 1);
	}
	CHECK(pthread_mutex_lock(&mu), 0);
	CHECK(pthread_mutex_unlock(&mu), 0);
	CHECK(pthread_cond_destroy(&cv), 0);
	return 0;
}

static pthread_mutex_t robust_mu;

static void *
lock_and_exit(void *arg)
{
	(void)arg;
	CHECK(pthread_mutex_lock(&robust_mu), 0);
	pthread_exit(NULL);
}

static int
case_thread_exit(void)
{
	pthread_mutexattr_t a;
	pthread_t t;
	struct timespec ts = in_ms(3000);

	CHECK(pthread_mutexattr_init(&a), 0);
	CHECK(pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST), 0);
	CHECK(pthread_mutex_init(&robust_mu, &a), 0);
	pthread_create(&t, NULL, lock_and_exit, NULL);
	pthread_join(t, NULL);
	CHECK(pthread_mutex_timedlock(&robust_mu, &ts), EOWNERDEAD);
	CHECK(pthread_mutex_consistent(&robust_mu), 0);
	CHECK(pthread_mutex_unlock(&robust_mu), 0);
	CHECK(pthread_mutex_destroy(&robust_mu), 0);
	CHECK(pthread_mutexattr_destroy(&a), 0);
	return 0;
}

int
main(int argc, char **argv)
{
	int rc = 2;

	alarm(60);
	if (th_redis_start(&srv, NULL))
		return 1;
	setenv("DMUTEX_URL", srv.url, 1);
	if (argc > 1 && !strcmp(argv[1], "cancel"))
		rc = case_cancel();
	else if (argc > 1 && !strcmp(argv[1], "thread-exit"))
		rc = case_thread_exit();
	th_redis_stop_all();
	if (atomic_load(&failures))
		fprintf(stderr, "%d failures\n", atomic_load(&failures));
	return rc || atomic_load(&failures) ? 1 : 0;
}
