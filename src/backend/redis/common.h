/* What every backend sends and reads: script arguments and reply shapes.
 * Shared so that one Redis and Redlock speak to a node identically. */
#ifndef DMUTEX_BACKEND_COMMON_H
#define DMUTEX_BACKEND_COMMON_H

/* The longest lease (url.h: lease_ms 100 .. 86400000): no server PTTL is larger. */
#define DMUTEX__PTTL_MAX 86400000LL

#include <hiredis/hiredis.h>

#include "backend/backend.h"
#include "base/base.h"
#include "keys.h"
#include "backend/redis/scripts/scripts.h"

/* Keys per renew script call: bounds one script's run time in Redis. */
#define DMUTEX__RENEW_CHUNK 256

/* Script argument counts, keys included (see each .lua). */
#define DMUTEX__ACQ_ARGC 12
#define DMUTEX__REL_ARGC 6
#define DMUTEX__RENEW_NKEYS(k) (2 * (k))
#define DMUTEX__RENEW_ARGC(k) (4 * (k) + 1)

/* The lock value a free lock gets (acquire.lua, layout 3):
 * "3 token - 0 - lease since pid tid hostid host": the version, the token,
 * 32 hex digits, five numbers of 21 digits at most, the host id (63) and
 * the host name (255), with their spaces. */
#define DMUTEX__VALUE_MAX (8 + DMUTEX__TOKEN_HEX + 4 * 22 + 64 + 256 + 8)

struct dmutex__acq_argv {
	char lk[DMUTEX__KEY_MAX], mk[DMUTEX__KEY_MAX], ch[DMUTEX__KEY_MAX];
	char lease[24], keep[24];       /* dmutex__udec: 21 bytes at most */
	char value[DMUTEX__VALUE_MAX];
	char stamp[24];
	const char *argv[DMUTEX__ACQ_ARGC];     /* 2 keys, 10 args */
	/* The plain SET of a free non-robust lock (redis.c): the same key,
	 * value and lease, one command instead of a script. */
	const char *take[6];
};

struct dmutex__rel_argv {
	char lk[DMUTEX__KEY_MAX], mk[DMUTEX__KEY_MAX], ch[DMUTEX__KEY_MAX], mode[24], idle[24];
	const char *argv[DMUTEX__REL_ARGC];     /* 2 keys, 4 args */
};

/* Buffers for one renew chunk. */
struct dmutex__renew_argv {
	char (*keys)[DMUTEX__KEY_MAX];          /* lock, meta, lock, meta... */
	char (*leases)[12];
	char idle[16];
	const char **argv;
};

/* Every number from the server is range-checked before use (issue 16
 * item 6): 0 and *out if r (or element i of the array r) is an integer
 * from lo to hi, else -1. */
int dmutex__int_in(const redisReply *r, long long lo, long long hi, long long *out);
int dmutex__int_elem_in(const redisReply *r, size_t i, long long lo, long long hi, long long *out);

/* Who takes a lock, as its record keeps it for operators: "since_ms pid
 * tid hostid host" (hostid "-" when unknown). */
void dmutex__redis_who(const struct dmutex__backend *be, long tid, char *buf, size_t len);
void dmutex__acq_argv(struct dmutex__backend *be, const struct dmutex__acq *a,
		struct dmutex__acq_argv *x);
/* Fill a->status, fence, died, pttl_ms from an acquire reply; -1 if the
 * reply does not have the shape acquire.lua returns or a number is out of
 * range.  DMUTEX__ACQ_VERSION (keys of another version) is logged here
 * against display. */
int dmutex__acq_reply(const char *display, const redisReply *r, struct dmutex__acq *a);

/* Element i of an array reply as a fencing token: a decimal string (it may
 * pass 2^53) or an integer, 1 .. INT64_MAX.  0, or -1 if it is not one. */
/* acquire.lua's step: "0" the token at the hold's first dmutex_fence
 * (fence.lua), "1" at once counted on (Redlock), "2" at once (Cluster). */
const char *dmutex__fence_at_acquire(const struct dmutex__backend *be);
/* The same, where "0" says "not assigned yet" (acquire.lua): *out 0. */
int dmutex__fence_elem0(const redisReply *r, size_t i, uint64_t *out);
/* What the plain SET of a lock answered when the key was there (redis.c):
 * the value of another holder's lock, which fills a like acquire.lua's
 * {1, pttl} (pttl unknown), {2} or {3, v}; 1 if only the script can
 * answer (the lock is ours already: a retry; or it is kept for its
 * process and must be asked back), -1 if it is no lock value. */
int dmutex__take_busy(const char *display, const char *val, size_t len, struct dmutex__acq *a);
int dmutex__fence_elem(const redisReply *r, size_t i, uint64_t *out);

/* A release's script and argument count: a clean one is unlock.lua, which
 * takes the first three of dmutex__rel_argv's (keys and token). */
#define DMUTEX__REL_SCRIPT(mode) ((mode) == DMUTEX__REL_CLEAN ? DMUTEX__SCRIPT_UNLOCK : DMUTEX__SCRIPT_RELEASE)
#define DMUTEX__REL_NARGS(mode) ((mode) == DMUTEX__REL_CLEAN ? 3 : DMUTEX__REL_ARGC)

void dmutex__rel_argv(struct dmutex__backend *be, const char *name, const char *token,
		int mode, struct dmutex__rel_argv *x);
/* fair_release.lua's answer of a hand-over to next, {1, fence, died}: 0
 * with next filled in and *released, or -1 for an unexpected shape. */
int dmutex__rel_to_reply(const redisReply *r, struct dmutex__handoff *next, int *released);
/* 0 and *released, or -1 for an unexpected shape; a release whose wake-up
 * the server refused is logged against display and name.  Not released
 * covers release.lua's 0 (another holder's key) and DMUTEX__REL_GONE (no
 * key at all), which only Redlock tells apart (r->integer). */
#define DMUTEX__REL_GONE 3
int dmutex__rel_reply(const char *display, const char *name, const redisReply *r,
		int *released);

int dmutex__renew_argv_init(struct dmutex__renew_argv *x);
void dmutex__renew_argv_free(struct dmutex__renew_argv *x);
/* Fill x for chunk c of rn[0..n); returns the chunk's key count. */
size_t dmutex__renew_chunk(struct dmutex__backend *be, const struct dmutex__renewal *rn,
		size_t n, size_t c, struct dmutex__renew_argv *x);
/* Per-key results of one renew reply into out[0..k): 1, 0, or -1 when the
 * reply is not what renew.lua returns (logged against `display`). */
void dmutex__renew_reply(const char *display, const redisReply *r, size_t k, int *out);

#endif
