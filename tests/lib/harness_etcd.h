/*
 * Real etcd processes for the etcd tests: one member, or a three-member
 * cluster, on free loopback ports, each member in its own data dir under
 * one temp dir; faults (kill -9, SIGSTOP/SIGCONT, restart with its data);
 * the leader as the members see it; etcd's auth switched on through
 * etcdctl.
 *
 * Rules (as for the Redis harness, harness.h):
 *  - Start and stop from the test's main thread: each member dies with
 *    the thread that started it (PR_SET_PDEATHSIG), and every cluster
 *    started by a process is stopped and its dir removed by th_etcd_stop()
 *    or at that process's exit (atexit; forked children never stop their
 *    parent's clusters).
 *  - The temp dir (th-etcd-XXXXXX) is under $TH_ETCD_TMP, else /dev/shm
 *    when writable with 1 GB free (etcd fsyncs every commit: on tmpfs that
 *    costs nothing, so the tests measure dmutex, not the disk; each member
 *    preallocates a 64 MB WAL segment), else $TMPDIR or /tmp.
 *    Files: DIR/mN/ (member N's data), DIR/mN.log (its stderr), DIR/owner
 *    (the starting pid: th_etcd_start removes the dirs whose owner is
 *    gone, left by a test process that was SIGKILLed).
 *  - Set TH_ETCD_BIN / TH_ETCDCTL_BIN to use other binaries.
 *  - Nothing here asserts: every call returns a value, so that children
 *    may use them too.
 */
#ifndef DMUTEX_TEST_HARNESS_ETCD_H
#define DMUTEX_TEST_HARNESS_ETCD_H

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TH_ETCD_MAX 3

struct th_etcd_member {
	pid_t pid;             /* 0 while not running */
	int client_port;       /* http://127.0.0.1:client_port (the JSON gateway) */
	int peer_port;
	char name[8];          /* "m0".."m2" */
	char id[24];           /* etcd's member id (decimal, as the gateway says) once known */
};

struct th_etcd {
	int n;                               /* 1 or 3 members */
	struct th_etcd_member m[TH_ETCD_MAX];
	char dir[256];                       /* the temp dir ("" when stopped) */
	/* "etcd://127.0.0.1:P0,127.0.0.1:P1,127.0.0.1:P2" (no options, no
	 * credentials: add them yourself) */
	char url[256];
	/* "http://127.0.0.1:P0,..." for etcdctl --endpoints */
	char endpoints[256];
	int election_ms;                     /* --election-timeout */
};

/* Options of th_etcd_start (NULL or zeroes: the defaults). */
struct th_etcd_opts {
	int members;         /* 1 or 3; 0: 1 */
	int heartbeat_ms;    /* 0: 100 */
	int election_ms;     /* 0: 1000 */
};

/* 1 if an etcd binary is installed (TH_ETCD_BIN or etcd in PATH). */
int th_etcd_available(void);

/*
 * Start the members and wait (deadline timeout_ms; <= 0: 30 s x
 * th_slowdown()) until every member is healthy (th_etcd_wait_healthy).
 * Ports come from binding port 0; if a member cannot bind its ports
 * (taken meanwhile), everything is stopped and started again with new
 * ones (up to 5 attempts).  0, or -1 with a message and the members' log
 * tails on stderr; nothing is left running then.
 */
int th_etcd_start(struct th_etcd *e, const struct th_etcd_opts *o, int timeout_ms);
/* SIGCONT + SIGKILL every member, reap, rm -rf the dir, forget it.  Safe
 * on a zeroed or stopped struct. */
void th_etcd_stop(struct th_etcd *e);
/* SIGKILL member i (SIGCONT first if paused) and reap it; its data dir and
 * ports are kept for th_etcd_restart.  0, or -1 if it was not running. */
int th_etcd_kill(struct th_etcd *e, int i);
/* Start member i again on its ports with its data dir (killing it first if
 * it still runs); waits until its client port answers /health (not for a
 * leader: use th_etcd_wait_healthy).  0 or -1. */
int th_etcd_restart(struct th_etcd *e, int i, int timeout_ms);
/* SIGSTOP member i and wait until it is stopped (state 'T'). 0/-1. */
int th_etcd_pause(struct th_etcd *e, int i);
/* SIGCONT member i and wait until it runs again. 0/-1. */
int th_etcd_resume(struct th_etcd *e, int i);

/*
 * Poll (deadline timeout_ms) until every running, unpaused member answers
 * GET /health with "health":"true" (etcd 3.4: it has a leader and a
 * quorum) and all of them name the same leader in /v3/maintenance/status.
 * Returns the leader's member index, or -1 (the last reason on stderr).
 */
int th_etcd_wait_healthy(struct th_etcd *e, int timeout_ms);
/* The index of the member that the running members agree leads (one
 * round of questions, no waiting), or -1. */
int th_etcd_leader(struct th_etcd *e);
/*
 * Kill -9 the current leader (th_etcd_kill) and wait (deadline
 * timeout_ms) until the others agree on a new one.  Returns the index of
 * the killed member (restart it with th_etcd_restart), or -1.
 * *new_leader (may be NULL) gets the new leader's index.
 */
int th_etcd_kill_leader(struct th_etcd *e, int *new_leader, int timeout_ms);

/*
 * One HTTP request to member i's client port (Connection: close, deadline
 * timeout_ms; <= 0: 5 s): POST path with body (JSON) when body is not
 * NULL, else GET.  auth (NULL: none) goes in an "Authorization:" header.
 * The body of the answer (NUL-terminated, truncated to outlen - 1) in out.
 * Returns the HTTP status (200...), or -1 on a connection error/timeout.
 */
int th_etcd_http(const struct th_etcd *e, int i, const char *path, const char *body,
                 const char *auth, char *out, size_t outlen, int timeout_ms);
/* The string value of "key":"..." (or a bare number) first found in json,
 * copied to out; 0, or -1 if absent or too long.  For the gateway's
 * answers, whose int64 fields are strings. */
int th_etcd_json_str(const char *json, const char *key, char *out, size_t outlen);
/* The sum of the samples of metric `name` (Prometheus text from GET
 * /metrics of member i) whose line contains label (NULL: every one), e.g.
 * ("grpc_server_handled_total", "grpc_method=\"LeaseKeepAlive\""); -1 on
 * error. */
long long th_etcd_metric(const struct th_etcd *e, int i, const char *name, const char *label);
/* The number of keys under prefix (a range with count_only), through
 * member i, without auth; -1 on error. */
long long th_etcd_count_prefix(const struct th_etcd *e, int i, const char *prefix);

/* The oldest key (lowest create revision) under prefix, through member i,
 * without auth: its key, value (decoded), create revision and lease (0:
 * none; create_rev and lease may be NULL).  1 if there is one, 0 if none,
 * -1 on error. */
int th_etcd_first_kv(const struct th_etcd *e, int i, const char *prefix, char *key, size_t klen,
                     char *val, size_t vlen, long long *create_rev, long long *lease);
/* The seconds left of lease (etcd's TimeToLive: whole seconds, rounded
 * down), -1 if it has ended, -2 on error. */
long long th_etcd_lease_ttl(const struct th_etcd *e, int i, long long lease);
/* Delete every key under prefix: the number deleted, or -1. */
long long th_etcd_delete_prefix(const struct th_etcd *e, int i, const char *prefix);

/*
 * Run etcdctl (v3 API) against the cluster's endpoints with args (a
 * NULL-terminated list after the endpoints; deadline 15 s x th_slowdown);
 * its output appended to DIR/etcdctl.log.  Returns its exit status, or -1.
 */
int th_etcdctl(const struct th_etcd *e, const char *const args[]);
/*
 * Switch etcd's auth on: user root with password root_pw (role root), and,
 * when user is not NULL, user/pw with a role granting readwrite on every
 * key; then `auth enable`.  0 or -1.
 */
int th_etcd_enable_auth(struct th_etcd *e, const char *root_pw, const char *user,
                        const char *pw);

#ifdef __cplusplus
}
#endif

#endif /* DMUTEX_TEST_HARNESS_ETCD_H */
