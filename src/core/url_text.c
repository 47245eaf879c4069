/*
 * What both halves of the URL parser read text with: the one "bad URL"
 * log line, numbers, percent escapes, host names.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

#include "url_parse.h"

void
dmutex__url_bad(const struct parse *p, const char *fmt, ...)
{
	char what[256], node[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	if (p->display && p->secret) {
		dmutex__url_masked_elem(p, node, sizeof node);
		dmutex__log(DMUTEX_LOG_ERROR, "bad URL %s: %s", node, what);
	} else if (p->count > 1)
		dmutex__log(DMUTEX_LOG_ERROR, "bad URL (node %zu of %zu): %s",
				p->index + 1, p->count, what);
	else
		dmutex__log(DMUTEX_LOG_ERROR, "bad URL: %s", what);
}

/* strcspn within s[0..n), which is not NUL-terminated there. */
size_t
dmutex__url_strcspn_n(const char *s, size_t n, const char *reject)
{
	size_t i = 0;

	while (i < n && !strchr(reject, s[i]))
		i++;
	return i;
}

/* Plain decimal only: strtoul would take signs, spaces and hex. */
int
dmutex__url_parse_num(const char *s, size_t n, unsigned long min, unsigned long max,
		unsigned long *out)
{
	unsigned long v = 0;

	if (!n)
		return EINVAL;
	for (size_t i = 0; i < n; i++) {
		unsigned d = (unsigned char)s[i] - '0';
		if (d > 9)
			return EINVAL;
		/* d > max first: max - d must not wrap (metrics: max 1). */
		if (d > max || v > (max - d) / 10)
			return EINVAL;
		v = v * 10 + d;
	}
	if (v < min)
		return EINVAL;
	*out = v;
	return 0;
}

int
dmutex__url_hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* EINVAL for a malformed escape or %00, which a C string cannot carry. */
int
dmutex__url_pct_decode(const char *s, size_t n, char **out, size_t *outlen)
{
	char *d = malloc(n + 1);
	size_t j = 0;

	if (!d)
		return ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int hi, lo;
		if (s[i] != '%') {
			d[j++] = s[i];
			continue;
		}
		if (n - i < 3 || (hi = dmutex__url_hexval(s[i + 1])) < 0 || (lo = dmutex__url_hexval(s[i + 2])) < 0
				|| (hi | lo) == 0) {
			free(d);
			return EINVAL;
		}
		d[j++] = (char)(hi << 4 | lo);
		i += 2;
	}
	d[j] = 0;
	*out = d;
	if (outlen)
		*outlen = j;
	return 0;
}

int
dmutex__url_valid_hostname(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
				|| (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_'))
			return 0;
	}
	return 1;
}
