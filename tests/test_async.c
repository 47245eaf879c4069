/*
 * Issue 15 item 2: the asynchronous release (README "Asynchronous
 * release", dmutex_unlock(3)).  dmutex_unlock returns before Redis answers,
 * with the release wholly in the socket; a release that proves not ours is
 * reported (onlost, then ENOLCK once); NOSCRIPT is survived; the process's
 * own next hold of the name is never overtaken by its release.
 *
 * Real redis-server per test; the server is stopped with SIGSTOP where the
 * point is that nobody answers.  Every wait polls with a deadline.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmutex.h"
#include "harness.h"
#include "dmt.h"

static struct th_redis srv;
static int paused;

static void
up(void)
{
	cr_assert_eq(th_redis_start(&srv, NULL), 0, "redis-server did not start");
}

static void
down(void)
{
	if (paused)
		th_redis_resume(&srv);
	th_redis_stop(&srv);
}

TestSuite(async, .init = up, .fini = down, .timeout = 60);

static void
url_with(char *buf, size_t len, const char *opts)
{
	dmt_url(buf, len, NULL, srv.port, opts);
}

static int
key_gone(void *arg)
{
	return dmt_lock_exists(&srv, arg) == 0;
}

/* Under the holder, behind the library's back: the lock key of name
 * deleted (del) or given another token. */
static void
on_lock_key(const char *name, int del)
{
	char k[600];

	dmt_lock_key(k, sizeof k, name);
	if (del)
		cr_assert_eq(th_redis_int(&srv, "DEL %s", k), 1, "tampering with %s failed", k);
	else
		cr_assert_eq(dmt_lock_set(&srv, name, "token", "someone-else"), 0, "tampering with %s failed", k);
}

/* 1. unlock does not wait: the server is stopped, unlock returns at once
 * (a synchronous release would wait out the 5 s command timeout), and the
 * release runs once the server is back. */
Test(async, unlock_returns_before_the_answer)
{
	char url[700];
	dmutex_client_t *c;
	dmutex_t m;
	long long t0, took;

	url_with(url, sizeof url, "command_timeout_ms=5000&lease_ms=30000");
	cr_assert_eq(dmt_open_mutex(&c, &m, url, "as-stop", NULL), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(th_redis_pause(&srv), 0);
	paused = 1;
	t0 = th_now_ms();
	cr_assert_eq(dmutex_unlock(&m), 0);
	took = th_now_ms() - t0;
	/* A few ms on an idle machine; the bound leaves room for load and
	 * ASan, and is far below the 5 s a wait for the answer would take. */
	cr_assert_lt(took, 1000, "unlock took %lld ms with the server stopped", took);
	cr_assert_eq(th_redis_resume(&srv), 0);
	paused = 0;
	cr_assert(th_wait_until(key_gone, "as-stop", 5000 * dmt_slowdown()),
			"the release did not run once the server was back");
	dmt_close_mutex(c, &m);
}

/* The switch: async_release=0 waits for the answer, and says EIO when
 * none comes within the command timeout. */
Test(async, async_release_off_waits_for_the_answer)
{
	char url[700];
	dmutex_client_t *c;
	dmutex_t m;
	long long t0, took;

	url_with(url, sizeof url, "command_timeout_ms=400&async_release=0&lease_ms=30000");
	cr_assert_eq(dmt_open_mutex(&c, &m, url, "as-off", NULL), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(th_redis_pause(&srv), 0);
	paused = 1;
	t0 = th_now_ms();
	cr_assert_eq(dmutex_unlock(&m), EIO);
	took = th_now_ms() - t0;
	cr_assert_geq(took, 350, "a synchronous unlock returned after %lld ms without an answer", took);
	cr_assert_eq(th_redis_resume(&srv), 0);
	paused = 0;
	/* Retried in the background until the lease would end. */
	cr_assert(th_wait_until(key_gone, "as-off", 5000 * dmt_slowdown()),
			"the unconfirmed release was not retried");
	dmt_close_mutex(c, &m);
}

/* 2. exit right after unlock: the child's release is in the kernel before
 * unlock returns, so _exit loses nothing; the key goes long before its
 * 30 s lease could end it. */
struct exit_arg {
	char url[700];
};

static int
child_lock_unlock_exit(void *p)
{
	struct exit_arg *a = p;
	dmutex_client_t *c;
	dmutex_t m;

	if (dmt_open_mutex(&c, &m, a->url, "as-exit", NULL))
		return 10;
	if (dmutex_lock(&m))
		return 11;
	if (dmutex_unlock(&m))
		return 12;
	_exit(0);
}

Test(async, exit_right_after_unlock_leaves_nothing)
{
	struct exit_arg a;
	pid_t pid;

	url_with(a.url, sizeof a.url, "lease_ms=30000");
	for (int i = 0; i < 5; i++) {
		pid = th_spawn(child_lock_unlock_exit, &a);
		cr_assert_gt(pid, 0);
		cr_assert_eq(th_wait_child(pid, 10000 * dmt_slowdown()), 0, "child %d failed", i);
		cr_assert(th_wait_until(key_gone, "as-exit", 3000 * dmt_slowdown()),
				"round %d: the lock outlived its holder's exit", i);
	}
}

/* 3. A release that finds the lock not ours: onlost once, soon, with no
 * further call of the program (the renewal thread reads the answer), and
 * no later call returns ENOLCK for it: the loss belongs to the hold that
 * ended, and a lock call that does not lock never reports one (issue 25).
 * The next call is as usual. */
static void
not_ours_then(const char *name, int del, int next_call)
{
	char url[700];
	dmutex_client_t *c;
	dmutex_t m;
	atomic_int lost = 0;
	uint64_t fence;
	int rc, want;

	url_with(url, sizeof url, "lease_ms=30000");
	cr_assert_eq(dmt_open_mutex(&c, &m, url, name,
			&(struct dmt_attr){ .onlost = dmt_count_lost, .arg = &lost }), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	on_lock_key(name, del);
	cr_assert_eq(dmutex_unlock(&m), 0, "an asynchronous unlock knows nothing yet");
	cr_assert(th_wait_until(dmt_lost_once, &lost, 3000 * dmt_slowdown()),
			"onlost never ran for a release that was not ours");
	switch (next_call) {
	case 0: rc = dmutex_lock(&m); want = 0; break;
	/* DEL left the lock free; SET left another "holder". */
	case 1: rc = dmutex_trylock(&m); want = del ? 0 : EBUSY; break;
	case 2: rc = dmutex_unlock(&m); want = EPERM; break;
	default: rc = dmutex_fence(&m, &fence); want = EPERM; break;
	}
	cr_assert_eq(rc, want, "call %d after a release that was not ours: %s", next_call,
			dmutex_strerror(rc));
	if (rc == 0) {
		/* Locked for real: the key is ours. */
		cr_assert_eq(dmt_lock_exists(&srv, name), 1);
		cr_assert_eq(dmt_unlock_answered(&m), 0);
	}
	cr_assert_eq(atomic_load(&lost), 1, "onlost called %d times", atomic_load(&lost));
	dmt_close_mutex(c, &m);
}

Test(async, deleted_under_holder_onlost_then_lock_locks)
{
	not_ours_then("as-del-lock", 1, 0);
}

Test(async, deleted_under_holder_onlost_then_trylock_locks)
{
	not_ours_then("as-del-try", 1, 1);
}

Test(async, overwritten_under_holder_onlost_then_unlock_eperm)
{
	not_ours_then("as-set-unlock", 0, 2);
}

Test(async, overwritten_under_holder_onlost_then_fence_eperm)
{
	not_ours_then("as-set-fence", 0, 3);
}

/* No thread is owed an ENOLCK: another thread that locks the name meanwhile
 * gets the lock, and so does the unlocking thread afterwards. */
struct other {
	dmutex_t *m;
	int rc;
};

static void *
other_locks(void *p)
{
	struct other *o = p;

	o->rc = dmutex_lock(o->m);
	if (!o->rc)
		o->rc = dmt_unlock_answered(o->m);
	return NULL;
}

Test(async, no_thread_is_owed_an_enolck)
{
	char url[700];
	dmutex_client_t *c;
	dmutex_t m;
	atomic_int lost = 0;
	struct other o;
	pthread_t th;

	url_with(url, sizeof url, "lease_ms=30000");
	cr_assert_eq(dmt_open_mutex(&c, &m, url, "as-other",
			&(struct dmt_attr){ .onlost = dmt_count_lost, .arg = &lost }), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	on_lock_key("as-other", 1);
	cr_assert_eq(dmutex_unlock(&m), 0);
	o.m = &m;
	cr_assert_eq(pthread_create(&th, NULL, other_locks, &o), 0);
	pthread_join(th, NULL);
	cr_assert_eq(o.rc, 0, "another thread: %s", dmutex_strerror(o.rc));
	cr_assert_eq(atomic_load(&lost), 1, "onlost called %d times", atomic_load(&lost));
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmt_unlock_answered(&m), 0);
	cr_assert_eq(atomic_load(&lost), 1);
	dmt_close_mutex(c, &m);
}

/* 4. NOSCRIPT: the scripts flushed between lock and unlock. */
Test(async, script_flush_before_first_release_runs_it_by_source)
{
	char url[700];
	dmutex_client_t *c;
	dmutex_t m;

	url_with(url, sizeof url, "lease_ms=30000");
	cr_assert_eq(dmt_open_mutex(&c, &m, url, "as-flush1", NULL), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	freeReplyObject(th_redis_cmd(&srv, "SCRIPT FLUSH"));
	cr_assert_eq(dmutex_unlock(&m), 0);
	/* Nothing else is sent: the release must run by itself. */
	cr_assert(th_wait_until(key_gone, "as-flush1", 3000 * dmt_slowdown()),
			"the release after SCRIPT FLUSH did not run");
	dmt_close_mutex(c, &m);
}

/* The connection has run the release by SHA before: EVALSHA goes out,
 * meets NOSCRIPT, and is sent again (by whoever reads the answer: here the
 * fence of the unlocked mutex, or another call on that connection). */
Test(async, script_flush_after_a_release_resends_it)
{
	char url[700];
	dmutex_client_t *c;
	dmutex_t m, other;
	atomic_int lost = 0;

	url_with(url, sizeof url, "lease_ms=30000");
	/* The release is under test: a kept lease would send none. */
	cr_assert_eq(dmt_open_mutex(&c, &m, url, "as-flush2",
			&(struct dmt_attr){ .onlost = dmt_count_lost, .arg = &lost, .nocache = 1 }), 0);
	cr_assert_eq(dmt_init_mutex(&other, "as-flush2-other", c, NULL), 0);
	for (int round = 0; round < 2; round++) {
		cr_assert_eq(dmutex_lock(&m), 0);
		cr_assert_eq(dmt_unlock_answered(&m), 0);
		cr_assert_eq(dmutex_lock(&m), 0);
		freeReplyObject(th_redis_cmd(&srv, "SCRIPT FLUSH"));
		cr_assert_eq(dmutex_unlock(&m), 0);
		if (round == 0) {
			/* The mutex's own thread asks for the answer. */
			uint64_t f;
			cr_assert_eq(dmutex_fence(&m, &f), EPERM);
			cr_assert_eq(dmt_lock_exists(&srv, "as-flush2"), 0);
		} else {
			/* Another request reads it on its way (inside its own
			 * exchange: the release goes to the background). */
			cr_assert_eq(dmutex_trylock(&other), 0);
			cr_assert_eq(dmt_unlock_answered(&other), 0);
			cr_assert(th_wait_until(key_gone, "as-flush2", 3000 * dmt_slowdown()),
					"the release met NOSCRIPT and was not sent again");
		}
	}
	cr_assert_eq(atomic_load(&lost), 0, "a clean release was reported lost");
	cr_assert_eq(dmutex_destroy(&other), 0);
	dmt_close_mutex(c, &m);
}

/* 5. Ordering: the process's next hold of the name is never refused
 * because of its own release in flight, whichever thread and connection
 * ask (a trylock would say EBUSY if it reached Redis first). */
struct relocker {
	dmutex_t *m;
	int n, busy, err;
};

static void *
relock_loop(void *p)
{
	struct relocker *r = p;

	for (int i = 0; i < r->n; i++) {
		int rc = dmutex_trylock(r->m);
		if (rc == EBUSY) {
			/* The other thread holds it now: fine, wait for it. */
			r->busy++;
			rc = dmutex_lock(r->m);
		}
		if (rc) {
			r->err = rc;
			return NULL;
		}
		if ((rc = dmutex_unlock(r->m))) {
			r->err = rc;
			return NULL;
		}
	}
	return NULL;
}

Test(async, own_release_never_makes_the_next_trylock_busy)
{
	char url[700];
	dmutex_client_t *c;
	dmutex_t m;

	url_with(url, sizeof url, "lease_ms=30000");
	cr_assert_eq(dmt_open_mutex(&c, &m, url, "as-order", NULL), 0);
	/* One thread: every trylock right after its unlock finds it free. */
	for (int i = 0; i < 200; i++) {
		int rc = dmutex_trylock(&m);
		cr_assert_eq(rc, 0, "trylock %d after our own unlock: %s", i, dmutex_strerror(rc));
		cr_assert_eq(dmutex_unlock(&m), 0);
	}
	/* Two threads, pooled connections shared: no error, and the one
	 * that finds it busy only waits for the other's hold. */
	struct relocker r[2] = { { &m, 100, 0, 0 }, { &m, 100, 0, 0 } };
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, relock_loop, &r[i]), 0);
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(r[i].err, 0, "thread %d: %s", i, dmutex_strerror(r[i].err));
	}
	cr_assert_eq(dmutex_destroy(&m), 0);
	cr_assert_eq(dmt_lock_exists(&srv, "as-order"), 0, "destroy did not wait for the release");
	cr_assert_eq(dmutex_client_close(c), 0);
}

/* Many names released asynchronously, then the client closes: every
 * release has run (close reads what the pool owes). */
Test(async, client_close_reads_every_owed_answer)
{
	char url[700], name[32];
	dmutex_client_t *c;
	dmutex_t m[20];

	url_with(url, sizeof url, "lease_ms=30000");
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof name, "as-close-%d", i);
		cr_assert_eq(dmt_init_mutex(&m[i], name, c, NULL), 0);
		cr_assert_eq(dmutex_lock(&m[i]), 0);
	}
	for (int i = 0; i < 20; i++)
		cr_assert_eq(dmutex_unlock(&m[i]), 0);
	for (int i = 0; i < 20; i++)
		cr_assert_eq(dmutex_destroy(&m[i]), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
	cr_assert_eq(dmt_count_keys(&srv, "dmutex:lock:*"), 0, "a release was lost at close");
}
