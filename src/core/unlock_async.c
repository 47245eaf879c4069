/*
 * Unlock without waiting for the release's answer (issue 15 item 2;
 * README "How it works", "Asynchronous release").
 *
 * Why it cannot let two holders overlap: the release is a compare-and-
 * delete by our token (release.lua), so it removes our hold or nothing.
 * Until its answer, the key is at worst still ours for a little longer
 * (and never past its lease: it is no longer renewed); nobody else can
 * take it meanwhile, and once it is gone we no longer use it.
 *
 * What the caller is not told at once, it is told later: an answer that
 * says the key was not ours (our hold had been lost without our noticing)
 * goes to the mutex's onlost handler and the log, read and acted on by the
 * renewal thread within milliseconds of its arrival; never to a later
 * call, which belongs to another hold (a lock that does not lock must not
 * report a loss, and a pthread_t is reused by the next thread); no
 * answer at all (connection lost, an error, NOSCRIPT inside another
 * caller's request) hands the release to the renewer's orphan list, as a
 * synchronous unlock's EIO does.
 *
 * Ordering: the answer is read by the connection's next user, which
 * pipelines behind it; an acquire of the same name in this process first
 * waits for the answer (dmutex__rel_settle), so that it cannot reach Redis
 * before our own release, whatever connection it takes.
 */
#include <errno.h>
#include <string.h>

#include "backend/backend.h"
#include "internal.h"
#include "base/lockorder.h"
#include "metrics.h"

/* A release that may not have run: retried in the background, as a
 * synchronous unlock's EIO is (not once the client is closing: its lease
 * ends it). */
static void
rescue(void *arg, const char *name, const char *token, int64_t until_ns)
{
	struct dmutex_client *c = arg;

	if (!__atomic_load_n(&c->closing, __ATOMIC_ACQUIRE))
		dmutex__renewer_orphan(c, name, token, DMUTEX__REL_CLEAN, until_ns);
}

int
dmutex__unlock_async_ticket(struct dmutex__entry *e, const char *token, unsigned lease_ms,
		int64_t now, struct dmutex__rel_ticket **out)
{
	struct dmutex_client *c = e->client;
	struct dmutex__backend *be = c->be;
	struct dmutex__rel_ticket *t;
	int64_t until = now + (int64_t)lease_ms * DMUTEX__MS;

	if (!c->cfg.async_release || !be->ops->release_async ||
			__atomic_load_n(&e->rel, __ATOMIC_ACQUIRE))
		return -1;
	if (be->ops->release_async(be, e->name, token, DMUTEX__REL_CLEAN,
			now + (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS, until, rescue, c, &t))
		return -1;
	if (out) {
		dmutex__ticket_ref(t);
		*out = t;
	}
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	memcpy(e->rel_token, token, sizeof e->rel_token);
	e->rel_until_ns = until;
	e->rel_valid_ns = e->deadline_ns;
	e->rel_fence = e->fence;
	e->rel_onlost = e->onlost;
	e->rel_onlost_arg = e->onlost_arg;
	__atomic_store_n(&e->rel, t, __ATOMIC_RELEASE);
	dmutex__entry_forget(e);
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	/* The answer may be read by nobody for a long time (the connection
	 * idles in the pool): the renewal thread reads it soon, so that a
	 * release found not ours is reported within a few milliseconds of
	 * its answer, whatever the program does next. */
	dmutex__renewer_watch_rel(c, e);
	return 0;
}

int
dmutex__unlock_async(struct dmutex__entry *e, const char *token, unsigned lease_ms, int64_t now)
{
	return dmutex__unlock_async_ticket(e, token, lease_ms, now, NULL);
}
