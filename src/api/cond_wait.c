/*
 * wait, timedwait and clockwait are one function with different deadlines:
 *
 * 1. subscribe to a channel of the waiting thread's own (through the
 *    client's wake-up thread), and to the mutex's wake channel, so that
 *    taking the mutex back costs no subscription round trip;
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
#include "core/cond.h"
#include "base/lockorder.h"

#define NO_DEADLINE INT64_MAX

/* Step 5: the mutex is held on return, whatever the backend does, unless it
 * is not recoverable (or was destroyed meanwhile).  A lock call never
 * returns ENOLCK (issue 25): a loss of the hold the wait gave up is the
 * wait's to report, once the mutex is held again. */
static int
take_back(dmutex_t *m, struct dmutex__entry *e, int depth)
{
	int err;

	while ((err = dmutex__relock(m)) == EIO)
		dmutex__log(DMUTEX_LOG_WARN, "condition wait: cannot take '%s' back yet; retrying", e->name);
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
	err = dmutex__relock(k->m);
	dmutex__ticket_put(k->rel);
	if (k->msub)
		dmutex__waiter_unsub(k->e->client->be, k->msub);
	if (err == 0 || err == EOWNERDEAD) {
		dmutex__mu_lock(&k->e->mu, DMUTEX__LK_ENTRY, "entry.mu");
		k->e->depth = k->depth;
		dmutex__mu_unlock(&k->e->mu, DMUTEX__LK_ENTRY);
		return;
	}
	dmutex__log(DMUTEX_LOG_ERROR, "condition wait on '%s' cancelled: cannot take mutex '%s' back (%s); "
			"the cleanup handlers run without it", k->cx->name, k->e->name, dmutex_strerror(err));
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

/* cs: the caller's cancellation state, restored around the sleep only. */
static int
wait_until(dcond_t *c, dmutex_t *m, int64_t until, int cs)
{
	struct cancel_ctx k;
	struct sleep_state st;
	struct dmutex__cond *cx;
	struct dmutex__mutex *mx;
	struct dmutex__entry *e;
	struct dmutex_client *cl;
	struct dmutex__wsub *sub, *msub = NULL;
	struct dmutex__cond_leaving leaving;
	struct dmutex__rel_ticket *rel = NULL;
	char token[DMUTEX__TOKEN_HEX + 1], channel[DMUTEX__CHANNEL_MAX], *mchannel;
	int64_t refresh_ns, sub_until;
	uint64_t seq;
	int depth, err, lost = 0, still = 1, timed_out = 0, overlap = 0;

	if ((err = dmutex__cond_resolve(c, &cx)) || (err = dmutex__resolve(m, &mx)))
		return err;
	e = mx->entry;
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	depth = e->depth;
	err = e->held && pthread_equal(e->owner, pthread_self()) && !e->releasing ? 0 : EPERM;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	if (err) {
		dmutex__log(DMUTEX_LOG_ERROR, "wait on condition variable '%s': the calling thread does not hold mutex '%s'",
				cx->name, e->name);
		return EPERM;
	}
	/* Nothing to wait for: as if released and taken back at once. */
	if (dmutex__now_ns() >= until)
		return ETIMEDOUT;
	if ((err = dmutex__token(token)))
		return err;
	cl = cx->client;
	dmutex__cond_channel(cx->client->be, cx->name, token, channel);
	__atomic_fetch_add(&cx->waiters, 1, __ATOMIC_ACQ_REL);

	/* 1.  The mutex's channel first, not waited for, so that both
	 * subscriptions travel together.  Without it (out of memory) the
	 * mutex subscribes when it needs to, as usual. */
	sub_until = dmutex__now_ns() + (int64_t)cl->cfg.command_timeout_ms * DMUTEX__MS;
	if ((mchannel = e->client->be->ops->channel(e->client->be, e->name))) {
		msub = dmutex__waiter_sub(e->client->be, mchannel, dmutex__now_ns());
		free(mchannel);
	}
	/* The confirmation of a fresh channel moves its sequence: still 0
	 * means no node confirmed, and a wake-up would find nobody there. */
	if (!(sub = dmutex__waiter_sub(cl->be, channel, sub_until))) {
		err = ENOMEM;
		goto out_msub;
	}
	if (!(seq = dmutex__wsub_seq(cl->be, sub))) {
		dmutex__log(DMUTEX_LOG_ERROR, "wait on condition variable '%s': no wake-up subscription", cx->name);
		err = EIO;
		goto out_sub;
	}
	/* Confirmed before we sleep, the mutex's subscription costs the
	 * wake-up nothing.  Unconfirmed (a slow node), it still works: its
	 * confirmation, whenever it comes, makes the taking back ask again,
	 * so no release is missed. */
	if (msub)
		dmutex__wsub_confirmed(e->client->be, msub, sub_until);

	/* 2. */
	if ((err = dmutex__cond_register(cx->client->be, cx->name, token))) {
		/* It may have landed on some node: take it back (best effort; a
		 * stale one expires, and a wake-up sent to it is handed on). */
		dmutex__cond_leave(cx->client->be, cx->name, token, &still);
		goto out_sub;
	}
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	e->depth = 1;           /* a recursive mutex is released whole */
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	/* An asynchronous release leaves us its ticket: its answer, read
	 * before the mutex is taken back (step 5), says whether the hold we
	 * gave up had been lost, which the caller is owed. */
	err = dmutex__unlock_for_wait(m, &rel);
	if (err == ENOLCK) {
		lost = 1;       /* onlost was called; the lock is not ours anyway */
	} else if (err && err != EIO) {
		/* EIO: the release is retried in the background, and the lease
		 * runs out anyway.  Anything else: the mutex went away. */
		dmutex__cond_leave(cx->client->be, cx->name, token, &still);
		goto out_sub;
	}

	/* 3. */
	refresh_ns = (int64_t)dmutex__cond_ttl_ms(cx->client->be) * DMUTEX__MS / 3;
	k = (struct cancel_ctx){ c, cx, sub, msub, m, e, token, depth, rel };
	st = (struct sleep_state){ seq, 1, 0, 0 };
	sleep_until_woken(&k, &st, until, refresh_ns, cs);
	still = st.still;
	timed_out = st.timed_out;

	/* 4.  If the backend cannot say, count as woken: a spurious wake-up
	 * is allowed, a lost one is not.  A refresh that found us woken has
	 * acknowledged already; several nodes may each have woken someone
	 * else: leave them all. */
	if (st.message || timed_out || cl->be->quorum) {
		if (st.message && !timed_out && !dmutex__cond_leave_start(cx->client->be, cx->name, token, &leaving))
			overlap = 1;
		else if (dmutex__cond_leave(cx->client->be, cx->name, token, &still))
			still = 0;
	}
	dmutex__waiter_unsub(cl->be, sub);
	__atomic_fetch_sub(&cx->waiters, 1, __ATOMIC_ACQ_REL);

	/* 5.  The taking back waits for our release's answer first
	 * (dmutex__rel_settle): it is read by then, or never will be. */
	err = take_back(m, e, depth);
	if (rel) {
		lost |= dmutex__ticket_wait(rel, dmutex__now_ns() +
				(int64_t)e->client->cfg.command_timeout_ms * DMUTEX__MS) == DMUTEX__TICKET_NOT_OURS;
		dmutex__ticket_put(rel);
	}
	if (msub)
		dmutex__waiter_unsub(e->client->be, msub);
	if (overlap && dmutex__cond_leave_end(cx->client->be, cx->name, token, &leaving, &still))
		still = 0;
	if (err)
		return err;
	if (lost)
		return ENOLCK;
	return timed_out && still ? ETIMEDOUT : 0;

out_sub:
	dmutex__waiter_unsub(cl->be, sub);
out_msub:
	if (msub)
		dmutex__waiter_unsub(e->client->be, msub);
	__atomic_fetch_sub(&cx->waiters, 1, __ATOMIC_ACQ_REL);
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
