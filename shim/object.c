/* Objects made ready for the core before each shim call (object.h). */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/shim.h"
#include "local.h"
#include "name.h"
#include "object.h"
#include "stamp.h"

/* The magic of a zero-filled object while one thread names it. */
#define MAGIC_NAMING 0x7a6e616dUL /* "zman" */

static int
rest_zero(const void *obj, size_t size)
{
	const unsigned char *p = obj;

	for (size_t i = sizeof(unsigned long); i < size; i++)
		if (p[i])
			return 0;
	return 1;
}

/*
 * A zero-filled object (magic 0, every field 0) in static storage becomes
 * a static one named NAMESPACE/@MODULE+0xOFFSET; elsewhere EINVAL.  The
 * thread that turns magic 0 into MAGIC_NAMING names it; others wait for
 * the static magic (the naming takes microseconds).  Objects whose magic
 * is 0 but fields are not are left to the core, which says "not
 * initialized".
 */
static int
zero_static(void *obj, size_t size, unsigned long *magic_p, const char **name_p, void **reserved,
		unsigned long static_magic, const char *what, const char *call)
{
	char site[DMUTEX__SHIM_SITE_MAX + 1], name[DMUTEX_NAME_MAX + 1];
	const char *iname, *isite;
	unsigned long expected = 0;
	int err;

	for (;;) {
		unsigned long magic = __atomic_load_n(magic_p, __ATOMIC_ACQUIRE);

		if (magic == MAGIC_NAMING) {
			sched_yield();
			continue;
		}
		if (magic != 0)
			return 0;
		if (__atomic_compare_exchange_n(magic_p, &expected, MAGIC_NAMING, 0,
				__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			break;
		expected = 0;
	}
	if (!rest_zero(obj, size)) {
		__atomic_store_n(magic_p, 0, __ATOMIC_RELEASE);
		return 0;
	}
	err = dmutex__shim_zero_name(obj, site, name);
	if (err == ESRCH) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: %s %p is zero-filled and not in static storage (heap, stack or "
				"a mapping): it was never initialized.  Call pthread_%s_init; only a zero-filled static "
				"object counts as initialized, as its initializer", call, what, obj,
				strcmp(what, "pthread mutex") ? "cond" : "mutex");
		err = EINVAL;
	}
	if (!err && (!(iname = dmutex__shim_intern(name)) || !(isite = dmutex__shim_intern(site))))
		err = ENOMEM;
	if (err) {
		__atomic_store_n(magic_p, 0, __ATOMIC_RELEASE);
		return err;
	}
	*name_p = iname;
	reserved[0] = DMUTEX__SHIM_ZERO;
	reserved[1] = (void *)(uintptr_t)DMUTEX_NORMAL;
	reserved[4] = (void *)(uintptr_t)isite;
	__atomic_store_n(magic_p, static_magic, __ATOMIC_RELEASE);
	return 0;
}

/* A static object's site and the name it would have (the namer's). */
static int
static_site(const dmutex_t *o, int kind, const char **site, char name[DMUTEX_NAME_MAX + 1])
{
	if (o->__reserved[0] == DMUTEX__SHIM_ZERO) {
		*site = o->__reserved[4];
		snprintf(name, DMUTEX_NAME_MAX + 1, "%s", o->__static_name);
		return 0;
	}
	*site = o->__static_name;
	return dmutex__shim_static_name(kind, o, o->__static_name, name);
}

/* __reserved[2] of a static object turning local: never a stamp (stamp.c's
 * tag is another value), never read by the core. */
#define LOCAL_MARK ((void *)(uintptr_t)0x6c6f63616cu) /* "local" */

/*
 * A static object of the shim not yet bound: local or not, by its site
 * and name; made local here (a heap object in __impl; the magic says so
 * last).  The decision reads only fields nobody writes; threads racing to
 * make it local agree, and __impl's compare-and-swap picks one object.
 */
static int
static_local(dmutex_t *o, int kind, size_t size, unsigned long local_magic, void **out)
{
	char name[DMUTEX_NAME_MAX + 1];
	const char *site;
	void *mine, *expected = NULL;
	int type = (int)(uintptr_t)o->__reserved[1], err;

	*out = NULL;
	if ((err = static_site(o, kind, &site, name)))
		return err;
	if (!dmutex__shim_is_local(site, name))
		return 0;
	if (!(mine = calloc(1, size)))
		return ENOMEM;
	if (kind == DMUTEX__SHIM_MUTEX) {
		struct dmutex__shim_lmutex *l = mine;
		pthread_mutexattr_t a;

		pthread_mutexattr_init(&a);
		pthread_mutexattr_settype(&a, type == DMUTEX_RECURSIVE ? PTHREAD_MUTEX_RECURSIVE
				: type == DMUTEX_ERRORCHECK ? PTHREAD_MUTEX_ERRORCHECK : PTHREAD_MUTEX_NORMAL);
		pthread_mutex_init(&l->mu, &a);
		pthread_mutexattr_destroy(&a);
		l->site = site;
		l->pid = getpid();
	} else {
		struct dmutex__shim_lcond *l = mine;

		pthread_cond_init(&l->cv, NULL);
		l->site = site;
	}
	__atomic_store_n(&o->__reserved[2], LOCAL_MARK, __ATOMIC_RELEASE);
	if (__atomic_compare_exchange_n(&o->__impl, &expected, mine, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		dmutex__shim_announce(o, kind == DMUTEX__SHIM_MUTEX ? "mutex" : "condition variable", name, site, 1);
		__atomic_store_n(&o->__magic, local_magic, __ATOMIC_RELEASE);
		*out = mine;
	} else {
		free(mine);
		*out = expected;
	}
	return 0;
}

/* The local object of o, or NULL: o is (to be) distributed. */
static int
local_of(dmutex_t *o, int kind, size_t size, unsigned long static_magic, unsigned long init_magic,
		unsigned long local_static, void **out)
{
	unsigned long magic = __atomic_load_n(&o->__magic, __ATOMIC_ACQUIRE);
	void *impl;

	*out = NULL;
	if (magic == init_magic) {
		*out = o;
		return 0;
	}
	if (magic == local_static) {
		*out = __atomic_load_n(&o->__impl, __ATOMIC_ACQUIRE);
		return 0;
	}
	if (magic != static_magic || (o->__reserved[0] != DMUTEX__SHIM_SITE && o->__reserved[0] != DMUTEX__SHIM_ZERO))
		return 0;
	if ((impl = __atomic_load_n(&o->__impl, __ATOMIC_ACQUIRE))) {
		if (__atomic_load_n(&o->__reserved[2], __ATOMIC_ACQUIRE) == LOCAL_MARK)
			*out = impl;
		return 0;
	}
	return static_local(o, kind, size, local_static, out);
}

int
dmutex__shim_mutex_ready(dmutex_t *m, const char *call, pthread_mutex_t **local)
{
	void *l;
	int err;

	*local = NULL;
	if (!m)
		return EINVAL;
	if ((err = zero_static(m, sizeof *m, &m->__magic, &m->__static_name, m->__reserved,
			DMUTEX__MAGIC_STATIC, "pthread mutex", call)))
		return err;
	if ((err = local_of(m, DMUTEX__SHIM_MUTEX, sizeof(struct dmutex__shim_lmutex), DMUTEX__MAGIC_STATIC,
			DMUTEX__SHIM_LOCAL_INIT, DMUTEX__SHIM_LOCAL_STATIC, &l)))
		return err;
	if (l) {
		*local = &((struct dmutex__shim_lmutex *)l)->mu;
		return 0;
	}
	return dmutex__shim_stamp_check(DMUTEX__SHIM_STAMP(m), "pthread mutex", m);
}

int
dmutex__shim_cond_ready(dcond_t *c, const char *call, pthread_cond_t **local)
{
	void *l;
	int err;

	*local = NULL;
	if (!c)
		return EINVAL;
	if ((err = zero_static(c, sizeof *c, &c->__magic, &c->__static_name, c->__reserved,
			DCOND__MAGIC_STATIC, "pthread condition variable", call)))
		return err;
	/* dcond_t starts as dmutex_t does (dmutex.h) */
	if ((err = local_of((dmutex_t *)(void *)c, DMUTEX__SHIM_COND, sizeof(struct dmutex__shim_lcond),
			DCOND__MAGIC_STATIC, DCOND__SHIM_LOCAL_INIT, DCOND__SHIM_LOCAL_STATIC, &l)))
		return err;
	if (l) {
		*local = &((struct dmutex__shim_lcond *)l)->cv;
		return 0;
	}
	return dmutex__shim_stamp_check(DMUTEX__SHIM_STAMP(c), "pthread condition variable", c);
}
