/*
 * Barriers (dbarrier_*) against a real redis-server: the error table
 * (different counts are EINVAL), three processes running many cycles of
 * one barrier where a Redis counter shows that nobody passed a cycle early
 * and exactly one waiter per cycle got DBARRIER_SERIAL_THREAD, and a
 * participant killed before arriving leaves the others waiting until a
 * replacement arrives.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmutex.h"
#include "harness.h"
#include "dmt.h"

static struct th_redis srv;
static pid_t kids[4];

static void srv_up(void)
{
	cr_assert_eq(th_redis_start(&srv, NULL), 0, "redis-server did not start");
	/* The etcd run (DMUTEX_TEST_ETCD): srv.url names an etcd member; the
	 * tests' own counters stay in srv. */
	cr_assert_eq(dmt_backend_up(&srv), 0, "the backend did not start");
}

/* Barrier NAME's field as the backend keeps it ("gen", "arrived"): a hash
 * field on Redis, a field of "COUNT GEN ARRIVED" over etcd; LLONG_MIN if
 * absent. */
static long long stored(const char *name, const char *field)
{
	if (dmt_etcd())
		return dmt_etcd_field("b", name, "v", strcmp(field, "gen") ? 2 : 1);
	return th_redis_int(&srv, "HGET dmutex:barrier:{%s} %s", name, field);
}

static void srv_down(void)
{
	for (size_t i = 0; i < sizeof kids / sizeof kids[0]; i++)
		if (kids[i] > 0) {
			kill(kids[i], SIGKILL);
			th_wait_child(kids[i], 5000);
			kids[i] = 0;
		}
	th_redis_stop(&srv);
}

TestSuite(barrier, .init = srv_up, .fini = srv_down, .timeout = 30);

Test(barrier, errors)
{
	dmutex_client_t *c;
	dbarrier_t b, o;

	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	cr_assert_eq(dbarrier_init(NULL, "e", 2, c), EINVAL);
	cr_assert_eq(dbarrier_init(&b, NULL, 2, c), EINVAL);
	cr_assert_eq(dbarrier_init(&b, "e", 0, c), EINVAL);
	cr_assert_eq(dbarrier_init(&b, "e", 2, c), 0);
	cr_assert_eq(dbarrier_init(&o, "e", 3, c), EINVAL, "another count must be refused");
	cr_assert_eq(dbarrier_init(&o, "e", 2, c), 0);
	cr_assert_eq(dbarrier_destroy(&o), 0);
	cr_assert_eq(dbarrier_wait(NULL), EINVAL);
	cr_assert_eq(dbarrier_wait(&o), EINVAL);
	cr_assert_eq(dbarrier_destroy(&o), EINVAL);

	/* A barrier of one: every wait completes a cycle and is serial. */
	cr_assert_eq(dbarrier_init(&o, "one", 1, c), 0);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(dbarrier_wait(&o), DBARRIER_SERIAL_THREAD);
	cr_assert_eq(stored("one", "gen"), 3);
	cr_assert_eq(dbarrier_destroy(&o), 0);
	cr_assert_eq(dmutex_client_close(c), EBUSY);
	cr_assert_eq(dbarrier_destroy(&b), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/* ---- three processes, many cycles ----------------------------------- */

#define PARTIES 3
#define CYCLES 25

/*
 * Each cycle i: every party INCRs arrived:i before the barrier; after it,
 * arrived:i must be PARTIES (nobody was released before all arrived).  The
 * serial waiter INCRs serial:i.
 */
static int party(void *arg)
{
	dmutex_client_t *c;
	dbarrier_t b;
	int bad = 0;

	(void)arg;
	if (dmutex_client_open(&c, srv.url) || dbarrier_init(&b, "cycles", PARTIES, c))
		return 10;
	for (int i = 0; i < CYCLES; i++) {
		th_redis_int(&srv, "INCR arrived:%d", i);
		int r = dbarrier_wait(&b);
		if (r != 0 && r != DBARRIER_SERIAL_THREAD)
			return 11;
		if (th_redis_int(&srv, "GET arrived:%d", i) != PARTIES)
			bad = 1;
		if (r == DBARRIER_SERIAL_THREAD)
			th_redis_int(&srv, "INCR serial:%d", i);
	}
	dbarrier_destroy(&b);
	dmutex_client_close(c);
	return bad;
}

Test(barrier, cycles_across_three_processes)
{
	for (int i = 0; i < PARTIES; i++)
		cr_assert_gt(kids[i] = th_spawn(party, NULL), 0);
	for (int i = 0; i < PARTIES; i++) {
		cr_assert_eq(th_wait_child(kids[i], 20000), 0, "party %d failed or passed early", i);
		kids[i] = 0;
	}
	for (int i = 0; i < CYCLES; i++)
		cr_assert_eq(th_redis_int(&srv, "GET serial:%d", i), 1, "cycle %d: serial waiters", i);
	cr_assert_eq(stored("cycles", "gen"), CYCLES);
}

/* ---- a participant dies ------------------------------------------- */

static int one_wait(void *arg)
{
	dmutex_client_t *c;
	dbarrier_t b;
	int r;

	(void)arg;
	if (dmutex_client_open(&c, srv.url) || dbarrier_init(&b, "dies", 3, c))
		return 10;
	r = dbarrier_wait(&b);
	dbarrier_destroy(&b);
	dmutex_client_close(c);
	return r == 0 || r == DBARRIER_SERIAL_THREAD ? 0 : 11;
}

static int hang(void *arg)
{
	(void)arg;
	pause();
	return 0;
}

static int arrived_is(void *arg)
{
	return stored("dies", "arrived") == *(long long *)arg;
}

Test(barrier, killed_participant_others_wait_until_replaced)
{
	long long two = 2;

	/* The third participant is killed before it arrives. */
	cr_assert_gt(kids[0] = th_spawn(one_wait, NULL), 0);
	cr_assert_gt(kids[1] = th_spawn(one_wait, NULL), 0);
	cr_assert_gt(kids[2] = th_spawn(hang, NULL), 0);
	cr_assert(th_wait_until(arrived_is, &two, 10000), "two arrivals");
	kill(kids[2], SIGKILL);
	cr_assert_eq(th_wait_child(kids[2], 5000), 128 + SIGKILL);
	kids[2] = 0;
	/* Still waiting: the barrier cannot know the third will not come. */
	cr_assert_eq(th_wait_child(kids[0], 300), -1, "released with a participant missing");
	kids[0] = 0;   /* th_wait_child killed it on timeout */
	/* A restarted participant completes the cycle. */
	cr_assert_gt(kids[3] = th_spawn(one_wait, NULL), 0);
	cr_assert_eq(th_wait_child(kids[1], 5000), 0, "the waiter was not released");
	kids[1] = 0;
	cr_assert_eq(th_wait_child(kids[3], 5000), 0);
	kids[3] = 0;
	cr_assert_eq(stored("dies", "gen"), 1);
}

/* barrier_wait.lua from the source tree, as the library embeds it. */
static char *
script(const char *name)
{
	char path[1024];
	static char text[16384];
	FILE *f;
	size_t n;

	snprintf(path, sizeof path, "%s/%s", getenv("DMUTEX_SCRIPTS"), name);
	cr_assert_not_null(f = fopen(path, "r"), "%s", path);
	n = fread(text, 1, sizeof text - 1, f);
	fclose(f);
	text[n] = 0;
	return text;
}

/* An arrival: {gen, serial} as gen * 10 + serial (gen -1: refused). */
static long long
arrive(const char *lua, const char *token, const char *deadline)
{
	char key[128];
	long long v;

	snprintf(key, sizeof key, "dmutex:barop:{ttl}:%s", token);
	redisReply *r = th_redis_cmd(&srv, "EVAL %s 2 dmutex:barrier:{ttl} %s a 3 dmutex:barwake:{ttl} "
			"5000 %s", lua, key, deadline);
	cr_assert(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2, "%s",
			r && r->type == REDIS_REPLY_ERROR ? r->str : "not {gen, serial}");
	v = r->element[0]->integer * 10 + r->element[1]->integer;
	freeReplyObject(r);
	return v;
}

/* Issue 25 defect 3, on the server's side (barrier_wait.lua): as
 * sem::retry_past_its_deadline_is_refused_not_applied. */
Test(barrier, retry_past_its_deadline_is_refused_not_counted)
{
	DMT_REDIS_STATE("barrier_wait.lua run on Redis directly");
	const char *lua = script("barrier_wait.lua");
	redisReply *t = th_redis_cmd(&srv, "TIME");
	char past[32], future[32];

	cr_assert(t && t->type == REDIS_REPLY_ARRAY && t->elements == 2);
	long long now = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
	freeReplyObject(t);
	snprintf(past, sizeof past, "%lld", now - 1);
	snprintf(future, sizeof future, "%lld", now + 60000);

	cr_assert_eq(arrive(lua, "a", "0"), 0);                 /* gen 0, not serial */
	long long ttl = th_redis_int(&srv, "PTTL dmutex:barop:{ttl}:a");
	cr_assert(ttl > 5000 && ttl <= 6000, "kept %lld ms for a 5000 ms window", ttl);
	cr_assert_eq(arrive(lua, "a", past), 0);                /* kept: the first result */
	cr_assert_eq(arrive(lua, "b", past), -10);              /* refused: {-1, 0} */
	cr_assert_eq(th_redis_int(&srv, "HGET dmutex:barrier:{ttl} arrived"), 1);
	cr_assert_eq(arrive(lua, "b", future), 0);
	cr_assert_eq(arrive(lua, "c", future), 1);              /* the third: serial */
	cr_assert_eq(th_redis_int(&srv, "HGET dmutex:barrier:{ttl} gen"), 1);
}
