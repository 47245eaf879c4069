/*
 * Per-lock counters (issue 17.7): gathered in the process, added to Redis
 * by the renewal thread (not per acquisition), read back by the process
 * (dmutex_client_metrics) and by every operator (`dmutex metrics`, in the
 * Prometheus text format that promtool accepts, and over HTTP).
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dmutex.h"
#include "dmt.h"
#include "harness.h"

static struct th_redis srv;
static char tmpdir[256];
static pid_t listener_pid;      /* a `metrics --listen` a failed test left */

static void
up(void)
{
	cr_assert(getenv("DMUTEX_BIN"), "DMUTEX_BIN is not set (run through meson test)");
	cr_assert_eq(th_redis_start(&srv, NULL), 0, "redis-server did not start");
	snprintf(tmpdir, sizeof tmpdir, "%s/dmutex-metrics-XXXXXX",
			getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	cr_assert(mkdtemp(tmpdir));
	setenv("DMUTEX_URL", srv.url, 1);
	setenv("DMUTEX_LOG", "warn", 1);
}

static void
down(void)
{
	char cmd[600];

	if (listener_pid > 0 && waitpid(listener_pid, NULL, WNOHANG) == 0) {
		kill(listener_pid, SIGKILL);
		waitpid(listener_pid, NULL, 0);
	}
	th_redis_stop(&srv);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", tmpdir);
}

TestSuite(metrics, .init = up, .fini = down, .timeout = 60);

/* A file's content (malloc'd; "" when missing). */
static char *
slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	int c;

	cr_assert(m);
	if (f) {
		while ((c = getc(f)) != EOF)
			putc(c, m);
		fclose(f);
	}
	fclose(m);
	return buf;
}

/* sh -c SCRIPT with $DMUTEX_BIN and $DMUTEX_URL set; stdout+stderr to
 * tmpdir/TAG.  Exit status. */
static int
sh(const char *tag, const char *script)
{
	char out[600];
	const char *argv[] = { "sh", "-c", script, NULL };

	snprintf(out, sizeof out, "%s/%s", tmpdir, tag);
	return th_run(argv, NULL, out, 20000);
}

static char *
out_of(const char *tag)
{
	char p[600];

	snprintf(p, sizeof p, "%s/%s", tmpdir, tag);
	return slurp(p);
}

#define assert_contains(hay, needle) \
	cr_assert(strstr((hay), (needle)), "expected \"%s\" in:\n%s", (needle), (hay))

static void
cycles(dmutex_client_t *c, const char *name, int n)
{
	dmutex_attr_t a;
	dmutex_t m;

	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	cr_assert_eq(dmutex_init(&m, name, &a), 0);
	for (int i = 0; i < n; i++) {
		cr_assert_eq(dmutex_lock(&m), 0);
		cr_assert_eq(dmutex_unlock(&m), 0);
	}
	cr_assert_eq(dmutex_destroy(&m), 0);
	dmutex_attr_destroy(&a);
}

static int
total_written(void *arg)
{
	(void)arg;
	return th_redis_int(&srv, "HGET dmutex:metrics:{metrics}:total acq") == 5;
}

/* Counted in the process at once; in Redis only when the renewal thread
 * flushes (at most once a second), in one transaction, never a write per
 * acquisition; read back by the process. */
Test(metrics, own_counters_and_flush_not_per_acquisition)
{
	dmutex_client_t *c;
	dmutex_metrics_t m;
	long long exec0 = dmt_cmd_calls(&srv, "exec", (const char *)NULL);

	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	cycles(c, "m1", 3);
	cycles(c, "m2", 2);
	/* Not written per acquisition: nothing in Redis yet. */
	cr_assert_eq(th_redis_int(&srv, "EXISTS dmutex:metrics:{metrics}:total"), 0);
	cr_assert_eq(dmt_cmd_calls(&srv, "exec", (const char *)NULL), exec0);

	cr_assert_eq(dmutex_client_metrics(c, "m1", &m), 0);
	cr_assert_eq(m.acquisitions, 3);
	cr_assert_eq(m.holds, 3);
	cr_assert_eq(m.contended, 0);
	cr_assert_eq(m.leases_lost, 0);
	cr_assert_eq(m.backend_errors, 0);
	cr_assert(m.wait_seconds >= 0 && m.wait_seconds < 5);
	cr_assert_eq(dmutex_client_metrics(c, NULL, &m), 0);
	cr_assert_eq(m.acquisitions, 5);
	cr_assert_eq(dmutex_client_metrics(c, "never", &m), 0);
	cr_assert_eq(m.acquisitions, 0);
	cr_assert_eq(dmutex_client_metrics(c, NULL, NULL), EINVAL);
	cr_assert_eq(dmutex_client_metrics(c, "", &m), EINVAL);

	/* The renewal thread sends them, without any further call of ours. */
	cr_assert(th_wait_until(total_written, NULL, 5000), "the counters never reached Redis");
	cr_assert_eq(th_redis_int(&srv, "HGET dmutex:metrics:{metrics}:n:m1 acq"), 3);
	cr_assert_eq(th_redis_int(&srv, "HGET dmutex:metrics:{metrics}:n:m2 holds"), 2);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/* A field of name's counters in Redis; 0 when absent (nothing counted). */
static long long
nfield(const char *name, const char *field)
{
	long long v = th_redis_int(&srv, "HGET dmutex:metrics:{metrics}:n:%s %s", name, field);

	return v == LLONG_MIN ? 0 : v;
}

/* The sum of a histogram's fields prefix0 .. prefix9, from bucket `from`. */
static long long
nbuckets(const char *name, const char *prefix, int from)
{
	char f[32];
	long long sum = 0;

	for (int b = from; b < 10; b++) {
		snprintf(f, sizeof f, "%s%d", prefix, b);
		sum += nfield(name, f);
	}
	return sum;
}

#define KEPT_HOLDS 53

static int
kept_holds_sent(void *name)
{
	return nfield(name, "holds") == KEPT_HOLDS;
}

static int
warm_holds_sent(void *name)
{
	return nfield(name, "holds") == 2;
}

/* A kept lease's local holds are counted in its entry, off the counters'
 * mutex (docs/guide.md, relock28b): the same counts as any hold, in
 * dmutex_client_metrics, and in Redis with nobody asking for them (the
 * renewal thread folds them in before it sends). */
Test(metrics, kept_lease_holds_counted_and_sent_without_a_reader)
{
	const char *name = "kept-counted";
	struct timespec ms20 = { 0, 20 * 1000000L };
	/* No renewal (each one counted, which sends everything) within the
	 * wait below: only the local holds themselves may get them sent. */
	struct dmt_attr o = { .lease_ms = 60000 * dmt_slowdown() };
	dmutex_client_t *c;
	dmutex_metrics_t m;
	dmutex_t mu;
	char v[600];

	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	cr_assert_eq(dmt_init_mutex(&mu, name, c, &o), 0);
	/* The second hold keeps the lease; the later ones are local. */
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(dmutex_lock(&mu), 0);
		cr_assert_eq(dmutex_unlock(&mu), 0);
	}
	cr_assert_eq(dmt_lock_field(&srv, name, "cache", v, sizeof v), 1, "the lease was not kept");
	/* Sent: from here on only the local holds have anything to send. */
	cr_assert(th_wait_until(warm_holds_sent, (void *)name, 5000 * dmt_slowdown()),
			"Redis has %lld holds of 2", nfield(name, "holds"));
	for (int i = 2; i < KEPT_HOLDS - 1; i++) {
		cr_assert_eq(dmutex_lock(&mu), 0);
		cr_assert_eq(dmutex_unlock(&mu), 0);
	}
	/* One hold of at least 20 ms: past the third bound (10 ms). */
	cr_assert_eq(dmutex_lock(&mu), 0);
	cr_assert_eq(nanosleep(&ms20, NULL), 0);
	cr_assert_eq(dmutex_unlock(&mu), 0);
	cr_assert_eq(dmt_lock_field(&srv, name, "cache", v, sizeof v), 1, "the lease was not kept");

	cr_assert(th_wait_until(kept_holds_sent, (void *)name, 5000 * dmt_slowdown()),
			"Redis has %lld holds of %d", nfield(name, "holds"), KEPT_HOLDS);
	cr_assert_eq(nfield(name, "acq"), KEPT_HOLDS);
	cr_assert_eq(nfield(name, "contended"), 0);
	cr_assert_eq(nbuckets(name, "wait_b", 0), KEPT_HOLDS);
	cr_assert_eq(nbuckets(name, "hold_b", 0), KEPT_HOLDS);
	cr_assert_geq(nbuckets(name, "hold_b", 3), 1, "the 20-ms hold is not past 10 ms");
	cr_assert_geq(nfield(name, "hold_us"), 20000);

	cr_assert_eq(dmutex_client_metrics(c, name, &m), 0);
	cr_assert_eq(m.acquisitions, KEPT_HOLDS);
	cr_assert_eq(m.holds, KEPT_HOLDS);
	cr_assert_eq(m.contended, 0);
	cr_assert_geq(m.hold_seconds, 0.02);
	cr_assert_eq(dmutex_destroy(&mu), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/* A hold still running is counted as acquired, and its end by the next
 * reader, never lost between a reader and the renewal thread. */
Test(metrics, kept_lease_hold_running_and_ended_each_counted_once)
{
	const char *name = "kept-running";
	dmutex_client_t *c;
	dmutex_metrics_t m;
	dmutex_t mu;
	char v[600];

	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	cr_assert_eq(dmt_init_mutex(&mu, name, c, NULL), 0);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(dmutex_lock(&mu), 0);
		cr_assert_eq(dmutex_unlock(&mu), 0);
	}
	cr_assert_eq(dmt_lock_field(&srv, name, "cache", v, sizeof v), 1, "the lease was not kept");
	for (int i = 0; i < 200; i++) {
		cr_assert_eq(dmutex_lock(&mu), 0);
		cr_assert_eq(dmutex_client_metrics(c, name, &m), 0);
		cr_assert_eq(m.acquisitions, 3 + (uint64_t)i, "round %d", i);
		cr_assert_eq(m.holds, 2 + (uint64_t)i, "round %d", i);
		cr_assert_eq(dmutex_unlock(&mu), 0);
		cr_assert_eq(dmutex_client_metrics(c, NULL, &m), 0);
		cr_assert_eq(m.holds, 3 + (uint64_t)i, "round %d", i);
	}
	cr_assert_eq(dmutex_destroy(&mu), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/* The counters of names nobody uses any more leave Redis (their hash
 * expires, the index forgets them) and the process (their record goes,
 * the client's total keeps what they counted), like the names' own state:
 * a program that locks job:<uuid> once per job must not grow either. */
#define GONE_N 40

struct idle_check {
	dmutex_client_t *c;
	int alive;              /* cycles of "alive" so far */
	const char *why;        /* what still holds, for the failure message */
};

static int
idle_counters_gone(void *p)
{
	struct idle_check *k = p;
	dmutex_metrics_t m;

	/* Flushes (and so the trimming) happen only when there is something
	 * to send: a name in use keeps them going. */
	cycles(k->c, "alive", 1);
	k->alive++;
	if (th_redis_int(&srv, "EXISTS dmutex:metrics:{metrics}:n:gone-0") != 0)
		return k->why = "the hash of gone-0 is still there", 0;
	if (th_redis_int(&srv, "ZCARD dmutex:metrics:{metrics}:index") != 1)
		return k->why = "the index still has idle names", 0;
	if (th_redis_int(&srv, "ZCARD dmutex:metrics:{metrics}:seen") != 1)
		return k->why = "seen still has idle names", 0;
	cr_assert_eq(dmutex_client_metrics(k->c, "gone-0", &m), 0);
	if (m.acquisitions)
		return k->why = "the process still has the record of gone-0", 0;
	return 1;
}

static int
gone_written(void *arg)
{
	(void)arg;
	return th_redis_int(&srv, "HGET dmutex:metrics:{metrics}:total acq") >= GONE_N;
}

Test(metrics, idle_names_counters_expire)
{
	struct idle_check k = { .why = "" };
	dmutex_metrics_t m;
	char url[700], name[32];
	long long pttl;

	/* idle_ms 2 s (6 s under the sanitizers): the hashes expire, the
	 * index is trimmed and the records are dropped after it (each at most
	 * 5 min, 1 min, 5 min).  The reads below, fresh admin connections,
	 * must come within idle_ms of the batch they check: 1 s was thin on a
	 * loaded 2-core machine. */
	const int idle = 2000 * dmt_slowdown();

	char opt[64];
	snprintf(opt, sizeof opt, "idle_ms=%d", idle);
	th_url_with(url, sizeof url, srv.url, opt);
	cr_assert_eq(dmutex_client_open(&k.c, url), 0);
	for (int i = 0; i < GONE_N; i++) {
		snprintf(name, sizeof name, "gone-%d", i);
		cycles(k.c, name, 1);
	}
	cr_assert(th_wait_until(gone_written, NULL, 5000), "the counters never reached Redis");
	pttl = th_redis_int(&srv, "PTTL dmutex:metrics:{metrics}:n:gone-0");
	cr_assert(pttl > 0 && pttl <= idle, "n:gone-0 PTTL %lld, idle_ms %d", pttl, idle);
	cr_assert_eq(th_redis_int(&srv, "ZCARD dmutex:metrics:{metrics}:seen"), GONE_N);
	cr_assert(th_wait_until(idle_counters_gone, &k, 5 * idle), "after %d cycles of another name: %s", k.alive,
			k.why);
	/* What they counted is still in the client's total, exactly. */
	cr_assert_eq(dmutex_client_metrics(k.c, NULL, &m), 0);
	cr_assert_eq(m.acquisitions, (uint64_t)(GONE_N + k.alive));
	cr_assert_eq(m.holds, (uint64_t)(GONE_N + k.alive));
	/* And in Redis's total. */
	cr_assert_geq(th_redis_int(&srv, "HGET dmutex:metrics:{metrics}:total acq"), GONE_N);
	cr_assert_eq(dmutex_client_close(k.c), 0);
}

/*
 * However a hold ends, its name's record ends it the same way: the hold is
 * counted (holds, hold_seconds) and the record, idle, leaves the process
 * like any other.  A hold that ended without its unlock (lost lease, its
 * thread gone) once left the record marked held for ever: never swept, the
 * hold never counted.
 */
struct swept_check {
	dmutex_client_t *c;
	const char *name;       /* the record that must go */
	int alive;              /* cycles of "alive" so far */
	const char *why;
};

static int
record_swept(void *p)
{
	struct swept_check *k = p;
	dmutex_metrics_t m;

	/* A flush (and so the sweep) happens only when something waits. */
	cycles(k->c, "alive", 1);
	k->alive++;
	cr_assert_eq(dmutex_client_metrics(k->c, k->name, &m), 0);
	if (m.acquisitions)
		return k->why = "the process still has the record", 0;
	return 1;
}

/* idle_ms for these tests: 2 s (6 s under the sanitizers), as above. */
static void
open_idle(dmutex_client_t **c, int idle)
{
	char url[700], opt[128];

	snprintf(opt, sizeof opt, "idle_ms=%d&command_timeout_ms=200&connect_timeout_ms=200", idle);
	th_url_with(url, sizeof url, srv.url, opt);
	cr_assert_eq(dmutex_client_open(c, url), 0);
}

/* Every acquisition's hold was counted once, and the record of name left. */
static void
assert_hold_ended_and_swept(struct swept_check *k, int idle, int wait_ms)
{
	dmutex_metrics_t m;

	cr_assert(th_wait_until(record_swept, k, wait_ms), "'%s' after %d cycles of another name "
			"(idle_ms %d): %s", k->name, k->alive, idle, k->why);
	cr_assert_eq(dmutex_client_metrics(k->c, NULL, &m), 0);
	cr_assert_eq(m.acquisitions, (uint64_t)(1 + k->alive));
	cr_assert_eq(m.holds, (uint64_t)(1 + k->alive), "the hold of '%s' was not counted", k->name);
}

/* th_wait_until: `dmutex status NAME` finds no such lock. */
static int
state_gone(void *name)
{
	char cmd[200];

	snprintf(cmd, sizeof cmd, "\"$DMUTEX_BIN\" status '%s'", (const char *)name);
	return sh("status", cmd) == 84;
}

Test(metrics, lost_hold_never_unlocked_is_counted_and_swept)
{
	static atomic_int lost;
	const int idle = 2000 * dmt_slowdown();
	struct swept_check k = { .name = "lost-held", .why = "" };
	dmutex_metrics_t m;
	long long paused_at;
	dmutex_t mu;
	char *o;

	open_idle(&k.c, idle);
	atomic_init(&lost, 0);
	cr_assert_eq(dmt_init_mutex(&mu, k.name, k.c,
			&(struct dmt_attr){ .lease_ms = 500, .onlost = dmt_count_lost, .arg = &lost }), 0);
	cr_assert_eq(dmutex_lock(&mu), 0);
	/* The renewals stop reaching the server: the lease runs out. */
	cr_assert_eq(th_redis_pause(&srv), 0);
	paused_at = th_now_ms();
	cr_assert(th_wait_until(dmt_lost_once, &lost, 500 + 200 + 800 * dmt_slowdown()),
			"onlost not called %lld ms after the stop", th_now_ms() - paused_at);
	cr_assert_eq(th_redis_resume(&srv), 0);
	/* Its holder never unlocks.  The loss ended the hold: counted once. */
	cr_assert_eq(dmutex_client_metrics(k.c, k.name, &m), 0);
	cr_assert_eq(m.leases_lost, 1);
	cr_assert_eq(m.holds, 1, "the lost hold was not counted");
	/* A flush that failed while the server was stopped holds the next
	 * ones (and so the sweep) back 10 s. */
	assert_hold_ended_and_swept(&k, idle, 10000 + 5 * idle);
	/* What operators read in Redis went the ordinary way too: the lease
	 * ended with the stop, the name's state idle_ms after it (84: no such
	 * lock). */
	cr_assert(th_wait_until(state_gone, "lost-held", 2 * idle), "status: %s", out_of("status"));
	cr_assert_eq(sh("list", "\"$DMUTEX_BIN\" list"), 0);
	o = out_of("list");
	cr_assert_null(strstr(o, "lost-held"), "list: %s", o);
	free(o);
	/* Neither destroy nor close ends a hold, lost or not: they refuse. */
	cr_assert_eq(dmutex_destroy(&mu), EBUSY);
	cr_assert_eq(dmutex_client_close(k.c), EBUSY);
	/* The late unlock says so, and counts the hold no second time. */
	cr_assert_eq(dmutex_unlock(&mu), ENOLCK);
	cr_assert_eq(dmutex_client_metrics(k.c, k.name, &m), 0);
	cr_assert_eq(m.holds, 0, "the unlock counted the lost hold again");
	cr_assert_eq(dmutex_destroy(&mu), 0);
	cr_assert_eq(dmutex_client_close(k.c), 0);
}

static void *
lock_and_return(void *m)
{
	return (void *)(intptr_t)dmutex_lock(m);
}

Test(metrics, hold_ended_by_its_thread_is_counted_and_swept)
{
	const int idle = 2000 * dmt_slowdown();
	struct swept_check k = { .name = "thread-held", .why = "" };
	dmutex_metrics_t m;
	pthread_t t;
	void *rc;
	dmutex_t mu;

	open_idle(&k.c, idle);
	cr_assert_eq(dmt_init_mutex(&mu, k.name, k.c, NULL), 0);
	/* The thread returns holding it: the hold ends with the thread. */
	cr_assert_eq(pthread_create(&t, NULL, lock_and_return, &mu), 0);
	cr_assert_eq(pthread_join(t, &rc), 0);
	cr_assert_eq((intptr_t)rc, 0);
	cr_assert_eq(dmt_lock_exists(&srv, k.name), 0, "the thread's end did not release it");
	cr_assert_eq(dmutex_client_metrics(k.c, k.name, &m), 0);
	cr_assert_eq(m.holds, 1, "the hold ended by its thread was not counted");
	assert_hold_ended_and_swept(&k, idle, 5 * idle);
	cr_assert_eq(dmutex_destroy(&mu), 0);
	cr_assert_eq(dmutex_client_close(k.c), 0);
}

struct fork_arg { dmutex_client_t *c; };

/* In the child: none of the parent's counts, nor its hold; its own. */
static int
child_counts_its_own(void *p)
{
	struct fork_arg *a = p;
	dmutex_metrics_t m;
	dmutex_attr_t at;
	dmutex_t mu;

	if (dmutex_client_metrics(a->c, NULL, &m) || m.acquisitions || m.holds)
		return 10;
	if (dmutex_attr_init(&at) || dmutex_attr_setclient(&at, a->c) || dmutex_init(&mu, "fork-child", &at))
		return 11;
	if (dmutex_lock(&mu) || dmutex_unlock(&mu) || dmutex_destroy(&mu))
		return 12;
	dmutex_attr_destroy(&at);
	if (dmutex_client_metrics(a->c, NULL, &m) || m.acquisitions != 1 || m.holds != 1)
		return 13;
	if (dmutex_client_metrics(a->c, "fork-held", &m) || m.acquisitions || m.holds)
		return 14;
	return 0;
}

/* A fork ends none of the parent's holds in the parent, and the child
 * counts from zero: the parent's hold is not the child's to count. */
Test(metrics, fork_child_counts_from_zero_parent_hold_counted_once)
{
	struct fork_arg a;
	dmutex_metrics_t m;
	dmutex_t mu;
	pid_t pid;
	int rc;

	cr_assert_eq(dmutex_client_open(&a.c, srv.url), 0);
	cr_assert_eq(dmt_init_mutex(&mu, "fork-held", a.c, NULL), 0);
	cr_assert_eq(dmutex_lock(&mu), 0);
	cr_assert_neq(pid = th_spawn(child_counts_its_own, &a), -1);
	rc = th_wait_child(pid, 20000);
	cr_assert_eq(rc, 0, "child: %d (10 parent's counts, 11-12 lock, 13 own counts, 14 parent's hold)", rc);
	cr_assert_eq(dmutex_unlock(&mu), 0);
	cr_assert_eq(dmutex_client_metrics(a.c, "fork-held", &m), 0);
	cr_assert_eq(m.acquisitions, 1);
	cr_assert_eq(m.holds, 1);
	cr_assert_eq(dmutex_destroy(&mu), 0);
	cr_assert_eq(dmutex_client_close(a.c), 0);
}

/* In the child: none of the parent's kept-lease holds, counted in the
 * parent's entry and not yet folded in at the fork; its own, local ones
 * included, once each. */
static int
child_counts_no_pending(void *p)
{
	struct fork_arg *a = p;
	dmutex_metrics_t m;
	dmutex_t mu;

	if (dmutex_client_metrics(a->c, NULL, &m) || m.acquisitions || m.holds)
		return 10;
	if (dmt_init_mutex(&mu, "fork-kept-child", a->c, NULL))
		return 11;
	for (int i = 0; i < 5; i++)
		if (dmutex_lock(&mu) || dmutex_unlock(&mu))
			return 12;
	if (dmutex_destroy(&mu))
		return 12;
	if (dmutex_client_metrics(a->c, NULL, &m) || m.acquisitions != 5 || m.holds != 5)
		return 13;
	return 0;
}

Test(metrics, fork_child_does_not_count_the_parents_kept_lease_holds)
{
	struct fork_arg a;
	dmutex_metrics_t m;
	dmutex_t mu;
	pid_t pid;
	int rc;

	cr_assert_eq(dmutex_client_open(&a.c, srv.url), 0);
	cr_assert_eq(dmt_init_mutex(&mu, "fork-kept", a.c, NULL), 0);
	for (int i = 0; i < 20; i++) {
		cr_assert_eq(dmutex_lock(&mu), 0);
		cr_assert_eq(dmutex_unlock(&mu), 0);
	}
	cr_assert_neq(pid = th_spawn(child_counts_no_pending, &a), -1);
	rc = th_wait_child(pid, 20000);
	cr_assert_eq(rc, 0, "child: %d (10 parent's counts, 11-12 lock, 13 own counts)", rc);
	cr_assert_eq(dmutex_client_metrics(a.c, "fork-kept", &m), 0);
	cr_assert_eq(m.acquisitions, 20);
	cr_assert_eq(m.holds, 20);
	cr_assert_eq(dmutex_destroy(&mu), 0);
	cr_assert_eq(dmutex_client_close(a.c), 0);
}

/*
 * An index entry with no time of its last count in seen (written by a
 * version before seen existed) was never a candidate for trimming: trim
 * looks for idle names in seen only.  Such a name's hash expired long ago,
 * yet it stayed in the index for ever, and a once busy one kept a place
 * among the busiest that `dmutex metrics --top N` reads (N-1 names shown).
 * Now it is given a time when first found, and goes idle_ms later unless
 * it is counted again; a name counted now is never taken out.
 */
#define IDX "dmutex:metrics:{metrics}:index"
#define SEEN "dmutex:metrics:{metrics}:seen"

/* 1 if member is in the sorted set key, 0 if not. */
static int
zhas(const char *key, const char *member)
{
	redisReply *r = th_redis_cmd(&srv, "ZSCORE %s %s", key, member);
	int has;

	cr_assert(r && (r->type == REDIS_REPLY_NIL || r->type == REDIS_REPLY_STRING),
			"ZSCORE %s %s: %s", key, member, r && r->type == REDIS_REPLY_ERROR ? r->str : "?");
	has = r->type == REDIS_REPLY_STRING;
	freeReplyObject(r);
	return has;
}

static int
pre_seen_entry_trimmed(void *p)
{
	struct idle_check *k = p;

	/* The live name: counted all along, and its counts keep the flushes
	 * (and so the trimming) going. */
	cycles(k->c, "revived", 1);
	k->alive++;
	if (zhas(IDX, "old-busy"))
		return k->why = "old-busy is still in the index", 0;
	if (zhas(IDX, "old-quiet"))
		return k->why = "old-quiet is still in the index", 0;
	return 1;
}

Test(metrics, index_entries_without_seen_are_trimmed)
{
	const int idle = 2000 * dmt_slowdown();
	struct idle_check k = { .why = "" };
	long long pttl;
	char *o;

	/* As a writer before seen left them: busy once, its hash long gone;
	 * quiet, its hash still there; and one a process counts again now. */
	cr_assert_eq(th_redis_int(&srv, "ZADD " IDX " 1000000 old-busy 3 old-quiet 500000 revived"), 3);
	cr_assert_eq(th_redis_int(&srv, "HSET dmutex:metrics:{metrics}:n:old-quiet acq 3"), 1);
	cr_assert_eq(th_redis_int(&srv, "HSET dmutex:metrics:{metrics}:total acq 1500003"), 1);
	open_idle(&k.c, idle);
	cr_assert(th_wait_until(pre_seen_entry_trimmed, &k, 8 * idle), "after %d cycles of revived "
			"(idle_ms %d): %s", k.alive, idle, k.why);
	/* Counted all along: never taken out. */
	cr_assert_geq(th_redis_int(&srv, "ZSCORE " IDX " revived"), 500000 + 1);
	cr_assert_gt(th_redis_int(&srv, "ZSCORE " SEEN " revived"), 0);
	/* Out of seen as well: nothing left behind. */
	cr_assert_eq(zhas(SEEN, "old-busy"), 0);
	cr_assert_eq(zhas(SEEN, "old-quiet"), 0);
	/* A hash that never expired (hashes did not, then) expires as after a
	 * batch: gone by now, or about to (PTTL 0: less than a millisecond
	 * left, as a loaded CI run once read it); -1 would be the defect. */
	pttl = th_redis_int(&srv, "PTTL dmutex:metrics:{metrics}:n:old-quiet");
	cr_assert(pttl == -2 || (pttl >= 0 && pttl <= idle), "n:old-quiet PTTL %lld, idle_ms %d", pttl, idle);
	cr_assert_eq(dmutex_client_close(k.c), 0);
	/* The busiest name an operator reads is the live one again. */
	cr_assert_eq(sh("top1", "\"$DMUTEX_BIN\" metrics --top 1"), 0);
	o = out_of("top1");
	assert_contains(o, "dmutex_acquisitions_total{name=\"revived\"} ");
	free(o);
}

/* Every process's sums, the top names one by one and the rest summed; the
 * text passes promtool. */
Test(metrics, prometheus_text_capped_and_promtool_clean)
{
	dmutex_client_t *c;
	char *o;

	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	cycles(c, "busy", 4);
	cycles(c, "some", 2);
	cycles(c, "rare\"%", 1);
	cycles(c, "rarer", 1);
	/* Closing sends what the last second gathered. */
	cr_assert_eq(dmutex_client_close(c), 0);

	cr_assert_eq(sh("a", "\"$DMUTEX_BIN\" metrics --top 2"), 0);
	o = out_of("a");
	assert_contains(o, "# TYPE dmutex_acquisitions_total counter\n");
	assert_contains(o, "dmutex_acquisitions_total{name=\"busy\"} 4\n");
	assert_contains(o, "dmutex_acquisitions_total{name=\"some\"} 2\n");
	assert_contains(o, "dmutex_acquisitions_total{name=\"(other)\"} 2\n");
	cr_assert_null(strstr(o, "name=\"rarer\""), "past the top: %s", o);
	assert_contains(o, "# TYPE dmutex_wait_seconds histogram\n");
	assert_contains(o, "dmutex_hold_seconds_bucket{name=\"busy\",le=\"+Inf\"} 4\n");
	assert_contains(o, "dmutex_hold_seconds_count{name=\"busy\"} 4\n");
	assert_contains(o, "dmutex_renewals_total{name=\"busy\"} 0\n");
	free(o);
	cr_assert_eq(sh("b", "\"$DMUTEX_BIN\" metrics --top 10"), 0);
	o = out_of("b");
	/* A name is any bytes: escaped so that no two share a series. */
	assert_contains(o, "dmutex_acquisitions_total{name=\"rare\\\"%25\"} 1\n");
	cr_assert_null(strstr(o, "(other)"), "%s", o);
	free(o);

	cr_assert_eq(sh("c", "command -v promtool"), 0,
			"promtool is not installed (Debian package prometheus)");
	cr_assert_eq(sh("d", "\"$DMUTEX_BIN\" metrics --top 2 | promtool check metrics"), 0,
			"promtool: %s", out_of("d"));
	cr_assert_eq(sh("e", "\"$DMUTEX_BIN\" metrics --top 10 | promtool check metrics"), 0,
			"promtool: %s", out_of("e"));
	cr_assert_eq(sh("f", "\"$DMUTEX_BIN\" metrics --top x"), 64);
}

struct listener { char log[600]; pid_t pid; int port; };

static int
listening(void *arg)
{
	struct listener *l = arg;
	char *s = slurp(l->log), *p = strstr(s, "http://127.0.0.1:");

	if (p)
		l->port = atoi(p + strlen("http://127.0.0.1:"));
	free(s);
	return l->port > 0;
}

/* `dmutex metrics --listen 127.0.0.1:0 [--top TOP]`, its stderr to
 * tmpdir/tag, and the port it says it serves on. */
static void
start_listener(struct listener *l, const char *tag, const char *top)
{
	snprintf(l->log, sizeof l->log, "%s/%s", tmpdir, tag);
	fflush(NULL);
	if (!(l->pid = fork())) {
		if (!freopen(l->log, "w", stderr))
			_exit(120);
		execl(getenv("DMUTEX_BIN"), "dmutex", "metrics", "--listen", "127.0.0.1:0",
				top ? "--top" : (char *)NULL, top, (char *)NULL);
		_exit(121);
	}
	cr_assert_gt(l->pid, 0);
	listener_pid = l->pid;
	cr_assert(th_wait_until(listening, l, 10000), "dmutex never listened: %s", slurp(l->log));
}

/* A socket connected to 127.0.0.1:port; rcvbuf > 0 sets its receive
 * buffer first (a small window).  Reads give up after 30 s. */
static int
dial(int port, int rcvbuf)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct timeval tv = { .tv_sec = 30 };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	cr_assert(fd >= 0);
	if (rcvbuf > 0)
		cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf), 0);
	cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0, "connect: %s", strerror(errno));
	return fd;
}

/* GET path from 127.0.0.1:port; the whole answer (malloc'd; what came
 * before 30 s of silence). */
static char *
get(int port, const char *path)
{
	char req[256], buf[4096];
	char *out = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&out, &len);
	int fd = dial(port, 0);
	ssize_t n;

	cr_assert(m);
	snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
	cr_assert_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	while ((n = read(fd, buf, sizeof buf)) > 0)
		fwrite(buf, 1, (size_t)n, m);
	close(fd);
	fclose(m);
	return out;
}

Test(metrics, served_over_http)
{
	struct listener l = { .port = 0 };
	dmutex_client_t *c;
	char *o;

	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	cycles(c, "web", 3);
	cr_assert_eq(dmutex_client_close(c), 0);

	start_listener(&l, "listen.err", NULL);

	o = get(l.port, "/metrics");
	assert_contains(o, "HTTP/1.1 200 OK\r\n");
	assert_contains(o, "Content-Type: text/plain; version=0.0.4");
	assert_contains(o, "dmutex_acquisitions_total{name=\"web\"} 3\n");
	free(o);
	/* Read afresh for each scrape. */
	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	cycles(c, "web", 2);
	cr_assert_eq(dmutex_client_close(c), 0);
	o = get(l.port, "/metrics");
	assert_contains(o, "dmutex_acquisitions_total{name=\"web\"} 5\n");
	free(o);
	o = get(l.port, "/elsewhere");
	assert_contains(o, "HTTP/1.1 404 Not Found\r\n");
	free(o);

	cr_assert_eq(kill(l.pid, SIGTERM), 0);
	cr_assert_eq(th_wait_child(l.pid, 5000), 0);
}

/* A client sending its request head a byte a second (the had one
 * every 4 s: any pace under the old per-recv 5 s held the server).  It
 * stops when the server closes (or answers), or when told. */
struct trickle {
	int port;
	atomic_int sent, stop;
	atomic_llong ended_ms;
	pthread_t t;
};

static void *
trickler(void *arg)
{
	static const char head[] = "GET /metrics HTTP/1.1\r\nHost: slow.example\r\nUser-Agent: x\r\n";
	struct trickle *t = arg;
	int fd = dial(t->port, 0);

	for (size_t i = 0; i < strlen(head) && !t->stop; i++) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (send(fd, head + i, 1, MSG_NOSIGNAL) != 1)
			break;
		t->sent++;
		/* The pace of this client, not a synchronisation: it waits a
		 * second for anything from the server (its close). */
		if (poll(&p, 1, 1000) != 0)
			break;
	}
	t->ended_ms = th_now_ms();
	close(fd);
	return NULL;
}

static int
two_sent(void *arg)
{
	return ((struct trickle *)arg)->sent >= 2;
}

static int
trickle_ended(void *arg)
{
	return ((struct trickle *)arg)->ended_ms > 0;
}

static void
trickle_start(struct trickle *t, int port)
{
	memset(t, 0, sizeof *t);
	t->port = port;
	cr_assert_eq(pthread_create(&t->t, NULL, trickler, t), 0);
	/* In the server's hands: two bytes sent (so accepted, or queued for
	 * it) before the test goes on. */
	cr_assert(th_wait_until(two_sent, t, 5000));
}

/* A scrape while a slow client trickles its head is answered at once, and
 * the slow one is dropped when its 5 s for the whole head are up, however
 * it paces its bytes. */
Test(metrics, http_slow_client_holds_no_scrape)
{
	const int slow = dmt_slowdown();
	struct listener l = { .port = 0 };
	struct trickle t;
	dmutex_client_t *c;
	long long t0, took;
	char *o;

	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	cycles(c, "web", 1);
	cr_assert_eq(dmutex_client_close(c), 0);
	start_listener(&l, "slow.err", NULL);

	t0 = th_now_ms();
	trickle_start(&t, l.port);
	o = get(l.port, "/metrics");
	took = th_now_ms() - t0;
	assert_contains(o, "HTTP/1.1 200 OK\r\n");
	assert_contains(o, "dmutex_acquisitions_total{name=\"web\"} 1\n");
	cr_assert_lt(took, 3000 * slow, "the scrape took %lld ms behind a slow client", took);
	free(o);
	/* Dropped after 5 s from its accept, with most of its head unsent. */
	cr_assert(th_wait_until(trickle_ended, &t, 10000 * slow));
	t.stop = 1;
	cr_assert_eq(pthread_join(t.t, NULL), 0);
	cr_assert_lt(t.sent, 20, "the slow client sent %d bytes before it was dropped", (int)t.sent);
	cr_assert_geq(t.ended_ms - t0, 4500, "dropped after %lld ms", t.ended_ms - t0);

	/* A signal ends the server at once, a slow client in the middle of
	 * its head or not. */
	trickle_start(&t, l.port);
	t0 = th_now_ms();
	cr_assert_eq(kill(l.pid, SIGTERM), 0);
	cr_assert_eq(th_wait_child(l.pid, 2000 * slow), 0, "%s", slurp(l.log));
	took = th_now_ms() - t0;
	cr_assert_lt(took, 2000 * slow, "SIGTERM took %lld ms", took);
	t.stop = 1;
	cr_assert_eq(pthread_join(t.t, NULL), 0);
}

/* 640 names of 480 bytes: a page of about 10 MB, more than the kernel
 * buffers between the server and a client that stops reading hold. */
static void
many_long_names(void)
{
	redisReply *r = th_redis_cmd(&srv, "EVAL %s 1 %s 640",
			"for i = 1, tonumber(ARGV[1]) do "
			"local n = string.rep('x', 480) .. i; "
			"redis.call('ZADD', KEYS[1], i, n); "
			"redis.call('HSET', 'dmutex:metrics:{metrics}:n:' .. n, 'acq', i) end "
			"return 1", IDX);

	cr_assert(r && r->type == REDIS_REPLY_INTEGER, "EVAL: %s",
			r && r->type == REDIS_REPLY_ERROR ? r->str : "?");
	freeReplyObject(r);
}

static int
readable(void *arg)
{
	struct pollfd p = { .fd = *(int *)arg, .events = POLLIN };

	return poll(&p, 1, 0) > 0;
}

/* A client that asks for a large page and stops reading holds neither the
 * other scrapes nor the server's end. */
Test(metrics, http_client_not_reading_holds_nothing)
{
	const int slow = dmt_slowdown();
	struct listener l = { .port = 0 };
	static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
	long long t0, took;
	int fd;
	char *o;

	many_long_names();
	start_listener(&l, "stuck.err", "100000");
	fd = dial(l.port, 4096);
	cr_assert_eq(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
	/* The server has rendered its page and begun to send it. */
	cr_assert(th_wait_until(readable, &fd, 20000 * slow));

	t0 = th_now_ms();
	o = get(l.port, "/metrics");
	took = th_now_ms() - t0;
	assert_contains(o, "HTTP/1.1 200 OK\r\n");
	assert_contains(o, "dmutex_acquisitions_total{name=\"xxx");
	cr_assert_lt(took, 10000 * slow, "the scrape took %lld ms behind a client not reading", took);
	free(o);

	t0 = th_now_ms();
	cr_assert_eq(kill(l.pid, SIGTERM), 0);
	cr_assert_eq(th_wait_child(l.pid, 2000 * slow), 0, "%s", slurp(l.log));
	took = th_now_ms() - t0;
	cr_assert_lt(took, 2000 * slow, "SIGTERM took %lld ms", took);
	close(fd);
}

/* ?metrics=0: nothing counted, nothing written. */
Test(metrics, off_by_url_option)
{
	dmutex_client_t *c;
	dmutex_metrics_t m;
	char url[700];

	th_url_with(url, sizeof url, srv.url, "metrics=0");
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cycles(c, "quiet", 3);
	cr_assert_eq(dmutex_client_metrics(c, NULL, &m), 0);
	cr_assert_eq(m.acquisitions, 0);
	cr_assert_eq(m.holds, 0);
	cr_assert_eq(dmutex_client_close(c), 0);
	cr_assert_eq(th_redis_int(&srv, "EXISTS dmutex:metrics:{metrics}:total"), 0);
	cr_assert_eq(th_redis_int(&srv, "EXISTS dmutex:metrics:{metrics}:n:quiet"), 0);
}

static atomic_int refusals;

static void
count_refusals(int level, const char *msg, void *arg)
{
	(void)arg;
	if (strstr(msg, "per-lock counters not stored") && level == DMUTEX_LOG_WARN)
		atomic_fetch_add(&refusals, 1);
}

/* A user with the lock's commands only (the documented ACL): locks work,
 * the counters are refused once, said once, and dropped. */
Test(metrics, acl_user_without_multi_warned_once)
{
	dmutex_client_t *c;
	char url[700];
	redisReply *r;

	r = th_redis_cmd(&srv, "ACL SETUSER app on >pw ~dmutex:* &dmutex:* -@all +ping +evalsha "
			"+eval +subscribe +unsubscribe +info +config|get +time +hget +hmget +hset "
			"+hincrby +hdel +exists +type +pexpire +pexpireat +pttl +persist +del +zadd +zrem "
			"+zscore +zcount +zcard +zrange +zrangebyscore +zremrangebyscore +get +set "
			"+publish +rpush +blpop");
	cr_assert(r && r->type == REDIS_REPLY_STATUS);
	freeReplyObject(r);
	snprintf(url, sizeof url, "redis://app:pw@127.0.0.1:%d", srv.port);
	atomic_init(&refusals, 0);
	dmutex_set_logger(count_refusals, NULL);
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cycles(c, "acl1", 2);
	cr_assert_eq(dmutex_client_close(c), 0);
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cycles(c, "acl2", 2);
	cr_assert_eq(dmutex_client_close(c), 0);
	dmutex_set_logger(NULL, NULL);
	/* Once per client. */
	cr_assert_eq(atomic_load(&refusals), 2);
	cr_assert_eq(th_redis_int(&srv, "EXISTS dmutex:metrics:{metrics}:total"), 0);
}
