/*
 * While `run` waits on a terminal: one status line, rewritten every second,
 * saying who holds the lock ("waiting for 'nightly', held by host1 pid 4242
 * for 12 s").  Its own thread and its own Redis connection: the wait itself
 * is the library's and must not be disturbed.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define REFRESH_MS 1000

struct cli_waitshow {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop;
	char *url;
	char name[CLI_NAME_TEXT];
	const char *raw_name;
};

/* Quiet: a display that cannot read Redis just says less. */
static void
describe(struct cli_conn *cc, int *connected, const char *name, char *buf, size_t len)
{
	struct cli_lock l;
	char holder[512], dur[32];

	buf[0] = '\0';
	if (!*connected) {
		if (cli_conn_connect(cc, 1))
			return;
		*connected = 1;
	}
	for (size_t n = 0; n < cc->nnodes; n++) {
		if (!cc->ctx[n] || !cli_conn_serves(cc, n, name))
			continue;
		if (cli_inspect(cc->ctx[n], cc->prefix, name, &l)) {
			/* A broken context is not reused: connect again next time. */
			dmutex__conn_free(cc->ctx[n]);
			cc->ctx[n] = NULL;
			*connected = 0;
			cli_lock_free(&l);
			continue;
		}
		if (l.held) {
			cli_holder(holder, sizeof holder, &l, 0);
			if (l.since_ms >= 0) {
				cli_duration(dur, sizeof dur, cli_wall_ms() - l.since_ms);
				snprintf(buf, len, "held by %s for %s", holder, dur);
			} else {
				snprintf(buf, len, "held by %s", holder);
			}
			cli_lock_free(&l);
			return;
		}
		cli_lock_free(&l);
	}
}

static void *
loop(void *p)
{
	struct cli_waitshow *w = p;
	struct cli_conn cc;
	int parsed, connected = 0;
	char what[700];
	struct timespec until;

	/* A quiet parse: run already opened a client with this URL. */
	parsed = cli_conn_parse(&cc, w->url) == 0;
	pthread_mutex_lock(&w->mu);
	while (!w->stop) {
		pthread_mutex_unlock(&w->mu);
		if (parsed)
			describe(&cc, &connected, w->raw_name, what, sizeof what);
		else
			what[0] = '\0';
		/* \r and erase-line: one line, rewritten in place. */
		fprintf(stderr, "\r\033[Kdmutex: waiting for '%s'%s%s", w->name,
				what[0] ? ", " : "", what);
		fflush(stderr);
		pthread_mutex_lock(&w->mu);
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_sec += REFRESH_MS / 1000;
		while (!w->stop && pthread_cond_timedwait(&w->cv, &w->mu, &until) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&w->mu);
	fputs("\r\033[K", stderr);
	fflush(stderr);
	if (parsed)
		cli_conn_close(&cc);
	return NULL;
}

struct cli_waitshow *
cli_waitshow_start(const char *url, const char *name)
{
	struct cli_waitshow *w = calloc(1, sizeof *w);
	pthread_condattr_t ca;
	sigset_t all, old;
	int err;

	if (!w || !(w->url = strdup(url))) {
		free(w);
		return NULL;
	}
	cli_name_text(w->name, name);
	w->raw_name = name;
	pthread_mutex_init(&w->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cv, &ca);
	pthread_condattr_destroy(&ca);
	/* Signals are the main thread's business. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&w->thread, NULL, loop, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		pthread_cond_destroy(&w->cv);
		pthread_mutex_destroy(&w->mu);
		free(w->url);
		free(w);
		return NULL;
	}
	return w;
}

void
cli_waitshow_stop(struct cli_waitshow *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	free(w->url);
	free(w);
}

void
cli_describe_holder(const char *url, const char *name, char *buf, size_t len)
{
	struct cli_conn cc;
	int connected = 0;

	buf[0] = '\0';
	if (cli_conn_parse(&cc, url))
		return;
	describe(&cc, &connected, name, buf, len);
	cli_conn_close(&cc);
}
