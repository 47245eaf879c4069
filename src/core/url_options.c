/*
 * The options of a client URL (after '?'): their names, ranges, and what
 * each sets in the configuration or in one node's address.  Each is given
 * at most once per value: the same option twice with different values is
 * EINVAL, as is an unknown one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "url_parse.h"

static const struct {
	const char *name;
	unsigned long min, max;
} options[OPT_COUNT] = {
	[OPT_DB] = { "db", 0, DB_MAX },
	[OPT_CONNECT] = { "connect_timeout_ms", 1, TIMEOUT_MAX },
	[OPT_COMMAND] = { "command_timeout_ms", 1, TIMEOUT_MAX },
	[OPT_LEASE] = { "lease_ms", DMUTEX_LEASE_MIN, DMUTEX_LEASE_MAX },
	[OPT_NODE] = { "node_timeout_ms", 1, TIMEOUT_MAX },
	[OPT_IDLE] = { "idle_ms", DMUTEX__IDLE_MIN, DMUTEX__IDLE_MAX },
	[OPT_PREFIX] = { "prefix", 0, 0 },  /* not a number: see set_prefix */
	[OPT_METRICS] = { "metrics", 0, 1 },
	[OPT_ASYNC_RELEASE] = { "async_release", 0, 1 },
	[OPT_LEASE_CACHE] = { "lease_cache", 0, 0 },    /* on or off: set_lease_cache */
	[OPT_RETRY_WINDOW] = { "retry_window_ms", DMUTEX__RETRY_WINDOW_MIN, DMUTEX__RETRY_WINDOW_MAX },
	/* Not numbers either: see set_node_string, set_verify. */
	[OPT_PASSWORD_FILE] = { "password_file", 0, 0 },
	[OPT_TLS_CA] = { "tls_ca", 0, 0 },
	[OPT_TLS_CERT] = { "tls_cert", 0, 0 },
	[OPT_TLS_KEY] = { "tls_key", 0, 0 },
	[OPT_TLS_SERVER_NAME] = { "tls_server_name", 0, 0 },
	[OPT_TLS_VERIFY] = { "tls_verify", 0, 0 },
	/* Of redis-sentinel:// URLs: how to authenticate to the sentinels. */
	[OPT_SENTINEL_USER] = { "sentinel_user", 0, 0 },
	[OPT_SENTINEL_PASSWORD] = { "sentinel_password", 0, 0 },
	[OPT_SENTINEL_PASSWORD_FILE] = { "sentinel_password_file", 0, 0 },
};

int
dmutex__url_set_db(struct parse *p, unsigned long db, struct dmutex__node_addr *node)
{
	if (p->db_seen && (unsigned long)node->db != db) {
		dmutex__url_bad(p, "db given twice with different values (%d and %lu)", node->db, db);
		return EINVAL;
	}
	p->db_seen = 1;
	node->db = (int)db;
	return 0;
}

static int
set_prefix(struct parse *p, const char *v, size_t n)
{
	struct dmutex__config *cfg = p->cfg;
	char *prefix;
	size_t len;
	int err = dmutex__url_pct_decode(v, n, &prefix, &len);

	if (err == EINVAL)
		dmutex__url_bad(p, "malformed percent escape (or %%00) in prefix");
	if (err)
		return err;
	if (len > DMUTEX__PREFIX_MAX) {
		dmutex__url_bad(p, "prefix longer than %u bytes", DMUTEX__PREFIX_MAX);
		free(prefix);
		return EINVAL;
	}
	if (p->seen & 1u << OPT_PREFIX) {
		err = strcmp(prefix, cfg->prefix) ? EINVAL : 0;
		if (err)
			dmutex__url_bad(p, "prefix given twice with different values");
		free(prefix);
		return err;
	}
	p->seen |= 1u << OPT_PREFIX;
	cfg->prefix = prefix;
	return 0;
}

static char **
node_string(struct dmutex__node_addr *node, int o)
{
	switch (o) {
	case OPT_PASSWORD_FILE: return &node->password_file;
	case OPT_TLS_CA: return &node->tls_ca;
	case OPT_TLS_CERT: return &node->tls_cert;
	case OPT_TLS_KEY: return &node->tls_key;
	case OPT_TLS_SERVER_NAME: return &node->tls_server_name;
	case OPT_SENTINEL_USER: return &node->sentinel_user;
	case OPT_SENTINEL_PASSWORD: return &node->sentinel_password;
	case OPT_SENTINEL_PASSWORD_FILE: return &node->sentinel_password_file;
	}
	return NULL;
}

/* A file name or server name, percent-decoded (a path may hold '&' or ','). */
static int
set_node_string(struct parse *p, int o, const char *v, size_t n, struct dmutex__node_addr *node)
{
	char **field = node_string(node, o), *val;
	size_t len;
	int err = dmutex__url_pct_decode(v, n, &val, &len);

	if (err == EINVAL)
		dmutex__url_bad(p, "malformed percent escape (or %%00) in %s", options[o].name);
	if (err)
		return err;
	if (!len) {
		dmutex__url_bad(p, "empty %s", options[o].name);
		free(val);
		return EINVAL;
	}
	if (o == OPT_TLS_SERVER_NAME && (len > HOST_MAX || !dmutex__url_valid_hostname(val, len))) {
		dmutex__url_bad(p, "bad tls_server_name '%.*s'", DMUTEX__URL_FRAG(p, v, n > 64 ? 64 : n));
		free(val);
		return EINVAL;
	}
	if (*field) {
		err = strcmp(val, *field) ? EINVAL : 0;
		if (err)
			dmutex__url_bad(p, "%s given twice with different values", options[o].name);
		free(val);
		return err;
	}
	*field = val;
	return 0;
}

/* "on" 1, "off" 0, anything else -1 (logged, naming option o). */
static int
on_off(struct parse *p, int o, const char *v, size_t n)
{
	if (n == 2 && !memcmp(v, "on", 2))
		return 1;
	if (n == 3 && !memcmp(v, "off", 3))
		return 0;
	dmutex__url_bad(p, "bad %s '%.*s' (on or off)", options[o].name,
			DMUTEX__URL_FRAG(p, v, n > 16 ? 16 : n));
	return -1;
}

static int
set_verify(struct parse *p, const char *v, size_t n, struct dmutex__node_addr *node)
{
	int on = on_off(p, OPT_TLS_VERIFY, v, n);

	if (on < 0)
		return EINVAL;
	if (p->node_seen & 1u << OPT_TLS_VERIFY && node->tls_verify != on) {
		dmutex__url_bad(p, "tls_verify given twice with different values");
		return EINVAL;
	}
	p->node_seen |= 1u << OPT_TLS_VERIFY;
	node->tls_verify = on;
	return 0;
}

/* lease_cache=on|off (README "Cached leases"): client-wide. */
static int
set_lease_cache(struct parse *p, const char *v, size_t n)
{
	int on = on_off(p, OPT_LEASE_CACHE, v, n);

	if (on < 0)
		return EINVAL;
	if (p->seen & 1u << OPT_LEASE_CACHE && p->cfg->lease_cache != (unsigned)on) {
		dmutex__url_bad(p, "lease_cache given twice with different values");
		return EINVAL;
	}
	p->seen |= 1u << OPT_LEASE_CACHE;
	p->cfg->lease_cache = (unsigned)on;
	return 0;
}

static int
set_option(struct parse *p, const char *opt, size_t n, struct dmutex__node_addr *node)
{
	size_t nlen = dmutex__url_strcspn_n(opt, n, "=");
	const char *v;
	size_t vlen;
	unsigned long num;
	unsigned *field;
	int o;

	if (!n) {
		dmutex__url_bad(p, "empty option (a stray '?' or '&')");
		return EINVAL;
	}
	for (o = 0; o < OPT_COUNT; o++)
		if (strlen(options[o].name) == nlen && !memcmp(options[o].name, opt, nlen))
			break;
	if (o == OPT_COUNT) {
		dmutex__url_bad(p, "unknown option '%.*s'", DMUTEX__URL_FRAG(p, opt, nlen));
		return EINVAL;
	}
	if (nlen == n) {
		dmutex__url_bad(p, "option '%s' without '=value'", options[o].name);
		return EINVAL;
	}
	v = opt + nlen + 1;
	vlen = n - nlen - 1;
	if (o == OPT_PREFIX)
		return set_prefix(p, v, vlen);
	if (o == OPT_TLS_VERIFY)
		return set_verify(p, v, vlen, node);
	if (o == OPT_LEASE_CACHE)
		return set_lease_cache(p, v, vlen);
	if (node_string(node, o))
		return set_node_string(p, o, v, vlen, node);
	if (dmutex__url_parse_num(v, vlen, options[o].min, options[o].max, &num)) {
		dmutex__url_bad(p, "bad %s '%.*s' (%lu..%lu)", options[o].name,
				DMUTEX__URL_FRAG(p, v, vlen),
				options[o].min, options[o].max);
		return EINVAL;
	}
	if (o == OPT_DB)
		return dmutex__url_set_db(p, num, node);
	field = o == OPT_CONNECT ? &p->cfg->connect_timeout_ms
		: o == OPT_COMMAND ? &p->cfg->command_timeout_ms
		: o == OPT_NODE ? &p->cfg->node_timeout_ms
		: o == OPT_METRICS ? &p->cfg->metrics
		: o == OPT_ASYNC_RELEASE ? &p->cfg->async_release
		: o == OPT_IDLE ? &p->cfg->idle_ms
		: o == OPT_RETRY_WINDOW ? &p->cfg->retry_window_ms
		: &p->cfg->lease_ms;
	if (p->seen & 1u << o && *field != num) {
		/* The numbers only when they cannot be a password's. */
		if (dmutex__url_frag(p, v, vlen) != v)
			dmutex__url_bad(p, "%s given twice with different values", options[o].name);
		else
			dmutex__url_bad(p, "%s given twice with different values (%u and %lu)",
					options[o].name, *field, num);
		return EINVAL;
	}
	p->seen |= 1u << o;
	*field = (unsigned)num;
	return 0;
}

int
dmutex__url_query(struct parse *p, const char *s, size_t n, struct dmutex__node_addr *node)
{
	const char *end = s + n;

	for (;;) {
		const char *amp = memchr(s, '&', (size_t)(end - s));
		const char *stop = amp ? amp : end;
		int err = set_option(p, s, (size_t)(stop - s), node);
		if (err)
			return err;
		if (!amp)
			return 0;
		s = amp + 1;
	}
}
