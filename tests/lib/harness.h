/*
 * Shared test harness for dmutex: real redis-server processes, process
 * helpers, a pipe "ready" signal and a fault-injecting TCP proxy.
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
	char url[600];         /* "redis://127.0.0.1:PORT" */
	char unix_url[700];    /* "unix:///.../redis.sock" */
	char extra[1024];      /* extra config kept for restart */
};

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

/* rm -rf of a harness temp dir (basename must start with "th-redis-"; other
 * paths are refused with a message).  For dirs left by a SIGKILLed owner. */
void th_rm_rf(const char *dir);

/* 1 if something accepts TCP connections on 127.0.0.1:port, else 0. */
int th_port_is_open(int port);
/* A currently free TCP port on 127.0.0.1 (bind port 0, close), or -1. */
int th_free_port(void);

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
/* waitpid with a deadline: exit status (0..255), 128+signal if killed by a
 * signal, or -1 on timeout (the child is then SIGKILLed and reaped) or error. */
int th_wait_child(pid_t pid, int timeout_ms);
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

#ifdef __cplusplus
}
#endif

#endif /* DMUTEX_TEST_HARNESS_H */
