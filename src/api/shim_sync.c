/*
 * The shim's door to condition variables, semaphores and barriers
 * (core/shim.h): their private state read, and their operations asked
 * again with the operation the shim keeps between tries.
 *
 * The shim's storage is copied in and out of a struct dmutex__op around
 * each call rather than cast: the call keeps no pointer to it, and a copy
 * of 96 bytes next to a round trip to the backend costs nothing.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/barrier.h"
#include "core/cond.h"
#include "core/sem.h"
#include "core/shim.h"

_Static_assert(sizeof(struct dmutex__op) <= sizeof(struct dmutex__shim_op),
		"struct dmutex__shim_op has no room for a struct dmutex__op");

static void
op_out(const struct dmutex__shim_op *so, struct dmutex__op *o)
{
	memcpy(o, so->u.bytes, sizeof *o);
}

static void
op_in(struct dmutex__shim_op *so, const struct dmutex__op *o)
{
	memcpy(so->u.bytes, o, sizeof *o);
}

int
dmutex__shim_op_init(struct dmutex__shim_op *so)
{
	struct dmutex__op o;
	int err = dmutex__op_init(&o);

	op_in(so, &o);
	return err;
}

int
dmutex__shim_op_expired(const struct dmutex__shim_op *so)
{
	struct dmutex__op o;

	op_out(so, &o);
	return o.expired;
}

int
dmutex__shim_op_pending(const struct dmutex__shim_op *so)
{
	struct dmutex__op o;

	op_out(so, &o);
	return o.lost_at != 0;
}

int
dmutex__shim_sem_wait(dsem_t *s, struct dmutex__shim_op *so, int64_t until, int try_only, int cs)
{
	struct dmutex__op o;
	int err;

	op_out(so, &o);
	err = dmutex__sem_wait_until(s, &o, until, try_only, cs);
	op_in(so, &o);
	return err;
}

int
dmutex__shim_sem_post(dsem_t *s, struct dmutex__shim_op *so)
{
	struct dmutex__op o;
	int err;

	op_out(so, &o);
	err = dmutex__sem_post_op(s, &o);
	op_in(so, &o);
	return err;
}

int
dmutex__shim_sem_name(dsem_t *s, const char **name)
{
	struct dmutex__sem *sx;
	int err;

	if ((err = dmutex__sem_resolve(s, &sx)))
		return err;
	*name = sx->name;
	return 0;
}

int
dmutex__shim_barrier_wait(dbarrier_t *b, struct dmutex__shim_op *so)
{
	struct dmutex__op o;
	int err;

	op_out(so, &o);
	err = dmutex__barrier_wait_op(b, &o);
	op_in(so, &o);
	return err;
}

int
dmutex__shim_cond_clock(dcond_t *c, clockid_t *clock)
{
	struct dmutex__cond *cx;
	int err;

	if ((err = dmutex__cond_resolve(c, &cx)))
		return err;
	*clock = cx->clock;
	return 0;
}

void
dmutex__shim_own_thread(void)
{
	dmutex__own_thread_begin();
}

void
dmutex__shim_exit_if_alone(void)
{
	dmutex__exit_if_alone();
}

int
dmutex__shim_mutex_fresh(const char *name)
{
	struct dmutex_client *c;
	int dropped = 0, err;

	if ((err = dmutex__client_default(&c)) || (err = dmutex__mutex_fresh(c->be, name, &dropped)))
		return err == ENOTSUP ? 0 : err;
	if (dropped > 0)
		dmutex__log(DMUTEX_LOG_INFO, "mutex '%s': no process uses it: the owner-died or not-recoverable "
				"state an earlier one left is dropped", name);
	return 0;
}

int
dmutex__shim_mutex_robust_name(dmutex_t *m, char out[DMUTEX_NAME_MAX + 1])
{
	struct dmutex__mutex *mx;

	if (dmutex__resolve(m, &mx) || !mx->robust)
		return 0;
	snprintf(out, DMUTEX_NAME_MAX + 1, "%s", mx->entry->name);
	return 1;
}
