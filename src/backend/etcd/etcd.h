/*
 * The etcd backend (etcd:// and etcds://): the state every file of
 * src/backend/etcd/ shares, and what create.c calls.  README "etcd" and
 * docs/guide.md "etcd" give the design; in short:
 *
 * keys, under the URL's prefix, with <n> = "<length>:<name>" (prefix-free,
 * so no name's keys fall inside another's range):
 *   <prefix>m/<n>/q/<own>     a hold or a queued waiter of a mutex, on the
 *                             client's shared lease; the holder is the key
 *                             with the lowest create revision (FIFO), and
 *                             that revision is the fencing token; its
 *                             value "<host> <pid> <tid> <token>"
 *   <prefix>m/<n>/s           robust state: the holder's token, written
 *                             when it took the lock, deleted by a clean
 *                             unlock (no lease: a death leaves it behind)
 *   <prefix>m/<n>/q-notrec    "not recoverable" (no lease): '-' sorts
 *                             before '/', so the range from it to the
 *                             queue's end holds the mark and the queue
 *                             and nothing else: the uncontended lock's one
 *                             compare covers both, while a read of the
 *                             queue's prefix (its head) never sees it
 * own keys: <own> is "<client>.<pid>.<slot>" (hex: a random id of the
 *   client, the process, a small number), not the hold's token: a key
 *   name is used again by the next hold, so that etcd's index does not
 *   keep one tombstone per hold until a compaction (the queue's compare
 *   walks them: +60-70 us per 1,000 holds of one name on a ~0.6 ms cycle).
 *   A slot is token's from its first try until the release of that token
 *   is answered (or a try ends knowing it put nothing), so that a late
 *   release (the renewer's orphans) can never delete a later hold's key;
 *   a key seen deleted counts only with a revision after its creation.
 * leases: a dmutex lease is rounded up to whole seconds, 2 s at least
 *   (ops->lease: what dmutex_getlease reports); one etcd lease per lease
 *   length per client (lease.c), TTL that + 1 s, kept alive by the
 *   renewal thread's renew and, for a hold about to be taken on a lease
 *   whose last keep-alive is older than TTL - lease, by acquire first.
 * wake channels (watch.c): "<flags>:<key>", flags 'p' the key is a
 *   prefix (the range of every key under it), 'd' only deletions wake
 *   (e.g. "dp:<prefix>m/<n>/q/", a mutex's); "k:<key>" one key, every event.
 *   A prefix ends at its last '/': anything after it is ignored (a fair
 *   waiter's channel is the lock's with ":<token>" added by the core).
 */
#ifndef DMUTEX_ETCD_H
#define DMUTEX_ETCD_H

#include <pthread.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/etcd/http.h"

/* The not-recoverable mark's part of a mutex's keys (above). */
#define DMUTEX__ETCD_MARK "q-notrec"

/* The longest key we make: prefix, kind, length, name, part, token. */
#define DMUTEX__ETCD_KEY_MAX (DMUTEX__KEY_MAX + 64)

struct dmutex__etcd_lease {
	unsigned lease_ms;      /* the dmutex lease length it serves */
	int64_t id;             /* 0: none granted (or lost) */
	int64_t ttl_s;          /* as granted */
	int64_t fresh_ns;       /* CLOCK_MONOTONIC: the grant or last keep-alive was sent */
};

struct dmutex__etcd_watch;

struct dmutex__etcd_second {
	char token[DMUTEX__TOKEN_HEX + 1];
	char *head, *own;       /* the key ahead, ours */
	int64_t head_rev;       /* the key ahead's create revision */
	int64_t rev, lease;     /* our key's create revision and lease */
};

/* A deleted key the watches reported, at the delete's revision. */
struct dmutex__etcd_gone {
	char key[DMUTEX__ETCD_KEY_MAX];
	int64_t rev;
};

/* A token's own key's slot (etcd.h "own keys"). */
struct dmutex__etcd_slot {
	struct dmutex__etcd_slot *next;
	char token[DMUTEX__TOKEN_HEX + 1];
	unsigned slot;
};

#define DMUTEX__ETCD_SLOT_BUCKETS 256

/* How many deleted keys the watches remember. */
#define DMUTEX__ETCD_GONE 64

struct dmutex__etcd_tokset {
	char (*v)[DMUTEX__TOKEN_HEX + 1];
	size_t n, cap;
};

struct dmutex__etcd {
	struct dmutex__backend base;    /* first: the face's */
	struct dmutex__etcd_http *http;
	pthread_mutex_t grant_mu;       /* held across a grant or keep-alive round trip */
	pthread_mutex_t mu;             /* leases[] */
	struct dmutex__etcd_lease *leases;
	size_t nleases;
	struct dmutex__etcd_watch *watch;       /* watch.c, made on first use */
	pthread_mutex_t watch_mu;       /* the listener's (waiter.mu in internal.h's order) */
	/* Under mu (keys.c): the tokens of our robust holds, whose clean
	 * release also clears the robust state; and of our waiters whose key
	 * is queued, whose next try only reads the queue (no write). */
	struct dmutex__etcd_tokset robust, queued;
	/* Under mu (keys.c): our waiters second in line (the key ahead of
	 * theirs, their key's revision and lease), and the queue keys whose
	 * deletion the watches reported lately (a ring). */
	struct dmutex__etcd_second *seconds;
	size_t nseconds, capseconds;
	struct dmutex__etcd_gone *gone;
	unsigned ngone;
	/* Under mu (keys.c): the slots of own keys by token, the slots
	 * given back (a stack), the next never used; the client's id. */
	struct dmutex__etcd_slot *slots[DMUTEX__ETCD_SLOT_BUCKETS];
	unsigned *free_slots;
	size_t nfree, capfree;
	unsigned next_slot;
	char id[13];
};

static inline struct dmutex__etcd *
dmutex__etcd_of(struct dmutex__backend *be)
{
	return (struct dmutex__etcd *)be;
}

int dmutex__backend_etcd_create(const struct dmutex__backend_cfg *cfg, struct dmutex__backend **out);

/* "<prefix><kind>/<len>:<name>/<part>" into out[DMUTEX__ETCD_KEY_MAX]
 * (part may be ""); kind: "m" mutex, and the primitives' own letters. */
void dmutex__etcd_name_key(const struct dmutex__etcd *e, char *out, const char *kind,
		const char *name, const char *part);
/* A txn (req) to /v3/kv/txn: 0 and *rep, or EIO (http.h). */
int dmutex__etcd_txn(struct dmutex__etcd *e, json_t *req, json_t **rep, int64_t deadline,
		int *maybe_done, int *refused);
/* responses[i] of a txn's reply, the response_<kind> in it ("range",
 * "put", "delete_range", "txn"); NULL if not there (logged as an
 * unexpected reply, naming what). */
json_t *dmutex__etcd_resp(const json_t *rep, size_t i, const char *kind, const char *what);
/* The first kv of a range response, NULL if none. */
json_t *dmutex__etcd_first_kv(const json_t *range);

/* Our key in the queue q (".../q/") for token's hold into
 * out[DMUTEX__ETCD_KEY_MAX] ("own keys" above): 0, or ENOMEM (make: no
 * slot could be given).  make: give token a slot if it has none (an
 * acquisition's); else a token without one gets q<token>, a key no hold
 * of ours puts: read as absent. */
int dmutex__etcd_own_key(struct dmutex__etcd *e, const char *q, const char *token, int make,
		char *out);
/* token's hold has no key of ours in etcd any more (or never had). */
void dmutex__etcd_own_free(struct dmutex__etcd *e, const char *token);

/* Remember token in set (e->robust, e->queued; under e->mu): 0 or
 * ENOMEM.  take: forget it, 1 if it was there.  has: 1 if it is. */
int dmutex__etcd_tok_add(struct dmutex__etcd *e, struct dmutex__etcd_tokset *set, const char *token);
int dmutex__etcd_tok_take(struct dmutex__etcd *e, struct dmutex__etcd_tokset *set, const char *token);
int dmutex__etcd_tok_has(struct dmutex__etcd *e, struct dmutex__etcd_tokset *set, const char *token);

/* A waiter second in line: remember it (replacing its earlier entry). */
void dmutex__etcd_second_set(struct dmutex__etcd *e, const char *token, const char *head,
		int64_t head_rev, const char *own, int64_t rev, int64_t lease);
/* 1 and *rev if token's waiter is second behind a key the watches saw
 * deleted, on lease: the lock is its (the entry is forgotten).  lease -1:
 * just forget it. */
int dmutex__etcd_second_ready(struct dmutex__etcd *e, const char *token, int64_t lease,
		int64_t *rev);
/* The watches saw key deleted at revision rev (called under watch_mu). */
void dmutex__etcd_gone(struct dmutex__etcd *e, const char *key, int64_t rev);

/* ---- lease.c ---- */
/* The shared lease for holds of lease_ms, granted or kept alive as
 * needed so that a key put on it now outlives lease_ms: 0 and *id, or EIO. */
int dmutex__etcd_lease_for(struct dmutex__etcd *e, unsigned lease_ms, int64_t deadline, int64_t *id);
/* Keep the lease of lease_ms alive now (the renewal thread): 1 alive,
 * 0 it had expired (forgotten: the next hold gets a new one), -1 no answer. */
int dmutex__etcd_lease_keep(struct dmutex__etcd *e, unsigned lease_ms, int64_t deadline);
/* etcd said lease id is gone: forget it. */
void dmutex__etcd_lease_forget(struct dmutex__etcd *e, int64_t id);
/* ops->lease: lease_ms rounded up to whole seconds, at least 2 s. */
unsigned dmutex__etcd_lease(struct dmutex__backend *be, unsigned lease_ms);
/* Revoke every lease (destroy: our keys go at once). */
void dmutex__etcd_lease_revoke_all(struct dmutex__etcd *e);

/* ---- mutex.c ---- */
int dmutex__etcd_acquire(struct dmutex__backend *be, struct dmutex__acq *a);
int dmutex__etcd_release(struct dmutex__backend *be, const char *name, const char *token,
		int mode, int64_t deadline, int *released, int *maybe_done);
void dmutex__etcd_renew(struct dmutex__backend *be, struct dmutex__renewal *r, size_t n,
		int64_t deadline);
char *dmutex__etcd_channel(struct dmutex__backend *be, const char *name);

/* ---- admin.c: operators' views (backend.h) ---- */
int dmutex__etcd_inspect(struct dmutex__backend *be, const char *name, struct dmutex__lock_view *v);
int dmutex__etcd_names(struct dmutex__backend *be, int (*fn)(void *arg, const char *name), void *arg);
int dmutex__etcd_reset(struct dmutex__backend *be, const char *name, int force, int *result);
/* fn(arg, name) for each name with keys under <prefix><kind>/ (sorted,
 * each once), as ops->names: "m" mutexes, "r" read-write locks. */
int dmutex__etcd_names_of(struct dmutex__backend *be, const char *kind,
		int (*fn)(void *arg, const char *name), void *arg);
/* The time to live of lease id in ms (whole seconds: etcd's), -1 if it
 * ended or could not be asked. */
long long dmutex__etcd_lease_left(struct dmutex__etcd *e, int64_t id);
/* rw_admin.c: the same for read-write locks */
int dmutex__etcd_rw_inspect(struct dmutex__backend *be, const char *name,
		struct dmutex__rwlock_view *v);
int dmutex__etcd_rw_names(struct dmutex__backend *be, int (*fn)(void *arg, const char *name),
		void *arg);
int dmutex__etcd_rw_reset(struct dmutex__backend *be, const char *name, int force, int *result,
		struct dmutex__rwlock_view *removed);

/* ---- watch.c: the wake subscriptions ---- */
void dmutex__etcd_watch_create_lock(void);
void dmutex__etcd_watch_create_unlock(void);
struct dmutex__wsub *dmutex__etcd_wake_sub(struct dmutex__backend *be, const char *channel,
		int64_t until_ns);
struct dmutex__wsub *dmutex__etcd_wake_sub_notify(struct dmutex__backend *be, const char *channel,
		int64_t until_ns, void (*notify)(void *), void *arg);
void dmutex__etcd_wake_unsub_notify(struct dmutex__backend *be, struct dmutex__wsub *s);
int dmutex__etcd_wake_confirmed(struct dmutex__backend *be, struct dmutex__wsub *s, int64_t until_ns);
uint64_t dmutex__etcd_wake_seq(struct dmutex__backend *be, struct dmutex__wsub *s);
int dmutex__etcd_wake_wait(struct dmutex__backend *be, struct dmutex__wsub *s, uint64_t seq,
		int64_t until_ns);
void dmutex__etcd_wake_want(struct dmutex__backend *be, struct dmutex__wsub *s, const char *token);
int dmutex__etcd_wake_handed(struct dmutex__backend *be, struct dmutex__wsub *s, char *out);
void dmutex__etcd_wake_unsub(struct dmutex__backend *be, struct dmutex__wsub *s);
void dmutex__etcd_wake_stop(struct dmutex__backend *be);
void dmutex__etcd_wake_lock(struct dmutex__backend *be);
void dmutex__etcd_wake_unlock(struct dmutex__backend *be);
void dmutex__etcd_wake_atfork_child(struct dmutex__backend *be);

#define DMUTEX__ETCD_WAKE_OPS \
	.wake_sub = dmutex__etcd_wake_sub, \
	.wake_sub_notify = dmutex__etcd_wake_sub_notify, \
	.wake_unsub_notify = dmutex__etcd_wake_unsub_notify, \
	.wake_confirmed = dmutex__etcd_wake_confirmed, \
	.wake_seq = dmutex__etcd_wake_seq, \
	.wake_wait = dmutex__etcd_wake_wait, \
	.wake_want = dmutex__etcd_wake_want, \
	.wake_handed = dmutex__etcd_wake_handed, \
	.wake_unsub = dmutex__etcd_wake_unsub, \
	.wake_stop = dmutex__etcd_wake_stop, \
	.wake_lock = dmutex__etcd_wake_lock, \
	.wake_unlock = dmutex__etcd_wake_unlock, \
	.wake_atfork_child = dmutex__etcd_wake_atfork_child

#endif
