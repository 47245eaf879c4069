/*
 * Which bytes of a URL may be a password, for the "bad URL" log lines.
 *
 * A URL that fails to parse may be one whose password was not
 * percent-encoded, so that the parser read it otherwise: a raw '&' in
 * sentinel_password= makes the rest look like options ("unknown option
 * 'cd'"), a raw ",scheme://" in a password splits the URL into a list whose
 * first element's "port" is the password's head.  Error lines therefore
 * mask what the grammar allows to be a password under any such reading,
 * not only under the parser's:
 *  - the password of a userinfo (from its ':' to its last '@');
 *  - when elements without an '@' come before one with a userinfo (they
 *    could be a password's head cut off at ",scheme://"), everything from
 *    the first ':' after the earliest such element's "://" (in a later
 *    element, its scheme's, when that one has none) up to that '@'
 *    (a raw '/' or '?' in such a password is refused anyway, but only
 *    once the two halves are seen together);
 *  - everything after "sentinel_password=" to the end of the URL (a raw
 *    '&' or ",scheme://" in it reads as more options or another node).
 * A URL that parses has one reading: its nodes' display strings follow it
 * (url.c, make_display).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "url_parse.h"

static void
mark(struct parse *p, const char *from, const char *to)
{
	memset(p->secret + (from - p->url), 1, (size_t)(to - from));
}

/* The secret option values of elem: from the first to the URL's end. */
static void
mark_options(struct parse *p, const char *elem, size_t len)
{
	static const char key[] = "sentinel_password=";

	for (const char *s = elem; s < elem + len; s++)
		if ((*s == '?' || *s == '&') && (size_t)(elem + len - s - 1) >= sizeof key - 1 &&
		    !memcmp(s + 1, key, sizeof key - 1)) {
			const char *v = s + sizeof key;
			if (!p->secret_tail || v < p->secret_tail)
				p->secret_tail = v;
			return;
		}
}

void
dmutex__url_secret_elem(struct parse *p, const char *elem, size_t len)
{
	const char *end = elem + len, *r = elem, *at = NULL, *colon;

	if (!p->secret)
		return;
	for (const char *s = elem; s + 3 <= end; s++)
		if (!memcmp(s, "://", 3)) {
			r = s + 3;
			break;
		}
	/* The last '@': where a userinfo ends (an '@' past the authority is
	 * refused with nothing quoted). */
	for (const char *c = r; c < end; c++)
		if (*c == '@')
			at = c;
	mark_options(p, elem, len);
	/* An earlier element without '@' or ':' ("rediss://u"): the run starts
	 * at the first ':' after it, this element's scheme's included. */
	if (p->run_pending && !p->run_from && (colon = memchr(elem, ':', len)) &&
	    (!at || colon < at)) {
		p->run_from = colon + 1;
		p->run_pending = 0;
	}
	if (at) {
		if (p->run_from)
			mark(p, p->run_from, at);
		else if ((colon = memchr(r, ':', (size_t)(at - r))))
			mark(p, colon + 1, at);
		p->run_from = NULL;
		p->run_pending = 0;
	} else if (!p->run_from) {
		if ((colon = memchr(r, ':', (size_t)(end - r))))
			p->run_from = colon + 1;
		else
			p->run_pending = 1;
	}
}

static int
is_secret(const struct parse *p, const char *c)
{
	return (p->secret_tail && c >= p->secret_tail) || p->secret[c - p->url];
}

/* 1 if any byte of s[0..n) is in the URL and may be a password (all may,
 * when there was no memory for the map). */
static int
any_secret(const struct parse *p, const char *s, size_t n)
{
	if (s < p->url || s + n > p->url + p->url_len)
		return 0;
	if (!p->secret)
		return 1;
	for (size_t i = 0; i < n; i++)
		if (is_secret(p, s + i))
			return 1;
	return 0;
}

int
dmutex__url_frag_len(const struct parse *p, const char *s, size_t n)
{
	return any_secret(p, s, n) ? 3 : (int)n;
}

const char *
dmutex__url_frag(const struct parse *p, const char *s, size_t n)
{
	return any_secret(p, s, n) ? "***" : s;
}

void
dmutex__url_masked_elem(const struct parse *p, char *buf, size_t size)
{
	size_t o = 0;

	for (const char *c = p->elem; c < p->elem + p->elen && o + 4 < size; c++) {
		if (!is_secret(p, c)) {
			buf[o++] = *c;
		} else if (c == p->elem || !is_secret(p, c - 1)) {
			memcpy(buf + o, "***", 3);
			o += 3;
		}
	}
	buf[o] = '\0';
}
