/*
 * Issue 15 item 1: cached leases (README "Cached leases").  A process that
 * unlocks keeps the lease while nobody else asks; its threads lock again
 * with no round trip; another process revokes it at once; tokens keep
 * growing across local holds and hand-overs; an idle kept lease is
 * released; a forked child never uses its parent's; a process that dies
 * with one is no owner that died; lease_cache=off and the attribute turn
 * it off; robust mutexes do not cache.
 *
 * "Another process" is another client where only the lease matters (a
 * client is what Redis sees), a forked child where the process does.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dmutex.h"
#include "harness.h"
#include "dmt.h"

static struct th_redis srv;
static char url[700];
static pid_t child_pid;

static void
up(void)
{
	cr_assert_eq(th_redis_start(&srv, NULL), 0);
	dmt_url(url, sizeof url, NULL, srv.port, "lease_cache=on");
}

static void
down(void)
{
	dmt_reap(&child_pid);
	th_redis_stop_all();
}

TestSuite(cache, .init = up, .fini = down, .timeout = 90);

static int
cached(const char *name)
{
	char v[600];

	return dmt_lock_field(&srv, name, "cache", v, sizeof v) == 1;
}

static int
lock_gone(void *arg)
{
	return dmt_lock_exists(&srv, arg) == 0;
}

static uint64_t
cycle(dmutex_t *m)
{
	uint64_t tok = 0;

	cr_assert_eq(dmutex_lock(m), 0);
	cr_assert_eq(dmutex_fence(m, &tok), 0);
	cr_assert_eq(dmutex_unlock(m), 0);
	return tok;
}

/* A lease is kept from the second hold in a row on: a name locked once
 * is released at its unlock, as without caching. */
static uint64_t
warm(dmutex_t *m, const char *name)
{
	uint64_t t1 = cycle(m), t2;

	cr_assert(!cached(name), "a name locked once was kept");
	cr_assert_eq(dmt_lock_exists(&srv, name), 0, "a name locked once was not released");
	t2 = cycle(m);
	cr_assert_gt(t2, t1);
	cr_assert(cached(name), "the lease was not kept");
	return t2;
}

Test(cache, a_relock_in_the_same_process_needs_no_round_trip)
{
	const char *name = "cache-local";
	dmutex_client_t *c;
	dmutex_t m;
	long long before, after;
	char state[32];
	uint64_t last = 0;

	cr_assert_eq(dmt_open_mutex(&c, &m, url, name, NULL), 0);
	last = warm(&m, name);
	/* A kept lease is a non-robust hold: it leaves no robust state (key
	 * layout 3), only the lock key's c flag. */
	cr_assert_eq(dmt_meta_state(&srv, name, state, sizeof state), 0, "state '%s'", state);
	before = dmt_cmd_calls(&srv, "evalsha", "eval", NULL);
	/* More than one block of reserved tokens (4096): one refill. */
	for (int i = 0; i < 3000; i++) {
		uint64_t tok = cycle(&m);
		cr_assert_gt(tok, last, "token %d did not grow", i);
		last = tok;
		cr_assert_eq(dmutex_trylock(&m), 0);
		cr_assert_eq(dmutex_unlock(&m), 0);
	}
	after = dmt_cmd_calls(&srv, "evalsha", "eval", NULL);
	/* A renewal now and then, nothing per lock. */
	cr_assert_leq(after - before, 8, "%lld scripts for 6000 local holds", after - before);
	dmt_close_mutex(c, &m);
	/* Destroying the last mutex of the name gives the lease back. */
	cr_assert_eq(dmt_lock_exists(&srv, name), 0);
}

/* A kept lease's block of reserved tokens is one HGET of the counter and
 * one HSET of its last token (with the layout version): no HINCRBY, and
 * no second HGET to read what it wrote (issue 28: the pool keeps 0.3
 * leases a job; 9 calls inside lease_cache.lua before, 6 now). */
Test(cache, a_block_of_tokens_is_one_read_and_one_write_of_the_counter)
{
	const char *name = "cache-block";
	dmutex_client_t *c;
	dmutex_t m;
	long long hset, hget, hincrby;
	uint64_t last;

	cr_assert_eq(dmt_open_mutex(&c, &m, url, name, NULL), 0);
	last = warm(&m, name);
	hset = dmt_cmd_calls(&srv, "hset", NULL);
	hget = dmt_cmd_calls(&srv, "hget", NULL);
	hincrby = dmt_cmd_calls(&srv, "hincrby", NULL);
	/* More than a block (4096 tokens): at least one more reserved. */
	for (int i = 0; i < 5000; i++) {
		uint64_t tok = cycle(&m);
		cr_assert_gt(tok, last, "token %d did not grow", i);
		last = tok;
	}
	hset = dmt_cmd_calls(&srv, "hset", NULL) - hset;
	hget = dmt_cmd_calls(&srv, "hget", NULL) - hget;
	hincrby = dmt_cmd_calls(&srv, "hincrby", NULL) - hincrby;
	cr_assert_geq(hset, 1, "no block reserved in 5000 holds");
	cr_assert_eq(hincrby, 0, "%lld HINCRBY for %lld blocks", hincrby, hset);
	cr_assert_eq(hget, hset, "%lld HGET for %lld blocks", hget, hset);
	dmt_close_mutex(c, &m);
}

/* A keep reserves no tokens: most programs never ask a local hold for
 * one (issue 28: a pool keeps 0.4 leases a job, 7 calls each with a block,
 * 3 without).  The first local hold that asks reserves a block, above the
 * hold that took the lease from Redis; the next takes the following token
 * with no round trip; the next holder elsewhere is above both. */
Test(cache, a_kept_lease_reserves_tokens_only_when_a_local_hold_asks)
{
	const char *name = "cache-lazy-block";
	dmutex_client_t *c, *c2;
	dmutex_t m, m2;
	long long hset, scripts;
	uint64_t t0, t1, t2, t3;

	cr_assert_eq(dmt_open_mutex(&c, &m, url, name, &(struct dmt_attr){ .lease_ms = 30000 }), 0);
	cr_assert_eq(dmt_open_mutex(&c2, &m2, url, name, &(struct dmt_attr){ .lease_ms = 30000 }), 0);
	/* Two holds from Redis, the second kept at its unlock (the count
	 * starts after its token). */
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_fence(&m, &t0), 0);
	hset = dmt_cmd_calls(&srv, "hset", NULL);
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert(cached(name), "the lease was not kept");
	cr_assert_eq(dmt_cmd_calls(&srv, "hset", NULL) - hset, 0, "a keep with no token asked for "
			"wrote the counter %lld times", dmt_cmd_calls(&srv, "hset", NULL) - hset);
	/* A local hold that asks for no token: no I/O. */
	scripts = dmt_evalsha_calls(&srv);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmt_evalsha_calls(&srv) - scripts, 0, "%lld scripts for a local hold",
			dmt_evalsha_calls(&srv) - scripts);
	/* Local holds that ask: tokens on demand, one block for both. */
	t1 = cycle(&m);
	t2 = cycle(&m);
	cr_assert(cached(name), "the lease is no longer kept: the test proves nothing");
	cr_assert_eq(dmt_evalsha_calls(&srv) - scripts, 1, "%lld scripts for two local holds' tokens",
			dmt_evalsha_calls(&srv) - scripts);
	cr_assert_gt(t1, t0, "a local hold's token %llu is not above the kept hold's %llu",
			(unsigned long long)t1, (unsigned long long)t0);
	cr_assert_eq(t2, t1 + 1, "the second local hold's token %llu after %llu",
			(unsigned long long)t2, (unsigned long long)t1);
	/* Elsewhere, once the lease is given back: above the block. */
	cr_assert_eq(dmutex_lock(&m2), 0);
	cr_assert_eq(dmutex_fence(&m2, &t3), 0);
	cr_assert_gt(t3, t2 + 4000, "the next holder's token %llu is not above the block ending past %llu",
			(unsigned long long)t3, (unsigned long long)t2);
	cr_assert_eq(dmutex_unlock(&m2), 0);
	dmt_close_mutex(c2, &m2);
	dmt_close_mutex(c, &m);
}

/* A counter that went back (a restore from an older snapshot, a failover
 * to a replica that missed writes) with the lock key still ours: the next
 * block still starts above every token handed out, from the server's
 * clock, as any token does (token.lua). */
Test(cache, a_block_reserved_after_the_counter_went_back_stays_above_every_token)
{
	const char *name = "cache-counter-back";
	dmutex_client_t *c;
	dmutex_t m;
	uint64_t first, tok, last;
	redisReply *r;

	cr_assert_eq(dmt_open_mutex(&c, &m, url, name, &(struct dmt_attr){ .lease_ms = 30000 }), 0);
	last = warm(&m, name);
	first = cycle(&m);      /* the first local hold's: a block reserved */
	cr_assert_gt(first, last);
	last = first;
	r = th_redis_cmd(&srv, "HSET dmutex:meta:{%s} fence %llu", name, (unsigned long long)(first - 1));
	cr_assert(r && r->type == REDIS_REPLY_INTEGER, "HSET failed");
	freeReplyObject(r);
	/* The rest of the block, then a new one. */
	for (int i = 0; i < 4200; i++) {
		tok = cycle(&m);
		cr_assert_gt(tok, last, "local hold %d: token %llu after %llu", i, (unsigned long long)tok,
				(unsigned long long)last);
		last = tok;
	}
	cr_assert(cached(name), "the lease is no longer kept: the test proves nothing");
	dmt_close_mutex(c, &m);
}

/* Foreign data in the meta hash: a local hold's first token is refused
 * (EIO, as dmutex_fence says), at once, not asked for again while the
 * renewer keeps the lease alive. */
Test(cache, a_local_holds_token_refused_by_the_server_is_eio, .timeout = 30)
{
	const char *name = "cache-refused";
	dmutex_client_t *c;
	dmutex_t m;
	uint64_t tok = 0;
	long long t0;
	redisReply *r;
	int rc;

	cr_assert_eq(dmt_open_mutex(&c, &m, url, name, &(struct dmt_attr){ .lease_ms = 1500 }), 0);
	warm(&m, name);
	cr_assert_eq(dmutex_lock(&m), 0);
	r = th_redis_cmd(&srv, "SET dmutex:meta:{%s} foreign", name);
	cr_assert(r && r->type == REDIS_REPLY_STATUS, "SET failed");
	freeReplyObject(r);
	t0 = th_now_ms();
	rc = dmutex_fence(&m, &tok);
	cr_assert_eq(rc, EIO, "the token of a local hold the server refuses: %d (%s)", rc,
			dmutex_strerror(rc));
	cr_assert_lt(th_now_ms() - t0, 5000, "refused after %lld ms", th_now_ms() - t0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	r = th_redis_cmd(&srv, "DEL dmutex:meta:{%s}", name);
	freeReplyObject(r);
	dmt_close_mutex(c, &m);
}

/* A local hold on a kept lease is not in the client's count of holds
 * (internal.h held_counted): close still refuses while it runs, and
 * closes once it ended and its mutex went. */
Test(cache, client_close_while_a_kept_lease_is_held_locally_ebusy)
{
	const char *name = "cache-close";
	dmutex_client_t *c;
	dmutex_t m;

	cr_assert_eq(dmt_open_mutex(&c, &m, url, name, NULL), 0);
	warm(&m, name);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_client_close(c), EBUSY);
	cr_assert(cached(name), "close gave the kept lease back");
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
	cr_assert_eq(dmt_lock_exists(&srv, name), 0);
}

Test(cache, another_client_revokes_a_kept_lease_at_once)
{
	const char *name = "cache-revoke";
	dmutex_client_t *c1, *c2;
	dmutex_t m1, m2;
	struct timespec at;
	uint64_t t1, t2, t3;
	long long t0;

	/* A long lease: an idle drop (a third of it) would take 10 s. */
	cr_assert_eq(dmt_open_mutex(&c1, &m1, url, name, &(struct dmt_attr){ .lease_ms = 30000 }), 0);
	cr_assert_eq(dmt_open_mutex(&c2, &m2, url, name, &(struct dmt_attr){ .lease_ms = 30000 }), 0);
	t1 = warm(&m1, name);
	/* A trylock elsewhere fails, and asks for the lease back. */
	cr_assert_eq(dmutex_trylock(&m2), EBUSY);
	t0 = th_now_ms();
	dmt_deadline_in(CLOCK_REALTIME, 20000, &at);
	cr_assert_eq(dmutex_timedlock(&m2, &at), 0);
	cr_assert_lt(th_now_ms() - t0, 8000, "revocation took %lld ms", th_now_ms() - t0);
	cr_assert_eq(dmutex_fence(&m2, &t2), 0);
	cr_assert_gt(t2, t1, "the other client's token is not above the kept lease's");
	/* Held elsewhere now: the first client asks Redis, and waits. */
	cr_assert_eq(dmutex_trylock(&m1), EBUSY);
	cr_assert_eq(dmutex_unlock(&m2), 0);
	t3 = cycle(&m1);
	cr_assert_gt(t3, t2);
	dmt_close_mutex(c2, &m2);
	dmt_close_mutex(c1, &m1);
}

Test(cache, an_idle_kept_lease_is_released)
{
	const char *name = "cache-idle";
	dmutex_client_t *c;
	dmutex_t m;
	char state[32];

	cr_assert_eq(dmt_open_mutex(&c, &m, url, name, &(struct dmt_attr){ .lease_ms = 900 }), 0);
	warm(&m, name);
	cr_assert(th_wait_until(lock_gone, (void *)name, 10000), "an idle kept lease stayed");
	/* Released cleanly, not as an owner that died. */
	cr_assert_eq(dmt_meta_state(&srv, name, state, sizeof state), 0, "state '%s'", state);
	dmt_close_mutex(c, &m);
}

static int
keys_gone_after_unlock(dmutex_t *m, const char *name)
{
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(dmutex_lock(m), 0);
		cr_assert_eq(dmutex_unlock(m), 0);
		if (dmt_lock_exists(&srv, name) != 0)
			return 0;
	}
	return 1;
}

Test(cache, lease_cache_off_the_attribute_and_robust_mutexes_release_at_unlock)
{
	char off[800];
	dmutex_client_t *c;
	dmutex_attr_t a;
	dmutex_t m;
	int on = -1;

	th_url_with(off, sizeof off, srv.url, "lease_cache=off");
	cr_assert_eq(dmt_open_mutex(&c, &m, off, "cache-off-url", NULL), 0);
	cr_assert(keys_gone_after_unlock(&m, "cache-off-url"));
	dmt_close_mutex(c, &m);

	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_getleasecache(&a, &on), 0);
	cr_assert_eq(on, 1, "caching is not the default");
	cr_assert_eq(dmutex_attr_setleasecache(&a, 2), EINVAL);
	cr_assert_eq(dmutex_attr_setleasecache(NULL, 0), EINVAL);
	cr_assert_eq(dmutex_attr_getleasecache(&a, NULL), EINVAL);
	cr_assert_eq(dmutex_attr_setleasecache(&a, 0), 0);
	cr_assert_eq(dmutex_attr_getleasecache(&a, &on), 0);
	cr_assert_eq(on, 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	cr_assert_eq(dmutex_init(&m, "cache-off-attr", &a), 0);
	cr_assert(keys_gone_after_unlock(&m, "cache-off-attr"));
	dmutex_destroy(&m);
	cr_assert_eq(dmutex_attr_setleasecache(&a, 1), 0);
	cr_assert_eq(dmutex_attr_setrobust(&a, DMUTEX_ROBUST), 0);
	cr_assert_eq(dmutex_init(&m, "cache-off-robust", &a), 0);
	cr_assert(keys_gone_after_unlock(&m, "cache-off-robust"));
	dmutex_destroy(&m);
	dmutex_attr_destroy(&a);
	dmutex_client_close(c);
}

/* The documented default (README, dmutex_client_open(3)): on.  A client
 * opened with no option keeps the lease from the second hold in a row. */
Test(cache, a_client_without_the_option_caches)
{
	dmutex_client_t *c;
	dmutex_t m;

	cr_assert_eq(dmt_open_mutex(&c, &m, srv.url, "cache-default", NULL), 0);
	warm(&m, "cache-default");
	dmt_close_mutex(c, &m);
	cr_assert_eq(dmt_lock_exists(&srv, "cache-default"), 0, "destroy did not give the lease back");
}

Test(cache, bad_lease_cache_values_are_refused)
{
	char bad[800];
	dmutex_client_t *c;

	th_url_with(bad, sizeof bad, srv.url, "lease_cache=maybe");
	cr_assert_eq(dmutex_client_open(&c, bad), EINVAL);
	th_url_with(bad, sizeof bad, srv.url, "lease_cache=on&lease_cache=off");
	cr_assert_eq(dmutex_client_open(&c, bad), EINVAL);
}

/* Shared with a child: its token, and what its lock said. */
struct shared {
	uint64_t fence, fence2;
	int rc;
};

static struct shared *sh;
static dmutex_t *fork_m;

static int
child_locks(void *arg)
{
	struct timespec at;
	int rc;

	(void)arg;
	dmt_deadline_in(CLOCK_REALTIME, 20000, &at);
	rc = dmutex_timedlock(fork_m, &at);
	sh->rc = rc;
	if (rc)
		return 1;
	if (dmutex_fence(fork_m, &sh->fence) || dmutex_unlock(fork_m))
		return 2;
	return 0;
}

Test(cache, a_forked_child_does_not_use_its_parents_kept_lease)
{
	const char *name = "cache-fork";
	dmutex_client_t *c;
	dmutex_t m;
	uint64_t mine;

	sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(sh, MAP_FAILED);
	sh->rc = -1;
	cr_assert_eq(dmt_open_mutex(&c, &m, url, name, &(struct dmt_attr){ .lease_ms = 30000 }), 0);
	mine = warm(&m, name);
	fork_m = &m;
	child_pid = th_spawn(child_locks, NULL);
	cr_assert_gt(child_pid, 0);
	cr_assert_eq(th_wait_child(child_pid, 30000), 0, "child: lock said %d", sh->rc);
	child_pid = 0;
	/* It asked Redis (which made us give the lease back): a new token. */
	cr_assert_gt(sh->fence, mine);
	/* It locked once: it released at its unlock and kept nothing, though
	 * this process had locked the name just before the fork. */
	cr_assert_eq(dmt_lock_exists(&srv, name), 0, "the child kept the lease it took once");
	cr_assert_gt(cycle(&m), sh->fence);
	dmt_close_mutex(c, &m);
	munmap(sh, sizeof *sh);
}

static int
child_keeps_then_waits(void *arg)
{
	struct th_sync *s = arg;
	dmutex_client_t *c;
	dmutex_t m;
	char u[800];

	th_url_with(u, sizeof u, url, "lease_ms=1000");
	if (dmt_open_mutex(&c, &m, u, "cache-death", NULL))
		return 1;
	for (int i = 0; i < 2; i++)
		if (dmutex_lock(&m) || dmutex_unlock(&m))
			return 2;
	th_sync_post(s);
	for (;;)
		pause();
}

Test(cache, a_process_that_dies_with_a_kept_lease_is_no_owner_that_died)
{
	const char *name = "cache-death";
	struct th_sync s;
	dmutex_client_t *c;
	dmutex_t m;
	struct timespec at;
	char state[32];

	cr_assert_eq(th_sync_init(&s), 0);
	child_pid = th_spawn(child_keeps_then_waits, &s);
	cr_assert_gt(child_pid, 0);
	cr_assert_eq(th_sync_wait(&s, 20000), 0);
	cr_assert(cached(name));
	cr_assert_eq(dmt_meta_state(&srv, name, state, sizeof state), 0, "state '%s'", state);
	dmt_reap(&child_pid);
	cr_assert_eq(dmt_open_mutex(&c, &m, url, name,
			&(struct dmt_attr){ .robust = DMUTEX_ROBUST }), 0);
	dmt_deadline_in(CLOCK_REALTIME, 20000, &at);
	cr_assert_eq(dmutex_timedlock(&m, &at), 0, "a kept lease's process death said owner died");
	cr_assert_eq(dmutex_unlock(&m), 0);
	dmt_close_mutex(c, &m);
	th_sync_close(&s);
}

/* Threads of one process on one lock, each hold checked: no overlap,
 * tokens increasing.  hold_ns of busy work inside each hold. */
struct contest {
	dmutex_t *m;
	atomic_int inside, overlaps, backwards, errors, stop;
	atomic_ullong last_fence;
	atomic_long holds;
	int64_t hold_ns;
};

static void
contest_hold(struct contest *t, dmutex_t *m, int rc)
{
	uint64_t f = 0;

	if (rc) {
		atomic_fetch_add(&t->errors, 1);
		return;
	}
	if (atomic_fetch_add(&t->inside, 1))
		atomic_fetch_add(&t->overlaps, 1);
	if (dmutex_fence(m, &f) || f <= atomic_load(&t->last_fence))
		atomic_fetch_add(&t->backwards, 1);
	atomic_store(&t->last_fence, f);
	for (int64_t end = dmt_now_ns() + t->hold_ns; dmt_now_ns() < end;)
		;
	atomic_fetch_sub(&t->inside, 1);
	if (dmutex_unlock(m))
		atomic_fetch_add(&t->errors, 1);
}

/* Eight threads of one process on one lock: they take the kept lease in
 * turn with no round trip (issue 15: <= 0.1 Redis commands per hold). */
static void *
team_member(void *arg)
{
	struct contest *t = arg;

	for (int i = 0; i < 500; i++)
		contest_hold(t, t->m, dmutex_lock(t->m));
	return NULL;
}

Test(cache, eight_threads_of_one_process_take_the_kept_lease_in_turn)
{
	const char *name = "cache-team";
	struct contest t = { 0 };
	pthread_t th[8];
	dmutex_client_t *c;
	dmutex_t m;
	long long before, after;

	cr_assert_eq(dmt_open_mutex(&c, &m, url, name, NULL), 0);
	atomic_store(&t.last_fence, warm(&m, name));
	t.m = &m;
	before = dmt_cmd_calls(&srv, "evalsha", "eval", NULL);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, team_member, &t), 0);
	for (int i = 0; i < 8; i++)
		pthread_join(th[i], NULL);
	after = dmt_cmd_calls(&srv, "evalsha", "eval", NULL);
	cr_assert_eq(atomic_load(&t.errors), 0);
	cr_assert_eq(atomic_load(&t.overlaps), 0, "two threads held it at once");
	cr_assert_eq(atomic_load(&t.backwards), 0, "a token did not grow");
	cr_assert_leq(after - before, 400, "%lld scripts for 4000 holds", after - before);
	dmt_close_mutex(c, &m);
}

/* Four threads of ours lock and unlock in a loop while another client
 * (what Redis sees of another process) asks for the same lock again and
 * again.  The lease serves the threads of ours that wait for it in
 * batches (README "Cached leases": at most 32 local holds, 5 ms), so the
 * other client gets it every time, with one lease_cache.lua per batch
 * instead of two commands a hold; and no two holds overlap, tokens grow
 * across both clients. */
static void *
contest_member(void *arg)
{
	struct contest *t = arg;

	while (!atomic_load(&t->stop)) {
		contest_hold(t, t->m, dmutex_lock(t->m));
		atomic_fetch_add(&t->holds, 1);
	}
	return NULL;
}

Test(cache, a_contended_lease_serves_our_waiting_threads_in_batches)
{
	const char *name = "cache-batch";
	/* 200 us of work a hold, so that our other threads wait for the
	 * lock at most unlocks. */
	struct contest t = { .hold_ns = 200000 };
	pthread_t th[4];
	dmutex_client_t *c1, *c2;
	dmutex_t m1, m2;
	long long before, after;
	long held_before, held;

	cr_assert_eq(dmt_open_mutex(&c1, &m1, url, name, &(struct dmt_attr){ .lease_ms = 30000 }), 0);
	cr_assert_eq(dmt_open_mutex(&c2, &m2, url, name, &(struct dmt_attr){ .lease_ms = 30000 }), 0);
	atomic_store(&t.last_fence, warm(&m1, name));
	t.m = &m1;
	for (int i = 0; i < 4; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, contest_member, &t), 0);
	for (int64_t end = dmt_now_ns() + 20000 * 1000000LL; atomic_load(&t.holds) < 100;)
		cr_assert_lt(dmt_now_ns(), end, "our threads did not lock");
	before = dmt_cmd_calls(&srv, "evalsha", "eval", "set", NULL);
	held_before = atomic_load(&t.holds);
	/* The other client, twenty times: a batch ends at its bound or at
	 * an unlock no thread of ours waits for.  Between two of its holds
	 * it lets ours have ten (its one thread would otherwise ask again
	 * before our waiting thread hears the release). */
	for (int i = 0; i < 20; i++) {
		struct timespec at;
		long mark = atomic_load(&t.holds);

		for (int64_t end = dmt_now_ns() + 20000 * 1000000LL; atomic_load(&t.holds) < mark + 10;)
			cr_assert_lt(dmt_now_ns(), end, "our threads did not get the lock back");
		dmt_deadline_in(CLOCK_REALTIME, 20000, &at);
		contest_hold(&t, &m2, dmutex_timedlock(&m2, &at));
	}
	after = dmt_cmd_calls(&srv, "evalsha", "eval", "set", NULL);
	held = atomic_load(&t.holds) - held_before;
	atomic_store(&t.stop, 1);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(atomic_load(&t.errors), 0, "a lock or unlock failed (the other client timed out?)");
	cr_assert_eq(atomic_load(&t.overlaps), 0, "two holds at once");
	cr_assert_eq(atomic_load(&t.backwards), 0, "a token did not grow");
	cr_assert_gt(held, 0);
	/* Without batches each of our holds costs a SET and an unlock.lua
	 * at least (6 scripts and SETs a hold, counted so). */
	cr_assert_lt((double)(after - before) / (double)held, 2.0,
			"%lld scripts and SETs for %ld holds of ours and 20 of the other client",
			after - before, held);
	dmt_close_mutex(c2, &m2);
	dmt_close_mutex(c1, &m1);
}

Test(cache, fair_mutexes_do_not_keep_their_lease)
{
	dmutex_client_t *c;
	dmutex_attr_t a;
	dmutex_t m;

	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	cr_assert_eq(dmutex_attr_setfair(&a, 1), 0);
	cr_assert_eq(dmutex_init(&m, "cache-fair", &a), 0);
	cr_assert(keys_gone_after_unlock(&m, "cache-fair"));
	dmutex_destroy(&m);
	dmutex_attr_destroy(&a);
	dmutex_client_close(c);
}

/* Held from the kept lease by a thread of this process while another
 * process waits: the unlock hands it over at once. */
static int
waiter_child(void *arg)
{
	dmutex_client_t *c;
	dmutex_t m;
	struct timespec at;
	uint64_t f = 0;
	int rc;

	(void)arg;
	if (dmt_open_mutex(&c, &m, url, "cache-handover", &(struct dmt_attr){ .lease_ms = 30000 }))
		return 1;
	dmt_deadline_in(CLOCK_REALTIME, 30000, &at);
	if ((rc = dmutex_timedlock(&m, &at)))
		return rc == ETIMEDOUT ? 3 : 2;
	if (dmutex_fence(&m, &f) || f <= sh->fence)
		return 4;
	sh->rc = (int)(th_now_ms() - (long long)sh->fence2);
	dmutex_unlock(&m);
	dmt_close_mutex(c, &m);
	return 0;
}

Test(cache, a_waiting_process_gets_the_lock_at_the_holders_unlock)
{
	const char *name = "cache-handover";
	dmutex_client_t *c;
	dmutex_t m;
	char v[16];

	sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(sh, MAP_FAILED);
	sh->rc = -1;
	cr_assert_eq(dmt_open_mutex(&c, &m, url, name, &(struct dmt_attr){ .lease_ms = 30000 }), 0);
	warm(&m, name);
	cr_assert_eq(dmutex_lock(&m), 0);       /* local: from the kept lease */
	cr_assert_eq(dmutex_fence(&m, &sh->fence), 0);
	child_pid = th_spawn(waiter_child, NULL);
	cr_assert_gt(child_pid, 0);
	/* The child waits: it marked the lock (acquire.lua's w). */
	for (int64_t end = dmt_now_ns() + 20000 * 1000000LL; dmt_lock_field(&srv, name, "w", v, sizeof v) != 1;)
		cr_assert_lt(dmt_now_ns(), end, "the other process never asked");
	sh->fence2 = (uint64_t)th_now_ms();
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(th_wait_child(child_pid, 30000), 0, "child failed");
	child_pid = 0;
	/* A lease-long wait would be 30 s: the hand-over is one round trip,
	 * plus the child's wake-up on a loaded machine. */
	cr_assert_lt(sh->rc, 5000, "handed over after %d ms", sh->rc);
	dmt_close_mutex(c, &m);
	munmap(sh, sizeof *sh);
}

/* A thread that ends holding a hold taken from the kept lease ends it as
 * any other hold: released at once. */
static void *
take_and_exit(void *arg)
{
	dmutex_lock(arg);
	return NULL;
}

Test(cache, a_thread_that_ends_holding_the_kept_lease_releases_it)
{
	const char *name = "cache-thread-end";
	dmutex_client_t *c;
	dmutex_t m;
	pthread_t th;

	cr_assert_eq(dmt_open_mutex(&c, &m, url, name, &(struct dmt_attr){ .lease_ms = 30000 }), 0);
	warm(&m, name);
	cr_assert_eq(pthread_create(&th, NULL, take_and_exit, &m), 0);
	pthread_join(th, NULL);
	cr_assert(th_wait_until(lock_gone, (void *)name, 10000), "the ended thread's hold stayed");
	cycle(&m);
	dmt_close_mutex(c, &m);
}

static int
keep_and_exit(void *arg)
{
	dmutex_client_t *c;
	dmutex_t m;

	(void)arg;
	if (dmt_open_mutex(&c, &m, url, "cache-exit", &(struct dmt_attr){ .lease_ms = 60000 }))
		return 1;
	for (int i = 0; i < 2; i++)
		if (dmutex_lock(&m) || dmutex_unlock(&m))
			return 2;
	if (dmt_lock_exists(&srv, "cache-exit") != 1)
		return 3;       /* not kept: the test would prove nothing */
	exit(0);            /* no destroy, no close: exit gives it back */
}

Test(cache, a_process_that_exits_gives_its_kept_lease_back)
{
	child_pid = th_spawn(keep_and_exit, NULL);
	cr_assert_gt(child_pid, 0);
	cr_assert_eq(th_wait_child(child_pid, 30000), 0);
	child_pid = 0;
	/* At once: the lease (60 s) has not run out. */
	cr_assert_eq(dmt_lock_exists(&srv, "cache-exit"), 0, "the kept lease outlived its process");
}

Test(cache, destroy_gives_the_kept_lease_back)
{
	const char *name = "cache-destroy";
	dmutex_client_t *c;
	dmutex_t m;

	cr_assert_eq(dmt_open_mutex(&c, &m, url, name, &(struct dmt_attr){ .lease_ms = 60000 }), 0);
	warm(&m, name);
	cr_assert_eq(dmutex_destroy(&m), 0);
	cr_assert_eq(dmt_lock_exists(&srv, name), 0, "destroy kept the lease");
	cr_assert_eq(dmutex_client_close(c), 0);
}

/* A client of srv is blocked: its write waits out a CLIENT PAUSE WRITE. */
static int
a_client_blocked(void *arg)
{
	redisReply *r = th_redis_cmd(&srv, "INFO clients");
	const char *p;
	int n = 0;

	(void)arg;
	if (r && r->type == REDIS_REPLY_STRING && (p = strstr(r->str, "blocked_clients:")))
		n = atoi(p + strlen("blocked_clients:"));
	if (r)
		freeReplyObject(r);
	return n > 0;
}

static void
redis_ok(const char *cmd)
{
	redisReply *r = th_redis_cmd(&srv, cmd);

	cr_assert(r && r->type == REDIS_REPLY_STATUS, "%s failed", cmd);
	freeReplyObject(r);
}

/* The renewer giving back an idle kept lease is the library's own work: a
 * destroy meanwhile waits for it (bounded by the command timeout) instead
 * of calling the unlocked mutex busy.  Found by the torture run, whose
 * worker destroyed its mutexes right after its last unlock and got EBUSY. */
Test(cache, destroy_waits_for_the_renewer_giving_back_an_idle_lease)
{
	const char *name = "cache-destroy-drop";
	char u[800];
	dmutex_client_t *c;
	dmutex_t m;
	long long t0, took;

	/* No counters: the give-back is the client's only write, so the
	 * blocked client seen below is it. */
	dmt_url(u, sizeof u, NULL, srv.port, "lease_cache=on&metrics=0&command_timeout_ms=1000");
	cr_assert_eq(dmt_open_mutex(&c, &m, u, name, &(struct dmt_attr){ .lease_ms = 900 }), 0);
	warm(&m, name);
	/* Idle for a third of the lease, the lease goes back; the paused
	 * server holds that release until its command timeout. */
	redis_ok("CLIENT PAUSE 10000 WRITE");
	cr_assert(th_wait_until(a_client_blocked, NULL, 5000), "the idle kept lease was never given back");
	t0 = th_now_ms();
	cr_assert_eq(dmutex_destroy(&m), 0);
	took = th_now_ms() - t0;
	redis_ok("CLIENT UNPAUSE");
	cr_assert_eq(dmutex_client_close(c), 0);
	cr_assert_leq(took, 1000 + 2000LL * dmt_slowdown(), "destroy waited %lld ms", took);
}

/* The same give-back seen by a trylock of the process's own unlocked
 * mutex: it waits for it and takes the lock, it does not say EBUSY (a
 * single-threaded program would find its own free mutex busy). */
Test(cache, trylock_waits_for_the_renewer_giving_back_an_idle_lease)
{
	const char *name = "cache-trylock-drop";
	char u[800];
	dmutex_client_t *c;
	dmutex_t m;

	dmt_url(u, sizeof u, NULL, srv.port, "lease_cache=on&metrics=0&command_timeout_ms=8000");
	cr_assert_eq(dmt_open_mutex(&c, &m, u, name, &(struct dmt_attr){ .lease_ms = 900 }), 0);
	warm(&m, name);
	/* Held up until the pause ends, the give-back then completes. */
	redis_ok("CLIENT PAUSE 4000 WRITE");
	cr_assert(th_wait_until(a_client_blocked, NULL, 3000), "the idle kept lease was never given back");
	cr_assert_eq(dmutex_trylock(&m), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	dmt_close_mutex(c, &m);
}

/* What `dmutex status NAME` (and --json) prints, into out. */
static void
status_of(const char *name, const char *json, char *out, size_t len)
{
	char cmd[1200];
	size_t n;
	FILE *p;

	cr_assert(getenv("DMUTEX_BIN"), "DMUTEX_BIN is not set (run through meson test)");
	snprintf(cmd, sizeof cmd, "'%s' --url '%s' status %s '%s' 2>&1", getenv("DMUTEX_BIN"), srv.url, json,
			name);
	cr_assert_not_null(p = popen(cmd, "r"));
	n = fread(out, 1, len - 1, p);
	out[n] = 0;
	pclose(p);
}

Test(cache, dmutex_status_shows_a_kept_lease_as_cached)
{
	const char *name = "cache-status";
	dmutex_client_t *c;
	dmutex_t m;
	char out[4096];

	cr_assert_eq(dmt_open_mutex(&c, &m, url, name, &(struct dmt_attr){ .lease_ms = 30000 }), 0);
	cycle(&m);
	status_of(name, "", out, sizeof out);
	cr_assert(strstr(out, "cache-status: free\n"), "%s", out);
	cycle(&m);
	status_of(name, "", out, sizeof out);
	cr_assert(strstr(out, "cache-status: cached\n"), "%s", out);
	cr_assert(strstr(out, "robust:      consistent"), "%s", out);
	status_of(name, "--json", out, sizeof out);
	cr_assert(strstr(out, "\"held\":true,\"cached\":true"), "%s", out);
	/* Held by a thread of ours: Redis sees the same. */
	cr_assert_eq(dmutex_lock(&m), 0);
	status_of(name, "", out, sizeof out);
	cr_assert(strstr(out, "cache-status: cached\n"), "%s", out);
	cr_assert_eq(dmutex_unlock(&m), 0);
	dmt_close_mutex(c, &m);
	status_of(name, "--json", out, sizeof out);
	cr_assert(strstr(out, "\"held\":false,\"cached\":false"), "%s", out);
}

/* The local fast path takes the kept lease only while it is ours for more
 * than half a lease: with the server stopped (no renewal), local locks stop
 * well before the lease's end, not at it. */
Test(cache, no_local_hold_starts_in_the_last_half_of_the_lease)
{
	const char *name = "cache-fresh";
	const long lease = 3000;
	dmutex_client_t *c;
	dmutex_t m;
	char u[800];
	long long paused, failed = 0;
	int rc = 0;

	th_url_with(u, sizeof u, url, "command_timeout_ms=200");
	cr_assert_eq(dmt_open_mutex(&c, &m, u, name, &(struct dmt_attr){ .lease_ms = lease }), 0);
	warm(&m, name);
	cr_assert_eq(th_redis_pause(&srv), 0);
	paused = th_now_ms();
	/* Used all along (no idle drop): only the lease's age stops it. */
	while (th_now_ms() - paused < lease) {
		if ((rc = dmutex_trylock(&m))) {
			failed = th_now_ms();
			break;
		}
		dmutex_unlock(&m);
		dmt_pass_time_ms(20);
	}
	cr_assert_eq(th_redis_resume(&srv), 0);
	cr_assert_neq(failed, 0, "local holds went on to the lease's end");
	cr_assert_eq(rc, EIO, "trylock said %d", rc);
	/* Half a lease (1500 ms) since the last renewal at the latest; the
	 * lease itself ends at about 2940 ms. */
	cr_assert_lt(failed - paused, 2400, "local holds went on %lld ms", failed - paused);
	dmt_close_mutex(c, &m);
}

static int
scripts_ran(void *arg)
{
	(void)arg;
	return dmt_cmd_calls(&srv, "evalsha", "eval", NULL) > 0;
}

/* A restart without persistence ends a kept lease as it ends any hold
 * (README "Limits"); the wake-up connection breaks with the server, which
 * revokes the lease: the renewal thread gives it back (a script on the new
 * server), and from then on the process asks Redis like anyone, so another
 * client that took the free lock keeps it out. */
Test(cache, a_restart_revokes_the_kept_lease)
{
	const char *name = "cache-restart";
	dmutex_client_t *c1, *c2;
	dmutex_t m1, m2;
	uint64_t t1, t2, t3;
	char pid[32], want[32];

	cr_assert_eq(dmt_open_mutex(&c1, &m1, url, name, &(struct dmt_attr){ .lease_ms = 30000 }), 0);
	t1 = warm(&m1, name);
	cr_assert_eq(th_redis_restart(&srv), 0);
	cr_assert_eq(dmt_lock_exists(&srv, name), 0, "the restarted server kept the lock key");
	/* The revoked, unused lease is given back at once, not after an idle
	 * third of the lease (10 s). */
	cr_assert(th_wait_until(scripts_ran, NULL, 5000), "the kept lease was not given back");
	cr_assert_eq(dmt_open_mutex(&c2, &m2, url, name, &(struct dmt_attr){ .lease_ms = 30000 }), 0);
	cr_assert_eq(dmutex_trylock(&m2), 0);
	cr_assert_eq(dmutex_fence(&m2, &t2), 0);
	cr_assert_gt(t2, t1);
	cr_assert_eq(dmutex_trylock(&m1), EBUSY, "a local hold started on a lease that had ended");
	cr_assert_eq(dmutex_unlock(&m2), 0);
	/* Its next hold comes from Redis: its own process in the lock key. */
	cr_assert_eq(dmutex_lock(&m1), 0);
	cr_assert_eq(dmutex_fence(&m1, &t3), 0);
	cr_assert_gt(t3, t2);
	snprintf(want, sizeof want, "%ld", (long)getpid());
	cr_assert(dmt_lock_field(&srv, name, "pid", pid, sizeof pid), "no lock key while held");
	cr_assert_str_eq(pid, want);
	cr_assert_eq(dmutex_unlock(&m1), 0);
	dmt_close_mutex(c2, &m2);
	dmt_close_mutex(c1, &m1);
}

/* A restart while a thread of ours holds the kept lease and another waits
 * for it: the subscription connection breaks (the key may be gone with
 * the restart, and here it is), so the unlock serves no batch (README
 * "Batches"): the waiting thread asks Redis, and holds a lock key of its
 * own, not a local hold on a lease that ended. */
struct blocked {
	dmutex_t *m;
	atomic_int tid, rc, done;
	uint64_t fence;
};

static void *
lock_blocked(void *arg)
{
	struct blocked *b = arg;
	uint64_t f = 0;
	int rc;

	atomic_store(&b->tid, (int)gettid());
	rc = dmutex_lock(b->m);
	if (!rc) {
		dmutex_fence(b->m, &f);
		b->fence = f;
	}
	atomic_store(&b->rc, rc);
	if (!rc) {
		while (!atomic_load(&b->done))
			sched_yield();
		dmutex_unlock(b->m);
	}
	return NULL;
}

static int
lock_returned(void *arg)
{
	return atomic_load((atomic_int *)arg) != -1;
}

/* The thread sleeps (in the lock's local queue: nothing else blocks it). */
static int
thread_sleeps(void *arg)
{
	char path[64], buf[256], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof path, "/proc/self/task/%d/stat", atomic_load((atomic_int *)arg));
	if (!(f = fopen(path, "r")))
		return 0;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	return (p = strrchr(buf, ')')) && p[1] == ' ' && p[2] == 'S';
}

/* The id of the server's first pub/sub client (the wake-up connection),
 * 0 if none. */
static long long
pubsub_id(void)
{
	redisReply *r = th_redis_cmd(&srv, "CLIENT LIST TYPE pubsub");
	const char *p;
	long long id = 0;

	if (r && r->type == REDIS_REPLY_STRING && (p = strstr(r->str, "id=")))
		id = atoll(p + 3);
	if (r)
		freeReplyObject(r);
	return id;
}

static int
resubscribed(void *arg)
{
	long long id = pubsub_id();

	return id && id != *(long long *)arg;
}

Test(cache, a_restart_ends_a_batch)
{
	const char *name = "cache-batch-restart";
	struct blocked b = { .rc = -1 };
	dmutex_client_t *c;
	dmutex_t m;
	pthread_t th;
	uint64_t f0 = 0;
	int rc;

	cr_assert_eq(dmt_open_mutex(&c, &m, url, name, &(struct dmt_attr){ .lease_ms = 30000 }), 0);
	warm(&m, name);
	cr_assert_eq(dmutex_lock(&m), 0);       /* local: from the kept lease */
	cr_assert_eq(dmutex_fence(&m, &f0), 0);
	b.m = &m;
	cr_assert_eq(pthread_create(&th, NULL, lock_blocked, &b), 0);
	cr_assert(th_wait_until(thread_sleeps, &b.tid, 10000), "the second thread did not wait");
	cr_assert_eq(th_redis_restart(&srv), 0);
	cr_assert_eq(dmt_lock_exists(&srv, name), 0, "the restarted server kept the lock key");
	/* The client's wake-up thread lost its connection and made a new one:
	 * the process has noticed. */
	cr_assert(th_wait_until(resubscribed, &(long long){ 0 }, 10000), "the wake-up connection did not come back");
	rc = dmutex_unlock(&m);
	cr_assert(rc == 0 || rc == ENOLCK, "unlock: %d", rc);
	cr_assert(th_wait_until(lock_returned, &b.rc, 20000), "the second thread's lock did not return");
	cr_assert_eq(atomic_load(&b.rc), 0);
	cr_assert_eq(dmt_lock_exists(&srv, name), 1, "a local hold started on a lease the restart ended");
	cr_assert_gt(b.fence, f0);
	atomic_store(&b.done, 1);
	pthread_join(th, NULL);
	dmt_close_mutex(c, &m);
}

/* The same with the key still there: the wake-up connection killed.  The
 * lease is still ours, but the process cannot tell a lost connection from
 * a restart before its renewal says so: no batch, the waiting thread asks
 * Redis (a local hold would have the next reserved token, f0 + 1). */
Test(cache, a_lost_subscription_ends_a_batch)
{
	const char *name = "cache-batch-unsub";
	struct blocked b = { .rc = -1 };
	dmutex_client_t *c;
	dmutex_t m;
	pthread_t th;
	uint64_t f0 = 0;
	long long id;
	redisReply *r;

	cr_assert_eq(dmt_open_mutex(&c, &m, url, name, &(struct dmt_attr){ .lease_ms = 30000 }), 0);
	warm(&m, name);
	cr_assert_eq(dmutex_lock(&m), 0);       /* local: from the kept lease */
	cr_assert_eq(dmutex_fence(&m, &f0), 0);
	b.m = &m;
	cr_assert_eq(pthread_create(&th, NULL, lock_blocked, &b), 0);
	cr_assert(th_wait_until(thread_sleeps, &b.tid, 10000), "the second thread did not wait");
	cr_assert_neq(id = pubsub_id(), 0, "no wake-up connection");
	r = th_redis_cmd(&srv, "CLIENT KILL ID %lld", id);
	cr_assert(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
	freeReplyObject(r);
	cr_assert(th_wait_until(resubscribed, &id, 10000), "the wake-up connection did not come back");
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert(th_wait_until(lock_returned, &b.rc, 20000), "the second thread's lock did not return");
	cr_assert_eq(atomic_load(&b.rc), 0);
	cr_assert_gt(b.fence, f0 + 1, "a local hold (token %llu after %llu) on a lease whose "
			"subscription was lost", (unsigned long long)b.fence, (unsigned long long)f0);
	atomic_store(&b.done, 1);
	pthread_join(th, NULL);
	dmt_close_mutex(c, &m);
}
