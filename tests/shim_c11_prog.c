/*
 * A plain C11 <threads.h> program, built through the shim by
 * tests/meson.build (and once without it, the control) and driven by
 * tests/test_shim_c11.c as separate processes.
 *
 *   count FILE THREADS N PROCS
 *              THREADS threads each add 1 to the number in FILE N times,
 *              under one timed recursive mtx_t (taken twice: timedlock,
 *              then lock); then the process says it is done and waits on a
 *              cnd_t until PROCS processes are (0: does not wait); prints
 *              "count=C done=D"
 *   api        every mapped call once, with C11's result codes; exit status
 *              0, or the number of the first check that failed
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

static mtx_t counter;
static cnd_t all_done;
static int fd, n_each;

/* FILE holds two numbers: the count and the processes done. */
static void
get(long v[2])
{
	char buf[64] = "";

	v[0] = v[1] = 0;
	if (pread(fd, buf, sizeof buf - 1, 0) > 0)
		sscanf(buf, "%ld %ld", &v[0], &v[1]);
}

static void
put(const long v[2])
{
	char buf[64];
	int n = snprintf(buf, sizeof buf, "%020ld %020ld\n", v[0], v[1]);

	if (pwrite(fd, buf, (size_t)n, 0) != n)
		abort();
}

static int
adder(void *arg)
{
	struct timespec at;
	long v[2];

	(void)arg;
	for (int i = 0; i < n_each; i++) {
		timespec_get(&at, TIME_UTC);
		at.tv_sec += 60;
		if (mtx_timedlock(&counter, &at) != thrd_success || mtx_lock(&counter) != thrd_success)
			return 1;
		get(v);
		thrd_yield();	/* another thread's turn, were the lock not there */
		v[0]++;
		put(v);
		if (mtx_unlock(&counter) != thrd_success || mtx_unlock(&counter) != thrd_success)
			return 2;
	}
	return 0;
}

static int
count(char **argv)
{
	int threads = atoi(argv[3]), procs = atoi(argv[5]), rc;
	thrd_t t[16];
	long v[2];

	n_each = atoi(argv[4]);
	if ((fd = open(argv[2], O_RDWR)) < 0 || threads < 1 || threads > 16)
		return 10;
	if (mtx_init(&counter, mtx_timed | mtx_recursive) != thrd_success || cnd_init(&all_done) != thrd_success)
		return 11;
	for (int i = 0; i < threads; i++)
		if (thrd_create(&t[i], adder, NULL) != thrd_success)
			return 12;
	for (int i = 0; i < threads; i++)
		if (thrd_join(t[i], &rc) != thrd_success || rc)
			return 13;
	mtx_lock(&counter);
	get(v);
	v[1]++;
	put(v);
	if (cnd_broadcast(&all_done) != thrd_success)
		return 14;
	while (v[1] < procs) {
		if (cnd_wait(&all_done, &counter) != thrd_success)
			return 15;
		get(v);
	}
	mtx_unlock(&counter);
	printf("count=%ld done=%ld\n", v[0], v[1]);
	cnd_destroy(&all_done);
	mtx_destroy(&counter);
	return 0;
}

/* ---- api: each mapped call once, from the threads C11 expects ---- */

static mtx_t plain, timed;
static cnd_t cv;
static int flag, woken;

static void
in_ms(struct timespec *at, long ms)
{
	timespec_get(at, TIME_UTC);
	at->tv_sec += ms / 1000;
	at->tv_nsec += (ms % 1000) * 1000000L;
	if (at->tv_nsec >= 1000000000L) {
		at->tv_sec++;
		at->tv_nsec -= 1000000000L;
	}
}

static int
try_plain(void *arg)
{
	(void)arg;
	return mtx_trylock(&plain);
}

static int
timed_out(void *arg)
{
	struct timespec at;

	(void)arg;
	in_ms(&at, 200);
	return mtx_timedlock(&timed, &at);
}

static int
waiter(void *arg)
{
	int rc = thrd_success;

	(void)arg;
	mtx_lock(&plain);
	while (!flag && rc == thrd_success)
		rc = cnd_wait(&cv, &plain);
	woken++;
	mtx_unlock(&plain);
	return rc;
}

static int
other(int (*fn)(void *))
{
	thrd_t t;
	int rc = -1;

	if (thrd_create(&t, fn, NULL) != thrd_success || thrd_join(t, &rc) != thrd_success)
		return -1;
	return rc;
}

/* n waiters on cv, released by one cnd_signal each (all 0) or one
 * cnd_broadcast (all 1); 0 when every one woke with thrd_success. */
static int
wake(int n, int all)
{
	thrd_t t[2];
	int rc, bad = 0;

	flag = woken = 0;
	for (int i = 0; i < n; i++)
		if (thrd_create(&t[i], waiter, NULL) != thrd_success)
			return 1;
	for (int i = 0; i < n; i++) {
		/* signals before the waiters wait are lost (flag covers them) */
		struct timespec pause = { 0, 50 * 1000000L };
		thrd_sleep(&pause, NULL);
		mtx_lock(&plain);
		flag = 1;
		if ((all ? cnd_broadcast(&cv) : cnd_signal(&cv)) != thrd_success)
			bad = 1;
		mtx_unlock(&plain);
	}
	for (int i = 0; i < n; i++)
		if (thrd_join(t[i], &rc) != thrd_success || rc != thrd_success)
			bad = 1;
	return bad || woken != n;
}

static once_flag once = ONCE_FLAG_INIT;
static int once_runs;

static void
once_fn(void)
{
	once_runs++;
}

static int
api(void)
{
	struct timespec at;
	mtx_t rec;
	tss_t key;

	if (mtx_init(&plain, 1 << 8) != thrd_error)
		return 1;
	if (mtx_init(&plain, mtx_plain) != thrd_success || mtx_init(&timed, mtx_timed) != thrd_success ||
			mtx_init(&rec, mtx_plain | mtx_recursive) != thrd_success || cnd_init(&cv) != thrd_success)
		return 2;
	if (mtx_trylock(&plain) != thrd_success || other(try_plain) != thrd_busy || mtx_unlock(&plain) != thrd_success)
		return 3;
	in_ms(&at, 1000);
	if (mtx_timedlock(&timed, &at) != thrd_success || other(timed_out) != thrd_timedout ||
			mtx_unlock(&timed) != thrd_success)
		return 6;
	if (mtx_lock(&rec) != thrd_success || mtx_lock(&rec) != thrd_success || mtx_trylock(&rec) != thrd_success ||
			mtx_unlock(&rec) != thrd_success || mtx_unlock(&rec) != thrd_success ||
			mtx_unlock(&rec) != thrd_success)
		return 7;
	mtx_lock(&plain);
	in_ms(&at, 150);
	if (cnd_timedwait(&cv, &plain, &at) != thrd_timedout || other(try_plain) != thrd_busy)
		return 8;
	mtx_unlock(&plain);
	if (wake(1, 0))
		return 9;
	if (wake(2, 1))
		return 10;
	/* These stay the C library's, local to the process. */
	call_once(&once, once_fn);
	call_once(&once, once_fn);
	if (once_runs != 1 || tss_create(&key, NULL) != thrd_success || tss_set(key, &once_runs) != thrd_success ||
			tss_get(key) != &once_runs)
		return 11;
	tss_delete(key);
	cnd_destroy(&cv);
	mtx_destroy(&rec);
	mtx_destroy(&timed);
	mtx_destroy(&plain);
	return 0;
}

int
main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 6 && !strcmp(argv[1], "count"))
		return count(argv);
	if (argc == 2 && !strcmp(argv[1], "api"))
		return api();
	fprintf(stderr, "usage: %s count FILE THREADS N PROCS | api\n", argv[0]);
	return 64;
}
