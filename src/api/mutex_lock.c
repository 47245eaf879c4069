/*
 * lock, trylock, timedlock and clocklock are one function with different
 * deadlines.  Threads of a process queue on the entry locally; the one at
 * the head (the "acquirer") talks to the backend, waits for wake-ups from
 * it, and hands the entry on when it gives up.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/acquire_wait.h"
#include "core/internal.h"
#include "base/lockorder.h"
#include "core/metrics.h"

#define NO_DEADLINE INT64_MAX

enum { BLOCK, TRY };

/* A lost reply may have given us the lock: take it back, or make sure it
 * is taken back in the background, so that nobody waits for a lock that
 * nobody knows it holds.  A waiter that queued leaves the queue the same
 * way, and passes on a wake-up it may have been given (release.lua). */
static void
abandon(struct dmutex_client *c, struct dmutex__entry *e, const char *token, unsigned lease_ms,
		int64_t until, int fair, int queued)
{
	/* A trylock's or a timed lock's release shares its deadline (past
	 * it: at once to the background), so that the call returns within
	 * command_timeout_ms, or by its deadline.  Fair: also leaves the
	 * queue, or hands on a lock handed to us; queued (non-fair): leaves
	 * the waiters' queue, passing a wake-up on. */
	int mode = fair ? DMUTEX__REL_ABANDON | DMUTEX__REL_FAIR
		: queued ? DMUTEX__REL_LEAVE : DMUTEX__REL_ABANDON;
	dmutex__renewer_release(c, e->name, token, mode, until ? until
			: dmutex__now_ns() + (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS, NULL, lease_ms);
}

/* Under e->mu, fair mutexes only (their acquirer asks while a thread of
 * ours holds the lock): wait until that thread's unlock has forgotten its
 * hold, at most until `until`.  1 if it has. */
static int
local_release_ended(struct dmutex__entry *e, int64_t until)
{
	struct timespec ts;

	dmutex__ns_to_ts(until, &ts);
	while (e->held)
		if (pthread_cond_timedwait(&e->cv, &e->mu, &ts) == ETIMEDOUT)
			break;
	return !e->held;
}

/* A lock handed to us by its release, as the wake-up message told:
 * "<fence>:<died>:<lease_ms>:<stamp>" (a fair lock's hand-over,
 * fair_release.lua, or a non-fair one's grant, wake_queue.lua), where
 * stamp must be `stamp`, our last request answered "busy": a grant that
 * followed an earlier request of ours was over before that answer
 * (mutex_try).  One without a stamp (a release of a client before it)
 * is not taken either: we ask, and find the lock ours if it is.  1 if it
 * is a grant we can take as it is (our own lease), with a filled in. */
static int
granted(const char *handed, unsigned lease_ms, int64_t stamp, struct dmutex__acq *a)
{
	unsigned long long fence, lease, echoed;
	char *end;
	int died;

	errno = 0;
	fence = strtoull(handed, &end, 10);
	if (errno || end == handed || *end != ':' || (end[1] != '0' && end[1] != '1') || end[2] != ':')
		return 0;
	died = end[1] == '1';
	handed = end + 3;
	lease = strtoull(handed, &end, 10);
	if (errno || end == handed || lease != lease_ms || *end != ':')
		return 0;
	handed = end + 1;
	echoed = strtoull(handed, &end, 10);
	if (errno || end == handed || *end || !stamp || echoed != (unsigned long long)stamp)
		return 0;
	a->status = DMUTEX__ACQ_OK;
	a->fence = fence;
	a->died = died;
	return 1;
}

/* Under e->mu, nobody of ours holding it: record the hold of `token`, begun
 * after `sent`, and have it renewed.  0, or the renewer's error (the hold
 * is then forgotten; the caller gives the lock back). */
static int
take_hold(struct dmutex__mutex *mx, struct dmutex__entry *e, const char *token, uint64_t fence,
		int died, int64_t sent)
{
	struct dmutex_client *c = e->client;
	int err;

	dmutex__entry_hold(e, token, fence, mx->lease_ms, sent);
	e->start_ns = sent;     /* lease_cache.c: locked again soon? */
	e->inconsistent = died && mx->robust == DMUTEX_ROBUST;
	e->onlost = mx->onlost;
	e->onlost_arg = mx->onlost_arg;
	e->robust = mx->robust == DMUTEX_ROBUST;
	e->fair = mx->fair;
	if ((err = dmutex__renewer_add(c, e))) {
		dmutex__entry_forget(e);
		return err;
	}
	/* Counted from here, with the hold: a loss the renewer finds from now
	 * on ends it too. */
	dmutex__entry_count_hold(e, sent);
	if (died)
		dmutex__log(DMUTEX_LOG_INFO, "'%s': previous owner died holding it%s", e->name,
				e->inconsistent ? "" : " (not robust: acquired as usual)");
	return 0;
}

/* internal.h.  Its own channel where the backend wakes one waiter per
 * release (fair_release.lua hands a fair lock over there; a non-fair
 * release wakes the first live waiter of its queue there, wake_queue.lua),
 * so that only that waiter's process hears it; else (etcd) the lock's. */
char *
dmutex__wake_own_channel(struct dmutex__backend *be, const char *name, const char *token, int fair)
{
	char *ch = be->ops->channel(be, name), *own;
	size_t len;

	if (!ch || !token || !(fair || be->ops->wake_one))
		return ch;
	len = strlen(ch);
	if (!(own = realloc(ch, len + 1 + strlen(token) + 1))) {
		free(ch);
		return NULL;
	}
	own[len] = ':';
	strcpy(own + len + 1, token);
	return own;
}

/* One acquisition's state across its tries (acquire_wait.h). */
struct mutex_try {
	struct dmutex__mutex *mx;
	char token[DMUTEX__TOKEN_HEX + 1];
	/* trylock, a timed lock: every request's deadline (0: none), and
	 * that of the release it owes when it gives up */
	int64_t try_until;
	int maybe_done, queued;
	/* A request carried m->token already (or it is an offered one, which
	 * a release may have made the holder): not fresh (struct dmutex__acq). */
	int asked;
	/* Fair, or queued non-fair: when the last request answered "busy"
	 * was sent.  A hand-over or grant to us came after the server
	 * answered it: it says so with this stamp (granted()). */
	int64_t busy_sent;
	/* For the counters: see acquire_remote. */
	int *busy;
	int64_t *first, *done;
};

static char *
mutex_channel(void *arg)
{
	struct mutex_try *m = arg;
	struct dmutex__entry *e = m->mx->entry;

	return dmutex__wake_own_channel(e->client->be, e->name, m->token, m->mx->fair);
}

/* Granted, under e->mu: record the hold, unless a thread of ours that
 * handed it over has not finished its unlock within our lease (a fair lock's
 * lost hold it keeps): then give it back and queue again, AGAIN. */
static int
granted_take(struct mutex_try *m, struct dmutex__acquire *aq, const struct dmutex__acq *a, int64_t sent,
		struct dmutex__try *t)
{
	struct dmutex__mutex *mx = m->mx;
	struct dmutex__entry *e = mx->entry;
	int err;

	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	if (e->held && !local_release_ended(e,
			sent + (int64_t)mx->lease_ms * DMUTEX__MS - DMUTEX__DRIFT_NS(mx->lease_ms))) {
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		abandon(e->client, e, m->token, mx->lease_ms, m->try_until, mx->fair, m->queued);
		/* Queue again with a new token: the release of the old one, if
		 * it could not be confirmed, is retried in the background, and
		 * must never meet a hold we take next under the same token (it
		 * would delete it).  A new token is a new place, and a new
		 * channel. */
		m->maybe_done = m->queued = m->asked = 0;
		m->busy_sent = 0;
		dmutex__acquire_unsubscribe(aq);
		if ((t->err = dmutex__token(m->token)))
			return DMUTEX__TRY_DONE;
		return DMUTEX__TRY_AGAIN;
	}
	if ((err = take_hold(mx, e, m->token, a->fence, a->died, sent))) {
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		abandon(e->client, e, m->token, mx->lease_ms, m->try_until, mx->fair, m->queued);
		t->err = err;
		return DMUTEX__TRY_DONE;
	}
	t->err = e->inconsistent ? EOWNERDEAD : 0;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	return DMUTEX__TRY_DONE;
}

/* Held by someone else: how long to wait, and the fair queue's place. */
static int
busy_answer(struct mutex_try *m, const struct dmutex__acq *a, int64_t sent, int64_t now,
		struct dmutex__try *t)
{
	struct dmutex__mutex *mx = m->mx;
	int64_t lease = (int64_t)mx->lease_ms * DMUTEX__MS;
	/* Non-fair, queued (wake_queue.lua): one waiter is woken per release. */
	int one = !mx->fair && a->wait && mx->entry->client->be->ops->wake_one;

	*m->busy = 1;
	/* A hand-over (fair) or a grant (queued non-fair: the release that
	 * pops us writes our hold, wake_queue.lua) comes after this answer. */
	if (mx->fair || one)
		m->busy_sent = sent;
	/* We hold a place in the queue now, to give back if we go: a fair
	 * lock's, or a non-fair one's whose wake-up we may have been given
	 * (the give-back passes it on, release.lua). */
	m->queued |= (mx->fair || one) && a->wait;
	/* Sleep until woken, or at most until the holder's lease ends (so a
	 * lost wake-up costs at most one lease). */
	t->bound = a->pttl_ms >= 0 ? now + (a->pttl_ms + 1) * DMUTEX__MS : now + lease;
	/* Fair: our place in the queue lasts a lease; asking keeps it.
	 * Queued non-fair: a release wakes only the first live waiter, and
	 * one that is stopped (SIGSTOP, a debugger) still counts as live; so
	 * that it costs the others at most this, not the holder's whole
	 * lease.  Asking again keeps the place (ZADD NX). */
	if ((mx->fair || one) && t->bound > now + lease / 3)
		t->bound = now + lease / 3;
	t->no_wake = a->split;
	t->now = now;
	return DMUTEX__TRY_BUSY;
}

/* One request for the lock (acquire_wait.h). */
static int
mutex_try(void *arg, struct dmutex__acquire *aq, struct dmutex__try *t)
{
	struct mutex_try *m = arg;
	struct dmutex__mutex *mx = m->mx;
	struct dmutex__entry *e = mx->entry;
	struct dmutex__backend *be = e->client->be;
	struct dmutex__acq a = { .name = e->name, .token = m->token,
		.lease_ms = mx->lease_ms, .tid = dmutex__tid(),
		.robust = mx->robust == DMUTEX_ROBUST, .wait = aq->sub != NULL,
		.deadline = m->try_until, .fair = mx->fair,
		.pop = aq->sub && !mx->fair && dmutex__wsub_pop(be, aq->sub, 0) };
	char handed[DMUTEX__HANDED_MAX];
	int64_t sent, now;
	int err;

	/* A grant (non-fair) or hand-over (fair) taken only if it followed
	 * our last request answered "busy" (its stamp, granted()); a
	 * non-fair one also only within its lease counted from that
	 * request's send time (a fair one's is checked below): past it (a
	 * waiter stopped that long), or a grant to an earlier request, we ask
	 * again as any waiter does: the lock is ours still if the grant
	 * holds (a fair head's too: fair_acquire.lua finds it its own). */
	if (m->busy_sent && aq->sub && dmutex__wsub_handed(be, aq->sub, handed) &&
			(mx->fair || dmutex__now_ns() < m->busy_sent + (int64_t)mx->lease_ms * DMUTEX__MS -
			 DMUTEX__DRIFT_NS(mx->lease_ms)) &&
			granted(handed, mx->lease_ms, m->busy_sent, &a)) {
		/* Handed to us outright: no claim round trip.  The hold began
		 * after the busy answer, so its deadline counts safely from
		 * that request's send time. */
		sent = m->busy_sent;
		err = 0;
	} else {
		sent = dmutex__now_ns();
		if (!*m->first)
			*m->first = sent;
		a.stamp = sent;
		a.fresh = !m->asked;
		m->asked = 1;
		err = be->ops->acquire(be, &a);
	}
	now = dmutex__now_ns();
	/* Whatever the answer, a request that may have been applied must be
	 * taken back if we end up not holding the lock. */
	m->maybe_done |= a.maybe_done;
	/* A queueing request that may have run unanswered may have queued
	 * us, and left our details for a grant: giving up must then take us
	 * out of the queue and pass on what we may have been granted
	 * (abandon: release.lua mode 4), not only release a lock of ours. */
	if (a.maybe_done && a.wait && !mx->fair && be->ops->wake_one)
		m->queued = 1;
	if (!err && a.status == DMUTEX__ACQ_OK &&
			now >= sent + (int64_t)mx->lease_ms * DMUTEX__MS - DMUTEX__DRIFT_NS(mx->lease_ms)) {
		/* Granted, but the answer came after the hold's own deadline:
		 * not a hold we can vouch for.  Asking again with the same token
		 * renews it and counts from a fresh send time. */
		dmutex__log(DMUTEX_LOG_WARN, "lock '%s': granted after its lease would have ended; asking again",
				e->name);
		m->maybe_done = 1;
		err = EIO;
	}
	if (!err && a.status == DMUTEX__ACQ_OK) {
		*m->done = now;
		return granted_take(m, aq, &a, sent, t);
	}
	if (!err && a.status == DMUTEX__ACQ_NOTREC) {
		t->err = ENOTRECOVERABLE;
		return DMUTEX__TRY_DONE;
	}
	if (err) {
		dmutex__met_count(e, DMUTEX__MET_ERRORS);
		t->refused = a.refused;
		t->now = now;
		return DMUTEX__TRY_FAILED;
	}
	return busy_answer(m, &a, sent, now, t);
}

/* The deadline of the release an acquisition owes when it gives up (0:
 * a command timeout).  trylock: its own.  A timed lock: its deadline,
 * past which the release goes to the background at once, when a request
 * went unanswered (the server does not answer now); a fair lock's place
 * in the queue, the server answering, is given back here with the time
 * of an answer, so that the queue has moved on when the call returns. */
static int64_t
give_back_by(struct dmutex_client *c, const struct mutex_try *m, int mode)
{
	int64_t now, by;

	if (mode == TRY || !m->try_until)
		return m->try_until;
	now = dmutex__now_ns();
	by = m->try_until;
	if (!m->maybe_done && by < dmutex__timed_deadline(c, now, now))
		by = dmutex__timed_deadline(c, now, now);
	return by < now + (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS ? by
		: now + (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS;
}

/* Called without e->mu; returns with the hold recorded in e on 0/EOWNERDEAD.
 * preset: the token to ask with (NULL: a new one).
 * For the counters, without clock reads of their own: *busy set when
 * another holder made us wait, *first the first request's send time, *done
 * when the grant arrived. */
static int
acquire_remote(struct dmutex__mutex *mx, int mode, int64_t until, int bad_deadline, int presub,
		const char *preset, int *busy, int64_t *first, int64_t *done)
{
	struct dmutex__entry *e = mx->entry;
	struct dmutex_client *c = e->client;
	struct mutex_try m = { .mx = mx, .busy = busy, .first = first, .done = done };
	struct dmutex__acquire aq = { .c = c, .what = "lock", .name = e->name, .trylock = mode == TRY,
		.bad_deadline = bad_deadline, .presub = presub, .until = until,
		.channel = mutex_channel, .want = mx->fair ? m.token : NULL,
		.pop = !mx->fair && mx->robust != DMUTEX_ROBUST && until == NO_DEADLINE,
		.own_channel = e->client->be->ops->wake_one,
		.try = mutex_try, .arg = &m };
	int err;

	/* Popped grants (aq.pop): a blocking lock only.  A BLPOP's answer
	 * gets a command timeout past its own end (grant.c), and a timed
	 * lock must end about by its deadline whatever the server does (a
	 * stalled one: README "How late a timed call returns"): it hears its
	 * grant through the wake-up thread, as before. */

	/* trylock: one attempt, its release included, within
	 * command_timeout_ms.  A timed lock: every attempt, and the release,
	 * by its deadline (acquire_wait.h: not sooner than an answer to a
	 * first request takes). */
	if (mode == TRY)
		m.try_until = dmutex__now_ns() + (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS;
	else
		m.try_until = dmutex__timed_deadline(c, dmutex__now_ns(), until);
	/* Offered the lock by an unlock that could not say it was handed to
	 * us: ask with the offered token, which it may have become. */
	if (preset) {
		memcpy(m.token, preset, sizeof m.token);
		m.asked = 1;
	}
	else if ((err = dmutex__token(m.token)))
		return err;
	err = dmutex__acquire_wait(&aq);
	if (err && err != EOWNERDEAD && (m.maybe_done || m.queued))
		abandon(c, e, m.token, mx->lease_ms, give_back_by(c, &m, mode), mx->fair, m.queued);
	return err;
}

/* Under e->mu: a fair mutex's local queue (README "Fair locks"). */
static void
fifo_join(struct dmutex__entry *e, struct dmutex__fifo *me)
{
	me->next = NULL;
	if (e->fifo_tail)
		e->fifo_tail->next = me;
	else
		e->fifo_head = me;
	e->fifo_tail = me;
}

static void
fifo_leave(struct dmutex__entry *e, struct dmutex__fifo *me)
{
	struct dmutex__fifo **pp = &e->fifo_head, *prev = NULL;

	while (*pp && *pp != me) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	if (!*pp)
		return;
	*pp = me->next;
	if (e->fifo_tail == me)
		e->fifo_tail = prev;
	/* The next in line may now go. */
	dmutex__entry_wake(e);
}

static int lock_impl(dmutex_t *m, struct dmutex__mutex *locked, int mode, int64_t until, int bad_deadline,
		int presub, const char *token);

/* Under e->mu, which it releases: the owner locking its mutex again. */
static int
relock_own(dmutex_t *m, struct dmutex__mutex *mx, int mode, int64_t until, int bad_deadline, int presub)
{
	struct dmutex__entry *e = mx->entry;
	struct dmutex__lost lost;
	int err = 0;

	dmutex__entry_check_lost(e, dmutex__now_ns(), &lost);
	if (e->lost && mx->type == DMUTEX_RECURSIVE) {
		/* A hold known lost is not re-entered: the nested section would
		 * run believing it holds the lock (issue 16 item 9).  Nor is the
		 * loss this call's to return (issue 25: a lock call returns
		 * without the lock only with an error that says "not
		 * acquired"): the lost hold ends here, reported as its unlock
		 * would report it, and the lock is taken anew, at the depth the
		 * caller counts. */
		int depth = e->depth;

		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		dmutex__lost_report(e, &lost);
		dmutex__log(DMUTEX_LOG_WARN, "lock '%s': re-lock by its owner: the hold was lost; "
				"taking the lock anew", e->name);
		dmutex__unlock_impl(m);
		err = lock_impl(m, NULL, mode, until, bad_deadline, presub, NULL);
		if (err == 0 || err == EOWNERDEAD) {
			dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
			if (e->held && pthread_equal(e->owner, pthread_self()))
				e->depth = depth < INT_MAX ? depth + 1 : INT_MAX;
			dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		}
		return err;
	}
	if (mx->type == DMUTEX_RECURSIVE) {
		if (e->depth == INT_MAX)
			err = EAGAIN;
		else
			e->depth++;
	} else if (bad_deadline) {
		/* This call would block (POSIX lets NORMAL hang here), so the
		 * bad deadline is the error, before EDEADLK. */
		err = EINVAL;
	} else {
		/* POSIX lets NORMAL hang here; a distributed lock must not. */
		err = mode == TRY ? EBUSY : EDEADLK;
	}
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	dmutex__lost_report(e, &lost);
	if (err == EINVAL)
		dmutex__log(DMUTEX_LOG_ERROR, "lock '%s': tv_nsec of the deadline out of range", e->name);
	return err;
}

/* Under e->mu, one wait in wait_turn, until `at` if not NULL: a fair
 * mutex's waiter on its own cv (woken when it is first in line), a
 * non-fair one's on e->turn_cv, one woken per turn (dmutex__entry_wake). */
static void
turn_wait(struct dmutex__mutex *mx, struct dmutex__fifo *me, const struct timespec *at)
{
	struct dmutex__entry *e = mx->entry;
	pthread_cond_t *cv = mx->fair ? &me->cv : &e->turn_cv;

	e->turn_waiters += !mx->fair;
	if (at)
		pthread_cond_timedwait(cv, &e->mu, at);
	else
		pthread_cond_wait(cv, &e->mu);
	e->turn_waiters -= !mx->fair;
}

/* Under e->mu: wait for this thread's turn to ask (0, still under e->mu),
 * or give up (released, the error).  *t0: when a local wait began;
 * *contended when another thread of ours made us wait. */
static int
wait_turn(struct dmutex__mutex *mx, struct dmutex__fifo *me, int mode, int64_t until, int bad_deadline,
		int64_t *t0, int *contended)
{
	struct dmutex__entry *e = mx->entry;
	struct timespec ts;

	dmutex__ns_to_ts(until, &ts);
	if (mx->fair) {
		/* Destroyed by lock_impl once out of the queue. */
		dmutex__cond_init_mono(&me->cv);
		me->id = ++e->fifo_ids;
		me->lease_ms = mx->lease_ms;
		me->robust = mx->robust == DMUTEX_ROBUST;
		me->tid = dmutex__tid();
		fifo_join(e, me);
	}
	/* Fair: the first in line asks the backend, but not while a thread of
	 * ours holds the lock: that thread's unlock offers it the lock, and
	 * its release gives it the lock unless a waiter queued in Redis comes
	 * first (fair_handoff.c).  A robust one waits for the unlock and asks. */
	while (mx->fair ? !me->granted && (e->acquiring || e->fifo_head != me ||
				(me->offered && !me->answered) || (e->held && !me->offered))
			: e->held || e->acquiring) {
		if (e->dropping && !e->held) {
			/* The renewer gives back an idle kept lease (bounded by a
			 * command timeout): the mutex is not locked, so even a
			 * trylock waits for that, then asks as usual. */
			turn_wait(mx, me, NULL);
			continue;
		}
		if (mode == TRY || bad_deadline || dmutex__now_ns() >= until) {
			if (mx->fair)
				fifo_leave(e, me);
			else if (!e->held && !e->acquiring)
				/* A turn given to us as we gave up is the next one's. */
				dmutex__entry_wake(e);
			dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
			if (mode != TRY && bad_deadline)
				dmutex__log(DMUTEX_LOG_ERROR, "lock '%s': tv_nsec of the deadline out of range", e->name);
			return mode == TRY ? EBUSY : bad_deadline ? EINVAL : ETIMEDOUT;
		}
		*contended = 1;  /* another thread of ours holds it */
		if (!*t0)
			*t0 = dmutex__now_ns();
		turn_wait(mx, me, until == NO_DEADLINE ? NULL : &ts);
	}
	return 0;
}

/* Under e->mu, this thread's turn: take the lock with no round trip if the
 * process kept its lease, or a thread of ours handed it to us.  1 done
 * (e->mu released, *err the result); 0 to ask the backend (still under
 * e->mu, out of the fair queue). */
static int
take_local(struct dmutex__mutex *mx, struct dmutex__fifo *me, int mode, int64_t t0, int contended, int *err)
{
	struct dmutex__entry *e = mx->entry;
	int64_t now;
	uint64_t gen;

	if (!mx->fair && e->kept) {
		now = dmutex__now_ns();
		/* The process kept the lease: take it with no round trip. */
		if (dmutex__cache_lock(mx, e, now)) {
			gen = e->gen;
			dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
			dmutex__thread_hold(e, gen);
			dmutex__met_acquired(e, t0 ? t0 : now, now, contended);
			return *err = 0, 1;
		}
	}
	if (!mx->fair)
		return 0;
	if (me->granted) {
		now = dmutex__now_ns();
		fifo_leave(e, me);
		/* Handed to us by a thread of ours (fair_handoff.c).  A grant that
		 * came after its own lease's end is not vouched for: we ask with
		 * its token instead (renewing it). */
		if (now < me->sent_ns + (int64_t)mx->lease_ms * DMUTEX__MS - DMUTEX__DRIFT_NS(mx->lease_ms)) {
			if ((*err = take_hold(mx, e, me->token, me->fence, me->died, me->sent_ns))) {
				dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
				abandon(e->client, e, me->token, mx->lease_ms, 0, 1, 0);
				return 1;
			}
			gen = e->gen;
			dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
			dmutex__thread_hold(e, gen);
			dmutex__met_acquired(e, t0 ? t0 : now, now, 1);
			return 1;
		}
		me->granted = 0;
	}
	/* A fair trylock does not overtake a holder of this process. */
	if (mode == TRY && e->held) {
		fifo_leave(e, me);
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		return *err = EBUSY, 1;
	}
	fifo_leave(e, me);
	return 0;
}

/* dmutex__rel_settle_now for a call with a deadline: by that deadline
 * (acquire_wait.h), and never past a command timeout. */
static void
settle_by(struct dmutex__entry *e, int64_t until)
{
	int64_t now, by;

	if (!__atomic_load_n(&e->rel, __ATOMIC_ACQUIRE))
		return;
	now = dmutex__now_ns();
	by = dmutex__timed_deadline(e->client, now, until);
	if (by > now + (int64_t)e->client->cfg.command_timeout_ms * DMUTEX__MS)
		by = now + (int64_t)e->client->cfg.command_timeout_ms * DMUTEX__MS;
	dmutex__rel_settle(e, by);
}

/* locked: NULL, or m's object, resolved by lock_fast, which found no
 * release of it pending and holds its entry's mutex. */
static int
lock_impl(dmutex_t *m, struct dmutex__mutex *locked, int mode, int64_t until, int bad_deadline,
		int presub, const char *token)
{
	struct dmutex__mutex *mx = locked;
	struct dmutex__entry *e;
	struct dmutex__fifo me = { 0 };
	uint64_t gen;
	int64_t t0 = 0, first = 0, done = 0;      /* t0: a local wait's start */
	int err, contended = 0, out;

	if (!mx) {
		if ((err = dmutex__resolve(m, &mx)))
			return err;
		dmutex__mu_lock(&mx->entry->mu, DMUTEX__LK_ENTRY, "entry.mu");
	}
	e = mx->entry;
	if (e->held && pthread_equal(e->owner, pthread_self()))
		return relock_own(m, mx, mode, until, bad_deadline, presub);
	out = (err = wait_turn(mx, &me, mode, until, bad_deadline, &t0, &contended)) ||
			take_local(mx, &me, mode, t0, contended, &err);
	/* Out of the fair queue either way (fifo_leave or take_local, under
	 * e->mu): nobody signals its cv any more. */
	if (mx->fair)
		pthread_cond_destroy(&me.cv);
	if (out)
		return err;
	e->acquiring = 1;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	/* A release of it, unanswered, may still be on its way on another
	 * connection: our acquire must not overtake it.  A timed lock waits
	 * for its answer by its deadline only (at worst the acquire finds
	 * the lock busy, and the release wakes it). */
	if (until == NO_DEADLINE)
		dmutex__rel_settle_now(e);
	else
		settle_by(e, until);

	err = acquire_remote(mx, mode, until, bad_deadline, presub,
			mx->fair && me.offered ? me.token : token, &contended, &first, &done);
	if ((err == 0 || err == EOWNERDEAD) && done)
		dmutex__met_acquired(e, t0 ? t0 : first, done, contended);

	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	e->acquiring = 0;
	gen = e->gen;
	/* Whether we got it or gave up, the next local waiter looks again. */
	dmutex__entry_wake(e);
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	/* The hold ends with its thread if the thread does not end it. */
	if (err == 0 || err == EOWNERDEAD)
		dmutex__thread_hold(e, gen);
	return err;
}

/*
 * Two common cases: the owner of a recursive mutex locking it again (no
 * release of ours unanswered, no ENOLCK due, the hold not lost and its
 * deadline well ahead: lock_impl would only count one more level), and a
 * lease the process kept taken locally.  Nothing on the way is a cancellation point (no I/O, no
 * log line, no callback; pthread_mutex_lock is none), so it runs without
 * cancel.c's pthread_setcancelstate pair.  1 if done; else 0 and *locked
 * as lock_impl takes it (the entry's mutex held, so that the whole way,
 * with cancellation disabled, does not take it again).
 */
static int
lock_fast(dmutex_t *m, struct dmutex__mutex **locked)
{
	struct dmutex__mutex *mx = dmutex__resolve_bound(m);
	struct dmutex__entry *e;

	*locked = NULL;
	if (!mx)
		return 0;
	e = mx->entry;
	/* The whole way's dmutex__rel_settle has work to do. */
	if (__atomic_load_n(&e->rel, __ATOMIC_ACQUIRE))
		return 0;
	DMUTEX__LO_SELF(lo);
	dmutex__mu_lock_by(lo, &e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	/* The deadline as dmutex__entry_check_lost reads it, last: the
	 * clock is read only for a hold that is ours. */
	if (mx->type == DMUTEX_RECURSIVE && e->held && pthread_equal(e->owner, pthread_self()) &&
			!e->lost && e->depth < INT_MAX &&
			dmutex__now_before(e->deadline_ns)) {
		e->depth++;
		dmutex__mu_unlock_by(lo, &e->mu, DMUTEX__LK_ENTRY);
		return 1;
	}
	/* A lease the process kept, which no thread of ours holds or is
	 * asking for: lock_impl would take it at once (lease_cache.c). */
	if (!mx->fair && e->kept && !e->held && !e->acquiring) {
		int64_t now = dmutex__now_ns();

		if (dmutex__cache_lock_local(mx, e, now)) {
			uint64_t gen = e->gen;

			/* Counted in e: no counters' mutex on this path. */
			dmutex__entry_count_local_acq(e);
			dmutex__mu_unlock_by(lo, &e->mu, DMUTEX__LK_ENTRY);
			dmutex__thread_hold(e, gen);
			return 1;
		}
	}
	*locked = mx;
	return 0;
}

/* Not a cancellation point (POSIX: pthread_mutex_lock is not one), and
 * never cancelled half-way: cancel.c. */
int
dmutex__lock(dmutex_t *m, int mode, int64_t until, int bad_deadline)
{
	struct dmutex__mutex *locked;
	int cs, err;

	if (lock_fast(m, &locked))
		return 0;
	cs = dmutex__nocancel();
	err = lock_impl(m, locked, mode, until, bad_deadline, 0, NULL);

	dmutex__cancel_restore(cs);
	return err;
}

int
dmutex__relock(dmutex_t *m, const char *token)
{
	int cs = dmutex__nocancel(), err = lock_impl(m, NULL, BLOCK, NO_DEADLINE, 0, 1, token);

	dmutex__cancel_restore(cs);
	return err;
}

int
dmutex_lock(dmutex_t *m)
{
	return dmutex__lock(m, BLOCK, NO_DEADLINE, 0);
}

int
dmutex_trylock(dmutex_t *m)
{
	return dmutex__lock(m, TRY, NO_DEADLINE, 0);
}

int
dmutex_clocklock(dmutex_t *m, clockid_t clock, const struct timespec *at)
{
	int bad;

	if (clock != CLOCK_REALTIME && clock != CLOCK_MONOTONIC) {
		dmutex__log(DMUTEX_LOG_ERROR, "clocklock: clock %d is neither CLOCK_REALTIME nor CLOCK_MONOTONIC",
				(int)clock);
		return EINVAL;
	}
	if (!at)
		return EINVAL;
	/* POSIX: a bad deadline is an error only if we would block. */
	bad = at->tv_nsec < 0 || at->tv_nsec >= 1000000000L;
	if (bad)
		return dmutex__lock(m, BLOCK, dmutex__now_ns(), 1);
	/* Waits run on CLOCK_MONOTONIC; a realtime deadline is converted once. */
	return dmutex__lock(m, BLOCK, dmutex__mono_deadline(clock, at), 0);
}

int
dmutex_timedlock(dmutex_t *m, const struct timespec *abs_realtime)
{
	return dmutex_clocklock(m, CLOCK_REALTIME, abs_realtime);
}
