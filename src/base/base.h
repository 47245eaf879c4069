/*
 * The ground every layer stands on (core, backend, tools): time, the
 * library's random stream, tokens.  Includes nothing from src/ but log.h's
 * peers (tests/check_layers.py), so the backend can use it without knowing
 * the core.  Implemented in time.c (clocks, sleep), token.c (tokens,
 * random, thread id, back-off) and cancel.c.
 */
#ifndef DMUTEX_BASE_H
#define DMUTEX_BASE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* ---- time ---- */
int64_t dmutex__now_ns(void);                     /* CLOCK_MONOTONIC */
/* dmutex__now_ns() < t, without reading the exact clock when t is far
 * (token.c: the coarse clock with a margin of 16 of its ticks). */
int dmutex__now_before(int64_t t);
int64_t dmutex__wall_ms(void);                    /* CLOCK_REALTIME, for operators */
void dmutex__ns_to_ts(int64_t ns, struct timespec *ts);
/* A condition variable whose timed waits count on CLOCK_MONOTONIC, as every
 * deadline of the library does: a wall clock set back must not stretch a
 * wait.  pthread_cond_init's result. */
int dmutex__cond_init_mono(pthread_cond_t *cv);
/* A valid absolute deadline on clock (CLOCK_REALTIME or CLOCK_MONOTONIC,
 * tv_nsec in range) as CLOCK_MONOTONIC ns, converted once: a deadline
 * passed is now ("try once"), one over a century away INT64_MAX (none). */
int64_t dmutex__mono_deadline(clockid_t clock, const struct timespec *at);
/* Not a cancellation point (cancel.c). */
void dmutex__sleep_until(int64_t until_ns);
#define DMUTEX__MS 1000000LL
/* Safety margin for clock drift between us and Redis: 1 % + 2 ms. */
#define DMUTEX__DRIFT_NS(lease_ms) ((int64_t)(lease_ms) * DMUTEX__MS / 100 + 2 * DMUTEX__MS)
long dmutex__tid(void);

/* ---- tokens and random ---- */
/* 128 random bits as hex: an unguessable token, new for every acquisition. */
#define DMUTEX__TOKEN_HEX 32
int dmutex__token(char out[DMUTEX__TOKEN_HEX + 1]);
/* libsodium, initialised once per process (0 or EIO, logged). */
int dmutex__random_init(void);
/* Uniform in [0, upper), the library's own stream; 0 if upper < 2. */
uint32_t dmutex__random_uniform(uint32_t upper);
/* The wait before retry `attempt` (0, 1, ...) of a lock whose backend
 * failed: 25 ms, 50, 100, then 200 ms, jittered from that stream. */
int64_t dmutex__backoff_ns(int attempt);

/* Fork child: the caller's thread forgets its cached thread id and its
 * unused random bytes (token.c), which are its parent thread's. */
void dmutex__token_atfork_child(void);

/* ---- alone.c: the library's own threads do not keep a process alive ---- */
/* At the start and end of each thread of the library's own. */
void dmutex__own_thread_begin(void);
void dmutex__own_thread_end(void);
/* A thread of ours could not be started for the calling thread (err:
 * ENOMEM, or EAGAIN for a limit other than memory, e.g. RLIMIT_NPROC):
 * noted, so that the caller's call fails with it at once instead of
 * retrying a server it never could reach.  _take returns and forgets it
 * (0: none). */
void dmutex__short_note(int err);
int dmutex__short_take(void);
/* Fork child: none of ours runs there (the parent's ids are forgotten). */
void dmutex__own_atfork_child(void);
/* From a long-lived thread of ours, at least once a second: if no thread
 * of the program is left (its main thread called pthread_exit), the
 * process exits with status 0, as it would without ours. */
void dmutex__exit_if_alone(void);
#define DMUTEX__ALONE_LOOK_MS 1000

/* ---- cancel.c: every public call runs with cancellation disabled ---- */
int dmutex__nocancel(void);             /* returns the caller's state */
void dmutex__cancel_restore(int cs);

/* ---- formatting ---- */
/* v in decimal at buf (room for 21 bytes), NUL-terminated; its length.
 * By hand, not snprintf: every request's lengths and numbers. */
static inline size_t
dmutex__udec(char *buf, unsigned long long v)
{
	char tmp[20];
	size_t n = 0, k = 0;

	do
		tmp[n++] = (char)('0' + v % 10);
	while ((v /= 10));
	while (n)
		buf[k++] = tmp[--n];
	buf[k] = '\0';
	return k;
}

#endif
