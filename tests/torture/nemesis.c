/*
 * The nemesis: every fault of docs/faults.md that one machine can make,
 * injected one at a time on a schedule that follows from the seed (or a
 * fixed list), each recorded as N_FAULT ... N_HEAL.  Also the sampler, a
 * thread that reads the lock key on every node (fence, PTTL; a read-write
 * lock's writer and shares) every 20 ms so that the checker can tell a
 * stranded hold.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "run.h"

extern char **environ;

#define SAMPLE_MS 20
#define FIND_MS   3000

void
tt_nrec(struct tt_run *r, int type, int kind, int rc, uint64_t token, int64_t value)
{
	struct tt_rec x = { .t = tt_now_ns(), .pid = (int32_t)getpid(), .thr = TT_NEMESIS_THR,
		.type = (uint8_t)type, .kind = (uint8_t)kind, .rc = rc, .token = token, .value = value };

	tt_rec_write(r->fd, &x);
}

int
tt_spawn_worker(struct tt_run *r)
{
	char a_id[16], a_thr[16], a_port[16], a_lease[16], a_seed[32], a_flags[16], a_work[16];
	int id = r->nworkers;
	pid_t pid;

	if (id >= TT_MAX_WORKERS) {
		fprintf(stderr, "torture: more than %d workers\n", TT_MAX_WORKERS);
		return -1;
	}
	snprintf(a_id, sizeof a_id, "%d", id);
	snprintf(a_thr, sizeof a_thr, "%d", r->cfg.threads);
	snprintf(a_port, sizeof a_port, "%d", r->res.port);
	snprintf(a_lease, sizeof a_lease, "%u", r->cfg.lease_ms);
	snprintf(a_seed, sizeof a_seed, "%" PRIu64, r->cfg.seed);
	/* Every third worker robust, every third recursive (two locks a hold;
	 * a read-write lock's readers only, and never robust). */
	snprintf(a_flags, sizeof a_flags, "%d", (id % 3 == 1 && !r->cfg.rwlock ? 1 : id % 3 == 2 ? 2 : 0) |
			(r->cfg.unsafe && id == 0 ? 4 : 0) | (r->cfg.fair ? 8 : 0) | (r->cfg.rwlock ? 16 : 0));
	snprintf(a_work, sizeof a_work, "%u", r->cfg.work_ms);
	char *argv[] = { r->exe, "worker", r->dir, a_id, a_thr, r->url, a_port, a_lease, a_seed,
		a_flags, a_work, NULL };
	if ((pid = tt_spawn("torture", r->exe, argv)) < 0)
		return -1;
	r->pid[id] = pid;
	r->alive[id] = 1;
	r->nworkers++;
	atomic_store(&r->sh->nworkers, r->nworkers);
	tt_nrec(r, N_SPAWN, 0, id, (uint64_t)pid, 0);
	return 0;
}

/* ---- choosing a holder ---- */

static int
phase_in(int phase, unsigned mask)
{
	return (mask >> phase) & 1;
}

enum { ANY, WRITER, READER };

/* A live worker with a thread in one of the phases of mask (who: WRITER, a
 * thread with a token; READER, a read-write lock's reader, without one),
 * polled until found or FIND_MS pass; -1 if none. */
static int
find_worker_of(struct tt_run *r, unsigned mask, int who, uint64_t *pick)
{
	int64_t until = tt_now_ns() + (int64_t)FIND_MS * 1000000;
	int cand[TT_MAX_WORKERS];

	do {
		int n = 0;
		for (int w = 0; w < r->nworkers; w++) {
			if (!r->alive[w])
				continue;
			for (int t = 0; t < r->cfg.threads; t++)
				if (phase_in(atomic_load(&r->sh->slot[w][t].phase), mask) &&
				    (who == ANY || (who == WRITER) == !!atomic_load(&r->sh->slot[w][t].token))) {
					cand[n++] = w;
					break;
				}
		}
		if (n)
			return cand[tt_rand(pick) % (uint64_t)n];
		tt_sleep_ms(0.5);
	} while (tt_now_ns() < until);
	return -1;
}

static int
find_worker(struct tt_run *r, unsigned mask, uint64_t *pick)
{
	return find_worker_of(r, mask, ANY, pick);
}

static int
any_worker(struct tt_run *r, uint64_t *pick)
{
	int cand[TT_MAX_WORKERS], n = 0;

	for (int w = 0; w < r->nworkers; w++)
		if (r->alive[w])
			cand[n++] = w;
	return n ? cand[tt_rand(pick) % (uint64_t)n] : -1;
}

/* ---- faults ---- */

#define WORK_MASK    ((1u << PH_WORK) | (1u << PH_LONGWORK))
#define HOLDING_MASK ((1u << PH_HOLDING) | WORK_MASK | (1u << PH_WRITING))

static long long
res_maxtok(struct tt_run *r)
{
	long long v = th_redis_int(&r->res, "GET maxtok");
	return v == LLONG_MIN ? 0 : v;
}

/* SIGSTOP a holder for window_ms (past its lease).  force: stop one that is
 * in its critical section before its write, and keep it stopped until a
 * newer token has written, so that its write must be rejected. */
static int
holder_stop(struct tt_run *r, double window_ms, int force, uint64_t *pick)
{
	int w, t_in_work = -1;
	uint64_t tok = 0;
	pid_t pid;

	for (int attempt = 0;; attempt++) {
		w = find_worker_of(r, force ? WORK_MASK : HOLDING_MASK, force ? WRITER : ANY, pick);
		if (w < 0)
			w = any_worker(r, pick);
		if (w < 0)
			return 0;
		pid = r->pid[w];
		if (kill(pid, SIGSTOP) || th_wait_stopped(pid)) {
			fprintf(stderr, "torture: SIGSTOP of worker %d failed\n", pid);
			return -1;
		}
		tt_nrec(r, N_STOPPED, 0, w, (uint64_t)pid, 0);
		for (int t = 0; t < r->cfg.threads; t++)
			if (phase_in(atomic_load(&r->sh->slot[w][t].phase), WORK_MASK) &&
			    (!force || atomic_load(&r->sh->slot[w][t].token))) {
				t_in_work = t;
				tok = atomic_load(&r->sh->slot[w][t].token);
			}
		/* The thread seen working may have finished before the stop
		 * landed (most work lasts a few ms): a forced stop, whose
		 * holder must write late, lets it go and tries again. */
		if (!force || t_in_work >= 0 || attempt >= 50)
			break;
		if (kill(pid, SIGCONT)) {
			fprintf(stderr, "torture: SIGCONT of worker %d failed\n", pid);
			return -1;
		}
		tt_nrec(r, N_CONTINUED, 0, w, (uint64_t)pid, 0);
	}
	tt_nrec(r, N_FAULT, F_HOLDER_STOP, -1, (uint64_t)pid, (int64_t)window_ms);
	int64_t start = tt_now_ns(), min_end = start + (int64_t)(window_ms * 1e6);
	if (force && t_in_work >= 0) {
		/* Until someone else wrote with a newer token (bounded). */
		int64_t until = start + 20LL * r->cfg.lease_ms * 1000000;
		while (tt_now_ns() < until && res_maxtok(r) <= (long long)tok)
			tt_sleep_ms(5);
	}
	if (tt_now_ns() < min_end)
		tt_sleep_ms((double)(min_end - tt_now_ns()) / 1e6);
	if (kill(pid, SIGCONT)) {
		fprintf(stderr, "torture: SIGCONT of worker %d failed\n", pid);
		return -1;
	}
	tt_nrec(r, N_CONTINUED, 0, w, (uint64_t)pid, 0);
	tt_nrec(r, N_HEAL, F_HOLDER_STOP, -1, (uint64_t)pid, t_in_work >= 0);
	return 0;
}

static int
holder_kill(struct tt_run *r, uint64_t *pick)
{
	int w = find_worker(r, HOLDING_MASK, pick), st;
	pid_t pid;

	if (w < 0)
		w = any_worker(r, pick);
	if (w < 0)
		return 0;
	pid = r->pid[w];
	/* The record comes first: the hold ends no later than this. */
	tt_nrec(r, N_KILLED, 0, w, (uint64_t)pid, 0);
	tt_nrec(r, N_FAULT, F_HOLDER_KILL, -1, (uint64_t)pid, 0);
	kill(pid, SIGKILL);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	r->alive[w] = 0;
	tt_nrec(r, N_EXITED, 0, WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st), (uint64_t)pid, 0);
	tt_nrec(r, N_HEAL, F_HOLDER_KILL, -1, (uint64_t)pid, 0);
	return tt_spawn_worker(r);
}

/* ---- faults no lease prevents: the keys vanish ---- */

#define LOCK_KEY "dmutex:lock:{" TT_LOCK_NAME "}"
#define META_KEY "dmutex:meta:{" TT_LOCK_NAME "}"
/* A read-write lock's: its state (writer, fence), its readers' shares,
 * its waiting writers. */
#define RW_ALL_KEYS TT_RW_KEYS " dmutex:rwq:{" TT_LOCK_NAME "}"

/* How many of the lock's keys are there (the meta key aside). */
static long long
lock_keys(struct tt_run *r, struct th_redis *s)
{
	return th_redis_int(s, r->cfg.rwlock ? "EXISTS " RW_ALL_KEYS : "EXISTS " LOCK_KEY);
}

/* A command that answers OK; cmd a literal (it is th_redis_cmd's format). */
#define simple_cmd(s, cmd) check_ok(th_redis_cmd((s), cmd), cmd)

static int
check_ok(redisReply *rep, const char *cmd)
{
	int rc = !rep || rep->type == REDIS_REPLY_ERROR ? -1 : 0;

	if (rc)
		fprintf(stderr, "torture: %s: %s\n", cmd, rep ? rep->str : "no answer");
	if (rep)
		freeReplyObject(rep);
	return rc;
}

/* `dmutex reset --force torture`, the operator's way, on the server
 * itself (not through the proxies).  Exit 84 (no such lock) is fine: the
 * key may have gone between the holder's phase and the command. */
static int
key_reset(struct tt_run *r, int node, long long *effect)
{
	char url[64], log[600];
	char *argv[] = { (char *)r->cfg.dmutex_bin, "--url", url, "reset", "--force", TT_LOCK_NAME, NULL };
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int st, rc;

	if (!r->cfg.dmutex_bin) {
		fprintf(stderr, "torture: key_reset needs DMUTEX_BIN (the dmutex command)\n");
		return -1;
	}
	snprintf(url, sizeof url, "redis://127.0.0.1:%d", r->lock[node].port);
	snprintf(log, sizeof log, "%s/reset.log", r->dir);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0600);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	rc = posix_spawn(&pid, r->cfg.dmutex_bin, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc) {
		fprintf(stderr, "torture: %s: %s\n", r->cfg.dmutex_bin, strerror(rc));
		return -1;
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(st) || (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 84)) {
		fprintf(stderr, "torture: dmutex reset --force exited %d (see %s)\n",
				WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), log);
		return -1;
	}
	*effect = WEXITSTATUS(st) == 0;
	return 0;
}

static long long
info_field(struct th_redis *s, const char *section, const char *field)
{
	redisReply *rep = th_redis_cmd(s, "INFO %s", section);
	long long v = -1;
	const char *p;

	if (rep && rep->type == REDIS_REPLY_STRING &&
	    (p = strstr(rep->str, field)))
		v = strtoll(p + strlen(field), NULL, 10);
	if (rep)
		freeReplyObject(rep);
	return v;
}

/* Eviction: an evicting policy (volatile-random: every key dmutex uses has
 * a TTL while in use, the filler none, so only dmutex's keys go) and a
 * maxmemory just above what the server uses, filled until the lock key is
 * evicted, or for at most window_ms.  Then back to noeviction and no limit,
 * and the filler deleted. */
static int
evict(struct tt_run *r, struct th_redis *s, double window_ms, long long *effect)
{
	static char fill[8192];
	long long used = info_field(s, "memory", "used_memory:"), ev0 = info_field(s, "stats", "evicted_keys:");
	redisContext *c = th_tcp_connect(s->port, 1000);
	int64_t until = tt_now_ns() + (int64_t)(window_ms * 1e6);
	long n = 0;
	int rc = 0;

	if (used < 0 || ev0 < 0 || !c) {
		if (c)
			redisFree(c);
		return -1;
	}
	memset(fill, 'x', sizeof fill - 1);
	if (simple_cmd(s, "CONFIG SET maxmemory-policy volatile-random"))
		rc = -1;
	redisReply *rep = th_redis_cmd(s, "CONFIG SET maxmemory %lld", used + 512 * 1024);
	if (!rep || rep->type == REDIS_REPLY_ERROR)
		rc = -1;
	if (rep)
		freeReplyObject(rep);
	while (!rc && tt_now_ns() < until) {
		rep = redisCommand(c, "SET tt:fill:%ld %s", n, fill);
		if (!rep)
			break;
		int full = rep->type == REDIS_REPLY_ERROR;   /* OOM: nothing volatile left */
		freeReplyObject(rep);
		if (full)
			break;
		n++;
		if (n % 16 == 0 && lock_keys(r, s) == 0 &&
		    info_field(s, "stats", "evicted_keys:") > ev0) {
			*effect = 1;
			break;
		}
	}
	/* Something of dmutex's went (the lock key, or its meta key). */
	*effect = *effect || info_field(s, "stats", "evicted_keys:") > ev0;
	rc |= simple_cmd(s, "CONFIG SET maxmemory 0");
	rc |= simple_cmd(s, "CONFIG SET maxmemory-policy noeviction");
	for (long i = 0; i < n; i++)
		redisAppendCommand(c, "UNLINK tt:fill:%ld", i);
	for (long i = 0; i < n; i++) {
		if (redisGetReply(c, (void **)&rep) != REDIS_OK) {
			rc = -1;
			break;
		}
		freeReplyObject(rep);
	}
	redisFree(c);
	return rc;
}

/* A restart that loses the last writes: the AOF as it was window_ms ago
 * (copied while the server is stopped, so that no write is torn), then
 * SIGKILL and a restart from that copy.  The holds granted in between are
 * gone from Redis; their holders must be told. */
static int
restart_lossy(struct tt_run *r, struct th_redis *s, double window_ms, long long *effect)
{
	char cmd[2048];
	int rc;

	*effect = lock_keys(r, s) > 0;
	if (th_redis_pause(s))
		return -1;
	snprintf(cmd, sizeof cmd, "rm -rf '%s/aof-old' && cp -a '%s/appendonlydir' '%s/aof-old'", s->dir, s->dir,
			s->dir);
	rc = system(cmd) != 0;
	if (th_redis_resume(s) || rc)
		return -1;
	tt_sleep_ms(window_ms);
	if (th_redis_kill(s))
		return -1;
	snprintf(cmd, sizeof cmd, "rm -rf '%s/appendonlydir' && mv '%s/aof-old' '%s/appendonlydir'", s->dir, s->dir,
			s->dir);
	rc = system(cmd) != 0;
	return th_redis_restart(s) || rc ? -1 : 0;
}

static int
node_fault(struct tt_run *r, int f, int node, double window_ms, double param, uint64_t *pick)
{
	struct th_redis *s = &r->lock[node];
	int rc = 0;
	long long effect = 0;

	/* A fault longer than half a lease starts, when it can, while a
	 * holder is in a long critical section: its renewals fail, and it
	 * must be told it lost the lock (docs/faults.md #14).  One that
	 * takes the keys away starts while somebody holds the lock: the
	 * next locker gets it at once, and the holder must be told. */
	if (tt_fault_loses_keys(f) && r->cfg.rwlock)
		/* A read share's readers unlock with no I/O but the last:
		 * only its renewal tells one that works on for longer than
		 * the report window (drwlock_rdlock(3) "Leases"). */
		find_worker_of(r, 1u << PH_LONGWORK, READER, pick);
	else if (tt_fault_loses_keys(f))
		find_worker(r, HOLDING_MASK, pick);
	else if (window_ms > r->cfg.lease_ms / 2.0 && f != F_PROXY_DELAY)
		find_worker(r, 1u << PH_LONGWORK, pick);

	tt_nrec(r, N_FAULT, f, node, 0, (int64_t)window_ms);
	switch (f) {
	case F_REDIS_STOP:
		if (th_redis_pause(s))
			return -1;
		tt_sleep_ms(window_ms);
		rc = th_redis_resume(s);
		break;
	case F_CLIENT_PAUSE: {
		redisReply *rep = th_redis_cmd(s, "CLIENT PAUSE %lld", (long long)window_ms);
		if (!rep || rep->type == REDIS_REPLY_ERROR)
			rc = -1;
		if (rep)
			freeReplyObject(rep);
		tt_sleep_ms(window_ms);
		break;
	}
	case F_REDIS_RESTART:
		rc = th_redis_restart(s);
		break;
	case F_PROXY_DELAY:
		tt_dproxy_set_delay(r->dp[node], (int)param);
		tt_sleep_ms(window_ms);
		tt_dproxy_set_delay(r->dp[node], 0);
		break;
	case F_PROXY_DROP:
	case F_PROXY_BLACKHOLE:
		th_proxy_set_mode(r->px[node], f == F_PROXY_DROP ? TH_PROXY_DROP_REPLIES : TH_PROXY_BLACKHOLE);
		tt_sleep_ms(window_ms);
		th_proxy_set_mode(r->px[node], TH_PROXY_PASS);
		break;
	case F_MAJORITY_STOP:
		for (int i = 0; i <= r->cfg.nodes / 2; i++)
			if (th_redis_pause(&r->lock[i]))
				return -1;
		tt_sleep_ms(window_ms);
		for (int i = 0; i <= r->cfg.nodes / 2; i++)
			rc |= th_redis_resume(&r->lock[i]);
		break;
	case F_KEY_DEL:
		/* param 1: the meta key too (the name's counter: later
		 * tokens come from the server's clock). */
		if (r->cfg.rwlock) {
			/* The state hash holds the fence's counter too. */
			effect = th_redis_int(s, "DEL " RW_ALL_KEYS);
			rc = effect == LLONG_MIN;
			break;
		}
		effect = th_redis_int(s, "DEL " LOCK_KEY);
		rc = effect == LLONG_MIN || (param && th_redis_int(s, "DEL " META_KEY) == LLONG_MIN);
		break;
	case F_KEY_RESET:
		rc = key_reset(r, node, &effect);
		break;
	case F_FLUSHALL:
		effect = lock_keys(r, s);
		rc = simple_cmd(s, "FLUSHALL");
		break;
	case F_EVICT:
		rc = evict(r, s, window_ms, &effect);
		break;
	case F_RESTART_LOSSY:
		rc = restart_lossy(r, s, window_ms, &effect);
		break;
	case F_OUTAGE_LONG:
		th_proxy_set_mode(r->px[node], TH_PROXY_BLACKHOLE);
		tt_sleep_ms(window_ms);
		th_proxy_set_mode(r->px[node], TH_PROXY_PASS);
		break;
	}
	if (rc)
		fprintf(stderr, "torture: fault %s on node %d: the harness failed\n", tt_fault_names[f], node);
	/* token: what a fault that takes keys did (1: the lock key went). */
	tt_nrec(r, N_HEAL, f, node, effect > 0 ? (uint64_t)effect : 0, (int64_t)param);
	return rc;
}

/* Whether node's lock key is a kept lease (flag c, README "Cached leases"). */
static int
key_kept(struct tt_run *r, int node)
{
	redisReply *rep = th_redis_cmd(&r->lock[node], "GET " LOCK_KEY);
	char flags[16];
	int kept = 0;

	if (rep && rep->type == REDIS_REPLY_STRING && sscanf(rep->str, "%*s %*s %*s %*s %15s", flags) == 1)
		kept = strchr(flags, 'c') != NULL;
	if (rep)
		freeReplyObject(rep);
	return kept;
}

/* A fault that takes the keys, made while one process keeps its lease
 * and its threads hold it locally: only that worker starts new holds (the
 * others' waits drain, nobody asks for the lock, the lease is kept) until
 * the key is kept and one of its threads holds it, polled for at most
 * eight leases; then the fault, and everybody runs again and asks Redis,
 * which has no key: the kept lease's holds must be told (rule 2 of README
 * "The fast paths").  Not robust workers (id % 3 == 1): they never cache. */
static int
solo_fault(struct tt_run *r, int f, int node, double window_ms, double param, uint64_t *pick)
{
	int cand[TT_MAX_WORKERS], n = 0, w, rc;

	for (int i = 0; i < r->nworkers; i++)
		if (r->alive[i] && i % 3 != 1)
			cand[n++] = i;
	if (!n)
		return node_fault(r, f, node, window_ms, param, pick);
	w = cand[tt_rand(pick) % (uint64_t)n];
	atomic_store(&r->sh->solo, w + 1);
	int64_t until = tt_now_ns() + 8LL * r->cfg.lease_ms * 1000000;
	while (tt_now_ns() < until) {
		int holding = 0;
		for (int t = 0; t < r->cfg.threads; t++)
			holding |= phase_in(atomic_load(&r->sh->slot[w][t].phase), HOLDING_MASK);
		if (holding && key_kept(r, node))
			break;
		tt_sleep_ms(1);
	}
	rc = node_fault(r, f, node, window_ms, param, pick);
	atomic_store(&r->sh->solo, 0);
	return rc;
}

static int
inject(struct tt_run *r, int f, int node, double window_ms, double param, uint64_t *pick)
{
	/* param 2 and up: the same fault under a kept lease (param - 2),
	 * when the workers may keep one. */
	if (tt_fault_loses_keys(f) && param >= 2) {
		if (r->cfg.lease_cache != 0 && r->cfg.nodes == 1 && !r->cfg.rwlock)
			return solo_fault(r, f, node, window_ms, param - 2, pick);
		param -= 2;
	}
	switch (f) {
	case F_HOLDER_STOP:
		return holder_stop(r, window_ms, param != 0, pick);
	case F_HOLDER_KILL:
		/* Each kill starts a replacement with a new id (its history file
		 * and slots stay for the checker); a long random run that has
		 * used them all stops its holders instead of failing. */
		if (r->nworkers >= TT_MAX_WORKERS) {
			if (!r->out_of_ids++)
				fprintf(stderr, "torture: %d workers started, the most a run keeps: "
						"holder_kill is holder_stop from now on\n", TT_MAX_WORKERS);
			return holder_stop(r, window_ms, 0, pick);
		}
		return holder_kill(r, pick);
	default:
		return node_fault(r, f, node, window_ms, param, pick);
	}
}

/* ---- schedules ---- */

struct step {
	int fault;
	int node;
	double window;          /* in leases (L) or command timeouts (C), see below */
	double param;
};

int
tt_nemesis(struct tt_run *r)
{
	const double L = r->cfg.lease_ms, C = r->cfg.cmd_ms;
	/* outage_long: longer than the lease and idle_ms (the meta key's
	 * time after the lease: the longest window the server keeps). */
	const double OUT = L + (r->cfg.idle_ms ? r->cfg.idle_ms : L) + 2 * C;
	uint64_t pick = r->cfg.seed ^ 0x5bd1e995ULL;
	int n = r->cfg.nodes;

	/* Let every worker get going before the first fault. */
	tt_sleep_ms(L);
	if (r->cfg.deterministic) {
		/* Each fault once, short ones (below the lease: holds survive)
		 * and long ones (past it: holds are lost and must be told). */
		const struct step steps[] = {
			{ F_HOLDER_STOP, 0, 2 * L, 1 },         /* its write must be rejected */
			{ F_REDIS_STOP, 0 % n, 3 * C, 0 },      /* lost replies, renewal survives */
			{ F_CLIENT_PAUSE, 1 % n, 2.5 * C, 0 },
			{ F_PROXY_DELAY, 2 % n, 2 * L, C / 2 },
			{ F_PROXY_DROP, 0 % n, 3 * C, 0 },
			{ F_HOLDER_KILL, 0, 0, 0 },
			{ F_REDIS_RESTART, 1 % n, 0, 0 },
			{ F_PROXY_BLACKHOLE, 2 % n, 1.6 * L, 0 },
			{ F_REDIS_STOP, 0 % n, 1.6 * L, 0 },    /* past the lease */
			{ F_MAJORITY_STOP, 0, 1.6 * L, 0 },     /* Redlock only */
			{ F_HOLDER_STOP, 0, 2 * L, 0 },
			/* The keys vanish under a holder (one Redis only). */
			{ F_KEY_DEL, 0, 0, 0 },
			{ F_KEY_RESET, 0, 0, 0 },
			{ F_FLUSHALL, 0, 0, 0 },
			{ F_EVICT, 0, 2 * L, 0 },
			{ F_RESTART_LOSSY, 0, 0.5 * L, 0 },
			{ F_KEY_DEL, 0, 0, 1 },                /* the counter too */
			/* The same under a kept lease (param 2 and up). */
			{ F_KEY_DEL, 0, 0, 2 },
			{ F_FLUSHALL, 0, 0, 2 },
			{ F_EVICT, 0, 2 * L, 2 },
			{ F_OUTAGE_LONG, 2 % n, OUT, 0 },
		};
		for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
			if (!tt_fault_applies(steps[i].fault, n))
				continue;
			if (!(r->cfg.faults & (1u << steps[i].fault)))
				continue;
			if (inject(r, steps[i].fault, steps[i].node, steps[i].window, steps[i].param, &pick))
				return -1;
			tt_sleep_ms(L);
		}
		return 0;
	}
	int64_t until = tt_now_ns() + (int64_t)(r->cfg.seconds * 1e9);
	unsigned enabled = 0;
	for (int f = 0; f < TT_NFAULTS; f++)
		if (tt_fault_applies(f, n))
			enabled |= r->cfg.faults & (1u << f);
	while (tt_now_ns() < until) {
		int f, node;
		double window = 0, param = 0;

		if (!enabled) {
			tt_sleep_ms(L);
			continue;
		}
		do
			f = (int)(tt_rand(&r->rng) % TT_NFAULTS);
		while (!(enabled & (1u << f)));
		node = (int)(tt_rand(&r->rng) % (uint64_t)n);
		switch (f) {
		case F_HOLDER_STOP:
			window = tt_uniform(&r->rng, 1.2 * L, 4 * L);
			param = tt_rand(&r->rng) % 2;
			break;
		case F_REDIS_STOP:
		case F_PROXY_DROP:
		case F_PROXY_BLACKHOLE:
			window = tt_uniform(&r->rng, C, 3 * L);
			break;
		case F_CLIENT_PAUSE:
		case F_MAJORITY_STOP:
			window = tt_uniform(&r->rng, C, 2 * L);
			break;
		case F_PROXY_DELAY:
			window = tt_uniform(&r->rng, L, 4 * L);
			param = tt_uniform(&r->rng, C / 10, 2 * C);
			break;
		case F_KEY_DEL:
			param = tt_rand(&r->rng) % 4;   /* the counter too; under a kept lease */
			break;
		case F_KEY_RESET:
		case F_FLUSHALL:
			param = 2 * (tt_rand(&r->rng) % 2);
			break;
		case F_EVICT:
			window = 2 * L;
			param = 2 * (tt_rand(&r->rng) % 2);
			break;
		case F_RESTART_LOSSY:
			window = tt_uniform(&r->rng, 0.1 * L, L);
			param = 2 * (tt_rand(&r->rng) % 2);
			break;
		case F_OUTAGE_LONG:
			window = OUT + tt_uniform(&r->rng, 0, L);
			break;
		}
		if (inject(r, f, node, window, param, &pick))
			return -1;
		tt_sleep_ms(tt_uniform(&r->rng, 0.2 * L, 2 * L));
	}
	return 0;
}

/* ---- sampler ---- */

/* What one node's lock key says: fence (0 when unknown) and whether the
 * lease is kept for its process.  The key is a string ("3 token fence died
 * flags ...", key layout 3: fence "-" until the hold asks for it, flag c a
 * kept lease; "3 notrec" holds nothing), or a fair mutex's hash (fields
 * fence, cache): GET and HMGET are both sent, and the one that fits the
 * key's type answers.  0 if the key holds a hold, -1 if not. */
static int
sample_key(const redisReply *str, const redisReply *hash, uint64_t *fence, int *kept)
{
	char f[32], flags[16];

	*fence = 0;
	*kept = 0;
	if (str->type == REDIS_REPLY_STRING) {
		if (sscanf(str->str, "%*s %*s %31s %*s %15s", f, flags) != 2)
			return -1;      /* the not-recoverable mark */
		*fence = strcmp(f, "-") ? strtoull(f, NULL, 10) : 0;
		*kept = strchr(flags, 'c') != NULL;
		return 0;
	}
	if (hash->type == REDIS_REPLY_ARRAY && hash->elements == 2) {
		if (hash->element[0]->type == REDIS_REPLY_STRING)
			*fence = strtoull(hash->element[0]->str, NULL, 10);
		*kept = hash->element[1]->type == REDIS_REPLY_STRING;
		return 0;
	}
	return -1;
}

/* A read-write lock's writer and shares, by the server's clock: the
 * writer's fence ("fms fseq", "" for none) and the time its lease has
 * left, and the time left to the share that lasts longest (-2: none).
 * Its hash and sets outlive the holds (the fence; expired entries are
 * swept by the next acquire), so PTTL says nothing.  KEYS: the lock's
 * state hash and readers (run.h). */
const char tt_rw_sample_lua[] =
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"local w = redis.call('HGET', KEYS[1], 'w')\n"
	"local wf, wrem = '', -2\n"
	"if w then\n"
	"  wrem = tonumber(redis.call('HGET', KEYS[1], 'wexp') or '0') - now\n"
	"  wf = (redis.call('HGET', KEYS[1], 'fms') or '0') .. ' ' .. (redis.call('HGET', KEYS[1], 'fseq') or '0')\n"
	"end\n"
	"local s = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')\n"
	"local srem = -2\n"
	"if s[1] then srem = tonumber(s[2]) - now end\n"
	"return {wf, wrem, srem}\n";

/* One sample of a read-write lock: a record for its writer (token: its
 * fence, as drwlock_fence gives it) and one for its shares (token 0: a
 * share's token is nobody's fence), each held only while its lease runs
 * (value: the time it has left).  0, or -1 if the node did not answer. */
static int
sample_rw(struct tt_run *r, redisContext *ctx, int node)
{
	struct tt_rec x = { .pid = (int32_t)getpid(), .thr = TT_NEMESIS_THR, .type = N_SAMPLE, .rc = node,
		.t = tt_now_ns() };
	redisReply *rep = redisCommand(ctx, "EVAL %s 2 " TT_RW_KEYS, tt_rw_sample_lua);
	unsigned long long fms = 0, fseq = 0;

	if (!rep)
		return -1;
	if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 && rep->element[0]->type == REDIS_REPLY_STRING &&
	    rep->element[1]->type == REDIS_REPLY_INTEGER && rep->element[2]->type == REDIS_REPLY_INTEGER) {
		x.hold = rep->element[1]->integer > 0;
		x.token = x.hold && sscanf(rep->element[0]->str, "%llu %llu", &fms, &fseq) == 2
			? (uint64_t)fms << 20 | (uint64_t)fseq : 0;
		x.value = rep->element[1]->integer;
		tt_rec_write(r->fd, &x);
		x.hold = rep->element[2]->integer > 0;
		x.token = 0;
		x.value = rep->element[2]->integer;
		tt_rec_write(r->fd, &x);
	}
	freeReplyObject(rep);
	return 0;
}

static void *
sampler_main(void *arg)
{
	struct tt_run *r = arg;
	redisContext *ctx[TT_MAX_NODES] = { 0 };
	const char *key = "dmutex:lock:{" TT_LOCK_NAME "}";

	while (!atomic_load(&r->sampler_stop)) {
		for (int i = 0; i < r->cfg.nodes; i++) {
			redisReply *a = NULL, *b = NULL, *h = NULL;
			struct tt_rec x = { .pid = (int32_t)getpid(), .thr = TT_NEMESIS_THR, .type = N_SAMPLE,
				.rc = i };
			uint64_t fence;
			int kept;

			if (!ctx[i] && !(ctx[i] = th_tcp_connect(r->lock[i].port, 200)))
				continue;
			if (r->cfg.rwlock) {
				if (sample_rw(r, ctx[i], i)) {
					redisFree(ctx[i]);
					ctx[i] = NULL;
				}
				continue;
			}
			x.t = tt_now_ns();
			redisAppendCommand(ctx[i], "GET %s", key);
			redisAppendCommand(ctx[i], "PTTL %s", key);
			redisAppendCommand(ctx[i], "HMGET %s fence cache", key);
			if (redisGetReply(ctx[i], (void **)&a) != REDIS_OK ||
			    redisGetReply(ctx[i], (void **)&b) != REDIS_OK ||
			    redisGetReply(ctx[i], (void **)&h) != REDIS_OK) {
				redisFree(ctx[i]);
				ctx[i] = NULL;
			} else if (b->type == REDIS_REPLY_INTEGER) {
				x.hold = b->integer != -2 && sample_key(a, h, &fence, &kept) == 0;
				x.token = x.hold ? fence : 0;
				x.value = b->integer;
				/* A kept lease (README "Cached leases"): its
				 * process's later holds use it too. */
				x.kind = x.hold && kept;
				tt_rec_write(r->fd, &x);
			}
			if (a)
				freeReplyObject(a);
			if (b)
				freeReplyObject(b);
			if (h)
				freeReplyObject(h);
		}
		tt_sleep_ms(SAMPLE_MS);
	}
	for (int i = 0; i < r->cfg.nodes; i++)
		if (ctx[i])
			redisFree(ctx[i]);
	return NULL;
}

int
tt_sampler_start(struct tt_run *r)
{
	atomic_store(&r->sampler_stop, 0);
	if (pthread_create(&r->sampler, NULL, sampler_main, r))
		return -1;
	r->sampler_running = 1;
	return 0;
}

void
tt_sampler_stop(struct tt_run *r)
{
	if (!r->sampler_running)
		return;
	atomic_store(&r->sampler_stop, 1);
	pthread_join(r->sampler, NULL);
	r->sampler_running = 0;
}
