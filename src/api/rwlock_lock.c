/*
 * drwlock_rdlock, _wrlock and their try/timed/clock variants: two functions
 * with different deadlines.
 *
 * Locally, the threads of a process share one backend hold: the first
 * reader takes the process's read share and later readers join it with no
 * I/O, as long as no writer waits (here, or elsewhere as the last renewal
 * of the share said).  One thread at a time (the "acquirer") talks to the
 * backend for the entry, as for mutexes.  A waiting writer registers its
 * intent in the backend, which then gives no new share to anyone.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "base/lockorder.h"
#include "core/rwlock.h"
#include "backend/backend.h"

#define NO_DEADLINE INT64_MAX

enum { BLOCK, TRY };

/* Room for one more reader, so that a share once taken can be recorded. */
static int
reserve_reader(struct dmutex__entry *e)
{
	struct dmutex__reader *nr;
	size_t ncap;

	if (e->nreaders < e->readers_cap)
		return 0;
	ncap = e->readers_cap ? e->readers_cap * 2 : 4;
	if (!(nr = realloc(e->readers, ncap * sizeof *nr)))
		return ENOMEM;
	e->readers = nr;
	e->readers_cap = ncap;
	return 0;
}

/* A request that may have been applied (or a writer's intent) is taken
 * back; if that fails too, it ends with its lease. */
static void
abandon(struct dmutex_client *c, const char *name, int op, const char *token)
{
	int released, md = 0;

	for (int i = 0; i < 3; i++)
		if (!dmutex__rw_release(c->be, name, op, token, &released, &md))
			return;
	dmutex__log(DMUTEX_LOG_WARN, "rwlock '%s': could not take back an acquire; it ends with its lease",
			name);
}

/* Under e->mu: record the hold the backend gave us. */
static void
record(struct dmutex__rwlock *rx, int op, const char *token, uint64_t fence, int64_t sent)
{
	struct dmutex__entry *e = rx->entry;

	dmutex__entry_hold(e, token, fence, rx->lease_ms, sent);
	e->rw_write = op == 'w';
	e->rw_remote_wwait = 0;
	e->onlost = rx->onlost;
	e->onlost_arg = rx->onlost_arg;
	e->nreaders = 0;
	if (op == 'r') {
		/* reserve_reader made room. */
		e->readers[0].thread = pthread_self();
		e->readers[0].count = 1;
		e->nreaders = 1;
	}
	__atomic_fetch_add(&e->client->held, 1, __ATOMIC_ACQ_REL);
}

/* Called without e->mu, as the entry's acquirer. */
static int
acquire_remote(struct dmutex__rwlock *rx, int op, int mode, int64_t until, int bad_deadline)
{
	struct dmutex__entry *e = rx->entry;
	struct dmutex_client *c = e->client;
	char token[DMUTEX__TOKEN_HEX + 1];
	struct dmutex__wsub *sub = NULL;
	char *channel = NULL;
	int64_t io_budget = (int64_t)DMUTEX__IO_RETRY_FACTOR * c->cfg.command_timeout_ms * DMUTEX__MS;
	int64_t io_until = dmutex__now_ns() + io_budget;
	int64_t valid_ns = (int64_t)rx->lease_ms * DMUTEX__MS - DMUTEX__DRIFT_NS(rx->lease_ms);
	int maybe_done = 0, intent = 0, io_attempt = 0, err;
	uint64_t seq = 0;

	if ((err = dmutex__token(token)))
		return err;
	for (;;) {
		struct dmutex__rw_acq a = { .op = op, .token = token, .lease_ms = rx->lease_ms,
			.wait = op == 'w' && mode != TRY };
		int64_t sent, now, bound;

		if (sub)
			seq = dmutex__wsub_seq(c->be, sub);
		sent = dmutex__now_ns();
		err = dmutex__rw_acquire(c->be, e->name, &a);
		now = dmutex__now_ns();
		maybe_done |= a.maybe_done;
		if (!err && a.taken && now >= sent + valid_ns) {
			/* Granted after the hold's own deadline: ask again with the
			 * same token, which renews it from a fresh send time. */
			dmutex__log(DMUTEX_LOG_WARN, "rwlock '%s': granted after its lease would have ended; asking again",
					e->name);
			maybe_done = 1;
			err = EIO;
		}
		if (!err && a.taken) {
			dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
			record(rx, op, token, a.fence, sent);
			if ((err = dmutex__renewer_add(c, e)))
				dmutex__entry_forget(e);
			dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
			if (err)
				maybe_done = 1;
			break;
		}
		if (err) {
			/* An answer of "no" from Redis will not change by asking again. */
			if (mode == TRY || a.refused || now >= io_until || now >= until) {
				dmutex__log(DMUTEX_LOG_ERROR, "rwlock '%s': backend failing, giving up", e->name);
				err = EIO;
				break;
			}
			int64_t wake = now + dmutex__backoff_ns(io_attempt++);
			dmutex__sleep_until(wake < until ? wake : until);
			continue;
		}
		/* Held by others.  The backend answered: fresh I/O budget. */
		intent |= a.wait;
		io_until = now + io_budget;
		io_attempt = 0;
		if (mode == TRY) {
			err = EBUSY;
			break;
		}
		if (bad_deadline) {
			dmutex__log(DMUTEX_LOG_ERROR, "rwlock '%s': tv_nsec of the deadline out of range", e->name);
			err = EINVAL;
			break;
		}
		if (now >= until) {
			err = ETIMEDOUT;
			break;
		}
		if (!sub && !channel) {
			/* Subscribe, then ask again at once: a release between our
			 * attempt and the subscription would otherwise be missed. */
			int64_t sub_until = now + (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS;
			if ((channel = dmutex__rw_channel(c->be, e->name)))
				sub = dmutex__waiter_sub(c->be, channel, sub_until < until ? sub_until : until);
			continue;
		}
		/* Until woken, or at most until the blocking hold's lease ends
		 * (a lost wake-up costs at most that); a writer comes back
		 * within a third of its lease to keep its intent alive. */
		bound = now + (a.pttl_ms + 1) * DMUTEX__MS;
		if (op == 'w' && bound > now + (int64_t)rx->lease_ms * DMUTEX__MS / 3)
			bound = now + (int64_t)rx->lease_ms * DMUTEX__MS / 3;
		if (bound > until)
			bound = until;
		if (sub)
			dmutex__wsub_wait(c->be, sub, seq, bound);
		else
			dmutex__sleep_until(bound);
	}
	if (sub)
		dmutex__waiter_unsub(c->be, sub);
	free(channel);
	if (err && (maybe_done || intent))
		abandon(c, e->name, maybe_done ? op : 'q', token);
	return err;
}

static int
rd_impl(drwlock_t *rw, int mode, int64_t until, int bad_deadline)
{
	struct dmutex__rwlock *rx;
	struct dmutex__entry *e;
	struct dmutex__reader *r;
	struct dmutex__lost lost;
	pthread_t self = pthread_self();
	struct timespec ts;
	int err = 0;

	if ((err = dmutex__rwlock_resolve(rw, &rx)))
		return err;
	e = rx->entry;
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	if (e->held && e->rw_write && pthread_equal(e->owner, self)) {
		/* No downgrade in place: it would block for ever (POSIX may
		 * hang here; a distributed lock must not). */
		err = mode == TRY ? EBUSY : bad_deadline ? EINVAL : EDEADLK;
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		return err;
	}
	if ((r = dmutex__rw_reader(e, self))) {
		/* Recursive read: granted even while writers wait (POSIX), with
		 * no I/O — unless the share is known lost. */
		dmutex__entry_check_lost(e, dmutex__now_ns(), &lost);
		if (e->lost)
			err = ENOLCK;
		else if (r->count == INT_MAX)
			err = EAGAIN;
		else
			r->count++;
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		dmutex__lost_report(e, &lost);
		return err;
	}
	dmutex__ns_to_ts(until, &ts);
	for (;;) {
		/* Here, not once before the loop: others join while we wait.
		 * The first reader's slot too (record() fills it later). */
		if ((err = reserve_reader(e))) {
			dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
			return err;
		}
		if (e->held && !e->rw_write && !e->releasing && !e->lost && !e->rw_wwait &&
				!e->rw_remote_wwait && dmutex__now_ns() < e->deadline_ns) {
			/* Join the process's share: no I/O. */
			e->readers[e->nreaders].thread = self;
			e->readers[e->nreaders++].count = 1;
			dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
			return 0;
		}
		if (!e->held && !e->acquiring && !e->rw_wwait)
			break;
		if (mode == TRY || bad_deadline || dmutex__now_ns() >= until) {
			dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
			if (mode != TRY && bad_deadline)
				dmutex__log(DMUTEX_LOG_ERROR, "rwlock '%s': tv_nsec of the deadline out of range", e->name);
			return mode == TRY ? EBUSY : bad_deadline ? EINVAL : ETIMEDOUT;
		}
		if (until == NO_DEADLINE)
			pthread_cond_wait(&e->cv, &e->mu);
		else
			pthread_cond_timedwait(&e->cv, &e->mu, &ts);
	}
	e->acquiring = 1;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);

	err = acquire_remote(rx, 'r', mode, until, bad_deadline);

	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	e->acquiring = 0;
	/* Other readers may join now, or the next one asks. */
	pthread_cond_broadcast(&e->cv);
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	return err;
}

static int
wr_impl(drwlock_t *rw, int mode, int64_t until, int bad_deadline)
{
	struct dmutex__rwlock *rx;
	struct dmutex__entry *e;
	pthread_t self = pthread_self();
	struct timespec ts;
	int err;

	if ((err = dmutex__rwlock_resolve(rw, &rx)))
		return err;
	e = rx->entry;
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	if ((e->held && e->rw_write && pthread_equal(e->owner, self)) || dmutex__rw_reader(e, self)) {
		/* Relock by the writer, or an upgrade: either would wait for
		 * the caller itself. */
		err = mode == TRY ? EBUSY : bad_deadline ? EINVAL : EDEADLK;
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		if (err == EINVAL)
			dmutex__log(DMUTEX_LOG_ERROR, "rwlock '%s': tv_nsec of the deadline out of range", e->name);
		return err;
	}
	if (mode == TRY && (e->held || e->acquiring)) {
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		return EBUSY;
	}
	/* From now on this process lets no new reader into its share. */
	e->rw_wwait++;
	dmutex__ns_to_ts(until, &ts);
	while (e->held || e->acquiring) {
		if (bad_deadline || dmutex__now_ns() >= until) {
			e->rw_wwait--;
			pthread_cond_broadcast(&e->cv);
			dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
			if (bad_deadline)
				dmutex__log(DMUTEX_LOG_ERROR, "rwlock '%s': tv_nsec of the deadline out of range", e->name);
			return bad_deadline ? EINVAL : ETIMEDOUT;
		}
		if (until == NO_DEADLINE)
			pthread_cond_wait(&e->cv, &e->mu);
		else
			pthread_cond_timedwait(&e->cv, &e->mu, &ts);
	}
	e->acquiring = 1;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);

	err = acquire_remote(rx, 'w', mode, until, bad_deadline);

	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	e->acquiring = 0;
	e->rw_wwait--;
	pthread_cond_broadcast(&e->cv);
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	return err;
}

static int
lock(drwlock_t *rw, int write, int mode, int64_t until, int bad_deadline)
{
	int cs = dmutex__nocancel();
	int err = write ? wr_impl(rw, mode, until, bad_deadline) : rd_impl(rw, mode, until, bad_deadline);

	dmutex__cancel_restore(cs);
	return err;
}

/* An absolute deadline on clock as CLOCK_MONOTONIC ns; *bad for a tv_nsec
 * out of range (an error only if the call would wait). */
static int
clock_lock(drwlock_t *rw, int write, clockid_t clock, const struct timespec *at)
{
	struct timespec now;
	int64_t left;

	if (clock != CLOCK_REALTIME && clock != CLOCK_MONOTONIC) {
		dmutex__log(DMUTEX_LOG_ERROR, "rwlock: clock %d is neither CLOCK_REALTIME nor CLOCK_MONOTONIC",
				(int)clock);
		return EINVAL;
	}
	if (!at)
		return EINVAL;
	if (at->tv_nsec < 0 || at->tv_nsec >= 1000000000L)
		return lock(rw, write, BLOCK, dmutex__now_ns(), 1);
	clock_gettime(clock, &now);
	if (at->tv_sec < now.tv_sec || (at->tv_sec == now.tv_sec && at->tv_nsec <= now.tv_nsec))
		return lock(rw, write, BLOCK, dmutex__now_ns(), 0);
	if ((int64_t)at->tv_sec - now.tv_sec > 100LL * 365 * 24 * 3600)
		return lock(rw, write, BLOCK, NO_DEADLINE, 0);
	left = ((int64_t)at->tv_sec - now.tv_sec) * 1000000000 + (at->tv_nsec - now.tv_nsec);
	return lock(rw, write, BLOCK, dmutex__now_ns() + left, 0);
}

int
drwlock_rdlock(drwlock_t *rw)
{
	return lock(rw, 0, BLOCK, NO_DEADLINE, 0);
}

int
drwlock_tryrdlock(drwlock_t *rw)
{
	return lock(rw, 0, TRY, NO_DEADLINE, 0);
}

int
drwlock_clockrdlock(drwlock_t *rw, clockid_t clock, const struct timespec *at)
{
	return clock_lock(rw, 0, clock, at);
}

int
drwlock_timedrdlock(drwlock_t *rw, const struct timespec *at)
{
	return clock_lock(rw, 0, CLOCK_REALTIME, at);
}

int
drwlock_wrlock(drwlock_t *rw)
{
	return lock(rw, 1, BLOCK, NO_DEADLINE, 0);
}

int
drwlock_trywrlock(drwlock_t *rw)
{
	return lock(rw, 1, TRY, NO_DEADLINE, 0);
}

int
drwlock_clockwrlock(drwlock_t *rw, clockid_t clock, const struct timespec *at)
{
	return clock_lock(rw, 1, clock, at);
}

int
drwlock_timedwrlock(drwlock_t *rw, const struct timespec *at)
{
	return clock_lock(rw, 1, CLOCK_REALTIME, at);
}
