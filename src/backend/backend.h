/*
 * The interface every backend implements: one Redis master, Redlock over N
 * masters, a Redis Cluster (src/backend/).  The core talks only to this
 * and to waiter.h, and never learns which topology is behind it.
 *
 * Every call returns 0 or EIO.  EIO means the backend did not answer or
 * answered an error; the detail goes to the log.  `maybe_done` tells the
 * caller that the request may have been applied all the same (it was sent,
 * the reply was lost), so the caller must not assume nothing happened.
 */
#ifndef DMUTEX_BACKEND_H
#define DMUTEX_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct dmutex__node;
struct dmutex__waiter;

/* The longest key or channel name the backend makes (backend/keys.h):
 * prefix (<= 128) + kind + name (<= 512) + braces. */
#define DMUTEX__KEY_MAX (128 + 16 + 512 + 4)

/* One Redis master, as a URL names it (url.c parses, the backend reads;
 * the strings live as long as the client). */
struct dmutex__node_addr {
	char *host;      /* TCP host (brackets stripped from IPv6); NULL for unix */
	int port;        /* TCP port, default 6379 */
	char *path;      /* unix socket path; NULL for TCP */
	char *user;      /* ACL user, percent-decoded; NULL: none */
	char *password;  /* percent-decoded; NULL: none.  Never logged. */
	int db;          /* default 0 */
	int tls;         /* rediss:// */
	/* Options of this URL (NULL: not given).  The files are read when the
	 * client opens (backend/node.c, tls.c), not by the parser. */
	char *password_file;    /* password_file=: the password is its first line */
	char *tls_ca;           /* CA bundle (PEM); NULL: the system store */
	char *tls_cert;         /* client certificate chain (PEM), with tls_key */
	char *tls_key;          /* its private key (PEM) */
	char *tls_server_name;  /* SNI and the name verified; NULL: the host */
	int tls_verify;         /* 1 (default), 0: tls_verify=off */
	char *display;   /* the URL with the password replaced by "***", for logs */
	/* redis-sentinel:// and rediss-sentinel://: this address is the master's
	 * template (user, password, db, TLS options); its host stays NULL, the
	 * sentinels name the master (src/backend/redis/sentinel.c). */
	char *master_name;
	struct dmutex__node_addr *sentinels;  /* user, password (or its file):
	                                       * the sentinel_* options; TLS: the URL's */
	size_t nsentinels;
	char *sentinel_user;                  /* options as given, NULL: none */
	char *sentinel_password;
	char *sentinel_password_file;
	/* redis-cluster:// and rediss-cluster://: this address is the template
	 * of every node of the cluster (user, password, TLS options); its host
	 * stays NULL, the seeds (host and port only) lead to the others
	 * (src/backend/redis/cluster.c). */
	int cluster;
	struct dmutex__node_addr *seeds;
	size_t nseeds;
};

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
	                         * node, phase and dial included (trylock); 0: each
	                         * attempt bounded by the backend's own timeouts */
	int fair;               /* queue in Redis (fair_acquire.lua); one Redis only */
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
 * connection's until the answer is read. */
struct dmutex__rel_ticket;
enum {
	DMUTEX__TICKET_PENDING = 0,     /* no answer read yet */
	DMUTEX__TICKET_RELEASED,        /* compare-and-delete found our token */
	DMUTEX__TICKET_NOT_OURS,        /* it found another token, or none */
	DMUTEX__TICKET_UNKNOWN          /* no usable answer: it may or may not have run */
};

/* An asynchronous release that may not have run (no answer, an error,
 * NOSCRIPT met inside another caller's request): the core retries it in
 * the background until until_ns (its lease's end).  Called by whichever
 * thread read the answer, holding no lock of the backend's. */
typedef void (*dmutex__rescue_fn)(void *arg, const char *name, const char *token,
		int64_t until_ns);

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
	 * reserve `block` fencing tokens, the last in *last.  *result 1 kept,
	 * 0 not ours, 2 someone asked for it meanwhile.  Ends by deadline
	 * (CLOCK_MONOTONIC ns: the caller's, which its other round trips
	 * share).  NULL on backends that do not cache (Redlock).
	 */
	int (*cache)(struct dmutex__backend *be, const char *name, const char *token,
			unsigned block, int64_t deadline, uint64_t *last, int *result);
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
/* The wake channel of a lock, the same on every backend. */
char *dmutex__backend_channel(struct dmutex__backend *be, const char *name);

/* An asynchronous release's answer so far (DMUTEX__TICKET_*), without waiting. */
int dmutex__ticket_state(const struct dmutex__rel_ticket *t);
/* Its answer, read by the deadline (from its connection, taken out of the
 * pool, or waiting while another thread uses that connection and so reads
 * it): DMUTEX__TICKET_PENDING if the deadline came first. */
int dmutex__ticket_wait(struct dmutex__rel_ticket *t, int64_t deadline);
void dmutex__ticket_ref(struct dmutex__rel_ticket *t);
void dmutex__ticket_put(struct dmutex__rel_ticket *t);

/* Why the last verify found nodes unreachable: each failing node's last
 * failure ("cannot connect: Connection refused"; on several nodes each
 * prefixed with its address, "; " between them), or "" if none is known.
 * For the open's one summary line: the nodes' own lines went to debug. */
void dmutex__backend_why(struct dmutex__backend *be, char *out, size_t len);

#endif
