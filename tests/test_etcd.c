/*
 * The contract of dmutex.h over etcd:// against a real etcd member that
 * each test starts (tests/lib/harness_etcd.c): lock, trylock, timedlock,
 * hand-off, recursive and error-checking mutexes, robust mutexes whose
 * holder process is killed, fencing by etcd revision, leases rounded up
 * to etcd's minimum, EIO naming the endpoints, EACCES with etcd's auth.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dmutex.h"
#include "harness.h"
#include "harness_etcd.h"
#include "dmt.h"

static struct th_etcd etcd;
static pid_t child_pid;
static char url[512];

static void etcd_up(void)
{
	if (!th_etcd_available())
		cr_skip_test("etcd is not installed (Debian: apt-get install etcd-server)");
	cr_assert_eq(th_etcd_start(&etcd, NULL, 0), 0, "etcd did not start");
	snprintf(url, sizeof url, "%s?command_timeout_ms=%d", etcd.url, th_command_timeout_ms());
}

static void etcd_down(void)
{
	dmt_reap(&child_pid);
	th_etcd_stop(&etcd);
}

TestSuite(etcd, .init = etcd_up, .fini = etcd_down, .timeout = 60);

/* ------------------------------------------------------------------ */
/* helpers                                                             */
/* ------------------------------------------------------------------ */

struct pm {
	dmutex_client_t *c;
	dmutex_t m;
};

static void pm_open(struct pm *p, const char *u, const char *name, const struct dmt_attr *a)
{
	cr_assert_eq(dmt_open_mutex(&p->c, &p->m, u, name, a), 0, "open %s on %s", name, u);
}

static void pm_close(struct pm *p)
{
	dmt_close_mutex(p->c, &p->m);
}

/* A captured log, for the error tests. */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_text[8192];

static void capture_log(int level, const char *msg, void *arg)
{
	(void)level, (void)arg;
	pthread_mutex_lock(&log_mu);
	size_t n = strlen(log_text);
	snprintf(log_text + n, sizeof log_text - n, "%s\n", msg);
	pthread_mutex_unlock(&log_mu);
}

/* ------------------------------------------------------------------ */
/* lock, trylock, timedlock, hand-off                                  */
/* ------------------------------------------------------------------ */

Test(etcd, lock_excludes_other_clients)
{
	struct pm a, b;
	pm_open(&a, url, "t-basic", NULL);
	pm_open(&b, url, "t-basic", NULL);
	cr_assert_eq(dmutex_lock(&a.m), 0);
	cr_assert_eq(dmutex_trylock(&b.m), EBUSY);
	cr_assert_eq(dmutex_trylock(&a.m), EBUSY, "a NORMAL owner's trylock is EBUSY");
	cr_assert_eq(dmutex_unlock(&a.m), 0);
	cr_assert_eq(dmutex_unlock(&a.m), EPERM);
	cr_assert_eq(dmutex_trylock(&b.m), 0);
	cr_assert_eq(dmutex_trylock(&a.m), EBUSY);
	cr_assert_eq(dmutex_unlock(&b.m), 0);
	cr_assert_eq(dmutex_lock(&a.m), 0, "free again after the unlock");
	cr_assert_eq(dmutex_unlock(&a.m), 0);
	pm_close(&a);
	pm_close(&b);
}

Test(etcd, timedlock_times_out_while_held)
{
	struct pm a, b;
	pm_open(&a, url, "t-timed", NULL);
	pm_open(&b, url, "t-timed", NULL);
	cr_assert_eq(dmutex_lock(&a.m), 0);
	struct timespec ts;
	dmt_deadline_in(CLOCK_REALTIME, 400, &ts);
	long long t0 = th_now_ms();
	cr_assert_eq(dmutex_timedlock(&b.m, &ts), ETIMEDOUT);
	long long took = th_now_ms() - t0;
	cr_assert_geq(took, 390, "returned %lld ms before the deadline", 400 - took);
	cr_assert_leq(took, 400 + DMT_LATE_MS, "returned %lld ms late", took - 400);
	dmt_deadline_in(CLOCK_MONOTONIC, 300, &ts);
	cr_assert_eq(dmutex_clocklock(&b.m, CLOCK_MONOTONIC, &ts), ETIMEDOUT);
	cr_assert_eq(dmutex_unlock(&a.m), 0);
	dmt_deadline_in(CLOCK_REALTIME, 5000, &ts);
	cr_assert_eq(dmutex_timedlock(&b.m, &ts), 0);
	cr_assert_eq(dmutex_unlock(&b.m), 0);
	pm_close(&a);
	pm_close(&b);
}

/* A thread that locks, then holds until told to unlock (a hold is its
 * thread's: one that exits holding is released by the library). */
struct waiter {
	dmutex_t *m;
	atomic_int got, release;
	atomic_llong at;
	int rc, urc;
};

static int told_to_release(void *arg)
{
	return atomic_load(&((struct waiter *)arg)->release);
}

static void *wait_lock(void *arg)
{
	struct waiter *w = arg;
	w->rc = dmutex_lock(w->m);
	atomic_store(&w->at, th_now_ms());
	atomic_store(&w->got, 1);
	if (w->rc == 0) {
		th_wait_until(told_to_release, w, 60000);
		w->urc = dmutex_unlock(w->m);
	}
	return NULL;
}

static int waiter_got(void *arg)
{
	return atomic_load(&((struct waiter *)arg)->got);
}

/* A blocked locker wakes on the release (a watch), not at its lease or a
 * poll: the hand-off comes within DMT_LATE_MS of the unlock. */
Test(etcd, unlock_wakes_a_blocked_waiter)
{
	struct pm a, b;
	pm_open(&a, url, "t-handoff", NULL);
	pm_open(&b, url, "t-handoff", NULL);
	cr_assert_eq(dmutex_lock(&a.m), 0);
	struct waiter w = { .m = &b.m };
	pthread_t t;
	pthread_create(&t, NULL, wait_lock, &w);
	/* let the waiter queue (there is no state to poll for that through the
	 * API); the test holds either way, this only makes it test a wait */
	dmt_pass_time_ms(300);
	cr_assert_eq(atomic_load(&w.got), 0, "locked while held");
	long long t0 = th_now_ms();
	cr_assert_eq(dmutex_unlock(&a.m), 0);
	cr_assert(th_wait_until(waiter_got, &w, 5000), "the waiter was not woken");
	cr_assert_eq(w.rc, 0);
	cr_assert_leq(atomic_load(&w.at) - t0, DMT_LATE_MS, "woken %lld ms after the unlock",
	              atomic_load(&w.at) - t0);
	cr_assert_eq(dmutex_trylock(&a.m), EBUSY);
	atomic_store(&w.release, 1);
	pthread_join(t, NULL);
	cr_assert_eq(w.urc, 0);
	cr_assert_eq(dmutex_trylock(&a.m), 0);
	cr_assert_eq(dmutex_unlock(&a.m), 0);
	pm_close(&a);
	pm_close(&b);
}

/* Waiters queue by revision: every mutex over etcd is first come, first
 * served (dmutex.h says so). */
Test(etcd, waiters_are_served_in_arrival_order)
{
	enum { N = 3 };
	struct pm a, w[N];
	pm_open(&a, url, "t-fifo", NULL);
	cr_assert_eq(dmutex_lock(&a.m), 0);
	struct waiter ws[N];
	pthread_t t[N];
	for (int i = 0; i < N; i++) {
		pm_open(&w[i], url, "t-fifo", NULL);
		ws[i] = (struct waiter){ .m = &w[i].m };
		pthread_create(&t[i], NULL, wait_lock, &ws[i]);
		dmt_pass_time_ms(300); /* arrival order, as above */
	}
	cr_assert_eq(dmutex_unlock(&a.m), 0);
	for (int i = 0; i < N; i++) {
		cr_assert(th_wait_until(waiter_got, &ws[i], 5000), "waiter %d not served", i);
		cr_assert_eq(ws[i].rc, 0);
		for (int k = i + 1; k < N; k++)
			cr_assert_eq(atomic_load(&ws[k].got), 0, "waiter %d served before %d", k, i);
		atomic_store(&ws[i].release, 1);
		pthread_join(t[i], NULL);
		cr_assert_eq(ws[i].urc, 0);
	}
	for (int i = 0; i < N; i++)
		pm_close(&w[i]);
	pm_close(&a);
}

/* The queue of the lock "t-reuse": two keys in it (a holder and one
 * waiter). */
static int two_queued(void *arg)
{
	(void)arg;
	return th_etcd_count_prefix(&etcd, 0, "dmutex:m/7:t-reuse/q/") == 2;
}

static int queue_empty(void *arg)
{
	(void)arg;
	return th_etcd_count_prefix(&etcd, 0, "dmutex:m/7:t-reuse/q/") == 0;
}

/* A client's next hold of a name puts the key of its last (README "etcd":
 * the keys), so a deletion of that key seen long ago must not hand the
 * lock to the waiter behind its new hold: y sees x's first key deleted
 * (and takes the lock), x queues the same key again behind y and gets
 * the lock, and y, second behind that key, must wait for its new
 * deletion, not take the lock on the old one. */
Test(etcd, a_key_used_again_is_not_gone_for_its_old_deletion)
{
	struct pm x, y;
	char k1[256], k2[256], v[256];
	long long rev1, rev2;
	pm_open(&x, url, "t-reuse", NULL);
	pm_open(&y, url, "t-reuse", NULL);
	cr_assert_eq(dmutex_lock(&x.m), 0);
	cr_assert_eq(th_etcd_first_kv(&etcd, 0, "dmutex:m/7:t-reuse/q/", k1, sizeof k1, v, sizeof v,
	                              &rev1, NULL), 1);
	struct waiter wy = { .m = &y.m }, wx = { .m = &x.m };
	pthread_t ty, tx;
	pthread_create(&ty, NULL, wait_lock, &wy);
	cr_assert(th_wait_until(two_queued, NULL, 5000), "y did not queue");
	cr_assert_eq(dmutex_unlock(&x.m), 0);
	cr_assert(th_wait_until(waiter_got, &wy, 5000), "y was not woken");
	cr_assert_eq(wy.rc, 0);
	pthread_create(&tx, NULL, wait_lock, &wx);
	cr_assert(th_wait_until(two_queued, NULL, 5000), "x did not queue");
	atomic_store(&wy.release, 1);
	pthread_join(ty, NULL);
	cr_assert_eq(wy.urc, 0);
	cr_assert(th_wait_until(waiter_got, &wx, 5000), "x was not woken");
	cr_assert_eq(wx.rc, 0);
	cr_assert_eq(th_etcd_first_kv(&etcd, 0, "dmutex:m/7:t-reuse/q/", k2, sizeof k2, v, sizeof v,
	                              &rev2, NULL), 1);
	cr_assert_str_eq(k2, k1, "x's second hold has a key of its own: nothing reused");
	cr_assert_gt(rev2, rev1);
	struct timespec ts;
	dmt_deadline_in(CLOCK_REALTIME, 1500, &ts);
	cr_assert_eq(dmutex_timedlock(&y.m, &ts), ETIMEDOUT, "y took the lock x holds");
	atomic_store(&wx.release, 1);
	pthread_join(tx, NULL);
	cr_assert_eq(wx.urc, 0);
	/* y's timed lock gives its queued key back in the background (the
	 * try cut short, README "How late a timed call returns"); until that
	 * lands the key stands first in the queue, and a trylock with a new
	 * token is rightly busy (seen once in CI). */
	cr_assert(th_wait_until(queue_empty, NULL, 5000), "a key stayed queued after both left");
	cr_assert_eq(dmutex_trylock(&y.m), 0);
	cr_assert_eq(dmutex_unlock(&y.m), 0);
	pm_close(&x);
	pm_close(&y);
}

/* ------------------------------------------------------------------ */
/* types                                                               */
/* ------------------------------------------------------------------ */

Test(etcd, recursive_counts_depth)
{
	struct pm a, b;
	struct dmt_attr rec = { .type = DMUTEX_RECURSIVE };
	pm_open(&a, url, "t-rec", &rec);
	pm_open(&b, url, "t-rec", NULL);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(dmutex_lock(&a.m), 0, "depth %d", i + 1);
	cr_assert_eq(dmutex_trylock(&a.m), 0, "a recursive owner's trylock");
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(dmutex_unlock(&a.m), 0);
		cr_assert_eq(dmutex_trylock(&b.m), EBUSY, "free at depth %d", 3 - i);
	}
	cr_assert_eq(dmutex_unlock(&a.m), 0);
	cr_assert_eq(dmutex_unlock(&a.m), EPERM);
	cr_assert_eq(dmutex_trylock(&b.m), 0);
	cr_assert_eq(dmutex_unlock(&b.m), 0);
	pm_close(&a);
	pm_close(&b);
}

static void *unlock_other_thread(void *arg)
{
	return (void *)(intptr_t)dmutex_unlock(arg);
}

Test(etcd, errorcheck_reports_misuse)
{
	struct pm a;
	struct dmt_attr chk = { .type = DMUTEX_ERRORCHECK };
	pm_open(&a, url, "t-chk", &chk);
	cr_assert_eq(dmutex_unlock(&a.m), EPERM);
	cr_assert_eq(dmutex_lock(&a.m), 0);
	cr_assert_eq(dmutex_lock(&a.m), EDEADLK);
	pthread_t t;
	void *rc;
	pthread_create(&t, NULL, unlock_other_thread, &a.m);
	pthread_join(t, &rc);
	cr_assert_eq((int)(intptr_t)rc, EPERM, "another thread's unlock");
	cr_assert_eq(dmutex_unlock(&a.m), 0);
	pm_close(&a);
}

/* ------------------------------------------------------------------ */
/* robust: a holder process killed                                     */
/* ------------------------------------------------------------------ */

/* Child: lock the robust mutex of arg ("URL NAME FD"), say so with a byte
 * on the pipe FD, then wait to be killed. */
static int hold_and_wait(const char *arg)
{
	char u[512], name[64];
	int fd;
	if (sscanf(arg, "%511s %63s %d", u, name, &fd) != 3)
		return 90;
	struct pm p;
	struct dmt_attr a = { .robust = DMUTEX_ROBUST };
	if (dmt_open_mutex(&p.c, &p.m, u, name, &a) != 0)
		return 91;
	if (dmutex_lock(&p.m) != 0)
		return 92;
	if (write(fd, "h", 1) != 1)
		return 93;
	for (;;)
		pause();
}
TH_CHILD_ENTRY(etcd_holder, hold_and_wait)

/* Child: a read share of the rwlock of arg ("URL NAME FD"), a byte on
 * FD, then wait to be killed. */
static int read_and_wait(const char *arg)
{
	char u[512], name[64];
	int fd;
	if (sscanf(arg, "%511s %63s %d", u, name, &fd) != 3)
		return 90;
	dmutex_client_t *c;
	dmutex_attr_t a;
	drwlock_t rw;
	if (dmutex_client_open(&c, u) || dmutex_attr_init(&a) || dmutex_attr_setclient(&a, c) ||
	    drwlock_init(&rw, name, &a))
		return 91;
	if (drwlock_rdlock(&rw) != 0)
		return 92;
	if (write(fd, "r", 1) != 1)
		return 93;
	for (;;)
		pause();
}
TH_CHILD_ENTRY(etcd_reader, read_and_wait)

/* Start a child holding NAME (robust), with the URL's lease. */
static void child_runs(const char *entry, const char *u, const char *name)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	char arg[700];
	snprintf(arg, sizeof arg, "%s %s %d", u, name, p[1]);
	child_pid = th_spawn_exec(entry, arg);
	close(p[1]);
	struct pollfd pf = { .fd = p[0], .events = POLLIN };
	char c;
	cr_assert_eq(poll(&pf, 1, 10000 * dmt_slowdown()), 1, "the child did not lock");
	/* (a child that failed closes the pipe: poll says 1, read 0) */
	cr_assert_eq(read(p[0], &c, 1), 1, "the child did not lock (exit %d)",
	             th_wait_child(child_pid, 1000));
	close(p[0]);
}

static void child_holds(const char *u, const char *name)
{
	child_runs("etcd_holder", u, name);
}

Test(etcd, robust_holder_killed_gives_eownerdead)
{
	char u[600];
	snprintf(u, sizeof u, "%s&lease_ms=2000", url);
	child_holds(u, "t-robust");
	struct pm a, plain;
	struct dmt_attr r = { .robust = DMUTEX_ROBUST };
	pm_open(&a, u, "t-robust", &r);
	pm_open(&plain, u, "t-robust", NULL);
	cr_assert_eq(dmutex_trylock(&a.m), EBUSY);
	kill(child_pid, SIGKILL);
	cr_assert_eq(th_wait_child(child_pid, 5000), 128 + SIGKILL);
	child_pid = 0;
	long long t0 = th_now_ms();
	cr_assert_eq(dmutex_lock(&a.m), EOWNERDEAD);
	/* the lease (2 s, etcd's minimum) ends, etcd deletes the key */
	cr_assert_leq(th_now_ms() - t0, 2000 + 2 * DMT_LATE_MS, "took %lld ms", th_now_ms() - t0);
	cr_assert_eq(dmutex_consistent(&a.m), 0);
	cr_assert_eq(dmutex_unlock(&a.m), 0);
	cr_assert_eq(dmutex_lock(&a.m), 0, "a clean unlock is not a death");
	cr_assert_eq(dmutex_unlock(&a.m), 0);
	cr_assert_eq(dmutex_trylock(&plain.m), 0);
	cr_assert_eq(dmutex_unlock(&plain.m), 0);
	pm_close(&a);
	pm_close(&plain);
}

Test(etcd, robust_unlock_without_consistent_is_not_recoverable)
{
	char u[600];
	snprintf(u, sizeof u, "%s&lease_ms=2000", url);
	child_holds(u, "t-notrec");
	kill(child_pid, SIGKILL);
	cr_assert_eq(th_wait_child(child_pid, 5000), 128 + SIGKILL);
	child_pid = 0;
	struct pm a, b;
	struct dmt_attr r = { .robust = DMUTEX_ROBUST };
	pm_open(&a, u, "t-notrec", &r);
	pm_open(&b, u, "t-notrec", &r);
	cr_assert_eq(dmutex_lock(&a.m), EOWNERDEAD);
	cr_assert_eq(dmutex_unlock(&a.m), 0);
	cr_assert_eq(dmutex_lock(&b.m), ENOTRECOVERABLE);
	cr_assert_eq(dmutex_trylock(&a.m), ENOTRECOVERABLE);
	pm_close(&a);
	pm_close(&b);
}

/* ------------------------------------------------------------------ */
/* fencing, leases                                                     */
/* ------------------------------------------------------------------ */

/* The token is the revision that created the hold's key: strictly
 * increasing over every hold of every name of the cluster. */
Test(etcd, fence_tokens_increase_across_names)
{
	struct pm a, b;
	pm_open(&a, url, "t-fence-a", NULL);
	pm_open(&b, url, "t-fence-b", NULL);
	uint64_t last = 0, tok, again;
	for (int i = 0; i < 6; i++) {
		struct pm *p = i % 2 ? &b : &a;
		cr_assert_eq(dmutex_lock(&p->m), 0);
		cr_assert_eq(dmutex_fence(&p->m, &tok), 0);
		cr_assert_eq(dmutex_fence(&p->m, &again), 0);
		cr_assert_eq(again, tok, "one hold, one token");
		cr_assert_gt(tok, last, "hold %d: token %llu after %llu", i,
		             (unsigned long long)tok, (unsigned long long)last);
		last = tok;
		cr_assert_eq(dmutex_unlock(&p->m), 0);
	}
	cr_assert_eq(dmutex_fence(&a.m, &tok), EPERM);
	pm_close(&a);
	pm_close(&b);
}

/* etcd's minimum TTL is 1.5 x the election timeout (1 s here), granted in
 * whole seconds: a 1 s lease is granted as 2 s, 2.5 s as whole seconds,
 * and dmutex_getlease says what was granted. */
Test(etcd, lease_is_rounded_up_to_what_etcd_grants)
{
	struct pm a, b;
	struct dmt_attr one = { .lease_ms = 1000 }, odd = { .lease_ms = 2500 };
	dmutex_set_logger(capture_log, NULL);
	pm_open(&a, url, "t-lease-a", &one);
	pm_open(&b, url, "t-lease-b", &odd);
	cr_assert_eq(dmutex_lock(&a.m), 0);
	cr_assert_eq(dmutex_lock(&b.m), 0);
	unsigned la = 0, lb = 0;
	cr_assert_eq(dmutex_getlease(&a.m, &la), 0);
	cr_assert_eq(dmutex_getlease(&b.m, &lb), 0);
	cr_assert_eq(la, 2000, "a 1000 ms lease reported as %u", la);
	cr_assert(lb >= 2500 && lb % 1000 == 0, "a 2500 ms lease reported as %u", lb);
	/* held past the asked-for 1 s: the granted lease is kept alive */
	dmt_pass_time_ms(2500);
	uint64_t tok;
	cr_assert_eq(dmutex_fence(&a.m, &tok), 0);
	cr_assert_eq(dmutex_unlock(&a.m), 0);
	cr_assert_eq(dmutex_unlock(&b.m), 0);
	pthread_mutex_lock(&log_mu);
	cr_assert(strstr(log_text, "lease") != NULL, "the rounding was not logged: %s", log_text);
	pthread_mutex_unlock(&log_mu);
	dmutex_set_logger(NULL, NULL);
	pm_close(&a);
	pm_close(&b);
}

/* ------------------------------------------------------------------ */
/* errors                                                              */
/* ------------------------------------------------------------------ */

Test(etcd, unreachable_is_eio_naming_the_endpoints)
{
	int p1 = th_free_port(), p2 = th_free_port();
	char u[256];
	snprintf(u, sizeof u, "etcd://127.0.0.1:%d,127.0.0.1:%d?connect_timeout_ms=500&command_timeout_ms=1000",
	         p1, p2);
	char n1[32], n2[32];
	snprintf(n1, sizeof n1, "127.0.0.1:%d", p1);
	snprintf(n2, sizeof n2, "127.0.0.1:%d", p2);
	dmutex_set_logger(capture_log, NULL);
	dmutex_client_t *c = NULL;
	long long t0 = th_now_ms();
	cr_assert_eq(dmutex_client_open(&c, u), EIO);
	cr_assert_leq(th_now_ms() - t0, 1000 + DMT_LATE_MS);
	pthread_mutex_lock(&log_mu);
	cr_assert(strstr(log_text, n1) && strstr(log_text, n2), "the log names not both: %s", log_text);
	cr_assert(strstr(log_text, "dmutex_client_open") != NULL, "the URL's source is not named: %s",
	          log_text);
	pthread_mutex_unlock(&log_mu);
	dmutex_set_logger(NULL, NULL);
}

Test(etcd, wrong_password_is_eacces_never_logging_it)
{
	cr_assert_eq(th_etcd_enable_auth(&etcd, "r00tPW", "alice", "alicePW"), 0);
	const char *hostport = etcd.url + strlen("etcd://");
	char bad[600], good[600];
	snprintf(bad, sizeof bad, "etcd://alice:Wr0ngSecret@%s?command_timeout_ms=%d", hostport,
	         th_command_timeout_ms());
	snprintf(good, sizeof good, "etcd://alice:alicePW@%s?command_timeout_ms=%d", hostport,
	         th_command_timeout_ms());
	dmutex_set_logger(capture_log, NULL);
	dmutex_client_t *c = NULL;
	cr_assert_eq(dmutex_client_open(&c, bad), EACCES);
	pthread_mutex_lock(&log_mu);
	cr_assert(strstr(log_text, "alice") != NULL, "the user is not named: %s", log_text);
	cr_assert(strstr(log_text, "etcd") != NULL, "etcd is not named: %s", log_text);
	cr_assert(strstr(log_text, "Wr0ngSecret") == NULL, "the password was logged: %s", log_text);
	pthread_mutex_unlock(&log_mu);
	dmutex_set_logger(NULL, NULL);
	struct pm a;
	pm_open(&a, good, "t-auth", NULL);
	cr_assert_eq(dmutex_lock(&a.m), 0);
	cr_assert_eq(dmutex_unlock(&a.m), 0);
	pm_close(&a);
}

/* ------------------------------------------------------------------ */
/* semaphores and barriers                                             */
/* ------------------------------------------------------------------ */

static dmutex_client_t *open_client(void)
{
	dmutex_client_t *c = NULL;
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	return c;
}

struct sem_waiter {
	dsem_t *s;
	atomic_int done;
	atomic_llong at;
	int rc;
};

static void *sem_wait_thread(void *arg)
{
	struct sem_waiter *w = arg;
	w->rc = dsem_wait(w->s);
	atomic_store(&w->at, th_now_ms());
	atomic_store(&w->done, 1);
	return NULL;
}

static int sem_waiter_done(void *arg)
{
	return atomic_load(&((struct sem_waiter *)arg)->done);
}

Test(etcd, semaphore_counts_and_wakes)
{
	dmutex_client_t *c1 = open_client(), *c2 = open_client();
	dsem_t a, b, x;
	int v = -1;
	cr_assert_eq(dsem_init(&x, "t-sem-missing", 1, c1, DSEM_NOCREATE), ENOENT);
	cr_assert_eq(dsem_init(&a, "t-sem", 2, c1, 0), 0);
	cr_assert_eq(dsem_init(&x, "t-sem", 2, c2, DSEM_EXCL), EEXIST);
	cr_assert_eq(dsem_init(&b, "t-sem", 5, c2, 0), 0, "joins, keeps the first value");
	cr_assert_eq(dsem_getvalue(&b, &v), 0);
	cr_assert_eq(v, 2);
	cr_assert_eq(dsem_trywait(&a), 0);
	cr_assert_eq(dsem_trywait(&b), 0);
	cr_assert_eq(dsem_trywait(&a), EAGAIN);
	cr_assert_eq(dsem_getvalue(&a, &v), 0);
	cr_assert_eq(v, 0);
	struct timespec ts;
	dmt_deadline_in(CLOCK_REALTIME, 300, &ts);
	cr_assert_eq(dsem_timedwait(&b, &ts), ETIMEDOUT);
	struct sem_waiter w = { .s = &b };
	pthread_t t;
	pthread_create(&t, NULL, sem_wait_thread, &w);
	dmt_pass_time_ms(300); /* let it wait (the test holds either way) */
	cr_assert_eq(atomic_load(&w.done), 0, "took a permit there is none of");
	long long t0 = th_now_ms();
	cr_assert_eq(dsem_post(&a), 0);
	cr_assert(th_wait_until(sem_waiter_done, &w, 5000), "the post woke no waiter");
	pthread_join(t, NULL);
	cr_assert_eq(w.rc, 0);
	cr_assert_leq(atomic_load(&w.at) - t0, DMT_LATE_MS);
	cr_assert_eq(dsem_getvalue(&a, &v), 0);
	cr_assert_eq(v, 0);
	cr_assert_eq(dsem_post(&a), 0);
	cr_assert_eq(dsem_post(&b), 0);
	cr_assert_eq(dsem_getvalue(&a, &v), 0);
	cr_assert_eq(v, 2);
	cr_assert_eq(dsem_destroy(&a), 0);
	cr_assert_eq(dsem_destroy(&b), 0);
	cr_assert_eq(dsem_unlink("t-sem", c1), 0);
	cr_assert_eq(dsem_unlink("t-sem", c1), ENOENT);
	dmutex_client_close(c1);
	dmutex_client_close(c2);
}

/* A binary semaphore shared by two clients x two threads: never two
 * inside, no permit lost or made (the compare on the value's revision). */
struct sem_mx {
	dsem_t *s;
	atomic_int *inside, *max_inside;
	int rounds, err;
};

static void *sem_mx_thread(void *arg)
{
	struct sem_mx *m = arg;
	for (int i = 0; i < m->rounds; i++) {
		if ((m->err = dsem_wait(m->s)))
			return NULL;
		int n = atomic_fetch_add(m->inside, 1) + 1;
		if (n > atomic_load(m->max_inside))
			atomic_store(m->max_inside, n);
		atomic_fetch_sub(m->inside, 1);
		if ((m->err = dsem_post(m->s)))
			return NULL;
	}
	return NULL;
}

Test(etcd, semaphore_excludes_under_contention)
{
	dmutex_client_t *c[2] = { open_client(), open_client() };
	dsem_t s[2];
	atomic_int inside = 0, max_inside = 0;
	for (int i = 0; i < 2; i++)
		cr_assert_eq(dsem_init(&s[i], "t-sem-mx", 1, c[i], 0), 0);
	struct sem_mx m[4];
	pthread_t t[4];
	for (int i = 0; i < 4; i++) {
		m[i] = (struct sem_mx){ &s[i % 2], &inside, &max_inside, 10, 0 };
		pthread_create(&t[i], NULL, sem_mx_thread, &m[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(m[i].err, 0, "thread %d: %d", i, m[i].err);
	}
	cr_assert_eq(atomic_load(&max_inside), 1);
	int v = -1;
	cr_assert_eq(dsem_getvalue(&s[0], &v), 0);
	cr_assert_eq(v, 1, "permits after 40 wait/post pairs: %d", v);
	for (int i = 0; i < 2; i++) {
		dsem_destroy(&s[i]);
		dmutex_client_close(c[i]);
	}
}

struct bar_arg {
	dbarrier_t *b;
	int rc[2];
};

static void *bar_thread(void *arg)
{
	struct bar_arg *a = arg;
	for (int i = 0; i < 2; i++)
		a->rc[i] = dbarrier_wait(a->b);
	return NULL;
}

Test(etcd, barrier_releases_all_with_one_serial)
{
	enum { N = 3 };
	dmutex_client_t *c[N];
	dbarrier_t b[N], other;
	struct bar_arg a[N];
	pthread_t t[N];
	for (int i = 0; i < N; i++) {
		c[i] = open_client();
		cr_assert_eq(dbarrier_init(&b[i], "t-bar", N, c[i]), 0);
	}
	cr_assert_eq(dbarrier_init(&other, "t-bar", N + 1, c[0]), EINVAL, "another count");
	for (int i = 0; i < N; i++) {
		a[i] = (struct bar_arg){ &b[i], { -2, -2 } };
		pthread_create(&t[i], NULL, bar_thread, &a[i]);
	}
	for (int i = 0; i < N; i++)
		pthread_join(t[i], NULL);
	for (int cycle = 0; cycle < 2; cycle++) {
		int serial = 0;
		for (int i = 0; i < N; i++) {
			cr_assert(a[i].rc[cycle] == 0 || a[i].rc[cycle] == DBARRIER_SERIAL_THREAD,
			          "cycle %d, waiter %d: %d", cycle, i, a[i].rc[cycle]);
			serial += a[i].rc[cycle] == DBARRIER_SERIAL_THREAD;
		}
		cr_assert_eq(serial, 1, "cycle %d: %d serial waiters", cycle, serial);
	}
	for (int i = 0; i < N; i++) {
		dbarrier_destroy(&b[i]);
		dmutex_client_close(c[i]);
	}
}

/* ------------------------------------------------------------------ */
/* read-write locks                                                    */
/* ------------------------------------------------------------------ */

struct rw_arg {
	drwlock_t *rw;
	int write;
	atomic_int got, release;
	int rc, urc;
	uint64_t fence;
};

static int rw_told(void *arg)
{
	return atomic_load(&((struct rw_arg *)arg)->release);
}

static int rw_got(void *arg)
{
	return atomic_load(&((struct rw_arg *)arg)->got);
}

/* Take (blocking), hold until told, unlock: the hold is this thread's. */
static void *rw_thread(void *arg)
{
	struct rw_arg *a = arg;
	a->rc = a->write ? drwlock_wrlock(a->rw) : drwlock_rdlock(a->rw);
	if (a->rc == 0 && a->write)
		drwlock_fence(a->rw, &a->fence);
	atomic_store(&a->got, 1);
	if (a->rc == 0) {
		th_wait_until(rw_told, a, 60000);
		a->urc = drwlock_unlock(a->rw);
	}
	return NULL;
}

static void rw_open(dmutex_client_t **c, drwlock_t *rw, const char *name)
{
	dmutex_attr_t at;
	*c = open_client();
	cr_assert_eq(dmutex_attr_init(&at), 0);
	cr_assert_eq(dmutex_attr_setclient(&at, *c), 0);
	cr_assert_eq(drwlock_init(rw, name, &at), 0);
	dmutex_attr_destroy(&at);
}

/* Readers share; a writer excludes them and waits for them; a waiting
 * writer holds new readers back (writer preference); fences increase. */
Test(etcd, rwlock_shares_and_prefers_writers)
{
	enum { N = 3 };
	dmutex_client_t *c[N];
	drwlock_t rw[N];
	for (int i = 0; i < N; i++)
		rw_open(&c[i], &rw[i], "t-rw");
	/* two readers of two clients at once */
	cr_assert_eq(drwlock_tryrdlock(&rw[0]), 0);
	cr_assert_eq(drwlock_tryrdlock(&rw[1]), 0);
	cr_assert_eq(drwlock_trywrlock(&rw[2]), EBUSY);
	/* a writer waits for them ... */
	struct rw_arg w = { .rw = &rw[2], .write = 1 };
	pthread_t tw;
	pthread_create(&tw, NULL, rw_thread, &w);
	dmt_pass_time_ms(500);  /* it queues its intent (the test holds either way) */
	cr_assert_eq(atomic_load(&w.got), 0, "a writer got in beside readers");
	/* ... and holds a new reader back */
	cr_assert_eq(drwlock_unlock(&rw[1]), 0);
	cr_assert_eq(drwlock_tryrdlock(&rw[1]), EBUSY, "a reader passed a waiting writer");
	cr_assert_eq(drwlock_unlock(&rw[0]), 0);
	cr_assert(th_wait_until(rw_got, &w, 5000), "the writer was not woken");
	cr_assert_eq(w.rc, 0);
	cr_assert_eq(drwlock_tryrdlock(&rw[0]), EBUSY);
	cr_assert_eq(drwlock_trywrlock(&rw[1]), EBUSY);
	atomic_store(&w.release, 1);
	pthread_join(tw, NULL);
	cr_assert_eq(w.urc, 0);
	/* free again: a writer, then a reader */
	uint64_t f2 = 0;
	cr_assert_eq(drwlock_trywrlock(&rw[1]), 0);
	cr_assert_eq(drwlock_fence(&rw[1], &f2), 0);
	cr_assert_gt(f2, w.fence, "fence %llu after %llu", (unsigned long long)f2,
	             (unsigned long long)w.fence);
	cr_assert_eq(drwlock_unlock(&rw[1]), 0);
	cr_assert_eq(drwlock_tryrdlock(&rw[0]), 0);
	cr_assert_eq(drwlock_unlock(&rw[0]), 0);
	for (int i = 0; i < N; i++) {
		drwlock_destroy(&rw[i]);
		dmutex_client_close(c[i]);
	}
}

/* ------------------------------------------------------------------ */
/* condition variables                                                 */
/* ------------------------------------------------------------------ */

/* A waiter: its own client, mutex and condition variable of the names
 * shared by all; waits until the shared counter in etcd's stead (an
 * atomic here: the test is about wake-ups) reaches its goal. */
struct cwaiter {
	dmutex_client_t *c;
	dmutex_t m;
	dcond_t cv;
	atomic_int *ready, *state;
	atomic_int woken;
	int rc;
};

static void *cond_waiter(void *arg)
{
	struct cwaiter *w = arg;
	if ((w->rc = dmutex_lock(&w->m)))
		return NULL;
	atomic_fetch_add(w->ready, 1);
	while (atomic_load(w->state) == 0 && !w->rc)
		w->rc = dcond_wait(&w->cv, &w->m);
	atomic_store(&w->woken, 1);
	if (!w->rc)
		w->rc = dmutex_unlock(&w->m);
	return NULL;
}

static void cw_open(struct cwaiter *w, atomic_int *ready, atomic_int *state)
{
	dcond_attr_t ca;
	dmutex_attr_t ma;
	*w = (struct cwaiter){ .c = open_client() };
	w->ready = ready;
	w->state = state;
	cr_assert_eq(dmutex_attr_init(&ma), 0);
	cr_assert_eq(dmutex_attr_setclient(&ma, w->c), 0);
	cr_assert_eq(dmutex_init(&w->m, "t-cv-mutex", &ma), 0);
	cr_assert_eq(dcond_attr_init(&ca), 0);
	cr_assert_eq(dcond_attr_setclient(&ca, w->c), 0);
	cr_assert_eq(dcond_init(&w->cv, "t-cv", &ca), 0);
	dmutex_attr_destroy(&ma);
	dcond_attr_destroy(&ca);
}

static int count_woken(struct cwaiter *w, int n)
{
	int k = 0;
	for (int i = 0; i < n; i++)
		k += atomic_load(&w[i].woken);
	return k;
}

struct woken_at_least {
	struct cwaiter *w;
	int n, want;
};

static int woken_reached(void *arg)
{
	struct woken_at_least *a = arg;
	return count_woken(a->w, a->n) >= a->want;
}

static int ready_reached(void *arg)
{
	return atomic_load((atomic_int *)arg) >= 3;
}

/* signal wakes one waiter of another client, broadcast the rest; a timed
 * wait nobody signals times out. */
Test(etcd, cond_signal_wakes_one_broadcast_all)
{
	enum { N = 3 };
	atomic_int ready = 0, state = 0;
	struct cwaiter w[N + 1];
	pthread_t t[N];
	for (int i = 0; i <= N; i++)
		cw_open(&w[i], &ready, &state);
	for (int i = 0; i < N; i++)
		pthread_create(&t[i], NULL, cond_waiter, &w[i]);
	cr_assert(th_wait_until(ready_reached, &ready, 10000), "waiters did not start");
	/* each waiter registers before it releases the mutex: once we hold
	 * the mutex, every one that said ready is registered */
	dmt_pass_time_ms(300);
	struct cwaiter *s = &w[N];
	cr_assert_eq(dmutex_lock(&s->m), 0);
	atomic_store(&state, 1);
	cr_assert_eq(dcond_signal(&s->cv), 0);
	cr_assert_eq(dmutex_unlock(&s->m), 0);
	struct woken_at_least one = { w, N, 1 };
	cr_assert(th_wait_until(woken_reached, &one, 5000), "the signal woke nobody");
	dmt_pass_time_ms(500); /* a second wake-up would show by now */
	cr_assert_eq(count_woken(w, N), 1, "one signal woke %d", count_woken(w, N));
	cr_assert_eq(dcond_broadcast(&s->cv), 0);
	struct woken_at_least all = { w, N, N };
	cr_assert(th_wait_until(woken_reached, &all, 5000), "the broadcast left waiters asleep");
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(w[i].rc, 0, "waiter %d: %d", i, w[i].rc);
	}
	/* nobody signals: a timed wait times out, holding the mutex again */
	struct timespec ts;
	cr_assert_eq(dmutex_lock(&s->m), 0);
	dmt_deadline_in(CLOCK_REALTIME, 400, &ts);
	cr_assert_eq(dcond_timedwait(&s->cv, &s->m, &ts), ETIMEDOUT);
	cr_assert_eq(dmutex_unlock(&s->m), 0);
	for (int i = 0; i <= N; i++) {
		dcond_destroy(&w[i].cv);
		dmt_close_mutex(w[i].c, &w[i].m);
	}
}

struct at_least { atomic_int *n; int want; };

static int count_reached(void *arg)
{
	struct at_least *a = arg;
	return atomic_load(a->n) >= a->want;
}

static void unlock_cleanup(void *arg)
{
	dmutex_unlock(arg);
}

static void *cancelled_cond_waiter(void *arg)
{
	struct cwaiter *w = arg;

	if ((w->rc = dmutex_lock(&w->m)))
		return NULL;
	pthread_cleanup_push(unlock_cleanup, &w->m);
	atomic_fetch_add(w->ready, 1);
	for (;;)
		dcond_wait(&w->cv, &w->m);
	pthread_cleanup_pop(1);
	return NULL;
}

/* A thread cancelled in its condition wait (a cancellation point) leaves
 * the wake-up machinery free: it ends, its cleanup runs holding the mutex,
 * and the next waiter is still woken.  Before, the cancelled wait left the
 * watch's mutex locked and the thread and the listener stuck on it. */
Test(etcd, cancelled_cond_wait_ends_and_leaves_wakeups_working)
{
	atomic_int ready = 0, state = 0;
	struct cwaiter w[3];
	struct timespec at;
	void *ret = NULL;
	pthread_t t, u;

	for (int i = 0; i < 3; i++)
		cw_open(&w[i], &ready, &state);
	cr_assert_eq(pthread_create(&t, NULL, cancelled_cond_waiter, &w[0]), 0);
	struct at_least first = { &ready, 1 };
	cr_assert(th_wait_until(count_reached, &first, 10000), "the waiter did not start");
	/* Holding the mutex: the waiter is registered and asleep. */
	cr_assert_eq(dmutex_lock(&w[2].m), 0);
	cr_assert_eq(pthread_cancel(t), 0);
	cr_assert_eq(dmutex_unlock(&w[2].m), 0);
	clock_gettime(CLOCK_REALTIME, &at);
	at.tv_sec += 15;
	cr_assert_eq(pthread_timedjoin_np(t, &ret, &at), 0, "the cancelled waiter did not end");
	cr_assert_eq(ret, PTHREAD_CANCELED);

	cr_assert_eq(pthread_create(&u, NULL, cond_waiter, &w[1]), 0);
	struct at_least second = { &ready, 2 };
	cr_assert(th_wait_until(count_reached, &second, 10000), "the next waiter did not start");
	cr_assert_eq(dmutex_lock(&w[2].m), 0);
	atomic_store(&state, 1);
	cr_assert_eq(dcond_broadcast(&w[2].cv), 0);
	cr_assert_eq(dmutex_unlock(&w[2].m), 0);
	struct woken_at_least one = { &w[1], 1, 1 };
	cr_assert(th_wait_until(woken_reached, &one, 10000), "the next waiter was not woken");
	pthread_join(u, NULL);
	cr_assert_eq(w[1].rc, 0);
	for (int i = 0; i < 3; i++) {
		dcond_destroy(&w[i].cv);
		dmt_close_mutex(w[i].c, &w[i].m);
	}
}

/* A reader's process killed: its share goes with its lease, and a writer
 * waiting for it gets in within that lease (2 s granted, its etcd lease a
 * second longer), not never. */
Test(etcd, rwlock_dead_readers_share_ends_with_its_lease)
{
	char u[600];
	snprintf(u, sizeof u, "%s&lease_ms=2000", url);
	child_runs("etcd_reader", u, "t-rw-dead");
	dmutex_client_t *c = NULL;
	drwlock_t rw;
	dmutex_attr_t a;
	cr_assert_eq(dmutex_client_open(&c, u), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	cr_assert_eq(drwlock_init(&rw, "t-rw-dead", &a), 0);
	cr_assert_eq(drwlock_trywrlock(&rw), EBUSY);
	kill(child_pid, SIGKILL);
	cr_assert_eq(th_wait_child(child_pid, 5000), 128 + SIGKILL);
	child_pid = 0;
	long long t0 = th_now_ms();
	struct timespec ts;
	dmt_deadline_in(CLOCK_REALTIME, 15000, &ts);
	cr_assert_eq(drwlock_timedwrlock(&rw, &ts), 0);
	long long took = th_now_ms() - t0;
	cr_assert_leq(took, 3000 + DMT_LATE_MS, "the writer waited %lld ms", took);
	cr_assert_eq(drwlock_unlock(&rw), 0);
	drwlock_destroy(&rw);
	dmutex_attr_destroy(&a);
	dmutex_client_close(c);
}

/* ------------------------------------------------------------------ */
/* a member that answers nonsense                                      */
/* ------------------------------------------------------------------ */

/* A fake member: every HTTP request on 127.0.0.1:port gets `body` with
 * status 200 (keep-alive), until stop. */
struct fake_member {
	int lfd, port;
	const char *body;
	atomic_int stop;
	pthread_t t;
};

static void fake_serve(struct fake_member *f, int fd)
{
	char buf[65536];
	size_t have = 0;
	while (!atomic_load(&f->stop)) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 100) <= 0)
			continue;
		ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
		if (n <= 0)
			return;
		have += (size_t)n;
		buf[have] = '\0';
		char *end = strstr(buf, "\r\n\r\n");
		if (!end)
			continue;
		char *cl = strcasestr(buf, "content-length:");
		size_t need = (size_t)(end + 4 - buf) + (cl && cl < end ? strtoul(cl + 15, NULL, 10) : 0);
		if (have < need)
			continue;
		char rep[512];
		int len = snprintf(rep, sizeof rep, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
		                   "Content-Length: %zu\r\n\r\n%s", strlen(f->body), f->body);
		if (write(fd, rep, (size_t)len) != len)
			return;
		memmove(buf, buf + need, have - need);
		have -= need;
	}
}

static void *fake_run(void *arg)
{
	struct fake_member *f = arg;
	while (!atomic_load(&f->stop)) {
		struct pollfd p = { .fd = f->lfd, .events = POLLIN };
		if (poll(&p, 1, 100) <= 0)
			continue;
		int fd = accept(f->lfd, NULL, NULL);
		if (fd >= 0) {
			fake_serve(f, fd);
			close(fd);
		}
	}
	return NULL;
}

static void fake_start(struct fake_member *f, const char *body)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof sa;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	f->body = body;
	atomic_store(&f->stop, 0);
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(f->lfd, 0);
	cr_assert_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
	cr_assert_eq(listen(f->lfd, 16), 0);
	cr_assert_eq(getsockname(f->lfd, (struct sockaddr *)&sa, &sl), 0);
	f->port = ntohs(sa.sin_port);
	pthread_create(&f->t, NULL, fake_run, f);
}

static void fake_stop(struct fake_member *f)
{
	atomic_store(&f->stop, 1);
	pthread_join(f->t, NULL);
	close(f->lfd);
}

/* Whatever shape the answers have, the calls end with an error (EIO,
 * EACCES for an answer that reads as a refusal, EBUSY for a queue it
 * cannot read as ours), never a crash nor a lock taken on nonsense. */
Test(etcd, a_member_answering_nonsense_is_an_error_not_a_crash)
{
	/* the first few fail the open's check; the others pass it and the
	 * lease grant, then answer the lock's txn with nonsense */
#define V "\"version\":\"3.4.23\",\"ID\":\"7\",\"TTL\":\"10\""
	static const char *bodies[] = { "not json", "[1,2]", "{}", "{\"header\":7}",
		"{" V "}", "{" V ",\"succeeded\":true}",
		"{" V ",\"succeeded\":true,\"responses\":[{\"response_put\":{}}]}",
		"{" V ",\"succeeded\":true,\"responses\":7,\"header\":{\"revision\":\"x\"}}",
		"{" V ",\"responses\":[{\"response_range\":{\"kvs\":[{\"key\":\"!!\"}]}}]}",
		"{" V ",\"responses\":[{},{},{},{}]}" };
#undef V
	for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
		struct fake_member f;
		char u[200];
		fake_start(&f, bodies[i]);
		snprintf(u, sizeof u, "etcd://127.0.0.1:%d?command_timeout_ms=500&connect_timeout_ms=500",
		         f.port);
		dmutex_client_t *c = NULL;
		int rc = dmutex_client_open(&c, u);
		if (rc == 0) {
			dmutex_t m;
			cr_assert_eq(dmt_init_mutex(&m, "t-nonsense", c, NULL), 0);
			int lr = dmutex_trylock(&m);
			/* EBUSY: a queue whose head is not ours (unreadable) */
			cr_assert(lr == EIO || lr == EBUSY, "answer %s: trylock said %d", bodies[i], lr);
			dmutex_destroy(&m);
			dmutex_client_close(c);
		} else {
			cr_assert(rc == EIO || rc == EACCES, "answer %s: open said %d", bodies[i], rc);
		}
		fake_stop(&f);
	}
}

/* ------------------------------------------------------------------ */
/* renewal at scale                                                    */
/* ------------------------------------------------------------------ */

static long long keepalives(void)
{
	return th_etcd_metric(&etcd, 0, "grpc_server_handled_total",
	                      "grpc_method=\"LeaseKeepAlive\"");
}

/* Holds of one client with one lease length share one etcd lease: 400
 * holds kept for several renewal periods cost a handful of keep-alives
 * (one per period), not one per hold; and every hold is still valid. */
Test(etcd, many_holds_share_one_lease_keepalive)
{
	enum { N = 400 };
	char u[600];
	snprintf(u, sizeof u, "%s&lease_ms=2000", url);
	dmutex_client_t *c = NULL;
	cr_assert_eq(dmutex_client_open(&c, u), 0);
	static dmutex_t m[N];
	for (int i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof name, "t-many-%d", i);
		cr_assert_eq(dmt_init_mutex(&m[i], name, c, NULL), 0);
		cr_assert_eq(dmutex_lock(&m[i]), 0, "hold %d", i);
	}
	long long k0 = keepalives();
	cr_assert_geq(k0, 0, "etcd's /metrics unreadable");
	/* three leases' worth of renewals */
	dmt_pass_time_ms(6000);
	long long k = keepalives() - k0;
	cr_log_info("%d holds, 6 s: %lld keep-alives", N, k);
	cr_assert_geq(k, 1, "no keep-alive at all: the holds were not renewed");
	/* The renewal thread renews every third of the lease, holds due
	 * within an eighth of that riding together: up to ~9 batches a
	 * period, but a batch sends no keep-alive if one went out less than
	 * a sixth of the lease ago (lease.c): at most one per 333 ms, 18 in
	 * 6 s, whatever the number of holds.  One per hold would be ~3600,
	 * one per batch up to ~80. */
	cr_assert_leq(k, 6000 / (2000 / 6) + 4, "%lld keep-alives for %d holds in 6 s: more than "
	              "one per sixth of the lease", k, N);
	for (int i = 0; i < N; i++) {
		uint64_t tok;
		cr_assert_eq(dmutex_fence(&m[i], &tok), 0, "hold %d lost", i);
		cr_assert_eq(dmutex_unlock(&m[i]), 0, "hold %d", i);
		dmutex_destroy(&m[i]);
	}
	dmutex_client_close(c);
}

/* A fair mutex (dmutex_attr_setfair) over etcd: every etcd mutex queues
 * anyway; the attribute is accepted and the hand-off goes to the waiter. */
Test(etcd, fair_mutex_hands_off_to_its_waiter)
{
	struct pm a, b;
	dmutex_attr_t at;
	for (int i = 0; i < 2; i++) {
		struct pm *p = i ? &b : &a;
		cr_assert_eq(dmutex_client_open(&p->c, url), 0);
		cr_assert_eq(dmutex_attr_init(&at), 0);
		cr_assert_eq(dmutex_attr_setclient(&at, p->c), 0);
		cr_assert_eq(dmutex_attr_setfair(&at, 1), 0);
		cr_assert_eq(dmutex_init(&p->m, "t-fair", &at), 0);
		dmutex_attr_destroy(&at);
	}
	cr_assert_eq(dmutex_lock(&a.m), 0);
	struct waiter w = { .m = &b.m };
	pthread_t t;
	pthread_create(&t, NULL, wait_lock, &w);
	dmt_pass_time_ms(300); /* let it queue (the test holds either way) */
	cr_assert_eq(dmutex_unlock(&a.m), 0);
	cr_assert(th_wait_until(waiter_got, &w, 5000), "the fair waiter was not served");
	cr_assert_eq(w.rc, 0);
	cr_assert_eq(dmutex_trylock(&a.m), EBUSY);
	atomic_store(&w.release, 1);
	pthread_join(t, NULL);
	cr_assert_eq(w.urc, 0);
	cr_assert_eq(dmutex_trylock(&a.m), 0);
	cr_assert_eq(dmutex_unlock(&a.m), 0);
	pm_close(&a);
	pm_close(&b);
}
