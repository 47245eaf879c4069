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

	cr_assert_eq(dmutex_trylock(&wm), EIO);
	cr_assert_eq(atomic_load(&range_lines), 1, "want one log line, got %d", atomic_load(&range_lines));
	dmt_deadline_in(CLOCK_REALTIME, 200, &ts);
	cr_assert_eq(dmutex_timedlock(&wm, &ts), EIO);
	cr_assert_eq(dmutex_unlock(&hm), 0);
	dmt_close_mutex(cw, &wm);
	dmt_close_mutex(ch, &hm);
}

/*
 * No SIGPIPE: a server that closed a pooled connection makes the next
 * send fail with EPIPE (deterministic on a unix socket), which must be an
 * error, never a signal that kills a program with the default disposition.
 * The peer answers the client's PING at open, then closes; later
 * connections are closed at once.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int lfd = -1;
static atomic_int closed_first;

static void *
closing_peer(void *arg)
{
	char buf[256];
	int fd;

	(void)arg;
	if ((fd = accept(lfd, NULL, NULL)) < 0)
		return NULL;
	/* "*1\r\n$4\r\nPING\r\n" is 14 bytes. */
	for (size_t got = 0; got < 14;) {
		ssize_t k = read(fd, buf, sizeof buf);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	if (write(fd, "+PONG\r\n", 7) != 7)
		return NULL;
	close(fd);
	atomic_store(&closed_first, 1);
	while ((fd = accept(lfd, NULL, NULL)) >= 0)
		close(fd);
	return NULL;
}

static int
first_closed(void *arg)
{
	(void)arg;
	return atomic_load(&closed_first);
}

Test(hostile, closed_connection_is_eio_not_sigpipe)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	char url[300];
	dmutex_client_t *c;
	dmutex_t m;
	pthread_t t;

	signal(SIGPIPE, SIG_DFL);
	cr_assert_lt(strlen(srv.dir) + 11, sizeof sun.sun_path);
	snprintf(sun.sun_path, sizeof sun.sun_path, "%.90s/fake.sock", srv.dir);
	cr_assert((lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0);
	cr_assert_eq(bind(lfd, (struct sockaddr *)&sun, sizeof sun), 0);
	cr_assert_eq(listen(lfd, 8), 0);
	cr_assert_eq(pthread_create(&t, NULL, closing_peer, NULL), 0);
	snprintf(url, sizeof url, "unix://%s", sun.sun_path);
	cr_assert_eq(dmt_open_mutex(&c, &m, url, "hostile-pipe", NULL), 0);
	cr_assert(th_wait_until(first_closed, NULL, 5000), "the fake peer never closed");
	/* The pooled connection is closed at the other end: EPIPE, not death. */
	cr_assert_eq(dmutex_trylock(&m), EIO);
	dmt_close_mutex(c, &m);
	shutdown(lfd, SHUT_RDWR);
	close(lfd);
	pthread_join(t, NULL);
}
