/*
 * Backend faults against a real redis-server (docs/faults.md #7, #8, #14, #15,
 * #18): lost replies never strand a lock nor double a recursive count,
 * Redis down means EIO in bounded time and never a false grant, a server
 * restart is survived, connections and fds stay flat, and a proxy that
 * drops replies or swallows everything is handled.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dmutex.h"
#include "harness.h"
#include "dmt.h"

/* Each criterion test runs in its own worker process: these are per test. */
static struct th_redis srv;
static struct th_proxy *proxy;
static int port_guard = -1;

static void srv_up(void)
{
	cr_assert_eq(th_redis_start(&srv, NULL), 0, "redis-server did not start");
}

/* Persistence that keeps every acknowledged write across a restart. */
static void srv_up_aof(void)
{
	/* Criterion may run the suite's .init first: replace that server. */
	th_redis_stop(&srv);
	cr_assert_eq(th_redis_start(&srv, "appendonly yes\nappendfsync always\n"), 0,
			"redis-server did not start");
}

static void srv_down(void)
{
	th_proxy_stop(proxy);
	proxy = NULL;
	if (port_guard >= 0)
		close(port_guard);
	port_guard = -1;
	th_redis_stop(&srv);
}

TestSuite(faults, .init = srv_up, .fini = srv_down, .timeout = 20);

/* ------------------------------------------------------------------ */
/* helpers                                                             */
/* ------------------------------------------------------------------ */

static int no_lock_keys(void *arg)
{
	(void)arg;
	return dmt_count_keys(&srv, "dmutex:lock:*") == 0;
}

/* How many SET commands Redis ran: a non-fair, non-robust lock is taken by
 * one SET NX PX GET (key layout 3), which counts no holds anywhere, so
 * this is how a test sees that an acquire reached Redis. */
static long long set_calls(void)
{
	return dmt_cmd_calls(&srv, "set", NULL);
}

static int meta_state_absent(const char *name)
{
	char state[64];

	return !dmt_meta_state(&srv, name, state, sizeof state);
}

/* ------------------------------------------------------------------ */
/* 1. lost reply of an acquire (docs/faults.md #7, #8)                 */
/* ------------------------------------------------------------------ */

struct lost_reply_arg {
	dmutex_t m;
	sem_t resumed;          /* main -> locker: the server runs again */
	int lock_rc, unlock1, unlock2;
	long long lock_ms;
};

static void *recursive_locker(void *p)
{
	struct lost_reply_arg *a = p;
	long long t0 = th_now_ms();

	a->lock_rc = dmutex_lock(&a->m);
	a->lock_ms = th_now_ms() - t0;
	while (sem_wait(&a->resumed) && errno == EINTR)
		;
	/* Ownership is per thread: the unlocks must come from this thread. */
	if (a->lock_rc == 0) {
		a->unlock1 = dmutex_unlock(&a->m);
		a->unlock2 = dmutex_unlock(&a->m);
	}
	return NULL;
}

/* Stop the server for stop_ms while a recursive lock is being acquired. */
static void lost_reply(const char *name, long long stop_ms)
{
	static struct lost_reply_arg a;
	char url[700];
	dmutex_client_t *c;
	pthread_t th;

	dmt_url(url, sizeof url, NULL, srv.port, "command_timeout_ms=200&connect_timeout_ms=200");
	cr_assert_eq(dmt_client_open_retry(&c, url), 0);
	/* Reads Redis after the unlock: no kept lease. */
	cr_assert_eq(dmt_init_mutex(&a.m, name, c,
			&(struct dmt_attr){ .type = DMUTEX_RECURSIVE, .lease_ms = 3000, .nocache = 1 }), 0);
	cr_assert_eq(sem_init(&a.resumed, 0, 0), 0);
	/* One hold first, so that Redis has the scripts cached and runs the
	 * acquires queued while it is stopped (not NOSCRIPT). */
	cr_assert_eq(dmutex_lock(&a.m), 0);
	cr_assert_eq(dmutex_unlock(&a.m), 0);

	cr_assert_eq(th_redis_pause(&srv), 0);
	cr_assert_eq(pthread_create(&th, NULL, recursive_locker, &a), 0);
	/* Stopped past one or more 200 ms command timeouts, so the acquire is
	 * sent, times out and is retried.  The time is under test. */
	dmt_pass_time_ms(stop_ms);
	cr_assert_eq(th_redis_resume(&srv), 0);
	sem_post(&a.resumed);
	pthread_join(th, NULL);

	if (a.lock_rc == 0) {
		/* Exactly one hold: one unlock frees it, the count never doubled. */
		cr_assert_eq(a.unlock1, 0, "first unlock: %s", dmutex_strerror(a.unlock1));
		cr_assert_eq(a.unlock2, EPERM, "second unlock: %s (recursive count doubled?)",
				dmutex_strerror(a.unlock2));
		/* (Nothing in Redis counts holds any more: the unlocks above
		 * are what says the retry did not make a second one.) */
		cr_assert_eq(dmt_count_keys(&srv, "dmutex:lock:*"), 0, "a lock key is left after the unlock");
	} else {
		cr_assert_eq(a.lock_rc, EIO, "lock returned %s after a lost reply", dmutex_strerror(a.lock_rc));
		/* Whatever the retried acquires did once the server ran again is
		 * undone: no lock that nobody knows it holds, within the lease. */
		cr_assert(th_wait_until(no_lock_keys, NULL, 3000 + 500),
				"a lock key with an unknown token is left (lock gave EIO after %lld ms)", a.lock_ms);
	}
	cr_assert(meta_state_absent(name), "the abandoned acquire left a robust state");

	/* The lock works normally afterwards. */
	cr_assert_eq(dmutex_lock(&a.m), 0);
	cr_assert_eq(dmutex_unlock(&a.m), 0);
	cr_assert_eq(dmutex_destroy(&a.m), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
	sem_destroy(&a.resumed);
}

/* 700 ms: longer than lock's retry budget (3 x 200 ms), so mostly EIO. */
Test(faults, lost_acquire_reply_leaves_one_hold_or_none)
{
	lost_reply("faults-lost-reply", 700);
}

/* 400 ms: resumed while lock still retries, so mostly a hold whose retry
 * found its own first attempt already applied. */
Test(faults, lost_acquire_reply_retried_in_budget_counts_once)
{
	lost_reply("faults-lost-reply-short", 400);
}

Test(faults, acquire_given_up_while_server_stopped_is_cleaned_up_in_background)
{
	const char *name = "faults-given-up";
	char url[700];
	dmutex_client_t *c;
	dmutex_t m;
	long long t0, took, resumed_at;
	int rc;

	dmt_url(url, sizeof url, NULL, srv.port, "command_timeout_ms=200&connect_timeout_ms=200");
	cr_assert_eq(dmt_client_open_retry(&c, url), 0);
	/* A long lease: the key must go long before it would expire. */
	cr_assert_eq(dmt_init_mutex(&m, name, c,
			&(struct dmt_attr){ .type = DMUTEX_RECURSIVE, .lease_ms = 10000 }), 0);
	/* Scripts cached in Redis: the queued acquires will really run. */
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);

	cr_assert_eq(th_redis_pause(&srv), 0);
	t0 = th_now_ms();
	rc = dmutex_lock(&m);
	took = th_now_ms() - t0;
	/* The server was stopped all along: it cannot have granted anything. */
	cr_assert_eq(rc, EIO, "lock with the server stopped: %s", dmutex_strerror(rc));
	/* 3 command timeouts and a connect timeout, and a margin for a
	 * loaded machine's scheduling (3x under the sanitizers); a lock that
	 * waited for the server would take until the test's timeout. */
	cr_assert_lt(took, 3 * 200 + 200 + 1000 * dmt_slowdown(), "EIO only after %lld ms", took);
	cr_assert_eq(dmutex_unlock(&m), EPERM);

	/* Only now does the server run the acquires it was sent. */
	cr_assert_eq(th_redis_resume(&srv), 0);
	resumed_at = th_now_ms();
	cr_assert(th_wait_until(no_lock_keys, NULL, 2000),
			"an abandoned acquisition is still held %lld ms after the resume (lease 10 s)",
			th_now_ms() - resumed_at);
	cr_assert(meta_state_absent(name), "the abandoned acquire left a robust state");
	rc = dmutex_lock(&m);
	cr_assert_eq(rc, 0, "lock after the resume: %s", dmutex_strerror(rc));
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/* ------------------------------------------------------------------ */
/* 2. Redis down at acquire time (docs/faults.md #15)                  */
/* ------------------------------------------------------------------ */

/* Keep a dead server's port refusing connections (bound, not listening)
 * so that no other test's server can take it while we aim at it. */
static int guard_port(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Every way to lock fails with EIO within the bound; never a grant. */
static void assert_eio_bounded(dmutex_t *m, const char *how)
{
	/* 3 x command timeout (200) + connect timeout (200) + a margin for
	 * a loaded machine's scheduling, 3x under the sanitizers (one that
	 * kept retrying would run into the 30 s deadline below). */
	const long long bound = 3 * 200 + 200 + 500 * dmt_slowdown();
	struct timespec dl;
	long long t0 = th_now_ms(), took;
	int rc;

	rc = dmutex_lock(m);
	took = th_now_ms() - t0;
	cr_assert_eq(rc, EIO, "%s: lock: %s", how, dmutex_strerror(rc));
	cr_assert_lt(took, bound, "%s: lock took %lld ms", how, took);

	t0 = th_now_ms();
	rc = dmutex_trylock(m);
	took = th_now_ms() - t0;
	cr_assert_eq(rc, EIO, "%s: trylock: %s", how, dmutex_strerror(rc));
	cr_assert_lt(took, bound, "%s: trylock took %lld ms", how, took);

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 30;
	t0 = th_now_ms();
	rc = dmutex_timedlock(m, &dl);
	took = th_now_ms() - t0;
	cr_assert_eq(rc, EIO, "%s: timedlock: %s", how, dmutex_strerror(rc));
	cr_assert_lt(took, bound, "%s: timedlock took %lld ms", how, took);
	cr_assert_eq(dmutex_unlock(m), EPERM, "%s: EIO left a hold behind", how);
}

Test(faults, server_killed_lock_is_eio_in_bounded_time)
{
	char url[700];
	dmutex_client_t *c;
	dmutex_t m;

	dmt_url(url, sizeof url, NULL, srv.port, "command_timeout_ms=200&connect_timeout_ms=200");
	cr_assert_eq(dmt_client_open_retry(&c, url), 0);
	cr_assert_eq(dmt_init_mutex(&m, "faults-down", c, NULL), 0);
	th_redis_stop(&srv);
	port_guard = guard_port(srv.port);
	cr_assert_geq(port_guard, 0, "cannot hold the dead server's port %d", srv.port);
	cr_assert_not(th_port_is_open(srv.port));
	assert_eio_bounded(&m, "server killed");
	cr_assert_eq(dmutex_destroy(&m), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

Test(faults, server_stopped_lock_is_eio_in_bounded_time)
{
	char url[700];
	dmutex_client_t *c;
	dmutex_t m;

	dmt_url(url, sizeof url, NULL, srv.port, "command_timeout_ms=200&connect_timeout_ms=200");
	cr_assert_eq(dmt_client_open_retry(&c, url), 0);
	cr_assert_eq(dmt_init_mutex(&m, "faults-stopped", c, NULL), 0);
	/* A stopped server accepts connections (kernel backlog) but never
	 * answers: every command times out. */
	cr_assert_eq(th_redis_pause(&srv), 0);
	assert_eio_bounded(&m, "server stopped");
	cr_assert_eq(th_redis_resume(&srv), 0);
	/* Nothing it was sent while stopped may stay locked. */
	cr_assert(th_wait_until(no_lock_keys, NULL, 3000), "a lock key is left after EIO");
	cr_assert_eq(dmutex_destroy(&m), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/* ------------------------------------------------------------------ */
/* 2b. a timed call ends at its deadline, not a command timeout later  */
/* ------------------------------------------------------------------ */

/* A command timeout far beyond the calls' deadline: a call that waited for
 * its request's own timeout would be seconds late. */
#define TIMED_OPTS "command_timeout_ms=5000&connect_timeout_ms=5000"
#define TIMED_AHEAD_MS 300

/* How far past its deadline a timed call may return: scheduling on a
 * loaded machine (x3 under the sanitizers). */
static long long timed_late_ms(void)
{
	return 500LL * dmt_slowdown();
}

/* A call begun at t0 with a deadline TIMED_AHEAD_MS ahead returned rc:
 * want it, in time. */
static void on_time(const char *what, int rc, int want, long long t0)
{
	long long late = dmt_late_ms(what, rc, t0, TIMED_AHEAD_MS);

	cr_assert_eq(rc, want, "%s with the server stopped: %s", what, dmutex_strerror(rc));
	cr_assert_lt(late, timed_late_ms(), "%s returned %lld ms past its deadline", what, late);
}

/* A client on the server with a command timeout of 5 s, and another that
 * checks afterwards; the lock used once by both, so that the timed call
 * finds a pooled connection and the scripts cached (no dial, no reload in
 * the timed window). */
static void timed_clients(dmutex_client_t **c, dmutex_client_t **o)
{
	char url[700];

	dmt_url(url, sizeof url, NULL, srv.port, TIMED_OPTS);
	cr_assert_eq(dmt_client_open_retry(c, url), 0);
	cr_assert_eq(dmt_client_open_retry(o, url), 0);
}

Test(faults, timedlock_ends_at_its_deadline_with_the_server_stopped)
{
	const char *name = "faults-timed";
	dmutex_client_t *c, *o;
	dmutex_t m, om;
	struct timespec dl;
	long long t0, resumed;
	int rc;

	timed_clients(&c, &o);
	/* A 10 s lease: the lock must come free long before it would expire. */
	cr_assert_eq(dmt_init_mutex(&m, name, c, &(struct dmt_attr){ .lease_ms = 10000, .nocache = 1 }), 0);
	cr_assert_eq(dmt_init_mutex(&om, name, o, &(struct dmt_attr){ .lease_ms = 10000, .nocache = 1 }), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmt_unlock_answered(&m), 0);

	cr_assert_eq(th_redis_pause(&srv), 0);
	dmt_deadline_in(CLOCK_MONOTONIC, TIMED_AHEAD_MS, &dl);
	t0 = th_now_ms();
	rc = dmutex_clocklock(&m, CLOCK_MONOTONIC, &dl);
	/* The request went out and was not answered by the deadline: the
	 * deadline passed first. */
	on_time("clocklock", rc, ETIMEDOUT, t0);
	cr_assert_eq(dmutex_unlock(&m), EPERM, "ETIMEDOUT left a hold behind");

	/* The server now runs the acquire it was sent: given back in the
	 * background, the lock is free again long before its lease ends. */
	cr_assert_eq(th_redis_resume(&srv), 0);
	resumed = th_now_ms();
	cr_assert(th_wait_until(dmt_lock_free, &om, 3000 * dmt_slowdown()),
			"the abandoned acquire still holds the lock %lld ms after the resume (lease 10 s)",
			th_now_ms() - resumed);
	rc = dmutex_timedlock(&m, &(struct timespec){ 0, 0 });
	cr_assert_eq(rc, 0, "a timedlock with a past deadline on a free lock: %s", dmutex_strerror(rc));
	cr_assert_eq(dmutex_unlock(&m), 0);
	dmt_close_mutex(c, &m);
	dmt_close_mutex(o, &om);
}

static int other_wrlocks(void *arg)
{
	drwlock_t *rw = arg;

	if (drwlock_trywrlock(rw))
		return 0;
	cr_assert_eq(drwlock_unlock(rw), 0);
	return 1;
}

static void rw_init_on(drwlock_t *rw, const char *name, dmutex_client_t *c)
{
	dmutex_attr_t a;

	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	cr_assert_eq(dmutex_attr_setlease(&a, 10000), 0);
	cr_assert_eq(drwlock_init(rw, name, &a), 0);
	cr_assert_eq(dmutex_attr_destroy(&a), 0);
}

Test(faults, timed_rwlock_ends_at_its_deadline_with_the_server_stopped)
{
	dmutex_client_t *c, *o;
	drwlock_t rw, orw;
	struct timespec dl;
	long long t0, resumed;
	int rc;

	timed_clients(&c, &o);
	rw_init_on(&rw, "faults-timed-rw", c);
	rw_init_on(&orw, "faults-timed-rw", o);
	cr_assert_eq(drwlock_wrlock(&rw), 0);
	cr_assert_eq(drwlock_unlock(&rw), 0);

	cr_assert_eq(th_redis_pause(&srv), 0);
	for (int write = 0; write < 2; write++) {
		dmt_deadline_in(CLOCK_MONOTONIC, TIMED_AHEAD_MS, &dl);
		t0 = th_now_ms();
		rc = write ? drwlock_clockwrlock(&rw, CLOCK_MONOTONIC, &dl)
			: drwlock_clockrdlock(&rw, CLOCK_MONOTONIC, &dl);
		on_time(write ? "drwlock_clockwrlock" : "drwlock_clockrdlock", rc, ETIMEDOUT, t0);
		cr_assert_eq(drwlock_unlock(&rw), EPERM, "ETIMEDOUT left a hold behind");
	}

	cr_assert_eq(th_redis_resume(&srv), 0);
	resumed = th_now_ms();
	cr_assert(th_wait_until(other_wrlocks, &orw, 3000 * dmt_slowdown()),
			"an abandoned acquire still holds the rwlock %lld ms after the resume (lease 10 s)",
			th_now_ms() - resumed);
	cr_assert_eq(drwlock_destroy(&rw), 0);
	cr_assert_eq(drwlock_destroy(&orw), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
	cr_assert_eq(dmutex_client_close(o), 0);
}

Test(faults, sem_timedwait_ends_at_its_deadline_with_the_server_stopped)
{
	dmutex_client_t *c, *o;
	dsem_t s, os;
	struct timespec dl;
	long long t0;
	int rc, v;

	timed_clients(&c, &o);
	/* No permit: the take the server runs after the resume finds none. */
	cr_assert_eq(dsem_init(&s, "faults-timed-sem", 0, c, 0), 0);
	cr_assert_eq(dsem_init(&os, "faults-timed-sem", 0, o, 0), 0);
	cr_assert_eq(dsem_getvalue(&s, &v), 0);
	cr_assert_eq(dsem_trywait(&s), EAGAIN);

	cr_assert_eq(th_redis_pause(&srv), 0);
	dmt_deadline_in(CLOCK_MONOTONIC, TIMED_AHEAD_MS, &dl);
	t0 = th_now_ms();
	rc = dsem_clockwait(&s, CLOCK_MONOTONIC, &dl);
	/* The take went out unanswered: whether it took a permit is unknown,
	 * the semaphore's EIO (dsem_wait(3)), not "no permit". */
	on_time("dsem_clockwait", rc, EIO, t0);

	cr_assert_eq(th_redis_resume(&srv), 0);
	/* One post is one permit, for the other client. */
	cr_assert_eq(dsem_post(&os), 0);
	cr_assert_eq(dsem_trywait(&os), 0);
	cr_assert_eq(dsem_getvalue(&os, &v), 0);
	cr_assert_eq(v, 0);
	cr_assert_eq(dsem_destroy(&s), 0);
	cr_assert_eq(dsem_destroy(&os), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
	cr_assert_eq(dmutex_client_close(o), 0);
}

/* ------------------------------------------------------------------ */
/* 3. server restart                                                   */
/* ------------------------------------------------------------------ */

Test(faults, restart_reconnects_and_reloads_scripts)
{
	const char *name = "faults-restart";
	char pid_s[32], want_pid[32];
	dmutex_client_t *c;
	dmutex_t m;
	int rc;

	snprintf(want_pid, sizeof want_pid, "%ld", (long)getpid());
	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	/* Every unlock must reach the restarted server: no kept lease
	 * (test_cache.c has a restart under a kept lease). */
	cr_assert_eq(dmt_init_mutex(&m, name, c, &(struct dmt_attr){ .nocache = 1 }), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmt_unlock_answered(&m), 0);

	/* New process: connections broken, script cache empty. */
	cr_assert_eq(th_redis_restart(&srv), 0);
	for (int i = 0; i < 2; i++) {
		rc = dmutex_lock(&m);
		cr_assert_eq(rc, 0, "lock %d after restart: %s", i, dmutex_strerror(rc));
		cr_assert(dmt_lock_field(&srv, name, "pid", pid_s, sizeof pid_s), "no lock key after lock");
		cr_assert_str_eq(pid_s, want_pid);
		rc = dmt_unlock_answered(&m);
		cr_assert_eq(rc, 0, "unlock %d after restart: %s", i, dmutex_strerror(rc));
		cr_assert_eq(dmt_lock_exists(&srv, name), 0);
	}
	cr_assert_eq(dmutex_destroy(&m), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/*
 * A restart that loses a hold (no persistence), its holder idle in its
 * critical section: the holder's unlock must say the hold was lost, since
 * another client took the lock meanwhile.  A fair mutex's release waits
 * for its answer (a plain one's is asynchronous, read by its own check).
 * The pooled connection the release would take was closed by the dying
 * server: sent on it, the release "may have run", and its retry's "not
 * ours" proved nothing, so the unlock said 0 and nobody was told (the
 * torture's restart_lossy found it once).  Nothing can run on a closed
 * connection, so it is not used: the one attempt's "not ours" is a loss.
 */
/* Two clients on srv, m on c (onlost counting in *lost) and om on o, both
 * on name: a 30 s lease (the renewer looks at 10 s, long after these
 * tests), no kept lease, fair or not. */
static void
open_pair(const char *name, int fair, dmutex_client_t **c, dmutex_client_t **o, dmutex_t *m,
		dmutex_t *om, atomic_int *lost)
{
	dmutex_attr_t a;

	cr_assert_eq(dmutex_client_open(c, srv.url), 0);
	cr_assert_eq(dmutex_client_open(o, srv.url), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setlease(&a, 30000), 0);
	cr_assert_eq(dmutex_attr_setleasecache(&a, 0), 0);
	cr_assert_eq(dmutex_attr_setfair(&a, fair), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, *c), 0);
	cr_assert_eq(dmutex_attr_setonlost(&a, dmt_count_lost, lost), 0);
	cr_assert_eq(dmutex_init(m, name, &a), 0);
	cr_assert_eq(dmutex_attr_setonlost(&a, NULL, NULL), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, *o), 0);
	cr_assert_eq(dmutex_init(om, name, &a), 0);
	cr_assert_eq(dmutex_attr_destroy(&a), 0);
}

static void
unlock_after_lossy_restart(int fair)
{
	const char *name = fair ? "faults-lossy-fair" : "faults-lossy";
	dmutex_client_t *c, *o;
	dmutex_t m, om;
	atomic_int lost = 0;
	int rc;

	open_pair(name, fair, &c, &o, &m, &om, &lost);

	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(th_redis_restart(&srv), 0);        /* no AOF: the hold is gone */
	cr_assert_eq(dmt_lock_exists(&srv, name), 0, "the hold survived a restart without persistence");
	rc = dmutex_trylock(&om);
	cr_assert_eq(rc, 0, "the other client could not take the lost lock: %s", dmutex_strerror(rc));

	rc = dmutex_unlock(&m);
	if (fair)
		cr_assert_eq(rc, ENOLCK, "unlock of a hold lost to a restart: %d (%s), not ENOLCK", rc,
				dmutex_strerror(rc));
	else
		cr_assert(rc == 0 || rc == ENOLCK, "unlock: %d (%s)", rc, dmutex_strerror(rc));
	cr_assert(th_wait_until(dmt_flag_set, &lost, 3000), "3 s after the unlock of a hold lost to a restart, "
			"onlost had not run");
	cr_assert_eq(atomic_load(&lost), 1, "onlost ran %d times", atomic_load(&lost));
	cr_assert_eq(dmutex_unlock(&om), 0);
	cr_assert_eq(dmutex_destroy(&om), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	cr_assert_eq(dmutex_client_close(o), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

Test(faults, unlock_after_a_lossy_restart_reports_the_hold_lost)
{
	unlock_after_lossy_restart(0);
}

Test(faults, fair_unlock_after_a_lossy_restart_reports_the_hold_lost)
{
	unlock_after_lossy_restart(1);
}

/*
 * The same loss, with the release answered by an error that says it did
 * not run: a server restarted with a dataset to load answers -LOADING to
 * every script meanwhile.  A plain mutex's unlock releases asynchronously
 * (README "Asynchronous release"); its answer, an error, settled the
 * release "unknown", as a lost answer does, and an unknown release's retry
 * that finds the lock not ours proves nothing (the first may have run), so
 * nobody was told, though the first certainly did not run and another
 * client had held the lock alongside ours.  Two restarts: the first loses
 * the hold (its key is in no snapshot) and lets the other client take the
 * lock; the unlock meets the second one's loading.  key-load-delay (a
 * debugging knob of Redis's own tests) makes the loading last long enough
 * to be met.
 */
static void srv_up_slow_load(void)
{
	th_redis_stop(&srv);
	cr_assert_eq(th_redis_start(&srv, "key-load-delay 250\n"
			"loading-process-events-interval-bytes 1024\n"), 0,
			"redis-server did not start");
}

/* A snapshot that takes a second to load (srv_up_slow_load) and holds no
 * lock: a restart from it loses every hold, and loads long enough for an
 * unlock to meet -LOADING. */
static void slow_snapshot(void)
{
	redisReply *r = th_redis_cmd(&srv, "DEBUG POPULATE 4000 filler 64");

	cr_assert(r && r->type == REDIS_REPLY_STATUS, "DEBUG POPULATE failed");
	freeReplyObject(r);
	r = th_redis_cmd(&srv, "SAVE");
	cr_assert(r && r->type == REDIS_REPLY_STATUS, "SAVE failed");
	freeReplyObject(r);
}

/* The holder: a thread of its own, as the restarts must run on the test's
 * main thread (the harness's server dies with the thread that started it,
 * PR_SET_PDEATHSIG). */
struct loading_holder {
	pthread_t th;
	dmutex_t *m;
	atomic_int locked, go, done;
	int rc, lock_rc, seen, still;
	/* destroy: an unlock that says EIO is followed at once by
	 * dmutex_destroy (destroy_rc), while the server still loads
	 * (still_destroyed). */
	int destroy, destroy_rc, still_destroyed;
	/* exit_holding: the holder's thread ends holding the lock once the
	 * server loads (its release, with the thread's end, is refused). */
	int exit_holding;
};

static int srv_loading(void *p);

static void *loading_holder_main(void *p)
{
	struct loading_holder *h = p;

	h->lock_rc = dmutex_lock(h->m);
	atomic_store(&h->locked, 1);
	if (h->lock_rc) {
		atomic_store(&h->done, 1);
		return NULL;
	}
	while (!atomic_load(&h->go))
		th_wait_until(dmt_flag_set, &h->go, 1000);
	if ((h->seen = th_wait_until(srv_loading, NULL, 10000))) {
		if (h->exit_holding) {
			atomic_store(&h->done, 1);
			return NULL;
		}
		h->rc = dmutex_unlock(h->m);
		h->still = srv_loading(NULL);
		if (h->destroy && h->rc == EIO) {
			h->destroy_rc = dmutex_destroy(h->m);
			h->still_destroyed = srv_loading(NULL);
		}
	} else {
		h->rc = dmutex_unlock(h->m);
	}
	atomic_store(&h->done, 1);
	return NULL;
}

static int srv_loading(void *p)
{
	redisReply *r = th_redis_cmd(&srv, "PING");
	int yes = r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "LOADING", 7);

	(void)p;
	if (r)
		freeReplyObject(r);
	return yes;
}

static dmutex_client_t *lost_counted_client;
static const char *orphan_log_name;
static atomic_int orphan_logged;

/* Counts the log lines of a background release that found orphan_log_name
 * lost (renewer.c, orphan_lost). */
static void orphan_log(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	fprintf(stderr, "dmutex: %s\n", msg);
	if (strstr(msg, "retried in the background") && strstr(msg, "no longer ours") &&
			strstr(msg, orphan_log_name))
		atomic_fetch_add(&orphan_logged, 1);
}

/* The holder's client has counted a loss of name. */
static int lost_counted(void *name)
{
	dmutex_metrics_t met;

	return !dmutex_client_metrics(lost_counted_client, name, &met) && met.leases_lost > 0;
}

/* fair 0: an asynchronous release; 1: a fair mutex's, which waits for its
 * answer; 2: that, and the mutex destroyed while its release, refused,
 * is retried in the background: the loss is then reported by the log and
 * the lost metric, never by onlost (its argument may be gone); 3: not
 * unlocked but ended with its thread (a plain mutex: that release too
 * waits for its answer). */
static void
unlock_met_by_loading(int fair)
{
	const char *name = fair == 3 ? "faults-lossy-loading-exit"
		: fair == 2 ? "faults-lossy-loading-destroyed"
		: fair ? "faults-lossy-loading-fair" : "faults-lossy-loading";
	dmutex_metrics_t met;
	static struct loading_holder h;
	dmutex_client_t *c, *o;
	dmutex_t m, om;
	atomic_int lost = 0;
	int rc;

	slow_snapshot();

	open_pair(name, fair == 1 || fair == 2, &c, &o, &m, &om, &lost);
	lost_counted_client = c;

	h.m = &m;
	h.destroy = fair == 2;
	h.exit_holding = fair == 3;
	orphan_log_name = name;
	dmutex_set_logger(orphan_log, NULL);
	cr_assert_eq(pthread_create(&h.th, NULL, loading_holder_main, &h), 0);
	cr_assert(th_wait_until(dmt_flag_set, &h.locked, 5000), "the holder did not lock");
	cr_assert_eq(h.lock_rc, 0, "lock: %s", dmutex_strerror(h.lock_rc));
	cr_assert_eq(th_redis_restart(&srv), 0);        /* loaded: the hold is gone */
	cr_assert_eq(dmt_lock_exists(&srv, name), 0, "the hold survived a restart from a snapshot without it");
	rc = dmutex_trylock(&om);
	cr_assert_eq(rc, 0, "the other client could not take the lost lock: %s", dmutex_strerror(rc));

	/* The holder unlocks while this restart loads. */
	atomic_store(&h.go, 1);
	cr_assert_eq(th_redis_restart(&srv), 0, "the second restart failed");
	pthread_join(h.th, NULL);
	cr_assert(h.seen, "the restarted server was never seen loading");
	if (fair == 3) {
		cr_assert(th_wait_until(dmt_flag_set, &lost, 5000), "5 s after the thread ended holding a "
				"lock another client had taken (its release refused: LOADING), onlost had "
				"not run");
		cr_assert_eq(atomic_load(&orphan_logged), 1, "the loss was not found by the "
				"background release (%d lines): the test proves nothing",
				atomic_load(&orphan_logged));
		cr_assert_eq(atomic_load(&lost), 1, "onlost ran %d times", atomic_load(&lost));
		(void)dmutex_unlock(&om);
		cr_assert_eq(dmutex_destroy(&om), 0);
		cr_assert_eq(dmutex_destroy(&m), 0);
		cr_assert_eq(dmutex_client_close(o), 0);
		cr_assert_eq(dmutex_client_close(c), 0);
		dmutex_set_logger(NULL, NULL);
		return;
	}
	/* A fair mutex's release waits for its answer: refused until its
	 * attempts run out, it says EIO (whether it ran is not known to the
	 * caller), and the background asks on. */
	cr_assert(h.rc == 0 || h.rc == ENOLCK || (fair && h.rc == EIO), "unlock: %d (%s)", h.rc,
			dmutex_strerror(h.rc));
	cr_assert(h.still, "the server had loaded before the unlock returned: the test proves nothing");
	if (fair == 2) {
		cr_assert_eq(h.rc, EIO, "unlock: %d (%s): no orphan to test", h.rc, dmutex_strerror(h.rc));
		cr_assert_eq(h.destroy_rc, 0, "destroy: %s", dmutex_strerror(h.destroy_rc));
		cr_assert(h.still_destroyed, "the server had loaded before the destroy returned: the "
				"test proves nothing");
		cr_assert(th_wait_until(lost_counted, (void *)name, 5000), "5 s after the unlock (EIO) "
				"of a hold another client had taken, its loss was not counted");
		cr_assert_eq(dmutex_client_metrics(c, name, &met), 0);
		cr_assert_eq(met.leases_lost, 1, "%llu losses counted",
				(unsigned long long)met.leases_lost);
		cr_assert_eq(atomic_load(&lost), 0, "onlost ran after its mutex was destroyed");
		/* The background counts the loss before it logs it (renewer.c,
		 * orphan_lost): the line may follow the count by a moment. */
		cr_assert(th_wait_until(dmt_flag_set, &orphan_logged, 5000), "5 s after its loss was "
				"counted, the background release had not logged it");
		cr_assert_eq(atomic_load(&orphan_logged), 1, "%d log lines of the loss",
				atomic_load(&orphan_logged));
		(void)dmutex_unlock(&om);
		cr_assert_eq(dmutex_destroy(&om), 0);
		cr_assert_eq(dmutex_client_close(o), 0);
		cr_assert_eq(dmutex_client_close(c), 0);
		dmutex_set_logger(NULL, NULL);
		return;
	}
	cr_assert(th_wait_until(dmt_flag_set, &lost, 5000), "5 s after the unlock of a hold another client "
			"had taken (its release refused: LOADING), onlost had not run");
	cr_assert_eq(atomic_load(&lost), 1, "onlost ran %d times", atomic_load(&lost));
	(void)dmutex_unlock(&om);       /* its hold too went with the second restart */
	cr_assert_eq(dmutex_destroy(&om), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	cr_assert_eq(dmutex_client_close(o), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
	dmutex_set_logger(NULL, NULL);
}

Test(faults, async_unlock_met_by_loading_after_a_lossy_restart_reports_the_hold_lost,
		.init = srv_up_slow_load)
{
	unlock_met_by_loading(0);
}

/*
 * Its fair twin: the release waits for its answer, three -LOADING answers
 * make the unlock say EIO and hand the release to the renewer's orphans;
 * none of those requests can have run, so the orphan's "not ours", found
 * before the hold's deadline, is the hold's loss, reported (renewer.c,
 * orphan_lost).
 */
Test(faults, fair_unlock_met_by_loading_after_a_lossy_restart_reports_the_hold_lost,
		.init = srv_up_slow_load)
{
	unlock_met_by_loading(1);
}

/* The same, the mutex destroyed before the background finds the lock not
 * ours: dmutex_destroy dismisses the handler (its argument may not outlive
 * the mutex); the loss is still logged and counted. */
Test(faults, fair_unlock_eio_then_destroy_reports_the_loss_without_onlost,
		.init = srv_up_slow_load)
{
	unlock_met_by_loading(2);
}

/* The same, the holder's thread ending holding the lock (README "A hold
 * ends with its thread"): that release too is refused, goes on in the
 * background and reports the loss. */
Test(faults, thread_ending_met_by_loading_after_a_lossy_restart_reports_the_hold_lost,
		.init = srv_up_slow_load)
{
	unlock_met_by_loading(3);
}

struct waiter_arg {
	dmutex_t m;
	atomic_int done;
	int rc;
	long long at;           /* monotonic ms when lock returned */
};

static void *restart_waiter(void *p)
{
	struct waiter_arg *a = p;

	a->rc = dmutex_lock(&a->m);
	a->at = th_now_ms();
	atomic_store(&a->done, 1);
	if (a->rc == 0)
		dmutex_unlock(&a->m);
	return NULL;
}

struct numsub_arg {
	const char *channel;
	long long want;
};

/* Listeners on channel, or (a mutex's waiters, README "Who a release
 * wakes") on channels of their own, "<channel>:<token>". */
static int numsub_is(void *p)
{
	struct numsub_arg *a = p;
	long long n = th_numsub(th_redis_cmd(&srv, "PUBSUB NUMSUB %s", a->channel));
	redisReply *r = th_redis_cmd(&srv, "PUBSUB CHANNELS %s:*", a->channel);

	if (r && r->type == REDIS_REPLY_ARRAY)
		n += (long long)r->elements;
	if (r)
		freeReplyObject(r);
	return n == a->want;
}

Test(faults, waiter_across_restart_acquires_when_holder_unlocks, .init = srv_up_aof)
{
	static struct waiter_arg w;
	const char *name = "faults-restart-wait";
	char channel[600];
	struct numsub_arg ns = { channel, 1 };
	dmutex_client_t *ch, *cw;
	dmutex_t hm;
	pthread_t th;
	long long unlocked_at;
	int rc;

	snprintf(channel, sizeof channel, "dmutex:wake:{%s}", name);
	cr_assert_eq(dmutex_client_open(&ch, srv.url), 0);
	cr_assert_eq(dmutex_client_open(&cw, srv.url), 0);
	/* Lease 4 s: renewed across the restart (every 1.3 s). */
	cr_assert_eq(dmt_init_mutex(&hm, name, ch, &(struct dmt_attr){ .lease_ms = 4000 }), 0);
	cr_assert_eq(dmt_init_mutex(&w.m, name, cw, &(struct dmt_attr){ .lease_ms = 4000 }), 0);
	cr_assert_eq(dmutex_lock(&hm), 0);

	cr_assert_eq(pthread_create(&th, NULL, restart_waiter, &w), 0);
	cr_assert(th_wait_until(numsub_is, &ns, 5000), "the waiter never subscribed to %s", channel);
	cr_assert_eq(atomic_load(&w.done), 0, "the waiter got past a held lock: %s", dmutex_strerror(w.rc));

	/* The AOF keeps the hold; connections and scripts are gone. */
	cr_assert_eq(th_redis_restart(&srv), 0);
	cr_assert_eq(dmt_lock_exists(&srv, name), 1, "the hold did not survive the restart (AOF)");
	/* The waiter is wakeable again once it re-subscribed. */
	cr_assert(th_wait_until(numsub_is, &ns, 5000), "the waiter did not re-subscribe after the restart");
	cr_assert_eq(atomic_load(&w.done), 0, "the waiter got past a held lock: %s", dmutex_strerror(w.rc));

	unlocked_at = th_now_ms();
	rc = dmutex_unlock(&hm);
	cr_assert_eq(rc, 0, "holder's unlock after the restart: %s", dmutex_strerror(rc));
	/* Woken by the release, not by the end of the 4 s lease bound. */
	cr_assert(th_wait_until(dmt_flag_set, &w.done, 1500), "the waiter was not woken by the unlock");
	pthread_join(th, NULL);
	cr_assert_eq(w.rc, 0, "waiter: %s", dmutex_strerror(w.rc));
	cr_assert_geq(w.at, unlocked_at);
	cr_assert_eq(dmutex_destroy(&hm), 0);
	cr_assert_eq(dmutex_destroy(&w.m), 0);
	cr_assert_eq(dmutex_client_close(ch), 0);
	cr_assert_eq(dmutex_client_close(cw), 0);
}

/* ------------------------------------------------------------------ */
/* 4. resource hygiene (short form of docs/faults.md #18)              */
/* ------------------------------------------------------------------ */

/* The library's connection pool per node (src/backend/redis/node.h DMUTEX__POOL_MAX). */
#define POOL_MAX 16
#define CYCLES 2000

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

struct cycle_arg {
	dmutex_t m;
	int bad_rc, bad_at;
};

static void *cycle_loop(void *p)
{
	struct cycle_arg *a = p;

	for (int i = 0; i < CYCLES / 2; i++) {
		int rc = dmutex_lock(&a->m);
		if (!rc)
			rc = dmutex_unlock(&a->m);
		if (rc) {
			a->bad_rc = rc;
			a->bad_at = i;
			return NULL;
		}
	}
	return NULL;
}

Test(faults, lock_cycles_keep_connections_and_fds_flat)
{
	static struct cycle_arg args[2];
	const char *names[2] = { "faults-cycle-a", "faults-cycle-b" };
	dmutex_client_t *c;
	pthread_t th[2];
	int fd0, fd1, fd2, fd3, clients;

	fd0 = count_fds();
	cr_assert_gt(fd0, 0);
	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	for (int i = 0; i < 2; i++) {
		/* The cycles must go to Redis (no kept lease): their
		 * connections are what is counted. */
		cr_assert_eq(dmt_init_mutex(&args[i].m, names[i], c, &(struct dmt_attr){ .nocache = 1 }), 0);
		/* Warm up: the renewal thread and a pooled connection exist. */
		cr_assert_eq(dmutex_lock(&args[i].m), 0);
		cr_assert_eq(dmutex_unlock(&args[i].m), 0);
	}
	fd1 = count_fds();

	for (int i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, cycle_loop, &args[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(args[i].bad_rc, 0, "%s: cycle %d: %s", names[i], args[i].bad_at,
				dmutex_strerror(args[i].bad_rc));

	fd2 = count_fds();
	cr_assert(fd2 - fd1 <= POOL_MAX && fd1 - fd2 <= POOL_MAX, "fds %d before, %d after %d cycles", fd1,
			fd2, CYCLES);
	/* Pool + renewer + waiter + the harness's own probe connection. */
	clients = th_redis_clients(&srv);
	cr_assert(clients >= 2 && clients <= POOL_MAX + 3, "%d clients connected after %d cycles", clients,
			CYCLES);
	cr_assert_eq(dmt_count_keys(&srv, "dmutex:lock:*"), 0);

	for (int i = 0; i < 2; i++)
		cr_assert_eq(dmutex_destroy(&args[i].m), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
	/* Closing the client gives everything back. */
	fd3 = count_fds();
	cr_assert_eq(fd3, fd0, "fds: %d before the client, %d after closing it", fd0, fd3);
	cr_assert(th_redis_wait_clients(&srv, 1, 2000), "%d clients still connected after close",
			th_redis_clients(&srv) - 1);
}

/* ------------------------------------------------------------------ */
/* 5. faults injected by a proxy                                       */
/* ------------------------------------------------------------------ */

static void proxy_client(dmutex_client_t **c)
{
	char url[700];

	proxy = th_proxy_start(srv.port);
	cr_assert_not_null(proxy);
	dmt_url(url, sizeof url, NULL, th_proxy_port(proxy), "command_timeout_ms=200&connect_timeout_ms=200");
	cr_assert_eq(dmt_client_open_retry(c, url), 0);
}

Test(faults, dropped_acquire_reply_is_eio_and_strands_nothing)
{
	const char *name = "faults-drop";
	dmutex_client_t *c;
	dmutex_t m;
	long long sets;
	int rc;

	proxy_client(&c);
	cr_assert_eq(dmt_init_mutex(&m, name, c, &(struct dmt_attr){ .lease_ms = 3000 }), 0);
	/* Scripts cached in Redis: the acquire sent next really runs there. */
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmt_unlock_answered(&m), 0);

	sets = set_calls();
	th_proxy_set_mode(proxy, TH_PROXY_DROP_REPLIES);
	rc = dmutex_trylock(&m);
	cr_assert_eq(rc, EIO, "trylock with its reply dropped: %s", dmutex_strerror(rc));
	cr_assert_eq(dmutex_unlock(&m), EPERM);
	th_proxy_set_mode(proxy, TH_PROXY_PASS);

	/* The acquire did run in Redis; the lock it took is given back well
	 * within its 3 s lease. */
	cr_assert(th_wait_until(no_lock_keys, NULL, 3000 + 500), "the acquire whose reply was lost is stranded");
	cr_assert_gt(set_calls(), sets, "the acquire never ran in Redis: the test proves nothing");
	cr_assert(meta_state_absent(name));
	rc = dmutex_trylock(&m);
	cr_assert_eq(rc, 0, "trylock through the proxy again: %s", dmutex_strerror(rc));
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

Test(faults, blackholed_backend_during_hold_calls_onlost)
{
	static atomic_int lost;
	const char *name = "faults-blackhole";
	dmutex_client_t *c;
	dmutex_t m;
	uint64_t tok;
	long long t0;

	proxy_client(&c);
	cr_assert_eq(dmt_init_mutex(&m, name, c,
			&(struct dmt_attr){ .lease_ms = 600, .onlost = dmt_count_lost, .arg = &lost }), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_fence(&m, &tok), 0);

	th_proxy_set_mode(proxy, TH_PROXY_BLACKHOLE);
	t0 = th_now_ms();
	cr_assert(th_wait_until(dmt_lost_once, &lost, 600 + 200 + 500), "onlost not called %lld ms into the blackhole",
			th_now_ms() - t0);
	cr_assert_eq(dmutex_fence(&m, &tok), ENOLCK);
	th_proxy_set_mode(proxy, TH_PROXY_PASS);
	cr_assert_eq(dmutex_unlock(&m), ENOLCK);
	cr_assert_eq(atomic_load(&lost), 1, "onlost called %d times", atomic_load(&lost));
	cr_assert(th_wait_until(no_lock_keys, NULL, 1000), "the lost hold's key outlived its lease");
	cr_assert_eq(dmutex_destroy(&m), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/*
 * fork while another thread is opening the default client (here stuck on a
 * blackholed connection): the child must not inherit the opening thread's
 * lock and hang; it opens its own client and fails in bounded time (found
 * in review).
 */
static struct th_proxy *open_proxy;

static void *
open_default_in_thread(void *arg)
{
	static dmutex_t sm = DMUTEX_INITIALIZER("fork-while-opening");
	int *rc = arg;
	*rc = dmutex_lock(&sm);
	return NULL;
}

static int
proxy_has_conn(void *arg)
{
	(void)arg;
	return th_proxy_conns(open_proxy) >= 1;
}

static int
child_inits_default(void *arg)
{
	dmutex_t m;
	int rc;
	(void)arg;
	rc = dmutex_init(&m, "fork-child", NULL);
	if (rc == 0)
		dmutex_destroy(&m);
	return rc == EIO ? 0 : 10 + rc;
}

Test(faults, fork_while_opening_default_client_does_not_hang)
{
	char url[200];
	pthread_t th;
	pid_t pid;
	int rc = -1, st;

	open_proxy = th_proxy_start(srv.port);
	cr_assert(open_proxy);
	th_proxy_set_mode(open_proxy, TH_PROXY_BLACKHOLE);
	snprintf(url, sizeof url, "redis://127.0.0.1:%d?command_timeout_ms=1500&connect_timeout_ms=500",
			th_proxy_port(open_proxy));
	cr_assert_eq(setenv("DMUTEX_URL", url, 1), 0);
	cr_assert_eq(pthread_create(&th, NULL, open_default_in_thread, &rc), 0);
	/* The thread is inside the open: its PING is in the blackhole. */
	cr_assert(th_wait_until(proxy_has_conn, NULL, 3000));
	pid = th_spawn(child_inits_default, NULL);
	cr_assert_gt(pid, 0);
	st = th_wait_child(pid, 8000);
	cr_assert_eq(st, 0, "child: %d (-1: hung on the parent's open)", st);
	pthread_join(th, NULL);
	cr_assert_eq(rc, EIO);
	th_proxy_stop(open_proxy);
}

/* ------------------------------------------------------------------ */
/* rwlock releases that go unconfirmed                                 */
/* ------------------------------------------------------------------ */

static void
rw_open(drwlock_t *rw, const char *name, dmutex_client_t *c, unsigned lease_ms, atomic_int *lost)
{
	dmutex_attr_t a;

	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setlease(&a, lease_ms), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	if (lost)
		cr_assert_eq(dmutex_attr_setonlost(&a, dmt_count_lost, lost), 0);
	cr_assert_eq(drwlock_init(rw, name, &a), 0);
	cr_assert_eq(dmutex_attr_destroy(&a), 0);
}

/*
 * An unlock that Redis never sees (every request swallowed) says EIO; once
 * Redis can be reached again, the release goes on in the background, as a
 * mutex's does, and another host gets the write lock long before the 20 s
 * lease would have freed it.  Before, the lock stayed held for the rest of
 * the lease.  None of those requests could be known not to have run, so
 * nothing is reported lost.  write: the writer's unlock, else the last
 * reader's of its process (its share).
 */
static void
rw_unlock_unconfirmed(int write)
{
	static atomic_int lost;
	const char *name = write ? "faults-rw-blackhole-w" : "faults-rw-blackhole-r";
	dmutex_client_t *c, *o;
	drwlock_t w, ow;
	struct timespec at;
	long long t0;
	int rc;

	proxy_client(&c);
	cr_assert_eq(dmutex_client_open(&o, srv.url), 0);
	rw_open(&w, name, c, 20000, &lost);
	rw_open(&ow, name, o, 20000, NULL);
	cr_assert_eq(write ? drwlock_wrlock(&w) : drwlock_rdlock(&w), 0);

	th_proxy_set_mode(proxy, TH_PROXY_BLACKHOLE);
	rc = drwlock_unlock(&w);
	cr_assert_eq(rc, EIO, "unlock with every request swallowed: %s", dmutex_strerror(rc));
	cr_assert_eq(drwlock_trywrlock(&ow), EBUSY, "the lock was free while its release was "
			"swallowed: the test proves nothing");
	th_proxy_set_mode(proxy, TH_PROXY_PASS);

	t0 = th_now_ms();
	clock_gettime(CLOCK_REALTIME, &at);
	at.tv_sec += 5;
	rc = drwlock_timedwrlock(&ow, &at);
	cr_assert_eq(rc, 0, "%lld ms after Redis could be reached again, the other client could not "
			"take the write lock (lease 20 s): %s", th_now_ms() - t0, dmutex_strerror(rc));
	cr_assert_eq(drwlock_unlock(&ow), 0);
	cr_assert_eq(atomic_load(&lost), 0, "onlost ran %d times for a release that may have run",
			atomic_load(&lost));
	cr_assert_eq(drwlock_destroy(&ow), 0);
	cr_assert_eq(drwlock_destroy(&w), 0);
	cr_assert_eq(dmutex_client_close(o), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

Test(faults, rwlock_unlock_unconfirmed_is_released_in_the_background)
{
	rw_unlock_unconfirmed(1);
}

Test(faults, rwlock_share_unlock_unconfirmed_is_released_in_the_background)
{
	rw_unlock_unconfirmed(0);
}

struct rw_loading_holder {
	pthread_t th;
	drwlock_t *rw;
	atomic_int locked, go;
	int lock_rc, seen, rc, still;
	/* destroy: the unlock that says EIO is followed at once by
	 * drwlock_destroy (destroy_rc), while the server still loads
	 * (still_destroyed). */
	int destroy, destroy_rc, still_destroyed;
};

static void *rw_loading_holder_main(void *p)
{
	struct rw_loading_holder *h = p;

	h->lock_rc = drwlock_wrlock(h->rw);
	atomic_store(&h->locked, 1);
	if (h->lock_rc)
		return NULL;
	while (!atomic_load(&h->go))
		th_wait_until(dmt_flag_set, &h->go, 1000);
	h->seen = th_wait_until(srv_loading, NULL, 10000);
	h->rc = drwlock_unlock(h->rw);
	h->still = srv_loading(NULL);
	if (h->destroy && h->rc == EIO) {
		h->destroy_rc = drwlock_destroy(h->rw);
		h->still_destroyed = srv_loading(NULL);
	}
	return NULL;
}

/*
 * A rwlock writer's hold lost to a restart from a snapshot without it
 * (another client then took the lock), unlocked while the next restart
 * loads: each request of the release is refused (-LOADING), so none ran,
 * and the unlock says EIO.  The release goes on in the background, finds
 * the lock not ours before the hold's deadline, and reports the loss: the
 * lost metric, the log and onlost, as a mutex's does (unlock_met_by_loading
 * above); onlost no more once the rwlock was destroyed (destroy).  Before,
 * nothing was told.
 */
static void
rw_unlock_met_by_loading(int destroy)
{
	static struct rw_loading_holder h;
	static atomic_int lost;
	const char *name = destroy ? "faults-rw-lossy-loading-destroyed" : "faults-rw-lossy-loading";
	dmutex_metrics_t met;
	dmutex_client_t *c, *o;
	drwlock_t w, ow;
	int rc;

	slow_snapshot();

	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	cr_assert_eq(dmutex_client_open(&o, srv.url), 0);
	rw_open(&w, name, c, 30000, &lost);
	rw_open(&ow, name, o, 30000, NULL);
	lost_counted_client = c;
	orphan_log_name = name;
	dmutex_set_logger(orphan_log, NULL);
	h.rw = &w;
	h.destroy = destroy;
	cr_assert_eq(pthread_create(&h.th, NULL, rw_loading_holder_main, &h), 0);
	cr_assert(th_wait_until(dmt_flag_set, &h.locked, 5000), "the holder did not lock");
	cr_assert_eq(h.lock_rc, 0, "wrlock: %s", dmutex_strerror(h.lock_rc));
	cr_assert_eq(th_redis_restart(&srv), 0);        /* loaded: the hold is gone */
	rc = drwlock_trywrlock(&ow);
	cr_assert_eq(rc, 0, "the other client could not take the lost lock: %s", dmutex_strerror(rc));

	/* The holder unlocks while this restart loads. */
	atomic_store(&h.go, 1);
	cr_assert_eq(th_redis_restart(&srv), 0, "the second restart failed");
	pthread_join(h.th, NULL);
	cr_assert(h.seen, "the restarted server was never seen loading");
	cr_assert(h.still, "the server had loaded before the unlock returned: the test proves nothing");
	cr_assert_eq(h.rc, EIO, "unlock refused by a loading server: %s", dmutex_strerror(h.rc));
	if (destroy) {
		cr_assert_eq(h.destroy_rc, 0, "destroy: %s", dmutex_strerror(h.destroy_rc));
		cr_assert(h.still_destroyed, "the server had loaded before the destroy returned: the "
				"test proves nothing");
	}
	cr_assert(th_wait_until(lost_counted, (void *)name, 5000), "5 s after the unlock (EIO) of a "
			"hold another client had taken, its release refused while the server loaded, "
			"its loss was not counted");
	cr_assert_eq(dmutex_client_metrics(c, name, &met), 0);
	cr_assert_eq(met.leases_lost, 1, "%llu losses counted", (unsigned long long)met.leases_lost);
	/* The background counts the loss before it logs it, and logs it
	 * before it calls onlost (renewer.c, orphan_lost). */
	cr_assert(th_wait_until(dmt_flag_set, &orphan_logged, 5000), "the background release did not "
			"log the loss");
	cr_assert_eq(atomic_load(&orphan_logged), 1, "%d log lines of the loss",
			atomic_load(&orphan_logged));
	if (destroy) {
		cr_assert_eq(atomic_load(&lost), 0, "onlost ran after its rwlock was destroyed");
	} else {
		cr_assert(th_wait_until(dmt_flag_set, &lost, 5000), "onlost had not run 5 s after the "
				"loss was logged");
		cr_assert_eq(atomic_load(&lost), 1, "onlost ran %d times", atomic_load(&lost));
		cr_assert_eq(drwlock_destroy(&w), 0);
	}
	(void)drwlock_unlock(&ow);      /* its hold too went with the second restart */
	cr_assert_eq(drwlock_destroy(&ow), 0);
	cr_assert_eq(dmutex_client_close(o), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
	dmutex_set_logger(NULL, NULL);
}

Test(faults, rwlock_unlock_met_by_loading_after_a_lossy_restart_reports_the_hold_lost,
		.init = srv_up_slow_load)
{
	rw_unlock_met_by_loading(0);
}

Test(faults, rwlock_unlock_eio_then_destroy_reports_the_loss_without_onlost,
		.init = srv_up_slow_load)
{
	rw_unlock_met_by_loading(1);
}
