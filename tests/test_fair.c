/*
 * Issue 15 item 4: fair mutexes (dmutex_attr_setfair).  Waiters queue in
 * Redis, in arrival order, and an unlock hands the lock to the head: no
 * barging by the releaser, no herd, a waiter that gives up or dies loses
 * its place, tokens keep growing across hand-overs, and over Redlock a
 * fair mutex is ENOTSUP at init.
 *
 * Arrival order is made, not hoped for: each waiter starts only once the
 * one before it is seen queued (in Redis: the queue's size; for threads of
 * one process: the thread asleep, polled in /proc).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dmutex.h"
#include "harness.h"
#include "dmt.h"

static struct th_redis srv;
static char url[700];

static void
up(void)
{
	cr_assert_eq(th_redis_start(&srv, NULL), 0);
	char opt[32];

	/* A queued waiter keeps its place by asking again every third of a
	 * lease and loses it a lease after its last ask: 2 s, scaled for the
	 * sanitizers, so that the asking thread of a waiting child can miss
	 * a turn on a loaded 2-core machine (ASan is ~3x slower) without the
	 * arrival order changing; a waiter that never asks again still loses
	 * its place, and a dead one's hand-over still ends, within the tests'
	 * 20 s deadlines. */
	snprintf(opt, sizeof opt, "lease_ms=%d", 2000 * dmt_slowdown());
	dmt_url(url, sizeof url, NULL, srv.port, opt);
}

static void
down(void)
{
	th_redis_stop_all();
}

TestSuite(fair, .init = up, .fini = down, .timeout = 60);

/* lease_ms 0: the client's. */
static int
fair_mutex_lease(dmutex_t *m, dmutex_client_t *c, const char *name, int robust, unsigned lease_ms)
{
	dmutex_attr_t a;
	int err, fair = -1;

	if ((err = dmutex_attr_init(&a)) || (err = dmutex_attr_setfair(&a, 1)) ||
			(err = dmutex_attr_setclient(&a, c)))
		return err;
	if (robust && (err = dmutex_attr_setrobust(&a, DMUTEX_ROBUST)))
		return err;
	if (lease_ms && (err = dmutex_attr_setlease(&a, lease_ms)))
		return err;
	if ((err = dmutex_attr_getfair(&a, &fair)) || fair != 1)
		return err ? err : -1;
	err = dmutex_init(m, name, &a);
	dmutex_attr_destroy(&a);
	return err;
}

static int
fair_mutex(dmutex_t *m, dmutex_client_t *c, const char *name, int robust)
{
	return fair_mutex_lease(m, c, name, robust, 0);
}

static long long
queued(const char *name)
{
	return th_redis_int(&srv, "ZCARD dmutex:queue:{%s}", name);
}

struct qwait {
	const char *name;
	long long n;
};

static int
queue_is(void *arg)
{
	struct qwait *q = arg;
	return queued(q->name) == q->n;
}

/* Shared with the children: the order in which they got the lock. */
struct order {
	atomic_int next;
	int who[8];
	uint64_t fence[8];
};

struct child {
	struct order *o;
	const char *name;
	int id;
};

/* A child process: lock (fair), note its turn and token, unlock. */
static int
locker(void *arg)
{
	struct child *ch = arg;
	dmutex_client_t *c;
	dmutex_t m;
	uint64_t tok = 0;
	int turn;

	if (dmutex_client_open(&c, url) || fair_mutex(&m, c, ch->name, 0))
		return 10;
	if (dmutex_lock(&m))
		return 11;
	turn = atomic_fetch_add(&ch->o->next, 1);
	if (dmutex_fence(&m, &tok))
		return 12;
	ch->o->who[turn] = ch->id;
	ch->o->fence[turn] = tok;
	if (dmutex_unlock(&m))
		return 13;
	dmt_close_mutex(c, &m);
	return 0;
}

static struct order *
shared_order(void)
{
	struct order *o = mmap(NULL, sizeof *o, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(o, MAP_FAILED);
	memset(o, 0, sizeof *o);
	return o;
}

Test(fair, processes_get_the_lock_in_arrival_order_with_growing_tokens)
{
	const char *name = "fair-procs";
	struct order *o = shared_order();
	struct child ch[4];
	pid_t pid[4];
	dmutex_client_t *c;
	dmutex_t m;
	uint64_t first = 0;

	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(fair_mutex(&m, c, name, 0), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_fence(&m, &first), 0);
	for (int i = 0; i < 4; i++) {
		struct qwait q = { name, i + 1 };
		ch[i] = (struct child){ o, name, i };
		pid[i] = th_spawn(locker, &ch[i]);
		cr_assert_gt(pid[i], 0);
		cr_assert(th_wait_until(queue_is, &q, 20000), "child %d never queued", i);
	}
	cr_assert_eq(dmutex_unlock(&m), 0);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(th_wait_child(pid[i], 30000), 0, "child %d failed", i);
	cr_assert_eq(atomic_load(&o->next), 4);
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(o->who[i], i, "turn %d went to child %d", i, o->who[i]);
		cr_assert_gt(o->fence[i], i ? o->fence[i - 1] : first, "token of turn %d does not grow", i);
	}
	cr_assert_eq(queued(name), 0);
	dmt_close_mutex(c, &m);
	munmap(o, sizeof *o);
}

Test(fair, the_releaser_cannot_barge_past_a_waiter)
{
	const char *name = "fair-barge";
	struct order *o = shared_order();
	struct child ch = { o, name, 7 };
	struct qwait q = { name, 1 };
	dmutex_client_t *c;
	dmutex_t m;
	pid_t pid;

	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(fair_mutex(&m, c, name, 0), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	pid = th_spawn(locker, &ch);
	cr_assert_gt(pid, 0);
	cr_assert(th_wait_until(queue_is, &q, 20000));
	int rc;
	cr_assert_eq(dmutex_unlock(&m), 0);
	/* Handed over in the release itself: not free for a moment.  Unless
	 * the waiter already had its whole turn (it locks and unlocks at once;
	 * on an idle machine that fits between our two calls): then it must
	 * have gone first. */
	rc = dmutex_trylock(&m);
	if (rc == 0) {
		cr_assert_eq(atomic_load(&o->next), 1, "the releaser barged past the waiter");
		cr_assert_eq(dmutex_unlock(&m), 0);
	} else {
		cr_assert_eq(rc, EBUSY);
	}
	cr_assert_eq(th_wait_child(pid, 30000), 0);
	cr_assert_eq(o->who[0], 7);
	cr_assert_eq(dmutex_trylock(&m), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	dmt_close_mutex(c, &m);
	munmap(o, sizeof *o);
}

Test(fair, a_waiter_that_times_out_leaves_the_queue)
{
	const char *name = "fair-timeout";
	dmutex_client_t *c1, *c2;
	dmutex_t m1, m2;
	struct timespec at;

	cr_assert_eq(dmutex_client_open(&c1, url), 0);
	cr_assert_eq(dmutex_client_open(&c2, url), 0);
	cr_assert_eq(fair_mutex(&m1, c1, name, 0), 0);
	cr_assert_eq(fair_mutex(&m2, c2, name, 0), 0);
	cr_assert_eq(dmutex_lock(&m1), 0);
	clock_gettime(CLOCK_REALTIME, &at);
	at.tv_nsec += 300000000;
	if (at.tv_nsec >= 1000000000) {
		at.tv_sec++;
		at.tv_nsec -= 1000000000;
	}
	cr_assert_eq(dmutex_timedlock(&m2, &at), ETIMEDOUT);
	cr_assert_eq(queued(name), 0, "the timed-out waiter kept its place");
	cr_assert_eq(dmutex_unlock(&m1), 0);
	/* Nobody queued: the unlock freed it. */
	cr_assert_eq(dmutex_trylock(&m2), 0);
	cr_assert_eq(dmutex_unlock(&m2), 0);
	dmt_close_mutex(c2, &m2);
	dmt_close_mutex(c1, &m1);
}

static int
sleeper(void *arg)
{
	struct child *ch = arg;
	dmutex_client_t *c;
	dmutex_t m;

	if (dmutex_client_open(&c, url) || fair_mutex(&m, c, ch->name, 1))
		return 10;
	dmutex_lock(&m);
	return 11;      /* never reached: killed while it waits */
}

/* As sleeper, on a mutex whose lease (ch->id ms) is not the client's. */
static int
short_sleeper(void *arg)
{
	struct child *ch = arg;
	dmutex_client_t *c;
	dmutex_t m;

	if (dmutex_client_open(&c, url) || fair_mutex_lease(&m, c, ch->name, 1, (unsigned)ch->id))
		return 10;
	dmutex_lock(&m);
	return 11;      /* never reached: killed while it waits */
}

/*
 * A lock handed to a robust head that must claim it lives the mutex's
 * lease, not the client's default: a head that died before its claim
 * (or a thread that ended holding, whose release hands the lock on) must
 * not keep everyone out for the longer lease (torture --fair found the
 * key at the client's 10 s under a 500 ms mutex).
 */
Test(fair, an_unclaimed_hand_over_lives_the_mutexs_lease_not_the_clients)
{
	const char *name = "fair-dead-short";
	unsigned lease = 500 * (unsigned)dmt_slowdown();      /* the client's: 4x */
	struct child ch = { NULL, name, (int)lease };
	struct qwait q = { name, 1 };
	dmutex_client_t *c;
	dmutex_t m;
	long long ttl;
	pid_t pid;

	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(fair_mutex_lease(&m, c, name, 1, lease), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	pid = th_spawn(short_sleeper, &ch);
	cr_assert_gt(pid, 0);
	cr_assert(th_wait_until(queue_is, &q, 20000));
	kill(pid, SIGKILL);
	th_wait_child(pid, 10000);
	cr_assert_eq(dmutex_unlock(&m), 0);
	ttl = th_redis_int(&srv, "PTTL dmutex:lock:{%s}", name);
	cr_assert(ttl > 0 && ttl <= (long long)lease, "handed lock's PTTL %lld, mutex lease %u", ttl, lease);
	dmt_close_mutex(c, &m);
}

Test(fair, a_dead_waiter_gets_the_lock_for_one_lease_and_no_owner_died)
{
	const char *name = "fair-dead";
	struct child ch = { NULL, name, 0 };
	struct qwait q = { name, 1 };
	dmutex_client_t *c, *c2;
	dmutex_t m, m2;
	pid_t pid;
	int64_t t0;
	int err;

	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(dmutex_client_open(&c2, url), 0);
	cr_assert_eq(fair_mutex(&m, c, name, 1), 0);
	cr_assert_eq(fair_mutex(&m2, c2, name, 1), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	pid = th_spawn(sleeper, &ch);
	cr_assert_gt(pid, 0);
	cr_assert(th_wait_until(queue_is, &q, 20000));
	kill(pid, SIGKILL);
	th_wait_child(pid, 10000);
	/* Its place is still good: the unlock hands the lock to it. */
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_trylock(&m2), EBUSY);
	t0 = th_now_ms();
	err = dmutex_lock(&m2);
	/* A hand-over never claimed is not an owner that died. */
	cr_assert_eq(err, 0, "lock after an unclaimed hand-over: %d", err);
	cr_assert_lt(th_now_ms() - t0, 20000);
	cr_assert_eq(dmutex_unlock(&m2), 0);
	dmt_close_mutex(c2, &m2);
	dmt_close_mutex(c, &m);
}

/*
 * A hand-over costs the release only: the head's wake-up message carries
 * its grant (token, lease), so the head takes the lock without a claim of
 * its own; the lock hash names it as the holder all the same.  A robust
 * head still claims (a hold it never knew of is no owner that died).
 */
struct headwait {
	dmutex_t *m;
	atomic_int state;       /* 1 holding, 2 told to unlock, 3 done */
	int err;
	uint64_t fence;
};

static void *
head_thread(void *arg)
{
	struct headwait *h = arg;

	if ((h->err = dmutex_lock(h->m)) == 0)
		h->err = dmutex_fence(h->m, &h->fence);
	atomic_store(&h->state, 1);
	while (atomic_load(&h->state) != 2)
		sched_yield();
	if (!h->err)
		h->err = dmutex_unlock(h->m);
	atomic_store(&h->state, 3);
	return NULL;
}

static int
head_holds(void *arg)
{
	return atomic_load(&((struct headwait *)arg)->state) == 1;
}

static void
hand_over_costs(const char *name, int robust, long long want)
{
	struct qwait q = { name, 1 };
	struct headwait h = { 0 };
	dmutex_client_t *c1, *c2;
	dmutex_t m1, m2;
	pthread_t th;
	long long before, scripts;
	char pid[32];

	cr_assert_eq(dmutex_client_open(&c1, url), 0);
	cr_assert_eq(dmutex_client_open(&c2, url), 0);
	cr_assert_eq(fair_mutex(&m1, c1, name, robust), 0);
	cr_assert_eq(fair_mutex(&m2, c2, name, robust), 0);
	cr_assert_eq(dmutex_lock(&m1), 0);
	h.m = &m2;
	cr_assert_eq(pthread_create(&th, NULL, head_thread, &h), 0);
	cr_assert(th_wait_until(queue_is, &q, 20000), "the head never queued");
	before = dmt_evalsha_calls(&srv);
	cr_assert_eq(dmutex_unlock(&m1), 0);
	cr_assert(th_wait_until(head_holds, &h, 20000), "the head never got the lock");
	scripts = dmt_evalsha_calls(&srv) - before;
	cr_assert_eq(h.err, 0);
	cr_assert_eq(scripts, want, "%lld scripts for a hand-over (robust %d)", scripts, robust);
	/* Recorded as the holder, with the token it was told. */
	cr_assert_eq((uint64_t)th_redis_int(&srv, "HGET dmutex:lock:{%s} fence", name), h.fence);
	snprintf(pid, sizeof pid, "%lld", th_redis_int(&srv, "HGET dmutex:lock:{%s} pid", name));
	cr_assert_eq(atoll(pid), (long long)getpid());
	atomic_store(&h.state, 2);
	pthread_join(th, NULL);
	cr_assert_eq(h.err, 0);
	cr_assert_eq(dmt_lock_exists(&srv, name), 0, "released");
	dmt_close_mutex(c2, &m2);
	dmt_close_mutex(c1, &m1);
}

Test(fair, a_hand_over_is_the_release_alone)
{
	hand_over_costs("fair-cost", 0, 1);
}

Test(fair, a_robust_head_claims_its_hand_over)
{
	hand_over_costs("fair-cost-robust", 1, 2);
}

/*
 * No herd, no listener in between: a hand-over is pushed to the head's own
 * grant list ("dmutex:wake:{NAME}:<token>"), which the head's waiting
 * thread pops with BLPOP; nothing is published (a spy subscribed to every
 * channel of the name hears nothing), and the head subscribed to nothing
 * while it waited.  The list is gone once popped.
 */
Test(fair, a_hand_over_is_pushed_to_the_head_alone)
{
	const char *name = "fair-herd";
	struct qwait q = { name, 1 };
	struct headwait h = { 0 };
	dmutex_client_t *c1, *c2;
	dmutex_t m1, m2;
	pthread_t th;
	redisContext *spy;
	redisReply *r;
	struct timeval tv = { 0, 300000 };
	long long subs, pushes;
	int heard = 0;

	cr_assert_eq(dmutex_client_open(&c1, url), 0);
	cr_assert_eq(dmutex_client_open(&c2, url), 0);
	cr_assert_eq(fair_mutex(&m1, c1, name, 0), 0);
	cr_assert_eq(fair_mutex(&m2, c2, name, 0), 0);
	spy = th_redis_connect(&srv, NULL, NULL);
	cr_assert_not_null(spy);
	r = redisCommand(spy, "PSUBSCRIBE dmutex:wake:{%s}*", name);
	cr_assert(r && r->type == REDIS_REPLY_ARRAY);
	freeReplyObject(r);
	cr_assert_eq(dmutex_lock(&m1), 0);
	subs = dmt_cmd_calls(&srv, "subscribe", "ssubscribe", NULL);
	h.m = &m2;
	cr_assert_eq(pthread_create(&th, NULL, head_thread, &h), 0);
	cr_assert(th_wait_until(queue_is, &q, 20000), "the head never queued");
	pushes = dmt_cmd_calls(&srv, "rpush", NULL);
	cr_assert_eq(dmutex_unlock(&m1), 0);
	cr_assert(th_wait_until(head_holds, &h, 20000), "the head never got the lock");
	cr_assert_eq(h.err, 0);
	cr_assert_eq(dmt_cmd_calls(&srv, "rpush", NULL) - pushes, 1, "one push, to the head");
	cr_assert_eq(dmt_cmd_calls(&srv, "subscribe", "ssubscribe", NULL) - subs, 0,
			"the head subscribed while it waited");
	cr_assert_eq(dmt_count_keys(&srv, "dmutex:wake:{fair-herd}:*"), 0, "the grant list is left");
	/* What the spy heard, until it hears nothing for a while. */
	redisSetTimeout(spy, tv);
	while (redisGetReply(spy, (void **)&r) == REDIS_OK) {
		heard++;
		freeReplyObject(r);
	}
	redisFree(spy);
	cr_assert_eq(heard, 0, "%d messages published for a hand-over", heard);
	atomic_store(&h.state, 2);
	pthread_join(th, NULL);
	cr_assert_eq(h.err, 0);
	dmt_close_mutex(c2, &m2);
	dmt_close_mutex(c1, &m1);
}

/*
 * A hand-over is taken only as the answer to the head's last request that
 * found the lock busy: an "h:" message without the stamp of that request
 * (fair_acquire.lua keeps it with the head's details, fair_release.lua
 * echoes it) is a forged or replayed one, one of an older release, or a
 * hand-over to an earlier request whose hold was over before that
 * request found the lock busy; the head asks again and goes on waiting
 * (in its place) while the lock is held.  The code before took any
 * "h:<token>:<fence>:<died>:<lease>" and returned holding a lock another
 * client held.  Forged here by RPUSH on the head's grant list, where
 * fair_release.lua pushes a hand-over.
 */
struct forged {
	const char *name;
	const char *token;
	struct headwait *h;
	char details[200];
};

/* The head's details ("lease robust host pid tid since hostid stamp"). */
static int
head_details(const char *name, const char *token, char *out, size_t cap)
{
	redisReply *r = th_redis_cmd(&srv, "HGET dmutex:meta:{%s} q:%s", name, token);
	int ok = r && r->type == REDIS_REPLY_STRING;

	if (ok)
		snprintf(out, cap, "%s", r->str);
	if (r)
		freeReplyObject(r);
	return ok;
}

/*
 * A new token is in no queue (only its own requests queue it): its first
 * request, taking a free lock or queueing behind a holder, does not look
 * for it there (fair_acquire.lua, "fresh"); the waiter still queues, and
 * gets the hand-over.
 */
Test(fair, a_first_request_does_not_look_for_its_token_in_the_queue)
{
	const char *name = "fair-fresh";
	struct qwait q = { name, 1 };
	struct headwait h = { 0 };
	dmutex_client_t *c1, *c2;
	dmutex_t m1, m2;
	pthread_t th;
	long long zscores;

	cr_assert_eq(dmutex_client_open(&c1, url), 0);
	cr_assert_eq(dmutex_client_open(&c2, url), 0);
	cr_assert_eq(fair_mutex(&m1, c1, name, 0), 0);
	cr_assert_eq(fair_mutex(&m2, c2, name, 0), 0);
	zscores = dmt_cmd_calls(&srv, "zscore", NULL);
	cr_assert_geq(zscores, 0);
	cr_assert_eq(dmutex_lock(&m1), 0);
	h.m = &m2;
	cr_assert_eq(pthread_create(&th, NULL, head_thread, &h), 0);
	cr_assert(th_wait_until(queue_is, &q, 20000), "the waiter never queued");
	cr_assert_eq(dmt_cmd_calls(&srv, "zscore", NULL) - zscores, 0,
			"a first request looked for its new token in the queue");
	cr_assert_eq(dmutex_unlock(&m1), 0);
	cr_assert(th_wait_until(head_holds, &h, 20000), "the waiter never got the lock");
	cr_assert_eq(h.err, 0);
	cr_assert_eq(queued(name), 0, "the waiter is still queued");
	atomic_store(&h.state, 2);
	pthread_join(th, NULL);
	cr_assert_eq(h.err, 0);
	cr_assert_eq(dmt_lock_exists(&srv, name), 0, "released");
	dmt_close_mutex(c2, &m2);
	dmt_close_mutex(c1, &m1);
}

/* The head asked again (its details were written anew), or took the lock. */
static int
asked_again(void *arg)
{
	struct forged *f = arg;
	char now[200];

	return head_holds(f->h) || (head_details(f->name, f->token, now, sizeof now) &&
			strcmp(now, f->details));
}

Test(fair, a_hand_over_that_does_not_answer_the_last_busy_request_is_not_taken)
{
	const char *name = "fair-forged";
	unsigned lease = 20000;         /* the head asks again a third of it later */
	struct qwait q = { name, 1 };
	struct headwait h = { 0 };
	struct forged f = { .name = name, .h = &h };
	dmutex_client_t *c1, *c2;
	dmutex_t m1, m2;
	pthread_t th;
	redisReply *r;
	char token[80], score[40], msg[3][120];
	unsigned long long stamp = 0;

	cr_assert_eq(dmutex_client_open(&c1, url), 0);
	cr_assert_eq(dmutex_client_open(&c2, url), 0);
	cr_assert_eq(fair_mutex_lease(&m1, c1, name, 0, lease), 0);
	cr_assert_eq(fair_mutex_lease(&m2, c2, name, 0, lease), 0);
	cr_assert_eq(dmutex_lock(&m1), 0);
	h.m = &m2;
	cr_assert_eq(pthread_create(&th, NULL, head_thread, &h), 0);
	cr_assert(th_wait_until(queue_is, &q, 20000), "the head never queued");
	r = th_redis_cmd(&srv, "ZRANGE dmutex:queue:{%s} 0 0 WITHSCORES", name);
	cr_assert(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
	snprintf(token, sizeof token, "%s", r->element[0]->str);
	snprintf(score, sizeof score, "%s", r->element[1]->str);
	freeReplyObject(r);
	f.token = token;
	for (int i = 0; i < 3; i++) {
		cr_assert(head_details(name, token, f.details, sizeof f.details), "the head left no details");
		/* Its last request's stamp: the details' eighth field. */
		cr_assert(i == 0 || sscanf(f.details, "%*s %*s %*s %*s %*s %*s %*s %llu", &stamp) == 1,
				"details without a stamp: %s", f.details);
		/* Without a stamp, with another request's, with a wrong lease. */
		snprintf(msg[0], sizeof msg[0], "h:%s:1:0:%u", token, lease);
		snprintf(msg[1], sizeof msg[1], "h:%s:1:0:%u:%llu", token, lease, stamp - 1);
		snprintf(msg[2], sizeof msg[2], "h:%s:1:0:%u:%llu", token, lease / 2, stamp);
		cr_assert_eq(th_redis_int(&srv, "RPUSH dmutex:wake:{%s}:%s %s", name, token, msg[i]), 1);
		/* It asks once (found busy: queued again, its details anew),
		 * and waits, in its place. */
		cr_assert(th_wait_until(asked_again, &f, 10000), "'%s': the head did not ask again", msg[i]);
		cr_assert(!head_holds(&h), "'%s' was taken for a hand-over: two holders", msg[i]);
		r = th_redis_cmd(&srv, "ZSCORE dmutex:queue:{%s} %s", name, token);
		cr_assert(r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, score),
				"'%s': the head lost its place", msg[i]);
		freeReplyObject(r);
	}
	/* The real hand-over is taken. */
	cr_assert_eq(dmutex_unlock(&m1), 0);
	cr_assert(th_wait_until(head_holds, &h, 20000), "the head never got the lock");
	cr_assert_eq(h.err, 0);
	cr_assert_eq((uint64_t)th_redis_int(&srv, "HGET dmutex:lock:{%s} fence", name), h.fence);
	atomic_store(&h.state, 2);
	pthread_join(th, NULL);
	cr_assert_eq(h.err, 0);
	dmt_close_mutex(c2, &m2);
	dmt_close_mutex(c1, &m1);
}

/* Threads of one process: each waits in turn, in the order they came. */
struct tstate {
	dmutex_t *m;
	atomic_int next;
	int who[8];
	uint64_t fence[8];
	atomic_long tid[8];
};

struct targ {
	struct tstate *s;
	int id;
};

static void *
thread_locker(void *arg)
{
	struct targ *t = arg;
	int turn;

	atomic_store(&t->s->tid[t->id], (long)syscall(SYS_gettid));
	if (dmutex_lock(t->s->m))
		return (void *)1;
	turn = atomic_fetch_add(&t->s->next, 1);
	t->s->who[turn] = t->id;
	if (dmutex_fence(t->s->m, &t->s->fence[turn]))
		return (void *)3;
	if (dmutex_unlock(t->s->m))
		return (void *)2;
	return NULL;
}

struct twait {
	struct tstate *s;
	int id;
};

static int tid_asleep(long tid);

/* The thread sleeps (in its condition wait, the only place it can). */
static int
thread_asleep(void *arg)
{
	struct twait *w = arg;

	return tid_asleep(atomic_load(&w->s->tid[w->id]));
}

static int
tid_asleep(long tid)
{
	char path[64], buf[512], *p;
	FILE *f;
	size_t n;

	if (!tid)
		return 0;
	snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
	if (!(f = fopen(path, "r")))
		return 0;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] == 'S';
}

Test(fair, threads_of_one_process_get_the_lock_in_arrival_order)
{
	const char *name = "fair-threads";
	struct tstate s = { 0 };
	struct targ t[4];
	pthread_t th[4];
	dmutex_client_t *c;
	dmutex_t m;
	uint64_t first = 0;

	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(fair_mutex(&m, c, name, 0), 0);
	s.m = &m;
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_fence(&m, &first), 0);
	for (int i = 0; i < 4; i++) {
		struct twait w = { &s, i };
		t[i] = (struct targ){ &s, i };
		cr_assert_eq(pthread_create(&th[i], NULL, thread_locker, &t[i]), 0);
		cr_assert(th_wait_until(thread_asleep, &w, 20000));
	}
	/* They wait locally while a thread of theirs holds it: each unlock
	 * offers the lock to the next (a local hand-over). */
	cr_assert_eq(queued(name), 0, "a thread queued in Redis behind its own process's holder");
	cr_assert_eq(dmutex_unlock(&m), 0);
	for (int i = 0; i < 4; i++) {
		void *rv;
		pthread_join(th[i], &rv);
		cr_assert_null(rv, "thread %d failed", i);
	}
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(s.who[i], i, "turn %d went to thread %d", i, s.who[i]);
		cr_assert_gt(s.fence[i], i ? s.fence[i - 1] : first, "token of turn %d does not grow", i);
	}
	dmt_close_mutex(c, &m);
}

/*
 * Local hand-overs (src/core/fair_handoff.c): an unlock offers the lock to the
 * next thread of its process, and its release gives it that thread unless
 * a waiter queued in Redis comes first.
 */
struct lthread {
	dmutex_t *m;
	struct timespec at;     /* timed: dmutex_timedlock by then */
	int timed;
	atomic_long tid;
	atomic_int state;       /* 1 holding, 2 told to unlock, 3 done */
	int err;
	uint64_t fence;
};

static void *
lthread_main(void *arg)
{
	struct lthread *t = arg;

	atomic_store(&t->tid, (long)syscall(SYS_gettid));
	t->err = t->timed ? dmutex_timedlock(t->m, &t->at) : dmutex_lock(t->m);
	if (t->err) {
		atomic_store(&t->state, 3);
		return NULL;
	}
	t->err = dmutex_fence(t->m, &t->fence);
	atomic_store(&t->state, 1);
	while (atomic_load(&t->state) != 2)
		sched_yield();
	if (!t->err)
		t->err = dmutex_unlock(t->m);
	atomic_store(&t->state, 3);
	return NULL;
}

static int
lthread_asleep(void *arg)
{
	return tid_asleep(atomic_load(&((struct lthread *)arg)->tid));
}

static int
lthread_holds(void *arg)
{
	return atomic_load(&((struct lthread *)arg)->state) == 1;
}

static int
lthread_done(void *arg)
{
	return atomic_load(&((struct lthread *)arg)->state) == 3;
}

static void
lthread_end(struct lthread *t, pthread_t th)
{
	int st = 0;

	atomic_compare_exchange_strong(&t->state, &st, 0);
	st = 1;
	atomic_compare_exchange_strong(&t->state, &st, 2);
	cr_assert(th_wait_until(lthread_done, t, 20000), "the thread never finished");
	pthread_join(th, NULL);
}

Test(fair, a_local_hand_over_is_the_release_alone)
{
	const char *name = "fair-local";
	struct lthread t = { 0 };
	dmutex_client_t *c;
	dmutex_t m;
	pthread_t th;
	long long before, scripts;
	uint64_t first = 0;

	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(fair_mutex(&m, c, name, 0), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_fence(&m, &first), 0);
	t.m = &m;
	cr_assert_eq(pthread_create(&th, NULL, lthread_main, &t), 0);
	cr_assert(th_wait_until(lthread_asleep, &t, 20000));
	before = dmt_evalsha_calls(&srv);
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert(th_wait_until(lthread_holds, &t, 20000), "the thread never got the lock");
	scripts = dmt_evalsha_calls(&srv) - before;
	cr_assert_eq(t.err, 0);
	/* The release gave it the lock: no request of its own, no queue. */
	cr_assert_eq(scripts, 1, "%lld scripts for a local hand-over", scripts);
	cr_assert_gt(t.fence, first);
	/* Recorded in Redis as the holder, with the token it was told. */
	cr_assert_eq((uint64_t)th_redis_int(&srv, "HGET dmutex:lock:{%s} fence", name), t.fence);
	cr_assert_eq(th_redis_int(&srv, "HGET dmutex:lock:{%s} tid", name), atomic_load(&t.tid));
	cr_assert_eq(th_redis_int(&srv, "HGET dmutex:lock:{%s} pid", name), (long long)getpid());
	cr_assert_gt(th_redis_int(&srv, "PTTL dmutex:lock:{%s}", name), 0);
	lthread_end(&t, th);
	cr_assert_eq(t.err, 0);
	cr_assert_eq(dmt_lock_exists(&srv, name), 0, "released");
	dmt_close_mutex(c, &m);
}

Test(fair, a_local_hand_over_keeps_fifo_order_across_processes)
{
	const char *name = "fair-local-fifo";
	struct order *o = shared_order();
	struct child ch = { o, name, 5 };
	struct qwait q = { name, 1 };
	struct lthread t = { 0 };
	dmutex_client_t *c;
	dmutex_t m;
	pthread_t th;
	uint64_t first = 0;
	pid_t pid;

	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(fair_mutex(&m, c, name, 0), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_fence(&m, &first), 0);
	/* Another process queues first, then a thread of ours waits. */
	pid = th_spawn(locker, &ch);
	cr_assert_gt(pid, 0);
	cr_assert(th_wait_until(queue_is, &q, 20000), "the child never queued");
	t.m = &m;
	cr_assert_eq(pthread_create(&th, NULL, lthread_main, &t), 0);
	cr_assert(th_wait_until(lthread_asleep, &t, 20000));
	cr_assert_eq(dmutex_unlock(&m), 0);
	/* The child came first: it gets the lock, our thread after it. */
	cr_assert_eq(th_wait_child(pid, 30000), 0, "the child failed");
	cr_assert(th_wait_until(lthread_holds, &t, 20000), "the thread never got the lock");
	cr_assert_eq(t.err, 0);
	cr_assert_eq(o->who[0], 5);
	cr_assert_gt(o->fence[0], first);
	cr_assert_gt(t.fence, o->fence[0], "our thread went before the process queued ahead of it");
	lthread_end(&t, th);
	cr_assert_eq(t.err, 0);
	cr_assert_eq(queued(name), 0);
	dmt_close_mutex(c, &m);
	munmap(o, sizeof *o);
}

/*
 * The thread offered the lock gives up (its deadline) while the release is
 * on its way (held up by CLIENT PAUSE): the lock handed to it is passed on
 * to the next thread, not left to a holder that is gone until its lease
 * ends.
 */
Test(fair, a_handed_over_thread_that_timed_out_passes_the_lock_on)
{
	const char *name = "fair-local-gone";
	struct lthread t1 = { 0 }, t2 = { 0 };
	char lurl[700];
	dmutex_client_t *c;
	dmutex_t m;
	pthread_t th1, th2;
	uint64_t first = 0;
	redisReply *r;
	int64_t t0;
	int f = dmt_slowdown();

	/* The lease outlives the pause: the release still finds the lock ours. */
	dmt_url(lurl, sizeof lurl, NULL, srv.port, "lease_ms=30000&command_timeout_ms=25000");
	cr_assert_eq(dmutex_client_open(&c, lurl), 0);
	cr_assert_eq(fair_mutex(&m, c, name, 0), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_fence(&m, &first), 0);
	t1.m = t2.m = &m;
	t1.timed = 1;
	clock_gettime(CLOCK_REALTIME, &t1.at);
	t1.at.tv_sec += 2 * f;
	t0 = th_now_ms();
	cr_assert_eq(pthread_create(&th1, NULL, lthread_main, &t1), 0);
	cr_assert(th_wait_until(lthread_asleep, &t1, 20000));
	cr_assert_eq(pthread_create(&th2, NULL, lthread_main, &t2), 0);
	cr_assert(th_wait_until(lthread_asleep, &t2, 20000));
	cr_assert_lt(th_now_ms() - t0, 1500 * f, "too slow to start the waiters before the first's deadline");
	r = th_redis_cmd(&srv, "CLIENT PAUSE %d ALL", 4000 * f);
	cr_assert(r && r->type == REDIS_REPLY_STATUS, "CLIENT PAUSE failed");
	freeReplyObject(r);
	/* Offers the lock to the first, which times out before the answer. */
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert(th_wait_until(lthread_done, &t1, 20000));
	cr_assert_eq(t1.err, ETIMEDOUT);
	pthread_join(th1, NULL);
	cr_assert(th_wait_until(lthread_holds, &t2, 10000), "the lock was not passed on");
	cr_assert_eq(t2.err, 0);
	cr_assert_gt(t2.fence, first);
	cr_assert_eq((uint64_t)th_redis_int(&srv, "HGET dmutex:lock:{%s} fence", name), t2.fence);
	cr_assert_eq(th_redis_int(&srv, "HGET dmutex:lock:{%s} tid", name), atomic_load(&t2.tid));
	lthread_end(&t2, th2);
	cr_assert_eq(t2.err, 0);
	cr_assert_eq(dmt_lock_exists(&srv, name), 0, "released");
	dmt_close_mutex(c, &m);
}

Test(fair, attribute_checks)
{
	dmutex_attr_t a;
	int fair = -1;

	cr_assert_eq(dmutex_attr_setfair(NULL, 1), EINVAL);
	cr_assert_eq(dmutex_attr_getfair(NULL, &fair), EINVAL);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_getfair(&a, &fair), 0);
	cr_assert_eq(fair, 0, "fair is not the default");
	cr_assert_eq(dmutex_attr_setfair(&a, 2), EINVAL);
	cr_assert_eq(dmutex_attr_getfair(&a, NULL), EINVAL);
	cr_assert_eq(dmutex_attr_setfair(&a, 1), 0);
	cr_assert_eq(dmutex_attr_getfair(&a, &fair), 0);
	cr_assert_eq(fair, 1);
	cr_assert_eq(dmutex_attr_setfair(&a, 0), 0);
	cr_assert_eq(dmutex_attr_getfair(&a, &fair), 0);
	cr_assert_eq(fair, 0);
	dmutex_attr_destroy(&a);
}

Test(fair, a_fair_mutex_over_redlock_is_not_supported)
{
	struct th_redis n2, n3;
	char rl[2200];
	dmutex_client_t *c;
	dmutex_t m;

	cr_assert_eq(th_redis_start(&n2, NULL), 0);
	cr_assert_eq(th_redis_start(&n3, NULL), 0);
	snprintf(rl, sizeof rl, "%s,%s,%s", srv.url, n2.url, n3.url);
	cr_assert_eq(dmutex_client_open(&c, rl), 0);
	cr_assert_eq(fair_mutex(&m, c, "fair-redlock", 0), ENOTSUP);
	dmutex_client_close(c);
}

/*
 * A condition wait on a fair mutex gets the mutex back: one waiter on the
 * signaller's own client (re-locked by a local hand-over) and one on
 * another client (re-locked through the queue, told on its own channel).
 */
struct cwaiter {
	dmutex_t *m;
	dcond_t *cv;
	atomic_int *flag;
	atomic_int state;       /* 1 returned holding the mutex */
	int err;
};

static void *
cwaiter_main(void *arg)
{
	struct cwaiter *w = arg;

	if ((w->err = dmutex_lock(w->m)))
		return NULL;
	while (!atomic_load(w->flag) && !w->err)
		w->err = dcond_wait(w->cv, w->m);
	if (!w->err) {
		atomic_store(&w->state, 1);
		w->err = dmutex_unlock(w->m);
	}
	return NULL;
}

struct cregistered {
	const char *name;
	long long n;
};

static int
cond_registered(void *arg)
{
	struct cregistered *r = arg;
	return th_redis_int(&srv, "ZCARD dmutex:cond:{%s}", r->name) == r->n;
}

Test(fair, a_condition_wait_on_a_fair_mutex_gets_it_back)
{
	const char *name = "fair-cond", *cname = "fair-cond-cv";
	struct cregistered reg = { cname, 2 };
	atomic_int flag = 0;
	dmutex_client_t *c1, *c2;
	dmutex_t m1, m2;
	dcond_t cv1, cv2;
	dcond_attr_t ca;
	struct cwaiter w1 = { 0 }, w2 = { 0 };
	pthread_t th1, th2;

	cr_assert_eq(dmutex_client_open(&c1, url), 0);
	cr_assert_eq(dmutex_client_open(&c2, url), 0);
	cr_assert_eq(fair_mutex(&m1, c1, name, 0), 0);
	cr_assert_eq(fair_mutex(&m2, c2, name, 0), 0);
	cr_assert_eq(dcond_attr_init(&ca), 0);
	cr_assert_eq(dcond_attr_setclient(&ca, c1), 0);
	cr_assert_eq(dcond_init(&cv1, cname, &ca), 0);
	cr_assert_eq(dcond_attr_setclient(&ca, c2), 0);
	cr_assert_eq(dcond_init(&cv2, cname, &ca), 0);
	dcond_attr_destroy(&ca);
	w1 = (struct cwaiter){ &m1, &cv1, &flag, 0, 0 };
	w2 = (struct cwaiter){ &m2, &cv2, &flag, 0, 0 };
	cr_assert_eq(pthread_create(&th1, NULL, cwaiter_main, &w1), 0);
	cr_assert_eq(pthread_create(&th2, NULL, cwaiter_main, &w2), 0);
	cr_assert(th_wait_until(cond_registered, &reg, 20000), "the waiters never waited");
	cr_assert_eq(dmutex_lock(&m1), 0);
	atomic_store(&flag, 1);
	cr_assert_eq(dcond_broadcast(&cv1), 0);
	cr_assert_eq(dmutex_unlock(&m1), 0);
	pthread_join(th1, NULL);
	pthread_join(th2, NULL);
	cr_assert_eq(w1.err, 0);
	cr_assert_eq(w2.err, 0);
	cr_assert_eq(atomic_load(&w1.state), 1);
	cr_assert_eq(atomic_load(&w2.state), 1);
	cr_assert_eq(dmt_lock_exists(&srv, name), 0, "released");
	cr_assert_eq(queued(name), 0);
	cr_assert_eq(dcond_destroy(&cv1), 0);
	cr_assert_eq(dcond_destroy(&cv2), 0);
	dmt_close_mutex(c2, &m2);
	dmt_close_mutex(c1, &m1);
}

/*
 * A forked child does not queue behind its parent's waiting threads: they
 * are not in the child (the local queue is on their stacks), and the
 * child's lock must get a free lock.
 */
struct forkarg {
	dmutex_t *m;
	atomic_int *go;         /* shared: 1 once the lock is free */
};

static int
fork_locker(void *arg)
{
	struct forkarg *a = arg;
	struct timespec at;
	int64_t until = th_now_ms() + 30000;

	while (!atomic_load(a->go) && th_now_ms() < until)
		usleep(1000);
	clock_gettime(CLOCK_REALTIME, &at);
	at.tv_sec += 5 * dmt_slowdown();
	if (dmutex_timedlock(a->m, &at))
		return 20;
	return dmutex_unlock(a->m) ? 21 : 0;
}

Test(fair, a_forked_child_does_not_queue_behind_its_parents_threads)
{
	const char *name = "fair-fork";
	atomic_int *go = mmap(NULL, sizeof *go, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct lthread t = { 0 };
	struct forkarg fa;
	dmutex_client_t *c;
	dmutex_t m;
	pthread_t th;
	pid_t pid;

	cr_assert_neq(go, MAP_FAILED);
	atomic_store(go, 0);
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(fair_mutex(&m, c, name, 0), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	t.m = &m;
	cr_assert_eq(pthread_create(&th, NULL, lthread_main, &t), 0);
	cr_assert(th_wait_until(lthread_asleep, &t, 20000));
	/* Forked while a thread of ours waits in the local queue. */
	fa = (struct forkarg){ &m, go };
	pid = th_spawn(fork_locker, &fa);
	cr_assert_gt(pid, 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert(th_wait_until(lthread_holds, &t, 20000));
	lthread_end(&t, th);
	cr_assert_eq(t.err, 0);
	atomic_store(go, 1);
	cr_assert_eq(th_wait_child(pid, 60000), 0, "the child did not get the free lock");
	dmt_close_mutex(c, &m);
	munmap(go, sizeof *go);
}
