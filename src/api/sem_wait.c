/*
 * dsem_wait, trywait, timedwait and clockwait are one function with
 * different deadlines:
 *
 * 1. try to take a permit (one script: decrement if positive);
 * 2. none: subscribe to the semaphore's wake channel, note the wake
 *    sequence, and try once more, so that a post between the first try and
 *    the subscription is not missed;
 * 3. sleep until the sequence moves (a post published) or the deadline,
 *    then try again.  A post wakes every waiting process and one of them
 *    wins; the others sleep again.  As a safety net against a lost message
 *    (a subscription that broke and came back) a waiter also tries again
 *    once per lease period on its own.
 */
#include <errno.h>
#include <string.h>

#include "backend/backend.h"
#include "core/acquire_wait.h"
#include "core/bind.h"
#include "core/sem.h"
#include "core/shim.h"

#define NO_DEADLINE INT64_MAX
/* How often a wait looks whether a signal handler interrupted it. */
#define TICK_NS (20 * DMUTEX__MS)

static int (*interrupted)(void);        /* atomic; the shim's, or NULL */

void
dmutex__shim_set_interrupted(int (*fn)(void))
{
	__atomic_store_n(&interrupted, fn, __ATOMIC_RELEASE);
}

/* dmutex__wsub_wait, but 0 with *intr set as soon as the shim says a
 * signal handler ran on this thread since its wait began (POSIX: EINTR).
 * A handler does not wake a condition wait, so it is looked for at each
 * tick of a sleep, which costs no request to the server. */
static int
sleep_or_interrupt(struct dmutex_client *cl, struct dmutex__wsub *sub, uint64_t seq, int64_t until, int *intr)
{
	int (*fn)(void) = __atomic_load_n(&interrupted, __ATOMIC_ACQUIRE);

	if (!fn)
		return dmutex__wsub_wait(cl->be, sub, seq, until);
	for (;;) {
		int64_t tick = dmutex__now_ns() + TICK_NS;

		if ((*intr = fn()))
			return 0;
		if (dmutex__wsub_wait(cl->be, sub, seq, tick < until ? tick : until))
			return 1;
		if (dmutex__now_ns() >= until)
			return 0;
	}
}

/* A wait cancelled in its sleep (the shim's sem_wait is a cancellation
 * point; nothing is taken while it sleeps): what it holds is given back
 * before the thread's own cleanup handlers run. */
struct sleeper {
	struct dmutex__sem *sx;
	struct dmutex__wsub *sub;
};

static void
cancelled(void *arg)
{
	struct sleeper *k = arg;

	__atomic_fetch_sub(&k->sx->waiters, 1, __ATOMIC_ACQ_REL);
	dmutex__waiter_unsub(k->sx->client->be, k->sub);
	dmutex__sem_put(k->sx);
}

/* The sleep of a wait, with the caller's cancellation state cs (disabled
 * but for the shim's waits): *woke 1 if woken.  Written through a pointer,
 * not a local: the cleanup machinery may longjmp. */
static void
sleep_cancellable(struct sleeper *k, uint64_t seq, int64_t until, int *intr, int cs, int *woke)
{
	pthread_cleanup_push(cancelled, k);
	dmutex__cancel_restore(cs);
	*woke = sleep_or_interrupt(k->sx->client, k->sub, seq, until, intr);
	dmutex__nocancel();
	pthread_cleanup_pop(0);
}

static int
wait_held(struct dmutex__sem *sx, struct dmutex__op *o, int64_t until, int try_only, int cs)
{
	struct dmutex_client *cl;
	struct sleeper k = { .sx = sx };
	char channel[DMUTEX__KEY_MAX];
	int64_t recheck_ns, sub_until;
	uint64_t seq;
	int err, taken, intr = 0;

	/* One token for the whole wait: only a take that succeeded is
	 * remembered under it, so asking again with it after a failed take
	 * is a fresh take, and after a lost reply returns that take. */
	if ((err = dmutex__sem_take_once(sx, o, &taken)))
		return err;
	if (taken)
		return 0;
	if (try_only)
		return EAGAIN;
	if (dmutex__now_ns() >= until)
		return ETIMEDOUT;

	cl = sx->client;
	dmutex__sem_channel(sx->client->be, sx->name, channel);
	__atomic_fetch_add(&sx->waiters, 1, __ATOMIC_ACQ_REL);
	sub_until = dmutex__now_ns() + (int64_t)cl->cfg.command_timeout_ms * DMUTEX__MS;
	if (!(k.sub = dmutex__waiter_sub(cl->be, channel, sub_until < until ? sub_until : until))) {
		err = ENOMEM;
		goto out;
	}
	recheck_ns = (int64_t)cl->cfg.lease_ms * DMUTEX__MS;
	for (;;) {
		int64_t next;
		int woke;

		/* Read before asking: a post after the ask moves it. */
		seq = dmutex__wsub_seq(cl->be, k.sub);
		if ((err = dmutex__sem_take_once(sx, o, &taken)) || taken)
			break;
		/* No confirmed subscription yet: a post might not reach us;
		 * try again soon rather than once a lease. */
		next = dmutex__now_ns() + (seq ? recheck_ns : recheck_ns / 10 + DMUTEX__MS);
		sleep_cancellable(&k, seq, next < until ? next : until, &intr, cs, &woke);
		if (!woke && intr) {
			err = EINTR;
			break;
		}
		if (!intr && dmutex__now_ns() >= until) {
			/* A last try: a permit that came at the deadline is taken
			 * (its request given the time of an answer). */
			o->until = dmutex__timed_deadline(cl, dmutex__now_ns(), dmutex__now_ns());
			if (!(err = dmutex__sem_take_once(sx, o, &taken)) && !taken)
				err = ETIMEDOUT;
			break;
		}
	}
	/* No longer a waiter that destroy must refuse for, though still a
	 * user until it returns. */
	__atomic_fetch_sub(&sx->waiters, 1, __ATOMIC_ACQ_REL);
	dmutex__waiter_unsub(cl->be, k.sub);
	return err;
out:
	__atomic_fetch_sub(&sx->waiters, 1, __ATOMIC_ACQ_REL);
	return err;
}

int
dmutex__sem_wait_until(dsem_t *s, struct dmutex__op *o, int64_t until, int try_only, int cs)
{
	struct dmutex__sem *sx;
	int err;

	if ((err = dmutex__sem_resolve(s, &sx)))
		return err;
	/* Another thread may destroy s as soon as this wait took its permit. */
	dmutex__obj_hold(&sx->users);
	/* A timed wait's takes end by its deadline (acquire_wait.h), so that a
	 * server that does not answer cannot keep it a command timeout past. */
	o->until = try_only ? 0 : dmutex__timed_deadline(sx->client, dmutex__now_ns(), until);
	err = wait_held(sx, o, until, try_only, cs);
	dmutex__sem_put(sx);
	return err;
}

static int
wait_until(dsem_t *s, int64_t until, int try_only)
{
	struct dmutex__op o;
	int err;

	if ((err = dmutex__op_init(&o)))
		return err;
	/* Never cancelled (README "Cancellation"). */
	return dmutex__sem_wait_until(s, &o, until, try_only, PTHREAD_CANCEL_DISABLE);
}

static int
sem_wait_impl(dsem_t *s)
{
	return wait_until(s, NO_DEADLINE, 0);
}

static int
sem_trywait_impl(dsem_t *s)
{
	return wait_until(s, NO_DEADLINE, 1);
}

int
dmutex__sem_deadline(const char *name, clockid_t clock, const struct timespec *at,
		int64_t *until)
{
	struct timespec now;
	int64_t left, secs;

	if (clock != CLOCK_REALTIME && clock != CLOCK_MONOTONIC) {
		dmutex__log(DMUTEX_LOG_ERROR, "semaphore '%s': clock %d is neither CLOCK_REALTIME nor CLOCK_MONOTONIC",
				name, (int)clock);
		return EINVAL;
	}
	if (!at || at->tv_nsec < 0 || at->tv_nsec >= 1000000000L) {
		dmutex__log(DMUTEX_LOG_ERROR, "semaphore '%s': %s", name,
				at ? "tv_nsec out of range" : "NULL deadline");
		return EINVAL;
	}
	clock_gettime(clock, &now);
	secs = (int64_t)at->tv_sec - now.tv_sec;
	if (secs > INT64_MAX / 1000000000 - 1) {
		*until = NO_DEADLINE;
		return 0;
	}
	left = secs < 0 ? 0 : secs * 1000000000 + (at->tv_nsec - now.tv_nsec);
	*until = dmutex__now_ns() + (left > 0 ? left : 0);
	if (left > 0 && *until < 0)
		*until = NO_DEADLINE;
	return 0;
}

static int
sem_clockwait_impl(dsem_t *s, clockid_t clock, const struct timespec *at)
{
	struct dmutex__sem *sx;
	int64_t until;
	int err;

	if ((err = dmutex__sem_resolve(s, &sx)))
		return err;
	/* POSIX: the deadline is not examined if a permit is free at once. */
	if (dmutex__sem_deadline(sx->name, clock, at, &until)) {
		if (!(err = dsem_trywait(s)))
			return 0;
		return err == EAGAIN ? EINVAL : err;
	}
	return wait_until(s, until, 0);
}

int
dsem_timedwait(dsem_t *s, const struct timespec *at)
{
	return dsem_clockwait(s, CLOCK_REALTIME, at);
}

/* Not cancellation points (README "Cancellation"): a thread cancelled
 * half-way through a request would leave its state unknown. */
int
dsem_wait(dsem_t *s)
{
	int cs = dmutex__nocancel(), err = sem_wait_impl(s);

	dmutex__cancel_restore(cs);
	return err;
}

int
dsem_trywait(dsem_t *s)
{
	int cs = dmutex__nocancel(), err = sem_trywait_impl(s);

	dmutex__cancel_restore(cs);
	return err;
}

int
dsem_clockwait(dsem_t *s, clockid_t clock, const struct timespec *at)
{
	int cs = dmutex__nocancel(), err = sem_clockwait_impl(s, clock, at);

	dmutex__cancel_restore(cs);
	return err;
}
