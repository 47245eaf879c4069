/* The debug check of the lock hierarchy in lockorder.h. */
#include "lockorder.h"

#ifndef NDEBUG
#include <stdio.h>
#include <stdlib.h>

static const char *const level_names[DMUTEX__LK_NLEVELS] = {
	"", "default_mu", "create_mu", "clients_mu", "entry.mu", "client.mu",
	"renewer.mu", "waiter.mu", "node.mu", "log_mu",
};

/* Per thread: how many locks of each level it holds.  A forked child's
 * only thread inherits its parent thread's counts, which the child
 * handler's unlocks then bring back to zero. */
static _Thread_local unsigned short held[DMUTEX__LK_NLEVELS];

void
dmutex__lo_acquired(int level, const char *what)
{
	for (int l = level + 1; l < DMUTEX__LK_NLEVELS; l++)
		if (held[l]) {
			/* Not dmutex__log: log_mu may be the lock in question. */
			fprintf(stderr, "dmutex: lock order violated: %s (%s) taken while "
					"holding %s; the order is internal.h's\n",
					level_names[level], what, level_names[l]);
			abort();
		}
	held[level]++;
}

void
dmutex__lo_released(int level)
{
	if (!held[level]) {
		fprintf(stderr, "dmutex: lock order: %s released but not held\n", level_names[level]);
		abort();
	}
	held[level]--;
}
#else
/* ISO C: a translation unit is not empty. */
typedef int dmutex__lockorder_unused;
#endif
