/* Per-process lock records: one entry per (client, name), shared by every
 * dmutex_t of that name, holding the current hold's token, depth, fence,
 * deadline and lost flag.  The hold table belongs to its client; this file
 * reads only the client fields internal.h gives it (mu, tab, held,
 * cfg.metrics) and is the bottom of the core: it calls no other file of
 * it but the counters (see "Who calls whom" in internal.h).  Forgetting a
 * hold forgets what hangs on the entry with it (a kept lease, a pending
 * release), so that is done here too. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/lockorder.h"
#include "internal.h"
#include "metrics.h"

static size_t
hash(const char *s)
{
	size_t h = 1469598103934665603ULL & (size_t)-1;
	while (*s)
		h = (h ^ (unsigned char)*s++) * (size_t)1099511628211ULL;
	return h;
}

static int
grow(struct dmutex_client *c)
{
	size_t ns = c->tab_size ? c->tab_size * 2 : 64;
	struct dmutex__entry **nt = calloc(ns, sizeof *nt);

	if (!nt)
		return ENOMEM;
	for (size_t i = 0; i < c->tab_size; i++) {
		struct dmutex__entry *e = c->tab[i], *next;
		for (; e; e = next) {
			next = e->next;
			e->next = nt[hash(e->name) & (ns - 1)];
			nt[hash(e->name) & (ns - 1)] = e;
		}
	}
	free(c->tab);
	c->tab = nt;
	c->tab_size = ns;
	return 0;
}

void
dmutex__entry_init_sync(struct dmutex__entry *e)
{
	pthread_mutex_init(&e->mu, NULL);
	dmutex__cond_init_mono(&e->cv);
	dmutex__cond_init_mono(&e->turn_cv);
	/* In a fork child, the parent's waiting threads are not here. */
	e->turn_waiters = 0;
}

void
dmutex__entry_wake(struct dmutex__entry *e)
{
	pthread_cond_broadcast(&e->cv);
	/* One, and only when there is a turn to take (nobody of ours holds
	 * or asks; every change back to that calls us): the one woken holds
	 * or asks before the next looks, and one that gives up instead
	 * wakes the next. */
	if (e->turn_waiters && !e->held && !e->acquiring)
		pthread_cond_signal(&e->turn_cv);
	/* A fair waiter goes on only once it is first in line (or granted,
	 * which only the first is); the one behind it is woken when it
	 * leaves.  Under e->mu, so a waiter that left the queue (and then
	 * destroys its cv) is never signalled. */
	if (e->fifo_head)
		pthread_cond_signal(&e->fifo_head->cv);
}

int
dmutex__entry_get(struct dmutex_client *c, const char *name, struct dmutex__entry **out)
{
	return dmutex__entry_get_kind(c, name, DMUTEX__KIND_MUTEX, out);
}

int
dmutex__entry_get_kind(struct dmutex_client *c, const char *name, int kind,
		struct dmutex__entry **out)
{
	struct dmutex__entry *e;
	size_t len = strlen(name);

	pthread_mutex_lock(&c->mu);
	if (c->tab_size) {
		for (e = c->tab[hash(name) & (c->tab_size - 1)]; e; e = e->next)
			if (e->name_len == len && e->kind == kind && !memcmp(e->name, name, len)) {
				__atomic_fetch_add(&e->refs, 1, __ATOMIC_ACQ_REL);
				pthread_mutex_unlock(&c->mu);
				*out = e;
				return 0;
			}
	}
	if ((c->n_entries + 1) * 2 > c->tab_size && grow(c)) {
		pthread_mutex_unlock(&c->mu);
		return ENOMEM;
	}
	if (!(e = calloc(1, sizeof *e + len + 1))) {
		pthread_mutex_unlock(&c->mu);
		return ENOMEM;
	}
	e->client = c;
	e->refs = 1;
	e->name_len = len;
	e->kind = kind;
	memcpy(e->name, name, len + 1);
	dmutex__entry_init_sync(e);
	e->next = c->tab[hash(name) & (c->tab_size - 1)];
	c->tab[hash(name) & (c->tab_size - 1)] = e;
	c->n_entries++;
	pthread_mutex_unlock(&c->mu);
	*out = e;
	return 0;
}

void
dmutex__entry_put(struct dmutex__entry *e)
{
	struct dmutex_client *c = e->client;
	struct dmutex__entry **pp;
	unsigned r = __atomic_load_n(&e->refs, __ATOMIC_RELAXED);

	/* Not the last reference (a thread's hold ending, mostly): the entry
	 * stays in the table, no lock needed.  Only the last one, taken
	 * under c->mu, may meet a lookup adding one meanwhile. */
	while (r > 1)
		if (__atomic_compare_exchange_n(&e->refs, &r, r - 1, 1, __ATOMIC_ACQ_REL,
					__ATOMIC_RELAXED))
			return;
	pthread_mutex_lock(&c->mu);
	/* Atomic: the renewer takes refs under its own lock, not ours. */
	if (__atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL)) {
		pthread_mutex_unlock(&c->mu);
		return;
	}
	for (pp = &c->tab[hash(e->name) & (c->tab_size - 1)]; *pp != e; pp = &(*pp)->next)
		;
	*pp = e->next;
	c->n_entries--;
	pthread_mutex_unlock(&c->mu);
	/* An unanswered release goes on without us (its connection keeps it). */
	dmutex__entry_rel_drop(e);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->cv);
	pthread_cond_destroy(&e->turn_cv);
	free(e->readers);
	free(e->rw_gone);
	free(e);
}

void
dmutex__entry_rel_drop(struct dmutex__entry *e)
{
	struct dmutex__rel_ticket *t = e->rel;

	__atomic_store_n(&e->rel, NULL, __ATOMIC_RELEASE);
	dmutex__ticket_put(t);
}

void
dmutex__entry_mark_lost(struct dmutex__entry *e)
{
	e->lost = 1;
}

void
dmutex__entry_hold(struct dmutex__entry *e, const char *token, uint64_t fence, unsigned lease_ms,
		int64_t sent)
{
	memcpy(e->token, token, sizeof e->token);
	e->held = 1;
	e->owner = pthread_self();
	e->depth = 1;
	e->fence = fence;
	e->lease_ms = lease_ms;
	/* Our deadline counts from before the request was sent. */
	e->deadline_ns = sent + (int64_t)lease_ms * DMUTEX__MS - DMUTEX__DRIFT_NS(lease_ms);
	e->lost = e->lost_reported = 0;
	e->held_counted = 1;
	__atomic_fetch_add(&e->client->held, 1, __ATOMIC_ACQ_REL);
}

void
dmutex__entry_check_lost(struct dmutex__entry *e, int64_t now, struct dmutex__lost *out)
{
	out->report = 0;
	if (!e->held)
		return;
	if (now >= e->deadline_ns)
		e->lost = 1;
	if (!e->lost || e->lost_reported)
		return;
	e->lost_reported = 1;
	dmutex__met_count(e, DMUTEX__MET_LOST);
	/* The hold ended here, whenever (if ever) its owner unlocks. */
	dmutex__entry_end_counted(e, now);
	out->report = 1;
	out->fence = e->fence;
	out->cb = e->onlost;
	out->arg = e->onlost_arg;
}

void
dmutex__entry_backoff(struct dmutex__entry *e, int attempt, struct dmutex__lost *lost)
{
	int64_t wake = dmutex__now_ns() + dmutex__backoff_ns(attempt);

	if (wake > e->deadline_ns)
		wake = e->deadline_ns;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	dmutex__sleep_until(wake);
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	dmutex__entry_check_lost(e, dmutex__now_ns(), lost);
}

void
dmutex__entry_release_answered(struct dmutex__entry *e, int err, int lost,
		struct dmutex__lost *rep)
{
	rep->report = 0;
	if (err != ENOLCK || lost)
		return;
	/* Taken from us without our noticing: report it as lost. */
	dmutex__entry_mark_lost(e);
	dmutex__entry_check_lost(e, dmutex__now_ns(), rep);
}

void
dmutex__lost_report(const struct dmutex__entry *e, const struct dmutex__lost *l)
{
	if (!l->report)
		return;
	/* Outside e->mu: a user's logger or handler may call into us. */
	dmutex__log(DMUTEX_LOG_WARN, "lost the hold of '%s' (fence %llu)", e->name,
			(unsigned long long)l->fence);
	if (l->cb)
		l->cb(e->name, l->arg);
}

void
dmutex__entry_count_hold(struct dmutex__entry *e, int64_t since)
{
	/* No clock read at its end when nothing is counted. */
	e->counted_ns = e->client->cfg.metrics ? since : 0;
}

int64_t
dmutex__entry_take_counted(struct dmutex__entry *e, int64_t now)
{
	int64_t since = e->counted_ns;

	if (!since)
		return -1;
	e->counted_ns = 0;
	return now > since ? now - since : 0;
}

void
dmutex__entry_count_local_acq(struct dmutex__entry *e)
{
	if (!e->client->cfg.metrics)
		return;
	e->met_local.acq++;
	if (!e->met_queued)
		dmutex__met_queue(e);
}

void
dmutex__entry_count_local_end(struct dmutex__entry *e, int64_t held_ns)
{
	if (held_ns < 0)
		return;
	e->met_local.holds++;
	e->met_local.hold_us += (uint64_t)held_ns / 1000;
	e->met_local.hold_b[dmutex__met_bucket(held_ns)]++;
	if (!e->met_queued)
		dmutex__met_queue(e);
}

void
dmutex__entries_fold(struct dmutex_client *c)
{
	struct dmutex__entry *e = dmutex__met_fold_begin(c), *next;
	struct dmutex__met_local l;

	for (; e; e = next) {
		dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
		next = e->met_next;
		l = e->met_local;
		memset(&e->met_local, 0, sizeof e->met_local);
		e->met_queued = 0;
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		dmutex__met_fold(e, &l);
		/* The list's reference: the last one, if every mutex of the
		 * name went meanwhile. */
		dmutex__entry_put(e);
	}
	dmutex__met_fold_end(c);
}

void
dmutex__entry_end_counted(struct dmutex__entry *e, int64_t now)
{
	dmutex__met_hold_ended(e, dmutex__entry_take_counted(e, now));
}

void
dmutex__entry_forget(struct dmutex__entry *e)
{
	/* Unlocks end it with their own clock read: here only the ends that
	 * do not (a thread or process ending while holding). */
	if (e->counted_ns)
		dmutex__entry_end_counted(e, dmutex__now_ns());
	if (e->held && e->held_counted)
		__atomic_fetch_sub(&e->client->held, 1, __ATOMIC_ACQ_REL);
	e->held = 0;
	e->held_counted = 0;
	e->depth = 0;
	e->releasing = 0;
	e->lost = 0;
	e->lost_reported = 0;
	e->inconsistent = 0;
	e->rw_write = 0;
	e->rw_remote_wwait = 0;
	e->nreaders = 0;
	e->gen++;
	memset(e->token, 0, sizeof e->token);
	/* No lease left to keep either. */
	dmutex__entry_forget_kept(e);
	dmutex__entry_wake(e);
}

void
dmutex__entry_forget_kept(struct dmutex__entry *e)
{
	/* Read without e->mu by dmutex__renewer_kick, as a hint. */
	__atomic_store_n(&e->kept, 0, __ATOMIC_RELAXED);
	/* No token reserved (lease_cache.c: blk_next past blk_last). */
	e->blk_next = 1;
	e->blk_last = 0;
	e->batch_left = 0;
	e->batch_until_ns = 0;
	/* Anything to report was taken (dmutex__kept_gone) before. */
	free(e->suspects);
	e->suspects = NULL;
	e->nsuspects = e->suspects_cap = 0;
	if (e->ksub) {
		dmutex__waiter_unsub_notify(e->client->be, e->ksub);
		e->ksub = NULL;
	}
}
