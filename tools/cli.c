/*
 * What every part of the dmutex command shares: its messages, the escaping
 * of the server's bytes for a terminal, the rule that
 * picks the backend URL, and the checks of arguments that several
 * subcommands take.  It depends on nothing else of the command, so that
 * main (dmutex.c), the subcommands and their helpers all stand above it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmutex.h"
#include "cli.h"

/* The length of the UTF-8 character at p (2 to 4) if it is a well-formed
 * one and no C1 control (U+0080..U+009F: 8-bit escapes to some
 * terminals); else 0. */
static size_t
utf8_char(const unsigned char *p)
{
	size_t n = p[0] >= 0xc2 && p[0] <= 0xdf ? 2 : p[0] >= 0xe0 && p[0] <= 0xef ? 3
		: p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : 0;

	for (size_t i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	/* Overlong forms, surrogates, past U+10FFFF. */
	if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] > 0x9f) ||
	    (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] > 0x8f))
		return 0;
	if (p[0] == 0xc2 && p[1] <= 0x9f)
		return 0;
	return n;
}

char *
cli_text(char *buf, size_t len, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)s;
	size_t o = 0, n;

	if (!len)
		return buf;
	while (*p) {
		if (*p >= 0x20 && *p < 0x7f) {
			if (o + 1 >= len)
				break;
			buf[o++] = (char)*p++;
		} else if (*p >= 0x80 && (n = utf8_char(p))) {
			if (o + n >= len)
				break;
			memcpy(buf + o, p, n);
			o += n;
			p += n;
		} else {
			if (o + 4 >= len)
				break;
			buf[o++] = '\\';
			buf[o++] = 'x';
			buf[o++] = hex[*p >> 4];
			buf[o++] = hex[*p++ & 15];
		}
	}
	buf[o] = '\0';
	return buf;
}

/* A message often carries bytes from the server (a key, an error reply,
 * a node's address): escaped whole, as cli_text does (no message of ours
 * has a control byte of its own). */
void
cli_err(const char *fmt, ...)
{
	char msg[1024], text[CLI_TEXT_MAX(1024)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fprintf(stderr, "dmutex: %s\n", cli_text(text, sizeof text, msg));
}

const char *
cli_url(const char *opt_url)
{
	const char *u = opt_url;

	if (!u || !*u)
		u = getenv("DMUTEX_URL");
	if (!u || !*u)
		u = "redis://127.0.0.1:6379";
	return u;
}

int
cli_check_name(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > DMUTEX_NAME_MAX) {
		cli_err("a lock name is 1 to %d bytes, not %zu", DMUTEX_NAME_MAX, n);
		return CLI_USAGE;
	}
	return 0;
}

int
cli_parse_seconds(const char *s, int64_t *ms)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 0) || v > 1e9)
		return -1;
	*ms = (int64_t)(v * 1000 + 0.5);
	return 0;
}
