/*
 * Per-lock counters, aggregated in the process (see metrics.h).  The hooks
 * run on the lock path, so they only touch memory: a hash lookup and a few
 * additions under one mutex that is a leaf of the lock order (nothing else
 * is taken while it is held).  The renewal thread sends what gathered to
 * Redis at most once a second, in batches: never a round trip per
 * acquisition.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dmutex.h"
#include "backend.h"
#include "internal.h"
#include "metrics.h"
#include "node.h"

#define FLUSH_NS (1000 * DMUTEX__MS)
/* After a flush that failed, the node is left alone this long: a stopped
 * or paused server must not cost a wait every second. */
#define BACKOFF_NS (10000 * DMUTEX__MS)
#define BATCH 64                /* names per MULTI/EXEC */

const char *const dmutex__met_fields[DMUTEX__MET_NFIELDS] = {
	"acq", "contended", "lost", "renewals", "errors", "wait_us",
	"wait_b0", "wait_b1", "wait_b2", "wait_b3", "wait_b4",
	"wait_b5", "wait_b6", "wait_b7", "wait_b8", "wait_b9",
	"holds", "hold_us",
	"hold_b0", "hold_b1", "hold_b2", "hold_b3", "hold_b4",
	"hold_b5", "hold_b6", "hold_b7", "hold_b8", "hold_b9",
};

struct met {
	struct met *next;               /* hash chain */
	struct met *dirty_next;
	int dirty;
	int64_t since_ns;               /* the current hold began; 0 none */
	uint64_t delta[DMUTEX__MET_NFIELDS];    /* not yet in Redis */
	uint64_t total[DMUTEX__MET_NFIELDS];    /* since the client opened */
	char name[];
};

struct dmutex__metrics {
	pthread_mutex_t mu;             /* leaf: nothing is taken under it */
	struct met **tab;
	size_t size, n;
	struct met *dirty;
	int64_t last_flush_ns;
	int64_t backoff_until_ns;
	int multi_ok;           /* flusher only: MULTI was accepted once */
	int refused;            /* the server refuses them: never sent again */
};

int
dmutex__met_init(struct dmutex_client *c)
{
	struct dmutex__metrics *m = calloc(1, sizeof *m);

	if (!m)
		return ENOMEM;
	pthread_mutex_init(&m->mu, NULL);
	m->last_flush_ns = dmutex__now_ns();
	c->metrics = m;
	return 0;
}

void
dmutex__met_free(struct dmutex_client *c)
{
	struct dmutex__metrics *m = c->metrics;

	if (!m)
		return;
	for (size_t i = 0; i < m->size; i++)
		for (struct met *r = m->tab[i], *next; r; r = next) {
			next = r->next;
			free(r);
		}
	free(m->tab);
	pthread_mutex_destroy(&m->mu);
	free(m);
	c->metrics = NULL;
}

/* The parent sends what it gathered; the child starts from nothing. */
void
dmutex__met_atfork_child(struct dmutex_client *c)
{
	struct dmutex__metrics *m = c->metrics;

	if (!m)
		return;
	pthread_mutex_init(&m->mu, NULL);
	for (size_t i = 0; i < m->size; i++)
		for (struct met *r = m->tab[i]; r; r = r->next) {
			memset(r->delta, 0, sizeof r->delta);
			memset(r->total, 0, sizeof r->total);
			r->dirty = 0;
			r->since_ns = 0;
		}
	m->dirty = NULL;
}

static size_t
hash(const char *s)
{
	size_t h = 14695981039346656037u;

	while (*s)
		h = (h ^ (unsigned char)*s++) * 1099511628211u;
	return h;
}

/* Under m->mu.  NULL when out of memory: the counts are dropped. */
static struct met *
lookup(struct dmutex__metrics *m, const char *name)
{
	size_t h = hash(name), len;
	struct met *r;

	if (m->size)
		for (r = m->tab[h & (m->size - 1)]; r; r = r->next)
			if (!strcmp(r->name, name))
				return r;
	if (m->n >= m->size) {
		size_t size = m->size ? 2 * m->size : 64;
		struct met **tab = calloc(size, sizeof *tab);
		if (!tab)
			return NULL;
		for (size_t i = 0; i < m->size; i++)
			for (struct met *x = m->tab[i], *next; x; x = next) {
				next = x->next;
				x->next = tab[hash(x->name) & (size - 1)];
				tab[hash(x->name) & (size - 1)] = x;
			}
		free(m->tab);
		m->tab = tab;
		m->size = size;
	}
	len = strlen(name);
	if (!(r = calloc(1, sizeof *r + len + 1)))
		return NULL;
	memcpy(r->name, name, len + 1);
	r->next = m->tab[h & (m->size - 1)];
	m->tab[h & (m->size - 1)] = r;
	m->n++;
	return r;
}

static void
add(struct dmutex__metrics *m, struct met *r, int field, uint64_t v)
{
	r->delta[field] += v;
	r->total[field] += v;
	if (!r->dirty) {
		r->dirty = 1;
		r->dirty_next = m->dirty;
		m->dirty = r;
	}
}

static int
bucket(int64_t ns)
{
	static const double bounds[] = DMUTEX__MET_BOUNDS;
	double s = (double)ns / 1e9;
	int i = 0;

	while (i < DMUTEX__MET_BUCKETS - 1 && s > bounds[i])
		i++;
	return i;
}

void
dmutex__met_acquired(struct dmutex_client *c, const char *name, int64_t start_ns,
		int64_t now_ns, int contended)
{
	struct dmutex__metrics *m = c->metrics;
	int64_t wait_ns = now_ns - start_ns;
	struct met *r;

	if (!c->cfg.metrics)
		return;
	if (wait_ns < 0)
		wait_ns = 0;
	pthread_mutex_lock(&m->mu);
	if ((r = lookup(m, name))) {
		add(m, r, DMUTEX__MET_ACQ, 1);
		if (contended)
			add(m, r, DMUTEX__MET_CONTENDED, 1);
		add(m, r, DMUTEX__MET_WAIT_US, (uint64_t)wait_ns / 1000);
		add(m, r, DMUTEX__MET_WAIT_B0 + bucket(wait_ns), 1);
		r->since_ns = now_ns;
	}
	pthread_mutex_unlock(&m->mu);
}

void
dmutex__met_released(struct dmutex_client *c, const char *name, int64_t now_ns)
{
	struct dmutex__metrics *m = c->metrics;
	struct met *r;

	if (!c->cfg.metrics)
		return;
	pthread_mutex_lock(&m->mu);
	if ((r = lookup(m, name)) && r->since_ns) {
		int64_t held = now_ns - r->since_ns;
		add(m, r, DMUTEX__MET_HOLDS, 1);
		add(m, r, DMUTEX__MET_HOLD_US, (uint64_t)held / 1000);
		add(m, r, DMUTEX__MET_HOLD_B0 + bucket(held), 1);
		r->since_ns = 0;
	}
	pthread_mutex_unlock(&m->mu);
}

void
dmutex__met_count(struct dmutex_client *c, const char *name, int field)
{
	struct dmutex__metrics *m = c->metrics;
	struct met *r;

	if (!c->cfg.metrics)
		return;
	pthread_mutex_lock(&m->mu);
	if ((r = lookup(m, name)))
		add(m, r, field, 1);
	pthread_mutex_unlock(&m->mu);
}

int64_t
dmutex__met_due(struct dmutex_client *c)
{
	struct dmutex__metrics *m = c->metrics;
	int64_t due;

	pthread_mutex_lock(&m->mu);
	due = m->dirty && !m->refused ? m->last_flush_ns + FLUSH_NS : INT64_MAX;
	if (due < m->backoff_until_ns)
		due = m->backoff_until_ns;
	pthread_mutex_unlock(&m->mu);
	return due;
}

struct pending {
	char *name;
	uint64_t delta[DMUTEX__MET_NFIELDS];
};

/* A batch that Redis did not take goes back, to ride with the next one. */
static void
put_back(struct dmutex__metrics *m, struct pending *p, size_t n)
{
	pthread_mutex_lock(&m->mu);
	for (size_t i = 0; i < n; i++) {
		struct met *r = lookup(m, p[i].name);
		if (!r)
			continue;
		for (int f = 0; f < DMUTEX__MET_NFIELDS; f++)
			if (p[i].delta[f]) {
				r->total[f] -= p[i].delta[f];   /* add() counts it again */
				add(m, r, f, p[i].delta[f]);
			}
	}
	pthread_mutex_unlock(&m->mu);
}

/* One MULTI/EXEC of plain HINCRBYs (not a script: the library's script
 * calls stay what they were, and the tests that count them still mean
 * what they say), done by `until`.  0 sent; 1 given up after it may have
 * been applied (dropped: a count is never added twice); -1 nothing was
 * sent. */
static int
send_batch(struct dmutex_client *c, struct pending *p, size_t n, int64_t until)
{
	struct dmutex__node *nd = &c->be->nodes[0];
	struct dmutex__conn *cn = dmutex__node_get_by(nd, until);
	char tk[DMUTEX__MET_KEY_MAX], ik[DMUTEX__MET_KEY_MAX], nk[DMUTEX__MET_KEY_MAX];
	const char *pre = c->cfg.prefix;
	int64_t deadline;
	size_t q = 0;
	int bad = 0, refused = 0;

	if (!cn)
		return -1;
	deadline = dmutex__conn_deadline(cn);
	if (deadline > until)
		deadline = until;
	dmutex__met_key(tk, pre, "total", NULL);
	dmutex__met_key(ik, pre, "index", NULL);
	if (!c->metrics->multi_ok) {
		/* Once per client, MULTI alone: refused (an ACL without it),
		 * the increments that follow would run one by one, half of
		 * them refused too.  Then the counters stay in the process. */
		redisReply *r = dmutex__conn_command(cn, deadline, "MULTI");
		if (!r) {
			dmutex__conn_free(cn);
			return -1;
		}
		if (r->type == REDIS_REPLY_ERROR) {
			dmutex__log(DMUTEX_LOG_WARN, "per-lock counters not stored: %s (they need "
					"MULTI, EXEC, HINCRBY, ZINCRBY; ?metrics=0 turns them off)", r->str);
			pthread_mutex_lock(&c->metrics->mu);
			c->metrics->refused = 1;
			pthread_mutex_unlock(&c->metrics->mu);
			freeReplyObject(r);
			dmutex__node_put(nd, cn);
			return 1;
		}
		freeReplyObject(r);
		c->metrics->multi_ok = 1;
	} else {
		bad |= dmutex__conn_appendf(cn, "MULTI");
		q++;
	}
	for (size_t i = 0; i < n && !bad; i++) {
		dmutex__met_key(nk, pre, "n:", p[i].name);
		for (int f = 0; f < DMUTEX__MET_NFIELDS && !bad; f++) {
			unsigned long long d = (unsigned long long)p[i].delta[f];
			if (!d)
				continue;
			bad |= dmutex__conn_appendf(cn, "HINCRBY %s %s %llu", nk,
					dmutex__met_fields[f], d);
			bad |= dmutex__conn_appendf(cn, "HINCRBY %s %s %llu", tk,
					dmutex__met_fields[f], d);
			q += 2;
			if (f == DMUTEX__MET_ACQ) {
				bad |= dmutex__conn_appendf(cn, "ZINCRBY %s %llu %b", ik, d,
						p[i].name, strlen(p[i].name));
				q++;
			}
		}
	}
	bad |= dmutex__conn_appendf(cn, "EXEC");
	q++;
	for (size_t i = 0; i < q && !bad; i++) {
		redisReply *r = NULL;
		if (dmutex__conn_get(cn, (void **)&r, deadline)) {
			bad = 1;
			break;
		}
		/* A command refused inside MULTI aborts the whole transaction:
		 * nothing was added; said once, and not sent again. */
		if (r->type == REDIS_REPLY_ERROR && !refused) {
			refused = 1;
			dmutex__log(DMUTEX_LOG_WARN, "per-lock counters not stored: %s (they need "
					"MULTI, EXEC, HINCRBY, ZINCRBY; ?metrics=0 turns them off)", r->str);
			pthread_mutex_lock(&c->metrics->mu);
			c->metrics->refused = 1;
			pthread_mutex_unlock(&c->metrics->mu);
		}
		freeReplyObject(r);
	}
	if (bad)
		dmutex__conn_free(cn);
	else
		dmutex__node_put(nd, cn);
	return bad;
}

void
dmutex__met_flush(struct dmutex_client *c, int64_t until)
{
	struct dmutex__metrics *m = c->metrics;
	struct pending *p = NULL;
	size_t n = 0, cap = 0;
	int failed = 0;

	pthread_mutex_lock(&m->mu);
	m->last_flush_ns = dmutex__now_ns();
	if (m->refused) {
		/* Kept in the process (dmutex_client_metrics), never sent. */
		for (struct met *r = m->dirty; r; r = r->dirty_next) {
			memset(r->delta, 0, sizeof r->delta);
			r->dirty = 0;
		}
		m->dirty = NULL;
		pthread_mutex_unlock(&m->mu);
		return;
	}
	for (struct met *r = m->dirty; r; r = r->dirty_next) {
		if (n == cap) {
			size_t nc = cap ? 2 * cap : 16;
			struct pending *np = realloc(p, nc * sizeof *np);
			if (!np)
				break;
			p = np;
			cap = nc;
		}
		if (!(p[n].name = strdup(r->name)))
			break;
		memcpy(p[n].delta, r->delta, sizeof r->delta);
		memset(r->delta, 0, sizeof r->delta);
		r->dirty = 0;
		n++;
	}
	/* What did not fit stays dirty: its deltas are still in place. */
	{
		struct met **pp = &m->dirty;
		while (*pp)
			if (!(*pp)->dirty)
				*pp = (*pp)->dirty_next;
			else
				pp = &(*pp)->dirty_next;
	}
	pthread_mutex_unlock(&m->mu);
	for (size_t i = 0; i < n; i += BATCH) {
		size_t k = n - i < BATCH ? n - i : BATCH;
		int st = failed ? -1 : m->refused ? 1 : send_batch(c, p + i, k, until);
		if (st < 0)
			put_back(m, p + i, k);
		failed |= st != 0;
	}
	if (failed) {
		pthread_mutex_lock(&m->mu);
		m->backoff_until_ns = dmutex__now_ns() + BACKOFF_NS;
		pthread_mutex_unlock(&m->mu);
	}
	for (size_t i = 0; i < n; i++)
		free(p[i].name);
	free(p);
}

void
dmutex__met_totals(struct dmutex_client *c, const char *name, dmutex_metrics_t *out)
{
	uint64_t t[DMUTEX__MET_NFIELDS] = { 0 };
	struct dmutex__metrics *m = c->metrics;

	pthread_mutex_lock(&m->mu);
	for (size_t i = 0; i < m->size; i++)
		for (struct met *r = m->tab[i]; r; r = r->next)
			if (!name || !strcmp(r->name, name))
				for (int f = 0; f < DMUTEX__MET_NFIELDS; f++)
					t[f] += r->total[f];
	pthread_mutex_unlock(&m->mu);
	memset(out, 0, sizeof *out);
	out->acquisitions = t[DMUTEX__MET_ACQ];
	out->contended = t[DMUTEX__MET_CONTENDED];
	out->leases_lost = t[DMUTEX__MET_LOST];
	out->renewals = t[DMUTEX__MET_RENEWALS];
	out->backend_errors = t[DMUTEX__MET_ERRORS];
	out->holds = t[DMUTEX__MET_HOLDS];
	out->wait_seconds = (double)t[DMUTEX__MET_WAIT_US] / 1e6;
	out->hold_seconds = (double)t[DMUTEX__MET_HOLD_US] / 1e6;
}
