/*
 * Scenario 10: a fair mutex (dmutex_attr_setfair) under contention.
 * Issue 28 target 3, judged with 4 processes and with 8 threads of one
 * process: worst wait and p99 <= 1.5x the FIFO lock's (below), min/max
 * share >= 0.9.  With 8 processes, issue 15 item 4's targets, still
 * quoted in docs/guide.md: min/max share >= 0.9, and the worst wait (a
 * lock call to its return) <= 2 x (P-1) x (hold + RTT), P the contenders,
 * hold the median hold measured here, RTT the PING of the floor (across
 * CPUs for processes, as scenario 4).
 *
 * Each contender loops lock -> record -> unlock; the counts and the waits
 * live in memory shared by the processes (mmap MAP_SHARED), so Redis sees
 * nothing of the measuring.
 *
 * Issue 28 item 3's reference, "(why)" rows run just before with the same
 * contenders and hold: the simplest FIFO lock, a Redis list holding one
 * token, lock = BLPOP (Redis serves blocked clients first come first
 * served), unlock = RPUSH.  Each contender has a connection of its own.
 *
 * Where the fair lock's time goes, with --diag (they judge nothing and
 * add 18 s to the run), five more "(why)" rows with 4
 * processes (the third also with 8 threads): the FIFO lock whose unlock
 * runs the fair release's commands in a script, the same whose lock also
 * runs the fair acquire's queueing commands first, the FIFO lock whose
 * unlock runs the least script a checked hand-over needs, one whose
 * waiters queue themselves in a list with plain commands, and one with
 * the whole release of a queue Redis serves itself (below).
 * Each row also counts, per wait, the takes by others during it: more
 * than P-1 is an unfair wait, a long wait with P-1 or fewer is slow
 * hand-overs.  BENCH_FAIR_DIAG=1 prints each run's INFO commandstats.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench.h"
#include "dmutex.h"
#include "harness.h"

#define CONTENDERS 8
#define WAITS_CAP 200000

struct shared {
	atomic_int inside, errors;
	atomic_long overlaps;
	atomic_ulong nwaits;
	int64_t stop_ns;
	long count[CONTENDERS];
	int64_t max_wait[CONTENDERS];
	int64_t hold_sum[CONTENDERS];
	atomic_llong cpu_ns;    /* the contenders' CPU (processes add their own) */
	atomic_llong unlock_ns; /* when the last holder called unlock */
	atomic_ulong nhand;
	atomic_int last;                /* who took the lock last, + 1 */
	atomic_ulong twice;             /* takes by the one who took it last */
	int64_t waits[WAITS_CAP];
	int64_t hands[WAITS_CAP];       /* unlock called -> the next lock returned */
	int passed[WAITS_CAP];          /* takes by others during this wait */
};

struct ctx {
	const struct bench *b;
	struct shared *sh;
	dmutex_t *m;            /* threads: one mutex; processes: their own */
	const char *name;
	int idx;
	int fifo;               /* the BLPOP/RPUSH reference instead of m */
	redisContext *rc;       /* its connection */
	struct th_sync *ready;
	int go_fd[2];
};

static int
open_fair(const struct bench *b, dmutex_client_t **cli, dmutex_t *m, const char *name)
{
	dmutex_attr_t a;
	int err;

	if ((err = dmutex_client_open(cli, b->tgt.url)))
		return err;
	dmutex_attr_init(&a);
	dmutex_attr_setclient(&a, *cli);
	dmutex_attr_setfair(&a, 1);
	err = dmutex_init(m, name, &a);
	dmutex_attr_destroy(&a);
	return err;
}

/*
 * Costs, not locks (what the scripts read is not acted on; the FIFO's
 * list alone decides who holds).  mock_release runs the commands
 * fair_release.lua runs for a hand-over to a queued head, then the FIFO's
 * RPUSH; mock_queue, run before a lock's BLPOP, the commands
 * fair_acquire.lua runs to queue a waiter.  Their own keys, the same
 * command mix and replies: what a script on the hand-over, and one more
 * per acquisition, cost apart from the library.
 */
static const char *const mock_release =
	"local cur = redis.call('HMGET', KEYS[1], 'token', 'died')\n"
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"local q = redis.call('ZRANGE', KEYS[3], 0, -1)\n"
	"local g = {}\n"
	"if #q > 0 then g = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now) end\n"
	"local h = q[1] or 'none'\n"
	"local m = redis.call('HMGET', KEYS[2], 'fence', 'n', 'q:' .. h)\n"
	"redis.call('ZREM', KEYS[3], h)\n"
	"redis.call('ZREM', KEYS[4], h)\n"
	"redis.call('HDEL', KEYS[2], 'q:' .. h)\n"
	"redis.call('HSET', KEYS[2], 'v', '2', 'state', 'held', 'robust', '0', 'fence', now, 'n', 1)\n"
	"redis.call('PEXPIRE', KEYS[2], 20000)\n"
	"redis.call('HSET', KEYS[1], 'v', '2', 'token', h, 'fence', now, 'died', 0, 'host', 'h',"
	" 'pid', '1', 'tid', '2', 'since', now, 'lease', 10000, 'hostid', 'x')\n"
	"redis.call('PEXPIRE', KEYS[1], 10000)\n"
	"redis.call('RPUSH', KEYS[5], 't')\n"
	"redis.call('PEXPIRE', KEYS[5], 20000)\n"
	"return 1\n";
static const char *const mock_queue =
	"local l = redis.call('HMGET', KEYS[1], 'v', 'token', 'died', 'fence')\n"
	"local m = redis.call('HMGET', KEYS[2], 'v', 'fence', 'state', 'n')\n"
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"local queued = redis.call('ZSCORE', KEYS[3], ARGV[1])\n"
	"local pttl = redis.call('PTTL', KEYS[1])\n"
	"redis.call('DEL', KEYS[6])\n"
	"redis.call('ZADD', KEYS[4], now + 10000, ARGV[1])\n"
	"if not queued then\n"
	"  local tail = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')\n"
	"  redis.call('ZADD', KEYS[3], (tail[2] and tonumber(tail[2]) or 0) + 1, ARGV[1])\n"
	"end\n"
	"redis.call('PEXPIRE', KEYS[3], 20000)\n"
	"redis.call('PEXPIRE', KEYS[4], 20000)\n"
	"redis.call('HSET', KEYS[2], 'q:' .. ARGV[1], '10000 0 host 1 2 1700000000000 hostid')\n"
	"return {1, pttl}\n";
/* The least a checked hand-over can run when Redis itself serves the
 * waiters in order (a list queue: no head to find, no waiter script):
 * read the owner and the token counter, record the next holder and its
 * token, renew the lease, push the grant.  The cost floor of that
 * design on this machine. */
static const char *const mock_least =
	"local cur = redis.call('HMGET', KEYS[1], 'token', 'fence')\n"
	"local f = (tonumber(cur[2]) or 0) + 1\n"
	"redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', f)\n"
	"redis.call('PEXPIRE', KEYS[1], 10000)\n"
	"redis.call('RPUSH', KEYS[2], f)\n"
	"return 1\n";
/* A step short of a redesign (docs/guide.md): the waiters queue
 * themselves with a MULTI of plain commands (mock_list_queue below): their
 * tokens in a list, which Redis keeps in arrival order, and each place a
 * key of its own that expires with it.  The release reads the list's head
 * and its place, pops it, and writes the hold as fair_release.lua does. */
static const char *const mock_list_release =
	"local cur = redis.call('HMGET', KEYS[1], 'token', 'died')\n"
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"local q = redis.call('LRANGE', KEYS[3], 0, 7)\n"
	"local h = q[1] or 'none'\n"
	"local place = redis.call('GET', KEYS[3] .. ':' .. h)\n"
	"local m = redis.call('HMGET', KEYS[2], 'fence', 'n')\n"
	"if q[1] then redis.call('LPOP', KEYS[3]); redis.call('DEL', KEYS[3] .. ':' .. h) end\n"
	"redis.call('HSET', KEYS[2], 'v', '2', 'state', 'held', 'robust', '0', 'fence', now, 'n', 1)\n"
	"redis.call('PEXPIRE', KEYS[2], 20000)\n"
	"redis.call('HSET', KEYS[1], 'v', '2', 'token', h, 'fence', now, 'died', 0, 'host', 'h',"
	" 'pid', '1', 'tid', '2', 'since', now, 'lease', 10000, 'hostid', 'x')\n"
	"redis.call('PEXPIRE', KEYS[1], 10000)\n"
	"redis.call('RPUSH', KEYS[4], 't')\n"
	"redis.call('PEXPIRE', KEYS[4], 20000)\n"
	"return 1\n";
/* The release a design needs in which Redis serves the waiters from one
 * list (no head to find): the owner, the token counter and the clock
 * read, the next token and the holds' count written to the meta hash,
 * the lock's hash given to the grant (its token, died, lease), both
 * expiries set, the grant (token, push time, lease) pushed and its list's
 * expiry set.  Its waiter sends a TIME with its BLPOP (fifo_lock): the
 * push time and the server's time at the BLPOP bound the lease of a grant
 * that waited in the list. */
static const char *const mock_served_release =
	"local cur = redis.call('HMGET', KEYS[1], 'token', 'died')\n"
	"local m = redis.call('HMGET', KEYS[2], 'fence', 'n')\n"
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"local f = (tonumber(m[1]) or 0) + 1\n"
	"redis.call('HSET', KEYS[2], 'v', '2', 'state', 'handed', 'fence', f, 'n', (tonumber(m[2]) or 0) + 1)\n"
	"redis.call('PEXPIRE', KEYS[2], 20000)\n"
	"redis.call('HSET', KEYS[1], 'v', '2', 'token', 'g' .. f, 'fence', f, 'died', 0, 'since', now,"
	" 'lease', 10000)\n"
	"redis.call('PEXPIRE', KEYS[1], 10000)\n"
	"redis.call('RPUSH', KEYS[3], f .. ':' .. now .. ':10000')\n"
	"redis.call('PEXPIRE', KEYS[3], 20000)\n"
	"return 1\n";
static char mock_release_sha[41], mock_queue_sha[41], mock_least_sha[41], mock_list_sha[41],
	mock_served_sha[41];

/* mock_list_release's waiter: one write, no script. */
static int
mock_list_queue(struct ctx *x)
{
	redisReply *r;
	int ok = 1;

	redisAppendCommand(x->rc, "MULTI");
	redisAppendCommand(x->rc, "HMGET %s:m:l v token died fence", x->name);
	redisAppendCommand(x->rc, "HGET %s:m:m v", x->name);
	redisAppendCommand(x->rc, "PTTL %s:m:l", x->name);
	redisAppendCommand(x->rc, "DEL %s:m:w%d", x->name, x->idx);
	redisAppendCommand(x->rc, "RPUSH %s:m:s c%d", x->name, x->idx);
	redisAppendCommand(x->rc, "SET %s:m:s:c%d %s PX 10000", x->name, x->idx,
			"10000 0 host 1 2 1700000000000 hostid");
	redisAppendCommand(x->rc, "PEXPIRE %s:m:s 20000", x->name);
	redisAppendCommand(x->rc, "EXEC");
	for (int i = 0; i < 9; i++) {
		if (redisGetReply(x->rc, (void **)&r) != REDIS_OK)
			return EIO;
		if (i == 8 && (r->type != REDIS_REPLY_ARRAY || r->elements != 7))
			ok = 0;
		freeReplyObject(r);
	}
	return ok ? 0 : EIO;
}

static int
fifo_lock(struct ctx *x, int lock)
{
	redisReply *r;
	int ok;

	if (lock && x->fifo == 3) {
		r = bench_cmd(x->rc, "EVALSHA %s 6 %s:m:l %s:m:m %s:m:q %s:m:p %s:fifo %s:m:w%d c%d",
				mock_queue_sha, x->name, x->name, x->name, x->name, x->name, x->name,
				x->idx, x->idx);
		ok = r->type == REDIS_REPLY_ARRAY;
		freeReplyObject(r);
		if (!ok)
			return EIO;
	}
	if (lock && x->fifo == 5 && mock_list_queue(x))
		return EIO;
	if (lock && x->fifo == 6) {
		/* TIME and BLPOP in one write: two replies, one round trip. */
		redisAppendCommand(x->rc, "TIME");
		redisAppendCommand(x->rc, "BLPOP %s:fifo 0", x->name);
		if (redisGetReply(x->rc, (void **)&r) != REDIS_OK)
			return EIO;
		ok = r->type == REDIS_REPLY_ARRAY;
		freeReplyObject(r);
		if (redisGetReply(x->rc, (void **)&r) != REDIS_OK)
			return EIO;
		if (!ok) {
			freeReplyObject(r);
			return EIO;
		}
	} else if (lock)
		r = bench_cmd(x->rc, "BLPOP %s:fifo 0", x->name);
	else if (x->fifo == 6)
		r = bench_cmd(x->rc, "EVALSHA %s 3 %s:m:l %s:m:m %s:fifo", mock_served_sha, x->name, x->name,
				x->name);
	else if (x->fifo == 5)
		r = bench_cmd(x->rc, "EVALSHA %s 4 %s:m:l %s:m:m %s:m:s %s:fifo c%d", mock_list_sha,
				x->name, x->name, x->name, x->name, x->idx);
	else if (x->fifo == 4)
		r = bench_cmd(x->rc, "EVALSHA %s 2 %s:m:l %s:fifo c%d", mock_least_sha, x->name, x->name,
				x->idx);
	else if (x->fifo >= 2)
		r = bench_cmd(x->rc, "EVALSHA %s 5 %s:m:l %s:m:m %s:m:q %s:m:p %s:fifo c%d",
				mock_release_sha, x->name, x->name, x->name, x->name, x->name, x->idx);
	else
		r = bench_cmd(x->rc, "RPUSH %s:fifo t", x->name);
	ok = lock ? r->type == REDIS_REPLY_ARRAY : r->type == REDIS_REPLY_INTEGER;
	freeReplyObject(r);
	return ok ? 0 : EIO;
}

static void
loop(struct ctx *x)
{
	struct shared *sh = x->sh;

	while (bench_now_ns() < sh->stop_ns) {
		int64_t t0 = bench_now_ns(), t1, t2;
		unsigned long i, n0 = atomic_load(&sh->nwaits);

		if (x->fifo ? fifo_lock(x, 1) : dmutex_lock(x->m)) {
			atomic_fetch_add(&sh->errors, 1);
			return;
		}
		t1 = bench_now_ns();
		if (atomic_fetch_add(&sh->inside, 1) != 0)
			atomic_fetch_add(&sh->overlaps, 1);
		/* A hand-over: the previous holder's unlock call to this return
		 * (from this call's start if the lock was free before). */
		{
			int64_t u = atomic_load(&sh->unlock_ns);
			unsigned long h;

			if (u && (h = atomic_fetch_add(&sh->nhand, 1)) < WAITS_CAP)
				sh->hands[h] = t1 - (u > t0 ? u : t0);
		}
		sh->count[x->idx]++;
		if (t1 - t0 > sh->max_wait[x->idx])
			sh->max_wait[x->idx] = t1 - t0;
		i = atomic_fetch_add(&sh->nwaits, 1);
		if (i < WAITS_CAP) {
			sh->waits[i] = t1 - t0;
			sh->passed[i] = (int)(i - n0);
		}
		if (atomic_exchange(&sh->last, x->idx + 1) == x->idx + 1)
			atomic_fetch_add(&sh->twice, 1);
		atomic_fetch_sub(&sh->inside, 1);
		t2 = bench_now_ns();
		sh->hold_sum[x->idx] += t2 - t1;
		atomic_store(&sh->unlock_ns, bench_now_ns());
		if (x->fifo ? fifo_lock(x, 0) : dmutex_unlock(x->m)) {
			atomic_fetch_add(&sh->errors, 1);
			return;
		}
	}
}

static int
proc_main(void *arg)
{
	struct ctx *x = arg;
	dmutex_client_t *cli;
	dmutex_t m;
	char c;

	close(x->go_fd[1]);
	if (x->fifo ? !(x->rc = bench_connect(&x->b->tgt)) : open_fair(x->b, &cli, &m, x->name) != 0)
		return 10;
	x->m = &m;
	th_sync_post(x->ready);
	while (read(x->go_fd[0], &c, 1) < 0 && errno == EINTR)
		;
	loop(x);
	atomic_fetch_add(&x->sh->cpu_ns, bench_process_cpu_ns());
	if (x->fifo) {
		redisFree(x->rc);
		return 0;
	}
	dmutex_destroy(&m);
	dmutex_client_close(cli);
	return 0;
}

static void *
thread_main(void *arg)
{
	struct ctx *x = arg;
	char c;

	if (x->fifo && !(x->rc = bench_connect(&x->b->tgt)))
		atomic_fetch_add(&x->sh->errors, 1);
	th_sync_post(x->ready);
	while (read(x->go_fd[0], &c, 1) < 0 && errno == EINTR)
		;
	if (x->rc || !x->fifo)
		loop(x);
	if (x->rc)
		redisFree(x->rc);
	return NULL;
}

/* What the server ran for a run: its requests and their time (a
 * script's inner calls within its EVALSHA's). */
struct fstats {
	long long evalsha, usec_evalsha, blpop, usec_blpop, rpush, usec_rpush, exec, usec_exec;
};

static int
fstats_read(redisContext *c, struct fstats *out)
{
	redisReply *r = bench_cmd(c, "INFO commandstats");
	const char *names[4] = { "evalsha", "blpop", "rpush", "exec" };
	long long *calls[4] = { &out->evalsha, &out->blpop, &out->rpush, &out->exec };
	long long *usec[4] = { &out->usec_evalsha, &out->usec_blpop, &out->usec_rpush, &out->usec_exec };

	memset(out, 0, sizeof *out);
	if (r->type != REDIS_REPLY_STRING) {
		freeReplyObject(r);
		return -1;
	}
	for (int i = 0; i < 4; i++) {
		char key[32];
		const char *at;

		snprintf(key, sizeof key, "cmdstat_%s:", names[i]);
		if ((at = strstr(r->str, key)))
			sscanf(at + strlen(key), "calls=%lld,usec=%lld", calls[i], usec[i]);
	}
	freeReplyObject(r);
	return 0;
}

/* BENCH_FAIR_DIAG set: every command's calls and time in a run (a
 * script's inner calls counted under their own names too), to stderr. */
static char *
diag_read(redisContext *c)
{
	redisReply *r;
	char *s = NULL;

	if (!getenv("BENCH_FAIR_DIAG") || !c)
		return NULL;
	r = bench_cmd(c, "INFO commandstats");
	if (r->type == REDIS_REPLY_STRING)
		s = strdup(r->str);
	freeReplyObject(r);
	return s;
}

static void
diag_print(const char *label, const char *before, const char *after, long total)
{
	const char *at = after;

	if (!before || !after)
		return;
	fprintf(stderr, "diag %s: %ld acquisitions\n", label, total);
	while ((at = strstr(at, "cmdstat_"))) {
		char name[64], key[80];
		long long c1, u1, c0 = 0, u0 = 0;
		const char *b;

		if (sscanf(at, "cmdstat_%63[^:]:calls=%lld,usec=%lld", name, &c1, &u1) != 3)
			break;
		snprintf(key, sizeof key, "cmdstat_%s:", name);
		if ((b = strstr(before, key)))
			sscanf(b + strlen(key), "calls=%lld,usec=%lld", &c0, &u0);
		if (c1 > c0 && strcmp(name, "info"))
			fprintf(stderr, "diag   %-16s calls/acq %6.2f  usec/call %7.2f  usec/acq %7.2f\n", name,
					total ? (double)(c1 - c0) / total : 0, (double)(u1 - u0) / (c1 - c0),
					total ? (double)(u1 - u0) / total : 0);
		at += 8;
	}
}

/* The worst wait and the 99th percentile of a run, to compare with. */
struct waits {
	double worst, p99;
};

static void
report(const struct bench *b, struct shared *sh, int procs, int n, const char *label,
		const struct fstats *fs, int fifo, struct waits *out, const struct waits *ref)
{
	double rtt = procs && b->ping_cross_ns > 0 ? b->ping_cross_ns : b->ping_ns;
	long total = 0, lo = -1, hi = 0;
	int64_t worst = 0, hold = 0;
	unsigned long nw = atomic_load(&sh->nwaits);
	struct samples s;
	struct row *r;
	double bound;

	for (int i = 0; i < n; i++) {
		total += sh->count[i];
		hold += sh->hold_sum[i];
		if (lo < 0 || sh->count[i] < lo)
			lo = sh->count[i];
		if (sh->count[i] > hi)
			hi = sh->count[i];
		if (sh->max_wait[i] > worst)
			worst = sh->max_wait[i];
	}
	if (nw > WAITS_CAP)
		nw = WAITS_CAP;
	samples_init(&s, nw);
	for (unsigned long i = 0; i < nw; i++)
		samples_add(&s, sh->waits[i]);
	r = row_new(10, label);
	r->median_ns = samples_pct(&s, 50);
	r->p99_ns = samples_pct(&s, 99);
	out->worst = (double)worst;
	out->p99 = r->p99_ns;
	bound = 2.0 * (n - 1) * ((total ? (double)hold / total : 0) + rtt);
	r->ratio = (double)worst / bound;
	snprintf(r->ratio_to, sizeof r->ratio_to, "bound");
	row_metric(r, "acquisitions", (double)total, "");
	row_metric(r, "min/max share", hi ? (double)lo / hi : 0, "x");
	row_metric(r, "worst wait", (double)worst, "ns");
	if (ref) {
		row_metric(r, "worst x FIFO", worst / ref->worst, "x");
		row_metric(r, "p99 x FIFO", r->p99_ns / ref->p99, "x");
	}
	row_metric(r, "bound 2(P-1)(hold+RTT)", bound, "ns");
	row_metric(r, "hold", total ? (double)hold / total : 0, "ns");
	row_metric(r, "RTT", rtt, "ns");
	/* Where a hand-over's time goes on 2 shared CPUs: the hand-over
	 * itself, the contenders' CPU and the server's per acquisition
	 * (commandstats: the requests' time, a script's inner calls in its
	 * EVALSHA; the fair lock's RPUSH runs inside its script). */
	{
		unsigned long nh = atomic_load(&sh->nhand);
		struct samples hs;

		if (nh > WAITS_CAP)
			nh = WAITS_CAP;
		if (nh && !samples_init(&hs, nh)) {
			for (unsigned long i = 0; i < nh; i++)
				samples_add(&hs, sh->hands[i]);
			row_metric(r, "hand-over median", samples_pct(&hs, 50), "ns");
			row_metric(r, "hand-over p99", samples_pct(&hs, 99), "ns");
			samples_free(&hs);
		}
	}
	/* Where the tail comes from: a wait that others passed more often
	 * than P-1 times is unfair, one that they passed P-1 times at most
	 * is slow hand-overs. */
	{
		double p99 = r->p99_ns, tail_passed = 0, tail_each = 0;
		int most = 0;
		unsigned long ntail = 0, over = 0;

		for (unsigned long i = 0; i < nw; i++) {
			if (sh->passed[i] > most)
				most = sh->passed[i];
			if (sh->passed[i] > n - 1)
				over++;
			if (sh->waits[i] >= p99) {
				ntail++;
				tail_passed += sh->passed[i];
				tail_each += (double)sh->waits[i] / (sh->passed[i] + 1);
			}
		}
		row_metric(r, "most passed in a wait", most, "");
		row_metric(r, "waits passed > P-1 times", (double)over, "");
		row_metric(r, "taken twice in a row", (double)atomic_load(&sh->twice), "");
		if (ntail) {
			row_metric(r, "tail waits: passed", tail_passed / ntail, "");
			row_metric(r, "tail waits: per take", tail_each / ntail, "ns");
		}
	}
	if (total) {
		row_metric(r, "client CPU/acq", (double)atomic_load(&sh->cpu_ns) / total, "ns");
		if (fs) {
			/* Inside a script, RPUSH counts in EVALSHA too; the
			 * list queue's EXEC holds its commands' time. */
			long long usec = fs->usec_evalsha + fs->usec_blpop +
				(fifo == 5 ? fs->usec_exec : 0) + (fifo == 1 ? fs->usec_rpush : 0);

			row_metric(r, "redis CPU/acq", usec * 1e3 / total, "ns");
			row_metric(r, "EVALSHA/acq", (double)fs->evalsha / total, "");
		}
	}
	row_metric(r, "errors", (double)atomic_load(&sh->errors), "");
	row_metric(r, "overlaps", (double)atomic_load(&sh->overlaps), "");
	if (ref && strncmp(label, "(why)", 5)) {
		int share = hi && (double)lo / hi >= 0.9;
		int w = worst <= 1.5 * ref->worst, p = r->p99_ns <= 1.5 * ref->p99;

		char what[160];

		row_target(r, share && w && p ? MET_YES : MET_NO,
				"min/max share ≥ 0.9 (%s); worst wait (%s) and p99 (%s) ≤ 1.5x the FIFO lock's",
				share ? "yes" : "no", w ? "yes" : "no", p ? "yes" : "no");
		snprintf(what, sizeof what, "3: fair mutex, %d %s: worst wait and p99 ≤ 1.5× the "
				"BLPOP/RPUSH FIFO lock's, shares ≥ 0.9", n, procs ? "processes" : "threads");
		target_line(what, r->met, "worst %.2f / %.2f ms = %.2f× (%s); p99 %.2f / %.2f ms = "
				"%.2f× (%s); min/max share %.2f (%s)", worst / 1e6, ref->worst / 1e6,
				worst / ref->worst, w ? "yes" : "no", r->p99_ns / 1e6, ref->p99 / 1e6,
				r->p99_ns / ref->p99, p ? "yes" : "no", hi ? (double)lo / hi : 0,
				share ? "yes" : "no");
	} else if (!ref && strncmp(label, "(why)", 5)) {
		row_target(r, hi && (double)lo / hi >= 0.9 && worst <= bound ? MET_YES : MET_NO,
				"issue 15: min/max share ≥ 0.9 (%s), worst wait ≤ bound (%s)",
				hi && (double)lo / hi >= 0.9 ? "yes" : "no", worst <= bound ? "yes" : "no");
	}
	if (atomic_load(&sh->overlaps))
		row_note(r, "MUTUAL EXCLUSION VIOLATED: %ld overlapping holds", atomic_load(&sh->overlaps));
	samples_free(&s);
}

/* n contenders, processes or threads, on the fair mutex or (fifo) on the
 * BLPOP/RPUSH lock; its row compared with ref when given. */
static int
run(struct bench *b, struct shared *sh, int procs, int n, int fifo, struct waits *out,
		const struct waits *ref)
{
	struct ctx x[CONTENDERS];
	struct th_sync ready;
	pid_t pids[CONTENDERS];
	pthread_t th[CONTENDERS];
	dmutex_client_t *cli = NULL;
	dmutex_t m;
	char name[64], label[96];
	int go[2], started = 0, failed = 0, stats = 0;
	int64_t dur = (b->opt.quick ? 1000 : 3000) * (int64_t)1000000, cpu0 = 0;
	struct fstats fs0, fs1;
	redisContext *sc = NULL;
	char *diag0 = NULL, *diag1 = NULL;

	memset(sh, 0, offsetof(struct shared, waits));
	snprintf(name, sizeof name, "%s:fair%s%d%s", b->run_id, procs ? "p" : "t", n,
			fifo == 2 ? "r" : fifo == 3 ? "q" : fifo == 4 ? "l" : fifo == 5 ? "s" : fifo == 6 ? "v" : "");
	if (th_sync_init(&ready) || pipe(go))
		return -1;
	if (fifo) {
		redisContext *c = bench_connect(&b->tgt);

		if (!c)
			return -1;
		freeReplyObject(bench_cmd(c, "DEL %s:fifo", name));
		freeReplyObject(bench_cmd(c, "RPUSH %s:fifo t", name));
		if (fifo >= 2) {
			const char *src[5] = { mock_release, mock_queue, mock_least, mock_list_release,
				mock_served_release };
			char *sha[5] = { mock_release_sha, mock_queue_sha, mock_least_sha, mock_list_sha,
				mock_served_sha };

			for (int i = 0; i < 5; i++) {
				redisReply *r = bench_cmd(c, "SCRIPT LOAD %s", src[i]);

				if (r->type != REDIS_REPLY_STRING || r->len != 40) {
					freeReplyObject(r);
					redisFree(c);
					return -1;
				}
				memcpy(sha[i], r->str, 41);
				freeReplyObject(r);
			}
		}
		redisFree(c);
	} else if (!procs && open_fair(b, &cli, &m, name)) {
		return -1;
	}
	for (int i = 0; i < n; i++) {
		x[i] = (struct ctx){ b, sh, procs || fifo ? NULL : &m, name, i, fifo, NULL, &ready, { go[0], go[1] } };
		if (procs ? (pids[i] = th_spawn(proc_main, &x[i])) < 0
				: pthread_create(&th[i], NULL, thread_main, &x[i]) != 0)
			break;
		started++;
	}
	for (int i = 0; i < started; i++)
		if (th_sync_wait(&ready, 10000))
			failed = 1;
	stats = (sc = bench_connect(&b->tgt)) && !fstats_read(sc, &fs0);
	diag0 = diag_read(sc);
	cpu0 = bench_process_cpu_ns();
	sh->stop_ns = bench_now_ns() + dur;
	close(go[1]);
	for (int i = 0; i < started; i++) {
		if (procs) {
			int st = th_wait_child(pids[i], (int)(dur / 1000000) + 30000);
			if (st) {
				fprintf(stderr, "bench: fair: process %d ended with %d\n", i, st);
				failed = 1;
			}
		} else {
			pthread_join(th[i], NULL);
		}
	}
	if (!procs)
		atomic_store(&sh->cpu_ns, bench_process_cpu_ns() - cpu0);
	diag1 = diag_read(sc);
	if (stats && !fstats_read(sc, &fs1)) {
		fs1.evalsha -= fs0.evalsha;
		fs1.usec_evalsha -= fs0.usec_evalsha;
		fs1.blpop -= fs0.blpop;
		fs1.usec_blpop -= fs0.usec_blpop;
		fs1.rpush -= fs0.rpush;
		fs1.usec_rpush -= fs0.usec_rpush;
		fs1.exec -= fs0.exec;
		fs1.usec_exec -= fs0.usec_exec;
	} else {
		stats = 0;
	}
	if (sc)
		redisFree(sc);
	close(go[0]);
	th_sync_close(&ready);
	if (cli) {
		dmutex_destroy(&m);
		dmutex_client_close(cli);
	}
	if (failed || started < n || atomic_load(&sh->errors)) {
		free(diag0);
		free(diag1);
		return -1;
	}
	snprintf(label, sizeof label, "%s, %d %s", fifo == 6 ? "(why) FIFO + a Redis-served queue's release"
			: fifo == 5 ? "(why) FIFO + a list queue's release and MULTI"
			: fifo == 4 ? "(why) FIFO + the least release script"
			: fifo == 3 ? "(why) FIFO + fair's release and queue scripts"
			: fifo == 2 ? "(why) FIFO + fair's release script" : fifo ? "(why) FIFO lock BLPOP/RPUSH"
			: "fair lock",
			n, procs ? "processes x 1 thread" : "threads of 1 process");
	report(b, sh, procs, n, label, stats ? &fs1 : NULL, fifo, out, ref);
	{
		long total = 0;

		for (int i = 0; i < n; i++)
			total += sh->count[i];
		diag_print(label, diag0, diag1, total);
	}
	free(diag0);
	free(diag1);
	return 0;
}

int
bench_fair(struct bench *b)
{
	struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct waits fifo, own;
	int rc;

	if (sh == MAP_FAILED) {
		perror("bench: mmap");
		return -1;
	}
	/* Issue 28: 4 processes and 8 threads, each after its FIFO reference;
	 * issue 15's 8 processes against the bound. */
	rc = run(b, sh, 1, 4, 1, &fifo, NULL);
	rc |= run(b, sh, 1, 4, 0, &own, rc ? NULL : &fifo);
	/* Where its time goes: the FIFO with the fair lock's scripts.  Six
	 * more runs of 3 s that judge nothing: only when asked (--diag). */
	if (b->opt.diag) {
		rc |= run(b, sh, 1, 4, 2, &own, rc ? NULL : &fifo);
		rc |= run(b, sh, 1, 4, 3, &own, rc ? NULL : &fifo);
		rc |= run(b, sh, 1, 4, 4, &own, rc ? NULL : &fifo);
		rc |= run(b, sh, 1, 4, 5, &own, rc ? NULL : &fifo);
		rc |= run(b, sh, 1, 4, 6, &own, rc ? NULL : &fifo);
	}
	rc |= run(b, sh, 0, 8, 1, &fifo, NULL);
	rc |= run(b, sh, 0, 8, 0, &own, rc ? NULL : &fifo);
	if (b->opt.diag)
		rc |= run(b, sh, 0, 8, 4, &own, rc ? NULL : &fifo);
	rc |= run(b, sh, 1, 8, 0, &own, NULL);
	munmap(sh, sizeof *sh);
	return rc;
}
