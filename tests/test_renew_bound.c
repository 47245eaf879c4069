/*
 * Issue 16 item 4: a renewal call is bounded by the lease deadline it
 * guards, not by command_timeout_ms.  With the server stuck (CLIENT PAUSE,
 * SIGSTOP) and a command timeout far longer than the lease, onlost must
 * fire no later than T0 + lease - drift (T0: before the acquire was sent;
 * we take the time the lock call returned, which is later, as the bound)
 * plus a margin for scheduling; and not before T0 + lease - drift.  A
 * stopped Redlock node does not hold up the renewals on the others.
 */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dmutex.h"
#include "dmt.h"
#include "harness.h"

/* 600 ms, 3x that under the sanitizers, where the renewal thread's turn
 * after the deadline comes ~3x later too. */
#define LEASE_MS (600 * dmt_slowdown())
/* lease/100 + 2 ms, as DMUTEX__DRIFT_NS */
#define DRIFT_MS (LEASE_MS / 100 + 2)
/* Scheduling slack on a loaded 2-core machine: a sixth of the lease (was
 * 60 ms, a timer's wake-up and one thread switch at load 5 and more), half
 * a renewal interval, so that a loss noticed only at the next renewal
 * round, or at the 20 s command timeout, is still late. */
#define MARGIN_MS (LEASE_MS / 6)

static struct th_redis srv[3];
static _Atomic int64_t lost_at_ms;

static void
on_lost(const char *name, void *arg)
{
	(void)name;
	(void)arg;
	atomic_store(&lost_at_ms, th_now_ms());
}

static int
lost_seen(void *arg)
{
	(void)arg;
	return atomic_load(&lost_at_ms) != 0;
}

static void
down(void)
{
	for (int i = 0; i < 3; i++)
		if (srv[i].pid) {
			kill(srv[i].pid, SIGCONT);
			th_redis_stop(&srv[i]);
		}
}

TestSuite(renew_bound, .fini = down, .timeout = 30);

static void
open_held(dmutex_client_t **c, dmutex_t *m, const char *url, long long *t_before, long long *t_after)
{
	dmutex_attr_t a;

	cr_assert_eq(dmutex_client_open(c, url), 0, "open %s", url);
	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, *c), 0);
	cr_assert_eq(dmutex_attr_setlease(&a, LEASE_MS), 0);
	cr_assert_eq(dmutex_attr_setonlost(&a, on_lost, NULL), 0);
	cr_assert_eq(dmutex_init(m, "renew-bound", &a), 0);
	dmutex_attr_destroy(&a);
	*t_before = th_now_ms();
	cr_assert_eq(dmutex_lock(m), 0);
	*t_after = th_now_ms();
}

static void
assert_lost_in_time(dmutex_t *m, long long t_before, long long t_after)
{
	long long at;

	cr_assert(th_wait_until(lost_seen, NULL, LEASE_MS + 5000), "onlost never fired");
	at = atomic_load(&lost_at_ms);
	fprintf(stderr, "renew_bound: onlost %lld ms after the lock returned (deadline %d ms)\n",
			at - t_after, LEASE_MS - DRIFT_MS);
	cr_assert_leq(at, t_after + LEASE_MS - DRIFT_MS + MARGIN_MS,
			"onlost %lld ms after lock, later than the lease deadline %d ms + %d",
			at - t_after, LEASE_MS - DRIFT_MS, MARGIN_MS);
	cr_assert_geq(at, t_before + LEASE_MS - DRIFT_MS,
			"onlost %lld ms after lock, before the lease deadline", at - t_before);
	(void)m;
}

Test(renew_bound, client_pause_longer_than_the_lease)
{
	char url[700];
	dmutex_client_t *c;
	dmutex_t m;
	long long t0, t1;
	redisReply *r;

	cr_assert_eq(th_redis_start(&srv[0], NULL), 0);
	th_url_with(url, sizeof url, srv[0].url, "command_timeout_ms=20000");
	open_held(&c, &m, url, &t0, &t1);
	/* Every client, our renewals included, waits out the pause. */
	r = th_redis_cmd(&srv[0], "CLIENT PAUSE %d ALL", 5 * LEASE_MS / 2);
	cr_assert(r && r->type == REDIS_REPLY_STATUS, "CLIENT PAUSE failed");
	freeReplyObject(r);
	assert_lost_in_time(&m, t0, t1);
	r = th_redis_cmd(&srv[0], "CLIENT UNPAUSE");
	if (r)
		freeReplyObject(r);
	cr_assert_eq(dmutex_unlock(&m), ENOLCK);
	dmutex_destroy(&m);
	dmutex_client_close(c);
}

Test(renew_bound, sigstop_of_the_server)
{
	char url[700];
	dmutex_client_t *c;
	dmutex_t m;
	long long t0, t1;

	cr_assert_eq(th_redis_start(&srv[0], NULL), 0);
	th_url_with(url, sizeof url, srv[0].url, "command_timeout_ms=20000");
	open_held(&c, &m, url, &t0, &t1);
	cr_assert_eq(kill(srv[0].pid, SIGSTOP), 0);
	assert_lost_in_time(&m, t0, t1);
	kill(srv[0].pid, SIGCONT);
	cr_assert_eq(dmutex_unlock(&m), ENOLCK);
	dmutex_destroy(&m);
	dmutex_client_close(c);
}

Test(renew_bound, redlock_majority_stopped)
{
	char url[2200], list[2200];
	dmutex_client_t *c;
	dmutex_t m;
	long long t0, t1;

	for (int i = 0; i < 3; i++)
		cr_assert_eq(th_redis_start(&srv[i], NULL), 0);
	snprintf(list, sizeof list, "%s,%s,%s", srv[0].url, srv[1].url, srv[2].url);
	th_url_with(url, sizeof url, list, "command_timeout_ms=20000");
	open_held(&c, &m, url, &t0, &t1);
	cr_assert_eq(kill(srv[0].pid, SIGSTOP), 0);
	cr_assert_eq(kill(srv[1].pid, SIGSTOP), 0);
	assert_lost_in_time(&m, t0, t1);
	kill(srv[0].pid, SIGCONT);
	kill(srv[1].pid, SIGCONT);
	cr_assert_eq(dmutex_unlock(&m), ENOLCK);
	dmutex_destroy(&m);
	dmutex_client_close(c);
}

/* Three lease lengths of renewals with one node stopped: the stuck node
 * costs each renewal at most its node timeout, so nothing is lost. */
Test(renew_bound, redlock_one_node_stopped_keeps_the_hold)
{
	char url[2200], list[2200];
	dmutex_client_t *c;
	dmutex_t m;
	long long t0, t1, end;

	for (int i = 0; i < 3; i++)
		cr_assert_eq(th_redis_start(&srv[i], NULL), 0);
	snprintf(list, sizeof list, "%s,%s,%s", srv[0].url, srv[1].url, srv[2].url);
	th_url_with(url, sizeof url, list, "command_timeout_ms=20000");
	open_held(&c, &m, url, &t0, &t1);
	cr_assert_eq(kill(srv[0].pid, SIGSTOP), 0);
	end = th_now_ms() + 3 * LEASE_MS;
	/* The passage of time is what is tested here. */
	while (th_now_ms() < end && !atomic_load(&lost_at_ms)) {
		struct timespec ts = { 0, 20 * 1000000L };
		nanosleep(&ts, NULL);
	}
	cr_assert_eq(atomic_load(&lost_at_ms), 0, "the hold was lost with only one node stopped");
	cr_assert_eq(dmutex_unlock(&m), 0);
	kill(srv[0].pid, SIGCONT);
	dmutex_destroy(&m);
	dmutex_client_close(c);
}
