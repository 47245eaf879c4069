/*
 * The dmutex command over an etcd:// URL: run, status, list and reset
 * against a real etcd member that each test starts
 * (tests/lib/harness_etcd.c).  The built binary ($DMUTEX_BIN) runs as a
 * child process with its output in files, as in test_cli.c; the test
 * process holds locks through the library when it needs a holder.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dmutex.h"
#include "dmt.h"
#include "harness.h"
#include "harness_etcd.h"
#include "dm_cmd.h"

/* The exit statuses of dmutex(1). */
enum { ST_BUSY = 80, ST_NOLOCK = 84, ST_REFUSED = 85, ST_BACKEND = 87 };

static struct th_etcd etcd;
static struct dm_cmd dm;

static void
up(void)
{
	cr_assert(getenv("DMUTEX_BIN"), "DMUTEX_BIN is not set (run through meson test)");
	cr_assert_eq(th_etcd_start(&etcd, NULL, 0), 0, "etcd did not start");
	cr_assert_eq(dm_cmd_init(&dm, "dmutex-etcd-cli"), 0);
	setenv("DMUTEX_URL", etcd.url, 1);
	setenv("DMUTEX_LOG", "warn", 1);
}

static void
down(void)
{
	dm_cmd_fini(&dm);
	th_etcd_stop(&etcd);
}

TestSuite(etcd_cli, .init = up, .fini = down, .timeout = 60);

#define DM_START(...) dm_cmd_start(&dm, __VA_ARGS__, (char *)NULL)
#define DM_RUN(...) dm_cmd_run(&dm, __VA_ARGS__, (char *)NULL)

static char *
slurp_tag(const char *tag, const char *ext)
{
	char *buf = dm_cmd_output(&dm, tag, ext);

	cr_assert(buf);
	return buf;
}

#define ASSERT_ST(got, want, tag) DM_CMD_ASSERT_ST(&dm, got, want, tag)

static void
assert_contains(const char *hay, const char *needle)
{
	cr_assert(strstr(hay, needle), "expected \"%s\" in:\n%s", needle, hay);
}

/* python3 checks TAG.out as JSON: expr over d, the parsed document. */
static void
assert_json(const char *tag, const char *expr)
{
	const char *py = getenv("PYTHON");
	char cmd[4096];

	snprintf(cmd, sizeof cmd,
			"%s -c 'import json,sys; d=json.load(open(sys.argv[1])); "
			"sys.exit(0 if (%s) else 1)' %s/%s.out", py && *py ? py : "python3", expr,
			dm.dir, tag);
	cr_assert_eq(system(cmd), 0, "JSON check failed: %s\non:\n%s", expr, slurp_tag(tag, "out"));
}

/* The fence a `run -- sh -c 'echo "$DMUTEX_FENCE"'` printed. */
static unsigned long long
fence_printed(const char *tag)
{
	char *o = slurp_tag(tag, "out"), *end;
	unsigned long long f = strtoull(o, &end, 10);

	cr_assert(end != o && *end == '\n' && f > 0, "no fence in: %s", o);
	free(o);
	return f;
}

struct holder {
	dmutex_client_t *c;
	dmutex_t m;
};

static void
hold(struct holder *h, const char *name, int robust, unsigned lease_ms)
{
	dmutex_attr_t a;

	cr_assert_eq(dmutex_client_open(&h->c, etcd.url), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, h->c), 0);
	if (robust)
		cr_assert_eq(dmutex_attr_setrobust(&a, DMUTEX_ROBUST), 0);
	if (lease_ms)
		cr_assert_eq(dmutex_attr_setlease(&a, lease_ms), 0);
	cr_assert_eq(dmutex_init(&h->m, name, &a), 0);
	dmutex_attr_destroy(&a);
	cr_assert_eq(dmutex_lock(&h->m), 0);
}

static void
unhold(struct holder *h)
{
	cr_assert_eq(dmutex_destroy(&h->m), 0);
	cr_assert_eq(dmutex_client_close(h->c), 0);
}

/* `dmutex status --json NAME` says what want (a substring of its JSON). */
struct said { const char *name, *want; };

static int
status_says(void *p)
{
	const struct said *s = p;
	int st = DM_RUN(10000, "poll", "status", "--json", s->name);
	char *o = slurp_tag("poll", "out");
	int ok = (st == 0 || st == ST_NOLOCK) && strstr(o, s->want);

	free(o);
	return ok;
}

/* run passes COMMAND's status and the fence; fences grow across holds;
 * -n refuses a held lock; -w waits, counted by status, until the release. */
Test(etcd_cli, run_status_fence_busy_and_wait)
{
	struct holder h;
	struct said waiting = { "job", "\"waiters\":1" };
	unsigned long long f1, f2;
	uint64_t tok;
	pid_t w;

	ASSERT_ST(DM_RUN(10000, "a", "run", "job", "--", "sh", "-c", "exit 7"), 7, "a");
	ASSERT_ST(DM_RUN(10000, "b", "run", "job", "--", "sh", "-c", "echo \"$DMUTEX_FENCE\""), 0, "b");
	f1 = fence_printed("b");
	ASSERT_ST(DM_RUN(10000, "c", "run", "job", "--", "sh", "-c", "echo \"$DMUTEX_FENCE\""), 0, "c");
	f2 = fence_printed("c");
	cr_assert_gt(f2, f1);

	hold(&h, "job", 0, 0);
	cr_assert_eq(dmutex_fence(&h.m, &tok), 0);
	cr_assert_gt(tok, f2);
	ASSERT_ST(DM_RUN(10000, "d", "run", "-n", "job", "--", "true"), ST_BUSY, "d");
	w = DM_START("w", "run", "-w", "20", "job", "--", "sh", "-c", "echo \"$DMUTEX_FENCE\"");
	cr_assert(th_wait_until(status_says, &waiting, 10000), "status never counted the waiter");
	cr_assert_eq(dmutex_unlock(&h.m), 0);
	ASSERT_ST(th_wait_child(w, 10000), 0, "w");
	cr_assert_gt(fence_printed("w"), tok);
	unhold(&h);
}

/* status shows a holder (this process), its fence and lease; a lock
 * whose keys are gone is no such lock. */
Test(etcd_cli, status_reports_holder_and_fence)
{
	struct holder h;
	uint64_t tok;
	char want[200], expr[600], *o, *e;

	hold(&h, "job", 0, 5000);
	cr_assert_eq(dmutex_fence(&h.m, &tok), 0);
	ASSERT_ST(DM_RUN(10000, "a", "status", "job"), 0, "a");
	o = slurp_tag("a", "out");
	assert_contains(o, "job: held\n");
	snprintf(want, sizeof want, " pid %d tid ", (int)getpid());
	assert_contains(o, want);
	snprintf(want, sizeof want, "fence:       %llu\n", (unsigned long long)tok);
	assert_contains(o, want);
	assert_contains(o, "robust:      consistent\n");
	assert_contains(o, "waiting:     0 clients\n");
	free(o);
	/* The lease left is the etcd lease's TTL (the hold's 5 s, plus a
	 * second: src/backend/etcd/lease.c). */
	ASSERT_ST(DM_RUN(10000, "b", "status", "--json", "job"), 0, "b");
	snprintf(expr, sizeof expr,
			"len(d) == 1 and d[0][\"name\"] == \"job\" and d[0][\"held\"] is True and "
			"d[0][\"pid\"] == %d and d[0][\"fence\"] == %llu and "
			"0 < d[0][\"lease_left_ms\"] <= 6000 and d[0][\"robust\"] == \"consistent\" and "
			"d[0][\"waiters\"] == 0", (int)getpid(), (unsigned long long)tok);
	assert_json("b", expr);
	cr_assert_eq(dmutex_unlock(&h.m), 0);
	unhold(&h);

	ASSERT_ST(DM_RUN(10000, "c", "status", "job"), ST_NOLOCK, "c");
	e = slurp_tag("c", "err");
	assert_contains(e, "no such lock 'job'");
	free(e);
}

/* list shows every held lock under the prefix, PATTERN as a glob. */
Test(etcd_cli, list_held_locks_and_pattern)
{
	struct holder a1, a2, b1;
	char *o;

	hold(&a1, "alpha-1", 0, 0);
	hold(&a2, "alpha-2", 0, 0);
	hold(&b1, "beta-1", 0, 0);
	ASSERT_ST(DM_RUN(10000, "a", "list"), 0, "a");
	o = slurp_tag("a", "out");
	assert_contains(o, "NAME ");
	assert_contains(o, "\nalpha-1 ");
	assert_contains(o, "\nalpha-2 ");
	assert_contains(o, "\nbeta-1 ");
	free(o);
	ASSERT_ST(DM_RUN(10000, "b", "list", "--json", "alpha-*"), 0, "b");
	assert_json("b", "sorted(x[\"name\"] for x in d) == [\"alpha-1\", \"alpha-2\"] and "
			"all(x[\"held\"] for x in d)");
	cr_assert_eq(dmutex_unlock(&a1.m), 0);
	ASSERT_ST(DM_RUN(10000, "c", "list", "--json"), 0, "c");
	assert_json("c", "sorted(x[\"name\"] for x in d) == [\"alpha-2\", \"beta-1\"]");
	cr_assert_eq(dmutex_unlock(&a2.m), 0);
	cr_assert_eq(dmutex_unlock(&b1.m), 0);
	unhold(&a1);
	unhold(&a2);
	unhold(&b1);
}

/* reset refuses a held lock without --force; with it, the hold is gone:
 * the holder's unlock says so, and the lock is free for the next. */
Test(etcd_cli, reset_refuses_then_forces)
{
	struct holder h;
	uint64_t tok;
	char want[200], *o, *e;

	hold(&h, "job", 0, 0);
	cr_assert_eq(dmutex_fence(&h.m, &tok), 0);
	ASSERT_ST(DM_RUN(10000, "a", "reset", "job"), ST_REFUSED, "a");
	e = slurp_tag("a", "err");
	assert_contains(e, "--force");
	free(e);
	ASSERT_ST(DM_RUN(10000, "b", "reset", "--force", "job"), 0, "b");
	o = slurp_tag("b", "out");
	snprintf(want, sizeof want, "reset 'job': released the hold of ");
	assert_contains(o, want);
	snprintf(want, sizeof want, " pid %d ", (int)getpid());
	assert_contains(o, want);
	snprintf(want, sizeof want, "(fence %llu", (unsigned long long)tok);
	assert_contains(o, want);
	free(o);
	ASSERT_ST(DM_RUN(10000, "c", "status", "job"), ST_NOLOCK, "c");
	cr_assert_eq(dmutex_unlock(&h.m), ENOLCK);
	unhold(&h);
	ASSERT_ST(DM_RUN(10000, "d", "run", "-n", "job", "--", "true"), 0, "d");
	ASSERT_ST(DM_RUN(10000, "e", "reset", "nowhere"), ST_NOLOCK, "e");
}

/* A robust holder killed holding the lock: once its etcd lease ends,
 * status shows the owner died, and reset clears that state. */
Test(etcd_cli, robust_owner_died_then_reset)
{
	struct said died = { "job", "\"robust\":\"owner_died\"" };
	char *o;

	/* COMMAND kills its dmutex: nothing releases, the lease runs out. */
	ASSERT_ST(DM_RUN(10000, "a", "run", "--robust", "--lease", "2000", "job", "--",
			"sh", "-c", "kill -9 $PPID"), 128 + SIGKILL, "a");
	cr_assert(th_wait_until(status_says, &died, 15000), "status never showed the owner died");
	ASSERT_ST(DM_RUN(10000, "b", "status", "job"), 0, "b");
	o = slurp_tag("b", "out");
	assert_contains(o, "job: free\n");
	assert_contains(o, "robust:      owner died\n");
	free(o);
	ASSERT_ST(DM_RUN(10000, "c", "reset", "job"), 0, "c");
	o = slurp_tag("c", "out");
	assert_contains(o, "reset 'job': cleared the owner-died state");
	free(o);
	ASSERT_ST(DM_RUN(10000, "d", "status", "job"), ST_NOLOCK, "d");
}

/* ------------------------------------------------------------------ */
/* read-write locks                                                    */
/* ------------------------------------------------------------------ */

/* The keys of read-write lock NAME's part ("r" shares, "w" the writer,
 * "q" waiting writers) in etcd (src/backend/etcd/rw.c), counted without
 * the tool: what a refused reset must leave. */
static long long
rw_keys(const char *name, const char *part)
{
	char pre[300];

	snprintf(pre, sizeof pre, "dmutex:r/%zu:%s/%s/", strlen(name), name, part);
	return th_etcd_count_prefix(&etcd, 0, pre);
}

/* The read-write locks' table's head (list.c). */
#define RW_HEAD "RWLOCK  STATE  LEASE LEFT  FENCE                READERS  READ LEASE  WRITERS WAITING\n"

/* TAG.ext (out, err) is exactly want. */
static void
assert_said(const char *tag, const char *ext, const char *want)
{
	char *got = slurp_tag(tag, ext);

	cr_assert_str_eq(got, want);
	free(got);
}

/* A drwlock_t on a client of its own (one share a client, as a process),
 * counting its onlost calls. */
struct rwholder {
	dmutex_client_t *c;
	drwlock_t rw;
	atomic_int lost;
};

static void
rw_hold(struct rwholder *h, const char *name, unsigned lease_ms)
{
	dmutex_attr_t a;

	atomic_init(&h->lost, 0);
	cr_assert_eq(dmutex_client_open(&h->c, etcd.url), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, h->c), 0);
	cr_assert_eq(dmutex_attr_setonlost(&a, dmt_count_lost, &h->lost), 0);
	cr_assert_eq(dmutex_attr_setlease(&a, lease_ms), 0);
	cr_assert_eq(drwlock_init(&h->rw, name, &a), 0);
	dmutex_attr_destroy(&a);
}

static void
rw_unhold(struct rwholder *h)
{
	cr_assert_eq(drwlock_destroy(&h->rw), 0);
	cr_assert_eq(dmutex_client_close(h->c), 0);
}

/* A writer on a thread of its own: it waits, writes, says so with its
 * token, and unlocks when told. */
struct rwwriter {
	struct rwholder h;
	pthread_t t;
	uint64_t fence;
	atomic_int writing, done;
	int rc;
};

static void *
rw_write_main(void *p)
{
	struct rwwriter *w = p;

	if ((w->rc = drwlock_wrlock(&w->h.rw)) || (w->rc = drwlock_fence(&w->h.rw, &w->fence)))
		return NULL;
	atomic_store(&w->writing, 1);
	while (!atomic_load(&w->done))
		th_wait_until(dmt_flag_set, &w->done, 100);
	w->rc = drwlock_unlock(&w->h.rw);
	return NULL;
}

/* status and list of a read-write lock read by two processes while a
 * writer waits, then written by that writer, shown as over Redis (its
 * own table, "kind": "rwlock"); then gone: etcd keeps no last fence. */
Test(etcd_cli, rwlock_status_and_list)
{
	struct rwholder r1, r2;
	struct rwwriter w = { 0 };
	struct said waiting = { "doc", "\"writers_waiting\":1}" };
	char want[200], expr[600], *o;

	rw_hold(&r1, "doc", 5000);
	rw_hold(&r2, "doc", 5000);
	cr_assert_eq(drwlock_rdlock(&r1.rw), 0);
	cr_assert_eq(drwlock_rdlock(&r2.rw), 0);
	rw_hold(&w.h, "doc", 5000);
	cr_assert_eq(pthread_create(&w.t, NULL, rw_write_main, &w), 0);
	cr_assert(th_wait_until(status_says, &waiting, 10000), "status never counted the writer");

	ASSERT_ST(DM_RUN(10000, "a", "status", "doc"), 0, "a");
	o = slurp_tag("a", "out");
	cr_assert_eq(strncmp(o, "doc (read-write lock): read by 2 processes\n", 43), 0, "%s", o);
	assert_contains(o, "\n  readers:     2 processes, longest lease left ");
	assert_contains(o, "\n  waiting:     1 writer\n");
	cr_assert_null(strstr(o, "doc: "), "no mutex of that name, yet shown:\n%s", o);
	free(o);
	/* The lease left is the etcd lease's TTL: the hold's 5 s and a second. */
	ASSERT_ST(DM_RUN(10000, "b", "status", "--json", "doc"), 0, "b");
	assert_json("b", "len(d) == 1 and d[0][\"kind\"] == \"rwlock\" and d[0][\"exists\"] is True and "
			"d[0][\"writing\"] is False and d[0][\"readers\"] == 2 and "
			"0 < d[0][\"read_lease_left_ms\"] <= 6000 and d[0][\"writers_waiting\"] == 1 and "
			"d[0][\"fence\"] is None and d[0][\"fence_counter\"] is None");
	ASSERT_ST(DM_RUN(10000, "c", "list"), 0, "c");
	o = slurp_tag("c", "out");
	cr_assert_eq(strncmp(o, RW_HEAD, strlen(RW_HEAD)), 0, "%s", o);
	cr_assert(strstr(o, "\ndoc     read   -           -                    2        "), "%s", o);
	cr_assert(o[strlen(o) - 2] == '1' && o[strlen(o) - 1] == '\n', "%s", o);
	free(o);
	ASSERT_ST(DM_RUN(10000, "d", "list", "--json", "d*"), 0, "d");
	assert_json("d", "len(d) == 1 and d[0][\"kind\"] == \"rwlock\" and d[0][\"name\"] == \"doc\" "
			"and d[0][\"readers\"] == 2 and d[0][\"writers_waiting\"] == 1");
	ASSERT_ST(DM_RUN(10000, "e", "list", "--json", "x*"), 0, "e");
	assert_json("e", "d == []");

	cr_assert_eq(drwlock_unlock(&r1.rw), 0);
	cr_assert_eq(drwlock_unlock(&r2.rw), 0);
	cr_assert(th_wait_until(dmt_flag_set, &w.writing, 10000), "the writer never wrote");
	ASSERT_ST(DM_RUN(10000, "f", "status", "doc"), 0, "f");
	o = slurp_tag("f", "out");
	assert_contains(o, "doc (read-write lock): written\n");
	/* etcd's writer key records no holder, only (its revision) the token. */
	assert_contains(o, "\n  writer:      not recorded ");
	assert_contains(o, "\n  lease left:  ");
	snprintf(want, sizeof want, "\n  fence:       %llu\n", (unsigned long long)w.fence);
	assert_contains(o, want);
	assert_contains(o, "\n  readers:     0 processes\n  waiting:     0 writers\n");
	free(o);
	ASSERT_ST(DM_RUN(10000, "g", "status", "--json", "doc"), 0, "g");
	snprintf(expr, sizeof expr, "d[0][\"writing\"] is True and d[0][\"fence\"] == %llu and "
			"d[0][\"fence_counter\"] == %llu and 0 < d[0][\"write_lease_left_ms\"] <= 6000 and "
			"d[0][\"readers\"] == 0 and d[0][\"read_lease_left_ms\"] is None and d[0][\"writer\"] is None",
			(unsigned long long)w.fence, (unsigned long long)w.fence);
	assert_json("g", expr);
	ASSERT_ST(DM_RUN(10000, "h", "list"), 0, "h");
	o = slurp_tag("h", "out");
	snprintf(want, sizeof want, "\ndoc     write  ");
	assert_contains(o, want);
	snprintf(want, sizeof want, "  %-19llu  0        -           0\n", (unsigned long long)w.fence);
	assert_contains(o, want);
	free(o);
	ASSERT_ST(DM_RUN(10000, "i", "list", "--json"), 0, "i");
	snprintf(expr, sizeof expr, "len(d) == 1 and d[0][\"kind\"] == \"rwlock\" and d[0][\"name\"] == \"doc\" "
			"and d[0][\"writing\"] is True and d[0][\"fence\"] == %llu", (unsigned long long)w.fence);
	assert_json("i", expr);

	atomic_store(&w.done, 1);
	cr_assert_eq(pthread_join(w.t, NULL), 0);
	cr_assert_eq(w.rc, 0);
	/* Its keys went with their holders: nothing left to show. */
	ASSERT_ST(DM_RUN(10000, "j", "status", "doc"), ST_NOLOCK, "j");
	o = slurp_tag("j", "err");
	cr_assert_str_eq(o, "dmutex: no such lock 'doc'\n");
	free(o);
	ASSERT_ST(DM_RUN(10000, "k", "list", "--json"), 0, "k");
	assert_json("k", "d == []");
	o = slurp_tag("k", "err");
	cr_assert_str_eq(o, "");
	free(o);
	rw_unhold(&w.h);
	rw_unhold(&r1);
	rw_unhold(&r2);
}

/* reset refuses a read or written rwlock without --force (85) and touches
 * nothing; with it, the share or the writer goes, and the holder learns
 * it at its next renewal: onlost runs, its unlock says ENOLCK.  The next
 * writer's token is greater.  Then nothing is left: no such lock. */
static void
rw_reset_holder(int write)
{
	struct rwholder h, next;
	uint64_t tok = 0, tok2;
	char want[300], *o, *e;

	rw_hold(&h, "doc", 3000);
	cr_assert_eq(write ? drwlock_wrlock(&h.rw) : drwlock_rdlock(&h.rw), 0);
	if (write)
		cr_assert_eq(drwlock_fence(&h.rw, &tok), 0);
	ASSERT_ST(DM_RUN(10000, "a", "reset", "doc"), ST_REFUSED, "a");
	e = slurp_tag("a", "err");
	if (write)
		snprintf(want, sizeof want, "dmutex: read-write lock 'doc' is written (fence %llu); use "
				"--force to release it anyway (the holders are told they lost it at their "
				"next renewal)\n", (unsigned long long)tok);
	else
		snprintf(want, sizeof want, "dmutex: read-write lock 'doc' is read by 1 process; use "
				"--force to release it anyway (the holders are told they lost it at their "
				"next renewal)\n");
	cr_assert_str_eq(e, want);
	free(e);
	o = slurp_tag("a", "out");
	cr_assert_str_eq(o, "");
	free(o);
	cr_assert_eq(rw_keys("doc", write ? "w" : "r"), 1, "the refused reset removed it");

	ASSERT_ST(DM_RUN(10000, "b", "reset", "--force", "doc"), 0, "b");
	o = slurp_tag("b", "out");
	if (write)
		snprintf(want, sizeof want, "reset read-write lock 'doc': released the write lock "
				"(fence %llu); fence kept\n", (unsigned long long)tok);
	else
		snprintf(want, sizeof want, "reset read-write lock 'doc': released 1 read share; fence kept\n");
	cr_assert_str_eq(o, want);
	free(o);
	cr_assert_eq(rw_keys("doc", write ? "w" : "r"), 0);
	cr_assert(th_wait_until(dmt_lost_once, &h.lost, 10000), "the holder was never told");
	cr_assert_eq(drwlock_unlock(&h.rw), ENOLCK);
	rw_unhold(&h);

	rw_hold(&next, "doc", 3000);
	cr_assert_eq(drwlock_wrlock(&next.rw), 0);
	cr_assert_eq(drwlock_fence(&next.rw, &tok2), 0);
	cr_assert_gt(tok2, tok);
	cr_assert_eq(drwlock_unlock(&next.rw), 0);
	rw_unhold(&next);
	ASSERT_ST(DM_RUN(10000, "c", "reset", "doc"), ST_NOLOCK, "c");
	e = slurp_tag("c", "err");
	cr_assert_str_eq(e, "dmutex: no such lock 'doc'\n");
	free(e);
}

Test(etcd_cli, rwlock_reset_reader_learns_at_renewal)
{
	rw_reset_holder(0);
}

Test(etcd_cli, rwlock_reset_writer_learns_at_renewal)
{
	rw_reset_holder(1);
}

/* A name that is both a mutex and a read-write lock (other keys): status
 * and list show both; reset refuses while either is held, and with
 * --force releases both, each holder told. */
Test(etcd_cli, rwlock_and_mutex_of_one_name)
{
	struct holder m;
	struct rwholder r;
	char *o;

	hold(&m, "both", 0, 5000);
	rw_hold(&r, "both", 3000);
	cr_assert_eq(drwlock_rdlock(&r.rw), 0);
	ASSERT_ST(DM_RUN(10000, "a", "status", "both"), 0, "a");
	o = slurp_tag("a", "out");
	cr_assert_eq(strncmp(o, "both: held\n", 11), 0, "%s", o);
	assert_contains(o, "\n\nboth (read-write lock): read by 1 process\n");
	free(o);
	ASSERT_ST(DM_RUN(10000, "b", "status", "--json", "both"), 0, "b");
	assert_json("b", "[x[\"kind\"] for x in d] == [\"mutex\", \"rwlock\"] and d[0][\"held\"] is True "
			"and d[1][\"readers\"] == 1");
	ASSERT_ST(DM_RUN(10000, "c", "list"), 0, "c");
	o = slurp_tag("c", "out");
	/* The mutexes' table as before, then the rwlocks' own. */
	cr_assert_eq(strncmp(o, "NAME  STATE  HOLDER", 19), 0, "%s", o);
	assert_contains(o, "\n\nRWLOCK  STATE  ");
	assert_contains(o, "\nboth    read   ");
	free(o);
	ASSERT_ST(DM_RUN(10000, "d", "list", "--json"), 0, "d");
	assert_json("d", "[(x[\"name\"], x[\"kind\"]) for x in d] == [(\"both\", \"mutex\"), (\"both\", \"rwlock\")]");

	/* Each refuses alone, before anything is touched. */
	ASSERT_ST(DM_RUN(10000, "e", "reset", "both"), ST_REFUSED, "e");
	o = slurp_tag("e", "err");
	assert_contains(o, "dmutex: 'both' is held by ");
	free(o);
	cr_assert_eq(dmutex_unlock(&m.m), 0);
	ASSERT_ST(DM_RUN(10000, "f", "reset", "both"), ST_REFUSED, "f");
	o = slurp_tag("f", "err");
	assert_contains(o, "dmutex: read-write lock 'both' is read by 1 process; use --force");
	free(o);
	cr_assert_eq(rw_keys("both", "r"), 1, "the refused reset removed the share");

	cr_assert_eq(dmutex_lock(&m.m), 0);
	ASSERT_ST(DM_RUN(10000, "g", "reset", "--force", "both"), 0, "g");
	o = slurp_tag("g", "out");
	cr_assert_eq(strncmp(o, "reset 'both': released the hold of ", 35), 0, "%s", o);
	assert_contains(o, ")\nreset read-write lock 'both': released 1 read share; fence kept\n");
	free(o);
	cr_assert_eq(rw_keys("both", "r"), 0);
	cr_assert_eq(dmutex_unlock(&m.m), ENOLCK);
	cr_assert(th_wait_until(dmt_lost_once, &r.lost, 10000), "the reader was never told");
	cr_assert_eq(drwlock_unlock(&r.rw), ENOLCK);
	rw_unhold(&r);
	unhold(&m);
}

/* Someone else's key under a read-write lock's: a clear error from
 * status, list and reset (which touches nothing, even forced). */
Test(etcd_cli, rwlock_foreign_keys_are_errors)
{
	char out[512];

	/* "dmutex:r/3:odd/r/x" = "hi", on no lease: not what rw.c writes. */
	cr_assert_eq(th_etcd_http(&etcd, 0, "/v3/kv/put",
			"{\"key\":\"ZG11dGV4OnIvMzpvZGQvci94\",\"value\":\"aGk=\"}", NULL, out,
			sizeof out, 0), 200, "%s", out);
	ASSERT_ST(DM_RUN(10000, "a", "status", "odd"), ST_BACKEND, "a");
	assert_said("a", "out",
			"odd (read-write lock): cannot read: dmutex:r/3:odd/r/x: not a value dmutex writes\n");
	assert_said("a", "err",
			"dmutex: 'odd': dmutex:r/3:odd/r/x: not a value dmutex writes\n");
	ASSERT_ST(DM_RUN(10000, "b", "status", "--json", "odd"), ST_BACKEND, "b");
	assert_json("b", "len(d) == 1 and d[0][\"kind\"] == \"rwlock\" and "
			"d[0][\"error\"] == \"dmutex:r/3:odd/r/x: not a value dmutex writes\" and "
			"\"readers\" not in d[0]");
	ASSERT_ST(DM_RUN(10000, "c", "list"), ST_BACKEND, "c");
	assert_said("c", "out", RW_HEAD "odd     cannot read: dmutex:r/3:odd/r/x: not a value dmutex writes\n");
	ASSERT_ST(DM_RUN(10000, "d", "list", "--json"), ST_BACKEND, "d");
	assert_json("d", "len(d) == 1 and d[0][\"kind\"] == \"rwlock\" and \"error\" in d[0]");
	ASSERT_ST(DM_RUN(10000, "e", "reset", "--force", "odd"), ST_BACKEND, "e");
	assert_said("e", "err",
			"dmutex: 'odd': dmutex:r/3:odd/r/x: not a value dmutex writes\n");
	cr_assert_eq(rw_keys("odd", "r"), 1, "the reset touched the foreign key");
}

/* A holder record in etcd with bytes a terminal obeys (another program's
 * key, a hostile writer): status, list and reset print it escaped, as
 * over Redis, never raw. */
Test(etcd_cli, hostile_holder_record_is_escaped)
{
	char out[512], *o;

	/* "dmutex:m/4:evil/q/x" = "h\x1b[2J\ax 11 12 tok", on no lease. */
	cr_assert_eq(th_etcd_http(&etcd, 0, "/v3/kv/put",
			"{\"key\":\"ZG11dGV4Om0vNDpldmlsL3EveA==\",\"value\":\"aBtbMkoHeCAxMSAxMiB0b2s=\"}",
			NULL, out, sizeof out, 0), 200, "%s", out);
	ASSERT_ST(DM_RUN(10000, "a", "status", "evil"), 0, "a");
	o = slurp_tag("a", "out");
	assert_contains(o, "holder:      h\\x1b[2J\\x07x pid 11 tid 12");
	cr_assert_null(strchr(o, '\x1b'), "a raw escape reached the terminal:\n%s", o);
	free(o);
	ASSERT_ST(DM_RUN(10000, "b", "list"), 0, "b");
	o = slurp_tag("b", "out");
	assert_contains(o, "h\\x1b[2J\\x07x pid 11");
	cr_assert_null(strchr(o, '\x1b'), "%s", o);
	free(o);
	ASSERT_ST(DM_RUN(10000, "c", "reset", "--force", "evil"), 0, "c");
	o = slurp_tag("c", "out");
	assert_contains(o, "reset 'evil': released the hold of h\\x1b[2J\\x07x pid 11 (fence ");
	cr_assert_null(strchr(o, '\x1b'), "%s", o);
	free(o);
}
