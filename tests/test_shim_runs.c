/*
 * A program through the shim run more than once (issue 29): what one run
 * leaves in the backend must not change the next.  Each run is this
 * program exec'd in a mode, against one real redis-server, talking to the
 * driver through its stdin and stdout (shim_driver.h):
 *
 *   count    sem_init(0) of an unnamed semaphore, its value printed, two
 *            posts, then the driver says how to end: "exit" (no
 *            sem_destroy), "destroy" (then exit), or it is killed.  The
 *            next run prints 0 every time: the count is not the last
 *            run's, whether that ended by exit, destroy, or died (then
 *            once its lease has run out: a short one here).
 *   three    three processes start together over a count a killed run
 *            left, each sem_init(0) and one post; once all three have
 *            posted, each reads the value: exactly 3 (no process reset a
 *            count another had posted to, and the old count is gone).
 *   fork     a run posts twice, forks and exits while its child still
 *            uses the semaphore: the child's post makes 3 (the count is
 *            kept for it), and once the child has exited too, the next
 *            run starts from 0.
 *   robust   a robust mutex made not recoverable (its locker's thread
 *            returns holding it; the main thread gets EOWNERDEAD and
 *            unlocks without pthread_mutex_consistent), destroyed and
 *            initialized again at the same line: a fresh mutex, each
 *            round (musl's pthread_robust); the last round's is left not
 *            recoverable at exit, and the next run's is fresh again.
 *   cancel, stopped, grandchild, given, reinit, forkwait: the review of
 *            issue 29 (users29), each at its run_ and case_ functions.
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "shim_driver.h"

#define LINE_MS 30000

static char self[4096];

static int
say(struct proc *p, const char *what)
{
	size_t n = strlen(what);

	return write(p->in, what, n) == (ssize_t)n ? 0 : -1;
}

static int
end(struct proc *p, int kill_it)
{
	int st;

	if (kill_it)
		kill(p->pid, SIGKILL);
	close(p->in);
	st = th_wait_child(p->pid, LINE_MS);
	close(p->out);
	return st;
}

/* ---- the runs (children) ---- */

static sem_t cnt;

/* The semaphore is named from the line of its sem_init (shim/name.c):
 * one line, so that the driver knows it. */
static const int count_line = __LINE__; static int count_init(void) { return sem_init(&cnt, 0, 0); }

static int
run_count(int posts, int check)
{
	char cmd[32] = "";
	int v = -1;

	if (count_init() || sem_getvalue(&cnt, &v))
		return 1;
	if (!check)
		printf("value %d\n", v);
	for (int i = 0; i < posts; i++)
		if (sem_post(&cnt))
			return 1;
	printf("posted\n");
	fflush(stdout);
	while (fgets(cmd, sizeof cmd, stdin)) {
		if (!strcmp(cmd, "check\n")) {
			if (sem_getvalue(&cnt, &v))
				return 1;
			printf("value %d\n", v);
			fflush(stdout);
		} else if (!strcmp(cmd, "destroy\n")) {
			return sem_destroy(&cnt) ? 1 : 0;
		} else {
			break;
		}
	}
	return 0;
}

/* A descendant's last steps: post once, print the value, wait for "exit"
 * on stdin, exit (_exit(1) if the semaphore failed). */
_Noreturn static void
post_print_wait(void)
{
	char cmd[32];
	int v = -1;

	if (sem_post(&cnt) || sem_getvalue(&cnt, &v))
		_exit(1);
	printf("value %d\n", v);
	fflush(stdout);
	while (fgets(cmd, sizeof cmd, stdin) && strcmp(cmd, "exit\n"))
		;
	exit(0);
}

/* The run initializes and posts twice, forks, and exits at once; its
 * child waits until the run is gone (the pipe's write end closes), posts
 * once and prints the value: 3, the run's count kept for the child that
 * uses it; then waits for "exit". */
static int
run_forkexit(void)
{
	char c;
	int fd[2];
	pid_t pid;

	if (pipe(fd) || count_init() || sem_post(&cnt) || sem_post(&cnt) || (pid = fork()) < 0)
		return 1;
	if (pid > 0)
		exit(0);
	close(fd[1]);
	while (read(fd[0], &c, 1) > 0)
		;
	post_print_wait();
}

/* The run initializes and posts twice, forks and exits; its child C
 * forks G before its own first semaphore call, then posts once and exits
 * (leaving last, as far as it knows); G posts once after C is gone and
 * prints the value: 4, the count kept for G; then waits for "exit". */
static int
run_grandchild(void)
{
	char c;
	int pc[2], cg[2];
	pid_t pid;

	if (pipe(pc) || count_init() || sem_post(&cnt) || sem_post(&cnt) || (pid = fork()) < 0)
		return 1;
	if (pid > 0)
		exit(0);
	close(pc[1]);
	while (read(pc[0], &c, 1) > 0)  /* until the run is gone */
		;
	if (pipe(cg) || (pid = fork()) < 0)
		_exit(1);
	if (pid > 0) {
		close(cg[0]);
		exit(sem_post(&cnt) ? 1 : 0);
	}
	close(cg[1]);
	while (read(cg[0], &c, 1) > 0)  /* until C is gone */
		;
	post_print_wait();
}

/* Initialized, posted, initialized again without sem_destroy, posted,
 * destroyed once; then waits for "exit". */
static int
run_reinit(void)
{
	char cmd[32];

	if (count_init() || sem_post(&cnt) || count_init() || sem_post(&cnt) || sem_destroy(&cnt))
		return 1;
	printf("destroyed\n");
	fflush(stdout);
	while (fgets(cmd, sizeof cmd, stdin) && strcmp(cmd, "exit\n"))
		;
	return 0;
}

/* The run initializes, forks a child that posts and exits, and exits
 * with the child's status: under valgrind (meson test --setup valgrind)
 * a leak in the child (the parent helper's records) fails the run. */
static int
run_forkwait(void)
{
	int st;
	pid_t pid;

	if (count_init() || sem_post(&cnt) || (pid = fork()) < 0)
		return 1;
	if (pid == 0)
		exit(sem_post(&cnt) ? 1 : 0);
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return 1;
	return WEXITSTATUS(st) || sem_destroy(&cnt) ? 2 : 0;
}

static pthread_mutex_t rm;

static void *
rm_locker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&rm);
	return NULL;    /* holding it */
}

/* One round: "init died unlocked notrec destroy" as results. */
static int
rm_round(int destroy)
{
	pthread_mutexattr_t a;
	pthread_t t;
	int r[4];

	pthread_mutexattr_init(&a);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	r[0] = pthread_mutex_init(&rm, &a);
	pthread_mutexattr_destroy(&a);
	if (pthread_create(&t, NULL, rm_locker, NULL) || pthread_join(t, NULL))
		return 1;
	r[1] = pthread_mutex_lock(&rm);
	r[2] = pthread_mutex_unlock(&rm);       /* not consistent: not recoverable */
	r[3] = pthread_mutex_lock(&rm);
	printf("%d %d %d %d %d\n", r[0], r[1], r[2], r[3], destroy ? pthread_mutex_destroy(&rm) : -1);
	fflush(stdout);
	return 0;
}

/* A robust mutex named by the program: "init lock" as results. */
#define GIVEN "shimruns-given"

static int
run_given(void)
{
	pthread_mutexattr_t a;
	pthread_mutex_t m;
	int r0, r1;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutexattr_setname_np(&a, GIVEN);
	r0 = pthread_mutex_init(&m, &a);
	pthread_mutexattr_destroy(&a);
	r1 = pthread_mutex_lock(&m);
	printf("%d %d\n", r0, r1);
	fflush(stdout);
	if (!r1)
		pthread_mutex_unlock(&m);
	return pthread_mutex_destroy(&m) ? 1 : 0;
}

static int
run_robust(void)
{
	for (int i = 0; i < 3; i++)
		if (rm_round(i < 2))
			return 1;
	return 0;
}

/* A thread with a cancellation pending calls sem_init, sem_destroy and a
 * robust mutex's init and destroy, none a cancellation point: each
 * returns (their results printed), and the thread is cancelled at its
 * own pthread_testcancel.  Then the main thread initializes a semaphore
 * and the process exits: neither waits on what the thread left. */
static sem_t cs;
static int cr[4] = { -1, -1, -1, -1 };   /* what each call returned */

static void *
cancelled_caller(void *arg)
{
	pthread_mutexattr_t a;
	pthread_mutex_t m;

	(void)arg;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_cancel(pthread_self());
	cr[0] = sem_init(&cs, 0, 0);
	cr[1] = sem_destroy(&cs);
	cr[2] = pthread_mutex_init(&m, &a);
	cr[3] = pthread_mutex_destroy(&m);
	pthread_testcancel();
	return NULL;
}

static int
run_cancel(void)
{
	pthread_t t;
	void *res = NULL;

	if (pthread_create(&t, NULL, cancelled_caller, NULL) || pthread_join(t, &res))
		return 1;
	printf("%d %d %d %d\n", cr[0], cr[1], cr[2], cr[3]);
	printf("%s\n", res == PTHREAD_CANCELED ? "cancelled" : "returned");
	fflush(stdout);
	printf("init %d\n", count_init());
	fflush(stdout);
	exit(0);
}

/* ---- the driver ---- */

static int
expect_line(struct proc *p, const char *want, const char *what)
{
	char buf[128];

	if (line(p, buf, sizeof buf, LINE_MS)) {
		fprintf(stderr, "%s: no line (want '%s')\n", what, want);
		return 1;
	}
	if (strcmp(buf, want)) {
		fprintf(stderr, "%s: '%s', want '%s'\n", what, buf, want);
		return 1;
	}
	return 0;
}

/* A run that posts twice and ends as `how` says; its first line. */
static int
count_run(const char *how, const char *want, const char *what)
{
	struct proc p;
	int bad;

	if (start(&p, self, "count"))
		return 1;
	bad = expect_line(&p, want, what) || expect_line(&p, "posted", what);
	if (!strcmp(how, "kill")) {
		end(&p, 1);
		return bad;
	}
	bad |= say(&p, !strcmp(how, "destroy") ? "destroy\n" : "exit\n") != 0;
	bad |= end(&p, 0) != 0;
	return bad;
}

static void
case_count(void)
{
	EXPECT(!count_run("exit", "value 0", "first run"));
	EXPECT(!count_run("exit", "value 0", "after a run that exited"));
	EXPECT(!count_run("destroy", "value 0", "again"));
	EXPECT(!count_run("kill", "value 0", "after a run that destroyed it"));
}

/* After a run that was killed: its share lasts as long as its lease
 * (lease_ms in DMUTEX_URL); the runs until then join its count, the first
 * after it starts afresh. */
static void
case_killed(void)
{
	long long until = th_now_ms() + 15000;
	int fresh = 0;

	EXPECT(!count_run("kill", "value 0", "first run"));
	while (!fresh && th_now_ms() < until) {
		struct proc p;
		char buf[64];

		if (start(&p, self, "count"))
			break;
		if (!line(&p, buf, sizeof buf, LINE_MS))
			fresh = !strcmp(buf, "value 0");
		say(&p, "exit\n");
		end(&p, 0);
	}
	EXPECT(fresh);
}

/* Until no process holds a share of the semaphore's users lock
 * (shim/users.c): "NAMESPACE/FILE:LINE users". */
static int
users_gone(void)
{
	char name[128];
	long long until = th_now_ms() + 15000;
	drwlock_t u;
	int err = EBUSY;

	snprintf(name, sizeof name, "shimruns/test_shim_runs.c:%d users", count_line);
	if (drwlock_init(&u, name, NULL))
		return -1;
	while ((err = drwlock_trywrlock(&u)) == EBUSY && th_now_ms() < until)
		usleep(20 * 1000);
	if (!err)
		drwlock_unlock(&u);
	drwlock_destroy(&u);
	return err;
}

/* Until some process holds a share again: 0, or EBUSY past the deadline. */
static int
users_back(void)
{
	char name[128];
	long long until = th_now_ms() + 15000;
	drwlock_t u;
	int err = 0;

	snprintf(name, sizeof name, "shimruns/test_shim_runs.c:%d users", count_line);
	if (drwlock_init(&u, name, NULL))
		return -1;
	while (!(err = drwlock_trywrlock(&u)) && th_now_ms() < until) {
		drwlock_unlock(&u);
		usleep(20 * 1000);
	}
	if (!err)
		drwlock_unlock(&u);
	drwlock_destroy(&u);
	return err == EBUSY ? 0 : EBUSY;
}

/* A run stopped for longer than its lease loses its share; once it runs
 * again it takes the share again (no reset), so that a run started after
 * that joins its count instead of starting afresh under it. */
static void
case_stopped(void)
{
	struct proc a, b;
	int bad;

	if (start(&a, self, "count")) {
		EXPECT(!"start");
		return;
	}
	bad = expect_line(&a, "value 0", "first run") || expect_line(&a, "posted", "first run");
	kill(a.pid, SIGSTOP);
	EXPECT(!users_gone());          /* its lease ran out */
	kill(a.pid, SIGCONT);
	EXPECT(!users_back());
	if (start(&b, self, "count")) {
		EXPECT(!"start");
		end(&a, 1);
		return;
	}
	bad |= expect_line(&b, "value 2", "a run after the first one took its share again");
	bad |= expect_line(&b, "posted", "that run");
	bad |= say(&a, "check\n") != 0;
	bad |= expect_line(&a, "value 4", "the first run, once the second has posted");
	EXPECT(!bad);
	say(&a, "exit\n");
	say(&b, "exit\n");
	EXPECT(end(&a, 0) == 0);
	EXPECT(end(&b, 0) == 0);
}

static void
case_three(void)
{
	struct proc p[3];
	int bad = 0;

	/* A count left by a run that died, once its share has run out. */
	EXPECT(!count_run("kill", "value 0", "the run before"));
	EXPECT(!users_gone());
	for (int round = 0; round < 3 && !bad; round++) {
		for (int i = 0; i < 3; i++)
			bad |= start(&p[i], self, "three") != 0;
		if (bad)
			break;
		for (int i = 0; i < 3; i++)
			bad |= expect_line(&p[i], "posted", "three");
		for (int i = 0; i < 3; i++)
			bad |= say(&p[i], "check\n") != 0;
		for (int i = 0; i < 3; i++)
			bad |= expect_line(&p[i], "value 3", "three, once all have posted");
		for (int i = 0; i < 3; i++) {
			say(&p[i], "exit\n");
			bad |= end(&p[i], 0) != 0;
		}
	}
	EXPECT(!bad);
}

/* Run MODE, whose process forks and exits while its descendant still
 * uses the semaphore and prints WANT; then end that descendant and wait
 * for it to exit (its end of the pipe closes): 1 if all went so. */
static int
descendant_run(const char *mode, const char *want, const char *what)
{
	struct proc p;
	char buf[64];
	int ok;

	if (start(&p, self, mode))
		return 0;
	ok = !expect_line(&p, want, what);
	ok &= th_wait_child(p.pid, LINE_MS) == 0;
	say(&p, "exit\n");
	close(p.in);
	ok &= line(&p, buf, sizeof buf, LINE_MS) != 0;
	close(p.out);
	return ok;
}

/* A run that forks and exits while its child still uses the semaphore:
 * the child keeps the count; once it has exited too, the next run starts
 * afresh. */
static void
case_fork(void)
{
	EXPECT(descendant_run("forkexit", "value 3", "the child of a run that exited"));
	EXPECT(!count_run("exit", "value 0", "after the child exited"));
}

/* A child that forks before its first semaphore call, then leaves last
 * as far as it knows: the count is kept for its own child. */
static void
case_grandchild(void)
{
	EXPECT(descendant_run("grandchild", "value 4", "the grandchild of a run that exited"));
	EXPECT(!users_gone());
	EXPECT(!count_run("exit", "value 0", "after the grandchild exited"));
}

static void *
given_locker(void *arg)
{
	dmutex_lock(arg);
	return NULL;    /* holding it */
}

/* A robust mutex whose name the program gives is any process's, the shim's
 * or not: its state stays what they leave it, never reset because no shim
 * process uses it.  Made not recoverable here through the library, then a
 * shim run's lock of it is ENOTRECOVERABLE, twice. */
static void
case_given(void)
{
	dmutex_attr_t a;
	dmutex_t m;
	pthread_t t;

	dmutex_attr_init(&a);
	dmutex_attr_setrobust(&a, DMUTEX_ROBUST);
	EXPECT(!dmutex_init(&m, GIVEN, &a));
	dmutex_attr_destroy(&a);
	EXPECT(!pthread_create(&t, NULL, given_locker, &m) && !pthread_join(t, NULL));
	EXPECT(dmutex_lock(&m) == EOWNERDEAD);
	EXPECT(!dmutex_unlock(&m));     /* not consistent: not recoverable */
	EXPECT(dmutex_lock(&m) == ENOTRECOVERABLE);
	EXPECT(!dmutex_destroy(&m));
	for (int run = 0; run < 2; run++) {
		struct proc p;
		int bad = start(&p, self, "given");

		bad = bad || expect_line(&p, "0 131", run ? "second run" : "first run");
		EXPECT(!bad);
		EXPECT(end(&p, 0) == 0);
	}
}

/* A semaphore initialized twice and destroyed once: the process has left
 * its users while it still runs, and the count is gone. */
static void
case_reinit(void)
{
	struct proc p;

	if (start(&p, self, "reinit")) {
		EXPECT(!"start");
		return;
	}
	EXPECT(!expect_line(&p, "destroyed", "initialized twice, destroyed once"));
	EXPECT(!users_gone());
	say(&p, "exit\n");
	EXPECT(end(&p, 0) == 0);
	EXPECT(!count_run("exit", "value 0", "after it"));
}

static void
case_forkwait(void)
{
	struct proc p;

	if (start(&p, self, "forkwait")) {
		EXPECT(!"start");
		return;
	}
	EXPECT(end(&p, 0) == 0);
}

static void
case_robust(void)
{
	static const char *want[] = {
		"0 130 0 131 0", "0 130 0 131 0", "0 130 0 131 -1",
	};

	for (int run = 0; run < 2; run++) {
		struct proc p;
		int bad = start(&p, self, "robust");

		for (int i = 0; i < 3 && !bad; i++)
			bad = expect_line(&p, want[i], run ? "second run" : "first run");
		EXPECT(!bad);
		EXPECT(end(&p, 0) == 0);
	}
}

static void
case_cancel(void)
{
	struct proc p;
	int bad;

	if (start(&p, self, "cancel")) {
		EXPECT(!"start");
		return;
	}
	bad = expect_line(&p, "0 0 0 0", "the calls of a thread with a cancellation pending");
	bad |= expect_line(&p, "cancelled", "that thread, at its own cancellation point");
	bad |= expect_line(&p, "init 0", "a sem_init after it");
	EXPECT(!bad);
	/* exit waits at most 3 s for the shares (README). */
	close(p.in);
	EXPECT(th_wait_child(p.pid, 10000) == 0);
	close(p.out);
}

int
main(int argc, char **argv)
{
	static struct th_redis srv;

	if (argc > 1 && !strcmp(argv[1], "count"))
		return run_count(2, 0);
	if (argc > 1 && !strcmp(argv[1], "three"))
		return run_count(1, 1);
	if (argc > 1 && !strcmp(argv[1], "robust"))
		return run_robust();
	if (argc > 1 && !strcmp(argv[1], "forkexit"))
		return run_forkexit();
	if (argc > 1 && !strcmp(argv[1], "cancel"))
		return run_cancel();
	if (argc > 1 && !strcmp(argv[1], "grandchild"))
		return run_grandchild();
	if (argc > 1 && !strcmp(argv[1], "given"))
		return run_given();
	if (argc > 1 && !strcmp(argv[1], "reinit"))
		return run_reinit();
	if (argc > 1 && !strcmp(argv[1], "forkwait"))
		return run_forkwait();
	/* A short lease: a killed run's share runs out soon. */
	if (th_self_driver(&srv, self, sizeof self, "shimruns", "lease_ms=1000"))
		return 1;
	if (argc > 1 && !strcmp(argv[1], "count-case"))
		case_count();
	else if (argc > 1 && !strcmp(argv[1], "killed-case"))
		case_killed();
	else if (argc > 1 && !strcmp(argv[1], "three-case"))
		case_three();
	else if (argc > 1 && !strcmp(argv[1], "robust-case"))
		case_robust();
	else if (argc > 1 && !strcmp(argv[1], "fork-case"))
		case_fork();
	else if (argc > 1 && !strcmp(argv[1], "cancel-case"))
		case_cancel();
	else if (argc > 1 && !strcmp(argv[1], "stopped-case"))
		case_stopped();
	else if (argc > 1 && !strcmp(argv[1], "grandchild-case"))
		case_grandchild();
	else if (argc > 1 && !strcmp(argv[1], "given-case"))
		case_given();
	else if (argc > 1 && !strcmp(argv[1], "reinit-case"))
		case_reinit();
	else if (argc > 1 && !strcmp(argv[1], "forkwait-case"))
		case_forkwait();
	else
		EXPECT(!"usage: test_shim_runs count-case|killed-case|three-case|robust-case|fork-case|cancel-case|stopped-case|grandchild-case|given-case|reinit-case|forkwait-case");
	th_redis_stop(&srv);
	return th_check_status();
}
