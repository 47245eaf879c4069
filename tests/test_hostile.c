/*
 * Issue 16 item 6 (first part): numbers from the server are range-checked.
 * A holder's PTTL of 10^13 ms (set on the real lock key by an admin
 * connection) would overflow the deadline computed from it: trylock and
 * timedlock return EIO with one log line instead.
 */
#include <criterion/criterion.h>

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "dmutex.h"
#include "harness.h"
#include "dmt.h"

static struct th_redis srv;
static atomic_int range_lines;

static void
logger(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	if (strstr(msg, "out of range"))
		atomic_fetch_add(&range_lines, 1);
}

static void
up(void)
{
	cr_assert_eq(th_redis_start(&srv, NULL), 0);
}

static void
down(void)
{
	th_redis_stop(&srv);
}

TestSuite(hostile, .init = up, .fini = down, .timeout = 20);

Test(hostile, huge_pttl_is_eio_not_an_overflow)
{
	dmutex_client_t *ch, *cw;
	dmutex_t hm, wm;
	char lk[600];
	struct timespec ts;
	redisReply *r;

	dmutex_set_logger(logger, NULL);
	cr_assert_eq(dmt_open_mutex(&ch, &hm, srv.url, "hostile-pttl", NULL), 0);
	cr_assert_eq(dmt_open_mutex(&cw, &wm, srv.url, "hostile-pttl", NULL), 0);
	cr_assert_eq(dmutex_lock(&hm), 0);
	dmt_lock_key(lk, sizeof lk, "hostile-pttl");
	r = th_redis_cmd(&srv, "PEXPIRE %s 10000000000000", lk);
	cr_assert(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1, "PEXPIRE failed");
	freeReplyObject(r);

	/* A trylock is one plain SET ... GET (key layout 3), which reads no
	 * PTTL: busy, nothing to range-check.  A wait asks acquire.lua, which
	 * answers the PTTL: out of range, EIO and a log line. */
	cr_assert_eq(dmutex_trylock(&wm), EBUSY);
	cr_assert_eq(atomic_load(&range_lines), 0, "want no log line, got %d", atomic_load(&range_lines));
	dmt_deadline_in(CLOCK_REALTIME, 200, &ts);
	cr_assert_eq(dmutex_timedlock(&wm, &ts), EIO);
	/* One a try: the wait retries a failing backend within its deadline. */
	cr_assert_geq(atomic_load(&range_lines), 1, "no log line says out of range");
	cr_assert_eq(dmutex_unlock(&hm), 0);
	dmt_close_mutex(cw, &wm);
	dmt_close_mutex(ch, &hm);
}

/*
 * No SIGPIPE: a server that closed a pooled connection makes the next
 * send fail with EPIPE (deterministic on a unix socket), which must be an
 * error, never a signal that kills a program with the default disposition.
 * The fake server answers the client's open, then hangs up; later
 * connections are closed at once.
 */
#include <signal.h>

#include "fake_redis.h"

static char *
refuse_all(int argc, char **argv, void *arg)
{
	(void)argc;
	(void)argv;
	(void)arg;
	return strdup("-ERR not here\r\n");
}

Test(hostile, closed_connection_is_eio_not_sigpipe)
{
	struct fake_redis *f;
	dmutex_client_t *c;
	dmutex_t m;

	signal(SIGPIPE, SIG_DFL);
	cr_assert_eq(fake_redis_start(&f, srv.dir, "fake", refuse_all, NULL), 0);
	cr_assert_eq(dmt_open_mutex(&c, &m, fake_redis_url(f), "hostile-pipe", NULL), 0);
	fake_redis_hang_up(f);
	/* The pooled connection is closed at the other end: EPIPE, not death. */
	cr_assert_eq(dmutex_trylock(&m), EIO);
	dmt_close_mutex(c, &m);
	fake_redis_stop(f);
}

/*
 * A reply trickled one byte at a time (issue 16 item 6): trylock and unlock
 * end with EIO within command_timeout_ms in total, the retry on a fresh
 * connection included, however long the server would take.
 */
static char *
acquire_ok(int argc, char **argv, void *arg)
{
	(void)argc;
	(void)argv;
	(void)arg;
	/* A free lock taken by the plain SET ... NX PX GET (key layout 3:
	 * nil, it was free); acquired, token 7, no owner died (acquire.lua:
	 * 2 keys, 8 args); or released (release.lua's 1). */
	if (!strcasecmp(argv[0], "SET") && argc > 1 && strstr(argv[1], ":lock:"))
		return strdup("$-1\r\n");
	if (argc == 13 && strstr(argv[3], ":lock:"))
		return strdup("*3\r\n:0\r\n$1\r\n7\r\n:0\r\n");
	return strdup(":1\r\n");
}

Test(hostile, trickled_reply_is_eio_within_command_timeout)
{
	struct fake_redis *f;
	dmutex_client_t *c;
	dmutex_t m;
	char url[300];
	int64_t t0, took;

	cr_assert_eq(fake_redis_start(&f, srv.dir, "trickle", acquire_ok, NULL), 0);
	/* async_release=0: the unlock waits for its answer (as on Redlock,
	 * or a fair mutex), and that wait too ends within the budget. */
	snprintf(url, sizeof url, "%s?command_timeout_ms=200&async_release=0", fake_redis_url(f));
	cr_assert_eq(dmt_open_mutex(&c, &m, url, "hostile-trickle", NULL), 0);
	/* The SET's nil, 5 bytes at 400 ms each: 2 s, ten times the budget. */
	fake_redis_trickle(f, 400);
	t0 = dmt_now_ns();
	cr_assert_eq(dmutex_trylock(&m), EIO);
	took = (dmt_now_ns() - t0) / 1000000;
	/* The budget and a margin for the deadline's wake-up on a loaded
	 * machine (3x under the sanitizers); a wait that each byte renewed
	 * would take the trickle's 2 s. */
	cr_assert_lt(took, 200 + 250 * dmt_slowdown(), "trylock took %lld ms with command_timeout_ms=200", (long long)took);

	fake_redis_trickle(f, 0);
	cr_assert_eq(dmutex_trylock(&m), 0);
	fake_redis_trickle(f, 100);
	t0 = dmt_now_ns();
	cr_assert_eq(dmutex_unlock(&m), EIO);
	took = (dmt_now_ns() - t0) / 1000000;
	cr_assert_lt(took, 200 + 250 * dmt_slowdown(), "unlock took %lld ms with command_timeout_ms=200", (long long)took);
	fake_redis_trickle(f, 0);
	dmt_close_mutex(c, &m);
	fake_redis_stop(f);
}
