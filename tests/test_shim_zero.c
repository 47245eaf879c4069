/*
 * Issue 12 item 7 through the pthread shim: zero-filled objects.
 *
 * glibc's PTHREAD_MUTEX_INITIALIZER and PTHREAD_COND_INITIALIZER are all
 * zeros, and a static pthread_mutex_t without initializer is zero-filled
 * too; programs use such objects without an init call.  Through the shim
 * one in static storage is a distributed object named by where it is in
 * its module, NAMESPACE/@MODULE+0xOFFSET, which every process of one build
 * agrees on even with the module loaded at another address (the processes
 * here are exec'd, not forked, so ASLR places them differently).  A
 * zero-filled object elsewhere (heap, stack) is EINVAL and a log line that
 * names it.
 *
 * This program is its own driver: without arguments it starts a
 * redis-server and runs copies of itself:
 *   hold    lock `zm`, print "held ADDR" (its address here), unlock and
 *           exit when stdin closes
 *   probe   print "trylock=N" for `zm`, "addr=ADDR"
 *   misc    the rest in one process (exit status: number of the failed check)
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "harness.h"
#include "shim_driver.h"

static pthread_mutex_t zm;      /* zero-filled: no initializer */
static pthread_cond_t zc;
static pthread_mutex_t zrec;    /* for the cond wait */
static int zero_logs;

static void
logger(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	fprintf(stderr, "log: %s\n", msg);
	if (strstr(msg, "zero-filled and not in static storage"))
		zero_logs++;
}

static int
hold(void)
{
	char c;

	if (pthread_mutex_lock(&zm))
		return 2;
	printf("held %p\n", (void *)&zm);
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	return pthread_mutex_unlock(&zm) ? 3 : 0;
}

static int
probe(void)
{
	int rc = pthread_mutex_trylock(&zm);

	printf("trylock=%d addr=%p\n", rc, (void *)&zm);
	if (rc == 0)
		pthread_mutex_unlock(&zm);
	return 0;
}

#define CHECK(n, cond) do { if (!(cond)) { fprintf(stderr, "check %d failed: %s\n", n, #cond); return n; } } while (0)

static int
misc(void)
{
	pthread_mutex_t *heap = calloc(1, sizeof *heap);
	pthread_cond_t *heap_cv = calloc(1, sizeof *heap_cv);
	pthread_mutex_t on_stack;
	struct timespec past = { 0, 0 };

	dmutex_set_logger(logger, NULL);
	/* Zero-filled static condition variable and mutex, used at once. */
	CHECK(1, pthread_mutex_lock(&zrec) == 0);
	CHECK(2, pthread_cond_signal(&zc) == 0);
	CHECK(3, pthread_cond_timedwait(&zc, &zrec, &past) == ETIMEDOUT);
	CHECK(4, pthread_mutex_unlock(&zrec) == 0);
	CHECK(5, pthread_mutex_unlock(&zrec) == EPERM);
	CHECK(6, zero_logs == 0);
	/* Zero-filled elsewhere: not initialized. */
	memset(&on_stack, 0, sizeof on_stack);
	CHECK(10, heap && heap_cv);
	CHECK(11, pthread_mutex_lock(heap) == EINVAL);
	CHECK(12, pthread_mutex_trylock(&on_stack) == EINVAL);
	CHECK(13, pthread_cond_signal(heap_cv) == EINVAL);
	CHECK(14, pthread_mutex_destroy(heap) == EINVAL);
	CHECK(15, zero_logs == 4);
	/* Initialized, they work. */
	CHECK(16, pthread_mutex_init(heap, NULL) == 0);
	CHECK(17, pthread_mutex_lock(heap) == 0 && pthread_mutex_unlock(heap) == 0);
	CHECK(18, pthread_mutex_destroy(heap) == 0);
	/* A destroyed static one is not taken for zero-filled again. */
	CHECK(19, pthread_mutex_destroy(&zrec) == 0);
	CHECK(20, pthread_mutex_lock(&zrec) == EINVAL);
	free(heap);
	free(heap_cv);
	return 0;
}

/* ---- the driver ---- */

static int
run_probe(const char *self, char *out, size_t len)
{
	struct proc p;

	if (start(&p, self, "probe"))
		return -1;
	close(p.in);
	line(&p, out, len, 30000);
	close(p.out);
	return th_wait_child(p.pid, 30000);
}

int
main(int argc, char **argv)
{
	struct th_redis srv;
	struct proc holder;
	char buf[256], held_addr[64] = "", probe_addr[64] = "";
	char self[4096];

	if (argc > 1)
		return !strcmp(argv[1], "hold") ? hold() : !strcmp(argv[1], "probe") ? probe() : misc();
	if (th_self_driver(&srv, self, sizeof self, "shimzero", NULL))
		return 1;

	EXPECT(start(&holder, self, "hold") == 0);
	EXPECT(line(&holder, buf, sizeof buf, 30000) == 0 && sscanf(buf, "held %63s", held_addr) == 1);
	/* Named by module and offset, in the namespace. */
	EXPECT(th_redis_int(&srv, "EVAL %s 0",
			"return #redis.call('KEYS', '*shimzero/@test_shim_zero+0x*')") >= 1);
	EXPECT(run_probe(self, buf, sizeof buf) == 0);
	EXPECT(sscanf(buf, "trylock=%*d addr=%63s", probe_addr) == 1);
	EXPECT(strstr(buf, "trylock=16 ") != NULL);     /* EBUSY */
	/* Another address in the other process, the same lock. */
	EXPECT(strcmp(held_addr, probe_addr) != 0);
	close(holder.in);
	EXPECT(th_wait_child(holder.pid, 30000) == 0);
	close(holder.out);
	EXPECT(run_probe(self, buf, sizeof buf) == 0);
	EXPECT(strstr(buf, "trylock=0 ") != NULL);

	{
		const char *const av[] = { self, "misc", NULL };
		EXPECT(th_run(av, NULL, NULL, 30000) == 0);
	}
	th_redis_stop(&srv);
	return th_check_status();
}
