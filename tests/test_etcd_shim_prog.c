/*
 * A plain pthread program, built through the shim by tests/meson.build and
 * run as three processes over etcd:// by tests/test_etcd_faults.c:
 *
 *   test_etcd_shim_prog FILE THREADS ITERS
 *
 * THREADS threads each add 1 to the number in FILE ITERS times, reading
 * and writing the file inside one mutex (a recursive one nested in it for
 * good measure).  The read and the write are apart long enough that
 * processes which did not exclude one another would lose additions: the
 * final count is exact only if the mutex holds across processes.
 *
 *   test_etcd_shim_prog turns FILE PROC ITERS
 *
 * Two threads of process PROC (0..2) take turns with the other processes'
 * through one condition variable: slot 2 * PROC + thread appends its digit
 * to FILE when the file's length says it is its turn, then broadcasts.
 * Run as three processes, FILE ends as "012345" ITERS times, exactly.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t counter_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t nested = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static const char *path;
static int iters;

static int add_one(void)
{
	char buf[32] = "";
	int fd = open(path, O_RDWR);
	if (fd < 0)
		return 1;
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
	if (n <= 0) {
		close(fd);
		return 2;
	}
	buf[n] = '\0';
	long v = atol(buf);
	struct timespec gap = { 0, 3 * 1000000L };
	nanosleep(&gap, NULL);
	int len = snprintf(buf, sizeof buf, "%ld\n", v + 1);
	int rc = pwrite(fd, buf, (size_t)len, 0) == len ? 0 : 3;
	close(fd);
	return rc;
}

static void *worker(void *arg)
{
	(void)arg;
	for (int i = 0; i < iters; i++) {
		if (pthread_mutex_lock(&counter_mu) != 0)
			return (void *)10;
		if (pthread_mutex_lock(&nested) != 0 || pthread_mutex_lock(&nested) != 0)
			return (void *)11;
		int rc = add_one();
		pthread_mutex_unlock(&nested);
		pthread_mutex_unlock(&nested);
		if (pthread_mutex_unlock(&counter_mu) != 0 || rc != 0)
			return (void *)12;
	}
	return NULL;
}

static pthread_mutex_t turn_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_cv = PTHREAD_COND_INITIALIZER;
static int proc_index;

static long file_len(void)
{
	FILE *f = fopen(path, "r");
	long n;
	if (!f)
		return -1;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fclose(f);
	return n;
}

static void *turn_worker(void *arg)
{
	int slot = 2 * proc_index + (int)(intptr_t)arg;
	for (int i = 0; i < iters; i++) {
		if (pthread_mutex_lock(&turn_mu))
			return (void *)20;
		long n;
		while ((n = file_len()) >= 0 && n % 6 != slot)
			if (pthread_cond_wait(&turn_cv, &turn_mu))
				return (void *)21;
		FILE *f = fopen(path, "a");
		if (n < 0 || !f || fputc('0' + slot, f) == EOF || fclose(f))
			return (void *)22;
		pthread_cond_broadcast(&turn_cv);
		if (pthread_mutex_unlock(&turn_mu))
			return (void *)23;
	}
	return NULL;
}

static int turns(char **argv)
{
	pthread_t t[2];
	void *r[2];
	path = argv[2];
	proc_index = atoi(argv[3]);
	iters = atoi(argv[4]);
	for (intptr_t i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, turn_worker, (void *)i);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], &r[i]);
	return r[0] || r[1] ? (int)(intptr_t)(r[0] ? r[0] : r[1]) : 0;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "turns"))
		return turns(argv);
	if (argc != 4)
		return 64;
	path = argv[1];
	int threads = atoi(argv[2]);
	iters = atoi(argv[3]);
	pthread_t t[16];
	if (threads < 1 || threads > 16)
		return 64;
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, worker, NULL);
	int bad = 0;
	for (int i = 0; i < threads; i++) {
		void *r;
		pthread_join(t[i], &r);
		if (r) {
			fprintf(stderr, "thread %d failed: %ld\n", i, (long)(intptr_t)r);
			bad = 1;
		}
	}
	return bad;
}
