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

/* Lines on stderr often carry a server's bytes (an error reply, a key):
 * control bytes as \xNN, so that none reaches a terminal raw.  A logger
 * of the program's own gets the text as it is. */
static void
write_stderr(const char *msg)
{
	static const char hex[] = "0123456789abcdef";
	char out[8 + 4 * 512 + 2];
	size_t o = 8;

	memcpy(out, "dmutex: ", 8);
	for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
		if (*p >= 0x20 && *p != 0x7f) {
			out[o++] = (char)*p;
			continue;
		}
		out[o++] = '\\';
		out[o++] = 'x';
		out[o++] = hex[*p >> 4];
		out[o++] = hex[*p & 15];
	}
	out[o++] = '\n';
	if (write(STDERR_FILENO, out, o) < 0)
		return;         /* nowhere to say it */
}

void
dmutex__log(int level, const char *fmt, ...)
{
	char msg[520];
	va_list ap;
	void (*fn)(int, const char *, void *);
	void *arg;
	int cs;

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
	vsnprintf(msg + 8, sizeof msg - 8, fmt, ap);
	va_end(ap);
	/* write(2), and whatever the program's logger does, may be
	 * cancellation points; a log line is said from places that hold a
	 * lock of ours (the shim's sem_open, a static object's binding), and
	 * no call that logs may be cancelled by it. */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
	if (fn)
		fn(level, msg + 8, arg);
	else
		write_stderr(msg + 8);
	pthread_setcancelstate(cs, NULL);
}
