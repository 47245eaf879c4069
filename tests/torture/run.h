/* One torture run's processes, servers and proxies: shared by main.c (set
 * up, tear down, summary) and nemesis.c (faults, sampler). */
#ifndef TORTURE_RUN_H
#define TORTURE_RUN_H

#include <pthread.h>

#include "dproxy.h"
#include "harness.h"
#include "torture.h"

struct tt_run {
	struct tt_cfg cfg;
	char dir[512];
	char exe[4096];
	struct th_redis lock[TT_MAX_NODES];     /* appendonly, appendfsync always */
	struct th_redis res;                    /* the protected resource: never faulted */
	struct th_proxy *px[TT_MAX_NODES];      /* drop / blackhole */
	struct tt_dproxy *dp[TT_MAX_NODES];     /* delay, in front of px */
	char url[4096];                         /* the workers' URL: through the proxies */
	struct tt_shared *sh;
	int fd;                                 /* the nemesis's history */
	pid_t pid[TT_MAX_WORKERS];
	int alive[TT_MAX_WORKERS];
	int nworkers;
	int out_of_ids;                         /* holder_kill faults turned into holder_stop */
	uint64_t rng;                           /* the schedule's */
	pthread_t sampler;
	_Atomic int sampler_stop;
	int sampler_running;
};

/* A read-write lock's writer and longest share, by the server's clock
 * (nemesis.c): EVAL it with 2 TT_RW_KEYS; {writer's "fms fseq" or "",
 * ms its lease has left, ms the longest share's has left}, -2 for none. */
#define TT_RW_KEYS "dmutex:rw:{" TT_LOCK_NAME "} dmutex:rwr:{" TT_LOCK_NAME "}"
extern const char tt_rw_sample_lua[];

void tt_nrec(struct tt_run *r, int type, int kind, int rc, uint64_t token, int64_t value);
int tt_spawn_worker(struct tt_run *r);
/* Run the schedule: a fixed list (cfg.deterministic) or random faults
 * until cfg.seconds pass.  Returns 0, or -1 if the harness itself failed. */
int tt_nemesis(struct tt_run *r);
int tt_sampler_start(struct tt_run *r);
void tt_sampler_stop(struct tt_run *r);

#endif
