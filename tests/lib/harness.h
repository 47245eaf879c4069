/*
 * Shared test harness for dmutex: real redis-server processes, process
 * helpers, a pipe "ready" signal, a fault-injecting TCP proxy, and the
 * Sentinel (harness_sentinel.c) and Cluster (harness_cluster.c) set-ups.
 *
 * C11 + POSIX (compile with -D_GNU_SOURCE), link with -lhiredis -lpthread.
 *
 * Rules of thumb for users:
 *  - Every server started with th_redis_start() is registered; it is killed
 *    and its temp dir removed by th_redis_stop(), th_redis_stop_all() or the
 *    atexit handler of the process that started it.  If that process dies
 *    without running atexit handlers (SIGKILL, criterion timeout), the server
 *    still dies (PR_SET_PDEATHSIG), only its temp dir (th-redis-XXXXXX under
 *    $TMPDIR or /tmp) is left behind; the next th_redis_start() (in any
 *    process) removes such dirs once their owner process (recorded in
 *    DIR/owner) is gone and their server does not answer.
 *  - Each server's files: DIR/redis.conf, redis.log, redis.stderr, owner,
 *    redis.sock, plus appendonlydir/ or dump.rdb when extra enables them.
 *    Set TH_REDIS_SERVER to use another redis-server binary.
 *  - The fork handlers (pthread_atfork) close the proxies' sockets in every
 *    forked child, and forked children (th_spawn or plain fork) never clean
 *    up the parent's servers (ownership is by pid).
 *  - PR_SET_PDEATHSIG fires when the *thread* that started the server exits:
 *    call th_redis_start()/th_redis_restart() from a thread that outlives the
 *    server (normally the test's main thread).
 *  - Processes forked by th_spawn() never stop the parent's servers, and the
 *    child's copies of th_proxy sockets are closed so that the parent's proxy
 *    can still drop connections.  Do not use cr_assert in a th_spawn child:
 *    return an exit code instead.
 *  - Never sleep to synchronise: use th_wait_until / th_sync / th_wait_*.
 */
#ifndef DMUTEX_TEST_HARNESS_H
#define DMUTEX_TEST_HARNESS_H

#include <stdarg.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* redis-server processes                                              */
/* ------------------------------------------------------------------ */

struct th_redis {
	pid_t pid;             /* 0 when not running */
	int port;              /* TCP port on 127.0.0.1 */
	char dir[256];         /* private temp dir (mkdtemp under $TMPDIR or /tmp) */
	char sock[300];        /* unix socket path inside dir */
	/* "redis://127.0.0.1:PORT?command_timeout_ms=T" and
	 * "unix:///.../redis.sock?command_timeout_ms=T", T the harness's
	 * command timeout (th_command_timeout_ms); more options with
	 * th_url_with, never by appending "?..." */
	char url[600];
	char unix_url[700];
	char extra[1024];      /* extra config kept for restart */
	int kind;              /* TH_REDIS_PLAIN (0), TH_REDIS_SENTINEL, TH_REDIS_CLUSTER */
};

/* What th_redis_start_as() starts (kept in struct th_redis for restart). */
enum { TH_REDIS_PLAIN = 0, TH_REDIS_SENTINEL = 1, TH_REDIS_CLUSTER = 2 };

/*
 * Start redis-server on a free loopback port, in its own temp dir, with a
 * unix socket (perm 700), no persistence (save "" / appendonly no) unless
 * `extra` says otherwise, `enable-debug-command local`, `protected-mode no`,
 * and the `extra` config lines appended (may be NULL; e.g. "requirepass x\n",
 * "user alice on >pw ~* +@all\n", "appendonly yes\n").
 *
 * Ready when (deadline 10 s): the process is alive, the TCP port answers PING
 * with +PONG or -NOAUTH..., its unix socket exists in its dir (so the answer
 * came from *this* server) and, unless extra changes loglevel/logfile, the log
 * says "Ready to accept connections" (dataset loaded).
 * The port is picked by binding port 0; if redis fails to bind it (another
 * process took it meanwhile), up to 5 attempts are made with new ports.
 * Returns 0, or -1 with a message (and the server's log tail) on stderr; on
 * failure nothing is left running and r->pid == 0, r->dir == "".
 */
int th_redis_start(struct th_redis *r, const char *extra);
/*
 * th_redis_start() for another kind of server, same rules (registration,
 * cleanup, PDEATHSIG, stale-dir sweep, 5 attempts on a taken port):
 *  - TH_REDIS_PLAIN: exactly th_redis_start();
 *  - TH_REDIS_SENTINEL: `redis-server redis.conf --sentinel`; extra must
 *    hold the `sentinel monitor ...` lines.  Ready when it answers PING
 *    (+PONG or -NOAUTH) and its unix socket exists (a sentinel logs no
 *    "Ready to accept connections").  A sentinel rewrites redis.conf (its
 *    id, the replicas and sentinels it learned): th_redis_restart() keeps
 *    that file, so a restarted sentinel keeps its identity and knowledge;
 *  - TH_REDIS_CLUSTER: `cluster-enabled yes`, `cluster-config-file
 *    nodes.conf` in its dir; the port is chosen so that the cluster bus port
 *    (port + 10000) is free too (both checked; a bus port taken meanwhile
 *    counts as a taken port and is retried with a new pair).  Add
 *    `cluster-node-timeout` etc. in extra.  th_redis_restart() keeps
 *    nodes.conf, so the node rejoins with its identity.
 */
int th_redis_start_as(struct th_redis *r, const char *extra, int kind);
/* SIGCONT + SIGKILL to the server's process group, waitpid, rm -rf dir,
 * unregister.  Safe on a zeroed / already stopped / failed-to-start struct. */
void th_redis_stop(struct th_redis *r);
/* SIGKILL the server, then start it again on the SAME port and dir with the
 * same config (keeps AOF/RDB files if any).  Retries up to 5 times if the
 * port is briefly taken.  0 or -1.  On failure the dir is kept (and still
 * registered), so th_redis_stop() must still be called (usually from .fini). */
int th_redis_restart(struct th_redis *r);
/* Crash the server: SIGKILL + reap, keeping its dir, port and registration
 * (r->pid becomes 0); bring it back with th_redis_restart(), clean up with
 * th_redis_stop() as usual.  0, or -1 if it was not running. */
int th_redis_kill(struct th_redis *r);
/* SIGSTOP and wait until /proc/PID/stat state is 'T' (deadline 5 s). 0/-1. */
int th_redis_pause(struct th_redis *r);
/* SIGCONT and wait until the state is not 'T' (deadline 5 s). 0/-1. */
int th_redis_resume(struct th_redis *r);
/* Kill and clean up every server registered by the calling process (servers
 * inherited from a parent across fork are left alone).  Also installed with
 * atexit() on the first call of th_redis_start/th_spawn/th_proxy_start. */
void th_redis_stop_all(void);

/* Admin connection over TCP (5 s connect/read timeout), authenticated as
 * user/pass when given (user NULL + pass = AUTH pass; pass NULL = no AUTH).
 * NULL on any failure (message on stderr).  Free with redisFree(). */
redisContext *th_redis_connect(const struct th_redis *r, const char *user, const char *pass);
/* Same over the unix socket. */
redisContext *th_redis_connect_unix(const struct th_redis *r, const char *user, const char *pass);
/* Plain (unauthenticated) hiredis connection to 127.0.0.1:port with the given
 * connect and read/write timeout; e.g. to go through a th_proxy.  NULL on
 * failure (no message: a refused connection is often the expected result). */
redisContext *th_tcp_connect(int port, int timeout_ms);

/* One command on a fresh admin connection (no auth) with a 5 s timeout;
 * returns the reply (caller frees with freeReplyObject) or NULL on a
 * connection/IO error.  A Redis error (e.g. -NOAUTH) is returned as a reply of
 * type REDIS_REPLY_ERROR.  printf-like hiredis format. */
redisReply *th_redis_cmd(const struct th_redis *r, const char *fmt, ...);
redisReply *th_redis_vcmd(const struct th_redis *r, const char *fmt, va_list ap);
/* Like th_redis_cmd, but authenticated (user/pass as in th_redis_connect) and
 * with the given timeout (<= 0 means 5 s). */
redisReply *th_redis_cmd_as(const struct th_redis *r, const char *user, const char *pass,
                            int timeout_ms, const char *fmt, ...);
/* Integer result of a command (no auth), or LLONG_MIN on error/nil.  A bulk
 * string that is entirely a decimal integer (e.g. GET of "42") also counts. */
long long th_redis_int(const struct th_redis *r, const char *fmt, ...);
/* Count of connected clients = number of CLIENT LIST lines.  NOTE: this
 * includes the harness's own probe connection, so a server with no other
 * clients returns 1.  -1 on error. */
int th_redis_clients(const struct th_redis *r);
/* Poll until th_redis_clients(r) == n (deadline timeout_ms): 1 if it did. */
int th_redis_wait_clients(const struct th_redis *r, int n, int timeout_ms);
/* The subscriber count in the reply to PUBSUB NUMSUB (or SHARDNUMSUB) of
 * one channel, or -1 if rep is NULL or not that shape.  Frees rep. */
long long th_numsub(redisReply *rep);

/* rm -rf of a harness temp dir (basename must start with "th-redis-"; other
 * paths are refused with a message).  For dirs left by a SIGKILLed owner. */
void th_rm_rf(const char *dir);

/* 1 if something accepts TCP connections on 127.0.0.1:port, else 0. */
int th_port_is_open(int port);
/* A currently free TCP port on 127.0.0.1 (bind port 0, close), or -1. */
int th_free_port(void);

/* ------------------------------------------------------------------ */
/* client URLs (harness_url.c)                                         */
/* ------------------------------------------------------------------ */

/* The command timeout (ms) of the client URLs the harness hands out, once
 * th_slowdown(): far above the library's 1 s default, which an ordinary
 * reply on a loaded 2-core CI machine under ASan has exceeded (EIO in a
 * test that is not about timeouts).  A test whose subject is a timeout, or
 * whose bound derives from one, names its own (th_url_with). */
#define TH_COMMAND_TIMEOUT_MS 5000
int th_command_timeout_ms(void);
/* How much slower than the plain build this run is: 3 under ASan or TSan,
 * twice that over TLS (DMUTEX_TEST_TLS set).  dmt_slowdown() is this. */
int th_slowdown(void);
/* buf = base (a URL or URL list) with opts ("a=1&b=2"; NULL or "": none)
 * joined to its last URL with '?' or '&'.  If opts sets
 * command_timeout_ms, the harness's own (th_command_timeout_ms) is left out
 * of base, so that the test's counts (a value given twice differently is
 * EINVAL).  0, or -1 with a message if buf is too small (then buf = ""). */
int th_url_with(char *buf, size_t len, const char *base, const char *opts);

/* The driver of a test program that runs itself as child processes (the
 * shim's, which cannot use criterion): its own path in self, a
 * redis-server started, DMUTEX_URL set to it (with url_opts, if any) and
 * DMUTEX_NAMESPACE to ns.  0, or -1 (said on stderr). */
int th_self_driver(struct th_redis *srv, char *self, size_t len, const char *ns, const char *url_opts);

/* ------------------------------------------------------------------ */
/* time, polling, processes                                            */
/* ------------------------------------------------------------------ */

/* Monotonic milliseconds. */
long long th_now_ms(void);
/* Poll cond(arg) every 2 ms until true or timeout_ms passes (cond is checked
 * once more at the deadline).  Returns 1 if it became true, else 0. */
int th_wait_until(int (*cond)(void *), void *arg, int timeout_ms);

/* Fork a child running fn(arg) and _exit(fn's return value & 0xff).  stdio is
 * flushed before the fork; the child owns none of the parent's servers (it
 * will not kill them, not even via th_redis_stop_all) and the child's copies
 * of th_proxy sockets are closed.  -1 if fork fails. */
pid_t th_spawn(int (*fn)(void *), void *arg);

/*
 * A child process that starts afresh: fork, then exec this test binary
 * (/proc/self/exe) with TH_CHILD=name and TH_CHILD_ARG=arg in its
 * environment; the entry TH_CHILD_ENTRY(name, fn) of the test file runs
 * fn(arg) from a constructor, before criterion starts, and _exits with its
 * return value & 0xff.  Unlike th_spawn the child shares no memory with
 * the parent: everything it needs travels in arg (a URL, a number).  Use it
 * where the point is another process, not fork(): GCC 12's libasan can
 * hand a child forked from a threaded parent its allocator lock already
 * taken, and the child then hangs in its first malloc.  -1 if fork fails;
 * the child exits 127 if exec fails.
 */
pid_t th_spawn_exec(const char *name, const char *arg);
#define TH_CHILD_ENTRY(name, fn) \
	__attribute__((constructor)) static void th_child_entry_##name(void) \
	{ \
		th_child_dispatch(#name, fn); \
	}
/* For TH_CHILD_ENTRY: if this process is the child `name`, run fn and exit. */
void th_child_dispatch(const char *name, int (*fn)(const char *arg));
/* waitpid with a deadline: exit status (0..255), 128+signal if killed by a
 * signal, or -1 on timeout (the child is then SIGKILLed and reaped) or error. */
int th_wait_child(pid_t pid, int timeout_ms);
/* Run a program (argv[0] looked up in PATH) to completion with a deadline:
 * stdin /dev/null, stdout and stderr appended to out_path (NULL: discarded),
 * env = extra "NAME=VALUE" strings over the current environment (NULL: none;
 * e.g. REDISCLI_AUTH=pw, so that a password is not in argv), own process
 * group, PR_SET_PDEATHSIG.  Returns th_wait_child's result: exit status,
 * 128+signal, or -1 on timeout (then its process group is SIGKILLed) or
 * failure to start. */
int th_run(const char *const argv[], const char *const env[], const char *out_path,
           int timeout_ms);
/* th_run's start alone: the child's pid (reap it with th_wait_child or
 * waitpid), or -1 (logged). */
pid_t th_start(const char *const argv[], const char *const env[], const char *out_path);
/* Wait until process pid is in state 'T' (stopped), deadline 5 s.  0 or -1
 * (-1 also as soon as the process is gone or a zombie). */
int th_wait_stopped(pid_t pid);
/* 1 if process pid no longer exists or is a zombie all of whose threads have
 * exited (so its sockets/ports are closed), else 0.  For processes that are
 * not your children (you cannot waitpid them), e.g. an orphaned server. */
int th_proc_gone(pid_t pid);
/* Scheduler state letter of pid from /proc/PID/stat ('R','S','T','Z',...),
 * or -1 if there is no such process. */
int th_proc_state(pid_t pid);

/* ------------------------------------------------------------------ */
/* one-shot ready signal between processes                             */
/* ------------------------------------------------------------------ */

/* th_sync_init before fork; child calls th_sync_post; parent
 * th_sync_wait(ms) -> 0, or -1 on timeout/EOF.  Each post releases one wait. */
struct th_sync { int fd[2]; };
int th_sync_init(struct th_sync *s);
void th_sync_post(struct th_sync *s);
int th_sync_wait(struct th_sync *s, int timeout_ms);
void th_sync_close(struct th_sync *s);

/* ------------------------------------------------------------------ */
/* fault-injecting TCP proxy                                           */
/* ------------------------------------------------------------------ */

/*
 * In-process proxy (own thread, one poll() loop, 64 KiB buffer per direction
 * per connection, at most 256 connections) from a free port on 127.0.0.1 to
 * 127.0.0.1:target_port.  Modes:
 *   TH_PROXY_PASS          forward both ways;
 *   TH_PROXY_DROP_REPLIES  forward client->server, read and discard
 *                          server->client bytes;
 *   TH_PROXY_BLACKHOLE     accept, read and discard everything from both
 *                          sides, forward nothing.  Connections accepted in
 *                          this mode never connect to the server.
 * In DROP_REPLIES and BLACKHOLE the death of the server side is not passed on
 * to the client either; a client connection without a server side (accepted
 * while blackholed, or whose server side died unseen) is closed when the mode
 * goes back to one that forwards client->server.  Switching mode discards
 * bytes buffered for a direction that no longer forwards.
 * th_proxy_set_mode and th_proxy_close_all are synchronous: when they return
 * the proxy thread has applied them.  A connection whose stream
 * was cut by DROP_REPLIES/BLACKHOLE is desynchronised: use a new one after
 * going back to PASS.
 */
struct th_proxy;
enum { TH_PROXY_PASS, TH_PROXY_DROP_REPLIES, TH_PROXY_BLACKHOLE };
struct th_proxy *th_proxy_start(int target_port);   /* NULL on failure */
int  th_proxy_port(const struct th_proxy *p);
void th_proxy_set_mode(struct th_proxy *p, int mode);
int  th_proxy_mode(const struct th_proxy *p);
/* Close every current client and server connection (the proxy keeps
 * listening). */
void th_proxy_close_all(struct th_proxy *p);
/* Number of connection pairs currently open. */
int  th_proxy_conns(struct th_proxy *p);
/* Stop the thread, close all fds, free.  NULL is ignored. */
void th_proxy_stop(struct th_proxy *p);

/* ------------------------------------------------------------------ */
/* Sentinel: a master, replicas and three sentinels                    */
/* ------------------------------------------------------------------ */

/*
 * Every process is a struct th_redis started with th_redis_start_as(), so
 * the rules at the top of this file hold for each of them (registered,
 * PDEATHSIG from the starting thread, temp dir removed on stop, swept after a
 * SIGKILLed owner).  Start and stop from the test's main thread.
 *
 * Data nodes: data[0] starts as the master, data[1..] as its replicas
 * (`replicaof`, started only after the master answers, and the sentinels only
 * after every replica's link is up and the master lists it online, so the
 * sentinels learn the replicas from their first INFO).  Sentinels: quorum 2,
 * `down-after-milliseconds` and `failover-timeout` from the options.  Which
 * data node is the master changes with failovers: the harness never assumes,
 * it asks (th_sentinel_wait_agree, th_sentinel_kill_master).
 */
#define TH_SENTINELS 3
#define TH_SENTINEL_MAX_REPLICAS 2

struct th_sentinel_opts {
	const char *master_name;    /* NULL: "mymaster" (1..63 bytes, no space) */
	int replicas;               /* 1 or 2; 0 means 1 */
	int down_after_ms;          /* 0: 1000 */
	int failover_timeout_ms;    /* 0: 5000 */
	/* Data nodes: pass only: `requirepass` + `masterauth`; user + pass: an
	 * ACL user (~* &* +@all) with `user default off` + `masteruser`; the
	 * sentinels get `sentinel auth-pass` (and `auth-user`). */
	const char *data_user, *data_pass;
	/* Sentinels: pass only: `requirepass` + `sentinel sentinel-pass`; user +
	 * pass: an ACL user with `user default off` + `sentinel sentinel-user`. */
	const char *sentinel_user, *sentinel_pass;
	const char *data_extra;     /* more config for the data nodes (NULL: none) */
	/* 1: data[1] replicates through s->repl_proxy, a th_proxy in front of
	 * data[0], so a test can cut replication (TH_PROXY_BLACKHOLE) while the
	 * sentinels still see a healthy replica, and make a write miss the
	 * replica that a failover will promote. */
	int replica_proxy;
	/* A directory with ca.crt, server.crt and server.key (for localhost and
	 * 127.0.0.1), or NULL.  Set: every data node and sentinel also listens
	 * with TLS (tls-port; clients need no certificate), replication and the
	 * sentinels' links to the data nodes and to one another go over TLS
	 * (tls-replication yes), so the sentinels name the TLS ports, and
	 * s->url is rediss-sentinel:// on the sentinels' TLS ports with
	 * ?tls_ca=.  The plain ports stay, for the harness's own commands. */
	const char *tls_dir;
};

struct th_sentinel {
	char name[64];                                  /* master name */
	int ndata;                                      /* 1 + replicas */
	struct th_redis data[1 + TH_SENTINEL_MAX_REPLICAS];
	struct th_redis sentinel[TH_SENTINELS];
	int master;           /* data index of the master as last established, -1 unknown */
	struct th_proxy *repl_proxy;  /* opts.replica_proxy: data[1] -> proxy -> data[0] */
	int down_after_ms, failover_timeout_ms;
	char data_user[64], data_pass[64], sentinel_user[64], sentinel_pass[64]; /* "" = none */
	/* "redis-sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/NAME" (no
	 * credentials: add them yourself); with tls_dir "rediss-sentinel://"
	 * on the TLS ports, "?tls_ca=DIR/ca.crt" after it */
	char url[512];
	/* tls_dir: the TLS ports (what the sentinels name); else 0 */
	int data_tls_port[1 + TH_SENTINEL_MAX_REPLICAS];
	int sentinel_tls_port[TH_SENTINELS];
	char tls_dir[256];                              /* "" = no TLS */
};
/* The port the sentinels know data node i by: its TLS port with tls_dir. */
int th_sentinel_data_port(const struct th_sentinel *s, int i);

/* Start everything and wait (deadline timeout_ms; <= 0: 30 s) until
 * th_sentinel_wait_agree() holds.  0, or -1 with a message on stderr and
 * nothing left running. */
int th_sentinel_start(struct th_sentinel *s, const struct th_sentinel_opts *o, int timeout_ms);
/* Stop the sentinels first (so they do not react), then the data nodes and
 * the replication proxy; every process killed and reaped, every dir
 * removed.  Safe on a zeroed or stopped struct. */
void th_sentinel_stop(struct th_sentinel *s);
/* Poll (deadline timeout_ms) until every running sentinel reports the same
 * master address, with flags exactly "master" (no s_down/o_down/failover in
 * progress), knows at least as many other sentinels as are running (they
 * never forget a stopped one), and lists every other running data node as a
 * replica with flags exactly "slave"; and that data node answers ROLE with
 * "master".  Returns its data index (also stored in
 * s->master), or -1 on timeout (the last sentinel's view on stderr). */
int th_sentinel_wait_agree(struct th_sentinel *s, int timeout_ms);
/* SENTINEL GET-MASTER-ADDR-BY-NAME on sentinel i: the data index of the port
 * it answers, -1 if it is not one of ours, -2 on error/nil. */
int th_sentinel_get_master(struct th_sentinel *s, int i);
/* SIGKILL the current master (th_redis_kill: dir and port kept, so
 * th_redis_restart(&s->data[old]) brings it back, and the sentinels then turn
 * it into a replica), then poll (deadline timeout_ms) until every running
 * sentinel reports one and the same other data node as the master and that
 * node answers ROLE "master".  Returns the new master's data index (also in
 * s->master), or -1.  It does not wait for the remaining replicas to be
 * reconfigured: call th_sentinel_wait_agree() for the settled state.  With
 * two replicas that settled master can (rarely, on a loaded machine) be the
 * other replica: two sentinels elected in successive epochs promote one
 * each, and the higher epoch wins. */
int th_sentinel_kill_master(struct th_sentinel *s, int timeout_ms);
/* One command to data node i / sentinel i with the configured credentials
 * (5 s timeout); NULL on a connection error (message on stderr). */
redisReply *th_sentinel_data_cmd(struct th_sentinel *s, int i, const char *fmt, ...);
redisReply *th_sentinel_cmd(struct th_sentinel *s, int i, const char *fmt, ...);

/* ------------------------------------------------------------------ */
/* Cluster: six nodes, three masters with one replica each             */
/* ------------------------------------------------------------------ */

/*
 * Six th_redis_start_as(TH_REDIS_CLUSTER) nodes (each port P chosen so that
 * P + 10000, its cluster bus, is free too; same rules as every th_redis),
 * joined by `redis-cli --cluster create ... --cluster-replicas 1
 * --cluster-yes` (its output goes to node[0].dir/cli.log and, on failure, to
 * stderr).  Roles change with failovers: ask (th_cluster_master_of,
 * th_cluster_slot_owner), never assume.  Start and stop from the test's main
 * thread.
 *
 * "Settled" (th_cluster_wait_ok) means, for every running node: CLUSTER INFO
 * says cluster_state:ok and cluster_slots_ok:16384; its CLUSTER NODES agrees
 * with every other running node's on the owner of all 16384 slots and on the
 * role (and master) of every running node, flags no running node as failing
 * and shows no slot importing/migrating; every slot is owned by a running
 * master; every running replica's link is up.
 */
#define TH_CLUSTER_NODES 6
#define TH_CLUSTER_SLOTS 16384

struct th_cluster_opts {
	int node_timeout_ms;        /* cluster-node-timeout; 0: 2000 */
	/* pass only: `requirepass` + `masterauth`; user + pass: an ACL user
	 * (~* &* +@all), `user default off`, `masteruser`.  redis-cli gets the
	 * password through REDISCLI_AUTH, MIGRATE through AUTH/AUTH2. */
	const char *user, *pass;
	const char *extra;          /* more config for every node (NULL: none) */
};

struct th_cluster {
	struct th_redis node[TH_CLUSTER_NODES];
	char id[TH_CLUSTER_NODES][41];       /* CLUSTER MYID of each node */
	int node_timeout_ms;
	char user[64], pass[64];             /* "" = none */
	/* "redis-cluster://127.0.0.1:P1,...,127.0.0.1:P6?command_timeout_ms=T"
	 * (no credentials; T as in struct th_redis) */
	char url[512];
};

/* Start six nodes, create the cluster and wait until it is settled
 * (deadline timeout_ms; <= 0: 60 s).  0, or -1 with a message on stderr and
 * nothing left running. */
int th_cluster_start(struct th_cluster *c, const struct th_cluster_opts *o, int timeout_ms);
/* Kill and clean up every node.  Safe on a zeroed or stopped struct. */
void th_cluster_stop(struct th_cluster *c);
/* Poll until settled (see above), deadline timeout_ms.  0, or -1 (the last
 * reason on stderr). */
int th_cluster_wait_ok(struct th_cluster *c, int timeout_ms);
/* One command to node i with the configured credentials (5 s timeout); NULL
 * on a connection error (message on stderr).  Argv form: binary-safe. */
redisReply *th_cluster_cmd(struct th_cluster *c, int i, const char *fmt, ...);
redisReply *th_cluster_cmd_argv(struct th_cluster *c, int i, int argc, const char **argv,
                                const size_t *argvlen);
/* CLUSTER KEYSLOT key on the first running node: 0..16383, or -1. */
int th_cluster_keyslot(struct th_cluster *c, const char *key, size_t len);
/* The node that owns (serves) slot according to the first running node's
 * CLUSTER NODES (during a migration: the source, until SETSLOT NODE), or -1. */
int th_cluster_slot_owner(struct th_cluster *c, int slot);
/* i itself if node i is a master, the index of its master if it is a
 * replica, per node i's own CLUSTER NODES; -1 on error. */
int th_cluster_master_of(struct th_cluster *c, int i);
/* A running replica of master m, per m's CLUSTER NODES; -1 if none. */
int th_cluster_replica_of(struct th_cluster *c, int m);

/* Moving one slot step by step, as redis-cli --cluster reshard does. */
struct th_migration {
	int slot, from, to;     /* node indices */
	long long moved;        /* keys moved so far */
};
/* Owner of slot (from) → master `to`: CLUSTER SETSLOT slot IMPORTING on
 * `to`, then SETSLOT slot MIGRATING on `from`.  From now on `from` answers
 * -ASK for a key of the slot it does not have, `to` answers -MOVED unless
 * ASKING came first.  0, or -1 (to is not another master, or a refusal). */
int th_cluster_migrate_begin(struct th_cluster *c, int slot, int to, struct th_migration *m);
/* Up to `batch` keys of the slot (CLUSTER GETKEYSINSLOT on `from`) moved with
 * one MIGRATE ... KEYS (TTLs travel with them).  Returns the number moved (0:
 * none left), or -1. */
int th_cluster_migrate_keys(struct th_cluster *c, struct th_migration *m, int batch);
/* Move what is left (batches of 100), then SETSLOT slot NODE to on `to`, on
 * `from`, and on every other running master; wait (deadline timeout_ms) until
 * settled with `to` owning the slot.  0 or -1. */
int th_cluster_migrate_end(struct th_cluster *c, struct th_migration *m, int timeout_ms);
enum { TH_MIGRATE_STARTED = 1, TH_MIGRATE_KEYS_MOVED = 2 };
/* begin; hook(arg, TH_MIGRATE_STARTED, m) (slot states set, no key moved);
 * keys in batches of `batch` (<= 0: 10); hook(arg, TH_MIGRATE_KEYS_MOVED, m)
 * (all keys on `to`, SETSLOT NODE not sent yet); end.  The hook may block
 * for as long as the test needs the mid-migration state (e.g. while threads
 * contend for a lock in the slot); a nonzero return aborts with -1 (the slot
 * stays mid-migration; th_cluster_stop cleans up).  hook may be NULL.
 * 0 or -1. */
int th_cluster_migrate_slot(struct th_cluster *c, int slot, int to, int batch,
                            int (*hook)(void *arg, int phase, const struct th_migration *m),
                            void *arg, int timeout_ms);
enum { TH_FAILOVER_MANUAL = 1, TH_FAILOVER_KILL = 2 };
/* Fail master m over to its replica: MANUAL sends CLUSTER FAILOVER to the
 * replica (m becomes its replica); KILL SIGKILLs m (th_redis_kill: port and
 * dir kept; th_redis_restart(&c->node[m]) brings it back as a replica).  Then
 * waits (deadline timeout_ms) until settled with the replica owning m's
 * slots.  Returns the new master's index, or -1. */
int th_cluster_failover(struct th_cluster *c, int m, int how, int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* DMUTEX_TEST_HARNESS_H */
