/*
 * The API contract's error table (../shared/API.md), one Test per row and
 * per cell of the type table, each against a redis-server of its own.
 *
 * Linked with the static library so that the EAGAIN row can push a
 * recursion count near INT_MAX through internals (internal.h); every other
 * test uses the public API only and checks Redis state through the
 * harness's admin connections.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dmutex.h"
#include "harness.h"
#include "dmt.h"
#include "core/internal.h"

/* Each criterion test runs in its own worker process: these are per test. */
static struct th_redis srv;
static dmutex_client_t *cli;

static void
srv_up(void)
{
	cr_assert_eq(th_redis_start(&srv, NULL), 0, "redis-server did not start");
	cr_assert_eq(dmt_backend_up(&srv), 0, "Redlock nodes did not start");
}

static void
srv_down(void)
{
	dmt_backend_down();
	th_redis_stop(&srv);
}

TestSuite(api, .init = srv_up, .fini = srv_down, .timeout = 20);

/* ------------------------------------------------------------------ */
/* helpers                                                             */
/* ------------------------------------------------------------------ */

static dmutex_client_t *
open_client(const char *opts)
{
	char url[800];
	int rc;

	dmt_url(url, sizeof url, NULL, srv.port, opts);
	rc = dmt_client_open_retry(&cli, url);
	cr_assert_eq(rc, 0, "dmutex_client_open(%s) = %d", url, rc);
	return cli;
}

/* A test's last step: close the client open_client opened.  Every mutex
 * initialized on it must have been destroyed first (else EBUSY). */
static void
close_client(void)
{
	cr_assert_eq(dmutex_client_close(cli), 0);
	cli = NULL;
}

/* Initialize m on client c with the given type, robustness and lease (0:
 * the client's) and an optional onlost handler. */
static void
init_full(dmutex_t *m, const char *name, dmutex_client_t *c, int type, int robust,
		unsigned lease_ms, void (*onlost)(const char *, void *), void *arg)
{
	struct dmt_attr o = { type, robust, lease_ms, onlost, arg, 0 };
	int rc = dmt_init_mutex(m, name, c, &o);

	cr_assert_eq(rc, 0, "dmutex_init(%s): %s", name, dmutex_strerror(rc));
}

static void
init_type(dmutex_t *m, const char *name, int type)
{
	init_full(m, name, cli, type, DMUTEX_STALLED, 0, NULL, NULL);
}

static int
key_exists(const char *name)
{
	return dmt_lock_exists(&srv, name) == 1;
}

/* A field of the lock key into buf (dmt_lock_field: string or hash); ""
 * when the field or key is missing. */
static void
lock_field(const char *name, const char *field, char *buf, size_t n)
{
	if (!dmt_lock_field(&srv, name, field, buf, n) && n)
		buf[0] = '\0';
}

static void
lock_token(const char *name, char buf[64])
{
	lock_field(name, "token", buf, 64);
}

static int
is_hex_token(const char *s)
{
	if (strlen(s) != 32)
		return 0;
	for (; *s; s++)
		if (!strchr("0123456789abcdefABCDEF", *s))
			return 0;
	return 1;
}

/* calls= of cmdstat_evalsha in INFO commandstats (0 when never called). */
static long long
lock_calls(void)
{
	/* The scripts, and the plain SET that takes a free lock (key layout
	 * 3): what the library asked of Redis for the lock.  Over etcd its
	 * KV requests: a free lock's txn, a release's delete. */
	long long n = dmt_etcd() ? dmt_etcd_kv_calls()
		: dmt_cmd_calls(&srv, "evalsha", "set", NULL);

	cr_assert(n >= 0, "INFO commandstats failed");
	return n;
}

static int
ts_ge(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec > b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec >= b->tv_nsec);
}

/* ---- log capture ---- */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_lines[64][512];
static int log_n;

static void
record_log(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	pthread_mutex_lock(&log_mu);
	if (log_n < 64)
		snprintf(log_lines[log_n], sizeof log_lines[0], "%s", msg);
	log_n++;
	pthread_mutex_unlock(&log_mu);
}

static int
log_contains(const char *needle)
{
	int found = 0;

	pthread_mutex_lock(&log_mu);
	for (int i = 0; i < log_n && i < 64 && !found; i++)
		found = strstr(log_lines[i], needle) != NULL;
	pthread_mutex_unlock(&log_mu);
	return found;
}

/* ---- a thread of this process holding a lock until told to unlock ---- */

struct holder {
	dmutex_t *m;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int lock_rc;    /* -1 until dmutex_lock returned */
	int go;         /* the test asks the holder to unlock */
	int unlock_rc;
};

static void *
holder_main(void *arg)
{
	struct holder *h = arg;
	int rc = dmutex_lock(h->m);

	pthread_mutex_lock(&h->mu);
	h->lock_rc = rc;
	pthread_cond_broadcast(&h->cv);
	while (!h->go)
		pthread_cond_wait(&h->cv, &h->mu);
	pthread_mutex_unlock(&h->mu);
	h->unlock_rc = rc == 0 ? dmt_unlock_answered(h->m) : -1;
	return NULL;
}

static void
holder_start(struct holder *h, dmutex_t *m)
{
	memset(h, 0, sizeof *h);
	h->m = m;
	h->lock_rc = -1;
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->cv, NULL);
	cr_assert_eq(pthread_create(&h->th, NULL, holder_main, h), 0);
	pthread_mutex_lock(&h->mu);
	while (h->lock_rc == -1)
		pthread_cond_wait(&h->cv, &h->mu);
	pthread_mutex_unlock(&h->mu);
	cr_assert_eq(h->lock_rc, 0, "holder thread: dmutex_lock = %d", h->lock_rc);
}

/* Let the holder unlock; returns its dmutex_unlock result. */
static int
holder_finish(struct holder *h)
{
	pthread_mutex_lock(&h->mu);
	h->go = 1;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
	pthread_join(h->th, NULL);
	return h->unlock_rc;
}

/* ---- another process holding a lock through its own client ---- */

struct child_hold {
	char url[800];
	char name[DMUTEX_NAME_MAX + 1];
	struct th_sync held;     /* child -> parent: "I hold it" */
	struct th_sync release;  /* parent -> child: "unlock now" */
	pid_t pid;
};

static struct child_hold ch;

/* Exit codes name the step that failed (never cr_assert in a child). */
static int
child_hold_main(void *arg)
{
	struct child_hold *c = arg;
	dmutex_client_t *cl;
	dmutex_attr_t a;
	dmutex_t m;

	/* Keep only our ends, so that either side's death is seen as EOF. */
	close(c->held.fd[0]);
	close(c->release.fd[1]);
	if (dmutex_client_open(&cl, c->url))
		return 10;
	if (dmutex_attr_init(&a) || dmutex_attr_setclient(&a, cl))
		return 11;
	if (dmutex_init(&m, c->name, &a))
		return 12;
	if (dmutex_lock(&m))
		return 13;
	th_sync_post(&c->held);
	if (th_sync_wait(&c->release, 15000))
		return 14;
	if (dmutex_unlock(&m))
		return 15;
	if (dmutex_destroy(&m) || dmutex_client_close(cl))
		return 16;
	return 0;
}

static void
child_start(const char *name)
{
	dmt_url(ch.url, sizeof ch.url, NULL, srv.port, NULL);
	snprintf(ch.name, sizeof ch.name, "%s", name);
	cr_assert_eq(th_sync_init(&ch.held), 0);
	cr_assert_eq(th_sync_init(&ch.release), 0);
	ch.pid = th_spawn(child_hold_main, &ch);
	cr_assert_gt(ch.pid, 0);
	close(ch.held.fd[1]);
	ch.held.fd[1] = -1;
	close(ch.release.fd[0]);
	ch.release.fd[0] = -1;
	cr_assert_eq(th_sync_wait(&ch.held, 5000), 0, "child did not take the lock");
}

static void
child_finish(void)
{
	th_sync_post(&ch.release);
	cr_assert_eq(th_wait_child(ch.pid, 5000), 0, "child holder failed");
	th_sync_close(&ch.held);
	th_sync_close(&ch.release);
}

/* ------------------------------------------------------------------ */
/* row: lock/trylock/timedlock/clocklock acquire -> 0                  */
/* ------------------------------------------------------------------ */

enum { OP_LOCK, OP_TRYLOCK, OP_TIMEDLOCK, OP_CLOCKLOCK };

static int
do_op(dmutex_t *m, int op)
{
	struct timespec ts;

	switch (op) {
	case OP_LOCK:
		return dmutex_lock(m);
	case OP_TRYLOCK:
		return dmutex_trylock(m);
	case OP_TIMEDLOCK:
		dmt_deadline_in(CLOCK_REALTIME, 2000, &ts);
		return dmutex_timedlock(m, &ts);
	default:
		dmt_deadline_in(CLOCK_MONOTONIC, 2000, &ts);
		return dmutex_clocklock(m, CLOCK_MONOTONIC, &ts);
	}
}

/* The acquire returns 0, Redis has a lock key with a fresh 128-bit hex token,
 * our pid, and the fencing counter that dmutex_fence reports; unlock
 * deletes it. */
static void
acquire_ok(int op)
{
	char tok[64], buf[64];
	uint64_t fence = 0;
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "acq", DMUTEX_NORMAL);
	cr_assert_eq(do_op(&m, op), 0);
	cr_assert(key_exists("acq"));
	lock_token("acq", tok);
	cr_assert(is_hex_token(tok), "token '%s' is not 32 hex chars", tok);
	lock_field("acq", "pid", buf, sizeof buf);
	cr_assert_eq(atol(buf), (long)getpid());
	cr_assert_eq(dmutex_fence(&m, &fence), 0);
	cr_assert_gt(fence, 0);
	lock_field("acq", "fence", buf, sizeof buf);
	/* One server: its token.  Redlock: each node issues its own (server
	 * time << 20 | sequence) and the hold's is the largest of a quorum,
	 * so the first node's may be smaller, never larger. */
	if (dmt_nodes() == 1)
		cr_assert_eq(strtoull(buf, NULL, 10), fence);
	else
		cr_assert_leq(strtoull(buf, NULL, 10), fence);
	cr_assert_eq(dmt_unlock_answered(&m), 0);
	cr_assert_not(key_exists("acq"));

	/* A second hold gets a new token and a larger fence. */
	uint64_t fence2 = 0;
	char tok2[64];
	cr_assert_eq(do_op(&m, op), 0);
	lock_token("acq", tok2);
	cr_assert(is_hex_token(tok2));
	cr_assert_str_neq(tok, tok2, "token reused across acquisitions");
	cr_assert_eq(dmutex_fence(&m, &fence2), 0);
	cr_assert_gt(fence2, fence);
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

/* The name's counter lost between two holds of the same millisecond
 * (evicted, flushed: the torture checker's eviction found it): the next
 * token still starts above the last from the server's clock, in
 * microseconds, so no token is handed to two holds.  Holds here are some
 * tens of microseconds apart; with the clock in milliseconds, several in a
 * row got the same token. */
Test(api, fence_tokens_differ_when_the_counter_is_lost_within_a_millisecond)
{
	char mk[128];
	uint64_t fence, last = 0;
	dmutex_client_t *c;
	dmutex_t m;

	DMT_REDIS_STATE("deletes the name's meta hash");
	DMT_SINGLE_NODE();
	cr_assert_eq(dmt_open_mutex(&c, &m, srv.url, "lostctr", &(struct dmt_attr){ .nocache = 1 }), 0);
	dmt_meta_key(mk, sizeof mk, "lostctr");
	for (int i = 0; i < 300; i++) {
		cr_assert_eq(dmutex_lock(&m), 0);
		cr_assert_eq(dmutex_fence(&m, &fence), 0);
		cr_assert_gt(fence, last, "hold %d: token %llu after %llu", i, (unsigned long long)fence,
				(unsigned long long)last);
		last = fence;
		cr_assert_geq(th_redis_int(&srv, "DEL %s", mk), 0);
		cr_assert_eq(dmutex_unlock(&m), 0);
	}
	dmt_close_mutex(c, &m);
}

Test(api, lock_acquires_free_lock)
{
	acquire_ok(OP_LOCK);
}

Test(api, trylock_acquires_free_lock)
{
	acquire_ok(OP_TRYLOCK);
}

Test(api, timedlock_acquires_free_lock)
{
	acquire_ok(OP_TIMEDLOCK);
}

Test(api, clocklock_acquires_free_lock)
{
	acquire_ok(OP_CLOCKLOCK);
}

/* ------------------------------------------------------------------ */
/* row: trylock while another thread or process holds -> EBUSY         */
/* ------------------------------------------------------------------ */

Test(api, trylock_ebusy_while_other_thread_holds)
{
	struct holder h;
	char before[64], after[64];
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "busy-thr", DMUTEX_NORMAL);
	holder_start(&h, &m);
	lock_token("busy-thr", before);
	cr_assert_eq(dmutex_trylock(&m), EBUSY);
	lock_token("busy-thr", after);
	cr_assert_str_eq(before, after);
	cr_assert_eq(holder_finish(&h), 0);
	/* Free again: trylock succeeds. */
	cr_assert_eq(dmutex_trylock(&m), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

Test(api, trylock_ebusy_while_other_process_holds)
{
	char pid[32];
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "busy-proc", DMUTEX_NORMAL);
	child_start("busy-proc");
	lock_field("busy-proc", "pid", pid, sizeof pid);
	cr_assert_eq(atol(pid), (long)ch.pid, "the lock is not the child's");
	cr_assert_eq(dmutex_trylock(&m), EBUSY);
	lock_field("busy-proc", "pid", pid, sizeof pid);
	cr_assert_eq(atol(pid), (long)ch.pid);
	child_finish();
	cr_assert_eq(dmutex_trylock(&m), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

Test(api, same_name_two_objects_are_one_lock)
{
	struct holder h;
	dmutex_t m1, m2;

	open_client(NULL);
	init_type(&m1, "twin", DMUTEX_NORMAL);
	init_type(&m2, "twin", DMUTEX_NORMAL);
	holder_start(&h, &m1);
	cr_assert_eq(dmutex_trylock(&m2), EBUSY);
	/* m2 is not held by us either: unlocking it must not free A's hold. */
	cr_assert_eq(dmutex_unlock(&m2), EPERM);
	cr_assert(key_exists("twin"));
	cr_assert_eq(holder_finish(&h), 0);
	cr_assert_eq(dmutex_trylock(&m2), 0);
	cr_assert_eq(dmutex_unlock(&m2), 0);
	cr_assert_eq(dmutex_destroy(&m1), 0);
	cr_assert_eq(dmutex_destroy(&m2), 0);
	close_client();
}

/* ------------------------------------------------------------------ */
/* row: timedlock/clocklock deadline passes -> ETIMEDOUT               */
/* ------------------------------------------------------------------ */

#define WAIT_MS 300

/* Timed lock on m with a deadline WAIT_MS ahead on clk: ETIMEDOUT, not
 * before the deadline and not much after it. */
static void
times_out(dmutex_t *m, clockid_t clk, int use_timedlock)
{
	struct timespec dl, now;
	long long t0 = th_now_ms(), el;
	int rc;

	dmt_deadline_in(clk, WAIT_MS, &dl);
	rc = use_timedlock ? dmutex_timedlock(m, &dl) : dmutex_clocklock(m, clk, &dl);
	clock_gettime(clk, &now);
	el = th_now_ms() - t0;
	cr_assert_eq(rc, ETIMEDOUT, "got %d", rc);
	cr_assert(ts_ge(&now, &dl), "returned before the deadline");
	cr_assert_geq(el, WAIT_MS);
	cr_assert_leq(el, WAIT_MS + DMT_LATE_MS, "returned %lld ms after a %d ms deadline", el, WAIT_MS);
}

Test(api, timedlock_etimedout_while_other_process_holds)
{
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "to-proc", DMUTEX_NORMAL);
	child_start("to-proc");
	times_out(&m, CLOCK_REALTIME, 1);
	child_finish();
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

Test(api, clocklock_monotonic_etimedout_while_other_process_holds)
{
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "to-mono", DMUTEX_NORMAL);
	child_start("to-mono");
	times_out(&m, CLOCK_MONOTONIC, 0);
	child_finish();
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

Test(api, clocklock_realtime_etimedout_while_other_thread_holds)
{
	struct holder h;
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "to-thr", DMUTEX_NORMAL);
	holder_start(&h, &m);
	times_out(&m, CLOCK_REALTIME, 0);
	cr_assert_eq(holder_finish(&h), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

Test(api, past_deadline_on_free_lock_acquires)
{
	struct timespec ts;
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "past", DMUTEX_NORMAL);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec -= 10;
	cr_assert_eq(dmutex_timedlock(&m, &ts), 0, "could lock at once: never ETIMEDOUT");
	cr_assert(key_exists("past"));
	cr_assert_eq(dmutex_unlock(&m), 0);

	ts.tv_sec = 0;
	ts.tv_nsec = 0;
	cr_assert_eq(dmutex_clocklock(&m, CLOCK_MONOTONIC, &ts), 0);
	cr_assert(key_exists("past"));
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_clocklock(&m, CLOCK_REALTIME, &ts), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

static const long bad_nsec[] = { -1, 1000000000L };

/* Deadlines at the ends of time_t: no arithmetic may overflow (the UBSan
 * run checks), the far future means "wait", the far past "try once". */
Test(api, extreme_deadlines_do_not_overflow)
{
	struct timespec far = { (time_t)LLONG_MAX, 999999999 }, past = { (time_t)LLONG_MIN, 0 };
	struct holder h;
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "extreme", DMUTEX_NORMAL);
	cr_assert_eq(dmutex_timedlock(&m, &far), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_clocklock(&m, CLOCK_MONOTONIC, &far), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_timedlock(&m, &past), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	holder_start(&h, &m);
	cr_assert_eq(dmutex_timedlock(&m, &past), ETIMEDOUT);
	cr_assert_eq(dmutex_clocklock(&m, CLOCK_MONOTONIC, &past), ETIMEDOUT);
	cr_assert_eq(holder_finish(&h), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

Test(api, bad_tv_nsec_on_free_lock_acquires)
{
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "nsec-free", DMUTEX_NORMAL);
	for (size_t i = 0; i < 2; i++) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec = bad_nsec[i];
		cr_assert_eq(dmutex_timedlock(&m, &ts), 0, "tv_nsec %ld", bad_nsec[i]);
		cr_assert(key_exists("nsec-free"));
		cr_assert_eq(dmutex_unlock(&m), 0);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec = bad_nsec[i];
		cr_assert_eq(dmutex_clocklock(&m, CLOCK_MONOTONIC, &ts), 0, "tv_nsec %ld", bad_nsec[i]);
		cr_assert_eq(dmutex_unlock(&m), 0);
	}
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

/* Bad tv_nsec where it would block: EINVAL at once, not after a wait. */
static void
bad_nsec_einval(dmutex_t *m)
{
	for (size_t i = 0; i < 2; i++) {
		struct timespec ts;
		long long t0 = th_now_ms();
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 5;
		ts.tv_nsec = bad_nsec[i];
		cr_assert_eq(dmutex_timedlock(m, &ts), EINVAL, "tv_nsec %ld", bad_nsec[i]);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += 5;
		ts.tv_nsec = bad_nsec[i];
		cr_assert_eq(dmutex_clocklock(m, CLOCK_MONOTONIC, &ts), EINVAL, "tv_nsec %ld", bad_nsec[i]);
		cr_assert_lt(th_now_ms() - t0, 1000, "EINVAL came only after waiting");
	}
}

Test(api, bad_tv_nsec_on_lock_held_by_other_process_einval)
{
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "nsec-proc", DMUTEX_NORMAL);
	child_start("nsec-proc");
	bad_nsec_einval(&m);
	child_finish();
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

Test(api, bad_tv_nsec_on_lock_held_by_other_thread_einval)
{
	struct holder h;
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "nsec-thr", DMUTEX_NORMAL);
	holder_start(&h, &m);
	bad_nsec_einval(&m);
	cr_assert_eq(holder_finish(&h), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

/* ------------------------------------------------------------------ */
/* row: clocklock with another clock -> EINVAL                         */
/* ------------------------------------------------------------------ */

Test(api, clocklock_other_clock_einval)
{
	struct timespec ts;
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "clk", DMUTEX_NORMAL);
	dmt_deadline_in(CLOCK_REALTIME, 2000, &ts);
	cr_assert_eq(dmutex_clocklock(&m, CLOCK_PROCESS_CPUTIME_ID, &ts), EINVAL);
	cr_assert_eq(dmutex_clocklock(&m, CLOCK_THREAD_CPUTIME_ID, &ts), EINVAL);
	cr_assert_not(key_exists("clk"), "an EINVAL clocklock took the lock");
	/* Not held: unlock says so. */
	cr_assert_eq(dmutex_unlock(&m), EPERM);
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

/* ------------------------------------------------------------------ */
/* type table: NORMAL / ERRORCHECK owner locks again                   */
/* ------------------------------------------------------------------ */

/* The owner of a non-recursive mutex calls op again: want, at once, with
 * the hold untouched (same token; a single unlock frees it). */
static void
owner_again(int type, int op, int want)
{
	char before[64], after[64];
	long long t0;
	int rc;
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "again", type);
	cr_assert_eq(dmutex_lock(&m), 0);
	lock_token("again", before);
	t0 = th_now_ms();
	rc = do_op(&m, op);
	cr_assert_eq(rc, want, "type %d op %d: got %d, want %d", type, op, rc, want);
	cr_assert_lt(th_now_ms() - t0, 1000, "the owner's relock waited instead of failing");
	lock_token("again", after);
	cr_assert_str_eq(before, after);
	cr_assert_eq(dmt_unlock_answered(&m), 0);
	cr_assert_not(key_exists("again"), "one unlock did not free it: the relock was counted");
	cr_assert_eq(dmutex_unlock(&m), EPERM);
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

Test(api, normal_owner_lock_again_edeadlk)
{
	owner_again(DMUTEX_NORMAL, OP_LOCK, EDEADLK);
}

Test(api, normal_owner_trylock_ebusy)
{
	owner_again(DMUTEX_NORMAL, OP_TRYLOCK, EBUSY);
}

Test(api, normal_owner_timedlock_edeadlk)
{
	owner_again(DMUTEX_NORMAL, OP_TIMEDLOCK, EDEADLK);
}

Test(api, normal_owner_clocklock_edeadlk)
{
	owner_again(DMUTEX_NORMAL, OP_CLOCKLOCK, EDEADLK);
}

Test(api, errorcheck_owner_lock_again_edeadlk)
{
	owner_again(DMUTEX_ERRORCHECK, OP_LOCK, EDEADLK);
}

Test(api, errorcheck_owner_trylock_ebusy)
{
	owner_again(DMUTEX_ERRORCHECK, OP_TRYLOCK, EBUSY);
}

Test(api, errorcheck_owner_timedlock_edeadlk)
{
	owner_again(DMUTEX_ERRORCHECK, OP_TIMEDLOCK, EDEADLK);
}

Test(api, default_type_is_normal_owner_lock_again_edeadlk)
{
	owner_again(DMUTEX_DEFAULT, OP_LOCK, EDEADLK);
}

/* ------------------------------------------------------------------ */
/* type table: RECURSIVE                                               */
/* ------------------------------------------------------------------ */

Test(api, recursive_k_locks_need_k_unlocks)
{
	enum { K = 5 };
	static const int ops[K] = { OP_LOCK, OP_TRYLOCK, OP_TIMEDLOCK, OP_CLOCKLOCK, OP_LOCK };
	char tok[64], now[64];
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "rec", DMUTEX_RECURSIVE);
	for (int i = 0; i < K; i++)
		cr_assert_eq(do_op(&m, ops[i]), 0, "recursive op %d (#%d)", ops[i], i);
	lock_token("rec", tok);
	cr_assert(is_hex_token(tok));
	for (int i = 0; i < K; i++) {
		cr_assert(key_exists("rec"), "key gone before the last unlock (after %d)", i);
		lock_token("rec", now);
		cr_assert_str_eq(tok, now, "inner lock/unlock changed the hold");
		cr_assert_eq(dmt_unlock_answered(&m), 0, "unlock #%d", i + 1);
	}
	cr_assert_not(key_exists("rec"), "key left after the outermost unlock");
	cr_assert_eq(dmutex_unlock(&m), EPERM, "unlock #%d", K + 1);
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

Test(api, recursive_only_outermost_reach_redis)
{
	long long base, n, outer;
	dmutex_t m;

	/* Counts the outermost unlock's release: no kept lease. */
	open_client("lease_cache=off");
	/* A long lease: no renewal (also an EVALSHA) lands in the window. */
	init_full(&m, "rec-io", cli, DMUTEX_RECURSIVE, DMUTEX_STALLED, 60000, NULL, NULL);
	/* Load the scripts first: a first EVALSHA may meet NOSCRIPT. */
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);

	base = lock_calls();
	cr_assert_eq(dmutex_lock(&m), 0);
	n = lock_calls();
	/* On Redlock a node whose counter lags the quorum's largest token is
	 * raised by a second script (fence_raise.lua): the nodes' clocks are
	 * rarely in the same millisecond, so the outermost lock may cost 2. */
	outer = n - base;
	cr_assert(outer == 1 || (dmt_nodes() > 1 && outer == 2),
			"outermost lock: %lld calls", outer);
	for (int i = 0; i < 10; i++)
		cr_assert_eq(dmutex_lock(&m), 0);
	for (int i = 0; i < 10; i++)
		cr_assert_eq(dmutex_unlock(&m), 0);
	n = lock_calls();
	cr_assert_eq(n, base + outer, "10 inner lock/unlock pairs made %lld calls",
			n - base - outer);
	cr_assert(key_exists("rec-io"));
	cr_assert_eq(dmt_unlock_answered(&m), 0);
	n = lock_calls();
	cr_assert_eq(n, base + outer + 1, "outermost unlock: %lld calls", n - base - outer);
	cr_assert_not(key_exists("rec-io"));
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

Test(api, recursive_count_past_int_max_eagain)
{
	struct dmutex__mutex *mx;
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "rec-max", DMUTEX_RECURSIVE);
	cr_assert_eq(dmutex_lock(&m), 0);
	/* 2^31 real relocks would take too long: set the count directly. */
	cr_assert_eq(dmutex__resolve(&m, &mx), 0);
	pthread_mutex_lock(&mx->entry->mu);
	mx->entry->depth = INT_MAX - 1;
	pthread_mutex_unlock(&mx->entry->mu);
	cr_assert_eq(dmutex_lock(&m), 0, "count INT_MAX-1 -> INT_MAX");
	cr_assert_eq(dmutex_lock(&m), EAGAIN);
	cr_assert_eq(dmutex_trylock(&m), EAGAIN);
	pthread_mutex_lock(&mx->entry->mu);
	cr_assert_eq(mx->entry->depth, INT_MAX, "EAGAIN changed the count");
	mx->entry->depth = 1;
	pthread_mutex_unlock(&mx->entry->mu);
	cr_assert_eq(dmt_unlock_answered(&m), 0);
	cr_assert_not(key_exists("rec-max"));
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

/* ------------------------------------------------------------------ */
/* row: unlock by a thread that does not hold it -> EPERM              */
/* ------------------------------------------------------------------ */

static void
unlock_by_other_thread(int type)
{
	char before[64], after[64];
	struct holder h;
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "eperm", type);
	holder_start(&h, &m);
	lock_token("eperm", before);
	cr_assert_eq(dmutex_unlock(&m), EPERM);
	lock_token("eperm", after);
	cr_assert_str_eq(before, after, "a non-owner's unlock changed the lock");
	cr_assert_eq(holder_finish(&h), 0, "the owner's unlock failed after a foreign one");
	cr_assert_not(key_exists("eperm"));
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

Test(api, unlock_by_non_owner_thread_eperm_normal)
{
	unlock_by_other_thread(DMUTEX_NORMAL);
}

Test(api, unlock_by_non_owner_thread_eperm_errorcheck)
{
	unlock_by_other_thread(DMUTEX_ERRORCHECK);
}

Test(api, unlock_by_non_owner_thread_eperm_recursive)
{
	unlock_by_other_thread(DMUTEX_RECURSIVE);
}

Test(api, unlock_of_unlocked_mutex_eperm)
{
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "never", DMUTEX_NORMAL);
	cr_assert_eq(dmutex_unlock(&m), EPERM);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	/* An unlock of a mutex not held waits for our last release's answer
	 * (it might say ENOLCK): the key is gone by then. */
	cr_assert_eq(dmutex_unlock(&m), EPERM);
	cr_assert_not(key_exists("never"));
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

static dmutex_t fork_m;

/* Child: unlock the parent's hold through the inherited object, then
 * through an object of its own on its own client: both EPERM. */
/* A fork's copy of a held mutex is not held by the child. */
static int
child_fork_copy_unlock(void *arg)
{
	(void)arg;
	return dmutex_unlock(&fork_m) == EPERM ? 0 : 20;
}

/* Another process (exec'd: a fresh allocator, see th_spawn_exec). */
static int
child_unlock_main(const char *url)
{
	dmutex_client_t *cl;
	dmutex_attr_t a;
	dmutex_t m;

	if (dmutex_client_open(&cl, url))
		return 21;
	if (dmutex_attr_init(&a) || dmutex_attr_setclient(&a, cl) || dmutex_init(&m, "xproc", &a))
		return 22;
	if (dmutex_unlock(&m) != EPERM)
		return 23;
	if (dmutex_trylock(&m) != EBUSY)
		return 24;
	if (dmutex_destroy(&m) || dmutex_client_close(cl))
		return 25;
	return 0;
}

TH_CHILD_ENTRY(child_unlock_main, child_unlock_main)

Test(api, unlock_from_other_process_eperm)
{
	char url[800], before[64], after[64], meta_before[64], meta_after[64];
	redisReply *r;
	uint64_t fence;
	pid_t pid;

	open_client(NULL);
	dmt_url(url, sizeof url, NULL, srv.port, NULL);
	init_type(&fork_m, "xproc", DMUTEX_NORMAL);
	cr_assert_eq(dmutex_lock(&fork_m), 0);
	/* A token asked for: the meta hash has a counter to compare (key
	 * layout 3 hands one out only then). */
	cr_assert_eq(dmutex_fence(&fork_m, &fence), 0);
	lock_token("xproc", before);
	/* (Over etcd the token is the key's revision: no counter to read.) */
	if (!dmt_etcd()) {
		r = th_redis_cmd(&srv, "HGET dmutex:meta:{xproc} fence");
		cr_assert(r && r->type == REDIS_REPLY_STRING);
		snprintf(meta_before, sizeof meta_before, "%s", r->str);
		freeReplyObject(r);
	}

	pid = th_spawn_exec("child_unlock_main", url);
	cr_assert_gt(pid, 0);
	cr_assert_eq(th_wait_child(pid, 10000), 0, "child step failed");
	/* The fork's copy: a raw fork is the point, which GCC 12's libasan
	 * cannot always give a threaded parent; the plain build runs it. */
	if (!DMT_ASAN_FORK_UNSAFE) {
		pid = th_spawn(child_fork_copy_unlock, NULL);
		cr_assert_gt(pid, 0);
		cr_assert_eq(th_wait_child(pid, 10000), 0, "the fork's copy was unlocked");
	}

	lock_token("xproc", after);
	cr_assert_str_eq(before, after, "another process's unlock changed the lock");
	if (!dmt_etcd()) {
		r = th_redis_cmd(&srv, "HGET dmutex:meta:{xproc} fence");
		cr_assert(r && r->type == REDIS_REPLY_STRING);
		snprintf(meta_after, sizeof meta_after, "%s", r->str);
		freeReplyObject(r);
		cr_assert_str_eq(meta_before, meta_after);
	}
	cr_assert_eq(dmt_unlock_answered(&fork_m), 0);
	cr_assert_not(key_exists("xproc"));
	cr_assert_eq(dmutex_destroy(&fork_m), 0);
	close_client();
}

/* ------------------------------------------------------------------ */
/* row: destroy while held by a thread of this process -> EBUSY        */
/* ------------------------------------------------------------------ */

Test(api, destroy_while_held_by_this_thread_ebusy)
{
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "dbusy", DMUTEX_NORMAL);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_destroy(&m), EBUSY);
	/* Nothing was destroyed: the hold still works. */
	cr_assert(key_exists("dbusy"));
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

Test(api, destroy_while_held_by_other_thread_ebusy)
{
	struct holder h;
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "dbusy2", DMUTEX_NORMAL);
	holder_start(&h, &m);
	cr_assert_eq(dmutex_destroy(&m), EBUSY);
	cr_assert_eq(holder_finish(&h), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

Test(api, any_call_after_destroy_einval)
{
	struct timespec ts;
	uint64_t fence;
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "gone", DMUTEX_NORMAL);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmt_unlock_answered(&m), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	dmt_deadline_in(CLOCK_REALTIME, 1000, &ts);
	cr_assert_eq(dmutex_lock(&m), EINVAL);
	cr_assert_eq(dmutex_trylock(&m), EINVAL);
	cr_assert_eq(dmutex_timedlock(&m, &ts), EINVAL);
	cr_assert_eq(dmutex_clocklock(&m, CLOCK_REALTIME, &ts), EINVAL);
	cr_assert_eq(dmutex_unlock(&m), EINVAL);
	cr_assert_eq(dmutex_fence(&m, &fence), EINVAL);
	cr_assert_eq(dmutex_consistent(&m), EINVAL);
	cr_assert_eq(dmutex_destroy(&m), EINVAL);
	cr_assert_not(key_exists("gone"));
	close_client();
}

/* ------------------------------------------------------------------ */
/* row: NULL pointer, uninitialized mutex, bad name -> EINVAL          */
/* ------------------------------------------------------------------ */

Test(api, null_mutex_einval)
{
	struct timespec ts;
	uint64_t fence;
	dmutex_attr_t a;

	open_client(NULL);
	dmt_deadline_in(CLOCK_REALTIME, 1000, &ts);
	cr_assert_eq(dmutex_lock(NULL), EINVAL);
	cr_assert_eq(dmutex_trylock(NULL), EINVAL);
	cr_assert_eq(dmutex_timedlock(NULL, &ts), EINVAL);
	cr_assert_eq(dmutex_clocklock(NULL, CLOCK_REALTIME, &ts), EINVAL);
	cr_assert_eq(dmutex_unlock(NULL), EINVAL);
	cr_assert_eq(dmutex_destroy(NULL), EINVAL);
	cr_assert_eq(dmutex_consistent(NULL), EINVAL);
	cr_assert_eq(dmutex_fence(NULL, &fence), EINVAL);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, cli), 0);
	cr_assert_eq(dmutex_init(NULL, "x", &a), EINVAL);
	cr_assert_eq(dmutex_attr_destroy(&a), 0);
	close_client();
}

Test(api, null_deadline_and_fence_out_einval)
{
	uint64_t fence = 0;
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "nulls", DMUTEX_NORMAL);
	cr_assert_eq(dmutex_timedlock(&m, NULL), EINVAL);
	cr_assert_eq(dmutex_clocklock(&m, CLOCK_MONOTONIC, NULL), EINVAL);
	cr_assert_not(key_exists("nulls"), "a NULL deadline took the lock");
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_fence(&m, NULL), EINVAL);
	cr_assert_eq(dmutex_fence(&m, &fence), 0);
	cr_assert_gt(fence, 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

Test(api, null_attr_and_client_einval)
{
	dmutex_attr_t a;
	int type;
	int robust;
	unsigned lease;

	cr_assert_eq(dmutex_attr_init(NULL), EINVAL);
	cr_assert_eq(dmutex_attr_destroy(NULL), EINVAL);
	cr_assert_eq(dmutex_attr_settype(NULL, DMUTEX_NORMAL), EINVAL);
	cr_assert_eq(dmutex_attr_gettype(NULL, &type), EINVAL);
	cr_assert_eq(dmutex_attr_setrobust(NULL, DMUTEX_ROBUST), EINVAL);
	cr_assert_eq(dmutex_attr_getrobust(NULL, &robust), EINVAL);
	cr_assert_eq(dmutex_attr_setlease(NULL, 1000), EINVAL);
	cr_assert_eq(dmutex_attr_getlease(NULL, &lease), EINVAL);
	cr_assert_eq(dmutex_attr_setclient(NULL, NULL), EINVAL);
	cr_assert_eq(dmutex_attr_setonlost(NULL, NULL, NULL), EINVAL);
	/* NULL out-parameters of the getters. */
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_gettype(&a, NULL), EINVAL);
	cr_assert_eq(dmutex_attr_getrobust(&a, NULL), EINVAL);
	cr_assert_eq(dmutex_attr_getlease(&a, NULL), EINVAL);
	cr_assert_eq(dmutex_attr_destroy(&a), 0);
	cr_assert_eq(dmutex_client_open(NULL, srv.url), EINVAL);
	cr_assert_eq(dmutex_client_close(NULL), EINVAL);
}

/* Every call on a never-initialized mutex filled with `fill`. */
static void
uninit_einval(int fill)
{
	struct timespec ts;
	uint64_t fence;
	dmutex_t m;

	open_client(NULL);
	memset(&m, fill, sizeof m);
	dmt_deadline_in(CLOCK_REALTIME, 1000, &ts);
	cr_assert_eq(dmutex_lock(&m), EINVAL);
	cr_assert_eq(dmutex_trylock(&m), EINVAL);
	cr_assert_eq(dmutex_timedlock(&m, &ts), EINVAL);
	cr_assert_eq(dmutex_unlock(&m), EINVAL);
	cr_assert_eq(dmutex_fence(&m, &fence), EINVAL);
	cr_assert_eq(dmutex_consistent(&m), EINVAL);
	cr_assert_eq(dmutex_destroy(&m), EINVAL);
	cr_assert_eq(th_redis_int(&srv, "DBSIZE"), 0, "an uninitialized mutex wrote to Redis");
	close_client();
}

Test(api, uninitialized_mutex_zero_filled_einval)
{
	uninit_einval(0);
}

Test(api, uninitialized_mutex_garbage_filled_einval)
{
	uninit_einval(0xA5);
}

Test(api, bad_names_einval_and_512_bytes_ok)
{
	char n513[DMUTEX_NAME_MAX + 2], n512[DMUTEX_NAME_MAX + 1];
	dmutex_attr_t a;
	dmutex_t m;

	open_client(NULL);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, cli), 0);
	memset(n513, 'n', DMUTEX_NAME_MAX + 1);
	n513[DMUTEX_NAME_MAX + 1] = '\0';
	memset(n512, 'n', DMUTEX_NAME_MAX);
	n512[DMUTEX_NAME_MAX] = '\0';
	cr_assert_eq(strlen(n513), 513);
	cr_assert_eq(strlen(n512), 512);

	cr_assert_eq(dmutex_init(&m, NULL, &a), EINVAL);
	cr_assert_eq(dmutex_init(&m, "", &a), EINVAL);
	cr_assert_eq(dmutex_init(&m, n513, &a), EINVAL);
	/* A failed init leaves nothing usable behind. */
	memset(&m, 0, sizeof m);
	cr_assert_eq(dmutex_init(&m, n513, &a), EINVAL);
	cr_assert_eq(dmutex_lock(&m), EINVAL);

	cr_assert_eq(dmutex_init(&m, n512, &a), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert(key_exists(n512), "no lock key for the 512-byte name");
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	cr_assert_eq(dmutex_attr_destroy(&a), 0);
	close_client();
}

Test(api, uninitialized_attr_einval)
{
	dmutex_attr_t a;
	dmutex_t m;
	int type;

	open_client(NULL);
	memset(&a, 0xA5, sizeof a);
	cr_assert_eq(dmutex_init(&m, "attr", &a), EINVAL);
	cr_assert_eq(dmutex_attr_settype(&a, DMUTEX_NORMAL), EINVAL);
	cr_assert_eq(dmutex_attr_gettype(&a, &type), EINVAL);
	cr_assert_eq(dmutex_attr_destroy(&a), EINVAL);
	memset(&a, 0, sizeof a);
	cr_assert_eq(dmutex_init(&m, "attr", &a), EINVAL);
	/* A destroyed attr is uninitialized too. */
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, cli), 0);
	cr_assert_eq(dmutex_attr_destroy(&a), 0);
	cr_assert_eq(dmutex_init(&m, "attr", &a), EINVAL);
	cr_assert_eq(dmutex_attr_setlease(&a, 1000), EINVAL);
	close_client();
}

Test(api, attr_setters_out_of_range_einval)
{
	dmutex_attr_t a;
	unsigned lease;
	int v;

	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_getlease(&a, &lease), 0);
	cr_assert_eq(lease, 0, "default lease is 'the client's'");

	cr_assert_eq(dmutex_attr_setlease(&a, 99), EINVAL);
	cr_assert_eq(dmutex_attr_setlease(&a, 86400001u), EINVAL);
	cr_assert_eq(dmutex_attr_getlease(&a, &lease), 0);
	cr_assert_eq(lease, 0, "a rejected lease was stored");
	cr_assert_eq(dmutex_attr_setlease(&a, 100), 0);
	cr_assert_eq(dmutex_attr_getlease(&a, &lease), 0);
	cr_assert_eq(lease, 100);
	cr_assert_eq(dmutex_attr_setlease(&a, 86400000u), 0);
	cr_assert_eq(dmutex_attr_getlease(&a, &lease), 0);
	cr_assert_eq(lease, 86400000u);

	cr_assert_eq(dmutex_attr_settype(&a, DMUTEX_RECURSIVE), 0);
	cr_assert_eq(dmutex_attr_settype(&a, 7), EINVAL);
	cr_assert_eq(dmutex_attr_settype(&a, -1), EINVAL);
	cr_assert_eq(dmutex_attr_gettype(&a, &v), 0);
	cr_assert_eq(v, DMUTEX_RECURSIVE, "a rejected type was stored");

	cr_assert_eq(dmutex_attr_setrobust(&a, DMUTEX_ROBUST), 0);
	cr_assert_eq(dmutex_attr_setrobust(&a, 5), EINVAL);
	cr_assert_eq(dmutex_attr_getrobust(&a, &v), 0);
	cr_assert_eq(v, DMUTEX_ROBUST, "a rejected robustness was stored");
	cr_assert_eq(dmutex_attr_destroy(&a), 0);
}

Test(api, consistent_on_non_robust_held_einval_and_not_held_eperm)
{
	dmutex_t m, r;

	open_client(NULL);
	init_type(&m, "cons", DMUTEX_NORMAL);
	cr_assert_eq(dmutex_consistent(&m), EPERM, "not held");
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_consistent(&m), EINVAL, "held, not robust");
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_consistent(&m), EPERM, "not held after unlock");
	/* Robust but consistent (no owner died): EINVAL too. */
	init_full(&r, "cons-r", cli, DMUTEX_NORMAL, DMUTEX_ROBUST, 0, NULL, NULL);
	cr_assert_eq(dmutex_lock(&r), 0);
	cr_assert_eq(dmutex_consistent(&r), EINVAL, "held, robust, not inconsistent");
	cr_assert_eq(dmutex_unlock(&r), 0);
	/* That EINVAL did not mark anything: the next locker is not told
	 * the lock is unrecoverable. */
	cr_assert_eq(dmutex_lock(&r), 0);
	cr_assert_eq(dmutex_unlock(&r), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	cr_assert_eq(dmutex_destroy(&r), 0);
	close_client();
}

Test(api, fence_when_not_held_eperm)
{
	uint64_t fence = 0;
	dmutex_t m;
	struct holder h;

	open_client(NULL);
	init_type(&m, "fence", DMUTEX_NORMAL);
	cr_assert_eq(dmutex_fence(&m, &fence), EPERM);
	holder_start(&h, &m);
	cr_assert_eq(dmutex_fence(&m, &fence), EPERM, "fence of another thread's hold");
	cr_assert_eq(holder_finish(&h), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

/* ------------------------------------------------------------------ */
/* row: backend unreachable or failing -> EIO                          */
/* ------------------------------------------------------------------ */

#define IO_OPTS "command_timeout_ms=200&connect_timeout_ms=200"

Test(api, lock_eio_when_server_stopped)
{
	long long t0, el;
	dmutex_t m;

	DMT_SINGLE_NODE();

	open_client(IO_OPTS);
	init_type(&m, "eio", DMUTEX_NORMAL);
	if (dmt_etcd())
		cr_assert_eq(dmt_etcd_kill(), 0);
	else
		th_redis_stop(&srv);
	t0 = th_now_ms();
	cr_assert_eq(dmutex_lock(&m), EIO);
	el = th_now_ms() - t0;
	/* It retries for a few command timeouts, and no longer than that. */
	cr_assert_geq(el, 200, "blocking lock gave up after %lld ms without retrying", el);
	cr_assert_lt(el, 2500, "EIO took %lld ms", el);
	cr_assert_eq(dmutex_unlock(&m), EPERM, "EIO left a hold behind");
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

Test(api, trylock_eio_fast_when_server_stopped)
{
	long long t0, el;
	dmutex_t m;

	DMT_SINGLE_NODE();

	open_client(IO_OPTS);
	init_type(&m, "eio-try", DMUTEX_NORMAL);
	if (dmt_etcd())
		cr_assert_eq(dmt_etcd_kill(), 0);
	else
		th_redis_stop(&srv);
	t0 = th_now_ms();
	cr_assert_eq(dmutex_trylock(&m), EIO);
	el = th_now_ms() - t0;
	cr_assert_lt(el, 600, "trylock took %lld ms: more than one attempt", el);
	cr_assert_eq(dmutex_unlock(&m), EPERM);
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

Test(api, client_open_nobody_listening_eio)
{
	char url[128];
	dmutex_client_t *c = NULL;
	int port = th_free_port();

	cr_assert_gt(port, 0);
	snprintf(url, sizeof url, "redis://127.0.0.1:%d?connect_timeout_ms=200&command_timeout_ms=200", port);
	cr_assert_eq(dmutex_client_open(&c, url), EIO);
}

Test(api, wrong_type_key_lock_eio_and_logged)
{
	char k[64];
	redisReply *r;
	dmutex_t m;
	int rc;

	DMT_SINGLE_NODE();
	DMT_REDIS_STATE("a foreign value SET on the lock key");

	dmutex_set_logger(record_log, NULL);
	open_client(IO_OPTS);
	init_type(&m, "wt", DMUTEX_NORMAL);
	dmt_lock_key(k, sizeof k, "wt");
	r = th_redis_cmd(&srv, "SET %s not-a-lock", k);
	cr_assert(r && r->type == REDIS_REPLY_STATUS);
	freeReplyObject(r);

	rc = dmutex_lock(&m);
	cr_assert_eq(rc, EIO, "lock over a foreign key: %d", rc);
	rc = dmutex_trylock(&m);
	cr_assert_eq(rc, EIO, "trylock over a foreign key: %d", rc);
	cr_assert(log_contains("WRONGTYPE"), "no log line names the wrong type");
	/* The foreign data is untouched. */
	r = th_redis_cmd(&srv, "GET %s", k);
	cr_assert(r && r->type == REDIS_REPLY_STRING);
	cr_assert_str_eq(r->str, "not-a-lock");
	freeReplyObject(r);
	cr_assert_eq(dmutex_unlock(&m), EPERM);
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

Test(api, out_of_memory_lock_eio)
{
	redisReply *r;
	dmutex_t m;
	int rc;

	DMT_SINGLE_NODE();
	DMT_REDIS_STATE("Redis maxmemory");

	dmutex_set_logger(record_log, NULL);
	open_client(IO_OPTS);
	init_type(&m, "oom", DMUTEX_NORMAL);
	r = th_redis_cmd(&srv, "CONFIG SET maxmemory-policy noeviction");
	cr_assert(r && r->type == REDIS_REPLY_STATUS);
	freeReplyObject(r);
	r = th_redis_cmd(&srv, "CONFIG SET maxmemory 1");
	cr_assert(r && r->type == REDIS_REPLY_STATUS);
	freeReplyObject(r);

	rc = dmutex_lock(&m);
	cr_assert_eq(rc, EIO, "lock on an OOM server: %d", rc);
	cr_assert_not(key_exists("oom"));
	cr_assert(log_contains("OOM"), "no log line says why");

	/* Memory back: the same mutex works, so EIO was the OOM's doing. */
	r = th_redis_cmd(&srv, "CONFIG SET maxmemory 0");
	cr_assert(r && r->type == REDIS_REPLY_STATUS);
	freeReplyObject(r);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

Test(api, noscript_after_script_flush_recovers)
{
	redisReply *r;
	dmutex_t m;

	/* Reads Redis after the unlock: a kept lease would not release. */
	open_client("lease_cache=off");
	init_type(&m, "flush", DMUTEX_NORMAL);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	r = th_redis_cmd(&srv, "SCRIPT FLUSH");
	cr_assert(r && r->type == REDIS_REPLY_STATUS);
	freeReplyObject(r);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert(key_exists("flush"));
	cr_assert_eq(dmt_unlock_answered(&m), 0);
	cr_assert_not(key_exists("flush"));
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

/* ------------------------------------------------------------------ */
/* ENOLCK: the hold is lost                                            */
/* ------------------------------------------------------------------ */

static int lost_calls;
static long long lost_at;
static char lost_name[64];

static void
on_lost(const char *name, void *arg)
{
	(void)arg;
	snprintf(lost_name, sizeof lost_name, "%s", name);
	__atomic_store_n(&lost_at, th_now_ms(), __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&lost_calls, 1, __ATOMIC_SEQ_CST);
}

static int
lost_called(void *arg)
{
	(void)arg;
	return __atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST) > 0;
}

Test(api, key_deleted_under_holder_enolck)
{
	char k[64];
	uint64_t fence;
	long long del_at;
	dmutex_t m;

	DMT_SINGLE_NODE();
	DMT_REDIS_STATE("DEL of the Redis lock key under its holder");

	open_client(NULL);
	/* The renewal notices the loss at most a third of a lease after the
	 * DEL; the hold's own deadline would say so 2/3 to 1 lease after it.
	 * Half a lease tells them apart; 3 s (9 s under the sanitizers)
	 * leaves the renewal thread 0.5 s (1.5 s) to get a CPU: a 300 ms
	 * lease left it 150 ms, not enough on a loaded 2-core machine. */
	const unsigned lease = 3000 * (unsigned)dmt_slowdown();

	init_full(&m, "lost", cli, DMUTEX_NORMAL, DMUTEX_STALLED, lease, on_lost, NULL);
	cr_assert_eq(dmutex_lock(&m), 0);
	dmt_lock_key(k, sizeof k, "lost");
	del_at = th_now_ms();
	cr_assert_eq(th_redis_int(&srv, "DEL %s", k), 1);
	cr_assert(th_wait_until(lost_called, NULL, (int)lease), "onlost never called");
	cr_assert_lt(__atomic_load_n(&lost_at, __ATOMIC_SEQ_CST) - del_at, lease / 2,
			"loss noticed %lld ms after the key vanished (lease %u ms)",
			__atomic_load_n(&lost_at, __ATOMIC_SEQ_CST) - del_at, lease);
	cr_assert_str_eq(lost_name, "lost");
	cr_assert_eq(dmutex_fence(&m, &fence), ENOLCK);
	cr_assert_eq(dmutex_unlock(&m), ENOLCK);
	cr_assert_eq(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1, "onlost called more than once");
	cr_assert_eq(dmutex_unlock(&m), EPERM, "the lost hold was not forgotten");
	/* Forgotten whole: the lock can be taken again. */
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
	cr_assert_eq(dmutex_destroy(&m), 0);
	close_client();
}

/* ------------------------------------------------------------------ */
/* dmutex_strerror                                                     */
/* ------------------------------------------------------------------ */

Test(api, strerror_distinct_for_every_code)
{
	static const int codes[] = { 0, EINVAL, EBUSY, ETIMEDOUT, EDEADLK, EAGAIN, EPERM,
		EOWNERDEAD, ENOTRECOVERABLE, ENOLCK, EIO, ENOTSUP, ENOMEM };
	enum { N = sizeof codes / sizeof codes[0] };
	const char *s[N];

	for (int i = 0; i < N; i++) {
		s[i] = dmutex_strerror(codes[i]);
		cr_assert_not_null(s[i], "code %d", codes[i]);
		cr_assert_gt(strlen(s[i]), 0, "code %d", codes[i]);
		cr_assert_str_neq(s[i], "unknown dmutex error", "code %d", codes[i]);
		for (int j = 0; j < i; j++)
			cr_assert_str_neq(s[i], s[j], "codes %d and %d share a message", codes[i], codes[j]);
	}
	cr_assert_str_eq(dmutex_strerror(12345), "unknown dmutex error");
	cr_assert_str_eq(dmutex_strerror(-1), "unknown dmutex error");
}

/* ------------------------------------------------------------------ */
/* DMUTEX_INITIALIZER                                                  */
/* ------------------------------------------------------------------ */

static dmutex_t sm = DMUTEX_INITIALIZER("static-api");
static dmutex_t sm2 = DMUTEX_INITIALIZER("static-api-2");

Test(api, static_initializer_binds_default_client)
{
	cr_assert_eq(setenv("DMUTEX_URL", srv.url, 1), 0);
	cr_assert_eq(dmutex_lock(&sm), 0);
	cr_assert(key_exists("static-api"), "the static mutex did not lock in THIS server");
	cr_assert_eq(dmutex_lock(&sm), EDEADLK, "default type is NORMAL");
	cr_assert_eq(dmt_unlock_answered(&sm), 0);
	cr_assert_not(key_exists("static-api"));
}

struct binder {
	pthread_barrier_t *start;
	int *inside;
	int bad;      /* first non-zero rc, or 1000 on an overlap */
};

static void *
binder_main(void *arg)
{
	struct binder *b = arg;

	/* Both threads make the first use together: the bind races. */
	pthread_barrier_wait(b->start);
	for (int i = 0; i < 50 && !b->bad; i++) {
		int rc = dmutex_lock(&sm2);
		if (rc) {
			b->bad = rc;
			break;
		}
		if (__atomic_add_fetch(b->inside, 1, __ATOMIC_SEQ_CST) != 1)
			b->bad = 1000;
		__atomic_sub_fetch(b->inside, 1, __ATOMIC_SEQ_CST);
		if ((rc = dmutex_unlock(&sm2)) && !b->bad)
			b->bad = rc;
	}
	return NULL;
}

Test(api, static_initializer_bound_from_two_threads_at_once)
{
	pthread_barrier_t start;
	pthread_t th[2];
	struct binder b[2];
	int inside = 0;
	char url[sizeof srv.url + 32];

	/* The key must be gone after the threads' last unlock: no kept lease
	 * (lease_cache is client-wide: it may stand on the last URL). */
	th_url_with(url, sizeof url, srv.url, "lease_cache=off");
	cr_assert_eq(setenv("DMUTEX_URL", url, 1), 0);
	pthread_barrier_init(&start, NULL, 2);
	for (int i = 0; i < 2; i++) {
		b[i] = (struct binder){ .start = &start, .inside = &inside };
		cr_assert_eq(pthread_create(&th[i], NULL, binder_main, &b[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&start);
	cr_assert_eq(b[0].bad, 0, "thread 0: %d", b[0].bad);
	cr_assert_eq(b[1].bad, 0, "thread 1: %d", b[1].bad);
	cr_assert_not(key_exists("static-api-2"));
	/* Still one working mutex afterwards. */
	cr_assert_eq(dmutex_trylock(&sm2), 0);
	cr_assert(key_exists("static-api-2"));
	cr_assert_eq(dmutex_unlock(&sm2), 0);
}

/* ------------------------------------------------------------------ */
/* dmutex_client_close                                                 */
/* ------------------------------------------------------------------ */

Test(api, client_close_while_held_ebusy)
{
	dmutex_t m;

	open_client(NULL);
	init_type(&m, "close", DMUTEX_NORMAL);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_client_close(cli), EBUSY);
	/* Nothing was closed: the hold is intact and releases normally. */
	cr_assert(key_exists("close"));
	cr_assert_eq(dmt_unlock_answered(&m), 0);
	cr_assert_not(key_exists("close"));
	cr_assert_eq(dmutex_destroy(&m), 0);
	cr_assert_eq(dmutex_client_close(cli), 0);
	cli = NULL;
}
