/*
 * Issue 12 item 2: every public call works from a thread whose stack is
 * PTHREAD_STACK_MIN (16 KiB), including the very first call, which opens
 * the default client: DNS, TCP and the handshake run on a dial thread with
 * a stack of its own, and reply buffers live on the heap.  The stack is
 * ours (mmap with a guard page below it), filled with a pattern first, so
 * that the test also measures how much of it the calls touched.
 *
 * The shim case runs tests/smallstack_shim.c, a plain pthread program built
 * through the shim, doing the same from a 16 KiB thread.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dmutex.h"
#include "harness.h"

/* Sanitizers put redzones around every frame: give them room, the point
 * (no 16 KiB buffer on the stack) is made by the plain build. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STACK (256 * 1024)
#else
#define STACK 16384
#endif
#define PATTERN 0xa5

static struct th_redis srv;

static void
srv_up(void)
{
	cr_assert_eq(th_redis_start(&srv, NULL), 0, "redis-server did not start");
	cr_assert_eq(setenv("DMUTEX_URL", srv.url, 1), 0);
}

static void
srv_down(void)
{
	th_redis_stop(&srv);
}

TestSuite(smallstack, .init = srv_up, .fini = srv_down, .timeout = 20);

static dmutex_t dflt = DMUTEX_INITIALIZER("smallstack-default");
static dcond_t dcv = DCOND_INITIALIZER("smallstack-cond");

struct result {
	int step;               /* the first call that failed, 0 if none */
	int err;
};

#define CHECK(n, call, want) do { int e_ = (call); if (e_ != (want)) { r->step = (n); r->err = e_; return NULL; } } while (0)

static void *
calls(void *arg)
{
	struct result *r = arg;
	dmutex_client_t *c;
	dmutex_attr_t a;
	dmutex_t m;
	dcond_t cv;
	uint64_t tok;
	struct timespec ts;

	/* The first call of the process: it opens the default client. */
	CHECK(1, dmutex_lock(&dflt), 0);
	CHECK(2, dmutex_fence(&dflt, &tok), 0);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 50 * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	CHECK(3, dcond_timedwait(&dcv, &dflt, &ts), ETIMEDOUT);
	CHECK(4, dcond_signal(&dcv), 0);
	CHECK(5, dcond_broadcast(&dcv), 0);
	CHECK(6, dmutex_unlock(&dflt), 0);
	CHECK(7, dmutex_trylock(&dflt), 0);
	CHECK(8, dmutex_unlock(&dflt), 0);

	/* An explicit client: open runs a connect and a PING. */
	CHECK(10, dmutex_client_open(&c, srv.url), 0);
	CHECK(11, dmutex_attr_init(&a), 0);
	CHECK(12, dmutex_attr_setclient(&a, c), 0);
	CHECK(13, dmutex_init(&m, "smallstack-explicit", &a), 0);
	CHECK(14, dmutex_timedlock(&m, &ts), 0);
	CHECK(15, dmutex_unlock(&m), 0);
	CHECK(16, dmutex_clocklock(&m, CLOCK_MONOTONIC, NULL), EINVAL);
	CHECK(17, dcond_init(&cv, "smallstack-cv", NULL), 0);
	CHECK(18, dcond_destroy(&cv), 0);
	CHECK(19, dmutex_destroy(&m), 0);
	CHECK(20, dmutex_attr_destroy(&a), 0);
	CHECK(21, dmutex_client_close(c), 0);
	return NULL;
}

/* Bytes of the stack the thread touched (from the top down). */
static size_t
run_on_small_stack(void *(*fn)(void *), void *arg)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t len = STACK + (size_t)page, used;
	unsigned char *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned char *stk;
	pthread_attr_t at;
	pthread_t t;

	cr_assert_neq(map, MAP_FAILED);
	/* An overflow hits the guard page (SIGSEGV) instead of memory. */
	cr_assert_eq(mprotect(map, (size_t)page, PROT_NONE), 0);
	stk = map + page;
	memset(stk, PATTERN, STACK);
	cr_assert_eq(pthread_attr_init(&at), 0);
	cr_assert_eq(pthread_attr_setstack(&at, stk, STACK), 0);
	cr_assert_eq(pthread_create(&t, &at, fn, arg), 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
	pthread_attr_destroy(&at);
	for (used = STACK; used > 0 && stk[STACK - used] == PATTERN; used--)
		;
	munmap(map, len);
	return used;
}

Test(smallstack, every_call_from_a_16k_thread)
{
	struct result r = { 0, 0 };
	size_t used = run_on_small_stack(calls, &r);

	cr_assert_eq(r.step, 0, "call %d returned %d (%s)", r.step, r.err, dmutex_strerror(r.err));
	/* glibc puts the thread's TLS and descriptor at the top of a
	 * user-supplied stack too: that is part of "used". */
	fprintf(stderr, "smallstack: %zu of %d bytes of stack touched\n", used, STACK);
	cr_assert_lt(used, (size_t)STACK, "the stack was exhausted");
}

Test(smallstack, shim_program_on_a_16k_thread)
{
	const char *prog = getenv("SMALLSTACK_SHIM");
	pid_t pid;
	int st;

	cr_assert_not_null(prog, "SMALLSTACK_SHIM not set");
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		execl(prog, prog, (char *)NULL);
		_exit(127);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st), "the shim program died (signal %d)", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	cr_assert_eq(WEXITSTATUS(st), 0, "the shim program failed at step %d", WEXITSTATUS(st));
}
