/*
 * Issue 12 item 3 through the pthread shim: an ordinary pthread program.
 *
 * - pthread_mutexattr/condattr pshared round-trip: PTHREAD_PROCESS_PRIVATE
 *   by default, the value set is the value read, another is EINVAL.
 * - PTHREAD_PROCESS_SHARED objects in a MAP_SHARED mapping: one initialized
 *   before a fork is the same lock in the child (it holds a copy of the
 *   parent's state); ones initialized by the parent after the fork point
 *   into the parent's heap, and the child is refused with EINVAL and a log
 *   line, never a read of that pointer.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "harness.h"

static struct th_redis srv;

struct shared {
	pthread_mutex_t before;         /* initialized before the fork */
	pthread_mutex_t after;          /* by the parent after it */
	pthread_cond_t cv_after;
};

static struct shared *sh;
static struct th_sync go;
static int refusals;

static void
logger(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	if (strstr(msg, "was initialized by process"))
		__atomic_fetch_add(&refusals, 1, __ATOMIC_RELAXED);
}

static void
attrs(void)
{
	pthread_mutexattr_t ma;
	pthread_condattr_t ca;
	int v = -1;

	EXPECT(pthread_mutexattr_init(&ma) == 0);
	EXPECT(pthread_mutexattr_getpshared(&ma, &v) == 0 && v == PTHREAD_PROCESS_PRIVATE);
	EXPECT(pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED) == 0);
	EXPECT(pthread_mutexattr_getpshared(&ma, &v) == 0 && v == PTHREAD_PROCESS_SHARED);
	EXPECT(pthread_mutexattr_setpshared(&ma, 7) == EINVAL);
	EXPECT(pthread_mutexattr_getpshared(&ma, &v) == 0 && v == PTHREAD_PROCESS_SHARED);
	EXPECT(pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_PRIVATE) == 0);
	EXPECT(pthread_mutexattr_getpshared(&ma, &v) == 0 && v == PTHREAD_PROCESS_PRIVATE);
	EXPECT(pthread_mutexattr_destroy(&ma) == 0);
	EXPECT(pthread_mutexattr_getpshared(&ma, &v) == EINVAL);

	EXPECT(pthread_condattr_init(&ca) == 0);
	EXPECT(pthread_condattr_getpshared(&ca, &v) == 0 && v == PTHREAD_PROCESS_PRIVATE);
	EXPECT(pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED) == 0);
	EXPECT(pthread_condattr_getpshared(&ca, &v) == 0 && v == PTHREAD_PROCESS_SHARED);
	EXPECT(pthread_condattr_setpshared(&ca, -1) == EINVAL);
	EXPECT(pthread_condattr_getpshared(&ca, &v) == 0 && v == PTHREAD_PROCESS_SHARED);
	EXPECT(pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_PRIVATE) == 0);
	EXPECT(pthread_condattr_getpshared(&ca, &v) == 0 && v == PTHREAD_PROCESS_PRIVATE);
	EXPECT(pthread_condattr_destroy(&ca) == 0);
}

/* Forked before `after` and `cv_after` exist; the parent holds `before`. */
static int
early_child(void *arg)
{
	struct timespec ts = { 0, 0 };

	(void)arg;
	dmutex_set_logger(logger, NULL);
	if (th_sync_wait(&go, 20000))
		return 10;
	/* The same distributed lock as the parent's: busy. */
	if (pthread_mutex_trylock(&sh->before) != EBUSY)
		return 11;
	if (pthread_mutex_trylock(&sh->after) != EINVAL)
		return 12;
	if (pthread_mutex_lock(&sh->after) != EINVAL)
		return 13;
	if (pthread_mutex_timedlock(&sh->after, &ts) != EINVAL)
		return 14;
	if (pthread_mutex_unlock(&sh->after) != EINVAL)
		return 15;
	if (pthread_cond_signal(&sh->cv_after) != EINVAL)
		return 16;
	if (pthread_cond_broadcast(&sh->cv_after) != EINVAL)
		return 17;
	if (pthread_cond_timedwait(&sh->cv_after, &sh->before, &ts) != EINVAL)
		return 18;
	if (pthread_mutex_destroy(&sh->after) != EINVAL || pthread_cond_destroy(&sh->cv_after) != EINVAL)
		return 19;
	if (__atomic_load_n(&refusals, __ATOMIC_RELAXED) != 9)
		return 20;
	return 0;
}

/* Forked after everything was initialized: all of it is its own copy. */
static int
late_child(void *arg)
{
	(void)arg;
	dmutex_set_logger(logger, NULL);
	if (pthread_mutex_trylock(&sh->before) != EBUSY)
		return 21;
	if (pthread_mutex_trylock(&sh->after) != EBUSY)
		return 22;
	if (pthread_cond_signal(&sh->cv_after) != 0)
		return 23;
	if (__atomic_load_n(&refusals, __ATOMIC_RELAXED) != 0)
		return 24;
	return 0;
}

int
main(void)
{
	pthread_mutexattr_t ma;
	pthread_condattr_t ca;
	pid_t kid;

	attrs();
	if (th_redis_start(&srv, NULL)) {
		fprintf(stderr, "redis-server did not start\n");
		return 1;
	}
	setenv("DMUTEX_URL", srv.url, 1);
	setenv("DMUTEX_NAMESPACE", "shimpshared", 1);
	sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	EXPECT(sh != MAP_FAILED);
	EXPECT(th_sync_init(&go) == 0);
	EXPECT(pthread_mutexattr_init(&ma) == 0);
	EXPECT(pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED) == 0);
	EXPECT(pthread_condattr_init(&ca) == 0);
	EXPECT(pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED) == 0);
	EXPECT(pthread_mutex_init(&sh->before, &ma) == 0);

	EXPECT((kid = th_spawn(early_child, NULL)) > 0);
	EXPECT(pthread_mutex_init(&sh->after, &ma) == 0);
	EXPECT(pthread_cond_init(&sh->cv_after, &ca) == 0);
	EXPECT(pthread_mutex_lock(&sh->before) == 0);
	th_sync_post(&go);
	EXPECT(th_wait_child(kid, 30000) == 0);

	EXPECT(pthread_mutex_lock(&sh->after) == 0);
	EXPECT((kid = th_spawn(late_child, NULL)) > 0);
	EXPECT(th_wait_child(kid, 30000) == 0);
	EXPECT(pthread_mutex_unlock(&sh->after) == 0);
	EXPECT(pthread_mutex_unlock(&sh->before) == 0);

	EXPECT(pthread_cond_destroy(&sh->cv_after) == 0);
	EXPECT(pthread_mutex_destroy(&sh->after) == 0);
	EXPECT(pthread_mutex_destroy(&sh->before) == 0);
	pthread_mutexattr_destroy(&ma);
	pthread_condattr_destroy(&ca);
	th_redis_stop(&srv);
	return th_check_status();
}
