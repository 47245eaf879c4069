/*
 * Checks for the test programs that cannot use criterion: the shim's
 * (criterion runs threads and locks of its own through the pthread calls
 * the shim replaces).  A failed check prints where and what, counts, and
 * the program goes on; main returns th_check_status() at the end.
 */
#ifndef TH_CHECK_H
#define TH_CHECK_H

#include <errno.h>
#include <stdio.h>

/* One counter per test program (each includes this once). */
static int th_failures;

/* cond holds (errno is shown: the shim's calls set it on failure). */
#define EXPECT(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "%s:%d: %s (errno %d)\n", __FILE__, __LINE__, #cond, errno); \
		th_failures++; \
	} \
} while (0)

/* expr (an int) equals want. */
#define IS(expr, want) do { \
	int rc_ = (expr); \
	if (rc_ != (want)) { \
		fprintf(stderr, "%s:%d: %s = %d, want %d\n", __FILE__, __LINE__, #expr, rc_, (want)); \
		th_failures++; \
	} \
} while (0)

/* expr returns -1 with errno e. */
#define FAILS(expr, e) do { \
	errno = 0; \
	int rc_ = (expr); \
	if (rc_ != -1 || errno != (e)) { \
		fprintf(stderr, "%s:%d: %s = %d errno %d, want -1 errno %d\n", __FILE__, __LINE__, \
				#expr, rc_, errno, (e)); \
		th_failures++; \
	} \
} while (0)

/* main's exit status: 0 if every check held, else 1 (and how many not). */
static inline int
th_check_status(void)
{
	if (th_failures)
		fprintf(stderr, "%d failures\n", th_failures);
	return th_failures != 0;
}

#endif
