/* One Redis master: address, connection pool, scripts by SHA. */
#ifndef DMUTEX_NODE_H
#define DMUTEX_NODE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

#include "conn.h"

#include "backend/backend.h"

#define DMUTEX__POOL_MAX 16

/*
 * Where a node's server is when its address does not say: a
 * redis-sentinel:// master (sentinel.c makes one).  Asked before each dial,
 * told when the answer proved wrong; node.c knows no more of it, so the
 * sentinels (themselves nodes) sit above the node, not beside it.
 */
struct dmutex__locator;
struct dmutex__locator_ops {
	/* The server's address into host and *port, and the generation it
	 * belongs to into *gen, by deadline: 0, or -1 with why filled. */
	int (*locate)(struct dmutex__locator *l, int64_t deadline, char *host, size_t hostlen,
			int *port, unsigned *gen, char *why, size_t whylen);
	/* The address of generation gen proved wrong: ask again next time. */
	void (*stale)(struct dmutex__locator *l, unsigned gen);
	/* The current generation: a connection of another one is not pooled. */
	unsigned (*gen)(struct dmutex__locator *l);
	void (*atfork_child)(struct dmutex__locator *l);
	void (*free)(struct dmutex__locator *l);
};
struct dmutex__locator {
	const struct dmutex__locator_ops *ops;
};

struct dmutex__node {
	const struct dmutex__node_addr *addr;
	char *password;                 /* read from addr->password_file, or NULL */
	struct ssl_ctx_st *tls;         /* rediss://: the URL's TLS context, or NULL */
	unsigned connect_ms;
	unsigned command_ms;
	pthread_mutex_t mu;             /* leaf */
	pthread_cond_t back;            /* a connection came back (node_put) */
	unsigned takers;                /* atomic: threads waiting on back */
	struct dmutex__conn *idle[DMUTEX__POOL_MAX];
	int nidle;
	int down_logged;                /* rate-limits "unreachable" warnings; 2: quiet (opening) */
	char last_err[200];             /* mu: the last failure ("cannot connect: timed out
	                                 * after 2000 ms"), for open's summary line */
	/* Redis Cluster (src/backend/redis/cluster.c). */
	int sharded;                    /* scripts publish with SPUBLISH */
	int redirects;                  /* a member: MOVED, ASK and TRYAGAIN come back as
	                                 * replies, with *maybe_done DMUTEX__REDIRECT */
	/* Set on a cluster's face: dmutex__node_call(_by) runs the script on the
	 * member serving the slot of its first key, following redirections. */
	struct redisReply *(*route)(struct dmutex__node *n, int script, int nkeys, int argc,
			const char **argv, int *maybe_done, int64_t deadline);
	void *route_arg;
	struct dmutex__locator *loc;        /* redis-sentinel://: where the master is; the
	                                     * node owns it (node_fini frees it) */
};

/* Also reads the files the URL names (password_file, TLS certificates and
 * keys): 0, EINVAL (one of them cannot be used: logged, naming it) or
 * ENOMEM.  On failure nothing is left to finish.  A redis-sentinel://
 * template is not dialled until given a locator (sentinel.h's
 * dmutex__master_init): its address is asked at each connect, checked
 * with ROLE, and asked again when it proves wrong (a failed connect, ROLE
 * not master, READONLY). */
int dmutex__node_init(struct dmutex__node *n, const struct dmutex__node_addr *addr,
		unsigned connect_ms, unsigned command_ms);
void dmutex__node_fini(struct dmutex__node *n);
void dmutex__node_atfork_child(struct dmutex__node *n);

/* A new authenticated connection, within the connect timeout; NULL on
 * failure (logged). */
struct dmutex__conn *dmutex__node_connect(struct dmutex__node *n);
/* From the pool, or NULL. */
struct dmutex__conn *dmutex__node_pooled(struct dmutex__node *n);
/* From the pool, or new. */
struct dmutex__conn *dmutex__node_get(struct dmutex__node *n);
/* From the pool, or new with the connect timeout cut to end by deadline. */
struct dmutex__conn *dmutex__node_get_by(struct dmutex__node *n, int64_t deadline);
/* Close every idle connection: after one failed, the rest are suspect. */
void dmutex__node_drop_idle(struct dmutex__node *n);
/* Back to the pool; a broken connection (c->err), or one that still owes
 * replies to a caller, is closed instead (the latter logged: it is a bug).
 * Owed replies (conn.h: asynchronous releases) go with it into the pool,
 * for its next user to read. */
void dmutex__node_put(struct dmutex__node *n, struct dmutex__conn *c);
/* The pooled connection c, taken out for the caller, or settled(arg)
 * true: waits (by deadline) while another thread uses c.  0 with *out c,
 * or *out NULL when settled; -1 at the deadline.  c is only compared,
 * never touched: it may have been freed (then settled must say so). */
int dmutex__node_take(struct dmutex__node *n, const struct dmutex__conn *c, int64_t deadline,
		int (*settled)(void *), void *arg, struct dmutex__conn **out);

/*
 * Run an embedded script by SHA, falling back to EVAL on NOSCRIPT (a server
 * restart flushes the script cache).  argv holds the keys then the args.
 * The whole exchange ends by deadline (CLOCK_MONOTONIC ns).
 * Returns the reply (never an error reply: those are logged and turned into
 * NULL) or NULL, with *maybe_done set when the script may have run.
 */
redisReply *dmutex__node_script(struct dmutex__node *n, struct dmutex__conn *c, int script,
		int nkeys, int argc, const char **argv, const size_t *lens, int *maybe_done,
		int64_t deadline);

/* maybe_done values besides 0/1: Redis answered with an error (WRONGTYPE,
 * NOPERM, OOM...): the script did not apply, and asking again will not help. */
#define DMUTEX__REFUSED 2
/* A cluster member answered MOVED, ASK or TRYAGAIN: the reply is returned. */
#define DMUTEX__REDIRECT 3

/*
 * get + script + put, for one call.  A pooled connection that fails is
 * probably stale (server restarted, idle timeout): the pool is emptied and
 * the call made once more on a fresh connection.  Safe because every script
 * is idempotent by token.  NULL when both fail (logged).
 */
redisReply *dmutex__node_call(struct dmutex__node *n, int script, int nkeys, int argc,
		const char **argv, int *maybe_done);
/* A cluster member that answered ASK: ASKING, then the script (by source),
 * on one connection by deadline. */
redisReply *dmutex__node_call_asking(struct dmutex__node *n, int script, int nkeys, int argc,
		const char **argv, int *maybe_done, int64_t deadline);
/* The same, ending by deadline (CLOCK_MONOTONIC ns) instead of
 * command_timeout_ms from now, a new connection's dial included: the calls
 * whose EIO comes within command_timeout_ms in total (trylock, unlock,
 * signal, broadcast) share one deadline over their retries and nodes. */
redisReply *dmutex__node_call_by(struct dmutex__node *n, int script, int nkeys, int argc,
		const char **argv, int *maybe_done, int64_t deadline);
/* One attempt by the deadline, on a pooled connection or a new one: no
 * second try on a fresh connection after a break, for a request whose
 * effect the caller must see or redo itself (a BLPOP that may have popped
 * a grant: grant.c).  NULL with *maybe_done set when it may have run. */
redisReply *dmutex__node_call_once(struct dmutex__node *n, int script, int nkeys, int argc,
		const char **argv, int *maybe_done, int64_t deadline);
/* A call of the caller's deadline (0: none): dmutex__node_call_by while
 * that deadline comes before the node's own timeouts would end the call,
 * else dmutex__node_call (a far deadline changes nothing).  A timed
 * lock's tries: by its deadline, each still a command timeout at most. */
redisReply *dmutex__node_call_within(struct dmutex__node *n, int script, int nkeys, int argc,
		const char **argv, int *maybe_done, int64_t deadline);
/* Not a script: the plain `SET lock value NX PX lease GET` that takes a
 * free lock (redis.c).  It goes wherever a script goes (a cluster routes
 * it by its key, as a script by its first key): argv is the command's
 * arguments after SET, nkeys 1. */
#define DMUTEX__CMD_TAKE DMUTEX__SCRIPT_COUNT
/* Not a script either: `BLPOP key timeout`, a fair waiter's wait for its
 * hand-over (grant.c); argv the key and the timeout in seconds, nkeys 1. */
#define DMUTEX__CMD_BLPOP (DMUTEX__SCRIPT_COUNT + 1)
/* Not a script: `EXISTS key...`, a signal's look for waiters before its
 * script (cond_ops.c); argv the keys, all of them keys. */
#define DMUTEX__CMD_EXISTS (DMUTEX__SCRIPT_COUNT + 2)
/* A script's name for logs, or "take", "blpop", "exists" for the commands
 * above. */
const char *dmutex__script_name(int script);

/* The node's scripts: dmutex__scripts, or their SPUBLISH variants (n NULL:
 * a plain Redis). */
const struct dmutex__script *dmutex__node_scripts(const struct dmutex__node *n);

/* Pipelined: append one script call, by SHA or (after NOSCRIPT) by source. */
/* n NULL: a plain Redis. */
int dmutex__node_script_append(const struct dmutex__node *n, struct dmutex__conn *c, int script,
		int by_sha, int nkeys, int argc, const char **argv, const size_t *lens);
/* 1 if an error reply is a passing condition (LOADING, BUSY, READONLY...). */
int dmutex__node_transient(const redisReply *r);
/* 1 for MOVED, ASK and TRYAGAIN (a cluster's slot is elsewhere or moving). */
int dmutex__node_redirect(const redisReply *r);
/* 1 if the reply says the server does not know the script. */
int dmutex__node_noscript(const redisReply *r);
/* A new connection with a connect timeout of timeout_ms (Redlock uses its
 * per-node timeout, so that one dead node does not hold up the others). */
struct dmutex__conn *dmutex__node_connect_timeout(struct dmutex__node *n, unsigned timeout_ms);

#endif
