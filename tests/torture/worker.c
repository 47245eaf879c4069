/*
 * A torture worker: one process, one dmutex client, T threads.  Each thread
 * loops lock -> fence -> read the protected value -> "work" -> write value+1
 * fenced by its token -> unlock, and records every step (torture.h).
 *
 * argv: worker DIR ID THREADS URL RESOURCE_PORT LEASE_MS SEED FLAGS WORK_MS
 * FLAGS: 1 robust mutexes, 2 recursive (every hold locks twice), 4 unsafe:
 * lock another name (the checker's self-test: it must see violations),
 * 8 fair (every worker's, a name's users must agree), 16 a read-write lock:
 * one drwlock_t for the process, as a program shares one pthread_rwlock_t
 * between its threads; half the rounds write as above, half read (with 2,
 * recursively) and only work, sharing the process's read share.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "dmutex.h"
#include "torture.h"

#define FL_ROBUST    1
#define FL_RECURSIVE 2
#define FL_UNSAFE    4
#define FL_FAIR      8
#define FL_RWLOCK    16

/* The protected resource, fenced for reads and writes alike: a read
 * raises the resource's token to the reader's, and a read or a write with
 * a token below it is refused.  Fencing only the write would let a holder
 * whose lease ran out while it worked write a value computed from a read
 * that a newer holder had read too: both writes accepted, in token order,
 * one update lost -- the lock behaving as documented, the resource not
 * protecting itself.  The write logs what it accepted. */
/* Tokens are compared as decimal strings: they pass 2^53, where Lua's
 * numbers (doubles) would make tokens a few apart equal and let a stale
 * one through.  lt(a, b): a < b. */
#define TOKEN_LT "local function lt(a, b) if #a ~= #b then return #a < #b end return a < b end\n"
static const char read_lua[] =
	TOKEN_LT
	"local max = redis.call('GET', KEYS[2]) or '0'\n"
	"local tok = ARGV[1]\n"
	"if lt(tok, max) then return {0, max} end\n"
	"if lt(max, tok) then redis.call('SET', KEYS[2], tok) end\n"
	"return {1, redis.call('GET', KEYS[1]) or '0'}\n";
static const char write_lua[] =
	TOKEN_LT
	"local max = redis.call('GET', KEYS[2]) or '0'\n"
	"local tok = ARGV[1]\n"
	"if lt(tok, max) then return {0, max} end\n"
	"redis.call('SET', KEYS[2], tok)\n"
	"redis.call('SET', KEYS[1], ARGV[2])\n"
	"redis.call('RPUSH', KEYS[3], tok)\n"
	"return {1, tok}\n";

struct worker {
	const char *dir;
	int id, nthreads, flags, res_port;
	unsigned lease_ms, work_ms;
	uint64_t seed;
	int fd;
	dmutex_client_t *client;
	drwlock_t rw;           /* FL_RWLOCK: every thread's */
	struct tt_shared *sh;
	FILE *log;
	pthread_mutex_t log_mu;
};

struct thr {
	struct worker *w;
	int idx;
	dmutex_t m;
	dcond_t cv;             /* one name for every worker: signals cross processes */
	redisContext *res;
	_Atomic uint32_t hold;
	/* The last hold granted, and the thread (record id) it was granted
	 * to, (thr << 32) | hold: the only one an onlost can be about (an
	 * asynchronous release's not-ours answer arrives after the unlock
	 * returned, when hold already counts the next request, or after its
	 * thread ended and another took the slot). */
	_Atomic uint64_t granted;
	/* The running thread's record id: idx + TT_MAX_THREADS * generation.
	 * A thread may end (churn, below) and a new one take the slot, its
	 * mutex and hold count; the checker sees it as a new thread. */
	uint16_t thr_id;
	int gen;
	_Atomic int ended;      /* 1: ended, its successor to start; 2: ended by stop */
	uint64_t rng;
	struct tt_slot *slot;
	int failed;
};

static struct worker W;

static void
rec_hold_as(struct thr *t, uint16_t thr_id, uint32_t hold, int type, int kind, int rc, uint64_t token, int64_t value)
{
	struct tt_rec r = {
		.t = tt_now_ns(), .pid = (int32_t)getpid(), .thr = thr_id,
		.type = (uint8_t)type, .kind = (uint8_t)kind, .hold = hold,
		.rc = rc, .token = token, .value = value,
	};

	tt_rec_write(t->w->fd, &r);
	atomic_store(&t->slot->progress_ns, r.t);
	atomic_fetch_add(&t->slot->ops, 1);
}

static void
rec(struct thr *t, int type, int kind, int rc, uint64_t token, int64_t value)
{
	rec_hold_as(t, t->thr_id, atomic_load(&t->hold), type, kind, rc, token, value);
}

static void
on_lost(const char *name, void *arg)
{
	struct thr *t = arg;

	(void)name;
	uint64_t g = atomic_load(&t->granted);

	rec_hold_as(t, (uint16_t)(g >> 32), (uint32_t)g, R_LOST, 0, 0, 0, 0);
}

/* The read-write lock's onlost: one handler for the process's lock, whose
 * read share its readers hold together (drwlock_rdlock(3) "Leases"): it
 * tells every thread of the process (thr TT_PROC_THR). */
static void
on_lost_rw(const char *name, void *arg)
{
	struct worker *w = arg;
	struct tt_rec r = { .t = tt_now_ns(), .pid = (int32_t)getpid(), .thr = TT_PROC_THR, .type = R_LOST };

	(void)name;
	tt_rec_write(w->fd, &r);
}

static void
logger(int level, const char *msg, void *arg)
{
	struct worker *w = arg;

	pthread_mutex_lock(&w->log_mu);
	fprintf(w->log, "%" PRId64 " %d %s\n", tt_now_ns(), level, msg);
	fflush(w->log);
	pthread_mutex_unlock(&w->log_mu);
}

static int
res_connect(struct thr *t)
{
	struct timeval tv = { 5, 0 };

	if (t->res)
		redisFree(t->res);
	t->res = redisConnectWithTimeout("127.0.0.1", t->w->res_port, tv);
	if (!t->res || t->res->err || redisSetTimeout(t->res, tv) != REDIS_OK) {
		if (t->res)
			redisFree(t->res);
		t->res = NULL;
		return -1;
	}
	return 0;
}

/* Fenced read: 0 and *v, -2 refused (a newer token read or wrote), -1 no
 * answer. */
static int
res_read(struct thr *t, uint64_t token, int64_t *v)
{
	redisReply *r;
	int rc = -1;

	if (!t->res && res_connect(t))
		return -1;
	r = redisCommand(t->res, "EVAL %s 2 value maxtok %" PRIu64, read_lua, token);
	if (!r) {
		res_connect(t);
		return -1;
	}
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
			r->element[0]->type == REDIS_REPLY_INTEGER &&
			r->element[1]->type == REDIS_REPLY_STRING) {
		rc = r->element[0]->integer ? 0 : -2;
		*v = strtoll(r->element[1]->str, NULL, 10);
	} else {
		fprintf(stderr, "torture worker: resource answered %s\n",
				r->type == REDIS_REPLY_ERROR ? r->str : "an unexpected shape");
	}
	freeReplyObject(r);
	return rc;
}

/* 1 accepted, 0 rejected (*max: the resource's token), -1 no answer. */
static int
res_write(struct thr *t, uint64_t token, int64_t value, uint64_t *max)
{
	redisReply *r;
	int rc = -1;

	if (!t->res && res_connect(t))
		return -1;
	r = redisCommand(t->res, "EVAL %s 3 value maxtok log %" PRIu64 " %" PRId64,
			write_lua, token, value);
	if (!r) {
		res_connect(t);
		return -1;
	}
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
			r->element[0]->type == REDIS_REPLY_INTEGER &&
			r->element[1]->type == REDIS_REPLY_STRING) {
		rc = (int)r->element[0]->integer;
		*max = strtoull(r->element[1]->str, NULL, 10);
	} else {
		fprintf(stderr, "torture worker: resource answered %s\n",
				r->type == REDIS_REPLY_ERROR ? r->str : "an unexpected shape");
	}
	freeReplyObject(r);
	return rc;
}

/* A timed lock's deadline: two leases from now, on CLOCK_MONOTONIC. */
static struct timespec
timed_deadline(const struct thr *t)
{
	struct timespec dl;

	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += (2 * t->w->lease_ms) / 1000;
	dl.tv_nsec += (long)((2 * t->w->lease_ms) % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	return dl;
}

/* rd: a read share of the process's read-write lock (FL_RWLOCK); else its
 * write lock, or the thread's mutex. */
static int
do_lock(struct thr *t, int op, int rd)
{
	struct timespec dl = op == OP_TIMED ? timed_deadline(t) : (struct timespec){ 0 };
	drwlock_t *rw = &t->w->rw;

	if (t->w->flags & FL_RWLOCK)
		switch (op) {
		case OP_TRY:
			return rd ? drwlock_tryrdlock(rw) : drwlock_trywrlock(rw);
		case OP_TIMED:
			return rd ? drwlock_clockrdlock(rw, CLOCK_MONOTONIC, &dl)
				: drwlock_clockwrlock(rw, CLOCK_MONOTONIC, &dl);
		default:
			return rd ? drwlock_rdlock(rw) : drwlock_wrlock(rw);
		}
	switch (op) {
	case OP_TRY:
		return dmutex_trylock(&t->m);
	case OP_TIMED:
		return dmutex_clocklock(&t->m, CLOCK_MONOTONIC, &dl);
	default:
		return dmutex_lock(&t->m);
	}
}

static int
do_unlock(struct thr *t)
{
	return t->w->flags & FL_RWLOCK ? drwlock_unlock(&t->w->rw) : dmutex_unlock(&t->m);
}

static int
do_fence(struct thr *t, uint64_t *token)
{
	return t->w->flags & FL_RWLOCK ? drwlock_fence(&t->w->rw, token) : dmutex_fence(&t->m, token);
}

/* The critical section's work: mostly short, sometimes long enough for the
 * nemesis to catch a holder in it, and one in a hundred longer than the
 * lease (renewed while it works, lost if a fault stops the renewals).  A
 * reader's long work is longer still: past a lease and the checker's
 * report window after its share is lost, so that only the share's renewal
 * can tell it in time (its unlock may do no I/O). */
static void
work(struct thr *t, int rd)
{
	struct worker *w = t->w;
	int dice = (int)(tt_rand(&t->rng) % 100);
	double lo = rd ? 1.5 : 0.5, hi = rd ? 3.0 : 2.0;

	atomic_store(&t->slot->phase, dice ? PH_WORK : PH_LONGWORK);
	tt_sleep_ms(dice == 0 ? tt_uniform(&t->rng, lo * w->lease_ms, hi * w->lease_ms)
			: tt_uniform(&t->rng, 0, dice < 10 ? (double)w->work_ms : w->work_ms / 5.0));
}

/* A condition wait inside the hold, up to the work time: it gives the
 * mutex up and returns holding it again, on a new hold (the checker's
 * overlap rules hold it to that).  Returns 1 if the mutex is not held
 * (ENOTRECOVERABLE), the round over. */
static int
cond_wait(struct thr *t, uint64_t token)
{
	struct timespec dl;
	double ms = tt_uniform(&t->rng, 0, t->w->work_ms + 1.0);
	uint64_t again = 0;
	int rc, same = 0;

	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_nsec += (long)(ms * 1e6);
	dl.tv_sec += dl.tv_nsec / 1000000000L;
	dl.tv_nsec %= 1000000000L;
	atomic_store(&t->slot->phase, PH_LOCKING);
	rec(t, R_CWAIT_INV, 0, 0, 0, 0);
	rc = dcond_clockwait(&t->cv, &t->m, CLOCK_MONOTONIC, &dl);
	/* A deadline already past may time out without giving the mutex up:
	 * the same hold, its token unchanged (kind 1). */
	if (rc == ETIMEDOUT && !dmutex_fence(&t->m, &again) && again == token)
		same = 1;
	if (!same && rc != EIO && rc != ENOTRECOVERABLE && rc != EPERM && rc != EINVAL) {
		atomic_fetch_add(&t->hold, 1);
		atomic_store(&t->granted, (uint64_t)t->thr_id << 32 | atomic_load(&t->hold));
	}
	rec(t, R_CWAIT, same, rc, again, 0);
	if (rc == EOWNERDEAD) {
		int rc2 = dmutex_consistent(&t->m);
		rec(t, R_CONSISTENT, 0, rc2, 0, 0);
	}
	atomic_store(&t->slot->phase, PH_HOLDING);
	if (rc == ENOTRECOVERABLE) {
		atomic_store(&t->slot->phase, PH_IDLE);
		return 1;
	}
	return 0;
}

/* One hold, recorded step by step.  Returns 1 if the thread is to end
 * now (churn): one round in CHURN ends its thread, half of them holding the
 * lock (the hold ends with the thread, docs/faults.md #21), half right
 * after the unlock returned (an asynchronous release's answer pending). */
#define CHURN 40
static int
one_round(struct thr *t)
{
	struct worker *w = t->w;
	int op, rc, relocked = 0, rw = !!(w->flags & FL_RWLOCK);
	/* Half the rounds of a read-write lock read. */
	int rd = rw && tt_rand(&t->rng) % 2;
	uint64_t token = 0, max = 0;
	int64_t v = 0;

	atomic_fetch_add(&t->hold, 1);
	op = (int)(tt_rand(&t->rng) % 4);
	op = op == 3 ? OP_TRY : op == 0 ? OP_LOCK : OP_TIMED;
	atomic_store(&t->slot->phase, PH_LOCKING);
	/* A reader has no token: the nemesis's forced stop looks for a
	 * writer's (holder_stop). */
	atomic_store(&t->slot->token, 0);
	rec(t, R_LOCK_INV, op, 0, 0, rd);
	rc = do_lock(t, op, rd);
	if (rc == 0 || rc == EOWNERDEAD)
		atomic_store(&t->granted, (uint64_t)t->thr_id << 32 | atomic_load(&t->hold));
	rec(t, R_LOCK, op, rc, 0, rd);
	if (rc == EOWNERDEAD) {
		int rc2 = dmutex_consistent(&t->m);
		rec(t, R_CONSISTENT, 0, rc2, 0, 0);
	} else if (rc) {
		atomic_store(&t->slot->phase, PH_IDLE);
		/* A refused trylock would otherwise spin on Redis: pace it. */
		if (rc == EBUSY)
			tt_sleep_ms(tt_uniform(&t->rng, 0.2, 2));
		return 0;
	}
	/* A read-write lock's writer never recurses (EDEADLK); its readers do. */
	if ((w->flags & FL_RECURSIVE) && (!rw || rd)) {
		rc = rw ? drwlock_rdlock(&w->rw) : dmutex_lock(&t->m);
		rec(t, R_RELOCK, 0, rc, 0, 0);
		relocked = rc == 0;
	}
	atomic_store(&t->slot->phase, PH_HOLDING);
	if (rd) {
		/* A reader only works: its overlaps with writers are what the
		 * checker looks at (readers have no token, drwlock_fence(3)). */
		rc = 1;
		work(t, 1);
	} else {
		rc = do_fence(t, &token);
		rec(t, R_FENCE, 0, rc, rc ? 0 : token, 0);
	}
	/* A condition wait after the fence (the hold it gives up has its
	 * token, which orders it against the others), then the new hold's. */
	if (!rc && !rw && tt_rand(&t->rng) % 8 == 0) {
		if (cond_wait(t, token))
			return 0;       /* not recoverable: the mutex is not held */
		rc = dmutex_fence(&t->m, &token);
		rec(t, R_FENCE, 0, rc, rc ? 0 : token, 0);
	}
	if (!rc) {
		atomic_store(&t->slot->token, token);
		rc = res_read(t, token, &v);
		rec(t, R_READ, 0, rc, token, v);
		if (!rc) {
			work(t, 0);
			atomic_store(&t->slot->phase, PH_WRITING);
			rec(t, R_WRITE_INV, 0, 0, token, v + 1);
			rc = res_write(t, token, v + 1, &max);
			rec(t, R_WRITE, 0, rc, token, (int64_t)max);
		}
	}
	/* Record ids stay below TT_NEMESIS_THR: the last generation stays. */
	int churn = tt_rand(&t->rng) % CHURN == 0 && (t->gen + 2) * TT_MAX_THREADS < TT_NEMESIS_THR
		? 1 + (int)(tt_rand(&t->rng) % 2) : 0;
	if (churn == 1) {
		/* Ends holding: R_EXIT kind 1 ends the hold for the checker. */
		atomic_store(&t->slot->phase, PH_IDLE);
		return 1;
	}
	if (relocked) {
		rc = do_unlock(t);
		rec(t, R_INNER_UNLOCK, 0, rc, 0, 0);
	}
	atomic_store(&t->slot->phase, PH_UNLOCKING);
	rec(t, R_UNLOCK_INV, 0, 0, 0, 0);
	rc = do_unlock(t);
	rec(t, R_UNLOCK, 0, rc, 0, 0);
	atomic_store(&t->slot->phase, PH_IDLE);
	/* Wake a waiter now and then (the mutex need not be held). */
	if (!rw && tt_rand(&t->rng) % 4 == 0)
		dcond_signal(&t->cv);
	return churn;
}

static pthread_mutex_t churn_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t churn_cv = PTHREAD_COND_INITIALIZER;

static void *
thread_main(void *p)
{
	struct thr *t = p;
	int end = 0, holding = 0;

	while (!end && !atomic_load(&t->w->sh->stop)) {
		int solo = atomic_load(&t->w->sh->solo);
		if (solo && solo != t->w->id + 1) {
			tt_sleep_ms(1);         /* pacing: another process runs alone */
			continue;
		}
		end = one_round(t);
		holding = end == 1;
	}
	if (!end)
		atomic_store(&t->slot->phase, PH_DONE);
	/* kind 1: it ends holding the lock; the hold ends here. */
	rec(t, R_EXIT, holding, 0, 0, 0);
	pthread_mutex_lock(&churn_mu);
	atomic_store(&t->ended, end ? 1 : 2);
	pthread_cond_signal(&churn_cv);
	pthread_mutex_unlock(&churn_mu);
	return NULL;
}

/* FL_RWLOCK: the process's one read-write lock, on the run's lease. */
static int
init_rwlock(struct worker *w)
{
	dmutex_attr_t a;
	int rc;

	if ((rc = dmutex_attr_init(&a)))
		return rc;
	if (!(rc = dmutex_attr_setclient(&a, w->client)) && !(rc = dmutex_attr_setlease(&a, w->lease_ms)) &&
	    !(rc = dmutex_attr_setonlost(&a, on_lost_rw, w)))
		rc = drwlock_init(&w->rw, w->flags & FL_UNSAFE ? TT_LOCK_NAME "-unsafe" : TT_LOCK_NAME, &a);
	dmutex_attr_destroy(&a);
	return rc;
}

static int
init_mutex(struct thr *t)
{
	dmutex_attr_t a;
	/* Odd slots run on half the lease (at least 100 ms): one process's
	 * mutexes of one name with two lease lengths, and a kept lease is
	 * for one of them only (README "The fast paths" rule 3).  The
	 * checker's windows use the run's lease, the longer. */
	unsigned lease = t->idx % 2 && t->w->lease_ms >= 200 ? t->w->lease_ms / 2 : t->w->lease_ms;
	int rc;

	if ((rc = dmutex_attr_init(&a)))
		return rc;
	if (!(rc = dmutex_attr_setclient(&a, t->w->client)) &&
	    !(rc = dmutex_attr_settype(&a, t->w->flags & FL_RECURSIVE ? DMUTEX_RECURSIVE
			: DMUTEX_ERRORCHECK)) &&
	    !(rc = dmutex_attr_setrobust(&a, t->w->flags & FL_ROBUST ? DMUTEX_ROBUST
			: DMUTEX_STALLED)) &&
	    !(rc = dmutex_attr_setlease(&a, lease)) &&
	    !(rc = dmutex_attr_setfair(&a, !!(t->w->flags & FL_FAIR))) &&
	    !(rc = dmutex_attr_setonlost(&a, on_lost, t)))
		rc = dmutex_init(&t->m, t->w->flags & FL_UNSAFE ? TT_LOCK_NAME "-unsafe" : TT_LOCK_NAME, &a);
	dmutex_attr_destroy(&a);
	if (!rc) {
		dcond_attr_t ca;
		if (!(rc = dcond_attr_init(&ca)) && !(rc = dcond_attr_setclient(&ca, t->w->client)))
			rc = dcond_init(&t->cv, TT_LOCK_NAME "-cv", &ca);
		dcond_attr_destroy(&ca);
	}
	return rc;
}

int
tt_worker_main(int argc, char **argv)
{
	char path[600];
	struct thr thr[TT_MAX_THREADS];
	pthread_t tid[TT_MAX_THREADS];
	int rc, status = 0;

	if (argc != 11) {
		fprintf(stderr, "usage: torture worker DIR ID THREADS URL RESOURCE_PORT LEASE_MS SEED FLAGS WORK_MS\n");
		return 2;
	}
	W.dir = argv[2];
	W.id = atoi(argv[3]);
	W.nthreads = atoi(argv[4]);
	W.res_port = atoi(argv[6]);
	W.lease_ms = (unsigned)strtoul(argv[7], NULL, 10);
	W.seed = strtoull(argv[8], NULL, 10);
	W.flags = atoi(argv[9]);
	W.work_ms = (unsigned)strtoul(argv[10], NULL, 10);
	if (W.id < 0 || W.id >= TT_MAX_WORKERS || W.nthreads < 1 || W.nthreads > TT_MAX_THREADS)
		return 2;
	pthread_mutex_init(&W.log_mu, NULL);
	snprintf(path, sizeof path, "%s/w%02d-%d.log", W.dir, W.id, (int)getpid());
	if (!(W.log = fopen(path, "we")))
		return 2;
	dmutex_set_logger(logger, &W);
	snprintf(path, sizeof path, "%s/w%02d-%d.hist", W.dir, W.id, (int)getpid());
	W.fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (W.fd < 0 || !(W.sh = tt_shared_map(W.dir, 0)))
		return 2;
	/* connect_timeout_ms is the run's short command timeout (100 ms): a
	 * first connection through two proxies under TSan on a busy machine
	 * can take longer, and opening is not under test: a few tries. */
	rc = EIO;
	for (int tries = 0; rc == EIO && tries < 20; tries++)
		rc = dmutex_client_open(&W.client, argv[5]);
	if (rc) {
		fprintf(stderr, "torture worker %d: client open: %s\n", W.id, dmutex_strerror(rc));
		return 3;
	}
	if ((W.flags & FL_RWLOCK) && (rc = init_rwlock(&W))) {
		fprintf(stderr, "torture worker %d: drwlock_init: %s\n", W.id, dmutex_strerror(rc));
		return 3;
	}
	for (int i = 0; i < W.nthreads; i++) {
		memset(&thr[i], 0, sizeof thr[i]);
		thr[i].w = &W;
		thr[i].idx = i;
		thr[i].rng = W.seed * 1000003 + (uint64_t)W.id * 64 + (uint64_t)i + 1;
		thr[i].slot = &W.sh->slot[W.id][i];
		atomic_store(&thr[i].slot->pid, (int)getpid());
		if (!(W.flags & FL_RWLOCK) && (rc = init_mutex(&thr[i]))) {
			fprintf(stderr, "torture worker %d: init: %s\n", W.id, dmutex_strerror(rc));
			return 3;
		}
	}
	for (int i = 0; i < W.nthreads; i++) {
		thr[i].thr_id = (uint16_t)i;
		if (pthread_create(&tid[i], NULL, thread_main, &thr[i]))
			return 3;
	}
	/* Churn: a thread that ended before the stop is joined and a new one
	 * takes its slot (glibc may give it the dead one's pthread_t): it must
	 * inherit nothing of it (README "The fast paths" rule 5). */
	for (int left = W.nthreads; left > 0;) {
		pthread_mutex_lock(&churn_mu);
		int i = -1;
		while (i < 0) {
			for (int k = 0; k < W.nthreads && i < 0; k++)
				if (atomic_load(&thr[k].ended))
					i = k;
			if (i < 0)
				pthread_cond_wait(&churn_cv, &churn_mu);
		}
		int why = atomic_exchange(&thr[i].ended, 0);
		pthread_mutex_unlock(&churn_mu);
		pthread_join(tid[i], NULL);
		if (why == 2 || atomic_load(&W.sh->stop)) {
			if (why == 1) {
				/* Ended by churn as the stop came: done too. */
				atomic_store(&thr[i].slot->phase, PH_DONE);
			}
			left--;
			continue;
		}
		thr[i].gen++;
		thr[i].thr_id = (uint16_t)(i + TT_MAX_THREADS * thr[i].gen);
		if (pthread_create(&tid[i], NULL, thread_main, &thr[i]))
			return 3;
	}
	for (int i = 0; i < W.nthreads && (W.flags & FL_RWLOCK); i++)
		if (thr[i].res)
			redisFree(thr[i].res);
	if ((W.flags & FL_RWLOCK) && (rc = drwlock_destroy(&W.rw))) {
		fprintf(stderr, "torture worker %d: drwlock_destroy: %s\n", W.id, dmutex_strerror(rc));
		status = 4;
	}
	for (int i = 0; i < W.nthreads && !(W.flags & FL_RWLOCK); i++) {
		if ((rc = dcond_destroy(&thr[i].cv)))
			fprintf(stderr, "torture worker %d: dcond_destroy: %s\n", W.id, dmutex_strerror(rc));
		if ((rc = dmutex_destroy(&thr[i].m))) {
			fprintf(stderr, "torture worker %d: destroy: %s\n", W.id, dmutex_strerror(rc));
			status = 4;
		}
		if (thr[i].res)
			redisFree(thr[i].res);
	}
	if ((rc = dmutex_client_close(W.client))) {
		fprintf(stderr, "torture worker %d: client close: %s\n", W.id, dmutex_strerror(rc));
		status = 4;
	}
	dmutex_set_logger(NULL, NULL);
	fclose(W.log);
	close(W.fd);
	munmap(W.sh, sizeof *W.sh);
	return status;
}
