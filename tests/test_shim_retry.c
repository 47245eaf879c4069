/*
 * Issue 25 defect 3: a retried operation is applied once, however long the
 * server is away.  Through the shim (which retries while the backend is
 * away), against a real redis-server behind a proxy: each operation's
 * first try reaches the server and is applied, its reply is dropped, then
 * the server is away (the proxy swallows everything) until it has
 * forgotten the operation's result (its semop/barop key is gone), then it
 * is back.  The operation must have been applied exactly once: a post on
 * a semaphore with 1 permit leaves 1, not 2; a wait on one with 2 takes
 * one, not two; an arrival at a barrier of 2 counts once, so a lone waiter
 * does not pass it.  And the caller is told EIO ("whether it was applied
 * is unknown"), since the window (retry_window_ms) passed with no answer.
 * And a trywait whose take was applied, its reply lost, is asked again
 * until answered within the window: it returns 0 holding that permit,
 * not EAGAIN with the permit taken by nobody.
 * docs/faults.md #27.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "harness.h"

static struct th_redis srv;
static struct th_proxy *proxy;

/* One call made in a thread of its own, so the test can drive the proxy
 * while the call retries. */
struct call {
	enum { POST, WAIT, TRYWAIT, BARRIER } op;
	sem_t *sem;
	pthread_barrier_t *bar;
	int rc, err, done;              /* done: atomic */
	pthread_t thr;
};

static void *
run(void *arg)
{
	struct call *c = arg;

	errno = 0;
	c->rc = c->op == POST ? sem_post(c->sem) : c->op == WAIT ? sem_wait(c->sem)
		: c->op == TRYWAIT ? sem_trywait(c->sem) : pthread_barrier_wait(c->bar);
	c->err = errno;
	__atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static int
done(void *arg)
{
	return __atomic_load_n(&((struct call *)arg)->done, __ATOMIC_ACQUIRE);
}

/* A field of a hash, read past the proxy; -1 if missing. */
struct field {
	const char *key, *name;
	long long want;
};

static long long
hget(const char *key, const char *name)
{
	return th_redis_int(&srv, "HGET %s %s", key, name);
}

static int
field_is(void *arg)
{
	struct field *f = arg;

	return hget(f->key, f->name) == f->want;
}

/* The shim's own loop took over the wait: the core's tries went
 * unanswered (its "waiting for the backend" line, or the call returned). */
static int shim_waits;

static void
logger(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	if (strstr(msg, "sem_wait: waiting for the backend"))
		__atomic_store_n(&shim_waits, 1, __ATOMIC_RELEASE);
	fprintf(stderr, "dmutex: %s\n", msg);
}

static int
shim_waits_or_done(void *arg)
{
	return __atomic_load_n(&shim_waits, __ATOMIC_ACQUIRE) || done(arg);
}

/* No key matches the pattern: the server forgot the operation's result. */
static int
none_match(void *arg)
{
	redisReply *r = th_redis_cmd(&srv, "KEYS %s", (const char *)arg);
	int none = r && r->type == REDIS_REPLY_ARRAY && r->elements == 0;

	if (r)
		freeReplyObject(r);
	return none;
}

/*
 * Start c, let its first try be applied (f holds) with the reply dropped,
 * keep the server away until no key matches `kept` (without kept: until
 * the shim's loop has taken over from the core's tries), bring it back,
 * and wait for c to return.  0, or -1 (a message) if a step did not
 * happen.
 */
static int
lose_reply_then_outage(struct call *c, struct field *f, const char *kept)
{
	int wait_ms = 20000 * th_slowdown();

	th_proxy_set_mode(proxy, TH_PROXY_DROP_REPLIES);
	if (pthread_create(&c->thr, NULL, run, c)) {
		fprintf(stderr, "pthread_create failed\n");
		return -1;
	}
	if (!th_wait_until(field_is, f, wait_ms)) {
		fprintf(stderr, "%s %s never became %lld (it is %lld): the first try was not applied\n",
				f->key, f->name, f->want, hget(f->key, f->name));
		return -1;
	}
	th_proxy_set_mode(proxy, TH_PROXY_BLACKHOLE);
	if (kept && !th_wait_until(none_match, (void *)kept, wait_ms)) {
		fprintf(stderr, "%s still there after %d ms\n", kept, wait_ms);
		return -1;
	}
	if (!kept && !th_wait_until(shim_waits_or_done, c, wait_ms)) {
		fprintf(stderr, "the call neither returned nor waited within %d ms\n", wait_ms);
		return -1;
	}
	th_proxy_set_mode(proxy, TH_PROXY_PASS);
	if (!th_wait_until(done, c, wait_ms)) {
		fprintf(stderr, "the call did not return within %d ms of the server's return\n",
				wait_ms);
		return -1;
	}
	pthread_join(c->thr, NULL);
	return 0;
}

/* A holder's post on a semaphore of 1: one permit again, not two. */
static void
post_applied_once(void)
{
	struct call c = { .op = POST };
	struct field f = { "dmutex:sem:{/post}", "v", 1 };

	EXPECT((c.sem = sem_open("/post", O_CREAT | O_EXCL, 0600, 1)) != SEM_FAILED);
	EXPECT(sem_wait(c.sem) == 0);
	EXPECT(hget(f.key, "v") == 0);
	if (lose_reply_then_outage(&c, &f, "dmutex:semop:{/post}:*")) {
		th_failures++;
		return;
	}
	IS((int)hget(f.key, "v"), 1);
	IS(c.rc, -1);
	IS(c.err, EIO);
	EXPECT(sem_close(c.sem) == 0);
}

/* A wait on a semaphore of 2 takes one permit, not both. */
static void
wait_applied_once(void)
{
	struct call c = { .op = WAIT };
	struct field f = { "dmutex:sem:{/take}", "v", 1 };

	EXPECT((c.sem = sem_open("/take", O_CREAT | O_EXCL, 0600, 2)) != SEM_FAILED);
	if (lose_reply_then_outage(&c, &f, "dmutex:semop:{/take}:*")) {
		th_failures++;
		return;
	}
	IS((int)hget(f.key, "v"), 1);
	IS(c.rc, -1);
	IS(c.err, EIO);
	EXPECT(sem_close(c.sem) == 0);
}

/* A trywait whose reply was lost took the only permit, and the server
 * stayed away through the core's tries: when it answers again, within
 * the window, the trywait says so (0), rather than EAGAIN with that
 * permit taken by nobody. */
static void
trywait_told_of_its_lost_take(void)
{
	struct call c = { .op = TRYWAIT };
	struct field f = { "dmutex:sem:{/try}", "v", 0 };

	EXPECT((c.sem = sem_open("/try", O_CREAT | O_EXCL, 0600, 1)) != SEM_FAILED);
	__atomic_store_n(&shim_waits, 0, __ATOMIC_RELEASE);    /* the earlier waits' lines */
	if (lose_reply_then_outage(&c, &f, NULL)) {
		th_failures++;
		return;
	}
	IS((int)hget(f.key, "v"), 0);
	IS(c.rc, 0);
	EXPECT(sem_post(c.sem) == 0);
	EXPECT(sem_close(c.sem) == 0);
}

/* An arrival at a barrier of 2 counts once: the lone waiter stays. */
static void
arrival_counted_once(void)
{
	static pthread_barrier_t bar, one;
	struct call c = { .op = BARRIER, .bar = &bar };
	char key[512], kept[512];
	struct field f = { key, "arrived", 1 };
	redisReply *r;

	EXPECT(pthread_barrier_init(&bar, NULL, 2) == 0);
	r = th_redis_cmd(&srv, "KEYS %s", "dmutex:barrier:*");
	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 1) {
		fprintf(stderr, "not one barrier key\n");
		th_failures++;
		if (r)
			freeReplyObject(r);
		return;
	}
	snprintf(key, sizeof key, "%s", r->element[0]->str);
	snprintf(kept, sizeof kept, "dmutex:barop:%s:*", strchr(key, '{'));
	freeReplyObject(r);
	/* The server has the arrival's script before replies are dropped
	 * (its NOSCRIPT answer would be dropped too). */
	EXPECT(pthread_barrier_init(&one, NULL, 1) == 0);
	IS(pthread_barrier_wait(&one), PTHREAD_BARRIER_SERIAL_THREAD);
	if (lose_reply_then_outage(&c, &f, kept)) {
		th_failures++;
		return;
	}
	IS((int)hget(key, "arrived"), 1);
	IS((int)hget(key, "gen"), 0);
	IS(c.rc, EIO);
}

int main(void)
{
	char base[64], url[700], opts[128];
	int slow;

	if (th_redis_start(&srv, NULL)) {
		fprintf(stderr, "redis-server did not start\n");
		return 1;
	}
	if (!(proxy = th_proxy_start(srv.port))) {
		th_redis_stop(&srv);
		return 1;
	}
	/* Short timeouts, so that the outage outlasts the window soon. */
	slow = th_slowdown();
	snprintf(base, sizeof base, "redis://127.0.0.1:%d", th_proxy_port(proxy));
	snprintf(opts, sizeof opts, "command_timeout_ms=%d&retry_window_ms=%d", 250 * slow, 3000 * slow);
	if (th_url_with(url, sizeof url, base, opts))
		return 1;
	setenv("DMUTEX_URL", url, 1);
	setenv("DMUTEX_NAMESPACE", "shimretry", 1);
	dmutex_set_logger(logger, NULL);
	post_applied_once();
	wait_applied_once();
	trywait_told_of_its_lost_take();
	arrival_counted_once();
	th_proxy_stop(proxy);
	th_redis_stop(&srv);
	return th_check_status();
}
