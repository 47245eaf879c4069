/*
 * queue: producer and consumer threads share a bounded ring buffer.  An
 * ordinary pthread program: one mutex and two condition variables
 * ("not full", "not empty"), all statically initialized.  The ring (slots,
 * head, tail, count) and the number of items taken live in Redis and are
 * read and written with plain GET and SET, so only the lock keeps it right:
 * every item produced must be consumed exactly once.
 *
 * Consumers note each item they take with an INCR of PREFIX:got:ITEM (an
 * audit trail for `check`, not part of the protected state).
 *
 * Built three ways from this file:
 *   queue         plain pthreads: correct within one process only;
 *   queue-shim    through the dmutex shim: correct across processes and hosts;
 *   queue-nolock  -DNO_LOCK: lock calls compiled out, waits become short
 *                 sleeps, to show the damage.
 *
 *   queue setup [-c CAPACITY]
 *   queue run -N TOTAL [-c CAPACITY] [-P PRODUCERS] [-C CONSUMERS] [-n ITEMS]
 *             [-i WORKER] [-T SECONDS]
 *   queue check -N TOTAL
 * common: [-h HOST] [-p PORT] [-k KEYPREFIX].  TOTAL is the number of items
 * all workers produce together: WORKERS x PRODUCERS x ITEMS; worker i makes
 * items i*P*n .. (i+1)*P*n-1.  -T stops a run that is stuck after SECONDS
 * (exit status 3).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#ifdef NO_LOCK
#define LOCK(m) ((void)(m))
#define UNLOCK(m) ((void)(m))
#define WAIT(c, m) ((void)(c), (void)(m), nanosleep(&(struct timespec){ 0, 1000000 }, NULL))
#define SIGNAL(c) ((void)(c))
#define BROADCAST(c) ((void)(c))
#else
#define LOCK(m) pthread_mutex_lock(m)
#define UNLOCK(m) pthread_mutex_unlock(m)
#define WAIT(c, m) pthread_cond_wait(c, m)
#define SIGNAL(c) pthread_cond_signal(c)
#define BROADCAST(c) pthread_cond_broadcast(c)
#endif

static const char *host = "127.0.0.1";
static int port = 6379;
static const char *prefix = "queue";
static long capacity = 8, total = -1;
static int producers = 2, consumers = 2, items = 100, worker = 0, limit_s = 0;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER;
static atomic_long made, taken_here;

static redisContext *
connect_redis(void)
{
	redisContext *c = redisConnect(host, port);

	if (!c || c->err) {
		fprintf(stderr, "queue: cannot connect to Redis at %s:%d: %s\n", host, port,
				c ? c->errstr : "out of memory");
		exit(2);
	}
	return c;
}

static redisReply *
cmd(redisContext *c, const char *fmt, ...)
{
	va_list ap;
	redisReply *r;

	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	if (!r || r->type == REDIS_REPLY_ERROR) {
		fprintf(stderr, "queue: Redis command failed\n");
		exit(2);
	}
	return r;
}

static long
get(redisContext *c, const char *what)
{
	redisReply *r = cmd(c, "GET %s:%s", prefix, what);
	long v = r->type == REDIS_REPLY_STRING ? atol(r->str) : -1;

	freeReplyObject(r);
	return v;
}

static void
set(redisContext *c, const char *what, long v)
{
	freeReplyObject(cmd(c, "SET %s:%s %ld", prefix, what, v));
}

/* Progress: every quarter of what this worker produces; for consumers,
 * who share the work with other processes, every eighth of the total. */
static void
produced(void)
{
	long all = (long)producers * items, n = atomic_fetch_add(&made, 1) + 1;

	if (n % (all / 4 ? all / 4 : 1) == 0) {
		printf("  queue worker %d: produced %3ld%% (%ld/%ld)\n", worker, n * 100 / all, n, all);
		fflush(stdout);
	}
}

static void
consumed(void)
{
	long n = atomic_fetch_add(&taken_here, 1) + 1;

	if (n % (total / 8 ? total / 8 : 1) == 0) {
		printf("  queue worker %d: consumed %ld items (of %ld in all workers)\n", worker, n, total);
		fflush(stdout);
	}
}

static void *
producer(void *arg)
{
	redisContext *c = connect_redis();
	long first = ((long)worker * producers + (long)arg) * items;
	char slot[32];

	for (long k = 0; k < items; k++) {
		LOCK(&lock);
		while (get(c, "count") >= capacity)
			WAIT(&not_full, &lock);
		long tail = get(c, "tail");
		snprintf(slot, sizeof slot, "slot:%ld", tail);
		set(c, slot, first + k);
		set(c, "tail", (tail + 1) % capacity);
		set(c, "count", get(c, "count") + 1);
		SIGNAL(&not_empty);
		UNLOCK(&lock);
		produced();
	}
	redisFree(c);
	return NULL;
}

static void *
consumer(void *arg)
{
	redisContext *c = connect_redis();
	char slot[32];

	(void)arg;
	for (;;) {
		LOCK(&lock);
		while (get(c, "count") <= 0 && get(c, "taken") < total)
			WAIT(&not_empty, &lock);
		long taken = get(c, "taken");
		if (taken >= total) {
			/* All done: let the other consumers see it too. */
			BROADCAST(&not_empty);
			UNLOCK(&lock);
			break;
		}
		long head = get(c, "head");
		snprintf(slot, sizeof slot, "slot:%ld", head);
		long item = get(c, slot);
		set(c, "head", (head + 1) % capacity);
		set(c, "count", get(c, "count") - 1);
		set(c, "taken", taken + 1);
		if (taken + 1 >= total)
			BROADCAST(&not_empty);
		SIGNAL(&not_full);
		UNLOCK(&lock);

		freeReplyObject(cmd(c, "INCR %s:got:%ld", prefix, item));
		consumed();
	}
	redisFree(c);
	return NULL;
}

static void *
watchdog(void *arg)
{
	(void)arg;
	sleep((unsigned)limit_s);
	printf("  queue worker %d: stopped by its %d s time limit\n", worker, limit_s);
	fflush(stdout);
	_exit(3);
}

static int
run(void)
{
	int n = producers + consumers;
	pthread_t *t = calloc(n, sizeof *t), w;

	if (!t)
		return 2;
	if (limit_s > 0 && pthread_create(&w, NULL, watchdog, NULL))
		return 2;
	for (long i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, i < producers ? producer : consumer,
				(void *)(i < producers ? i : i - producers))) {
			fprintf(stderr, "queue: pthread_create failed\n");
			return 2;
		}
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	free(t);
	return 0;
}

static int
setup(void)
{
	redisContext *c = connect_redis();

	/* Drop the ring and the audit trail of an earlier run. */
	freeReplyObject(cmd(c, "EVAL %s 0 %s:*", "local ks = redis.call('KEYS', ARGV[1]) "
			"for i = 1, #ks, 1000 do redis.call('DEL', unpack(ks, i, math.min(i + 999, #ks))) end "
			"return #ks", prefix));
	set(c, "head", 0);
	set(c, "tail", 0);
	set(c, "count", 0);
	set(c, "taken", 0);
	redisFree(c);
	return 0;
}

static int
check(void)
{
	redisContext *c = connect_redis();
	long once = 0, lost = 0, dup = 0, seen;
	redisReply *r;

	for (long i = 0; i < total; i++)
		redisAppendCommand(c, "GET %s:got:%ld", prefix, i);
	for (long i = 0; i < total; i++) {
		long v;
		if (redisGetReply(c, (void **)&r) != REDIS_OK) {
			fprintf(stderr, "queue: Redis failed\n");
			return 2;
		}
		v = r->type == REDIS_REPLY_STRING ? atol(r->str) : 0;
		freeReplyObject(r);
		if (v == 0)
			lost++;
		else if (v == 1)
			once++;
		else
			dup += v - 1;
	}
	r = cmd(c, "EVAL %s 0 %s:got:*", "return #redis.call('KEYS', ARGV[1])", prefix);
	seen = r->integer;
	freeReplyObject(r);
	redisFree(c);
	printf("items: %ld produced, %ld consumed exactly once, %ld lost, %ld duplicates, %ld bogus",
			total, once, lost, dup, seen - (total - lost));
	if (once == total && seen == total) {
		printf("  -> OK\n");
		return 0;
	}
	printf("  -> BROKEN\n");
	return 1;
}

int
main(int argc, char **argv)
{
	int o;

	if (argc < 2) {
		fprintf(stderr, "usage: queue setup|run|check -N total [-h host] [-p port] [-k prefix] "
				"[-c capacity] [-P producers] [-C consumers] [-n items] [-i worker] [-T seconds]\n");
		return 2;
	}
	optind = 2;
	while ((o = getopt(argc, argv, "h:p:k:c:N:P:C:n:i:T:")) != -1) {
		switch (o) {
		case 'h': host = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 'k': prefix = optarg; break;
		case 'c': capacity = atol(optarg); break;
		case 'N': total = atol(optarg); break;
		case 'P': producers = atoi(optarg); break;
		case 'C': consumers = atoi(optarg); break;
		case 'n': items = atoi(optarg); break;
		case 'i': worker = atoi(optarg); break;
		case 'T': limit_s = atoi(optarg); break;
		default: return 2;
		}
	}
	if (capacity < 1 || producers < 0 || consumers < 0 || items < 0) {
		fprintf(stderr, "queue: bad arguments\n");
		return 2;
	}
	if (!strcmp(argv[1], "setup"))
		return setup();
	if (total < 0) {
		fprintf(stderr, "queue: -N TOTAL is required\n");
		return 2;
	}
	if (!strcmp(argv[1], "run"))
		return run();
	if (!strcmp(argv[1], "check"))
		return check();
	fprintf(stderr, "queue: unknown command '%s'\n", argv[1]);
	return 2;
}
