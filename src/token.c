#include <errno.h>
#include <sodium.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

int
dmutex__token(char out[DMUTEX__TOKEN_HEX + 1])
{
	unsigned char raw[DMUTEX__TOKEN_HEX / 2];

	/* sodium_init is idempotent and thread-safe; randombytes uses
	 * getrandom(2), which is fork-safe. */
	if (sodium_init() < 0)
		return EIO;
	randombytes_buf(raw, sizeof raw);
	sodium_bin2hex(out, DMUTEX__TOKEN_HEX + 1, raw, sizeof raw);
	return 0;
}

long
dmutex__tid(void)
{
	return (long)syscall(SYS_gettid);
}

int64_t
dmutex__now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
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
	dmutex__ns_to_ts(until_ns, &ts);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}
