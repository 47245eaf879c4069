/* JSON and base64 for etcd's gateway (http.h): keys and values travel in
 * base64, int64 fields as strings, and proto3 leaves out every default. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "backend/etcd/http.h"

char *
dmutex__etcd_b64(const char *s, size_t n)
{
	size_t len = sodium_base64_encoded_len(n, sodium_base64_VARIANT_ORIGINAL);
	char *out = malloc(len);

	if (out)
		sodium_bin2base64(out, len, (const unsigned char *)s, n, sodium_base64_VARIANT_ORIGINAL);
	return out;
}

int
dmutex__etcd_b64_to(const char *s, size_t n, char *out, size_t cap)
{
	if (sodium_base64_encoded_len(n, sodium_base64_VARIANT_ORIGINAL) > cap)
		return ENAMETOOLONG;
	sodium_bin2base64(out, cap, (const unsigned char *)s, n, sodium_base64_VARIANT_ORIGINAL);
	return 0;
}

long
dmutex__etcd_unb64(const char *b64, char *out, size_t cap)
{
	size_t len = 0;

	if (!b64 || sodium_base642bin((unsigned char *)out, cap ? cap - 1 : 0, b64, strlen(b64),
			NULL, &len, NULL, sodium_base64_VARIANT_ORIGINAL))
		return -1;
	out[len] = '\0';
	return (long)len;
}

int
dmutex__etcd_text_header(const char *text, int64_t *rev, const char **rest)
{
	static const char pre[] = "{\"header\":{", field[] = "\"revision\":\"";
	const char *h, *end, *r;
	char *stop;
	long long n;

	if (strncmp(text, pre, sizeof pre - 1))
		return -1;
	/* The header holds no object: its first '}' ends it. */
	h = text + sizeof pre - 1;
	if (!(end = strchr(h, '}')) || !(r = strstr(h, field)) || r > end)
		return -1;
	n = strtoll(r + sizeof field - 1, &stop, 10);
	if (*stop != '"' || n <= 0)
		return -1;
	*rev = (int64_t)n;
	*rest = end + 1;
	return 0;
}

int64_t
dmutex__etcd_int(const json_t *o, const char *key, int *bad)
{
	const json_t *v = json_object_get(o, key);
	const char *s;
	char *end;
	long long n;

	if (!v)
		return 0;
	if (json_is_integer(v))
		return (int64_t)json_integer_value(v);
	if (!(s = json_string_value(v)) || !*s) {
		*bad = 1;
		return 0;
	}
	n = strtoll(s, &end, 10);
	if (*end)
		*bad = 1;
	return (int64_t)n;
}

int
dmutex__etcd_bool(const json_t *o, const char *key)
{
	return json_is_true(json_object_get(o, key));
}

json_t *
dmutex__etcd_key(const char *key, const char *end)
{
	char *k = dmutex__etcd_b64(key, strlen(key)), *e = end ? dmutex__etcd_b64(end, strlen(end)) : NULL;
	json_t *o = NULL;

	if (k && (!end || e))
		o = end ? json_pack("{s:s, s:s}", "key", k, "range_end", e) : json_pack("{s:s}", "key", k);
	free(k);
	free(e);
	return o;
}

json_t *
dmutex__etcd_cmp(const char *key, const char *end, const char *target, const char *result,
		const char *v)
{
	json_t *c = dmutex__etcd_key(key, end);
	static const struct { const char *target, *field; } f[] = {
		{ "VERSION", "version" }, { "CREATE", "create_revision" },
		{ "MOD", "mod_revision" }, { "VALUE", "value" } };

	for (size_t i = 0; c && i < sizeof f / sizeof *f; i++)
		if (!strcmp(f[i].target, target)) {
			char *b = strcmp(target, "VALUE") ? NULL : dmutex__etcd_b64(v, strlen(v));
			json_object_set_new(c, "target", json_string(target));
			json_object_set_new(c, "result", json_string(result));
			json_object_set_new(c, f[i].field, json_string(b ? b : v));
			free(b);
		}
	return c;
}

json_t *
dmutex__etcd_cmp_none(const char *key, const char *end)
{
	return dmutex__etcd_cmp(key, end, "VERSION", "EQUAL", "0");
}

json_t *
dmutex__etcd_op_put(const char *key, const char *value, int64_t lease)
{
	json_t *r = dmutex__etcd_key(key, NULL);
	char *v = value ? dmutex__etcd_b64(value, strlen(value)) : NULL;

	if (!r || (value && !v)) {
		json_decref(r);
		free(v);
		return NULL;
	}
	if (v)
		json_object_set_new(r, "value", json_string(v));
	if (lease)
		json_object_set_new(r, "lease", json_integer((json_int_t)lease));
	free(v);
	return json_pack("{s:o}", "request_put", r);
}

json_t *
dmutex__etcd_op_del(const char *key, const char *end)
{
	json_t *r = dmutex__etcd_key(key, end);

	return r ? json_pack("{s:o}", "request_delete_range", r) : NULL;
}

void
dmutex__etcd_prefix_end(const char *p, char *out)
{
	size_t n = strlen(p);

	memcpy(out, p, n + 1);
	/* Our prefixes end in '/' (or any byte below 0xff): the next byte. */
	while (n && (unsigned char)out[n - 1] == 0xff)
		out[--n] = '\0';
	if (n)
		out[n - 1]++;
}
