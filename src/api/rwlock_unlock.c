/* drwlock_unlock and drwlock_fence. */
#include <errno.h>
#include <string.h>

#include "base/lockorder.h"
#include "core/rwlock.h"

/*
 * Release by token, retrying within the command timeout.  As for mutexes
 * (release.c): a "not ours" that follows a possibly-applied attempt counts
 * as released.  0; ENOLCK not ours; EIO unconfirmed, and then handed to
 * the renewer, which asks on until the lease would have ended (so that a
 * short outage does not leave every other host waiting for the rest of the
 * lease) and, while no request of ours may have run, reports a "not ours"
 * found before the hold's deadline as the hold's loss (rep), as a mutex's
 * unconfirmed release does.
 */
static int
release(struct dmutex_client *c, const char *name, int op, const char *token, unsigned lease_ms,
		const struct dmutex__orphan_rep *rep)
{
	int64_t until = dmutex__now_ns() + (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS;
	int released = 0, maybe = 0, any_maybe = 0, err;

	for (int attempt = 0;; attempt++) {
		err = dmutex__rw_release(c->be, name, op, token, &released, &maybe);
		any_maybe |= maybe;
		if (!err)
			return released || any_maybe ? 0 : ENOLCK;
		if (attempt >= 2 || dmutex__now_ns() >= until)
			break;
		dmutex__sleep_until(dmutex__now_ns() + 20 * DMUTEX__MS * (attempt + 1));
	}
	dmutex__renewer_orphan_rw_rep(c, name, op, token,
			dmutex__now_ns() + (int64_t)lease_ms * DMUTEX__MS, any_maybe ? NULL : rep);
	return EIO;
}

static int
unlock_entry(struct dmutex__entry *e)
{
	struct dmutex__reader *r = NULL;
	struct dmutex_client *c = e->client;
	struct dmutex__lost lost_rep;
	struct dmutex__orphan_rep rep = { 0 };
	pthread_t self = pthread_self();
	char token[DMUTEX__TOKEN_HEX + 1];
	unsigned lease_ms;
	int err, lost, op;

	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	if ((r = dmutex__rw_gone_reader(e, self))) {
		/* A reader of a share set aside as lost (rwlock_lock.c),
		 * reported already: forgotten whole, as below. */
		dmutex__rw_gone_drop(e, r);
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		dmutex__thread_unhold(e);
		return ENOLCK;
	}
	if (e->releasing || !e->held ||
			(e->rw_write ? !pthread_equal(e->owner, self) : !(r = dmutex__rw_reader(e, self)))) {
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		return EPERM;
	}
	dmutex__entry_check_lost(e, dmutex__now_ns(), &lost_rep);
	lost = e->lost;
	if (r) {
		if (!lost && r->count > 1) {
			r->count--;
			dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
			return 0;
		}
		/* A lost share is forgotten whole by each of its readers. */
		dmutex__rw_reader_drop(e, r);
		if (e->nreaders) {
			dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
			dmutex__lost_report(e, &lost_rep);
			dmutex__thread_unhold(e);
			return lost ? ENOLCK : 0;
		}
	}
	/* The writer, or the process's last reader: tell the backend. */
	op = e->rw_write ? 'w' : 'r';
	memcpy(token, e->token, sizeof token);
	lease_ms = e->lease_ms;
	/* What a release retried in the background reports if it finds the
	 * hold lost (not a hold known lost already: reported). */
	if (!lost)
		rep = (struct dmutex__orphan_rep){ .e = e, .valid_ns = e->deadline_ns,
			.fence = e->fence, .cb = e->onlost, .arg = e->onlost_arg };
	e->releasing = 1;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	dmutex__lost_report(e, &lost_rep);

	/* No renewal may outlive the unlock; the release compares tokens,
	 * so one already in flight cannot resurrect the hold. */
	dmutex__renewer_remove(c, e);
	err = release(c, e->name, op, token, lease_ms, &rep);
	if (err == EIO)
		dmutex__log(DMUTEX_LOG_WARN, "rwlock '%s': release not confirmed; retried in the "
				"background until its lease would end", e->name);

	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	dmutex__entry_release_answered(e, err, lost, &lost_rep);
	dmutex__entry_forget(e);
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	dmutex__lost_report(e, &lost_rep);
	dmutex__thread_unhold(e);
	return lost ? ENOLCK : err;
}

/*
 * As a mutex's hold (README "A hold ends with its thread"): a thread that
 * returns or calls pthread_exit while it reads or writes gives the lock
 * up, every level of a recursive read, rather than leave every host
 * waiting for a thread that is gone (LTP pthread_rwlock_timedrdlock 6-2
 * then destroys it).  Read-write locks have no owner-died state: a plain
 * release, with a warning.
 */
void
dmutex__rw_thread_end(struct dmutex__entry *e, const char *why)
{
	int err, n = 0;

	while (!(err = unlock_entry(e)))
		n++;
	/* A hold already lost (reported then) has nothing left to release. */
	if (!n && err == ENOLCK)
		dmutex__log(DMUTEX_LOG_WARN, "rwlock '%s': %s while holding it: it had been lost; "
				"nothing to release", e->name, why);
	else if (n || err != EPERM)
		dmutex__log(DMUTEX_LOG_WARN, "rwlock '%s': %s while holding it: released", e->name, why);
}

static int
unlock_impl(drwlock_t *rw)
{
	struct dmutex__rwlock *rx;
	struct dmutex__entry *e;
	int err;

	if ((err = dmutex__rwlock_resolve(rw, &rx)))
		return err;
	/* Once our share or hold is given up, another thread may take the
	 * lock, release and destroy it while we report: e stays ours. */
	e = rx->entry;
	__atomic_fetch_add(&e->refs, 1, __ATOMIC_ACQ_REL);
	err = unlock_entry(e);
	dmutex__entry_put(e);
	return err;
}

int
drwlock_unlock(drwlock_t *rw)
{
	int cs = dmutex__nocancel(), err = unlock_impl(rw);

	dmutex__cancel_restore(cs);
	return err;
}

static int
fence_impl(drwlock_t *rw, uint64_t *token)
{
	struct dmutex__rwlock *rx;
	struct dmutex__entry *e;
	struct dmutex__lost lost;
	int err;

	if ((err = dmutex__rwlock_resolve(rw, &rx)))
		return err;
	if (!token)
		return EINVAL;
	e = rx->entry;
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	if (!e->held || !e->rw_write || !pthread_equal(e->owner, pthread_self())) {
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		return EPERM;
	}
	/* The holder's own clock decides, not the renewer's last word. */
	dmutex__entry_check_lost(e, dmutex__now_ns(), &lost);
	if (e->lost)
		err = ENOLCK;
	else
		*token = e->fence;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	dmutex__lost_report(e, &lost);
	return err;
}

int
drwlock_fence(drwlock_t *rw, uint64_t *token)
{
	int cs = dmutex__nocancel(), err = fence_impl(rw, token);

	dmutex__cancel_restore(cs);
	return err;
}
