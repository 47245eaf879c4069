/*
 * docs/faults.md #12, the client side: run under libfaketime (LD_PRELOAD,
 * FAKETIME_TIMESTAMP_FILE=FILE, FAKETIME_NO_CACHE=1, DONT_FAKE_MONOTONIC=1)
 * by test_scenarios.c.  The wall clock of this process jumps an hour
 * forward and two back while it holds a lock and while it waits in
 * dmutex_timedlock; its CLOCK_MONOTONIC does not move.  Nothing may
 * change: the hold is renewed and never lost, the fence stays, a realtime
 * deadline converted at the call still ends after its length.
 *
 *   clockjump URL NAME HELD_NAME FILE READY_FD GO_FD
 *
 * Holds NAME, writes one byte to READY_FD, waits for one on GO_FD (the
 * parent checked that it holds NAME), then runs the timed waits on
 * HELD_NAME, which the parent holds.  Exit 0, or the number of the check
 * that failed (printed).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dmutex.h"

#define LEASE_MS 400

static const char *file;
static atomic_int lost;

static int64_t
mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t
wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec;
}

/* The passage of time is what is tested here. */
static void
pass_ms(int64_t ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

static int
set_offset(const char *off)
{
	FILE *f = fopen(file, "w");
	if (!f)
		return -1;
	fprintf(f, "%s\n", off);
	return fclose(f);
}

static void
on_lost(const char *name, void *arg)
{
	(void)name;
	(void)arg;
	atomic_fetch_add(&lost, 1);
}

struct jump { int64_t after_ms; const char *to; };

static void *
jumper(void *p)
{
	struct jump *j = p;
	pass_ms(j->after_ms);
	set_offset(j->to);
	return NULL;
}

#define FAIL(n, ...) do { fprintf(stderr, "clockjump: check %d: ", n); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); return n; } while (0)

/* A realtime timedlock of 1 s on a held lock while the wall clock jumps by
 * `to` 300 ms into the wait: ETIMEDOUT after 1 s all the same. */
static int
timed_wait(dmutex_t *held, const char *to, int n)
{
	struct jump j = { 300, to };
	struct timespec dl;
	pthread_t t;
	int64_t t0;
	int rc;

	/* t0 first: a stall between the two reads (ASan, load) then makes
	 * the wait look longer, never shorter than the 1 s it is. */
	t0 = mono_ms();
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 1;
	if (pthread_create(&t, NULL, jumper, &j))
		FAIL(n, "pthread_create");
	rc = dmutex_timedlock(held, &dl);
	int64_t took = mono_ms() - t0;
	pthread_join(t, NULL);
	if (rc != ETIMEDOUT)
		FAIL(n, "timedlock across a jump to %s: %s", to, dmutex_strerror(rc));
	if (took < 900 || took > 3000)
		FAIL(n + 1, "timedlock of 1 s across a jump to %s took %lld ms", to, (long long)took);
	return 0;
}

int
main(int argc, char **argv)
{
	dmutex_client_t *c;
	dmutex_attr_t a;
	dmutex_t m, held;
	uint64_t f1, f2;
	int64_t w0;
	char b;
	int rc;

	if (argc != 7)
		return 2;
	file = argv[4];
	int ready = atoi(argv[5]), go = atoi(argv[6]);
	if (set_offset("+0"))
		FAIL(3, "cannot write %s", file);
	if ((rc = dmutex_client_open(&c, argv[1])))
		FAIL(4, "client open: %s", dmutex_strerror(rc));
	dmutex_attr_init(&a);
	dmutex_attr_setclient(&a, c);
	dmutex_attr_setlease(&a, LEASE_MS);
	dmutex_attr_setonlost(&a, on_lost, NULL);
	if (dmutex_init(&m, argv[2], &a) || dmutex_init(&held, argv[3], &a))
		FAIL(5, "init");
	dmutex_attr_destroy(&a);

	if ((rc = dmutex_lock(&m)) || (rc = dmutex_fence(&m, &f1)))
		FAIL(6, "lock: %s", dmutex_strerror(rc));
	/* An hour forward: the renewal thread must not think time ran out. */
	w0 = wall_s();
	if (set_offset("+3600"))
		FAIL(7, "write %s", file);
	if (wall_s() - w0 < 3500)
		FAIL(8, "faketime is not in effect (wall clock moved %lld s)", (long long)(wall_s() - w0));
	pass_ms(3 * LEASE_MS);
	/* Two hours back: nor must it think the lease is good for hours. */
	if (set_offset("-3600"))
		FAIL(9, "write %s", file);
	if (w0 - wall_s() < 3500)
		FAIL(10, "the wall clock did not go back");
	pass_ms(3 * LEASE_MS);
	if ((rc = dmutex_fence(&m, &f2)) || f2 != f1)
		FAIL(11, "fence after the jumps: %s, %llu (was %llu)", dmutex_strerror(rc),
				(unsigned long long)f2, (unsigned long long)f1);
	if (atomic_load(&lost))
		FAIL(12, "onlost ran %d times", atomic_load(&lost));
	if (write(ready, "r", 1) != 1 || read(go, &b, 1) != 1)
		FAIL(13, "sync with the parent");
	if ((rc = dmutex_unlock(&m)))
		FAIL(14, "unlock: %s", dmutex_strerror(rc));

	set_offset("+0");
	if ((rc = timed_wait(&held, "+7200", 15)))
		return rc;
	set_offset("+0");
	if ((rc = timed_wait(&held, "-7200", 17)))
		return rc;
	set_offset("+0");
	if (dmutex_destroy(&m) || dmutex_destroy(&held) || dmutex_client_close(c))
		FAIL(19, "destroy/close");
	return 0;
}
