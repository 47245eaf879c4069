/*
 * The record of a kept lease (lease_cache.c, README "Cached leases"): the
 * holds granted on it since Redis last confirmed it (e->suspects, one
 * record per onlost handler), which are reported lost as soon as anyone
 * finds the key gone or not ours (the renewer, a block reservation, the
 * release), and whether another process asked for the lock.  Under the
 * renewer, which calls it on every renewal and give-back, and under the
 * lock and unlock paths of lease_cache.c; it calls only hold.c below it.
 */
#include <errno.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "internal.h"
#include "base/lockorder.h"
#include "metrics.h"

int
dmutex__kept_revoked(const struct dmutex__entry *e)
{
	return !e->ksub || dmutex__wsub_seq(e->client->be, e->ksub) != e->kseq;
}

int
dmutex__kept_asked(const struct dmutex__entry *e)
{
	struct dmutex__backend *be = e->client->be;
	uint64_t heard, seq;

	if (!e->ksub)
		return 1;
	/* Heard first: a message moves it before the sequence, so equal
	 * differences mean no other move before the sequence was read. */
	heard = dmutex__wsub_heard(be, e->ksub);
	seq = dmutex__wsub_seq(be, e->ksub);
	return seq - e->kseq == heard - e->kheard;
}

void
dmutex__kept_confirmed(struct dmutex__entry *e, int64_t sent)
{
	size_t k = 0;

	e->confirmed_ns = sent;
	for (size_t i = 0; i < e->nsuspects; i++)
		if (!e->suspects[i].end_ns || e->suspects[i].end_ns >= sent)
			e->suspects[k++] = e->suspects[i];
	e->nsuspects = k;
}

void
dmutex__kept_gone(struct dmutex__entry *e, struct dmutex__suspects *out)
{
	size_t k = 0;

	out->v = e->suspects;
	out->n = 0;
	out->since_ns = e->confirmed_ns;
	for (size_t i = 0; i < e->nsuspects; i++) {
		/* The hold running now is reported as any hold found lost
		 * (dmutex__entry_check_lost, by the caller), with its
		 * handler: once per handler. */
		if (e->held && !e->suspects[i].end_ns) {
			dmutex__entry_mark_lost(e);
			continue;
		}
		e->suspects[k++] = e->suspects[i];
	}
	out->n = k;
	e->suspects = NULL;
	e->nsuspects = e->suspects_cap = 0;
}

void
dmutex__kept_release_answered(struct dmutex__entry *e, int err, int lost, int was_kept,
		struct dmutex__lost *rep, struct dmutex__suspects *sus)
{
	dmutex__entry_release_answered(e, err, lost, rep);
	if (err == ENOLCK && was_kept && e->kept)
		dmutex__kept_gone(e, sus);
}

void
dmutex__kept_report(struct dmutex__entry *e, struct dmutex__suspects *s)
{
	for (size_t i = 0; i < s->n; i++) {
		const struct dmutex__suspect *x = &s->v[i];
		dmutex__met_count(e, DMUTEX__MET_LOST);
		dmutex__log(DMUTEX_LOG_WARN, "lost the hold of '%s': its kept lease was found gone; "
				"%zu local hold%s granted on it since Redis last confirmed it (fences %llu..%llu) "
				"may have overlapped another holder", e->name, x->holds, x->holds == 1 ? "" : "s",
				(unsigned long long)x->fence_lo, (unsigned long long)x->fence_hi);
		if (x->cb)
			x->cb(e->name, x->arg);
	}
	free(s->v);
	s->v = NULL;
	s->n = 0;
}

void
dmutex__kept_forget(struct dmutex__entry *e, int gone)
{
	struct dmutex__suspects sus = { 0 };

	if (gone)
		dmutex__kept_gone(e, &sus);
	dmutex__entry_forget_kept(e);
	dmutex__entry_forget(e);
	if (!sus.n) {
		free(sus.v);
		return;
	}
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	dmutex__kept_report(e, &sus);
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
}
