/*
 * POSIX conformance of mutexes and condition variables through the pthread
 * shim: an ordinary pthread program, against a real redis-server.  Each
 * point prints "name: got X, POSIX Y" and checks the value README's
 * "Where dmutex differs from POSIX" records (the same as POSIX except where
 * that section says why not).  Exit status: the number of points that did
 * not give the recorded value.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

static int failures;

static const char *
e(int v)
{
	static char buf[8][24];
	static int i;
	const char *n = v == 0 ? "0" : v == EDEADLK ? "EDEADLK" : v == EPERM ? "EPERM" : v == EBUSY ? "EBUSY"
		: v == ETIMEDOUT ? "ETIMEDOUT" : v == EINVAL ? "EINVAL" : v == EOWNERDEAD ? "EOWNERDEAD"
		: v == ENOTRECOVERABLE ? "ENOTRECOVERABLE" : v == -1 ? "hang" : NULL;

	if (n)
		return n;
	i = (i + 1) % 8;
	snprintf(buf[i], sizeof buf[i], "%d", v);
	return buf[i];
}

/* got: the result; want: what README records; posix: what POSIX/glibc says. */
static void
point(const char *name, int got, int want, const char *posix)
{
	printf("%-58s got %-16s POSIX %s%s\n", name, e(got), posix, got == want ? "" : "   <-- not as recorded");
	if (got != want)
		failures++;
}

static struct timespec
in_ms(clockid_t clock, long ms)
{
	struct timespec t;

	clock_gettime(clock, &t);
	t.tv_sec += ms / 1000;
	t.tv_nsec += (ms % 1000) * 1000000L;
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	return t;
}

/* Each mutex its own name: a lock's state (not recoverable, say) lives in
 * Redis under its name, and make()'s call site would give them all one. */
static int
make(pthread_mutex_t *m, int type, int robust)
{
	static int n;
	pthread_mutexattr_t a;
	char name[32];
	int err;

	snprintf(name, sizeof name, "posix-%d", n++);
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setname_np(&a, name);
	pthread_mutexattr_settype(&a, type);
	pthread_mutexattr_setrobust(&a, robust);
	err = pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
	return err;
}

static pthread_mutex_t *target;
static int result;

static void *
other_unlock(void *arg)
{
	(void)arg;
	result = pthread_mutex_unlock(target);
	return NULL;
}

static void *
other_trylock(void *arg)
{
	(void)arg;
	result = pthread_mutex_trylock(target);
	return NULL;
}

static void *
other_timedlock_past(void *arg)
{
	struct timespec t = in_ms(CLOCK_REALTIME, -10);

	(void)arg;
	result = pthread_mutex_timedlock(target, &t);
	return NULL;
}

static void *
other_timedlock_badns(void *arg)
{
	struct timespec t = in_ms(CLOCK_REALTIME, 1000);

	(void)arg;
	t.tv_nsec = 1000000000L;
	result = pthread_mutex_timedlock(target, &t);
	return NULL;
}

static void *
lock_and_exit(void *arg)
{
	(void)arg;
	result = pthread_mutex_lock(target);
	return NULL;            /* returns holding it */
}

static void
in_thread(void *(*fn)(void *))
{
	pthread_t t;

	result = -2;
	pthread_create(&t, NULL, fn, NULL);
	pthread_join(t, NULL);
}

/* ---- condition variables ---- */

static pthread_mutex_t cm;
static pthread_cond_t cv;
static int ready, woken;

static void *
waiter(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&cm);
	__atomic_add_fetch(&ready, 1, __ATOMIC_ACQ_REL);
	while (!__atomic_load_n(&woken, __ATOMIC_ACQUIRE) || woken < 0)
		pthread_cond_wait(&cv, &cm);
	woken--;
	pthread_mutex_unlock(&cm);
	return NULL;
}

static int
wait_ready(int n)
{
	long long until = th_now_ms() + 20000;

	while (__atomic_load_n(&ready, __ATOMIC_ACQUIRE) < n && th_now_ms() < until)
		sched_yield();
	return __atomic_load_n(&ready, __ATOMIC_ACQUIRE) >= n;
}

int
main(void)
{
	struct th_redis srv;
	pthread_mutex_t m;
	pthread_condattr_t ca;
	pthread_cond_t mono;
	struct timespec t;
	pthread_t th[3];
	int err;

	if (th_redis_start(&srv, NULL)) {
		fprintf(stderr, "redis-server did not start\n");
		return 1;
	}
	setenv("DMUTEX_URL", srv.url, 1);
	setenv("DMUTEX_NAMESPACE", "posix", 1);
	setenv("DMUTEX_LOG", "off", 1);
	target = &m;

	/* NORMAL */
	make(&m, PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_STALLED);
	pthread_mutex_lock(&m);
	point("normal: relock by the owner", pthread_mutex_lock(&m), EDEADLK, "hang (deadlock)");
	point("normal: trylock by the owner", pthread_mutex_trylock(&m), EBUSY, "EBUSY");
	in_thread(other_trylock);
	point("normal: trylock by another thread", result, EBUSY, "EBUSY");
	in_thread(other_timedlock_past);
	point("normal: timedlock, deadline passed, by another thread", result, ETIMEDOUT, "ETIMEDOUT");
	in_thread(other_timedlock_badns);
	point("normal: timedlock, tv_nsec 1e9, would block", result, EINVAL, "EINVAL");
	in_thread(other_unlock);
	point("normal: unlock by another thread", result, EPERM, "undefined (glibc: 0, unlocks)");
	point("normal: destroy while locked", pthread_mutex_destroy(&m), EBUSY, "EBUSY (glibc), mutex unchanged");
	point("normal: use after that destroy", pthread_mutex_unlock(&m), EINVAL, "0 (glibc: still locked)");
	make(&m, PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_STALLED);
	point("normal: unlock of an unlocked mutex", pthread_mutex_unlock(&m), EPERM, "undefined (glibc: 0)");
	point("normal: destroy unlocked", pthread_mutex_destroy(&m), 0, "0");

	/* ERRORCHECK */
	make(&m, PTHREAD_MUTEX_ERRORCHECK, PTHREAD_MUTEX_STALLED);
	pthread_mutex_lock(&m);
	point("errorcheck: relock by the owner", pthread_mutex_lock(&m), EDEADLK, "EDEADLK");
	in_thread(other_unlock);
	point("errorcheck: unlock by another thread", result, EPERM, "EPERM");
	pthread_mutex_unlock(&m);
	point("errorcheck: unlock of an unlocked mutex", pthread_mutex_unlock(&m), EPERM, "EPERM");
	pthread_mutex_destroy(&m);

	/* RECURSIVE */
	make(&m, PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_STALLED);
	pthread_mutex_lock(&m);
	point("recursive: relock by the owner", pthread_mutex_lock(&m), 0, "0");
	point("recursive: trylock by the owner", pthread_mutex_trylock(&m), 0, "0");
	in_thread(other_trylock);
	point("recursive: trylock by another thread", result, EBUSY, "EBUSY");
	pthread_mutex_unlock(&m);
	pthread_mutex_unlock(&m);
	point("recursive: last of 3 unlocks", pthread_mutex_unlock(&m), 0, "0");
	point("recursive: one unlock too many", pthread_mutex_unlock(&m), EPERM, "EPERM");
	pthread_mutex_destroy(&m);

	/* ROBUST */
	make(&m, PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ROBUST);
	in_thread(lock_and_exit);
	point("robust: owner thread exits holding; next lock", err = pthread_mutex_lock(&m), EOWNERDEAD,
			"EOWNERDEAD");
	if (err == EOWNERDEAD)
		pthread_mutex_unlock(&m);
	point("robust: unlocked without consistent; next lock", pthread_mutex_lock(&m), ENOTRECOVERABLE,
			"ENOTRECOVERABLE");
	pthread_mutex_destroy(&m);
	make(&m, PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ROBUST);
	in_thread(lock_and_exit);
	pthread_mutex_lock(&m);
	point("robust: consistent after EOWNERDEAD", pthread_mutex_consistent(&m), 0, "0");
	point("robust: unlock after consistent", pthread_mutex_unlock(&m), 0, "0");
	point("robust: consistent on a consistent mutex, not held", pthread_mutex_consistent(&m), EPERM, "EINVAL");
	pthread_mutex_lock(&m);
	point("robust: consistent on a consistent mutex, held", pthread_mutex_consistent(&m), EINVAL, "EINVAL");
	point("robust: destroy while locked", pthread_mutex_destroy(&m), 0, "0 (glibc; EBUSY if not robust)");
	make(&m, PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ROBUST);
	point("robust: ... and its lock was released", pthread_mutex_trylock(&m), 0, "0");
	pthread_mutex_unlock(&m);
	pthread_mutex_destroy(&m);

	/* condition variables */
	make(&cm, PTHREAD_MUTEX_ERRORCHECK, PTHREAD_MUTEX_STALLED);
	pthread_cond_init(&cv, NULL);
	point("cond: signal with no waiter", pthread_cond_signal(&cv), 0, "0");
	point("cond: broadcast with no waiter", pthread_cond_broadcast(&cv), 0, "0");
	pthread_mutex_lock(&cm);
	t = in_ms(CLOCK_REALTIME, 50);
	point("cond: timedwait, deadline passes", pthread_cond_timedwait(&cv, &cm, &t), ETIMEDOUT, "ETIMEDOUT");
	point("cond: ... and the mutex is held again", pthread_mutex_lock(&cm), EDEADLK, "EDEADLK (errorcheck)");
	t.tv_nsec = -1;
	point("cond: timedwait, tv_nsec -1", pthread_cond_timedwait(&cv, &cm, &t), EINVAL, "EINVAL");
	pthread_mutex_unlock(&cm);
	t = in_ms(CLOCK_REALTIME, 1000);
	point("cond: wait without holding the mutex (errorcheck)", pthread_cond_timedwait(&cv, &cm, &t), EPERM,
			"EPERM (glibc errorcheck)");
	/* signal wakes one, broadcast all */
	for (int i = 0; i < 3; i++)
		pthread_create(&th[i], NULL, waiter, NULL);
	point("cond: 3 waiters registered", wait_ready(3) ? 0 : -1, 0, "0");
	pthread_mutex_lock(&cm);
	woken = 3;
	pthread_mutex_unlock(&cm);
	point("cond: broadcast", pthread_cond_broadcast(&cv), 0, "0");
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	point("cond: broadcast woke all 3", woken, 0, "0 left");
	point("cond: destroy with no waiter", pthread_cond_destroy(&cv), 0, "0");
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&mono, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_lock(&cm);
	t = in_ms(CLOCK_MONOTONIC, 50);
	point("cond: CLOCK_MONOTONIC timedwait, deadline passes", pthread_cond_timedwait(&mono, &cm, &t), ETIMEDOUT,
			"ETIMEDOUT");
	pthread_mutex_unlock(&cm);
	pthread_cond_destroy(&mono);
	pthread_mutex_destroy(&cm);

	th_redis_stop(&srv);
	printf("%d points not as recorded\n", failures);
	return failures;
}
