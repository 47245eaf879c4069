/*
 * dmutex-aware test helpers.  See dmt.h for the contract.
 */
#include "dmt.h"
#include "harness_etcd.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* mutexes                                                             */
/* ------------------------------------------------------------------ */

int
dmt_init_mutex(dmutex_t *m, const char *name, dmutex_client_t *c, const struct dmt_attr *o)
{
	static const struct dmt_attr defaults;
	dmutex_attr_t a;
	int rc, rc2;

	if (!o)
		o = &defaults;
	if ((rc = dmutex_attr_init(&a)))
		return rc;
	if (!(rc = dmutex_attr_setclient(&a, c)) &&
	    !(rc = dmutex_attr_settype(&a, o->type)) &&
	    !(rc = dmutex_attr_setrobust(&a, o->robust)) &&
	    !(o->lease_ms && (rc = dmutex_attr_setlease(&a, o->lease_ms))) &&
	    !(rc = dmutex_attr_setonlost(&a, o->onlost, o->arg)) &&
	    !(o->nocache && (rc = dmutex_attr_setleasecache(&a, 0))))
		rc = dmutex_init(m, name, &a);
	rc2 = dmutex_attr_destroy(&a);
	return rc ? rc : rc2;
}

int
dmt_open_mutex(dmutex_client_t **c, dmutex_t *m, const char *url, const char *name,
		const struct dmt_attr *o)
{
	int rc;

	if ((rc = dmutex_client_open(c, url)))
		return rc;
	if ((rc = dmt_init_mutex(m, name, *c, o)))
		dmutex_client_close(*c);
	return rc;
}

int
dmt_client_open_retry(dmutex_client_t **c, const char *url)
{
	long long until = th_now_ms() + 10000LL * dmt_slowdown();
	int rc;

	/* Each try is bounded by the URL's own timeouts; no pause between
	 * tries: a refused connection is not what this waits out. */
	while ((rc = dmutex_client_open(c, url)) == EIO && th_now_ms() < until)
		;
	return rc;
}

void
dmt_close_mutex(dmutex_client_t *c, dmutex_t *m)
{
	dmutex_destroy(m);
	dmutex_client_close(c);
}

void
dmt_count_lost(const char *name, void *arg)
{
	(void)name;
	atomic_fetch_add((atomic_int *)arg, 1);
}

int
dmt_lost_once(void *arg)
{
	return atomic_load((atomic_int *)arg) >= 1;
}

int
dmt_flag_set(void *arg)
{
	return atomic_load((atomic_int *)arg) != 0;
}

int
dmt_lock_free(void *arg)
{
	dmutex_t *m = arg;

	return dmutex_trylock(m) == 0 && dmutex_unlock(m) == 0;
}

long long
dmt_late_ms(const char *what, int rc, long long t0, long long ahead_ms)
{
	long long late = th_now_ms() - t0 - ahead_ms;

	fprintf(stderr, "%s: %s, %lld ms past its deadline\n", what, dmutex_strerror(rc), late);
	return late;
}

/* ------------------------------------------------------------------ */
/* URLs and keys                                                       */
/* ------------------------------------------------------------------ */

#define DMT_MAX_NODES 7

static struct th_redis extra[DMT_MAX_NODES - 1];
static int nextra;

int
dmt_nodes(void)
{
	const char *v = getenv("DMUTEX_TEST_NODES");
	int n = v ? atoi(v) : 1;
	return n < 1 ? 1 : n > DMT_MAX_NODES ? DMT_MAX_NODES : n;
}

/* DMUTEX_TEST_TLS=DIR (DIR/ca.crt, server.crt, server.key): the servers
 * also listen with TLS, and the URLs are rediss:// to that port. */
static const char *
tls_dir(void)
{
	const char *d = getenv("DMUTEX_TEST_TLS");
	return d && *d ? d : NULL;
}

static struct {
	int port, tls_port;
} tls_ports[DMT_MAX_NODES];
static int ntls;

static int
tls_port_of(int port)
{
	for (int i = 0; i < ntls; i++)
		if (tls_ports[i].port == port)
			return tls_ports[i].tls_port;
	return 0;
}

/* One node of a URL list: rediss:// when port's server has TLS on. */
static size_t
node_url(char *buf, size_t len, const char *userinfo, int port, const char *opts, int first)
{
	int ui = userinfo && *userinfo, op = opts && *opts, tp = tls_port_of(port);

	/* A handshake under valgrind on a loaded machine outlasts the
	 * default 2 s connect timeout (a client-wide option: on the first
	 * URL of a list only, where opts go, and not if opts set it). */
	if (tp)
		return (size_t)snprintf(buf, len, "rediss://%s%s127.0.0.1:%d?tls_ca=%s/ca.crt%s%s%s",
				ui ? userinfo : "", ui ? "@" : "", tp, tls_dir(), op ? "&" : "",
				op ? opts : "", !first || (op && strstr(opts, "connect_timeout_ms"))
				? "" : "&connect_timeout_ms=20000");
	return (size_t)snprintf(buf, len, "redis://%s%s127.0.0.1:%d%s%s", ui ? userinfo : "",
			ui ? "@" : "", port, op ? "?" : "", op ? opts : "");
}

/* DMUTEX_TEST_ETCD=1: the run's locks are in one etcd member that
 * dmt_backend_up starts; the URLs of `first` (whose Redis stays up for
 * the tests' own counters and lists) name it instead. */
static struct th_etcd etcd;
static int etcd_port;           /* first's Redis port: dmt_url's etcd alias */
/* The KV requests this process's helpers made (each read below is one):
 * dmt_etcd_kv_calls leaves them out, so that a test may read etcd while
 * it counts the library's requests. */
static long long etcd_own;

static const struct th_etcd *
own_req(void)
{
	etcd_own++;
	return &etcd;
}

int
dmt_etcd(void)
{
	const char *v = getenv("DMUTEX_TEST_ETCD");
	return v && *v && strcmp(v, "0");
}

/* "etcd://[USERINFO@]127.0.0.1:P?OPTS&command_timeout_ms=T" (T as for
 * Redis, unless opts chose one). */
static void
etcd_url(char *buf, size_t len, const char *userinfo, const char *opts)
{
	int ui = userinfo && *userinfo, op = opts && *opts;
	int cmd = !(op && strstr(opts, "command_timeout_ms"));

	snprintf(buf, len, "etcd://%s%s127.0.0.1:%d?%s%s", ui ? userinfo : "", ui ? "@" : "",
			etcd.m[0].client_port, op ? opts : "", op && cmd ? "&" : "");
	if (cmd) {
		size_t used = strlen(buf);
		snprintf(buf + used, len - used, "command_timeout_ms=%d", th_command_timeout_ms());
	}
}

void
dmt_url(char *buf, size_t len, const char *userinfo, int port, const char *opts)
{
	char more[512];

	if (etcd_port && port == etcd_port) {
		etcd_url(buf, len, userinfo, opts);
		return;
	}

	/* Redlock: the default node timeout is 5 % of the lease, at least
	 * 50 ms, and a node that misses it is skipped for 200 ms.  On the
	 * loaded 2-core CI machine a node misses 50 ms now and then, and the
	 * tests that read the first node's state (its lock key, its counters)
	 * would find holds it never saw: they test the scheduler, not the
	 * library.  400 ms (below the shortest test lease, 450 ms; a forked
	 * child's first trylock at load 5, three fresh connections, found
	 * none of the nodes answering within 200 ms), unless the test chose
	 * a node timeout itself.  test_redlock.c, which tests the node
	 * timeout, builds its own URLs. */
	int node = nextra && !(opts && strstr(opts, "node_timeout_ms"));
	/* The harness's command timeout (harness_url.c), unless the test
	 * chose one. */
	int cmd = !(opts && strstr(opts, "command_timeout_ms"));
	char cmd_opt[48] = "";

	if (cmd)
		snprintf(cmd_opt, sizeof cmd_opt, "command_timeout_ms=%d", th_command_timeout_ms());
	if (node || cmd) {
		snprintf(more, sizeof more, "%s%s%s%s%s", opts ? opts : "", opts && *opts ? "&" : "",
				node ? "node_timeout_ms=400" : "", node && cmd ? "&" : "", cmd_opt);
		opts = more;
	}
	size_t off = node_url(buf, len, userinfo, port, opts, 1);

	for (int i = 0; i < nextra && off + 1 < len; i++) {
		buf[off++] = ',';
		off += node_url(buf + off, len - off, userinfo, extra[i].port, NULL, 0);
	}
}

/* Turn TLS on in a running server (CONFIG SET), on a free port. */
static int
tls_on(const struct th_redis *r)
{
	const char *d = tls_dir();
	char crt[512], key[512], ca[512];

	snprintf(crt, sizeof crt, "%s/server.crt", d);
	snprintf(key, sizeof key, "%s/server.key", d);
	snprintf(ca, sizeof ca, "%s/ca.crt", d);
	for (int attempt = 0; attempt < 5 && ntls < DMT_MAX_NODES; attempt++) {
		int port = th_free_port();
		redisReply *rep = th_redis_cmd(r, "CONFIG SET tls-cert-file %s tls-key-file %s "
				"tls-ca-cert-file %s tls-auth-clients no tls-port %d", crt, key, ca, port);
		int ok = rep && rep->type == REDIS_REPLY_STATUS;
		if (rep)
			freeReplyObject(rep);
		if (ok) {
			tls_ports[ntls].port = r->port;
			tls_ports[ntls++].tls_port = port;
			return 0;
		}
	}
	fprintf(stderr, "dmt: cannot turn TLS on in the server on port %d\n", r->port);
	return -1;
}

int
dmt_backend_up(struct th_redis *first)
{
	int n = dmt_nodes();

	nextra = 0;
	ntls = 0;
	etcd_port = 0;
	if (dmt_etcd()) {
		if (th_etcd_start(&etcd, NULL, 0))
			return -1;
		etcd_port = first->port;
		etcd_url(first->url, sizeof first->url, NULL, NULL);
		etcd_url(first->unix_url, sizeof first->unix_url, NULL, NULL);
		return 0;
	}
	for (int i = 0; i < n - 1; i++) {
		if (th_redis_start(&extra[i], first->extra[0] ? first->extra : NULL))
			return -1;
		nextra++;
	}
	if (tls_dir()) {
		if (tls_on(first))
			return -1;
		for (int i = 0; i < nextra; i++)
			if (tls_on(&extra[i]))
				return -1;
	}
	if (nextra || ntls)
		dmt_url(first->url, sizeof first->url, NULL, first->port, NULL);
	return 0;
}

long long
dmt_max_int(struct th_redis *first, const char *cmd)
{
	long long max = th_redis_int(first, cmd);

	for (int i = 0; i < nextra; i++) {
		long long v = th_redis_int(&extra[i], cmd);
		if (v > max)
			max = v;
	}
	return max;
}

long long
dmt_sum_int(struct th_redis *first, const char *cmd)
{
	long long sum = th_redis_int(first, cmd);

	for (int i = 0; i < nextra && sum != LLONG_MIN; i++) {
		long long v = th_redis_int(&extra[i], cmd);
		sum = v == LLONG_MIN ? LLONG_MIN : sum + v;
	}
	return sum;
}

long long
dmt_evalsha_calls_all(struct th_redis *first)
{
	long long sum = dmt_evalsha_calls(first);

	for (int i = 0; i < nextra && sum >= 0; i++) {
		long long v = dmt_evalsha_calls(&extra[i]);
		sum = v < 0 ? -1 : sum + v;
	}
	return sum;
}

long long
dmt_etcd_kv_calls(void)
{
	if (!etcd_port)
		return -1;
	long long n = th_etcd_metric(&etcd, 0, "grpc_server_handled_total",
			"grpc_service=\"etcdserverpb.KV\"");
	return n < 0 ? -1 : n - etcd_own;
}

long long
dmt_etcd_watchers(void)
{
	return etcd_port ? th_etcd_metric(&etcd, 0, "etcd_debugging_mvcc_watcher_total", NULL) : -1;
}

int
dmt_etcd_kill(void)
{
	return etcd_port ? th_etcd_kill(&etcd, 0) : -1;
}

int
dmt_etcd_pause(int on)
{
	if (!etcd_port)
		return -1;
	return on ? th_etcd_pause(&etcd, 0) : th_etcd_resume(&etcd, 0);
}

void
dmt_backend_down(void)
{
	for (int i = 0; i < nextra; i++)
		th_redis_stop(&extra[i]);
	nextra = 0;
	th_etcd_stop(&etcd);
	etcd_port = 0;
}

void
dmt_lock_key(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "dmutex:lock:{%s}", name);
}

void
dmt_meta_key(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "dmutex:meta:{%s}", name);
}

/* ------------------------------------------------------------------ */
/* Redis state                                                         */
/* ------------------------------------------------------------------ */

int
dmt_hget(const struct th_redis *r, const char *key, const char *field, char *out, size_t len)
{
	redisReply *rep = th_redis_cmd(r, "HGET %s %s", key, field);
	int ok = rep && rep->type == REDIS_REPLY_STRING;

	if (ok)
		snprintf(out, len, "%s", rep->str);
	if (rep)
		freeReplyObject(rep);
	return ok;
}

/* The fields of a layout-3 lock value, in order (acquire.lua). */
static const char *const v3_fields[] = {
	"v", "token", "fence", "died", "flags", "lease", "since", "pid", "tid", "hostid", "host"
};
#define V3_NFIELDS (sizeof v3_fields / sizeof v3_fields[0])

/* Split a layout-3 value at single spaces, the host (last) being the rest:
 * 0, or -1 if it is not a hold's value (the not-recoverable mark, or data
 * dmutex did not write). */
static int
v3_split(const char *val, const char *f[V3_NFIELDS], size_t flen[V3_NFIELDS])
{
	const char *p = val;

	for (size_t n = 0; n < V3_NFIELDS; n++) {
		const char *sp = n + 1 < V3_NFIELDS ? strchr(p, ' ') : NULL;
		if (!sp && n + 1 < V3_NFIELDS)
			return -1;
		f[n] = p;
		flen[n] = sp ? (size_t)(sp - p) : strlen(p);
		p = sp ? sp + 1 : p;
	}
	return 0;
}

/* The flag letter a pseudo-field stands for, or 0. */
static char
v3_flag(const char *field)
{
	return !strcmp(field, "w") ? 'w' : !strcmp(field, "cache") ? 'c' : !strcmp(field, "robust") ? 'r' : 0;
}

int
dmt_lock_value_field(const char *val, const char *field, char *out, size_t len)
{
	const char *f[V3_NFIELDS];
	size_t flen[V3_NFIELDS];
	char flag = v3_flag(field);

	if (!strcmp(val, "3 notrec")) {
		if (!strcmp(field, "v") || !strcmp(field, "state")) {
			snprintf(out, len, "%s", !strcmp(field, "v") ? "3" : "notrec");
			return 1;
		}
		return 0;
	}
	if (v3_split(val, f, flen))
		return 0;
	if (flag) {
		if (!memchr(f[4], flag, flen[4]))
			return 0;
		snprintf(out, len, "1");
		return 1;
	}
	for (size_t i = 0; i < V3_NFIELDS; i++) {
		if (strcmp(field, v3_fields[i]))
			continue;
		if ((!strcmp(field, "fence") || !strcmp(field, "hostid")) &&
		    flen[i] == 1 && f[i][0] == '-')
			return 0;
		snprintf(out, len, "%.*s", (int)flen[i], f[i]);
		return 1;
	}
	return 0;
}

int
dmt_lock_key_field(const struct th_redis *r, const char *key, const char *field, char *out,
		size_t len)
{
	/* GET first: a hash answers WRONGTYPE, and only then is HGET asked
	 * (a name's layout does not change while a test reads it). */
	redisReply *rep = th_redis_cmd(r, "GET %s", key);
	int ok = 0;

	if (!rep)
		return 0;
	if (rep->type == REDIS_REPLY_STRING) {
		ok = dmt_lock_value_field(rep->str, field, out, len);
	} else if (rep->type == REDIS_REPLY_ERROR && !strncmp(rep->str, "WRONGTYPE", 9)) {
		freeReplyObject(rep);
		return dmt_hget(r, key, field, out, len);
	}
	freeReplyObject(rep);
	return ok;
}

int
dmt_lock_set(const struct th_redis *r, const char *name, const char *field, const char *value)
{
	char k[DMUTEX_NAME_MAX + 32], buf[4096];
	const char *f[V3_NFIELDS];
	size_t flen[V3_NFIELDS], at = 0;
	char flag = v3_flag(field);
	redisReply *rep;
	int ok = 0;

	dmt_lock_key(k, sizeof k, name);
	if (!(rep = th_redis_cmd(r, "GET %s", k)))
		return -1;
	if (rep->type == REDIS_REPLY_ERROR && !strncmp(rep->str, "WRONGTYPE", 9)) {
		freeReplyObject(rep);
		return th_redis_int(r, "HSET %s %s %s", k, field, value) >= 0 ? 0 : -1;
	}
	if (rep->type != REDIS_REPLY_STRING || v3_split(rep->str, f, flen)) {
		freeReplyObject(rep);
		return -1;
	}
	for (size_t i = 0; i < V3_NFIELDS && at < sizeof buf; i++) {
		const char *v = f[i];
		int n = (int)flen[i];
		char flags[32];
		if (i == 4 && flag) {
			/* "-" is no flag; a letter already there stays once. */
			snprintf(flags, sizeof flags, "%.*s%c", f[i][0] == '-' ? 0 : n, f[i],
					memchr(f[i], flag, flen[i]) ? '\0' : flag);
			v = flags;
			n = (int)strlen(flags);
		} else if (!strcmp(field, v3_fields[i])) {
			v = value;
			n = (int)strlen(value);
		}
		at += (size_t)snprintf(buf + at, sizeof buf - at, "%s%.*s", i ? " " : "", n, v);
	}
	freeReplyObject(rep);
	/* XX KEEPTTL: the hold's own key, its lease untouched. */
	if (at < sizeof buf && (rep = th_redis_cmd(r, "SET %s %s XX KEEPTTL", k, buf))) {
		ok = rep->type == REDIS_REPLY_STATUS;
		freeReplyObject(rep);
	}
	return ok ? 0 : -1;
}

/* The etcd key (or prefix) PART of object NAME of kind ("m" mutex, "c",
 * "r", "s", "b"), under the default prefix: src/backend/etcd/keys.c,
 * dmutex__etcd_name_key. */
static void
etcd_key(char *buf, size_t len, const char *kind, const char *name, const char *part)
{
	snprintf(buf, len, "dmutex:%s/%zu:%s/%s", kind, strlen(name), name, part);
}

/* NAME's queue in etcd (README "etcd"). */
static void
etcd_queue(char *buf, size_t len, const char *name)
{
	etcd_key(buf, len, "m", name, "q/");
}

/* The key PART of object NAME of kind over etcd: 1 and its value, 0 if
 * absent (or on error). */
static int
etcd_value(const char *kind, const char *name, const char *part, char *val, size_t len)
{
	char k[DMUTEX_NAME_MAX + 64], key[DMUTEX_NAME_MAX + 200];

	etcd_key(k, sizeof k, kind, name, part);
	return th_etcd_first_kv(own_req(), 0, k, key, sizeof key, val, len, NULL, NULL) == 1;
}

/* dmt_lock_field over etcd: the holder is the queue's oldest key, its
 * value "host pid tid token", its create revision the fence. */
static int
etcd_lock_field(const char *name, const char *field, char *out, size_t len)
{
	char q[DMUTEX_NAME_MAX + 64], key[DMUTEX_NAME_MAX + 200], val[512], pid[32];
	const char *tok;
	long long rev;

	etcd_queue(q, sizeof q, name);
	if (th_etcd_first_kv(own_req(), 0, q, key, sizeof key, val, sizeof val, &rev, NULL) != 1)
		return 0;
	if (!strcmp(field, "token") && (tok = strrchr(val, ' ')))
		snprintf(out, len, "%s", tok + 1);
	else if (!strcmp(field, "fence"))
		snprintf(out, len, "%lld", rev);
	else if (!strcmp(field, "pid") && sscanf(val, "%*s %31s", pid) == 1)
		snprintf(out, len, "%s", pid);
	else
		return 0;
	return 1;
}

int
dmt_lock_field(const struct th_redis *r, const char *name, const char *field, char *out,
		size_t len)
{
	char k[DMUTEX_NAME_MAX + 32];

	if (etcd_port)
		return etcd_lock_field(name, field, out, len);
	dmt_lock_key(k, sizeof k, name);
	return dmt_lock_key_field(r, k, field, out, len);
}

long long
dmt_lock_exists(const struct th_redis *r, const char *name)
{
	char k[DMUTEX_NAME_MAX + 64];

	if (etcd_port) {
		/* The lock's queue (README "etcd"): a holder's key, and its
		 * waiters'. */
		etcd_queue(k, sizeof k, name);
		long long n = th_etcd_count_prefix(own_req(), 0, k);
		return n < 0 ? LLONG_MIN : n > 0;
	}
	dmt_lock_key(k, sizeof k, name);
	return th_redis_int(r, "EXISTS %s", k);
}

long long
dmt_backend_waiters(const struct th_redis *r, const char *name)
{
	char k[DMUTEX_NAME_MAX + 64];
	long long n;

	if (!etcd_port) {
		redisReply *rep = th_redis_cmd(r, "PUBSUB CHANNELS dmutex:wake:{%s}:*", name);

		n = rep && rep->type == REDIS_REPLY_ARRAY ? (long long)rep->elements : -1;
		if (rep)
			freeReplyObject(rep);
		return n;
	}
	/* Behind the holder, one key per waiting process (its other threads
	 * wait in the process). */
	etcd_queue(k, sizeof k, name);
	n = th_etcd_count_prefix(own_req(), 0, k);
	return n < 0 ? -1 : n > 1 ? n - 1 : 0;
}

long long
dmt_etcd_count(const char *kind, const char *name, const char *part)
{
	char k[DMUTEX_NAME_MAX + 64];

	etcd_key(k, sizeof k, kind, name, part);
	return th_etcd_count_prefix(own_req(), 0, k);
}

long long
dmt_etcd_field(const char *kind, const char *name, const char *part, int i)
{
	char v[128], *p = v, *end;
	long long n;

	if (!etcd_value(kind, name, part, v, sizeof v))
		return LLONG_MIN;
	for (; i > 0 && p; i--)
		if ((p = strchr(p, ' ')))
			p++;
	if (!p)
		return LLONG_MIN;
	n = strtoll(p, &end, 10);
	return end == p ? LLONG_MIN : n;
}

long long
dmt_cond_waiters(const struct th_redis *r, const char *name)
{
	if (!etcd_port)
		return th_redis_int(r, "ZCARD dmutex:cond:{%s}", name);
	/* src/backend/etcd/cond.c: a waiter is a key under c/<len>:NAME/w/ */
	return dmt_etcd_count("c", name, "w/");
}

/* dmt_meta_state over etcd (README "etcd"): ".../q-notrec" is the not-
 * recoverable mark; ".../s" holds the robust holder's token, "held" while
 * the queue's head has that token, "died" once it is gone. */
static int
etcd_meta_state(const char *name, char *out, size_t len)
{
	char v[256], tok[256];
	const char *st = "";

	if (etcd_value("m", name, "q-notrec", v, sizeof v))
		st = "notrec";
	else if (etcd_value("m", name, "s", v, sizeof v))
		st = etcd_lock_field(name, "token", tok, sizeof tok) && !strcmp(tok, v) ? "held" : "died";
	snprintf(out, len, "%s", st);
	return *st != '\0';
}

long long
dmt_lock_pttl(const struct th_redis *r, const char *name)
{
	char k[DMUTEX_NAME_MAX + 64], key[DMUTEX_NAME_MAX + 200], val[512];
	long long lease, ttl;
	int n;

	if (!etcd_port) {
		dmt_lock_key(k, sizeof k, name);
		return th_redis_int(r, "PTTL %s", k);
	}
	etcd_queue(k, sizeof k, name);
	if ((n = th_etcd_first_kv(own_req(), 0, k, key, sizeof key, val, sizeof val, NULL, &lease)) != 1)
		return n == 0 ? -2 : LLONG_MIN;
	if (!lease)
		return -1;
	ttl = th_etcd_lease_ttl(&etcd, 0, lease);
	return ttl == -2 ? LLONG_MIN : ttl < 0 ? -2 : ttl * 1000;
}

long long
dmt_lock_reset(const struct th_redis *r, const char *name)
{
	char k[DMUTEX_NAME_MAX + 64];

	if (!etcd_port) {
		dmt_lock_key(k, sizeof k, name);
		return th_redis_int(r, "DEL %s", k);
	}
	etcd_key(k, sizeof k, "m", name, "q-notrec");
	return th_etcd_delete_prefix(own_req(), 0, k);
}

int
dmt_meta_state(const struct th_redis *r, const char *name, char *out, size_t len)
{
	char k[DMUTEX_NAME_MAX + 32];

	if (etcd_port)
		return etcd_meta_state(name, out, len);

	if (dmt_lock_field(r, name, "state", out, len))
		return 1;       /* "3 notrec" (a fair lock's hash has no state) */
	dmt_meta_key(k, sizeof k, name);
	if (dmt_hget(r, k, "state", out, len))
		return 1;
	if (len)
		out[0] = '\0';
	return 0;
}

long long
dmt_count_keys(const struct th_redis *r, const char *pattern)
{
	if (etcd_port && !strcmp(pattern, "dmutex:lock:*"))
		return th_etcd_count_prefix(own_req(), 0, "dmutex:m/");
	redisReply *rep = th_redis_cmd(r, "KEYS %s", pattern);
	long long n = rep && rep->type == REDIS_REPLY_ARRAY ? (long long)rep->elements : -1;

	if (rep)
		freeReplyObject(rep);
	return n;
}

long long
dmt_blocked_clients(const struct th_redis *r)
{
	redisReply *rep = th_redis_cmd(r, "INFO clients");
	const char *p;
	long long n = -1;

	if (rep && rep->type == REDIS_REPLY_STRING && (p = strstr(rep->str, "blocked_clients:")))
		n = strtoll(p + strlen("blocked_clients:"), NULL, 10);
	if (rep)
		freeReplyObject(rep);
	return n;
}

/* calls= of one INFO commandstats line, 0 when the command never ran. */
static long long
stat_calls(const char *info, const char *cmd)
{
	char key[64];
	const char *p;

	snprintf(key, sizeof key, "cmdstat_%s:calls=", cmd);
	if (!(p = strstr(info, key)))
		return 0;
	return strtoll(p + strlen(key), NULL, 10);
}

long long
dmt_cmd_calls(const struct th_redis *r, const char *cmd, ...)
{
	redisReply *rep = th_redis_cmd(r, "INFO commandstats");
	long long n = -1;
	va_list ap;

	if (rep && rep->type == REDIS_REPLY_STRING) {
		n = 0;
		va_start(ap, cmd);
		for (; cmd; cmd = va_arg(ap, const char *))
			n += stat_calls(rep->str, cmd);
		va_end(ap);
	}
	if (rep)
		freeReplyObject(rep);
	return n;
}

long long
dmt_script_calls(const struct th_redis *r)
{
	if (etcd_port)
		return dmt_etcd_kv_calls();
	return dmt_cmd_calls(r, "evalsha", "eval", (const char *)NULL);
}

long long
dmt_evalsha_calls(const struct th_redis *r)
{
	return dmt_cmd_calls(r, "evalsha", (const char *)NULL);
}

/* ------------------------------------------------------------------ */
/* time and processes                                                  */
/* ------------------------------------------------------------------ */

int64_t
dmt_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void
dmt_deadline_in(clockid_t clk, long ms, struct timespec *ts)
{
	clock_gettime(clk, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

void
dmt_pass_time_ms(long long ms)
{
	long long until = th_now_ms() + ms;

	/* To the monotonic deadline: a signal only shortens one nanosleep. */
	for (long long left; (left = until - th_now_ms()) > 0;) {
		struct timespec ts = { (time_t)(left / 1000), (long)(left % 1000) * 1000000L };
		nanosleep(&ts, NULL);
	}
}

void
dmt_pass_time_until_ms(long long until)
{
	long long left = until - th_now_ms();

	if (left > 0)
		dmt_pass_time_ms(left);
}

void
dmt_die_with_parent(pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* The parent may have died before prctl: then nobody kills us. */
	if (getppid() != parent)
		_exit(99);
}

void
dmt_reap(pid_t *pid)
{
	if (*pid <= 0)
		return;
	kill(*pid, SIGKILL);
	kill(*pid, SIGCONT);
	waitpid(*pid, NULL, 0);
	*pid = 0;
}

int dmt_slowdown(void)
{
	return th_slowdown();
}

int
dmt_unlock_answered(dmutex_t *m)
{
	uint64_t fence;
	int rc = dmutex_unlock(m);

	if (rc)
		return rc;
	/* 0: a recursive mutex still held (an inner unlock sends nothing). */
	rc = dmutex_fence(m, &fence);
	return rc == EPERM || rc == 0 ? 0 : rc;
}
