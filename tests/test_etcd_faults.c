/*
 * Faults over etcd://, with real etcd members (tests/lib/harness_etcd.c):
 *  - three processes x two threads take one fenced lock while the leader
 *    of a three-member cluster is killed -9 and later restarted with its
 *    data: no two holds overlap, tokens strictly increase in hold order,
 *    every process makes progress after the election, no call outlives
 *    its deadline by more than a second; errors are counted and shown;
 *  - a holder process paused (SIGSTOP) past its lease: another process
 *    gets the lock within the lease plus the election time, the resumed
 *    holder's unlock says ENOLCK (or its onlost ran), and its token is
 *    lower than the new holder's;
 *  - an unmodified pthread program through the shim, as three processes
 *    over etcd://: an exact count.
 *
 * DMUTEX_TEST_ETCD_SECONDS sets the first one's duration (default 12; the
 * issue's figure is 20).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmutex.h"
#include "harness.h"
#include "harness_etcd.h"
#include "dmt.h"

#define PROCS 3
#define THREADS 2
/* The clients' command timeout in the fault tests: long enough for an
 * ordinary answer on a loaded machine, short enough that a call stuck on
 * a dead member moves on to the next.  (A timed lock's tries carry its
 * deadline, so this no longer adds to how late one returns: it once did,
 * 3 s gave 2.9 s past the deadline at load 49.) */
#define FAULT_COMMAND_MS 700
/* How long a lock call of the fault tests waits (its own deadline). */
#define LOCK_WAIT_MS 3000
/* How far past its own deadline a call may return (the bound). */
#define OVERSHOOT_MS 1000

static struct th_etcd etcd;
static pid_t kids[PROCS];

static void etcd_down(void)
{
	for (int i = 0; i < PROCS; i++)
		dmt_reap(&kids[i]);
	th_etcd_stop(&etcd);
}

static void need_etcd(void)
{
	if (!th_etcd_available())
		cr_skip_test("etcd is not installed (Debian: apt-get install etcd-server)");
}

TestSuite(etcd_faults, .fini = etcd_down, .timeout = 150);

static int duration_ms(void)
{
	const char *s = getenv("DMUTEX_TEST_ETCD_SECONDS");
	int v = s && *s ? atoi(s) : 12;
	return (v < 4 ? 4 : v) * 1000;
}

/* ------------------------------------------------------------------ */
/* the leader killed under three processes x two threads               */
/* ------------------------------------------------------------------ */

/* One worker process: the shared state of its threads. */
struct worker {
	dmutex_t m;
	int log_fd;
	long long end_ms;
	atomic_int holds, errors, lost;
	atomic_llong over_ms;      /* the worst return past a call's deadline */
	char worst[64];            /* which call that was */
};

static void note_over(struct worker *w, const char *what, long long over)
{
	if (over > atomic_load(&w->over_ms)) {
		atomic_store(&w->over_ms, over);
		snprintf(w->worst, sizeof w->worst, "%s", what);
	}
}

static void log_line(struct worker *w, char kind, uint64_t tok)
{
	char line[96];
	int n = snprintf(line, sizeof line, "%c %llu %d %lld\n", kind, (unsigned long long)tok,
	                 (int)getpid(), th_now_ms());
	/* O_APPEND: one write is one record, in the order of the writes */
	if (write(w->log_fd, line, (size_t)n) != n)
		atomic_fetch_add(&w->errors, 1);
}

/* One hold: lock with a deadline, fence, log B, a little work, log E,
 * unlock; every call's return measured against its own deadline. */
static void one_round(struct worker *w)
{
	struct timespec ts;
	long long dl = th_now_ms() + LOCK_WAIT_MS;
	dmt_deadline_in(CLOCK_MONOTONIC, LOCK_WAIT_MS, &ts);
	int rc = dmutex_clocklock(&w->m, CLOCK_MONOTONIC, &ts);
	note_over(w, "lock", th_now_ms() - dl);
	if (rc != 0) {
		atomic_fetch_add(&w->errors, 1);
		return;
	}
	uint64_t tok = 0;
	long long t = th_now_ms();
	rc = dmutex_fence(&w->m, &tok);
	note_over(w, "fence", th_now_ms() - t - FAULT_COMMAND_MS);
	if (rc != 0)
		atomic_fetch_add(&w->errors, 1);
	log_line(w, 'B', tok);
	struct timespec work = { 0, 2 * 1000000L };
	nanosleep(&work, NULL);
	log_line(w, 'E', tok);
	t = th_now_ms();
	rc = dmutex_unlock(&w->m);
	/* one unlock has one deadline, command_timeout_ms */
	note_over(w, "unlock", th_now_ms() - t - FAULT_COMMAND_MS);
	if (rc == ENOLCK)
		atomic_fetch_add(&w->lost, 1);
	else if (rc != 0)
		atomic_fetch_add(&w->errors, 1);
	else
		atomic_fetch_add(&w->holds, 1);
}

static void *worker_thread(void *arg)
{
	struct worker *w = arg;
	while (th_now_ms() < w->end_ms)
		one_round(w);
	return NULL;
}

/* Child: arg "URL LOG END_MS"; two threads take the lock until END_MS,
 * then one "R pid holds errors lost over_ms worst" line. */
static int elect_worker(const char *arg)
{
	char u[512], path[300];
	long long end;
	if (sscanf(arg, "%511s %299s %lld", u, path, &end) != 3)
		return 90;
	static struct worker w;
	w.end_ms = end;
	w.log_fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
	dmutex_client_t *c;
	if (w.log_fd < 0 || dmt_client_open_retry(&c, u) != 0 ||
	    dmt_init_mutex(&w.m, "t-elect", c, NULL) != 0)
		return 91;
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, worker_thread, &w);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	char line[160];
	int n = snprintf(line, sizeof line, "R %d %d %d %d %lld %s\n", (int)getpid(),
	                 atomic_load(&w.holds), atomic_load(&w.errors), atomic_load(&w.lost),
	                 atomic_load(&w.over_ms), w.worst[0] ? w.worst : "-");
	if (write(w.log_fd, line, (size_t)n) != n)
		return 92;
	dmt_close_mutex(c, &w.m);
	return 0;
}
TH_CHILD_ENTRY(etcd_elect_worker, elect_worker)

/* What the parent reads back from the log. */
struct verdict {
	int holds, records;
	pid_t pid[PROCS];
	int after[PROCS];          /* holds begun after the election */
	int reports;
};

static int pid_index(struct verdict *v, pid_t pid)
{
	for (int i = 0; i < PROCS; i++)
		if (v->pid[i] == pid)
			return i;
	return -1;
}

/* Every B is followed by the E of the same token before any other B, and
 * tokens strictly increase from one B to the next. */
static void check_log(const char *path, long long elected_ms, struct verdict *v)
{
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f);
	char line[200];
	unsigned long long open_tok = 0, last_tok = 0;
	int in_hold = 0;
	while (fgets(line, sizeof line, f)) {
		char kind;
		unsigned long long tok;
		int pid;
		long long at;
		v->records++;
		if (line[0] == 'R') {
			int h, e, l;
			long long over;
			char worst[64];
			cr_assert_eq(sscanf(line, "R %d %d %d %d %lld %63s", &pid, &h, &e, &l, &over, worst), 6);
			cr_log_info("process %d: %d holds, %d errors, %d lost, worst overshoot %lld ms (%s)",
			            pid, h, e, l, over, worst);
			/* issue 27: no call outlives its deadline by more than a second */
			cr_assert_leq(over, OVERSHOOT_MS, "process %d: %s returned %lld ms past its deadline",
			              pid, worst, over);
			cr_expect_eq(l, 0, "process %d lost %d holds", pid, l);
			v->reports++;
			continue;
		}
		cr_assert_eq(sscanf(line, "%c %llu %d %lld", &kind, &tok, &pid, &at), 4, "bad record %s", line);
		if (kind == 'B') {
			cr_assert_eq(in_hold, 0, "record %d: hold %llu began inside hold %llu", v->records, tok,
			             open_tok);
			cr_assert_gt(tok, last_tok, "record %d: token %llu after %llu", v->records, tok, last_tok);
			in_hold = 1;
			open_tok = last_tok = tok;
			v->holds++;
			int i = pid_index(v, pid);
			if (i >= 0 && at > elected_ms)
				v->after[i]++;
		} else {
			cr_assert(in_hold && tok == open_tok, "record %d: end of %llu, open %llu", v->records,
			          tok, open_tok);
			in_hold = 0;
		}
	}
	fclose(f);
}

Test(etcd_faults, leader_killed_and_restarted_under_contention)
{
	need_etcd();
	struct th_etcd_opts o = { .members = 3 };
	cr_assert_eq(th_etcd_start(&etcd, &o, 0), 0, "the cluster did not start");
	char u[600], path[320], arg[1000];
	snprintf(u, sizeof u, "%s?command_timeout_ms=%d&lease_ms=5000", etcd.url, FAULT_COMMAND_MS);
	snprintf(path, sizeof path, "%s/holds.log", etcd.dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	close(fd);
	long long t0 = th_now_ms(), dur = duration_ms();
	snprintf(arg, sizeof arg, "%s %s %lld", u, path, t0 + dur);
	struct verdict v = { 0 };
	for (int i = 0; i < PROCS; i++) {
		kids[i] = th_spawn_exec("etcd_elect_worker", arg);
		cr_assert_gt(kids[i], 0);
		v.pid[i] = kids[i];
	}
	dmt_pass_time_until_ms(t0 + dur / 4);
	int leader;
	long long k0 = th_now_ms();
	int killed = th_etcd_kill_leader(&etcd, &leader, 20000);
	cr_assert_geq(killed, 0, "no new leader after killing the old one");
	long long elected = th_now_ms();
	cr_log_info("leader m%d killed; m%d elected in %lld ms", killed, leader, elected - k0);
	dmt_pass_time_until_ms(t0 + dur * 5 / 8);
	cr_assert_eq(th_etcd_restart(&etcd, killed, 0), 0, "the old leader did not restart");
	cr_assert_geq(th_etcd_wait_healthy(&etcd, 20000), 0, "not healthy after the restart");
	for (int i = 0; i < PROCS; i++) {
		int st = th_wait_child(kids[i], (int)dur + 60000);
		kids[i] = 0;
		cr_assert_eq(st, 0, "worker %d exited %d", i, st);
	}
	check_log(path, elected, &v);
	cr_log_info("%d holds in %lld ms", v.holds, dur);
	cr_assert_eq(v.reports, PROCS);
	cr_assert_geq(v.holds, 10, "only %d holds", v.holds);
	for (int i = 0; i < PROCS; i++)
		cr_assert_gt(v.after[i], 0, "process %d made no progress after the election", i);
}

/* ------------------------------------------------------------------ */
/* a holder paused past its lease                                      */
/* ------------------------------------------------------------------ */

static atomic_int lost_calls;

/* Child: arg "URL TO_PARENT FROM_PARENT": lock, fence, send "TOKEN\n",
 * wait for a byte (sent after SIGCONT), unlock, send "RC LOST\n". */
static int paused_holder(const char *arg)
{
	char u[512];
	int out, in;
	if (sscanf(arg, "%511s %d %d", u, &out, &in) != 3)
		return 90;
	dmutex_client_t *c;
	dmutex_t m;
	struct dmt_attr a = { .onlost = dmt_count_lost, .arg = &lost_calls };
	uint64_t tok;
	if (dmt_open_mutex(&c, &m, u, "t-paused", &a) != 0 || dmutex_lock(&m) != 0 ||
	    dmutex_fence(&m, &tok) != 0)
		return 91;
	char line[64], go;
	int n = snprintf(line, sizeof line, "%llu\n", (unsigned long long)tok);
	if (write(out, line, (size_t)n) != n || read(in, &go, 1) != 1)
		return 92;
	int rc = dmutex_unlock(&m);
	n = snprintf(line, sizeof line, "%d %d\n", rc, atomic_load(&lost_calls));
	if (write(out, line, (size_t)n) != n)
		return 93;
	return 0;
}
TH_CHILD_ENTRY(etcd_paused_holder, paused_holder)

static void read_line(int fd, char *buf, size_t len)
{
	size_t n = 0;
	while (n + 1 < len) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		cr_assert_eq(poll(&p, 1, 20000 * dmt_slowdown()), 1, "the holder said nothing");
		cr_assert_eq(read(fd, buf + n, 1), 1, "the holder closed its pipe");
		if (buf[n++] == '\n')
			break;
	}
	buf[n] = '\0';
}

Test(etcd_faults, paused_holder_loses_to_the_next)
{
	need_etcd();
	cr_assert_eq(th_etcd_start(&etcd, NULL, 0), 0, "etcd did not start");
	/* a 2 s lease (etcd's minimum with a 1 s election timeout) */
	char u[600], arg[800], line[64];
	snprintf(u, sizeof u, "%s?command_timeout_ms=%d&lease_ms=2000", etcd.url, FAULT_COMMAND_MS);
	int up[2], down[2];
	cr_assert_eq(pipe(up), 0);
	cr_assert_eq(pipe(down), 0);
	snprintf(arg, sizeof arg, "%s %d %d", u, up[1], down[0]);
	kids[0] = th_spawn_exec("etcd_paused_holder", arg);
	close(up[1]);
	close(down[0]);
	read_line(up[0], line, sizeof line);
	unsigned long long old_tok = strtoull(line, NULL, 10);
	dmutex_client_t *c;
	dmutex_t m;
	cr_assert_eq(dmt_open_mutex(&c, &m, u, "t-paused", NULL), 0);
	cr_assert_eq(dmutex_trylock(&m), EBUSY);
	cr_assert_eq(kill(kids[0], SIGSTOP), 0);
	cr_assert_eq(th_wait_stopped(kids[0]), 0);
	long long t0 = th_now_ms();
	struct timespec ts;
	dmt_deadline_in(CLOCK_MONOTONIC, 20000, &ts);
	cr_assert_eq(dmutex_clocklock(&m, CLOCK_MONOTONIC, &ts), 0);
	long long took = th_now_ms() - t0;
	cr_log_info("the lock passed %lld ms after the holder stopped", took);
	/* the lease, an election timeout (etcd's expiry check), the machine */
	cr_assert_leq(took, 2000 + etcd.election_ms + DMT_LATE_MS, "took %lld ms", took);
	uint64_t tok;
	cr_assert_eq(dmutex_fence(&m, &tok), 0);
	cr_assert_gt(tok, old_tok, "new token %llu, paused holder's %llu", (unsigned long long)tok,
	             old_tok);
	cr_assert_eq(kill(kids[0], SIGCONT), 0);
	cr_assert_eq(write(down[1], "g", 1), 1);
	read_line(up[0], line, sizeof line);
	int rc = -1, lost = -1;
	cr_assert_eq(sscanf(line, "%d %d", &rc, &lost), 2);
	cr_assert(rc == ENOLCK || (lost > 0 && rc != 0),
	          "the paused holder's unlock said %d, onlost ran %d times", rc, lost);
	cr_assert_eq(th_wait_child(kids[0], 10000), 0);
	kids[0] = 0;
	cr_assert_eq(dmutex_unlock(&m), 0);
	dmt_close_mutex(c, &m);
}

/* ------------------------------------------------------------------ */
/* a timed lock with the member stopped ends at its deadline           */
/* ------------------------------------------------------------------ */

/* The only member SIGSTOPped (it takes the request and answers nothing):
 * with a 5 s command timeout, a clocklock 300 ms ahead says ETIMEDOUT
 * within 500 ms (x3 under the sanitizers) of its deadline, not a command
 * timeout later; the member resumed runs the request it was sent, and the
 * lock it took is given back in the background long before its 10 s lease. */
Test(etcd_faults, timedlock_ends_at_its_deadline_with_the_member_stopped)
{
	need_etcd();
	cr_assert_eq(th_etcd_start(&etcd, NULL, 0), 0, "etcd did not start");
	char u[600];
	snprintf(u, sizeof u, "%s?command_timeout_ms=5000&connect_timeout_ms=5000", etcd.url);
	dmutex_client_t *c, *o;
	dmutex_t m, om;
	struct dmt_attr a = { .lease_ms = 10000, .nocache = 1 };
	cr_assert_eq(dmt_open_mutex(&c, &m, u, "t-timed", &a), 0);
	cr_assert_eq(dmt_open_mutex(&o, &om, u, "t-timed", &a), 0);
	/* connections and the lease made: nothing but the request in the window */
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_lock(&om), 0);
	cr_assert_eq(dmutex_unlock(&om), 0);
	cr_assert_eq(th_etcd_pause(&etcd, 0), 0);
	struct timespec ts;
	dmt_deadline_in(CLOCK_MONOTONIC, 300, &ts);
	long long t0 = th_now_ms();
	int rc = dmutex_clocklock(&m, CLOCK_MONOTONIC, &ts);
	long long late = dmt_late_ms("clocklock, member stopped", rc, t0, 300);
	cr_assert_eq(th_etcd_resume(&etcd, 0), 0);
	cr_assert_eq(rc, ETIMEDOUT, "clocklock with the member stopped: %s", dmutex_strerror(rc));
	cr_assert_lt(late, 500LL * dmt_slowdown(), "clocklock returned %lld ms past its deadline", late);
	cr_assert_eq(dmutex_unlock(&m), EPERM, "ETIMEDOUT left a hold behind");
	long long resumed = th_now_ms();
	cr_assert(th_wait_until(dmt_lock_free, &om, 4000 * dmt_slowdown()),
	          "an abandoned acquire still holds the lock %lld ms after the resume (lease 10 s)",
	          th_now_ms() - resumed);
	dmt_close_mutex(c, &m);
	dmt_close_mutex(o, &om);
}

/* ------------------------------------------------------------------ */
/* the shim: an unmodified pthread program as three processes          */
/* ------------------------------------------------------------------ */

Test(etcd_faults, shim_program_three_processes_exact_count)
{
	need_etcd();
	const char *prog = getenv("ETCD_SHIM_PROG");
	cr_assert(prog && *prog, "ETCD_SHIM_PROG is not set (tests/meson.build sets it)");
	cr_assert_eq(th_etcd_start(&etcd, NULL, 0), 0, "etcd did not start");
	char path[320], env_url[700], ns[64];
	snprintf(path, sizeof path, "%s/counter", etcd.dir);
	snprintf(env_url, sizeof env_url, "DMUTEX_URL=%s?command_timeout_ms=%d", etcd.url,
	         th_command_timeout_ms());
	snprintf(ns, sizeof ns, "DMUTEX_NAMESPACE=etcd-shim-%d", (int)getpid());
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, "0\n", 2), 2);
	close(fd);
	const char *const env[] = { env_url, ns, NULL };
	const char *const argv[] = { prog, path, "2", "15", NULL };
	char out[340];
	snprintf(out, sizeof out, "%s/shim.out", etcd.dir);
	/* th_run waits: the three run at once from threads of their own */
	pid_t p[PROCS];
	for (int i = 0; i < PROCS; i++) {
		p[i] = fork();
		cr_assert_geq(p[i], 0);
		if (p[i] == 0)
			_exit(th_run(argv, env, out, 60000 * dmt_slowdown()) & 0xff);
		kids[i] = p[i];
	}
	for (int i = 0; i < PROCS; i++) {
		int st = th_wait_child(p[i], 90000 * dmt_slowdown());
		kids[i] = 0;
		cr_assert_eq(st, 0, "process %d exited %d (see %s)", i, st, out);
	}
	char buf[32] = "";
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f);
	cr_assert_not_null(fgets(buf, sizeof buf, f));
	fclose(f);
	cr_assert_eq(atoi(buf), PROCS * 2 * 15, "counter %s, want %d", buf, PROCS * 2 * 15);
}

/* ------------------------------------------------------------------ */
/* a member paused                                                     */
/* ------------------------------------------------------------------ */

struct looper {
	dmutex_t m;
	atomic_int *inside, *overlaps, *stop;
	atomic_llong last_ok;      /* th_now_ms() of the last hold */
	atomic_ullong last_tok;
	atomic_int holds, errors, backwards;
};

static void *loop_thread(void *arg)
{
	struct looper *l = arg;
	while (!atomic_load(l->stop)) {
		struct timespec ts;
		uint64_t tok = 0;
		dmt_deadline_in(CLOCK_MONOTONIC, LOCK_WAIT_MS, &ts);
		if (dmutex_clocklock(&l->m, CLOCK_MONOTONIC, &ts)) {
			atomic_fetch_add(&l->errors, 1);
			continue;
		}
		if (atomic_fetch_add(l->inside, 1))
			atomic_fetch_add(l->overlaps, 1);
		if (dmutex_fence(&l->m, &tok) == 0) {
			/* both threads' holds: the token of each new one is higher */
			uint64_t prev = atomic_exchange(&l->last_tok, tok);
			if (tok <= prev)
				atomic_fetch_add(&l->backwards, 1);
		}
		atomic_fetch_sub(l->inside, 1);
		if (dmutex_unlock(&l->m))
			atomic_fetch_add(&l->errors, 1);
		else
			atomic_fetch_add(&l->holds, 1);
		atomic_store(&l->last_ok, th_now_ms());
	}
	return NULL;
}

struct progress {
	struct looper *l;
	long long after;
};

static int both_progressed(void *arg)
{
	struct progress *p = arg;
	return atomic_load(&p->l[0].last_ok) > p->after && atomic_load(&p->l[1].last_ok) > p->after;
}

/* The leader SIGSTOPped (it neither answers nor closes its connections):
 * two clients of one lock fail over to the other members and go on, one
 * holder at a time, tokens rising; the member resumed rejoins. */
Test(etcd_faults, paused_leader_clients_fail_over)
{
	need_etcd();
	struct th_etcd_opts o = { .members = 3 };
	cr_assert_eq(th_etcd_start(&etcd, &o, 0), 0, "the cluster did not start");
	char u[600];
	snprintf(u, sizeof u, "%s?command_timeout_ms=%d&connect_timeout_ms=1000", etcd.url,
	         FAULT_COMMAND_MS);
	atomic_int inside = 0, overlaps = 0, stop = 0;
	struct looper l[2];
	dmutex_client_t *c[2];
	pthread_t t[2];
	for (int i = 0; i < 2; i++) {
		memset(&l[i], 0, sizeof l[i]);
		l[i].inside = &inside;
		l[i].overlaps = &overlaps;
		l[i].stop = &stop;
		cr_assert_eq(dmt_open_mutex(&c[i], &l[i].m, u, "t-paused-member", NULL), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, loop_thread, &l[i]);
	struct progress p = { l, th_now_ms() };
	cr_assert(th_wait_until(both_progressed, &p, 10000), "no progress before the fault");
	int leader = th_etcd_leader(&etcd);
	cr_assert_geq(leader, 0);
	cr_assert_eq(th_etcd_pause(&etcd, leader), 0);
	long long t0 = th_now_ms();
	int nl = th_etcd_wait_healthy(&etcd, 20000);
	cr_assert_geq(nl, 0, "no new leader while m%d is paused", leader);
	cr_assert_neq(nl, leader);
	p.after = th_now_ms();
	/* an election, then at most a command timeout on the paused member */
	int ok = th_wait_until(both_progressed, &p, 2 * LOCK_WAIT_MS + 5000);
	cr_log_info("m%d paused; m%d elected after %lld ms; both clients on again %lld ms later",
	            leader, nl, p.after - t0, th_now_ms() - p.after);
	/* and they stay on: a client that asked the paused member first each
	 * time would pay a command timeout for every request */
	int h0 = atomic_load(&l[0].holds) + atomic_load(&l[1].holds);
	dmt_pass_time_ms(3000);
	int during = atomic_load(&l[0].holds) + atomic_load(&l[1].holds) - h0;
	cr_log_info("%d holds in 3 s with m%d paused", during, leader);
	cr_assert_eq(th_etcd_resume(&etcd, leader), 0);
	cr_assert(ok, "a client made no progress with the leader paused");
	cr_assert_geq(during, 20, "%d holds in 3 s with a member paused", during);
	cr_assert_geq(th_etcd_wait_healthy(&etcd, 20000), 0, "not healthy after the resume");
	atomic_store(&stop, 1);
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		cr_log_info("client %d: %d holds, %d errors", i, atomic_load(&l[i].holds),
		            atomic_load(&l[i].errors));
	}
	cr_assert_eq(atomic_load(&overlaps), 0, "two holders at once");
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(atomic_load(&l[i].backwards), 0, "client %d: a token went backwards", i);
		dmt_close_mutex(c[i], &l[i].m);
	}
}

/* The same program's condition variable: three processes x two threads
 * take turns in a fixed order, each woken by the others' broadcasts. */
Test(etcd_faults, shim_program_turns_through_a_condition_variable)
{
	need_etcd();
	const char *prog = getenv("ETCD_SHIM_PROG");
	cr_assert(prog && *prog, "ETCD_SHIM_PROG is not set (tests/meson.build sets it)");
	cr_assert_eq(th_etcd_start(&etcd, NULL, 0), 0, "etcd did not start");
	char path[320], env_url[700], ns[64], out[340], idx[PROCS][4];
	snprintf(path, sizeof path, "%s/turns", etcd.dir);
	snprintf(out, sizeof out, "%s/turns.out", etcd.dir);
	snprintf(env_url, sizeof env_url, "DMUTEX_URL=%s?command_timeout_ms=%d", etcd.url,
	         th_command_timeout_ms());
	snprintf(ns, sizeof ns, "DMUTEX_NAMESPACE=etcd-turns-%d", (int)getpid());
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	close(fd);
	const char *const env[] = { env_url, ns, NULL };
	for (int i = 0; i < PROCS; i++) {
		snprintf(idx[i], sizeof idx[i], "%d", i);
		const char *const argv[] = { prog, "turns", path, idx[i], "4", NULL };
		kids[i] = fork();
		cr_assert_geq(kids[i], 0);
		if (kids[i] == 0)
			_exit(th_run(argv, env, out, 90000 * dmt_slowdown()) & 0xff);
	}
	for (int i = 0; i < PROCS; i++) {
		int st = th_wait_child(kids[i], 120000 * dmt_slowdown());
		kids[i] = 0;
		cr_assert_eq(st, 0, "process %d exited %d (see %s)", i, st, out);
	}
	char buf[64] = "";
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f);
	cr_assert_not_null(fgets(buf, sizeof buf, f));
	fclose(f);
	cr_assert_str_eq(buf, "012345012345012345012345");
}
