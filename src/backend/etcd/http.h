/*
 * etcd's v3 JSON gateway over libcurl (docs/guide.md "etcd" says why not
 * gRPC): the members of one cluster, failing over between them, etcd's
 * own users (a token from /v3/auth/authenticate, asked again when etcd
 * forgets it), TLS as the URL says.  Thread-safe: each call takes an easy
 * handle from a small pool (its connection kept alive) and gives it back.
 */
#ifndef DMUTEX_ETCD_HTTP_H
#define DMUTEX_ETCD_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <jansson.h>

#include "backend/net/addr.h"

struct dmutex__etcd_http;

/* The members addr names (addr->seeds; it outlives *out), the password
 * file read.  0; EINVAL (the file: logged), ENOMEM. */
int dmutex__etcd_http_new(const struct dmutex__node_addr *addr, unsigned connect_ms,
		unsigned command_ms, struct dmutex__etcd_http **out);
void dmutex__etcd_http_free(struct dmutex__etcd_http *h);
/* Fork child: forget the inherited handles without closing them (a TLS
 * close would talk on the parent's connection). */
void dmutex__etcd_http_atfork_child(struct dmutex__etcd_http *h);
void dmutex__etcd_http_lock(struct dmutex__etcd_http *h);
void dmutex__etcd_http_unlock(struct dmutex__etcd_http *h);

/*
 * POST req (JSON, borrowed) to path ("/v3/kv/txn") on a member, the next
 * one on a connection failure, an unavailable member or a leader change,
 * until deadline (CLOCK_MONOTONIC ns; 0: command_timeout_ms from now);
 * each attempt bounded by command_timeout_ms.  0 and *rep (the reply
 * object; json_decref it); EIO (logged at `level`: the member, what
 * failed, never the password), *maybe_done 1 if a request went out whose
 * answer was lost; EACCES (authentication refused: logged).
 * *refused (may be NULL) 1 when etcd answered no (asking again will not
 * help).
 */
int dmutex__etcd_call(struct dmutex__etcd_http *h, const char *path, json_t *req, json_t **rep,
		int64_t deadline, int *maybe_done, int *refused);
/* The same with the request's body already made (body[0..len), JSON):
 * the hot path's requests, built without a JSON tree (json.c). */
int dmutex__etcd_post(struct dmutex__etcd_http *h, const char *path, const char *body, size_t len,
		json_t **rep, int64_t deadline, int *maybe_done, int *refused);
/* dmutex__etcd_post whose answer, when it starts as etcd's answers do
 * ({"header":{), is left unparsed: 0 and *text (free it), *rep NULL; any
 * other answer as dmutex__etcd_post gives it (*text NULL).  The hot
 * path's: jansson's parse was ~10% of the client's CPU per lock+unlock. */
int dmutex__etcd_post_text(struct dmutex__etcd_http *h, const char *path, const char *body,
		size_t len, char **text, json_t **rep, int64_t deadline, int *maybe_done, int *refused);
/* dmutex_client_open's check: authenticate (a user given), ask a
 * member's status, read a key under prefix.  0; EACCES (logged, naming
 * etcd and the user, never the password); EIO (every member's failure
 * kept for dmutex__etcd_why). */
int dmutex__etcd_verify(struct dmutex__etcd_http *h, const char *prefix);
/* Each failing member's last failure, "; " between them; "" if none. */
void dmutex__etcd_why(struct dmutex__etcd_http *h, char *out, size_t len);

/* ---- streams (the watch listener) ---- */
/* A new easy handle POSTing body (copied) to path on the member tried
 * first now, with the token and TLS options; *hdr the headers to free
 * with curl_slist_free_all after the handle.  NULL on ENOMEM. */
CURL *dmutex__etcd_stream(struct dmutex__etcd_http *h, const char *path, const char *body,
		struct curl_slist **hdr);
/* The stream on it failed: try the next member next time. */
void dmutex__etcd_stream_failed(struct dmutex__etcd_http *h);

/* ---- JSON (json.c) ---- */
/* s[0..n) in base64 (a new string), NULL on ENOMEM. */
char *dmutex__etcd_b64(const char *s, size_t n);
/* The room base64 of n bytes takes, its '\0' included. */
#define DMUTEX__ETCD_B64_LEN(n) (((n) + 2) / 3 * 4 + 1)
/* s[0..n) in base64 into out[0..cap) (no allocation: the hot path's
 * requests): 0, or ENAMETOOLONG if it does not fit. */
int dmutex__etcd_b64_to(const char *s, size_t n, char *out, size_t cap);
/* A base64 string into out[0..cap): its length, or -1 if it is not
 * base64 or does not fit. */
long dmutex__etcd_unb64(const char *b64, char *out, size_t cap);
/* An answer's text (dmutex__etcd_post_text): 0, *rev its header's
 * revision and *rest what follows the header; -1 if not that shape. */
int dmutex__etcd_text_header(const char *text, int64_t *rev, const char **rest);
/* An int64 field (etcd sends them as strings): missing 0; *bad set to 1
 * if it is there and not a number. */
int64_t dmutex__etcd_int(const json_t *o, const char *key, int *bad);
/* A boolean field: missing false (proto3 leaves defaults out). */
int dmutex__etcd_bool(const json_t *o, const char *key);
/* {"key": b64(key)} plus range_end b64(end) if end: a new object, NULL on ENOMEM. */
json_t *dmutex__etcd_key(const char *key, const char *end);
/* A txn's compare of key's (to end if end) target ("VERSION", "CREATE",
 * "MOD", "VALUE": v in plain text) with v, result "EQUAL", "GREATER"...;
 * and "nothing under [key, end)" (VERSION EQUAL 0).  New objects, NULL
 * on ENOMEM. */
json_t *dmutex__etcd_cmp(const char *key, const char *end, const char *target, const char *result,
		const char *v);
json_t *dmutex__etcd_cmp_none(const char *key, const char *end);
/* A txn's {"request_put": ...} of value (NULL: none) with lease (0:
 * none), and its {"request_delete_range": ...} of key (to end if end): a
 * new object, NULL on ENOMEM (json_pack's "o" then fails the request). */
json_t *dmutex__etcd_op_put(const char *key, const char *value, int64_t lease);
json_t *dmutex__etcd_op_del(const char *key, const char *end);
/* The end of the prefix range of p ("a/" -> "a0"), into out (len + 1). */
void dmutex__etcd_prefix_end(const char *p, char *out);

#endif
