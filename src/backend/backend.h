/*
 * The backend face: everything the core (src/core/, src/api/) asks of a
 * store of locks goes through one table, struct dmutex__backend_ops, that a
 * backend fills in, and the static inline calls below that dispatch
 * through it (they keep the names the core has always called, so the call
 * sites read as before).  The core includes nothing else of src/backend/
 * and never learns which topology is behind it.  A new backend plugs in
 * with no change above this file: it embeds struct dmutex__backend first
 * in its own state, fills a static const table (the Redis ones are in
 * redis/redis.c, redlock.c and cluster.c; Sentinel is redis.c's table
 * with a locator), leaves NULL what it cannot do (the face then answers
 * ENOTSUP, or the comment says what NULL means), and is picked by
 * dmutex__backend_create in create.c from the URL.  Wake-ups are "wake
 * subscriptions" on a channel (Redis: pub/sub; a store with watches: a
 * watch on a key), each with a sequence that moves on every message.
 *
 * Every call returns 0 or EIO unless it says otherwise.  EIO means the
 * backend did not answer or answered an error; the detail goes to the
 * log.  `maybe_done` tells the caller that the request may have been
 * applied all the same (it was sent, the reply was lost), so the caller
 * must not assume nothing happened.
 */
#ifndef DMUTEX_BACKEND_H
#define DMUTEX_BACKEND_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "backend/counts.h"
#include "backend/net/addr.h"
#include "backend/view.h"
#include "base/base.h"

struct dmutex__node;
struct dmutex__waiter;
/* A wake subscription (wake_sub): the backend's own. */
struct dmutex__wsub;

/* The longest key or channel name the backend makes (backend/keys.h):
 * prefix (<= 128) + kind + name (<= 512) + braces. */
#define DMUTEX__KEY_MAX (128 + 16 + 512 + 4)
/* A channel name with a token after it (a condition variable waiter's). */
#define DMUTEX__CHANNEL_MAX (DMUTEX__KEY_MAX + DMUTEX__TOKEN_HEX + 2)
/* A fair lock's hand-over as wake_handed reports it. */
#define DMUTEX__HANDED_MAX 64

/* What the backend is told of the client (the core's struct dmutex_client
 * stays the core's): pointers into the client, which outlives it. */
struct dmutex__backend_cfg {
	const struct dmutex__node_addr *nodes;  /* 1, or N for Redlock; nodes[0].cluster:
	                                         * the template of a cluster */
	size_t nnodes;
	unsigned connect_timeout_ms;
	unsigned command_timeout_ms;
	unsigned lease_ms;              /* the client's default lease */
	unsigned node_timeout_ms;       /* Redlock's per-node timeout; 0: from the lease */
	unsigned idle_ms;               /* a name's state expires this long after its last use */
	const char *prefix;             /* of every key */
	const char *host;               /* this machine, recorded for operators */
	const char *hostid;             /* "boot_id/pidns", or "" */
	const pid_t *pid;               /* this process: the client's, set anew in a fork
	                                 * child before the backend's atfork_child */
};

/* Release modes, as release.lua reads them. */
enum {
	DMUTEX__REL_CLEAN = 0,
	DMUTEX__REL_NOTREC = 1,
	DMUTEX__REL_DIED = 2,
	DMUTEX__REL_ABANDON = 3,
	/* ABANDON by a waiter that leaves a non-fair lock's queue (it gave
	 * up): also passes on a wake-up it may have been given (release.lua).
	 * Not for Redlock's roll-back of a minority, which waits on. */
	DMUTEX__REL_LEAVE = 4,
	/* or'ed in: a fair lock's release, which hands the lock to the head
	 * of its queue (fair_release.lua) */
	DMUTEX__REL_FAIR = 0x10
};


enum {
	DMUTEX__ACQ_OK = 0,
	DMUTEX__ACQ_BUSY = 1,
	DMUTEX__ACQ_NOTREC = 2,
	DMUTEX__ACQ_VERSION = 3         /* keys written by another version: EIO */
};

struct dmutex__acq {
	/* in */
	const char *name;
	const char *token;
	unsigned lease_ms;
	long tid;
	int robust;             /* recorded for operators: "owner died" or "expired" */
	int wait;               /* the caller listens for the wake-up and waits if
	                         * the lock is busy: the holder's release publishes
	                         * only for such callers (acquire.lua) */
	int64_t deadline;       /* CLOCK_MONOTONIC ns by which the call ends, every
	                         * node, phase and dial included (trylock, a timed
	                         * lock); the backend's own timeouts still bound it
	                         * (a deadline further off changes nothing); 0:
	                         * those alone */
	int fair;               /* queue in Redis (fair_acquire.lua); one Redis only */
	int pop;                /* a queued non-fair waiter whose thread pops its
	                         * grant from its own list (backend.h wake_pop) */
	int64_t stamp;          /* this request's send time (CLOCK_MONOTONIC ns):
	                         * a queued waiter's details keep it, and the
	                         * release that grants it the lock echoes it
	                         * (wake_queue.lua; a fair lock's: fair_acquire.lua's
	                         * details, fair_release.lua's hand-over), so that
	                         * the waiter knows which of its requests the grant
	                         * followed */
	int fresh;              /* fair: no request with this token was sent before
	                         * (a new token, not an offered one): it is in no
	                         * queue, so fair_acquire.lua need not look */
	/* out */
	int status;
	uint64_t fence;
	int died;
	long long pttl_ms;      /* BUSY: the holder's remaining lease; < 0 unknown */
	int split;              /* BUSY: nobody has a quorum; retry after pttl_ms,
	                         * do not wait for a wake-up (our own release of
	                         * the minority we took just sent one) */
	int maybe_done;
	int refused;            /* on EIO: the backend answered no (NOPERM, WRONGTYPE...) */
};

/* A fair lock's local hand-over (ops->release_to, README "Fair locks"): a
 * thread of the releasing process that waits for the lock, with the hold
 * it would record (not robust: a robust waiter learns of a death only
 * from a hold it claimed itself). */
struct dmutex__handoff {
	/* in */
	const char *token;
	unsigned lease_ms;
	long tid;
	/* out: 1 when the lock went to it (nobody queued in Redis came
	 * first), with the hold's fencing token and whether its previous
	 * owner died; 0 when the queue's head got it, or it was freed */
	int granted;
	uint64_t fence;
	int died;
};

struct dmutex__renewal {
	const char *name;
	const char *token;
	unsigned lease_ms;
	int rw;                 /* a read-write lock's hold: 'r' share, 'w' write; 0 a mutex */
	int result;             /* out: 1 renewed, 0 not ours any more, -1 failed */
	int writer_waits;       /* out, rw 'r': a writer waits for the lock */
};

struct dmutex__backend;

/* An asynchronous release (ops->release_async): sent, its answer to come.
 * Counted references: the caller's (dmutex__ticket_put) and the
 * connection's until the answer is read.  Every backend's ticket begins
 * with this head: the table whose ticket_* operations read it. */
struct dmutex__backend_ops;
struct dmutex__rel_ticket {
	const struct dmutex__backend_ops *ops;
};
enum {
	DMUTEX__TICKET_PENDING = 0,     /* no answer read yet */
	DMUTEX__TICKET_RELEASED,        /* compare-and-delete found our token */
	DMUTEX__TICKET_NOT_OURS,        /* it found another token, or none */
	DMUTEX__TICKET_UNKNOWN,         /* no usable answer: it may or may not have run */
	DMUTEX__TICKET_NOT_RUN          /* an answer that says it did not run (an error,
	                                 * NOSCRIPT): not rescued; the core releases
	                                 * again, and a "not ours" then is a loss */
};

/* An asynchronous release that may have run (no answer, a reply of the
 * wrong shape): the core retries it in the background until until_ns (its
 * lease's end).  One whose answer says it did not run (an error, NOSCRIPT
 * met inside another caller's request) is not rescued: it settles
 * DMUTEX__TICKET_NOT_RUN, and the core that reads it releases again.  Called by whichever
 * thread read the answer, holding no lock of the backend's. */
typedef void (*dmutex__rescue_fn)(void *arg, const char *name, const char *token,
		int64_t until_ns);

/* A condition variable's leave in flight (cond_leave_start .. _end), on
 * the caller's stack: the backend's own, the core only hands it on. */
struct dmutex__cond_leaving {
	void *own[2];
	int64_t until;
};

/* A read-write lock's acquisition (rw_acquire): op 'r' share, 'w' write
 * lock ('q', release only: a waiting writer's intent). */
struct dmutex__rw_acq {
	int op;
	const char *token;
	unsigned lease_ms;
	int wait;               /* a writer that will wait: register its intent */
	int64_t deadline;       /* as dmutex__acq's (a timed lock's); 0: none */
	long tid;               /* a writer's thread, recorded for operators */
	/* out */
	int taken;
	uint64_t fence;
	long long pttl_ms;      /* not taken: the blocking hold ends in at most this */
	int maybe_done;
	int refused;
};

/* ---- an operation asked again after a lost reply (semaphores, barriers) ----
 * Every try carries one token; the server keeps the result under it for
 * window_ms and a second more, so a try that finds it is not applied
 * twice.  A first try carries deadline_ms 0; a retry carries the server's
 * time (ms) after which it is refused (DMUTEX__OP_REFUSED) rather than
 * applied, set by the core no later than the server's time at the first
 * try plus the window: one that reaches the server when the result may be
 * gone is never applied again.  The backend reads token, window_ms and
 * deadline_ms and until, and sets maybe_done; the rest is the core's
 * (src/core/retry.c). */
struct dmutex__op {
	char token[DMUTEX__TOKEN_HEX + 1];
	unsigned window_ms;     /* the client's retry_window_ms */
	long long deadline_ms;  /* 0: none (no try lost since the last answer) */
	int maybe_done;         /* the latest try failed (EIO) but may have been
	                         * applied: it reached Redis, its answer did not
	                         * come back (or made no sense) */
	int64_t sent;           /* CLOCK_MONOTONIC ns: the latest try went out */
	int64_t until;          /* CLOCK_MONOTONIC ns by which a try ends, as
	                         * dmutex__acq's deadline (a timed wait's); 0: the
	                         * backend's own timeouts */
	int64_t lost_at;        /* the first try since the last answer went out; 0: none */
	int expired;            /* gave up: whether it was applied is unknown */
};
#define DMUTEX__OP_REFUSED (-2LL)
#define DMUTEX__OP_REFUSED_GEN (-1LL)

struct dmutex__backend_ops {
	int (*acquire)(struct dmutex__backend *be, struct dmutex__acq *a);
	/* Ends by deadline (CLOCK_MONOTONIC ns), every node included. */
	int (*release)(struct dmutex__backend *be, const char *name, const char *token,
			int mode, int64_t deadline, int *released, int *maybe_done);
	/* Optional (NULL: no local hand-over; Redlock).  release of a fair
	 * lock (mode with DMUTEX__REL_FAIR) that hands it to next, a waiting
	 * thread of ours, when nobody queued in Redis comes first; next
	 * NULL: release. */
	int (*release_to)(struct dmutex__backend *be, const char *name, const char *token,
			int mode, int64_t deadline, struct dmutex__handoff *next, int *released,
			int *maybe_done);
	/* Optional (NULL: release synchronously; Redlock, Cluster).  Send a
	 * release (mode DMUTEX__REL_CLEAN) and return once it is wholly in the
	 * socket's buffer, without its answer: 0 and *out, or EIO (nothing
	 * known to be sent: release synchronously).  The answer is read by the
	 * connection's next user, or dmutex__ticket_wait; one that may not
	 * have run also goes to rescue(rescue_arg, ...). */
	int (*release_async)(struct dmutex__backend *be, const char *name, const char *token,
			int mode, int64_t deadline, int64_t until_ns, dmutex__rescue_fn rescue,
			void *rescue_arg, struct dmutex__rel_ticket **out);
	/* Batched: few round trips for many leases.  Fills each result.  Ends
	 * by deadline (CLOCK_MONOTONIC ns; the earliest lease deadline it
	 * guards) whatever the command timeout says: a renewal confirmed
	 * after its lease ran out proves nothing, and onlost must not wait. */
	void (*renew)(struct dmutex__backend *be, struct dmutex__renewal *r, size_t n,
			int64_t deadline);
	/*
	 * Keep the lease `token` of `name` for the process (lease_cache.lua):
	 * reserve `block` fencing tokens, the last in *last (0 reserves none,
	 * *last 0; a kept lease's local hold reserves when it first asks for
	 * its token, by this call again with block > 0).  *result 1 kept,
	 * 0 not ours, 2 someone asked for it meanwhile.  batch: keep it for a
	 * batch of the process's own waiting threads whoever asked (its caller
	 * listens for no want): *result 3 kept so.  EIO with *result -1:
	 * Redis answered no (foreign data, an ACL: asking again will not
	 * help).  Ends by
	 * deadline (CLOCK_MONOTONIC ns: the caller's, which its other round
	 * trips share).  NULL on backends that do not cache (Redlock).
	 */
	int (*cache)(struct dmutex__backend *be, const char *name, const char *token,
			unsigned block, int batch, int64_t deadline, uint64_t *last, int *result);
	/*
	 * The fencing token of the live hold `token` of `name`, assigned now
	 * if it has none yet (fence.lua): 0 and *fence; ENOLCK the lock does
	 * not carry the token any more; EIO, *refused 1 when Redis answered
	 * no (asking again will not help).  Ends by deadline (CLOCK_MONOTONIC
	 * ns: the hold's, which an answer after it could not vouch for).  NULL
	 * on backends whose acquire always assigns one (Redlock, Cluster).
	 */
	int (*fence)(struct dmutex__backend *be, const char *name, const char *token,
			unsigned lease_ms, int64_t deadline, uint64_t *fence, int *refused);
	/* The channel a release publishes on. Caller frees. */
	char *(*channel)(struct dmutex__backend *be, const char *name);
	/* In a fork child: drop inherited connections without talking on them,
	 * and make anew what atfork_prepare took. */
	void (*atfork_child)(struct dmutex__backend *be);
	void (*destroy)(struct dmutex__backend *be);
	/* What dmutex_client_open checks (reachable, ACL, no server twice):
	 * 0; EACCES or EINVAL (logged); EIO with *up of *need servers
	 * reachable (the caller says so, with where the URL came from). */
	int (*verify)(struct dmutex__backend *be, size_t *up, size_t *need);
	/* fork: take (prepare) and drop (parent) the backend's mutexes, after
	 * the waiter's (internal.h's hierarchy: node.mu). */
	void (*atfork_prepare)(struct dmutex__backend *be);
	void (*atfork_parent)(struct dmutex__backend *be);
	/* Optional, sharded wake-ups (cluster): the waiter's node i < nsub
	 * (NULL: none yet), the one serving a channel (-1: unknown yet), and a
	 * hint that the slot map is out of date (a subscription was moved
	 * away, or refused; `moved`: the MOVED error a node answered, else
	 * NULL).  NULL: every channel on every one of nodes[0..nnodes). */
	struct dmutex__node *(*sub_node)(struct dmutex__backend *be, size_t i);
	int (*sub_route)(struct dmutex__backend *be, const char *channel);
	void (*sub_stale)(struct dmutex__backend *be, const char *moved);
	/* Optional (cluster): the node serving key's slot, NULL if unknown
	 * yet (the map is refreshed for next time).  NULL op: nodes[0]. */
	struct dmutex__node *(*node_of)(struct dmutex__backend *be, const char *key);

	/* ---- asynchronous releases: the tickets release_async makes ----
	 * (Only for backends with release_async; a ticket's head names the
	 * table.)  state: DMUTEX__TICKET_*, without waiting.  wait: its
	 * answer, read by the deadline (from its connection, or waiting while
	 * another thread reads it): DMUTEX__TICKET_PENDING if the deadline
	 * came first.  ref, put: its counted references. */
	int (*ticket_state)(const struct dmutex__rel_ticket *t);
	int (*ticket_wait)(struct dmutex__rel_ticket *t, int64_t deadline);
	void (*ticket_ref)(struct dmutex__rel_ticket *t);
	void (*ticket_put)(struct dmutex__rel_ticket *t);

	/* ---- wake subscriptions (required) ----
	 * One listener per backend delivers "something happened on channel"
	 * to the (at most one per lock) thread of this process that waits for
	 * it.  A lost connection counts as a message: waiters look again (a
	 * spurious wake-up, never a lost one).
	 * sub: subscribe to channel, starting the listener on first use;
	 *   waits until the store confirms it or until_ns.  The subscription
	 *   (confirmed or not: an unconfirmed one still wakes once it lands),
	 *   or NULL on ENOMEM.  until_ns 0: not waited for, and the listener
	 *   may take it along with the caller's next sub, made at once (one
	 *   request for both, where the store can: Redis's SUBSCRIBE).
	 * sub_notify: the same for a kept lease (lease_cache.c): every message,
	 *   and a lost connection, also calls notify(arg) from the listener
	 *   with no lock held (one notify per backend: the last set).  Undone
	 *   by unsub_notify.
	 * confirmed: wait until s is confirmed or until_ns: 1 if it was.
	 * seq: the wake sequence; read it before asking the backend, then
	 * wait: until it moves past seq (1) or until_ns (0).
	 * want: wake only on hand-overs to token (and every other message): a
	 *   fair lock's waiter.  NULL: wake on everything.
	 * handed: the last hand-over to the wanted token, taken once: 1 with
	 *   out[DMUTEX__HANDED_MAX] = "<fence>:<died>:<lease_ms>:<stamp>", or "" when
	 *   the waiter is to claim the lock itself; 0 if none came.
	 * sub_own (optional): a fair waiter's own wake-up, channel the lock's
	 *   with ':' and its token: no subscription, the hand-over reaches
	 *   the waiting thread in wait itself (Redis: BLPOP on a list of that
	 *   name, README "Fair locks"), and nothing is missed between two
	 *   waits.  Only the thread that made it uses it (seq, wait, want,
	 *   handed, unsub).  NULL: subscribe to channel instead.
	 * stop: end the listener (the client closes).
	 * lock, unlock, atfork_child: fork's prepare, parent and child (the
	 *   listener's mutex, waiter.mu in internal.h's hierarchy; the child
	 *   makes it and the listener anew). */
	struct dmutex__wsub *(*wake_sub)(struct dmutex__backend *be, const char *channel,
			int64_t until_ns);
	struct dmutex__wsub *(*wake_sub_notify)(struct dmutex__backend *be, const char *channel,
			int64_t until_ns, void (*notify)(void *), void *arg);
	void (*wake_unsub_notify)(struct dmutex__backend *be, struct dmutex__wsub *s);
	struct dmutex__wsub *(*wake_sub_own)(struct dmutex__backend *be, const char *channel);
	int (*wake_confirmed)(struct dmutex__backend *be, struct dmutex__wsub *s, int64_t until_ns);
	uint64_t (*wake_seq)(struct dmutex__backend *be, struct dmutex__wsub *s);
	/* How many moves of wake_seq were messages heard on the channel, moved
	 * before it (a kept lease's batch: asked back, or the connection lost?).
	 * NULL: cannot tell. */
	uint64_t (*wake_heard)(struct dmutex__backend *be, struct dmutex__wsub *s);
	int (*wake_wait)(struct dmutex__backend *be, struct dmutex__wsub *s, uint64_t seq,
			int64_t until_ns);
	void (*wake_want)(struct dmutex__backend *be, struct dmutex__wsub *s, const char *token);
	int (*wake_handed)(struct dmutex__backend *be, struct dmutex__wsub *s, char *out);
	/* wake_pop (optional): ask (ask = 1) that a non-fair waiter's grant
	 * come on a list of its own, which the waiting thread pops itself in
	 * wake_wait (no relay through the wake-up thread), or (ask = 0) only
	 * say whether it still does.  1 if it does. */
	int (*wake_pop)(struct dmutex__backend *be, struct dmutex__wsub *s, int ask);
	void (*wake_unsub)(struct dmutex__backend *be, struct dmutex__wsub *s);
	/* wake_unsub_late (optional): as wake_unsub, for a channel nobody
	 * publishes to any more (a waiter that got its lock: its token left
	 * the queue with that answer), so that giving it up need not wake
	 * the listener: it goes with the listener's next pass, within a
	 * second (issue 28: the listener woken twice less a contended
	 * acquisition).  NULL: wake_unsub. */
	void (*wake_unsub_late)(struct dmutex__backend *be, struct dmutex__wsub *s);
	void (*wake_stop)(struct dmutex__backend *be);
	void (*wake_lock)(struct dmutex__backend *be);
	void (*wake_unlock)(struct dmutex__backend *be);
	void (*wake_atfork_child)(struct dmutex__backend *be);
	/* 1: a non-fair mutex's waiter listens on a channel of its own, the
	 * lock's with ':' and its token, and its release wakes one waiting
	 * process (Redis: wake_queue.lua).  0: on the lock's channel, which
	 * every release tells (etcd: its watches). */
	int wake_one;

	/* ---- condition variables (required) ----
	 * channel: the wake channel of one waiter into out[DMUTEX__CHANNEL_MAX].
	 * ttl_ms: how long a registration lives without a refresh, and how
	 *   long a woken waiter has to acknowledge.
	 * register: add token to the waiters.
	 * refresh: *still = 1 if token is still a waiter (its expiry moved on),
	 *   0 if a wake-up took it (or it expired).  Also hands on the
	 *   wake-ups nobody acknowledged.
	 * leave: remove token and acknowledge its wake-up; *still = 1 if it
	 *   was still a waiter everywhere that answered, i.e. nobody woke it.
	 * wake: all = 0: wake one live waiter (signal); 1: every waiter.
	 * leave_start, leave_end: leave in two halves around the caller's next
	 *   round trip (a woken waiter taking its mutex back), so that both
	 *   cost one.  start: 0, or ENOTSUP when it cannot go ahead alone
	 *   (the caller leaves at once), or EBUSY when it would need a
	 *   connection of its own (the caller leaves once it holds the
	 *   mutex again: 1,000 threads woken at once would each open one
	 *   and keep it while they queue for the mutex); end reads the
	 *   answer (or leaves the slow way).
	 * With several independent masters (Redlock) registering and waking
	 * need a majority, so that any waker meets any waiter on one. */
	void (*cond_channel)(struct dmutex__backend *be, const char *name, const char *token,
			char *out);
	unsigned (*cond_ttl_ms)(struct dmutex__backend *be);
	int (*cond_register)(struct dmutex__backend *be, const char *name, const char *token);
	int (*cond_refresh)(struct dmutex__backend *be, const char *name, const char *token,
			int *still);
	int (*cond_leave)(struct dmutex__backend *be, const char *name, const char *token,
			int *still);
	/* *busy (may be NULL): a hint kept by the caller per condition
	 * variable, 0 at first, set by the backend (how many signals in a row
	 * found waiters, say); the backend may look for waiters more cheaply
	 * when it says none. */
	int (*cond_wake)(struct dmutex__backend *be, const char *name, int all, int *busy);
	int (*cond_leave_start)(struct dmutex__backend *be, const char *name, const char *token,
			struct dmutex__cond_leaving *l);
	int (*cond_leave_end)(struct dmutex__backend *be, const char *name, const char *token,
			struct dmutex__cond_leaving *l, int *still);

	/* ---- read-write locks (NULL: none; Redlock) ----
	 * acquire: *maybe_done as above.  release: 0 and *released (1 while
	 * still valid, 0 not ours).  renew: the renewal thread's batch of rw
	 * holds (rn[i].rw 'r' or 'w'), filling result and writer_waits by
	 * deadline.  channel: the wake channel, caller frees. */
	int (*rw_acquire)(struct dmutex__backend *be, const char *name, struct dmutex__rw_acq *a);
	int (*rw_release)(struct dmutex__backend *be, const char *name, int op, const char *token,
			int *released, int *maybe_done);
	void (*rw_renew)(struct dmutex__backend *be, struct dmutex__renewal *rn, size_t n,
			int64_t deadline);
	char *(*rw_channel)(struct dmutex__backend *be, const char *name);

	/* ---- semaphores (NULL: none; Redlock) ----
	 * `init` is the creator's value, used if the semaphore must be made
	 * again.
	 * create: flags DSEM_EXCL / DSEM_NOCREATE; *created = 1 created,
	 *   0 existed, -1 existed and DSEM_EXCL, -2 missing and DSEM_NOCREATE.
	 * take: *taken = 1 or 0 (none free), or DMUTEX__OP_REFUSED.
	 * post: *value = the new value, -1 at DSEM_VALUE_MAX, or
	 *   DMUTEX__OP_REFUSED.
	 * get: *value = free permits.  unlink: *existed = 1 or 0.
	 * time: *ms = the server's time (ms since the epoch, its clock).
	 * channel: the wake channel into out[DMUTEX__KEY_MAX].
	 * take and post carry the caller's dmutex__op (above). */
	int (*sem_create)(struct dmutex__backend *be, const char *name, unsigned value, int flags,
			int *created);
	int (*sem_take)(struct dmutex__backend *be, const char *name, unsigned init,
			struct dmutex__op *o, long long *taken);
	int (*sem_post)(struct dmutex__backend *be, const char *name, unsigned init,
			struct dmutex__op *o, long long *value);
	int (*sem_time)(struct dmutex__backend *be, const char *name, long long *ms);
	int (*sem_get)(struct dmutex__backend *be, const char *name, unsigned init,
			long long *value);
	int (*sem_unlink)(struct dmutex__backend *be, const char *name, int *existed);
	void (*sem_channel)(struct dmutex__backend *be, const char *name, char *out);

	/* A mutex that no process uses any more (the shim's users.c): its
	 * owner-died and not-recoverable state dropped, unless a hold is live
	 * (*dropped 1 dropped, 0 nothing there, -1 held).  NULL: ENOTSUP
	 * (Redlock, which has no read-write locks to tell that). */
	int (*mutex_fresh)(struct dmutex__backend *be, const char *name, int *dropped);

	/* ---- barriers (NULL: none; Redlock) ----
	 * create: *other = 0 if it is (now) a barrier of this count, else the
	 *   count it has.
	 * arrive: *gen = the cycle arrived in, *serial = 1 if this arrival
	 *   completed it; *gen = DMUTEX__OP_REFUSED_GEN a retry refused.  The
	 *   same op token again returns the first result (as semaphores).
	 * gen: *gen = cycles completed.  time: as sem_time.
	 * channel: the wake channel into out[DMUTEX__KEY_MAX]. */
	int (*barrier_create)(struct dmutex__backend *be, const char *name, unsigned count,
			long long *other);
	int (*barrier_arrive)(struct dmutex__backend *be, const char *name, unsigned count,
			struct dmutex__op *o, long long *gen, int *serial);
	int (*barrier_gen)(struct dmutex__backend *be, const char *name, unsigned count,
			long long *gen);
	int (*barrier_time)(struct dmutex__backend *be, const char *name, unsigned count,
			long long *ms);
	void (*barrier_channel)(struct dmutex__backend *be, const char *name, char *out);

	/* ---- per-lock counters for operators (required; counts.h) ----
	 * counters_add: add v[0..n) at once, by until (CLOCK_MONOTONIC ns):
	 *   DMUTEX__CNT_*.  *multi_ok is the caller's, 0 at first: the
	 *   backend's memory of what the store accepted.
	 * counters_trim: forget the names not counted for idle_ms, at most
	 *   max of them: the number forgotten, or -1 if the store could not
	 *   be asked.
	 * counters_adopt: one page (about max names, from *cursor; 0 starts a
	 *   pass) of giving names counted by older versions a time, so that
	 *   trim forgets them in turn: 1 the pass goes on, 0 it is over, -1
	 *   the store could not be asked. */
	int (*counters_add)(struct dmutex__backend *be, const struct dmutex__count *v, size_t n,
			int *multi_ok, int64_t until);
	int (*counters_trim)(struct dmutex__backend *be, size_t max, int64_t until);
	int (*counters_adopt)(struct dmutex__backend *be, unsigned long long *cursor, size_t max,
			int64_t until);

	/* Why the last verify found servers unreachable (required): each
	 * failing server's last failure ("cannot connect: Connection refused";
	 * with several, each prefixed with its address, "; " between them),
	 * or "" if none is known.  For the open's one summary line: the
	 * servers' own lines went to debug. */
	void (*why)(struct dmutex__backend *be, char *out, size_t len);

	/* Optional: the lease the backend grants for lease_ms, rounded up to
	 * what the store can keep (etcd: whole seconds, at least its minimum
	 * TTL), logged once when it differs; NULL: as asked.  The core asks
	 * it where a lease is chosen, so dmutex_getlease reports it. */
	unsigned (*lease)(struct dmutex__backend *be, unsigned lease_ms);

	/* ---- operators' views (optional; view.h) ----
	 * For a store the tool does not read itself (etcd; NULL on Redis,
	 * whose keys tools/ reads through core/admin.h).
	 * inspect: name's state into *v.
	 * names: fn(arg, name) once for each lock name under the prefix
	 *   (sorted, each once); fn returning non-zero stops with that value.
	 * reset: release name's hold (force; else *result HELD and nothing
	 *   done), and clear its owner-died and not-recoverable state:
	 *   *result DMUTEX__RESET_*. */
	int (*inspect)(struct dmutex__backend *be, const char *name, struct dmutex__lock_view *v);
	int (*names)(struct dmutex__backend *be, int (*fn)(void *arg, const char *name), void *arg);
	int (*reset)(struct dmutex__backend *be, const char *name, int force, int *result);
	/* The same for read-write locks (NULL: the backend shows none).
	 * rw_inspect: name's read-write lock into *v (foreign data: 0 with
	 *   v->error said).
	 * rw_names: as names, for the read-write locks.
	 * rw_reset: drop its writer and read shares (force; else *result
	 *   HELD and nothing done) and the waiting writers' intents, in one
	 *   step, so that its waiters wake and its holders find their keys
	 *   gone at their next renewal; a later writer's token is greater.
	 *   *removed: what it dropped (writing, fence, readers,
	 *   writers_waiting; no leases).  *result DMUTEX__RESET_*. */
	int (*rw_inspect)(struct dmutex__backend *be, const char *name,
			struct dmutex__rwlock_view *v);
	int (*rw_names)(struct dmutex__backend *be, int (*fn)(void *arg, const char *name),
			void *arg);
	int (*rw_reset)(struct dmutex__backend *be, const char *name, int force, int *result,
			struct dmutex__rwlock_view *removed);
};

struct dmutex__backend {
	const struct dmutex__backend_ops *ops;
	struct dmutex__backend_cfg cfg;
	/* Redlock: independent masters, a majority decides (rwlocks,
	 * semaphores, barriers and fair locks need one master).  0: one master
	 * (Redis, Sentinel, Cluster). */
	int quorum;
	/* The backend's own (src/backend/); the core reads none of them. */
	struct dmutex__node *nodes;     /* independent copies: Redlock's N, else 1 */
	size_t nnodes;
	size_t nsub;                    /* sub_node: the waiter's nodes at most */
	struct dmutex__waiter *waiter;  /* waiter.c, made on first use */
};

/* The backend cfg names: one Redis (or a Sentinel's master), Redlock
 * (several URLs) or a cluster.  Copies *cfg (not what it points to).  0,
 * ENOMEM, or EINVAL (a file the URL names cannot be used; logged). */
int dmutex__backend_create(const struct dmutex__backend_cfg *cfg, struct dmutex__backend **out);
/* fork: hold (and let go) the lock under which every backend makes its
 * wake-up listener (create_mu in internal.h's hierarchy; create.c). */
void dmutex__waiter_create_lock(void);
void dmutex__waiter_create_unlock(void);

/*
 * The calls the core makes, each through the table (the names the core
 * has always used; ENOTSUP where the backend leaves an operation NULL).
 */

static inline void
dmutex__backend_why(struct dmutex__backend *be, char *out, size_t len)
{
	be->ops->why(be, out, len);
}

static inline unsigned
dmutex__backend_lease(struct dmutex__backend *be, unsigned lease_ms)
{
	return be->ops->lease ? be->ops->lease(be, lease_ms) : lease_ms;
}

/* Asynchronous releases. */
static inline int
dmutex__ticket_state(const struct dmutex__rel_ticket *t)
{
	return t->ops->ticket_state(t);
}

static inline int
dmutex__ticket_wait(struct dmutex__rel_ticket *t, int64_t deadline)
{
	return t->ops->ticket_wait(t, deadline);
}

static inline void
dmutex__ticket_ref(struct dmutex__rel_ticket *t)
{
	t->ops->ticket_ref(t);
}

static inline void
dmutex__ticket_put(struct dmutex__rel_ticket *t)
{
	if (t)
		t->ops->ticket_put(t);
}

/* Wake subscriptions. */
static inline struct dmutex__wsub *
dmutex__waiter_sub(struct dmutex__backend *be, const char *channel, int64_t until_ns)
{
	return be->ops->wake_sub(be, channel, until_ns);
}

static inline struct dmutex__wsub *
dmutex__waiter_sub_notify(struct dmutex__backend *be, const char *channel, int64_t until_ns,
		void (*notify)(void *), void *arg)
{
	return be->ops->wake_sub_notify(be, channel, until_ns, notify, arg);
}

/* NULL when the backend has no own wake-ups (or out of memory). */
static inline struct dmutex__wsub *
dmutex__waiter_sub_own(struct dmutex__backend *be, const char *channel)
{
	return be->ops->wake_sub_own ? be->ops->wake_sub_own(be, channel) : NULL;
}

static inline void
dmutex__waiter_unsub_notify(struct dmutex__backend *be, struct dmutex__wsub *s)
{
	be->ops->wake_unsub_notify(be, s);
}

static inline int
dmutex__wsub_confirmed(struct dmutex__backend *be, struct dmutex__wsub *s, int64_t until_ns)
{
	return be->ops->wake_confirmed(be, s, until_ns);
}

static inline uint64_t
dmutex__wsub_seq(struct dmutex__backend *be, struct dmutex__wsub *s)
{
	return be->ops->wake_seq(be, s);
}

/* wake_heard, or 0 where the backend cannot tell. */
static inline uint64_t
dmutex__wsub_heard(struct dmutex__backend *be, struct dmutex__wsub *s)
{
	return be->ops->wake_heard ? be->ops->wake_heard(be, s) : 0;
}

static inline int
dmutex__wsub_wait(struct dmutex__backend *be, struct dmutex__wsub *s, uint64_t seq,
		int64_t until_ns)
{
	return be->ops->wake_wait(be, s, seq, until_ns);
}

static inline void
dmutex__wsub_want(struct dmutex__backend *be, struct dmutex__wsub *s, const char *token)
{
	be->ops->wake_want(be, s, token);
}

static inline int
dmutex__wsub_handed(struct dmutex__backend *be, struct dmutex__wsub *s, char *out)
{
	return be->ops->wake_handed(be, s, out);
}

static inline int
dmutex__wsub_pop(struct dmutex__backend *be, struct dmutex__wsub *s, int ask)
{
	return be->ops->wake_pop ? be->ops->wake_pop(be, s, ask) : 0;
}

static inline void
dmutex__waiter_unsub(struct dmutex__backend *be, struct dmutex__wsub *s)
{
	be->ops->wake_unsub(be, s);
}

static inline void
dmutex__waiter_unsub_late(struct dmutex__backend *be, struct dmutex__wsub *s)
{
	if (be->ops->wake_unsub_late)
		be->ops->wake_unsub_late(be, s);
	else
		be->ops->wake_unsub(be, s);
}

static inline void
dmutex__waiter_stop(struct dmutex__backend *be)
{
	be->ops->wake_stop(be);
}

static inline void
dmutex__waiter_lock(struct dmutex__backend *be)
{
	be->ops->wake_lock(be);
}

static inline void
dmutex__waiter_unlock(struct dmutex__backend *be)
{
	be->ops->wake_unlock(be);
}

static inline void
dmutex__waiter_atfork_child(struct dmutex__backend *be)
{
	be->ops->wake_atfork_child(be);
}

/* Condition variables. */
static inline void
dmutex__cond_channel(struct dmutex__backend *be, const char *name, const char *token, char *out)
{
	be->ops->cond_channel(be, name, token, out);
}

static inline unsigned
dmutex__cond_ttl_ms(struct dmutex__backend *be)
{
	return be->ops->cond_ttl_ms(be);
}

static inline int
dmutex__cond_register(struct dmutex__backend *be, const char *name, const char *token)
{
	return be->ops->cond_register(be, name, token);
}

static inline int
dmutex__cond_refresh(struct dmutex__backend *be, const char *name, const char *token, int *still)
{
	return be->ops->cond_refresh(be, name, token, still);
}

static inline int
dmutex__cond_leave(struct dmutex__backend *be, const char *name, const char *token, int *still)
{
	return be->ops->cond_leave(be, name, token, still);
}

static inline int
dmutex__cond_wake(struct dmutex__backend *be, const char *name, int all, int *busy)
{
	return be->ops->cond_wake(be, name, all, busy);
}

static inline int
dmutex__cond_leave_start(struct dmutex__backend *be, const char *name, const char *token,
		struct dmutex__cond_leaving *l)
{
	return be->ops->cond_leave_start(be, name, token, l);
}

static inline int
dmutex__cond_leave_end(struct dmutex__backend *be, const char *name, const char *token,
		struct dmutex__cond_leaving *l, int *still)
{
	return be->ops->cond_leave_end(be, name, token, l, still);
}

/* Read-write locks: the core refuses them on a quorum backend first. */
static inline int
dmutex__rw_acquire(struct dmutex__backend *be, const char *name, struct dmutex__rw_acq *a)
{
	return be->ops->rw_acquire ? be->ops->rw_acquire(be, name, a) : ENOTSUP;
}

static inline int
dmutex__rw_release(struct dmutex__backend *be, const char *name, int op, const char *token,
		int *released, int *maybe_done)
{
	if (!be->ops->rw_release)
		return ENOTSUP;
	return be->ops->rw_release(be, name, op, token, released, maybe_done);
}

/* Without rw_renew no rw hold can exist: nothing to renew. */
static inline void
dmutex__rw_renew(struct dmutex__backend *be, struct dmutex__renewal *rn, size_t n,
		int64_t deadline)
{
	if (be->ops->rw_renew)
		be->ops->rw_renew(be, rn, n, deadline);
}

/* NULL: no channel (as out of memory). */
static inline char *
dmutex__rw_channel(struct dmutex__backend *be, const char *name)
{
	return be->ops->rw_channel ? be->ops->rw_channel(be, name) : NULL;
}

/* Semaphores: the core refuses them on a quorum backend first. */
static inline int
dmutex__sem_create(struct dmutex__backend *be, const char *name, unsigned value, int flags,
		int *created)
{
	return be->ops->sem_create ? be->ops->sem_create(be, name, value, flags, created) : ENOTSUP;
}

static inline int
dmutex__sem_take(struct dmutex__backend *be, const char *name, unsigned init,
		struct dmutex__op *o, long long *taken)
{
	return be->ops->sem_take ? be->ops->sem_take(be, name, init, o, taken) : ENOTSUP;
}

static inline int
dmutex__sem_post(struct dmutex__backend *be, const char *name, unsigned init,
		struct dmutex__op *o, long long *value)
{
	return be->ops->sem_post ? be->ops->sem_post(be, name, init, o, value) : ENOTSUP;
}

static inline int
dmutex__sem_time(struct dmutex__backend *be, const char *name, long long *ms)
{
	return be->ops->sem_time ? be->ops->sem_time(be, name, ms) : ENOTSUP;
}

static inline int
dmutex__sem_get(struct dmutex__backend *be, const char *name, unsigned init, long long *value)
{
	return be->ops->sem_get ? be->ops->sem_get(be, name, init, value) : ENOTSUP;
}

static inline int
dmutex__sem_unlink(struct dmutex__backend *be, const char *name, int *existed)
{
	return be->ops->sem_unlink ? be->ops->sem_unlink(be, name, existed) : ENOTSUP;
}

static inline int
dmutex__mutex_fresh(struct dmutex__backend *be, const char *name, int *dropped)
{
	return be->ops->mutex_fresh ? be->ops->mutex_fresh(be, name, dropped) : ENOTSUP;
}

/* NULL: "" (nothing to hear). */
static inline void
dmutex__sem_channel(struct dmutex__backend *be, const char *name, char *out)
{
	if (be->ops->sem_channel)
		be->ops->sem_channel(be, name, out);
	else
		out[0] = '\0';
}

/* Barriers: the core refuses them on a quorum backend first. */
static inline int
dmutex__barrier_create(struct dmutex__backend *be, const char *name, unsigned count,
		long long *other)
{
	return be->ops->barrier_create ? be->ops->barrier_create(be, name, count, other) : ENOTSUP;
}

static inline int
dmutex__barrier_arrive(struct dmutex__backend *be, const char *name, unsigned count,
		struct dmutex__op *o, long long *gen, int *serial)
{
	if (!be->ops->barrier_arrive)
		return ENOTSUP;
	return be->ops->barrier_arrive(be, name, count, o, gen, serial);
}

static inline int
dmutex__barrier_gen(struct dmutex__backend *be, const char *name, unsigned count, long long *gen)
{
	return be->ops->barrier_gen ? be->ops->barrier_gen(be, name, count, gen) : ENOTSUP;
}

static inline int
dmutex__barrier_time(struct dmutex__backend *be, const char *name, unsigned count, long long *ms)
{
	return be->ops->barrier_time ? be->ops->barrier_time(be, name, count, ms) : ENOTSUP;
}

/* NULL: "" (nothing to hear). */
static inline void
dmutex__barrier_channel(struct dmutex__backend *be, const char *name, char *out)
{
	if (be->ops->barrier_channel)
		be->ops->barrier_channel(be, name, out);
	else
		out[0] = '\0';
}

/* Per-lock counters. */
static inline int
dmutex__backend_counters(struct dmutex__backend *be, const struct dmutex__count *v, size_t n,
		int *multi_ok, int64_t until)
{
	return be->ops->counters_add(be, v, n, multi_ok, until);
}

static inline int
dmutex__backend_counters_trim(struct dmutex__backend *be, size_t max, int64_t until)
{
	return be->ops->counters_trim(be, max, until);
}

static inline int
dmutex__backend_counters_adopt(struct dmutex__backend *be, unsigned long long *cursor,
		size_t max, int64_t until)
{
	return be->ops->counters_adopt(be, cursor, max, until);
}


#endif
