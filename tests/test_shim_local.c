/*
 * Issue 12 item 8 through the pthread shim: objects that stay local.
 *
 * Run with DMUTEX_SHIM_LOCAL=" shim_local_env.c:* , cache-* ": the static
 * objects of shim_local_env.c (matched by FILE:LINE, base name) and the
 * mutex named "cache-lock" (matched by name) are plain pthread objects of
 * each process, as is everything in shim_local_file.c (compiled with
 * -DDMUTEX_SHIM_LOCAL_FILE); `dist` stays distributed.  Checked across
 * exec'd processes: a local mutex held by one is free in another, the
 * distributed one busy.  Also: DMUTEX_LOG=info says which is which once
 * per object; a local condition variable waits with a local mutex, and
 * with a distributed one is EINVAL; pthread_mutex_destroy of a held
 * distributed mutex is EBUSY, releases the lock at once for the other
 * processes (with a warning naming the site) and a pthread_mutex_init
 * makes it anew, unlocked.
 *
 * Its own driver, as test_shim_zero: modes hold, probe, misc, dyn-destroy,
 * dyn-probe.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "harness.h"
#include "shim_driver.h"
#include "shim_local.h"

static pthread_mutex_t dist = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cache;
static pthread_mutex_t dyn;

static int
init_cache(void)
{
	pthread_mutexattr_t a;
	int err;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_setname_np(&a, "cache-lock");
	err = pthread_mutex_init(&cache, &a);
	pthread_mutexattr_destroy(&a);
	return err;
}

static int
init_dyn(void)
{
	return pthread_mutex_init(&dyn, NULL); /* the site named in the destroy warning */
}

static int
wait_stdin(void)
{
	char c;

	while (read(0, &c, 1) > 0)
		if (c == '\n')
			return 0;
	return -1;
}

static int
hold(void)
{
	if (init_cache() || file_init())
		return 2;
	if (pthread_mutex_lock(&dist) || pthread_mutex_lock(env_mutex()) || pthread_mutex_lock(&cache) ||
			pthread_mutex_lock(file_mutex()) || pthread_mutex_lock(file_dyn()))
		return 3;
	printf("held\n");
	fflush(stdout);
	wait_stdin();
	return 0;
}

static int
probe(void)
{
	int d, e, c, f, fd;

	if (init_cache() || file_init())
		return 2;
	d = pthread_mutex_trylock(&dist);
	e = pthread_mutex_trylock(env_mutex());
	c = pthread_mutex_trylock(&cache);
	f = pthread_mutex_trylock(file_mutex());
	fd = pthread_mutex_trylock(file_dyn());
	printf("dist=%d env=%d cache=%d file=%d filedyn=%d\n", d, e, c, f, fd);
	return 0;
}

static int n_local, n_dist, n_destroy_warn;
static char logged[8192];

static void
logger(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	if (strlen(logged) + strlen(msg) + 2 < sizeof logged) {
		strcat(logged, msg);
		strcat(logged, "\n");
	}
	if (strstr(msg, ": local to this process"))
		n_local++;
	if (strstr(msg, ": distributed"))
		n_dist++;
	if (strstr(msg, "is locked: EBUSY") && strstr(msg, "test_shim_local.c:"))
		n_destroy_warn++;
}

#define CHECK(n, cond) do { if (!(cond)) { fprintf(stderr, "check %d failed: %s\n%s", n, #cond, logged); return n; } } while (0)

static int
misc(void)
{
	struct timespec past = { 0, 0 };

	dmutex_set_logger(logger, NULL);
	CHECK(1, init_cache() == 0 && file_init() == 0);
	/* first uses: one info line each */
	CHECK(2, pthread_mutex_lock(&dist) == 0);
	CHECK(3, pthread_mutex_lock(env_mutex()) == 0);
	CHECK(4, pthread_cond_timedwait(env_cond(), env_mutex(), &past) == ETIMEDOUT);
	CHECK(5, pthread_cond_timedwait(env_cond(), &dist, &past) == EINVAL);
	CHECK(6, pthread_mutex_unlock(env_mutex()) == 0);
	CHECK(7, pthread_mutex_lock(file_dyn()) == 0);
	CHECK(8, pthread_cond_timedwait(file_cond(), file_dyn(), &past) == ETIMEDOUT);
	CHECK(9, pthread_mutex_unlock(file_dyn()) == 0);
	CHECK(10, pthread_mutex_lock(file_mutex()) == 0 && pthread_mutex_unlock(file_mutex()) == 0);
	CHECK(11, pthread_mutex_unlock(&dist) == 0);
	/* local: cache-lock, env mutex, env cond, file mutex, file dyn, file cond;
	 * distributed: dist */
	CHECK(12, n_local == 6);
	CHECK(13, n_dist == 1);
	CHECK(14, strstr(logged, "'cache-lock'") && strstr(logged, "shim_local_env.c:"));
	/* a second use says nothing more */
	CHECK(15, pthread_mutex_lock(&dist) == 0 && pthread_mutex_unlock(&dist) == 0);
	CHECK(16, n_local == 6 && n_dist == 1);
	/* a held local mutex: EBUSY as glibc, still usable */
	CHECK(17, pthread_mutex_lock(&cache) == 0);
	CHECK(18, pthread_mutex_destroy(&cache) == EBUSY);
	CHECK(19, pthread_mutex_unlock(&cache) == 0);
	CHECK(20, pthread_mutex_destroy(&cache) == 0);
	CHECK(21, pthread_mutex_lock(&cache) == EINVAL);
	CHECK(22, pthread_mutex_destroy(file_dyn()) == 0);
	return 0;
}

/* Hold a distributed mutex and destroy it: EBUSY, released at once. */
static int
dyn_destroy(void)
{
	dmutex_set_logger(logger, NULL);
	if (init_dyn() || pthread_mutex_lock(&dyn))
		return 2;
	if (pthread_mutex_destroy(&dyn) != EBUSY)
		return 3;
	if (n_destroy_warn != 1)
		return 4;
	printf("destroyed\n");
	fflush(stdout);
	if (wait_stdin())
		return 5;
	/* made anew: unlocked */
	if (init_dyn() || pthread_mutex_trylock(&dyn) || pthread_mutex_unlock(&dyn) || pthread_mutex_destroy(&dyn))
		return 6;
	return 0;
}

static int
dyn_probe(void)
{
	int rc;

	if (init_dyn())
		return 2;
	rc = pthread_mutex_trylock(&dyn);
	printf("dyn=%d\n", rc);
	if (!rc)
		pthread_mutex_unlock(&dyn);
	return 0;
}

/* ---- the driver ---- */

/* Run mode to completion; its first line in out; its exit status. */
static int
run(const char *self, const char *mode, char *out, size_t len)
{
	struct proc p;
	int st;

	if (start(&p, self, mode))
		return -1;
	close(p.in);
	line(&p, out, len, 30000);
	close(p.out);
	st = th_wait_child(p.pid, 30000);
	if (st)
		fprintf(stderr, "%s: exit %d\n", mode, st);
	return st;
}

int
main(int argc, char **argv)
{
	struct th_redis srv;
	struct proc a;
	char buf[256], self[4096];

	if (argc > 1) {
		if (!strcmp(argv[1], "hold"))
			return hold();
		if (!strcmp(argv[1], "probe"))
			return probe();
		if (!strcmp(argv[1], "dyn-destroy"))
			return dyn_destroy();
		if (!strcmp(argv[1], "dyn-probe"))
			return dyn_probe();
		return misc();
	}
	if (th_self_driver(&srv, self, sizeof self, "shimlocal", NULL))
		return 1;
	signal(SIGPIPE, SIG_IGN);       /* a child gone early fails a check, not the driver */
	setenv("DMUTEX_SHIM_LOCAL", " nothing-here , shim_local_env.c:* ,, cache-* ", 1);
	setenv("DMUTEX_LOG", "info", 1);

	/* one holds everything; another finds only the distributed one busy */
	EXPECT(start(&a, self, "hold") == 0);
	EXPECT(line(&a, buf, sizeof buf, 30000) == 0 && !strcmp(buf, "held"));
	EXPECT(run(self, "probe", buf, sizeof buf) == 0);
	EXPECT(!strcmp(buf, "dist=16 env=0 cache=0 file=0 filedyn=0"));
	fprintf(stderr, "probe: %s\n", buf);
	EXPECT(write(a.in, "\n", 1) == 1);
	EXPECT(th_wait_child(a.pid, 30000) == 0);
	close(a.in);
	close(a.out);

	EXPECT(run(self, "misc", buf, sizeof buf) == 0);

	/* destroy while held: released at once, made anew by init */
	EXPECT(start(&a, self, "dyn-destroy") == 0);
	EXPECT(line(&a, buf, sizeof buf, 30000) == 0 && !strcmp(buf, "destroyed"));
	EXPECT(run(self, "dyn-probe", buf, sizeof buf) == 0);
	EXPECT(!strcmp(buf, "dyn=0"));
	EXPECT(write(a.in, "\n", 1) == 1);
	EXPECT(th_wait_child(a.pid, 30000) == 0);
	close(a.in);
	close(a.out);

	th_redis_stop(&srv);
	return th_check_status();
}
