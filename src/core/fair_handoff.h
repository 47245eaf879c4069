/* A fair mutex's local hand-over between threads of one process
 * (fair_handoff.c). */
#ifndef DMUTEX_FAIR_HANDOFF_H
#define DMUTEX_FAIR_HANDOFF_H

#include "internal.h"

/* An unlock's offer: which waiter, and the hand-over asked of the backend. */
struct dmutex__offer {
	struct dmutex__fifo *f;
	uint64_t id;
	char token[DMUTEX__TOKEN_HEX + 1];
	struct dmutex__handoff h;
};

/* Under e->mu, by the thread that releases e's hold (or a hold handed to a
 * waiter that left): offer the lock to the first local waiter.  The
 * hand-over to pass to dmutex__release_to, or NULL if nobody may be
 * offered it (none waits, an acquirer of ours asks Redis already, the
 * first is robust, no local hand-over on this backend). */
struct dmutex__handoff *dmutex__fair_offer(struct dmutex__entry *e, struct dmutex__offer *o);
/* Under e->mu, after the release (err its result; sent_ns when it was
 * sent) and after the releaser forgot its hold: tell the waiter and wake
 * it.  1 if the lock was handed to a waiter that left meanwhile: the
 * caller passes it on with dmutex__fair_pass, without e->mu. */
int dmutex__fair_answer(struct dmutex__entry *e, struct dmutex__offer *o, int err, int64_t sent_ns);
/* Without e->mu: release the lock handed to o's waiter that left, offering
 * it to the next local waiter, until one takes it or Redis has it. */
void dmutex__fair_pass(struct dmutex__entry *e, struct dmutex__offer *o);

#endif
