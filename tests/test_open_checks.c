/*
 * What dmutex_client_open checks on each server besides the ACL
 * (test_acl.c), issue 16 items 8 and 12:
 *  - an evicting maxmemory-policy is warned about (allkeys-* and, as our
 *    keys carry TTLs, volatile-*); a CONFIG GET the ACL denies is said
 *    once at info level;
 *  - a Redlock URL naming one server twice, the same way or two ways
 *    (127.0.0.1 and localhost: same run_id), is EINVAL with one log line;
 *  - dmutex_getlease gives the lease a mutex really uses.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "dmutex.h"
#include "harness.h"
#include "dmt.h"

static struct th_redis srv[3];

static void
down(void)
{
	dmutex_set_logger(NULL, NULL);
	for (int i = 0; i < 3; i++)
		th_redis_stop(&srv[i]);
}

TestSuite(checks, .fini = down, .timeout = 30);

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_text[64 * 1024];
static size_t log_len;
static int log_lines[DMUTEX_LOG_DEBUG + 1];

static void
capture(int level, const char *msg, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&log_mu);
	log_len += (size_t)snprintf(log_text + log_len, sizeof log_text - log_len, "%d %s\n", level, msg);
	if (log_len >= sizeof log_text)
		log_len = sizeof log_text - 1;
	if (level >= 0 && level <= DMUTEX_LOG_DEBUG)
		log_lines[level]++;
	pthread_mutex_unlock(&log_mu);
}

static void
log_start(void)
{
	pthread_mutex_lock(&log_mu);
	log_len = 0;
	log_text[0] = '\0';
	memset(log_lines, 0, sizeof log_lines);
	pthread_mutex_unlock(&log_mu);
	dmutex_set_logger(capture, NULL);
}

/* How many logged lines contain s. */
static int
log_count(const char *s)
{
	int n = 0;
	pthread_mutex_lock(&log_mu);
	for (const char *p = log_text; (p = strstr(p, s)); p += strlen(s))
		n++;
	pthread_mutex_unlock(&log_mu);
	return n;
}

static void
open_close(const char *url, int want)
{
	dmutex_client_t *c = NULL;
	int rc = dmutex_client_open(&c, url);

	cr_assert_eq(rc, want, "open %s: %s, want %s", url, dmutex_strerror(rc), dmutex_strerror(want));
	if (!rc)
		cr_assert_eq(dmutex_client_close(c), 0);
}

/* ---- maxmemory-policy (item 12) ---- */

Test(checks, evicting_policies_are_warned_about)
{
	static const char *const evicting[] = { "allkeys-lru", "volatile-ttl" };

	cr_assert_eq(th_redis_start(&srv[0], "maxmemory-policy noeviction\n"), 0);
	log_start();
	open_close(srv[0].url, 0);
	cr_assert_eq(log_count("maxmemory-policy"), 0, "noeviction warned about:\n%s", log_text);

	for (size_t i = 0; i < 2; i++) {
		char want[700];
		redisReply *r = th_redis_cmd(&srv[0], "CONFIG SET maxmemory-policy %s", evicting[i]);
		cr_assert(r && r->type == REDIS_REPLY_STATUS);
		freeReplyObject(r);
		log_start();
		open_close(srv[0].url, 0);
		snprintf(want, sizeof want, "%d ", DMUTEX_LOG_WARN);
		snprintf(want + strlen(want), sizeof want - strlen(want), "%s", srv[0].url);
		cr_assert_eq(log_count("maxmemory-policy is "), 1, "%s not warned about once:\n%s",
				evicting[i], log_text);
		cr_assert_eq(log_count(evicting[i]), 1, "the warning does not name %s:\n%s", evicting[i], log_text);
		cr_assert_eq(log_count(want), 1, "not one WARN line for %s:\n%s", evicting[i], log_text);
	}
}

/* An ACL user that may not run CONFIG: the open succeeds, and the
 * process says once, at info level, that it could not check. */
Test(checks, config_denied_is_said_once_at_info)
{
	char url[700];

	cr_assert_eq(th_redis_start(&srv[0], "user app on >pw ~dmutex:* &dmutex:* +@all -config\n"), 0);
	log_start();
	dmt_url(url, sizeof url, "app:pw", srv[0].port, NULL);
	open_close(url, 0);
	open_close(url, 0);
	cr_assert_eq(log_count("cannot read maxmemory-policy"), 1, "not said once:\n%s", log_text);
	cr_assert_eq(log_lines[DMUTEX_LOG_WARN] + log_lines[DMUTEX_LOG_ERROR], 0, "above info:\n%s", log_text);
}

/* ---- dmutex_getlease (item 12) ---- */

Test(checks, getlease_answers_the_effective_lease)
{
	struct dmt_attr o = { .lease_ms = 5000 };
	char url[700];
	dmutex_client_t *c, *c2;
	dmutex_t m, m2, m3;
	unsigned lease = 1;

	cr_assert_eq(th_redis_start(&srv[0], NULL), 0);
	cr_assert_eq(dmt_open_mutex(&c, &m, srv[0].url, "gl-default", NULL), 0);
	cr_assert_eq(dmutex_getlease(&m, &lease), 0);
	cr_assert_eq(lease, 10000, "default lease %u", lease);
	cr_assert_eq(dmt_init_mutex(&m2, "gl-attr", c, &o), 0);
	cr_assert_eq(dmutex_getlease(&m2, &lease), 0);
	cr_assert_eq(lease, 5000, "attribute lease %u", lease);

	dmt_url(url, sizeof url, NULL, srv[0].port, "lease_ms=3000");
	cr_assert_eq(dmt_open_mutex(&c2, &m3, url, "gl-client", NULL), 0);
	cr_assert_eq(dmutex_getlease(&m3, &lease), 0);
	cr_assert_eq(lease, 3000, "client lease %u", lease);

	cr_assert_eq(dmutex_getlease(&m3, NULL), EINVAL);
	cr_assert_eq(dmutex_getlease(NULL, &lease), EINVAL);
	dmt_close_mutex(c2, &m3);
	lease = 7;
	cr_assert_eq(dmutex_getlease(&m3, &lease), EINVAL, "destroyed mutex");
	cr_assert_eq(lease, 7, "written on failure");
	cr_assert_eq(dmutex_destroy(&m2), 0);
	dmt_close_mutex(c, &m);
}

Test(checks, getlease_binds_a_static_mutex)
{
	static dmutex_t sm = DMUTEX_INITIALIZER("gl-static");
	char env[700];
	unsigned lease = 0;

	cr_assert_eq(th_redis_start(&srv[0], NULL), 0);
	dmt_url(env, sizeof env, NULL, srv[0].port, "lease_ms=4000");
	setenv("DMUTEX_URL", env, 1);
	cr_assert_eq(dmutex_getlease(&sm, &lease), 0);
	cr_assert_eq(lease, 4000, "static mutex lease %u", lease);
}

/* ---- Redlock duplicates (item 8), on 3 real servers ---- */

/* url with the harness's command timeout (th_command_timeout_ms): these
 * opens talk to the servers (PING, INFO for the run_id). */
static void
timed(char *url, size_t len)
{
	char bare[1024], opt[48];

	snprintf(bare, sizeof bare, "%s", url);
	snprintf(opt, sizeof opt, "command_timeout_ms=%d", th_command_timeout_ms());
	th_url_with(url, len, bare, opt);
}

Test(checks, redlock_same_server_twice_is_einval)
{
	char url[1024];

	for (int i = 0; i < 3; i++)
		cr_assert_eq(th_redis_start(&srv[i], NULL), 0);
	log_start();

	/* Three independent servers: accepted. */
	snprintf(url, sizeof url, "redis://127.0.0.1:%d,redis://127.0.0.1:%d,redis://127.0.0.1:%d",
			srv[0].port, srv[1].port, srv[2].port);
	timed(url, sizeof url);
	open_close(url, 0);
	cr_assert_eq(log_count("twice"), 0, "%s", log_text);

	/* Written the same way twice. */
	snprintf(url, sizeof url, "redis://127.0.0.1:%d,redis://127.0.0.1:%d,redis://127.0.0.1:%d",
			srv[0].port, srv[0].port, srv[1].port);
	timed(url, sizeof url);
	open_close(url, EINVAL);
	cr_assert_eq(log_count("lists one server twice"), 1, "not one line:\n%s", log_text);
	cr_assert_eq(log_count("same address"), 1, "%s", log_text);

	/* Two ways: an IP and a name, and a unix socket; one run_id. */
	log_start();
	snprintf(url, sizeof url, "redis://127.0.0.1:%d,redis://localhost:%d,redis://127.0.0.1:%d",
			srv[2].port, srv[2].port, srv[1].port);
	timed(url, sizeof url);
	open_close(url, EINVAL);
	cr_assert_eq(log_count("lists one server twice"), 1, "not one line:\n%s", log_text);
	cr_assert_eq(log_count("same run_id"), 1, "%s", log_text);

	log_start();
	snprintf(url, sizeof url, "redis://127.0.0.1:%d,unix://%s,redis://127.0.0.1:%d",
			srv[1].port, srv[1].sock, srv[2].port);
	timed(url, sizeof url);
	open_close(url, EINVAL);
	cr_assert_eq(log_count("same run_id"), 1, "%s", log_text);

	/* Two databases of one server are one server too. */
	log_start();
	snprintf(url, sizeof url, "redis://127.0.0.1:%d/1,redis://127.0.0.1:%d/2,redis://127.0.0.1:%d",
			srv[0].port, srv[0].port, srv[1].port);
	timed(url, sizeof url);
	open_close(url, EINVAL);
	cr_assert_eq(log_count("lists one server twice"), 1, "%s", log_text);
}

/* ---- the unreachable line says why (issue 16, CI: an open under ASan
 * failed with "cannot reach the lock server" and no cause) ---- */

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

/* A TCP port on 127.0.0.1 listening with the given backlog (-1: bound,
 * then closed: connections are refused); its socket in *fd (-1 closed). */
static int
local_port(int backlog, int *fd)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof sa;
	int s = socket(AF_INET, SOCK_STREAM, 0);

	cr_assert(s >= 0 && !bind(s, (struct sockaddr *)&sa, sizeof sa) &&
			!getsockname(s, (struct sockaddr *)&sa, &len), "a local port");
	if (backlog < 0) {
		close(s);
		*fd = -1;
	} else {
		cr_assert_eq(listen(s, backlog), 0);
		*fd = s;
	}
	return ntohs(sa.sin_port);
}

Test(checks, unreachable_line_says_why)
{
	char url[1024], want[1200];
	int port, lfd, cfd;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

	log_start();
	/* Nobody listens. */
	port = local_port(-1, &lfd);
	snprintf(url, sizeof url, "redis://127.0.0.1:%d?connect_timeout_ms=400", port);
	open_close(url, EIO);
	snprintf(want, sizeof want, "cannot reach the lock server at %s: cannot connect: Connection refused (", url);
	cr_assert_eq(log_count(want), 1, "want \"%s\" in:\n%s", want, log_text);

	/* Listening, its accept queue full: the handshake never completes. */
	port = local_port(0, &lfd);
	cfd = socket(AF_INET, SOCK_STREAM, 0);
	sa.sin_port = htons((uint16_t)port);
	cr_assert_eq(connect(cfd, (struct sockaddr *)&sa, sizeof sa), 0);
	snprintf(url, sizeof url, "redis://127.0.0.1:%d?connect_timeout_ms=300", port);
	open_close(url, EIO);
	/* The kernel may complete the handshake for the queue (then PING
	 * gets no answer) or drop it (the dial times out: "timed out after
	 * 300 ms", or the socket's own "Connection timed out"). */
	char want2[1200];
	snprintf(want, sizeof want, "cannot reach the lock server at %s: cannot connect: ", url);
	snprintf(want2, sizeof want2, "cannot reach the lock server at %s: PING failed: ", url);
	cr_assert_eq(log_count(want) + log_count(want2), 1, "no cause in:\n%s", log_text);
	close(cfd);
	close(lfd);

	/* Redlock: each failing node with its cause. */
	cr_assert_eq(th_redis_start(&srv[0], NULL), 0);
	int p1 = local_port(-1, &lfd), p2 = local_port(-1, &lfd);
	snprintf(url, sizeof url, "%s,redis://127.0.0.1:%d,redis://127.0.0.1:%d", srv[0].url, p1, p2);
	open_close(url, EIO);
	snprintf(want, sizeof want, "1 of 3 Redlock nodes reachable, 2 needed: "
			"redis://127.0.0.1:%d: cannot connect: Connection refused; "
			"redis://127.0.0.1:%d: cannot connect: Connection refused (", p1, p2);
	cr_assert_eq(log_count(want), 1, "want \"%s\" in:\n%s", want, log_text);
}
