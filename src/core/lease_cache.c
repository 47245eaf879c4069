/*
 * Cached leases (README "Cached leases", issue 15 item 1): a process that
 * unlocks a lock nobody else asked for keeps the lease, and a thread of the
 * process that locks again takes it with no round trip.
 *
 * What a kept lease is, under e->mu: e->kept with e->held 0; e->token,
 * e->deadline_ns, e->lease_ms and e->gen are the lease's (the renewer
 * renews it while it is used); e->blk_next .. e->blk_last are fencing
 * tokens reserved in Redis for local holds (none until a local hold first
 * asks for its token: dmutex__cache_fence); e->ksub is the subscription
 * to the lock's wake channel on which another process says it wants the
 * lock (any message there, or a broken connection, moves its sequence
 * past e->kseq: the lease is then "revoked").
 *
 * Safety rests on three rules, each checked where a local hold starts:
 *   - the lease is ours for more than half a lease yet (deadline counted
 *     from before the request that last granted or renewed it), so the
 *     lock key that keeps every other process out outlives the start of
 *     the hold, which the renewer then renews as any other;
 *   - nobody asked for it since we kept it (e->kseq): not for safety, for
 *     the hand-over (a waiting process is served at the next unlock);
 *   - a local hold's token, when it asks for one, is a reserved token:
 *     every token any later holder gets is above the whole block
 *     (lease_cache.lua raised the name's counter past it, the lease still
 *     ours), and the block is reserved while the hold runs on the lease;
 *   - the hold's mutex has the lease's length: every hold runs on its own
 *     mutex's lease (a 10 s mutex must not live on a 1 s lease).
 *
 * What the lease cannot prevent (the key deleted, evicted or lost with a
 * failover while kept) it reports: the holds granted on the lease since
 * Redis last confirmed it (e->suspects, one record per onlost handler) are
 * reported lost as soon as anyone finds the key gone or not ours (the
 * renewer, a block reservation, the release), and a hold still running
 * is marked lost (ENOLCK from its unlock and fence).  A confirmation (a
 * renewal, a reservation) clears the holds that ended before its request
 * went out: the key was ours then, and a token never comes back once gone.
 *
 * This file decides at lock and unlock; the record of the suspects and the
 * reports are kept_lease.c's, the give-back of a lease nobody uses (or one
 * asked back) the renewer's, which owns the lease meanwhile.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "internal.h"
#include "base/lockorder.h"
#include "metrics.h"

/* Tokens reserved per round trip: one round trip per this many holds that
 * ask for theirs.
 * Far below 2^20 (a millisecond of the token clock, token.lua), so the
 * counter does not run ahead of the clock by any amount that matters. */
#define BLOCK 4096u

/* A lease another process asked for still serves the threads of ours that
 * wait for it when it is asked, for at most this many local holds and
 * this long: a batch.  Handing a lock between processes costs a release,
 * the waiters' attempts after its wake-up and the next keep (about twenty
 * Redis commands), between threads of one process nothing; the other
 * process waits for the batch, not for ever. */
#define BATCH_HOLDS 32
#define BATCH_NS (5 * DMUTEX__MS)
/* (The pool of issue 28, 3 processes x 200 jobs: 16 holds and 2 ms sent
 * 17-24 commands a job, 32 and 5 ms 13-16, 64 and 10 ms 11-16 in no less
 * time.) */

static void
set_kept(struct dmutex__entry *e, int kept)
{
	/* Read without e->mu by dmutex__renewer_kick, as a hint. */
	__atomic_store_n(&e->kept, kept, __ATOMIC_RELAXED);
}

/* Under e->mu: a batch of at most BATCH_HOLDS local holds and BATCH_NS
 * starts now. */
static void
batch_begin(struct dmutex__entry *e, int64_t now)
{
	e->batch_until_ns = now + BATCH_NS;
	e->batch_left = BATCH_HOLDS;
}

/* Under e->mu, e kept and asked back (or kept for a batch): whether one
 * more local hold may start on it.  A batch begins at the first unlock
 * that sees the want with threads of ours waiting (begin 1); a lock
 * only continues one: a thread that finds the lease asked back and
 * nobody's batch going gives it back, as it always did. */
static int
batch_open(struct dmutex__entry *e, int64_t now, int begin)
{
	if (!dmutex__kept_asked(e))
		return 0;
	if (!e->batch_until_ns) {
		if (!begin)
			return 0;
		batch_begin(e, now);
	}
	return e->batch_left > 0 && now < e->batch_until_ns;
}

/* Under e->mu: the lease is ours long enough to start a hold on it. */
static int
fresh(const struct dmutex__entry *e, int64_t now)
{
	return e->deadline_ns - now > (int64_t)e->lease_ms * DMUTEX__MS / 2;
}

int
dmutex__cache_allowed(const struct dmutex__mutex *mx)
{
	const struct dmutex_client *c = mx->entry->client;

	/* Robust: a local hold would have to tell Redis that a thread holds
	 * it (owner died); fair: the queue decides; Redlock and Cluster: no
	 * cache op (README "Cached leases"). */
	return mx->cache && !mx->fair && mx->robust != DMUTEX_ROBUST && c->cfg.lease_cache &&
			c->be->ops->cache && mx->entry->kind == DMUTEX__KIND_MUTEX;
}

/* Under e->mu: mx may start a hold on the kept lease (its own lease length). */
static int
fits(const struct dmutex__mutex *mx, const struct dmutex__entry *e)
{
	return dmutex__cache_allowed(mx) && mx->lease_ms == e->lease_ms;
}

/* ---- holds granted since the last confirmation ---- */

static struct dmutex__suspect *
suspect_of(struct dmutex__entry *e, void (*cb)(const char *, void *), void *arg)
{
	for (size_t i = 0; i < e->nsuspects; i++)
		if (e->suspects[i].cb == cb && e->suspects[i].arg == arg)
			return &e->suspects[i];
	return NULL;
}

/* Under e->mu, before a local hold starts: its record, made now, so that
 * the hold cannot start unrecorded (ENOMEM: it asks Redis instead). */
static int
suspect_room(struct dmutex__entry *e, const struct dmutex__mutex *mx)
{
	if (suspect_of(e, mx->onlost, mx->onlost_arg) || e->nsuspects < e->suspects_cap)
		return 1;
	size_t ncap = e->suspects_cap ? 2 * e->suspects_cap : 4;
	struct dmutex__suspect *v = realloc(e->suspects, ncap * sizeof *v);
	if (!v)
		return 0;
	e->suspects = v;
	e->suspects_cap = ncap;
	return 1;
}

static void
suspect_start(struct dmutex__entry *e, uint64_t fence)
{
	struct dmutex__suspect *s = suspect_of(e, e->onlost, e->onlost_arg);

	if (!s) {
		s = &e->suspects[e->nsuspects++];
		*s = (struct dmutex__suspect){ e->onlost, e->onlost_arg, fence, fence, 0, 0 };
	}
	/* The range of the tokens the holds have: a hold without one (0,
	 * until it asks: dmutex__cache_fence) names none. */
	if (fence) {
		if (!s->fence_lo)
			s->fence_lo = fence;
		s->fence_hi = fence;
	}
	s->holds++;
	s->end_ns = 0;
}

static void
suspect_end(struct dmutex__entry *e, int64_t now)
{
	struct dmutex__suspect *s = suspect_of(e, e->onlost, e->onlost_arg);

	if (s)
		s->end_ns = now;
}

/* Waiter thread, no lock held: a message on a kept lease's channel.  The
 * renewal thread releases kept leases nobody holds that were revoked. */
static void
kick(void *client)
{
	dmutex__renewer_kick(client);
}

/* Without e->mu: subscribe, then mark the lease kept in Redis, both by
 * `until` (the unlock's one deadline, which its release shares if this
 * fails).  1 kept (*sub, *seq, *sent set), 0 release as usual. */
static int
keep(struct dmutex__entry *e, const char *token, int64_t until, struct dmutex__wsub **sub,
		uint64_t *seq, uint64_t *heard, int64_t *sent)
{
	struct dmutex_client *c = e->client;
	struct dmutex__backend *be = c->be;
	char *channel = be->ops->channel(be, e->name);
	uint64_t last;
	int result = 0;

	*sub = channel ? dmutex__waiter_sub_notify(be, channel, until, kick, c) : NULL;
	free(channel);
	if (!*sub)
		return 0;
	/* Read before the script: a want published after the script read the
	 * lock hash reaches this subscription (confirmed above, or, if not,
	 * its confirmation moves the sequence: revoked, conservatively). */
	*heard = dmutex__wsub_heard(be, *sub);
	*seq = dmutex__wsub_seq(be, *sub);
	*sent = dmutex__now_ns();
	/* No block of tokens: a local hold that asks reserves one
	 * (dmutex__cache_fence). */
	if (be->ops->cache(be, e->name, token, 0, 0, until, &last, &result) || result != 1) {
		dmutex__waiter_unsub_notify(be, *sub);
		*sub = NULL;
		return 0;
	}
	return 1;
}

/* Without e->mu: keep the lease for a batch of the threads of ours that
 * wait for it, whoever else waits, by `until`.  No subscription: the
 * lease counts as asked back from the start (e->ksub NULL), so it is
 * given back after the batch, or at the first unlock no thread of ours
 * waits for.  1 kept (*sent set), 0 release as usual. */
static int
keep_batch(struct dmutex__entry *e, const char *token, int64_t until, int64_t *sent)
{
	struct dmutex__backend *be = e->client->be;
	uint64_t last;
	int result = 0;

	*sent = dmutex__now_ns();
	return !be->ops->cache(be, e->name, token, 0, 1, until, &last, &result) && result == 3;
}

/* Under e->mu: the lease is kept, as cache() answered at sent (no block
 * of tokens yet); sub NULL for a batch's (asked back from the start). */
static void
kept_by(struct dmutex__entry *e, struct dmutex__wsub *sub, uint64_t seq, uint64_t heard, int64_t sent)
{
	set_kept(e, 1);
	e->ksub = sub;
	e->kseq = seq;
	e->kheard = heard;
	e->confirmed_ns = sent;
	e->blk_next = 1;
	e->blk_last = 0;
}

/* Under e->mu, the owner's outermost unlock, the lease kept: the hold ends,
 * the process keeps the lease. */
static void
end_local(struct dmutex__entry *e, int64_t now)
{
	suspect_end(e, now);
	if (e->held && e->held_counted)
		__atomic_fetch_sub(&e->client->held, 1, __ATOMIC_ACQ_REL);
	e->held = 0;
	e->held_counted = 0;
	e->depth = 0;
	e->last_use_ns = now;
	dmutex__entry_wake(e);
}

int
dmutex__cache_unlock_local(struct dmutex__mutex *mx, struct dmutex__entry *e, int64_t now)
{
	/* dmutex__cache_unlock's way to its "kept" label, with no side
	 * effect where it would turn off. */
	if (!e->kept || !fits(mx, e) || !fresh(e, now) || now < e->nocache_until_ns ||
			dmutex__kept_revoked(e))
		return 0;
	e->last_end_ns = now;
	end_local(e, now);
	return 1;
}

int
dmutex__cache_unlock(struct dmutex__mutex *mx, struct dmutex__entry *e, int64_t now, int64_t until)
{
	char token[DMUTEX__TOKEN_HEX + 1];
	struct dmutex__wsub *sub;
	uint64_t seq, heard;
	int64_t prev_end = e->last_end_ns, sent;
	int rc;

	e->last_end_ns = now;
	if (!fits(mx, e) || !fresh(e, now))
		return 0;
	if (e->kept) {
		if (!dmutex__kept_revoked(e))
			goto kept;
		/* Another process waits.  Threads of ours waiting now take it
		 * first, within the batch; then hand over, and keep nothing
		 * for a lease but batches (contended: caching only costs). */
		if (e->turn_waiters && batch_open(e, now, 1))
			goto kept;
		e->nocache_until_ns = now + (int64_t)e->lease_ms * DMUTEX__MS;
		return 0;
	}
	if (now < e->nocache_until_ns) {
		/* Contended lately: kept only for a batch of the threads of
		 * ours that wait for it now (one round trip). */
		if (!e->turn_waiters)
			return 0;
		memcpy(token, e->token, sizeof token);
		e->releasing = 1;
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		rc = keep_batch(e, token, until, &sent);
		dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
		e->releasing = 0;
		if (rc != 1)
			return 0;
		kept_by(e, NULL, 0, 0, sent);
		batch_begin(e, now);
		goto kept;
	}
	/* Keep only a lock this process took again soon after its last hold
	 * ended: a name locked once (or rarely) is released at once, as
	 * without caching, and costs no subscription. */
	if (!prev_end || e->start_ns - prev_end > (int64_t)e->lease_ms * DMUTEX__MS / 3)
		return 0;
	/* The first unlock of this lease: two round trips, once per lease. */
	memcpy(token, e->token, sizeof token);
	e->releasing = 1;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	rc = keep(e, token, until, &sub, &seq, &heard, &sent);
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	e->releasing = 0;
	if (rc != 1) {
		/* Someone asked meanwhile, or Redis failed: release as usual
		 * (which also finds out whether the lease is still ours). */
		e->nocache_until_ns = now + (int64_t)e->lease_ms * DMUTEX__MS;
		return 0;
	}
	kept_by(e, sub, seq, heard, sent);
	/* Asked back already (a message, or a subscription confirmed late)
	 * while we were not yet kept: the kick it sent found nothing kept
	 * and looked at nothing, and the renewal thread would only see it at
	 * this lease's next renewal, a third of a lease from now, while the
	 * other process waits (cond::signal_wakes_a_waiter_of_another_process
	 * _at_once: woken after 3339 ms, lease 10 s, at load 5).  Entry, then
	 * renewer: the lock order. */
	if (dmutex__kept_revoked(e))
		dmutex__renewer_kick(e->client);
kept:
	end_local(e, now);
	return 1;
}

/* Under e->mu, kept and nobody holding it: start a hold of mx by us. */
static void
take(struct dmutex__mutex *mx, struct dmutex__entry *e, int64_t now)
{
	e->held = 1;
	e->owner = pthread_self();
	e->depth = 1;
	/* A token only if one is reserved: else the hold's first
	 * dmutex_fence reserves a block (dmutex__cache_fence). */
	e->fence = e->blk_next <= e->blk_last ? e->blk_next++ : 0;
	e->lost = e->lost_reported = 0;
	e->inconsistent = 0;
	e->robust = 0;
	e->fair = 0;
	e->onlost = mx->onlost;
	e->onlost_arg = mx->onlost_arg;
	e->last_use_ns = now;
	if (e->batch_until_ns)
		e->batch_left--;
	suspect_start(e, e->fence);
	dmutex__entry_count_hold(e, now);
	/* Not in client->held (internal.h held_counted): two lock-prefixed
	 * additions less on the cached path. */
	e->held_counted = 0;
}

int
dmutex__cache_lock_local(struct dmutex__mutex *mx, struct dmutex__entry *e, int64_t now)
{
	if (!e->kept || !fits(mx, e) || dmutex__kept_revoked(e) || !fresh(e, now) ||
			!suspect_room(e, mx))
		return 0;
	take(mx, e, now);
	return 1;
}

int
dmutex__cache_lock(struct dmutex__mutex *mx, struct dmutex__entry *e, int64_t now)
{
	struct dmutex_client *c = e->client;

	if (!e->kept)
		return 0;
	if (fits(mx, e) && (!dmutex__kept_revoked(e) || batch_open(e, now, 0)) && fresh(e, now) &&
			suspect_room(e, mx)) {
		take(mx, e, now);
		return 1;
	}
	/* Revoked, too close to its end, or this mutex may not use it: give
	 * the lease back, then ask as anyone would. */
	e->nocache_until_ns = now + (int64_t)e->lease_ms * DMUTEX__MS;
	dmutex__renewer_give_back_locked(e,
			dmutex__now_ns() + (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS);
	return 0;
}

/* Under e->mu: the running local hold now has token fence (its handler's
 * record, for the reports: the range of the tokens it names). */
static void
suspect_fenced(struct dmutex__entry *e, uint64_t fence)
{
	struct dmutex__suspect *s = suspect_of(e, e->onlost, e->onlost_arg);

	if (!s)
		return;
	if (!s->fence_lo)
		s->fence_lo = fence;
	s->fence_hi = fence;
}

/*
 * Under e->mu (dropped meanwhile), the caller's local hold on the kept
 * lease having no token yet (take): the next reserved token, reserving a
 * block first if none is left (lease_cache.lua: one round trip per BLOCK
 * holds that ask; a keep reserves none, since most programs never ask).
 * The script reserves only while the lease is ours, and the hold runs on
 * it: the block is above every earlier holder's token and below every
 * later one's, as a block reserved at the keep was.  Not ours: the hold
 * is lost (the caller's ENOLCK, reported by *lost), and the other holds
 * granted on the lease since Redis last confirmed it go to *sus, as the
 * renewer reports them.  No answer: asked again with backoff while the
 * hold lasts, as a plain hold's token is (mutex_fence.c): the hold ends
 * with a token or lost, never "maybe" (the lease's end, unconfirmed, is
 * lost).  0 (the caller reads e->lost), or EIO: Redis refused (foreign
 * data in the meta hash, an ACL), as dmutex_fence says.
 */
int
dmutex__cache_fence(struct dmutex__entry *e, struct dmutex__lost *lost, struct dmutex__suspects *sus)
{
	struct dmutex_client *c = e->client;
	char token[DMUTEX__TOKEN_HEX + 1];

	lost->report = 0;
	for (int attempt = 0;; attempt++) {
		int64_t sent, until = e->deadline_ns, now;
		uint64_t last = 0;
		int result = 0, err;

		if (e->lost)
			return 0;
		if (e->blk_next <= e->blk_last) {
			e->fence = e->blk_next++;
			suspect_fenced(e, e->fence);
			return 0;
		}
		memcpy(token, e->token, sizeof token);
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		sent = dmutex__now_ns();
		err = c->be->ops->cache(c->be, e->name, token, BLOCK, 1, until, &last, &result);
		dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
		now = dmutex__now_ns();
		dmutex__entry_check_lost(e, now, lost);
		if (e->lost)
			return 0;
		if (!err && (result == 1 || result == 3) && last >= BLOCK) {
			/* Only the holder changes the hold: still this lease.
			 * (A renewal may have confirmed it later than sent.) */
			if (sent > e->confirmed_ns)
				dmutex__kept_confirmed(e, sent);
			e->blk_next = last - BLOCK + 1;
			e->blk_last = last;
			continue;
		}
		if (err && result == -1) {
			/* Refused (foreign data in the meta hash, an ACL):
			 * asking again would be refused again. */
			dmutex__log(DMUTEX_LOG_ERROR, "'%s': a local hold's token: the server refused to "
					"reserve one", e->name);
			return EIO;
		}
		if (!err && result == 0) {
			dmutex__log(DMUTEX_LOG_WARN, "'%s': a local hold's token: the kept lease is no "
					"longer ours", e->name);
			dmutex__entry_mark_lost(e);
			dmutex__kept_gone(e, sus);
			dmutex__renewer_remove(c, e);
			dmutex__entry_check_lost(e, now, lost);
			return 0;
		}
		dmutex__entry_backoff(e, attempt, lost);
	}
}
