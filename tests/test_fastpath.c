/*
 * Issue 25: regressions of the fast paths (asynchronous release, cached
 * leases), one test per defect, each asserting the contract that replaces
 * the defect:
 *
 *   2  lock calls never say ENOLCK: after a lost asynchronous release
 *      the next lock, trylock or timedlock takes the lock (and through
 *      the shim, pthread_mutex_lock: the program fastpath_shim.c);
 *
 * The loss is made behind the library's back: DEL of the lock key on the
 * server, or `dmutex reset --force`.  Every wait polls with a deadline;
 * time passes on purpose only where a stall is the subject.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dmutex.h"
#include "harness.h"
#include "dmt.h"

static struct th_redis srv;
static int paused;

static void
up(void)
{
	cr_assert_eq(th_redis_start(&srv, NULL), 0, "redis-server did not start");
}

static void
down(void)
{
	if (paused)
		th_redis_resume(&srv);
	th_redis_stop_all();
}

TestSuite(fastpath, .init = up, .fini = down, .timeout = 60);

/* ------------------------------------------------------------------ */
/* helpers                                                             */
/* ------------------------------------------------------------------ */

static void
url_with(char *buf, size_t len, const char *opts)
{
	dmt_url(buf, len, NULL, srv.port, opts);
}

/* The lock key of name deleted under its holder, as an eviction or an
 * operator's DEL would. */
static void
delete_key(const char *name)
{
	char k[600];

	dmt_lock_key(k, sizeof k, name);
	cr_assert_eq(th_redis_int(&srv, "DEL %s", k), 1, "DEL %s did not delete it", k);
}

/* Scripts the server has run: a release is one (EVALSHA, or EVAL by
 * source on a fresh connection).  Clients opened with metrics=0 and a
 * long lease run none of their own meanwhile. */
static long long
scripts(void)
{
	return dmt_cmd_calls(&srv, "evalsha", "eval", NULL);
}

static long long scripts_base;

static int
a_script_ran(void *arg)
{
	(void)arg;
	return scripts() > scripts_base;
}

/* The lock key carries a hold of the calling thread (its tid). */
static void
assert_held_by_me(const char *name, const char *what)
{
	char tid[32], want[32];

	snprintf(want, sizeof want, "%ld", (long)syscall(SYS_gettid));
	cr_assert(dmt_lock_field(&srv, name, "tid", tid, sizeof tid) == 1,
			"%s: the lock key of '%s' is gone: the mutex is not held", what, name);
	cr_assert_str_eq(tid, want, "%s: the lock key of '%s' names thread %s, not the caller %s",
			what, name, tid, want);
}

/* ------------------------------------------------------------------ */
/* 2. no ENOLCK from a lock call                                       */
/* ------------------------------------------------------------------ */

enum { BY_LOCK, BY_TRYLOCK, BY_TIMEDLOCK };

static void
relock_after_a_lost_release(const char *name, int how)
{
	static const char *const call[] = { "dmutex_lock", "dmutex_trylock", "dmutex_timedlock" };
	char u[700];
	dmutex_client_t *c, *c2;
	dmutex_t m, other;
	atomic_int lost = 0;
	struct timespec at;
	int rc;

	url_with(u, sizeof u, "lease_ms=30000&metrics=0");
	cr_assert_eq(dmt_open_mutex(&c, &m, u, name, &(struct dmt_attr){
			.onlost = dmt_count_lost, .arg = &lost, .nocache = 1 }), 0);
	cr_assert_eq(dmt_open_mutex(&c2, &other, u, name, &(struct dmt_attr){ .nocache = 1 }), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	delete_key(name);
	scripts_base = scripts();
	cr_assert_eq(dmutex_unlock(&m), 0, "an asynchronous unlock knows nothing yet");
	/* The release has run and said "not ours"; its answer waits in the
	 * connection. */
	cr_assert(th_wait_until(a_script_ran, NULL, 5000), "the release never ran");
	switch (how) {
	case BY_LOCK:
		rc = dmutex_lock(&m);
		break;
	case BY_TRYLOCK:
		rc = dmutex_trylock(&m);
		break;
	default:
		dmt_deadline_in(CLOCK_REALTIME, 5000, &at);
		rc = dmutex_timedlock(&m, &at);
		break;
	}
	cr_assert_eq(rc, 0, "%s after a release that found the lock not ours: %d (%s), want 0",
			call[how], rc, dmutex_strerror(rc));
	assert_held_by_me(name, call[how]);
	rc = dmutex_trylock(&other);
	cr_assert_eq(rc, EBUSY, "another client's trylock while %s's hold lasts: %d (%s)", call[how],
			rc, dmutex_strerror(rc));
	cr_assert(th_wait_until(dmt_lost_once, &lost, 5000), "onlost never ran");
	cr_assert_eq(atomic_load(&lost), 1, "onlost called %d times", atomic_load(&lost));
	cr_assert_eq(dmutex_unlock(&m), 0);
	dmt_close_mutex(c2, &other);
	dmt_close_mutex(c, &m);
}

Test(fastpath, lock_after_a_lost_async_release_takes_the_lock)
{
	relock_after_a_lost_release("fp-relock-lock", BY_LOCK);
}

Test(fastpath, trylock_after_a_lost_async_release_takes_the_lock)
{
	relock_after_a_lost_release("fp-relock-try", BY_TRYLOCK);
}

Test(fastpath, timedlock_after_a_lost_async_release_takes_the_lock)
{
	relock_after_a_lost_release("fp-relock-timed", BY_TIMEDLOCK);
}

/* The same through the pthread shim: tests/fastpath_shim.c, a pthread
 * program built with the shim's flags (criterion cannot be: it locks
 * through the calls the shim replaces), run against this server. */
Test(fastpath, shim_lock_after_a_lost_async_release_takes_the_lock)
{
	const char *prog = getenv("FASTPATH_SHIM");
	char out[] = "/tmp/fastpath-shim-XXXXXX", text[4096] = "", u[700], env[800], port[16];
	int fd, st;
	ssize_t n;

	cr_assert(prog && *prog, "FASTPATH_SHIM is not set (run through meson test)");
	url_with(u, sizeof u, "lease_ms=30000&metrics=0");
	snprintf(env, sizeof env, "DMUTEX_URL=%s", u);
	snprintf(port, sizeof port, "%d", srv.port);
	cr_assert_geq(fd = mkstemp(out), 0);
	st = th_run((const char *const[]){ prog, port, NULL }, (const char *const[]){ env, NULL }, out,
			30000);
	n = read(fd, text, sizeof text - 1);
	text[n > 0 ? n : 0] = '\0';
	close(fd);
	unlink(out);
	cr_assert_eq(st, 0, "fastpath_shim exited %d:\n%s", st, text);
}

