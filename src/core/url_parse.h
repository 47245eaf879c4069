/*
 * What the two halves of the URL parser share (url.c: the grammar;
 * url_options.c: the options after '?'; both read text with url_text.c,
 * and quote it in a log line only through url_secret.c).
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
	/* What may be a password under any reading (url_secret.c): */
	const char *url;
	size_t url_len;
	unsigned char *secret; /* a byte per byte of url; NULL: out of memory,
	                        * then no fragment is quoted */
	const char *secret_tail; /* from here on, all of it */
	const char *run_from;  /* where a password cut at ",scheme://" may start */
	int run_pending;       /* it starts at the next ':', in a later element */
	const char *elem;      /* the node being parsed, its text */
	size_t elen;
};

/* One "bad URL" log line, naming the node by its text with every byte that
 * may be a password masked (url_secret.c) once its user information is
 * cut out, else by its position.  A fragment of the URL quoted in fmt
 * goes through DMUTEX__URL_FRAG (for a "%.*s"). */
void dmutex__url_bad(const struct parse *p, const char *fmt, ...) DMUTEX__PRINTF(2, 3);
/* url_secret.c: mark what element elem may hide (called for each, in
 * order); a fragment s[0..n) as itself or "***"; the node's text masked. */
void dmutex__url_secret_elem(struct parse *p, const char *elem, size_t len);
int dmutex__url_frag_len(const struct parse *p, const char *s, size_t n);
const char *dmutex__url_frag(const struct parse *p, const char *s, size_t n);
#define DMUTEX__URL_FRAG(p, s, n) dmutex__url_frag_len(p, s, n), dmutex__url_frag(p, s, n)
void dmutex__url_masked_elem(const struct parse *p, char *buf, size_t size);
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
