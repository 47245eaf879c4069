/* Where a lock lives in Redis.  The {name} hash tag keeps a lock's keys in
 * one cluster slot. */
#ifndef DMUTEX_KEYS_H
#define DMUTEX_KEYS_H

#include <stdio.h>
#include <string.h>

#include "backend.h"    /* DMUTEX__KEY_MAX */

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

/* v in decimal into buf (>= 21 bytes), without printf: the script
 * arguments of every lock and unlock. */
static inline void
dmutex__dec(char *buf, long long v)
{
	unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
	char tmp[20];
	size_t n = 0, k = 0;

	do
		tmp[n++] = (char)('0' + u % 10);
	while ((u /= 10));
	if (v < 0)
		buf[k++] = '-';
	while (n)
		buf[k++] = tmp[--n];
	buf[k] = '\0';
}

#endif
