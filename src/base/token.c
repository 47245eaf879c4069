#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "log.h"

/*
 * sodium_init once per process, not per call: each call takes libsodium's
 * own mutex, and a fork() while another thread held it left the child
 * stuck in its first dmutex_lock (found by the life-fork test; the same
 * class as issue 16 item 7: a lock the fork handlers do not take).  Once
 * pthread_once has completed, a child inherits "done" and takes no lock;
 * the constructor makes that so before main in the usual case.
 */
static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static int sodium_ok;

static void
sodium_setup(void)
{
	sodium_ok = sodium_init() >= 0;
}

__attribute__((constructor)) static void
sodium_ctor(void)
{
	pthread_once(&sodium_once, sodium_setup);
}

int
dmutex__random_init(void)
{
	pthread_once(&sodium_once, sodium_setup);
	if (!sodium_ok) {
		dmutex__log(DMUTEX_LOG_ERROR, "libsodium failed to initialise: no random source");
		return EIO;
	}
	return 0;
}

uint32_t
dmutex__random_uniform(uint32_t upper)
{
	/* The library's own per-process stream (getrandom(2)): the
	 * application's rand() is neither consumed nor shared, and processes
	 * started together do not back off in step (issue 16 item 11).  If
	 * libsodium is unusable, the caller's token fails first. */
	if (upper < 2 || dmutex__random_init())
		return 0;
	return randombytes_uniform(upper);
}

/*
 * Per-thread caches of what cost a system call on every lock: random bytes
 * for tokens (getrandom(2), 16 tokens a call) and the thread id (gettid).
 * On a virtual machine a system call costs several µs; a lock+unlock made
 * nine, three of them for these (issue 15 item 6: 4 threads on distinct
 * names are bound by CPU).  Forgotten in a fork child by
 * dmutex__token_atfork_child (client.c's handler, run in the one thread
 * the child has): the child must never hand out tokens its parent's
 * thread will, and its thread id is its own.
 */
#define TOKEN_POOL (16 * (DMUTEX__TOKEN_HEX / 2))
static __thread struct {
	unsigned char bytes[TOKEN_POOL];
	size_t left;                    /* unused, at the end of bytes */
	long tid;                       /* 0: not known yet */
} cache;

void
dmutex__token_atfork_child(void)
{
	sodium_memzero(&cache, sizeof cache);
}

int
dmutex__token(char out[DMUTEX__TOKEN_HEX + 1])
{
	unsigned char *raw;

	/* randombytes uses getrandom(2), which is fork-safe. */
	if (dmutex__random_init())
		return EIO;
	if (cache.left < DMUTEX__TOKEN_HEX / 2) {
		randombytes_buf(cache.bytes, sizeof cache.bytes);
		cache.left = sizeof cache.bytes;
	}
	raw = cache.bytes + sizeof cache.bytes - cache.left;
	cache.left -= DMUTEX__TOKEN_HEX / 2;
	sodium_bin2hex(out, DMUTEX__TOKEN_HEX + 1, raw, DMUTEX__TOKEN_HEX / 2);
	/* Used once: not left in memory for a core dump to show. */
	sodium_memzero(raw, DMUTEX__TOKEN_HEX / 2);
	return 0;
}

long
dmutex__tid(void)
{
	if (!cache.tid)
		cache.tid = (long)syscall(SYS_gettid);
	return cache.tid;
}

int64_t
dmutex__now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/*
 * Whether CLOCK_MONOTONIC is still before t, read cheaply when t is far.
 * CLOCK_MONOTONIC_COARSE is the same clock as of the kernel's last
 * timekeeping update (vDSO, no clock source read: a few ns against 29 ns
 * through kvm-clock here), so it is never ahead of CLOCK_MONOTONIC and
 * lags it by the time since that update: one tick (its clock_getres) in
 * the common case, a few ticks when the timekeeping CPU stalls (the kernel
 * hands the duty on after 5 stalled ticks).  Only when the coarse reading
 * plus 16 ticks is still before t do we answer without the exact clock;
 * near t, or without a usable coarse clock, the exact clock decides, so
 * the answer is the exact one whenever the lag is under 16 ticks.
 */
static int64_t
coarse_slack_ns(void)
{
	/* 0: not known yet; -1: no coarse clock worth using. */
	static int64_t slack;
	int64_t s = __atomic_load_n(&slack, __ATOMIC_RELAXED);
	struct timespec res;

	if (s)
		return s;
	if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) || res.tv_sec || res.tv_nsec <= 0 ||
			res.tv_nsec > 10 * DMUTEX__MS)
		s = -1;
	else
		s = 16 * (int64_t)res.tv_nsec;
	__atomic_store_n(&slack, s, __ATOMIC_RELAXED);
	return s;
}

int
dmutex__now_before(int64_t t)
{
	int64_t slack = coarse_slack_ns();
	struct timespec ts;

	if (slack > 0 && !clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) &&
			(int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec < t - slack)
		return 1;
	return dmutex__now_ns() < t;
}

int64_t
dmutex__wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void
dmutex__ns_to_ts(int64_t ns, struct timespec *ts)
{
	ts->tv_sec = (time_t)(ns / 1000000000);
	ts->tv_nsec = (long)(ns % 1000000000);
}

void
dmutex__sleep_until(int64_t until_ns)
{
	struct timespec ts;
	/* clock_nanosleep is a cancellation point; the library's sleeps
	 * (back-off, also the shim's retry loops) must not be (cancel.c). */
	int cs = dmutex__nocancel();

	dmutex__ns_to_ts(until_ns, &ts);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
	dmutex__cancel_restore(cs);
}

int64_t
dmutex__backoff_ns(int attempt)
{
	/* Jittered so that a crowd that lost its server does not come back
	 * in step. */
	int64_t base = 25 * DMUTEX__MS << (attempt < 3 ? attempt : 3);
	return base / 2 + (int64_t)dmutex__random_uniform(1000) * (base / 2) / 1000;
}
