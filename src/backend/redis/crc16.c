/*
 * Redis Cluster key slots.  Bit by bit rather than with a 512-byte table:
 * a slot is computed once per request on keys of at most a few hundred
 * bytes, next to a network round trip.
 */
#include <string.h>

#include "crc16.h"

uint16_t
dmutex__crc16(const void *buf, size_t len)
{
	const unsigned char *p = buf;
	unsigned crc = 0;

	while (len--) {
		crc ^= (unsigned)*p++ << 8;
		for (int i = 0; i < 8; i++)
			crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
	}
	return (uint16_t)crc;
}

unsigned
dmutex__key_slot(const void *key, size_t len)
{
	const char *k = key;
	const char *open = len ? memchr(k, '{', len) : NULL;

	if (open) {
		size_t rest = len - (size_t)(open + 1 - k);
		const char *close = memchr(open + 1, '}', rest);

		/* "{}" is no tag: the whole key counts, as in Redis */
		if (close && close > open + 1)
			return dmutex__crc16(open + 1, (size_t)(close - open - 1)) % DMUTEX__SLOTS;
	}
	return dmutex__crc16(k, len) % DMUTEX__SLOTS;
}
