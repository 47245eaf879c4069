/*
 * bank: threads move money between accounts.  An ordinary pthread program:
 * one mutex per account (initialized in a loop) and one for the transfer
 * counter (static).  The balances live in Redis and are read and written
 * with plain GET and SET, so only the locks keep the books right: the total
 * must stay what `setup` put in, and the counter must count every transfer.
 *
 * Built three ways from this file:
 *   bank         plain pthreads: correct within one process only;
 *   bank-shim    through the dmutex shim: correct across processes and hosts;
 *   bank-nolock  -DNO_LOCK: the lock calls compiled out, to show the damage.
 *
 *   bank setup [-a ACCOUNTS]              fresh accounts of 1000 each
 *   bank run [-a ACCOUNTS] [-t THREADS] [-n TRANSFERS] [-i WORKER]
 *   bank check [-a ACCOUNTS] [-e EXPECTED_TRANSFERS]
 * common: [-h HOST] [-p PORT] [-k KEYPREFIX] (Redis with the balances).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#ifdef NO_LOCK
#define LOCK(m) ((void)(m))
#define UNLOCK(m) ((void)(m))
#else
#define LOCK(m) pthread_mutex_lock(m)
#define UNLOCK(m) pthread_mutex_unlock(m)
#endif

#define START_BALANCE 1000

static const char *host = "127.0.0.1";
static int port = 6379;
static const char *prefix = "bank";
static int accounts = 8, threads = 4, transfers = 200, worker = 0;

static pthread_mutex_t *account_lock;
static pthread_mutex_t counter_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_long done;

static redisContext *
connect_redis(void)
{
	redisContext *c = redisConnect(host, port);

	if (!c || c->err) {
		fprintf(stderr, "bank: cannot connect to Redis at %s:%d: %s\n", host, port,
				c ? c->errstr : "out of memory");
		exit(2);
	}
	return c;
}

static long
get(redisContext *c, const char *what, int i)
{
	redisReply *r = redisCommand(c, "GET %s:%s:%d", prefix, what, i);
	long v;

	if (!r || r->type == REDIS_REPLY_ERROR) {
		fprintf(stderr, "bank: GET failed\n");
		exit(2);
	}
	v = r->type == REDIS_REPLY_STRING ? atol(r->str) : 0;
	freeReplyObject(r);
	return v;
}

static void
set(redisContext *c, const char *what, int i, long v)
{
	redisReply *r = redisCommand(c, "SET %s:%s:%d %ld", prefix, what, i, v);

	if (!r || r->type == REDIS_REPLY_ERROR) {
		fprintf(stderr, "bank: SET failed\n");
		exit(2);
	}
	freeReplyObject(r);
}

static void
progress(void)
{
	long total = (long)threads * transfers, n = atomic_fetch_add(&done, 1) + 1;

	if (n % (total / 4 ? total / 4 : 1) == 0) {
		printf("  bank worker %d: %3ld%% (%ld/%ld transfers)\n", worker, n * 100 / total, n, total);
		fflush(stdout);
	}
}

static void *
teller(void *arg)
{
	redisContext *c = connect_redis();
	unsigned seed = (unsigned)(worker * 7919 + (int)(long)arg * 104729 + getpid());

	for (int k = 0; k < transfers; k++) {
		int from = rand_r(&seed) % accounts, to = rand_r(&seed) % (accounts - 1);
		long amount = 1 + rand_r(&seed) % 100;

		if (to >= from)
			to++;
		/* Always lock the lower account first: no deadlock. */
		LOCK(&account_lock[from < to ? from : to]);
		LOCK(&account_lock[from < to ? to : from]);
		long a = get(c, "acct", from), b = get(c, "acct", to);
		set(c, "acct", from, a - amount);
		set(c, "acct", to, b + amount);
		UNLOCK(&account_lock[from < to ? to : from]);
		UNLOCK(&account_lock[from < to ? from : to]);

		LOCK(&counter_lock);
		set(c, "transfers", 0, get(c, "transfers", 0) + 1);
		UNLOCK(&counter_lock);
		progress();
	}
	redisFree(c);
	return NULL;
}

static int
run(void)
{
	pthread_t *t = calloc(threads, sizeof *t);

	account_lock = calloc(accounts, sizeof *account_lock);
	if (!t || !account_lock)
		return 2;
	for (int i = 0; i < accounts; i++)
		pthread_mutex_init(&account_lock[i], NULL);
	for (long i = 0; i < threads; i++)
		if (pthread_create(&t[i], NULL, teller, (void *)i)) {
			fprintf(stderr, "bank: pthread_create failed\n");
			return 2;
		}
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < accounts; i++)
		pthread_mutex_destroy(&account_lock[i]);
	free(account_lock);
	free(t);
	return 0;
}

static int
setup(void)
{
	redisContext *c = connect_redis();

	for (int i = 0; i < accounts; i++)
		set(c, "acct", i, START_BALANCE);
	set(c, "transfers", 0, 0);
	redisFree(c);
	return 0;
}

static int
check(long expected)
{
	redisContext *c = connect_redis();
	long total = 0, want = (long)accounts * START_BALANCE, n;

	for (int i = 0; i < accounts; i++)
		total += get(c, "acct", i);
	n = get(c, "transfers", 0);
	redisFree(c);
	printf("money: %ld (expected %ld)  transfers counted: %ld", total, want, n);
	if (expected >= 0)
		printf(" (expected %ld)", expected);
	if (total == want && (expected < 0 || n == expected)) {
		printf("  -> OK\n");
		return 0;
	}
	printf("  -> BROKEN: %ld %s, %ld transfers lost\n", total > want ? total - want : want - total,
			total > want ? "created from nothing" : "vanished", expected >= 0 ? expected - n : 0);
	return 1;
}

int
main(int argc, char **argv)
{
	long expected = -1;
	int o;

	if (argc < 2) {
		fprintf(stderr, "usage: bank setup|run|check [-h host] [-p port] [-k prefix] [-a accounts] "
				"[-t threads] [-n transfers] [-i worker] [-e expected]\n");
		return 2;
	}
	optind = 2;
	while ((o = getopt(argc, argv, "h:p:k:a:t:n:i:e:")) != -1) {
		switch (o) {
		case 'h': host = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 'k': prefix = optarg; break;
		case 'a': accounts = atoi(optarg); break;
		case 't': threads = atoi(optarg); break;
		case 'n': transfers = atoi(optarg); break;
		case 'i': worker = atoi(optarg); break;
		case 'e': expected = atol(optarg); break;
		default: return 2;
		}
	}
	if (accounts < 2 || threads < 1 || transfers < 0) {
		fprintf(stderr, "bank: need at least 2 accounts and 1 thread\n");
		return 2;
	}
	if (!strcmp(argv[1], "setup"))
		return setup();
	if (!strcmp(argv[1], "run"))
		return run();
	if (!strcmp(argv[1], "check"))
		return check(expected);
	fprintf(stderr, "bank: unknown command '%s'\n", argv[1]);
	return 2;
}
