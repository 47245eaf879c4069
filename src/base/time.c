/*
 * The clocks: CLOCK_MONOTONIC for every deadline (read coarsely when the
 * deadline is far), CLOCK_REALTIME only for what operators read, and a
 * sleep that is not a cancellation point.
 */
#include <errno.h>
#include <stdint.h>
#include <time.h>

#include "base.h"

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

int
dmutex__cond_init_mono(pthread_cond_t *cv)
{
	pthread_condattr_t ca;
	int rc;

	if ((rc = pthread_condattr_init(&ca)))
		return rc;
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	rc = pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
	return rc;
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
dmutex__mono_deadline(clockid_t clock, const struct timespec *at)
{
	struct timespec now;

	clock_gettime(clock, &now);
	/* Compare before subtracting so that no tv_sec overflows anything. */
	if (at->tv_sec < now.tv_sec || (at->tv_sec == now.tv_sec && at->tv_nsec <= now.tv_nsec))
		return dmutex__now_ns();
	if ((int64_t)at->tv_sec - now.tv_sec > 100LL * 365 * 24 * 3600)
		return INT64_MAX;
	return dmutex__now_ns() + ((int64_t)at->tv_sec - now.tv_sec) * 1000000000 +
		(at->tv_nsec - now.tv_nsec);
}
