/*
 * The torture harness (docs/faults.md): K worker processes x T threads loop
 * lock -> fenced read-modify-write of a protected resource -> unlock while a
 * nemesis injects faults, every operation is recorded, and a checker reads
 * the records afterwards.
 *
 * Processes: the orchestrator (main.c) starts the lock servers, the
 * resource server and the proxies, execs the workers (worker.c), runs the
 * nemesis (nemesis.c) and the sampler, then the checker (checker.c).  They
 * share one small mmap'd file (struct tt_shared) for phases, heartbeats and
 * the stop flag; everything else goes through the history files.
 *
 * History: each process appends fixed-size records (struct tt_rec) to its
 * own file with one write(2) each (O_APPEND), so a record written before a
 * SIGKILL is never lost or torn.
 */
#ifndef TORTURE_H
#define TORTURE_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#define TT_LOCK_NAME   "torture"
#define TT_MAX_WORKERS 256          /* over a run, replacements included (a kill every ~8 s) */
#define TT_MAX_THREADS 8
#define TT_MAX_NODES   5
#define TT_NEMESIS_THR 0xffff
/* A record of the whole worker process, not of one thread: a read-write
 * lock's onlost (one drwlock_t per process, its threads share one read
 * share; drwlock_rdlock(3) "Leases"). */
#define TT_PROC_THR    0xfffe

/* ---- records ---- */

enum tt_type {
	/* worker, one thread */
	R_LOCK_INV = 1, /* kind: op (OP_*); value: 1 a read share (--rwlock), 0 exclusive */
	R_LOCK,         /* rc; value as R_LOCK_INV's */
	R_CONSISTENT,   /* rc (after EOWNERDEAD) */
	R_RELOCK,       /* recursive: the inner lock, rc */
	R_FENCE,        /* rc, token */
	R_READ,         /* rc (0 ok, -1 failed, -2 refused: a newer token), value */
	R_WRITE_INV,    /* token, value = the value written */
	R_WRITE,        /* rc 1 accepted, 0 rejected, -1 no answer; token; value = resource's max token */
	R_INNER_UNLOCK, /* recursive: rc */
	R_UNLOCK_INV,
	R_UNLOCK,       /* rc */
	R_LOST,         /* onlost ran (renewal thread or the holder); hold = the thread's hold then;
	                 * thr TT_PROC_THR: the process's read-write lock's (every thread's) */
	R_EXIT,         /* the thread stopped cleanly; kind 1: it ends holding the lock (churn),
	                 * which ends its hold; a new thread (record id + TT_MAX_THREADS)
	                 * takes its slot unless the run is stopping */
	/* nemesis (thr == TT_NEMESIS_THR) */
	N_FAULT,        /* kind: fault; rc: node or -1; token: target pid; value: duration/param ms */
	N_HEAL,         /* kind: fault; rc: node; token: target pid, or for a fault that takes
	                 * keys 1 if the lock key went */
	N_SPAWN,        /* token: pid; rc: worker id */
	N_KILLED,       /* token: pid (SIGKILL sent before this record's time) */
	N_STOPPED,      /* token: pid (SIGSTOP'd) */
	N_CONTINUED,    /* token: pid (SIGCONT sent) */
	N_EXITED,       /* token: pid; rc: exit status */
	N_SAMPLE,       /* rc: node; token: fence on the lock key (0 none); value: PTTL; hold: 1 if key;
	                 * kind: 1 if the key is a kept lease (README "Cached leases");
	                 * --rwlock: two a sample, the writer (its fence) and the longest share
	                 * (token 0), value the ms its lease has left, hold 1 while it runs */
	N_END,          /* faults healed and workers told to stop */
	/* worker, one thread: a condition wait inside a hold */
	R_CWAIT_INV,    /* hold: the hold the wait gives up */
	R_CWAIT,        /* rc; hold: the new hold it returns with (rc 0, ETIMEDOUT, EOWNERDEAD,
	                 * ENOLCK), or the same one (EIO: nothing released; kind 1: ETIMEDOUT
	                 * and the fence, token, unchanged: the deadline had passed, nothing
	                 * released) */
};

enum tt_op { OP_LOCK, OP_TIMED, OP_TRY };

struct tt_rec {
	int64_t t;              /* CLOCK_MONOTONIC ns: one clock for every process */
	int32_t pid;
	uint16_t thr;
	uint8_t type;
	uint8_t kind;
	uint32_t hold;          /* the thread's hold number, from 1 */
	int32_t rc;
	uint64_t token;
	int64_t value;
};

/* ---- faults ---- */

enum tt_fault {
	F_HOLDER_STOP,          /* SIGSTOP a holder past its lease, then SIGCONT */
	F_HOLDER_KILL,          /* SIGKILL a holder; a replacement worker starts */
	F_REDIS_STOP,           /* SIGSTOP redis-server past the command timeout */
	F_CLIENT_PAUSE,         /* CLIENT PAUSE */
	F_REDIS_RESTART,        /* SIGKILL + restart (appendfsync always) */
	F_PROXY_DELAY,          /* the proxy delays every byte both ways */
	F_PROXY_DROP,           /* the proxy drops every reply */
	F_PROXY_BLACKHOLE,      /* the proxy swallows everything */
	F_MAJORITY_STOP,        /* Redlock: SIGSTOP a majority of the nodes */
	/* Faults no lease prevents (README "Limits"): the lock's keys vanish
	 * under a holder.  One Redis only: on Redlock they break safety as
	 * docs/faults.md #17 says, which is documented, not tested. */
	F_KEY_DEL,              /* DEL of the lock's keys */
	F_KEY_RESET,            /* `dmutex reset --force` (the CLI of the tree) */
	F_FLUSHALL,             /* FLUSHALL */
	F_EVICT,                /* maxmemory + volatile-random, filled until the lock key is evicted */
	F_RESTART_LOSSY,        /* SIGKILL + restart from an older AOF: the last writes lost */
	F_OUTAGE_LONG,          /* blackhole past lease + idle_ms: every server-side window ends */
	TT_NFAULTS
};

extern const char *const tt_fault_names[TT_NFAULTS];
/* Whether fault f is made on a run over n nodes: majority_stop on Redlock
 * only, the faults that lose keys on one Redis only. */
int tt_fault_applies(int f, int nodes);
/* The faults that take the lock's keys away (key_del .. restart_lossy). */
int tt_fault_loses_keys(int f);

/* ---- shared state ---- */

enum tt_phase { PH_IDLE, PH_LOCKING, PH_HOLDING, PH_WORK, PH_LONGWORK, PH_WRITING, PH_UNLOCKING, PH_DONE };

struct tt_slot {
	_Atomic int pid;
	_Atomic int phase;
	_Atomic uint64_t token;         /* the current hold's fence */
	_Atomic int64_t progress_ns;    /* last record written */
	_Atomic uint64_t ops;
};

struct tt_shared {
	_Atomic int stop;
	/* Worker id + 1 that alone starts new holds (0: all): the nemesis
	 * lets one process keep its lease (README "Cached leases") before it
	 * takes the key away from under it. */
	_Atomic int solo;
	_Atomic int nworkers;
	struct tt_slot slot[TT_MAX_WORKERS][TT_MAX_THREADS];
};

/* ---- configuration of a run ---- */

struct tt_cfg {
	int nodes;              /* 1, or Redlock over N */
	int procs, threads;
	unsigned lease_ms;
	unsigned cmd_ms;        /* command and connect timeout of the workers */
	double seconds;         /* random schedule: how long; deterministic: ignored */
	uint64_t seed;
	int deterministic;
	int keep;               /* keep the run directory even on success */
	int unsafe;             /* worker 0 locks another name: violations expected */
	int fair;               /* every worker's mutex fair (a queue; never kept) */
	int rwlock;             /* a read-write lock per process instead: readers share */
	unsigned faults;        /* bit mask of enabled faults */
	unsigned work_ms;       /* longest simulated work inside the critical section */
	const char *dir;        /* run directory; NULL: a new one under $TMPDIR */
	/* The variant (README "The fast paths"): -1 the library's default. */
	int lease_cache, async_release;
	unsigned idle_ms;       /* 0: the library's default */
	const char *dmutex_bin; /* the dmutex command, for key_reset ($DMUTEX_BIN) */
};

/* ---- helpers (common.c) ---- */

int64_t tt_now_ns(void);
void tt_sleep_ms(double ms);    /* workload pacing or fault windows only */
/* xorshift64*: the whole schedule follows from the seed. */
uint64_t tt_rand(uint64_t *s);
double tt_uniform(uint64_t *s, double lo, double hi);
/* Append one record with one write(2). */
void tt_rec_write(int fd, const struct tt_rec *r);
/* The file of the shared state, mapped; NULL on failure (message printed). */
struct tt_shared *tt_shared_map(const char *dir, int create);
/* Start exe with argv in a child that dies with this process (a failed
 * or killed orchestrator leaves no worker behind); its pid, or -1
 * (message printed, prefixed by who). */
pid_t tt_spawn(const char *who, char *exe, char **argv);
/* Remove a run directory and everything in it. */
void tt_rmtree(const char *dir);

/* ---- parts ---- */

int tt_worker_main(int argc, char **argv);                 /* worker.c */
/* checker.c: read every *.hist in dir; print the violations, fill the
 * summary counters; return the number of violations. */
struct tt_summary {
	uint64_t ops, holds, holds_lost, lost_by_onlost, lost_at_unlock, stale_rejected,
		writes_accepted, lock_eio, lock_timeout, lock_busy, lock_enolck, unlock_eio, ownerdead,
		unknown_writes, samples, kept_samples, threads, ended_holding, cond_waits, killed, late_reports, keys_taken, violations;
	uint64_t faults[TT_NFAULTS];
	int64_t final_value, log_len;
	unsigned lease_ms;
};
/* The run's parameters the checker needs (saved in resource.txt). */
struct tt_checkcfg {
	unsigned lease_ms, cmd_ms;
	int nodes;
	int lease_cache, async_release;   /* as the workers ran: 0 or 1 */
	int rwlock;                       /* read holds may overlap each other */
};
int tt_check(const char *dir, struct tt_summary *s, int64_t final_value,
		const uint64_t *log_tokens, size_t log_len, const struct tt_checkcfg *cc);

#endif
