/* The debug check of the lock hierarchy in lockorder.h. */
#include "lockorder.h"

#ifndef NDEBUG
#include <stdio.h>
#include <stdlib.h>

static const char *const level_names[DMUTEX__LK_NLEVELS] = {
	"", "default_mu", "create_mu", "clients_mu", "fold_mu", "entry.mu", "client.mu",
	"renewer.mu", "waiter.mu", "node.mu", "log_mu",
};

/* Per thread: how many locks of each level it holds.  A forked child's
 * only thread inherits its parent thread's counts, which the child
 * handler's unlocks then bring back to zero. */
static _Thread_local struct dmutex__lo held;

struct dmutex__lo *
dmutex__lo_self(void)
{
	return &held;
}

void
dmutex__lo_violated(int level, const char *what, unsigned mask)
{
	int l = DMUTEX__LK_NLEVELS - 1;

	while (l > level && !(mask & (1u << l)))
		l--;
	/* Not dmutex__log: log_mu may be the lock in question. */
	fprintf(stderr, "dmutex: lock order violated: %s (%s) taken while "
			"holding %s; the order is internal.h's\n",
			level_names[level], what, level_names[l]);
	abort();
}

void
dmutex__lo_unheld(int level)
{
	fprintf(stderr, "dmutex: lock order: %s released but not held\n", level_names[level]);
	abort();
}

#else
/* ISO C: a translation unit is not empty. */
typedef int dmutex__lockorder_unused;
#endif
