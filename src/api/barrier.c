/*
 * dbarrier_t.  A wait:
 * 1. subscribe to the barrier's channel (before arriving, so that the
 *    publish of the arrival that completes the cycle cannot be missed);
 * 2. arrive: one script counts the arrival; the one that completes the
 *    cycle moves the generation on, publishes, and is the serial waiter;
 * 3. the others sleep until the sequence moves (or a once-per-lease safety
 *    re-check) and read the generation: past the one they arrived in,
 *    they are released.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/barrier.h"
#include "core/bind.h"

#define TRIES 3

static int
open_barrier(struct dmutex_client *c, const char *name, size_t len, unsigned count,
		struct dmutex__barrier **out)
{
	struct dmutex__barrier *bx;
	long long other;
	int err;

	if (count == 0 || count > INT_MAX) {
		dmutex__log(DMUTEX_LOG_ERROR, "barrier '%s': count %u is not 1 to INT_MAX", name, count);
		return EINVAL;
	}
	if (c->be->quorum) {
		dmutex__log(DMUTEX_LOG_ERROR, "barrier '%s': a client over several masters cannot hold a barrier",
				name);
		return ENOTSUP;
	}
	if ((err = dmutex__barrier_create(c->be, name, count, &other)))
		return err;
	if (other) {
		dmutex__log(DMUTEX_LOG_ERROR, "barrier '%s' exists with count %lld; this process asked for %u",
				name, other, count);
		return EINVAL;
	}
	if (!(bx = calloc(1, sizeof *bx + len + 1)))
		return ENOMEM;
	bx->client = c;
	bx->count = count;
	bx->users = 1;
	memcpy(bx->name, name, len + 1);
	/* The client is not closed under a barrier. */
	__atomic_fetch_add(&c->mutexes, 1, __ATOMIC_ACQ_REL);
	*out = bx;
	return 0;
}

static int
barrier_init_impl(dbarrier_t *b, const char *name, unsigned count, dmutex_client_t *client)
{
	struct dmutex__barrier *bx;
	size_t len;
	int err;

	if (!b)
		return EINVAL;
	if ((err = dmutex__name_ok(name, &len)))
		return err;
	if (!client && (err = dmutex__client_default(&client)))
		return err;
	if ((err = open_barrier(client, name, len, count, &bx)))
		return err;
	b->__static_name = NULL;
	b->__count = count;
	__atomic_store_n(&b->__impl, bx, __ATOMIC_RELEASE);
	__atomic_store_n(&b->__magic, DBARRIER__MAGIC_INIT, __ATOMIC_RELEASE);
	return 0;
}

static int
open_static(struct dmutex_client *c, const char *name, size_t len, const void *h, int type, void **out)
{
	struct dmutex__barrier *bx;
	int err;

	(void)type;
	if (!(err = open_barrier(c, name, len, ((const dbarrier_t *)h)->__count, &bx)))
		*out = bx;
	return err;
}

static int
retire(void *obj)
{
	struct dmutex__barrier *bx = obj;

	return __atomic_load_n(&bx->waiters, __ATOMIC_ACQUIRE) ? EBUSY : 0;
}

static void
close_barrier(void *obj)
{
	struct dmutex__barrier *bx = obj;

	if (!dmutex__obj_drop(&bx->users))
		return;
	__atomic_fetch_sub(&bx->client->mutexes, 1, __ATOMIC_ACQ_REL);
	free(bx);
}

static const struct dmutex__kind kind = {
	.what = "barrier", .destroy_call = "dbarrier_destroy",
	.init_magic = DBARRIER__MAGIC_INIT, .static_magic = DBARRIER__MAGIC_STATIC,
	.open_static = open_static, .retire = retire, .close = close_barrier,
};

static int
resolve(dbarrier_t *b, struct dmutex__barrier **out)
{
	void *bx;
	int err = dmutex__resolve_handle(&kind, DMUTEX__HANDLE(b, NULL), &bx);

	if (!err)
		*out = bx;
	return err;
}

static int
barrier_destroy_impl(dbarrier_t *b)
{
	return dmutex__destroy_object(&kind, DMUTEX__HANDLE(b, NULL));
}

static int
barrier_wait_impl(dbarrier_t *b)
{
	struct dmutex__op o;
	int err;

	if ((err = dmutex__op_init(&o)))
		return err;
	return dmutex__barrier_wait_op(b, &o);
}

static int
server_time(void *arg, long long *ms)
{
	struct dmutex__barrier *bx = arg;

	return dmutex__barrier_time(bx->client->be, bx->name, bx->count, ms);
}

/* Arrive, asking again while the backend fails (TRIES calls, within the
 * client's retry_window_ms: retry.h). */
static int
arrive(struct dmutex__barrier *bx, struct dmutex__op *o, long long *gen, int *serial)
{
	unsigned window = bx->client->cfg.retry_window_ms;
	int err;

	for (int i = 0;; i++) {
		if (!(err = dmutex__op_begin(o, window, server_time, bx, "wait", "barrier", bx->name)))
			err = dmutex__barrier_arrive(bx->client->be, bx->name, bx->count, o, gen, serial);
		err = dmutex__op_end(o, err, !err && *gen == DMUTEX__OP_REFUSED_GEN, "wait", "barrier",
				bx->name);
		if (err != EIO || o->expired || i + 1 >= TRIES)
			return err;
		dmutex__sleep_until(dmutex__now_ns() + (int64_t)(i + 1) * 50 * DMUTEX__MS);
	}
}

static int
wait_held(struct dmutex__barrier *bx, struct dmutex__op *o)
{
	struct dmutex_client *cl;
	struct dmutex__wsub *sub;
	char channel[DMUTEX__KEY_MAX];
	long long mine, now;
	int64_t recheck_ns;
	int err, serial = 0;

	cl = bx->client;
	dmutex__barrier_channel(bx->client->be, bx->name, channel);
	__atomic_fetch_add(&bx->waiters, 1, __ATOMIC_ACQ_REL);
	/* 1. */
	if (!(sub = dmutex__waiter_sub(cl->be, channel,
			dmutex__now_ns() + (int64_t)cl->cfg.command_timeout_ms * DMUTEX__MS))) {
		err = ENOMEM;
		goto out;
	}
	/* 2.  The same token on every try: counted once. */
	if ((err = arrive(bx, o, &mine, &serial)) || serial)
		goto out_sub;
	/* 3.  A backend that fails here is waited out: our arrival counts,
	 * and leaving would break the cycle for the others. */
	recheck_ns = (int64_t)cl->cfg.lease_ms * DMUTEX__MS;
	for (;;) {
		uint64_t seq = dmutex__wsub_seq(cl->be, sub);

		if (!dmutex__barrier_gen(bx->client->be, bx->name, bx->count, &now) && now > mine)
			break;
		dmutex__wsub_wait(cl->be, sub, seq, dmutex__now_ns() +
				(seq ? recheck_ns : recheck_ns / 10 + DMUTEX__MS));
	}
out_sub:
	/* Released: no longer a waiter that destroy must refuse for, though
	 * still a user until it returns. */
	__atomic_fetch_sub(&bx->waiters, 1, __ATOMIC_ACQ_REL);
	dmutex__waiter_unsub(cl->be, sub);
	goto done;
out:
	__atomic_fetch_sub(&bx->waiters, 1, __ATOMIC_ACQ_REL);
done:
	if (err)
		return err;
	return serial ? DBARRIER_SERIAL_THREAD : 0;
}

int
dmutex__barrier_wait_op(dbarrier_t *b, struct dmutex__op *o)
{
	struct dmutex__barrier *bx;
	int err;

	if ((err = resolve(b, &bx)))
		return err;
	/* The thread a cycle releases first may destroy b while the others
	 * are still leaving (POSIX allows it once the cycle completed). */
	dmutex__obj_hold(&bx->users);
	err = wait_held(bx, o);
	close_barrier(bx);
	return err;
}

/* Not cancellation points (README "Cancellation"): a thread cancelled
 * half-way through a request would leave its state unknown. */
int
dbarrier_init(dbarrier_t *b, const char *name, unsigned count, dmutex_client_t *client)
{
	int cs = dmutex__nocancel(), err = barrier_init_impl(b, name, count, client);

	dmutex__cancel_restore(cs);
	return err;
}

int
dbarrier_destroy(dbarrier_t *b)
{
	int cs = dmutex__nocancel(), err = barrier_destroy_impl(b);

	dmutex__cancel_restore(cs);
	return err;
}

int
dbarrier_wait(dbarrier_t *b)
{
	int cs = dmutex__nocancel(), err = barrier_wait_impl(b);

	dmutex__cancel_restore(cs);
	return err;
}
