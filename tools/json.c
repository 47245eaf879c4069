/*
 * Hand-written JSON for status and list.  Lock names are arbitrary bytes:
 * valid UTF-8 passes through, control characters are escaped, and a byte
 * that is not part of valid UTF-8 becomes U+FFFD, so the output always
 * parses.
 */
#include <stdio.h>

#include "cli.h"

/* Length of the valid UTF-8 sequence at p (1..4), or 0. */
static int
utf8_len(const unsigned char *p)
{
	int n;
	unsigned cp;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		n = 2, cp = p[0] & 0x1f;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		n = 3, cp = p[0] & 0x0f;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		n = 4, cp = p[0] & 0x07;
	else
		return 0;
	for (int i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)      /* also stops at the NUL */
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	/* Overlong forms, UTF-16 surrogates, beyond U+10FFFF. */
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return n;
}

void
cli_json_str(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	putc('"', f);
	while (*p) {
		int n = utf8_len(p);
		if (n == 0) {
			fputs("\\ufffd", f);
			p++;
		} else if (n > 1) {
			fwrite(p, 1, (size_t)n, f);
			p += n;
		} else {
			switch (*p) {
			case '"': fputs("\\\"", f); break;
			case '\\': fputs("\\\\", f); break;
			case '\n': fputs("\\n", f); break;
			case '\r': fputs("\\r", f); break;
			case '\t': fputs("\\t", f); break;
			case '\b': fputs("\\b", f); break;
			case '\f': fputs("\\f", f); break;
			default:
				if (*p < 0x20 || *p == 0x7f)
					fprintf(f, "\\u%04x", *p);
				else
					putc(*p, f);
			}
			p++;
		}
	}
	putc('"', f);
}

static void
num_or_null(FILE *f, const char *key, long long v)
{
	if (v >= 0)
		fprintf(f, ",\"%s\":%lld", key, v);
	else
		fprintf(f, ",\"%s\":null", key);
}

void
cli_json_lock(FILE *f, const struct cli_lock *l, const char *node)
{
	long long held_for = cli_wall_ms() - l->since_ms;

	if (held_for < 0)
		held_for = 0;   /* the holder's clock is ahead of ours */
	fputs("{\"name\":", f);
	cli_json_str(f, l->name);
	/* A name may also be a read-write lock's (cli_json_rwlock). */
	fputs(",\"kind\":\"mutex\"", f);
	if (node) {
		fputs(",\"node\":", f);
		cli_json_str(f, node);
	}
	if (l->error[0]) {
		fputs(",\"error\":", f);
		cli_json_str(f, l->error);
		putc('}', f);
		return;
	}
	fprintf(f, ",\"exists\":%s,\"held\":%s,\"cached\":%s", l->exists ? "true" : "false",
			l->held ? "true" : "false", l->cached ? "true" : "false");
	fputs(",\"host\":", f);
	if (l->held)
		cli_json_str(f, l->host);
	else
		fputs("null", f);
	num_or_null(f, "pid", l->held ? l->pid : -1);
	num_or_null(f, "tid", l->held ? l->tid : -1);
	num_or_null(f, "since_ms", l->held ? l->since_ms : -1);
	num_or_null(f, "held_for_ms", l->held && l->since_ms >= 0 ? held_for : -1);
	num_or_null(f, "lease_ms", l->held ? l->lease_ms : -1);
	num_or_null(f, "lease_left_ms", l->held ? l->pttl_ms : -1);
	num_or_null(f, "fence", l->held ? l->fence : -1);
	num_or_null(f, "fence_counter", l->fence_counter);
	if (l->exists)
		fprintf(f, ",\"robust\":\"%s\"", cli_robust_json(l->robust));
	else
		fputs(",\"robust\":null", f);
	fprintf(f, ",\"acquired_after_owner_died\":%s", l->acquired_after_death ? "true" : "false");
	num_or_null(f, "waiters", l->waiters);
	fprintf(f, ",\"holder_alive\":%s", !l->held || l->alive < 0 ? "null"
			: l->alive ? "true" : "false");
	num_or_null(f, "cond_waiters", l->cond_waiters);
	fputs(",\"cond_waiting\":[", f);
	for (size_t i = 0; i < l->ncond; i++) {
		const struct cli_cond_waiter *w = &l->cond[i];
		fputs(i ? ",{\"host\":" : "{\"host\":", f);
		cli_json_str(f, w->host);
		fprintf(f, ",\"pid\":%lld,\"tid\":%lld,\"since_ms\":%lld,\"alive\":%s}", w->pid, w->tid,
				w->since_ms, w->alive < 0 ? "null" : w->alive ? "true" : "false");
	}
	putc(']', f);
	putc('}', f);
}
