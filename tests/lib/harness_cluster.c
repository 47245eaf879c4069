/*
 * Redis Cluster set-ups for tests: six nodes on loopback joined by
 * `redis-cli --cluster create`, slot migration step by step, failover.
 * See harness.h.
 */
#include "harness.h"
#include "topo_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_NODE_TIMEOUT_MS 2000
#define DEFAULT_START_MS 60000
#define CLI_TIMEOUT_MS 30000
#define POLL_MS 20
#define MAX_LISTED 16            /* nodes one CLUSTER NODES may list */

/* The pause between two checks of a condition polled with a deadline. */
static void nap(int ms)
{
	struct timespec ts = { 0, (long)ms * 1000000L };
	nanosleep(&ts, NULL);
}

redisReply *th_cluster_cmd(struct th_cluster *c, int i, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	redisReply *rep = th__vcmd_quiet(c->node[i].port, c->user, c->pass, 5000, fmt, ap);
	va_end(ap);
	if (!rep)
		fprintf(stderr, "th_cluster: node %d (port %d): \"%s\" failed\n", i, c->node[i].port, fmt);
	return rep;
}

redisReply *th_cluster_cmd_argv(struct th_cluster *c, int i, int argc, const char **argv,
                                const size_t *argvlen)
{
	redisContext *ctx = th__connect_quiet(c->node[i].port, c->user, c->pass, 5000);
	redisReply *rep = ctx ? redisCommandArgv(ctx, argc, argv, argvlen) : NULL;
	if (!rep)
		fprintf(stderr, "th_cluster: node %d (port %d): %s failed\n", i, c->node[i].port, argv[0]);
	if (ctx)
		redisFree(ctx);
	return rep;
}

/* Quiet: for polling nodes that may be down. */
static redisReply *qcmd(struct th_cluster *c, int i, const char *fmt, ...)
{
	if (c->node[i].pid <= 0)
		return NULL;
	va_list ap;
	va_start(ap, fmt);
	redisReply *rep = th__vcmd_quiet(c->node[i].port, c->user, c->pass, 2000, fmt, ap);
	va_end(ap);
	return rep;
}

static int first_running(const struct th_cluster *c)
{
	for (int i = 0; i < TH_CLUSTER_NODES; i++)
		if (c->node[i].pid > 0)
			return i;
	return -1;
}

static int index_of_id(const struct th_cluster *c, const char *id)
{
	for (int i = 0; i < TH_CLUSTER_NODES; i++)
		if (c->id[i][0] && strcmp(c->id[i], id) == 0)
			return i;
	return -1;
}

/* ------------------------------------------------------------------ */
/* one node's view: CLUSTER NODES                                      */
/* ------------------------------------------------------------------ */

struct listed {
	int node;          /* our index, -1 if not one of ours */
	int master, fail;  /* flags: master; fail or fail? / handshake / noaddr */
	int master_of;     /* a replica's master (our index), -1 */
};

struct view {
	int self;                          /* index of the node that answered */
	int nlisted;
	struct listed l[MAX_LISTED];
	int pending;                       /* myself shows [slot->-id] or [slot-<-id] */
	signed char owner[TH_CLUSTER_SLOTS]; /* our index, -1 unowned */
};

static const struct listed *listed_node(const struct view *v, int node)
{
	for (int i = 0; i < v->nlisted; i++)
		if (v->l[i].node == node)
			return &v->l[i];
	return NULL;
}

static int has_flag(const char *flags, const char *f)
{
	size_t n = strlen(f);
	for (const char *p = flags; p && *p;) {
		if (strncmp(p, f, n) == 0 && (p[n] == ',' || p[n] == '\0'))
			return 1;
		p = strchr(p, ',');
		if (p)
			p++;
	}
	return 0;
}

/* Parse one line; 0, or -1 if malformed. */
static int parse_line(struct th_cluster *c, struct view *v, char *line)
{
	char *save = NULL, *f[8];
	for (int i = 0; i < 8; i++) {
		f[i] = strtok_r(i ? NULL : line, " ", &save);
		if (!f[i])
			return -1;
	}
	if (v->nlisted >= MAX_LISTED)
		return -1;
	struct listed *l = &v->l[v->nlisted++];
	l->node = index_of_id(c, f[0]);
	l->master = has_flag(f[2], "master");
	l->fail = has_flag(f[2], "fail") || has_flag(f[2], "fail?") || has_flag(f[2], "handshake") ||
	          has_flag(f[2], "noaddr");
	l->master_of = strcmp(f[3], "-") == 0 ? -1 : index_of_id(c, f[3]);
	int self = has_flag(f[2], "myself");
	if (self)
		v->self = l->node;
	for (char *s; (s = strtok_r(NULL, " ", &save)) != NULL;) {
		if (s[0] == '[') {
			if (self)
				v->pending = 1;
			continue;
		}
		char *dash = strchr(s, '-');
		long a = strtol(s, NULL, 10), b = dash ? strtol(dash + 1, NULL, 10) : a;
		if (a < 0 || b >= TH_CLUSTER_SLOTS || a > b)
			return -1;
		for (long k = a; k <= b; k++)
			v->owner[k] = (signed char)l->node;
	}
	return 0;
}

/* Node i's view (malloc'd), or NULL. */
static struct view *get_view(struct th_cluster *c, int i)
{
	redisReply *r = qcmd(c, i, "CLUSTER NODES");
	if (!th__str(r)) {
		if (r)
			freeReplyObject(r);
		return NULL;
	}
	struct view *v = calloc(1, sizeof *v);
	if (!v) {
		freeReplyObject(r);
		return NULL;
	}
	v->self = -1;
	memset(v->owner, -1, sizeof v->owner);
	char *save = NULL;
	for (char *line = strtok_r(r->str, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (parse_line(c, v, line) != 0) {
			free(v);
			v = NULL;
			break;
		}
	}
	freeReplyObject(r);
	return v;
}

/* ------------------------------------------------------------------ */
/* settled                                                             */
/* ------------------------------------------------------------------ */

static int info_ok(struct th_cluster *c, int i, char *why, size_t whylen)
{
	char state[32], slots[32];
	redisReply *r = qcmd(c, i, "CLUSTER INFO");
	int ok = th__str(r) &&
	         strcmp(th__info_field(r->str, "cluster_state", state, sizeof state), "ok") == 0 &&
	         atoi(th__info_field(r->str, "cluster_slots_ok", slots, sizeof slots)) == TH_CLUSTER_SLOTS;
	if (!ok)
		snprintf(why, whylen, "node %d: cluster_state %s, slots ok %s", i,
		         th__str(r) ? state : "?", th__str(r) ? slots : "?");
	if (r)
		freeReplyObject(r);
	return ok;
}

static int link_up(struct th_cluster *c, int i)
{
	char v[16];
	redisReply *r = qcmd(c, i, "INFO replication");
	int ok = th__str(r) && strcmp(th__info_field(r->str, "master_link_status", v, sizeof v), "up") == 0;
	if (r)
		freeReplyObject(r);
	return ok;
}

/* Does view v agree with the reference on everything settled requires? */
static int same_view(const struct th_cluster *c, const struct view *ref, const struct view *v,
                     int who, char *why, size_t whylen)
{
	if (memcmp(ref->owner, v->owner, sizeof v->owner) != 0) {
		snprintf(why, whylen, "node %d: another slot map than node %d", who, ref->self);
		return 0;
	}
	for (int k = 0; k < TH_CLUSTER_NODES; k++) {
		if (c->node[k].pid <= 0)
			continue;
		const struct listed *a = listed_node(ref, k), *b = listed_node(v, k);
		if (!a || !b || b->fail || a->master != b->master || a->master_of != b->master_of) {
			snprintf(why, whylen, "node %d: sees node %d %s", who, k,
			         !b ? "not at all" : b->fail ? "failing" : "in another role");
			return 0;
		}
	}
	return 1;
}

static int settled(struct th_cluster *c, char *why, size_t whylen)
{
	struct view *ref = NULL;
	int ok = 1;
	for (int i = 0; ok && i < TH_CLUSTER_NODES; i++) {
		if (c->node[i].pid <= 0)
			continue;
		if (!info_ok(c, i, why, whylen)) {
			ok = 0;
			break;
		}
		struct view *v = get_view(c, i);
		if (!v || v->self != i || v->pending) {
			snprintf(why, whylen, "node %d: %s", i,
			         v && v->pending ? "a slot is importing/migrating" : "no CLUSTER NODES");
			free(v);
			ok = 0;
			break;
		}
		if (!ref) {
			ref = v;
			continue;
		}
		ok = same_view(c, ref, v, i, why, whylen);
		free(v);
	}
	if (ok && !ref) {
		snprintf(why, whylen, "no node running");
		ok = 0;
	}
	for (int s = 0; ok && s < TH_CLUSTER_SLOTS; s++) {
		const struct listed *o = ref->owner[s] >= 0 ? listed_node(ref, ref->owner[s]) : NULL;
		if (!o || !o->master || c->node[o->node].pid <= 0) {
			snprintf(why, whylen, "slot %d: no running master owns it", s);
			ok = 0;
		}
	}
	for (int k = 0; ok && k < TH_CLUSTER_NODES; k++) {
		const struct listed *l = listed_node(ref, k);
		if (c->node[k].pid > 0 && l && !l->master && !link_up(c, k)) {
			snprintf(why, whylen, "node %d: replication link down", k);
			ok = 0;
		}
	}
	free(ref);
	return ok;
}

int th_cluster_wait_ok(struct th_cluster *c, int timeout_ms)
{
	char why[256] = "";
	long long deadline = th_now_ms() + timeout_ms;
	for (;;) {
		if (settled(c, why, sizeof why))
			return 0;
		if (th_now_ms() >= deadline)
			break;
		nap(POLL_MS);
	}
	fprintf(stderr, "th_cluster_wait_ok: not settled after %d ms: %s\n", timeout_ms, why);
	return -1;
}

/* ------------------------------------------------------------------ */
/* lookups                                                             */
/* ------------------------------------------------------------------ */

int th_cluster_keyslot(struct th_cluster *c, const char *key, size_t len)
{
	int i = first_running(c);
	if (i < 0)
		return -1;
	const char *argv[] = { "CLUSTER", "KEYSLOT", key };
	size_t lens[] = { 7, 7, len };
	redisReply *r = th_cluster_cmd_argv(c, i, 3, argv, lens);
	int slot = r && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
	if (r)
		freeReplyObject(r);
	return slot;
}

int th_cluster_slot_owner(struct th_cluster *c, int slot)
{
	int i = first_running(c);
	if (i < 0 || slot < 0 || slot >= TH_CLUSTER_SLOTS)
		return -1;
	struct view *v = get_view(c, i);
	int o = v ? v->owner[slot] : -1;
	free(v);
	return o;
}

int th_cluster_master_of(struct th_cluster *c, int i)
{
	struct view *v = get_view(c, i);
	const struct listed *l = v ? listed_node(v, i) : NULL;
	int m = !l ? -1 : l->master ? i : l->master_of;
	free(v);
	return m;
}

int th_cluster_replica_of(struct th_cluster *c, int m)
{
	struct view *v = get_view(c, m);
	int r = -1;
	for (int k = 0; v && k < v->nlisted && r < 0; k++)
		if (!v->l[k].master && v->l[k].master_of == m && v->l[k].node >= 0 &&
		    c->node[v->l[k].node].pid > 0)
			r = v->l[k].node;
	free(v);
	return r;
}

/* ------------------------------------------------------------------ */
/* slot migration                                                      */
/* ------------------------------------------------------------------ */

static int expect_ok(redisReply *r, int node, const char *what)
{
	int ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
	if (!ok)
		fprintf(stderr, "th_cluster: node %d: %s: %s\n", node, what,
		        r && r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
	if (r)
		freeReplyObject(r);
	return ok ? 0 : -1;
}

int th_cluster_migrate_begin(struct th_cluster *c, int slot, int to, struct th_migration *m)
{
	memset(m, 0, sizeof *m);
	m->slot = slot;
	m->to = to;
	m->from = th_cluster_slot_owner(c, slot);
	if (m->from < 0 || to < 0 || to >= TH_CLUSTER_NODES || to == m->from ||
	    th_cluster_master_of(c, to) != to) {
		fprintf(stderr, "th_cluster_migrate_begin: slot %d owned by %d, target %d is not another"
		        " master\n", slot, m->from, to);
		return -1;
	}
	/* importing first: the moment `from` starts answering ASK, `to` must
	 * accept the ASKING requests */
	if (expect_ok(th_cluster_cmd(c, to, "CLUSTER SETSLOT %d IMPORTING %s", slot, c->id[m->from]),
	              to, "SETSLOT IMPORTING") != 0 ||
	    expect_ok(th_cluster_cmd(c, m->from, "CLUSTER SETSLOT %d MIGRATING %s", slot, c->id[to]),
	              m->from, "SETSLOT MIGRATING") != 0)
		return -1;
	return 0;
}

int th_cluster_migrate_keys(struct th_cluster *c, struct th_migration *m, int batch)
{
	if (batch <= 0)
		batch = 10;
	redisReply *keys = th_cluster_cmd(c, m->from, "CLUSTER GETKEYSINSLOT %d %d", m->slot, batch);
	if (!keys || keys->type != REDIS_REPLY_ARRAY) {
		fprintf(stderr, "th_cluster_migrate_keys: GETKEYSINSLOT: %s\n",
		        keys && keys->type == REDIS_REPLY_ERROR ? keys->str : "unexpected reply");
		if (keys)
			freeReplyObject(keys);
		return -1;
	}
	int n = (int)keys->elements;
	if (n == 0) {
		freeReplyObject(keys);
		return 0;
	}
	/* MIGRATE host port "" 0 timeout [AUTH pw | AUTH2 user pw] KEYS k... */
	const char **argv = calloc((size_t)n + 10, sizeof *argv);
	size_t *lens = calloc((size_t)n + 10, sizeof *lens);
	char port[16];
	snprintf(port, sizeof port, "%d", c->node[m->to].port);
	int argc = 0;
	if (argv && lens) {
		argv[argc++] = "MIGRATE";
		argv[argc++] = "127.0.0.1";
		argv[argc++] = port;
		argv[argc++] = "";
		argv[argc++] = "0";
		argv[argc++] = "5000";
		if (c->user[0]) {
			argv[argc++] = "AUTH2";
			argv[argc++] = c->user;
			argv[argc++] = c->pass;
		} else if (c->pass[0]) {
			argv[argc++] = "AUTH";
			argv[argc++] = c->pass;
		}
		argv[argc++] = "KEYS";
		for (int k = 0; k < argc; k++)
			lens[k] = strlen(argv[k]);
		for (int k = 0; k < n; k++) {
			argv[argc] = keys->element[k]->str;
			lens[argc++] = keys->element[k]->len;
		}
	}
	redisReply *r = argv && lens ? th_cluster_cmd_argv(c, m->from, argc, argv, lens) : NULL;
	int ok = r && r->type == REDIS_REPLY_STATUS &&
	         (strcmp(r->str, "OK") == 0 || strcmp(r->str, "NOKEY") == 0);
	if (!ok)
		fprintf(stderr, "th_cluster_migrate_keys: MIGRATE: %s\n",
		        r && r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
	if (r)
		freeReplyObject(r);
	free(argv);
	free(lens);
	freeReplyObject(keys);
	if (!ok)
		return -1;
	m->moved += n;
	return n;
}

/* settled, and `to` owns the slot */
static int migrated(struct th_cluster *c, const struct th_migration *m, char *why, size_t len)
{
	if (!settled(c, why, len))
		return 0;
	if (th_cluster_slot_owner(c, m->slot) != m->to) {
		snprintf(why, len, "slot %d not owned by node %d yet", m->slot, m->to);
		return 0;
	}
	return 1;
}

int th_cluster_migrate_end(struct th_cluster *c, struct th_migration *m, int timeout_ms)
{
	long long deadline = th_now_ms() + timeout_ms;
	int n;
	while ((n = th_cluster_migrate_keys(c, m, 100)) > 0)
		;
	if (n < 0)
		return -1;
	/* the target first: its epoch bump makes its claim win everywhere */
	if (expect_ok(th_cluster_cmd(c, m->to, "CLUSTER SETSLOT %d NODE %s", m->slot, c->id[m->to]),
	              m->to, "SETSLOT NODE") != 0 ||
	    expect_ok(th_cluster_cmd(c, m->from, "CLUSTER SETSLOT %d NODE %s", m->slot, c->id[m->to]),
	              m->from, "SETSLOT NODE") != 0)
		return -1;
	for (int i = 0; i < TH_CLUSTER_NODES; i++) {
		if (i == m->to || i == m->from || c->node[i].pid <= 0 || th_cluster_master_of(c, i) != i)
			continue;
		/* other masters would learn it by gossip; telling them is faster */
		if (expect_ok(th_cluster_cmd(c, i, "CLUSTER SETSLOT %d NODE %s", m->slot, c->id[m->to]),
		              i, "SETSLOT NODE") != 0)
			return -1;
	}
	char why[256] = "";
	for (;;) {
		if (migrated(c, m, why, sizeof why))
			return 0;
		if (th_now_ms() >= deadline)
			break;
		nap(POLL_MS);
	}
	fprintf(stderr, "th_cluster_migrate_end: not settled after %d ms: %s\n", timeout_ms, why);
	return -1;
}

int th_cluster_migrate_slot(struct th_cluster *c, int slot, int to, int batch,
                            int (*hook)(void *arg, int phase, const struct th_migration *m),
                            void *arg, int timeout_ms)
{
	struct th_migration m;
	if (th_cluster_migrate_begin(c, slot, to, &m) != 0)
		return -1;
	if (hook && hook(arg, TH_MIGRATE_STARTED, &m) != 0)
		return -1;
	int n;
	while ((n = th_cluster_migrate_keys(c, &m, batch)) > 0)
		;
	if (n < 0)
		return -1;
	if (hook && hook(arg, TH_MIGRATE_KEYS_MOVED, &m) != 0)
		return -1;
	return th_cluster_migrate_end(c, &m, timeout_ms);
}

/* ------------------------------------------------------------------ */
/* failover                                                            */
/* ------------------------------------------------------------------ */

/* settled, and `r` owns what `m` owned */
struct promoted { int m, r; signed char before[TH_CLUSTER_SLOTS]; };

static int failed_over(struct th_cluster *c, const struct promoted *p, char *why, size_t len)
{
	if (!settled(c, why, len))
		return 0;
	struct view *v = get_view(c, p->r);
	int ok = v != NULL;
	for (int s = 0; ok && s < TH_CLUSTER_SLOTS; s++)
		if (p->before[s] == p->m && v->owner[s] != p->r) {
			snprintf(why, len, "slot %d not owned by node %d yet", s, p->r);
			ok = 0;
		}
	free(v);
	return ok;
}

int th_cluster_failover(struct th_cluster *c, int m, int how, int timeout_ms)
{
	long long deadline = th_now_ms() + timeout_ms;
	struct promoted *p = calloc(1, sizeof *p);
	struct view *v = p ? get_view(c, m) : NULL;
	int r = th_cluster_replica_of(c, m);
	if (!v || r < 0 || th_cluster_master_of(c, m) != m ||
	    (how != TH_FAILOVER_MANUAL && how != TH_FAILOVER_KILL)) {
		fprintf(stderr, "th_cluster_failover: node %d is not a master with a running replica"
		        " (or bad mode %d)\n", m, how);
		free(p);
		free(v);
		return -1;
	}
	p->m = m;
	p->r = r;
	memcpy(p->before, v->owner, sizeof p->before);
	free(v);
	int rc = how == TH_FAILOVER_KILL ? th_redis_kill(&c->node[m])
	                                 : expect_ok(th_cluster_cmd(c, r, "CLUSTER FAILOVER"), r,
	                                             "CLUSTER FAILOVER");
	char why[256] = "";
	while (rc == 0) {
		if (failed_over(c, p, why, sizeof why))
			break;
		if (th_now_ms() >= deadline) {
			fprintf(stderr, "th_cluster_failover: not settled after %d ms: %s\n", timeout_ms, why);
			rc = -1;
			break;
		}
		nap(POLL_MS);
	}
	free(p);
	return rc == 0 ? r : -1;
}

/* ------------------------------------------------------------------ */
/* start, stop                                                         */
/* ------------------------------------------------------------------ */

void th_cluster_stop(struct th_cluster *c)
{
	if (!c)
		return;
	for (int i = 0; i < TH_CLUSTER_NODES; i++)
		th_redis_stop(&c->node[i]);
}

static int copy_opt(char *dst, size_t len, const char *src, const char *what)
{
	dst[0] = '\0';
	if (!src)
		return 0;
	if (!src[0] || strlen(src) >= len || strpbrk(src, " \t\r\n\"'\\")) {
		fprintf(stderr, "th_cluster_start: bad %s\n", what);
		return -1;
	}
	snprintf(dst, len, "%s", src);
	return 0;
}

static int create(struct th_cluster *c, long long deadline)
{
	char addr[TH_CLUSTER_NODES][32], log[512], auth[128];
	const char *argv[TH_CLUSTER_NODES + 12];
	int argc = 0;
	argv[argc++] = "redis-cli";
	argv[argc++] = "--no-auth-warning";
	if (c->user[0]) {
		argv[argc++] = "--user";
		argv[argc++] = c->user;
	}
	argv[argc++] = "--cluster";
	argv[argc++] = "create";
	for (int i = 0; i < TH_CLUSTER_NODES; i++) {
		snprintf(addr[i], sizeof addr[i], "127.0.0.1:%d", c->node[i].port);
		argv[argc++] = addr[i];
	}
	argv[argc++] = "--cluster-replicas";
	argv[argc++] = "1";
	argv[argc++] = "--cluster-yes";
	argv[argc] = NULL;
	snprintf(auth, sizeof auth, "REDISCLI_AUTH=%s", c->pass);
	const char *env[] = { auth, NULL };
	snprintf(log, sizeof log, "%s/cli.log", c->node[0].dir);
	long long left = deadline - th_now_ms();
	int rc = th_run(argv, c->pass[0] ? env : NULL, log,
	                left < CLI_TIMEOUT_MS ? (int)(left > 0 ? left : 1) : CLI_TIMEOUT_MS);
	if (rc != 0) {
		fprintf(stderr, "th_cluster_start: redis-cli --cluster create: %s %d\n",
		        rc < 0 ? "timeout or error" : "exit status", rc);
		FILE *f = fopen(log, "re");
		char line[512];
		while (f && fgets(line, sizeof line, f))
			fputs(line, stderr);
		if (f)
			fclose(f);
		return -1;
	}
	return 0;
}

int th_cluster_start(struct th_cluster *c, const struct th_cluster_opts *o, int timeout_ms)
{
	static const struct th_cluster_opts none;
	if (!o)
		o = &none;
	memset(c, 0, sizeof *c);
	if (timeout_ms <= 0)
		timeout_ms = DEFAULT_START_MS;
	long long deadline = th_now_ms() + timeout_ms;
	c->node_timeout_ms = o->node_timeout_ms > 0 ? o->node_timeout_ms : DEFAULT_NODE_TIMEOUT_MS;
	if (copy_opt(c->user, sizeof c->user, o->user, "user") != 0 ||
	    copy_opt(c->pass, sizeof c->pass, o->pass, "pass") != 0)
		return -1;
	if (c->user[0] && !c->pass[0]) {
		fprintf(stderr, "th_cluster_start: a user needs a password\n");
		return -1;
	}
	char extra[1024];
	/* repl-diskless-sync-delay 0: replicas sync at once, not after 5 s;
	 * validity factor 0: a replica may always take over (tests kill
	 * masters while the machine is busy) */
	int n = snprintf(extra, sizeof extra,
	                 "cluster-node-timeout %d\n"
	                 "repl-diskless-sync-delay 0\n"
	                 "cluster-replica-validity-factor 0\n",
	                 c->node_timeout_ms);
	if (c->user[0])
		n += snprintf(extra + n, sizeof extra - (size_t)n,
		              "user %s on >%s ~* &* +@all\nuser default off\nmasteruser %s\n",
		              c->user, c->pass, c->user);
	else if (c->pass[0])
		n += snprintf(extra + n, sizeof extra - (size_t)n, "requirepass %s\n", c->pass);
	if (c->pass[0])
		n += snprintf(extra + n, sizeof extra - (size_t)n, "masterauth %s\n", c->pass);
	if (o->extra)
		n += snprintf(extra + n, sizeof extra - (size_t)n, "%s\n", o->extra);
	if (n >= (int)sizeof extra) {
		fprintf(stderr, "th_cluster_start: config too long\n");
		return -1;
	}
	n = snprintf(c->url, sizeof c->url, "redis-cluster://");
	for (int i = 0; i < TH_CLUSTER_NODES; i++) {
		if (th_redis_start_as(&c->node[i], extra, TH_REDIS_CLUSTER) != 0)
			goto fail;
		redisReply *r = th_cluster_cmd(c, i, "CLUSTER MYID");
		if (!th__str(r) || strlen(r->str) != 40) {
			fprintf(stderr, "th_cluster_start: node %d: no CLUSTER MYID\n", i);
			if (r)
				freeReplyObject(r);
			goto fail;
		}
		memcpy(c->id[i], r->str, 41);
		freeReplyObject(r);
		n += snprintf(c->url + n, sizeof c->url - (size_t)n, "%s127.0.0.1:%d", i ? "," : "",
		              c->node[i].port);
	}
	/* The command timeout of every harness URL (harness_url.c). */
	n += snprintf(c->url + n, sizeof c->url - (size_t)n, "?command_timeout_ms=%d",
	              th_command_timeout_ms());
	if (create(c, deadline) != 0)
		goto fail;
	long long left = deadline - th_now_ms();
	if (th_cluster_wait_ok(c, left > 0 ? (int)left : 0) != 0)
		goto fail;
	return 0;
fail:
	fprintf(stderr, "th_cluster_start: failed\n");
	th_cluster_stop(c);
	return -1;
}
