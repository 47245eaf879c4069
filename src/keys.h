/* Where a lock lives in Redis.  The {name} hash tag keeps a lock's keys in
 * one cluster slot. */
#ifndef DMUTEX_KEYS_H
#define DMUTEX_KEYS_H

#include <stdio.h>

/* prefix (<= 128) + kind + name (<= 512) + braces */
#define DMUTEX__KEY_MAX (128 + 16 + 512 + 4)

static inline int
dmutex__key(char *buf, const char *prefix, const char *kind, const char *name)
{
	return snprintf(buf, DMUTEX__KEY_MAX, "%s%s:{%s}", prefix, kind, name);
}

#endif
