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
dmutex__backoff_ns(int attempt)
{
	/* Jittered so that a crowd that lost its server does not come back
	 * in step. */
	int64_t base = 25 * DMUTEX__MS << (attempt < 3 ? attempt : 3);
	return base / 2 + (int64_t)dmutex__random_uniform(1000) * (base / 2) / 1000;
}
