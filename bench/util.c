/* Time, samples, and the hiredis helpers the floor and the counters use. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

int64_t
bench_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void
bench_sleep_ns(int64_t ns)
{
	int64_t until = bench_now_ns() + ns;
	struct timespec ts = { (time_t)(until / 1000000000), (long)(until % 1000000000) };
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

int
samples_init(struct samples *s, size_t cap)
{
	s->n = 0;
	s->cap = cap;
	s->v = malloc(cap * sizeof *s->v);
	return s->v ? 0 : ENOMEM;
}

void
samples_add(struct samples *s, int64_t v)
{
	if (s->n < s->cap)
		s->v[s->n++] = v;
}

int
samples_lock_pairs(struct samples *s, dmutex_t *m, int batches, int batch)
{
	int err = 0;

	for (int k = 0; k < batches && !err; k++) {
		int64_t t0 = bench_now_ns();
		for (int i = 0; i < batch; i++)
			if ((err = dmutex_lock(m)) || (err = dmutex_unlock(m)))
				break;
		samples_add(s, (bench_now_ns() - t0 + batch / 2) / batch);
	}
	return err;
}

static int
cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

double
samples_pct(struct samples *s, double pct)
{
	size_t k;

	if (!s->n)
		return NAN;
	qsort(s->v, s->n, sizeof *s->v, cmp_i64);
	/* nearest rank: the smallest value with at least pct % at or below it */
	k = (size_t)ceil(pct / 100.0 * (double)s->n);
	if (k < 1)
		k = 1;
	return (double)s->v[k - 1];
}

void
samples_free(struct samples *s)
{
	free(s->v);
	s->v = NULL;
	s->n = s->cap = 0;
}

redisContext *
bench_connect(const struct bench_target *t)
{
	struct timeval tv = { 5, 0 };
	redisContext *c = t->path[0] ? redisConnectUnixWithTimeout(t->path, tv)
			: redisConnectWithTimeout(t->host, t->port, tv);
	redisReply *r = NULL;

	if (!c || c->err) {
		fprintf(stderr, "bench: connect: %s\n", c ? c->errstr : "out of memory");
		goto fail;
	}
	redisSetTimeout(c, tv);
	if (t->pass[0]) {
		r = t->user[0] ? redisCommand(c, "AUTH %s %s", t->user, t->pass)
				: redisCommand(c, "AUTH %s", t->pass);
		if (!r || r->type == REDIS_REPLY_ERROR) {
			fprintf(stderr, "bench: AUTH failed\n");
			goto fail;
		}
		freeReplyObject(r);
		r = NULL;
	}
	if (t->db) {
		r = redisCommand(c, "SELECT %d", t->db);
		if (!r || r->type == REDIS_REPLY_ERROR) {
			fprintf(stderr, "bench: SELECT %d failed\n", t->db);
			goto fail;
		}
		freeReplyObject(r);
	}
	return c;
fail:
	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
	return NULL;
}

redisReply *
bench_cmd(redisContext *c, const char *fmt, ...)
{
	va_list ap;
	redisReply *r;

	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	if (!r) {
		fprintf(stderr, "bench: redis: %s\n", c->errstr);
		exit(2);
	}
	return r;
}

void
bench_token(char out[33])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char raw[16];
	size_t got = 0;

	while (got < sizeof raw) {
		ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
		if (n > 0)
			got += (size_t)n;
	}
	for (size_t i = 0; i < sizeof raw; i++) {
		out[2 * i] = hex[raw[i] >> 4];
		out[2 * i + 1] = hex[raw[i] & 15];
	}
	out[32] = '\0';
}

/* Commands a client sends, as opposed to those a script calls inside.  SET
 * is the hand-made cycle's; the library's scripts never call it. */
static int
is_client_command(const char *name)
{
	static const char *const sent[] = { "evalsha", "eval", "subscribe", "unsubscribe",
		"psubscribe", "punsubscribe", "ping", "auth", "select", "hello", "set", NULL };
	for (int i = 0; sent[i]; i++)
		if (!strcmp(name, sent[i]))
			return 1;
	return 0;
}

/* The server's own CPU (INFO cpu: user + system, its I/O included,
 * which commandstats leaves out), in ns; -1 if it does not say. */
int64_t
bench_server_cpu_ns(redisContext *c)
{
	redisReply *r = bench_cmd(c, "INFO cpu");
	double user = -1, sys = -1;
	const char *at;

	if (r->type == REDIS_REPLY_STRING) {
		if ((at = strstr(r->str, "used_cpu_user:")))
			sscanf(at, "used_cpu_user:%lf", &user);
		if ((at = strstr(r->str, "used_cpu_sys:")))
			sscanf(at, "used_cpu_sys:%lf", &sys);
	}
	freeReplyObject(r);
	return user < 0 || sys < 0 ? -1 : (int64_t)((user + sys) * 1e9);
}

int
bench_cmdstats(redisContext *c, struct cmdstats *out)
{
	redisReply *r = bench_cmd(c, "INFO commandstats");
	char *line, *save = NULL;

	memset(out, 0, sizeof *out);
	if (r->type != REDIS_REPLY_STRING) {
		freeReplyObject(r);
		return -1;
	}
	/* cmdstat_NAME:calls=N,usec=N,... */
	for (line = strtok_r(r->str, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
		char name[64];
		long long calls = 0, usec = 0;
		if (sscanf(line, "cmdstat_%63[^:]:calls=%lld,usec=%lld", name, &calls, &usec) < 2)
			continue;
		if (!strcmp(name, "info"))
			continue;
		out->total += calls;
		if (is_client_command(name)) {
			out->client += calls;
			out->usec_client += usec;
		}
		if (!strcmp(name, "evalsha") || !strcmp(name, "eval"))
			out->scripts += calls;
		if (!strcmp(name, "evalsha"))
			out->usec_evalsha += usec;
		if (!strcmp(name, "subscribe"))
			out->subscribe += calls;
	}
	freeReplyObject(r);
	return 0;
}

int64_t
bench_process_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Linux: the CPU clock of any thread of this process, by its tid (what
 * glibc's pthread_getcpuclockid builds from a pthread_t; the library's
 * threads are not ours to have a pthread_t for). */
#define THREAD_CPUCLOCK(tid) ((clockid_t)((~(unsigned)(tid) << 3) | 6u))

int64_t
bench_other_threads_cpu_ns(void)
{
	long self = (long)syscall(SYS_gettid);
	int64_t sum = 0;
	struct dirent *e;
	DIR *d = opendir("/proc/self/task");

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		long tid = strtol(e->d_name, NULL, 10);
		struct timespec ts;
		if (tid <= 0 || tid == self)
			continue;
		if (clock_gettime(THREAD_CPUCLOCK(tid), &ts) == 0)
			sum += (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	}
	closedir(d);
	return sum;
}
