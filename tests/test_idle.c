/*
 * Issue 16 item 3: the state of an idle name expires, and fencing tokens
 * stay strictly increasing across the expiry (token = max(last + 1, server
 * TIME in ms << 20)); a not-recoverable state never expires silently; keys
 * of an unknown version are EIO, version-1 keys are taken over.
 *
 * idle_ms is short here (300 ms), and the lease (1 s: an unlock leaves the
 * meta hash the rest of it, release.lua), so that expiry is seen within a
 * test; every wait for it polls with a deadline.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmutex.h"
#include "harness.h"
#include "dmt.h"

static struct th_redis srv;
static char url[700];

static void
up(void)
{
	cr_assert_eq(th_redis_start(&srv, NULL), 0);
	dmt_url(url, sizeof url, NULL, srv.port, "idle_ms=300&lease_ms=1000");
}

static void
down(void)
{
	dmutex_set_logger(NULL, NULL);
	th_redis_stop(&srv);
}

TestSuite(idle, .init = up, .fini = down, .timeout = 30);

static int
keys_gone(void *arg)
{
	const char *name = arg;
	char lk[600], mk[600];

	dmt_lock_key(lk, sizeof lk, name);
	dmt_meta_key(mk, sizeof mk, name);
	return th_redis_int(&srv, "EXISTS %s %s", lk, mk) == 0;
}

static uint64_t
lock_fence_unlock(dmutex_t *m)
{
	uint64_t tok = 0;

	cr_assert_eq(dmutex_lock(m), 0);
	cr_assert_eq(dmutex_fence(m, &tok), 0);
	cr_assert_eq(dmt_unlock_answered(m), 0);
	return tok;
}

/* The server's clock in ms, as acquire.lua reads it. */
static long long
server_ms(void)
{
	redisReply *r = th_redis_cmd(&srv, "TIME");
	long long ms;

	cr_assert(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
	ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
	freeReplyObject(r);
	return ms;
}

Test(idle, idle_state_expires_and_tokens_still_grow)
{
	dmutex_client_t *c;
	dmutex_t m;
	char mk[600];
	long long t0 = server_ms(), pttl;
	uint64_t before, after;

	cr_assert_eq(dmt_open_mutex(&c, &m, url, "idle-a", NULL), 0);
	before = lock_fence_unlock(&m);
	/* The token is the server's clock << 20 (and a sequence). */
	cr_assert_geq(before >> 20, (uint64_t)t0, "token %llu below the clock %lld", (unsigned long long)before, t0);
	cr_assert_leq(before >> 20, (uint64_t)server_ms());
	dmt_meta_key(mk, sizeof mk, "idle-a");
	pttl = th_redis_int(&srv, "PTTL %s", mk);
	/* The rest of the lease and idle_ms: an unlock does not shorten it. */
	cr_assert(pttl > 0 && pttl <= 1300, "meta PTTL %lld after unlock, want 1..1300", pttl);
	cr_assert(th_wait_until(keys_gone, "idle-a", 5000), "the idle name's keys stayed");

	/* Recreated: a new token, above every earlier one. */
	after = lock_fence_unlock(&m);
	cr_assert_gt(after, before, "token %llu after expiry, %llu before",
			(unsigned long long)after, (unsigned long long)before);
	/* And within one life of the name, strictly increasing too. */
	cr_assert_gt(lock_fence_unlock(&m), after);
	dmt_close_mutex(c, &m);
}

/* A held name outlives idle_ms: the renewals keep its meta hash (a robust
 * hold's: a non-robust one keeps no state there, key layout 3). */
Test(idle, held_name_keeps_its_state)
{
	/* 600 ms, 3x under the sanitizers: a 300 ms lease can be lost on a
	 * loaded 2-core machine (renewal due every 100 ms), which tests the
	 * machine; the leases passed below are still many idle_ms (300). */
	struct dmt_attr o = { .lease_ms = 600 * (unsigned)dmt_slowdown(), .robust = DMUTEX_ROBUST };
	dmutex_client_t *c;
	dmutex_t m;
	char mk[600], st[32];
	atomic_int lost = 0;

	o.onlost = dmt_count_lost;
	o.arg = &lost;
	cr_assert_eq(dmt_open_mutex(&c, &m, url, "idle-held", &o), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	/* Time is under test: several leases and idle periods pass. */
	dmt_pass_time_ms(3 * o.lease_ms);
	dmt_meta_key(mk, sizeof mk, "idle-held");
	cr_assert_eq(dmt_meta_state(&srv, "idle-held", st, sizeof st), 1, "meta gone while held");
	cr_assert_str_eq(st, "held");
	cr_assert_gt(th_redis_int(&srv, "PTTL %s", mk), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(atomic_load(&lost), 0);
	cr_assert(th_wait_until(keys_gone, "idle-held", 5000), "the keys stayed after the unlock");
	dmt_close_mutex(c, &m);
}

/* Not recoverable: kept (no TTL) while idle names around it expire, and
 * still refusing lockers. */
Test(idle, not_recoverable_never_expires)
{
	struct dmt_attr o = { .robust = DMUTEX_ROBUST };
	dmutex_client_t *c, *c2;
	dmutex_t m, ctl;
	char mk[600], lk[600], st[32];

	/* The state a robust holder leaves when its lease runs out. */
	dmt_meta_key(mk, sizeof mk, "idle-nr");
	dmt_lock_key(lk, sizeof lk, "idle-nr");
	freeReplyObject(th_redis_cmd(&srv, "HSET %s v 3 state held fence 1", mk));
	cr_assert_eq(dmt_open_mutex(&c, &m, url, "idle-nr", &o), 0);
	cr_assert_eq(dmutex_lock(&m), EOWNERDEAD);
	cr_assert_eq(dmutex_unlock(&m), 0);     /* without dmutex_consistent */
	cr_assert_eq(dmt_meta_state(&srv, "idle-nr", st, sizeof st), 1);
	cr_assert_str_eq(st, "notrec");
	/* The mark is the lock key (key layout 3): no locker's SET NX passes. */
	cr_assert_eq(th_redis_int(&srv, "PTTL %s", lk), -1, "a not-recoverable state has a TTL");

	/* A name used after it has expired: idle_ms has passed for both. */
	cr_assert_eq(dmt_open_mutex(&c2, &ctl, url, "idle-ctl", NULL), 0);
	lock_fence_unlock(&ctl);
	cr_assert(th_wait_until(keys_gone, "idle-ctl", 5000), "the control name's keys stayed");
	cr_assert_eq(dmt_meta_state(&srv, "idle-nr", st, sizeof st), 1, "the not-recoverable state expired");
	cr_assert_str_eq(st, "notrec");
	cr_assert_eq(dmutex_lock(&m), ENOTRECOVERABLE);
	dmt_close_mutex(c2, &ctl);
	dmt_close_mutex(c, &m);
}

static atomic_int version_lines;

static void
count_version(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	if (strstr(msg, "key version 4"))
		atomic_fetch_add(&version_lines, 1);
}

/* The lock key as a later layout might leave it: another version digit. */
#define V4_VALUE "4 f00d 7 0 - 60000 1 1 1 - elsewhere"

Test(idle, unknown_version_is_eio_version_1_taken_over)
{
	dmutex_client_t *c;
	dmutex_t m, m2, m1;
	char mk[600], lk[600], v[8];
	redisReply *r;
	uint64_t tok;

	dmutex_set_logger(count_version, NULL);
	dmt_lock_key(lk, sizeof lk, "idle-v4");
	freeReplyObject(th_redis_cmd(&srv, "SET %s %s", lk, V4_VALUE));
	cr_assert_eq(dmt_open_mutex(&c, &m, url, "idle-v4", NULL), 0);
	cr_assert_eq(dmutex_trylock(&m), EIO);
	cr_assert_eq(dmutex_lock(&m), EIO);
	cr_assert_geq(atomic_load(&version_lines), 1, "no log line names the version");
	r = th_redis_cmd(&srv, "GET %s", lk);
	cr_assert(r && r->type == REDIS_REPLY_STRING);
	cr_assert_str_eq(r->str, V4_VALUE, "keys of another version were changed");
	freeReplyObject(r);

	/* A version-2 client's lock key is a hash (WRONGTYPE to SET ... GET):
	 * the two never share a name, EIO rather than both holding it. */
	dmt_lock_key(lk, sizeof lk, "idle-v2");
	freeReplyObject(th_redis_cmd(&srv, "HSET %s v 2 token f00d fence 7 died 0", lk));
	cr_assert_eq(th_redis_int(&srv, "PEXPIRE %s 60000", lk), 1);
	cr_assert_eq(dmt_init_mutex(&m2, "idle-v2", c, NULL), 0);
	cr_assert_eq(dmutex_trylock(&m2), EIO);
	cr_assert_eq(dmutex_lock(&m2), EIO);
	cr_assert_eq(th_redis_int(&srv, "HGET %s fence", lk), 7, "keys of another version were changed");
	cr_assert_eq(dmutex_destroy(&m2), 0);

	/* Version 1 wrote no v, and counted from 1. */
	dmt_meta_key(mk, sizeof mk, "idle-v1");
	freeReplyObject(th_redis_cmd(&srv, "HSET %s fence 5", mk));
	cr_assert_eq(dmt_init_mutex(&m1, "idle-v1", c, NULL), 0);
	tok = lock_fence_unlock(&m1);
	cr_assert_gt(tok, 5);
	cr_assert_eq(dmt_hget(&srv, mk, "v", v, sizeof v), 1);
	cr_assert_str_eq(v, "3");
	cr_assert_eq(dmutex_destroy(&m1), 0);
	dmt_close_mutex(c, &m);
}
