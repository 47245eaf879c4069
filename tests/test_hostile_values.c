/*
 * Issue 16 item 6: a hostile or broken server, on one node and on three
 * (Redlock).  Fake servers (tests/lib/fake_redis) answer the lock's plain
 * SET, the lock, release, fence, write-back and condvar scripts with what
 * the test chose: numbers out of
 * range, the wrong type, an error, or a reply trickled a byte at a time.
 * Every call returns EIO (never a hold with a bogus fencing token, never a
 * crash or a hang), and trylock, unlock, dcond_signal and dcond_broadcast
 * return within command_timeout_ms in total, retries and every Redlock
 * node included.
 */
#include <criterion/criterion.h>

#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "dmutex.h"
#include "dmt.h"
#include "fake_redis.h"

/* What the fake servers answer, per script; set by the test. */
struct script_replies {
	pthread_mutex_t mu;
	char take[128], acquire[256], release[64], fence[64], raise[64], signal[64];
	char seminit[64], semop[64], semget[64], barinit[64], barwait[64], rwacq[64], rwrel[64];
	int node_token[3];      /* > 0: acquire answers this token on node i */
};

static struct script_replies rep = { .mu = PTHREAD_MUTEX_INITIALIZER };
static char dir[64];
static struct fake_redis *fk[3];

static void
set_reply(char *field, size_t len, const char *v)
{
	pthread_mutex_lock(&rep.mu);
	snprintf(field, len, "%s", v);
	pthread_mutex_unlock(&rep.mu);
}
#define SET(field, v) set_reply(rep.field, sizeof rep.field, (v))

/* Another process's lock value with a kept lease (key layout 3). */
#define KEPT "3 0123456789abcdef - 0 c 30000 1 4242 4243 - elsewhere"

static char *
answer(int argc, char **argv, void *arg)
{
	int node = (int)(intptr_t)arg;
	char *r;

	/* SET lock value NX PX lease GET (one Redis: a free non-robust lock,
	 * key layout 3); EVALSHA sha nkeys KEYS... ARGS...: told apart by key
	 * and count. */
	pthread_mutex_lock(&rep.mu);
	if (argc > 1 && !strcasecmp(argv[0], "SET") && strstr(argv[1], ":lock:"))
		r = strdup(rep.take);
	else if (argc < 4)
		r = strdup("-ERR unknown\r\n");
	else if (strstr(argv[3], ":lock:") && argc >= 13) {   /* acquire: 2 keys, 8 args */
		if (rep.node_token[node] > 0)
			r = fake_fmt("*3\r\n:0\r\n$%d\r\n%d\r\n:0\r\n",
					snprintf(NULL, 0, "%d", rep.node_token[node]), rep.node_token[node]);
		else
			r = strdup(rep.acquire);
	} else if (strstr(argv[3], ":lock:") && argc == 7)     /* fence: 2 args */
		r = strdup(rep.fence);
	else if (strstr(argv[3], ":lock:"))                      /* release: 4 args */
		r = strdup(rep.release);
	else if (strstr(argv[3], ":meta:"))
		r = strdup(rep.raise);
	else if (strstr(argv[3], ":cond:"))
		r = strdup(rep.signal);
	else if (strstr(argv[3], ":sem:"))     /* init, get, unlink and time 3 args, op 8 */
		r = strdup(argc == 11 ? rep.semop : argc == 6 && (!strcmp(argv[4], "g") ||
				!strcmp(argv[4], "u") || !strcmp(argv[4], "t")) ? rep.semget : rep.seminit);
	else if (strstr(argv[3], ":barrier:"))  /* init 2 args, wait and time 7 */
		r = strdup(argc == 5 ? rep.barinit : rep.barwait);
	else if (strstr(argv[3], ":rw:"))       /* acquire 9 args (8 before wo), release 6 */
		r = strdup(argc >= 11 ? rep.rwacq : rep.rwrel);
	else
		r = strdup("-ERR not faked\r\n");
	pthread_mutex_unlock(&rep.mu);
	return r;
}

static void
up(void)
{
	snprintf(dir, sizeof dir, "/tmp/dmt-hostile-XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
	pthread_mutex_lock(&rep.mu);
	/* Busy with a kept lease (flag c): the client asks acquire.lua, whose
	 * replies most tests choose. */
	snprintf(rep.take, sizeof rep.take, "$%zu\r\n%s\r\n", strlen(KEPT), KEPT);
	snprintf(rep.acquire, sizeof rep.acquire, "*3\r\n:0\r\n$1\r\n7\r\n:0\r\n");
	snprintf(rep.fence, sizeof rep.fence, "*2\r\n:1\r\n$2\r\n42\r\n");
	snprintf(rep.release, sizeof rep.release, ":1\r\n");
	snprintf(rep.raise, sizeof rep.raise, ":1\r\n");
	snprintf(rep.signal, sizeof rep.signal, ":0\r\n");
	snprintf(rep.seminit, sizeof rep.seminit, ":1\r\n");
	snprintf(rep.semop, sizeof rep.semop, ":1\r\n");
	snprintf(rep.semget, sizeof rep.semget, ":1\r\n");
	snprintf(rep.barinit, sizeof rep.barinit, ":1\r\n");
	snprintf(rep.barwait, sizeof rep.barwait, "*2\r\n:0\r\n:1\r\n");
	snprintf(rep.rwacq, sizeof rep.rwacq, "*3\r\n:0\r\n:0\r\n:0\r\n");
	snprintf(rep.rwrel, sizeof rep.rwrel, ":1\r\n");
	memset(rep.node_token, 0, sizeof rep.node_token);
	pthread_mutex_unlock(&rep.mu);
	for (int i = 0; i < 3; i++) {
		char name[8];
		snprintf(name, sizeof name, "n%d", i);
		cr_assert_eq(fake_redis_start(&fk[i], dir, name, answer, (void *)(intptr_t)i), 0);
	}
}

static void
down(void)
{
	for (int i = 0; i < 3; i++)
		fake_redis_stop(fk[i]);
	rmdir(dir);
}

TestSuite(hostile_values, .init = up, .fini = down, .timeout = 60);

/* "URL?opts" on node 0, or the three nodes with opts on the first. */
static void
url_of(char *buf, size_t len, int redlock, const char *opts)
{
	if (redlock)
		snprintf(buf, len, "%s?%s,%s,%s", fake_redis_url(fk[0]), opts, fake_redis_url(fk[1]),
				fake_redis_url(fk[2]));
	else
		snprintf(buf, len, "%s?%s", fake_redis_url(fk[0]), opts);
}

static void
trickle_all(int byte_ms)
{
	for (int i = 0; i < 3; i++)
		fake_redis_trickle(fk[i], byte_ms);
}

static long long
ms_since(int64_t t0)
{
	return (long long)((dmt_now_ns() - t0) / 1000000);
}

/* Reply i (set by the caller) makes trylock EIO within the 300 ms command
 * timeout and scheduling slack, and leaves no hold (fence says EPERM). */
static void
trylock_is_eio(dmutex_t *m, size_t i)
{
	int64_t t0 = dmt_now_ns();
	uint64_t tok;
	int err = dmutex_trylock(m);

	cr_assert_eq(err, EIO, "reply %zu: trylock gave %d, want EIO", i, err);
	cr_assert_lt(ms_since(t0), 300 + 250 * dmt_slowdown(), "reply %zu: trylock took %lld ms", i, ms_since(t0));
	cr_assert_eq(dmutex_fence(m, &tok), EPERM, "reply %zu left a hold", i);
}

/* Acquire replies no Redis running acquire.lua gives: each is EIO, with
 * no hold left behind (fence says EPERM), whatever the token says. */
static const char *const bad_acquires[] = {
	"*3\r\n:0\r\n$1\r\n0\r\n:0\r\n",                                   /* token 0: Redlock */
	"*3\r\n:0\r\n$2\r\n-5\r\n:0\r\n",                                  /* negative */
	"*3\r\n:0\r\n$19\r\n9223372036854775808\r\n:0\r\n",                /* INT64_MAX + 1 */
	"*3\r\n:0\r\n$20\r\n99999999999999999999\r\n:0\r\n",               /* past UINT64_MAX */
	"*3\r\n:0\r\n$3\r\n1e9\r\n:0\r\n",                                 /* not decimal */
	"*3\r\n:0\r\n$0\r\n\r\n:0\r\n",                                    /* empty */
	"*3\r\n:0\r\n:0\r\n:0\r\n",                                        /* integer 0 */
	"*3\r\n:0\r\n:-9223372036854775808\r\n:0\r\n",                     /* integer min */
	"*3\r\n:0\r\n$-1\r\n:0\r\n",                                       /* nil */
	"*3\r\n:0\r\n*1\r\n:7\r\n:0\r\n",                                  /* nested array */
	"*1\r\n:0\r\n",                                                    /* too short */
	"*3\r\n:4\r\n$1\r\n7\r\n:0\r\n",                                   /* status 4 */
	"*3\r\n:-1\r\n$1\r\n7\r\n:0\r\n",                                  /* status -1 */
	"*2\r\n:1\r\n:10000000000000\r\n",                                 /* busy, PTTL 10^13 */
	"*2\r\n:1\r\n:-3\r\n",                                             /* busy, PTTL -3 */
	"*2\r\n:1\r\n$2\r\n10\r\n",                                        /* busy, PTTL a string */
	":1\r\n",                                                          /* not an array */
	"$5\r\nhello\r\n",
	"+OK\r\n",
	"*0\r\n",
	"-ERR no\r\n",
};

static void
bad_acquire_values(int redlock)
{
	dmutex_client_t *c;
	dmutex_t m;
	char url[1024];
	uint64_t tok;

	url_of(url, sizeof url, redlock, "command_timeout_ms=300");
	cr_assert_eq(dmt_open_mutex(&c, &m, url, "hv", NULL), 0);
	for (size_t i = 0; i < sizeof bad_acquires / sizeof bad_acquires[0]; i++) {
		/* On one node, token '0' is a hold whose token is assigned when
		 * first asked for (key layout 3); Redlock assigns at once. */
		if (i == 0 && !redlock)
			continue;
		SET(acquire, bad_acquires[i]);
		trylock_is_eio(&m, i);
	}
	/* The largest token acquire.lua can give is taken as it is. */
	SET(acquire, "*3\r\n:0\r\n$19\r\n9223372036854775807\r\n:0\r\n");
	cr_assert_eq(dmutex_trylock(&m), 0);
	cr_assert_eq(dmutex_fence(&m, &tok), 0);
	cr_assert_eq(tok, (uint64_t)INT64_MAX);
	cr_assert_eq(dmutex_unlock(&m), 0);
	dmt_close_mutex(c, &m);
}

Test(hostile_values, fence_token_out_of_range_is_eio)
{
	bad_acquire_values(0);
}

Test(hostile_values, fence_token_out_of_range_is_eio_redlock)
{
	bad_acquire_values(1);
}

/* What the plain SET ... NX PX GET (key layout 3) answers: nil (free,
 * ours) or the holder's value.  Anything else is EIO with no hold left;
 * the not-recoverable mark is ENOTRECOVERABLE. */
static const char *const bad_takes[] = {
	":1\r\n",
	"+OK\r\n",
	"*0\r\n",
	"-ERR no\r\n",
	"$5\r\nhello\r\n",                                             /* not a lock value */
	"$1\r\n3\r\n",
	"$0\r\n\r\n",
	"$43\r\n4 0123456789abcdef - 0 - 30000 1 1 1 - host\r\n",       /* another version */
};

Test(hostile_values, take_reply_not_a_lock_value_is_eio)
{
	dmutex_client_t *c;
	dmutex_t m;
	char url[1024];
	uint64_t tok;

	url_of(url, sizeof url, 0, "command_timeout_ms=300");
	cr_assert_eq(dmt_open_mutex(&c, &m, url, "hv-take", NULL), 0);
	for (size_t i = 0; i < sizeof bad_takes / sizeof bad_takes[0]; i++) {
		SET(take, bad_takes[i]);
		trylock_is_eio(&m, i);
	}
	SET(take, "$8\r\n3 notrec\r\n");
	cr_assert_eq(dmutex_trylock(&m), ENOTRECOVERABLE);
	/* Free: the hold's token is asked for when first wanted (fence.lua). */
	SET(take, "$-1\r\n");
	cr_assert_eq(dmutex_trylock(&m), 0);
	cr_assert_eq(dmutex_fence(&m, &tok), 0);
	cr_assert_eq(tok, 42);
	cr_assert_eq(dmutex_unlock(&m), 0);
	dmt_close_mutex(c, &m);
}

/* fence.lua's answers it never gives: EIO, the hold kept (a later ask may
 * get the token). */
Test(hostile_values, bad_fence_answer_is_eio)
{
	static const char *const bad[] = { ":1\r\n", "*2\r\n:1\r\n$1\r\n0\r\n",
		"*2\r\n:1\r\n$2\r\n-5\r\n", "*2\r\n:1\r\n$20\r\n99999999999999999999\r\n",
		"*2\r\n:2\r\n$2\r\n42\r\n", "*1\r\n:1\r\n", "+OK\r\n", "-ERR no\r\n" };
	dmutex_client_t *c;
	dmutex_t m;
	char url[1024];
	uint64_t tok;

	url_of(url, sizeof url, 0, "command_timeout_ms=300");
	cr_assert_eq(dmt_open_mutex(&c, &m, url, "hv-fence", NULL), 0);
	SET(take, "$-1\r\n");
	cr_assert_eq(dmutex_trylock(&m), 0);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int err;
		SET(fence, bad[i]);
		err = dmutex_fence(&m, &tok);
		cr_assert_eq(err, EIO, "fence reply %zu: gave %d, want EIO", i, err);
	}
	SET(fence, "*2\r\n:1\r\n$2\r\n42\r\n");
	cr_assert_eq(dmutex_fence(&m, &tok), 0);
	cr_assert_eq(tok, 42);
	cr_assert_eq(dmutex_unlock(&m), 0);
	dmt_close_mutex(c, &m);
}

/* Redlock's write-back round: the nodes gave different tokens, and the
 * nodes' answers to fence_raise.lua are not its 1: no quorum stands behind
 * the token, so no hold. */
Test(hostile_values, redlock_write_back_bad_answer_is_eio)
{
	static const char *const bad[] = { ":0\r\n", ":2\r\n", ":-1\r\n", "$1\r\n1\r\n", "*0\r\n",
		"-ERR no\r\n" };
	dmutex_client_t *c;
	dmutex_t m;
	char url[1024];
	uint64_t tok;

	url_of(url, sizeof url, 1, "command_timeout_ms=300");
	cr_assert_eq(dmt_open_mutex(&c, &m, url, "hv-raise", NULL), 0);
	pthread_mutex_lock(&rep.mu);
	rep.node_token[0] = 5;
	rep.node_token[1] = 6;
	rep.node_token[2] = 7;
	pthread_mutex_unlock(&rep.mu);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int err;
		SET(raise, bad[i]);
		err = dmutex_trylock(&m);
		cr_assert_eq(err, EIO, "fence_raise reply %zu: trylock gave %d", i, err);
		cr_assert_eq(dmutex_fence(&m, &tok), EPERM);
	}
	SET(raise, ":1\r\n");
	cr_assert_eq(dmutex_trylock(&m), 0);
	cr_assert_eq(dmutex_fence(&m, &tok), 0);
	cr_assert_eq(tok, 7);
	cr_assert_eq(dmutex_unlock(&m), 0);
	dmt_close_mutex(c, &m);
}

/* Release replies release.lua never gives: EIO from a synchronous unlock
 * (async_release=0), the hold forgotten; an asynchronous one has returned
 * 0 before the answer comes, and forgets the hold all the same. */
static void
bad_release_answer(int async)
{
	static const char *const bad[] = { ":4\r\n", ":-1\r\n", ":9223372036854775807\r\n",
		"$1\r\n1\r\n", "*1\r\n:1\r\n", "+OK\r\n" };
	dmutex_client_t *c;
	dmutex_t m;
	char url[1024];
	uint64_t tok;

	url_of(url, sizeof url, 0, async ? "command_timeout_ms=300" : "command_timeout_ms=300&async_release=0");
	cr_assert_eq(dmt_open_mutex(&c, &m, url, "hv-rel", NULL), 0);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int64_t t0;
		int err;
		SET(release, ":1\r\n");
		cr_assert_eq(dmutex_trylock(&m), 0);
		SET(release, bad[i]);
		t0 = dmt_now_ns();
		err = dmutex_unlock(&m);
		cr_assert_eq(err, async ? 0 : EIO, "release reply %zu: unlock gave %d", i, err);
		cr_assert_lt(ms_since(t0), 300 + 250, "reply %zu: unlock took %lld ms", i, ms_since(t0));
		cr_assert_eq(dmutex_fence(&m, &tok), EPERM);
	}
	SET(release, ":1\r\n");
	dmt_close_mutex(c, &m);
}

Test(hostile_values, bad_release_answer_is_eio)
{
	bad_release_answer(0);
}

Test(hostile_values, bad_release_answer_after_async_unlock)
{
	bad_release_answer(1);
}

/* cond_signal.lua answers how many waiters it woke (0 or more, at most one
 * per connection): anything else is EIO for signal and broadcast. */
static void
bad_signal_values(int redlock)
{
	static const char *const bad[] = { ":-1\r\n", ":9223372036854775807\r\n",
		":-9223372036854775808\r\n", ":2147483648\r\n", "$1\r\n1\r\n", "*0\r\n", "+OK\r\n",
		"-ERR no\r\n", "$-1\r\n" };
	dmutex_client_t *c;
	dcond_attr_t a;
	dcond_t cv;
	char url[1024];

	url_of(url, sizeof url, redlock, "command_timeout_ms=300");
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(dcond_attr_init(&a), 0);
	cr_assert_eq(dcond_attr_setclient(&a, c), 0);
	cr_assert_eq(dcond_init(&cv, "hv-cond", &a), 0);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int64_t t0;
		int err;
		SET(signal, bad[i]);
		t0 = dmt_now_ns();
		err = dcond_signal(&cv);
		cr_assert_eq(err, EIO, "signal reply %zu: gave %d", i, err);
		err = dcond_broadcast(&cv);
		cr_assert_eq(err, EIO, "broadcast reply %zu: gave %d", i, err);
		cr_assert_lt(ms_since(t0), 2 * 300 + 250, "reply %zu: took %lld ms", i, ms_since(t0));
	}
	SET(signal, ":2147483647\r\n");
	cr_assert_eq(dcond_signal(&cv), 0);
	cr_assert_eq(dcond_broadcast(&cv), 0);
	cr_assert_eq(dcond_destroy(&cv), 0);
	dcond_attr_destroy(&a);
	dmutex_client_close(c);
}

Test(hostile_values, signal_count_out_of_range_is_eio)
{
	bad_signal_values(0);
}

Test(hostile_values, signal_count_out_of_range_is_eio_redlock)
{
	bad_signal_values(1);
}

/*
 * Every node trickles its replies, a byte every 100 ms (a reply is 4 to
 * 20 bytes: 0.4 to 2 s).  With command_timeout_ms=200 and a per-node
 * timeout of 300 ms, trylock, unlock, signal and broadcast each return EIO
 * within 200 ms and scheduling slack: the deadline is the call's, shared
 * by its rounds (acquire, give-back), its retries and its nodes.  An
 * asynchronous unlock (one Redis, the default) does not wait for the
 * answer: 0, within the same bound.
 */
static void
trickled_total_bound(int redlock, int async, long long *took)
{
	dmutex_client_t *c;
	dmutex_t m;
	dcond_attr_t a;
	dcond_t cv;
	char url[1024];
	int64_t t0;

	url_of(url, sizeof url, redlock, async ? "command_timeout_ms=200&node_timeout_ms=300"
			: "command_timeout_ms=200&node_timeout_ms=300&async_release=0");
	cr_assert_eq(dmt_open_mutex(&c, &m, url, "hv-slow", NULL), 0);
	cr_assert_eq(dcond_attr_init(&a), 0);
	cr_assert_eq(dcond_attr_setclient(&a, c), 0);
	cr_assert_eq(dcond_init(&cv, "hv-slow", &a), 0);

	trickle_all(100);
	t0 = dmt_now_ns();
	cr_assert_eq(dmutex_trylock(&m), EIO);
	took[0] = ms_since(t0);

	/* Redlock skips a node that did not answer for 200 ms: until then
	 * trylock says EIO at once. */
	trickle_all(0);
	int64_t until = dmt_now_ns() + 5000 * 1000000LL;
	int err;
	while ((err = dmutex_trylock(&m)) == EIO && dmt_now_ns() < until)
		poll(NULL, 0, 10);
	cr_assert_eq(err, 0);
	trickle_all(100);
	t0 = dmt_now_ns();
	cr_assert_eq(dmutex_unlock(&m), async && !redlock ? 0 : EIO);
	took[1] = ms_since(t0);

	t0 = dmt_now_ns();
	cr_assert_eq(dcond_signal(&cv), EIO);
	took[2] = ms_since(t0);
	t0 = dmt_now_ns();
	cr_assert_eq(dcond_broadcast(&cv), EIO);
	took[3] = ms_since(t0);
	trickle_all(0);

	cr_assert_eq(dcond_destroy(&cv), 0);
	dcond_attr_destroy(&a);
	dmt_close_mutex(c, &m);
	fprintf(stderr, "%s, command_timeout_ms=200: trylock %lld ms, unlock %lld ms, signal %lld ms, "
			"broadcast %lld ms\n", redlock ? "Redlock x3" : "one Redis", took[0], took[1],
			took[2], took[3]);
	/* The margin is for the deadline's wake-up on a loaded machine, 3x
	 * under the sanitizers; the plain run's 450 ms still fails a
	 * deadline per round, retry or node (a reply takes 0.4 to 2 s). */
	for (int i = 0; i < 4; i++)
		cr_assert_lt(took[i], 200 + 250 * dmt_slowdown(), "call %d took %lld ms with command_timeout_ms=200",
				i, took[i]);
}

Test(hostile_values, trickled_replies_total_bound)
{
	long long took[4];

	trickled_total_bound(0, 0, took);
}

Test(hostile_values, trickled_replies_total_bound_async_unlock)
{
	long long took[4];

	trickled_total_bound(0, 1, took);
}

Test(hostile_values, trickled_replies_total_bound_redlock)
{
	long long took[4];

	trickled_total_bound(1, 1, took);
}

/*
 * Semaphores, barriers and read-write locks (one node): every number their
 * scripts answer is range-checked; anything else is EIO, never a value
 * passed on (a permit count past DSEM_VALUE_MAX, a negated LLONG_MIN).
 */
Test(hostile_values, semaphore_numbers_out_of_range_are_eio)
{
	static const char *const bad_op[] = { ":2\r\n", ":-1\r\n", ":9223372036854775807\r\n",
		"$1\r\n1\r\n", "*0\r\n", "+OK\r\n" };
	static const char *const bad_post[] = { ":-2\r\n", ":2147483648\r\n",
		":-9223372036854775808\r\n", "$1\r\n1\r\n" };
	static const char *const bad_get[] = { ":-1\r\n", ":2147483648\r\n", "$1\r\n5\r\n" };
	static const char *const bad_init[] = { ":2\r\n", ":-3\r\n", ":-9223372036854775808\r\n" };
	dmutex_client_t *c;
	dsem_t sem;
	char url[1024];
	int v;

	url_of(url, sizeof url, 0, "command_timeout_ms=300");
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	for (size_t i = 0; i < sizeof bad_init / sizeof bad_init[0]; i++) {
		SET(seminit, bad_init[i]);
		cr_assert_eq(dsem_init(&sem, "hv-sem", 1, c, 0), EIO, "init reply %zu", i);
	}
	SET(seminit, ":1\r\n");
	cr_assert_eq(dsem_init(&sem, "hv-sem", 1, c, 0), 0);
	for (size_t i = 0; i < sizeof bad_op / sizeof bad_op[0]; i++) {
		SET(semop, bad_op[i]);
		cr_assert_eq(dsem_trywait(&sem), EIO, "take reply %zu", i);
	}
	for (size_t i = 0; i < sizeof bad_post / sizeof bad_post[0]; i++) {
		SET(semop, bad_post[i]);
		cr_assert_eq(dsem_post(&sem), EIO, "post reply %zu", i);
	}
	for (size_t i = 0; i < sizeof bad_get / sizeof bad_get[0]; i++) {
		SET(semget, bad_get[i]);
		cr_assert_eq(dsem_getvalue(&sem, &v), EIO, "getvalue reply %zu", i);
		cr_assert_eq(dsem_unlink("hv-sem", c), EIO, "unlink reply %zu", i);
	}
	SET(semop, ":2147483647\r\n");
	cr_assert_eq(dsem_post(&sem), 0);
	SET(semget, ":2147483647\r\n");
	cr_assert_eq(dsem_getvalue(&sem, &v), 0);
	cr_assert_eq(v, 2147483647);
	cr_assert_eq(dsem_destroy(&sem), 0);
	dmutex_client_close(c);
}

Test(hostile_values, barrier_numbers_out_of_range_are_eio)
{
	static const char *const bad_init[] = { ":2\r\n", ":-2147483648\r\n",
		":-9223372036854775808\r\n", "$1\r\n1\r\n" };
	static const char *const bad_wait[] = { "*2\r\n:-1\r\n:0\r\n", "*2\r\n:0\r\n:2\r\n",
		"*2\r\n:0\r\n:-1\r\n", "*1\r\n:0\r\n", "*2\r\n$1\r\n0\r\n:1\r\n", ":1\r\n" };
	dmutex_client_t *c;
	dbarrier_t b;
	char url[1024];

	url_of(url, sizeof url, 0, "command_timeout_ms=300");
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	for (size_t i = 0; i < sizeof bad_init / sizeof bad_init[0]; i++) {
		SET(barinit, bad_init[i]);
		cr_assert_eq(dbarrier_init(&b, "hv-bar", 2, c), EIO, "init reply %zu", i);
	}
	SET(barinit, ":-2147483647\r\n");   /* exists with count INT_MAX */
	cr_assert_eq(dbarrier_init(&b, "hv-bar", 2, c), EINVAL);
	SET(barinit, ":1\r\n");
	cr_assert_eq(dbarrier_init(&b, "hv-bar", 2, c), 0);
	for (size_t i = 0; i < sizeof bad_wait / sizeof bad_wait[0]; i++) {
		SET(barwait, bad_wait[i]);
		cr_assert_eq(dbarrier_wait(&b), EIO, "wait reply %zu", i);
	}
	SET(barwait, "*2\r\n:9223372036854775807\r\n:1\r\n");
	cr_assert_eq(dbarrier_wait(&b), DBARRIER_SERIAL_THREAD);
	cr_assert_eq(dbarrier_destroy(&b), 0);
	dmutex_client_close(c);
}

Test(hostile_values, rwlock_numbers_out_of_range_are_eio)
{
	static const char *const bad_acq[] = { "*3\r\n:0\r\n:-1\r\n:0\r\n",
		"*3\r\n:0\r\n:0\r\n:1048576\r\n", "*3\r\n:0\r\n:8796093022208\r\n:0\r\n",
		"*2\r\n:1\r\n:-5\r\n", "*2\r\n:1\r\n:86400001\r\n", "*3\r\n:2\r\n:0\r\n:0\r\n",
		":0\r\n" };
	static const char *const bad_rel[] = { ":2\r\n", ":-1\r\n", ":9223372036854775807\r\n",
		"+OK\r\n" };
	dmutex_client_t *c;
	dmutex_attr_t a;
	drwlock_t rw;
	char url[1024];

	url_of(url, sizeof url, 0, "command_timeout_ms=300");
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	cr_assert_eq(drwlock_init(&rw, "hv-rw", &a), 0);
	for (size_t i = 0; i < sizeof bad_acq / sizeof bad_acq[0]; i++) {
		SET(rwacq, bad_acq[i]);
		cr_assert_eq(drwlock_tryrdlock(&rw), EIO, "acquire reply %zu", i);
		cr_assert_eq(drwlock_trywrlock(&rw), EIO, "acquire reply %zu", i);
	}
	SET(rwacq, "*3\r\n:0\r\n:0\r\n:0\r\n");
	for (size_t i = 0; i < sizeof bad_rel / sizeof bad_rel[0]; i++) {
		SET(rwrel, ":1\r\n");
		cr_assert_eq(drwlock_tryrdlock(&rw), 0);
		SET(rwrel, bad_rel[i]);
		cr_assert_eq(drwlock_unlock(&rw), EIO, "release reply %zu", i);
	}
	SET(rwrel, ":1\r\n");
	cr_assert_eq(drwlock_destroy(&rw), 0);
	dmutex_attr_destroy(&a);
	dmutex_client_close(c);
}

/* Issue 30 item 5: the counters' index holds a member that is not a
 * string.  `dmutex metrics` says so and exits with the backend status
 * (87), not SIGSEGV. */
static char *
metrics_answer(int argc, char **argv, void *arg)
{
	(void)arg;
	if (argc > 1 && !strcasecmp(argv[0], "ZREVRANGE"))
		return strdup("*2\r\n:1\r\n$4\r\nlive\r\n");
	if (argc > 1 && !strcasecmp(argv[0], "HGETALL"))
		return strdup("*2\r\n$3\r\nacq\r\n$1\r\n5\r\n");
	return strdup("-ERR unknown\r\n");
}

Test(hostile_values, metrics_index_member_not_a_string_is_refused)
{
	struct fake_redis *f;
	char out[128], env_url[700], *text;
	const char *bin = getenv("DMUTEX_BIN");
	FILE *fp;
	long n;

	cr_assert(bin, "DMUTEX_BIN is not set (run through meson test)");
	cr_assert_eq(fake_redis_start(&f, dir, "met", metrics_answer, NULL), 0);
	snprintf(out, sizeof out, "%s/metrics.out", dir);
	snprintf(env_url, sizeof env_url, "DMUTEX_URL=%s", fake_redis_url(f));
	const char *argv[] = { bin, "metrics", NULL };
	const char *env[] = { env_url, NULL };
	int rc = th_run(argv, env, out, 20000);
	fake_redis_stop(f);
	cr_assert_not_null(fp = fopen(out, "r"));
	fseek(fp, 0, SEEK_END);
	n = ftell(fp);
	rewind(fp);
	cr_assert_not_null(text = calloc(1, (size_t)n + 1));
	cr_assert_eq(fread(text, 1, (size_t)n, fp), (size_t)n);
	fclose(fp);
	unlink(out);
	cr_expect_eq(rc, 87, "dmutex metrics exited %d, want 87; output:\n%s", rc, text);
	cr_expect(strstr(text, "a member that is not a string"), "output:\n%s", text);
	free(text);
}
