/*
 * Redis Cluster (redis-cluster://): six real nodes on loopback, three
 * masters with a replica each, joined by `redis-cli --cluster create`
 * (tests/lib/harness_cluster.c).  Each test starts its own cluster, so each
 * does several things: a cluster takes seconds to create.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "dmutex.h"
#include "dmt.h"
#include "harness.h"

static struct th_cluster clu;

static void
down(void)
{
	th_cluster_stop(&clu);
}

TestSuite(cluster, .fini = down, .timeout = 240);

static void
up(void)
{
	cr_assert_eq(th_cluster_start(&clu, NULL, 0), 0, "the cluster did not start");
}

static dmutex_client_t *
open_client(const char *opts)
{
	char url[1024];
	dmutex_client_t *c;
	int rc;

	th_url_with(url, sizeof url, clu.url, opts);
	rc = dmutex_client_open(&c, url);
	cr_assert_eq(rc, 0, "open(%s) = %d", url, rc);
	return c;
}

static void
init_on(dmutex_t *m, const char *name, dmutex_client_t *c)
{
	dmutex_attr_t a;

	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	cr_assert_eq(dmutex_init(m, name, &a), 0);
	cr_assert_eq(dmutex_attr_destroy(&a), 0);
}

/* The master serving a lock name (its keys are tagged {name}). */
static int
owner_of(const char *name)
{
	int slot = th_cluster_keyslot(&clu, name, strlen(name));

	cr_assert_geq(slot, 0);
	return th_cluster_slot_owner(&clu, slot);
}

static long long
exists_on(int node, const char *name)
{
	char key[600];
	redisReply *r;
	long long n;

	snprintf(key, sizeof key, "dmutex:lock:{%s}", name);
	r = th_cluster_cmd(&clu, node, "EXISTS %s", key);
	cr_assert(r && r->type == REDIS_REPLY_INTEGER, "EXISTS on node %d", node);
	n = r->integer;
	freeReplyObject(r);
	return n;
}

static int
another_master(int not)
{
	for (int i = 0; i < TH_CLUSTER_NODES; i++)
		if (i != not && th_cluster_master_of(&clu, i) == i)
			return i;
	return -1;
}

/* Lock and unlock on every master; a second client sees each lock held;
 * a slot moved for good (MOVED) and a slot being migrated (ASK) are
 * followed. */
Test(cluster, lock_unlock_moved_ask)
{
	dmutex_client_t *c1, *c2;
	dmutex_t m1, m2;
	char names[3][32];
	int owners[3], n = 0, to, slot;
	uint64_t f1, f2;
	struct th_migration mig;
	char url[1024];

	up();
	/* No seed answers: EIO; the second seed answers: open. */
	cr_assert_eq(dmutex_client_open(&c1, "redis-cluster://127.0.0.1:1?connect_timeout_ms=500"),
			EIO);
	snprintf(url, sizeof url, "redis-cluster://127.0.0.1:1,%s",
			clu.url + strlen("redis-cluster://"));
	cr_assert_eq(dmutex_client_open(&c1, url), 0);
	cr_assert_eq(dmutex_client_close(c1), 0);
	c1 = open_client(NULL);
	c2 = open_client(NULL);

	/* One name on each master. */
	for (int i = 0; n < 3 && i < 1000; i++) {
		char name[32];
		int o, seen = 0;
		snprintf(name, sizeof name, "n%d", i);
		o = owner_of(name);
		for (int j = 0; j < n; j++)
			seen |= owners[j] == o;
		if (seen)
			continue;
		owners[n] = o;
		strcpy(names[n++], name);
	}
	cr_assert_eq(n, 3);
	for (int i = 0; i < 3; i++) {
		init_on(&m1, names[i], c1);
		init_on(&m2, names[i], c2);
		cr_assert_eq(dmutex_lock(&m1), 0, "%s", names[i]);
		cr_assert_eq(exists_on(owners[i], names[i]), 1, "%s not on its master", names[i]);
		cr_assert_eq(dmutex_trylock(&m2), EBUSY);
		cr_assert_eq(dmutex_fence(&m1, &f1), 0);
		cr_assert_eq(dmutex_unlock(&m1), 0);
		cr_assert_eq(exists_on(owners[i], names[i]), 0);
		cr_assert_eq(dmutex_trylock(&m2), 0);
		cr_assert_eq(dmutex_fence(&m2, &f2), 0);
		cr_assert_gt(f2, f1, "fencing tokens must increase");
		cr_assert_eq(dmutex_unlock(&m2), 0);
		cr_assert_eq(dmutex_destroy(&m1), 0);
		cr_assert_eq(dmutex_destroy(&m2), 0);
	}

	/* Short leases on every master at once, renewed (one pipeline per
	 * master) for three times their length.  600 ms, 3x that under the
	 * sanitizers: a 200 ms lease left the renewal thread 133 ms to get
	 * a CPU, which a loaded 2-core machine does not promise (the other
	 * lease tests keep to 450 ms and more since 2e36b07). */
	{
		char opt[32];
		const int lease = 600 * dmt_slowdown();

		snprintf(opt, sizeof opt, "lease_ms=%d", lease);
		dmutex_client_t *c3 = open_client(opt);
		dmutex_t m3[3];
		for (int i = 0; i < 3; i++) {
			init_on(&m3[i], names[i], c3);
			cr_assert_eq(dmutex_lock(&m3[i]), 0);
		}
		dmt_pass_time_ms(3 * lease);
		for (int i = 0; i < 3; i++) {
			cr_assert_eq(dmutex_unlock(&m3[i]), 0, "%s: hold not renewed", names[i]);
			cr_assert_eq(dmutex_destroy(&m3[i]), 0);
		}
		cr_assert_eq(dmutex_client_close(c3), 0);
	}

	/* MOVED: names[0]'s slot goes to another master while nobody holds
	 * it; the clients' maps still name the old one. */
	slot = th_cluster_keyslot(&clu, names[0], strlen(names[0]));
	to = another_master(owners[0]);
	cr_assert_geq(to, 0);
	cr_assert_eq(th_cluster_migrate_slot(&clu, slot, to, 10, NULL, NULL, 60000), 0);
	init_on(&m1, names[0], c1);
	init_on(&m2, names[0], c2);
	cr_assert_eq(dmutex_lock(&m1), 0);
	cr_assert_eq(exists_on(to, names[0]), 1, "the lock is not on the slot's new master");
	cr_assert_eq(dmutex_trylock(&m2), EBUSY);
	cr_assert_eq(dmutex_unlock(&m1), 0);
	cr_assert_eq(dmutex_destroy(&m1), 0);
	cr_assert_eq(dmutex_destroy(&m2), 0);

	/* ASK: names[1] held while its slot goes half-way to another master,
	 * its keys already moved: the source answers ASK, and the hold is
	 * seen, released and renewed on the target. */
	slot = th_cluster_keyslot(&clu, names[1], strlen(names[1]));
	to = another_master(owners[1]);
	init_on(&m1, names[1], c1);
	init_on(&m2, names[1], c2);
	cr_assert_eq(dmutex_lock(&m1), 0);
	cr_assert_eq(th_cluster_migrate_begin(&clu, slot, to, &mig), 0);
	while (th_cluster_migrate_keys(&clu, &mig, 10) > 0)
		;
	cr_assert_eq(dmutex_trylock(&m2), EBUSY);
	cr_assert_eq(dmutex_fence(&m1, &f1), 0);
	cr_assert_eq(dmutex_unlock(&m1), 0);
	cr_assert_eq(th_cluster_migrate_end(&clu, &mig, 60000), 0);
	cr_assert_eq(dmutex_trylock(&m2), 0);
	cr_assert_eq(exists_on(to, names[1]), 1);
	cr_assert_eq(dmutex_fence(&m2, &f2), 0);
	cr_assert_gt(f2, f1);
	cr_assert_eq(dmutex_trylock(&m1), EBUSY);
	cr_assert_eq(dmutex_unlock(&m2), 0);
	cr_assert_eq(dmutex_destroy(&m1), 0);
	cr_assert_eq(dmutex_destroy(&m2), 0);

	cr_assert_eq(dmutex_client_close(c1), 0);
	cr_assert_eq(dmutex_client_close(c2), 0);
}

struct waiter_arg {
	dmutex_t *m;
	int rc;
	int64_t got_ms;
	uint64_t fence;
};

static void *
lock_thread(void *p)
{
	struct waiter_arg *w = p;

	w->rc = dmutex_lock(w->m);
	w->got_ms = th_now_ms();
	if (!w->rc)
		w->rc = dmutex_fence(w->m, &w->fence);
	if (!w->rc)
		w->rc = dmutex_unlock(w->m);
	return NULL;
}

/* Listeners of a mutex's wake-ups on node: on its channel, or on the
 * waiters' own ("<channel>:<token>", README "Who a release wakes"). */
static long long
shard_subscribers(int node, const char *channel)
{
	long long n = th_numsub(th_cluster_cmd(&clu, node, "PUBSUB SHARDNUMSUB %s", channel));
	redisReply *r = th_cluster_cmd(&clu, node, "PUBSUB SHARDCHANNELS %s:*", channel);

	if (n >= 0 && r && r->type == REDIS_REPLY_ARRAY)
		n += (long long)r->elements;
	else
		n = -1;
	if (r)
		freeReplyObject(r);
	return n;
}

/* Poll until `channel` has n sharded subscribers on node. */
static void
await_subscribers(int node, const char *channel, long long n)
{
	int64_t deadline = th_now_ms() + 20000;

	while (shard_subscribers(node, channel) != n && th_now_ms() < deadline)
		nanosleep(&(struct timespec){ 0, 10000000 }, NULL);
	cr_assert_eq(shard_subscribers(node, channel), n, "%s: not %lld subscribers on node %d",
			channel, n, node);
}

/* A waiter is woken by the release's SPUBLISH, on the master serving the
 * lock's slot, long before the 20 s lease would have run out.  With `move`,
 * the slot moves while the waiter listens on the old master: that node
 * unsubscribes it, and it subscribes on the new one in time. */
static void
wake_round(const char *name, int move)
{
	dmutex_client_t *c1, *c2;
	dmutex_t m1, m2;
	pthread_t t;
	struct waiter_arg w = { .m = &m2 };
	char channel[600];
	int owner = owner_of(name), to;
	int64_t released;
	uint64_t fence;

	snprintf(channel, sizeof channel, "dmutex:wake:{%s}", name);
	c1 = open_client("lease_ms=20000");
	c2 = open_client("lease_ms=20000");
	init_on(&m1, name, c1);
	init_on(&m2, name, c2);
	cr_assert_eq(dmutex_lock(&m1), 0);
	cr_assert_eq(pthread_create(&t, NULL, lock_thread, &w), 0);
	/* Released only once the waiter listens where the release publishes. */
	await_subscribers(owner, channel, 1);
	if (move) {
		to = another_master(owner);
		cr_assert_eq(th_cluster_migrate_slot(&clu, th_cluster_keyslot(&clu, name,
				strlen(name)), to, 10, NULL, NULL, 60000), 0);
		await_subscribers(to, channel, 1);
		cr_assert_eq(shard_subscribers(owner, channel), 0);
	}
	cr_assert_eq(dmutex_fence(&m1, &fence), 0);
	released = th_now_ms();
	cr_assert_eq(dmutex_unlock(&m1), 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(w.rc, 0);
	/* The release granted the waiter the lock with a token of its own
	 * (Cluster takes one at once: wake_queue.lua), above the releaser's. */
	cr_assert_gt(w.fence, fence, "the woken waiter's fence %llu is not above %llu",
			(unsigned long long)w.fence, (unsigned long long)fence);
	cr_assert_lt(w.got_ms - released, 5000, "woken after %lld ms: no wake-up",
			(long long)(w.got_ms - released));
	printf("cluster wake-up%s: %lld ms\n", move ? " after a slot move" : "",
			(long long)(w.got_ms - released));
	cr_assert_eq(dmutex_destroy(&m1), 0);
	cr_assert_eq(dmutex_destroy(&m2), 0);
	cr_assert_eq(dmutex_client_close(c1), 0);
	cr_assert_eq(dmutex_client_close(c2), 0);
}

Test(cluster, wake_up_by_sharded_pubsub)
{
	up();
	wake_round("woken", 0);
	wake_round("moving", 1);
}

/* CPU time this process has used, in ms. */
static long long
cpu_ms(void)
{
	struct rusage ru;

	cr_assert_eq(getrusage(RUSAGE_SELF, &ru), 0);
	return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000LL +
		(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

/* Waiters never hot-poll (API.md), on a cluster too: a sharded wake-up
 * thread needs one master of three, and took its poll timeout from the
 * others' retry time, long past (0: never connected), so it spun for as
 * long as anyone waited: about a second of CPU a second.  Here one thread
 * waits 2 s for a lock held by another client; the process must use a
 * small part of that (a window measured, not a wait for an event). */
Test(cluster, a_waiting_thread_does_not_spin)
{
	dmutex_client_t *c1, *c2;
	dmutex_t m1, m2;
	pthread_t t;
	struct waiter_arg w = { .m = &m2 };
	char channel[600];
	long long used;

	up();
	snprintf(channel, sizeof channel, "dmutex:wake:{%s}", "spin");
	c1 = open_client("lease_ms=20000");
	c2 = open_client("lease_ms=20000");
	init_on(&m1, "spin", c1);
	init_on(&m2, "spin", c2);
	cr_assert_eq(dmutex_lock(&m1), 0);
	cr_assert_eq(pthread_create(&t, NULL, lock_thread, &w), 0);
	await_subscribers(owner_of("spin"), channel, 1);
	used = cpu_ms();
	nanosleep(&(struct timespec){ 2, 0 }, NULL);
	used = cpu_ms() - used;
	cr_assert_eq(dmutex_unlock(&m1), 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(w.rc, 0);
	cr_assert_lt(used, 400, "%lld ms of CPU in 2 s while a thread waited", used);
	printf("cluster: %lld ms of CPU in 2 s while a thread waited\n", used);
	cr_assert_eq(dmutex_destroy(&m1), 0);
	cr_assert_eq(dmutex_destroy(&m2), 0);
	cr_assert_eq(dmutex_client_close(c1), 0);
	cr_assert_eq(dmutex_client_close(c2), 0);
}

/* ------------------------------------------------------------------ */
/* A slot migrated while several processes contend for a lock in it    */
/* ------------------------------------------------------------------ */

#define WORKERS 3

/* Shared by the worker processes (MAP_SHARED): the protected resource. */
struct arena {
	int stop;
	int inside;                     /* holders in the critical section */
	uint64_t last_fence;            /* the resource's largest token */
	long long acquired, attempts, errors;
	long long overlaps;             /* entered while another was inside */
	long long stale_fences;         /* a token not above the last one */
};

static struct arena *arena;
static pid_t test_pid;

static int
worker(void *p)
{
	long id = (long)p;
	dmutex_client_t *c;
	dmutex_attr_t a;
	dmutex_t m;
	char url[1024];

	/* Not the harness's longer command timeout: a lock that a
	 * migration holds up ends with EIO after 3 of these, and the
	 * migration's stages (mid_migration) wait for attempts, 2 per
	 * worker within 20 s.  An EIO here is only an attempt. */
	th_url_with(url, sizeof url, clu.url, "lease_ms=1000&command_timeout_ms=1000");
	/* A worker left behind by a failed test would lock for ever on a
	 * cluster that is gone. */
	dmt_die_with_parent(test_pid);
	if (dmutex_client_open(&c, url) || dmutex_attr_init(&a) || dmutex_attr_setclient(&a, c) ||
			dmutex_init(&m, "hot", &a))
		return 1;
	while (!__atomic_load_n(&arena->stop, __ATOMIC_ACQUIRE)) {
		uint64_t f = 0;
		long long n;
		int rc;

		__atomic_add_fetch(&arena->attempts, 1, __ATOMIC_RELAXED);
		if ((rc = dmutex_lock(&m))) {
			/* A migration longer than the call's deadline: EIO,
			 * never a second holder. */
			__atomic_add_fetch(&arena->errors, 1, __ATOMIC_RELAXED);
			continue;
		}
		if (__atomic_add_fetch(&arena->inside, 1, __ATOMIC_ACQ_REL) != 1)
			__atomic_add_fetch(&arena->overlaps, 1, __ATOMIC_RELAXED);
		/* The token is asked for now (key layout 3), again until the
		 * hold's end: a migration that outlasts the lease makes the
		 * hold lost (ENOLCK), never a token below the last. */
		if ((rc = dmutex_fence(&m, &f)) == ENOLCK)
			__atomic_add_fetch(&arena->errors, 1, __ATOMIC_RELAXED);
		else if (rc || f <= arena->last_fence)
			__atomic_add_fetch(&arena->stale_fences, 1, __ATOMIC_RELAXED);
		else
			arena->last_fence = f;
		n = __atomic_add_fetch(&arena->acquired, 1, __ATOMIC_RELAXED);
		/* Now and then a hold long enough to be renewed mid-migration. */
		nanosleep(&(struct timespec){ 0, (n + id) % 25 == 0 ? 450000000L : 1000000L }, NULL);
		__atomic_sub_fetch(&arena->inside, 1, __ATOMIC_ACQ_REL);
		if (dmutex_unlock(&m))
			__atomic_add_fetch(&arena->errors, 1, __ATOMIC_RELAXED);
	}
	dmutex_destroy(&m);
	dmutex_client_close(c);
	return 0;
}

struct phase_goal {
	long long acquired;             /* at least this many more, */
	long long attempts;             /* or this many more attempts */
};

static int
progressed(void *p)
{
	const struct phase_goal *g = p;

	return __atomic_load_n(&arena->acquired, __ATOMIC_RELAXED) >= g->acquired ||
		__atomic_load_n(&arena->attempts, __ATOMIC_RELAXED) >= g->attempts;
}

/* Each stage of the migration lasts until the workers made progress in it:
 * locks taken (or, once keys are split and new holds must wait, attempts
 * made). */
static int
mid_migration(void *arg, int phase, const struct th_migration *m)
{
	struct phase_goal g = {
		.acquired = __atomic_load_n(&arena->acquired, __ATOMIC_RELAXED) + 20,
		.attempts = __atomic_load_n(&arena->attempts, __ATOMIC_RELAXED) + 2 * WORKERS,
	};

	(void)arg;
	(void)m;
	(void)phase;
	return th_wait_until(progressed, &g, 20000) ? 0 : -1;
}

Test(cluster, slot_migrated_under_contention)
{
	pid_t pids[WORKERS];
	int slot, from, to, moves = 0;
	long long before;

	up();
	arena = mmap(NULL, sizeof *arena, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(arena, MAP_FAILED);
	memset(arena, 0, sizeof *arena);
	test_pid = getpid();
	slot = th_cluster_keyslot(&clu, "hot", 3);
	from = th_cluster_slot_owner(&clu, slot);
	to = another_master(from);
	for (long i = 0; i < WORKERS; i++)
		cr_assert_gt(pids[i] = th_spawn(worker, (void *)i), 0);
	/* Contended before anything moves. */
	struct phase_goal g = { .acquired = 30, .attempts = LLONG_MAX };
	cr_assert(th_wait_until(progressed, &g, 30000), "the workers do not get the lock");
	/* There and back: both directions, keys one at a time. */
	for (; moves < 2; moves++) {
		cr_assert_eq(th_cluster_migrate_slot(&clu, slot, moves ? from : to, 1, mid_migration,
				NULL, 60000), 0, "migration %d failed", moves);
		before = __atomic_load_n(&arena->acquired, __ATOMIC_RELAXED);
		g.acquired = before + 20;
		cr_assert(th_wait_until(progressed, &g, 30000),
				"no lock taken after migration %d", moves);
	}
	__atomic_store_n(&arena->stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < WORKERS; i++)
		cr_assert_eq(th_wait_child(pids[i], 30000), 0, "worker %d", i);
	printf("cluster migration: %lld locks taken, %lld attempts, %lld EIO, %lld overlaps, "
			"%lld stale fences\n", arena->acquired, arena->attempts, arena->errors,
			arena->overlaps, arena->stale_fences);
	cr_assert_eq(arena->overlaps, 0, "two holders at once");
	cr_assert_eq(arena->stale_fences, 0, "a fencing token did not increase");
	cr_assert_eq(th_cluster_slot_owner(&clu, slot), from);
	munmap(arena, sizeof *arena);
}

/* ------------------------------------------------------------------ */
/* The dmutex command over every master                                */
/* ------------------------------------------------------------------ */

static char out_path[512];

/* $DMUTEX_BIN args... with stdout and stderr in out_path; its exit status. */
static int
cli(const char *a1, const char *a2, const char *a3)
{
	const char *argv[] = { getenv("DMUTEX_BIN"), a1, "--url", clu.url, a2, a3, NULL };

	cr_assert(argv[0], "DMUTEX_BIN is not set (run through meson test)");
	unlink(out_path);
	return th_run(argv, NULL, out_path, 30000);
}

static int
output_has(const char *what)
{
	char buf[8192];
	FILE *f = fopen(out_path, "r");
	size_t n;

	cr_assert(f, "no output file");
	n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = 0;
	fclose(f);
	return strstr(buf, what) != NULL;
}

Test(cluster, cli_list_status_reset)
{
	dmutex_client_t *c;
	dmutex_t m[3];
	char names[3][32];
	int owners[3], n = 0;

	up();
	snprintf(out_path, sizeof out_path, "%s/cli.out", clu.node[0].dir);
	c = open_client(NULL);
	for (int i = 0; n < 3 && i < 1000; i++) {
		int o, seen = 0;
		snprintf(names[n], sizeof names[n], "cli%d", i);
		o = owner_of(names[n]);
		for (int j = 0; j < n; j++)
			seen |= owners[j] == o;
		if (!seen)
			owners[n++] = o;
	}
	cr_assert_eq(n, 3);
	for (int i = 0; i < 3; i++) {
		init_on(&m[i], names[i], c);
		cr_assert_eq(dmutex_lock(&m[i]), 0);
	}
	/* Every master's locks, each once. */
	cr_assert_eq(cli("list", NULL, NULL), 0);
	for (int i = 0; i < 3; i++)
		cr_assert(output_has(names[i]), "list does not show %s", names[i]);
	cr_assert_eq(cli("status", names[2], NULL), 0);
	cr_assert(output_has("held"));
	cr_assert(!output_has("cannot read"), "status asked a master that does not serve the name");
	cr_assert_eq(cli("status", "nosuchname", NULL), 84);
	/* reset refuses a held lock, and --force takes it away. */
	cr_assert_eq(cli("reset", names[1], NULL), 85);
	cr_assert_eq(cli("reset", "-f", names[1]), 0);
	cr_assert_eq(dmutex_unlock(&m[1]), ENOLCK);
	cr_assert_eq(cli("reset", "nosuchname", NULL), 84);
	cr_assert_eq(dmutex_unlock(&m[0]), 0);
	cr_assert_eq(dmutex_unlock(&m[2]), 0);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(dmutex_destroy(&m[i]), 0);
	/* The per-lock counters of names on three masters: one MULTI on the
	 * master serving {metrics}, sent at close; `metrics` reads them there. */
	cr_assert_eq(dmutex_client_close(c), 0);
	cr_assert_eq(cli("metrics", NULL, NULL), 0);
	for (int i = 0; i < 3; i++) {
		char line[192];
		snprintf(line, sizeof line, "dmutex_acquisitions_total{name=\"%s\"} 1\n", names[i]);
		cr_assert(output_has(line), "metrics does not count %s", names[i]);
	}
}

/* Read-write locks on three masters: list shows each once, in its own
 * table, with the master serving it; status and reset ask that master
 * only; reset --force takes the write lock away from its holder. */
Test(cluster, cli_rwlock_list_status_reset)
{
	dmutex_client_t *c;
	drwlock_t rw[3];
	char names[3][32];
	int owners[3], n = 0;

	up();
	snprintf(out_path, sizeof out_path, "%s/cli.out", clu.node[0].dir);
	c = open_client(NULL);
	for (int i = 0; n < 3 && i < 1000; i++) {
		int o, seen = 0;
		snprintf(names[n], sizeof names[n], "rw%d", i);
		o = owner_of(names[n]);
		for (int j = 0; j < n; j++)
			seen |= owners[j] == o;
		if (!seen)
			owners[n++] = o;
	}
	cr_assert_eq(n, 3);
	for (int i = 0; i < 3; i++) {
		dmutex_attr_t a;
		cr_assert_eq(dmutex_attr_init(&a), 0);
		cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
		cr_assert_eq(drwlock_init(&rw[i], names[i], &a), 0);
		cr_assert_eq(dmutex_attr_destroy(&a), 0);
		cr_assert_eq(i == 0 ? drwlock_rdlock(&rw[i]) : drwlock_wrlock(&rw[i]), 0);
	}
	cr_assert_eq(cli("list", NULL, NULL), 0);
	cr_assert(output_has("RWLOCK"), "list shows no read-write lock table");
	for (int i = 0; i < 3; i++)
		cr_assert(output_has(names[i]), "list does not show %s", names[i]);
	cr_assert_eq(cli("status", names[2], NULL), 0);
	cr_assert(output_has(" (read-write lock) (node ") && output_has("): written\n"));
	cr_assert(!output_has("cannot read"), "status asked a master that does not serve the name");
	cr_assert_eq(cli("status", names[0], NULL), 0);
	cr_assert(output_has("): read by 1 process\n"));
	cr_assert_eq(cli("reset", names[1], NULL), 85);
	cr_assert_eq(cli("reset", "-f", names[1]), 0);
	cr_assert(output_has("released the write lock"));
	cr_assert_eq(drwlock_unlock(&rw[1]), ENOLCK);
	cr_assert_eq(drwlock_unlock(&rw[0]), 0);
	cr_assert_eq(drwlock_unlock(&rw[2]), 0);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(drwlock_destroy(&rw[i]), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/* ------------------------------------------------------------------ */
/* fork while threads lock on several masters                          */
/* ------------------------------------------------------------------ */

static int fork_stop;

static void *
fork_worker(void *p)
{
	dmutex_t *m = p;

	while (!__atomic_load_n(&fork_stop, __ATOMIC_ACQUIRE))
		if (!dmutex_lock(m))
			dmutex_unlock(m);
	return NULL;
}

/* The child inherits the client with its slot map and no lock taken (the
 * map's, the members' pools): it locks on it at once. */
Test(cluster, fork_while_threads_lock)
{
	dmutex_client_t *c;
	dmutex_t m[2];
	pthread_t t[2];
	int children = 0;
	int64_t until;

	up();
	c = open_client(NULL);
	init_on(&m[0], "forka", c);
	init_on(&m[1], "forkb", c);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, fork_worker, &m[i]), 0);
	/* For 2 s, and for at least 5 children however long they take: at
	 * load 5 on two cores fewer than 5 fit in 2 s, and the count is not
	 * what is tested (a child that hangs or fails is). */
	until = th_now_ms() + 2000;
	while ((th_now_ms() < until || children < 5) && children < 40) {
		pid_t pid = fork();
		if (pid == 0) {
			dmutex_t cm;
			dmutex_attr_t a;
			int rc = dmutex_attr_init(&a) || dmutex_attr_setclient(&a, c) ||
				dmutex_init(&cm, "forkchild", &a) || dmutex_lock(&cm) ||
				dmutex_unlock(&cm) || dmutex_destroy(&cm);
			_exit(rc ? 1 : 0);
		}
		cr_assert_gt(pid, 0);
		cr_assert_eq(th_wait_child(pid, 15000), 0, "child %d of %d", children, (int)pid);
		children++;
	}
	__atomic_store_n(&fork_stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(pthread_join(t[i], NULL), 0);
		cr_assert_eq(dmutex_destroy(&m[i]), 0);
	}
	cr_assert_geq(children, 5);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/* ------------------------------------------------------------------ */
/* a master killed under held and contended locks                      */
/* ------------------------------------------------------------------ */

static void
count_lost(const char *name, void *arg)
{
	(void)name;
	__atomic_fetch_add((int *)arg, 1, __ATOMIC_ACQ_REL);
}

static int lost_kept, lost_gone;

static int
gone_reported(void *arg)
{
	(void)arg;
	return __atomic_load_n(&lost_gone, __ATOMIC_ACQUIRE) > 0;
}

struct fo_waiter {
	dmutex_t *m;
	int rc;
	uint64_t fence;
	int unlock_rc;
	int done;
};

/* Locks until it has it: EIO (the master is gone, the slot not served
 * yet) is asked again, as an application that keeps a blocking lock
 * going would. */
static void *
fo_wait(void *p)
{
	struct fo_waiter *w = p;
	long long deadline = th_now_ms() + 60000;

	while ((w->rc = dmutex_lock(w->m)) == EIO && th_now_ms() < deadline)
		;
	if (!w->rc) {
		w->rc = dmutex_fence(w->m, &w->fence);
		w->unlock_rc = dmutex_unlock(w->m);
	}
	__atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static int
fo_done(void *p)
{
	return __atomic_load_n(&((struct fo_waiter *)p)->done, __ATOMIC_ACQUIRE);
}

/* Master *(int *)arg has no replica connected. */
static int
no_replica(void *arg)
{
	redisReply *rep = th_cluster_cmd(&clu, *(int *)arg, "INFO replication");
	int none = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, "connected_slaves:0");

	if (rep)
		freeReplyObject(rep);
	return none;
}

/* EXISTS of NAME's lock key on replica node i: READONLY first, on the
 * same connection, else a replica answers MOVED. */
static long long
exists_on_replica(int i, const char *name)
{
	redisContext *x = th_redis_connect(&clu.node[i], NULL, NULL);
	redisReply *rep;
	long long e = -1;

	cr_assert(x, "connect to node %d", i);
	rep = redisCommand(x, "READONLY");
	cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "READONLY on node %d", i);
	freeReplyObject(rep);
	rep = redisCommand(x, "EXISTS dmutex:lock:{%s}", name);
	if (rep && rep->type == REDIS_REPLY_INTEGER)
		e = rep->integer;
	if (rep)
		freeReplyObject(rep);
	redisFree(x);
	return e;
}

static char kept_name[32];

static int
kept_replicated(void *arg)
{
	return exists_on_replica(*(int *)arg, kept_name) == 1;
}

/* A name served by master m: base0, base1, ... */
static void
name_on(char *out, size_t len, const char *base, int m)
{
	for (int i = 0; i < 10000; i++) {
		snprintf(out, len, "%s%d", base, i);
		if (owner_of(out) == m)
			return;
	}
	cr_assert_fail("no name %s* on master %d", base);
}

static uint64_t
fence_cycle(dmutex_t *m)
{
	uint64_t t = 0;
	long long deadline = th_now_ms() + 30000;
	int rc;

	while ((rc = dmutex_trylock(m)) == EIO && th_now_ms() < deadline)
		;
	cr_assert_eq(rc, 0, "trylock: %s", dmutex_strerror(rc));
	cr_assert_eq(dmutex_fence(m, &t), 0);
	cr_assert_eq(dmutex_unlock(m), 0);
	return t;
}

/* SIGKILL of a master while one of its locks is held with its key on the
 * replica, and another held with its key only on the master (the replica
 * cut off while it was taken) and waited for by a second client.  The
 * replica is promoted (the cluster's own failover); the clients follow
 * (the slot map refreshed on the connection error or a MOVED).  The
 * replicated hold is kept and renewed; the other is reported lost (onlost,
 * then ENOLCK at unlock) and the waiter gets the name; every token after
 * the failover is above every token before it. */
Test(cluster, master_killed_under_held_and_contended_locks)
{
	const char *opts = "lease_ms=10000&connect_timeout_ms=500&command_timeout_ms=1000";
	dmutex_attr_t ak, ag;
	dmutex_client_t *c, *c2;
	dmutex_t kept, gone, n, w;
	char kname[32], gname[32], nname[32], ch[64];
	struct fo_waiter fw = { .m = &w };
	uint64_t before = 0, gone_tok = 0, after;
	pthread_t t;
	long long t0;
	int m, r;
	redisReply *rep;

	up();
	m = owner_of("fo-any");
	r = th_cluster_replica_of(&clu, m);
	cr_assert_geq(r, 0, "master %d has no replica", m);
	name_on(kname, sizeof kname, "fo-kept", m);
	snprintf(kept_name, sizeof kept_name, "%s", kname);
	name_on(gname, sizeof gname, "fo-gone", m);
	name_on(nname, sizeof nname, "fo-n", m);
	c = open_client(opts);
	c2 = open_client(opts);
	cr_assert_eq(dmutex_attr_init(&ak), 0);
	cr_assert_eq(dmutex_attr_setclient(&ak, c), 0);
	cr_assert_eq(dmutex_attr_setonlost(&ak, count_lost, &lost_kept), 0);
	cr_assert_eq(dmutex_init(&kept, kname, &ak), 0);
	cr_assert_eq(dmutex_attr_init(&ag), 0);
	cr_assert_eq(dmutex_attr_setclient(&ag, c), 0);
	cr_assert_eq(dmutex_attr_setonlost(&ag, count_lost, &lost_gone), 0);
	cr_assert_eq(dmutex_init(&gone, gname, &ag), 0);
	init_on(&n, nname, c);
	init_on(&w, gname, c2);
	for (int i = 0; i < 3; i++) {
		uint64_t tok = fence_cycle(&n);
		cr_assert_gt(tok, before);
		before = tok;
	}

	/* Tokens of different names are ordered by the server's clock in
	 * ms (README "Fencing tokens"): two names' holds in one millisecond
	 * may tie, which the steps below, quick on an idle machine, met. */
	dmt_pass_time_ms(2);
	/* Held, and on the replica. */
	cr_assert_eq(dmutex_lock(&kept), 0);
	/* (WAIT on a connection of its own proves nothing: it waits for
	 * that connection's writes, none.) */
	cr_assert(th_wait_until(kept_replicated, &r, 10000), "the hold did not reach the replica");
	/* Held, on the master only: the replica cannot reconnect meanwhile (a
	 * stopped replica would still read the write from its socket when it
	 * resumes, the master dead or not). */
	rep = th_cluster_cmd(&clu, r, "CONFIG SET masterauth nosuchpassword");
	cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "CONFIG SET masterauth");
	freeReplyObject(rep);
	rep = th_cluster_cmd(&clu, r, "CLIENT KILL TYPE master");
	cr_assert(rep && rep->type == REDIS_REPLY_INTEGER, "CLIENT KILL TYPE master");
	freeReplyObject(rep);
	cr_assert(th_wait_until(no_replica, &m, 10000), "the replica is still connected");
	cr_assert_eq(dmutex_lock(&gone), 0);
	cr_assert_eq(dmutex_fence(&gone, &gone_tok), 0);
	cr_assert_gt(gone_tok, before);
	/* ... and waited for. */
	cr_assert_eq(pthread_create(&t, NULL, fo_wait, &fw), 0);
	snprintf(ch, sizeof ch, "dmutex:wake:{%s}", gname);
	await_subscribers(m, ch, 1);

	t0 = th_now_ms();
	cr_assert_eq(th_redis_kill(&clu.node[m]), 0);
	cr_assert_eq(th_cluster_wait_ok(&clu, 60000), 0, "no failover");
	cr_assert_eq(th_cluster_master_of(&clu, r), r, "node %d was not promoted", r);

	/* The waiter gets the name the new master does not know held. */
	cr_assert(th_wait_until(fo_done, &fw, 40000), "the waiter never got the lock");
	pthread_join(t, NULL);
	cr_assert_eq(fw.rc, 0, "waiter: %s", dmutex_strerror(fw.rc));
	cr_assert_gt(fw.fence, gone_tok, "token %llu after the failover, %llu before",
			(unsigned long long)fw.fence, (unsigned long long)gone_tok);
	/* Its holder hears so at its next renewal, and unlock says so. */
	cr_assert(th_wait_until(gone_reported, NULL, 30000), "the lost hold was not reported");
	cr_assert_eq(dmutex_unlock(&gone), ENOLCK);
	cr_assert_eq(fw.unlock_rc, 0);
	/* The replicated hold is renewed on the new master and released there. */
	after = fence_cycle(&n);
	cr_assert_gt(after, gone_tok);
	cr_assert_eq(__atomic_load_n(&lost_kept, __ATOMIC_ACQUIRE), 0, "the replicated hold was lost");
	cr_assert_eq(dmutex_unlock(&kept), 0);
	cr_assert_eq(exists_on(r, kname), 0);
	fprintf(stderr, "cluster failover: master %d killed, replica %d promoted, waiter locked "
			"%lld ms after the kill\n", m, r, th_now_ms() - t0);
	cr_assert_eq(dmutex_destroy(&kept), 0);
	cr_assert_eq(dmutex_destroy(&gone), 0);
	cr_assert_eq(dmutex_destroy(&n), 0);
	cr_assert_eq(dmutex_destroy(&w), 0);
	dmutex_attr_destroy(&ak);
	dmutex_attr_destroy(&ag);
	cr_assert_eq(dmutex_client_close(c), 0);
	cr_assert_eq(dmutex_client_close(c2), 0);
}

/* ------------------------------------------------------------------ */
/* releases owed to a stalled master keep no other hold from renewal   */
/* ------------------------------------------------------------------ */

#define STALL_ORPHANS 8

struct stall_locker {
	pthread_t th;
	dmutex_t m;
	atomic_int locked, go;
	int lock_rc, unlock_rc;
};

/* Each mutex is unlocked by the thread that locked it. */
static void *
stall_locker_main(void *p)
{
	struct stall_locker *s = p;

	s->lock_rc = dmutex_lock(&s->m);
	atomic_store(&s->locked, 1);
	if (s->lock_rc)
		return NULL;
	th_wait_until(dmt_flag_set, &s->go, 30000);
	s->unlock_rc = dmutex_unlock(&s->m);
	return NULL;
}

static atomic_int stall_lost, stall_no_answer;

/* Counts the background's tries that the stalled master leaves unanswered
 * (cluster.c: "no answer for slot ... in time"). */
static void
stall_log(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	if (strstr(msg, "no answer for slot"))
		atomic_fetch_add(&stall_no_answer, 1);
}

static int
stall_tries(void *arg)
{
	return atomic_load(&stall_no_answer) >= *(int *)arg;
}

/*
 * Unlocks of several names on a master that stalls (SIGSTOP, no failover
 * yet) say EIO and are retried in the background, each try taking up to a
 * command timeout.  The renewal thread tried them one after the other
 * before it renewed again, so a hold on a healthy master, renewed every
 * third of its lease, went unrenewed for eight timeouts and was lost.  Now a
 * renewal that falls due goes before the next orphan's try.
 */
Test(cluster, releases_owed_to_a_stalled_master_do_not_starve_renewals)
{
	const char *opts = "command_timeout_ms=400&connect_timeout_ms=400&async_release=0";
	static struct stall_locker s[STALL_ORPHANS];
	struct th_cluster_opts co = { .node_timeout_ms = 60000 };
	dmutex_attr_t a;
	dmutex_client_t *c;
	dmutex_t keep;
	char name[32];
	uint64_t tok;
	int stalled, healthy, want;

	cr_assert_eq(th_cluster_start(&clu, &co, 0), 0, "the cluster did not start");
	stalled = owner_of("stall-any");
	healthy = another_master(stalled);
	cr_assert_geq(healthy, 0);
	c = open_client(opts);
	atomic_store(&stall_lost, 0);
	atomic_store(&stall_no_answer, 0);

	/* The hold that must survive: a 2.4 s lease, renewed every 800 ms;
	 * eight tries in a row take 3.2 s. */
	name_on(name, sizeof name, "stall-keep", healthy);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	cr_assert_eq(dmutex_attr_setlease(&a, 2400), 0);
	cr_assert_eq(dmutex_attr_setonlost(&a, dmt_count_lost, &stall_lost), 0);
	cr_assert_eq(dmutex_init(&keep, name, &a), 0);
	cr_assert_eq(dmutex_attr_destroy(&a), 0);
	cr_assert_eq(dmutex_lock(&keep), 0);

	for (int i = 0; i < STALL_ORPHANS; i++) {
		char n[32], base[32];
		snprintf(base, sizeof base, "stall-%d-", i);
		name_on(n, sizeof n, base, stalled);
		cr_assert_eq(dmutex_attr_init(&a), 0);
		cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
		cr_assert_eq(dmutex_attr_setlease(&a, 30000), 0);
		cr_assert_eq(dmutex_init(&s[i].m, n, &a), 0);
		cr_assert_eq(dmutex_attr_destroy(&a), 0);
		cr_assert_eq(pthread_create(&s[i].th, NULL, stall_locker_main, &s[i]), 0);
	}
	for (int i = 0; i < STALL_ORPHANS; i++) {
		cr_assert(th_wait_until(dmt_flag_set, &s[i].locked, 10000), "locker %d did not lock", i);
		cr_assert_eq(s[i].lock_rc, 0, "locker %d: %s", i, dmutex_strerror(s[i].lock_rc));
	}

	dmutex_set_logger(stall_log, NULL);
	cr_assert_eq(th_redis_pause(&clu.node[stalled]), 0);
	for (int i = 0; i < STALL_ORPHANS; i++)
		atomic_store(&s[i].go, 1);
	for (int i = 0; i < STALL_ORPHANS; i++) {
		pthread_join(s[i].th, NULL);
		cr_assert_eq(s[i].unlock_rc, EIO, "unlock %d on the stalled master: %s", i,
				dmutex_strerror(s[i].unlock_rc));
	}
	/* Every orphan tried in the background twice over (each try up to
	 * a command timeout): several passes, more than a lease. */
	want = atomic_load(&stall_no_answer) + 2 * STALL_ORPHANS;
	cr_assert(th_wait_until(stall_tries, &want, 30000), "the background tried the releases only "
			"%d times", atomic_load(&stall_no_answer));
	cr_assert_eq(atomic_load(&stall_lost), 0, "the hold on the healthy master was lost while the "
			"background retried releases owed to the stalled one");
	cr_assert_eq(dmutex_fence(&keep, &tok), 0);
	cr_assert_eq(th_redis_resume(&clu.node[stalled]), 0);
	dmutex_set_logger(NULL, NULL);
	cr_assert_eq(dmutex_unlock(&keep), 0);
	cr_assert_eq(dmutex_destroy(&keep), 0);
	for (int i = 0; i < STALL_ORPHANS; i++)
		cr_assert_eq(dmutex_destroy(&s[i].m), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}
