/*
 * The one renewal thread of a client.  Every held lease is renewed at about
 * a third of its lease; all renewals due in a tick go to the backend in one
 * batch.  A hold whose renewal is not confirmed before its own monotonic
 * deadline is lost: flagged, and its onlost handler called once.
 *
 * The thread also retries releases that could not be confirmed (orphans),
 * until their lease would have run out anyway, acts on the answers of
 * asynchronous releases (rel_settle.c), and gives back the leases the
 * process keeps (lease_cache.c) that nobody used lately or another process
 * asked for: the renewer holds a kept lease while nobody does, so giving
 * it back is its job.  Above hold.c, kept_lease.c, release.c and
 * rel_settle.c; below lease_cache.c, unlock_async.c and the client.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "internal.h"
#include "metrics.h"
#include "base/lockorder.h"
#include "rwlock.h"

/* A renewal due within this much (at least BATCH_SLACK_NS, an eighth of
 * its renewal interval) rides in the batch going out now: renewing a
 * little early costs little, while 100,000 holds taken one after another
 * would otherwise make as many batches of a few holds each, one every
 * BATCH_SLACK_NS. */
#define BATCH_SLACK_NS (50 * DMUTEX__MS)
#define BATCH_EARLY_DIV 8
#define RETRY_NS       (50 * DMUTEX__MS)
/* How soon the thread reads an asynchronous release's answer (if nobody
 * did) and acts on it: the period of its looks while releases are
 * unanswered. */
#define REL_SETTLE_NS  (10 * DMUTEX__MS)
/* A counters flush gets at most this long (and a tenth of the client's
 * lease), and starts only with at least METRICS_ROOM_NS before the next
 * renewal. */
#define METRICS_BUDGET_NS (250 * DMUTEX__MS)
#define METRICS_ROOM_NS   (20 * DMUTEX__MS)

static int64_t
renew_interval(unsigned lease_ms)
{
	return (int64_t)lease_ms * DMUTEX__MS / 3;
}

static int64_t
batch_slack(unsigned lease_ms)
{
	int64_t s = renew_interval(lease_ms) / BATCH_EARLY_DIV;
	return s > BATCH_SLACK_NS ? s : BATCH_SLACK_NS;
}

static void *renewer_main(void *arg);

static int
ensure_running(struct dmutex_client *c)
{
	struct dmutex__renewer *r = &c->renewer;
	sigset_t all, old;
	int err;

	if (r->running)
		return 0;
	/* Signals are for the application's threads, not ours. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&r->thread, NULL, renewer_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		dmutex__log(DMUTEX_LOG_ERROR, "cannot start the renewal thread: %s", strerror(err));
		return err;
	}
	r->running = 1;
	r->stop = 0;
	r->wake_ns = INT64_MIN;         /* it looks at the list as it starts */
	return 0;
}

int
dmutex__renewer_add(struct dmutex_client *c, struct dmutex__entry *e)
{
	struct dmutex__renewer *r = &c->renewer;
	int err;

	dmutex__mu_lock(&r->mu, DMUTEX__LK_RENEWER, "renewer.mu");
	if ((err = ensure_running(c)))
		goto out;
	if (r->n == r->cap) {
		size_t ncap = r->cap ? r->cap * 2 : 16;
		struct dmutex__entry **ni = realloc(r->items, ncap * sizeof *ni);
		if (!ni) {
			err = ENOMEM;
			goto out;
		}
		r->items = ni;
		r->cap = ncap;
	}
	e->ren_idx = r->n;
	r->items[r->n++] = e;
	e->registered = 1;
	e->due_ns = dmutex__now_ns() + renew_interval(e->lease_ms);
	/* Wake the thread only if it would sleep past this lease's first
	 * renewal: a signal per acquire costs a context switch per lock. */
	if (e->due_ns < r->wake_ns)
		pthread_cond_signal(&r->cv);
out:
	dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
	return err;
}

void
dmutex__renewer_remove(struct dmutex_client *c, struct dmutex__entry *e)
{
	struct dmutex__renewer *r = &c->renewer;

	dmutex__mu_lock(&r->mu, DMUTEX__LK_RENEWER, "renewer.mu");
	if (e->registered) {
		/* By its index: an unlock must not scan every held lock. */
		size_t i = e->ren_idx;
		if (i < r->n && r->items[i] == e) {
			r->items[i] = r->items[--r->n];
			r->items[i]->ren_idx = i;
		}
		e->registered = 0;
	}
	dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
}

void
dmutex__renewer_kick(struct dmutex_client *c)
{
	struct dmutex__renewer *r = &c->renewer;
	int64_t now = dmutex__now_ns();

	/* Which kept lease was revoked is read under its entry's lock by
	 * the thread: every kept one is due now (e->kept read as a hint; the
	 * entry's lock comes before ours). */
	dmutex__mu_lock(&r->mu, DMUTEX__LK_RENEWER, "renewer.mu");
	for (size_t i = 0; i < r->n; i++)
		if (__atomic_load_n(&r->items[i]->kept, __ATOMIC_RELAXED))
			r->items[i]->due_ns = now;
	pthread_cond_signal(&r->cv);
	dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
}

void
dmutex__renewer_watch_rel(struct dmutex_client *c, struct dmutex__entry *e)
{
	struct dmutex__renewer *r = &c->renewer;
	int64_t now;

	dmutex__mu_lock(&r->mu, DMUTEX__LK_RENEWER, "renewer.mu");
	if (e->rel_watched || ensure_running(c))
		goto out;
	if (r->nrels == r->rels_cap) {
		size_t ncap = r->rels_cap ? r->rels_cap * 2 : 16;
		struct dmutex__entry **nv = realloc(r->rels, ncap * sizeof *nv);
		/* No room: the answer is acted on at the name's next lock,
		 * unlock, fence or destroy, as it is read. */
		if (!nv)
			goto out;
		r->rels = nv;
		r->rels_cap = ncap;
	}
	__atomic_fetch_add(&e->refs, 1, __ATOMIC_ACQ_REL);
	e->rel_watched = 1;
	r->rels[r->nrels++] = e;
	/* One look for every release of the last REL_SETTLE_NS: with one
	 * unlock after another, the thread wakes once per period, not once
	 * per unlock, and finds the answers mostly read already (by the
	 * next request on their connections). */
	if (r->nrels == 1) {
		now = dmutex__now_ns();
		r->rels_due_ns = now + REL_SETTLE_NS;
		if (r->rels_due_ns < r->wake_ns)
			pthread_cond_signal(&r->cv);
	}
out:
	dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
}

/* Act on the answers of the asynchronous releases due now (renewer.mu
 * held on entry and on return, dropped meanwhile).  `bound`: no answer is
 * waited for past it (the next renewal is due). */
static void
settle_rels(struct dmutex_client *c, int64_t bound)
{
	struct dmutex__renewer *r = &c->renewer;
	struct dmutex__entry **v = r->rels;
	size_t n = r->nrels, k = 0;
	int64_t now = dmutex__now_ns(), until = now + (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS;

	if (until > bound)
		until = bound;
	/* Too little time before the next renewal to wait for a reply:
	 * renew first (a read cut short would break its connection). */
	if (until - now < REL_SETTLE_NS) {
		r->rels_due_ns = now + REL_SETTLE_NS;
		return;
	}
	r->rels = NULL;
	r->nrels = r->rels_cap = 0;
	dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
	for (size_t i = 0; i < n; i++)
		dmutex__rel_settle(v[i], until);
	dmutex__mu_lock(&r->mu, DMUTEX__LK_RENEWER, "renewer.mu");
	for (size_t i = 0; i < n; i++) {
		struct dmutex__entry *e = v[i];
		/* Unanswered yet, or a new release since (its watch found
		 * the entry still listed): looked at again next period. */
		if (__atomic_load_n(&e->rel, __ATOMIC_ACQUIRE)) {
			if (r->nrels == r->rels_cap) {
				size_t ncap = r->rels_cap ? r->rels_cap * 2 : 16;
				struct dmutex__entry **nv = realloc(r->rels, ncap * sizeof *nv);
				if (nv) {
					r->rels = nv;
					r->rels_cap = ncap;
				}
			}
			if (r->nrels < r->rels_cap) {
				r->rels[r->nrels++] = e;
				continue;
			}
			/* No room: its next call acts on it, as it is read. */
		}
		e->rel_watched = 0;
		v[k++] = e;
	}
	r->rels_due_ns = dmutex__now_ns() + REL_SETTLE_NS;
	/* The references, without our lock (the last one takes the
	 * client's, which comes first). */
	dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
	for (size_t i = 0; i < k; i++)
		dmutex__entry_put(v[i]);
	free(v);
	dmutex__mu_lock(&r->mu, DMUTEX__LK_RENEWER, "renewer.mu");
}

/* Queue the release of `token` (mode: release.lua's, or DMUTEX__ORPHAN_RW
 * with a rwlock's op), first tried at next_ns; rep: NULL, or what it
 * reports if found certainly not ours in time (a reference to rep->e
 * taken here). */
static void
orphan(struct dmutex_client *c, const char *name, const char *token, int mode, int64_t until_ns,
		int64_t next_ns, const struct dmutex__orphan_rep *rep)
{
	struct dmutex__renewer *r = &c->renewer;
	struct dmutex__orphan *o;
	char *copy = strdup(name);

	dmutex__mu_lock(&r->mu, DMUTEX__LK_RENEWER, "renewer.mu");
	if (!copy || ensure_running(c))
		goto fail;
	if (r->norphans == r->orphans_cap) {
		size_t ncap = r->orphans_cap ? r->orphans_cap * 2 : 8;
		struct dmutex__orphan *no = realloc(r->orphans, ncap * sizeof *no);
		if (!no)
			goto fail;
		r->orphans = no;
		r->orphans_cap = ncap;
	}
	o = &r->orphans[r->norphans++];
	o->name = copy;
	memcpy(o->token, token, sizeof o->token);
	o->mode = mode;
	o->until_ns = until_ns;
	o->next_ns = next_ns;
	o->sure = rep && rep->e;
	o->rep = o->sure ? *rep : (struct dmutex__orphan_rep){ 0 };
	if (o->sure)
		__atomic_fetch_add(&rep->e->refs, 1, __ATOMIC_ACQ_REL);
	pthread_cond_signal(&r->cv);
	dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
	return;
fail:
	dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
	dmutex__log(DMUTEX_LOG_WARN, "'%s' stays locked until its lease ends: cannot queue its release", name);
	free(copy);
}

void
dmutex__renewer_orphan(struct dmutex_client *c, const char *name, const char *token,
		int mode, int64_t until_ns)
{
	orphan(c, name, token, mode, until_ns, dmutex__now_ns() + RETRY_NS, NULL);
}

void
dmutex__renewer_orphan_rep(struct dmutex_client *c, const char *name, const char *token,
		int mode, int64_t until_ns, const struct dmutex__orphan_rep *rep)
{
	orphan(c, name, token, mode, until_ns, dmutex__now_ns() + RETRY_NS, rep);
}

void
dmutex__renewer_orphan_rw(struct dmutex_client *c, const char *name, int op, const char *token,
		int64_t until_ns)
{
	orphan(c, name, token, DMUTEX__ORPHAN_RW | op, until_ns, dmutex__now_ns(), NULL);
}

void
dmutex__renewer_orphan_rw_rep(struct dmutex_client *c, const char *name, int op,
		const char *token, int64_t until_ns, const struct dmutex__orphan_rep *rep)
{
	orphan(c, name, token, DMUTEX__ORPHAN_RW | op, until_ns, dmutex__now_ns() + RETRY_NS, rep);
}

int
dmutex__renewer_release_rep(struct dmutex_client *c, const char *name, const char *token,
		int mode, int64_t until, struct dmutex__handoff *next, unsigned lease_ms,
		const struct dmutex__orphan_rep *rep)
{
	/* Past its deadline already (a timed lock that gave up at it):
	 * nothing is sent here, the background tries at once. */
	int late = dmutex__now_ns() >= until, ran = 0;
	int err = dmutex__release_to_sure(c, name, token, mode, until, next, &ran);

	if (err == EIO) {
		int64_t now = dmutex__now_ns();
		/* One that may have run: a "not ours" later proves nothing. */
		orphan(c, name, token, mode, now + (int64_t)lease_ms * DMUTEX__MS,
				late ? now : now + RETRY_NS, ran ? NULL : rep);
	}
	return err;
}

int
dmutex__renewer_release(struct dmutex_client *c, const char *name, const char *token, int mode,
		int64_t until, struct dmutex__handoff *next, unsigned lease_ms)
{
	return dmutex__renewer_release_rep(c, name, token, mode, until, next, lease_ms, NULL);
}

void
dmutex__renewer_orphans_dismiss(struct dmutex__entry *e, void (*cb)(const char *, void *),
		void *arg)
{
	struct dmutex__renewer *r = &e->client->renewer;
	int self;

	if (!cb)
		return;
	dmutex__mu_lock(&r->mu, DMUTEX__LK_RENEWER, "renewer.mu");
	self = r->running && pthread_equal(pthread_self(), r->thread);
	dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
	/* Entry first, as the thread takes them (orphan_lost): once no
	 * report of e is being called, none starts with cb cleared.  On
	 * the thread itself, from that handler: it has been called. */
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	while (!self && e->orphan_reporting)
		pthread_cond_wait(&e->cv, &e->mu);
	dmutex__mu_lock(&r->mu, DMUTEX__LK_RENEWER, "renewer.mu");
	for (size_t i = 0; i < r->norphans; i++) {
		struct dmutex__orphan_rep *p = &r->orphans[i].rep;
		if (p->e == e && p->cb == cb && p->arg == arg)
			p->cb = NULL;
	}
	dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
}

/* ---- giving back kept leases (lease_cache.c) ---- */

/* Under e->mu (dropped meanwhile, e->acquiring set): give the kept lease
 * back and forget it; the holds granted on it since its last
 * confirmation are reported if it was no longer ours. */
void
dmutex__renewer_give_back_locked(struct dmutex__entry *e, int64_t until)
{
	struct dmutex_client *c = e->client;
	char token[DMUTEX__TOKEN_HEX + 1];
	int err;

	memcpy(token, e->token, sizeof token);
	e->acquiring = 1;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	dmutex__renewer_remove(c, e);
	err = dmutex__renewer_release(c, e->name, token, DMUTEX__REL_CLEAN, until, NULL,
			e->lease_ms);
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	dmutex__kept_forget(e, err == ENOLCK);
	e->acquiring = 0;
}

void
dmutex__renewer_give_back(struct dmutex__entry *e, int64_t until)
{
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	if (e->kept && !e->held && !e->acquiring && !e->releasing) {
		/* The renewer's or a closing client's own work, not a user's
		 * lock: dmutex_destroy waits for it rather than say EBUSY. */
		e->dropping = 1;
		dmutex__renewer_give_back_locked(e, until);
		e->dropping = 0;
		dmutex__entry_wake(e);
	}
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
}

void
dmutex__renewer_give_back_all(struct dmutex_client *c, int64_t until)
{
	struct dmutex__entry **v = NULL;
	size_t n = 0, cap = 0;

	/* References under the table's lock, releases without it. */
	pthread_mutex_lock(&c->mu);
	for (size_t i = 0; i < c->tab_size; i++)
		for (struct dmutex__entry *e = c->tab[i]; e; e = e->next) {
			if (!__atomic_load_n(&e->kept, __ATOMIC_RELAXED))
				continue;
			if (n == cap) {
				size_t nc = cap ? 2 * cap : 16;
				struct dmutex__entry **nv = realloc(v, nc * sizeof *nv);
				if (!nv)
					break;
				v = nv;
				cap = nc;
			}
			__atomic_fetch_add(&e->refs, 1, __ATOMIC_ACQ_REL);
			v[n++] = e;
		}
	pthread_mutex_unlock(&c->mu);
	for (size_t i = 0; i < n; i++) {
		dmutex__renewer_give_back(v[i], until);
		dmutex__entry_put(v[i]);
	}
	free(v);
}

/* A kept lease that nobody used since its last renewal (a third of a
 * lease ago), or that another process wants: given back, not renewed.
 * Under e->mu, e kept. */
static int
idle(const struct dmutex__entry *e, int64_t now)
{
	return !e->held && (dmutex__kept_revoked(e) ||
			now - e->last_use_ns >= (int64_t)e->lease_ms * DMUTEX__MS / 3 - 50 * DMUTEX__MS);
}

/* One batch of renewals: rn[j] asks for live[j], whose hold was then
 * generation gens[j]; mutexes from the front (k of them), read-write
 * locks (their own script: rwlock.h) from the back (nrw), and the kept
 * leases to give back instead in idle[]. */
struct batch {
	struct dmutex__renewal *rn;
	struct dmutex__entry **live;
	char (*tokens)[DMUTEX__TOKEN_HEX + 1];
	uint64_t *gens;
	struct dmutex__entry **idle;
	size_t n, k, nrw, nidle;
};

static int
batch_alloc(struct batch *b, size_t n)
{
	*b = (struct batch){ .n = n };
	b->rn = calloc(n, sizeof *b->rn);
	b->live = malloc(n * sizeof *b->live);
	b->tokens = malloc(n * sizeof *b->tokens);
	b->gens = malloc(n * sizeof *b->gens);
	b->idle = malloc(n * sizeof *b->idle);
	return b->rn && b->live && b->tokens && b->gens && b->idle;
}

static void
batch_free(struct batch *b)
{
	free(b->rn);
	free(b->live);
	free(b->tokens);
	free(b->gens);
	free(b->idle);
}

/* Under each entry's lock in turn: what to ask for it, if anything.  The
 * batch's deadline, *bound, comes no later than any lease it guards. */
static void
snapshot(struct batch *b, struct dmutex__entry *const *es, int64_t now, int64_t *bound)
{
	for (size_t i = 0; i < b->n; i++) {
		struct dmutex__entry *e = es[i];
		dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
		if (e->kept && idle(e, now)) {
			/* A kept lease nobody used since the last renewal, or
			 * one another process wants: given back, not renewed. */
			b->idle[b->nidle++] = e;
		} else if ((e->held || e->kept) && !e->lost && !e->releasing) {
			/* Mutexes from the front, read-write locks (their own
			 * script: rwlock.h) from the back. */
			size_t j = e->kind == DMUTEX__KIND_RW ? b->n - ++b->nrw : b->k++;
			memcpy(b->tokens[j], e->token, sizeof b->tokens[j]);
			b->rn[j].name = e->name;
			b->rn[j].token = b->tokens[j];
			b->rn[j].lease_ms = e->lease_ms;
			b->rn[j].rw = e->kind != DMUTEX__KIND_RW ? 0 : e->rw_write ? 'w' : 'r';
			b->gens[j] = e->gen;
			b->live[j] = e;
			/* The call must not outlive any lease it guards. */
			if (e->deadline_ns < *bound)
				*bound = e->deadline_ns;
		}
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	}
}

/* Under e->mu, dropped on return: a kept lease nobody holds that is no
 * longer ours (result 0), or no longer known to be (its key, if any is
 * left, expires as 'cached').  Not ours: the local holds granted on it
 * since its last confirmation may have overlapped another holder's, and
 * are reported.  Not known: they stand as holds taken from Redis before
 * an outage stand (README "Cached leases"). */
static void
kept_lapsed(struct dmutex_client *c, struct dmutex__entry *e, int result)
{
	struct dmutex__suspects sus = { 0 };

	if (result == 0)
		dmutex__kept_gone(e, &sus);
	dmutex__renewer_remove(c, e);
	dmutex__entry_forget(e);
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	if (sus.n)
		dmutex__log(DMUTEX_LOG_WARN, "renewal of '%s': the kept lease is no longer ours",
				e->name);
	dmutex__kept_report(e, &sus);
}

/* Under e->mu: the renewal, asked at t0, was confirmed in time; when the
 * next one is due. */
static int64_t
renewed(struct dmutex__entry *e, const struct dmutex__renewal *rn, int64_t t0)
{
	/* A read share: whether a writer elsewhere waits, as of now.  Once
	 * none does (it got in and left, or gave up), this process's new
	 * readers may join the share again: a flag kept until the share
	 * ended held them back with no writer anywhere. */
	if (rn->writer_waits != e->rw_remote_wwait) {
		e->rw_remote_wwait = rn->writer_waits;
		if (!rn->writer_waits)
			dmutex__entry_wake(e);
	}
	e->deadline_ns = t0 + (int64_t)e->lease_ms * DMUTEX__MS - DMUTEX__DRIFT_NS(e->lease_ms);
	if (e->kept)
		dmutex__kept_confirmed(e, t0);
	return t0 + renew_interval(e->lease_ms);
}

/* Under e->mu: not ours any more (*gone), or confirmed only for a request
 * sent after our own deadline, or no answer; when to look again. */
static int64_t
not_renewed(struct dmutex__entry *e, const struct dmutex__renewal *rn, int64_t now,
		struct dmutex__suspects *sus, int *gone)
{
	int64_t due;

	/* The guarantee lapsed either way but the last. */
	*gone = rn->result != -1;
	if (*gone)
		dmutex__entry_mark_lost(e);
	/* A local hold on a kept lease: the other holds granted on it since
	 * its last confirmation are reported too. */
	if (rn->result == 0 && e->kept)
		dmutex__kept_gone(e, sus);
	/* Otherwise keep trying until the holder's own deadline, and be back
	 * at that deadline to report the loss. */
	due = now + RETRY_NS;
	if (!*gone && e->deadline_ns < due)
		due = e->deadline_ns;
	return due;
}

/* Under e->mu: decide for this hold while we still hold its lock: once we
 * let go, the owner may unlock and lock again, and a late removal would
 * take the new hold off the renewal list. */
static void
reschedule(struct dmutex_client *c, struct dmutex__entry *e, int64_t due)
{
	if (e->lost) {
		dmutex__renewer_remove(c, e);
		return;
	}
	dmutex__mu_lock(&c->renewer.mu, DMUTEX__LK_RENEWER, "renewer.mu");
	if (e->registered)
		e->due_ns = due;
	dmutex__mu_unlock(&c->renewer.mu, DMUTEX__LK_RENEWER);
}

/* The answer of one renewal, sent at t0, applied to a hold that is still
 * the same (generation gen). */
static void
apply(struct dmutex_client *c, struct dmutex__entry *e, const struct dmutex__renewal *rn,
		uint64_t gen, int64_t t0)
{
	struct dmutex__lost lost;
	struct dmutex__suspects sus = { 0 };
	int64_t now = dmutex__now_ns(), due;
	int gone = 0;

	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	if ((!e->held && !e->kept) || e->gen != gen || e->releasing) {
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		return;
	}
	if (!e->held && (rn->result == 0 || (rn->result != 1 && now >= e->deadline_ns))) {
		kept_lapsed(c, e, rn->result);
		return;
	}
	/* (A hold found gone is counted lost where it is reported.) */
	if (rn->result != 0)
		dmutex__met_count(e, rn->result == 1 ? DMUTEX__MET_RENEWALS
				: DMUTEX__MET_ERRORS);
	if (rn->result == 1 && t0 < e->deadline_ns)
		due = renewed(e, rn, t0);
	else
		due = not_renewed(e, rn, now, &sus, &gone);
	dmutex__entry_check_lost(e, now, &lost);
	/* A read share's new readers wait no longer (rwlock_lock.c). */
	if (e->lost && e->kind == DMUTEX__KIND_RW)
		dmutex__entry_wake(e);
	reschedule(c, e, due);
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	if (gone)
		dmutex__log(DMUTEX_LOG_WARN, "renewal of '%s': the lock is no longer ours", e->name);
	dmutex__lost_report(e, &lost);
	dmutex__kept_report(e, &sus);
}

/* One batch of renewals: snapshot under each entry's lock, one backend
 * call, then apply the answers to the holds that are still the same. */
static void
renew_batch(struct dmutex_client *c, struct dmutex__entry *const *es, size_t n, int64_t bound)
{
	struct batch b;
	size_t n_rw;
	int64_t t0;

	if (!batch_alloc(&b, n))
		goto out;
	snapshot(&b, es, dmutex__now_ns(), &bound);
	n_rw = n - b.nrw;
	/* Validity counts from before the request went out. */
	t0 = dmutex__now_ns();
	if (b.k)
		c->be->ops->renew(c->be, b.rn, b.k, bound);
	if (b.nrw)
		dmutex__rw_renew(c->be, b.rn + n_rw, b.nrw, bound);
	/* Both ends of rn, skipping the gap between them. */
	for (size_t i = b.k ? 0 : n_rw; i < n; i = i + 1 == b.k ? n_rw : i + 1)
		apply(c, b.live[i], &b.rn[i], b.gens[i], t0);
	for (size_t i = 0; i < b.nidle; i++)
		dmutex__renewer_give_back(b.idle[i],
				dmutex__now_ns() + (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS);
out:
	batch_free(&b);
}

/* One try of a rwlock's orphan: 0 done (released or not ours), EIO; 1 not
 * ours, answered before the hold's deadline with none of our requests
 * having run (o->sure): the hold had been lost.  The request carries no
 * deadline of its own, so the answer's arrival bounds when it ran. */
static int
orphan_rw_release(struct dmutex_client *c, struct dmutex__orphan *o)
{
	int released = 0, md = 0, err;

	if (o->sure && dmutex__now_ns() >= o->rep.valid_ns)
		o->sure = 0;
	err = dmutex__rw_release(c->be, o->name, o->mode & ~DMUTEX__ORPHAN_RW, o->token, &released,
			&md);
	if (err == EIO) {
		if (md)
			o->sure = 0;
		return EIO;
	}
	if (!err && !released && o->sure && dmutex__now_ns() < o->rep.valid_ns)
		return 1;
	return 0;
}

/* One try of an orphan's release, a mutex's by until (a rwlock's takes
 * its command timeout): 0 done, EIO; 1 the lock was certainly not ours
 * before the hold's deadline, nothing of ours having run (o->sure): the
 * hold had been lost.  o->sure cleared once that can no longer be known. */
static int
try_orphan(struct dmutex_client *c, struct dmutex__orphan *o, int64_t until)
{
	int err, ran;

	if (o->mode & DMUTEX__ORPHAN_RW)
		return orphan_rw_release(c, o);
	if (o->sure && dmutex__now_ns() >= o->rep.valid_ns)
		o->sure = 0;
	if (!o->sure)
		return dmutex__release_by(c, o->name, o->token, o->mode, until);
	/* Never past the hold's deadline: a "not ours" after it may be
	 * plain expiry (rel_settle.c, release_not_run). */
	err = dmutex__release_sure(c, o->name, o->token, o->mode,
			until < o->rep.valid_ns ? until : o->rep.valid_ns, &ran);
	if (err == ENOLCK)
		return 1;
	if (err == EIO && (ran || dmutex__now_ns() >= o->rep.valid_ns))
		o->sure = 0;
	return err == EIO ? EIO : 0;
}

/* An orphan's sure "not ours" (renewer.mu held on entry and on return,
 * dropped meanwhile; orphans[i] removed): reported as an asynchronous
 * release found not ours is (rel_settle.c): the lost metric, the log,
 * onlost unless its mutex was destroyed since (orphans_dismiss). */
static void
orphan_lost(struct dmutex_client *c, size_t i)
{
	struct dmutex__renewer *r = &c->renewer;
	struct dmutex__entry *e = r->orphans[i].rep.e;
	struct dmutex__lost lost = { .report = 1 };

	/* The entry's lock comes before ours; only this thread removes, so
	 * orphans[i] is still this one, wherever the array moved. */
	dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	dmutex__mu_lock(&r->mu, DMUTEX__LK_RENEWER, "renewer.mu");
	lost.fence = r->orphans[i].rep.fence;
	lost.cb = r->orphans[i].rep.cb;
	lost.arg = r->orphans[i].rep.arg;
	free(r->orphans[i].name);
	r->orphans[i] = r->orphans[--r->norphans];
	if (lost.cb)
		e->orphan_reporting++;
	dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	dmutex__met_count(e, DMUTEX__MET_LOST);
	dmutex__log(DMUTEX_LOG_ERROR, "release of '%s', unconfirmed and retried in the background, "
			"found the lock no longer ours, none of our requests having run: the hold had "
			"been lost", e->name);
	dmutex__lost_report(e, &lost);
	if (lost.cb) {
		dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
		e->orphan_reporting--;
		dmutex__entry_wake(e);
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	}
	dmutex__entry_put(e);
	dmutex__mu_lock(&r->mu, DMUTEX__LK_RENEWER, "renewer.mu");
}

/* renewer.mu held: whether a hold's renewal is due by now. */
static int
renewal_due(const struct dmutex__renewer *r, int64_t now)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->items[i]->due_ns <= now)
			return 1;
	return 0;
}

static void
retry_orphans(struct dmutex_client *c)
{
	struct dmutex__renewer *r = &c->renewer;
	int64_t now = dmutex__now_ns();
	int tried = 0;

	dmutex__mu_lock(&r->mu, DMUTEX__LK_RENEWER, "renewer.mu");
	for (size_t i = 0; i < r->norphans;) {
		struct dmutex__orphan o = r->orphans[i];
		struct dmutex__entry *e;
		int err;
		if (o.next_ns > now) {
			i++;
			continue;
		}
		/* A try may take a command timeout: k of them in a row (owed
		 * to a Cluster master that stalls, say) kept every other hold
		 * from its renewal for k timeouts, and a hold on a healthy
		 * master was lost.  A renewal that falls due goes first; one
		 * try a pass at least, so that no orphan waits for ever. */
		if (tried++ && renewal_due(r, now))
			break;
		dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
		err = try_orphan(c, &o, dmutex__now_ns() + (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS);
		dmutex__mu_lock(&r->mu, DMUTEX__LK_RENEWER, "renewer.mu");
		/* The array may have moved, but only this thread removes
		 * (and writes sure). */
		r->orphans[i].sure = o.sure;
		if (err == 1) {
			orphan_lost(c, i);
			now = dmutex__now_ns();
			continue;
		}
		now = dmutex__now_ns();
		if (err == EIO && now < o.until_ns) {
			r->orphans[i].next_ns = dmutex__now_ns() + 4 * RETRY_NS;
			i++;
			continue;
		}
		if (err == EIO)
			dmutex__log(DMUTEX_LOG_WARN, "gave up releasing '%s': its lease has ended anyway", o.name);
		e = r->orphans[i].rep.e;
		free(r->orphans[i].name);
		r->orphans[i] = r->orphans[--r->norphans];
		if (e) {
			/* Without our lock: the last reference takes the
			 * client's, which comes first. */
			dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
			dmutex__entry_put(e);
			dmutex__mu_lock(&r->mu, DMUTEX__LK_RENEWER, "renewer.mu");
		}
	}
	dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
}

/* renewer.mu held: the earliest renewal or orphan retry due. */
static int64_t
next_due(const struct dmutex__renewer *r)
{
	int64_t first = INT64_MAX;

	for (size_t i = 0; i < r->n; i++)
		if (r->items[i]->due_ns < first)
			first = r->items[i]->due_ns;
	for (size_t i = 0; i < r->norphans; i++)
		if (r->orphans[i].next_ns < first)
			first = r->orphans[i].next_ns;
	return first;
}

/* renewer.mu held on entry and on return.  The counters ride along: sent
 * from here, never from a lock call, and only while no renewal is due,
 * given up before the next one (and after METRICS_BUDGET_NS at most).
 * 1 if sent (renewer.mu dropped meanwhile); else 0, and *first moved to
 * the flush's time if that comes first. */
static int
flush_metrics(struct dmutex_client *c, int64_t now, int64_t *first)
{
	struct dmutex__renewer *r = &c->renewer;
	int64_t flush = dmutex__met_due(c);

	if (flush <= now && *first > now + METRICS_ROOM_NS) {
		int64_t budget = (int64_t)c->cfg.lease_ms * DMUTEX__MS / 10;
		int64_t until;
		if (budget > METRICS_BUDGET_NS)
			budget = METRICS_BUDGET_NS;
		until = now + budget < *first ? now + budget : *first;
		dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
		dmutex__entries_fold(c);
		dmutex__met_flush(c, until);
		dmutex__mu_lock(&r->mu, DMUTEX__LK_RENEWER, "renewer.mu");
		return 1;
	}
	if (flush < *first && (flush > now || *first > now + METRICS_ROOM_NS))
		*first = flush;
	return 0;
}

/* renewer.mu held: sleep until `until` (INT64_MAX: until signalled). */
static void
sleep_until(struct dmutex__renewer *r, int64_t until)
{
	struct timespec ts;

	if (until == INT64_MAX) {
		pthread_cond_wait(&r->cv, &r->mu);
		return;
	}
	dmutex__ns_to_ts(until, &ts);
	pthread_cond_timedwait(&r->cv, &r->mu, &ts);
}

/* renewer.mu held: room in *batch for every registered hold.  0 if there
 * is room for none at all. */
static int
batch_room(const struct dmutex__renewer *r, struct dmutex__entry ***batch, size_t *cap)
{
	if (*cap < r->n) {
		struct dmutex__entry **nb = realloc(*batch, r->n * sizeof *nb);
		if (nb) {
			*batch = nb;
			*cap = r->n;
		}
	}
	return !(*cap < r->n && !*cap);
}

/* renewer.mu held: everything due soon rides in this batch (fewer round
 * trips), each with a reference, kept alive while used unlocked.
 * *others: when the first hold left for later must be renewed by. */
static size_t
take_due(struct dmutex__renewer *r, struct dmutex__entry **batch, size_t cap, int64_t now,
		int64_t *others)
{
	size_t n = 0;

	*others = INT64_MAX;
	for (size_t i = 0; i < r->n; i++) {
		struct dmutex__entry *e = r->items[i];
		if (n < cap && e->due_ns <= now + batch_slack(e->lease_ms)) {
			__atomic_fetch_add(&e->refs, 1, __ATOMIC_ACQ_REL);
			e->due_ns = now + renew_interval(e->lease_ms);
			batch[n++] = e;
		} else if (e->due_ns + renew_interval(e->lease_ms) < *others) {
			/* A hold left for later can wait for us until a
			 * renewal interval past its due time: that leaves it
			 * most of a third of its lease to be renewed after the
			 * batch returns. */
			*others = e->due_ns + renew_interval(e->lease_ms);
		}
	}
	return n;
}

/* Without renewer.mu: renew the batch, then retry the orphan releases. */
static void
renew_taken(struct dmutex_client *c, struct dmutex__entry **batch, size_t n, int64_t others)
{
	if (n) {
		/* The batch may take until the earliest lease deadline it
		 * guards (renew_batch), but a stuck one must not keep the
		 * holds left for later from their own renewal.  Ending it
		 * when the next hold merely fell due (as before) gave it as
		 * little as a millisecond with many holds taken one after
		 * another: at load 20, 100,000 holds timed out batch after
		 * batch until their leases ran out. */
		renew_batch(c, batch, n, others);
		for (size_t i = 0; i < n; i++)
			dmutex__entry_put(batch[i]);
	}
	retry_orphans(c);
}

static void *
renewer_main(void *arg)
{
	struct dmutex_client *c = arg;
	struct dmutex__renewer *r = &c->renewer;
	struct dmutex__entry **batch = NULL;
	size_t cap = 0;

	dmutex__own_thread_begin();
	dmutex__mu_lock(&r->mu, DMUTEX__LK_RENEWER, "renewer.mu");
	while (!r->stop) {
		int64_t now = dmutex__now_ns(), first = next_due(r), others;
		size_t n;

		if (r->nrels && r->rels_due_ns <= now) {
			settle_rels(c, first);
			continue;
		}
		if (r->nrels && r->rels_due_ns < first)
			first = r->rels_due_ns;
		if (flush_metrics(c, now, &first))
			continue;
		if (first > now) {
			r->wake_ns = first;
			/* At least once a second: whether the program has ended
			 * under us (base.h, dmutex__exit_if_alone). */
			dmutex__exit_if_alone();
			if (first - now > DMUTEX__ALONE_LOOK_MS * DMUTEX__MS)
				first = now + DMUTEX__ALONE_LOOK_MS * DMUTEX__MS;
			sleep_until(r, first);
			continue;
		}
		r->wake_ns = INT64_MIN;         /* busy: it will look again */
		if (!batch_room(r, &batch, &cap)) {
			/* No memory for even one: wait a little rather than spin. */
			sleep_until(r, dmutex__now_ns() + RETRY_NS);
			continue;
		}
		n = take_due(r, batch, cap, now, &others);
		dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
		renew_taken(c, batch, n, others);
		dmutex__mu_lock(&r->mu, DMUTEX__LK_RENEWER, "renewer.mu");
	}
	dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
	dmutex__own_thread_end();
	free(batch);
	return NULL;
}

/* The thread has stopped: one last try of each release still owed (a
 * timed lock that gave up just before the program closed its client, as
 * `dmutex run` does when a signal ends its wait), all within one command
 * timeout, so that close is bounded and a lock its server grants late is
 * not left held until its lease ends. */
static void
last_orphan_tries(struct dmutex_client *c)
{
	struct dmutex__renewer *r = &c->renewer;
	int64_t by = dmutex__now_ns() + (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS;

	for (size_t i = 0; i < r->norphans; i++) {
		/* No report (sure 0): the client is closing, its mutexes
		 * destroyed (dmutex_client_close) or the process ending;
		 * a loss found now would go to nobody who can act. */
		struct dmutex__orphan o = r->orphans[i];
		int64_t now = dmutex__now_ns();

		if (now >= by)
			break;
		if (now >= o.until_ns)
			continue;
		o.sure = 0;
		try_orphan(c, &o, o.until_ns < by ? o.until_ns : by);
	}
}

void
dmutex__renewer_stop(struct dmutex_client *c)
{
	struct dmutex__renewer *r = &c->renewer;
	int running;

	dmutex__mu_lock(&r->mu, DMUTEX__LK_RENEWER, "renewer.mu");
	running = r->running;
	r->stop = 1;
	pthread_cond_signal(&r->cv);
	dmutex__mu_unlock(&r->mu, DMUTEX__LK_RENEWER);
	if (running)
		pthread_join(r->thread, NULL);
	r->running = 0;
	last_orphan_tries(c);
	/* Releases still unanswered: closing the connections settles them
	 * (their lease ends them anyway); the entries' references go. */
	for (size_t i = 0; i < r->nrels; i++) {
		r->rels[i]->rel_watched = 0;
		dmutex__entry_put(r->rels[i]);
	}
	free(r->rels);
	r->rels = NULL;
	r->nrels = r->rels_cap = 0;
	for (size_t i = 0; i < r->norphans; i++) {
		free(r->orphans[i].name);
		if (r->orphans[i].rep.e)
			dmutex__entry_put(r->orphans[i].rep.e);
	}
	free(r->orphans);
	free(r->items);
	r->orphans = NULL;
	r->items = NULL;
	r->n = r->cap = r->norphans = r->orphans_cap = 0;
}

void
dmutex__renewer_atfork_child(struct dmutex__renewer *r)
{
	/* The thread did not come along; its queues were the parent's (the
	 * references go without a lock, as below). */
	for (size_t i = 0; i < r->norphans; i++) {
		free(r->orphans[i].name);
		if (r->orphans[i].rep.e)
			__atomic_fetch_sub(&r->orphans[i].rep.e->refs, 1, __ATOMIC_ACQ_REL);
	}
	r->norphans = 0;
	r->n = 0;
	/* The parent's releases are the parent's to answer (entry_rel_drop); the
	 * references go without a lock (the table's is the parent's). */
	for (size_t i = 0; i < r->nrels; i++) {
		r->rels[i]->rel_watched = 0;
		__atomic_fetch_sub(&r->rels[i]->refs, 1, __ATOMIC_ACQ_REL);
	}
	r->nrels = 0;
	r->running = 0;
	r->stop = 0;
	pthread_mutex_init(&r->mu, NULL);
	dmutex__cond_init_mono(&r->cv);
}
