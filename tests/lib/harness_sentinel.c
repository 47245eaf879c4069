/*
 * Sentinel set-ups for tests: a master, one or two replicas and three
 * redis-sentinel processes, all on loopback.  See harness.h.
 */
#include "harness.h"
#include "topo_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_NAME "mymaster"
#define DEFAULT_DOWN_AFTER_MS 1000
#define DEFAULT_FAILOVER_TIMEOUT_MS 5000
#define DEFAULT_START_MS 30000
#define POLL_MS 20

/* The pause between two checks of a condition polled with a deadline. */
static void nap(int ms)
{
	struct timespec ts = { 0, (long)ms * 1000000L };
	nanosleep(&ts, NULL);
}

redisReply *th_sentinel_data_cmd(struct th_sentinel *s, int i, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	redisReply *rep = th__vcmd_quiet(s->data[i].port, s->data_user, s->data_pass, 5000, fmt, ap);
	va_end(ap);
	if (!rep)
		fprintf(stderr, "th_sentinel: data node %d (port %d): \"%s\" failed\n", i,
		        s->data[i].port, fmt);
	return rep;
}

redisReply *th_sentinel_cmd(struct th_sentinel *s, int i, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	redisReply *rep = th__vcmd_quiet(s->sentinel[i].port, s->sentinel_user, s->sentinel_pass,
	                                 5000, fmt, ap);
	va_end(ap);
	if (!rep)
		fprintf(stderr, "th_sentinel: sentinel %d (port %d): \"%s\" failed\n", i,
		        s->sentinel[i].port, fmt);
	return rep;
}

int th_sentinel_data_port(const struct th_sentinel *s, int i)
{
	return s->tls_dir[0] ? s->data_tls_port[i] : s->data[i].port;
}

static int data_index(const struct th_sentinel *s, int port)
{
	for (int i = 0; i < s->ndata; i++)
		if (th_sentinel_data_port(s, i) == port)
			return i;
	return -1;
}

/* ROLE's first element on data node i: 1 "master", 0 anything else, -1 error */
static int is_master(struct th_sentinel *s, int i)
{
	if (s->data[i].pid <= 0)
		return -1;
	redisReply *r = th__cmd_quiet(s->data[i].port, s->data_user, s->data_pass, "ROLE");
	int m = -1;
	if (r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 && th__str(r->element[0]))
		m = strcmp(r->element[0]->str, "master") == 0;
	if (r)
		freeReplyObject(r);
	return m;
}

int th_sentinel_get_master(struct th_sentinel *s, int i)
{
	redisReply *r = th__cmd_quiet(s->sentinel[i].port, s->sentinel_user, s->sentinel_pass,
	                              "SENTINEL GET-MASTER-ADDR-BY-NAME %s", s->name);
	int idx = -2;
	if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && th__str(r->element[0]) &&
	    th__str(r->element[1]) && strcmp(r->element[0]->str, "127.0.0.1") == 0)
		idx = data_index(s, atoi(r->element[1]->str));
	if (r)
		freeReplyObject(r);
	return idx;
}

/* Field of a flat RESP2 key/value array (SENTINEL MASTER / REPLICAS entry). */
static const char *kv(const redisReply *r, const char *key)
{
	if (!r || r->type != REDIS_REPLY_ARRAY)
		return NULL;
	for (size_t i = 0; i + 1 < r->elements; i += 2)
		if (th__str(r->element[i]) && strcmp(r->element[i]->str, key) == 0)
			return th__str(r->element[i + 1]);
	return NULL;
}

static int running_sentinels(const struct th_sentinel *s)
{
	int n = 0;
	for (int i = 0; i < TH_SENTINELS; i++)
		n += s->sentinel[i].pid > 0;
	return n;
}

/* Sentinel i's settled view: the master's data index, or -1 (why in `why`). */
static int settled_view(struct th_sentinel *s, int i, char *why, size_t whylen)
{
	redisReply *m = th__cmd_quiet(s->sentinel[i].port, s->sentinel_user, s->sentinel_pass,
	                              "SENTINEL MASTER %s", s->name);
	int idx = -1;
	const char *flags = kv(m, "flags"), *port = kv(m, "port"), *others = kv(m, "num-other-sentinels");
	if (!m || m->type != REDIS_REPLY_ARRAY || !flags || !port || !others) {
		snprintf(why, whylen, "sentinel %d: SENTINEL MASTER: %s", i,
		         m && m->type == REDIS_REPLY_ERROR ? m->str : "no answer");
	} else if (strcmp(flags, "master") != 0) {
		snprintf(why, whylen, "sentinel %d: master flags %s", i, flags);
	} else if (atoi(others) < running_sentinels(s) - 1) {
		/* sentinels never forget one another: a stopped one still counts */
		snprintf(why, whylen, "sentinel %d: knows %s other sentinels", i, others);
	} else if ((idx = data_index(s, atoi(port))) < 0) {
		snprintf(why, whylen, "sentinel %d: master port %s is not ours", i, port);
	}
	if (m)
		freeReplyObject(m);
	if (idx < 0)
		return -1;

	redisReply *r = th__cmd_quiet(s->sentinel[i].port, s->sentinel_user, s->sentinel_pass,
	                              "SENTINEL REPLICAS %s", s->name);
	int ok = r && r->type == REDIS_REPLY_ARRAY;
	for (int d = 0; ok && d < s->ndata; d++) {
		if (d == idx || s->data[d].pid <= 0)
			continue;
		int found = 0;
		for (size_t e = 0; e < r->elements && !found; e++) {
			const char *p = kv(r->element[e], "port"), *f = kv(r->element[e], "flags");
			found = p && f && atoi(p) == th_sentinel_data_port(s, d) && strcmp(f, "slave") == 0;
		}
		if (!found) {
			snprintf(why, whylen, "sentinel %d: data node %d (port %d) not a healthy replica",
			         i, d, s->data[d].port);
			ok = 0;
		}
	}
	if (r)
		freeReplyObject(r);
	return ok ? idx : -1;
}

/* All running sentinels agree and are settled: the master index, else -1. */
static int agreed(struct th_sentinel *s, char *why, size_t whylen)
{
	int idx = -1;
	for (int i = 0; i < TH_SENTINELS; i++) {
		if (s->sentinel[i].pid <= 0)
			continue;
		int v = settled_view(s, i, why, whylen);
		if (v < 0)
			return -1;
		if (idx >= 0 && v != idx) {
			snprintf(why, whylen, "sentinels disagree: data %d vs %d", idx, v);
			return -1;
		}
		idx = v;
	}
	if (idx < 0) {
		snprintf(why, whylen, "no sentinel running");
		return -1;
	}
	if (is_master(s, idx) != 1) {
		snprintf(why, whylen, "data node %d is not a master (ROLE)", idx);
		return -1;
	}
	return idx;
}

int th_sentinel_wait_agree(struct th_sentinel *s, int timeout_ms)
{
	char why[256] = "";
	long long deadline = th_now_ms() + timeout_ms;
	for (;;) {
		int idx = agreed(s, why, sizeof why);
		if (idx >= 0) {
			s->master = idx;
			return idx;
		}
		if (th_now_ms() >= deadline)
			break;
		nap(POLL_MS);
	}
	fprintf(stderr, "th_sentinel_wait_agree: no agreement after %d ms: %s\n", timeout_ms, why);
	return -1;
}

int th_sentinel_kill_master(struct th_sentinel *s, int timeout_ms)
{
	int old = s->master;
	if (old < 0 || s->data[old].pid <= 0) {
		fprintf(stderr, "th_sentinel_kill_master: no known running master\n");
		return -1;
	}
	long long deadline = th_now_ms() + timeout_ms;
	if (th_redis_kill(&s->data[old]) != 0)
		return -1;
	s->master = -1;
	int last[TH_SENTINELS];
	for (;;) {
		int idx = -1, same = 1;
		for (int i = 0; i < TH_SENTINELS; i++) {
			last[i] = s->sentinel[i].pid > 0 ? th_sentinel_get_master(s, i) : -3;
			if (last[i] == -3)
				continue;
			if (last[i] < 0 || last[i] == old || (idx >= 0 && last[i] != idx))
				same = 0;
			idx = last[i];
		}
		if (same && idx >= 0 && is_master(s, idx) == 1) {
			s->master = idx;
			return idx;
		}
		if (th_now_ms() >= deadline)
			break;
		nap(POLL_MS);
	}
	fprintf(stderr, "th_sentinel_kill_master: no promotion after %d ms (sentinels say %d %d %d,"
	        " old master %d)\n", timeout_ms, last[0], last[1], last[2], old);
	return -1;
}

void th_sentinel_stop(struct th_sentinel *s)
{
	if (!s)
		return;
	for (int i = 0; i < TH_SENTINELS; i++)
		th_redis_stop(&s->sentinel[i]);
	for (int i = 0; i < 1 + TH_SENTINEL_MAX_REPLICAS; i++)
		th_redis_stop(&s->data[i]);
	th_proxy_stop(s->repl_proxy);
	s->repl_proxy = NULL;
	s->master = -1;
}

static int copy_opt(char *dst, size_t len, const char *src, const char *what)
{
	if (!src) {
		dst[0] = '\0';
		return 0;
	}
	if (strlen(src) >= len || strpbrk(src, " \t\r\n\"'\\") || !src[0]) {
		fprintf(stderr, "th_sentinel_start: bad %s\n", what);
		return -1;
	}
	snprintf(dst, len, "%s", src);
	return 0;
}

/* Config lines for a node's own authentication; "" when none. */
static void auth_conf(char *out, size_t len, const char *user, const char *pass)
{
	if (user[0] && pass[0])
		snprintf(out, len, "user %s on >%s ~* &* +@all\nuser default off\n", user, pass);
	else if (pass[0])
		snprintf(out, len, "requirepass %s\n", pass);
	else
		out[0] = '\0';
}

/* With s->tls_dir: the config lines that add a TLS port; else "". */
static void tls_conf(const struct th_sentinel *s, char *out, size_t len, int port)
{
	if (!s->tls_dir[0]) {
		out[0] = '\0';
		return;
	}
	snprintf(out, len, "tls-port %d\ntls-cert-file %s/server.crt\ntls-key-file %s/server.key\n"
	         "tls-ca-cert-file %s/ca.crt\ntls-auth-clients no\ntls-replication yes\n", port,
	         s->tls_dir, s->tls_dir, s->tls_dir);
}

/* th_redis_start_as() with `base` and, with s->tls_dir, the TLS port
 * *tls_port.  th_redis_start retries a taken port with a new plain port
 * only, so a TLS port taken between its choice and the start failed every
 * attempt (seen in CI: "could not bind a port after 5 attempts" in 0.3 s):
 * a failed start with TLS picks a new TLS port and starts again. */
static int start_node(struct th_sentinel *s, struct th_redis *r, const char *base, int *tls_port,
                      int kind)
{
	char tls[1024], conf[4096];

	for (int attempt = 0; attempt < 3; attempt++) {
		if (attempt > 0 && (*tls_port = th_free_port()) <= 0)
			return -1;
		tls_conf(s, tls, sizeof tls, *tls_port);
		if (snprintf(conf, sizeof conf, "%s%s", base, tls) >= (int)sizeof conf)
			return -1;
		if (th_redis_start_as(r, conf, kind) == 0)
			return 0;
		if (!s->tls_dir[0])
			return -1;
		fprintf(stderr, "th_sentinel_start: start failed with TLS port %d; a new one\n", *tls_port);
	}
	return -1;
}

/* The master lists `want` replicas online and each replica's link is up. */
static int replication_up(struct th_sentinel *s, int want)
{
	char v[64];
	redisReply *r = th__cmd_quiet(s->data[0].port, s->data_user, s->data_pass, "INFO replication");
	int ok = th__str(r) && atoi(th__info_field(r->str, "connected_slaves", v, sizeof v)) == want;
	for (int i = 0; ok && i < want; i++) {
		char name[16];
		snprintf(name, sizeof name, "slave%d", i);
		ok = strstr(th__info_field(r->str, name, v, sizeof v), "state=online") != NULL;
	}
	if (r)
		freeReplyObject(r);
	for (int i = 1; ok && i <= want; i++) {
		r = th__cmd_quiet(s->data[i].port, s->data_user, s->data_pass, "INFO replication");
		ok = th__str(r) && strcmp(th__info_field(r->str, "master_link_status", v, sizeof v), "up") == 0;
		if (r)
			freeReplyObject(r);
	}
	return ok;
}

int th_sentinel_start(struct th_sentinel *s, const struct th_sentinel_opts *o, int timeout_ms)
{
	static const struct th_sentinel_opts none;
	if (!o)
		o = &none;
	memset(s, 0, sizeof *s);
	s->master = -1;
	if (timeout_ms <= 0)
		timeout_ms = DEFAULT_START_MS;
	long long deadline = th_now_ms() + timeout_ms;
	int replicas = o->replicas ? o->replicas : 1;
	if (replicas < 1 || replicas > TH_SENTINEL_MAX_REPLICAS) {
		fprintf(stderr, "th_sentinel_start: %d replicas (1..%d)\n", replicas,
		        TH_SENTINEL_MAX_REPLICAS);
		return -1;
	}
	s->ndata = 1 + replicas;
	s->down_after_ms = o->down_after_ms > 0 ? o->down_after_ms : DEFAULT_DOWN_AFTER_MS;
	s->failover_timeout_ms = o->failover_timeout_ms > 0 ? o->failover_timeout_ms
	                                                    : DEFAULT_FAILOVER_TIMEOUT_MS;
	if (copy_opt(s->name, sizeof s->name, o->master_name ? o->master_name : DEFAULT_NAME,
	             "master name") != 0 ||
	    copy_opt(s->data_user, sizeof s->data_user, o->data_user, "data_user") != 0 ||
	    copy_opt(s->data_pass, sizeof s->data_pass, o->data_pass, "data_pass") != 0 ||
	    copy_opt(s->sentinel_user, sizeof s->sentinel_user, o->sentinel_user, "sentinel_user") != 0 ||
	    copy_opt(s->sentinel_pass, sizeof s->sentinel_pass, o->sentinel_pass, "sentinel_pass") != 0)
		return -1;
	if (o->tls_dir && (strlen(o->tls_dir) >= sizeof s->tls_dir || !o->tls_dir[0])) {
		fprintf(stderr, "th_sentinel_start: bad tls_dir\n");
		return -1;
	}
	snprintf(s->tls_dir, sizeof s->tls_dir, "%s", o->tls_dir ? o->tls_dir : "");
	for (int i = 0; s->tls_dir[0] && i < s->ndata; i++)
		if ((s->data_tls_port[i] = th_free_port()) <= 0)
			return -1;
	for (int i = 0; s->tls_dir[0] && i < TH_SENTINELS; i++)
		if ((s->sentinel_tls_port[i] = th_free_port()) <= 0)
			return -1;
	if ((s->data_user[0] && !s->data_pass[0]) || (s->sentinel_user[0] && !s->sentinel_pass[0])) {
		fprintf(stderr, "th_sentinel_start: a user needs a password\n");
		return -1;
	}

	char conf[1024], auth[256], extra[2048];
	auth_conf(auth, sizeof auth, s->data_user, s->data_pass);
	/* every data node may become a replica: all of them can authenticate */
	/* repl-diskless-sync-delay: a replica syncs at once, not after 5 s */
	int n = snprintf(conf, sizeof conf, "repl-diskless-sync-delay 0\n%s%s%s%s%s%s%s", auth,
	                 s->data_user[0] ? "masteruser " : "", s->data_user,
	                 s->data_user[0] ? "\n" : "",
	                 s->data_pass[0] ? "masterauth " : "", s->data_pass,
	                 s->data_pass[0] ? "\n" : "");
	if (o->data_extra)
		n += snprintf(conf + n, sizeof conf - (size_t)n, "%s\n", o->data_extra);
	if (n >= (int)sizeof conf) {
		fprintf(stderr, "th_sentinel_start: data config too long\n");
		return -1;
	}

	if (start_node(s, &s->data[0], conf, &s->data_tls_port[0], TH_REDIS_PLAIN) != 0)
		goto fail;
	if (o->replica_proxy &&
	    !(s->repl_proxy = th_proxy_start(th_sentinel_data_port(s, 0))))
		goto fail;
	for (int i = 1; i < s->ndata; i++) {
		int port = i == 1 && s->repl_proxy ? th_proxy_port(s->repl_proxy)
		                                   : th_sentinel_data_port(s, 0);
		n = snprintf(extra, sizeof extra, "%sreplicaof 127.0.0.1 %d\n", conf, port);
		if (n >= (int)sizeof extra ||
		    start_node(s, &s->data[i], extra, &s->data_tls_port[i], TH_REDIS_PLAIN) != 0)
			goto fail;
	}
	while (!replication_up(s, replicas)) {
		if (th_now_ms() >= deadline) {
			fprintf(stderr, "th_sentinel_start: replication not up in time\n");
			goto fail;
		}
		nap(POLL_MS);
	}

	auth_conf(auth, sizeof auth, s->sentinel_user, s->sentinel_pass);
	n = snprintf(extra, sizeof extra,
	             "%s"
	             "sentinel monitor %s 127.0.0.1 %d 2\n"
	             "sentinel down-after-milliseconds %s %d\n"
	             "sentinel failover-timeout %s %d\n"
	             "sentinel parallel-syncs %s 2\n",
	             auth, s->name, th_sentinel_data_port(s, 0), s->name, s->down_after_ms, s->name,
	             s->failover_timeout_ms, s->name);
	if (s->data_user[0])
		n += snprintf(extra + n, sizeof extra - (size_t)n, "sentinel auth-user %s %s\n",
		              s->name, s->data_user);
	if (s->data_pass[0])
		n += snprintf(extra + n, sizeof extra - (size_t)n, "sentinel auth-pass %s %s\n",
		              s->name, s->data_pass);
	if (s->sentinel_user[0])
		n += snprintf(extra + n, sizeof extra - (size_t)n, "sentinel sentinel-user %s\n",
		              s->sentinel_user);
	if (s->sentinel_pass[0])
		n += snprintf(extra + n, sizeof extra - (size_t)n, "sentinel sentinel-pass %s\n",
		              s->sentinel_pass);
	if (n >= (int)sizeof extra) {
		fprintf(stderr, "th_sentinel_start: sentinel config too long\n");
		goto fail;
	}
	for (int i = 0; i < TH_SENTINELS; i++)
		if (start_node(s, &s->sentinel[i], extra, &s->sentinel_tls_port[i], TH_REDIS_SENTINEL) != 0)
			goto fail;
	if (s->tls_dir[0])
		snprintf(s->url, sizeof s->url, "rediss-sentinel://127.0.0.1:%d,127.0.0.1:%d,"
		         "127.0.0.1:%d/%s?tls_ca=%s/ca.crt", s->sentinel_tls_port[0],
		         s->sentinel_tls_port[1], s->sentinel_tls_port[2], s->name, s->tls_dir);
	else
		snprintf(s->url, sizeof s->url, "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d,"
		         "127.0.0.1:%d/%s", s->sentinel[0].port, s->sentinel[1].port,
		         s->sentinel[2].port, s->name);

	long long left = deadline - th_now_ms();
	if (th_sentinel_wait_agree(s, left > 0 ? (int)left : 0) != 0)
		goto fail;
	return 0;
fail:
	fprintf(stderr, "th_sentinel_start: failed\n");
	th_sentinel_stop(s);
	return -1;
}
