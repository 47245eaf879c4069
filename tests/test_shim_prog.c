/*
 * A plain pthread program, built through the shim by tests/meson.build and
 * driven by tests/test_shim.c as separate processes.  The NAME: comments
 * mark the lines that name its objects; test_shim.c reads them.
 *
 *   hold I...  lock `gate`, `named` and array[I] for each I, say "held",
 *              unlock all when stdin closes
 *   probe      trylock gate, named, array[0..3]; print "gate=B named=B array=BBBB"
 *              (B: 1 busy, 0 free)
 *   api        every mapped pthread call once, with pthread's own values;
 *              exit status 0, or the number of the first check that failed
 *   twins      lock twin_a, then twin_b (defined on the same line); print
 *              both results
 *   race       four threads released at once lock `raced` (its first use)
 *              and unlock it; exit status 0
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
#include <unistd.h>

#define N 4

static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER; /* NAME:gate */
static pthread_mutex_t rec = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_mutex_t chk = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t array[N];
/* Two on one line are one lock (the shim warns): see `twins`. */
static pthread_mutex_t twin_a = PTHREAD_MUTEX_INITIALIZER, twin_b = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t named;

static void
init_all(void)
{
	pthread_mutexattr_t a;

	for (int i = 0; i < N; i++)
		pthread_mutex_init(&array[i], NULL); /* NAME:array */
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setname_np(&a, "shim-test-named"); /* NAME:named */
	pthread_mutex_init(&named, &a);
	pthread_mutexattr_destroy(&a);
}

static int
hold(int argc, char **argv)
{
	char buf[16];

	if (pthread_mutex_lock(&gate) || pthread_mutex_lock(&named))
		return 2;
	for (int i = 2; i < argc; i++)
		if (pthread_mutex_lock(&array[atoi(argv[i])]))
			return 3;
	printf("held\n");
	fflush(stdout);
	while (fgets(buf, sizeof buf, stdin))
		;
	for (int i = 2; i < argc; i++)
		pthread_mutex_unlock(&array[atoi(argv[i])]);
	pthread_mutex_unlock(&named);
	pthread_mutex_unlock(&gate);
	return 0;
}

static char
busy(pthread_mutex_t *m)
{
	int rc = pthread_mutex_trylock(m);

	if (rc == 0) {
		pthread_mutex_unlock(m);
		return '0';
	}
	return rc == EBUSY ? '1' : '?';
}

static int
probe(void)
{
	char a[N + 1] = { 0 };

	for (int i = 0; i < N; i++)
		a[i] = busy(&array[i]);
	printf("gate=%c named=%c array=%s\n", busy(&gate), busy(&named), a);
	return 0;
}

static void *
hold_briefly(void *arg)
{
	pthread_mutex_t *m = arg;
	struct timespec t = { 0, 300 * 1000000 };

	pthread_mutex_lock(m);
	nanosleep(&t, NULL);
	pthread_mutex_unlock(m);
	return NULL;
}

static void
soon(struct timespec *ts, clockid_t clock, long ms)
{
	clock_gettime(clock, ts);
	ts->tv_nsec += ms * 1000000;
	ts->tv_sec += ts->tv_nsec / 1000000000;
	ts->tv_nsec %= 1000000000;
}

#define CHECK(n, cond) do { if (!(cond)) { fprintf(stderr, "check %d failed: %s\n", n, #cond); return n; } } while (0)

static int
api(void)
{
	pthread_mutexattr_t a;
	pthread_condattr_t ca;
	pthread_mutex_t m, r;
	pthread_cond_t c;
	struct timespec ts;
	pthread_t t;
	int v;
	clockid_t clock;

	CHECK(1, pthread_mutexattr_init(&a) == 0);
	CHECK(2, pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK) == 0);
	CHECK(3, pthread_mutexattr_gettype(&a, &v) == 0 && v == PTHREAD_MUTEX_ERRORCHECK);
	CHECK(4, pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE) == 0);
	CHECK(5, pthread_mutexattr_gettype(&a, &v) == 0 && v == PTHREAD_MUTEX_RECURSIVE);
	CHECK(6, pthread_mutexattr_settype(&a, 12345) == EINVAL);
	CHECK(7, pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED) == 0);
	CHECK(8, pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_PRIVATE) == 0);
	CHECK(9, pthread_mutexattr_getpshared(&a, &v) == 0 && v == PTHREAD_PROCESS_PRIVATE);
	CHECK(10, pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_NONE) == 0);
	CHECK(11, pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT) == ENOTSUP);
	CHECK(12, pthread_mutexattr_getprotocol(&a, &v) == 0 && v == PTHREAD_PRIO_NONE);
	CHECK(13, pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST) == 0);
	CHECK(14, pthread_mutexattr_getrobust(&a, &v) == 0 && v == PTHREAD_MUTEX_ROBUST);
	CHECK(15, pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_STALLED) == 0);
	CHECK(16, pthread_mutex_init(&r, &a) == 0);
	CHECK(17, pthread_mutex_lock(&r) == 0 && pthread_mutex_lock(&r) == 0);
	CHECK(18, pthread_mutex_unlock(&r) == 0 && pthread_mutex_unlock(&r) == 0);
	CHECK(19, pthread_mutex_unlock(&r) == EPERM);
	CHECK(20, pthread_mutex_lock(&r) == 0 && pthread_mutex_consistent(&r) == EINVAL &&
			pthread_mutex_unlock(&r) == 0);
	CHECK(21, pthread_mutex_destroy(&r) == 0);
	CHECK(22, pthread_mutexattr_destroy(&a) == 0);

	/* Static initializers carry their type. */
	CHECK(30, pthread_mutex_lock(&rec) == 0 && pthread_mutex_lock(&rec) == 0);
	CHECK(31, pthread_mutex_unlock(&rec) == 0 && pthread_mutex_unlock(&rec) == 0);
	CHECK(32, pthread_mutex_lock(&chk) == 0 && pthread_mutex_lock(&chk) == EDEADLK);
	CHECK(33, pthread_mutex_unlock(&chk) == 0 && pthread_mutex_unlock(&chk) == EPERM);

	/* timedlock and clocklock while another thread holds it. */
	CHECK(40, pthread_mutex_init(&m, NULL) == 0);
	CHECK(41, pthread_create(&t, NULL, hold_briefly, &m) == 0);
	while (pthread_mutex_trylock(&m) == 0)  /* until the thread has it */
		pthread_mutex_unlock(&m);
	soon(&ts, CLOCK_REALTIME, 50);
	CHECK(42, pthread_mutex_timedlock(&m, &ts) == ETIMEDOUT);
	soon(&ts, CLOCK_MONOTONIC, 50);
	CHECK(43, pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &ts) == ETIMEDOUT);
	soon(&ts, CLOCK_MONOTONIC, 5000);
	CHECK(44, pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &ts) == 0);
	CHECK(45, pthread_mutex_unlock(&m) == 0);
	pthread_join(t, NULL);

	/* Condition variables: attributes, timed waits, the static one. */
	CHECK(50, pthread_condattr_init(&ca) == 0);
	CHECK(51, pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0);
	CHECK(52, pthread_condattr_getclock(&ca, &clock) == 0 && clock == CLOCK_MONOTONIC);
	CHECK(53, pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED) == 0);
	CHECK(54, pthread_condattr_getpshared(&ca, &v) == 0 && v == PTHREAD_PROCESS_SHARED);
	CHECK(55, pthread_cond_init(&c, &ca) == 0);
	CHECK(56, pthread_condattr_destroy(&ca) == 0);
	CHECK(57, pthread_mutex_lock(&m) == 0);
	soon(&ts, CLOCK_MONOTONIC, 100);
	CHECK(58, pthread_cond_timedwait(&c, &m, &ts) == ETIMEDOUT);
	soon(&ts, CLOCK_REALTIME, 100);
	CHECK(59, pthread_cond_clockwait(&c, &m, CLOCK_REALTIME, &ts) == ETIMEDOUT);
	soon(&ts, CLOCK_REALTIME, 100);
	CHECK(60, pthread_cond_timedwait(&cv, &m, &ts) == ETIMEDOUT);
	CHECK(61, pthread_cond_signal(&c) == 0 && pthread_cond_broadcast(&cv) == 0);
	CHECK(62, pthread_mutex_unlock(&m) == 0);
	CHECK(63, pthread_cond_wait(&c, &m) == EPERM);
	CHECK(64, pthread_cond_destroy(&c) == 0);
	CHECK(65, pthread_mutex_destroy(&m) == 0);
	return 0;
}

static int
twins(void)
{
	int a = pthread_mutex_lock(&twin_a), b = pthread_mutex_lock(&twin_b);

	printf("twin_a=%d twin_b=%s\n", a, b == EDEADLK ? "EDEADLK" : b == 0 ? "0" : "other");
	pthread_mutex_unlock(&twin_a);
	return 0;
}

static pthread_mutex_t raced = PTHREAD_MUTEX_INITIALIZER; /* NAME:raced */
static int go;

static void *
racer(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&go, __ATOMIC_ACQUIRE))
		;
	if (pthread_mutex_lock(&raced) || pthread_mutex_unlock(&raced))
		return (void *)1;
	return NULL;
}

static int
race(void)
{
	pthread_t t[4];
	void *r;
	int bad = 0;

	for (int i = 0; i < 4; i++)
		if (pthread_create(&t[i], NULL, racer, NULL))
			return 1;
	__atomic_store_n(&go, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 4; i++)
		if (pthread_join(t[i], &r) || r)
			bad = 2;
	return bad;
}

int
main(int argc, char **argv)
{
	if (argc < 2)
		return 64;
	/* First: the race includes opening the connection. */
	if (!strcmp(argv[1], "race"))
		return race();
	init_all();
	if (!strcmp(argv[1], "hold"))
		return hold(argc, argv);
	if (!strcmp(argv[1], "probe"))
		return probe();
	if (!strcmp(argv[1], "api"))
		return api();
	if (!strcmp(argv[1], "twins"))
		return twins();
	return 64;
}
