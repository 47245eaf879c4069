/*
 * A fair mutex's local hand-over (README "Fair locks"): the unlock offers
 * the lock to the thread of this process that is next in line, and its
 * release (fair_release.lua) gives it that thread outright when nobody
 * queued in Redis comes first.  The answer of the release is then the
 * grant: the unlocking thread wakes the next one through the entry's
 * condition variable, and no wake-up message, no subscription and no
 * request of the next thread's own are needed.
 *
 * Why FIFO across processes holds: the script hands the lock to the next
 * thread only when no live waiter of another process is queued before it;
 * otherwise the queue's head gets it, as without the offer.
 *
 * Why nothing is lost: a thread that was offered the lock keeps the offered
 * token.  Granted, it holds the lock with it.  Not granted, or no answer,
 * it asks with that same token, and a lock the release did hand to it
 * (its answer lost) is already its own (fair_acquire.lua).  A thread that
 * gives up meanwhile (its deadline) leaves the queue; the unlocking thread
 * then finds it gone, and passes on a lock handed to it as its holder.
 */
#include <errno.h>
#include <string.h>

#include "fair_handoff.h"
#include "base/lockorder.h"

struct dmutex__handoff *
dmutex__fair_offer(struct dmutex__entry *e, struct dmutex__offer *o)
{
	struct dmutex__fifo *f = e->fifo_head;

	/* An acquirer of ours asks Redis already; a robust waiter claims its
	 * hold itself (it learns of an owner's death only from a hold it
	 * knew of). */
	if (!e->client->be->ops->release_to || e->acquiring || !f || f->offered || f->robust ||
			dmutex__token(f->token))
		return NULL;
	f->offered = 1;
	f->answered = 0;
	o->f = f;
	o->id = f->id;
	memcpy(o->token, f->token, sizeof o->token);
	o->h = (struct dmutex__handoff){ .token = o->token, .lease_ms = f->lease_ms, .tid = f->tid };
	return &o->h;
}

int
dmutex__fair_answer(struct dmutex__entry *e, struct dmutex__offer *o, int err, int64_t sent_ns)
{
	int granted = !err && o->h.granted;

	for (struct dmutex__fifo *f = e->fifo_head; f; f = f->next) {
		/* The same place and the same id: the same waiter (a node's
		 * stack address may be reused by a later call). */
		if (f != o->f || f->id != o->id)
			continue;
		f->answered = 1;
		f->granted = granted;
		f->fence = o->h.fence;
		f->died = o->h.died;
		f->sent_ns = sent_ns;
		dmutex__entry_wake(e);
		return 0;
	}
	return granted;
}

void
dmutex__fair_pass(struct dmutex__entry *e, struct dmutex__offer *o)
{
	struct dmutex_client *c = e->client;
	int64_t cmd = (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS;
	int mode = DMUTEX__REL_ABANDON | DMUTEX__REL_FAIR;

	for (;;) {
		char token[DMUTEX__TOKEN_HEX + 1];
		unsigned lease_ms = o->h.lease_ms;
		struct dmutex__handoff *next;
		int64_t sent;
		int err, again;

		/* The lock is the gone waiter's: released with its token, and
		 * offered to the next thread in line. */
		memcpy(token, o->token, sizeof token);
		dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
		next = dmutex__fair_offer(e, o);
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		sent = dmutex__now_ns();
		err = dmutex__renewer_release(c, e->name, token, mode, sent + cmd, next, lease_ms);
		if (!next)
			return;
		dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
		again = dmutex__fair_answer(e, o, err, sent);
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		if (!again)
			return;
	}
}
