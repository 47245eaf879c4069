/*
 * Internal types shared by the public calls, the renewer and the waiter.
 *
 * Who calls whom (no file calls one above it, no two call each other;
 * tests/check_layers.py reads the calls from the objects):
 *
 *   public calls (src/api/), shim/
 *     -> bind.c         dmutex_t/dcond_t -> private object; static
 *                       initializers bound to the default client on first use
 *     -> client.c       client life cycle, the default client, fork and exit;
 *                       owns the renewer and the hold table of each client
 *     -> lease_cache.c  keep a lease at unlock, take a kept one at lock
 *        unlock_async.c send a release without waiting for its answer
 *        fair_handoff.c a fair lock's local hand-over
 *     -> renewer.c      the renewal thread: renewals, the orphan releases
 *                       (dmutex__renewer_release: release, else retried
 *                       until the lease ends), reading asynchronous
 *                       releases' answers, giving back kept leases
 *     -> rel_settle.c   act on an asynchronous release's answer
 *        kept_lease.c   a kept lease's record: confirmations, losses found
 *     -> release.c      release with retries
 *     -> hold.c         the hold table: entries, lost marks, forgetting a
 *                       hold with what hangs on it (kept lease, pending
 *                       release): the bottom of the core
 *     -> metrics.c      counters (calls none of the above)
 *     -> backend        (backend.h, src/backend/): all Redis I/O
 *     -> base/ (log, time, token, lock order), url.c: leaves
 *
 * The renewer calls hold.c, kept_lease.c, rel_settle.c, release.c and the
 * backend, never lease_cache.c, unlock_async.c or client.c; hold.c calls
 * no other file of the core but the counters.  The backend never calls
 * back into the public layer, and only the renewer (or the holder itself,
 * on noticing its deadline has passed) marks a hold lost.
 *
 * Lock hierarchy (PLAN design 1; lockorder.h names the levels and, in
 * builds without NDEBUG, aborts on a violation):
 *
 *   default_mu -> create_mu -> clients_mu -> fold_mu -> entry.mu
 *     -> client.mu -> renewer.mu -> waiter.mu -> node.mu -> log_mu
 *
 * A thread holding one of them takes only later ones.  log_mu is a leaf:
 * nothing is called out while it is held (the user's logger runs without
 * it).  None from client.mu on is held across network I/O, so fork's
 * prepare handler can take them all, in this order, log_mu last.
 */
#ifndef DMUTEX_INTERNAL_H
#define DMUTEX_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "dmutex.h"
#include "backend/backend.h"
#include "base/base.h"
#include "base/log.h"
#include "url.h"

#define DMUTEX__MAGIC_INIT      0x444d5458UL /* "DMTX" */
#define DMUTEX__MAGIC_DESTROYED 0x64656164UL /* "dead" */
#define DMUTEX__ATTR_MAGIC      0x61747472UL /* "attr" */
/* dmutex_attr_t.__flags */
#define DMUTEX__ATTR_FAIR       0x1UL
#define DMUTEX__ATTR_NOCACHE    0x2UL   /* dmutex_attr_setleasecache(a, 0) */

/* A lock retries a failing backend for this many command timeouts
 * before EIO. */
#define DMUTEX__IO_RETRY_FACTOR 3

/* A timed call's requests end by its deadline, but the first one gets at
 * least this long (capped by command_timeout_ms): a lock free at once is
 * taken whatever the deadline (POSIX), also one already past, and its
 * request needs time to be answered.  So a timed call returns at most
 * this long after it began, or by its deadline if that is later. */
#define DMUTEX__AT_ONCE_MS 200u

/*
 * Everything a process knows about one lock name on one client.  Shared by
 * every dmutex_t with that name on that client, so threads of a process wait
 * for each other locally and only one talks to the backend.
 */
struct dmutex__entry {
	struct dmutex_client *client;
	struct dmutex__entry *next;     /* hash chain, client->mu */
	unsigned refs;                  /* atomic; the last one dropped under client->mu */
	size_t name_len;

	pthread_mutex_t mu;
	pthread_cond_t cv;              /* CLOCK_MONOTONIC; local waiters */
	/* A non-fair mutex's threads waiting for their turn (mutex_lock.c
	 * wait_turn), apart from cv: only one of them can take the turn a
	 * change of state gives, so dmutex__entry_wake wakes one, not all
	 * (1,000 threads queued behind one lock woke 1,000 times each). */
	pthread_cond_t turn_cv;         /* CLOCK_MONOTONIC */
	/* under mu */
	unsigned turn_waiters;          /* threads waiting on turn_cv */
	int held;                       /* a thread of this process holds it */
	/* The hold is in client->held: one a request to the backend granted.
	 * A local hold on a kept lease is not (its mutex, which cannot be
	 * destroyed while held, keeps dmutex_client_close from closing). */
	int held_counted;
	pthread_t owner;
	int depth;                      /* recursion count of the owner */
	int acquiring;                  /* a thread is asking the backend */
	int dropping;                   /* the library gives a kept lease back (not a user's call) */
	int orphan_reporting;           /* the renewer calls an orphan's onlost (renewer.c):
	                                 * dmutex_destroy waits for it */
	int releasing;                  /* the owner is telling the backend */
	char token[DMUTEX__TOKEN_HEX + 1];
	uint64_t fence;
	uint64_t gen;                   /* bumped per hold: stale renewals are ignored */
	int64_t deadline_ns;            /* the hold is valid until then */
	unsigned lease_ms;
	int lost;
	int lost_reported;
	int inconsistent;               /* robust: EOWNERDEAD given, no consistent yet */
	int robust;                     /* the holder's mutex is DMUTEX_ROBUST */
	int fair;                       /* the holder's mutex is fair: its release hands on */
	/* Fair mutexes: threads of this process waiting to ask the backend, in
	 * arrival order; only the first may (README "Fair locks"). */
	struct dmutex__fifo *fifo_head, *fifo_tail;
	uint64_t fifo_ids;              /* the last dmutex__fifo id given */
	/* A kept (cached) lease, lease_cache.c: the process keeps the lease
	 * while no thread holds it. */
	int kept;
	uint64_t blk_next, blk_last;    /* fencing tokens reserved for local holds */
	int64_t last_use_ns;            /* the last local hold's start or end */
	int64_t start_ns;               /* the current lease's acquire was sent */
	/* The hold the counters follow (metrics.h) began then; 0: none.  The
	 * entry, not the name's record, knows it: a hold ends on many paths
	 * (dmutex__entry_end_counted), all of which pass here. */
	int64_t counted_ns;
	/* metrics.c's record of this name, read and written under the
	 * counters' mutex only, and only while met_gen is theirs (a record
	 * dropped moves it on): the hooks skip hashing the name. */
	void *met_rec;
	uint64_t met_gen;
	/* Under mu: what the holds of a kept lease taken and ended on the fast
	 * paths counted, not yet in the name's record.  Counted here, under
	 * the mutex those paths take anyway, the counters' mutex stays off
	 * them; whoever reads or sends the counters folds these in first
	 * (dmutex__entries_fold).  met_queued: e is on the counters' list of
	 * entries to fold (which holds a reference), so only the first count
	 * after a fold takes the counters' mutex. */
	struct dmutex__met_local {
		uint64_t acq, holds, hold_us;
		uint64_t hold_b[DMUTEX__MET_BUCKETS];
	} met_local;
	int met_queued;
	struct dmutex__entry *met_next; /* that list: the counters' mutex */
	int64_t last_end_ns;            /* the last hold's outermost unlock */
	int64_t nocache_until_ns;       /* contended lately: unlocks release */
	struct dmutex__wsub *ksub;      /* the wake channel: another process wants it */
	uint64_t kseq;                  /* ksub's sequence when the lease was kept */
	uint64_t kheard;                /* and its messages heard (dmutex__wsub_heard) */
	/* Asked back (or kept for a batch: ksub NULL), the lease still serves
	 * threads of ours that wait for it: this many more local holds, until
	 * then (0: the batch has not begun).  lease_cache.c. */
	int batch_left;
	int64_t batch_until_ns;
	void (*onlost)(const char *, void *);
	void *onlost_arg;
	/* The last hold's release, sent without waiting for its answer
	 * (unlock_async.c), under mu; rel is read unlocked only as a
	 * hint (atomic), acted on under mu. */
	struct dmutex__rel_ticket *rel;
	char rel_token[DMUTEX__TOKEN_HEX + 1];
	int64_t rel_until_ns;           /* its lease's end: the key goes by then anyway */
	int64_t rel_valid_ns;           /* the hold's own deadline when it was released:
	                                 * a "not ours" found before it, nothing of ours
	                                 * having run, is a loss (rel_settle.c) */
	uint64_t rel_fence;
	void (*rel_onlost)(const char *, void *);
	void *rel_onlost_arg;
	/* Holds granted on the kept lease since Redis last confirmed it
	 * (kept_lease.c): reported lost if it turns out gone. */
	struct dmutex__suspect *suspects;
	size_t nsuspects, suspects_cap;
	int64_t confirmed_ns;           /* that confirmation's request was sent */

	/* under client->renewer.mu */
	int registered;
	size_t ren_idx;                 /* registered: its place in renewer.items (O(1) removal) */
	int64_t due_ns;
	int rel_watched;                /* in renewer.rels: its release's answer is awaited */

	/* A read-write lock's (kind DMUTEX__KIND_RW; rwlock.h), under mu.
	 * held with rw_write 0 is the process's read share, shared by the
	 * threads in readers[]; with rw_write 1, owner writes. */
	int kind;                       /* fixed at creation */
	int rw_write;
	int rw_wwait;                   /* threads of this process waiting to write */
	int rw_remote_wwait;            /* a renewal said a writer elsewhere waits */
	int rw_rd_asking;               /* the acquirer is a reader of ours: 1 its
	                                 * request is out, 2 the lock was busy */
	struct dmutex__reader *readers;
	size_t nreaders, readers_cap;
	/* The readers of a share known lost that have not unlocked yet, set
	 * aside so that new readers may take a new share meanwhile; a local
	 * writer still waits for them (rwlock_lock.c). */
	struct dmutex__reader *rw_gone;
	size_t ngone, gone_cap;

	char name[];                    /* NUL-terminated */
};

/* A thread waiting for a fair mutex of this process: on its own stack.
 * An unlock may offer it the lock (mutex_unlock.c, a local hand-over):
 * the fields below are then under the entry's mu. */
struct dmutex__fifo {
	struct dmutex__fifo *next;
	/* CLOCK_MONOTONIC; only the first in line can go on, so a change of
	 * state wakes it alone (dmutex__entry_wake): with all of them on
	 * e->cv, each hand-over between 8 threads woke the 7 waiting ones
	 * several times. */
	pthread_cond_t cv;
	uint64_t id;                    /* unique in the entry: a node the unlock
	                                 * chose is still the same waiter */
	unsigned lease_ms;              /* the hold it would take */
	int robust;
	long tid;
	/* Offered the lock: it waits for the release's answer and does not
	 * ask itself meanwhile; if not granted, it asks with this token (a
	 * lost answer may have handed the lock to it all the same). */
	int offered;
	char token[DMUTEX__TOKEN_HEX + 1];
	/* The answer: granted, with the hold's fence, whether its owner died,
	 * and when the release was sent (the hold began after). */
	int answered, granted, died;
	uint64_t fence;
	int64_t sent_ns;
};

/* A thread that reads a read-write lock, and how many times. */
struct dmutex__reader {
	pthread_t thread;
	int count;
};

/* What an entry is the local state of: the same name is another lock. */
enum { DMUTEX__KIND_MUTEX = 0, DMUTEX__KIND_RW = 1 };

/* The handler of holds granted on a kept lease since its last
 * confirmation (kept_lease.c), one per handler: the fences they had, and
 * when the last of them ended (0: one still holds it). */
struct dmutex__suspect {
	void (*cb)(const char *, void *);
	void *arg;
	uint64_t fence_lo, fence_hi;
	size_t holds;
	int64_t end_ns;
};

/* The private state behind a dmutex_t. */
struct dmutex__mutex {
	struct dmutex__entry *entry;
	int type;
	int robust;
	int fair;                       /* queue in Redis (README "Fair locks") */
	int cache;                      /* may keep its lease (README "Cached leases") */
	unsigned lease_ms;
	void (*onlost)(const char *, void *);
	void *onlost_arg;
};

/* What an orphan reports if it finds the lock certainly not ours (no
 * request of ours may have run) before the hold's own deadline: that hold
 * had been lost unnoticed (README "When the report comes").  e NULL: no
 * report (a release that may have run, a kept lease, a rwlock's acquire
 * taken back). */
struct dmutex__orphan_rep {
	struct dmutex__entry *e;        /* a reference of the orphan's while queued */
	int64_t valid_ns;               /* the hold's deadline: after it, plain expiry */
	uint64_t fence;
	void (*cb)(const char *, void *); /* NULL once its mutex was destroyed */
	void *arg;
};

struct dmutex__orphan {
	char *name;
	char token[DMUTEX__TOKEN_HEX + 1];
	int mode;
	int64_t until_ns;               /* give up: the lease has run out anyway */
	int64_t next_ns;
	/* rep.e set and sure: every request so far was certainly refused
	 * (none may have run); cleared by one that may have run, or at the
	 * hold's deadline. */
	int sure;
	struct dmutex__orphan_rep rep;
};

struct dmutex__renewer {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thread;
	int running;
	int stop;
	int64_t wake_ns;                /* when the thread plans to look next */
	struct dmutex__entry **items;
	size_t n, cap;
	struct dmutex__orphan *orphans;
	size_t norphans, orphans_cap;
	/* Entries whose asynchronous release is unanswered: the thread reads
	 * the answer and acts on it (rel_settle.c), so that a
	 * release found not ours is reported soon, not at the name's next
	 * call, which may never come.  A reference each. */
	struct dmutex__entry **rels;
	size_t nrels, rels_cap;
	int64_t rels_due_ns;
};

struct dmutex__orphan_rep;

/* What rel_settle.c, below the renewal thread, hands up to it: a release
 * to watch again, or to keep trying in the background (renewer.c).  Set by
 * client.c, above both: a direct call up would be a circle of calls. */
struct dmutex__upcalls {
	void (*watch_rel)(struct dmutex_client *c, struct dmutex__entry *e);
	void (*orphan)(struct dmutex_client *c, const char *name, const char *token, int mode,
			int64_t until_ns);
	void (*orphan_rep)(struct dmutex_client *c, const char *name, const char *token, int mode,
			int64_t until_ns, const struct dmutex__orphan_rep *rep);
};

struct dmutex_client {
	struct dmutex__config cfg;
	struct dmutex__backend *be;
	struct dmutex__renewer renewer;
	struct dmutex__upcalls up;

	pthread_mutex_t mu;             /* entry table */
	struct dmutex__entry **tab;
	size_t tab_size, n_entries;
	unsigned held;                  /* atomic: entries held through this client (held_counted) */
	unsigned mutexes;               /* atomic: dmutex_t objects bound to it */
	pid_t pid;                      /* the process that owns the threads */
	int closing;                    /* atomic: dmutex_client_close has begun */
	/* atomic: when a timed call's request was first cut by its deadline
	 * with no answer since (acquire_wait.c); 0 once the backend answers. */
	int64_t cut_since;

	char host[256];
	/* "boot_id/pid namespace": operators on the same machine and pid
	 * namespace can tell whether a holder's pid is alive (a hostname alone
	 * is shared by containers).  "" when /proc does not say. */
	char hostid[64];
	struct dmutex__metrics *metrics;  /* metrics.c */
	struct dmutex_client *next_all; /* dmutex__clients list */
};

/* ---- hostid.c ---- */
/* "boot_id/pidns inode" of this process, or "" (see struct dmutex_client). */
void dmutex__hostid(char *buf, size_t len);

/* ---- client.c ---- */
int dmutex__client_default(struct dmutex_client **out);
/*
 * The calling thread's holds, in thread-specific data whose destructor ends
 * them when the thread exits (pthread_exit or return) and which the
 * library's last destructor ends for the thread calling exit().  Called by
 * the owner, without e->mu: _hold after an acquire (gen as recorded under
 * e->mu with the hold), _unhold after its hold ended.
 */
void dmutex__thread_hold(struct dmutex__entry *e, uint64_t gen);
void dmutex__thread_unhold(struct dmutex__entry *e);
/* The same for a hold that end(e, why) ends (a read-write lock's: the
 * thread's read share or write lock; rwlock_unlock.c), called by the
 * thread itself. */
void dmutex__thread_hold_end(struct dmutex__entry *e, uint64_t gen,
		void (*end)(struct dmutex__entry *, const char *why));

/* ---- hold.c ---- */
void dmutex__entry_init_sync(struct dmutex__entry *e);
int dmutex__entry_get(struct dmutex_client *c, const char *name,
		struct dmutex__entry **out);
/* As dmutex__entry_get for an entry of another kind (DMUTEX__KIND_*). */
int dmutex__entry_get_kind(struct dmutex_client *c, const char *name, int kind,
		struct dmutex__entry **out);
void dmutex__entry_put(struct dmutex__entry *e);
/* What one caller must do about a lost hold once it has dropped e->mu:
 * log it and call the onlost handler.  Filled by dmutex__entry_check_lost
 * for exactly one caller per lost hold. */
struct dmutex__lost {
	int report;
	uint64_t fence;
	void (*cb)(const char *, void *);
	void *arg;
};
/* Under e->mu: the calling thread holds e at depth 1, with token and
 * fence, for lease_ms counted from `sent` (before the request went out);
 * the hold is counted in client->held. */
void dmutex__entry_hold(struct dmutex__entry *e, const char *token, uint64_t fence,
		unsigned lease_ms, int64_t sent);
/* Under e->mu: mark lost if the deadline passed, and claim the report. */
void dmutex__entry_check_lost(struct dmutex__entry *e, int64_t now, struct dmutex__lost *out);
/* Under e->mu (dropped meanwhile), the holder about to ask Redis again for
 * its hold: wait out attempt's backoff, never past the hold's deadline,
 * then dmutex__entry_check_lost into *lost. */
void dmutex__entry_backoff(struct dmutex__entry *e, int attempt, struct dmutex__lost *lost);
/* Under e->mu. */
void dmutex__entry_mark_lost(struct dmutex__entry *e);
/* Without any lock: log, then the user's handler (which may call us). */
void dmutex__lost_report(const struct dmutex__entry *e, const struct dmutex__lost *l);
/* Under e->mu, after any change of held, acquiring, dropping, the fair
 * queue or a release's end: wake the local waiters that may now go on —
 * every waiter of e->cv, one thread waiting for its turn, which takes
 * the turn or passes it on (mutex_lock.c wait_turn), and the first in a
 * fair mutex's local queue (the others wait to be first). */
void dmutex__entry_wake(struct dmutex__entry *e);
/* Under e->mu: forget the hold and wake local waiters.  A hold the
 * counters still follow ends with it (dmutex__entry_end_counted). */
void dmutex__entry_forget(struct dmutex__entry *e);
/* Under e->mu: forget the kept lease (its subscription too); part of
 * dmutex__entry_forget. */
void dmutex__entry_forget_kept(struct dmutex__entry *e);
/* The entry's pending asynchronous release forgotten (entry freed; fork
 * child): its connection answers it without us. */
void dmutex__entry_rel_drop(struct dmutex__entry *e);
/* Under e->mu, after a release of e's hold answered err (before
 * dmutex__entry_forget): an ENOLCK is a loss found now, of that hold
 * unless `lost` (already known).  Fills rep for dmutex__lost_report,
 * called after e->mu. */
void dmutex__entry_release_answered(struct dmutex__entry *e, int err, int lost,
		struct dmutex__lost *rep);
/* Under e->mu, a mutex's hold just recorded (a read-write lock's are not
 * counted): the counters follow it from `since` (CLOCK_MONOTONIC ns). */
void dmutex__entry_count_hold(struct dmutex__entry *e, int64_t since);
/* Under e->mu: the hold the counters follow, if any, ended at `now`,
 * however it ended: its unlock, the loss of its lease (when found), the
 * end of its thread or process.  Counted once; its name's record is left
 * with nothing open, free to go when idle (metrics.c). */
void dmutex__entry_end_counted(struct dmutex__entry *e, int64_t now);
/* The same in two steps, for an unlock, which must not take the counters'
 * mutex inside e->mu (every thread of a busy name would queue behind it):
 * under e->mu, how long the hold lasted (-1: none counted), which the
 * caller gives to dmutex__met_hold_ended once e->mu is dropped, or on a
 * kept lease to dmutex__entry_count_local_end at once. */
int64_t dmutex__entry_take_counted(struct dmutex__entry *e, int64_t now);
/* Under e->mu, on a kept lease's fast path: an acquisition that did not
 * wait, and the end of a hold after held_ns (-1: none counted), counted
 * in e (struct dmutex__entry met_local), not in the counters. */
void dmutex__entry_count_local_acq(struct dmutex__entry *e);
void dmutex__entry_count_local_end(struct dmutex__entry *e, int64_t held_ns);
/* No lock held: the entries' counts of c added to the counters, before
 * anyone reads (dmutex__met_totals) or sends (dmutex__met_flush) them.
 * Once it returns, every hold that ended before it was called is in. */
void dmutex__entries_fold(struct dmutex_client *c);
int dmutex__lock(dmutex_t *m, int mode, int64_t until, int bad_deadline);
/* dmutex_unlock with cancellation already disabled. */
int dmutex__unlock_impl(dmutex_t *m);
/* The same for a condition wait: an asynchronous release leaves *ticket a
 * reference to its ticket (the caller puts it), else NULL. */
int dmutex__unlock_for_wait(dmutex_t *m, struct dmutex__rel_ticket **ticket);
/* dmutex_lock for a condition wait's caller, which holds a subscription to
 * the mutex's wake channel (cond_wait.c): no round trip to subscribe.
 * token: what the first request asks with, whose own channel the caller
 * subscribed to (dmutex__wake_own_channel); NULL: a new one, and the
 * lock's channel.  A token is asked with once: the give-up of a failed
 * request may still be on its way and must not meet a later hold. */
int dmutex__relock(dmutex_t *m, const char *token);
/* The channel a waiter with `token` listens on (caller frees): its own,
 * "<the lock's>:<token>", where a release wakes one waiter (the backend's
 * wake_one, and fair locks); else the lock's.  NULL: out of memory. */
char *dmutex__wake_own_channel(struct dmutex__backend *be, const char *name, const char *token, int fair);
int dmutex__resolve(dmutex_t *m, struct dmutex__mutex **out);
/* For fast paths: m's object if m is initialized and bound, else NULL
 * (nothing logged, nothing bound: the caller then takes dmutex__resolve's
 * way). */
struct dmutex__mutex *dmutex__resolve_bound(dmutex_t *m);
/*
 * dmutex_t and dcond_t begin alike: magic, static name, bound object.
 * 0 and *out: bound.  EINVAL (logged as `what`): NULL, uninitialized,
 * destroyed.  DMUTEX__UNBOUND: a static initializer not bound yet — the
 * caller binds it.
 */
#define DMUTEX__UNBOUND (-1)
int dmutex__resolve_object(const void *obj, unsigned long *magic, void **impl,
		unsigned long init_magic, unsigned long static_magic, const char *what, void **out);
int dmutex__name_ok(const char *name, size_t *len);

/* ---- unlock_async.c: unlock without waiting for the answer ---- */
/* The owner, without e->mu, after its hold left the renewer: send the
 * release of `token` and end the hold (forget, local waiters woken) without
 * its answer.  0 done; -1 not possible here (Redlock, Cluster, turned off,
 * an earlier answer still awaited, nothing could be sent): release
 * synchronously. */
int dmutex__unlock_async(struct dmutex__entry *e, const char *token, unsigned lease_ms,
		int64_t now);
/* As dmutex__unlock_async, and *t a reference to the release's ticket
 * (the caller puts it), for a condition wait, which must tell its caller
 * whether the hold it gave up had been lost. */
int dmutex__unlock_async_ticket(struct dmutex__entry *e, const char *token, unsigned lease_ms,
		int64_t now, struct dmutex__rel_ticket **t);
/* ---- rel_settle.c: the answer of an asynchronous release ---- */
/* Without e->mu: wait, until `until` at most, for the answer of the
 * entry's pending release, if any, and act on it: not ours -> the hold is
 * reported lost (log, onlost); no answer -> released again, here by
 * `until` and in the background.  Before an acquire of the name, so that
 * the acquire reaches Redis after the release.  1 if nothing is pending
 * any more. */
int dmutex__rel_settle(struct dmutex__entry *e, int64_t until);
/* The same, a command timeout from now. */
void dmutex__rel_settle_now(struct dmutex__entry *e);
/* ---- lease_cache.c (README "Cached leases") ---- */
/* mx may keep its lease after an unlock and take a kept one. */
int dmutex__cache_allowed(const struct dmutex__mutex *mx);
/* Under e->mu, by the owner at its outermost unlock of a sound hold: 1 the
 * hold ended and the process keeps the lease (no round trip, or two the
 * first time); 0 release it as usual.  May drop e->mu meanwhile (with
 * e->releasing set). */
int dmutex__cache_unlock(struct dmutex__mutex *mx, struct dmutex__entry *e, int64_t now,
		int64_t until);
/* Under e->mu, nobody holding or acquiring: 1 the caller now holds e from
 * the kept lease; 0 it must ask the backend (a kept lease that may not
 * serve it was released).  May drop e->mu meanwhile (e->acquiring set). */
int dmutex__cache_lock(struct dmutex__mutex *mx, struct dmutex__entry *e, int64_t now);
/* The same two, in the cases with no I/O only (a fast path with no
 * cancellation point): 1 done as above; 0 nothing changed, take the whole
 * way.  Never drop e->mu. */
int dmutex__cache_unlock_local(struct dmutex__mutex *mx, struct dmutex__entry *e, int64_t now);
int dmutex__cache_lock_local(struct dmutex__mutex *mx, struct dmutex__entry *e, int64_t now);

/* ---- kept_lease.c: the record of a kept lease ---- */
/* Under e->mu: someone wants the lock (its wake channel spoke since the
 * lease was kept), or we cannot tell. */
int dmutex__kept_revoked(const struct dmutex__entry *e);
/* Under e->mu, e kept and revoked: 1 if asked back by another process and
 * nothing else (or kept for a batch, asked from the start); 0 if the
 * subscription was lost, confirmed late or moved since, which may mean
 * the key is gone with a restart: no batch then. */
int dmutex__kept_asked(const struct dmutex__entry *e);
/* Under e->mu, e kept: Redis confirmed the lease for a request sent at
 * `sent` (a renewal, a reservation). */
void dmutex__kept_confirmed(struct dmutex__entry *e, int64_t sent);
/* Holds of a kept lease found gone, to report (dmutex__kept_gone). */
struct dmutex__suspects {
	struct dmutex__suspect *v;
	size_t n;
	int64_t since_ns;
};
/* Under e->mu: e's kept lease was found gone or not ours: take the
 * reports of the holds granted on it since its last confirmation; a hold
 * still running is marked lost instead (the caller's
 * dmutex__entry_check_lost reports it). */
void dmutex__kept_gone(struct dmutex__entry *e, struct dmutex__suspects *out);
/* Without any lock: log them, count them, call their handlers; frees. */
void dmutex__kept_report(struct dmutex__entry *e, struct dmutex__suspects *s);
/* dmutex__entry_release_answered, and if the hold ran on a kept lease
 * (was_kept) that is still kept, an ENOLCK is a loss of every hold granted
 * on it since its last confirmation too.  Fills rep and sus for
 * dmutex__lost_report and dmutex__kept_report, called after e->mu. */
void dmutex__kept_release_answered(struct dmutex__entry *e, int err, int lost, int was_kept,
		struct dmutex__lost *rep, struct dmutex__suspects *sus);
/* Under e->mu, e->acquiring set by the caller: forget the kept lease and
 * the hold, and if `gone`, report the holds granted on it since its last
 * confirmation (e->mu dropped meanwhile: the caller's acquiring keeps
 * other threads of ours waiting). */
void dmutex__kept_forget(struct dmutex__entry *e, int gone);
/* Under e->mu (dropped meanwhile), the caller's local hold on e's kept
 * lease having no token: its token, reserved now if none is left (lease_
 * cache.c); or the hold lost (e->lost, *lost to report, and the kept
 * lease's other holds in *sus, dmutex__kept_report).  Returns 0. */
int dmutex__cache_fence(struct dmutex__entry *e, struct dmutex__lost *lost,
		struct dmutex__suspects *sus);

/* ---- renewer.c ---- */
/* Look at every kept lease now (one was revoked): any thread, no lock. */
void dmutex__renewer_kick(struct dmutex_client *c);
int dmutex__renewer_add(struct dmutex_client *c, struct dmutex__entry *e);
void dmutex__renewer_remove(struct dmutex_client *c, struct dmutex__entry *e);
/* Read and act on e's asynchronous release's answer soon (a reference
 * taken while it waits). */
void dmutex__renewer_watch_rel(struct dmutex_client *c, struct dmutex__entry *e);
/* Keep trying to release `token` in the background until until_ns. */
void dmutex__renewer_orphan(struct dmutex_client *c, const char *name,
		const char *token, int mode, int64_t until_ns);
/* An orphan's mode: a rwlock's release of op ('r', 'w', 'q'), or'ed in. */
#define DMUTEX__ORPHAN_RW 0x100
/* The same for a rwlock's acquire given up (op: what it may have taken),
 * first tried at once. */
void dmutex__renewer_orphan_rw(struct dmutex_client *c, const char *name, int op,
		const char *token, int64_t until_ns);
/* The same for a rwlock's release that went unconfirmed (an unlock's EIO),
 * first tried a moment later; rep as for a mutex's (NULL: a request of it
 * may have run, so a "not ours" proves nothing). */
void dmutex__renewer_orphan_rw_rep(struct dmutex_client *c, const char *name, int op,
		const char *token, int64_t until_ns, const struct dmutex__orphan_rep *rep);
/* Release `token` by until (dmutex__release_to, next NULL for none);
 * unconfirmed (EIO), the renewer keeps trying until the lease, lease_ms
 * from now, ends (at once if until had passed: nothing was tried).  The
 * release's answer. */
int dmutex__renewer_release(struct dmutex_client *c, const char *name, const char *token,
		int mode, int64_t until, struct dmutex__handoff *next, unsigned lease_ms);
/* The same for a hold's own release: rep (NULL for none) is what the
 * orphan reports if every request, the first ones here included, was
 * certainly refused and the lock is then found not ours before
 * rep->valid_ns (struct dmutex__orphan_rep). */
int dmutex__renewer_release_rep(struct dmutex_client *c, const char *name, const char *token,
		int mode, int64_t until, struct dmutex__handoff *next, unsigned lease_ms,
		const struct dmutex__orphan_rep *rep);
/* The same for a release that did not run (refused, rel_settle.c): its
 * orphan reports as above. */
void dmutex__renewer_orphan_rep(struct dmutex_client *c, const char *name, const char *token,
		int mode, int64_t until_ns, const struct dmutex__orphan_rep *rep);
/* Before dmutex_destroy of a mutex of e whose handler is cb(arg): no
 * orphan calls it any more (its report is then the log line and the lost
 * metric only), and none is calling it (unless on the renewal thread,
 * from that very handler). */
void dmutex__renewer_orphans_dismiss(struct dmutex__entry *e, void (*cb)(const char *, void *),
		void *arg);
/* Without any lock: give e's kept lease back by `until` if nobody holds
 * it (idle, asked back, a mutex destroyed). */
void dmutex__renewer_give_back(struct dmutex__entry *e, int64_t until);
/* The same under e->mu (dropped meanwhile, e->acquiring set meanwhile),
 * e kept: the lease given back and forgotten (dmutex__kept_forget). */
void dmutex__renewer_give_back_locked(struct dmutex__entry *e, int64_t until);
/* Without any lock: every kept lease of c given back (exit, close). */
void dmutex__renewer_give_back_all(struct dmutex_client *c, int64_t until);
void dmutex__renewer_stop(struct dmutex_client *c);
void dmutex__renewer_atfork_child(struct dmutex__renewer *r);

/* The release with retries shared by unlock, exit and the orphan list:
 * 0 released; ENOLCK not ours; EIO unconfirmed. */
int dmutex__release(struct dmutex_client *c, const char *name,
		const char *token, int mode);
/* The same, ending by until (CLOCK_MONOTONIC ns) instead of
 * command_timeout_ms from now; EIO at once if until has passed. */
int dmutex__release_by(struct dmutex_client *c, const char *name,
		const char *token, int mode, int64_t until);
/* A fair lock's release_by that may hand the lock to next, a waiting
 * thread of ours (backend.h struct dmutex__handoff); next NULL, or a
 * backend without local hand-overs: release_by. */
int dmutex__release_to(struct dmutex_client *c, const char *name, const char *token, int mode,
		int64_t until, struct dmutex__handoff *next);
/* release_by, and *ran: whether one of its requests may have run (went
 * out, no answer came back).  EIO with *ran 0: none ran, and a release
 * asked again has the only answer. */
int dmutex__release_sure(struct dmutex_client *c, const char *name, const char *token, int mode,
		int64_t until, int *ran);
/* release_to, and *ran as release_sure's. */
int dmutex__release_to_sure(struct dmutex_client *c, const char *name, const char *token,
		int mode, int64_t until, struct dmutex__handoff *next, int *ran);

#endif
