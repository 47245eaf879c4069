/*
 * Read-write locks (drwlock_*) against a real redis-server: the error
 * table, readers that really overlap (threads of one process in ONE share),
 * readers and writers across three processes with shared state in Redis
 * that detects a violation, a reader and a writer killed (SIGKILL) while
 * holding it, and a writer that overlapping readers must not starve.
 *
 * Violation detectors are Redis counters: "w" (writers inside), "r"
 * (readers inside) and "n", read-modify-written by every writer.  A writer
 * that sees w != 1 or r != 0, or a reader that sees w != 0, fails.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dmutex.h"
#include "dmt.h"
#include "harness.h"
#include "rw_sections.h"

static struct th_redis srv, srv2;
static pid_t kids[6];

static void srv_up(void)
{
	cr_assert_eq(th_redis_start(&srv, NULL), 0, "redis-server did not start");
	/* The etcd run (DMUTEX_TEST_ETCD): srv.url names an etcd member; the
	 * tests' own counters stay in srv. */
	cr_assert_eq(dmt_backend_up(&srv), 0, "the backend did not start");
}

/* NAME's read shares ('r') or waiting writers' intents ('q'): one per
 * process, in a sorted set on Redis, keys over etcd. */
static long long rw_count(const char *name, char kind)
{
	char part[3] = { kind, '/', 0 };

	if (dmt_etcd())
		return dmt_etcd_count("r", name, part);
	return th_redis_int(&srv, "ZCARD dmutex:rw%s:{%s}", kind == 'r' ? "r" : "q", name);
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
	if (srv2.pid)
		th_redis_stop(&srv2);
}

TestSuite(rwlock, .init = srv_up, .fini = srv_down, .timeout = 60);

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

/* One call on another thread: its result. */
enum { RD, TRYRD, WR, TRYWR, UNLOCK, TIMEDWR };
struct call { drwlock_t *rw; int op; long ms; int result; };

static void *call_main(void *arg)
{
	struct call *c = arg;
	struct timespec at = in_ms(CLOCK_REALTIME, c->ms);

	switch (c->op) {
	case RD: c->result = drwlock_rdlock(c->rw); break;
	case TRYRD: c->result = drwlock_tryrdlock(c->rw); break;
	case WR: c->result = drwlock_wrlock(c->rw); break;
	case TRYWR: c->result = drwlock_trywrlock(c->rw); break;
	case TIMEDWR: c->result = drwlock_timedwrlock(c->rw, &at); break;
	default: c->result = drwlock_unlock(c->rw); break;
	}
	return NULL;
}

static int on_thread(drwlock_t *rw, int op, long ms)
{
	struct call c = { rw, op, ms, -1 };
	pthread_t t;

	cr_assert_eq(pthread_create(&t, NULL, call_main, &c), 0);
	pthread_join(t, NULL);
	return c.result;
}

/* A writer's token, the state hash lost between two writers of the same
 * millisecond (evicted, flushed): still strictly greater (api's
 * fence_tokens_differ_when_the_counter_is_lost_within_a_millisecond, for
 * read-write locks). */
Test(rwlock, writer_tokens_differ_when_the_state_is_lost_within_a_millisecond)
{
	dmutex_client_t *c;
	dmutex_attr_t a;
	drwlock_t rw;
	uint64_t fence, last = 0;

	DMT_REDIS_STATE("deletes the lock's state hash");
	DMT_SINGLE_NODE();
	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	cr_assert_eq(drwlock_init(&rw, "lostrw", &a), 0);
	for (int i = 0; i < 300; i++) {
		cr_assert_eq(drwlock_wrlock(&rw), 0);
		cr_assert_eq(drwlock_fence(&rw, &fence), 0);
		cr_assert_gt(fence, last, "hold %d: token %llu after %llu", i, (unsigned long long)fence,
				(unsigned long long)last);
		last = fence;
		cr_assert_geq(th_redis_int(&srv, "DEL dmutex:rw:{lostrw}"), 0);
		drwlock_unlock(&rw);    /* the hold was lost with the hash */
	}
	cr_assert_eq(drwlock_destroy(&rw), 0);
	dmutex_attr_destroy(&a);
	cr_assert_eq(dmutex_client_close(c), 0);
}

Test(rwlock, error_table)
{
	dmutex_client_t *c;
	dmutex_attr_t a;
	drwlock_t rw, other;
	struct timespec past = { 0, 0 }, bad = { 0, 1000000000L };
	uint64_t f1 = 0, f2 = 0;

	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	cr_assert_eq(drwlock_init(NULL, "e", &a), EINVAL);
	cr_assert_eq(drwlock_init(&rw, NULL, &a), EINVAL);
	cr_assert_eq(drwlock_init(&rw, "", &a), EINVAL);
	cr_assert_eq(dmutex_attr_settype(&a, DMUTEX_RECURSIVE), 0);
	cr_assert_eq(drwlock_init(&rw, "e", &a), EINVAL, "a rwlock has no mutex type");
	cr_assert_eq(dmutex_attr_settype(&a, DMUTEX_DEFAULT), 0);
	cr_assert_eq(dmutex_attr_setrobust(&a, DMUTEX_ROBUST), 0);
	cr_assert_eq(drwlock_init(&rw, "e", &a), EINVAL, "a rwlock is not robust");
	cr_assert_eq(dmutex_attr_setrobust(&a, DMUTEX_STALLED), 0);
	cr_assert_eq(drwlock_rdlock(NULL), EINVAL);
	cr_assert_eq(drwlock_wrlock(NULL), EINVAL);
	cr_assert_eq(drwlock_unlock(NULL), EINVAL);
	cr_assert_eq(drwlock_destroy(NULL), EINVAL);

	cr_assert_eq(drwlock_init(&rw, "e", &a), 0);
	cr_assert_eq(drwlock_init(&other, "e", &a), 0);
	cr_assert_eq(drwlock_unlock(&rw), EPERM, "unlock of a free lock");
	cr_assert_eq(drwlock_fence(&rw, &f1), EPERM);

	/* Writer. */
	cr_assert_eq(drwlock_wrlock(&rw), 0);
	cr_assert_eq(drwlock_fence(&rw, NULL), EINVAL);
	cr_assert_eq(drwlock_fence(&rw, &f1), 0);
	cr_assert_eq(drwlock_wrlock(&rw), EDEADLK, "relock by the writer");
	cr_assert_eq(drwlock_wrlock(&other), EDEADLK, "another object, the same lock");
	cr_assert_eq(drwlock_trywrlock(&rw), EBUSY);
	cr_assert_eq(drwlock_rdlock(&rw), EDEADLK, "rdlock by the writer");
	cr_assert_eq(drwlock_tryrdlock(&rw), EBUSY);
	cr_assert_eq(drwlock_timedwrlock(&rw, &bad), EINVAL, "it would block: the bad deadline first");
	cr_assert_eq(drwlock_clockrdlock(&rw, CLOCK_PROCESS_CPUTIME_ID, &past), EINVAL);
	cr_assert_eq(drwlock_destroy(&rw), EBUSY);
	cr_assert_eq(on_thread(&rw, UNLOCK, 0), EPERM, "unlock by a non-holder");
	cr_assert_eq(on_thread(&rw, TRYRD, 0), EBUSY);
	cr_assert_eq(on_thread(&rw, TRYWR, 0), EBUSY);
	cr_assert_eq(on_thread(&rw, TIMEDWR, 100), ETIMEDOUT);
	cr_assert_eq(rw_count("e", 'q'), 0, "a writer that gave up left no intent");
	cr_assert_eq(drwlock_unlock(&rw), 0);
	cr_assert_eq(drwlock_unlock(&rw), EPERM);
	cr_assert_eq(drwlock_wrlock(&rw), 0);
	cr_assert_eq(drwlock_fence(&rw, &f2), 0);
	cr_assert_gt(f2, f1, "fencing tokens increase");
	cr_assert_eq(drwlock_unlock(&rw), 0);

	/* Reader, recursively. */
	cr_assert_eq(drwlock_timedrdlock(&rw, &bad), 0, "a free lock: the deadline is not looked at");
	cr_assert_eq(drwlock_rdlock(&rw), 0);
	cr_assert_eq(drwlock_tryrdlock(&other), 0);
	cr_assert_eq(drwlock_fence(&rw, &f1), EPERM, "readers have no fencing token");
	cr_assert_eq(drwlock_wrlock(&rw), EDEADLK, "no upgrade");
	cr_assert_eq(drwlock_trywrlock(&rw), EBUSY);
	cr_assert_eq(drwlock_timedwrlock(&rw, &past), EDEADLK);
	cr_assert_eq(on_thread(&rw, TRYWR, 0), EBUSY);
	cr_assert_eq(on_thread(&rw, TIMEDWR, 100), ETIMEDOUT);
	cr_assert_eq(on_thread(&rw, UNLOCK, 0), EPERM);
	cr_assert_eq(rw_count("e", 'r'), 1);
	cr_assert_eq(drwlock_unlock(&rw), 0);
	cr_assert_eq(drwlock_unlock(&other), 0);
	cr_assert_eq(rw_count("e", 'r'), 1, "one level left");
	cr_assert_eq(drwlock_unlock(&rw), 0);
	cr_assert_eq(rw_count("e", 'r'), 0, "the last unlock gives the share up");
	cr_assert_eq(drwlock_unlock(&rw), EPERM);

	/* The client is not closed under a rwlock. */
	cr_assert_eq(dmutex_client_close(c), EBUSY);
	cr_assert_eq(drwlock_destroy(&other), 0);
	cr_assert_eq(drwlock_destroy(&rw), 0);
	cr_assert_eq(drwlock_destroy(&rw), EINVAL);
	cr_assert_eq(drwlock_rdlock(&rw), EINVAL);

	/* One master only. */
	cr_assert_eq(th_redis_start(&srv2, NULL), 0);
	if (!dmt_etcd()) {
		dmutex_client_t *rl;
		dmutex_attr_t ra;
		char url[1300];

		snprintf(url, sizeof url, "%s,%s", srv.url, srv2.url);
		cr_assert_eq(dmutex_client_open(&rl, url), 0);
		cr_assert_eq(dmutex_attr_init(&ra), 0);
		cr_assert_eq(dmutex_attr_setclient(&ra, rl), 0);
		cr_assert_eq(drwlock_init(&rw, "e", &ra), ENOTSUP);
		cr_assert_eq(dmutex_client_close(rl), 0);
	}
	cr_assert_eq(dmutex_client_close(c), 0);
}

static drwlock_t stat_rw = DRWLOCK_INITIALIZER("static-rw");

Test(rwlock, static_initializer)
{
	char env[700];

	snprintf(env, sizeof env, "%s", srv.url);
	setenv("DMUTEX_URL", env, 1);
	cr_assert_eq(drwlock_rdlock(&stat_rw), 0);
	cr_assert_eq(drwlock_unlock(&stat_rw), 0);
	cr_assert_eq(drwlock_wrlock(&stat_rw), 0);
	cr_assert_eq(drwlock_unlock(&stat_rw), 0);
	cr_assert_eq(drwlock_destroy(&stat_rw), 0);
}

/* ---- readers overlap; threads of a process hold one share ------------- */

#define NTHREADS 4

struct overlap { drwlock_t *rw; int want; int result; };

static int inside_at_least(void *arg)
{
	return th_redis_int(&srv, "GET inside") >= *(int *)arg;
}

/* The test has looked at the shares: readers may leave. */
static int let_go(void *arg)
{
	(void)arg;
	return th_redis_int(&srv, "EXISTS go") == 1;
}

static void *overlap_thread(void *arg)
{
	struct overlap *o = arg;

	o->result = 1;
	if (drwlock_rdlock(o->rw))
		return NULL;
	th_redis_int(&srv, "INCR inside");
	/* Every reader must be inside at once: readers that excluded each
	 * other would never all get there. */
	if (th_wait_until(inside_at_least, &o->want, 10000) && th_wait_until(let_go, NULL, 10000))
		o->result = 0;
	drwlock_unlock(o->rw);
	return NULL;
}

static int overlap_proc(void *arg)
{
	dmutex_client_t *c;
	dmutex_attr_t a;
	drwlock_t rw;
	pthread_t t[NTHREADS];
	struct overlap o[NTHREADS];
	int bad = 0;

	if (dmutex_client_open(&c, srv.url) || dmutex_attr_init(&a) || dmutex_attr_setclient(&a, c) ||
			drwlock_init(&rw, "overlap", &a))
		return 10;
	for (int i = 0; i < NTHREADS; i++) {
		o[i] = (struct overlap){ &rw, *(int *)arg, 1 };
		pthread_create(&t[i], NULL, overlap_thread, &o[i]);
	}
	for (int i = 0; i < NTHREADS; i++) {
		pthread_join(t[i], NULL);
		bad |= o[i].result;
	}
	drwlock_destroy(&rw);
	dmutex_client_close(c);
	return bad;
}

Test(rwlock, readers_overlap_one_share_per_process)
{
	int want = 3 * NTHREADS;

	th_redis_int(&srv, "DEL inside go");
	for (int i = 0; i < 3; i++)
		cr_assert_gt(kids[i] = th_spawn(overlap_proc, &want), 0);
	cr_assert(th_wait_until(inside_at_least, &want, 20000), "readers did not all get in together");
	cr_assert_eq(rw_count("overlap", 'r'), 3,
			"%d threads in each of 3 processes: 3 shares", NTHREADS);
	th_redis_int(&srv, "SET go 1");
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(th_wait_child(kids[i], 20000), 0, "process %d: a reader failed", i);
		kids[i] = 0;
	}
	cr_assert_eq(rw_count("overlap", 'r'), 0);
}

/* ---- three processes, readers and writers ------------------------------ */

#define ROUNDS 30

static int mixed_proc(void *arg)
{
	dmutex_client_t *c;
	dmutex_attr_t a;
	drwlock_t rw;
	int seed = *(int *)arg, bad = 0;

	if (dmutex_client_open(&c, srv.url) || dmutex_attr_init(&a) || dmutex_attr_setclient(&a, c) ||
			drwlock_init(&rw, "mixed", &a))
		return 10;
	for (int i = 0; i < ROUNDS; i++) {
		if ((i + seed) % 3 == 0) {
			if (drwlock_wrlock(&rw))
				return 11;
			bad |= th_rw_write_section(&srv);
		} else {
			if (drwlock_rdlock(&rw))
				return 12;
			bad |= th_rw_read_section(&srv);
		}
		if (drwlock_unlock(&rw))
			return 13;
	}
	drwlock_destroy(&rw);
	dmutex_client_close(c);
	return bad;
}

Test(rwlock, three_processes_no_violation)
{
	int seeds[3] = { 0, 1, 2 };
	long long writes = 0;

	th_redis_int(&srv, "MSET w 0 r 0 n 0");
	for (int i = 0; i < 3; i++) {
		cr_assert_gt(kids[i] = th_spawn(mixed_proc, &seeds[i]), 0);
		for (int k = 0; k < ROUNDS; k++)
			writes += (k + seeds[i]) % 3 == 0;
	}
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(th_wait_child(kids[i], 50000), 0, "process %d failed or saw a violation", i);
		kids[i] = 0;
	}
	cr_assert_eq(th_redis_int(&srv, "GET n"), writes, "a write was lost");
}

/* ---- a holder killed ------------------------------------------------------ */

/* 1 s, 3 s under the sanitizers: the bounds below are in leases (a dead
 * holder's lock is free within 1.5 of them, a writer gets in within 4),
 * and the slack that is not a lease, scheduling on a loaded 2-core
 * machine, is ~3x longer under ASan. */
#define LEASE (1000 * dmt_slowdown())

/* srv's URL with lease_ms=LEASE. */
static void
lease_url(char *buf, size_t len)
{
	char opt[64];

	snprintf(opt, sizeof opt, "lease_ms=%d", LEASE);
	th_url_with(buf, len, srv.url, opt);
}

static int hold_and_hang(void *arg)
{
	dmutex_client_t *c;
	dmutex_attr_t a;
	drwlock_t rw;
	char url[700];
	struct th_sync *sy = ((void **)arg)[0];
	int write = *(int *)((void **)arg)[1];

	lease_url(url, sizeof url);
	if (dmutex_client_open(&c, url) || dmutex_attr_init(&a) || dmutex_attr_setclient(&a, c) ||
			drwlock_init(&rw, "crash", &a) || (write ? drwlock_wrlock(&rw) : drwlock_rdlock(&rw)))
		return 10;
	th_sync_post(sy);
	pause();
	return 0;
}

static void killed_holder(int write)
{
	dmutex_client_t *c;
	dmutex_attr_t a;
	drwlock_t rw;
	struct th_sync sy;
	void *args[2] = { &sy, &write };
	char url[700];
	long long t0, waited;

	cr_assert_eq(th_sync_init(&sy), 0);
	lease_url(url, sizeof url);
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	cr_assert_eq(drwlock_init(&rw, "crash", &a), 0);
	cr_assert_gt(kids[0] = th_spawn(hold_and_hang, args), 0);
	cr_assert_eq(th_sync_wait(&sy, 10000), 0);
	/* Let the child renew once or twice: the lease then runs from its
	 * last renewal, not from its acquire. */
	cr_assert_eq(drwlock_trywrlock(&rw), EBUSY);
	kill(kids[0], SIGKILL);
	cr_assert_eq(th_wait_child(kids[0], 5000), 128 + SIGKILL);
	kids[0] = 0;
	t0 = th_now_ms();
	cr_assert_eq(write ? drwlock_rdlock(&rw) : drwlock_wrlock(&rw), 0);
	waited = th_now_ms() - t0;
	/* Over etcd (README "etcd") the lease granted is whole seconds, 2 s
	 * at least, its etcd TTL a second longer, and etcd's lessor looks for
	 * ended leases every 500 ms. */
	long long granted = LEASE < 2000 ? 2000 : (LEASE + 999) / 1000 * 1000;
	long long bound = dmt_etcd() ? granted + 1000 + 500 + LEASE / 2 : LEASE + LEASE / 2;
	cr_assert_leq(waited, bound, "waited %lld ms for a dead %s with a %d ms lease",
			waited, write ? "writer" : "reader", LEASE);
	cr_assert_eq(drwlock_unlock(&rw), 0);
	cr_assert_eq(drwlock_destroy(&rw), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
	th_sync_close(&sy);
}

Test(rwlock, killed_reader_loses_its_share_at_lease_end)
{
	killed_holder(0);
}

Test(rwlock, killed_writer_loses_the_lock_at_lease_end)
{
	killed_holder(1);
}

/* ---- writer preference ------------------------------------------------- */

struct reader_loop { drwlock_t *rw; volatile int *stop; int result; };

static void *reader_loop_main(void *arg)
{
	struct reader_loop *l = arg;
	struct timespec hold = { 0, 40 * 1000000L };

	l->result = 0;
	while (!*l->stop) {
		if (drwlock_rdlock(l->rw)) {
			l->result = 1;
			break;
		}
		nanosleep(&hold, NULL);     /* the read section's work */
		drwlock_unlock(l->rw);
	}
	return NULL;
}

static volatile sig_atomic_t stop_readers;

static void on_term(int sig)
{
	(void)sig;
	stop_readers = 1;
}

/* Two threads whose read sections overlap, so the process's share is never
 * given up by itself, until SIGTERM. */
static int reader_proc(void *arg)
{
	dmutex_client_t *c;
	dmutex_attr_t a;
	drwlock_t rw;
	pthread_t t[2];
	struct reader_loop l[2];
	volatile int stop = 0;
	char url[700];

	(void)arg;
	signal(SIGTERM, on_term);
	lease_url(url, sizeof url);
	if (dmutex_client_open(&c, url) || dmutex_attr_init(&a) || dmutex_attr_setclient(&a, c) ||
			drwlock_init(&rw, "starve", &a))
		return 10;
	for (int i = 0; i < 2; i++) {
		l[i] = (struct reader_loop){ &rw, &stop, 0 };
		pthread_create(&t[i], NULL, reader_loop_main, &l[i]);
		nanosleep(&(struct timespec){ 0, 20 * 1000000L }, NULL);
	}
	while (!stop_readers)
		pause();
	stop = 1;
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	drwlock_destroy(&rw);
	dmutex_client_close(c);
	return l[0].result | l[1].result;
}

static int two_shares(void *arg)
{
	(void)arg;
	return rw_count("starve", 'r') == 2;
}

Test(rwlock, overlapping_readers_do_not_starve_a_writer)
{
	dmutex_client_t *c;
	dmutex_attr_t a;
	drwlock_t rw;
	char url[700];
	struct timespec at;
	long long t0, waited;

	for (int i = 0; i < 2; i++)
		cr_assert_gt(kids[i] = th_spawn(reader_proc, NULL), 0);
	cr_assert(th_wait_until(two_shares, NULL, 10000), "the readers never overlapped");
	lease_url(url, sizeof url);
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	cr_assert_eq(drwlock_init(&rw, "starve", &a), 0);
	cr_assert_eq(drwlock_tryrdlock(&rw), 0, "readers share");
	cr_assert_eq(drwlock_unlock(&rw), 0);
	t0 = th_now_ms();
	/* Readers renew every third of a lease and then stop letting new
	 * threads in; the last one out lets the writer in. */
	at = in_ms(CLOCK_REALTIME, 4 * LEASE);
	cr_assert_eq(drwlock_timedwrlock(&rw, &at), 0, "the writer starved");
	waited = th_now_ms() - t0;
	cr_assert_eq(rw_count("starve", 'r'), 0);
	cr_assert_eq(drwlock_unlock(&rw), 0);
	cr_log_info("writer waited %lld ms under overlapping readers (lease %d ms)", waited, LEASE);
	for (int i = 0; i < 2; i++) {
		kill(kids[i], SIGTERM);
		cr_assert_eq(th_wait_child(kids[i], 10000), 0, "reader process %d failed", i);
		kids[i] = 0;
	}
	cr_assert_eq(drwlock_destroy(&rw), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/* ---- wake-ups ----------------------------------------------------------- */

/* A writer in another process holds with a 60 s lease; it unlocks once this
 * process's reader is subscribed and waiting.  The reader must wake on the
 * release's message ("w"), not at the end of the lease it was told to wait
 * for.  (Cached leases once made every waiter drop a "w": each rwlock wait
 * then lasted until the holder's lease ran out.) */
static int
writer_until_reader_waits(void *arg)
{
	dmutex_client_t *c;
	dmutex_attr_t a;
	drwlock_t rw;

	(void)arg;
	if (dmutex_client_open(&c, srv.url) || dmutex_attr_init(&a) || dmutex_attr_setclient(&a, c) ||
			dmutex_attr_setlease(&a, 60000) || drwlock_init(&rw, "wake", &a) || drwlock_wrlock(&rw))
		return 10;
	th_redis_int(&srv, "SET held 1");
	for (int64_t end = th_now_ms() + 10000;
	     th_numsub(th_redis_cmd(&srv, "PUBSUB NUMSUB dmutex:rwwake:{wake}")) < 1;)
		if (th_now_ms() > end)
			return 11;
		else
			poll(NULL, 0, 5);
	/* Subscribed is not yet asleep: its first attempt after subscribing
	 * must see us still holding, so wait a little past it. */
	poll(NULL, 0, 100);
	th_redis_int(&srv, "SET released %lld", th_now_ms());
	if (drwlock_unlock(&rw) || drwlock_destroy(&rw) || dmutex_client_close(c))
		return 12;
	return 0;
}

Test(rwlock, a_waiting_reader_wakes_at_the_writers_release)
{
	dmutex_client_t *c;
	dmutex_attr_t a;
	drwlock_t rw;
	long long got;
	pid_t kid;

	DMT_REDIS_STATE("the wake channel's subscribers");
	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	cr_assert_eq(drwlock_init(&rw, "wake", &a), 0);
	kids[0] = kid = th_spawn(writer_until_reader_waits, NULL);
	cr_assert_gt(kid, 0);
	for (int64_t end = th_now_ms() + 10000; th_redis_int(&srv, "GET held") != 1;) {
		cr_assert_lt(th_now_ms(), end, "the writer never held");
		poll(NULL, 0, 5);
	}
	cr_assert_eq(drwlock_rdlock(&rw), 0);
	got = th_now_ms();
	cr_assert_eq(th_wait_child(kid, 10000), 0);
	kids[0] = 0;
	/* Woken by the message: well within a second even under a sanitizer,
	 * where the lease would have kept it 60 s. */
	cr_assert_lt(got - th_redis_int(&srv, "GET released"), 3000,
			"the reader got the lock %lld ms after the release",
			got - th_redis_int(&srv, "GET released"));
	cr_assert_eq(drwlock_unlock(&rw), 0);
	cr_assert_eq(drwlock_destroy(&rw), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/* ---- a writer elsewhere that gave up ------------------------------------ */

static void *timedwr_main(void *arg)
{
	call_main(arg);
	return NULL;
}

/* A reader thread of ours: tries to read (and lets go) until it is held
 * back (EBUSY) or ms pass; or, timed, waits up to ms to read, then lets
 * go. */
struct probe { drwlock_t *rw; int timed; long ms; int busy, rc, unlock_rc; long long waited; };

static void *probe_main(void *arg)
{
	struct probe *p = arg;
	long long t0 = th_now_ms();

	if (p->timed) {
		struct timespec at = in_ms(CLOCK_REALTIME, p->ms);
		p->rc = drwlock_timedrdlock(p->rw, &at);
		p->waited = th_now_ms() - t0;
		p->unlock_rc = p->rc ? 0 : drwlock_unlock(p->rw);
		return NULL;
	}
	while (!p->busy && th_now_ms() - t0 < p->ms) {
		p->rc = drwlock_tryrdlock(p->rw);
		p->busy = p->rc == EBUSY;
		if (!p->rc && (p->unlock_rc = drwlock_unlock(p->rw)))
			break;
		if (!p->busy)
			poll(NULL, 0, 20);
	}
	return NULL;
}

static struct probe run_probe(drwlock_t *rw, int timed, long ms)
{
	struct probe p = { .rw = rw, .timed = timed, .ms = ms, .rc = -1 };
	pthread_t t;

	cr_assert_eq(pthread_create(&t, NULL, probe_main, &p), 0);
	pthread_join(t, NULL);
	return p;
}

/*
 * A writer in another process that waited a while and gave up (a timed
 * wrlock) holds this process's new readers back for a renewal at most:
 * the share's next renewal, finding no writer waiting any more, lets them
 * join it again.  Before, the first renewal that saw the writer waiting
 * kept every new reader of the process out until the share ended, with
 * no writer anywhere: a reader thread that waits for another reader of
 * its own process (work handed between them) never got in.
 */
Test(rwlock, a_writer_that_gave_up_holds_no_reader_back)
{
	dmutex_client_t *c, *o;
	dmutex_attr_t a;
	drwlock_t rw, orw;
	struct call wr;
	struct probe p;
	pthread_t t;

	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	cr_assert_eq(dmutex_client_open(&o, srv.url), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	/* Renewed every 300 ms (more under a sanitizer). */
	cr_assert_eq(dmutex_attr_setlease(&a, 900 * dmt_slowdown()), 0);
	cr_assert_eq(drwlock_init(&rw, "gaveup", &a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, o), 0);
	cr_assert_eq(drwlock_init(&orw, "gaveup", &a), 0);
	cr_assert_eq(dmutex_attr_destroy(&a), 0);

	cr_assert_eq(drwlock_rdlock(&rw), 0);
	/* The other process's writer waits, then gives up. */
	wr = (struct call){ &orw, TIMEDWR, 2500L * dmt_slowdown(), -1 };
	cr_assert_eq(pthread_create(&t, NULL, timedwr_main, &wr), 0);
	/* While it waits, a renewal learns of it: new readers of ours stay
	 * out (writers are preferred). */
	p = run_probe(&rw, 0, 2000L * dmt_slowdown());
	pthread_join(t, NULL);
	cr_assert_eq(p.unlock_rc, 0);
	cr_assert(p.busy, "no reader was held back while the writer waited (%s): the test proves nothing",
			dmutex_strerror(p.rc));
	cr_assert_eq(wr.result, ETIMEDOUT, "the writer: %s", dmutex_strerror(wr.result));
	for (int64_t end = th_now_ms() + 5000; rw_count("gaveup", 'q') != 0;) {
		cr_assert_lt(th_now_ms(), end, "the writer's intent outlived its wait");
		poll(NULL, 0, 5);
	}

	/* No writer anywhere now: a new reader gets in within a renewal. */
	p = run_probe(&rw, 1, 3000L * dmt_slowdown());
	cr_assert_eq(p.rc, 0, "a new reader, with no writer waiting any more: %s after %lld ms",
			dmutex_strerror(p.rc), p.waited);
	cr_assert_eq(p.unlock_rc, 0);
	cr_log_info("a new reader got in %lld ms after the writer gave up", p.waited);
	cr_assert_eq(drwlock_unlock(&rw), 0);
	cr_assert_eq(drwlock_destroy(&orw), 0);
	cr_assert_eq(drwlock_destroy(&rw), 0);
	cr_assert_eq(dmutex_client_close(o), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/* ---- a foreign value on one lock's keys --------------------------------- */

static atomic_int foreign_lost[2];

/* The score of NAME's only read share (its lease's end, server ms); -1 if
 * none. */
static long long share_score(const char *name)
{
	redisReply *r = th_redis_cmd(&srv, "ZRANGE dmutex:rwr:{%s} 0 0 WITHSCORES", name);
	long long v = -1;

	if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING)
		v = strtoll(r->element[1]->str, NULL, 10);
	if (r)
		freeReplyObject(r);
	return v;
}

/*
 * One client reads two read-write locks; somebody writes a string where
 * the second one's waiting writers are kept.  The renewal script, one call
 * for every hold of the client, failed as a whole on that key (WRONGTYPE),
 * so both holds went unrenewed and were reported lost, though both shares
 * were sound.  Now the bad key is that lock's alone to suffer: both shares
 * are renewed, neither is reported lost.
 */
Test(rwlock, a_foreign_value_on_one_locks_keys_fails_no_other_renewal)
{
	dmutex_client_t *c;
	dmutex_attr_t a;
	drwlock_t rw[2];
	const char *name[2] = { "foreign-a", "foreign-b" };
	long long s0;

	DMT_REDIS_STATE("writes a foreign value on a read-write lock's key");
	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	for (int i = 0; i < 2; i++) {
		atomic_store(&foreign_lost[i], 0);
		cr_assert_eq(dmutex_attr_init(&a), 0);
		cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
		/* Renewed every 300 ms (more under a sanitizer). */
		cr_assert_eq(dmutex_attr_setlease(&a, 900 * dmt_slowdown()), 0);
		cr_assert_eq(dmutex_attr_setonlost(&a, dmt_count_lost, &foreign_lost[i]), 0);
		cr_assert_eq(drwlock_init(&rw[i], name[i], &a), 0);
		cr_assert_eq(dmutex_attr_destroy(&a), 0);
		cr_assert_eq(drwlock_rdlock(&rw[i]), 0);
	}
	th_redis_int(&srv, "SET dmutex:rwq:{foreign-b} junk");
	/* Two renewals since: the first share's lease end moved on by two
	 * renewal intervals (a sound share is renewed; one that was not is
	 * gone from the set when it expires). */
	s0 = share_score(name[0]);
	cr_assert_gt(s0, 0);
	for (int64_t end = th_now_ms() + 5000L * dmt_slowdown(); share_score(name[0]) < s0 + 500 * dmt_slowdown();) {
		cr_assert_eq(atomic_load(&foreign_lost[0]), 0, "the first hold was reported lost");
		cr_assert_lt(th_now_ms(), end, "the first share was not renewed (score %lld, %lld before)",
				share_score(name[0]), s0);
		poll(NULL, 0, 10);
	}
	cr_assert_eq(atomic_load(&foreign_lost[0]), 0, "the first hold was reported lost");
	cr_assert_eq(atomic_load(&foreign_lost[1]), 0, "the second hold, whose share is sound, was reported lost");
	cr_assert_eq(drwlock_unlock(&rw[0]), 0);
	cr_assert_eq(drwlock_unlock(&rw[1]), 0);
	/* The foreign value is untouched. */
	redisReply *r = th_redis_cmd(&srv, "GET dmutex:rwq:{foreign-b}");
	cr_assert(r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "junk"), "the foreign value changed");
	freeReplyObject(r);
	th_redis_int(&srv, "DEL dmutex:rwq:{foreign-b}");
	for (int i = 0; i < 2; i++)
		cr_assert_eq(drwlock_destroy(&rw[i]), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/* ---- a lost share ------------------------------------------------------ */

static atomic_int share_lost;

/*
 * A reader thread of ours reads on while its share is lost (the key is
 * deleted): its process is told once (onlost).  Before, every new reader
 * thread of the process then waited for that reader to unlock, though
 * the lock was free everywhere, and a tryrdlock said EBUSY with no writer
 * anywhere.  Now the lost share's readers are set aside: a new reader
 * takes a new share at once, while the old reader's calls still say the
 * share is lost (a recursive read and its unlock: ENOLCK) and a writer of
 * ours still waits for it.
 */
Test(rwlock, a_lost_share_holds_no_new_reader_back)
{
	dmutex_client_t *c;
	dmutex_attr_t a;
	drwlock_t rw;
	struct probe p;

	DMT_REDIS_STATE("deletes a read share's key");
	atomic_store(&share_lost, 0);
	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	/* Renewed every 300 ms (more under a sanitizer). */
	cr_assert_eq(dmutex_attr_setlease(&a, 900 * dmt_slowdown()), 0);
	cr_assert_eq(dmutex_attr_setonlost(&a, dmt_count_lost, &share_lost), 0);
	cr_assert_eq(drwlock_init(&rw, "lostshare", &a), 0);
	cr_assert_eq(dmutex_attr_destroy(&a), 0);

	cr_assert_eq(drwlock_rdlock(&rw), 0);
	th_redis_int(&srv, "DEL dmutex:rwr:{lostshare}");
	cr_assert(th_wait_until(dmt_lost_once, &share_lost, 5000 * dmt_slowdown()),
			"the share's loss was never reported");

	/* A new reader gets in: a new share, beside the old reader. */
	p = run_probe(&rw, 1, 3000L * dmt_slowdown());
	cr_assert_eq(p.rc, 0, "a new reader after the share was lost: %s after %lld ms",
			dmutex_strerror(p.rc), p.waited);
	cr_assert_eq(p.unlock_rc, 0);
	cr_assert_eq(on_thread(&rw, TRYRD, 0), 0, "tryrdlock, no writer anywhere");
	/* (That thread ended reading: its share was given back.) */
	cr_assert_eq(rw_count("lostshare", 'r'), 0, "a share outlived its only reader");

	/* The old reader: its share is lost, whatever new ones come. */
	cr_assert_eq(drwlock_rdlock(&rw), ENOLCK, "a recursive read of the lost share");
	cr_assert_eq(drwlock_trywrlock(&rw), EBUSY, "an upgrade from the lost share");
	/* A writer of ours waits for it as for any reader. */
	cr_assert_eq(on_thread(&rw, TRYWR, 0), EBUSY, "a writer beside a reader of the lost share");
	cr_assert_eq(drwlock_unlock(&rw), ENOLCK);
	cr_assert_eq(drwlock_unlock(&rw), EPERM);
	cr_assert_eq(atomic_load(&share_lost), 1, "the loss was reported more than once");

	cr_assert_eq(drwlock_trywrlock(&rw), 0, "a writer once the old reader is out");
	cr_assert_eq(drwlock_unlock(&rw), 0);
	cr_assert_eq(drwlock_destroy(&rw), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/* ---- a tryrdlock while another reader of ours asks ---------------------- */

struct asker { drwlock_t *rw; int rc, unlock_rc; atomic_int go; };

/* Reads until told to let go. */
static void *asker_main(void *arg)
{
	struct asker *a = arg;

	a->rc = drwlock_rdlock(a->rw);
	while (!a->rc && !atomic_load(&a->go))
		poll(NULL, 0, 2);
	a->unlock_rc = a->rc ? -1 : drwlock_unlock(a->rw);
	return NULL;
}

static long long blocked_before;

/* A client of its own on srv (opts: URL options, or NULL) and rw on it,
 * for a test that holds its requests back. */
static void rw_open(dmutex_client_t **c, drwlock_t *rw, const char *name, const char *opts)
{
	dmutex_attr_t a;
	char url[512];

	cr_assert_eq(th_url_with(url, sizeof url, srv.url, opts), 0);
	cr_assert_eq(dmutex_client_open(c, url), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, *c), 0);
	cr_assert_eq(drwlock_init(rw, name, &a), 0);
	cr_assert_eq(dmutex_attr_destroy(&a), 0);
}

static int one_more_blocked(void *arg)
{
	(void)arg;
	return dmt_blocked_clients(&srv) > blocked_before;
}

/*
 * A thread's tryrdlock while another thread of the process is asking
 * Redis for the read share (its request held back by CLIENT PAUSE), with
 * no writer anywhere: it joins that share once it is granted.  Before, it
 * said EBUSY at once, as POSIX has it only when a writer holds the lock or
 * waits for it.
 */
Test(rwlock, a_tryrdlock_waits_for_the_share_another_reader_asks_for)
{
	dmutex_client_t *c;
	drwlock_t rw;
	struct asker k = { .rw = &rw, .rc = -1, .unlock_rc = -1 };
	pthread_t t;
	int rc;

	DMT_REDIS_STATE("holds a request back with CLIENT PAUSE");
	rw_open(&c, &rw, "tryasking", NULL);
	/* The connection made before the pause: only the request waits. */
	cr_assert_eq(drwlock_rdlock(&rw), 0);
	cr_assert_eq(drwlock_unlock(&rw), 0);

	blocked_before = dmt_blocked_clients(&srv);
	cr_assert_geq(blocked_before, 0);
	th_redis_int(&srv, "CLIENT PAUSE 1500 WRITE");
	cr_assert_eq(pthread_create(&t, NULL, asker_main, &k), 0);
	cr_assert(th_wait_until(one_more_blocked, NULL, 3000), "the reader's request was never held back");
	rc = drwlock_tryrdlock(&rw);
	atomic_store(&k.go, 1);
	pthread_join(t, NULL);
	cr_assert_eq(k.rc, 0, "the asking reader: %s", dmutex_strerror(k.rc));
	cr_assert_eq(rc, 0, "tryrdlock while another reader of ours asked, no writer anywhere: %s",
			dmutex_strerror(rc));
	cr_assert_eq(drwlock_unlock(&rw), 0);
	cr_assert_eq(k.unlock_rc, 0);
	cr_assert_eq(rw_count("tryasking", 'r'), 0, "a share outlived its readers");
	cr_assert_eq(drwlock_destroy(&rw), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

static int share_is(void *arg)
{
	return rw_count("trygiven", 'r') == *(long long *)arg;
}

/*
 * A thread's tryrdlock while the process's last reader gives the share
 * back (its release held back by CLIENT PAUSE), no writer anywhere: it
 * waits for the release and asks anew.  Before, EBUSY at once.
 */
Test(rwlock, a_tryrdlock_waits_for_the_share_being_given_back)
{
	dmutex_client_t *c;
	drwlock_t rw;
	struct asker k = { .rw = &rw, .rc = -1, .unlock_rc = -1 };
	pthread_t t;
	long long one = 1;
	int rc;

	DMT_REDIS_STATE("holds a request back with CLIENT PAUSE");
	/* Room for the whole pause in one request: the release is answered. */
	rw_open(&c, &rw, "trygiven", "command_timeout_ms=4000");
	cr_assert_eq(pthread_create(&t, NULL, asker_main, &k), 0);
	cr_assert(th_wait_until(share_is, &one, 5000), "the reader never read");

	blocked_before = dmt_blocked_clients(&srv);
	cr_assert_geq(blocked_before, 0);
	th_redis_int(&srv, "CLIENT PAUSE 800 WRITE");
	atomic_store(&k.go, 1);
	cr_assert(th_wait_until(one_more_blocked, NULL, 3000), "the release was never held back");
	rc = drwlock_tryrdlock(&rw);
	pthread_join(t, NULL);
	cr_assert_eq(k.rc, 0);
	cr_assert_eq(k.unlock_rc, 0, "the release: %s", dmutex_strerror(k.unlock_rc));
	cr_assert_eq(rc, 0, "tryrdlock while the share was given back, no writer anywhere: %s",
			dmutex_strerror(rc));
	cr_assert_eq(rw_count("trygiven", 'r'), 1, "the new share");
	cr_assert_eq(drwlock_unlock(&rw), 0);
	cr_assert_eq(drwlock_destroy(&rw), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/*
 * A tryrdlock waits for another reader's request no longer than a request
 * of its own could take: with that request still unanswered (CLIENT PAUSE
 * past command_timeout_ms), EIO, as the man page has it for a try call the
 * backend fails, never EBUSY with no writer anywhere.  The blocking
 * reader's own retries all go unanswered within the pause: EIO too.
 */
Test(rwlock, a_tryrdlock_whose_asker_gets_no_answer_says_eio)
{
	dmutex_client_t *c;
	drwlock_t rw;
	struct asker k = { .rw = &rw, .rc = -1, .unlock_rc = -1 };
	pthread_t t;
	int64_t t0, waited_ms;
	int rc;

	DMT_REDIS_STATE("holds a request back with CLIENT PAUSE");
	rw_open(&c, &rw, "tryunanswered", "command_timeout_ms=300");
	cr_assert_eq(drwlock_rdlock(&rw), 0);
	cr_assert_eq(drwlock_unlock(&rw), 0);

	blocked_before = dmt_blocked_clients(&srv);
	cr_assert_geq(blocked_before, 0);
	th_redis_int(&srv, "CLIENT PAUSE 2500 WRITE");
	cr_assert_eq(pthread_create(&t, NULL, asker_main, &k), 0);
	cr_assert(th_wait_until(one_more_blocked, NULL, 3000), "the reader's request was never held back");
	t0 = th_now_ms();
	rc = drwlock_tryrdlock(&rw);
	waited_ms = th_now_ms() - t0;
	atomic_store(&k.go, 1);
	pthread_join(t, NULL);
	cr_assert_eq(rc, EIO, "tryrdlock, the asker unanswered: %s", dmutex_strerror(rc));
	cr_assert_leq(waited_ms, 2000, "waited %lld ms for a 300 ms request", (long long)waited_ms);
	cr_assert_eq(k.rc, EIO, "the blocking reader: %s", dmutex_strerror(k.rc));
	cr_assert_eq(drwlock_destroy(&rw), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

static long long scripts_before;

static int one_more_script(void *arg)
{
	(void)arg;
	return dmt_script_calls(&srv) > scripts_before;
}

/*
 * A reader told busy by a writer elsewhere asks again once that writer's
 * lease ends; its second request is held back (CLIENT PAUSE).  A
 * tryrdlock of ours then waits for that answer, not for the first one's
 * "busy": it joins the share the second brings.  Before, the old "busy"
 * still counted: EBUSY with the writer gone.
 */
Test(rwlock, a_tryrdlock_waits_for_a_reader_asking_again)
{
	dmutex_client_t *c;
	drwlock_t rw;
	struct asker k = { .rw = &rw, .rc = -1, .unlock_rc = -1 };
	redisReply *now;
	pthread_t t;
	long long ms;
	int rc;

	DMT_REDIS_STATE("holds a request back with CLIENT PAUSE");
	rw_open(&c, &rw, "tryagain", "command_timeout_ms=5000");
	/* The connection made and the script loaded before any pause. */
	cr_assert_eq(drwlock_rdlock(&rw), 0);
	cr_assert_eq(drwlock_unlock(&rw), 0);

	/* A writer of another client whose lease ends in 1.5 s (server time). */
	now = th_redis_cmd(&srv, "TIME");
	cr_assert(now && now->type == REDIS_REPLY_ARRAY && now->elements == 2);
	ms = strtoll(now->element[0]->str, NULL, 10) * 1000 + strtoll(now->element[1]->str, NULL, 10) / 1000;
	freeReplyObject(now);
	th_redis_int(&srv, "HSET dmutex:rw:{tryagain} w alien wexp %lld fms 1 fseq 0", ms + 1500);

	scripts_before = dmt_script_calls(&srv);
	cr_assert_geq(scripts_before, 0);
	cr_assert_eq(pthread_create(&t, NULL, asker_main, &k), 0);
	cr_assert(th_wait_until(one_more_script, NULL, 1000), "the reader never asked");
	/* Told busy; its next request, once the writer's lease ends, waits. */
	blocked_before = dmt_blocked_clients(&srv);
	cr_assert_geq(blocked_before, 0);
	th_redis_int(&srv, "CLIENT PAUSE 3000 WRITE");
	cr_assert(th_wait_until(one_more_blocked, NULL, 4000), "the reader never asked again");
	rc = drwlock_tryrdlock(&rw);
	atomic_store(&k.go, 1);
	pthread_join(t, NULL);
	cr_assert_eq(k.rc, 0, "the asking reader: %s", dmutex_strerror(k.rc));
	cr_assert_eq(rc, 0, "tryrdlock while a reader of ours asked again, the writer gone: %s",
			dmutex_strerror(rc));
	cr_assert_eq(drwlock_unlock(&rw), 0);
	cr_assert_eq(k.unlock_rc, 0);
	cr_assert_eq(drwlock_destroy(&rw), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}
