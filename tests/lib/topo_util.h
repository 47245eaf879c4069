/*
 * Helpers shared by harness_sentinel.c and harness_cluster.c (not part of
 * the harness's interface): quiet authenticated commands, for polling nodes
 * that are expected to be down now and then, and INFO field lookup.
 */
#ifndef DMUTEX_TEST_TOPO_UTIL_H
#define DMUTEX_TEST_TOPO_UTIL_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

/* A command on a fresh connection to 127.0.0.1:port, authenticated when pass
 * is non-empty.  NULL on a connection error or a refused AUTH; no message
 * (a node that is down is often what the caller polls for). */
static inline redisContext *
th__connect_quiet(int port, const char *user, const char *pass, int timeout_ms)
{
	redisContext *c = th_tcp_connect(port, timeout_ms);
	if (!c)
		return NULL;
	if (pass && pass[0]) {
		redisReply *a = user && user[0] ? redisCommand(c, "AUTH %s %s", user, pass)
		                                : redisCommand(c, "AUTH %s", pass);
		int ok = a && a->type == REDIS_REPLY_STATUS;
		if (a)
			freeReplyObject(a);
		if (!ok) {
			redisFree(c);
			return NULL;
		}
	}
	return c;
}

static inline redisReply *
th__vcmd_quiet(int port, const char *user, const char *pass, int timeout_ms, const char *fmt,
               va_list ap)
{
	redisContext *c = th__connect_quiet(port, user, pass, timeout_ms);
	if (!c)
		return NULL;
	redisReply *rep = redisvCommand(c, fmt, ap);
	redisFree(c);
	return rep;
}

static inline redisReply *
th__cmd_quiet(int port, const char *user, const char *pass, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	redisReply *rep = th__vcmd_quiet(port, user, pass, 2000, fmt, ap);
	va_end(ap);
	return rep;
}

/* Copy the value of "name:" from an INFO/CLUSTER INFO text into out
 * ("" when absent).  Returns out. */
static inline char *
th__info_field(const char *text, const char *name, char *out, size_t outlen)
{
	size_t nl = strlen(name);
	out[0] = '\0';
	for (const char *line = text; line && *line;) {
		if (strncmp(line, name, nl) == 0 && line[nl] == ':') {
			const char *v = line + nl + 1;
			size_t n = strcspn(v, "\r\n");
			if (n >= outlen)
				n = outlen - 1;
			memcpy(out, v, n);
			out[n] = '\0';
			return out;
		}
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	return out;
}

/* A reply that is a bulk/status string, or NULL. */
static inline const char *
th__str(const redisReply *r)
{
	return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) ? r->str : NULL;
}

#endif
