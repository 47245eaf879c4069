/*
 * A fake Redis server: a thread of the test process serving RESP on a unix
 * socket, for the tests where a hostile or broken server is the point
 * (issue 16 item 6).  It answers what dmutex_client_open asks (PING, the
 * permission probe, EVAL "return 1", SUBSCRIBE/UNSUBSCRIBE, CONFIG GET,
 * INFO with a run_id of its own) like a healthy Redis; every other command
 * (the lock scripts) gets the reply the test's callback writes, sent as the
 * test chose: whole, or trickled one byte at a time.
 */
#ifndef FAKE_REDIS_H
#define FAKE_REDIS_H

#include <stddef.h>

struct fake_redis;

/* The raw RESP reply to a command (argv[0] is the command name, argv[3]
 * the first key of an EVALSHA), malloc'd; NULL: close the connection. */
typedef char *(*fake_reply_fn)(int argc, char **argv, void *arg);

/* Listen on DIR/NAME.sock.  0 or -1 (message on stderr). */
int fake_redis_start(struct fake_redis **out, const char *dir, const char *name,
		fake_reply_fn fn, void *arg);
/* "unix:///DIR/NAME.sock" */
const char *fake_redis_url(const struct fake_redis *f);
/* From now on, replies to the callback's commands go out one byte every
 * byte_ms (0: whole). */
void fake_redis_trickle(struct fake_redis *f, int byte_ms);
/* Close every open connection, and each new one at once from now on. */
void fake_redis_hang_up(struct fake_redis *f);
/* How many commands the callback has answered. */
int fake_redis_calls(struct fake_redis *f);
void fake_redis_stop(struct fake_redis *f);

/* Helpers for callbacks: printf into a malloc'd string. */
char *fake_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
