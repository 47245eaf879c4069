/*
 * wait, timedwait and clockwait are one function with different deadlines:
 *
 * 1. subscribe to a channel of the waiting thread's own (through the
 *    client's wake-up thread), and to the mutex's wake channel (the one
 *    the first request to take it back listens on: with its token chosen
 *    now, where the backend wakes one waiter per release), so that taking
 *    the mutex back costs no subscription round trip;
 * 2. register as a waiter in the backend, then release the mutex.  Whoever
 *    changes the predicate and signals holds the mutex after us, so finds
 *    us registered: no wake-up is lost between the unlock and the sleep;
 * 3. sleep until a message on the channel or the deadline; every third of
 *    the registration's life, ask the backend whether we were woken (a
 *    message may have been lost with a connection): that acknowledges the
 *    wake-up, or refreshes the registration;
 * 4. leave: remove the registration, which acknowledges a wake-up.  A
 *    waiter that finds itself already removed was woken (at the last
 *    moment, if it timed out): it counts as woken, so that wake-up is not
 *    lost.  One that finds itself still there after a message was woken
 *    by a node's subscription news: a spurious wake-up, as POSIX allows.
 *    After a message, one node, the leave is sent and its answer read
 *    around the first attempt of step 5: one round trip for both;
 * 5. take the mutex back, retrying backend failures until it is held.
 *
 * Cancellation (cancel.c): the call runs with cancellation disabled except
 * around the sleep of step 3, where the caller's own state is restored.  A
 * thread cancelled there runs `cancelled` first: it leaves the wait (a
 * wake-up it had already been given goes on to another waiter), and takes
 * the mutex back, so the caller's cleanup handlers run holding it, as
 * POSIX says.  If the mutex cannot be taken back (backend lost,
 * ENOTRECOVERABLE), they run without it and one error is logged.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/bind.h"
#include "core/cond.h"
#include "base/lockorder.h"

#define NO_DEADLINE INT64_MAX

/* Step 5: the mutex is held on return, whatever the backend does, unless it
 * is not recoverable (or was destroyed meanwhile).  A lock call never
 * returns ENOLCK (issue 25): a loss of the hold the wait gave up is the
 * wait's to report, once the mutex is held again. */
static int
take_back(dmutex_t *m, struct dmutex__entry *e, int depth, const char *token)
{
	int err;

	/* The token subscribed to beforehand, for the first request only. */
	while ((err = dmutex__relock(m, token)) == EIO) {
		dmutex__log(DMUTEX_LOG_WARN, "condition wait: cannot take '%s' back yet; retrying", e->name);
		token = NULL;
	}
	if (err == 0 || err == EOWNERDEAD) {
		dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
		e->depth = depth;
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	}
	return err;
}

struct cancel_ctx {
	dcond_t *c;
	struct dmutex__cond *cx;
	struct dmutex__wsub *sub;
	struct dmutex__wsub *msub;      /* the mutex's wake channel, or NULL */
	/* The token of the first request taking the mutex back, whose own
	 * channel msub is ("" if none: a new token then, and the lock's) */
	char mtoken[DMUTEX__TOKEN_HEX + 1];
	int fair;
	dmutex_t *m;
	struct dmutex__entry *e;
	const char *token;
	int depth;
	struct dmutex__rel_ticket *rel; /* the wait's asynchronous release, or NULL */
};

static void
cancelled(void *arg)
{
	struct cancel_ctx *k = arg;
	int still = 1, err;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	if (!dmutex__cond_leave(k->cx->client->be, k->cx->name, k->token, &still) && !still)
		dcond_signal(k->c);     /* woken as it was cancelled: pass it on */
	dmutex__waiter_unsub(k->cx->client->be, k->sub);
	__atomic_fetch_sub(&k->cx->waiters, 1, __ATOMIC_ACQ_REL);
	err = dmutex__relock(k->m, *k->mtoken ? k->mtoken : NULL);
	dmutex__ticket_put(k->rel);
	if (k->msub)
		dmutex__waiter_unsub(k->e->client->be, k->msub);
	if (err == 0 || err == EOWNERDEAD) {
		dmutex__mu_lock(&k->e->mu, DMUTEX__LK_ENTRY, "entry.mu");
		k->e->depth = k->depth;
		dmutex__mu_unlock(&k->e->mu, DMUTEX__LK_ENTRY);
	}
	else
		dmutex__log(DMUTEX_LOG_ERROR, "condition wait on '%s' cancelled: cannot take mutex '%s' back (%s); "
				"the cleanup handlers run without it", k->cx->name, k->e->name, dmutex_strerror(err));
	dmutex__cond_put(k->cx);
}

/* Step 3, the library's cancellation point.  Its state lives in *st, not
 * in locals: the cleanup machinery may longjmp. */
struct sleep_state {
	uint64_t seq;
	int still, timed_out, message;
};

static void
sleep_until_woken(struct cancel_ctx *k, struct sleep_state *st, int64_t until, int64_t refresh_ns, int cs)
{
	struct dmutex_client *cl = k->cx->client;

	pthread_cleanup_push(cancelled, k);
	for (;;) {
		int64_t next = dmutex__now_ns() + refresh_ns;
		uint64_t now_seq;
		int woke;

		dmutex__cancel_restore(cs);
		woke = dmutex__wsub_wait(cl->be, k->sub, st->seq, next < until ? next : until);
		dmutex__nocancel();
		if (woke) {
			/* Asked in step 4, together with the mutex. */
			st->message = 1;
			break;
		}
		if (dmutex__now_ns() >= until) {
			st->timed_out = 1;
			break;
		}
		now_seq = dmutex__wsub_seq(cl->be, k->sub);
		if (dmutex__cond_refresh(k->cx->client->be, k->cx->name, k->token, &st->still))
			continue;               /* try again at the next refresh */
		if (!st->still)
			break;                  /* woken, and acknowledged */
		st->seq = now_seq;
	}
	pthread_cleanup_pop(0);
}

/* Whether the calling thread holds m's mutex e, as a wait needs: 0 with
 * its depth, else EPERM (logged). */
static int
check_owner(struct dmutex__cond *cx, struct dmutex__entry *e, int *depth)
{
	int err;

	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	*depth = e->depth;
	err = e->held && pthread_equal(e->owner, pthread_self()) && !e->releasing ? 0 : EPERM;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	if (err)
		dmutex__log(DMUTEX_LOG_ERROR, "wait on condition variable '%s': the calling thread does not hold mutex '%s'",
				cx->name, e->name);
	return err;
}

/* Step 1: k->sub on channel, k->msub (or NULL) on the mutex's, *seq the
 * confirmed sequence of ours.  0, or an error with nothing left subscribed. */
static int
subscribe(struct cancel_ctx *k, const char *channel, uint64_t *seq)
{
	struct dmutex_client *cl = k->cx->client;
	struct dmutex__entry *e = k->e;
	int64_t sub_until = dmutex__now_ns() + (int64_t)cl->cfg.command_timeout_ms * DMUTEX__MS;
	char *mchannel;

	/* The mutex's channel first, not waited for (until 0), so that both
	 * subscriptions travel together, in one request where the backend
	 * can.  Without it (out of memory) the mutex subscribes when it
	 * needs to, as usual. */
	k->msub = NULL;
	*k->mtoken = '\0';
	if (e->client->be->ops->wake_one && !k->fair && dmutex__token(k->mtoken))
		*k->mtoken = '\0';
	if ((mchannel = dmutex__wake_own_channel(e->client->be, e->name, *k->mtoken ? k->mtoken : NULL,
			k->fair))) {
		k->msub = dmutex__waiter_sub(e->client->be, mchannel, 0);
		free(mchannel);
	}
	/* The confirmation of a fresh channel moves its sequence: still 0
	 * means no node confirmed, and a wake-up would find nobody there. */
	if (!(k->sub = dmutex__waiter_sub(cl->be, channel, sub_until))) {
		if (k->msub)
			dmutex__waiter_unsub(e->client->be, k->msub);
		return ENOMEM;
	}
	if (!(*seq = dmutex__wsub_seq(cl->be, k->sub))) {
		dmutex__log(DMUTEX_LOG_ERROR, "wait on condition variable '%s': no wake-up subscription", k->cx->name);
		dmutex__waiter_unsub(cl->be, k->sub);
		if (k->msub)
			dmutex__waiter_unsub(e->client->be, k->msub);
		return EIO;
	}
	/* Confirmed before we sleep, the mutex's subscription costs the
	 * wake-up nothing.  Unconfirmed (a slow node), it still works: its
	 * confirmation, whenever it comes, makes the taking back ask again,
	 * so no release is missed. */
	if (k->msub)
		dmutex__wsub_confirmed(e->client->be, k->msub, sub_until);
	return 0;
}

/* Step 2: register, then release the mutex.  0, with *lost if the hold
 * given up was lost already and k->rel its release's ticket; or an error,
 * the registration taken back. */
static int
register_and_release(struct cancel_ctx *k, int *lost)
{
	struct dmutex__cond *cx = k->cx;
	struct dmutex__entry *e = k->e;
	int still = 1, err;

	if ((err = dmutex__cond_register(cx->client->be, cx->name, k->token))) {
		/* It may have landed on some node: take it back (best effort; a
		 * stale one expires, and a wake-up sent to it is handed on). */
		dmutex__cond_leave(cx->client->be, cx->name, k->token, &still);
		return err;
	}
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	e->depth = 1;           /* a recursive mutex is released whole */
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	/* An asynchronous release leaves us its ticket: its answer, read
	 * before the mutex is taken back (step 5), says whether the hold we
	 * gave up had been lost, which the caller is owed. */
	k->rel = NULL;
	err = dmutex__unlock_for_wait(k->m, &k->rel);
	if (err == ENOLCK) {
		*lost = 1;      /* onlost was called; the lock is not ours anyway */
	} else if (err && err != EIO) {
		/* EIO: the release is retried in the background, and the lease
		 * runs out anyway.  Anything else: the mutex went away. */
		dmutex__cond_leave(cx->client->be, cx->name, k->token, &still);
		return err;
	}
	return 0;
}

/* Steps 4 and 5, after the sleep: leave, take the mutex back.  The wait's
 * result. */
static int
leave_and_take_back(struct cancel_ctx *k, struct sleep_state *st, int lost)
{
	struct dmutex__cond *cx = k->cx;
	struct dmutex__entry *e = k->e;
	struct dmutex_client *cl = cx->client;
	struct dmutex__cond_leaving leaving;
	int still = st->still, overlap = 0, late = 0, err;

	/* 4.  If the backend cannot say, count as woken: a spurious wake-up
	 * is allowed, a lost one is not.  A refresh that found us woken has
	 * acknowledged already; several nodes may each have woken someone
	 * else: leave them all.  Woken by a message, the result is 0
	 * whatever the leave says: without a connection of its own for
	 * the overlap (EBUSY: many woken at once), it waits until the mutex
	 * is ours, and the mutex's queue makes the woken leave one by one
	 * (an acknowledgement it delays hands a signal on: a spurious
	 * wake-up at worst). */
	if (st->message || st->timed_out || cl->be->quorum) {
		int rc = st->message && !st->timed_out ? dmutex__cond_leave_start(cx->client->be, cx->name,
				k->token, &leaving) : ENOTSUP;

		if (!rc)
			overlap = 1;
		else if (rc == EBUSY)
			late = 1;
		else if (dmutex__cond_leave(cx->client->be, cx->name, k->token, &still))
			still = 0;
	}
	__atomic_fetch_sub(&cx->waiters, 1, __ATOMIC_ACQ_REL);

	/* 5.  The taking back waits for our release's answer first
	 * (dmutex__rel_settle): it is read by then, or never will be.  Our
	 * channel is given up after it: the wake-up thread's UNSUBSCRIBE
	 * would take a CPU (2 on the benchmark's machine) and a turn of the
	 * server from the mutex's acquire on the way to our return; a
	 * message it hears meanwhile is for no one (the token was ours). */
	err = take_back(k->m, e, k->depth, *k->mtoken ? k->mtoken : NULL);
	dmutex__waiter_unsub(cl->be, k->sub);
	if (k->rel) {
		lost |= dmutex__ticket_wait(k->rel, dmutex__now_ns() +
				(int64_t)e->client->cfg.command_timeout_ms * DMUTEX__MS) == DMUTEX__TICKET_NOT_OURS;
		dmutex__ticket_put(k->rel);
	}
	if (k->msub)
		dmutex__waiter_unsub(e->client->be, k->msub);
	if (overlap && dmutex__cond_leave_end(cx->client->be, cx->name, k->token, &leaving, &still))
		still = 0;
	if (late)
		dmutex__cond_leave(cx->client->be, cx->name, k->token, &still);
	if (err)
		return err;
	if (lost)
		return ENOLCK;
	return st->timed_out && still ? ETIMEDOUT : 0;
}

/* cs: the caller's cancellation state, restored around the sleep only.
 * k->cx is held (bind.h): a woken waiter still leaving may find its
 * condition variable destroyed (POSIX allows signal, unlock, destroy). */
static int
wait_held(dcond_t *c, struct dmutex__cond *cx, dmutex_t *m, struct dmutex__mutex *mx, int64_t until, int cs)
{
	struct cancel_ctx k = { .c = c, .cx = cx, .m = m };
	struct sleep_state st;
	char token[DMUTEX__TOKEN_HEX + 1], channel[DMUTEX__CHANNEL_MAX];
	int64_t refresh_ns;
	uint64_t seq;
	int err, lost = 0;

	k.e = mx->entry;
	k.fair = mx->fair;
	if (check_owner(k.cx, k.e, &k.depth))
		return EPERM;
	/* Nothing to wait for: as if released and taken back at once. */
	if (dmutex__now_ns() >= until)
		return ETIMEDOUT;
	if ((err = dmutex__token(token)))
		return err;
	k.token = token;
	dmutex__cond_channel(k.cx->client->be, k.cx->name, token, channel);
	__atomic_fetch_add(&k.cx->waiters, 1, __ATOMIC_ACQ_REL);
	if ((err = subscribe(&k, channel, &seq)))
		goto out;
	if ((err = register_and_release(&k, &lost))) {
		dmutex__waiter_unsub(k.cx->client->be, k.sub);
		if (k.msub)
			dmutex__waiter_unsub(k.e->client->be, k.msub);
		goto out;
	}
	/* 3. */
	refresh_ns = (int64_t)dmutex__cond_ttl_ms(k.cx->client->be) * DMUTEX__MS / 3;
	st = (struct sleep_state){ seq, 1, 0, 0 };
	sleep_until_woken(&k, &st, until, refresh_ns, cs);
	return leave_and_take_back(&k, &st, lost);
out:
	__atomic_fetch_sub(&k.cx->waiters, 1, __ATOMIC_ACQ_REL);
	return err;
}

static int
wait_until(dcond_t *c, dmutex_t *m, int64_t until, int cs)
{
	struct dmutex__cond *cx;
	struct dmutex__mutex *mx;
	int err;

	if ((err = dmutex__cond_resolve(c, &cx)) || (err = dmutex__resolve(m, &mx)))
		return err;
	/* Dropped here, or by `cancelled` if the wait is cancelled. */
	dmutex__obj_hold(&cx->users);
	err = wait_held(c, cx, m, mx, until, cs);
	dmutex__cond_put(cx);
	return err;
}

int
dcond_wait(dcond_t *c, dmutex_t *m)
{
	int cs = dmutex__nocancel(), err = wait_until(c, m, NO_DEADLINE, cs);

	dmutex__cancel_restore(cs);
	return err;
}

static int
clockwait(dcond_t *c, dmutex_t *m, clockid_t clock, const struct timespec *at, int cs)
{
	struct timespec now;
	int64_t until, left, secs;

	if (clock != CLOCK_REALTIME && clock != CLOCK_MONOTONIC) {
		dmutex__log(DMUTEX_LOG_ERROR, "condition wait: clock %d is neither CLOCK_REALTIME nor CLOCK_MONOTONIC",
				(int)clock);
		return EINVAL;
	}
	/* A condition wait always blocks, so a bad deadline is always an
	 * error. */
	if (!at || at->tv_nsec < 0 || at->tv_nsec >= 1000000000L) {
		dmutex__log(DMUTEX_LOG_ERROR, "condition wait: %s", at ? "tv_nsec out of range" : "NULL deadline");
		return EINVAL;
	}
	clock_gettime(clock, &now);
	/* Waits run on CLOCK_MONOTONIC; a realtime deadline is converted once.
	 * Past about 290 years it is no deadline at all. */
	secs = (int64_t)at->tv_sec - now.tv_sec;
	if (secs > INT64_MAX / 1000000000 - 1)
		return wait_until(c, m, NO_DEADLINE, cs);
	left = secs < 0 ? 0 : secs * 1000000000 + (at->tv_nsec - now.tv_nsec);
	until = dmutex__now_ns() + (left > 0 ? left : 0);
	if (left > 0 && until < 0)
		until = NO_DEADLINE;
	return wait_until(c, m, until, cs);
}

int
dcond_clockwait(dcond_t *c, dmutex_t *m, clockid_t clock, const struct timespec *at)
{
	int cs = dmutex__nocancel(), err = clockwait(c, m, clock, at, cs);

	dmutex__cancel_restore(cs);
	return err;
}

int
dcond_timedwait(dcond_t *c, dmutex_t *m, const struct timespec *at)
{
	struct dmutex__cond *cx;
	int cs = dmutex__nocancel(), err;

	if (!(err = dmutex__cond_resolve(c, &cx)))
		err = clockwait(c, m, cx->clock, at, cs);
	dmutex__cancel_restore(cs);
	return err;
}
