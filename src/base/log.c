#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lockorder.h"
#include "log.h"

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static void (*log_fn)(int, const char *, void *);
static void *log_arg;
static pthread_once_t level_once = PTHREAD_ONCE_INIT;
static int env_level = DMUTEX_LOG_WARN;

static void
read_env_level(void)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	const char *v = getenv("DMUTEX_LOG");
	if (!v || !*v)
		return;
	if (!strcmp(v, "off")) {
		env_level = -1;
		return;
	}
	for (int i = 0; i < 4; i++)
		if (!strcmp(v, names[i])) {
			env_level = i;
			return;
		}
	fprintf(stderr, "dmutex: DMUTEX_LOG=%s is not off|error|warn|info|debug; using warn\n", v);
}

void
dmutex_set_logger(void (*log)(int level, const char *msg, void *arg), void *arg)
{
	dmutex__mu_lock(&log_mu, DMUTEX__LK_LOG, "log");
	log_fn = log;
	log_arg = arg;
	dmutex__mu_unlock(&log_mu, DMUTEX__LK_LOG);
}

void
dmutex__log_lock(void)
{
	dmutex__mu_lock(&log_mu, DMUTEX__LK_LOG, "log");
}

void
dmutex__log_unlock(void)
{
	dmutex__mu_unlock(&log_mu, DMUTEX__LK_LOG);
}

int
dmutex__log_enabled(int level)
{
	int custom;
	dmutex__mu_lock(&log_mu, DMUTEX__LK_LOG, "log");
	custom = log_fn != NULL;
	dmutex__mu_unlock(&log_mu, DMUTEX__LK_LOG);
	if (custom)
		return 1;
	pthread_once(&level_once, read_env_level);
	return level <= env_level;
}

void
dmutex__log(int level, const char *fmt, ...)
{
	char msg[520];
	va_list ap;
	int n;
	void (*fn)(int, const char *, void *);
	void *arg;

	dmutex__mu_lock(&log_mu, DMUTEX__LK_LOG, "log");
	fn = log_fn;
	arg = log_arg;
	dmutex__mu_unlock(&log_mu, DMUTEX__LK_LOG);
	if (!fn) {
		pthread_once(&level_once, read_env_level);
		if (level > env_level)
			return;
	}
	/* Without stdio: fprintf to an unbuffered stderr puts an 8 KiB buffer
	 * on the stack, and a thread made with PTHREAD_STACK_MIN (16 KiB)
	 * that logged from deep in a call overflowed it (LTP
	 * pthread_cond_broadcast 1-2, a connection timing out). */
	memcpy(msg, "dmutex: ", 8);
	va_start(ap, fmt);
	n = vsnprintf(msg + 8, sizeof msg - 9, fmt, ap);
	va_end(ap);
	if (fn) {
		fn(level, msg + 8, arg);
		return;
	}
	n = n < 0 ? 0 : n > (int)sizeof msg - 10 ? (int)sizeof msg - 10 : n;
	msg[8 + n] = '\n';
	if (write(STDERR_FILENO, msg, (size_t)n + 9) < 0)
		return;         /* nowhere to say it */
}
