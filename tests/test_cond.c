/*
 * Condition variables against real redis-server processes: the error
 * table, timed waits that end on time with the mutex held again, signal
 * and broadcast across processes, wake-ups through the backend (no
 * polling), no wake-up lost between the unlock and the sleep, waiters that
 * die or freeze without swallowing a signal, EOWNERDEAD through a wait, and
 * recursive mutexes given back at their depth.
 *
 * Waiters run in child processes with their own clients.  "Registered" is
 * read from Redis: the cardinality of dmutex:cond:{NAME}.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "dmutex.h"
#include "harness.h"
#include "dmt.h"

#define MS 1000000LL

static struct th_redis srv;
static pid_t test_pid;
static pid_t kids[4];

static void srv_up(void)
{
	test_pid = getpid();
	cr_assert_eq(th_redis_start(&srv, NULL), 0, "redis-server did not start");
	cr_assert_eq(dmt_backend_up(&srv), 0, "Redlock nodes did not start");
}

static void srv_down(void)
{
	for (size_t i = 0; i < sizeof kids / sizeof kids[0]; i++)
		dmt_reap(&kids[i]);
	dmt_backend_down();
	th_redis_stop(&srv);
}

TestSuite(cond, .init = srv_up, .fini = srv_down, .timeout = 30);

/* ------------------------------------------------------------------ */
/* helpers                                                             */
/* ------------------------------------------------------------------ */

/* Registered waiters of condition variable `name`. */
static long long waiters(const char *name)
{
	return dmt_cond_waiters(&srv, name);
}

/* Woken waiters that have not acknowledged yet.  Over etcd there is no
 * acknowledgement: the deletion of the waiter's key is the wake-up
 * (src/backend/etcd/cond.c), so none is ever owed. */
static long long unacked(const char *name)
{
	if (dmt_etcd())
		return 0;
	return th_redis_int(&srv, "ZCARD dmutex:csig:{%s}", name);
}

/* Waiting threads subscribed to their wake-up channel. */
static long long subscribed(const char *name)
{
	redisReply *r = th_redis_cmd(&srv, "PUBSUB CHANNELS dmutex:cwake:{%s}:*", name);
	long long n = r && r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;

	if (r)
		freeReplyObject(r);
	return n;
}

struct count_is {
	const char *name;
	long long n;
	long long (*count)(const char *);
};

static int count_reached(void *arg)
{
	struct count_is *c = arg;
	return c->count(c->name) == c->n;
}

static void wait_count_(long long (*count)(const char *), const char *what, const char *name, long long n)
{
	struct count_is c = { name, n, count };
	cr_assert(th_wait_until(count_reached, &c, 10000), "%s('%s') never became %lld (is %lld)",
			what, name, n, count(name));
}
/* The failure names the count (several have the same name argument). */
#define wait_count(count, name, n) wait_count_(count, #count, name, n)

/* The mutex is free: a trylock through the client of p succeeds (on
 * Redlock, a majority of nodes agree; each node alone may lag). */
static int mutex_free(void *arg)
{
	dmutex_t *m = arg;

	if (dmutex_trylock(m))
		return 0;
	dmutex_unlock(m);
	return 1;
}

/* n waiters registered and asleep: registration comes before the unlock,
 * so the mutex must be free too. */
static void wait_sleeping(const char *cname, dmutex_t *m, long long n)
{
	wait_count(waiters, cname, n);
	cr_assert(th_wait_until(mutex_free, m, 5000), "the waiter never released the mutex");
}

static void deadline_in(struct timespec *ts, clockid_t clock, long long ms)
{
	clock_gettime(clock, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

/* A client on url, a mutex and a condition variable on it. */
struct pair {
	dmutex_client_t *c;
	dmutex_t m;
	dcond_t cv;
};

static int pair_open(struct pair *p, const char *url, const char *mname, const char *cname,
		const struct dmt_attr *o)
{
	dcond_attr_t ca;
	int rc;

	if ((rc = dmt_open_mutex(&p->c, &p->m, url, mname, o)))
		return rc;
	dcond_attr_init(&ca);
	dcond_attr_setclient(&ca, p->c);
	if ((rc = dcond_init(&p->cv, cname, &ca)))
		dmt_close_mutex(p->c, &p->m);
	dcond_attr_destroy(&ca);
	return rc;
}

static void pair_close(struct pair *p)
{
	dcond_destroy(&p->cv);
	dmt_close_mutex(p->c, &p->m);
}

/* ------------------------------------------------------------------ */
/* a waiter in another process                                         */
/* ------------------------------------------------------------------ */

/* Exit codes of waiter_child. */
enum { W_WOKEN = 0, W_TIMEDOUT = 1, W_OWNERDEAD = 2, W_OTHER = 3, W_NOT_HELD = 4, W_SETUP = 10 };

static struct {
	const char *url;
	const char *mname, *cname;
	int robust;
	long long timeout_ms;   /* 0: dcond_wait */
	/* gated: the child opens its client, says so on ready[1], and waits
	 * for a byte on gate[0] before it locks and waits (what forking and
	 * connecting cost under load is spent before the test's window);
	 * GATED_LOCKED: it takes the mutex before it says so, and only
	 * registers (dcond_wait) after the gate. */
	int gated, gate[2], ready[2];
} wk;

enum { GATED = 1, GATED_LOCKED = 2 };

static int waiter_child(void *arg)
{
	struct pair p;
	struct timespec ts;
	uint64_t fence;
	int rc, code;

	(void)arg;
	dmt_die_with_parent(test_pid);
	if (pair_open(&p, wk.url, wk.mname, wk.cname, &(struct dmt_attr){ .robust = wk.robust }))
		return W_SETUP;
	if (wk.gated == GATED_LOCKED && dmutex_lock(&p.m))
		return W_SETUP + 1;
	if (wk.gated) {
		char b = 'r';
		if (write(wk.ready[1], &b, 1) != 1 || read(wk.gate[0], &b, 1) != 1)
			return W_SETUP + 2;
	}
	if (wk.gated != GATED_LOCKED && dmutex_lock(&p.m))
		return W_SETUP + 1;
	if (wk.timeout_ms) {
		deadline_in(&ts, CLOCK_MONOTONIC, wk.timeout_ms);
		rc = dcond_clockwait(&p.cv, &p.m, CLOCK_MONOTONIC, &ts);
	} else {
		rc = dcond_wait(&p.cv, &p.m);
	}
	code = rc == 0 ? W_WOKEN : rc == ETIMEDOUT ? W_TIMEDOUT : rc == EOWNERDEAD ? W_OWNERDEAD : W_OTHER;
	/* Whatever woke it, the mutex is held again. */
	if (dmutex_fence(&p.m, &fence))
		code = W_NOT_HELD;
	if (rc == EOWNERDEAD)
		dmutex_consistent(&p.m);
	dmutex_unlock(&p.m);
	pair_close(&p);
	return code;
}

static pid_t spawn_waiter_at(const char *url, const char *mname, const char *cname,
		long long timeout_ms)
{
	wk.url = url;
	wk.mname = mname;
	wk.cname = cname;
	wk.timeout_ms = timeout_ms;
	pid_t pid = th_spawn(waiter_child, NULL);
	cr_assert_gt(pid, 0);
	return pid;
}

static pid_t spawn_waiter(const char *mname, const char *cname, long long timeout_ms)
{
	return spawn_waiter_at(srv.url, mname, cname, timeout_ms);
}

/* The waiters spawned from now on stop at the gate (GATED or GATED_LOCKED). */
static void gate_close(int mode)
{
	cr_assert_eq(pipe(wk.gate), 0);
	cr_assert_eq(pipe(wk.ready), 0);
	wk.gated = mode;
}

/* n gated waiters have connected (and, GATED_LOCKED, taken the mutex). */
static void gate_wait_ready(int n)
{
	wk.gated = 0;
	for (int i = 0; i < n; i++) {
		struct pollfd pf = { .fd = wk.ready[0], .events = POLLIN };
		char b;

		cr_assert_eq(poll(&pf, 1, 10000), 1, "gated waiter %d never connected", i);
		cr_assert_eq(read(wk.ready[0], &b, 1), 1);
	}
}

/* Let the n waiters at the gate go on. */
static void gate_open(int n)
{
	for (int i = 0; i < n; i++)
		cr_assert_eq(write(wk.gate[1], "g", 1), 1);
	for (int i = 0; i < 2; i++) {
		close(wk.gate[i]);
		close(wk.ready[i]);
	}
}

/* ------------------------------------------------------------------ */
/* the error table                                                     */
/* ------------------------------------------------------------------ */

Test(cond, attr_errors)
{
	dcond_attr_t a;
	clockid_t clock;

	cr_assert_eq(dcond_attr_init(NULL), EINVAL);
	cr_assert_eq(dcond_attr_init(&a), 0);
	cr_assert_eq(dcond_attr_getclock(&a, &clock), 0);
	cr_assert_eq(clock, CLOCK_REALTIME);
	cr_assert_eq(dcond_attr_setclock(&a, CLOCK_PROCESS_CPUTIME_ID), EINVAL);
	cr_assert_eq(dcond_attr_setclock(&a, CLOCK_MONOTONIC), 0);
	cr_assert_eq(dcond_attr_getclock(&a, &clock), 0);
	cr_assert_eq(clock, CLOCK_MONOTONIC);
	cr_assert_eq(dcond_attr_getclock(&a, NULL), EINVAL);
	cr_assert_eq(dcond_attr_setclient(NULL, NULL), EINVAL);
	cr_assert_eq(dcond_attr_destroy(&a), 0);
	cr_assert_eq(dcond_attr_destroy(&a), EINVAL);
	cr_assert_eq(dcond_attr_setclock(&a, CLOCK_REALTIME), EINVAL);
	cr_assert_eq(dcond_attr_getclock(&a, &clock), EINVAL);
}

Test(cond, init_errors)
{
	dmutex_client_t *c;
	dcond_attr_t a;
	dcond_t cv;
	char long_name[DMUTEX_NAME_MAX + 2];

	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	dcond_attr_init(&a);
	dcond_attr_setclient(&a, c);
	memset(long_name, 'x', sizeof long_name - 1);
	long_name[sizeof long_name - 1] = '\0';
	cr_assert_eq(dcond_init(NULL, "c", &a), EINVAL);
	cr_assert_eq(dcond_init(&cv, NULL, &a), EINVAL);
	cr_assert_eq(dcond_init(&cv, "", &a), EINVAL);
	cr_assert_eq(dcond_init(&cv, long_name, &a), EINVAL);
	long_name[DMUTEX_NAME_MAX] = '\0';
	cr_assert_eq(dcond_init(&cv, long_name, &a), 0, "a %d-byte name is fine", DMUTEX_NAME_MAX);
	cr_assert_eq(dcond_destroy(&cv), 0);
	cr_assert_eq(dcond_destroy(&cv), EINVAL, "destroyed twice");
	cr_assert_eq(dcond_destroy(NULL), EINVAL);
	dcond_attr_destroy(&a);
	cr_assert_eq(dcond_init(&cv, "c", &a), EINVAL, "destroyed attributes");
	/* A client with a condition variable on it is in use. */
	dcond_attr_init(&a);
	dcond_attr_setclient(&a, c);
	cr_assert_eq(dcond_init(&cv, "c", &a), 0);
	cr_assert_eq(dmutex_client_close(c), EBUSY);
	cr_assert_eq(dcond_destroy(&cv), 0);
	dcond_attr_destroy(&a);
	cr_assert_eq(dmutex_client_close(c), 0);
}

Test(cond, bad_objects_are_einval)
{
	struct pair p;
	dcond_t zero, destroyed;
	dmutex_t mzero;
	struct timespec ts;

	memset(&zero, 0, sizeof zero);
	memset(&mzero, 0, sizeof mzero);
	cr_assert_eq(pair_open(&p, srv.url, "m", "c", NULL), 0);
	cr_assert_eq(dmutex_lock(&p.m), 0);
	cr_assert_eq(dcond_wait(NULL, &p.m), EINVAL);
	cr_assert_eq(dcond_wait(&p.cv, NULL), EINVAL);
	cr_assert_eq(dcond_wait(&zero, &p.m), EINVAL);
	cr_assert_eq(dcond_wait(&p.cv, &mzero), EINVAL);
	destroyed = zero;
	{
		dcond_attr_t a;
		dcond_attr_init(&a);
		dcond_attr_setclient(&a, p.c);
		cr_assert_eq(dcond_init(&destroyed, "d", &a), 0);
		cr_assert_eq(dcond_destroy(&destroyed), 0);
	}
	cr_assert_eq(dcond_wait(&destroyed, &p.m), EINVAL);
	cr_assert_eq(dcond_signal(&destroyed), EINVAL);
	cr_assert_eq(dcond_broadcast(&destroyed), EINVAL);
	cr_assert_eq(dcond_signal(NULL), EINVAL);
	cr_assert_eq(dcond_broadcast(&zero), EINVAL);

	/* Bad deadlines: a condition wait always blocks, so always EINVAL. */
	cr_assert_eq(dcond_timedwait(&p.cv, &p.m, NULL), EINVAL);
	deadline_in(&ts, CLOCK_REALTIME, 1000);
	ts.tv_nsec = 1000000000;
	cr_assert_eq(dcond_timedwait(&p.cv, &p.m, &ts), EINVAL);
	ts.tv_nsec = -1;
	cr_assert_eq(dcond_clockwait(&p.cv, &p.m, CLOCK_MONOTONIC, &ts), EINVAL);
	deadline_in(&ts, CLOCK_REALTIME, 1000);
	cr_assert_eq(dcond_clockwait(&p.cv, &p.m, CLOCK_THREAD_CPUTIME_ID, &ts), EINVAL);

	/* Nothing happened to the mutex, and nobody registered. */
	uint64_t fence;
	cr_assert_eq(dmutex_fence(&p.m, &fence), 0);
	cr_assert_eq(waiters("c"), 0);
	cr_assert_eq(dmutex_unlock(&p.m), 0);
	pair_close(&p);
}

/* Holds the mutex and stays alive: a thread that ends gives its holds up. */
static pthread_mutex_t park_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_cv = PTHREAD_COND_INITIALIZER;
static int parked;

static void *lock_and_park(void *arg)
{
	struct pair *p = arg;
	dmutex_lock(&p->m);
	pthread_mutex_lock(&park_mu);
	parked = 1;
	pthread_cond_broadcast(&park_cv);
	pthread_mutex_unlock(&park_mu);
	for (;;)
		pause();
	return NULL;
}

static void wait_parked(void)
{
	pthread_mutex_lock(&park_mu);
	while (!parked)
		pthread_cond_wait(&park_cv, &park_mu);
	pthread_mutex_unlock(&park_mu);
}

Test(cond, wait_without_the_mutex_is_eperm)
{
	struct pair p;
	struct timespec ts;
	pthread_t t;

	cr_assert_eq(pair_open(&p, srv.url, "m", "c", NULL), 0);
	/* Not held at all. */
	cr_assert_eq(dcond_wait(&p.cv, &p.m), EPERM);
	deadline_in(&ts, CLOCK_REALTIME, 1000);
	cr_assert_eq(dcond_timedwait(&p.cv, &p.m, &ts), EPERM);
	/* Held by another thread. */
	cr_assert_eq(pthread_create(&t, NULL, lock_and_park, &p), 0);
	wait_parked();
	cr_assert_eq(dcond_wait(&p.cv, &p.m), EPERM);
	cr_assert_eq(waiters("c"), 0, "an EPERM wait registers nothing");
	/* The other thread still holds it: our unlock is EPERM too. */
	cr_assert_eq(dmutex_unlock(&p.m), EPERM);
	cr_assert_eq(dmutex_trylock(&p.m), EBUSY);
	/* Leaves the client busy on purpose (held by the parked thread):
	 * the process ends with the test. */
}

Test(cond, signal_and_broadcast_without_waiters)
{
	struct pair p;

	cr_assert_eq(pair_open(&p, srv.url, "m", "c", NULL), 0);
	cr_assert_eq(dcond_signal(&p.cv), 0);
	cr_assert_eq(dcond_broadcast(&p.cv), 0);
	/* ... and the caller need not hold the mutex. */
	cr_assert_eq(dmt_count_keys(&srv, "dmutex:c*"), 0, "nothing left behind");
	pair_close(&p);
}

/* A signal to nobody is one read (issue 28: a work queue signals at every
 * push and pop, mostly to nobody): no clock, no scan of the waiters, no
 * cleanup of zsets that do not exist. */
Test(cond, signal_without_waiters_reads_one_key)
{
	struct pair p;
	long long before, exists;

	DMT_SINGLE_NODE();
	DMT_REDIS_STATE("the commands Redis ran for the signal");
	cr_assert_eq(pair_open(&p, srv.url, "m1", "c1", NULL), 0);
	before = dmt_cmd_calls(&srv, "time", "zcount", "zrangebyscore", "zremrangebyscore", NULL);
	exists = dmt_cmd_calls(&srv, "exists", NULL);
	cr_assert_eq(dcond_signal(&p.cv), 0);
	cr_assert_eq(dmt_cmd_calls(&srv, "time", "zcount", "zrangebyscore", "zremrangebyscore", NULL),
			before, "the signal scanned or cleaned zsets that do not exist");
	cr_assert_eq(dmt_cmd_calls(&srv, "exists", NULL), exists + 1);
	pair_close(&p);
}

/* Every command Redis has run, as INFO stats counts them (a script's
 * inner calls included, issue 28), less the INFO that asks. */
static long long commands_processed(void)
{
	redisReply *r = th_redis_cmd(&srv, "INFO stats");
	const char *p = r && r->type == REDIS_REPLY_STRING
		? strstr(r->str, "total_commands_processed:") : NULL;
	long long n = p ? atoll(p + strlen("total_commands_processed:")) : -1;

	if (r)
		freeReplyObject(r);
	cr_assert_geq(n, 0, "INFO stats has no total_commands_processed");
	return n + 1;
}

/* A work queue signals at every push and pop, mostly to nobody (issue 28,
 * the pool's commands per job): such a signal or broadcast is one plain
 * EXISTS, no script (2 commands each before: the EVALSHA and its EXISTS). */
Test(cond, signal_without_waiters_is_one_command)
{
	struct pair p;
	long long before, scripts, n;

	DMT_SINGLE_NODE();
	DMT_REDIS_STATE("the commands Redis ran for the signal");
	cr_assert_eq(pair_open(&p, srv.url, "m3", "c3", NULL), 0);
	/* A woken waiter that has not acknowledged yet (it is taking the
	 * mutex back) is no waiter to wake: only the waiters zset counts. */
	th_redis_int(&srv, "ZADD dmutex:csig:{c3} %lld woken", (long long)time(NULL) * 1000 + 60000);
	scripts = dmt_evalsha_calls(&srv);
	before = commands_processed();
	for (int i = 0; i < 3; i++)
		cr_assert_eq(dcond_signal(&p.cv), 0);
	cr_assert_eq(dcond_broadcast(&p.cv), 0);
	/* less the INFO of before */
	n = commands_processed() - before - 1;
	cr_assert_eq(n, 4, "%lld commands for 4 wake-ups of nobody", n);
	cr_assert_eq(dmt_evalsha_calls(&srv), scripts, "a script ran for nobody");
	cr_assert_eq(unacked("c3"), 1, "the wake-up owed an acknowledgement was dropped");
	pair_close(&p);
}

/* A signal reads the whole waiters zset anyway: it prunes expired
 * registrations (waiters that died) when it saw some, not at every call,
 * and the owed wake-ups only when some are owed. */
Test(cond, signal_prunes_only_what_expired)
{
	struct pair p;
	long long ms = (long long)time(NULL) * 1000, prunes;

	DMT_SINGLE_NODE();
	DMT_REDIS_STATE("the commands Redis ran for the signal");
	cr_assert_eq(pair_open(&p, srv.url, "m4", "c4", NULL), 0);
	/* A live registration of nobody (no subscriber): tried, taken off. */
	th_redis_int(&srv, "ZADD dmutex:cond:{c4} %lld nobody", ms + 60000);
	prunes = dmt_cmd_calls(&srv, "zremrangebyscore", NULL);
	cr_assert_eq(dcond_signal(&p.cv), 0);
	cr_assert_eq(waiters("c4"), 0);
	cr_assert_eq(dmt_cmd_calls(&srv, "zremrangebyscore", NULL), prunes, "pruned with nothing expired");
	/* An expired one (a waiter that died): pruned. */
	th_redis_int(&srv, "ZADD dmutex:cond:{c4} %lld dead", ms - 60000);
	cr_assert_eq(dcond_signal(&p.cv), 0);
	cr_assert_eq(waiters("c4"), 0, "the expired registration stayed");
	cr_assert_eq(dmt_cmd_calls(&srv, "zremrangebyscore", NULL), prunes + 1);
	pair_close(&p);
}

/* A broadcast to many threads of one process (issue 29: LTP
 * pthread_cond_broadcast 1-2, 1,000 threads, took 129 s through the shim,
 * 41 s natively): each woken thread takes the mutex back in turn, and
 * every unlock woke every thread still queued for it, to find it taken
 * again: n^2/2 wake-ups.  Counted, not timed: the context switches the
 * waiting threads made (getrusage RUSAGE_THREAD, voluntary), from their
 * lock to their unlock.  One wake-up per turn makes a few per thread (the
 * round trips of the wait, one sleep for the signal, one for the turn);
 * n^2/2 is 100 per thread at n = 200.  And the connections the server
 * accepted after the broadcast: each woken thread opened one for its
 * leave (197 of 200), a few now. */
#define MANY 200
static struct {
	struct pair *p;
	pthread_mutex_t mu;
	int ready, go, woken;
	long switches;
} many = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void *many_waiter(void *arg)
{
	struct rusage r0, r1;
	intptr_t rc = 0;
	int ready;

	(void)arg;
	getrusage(RUSAGE_THREAD, &r0);
	if ((rc = dmutex_lock(&many.p->m)))
		return (void *)rc;
	pthread_mutex_lock(&many.mu);
	many.ready++;
	pthread_mutex_unlock(&many.mu);
	do {
		pthread_mutex_lock(&many.mu);
		ready = many.go;
		pthread_mutex_unlock(&many.mu);
		if (!ready && (rc = dcond_wait(&many.p->cv, &many.p->m)))
			break;
	} while (!ready);
	pthread_mutex_lock(&many.mu);
	many.woken += !rc;
	pthread_mutex_unlock(&many.mu);
	if (!rc)
		rc = dmutex_unlock(&many.p->m);
	getrusage(RUSAGE_THREAD, &r1);
	pthread_mutex_lock(&many.mu);
	many.switches += r1.ru_nvcsw - r0.ru_nvcsw;
	pthread_mutex_unlock(&many.mu);
	return (void *)rc;
}

/* Connections the server accepted so far (INFO stats). */
static long long connections(void)
{
	redisReply *r = th_redis_cmd(&srv, "INFO stats");
	const char *f = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "total_connections_received:")
		: NULL;
	long long n = f ? atoll(f + strlen("total_connections_received:")) : -1;

	if (r)
		freeReplyObject(r);
	return n;
}

static int many_registered(void *arg)
{
	(void)arg;
	return waiters("cmany") == MANY;
}

Test(cond, broadcast_to_many_threads_wakes_each_a_few_times, .timeout = 120)
{
	struct pair p;
	pthread_t t[MANY];
	long long conns;
	void *rc;

	DMT_SINGLE_NODE();
	cr_assert_eq(pair_open(&p, srv.url, "mmany", "cmany", NULL), 0);
	many.p = &p;
	for (int i = 0; i < MANY; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, many_waiter, NULL), 0);
	cr_assert(th_wait_until(many_registered, NULL, 60000), "%lld of %d threads registered",
			waiters("cmany"), MANY);
	cr_assert_eq(dmutex_lock(&p.m), 0);
	conns = connections();
	pthread_mutex_lock(&many.mu);
	many.go = 1;
	pthread_mutex_unlock(&many.mu);
	cr_assert_eq(dcond_broadcast(&p.cv), 0);
	cr_assert_eq(dmutex_unlock(&p.m), 0);
	for (int i = 0; i < MANY; i++) {
		cr_assert_eq(pthread_join(t[i], &rc), 0);
		cr_assert_eq((intptr_t)rc, 0, "thread %d: %s", i, strerror((int)(intptr_t)rc));
	}
	cr_assert_eq(many.woken, MANY);
	conns = connections() - conns;
	cr_log_info("%d threads: %ld voluntary context switches, %.1f per thread; %lld connections opened "
			"after the broadcast", MANY, many.switches, (double)many.switches / MANY, conns);
	/* Each woken thread opened a connection of its own for its leave,
	 * and kept it while it queued for the mutex: those queued leave once
	 * they hold it, on the pool's connections. */
	if (!dmt_etcd())        /* (Redis's own count of connections) */
		cr_assert_lt(conns, MANY / 4, "%lld connections opened for %d woken threads", conns, MANY);
	cr_assert_lt(many.switches, 25L * MANY, "%ld voluntary context switches for %d threads: "
			"a turn at the mutex wakes more than one thread", many.switches, MANY);
	pair_close(&p);
}

static struct pair *busy_pair;

static void *busy_waiter(void *arg)
{
	struct timespec ts;
	(void)arg;
	dmutex_lock(&busy_pair->m);
	deadline_in(&ts, CLOCK_MONOTONIC, 5000);
	intptr_t rc = dcond_clockwait(&busy_pair->cv, &busy_pair->m, CLOCK_MONOTONIC, &ts);
	dmutex_unlock(&busy_pair->m);
	return (void *)rc;
}

Test(cond, destroy_with_a_waiter_is_ebusy)
{
	struct pair p;
	pthread_t t;
	void *rc;

	cr_assert_eq(pair_open(&p, srv.url, "m", "c", NULL), 0);
	busy_pair = &p;
	cr_assert_eq(pthread_create(&t, NULL, busy_waiter, NULL), 0);
	wait_count(waiters, "c", 1);
	cr_assert_eq(dcond_destroy(&p.cv), EBUSY);
	cr_assert_eq(dcond_signal(&p.cv), 0);
	pthread_join(t, &rc);
	cr_assert_eq((intptr_t)rc, 0, "woken by the signal");
	cr_assert_eq(dcond_destroy(&p.cv), 0);
	dmt_close_mutex(p.c, &p.m);
}

/* ------------------------------------------------------------------ */
/* timed waits                                                         */
/* ------------------------------------------------------------------ */

static void timed_wait_ends_on_time(clockid_t clock, int use_attr)
{
	struct pair p;
	struct timespec ts;
	uint64_t fence;
	long long t0, elapsed;

	cr_assert_eq(pair_open(&p, srv.url, "m", "c", NULL), 0);
	if (use_attr) {
		/* dcond_timedwait reads the deadline on the attribute's clock. */
		dcond_attr_t a;
		dcond_destroy(&p.cv);
		dcond_attr_init(&a);
		dcond_attr_setclient(&a, p.c);
		dcond_attr_setclock(&a, clock);
		cr_assert_eq(dcond_init(&p.cv, "c", &a), 0);
		dcond_attr_destroy(&a);
	}
	cr_assert_eq(dmutex_lock(&p.m), 0);
	t0 = th_now_ms();
	deadline_in(&ts, clock, 300);
	int rc = use_attr ? dcond_timedwait(&p.cv, &p.m, &ts) : dcond_clockwait(&p.cv, &p.m, clock, &ts);
	elapsed = th_now_ms() - t0;
	cr_assert_eq(rc, ETIMEDOUT);
	/* The passage of time is what is tested here. */
	cr_assert_geq(elapsed, 300, "returned after %lld ms, before its deadline", elapsed);
	/* Late by a scheduling delay at most, not by a lease or a poll
	 * period (a Redlock re-lock at load 11 took 600 ms). */
	cr_assert_lt(elapsed, 300 + 1200 * dmt_slowdown(), "returned after %lld ms, for a 300 ms deadline",
			elapsed);
	cr_assert_eq(dmutex_fence(&p.m, &fence), 0, "the mutex is held again");
	cr_assert_eq(waiters("c"), 0, "the registration is gone");
	cr_assert_eq(dmutex_unlock(&p.m), 0);
	pair_close(&p);
}

Test(cond, timedwait_realtime_ends_on_time)
{
	timed_wait_ends_on_time(CLOCK_REALTIME, 1);
}

Test(cond, timedwait_monotonic_attr_ends_on_time)
{
	timed_wait_ends_on_time(CLOCK_MONOTONIC, 1);
}

Test(cond, clockwait_monotonic_ends_on_time)
{
	timed_wait_ends_on_time(CLOCK_MONOTONIC, 0);
}

Test(cond, deadline_already_passed)
{
	struct pair p;
	struct timespec ts;
	uint64_t fence;

	cr_assert_eq(pair_open(&p, srv.url, "m", "c", NULL), 0);
	cr_assert_eq(dmutex_lock(&p.m), 0);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec -= 5;
	cr_assert_eq(dcond_timedwait(&p.cv, &p.m, &ts), ETIMEDOUT);
	cr_assert_eq(dmutex_fence(&p.m, &fence), 0);
	cr_assert_eq(dmutex_unlock(&p.m), 0);
	pair_close(&p);
}

/* ------------------------------------------------------------------ */
/* wake-ups across processes                                           */
/* ------------------------------------------------------------------ */

Test(cond, signal_wakes_a_waiter_of_another_process_at_once)
{
	char url[700];
	struct pair p;
	long long calls0, t0, woke_ms;

	/* A 30 s lease: whatever is not woken through the backend (a
	 * registration's refresh, a kept lease's renewal) comes a third of
	 * it, 10 s, after the last one, far beyond the bound below, which
	 * can then allow for a loaded ASan run's scheduling (the woken
	 * child re-takes the mutex, closes its client and exits before
	 * th_wait_child sees it: 1 s was too close). */
	dmt_url(url, sizeof url, NULL, srv.port, "lease_ms=30000");
	cr_assert_eq(pair_open(&p, url, "m", "c", NULL), 0);
	kids[0] = spawn_waiter_at(url, "m", "c", 0);
	wait_sleeping("c", &p.m, 1);
	/* (Over etcd the waiter watches its own key: no channel.) */
	if (!dmt_etcd())
		wait_count(subscribed, "c", 1);

	/* Waiting costs nothing: no script call (over etcd no KV request)
	 * for a second (the registration's refresh is due only after a
	 * third of the 30 s lease).  The passage of time is what is tested. */
	calls0 = dmt_script_calls(&srv);
	dmt_pass_time_ms(1000);
	/* On N Redlock nodes each node's subscription may land late and make
	 * the waiter look once. */
	cr_assert_leq(dmt_script_calls(&srv) - calls0, dmt_nodes() - 1, "a waiting process polled the backend");

	/* The mutex was released by the wait: we can take it. */
	cr_assert_eq(dmutex_lock(&p.m), 0);
	cr_assert_eq(dcond_signal(&p.cv), 0);
	t0 = th_now_ms();
	cr_assert_eq(dmutex_unlock(&p.m), 0);
	cr_assert_eq(th_wait_child(kids[0], 15000), W_WOKEN);
	woke_ms = th_now_ms() - t0;
	kids[0] = 0;
	cr_assert_lt(woke_ms, 3000, "woken after %lld ms: not through the backend", woke_ms);
	cr_assert_eq(waiters("c"), 0);
	cr_assert_eq(unacked("c"), 0, "the wake-up was acknowledged");
	pair_close(&p);
}

/* A condition wait subscribes its mutex's wake channel and its own in one
 * SUBSCRIBE (issue 28: a command less a wait; the mutex's is asked for
 * without waking the wake-up thread, which the second request wakes).  The
 * second wait of a thread is counted: the wake-up thread is running and
 * idle, and nothing else is subscribed. */
struct twice {
	struct pair p;
	atomic_int go, waited;
	int rc[2];
};

static int flag_at_least_go(void *arg)
{
	struct twice *t = arg;

	return atomic_load(&t->go) > atomic_load(&t->waited);
}

static void *wait_twice(void *arg)
{
	struct twice *t = arg;

	for (int i = 0; i < 2; i++) {
		while (atomic_load(&t->go) <= i)
			th_wait_until(flag_at_least_go, t, 1000);
		if ((t->rc[i] = dmutex_lock(&t->p.m)))
			return NULL;
		t->rc[i] = dcond_wait(&t->p.cv, &t->p.m);
		dmutex_unlock(&t->p.m);
		atomic_fetch_add(&t->waited, 1);
	}
	return NULL;
}

/* No channel has a subscriber on srv. */
static int nothing_subscribed(void *arg)
{
	redisReply *r = th_redis_cmd(&srv, "PUBSUB CHANNELS");
	int none = r && r->type == REDIS_REPLY_ARRAY && r->elements == 0;

	(void)arg;
	if (r)
		freeReplyObject(r);
	return none;
}

static int waited_once(void *arg)
{
	return atomic_load(&((struct twice *)arg)->waited) >= 1;
}

Test(cond, a_wait_subscribes_both_channels_in_one_command)
{
	static struct twice t;
	struct pair s;
	pthread_t th;
	long long subs;

	DMT_REDIS_STATE("counts Redis's SUBSCRIBE commands; etcd watches keys");
	DMT_SINGLE_NODE();
	cr_assert_eq(pair_open(&t.p, srv.url, "m2", "c2", &(struct dmt_attr){ .nocache = 1 }), 0);
	cr_assert_eq(pair_open(&s, srv.url, "m2", "c2", &(struct dmt_attr){ .nocache = 1 }), 0);
	cr_assert_eq(pthread_create(&th, NULL, wait_twice, &t), 0);
	for (int i = 0; i < 2; i++) {
		cr_assert(th_wait_until(nothing_subscribed, NULL, 10000), "still subscribed");
		subs = dmt_cmd_calls(&srv, "subscribe", NULL);
		atomic_store(&t.go, i + 1);
		wait_sleeping("c2", &s.m, 1);
		wait_count(subscribed, "c2", 1);
		if (i == 1)
			cr_assert_eq(dmt_cmd_calls(&srv, "subscribe", NULL) - subs, 1, "a wait sent %lld "
					"SUBSCRIBE commands", dmt_cmd_calls(&srv, "subscribe", NULL) - subs);
		cr_assert_eq(dmutex_lock(&s.m), 0);
		cr_assert_eq(dcond_signal(&s.cv), 0);
		cr_assert_eq(dmutex_unlock(&s.m), 0);
		if (i == 0)
			cr_assert(th_wait_until(waited_once, &t, 10000), "the first wait did not end");
	}
	pthread_join(th, NULL);
	cr_assert_eq(t.rc[0], 0);
	cr_assert_eq(t.rc[1], 0);
	pair_close(&s);
	pair_close(&t.p);
}

Test(cond, signal_wakes_one_broadcast_wakes_all)
{
	struct pair p;
	int woken = 0, timed_out = 0;

	cr_assert_eq(pair_open(&p, srv.url, "m", "c", NULL), 0);
	/* Two waiters with a 3 s deadline: one signal wakes one.  Both must
	 * be registered before the first one's deadline: they fork and
	 * connect first and start waiting together at a gate (in a loaded
	 * ASan run a fork retried by th_spawn costs 2 s, which took most of
	 * the first waiter's deadline before the second one existed). */
	gate_close(GATED);
	kids[0] = spawn_waiter("m", "c", 3000);
	kids[1] = spawn_waiter("m", "c", 3000);
	gate_wait_ready(2);
	gate_open(2);
	wait_count(waiters, "c", 2);
	cr_assert_eq(dcond_signal(&p.cv), 0);
	for (int i = 0; i < 2; i++) {
		int st = th_wait_child(kids[i], 6000);
		kids[i] = 0;
		woken += st == W_WOKEN;
		timed_out += st == W_TIMEDOUT;
	}
	/* On N Redlock nodes each node wakes its own oldest waiter: that may
	 * be a different one (POSIX allows waking more than one). */
	cr_assert_geq(woken, 1);
	if (dmt_nodes() == 1) {
		cr_assert_eq(woken, 1);
		cr_assert_eq(timed_out, 1);
	}

	/* Three waiters, one broadcast: all wake long before their deadline. */
	for (int i = 0; i < 3; i++)
		kids[i] = spawn_waiter("m", "c", 20000);
	wait_count(waiters, "c", 3);
	cr_assert_eq(dcond_broadcast(&p.cv), 0);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(th_wait_child(kids[i], 5000), W_WOKEN, "waiter %d", i);
		kids[i] = 0;
	}
	/* A broadcast wakes only those registered before it. */
	kids[0] = spawn_waiter("m", "c", 500);
	cr_assert_eq(th_wait_child(kids[0], 5000), W_TIMEDOUT);
	kids[0] = 0;
	pair_close(&p);
}

/*
 * No wake-up is lost between the waiter's unlock and its sleep: the parent
 * can only take the mutex once the waiter released it in dcond_wait, and
 * signals at once, many times over.
 */
static int pingpong_child(void *arg)
{
	struct pair p;
	redisContext *r;
	int rounds = (int)(intptr_t)arg;

	dmt_die_with_parent(test_pid);
	if (pair_open(&p, srv.url, "m", "c", NULL) || !(r = th_tcp_connect(srv.port, 5000)))
		return W_SETUP;
	for (int i = 0; i < rounds; i++) {
		if (dmutex_lock(&p.m))
			return W_SETUP + 1;
		/* The predicate: the parent's turn counter, in Redis. */
		freeReplyObject(redisCommand(r, "SET turn %d", 2 * i + 1));
		for (;;) {
			redisReply *rep = redisCommand(r, "GET turn");
			int turn = rep && rep->type == REDIS_REPLY_STRING ? atoi(rep->str) : -1;
			if (rep)
				freeReplyObject(rep);
			if (turn == 2 * i + 2)
				break;
			if (dcond_wait(&p.cv, &p.m))
				return W_OTHER;
		}
		dmutex_unlock(&p.m);
	}
	redisFree(r);
	pair_close(&p);
	return W_WOKEN;
}

Test(cond, no_wakeup_lost_between_unlock_and_sleep)
{
	struct pair p;
	const int rounds = 30;

	cr_assert_eq(pair_open(&p, srv.url, "m", "c", NULL), 0);
	th_redis_int(&srv, "SET turn 0");
	kids[0] = th_spawn(pingpong_child, (void *)(intptr_t)rounds);
	for (int i = 0; i < rounds; i++) {
		/* Our turn comes when the child set 2i+1 and went to sleep. */
		for (;;) {
			cr_assert_eq(dmutex_lock(&p.m), 0);
			if (th_redis_int(&srv, "GET turn") == 2 * i + 1)
				break;
			cr_assert_eq(dmutex_unlock(&p.m), 0);
		}
		th_redis_int(&srv, "SET turn %d", 2 * i + 2);
		cr_assert_eq(dcond_signal(&p.cv), 0);
		cr_assert_eq(dmutex_unlock(&p.m), 0);
	}
	/* An untimed wait: a lost wake-up would hang the child here. */
	cr_assert_eq(th_wait_child(kids[0], 15000), W_WOKEN);
	kids[0] = 0;
	pair_close(&p);
}

/*
 * The cost of a wake-up (issue 15 item 5): from dcond_signal to the waiter
 * back from dcond_wait holding the mutex, at most 2 round trips beyond the
 * mutex's hand-over (release + acquire).  Counted on the server: the
 * signal, the waiter's acknowledgement and its first (busy) attempt on the
 * mutex (those two sent together: one round trip), then the hand-over.
 * No subscription on the way: the waiter subscribed to the mutex's
 * channel before it slept.  The parent holds the mutex until the waiter
 * asked for it, so the count is the same on any machine.
 */
static int counted_pipe[2], counted_go[2];

static int counted_waiter(void *arg)
{
	struct pair p;
	uint64_t fence;
	char b;
	int rc;

	(void)arg;
	dmt_die_with_parent(test_pid);
	if (pair_open(&p, srv.url, "m", "c", NULL) || dmutex_lock(&p.m))
		return W_SETUP;
	rc = dcond_wait(&p.cv, &p.m);
	b = rc == 0 && dmutex_fence(&p.m, &fence) == 0 ? 'w' : 'x';
	if (write(counted_pipe[1], &b, 1) != 1 || read(counted_go[0], &b, 1) != 1)
		return W_OTHER;
	dmutex_unlock(&p.m);
	pair_close(&p);
	return rc ? W_OTHER : W_WOKEN;
}

static long long lock_waited(const char *name)
{
	char v[8];

	return dmt_lock_field(&srv, name, "w", v, sizeof v);
}

/* The expiry (server ms) of the first registered waiter of `name`, -1 if
 * none. */
static long long registration_expiry(const char *name)
{
	redisReply *r = th_redis_cmd(&srv, "ZRANGE dmutex:cond:{%s} 0 0 WITHSCORES", name);
	long long e = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->str
		? atoll(r->element[1]->str) : -1;

	if (r)
		freeReplyObject(r);
	return e;
}

/* th_wait_until condition: the registration of "c" was refreshed (its
 * expiry moved on from *arg). */
static int registration_moved(void *arg)
{
	long long e = registration_expiry("c");

	return e > *(long long *)arg;
}

static long long mutex_subscribers(const char *name)
{
	return dmt_backend_waiters(&srv, name);
}

Test(cond, signal_to_wake_is_two_round_trips_beyond_the_handoff)
{
	struct pair p;
	struct pollfd pf;
	long long scripts, subs, expiry;
	uint64_t fence;
	char b = 0;

	DMT_SINGLE_NODE();      /* Redlock asks every node */
	DMT_REDIS_STATE("script calls, subscribers and the registration's expiry");
	cr_assert_eq(pipe(counted_pipe), 0);
	cr_assert_eq(pipe(counted_go), 0);
	/* No kept lease here: a kept lease listens on the mutex's channel
	 * for requests to give it back, and made the subscriber count 2 in
	 * loaded ASan runs; the waiter's subscription is the one counted. */
	cr_assert_eq(pair_open(&p, srv.url, "m", "c", &(struct dmt_attr){ .nocache = 1 }), 0);
	/* Every script the count sees is in the server's cache already: a
	 * wait that times out registers, leaves and takes the mutex back. */
	{
		struct timespec ts;

		cr_assert_eq(dmutex_lock(&p.m), 0);
		deadline_in(&ts, CLOCK_REALTIME, 50);
		cr_assert_eq(dcond_timedwait(&p.cv, &p.m, &ts), ETIMEDOUT);
		cr_assert_eq(dmutex_unlock(&p.m), 0);
	}
	/* A signal that finds no waiter's key runs no script (an EXISTS
	 * only): a registration of nobody makes this one load the script. */
	th_redis_int(&srv, "ZADD dmutex:cond:{c} %lld nobody", (long long)time(NULL) * 1000 + 60000);
	cr_assert_eq(dcond_signal(&p.cv), 0);
	cr_assert_eq(waiters("c"), 0, "the signal tried nobody, and took it off");
	kids[0] = th_spawn(counted_waiter, NULL);
	wait_sleeping("c", &p.m, 1);
	expiry = registration_expiry("c");
	wait_count(subscribed, "c", 1);
	wait_count(mutex_subscribers, "m", 1);
	/* The waiter's subscription to the mutex comes with its first
	 * refresh, a third of the lease after it registered: the count must
	 * start after that refresh's script, which a loaded cond-tls run
	 * counted (6 scripts) when it read the count between the two. */
	cr_assert(th_wait_until(registration_moved, &expiry, 10000), "the waiter's registration was never refreshed");

	cr_assert_eq(dmutex_lock(&p.m), 0);
	/* Loads fence.lua into the server, so that the waiter's first
	 * dmutex_fence below is one EVALSHA (not NOSCRIPT, then EVAL). */
	cr_assert_eq(dmutex_fence(&p.m, &fence), 0);
	scripts = dmt_cmd_calls(&srv, "evalsha", "eval", (const char *)NULL);
	subs = dmt_cmd_calls(&srv, "subscribe", (const char *)NULL);
	cr_assert_eq(dcond_signal(&p.cv), 0);
	/* Woken, the waiter asked for the mutex and waits for its release. */
	wait_count(lock_waited, "m", 1);
	cr_assert_eq(dmutex_unlock(&p.m), 0);
	pf = (struct pollfd){ .fd = counted_pipe[0], .events = POLLIN };
	cr_assert_eq(poll(&pf, 1, 10000), 1, "the waiter never came back from dcond_wait");
	cr_assert_eq(read(counted_pipe[0], &b, 1), 1);
	cr_assert_eq(b, 'w', "back from dcond_wait with 0 and the mutex held");
	scripts = dmt_cmd_calls(&srv, "evalsha", "eval", (const char *)NULL) - scripts;
	subs = dmt_cmd_calls(&srv, "subscribe", (const char *)NULL) - subs;
	/* signal + (acknowledge | busy attempt) + release, which grants the
	 * queued waiter the mutex (wake_queue.lua: no acquire of its own;
	 * the code before the grant counted 6), and the waiter's
	 * dmutex_fence (the token is handed out when first asked for, key
	 * layout 3). */
	cr_assert_eq(scripts, 5, "%lld scripts from the signal to the waiter's return", scripts);
	cr_assert_eq(subs, 0, "%lld subscriptions on the way", subs);

	cr_assert_eq(write(counted_go[1], &b, 1), 1);
	cr_assert_eq(th_wait_child(kids[0], 5000), W_WOKEN);
	kids[0] = 0;
	cr_assert_eq(waiters("c"), 0);
	cr_assert_eq(unacked("c"), 0, "the wake-up was acknowledged");
	for (int i = 0; i < 2; i++) {
		close(counted_pipe[i]);
		close(counted_go[i]);
	}
	pair_close(&p);
}

/* ------------------------------------------------------------------ */
/* waiters that die or freeze                                          */
/* ------------------------------------------------------------------ */

Test(cond, a_killed_waiter_does_not_swallow_a_signal)
{
	struct pair p;

	/* Over etcd a dead or frozen waiter's key takes a signal until its
	 * lease ends (no acknowledgement: README "etcd"). */
	if (dmt_etcd())
		cr_skip_test("over etcd a dead waiter may swallow a signal (README \"etcd\")");
	cr_assert_eq(pair_open(&p, srv.url, "m", "c", NULL), 0);
	/* The first waiter registers, then is killed outright. */
	kids[0] = spawn_waiter("m", "c", 0);
	wait_sleeping("c", &p.m, 1);
	kill(kids[0], SIGKILL);
	cr_assert_eq(th_wait_child(kids[0], 5000), 128 + SIGKILL);
	kids[0] = 0;
	/* Redis saw its connections close; its registration is still there
	 * (it expires only after the lease). */
	wait_count(subscribed, "c", 0);
	cr_assert_eq(waiters("c"), 1);

	/* A live waiter registers after it: the dead one is older, so a
	 * signal tries it first. */
	kids[1] = spawn_waiter("m", "c", 20000);
	wait_count(waiters, "c", 2);
	cr_assert_eq(dcond_signal(&p.cv), 0);
	cr_assert_eq(th_wait_child(kids[1], 5000), W_WOKEN, "the signal went to the dead waiter");
	kids[1] = 0;
	cr_assert_eq(waiters("c"), 0, "the dead registration was dropped");
	pair_close(&p);
}

Test(cond, a_frozen_waiter_does_not_swallow_a_signal)
{
	char url[700];
	struct pair p;
	long long t0, took;

	/* Over etcd a dead or frozen waiter's key takes a signal until its
	 * lease ends (no acknowledgement: README "etcd"). */
	if (dmt_etcd())
		cr_skip_test("over etcd a dead waiter may swallow a signal (README \"etcd\")");

	/* A 3 s registration: a woken waiter has 1 s to acknowledge. */
	dmt_url(url, sizeof url, NULL, srv.port, "lease_ms=3000");
	cr_assert_eq(pair_open(&p, url, "m", "c", NULL), 0);
	/* The first waiter freezes (like a host that hangs): Redis still
	 * sees its connection, so a signal reaches "it". */
	kids[0] = spawn_waiter_at(url, "m", "c", 20000);
	wait_sleeping("c", &p.m, 1);
	/* The second waiter must register while the frozen one's registration
	 * lives (at least 2/3 of a lease after its last refresh): it forks,
	 * connects and takes the mutex first, and waits at a gate to
	 * register (in CI a fork that had to be retried took longer than
	 * that, and the frozen waiter expired; in a loaded ASan cond-tls run
	 * so did taking the mutex after the freeze, a kept lease's
	 * hand-over included). */
	gate_close(GATED_LOCKED);
	kids[1] = spawn_waiter_at(url, "m", "c", 20000);
	gate_wait_ready(1);
	cr_assert_eq(kill(kids[0], SIGSTOP), 0);
	cr_assert_eq(th_wait_stopped(kids[0]), 0);
	gate_open(1);
	wait_count(waiters, "c", 2);

	t0 = th_now_ms();
	cr_assert_eq(dcond_signal(&p.cv), 0);
	cr_assert_eq(unacked("c"), 1, "the signal went to the frozen waiter first");
	cr_assert_eq(waiters("c"), 1);
	/* Unacknowledged, it is handed on to the live waiter. */
	cr_assert_eq(th_wait_child(kids[1], 5000), W_WOKEN);
	took = th_now_ms() - t0;
	kids[1] = 0;
	cr_assert_geq(took, 900, "woken after %lld ms: before the acknowledgement window ended", took);

	/* Thawed, the first one wakes (spuriously) with the mutex held. */
	cr_assert_eq(kill(kids[0], SIGCONT), 0);
	cr_assert_eq(th_wait_child(kids[0], 5000), W_WOKEN);
	kids[0] = 0;
	cr_assert_eq(waiters("c"), 0);
	cr_assert_eq(unacked("c"), 0);
	pair_close(&p);
}

/* ------------------------------------------------------------------ */
/* what the wait gives back                                            */
/* ------------------------------------------------------------------ */

/* exit() while holding: the library releases it as owner-died.  A fresh
 * process (th_spawn_exec): LeakSanitizer's check at exit() is not reliable
 * in a child forked from a threaded parent (it also holds the parent's
 * threads, which it cannot suspend), and over TLS it reported OpenSSL's
 * per-thread state of the child's renewal thread as leaked. */
static int die_holding_child(const char *url)
{
	struct pair p;

	if (pair_open(&p, url, "m", "c", &(struct dmt_attr){ .robust = DMUTEX_ROBUST }))
		return W_SETUP;
	if (dmutex_lock(&p.m) || dcond_signal(&p.cv))
		return W_SETUP + 1;
	exit(0);
}

TH_CHILD_ENTRY(die_holding_child, die_holding_child)

Test(cond, owner_died_while_waiting_is_eownerdead)
{
	wk.robust = DMUTEX_ROBUST;
	kids[0] = spawn_waiter("m", "c", 10000);
	wait_count(waiters, "c", 1);
	kids[1] = th_spawn_exec("die_holding_child", srv.url);
	cr_assert_eq(th_wait_child(kids[1], 5000), 0);
	kids[1] = 0;
	cr_assert_eq(th_wait_child(kids[0], 5000), W_OWNERDEAD);
	kids[0] = 0;
}

Test(cond, recursive_mutex_comes_back_at_its_depth)
{
	struct pair p;
	struct timespec ts;

	cr_assert_eq(pair_open(&p, srv.url, "m", "c", &(struct dmt_attr){ .type = DMUTEX_RECURSIVE }), 0);
	cr_assert_eq(dmutex_lock(&p.m), 0);
	cr_assert_eq(dmutex_lock(&p.m), 0);
	cr_assert_eq(dmutex_lock(&p.m), 0);
	/* While we wait, it is free for others: released whole. */
	kids[0] = th_spawn_exec("die_holding_child", srv.url);
	deadline_in(&ts, CLOCK_REALTIME, 10000);
	cr_assert_eq(dcond_timedwait(&p.cv, &p.m, &ts), 0, "woken by the child's signal");
	cr_assert_eq(th_wait_child(kids[0], 5000), 0);
	kids[0] = 0;
	cr_assert_eq(dmutex_unlock(&p.m), 0);
	cr_assert_eq(dmutex_unlock(&p.m), 0);
	cr_assert_eq(dmutex_unlock(&p.m), 0);
	cr_assert_eq(dmutex_unlock(&p.m), EPERM, "depth 3 exactly");
	pair_close(&p);
}

/* ------------------------------------------------------------------ */
/* backend failures                                                    */
/* ------------------------------------------------------------------ */

Test(cond, unreachable_backend_is_eio_with_the_mutex_still_held)
{
	struct th_redis other;
	char url[700];
	dmutex_client_t *mc, *cc;
	dmutex_t m;
	dcond_t cv;
	dcond_attr_t a;
	struct timespec ts;
	uint64_t fence;

	DMT_SINGLE_NODE();
	/* The condition variable on a second server, the mutex on ours. */
	cr_assert_eq(th_redis_start(&other, NULL), 0);
	cr_assert_eq(dmt_open_mutex(&mc, &m, srv.url, "m", NULL), 0);
	th_url_with(url, sizeof url, other.url, "command_timeout_ms=200&connect_timeout_ms=200");
	cr_assert_eq(dmutex_client_open(&cc, url), 0);
	dcond_attr_init(&a);
	dcond_attr_setclient(&a, cc);
	cr_assert_eq(dcond_init(&cv, "c", &a), 0);
	dcond_attr_destroy(&a);
	th_redis_stop(&other);

	cr_assert_eq(dmutex_lock(&m), 0);
	deadline_in(&ts, CLOCK_REALTIME, 5000);
	cr_assert_eq(dcond_timedwait(&cv, &m, &ts), EIO);
	cr_assert_eq(dmutex_fence(&m, &fence), 0, "the mutex is still held");
	cr_assert_eq(dcond_signal(&cv), EIO);
	cr_assert_eq(dcond_broadcast(&cv), EIO);
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dcond_destroy(&cv), 0);
	dmt_close_mutex(mc, &m);
	dmutex_client_close(cc);
}
