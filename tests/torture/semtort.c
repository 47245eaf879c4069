/*
 * semtorture: the torture for semaphores and barriers (issue 25,
 * docs/faults.md #27).  The mutex torture's pieces are reused (its records
 * and helpers, common.c; the delaying proxy, dproxy.c; the harness's
 * servers and dropping/blackholing proxy); its nemesis and checker are
 * about leases, fences and a fenced resource, which a semaphore has not.
 *
 * Semaphore: K processes x T threads, half through the core
 * (dsem_timedwait, dsem_trywait, dsem_post) on one semaphore of k permits,
 * half through the shim's sem_* (which asks again while the server is
 * away) on another.  Each records on CLOCK_MONOTONIC when its wait returned
 * and when it called post; between faults the orchestrator parks them and
 * counts the permits.  Barrier: P processes x T threads (n parties) cycle
 * through one barrier, half core dbarrier_wait, half the shim's
 * pthread_barrier_wait; each checks after every wait that all n arrived.
 * The nemesis loses replies, stalls and blackholes the server shorter and
 * longer than retry_window_ms, SIGSTOPs it, restarts it (appendfsync
 * always).  No key deletion: a semaphore has no owner, and one deleted is
 * recreated with its initial value (docs/faults.md, after the table).
 * docs/guide.md "Semaphores and barriers" has the whole design.
 *
 *   semtorture [--deterministic | --seconds S] [--seed X] [--retry-window MS]
 *              [--cmd-timeout MS] [--permits K] [--keep] [--expect-all]
 *   --retry-window 0 leaves retry_window_ms out of the URL (a library
 *   older than the option).  TORTURE_SECONDS, TORTURE_SEED as torture's.
 * One summary line; exits 0 only with zero violations.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dmutex.h"
#include "dproxy.h"
#include "harness.h"
#include "torture.h"

/* The shim's semaphore and barrier calls (shim/include/dmutex_shim_sem.h,
 * shim/include/dmutex_shim.h), declared here: the shim's directory would put its
 * <pthread.h> and <semaphore.h> before the system's.  POSIX returns: the
 * sem calls -1 and errno; the barrier call an errno. */
int dmutex_shim_sem_trywait(dsem_t *s);
int dmutex_shim_sem_timedwait(dsem_t *s, const struct timespec *abstime);
int dmutex_shim_sem_post(dsem_t *s);
int dmutex_shim_barrier_wait(dbarrier_t *b);

/* Two semaphores of k permits, one used through the core, one through the
 * shim: each face's operations told EIO bound only its own semaphore's
 * accounts, so that the many EIO of the core's few tries during a long
 * fault cannot hide a shim retry applied twice (and the reverse). */
static const char *const sem_name[2] = { "semtort.sem.core", "semtort.sem.shim" };
#define MAX_PROCS    8
#define MAX_PARTIES  (MAX_PROCS * TT_MAX_THREADS)
#define MAX_GENS     (1 << 16)
#define UNKNOWN_LINE "whether it was applied is unknown"

/* Records (struct tt_rec, torture.h); kind: 0 core, 1 shim. */
enum { SP_IDLE, SP_WORK, SP_LONGWORK };

enum {
	S_WAIT_INV = 100,       /* value: 0 timed, 1 try */
	S_WAIT,                 /* rc */
	S_POST_INV,
	S_POST,                 /* rc */
};

struct st_shared {
	_Atomic int stop;
	_Atomic int epoch;              /* the barrier's current name */
	_Atomic int broken;             /* epoch + 1 once an arrival got EIO */
	_Atomic uint64_t violations;
	_Atomic uint64_t bar_eio, bar_shim_eio, gens;
	/* The semaphore's threads: ready (client open, semaphore opened),
	 * parked while pause is set (between two operations), and the
	 * operations that returned EIO (their fate unknown). */
	_Atomic int sem_ready, bar_ready, pause, parked;
	_Atomic uint64_t unknown[2];   /* by face: 0 core, 1 shim */
	/* Each semaphore thread's phase (SP_*), for the nemesis to start a
	 * fault while a shim thread is about to post. */
	_Atomic int phase[MAX_PROCS][TT_MAX_THREADS];
	/* Each barrier party's: SP_LONGWORK before it arrives. */
	_Atomic int bphase[MAX_PARTIES];
	/* Per epoch: arrivals announced and waits returned, by party; the
	 * serial returns by generation. */
	_Atomic int64_t arrived[MAX_PARTIES];
	_Atomic int64_t returned[MAX_PARTIES];
	_Atomic uint32_t serial[MAX_GENS];
};

static struct st_shared *
shared_map(const char *dir, int create)
{
	char path[600];
	struct st_shared *s;
	int fd;

	snprintf(path, sizeof path, "%s/shared", dir);
	fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0), 0600);
	if (fd < 0 || (create && ftruncate(fd, sizeof *s) != 0)) {
		perror("semtorture: shared");
		return NULL;
	}
	s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return s == MAP_FAILED ? NULL : s;
}

/* ---- workers ---- */

struct wk {
	const char *dir;
	int id, nthreads, permits, nparties, epoch;
	int fd;
	uint64_t seed;
	dmutex_client_t *client;
	struct st_shared *sh;
	FILE *log;
	pthread_mutex_t log_mu;
};

struct wthr {
	struct wk *w;
	int idx;
};

static void
logger(int level, const char *msg, void *arg)
{
	struct wk *w = arg;

	pthread_mutex_lock(&w->log_mu);
	fprintf(w->log, "%" PRId64 " %d %s\n", tt_now_ns(), level, msg);
	fflush(w->log);
	pthread_mutex_unlock(&w->log_mu);
}

static void
rec(struct wthr *t, int type, int kind, int rc, int64_t value)
{
	struct tt_rec x = { .t = tt_now_ns(), .pid = (int32_t)getpid(), .thr = (uint16_t)t->idx,
		.type = (uint8_t)type, .kind = (uint8_t)kind, .rc = rc, .value = value };

	tt_rec_write(t->w->fd, &x);
}

/* Half the threads through the shim, half through the core. */
static int
is_shim(const struct wk *w, int idx)
{
	return (w->id + idx) % 2;
}

static void *
sem_thread(void *arg)
{
	struct wthr *t = arg;
	struct wk *w = t->w;
	int shim = is_shim(w, t->idx), err;
	uint64_t rng = w->seed ^ ((uint64_t)w->id << 32) ^ (uint64_t)(t->idx + 1) * 0x9e3779b97f4a7c15ULL;
	dsem_t s;

	if ((err = dsem_init(&s, sem_name[shim], (unsigned)w->permits, w->client, 0))) {
		fprintf(stderr, "semtorture worker %d: dsem_init: %s\n", w->id, dmutex_strerror(err));
		return NULL;
	}
	atomic_fetch_add(&w->sh->sem_ready, 1);
	while (!atomic_load(&w->sh->stop)) {
		int try = tt_rand(&rng) % 3 == 0;
		struct timespec at;

		if (atomic_load(&w->sh->pause)) {
			/* The orchestrator counts the permits: no operation
			 * under way, none held. */
			atomic_fetch_add(&w->sh->parked, 1);
			while (atomic_load(&w->sh->pause) && !atomic_load(&w->sh->stop))
				tt_sleep_ms(1);
			atomic_fetch_sub(&w->sh->parked, 1);
			continue;
		}

		clock_gettime(CLOCK_REALTIME, &at);
		at.tv_nsec += 300000000;
		if (at.tv_nsec >= 1000000000) {
			at.tv_sec++;
			at.tv_nsec -= 1000000000;
		}
		rec(t, S_WAIT_INV, shim, 0, try);
		if (shim)
			err = (try ? dmutex_shim_sem_trywait(&s) : dmutex_shim_sem_timedwait(&s, &at)) ? errno : 0;
		else
			err = try ? dsem_trywait(&s) : dsem_timedwait(&s, &at);
		rec(t, S_WAIT, shim, err, try);
		if (err == EIO)
			atomic_fetch_add(&w->sh->unknown[shim], 1);
		if (err) {
			/* Nothing held (or, after EIO, a permit held by
			 * nobody): pace the retries. */
			tt_sleep_ms(1);
			continue;
		}
		/* The work inside: now and then a long one, in which the
		 * nemesis may start a fault so that the post meets it. */
		int lng = tt_rand(&rng) % 5 == 0;
		atomic_store(&w->sh->phase[w->id][t->idx], lng ? SP_LONGWORK : SP_WORK);
		tt_sleep_ms(lng ? tt_uniform(&rng, 20, 60) : tt_uniform(&rng, 0, 3));
		atomic_store(&w->sh->phase[w->id][t->idx], SP_IDLE);
		rec(t, S_POST_INV, shim, 0, 0);
		err = shim ? (dmutex_shim_sem_post(&s) ? errno : 0) : dsem_post(&s);
		rec(t, S_POST, shim, err, 0);
		if (err == EIO)
			atomic_fetch_add(&w->sh->unknown[shim], 1);
	}
	dsem_destroy(&s);
	return NULL;
}

static void
violation(struct st_shared *sh, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("VIOLATION: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	atomic_fetch_add(&sh->violations, 1);
}

/* A party: announce arrival g+1, wait, then every party must have
 * announced g+1 (none missing: the generation did not pass short), and none
 * more than g+2 (one that went round twice while this one waited once: an
 * arrival counted twice). */
static void *
bar_thread(void *arg)
{
	struct wthr *t = arg;
	struct wk *w = t->w;
	struct st_shared *sh = w->sh;
	int shim = is_shim(w, t->idx), p = w->id * w->nthreads + t->idx, err;
	char name[64];
	dbarrier_t b;

	snprintf(name, sizeof name, "semtort.bar.%d", w->epoch);
	if ((err = dbarrier_init(&b, name, (unsigned)w->nparties, w->client))) {
		fprintf(stderr, "semtorture party %d: dbarrier_init: %s\n", p, dmutex_strerror(err));
		atomic_store(&sh->broken, w->epoch + 1);
		return NULL;
	}
	atomic_fetch_add(&sh->bar_ready, 1);
	uint64_t rng = w->seed ^ ((uint64_t)(p + 1) << 40) ^ (uint64_t)w->epoch;
	for (int64_t g = 0; !atomic_load(&sh->stop) && atomic_load(&sh->broken) != w->epoch + 1; g++) {
		/* Now and then a while before arriving, in which the nemesis
		 * may start a fault that the arrival then meets. */
		if (tt_rand(&rng) % 5 == 0) {
			atomic_store(&sh->bphase[p], SP_LONGWORK);
			tt_sleep_ms(tt_uniform(&rng, 20, 60));
			atomic_store(&sh->bphase[p], SP_IDLE);
		}
		atomic_store(&sh->arrived[p], g + 1);
		err = shim ? dmutex_shim_barrier_wait(&b) : dbarrier_wait(&b);
		if (err == EIO) {
			/* Whether it counted is unknown: this party ends, and
			 * the barrier with it (the orchestrator starts another). */
			atomic_fetch_add(&sh->bar_eio, 1);
			atomic_fetch_add(&sh->bar_shim_eio, (uint64_t)shim);
			atomic_store(&sh->broken, w->epoch + 1);
			break;
		}
		if (err && err != DBARRIER_SERIAL_THREAD) {
			violation(sh, "barrier party %d: wait returned %d (%s)", p, err, dmutex_strerror(err));
			break;
		}
		for (int q = 0; q < w->nparties; q++) {
			int64_t a = atomic_load(&sh->arrived[q]);
			if (a < g + 1)
				violation(sh, "barrier epoch %d generation %" PRId64 ": party %d passed it, party %d "
						"had arrived only %" PRId64 " times: fewer than %d arrivals",
						w->epoch, g, p, q, a, w->nparties);
			else if (a > g + 2)
				violation(sh, "barrier epoch %d generation %" PRId64 ": party %d passed it, party %d "
						"already arrived for generation %" PRId64 ": an arrival counted twice",
						w->epoch, g, p, q, a - 1);
		}
		if (err == DBARRIER_SERIAL_THREAD && g < MAX_GENS)
			atomic_fetch_add(&sh->serial[g], 1);
		atomic_store(&sh->returned[p], g + 1);
		atomic_fetch_add(&sh->gens, 1);
	}
	/* Each party has its own handle: nobody else waits on it now. */
	if ((err = dbarrier_destroy(&b)))
		violation(sh, "barrier party %d: destroy returned %d (%s)", p, err, dmutex_strerror(err));
	return NULL;
}

/* argv: (sem|bar)worker DIR ID THREADS URL PERMITS|PARTIES SEED EPOCH */
static int
worker_main(int argc, char **argv)
{
	static struct wk W;
	struct wthr t[TT_MAX_THREADS];
	pthread_t th[TT_MAX_THREADS];
	char path[600];
	int bar = !strcmp(argv[1], "barworker"), rc;

	if (argc != 9)
		return 2;
	W.dir = argv[2];
	W.id = atoi(argv[3]);
	W.nthreads = atoi(argv[4]);
	W.permits = W.nparties = atoi(argv[6]);
	W.seed = strtoull(argv[7], NULL, 10);
	W.epoch = atoi(argv[8]);
	if (!(W.sh = shared_map(W.dir, 0)))
		return 2;
	pthread_mutex_init(&W.log_mu, NULL);
	snprintf(path, sizeof path, "%s/%s%02d-%d.log", W.dir, bar ? "b" : "s", W.id, (int)getpid());
	if (!(W.log = fopen(path, "we")))
		return 2;
	dmutex_set_logger(logger, &W);
	snprintf(path, sizeof path, "%s/%s%02d-%d.hist", W.dir, bar ? "b" : "s", W.id, (int)getpid());
	if ((W.fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)) < 0)
		return 2;
	/* Started between faults, but a fault may begin before it connects:
	 * asked again until it can, for a bounded time. */
	int64_t until = tt_now_ns() + 30LL * 1000000000;
	while ((rc = dmutex_client_open(&W.client, argv[5])) == EIO && tt_now_ns() < until &&
			!atomic_load(&W.sh->stop))
		tt_sleep_ms(50);
	if (rc) {
		fprintf(stderr, "semtorture worker %d: client open: %s\n", W.id, dmutex_strerror(rc));
		return 2;
	}
	for (int i = 0; i < W.nthreads; i++) {
		t[i] = (struct wthr){ .w = &W, .idx = i };
		if (pthread_create(&th[i], NULL, bar ? bar_thread : sem_thread, &t[i]))
			return 2;
	}
	for (int i = 0; i < W.nthreads; i++)
		pthread_join(th[i], NULL);
	dmutex_client_close(W.client);
	dmutex_set_logger(NULL, NULL);
	fclose(W.log);
	close(W.fd);
	return 0;
}

/* ---- the run ---- */

struct run {
	char dir[512], exe[4096], url[1024];
	struct th_redis srv;
	struct th_proxy *px;
	struct tt_dproxy *dp;
	struct st_shared *sh;
	int procs, threads, permits, bprocs, bthreads, keep;
	unsigned cmd_ms, window_ms;
	double seconds;
	int deterministic;
	uint64_t seed, rng;
	pid_t sem_pid[MAX_PROCS], bar_pid[MAX_PROCS];
	uint64_t faults[TT_NFAULTS];
	int epochs;
	uint64_t serial_bad;
	/* The semaphore's accounts (reconcile) */
	dmutex_client_t *direct;        /* past the proxies */
	dsem_t dsem[2];
	uint64_t unknown_seen[2], reconciles, restored, account_bad;
};

/* Poll *v until it reaches n, or timeout_ms pass: 0 or -1. */
static int
wait_count(_Atomic int *v, int n, int timeout_ms)
{
	int64_t until = tt_now_ns() + (int64_t)timeout_ms * 1000000;

	while (atomic_load(v) < n)
		if (tt_now_ns() >= until)
			return -1;
		else
			tt_sleep_ms(1);
	return 0;
}

/*
 * A semaphore's accounts, with every operation finished and no permit
 * held (the threads parked, or stopped): the value is k, less one for each
 * permit whose fate is unknown since the last accounts -- a wait that
 * returned EIO may have taken one, a post that returned EIO may not have
 * returned one.  More than k: a post applied twice; less than k - unknown:
 * a wait applied twice (or a permit lost with no EIO to say so).  Then the
 * permits the unknown operations took are posted back (restore), so that
 * the run goes on with k rather than draining to none.
 */
static int
reconcile(struct run *r, int restore, int *value)
{
	for (int f = 0; f < 2; f++) {
		uint64_t unknown = atomic_load(&r->sh->unknown[f]) - r->unknown_seen[f];
		int v, err;

		if ((err = dsem_getvalue(&r->dsem[f], &v))) {
			fprintf(stderr, "semtorture: cannot read %s's value: %s\n", sem_name[f], dmutex_strerror(err));
			return -1;
		}
		value[f] = v;
		if (v > r->permits || (int64_t)v < (int64_t)r->permits - (int64_t)unknown) {
			fprintf(stderr, "VIOLATION: %s's value is %d with no operation under way, not within "
					"[%" PRId64 ", %d] (%d permits, %" PRIu64 " operations since the last count "
					"whose fate is unknown)\n", sem_name[f], v, (int64_t)r->permits - (int64_t)unknown,
					r->permits, r->permits, unknown);
			r->account_bad++;
		}
		r->unknown_seen[f] += unknown;
		for (; restore && v < r->permits; v++, r->restored++)
			if ((err = dsem_post(&r->dsem[f]))) {
				fprintf(stderr, "semtorture: restoring a permit: %s\n", dmutex_strerror(err));
				return -1;
			}
	}
	r->reconciles++;
	return 0;
}

/* Between faults: park the semaphore's threads, count, restore. */
static int
sem_account(struct run *r)
{
	int n = r->procs * r->threads, v[2], rc;

	atomic_store(&r->sh->pause, 1);
	/* A shim operation ends at the latest a window after the fault. */
	if (wait_count(&r->sh->parked, n, 30000 + 4 * (int)r->window_ms)) {
		fprintf(stderr, "VIOLATION: the semaphore's threads did not finish their operations (%d of %d parked)\n",
				atomic_load(&r->sh->parked), n);
		r->account_bad++;
		atomic_store(&r->sh->pause, 0);
		return 0;
	}
	rc = reconcile(r, 1, v);
	atomic_store(&r->sh->pause, 0);
	return rc;
}

static pid_t
spawn(struct run *r, const char *mode, int id, int threads, int param, int epoch)
{
	char a_id[16], a_thr[16], a_param[16], a_seed[32], a_epoch[16];
	char *argv[] = { r->exe, (char *)mode, r->dir, a_id, a_thr, r->url, a_param, a_seed, a_epoch, NULL };
	pid_t pid;

	snprintf(a_id, sizeof a_id, "%d", id);
	snprintf(a_thr, sizeof a_thr, "%d", threads);
	snprintf(a_param, sizeof a_param, "%d", param);
	snprintf(a_seed, sizeof a_seed, "%" PRIu64, r->seed);
	snprintf(a_epoch, sizeof a_epoch, "%d", epoch);
	if ((pid = tt_spawn("semtorture", r->exe, argv)) < 0)
		return -1;
	return pid;
}

/* The barrier's parties: started afresh on a new name after an arrival's
 * EIO (the others wait for it for ever).  Generations every party passed
 * must each have had exactly one serial waiter. */
static void
bar_stop(struct run *r)
{
	int64_t done = INT64_MAX;
	int n = r->bprocs * r->bthreads;

	for (int i = 0; i < r->bprocs; i++)
		if (r->bar_pid[i] > 0) {
			kill(r->bar_pid[i], SIGKILL);
			waitpid(r->bar_pid[i], NULL, 0);
			r->bar_pid[i] = 0;
		}
	for (int p = 0; p < n; p++)
		if (atomic_load(&r->sh->returned[p]) < done)
			done = atomic_load(&r->sh->returned[p]);
	for (int64_t g = 0; g < done && g < MAX_GENS; g++)
		if (atomic_load(&r->sh->serial[g]) != 1) {
			fprintf(stderr, "VIOLATION: barrier epoch %d generation %" PRId64 ": %u serial waiters, not 1\n",
					atomic_load(&r->sh->epoch), g, atomic_load(&r->sh->serial[g]));
			r->serial_bad++;
		}
}

static int
bar_start(struct run *r)
{
	int epoch = r->epochs++;

	for (int p = 0; p < MAX_PARTIES; p++) {
		atomic_store(&r->sh->arrived[p], 0);
		atomic_store(&r->sh->returned[p], 0);
	}
	for (int g = 0; g < MAX_GENS; g++)
		atomic_store(&r->sh->serial[g], 0);
	atomic_store(&r->sh->epoch, epoch);
	atomic_store(&r->sh->bar_ready, 0);
	for (int i = 0; i < r->bprocs; i++)
		if ((r->bar_pid[i] = spawn(r, "barworker", i, r->bthreads, r->bprocs * r->bthreads, epoch)) < 0)
			return -1;
	/* Fork and connect outside the faults' windows. */
	if (wait_count(&r->sh->bar_ready, r->bprocs * r->bthreads, 30000)) {
		fprintf(stderr, "semtorture: the barrier's parties did not start\n");
		return -1;
	}
	return 0;
}

/* With every fault healed, two generations pass within 10 s: polled. */
static int
bar_live(struct run *r)
{
	int n = r->bprocs * r->bthreads;
	uint64_t g0 = atomic_load(&r->sh->gens);
	int64_t until = tt_now_ns() + 10000LL * 1000000;

	while (atomic_load(&r->sh->gens) < g0 + 2 * (uint64_t)n) {
		if (tt_now_ns() >= until) {
			fprintf(stderr, "VIOLATION: barrier epoch %d: no two generations passed in 10 s with no fault on; "
					"arrivals / returns by party:", atomic_load(&r->sh->epoch));
			for (int p = 0; p < n; p++)
				fprintf(stderr, " %" PRId64 "/%" PRId64, atomic_load(&r->sh->arrived[p]),
						atomic_load(&r->sh->returned[p]));
			fputc('\n', stderr);
			return -1;
		}
		tt_sleep_ms(1);
	}
	return 0;
}

/* Between faults: a barrier an arrival's EIO broke starts again. */
static int
bar_mend(struct run *r)
{
	if (atomic_load(&r->sh->broken) != atomic_load(&r->sh->epoch) + 1)
		return 0;
	bar_stop(r);
	return bar_start(r);
}

/* Poll, for at most 3 s, until a shim thread is in a long work before its
 * post (bar 0) or a shim barrier party before its arrival (bar 1), due
 * within a few tens of ms: a fault started now meets that operation, the
 * first try of which may be applied and its reply lost (issue 25 defect
 * 3, docs/faults.md #27). */
static void
await_shim_op(struct run *r, int bar)
{
	int64_t until = tt_now_ns() + 3000LL * 1000000;

	while (tt_now_ns() < until) {
		if (!bar)
			for (int w = 0; w < r->procs; w++)
				for (int t = 0; t < r->threads; t++)
					if ((w + t) % 2 && atomic_load(&r->sh->phase[w][t]) == SP_LONGWORK)
						return;
		if (bar)
			for (int w = 0; w < r->bprocs; w++)
				for (int t = 0; t < r->bthreads; t++)
					if ((w + t) % 2 && atomic_load(&r->sh->bphase[w * r->bthreads + t]) == SP_LONGWORK)
						return;
		tt_sleep_ms(0.5);
	}
}

static int
fault(struct run *r, int f, double window_ms, double param)
{
	int rc = 0;

	/* The semaphore's post and the barrier's arrival in turn. */
	if (f == F_PROXY_DROP || f == F_REDIS_STOP || f == F_PROXY_BLACKHOLE || f == F_OUTAGE_LONG)
		await_shim_op(r, r->faults[f] % 2 == 0);

	r->faults[f]++;
	switch (f) {
	case F_REDIS_STOP:
		if (th_redis_pause(&r->srv))
			return -1;
		tt_sleep_ms(window_ms);
		rc = th_redis_resume(&r->srv);
		break;
	case F_CLIENT_PAUSE: {
		redisReply *rep = th_redis_cmd(&r->srv, "CLIENT PAUSE %lld", (long long)window_ms);
		rc = !rep || rep->type == REDIS_REPLY_ERROR;
		if (rep)
			freeReplyObject(rep);
		tt_sleep_ms(window_ms);
		break;
	}
	case F_REDIS_RESTART:
		rc = th_redis_restart(&r->srv);
		break;
	case F_PROXY_DELAY:
		tt_dproxy_set_delay(r->dp, (int)param);
		tt_sleep_ms(window_ms);
		tt_dproxy_set_delay(r->dp, 0);
		break;
	case F_PROXY_DROP:
	case F_PROXY_BLACKHOLE:
	case F_OUTAGE_LONG:
		th_proxy_set_mode(r->px, f == F_PROXY_DROP ? TH_PROXY_DROP_REPLIES : TH_PROXY_BLACKHOLE);
		tt_sleep_ms(window_ms);
		th_proxy_set_mode(r->px, TH_PROXY_PASS);
		break;
	default:
		return -1;
	}
	if (rc)
		fprintf(stderr, "semtorture: fault %s: the harness failed\n", tt_fault_names[f]);
	return rc ? -1 : 0;
}

/* After a fault: the barrier mended, the semaphore's accounts. */
static int
between(struct run *r)
{
	return bar_mend(r) || sem_account(r) ? -1 : 0;
}

struct step {
	int fault;
	double window, param;   /* ms */
};

static int
nemesis(struct run *r)
{
	const double C = r->cmd_ms, W = r->window_ms ? r->window_ms : 1500;
	/* Past the window and the second the server keeps a result after it:
	 * a retry after this finds nothing remembered. */
	const double OUT = 2 * W + 1500;

	tt_sleep_ms(500);       /* everybody going before the first fault */
	if (r->deterministic) {
		const struct step steps[] = {
			{ F_PROXY_DROP, 3 * C, 0 },             /* lost replies, shorter than W */
			{ F_REDIS_STOP, 2 * C, 0 },
			{ F_CLIENT_PAUSE, 2 * C, 0 },
			{ F_PROXY_DELAY, 4 * C, C / 2 },
			{ F_PROXY_BLACKHOLE, 0.7 * W, 0 },
			{ F_REDIS_RESTART, 0, 0 },
			{ F_PROXY_DROP, 1.6 * W, 0 },           /* longer than W: EIO, unknown */
			{ F_REDIS_STOP, 1.6 * W, 0 },
			{ F_OUTAGE_LONG, OUT, 0 },              /* the server forgets the results */
			{ F_PROXY_DROP, OUT, 0 },
		};
		for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
			if (fault(r, steps[i].fault, steps[i].window, steps[i].param))
				return -1;
			tt_sleep_ms(500);
			if (between(r))
				return -1;
		}
		return 0;
	}
	static const int pool[] = { F_PROXY_DROP, F_REDIS_STOP, F_CLIENT_PAUSE, F_PROXY_DELAY, F_PROXY_BLACKHOLE,
		F_REDIS_RESTART, F_OUTAGE_LONG };
	int64_t until = tt_now_ns() + (int64_t)(r->seconds * 1e9);
	while (tt_now_ns() < until) {
		int f = pool[tt_rand(&r->rng) % (sizeof pool / sizeof pool[0])];
		double window = tt_uniform(&r->rng, C, 2.5 * W), param = 0;

		if (f == F_OUTAGE_LONG)
			window = OUT + tt_uniform(&r->rng, 0, W);
		else if (f == F_CLIENT_PAUSE)
			window = tt_uniform(&r->rng, C, 2 * W);
		else if (f == F_PROXY_DELAY)
			param = tt_uniform(&r->rng, C / 10, 2 * C);
		if (fault(r, f, window, param))
			return -1;
		tt_sleep_ms(tt_uniform(&r->rng, 200, 1500));
		if (between(r))
			return -1;
	}
	return 0;
}

/* ---- the semaphore's checker ---- */

struct ev {
	int64_t t;
	int face;               /* which semaphore: 0 core, 1 shim */
	int d;                  /* +1 a wait returned 0, -1 its post was called */
};

static int
ev_cmp(const void *a, const void *b)
{
	const struct ev *x = a, *y = b;

	if (x->face != y->face)
		return x->face - y->face;
	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return x->d - y->d;     /* a leave before an enter at the same time */
}

struct sem_sum {
	uint64_t holds, waits, wait_eio, post_eio, shim_eio, timeouts, busy, other, unknown_lines, max_inside;
	uint64_t violations;
};

static int
has_suffix(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

static uint64_t
count_lines(const char *path, const char *needle)
{
	char line[2048];
	uint64_t n = 0;
	FILE *f = fopen(path, "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

/*
 * At no time more than k permits held.  A holder holds its permit surely
 * from its wait's return (0) until it calls post: those intervals are
 * counted, and more than k of them at once is a violation.  Before the
 * return, and after the post is called, whether the permit is taken is not
 * known here, so nothing is counted: a post that returned EIO ("unknown")
 * ends its hold when it was called, and a wait that returned EIO begins
 * none -- counting less than was held, never more, so that every violation
 * is one.  Their permits are accounted for at the end (final value).
 */
static void
sem_check(struct run *r, struct sem_sum *s)
{
	DIR *d = opendir(r->dir);
	struct dirent *e;
	struct ev *ev = NULL;
	size_t nev = 0, cap = 0;

	memset(s, 0, sizeof *s);
	while (d && (e = readdir(d))) {
		char path[1200];
		if (e->d_name[0] == 'b' && has_suffix(e->d_name, ".log")) {
			snprintf(path, sizeof path, "%s/%s", r->dir, e->d_name);
			s->unknown_lines += count_lines(path, UNKNOWN_LINE);
		}
		if (e->d_name[0] != 's')
			continue;
		snprintf(path, sizeof path, "%s/%s", r->dir, e->d_name);
		if (has_suffix(e->d_name, ".log")) {
			s->unknown_lines += count_lines(path, UNKNOWN_LINE);
			continue;
		}
		if (!has_suffix(e->d_name, ".hist"))
			continue;
		FILE *f = fopen(path, "re");
		struct tt_rec x;
		while (f && fread(&x, sizeof x, 1, f) == 1) {
			if (nev + 2 > cap && !(ev = realloc(ev, (cap = cap * 2 + 1024) * sizeof *ev)))
				abort();
			switch (x.type) {
			case S_WAIT:
				s->waits++;
				if (x.rc == 0) {
					s->holds++;
					ev[nev++] = (struct ev){ x.t, x.kind, +1 };
				} else if (x.rc == EIO) {
					s->wait_eio++;
					s->shim_eio += x.kind;
				} else if (x.rc == ETIMEDOUT)
					s->timeouts++;
				else if (x.rc == EAGAIN)
					s->busy++;
				else {
					s->other++;
					fprintf(stderr, "VIOLATION: a wait returned %d (%s)\n", x.rc, strerror(x.rc));
					s->violations++;
				}
				break;
			case S_POST_INV:
				ev[nev++] = (struct ev){ x.t, x.kind, -1 };
				break;
			case S_POST:
				if (x.rc == EIO) {
					s->post_eio++;
					s->shim_eio += x.kind;
				} else if (x.rc) {
					fprintf(stderr, "VIOLATION: a post returned %d (%s)\n", x.rc, strerror(x.rc));
					s->violations++;
				}
				break;
			}
		}
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	qsort(ev, nev, sizeof *ev, ev_cmp);
	int64_t inside = 0;
	for (size_t i = 0; i < nev; i++) {
		if (i && ev[i].face != ev[i - 1].face)
			inside = 0;
		inside += ev[i].d;
		if ((uint64_t)(inside > 0 ? inside : 0) > s->max_inside)
			s->max_inside = (uint64_t)inside;
		if (ev[i].d > 0 && inside > r->permits) {
			fprintf(stderr, "VIOLATION: %" PRId64 " holders inside %s (%d permits) at t=%.3f s\n",
					inside, sem_name[ev[i].face], r->permits, (double)ev[i].t / 1e9);
			s->violations++;
		}
	}
	free(ev);
}

static int
setup(struct run *r)
{
	const char *tmp = getenv("TMPDIR");
	char win[64] = "";
	ssize_t len;

	snprintf(r->dir, sizeof r->dir, "%s/semtort-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(r->dir) || (len = readlink("/proc/self/exe", r->exe, sizeof r->exe - 1)) <= 0)
		return -1;
	r->exe[len] = '\0';
	if (!(r->sh = shared_map(r->dir, 1)))
		return -1;
	/* Restarts keep every acknowledged write (docs/faults.md #17). */
	if (th_redis_start(&r->srv, "appendonly yes\nappendfsync always\n") || !(r->px = th_proxy_start(r->srv.port)) ||
	    !(r->dp = tt_dproxy_start(th_proxy_port(r->px))))
		return -1;
	char direct[128];
	snprintf(direct, sizeof direct, "redis://127.0.0.1:%d", r->srv.port);
	if (dmutex_client_open(&r->direct, direct) ||
	    dsem_init(&r->dsem[0], sem_name[0], (unsigned)r->permits, r->direct, 0) ||
	    dsem_init(&r->dsem[1], sem_name[1], (unsigned)r->permits, r->direct, 0))
		return -1;
	if (r->window_ms)
		snprintf(win, sizeof win, "&retry_window_ms=%u", r->window_ms);
	snprintf(r->url, sizeof r->url, "redis://127.0.0.1:%d?command_timeout_ms=%u&connect_timeout_ms=%u%s",
			tt_dproxy_port(r->dp), r->cmd_ms, r->cmd_ms, win);
	return 0;
}

static void
teardown(struct run *r, int keep)
{
	for (int i = 0; i < MAX_PROCS; i++) {
		if (r->sem_pid[i] > 0) {
			kill(r->sem_pid[i], SIGKILL);
			waitpid(r->sem_pid[i], NULL, 0);
		}
		if (r->bar_pid[i] > 0) {
			kill(r->bar_pid[i], SIGKILL);
			waitpid(r->bar_pid[i], NULL, 0);
		}
	}
	if (r->direct) {
		dsem_destroy(&r->dsem[0]);
		dsem_destroy(&r->dsem[1]);
		dmutex_client_close(r->direct);
	}
	if (r->dp)
		tt_dproxy_stop(r->dp);
	if (r->px)
		th_proxy_stop(r->px);
	th_redis_stop(&r->srv);
	if (r->sh)
		munmap(r->sh, sizeof *r->sh);
	if (r->dir[0] && !keep)
		tt_rmtree(r->dir);
	else if (r->dir[0])
		fprintf(stderr, "semtorture: run directory kept: %s\n", r->dir);
}

static void
usage(void)
{
	fprintf(stderr, "usage: semtorture [--deterministic | --seconds S] [--seed X] [--retry-window MS]\n"
			"                  [--cmd-timeout MS] [--permits K] [--keep] [--expect-all]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	static struct run R = { .procs = 3, .threads = 2, .permits = 2, .bprocs = 2, .bthreads = 2,
		.cmd_ms = 250, .window_ms = 1500, .seconds = 20 };
	struct run *r = &R;
	struct sem_sum s;
	int expect_all = 0, extra = 0, value[2] = { -1, -1 };
	const char *env;

	if (argc > 1 && (!strcmp(argv[1], "semworker") || !strcmp(argv[1], "barworker")))
		return worker_main(argc, argv);
	r->seed = ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--deterministic"))
			r->deterministic = 1;
		else if (!strcmp(a, "--keep"))
			r->keep = 1;
		else if (!strcmp(a, "--expect-all"))
			expect_all = 1;
		else if (!v)
			usage();
		else if (i++, !strcmp(a, "--seconds"))
			r->seconds = atof(v);
		else if (!strcmp(a, "--seed"))
			r->seed = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--retry-window"))
			r->window_ms = (unsigned)atoi(v);
		else if (!strcmp(a, "--cmd-timeout"))
			r->cmd_ms = (unsigned)atoi(v);
		else if (!strcmp(a, "--permits"))
			r->permits = atoi(v);
		else
			usage();
	}
	if ((env = getenv("TORTURE_SECONDS")) && *env)
		r->seconds = atof(env);
	if ((env = getenv("TORTURE_SEED")) && *env)
		r->seed = strtoull(env, NULL, 10);
	if (r->permits < 1 || r->cmd_ms < 1)
		usage();
	r->rng = r->seed;
	printf("semtorture: seed %" PRIu64 " (replay the schedule: TORTURE_SEED=%" PRIu64 ")\n", r->seed, r->seed);
	fflush(stdout);
	signal(SIGPIPE, SIG_IGN);

	int64_t t0 = tt_now_ns();
	if (setup(r)) {
		fprintf(stderr, "semtorture: set-up failed\n");
		teardown(r, 1);
		return 2;
	}
	for (int i = 0; i < r->procs; i++)
		if ((r->sem_pid[i] = spawn(r, "semworker", i, r->threads, r->permits, 0)) < 0) {
			teardown(r, 1);
			return 2;
		}
	if (wait_count(&r->sh->sem_ready, r->procs * r->threads, 30000)) {
		fprintf(stderr, "semtorture: the semaphore's workers did not start\n");
		teardown(r, 1);
		return 2;
	}
	if (bar_start(r) || nemesis(r)) {
		fprintf(stderr, "semtorture: the nemesis failed\n");
		teardown(r, 1);
		return 2;
	}
	/* No fault on: the barrier must go round (a lost or doubled arrival
	 * may leave every party waiting for ever instead of passing short). */
	if (bar_live(r))
		extra++;
	/* Every fault healed: the workers finish the operation they are in
	 * (a retry is answered now, or ends with EIO after the window). */
	atomic_store(&r->sh->stop, 1);
	int stuck = 0;
	for (int i = 0; i < r->procs; i++) {
		int st = th_wait_child(r->sem_pid[i], 30000 + 4 * (int)r->window_ms);
		if (st != 0) {
			fprintf(stderr, "VIOLATION: semaphore worker %d (pid %d) %s\n", i, r->sem_pid[i],
					st < 0 ? "did not stop" : "failed");
			extra++;
			stuck |= st < 0;
		}
		if (st >= 0)
			r->sem_pid[i] = 0;
	}
	bar_stop(r);
	sem_check(r, &s);
	/* The last accounts: every worker stopped, every operation ended. */
	if (!stuck && reconcile(r, 0, value))
		extra++;
	/* A shim operation's EIO comes from its retry window, whose end is
	 * logged as "whether it was applied is unknown" (src/core/retry.c); the
	 * core's EIO after its few tries (dmutex.h) is counted only. */
	uint64_t eio_told = s.shim_eio + atomic_load(&r->sh->bar_shim_eio);
	if (s.unknown_lines < eio_told) {
		fprintf(stderr, "VIOLATION: %" PRIu64 " EIO of the shim but only %" PRIu64 " '" UNKNOWN_LINE "' lines\n",
				eio_told, s.unknown_lines);
		extra++;
	}
	uint64_t violations = s.violations + atomic_load(&r->sh->violations) + r->serial_bad + r->account_bad +
		(uint64_t)extra;
	printf("semtorture: seed=%" PRIu64 " %s %.1fs retry_window_ms=%u command_timeout_ms=%u faults[",
			r->seed, r->deterministic ? "deterministic" : "random", (double)(tt_now_ns() - t0) / 1e9,
			r->window_ms, r->cmd_ms);
	for (int f = 0, first = 1; f < TT_NFAULTS; f++)
		if (r->faults[f]) {
			printf("%s%s=%" PRIu64, first ? "" : " ", tt_fault_names[f], r->faults[f]);
			first = 0;
		}
	printf("] sem k=%d workers=%dx%d waits=%" PRIu64 " holds=%" PRIu64 " max_inside=%" PRIu64
			" timeouts=%" PRIu64 " busy=%" PRIu64 " wait_eio=%" PRIu64 " post_eio=%" PRIu64
			 " final=%d,%d accounts=%" PRIu64 " restored=%" PRIu64 " barrier n=%d epochs=%d generations=%" PRIu64 " arrival_eio=%" PRIu64
			" eio_told=%" PRIu64 " unknown_lines=%" PRIu64 " violations=%" PRIu64 "\n",
			r->permits, r->procs, r->threads, s.waits, s.holds, s.max_inside, s.timeouts, s.busy,
			s.wait_eio, s.post_eio, value[0], value[1], r->reconciles, r->restored, r->bprocs * r->bthreads, r->epochs,
			atomic_load(&r->sh->gens) / (uint64_t)(r->bprocs * r->bthreads), atomic_load(&r->sh->bar_eio),
			eio_told, s.unknown_lines, violations);
	fflush(stdout);
	if (expect_all) {
		/* The faults must have done something: holds and generations
		 * through them, and operations told their fate is unknown. */
		if (s.holds < 50 || atomic_load(&r->sh->gens) < 20) {
			fprintf(stderr, "FAILED: %" PRIu64 " holds, %" PRIu64 " arrivals passed: too few\n", s.holds,
					atomic_load(&r->sh->gens));
			violations++;
		}
		if (r->window_ms && !s.wait_eio && !s.post_eio) {
			fprintf(stderr, "FAILED: no semaphore operation outlasted retry_window_ms (no EIO)\n");
			violations++;
		}
	}
	teardown(r, r->keep || violations);
	return violations ? 1 : 0;
}
