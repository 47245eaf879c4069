/*
 * Running the built dmutex command ($DMUTEX_BIN) from a test, as a user's
 * shell would: each run's stdout and stderr in files of a scratch
 * directory, and whatever still runs at the end killed and reaped.
 */
#ifndef DM_CMD_H
#define DM_CMD_H

#include <stdarg.h>
#include <sys/types.h>

#define DM_CMD_KIDS 16

struct dm_cmd {
	char dir[256];
	pid_t kids[DM_CMD_KIDS];
	int nkids;
};

/* A fresh directory under $TMPDIR (or /tmp) named after label: 0, or -1. */
int dm_cmd_init(struct dm_cmd *d, const char *label);
/* Kill and reap the runs still going; remove the directory and its files. */
void dm_cmd_fini(struct dm_cmd *d);
/* `dmutex ARGS...` (the list ends with NULL) with stdout in TAG.out and
 * stderr in TAG.err, stdin from /dev/null, no descriptor but 0, 1 and 2,
 * and SIGHUP, SIGINT and SIGQUIT at their defaults (a suite started under
 * nohup must not change what a test that sends them sees).  The child's
 * pid, or -1 when fork failed. */
pid_t dm_cmd_startv(struct dm_cmd *d, const char *tag, va_list ap);
pid_t dm_cmd_start(struct dm_cmd *d, const char *tag, ...);
/* Started and waited for (deadline ms): its exit status, 128+signal, or -1. */
int dm_cmd_run(struct dm_cmd *d, int timeout_ms, const char *tag, ...);
/* TAG.EXT of the directory (malloc'd; "" when missing; NULL without memory). */
char *dm_cmd_output(const struct dm_cmd *d, const char *tag, const char *ext);

/* In a criterion test: a run's exit status is `want`; else fail showing
 * what it said on stderr and stdout. */
#define DM_CMD_ASSERT_ST(d, got, want, tag) do {				\
		int got_ = (got), want_ = (want);				\
		if (got_ != want_) {						\
			char *e_ = dm_cmd_output(d, tag, "err"), *o_ = dm_cmd_output(d, tag, "out"); \
			cr_assert_fail("dmutex (%s) exited %d, not %d\nstderr:\n%s\nstdout:\n%s", \
					tag, got_, want_, e_ ? e_ : "?", o_ ? o_ : "?"); \
		}								\
	} while (0)

#endif
