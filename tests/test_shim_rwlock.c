/*
 * pthread read-write locks through the shim: an ordinary threaded program
 * using pthread_rwlock_* against a real redis-server.  The error contract
 * (EDEADLK, EBUSY, EPERM, ETIMEDOUT), PTHREAD_RWLOCK_INITIALIZER named by
 * its definition site, attributes that round-trip, threads of one process
 * in one share, and three processes whose writers read-modify-write a
 * counter in Redis while readers check that no writer is inside.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "harness.h"
#include "rw_sections.h"

static struct th_redis srv;

static pthread_rwlock_t stat_rw = PTHREAD_RWLOCK_INITIALIZER; static const int stat_line = __LINE__;

static int try_write_result;

static void *try_write(void *arg)
{
	try_write_result = pthread_rwlock_trywrlock(arg);
	return NULL;
}

static void *unlock_other(void *arg)
{
	try_write_result = pthread_rwlock_unlock(arg);
	return NULL;
}

static int other_thread(void *(*fn)(void *), pthread_rwlock_t *rw)
{
	pthread_t t;

	pthread_create(&t, NULL, fn, rw);
	pthread_join(t, NULL);
	return try_write_result;
}

static void contract(void)
{
	pthread_rwlockattr_t a;
	pthread_rwlock_t rw;
	struct timespec past = { 0, 0 };
	int v;

	IS(pthread_rwlockattr_init(&a), 0);
	IS(pthread_rwlockattr_getpshared(&a, &v), 0);
	IS(v, PTHREAD_PROCESS_PRIVATE);
	IS(pthread_rwlockattr_setpshared(&a, PTHREAD_PROCESS_SHARED), 0);
	IS(pthread_rwlockattr_getpshared(&a, &v), 0);
	IS(v, PTHREAD_PROCESS_SHARED);
	IS(pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP), 0);
	IS(pthread_rwlockattr_getkind_np(&a, &v), 0);
	IS(v, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	IS(pthread_rwlock_init(&rw, &a), 0);
	IS(pthread_rwlockattr_destroy(&a), 0);

	IS(pthread_rwlock_unlock(&rw), EPERM);
	IS(pthread_rwlock_wrlock(&rw), 0);
	IS(pthread_rwlock_wrlock(&rw), EDEADLK);
	IS(pthread_rwlock_rdlock(&rw), EDEADLK);
	IS(pthread_rwlock_tryrdlock(&rw), EBUSY);
	IS(other_thread(try_write, &rw), EBUSY);
	IS(other_thread(unlock_other, &rw), EPERM);
	IS(pthread_rwlock_destroy(&rw), EBUSY);
	IS(pthread_rwlock_unlock(&rw), 0);
	IS(pthread_rwlock_rdlock(&rw), 0);
	IS(pthread_rwlock_rdlock(&rw), 0);
	IS(pthread_rwlock_wrlock(&rw), EDEADLK);
	IS(pthread_rwlock_timedwrlock(&rw, &past), EDEADLK);
	IS(other_thread(try_write, &rw), EBUSY);
	IS(pthread_rwlock_unlock(&rw), 0);
	IS(pthread_rwlock_unlock(&rw), 0);
	IS(pthread_rwlock_unlock(&rw), EPERM);
	IS(pthread_rwlock_destroy(&rw), 0);

	/* The static one is named by its definition site. */
	IS(pthread_rwlock_rdlock(&stat_rw), 0);
	IS(th_redis_int(&srv, "ZCARD dmutex:rwr:{shimrw/test_shim_rwlock.c:%d}", stat_line), 1);
	IS(pthread_rwlock_unlock(&stat_rw), 0);
	IS(th_redis_int(&srv, "ZCARD dmutex:rwr:{shimrw/test_shim_rwlock.c:%d}", stat_line), 0);
	IS(pthread_rwlock_wrlock(&stat_rw), 0);
	IS(pthread_rwlock_unlock(&stat_rw), 0);
}

/* ---- three processes ---------------------------------------------------- */

#define ROUNDS 25
static pthread_rwlock_t shared_rw = PTHREAD_RWLOCK_INITIALIZER;

static int worker(void *arg)
{
	int seed = *(int *)arg, bad = 0;

	for (int i = 0; i < ROUNDS; i++) {
		if ((i + seed) % 3 == 0) {
			if (pthread_rwlock_wrlock(&shared_rw))
				return 11;
			bad |= th_rw_write_section(&srv);
		} else {
			if (pthread_rwlock_rdlock(&shared_rw))
				return 12;
			bad |= th_rw_read_section(&srv);
		}
		if (pthread_rwlock_unlock(&shared_rw))
			return 13;
	}
	return bad;
}

static void three_processes(void)
{
	int seeds[3] = { 0, 1, 2 };
	pid_t kids[3];
	long long writes = 0;

	th_redis_int(&srv, "MSET w 0 r 0 n 0");
	for (int i = 0; i < 3; i++) {
		kids[i] = th_spawn(worker, &seeds[i]);
		EXPECT(kids[i] > 0);
		for (int k = 0; k < ROUNDS; k++)
			writes += (k + seeds[i]) % 3 == 0;
	}
	for (int i = 0; i < 3; i++)
		IS(th_wait_child(kids[i], 60000), 0);
	IS(th_redis_int(&srv, "GET n"), (int)writes);
}

int main(void)
{
	if (th_redis_start(&srv, NULL)) {
		fprintf(stderr, "redis-server did not start\n");
		return 2;
	}
	setenv("DMUTEX_URL", srv.url, 1);
	setenv("DMUTEX_NAMESPACE", "shimrw", 1);
	contract();
	three_processes();
	th_redis_stop(&srv);
	return th_check_status();
}
