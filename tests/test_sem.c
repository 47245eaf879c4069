/*
 * Counting semaphores (dsem_*) against a real redis-server: the error
 * table, the first creator's value, never more holders than permits across
 * three processes, waiters woken through pub/sub (well before their safety
 * re-check), and processes killed while holding a permit or waiting.
 *
 * "Holders" is a Redis counter that each holder INCRs after taking a permit
 * and DECRs before posting; INCR returning more than the permits is a
 * violation seen by that holder.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dmutex.h"
#include "harness.h"
#include "dmt.h"

static struct th_redis srv;
static pid_t kids[4];

static void srv_up(void)
{
	cr_assert_eq(th_redis_start(&srv, NULL), 0, "redis-server did not start");
	/* The etcd run (DMUTEX_TEST_ETCD): srv.url names an etcd member; the
	 * tests' own counters stay in srv. */
	cr_assert_eq(dmt_backend_up(&srv), 0, "the backend did not start");
}

/* Semaphore NAME's free count as the backend keeps it: a hash field on
 * Redis, the first field of "FREE INIT" over etcd; LLONG_MIN if absent. */
static long long stored_value(const char *name)
{
	if (dmt_etcd())
		return dmt_etcd_field("s", name, "v", 0);
	return th_redis_int(&srv, "HGET dmutex:sem:{%s} v", name);
}

/* Whether semaphore NAME exists on the backend. */
static long long stored(const char *name)
{
	if (dmt_etcd())
		return dmt_etcd_count("s", name, "v");
	return th_redis_int(&srv, "EXISTS dmutex:sem:{%s}", name);
}

static void srv_down(void)
{
	for (size_t i = 0; i < sizeof kids / sizeof kids[0]; i++)
		if (kids[i] > 0) {
			kill(kids[i], SIGKILL);
			th_wait_child(kids[i], 5000);
			kids[i] = 0;
		}
	th_redis_stop(&srv);
}

TestSuite(sem, .init = srv_up, .fini = srv_down, .timeout = 30);

static struct timespec in_ms(clockid_t clock, long ms)
{
	struct timespec t;

	clock_gettime(clock, &t);
	t.tv_sec += ms / 1000;
	t.tv_nsec += (ms % 1000) * 1000000L;
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	return t;
}

static int value_of(dsem_t *s)
{
	int v = -1;

	cr_assert_eq(dsem_getvalue(s, &v), 0);
	return v;
}

Test(sem, errors)
{
	dmutex_client_t *c;
	dsem_t s, t;
	struct timespec past = { 0, 0 }, bad = { 0, 1000000000L };
	int v;

	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	cr_assert_eq(dsem_init(NULL, "e", 1, c, 0), EINVAL);
	cr_assert_eq(dsem_init(&s, NULL, 1, c, 0), EINVAL);
	cr_assert_eq(dsem_init(&s, "", 1, c, 0), EINVAL);
	cr_assert_eq(dsem_init(&s, "e", DSEM_VALUE_MAX + 1U, c, 0), EINVAL);
	cr_assert_eq(dsem_init(&s, "e", 1, c, 4), EINVAL);
	cr_assert_eq(dsem_wait(NULL), EINVAL);
	cr_assert_eq(dsem_post(NULL), EINVAL);
	cr_assert_eq(dsem_getvalue(NULL, &v), EINVAL);
	cr_assert_eq(dsem_destroy(NULL), EINVAL);
	cr_assert_eq(dsem_init(&s, "e", 1, c, DSEM_EXCL | DSEM_NOCREATE), EINVAL);
	cr_assert_eq(dsem_unlink("e-none", c), ENOENT);
	cr_assert_eq(dsem_init(&s, "e-none", 1, c, DSEM_NOCREATE), ENOENT);
	cr_assert_eq(stored("e-none"), 0);

	cr_assert_eq(dsem_init(&s, "e", 1, c, DSEM_EXCL), 0);
	cr_assert_eq(dsem_init(&t, "e", 1, c, DSEM_EXCL), EEXIST);
	cr_assert_eq(dsem_init(&t, "e", 9, c, DSEM_NOCREATE), 0);
	cr_assert_eq(dsem_destroy(&t), 0);
	cr_assert_eq(dsem_getvalue(&s, NULL), EINVAL);
	/* A bad deadline is not looked at while a permit is free... */
	cr_assert_eq(dsem_timedwait(&s, NULL), 0);
	cr_assert_eq(value_of(&s), 0);
	/* ... and is EINVAL when the call would wait. */
	cr_assert_eq(dsem_timedwait(&s, NULL), EINVAL);
	cr_assert_eq(dsem_timedwait(&s, &bad), EINVAL);
	cr_assert_eq(dsem_clockwait(&s, CLOCK_PROCESS_CPUTIME_ID, &past), EINVAL);
	cr_assert_eq(dsem_trywait(&s), EAGAIN);
	cr_assert_eq(dsem_timedwait(&s, &past), ETIMEDOUT);
	struct timespec soon = in_ms(CLOCK_MONOTONIC, 100);
	cr_assert_eq(dsem_clockwait(&s, CLOCK_MONOTONIC, &soon), ETIMEDOUT);
	cr_assert_eq(dsem_post(&s), 0);
	cr_assert_eq(dsem_post(&s), 0);
	cr_assert_eq(value_of(&s), 2);
	cr_assert_eq(dsem_trywait(&s), 0);
	cr_assert_eq(value_of(&s), 1);

	/* Overflow at the maximum. */
	cr_assert_eq(dsem_init(&t, "e-max", DSEM_VALUE_MAX, c, 0), 0);
	cr_assert_eq(dsem_post(&t), EOVERFLOW);
	cr_assert_eq(value_of(&t), (int)DSEM_VALUE_MAX);
	cr_assert_eq(dsem_destroy(&t), 0);
	cr_assert_eq(dsem_unlink("e-max", c), 0);

	cr_assert_eq(dsem_destroy(&s), 0);
	cr_assert_eq(dsem_destroy(&s), EINVAL);
	cr_assert_eq(dsem_post(&s), EINVAL);
	cr_assert_eq(dsem_unlink("e", c), 0);
	cr_assert_eq(dsem_unlink("e", c), ENOENT);
	cr_assert_eq(dmutex_client_close(c), 0);
}

Test(sem, first_creator_value_applies)
{
	dmutex_client_t *c;
	dsem_t a, b;

	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	cr_assert_eq(dsem_init(&a, "fc", 3, c, 0), 0);
	cr_assert_eq(dsem_init(&b, "fc", 7, c, 0), 0);
	cr_assert_eq(value_of(&b), 3);
	cr_assert_eq(dsem_trywait(&b), 0);
	cr_assert_eq(value_of(&a), 2);
	/* The client is not closed under a semaphore. */
	cr_assert_eq(dmutex_client_close(c), EBUSY);
	cr_assert_eq(dsem_destroy(&a), 0);
	cr_assert_eq(dsem_destroy(&b), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
	cr_assert_eq(stored_value("fc"), 2, "destroy keeps it on the backend");
}

static dsem_t stat_sem = DSEM_INITIALIZER("static-sem", 2);

Test(sem, static_initializer)
{
	char env[700];

	snprintf(env, sizeof env, "%s", srv.url);
	setenv("DMUTEX_URL", env, 1);
	cr_assert_eq(dsem_trywait(&stat_sem), 0);
	cr_assert_eq(dsem_trywait(&stat_sem), 0);
	cr_assert_eq(dsem_trywait(&stat_sem), EAGAIN);
	cr_assert_eq(dsem_post(&stat_sem), 0);
	cr_assert_eq(value_of(&stat_sem), 1);
	cr_assert_eq(dsem_destroy(&stat_sem), 0);
}

/* ---- three processes, two permits ------------------------------------ */

#define PERMITS 2
#define ROUNDS 40

static int holder(void *arg)
{
	dmutex_client_t *c;
	dsem_t s;
	int bad = 0;

	(void)arg;
	if (dmutex_client_open(&c, srv.url) || dsem_init(&s, "procs", PERMITS, c, 0))
		return 10;
	for (int i = 0; i < ROUNDS; i++) {
		if (dsem_wait(&s))
			return 11;
		long long n = th_redis_int(&srv, "INCR holders");
		if (n > PERMITS || n < 1)
			bad = 1;
		/* Read-modify-write of a shared total, guarded by nothing but
		 * the semaphore's count: with PERMITS holders some interleave,
		 * so only the holders counter is checked. */
		if (th_redis_int(&srv, "DECR holders") < 0)
			bad = 1;
		if (dsem_post(&s))
			return 12;
	}
	dsem_destroy(&s);
	dmutex_client_close(c);
	return bad;
}

Test(sem, never_more_holders_than_permits)
{
	for (int i = 0; i < 3; i++)
		cr_assert_gt(kids[i] = th_spawn(holder, NULL), 0);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(th_wait_child(kids[i], 20000), 0, "holder %d failed or saw too many holders", i);
		kids[i] = 0;
	}
	cr_assert_eq(stored_value("procs"), PERMITS);
}

/* ---- wake-ups -------------------------------------------------------- */

/* Exec'd (th_spawn_exec): another process is the point, not fork(). */
static int waiter(const char *url)
{
	dmutex_client_t *c;
	dsem_t s;
	struct timespec at = in_ms(CLOCK_REALTIME, 15000);

	int err;

	if (dmutex_client_open(&c, url) || dsem_init(&s, "wake", 0, c, 0))
		return 10;
	err = dsem_timedwait(&s, &at);
	dsem_destroy(&s);
	dmutex_client_close(c);
	return err ? 11 : 0;
}
TH_CHILD_ENTRY(waiter, waiter)

/* th_wait_until condition: at least *arg waiters subscribed (over etcd:
 * watching; this test process watches nothing then). */
static int subscribed(void *arg)
{
	if (dmt_etcd())
		return dmt_etcd_watchers() >= *(int *)arg;
	return th_numsub(th_redis_cmd(&srv, "PUBSUB NUMSUB dmutex:semwake:{wake}")) >= *(int *)arg;
}

Test(sem, post_wakes_waiter_through_pubsub)
{
	dmutex_client_t *c;
	dsem_t s;
	char url[700];
	int one = 1;
	long long t0;

	/* The default 10 s lease: the safety re-check comes after 10 s, so a
	 * wake-up within 5 s came through the channel.  (The time includes
	 * the exec'd waiter's client close and exit, with LeakSanitizer's
	 * check under ASan: 2 s was too close on a loaded machine.) */
	snprintf(url, sizeof url, "%s", srv.url);
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(dsem_init(&s, "wake", 0, c, 0), 0);
	cr_assert_gt(kids[0] = th_spawn_exec("waiter", url), 0);
	cr_assert(th_wait_until(subscribed, &one, 5000), "the waiter never subscribed");
	t0 = th_now_ms();
	cr_assert_eq(dsem_post(&s), 0);
	cr_assert_eq(th_wait_child(kids[0], 5000), 0, "the waiter was not woken by the post");
	kids[0] = 0;
	cr_assert_lt(th_now_ms() - t0, 5000);
	cr_assert_eq(value_of(&s), 0);
	cr_assert_eq(dsem_destroy(&s), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/* ---- crashes ------------------------------------------------------- */

static int take_and_hang(void *arg)
{
	dmutex_client_t *c;
	dsem_t s;
	struct th_sync *sy = arg;

	if (dmutex_client_open(&c, srv.url) || dsem_init(&s, "crash", 1, c, 0) || dsem_wait(&s))
		return 10;
	th_sync_post(sy);
	pause();
	return 0;
}

Test(sem, killed_holder_keeps_its_permit_killed_waiter_takes_none)
{
	dmutex_client_t *c;
	dsem_t s;
	struct th_sync sy;
	char url[700];
	int two = 2;

	cr_assert_eq(th_sync_init(&sy), 0);
	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	cr_assert_eq(dsem_init(&s, "crash", 1, c, 0), 0);
	cr_assert_gt(kids[0] = th_spawn(take_and_hang, &sy), 0);
	cr_assert_eq(th_sync_wait(&sy, 10000), 0);
	kill(kids[0], SIGKILL);
	cr_assert_eq(th_wait_child(kids[0], 5000), 128 + SIGKILL);
	kids[0] = 0;
	/* No owner: the permit stays taken (POSIX). */
	cr_assert_eq(value_of(&s), 0);
	cr_assert_eq(dsem_trywait(&s), EAGAIN);

	/* Two waiters; one is killed; one post wakes the other. */
	snprintf(url, sizeof url, "%s", srv.url);
	cr_assert_eq(dsem_destroy(&s), 0);
	cr_assert_eq(dsem_unlink("crash", c), 0);
	cr_assert_eq(dsem_init(&s, "wake", 0, c, 0), 0);
	cr_assert_gt(kids[1] = th_spawn_exec("waiter", url), 0);
	cr_assert_gt(kids[2] = th_spawn_exec("waiter", url), 0);
	cr_assert(th_wait_until(subscribed, &two, 5000), "the waiters never subscribed");
	kill(kids[1], SIGKILL);
	cr_assert_eq(th_wait_child(kids[1], 5000), 128 + SIGKILL);
	kids[1] = 0;
	cr_assert_eq(dsem_post(&s), 0);
	cr_assert_eq(th_wait_child(kids[2], 5000), 0, "the surviving waiter was not woken");
	kids[2] = 0;
	cr_assert_eq(value_of(&s), 0, "the killed waiter took no permit");
	cr_assert_eq(dsem_post(&s), 0);
	cr_assert_eq(value_of(&s), 1);
	cr_assert_eq(dsem_destroy(&s), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
	th_sync_close(&sy);
}

/* A script of src/backend/redis/scripts/, as the library embeds it. */
static char *
script(const char *name)
{
	char path[1024];
	static char text[16384];
	FILE *f;
	size_t n;

	snprintf(path, sizeof path, "%s/%s", getenv("DMUTEX_SCRIPTS"), name);
	cr_assert_not_null(f = fopen(path, "r"), "%s", path);
	n = fread(text, 1, sizeof text - 1, f);
	fclose(f);
	text[n] = 0;
	return text;
}

/* sem_op.lua, as a post (p) or take (t): its integer answer. */
static long long
op(const char *lua, const char *token, const char *code, const char *deadline)
{
	char key[128];
	long long v;

	snprintf(key, sizeof key, "dmutex:semop:{ttl}:%s", token);
	redisReply *r = th_redis_cmd(&srv, "EVAL %s 2 dmutex:sem:{ttl} %s %s 1 2147483647 "
			"dmutex:semwake:{ttl} 5000 %s", lua, key, code, deadline);
	cr_assert(r && r->type == REDIS_REPLY_INTEGER, "%s", r && r->type == REDIS_REPLY_ERROR
			? r->str : "not an integer");
	v = r->integer;
	freeReplyObject(r);
	return v;
}

/*
 * Issue 25 defect 3, on the server's side (sem_op.lua): a result is kept
 * for the client's window and a second more, not a fixed minute; a retry
 * whose deadline (server time) has passed is refused (-2) when the result
 * is gone, and still answered the kept result while it is there; a first
 * try (deadline 0) is applied.  The client's side: shim-retry.
 */
Test(sem, retry_past_its_deadline_is_refused_not_applied)
{
	DMT_REDIS_STATE("sem_op.lua run on Redis directly");
	const char *lua = script("sem_op.lua");
	redisReply *t = th_redis_cmd(&srv, "TIME");
	char past[32], future[32];

	cr_assert(t && t->type == REDIS_REPLY_ARRAY && t->elements == 2);
	long long now = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
	freeReplyObject(t);
	snprintf(past, sizeof past, "%lld", now - 1);
	snprintf(future, sizeof future, "%lld", now + 60000);

	cr_assert_eq(op(lua, "a", "p", "0"), 2);                /* created with 1, posted */
	long long ttl = th_redis_int(&srv, "PTTL dmutex:semop:{ttl}:a");
	cr_assert(ttl > 5000 && ttl <= 6000, "kept %lld ms for a 5000 ms window", ttl);
	cr_assert_eq(op(lua, "a", "p", past), 2);               /* kept: the first result */
	cr_assert_eq(op(lua, "b", "p", past), -2);              /* gone (never was): refused */
	cr_assert_eq(op(lua, "c", "t", past), -2);
	cr_assert_eq(th_redis_int(&srv, "HGET dmutex:sem:{ttl} v"), 2);
	cr_assert_eq(op(lua, "b", "p", future), 3);             /* within its deadline: applied */
	cr_assert_eq(op(lua, "c", "t", future), 1);
	cr_assert_eq(th_redis_int(&srv, "HGET dmutex:sem:{ttl} v"), 2);
}

/*
 * README "Cancellation": no semaphore or barrier call is a cancellation
 * point.  A thread with a cancel pending runs each to its end (the backend
 * send inside is a cancellation point of libc's, where it was cancelled
 * before, leaving the request half made), and is cancelled at its own
 * pthread_testcancel after them.
 */
struct cancel_run {
	dmutex_client_t *c;
	int step;               /* calls that returned */
	int rc[6];
};

static void *
cancelled_thread(void *arg)
{
	struct cancel_run *r = arg;
	dsem_t s;
	dbarrier_t b;
	int v = -1;

	pthread_cancel(pthread_self());
	r->rc[r->step++] = dsem_init(&s, "cancel-pending", 1, r->c, 0);
	r->rc[r->step++] = dsem_post(&s);
	r->rc[r->step++] = dsem_getvalue(&s, &v) || v != 2;
	r->rc[r->step++] = dsem_wait(&s);
	r->rc[r->step++] = dsem_destroy(&s);
	r->rc[r->step++] = dbarrier_init(&b, "cancel-pending-b", 1, r->c) || dbarrier_wait(&b) != DBARRIER_SERIAL_THREAD ||
		dbarrier_destroy(&b);
	pthread_testcancel();
	return NULL;
}

Test(sem, no_call_is_a_cancellation_point)
{
	struct cancel_run r = { 0 };
	pthread_t t;
	void *ret = NULL;

	cr_assert_eq(dmutex_client_open(&r.c, srv.url), 0);
	cr_assert_eq(pthread_create(&t, NULL, cancelled_thread, &r), 0);
	cr_assert_eq(pthread_join(t, &ret), 0);
	cr_assert_eq(ret, PTHREAD_CANCELED);
	cr_assert_eq(r.step, 6, "cancelled inside call %d", r.step + 1);
	for (int i = 0; i < 6; i++)
		cr_assert_eq(r.rc[i], 0, "call %d returned %d", i + 1, r.rc[i]);
	cr_assert_eq(dmutex_client_close(r.c), 0);
}
