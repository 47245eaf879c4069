/*
 * Authentication against a real Redis 7 with ACLs: an ACL user with a
 * password (TCP and unix socket), the legacy password-only form, refused
 * credentials (EIO), a user lacking the script commands (NOPERM -> EIO,
 * never a grant), and no password in any log message.
 *
 * The passwords are distinctive strings so that finding one in a log
 * message cannot be a coincidence.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dmutex.h"
#include "harness.h"
#include "dmt.h"

#define ALICE_PW  "s3cretAlice"
#define BOB_PW    "b0bPassw0rd"
#define LEGACY_PW "leg4cyPassw0rd"
#define WRONG_PW  "Wr0ngPassw0rd"
#define URL_PW    "Ur1Passw0rd"

/* Each criterion test runs in its own worker process: these are per test. */
static struct th_redis srv;

static void srv_down(void)
{
	dmutex_set_logger(NULL, NULL);
	th_redis_stop(&srv);
}

TestSuite(acl, .fini = srv_down, .timeout = 20);

/* ------------------------------------------------------------------ */
/* helpers                                                             */
/* ------------------------------------------------------------------ */

static void start(const char *extra)
{
	cr_assert_eq(th_redis_start(&srv, extra), 0, "redis-server did not start with: %s", extra);
}

/* Every log message the library produces, at every level. */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_text[256 * 1024];
static size_t log_len;
static int log_count;

static void capture(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	pthread_mutex_lock(&log_mu);
	log_len += (size_t)snprintf(log_text + log_len, sizeof log_text - log_len, "%s\n", msg);
	if (log_len >= sizeof log_text)
		log_len = sizeof log_text - 1;
	log_count++;
	pthread_mutex_unlock(&log_mu);
}

static void log_start(void)
{
	pthread_mutex_lock(&log_mu);
	log_len = 0;
	log_text[0] = '\0';
	log_count = 0;
	pthread_mutex_unlock(&log_mu);
	dmutex_set_logger(capture, NULL);
}

static int log_has(const char *s)
{
	int found;
	pthread_mutex_lock(&log_mu);
	found = strstr(log_text, s) != NULL;
	pthread_mutex_unlock(&log_mu);
	return found;
}

static int logged(void)
{
	int n;
	pthread_mutex_lock(&log_mu);
	n = log_count;
	pthread_mutex_unlock(&log_mu);
	return n;
}

/* No password, right or wrong, in anything logged so far. */
static void assert_no_password_logged(void)
{
	static const char *const pws[] = { ALICE_PW, BOB_PW, LEGACY_PW, WRONG_PW, URL_PW };
	for (size_t i = 0; i < sizeof pws / sizeof pws[0]; i++)
		cr_assert_not(log_has(pws[i]), "the password %s was logged:\n%s", pws[i], log_text);
}

/* Lock, check the key in Redis (as user/pass), unlock, check it is gone. */
static void lock_cycle(dmutex_client_t *c, const char *name, const char *user, const char *pass)
{
	char key[600], want_pid[32], pid[32];
	dmutex_t m;
	redisReply *rep;
	int rc;

	dmt_lock_key(key, sizeof key, name);
	snprintf(want_pid, sizeof want_pid, "%ld", (long)getpid());
	cr_assert_eq(dmt_init_mutex(&m, name, c, NULL), 0);
	rc = dmutex_lock(&m);
	cr_assert_eq(rc, 0, "lock: %s", dmutex_strerror(rc));
	rep = th_redis_cmd_as(&srv, user, pass, 0, "GET %s", key);
	cr_assert(rep && rep->type == REDIS_REPLY_STRING, "no lock key in Redis while held");
	cr_assert(dmt_lock_value_field(rep->str, "pid", pid, sizeof pid), "lock key '%s'", rep->str);
	cr_assert_str_eq(pid, want_pid);
	freeReplyObject(rep);
	rc = dmt_unlock_answered(&m);
	cr_assert_eq(rc, 0, "unlock: %s", dmutex_strerror(rc));
	rep = th_redis_cmd_as(&srv, user, pass, 0, "EXISTS %s", key);
	cr_assert(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 0, "lock key left after unlock");
	freeReplyObject(rep);
	cr_assert_eq(dmutex_destroy(&m), 0);
}

/* open must fail with EIO, log why, and log no password. */
static void assert_open_refused(const char *url, const char *what)
{
	dmutex_client_t *c = NULL;
	int before = logged(), rc;

	rc = dmutex_client_open(&c, url);
	cr_assert_eq(rc, EIO, "%s: open gave %s", what, dmutex_strerror(rc));
	cr_assert_gt(logged(), before, "%s: refused without a log line", what);
	assert_no_password_logged();
}

/* ------------------------------------------------------------------ */
/* 1. ACL user with a password                                         */
/* ------------------------------------------------------------------ */

/* The default user is off: only a client that really authenticates as
 * alice gets in. */
#define ALICE_ONLY "user default off\nuser alice on >" ALICE_PW " ~* &* +@all\n"

Test(acl, acl_user_with_password_locks)
{
	char url[700];
	dmutex_client_t *c;

	start(ALICE_ONLY);
	log_start();
	dmt_url(url, sizeof url, "alice:" ALICE_PW, srv.port, NULL);
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	lock_cycle(c, "acl-alice", "alice", ALICE_PW);
	cr_assert_eq(dmutex_client_close(c), 0);

	dmt_url(url, sizeof url, "alice:" WRONG_PW, srv.port, NULL);
	assert_open_refused(url, "alice with a wrong password");
	dmt_url(url, sizeof url, "mallory:" ALICE_PW, srv.port, NULL);
	assert_open_refused(url, "unknown user");
	dmt_url(url, sizeof url, NULL, srv.port, NULL);
	assert_open_refused(url, "no credentials, default user off");
}

/* ------------------------------------------------------------------ */
/* 2. legacy password-only form                                        */
/* ------------------------------------------------------------------ */

Test(acl, legacy_requirepass)
{
	char url[700];
	dmutex_client_t *c;

	start("requirepass " LEGACY_PW "\n");
	log_start();
	dmt_url(url, sizeof url, ":" LEGACY_PW, srv.port, NULL);
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	lock_cycle(c, "acl-legacy", NULL, LEGACY_PW);
	cr_assert_eq(dmutex_client_close(c), 0);

	dmt_url(url, sizeof url, ":" WRONG_PW, srv.port, NULL);
	assert_open_refused(url, "wrong password");
	dmt_url(url, sizeof url, NULL, srv.port, NULL);
	assert_open_refused(url, "no password");
}

/* ------------------------------------------------------------------ */
/* 3. a user without the script commands: EACCES at open, EIO later   */
/* ------------------------------------------------------------------ */

Test(acl, user_without_script_commands_gets_eio)
{
	char url[700], meta[600];
	dmutex_client_t *c;
	dmutex_t m;
	struct timespec dl;
	redisReply *r;
	int rc;

	start("user bob on >" BOB_PW " ~* &* +@all -evalsha -eval\n");
	log_start();
	dmt_url(url, sizeof url, "bob:" BOB_PW, srv.port, "command_timeout_ms=200");
	/* PING is allowed, EVALSHA is not: refused at open, naming it. */
	rc = dmutex_client_open(&c, url);
	cr_assert_eq(rc, EACCES, "open as bob: %s", dmutex_strerror(rc));
	cr_assert(log_has("may not run EVALSHA or EVAL"), "the log does not name EVALSHA:\n%s", log_text);

	/* Allowed at open, revoked later: NOPERM at lock time is EIO.  (SET
	 * too: a free lock is taken by a plain SET, key layout 3.) */
	r = th_redis_cmd(&srv, "ACL SETUSER bob +evalsha +eval");
	cr_assert(r && r->type == REDIS_REPLY_STATUS);
	freeReplyObject(r);
	rc = dmutex_client_open(&c, url);
	cr_assert_eq(rc, 0, "open as bob: %s", dmutex_strerror(rc));
	r = th_redis_cmd(&srv, "ACL SETUSER bob -evalsha -eval -set");
	cr_assert(r && r->type == REDIS_REPLY_STATUS);
	freeReplyObject(r);
	cr_assert_eq(dmt_init_mutex(&m, "acl-bob", c, NULL), 0);

	rc = dmutex_lock(&m);
	cr_assert_eq(rc, EIO, "lock without EVALSHA/EVAL: %s", dmutex_strerror(rc));
	rc = dmutex_trylock(&m);
	cr_assert_eq(rc, EIO, "trylock without EVALSHA/EVAL: %s", dmutex_strerror(rc));
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 5;
	rc = dmutex_timedlock(&m, &dl);
	cr_assert_eq(rc, EIO, "timedlock without EVALSHA/EVAL: %s", dmutex_strerror(rc));
	cr_assert_eq(dmutex_unlock(&m), EPERM, "an EIO left a hold behind");
	cr_assert(log_has("NOPERM"), "no log line names the NOPERM error:\n%s", log_text);
	assert_no_password_logged();

	/* Nothing was written in Redis (the default user is on, as admin). */
	dmt_meta_key(meta, sizeof meta, "acl-bob");
	cr_assert_eq(th_redis_int(&srv, "EXISTS dmutex:lock:{acl-bob}"), 0);
	cr_assert_eq(th_redis_int(&srv, "EXISTS %s", meta), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/* ------------------------------------------------------------------ */
/* 4. passwords are never logged                                       */
/* ------------------------------------------------------------------ */

Test(acl, passwords_never_logged)
{
	char url[700];
	dmutex_client_t *c = NULL;
	dmutex_t m;
	int rc;

	start(ALICE_ONLY "user bob on >" BOB_PW " ~* &* +@all -evalsha -eval\n");
	log_start();

	/* Refused logins, with a user and in the legacy form. */
	dmt_url(url, sizeof url, "alice:" WRONG_PW, srv.port, NULL);
	assert_open_refused(url, "alice with a wrong password");
	dmt_url(url, sizeof url, ":" WRONG_PW, srv.port, NULL);
	assert_open_refused(url, "legacy form, wrong password");
	dmt_url(url, sizeof url, "bob:" ALICE_PW, srv.port, NULL);
	assert_open_refused(url, "bob with alice's password");

	/* A bad URL that carries a password: EINVAL, logged without it. */
	snprintf(url, sizeof url, "redis://alice:" URL_PW "@127.0.0.1:%d?no_such_option=1", srv.port);
	rc = dmutex_client_open(&c, url);
	cr_assert_eq(rc, EINVAL, "bad option: %s", dmutex_strerror(rc));
	snprintf(url, sizeof url, "redis://alice:" URL_PW "@127.0.0.1:%d?command_timeout_ms=0", srv.port);
	rc = dmutex_client_open(&c, url);
	cr_assert_eq(rc, EINVAL, "out-of-range option: %s", dmutex_strerror(rc));
	assert_no_password_logged();

	/* Refused at open (EACCES), then NOPERM at lock time (EIO). */
	dmt_url(url, sizeof url, "bob:" BOB_PW, srv.port, "command_timeout_ms=200");
	cr_assert_eq(dmutex_client_open(&c, url), EACCES);
	freeReplyObject(th_redis_cmd_as(&srv, "alice", ALICE_PW, 0, "ACL SETUSER bob +evalsha +eval"));
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	freeReplyObject(th_redis_cmd_as(&srv, "alice", ALICE_PW, 0, "ACL SETUSER bob -evalsha -eval -set"));
	cr_assert_eq(dmt_init_mutex(&m, "acl-nolog", c, NULL), 0);
	cr_assert_eq(dmutex_lock(&m), EIO);
	cr_assert_eq(dmutex_destroy(&m), 0);
	cr_assert_eq(dmutex_client_close(c), 0);

	cr_assert(log_has("NOPERM"));
	cr_assert_gt(logged(), 5, "too few log lines to prove anything:\n%s", log_text);
	assert_no_password_logged();
}

/* ------------------------------------------------------------------ */
/* 5. unix socket URL with an ACL user                                 */
/* ------------------------------------------------------------------ */

Test(acl, unix_socket_with_acl_user)
{
	char url[700];
	dmutex_client_t *c;

	start(ALICE_ONLY);
	log_start();
	snprintf(url, sizeof url, "unix://alice:" ALICE_PW "@%s?command_timeout_ms=%d", srv.sock,
			th_command_timeout_ms());
	cr_assert_eq(dmutex_client_open(&c, url), 0, "open %s", srv.unix_url);
	lock_cycle(c, "acl-unix", "alice", ALICE_PW);
	cr_assert_eq(dmutex_client_close(c), 0);

	snprintf(url, sizeof url, "unix://alice:" WRONG_PW "@%s?command_timeout_ms=%d", srv.sock,
			th_command_timeout_ms());
	assert_open_refused(url, "unix socket, wrong password");
	assert_open_refused(srv.unix_url, "unix socket, no credentials");
}

/* ------------------------------------------------------------------ */
/* 6. confined users (issue 16 item 2)                                 */
/* ------------------------------------------------------------------ */

/* The ACL dmutex_client_open(3) and README document, word for word. */
#define LIB_ACL "~dmutex:* &dmutex:* -@all +ping +evalsha +eval +subscribe +unsubscribe " \
	"+info +config|get +time +hget +hmget +hset +hincrby +hdel +exists +type +pexpire " \
	"+pexpireat +pttl +persist +del +zadd +zrem +zscore +zcount +zcard +zrange " \
	"+zrangebyscore +zremrangebyscore +get +set +publish +rpush +blpop"

/* Keys under the prefix but no channel (Redis 7 denies channels by
 * default): refused at open, the log naming the channel pattern. */
Test(acl, keys_only_user_refused_at_open_naming_the_channel)
{
	char url[700];
	dmutex_client_t *c = NULL;
	int rc;

	start("user kim on >" BOB_PW " ~dmutex:* +@all\n");
	log_start();
	dmt_url(url, sizeof url, "kim:" BOB_PW, srv.port, NULL);
	rc = dmutex_client_open(&c, url);
	cr_assert_eq(rc, EACCES, "open as a keys-only user: %s", dmutex_strerror(rc));
	cr_assert(log_has("publish to channels matching dmutex:*"),
			"the log does not name the channel pattern:\n%s", log_text);
	/* Nothing left behind by the check. */
	cr_assert_eq(th_redis_int(&srv, "DBSIZE"), 0);
	assert_no_password_logged();

	/* Keys elsewhere: the log names the key pattern. */
	freeReplyObject(th_redis_cmd(&srv, "ACL SETUSER kim resetkeys ~other:* &*"));
	rc = dmutex_client_open(&c, url);
	cr_assert_eq(rc, EACCES, "open as a user of other keys: %s", dmutex_strerror(rc));
	cr_assert(log_has("access keys matching dmutex:*"), "the log does not name the keys:\n%s", log_text);

	/* Channels to publish but SUBSCRIBE denied. */
	freeReplyObject(th_redis_cmd(&srv, "ACL SETUSER kim resetkeys ~dmutex:* -subscribe"));
	rc = dmutex_client_open(&c, url);
	cr_assert_eq(rc, EACCES, "open without SUBSCRIBE: %s", dmutex_strerror(rc));
	cr_assert(log_has("may not run SUBSCRIBE"), "the log does not name SUBSCRIBE:\n%s", log_text);

	/* One command the scripts use, denied. */
	freeReplyObject(th_redis_cmd(&srv, "ACL SETUSER kim +subscribe -zcount"));
	rc = dmutex_client_open(&c, url);
	cr_assert_eq(rc, EACCES, "open without ZCOUNT: %s", dmutex_strerror(rc));
	cr_assert(log_has("may not run ZCOUNT in a script"), "the log does not name ZCOUNT:\n%s", log_text);
}

struct waiter_arg {
	dmutex_t *m;
	atomic_int done;
	int rc, unlock_rc;
};

static void *
lock_in_thread(void *p)
{
	struct waiter_arg *w = p;

	w->rc = dmutex_lock(w->m);
	atomic_store(&w->done, 1);
	/* Ownership is per thread: the owner unlocks. */
	w->unlock_rc = dmutex_unlock(w->m);
	return NULL;
}

/* A waiter listens on the lock's channel arg, or on its own, "<arg>:<token>"
 * (README "Who a release wakes"). */
static int
wake_subscribed(void *arg)
{
	redisReply *r = th_redis_cmd(&srv, "PUBSUB CHANNELS %s:*", (const char *)arg);
	int own = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1;

	if (r)
		freeReplyObject(r);
	return own || th_numsub(th_redis_cmd(&srv, "PUBSUB NUMSUB %s", (const char *)arg)) >= 1;
}

static int
thread_done(void *arg)
{
	return atomic_load(&((struct waiter_arg *)arg)->done);
}

/* The documented ACL and nothing more: lock, unlock and wake-ups work, and
 * a clean unlock is never reported lost. */
Test(acl, documented_acl_locks_and_wakes)
{
	struct dmt_attr o = { .lease_ms = 20000, .onlost = dmt_count_lost };
	char url[700];
	dmutex_client_t *c1, *c2;
	dmutex_t m1, m2;
	atomic_int lost = 0;
	struct waiter_arg w = { .m = &m2 };
	pthread_t t;
	int64_t t0;

	o.arg = &lost;
	start("user lib on >" BOB_PW " " LIB_ACL "\n");
	log_start();
	dmt_url(url, sizeof url, "lib:" BOB_PW, srv.port, NULL);
	cr_assert_eq(dmt_open_mutex(&c1, &m1, url, "acl-wake", &o), 0);
	cr_assert_eq(dmt_open_mutex(&c2, &m2, url, "acl-wake", &o), 0);
	lock_cycle(c1, "acl-cycle", NULL, NULL);

	cr_assert_eq(dmutex_lock(&m1), 0);
	cr_assert_eq(dmutex_trylock(&m2), EBUSY);
	cr_assert_eq(pthread_create(&t, NULL, lock_in_thread, &w), 0);
	cr_assert(th_wait_until(wake_subscribed, "dmutex:wake:{acl-wake}", 5000), "the waiter never subscribed");
	t0 = dmt_now_ns();
	cr_assert_eq(dmutex_unlock(&m1), 0);
	/* Woken by the release, not by the 20 s lease. */
	cr_assert(th_wait_until(thread_done, &w, 5000), "the waiter was not woken");
	cr_assert_lt(dmt_now_ns() - t0, 5000LL * 1000000, "woken late");
	pthread_join(t, NULL);
	cr_assert_eq(w.rc, 0);
	cr_assert_eq(w.unlock_rc, 0);
	cr_assert_eq(atomic_load(&lost), 0, "a clean unlock was reported lost");
	dmt_close_mutex(c1, &m1);
	dmt_close_mutex(c2, &m2);
}

/* The channel revoked after open: the unlock still releases (0, not a
 * false ENOLCK + onlost, as when release.lua failed after its writes),
 * and says the waiters were not told. */
Test(acl, channel_revoked_after_open_unlock_is_clean)
{
	struct dmt_attr o = { .onlost = dmt_count_lost };
	char url[700];
	dmutex_client_t *c;
	dmutex_t m;
	atomic_int lost = 0;
	int rc;

	o.arg = &lost;
	start("user lib on >" BOB_PW " " LIB_ACL "\n");
	log_start();
	dmt_url(url, sizeof url, "lib:" BOB_PW, srv.port, NULL);
	cr_assert_eq(dmt_open_mutex(&c, &m, url, "acl-revoked", &o), 0);
	freeReplyObject(th_redis_cmd(&srv, "ACL SETUSER lib resetchannels"));
	cr_assert_eq(dmutex_lock(&m), 0);
	/* A waiter's mark (acquire.lua): the release publishes only then. */
	cr_assert_eq(dmt_lock_set(&srv, "acl-revoked", "w", "1"), 0);
	rc = dmt_unlock_answered(&m);
	cr_assert_eq(rc, 0, "unlock: %s", dmutex_strerror(rc));
	cr_assert_eq(atomic_load(&lost), 0, "a clean unlock was reported lost");
	cr_assert_eq(dmt_lock_exists(&srv, "acl-revoked"), 0, "the lock was not released");
	cr_assert(log_has("waiters were not told"), "no log line:\n%s", log_text);
	dmt_close_mutex(c, &m);
}

/* The same for a read-write lock: rw_release.lua published before it
 * removed a share or the writer only since this test; a channel revoked
 * after open left the script failing after its write, and the unlock
 * reported a clean release as lost. */
Test(acl, channel_revoked_after_open_rwlock_unlocks_are_clean)
{
	char url[700];
	dmutex_client_t *c, *other;
	dmutex_attr_t a;
	drwlock_t rw, rw2;

	start("user lib on >" BOB_PW " " LIB_ACL "\n");
	dmt_url(url, sizeof url, "lib:" BOB_PW, srv.port, NULL);
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(dmutex_client_open(&other, srv.url), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	cr_assert_eq(drwlock_init(&rw, "acl-rw", &a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, other), 0);
	cr_assert_eq(drwlock_init(&rw2, "acl-rw", &a), 0);
	cr_assert_eq(dmutex_attr_destroy(&a), 0);
	freeReplyObject(th_redis_cmd(&srv, "ACL SETUSER lib resetchannels"));

	cr_assert_eq(drwlock_rdlock(&rw), 0);
	cr_assert_eq(drwlock_unlock(&rw), 0, "read unlock after the channel was revoked");
	cr_assert_eq(drwlock_wrlock(&rw), 0);
	cr_assert_eq(drwlock_unlock(&rw), 0, "write unlock after the channel was revoked");
	/* Released for real: another client writes at once. */
	cr_assert_eq(drwlock_trywrlock(&rw2), 0);
	cr_assert_eq(drwlock_unlock(&rw2), 0);

	cr_assert_eq(drwlock_destroy(&rw2), 0);
	cr_assert_eq(drwlock_destroy(&rw), 0);
	cr_assert_eq(dmutex_client_close(other), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}
