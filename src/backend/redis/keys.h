/* Where a lock lives in Redis.  The {name} hash tag keeps a lock's keys in
 * one cluster slot. */
#ifndef DMUTEX_KEYS_H
#define DMUTEX_KEYS_H

#include <stdio.h>
#include <string.h>

#include "backend/backend.h"    /* DMUTEX__KEY_MAX */

/* "<prefix><kind>:{<name>}" cut to DMUTEX__KEY_MAX - 1 bytes (url.c bounds
 * prefix and name: never cut); the length it wanted, as snprintf says.
 * Copies, not snprintf: a lock and unlock format five keys. */
static inline int
dmutex__key(char *buf, const char *prefix, const char *kind, const char *name)
{
	const char *part[5] = { prefix, kind, ":{", name, "}" };
	size_t k = 0, want = 0;

	for (int i = 0; i < 5; i++) {
		size_t len = strlen(part[i]), room = DMUTEX__KEY_MAX - 1 - k;
		want += len;
		if (len > room)
			len = room;
		memcpy(buf + k, part[i], len);
		k += len;
	}
	buf[k] = '\0';
	return (int)want;
}

#endif
