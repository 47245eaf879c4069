/* dsem_t: binding, creation, destruction, post, getvalue, unlink. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/bind.h"
#include "core/sem.h"

/* Create or join `name` in the backend, then the local state. */
static int
open_sem(struct dmutex_client *c, const char *name, size_t len, unsigned value, int flags,
		struct dmutex__sem **out)
{
	struct dmutex__sem *sx;
	int created, err;

	if (c->be->quorum) {
		dmutex__log(DMUTEX_LOG_ERROR, "semaphore '%s': a client over several masters cannot hold a semaphore",
				name);
		return ENOTSUP;
	}
	if ((err = dmutex__sem_create(c->be, name, value, flags, &created)))
		return err;
	if (created == -2) {
		dmutex__log(DMUTEX_LOG_INFO, "semaphore '%s' does not exist (no creation asked)", name);
		return ENOENT;
	}
	if (created < 0) {
		dmutex__log(DMUTEX_LOG_INFO, "semaphore '%s' exists already (exclusive creation asked)", name);
		return EEXIST;
	}
	if (!(sx = calloc(1, sizeof *sx + len + 1)))
		return ENOMEM;
	sx->client = c;
	sx->value = value;
	sx->users = 1;
	memcpy(sx->name, name, len + 1);
	/* The client counts what points into it, so that it is not closed
	 * under a semaphore. */
	__atomic_fetch_add(&c->mutexes, 1, __ATOMIC_ACQ_REL);
	*out = sx;
	return 0;
}

static int
sem_init_impl(dsem_t *s, const char *name, unsigned value, dmutex_client_t *client, int flags)
{
	struct dmutex__sem *sx;
	size_t len;
	int err;

	if (!s)
		return EINVAL;
	if ((err = dmutex__name_ok(name, &len)))
		return err;
	if (value > DSEM_VALUE_MAX || (flags & ~(DSEM_EXCL | DSEM_NOCREATE)) ||
			flags == (DSEM_EXCL | DSEM_NOCREATE)) {
		dmutex__log(DMUTEX_LOG_ERROR, "dsem_init('%s'): %s", name,
				value > DSEM_VALUE_MAX ? "value above DSEM_VALUE_MAX" : "bad flags");
		return EINVAL;
	}
	if (!client && (err = dmutex__client_default(&client)))
		return err;
	if ((err = open_sem(client, name, len, value, flags, &sx)))
		return err;
	s->__static_name = NULL;
	s->__value = value;
	__atomic_store_n(&s->__impl, sx, __ATOMIC_RELEASE);
	__atomic_store_n(&s->__magic, DSEM__MAGIC_INIT, __ATOMIC_RELEASE);
	return 0;
}

static int
static_ok(const void *h, const char *name)
{
	if (((const dsem_t *)h)->__value <= DSEM_VALUE_MAX)
		return 0;
	dmutex__log(DMUTEX_LOG_ERROR, "semaphore '%s': initial value above DSEM_VALUE_MAX", name);
	return EINVAL;
}

static int
open_static(struct dmutex_client *c, const char *name, size_t len, const void *h, int type, void **out)
{
	struct dmutex__sem *sx;
	int err;

	(void)type;
	if (!(err = open_sem(c, name, len, ((const dsem_t *)h)->__value, 0, &sx)))
		*out = sx;
	return err;
}

static int
retire(void *obj)
{
	struct dmutex__sem *sx = obj;

	return __atomic_load_n(&sx->waiters, __ATOMIC_ACQUIRE) ? EBUSY : 0;
}

void
dmutex__sem_put(struct dmutex__sem *sx)
{
	if (!dmutex__obj_drop(&sx->users))
		return;
	__atomic_fetch_sub(&sx->client->mutexes, 1, __ATOMIC_ACQ_REL);
	free(sx);
}

static void
close_sem(void *obj)
{
	dmutex__sem_put(obj);
}

static const struct dmutex__kind kind = {
	.what = "semaphore", .destroy_call = "dsem_destroy",
	.init_magic = DSEM__MAGIC_INIT, .static_magic = DSEM__MAGIC_STATIC,
	.static_ok = static_ok, .open_static = open_static, .retire = retire, .close = close_sem,
};

int
dmutex__sem_resolve(dsem_t *s, struct dmutex__sem **out)
{
	void *sx;
	int err = dmutex__resolve_handle(&kind, DMUTEX__HANDLE(s, NULL), &sx);

	if (!err)
		*out = sx;
	return err;
}

static int
sem_destroy_impl(dsem_t *s)
{
	return dmutex__destroy_object(&kind, DMUTEX__HANDLE(s, NULL));
}

static int
sem_unlink_impl(const char *name, dmutex_client_t *client)
{
	size_t len;
	int existed, err;

	if ((err = dmutex__name_ok(name, &len)))
		return err;
	if (!client && (err = dmutex__client_default(&client)))
		return err;
	if ((err = dmutex__sem_unlink(client->be, name, &existed)))
		return err;
	return existed ? 0 : ENOENT;
}

static int
sem_post_impl(dsem_t *s)
{
	struct dmutex__op o;
	int err;

	if ((err = dmutex__op_init(&o)))
		return err;
	return dmutex__sem_post_op(s, &o);
}

int
dmutex__sem_post_op(dsem_t *s, struct dmutex__op *o)
{
	struct dmutex__sem *sx;
	long long v;
	int err;

	if ((err = dmutex__sem_resolve(s, &sx)))
		return err;
	/* The waiter this post wakes may destroy s before it returns. */
	dmutex__obj_hold(&sx->users);
	if (!(err = dmutex__sem_post_once(sx, o, &v)) && v < 0) {
		dmutex__log(DMUTEX_LOG_ERROR, "dsem_post('%s'): the value is at DSEM_VALUE_MAX", sx->name);
		err = EOVERFLOW;
	}
	dmutex__sem_put(sx);
	return err;
}

static int
sem_getvalue_impl(dsem_t *s, int *value)
{
	struct dmutex__sem *sx;
	long long v;
	int err;

	if (!value)
		return EINVAL;
	if ((err = dmutex__sem_resolve(s, &sx)) || (err = dmutex__sem_get(sx->client->be, sx->name, sx->value, &v)))
		return err;
	*value = v < 0 ? 0 : v > DSEM_VALUE_MAX ? (int)DSEM_VALUE_MAX : (int)v;
	return 0;
}

/* The pause between tries: short, a lost reply is usually a dropped
 * connection that the next call re-dials. */
static void
pause_try(int attempt, int64_t until)
{
	int64_t wake = dmutex__now_ns() + (int64_t)(attempt + 1) * 50 * DMUTEX__MS;

	dmutex__sleep_until(until && until < wake ? until : wake);
}

/* A timed wait's take (o->until set) asks again only before its
 * deadline, and after a try that may have been applied only while a read
 * of the server's clock (retry.h, not bounded by the deadline) cannot
 * outlast it: the wait then ends with EIO, whether a permit was taken
 * unknown, as when the backend stays away. */
static int
time_for_another(const struct dmutex__sem *sx, const struct dmutex__op *o)
{
	const struct dmutex__config *cfg = &sx->client->cfg;
	int64_t left = o->until - dmutex__now_ns();

	if (!o->until)
		return 1;
	if (o->lost_at && !o->deadline_ms)
		left -= ((int64_t)cfg->connect_timeout_ms + cfg->command_timeout_ms) * DMUTEX__MS;
	return left > 0;
}

static int
server_time(void *arg, long long *ms)
{
	struct dmutex__sem *sx = arg;

	return dmutex__sem_time(sx->client->be, sx->name, ms);
}

int
dmutex__sem_take_once(struct dmutex__sem *sx, struct dmutex__op *o, int *taken)
{
	unsigned window = sx->client->cfg.retry_window_ms;
	long long r = 0;
	int err;

	for (int i = 0;; i++) {
		if (!(err = dmutex__op_begin(o, window, server_time, sx, "wait", "semaphore", sx->name)))
			err = dmutex__sem_take(sx->client->be, sx->name, sx->value, o, &r);
		err = dmutex__op_end(o, err, !err && r == DMUTEX__OP_REFUSED, "wait", "semaphore", sx->name);
		if (err != EIO || o->expired || i + 1 >= DMUTEX__SEM_TRIES || !time_for_another(sx, o))
			break;
		pause_try(i, o->until);
		if (!time_for_another(sx, o))
			break;
	}
	*taken = !err && r == 1;
	return err;
}

int
dmutex__sem_post_once(struct dmutex__sem *sx, struct dmutex__op *o, long long *value)
{
	unsigned window = sx->client->cfg.retry_window_ms;
	int err;

	for (int i = 0;; i++) {
		if (!(err = dmutex__op_begin(o, window, server_time, sx, "post", "semaphore", sx->name)))
			err = dmutex__sem_post(sx->client->be, sx->name, sx->value, o, value);
		err = dmutex__op_end(o, err, !err && *value == DMUTEX__OP_REFUSED, "post", "semaphore",
				sx->name);
		if (err != EIO || o->expired || i + 1 >= DMUTEX__SEM_TRIES)
			break;
		pause_try(i, 0);
	}
	return err;
}

/* Not cancellation points (README "Cancellation"): a thread cancelled
 * half-way through a request would leave its state unknown. */
int
dsem_init(dsem_t *s, const char *name, unsigned value, dmutex_client_t *client, int flags)
{
	int cs = dmutex__nocancel(), err = sem_init_impl(s, name, value, client, flags);

	dmutex__cancel_restore(cs);
	return err;
}

int
dsem_destroy(dsem_t *s)
{
	int cs = dmutex__nocancel(), err = sem_destroy_impl(s);

	dmutex__cancel_restore(cs);
	return err;
}

int
dsem_unlink(const char *name, dmutex_client_t *client)
{
	int cs = dmutex__nocancel(), err = sem_unlink_impl(name, client);

	dmutex__cancel_restore(cs);
	return err;
}

int
dsem_post(dsem_t *s)
{
	int cs = dmutex__nocancel(), err = sem_post_impl(s);

	dmutex__cancel_restore(cs);
	return err;
}

int
dsem_getvalue(dsem_t *s, int *value)
{
	int cs = dmutex__nocancel(), err = sem_getvalue_impl(s, value);

	dmutex__cancel_restore(cs);
	return err;
}
