/*
 * pool: each process runs a pool of worker threads fed by a local queue
 * (pool_queue.c), and every job updates one shared resource, a ledger in
 * Redis read and written with plain GET and SET.
 *
 * The porting decision in one program: the ledger's mutex guards state
 * outside the process, so through the dmutex shim it is distributed and
 * the ledger stays exact across processes and hosts; the queue's locks
 * guard memory of one process, so they stay local (pool_queue.c) and cost
 * no round trip.
 *
 *   pool [-h HOST] [-p PORT] [-k KEY] [-t THREADS] [-n JOBS]
 *
 * adds JOBS to KEY (default pool:ledger), THREADS workers (default 4).
 * Run it as several processes: KEY ends at the sum of their JOBS.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "pool_queue.h"

static const char *host = "127.0.0.1";
static int port = 6379;
static const char *key = "pool:ledger";

/* The shared resource: distributed through the shim. */
static pthread_mutex_t ledger = PTHREAD_MUTEX_INITIALIZER;

static void *
worker(void *arg)
{
	redisContext *c = redisConnect(host, port);
	int *failed = arg;

	if (!c || c->err) {
		*failed = 1;
		return NULL;
	}
	for (int job; (job = queue_pop()) >= 0;) {
		redisReply *r;
		long long v = 0;

		pthread_mutex_lock(&ledger);
		if ((r = redisCommand(c, "GET %s", key))) {
			if (r->type == REDIS_REPLY_STRING)
				v = atoll(r->str);
			freeReplyObject(r);
		}
		if (!(r = redisCommand(c, "SET %s %lld", key, v + 1)))
			*failed = 1;
		else
			freeReplyObject(r);
		pthread_mutex_unlock(&ledger);
	}
	redisFree(c);
	return NULL;
}

int
main(int argc, char **argv)
{
	int threads = 4, jobs = 100, opt, failed[64] = { 0 }, bad = 0;
	pthread_t tid[64];

	while ((opt = getopt(argc, argv, "h:p:k:t:n:")) != -1) {
		switch (opt) {
		case 'h': host = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 'k': key = optarg; break;
		case 't': threads = atoi(optarg); break;
		case 'n': jobs = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: pool [-h HOST] [-p PORT] [-k KEY] [-t THREADS] [-n JOBS]\n");
			return 2;
		}
	}
	if (threads < 1 || threads > 64 || jobs < 0)
		return 2;
	for (int i = 0; i < threads; i++)
		if (pthread_create(&tid[i], NULL, worker, &failed[i]))
			return 1;
	for (int j = 0; j < jobs; j++)
		queue_push(j);
	queue_close();
	for (int i = 0; i < threads; i++) {
		pthread_join(tid[i], NULL);
		bad |= failed[i];
	}
	printf("pool: %d jobs done\n", jobs);
	return bad;
}
