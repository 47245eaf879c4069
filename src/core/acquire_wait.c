/* The wait of an acquisition: acquire_wait.h. */
#include <errno.h>
#include <string.h>
#include <stdlib.h>

#include "core/acquire_wait.h"
#include "core/internal.h"
#include "backend/backend.h"

/* A fair waiter's own wake-up, where the backend has one (backend.h
 * sub_own): nothing to subscribe, nothing missed before the first wait.
 * 1 if made. */
static int
subscribe_own(struct dmutex__acquire *aq)
{
	struct dmutex__backend *be = aq->c->be;

	if (!aq->want || !(aq->wake = aq->channel(aq->arg)))
		return 0;
	if (!(aq->sub = dmutex__waiter_sub_own(be, aq->wake))) {
		free(aq->wake);
		aq->wake = NULL;
		return 0;
	}
	dmutex__wsub_want(be, aq->sub, aq->want);
	return 1;
}

/* Subscribe to the wake channel, waiting at most until `until` for the
 * subscription's confirmation; a fair waiter says which hand-over is its. */
static void
subscribe(struct dmutex__acquire *aq, int64_t until)
{
	struct dmutex__backend *be = aq->c->be;

	if (subscribe_own(aq))
		return;
	if ((aq->wake = aq->channel(aq->arg)) && (aq->sub = dmutex__waiter_sub(be, aq->wake, until))) {
		if (aq->want)
			dmutex__wsub_want(be, aq->sub, aq->want);
		else if (aq->pop)
			dmutex__wsub_pop(be, aq->sub, 1);
	}
}

void
dmutex__acquire_unsubscribe(struct dmutex__acquire *aq)
{
	if (aq->sub)
		dmutex__waiter_unsub(aq->c->be, aq->sub);
	aq->sub = NULL;
	free(aq->wake);
	aq->wake = NULL;
}

int64_t
dmutex__timed_deadline(const struct dmutex_client *c, int64_t start, int64_t until)
{
	unsigned at_once = c->cfg.command_timeout_ms < DMUTEX__AT_ONCE_MS ? c->cfg.command_timeout_ms
		: DMUTEX__AT_ONCE_MS;
	int64_t first = start + (int64_t)at_once * DMUTEX__MS;

	if (until == INT64_MAX)
		return 0;
	return until > first ? until : first;
}

static void
answered(struct dmutex_client *c)
{
	if (__atomic_load_n(&c->cut_since, __ATOMIC_RELAXED))
		__atomic_store_n(&c->cut_since, 0, __ATOMIC_RELEASE);
}

/* A timed call's request was cut by its deadline at now: whether the
 * backend has left requests unanswered for longer than budget. */
static int
stalled(struct dmutex_client *c, int64_t now, int64_t budget)
{
	int64_t since = 0;

	if (!__atomic_compare_exchange_n(&c->cut_since, &since, now, 0, __ATOMIC_ACQ_REL,
			__ATOMIC_ACQUIRE))
		return now - since >= budget;
	return 0;
}

/* The backend failed: -1 to try again after a backoff, else EIO (given
 * up), or ETIMEDOUT. */
static int
failed(struct dmutex__acquire *aq, const struct dmutex__try *t)
{
	int64_t wake;
	int err;

	/* No thread could be started to reach the server (base.h): asking
	 * again will not help soon, and the caller should know why. */
	if ((err = dmutex__short_take())) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s '%s': out of resources: cannot start a thread to connect "
				"to the server (%s)", aq->what, aq->name, strerror(err));
		return err;
	}
	/* The deadline cut a request short, and no request had failed
	 * before it: the server did not answer in time, which a slow one
	 * does too.  The deadline passed first: ETIMEDOUT, as for a lock
	 * held all along (the try's caller gives back what it may have
	 * taken).  After failures the backend is known failing: EIO; also
	 * once the calls' requests have gone unanswered for the retry budget
	 * of a blocking lock (3 x command_timeout_ms), so that a program
	 * looping on short timed calls (dmutex run's slices) learns of a
	 * stalled server as dmutex_lock does. */
	if (!aq->trylock && !t->refused && !aq->failing && t->now >= aq->until
			&& !stalled(aq->c, t->now, aq->io_budget)) {
		dmutex__log(DMUTEX_LOG_INFO, "%s '%s': no answer by the deadline", aq->what, aq->name);
		return ETIMEDOUT;
	}
	/* An answer of "no" from Redis will not change by asking again. */
	if (aq->trylock || t->refused || t->now >= aq->io_until || t->now >= aq->until) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s '%s': backend failing, giving up", aq->what, aq->name);
		return EIO;
	}
	aq->failing = 1;
	wake = t->now + dmutex__backoff_ns(aq->io_attempt++);
	dmutex__sleep_until(wake < aq->until ? wake : aq->until);
	return -1;
}

/* Held by someone else: -1 to try again (subscribed, or woken, or the
 * holder's lease over), else the error that ends the wait. */
static int
busy(struct dmutex__acquire *aq, const struct dmutex__try *t, uint64_t seq)
{
	int64_t now = t->now, bound = t->bound;

	/* The backend answered: fresh I/O budget. */
	answered(aq->c);
	aq->io_until = now + aq->io_budget;
	aq->io_attempt = 0;
	aq->failing = 0;
	if (aq->trylock)
		return EBUSY;
	if (aq->bad_deadline) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s '%s': tv_nsec of the deadline out of range", aq->what, aq->name);
		return EINVAL;
	}
	if (now >= aq->until)
		return ETIMEDOUT;
	if (!aq->sub && !aq->wake) {
		/* Subscribe, then ask again at once: a release between our
		 * attempt and the subscription would otherwise be missed. */
		int64_t sub_until = now + (int64_t)aq->c->cfg.command_timeout_ms * DMUTEX__MS;

		subscribe(aq, sub_until < aq->until ? sub_until : aq->until);
		return -1;
	}
	if (bound > aq->until)
		bound = aq->until;
	if (aq->sub && !t->no_wake)
		dmutex__wsub_wait(aq->c->be, aq->sub, seq, bound);
	else
		dmutex__sleep_until(bound);
	return -1;
}

int
dmutex__acquire_wait(struct dmutex__acquire *aq)
{
	int err = -1;

	aq->io_budget = (int64_t)DMUTEX__IO_RETRY_FACTOR * aq->c->cfg.command_timeout_ms * DMUTEX__MS;
	aq->io_until = dmutex__now_ns() + aq->io_budget;
	aq->io_attempt = 0;
	aq->failing = 0;
	dmutex__short_take();   /* an older call's, not ours */
	/* Subscribed already (a condition wait's caller): the first attempt
	 * asks to be told of the release, with no subscription round trip. */
	if (aq->presub)
		subscribe(aq, dmutex__now_ns());
	/* A fair waiter with its own wake-up queues at its first attempt (a
	 * trylock never queues). */
	else if (!aq->trylock)
		subscribe_own(aq);
	while (err < 0) {
		struct dmutex__try t = { 0 };
		/* Read before asking: a release after the answer moves it. */
		uint64_t seq = aq->sub ? dmutex__wsub_seq(aq->c->be, aq->sub) : 0;

		switch (aq->try(aq->arg, aq, &t)) {
		case DMUTEX__TRY_DONE:
			answered(aq->c);
			err = t.err;
			break;
		case DMUTEX__TRY_FAILED:
			err = failed(aq, &t);
			break;
		case DMUTEX__TRY_BUSY:
			err = busy(aq, &t, seq);
			break;
		}
	}
	/* Taken: our token left the queue with the answer that gave us the
	 * lock (popped by the grant, or removed by the acquire that took
	 * it), so no release publishes to our channel any more, and it can
	 * go with the listener's next request.  Given up or failed: the
	 * token may still be queued, and a release must find nobody
	 * listening there (wake_queue.lua skips it): at once. */
	if (aq->sub && aq->own_channel && (err == 0 || err == EOWNERDEAD)) {
		dmutex__waiter_unsub_late(aq->c->be, aq->sub);
		aq->sub = NULL;
	}
	dmutex__acquire_unsubscribe(aq);
	return err;
}
