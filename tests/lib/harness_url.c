/*
 * The client URLs the harness hands out (struct th_redis url and unix_url,
 * dmt_url) and the joining of a test's own options to them.
 *
 * They carry command_timeout_ms = th_command_timeout_ms(), not the
 * library's 1 s default: CI runs the whole suite on 2 cores, and at a load
 * of 17 under ASan an ordinary reply (cond::init_errors' permission check
 * when opening a client) took longer than 1 s, which turned into EIO and a
 * failed run.  Tests whose subject is a timeout name their own with
 * th_url_with(), which then replaces this one.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPT "command_timeout_ms="

int th_slowdown(void)
{
	int f = 1;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	f = 3;
#endif
	const char *tls = getenv("DMUTEX_TEST_TLS");

	return tls && *tls ? 2 * f : f;
}

int th_command_timeout_ms(void)
{
	return TH_COMMAND_TIMEOUT_MS * th_slowdown();
}

/* Copy base to buf without the harness's own "command_timeout_ms=N"
 * parameters (each with its separator; a '?' before one that had more
 * after it stays, for them).  0, or -1 if buf is too small. */
static int copy_without_default(char *buf, size_t len, const char *base)
{
	char def[48];
	size_t n = 0, dl = (size_t)snprintf(def, sizeof def, OPT "%d", th_command_timeout_ms());
	const char *s = base;

	while (*s) {
		if ((*s == '?' || *s == '&') && !strncmp(s + 1, def, dl) &&
		    (s[1 + dl] == '\0' || s[1 + dl] == '&' || s[1 + dl] == ',')) {
			const char *after = s + 1 + dl;
			if (*s == '?' && *after == '&') {
				/* "?def&more": keep the '?' for "more" */
				after++;
				if (n + 1 >= len)
					return -1;
				buf[n++] = '?';
			}
			s = after;
			continue;
		}
		if (n + 1 >= len)
			return -1;
		buf[n++] = *s++;
	}
	buf[n] = '\0';
	return 0;
}

int th_url_with(char *buf, size_t len, const char *base, const char *opts)
{
	if (len == 0)
		return -1;
	if (strstr(opts ? opts : "", OPT)) {
		if (copy_without_default(buf, len, base))
			goto too_long;
	} else if ((size_t)snprintf(buf, len, "%s", base) >= len) {
		goto too_long;
	}
	if (!opts || !*opts)
		return 0;
	/* Options go on the last URL of a list (client-wide ones may be on
	 * any): '&' if it has a query already. */
	const char *last = strrchr(buf, ',');
	const char *sep = strchr(last ? last : buf, '?') ? "&" : "?";
	size_t used = strlen(buf);
	if ((size_t)snprintf(buf + used, len - used, "%s%s", sep, opts) >= len - used)
		goto too_long;
	return 0;
too_long:
	fprintf(stderr, "th_url_with: %s + %s does not fit in %zu bytes\n", base, opts ? opts : "",
	        len);
	buf[0] = '\0';
	return -1;
}
