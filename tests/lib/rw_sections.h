/*
 * The critical sections of the read-write lock tests (native and shim),
 * counted in Redis so that every process sees them: a writer finds nobody
 * else inside and bumps n (the total shows lost updates), a reader finds no
 * writer.  Each returns 1 if the exclusion did not hold, else 0.  The
 * caller sets w, r and n to 0 first.
 */
#ifndef TH_RW_SECTIONS_H
#define TH_RW_SECTIONS_H

#include "harness.h"

static inline int
th_rw_write_section(const struct th_redis *srv)
{
	int bad = th_redis_int(srv, "INCR w") != 1 || th_redis_int(srv, "GET r") != 0;
	long long n = th_redis_int(srv, "GET n");

	th_redis_int(srv, "SET n %lld", n + 1);
	th_redis_int(srv, "DECR w");
	return bad;
}

static inline int
th_rw_read_section(const struct th_redis *srv)
{
	int bad;

	th_redis_int(srv, "INCR r");
	bad = th_redis_int(srv, "GET w") != 0;
	th_redis_int(srv, "DECR r");
	return bad;
}

#endif
