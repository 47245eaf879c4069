/*
 * What the two halves of the URL parser share (url.c: the grammar;
 * url_options.c: the options after '?'; both read text with url_text.c).
 * Private to them.
 */
#ifndef DMUTEX_URL_PARSE_H
#define DMUTEX_URL_PARSE_H

#include <stddef.h>

#include "base/log.h"
#include "url.h"

#define DB_MAX 1000000ul
#define TIMEOUT_MAX 600000ul
#define HOST_MAX 255

enum { OPT_DB, OPT_CONNECT, OPT_COMMAND, OPT_LEASE, OPT_NODE, OPT_IDLE, OPT_PREFIX, OPT_METRICS,
	OPT_ASYNC_RELEASE,
	OPT_LEASE_CACHE, OPT_RETRY_WINDOW,
	/* Options of one URL (one node), not of the client: */
	OPT_PASSWORD_FILE, OPT_TLS_CA, OPT_TLS_CERT, OPT_TLS_KEY, OPT_TLS_SERVER_NAME,
	OPT_TLS_VERIFY, OPT_SENTINEL_USER, OPT_SENTINEL_PASSWORD, OPT_SENTINEL_PASSWORD_FILE,
	OPT_COUNT };


struct parse {
	struct dmutex__config *cfg;
	size_t index, count;   /* the node being parsed, for log lines */
	const char *display;   /* NULL until the password is known to be cut out */
	unsigned seen;         /* client-wide options given so far, bit per OPT_ */
	unsigned node_seen;    /* this node's options given so far, bit per OPT_ */
	int db_seen;           /* this node's db was given */
};

/* One "bad URL" log line, naming the node by its display string (the
 * password masked) once it is known, else by its position. */
void dmutex__url_bad(const struct parse *p, const char *fmt, ...) DMUTEX__PRINTF(2, 3);
/* strcspn within s[0..n), which is not NUL-terminated there. */
size_t dmutex__url_strcspn_n(const char *s, size_t n, const char *reject);
/* Plain decimal in [min, max]: 0, or EINVAL. */
int dmutex__url_parse_num(const char *s, size_t n, unsigned long min, unsigned long max,
		unsigned long *out);
/* s[0..n) percent-decoded into a new string: 0, EINVAL (a malformed escape
 * or %00), ENOMEM. */
int dmutex__url_pct_decode(const char *s, size_t n, char **out, size_t *outlen);
int dmutex__url_valid_hostname(const char *s, size_t n);
/* A hex digit's value, -1 for any other byte. */
int dmutex__url_hexval(int c);
/* db, from the path ("/2") or the option: given twice, the same value. */
int dmutex__url_set_db(struct parse *p, unsigned long db, struct dmutex__node_addr *node);
/* The options of one URL, "a=1&b=2" (url_options.c). */
int dmutex__url_query(struct parse *p, const char *s, size_t n, struct dmutex__node_addr *node);

#endif
