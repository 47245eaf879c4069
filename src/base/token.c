#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdint.h>
#include <string.h>
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
	volatile int busy;              /* dmutex__token is taking from bytes */
} cache;

void
dmutex__token_atfork_child(void)
{
	sodium_memzero(&cache, sizeof cache);
}

static int
all_zero(const unsigned char *p, size_t n)
{
	unsigned char acc = 0;

	for (size_t i = 0; i < n; i++)
		acc |= p[i];
	return !acc;
}

/*
 * A signal handler may take a token (a sem_post there, which POSIX allows)
 * while the thread it interrupted is half way through taking one: the two
 * took the same bytes, and the one that zeroed them second handed out an
 * all-zero token, which the server took for a retry of the first (issue
 * 29).  So the cache is the thread's only while `busy` is clear; a
 * handler that finds it set takes fresh bytes of its own.  And a token is
 * never all zeros, whatever happens.
 */
int
dmutex__token(char out[DMUTEX__TOKEN_HEX + 1])
{
	unsigned char raw[DMUTEX__TOKEN_HEX / 2];

	/* randombytes uses getrandom(2), which is fork-safe. */
	if (dmutex__random_init())
		return EIO;
	if (cache.busy) {
		randombytes_buf(raw, sizeof raw);
	} else {
		unsigned char *p;

		cache.busy = 1;
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		if (cache.left < sizeof raw) {
			randombytes_buf(cache.bytes, sizeof cache.bytes);
			cache.left = sizeof cache.bytes;
		}
		p = cache.bytes + sizeof cache.bytes - cache.left;
		cache.left -= sizeof raw;
		memcpy(raw, p, sizeof raw);
		/* Used once: not left in memory for a core dump to show. */
		sodium_memzero(p, sizeof raw);
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		cache.busy = 0;
	}
	while (all_zero(raw, sizeof raw))
		randombytes_buf(raw, sizeof raw);
	sodium_bin2hex(out, DMUTEX__TOKEN_HEX + 1, raw, sizeof raw);
	sodium_memzero(raw, sizeof raw);
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
dmutex__backoff_ns(int attempt)
{
	/* Jittered so that a crowd that lost its server does not come back
	 * in step. */
	int64_t base = 25 * DMUTEX__MS << (attempt < 3 ? attempt : 3);
	return base / 2 + (int64_t)dmutex__random_uniform(1000) * (base / 2) / 1000;
}
