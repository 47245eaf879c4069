/*
 * A mutex's distributed lock given back at once, whoever of this process
 * holds it: the shim's pthread_mutex_destroy of a locked mutex (shim/
 * pthread_mutex.c).  The hold record is the core's, so the core ends it;
 * the shim only asks (core/shim.h).
 */
#include <errno.h>
#include <string.h>

#include "internal.h"
#include "base/lockorder.h"
#include "shim.h"

/*
 * The distributed lock of m, held by a thread of this process, released
 * now whoever holds it: the program is done with the mutex, and other
 * processes must not wait for the lease.  The holder's later unlock finds
 * the mutex destroyed.  1 if there was a hold to release, 2 if it was a
 * robust mutex's.
 */
int
dmutex__mutex_release_now(dmutex_t *m)
{
	int robust;
	char token[DMUTEX__TOKEN_HEX + 1];
	struct dmutex__mutex *mx;
	struct dmutex__entry *e;

	if (dmutex__resolve(m, &mx))
		return 0;
	e = mx->entry;
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	if (!e->held || e->releasing) {
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		return 0;
	}
	memcpy(token, e->token, sizeof token);
	robust = e->robust;
	e->releasing = 1;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	dmutex__renewer_remove(e->client, e);
	dmutex__renewer_release(e->client, e->name, token, DMUTEX__REL_CLEAN, dmutex__now_ns() +
			(int64_t)e->client->cfg.command_timeout_ms * DMUTEX__MS, NULL, e->lease_ms);
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	dmutex__entry_forget(e);
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	return robust ? 2 : 1;
}
