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
#include <string.h>

#include "base/lockorder.h"
#include "core/acquire_wait.h"
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
 * back; if that fails too, the renewer asks on until its lease would end.
 * A timed lock's (timed) is taken back in the background, at once: the
 * call returns by its deadline. */
static void
abandon(struct dmutex_client *c, const char *name, int op, const char *token, unsigned lease_ms,
		int timed)
{
	int released, md = 0;

	if (timed) {
		dmutex__renewer_orphan_rw(c, name, op, token,
				dmutex__now_ns() + (int64_t)lease_ms * DMUTEX__MS);
		return;
	}
	for (int i = 0; i < 3; i++)
		if (!dmutex__rw_release(c->be, name, op, token, &released, &md))
			return;
	dmutex__log(DMUTEX_LOG_WARN, "rwlock '%s': could not take back an acquire; retried in the "
			"background until its lease would end", name);
	dmutex__renewer_orphan_rw(c, name, op, token, dmutex__now_ns() + (int64_t)lease_ms * DMUTEX__MS);
}

/*
 * Under e->mu: a share known lost (its renewal found it gone, or its
 * deadline passed) keeps this process's new readers out no longer.  Its
 * readers are set aside: each one's unlock still says ENOLCK, and so does
 * a recursive read by one of them; a writer of ours waits for them as for
 * any reader.  The share is released in the background, in case it is
 * still there (a deadline that passed during an outage).  Before, every
 * new reader waited for the lost share's last reader to unlock, though
 * the lock might be free everywhere, and a tryrdlock said EBUSY with no
 * writer anywhere.  ENOMEM: new readers wait for the old ones, as before.
 */
static int
set_lost_share_aside(struct dmutex__entry *e)
{
	struct dmutex_client *c = e->client;
	size_t need = e->ngone + e->nreaders;

	if (need > e->gone_cap) {
		struct dmutex__reader *ng = realloc(e->rw_gone, need * sizeof *ng);
		if (!ng)
			return ENOMEM;
		e->rw_gone = ng;
		e->gone_cap = need;
	}
	memcpy(e->rw_gone + e->ngone, e->readers, e->nreaders * sizeof *e->readers);
	e->ngone = need;
	dmutex__renewer_remove(c, e);
	dmutex__renewer_orphan_rw(c, e->name, 'r', e->token,
			dmutex__now_ns() + (int64_t)e->lease_ms * DMUTEX__MS);
	dmutex__log(DMUTEX_LOG_INFO, "rwlock '%s': the share was lost; new readers take a new one "
			"while its %zu reader(s) finish", e->name, e->ngone);
	/* Wakes the readers waiting: they may take a new share now. */
	dmutex__entry_forget(e);
	return 0;
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
}

/* One acquisition's state across its tries (acquire_wait.h). */
struct rw_try {
	struct dmutex__rwlock *rx;
	int op, trylock;
	int64_t until;          /* every request's deadline (0: none; a timed lock's) */
	char token[DMUTEX__TOKEN_HEX + 1];
	int maybe_done, intent;
	int told_busy;          /* a reader's last answer was busy (e->rw_rd_asking 2) */
};

static char *
rw_channel(void *arg)
{
	struct rw_try *r = arg;

	return dmutex__rw_channel(r->rx->entry->client->be, r->rx->entry->name);
}

/* One request for the lock (acquire_wait.h). */
static int
rw_try(void *arg, struct dmutex__acquire *aq, struct dmutex__try *t)
{
	struct rw_try *r = arg;
	struct dmutex__rwlock *rx = r->rx;
	struct dmutex__entry *e = rx->entry;
	struct dmutex_client *c = e->client;
	struct dmutex__rw_acq a = { .op = r->op, .token = r->token, .lease_ms = rx->lease_ms,
		.wait = r->op == 'w' && !r->trylock, .deadline = r->until, .tid = dmutex__tid() };
	int64_t valid_ns = (int64_t)rx->lease_ms * DMUTEX__MS - DMUTEX__DRIFT_NS(rx->lease_ms);
	int64_t sent = dmutex__now_ns(), now;
	uint64_t gen = 0;
	int err;

	(void)aq;
	if (r->told_busy) {
		/* Asking again: a tryrdlock of ours waits for this answer too,
		 * not for the last one's "busy". */
		dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
		e->rw_rd_asking = 1;
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		r->told_busy = 0;
	}
	err = dmutex__rw_acquire(c->be, e->name, &a);
	t->now = now = dmutex__now_ns();
	r->maybe_done |= a.maybe_done;
	if (!err && a.taken && now >= sent + valid_ns) {
		/* Granted after the hold's own deadline: ask again with the
		 * same token, which renews it from a fresh send time. */
		dmutex__log(DMUTEX_LOG_WARN, "rwlock '%s': granted after its lease would have ended; asking again",
				e->name);
		r->maybe_done = 1;
		err = EIO;
	}
	if (!err && a.taken) {
		dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
		record(rx, r->op, r->token, a.fence, sent);
		if ((err = dmutex__renewer_add(c, e)))
			dmutex__entry_forget(e);
		gen = e->gen;
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		if (err)
			r->maybe_done = 1;
		else
			dmutex__thread_hold_end(e, gen, dmutex__rw_thread_end);
		t->err = err;
		return DMUTEX__TRY_DONE;
	}
	if (err) {
		t->refused = a.refused;
		return DMUTEX__TRY_FAILED;
	}
	/* Held by others: a tryrdlock of ours may say EBUSY now. */
	if (r->op == 'r') {
		dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
		e->rw_rd_asking = 2;
		pthread_cond_broadcast(&e->cv);
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		r->told_busy = 1;
	}
	r->intent |= a.wait;
	/* Until woken, or at most until the blocking hold's lease ends (a lost
	 * wake-up costs at most that); a writer comes back within a third of
	 * its lease to keep its intent alive. */
	t->bound = now + (a.pttl_ms + 1) * DMUTEX__MS;
	if (r->op == 'w' && t->bound > now + (int64_t)rx->lease_ms * DMUTEX__MS / 3)
		t->bound = now + (int64_t)rx->lease_ms * DMUTEX__MS / 3;
	return DMUTEX__TRY_BUSY;
}

/* Called without e->mu, as the entry's acquirer. */
static int
acquire_remote(struct dmutex__rwlock *rx, int op, int mode, int64_t until, int bad_deadline)
{
	struct dmutex__entry *e = rx->entry;
	struct rw_try r = { .rx = rx, .op = op, .trylock = mode == TRY,
		.until = mode == TRY ? 0 : dmutex__timed_deadline(e->client, dmutex__now_ns(), until) };
	struct dmutex__acquire aq = { .c = e->client, .what = "rwlock", .name = e->name,
		.trylock = mode == TRY, .bad_deadline = bad_deadline, .until = until,
		.channel = rw_channel, .try = rw_try, .arg = &r };
	int err;

	if ((err = dmutex__token(r.token)))
		return err;
	err = dmutex__acquire_wait(&aq);
	if (err && (r.maybe_done || r.intent))
		abandon(e->client, e->name, r.maybe_done ? op : 'q', r.token, rx->lease_ms, r.until != 0);
	return err;
}

/*
 * Under e->mu, a reader that already has e: the writer asking to read, a
 * reader of a share set aside as lost, or a recursive read.  1 decided
 * (*err, e->mu dropped), 0 a new reader of this process.
 */
static int
read_again(struct dmutex__entry *e, pthread_t self, int mode, int bad_deadline, int *err)
{
	struct dmutex__reader *r;
	struct dmutex__lost lost;

	*err = 0;
	if (e->held && e->rw_write && pthread_equal(e->owner, self)) {
		/* No downgrade in place: it would block for ever (POSIX may
		 * hang here; a distributed lock must not). */
		*err = mode == TRY ? EBUSY : bad_deadline ? EINVAL : EDEADLK;
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		return 1;
	}
	if (dmutex__rw_gone_reader(e, self)) {
		/* Still in a share set aside as lost: a recursive read of it. */
		*err = ENOLCK;
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		return 1;
	}
	if (!(r = dmutex__rw_reader(e, self)))
		return 0;
	/* Recursive read: granted even while writers wait (POSIX), with no
	 * I/O — unless the share is known lost. */
	dmutex__entry_check_lost(e, dmutex__now_ns(), &lost);
	if (e->lost)
		*err = ENOLCK;
	else if (r->count == INT_MAX)
		*err = EAGAIN;
	else
		r->count++;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	dmutex__lost_report(e, &lost);
	return 1;
}

/* Under e->mu: the process's share, if our clock or the renewer's word
 * says it is lost, is set aside (set_lost_share_aside).  1 if e->mu was
 * dropped meanwhile (to report the loss): look again. */
static int
lost_share_step(struct dmutex__entry *e)
{
	struct dmutex__lost lost;

	if (!e->held || e->rw_write || e->releasing)
		return 0;
	dmutex__entry_check_lost(e, dmutex__now_ns(), &lost);
	if (lost.report) {
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		dmutex__lost_report(e, &lost);
		dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
		return 1;
	}
	if (e->lost)
		(void)set_lost_share_aside(e);
	return 0;
}

/*
 * Under e->mu, a tryrdlock that finds no writer of ours, but Redis busy on
 * the process's share: another reader of ours asks for it (its answer
 * says whether a writer keeps readers out), or the last reader gives it
 * back (the next one asks anew).  EBUSY then would be one with no writer
 * anywhere, which POSIX does not allow.  Waited for as long as a request
 * of our own could take (*until, set at the first wait), no longer.  1 if
 * it waited: look again; 0 if nothing to wait for; -1 if the request is
 * still unanswered by then (the backend failed us: EIO).
 */
static int
try_waits_for_asker(struct dmutex__entry *e, int64_t *until, struct timespec *ts)
{
	int asking = e->rw_rd_asking == 1 || (e->held && !e->rw_write && e->releasing);

	if (!asking || e->rw_wwait || e->rw_remote_wwait)
		return 0;
	if (!*until) {
		*until = dmutex__now_ns() + (int64_t)e->client->cfg.command_timeout_ms * DMUTEX__MS;
		dmutex__ns_to_ts(*until, ts);
	}
	if (dmutex__now_ns() >= *until)
		return -1;
	pthread_cond_timedwait(&e->cv, &e->mu, ts);
	return 1;
}

static int
rd_impl(drwlock_t *rw, int mode, int64_t until, int bad_deadline)
{
	struct dmutex__rwlock *rx;
	struct dmutex__entry *e;
	pthread_t self = pthread_self();
	struct timespec ts, try_ts;
	int64_t try_until = 0;
	int err = 0, asked = 0;

	if ((err = dmutex__rwlock_resolve(rw, &rx)))
		return err;
	e = rx->entry;
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	if (read_again(e, self, mode, bad_deadline, &err))
		return err;
	dmutex__ns_to_ts(until, &ts);
	for (;;) {
		/* Here, not once before the loop: others join while we wait.
		 * The first reader's slot too (record() fills it later). */
		if ((err = reserve_reader(e))) {
			dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
			return err;
		}
		if (lost_share_step(e))
			continue;
		if (e->held && !e->rw_write && !e->releasing && !e->lost && !e->rw_wwait &&
				!e->rw_remote_wwait && dmutex__now_ns() < e->deadline_ns) {
			/* Join the process's share: no I/O. */
			uint64_t gen = e->gen;

			e->readers[e->nreaders].thread = self;
			e->readers[e->nreaders++].count = 1;
			dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
			dmutex__thread_hold_end(e, gen, dmutex__rw_thread_end);
			return 0;
		}
		if (!e->held && !e->acquiring && !e->rw_wwait)
			break;
		if (mode == TRY && !bad_deadline &&
				(asked = try_waits_for_asker(e, &try_until, &try_ts)) > 0)
			continue;
		if (mode == TRY && asked < 0) {
			dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
			dmutex__log(DMUTEX_LOG_ERROR, "rwlock '%s': tryrdlock: the process's request for the "
					"read share got no answer within command_timeout_ms", e->name);
			return EIO;
		}
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
	e->rw_rd_asking = 1;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);

	err = acquire_remote(rx, 'r', mode, until, bad_deadline);

	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	e->acquiring = 0;
	e->rw_rd_asking = 0;
	/* Other readers may join now, or the next one asks. */
	dmutex__entry_wake(e);
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
	if ((e->held && e->rw_write && pthread_equal(e->owner, self)) || dmutex__rw_reader(e, self) ||
			dmutex__rw_gone_reader(e, self)) {
		/* Relock by the writer, or an upgrade: either would wait for
		 * the caller itself. */
		err = mode == TRY ? EBUSY : bad_deadline ? EINVAL : EDEADLK;
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		if (err == EINVAL)
			dmutex__log(DMUTEX_LOG_ERROR, "rwlock '%s': tv_nsec of the deadline out of range", e->name);
		return err;
	}
	if (mode == TRY && (e->held || e->acquiring || e->ngone)) {
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		return EBUSY;
	}
	/* From now on this process lets no new reader into its share. */
	e->rw_wwait++;
	dmutex__ns_to_ts(until, &ts);
	/* Readers of a share set aside as lost are readers still. */
	while (e->held || e->acquiring || e->ngone) {
		if (bad_deadline || dmutex__now_ns() >= until) {
			e->rw_wwait--;
			dmutex__entry_wake(e);
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
	dmutex__entry_wake(e);
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
	if (clock != CLOCK_REALTIME && clock != CLOCK_MONOTONIC) {
		dmutex__log(DMUTEX_LOG_ERROR, "rwlock: clock %d is neither CLOCK_REALTIME nor CLOCK_MONOTONIC",
				(int)clock);
		return EINVAL;
	}
	if (!at)
		return EINVAL;
	if (at->tv_nsec < 0 || at->tv_nsec >= 1000000000L)
		return lock(rw, write, BLOCK, dmutex__now_ns(), 1);
	return lock(rw, write, BLOCK, dmutex__mono_deadline(clock, at), 0);
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
