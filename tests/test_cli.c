/*
 * The dmutex command against a real redis-server: the built binary (path in
 * $DMUTEX_BIN) is run as a child process, with its output in files; the
 * test process holds locks through the library when it needs a holder.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pty.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dmutex.h"
#include "dmutex_config.h"
#include "dmt.h"
#include "harness.h"
#include "dm_cmd.h"

/* The exit statuses of dmutex(1). */
enum {
	ST_USAGE = 64, ST_BUSY = 80, ST_TIMEDOUT = 81, ST_LOST = 82, ST_NOTREC = 83,
	ST_NOLOCK = 84, ST_REFUSED = 85, ST_BADURL = 86, ST_BACKEND = 87,
	ST_NOEXEC = 126, ST_NOTFOUND = 127
};

static struct th_redis srv;
static struct dm_cmd dm;

static void
up(void)
{
	cr_assert(getenv("DMUTEX_BIN"), "DMUTEX_BIN is not set (run through meson test)");
	cr_assert_eq(th_redis_start(&srv, NULL), 0, "redis-server did not start");
	cr_assert_eq(dm_cmd_init(&dm, "dmutex-cli"), 0);
	setenv("DMUTEX_URL", srv.url, 1);
	setenv("DMUTEX_LOG", "warn", 1);
}

static void
down(void)
{
	/* A failed assertion may leave a dmutex or COMMAND running. */
	dm_cmd_fini(&dm);
	th_redis_stop(&srv);
}

TestSuite(cli, .init = up, .fini = down, .timeout = 30);

/* ------------------------------------------------------------------ */
/* running dmutex                                                      */
/* ------------------------------------------------------------------ */

static const char *
tpath(const char *name)
{
	static char buf[8][600];
	static int k;
	char *b = buf[k++ % 8];

	snprintf(b, sizeof buf[0], "%s/%s", dm.dir, name);
	return b;
}

/* DM_RUN(ms, tag, args...): the arguments end with a NULL added here. */
#define DM_START(...) dm_cmd_start(&dm, __VA_ARGS__, (char *)NULL)
#define DM_RUN(...) dm_cmd_run(&dm, __VA_ARGS__, (char *)NULL)

/* A file's content (malloc'd, "" when missing). */
static char *
slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = calloc(1, 1 << 20);
	size_t n = 0;

	cr_assert(buf);
	if (f) {
		n = fread(buf, 1, (1 << 20) - 1, f);
		fclose(f);
	}
	buf[n] = '\0';
	return buf;
}

static char *
out_of(const char *tag)
{
	char name[128];
	snprintf(name, sizeof name, "%s.out", tag);
	return slurp(tpath(name));
}

static char *
err_of(const char *tag)
{
	char name[128];
	snprintf(name, sizeof name, "%s.err", tag);
	return slurp(tpath(name));
}

#define ASSERT_ST(got, want, tag) DM_CMD_ASSERT_ST(&dm, got, want, tag)

static void
assert_contains(const char *hay, const char *needle)
{
	cr_assert(strstr(hay, needle), "expected \"%s\" in:\n%s", needle, hay);
}

/* python3 checks a JSON file: expr over d, the parsed document. */
static void
assert_json(const char *tag, const char *expr)
{
	char cmd[4096], name[128];

	snprintf(name, sizeof name, "%s.out", tag);
	/* PYTHON: meson's own (tests/meson.build), not a shim on PATH */
	const char *py = getenv("PYTHON");

	snprintf(cmd, sizeof cmd,
			"%s -c 'import json,sys; d=json.load(open(sys.argv[1])); "
			"sys.exit(0 if (%s) else 1)' %s", py && *py ? py : "python3", expr, tpath(name));
	char *o = out_of(tag);
	cr_assert_eq(system(cmd), 0, "JSON check failed: %s\non:\n%s", expr, o);
	free(o);
}

struct file_cond { const char *path; };

static int
file_nonempty(void *p)
{
	struct stat st;
	return stat(((struct file_cond *)p)->path, &st) == 0 && st.st_size > 0;
}

/* The pid COMMAND wrote into a file, once it has. */
static pid_t
wait_pidfile(const char *path)
{
	struct file_cond fc = { path };
	char *s;
	pid_t pid;

	cr_assert(th_wait_until(file_nonempty, &fc, 5000), "COMMAND never started");
	/* The write may still be in flight: read until a full line. */
	for (long long until = th_now_ms() + 2000;;) {
		s = slurp(path);
		if (strchr(s, '\n') || th_now_ms() > until)
			break;
		free(s);
	}
	pid = (pid_t)atol(s);
	free(s);
	cr_assert_gt(pid, 0);
	return pid;
}

static int
gone(pid_t pid)
{
	return kill(pid, 0) < 0 && errno == ESRCH;
}

/* ------------------------------------------------------------------ */
/* holding from the test process                                       */
/* ------------------------------------------------------------------ */

struct holder {
	dmutex_client_t *c;
	dmutex_t m;
	atomic_int lost;
};

static void
count_lost(const char *name, void *arg)
{
	(void)name;
	atomic_fetch_add((atomic_int *)arg, 1);
}

static void
hold(struct holder *h, const char *name, int robust, unsigned lease_ms)
{
	dmutex_attr_t a;

	atomic_init(&h->lost, 0);
	cr_assert_eq(dmutex_client_open(&h->c, srv.url), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, h->c), 0);
	cr_assert_eq(dmutex_attr_setonlost(&a, count_lost, &h->lost), 0);
	if (robust)
		cr_assert_eq(dmutex_attr_setrobust(&a, DMUTEX_ROBUST), 0);
	if (lease_ms)
		cr_assert_eq(dmutex_attr_setlease(&a, lease_ms), 0);
	cr_assert_eq(dmutex_init(&h->m, name, &a), 0);
	dmutex_attr_destroy(&a);
}

static void
unhold(struct holder *h)
{
	cr_assert_eq(dmutex_destroy(&h->m), 0);
	cr_assert_eq(dmutex_client_close(h->c), 0);
}

static int
lost_once(void *p)
{
	return atomic_load(&((struct holder *)p)->lost) >= 1;
}

/* A child process that takes NAME (robust) and exits holding it: the
 * library's exit handler releases it marked owner-died. */
struct dier { char url[700]; const char *name; };

static int
die_holding(void *p)
{
	struct dier *d = p;
	dmutex_client_t *c;
	dmutex_attr_t a;
	dmutex_t m;
	uint64_t fence;

	if (dmutex_client_open(&c, d->url))
		return 10;
	dmutex_attr_init(&a);
	dmutex_attr_setclient(&a, c);
	dmutex_attr_setrobust(&a, DMUTEX_ROBUST);
	if (dmutex_init(&m, d->name, &a))
		return 11;
	/* A token asked for: the name has a counter (key layout 3 hands one
	 * out only then). */
	if (dmutex_lock(&m) || dmutex_fence(&m, &fence))
		return 12;
	exit(0);
}

static void
owner_dies(const char *name)
{
	struct dier d = { .name = name };

	snprintf(d.url, sizeof d.url, "%s", srv.url);
	cr_assert_eq(th_wait_child(th_spawn(die_holding, &d), 10000), 0);
}

static long long
lock_exists(const char *name)
{
	return th_redis_int(&srv, "EXISTS dmutex:lock:{%s}", name);
}

static int
lock_exists_cond(void *name)
{
	return lock_exists(name) == 1;
}

/* The robust state: the meta hash's, or the lock key's not-recoverable
 * mark (key layout 3); "" when clean. */
static void
meta_state(const char *name, char *out, size_t len)
{
	dmt_meta_state(&srv, name, out, len);
}

struct numsub { const char *name; long long want; };

static int
waiters_are(void *p)
{
	struct numsub *ns = p;

	return dmt_backend_waiters(&srv, ns->name) == ns->want;
}

/* ------------------------------------------------------------------ */
/* run                                                                 */
/* ------------------------------------------------------------------ */

Test(cli, run_passes_command_status)
{
	char st[32];

	ASSERT_ST(DM_RUN(10000, "a", "run", "job", "--", "sh", "-c", "exit 7"), 7, "a");
	/* Killed by a signal: 128 + its number, as a shell reports it. */
	ASSERT_ST(DM_RUN(10000, "b", "run", "job", "--", "sh", "-c", "kill -USR1 $$"), 128 + SIGUSR1, "b");
	/* "--" is optional. */
	ASSERT_ST(DM_RUN(10000, "c", "run", "job", "true"), 0, "c");
	/* Each run released the lock cleanly. */
	cr_assert_eq(lock_exists("job"), 0);
	meta_state("job", st, sizeof st);
	cr_assert_str_eq(st, "");
}

Test(cli, run_gives_command_name_and_fence)
{
	char *o, want[64];

	ASSERT_ST(DM_RUN(10000, "a", "run", "job", "--", "true"), 0, "a");
	ASSERT_ST(DM_RUN(10000, "b", "run", "job", "--", "sh", "-c",
			"echo \"$DMUTEX_NAME $DMUTEX_FENCE ${DMUTEX_OWNER_DIED-unset}\""), 0, "b");
	o = out_of("b");
	/* The token of b's hold: the last one handed out. */
	snprintf(want, sizeof want, "job %lld unset\n", th_redis_int(&srv, "HGET dmutex:meta:{job} fence"));
	cr_assert_str_eq(o, want);
	free(o);
}

/* Four jobs, each appending start and end lines around a pause: under the
 * lock the lines pair up, and the fences rise in the order of the runs. */
Test(cli, run_never_overlaps)
{
	enum { N = 4 };
	pid_t p[N];
	char job[300], *log, *line, *save;
	long long last = 0;
	int k = 0;

	/* The pause is the job's work, there to give an overlap its chance. */
	snprintf(job, sizeof job,
			"echo \"start $DMUTEX_FENCE\" >> %s; sleep 0.15; echo \"end $DMUTEX_FENCE\" >> %s",
			tpath("log"), tpath("log"));
	for (int i = 0; i < N; i++) {
		char tag[8];
		snprintf(tag, sizeof tag, "r%d", i);
		p[i] = DM_START(tag, "run", "nightly", "--", "sh", "-c", job);
	}
	for (int i = 0; i < N; i++) {
		char tag[8];
		snprintf(tag, sizeof tag, "r%d", i);
		ASSERT_ST(th_wait_child(p[i], 20000), 0, tag);
	}
	log = slurp(tpath("log"));
	for (line = strtok_r(log, "\n", &save); line; line = strtok_r(NULL, "\n", &save), k++) {
		long long f;
		if (k % 2 == 0) {
			cr_assert_eq(sscanf(line, "start %lld", &f), 1, "line %d: %s", k, line);
			cr_assert_gt(f, last, "fences must rise: %lld after %lld", f, last);
			last = f;
		} else {
			cr_assert_eq(sscanf(line, "end %lld", &f), 1, "overlap at line %d: %s", k, line);
			cr_assert_eq(f, last, "line %d ends another job's hold", k);
		}
	}
	cr_assert_eq(k, 2 * N);
	free(log);
}

Test(cli, run_nonblock_busy)
{
	struct holder h;
	long long t0;
	char *e;
	struct stat st;

	hold(&h, "job", 0, 0);
	cr_assert_eq(dmutex_lock(&h.m), 0);
	t0 = th_now_ms();
	ASSERT_ST(DM_RUN(10000, "a", "run", "-n", "job", "--", "touch", tpath("ran")), ST_BUSY, "a");
	cr_assert_lt(th_now_ms() - t0, 2000, "-n must not wait");
	cr_assert_neq(stat(tpath("ran"), &st), 0, "COMMAND ran without the lock");
	/* Not a terminal: quiet, so that cron sends no mail. */
	e = err_of("a");
	cr_assert_str_eq(e, "");
	free(e);
	cr_assert_eq(dmutex_unlock(&h.m), 0);
	ASSERT_ST(DM_RUN(10000, "b", "run", "-n", "job", "--", "touch", tpath("ran")), 0, "b");
	cr_assert_eq(stat(tpath("ran"), &st), 0);
	unhold(&h);
}

Test(cli, run_wait_times_out)
{
	struct holder h;
	long long t0, took;
	char *e, want[64];

	hold(&h, "job", 0, 0);
	cr_assert_eq(dmutex_lock(&h.m), 0);
	t0 = th_now_ms();
	ASSERT_ST(DM_RUN(10000, "a", "run", "-w", "1", "job", "--", "true"), ST_TIMEDOUT, "a");
	took = th_now_ms() - t0;
	/* The bound holds the exec'd tool's start and exit too (3x slower,
	 * with LeakSanitizer's check, under ASan); one that ignored -w would
	 * wait for the renewed hold until DM_RUN's 10 s. */
	cr_assert(took >= 950 && took < 1000 + 2000 * dmt_slowdown(), "-w 1 gave up after %lld ms", took);
	e = err_of("a");
	assert_contains(e, "timed out");
	snprintf(want, sizeof want, "pid %d ", (int)getpid());
	assert_contains(e, want);
	free(e);
	cr_assert_eq(dmutex_unlock(&h.m), 0);
	unhold(&h);
}

/* A waiting run takes the lock when it is released, woken by the release
 * (well before the 10 s lease could run out). */
Test(cli, run_wait_acquires_on_release)
{
	struct holder h;
	struct numsub ns = { "job", 1 };
	struct stat st;
	pid_t p;
	long long t0;

	hold(&h, "job", 0, 10000);
	cr_assert_eq(dmutex_lock(&h.m), 0);
	p = DM_START("a", "run", "-w", "20", "job", "--", "touch", tpath("ran"));
	cr_assert(th_wait_until(waiters_are, &ns, 5000), "dmutex never waited");
	cr_assert_neq(stat(tpath("ran"), &st), 0);
	t0 = th_now_ms();
	cr_assert_eq(dmutex_unlock(&h.m), 0);
	ASSERT_ST(th_wait_child(p, 10000), 0, "a");
	/* Woken by the release, then COMMAND and the tool's exit (3x slower
	 * under ASan): still well before the holder's 10 s lease. */
	cr_assert_lt(th_now_ms() - t0, 1000 + 2000 * dmt_slowdown());
	cr_assert_eq(stat(tpath("ran"), &st), 0);
	unhold(&h);
}

/* kill(2) on dmutex reaches COMMAND; its death by that signal is the status. */
Test(cli, run_forwards_signals)
{
	static const int sigs[] = { SIGTERM, SIGUSR2, SIGHUP };

	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
		char tag[8], pidf[16], job[200];
		pid_t p, cmd;

		snprintf(tag, sizeof tag, "s%zu", i);
		snprintf(pidf, sizeof pidf, "pid%zu", i);
		snprintf(job, sizeof job, "echo $$ > %s; exec sleep 30", tpath(pidf));
		p = DM_START(tag, "run", "job", "--", "sh", "-c", job);
		cmd = wait_pidfile(tpath(pidf));
		cr_assert_eq(kill(p, sigs[i]), 0);
		ASSERT_ST(th_wait_child(p, 5000), 128 + sigs[i], tag);
		cr_assert(gone(cmd), "COMMAND outlived dmutex");
	}
	cr_assert_eq(lock_exists("job"), 0);
}

/* ---- a terminating signal while the acquire is in flight ---------- */

struct forever { char url[700]; const char *name; unsigned lease_ms; int robust; };

/* A child that takes NAME and holds it (renewed) until it is killed. */
static int
hold_forever(void *p)
{
	struct forever *f = p;
	dmutex_client_t *c;
	dmutex_attr_t a;
	dmutex_t m;

	if (dmutex_client_open(&c, f->url))
		return 10;
	dmutex_attr_init(&a);
	dmutex_attr_setclient(&a, c);
	dmutex_attr_setlease(&a, f->lease_ms);
	if (f->robust)
		dmutex_attr_setrobust(&a, DMUTEX_ROBUST);
	if (dmutex_init(&m, f->name, &a) || dmutex_lock(&m))
		return 11;
	for (;;)
		pause();
}

/* The client-side ports of the connections that may carry dmutex run's
 * next acquire: every connection but ours and those subscribed (its
 * wake-up connection).  Whichever pooled connection sends the acquire,
 * whatever it sent last: only script connections were counted once, and
 * an acquire on a connection whose last command was the plain SET NX was
 * missed ("sent no acquire", intermittently). */
struct script_conns { int port; int n; int client_port[16]; };

static void
script_connections(struct script_conns *sc)
{
	redisReply *r = th_redis_cmd(&srv, "CLIENT LIST");
	char *line, *save = NULL;

	cr_assert(r && r->type == REDIS_REPLY_STRING);
	sc->port = srv.port;
	sc->n = 0;
	for (line = strtok_r(r->str, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		const char *addr = strstr(line, " addr=127.0.0.1:");
		/* Every connection of dmutex run's that may carry its next
		 * acquire: the pooled ones, whatever they sent last (a plain
		 * SET NX, a script), not its listener's and not ours. */
		if (!addr || strstr(line, " cmd=client") || !strstr(line, " sub=0 psub=0 ") ||
				(strstr(line, " ssub=") && !strstr(line, " ssub=0 ")))
			continue;
		if (sc->n < 16)
			sc->client_port[sc->n++] = atoi(addr + strlen(" addr=127.0.0.1:"));
	}
	freeReplyObject(r);
	cr_assert_gt(sc->n, 0, "no script connection of dmutex run in CLIENT LIST");
}

/* Bytes sent on one of those connections that the (stopped) server has not
 * read: an acquire in flight, as the kernel sees it (/proc/net/tcp: the
 * server's side of the connection has a non-empty receive queue). */
static int
server_has_unread_request(void *p)
{
	struct script_conns *sc = p;
	FILE *f = fopen("/proc/net/tcp", "r");
	char line[512];
	int found = 0;

	cr_assert(f);
	while (!found && fgets(line, sizeof line, f)) {
		unsigned lport, rport, st, txq, rxq;
		if (sscanf(line, " %*d: %*8x:%x %*8x:%x %x %x:%x", &lport, &rport, &st, &txq, &rxq) != 5 ||
		    (int)lport != sc->port || st != 1 || rxq == 0)
			continue;
		for (int i = 0; i < sc->n; i++)
			if ((int)rport == sc->client_port[i])
				found = 1;
	}
	fclose(f);
	return found;
}

struct sigwait { pid_t pid; int sig; };

/* The signal sent to pid is no longer pending: its handler (or its default
 * action) has run. */
static int
signal_taken(void *p)
{
	struct sigwait *w = p;
	char path[64], line[256];
	int pending = 0;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%ld/status", (long)w->pid);
	if (!(f = fopen(path, "r")))
		return 1;
	while (fgets(line, sizeof line, f)) {
		unsigned long long mask;
		if ((sscanf(line, "SigPnd: %llx", &mask) == 1 || sscanf(line, "ShdPnd: %llx", &mask) == 1) &&
		    (mask >> (w->sig - 1) & 1))
			pending = 1;
	}
	fclose(f);
	return !pending;
}

static int
now_past(void *ms)
{
	return th_now_ms() >= *(long long *)ms;
}

struct reaped { pid_t pid; int status; };

static int
reap(void *p)
{
	struct reaped *r = p;
	return waitpid(r->pid, &r->status, WNOHANG) == r->pid;
}

/*
 * `dmutex run` waits for NAME behind a holder that is then killed; the
 * server is stopped, so the acquire that follows stays unread in its socket;
 * `sig` reaches dmutex then.  When the server resumes, the holder's lease has
 * run out and the acquire is granted: dmutex must release the lock before it
 * dies of `sig`, not leave it held for its 60 s lease.
 */
static void
killed_while_acquiring(int sig, int robust)
{
	/* The server must be stopped before the dead holder's lease runs
	 * out (dmutex run asks again then): 1.5 s, 4.5 s under the
	 * sanitizers, so that reaping the holder, listing the server's
	 * clients and stopping it fit in a loaded run (a 500 ms lease, last
	 * renewed up to a third of it before the kill, left ~330 ms).  The
	 * server stays stopped past the lease's end: dmutex run's command
	 * timeout is longer than that, or it would give up waiting. */
	struct forever f = { .name = "acq", .lease_ms = 1500 * (unsigned)dmt_slowdown(), .robust = robust };
	char url[800];
	struct script_conns sc;
	struct sigwait sw;
	struct reaped r;
	struct holder h;
	long long killed_at;
	pid_t holder, d;
	char *e;

	snprintf(f.url, sizeof f.url, "%s", srv.url);
	holder = th_spawn(hold_forever, &f);
	cr_assert_gt(holder, 0);
	cr_assert(th_wait_until(lock_exists_cond, "acq", 5000), "the holder never held");
	char opt[64];
	snprintf(opt, sizeof opt, "command_timeout_ms=%u", f.lease_ms + 10000);
	th_url_with(url, sizeof url, srv.url, opt);
	d = robust ? DM_START("k", "--url", url, "run", "--robust", "--lease", "60000", "acq", "--", "true")
		: DM_START("k", "--url", url, "run", "--lease", "60000", "acq", "--", "true");
	struct numsub ns = { "acq", 1 };
	cr_assert(th_wait_until(waiters_are, &ns, 5000), "dmutex run never waited");
	cr_assert_eq(kill(holder, SIGKILL), 0);
	killed_at = th_now_ms();
	cr_assert_eq(th_wait_child(holder, 5000), 128 + SIGKILL);
	script_connections(&sc);
	cr_assert_eq(th_redis_pause(&srv), 0);
	cr_assert(th_wait_until(server_has_unread_request, &sc, 5000),
			"dmutex run sent no acquire to the stopped server");
	sw.pid = d;
	sw.sig = sig;
	cr_assert_eq(kill(d, sig), 0);
	cr_assert(th_wait_until(signal_taken, &sw, 5000));
	/* Past the dead holder's lease, so that the acquire is granted. */
	long long expired_at = killed_at + f.lease_ms + 100;
	cr_assert(th_wait_until(now_past, &expired_at, (int)f.lease_ms + 5000));
	cr_assert_eq(th_redis_resume(&srv), 0);
	r.pid = d;
	cr_assert(th_wait_until(reap, &r, 10000), "dmutex run did not end");
	e = err_of("k");
	/* The slice's timed lock ended at its deadline with the acquire
	 * unanswered (the server stopped): the release it owes is made as
	 * the client closes, and dmutex dies of the signal, robust or not. */
	cr_assert(WIFSIGNALED(r.status) && WTERMSIG(r.status) == sig,
			"status %#x, not death by signal %d; stderr:\n%s", r.status, sig, e);
	cr_assert_eq(lock_exists("acq"), 0, "the lock was left held by a dead dmutex run");
	cr_assert_str_eq(e, "");
	free(e);
	/* Free now, not in 60 s; a robust locker is told its owner died. */
	hold(&h, "acq", robust, 0);
	if (robust) {
		cr_assert_eq(dmutex_trylock(&h.m), EOWNERDEAD);
		cr_assert_eq(dmutex_consistent(&h.m), 0);
	} else {
		cr_assert_eq(dmutex_trylock(&h.m), 0);
	}
	cr_assert_eq(dmutex_unlock(&h.m), 0);
	unhold(&h);
}

Test(cli, run_sigterm_while_acquiring_releases)
{
	killed_while_acquiring(SIGTERM, 0);
}

Test(cli, run_sigint_while_acquiring_releases)
{
	killed_while_acquiring(SIGINT, 0);
}

Test(cli, run_sighup_while_acquiring_releases)
{
	killed_while_acquiring(SIGHUP, 0);
}

Test(cli, run_sigterm_while_acquiring_robust_owner_died)
{
	killed_while_acquiring(SIGTERM, 1);
}

/* Waiting behind a live holder, a signal ends dmutex soon (the wait is in
 * short slices) and as the signal would, and takes nothing from the holder. */
Test(cli, run_signal_while_waiting_ends_it_at_once)
{
	struct holder h;
	struct reaped r;
	struct numsub ns = { "w", 1 };
	long long t0;

	hold(&h, "w", 0, 0);
	cr_assert_eq(dmutex_lock(&h.m), 0);
	r.pid = DM_START("a", "run", "w", "--", "true");
	cr_assert(th_wait_until(waiters_are, &ns, 5000));
	t0 = th_now_ms();
	cr_assert_eq(kill(r.pid, SIGINT), 0);
	cr_assert(th_wait_until(reap, &r, 10000), "dmutex run did not end");
	cr_assert(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGINT, "status %#x", r.status);
	/* Speed is not asserted; this only says it did not wait for the holder. */
	cr_assert_lt(th_now_ms() - t0, 5000);
	ns.want = 0;
	cr_assert(th_wait_until(waiters_are, &ns, 5000));
	cr_assert_eq(lock_exists("w"), 1);
	cr_assert_eq(atomic_load(&h.lost), 0);
	cr_assert_eq(dmutex_unlock(&h.m), 0);
	unhold(&h);
}

/* The wait's slices keep dmutex_lock's retry budget for a failing backend
 * (3 x command_timeout_ms): a shorter stall is ridden out, a longer one is
 * status 87. */
Test(cli, run_waiting_keeps_the_retry_budget_of_lock)
{
	struct numsub ns = { "st", 1 };
	struct holder h;
	char url[700], *e;
	long long t;
	pid_t p;

	th_url_with(url, sizeof url, srv.url, "command_timeout_ms=500");
	hold(&h, "st", 0, 0);
	cr_assert_eq(dmutex_lock(&h.m), 0);
	p = DM_START("a", "--url", url, "run", "st", "--", "true");
	cr_assert(th_wait_until(waiters_are, &ns, 5000));
	cr_assert_eq(th_redis_pause(&srv), 0);
	t = th_now_ms() + 300;
	cr_assert(th_wait_until(now_past, &t, 5000));
	cr_assert_eq(th_redis_resume(&srv), 0);
	cr_assert_eq(dmutex_unlock(&h.m), 0);
	ASSERT_ST(th_wait_child(p, 10000), 0, "a");

	cr_assert_eq(dmutex_lock(&h.m), 0);
	p = DM_START("b", "--url", url, "run", "st", "--", "true");
	cr_assert(th_wait_until(waiters_are, &ns, 5000));
	cr_assert_eq(th_redis_pause(&srv), 0);
	ASSERT_ST(th_wait_child(p, 20000), ST_BACKEND, "b");
	cr_assert_eq(th_redis_resume(&srv), 0);
	e = err_of("b");
	assert_contains(e, "'st' not taken: backend unreachable or failing");
	free(e);
	dmutex_unlock(&h.m);
	unhold(&h);
}

static void
lost_run(const char *how)
{
	char job[200], *e;
	pid_t p, cmd;
	long long t0;

	snprintf(job, sizeof job, "echo $$ > %s; exec sleep 30", tpath("pid"));
	if (!strcmp(how, "stop")) {
		char url[700];
		th_url_with(url, sizeof url, srv.url, "command_timeout_ms=200");
		p = DM_START("a", "--url", url, "run", "--lease", "400", "job", "--", "sh", "-c", job);
	} else {
		p = DM_START("a", "run", "--lease", "300", "job", "--", "sh", "-c", job);
	}
	cmd = wait_pidfile(tpath("pid"));
	cr_assert_eq(lock_exists("job"), 1);
	t0 = th_now_ms();
	if (!strcmp(how, "stop"))
		cr_assert_eq(th_redis_pause(&srv), 0);
	else
		cr_assert_eq(th_redis_int(&srv, "DEL dmutex:lock:{job}"), 1);
	ASSERT_ST(th_wait_child(p, 10000), ST_LOST, "a");
	cr_assert_lt(th_now_ms() - t0, 5000);
	if (!strcmp(how, "stop"))
		cr_assert_eq(th_redis_resume(&srv), 0);
	cr_assert(gone(cmd), "COMMAND still runs after the lock was lost");
	e = err_of("a");
	assert_contains(e, "lost the lock 'job' while COMMAND");
	assert_contains(e, "SIGTERM");
	free(e);
}

/* A hold with no fencing token must not run COMMAND with DMUTEX_FENCE=0:
 * the meta hash holds data dmutex did not write, so the lock's plain SET
 * succeeds but fence.lua fails (WRONGTYPE), an EIO that is not a loss. */
Test(cli, run_without_a_fence_does_not_start_command)
{
	char *e, *o;

	cr_assert_eq(th_redis_int(&srv, "RPUSH dmutex:meta:{job} foreign"), 1);
	ASSERT_ST(DM_RUN(10000, "a", "run", "job", "--", "sh", "-c", "echo started $DMUTEX_FENCE"), 87, "a");
	o = out_of("a");
	cr_assert_str_eq(o, "", "COMMAND ran: %s", o);
	free(o);
	e = err_of("a");
	assert_contains(e, "'job': no fencing token (");
	assert_contains(e, "); sh not started");
	free(e);
	/* It released what it took. */
	cr_assert_eq(lock_exists("job"), 0);
}

Test(cli, run_lost_when_key_deleted)
{
	lost_run("del");
}

Test(cli, run_lost_when_backend_stops)
{
	lost_run("stop");
}

Test(cli, run_lost_escalates_to_sigkill)
{
	char job[200], *e;
	pid_t p, cmd;

	snprintf(job, sizeof job, "trap '' TERM; echo $$ > %s; while :; do sleep 0.05; done", tpath("pid"));
	p = DM_START("a", "run", "--lease", "300", "--grace", "0.3", "job", "--", "sh", "-c", job);
	cmd = wait_pidfile(tpath("pid"));
	cr_assert_eq(th_redis_int(&srv, "DEL dmutex:lock:{job}"), 1);
	ASSERT_ST(th_wait_child(p, 10000), ST_LOST, "a");
	cr_assert(gone(cmd));
	e = err_of("a");
	assert_contains(e, "SIGKILL");
	free(e);
}

Test(cli, run_robust_takes_over)
{
	char st[32], *e, *o;

	owner_dies("job");
	meta_state("job", st, sizeof st);
	cr_assert_str_eq(st, "died");
	ASSERT_ST(DM_RUN(10000, "a", "run", "--robust", "job", "--", "sh", "-c",
			"echo $DMUTEX_OWNER_DIED"), 0, "a");
	e = err_of("a");
	assert_contains(e, "died");
	free(e);
	o = out_of("a");
	cr_assert_str_eq(o, "1\n");
	free(o);
	/* Marked consistent, so released clean. */
	meta_state("job", st, sizeof st);
	cr_assert_str_eq(st, "");
}

Test(cli, run_command_problems)
{
	char *e;
	int fd;

	ASSERT_ST(DM_RUN(10000, "a", "run", "job", "--", "/nonexistent/cmd"), ST_NOTFOUND, "a");
	ASSERT_ST(DM_RUN(10000, "b", "run", "job", "--", "no-such-command-anywhere"), ST_NOTFOUND, "b");
	fd = open(tpath("plain"), O_WRONLY | O_CREAT, 0644);
	cr_assert_geq(fd, 0);
	close(fd);
	ASSERT_ST(DM_RUN(10000, "c", "run", "job", "--", tpath("plain")), ST_NOEXEC, "c");
	e = err_of("a");
	assert_contains(e, "/nonexistent/cmd");
	free(e);
	/* Looked up before locking: a typo never took the lock. */
	cr_assert_eq(th_redis_int(&srv, "EXISTS dmutex:meta:{job}"), 0);
	/* An executable file without #! runs in the shell, as with execvp. */
	fd = open(tpath("script"), O_WRONLY | O_CREAT, 0755);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, "exit 9\n", 7), 7);
	close(fd);
	ASSERT_ST(DM_RUN(10000, "d", "run", "job", "--", tpath("script")), 9, "d");
}

Test(cli, usage_errors)
{
	char longname[600];

	memset(longname, 'x', 513);
	longname[513] = '\0';
	ASSERT_ST(DM_RUN(10000, "a", "run"), ST_USAGE, "a");
	ASSERT_ST(DM_RUN(10000, "b", "run", "job"), ST_USAGE, "b");
	ASSERT_ST(DM_RUN(10000, "c", "run", "-n", "-w", "1", "job", "--", "true"), ST_USAGE, "c");
	ASSERT_ST(DM_RUN(10000, "d", "run", "--lease", "5", "job", "--", "true"), ST_USAGE, "d");
	ASSERT_ST(DM_RUN(10000, "e", "run", "-w", "soon", "job", "--", "true"), ST_USAGE, "e");
	ASSERT_ST(DM_RUN(10000, "f", "run", longname, "--", "true"), ST_USAGE, "f");
	ASSERT_ST(DM_RUN(10000, "g", "frobnicate"), ST_USAGE, "g");
	ASSERT_ST(DM_RUN(10000, "h", "status"), ST_USAGE, "h");
	ASSERT_ST(DM_RUN(10000, "i", "reset"), ST_USAGE, "i");
	ASSERT_ST(DM_RUN(10000, "j", "list", "a", "b"), ST_USAGE, "j");
	ASSERT_ST(DM_RUN(10000, "k"), ST_USAGE, "k");
	/* main's table names every subcommand. */
	char *e = err_of("g");
	assert_contains(e, "dmutex: unknown command 'frobnicate' (run, status, list, reset, metrics, top)\n");
	free(e);
}

Test(cli, help_and_version)
{
	char *o, want[64];

	ASSERT_ST(DM_RUN(10000, "a", "--version"), 0, "a");
	o = out_of("a");
	snprintf(want, sizeof want, "dmutex %s\n", DMUTEX_VERSION);
	cr_assert_str_eq(o, want);
	free(o);
	ASSERT_ST(DM_RUN(10000, "b", "--help"), 0, "b");
	o = out_of("b");
	assert_contains(o, "dmutex run [-n | -w SECONDS]");
	assert_contains(o, "dmutex status [--json] NAME...");
	assert_contains(o, "dmutex list [--json] [PATTERN]");
	assert_contains(o, "dmutex reset [--force] NAME");
	free(o);
	ASSERT_ST(DM_RUN(10000, "c", "run", "--help"), 0, "c");
	o = out_of("c");
	assert_contains(o, "--grace");
	free(o);
}

Test(cli, bad_url_and_unreachable_backend)
{
	char url[200], *e;
	int port = th_free_port();

	ASSERT_ST(DM_RUN(10000, "a", "--url", "redis://:s3cret@127.0.0.1:99999", "run", "job", "--", "true"), ST_BADURL, "a");
	ASSERT_ST(DM_RUN(10000, "b", "--url", "redis://127.0.0.1:1?colour=blue", "status", "job"), ST_BADURL, "b");
	e = err_of("a");
	cr_assert_null(strstr(e, "s3cret"), "a password in a message: %s", e);
	assert_contains(e, "URL");
	free(e);
	snprintf(url, sizeof url, "redis://:s3cret@127.0.0.1:%d?connect_timeout_ms=500", port);
	ASSERT_ST(DM_RUN(10000, "c", "--url", url, "run", "job", "--", "true"), ST_BACKEND, "c");
	ASSERT_ST(DM_RUN(10000, "d", "--url", url, "status", "job"), ST_BACKEND, "d");
	ASSERT_ST(DM_RUN(10000, "e", "--url", url, "list"), ST_BACKEND, "e");
	ASSERT_ST(DM_RUN(10000, "f", "--url", url, "reset", "job"), ST_BACKEND, "f");
	e = err_of("d");
	assert_contains(e, "unreachable");
	cr_assert_null(strstr(e, "s3cret"), "a password in a message: %s", e);
	free(e);
	/* $DMUTEX_URL is the default; --url after the command works too. */
	ASSERT_ST(DM_RUN(10000, "g", "status", "--url", url, "job"), ST_BACKEND, "g");
}

/* COMMAND gets dmutex's own descriptors, not the library's sockets. */
Test(cli, run_command_gets_no_sockets)
{
	char job[200], *o;

	snprintf(job, sizeof job, "ls -l /proc/$$/fd/ > %s", tpath("fds"));
	ASSERT_ST(DM_RUN(10000, "a", "run", "job", "--", "sh", "-c", job), 0, "a");
	o = slurp(tpath("fds"));
	cr_assert(strlen(o) > 0);
	cr_assert_null(strstr(o, "socket:"), "COMMAND inherited a socket:\n%s", o);
	cr_assert_null(strstr(o, "pipe:"), "COMMAND inherited a pipe:\n%s", o);
	free(o);
}

/* On a terminal, waiting says who holds the lock and for how long. */
Test(cli, run_shows_holder_on_terminal)
{
	struct holder h;
	char host[256], want[400], buf[8192];
	size_t n = 0;
	int master;
	pid_t p;
	long long until;

	hold(&h, "nightly", 0, 0);
	cr_assert_eq(dmutex_lock(&h.m), 0);
	cr_assert_eq(gethostname(host, sizeof host), 0);
	snprintf(want, sizeof want, "waiting for 'nightly', held by %s pid %d for ", host, (int)getpid());
	buf[0] = '\0';
	fflush(NULL);
	p = forkpty(&master, NULL, NULL, NULL);
	cr_assert_geq(p, 0);
	if (p == 0) {
		char *argv[] = { getenv("DMUTEX_BIN"), "run", "-w", "20", "nightly", "--", "true", NULL };
		execv(argv[0], argv);
		_exit(121);
	}
	if (dm.nkids < DM_CMD_KIDS)
		dm.kids[dm.nkids++] = p;
	fcntl(master, F_SETFL, O_NONBLOCK);
	for (until = th_now_ms() + 5000; th_now_ms() < until && !strstr(buf, want);) {
		ssize_t r = read(master, buf + n, sizeof buf - 1 - n);
		if (r > 0)
			n += (size_t)r;
		buf[n] = '\0';
		if (r <= 0)
			poll(&(struct pollfd){ .fd = master, .events = POLLIN }, 1, 100);
	}
	cr_assert(strstr(buf, want), "no \"%s\" on the terminal:\n%s", want, buf);
	cr_assert_eq(dmutex_unlock(&h.m), 0);
	int st = th_wait_child(p, 10000);
	cr_assert_eq(st, 0, "status %d; terminal:\n%s", st, buf);
	close(master);
	unhold(&h);
}

/* ------------------------------------------------------------------ */
/* status, list, reset                                                 */
/* ------------------------------------------------------------------ */

Test(cli, status_reports_holder_and_fence)
{
	struct holder h;
	uint64_t tok;
	char want[200], expr[400], *o;

	/* An earlier hold, so that the fence is not just 1. */
	ASSERT_ST(DM_RUN(10000, "a", "run", "job", "--", "true"), 0, "a");
	hold(&h, "job", 0, 5000);
	cr_assert_eq(dmutex_lock(&h.m), 0);
	cr_assert_eq(dmutex_fence(&h.m, &tok), 0);
	cr_assert_eq(tok, (uint64_t)th_redis_int(&srv, "HGET dmutex:meta:{job} fence"));
	ASSERT_ST(DM_RUN(10000, "b", "status", "job"), 0, "b");
	o = out_of("b");
	assert_contains(o, "job: held");
	snprintf(want, sizeof want, " pid %d tid ", (int)getpid());
	assert_contains(o, want);
	snprintf(want, sizeof want, "fence:       %llu\n", (unsigned long long)tok);
	assert_contains(o, want);
	assert_contains(o, "robust:      consistent");
	assert_contains(o, "of 5.0 s");
	free(o);
	ASSERT_ST(DM_RUN(10000, "c", "status", "--json", "job"), 0, "c");
	snprintf(expr, sizeof expr,
			"len(d) == 1 and d[0][\"name\"] == \"job\" and d[0][\"held\"] is True and "
			"d[0][\"pid\"] == %d and d[0][\"fence\"] == %llu and d[0][\"fence_counter\"] == %llu and "
			"d[0][\"lease_ms\"] == 5000 and 0 < d[0][\"lease_left_ms\"] <= 5000 and "
			"d[0][\"robust\"] == \"consistent\" and d[0][\"waiters\"] == 0",
			(int)getpid(), (unsigned long long)tok, (unsigned long long)tok);
	assert_json("c", expr);
	cr_assert_eq(dmutex_unlock(&h.m), 0);
	unhold(&h);
}

Test(cli, status_no_such_lock)
{
	char *o, *e;

	ASSERT_ST(DM_RUN(10000, "a", "run", "here", "--", "true"), 0, "a");
	ASSERT_ST(DM_RUN(10000, "b", "status", "here", "nowhere"), ST_NOLOCK, "b");
	o = out_of("b");
	assert_contains(o, "here: free");
	cr_assert_null(strstr(o, "nowhere"));
	free(o);
	e = err_of("b");
	assert_contains(e, "no such lock 'nowhere'");
	free(e);
	ASSERT_ST(DM_RUN(10000, "c", "status", "--json", "here", "nowhere"), ST_NOLOCK, "c");
	assert_json("c", "[x[\"exists\"] for x in d] == [True, False] and d[1][\"robust\"] is None");
}

/* The robust states, made by the library: a holder exits holding the lock
 * (owner died); a robust locker unlocks without dmutex_consistent (not
 * recoverable) — then reset, which forgets the name; tokens still grow. */
Test(cli, status_robust_states_and_reset)
{
	struct holder h;
	char *o, st[32], expr[300];
	long long before;
	uint64_t tok;

	owner_dies("job");
	ASSERT_ST(DM_RUN(10000, "a", "status", "job"), 0, "a");
	o = out_of("a");
	assert_contains(o, "robust:      owner died");
	free(o);
	ASSERT_ST(DM_RUN(10000, "b", "status", "--json", "job"), 0, "b");
	assert_json("b", "d[0][\"robust\"] == \"owner_died\" and d[0][\"held\"] is False and d[0][\"fence_counter\"] > 0");

	hold(&h, "job", 1, 0);
	before = th_redis_int(&srv, "HGET dmutex:meta:{job} fence");
	cr_assert_eq(dmutex_lock(&h.m), EOWNERDEAD);
	cr_assert_eq(dmutex_fence(&h.m, &tok), 0);
	/* Held after an owner died: the holder took over, with a new token. */
	ASSERT_ST(DM_RUN(10000, "c", "status", "--json", "job"), 0, "c");
	snprintf(expr, sizeof expr, "d[0][\"held\"] is True and d[0][\"acquired_after_owner_died\"] is True "
			"and d[0][\"fence\"] > %lld", before);
	assert_json("c", expr);
	cr_assert_eq(dmutex_unlock(&h.m), 0);
	unhold(&h);
	meta_state("job", st, sizeof st);
	cr_assert_str_eq(st, "notrec");
	ASSERT_ST(DM_RUN(10000, "d", "status", "job"), 0, "d");
	o = out_of("d");
	assert_contains(o, "robust:      not recoverable");
	free(o);
	ASSERT_ST(DM_RUN(10000, "e", "status", "--json", "job"), 0, "e");
	assert_json("e", "d[0][\"robust\"] == \"not_recoverable\"");

	/* Every locker is refused until an operator resets it. */
	ASSERT_ST(DM_RUN(10000, "f", "run", "job", "--", "true"), ST_NOTREC, "f");
	o = err_of("f");
	assert_contains(o, "dmutex reset job");
	free(o);
	ASSERT_ST(DM_RUN(10000, "g", "reset", "job"), 0, "g");
	o = out_of("g");
	cr_assert_str_eq(o, "reset 'job': cleared the not-recoverable state\n");
	free(o);
	meta_state("job", st, sizeof st);
	cr_assert_str_eq(st, "");
	/* The reset forgot the name, and tokens still grow. */
	cr_assert_eq(th_redis_int(&srv, "EXISTS dmutex:meta:{job}"), 0);
	ASSERT_ST(DM_RUN(10000, "h", "run", "job", "--", "sh", "-c", "echo $DMUTEX_FENCE"), 0, "h");
	o = out_of("h");
	cr_assert_gt(strtoll(o, NULL, 10), before, "token %s after the reset, %lld before", o, before);
	free(o);
	ASSERT_ST(DM_RUN(10000, "i", "reset", "job"), 0, "i");
	o = out_of("i");
	cr_assert_str_eq(o, "'job' is free and consistent: nothing to reset\n");
	free(o);
	ASSERT_ST(DM_RUN(10000, "j", "reset", "nowhere"), ST_NOLOCK, "j");
}

Test(cli, reset_owner_died_state)
{
	char *o, st[32];

	owner_dies("job");
	ASSERT_ST(DM_RUN(10000, "a", "reset", "job"), 0, "a");
	o = out_of("a");
	assert_contains(o, "reset 'job': cleared the owner-died state");
	free(o);
	meta_state("job", st, sizeof st);
	cr_assert_str_eq(st, "");
}

/* reset refuses a held lock without --force; with it, the hold goes, the
 * holder learns it lost the lock, and a waiter is woken at once. */
Test(cli, reset_refuses_then_forces)
{
	struct holder h;
	struct numsub ns = { "job", 1 };
	char want[100], *o, *e;
	pid_t waiter;
	long long t0;

	/* A long lease: a waiter that got in quickly was woken, not timed out. */
	hold(&h, "job", 0, 10000);
	cr_assert_eq(dmutex_lock(&h.m), 0);
	/* No token asked for yet: the lock key has none (key layout 3). */
	cr_assert_eq(dmt_lock_field(&srv, "job", "fence", want, sizeof want), 0, "fence %s", want);
	ASSERT_ST(DM_RUN(10000, "a", "reset", "job"), ST_REFUSED, "a");
	e = err_of("a");
	assert_contains(e, "--force");
	free(e);
	cr_assert_eq(lock_exists("job"), 1);
	cr_assert_eq(atomic_load(&h.lost), 0);

	waiter = DM_START("w", "run", "-w", "20", "job", "--", "true");
	cr_assert(th_wait_until(waiters_are, &ns, 5000), "dmutex never waited");
	t0 = th_now_ms();
	ASSERT_ST(DM_RUN(10000, "b", "reset", "--force", "job"), 0, "b");
	o = out_of("b");
	snprintf(want, sizeof want, "reset 'job': released the hold of ");
	assert_contains(o, want);
	snprintf(want, sizeof want, " pid %d tid ", (int)getpid());
	assert_contains(o, want);
	assert_contains(o, "(fence not assigned yet, held for ");
	free(o);
	/* Woken by the reset's message, not by a lease running out (10 s);
	 * the time holds two runs of the tool, 3x slower under ASan. */
	ASSERT_ST(th_wait_child(waiter, 10000), 0, "w");
	cr_assert_lt(th_now_ms() - t0, 1000 + 2000 * dmt_slowdown());
	/* At its next renewal, a third of the lease later. */
	cr_assert(th_wait_until(lost_once, &h, 8000), "the holder was never told");
	cr_assert_eq(dmutex_unlock(&h.m), ENOLCK);
	unhold(&h);
}

static int lock_gone_cond(void *name);

struct queued { const char *name; long long want; };

/* want waiters in NAME's queue (README "Who a release wakes"). */
static int
queued_are(void *p)
{
	struct queued *q = p;

	return th_redis_int(&srv, "ZCARD dmutex:wq:{%s}", q->name) == q->want;
}

/* A lock nobody holds, with a waiter queued that no release will wake
 * (the release woke the one before it, stopped, and the reservation for
 * that one lapsed): reset wakes the queue, which it read and emptied in
 * one transaction, instead of saying "no such lock" (review wake29 item
 * 4).  The queued waiter then runs at once, not at its bound (10 s). */
Test(cli, reset_wakes_a_queue_nobody_else_wakes)
{
	struct holder h;
	struct numsub one = { "wq", 1 }, two = { "wq", 2 };
	struct queued q1 = { "wq", 1 }, q2 = { "wq", 2 };
	pid_t wa, wb;
	long long t0;
	char *o;

	hold(&h, "wq", 0, 30000);
	cr_assert_eq(dmutex_lock(&h.m), 0);
	wa = DM_START("wa", "run", "-w", "30", "--lease", "30000", "wq", "--", "true");
	cr_assert(th_wait_until(waiters_are, &one, 5000), "the first dmutex never waited");
	cr_assert(th_wait_until(queued_are, &q1, 5000));
	wb = DM_START("wb", "run", "-w", "30", "--lease", "30000", "wq", "--", "true");
	cr_assert(th_wait_until(waiters_are, &two, 5000), "the second dmutex never waited");
	cr_assert(th_wait_until(queued_are, &q2, 5000));
	cr_assert_eq(kill(wa, SIGSTOP), 0);
	cr_assert_eq(th_wait_stopped(wa), 0);
	/* The stopped one as a waiter of the version before the grant, which
	 * leaves no details (README "Who a release wakes"): the release
	 * reserves the lock for it instead of granting it (a stopped waiter
	 * granted the lock is a stopped holder, which reset would release). */
	{
		redisReply *r = th_redis_cmd(&srv, "ZRANGE dmutex:wq:{wq} 0 0");

		cr_assert(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1);
		cr_assert_eq(th_redis_int(&srv, "HDEL dmutex:wd:{wq} %s", r->element[0]->str), 1);
		freeReplyObject(r);
	}
	cr_assert_eq(dmutex_unlock(&h.m), 0);
	/* The release popped the stopped one and reserved the lock for it,
	 * for at most 100 ms. */
	cr_assert(th_wait_until(lock_gone_cond, "wq", 5000), "the reservation did not lapse");
	cr_assert_eq(th_redis_int(&srv, "ZCARD dmutex:wq:{wq}"), 1);
	t0 = th_now_ms();
	ASSERT_ST(DM_RUN(10000, "r", "reset", "wq"), 0, "r");
	o = out_of("r");
	cr_assert_str_eq(o, "reset 'wq': free, woke the 1 process waiting for it\n");
	free(o);
	cr_assert_eq(th_redis_int(&srv, "EXISTS dmutex:wq:{wq}"), 0);
	ASSERT_ST(th_wait_child(wb, 10000), 0, "wb");
	cr_assert_lt(th_now_ms() - t0, 1000 + 2000 * dmt_slowdown());
	cr_assert_eq(kill(wa, SIGCONT), 0);
	ASSERT_ST(th_wait_child(wa, 20000), 0, "wa");
	unhold(&h);
}

static long long
command_calls(const char *cmd)
{
	redisReply *r = th_redis_cmd(&srv, "INFO commandstats");
	char key[64];
	const char *p;
	long long calls = 0;

	cr_assert(r && r->type == REDIS_REPLY_STRING);
	snprintf(key, sizeof key, "cmdstat_%s:calls=", cmd);
	if ((p = strstr(r->str, key)))
		calls = atoll(p + strlen(key));
	freeReplyObject(r);
	return calls;
}

Test(cli, list_walks_with_scan)
{
	enum { N = 1500 };
	struct holder h;
	redisContext *c = th_redis_connect(&srv, NULL, NULL);
	char *o, expr[300];
	int lines = 0;

	cr_assert(c);
	for (int i = 0; i < N; i++)
		redisAppendCommand(c, "HSET dmutex:meta:{k%04d} fence %d", i, i + 1);
	for (int i = 0; i < N; i++) {
		void *r;
		cr_assert_eq(redisGetReply(c, &r), REDIS_OK);
		freeReplyObject(r);
	}
	/* Not ours: other kinds and other prefixes are left out. */
	freeReplyObject(redisCommand(c, "HSET other:meta:{x} fence 1"));
	freeReplyObject(redisCommand(c, "HSET dmutex:metadata fence 1"));
	redisFree(c);
	hold(&h, "held-one", 0, 0);
	cr_assert_eq(dmutex_lock(&h.m), 0);

	ASSERT_ST(DM_RUN(20000, "a", "list"), 0, "a");
	o = out_of("a");
	for (char *p = o; (p = strchr(p, '\n')); p++)
		lines++;
	cr_assert_eq(lines, N + 2, "a header and %d locks, got %d lines", N + 1, lines);
	assert_contains(o, "k1499 ");
	free(o);
	cr_assert_eq(command_calls("keys"), 0, "list used KEYS");
	cr_assert_geq(command_calls("scan"), 2, "a single SCAN cannot have walked %d keys", N);

	ASSERT_ST(DM_RUN(20000, "b", "list", "--json"), 0, "b");
	snprintf(expr, sizeof expr,
			"len(d) == %d and [x for x in d if x[\"held\"]][0][\"name\"] == \"held-one\" and "
			"[x for x in d if x[\"held\"]][0][\"pid\"] == %d and "
			"sorted(x[\"name\"] for x in d) == [x[\"name\"] for x in d]", N + 1, (int)getpid());
	assert_json("b", expr);
	ASSERT_ST(DM_RUN(20000, "c", "list", "--json", "k00*"), 0, "c");
	assert_json("c", "len(d) == 100 and d[0][\"name\"] == \"k0000\" and d[0][\"fence_counter\"] == 1");
	cr_assert_eq(dmutex_unlock(&h.m), 0);
	unhold(&h);
}

/* The prefix is taken literally, even with glob characters in it; names
 * with quotes and control characters still give valid JSON. */
Test(cli, list_odd_prefix_and_names)
{
	char url[800];
	redisContext *c = th_redis_connect(&srv, NULL, NULL);

	cr_assert(c);
	freeReplyObject(redisCommand(c, "HSET we*rd:meta:{a\"b\\c\td} fence 5"));
	freeReplyObject(redisCommand(c, "HSET weXYZrd:meta:{decoy} fence 1"));
	freeReplyObject(redisCommand(c, "HSET we*rd:meta:{caf\xc3\xa9\xff} fence 2"));
	redisFree(c);
	th_url_with(url, sizeof url, srv.url, "prefix=we*rd:");
	ASSERT_ST(DM_RUN(10000, "a", "--url", url, "list", "--json"), 0, "a");
	assert_json("a", "sorted(x[\"name\"] for x in d) == [\"a\\\"b\\\\c\\td\", \"caf\\u00e9\\ufffd\"] "
			"and d[0][\"fence_counter\"] == 5");
}

/* The table's FENCE column fits a 19-digit token (a Redlock or etcd
 * one): every row's next column starts where its heading does. */
Test(cli, list_fence_column_fits_any_token)
{
	redisContext *c = th_redis_connect(&srv, NULL, NULL);
	char *o, *line, *save = NULL;
	size_t at = 0, rows = 0;

	cr_assert(c);
	freeReplyObject(redisCommand(c, "SET dmutex:lock:{big} %s PX 60000",
			"3 0123abcd 1234567890123456789 0 rc 5000 1700000000000 4242 4243 - h"));
	freeReplyObject(redisCommand(c, "SET dmutex:lock:{small} %s PX 60000",
			"3 4567abcd 7 0 rc 5000 1700000000000 4242 4244 - h"));
	redisFree(c);
	ASSERT_ST(DM_RUN(10000, "a", "list"), 0, "a");
	o = out_of("a");
	cr_assert(strstr(o, " 1234567890123456789  "), "%s", o);
	for (line = strtok_r(o, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (!at) {
			cr_assert(strstr(line, "ROBUST"), "%s", line);
			at = (size_t)(strstr(line, "ROBUST") - line);
			continue;
		}
		cr_assert_gt(strlen(line), at, "%s", line);
		cr_assert(line[at - 1] == ' ' && line[at - 2] == ' ' && line[at] != ' ',
				"column at %zu misplaced: '%s'", at, line);
		rows++;
	}
	cr_assert_eq(rows, 2);
	free(o);
}

/* What status makes of what it finds under a lock key: a layout-3 string
 * (a host with a space in it, the rest of the value), a fair mutex's hash
 * (layout 2), and data it must not guess at: another layout's value, a
 * string that is no lock value, a key of another type. */
Test(cli, status_reads_each_layout_and_refuses_foreign_data)
{
	redisContext *c = th_redis_connect(&srv, NULL, NULL);
	char *o;

	cr_assert(c);
	freeReplyObject(redisCommand(c, "SET dmutex:lock:{s3} %s PX 60000",
			"3 0123abcd 77 1 rc 5000 1700000000000 4242 4243 - my host"));
	freeReplyObject(redisCommand(c, "HSET dmutex:lock:{h2} v 2 token t fence 9 died 0 host h2host "
			"pid 11 tid 12 since 1700000000000 lease 6000 hostid -"));
	freeReplyObject(redisCommand(c, "PEXPIRE dmutex:lock:{h2} 60000"));
	freeReplyObject(redisCommand(c, "SET dmutex:lock:{v4} %s PX 60000", "4 t - 0 - 5000 1 1 1 - h"));
	freeReplyObject(redisCommand(c, "SET dmutex:lock:{junk} %s PX 60000", "3 only a few"));
	freeReplyObject(redisCommand(c, "RPUSH dmutex:lock:{alist} x"));
	redisFree(c);

	ASSERT_ST(DM_RUN(10000, "a", "status", "s3", "h2"), 0, "a");
	o = out_of("a");
	assert_contains(o, "s3: cached\n");
	assert_contains(o, "holder:      my host pid 4242 tid 4243");
	assert_contains(o, "fence:       77\n");
	assert_contains(o, "(the holder took over from a holder that died)");
	assert_contains(o, "h2: held\n");
	assert_contains(o, "holder:      h2host pid 11 tid 12");
	assert_contains(o, "fence:       9\n");
	free(o);
	ASSERT_ST(DM_RUN(10000, "b", "status", "--json", "s3"), 0, "b");
	assert_json("b", "d[0][\"held\"] is True and d[0][\"cached\"] is True and d[0][\"fence\"] == 77 and "
			"d[0][\"lease_ms\"] == 5000 and d[0][\"host\"] == \"my host\" and "
			"d[0][\"acquired_after_owner_died\"] is True");
	ASSERT_ST(DM_RUN(10000, "c", "status", "v4"), ST_BACKEND, "c");
	o = err_of("c");
	assert_contains(o, "written by key layout version 4");
	free(o);
	ASSERT_ST(DM_RUN(10000, "d", "status", "junk"), ST_BACKEND, "d");
	o = err_of("d");
	assert_contains(o, "not a value dmutex writes");
	free(o);
	ASSERT_ST(DM_RUN(10000, "e", "status", "alist"), ST_BACKEND, "e");
	o = err_of("e");
	assert_contains(o, "WRONGTYPE");
	free(o);
	/* list shows each, the unreadable ones as such. */
	ASSERT_ST(DM_RUN(10000, "f", "list"), ST_BACKEND, "f");
	o = out_of("f");
	assert_contains(o, "alist");
	assert_contains(o, "cannot read");
	assert_contains(o, "my host pid 4242");
	free(o);
}

/* A child process that takes NAME and stays (until killed), or with cond
 * set waits on the condition variable NAME with it. */
struct sitter { char url[700]; const char *name; int robust; unsigned lease_ms; int cond; };

static int
sit_holding(void *p)
{
	struct sitter *s = p;
	dmutex_client_t *c;
	dmutex_attr_t a;
	dcond_attr_t ca;
	dcond_t cv;
	dmutex_t m;

	if (dmutex_client_open(&c, s->url))
		return 10;
	dmutex_attr_init(&a);
	dmutex_attr_setclient(&a, c);
	if (s->robust)
		dmutex_attr_setrobust(&a, DMUTEX_ROBUST);
	if (s->lease_ms)
		dmutex_attr_setlease(&a, s->lease_ms);
	if (dmutex_init(&m, s->name, &a) || dmutex_lock(&m))
		return 11;
	if (s->cond) {
		dcond_attr_init(&ca);
		dcond_attr_setclient(&ca, c);
		if (dcond_init(&cv, s->name, &ca))
			return 12;
		for (;;)
			dcond_wait(&cv, &m);
	}
	for (;;)
		pause();
}

static pid_t
sit(const char *name, int robust, unsigned lease_ms, int cond)
{
	static struct sitter s;
	pid_t pid;

	s = (struct sitter){ .name = name, .robust = robust, .lease_ms = lease_ms, .cond = cond };
	snprintf(s.url, sizeof s.url, "%s", srv.url);
	pid = th_spawn(sit_holding, &s);
	cr_assert_gt(pid, 0);
	return pid;
}

static int
cond_registered(void *name)
{
	return th_redis_int(&srv, "ZCARD dmutex:cond:{%s}", (const char *)name) == 1;
}

static int
lock_gone_cond(void *name)
{
	return lock_exists(name) == 0;
}

/* Issue 17.6: a holder on this machine is shown alive, and once killed as
 * gone with the lease's end, never as if it still held the lock. */
Test(cli, status_holder_alive_then_gone)
{
	pid_t pid = sit("live", 0, 30000, 0);
	char *o;

	cr_assert(th_wait_until(lock_exists_cond, "live", 5000), "the holder never held");
	ASSERT_ST(DM_RUN(10000, "a", "status", "live"), 0, "a");
	o = out_of("a");
	assert_contains(o, "process:     alive (same machine and pid namespace)");
	/* It never asked for its token: none was handed out (key layout 3). */
	assert_contains(o, "fence:       not assigned yet");
	cr_assert_null(strstr(o, "gone"), "%s", o);
	free(o);
	ASSERT_ST(DM_RUN(10000, "b", "status", "--json", "live"), 0, "b");
	assert_json("b", "d[0][\"held\"] is True and d[0][\"holder_alive\"] is True");

	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(th_wait_child(pid, 5000), 128 + SIGKILL);
	ASSERT_ST(DM_RUN(10000, "c", "status", "live"), 0, "c");
	o = out_of("c");
	assert_contains(o, "(process gone)");
	assert_contains(o, "process:     gone; the lock is free when the lease ends in ");
	cr_assert_null(strstr(o, "alive"), "%s", o);
	free(o);
	ASSERT_ST(DM_RUN(10000, "d", "status", "--json", "live"), 0, "d");
	assert_json("d", "d[0][\"held\"] is True and d[0][\"holder_alive\"] is False");
	ASSERT_ST(DM_RUN(10000, "e", "list"), 0, "e");
	o = out_of("e");
	assert_contains(o, "(process gone)");
	free(o);
}

/* Issue 17.6: "owner died" is what a robust locker is told; a lock that is
 * not robust and whose holder vanished has merely expired, and leaves
 * nothing in Redis (key layout 3: a non-robust hold writes no state). */
Test(cli, status_not_robust_expired_not_owner_died)
{
	pid_t pid = sit("plain", 0, 200, 0);
	char *o;

	cr_assert(th_wait_until(lock_exists_cond, "plain", 5000), "the holder never held");
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(th_wait_child(pid, 5000), 128 + SIGKILL);
	cr_assert(th_wait_until(lock_gone_cond, "plain", 5000), "the lease never ran out");
	ASSERT_ST(DM_RUN(10000, "a", "status", "plain"), ST_NOLOCK, "a");
	o = err_of("a");
	assert_contains(o, "no such lock 'plain'");
	free(o);
	ASSERT_ST(DM_RUN(10000, "c", "list"), 0, "c");
	o = out_of("c");
	cr_assert_null(strstr(o, "plain"), "%s", o);
	free(o);

	/* The same with a robust lock: owner died. */
	pid = sit("tough", 1, 200, 0);
	cr_assert(th_wait_until(lock_exists_cond, "tough", 5000), "the holder never held");
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(th_wait_child(pid, 5000), 128 + SIGKILL);
	cr_assert(th_wait_until(lock_gone_cond, "tough", 5000), "the lease never ran out");
	ASSERT_ST(DM_RUN(10000, "d", "status", "--json", "tough"), 0, "d");
	assert_json("d", "d[0][\"robust\"] == \"owner_died\"");
}

/* Issue 17.6: threads waiting on a condition variable are seen. */
Test(cli, status_shows_cond_waiters)
{
	pid_t pid = sit("cv", 0, 0, 1);
	char *o;

	cr_assert(th_wait_until(cond_registered, "cv", 5000), "the waiter never registered");
	char want[128];

	ASSERT_ST(DM_RUN(10000, "a", "status", "cv"), 0, "a");
	o = out_of("a");
	assert_contains(o, "cond waits:  1 thread on condition variable 'cv'");
	/* Who waits, and since when. */
	snprintf(want, sizeof want, " pid %ld tid ", (long)pid);
	assert_contains(o, want);
	assert_contains(o, ", waiting for ");
	assert_contains(o, " (alive)\n");
	free(o);
	ASSERT_ST(DM_RUN(10000, "b", "status", "--json", "cv"), 0, "b");
	snprintf(want, sizeof want, "d[0][\"cond_waiting\"][0][\"pid\"] == %ld", (long)pid);
	assert_json("b", "d[0][\"cond_waiters\"] == 1 and len(d[0][\"cond_waiting\"]) == 1 and "
			"d[0][\"cond_waiting\"][0][\"alive\"] is True");
	assert_json("b", want);
	ASSERT_ST(DM_RUN(10000, "c", "list"), 0, "c");
	o = out_of("c");
	assert_contains(o, "1 cond");
	free(o);
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(th_wait_child(pid, 5000), 128 + SIGKILL);
}

/* No byte a terminal acts on: nothing below 0x20 but the line ends, no
 * DEL, no 8-bit CSI (0x9b). */
static void
assert_inert(const char *what, const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		cr_assert(!((*p < 0x20 && *p != '\n') || *p == 0x7f || *p == 0x9b),
				"%s holds byte 0x%02x at %zu:\n%s", what, *p, (size_t)(p - (const unsigned char *)s), s);
}

/* Key names and values from the server holding ESC, BEL (a terminal's
 * window title, a screen wipe) and a lone 0x9b reach no terminal raw:
 * not in status's or list's "cannot read" text, not in a holder's host,
 * not in any message on stderr. */
Test(cli, server_bytes_escaped_everywhere)
{
	redisContext *c = th_redis_connect(&srv, NULL, NULL);
	const char *tags[] = { "a", "b", "c", "d", "e" };
	char *o;

	cr_assert(c);
	/* Another layout's value: its version is quoted in the error. */
	freeReplyObject(redisCommand(c, "SET dmutex:lock:{e\x1b[31mv\x07} %s PX 60000",
			"9\x1b]0;t\x07 x"));
	/* A key of another type: the key is in the error. */
	freeReplyObject(redisCommand(c, "RPUSH dmutex:lock:{l\x1b[2J\x07} x"));
	/* A holder's host with ESC, BEL and a byte that is no UTF-8. */
	freeReplyObject(redisCommand(c, "HSET dmutex:lock:{hh} v 2 token t fence 9 died 0 host %s "
			"pid 11 tid 12 since 1700000000000 lease 6000 hostid -", "h\x1b[2J\x07\x9bx"));
	freeReplyObject(redisCommand(c, "PEXPIRE dmutex:lock:{hh} 60000"));
	redisFree(c);

	ASSERT_ST(DM_RUN(10000, "a", "status", "e\x1b[31mv\x07"), ST_BACKEND, "a");
	ASSERT_ST(DM_RUN(10000, "b", "status", "l\x1b[2J\x07", "hh"), ST_BACKEND, "b");
	ASSERT_ST(DM_RUN(10000, "c", "list"), ST_BACKEND, "c");
	ASSERT_ST(DM_RUN(10000, "d", "reset", "e\x1b[31mv\x07"), ST_BACKEND, "d");
	ASSERT_ST(DM_RUN(10000, "e", "status", "hh"), 0, "e");
	for (size_t i = 0; i < sizeof tags / sizeof *tags; i++) {
		char *out = out_of(tags[i]), *err = err_of(tags[i]);
		assert_inert(tags[i], out);
		assert_inert(tags[i], err);
		free(out);
		free(err);
	}
	/* Said, escaped: the key, the value's version, the host. */
	o = err_of("a");
	assert_contains(o, "dmutex:lock:{e\\x1b[31mv\\x07}: written by key layout version 9\\x1b]0;t\\x07");
	free(o);
	o = out_of("a");
	assert_contains(o, "e\\x1b[31mv\\x07: cannot read: dmutex:lock:{e\\x1b[31mv\\x07}: written by");
	free(o);
	o = out_of("c");
	assert_contains(o, "cannot read: dmutex:lock:{l\\x1b[2J\\x07}: WRONGTYPE");
	assert_contains(o, "cannot read: dmutex:lock:{e\\x1b[31mv\\x07}: written by");
	free(o);
	o = err_of("d");
	assert_contains(o, "dmutex:lock:{e\\x1b[31mv\\x07}");
	free(o);
	o = out_of("e");
	assert_contains(o, "holder:      h\\x1b[2J\\x07\\x9bx pid 11 tid 12");
	free(o);
}

/* The library's own lines on stderr (DMUTEX_LOG, no logger of the
 * program's) escape control bytes too: here a file name, percent-decoded
 * from the URL, in the line saying it cannot be read. */
Test(cli, library_log_lines_escaped)
{
	char url[800];
	char *e;

	th_url_with(url, sizeof url, srv.url, "password_file=/nonexistent/%1B%5D0%3Bt%07");
	ASSERT_ST(DM_RUN(10000, "a", "--url", url, "status", "x"), ST_BADURL, "a");
	e = err_of("a");
	assert_inert("a", e);
	assert_contains(e, "cannot read password_file /nonexistent/\\x1b]0;t\\x07");
	free(e);
}

/* ------------------------------------------------------------------ */
/* read-write locks                                                    */
/* ------------------------------------------------------------------ */

/* A drwlock_t on a client of its own: clients of one process hold one
 * share each, as processes do (src/core/rwlock.h). */
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
	cr_assert_eq(dmutex_client_open(&h->c, srv.url), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, h->c), 0);
	cr_assert_eq(dmutex_attr_setonlost(&a, count_lost, &h->lost), 0);
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

static int
rw_lost_once(void *p)
{
	return atomic_load(&((struct rwholder *)p)->lost) >= 1;
}

/* ZCARD of the read shares ("rwr") or waiting writers ("rwq") of NAME. */
struct rwcount { const char *kind, *name; long long want; };

static int
rw_count_is(void *p)
{
	struct rwcount *k = p;

	return th_redis_int(&srv, "ZCARD dmutex:%s:{%s}", k->kind, k->name) == k->want;
}

/* A writer on a thread of its own: it waits, writes, says so with its
 * token, and unlocks when told. */
struct rwwriter {
	struct rwholder h;
	pthread_t t;
	uint64_t fence;
	atomic_int writing, done;
	int rc;
	pid_t tid;              /* the writing thread, as status shows it */
};

static void *
rw_write_main(void *p)
{
	struct rwwriter *w = p;

	if ((w->rc = drwlock_wrlock(&w->h.rw)) || (w->rc = drwlock_fence(&w->h.rw, &w->fence)))
		return NULL;
	w->tid = gettid();
	atomic_store(&w->writing, 1);
	while (!atomic_load(&w->done))
		th_wait_until(dmt_flag_set, &w->done, 100);
	w->rc = drwlock_unlock(&w->h.rw);
	return NULL;
}

static long long
wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* status and list of a read-write lock read by two processes while a
 * writer waits, then written by that writer, then free: every number as
 * the library left it. */
Test(cli, rwlock_status_and_list)
{
	struct rwholder r1, r2;
	struct rwwriter w = { 0 };
	struct rwcount shares = { "rwr", "doc", 2 }, waiting = { "rwq", "doc", 1 };
	char want[600], expr[900], host[256], *o;
	long long t0 = wall_ms();

	rw_hold(&r1, "doc", 5000);
	rw_hold(&r2, "doc", 5000);
	cr_assert_eq(drwlock_rdlock(&r1.rw), 0);
	cr_assert_eq(drwlock_rdlock(&r2.rw), 0);
	cr_assert(th_wait_until(rw_count_is, &shares, 5000));
	rw_hold(&w.h, "doc", 5000);
	cr_assert_eq(pthread_create(&w.t, NULL, rw_write_main, &w), 0);
	cr_assert(th_wait_until(rw_count_is, &waiting, 5000), "the writer never waited");

	ASSERT_ST(DM_RUN(10000, "a", "status", "doc"), 0, "a");
	o = out_of("a");
	assert_contains(o, "doc (read-write lock): read by 2 processes\n");
	assert_contains(o, "  readers:     2 processes, longest lease left ");
	assert_contains(o, "  waiting:     1 writer\n");
	cr_assert_null(strstr(o, "doc: "), "no mutex of that name, yet shown:\n%s", o);
	free(o);
	ASSERT_ST(DM_RUN(10000, "b", "status", "--json", "doc"), 0, "b");
	assert_json("b", "len(d) == 1 and d[0][\"kind\"] == \"rwlock\" and d[0][\"exists\"] is True and "
			"d[0][\"writing\"] is False and d[0][\"writer\"] is None and d[0][\"readers\"] == 2 and "
			"0 < d[0][\"read_lease_left_ms\"] <= 5000 and d[0][\"writers_waiting\"] == 1 and "
			"d[0][\"fence\"] is None and d[0][\"fence_counter\"] is None");
	ASSERT_ST(DM_RUN(10000, "c", "list"), 0, "c");
	o = out_of("c");
	cr_assert_eq(strncmp(o, "RWLOCK  STATE  LEASE LEFT  FENCE  ", 34), 0, "%s", o);
	cr_assert(strstr(o, "\ndoc     read   -           -                    2        "), "%s", o);
	free(o);

	cr_assert_eq(drwlock_unlock(&r1.rw), 0);
	cr_assert_eq(drwlock_unlock(&r2.rw), 0);
	cr_assert(th_wait_until(dmt_flag_set, &w.writing, 10000), "the writer never wrote");
	ASSERT_ST(DM_RUN(10000, "d", "status", "doc"), 0, "d");
	o = out_of("d");
	assert_contains(o, "doc (read-write lock): written\n");
	/* Who writes, as a mutex's holder is shown (rw_acquire.lua's wo). */
	cr_assert_eq(gethostname(host, sizeof host), 0);
	snprintf(want, sizeof want, "  writer:      %s pid %d tid %d\n"
			"  process:     alive (same machine and pid namespace)\n  since:       ",
			host, (int)getpid(), (int)w.tid);
	assert_contains(o, want);
	assert_contains(o, "  lease left:  ");
	snprintf(want, sizeof want, "  fence:       %llu\n", (unsigned long long)w.fence);
	assert_contains(o, want);
	assert_contains(o, "  readers:     0 processes\n  waiting:     0 writers\n");
	free(o);
	ASSERT_ST(DM_RUN(10000, "e", "status", "--json", "doc"), 0, "e");
	snprintf(expr, sizeof expr, "d[0][\"writing\"] is True and d[0][\"fence\"] == %llu and "
			"d[0][\"fence_counter\"] == %llu and 0 < d[0][\"write_lease_left_ms\"] <= 5000 and "
			"d[0][\"readers\"] == 0 and d[0][\"read_lease_left_ms\"] is None and "
			"d[0][\"writer\"] == {\"host\": \"%s\", \"pid\": %d, \"tid\": %d, "
			"\"since_ms\": d[0][\"writer\"][\"since_ms\"], \"alive\": True} and "
			"%lld <= d[0][\"writer\"][\"since_ms\"] <= %lld",
			(unsigned long long)w.fence, (unsigned long long)w.fence, host, (int)getpid(),
			(int)w.tid, t0, wall_ms());
	assert_json("e", expr);
	ASSERT_ST(DM_RUN(10000, "f", "list", "--json"), 0, "f");
	snprintf(expr, sizeof expr, "len(d) == 1 and d[0][\"kind\"] == \"rwlock\" and d[0][\"name\"] == \"doc\" "
			"and d[0][\"fence\"] == %llu", (unsigned long long)w.fence);
	assert_json("f", expr);

	atomic_store(&w.done, 1);
	cr_assert_eq(pthread_join(w.t, NULL), 0);
	cr_assert_eq(w.rc, 0);
	ASSERT_ST(DM_RUN(10000, "g", "status", "doc"), 0, "g");
	o = out_of("g");
	snprintf(want, sizeof want, "doc (read-write lock): free\n  last fence:  %llu\n",
			(unsigned long long)w.fence);
	assert_contains(o, want);
	free(o);
	rw_unhold(&w.h);
	rw_unhold(&r1);
	rw_unhold(&r2);
}

/* reset refuses a read or written rwlock without --force; with it, the
 * share or the writer goes, and the holder learns it as of any lost key:
 * its renewal finds it gone, onlost runs, the unlock says ENOLCK.  The
 * last token stays: the next writer's is greater. */
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
	e = err_of("a");
	if (write)
		snprintf(want, sizeof want, "read-write lock 'doc' is written (fence %llu); use --force",
				(unsigned long long)tok);
	else
		snprintf(want, sizeof want, "read-write lock 'doc' is read by 1 process; use --force");
	assert_contains(e, want);
	free(e);
	cr_assert_eq(write ? th_redis_int(&srv, "HEXISTS dmutex:rw:{doc} w")
			: th_redis_int(&srv, "ZCARD dmutex:rwr:{doc}"), 1);

	ASSERT_ST(DM_RUN(10000, "b", "reset", "--force", "doc"), 0, "b");
	o = out_of("b");
	if (write)
		snprintf(want, sizeof want, "reset read-write lock 'doc': released the write lock "
				"(fence %llu); fence kept\n", (unsigned long long)tok);
	else
		snprintf(want, sizeof want, "reset read-write lock 'doc': released 1 read share; fence kept\n");
	cr_assert_str_eq(o, want);
	free(o);
	cr_assert(th_wait_until(rw_lost_once, &h, 8000), "the holder was never told");
	cr_assert_eq(drwlock_unlock(&h.rw), ENOLCK);
	rw_unhold(&h);

	rw_hold(&next, "doc", 3000);
	cr_assert_eq(drwlock_wrlock(&next.rw), 0);
	cr_assert_eq(drwlock_fence(&next.rw, &tok2), 0);
	cr_assert_gt(tok2, tok);
	cr_assert_eq(drwlock_unlock(&next.rw), 0);
	rw_unhold(&next);
	/* Only the last token left: nothing to reset, yet not absent. */
	ASSERT_ST(DM_RUN(10000, "c", "reset", "doc"), 0, "c");
	o = out_of("c");
	cr_assert_str_eq(o, "'doc' is free and consistent: nothing to reset\n");
	free(o);
	ASSERT_ST(DM_RUN(10000, "d", "reset", "nowhere"), ST_NOLOCK, "d");
}

Test(cli, rwlock_reset_reader_learns_at_renewal)
{
	rw_reset_holder(0);
}

Test(cli, rwlock_reset_writer_learns_at_renewal)
{
	rw_reset_holder(1);
}

/* A name that is both a mutex and a read-write lock (separate keys): status
 * shows both; reset refuses while the rwlock is read even with the mutex
 * free, and with --force resets both. */
Test(cli, rwlock_and_mutex_of_one_name)
{
	struct holder m;
	struct rwholder r;
	char *o;

	hold(&m, "both", 0, 5000);
	cr_assert_eq(dmutex_lock(&m.m), 0);
	rw_hold(&r, "both", 5000);
	cr_assert_eq(drwlock_rdlock(&r.rw), 0);
	ASSERT_ST(DM_RUN(10000, "a", "status", "both"), 0, "a");
	o = out_of("a");
	assert_contains(o, "both: held\n");
	assert_contains(o, "\n\nboth (read-write lock): read by 1 process\n");
	free(o);
	ASSERT_ST(DM_RUN(10000, "b", "status", "--json", "both"), 0, "b");
	assert_json("b", "[x[\"kind\"] for x in d] == [\"mutex\", \"rwlock\"] and d[0][\"held\"] is True "
			"and d[1][\"readers\"] == 1");
	ASSERT_ST(DM_RUN(10000, "c", "list"), 0, "c");
	o = out_of("c");
	/* The mutexes' table as before, then the rwlocks' own. */
	cr_assert_eq(strncmp(o, "NAME  STATE  HOLDER", 19), 0, "%s", o);
	assert_contains(o, "\n\nRWLOCK  STATE  ");
	free(o);
	ASSERT_ST(DM_RUN(10000, "d", "list", "--json"), 0, "d");
	assert_json("d", "[(x[\"name\"], x[\"kind\"]) for x in d] == [(\"both\", \"mutex\"), (\"both\", \"rwlock\")]");

	cr_assert_eq(dmutex_unlock(&m.m), 0);
	ASSERT_ST(DM_RUN(10000, "e", "reset", "both"), ST_REFUSED, "e");
	cr_assert_eq(th_redis_int(&srv, "ZCARD dmutex:rwr:{both}"), 1);
	ASSERT_ST(DM_RUN(10000, "f", "reset", "--force", "both"), 0, "f");
	o = out_of("f");
	assert_contains(o, "reset read-write lock 'both': released 1 read share; fence kept\n");
	free(o);
	cr_assert_eq(th_redis_int(&srv, "EXISTS dmutex:rwr:{both}"), 0);
	cr_assert(th_wait_until(rw_lost_once, &r, 8000), "the reader was never told");
	cr_assert_eq(drwlock_unlock(&r.rw), ENOLCK);
	rw_unhold(&r);
	unhold(&m);
}

/* Someone else's data under a read-write lock's keys: a clear error from
 * status, list and reset (which touches nothing), never a guess. */
/* The writer's record ('wo') is shown only under the writer's own token,
 * escaped; one that is another token's (an older client's writer left
 * it) or does not parse is "not recorded", never an error or a guess.
 * A reset removes it with the writer. */
Test(cli, rwlock_writer_record_read_with_care)
{
	redisContext *c = th_redis_connect(&srv, NULL, NULL);
	char *o;

	cr_assert(c);
	freeReplyObject(redisCommand(c, "HSET dmutex:rw:{old} w tokA wexp 99999999999999 fms 1 fseq 0 "
			"wo %s", "tokB 1700000000000 11 12 - elsewhere"));
	freeReplyObject(redisCommand(c, "HSET dmutex:rw:{esc} w tokA wexp 99999999999999 fms 1 fseq 0 "
			"wo %s", "tokA 1700000000000 11 12 - h\x1b[2Jx"));
	freeReplyObject(redisCommand(c, "HSET dmutex:rw:{junk} w tokA wexp 99999999999999 fms 1 fseq 0 "
			"wo %s", "tokA soon"));
	redisFree(c);

	ASSERT_ST(DM_RUN(10000, "a", "status", "old", "junk"), 0, "a");
	o = out_of("a");
	assert_contains(o, "old (read-write lock): written\n"
			"  writer:      not recorded (its client wrote only its token)\n");
	assert_contains(o, "junk (read-write lock): written\n"
			"  writer:      not recorded (its client wrote only its token)\n");
	free(o);
	ASSERT_ST(DM_RUN(10000, "b", "status", "esc"), 0, "b");
	o = out_of("b");
	assert_contains(o, "esc (read-write lock): written\n"
			"  writer:      h\\x1b[2Jx pid 11 tid 12\n  since:       ");
	cr_assert_null(strstr(o, "process:"), "a pid of no known machine shown alive or gone:\n%s", o);
	free(o);
	ASSERT_ST(DM_RUN(10000, "c", "status", "--json", "esc", "old"), 0, "c");
	assert_json("c", "len(d) == 2 and d[0][\"writer\"] == {\"host\": \"h\\x1b[2Jx\", \"pid\": 11, "
			"\"tid\": 12, \"since_ms\": 1700000000000, \"alive\": None} and d[1][\"writer\"] is None");
	ASSERT_ST(DM_RUN(10000, "d", "reset", "--force", "esc"), 0, "d");
	cr_assert_eq(th_redis_int(&srv, "HEXISTS dmutex:rw:{esc} wo"), 0);
	cr_assert_eq(th_redis_int(&srv, "HEXISTS dmutex:rw:{esc} w"), 0);
}

Test(cli, rwlock_foreign_values_are_errors)
{
	redisContext *c = th_redis_connect(&srv, NULL, NULL);
	char *o;

	cr_assert(c);
	freeReplyObject(redisCommand(c, "SET dmutex:rw:{str} x"));
	freeReplyObject(redisCommand(c, "HSET dmutex:rw:{bad} w tok wexp soon fms 1 fseq 2"));
	freeReplyObject(redisCommand(c, "HSET dmutex:rw:{alien} colour blue"));
	freeReplyObject(redisCommand(c, "SET dmutex:rwr:{shares} x"));
	redisFree(c);

	ASSERT_ST(DM_RUN(10000, "a", "status", "str"), ST_BACKEND, "a");
	o = out_of("a");
	assert_contains(o, "str (read-write lock): cannot read: dmutex:rw:{str}: WRONGTYPE");
	free(o);
	o = err_of("a");
	assert_contains(o, "'str': dmutex:rw:{str}: WRONGTYPE");
	free(o);
	ASSERT_ST(DM_RUN(10000, "b", "status", "bad", "alien"), ST_BACKEND, "b");
	o = err_of("b");
	assert_contains(o, "'bad': dmutex:rw:{bad}: not a value dmutex writes");
	assert_contains(o, "'alien': dmutex:rw:{alien}: not a value dmutex writes");
	free(o);
	ASSERT_ST(DM_RUN(10000, "c", "status", "--json", "shares"), ST_BACKEND, "c");
	assert_json("c", "len(d) == 1 and d[0][\"kind\"] == \"rwlock\" and "
			"d[0][\"error\"].startswith(\"dmutex:rwr:{shares}: WRONGTYPE\") and \"readers\" not in d[0]");
	ASSERT_ST(DM_RUN(10000, "d", "list"), ST_BACKEND, "d");
	o = out_of("d");
	assert_contains(o, "\nalien   cannot read: ");
	assert_contains(o, "\nshares  cannot read: dmutex:rwr:{shares}: WRONGTYPE");
	free(o);
	ASSERT_ST(DM_RUN(10000, "e", "list", "--json"), ST_BACKEND, "e");
	assert_json("e", "len(d) == 4 and all(x[\"kind\"] == \"rwlock\" and \"error\" in x for x in d)");
	ASSERT_ST(DM_RUN(10000, "f", "reset", "--force", "str"), ST_BACKEND, "f");
	o = err_of("f");
	assert_contains(o, "WRONGTYPE");
	free(o);
	ASSERT_ST(DM_RUN(10000, "g", "reset", "bad"), ST_BACKEND, "g");
	cr_assert_eq(th_redis_int(&srv, "HEXISTS dmutex:rw:{bad} w"), 1);
	cr_assert_eq(th_redis_int(&srv, "EXISTS dmutex:rw:{str}"), 1);
}
