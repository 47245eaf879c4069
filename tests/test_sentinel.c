/*
 * Issue 14 items 3 and 4: redis-sentinel:// against real processes (a
 * master, a replica, three redis-sentinel; tests/lib/harness_sentinel.c),
 * with a real failover (SIGKILL of the master); and what a holder learns
 * when its server lost the lock state (a failover that lost writes, a
 * restart without persistence).
 *
 * down-after-milliseconds is 1000 (the harness's default), so that a
 * failover takes a few seconds.  Every wait polls with a deadline.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmutex.h"
#include "dmt.h"
#include "harness.h"

static struct th_sentinel sen;
static struct th_redis srv;

static void
sen_down(void)
{
	dmutex_set_logger(NULL, NULL);
	th_sentinel_stop(&sen);
	th_redis_stop(&srv);
}

TestSuite(sentinel, .fini = sen_down, .timeout = 120);

/* Log lines, kept so a test can look for one. */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char logged[64][400];
static int nlogged;

static void
capture(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	pthread_mutex_lock(&log_mu);
	if (nlogged < 64)
		snprintf(logged[nlogged], sizeof logged[0], "%s", msg);
	nlogged++;
	pthread_mutex_unlock(&log_mu);
}

static int
logged_with(const char *what)
{
	int found = 0;

	pthread_mutex_lock(&log_mu);
	for (int i = 0; i < nlogged && i < 64; i++)
		found |= strstr(logged[i], what) != NULL;
	pthread_mutex_unlock(&log_mu);
	return found;
}

/* "redis-sentinel://USERINFO@P1,P2,P3/NAME?OPTS" for the running set-up,
 * with the harness's command timeout unless OPTS sets one (th_url_with). */
static void
sen_url(char *buf, size_t len, const char *userinfo, const char *name, const char *opts)
{
	char base[600];

	snprintf(base, sizeof base, "redis-sentinel://%s%s127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/%s"
			"?command_timeout_ms=%d", userinfo ? userinfo : "", userinfo ? "@" : "",
			sen.sentinel[0].port, sen.sentinel[1].port, sen.sentinel[2].port,
			name ? name : sen.name, th_command_timeout_ms());
	th_url_with(buf, len, base, opts);
}

static uint64_t
lock_fence_unlock(dmutex_t *m)
{
	uint64_t tok = 0;
	int rc;

	cr_assert_eq(rc = dmutex_lock(m), 0, "lock: %s", dmutex_strerror(rc));
	cr_assert_eq(dmutex_fence(m, &tok), 0);
	cr_assert_eq(dmt_unlock_answered(m), 0);
	return tok;
}

/* Until the new master takes it: trylock, EIO meanwhile (the old master
 * is gone, or the sentinels still name it).  The token, and the time it
 * took in *ms. */
static uint64_t
lock_after_failover(dmutex_t *m, long long since, long long *ms)
{
	long long deadline = th_now_ms() + 30000;
	uint64_t tok = 0;
	int rc;

	while ((rc = dmutex_trylock(m)) == EIO && th_now_ms() < deadline)
		;
	cr_assert_eq(rc, 0, "trylock after the failover: %s", dmutex_strerror(rc));
	*ms = th_now_ms() - since;
	cr_assert_eq(dmutex_fence(m, &tok), 0);
	cr_assert_eq(dmt_unlock_answered(m), 0);
	return tok;
}

/* The replication offset data node `from` is at (want < 0), or whether a
 * replica of it has acknowledged want: -1 on an error. */
static long long
repl_offset(int from, long long want)
{
	redisReply *r = th_sentinel_data_cmd(&sen, from, "INFO replication");
	long long got = -1;
	const char *p;

	if (!r || r->type != REDIS_REPLY_STRING) {
		if (r)
			freeReplyObject(r);
		return -1;
	}
	if (want < 0) {
		if ((p = strstr(r->str, "master_repl_offset:")))
			got = strtoll(p + strlen("master_repl_offset:"), NULL, 10);
	} else {
		got = 0;
		for (p = r->str; (p = strstr(p, ",offset=")); p++)
			if (strtoll(p + strlen(",offset="), NULL, 10) >= want)
				got = 1;
	}
	freeReplyObject(r);
	return got;
}

/* Every write of data node `from` so far reached a replica of it.  Not
 * WAIT: the harness asks on a new connection each time, which wrote
 * nothing, so WAIT would return at once whatever the replica had. */
struct repl_want {
	int from;
	long long offset;
};

static int
repl_acked(void *arg)
{
	struct repl_want *w = arg;

	return repl_offset(w->from, w->offset) == 1;
}

static int
replicated(int from)
{
	struct repl_want w = { from, repl_offset(from, -1) };

	return w.offset >= 0 && th_wait_until(repl_acked, &w, 5000);
}

/* EXISTS of NAME's lock key on data node i (with the set-up's password). */
static long long
exists_on(int i, const char *name)
{
	char key[600];
	redisReply *r;
	long long n = -1;

	dmt_lock_key(key, sizeof key, name);
	r = th_sentinel_data_cmd(&sen, i, "EXISTS %s", key);
	if (r && r->type == REDIS_REPLY_INTEGER)
		n = r->integer;
	if (r)
		freeReplyObject(r);
	return n;
}

Test(sentinel, finds_the_master_through_any_sentinel_with_credentials)
{
	struct th_sentinel_opts o = { .data_pass = "dpw", .sentinel_pass = "spw" };
	char url[1400];
	dmutex_client_t *c;
	dmutex_t m;
	int rc;

	cr_assert_eq(th_sentinel_start(&sen, &o, 0), 0);
	sen_url(url, sizeof url, ":dpw", NULL, "sentinel_password=spw");
	cr_assert_eq(rc = dmt_open_mutex(&c, &m, url, "sen-find", NULL), 0, "%s",
			dmutex_strerror(rc));
	cr_assert_eq(dmutex_lock(&m), 0);
	/* On the master, and replicated to the replica. */
	cr_assert_eq(exists_on(0, "sen-find"), 1);
	cr_assert(replicated(0));
	cr_assert_eq(exists_on(1, "sen-find"), 1);
	cr_assert_eq(dmutex_unlock(&m), 0);
	dmt_close_mutex(c, &m);

	/* Without the sentinels' password: no sentinel answers. */
	dmutex_set_logger(capture, NULL);
	sen_url(url, sizeof url, ":dpw", NULL, "connect_timeout_ms=500");
	cr_assert_eq(dmutex_client_open(&c, url), EIO);
	cr_assert(logged_with("NOAUTH") || logged_with("Authentication"), "%s", logged[0]);

	/* A master name no sentinel knows: EIO, and a line saying so. */
	nlogged = 0;
	sen_url(url, sizeof url, ":dpw", "nosuchmaster", "sentinel_password=spw");
	cr_assert_eq(dmutex_client_open(&c, url), EIO);
	cr_assert(logged_with("does not know a master named 'nosuchmaster'"), "%s", logged[0]);
	dmutex_set_logger(NULL, NULL);

	/* Two sentinels down: the third one answers; its password from a file. */
	cr_assert_eq(th_redis_kill(&sen.sentinel[0]), 0);
	cr_assert_eq(th_redis_kill(&sen.sentinel[1]), 0);
	char file[600], opts[700];
	FILE *f;
	snprintf(file, sizeof file, "%s/sentinel-password", sen.sentinel[2].dir);
	cr_assert_not_null(f = fopen(file, "w"));
	fputs("spw\n", f);
	fclose(f);
	snprintf(opts, sizeof opts, "sentinel_password_file=%s&connect_timeout_ms=1000", file);
	sen_url(url, sizeof url, ":dpw", NULL, opts);
	cr_assert_eq(rc = dmt_open_mutex(&c, &m, url, "sen-find", NULL), 0, "%s",
			dmutex_strerror(rc));
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	dmt_close_mutex(c, &m);
}

/* After a failover to data node 1: the hold `name` is renewed there (its
 * TTL goes up again), never reported lost, and its unlock reaches it. */
static void
renewed_on_new_master(dmutex_t *held, const char *name, atomic_int *lost)
{
	char key[600];
	long long pttl0, pttl, deadline = th_now_ms() + 10000;

	dmt_lock_key(key, sizeof key, name);
	pttl = pttl0 = th_redis_int(&sen.data[1], "PTTL %s", key);
	cr_assert_gt(pttl0, 0);
	while (pttl <= pttl0 && th_now_ms() < deadline)
		pttl = th_redis_int(&sen.data[1], "PTTL %s", key);
	cr_assert_gt(pttl, pttl0, "the hold was not renewed on the new master");
	cr_assert_eq(atomic_load(lost), 0);
	cr_assert_eq(dmutex_unlock(held), 0);
	cr_assert_eq(exists_on(1, name), 0);
}

/* The replica had every write: the hold survives, the new master serves
 * lock and unlock within a bound, tokens keep growing. */
Test(sentinel, failover_is_followed_and_a_replicated_hold_kept)
{
	atomic_int lost = 0;
	struct dmt_attr a = { .onlost = dmt_count_lost, .arg = &lost };
	char url[1400];
	dmutex_client_t *c;
	dmutex_t held, m;
	uint64_t before = 0, after;
	long long t0, t_promoted, t_locked;
	int rc;

	cr_assert_eq(th_sentinel_start(&sen, NULL, 0), 0);
	/* The lease outlives the failover (a few seconds), with slack. */
	sen_url(url, sizeof url, NULL, NULL, "lease_ms=8000&connect_timeout_ms=500&command_timeout_ms=500");
	cr_assert_eq(rc = dmutex_client_open(&c, url), 0, "%s", dmutex_strerror(rc));
	cr_assert_eq(dmt_init_mutex(&held, "sen-held", c, &a), 0);
	/* Its unlocks must reach the master (read there after the
	 * failover): no kept lease. */
	cr_assert_eq(dmt_init_mutex(&m, "sen-n", c, &(struct dmt_attr){ .nocache = 1 }), 0);
	for (int i = 0; i < 5; i++) {
		uint64_t t = lock_fence_unlock(&m);
		cr_assert_gt(t, before);
		before = t;
	}
	cr_assert_eq(dmutex_lock(&held), 0);
	cr_assert(replicated(0));
	cr_assert_eq(exists_on(1, "sen-held"), 1);

	t0 = th_now_ms();
	cr_assert_eq(th_sentinel_kill_master(&sen, 30000), 1);
	t_promoted = th_now_ms() - t0;
	after = lock_after_failover(&m, t0, &t_locked);
	cr_assert_gt(after, before, "token %llu after the failover, %llu before",
			(unsigned long long)after, (unsigned long long)before);
	cr_assert_eq(exists_on(1, "sen-n"), 0, "unlock did not reach the new master");

	renewed_on_new_master(&held, "sen-held", &lost);
	fprintf(stderr, "sentinel failover: promoted %lld ms after the kill, first lock on the "
			"new master %lld ms after the kill (down-after %d ms)\n", t_promoted, t_locked,
			sen.down_after_ms);
	cr_assert_lt(t_locked, t_promoted + 5000);
	dmutex_destroy(&held);
	dmt_close_mutex(c, &m);
}

/* Writes that never reached the replica: the hold they made is reported
 * lost, and the tokens they issued are still below the new master's. */
Test(sentinel, writes_lost_in_failover_lose_the_hold_not_token_order)
{
	struct th_sentinel_opts o = { .replica_proxy = 1 };
	atomic_int lost = 0;
	struct dmt_attr a = { .onlost = dmt_count_lost, .arg = &lost };
	char url[1400];
	dmutex_client_t *c;
	dmutex_t held, m;
	uint64_t lost_tok = 0, after;
	long long t0, t_locked;

	cr_assert_eq(th_sentinel_start(&sen, &o, 0), 0);
	/* The lease outlives the failover: the hold is lost because the new
	 * master lacks it, not because its lease ran out. */
	sen_url(url, sizeof url, NULL, NULL, "lease_ms=8000&connect_timeout_ms=500&command_timeout_ms=500");
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	dmutex_set_logger(capture, NULL);
	cr_assert_eq(dmt_init_mutex(&held, "sen-lost", c, &a), 0);
	cr_assert_eq(dmt_init_mutex(&m, "sen-n", c, NULL), 0);
	lock_fence_unlock(&m);
	cr_assert(replicated(0));

	/* From here on the replica hears nothing. */
	th_proxy_set_mode(sen.repl_proxy, TH_PROXY_BLACKHOLE);
	cr_assert_eq(dmutex_lock(&held), 0);
	for (int i = 0; i < 3; i++)
		lost_tok = lock_fence_unlock(&m);
	cr_assert_eq(exists_on(0, "sen-lost"), 1);
	cr_assert_eq(exists_on(1, "sen-lost"), 0);

	t0 = th_now_ms();
	cr_assert_eq(th_sentinel_kill_master(&sen, 30000), 1);
	after = lock_after_failover(&m, t0, &t_locked);
	cr_assert_gt(after, lost_tok, "token %llu after the failover, %llu lost in it",
			(unsigned long long)after, (unsigned long long)lost_tok);

	cr_assert(th_wait_until(dmt_lost_once, &lost, 10000), "the hold the new master lacks "
			"was not reported lost");
	cr_assert(logged_with("renewal of 'sen-lost': the lock is no longer ours"));
	cr_assert_eq(dmutex_unlock(&held), ENOLCK);
	cr_assert_eq(atomic_load(&lost), 1);
	fprintf(stderr, "sentinel lost writes: first lock on the new master %lld ms after the "
			"kill; token %llu > %llu\n", t_locked, (unsigned long long)after,
			(unsigned long long)lost_tok);
	dmutex_destroy(&held);
	dmt_close_mutex(c, &m);
}

/* A standalone server restarted without persistence forgot every lock: a
 * holder hears of it at its next renewal, and tokens keep growing. */
Test(sentinel, restart_without_persistence_loses_holds_keeps_token_order)
{
	atomic_int lost = 0;
	struct dmt_attr a = { .onlost = dmt_count_lost, .arg = &lost };
	char url[700];
	dmutex_client_t *c;
	dmutex_t held, m;
	uint64_t before, after;
	long long t0, t_lost;

	cr_assert_eq(th_redis_start(&srv, NULL), 0);
	dmt_url(url, sizeof url, NULL, srv.port, "lease_ms=1500");
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(dmt_init_mutex(&held, "restart-held", c, &a), 0);
	cr_assert_eq(dmt_init_mutex(&m, "restart-n", c, NULL), 0);
	before = lock_fence_unlock(&m);
	cr_assert_eq(dmutex_lock(&held), 0);

	t0 = th_now_ms();
	cr_assert_eq(th_redis_restart(&srv), 0);
	cr_assert_eq(dmt_lock_exists(&srv, "restart-held"), 0);
	cr_assert(th_wait_until(dmt_lost_once, &lost, 10000), "no onlost after the restart");
	t_lost = th_now_ms() - t0;
	cr_assert_eq(dmutex_unlock(&held), ENOLCK);
	after = lock_fence_unlock(&m);
	cr_assert_gt(after, before);
	fprintf(stderr, "restart without persistence: hold reported lost %lld ms after the "
			"kill (lease 1500 ms)\n", t_lost);
	dmutex_destroy(&held);
	dmt_close_mutex(c, &m);
}

/* ROLE of data node 0 says slave. */
static int
old_master_demoted(void *arg)
{
	redisReply *r = th_sentinel_data_cmd(&sen, 0, "ROLE");
	int replica = r && r->type == REDIS_REPLY_ARRAY && r->elements
		&& r->element[0]->type == REDIS_REPLY_STRING && !strcmp(r->element[0]->str, "slave");

	(void)arg;
	if (r)
		freeReplyObject(r);
	return replica;
}

/* A failover the sentinels are told to make: the old master lives on and
 * becomes a replica.  Nothing may go on talking to it (its pooled
 * connections are dropped at +switch-master; a READONLY or a ROLE that is
 * not master would send the client back to the sentinels). */
Test(sentinel, manual_failover_leaves_nothing_on_the_demoted_master)
{
	atomic_int lost = 0;
	struct dmt_attr a = { .onlost = dmt_count_lost, .arg = &lost };
	char url[1400];
	dmutex_client_t *c;
	dmutex_t held, m;
	uint64_t before, after;
	long long t0, t_demoted, t_locked;
	redisReply *r;

	cr_assert_eq(th_sentinel_start(&sen, NULL, 0), 0);
	sen_url(url, sizeof url, NULL, NULL, "lease_ms=6000&connect_timeout_ms=500&command_timeout_ms=500");
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(dmt_init_mutex(&held, "sen-manual-held", c, &a), 0);
	cr_assert_eq(dmt_init_mutex(&m, "sen-manual", c, NULL), 0);
	before = lock_fence_unlock(&m);
	cr_assert_eq(dmutex_lock(&held), 0);
	cr_assert(replicated(0));

	t0 = th_now_ms();
	r = th_sentinel_cmd(&sen, 0, "SENTINEL FAILOVER %s", sen.name);
	cr_assert(r && r->type == REDIS_REPLY_STATUS, "SENTINEL FAILOVER: %s", r ? r->str : "no reply");
	freeReplyObject(r);
	cr_assert(th_wait_until(old_master_demoted, NULL, 30000), "data node 0 is still a master");
	t_demoted = th_now_ms() - t0;
	cr_assert_eq(th_sentinel_get_master(&sen, 0), 1);
	after = lock_after_failover(&m, t0, &t_locked);
	cr_assert_gt(after, before);
	cr_assert_eq(exists_on(1, "sen-manual"), 0);

	renewed_on_new_master(&held, "sen-manual-held", &lost);
	fprintf(stderr, "sentinel manual failover: old master a replica %lld ms after SENTINEL "
			"FAILOVER, first lock on the new master %lld ms after it\n", t_demoted, t_locked);
	dmutex_destroy(&held);
	dmt_close_mutex(c, &m);
}

/* A forked child has no thread on +switch-master: it finds the new master
 * by asking again after its connection to the old one fails.  Its unlock
 * before the kill is answered (an asynchronous release still in flight
 * dies with the master), but may not have reached the replica: the new
 * master can still show the child's old hold, which ends with its 5 s
 * lease (EBUSY until then: found, and asked again). */
static dmutex_t fork_m;
static struct th_sync fork_sync;

static int
child_follows(void *arg)
{
	long long deadline = th_now_ms() + 40000;
	int rc;

	(void)arg;
	if (dmutex_lock(&fork_m) || dmt_unlock_answered(&fork_m))
		return 2;
	/* The parent kills the master now. */
	th_sync_post(&fork_sync);
	while (th_sentinel_get_master(&sen, 0) != 1)
		if (th_now_ms() > deadline)
			return 3;
	while (((rc = dmutex_trylock(&fork_m)) == EIO || rc == EBUSY) && th_now_ms() < deadline)
		;
	if (rc)
		return 4;
	return dmutex_unlock(&fork_m) ? 5 : 0;
}

Test(sentinel, forked_child_follows_by_asking_again)
{
	char url[1400];
	dmutex_client_t *c;
	pid_t pid;

	if (DMT_ASAN_FORK_UNSAFE)
		cr_skip_test("%s", DMT_ASAN_FORK_REASON);
	cr_assert_eq(th_sentinel_start(&sen, NULL, 0), 0);
	sen_url(url, sizeof url, NULL, NULL, "connect_timeout_ms=500&command_timeout_ms=500&lease_ms=5000");
	cr_assert_eq(dmt_open_mutex(&c, &fork_m, url, "sen-fork", NULL), 0);
	lock_fence_unlock(&fork_m);
	cr_assert_eq(th_sync_init(&fork_sync), 0);
	cr_assert_gt(pid = th_spawn(child_follows, NULL), 0);
	cr_assert_eq(th_sync_wait(&fork_sync, 20000), 0, "the child did not lock at all");
	th_sync_close(&fork_sync);
	cr_assert_eq(th_sentinel_kill_master(&sen, 30000), 1);
	cr_assert_eq(th_wait_child(pid, 60000), 0, "the child did not lock on the new master");
	lock_fence_unlock(&fork_m);
	cr_assert_eq(exists_on(1, "sen-fork"), 0);
	dmt_close_mutex(c, &fork_m);
}

/* The sentinels may lag behind the servers: a server that says it is no
 * master (ROLE) is not used, whatever the sentinels say. */
Test(sentinel, a_server_that_is_no_master_is_refused_by_role)
{
	char url[1400];
	dmutex_client_t *c;
	redisReply *r;

	cr_assert_eq(th_sentinel_start(&sen, NULL, 0), 0);
	/* Behind the sentinels' back: the master becomes a replica. */
	r = th_sentinel_data_cmd(&sen, 0, "REPLICAOF 127.0.0.1 %d", sen.data[1].port);
	cr_assert(r && r->type == REDIS_REPLY_STATUS);
	freeReplyObject(r);
	cr_assert_eq(th_sentinel_get_master(&sen, 0), 0);
	dmutex_set_logger(capture, NULL);
	sen_url(url, sizeof url, NULL, NULL, "connect_timeout_ms=500");
	cr_assert_eq(dmutex_client_open(&c, url), EIO);
	dmutex_set_logger(NULL, NULL);
	cr_assert(logged_with("not the master: slave"), "%s", logged[0]);
}

/* SENTINEL REMOVE and MONITOR on every sentinel: they name data node
 * `to` from now on, without a failover (no +switch-master, no CLIENT KILL
 * on the old master: a client keeps its connections to it). */
static void
remonitor(int to)
{
	for (int i = 0; i < TH_SENTINELS; i++) {
		redisReply *r = th_sentinel_cmd(&sen, i, "SENTINEL REMOVE %s", sen.name);
		cr_assert(r && r->type == REDIS_REPLY_STATUS, "REMOVE: %s", r ? r->str : "no reply");
		freeReplyObject(r);
		r = th_sentinel_cmd(&sen, i, "SENTINEL MONITOR %s 127.0.0.1 %d 2", sen.name,
				th_sentinel_data_port(&sen, to));
		cr_assert(r && r->type == REDIS_REPLY_STATUS, "MONITOR: %s", r ? r->str : "no reply");
		freeReplyObject(r);
		r = th_sentinel_cmd(&sen, i, "SENTINEL SET %s down-after-milliseconds %d "
				"failover-timeout %d", sen.name, sen.down_after_ms, sen.failover_timeout_ms);
		cr_assert(r && r->type == REDIS_REPLY_STATUS, "SET: %s", r ? r->str : "no reply");
		freeReplyObject(r);
	}
}

/* How many commands data node i refused with READONLY (INFO errorstats). */
static long long
readonly_errors(int i)
{
	redisReply *r = th_sentinel_data_cmd(&sen, i, "INFO errorstats");
	const char *p;
	long long n = 0;

	cr_assert(r && r->type == REDIS_REPLY_STRING, "INFO errorstats");
	if ((p = strstr(r->str, "errorstat_READONLY:count=")))
		n = atoll(p + strlen("errorstat_READONLY:count="));
	freeReplyObject(r);
	return n;
}

/* rediss-sentinel://: TLS sentinels name a TLS master (the sentinels, the
 * replication and the client all on TLS ports).  Then the master changes
 * under the client without a failover: its pooled connection to the old
 * one, now a replica, is refused with READONLY, and the client asks the
 * sentinels again; its hold is renewed on the new master.  Then a real
 * failover (SIGKILL): followed, tokens still increase.  One set-up for the
 * three: starting one takes seconds. */
Test(sentinel, rediss_sentinel_readonly_and_failover)
{
	const char *certs = getenv("DMUTEX_TEST_CERTS");
	struct th_sentinel_opts o = { .tls_dir = certs };
	atomic_int lost = 0;
	struct dmt_attr a = { .onlost = dmt_count_lost, .arg = &lost };
	char url[1400], key[600];
	dmutex_client_t *c;
	dmutex_t held, m;
	uint64_t before = 0, mid, after;
	long long t0, ms, pttl0, pttl, deadline;
	redisReply *r;
	int rc;

	cr_assert(certs, "DMUTEX_TEST_CERTS is not set (run through meson test)");
	cr_assert_eq(th_sentinel_start(&sen, &o, 0), 0);
	cr_assert(!strncmp(sen.url, "rediss-sentinel://", 18), "%s", sen.url);
	th_url_with(url, sizeof url, sen.url,
			"lease_ms=8000&connect_timeout_ms=1000&command_timeout_ms=1000");
	cr_assert_eq(rc = dmutex_client_open(&c, url), 0, "%s: %s", url, dmutex_strerror(rc));
	cr_assert_eq(dmt_init_mutex(&held, "tls-held", c, &a), 0);
	/* Its trylock must talk to the old master (READONLY) and its
	 * unlocks reach the new one: no kept lease. */
	cr_assert_eq(dmt_init_mutex(&m, "tls-n", c, &(struct dmt_attr){ .nocache = 1 }), 0);
	for (int i = 0; i < 3; i++) {
		uint64_t t = lock_fence_unlock(&m);
		cr_assert_gt(t, before);
		before = t;
	}
	cr_assert_eq(dmutex_lock(&held), 0);
	cr_assert_eq(exists_on(0, "tls-held"), 1);
	cr_assert(replicated(0));

	/* The roles swap behind the client's back.  Its next request goes
	 * to the old master before the sentinels are told: told first, the
	 * client's watch thread (which asks every sentinel whenever it
	 * subscribes again) could learn of the new master before any request
	 * reached the old one, and nothing would say READONLY.  The sentinels
	 * still name the old one, so that attempt fails. */
	cr_assert_eq(readonly_errors(0), 0);
	t0 = th_now_ms();
	r = th_sentinel_data_cmd(&sen, 1, "REPLICAOF NO ONE");
	cr_assert(r && r->type == REDIS_REPLY_STATUS);
	freeReplyObject(r);
	r = th_sentinel_data_cmd(&sen, 0, "REPLICAOF 127.0.0.1 %d", th_sentinel_data_port(&sen, 1));
	cr_assert(r && r->type == REDIS_REPLY_STATUS);
	freeReplyObject(r);
	cr_assert_eq(rc = dmutex_trylock(&m), EIO, "trylock on a master turned replica: %s",
			dmutex_strerror(rc));
	cr_assert_geq(readonly_errors(0), 1, "the old master never said READONLY: the client "
			"did not talk to it after the switch");
	/* Then the sentinels are told, and the client asks them again. */
	remonitor(1);
	cr_assert_eq(th_sentinel_get_master(&sen, 0), 1);
	mid = lock_after_failover(&m, t0, &ms);
	cr_assert_gt(mid, before);
	cr_assert_eq(exists_on(1, "tls-n"), 0);
	/* The hold is renewed on the new master. */
	dmt_lock_key(key, sizeof key, "tls-held");
	pttl0 = th_redis_int(&sen.data[1], "PTTL %s", key);
	cr_assert_gt(pttl0, 0);
	for (pttl = pttl0, deadline = th_now_ms() + 10000; pttl <= pttl0 && th_now_ms() < deadline;)
		pttl = th_redis_int(&sen.data[1], "PTTL %s", key);
	cr_assert_gt(pttl, pttl0, "the hold was not renewed on the new master");
	fprintf(stderr, "rediss-sentinel: on the new master %lld ms after the switch (READONLY, "
			"asked again)\n", ms);

	/* A failover: the sentinels must know the set-up again first. */
	cr_assert_eq(th_sentinel_wait_agree(&sen, 30000), 1);
	cr_assert(replicated(1));
	t0 = th_now_ms();
	cr_assert_eq(th_sentinel_kill_master(&sen, 30000), 0);
	after = lock_after_failover(&m, t0, &ms);
	cr_assert_gt(after, mid, "token %llu after the failover, %llu before",
			(unsigned long long)after, (unsigned long long)mid);
	cr_assert_eq(exists_on(0, "tls-n"), 0);
	cr_assert_eq(atomic_load(&lost), 0);
	cr_assert_eq(dmutex_unlock(&held), 0);
	cr_assert_eq(exists_on(0, "tls-held"), 0);
	fprintf(stderr, "rediss-sentinel failover: first lock on the new master %lld ms after "
			"the kill\n", ms);
	dmutex_destroy(&held);
	dmt_close_mutex(c, &m);
}
