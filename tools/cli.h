/*
 * The dmutex command: shared definitions.
 *
 * `run` goes through the public library like any user would.  The operator
 * views (status, list, reset, and the "held by" line shown while waiting)
 * read and write the Redis keys directly with hiredis, reusing the library's
 * URL parser and authenticated connect (core/admin.h, the tool's one door
 * into the library) so that both agree on every address, password and
 * prefix.
 */
#ifndef DMUTEX_CLI_H
#define DMUTEX_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "core/admin.h"

/* Exit statuses of dmutex itself, listed in dmutex(1).  `run` otherwise
 * exits with COMMAND's status (128 + N when a signal N killed it). */
enum {
	CLI_OK = 0,
	CLI_USAGE = 64,         /* bad option or argument */
	CLI_BUSY = 80,          /* run -n: the lock is held */
	CLI_TIMEDOUT = 81,      /* run -w: not acquired in time */
	CLI_LOST = 82,          /* the hold was lost while COMMAND ran */
	CLI_NOTREC = 83,        /* not recoverable until `dmutex reset` */
	CLI_NOLOCK = 84,        /* status/reset: no such lock */
	CLI_REFUSED = 85,       /* reset: held, and no --force */
	CLI_BADURL = 86,        /* malformed or unsupported URL */
	CLI_BACKEND = 87,       /* backend unreachable, refusing or failing */
	CLI_INTERNAL = 88,      /* out of memory, fork failed... */
	CLI_NOEXEC = 126,       /* COMMAND found but not executable */
	CLI_NOTFOUND = 127      /* COMMAND not found */
};

/* ---- shared helpers (cli.c) ----------------------------------------- */

/* Messages go to stderr prefixed "dmutex: ", like the library's own. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The URL to use: --url, else $DMUTEX_URL, else the library's default. */
const char *cli_url(const char *opt_url);

/* Lock names: 1 to DMUTEX_NAME_MAX bytes.  0, or CLI_USAGE with a message. */
int cli_check_name(const char *name);

/* Parse "1.5" seconds into ms (0 .. 10^9 s).  0 ok, -1 bad. */
int cli_parse_seconds(const char *s, int64_t *ms);

/* ---- direct connections (connect.c) --------------------------------- */

struct cli_conn {
	struct dmutex__admin_url *url;  /* the URL parsed */
	struct dmutex__admin *adm;      /* its masters */
	const char *prefix;             /* of every key: the URL's */
	int cluster;                    /* publish with SPUBLISH (a cluster's waiters SSUBSCRIBE) */
	size_t nnodes;                  /* masters; a cluster's once connected */
	struct dmutex__conn **ctx;      /* one per master; NULL when unreachable;
	                                 * NULL itself until the masters are known */
};

/* Parse the URL and connect to every node.  0; CLI_BADURL; CLI_BACKEND
 * (a node is unreachable or refused us; logged and said); CLI_INTERNAL. */
int cli_conn_open(struct cli_conn *cc, const char *url);
/* Parse only; connect later with cli_conn_connect (for `run`'s display). */
int cli_conn_parse(struct cli_conn *cc, const char *url);
int cli_conn_connect(struct cli_conn *cc, int quiet);
void cli_conn_close(struct cli_conn *cc);
/* A node's name for people (password masked). */
const char *cli_conn_node(const struct cli_conn *cc, size_t i);
/* 1 if node i holds name's keys: every node of a Redlock list, the master
 * serving the name's slot in a cluster. */
int cli_conn_serves(const struct cli_conn *cc, size_t i, const char *name);
/* The connection to the master serving name's keys (a cluster), else the first. */
struct dmutex__conn *cli_conn_of(const struct cli_conn *cc, const char *name);
/* The connection to the node holding the per-lock counters: the first
 * (Redlock: the first URL's), on a cluster the master serving their slot. */
struct dmutex__conn *cli_conn_counters(const struct cli_conn *cc);

/* ---- what Redis says about one lock (inspect.c) ---------------------- */

/* ROBUST_EXPIRED: a lock whose holder recorded it as not robust ended
 * without an unlock (its lease ran out); only a robust lock's next holder
 * is told "owner died" (EOWNERDEAD), so only a robust one shows it. */
enum { ROBUST_CONSISTENT, ROBUST_OWNER_DIED, ROBUST_EXPIRED, ROBUST_NOTREC };

struct cli_lock {
	char *name;
	int exists;                     /* lock key or meta key present */
	int held;                       /* lock key present, for a hold */
	int notrec_mark;                /* the lock key is the not-recoverable mark (layout 3) */
	char host[256];
	long long pid, tid;             /* -1 when unknown */
	long long since_ms;             /* wall clock; -1 unknown */
	long long lease_ms;             /* -1 unknown */
	long long pttl_ms;              /* lease left; -1 none/unknown */
	long long fence;                /* the current hold's token; -1 when free or
	                                 * not assigned yet (none asked for) */
	long long fence_counter;        /* last token handed out; -1 none */
	int acquired_after_death;       /* the current holder took over a dead one's */
	int cached;                     /* held as a lease its process keeps (README "Cached leases") */
	int reserved;                   /* no hold: reserved for a woken waiter (README "Who a release wakes") */
	int robust;                     /* ROBUST_* */
	char state[16];                 /* meta state, "" = clean (see notrec_mark) */
	long long waiters;              /* processes waiting: queued, or (older clients) subscribed */
	char hostid[64];                /* the holder's "boot_id/pidns"; "" unknown */
	int alive;                      /* the holder's pid: 1 alive, 0 gone, -1 cannot know
	                                 * (another machine or pid namespace) */
	int robust_recorded;            /* meta "robust": 1, 0, -1 not recorded */
	long long cond_waiters;         /* registered on condition variable NAME; -1 unknown */
	/* The first CLI_COND_SHOWN of them, as they registered. */
#define CLI_COND_SHOWN 16
	struct cli_cond_waiter {
		char host[64];
		long long pid, tid, since_ms;
		int alive;              /* as for the holder */
	} cond[CLI_COND_SHOWN];
	size_t ncond;
	char error[256];                /* non-empty: this record could not be read */
};

/* Pipelined: queue the reads for one name, then collect them in order
 * (list, top: condition variable waiters counted; cli_inspect also names
 * them).
 * read returns 0, or CLI_BACKEND (connection failed: message said) —
 * a Redis error about one key (foreign data) goes into l->error instead. */
int cli_inspect_append(struct dmutex__conn *c, const char *prefix, const char *name);
int cli_inspect_read(struct dmutex__conn *c, const char *prefix, const char *name,
		struct cli_lock *l);
int cli_inspect(struct dmutex__conn *c, const char *prefix, const char *name, struct cli_lock *l);
void cli_lock_free(struct cli_lock *l);

/* ---- what Redis says about one read-write lock (rwinspect.c) --------- */

/* Its keys are not a mutex's: a name may be both, as two locks.  Redis
 * keeps who writes (rw_acquire.lua's 'wo', from clients that record it),
 * not who reads: a share is one per process, its threads unnamed. */
struct cli_rwlock {
	char *name;
	int exists;                     /* any of its keys */
	int writing;                    /* a writer whose lease has not ended */
	long long write_left_ms;        /* that lease's rest; -1 none */
	long long fence;                /* the writer's token (while writing), else the
	                                 * last writer's; -1 none ever */
	long long readers;              /* read shares (one per process) not ended */
	long long read_left_ms;         /* the longest share's lease left; -1 none */
	long long writers_waiting;      /* writers' intents not ended */
	/* What a reset removes: ended ones too, until a lock call sweeps them. */
	int has_writer;
	long long shares_kept, intents_kept;
	/* The writer, while writing, as it recorded itself; writer_host ""
	 * when it did not (an older client) or the record is another's. */
	char writer_host[256];
	char writer_hostid[64];         /* "" unknown */
	long long writer_pid, writer_tid, writer_since_ms;      /* -1 unknown */
	int writer_alive;               /* as cli_lock's alive */
	char error[256];                /* non-empty: its keys could not be read */
};
/* Set what cli_rw_read leaves unknown (-1) in a zeroed record. */
void cli_rwlock_unknown(struct cli_rwlock *rw);

/* The server's clock (its shares' and writer's leases are kept in it):
 * 0, CLI_BACKEND (said). */
int cli_rw_time(struct dmutex__conn *c, long long *now_ms);
/* Pipelined like cli_inspect_append/read, with the time read before;
 * read returns 0 (foreign data in rw->error), CLI_BACKEND or CLI_INTERNAL. */
int cli_rw_append(struct dmutex__conn *c, const char *prefix, const char *name, long long now_ms);
int cli_rw_read(struct dmutex__conn *c, const char *prefix, const char *name, long long now_ms,
		struct cli_rwlock *rw);
int cli_rw_inspect(struct dmutex__conn *c, const char *prefix, const char *name,
		struct cli_rwlock *rw);
void cli_rwlock_free(struct cli_rwlock *rw);

/* ---- a store read through the library: etcd (view.c) ----------------- */
/* url's backend if it is one: 0 and *v; -1 when it is Redis (read it with
 * the calls above); CLI_BADURL, CLI_BACKEND, CLI_INTERNAL (said). */
int cli_view_open(const char *url, struct dmutex__admin_view **v);
/* name's state into *l (cli_lock_free it): 0 (a failure in l->error), or
 * CLI_INTERNAL. */
int cli_view_lock(struct dmutex__admin_view *v, const char *name, struct cli_lock *l);
/* The same for name's read-write lock (cli_rwlock_free it), shown and
 * reset by the code that shows and resets Redis's. */
int cli_view_rwlock(struct dmutex__admin_view *v, const char *name, struct cli_rwlock *rw);
/* A read-write lock as the backend reports it (a view, or what a reset
 * removed) into *rw: 0 or CLI_INTERNAL (said). */
int cli_rw_of_view(struct cli_rwlock *rw, const char *name, const struct dmutex__rwlock_view *rv);

/* ---- output (show.c, json.c) ---------------------------------------- */

long long cli_wall_ms(void);
/* "12 s", "3 min 12 s", "2 h 5 min", "3 d 4 h"; "1.5 s" under 10 s */
void cli_duration(char *buf, size_t len, long long ms);
/* Bytes from the server for a terminal (every place the tools print
 * them): control bytes (below 0x20, 0x7f, and C1 U+0080..U+009F) and bytes
 * that are not UTF-8 as \xNN, so that no key, value or error text can
 * move the cursor, retitle the window or ring the bell.  Cut (on a whole
 * character or escape) to fit len.  Returns buf.  CLI_TEXT_MAX(n): room
 * for n bytes escaped. */
#define CLI_TEXT_MAX(n) (4 * (n) + 1)
char *cli_text(char *buf, size_t len, const char *s);
/* A lock name, escaped as cli_text (so up to 4 x 512 bytes). */
#define CLI_NAME_TEXT (4 * 512 + 5)
void cli_name_text(char buf[CLI_NAME_TEXT], const char *name);
const char *cli_robust_text(int robust);
const char *cli_robust_json(int robust);
/* "host1 pid 4242 tid 4243", or "an unknown holder" */
void cli_holder(char *buf, size_t len, const struct cli_lock *l, int with_tid);
/* 1 alive, 0 gone, -1 cannot know (pid on another machine, boot or pid
 * namespace than ours; hostid as dmutex__hostid writes it). */
int cli_pid_alive(const char *hostid, long long pid);
/* "  since:       <local date> (<how long> ago)", a status line. */
void cli_since(FILE *f, long long since_ms);
/* Whether the holder lives: "alive", "process gone", "" when it cannot be known. */
const char *cli_alive_text(const struct cli_lock *l);

/* A JSON string: quotes, escapes, invalid UTF-8 as U+FFFD. */
void cli_json_str(FILE *f, const char *s);
/* One lock as a JSON object (node: NULL to leave it out). */
void cli_json_lock(FILE *f, const struct cli_lock *l, const char *node);

/* A read-write lock (rwshow.c): status's text, and a JSON object as
 * cli_json_lock's, "kind": "rwlock". */
void cli_rw_print_text(FILE *f, const struct cli_rwlock *rw, const char *node);
void cli_json_rwlock(FILE *f, const struct cli_rwlock *rw, const char *node);
/* "written", "read by 2 processes", "free". */
void cli_rw_state(char *buf, size_t len, const struct cli_rwlock *rw);
/* Reset it on one master (rwreset.c), as reset.c a mutex: *what 0
 * nothing to do, 1 something removed (said on stdout), -1 no such
 * read-write lock.  0, CLI_REFUSED (held, no force: said), CLI_BACKEND. */
int cli_rw_reset_node(struct dmutex__conn *c, int cluster, const char *prefix, const char *name,
		int force, const char *node, int *what);
/* Refused: say who holds it (node: NULL, or the master's name). */
void cli_rw_say_refused(const struct cli_rwlock *rw, const char *node);
/* Over a store read through the library (etcd): reset name's read-write
 * lock in one step, said as over Redis; the caller refused it before if
 * held and no force.  *what 0 nothing to do, 1 something removed.  0,
 * CLI_REFUSED (taken meanwhile: said), CLI_BACKEND, CLI_INTERNAL. */
int cli_rw_reset_view(struct dmutex__admin_view *v, const char *name, int force, int *what);

/* ---- per-lock counters (metread.c, prom.c, httpd.c) ----------------- */

struct cli_metset {
	char *name;                     /* NULL when other */
	int other;                      /* the names past the top, summed */
	uint64_t v[DMUTEX__MET_NFIELDS]; /* core/admin.h */
};
struct cli_metrics {
	struct cli_metset *sets;        /* busiest first; then other, if any */
	size_t n;
};
/* The top names (by acquisitions) and the rest summed.  0, CLI_BACKEND,
 * CLI_INTERNAL (message said). */
int cli_metrics_read(struct dmutex__conn *c, const char *prefix, size_t top,
		struct cli_metrics *out);
void cli_metrics_free(struct cli_metrics *m);
/* Prometheus text format 0.0.4. */
void cli_prom_write(FILE *f, const struct cli_metrics *m);
/* Serve GET /metrics on ADDR:PORT with render()'s text until SIGINT/SIGTERM.
 * render returns 0 or a CLI_ status (then 503).  The exit status. */
int cli_http_serve(const char *addr, int (*render)(FILE *f, void *arg), void *arg);

/* ---- subcommands ---------------------------------------------------- */

/* One file each (run.c, status.c...), called by main (dmutex.c) with the
 * arguments from the command name on and the --url given before it (NULL
 * when none).  The exit status of dmutex. */
int cli_cmd_run(int argc, char **argv, const char *url);
int cli_cmd_status(int argc, char **argv, const char *url);
int cli_cmd_list(int argc, char **argv, const char *url);
int cli_cmd_reset(int argc, char **argv, const char *url);
int cli_cmd_metrics(int argc, char **argv, const char *url);
int cli_cmd_top(int argc, char **argv, const char *url);

/* ---- run's helpers -------------------------------------------------- */

/* spawn.c: remember the descriptors dmutex was started with (COMMAND gets
 * those and no others: not the library's sockets).  Call it before
 * anything opens a descriptor. */
void cli_fd_snapshot(void);
/* Find COMMAND like execvp would: the path to exec (malloc'd), or NULL with
 * *status CLI_NOTFOUND / CLI_NOEXEC / CLI_INTERNAL (message said). */
char *cli_find_command(const char *cmd, int *status);

/* vfork + exec path with argv and envp (a file without #! is run by
 * /bin/sh, as execvp does); between the two only async-signal-safe calls.
 * In the child every signal with a handler gets its default action back,
 * one ignored stays ignored, and SIGPIPE gets `sigpipe` (the disposition
 * dmutex was started with).  Returns the child's pid, or -1 with *status
 * (message said: the fork failed, or the exec did and the child is
 * reaped). */
pid_t cli_spawn(const char *path, char *const argv[], char *const envp[],
		const struct sigaction *sigpipe, int *status);

/* waitshow.c: on a terminal, a line saying who holds the lock we wait for,
 * refreshed every second by its own thread. */
struct cli_waitshow;
struct cli_waitshow *cli_waitshow_start(const char *url, const char *name);
void cli_waitshow_stop(struct cli_waitshow *w);
/* One line about the current holder, for messages ("held by ... for 12 s");
 * empty when it cannot be read. */
void cli_describe_holder(const char *url, const char *name, char *buf, size_t len);

#endif
