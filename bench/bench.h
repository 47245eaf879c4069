/*
 * dmutex-bench: dmutex measured against the Redis round trip it cannot go
 * below, in one run against one redis-server.
 *
 * Every scenario adds rows to one result list; report.c prints it as a
 * table (Markdown, so that it pastes into the README as is) or as JSON.
 * Times are nanoseconds on CLOCK_MONOTONIC throughout.
 */
#ifndef DMUTEX_BENCH_H
#define DMUTEX_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "dmutex.h"

/* ---- run configuration ---- */

struct bench_target {
	char url[1024];         /* for dmutex_client_open */
	char host[256];         /* for hiredis: TCP host, or "" for unix */
	int port;
	char path[512];         /* unix socket, or "" */
	char user[128], pass[256];
	int db;
};

struct bench_opts {
	int quick;
	int json;
	int diag;               /* --diag: the rows that only say where time goes */
	unsigned scenarios;     /* bit s set: run scenario s (1..7, 10..14) */
	const char *peers_dir;  /* run the peers from there, or NULL */
	const char *cmdline;
};

struct bench {
	struct bench_opts opt;
	struct bench_target tgt;
	char run_id[32];        /* lock names start with it: runs do not collide */
	/* the floor, measured first in the run; the ratios divide by these */
	double ping_ns;         /* median PING round trip */
	double ping_same_ns;    /* ... client and server pinned to one CPU (0: not measured) */
	double ping_cross_ns;   /* ... pinned to two different CPUs */
	int server_pid;         /* our own redis-server, or 0 */
	double cycle_ns;        /* median hand-made SET NX PX + EVALSHA delete */
	double cycle4_per_s;    /* hand-made cycles per second with 4 threads */
	/* the machine, for the report */
	int nproc;
	char cpu[128], kernel[200], redis_version[32], started[32], loadavg[32];
};

/* ---- time and samples ---- */

int64_t bench_now_ns(void);
/* Sleep for the given time: used only where the passage of time is what is
 * measured (renewal), never to wait for something to happen. */
void bench_sleep_ns(int64_t ns);

struct samples {
	int64_t *v;
	size_t n, cap;
};

int samples_init(struct samples *s, size_t cap);
void samples_add(struct samples *s, int64_t v);   /* past cap: dropped */
/* Percentile (0..100) by nearest rank; sorts in place.  NAN when empty. */
double samples_pct(struct samples *s, double pct);
void samples_free(struct samples *s);
/* Lock + unlock of m, timed in `batches` batches of `batch` pairs (one
 * pair alone is too short to time: mostly the clock): the mean of each
 * batch into s.  0, or the first error. */
int samples_lock_pairs(struct samples *s, dmutex_t *m, int batches, int batch);

/* ---- redis helpers (hiredis, outside the library) ---- */

/* A connection to the target, authenticated and on its db; NULL + message. */
redisContext *bench_connect(const struct bench_target *t);
/* One command; exits the program on an I/O error (a benchmark that lost
 * its server has nothing left to say). */
redisReply *bench_cmd(redisContext *c, const char *fmt, ...);
/* The hand-made cycle: SET k token NX PX, then compare-and-delete by
 * EVALSHA, on a connection of its own. */
struct hand {
	redisContext *c;
	char sha[48];
	char key[96];
};
int hand_init(struct hand *h, const struct bench *b, const char *what);
int hand_cycle(struct hand *h);                 /* 0, or -1: it did not lock and unlock */
void hand_fini(struct hand *h);
/* Median of n PING round trips on c, now. */
double bench_ping_median(redisContext *c, int n);
/* A 32-hex-digit random token, as a correct lock needs for every hold. */
void bench_token(char out[33]);

/* Sum of INFO commandstats: every command's calls except INFO itself. */
struct cmdstats {
	long long total;        /* every cmdstat_* but info */
	long long client;       /* what a client sends: evalsha, eval, subscribe... */
	long long usec_client;  /* server time in those, scripts' inner calls included */
	long long scripts;      /* evalsha + eval */
	long long usec_evalsha; /* server time in evalsha alone */
	long long subscribe;    /* subscribe */
};
int bench_cmdstats(redisContext *c, struct cmdstats *out);

/* The server's CPU so far (INFO cpu, user + system), ns; -1 unknown. */
int64_t bench_server_cpu_ns(redisContext *c);

/* CPU time of the whole process and of every thread but the calling one. */
int64_t bench_process_cpu_ns(void);
int64_t bench_other_threads_cpu_ns(void);

/* ---- results ---- */

enum { MET_NA = -1, MET_NO = 0, MET_YES = 1 };

#define ROW_METRICS 24

struct metric {
	char key[40];
	double v;
	char unit[8];           /* "ns", "/s", "%", "x", "" */
};

struct row {
	int scenario;
	char label[96];
	double median_ns, p99_ns;       /* NAN: not a latency row */
	double ratio;                   /* NAN: none */
	char ratio_to[24];
	struct metric m[ROW_METRICS];
	int nm;
	char target[192];
	int met;
	char note[400];
};

struct row *row_new(int scenario, const char *label);
void row_metric(struct row *r, const char *key, double v, const char *unit);
void row_target(struct row *r, int met, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void row_note(struct row *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The value of a row's metric by its key; NAN when the row has none. */
double row_metric_of(const struct row *r, const char *key);
size_t rows_count(void);
struct row *rows_at(size_t i);
/* One line of the summary of issue 28's targets, printed after the table:
 * which target, the figures it was judged on, and whether it was met.
 * The rows keep their own verdicts; this is the list to read first. */
void target_line(const char *target, int met, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Peer results, for the side-by-side table. */
struct peer_handoff {
	int procs;
	double acq_per_s, median_ns, p99_ns, min_share, max_share;
};
struct peer {
	char name[96];
	int ok;
	char why[200];          /* when !ok */
	double unc_median_ns, unc_p99_ns;
	struct peer_handoff h[3];
	int nh;
};

void report_table(const struct bench *b);
void report_json(const struct bench *b, const struct peer *peers, size_t npeers);
void report_peers(const struct bench *b, const struct peer *peers, size_t npeers);

/* ---- scenarios ---- */

int bench_floor(struct bench *b);               /* 1 */
int bench_uncontended(struct bench *b);         /* 2 */
int bench_relock(struct bench *b);              /* 3 */
int bench_handoff(struct bench *b);             /* 4 */
int bench_handoff_one(struct bench *b, int procs);
/* Issue 28 target 4 on the library's row that bench_handoff_one added
 * first (scenario 4 and --peers; not scenario 11, which relabels it). */
void bench_handoff_judge(struct row *lib, int procs);
int bench_threads(struct bench *b);             /* 5 */
int bench_renewal(struct bench *b);             /* 6 */
int bench_independent(struct bench *b);         /* 7 */
int bench_fair(struct bench *b);                /* 10 */
int bench_cache(struct bench *b);               /* 11 */
int bench_fresh(struct bench *b);               /* 12 */
int bench_cond(struct bench *b);                /* 13 */
int bench_etcd(struct bench *b);                /* 14: built with -Detcd only */
int bench_pool(struct bench *b);                /* 15 */
/* Scenarios 2 and 4 for dmutex and for each peer, each item measured for
 * all of them back to back, so that they see the same machine. */
size_t bench_peers(struct bench *b, struct peer *out, size_t max);

/* The process counts scenario 4 runs with. */
#define HANDOFF_SETS 3
extern const int bench_handoff_procs[HANDOFF_SETS];

#endif
