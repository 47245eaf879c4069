/*
 * The answer of an asynchronous release (unlock_async.c, README
 * "Asynchronous release"), read and acted on: not ours -> the hold is
 * reported lost (log, onlost), never to a later call; no answer -> released
 * again, here by the caller's deadline, and in the background; an answer
 * that says it did not run (an error: -LOADING after a restart, READONLY,
 * BUSY) -> released again here, asking until an answer is sure or the
 * deadline passes, and a "not ours" then is reported as one above (the
 * background only if no answer came).  Before an
 * acquire of the name in this process (so that it cannot reach Redis before
 * our own release) and by the renewal thread soon after the answer
 * arrives.  Below the renewer: it calls hold.c and release.c, and hands a
 * release it could not finish to the renewer's orphans, as the rescue of
 * a release that may not have run does (unlock_async.c), through the
 * client's upcalls (c->up, set by client.c), never by a call up.
 */
#include <errno.h>
#include <string.h>

#include "backend/backend.h"
#include "internal.h"
#include "base/lockorder.h"
#include "metrics.h"

/* A release whose first try certainly did not run (its answer was an
 * error), asked again by `by`, and never past valid, the hold's own
 * deadline (after it, the key may simply have expired): 1 the lock was
 * not ours, and nothing of ours released it, so the hold had been lost;
 * 0 done (released; or one that may have run: the background has it, and
 * a "not ours" there proves nothing; or the hold's deadline has passed,
 * and the background has it as well); -1 refused again (still loading,
 * say): to be asked again later, by the caller. */
static int
release_not_run(struct dmutex__entry *e, const char *token, int64_t by, int64_t valid,
		int64_t token_until)
{
	struct dmutex_client *c = e->client;
	int err, ran;

	err = dmutex__release_sure(c, e->name, token, DMUTEX__REL_CLEAN, by < valid ? by : valid,
			&ran);
	if (err != EIO)
		return err == ENOLCK;
	if (!ran && dmutex__now_ns() < valid)
		return -1;
	if (!__atomic_load_n(&c->closing, __ATOMIC_ACQUIRE))
		c->up.orphan(c, e->name, token, DMUTEX__REL_CLEAN, token_until);
	return 0;
}

/* A release refused again: t back in e (a reference of its own), for the
 * renewal thread to ask again soon, unless e has another release since
 * (then the background has this one, and reports it as rep says: none of
 * its requests ran so far). */
static void
requeue(struct dmutex__entry *e, struct dmutex__rel_ticket *t, const char *token,
		int64_t token_until, const struct dmutex__orphan_rep *rep)
{
	int back = 0;

	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	if (!e->rel && !memcmp(e->rel_token, token, sizeof e->rel_token)) {
		dmutex__ticket_ref(t);
		__atomic_store_n(&e->rel, t, __ATOMIC_RELEASE);
		back = 1;
	}
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	if (back)
		e->client->up.watch_rel(e->client, e);
	else if (!__atomic_load_n(&e->client->closing, __ATOMIC_ACQUIRE))
		e->client->up.orphan_rep(e->client, e->name, token, DMUTEX__REL_CLEAN, token_until,
				rep);
}

int
dmutex__rel_settle(struct dmutex__entry *e, int64_t until)
{
	struct dmutex__rel_ticket *t;
	struct dmutex__lost lost = { 0 };
	char token[DMUTEX__TOKEN_HEX + 1];
	int64_t token_until = 0, valid = 0;
	int st, not_run = 0;

	/* The common case, nothing pending, costs no lock and no clock read
	 * (a recursive re-lock is a few of those). */
	if (!__atomic_load_n(&e->rel, __ATOMIC_ACQUIRE))
		return 1;
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	if (!(t = e->rel)) {
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		return 1;
	}
	dmutex__ticket_ref(t);
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);

	st = dmutex__ticket_wait(t, until);

	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	/* Another thread may have acted on it meanwhile. */
	if (e->rel == t && st != DMUTEX__TICKET_PENDING) {
		__atomic_store_n(&e->rel, NULL, __ATOMIC_RELEASE);
		dmutex__ticket_put(t);          /* the entry's */
		if (st == DMUTEX__TICKET_NOT_OURS) {
			/* The hold had been lost unnoticed; its unlock is over, so
			 * the report is the handler and the log: no later call
			 * of any thread says ENOLCK for it (issue 25: a lock
			 * call that did not lock never reports a loss). */
			dmutex__met_count(e, DMUTEX__MET_LOST);
			lost.report = 1;
			lost.fence = e->rel_fence;
			lost.cb = e->rel_onlost;
			lost.arg = e->rel_onlost_arg;
		} else if (st == DMUTEX__TICKET_UNKNOWN || st == DMUTEX__TICKET_NOT_RUN) {
			memcpy(token, e->rel_token, sizeof token);
			token_until = e->rel_until_ns;
			if ((not_run = st == DMUTEX__TICKET_NOT_RUN)) {
				valid = e->rel_valid_ns;
				lost.fence = e->rel_fence;
				lost.cb = e->rel_onlost;
				lost.arg = e->rel_onlost_arg;
			}
		}
	}
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	/* It may not have run (the background has it too): released here
	 * and now, before the acquire that may follow, by until.  "Not
	 * ours" then proves nothing (the first may have run): no report. */
	if (token_until && !not_run)
		dmutex__release_by(e->client, e->name, token, DMUTEX__REL_CLEAN,
				until < token_until ? until : token_until);
	/* It did not run (nothing else releases it: no rescue): released
	 * here, and a "not ours" then is a loss.  Refused again, it goes
	 * back to e: only one thread at a time asks (the one that took it
	 * out of e), so no release of ours can have run meanwhile. */
	if (token_until && not_run) {
		int k = release_not_run(e, token, until, valid, token_until);
		if (k > 0) {
			dmutex__met_count(e, DMUTEX__MET_LOST);
			lost.report = 1;
		} else if (k < 0) {
			struct dmutex__orphan_rep rep = { .e = e, .valid_ns = valid,
				.fence = lost.fence, .cb = lost.cb, .arg = lost.arg };
			requeue(e, t, token, token_until, &rep);
		}
	}
	dmutex__ticket_put(t);                  /* ours */
	if (lost.report)
		dmutex__log(DMUTEX_LOG_ERROR, "unlock of '%s': its release found the lock no longer "
				"ours: the hold had been lost", e->name);
	dmutex__lost_report(e, &lost);
	return st != DMUTEX__TICKET_PENDING;
}

void
dmutex__rel_settle_now(struct dmutex__entry *e)
{
	/* A command timeout, whatever the caller's deadline: a lock free but
	 * for our own release in flight is free, and a deadline already
	 * passed must still get it; after that the caller asks all the same
	 * (at worst it finds the lock busy and waits for the wake-up). */
	if (__atomic_load_n(&e->rel, __ATOMIC_ACQUIRE))
		dmutex__rel_settle(e, dmutex__now_ns() +
				(int64_t)e->client->cfg.command_timeout_ms * DMUTEX__MS);
}
