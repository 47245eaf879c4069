/*
 * The etcd backend's semaphore and barrier operations called directly
 * (they are internal), against a real etcd member: an operation asked
 * again with the same token, as the core asks after a lost reply, answers
 * the first try's result and is not applied twice; a retry past its
 * deadline that finds no result is refused.  (A proxy dropping replies
 * cannot single out the write: each try starts with a read whose reply it
 * would drop too.)
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "dmutex.h"
#include "core/internal.h"
#include "core/retry.h"
#include "backend/backend.h"
#include "harness.h"
#include "harness_etcd.h"

static struct th_etcd etcd;
static dmutex_client_t *client;
static struct dmutex__backend *be;

static void up(void)
{
	if (!th_etcd_available())
		cr_skip_test("etcd is not installed (Debian: apt-get install etcd-server)");
	cr_assert_eq(th_etcd_start(&etcd, NULL, 0), 0, "etcd did not start");
	char url[400];
	snprintf(url, sizeof url, "%s?command_timeout_ms=%d", etcd.url, th_command_timeout_ms());
	cr_assert_eq(dmutex_client_open(&client, url), 0);
	be = client->be;
}

static void down(void)
{
	if (client)
		dmutex_client_close(client);
	th_etcd_stop(&etcd);
}

TestSuite(etcd_ops, .init = up, .fini = down, .timeout = 60);

static void op_new(struct dmutex__op *o)
{
	cr_assert_eq(dmutex__op_init(o), 0);
	o->window_ms = 5000;
}

Test(etcd_ops, post_and_take_asked_again_apply_once)
{
	struct dmutex__op o;
	long long v = -9, taken = -9;
	int created = -9;
	cr_assert_eq(dmutex__sem_create(be, "t-ops-sem", 0, 0, &created), 0);
	cr_assert_eq(created, 1);
	op_new(&o);
	cr_assert_eq(dmutex__sem_post(be, "t-ops-sem", 0, &o, &v), 0);
	cr_assert_eq(v, 1);
	/* the reply was "lost": the same try again */
	cr_assert_eq(dmutex__sem_post(be, "t-ops-sem", 0, &o, &v), 0);
	cr_assert_eq(v, 1, "asked again: %lld", v);
	cr_assert_eq(dmutex__sem_get(be, "t-ops-sem", 0, &v), 0);
	cr_assert_eq(v, 1, "applied twice: the value is %lld", v);
	op_new(&o);
	cr_assert_eq(dmutex__sem_post(be, "t-ops-sem", 0, &o, &v), 0);
	cr_assert_eq(v, 2, "a new post: %lld", v);
	op_new(&o);
	cr_assert_eq(dmutex__sem_take(be, "t-ops-sem", 0, &o, &taken), 0);
	cr_assert_eq(taken, 1);
	cr_assert_eq(dmutex__sem_take(be, "t-ops-sem", 0, &o, &taken), 0);
	cr_assert_eq(taken, 1);
	cr_assert_eq(dmutex__sem_get(be, "t-ops-sem", 0, &v), 0);
	cr_assert_eq(v, 1, "one take asked twice left %lld", v);
}

Test(etcd_ops, retry_past_its_deadline_is_refused)
{
	struct dmutex__op o;
	long long v = -9, now = 0;
	op_new(&o);
	cr_assert_eq(dmutex__sem_time(be, "t-ops-late", &now), 0);
	cr_assert_gt(now, 1600000000000LL, "not a time in ms: %lld", now);
	o.deadline_ms = now - 1;        /* a retry that arrives too late */
	cr_assert_eq(dmutex__sem_post(be, "t-ops-late", 0, &o, &v), 0);
	cr_assert_eq(v, DMUTEX__OP_REFUSED);
	cr_assert_eq(dmutex__sem_get(be, "t-ops-late", 0, &v), 0);
	cr_assert_eq(v, 0, "a refused post was applied: %lld", v);
	/* a retry past its deadline whose first try was applied still gets
	 * the result (it is kept): nothing applied twice, nothing refused */
	op_new(&o);
	cr_assert_eq(dmutex__sem_post(be, "t-ops-late", 0, &o, &v), 0);
	o.deadline_ms = now - 1;
	cr_assert_eq(dmutex__sem_post(be, "t-ops-late", 0, &o, &v), 0);
	cr_assert_eq(v, 1);
}

Test(etcd_ops, arrival_asked_again_counts_once)
{
	struct dmutex__op a, b;
	long long gen = -9, other = -9;
	int serial = -9;
	cr_assert_eq(dmutex__barrier_create(be, "t-ops-bar", 2, &other), 0);
	cr_assert_eq(other, 0);
	cr_assert_eq(dmutex__barrier_create(be, "t-ops-bar", 3, &other), 0);
	cr_assert_eq(other, 2, "the count it has: %lld", other);
	op_new(&a);
	cr_assert_eq(dmutex__barrier_arrive(be, "t-ops-bar", 2, &a, &gen, &serial), 0);
	cr_assert_eq(gen, 0);
	cr_assert_eq(serial, 0);
	cr_assert_eq(dmutex__barrier_arrive(be, "t-ops-bar", 2, &a, &gen, &serial), 0);
	cr_assert_eq(serial, 0, "the same arrival completed the cycle");
	cr_assert_eq(dmutex__barrier_gen(be, "t-ops-bar", 2, &gen), 0);
	cr_assert_eq(gen, 0, "one arrival, asked twice, counted twice");
	op_new(&b);
	cr_assert_eq(dmutex__barrier_arrive(be, "t-ops-bar", 2, &b, &gen, &serial), 0);
	cr_assert_eq(gen, 0);
	cr_assert_eq(serial, 1);
	cr_assert_eq(dmutex__barrier_gen(be, "t-ops-bar", 2, &gen), 0);
	cr_assert_eq(gen, 1);
}
