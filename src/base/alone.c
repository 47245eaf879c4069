/*
 * The library's own threads (the wake-up listener, the renewer, the
 * Sentinel watcher, dialers) must not keep a process alive that the
 * program has ended: a program whose last thread, the main one, calls
 * pthread_exit ends there with glibc (exit(0) from the last thread), and
 * ours, which block every signal, would otherwise keep it running for
 * ever, SIGTERM pending and never delivered (LTP sem_init 3-1).  Each
 * registers its thread id; the long-lived ones look about once a second
 * whether any other thread that is not a zombie is left, and if none, the
 * process exits as glibc would have.  A thread of ours not (yet)
 * registered counts as the program's: the error is always to stay.
 */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "log.h"

#define OWN_MAX 64
#define LOOK_NS (1000 * DMUTEX__MS)

static _Thread_local int short_err;     /* dmutex__short_note */
static long own[OWN_MAX];               /* atomic; 0 is a free slot */
static int64_t last_look;               /* atomic */
static int leaving;                     /* atomic */

void
dmutex__own_thread_begin(void)
{
	long tid = dmutex__tid();

	for (int i = 0; i < OWN_MAX; i++) {
		long expected = 0;

		if (__atomic_compare_exchange_n(&own[i], &expected, tid, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return;
	}
}

void
dmutex__own_thread_end(void)
{
	long tid = dmutex__tid();

	for (int i = 0; i < OWN_MAX; i++) {
		long expected = tid;

		if (__atomic_compare_exchange_n(&own[i], &expected, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return;
	}
}

void
dmutex__short_note(int err)
{
	short_err = err;
}

int
dmutex__short_take(void)
{
	int err = short_err;

	short_err = 0;
	return err;
}

void
dmutex__own_atfork_child(void)
{
	for (int i = 0; i < OWN_MAX; i++)
		__atomic_store_n(&own[i], 0, __ATOMIC_RELEASE);
	__atomic_store_n(&leaving, 0, __ATOMIC_RELEASE);
}

static int
is_own(long tid)
{
	for (int i = 0; i < OWN_MAX; i++)
		if (__atomic_load_n(&own[i], __ATOMIC_ACQUIRE) == tid)
			return 1;
	return 0;
}

/* Whether thread tid of this process is gone but not reaped (a main
 * thread that called pthread_exit stays a zombie until the process ends). */
static int
is_zombie(const char *tid)
{
	char path[300], buf[512], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof path, "/proc/self/task/%s/stat", tid);
	if (!(f = fopen(path, "re")))
		return 1;       /* gone meanwhile */
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* The state follows the command name, which may hold ")". */
	if (!(p = strrchr(buf, ')')) || p[1] != ' ')
		return 0;
	return p[2] == 'Z' || p[2] == 'X';
}

/* 1 if every live thread of the process is one of ours; 0 if another is
 * left, or it cannot be told. */
static int
alone(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	int others = 0, ours = 0;

	if (!d)
		return 0;
	while (!others && (de = readdir(d))) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		if (is_own(strtol(de->d_name, NULL, 10)))
			ours++;
		else if (!is_zombie(de->d_name))
			others = 1;
	}
	closedir(d);
	return !others && ours;
}

static void *
leave(void *arg)
{
	(void)arg;
	exit(0);
}

void
dmutex__exit_if_alone(void)
{
	int64_t now = dmutex__now_ns(), last = __atomic_load_n(&last_look, __ATOMIC_ACQUIRE);
	sigset_t all, old;
	pthread_t t;

	if (now - last < LOOK_NS || __atomic_load_n(&leaving, __ATOMIC_ACQUIRE) ||
			!__atomic_compare_exchange_n(&last_look, &last, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return;
	if (!alone() || __atomic_exchange_n(&leaving, 1, __ATOMIC_ACQ_REL))
		return;
	dmutex__log(DMUTEX_LOG_INFO, "every thread of the program has ended (the main thread called "
			"pthread_exit): the process exits, as it would without the library's own threads");
	/* From a thread of its own: exit's handlers stop and join ours. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (pthread_create(&t, NULL, leave, NULL))
		exit(0);        /* not even that: exit from here, as best we can */
	pthread_detach(t);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}
