/*
 * POSIX semaphores through the shim: an ordinary program using
 * <semaphore.h> against a real redis-server.  The errno contract (-1 and
 * errno, SEM_FAILED), sem_open by name (one object per name per process,
 * O_CREAT/O_EXCL, the first creator's value), sem_init named by its
 * definition site, three processes sharing two permits (a holders counter
 * in Redis never above 2), and a holder killed by SIGKILL keeping its
 * permit.
 */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "harness.h"

static struct th_redis srv;

static int value(sem_t *s)
{
	int v = -1;

	EXPECT(sem_getvalue(s, &v) == 0);
	return v;
}

static void errors(void)
{
	sem_t local, *a, *b, *max;
	struct timespec past = { 0, 0 }, bad = { 0, -1 };

	EXPECT(sem_init(&local, 1, 0) == 0);
	FAILS(sem_trywait(&local), EAGAIN);
	FAILS(sem_timedwait(&local, &past), ETIMEDOUT);
	FAILS(sem_timedwait(&local, &bad), EINVAL);
	FAILS(sem_clockwait(&local, CLOCK_PROCESS_CPUTIME_ID, &past), EINVAL);
	EXPECT(sem_post(&local) == 0);
	/* The deadline is not examined while a permit is free. */
	EXPECT(sem_timedwait(&local, &bad) == 0);
	EXPECT(value(&local) == 0);
	/* Named by its definition site. */
	redisReply *r = th_redis_cmd(&srv, "KEYS %s", "dmutex:sem:{shimsem/test_shim_sem.c:*}");
	EXPECT(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1);
	if (r)
		freeReplyObject(r);
	EXPECT(sem_destroy(&local) == 0);
	FAILS(sem_destroy(&local), EINVAL);
	FAILS(sem_post(&local), EINVAL);
	/* Destroyed by the last process using it: its count is gone (issue
	 * 29: the next run must not find it). */
	r = th_redis_cmd(&srv, "KEYS %s", "dmutex:sem:{shimsem/test_shim_sem.c:*}");
	EXPECT(r && r->type == REDIS_REPLY_ARRAY && r->elements == 0);
	if (r)
		freeReplyObject(r);

	/* Issue 29: sem_init at a line after this process's sem_destroy there
	 * is a fresh semaphore with the new value, not the old count (LTP
	 * sem_timedwait 11-1): 3, one taken, destroyed; then 1, not 2. */
	for (unsigned round = 0; round < 2; round++) {
		EXPECT(sem_init(&local, 0, round ? 1 : 3) == 0);
		EXPECT(value(&local) == (round ? 1 : 3));
		EXPECT(sem_wait(&local) == 0);
		EXPECT(sem_destroy(&local) == 0);
	}

	/* Issue 29: a name too long for glibc's file /dev/shm/sem.NAME
	 * (NAME_MAX - 3 bytes after the slash and more: LTP sem_unlink 5-1),
	 * as glibc; NAME_MAX - 4 is fine. */
	char longname[NAME_MAX + 3];
	longname[0] = '/';
	memset(longname + 1, 'n', NAME_MAX + 1);
	longname[NAME_MAX + 2] = '\0';
	errno = 0;
	EXPECT(sem_open(longname, O_CREAT, 0600, 1) == SEM_FAILED && errno == ENAMETOOLONG);
	FAILS(sem_unlink(longname), ENAMETOOLONG);
	longname[NAME_MAX] = '\0';            /* NAME_MAX - 1 after the slash */
	errno = 0;
	EXPECT(sem_open(longname, O_CREAT, 0600, 1) == SEM_FAILED && errno == ENAMETOOLONG);
	longname[NAME_MAX - 2] = '\0';        /* NAME_MAX - 3 */
	errno = 0;
	EXPECT(sem_open(longname, O_CREAT, 0600, 1) == SEM_FAILED && errno == ENAMETOOLONG);
	longname[NAME_MAX - 3] = '\0';        /* NAME_MAX - 4 after the slash: fine */
	EXPECT((a = sem_open(longname, O_CREAT, 0600, 1)) != SEM_FAILED && sem_close(a) == 0);
	EXPECT(sem_unlink(longname) == 0);

	errno = 0;
	EXPECT(sem_open("/nosuch", 0) == SEM_FAILED && errno == ENOENT);
	FAILS(sem_unlink("/nosuch"), ENOENT);
	EXPECT((a = sem_open("/named", O_CREAT, 0600, 3)) != SEM_FAILED);
	EXPECT((b = sem_open("/named", O_CREAT, 0600, 9)) == a);     /* one object per name */
	EXPECT(value(b) == 3);                                       /* first creator's value */
	errno = 0;
	EXPECT(sem_open("/named", O_CREAT | O_EXCL, 0600, 1) == SEM_FAILED && errno == EEXIST);
	EXPECT(sem_close(b) == 0);
	EXPECT(sem_wait(a) == 0);
	EXPECT(value(a) == 2);
	EXPECT(sem_close(a) == 0);
	FAILS(sem_close(a), EINVAL);
	EXPECT(th_redis_int(&srv, "HGET dmutex:sem:{/named} v") == 2);   /* close keeps it */
	EXPECT(sem_unlink("/named") == 0);

	/* Issue 29: after sem_unlink the name is gone, a new sem_open with
	 * O_CREAT makes a new semaphore, and the old one goes on for those
	 * that have it open (LTP sem_unlink 6-1). */
	EXPECT((a = sem_open("/gen", O_CREAT, 0600, 2)) != SEM_FAILED);
	EXPECT(sem_unlink("/gen") == 0);
	errno = 0;
	EXPECT(sem_open("/gen", 0) == SEM_FAILED && errno == ENOENT);
	FAILS(sem_unlink("/gen"), ENOENT);
	EXPECT(sem_wait(a) == 0 && value(a) == 1);                   /* the old one, still usable */
	EXPECT((b = sem_open("/gen", O_CREAT, 0600, 5)) != SEM_FAILED && b != a);
	EXPECT(value(b) == 5);                                       /* new: its own value */
	EXPECT(sem_post(a) == 0 && value(a) == 2 && value(b) == 5);
	EXPECT(sem_open("/gen", 0) == b && sem_close(b) == 0);     /* by name: the new one */
	EXPECT(sem_unlink("/gen") == 0);
	EXPECT(sem_close(b) == 0 && sem_close(a) == 0);
	EXPECT(sem_open("/gen", O_CREAT | O_EXCL, 0600, 7) != SEM_FAILED);   /* a third, made anew */

	EXPECT((max = sem_open("/max", O_CREAT | O_EXCL, 0600, (unsigned)SEM_VALUE_MAX)) != SEM_FAILED);
	FAILS(sem_post(max), EOVERFLOW);
	EXPECT(sem_close(max) == 0);
	EXPECT(sem_unlink("/max") == 0);
}

enum { PERMITS = 2, ROUNDS = 40 };

static int holder(void *arg)
{
	sem_t *s = sem_open("/procs", O_CREAT, 0600, PERMITS);
	int bad = 0;

	(void)arg;
	if (s == SEM_FAILED)
		return 10;
	for (int i = 0; i < ROUNDS; i++) {
		if (sem_wait(s))
			return 11;
		long long n = th_redis_int(&srv, "INCR holders");
		if (n < 1 || n > PERMITS)
			bad = 1;
		if (th_redis_int(&srv, "DECR holders") < 0)
			bad = 1;
		if (sem_post(s))
			return 12;
	}
	sem_close(s);
	return bad;
}

static int hang(void *arg)
{
	sem_t *s = sem_open("/crash", O_CREAT, 0600, 1);

	if (s == SEM_FAILED || sem_wait(s))
		return 10;
	th_sync_post(arg);
	pause();
	return 0;
}

/* Opens /xgen (2), takes one, says so, and once the parent has unlinked
 * it and made a new one, posts twice on its old one: 3, its own count. */
static int old_holder(void *arg)
{
	sem_t *s = sem_open("/xgen", O_CREAT, 0600, 2);
	long long until = th_now_ms() + 10000;
	int v = -1;

	if (s == SEM_FAILED || sem_wait(s))
		return 10;
	th_sync_post(arg);
	while (th_redis_int(&srv, "EXISTS xgen-go") != 1) {
		if (th_now_ms() > until)
			return 11;
		usleep(2000);   /* a poll with a deadline, not a wait for an event */
	}
	if (sem_post(s) || sem_post(s) || sem_getvalue(s, &v) || v != 3)
		return 12;
	return sem_close(s) ? 13 : 0;
}

static void procs(void)
{
	pid_t kids[3];
	struct th_sync sy;
	sem_t *s;

	for (int i = 0; i < 3; i++)
		EXPECT((kids[i] = th_spawn(holder, NULL)) > 0);
	for (int i = 0; i < 3; i++)
		EXPECT(th_wait_child(kids[i], 20000) == 0);
	EXPECT(th_redis_int(&srv, "HGET dmutex:sem:{/procs} v") == PERMITS);

	EXPECT(th_sync_init(&sy) == 0);
	EXPECT((kids[0] = th_spawn(hang, &sy)) > 0);
	EXPECT(th_sync_wait(&sy, 10000) == 0);
	kill(kids[0], SIGKILL);
	EXPECT(th_wait_child(kids[0], 5000) == 128 + SIGKILL);
	EXPECT((s = sem_open("/crash", 0)) != SEM_FAILED);
	EXPECT(value(s) == 0);           /* no owner: the permit stays taken */
	FAILS(sem_trywait(s), EAGAIN);
	EXPECT(sem_post(s) == 0);
	EXPECT(sem_trywait(s) == 0);
	EXPECT(sem_close(s) == 0);
	th_sync_close(&sy);

	/* Issue 29: a process that has the semaphore open keeps using it,
	 * count included, after another unlinks the name and makes a new one
	 * under it (LTP sem_unlink 6-1). */
	EXPECT(th_sync_init(&sy) == 0);
	EXPECT((kids[0] = th_spawn(old_holder, &sy)) > 0);
	EXPECT(th_sync_wait(&sy, 10000) == 0);
	EXPECT(sem_unlink("/xgen") == 0);
	EXPECT((s = sem_open("/xgen", O_CREAT, 0600, 7)) != SEM_FAILED);
	EXPECT(th_redis_int(&srv, "INCR xgen-go") == 1);
	EXPECT(th_wait_child(kids[0], 15000) == 0);
	EXPECT(value(s) == 7);
	EXPECT(sem_close(s) == 0);
	th_sync_close(&sy);
}

/* Subscribers of the named semaphore's wake channel: a waiter asleep. */
static long long sleepers(const char *name)
{
	redisReply *r = th_redis_cmd(&srv, "PUBSUB NUMSUB dmutex:semwake:{%s}", name);
	long long n = -1;

	if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_INTEGER)
		n = r->element[1]->integer;
	if (r)
		freeReplyObject(r);
	return n;
}

static void *join_within(pthread_t t, int ms)
{
	struct timespec at;
	void *ret = NULL;

	clock_gettime(CLOCK_REALTIME, &at);
	at.tv_sec += ms / 1000;
	EXPECT(pthread_timedjoin_np(t, &ret, &at) == 0);
	return ret;
}

static void mark(void *arg)
{
	*(volatile int *)arg = 1;
}

/* Blocks in sem_wait until cancelled; its cleanup handler sets cleaned. */
struct blocked { sem_t *s; volatile int cleaned; };

static void *cancelled_waiter(void *arg)
{
	struct blocked *b = arg;

	pthread_cleanup_push(mark, (void *)&b->cleaned);
	sem_wait(b->s);
	pthread_cleanup_pop(0);
	return NULL;
}

/* A cancel pending: the calls that are not cancellation points each run to
 * their end (step counts them), sem_wait is one even with a permit free. */
struct pending { sem_t *s; volatile int step; };

static void *pending_caller(void *arg)
{
	struct pending *p = arg;
	pthread_barrier_t b;
	int v;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	pthread_cancel(pthread_self());
	pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
	if (sem_post(p->s) == 0)
		p->step = 1;
	if (sem_getvalue(p->s, &v) == 0 && v == 2)
		p->step = 2;
	if (sem_trywait(p->s) == 0)
		p->step = 3;
	if (pthread_barrier_init(&b, NULL, 1) == 0 && pthread_barrier_wait(&b) == PTHREAD_BARRIER_SERIAL_THREAD &&
			pthread_barrier_destroy(&b) == 0)
		p->step = 4;
	/* Logs an error (write(2), a cancellation point of libc's) while it
	 * holds the shim's list of named semaphores. */
	if (sem_close((sem_t *)&b) == -1 && errno == EINVAL)
		p->step = 5;
	sem_wait(p->s);                 /* cancelled here, the permit left */
	p->step = 6;
	return NULL;
}

/* sem_wait and sem_timedwait are cancellation points (POSIX; a thread pool
 * cancels its workers blocked in sem_wait); sem_post, sem_trywait,
 * sem_getvalue, sem_close and pthread_barrier_wait are not, and a cancel
 * pending never cuts one of them half-way. */
static void cancel(void)
{
	struct blocked b = { 0 };
	struct pending p = { 0 };
	long long until;
	pthread_t t;
	sem_t s, *named;

	/* Named by this line (its wake channel below). */
	enum { CANCEL_LINE = __LINE__ + 1 };
	EXPECT(sem_init(&s, 1, 0) == 0);
	EXPECT((named = sem_open("/cancel", O_CREAT, 0600, 0)) != SEM_FAILED);
	b.s = named;
	EXPECT(pthread_create(&t, NULL, cancelled_waiter, &b) == 0);
	until = th_now_ms() + 10000;
	while (sleepers("/cancel") != 1 && th_now_ms() < until)
		usleep(2000);   /* a poll with a deadline */
	EXPECT(sleepers("/cancel") == 1);
	EXPECT(pthread_cancel(t) == 0);
	EXPECT(join_within(t, 10000) == PTHREAD_CANCELED);
	EXPECT(b.cleaned == 1);
	EXPECT(value(named) == 0);      /* nothing taken */
	until = th_now_ms() + 10000;
	while (sleepers("/cancel") != 0 && th_now_ms() < until)
		usleep(2000);
	EXPECT(sleepers("/cancel") == 0);
	EXPECT(sem_post(named) == 0);
	EXPECT(sem_trywait(named) == 0);
	/* The last reference gone, the semaphore goes: no waiter or user was
	 * left counted by the cancelled wait. */
	EXPECT(sem_close(named) == 0);
	EXPECT(sem_unlink("/cancel") == 0);

	/* The same on an unnamed one: destroy finds no waiter left. */
	b = (struct blocked){ .s = &s };
	EXPECT(pthread_create(&t, NULL, cancelled_waiter, &b) == 0);
	until = th_now_ms() + 10000;
	redisReply *r;
	long long subs = 0;
	while (th_now_ms() < until) {
		r = th_redis_cmd(&srv, "PUBSUB NUMSUB dmutex:semwake:{shimsem/test_shim_sem.c:%d}", CANCEL_LINE);
		subs = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[1]->integer : -1;
		if (r)
			freeReplyObject(r);
		if (subs == 1)
			break;
		usleep(2000);
	}
	EXPECT(subs == 1);
	EXPECT(pthread_cancel(t) == 0);
	EXPECT(join_within(t, 10000) == PTHREAD_CANCELED);
	EXPECT(b.cleaned == 1);
	EXPECT(sem_destroy(&s) == 0);

	EXPECT((p.s = sem_open("/pending", O_CREAT, 0600, 1)) != SEM_FAILED);
	EXPECT(pthread_create(&t, NULL, pending_caller, &p) == 0);
	EXPECT(join_within(t, 10000) == PTHREAD_CANCELED);
	EXPECT(p.step == 5);
	EXPECT(value(p.s) == 1);
	EXPECT(sem_close(p.s) == 0);    /* the list of named semaphores is free */
	EXPECT(sem_unlink("/pending") == 0);
}

int main(void)
{
	if (th_redis_start(&srv, NULL)) {
		fprintf(stderr, "redis-server did not start\n");
		return 1;
	}
	setenv("DMUTEX_URL", srv.url, 1);
	setenv("DMUTEX_NAMESPACE", "shimsem", 1);
	errors();
	procs();
	cancel();
	th_redis_stop(&srv);
	return th_check_status();
}
