/*
 * Per-lock counters, aggregated in the process (see metrics.h).  The hooks
 * run on the lock path, so they only touch memory: a few additions under
 * one mutex that is a leaf of the lock order (nothing else is taken while
 * it is held), to the name's record, which the entry remembers (a hash
 * lookup only the first time, or after a sweep freed records).  The
 * renewal thread sends what gathered to Redis at most once a second, in
 * batches: never a round trip per acquisition.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dmutex.h"
#include "backend/backend.h"
#include "base/lockorder.h"
#include "internal.h"
#include "metrics.h"

#define FLUSH_NS (1000 * DMUTEX__MS)
/* After a flush that failed, the node is left alone this long: a stopped
 * or paused server must not cost a wait every second. */
#define BACKOFF_NS (10000 * DMUTEX__MS)
#define BATCH 64                /* names per MULTI/EXEC */
/* A name's record leaves the process this long after its last count
 * reached Redis (at most the client's idle_ms): a program that locks
 * job:<uuid> once per job must not grow by a record a job. */
#define RETAIN_MAX_NS (300000 * DMUTEX__MS)
#define SWEEP_BUCKETS 1024      /* hash buckets looked at per flush */
/* Names idle in Redis leave its index this often (at most; every idle_ms
 * when that is shorter), a page at a time. */
#define TRIM_MAX_NS (60000 * DMUTEX__MS)
#define TRIM_PAGE 512
#define TRIM_PAGES 8

struct met {
	struct met *next;               /* hash chain */
	struct met *dirty_next;
	int dirty;
	/* No hold state here: the entry (internal.h counted_ns) knows when its
	 * hold began and tells us once it ended, so that no way a hold ends
	 * can leave a record marked held for ever. */
	int64_t sent_ns;                /* its counts last left for Redis; 0 never */
	uint64_t delta[DMUTEX__MET_NFIELDS];    /* not yet in Redis */
	uint64_t total[DMUTEX__MET_NFIELDS];    /* since the client opened */
	char name[];
};

struct dmutex__metrics {
	pthread_mutex_t mu;             /* leaf: nothing is taken under it */
	/* Entries whose fast paths counted in them (internal.h met_local),
	 * each with a reference, linked through met_next: under mu.  fold_mu,
	 * taken before any entry's mutex, is held by whoever folds them in,
	 * from taking the list to the last entry's counts added. */
	struct dmutex__entry *local;
	pthread_mutex_t fold_mu;
	struct met **tab;
	size_t size, n;
	struct met *dirty;
	uint64_t retired[DMUTEX__MET_NFIELDS];  /* totals of the records dropped */
	size_t sweep_at;                /* the next bucket to sweep */
	int64_t trim_due_ns;
	unsigned long long adopt_cursor; /* flusher only: its ZSCAN of the index */
	int64_t last_flush_ns;
	int64_t backoff_until_ns;
	/* Moves on whenever a record is freed: an entry's record
	 * (internal.h met_rec) is used only while its met_gen is this. */
	uint64_t gen;
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
	pthread_mutex_init(&m->fold_mu, NULL);
	m->gen = 1;             /* an entry's met_gen starts at 0: unknown */
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
	pthread_mutex_destroy(&m->fold_mu);
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
	pthread_mutex_init(&m->fold_mu, NULL);
	/* The entries' own counts were zeroed with the rest of them
	 * (client.c): those still listed stay listed, to be folded (as
	 * nothing) and let go.  Those a parent thread was folding at the
	 * fork stay unlisted and keep that thread's reference: they are
	 * counted again from the child's next count on. */
	for (struct dmutex__entry *e = m->local; e; e = e->met_next)
		e->met_queued = 1;
	for (size_t i = 0; i < m->size; i++)
		for (struct met *r = m->tab[i]; r; r = r->next) {
			memset(r->delta, 0, sizeof r->delta);
			memset(r->total, 0, sizeof r->total);
			r->dirty = 0;
			r->sent_ns = 0;
		}
	memset(m->retired, 0, sizeof m->retired);
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

/* Under m->mu: e's name's record, found through e when it can be. */
static struct met *
lookup_e(struct dmutex__metrics *m, struct dmutex__entry *e)
{
	struct met *r;

	if (e->met_gen == m->gen)
		return e->met_rec;
	if ((r = lookup(m, e->name))) {
		e->met_rec = r;
		e->met_gen = m->gen;
	}
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

void
dmutex__met_acquired(struct dmutex__entry *e, int64_t start_ns, int64_t now_ns, int contended)
{
	struct dmutex_client *c = e->client;
	struct dmutex__metrics *m = c->metrics;
	int64_t wait_ns = now_ns - start_ns;
	struct met *r;

	if (!c->cfg.metrics)
		return;
	if (wait_ns < 0)
		wait_ns = 0;
	pthread_mutex_lock(&m->mu);
	if ((r = lookup_e(m, e))) {
		add(m, r, DMUTEX__MET_ACQ, 1);
		if (contended)
			add(m, r, DMUTEX__MET_CONTENDED, 1);
		add(m, r, DMUTEX__MET_WAIT_US, (uint64_t)wait_ns / 1000);
		add(m, r, DMUTEX__MET_WAIT_B0 + dmutex__met_bucket(wait_ns), 1);
	}
	pthread_mutex_unlock(&m->mu);
}

void
dmutex__met_hold_ended(struct dmutex__entry *e, int64_t held_ns)
{
	struct dmutex_client *c = e->client;
	struct dmutex__metrics *m = c->metrics;
	struct met *r;

	if (!c->cfg.metrics || held_ns < 0)
		return;
	pthread_mutex_lock(&m->mu);
	if ((r = lookup_e(m, e))) {
		add(m, r, DMUTEX__MET_HOLDS, 1);
		add(m, r, DMUTEX__MET_HOLD_US, (uint64_t)held_ns / 1000);
		add(m, r, DMUTEX__MET_HOLD_B0 + dmutex__met_bucket(held_ns), 1);
	}
	pthread_mutex_unlock(&m->mu);
}

void
dmutex__met_queue(struct dmutex__entry *e)
{
	struct dmutex__metrics *m = e->client->metrics;

	__atomic_fetch_add(&e->refs, 1, __ATOMIC_ACQ_REL);
	e->met_queued = 1;
	pthread_mutex_lock(&m->mu);
	e->met_next = m->local;
	m->local = e;
	pthread_mutex_unlock(&m->mu);
}

struct dmutex__entry *
dmutex__met_fold_begin(struct dmutex_client *c)
{
	struct dmutex__metrics *m = c->metrics;
	struct dmutex__entry *list;

	dmutex__mu_lock(&m->fold_mu, DMUTEX__LK_METFOLD, "fold_mu");
	pthread_mutex_lock(&m->mu);
	list = m->local;
	m->local = NULL;
	pthread_mutex_unlock(&m->mu);
	return list;
}

void
dmutex__met_fold(struct dmutex__entry *e, const struct dmutex__met_local *l)
{
	struct dmutex__metrics *m = e->client->metrics;
	struct met *r;

	if (!l->acq && !l->holds)
		return;
	pthread_mutex_lock(&m->mu);
	if ((r = lookup_e(m, e))) {
		/* As dmutex__met_acquired and _hold_ended would have: not
		 * contended, no wait (the first wait bucket). */
		if (l->acq) {
			add(m, r, DMUTEX__MET_ACQ, l->acq);
			add(m, r, DMUTEX__MET_WAIT_B0, l->acq);
		}
		if (l->holds) {
			add(m, r, DMUTEX__MET_HOLDS, l->holds);
			add(m, r, DMUTEX__MET_HOLD_US, l->hold_us);
			for (int b = 0; b < DMUTEX__MET_BUCKETS; b++)
				if (l->hold_b[b])
					add(m, r, DMUTEX__MET_HOLD_B0 + b, l->hold_b[b]);
		}
	}
	pthread_mutex_unlock(&m->mu);
}

void
dmutex__met_fold_end(struct dmutex_client *c)
{
	dmutex__mu_unlock(&c->metrics->fold_mu, DMUTEX__LK_METFOLD);
}

void
dmutex__met_count(struct dmutex__entry *e, int field)
{
	struct dmutex_client *c = e->client;
	struct dmutex__metrics *m = c->metrics;
	struct met *r;

	if (!c->cfg.metrics)
		return;
	pthread_mutex_lock(&m->mu);
	if ((r = lookup_e(m, e)))
		add(m, r, field, 1);
	pthread_mutex_unlock(&m->mu);
}

int64_t
dmutex__met_due(struct dmutex_client *c)
{
	struct dmutex__metrics *m = c->metrics;
	int64_t due;

	pthread_mutex_lock(&m->mu);
	/* Entries to fold even when the server refuses the counts: their
	 * references go with the fold. */
	due = (m->dirty && !m->refused) || m->local ? m->last_flush_ns + FLUSH_NS : INT64_MAX;
	if (due < m->backoff_until_ns)
		due = m->backoff_until_ns;
	pthread_mutex_unlock(&m->mu);
	return due;
}

/*
 * Under m->mu: drop the records of names not counted since their counts
 * left for Redis at least retain_ns ago, SWEEP_BUCKETS
 * buckets a flush (a million names cost no pause on the lock path).
 * What they counted stays in the client's total (dmutex_client_metrics
 * with no name); a name counted again starts a new record.  Being held
 * keeps no record: a held name counts its renewals (a third of a lease
 * apart, mostly well within idle_ms), and one that counts nothing (its
 * lease lost, its holder never unlocking) must go like any idle name.
 * A hold that outlives its record is counted, when it ends, in a new one.
 */
static void
sweep(struct dmutex__metrics *m, int64_t now, int64_t retain_ns)
{
	size_t left = m->size < SWEEP_BUCKETS ? m->size : SWEEP_BUCKETS;

	for (; left; left--) {
		struct met **pp = &m->tab[m->sweep_at++ & (m->size - 1)];
		while (*pp) {
			struct met *r = *pp;
			if (r->dirty || !r->sent_ns || now - r->sent_ns < retain_ns) {
				pp = &r->next;
				continue;
			}
			for (int f = 0; f < DMUTEX__MET_NFIELDS; f++)
				m->retired[f] += r->total[f];
			*pp = r->next;
			free(r);
			m->n--;
			m->gen++;
		}
	}
}

/* A batch that Redis did not take goes back, to ride with the next one. */
static void
put_back(struct dmutex__metrics *m, struct dmutex__count *p, size_t n)
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

void
dmutex__met_flush(struct dmutex_client *c, int64_t until)
{
	struct dmutex__metrics *m = c->metrics;
	struct dmutex__count *p = NULL;
	size_t n = 0, cap = 0;
	int failed = 0;

	int64_t now = dmutex__now_ns();
	int64_t retain = (int64_t)c->cfg.idle_ms * DMUTEX__MS;

	if (retain > RETAIN_MAX_NS)
		retain = RETAIN_MAX_NS;
	pthread_mutex_lock(&m->mu);
	m->last_flush_ns = now;
	sweep(m, now, retain);
	if (m->refused) {
		/* Kept in the process (dmutex_client_metrics), never sent. */
		for (struct met *r = m->dirty; r; r = r->dirty_next) {
			memset(r->delta, 0, sizeof r->delta);
			r->dirty = 0;
			r->sent_ns = now;
		}
		m->dirty = NULL;
		pthread_mutex_unlock(&m->mu);
		return;
	}
	for (struct met *r = m->dirty; r; r = r->dirty_next) {
		if (n == cap) {
			size_t nc = cap ? 2 * cap : 16;
			struct dmutex__count *np = realloc(p, nc * sizeof *np);
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
		r->sent_ns = now;
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
		int st = failed ? DMUTEX__CNT_NOT_SENT : m->refused ? DMUTEX__CNT_REFUSED
			: dmutex__backend_counters(c->be, p + i, k, &m->multi_ok, until);
		if (st == DMUTEX__CNT_NOT_SENT)
			put_back(m, p + i, k);
		if (st == DMUTEX__CNT_REFUSED) {
			pthread_mutex_lock(&m->mu);
			m->refused = 1;
			pthread_mutex_unlock(&m->mu);
		}
		failed |= st != DMUTEX__CNT_SENT;
	}
	if (failed) {
		pthread_mutex_lock(&m->mu);
		m->backoff_until_ns = dmutex__now_ns() + BACKOFF_NS;
		pthread_mutex_unlock(&m->mu);
	} else if (n && now >= m->trim_due_ns) {
		/* The flusher is the only one to read or write trim_due_ns. */
		int64_t every = (int64_t)c->cfg.idle_ms * DMUTEX__MS;
		int got = TRIM_PAGE;
		for (int i = 0; i < TRIM_PAGES && got == TRIM_PAGE && dmutex__now_ns() < until; i++)
			got = dmutex__backend_counters_trim(c->be, TRIM_PAGE, until);
		/* Names in the index with no time of their last count (an
		 * older version's) get one, to be trimmed in a later round. */
		got = 1;
		for (int i = 0; i < TRIM_PAGES && got == 1 && dmutex__now_ns() < until; i++)
			got = dmutex__backend_counters_adopt(c->be, &m->adopt_cursor, TRIM_PAGE, until);
		m->trim_due_ns = now + (every < TRIM_MAX_NS ? every : TRIM_MAX_NS);
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
	if (!name)
		for (int f = 0; f < DMUTEX__MET_NFIELDS; f++)
			t[f] += m->retired[f];
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
