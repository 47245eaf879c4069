/*
 * The AUTH command's bytes (the password) are not left in memory the
 * library frees or keeps (issue 30.6): sent from our own output buffer
 * and zeroed there once the reply came.  Checked where it can be seen,
 * in that buffer, against a real redis-server with a password; the
 * kernel's socket buffer and OpenSSL's record buffer (conn.h says why)
 * are out of a test's reach, and so is a scan of freed heap.
 */
#include <criterion/criterion.h>

#include <string.h>

#include "backend/net/addr.h"
#include "backend/redis/conn.h"
#include "base/base.h"
#include "harness.h"

#define PW "Wipe-Me-Pa55word"

static struct th_redis srv;

static void
down(void)
{
	th_redis_stop(&srv);
}

TestSuite(secret_wipe, .fini = down, .timeout = 30);

static struct dmutex__conn *
dial(void)
{
	struct dmutex__node_addr a = { .host = "127.0.0.1", .port = srv.port };
	char why[256] = "";
	int refused = 0;
	struct dmutex__conn *c = dmutex__conn_dial(&a, NULL, dmutex__now_ns() + 5000 * DMUTEX__MS,
			why, sizeof why, &refused);

	cr_assert(c, "dial: %s", why);
	return c;
}

static int
holds_password(const struct dmutex__conn *c)
{
	return c->out && memmem(c->out, c->outcap, PW, strlen(PW)) != NULL;
}

Test(secret_wipe, auth_bytes_zeroed_in_our_buffer)
{
	const char *argv[] = { "AUTH", PW };
	struct dmutex__conn *c;
	redisReply *r;

	cr_assert_eq(th_redis_start(&srv, "requirepass " PW "\n"), 0);

	/* The plain way, as the handshake did: the password stays behind
	 * (this is what the test would see if the wipe were gone). */
	c = dial();
	r = dmutex__conn_command(c, dmutex__now_ns() + 5000 * DMUTEX__MS, "AUTH %s", PW);
	cr_assert(r && r->type == REDIS_REPLY_STATUS, "AUTH: %s", r && r->str ? r->str : "no reply");
	freeReplyObject(r);
	cr_assert(holds_password(c), "the check cannot see the password where it was sent from");
	dmutex__conn_free(c);

	/* The secret way: accepted, and nothing of it left. */
	c = dial();
	r = dmutex__conn_command_secret(c, dmutex__now_ns() + 5000 * DMUTEX__MS, 2, argv);
	cr_assert(r && r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "OK"),
			"AUTH: %s", r && r->str ? r->str : "no reply");
	freeReplyObject(r);
	cr_assert_not(holds_password(c), "the password is still in the output buffer");
	/* The connection goes on as before. */
	r = dmutex__conn_command(c, dmutex__now_ns() + 5000 * DMUTEX__MS, "PING");
	cr_assert(r && r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "PONG"));
	freeReplyObject(r);
	dmutex__conn_free(c);

	/* Refused (a wrong password): zeroed all the same. */
	c = dial();
	argv[1] = PW "-wrong";
	r = dmutex__conn_command_secret(c, dmutex__now_ns() + 5000 * DMUTEX__MS, 2, argv);
	cr_assert(r && r->type == REDIS_REPLY_ERROR);
	freeReplyObject(r);
	cr_assert_not(holds_password(c));
	dmutex__conn_free(c);
}
