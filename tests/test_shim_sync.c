/*
 * Spin locks and barriers through the pthread shim: an ordinary pthread
 * program against a real redis-server.  Three processes increment a Redis
 * counter with GET then SET under a pthread spin lock (a lost update shows
 * up as a short total), then meet at a pthread barrier for several cycles
 * (nobody passes a cycle before all arrived; one PTHREAD_BARRIER_SERIAL_THREAD
 * per cycle).  Plus: another count for an existing barrier is EINVAL.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "harness.h"

enum { PROCS = 3, ROUNDS = 30, CYCLES = 10 };

static struct th_redis srv;
static pthread_spinlock_t spin;
static pthread_barrier_t bar;

static int worker(void *arg)
{
	int bad = 0;

	(void)arg;
	if (pthread_spin_init(&spin, PTHREAD_PROCESS_SHARED) ||
			pthread_barrier_init(&bar, NULL, PROCS))
		return 10;
	for (int i = 0; i < ROUNDS; i++) {
		if (pthread_spin_lock(&spin))
			return 11;
		long long v = th_redis_int(&srv, "GET total");
		redisReply *r = th_redis_cmd(&srv, "SET total %lld", (v < 0 ? 0 : v) + 1);
		if (r)
			freeReplyObject(r);
		if (pthread_spin_unlock(&spin))
			return 12;
	}
	for (int i = 0; i < CYCLES; i++) {
		th_redis_int(&srv, "INCR arrived:%d", i);
		int rc = pthread_barrier_wait(&bar);
		if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD)
			return 13;
		if (th_redis_int(&srv, "GET arrived:%d", i) != PROCS)
			bad = 1;
		if (rc == PTHREAD_BARRIER_SERIAL_THREAD)
			th_redis_int(&srv, "INCR serial:%d", i);
	}
	pthread_barrier_destroy(&bar);
	pthread_spin_destroy(&spin);
	return bad;
}

int main(void)
{
	pthread_barrier_t other;
	pthread_barrierattr_t ba;
	pid_t kids[PROCS];
	int ps = -1;

	if (th_redis_start(&srv, NULL)) {
		fprintf(stderr, "redis-server did not start\n");
		return 1;
	}
	setenv("DMUTEX_URL", srv.url, 1);
	setenv("DMUTEX_NAMESPACE", "shimsync", 1);
	for (int i = 0; i < PROCS; i++)
		EXPECT((kids[i] = th_spawn(worker, NULL)) > 0);
	for (int i = 0; i < PROCS; i++)
		EXPECT(th_wait_child(kids[i], 20000) == 0);
	EXPECT(th_redis_int(&srv, "GET total") == PROCS * ROUNDS);
	for (int i = 0; i < CYCLES; i++)
		EXPECT(th_redis_int(&srv, "GET serial:%d", i) == 1);

	/* The attribute calls, and one site with another count. */
	EXPECT(pthread_barrierattr_init(&ba) == 0);
	/* Issue 29: pthread's default, and get returns what set stored. */
	EXPECT(pthread_barrierattr_getpshared(&ba, &ps) == 0 && ps == PTHREAD_PROCESS_PRIVATE);
	EXPECT(pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED) == 0);
	EXPECT(pthread_barrierattr_getpshared(&ba, &ps) == 0 && ps == PTHREAD_PROCESS_SHARED);
	EXPECT(pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_PRIVATE) == 0);
	EXPECT(pthread_barrierattr_getpshared(&ba, &ps) == 0 && ps == PTHREAD_PROCESS_PRIVATE);
	EXPECT(pthread_barrierattr_setpshared(&ba, 7) == EINVAL);
	for (int n = 2; n <= 3; n++)
		EXPECT(pthread_barrier_init(&other, &ba, n) == (n == 2 ? 0 : EINVAL));
	EXPECT(pthread_barrier_destroy(&other) == 0);     /* the count-2 one */
	EXPECT(pthread_barrierattr_destroy(&ba) == 0);
	EXPECT(pthread_barrier_init(&other, NULL, 0) == EINVAL);
	th_redis_stop(&srv);
	return th_check_status();
}
