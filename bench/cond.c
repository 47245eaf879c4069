/*
 * Scenario 13: a condition variable's wake-up (issue 15 item 5), from
 * dcond_signal to the waiter back from dcond_wait holding the mutex.
 * Target: at most 2 round trips beyond the mutex's hand-over (release +
 * acquire).
 *
 * Two threads, each with its own client (so every step goes through Redis,
 * as between processes): the waiter loops on dcond_wait until the
 * signaller's turn counter (protected by the mutex) says go; the signaller
 * takes the mutex (which it gets only once the waiter sleeps), bumps the
 * counter, signals and unlocks.  The two meet between rounds on a plain
 * pthread condition, outside the measured span, and the signaller reads
 * INFO commandstats on each side of that span: the scripts and
 * subscriptions Redis ran for one wake-up, the mutex's hand-over included.
 *
 * Two runs: the signaller unlocks at once (the time row: the waiter may
 * find the mutex free), and the signaller holds the mutex until the
 * waiter asked for it (the lock's "someone waits" field is set), so that
 * every wake-up includes a whole hand-over: the count row, the same on
 * any machine.
 *
 * The time row and the PUBLISH ping-pongs it is set against (below) are
 * timed in turn, in slices (10, 4 with --quick): a block of wake-ups, then
 * a block of each ping-pong, the order turning from slice to slice, with
 * every slice's samples pooled into one median, so that a change of load
 * during the run weighs on both alike.  Timed in two phases one after the
 * other, the ping-pong took 59 µs in one full run and 103 µs in the next
 * while the wake-up moved far less, and target 1's ratio with it.
 * Clients, threads, children and connections are all set up before the
 * first slice, and a ping-pong block runs while the waiter is parked
 * between rounds, outside every wake-up's span.
 *
 * All of that is pinned, as issue 28 takes its ratios: our own server on
 * one CPU, and this scenario's threads and child (the signaller, the
 * waiter, the library's wake-up and renewal threads, the ping-pongs'
 * parties) on the other; both get their CPUs back before the count row,
 * which counts scripts and runs unpinned.  On a 2-CPU machine a round
 * trip otherwise runs for tens of milliseconds in one of two modes,
 * client and server on one CPU (a wake-up is a context switch: ~20 µs
 * ping-pong, ~75 µs wake-up) or across the two (~70-110 µs, ~180 µs), and
 * slices did not keep the wake-up and its reference in the same mode: the
 * ratio went from 1x to 9x between runs.  With fewer than 2 CPUs, or a
 * server not ours, the rows say they were not pinned.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "dmutex.h"
#include "harness.h"

struct cshared {
	const struct bench *b;
	dmutex_t m;             /* the waiter's */
	dcond_t cv;
	pthread_mutex_t mu;     /* the meeting between rounds */
	pthread_cond_t pc;
	int ready, woke, go;    /* the round each reached */
	int turn;               /* under m: the round the waiter may end */
	int64_t t_woke;
	int err;
};

static int
open_pair(const struct bench *b, dmutex_client_t **cli, dmutex_t *m, dcond_t *cv, const char *name)
{
	dmutex_attr_t a;
	dcond_attr_t ca;
	int err;

	if ((err = dmutex_client_open(cli, b->tgt.url)))
		return err;
	dmutex_attr_init(&a);
	dmutex_attr_setclient(&a, *cli);
	err = dmutex_init(m, name, &a);
	dmutex_attr_destroy(&a);
	if (err)
		return err;
	dcond_attr_init(&ca);
	dcond_attr_setclient(&ca, *cli);
	err = dcond_init(cv, name, &ca);
	dcond_attr_destroy(&ca);
	return err;
}

static void
meet(struct cshared *s, int *field, int round)
{
	pthread_mutex_lock(&s->mu);
	*field = round;
	pthread_cond_broadcast(&s->pc);
	pthread_mutex_unlock(&s->mu);
}

static void
await(struct cshared *s, const int *field, int round)
{
	pthread_mutex_lock(&s->mu);
	while (*field < round && !s->err)
		pthread_cond_wait(&s->pc, &s->mu);
	pthread_mutex_unlock(&s->mu);
}

static void
fail(struct cshared *s, int err)
{
	pthread_mutex_lock(&s->mu);
	s->err = err ? err : EIO;
	pthread_cond_broadcast(&s->pc);
	pthread_mutex_unlock(&s->mu);
}

static int rounds_of(const struct bench *b) { return b->opt.quick ? 200 : 1000; }
/* Divides rounds_of. */
static int slices_of(const struct bench *b) { return b->opt.quick ? 4 : 10; }

struct pp;
static int pp_turn(struct pp *pp, const struct bench *b, int r);

static void *
waiter_main(void *arg)
{
	struct cshared *s = arg;
	int n = rounds_of(s->b), err;

	if ((err = dmutex_lock(&s->m))) {
		fail(s, err);
		return NULL;
	}
	for (int r = 1; r <= n; r++) {
		meet(s, &s->ready, r);
		while (s->turn < r)
			if ((err = dcond_wait(&s->cv, &s->m))) {
				fail(s, err);
				return NULL;
			}
		s->t_woke = bench_now_ns();
		meet(s, &s->woke, r);
		await(s, &s->go, r);
		if (s->err)
			break;
	}
	dmutex_unlock(&s->m);
	return NULL;
}

/* The waiter asked for the mutex: the lock key says someone waits (flag w
 * of the value "3 token fence died flags ...", key layout 3). */
static void
await_asked(redisContext *rc, const char *name)
{
	for (;;) {
		redisReply *x = bench_cmd(rc, "GET dmutex:lock:{%s}", name);
		char flags[16];
		int asked = x->type == REDIS_REPLY_STRING &&
			sscanf(x->str, "%*s %*s %*s %*s %15s", flags) == 1 && strchr(flags, 'w');

		freeReplyObject(x);
		if (asked)
			return;
	}
}

/* pp: the ping-pongs to time in turn with the wake-ups, or NULL. */
static int
run(struct bench *b, int hold, struct pp *pp)
{
	static struct cshared s;
	dmutex_client_t *wcli = NULL, *scli = NULL;
	dmutex_t m;
	dcond_t cv;
	char name[64];
	pthread_t th;
	struct samples t, scripts;
	redisContext *rc;
	long long subs = 0, max_scripts = 0;
	int n = rounds_of(b), started = 0, err = 0;
	struct row *row;

	memset(&s, 0, sizeof s);
	s.b = b;
	pthread_mutex_init(&s.mu, NULL);
	pthread_cond_init(&s.pc, NULL);
	snprintf(name, sizeof name, "%s:cond%d", b->run_id, hold);
	if (!(rc = bench_connect(&b->tgt)) || samples_init(&t, n) || samples_init(&scripts, n))
		return -1;
	if ((err = open_pair(b, &wcli, &s.m, &s.cv, name)) || (err = open_pair(b, &scli, &m, &cv, name)))
		goto out;
	if ((err = pthread_create(&th, NULL, waiter_main, &s)))
		goto out;
	started = 1;
	for (int r = 1; r <= n && !err; r++) {
		struct cmdstats before, after;
		int64_t t0;

		await(&s, &s.ready, r);
		if ((err = s.err) || (err = dmutex_lock(&m)))
			break;
		bench_cmdstats(rc, &before);
		s.turn = r;
		t0 = bench_now_ns();
		if ((err = dcond_signal(&cv)))
			break;
		if (hold)
			await_asked(rc, name);
		if ((err = dmutex_unlock(&m)))
			break;
		await(&s, &s.woke, r);
		if ((err = s.err))
			break;
		samples_add(&t, s.t_woke - t0);
		bench_cmdstats(rc, &after);
		long long k = after.scripts - before.scripts;
		samples_add(&scripts, k);
		if (k > max_scripts)
			max_scripts = k;
		subs += after.subscribe - before.subscribe;
		if (pp && (err = pp_turn(pp, b, r)))
			break;
		meet(&s, &s.go, r);
	}
	if (err)
		fail(&s, err);
	meet(&s, &s.go, n);
	if (!err) {
		double med = samples_pct(&t, 50);
		double ms = samples_pct(&scripts, 50);

		row = row_new(13, hold ? "condvar: signal, mutex held until the waiter asked (count)"
				: "condvar: signal + unlock to the waiter back holding the mutex");
		if (!hold) {
			row->median_ns = med;
			row->p99_ns = samples_pct(&t, 99);
			row->ratio = med / b->ping_ns;
			snprintf(row->ratio_to, sizeof row->ratio_to, "PING");
		}
		row_metric(row, "rounds", n, "");
		if (pp)
			row_metric(row, "slices", slices_of(b), "");
		row_metric(row, "scripts per wake-up (median)", ms, "");
		row_metric(row, "scripts per wake-up (max)", (double)max_scripts, "");
		row_metric(row, "subscriptions on the way", (double)subs, "");
		row_metric(row, "RTT", b->ping_ns, "ns");
		/* signal, the waiter's acknowledgement and first attempt (sent
		 * together: one round trip), the hand-over's release + acquire. */
		if (hold)
			row_target(row, ms <= 5 && subs == 0 ? MET_YES : MET_NO,
					"≤ 2 round trips beyond the hand-over: ≤ 5 scripts (%s), "
					"no subscription (%s)", ms <= 5 ? "yes" : "no", subs == 0 ? "yes" : "no");
	}
out:
	if (started)
		pthread_join(th, NULL);
	if (err)
		fprintf(stderr, "bench: cond: %s\n", dmutex_strerror(err));
	if (scli) {
		dcond_destroy(&cv);
		dmutex_destroy(&m);
		dmutex_client_close(scli);
	}
	if (wcli) {
		dcond_destroy(&s.cv);
		dmutex_destroy(&s.m);
		dmutex_client_close(wcli);
	}
	samples_free(&t);
	samples_free(&scripts);
	redisFree(rc);
	return err ? -1 : 0;
}

/* Issue 28's reference: a raw PUBLISH ping-pong between two parties,
 * each subscribed to its channel: one publishes to the other's, which
 * publishes back, and the first reads the message.  A wake-up by pub/sub
 * can take no less.  The issue sets the condvar against a ping-pong
 * "between the same two processes"; here the condvar runs between two
 * threads of one process, each with its own client, so the ping-pong it
 * is judged against runs between two threads, each with its own
 * connections.  The one between two processes is printed beside it. */
struct pp {
	const struct bench *b;
	char ch[2][80];
	struct th_sync ready;
	redisContext *sub, *pub;        /* the side that times */
	struct samples t;
	int threads;
	pid_t pid;
	pthread_t th;
	int started;
};

static int
pong_main(void *arg)
{
	struct pp *p = arg;
	redisContext *sub = bench_connect(&p->b->tgt), *pub = bench_connect(&p->b->tgt);
	redisReply *r;

	if (!sub || !pub)
		return 10;
	freeReplyObject(bench_cmd(sub, "SUBSCRIBE %s", p->ch[0]));
	th_sync_post(&p->ready);
	while (redisGetReply(sub, (void **)&r) == REDIS_OK) {
		int stop = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
			r->element[2]->type == REDIS_REPLY_STRING && !strcmp(r->element[2]->str, "stop");

		freeReplyObject(r);
		if (stop)
			break;
		freeReplyObject(bench_cmd(pub, "PUBLISH %s x", p->ch[1]));
	}
	redisFree(sub);
	redisFree(pub);
	return 0;
}

static void *
pong_thread(void *arg)
{
	pong_main(arg);
	return NULL;
}

/* Both parties connected and subscribed, outside any timed span.
 * threads: the other party is a thread of this process, else a child. */
static int
pp_open(struct bench *b, struct pp *p, int threads)
{
	memset(p, 0, sizeof *p);
	p->b = b;
	p->threads = threads;
	p->pid = -1;
	snprintf(p->ch[0], sizeof p->ch[0], "%s:ping%s", b->run_id, threads ? "t" : "");
	snprintf(p->ch[1], sizeof p->ch[1], "%s:pong%s", b->run_id, threads ? "t" : "");
	p->ready.fd[0] = p->ready.fd[1] = -1;
	if (!(p->sub = bench_connect(&b->tgt)) || !(p->pub = bench_connect(&b->tgt)) ||
			samples_init(&p->t, (size_t)rounds_of(b) * 2) || th_sync_init(&p->ready))
		return -1;
	freeReplyObject(bench_cmd(p->sub, "SUBSCRIBE %s", p->ch[1]));
	if (threads) {
		if (pthread_create(&p->th, NULL, pong_thread, p))
			return -1;
	} else if ((p->pid = th_spawn(pong_main, p)) < 0) {
		return -1;
	}
	p->started = 1;
	if (th_sync_wait(&p->ready, 10000)) {
		/* A party that never subscribed cannot be told to stop: give
		 * up, as bench_cmd does when the server is lost. */
		fprintf(stderr, "bench: cond: the ping-pong's other party did not start\n");
		exit(2);
	}
	return 0;
}

static int
pp_block(struct pp *p, int n)
{
	for (int i = 0; i < n; i++) {
		int64_t t0 = bench_now_ns();
		redisReply *r;

		freeReplyObject(bench_cmd(p->pub, "PUBLISH %s x", p->ch[0]));
		if (redisGetReply(p->sub, (void **)&r) != REDIS_OK)
			return EIO;
		freeReplyObject(r);
		samples_add(&p->t, bench_now_ns() - t0);
	}
	return 0;
}

static void
pp_close(struct pp *p)
{
	if (!p->b)      /* never opened */
		return;
	if (p->started) {
		freeReplyObject(bench_cmd(p->pub, "PUBLISH %s stop", p->ch[0]));
		if (p->threads)
			pthread_join(p->th, NULL);
		else
			th_wait_child(p->pid, 10000);
	}
	th_sync_close(&p->ready);
	samples_free(&p->t);
	redisFree(p->sub);
	redisFree(p->pub);
	memset(p, 0, sizeof *p);
}

/* The ping-pongs' turn after wake-up round r, the waiter parked holding
 * the mutex and both clients idle.  Slice k is a block of wake-ups and a
 * block of ping-pongs, the wake-ups first when k is even, last when it is
 * odd, so that the ping-pongs of slices k and k + 1 run together after
 * the wake-ups of slice k (k even) and a drift through the run weighs on
 * both alike, not on whichever was timed later.  Two ping-pongs a
 * wake-up, as when they were timed apart.  Between the two kinds the
 * order turns too. */
static int
pp_turn(struct pp *pp, const struct bench *b, int r)
{
	int per = rounds_of(b) / slices_of(b), k = r / per, n, err = 0;

	if (r % per || k % 2 == 0)
		return 0;
	n = 2 * per * (k < slices_of(b) ? 2 : 1);
	for (int j = 0; j < 2 && !err; j++)
		err = pp_block(&pp[(j + k / 2) % 2], n);
	return err;
}

/* The judged comparison pinned (see the top of this file for why): the
 * server on one CPU, this thread on another, and with it every thread and
 * child it then makes (the waiter, the ping-pong's other party, the
 * library's wake-up and renewal threads: each inherits its creator's
 * CPUs).  Scenario 1 pins the same way. */
struct pin {
	cpu_set_t server, self;         /* to give back */
	int server_cpu, client_cpu;     /* -1: not pinned */
	char why[96];                   /* why not */
};

static void
pin(const struct bench *b, struct pin *p)
{
	cpu_set_t one;
	int cpu[2], n = 0;

	p->server_cpu = p->client_cpu = -1;
	if (!b->server_pid) {
		snprintf(p->why, sizeof p->why, "the server is not the bench's own");
		return;
	}
	if (sched_getaffinity(b->server_pid, sizeof p->server, &p->server) ||
			pthread_getaffinity_np(pthread_self(), sizeof p->self, &p->self)) {
		snprintf(p->why, sizeof p->why, "cannot read the CPUs allowed: %s", strerror(errno));
		return;
	}
	for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
		if (CPU_ISSET(c, &p->self))
			cpu[n++] = c;
	if (n < 2) {
		snprintf(p->why, sizeof p->why, "fewer than 2 CPUs to run on");
		return;
	}
	CPU_ZERO(&one);
	CPU_SET(cpu[0], &one);
	if (sched_setaffinity(b->server_pid, sizeof one, &one)) {
		snprintf(p->why, sizeof p->why, "cannot pin the server: %s", strerror(errno));
		return;
	}
	CPU_ZERO(&one);
	CPU_SET(cpu[1], &one);
	if ((errno = pthread_setaffinity_np(pthread_self(), sizeof one, &one))) {
		snprintf(p->why, sizeof p->why, "cannot pin the clients: %s", strerror(errno));
		sched_setaffinity(b->server_pid, sizeof p->server, &p->server);
		return;
	}
	p->server_cpu = cpu[0];
	p->client_cpu = cpu[1];
}

/* The server and this thread get their CPUs back: the scenarios after
 * this one run as they did before it. */
static void
unpin(const struct bench *b, struct pin *p)
{
	if (p->server_cpu < 0)
		return;
	pthread_setaffinity_np(pthread_self(), sizeof p->self, &p->self);
	sched_setaffinity(b->server_pid, sizeof p->server, &p->server);
}

static void
pin_mark(struct row *r, const struct pin *p)
{
	if (p->server_cpu < 0) {
		row_note(r, "not pinned: %s", p->why);
		return;
	}
	row_metric(r, "server pinned to CPU", p->server_cpu, "");
	row_metric(r, "clients pinned to CPU", p->client_cpu, "");
}

int
bench_cond(struct bench *b)
{
	/* [0] between two threads, [1] between two processes; the child is
	 * forked before this scenario has a thread or a client. */
	static struct pp pp[2];
	size_t first = rows_count();
	double med, p99, medp, p99p;
	struct pin pn;
	char where[128];
	int rc;
	struct row *r;

	/* Pinned before the child is forked and before any thread or
	 * client of this scenario exists, so that all of them inherit it. */
	pin(b, &pn);
	if (pp_open(b, &pp[1], 0) || pp_open(b, &pp[0], 1)) {
		pp_close(&pp[0]);
		pp_close(&pp[1]);
		unpin(b, &pn);
		return -1;
	}
	rc = run(b, 0, pp);
	med = samples_pct(&pp[0].t, 50);
	p99 = samples_pct(&pp[0].t, 99);
	medp = samples_pct(&pp[1].t, 50);
	p99p = samples_pct(&pp[1].t, 99);
	pp_close(&pp[0]);
	pp_close(&pp[1]);
	/* The count row counts scripts, which no CPU placement changes: it
	 * runs unpinned. */
	unpin(b, &pn);
	rc |= run(b, 1, NULL);
	if (isnan(med) || isnan(medp))
		return -1;
	r = row_new(13, "(why) raw PUBLISH ping-pong between two threads, a connection each");
	r->median_ns = med;
	r->p99_ns = p99;
	r->ratio = med / b->ping_ns;
	snprintf(r->ratio_to, sizeof r->ratio_to, "PING");
	pin_mark(r, &pn);
	r = row_new(13, "(why) raw PUBLISH ping-pong between two processes");
	r->median_ns = medp;
	r->p99_ns = p99p;
	r->ratio = medp / b->ping_ns;
	snprintf(r->ratio_to, sizeof r->ratio_to, "PING");
	pin_mark(r, &pn);
	if (pn.server_cpu < 0)
		snprintf(where, sizeof where, "not pinned: %s", pn.why);
	else
		snprintf(where, sizeof where, "server on CPU %d, clients on CPU %d", pn.server_cpu,
				pn.client_cpu);
	/* Issue 28 item 1: the time row against this reference. */
	for (size_t i = first; i < rows_count(); i++) {
		r = rows_at(i);
		if (r->scenario != 13 || isnan(r->median_ns) || !strncmp(r->label, "(why)", 5))
			continue;
		row_metric(r, "x PUBLISH ping-pong", r->median_ns / med, "x");
		row_metric(r, "x the same between processes", r->median_ns / medp, "x");
		pin_mark(r, &pn);
		row_target(r, r->median_ns <= 2 * med ? MET_YES : MET_NO,
				"signal-to-return ≤ 2x a PUBLISH ping-pong (%.2fx)", r->median_ns / med);
		target_line("1: condvar signal-to-return ≤ 2× a raw PUBLISH ping-pong between the same "
				"two parties (two threads, a client each)", r->met, "median %.1f / %.1f µs = "
				"%.2f× (the ping-pong between two processes: %.1f µs, %.2f×); %s",
				r->median_ns / 1e3, med / 1e3, r->median_ns / med, medp / 1e3,
				r->median_ns / medp, where);
	}
	return rc;
}
