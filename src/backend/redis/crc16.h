/* Redis Cluster key slots (the Redis Cluster specification, "Key
 * distribution model"). */
#ifndef DMUTEX_CRC16_H
#define DMUTEX_CRC16_H

#include <stddef.h>
#include <stdint.h>

#define DMUTEX__SLOTS 16384u

/* CRC16-XMODEM (CCITT polynomial 0x1021, initial value 0, no reflection,
 * no final XOR) of len bytes. */
uint16_t dmutex__crc16(const void *buf, size_t len);

/* The slot of a key: CRC16 of its hash tag (the bytes between the first '{'
 * and the first '}' after it, when there is at least one) or else of the
 * whole key, mod 16384.  Binary-safe. */
unsigned dmutex__key_slot(const void *key, size_t len);

#endif
