/*
 * pool's work queue: a ring guarded by a mutex and two condition
 * variables, shared by the threads of one process and by nothing else.
 *
 * Built through the dmutex shim, its locks have no reason to be
 * distributed: another process never sees this queue.  The define below
 * (or -DDMUTEX_SHIM_LOCAL_FILE on the command line, or DMUTEX_SHIM_LOCAL=
 * "pool_queue.c:*" at run time) keeps every mutex and condition variable
 * of this file plain pthread objects of the process.  Without the shim it
 * means nothing.  pool-shim-all (-DPOOL_ALL_DISTRIBUTED) leaves it out: the
 * benchmark's "classic thread pool with every object distributed" (bench/
 * pool.c), the program as a port that distributes everything would run.
 */
#ifndef POOL_ALL_DISTRIBUTED
#define DMUTEX_SHIM_LOCAL_FILE
#endif
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "pool_queue.h"

#define SLOTS 8

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER;
static int ring[SLOTS], head, count, closed;

void
queue_push(int job)
{
	pthread_mutex_lock(&mu);
	while (count == SLOTS)
		pthread_cond_wait(&not_full, &mu);
	ring[(head + count++) % SLOTS] = job;
	pthread_cond_signal(&not_empty);
	pthread_mutex_unlock(&mu);
}

int
queue_pop(void)
{
	int job = -1;

	pthread_mutex_lock(&mu);
	while (count == 0 && !closed)
		pthread_cond_wait(&not_empty, &mu);
	if (count) {
		job = ring[head];
		head = (head + 1) % SLOTS;
		count--;
		pthread_cond_signal(&not_full);
	}
	pthread_mutex_unlock(&mu);
	return job;
}

void
queue_close(void)
{
	pthread_mutex_lock(&mu);
	closed = 1;
	pthread_cond_broadcast(&not_empty);
	pthread_mutex_unlock(&mu);
}
