/*
 * dmutex-aware test helpers, shared by the criterion test files: mutex set-up,
 * the Redis keys of a mutex, reading Redis state, time and child processes.
 *
 * Nothing here asserts: every helper returns a value, so that they can be
 * used in th_spawn children too (where cr_assert must not be used).  Helpers
 * that read Redis take the server explicitly (a plain admin connection per
 * call, as th_redis_cmd).
 */
#ifndef DMUTEX_TEST_DMT_H
#define DMUTEX_TEST_DMT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "dmutex.h"
#include "harness.h"

/* ------------------------------------------------------------------ */
/* mutexes                                                             */
/* ------------------------------------------------------------------ */

/* Attributes for dmt_init_mutex; all zero = the defaults (DMUTEX_NORMAL,
 * DMUTEX_STALLED, the client's lease, no onlost handler, cached leases). */
struct dmt_attr {
	int type;
	int robust;
	unsigned lease_ms;                      /* 0: the client's lease */
	void (*onlost)(const char *, void *);
	void *arg;                              /* for onlost */
	int nocache;                            /* 1: dmutex_attr_setleasecache(0),
	                                         * for a test that reads Redis
	                                         * after an unlock */
};

/* dmutex_init(m, name) on client c with the attributes o (NULL: all
 * defaults).  0 or the first error of the attr calls / dmutex_init. */
int dmt_init_mutex(dmutex_t *m, const char *name, dmutex_client_t *c, const struct dmt_attr *o);
/* Open a client on url and dmt_init_mutex(m, name) on it; on failure no
 * client is left open.  0 or the error. */
int dmt_open_mutex(dmutex_client_t **c, dmutex_t *m, const char *url, const char *name,
		const struct dmt_attr *o);
/* dmutex_client_open, tried again on EIO until 10 s x dmt_slowdown() have
 * passed: for a client whose short command or connect timeout is meant for
 * a fault the test makes later (a stopped server, a dropped reply), not
 * for its open, which talks to the server (PING, checks) and on a loaded
 * machine can outlast 200 ms.  0 or the last error. */
int dmt_client_open_retry(dmutex_client_t **c, const char *url);
/* dmutex_destroy + dmutex_client_close (results ignored). */
void dmt_close_mutex(dmutex_client_t *c, dmutex_t *m);
/* dmutex_unlock, then wait for the release's answer (an unlock does not:
 * README "Asynchronous release"), so that Redis's state can be read: a
 * fence of the mutex no longer held waits for it and says EPERM.  The
 * unlock's error; EPERM's absence is -1. */
int dmt_unlock_answered(dmutex_t *m);

/* onlost handler counting its calls in the atomic_int that arg points to. */
void dmt_count_lost(const char *name, void *arg);
/* th_wait_until condition: the atomic_int at arg is >= 1. */
int dmt_lost_once(void *arg);
/* th_wait_until condition: the atomic_int at arg is not 0 (a flag set). */
int dmt_flag_set(void *arg);
/* th_wait_until condition: a trylock of the dmutex_t at arg succeeds (and
 * is undone): nobody holds the lock. */
int dmt_lock_free(void *arg);
/* A timed call begun at t0 (th_now_ms) with a deadline ahead_ms later has
 * just returned: how late it is (ms), logged as what said rc (info). */
long long dmt_late_ms(const char *what, int rc, long long t0, long long ahead_ms);

/* ------------------------------------------------------------------ */
/* URLs and keys                                                       */
/* ------------------------------------------------------------------ */

/* "redis://[USERINFO@]127.0.0.1:PORT?[OPTS&]command_timeout_ms=T"; userinfo,
 * opts NULL or "" for none; T is th_command_timeout_ms() unless opts sets
 * command_timeout_ms.  In a Redlock run (dmt_backend_up) the extra nodes
 * follow: ",redis://127.0.0.1:P1,...". */
void dmt_url(char *buf, size_t len, const char *userinfo, int port, const char *opts);

/*
 * The backend-independent suites run twice: on one Redis, and (meson suite
 * 'redlock', environment DMUTEX_TEST_NODES=N) on N masters; some also over
 * TLS (suite 'tls', DMUTEX_TEST_TLS=DIR of tests/lib/tls: every server
 * also gets a TLS port, and first->url and dmt_url say rediss://).  Call after
 * starting `first`: in a Redlock run it starts N-1 more servers and turns
 * first->url into the list of all of them.  0, or -1 if a server did not
 * start.
 */
int dmt_backend_up(struct th_redis *first);
/* The etcd run (suite 'etcd', test names NAME-etcd; environment
 * DMUTEX_TEST_ETCD=1): dmt_backend_up starts one etcd member, and
 * first->url, first->unix_url and dmt_url(..., first->port, ...) name it
 * (etcd://127.0.0.1:P?OPTS&command_timeout_ms=T).  `first` stays up: the
 * tests keep their own counters and lists in it, but the locks are not
 * there.  1 in that run. */
int dmt_etcd(void);
/* In the etcd run: the KV requests (range, txn, put, delete) its member
 * has served (its gRPC counters, which the JSON gateway's requests go
 * through), less those of this process's dmt_ reads of etcd; -1 on error
 * or outside that run. */
long long dmt_etcd_kv_calls(void);
/* In the etcd run: the watchers its member serves (its gauge
 * etcd_debugging_mvcc_watcher_total), every client's; -1 on error or
 * outside that run. */
long long dmt_etcd_watchers(void);
/* In the etcd run: SIGSTOP (on) or SIGCONT (!on) its member.  0, or -1
 * (also outside that run). */
int dmt_etcd_pause(int on);
/* In the etcd run: SIGKILL its member (the server stopped).  0 or -1. */
int dmt_etcd_kill(void);
/* Skip the calling test in the etcd run: it reads or faults the lock's
 * state in Redis (a key, a script count, a Pub/Sub channel), which over
 * etcd is not there.  why says what it reads. */
#define DMT_REDIS_STATE(why) do { \
	if (dmt_etcd()) \
		cr_skip_test("reads Redis's lock state (%s): not there over etcd", why); \
} while (0)
/* Stop the extra servers (the harness's atexit handler would, too). */
void dmt_backend_down(void);
/* Number of Redis masters in this run (1, or N). */
int dmt_nodes(void);
/* The largest integer answer to cmd over every master of the run (first
 * and the extra Redlock nodes): on Redlock a counter such as the fence is
 * decided by the nodes together, and one slow node may lag behind.
 * LLONG_MIN if no node answered. */
long long dmt_max_int(struct th_redis *first, const char *cmd);
/* The sum of the integer answers to cmd over every master of the run: on
 * Redlock each hold reaches a quorum of the nodes, not a given one (a node
 * that did not answer in time is skipped for a while), so a count that
 * must cover every hold is summed.  LLONG_MIN if a node did not answer. */
long long dmt_sum_int(struct th_redis *first, const char *cmd);
/* dmt_evalsha_calls summed over every master of the run; -1 on error. */
long long dmt_evalsha_calls_all(struct th_redis *first);
/* Skip the calling test in a Redlock run: it makes a fault on, or reads
 * state from, one server, which by design does not decide on N. */
#define DMT_SINGLE_NODE() do { \
	if (dmt_nodes() > 1) \
		cr_skip_test("single-node scenario: skipped on %d Redlock nodes", dmt_nodes()); \
} while (0)
/* "dmutex:lock:{NAME}" and "dmutex:meta:{NAME}" (the default prefix). */
void dmt_lock_key(char *buf, size_t len, const char *name);
void dmt_meta_key(char *buf, size_t len, const char *name);

/* ------------------------------------------------------------------ */
/* Redis state                                                         */
/* ------------------------------------------------------------------ */

/* HGET key field into out; 1 if the field exists, 0 if not (or on error,
 * out then untouched). */
int dmt_hget(const struct th_redis *r, const char *key, const char *field, char *out, size_t len);
/* A field of a lock key, whatever its layout: a fair mutex's key is a
 * hash (layout 2: HGET), any other's a string (layout 3, src/backend/
 * scripts/acquire.lua: "3 token fence died flags lease since pid tid hostid
 * host").  Fields of the string: v token fence died flags lease since pid
 * tid hostid host, and w / cache / robust ("1") present only when the flags
 * hold w / c / r.  A fence not assigned yet ("-") and an empty hostid ("-")
 * count as absent.  The not-recoverable mark "3 notrec" has v and state
 * ("notrec") only.  1 and out set if the field is there, else 0 (also on
 * error or for an absent key; out then untouched). */
int dmt_lock_key_field(const struct th_redis *r, const char *key, const char *field, char *out,
		size_t len);
/* dmt_lock_key_field of NAME's lock key (the default prefix). */
int dmt_lock_field(const struct th_redis *r, const char *name, const char *field, char *out,
		size_t len);
/* (In the etcd run dmt_lock_field knows token, pid and fence: of the
 * queue's oldest key, the holder's.) */
/* The same for a layout-3 value already read (GET). */
int dmt_lock_value_field(const char *val, const char *field, char *out, size_t len);
/* Change one field of NAME's lock key while it is held, its TTL kept, as
 * another client would: a layout-3 string is rewritten (w, cache, robust:
 * that flag added; value ignored), a hash gets HSET.  0, or -1 (no key,
 * not a hold's value, or an error). */
int dmt_lock_set(const struct th_redis *r, const char *name, const char *field, const char *value);
/* EXISTS of NAME's lock key: 1, 0, or LLONG_MIN on error.  In the etcd
 * run: whether NAME's queue holds a key (a hold or a waiter). */
long long dmt_lock_exists(const struct th_redis *r, const char *name);
/* The processes waiting for NAME on the backend: on Redis the waiters'
 * own wake channels, "dmutex:wake:{NAME}:<token>" (PUBSUB CHANNELS; one
 * per process, whose other threads wait in the process), the keys queued
 * behind the holder's over etcd.  -1 on error. */
long long dmt_backend_waiters(const struct th_redis *r, const char *name);
/* Registered waiters of condition variable NAME: its waiter set's size
 * (ZCARD) on Redis, its waiter keys over etcd.  -1 or LLONG_MIN on error. */
long long dmt_cond_waiters(const struct th_redis *r, const char *name);
/* In the etcd run: the keys of object NAME of kind ("m" mutex, "c" cond,
 * "r" rwlock, "s" semaphore, "b" barrier: src/backend/etcd/) under PART
 * ("r/" a rwlock's shares, "q/" its writers' intents, ...): their number,
 * -1 on error. */
long long dmt_etcd_count(const char *kind, const char *name, const char *part);
/* In the etcd run: field i (0-based, space-separated) of the value of
 * NAME's key PART of kind ("s", "v": a semaphore's "FREE INIT"; "b", "v":
 * a barrier's "COUNT GEN ARRIVED").  LLONG_MIN when absent or on error. */
long long dmt_etcd_field(const char *kind, const char *name, const char *part, int i);
/* The robust state of NAME into out ("" when absent = clean); 1 if there
 * is one: "notrec" when the lock key is the not-recoverable mark (layout
 * 3), else the meta hash's state.  In the etcd run: "notrec", "held" or
 * "died", read from NAME's keys there. */
int dmt_meta_state(const struct th_redis *r, const char *name, char *out, size_t len);
/* PTTL of NAME's lock key (-2: none, LLONG_MIN: error).  In the etcd
 * run: the TTL left of the holder's etcd lease, in whole seconds rounded
 * down (x 1000). */
long long dmt_lock_pttl(const struct th_redis *r, const char *name);
/* What `dmutex reset` does to a not-recoverable lock: DEL of NAME's lock
 * key (etcd: of its not-recoverable mark).  The number of keys deleted,
 * LLONG_MIN or -1 on error. */
long long dmt_lock_reset(const struct th_redis *r, const char *name);
/* Number of keys matching pattern, -1 on error.  In the etcd run
 * "dmutex:lock:*" counts every mutex key there (holds, waiters, states). */
long long dmt_count_keys(const struct th_redis *r, const char *pattern);
/* Clients blocked in a command (INFO clients: BLPOP, or a command held
 * back by CLIENT PAUSE), or -1. */
long long dmt_blocked_clients(const struct th_redis *r);
/* Sum of calls= of the named commands (NULL-terminated list) from one INFO
 * commandstats (a command never run counts 0); -1 on error. */
long long dmt_cmd_calls(const struct th_redis *r, const char *cmd, ...)
	__attribute__((sentinel));
/* The scripts (EVALSHA and EVAL) Redis r has run, or over etcd the KV
 * requests the member served (dmt_etcd_kv_calls): what a waiter that
 * polled would run up.  -1 on error. */
long long dmt_script_calls(const struct th_redis *r);
/* dmt_cmd_calls(r, "evalsha", NULL): the scripts the library ran. */
long long dmt_evalsha_calls(const struct th_redis *r);

/* ------------------------------------------------------------------ */
/* time and processes                                                  */
/* ------------------------------------------------------------------ */

/* Monotonic nanoseconds. */
int64_t dmt_now_ns(void);
/* *ts = now on clock clk + ms: an absolute deadline for timedlock/clocklock. */
void dmt_deadline_in(clockid_t clk, long ms, struct timespec *ts);
/* Let ms (or until the monotonic th_now_ms() value `until`) pass.  Only
 * where the passage of time itself is under test, never to wait for another
 * party. */
void dmt_pass_time_ms(long long ms);
void dmt_pass_time_until_ms(long long until);

/* In a child: die (SIGKILL) with its parent, so that it never outlives a
 * test that failed; _exit(99) if parent is already gone. */
void dmt_die_with_parent(pid_t parent);
/* If *pid > 0: SIGKILL (and SIGCONT, should it be stopped) and reap it,
 * then *pid = 0.  For a suite's .fini after a failed assertion. */
void dmt_reap(pid_t *pid);


/* GCC 12's libasan does not hold its allocator's locks across fork(): a
 * child forked while another thread of the parent is inside malloc can
 * inherit a size-class lock taken and hang in its first allocation (seen:
 * every thread of a child stuck in SizeClassAllocator64::GetFromAllocator).
 * The cases that fork a process whose threads allocate at that moment
 * therefore skip under ASan, saying so; the plain build runs them. */
#if defined(__SANITIZE_ADDRESS__)
#define DMT_ASAN_FORK_UNSAFE 1
#else
#define DMT_ASAN_FORK_UNSAFE 0
#endif
#define DMT_ASAN_FORK_REASON "libasan (GCC 12) is not fork-safe while other threads allocate; " \
	"the plain build runs this case"

/* How much slower than the plain build this run is, for windows that a
 * test must hit before a deadline it sets itself (not for bounds that the
 * contract names): 3 under ASan or TSan, twice that over TLS. */
int dmt_slowdown(void);

/* How late a timed wait's return or a hand-over may be (ms) in tests whose
 * holder keeps the 10 s default lease: a wait that runs to that lease (or
 * to a renewal of it) is far beyond this; the rest is a loaded 2-core
 * machine's scheduling (1270 ms was seen with the suite and two busy loops
 * on two cores). */
#define DMT_LATE_MS 2300

#endif /* DMUTEX_TEST_DMT_H */
