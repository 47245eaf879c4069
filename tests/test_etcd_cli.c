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
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dmutex.h"
#include "harness.h"
#include "harness_etcd.h"
#include "dm_cmd.h"

/* The exit statuses of dmutex(1). */
enum { ST_BUSY = 80, ST_NOLOCK = 84, ST_REFUSED = 85 };

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

/* Read-write locks have no operators' view over etcd yet: status and
 * reset of a name that is only a read-write lock say so with "no such
 * lock" (84), list says so on stderr, and nothing of the lock is touched. */
Test(etcd_cli, rwlock_not_shown_and_said_so)
{
	dmutex_client_t *c;
	dmutex_attr_t a;
	drwlock_t rw;
	char *o;

	cr_assert_eq(dmutex_client_open(&c, etcd.url), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	cr_assert_eq(drwlock_init(&rw, "doc", &a), 0);
	dmutex_attr_destroy(&a);
	cr_assert_eq(drwlock_wrlock(&rw), 0);
	ASSERT_ST(DM_RUN(10000, "a", "status", "doc"), ST_NOLOCK, "a");
	o = slurp_tag("a", "err");
	assert_contains(o, "no such lock 'doc' (read-write locks are not shown over etcd: mutexes only)");
	free(o);
	ASSERT_ST(DM_RUN(10000, "b", "reset", "--force", "doc"), ST_NOLOCK, "b");
	o = slurp_tag("b", "err");
	assert_contains(o, "read-write locks are not shown over etcd");
	free(o);
	ASSERT_ST(DM_RUN(10000, "c", "list", "--json"), 0, "c");
	assert_json("c", "d == []");
	o = slurp_tag("c", "err");
	assert_contains(o, "dmutex: read-write locks are not shown over etcd: mutexes only\n");
	free(o);
	/* Still the writer's: the reset touched nothing. */
	cr_assert_eq(drwlock_unlock(&rw), 0);
	cr_assert_eq(drwlock_destroy(&rw), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}
