/*
 * Unmodified pthread programs built through the shim, run as several
 * processes against a real redis-server: the examples' invariants hold
 * exactly (money conserved, every item consumed exactly once), the same
 * binary agrees on every name across processes (static, array-in-a-loop,
 * named), another namespace or another program does not collide, and every
 * mapped pthread call behaves with pthread's values.
 *
 * The programs' paths come from the environment (tests/meson.build):
 * BANK_SHIM, BANK_NOLOCK, QUEUE_SHIM, SHIM_PROG, SHIM_PROG2 (the same
 * source as SHIM_PROG under another program name) and SHIM_PROG_SRC.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "dmt.h"

static struct th_redis srv;
static pid_t test_pid;

#define MAXPROC 4

struct proc {
	pid_t pid;
	int out;        /* its stdout */
	int in;         /* its stdin */
};

static struct proc procs[MAXPROC];
static int merge_stderr;        /* start(): the child's stderr into its stdout too */

/*
 * The lock names a run used, from Redis's keyspace notifications: a lock
 * that is not robust and asks for no fencing token leaves no key behind
 * once released (key layout 3), so the names are caught as its SETs
 * happen.  names_watch subscribes before the run; names_count counts the
 * distinct lock keys matching pattern that were written since.
 */
static redisContext *
names_watch(const char *pattern)
{
	redisContext *c = th_redis_connect(&srv, NULL, NULL);
	redisReply *r;

	cr_assert(c);
	r = redisCommand(c, "CONFIG SET notify-keyspace-events K$");
	cr_assert(r && r->type == REDIS_REPLY_STATUS, "CONFIG SET notify-keyspace-events failed");
	freeReplyObject(r);
	r = redisCommand(c, "PSUBSCRIBE __keyspace@*__:%s", pattern);
	cr_assert(r && r->type == REDIS_REPLY_ARRAY, "PSUBSCRIBE failed");
	freeReplyObject(r);
	return c;
}

static long long
names_count(redisContext *c)
{
	char *seen[64];
	size_t n = 0;
	void *v;

	/* Everything the run wrote is in the socket by now: read it until
	 * a short silence. */
	redisSetTimeout(c, (struct timeval){ 0, 300 * 1000 });
	while (redisGetReply(c, &v) == REDIS_OK) {
		redisReply *r = v;
		if (r->type == REDIS_REPLY_ARRAY && r->elements == 4 &&
		    r->element[2]->type == REDIS_REPLY_STRING) {
			const char *ch = strchr(r->element[2]->str, ':');
			size_t i = 0;
			while (i < n && strcmp(seen[i], ch))
				i++;
			if (i == n && n < sizeof seen / sizeof seen[0])
				cr_assert(seen[n++] = strdup(ch));
		}
		freeReplyObject(r);
	}
	redisFree(c);
	for (size_t i = 0; i < n; i++)
		free(seen[i]);
	return (long long)n;
}

static void srv_up(void)
{
	test_pid = getpid();
	cr_assert_eq(th_redis_start(&srv, NULL), 0, "redis-server did not start");
}

static void srv_down(void)
{
	for (int i = 0; i < MAXPROC; i++) {
		if (procs[i].in > 0)
			close(procs[i].in);
		if (procs[i].out > 0)
			close(procs[i].out);
		dmt_reap(&procs[i].pid);
	}
	th_redis_stop(&srv);
}

TestSuite(shim, .init = srv_up, .fini = srv_down, .timeout = 90);

static const char *env_path(const char *var)
{
	const char *v = getenv(var);
	cr_assert(v && *v, "%s is not set (run through meson test)", var);
	return v;
}

/* Start path with argv (argv[0] first), DMUTEX_URL pointing at our server
 * and DMUTEX_NAMESPACE = ns (NULL: unset). */
static void start(struct proc *p, const char *path, const char *ns, char *const argv[])
{
	int out[2], in[2];

	cr_assert_eq(pipe(out), 0);
	cr_assert_eq(pipe(in), 0);
	fflush(NULL);
	p->pid = fork();
	cr_assert_geq(p->pid, 0);
	if (p->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != test_pid)
			_exit(99);
		dup2(out[1], 1);
		if (merge_stderr)
			dup2(out[1], 2);
		dup2(in[0], 0);
		close(out[0]);
		close(out[1]);
		close(in[0]);
		close(in[1]);
		setenv("DMUTEX_URL", getenv("DMUTEX_URL_OVERRIDE") ? getenv("DMUTEX_URL_OVERRIDE") : srv.url, 1);
		if (ns)
			setenv("DMUTEX_NAMESPACE", ns, 1);
		else
			unsetenv("DMUTEX_NAMESPACE");
		execv(path, argv);
		_exit(127);
	}
	close(out[1]);
	close(in[0]);
	p->out = out[0];
	p->in = in[1];
}

/* Everything p writes until it exits (or timeout_ms), into buf. */
static void read_all(struct proc *p, char *buf, size_t len, int timeout_ms)
{
	size_t n = 0;
	long long until = th_now_ms() + timeout_ms;
	struct pollfd pf = { .fd = p->out, .events = POLLIN };

	while (n + 1 < len && th_now_ms() < until) {
		if (poll(&pf, 1, 100) <= 0)
			continue;
		ssize_t r = read(p->out, buf + n, len - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	buf[n] = '\0';
}

/* Read p's output until it contains want. */
static void expect_output(struct proc *p, const char *want, int timeout_ms)
{
	char buf[4096];
	size_t n = 0;
	long long until = th_now_ms() + timeout_ms;
	struct pollfd pf = { .fd = p->out, .events = POLLIN };

	buf[0] = '\0';
	while (!strstr(buf, want) && n + 1 < sizeof buf && th_now_ms() < until) {
		if (poll(&pf, 1, 100) <= 0)
			continue;
		ssize_t r = read(p->out, buf + n, sizeof buf - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
		buf[n] = '\0';
	}
	cr_assert(strstr(buf, want), "expected \"%s\", got \"%s\"", want, buf);
}

/* Exit status of p (closing its pipes first). */
static int finish(struct proc *p, int timeout_ms)
{
	int st;

	close(p->in);
	p->in = -1;
	st = th_wait_child(p->pid, timeout_ms);
	p->pid = 0;
	close(p->out);
	p->out = -1;
	return st;
}

/* Run a program to completion; its exit status. */
static int run(const char *path, const char *ns, char *const argv[], int timeout_ms)
{
	struct proc p;
	char out[8192];

	start(&p, path, ns, argv);
	read_all(&p, out, sizeof out, timeout_ms);
	return finish(&p, timeout_ms);
}

static long long get_int(const char *key)
{
	return th_redis_int(&srv, "GET %s", key);
}

/* ------------------------------------------------------------------ */
/* the examples: invariants across processes                           */
/* ------------------------------------------------------------------ */

#define BANK_PROCS 3
#define BANK_THREADS "3"
#define BANK_TRANSFERS "60"
#define BANK_TOTAL (BANK_PROCS * 3 * 60)

/* Set up, run BANK_PROCS workers of path, wait for them; the money in the
 * accounts and the transfers counted. */
static void bank_run(const char *path, long long *money, long long *transfers)
{
	char port[16], id[8];

	snprintf(port, sizeof port, "%d", srv.port);
	cr_assert_eq(run(path, NULL, (char *[]){ "bank", "setup", "-p", port, NULL }, 10000), 0);
	for (int i = 0; i < BANK_PROCS; i++) {
		snprintf(id, sizeof id, "%d", i);
		start(&procs[i], path, NULL, (char *[]){ "bank", "run", "-p", port, "-t", BANK_THREADS,
				"-n", BANK_TRANSFERS, "-i", id, NULL });
	}
	for (int i = 0; i < BANK_PROCS; i++) {
		char out[4096];
		read_all(&procs[i], out, sizeof out, 60000);
		cr_assert_eq(finish(&procs[i], 60000), 0, "bank worker %d failed: %s", i, out);
	}
	*money = 0;
	for (int i = 0; i < 8; i++) {
		char key[32];
		snprintf(key, sizeof key, "bank:acct:%d", i);
		*money += get_int(key);
	}
	*transfers = get_int("bank:transfers:0");
}

Test(shim, bank_conserves_money_across_processes)
{
	char port[16], expected[16];
	const char *path = env_path("BANK_SHIM");
	redisContext *names = names_watch("dmutex:lock:{bank-shim/bank.c:*}");
	long long money, transfers;

	bank_run(path, &money, &transfers);
	cr_assert_eq(money, 8 * 1000, "money is %lld, not 8000", money);
	cr_assert_eq(transfers, BANK_TOTAL, "%lld transfers counted, not %d", transfers, BANK_TOTAL);
	/* The program's own check agrees. */
	snprintf(port, sizeof port, "%d", srv.port);
	snprintf(expected, sizeof expected, "%d", BANK_TOTAL);
	cr_assert_eq(run(path, NULL, (char *[]){ "bank", "check", "-p", port, "-e", expected, NULL }, 10000), 0);
	/* Its locks were the shim's: 8 per-account ones initialized in a
	 * loop, and the counter's. */
	cr_assert_eq(names_count(names), 9);
	cr_assert_eq(dmt_count_keys(&srv, "dmutex:lock:*"), 0, "no lock left held");
}

/* The control: the same program with its lock calls compiled out loses
 * transfers, so the test above would notice a lock that does not exclude.
 * (Lost updates of one counter by 9 threads in 3 processes are likely, not
 * certain: on a loaded machine the processes can run one after the other.
 * Only "fewer" is asserted, and the control gets three runs to see it.) */
Test(shim, bank_without_locks_loses_transfers)
{
	long long money, transfers = BANK_TOTAL;

	for (int run = 0; run < 3 && transfers >= BANK_TOTAL; run++)
		bank_run(env_path("BANK_NOLOCK"), &money, &transfers);
	cr_assert_lt(transfers, BANK_TOTAL, "no transfer lost without locks in 3 runs: the test cannot see a broken lock");
	cr_assert_eq(dmt_count_keys(&srv, "dmutex:*"), 0, "the no-lock build used no dmutex");
}

#define Q_PROCS 3
#define Q_TOTAL (Q_PROCS * 2 * 50)

Test(shim, queue_every_item_consumed_exactly_once_across_3_processes)
{
	const char *path = env_path("QUEUE_SHIM");
	char port[16], id[8], total[16];
	redisContext *c, *names = names_watch("dmutex:lock:{queue-shim/queue.c:*}");
	long long once = 0;

	snprintf(port, sizeof port, "%d", srv.port);
	snprintf(total, sizeof total, "%d", Q_TOTAL);
	cr_assert_eq(run(path, NULL, (char *[]){ "queue", "setup", "-p", port, NULL }, 10000), 0);
	/* Each process: 2 producers of 50 items and 2 consumers, a ring of 4
	 * slots, so producers and consumers wait on each other a lot. */
	for (int i = 0; i < Q_PROCS; i++) {
		snprintf(id, sizeof id, "%d", i);
		start(&procs[i], path, NULL, (char *[]){ "queue", "run", "-p", port, "-c", "4", "-P", "2",
				"-C", "2", "-n", "50", "-N", total, "-i", id, "-T", "60", NULL });
	}
	for (int i = 0; i < Q_PROCS; i++) {
		char out[4096];
		read_all(&procs[i], out, sizeof out, 70000);
		cr_assert_eq(finish(&procs[i], 70000), 0, "queue worker %d failed: %s", i, out);
	}
	/* Every item 0..Q_TOTAL-1 consumed exactly once, and nothing else. */
	cr_assert(c = th_redis_connect(&srv, NULL, NULL));
	for (int i = 0; i < Q_TOTAL; i++)
		redisAppendCommand(c, "GET queue:got:%d", i);
	for (int i = 0; i < Q_TOTAL; i++) {
		redisReply *r;
		cr_assert_eq(redisGetReply(c, (void **)&r), REDIS_OK);
		once += r->type == REDIS_REPLY_STRING && !strcmp(r->str, "1");
		freeReplyObject(r);
	}
	redisFree(c);
	cr_assert_eq(once, Q_TOTAL, "%lld of %d items consumed exactly once", once, Q_TOTAL);
	cr_assert_eq(dmt_count_keys(&srv, "queue:got:*"), Q_TOTAL, "an item that was never produced was consumed");
	cr_assert_eq(get_int("queue:taken"), Q_TOTAL);
	cr_assert_eq(get_int("queue:count"), 0);
	cr_assert_eq(run(path, NULL, (char *[]){ "queue", "check", "-p", port, "-N", total, NULL }, 10000), 0);
	/* One mutex and two condition variables, all static. */
	cr_assert_eq(names_count(names), 1);
	cr_assert_eq(dmt_count_keys(&srv, "dmutex:cond:*"), 0, "no waiter left registered");
	cr_assert_eq(dmt_count_keys(&srv, "dmutex:csig:*"), 0, "no wake-up left unacknowledged");
}

/* ------------------------------------------------------------------ */
/* names                                                               */
/* ------------------------------------------------------------------ */

/* The line of test_shim_prog.c that carries "NAME:tag". */
static int marked_line(const char *tag)
{
	char want[64], line[512];
	FILE *f = fopen(env_path("SHIM_PROG_SRC"), "r");
	int n = 0, found = 0;

	cr_assert(f, "cannot read SHIM_PROG_SRC");
	snprintf(want, sizeof want, "/* NAME:%s */", tag);
	while (fgets(line, sizeof line, f)) {
		n++;
		if (strstr(line, want)) {
			found = n;
			break;
		}
	}
	fclose(f);
	cr_assert(found, "no %s marker", want);
	return found;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* n names, sorted, joined by spaces into out; frees them. */
static void sort_join(char **names, size_t n, char *out, size_t len)
{
	size_t off = 0;

	qsort(names, n, sizeof *names, by_name);
	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		off += (size_t)snprintf(out + off, len - off, "%s%s", i ? " " : "", names[i]);
		free(names[i]);
	}
}

/* The names of the locks held in Redis, sorted, joined by spaces. */
static void held_names(char *out, size_t len)
{
	redisReply *r = th_redis_cmd(&srv, "KEYS dmutex:lock:*");
	char *names[16];
	size_t n = 0;

	cr_assert(r && r->type == REDIS_REPLY_ARRAY && r->elements <= 16);
	for (size_t i = 0; i < r->elements; i++) {
		/* dmutex:lock:{NAME} */
		names[n] = strdup(r->element[i]->str + strlen("dmutex:lock:{"));
		names[n][strlen(names[n]) - 1] = '\0';
		n++;
	}
	freeReplyObject(r);
	sort_join(names, n, out, len);
}

/* The expected names, sorted the same way. */
static void expected_names(char *out, size_t len, const char *ns, int gate, int array,
		const int *ordinals, size_t nord)
{
	char *names[16], buf[256];
	size_t n = 0;

	names[n++] = strdup("shim-test-named");
	snprintf(buf, sizeof buf, "%s/test_shim_prog.c:%d", ns, gate);
	names[n++] = strdup(buf);
	for (size_t i = 0; i < nord; i++) {
		if (ordinals[i])
			snprintf(buf, sizeof buf, "%s/test_shim_prog.c:%d#%d", ns, array, ordinals[i]);
		else
			snprintf(buf, sizeof buf, "%s/test_shim_prog.c:%d", ns, array);
		names[n++] = strdup(buf);
	}
	sort_join(names, n, out, len);
}

/* examples/pool: a thread pool per process (its queue's locks local, by
 * DMUTEX_SHIM_LOCAL_FILE in pool_queue.c) and one ledger in Redis whose
 * mutex is distributed: the ledger is exact across 3 processes, and only
 * the ledger's lock ever reached Redis. */
Test(shim, pool_local_queue_shared_ledger_across_3_processes)
{
	const char *path = env_path("POOL_SHIM");
	redisContext *names = names_watch("dmutex:lock:{pool-shim/pool.c:*}");
	char port[16];
	struct proc p[3];

	snprintf(port, sizeof port, "%d", srv.port);
	for (int i = 0; i < 3; i++)
		start(&p[i], path, NULL, (char *[]){ "pool", "-p", port, "-t", "3", "-n", "40", NULL });
	for (int i = 0; i < 3; i++) {
		char out[4096];
		read_all(&p[i], out, sizeof out, 60000);
		cr_assert_eq(finish(&p[i], 60000), 0, "pool %d failed: %s", i, out);
	}
	cr_assert_eq(get_int("pool:ledger"), 120);
	cr_assert_eq(names_count(names), 1);
	cr_assert_eq(dmt_count_keys(&srv, "dmutex:*pool_queue.c*"), 0, "the queue's locks reached Redis");
}

Test(shim, one_binary_agrees_on_every_name)
{
	const char *prog = env_path("SHIM_PROG");
	int gate = marked_line("gate"), array = marked_line("array");
	char want[1024], got[1024], out[256];

	/* One process holds the static mutex, the named one and array[1],
	 * array[3] (initialized in a loop: ordinals 1 and 3). */
	start(&procs[0], prog, NULL, (char *[]){ "test_shim_prog", "hold", "1", "3", NULL });
	expect_output(&procs[0], "held", 10000);
	expected_names(want, sizeof want, "test_shim_prog", gate, array, (int[]){ 1, 3 }, 2);
	held_names(got, sizeof got);
	cr_assert_str_eq(got, want);

	/* Another process of the same binary sees exactly those busy. */
	start(&procs[1], prog, NULL, (char *[]){ "test_shim_prog", "probe", NULL });
	read_all(&procs[1], out, sizeof out, 10000);
	cr_assert_eq(finish(&procs[1], 10000), 0);
	cr_assert_str_eq(out, "gate=1 named=1 array=0101\n");

	/* Another namespace, or another program built from the same source
	 * (even run with the first one's argv[0]: the executable names it),
	 * shares only the explicitly named mutex. */
	start(&procs[1], prog, "elsewhere", (char *[]){ "test_shim_prog", "probe", NULL });
	read_all(&procs[1], out, sizeof out, 10000);
	cr_assert_eq(finish(&procs[1], 10000), 0);
	cr_assert_str_eq(out, "gate=0 named=1 array=0000\n");
	start(&procs[1], env_path("SHIM_PROG2"), NULL, (char *[]){ "test_shim_prog", "probe", NULL });
	read_all(&procs[1], out, sizeof out, 10000);
	cr_assert_eq(finish(&procs[1], 10000), 0);
	cr_assert_str_eq(out, "gate=0 named=1 array=0000\n");

	/* The holder lets go: all free for everyone. */
	cr_assert_eq(finish(&procs[0], 10000), 0);
	start(&procs[1], prog, NULL, (char *[]){ "test_shim_prog", "probe", NULL });
	read_all(&procs[1], out, sizeof out, 10000);
	cr_assert_eq(finish(&procs[1], 10000), 0);
	cr_assert_str_eq(out, "gate=0 named=0 array=0000\n");
}

Test(shim, namespace_from_the_environment)
{
	const char *prog = env_path("SHIM_PROG");
	int gate = marked_line("gate"), array = marked_line("array");
	char want[1024], got[1024];

	start(&procs[0], prog, "team-a", (char *[]){ "test_shim_prog", "hold", "0", NULL });
	expect_output(&procs[0], "held", 10000);
	expected_names(want, sizeof want, "team-a", gate, array, (int[]){ 0 }, 1);
	held_names(got, sizeof got);
	cr_assert_str_eq(got, want);
	cr_assert_eq(finish(&procs[0], 10000), 0);
}

Test(shim, every_mapped_call_behaves_like_pthread)
{
	cr_assert_eq(run(env_path("SHIM_PROG"), NULL, (char *[]){ "test_shim_prog", "api", NULL }, 30000), 0);
}

/* Through the shim a lock does not fail because the backend is away (the
 * program would run unprotected): it waits for it. */
Test(shim, lock_waits_for_the_backend)
{
	char url[700];

	th_url_with(url, sizeof url, srv.url, "command_timeout_ms=100&connect_timeout_ms=100");
	cr_assert_eq(th_redis_pause(&srv), 0);
	setenv("DMUTEX_URL_OVERRIDE", url, 1);
	start(&procs[0], env_path("SHIM_PROG"), NULL, (char *[]){ "test_shim_prog", "hold", "2", NULL });
	/* The passage of time is what is tested: for a second (ten command
	 * timeouts) the program neither proceeds nor gives up. */
	dmt_pass_time_ms(1000);
	cr_assert_eq(th_proc_state(procs[0].pid) != -1 && th_proc_state(procs[0].pid) != 'Z', 1,
			"the program ended while the backend was away");
	cr_assert_eq(th_redis_resume(&srv), 0);
	expect_output(&procs[0], "held", 15000);
	cr_assert_eq(finish(&procs[0], 10000), 0);
}

/* Two static initializers on one line cannot be told apart: they are one
 * lock, and the shim says so. */
Test(shim, two_initializers_on_one_line_are_one_lock_and_a_warning)
{
	struct proc p;
	char out[2048];

	merge_stderr = 1;
	start(&p, env_path("SHIM_PROG"), NULL, (char *[]){ "test_shim_prog", "twins", NULL });
	read_all(&p, out, sizeof out, 10000);
	cr_assert_eq(finish(&p, 10000), 0);
	cr_assert(strstr(out, "twin_a=0 twin_b=EDEADLK\n"), "got: %s", out);
	cr_assert(strstr(out, "shim: two mutexes statically initialized at "), "no warning in: %s", out);
	cr_assert(strstr(out, "test_shim_prog.c:"), "the warning names no site: %s", out);
}

/* Issue 29: at DMUTEX_LOG=info the shim says once per process that it is
 * in effect, naming the backend, and logs one line per object, however
 * many threads race to its first use (four threads each binding one static
 * mutex logged 3-4 identical lines). */
Test(shim, one_in_effect_line_and_one_line_per_object_per_process)
{
	const char *effect_line = "shim: in effect in process ";
	char out[16384], want[128];
	int raced = marked_line("raced");

	setenv("DMUTEX_LOG", "info", 1);
	merge_stderr = 1;
	snprintf(want, sizeof want, "shim: mutex 'test_shim_prog/test_shim_prog.c:%d' ", raced);
	for (int run = 0; run < 5; run++) {
		struct proc p;
		const char *at;
		int n = 0, effect = 0;

		start(&p, env_path("SHIM_PROG"), NULL, (char *[]){ "test_shim_prog", "race", NULL });
		read_all(&p, out, sizeof out, 20000);
		cr_assert_eq(finish(&p, 10000), 0, "%s", out);
		for (at = out; (at = strstr(at, want)); at++)
			n++;
		for (at = out; (at = strstr(at, effect_line)); at++)
			effect++;
		cr_assert_eq(n, 1, "run %d: %d lines for the raced mutex: %s", run, n, out);
		cr_assert_eq(effect, 1, "run %d: %d in-effect lines: %s", run, effect, out);
		cr_assert(strstr(out, srv.url), "the in-effect line does not name %s: %s", srv.url, out);
	}
}
