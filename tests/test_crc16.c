/*
 * Redis Cluster key slots (src/backend/redis/crc16.c): the vectors of the Redis
 * Cluster specification, and agreement with CLUSTER KEYSLOT of a real
 * cluster-enabled redis-server for every shape of key the library may meet:
 * tags, empty tags, nested and unbalanced braces, binary bytes, NULs, the
 * library's own key and channel names.
 */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/redis/crc16.h"
#include "harness.h"

static unsigned slot_of(const char *s)
{
	return dmutex__key_slot(s, strlen(s));
}

Test(crc16, spec_vectors)
{
	/* "CRC16 ... Output for "123456789": 31C3" */
	cr_assert_eq(dmutex__crc16("123456789", 9), 0x31C3);
	cr_assert_eq(dmutex__crc16("", 0), 0);
	cr_assert_eq(dmutex__crc16(NULL, 0), 0);
	cr_assert_eq(slot_of("123456789"), 0x31C3 % 16384);
	/* the examples of CLUSTER KEYSLOT's documentation and of the spec */
	cr_assert_eq(slot_of("foo"), 12182);
	cr_assert_eq(slot_of("somekey"), 11058);
	cr_assert_eq(slot_of("{06S}"), 0);
	cr_assert_eq(slot_of(""), 0);
	cr_assert_eq(dmutex__key_slot(NULL, 0), 0);
	/* hash tags, the spec's four cases */
	cr_assert_eq(slot_of("{user1000}.following"), slot_of("user1000"));
	cr_assert_eq(slot_of("{user1000}.followers"), slot_of("user1000"));
	cr_assert_eq(slot_of("foo{}{bar}"), dmutex__crc16("foo{}{bar}", 10) % 16384);
	cr_assert_eq(slot_of("foo{{bar}}zap"), slot_of("{bar"));
	cr_assert_eq(slot_of("foo{bar}{zap}"), slot_of("bar"));
	/* no closing brace, braces the other way round */
	cr_assert_eq(slot_of("foo{bar"), dmutex__crc16("foo{bar", 7) % 16384);
	cr_assert_eq(slot_of("}bar{"), dmutex__crc16("}bar{", 5) % 16384);
	/* binary: the tag may hold a NUL, the key is not cut at one */
	cr_assert_eq(dmutex__key_slot("x{a\0b}y", 7), dmutex__crc16("a\0b", 3) % 16384);
	cr_assert_neq(dmutex__key_slot("a\0b", 3), dmutex__key_slot("a", 1));
}

/* Every key and channel of one lock shares its {NAME} slot (names are 1 to
 * 512 bytes; with '}' inside, the tag is shorter but the same for all) --
 * except for a name that starts with '}': see below. */
Test(crc16, library_names_share_a_slot)
{
	const char *names[] = { "orders", "a}b", "{x}", "{", "with space", "x{y}z", "a}" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		char lock[700], meta[700], wake[700], cwake[760];
		snprintf(lock, sizeof lock, "dmutex:lock:{%s}", names[i]);
		snprintf(meta, sizeof meta, "dmutex:meta:{%s}", names[i]);
		snprintf(wake, sizeof wake, "dmutex:wake:{%s}", names[i]);
		snprintf(cwake, sizeof cwake, "dmutex:cwake:{%s}:0123456789abcdef", names[i]);
		cr_assert_eq(slot_of(meta), slot_of(lock), "%s", names[i]);
		cr_assert_eq(slot_of(wake), slot_of(lock), "%s", names[i]);
		cr_assert_eq(slot_of(cwake), slot_of(lock), "%s", names[i]);
	}
	/* The tag is the first {...}: a prefix with braces decides the slot.
	 * A balanced one only puts every lock in one slot, but "{" alone or an
	 * empty "{}" splits one lock's keys over several slots (CROSSSLOT):
	 * the Cluster backend must refuse a prefix with a brace. */
	cr_assert_eq(slot_of("{app}:lock:{orders}"), slot_of("{app}:lock:{stock}"));
	cr_assert_neq(slot_of("a{:lock:{orders}"), slot_of("a{:meta:{orders}"));
	cr_assert_neq(slot_of("a{}:lock:{orders}"), slot_of("a{}:meta:{orders}"));
	/* A name that starts with '}' makes the tag "{}", empty: the whole key
	 * is hashed and the lock's keys land in different slots.  The Cluster
	 * backend must refuse such a name (or the key scheme must change). */
	cr_assert_neq(slot_of("dmutex:lock:{}x}"), slot_of("dmutex:meta:{}x}"));
}

/* Deterministic keys of every shape, so that a failure is reproducible:
 * key i is made again from i when its reply is checked. */
static uint64_t rng;
static unsigned next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (unsigned)(rng >> 32);
}

enum { N = 20000, SHORT_MAX = 64, LONG_LEN = 700 };

static size_t make_key(int i, char *k)
{
	static const char alphabet[] = "{}{}{}ab:.z\0\xff\x80 ";
	if (i < 3) {                                 /* a few long ones */
		memset(k, 'k', LONG_LEN);
		k[LONG_LEN - 5 - i] = '{';
		k[LONG_LEN - 2] = '}';
		return LONG_LEN;
	}
	rng = 0x9E3779B97F4A7C15ull ^ ((uint64_t)i * 0x100000001B3ull);
	size_t len = next() % (SHORT_MAX + 1);
	int any = next() % 4 == 0;
	for (size_t j = 0; j < len; j++)
		k[j] = any ? (char)(next() & 0xff)          /* any byte */
		           : alphabet[next() % (sizeof alphabet - 1)]; /* brace-heavy */
	return len;
}

Test(crc16, agrees_with_cluster_keyslot, .timeout = 120)
{
	struct th_redis node;
	cr_assert_eq(th_redis_start_as(&node, NULL, TH_REDIS_CLUSTER), 0);
	redisContext *c = th_tcp_connect(node.port, 10000);
	cr_assert_not_null(c);
	char key[LONG_LEN];
	for (int i = 0; i < N; i++) {
		size_t len = make_key(i, key);
		const char *argv[] = { "CLUSTER", "KEYSLOT", key };
		size_t argl[] = { 7, 7, len };
		cr_assert_eq(redisAppendCommandArgv(c, 3, argv, argl), REDIS_OK);
	}
	int tags = 0;
	for (int i = 0; i < N; i++) {
		redisReply *r;
		cr_assert_eq(redisGetReply(c, (void **)&r), REDIS_OK, "%s", c->errstr);
		cr_assert_eq(r->type, REDIS_REPLY_INTEGER);
		size_t len = make_key(i, key);
		unsigned mine = dmutex__key_slot(key, len);
		cr_assert_eq((long long)mine, r->integer, "key %d (%zu bytes): %u, server %lld", i,
		             len, mine, r->integer);
		tags += mine != dmutex__crc16(key, len) % 16384;
		freeReplyObject(r);
	}
	cr_assert_gt(tags, N / 10, "too few keys with a hash tag (%d): the test proves little", tags);
	redisFree(c);
	th_redis_stop(&node);
}
