/* pthread barriers through the shim: dbarrier_t named by call site, the
 * backend being away waited out. */
#include <errno.h>
#include <pthread.h>

#include "core/shim.h"
#include "pause.h"
#include "include/dmutex_shim_sync.h"
#include "name.h"

/* dmutex_shim_sync.h's barrier attributes store pthread's values as 0 and 1. */
_Static_assert(PTHREAD_PROCESS_PRIVATE == 0 && PTHREAD_PROCESS_SHARED == 1,
		"the barrier attributes' pshared values are not pthread's");

int
dmutex_shim_barrier_init(dbarrier_t *b, const dmutex_shim_barrierattr_t *a, unsigned count,
		const char *site)
{
	char name[DMUTEX_NAME_MAX + 1];
	int err;

	if (!b || (a && a->__magic != DMUTEX__SHIM_BATTR_MAGIC))
		return EINVAL;
	if ((err = dmutex__shim_site_name(DMUTEX__SHIM_BARRIER, b, site, name)))
		return err;
	for (int attempt = 0; (err = dbarrier_init(b, name, count, NULL)) == EIO; attempt++) {
		if (attempt % 10 == 0)
			dmutex__log(DMUTEX_LOG_WARN, "pthread_barrier_init('%s'): waiting for the backend", name);
		dmutex__shim_backoff(attempt);
	}
	if (err)
		dmutex__shim_site_release(DMUTEX__SHIM_BARRIER, b);
	return err;
}

int
dmutex_shim_barrier_destroy(dbarrier_t *b)
{
	int64_t until = dmutex__now_ns() + 2000 * DMUTEX__MS;
	int err;

	/* POSIX lets the first thread a cycle releases destroy the barrier;
	 * the others may still be hearing of the release (one message).
	 * Give them that time, as pthread_cond_destroy does. */
	while ((err = dbarrier_destroy(b)) == EBUSY && dmutex__now_ns() < until)
		dmutex__shim_pause_ms(1);

	if (!err)
		dmutex__shim_site_release(DMUTEX__SHIM_BARRIER, b);
	return err;
}

int
dmutex_shim_barrier_wait(dbarrier_t *b)
{
	struct dmutex__shim_op o;
	/* Not a cancellation point (POSIX): an arrival is counted whole or
	 * not at all. */
	int cs = dmutex__nocancel(), err;

	/* Until the retry window has passed since a try went unanswered: then
	 * EIO, the arrival counted or not. */
	if (!(err = dmutex__shim_op_init(&o)))
		for (int attempt = 0; (err = dmutex__shim_barrier_wait(b, &o)) == EIO &&
				!dmutex__shim_op_expired(&o); attempt++) {
			if (attempt % 10 == 0)
				dmutex__log(DMUTEX_LOG_WARN, "pthread_barrier_wait: waiting for the backend");
			dmutex__shim_backoff(attempt);
		}
	dmutex__cancel_restore(cs);
	/* DBARRIER_SERIAL_THREAD is glibc's PTHREAD_BARRIER_SERIAL_THREAD. */
	return err;
}
