#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/net/dial.h"
#include "base/base.h"
#include "base/log.h"
#include "node.h"
#include "backend/redis/scripts/scripts.h"
#include "backend/net/secret.h"
#include "backend/net/tls.h"

static void
free_password(char *p)
{
	if (p) {
		/* Do not leave it lying in freed heap memory. */
		explicit_bzero(p, strlen(p));
		free(p);
	}
}

static void
init_back(struct dmutex__node *n)
{
	dmutex__cond_init_mono(&n->back);
}

int
dmutex__node_init(struct dmutex__node *n, const struct dmutex__node_addr *addr,
		unsigned connect_ms, unsigned command_ms)
{
	int err;

	memset(n, 0, sizeof *n);
	n->addr = addr;
	n->connect_ms = connect_ms;
	n->command_ms = command_ms;
	if (addr->cluster) {
		/* A cluster's template address: src/backend/redis/cluster.c, not a node. */
		dmutex__log(DMUTEX_LOG_ERROR, "%s: a cluster URL where one node was expected",
				addr->display);
		return EINVAL;
	}
	/* Read now, so that a wrong path shows at open, and once. */
	if (addr->password_file &&
			(err = dmutex__secret_read(addr->display, addr->password_file, &n->password)))
		return err;
	if (addr->tls && (err = dmutex__tls_ctx_new(addr, &n->tls)))
		goto fail;
	pthread_mutex_init(&n->mu, NULL);
	init_back(n);
	return 0;
fail:
	free_password(n->password);
	n->password = NULL;
	return err;
}

void
dmutex__node_fini(struct dmutex__node *n)
{
	/* First: a sentinel's watch thread drops this node's idle connections. */
	if (n->loc)
		n->loc->ops->free(n->loc);
	n->loc = NULL;
	/* Asynchronous releases still owed an answer: read them (one command
	 * timeout for all), so that the socket closes with nothing unread. */
	int64_t until = dmutex__now_ns() + (int64_t)n->command_ms * DMUTEX__MS;
	for (int i = 0; i < n->nidle; i++) {
		dmutex__conn_settle(n->idle[i], until);
		dmutex__conn_free(n->idle[i]);
	}
	n->nidle = 0;
	free_password(n->password);
	n->password = NULL;
	dmutex__tls_ctx_free(n->tls);
	n->tls = NULL;
	pthread_mutex_destroy(&n->mu);
	pthread_cond_destroy(&n->back);
}

void
dmutex__node_atfork_child(struct dmutex__node *n)
{
	/* The parent still uses these sockets: close our copies, say nothing
	 * (over TLS: nothing written, not even a close_notify; the session
	 * state stays the parent's, the context is kept for new ones). */
	for (int i = 0; i < n->nidle; i++) {
		n->idle[i]->abandoned = 1;
		dmutex__conn_free(n->idle[i]);
	}
	n->nidle = 0;
	pthread_mutex_init(&n->mu, NULL);
	init_back(n);
	if (n->loc)
		n->loc->ops->atfork_child(n->loc);
}

/* Log once per outage, not once per attempt. */
static void
note_down(struct dmutex__node *n, const char *what, const char *why)
{
	int first;
	pthread_mutex_lock(&n->mu);
	first = !n->down_logged;
	n->down_logged = 1;
	snprintf(n->last_err, sizeof n->last_err, "%s: %s", what, why);
	pthread_mutex_unlock(&n->mu);
	dmutex__log(first ? DMUTEX_LOG_WARN : DMUTEX_LOG_DEBUG, "%s: %s: %s",
			n->addr->display, what, why);
}

/* A call of c that failed: an outage, or a reply not in by the caller's
 * own deadline, well inside the command timeout (a timed lock's try; a
 * trylock's deadline is a command timeout from its start): the caller's
 * to report (ETIMEDOUT), a line at info, no outage noted. */
static void
note_failed(struct dmutex__node *n, const struct dmutex__conn *c, int script, int64_t deadline,
		int64_t own)
{
	if (deadline < own - (int64_t)c->command_ms * DMUTEX__MS / 2 && dmutex__now_ns() >= deadline) {
		dmutex__log(DMUTEX_LOG_INFO, "%s: %s: no reply by the caller's deadline",
				n->addr->display, dmutex__script_name(script));
		return;
	}
	note_down(n, dmutex__script_name(script), c->errstr);
}

/*
 * One connection set-up, run on a dial thread.  It holds its own copy of
 * the address: a caller that gave up may close the client meanwhile.
 */
struct connect_job {
	struct dmutex__node_addr a;     /* password: the node's, from its file too */
	struct ssl_ctx_st *tls;         /* a reference of the job's own */
	int64_t deadline;
	unsigned command_ms;
	struct dmutex__conn *c;         /* the result, or NULL */
	int refused;                    /* the server said no (AUTH, SELECT) */
	int check_role;                 /* redis-sentinel://: ROLE must say master */
	int not_master;                 /* it did not */
	char what[32];
	char why[200];
};

static void
job_free(void *p)
{
	struct connect_job *j = p;

	dmutex__conn_free(j->c);
	dmutex__tls_ctx_free(j->tls);
	free(j->a.host);
	free(j->a.path);
	free(j->a.user);
	free_password(j->a.password);
	free(j->a.display);
	free(j->a.tls_server_name);
	free(j);
}

static int
dup_or_null(char **to, const char *from)
{
	*to = NULL;
	return from && !(*to = strdup(from)) ? -1 : 0;
}

static struct connect_job *
job_new(const struct dmutex__node *n, int64_t deadline, const char *host, int port)
{
	const struct dmutex__node_addr *a = n->addr;
	struct connect_job *j = calloc(1, sizeof *j);

	if (!j)
		return NULL;
	j->a = *a;
	/* The files were read by node_init: the job needs none of their names. */
	j->a.password_file = j->a.tls_ca = j->a.tls_cert = j->a.tls_key = NULL;
	j->deadline = deadline;
	j->command_ms = n->command_ms;
	/* redis-sentinel://: the master the sentinels named. */
	if (host) {
		j->a.port = port;
		j->check_role = 1;
	}
	if (dup_or_null(&j->a.host, host ? host : a->host) | dup_or_null(&j->a.path, a->path) |
			dup_or_null(&j->a.user, a->user) |
			dup_or_null(&j->a.password, n->password ? n->password : a->password) |
			dup_or_null(&j->a.display, a->display) |
			dup_or_null(&j->a.tls_server_name, a->tls_server_name)) {
		job_free(j);
		return NULL;
	}
	dmutex__tls_ctx_ref(n->tls);
	j->tls = n->tls;
	return j;
}

static int
fail(struct connect_job *j, int refused, const char *what, const char *why)
{
	j->refused = refused;
	snprintf(j->what, sizeof j->what, "%s", what);
	snprintf(j->why, sizeof j->why, "%s", why);
	return -1;
}

/* A command that got no reply.  Over TLS the server judges our
 * certificate after our side of the handshake is done (TLS 1.3): its
 * refusal arrives as an alert at the first read. */
static int
no_reply(struct connect_job *j, const char *what)
{
	/* conn.c's "TLS: " would say it twice. */
	if (j->c->tls_refused)
		return fail(j, 1, "TLS handshake failed", j->c->errstr +
				(strncmp(j->c->errstr, "TLS: ", 5) ? 0 : 5));
	return fail(j, 0, what, j->c->errstr);
}

static int
handshake(struct connect_job *j)
{
	const struct dmutex__node_addr *a = &j->a;
	struct dmutex__conn *c = j->c;
	redisReply *r;
	int rc = 0;

	if (a->password) {
		/* Zeroed in our buffer once sent (conn.h says what remains). */
		const char *auth[] = { "AUTH", a->user ? a->user : a->password, a->password };
		r = dmutex__conn_command_secret(c, j->deadline, a->user ? 3 : 2, auth);
		if (!r)
			return no_reply(j, "AUTH");
		/* Redis's message names no password; ours neither. */
		if (r->type == REDIS_REPLY_ERROR)
			rc = fail(j, 1, "authentication failed", r->str);
		freeReplyObject(r);
		if (rc)
			return rc;
	}
	if (a->db) {
		r = dmutex__conn_command(c, j->deadline, "SELECT %d", a->db);
		if (!r)
			return no_reply(j, "SELECT");
		if (r->type == REDIS_REPLY_ERROR) {
			char what[32];
			snprintf(what, sizeof what, "SELECT %d failed", a->db);
			rc = fail(j, 1, what, r->str);
		}
		freeReplyObject(r);
		if (rc)
			return rc;
	}
	/* The sentinels may lag, or a demoted master come back: only the
	 * server knows it is the master. */
	if (j->check_role) {
		if (!(r = dmutex__conn_command(c, j->deadline, "ROLE")))
			return no_reply(j, "ROLE");
		if (r->type == REDIS_REPLY_ERROR)
			rc = fail(j, !dmutex__node_transient(r), "ROLE failed", r->str);
		else if (r->type != REDIS_REPLY_ARRAY || !r->elements
				|| r->element[0]->type != REDIS_REPLY_STRING
				|| strcmp(r->element[0]->str, "master")) {
			j->not_master = 1;
			rc = fail(j, 0, "not the master", r->type == REDIS_REPLY_ARRAY && r->elements
					&& r->element[0]->type == REDIS_REPLY_STRING
					? r->element[0]->str : "unexpected reply to ROLE");
		}
		freeReplyObject(r);
		if (rc)
			return rc;
	}
	/* Over TLS, a PING within the connect timeout: the server's verdict
	 * on our certificate comes back as its answer (see no_reply). */
	if (c->ssl) {
		if (!(r = dmutex__conn_command(c, j->deadline, "PING")))
			return no_reply(j, "PING");
		if (r->type == REDIS_REPLY_ERROR)
			rc = fail(j, !dmutex__node_transient(r), "PING failed", r->str);
		freeReplyObject(r);
	}
	return rc;
}

static void
connect_main(void *p)
{
	struct connect_job *j = p;
	char why[160];
	int refused;

	if (!(j->c = dmutex__conn_dial(&j->a, j->tls, j->deadline, why, sizeof why, &refused))) {
		fail(j, refused, refused ? "TLS handshake failed" : "cannot connect", why);
		return;
	}
	j->c->command_ms = j->command_ms;
	if (handshake(j)) {
		dmutex__conn_free(j->c);
		j->c = NULL;
	}
}

struct dmutex__conn *
dmutex__node_connect(struct dmutex__node *n)
{
	return dmutex__node_connect_timeout(n, n->connect_ms);
}

struct dmutex__conn *
dmutex__node_connect_timeout(struct dmutex__node *n, unsigned timeout_ms)
{
	const struct dmutex__node_addr *a = n->addr;
	int64_t deadline = dmutex__now_ns() + (int64_t)timeout_ms * DMUTEX__MS;
	struct dmutex__conn *c;
	struct connect_job *j;
	char host[256], why[200];
	unsigned gen = 0;
	int err, port = 0;

	/* The timeout bounds the sentinels' answer too. */
	if (n->loc && n->loc->ops->locate(n->loc, deadline, host, sizeof host, &port,
			&gen, why, sizeof why)) {
		note_down(n, "cannot find the master", why);
		return NULL;
	}
	/* The timeout bounds DNS, TCP and the handshake together: the dial
	 * thread stops at the deadline and we stop waiting for it then. */
	if (!(j = job_new(n, deadline, n->loc ? host : NULL, port))) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: out of memory connecting", a->display);
		return NULL;
	}
	if ((err = dmutex__dial_run(connect_main, job_free, j, deadline))) {
		if (err == ETIMEDOUT) {
			if (n->loc)
				n->loc->ops->stale(n->loc, gen);
			char why[48];
			snprintf(why, sizeof why, "timed out after %u ms", timeout_ms);
			note_down(n, "cannot connect", why);
		} else {
			dmutex__log(DMUTEX_LOG_ERROR, "%s: cannot start a connecting thread: %s",
					a->display, strerror(err));
			job_free(j);
		}
		return NULL;
	}
	if (!j->c) {
		/* The sentinels may know better now. */
		if (n->loc && !j->refused)
			n->loc->ops->stale(n->loc, gen);
		if (j->refused)
			dmutex__log(DMUTEX_LOG_ERROR, "%s: %s: %s", a->display, j->what, j->why);
		else
			note_down(n, j->what, j->why);
		job_free(j);
		return NULL;
	}
	c = j->c;
	c->gen = gen;
	j->c = NULL;
	job_free(j);
	pthread_mutex_lock(&n->mu);
	/* 2: quiet while the client opens (client.c verify). */
	if (n->down_logged == 1)
		dmutex__log(DMUTEX_LOG_INFO, "%s: reachable again", a->display);
	n->down_logged = 0;
	pthread_mutex_unlock(&n->mu);
	return c;
}

struct dmutex__conn *
dmutex__node_pooled(struct dmutex__node *n)
{
	struct dmutex__conn *c;

	/* A connection the server closed while it was idle (a restart, a
	 * kill) is left out, not tried: a request sent on it would count as
	 * "may have run", and a release's retry that then finds the lock not
	 * ours could not say that the hold had been lost (the restart lost
	 * it).  Told by the close, the retry's "not ours" is a loss. */
	for (;;) {
		c = NULL;
		pthread_mutex_lock(&n->mu);
		if (n->nidle)
			c = n->idle[--n->nidle];
		pthread_mutex_unlock(&n->mu);
		if (!c || !dmutex__conn_closed(c))
			return c;
		dmutex__log(DMUTEX_LOG_DEBUG, "%s: a pooled connection was closed by the server: "
				"not used", n->addr->display);
		dmutex__conn_free(c);
	}
}

struct dmutex__conn *
dmutex__node_get(struct dmutex__node *n)
{
	struct dmutex__conn *c = dmutex__node_pooled(n);
	return c ? c : dmutex__node_connect(n);
}

struct dmutex__conn *
dmutex__node_get_by(struct dmutex__node *n, int64_t deadline)
{
	struct dmutex__conn *c = dmutex__node_pooled(n);
	int64_t left = deadline - dmutex__now_ns();
	unsigned ms = n->connect_ms;

	if (c)
		return c;
	if (left <= 0)
		return NULL;
	if (left / DMUTEX__MS < (int64_t)ms)
		ms = (unsigned)(left / DMUTEX__MS) + 1;
	return dmutex__node_connect_timeout(n, ms);
}

void
dmutex__node_drop_idle(struct dmutex__node *n)
{
	struct dmutex__conn *idle[DMUTEX__POOL_MAX];
	int k;

	pthread_mutex_lock(&n->mu);
	k = n->nidle;
	memcpy(idle, n->idle, sizeof idle);
	n->nidle = 0;
	pthread_mutex_unlock(&n->mu);
	for (int i = 0; i < k; i++)
		dmutex__conn_free(idle[i]);
}

static redisReply *
call_until(struct dmutex__node *n, int script, int nkeys, int argc, const char **argv,
		int *maybe_done, int64_t deadline, int dial_counts);

redisReply *
dmutex__node_call(struct dmutex__node *n, int script, int nkeys, int argc,
		const char **argv, int *maybe_done)
{
	return call_until(n, script, nkeys, argc, argv, maybe_done,
			dmutex__now_ns() + (int64_t)n->command_ms * DMUTEX__MS, 0);
}

redisReply *
dmutex__node_call_by(struct dmutex__node *n, int script, int nkeys, int argc,
		const char **argv, int *maybe_done, int64_t deadline)
{
	return call_until(n, script, nkeys, argc, argv, maybe_done, deadline, 1);
}

redisReply *
dmutex__node_call_within(struct dmutex__node *n, int script, int nkeys, int argc,
		const char **argv, int *maybe_done, int64_t deadline)
{
	int64_t own = ((int64_t)n->connect_ms + n->command_ms) * DMUTEX__MS;

	if (!deadline || deadline - dmutex__now_ns() >= own)
		return dmutex__node_call(n, script, nkeys, argc, argv, maybe_done);
	return call_until(n, script, nkeys, argc, argv, maybe_done, deadline, 1);
}

/* A new connection whose dial ends by deadline too (connect_timeout_ms
 * still caps it); NULL when no time is left. */
static struct dmutex__conn *
dial_by(struct dmutex__node *n, int64_t deadline)
{
	int64_t left = deadline - dmutex__now_ns();
	unsigned ms = n->connect_ms;

	if (left <= 0)
		return NULL;
	if (left / DMUTEX__MS < (int64_t)ms)
		ms = (unsigned)((left + DMUTEX__MS - 1) / DMUTEX__MS);
	return dmutex__node_connect_timeout(n, ms);
}

redisReply *
dmutex__node_call_once(struct dmutex__node *n, int script, int nkeys, int argc,
		const char **argv, int *maybe_done, int64_t deadline)
{
	struct dmutex__conn *c;
	redisReply *r;

	if (n->route)
		return n->route(n, script, nkeys, argc, argv, maybe_done, deadline);
	*maybe_done = 0;
	if (!(c = dmutex__node_pooled(n)) && !(c = dial_by(n, deadline)))
		return NULL;
	r = dmutex__node_script(n, c, script, nkeys, argc, argv, NULL, maybe_done, deadline);
	dmutex__node_put(n, c);
	return r;
}

static redisReply *
call_until(struct dmutex__node *n, int script, int nkeys, int argc, const char **argv,
		int *maybe_done, int64_t deadline, int dial_counts)
{
	struct dmutex__conn *c;
	int64_t start = dmutex__now_ns(), budget = deadline - start;
	redisReply *r;
	int md = 0;

	if (n->route)
		return n->route(n, script, nkeys, argc, argv, maybe_done, deadline);
	*maybe_done = 0;
	if (budget <= 0)
		return NULL;
	c = dmutex__node_pooled(n);

	/* The deadline bounds the exchanges in total, the retry on a fresh
	 * connection included: a server that trickles its reply cannot
	 * stretch a call.  A caller's own deadline (call_by: trylock, unlock,
	 * signal, broadcast, renewals) bounds the dial as well; a plain
	 * call's dial has only connect_timeout_ms (a blocking lock's
	 * attempts, sem, barrier). */
	if (c) {
		r = dmutex__node_script(n, c, script, nkeys, argc, argv, NULL, &md, start + budget);
		if (r || !c->err) {
			*maybe_done = md;
			dmutex__node_put(n, c);
			return r;
		}
		dmutex__node_put(n, c);
		dmutex__node_drop_idle(n);
		budget -= dmutex__now_ns() - start;
		if (budget <= 0) {
			*maybe_done = md;
			return NULL;
		}
	}
	if (!(c = dial_counts ? dial_by(n, deadline) : dmutex__node_connect(n))) {
		*maybe_done = md;
		return NULL;
	}
	r = dmutex__node_script(n, c, script, nkeys, argc, argv, NULL, maybe_done,
			dial_counts ? deadline : dmutex__now_ns() + budget);
	/* The first attempt may have run: that outweighs a later "no". */
	if (md == 1)
		*maybe_done = 1;
	dmutex__node_put(n, c);
	return r;
}

void
dmutex__node_put(struct dmutex__node *n, struct dmutex__conn *c)
{
	if (!c)
		return;
	if (c->err) {
		dmutex__conn_free(c);
		return;
	}
	/* Dialled for a master the sentinels have replaced since. */
	if (n->loc && c->gen != n->loc->ops->gen(n->loc)) {
		dmutex__conn_free(c);
		return;
	}
	/* Replies still owed to a caller would be read by the next user as
	 * its own; owed ones (an asynchronous release) go to their done
	 * whoever reads them, and must be on the wire before anyone waits
	 * for them (a NOSCRIPT resend is appended while reading). */
	if (c->outlen > c->outoff && dmutex__conn_flush(c, dmutex__conn_deadline(c))) {
		dmutex__conn_free(c);
		goto out;
	}
	if (c->pending > c->nowed) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: closing a connection that owes %u replies",
				n->addr->display, c->pending - c->nowed);
		dmutex__conn_free(c);
		goto out;
	}
	pthread_mutex_lock(&n->mu);
	if (n->nidle < DMUTEX__POOL_MAX) {
		n->idle[n->nidle++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&n->mu);
	if (c) {
		/* Pool full: what it owes is read now, not lost. */
		dmutex__conn_settle(c, dmutex__conn_deadline(c));
		dmutex__conn_free(c);
	}
out:
	/* dmutex__node_take may wait for this one (rare: skip the lock). */
	if (__atomic_load_n(&n->takers, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&n->mu);
		pthread_cond_broadcast(&n->back);
		pthread_mutex_unlock(&n->mu);
	}
}

int
dmutex__node_take(struct dmutex__node *n, const struct dmutex__conn *c, int64_t deadline,
		int (*settled)(void *), void *arg, struct dmutex__conn **out)
{
	struct timespec ts;
	int rc = 0;

	*out = NULL;
	pthread_mutex_lock(&n->mu);
	for (;;) {
		if (settled(arg)) {
			rc = 1;
			break;
		}
		for (int i = 0; i < n->nidle; i++)
			if (n->idle[i] == c) {
				*out = n->idle[i];
				n->idle[i] = n->idle[--n->nidle];
				break;
			}
		if (*out)
			break;
		/* In slices: a connection freed (not pooled) between our look
		 * and our wait wakes nobody. */
		int64_t now = dmutex__now_ns(), wake = now + 10 * DMUTEX__MS;
		if (now >= deadline)
			break;
		dmutex__ns_to_ts(wake < deadline ? wake : deadline, &ts);
		__atomic_add_fetch(&n->takers, 1, __ATOMIC_ACQ_REL);
		pthread_cond_timedwait(&n->back, &n->mu, &ts);
		__atomic_sub_fetch(&n->takers, 1, __ATOMIC_ACQ_REL);
	}
	pthread_mutex_unlock(&n->mu);
	return rc || *out ? 0 : -1;
}

const struct dmutex__script *
dmutex__node_scripts(const struct dmutex__node *n)
{
	return n && n->sharded ? dmutex__scripts_sharded : dmutex__scripts;
}

/* conn.h scripts_ok has a bit per script, and one for each plain command. */
_Static_assert(DMUTEX__CMD_EXISTS < 64, "conn.h scripts_ok: one bit per script");

const char *
dmutex__script_name(int script)
{
	if (script == DMUTEX__CMD_TAKE)
		return "take";
	if (script == DMUTEX__CMD_EXISTS)
		return "exists";
	return script == DMUTEX__CMD_BLPOP ? "blpop" : dmutex__scripts[script].name;
}

static int
append_script(const struct dmutex__node *n, struct dmutex__conn *c, int script, int by_sha,
		int nkeys, int argc, const char **argv, const size_t *lens)
{
	const char *av[argc + 3];
	size_t al[argc + 3];
	char nk[16];
	int rc;

	if (script >= DMUTEX__SCRIPT_COUNT) {
		av[0] = script == DMUTEX__CMD_TAKE ? "SET" : script == DMUTEX__CMD_BLPOP ? "BLPOP" : "EXISTS";
		al[0] = strlen(av[0]);
		for (int i = 0; i < argc; i++) {
			av[i + 1] = argv[i];
			al[i + 1] = lens ? lens[i] : strlen(argv[i]);
		}
		return dmutex__conn_append_argv(c, argc + 1, av, al) ? -1 : 0;
	}
	const struct dmutex__script *s = &dmutex__node_scripts(n)[script];
	av[0] = by_sha ? "EVALSHA" : "EVAL";
	al[0] = strlen(av[0]);
	av[1] = by_sha ? s->sha : s->src;
	al[1] = strlen(av[1]);
	snprintf(nk, sizeof nk, "%d", nkeys);
	av[2] = nk;
	al[2] = strlen(nk);
	for (int i = 0; i < argc; i++) {
		av[i + 3] = argv[i];
		al[i + 3] = lens ? lens[i] : strlen(argv[i]);
	}
	rc = dmutex__conn_append_argv(c, argc + 3, av, al);
	return rc ? -1 : 0;
}

int
dmutex__node_script_append(const struct dmutex__node *n, struct dmutex__conn *c, int script,
		int by_sha, int nkeys, int argc, const char **argv, const size_t *lens)
{
	return append_script(n, c, script, by_sha, nkeys, argc, argv, lens);
}

int
dmutex__node_transient(const redisReply *r)
{
	static const char *const passing[] = {
		"LOADING", "BUSY", "MASTERDOWN", "READONLY", "TRYAGAIN", "CLUSTERDOWN",
	};

	/* The script did not run: the server is loading, running another
	 * script, or not (yet) a writable master. */
	for (size_t i = 0; i < sizeof passing / sizeof passing[0]; i++) {
		size_t n = strlen(passing[i]);
		if (r->len >= n && !memcmp(r->str, passing[i], n) && (r->len == n || r->str[n] == ' '))
			return 1;
	}
	return 0;
}

int
dmutex__node_redirect(const redisReply *r)
{
	return r->type == REDIS_REPLY_ERROR && ((r->len > 6 && !memcmp(r->str, "MOVED ", 6)) ||
			(r->len > 4 && !memcmp(r->str, "ASK ", 4)) ||
			(r->len >= 8 && !memcmp(r->str, "TRYAGAIN", 8)));
}

int
dmutex__node_noscript(const redisReply *r)
{
	return r->type == REDIS_REPLY_ERROR && r->len >= 8 && !memcmp(r->str, "NOSCRIPT", 8);
}

static redisReply *script_result(struct dmutex__node *n, int script, void *v, int *maybe_done);

redisReply *
dmutex__node_script(struct dmutex__node *n, struct dmutex__conn *c, int script,
		int nkeys, int argc, const char **argv, const size_t *lens, int *maybe_done,
		int64_t deadline)
{
	void *v = NULL;
	int64_t own = dmutex__conn_deadline(c);

	*maybe_done = 0;
	for (int by_sha = 1; by_sha >= 0; by_sha--) {
		if (append_script(n, c, script, by_sha, nkeys, argc, argv, lens)) {
			dmutex__log(DMUTEX_LOG_ERROR, "%s: cannot queue command: %s",
					n->addr->display, c->errstr);
			return NULL;
		}
		if (dmutex__conn_get(c, &v, deadline)) {
			/* Sent, but no reply: it may have run. */
			*maybe_done = 1;
			note_failed(n, c, script, deadline, own);
			return NULL;
		}
		if (!dmutex__node_noscript(v)) {
			c->scripts_ok |= 1ull << script;
			break;
		}
		/* Its server lost every script (restart, SCRIPT FLUSH). */
		c->scripts_ok = 0;
		freeReplyObject(v);
		v = NULL;
	}
	/* A master demoted under us: this connection is of no more use, and
	 * the sentinels know the new one.  Broken, so that node_call asks
	 * again on a fresh connection. */
	if (v && n->loc && ((redisReply *)v)->type == REDIS_REPLY_ERROR
			&& !strncmp(((redisReply *)v)->str, "READONLY", 8)) {
		n->loc->ops->stale(n->loc, c->gen);
		c->err = 1;
	}
	return script_result(n, script, v, maybe_done);
}

redisReply *
dmutex__node_call_asking(struct dmutex__node *n, int script, int nkeys, int argc,
		const char **argv, int *maybe_done, int64_t deadline)
{
	struct dmutex__conn *c = dmutex__node_get_by(n, deadline);
	void *ok = NULL, *v = NULL;
	int64_t own;

	*maybe_done = 0;
	if (!c)
		return NULL;
	own = dmutex__conn_deadline(c);
	/* ASKING holds for the next command only: the script goes by source,
	 * so that no NOSCRIPT calls for a second command. */
	if (dmutex__conn_appendf(c, "ASKING") ||
			append_script(n, c, script, 0, nkeys, argc, argv, NULL)) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: cannot queue command: %s", n->addr->display,
				c->errstr);
		dmutex__node_put(n, c);
		return NULL;
	}
	if (dmutex__conn_get(c, &ok, deadline) || dmutex__conn_get(c, &v, deadline)) {
		*maybe_done = 1;
		note_failed(n, c, script, deadline, own);
		if (ok)
			freeReplyObject(ok);
		dmutex__node_put(n, c);
		return NULL;
	}
	freeReplyObject(ok);
	dmutex__node_put(n, c);
	return script_result(n, script, v, maybe_done);
}

/* An error reply logged and turned into NULL, but for redirections. */
static redisReply *
script_result(struct dmutex__node *n, int script, void *v, int *maybe_done)
{
	if (!v)
		return NULL;
	if (((redisReply *)v)->type == REDIS_REPLY_ERROR && n->redirects &&
			dmutex__node_redirect(v)) {
		/* The cluster backend follows it (cluster.c). */
		*maybe_done = DMUTEX__REDIRECT;
		return v;
	}
	if (((redisReply *)v)->type == REDIS_REPLY_ERROR) {
		int passing = dmutex__node_transient(v);
		dmutex__log(passing ? DMUTEX_LOG_WARN : DMUTEX_LOG_ERROR, "%s: %s script failed: %s",
				n->addr->display, dmutex__script_name(script), ((redisReply *)v)->str);
		freeReplyObject(v);
		/* A passing condition is worth asking again; anything else
		 * (NOPERM, WRONGTYPE, OOM...) would get the same answer. */
		*maybe_done = passing ? 0 : DMUTEX__REFUSED;
		return NULL;
	}
	return v;
}
