/*
 * The client URL grammar of API.md: schemes, user information, hosts,
 * node lists (url_options.c reads what follows '?').  Every rejection logs exactly one line,
 * and no log line ever carries a password: a node is named by its text,
 * every byte that may be a password under any reading masked (url_secret.c,
 * whose map check_list draws before anything is parsed), once its user
 * information has been cut out unambiguously, and only by its position
 * before that.  A node that parses keeps a display string of its one
 * reading (password and sentinel_password replaced by "***").
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>

#include "dmutex_config.h"
#include "base/log.h"
#include "url_parse.h"

#define NODES_MAX 64
#define PORT_DEFAULT 6379
#define ETCD_PORT_DEFAULT 2379
#define PORT_MAX 65535ul
#define PREFIX_DEFAULT "dmutex:"

/* meson.build defines DMUTEX_HAVE_TLS 1 (src/backend/net/tls.c, OpenSSL); a build
 * of these sources without it refuses rediss:// with ENOTSUP. */
#if defined(DMUTEX_HAVE_TLS) && DMUTEX_HAVE_TLS
#define TLS_SUPPORTED 1
#else
#define TLS_SUPPORTED 0
#endif


/* The schemes; only those with `redlock` set may be listed (Redlock). */
static const struct scheme {
	const char *name;
	int tls, is_unix, sentinel, redlock, cluster, etcd;
} schemes[] = {
	{ "redis", 0, 0, 0, 1, 0, 0 },
	{ "rediss", 1, 0, 0, 1, 0, 0 },
	{ "unix", 0, 1, 0, 1, 0, 0 },
	{ "redis-sentinel", 0, 0, 1, 0, 0, 0 },
	{ "rediss-sentinel", 1, 0, 1, 0, 0, 0 },
	{ "redis-cluster", 0, 0, 0, 0, 1, 0 },
	{ "rediss-cluster", 1, 0, 0, 0, 1, 0 },
	{ "etcd", 0, 0, 0, 0, 0, 1 },
	{ "etcds", 1, 0, 0, 0, 0, 1 },
};


static char *
dupn(const char *s, size_t n)
{
	char *d = malloc(n + 1);
	if (!d)
		return NULL;
	memcpy(d, s, n);
	d[n] = 0;
	return d;
}

/* An empty user or password is no user or password. */
static int
userinfo_part(struct parse *p, const char *s, size_t n, const char *what, char **out)
{
	int err;

	if (!n)
		return 0;
	err = dmutex__url_pct_decode(s, n, out, NULL);
	if (err == EINVAL)
		dmutex__url_bad(p, "malformed percent escape (or %%00) in the %s", what);
	return err;
}

static int
parse_userinfo(struct parse *p, const char *s, size_t n, struct dmutex__node_addr *node)
{
	const char *colon = memchr(s, ':', n);
	size_t ulen = colon ? (size_t)(colon - s) : n;
	int err;

	err = userinfo_part(p, s, ulen, "user name", &node->user);
	if (err || !colon)
		return err;
	return userinfo_part(p, colon + 1, n - ulen - 1, "password", &node->password);
}

/* A copy of d with the value of every sentinel_password= in its query
 * replaced by "***"; d is freed.  NULL: out of memory. */
static char *
mask_query_secret(char *d)
{
	static const char key[] = "sentinel_password=";
	char *out, *o, *q = d ? strchr(d, '?') : NULL;
	const char *s;

	if (!d || !q)
		return d;
	/* The value may be shorter than "***". */
	if (!(out = malloc(strlen(d) * 2 + 4))) {
		free(d);
		return NULL;
	}
	o = out + (q - d);
	memcpy(out, d, (size_t)(q - d));
	for (s = q; *s; ) {
		size_t n = strcspn(s + 1, "&") + 1;   /* one '?' or '&' and its option */
		if (!strncmp(s + 1, key, sizeof key - 1)) {
			memcpy(o, s, sizeof key);
			o += sizeof key;
			memcpy(o, "***", 3);
			o += 3;
		} else {
			memcpy(o, s, n);
			o += n;
		}
		s += n;
	}
	*o = 0;
	free(d);
	return out;
}

/* Cut the passwords out: scheme://user:***@rest?sentinel_password=***. */
static int
make_display(const char *elem, size_t len, const char *ui, const char *at,
		struct dmutex__node_addr *node)
{
	const char *colon = at ? memchr(ui, ':', (size_t)(at - ui)) : NULL;
	size_t head, tail;

	if (!colon) {
		node->display = mask_query_secret(dupn(elem, len));
		return node->display ? 0 : ENOMEM;
	}
	head = (size_t)(colon + 1 - elem);
	tail = len - (size_t)(at - elem);
	node->display = malloc(head + 3 + tail + 1);
	if (!node->display)
		return ENOMEM;
	memcpy(node->display, elem, head);
	memcpy(node->display + head, "***", 3);
	memcpy(node->display + head + 3, at, tail);
	node->display[head + 3 + tail] = 0;
	node->display = mask_query_secret(node->display);
	return node->display ? 0 : ENOMEM;
}

/* An IPv6 literal with an optional zone, "%25" + name in a URL (RFC 6874). */
static int
valid_ipv6(const char *s, size_t n)
{
	size_t i, colons = 0;

	for (i = 0; i < n && s[i] != '%'; i++) {
		if (s[i] == ':')
			colons++;
		else if (s[i] != '.' && dmutex__url_hexval(s[i]) < 0)
			return 0;
	}
	if (colons < 2)
		return 0;
	if (i == n)
		return 1;
	if (n - i < 4 || strncmp(s + i, "%25", 3))
		return 0;
	return dmutex__url_valid_hostname(s + i + 3, n - i - 3);
}

/* getaddrinfo wants the zone after a bare '%'; a URL writes it "%25". */
static char *
dup_ipv6(const char *s, size_t n)
{
	const char *pct = memchr(s, '%', n);
	size_t head;
	char *d;

	if (!pct)
		return dupn(s, n);
	head = (size_t)(pct + 1 - s);
	if (!(d = dupn(s, n - 2)))
		return NULL;
	memcpy(d + head, pct + 3, n - head - 2);
	return d;
}

static int
parse_hostport(struct parse *p, const char *s, size_t n, struct dmutex__node_addr *node,
		unsigned long port)
{
	const char *host = s, *rest, *end = s + n;
	size_t hlen;

	if (n && s[0] == '[') {
		const char *close = memchr(s, ']', n);
		if (!close) {
			dmutex__url_bad(p, "IPv6 address without its closing ']'");
			return EINVAL;
		}
		host = s + 1;
		hlen = (size_t)(close - host);
		rest = close + 1;
		if (!valid_ipv6(host, hlen)) {
			dmutex__url_bad(p, "bad IPv6 address '%.*s'", DMUTEX__URL_FRAG(p, host, hlen));
			return EINVAL;
		}
	} else {
		hlen = dmutex__url_strcspn_n(s, n, ":");
		rest = s + hlen;
		if (!hlen) {
			dmutex__url_bad(p, "empty host");
			return EINVAL;
		}
		if (rest < end && memchr(rest + 1, ':', (size_t)(end - rest - 1))) {
			dmutex__url_bad(p, "an IPv6 address must be in brackets, like [::1]");
			return EINVAL;
		}
		if (hlen > HOST_MAX) {
			dmutex__url_bad(p, "host name longer than %d bytes", HOST_MAX);
			return EINVAL;
		}
		if (!dmutex__url_valid_hostname(host, hlen)) {
			dmutex__url_bad(p, "bad host '%.*s'", DMUTEX__URL_FRAG(p, host, hlen));
			return EINVAL;
		}
	}
	if (rest < end) {
		size_t plen = (size_t)(end - rest) - 1;
		if (*rest != ':') {
			dmutex__url_bad(p, "unexpected '%.*s' after the host",
					DMUTEX__URL_FRAG(p, rest, plen + 1));
			return EINVAL;
		}
		if (dmutex__url_parse_num(rest + 1, plen, 1, PORT_MAX, &port)) {
			dmutex__url_bad(p, "bad port '%.*s' (1..65535)", DMUTEX__URL_FRAG(p, rest + 1, plen));
			return EINVAL;
		}
	}
	node->host = host == s ? dupn(host, hlen) : dup_ipv6(host, hlen);
	if (!node->host)
		return ENOMEM;
	node->port = (int)port;
	return 0;
}

static int
parse_unix_path(struct parse *p, const char *s, size_t n, struct dmutex__node_addr *node)
{
	size_t len;
	int err;

	if (!n) {
		dmutex__url_bad(p, "empty unix socket path");
		return EINVAL;
	}
	err = dmutex__url_pct_decode(s, n, &node->path, &len);
	if (err == EINVAL)
		dmutex__url_bad(p, "malformed percent escape (or %%00) in the socket path");
	if (err)
		return err;
	/* hiredis would truncate it silently into sun_path. */
	if (len >= sizeof ((struct sockaddr_un *)0)->sun_path) {
		dmutex__url_bad(p, "unix socket path longer than %zu bytes",
				sizeof ((struct sockaddr_un *)0)->sun_path - 1);
		return EINVAL;
	}
	return 0;
}

/* Options that make sense only together, or only over TLS. */
static int
check_node(struct parse *p, const struct dmutex__node_addr *node)
{
	const char *tls_opt = node->tls_ca ? "tls_ca" : node->tls_cert ? "tls_cert"
		: node->tls_key ? "tls_key" : node->tls_server_name ? "tls_server_name"
		: p->node_seen & 1u << OPT_TLS_VERIFY ? "tls_verify" : NULL;

	if (tls_opt && !node->tls) {
		dmutex__url_bad(p, "%s is an option of rediss:// (TLS) URLs", tls_opt);
		return EINVAL;
	}
	if (!node->tls_cert != !node->tls_key) {
		dmutex__url_bad(p, "%s without %s: a client certificate needs its key", node->tls_cert
				? "tls_cert" : "tls_key", node->tls_cert ? "tls_key" : "tls_cert");
		return EINVAL;
	}
	if (node->password_file && node->password) {
		dmutex__url_bad(p, "a password and password_file both given");
		return EINVAL;
	}
	if (!node->master_name && (node->sentinel_user || node->sentinel_password
			|| node->sentinel_password_file)) {
		dmutex__url_bad(p, "%s is an option of redis-sentinel:// URLs", node->sentinel_user
				? "sentinel_user" : node->sentinel_password ? "sentinel_password"
				: "sentinel_password_file");
		return EINVAL;
	}
	if (node->sentinel_password && node->sentinel_password_file) {
		dmutex__url_bad(p, "sentinel_password and sentinel_password_file both given");
		return EINVAL;
	}
	return 0;
}

/* "sentinel HOST:PORT", for log lines. */
static char *
sentinel_display(const struct dmutex__node_addr *s)
{
	int v6 = strchr(s->host, ':') != NULL;
	size_t len = strlen(s->host) + 32;
	char *d = malloc(len);

	if (d)
		snprintf(d, len, "sentinel %s%s%s:%d", v6 ? "[" : "", s->host, v6 ? "]" : "", s->port);
	return d;
}

static int
dup_opt(char **to, const char *from)
{
	return from && !(*to = strdup(from)) ? ENOMEM : 0;
}

/* The sentinels are reached as the master is (TLS and its options), and
 * authenticate as the sentinel_* options say. */
static int
finish_sentinels(struct dmutex__node_addr *node)
{
	for (size_t i = 0; i < node->nsentinels; i++) {
		struct dmutex__node_addr *s = &node->sentinels[i];
		s->tls = node->tls;
		s->tls_verify = node->tls_verify;
		if (!(s->display = sentinel_display(s)) || dup_opt(&s->user, node->sentinel_user)
				|| dup_opt(&s->password, node->sentinel_password)
				|| dup_opt(&s->password_file, node->sentinel_password_file)
				|| dup_opt(&s->tls_ca, node->tls_ca) || dup_opt(&s->tls_cert, node->tls_cert)
				|| dup_opt(&s->tls_key, node->tls_key)
				|| dup_opt(&s->tls_server_name, node->tls_server_name))
			return ENOMEM;
	}
	return 0;
}

/* h1:p1,h2:p2,... of a redis-sentinel:// (what: "sentinel") or a
 * redis-cluster:// URL (what: "seed node"). */
static int
parse_host_list(struct parse *p, const char *s, size_t n, const char *what, unsigned long port,
		struct dmutex__node_addr **list, size_t *nlist)
{
	size_t count = 1;
	int err;

	for (size_t i = 0; i < n; i++)
		count += s[i] == ',';
	if (count > NODES_MAX) {
		dmutex__url_bad(p, "%zu %ss, at most %d", count, what, NODES_MAX);
		return EINVAL;
	}
	if (!(*list = calloc(count, sizeof **list)))
		return ENOMEM;
	*nlist = count;
	for (size_t i = 0; i < count; i++) {
		size_t len = dmutex__url_strcspn_n(s, n, ",");
		if (!len) {
			dmutex__url_bad(p, "empty element in the %s list", what);
			return EINVAL;
		}
		if ((err = parse_hostport(p, s, len, &(*list)[i], port)))
			return err;
		s += len + 1;
		n -= len + (i + 1 < count);
	}
	return 0;
}

static int
parse_sentinel_hosts(struct parse *p, const char *s, size_t n, struct dmutex__node_addr *node)
{
	return parse_host_list(p, s, n, "sentinel", DMUTEX__SENTINEL_PORT_DEFAULT,
			&node->sentinels, &node->nsentinels);
}

/* /MASTERNAME, percent-decoded. */
static int
parse_master_name(struct parse *p, const char *s, size_t n, struct dmutex__node_addr *node)
{
	size_t len;
	int err;

	if (n < 2 || *s != '/') {
		dmutex__url_bad(p, "no master name: redis-sentinel://HOST:PORT,.../MASTERNAME");
		return EINVAL;
	}
	err = dmutex__url_pct_decode(s + 1, n - 1, &node->master_name, &len);
	if (err == EINVAL)
		dmutex__url_bad(p, "malformed percent escape (or %%00) in the master name");
	if (!err && len > HOST_MAX) {
		dmutex__url_bad(p, "master name longer than %d bytes", HOST_MAX);
		err = EINVAL;
	}
	return err;
}

/* etcd://m1:p1,m2:p2,.../: the members of one cluster; no db (etcd has
 * none), only an empty path. */
static int
parse_etcd(struct parse *p, const char *host, const char *auth_end, const char *q,
		struct dmutex__node_addr *node)
{
	int err;

	node->etcd = 1;
	if ((err = parse_host_list(p, host, (size_t)(auth_end - host), "member", ETCD_PORT_DEFAULT,
			&node->seeds, &node->nseeds)))
		return err;
	if (q - auth_end > 1) {
		dmutex__url_bad(p, "an etcd:// URL has no path (etcd has no databases): "
				"etcd://HOST:PORT,...[/][?options]");
		return EINVAL;
	}
	return 0;
}

/*
 * The authority ends at the first '/' or '?' and the user information at
 * its last '@'.  A raw '@' anywhere else means a password with a raw '/' or
 * '?' was cut apart, so nothing of this node may be echoed then.
 */
static int
parse_node(struct parse *p, const char *elem, size_t len, const struct scheme *sc,
		struct dmutex__node_addr *node)
{
	const char *rest = elem + strlen(sc->name) + 3, *end = elem + len;
	const char *auth_end = rest + dmutex__url_strcspn_n(rest, (size_t)(end - rest), "/?");
	const char *at = NULL, *host, *q;
	int err;

	for (const char *c = rest; c < auth_end; c++)
		if (*c == '@')
			at = c;
	if (memchr(auth_end, '@', (size_t)(end - auth_end))) {
		dmutex__url_bad(p, "'@' outside the user information (write it as %%40)");
		return EINVAL;
	}
	err = make_display(elem, len, rest, at, node);
	if (err)
		return err;
	p->display = node->display;
	node->tls = sc->tls;
	node->tls_verify = 1;
	if (at && (err = parse_userinfo(p, rest, (size_t)(at - rest), node)))
		return err;
	host = at ? at + 1 : rest;
	q = memchr(auth_end, '?', (size_t)(end - auth_end));
	if (!q)
		q = end;
	if (sc->sentinel) {
		if (!(err = parse_sentinel_hosts(p, host, (size_t)(auth_end - host), node)))
			err = parse_master_name(p, auth_end, (size_t)(q - auth_end), node);
	} else if (sc->etcd) {
		err = parse_etcd(p, host, auth_end, q, node);
	} else if (sc->is_unix) {
		if (host < auth_end) {
			dmutex__url_bad(p, "unix socket path is not absolute");
			return EINVAL;
		}
		err = parse_unix_path(p, auth_end, (size_t)(q - auth_end), node);
	} else {
		node->cluster = sc->cluster;
		if (sc->cluster)
			err = parse_host_list(p, host, (size_t)(auth_end - host), "seed node",
					PORT_DEFAULT, &node->seeds, &node->nseeds);
		else
			err = parse_hostport(p, host, (size_t)(auth_end - host), node, PORT_DEFAULT);
		if (!err && auth_end < q) {
			unsigned long db;
			const char *d = auth_end + 1;
			if (q > d && dmutex__url_parse_num(d, (size_t)(q - d), 0, DB_MAX, &db)) {
				dmutex__url_bad(p, "bad db '%.*s' (0..%lu)",
						DMUTEX__URL_FRAG(p, d, (size_t)(q - d)), DB_MAX);
				return EINVAL;
			}
			if (q > d)
				err = dmutex__url_set_db(p, db, node);
		}
	}
	if (err)
		return err;
	if (q < end && (err = dmutex__url_query(p, q + 1, (size_t)(end - q - 1), node)))
		return err;
	if ((err = check_node(p, node)))
		return err;
	if (sc->etcd && p->db_seen) {
		dmutex__url_bad(p, "db is not an option of etcd:// URLs");
		return EINVAL;
	}
	/* Redis Cluster serves database 0 only. */
	if (sc->cluster && node->db) {
		dmutex__url_bad(p, "a cluster has only db 0");
		return EINVAL;
	}
	return sc->sentinel ? finish_sentinels(node) : 0;
}

static int
scheme_char(char c)
{
	return c == '+' || c == '-' || c == '.' || (c >= '0' && c <= '9')
		|| ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}

/* Length of the scheme at s if s starts "scheme://", else 0. */
static size_t
scheme_at(const char *s, size_t len)
{
	size_t n = 0;

	while (n < len && scheme_char(s[n]))
		n++;
	return n && len - n >= 3 && !memcmp(s + n, "://", 3) ? n : 0;
}

/* Known schemes are short: no scheme is looked for further after a ','. */
#define SCHEME_SCAN 32

/* A ',' starts a new URL only when "scheme://" follows it: inside one URL
 * it separates sentinels, or is part of a password. */
static size_t
elem_len(const char *s)
{
	size_t n = 0;

	/* strnlen: a strlen per ',' would make a long list quadratic. */
	while (s[n] && !(s[n] == ',' && scheme_at(s + n + 1, strnlen(s + n + 1, SCHEME_SCAN))))
		n++;
	return n;
}

/* The scheme of an element, NULL if unknown (logged). */
static const struct scheme *
scheme_of(struct parse *p, const char *elem, size_t len)
{
	size_t n = scheme_at(elem, len);

	if (!n) {
		dmutex__url_bad(p, "no scheme (redis://, rediss://, unix://, redis-sentinel://, redis-cluster:// or etcd://)");
		return NULL;
	}
	for (size_t i = 0; i < sizeof schemes / sizeof *schemes; i++)
		if (strlen(schemes[i].name) == n && !strncasecmp(schemes[i].name, elem, n))
			return &schemes[i];
	dmutex__url_bad(p, "unknown scheme '%.*s'", DMUTEX__URL_FRAG(p, elem, n > 16 ? 16 : n));
	return NULL;
}

/*
 * Every element is checked for shape before any is parsed, so that a list
 * is refused before any of it is read.
 */
static int
check_list(struct parse *p, const char *url)
{
	const char *s = url;

	p->count = 1;
	for (const char *c = url; *c; c += elem_len(c) + 1) {
		if (!c[elem_len(c)])
			break;
		p->count++;
	}
	if (p->count > NODES_MAX) {
		dmutex__log(DMUTEX_LOG_ERROR, "bad URL: %zu nodes, at most %d",
				p->count, NODES_MAX);
		return EINVAL;
	}
	for (const char *c = url; ; c += elem_len(c) + 1) {
		dmutex__url_secret_elem(p, c, elem_len(c));
		if (!c[elem_len(c)])
			break;
	}
	for (p->index = 0; p->index < p->count; p->index++) {
		size_t len = elem_len(s);
		const struct scheme *sc;
		if (!len) {
			dmutex__url_bad(p, p->count > 1 ? "empty element in the node list" : "empty URL");
			return EINVAL;
		}
		for (size_t i = 0; i < len; i++)
			if ((unsigned char)s[i] <= ' ' || s[i] == 0x7f) {
				dmutex__url_bad(p, "space or control character (percent-encode it)");
				return EINVAL;
			}
		if (!(sc = scheme_of(p, s, len)))
			return EINVAL;
		if (p->count > 1 && !sc->redlock) {
			dmutex__url_bad(p, "a Redlock list may only contain redis://, rediss:// and unix:// "
					"URLs, not %s://", sc->name);
			return EINVAL;
		}
		s += len + 1;
	}
	return 0;
}

int
dmutex__url_parse(const char *url, struct dmutex__config *cfg)
{
	struct parse p = { .cfg = cfg };
	const char *s = url;
	int err, tls = 0;

	if (!cfg)
		return EINVAL;
	memset(cfg, 0, sizeof *cfg);
	if (!url)
		return EINVAL;
	p.url = url;
	p.url_len = strlen(url);
	p.secret = calloc(p.url_len + 1, 1);
	if ((err = check_list(&p, url)))
		goto fail;
	cfg->nodes = calloc(p.count, sizeof *cfg->nodes);
	if (!cfg->nodes) {
		err = ENOMEM;
		goto fail;
	}
	cfg->nnodes = p.count;
	cfg->connect_timeout_ms = DMUTEX__CONNECT_TIMEOUT_DEFAULT;
	cfg->command_timeout_ms = DMUTEX__COMMAND_TIMEOUT_DEFAULT;
	cfg->lease_ms = DMUTEX_LEASE_DEFAULT;
	cfg->metrics = 1;
	cfg->async_release = 1;
	cfg->lease_cache = DMUTEX__LEASE_CACHE_DEFAULT;
	cfg->idle_ms = DMUTEX__IDLE_DEFAULT;
	for (p.index = 0; p.index < p.count; p.index++) {
		size_t len = elem_len(s);

		p.display = NULL;
		p.elem = s;
		p.elen = len;
		p.db_seen = 0;
		p.node_seen = 0;
		/* scheme_of cannot fail here: check_list passed. */
		err = parse_node(&p, s, len, scheme_of(&p, s, len), &cfg->nodes[p.index]);
		if (err)
			goto fail;
		tls |= cfg->nodes[p.index].tls;
		s += len + 1;
	}
	/* Past the longest a retry takes: a few command timeouts. */
	if (!cfg->retry_window_ms)
		cfg->retry_window_ms = cfg->command_timeout_ms > DMUTEX__RETRY_WINDOW_DEFAULT / 3
				? 3 * cfg->command_timeout_ms : DMUTEX__RETRY_WINDOW_DEFAULT;
	if (!cfg->prefix && !(cfg->prefix = dupn(PREFIX_DEFAULT, strlen(PREFIX_DEFAULT)))) {
		err = ENOMEM;
		goto fail;
	}
	/* Checked last, so whether a URL is well-formed does not depend on the build. */
	if (cfg->nodes[0].etcd && !DMUTEX_HAVE_ETCD) {
		dmutex__log(DMUTEX_LOG_ERROR, "etcd:// needs a libdmutex built with etcd support: "
				"meson setup -Detcd=enabled (needs libcurl4-openssl-dev libjansson-dev)");
		err = ENOTSUP;
		goto fail;
	}
	if (tls && !TLS_SUPPORTED) {
		for (p.index = 0; !cfg->nodes[p.index].tls; p.index++)
			;
		dmutex__log(DMUTEX_LOG_ERROR, "cannot use %s: rediss:// (TLS) is not "
				"supported by this build of dmutex",
				cfg->nodes[p.index].display);
		err = ENOTSUP;
		goto fail;
	}
	free(p.secret);
	return 0;
fail:
	free(p.secret);
	dmutex__config_free(cfg);
	return err;
}

static void
free_secret(char *s)
{
	if (s) {
		/* Do not leave it lying in freed heap memory. */
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

static void
addr_free(struct dmutex__node_addr *n)
{
	free(n->host);
	free(n->path);
	free(n->user);
	free_secret(n->password);
	free(n->display);
	free(n->password_file);
	free(n->tls_ca);
	free(n->tls_cert);
	free(n->tls_key);
	free(n->tls_server_name);
	free(n->master_name);
	for (size_t i = 0; i < n->nsentinels; i++)
		addr_free(&n->sentinels[i]);
	free(n->sentinels);
	free(n->sentinel_user);
	free_secret(n->sentinel_password);
	free(n->sentinel_password_file);
	for (size_t i = 0; i < n->nseeds; i++)
		addr_free(&n->seeds[i]);
	free(n->seeds);
}

void
dmutex__config_free(struct dmutex__config *cfg)
{
	if (!cfg)
		return;
	for (size_t i = 0; i < cfg->nnodes; i++)
		addr_free(&cfg->nodes[i]);
	free(cfg->nodes);
	free(cfg->prefix);
	memset(cfg, 0, sizeof *cfg);
}
