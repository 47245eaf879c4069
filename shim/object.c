/* Objects made ready for the core before each shim call (object.h). */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"
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

int
dmutex__shim_mutex_ready(dmutex_t *m, const char *call)
{
	int err;

	if (!m)
		return EINVAL;
	if ((err = zero_static(m, sizeof *m, &m->__magic, &m->__static_name, m->__reserved,
			DMUTEX__MAGIC_STATIC, "pthread mutex", call)))
		return err;
	return dmutex__shim_stamp_check(DMUTEX__SHIM_STAMP(m), "pthread mutex", m);
}

int
dmutex__shim_cond_ready(dcond_t *c, const char *call)
{
	int err;

	if (!c)
		return EINVAL;
	if ((err = zero_static(c, sizeof *c, &c->__magic, &c->__static_name, c->__reserved,
			DCOND__MAGIC_STATIC, "pthread condition variable", call)))
		return err;
	return dmutex__shim_stamp_check(DMUTEX__SHIM_STAMP(c), "pthread condition variable", c);
}
