/* Where a lock lives in Redis.  The {name} hash tag keeps a lock's keys in
 * one cluster slot. */
#ifndef DMUTEX_KEYS_H
#define DMUTEX_KEYS_H

#include <stdio.h>

#include "backend.h"    /* DMUTEX__KEY_MAX */

static inline int
dmutex__key(char *buf, const char *prefix, const char *kind, const char *name)
{
	return snprintf(buf, DMUTEX__KEY_MAX, "%s%s:{%s}", prefix, kind, name);
}

#endif
