#include <errno.h>
#include <string.h>

#include "core/fair_handoff.h"
#include "core/internal.h"
#include "core/metrics.h"
#include "base/lockorder.h"

/* What an outermost unlock releases, taken under the entry's mutex. */
struct release {
	char token[DMUTEX__TOKEN_HEX + 1];
	unsigned lease_ms;
	int mode;
	int lost;                       /* the hold was found lost: ENOLCK */
	int was_kept;                   /* it ran on a kept lease */
	struct dmutex__orphan_rep rep;  /* if its release goes to the orphans */
	struct dmutex__offer offer;
	struct dmutex__handoff *next;   /* a fair lock's next thread of ours */
};

/* locked: NULL, or m's object with its entry's mutex held (unlock_fast).
 * 0 and *out m's object, its entry's mutex held, if the calling thread
 * holds it and is not releasing it already; else the error, the mutex
 * not held. */
static int
lock_own(dmutex_t *m, struct dmutex__mutex *locked, struct dmutex__mutex **out)
{
	struct dmutex__mutex *mx = locked;
	struct dmutex__entry *e;
	int err;

	if (!mx) {
		if ((err = dmutex__resolve(m, &mx)))
			return err;
		dmutex__mu_lock(&mx->entry->mu, DMUTEX__LK_ENTRY, "entry.mu");
	}
	e = mx->entry;
	if (!e->held || !pthread_equal(e->owner, pthread_self()) || e->releasing) {
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		/* Not ours to unlock.  The last release of it, if still
		 * unanswered, is waited for and acted on first (onlost, if it
		 * was not ours): what Redis holds is known when this returns,
		 * as the header says; the loss is not this call's to return. */
		dmutex__rel_settle_now(e);
		return EPERM;
	}
	*out = mx;
	return 0;
}

/* Under e->mu, the hold's outermost unlock that does not keep the lease:
 * what to release, how and to whom; the hold is being released from now. */
static void
prepare(struct dmutex__entry *e, int lost, struct release *rel)
{
	/* A lost hold is forgotten whole, however deep: the caller was told. */
	rel->lost = lost;
	rel->mode = lost ? DMUTEX__REL_DIED : e->inconsistent ? DMUTEX__REL_NOTREC
		: DMUTEX__REL_CLEAN;
	rel->next = NULL;
	if (e->fair) {
		rel->mode |= DMUTEX__REL_FAIR;
		/* The next thread of ours in line may get it with the release
		 * (fair_handoff.c); never past a hold found not recoverable. */
		if (rel->mode != (DMUTEX__REL_NOTREC | DMUTEX__REL_FAIR))
			rel->next = dmutex__fair_offer(e, &rel->offer);
	}
	memcpy(rel->token, e->token, sizeof rel->token);
	rel->lease_ms = e->lease_ms;
	/* The last hold of a kept lease: if the release finds the key not
	 * ours, the other holds granted on it since its last confirmation
	 * must be reported too, so it waits for the answer. */
	rel->was_kept = e->kept;
	/* Unconfirmed, the release goes on in the background (EIO): a "not
	 * ours" it finds before this hold's deadline, no request of ours
	 * having run, is this hold's loss (renewer.c, orphan_lost).  Not a
	 * hold lost already (reported), nor one on a kept lease (its
	 * suspects are reported by its release: kept_lease.c). */
	rel->rep = (struct dmutex__orphan_rep){ 0 };
	if (!lost && !rel->was_kept)
		rel->rep = (struct dmutex__orphan_rep){ .e = e, .valid_ns = e->deadline_ns,
			.fence = e->fence, .cb = e->onlost, .arg = e->onlost_arg };
	e->releasing = 1;
}

/* Without e->mu: release and wait for the answer, then end the hold and
 * report what the answer found; the unlock's result. */
static int
release_sync(struct dmutex__entry *e, struct release *rel, int64_t until)
{
	struct dmutex_client *c = e->client;
	struct dmutex__lost lost_rep;
	struct dmutex__suspects sus = { 0 };
	int64_t sent = dmutex__now_ns();
	int err, pass = 0;

	err = dmutex__renewer_release_rep(c, e->name, rel->token, rel->mode, until, rel->next,
			rel->lease_ms, &rel->rep);
	if ((rel->mode & ~DMUTEX__REL_FAIR) == DMUTEX__REL_NOTREC && !err)
		dmutex__log(DMUTEX_LOG_WARN, "'%s' unlocked after EOWNERDEAD without dmutex_consistent: "
				"it is not recoverable until reset", e->name);

	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	dmutex__kept_release_answered(e, err, rel->lost, rel->was_kept, &lost_rep, &sus);
	dmutex__entry_forget(e);
	/* After the hold is forgotten: the next thread takes it now. */
	if (rel->next)
		pass = dmutex__fair_answer(e, &rel->offer, err, sent);
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	if (pass)
		dmutex__fair_pass(e, &rel->offer);
	/* Once the hold is ours no more, another thread may take the mutex,
	 * release and destroy it: our own reference keeps e for the reports. */
	__atomic_fetch_add(&e->refs, 1, __ATOMIC_ACQ_REL);
	dmutex__thread_unhold(e);
	dmutex__lost_report(e, &lost_rep);
	dmutex__kept_report(e, &sus);
	dmutex__entry_put(e);
	if (rel->lost)
		return ENOLCK;
	return err;
}

/* locked: NULL, or m's object, resolved by unlock_fast, which holds its
 * entry's mutex.  ticket: NULL, or where an asynchronous release leaves a
 * reference to its ticket (a condition wait's). */
static int
unlock_impl(dmutex_t *m, struct dmutex__mutex *locked, struct dmutex__rel_ticket **ticket)
{
	struct dmutex__mutex *mx;
	struct dmutex__entry *e;
	struct dmutex_client *c;
	struct dmutex__lost lost_rep;
	struct release rel;
	int err, lost;
	int64_t now, held, until;

	if ((err = lock_own(m, locked, &mx)))
		return err;
	e = mx->entry;
	c = e->client;
	now = dmutex__now_ns();
	/* One deadline for the whole call: keeping the lease (a subscription
	 * and a script) and the release that may follow share it. */
	until = now + (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS;
	dmutex__entry_check_lost(e, now, &lost_rep);
	lost = e->lost;
	if (!lost && e->depth > 1) {
		/* Only the outermost unlock talks to the backend. */
		e->depth--;
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		return 0;
	}
	/* The hold ends now, whatever the release below says (a hold lost
	 * ended when the loss was found: nothing left to end). */
	held = dmutex__entry_take_counted(e, now);
	if (!lost && !e->inconsistent && dmutex__cache_unlock(mx, e, now, until)) {
		/* The process keeps the lease: no release (lease_cache.c). */
		dmutex__entry_count_local_end(e, held);
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		dmutex__thread_unhold(e);
		return 0;
	}
	prepare(e, lost, &rel);
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	dmutex__lost_report(e, &lost_rep);
	dmutex__met_hold_ended(e, held);

	/* No renewal may outlive the unlock; the release below is compare-and-
	 * delete by token, so one already in flight cannot resurrect it. */
	dmutex__renewer_remove(c, e);
	/* Without waiting for the answer (unlock_async.c): Redis runs it
	 * before anything we send on that connection next. */
	if (rel.mode == DMUTEX__REL_CLEAN && !rel.was_kept &&
			!dmutex__unlock_async_ticket(e, rel.token, rel.lease_ms, now, ticket)) {
		dmutex__thread_unhold(e);
		return 0;
	}
	return release_sync(e, &rel, until);
}

/*
 * Two common cases: an inner unlock of a recursive hold (the hold ours,
 * not being released, not lost and its deadline well ahead: the whole way
 * would only count one level less), and the outermost unlock of a hold on
 * a kept lease that stays kept.  No cancellation point on the way: no pthread_setcancelstate pair
 * (cancel.c).  1 if done; else 0 and *locked as unlock_impl takes
 * it (the entry's mutex held, not taken twice).
 */
static int
unlock_fast(dmutex_t *m, struct dmutex__mutex **locked)
{
	struct dmutex__mutex *mx = dmutex__resolve_bound(m);
	struct dmutex__entry *e;

	*locked = NULL;
	if (!mx)
		return 0;
	e = mx->entry;
	DMUTEX__LO_SELF(lo);
	dmutex__mu_lock_by(lo, &e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	if (e->held && e->depth > 1 && pthread_equal(e->owner, pthread_self()) && !e->releasing &&
			!e->lost && dmutex__now_before(e->deadline_ns)) {
		e->depth--;
		dmutex__mu_unlock_by(lo, &e->mu, DMUTEX__LK_ENTRY);
		return 1;
	}
	/* The outermost unlock of a sound hold of a lease the process keeps,
	 * which it keeps again (lease_cache.c). */
	if (e->held && e->depth == 1 && e->kept && pthread_equal(e->owner, pthread_self()) &&
			!e->releasing && !e->lost && !e->inconsistent) {
		int64_t now = dmutex__now_ns();

		if (now < e->deadline_ns && dmutex__cache_unlock_local(mx, e, now)) {
			/* Counted in e: no counters' mutex on this path. */
			dmutex__entry_count_local_end(e, dmutex__entry_take_counted(e, now));
			dmutex__mu_unlock_by(lo, &e->mu, DMUTEX__LK_ENTRY);
			dmutex__thread_unhold(e);
			return 1;
		}
	}
	*locked = mx;
	return 0;
}

int
dmutex__unlock_impl(dmutex_t *m)
{
	return unlock_impl(m, NULL, NULL);
}

int
dmutex__unlock_for_wait(dmutex_t *m, struct dmutex__rel_ticket **ticket)
{
	*ticket = NULL;
	return unlock_impl(m, NULL, ticket);
}

int
dmutex_unlock(dmutex_t *m)
{
	struct dmutex__mutex *locked;
	int cs, err;

	if (unlock_fast(m, &locked))
		return 0;
	cs = dmutex__nocancel();
	err = unlock_impl(m, locked, NULL);

	dmutex__cancel_restore(cs);
	return err;
}
