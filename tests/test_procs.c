/*
 * Several processes, one lock: mutual exclusion across processes and
 * threads, fencing tokens across processes, fork, and exit while holding.
 * Every test runs against its own redis-server; the children talk to it
 * through their own dmutex client and their own hiredis connections.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "dmutex.h"
#include "harness.h"
#include "dmt.h"

static struct th_redis srv;
static pid_t test_pid;         /* the test process, parent of its children */

static void srv_up(void)
{
	test_pid = getpid();
	cr_assert_eq(th_redis_start(&srv, NULL), 0, "redis-server did not start");
	cr_assert_eq(dmt_backend_up(&srv), 0, "Redlock nodes did not start");
}

static void srv_down(void)
{
	dmt_backend_down();
	th_redis_stop(&srv);
}

TestSuite(procs, .init = srv_up, .fini = srv_down, .timeout = 30);

/* Integer reply of a command on an own connection, LLONG_MIN on error/nil
 * (a bulk string holding a number counts, as GET returns). */
static long long conn_int(redisContext *c, const char *fmt, ...)
{
	va_list ap;
	redisReply *r;
	long long v = LLONG_MIN;

	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	if (!r)
		return LLONG_MIN;
	if (r->type == REDIS_REPLY_INTEGER) {
		v = r->integer;
	} else if (r->type == REDIS_REPLY_STRING) {
		char *end;
		long long x = strtoll(r->str, &end, 10);
		if (end != r->str && *end == '\0')
			v = x;
	}
	freeReplyObject(r);
	return v;
}

/* ------------------------------------------------------------------ */
/* mutual exclusion: 4 processes x 4 threads x 500 read-modify-writes  */
/* ------------------------------------------------------------------ */

#define MX_PROCS 4
#define MX_THREADS 4
#define MX_ITERS 500
#define MX_TOTAL (MX_PROCS * MX_THREADS * MX_ITERS)
/* Over etcd a hand-over is a Raft commit and a watch event, and every
 * mutex is first-come first-served (README "etcd"): nearly every hold goes
 * to another process, 3 ms each on the loaded CI machine, so 8,000 holds
 * would take half a minute.  A tenth of them still interleaves 16 threads
 * of 4 processes hundreds of times. */
static int mx_iters(void)
{
	return dmt_etcd() ? MX_ITERS / 10 : MX_ITERS;
}

static struct th_sync mx_ready, mx_go;

struct mx_thread {
	dmutex_t *m;
	pthread_barrier_t *start;
	redisContext *conn;
	int err;                /* 0, or a distinct code of the first failure */
};

static void *mx_worker(void *arg)
{
	struct mx_thread *t = arg;

	pthread_barrier_wait(t->start);
	for (int i = 0; i < mx_iters() && !t->err; i++) {
		uint64_t fence = 0;
		long long v;
		int64_t acq, rel;
		redisReply *r;

		if (dmutex_lock(t->m)) {
			t->err = 20;
			break;
		}
		acq = dmt_now_ns();
		/* The unprotected read-modify-write the lock must serialise. */
		v = conn_int(t->conn, "GET counter");
		if (v == LLONG_MIN)
			v = 0;
		r = redisCommand(t->conn, "SET counter %lld", v + 1);
		if (!r || r->type != REDIS_REPLY_STATUS)
			t->err = 21;
		if (r)
			freeReplyObject(r);
		if (dmutex_fence(t->m, &fence))
			t->err = 22;
		rel = dmt_now_ns();
		/* Pushed while holding: the list order is the order of the holds. */
		if (conn_int(t->conn, "RPUSH history %" PRIu64 ":%" PRId64 ":%" PRId64 ":%ld",
				fence, acq, rel, (long)getpid()) <= 0)
			t->err = 23;
		if (dmutex_unlock(t->m))
			t->err = 24;
	}
	return NULL;
}

static int mx_child(void *arg)
{
	struct mx_thread th[MX_THREADS];
	pthread_t tid[MX_THREADS];
	pthread_barrier_t start;
	dmutex_client_t *c;
	dmutex_t m;
	int rc = 0;

	(void)arg;
	dmt_die_with_parent(test_pid);
	/* No kept lease: the test ends by reading the name's counter, which a
	 * kept lease moves past a reserved block that may go unused (test_cache
	 * covers those tokens). */
	if (dmt_open_mutex(&c, &m, srv.url, "mx", &(struct dmt_attr){ .nocache = 1 }))
		return 10;
	pthread_barrier_init(&start, NULL, MX_THREADS + 1);
	for (int i = 0; i < MX_THREADS; i++) {
		th[i] = (struct mx_thread){ .m = &m, .start = &start };
		if (!(th[i].conn = th_tcp_connect(srv.port, 5000)))
			return 11;
		if (pthread_create(&tid[i], NULL, mx_worker, &th[i]))
			return 12;
	}
	/* Everybody connected: start all processes at once. */
	th_sync_post(&mx_ready);
	if (th_sync_wait(&mx_go, 10000))
		rc = 13;
	pthread_barrier_wait(&start);
	for (int i = 0; i < MX_THREADS; i++) {
		pthread_join(tid[i], NULL);
		if (th[i].err && !rc)
			rc = th[i].err;
		redisFree(th[i].conn);
	}
	pthread_barrier_destroy(&start);
	dmt_close_mutex(c, &m);
	return rc;
}

struct hold_rec {
	unsigned long long fence;
	long long acq, rel;
	long pid;
};

/* LRANGE key into recs (at most max); returns the count or -1. */
static long fetch_history(const char *key, struct hold_rec *recs, long max)
{
	redisReply *r = th_redis_cmd(&srv, "LRANGE %s 0 -1", key);
	long n = -1;

	if (!r)
		return -1;
	if (r->type == REDIS_REPLY_ARRAY && (long)r->elements <= max) {
		n = (long)r->elements;
		for (long i = 0; i < n; i++) {
			struct hold_rec *h = &recs[i];
			if (r->element[i]->type != REDIS_REPLY_STRING ||
			    sscanf(r->element[i]->str, "%llu:%lld:%lld:%ld", &h->fence, &h->acq, &h->rel, &h->pid) != 4) {
				n = -1;
				break;
			}
		}
	}
	freeReplyObject(r);
	return n;
}

Test(procs, four_procs_four_threads_exact_counter_no_overlap, .timeout = 40)
{
	pid_t pids[MX_PROCS];
	static struct hold_rec recs[MX_TOTAL + 1];
	long long t0, elapsed;
	long n, handovers = 0, total = MX_PROCS * MX_THREADS * mx_iters();

	cr_assert_eq(th_sync_init(&mx_ready), 0);
	cr_assert_eq(th_sync_init(&mx_go), 0);
	for (int i = 0; i < MX_PROCS; i++)
		cr_assert_gt(pids[i] = th_spawn(mx_child, NULL), 0);
	for (int i = 0; i < MX_PROCS; i++)
		cr_assert_eq(th_sync_wait(&mx_ready, 10000), 0, "child %d not ready", i);
	t0 = th_now_ms();
	for (int i = 0; i < MX_PROCS; i++)
		th_sync_post(&mx_go);
	for (int i = 0; i < MX_PROCS; i++)
		cr_assert_eq(th_wait_child(pids[i], 35000), 0, "child %d failed", i);
	elapsed = th_now_ms() - t0;
	fprintf(stderr, "procs: %d lock/RMW/unlock cycles by %d processes x %d threads took %lld ms\n",
			(int)total, MX_PROCS, MX_THREADS, elapsed);

	/* No lost update. */
	cr_assert_eq(th_redis_int(&srv, "GET counter"), total);

	/* The history: one record per hold, in hold order. */
	n = fetch_history("history", recs, MX_TOTAL + 1);
	cr_assert_eq(n, total);
	for (long i = 0; i < n; i++) {
		cr_assert_leq(recs[i].acq, recs[i].rel, "record %ld: acquire after release", i);
		if (!i)
			continue;
		handovers += recs[i].pid != recs[i - 1].pid;
		cr_assert_gt(recs[i].fence, recs[i - 1].fence, "fence not increasing at record %ld: %llu after %llu",
				i, recs[i].fence, recs[i - 1].fence);
		/* CLOCK_MONOTONIC is one clock for all processes of the host: the
		 * next hold began after the previous one ended.  With acquire
		 * times increasing along the list, no two intervals overlap. */
		cr_assert_gt(recs[i].acq, recs[i - 1].rel, "holds %ld and %ld overlap", i - 1, i);
	}
	/* Informative: how often the lock went from one process to another. */
	fprintf(stderr, "procs: %ld hand-overs between processes\n", handovers);
	cr_assert_geq(handovers, MX_PROCS - 1);
	/* Over etcd the token is the hold key's revision: no counter. */
	if (!dmt_etcd())
		cr_assert_eq(dmt_max_int(&srv, "HGET dmutex:meta:{mx} fence"), (long long)recs[n - 1].fence);
	cr_assert_eq(dmt_lock_exists(&srv, "mx"), 0);
	th_sync_close(&mx_ready);
	th_sync_close(&mx_go);
}

/* ------------------------------------------------------------------ */
/* fencing tokens over 1,000 holds by 4 processes                      */
/* ------------------------------------------------------------------ */

#define FN_PROCS 4
#define FN_HOLDS 250
/* Over etcd: a fifth, for the reason of mx_iters. */
static int fn_holds(void)
{
	return dmt_etcd() ? FN_HOLDS / 5 : FN_HOLDS;
}

static struct th_sync fn_ready, fn_go;

static int fn_child(void *arg)
{
	dmutex_client_t *c;
	redisContext *conn;
	dmutex_t m;
	int rc = 0;

	(void)arg;
	dmt_die_with_parent(test_pid);
	/* No kept lease, as "mx" above: the counter is read at the end. */
	if (dmt_open_mutex(&c, &m, srv.url, "fenced", &(struct dmt_attr){ .nocache = 1 }))
		return 10;
	if (!(conn = th_tcp_connect(srv.port, 5000)))
		return 11;
	th_sync_post(&fn_ready);
	if (th_sync_wait(&fn_go, 10000))
		return 12;
	for (int i = 0; i < fn_holds() && !rc; i++) {
		uint64_t fence = 0;
		if (dmutex_lock(&m))
			return 13;
		if (dmutex_fence(&m, &fence))
			rc = 14;
		else if (conn_int(conn, "RPUSH fences %" PRIu64, fence) <= 0)
			rc = 15;
		if (dmutex_unlock(&m))
			rc = 16;
	}
	redisFree(conn);
	dmt_close_mutex(c, &m);
	return rc;
}

Test(procs, fencing_tokens_strictly_increase_across_processes, .timeout = 30)
{
	pid_t pids[FN_PROCS];
	redisReply *r;
	unsigned long long prev = 0;

	cr_assert_eq(th_sync_init(&fn_ready), 0);
	cr_assert_eq(th_sync_init(&fn_go), 0);
	for (int i = 0; i < FN_PROCS; i++)
		cr_assert_gt(pids[i] = th_spawn(fn_child, NULL), 0);
	for (int i = 0; i < FN_PROCS; i++)
		cr_assert_eq(th_sync_wait(&fn_ready, 10000), 0);
	for (int i = 0; i < FN_PROCS; i++)
		th_sync_post(&fn_go);
	for (int i = 0; i < FN_PROCS; i++)
		cr_assert_eq(th_wait_child(pids[i], 25000), 0, "child %d failed", i);

	r = th_redis_cmd(&srv, "LRANGE fences 0 -1");
	cr_assert_not_null(r);
	cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
	cr_assert_eq(r->elements, (size_t)(FN_PROCS * fn_holds()));
	for (size_t i = 0; i < r->elements; i++) {
		unsigned long long f = strtoull(r->element[i]->str, NULL, 10);
		cr_assert_gt(f, prev, "token %zu is %llu after %llu", i, f, prev);
		prev = f;
	}
	freeReplyObject(r);
	/* The counter in meta is the last token handed out (on Redlock, the
	 * largest of the nodes' counters); over etcd the token is the hold
	 * key's revision, with no counter. */
	if (!dmt_etcd())
		cr_assert_eq(dmt_max_int(&srv, "HGET dmutex:meta:{fenced} fence"), (long long)prev);
	th_sync_close(&fn_ready);
	th_sync_close(&fn_go);
}

/* ------------------------------------------------------------------ */
/* fork                                                                */
/* ------------------------------------------------------------------ */

static struct th_sync fk_checked, fk_unlocked;
static dmutex_t fk_m;
static uint64_t fk_parent_fence;

/* The pid in NAME's lock key; -1 without one. */
static long long lock_pid(const char *name)
{
	char pid[32];

	return dmt_lock_field(&srv, name, "pid", pid, sizeof pid) ? atoll(pid) : -1;
}

/* Runs in the child of a parent that holds fk_m, with the parent's client. */
static int fork_child(void *arg)
{
	uint64_t fence = 0;
	redisContext *conn;
	long long pid;

	(void)arg;
	dmt_die_with_parent(test_pid);
	/* None of the parent's holds came along. */
	if (dmutex_unlock(&fk_m) != EPERM)
		return 10;
	if (dmutex_fence(&fk_m, &fence) != EPERM)
		return 11;
	/* The parent still holds it, in Redis. */
	if (dmutex_trylock(&fk_m) != EBUSY)
		return 12;
	th_sync_post(&fk_checked);
	if (th_sync_wait(&fk_unlocked, 10000))
		return 13;
	if (dmutex_lock(&fk_m))
		return 14;
	/* Our own identity: the lock records this process, and the hold got a
	 * new token. */
	if (!(conn = th_tcp_connect(srv.port, 5000)))
		return 15;
	pid = lock_pid("fk");
	/* For the parent to compare with its own next tokens (token.c keeps
	 * random bytes per thread: the child must not reuse its parent's). */
	char token[128];
	if (dmt_lock_field(&srv, "fk", "token", token, sizeof token))
		freeReplyObject(redisCommand(conn, "SET fk:child %s", token));
	redisFree(conn);
	if (pid != (long long)getpid())
		return 16;
	if (dmutex_fence(&fk_m, &fence) || fence <= fk_parent_fence)
		return 17;
	if (dmutex_unlock(&fk_m))
		return 18;
	return 0;
}

static int fk_clients_before;


static int more_clients(void *arg)
{
	(void)arg;
	return th_redis_clients(&srv) > fk_clients_before;
}

Test(procs, fork_child_holds_none_of_parents_locks, .timeout = 20)
{
	dmutex_client_t *c;
	char token[64], child_token[64];
	uint64_t fence = 0;
	int clients_before;
	pid_t pid;

	cr_assert_eq(dmt_open_mutex(&c, &fk_m, srv.url, "fk", NULL), 0);
	cr_assert_eq(dmutex_lock(&fk_m), 0);
	cr_assert_eq(dmutex_fence(&fk_m, &fk_parent_fence), 0);
	cr_assert(dmt_lock_field(&srv, "fk", "token", token, sizeof token));
	cr_assert_eq(lock_pid("fk"), (long long)getpid());
	clients_before = th_redis_clients(&srv);
	cr_assert_gt(clients_before, 0);

	cr_assert_eq(th_sync_init(&fk_checked), 0);
	cr_assert_eq(th_sync_init(&fk_unlocked), 0);
	cr_assert_gt(pid = th_spawn(fork_child, NULL), 0);
	if (th_sync_wait(&fk_checked, 10000))
		cr_assert_fail("child failed its checks: exit %d", th_wait_child(pid, 1000));

	/* The child talked to Redis on a connection of its own (its trylock
	 * left one in its pool), not on the parent's.  (Over etcd the locks
	 * are not in that Redis: the tokens below show it.) */
	fk_clients_before = clients_before;
	cr_assert(dmt_etcd() || th_wait_until(more_clients, NULL, 2000),
			"expected more than %d clients, have %d", clients_before, th_redis_clients(&srv));
	/* The parent's hold is undisturbed: same token, same owner. */
	cr_assert(dmt_lock_field(&srv, "fk", "token", child_token, sizeof child_token));
	cr_assert_str_eq(child_token, token);
	cr_assert_eq(lock_pid("fk"), (long long)getpid());
	cr_assert_eq(dmutex_fence(&fk_m, &fence), 0);
	cr_assert_eq(fence, fk_parent_fence);
	cr_assert_eq(dmt_unlock_answered(&fk_m), 0);
	cr_assert_eq(dmt_lock_exists(&srv, "fk"), 0);

	th_sync_post(&fk_unlocked);
	cr_assert_eq(th_wait_child(pid, 10000), 0);
	redisReply *cr = th_redis_cmd(&srv, "GET fk:child");
	cr_assert(cr && cr->type == REDIS_REPLY_STRING, "the child stored no token");
	snprintf(child_token, sizeof child_token, "%s", cr->str);
	freeReplyObject(cr);
	/* The parent's connections survived the child's use and exit; and
	 * its next tokens are not the child's (the child's trylock took one,
	 * its lock the next: a random pool shared across the fork would give
	 * the parent's second lock below the child's token). */
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(dmutex_lock(&fk_m), 0);
		cr_assert_eq(dmutex_fence(&fk_m, &fence), 0);
		cr_assert_gt(fence, fk_parent_fence + 1);
		cr_assert_eq(dmt_lock_field(&srv, "fk", "token", token, sizeof token), 1);
		cr_assert_str_neq(token, child_token, "the parent's token %d after fork is the child's", i);
		cr_assert_eq(dmutex_unlock(&fk_m), 0);
	}
	dmt_close_mutex(c, &fk_m);
	th_sync_close(&fk_checked);
	th_sync_close(&fk_unlocked);
}

/* A fork while threads of the parent wait for a lock, one on the backend
 * (subscribed to wake-ups) and one locally behind it. */
static dmutex_t fw_busy, fw_free;

struct fw_waiter {
	dmutex_t *m;
	int rc;
	int done;               /* atomic */
};

static void *fw_wait(void *arg)
{
	struct fw_waiter *w = arg;

	w->rc = dmutex_lock(w->m);
	if (!w->rc)
		w->rc = dmutex_unlock(w->m);
	__atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static int fw_subscribed(void *arg)
{
	(void)arg;
	return dmt_backend_waiters(&srv, "busy") == 1;
}

static int fw_child(void *arg)
{
	struct timespec ts;

	(void)arg;
	dmt_die_with_parent(test_pid);
	/* The inherited client works: a free lock, a held one, a timed wait. */
	if (dmutex_lock(&fw_free))
		return 10;
	if (dmutex_unlock(&fw_free))
		return 11;
	if (dmutex_trylock(&fw_busy) != EBUSY)
		return 12;
	dmt_deadline_in(CLOCK_REALTIME, 300, &ts);
	if (dmutex_timedlock(&fw_busy, &ts) != ETIMEDOUT)
		return 13;
	return 0;
}

Test(procs, fork_while_threads_wait_does_not_deadlock, .timeout = 20)
{
	dmutex_client_t *c, *other;
	dmutex_t holder;
	dmutex_attr_t a;
	struct fw_waiter w[2];
	pthread_t tid[2];
	long long t0;
	pid_t pid;

	if (DMT_ASAN_FORK_UNSAFE)
		cr_skip_test("%s", DMT_ASAN_FORK_REASON);
	cr_assert_eq(dmt_open_mutex(&c, &fw_busy, srv.url, "busy", NULL), 0);
	dmutex_attr_init(&a);
	dmutex_attr_setclient(&a, c);
	cr_assert_eq(dmutex_init(&fw_free, "free", &a), 0);
	dmutex_attr_destroy(&a);
	/* Held through a second client, so that the waiters on the first
	 * must wait on the backend. */
	cr_assert_eq(dmt_open_mutex(&other, &holder, srv.url, "busy", NULL), 0);
	cr_assert_eq(dmutex_lock(&holder), 0);

	for (int i = 0; i < 2; i++) {
		w[i] = (struct fw_waiter){ .m = &fw_busy };
		cr_assert_eq(pthread_create(&tid[i], NULL, fw_wait, &w[i]), 0);
		if (!i)
			cr_assert(th_wait_until(fw_subscribed, NULL, 5000), "the first waiter never subscribed");
	}

	t0 = th_now_ms();
	cr_assert_gt(pid = th_spawn(fw_child, NULL), 0);
	cr_assert_eq(th_wait_child(pid, 5000), 0, "child failed or hung");
	fprintf(stderr, "procs: fork child finished in %lld ms\n", th_now_ms() - t0);

	/* The parent's waiters are unharmed and get the lock once it is free. */
	cr_assert_eq(__atomic_load_n(&w[0].done, __ATOMIC_ACQUIRE), 0);
	cr_assert_eq(__atomic_load_n(&w[1].done, __ATOMIC_ACQUIRE), 0);
	cr_assert_eq(dmutex_unlock(&holder), 0);
	for (int i = 0; i < 2; i++) {
		pthread_join(tid[i], NULL);
		cr_assert_eq(w[i].rc, 0, "waiter %d: %d", i, w[i].rc);
	}
	dmt_close_mutex(other, &holder);
	dmutex_destroy(&fw_free);
	dmt_close_mutex(c, &fw_busy);
}

/* ------------------------------------------------------------------ */
/* exit while holding                                                  */
/* ------------------------------------------------------------------ */

static int exit_child(void *arg)
{
	dmutex_client_t *c;
	dmutex_t m, rm;

	(void)arg;
	dmt_die_with_parent(test_pid);
	if (dmt_open_mutex(&c, &m, srv.url, "quitter", NULL) ||
	    dmt_init_mutex(&rm, "quitter-robust", c, &(struct dmt_attr){ .robust = DMUTEX_ROBUST }))
		return 10;
	if (dmutex_lock(&m) || dmutex_lock(&rm))
		return 11;
	/* exit(), not the harness's _exit(): atexit handlers run. */
	exit(0);
}

static int lock_key_gone(void *arg)
{
	(void)arg;
	return dmt_lock_exists(&srv, "quitter") == 0 && dmt_lock_exists(&srv, "quitter-robust") == 0;
}

Test(procs, exit_while_holding_releases_at_once, .timeout = 20)
{
	dmutex_client_t *c;
	dmutex_t m, rm;
	redisReply *r;
	pid_t pid;
	long long t0;

	cr_assert_gt(pid = th_spawn(exit_child, NULL), 0);
	cr_assert_eq(th_wait_child(pid, 10000), 0);
	t0 = th_now_ms();
	/* Far less than the 10 s lease: the exit gave it up. */
	cr_assert(th_wait_until(lock_key_gone, NULL, 500), "lock key still there %lld ms after the exit",
			th_now_ms() - t0);
	/* The robust hold's release says the owner died, for robust lockers;
	 * the other leaves no trace (key layout 3). */
	if (!dmt_etcd()) {
		r = th_redis_cmd(&srv, "HGET dmutex:meta:{quitter-robust} state");
		cr_assert(r && r->type == REDIS_REPLY_STRING);
		cr_assert_str_eq(r->str, "died");
		freeReplyObject(r);
		cr_assert_eq(th_redis_int(&srv, "HEXISTS dmutex:meta:{quitter} state"), 0);
	}
	/* What lockers see, on any backend. */
	cr_assert_eq(dmt_open_mutex(&c, &m, srv.url, "quitter", NULL), 0);
	cr_assert_eq(dmt_init_mutex(&rm, "quitter-robust", c, &(struct dmt_attr){ .robust = DMUTEX_ROBUST }), 0);
	cr_assert_eq(dmutex_trylock(&m), 0);
	cr_assert_eq(dmutex_trylock(&rm), EOWNERDEAD);
	cr_assert_eq(dmutex_consistent(&rm), 0);
	cr_assert_eq(dmutex_unlock(&rm), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	dmutex_destroy(&rm);
	dmt_close_mutex(c, &m);
}

/* A process that exits holding many locks while its server hangs ends
 * them all within one command timeout, not one timeout per lock. */
#define EXIT_MANY 20
static struct th_redis lone;
static struct th_sync many_locked, many_go;

static int exit_many_child(void *arg)
{
	static dmutex_t ms[EXIT_MANY];
	dmutex_client_t *c;
	char url[800], name[32];

	(void)arg;
	dmt_die_with_parent(test_pid);
	/* Over etcd the run's member is the server stopped (its Redis holds
	 * no locks). */
	if (dmt_etcd())
		dmt_url(url, sizeof url, NULL, srv.port, "command_timeout_ms=300&connect_timeout_ms=300");
	else
		th_url_with(url, sizeof url, lone.url, "command_timeout_ms=300&connect_timeout_ms=300");
	if (dmutex_client_open(&c, url))
		return 10;
	for (int i = 0; i < EXIT_MANY; i++) {
		dmutex_attr_t a;
		snprintf(name, sizeof name, "many-%d", i);
		if (dmutex_attr_init(&a) || dmutex_attr_setclient(&a, c) || dmutex_init(&ms[i], name, &a))
			return 11;
		if (dmutex_lock(&ms[i]))
			return 12;
	}
	th_sync_post(&many_locked);
	if (th_sync_wait(&many_go, 10000))
		return 13;
	exit(0);
}

Test(procs, exit_holding_many_with_server_down_is_bounded, .timeout = 30)
{
	long long t0, took;
	pid_t pid;

	if (!dmt_etcd())
		cr_assert_eq(th_redis_start(&lone, NULL), 0);
	cr_assert_eq(th_sync_init(&many_locked), 0);
	cr_assert_eq(th_sync_init(&many_go), 0);
	cr_assert_gt(pid = th_spawn(exit_many_child, NULL), 0);
	cr_assert_eq(th_sync_wait(&many_locked, 10000), 0, "the child did not lock");
	/* Stopped, not gone: every request waits out its timeout. */
	cr_assert_eq(dmt_etcd() ? dmt_etcd_pause(1) : th_redis_pause(&lone), 0);
	t0 = th_now_ms();
	th_sync_post(&many_go);
	cr_assert_eq(th_wait_child(pid, 20000), 0, "child failed or hung");
	took = th_now_ms() - t0;
	fprintf(stderr, "procs: exit with %d holds and no server took %lld ms\n", EXIT_MANY, took);
	/* One 300 ms command timeout for all (was one per hold: 6 s and more). */
	cr_assert_lt(took, 300 * 2 * dmt_slowdown() + 1000, "exit took %lld ms", took);
	if (dmt_etcd()) {
		cr_assert_eq(dmt_etcd_pause(0), 0);
	} else {
		th_redis_resume(&lone);
		th_redis_stop(&lone);
	}
	th_sync_close(&many_locked);
	th_sync_close(&many_go);
}
