/*
 * Threads of one process on one read-write lock, without criterion (whose
 * sandbox does not run under ThreadSanitizer): readers that join the
 * process's one share and leave it, recursive reads, writers that exclude
 * everyone, short leases renewed meanwhile.  Plain C counters guarded only
 * by the rwlock detect a violation; under TSan a missing happens-before
 * between a writer and the next reader is a reported race.  Exits 0 only
 * if every call returned what the contract says.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dmutex.h"
#include "harness.h"

#define THREADS 6
#define ITERS 120

static struct th_redis srv;
static drwlock_t rw;
static long written;                /* guarded by rw alone */
static atomic_int inside_r, inside_w, failures;

#define CHECK(expr, want) do { \
	int rc_ = (expr); \
	if (rc_ != (want)) { \
		fprintf(stderr, "%s:%d: %s = %d (%s), want %d\n", __FILE__, __LINE__, #expr, \
				rc_, dmutex_strerror(rc_), (want)); \
		atomic_fetch_add(&failures, 1); \
	} \
} while (0)

static void *
worker(void *arg)
{
	long id = (long)arg, seen;

	for (int i = 0; i < ITERS; i++) {
		if ((i + id) % 4 == 0) {
			CHECK(drwlock_wrlock(&rw), 0);
			if (atomic_fetch_add(&inside_w, 1) != 0 || atomic_load(&inside_r) != 0)
				atomic_fetch_add(&failures, 1);
			written++;
			CHECK(drwlock_rdlock(&rw), EDEADLK);
			atomic_fetch_sub(&inside_w, 1);
			CHECK(drwlock_unlock(&rw), 0);
		} else {
			int err = (i & 1) ? drwlock_tryrdlock(&rw) : drwlock_rdlock(&rw);
			if (err == EBUSY)
				continue;
			CHECK(err, 0);
			atomic_fetch_add(&inside_r, 1);
			if (atomic_load(&inside_w) != 0)
				atomic_fetch_add(&failures, 1);
			seen = written;
			CHECK(drwlock_rdlock(&rw), 0);       /* recursive */
			CHECK(drwlock_wrlock(&rw), EDEADLK); /* no upgrade */
			if (written != seen)
				atomic_fetch_add(&failures, 1);
			CHECK(drwlock_unlock(&rw), 0);
			atomic_fetch_sub(&inside_r, 1);
			CHECK(drwlock_unlock(&rw), 0);
		}
	}
	return NULL;
}

int
main(void)
{
	dmutex_client_t *cli;
	dmutex_attr_t a;
	pthread_t t[THREADS];
	long want = 0;

	if (th_redis_start(&srv, NULL))
		return 2;
	CHECK(dmutex_client_open(&cli, srv.url), 0);
	CHECK(dmutex_attr_init(&a), 0);
	CHECK(dmutex_attr_setclient(&a, cli), 0);
	CHECK(dmutex_attr_setlease(&a, 300), 0);     /* renewals during the run */
	CHECK(drwlock_init(&rw, "stress-rw", &a), 0);
	for (long i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	for (long i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		for (int k = 0; k < ITERS; k++)
			want += (k + i) % 4 == 0;
	}
	if (written != want) {
		fprintf(stderr, "written %ld, want %ld\n", written, want);
		atomic_fetch_add(&failures, 1);
	}
	CHECK(drwlock_destroy(&rw), 0);
	CHECK(dmutex_client_close(cli), 0);
	th_redis_stop(&srv);
	if (failures)
		fprintf(stderr, "%d failures\n", failures);
	return failures != 0;
}
