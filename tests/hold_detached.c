/*
 * LD_PRELOAD helper for tls::cli_leaves_no_detached_thread_at_exit: a
 * detached thread whose function has returned is held there, before its
 * thread-specific destructors, until the process is exiting (this
 * object's destructor, after every atexit handler, OPENSSL_cleanup
 * included, and before LeakSanitizer's check); then it is let go and
 * waited for.  This is the worst case of a detached thread racing exit:
 * OpenSSL's keys are gone when its destructors would run, so what the
 * thread kept per thread (error queue, random generators) is lost, and
 * LeakSanitizer says so.  Joinable threads are not held: their joiner
 * waits for them as the program says.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HELD_MAX 64

static int released, nheld;
static pid_t held[HELD_MAX];

struct start {
	void *(*fn)(void *);
	void *arg;
};

static void
nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	nanosleep(&ts, NULL);
}

static int
detached(void)
{
	pthread_attr_t a;
	int st = PTHREAD_CREATE_JOINABLE;

	if (pthread_getattr_np(pthread_self(), &a))
		return 0;
	pthread_attr_getdetachstate(&a, &st);
	pthread_attr_destroy(&a);
	return st == PTHREAD_CREATE_DETACHED;
}

static void *
wrap(void *p)
{
	struct start s = *(struct start *)p;
	void *r;
	int i;

	free(p);
	r = s.fn(s.arg);
	if (!detached())
		return r;
	i = __atomic_fetch_add(&nheld, 1, __ATOMIC_SEQ_CST);
	if (i < HELD_MAX)
		__atomic_store_n(&held[i], gettid(), __ATOMIC_SEQ_CST);
	/* A bound, in case the process never exits. */
	for (int n = 0; n < 60000 && !__atomic_load_n(&released, __ATOMIC_SEQ_CST); n++)
		nap_ms(1);
	return r;
}

int
pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
	static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
	struct start *s = malloc(sizeof *s);
	int err;

	if (!real)
		real = (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))
			dlsym(RTLD_NEXT, "pthread_create");
	if (!s)
		return real(t, a, fn, arg);
	s->fn = fn;
	s->arg = arg;
	if ((err = real(t, a, wrap, s)))
		free(s);
	return err;
}

__attribute__((destructor)) static void
let_go(void)
{
	int n = __atomic_load_n(&nheld, __ATOMIC_SEQ_CST);

	__atomic_store_n(&released, 1, __ATOMIC_SEQ_CST);
	if (n > HELD_MAX)
		n = HELD_MAX;
	/* Until each held thread is gone (its destructors have run). */
	for (int i = 0; i < n; i++) {
		char p[64];
		struct stat sb;
		snprintf(p, sizeof p, "/proc/self/task/%d", (int)held[i]);
		for (int k = 0; k < 10000 && held[i] && !stat(p, &sb); k++)
			nap_ms(1);
	}
	if (getenv("HOLD_DETACHED_LOG"))
		fprintf(stderr, "hold_detached: %d detached thread(s) were held to exit\n", n);
}
