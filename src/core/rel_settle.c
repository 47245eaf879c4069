/*
 * The answer of an asynchronous release (unlock_async.c, README
 * "Asynchronous release"), read and acted on: not ours -> the hold is
 * reported lost (log, onlost), never to a later call; no answer -> released
 * again, here by the caller's deadline, and in the background.  Before an
 * acquire of the name in this process (so that it cannot reach Redis before
 * our own release) and by the renewal thread soon after the answer
 * arrives.  Below the renewer: it calls hold.c and release.c only.
 */
#include <errno.h>
#include <string.h>

#include "backend/backend.h"
#include "internal.h"
#include "base/lockorder.h"
#include "metrics.h"

int
dmutex__rel_settle(struct dmutex__entry *e, int64_t until)
{
	struct dmutex__rel_ticket *t;
	struct dmutex__lost lost = { 0 };
	char token[DMUTEX__TOKEN_HEX + 1];
	int64_t token_until = 0;
	int st;

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
		} else if (st == DMUTEX__TICKET_UNKNOWN) {
			memcpy(token, e->rel_token, sizeof token);
			token_until = e->rel_until_ns;
		}
	}
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	dmutex__ticket_put(t);                  /* ours */
	/* It may not have run (the background has it too): released here
	 * and now, before the acquire that may follow, by until.  "Not
	 * ours" then proves nothing (the first may have run): no report. */
	if (token_until)
		dmutex__release_by(e->client, e->name, token, DMUTEX__REL_CLEAN,
				until < token_until ? until : token_until);
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
