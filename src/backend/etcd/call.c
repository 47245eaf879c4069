/*
 * One request to etcd (http.h): the member asked first, the next one when
 * it cannot answer, etcd's token asked again when it forgot it.  What went
 * wrong is told apart by curl's code and etcd's error text, because the
 * gateway's HTTP status says little.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/etcd/http_priv.h"
#include "base/base.h"
#include "base/log.h"

enum {
	A_OK,
	A_NEXT,         /* not sent: ask the next member */
	A_NEXT_MAYBE,   /* sent, no usable answer, or the member cannot serve now */
	A_AUTH,         /* etcd forgot our token: authenticate again */
	A_DENIED,       /* etcd refused the user or password: EACCES */
	A_FAIL          /* etcd answered no: asking again will not help */
};

struct attempt {
	const char *path, *body;
	size_t len;
	int with_token;
	int want_text;          /* an answer with etcd's header into text */
	int64_t deadline;
	json_t *rep;
	char *text;
	char why[WHY_LEN];
};

/* Which failures of curl's mean nothing reached etcd. */
static int
curl_class(CURL *c, CURLcode cc)
{
	curl_off_t pre = 0;

	switch (cc) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
		return A_NEXT;
	default:
		curl_easy_getinfo(c, CURLINFO_PRETRANSFER_TIME_T, &pre);
		return pre ? A_NEXT_MAYBE : A_NEXT;
	}
}

/* etcd's error text (and gRPC code) into what to do. */
static int
error_class(const char *msg, long code)
{
	static const char *const unavailable[] = { "leader changed", "no leader", "timed out",
		"too many requests", "not capable", "server stopped", "unhealthy cluster",
		"raft", "not started" };

	if (strstr(msg, "invalid auth token") || strstr(msg, "user name is empty")
			|| strstr(msg, "invalid auth management"))
		return A_AUTH;
	if (strstr(msg, "authentication failed"))
		return A_DENIED;
	for (size_t i = 0; i < sizeof unavailable / sizeof *unavailable; i++)
		if (strstr(msg, unavailable[i]))
			return A_NEXT_MAYBE;
	return code == 14 ? A_NEXT_MAYBE : code == 16 ? A_AUTH : A_FAIL;
}

/* The reply's body: a JSON object without "error", or the class of what it says. */
static int
reply_class(struct attempt *t, struct buf *b, long status)
{
	json_error_t je;
	json_t *o, *e;
	const char *msg;

	/* Only an answer starts with the header: an error has none. */
	if (t->want_text && status == 200 && b->len > 11 && !memcmp(b->p, "{\"header\":{", 11)) {
		t->text = b->p;
		b->p = NULL;
		return A_OK;
	}
	o = b->len ? json_loadb(b->p, b->len, 0, &je) : NULL;
	if (!json_is_object(o)) {
		snprintf(t->why, sizeof t->why, "unexpected reply to %s (HTTP %ld, %zu bytes%s%.60s)",
				t->path, status, b->len, b->len ? ": " : "", b->len ? b->p : "");
		json_decref(o);
		return status == 200 ? A_FAIL : A_NEXT_MAYBE;
	}
	e = json_object_get(o, "error");
	if (!e && status == 200) {
		t->rep = o;
		return A_OK;
	}
	/* Unary calls: {"error": "...", "code": N}; streams: {"error": {"grpc_code": N,
	 * "message": "..."}}. */
	if (json_is_object(e))
		msg = json_string_value(json_object_get(e, "message"));
	else
		msg = json_is_string(e) ? json_string_value(e)
			: json_string_value(json_object_get(o, "message"));
	if (!msg)
		msg = "(no error text)";
	snprintf(t->why, sizeof t->why, "%s: %s", t->path, msg);
	{
		json_t *code = json_is_object(e) ? json_object_get(e, "grpc_code") : json_object_get(o, "code");
		int cls = error_class(msg, (long)json_integer_value(code));
		json_decref(o);
		return cls;
	}
}

static int
attempt(struct dmutex__etcd_http *h, size_t i, struct attempt *t)
{
	CURL *c = dmutex__etcd_take(h);
	int own_hdr;
	struct curl_slist *hdr = dmutex__etcd_headers_for(h, t->with_token, &own_hdr);
	struct buf b = { 0 };
	/* Rounded up: an attempt cut by the deadline ends at it, not before
	 * (the caller tells a timeout from a failure by that). */
	int64_t left = (t->deadline - dmutex__now_ns() + DMUTEX__MS - 1) / DMUTEX__MS;
	long ms = left < (int64_t)h->command_ms ? (long)left : (long)h->command_ms, status = 0;
	CURLcode cc;
	int cls;

	if (!c || !hdr) {
		snprintf(t->why, sizeof t->why, "out of memory");
		if (own_hdr)
			curl_slist_free_all(hdr);
		if (c)
			curl_easy_cleanup(c);
		return A_FAIL;
	}
	if (ms < 1)
		ms = 1;
	dmutex__etcd_setup(h, c, i, t->path, hdr);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, t->body);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)t->len);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)h->connect_ms < ms ? (long)h->connect_ms : ms);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, dmutex__etcd_on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	cc = curl_easy_perform(c);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	if (own_hdr)
		curl_slist_free_all(hdr);
	if (cc != CURLE_OK) {
		snprintf(t->why, sizeof t->why, "%s", curl_easy_strerror(cc));
		cls = curl_class(c, cc);
		curl_easy_cleanup(c);
	} else {
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
		cls = reply_class(t, &b, status);
		dmutex__etcd_give_back(h, c);
	}
	free(b.p);
	return cls;
}

/* Authenticate as the URL's user on member i: a token, none (etcd has
 * authentication off), EACCES or EIO (t->why). */
static int
authenticate(struct dmutex__etcd_http *h, size_t i, int64_t deadline, char *why, size_t len)
{
	json_t *req = json_pack("{s:s, s:s}", "name", h->addr->user, "password",
			h->password ? h->password : "");
	struct attempt t = { .path = "/v3/auth/authenticate", .deadline = deadline };
	char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
	int cls;

	json_decref(req);
	if (!body)
		return ENOMEM;
	t.body = body;
	t.len = strlen(body);
	cls = attempt(h, i, &t);
	explicit_bzero(body, t.len);
	free(body);
	snprintf(why, len, "%s", t.why);
	if (cls == A_FAIL && strstr(t.why, "authentication is not enabled"))
		return 0;
	if (cls == A_DENIED) {
		dmutex__log(DMUTEX_LOG_ERROR, "etcd at %s refused user '%s': wrong user or password "
				"(the URL's user:password@ or password_file)", h->m[i].display, h->addr->user);
		return EACCES;
	}
	if (cls != A_OK)
		return EIO;
	{
		const char *tok = json_string_value(json_object_get(t.rep, "token"));
		char *copy = tok ? strdup(tok) : NULL;
		json_decref(t.rep);
		if (!copy) {
			snprintf(why, len, "no token in etcd's answer to /v3/auth/authenticate");
			return tok ? ENOMEM : EIO;
		}
		pthread_mutex_lock(&h->mu);
		free(h->token);
		h->token = copy;
		pthread_mutex_unlock(&h->mu);
	}
	return 0;
}

/* Move on from member i (unless another thread did already). */
static void
next_member(struct dmutex__etcd_http *h, unsigned seen)
{
	__atomic_compare_exchange_n(&h->cur, &seen, seen + 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* The loop of dmutex__etcd_call, on a body made. */
static int
call_loop(struct dmutex__etcd_http *h, struct attempt *t, int *maybe_done, int *refused)
{
	int answered = 0, authed = 0;

	for (unsigned tries = 0;; tries++) {
		unsigned cur = __atomic_load_n(&h->cur, __ATOMIC_RELAXED);
		size_t i = cur % h->n;
		int cls = attempt(h, i, t), err;

		if (cls == A_OK) {
			dmutex__etcd_set_why(h, i, "");
			return 0;
		}
		dmutex__etcd_set_why(h, i, t->why);
		if (cls == A_AUTH && h->addr->user && !authed++) {
			if (!(err = authenticate(h, i, t->deadline, t->why, sizeof t->why)))
				continue;
			return err;
		}
		if (cls == A_DENIED)
			return EACCES;
		if (cls == A_FAIL || cls == A_AUTH) {
			/* An answer of no: nothing was applied. */
			*refused = 1;
			return EIO;
		}
		*maybe_done |= cls == A_NEXT_MAYBE;
		answered |= cls == A_NEXT_MAYBE;
		next_member(h, cur);
		/* Nobody listening anywhere, twice round: no point waiting. */
		if (!answered && tries + 1 >= 2 * h->n)
			return EIO;
		if ((tries + 1) % h->n == 0) {
			int64_t wake = dmutex__now_ns() + dmutex__backoff_ns((int)((tries + 1) / h->n) - 1);
			if (wake >= t->deadline)
				return EIO;
			dmutex__sleep_until(wake);
		}
		if (dmutex__now_ns() >= t->deadline)
			return EIO;
	}
}

int
dmutex__etcd_call(struct dmutex__etcd_http *h, const char *path, json_t *req, json_t **rep,
		int64_t deadline, int *maybe_done, int *refused)
{
	char *body = json_dumps(req, JSON_COMPACT);
	int err;

	if (!body)
		return ENOMEM;
	err = dmutex__etcd_post(h, path, body, strlen(body), rep, deadline, maybe_done, refused);
	free(body);
	return err;
}

static int
post(struct dmutex__etcd_http *h, const char *path, const char *body, size_t len, char **text,
		json_t **rep, int64_t deadline, int *maybe_done, int *refused)
{
	struct attempt t = { .path = path, .body = body, .len = len, .with_token = 1,
		.want_text = text != NULL };
	int err, md = 0, ref = 0;

	t.deadline = deadline ? deadline : dmutex__now_ns() + (int64_t)h->command_ms * DMUTEX__MS;
	{
		int64_t t0 = dmutex__now_ns();
		err = call_loop(h, &t, &md, &ref);
		if (dmutex__log_enabled(DMUTEX_LOG_DEBUG))
			dmutex__log(DMUTEX_LOG_DEBUG, "etcd: %s %zu bytes: %d in %lld us", path, t.len,
					err, (long long)((dmutex__now_ns() - t0) / 1000));
	}
	if (maybe_done)
		*maybe_done = md;
	if (refused)
		*refused = ref;
	if (!err) {
		*rep = t.rep;
		if (text)
			*text = t.text;
		return 0;
	}
	if (err == EIO) {
		char why[1024];
		dmutex__etcd_why(h, why, sizeof why);
		/* A lease that ran out under a paused process: its caller
		 * copes (a new lease), nothing for the operator. */
		int lease_gone = ref && strstr(t.why, "requested lease not found");
		dmutex__log(lease_gone ? DMUTEX_LOG_DEBUG : ref ? DMUTEX_LOG_ERROR : DMUTEX_LOG_WARN,
				"etcd: %s failed: %s", path, ref ? t.why : why);
	}
	return err;
}

int
dmutex__etcd_post(struct dmutex__etcd_http *h, const char *path, const char *body, size_t len,
		json_t **rep, int64_t deadline, int *maybe_done, int *refused)
{
	return post(h, path, body, len, NULL, rep, deadline, maybe_done, refused);
}

int
dmutex__etcd_post_text(struct dmutex__etcd_http *h, const char *path, const char *body,
		size_t len, char **text, json_t **rep, int64_t deadline, int *maybe_done, int *refused)
{
	*text = NULL;
	*rep = NULL;
	return post(h, path, body, len, text, rep, deadline, maybe_done, refused);
}

/* May the user read the keys under prefix?  A read of one (keys only). */
static int
may_read(struct dmutex__etcd_http *h, size_t i, const char *prefix, int64_t deadline, char *why,
		size_t len)
{
	char end[1024], *k = dmutex__etcd_b64(prefix, strlen(prefix)), *e;
	json_t *req;
	struct attempt t = { .path = "/v3/kv/range", .with_token = 1, .deadline = deadline };
	int cls;

	dmutex__etcd_prefix_end(prefix, end);
	e = dmutex__etcd_b64(end, strlen(end));
	req = k && e ? json_pack("{s:s, s:s, s:s, s:b}", "key", k, "range_end", e, "limit", "1",
			"keys_only", 1) : NULL;
	free(k);
	free(e);
	if (!req || !(t.body = json_dumps(req, JSON_COMPACT))) {
		json_decref(req);
		return ENOMEM;
	}
	json_decref(req);
	t.len = strlen(t.body);
	cls = attempt(h, i, &t);
	free((char *)t.body);
	json_decref(t.rep);
	snprintf(why, len, "%s", t.why);
	if (cls == A_AUTH || (cls == A_FAIL && strstr(t.why, "permission denied"))) {
		if (h->addr->user)
			dmutex__log(DMUTEX_LOG_ERROR, "etcd at %s: user '%s' may not read the keys under "
					"'%s' (grant its role readwrite on that prefix)", h->m[i].display,
					h->addr->user, prefix);
		else
			dmutex__log(DMUTEX_LOG_ERROR, "etcd at %s has authentication on: give a user "
					"(etcd://USER:PASSWORD@HOST:PORT, or USER@ and password_file=)",
					h->m[i].display);
		return EACCES;
	}
	return cls == A_OK ? 0 : EIO;
}

/* Member i: etcd, our user let in, the prefix readable.  0, EACCES, EIO (why). */
static int
verify_member(struct dmutex__etcd_http *h, size_t i, const char *prefix, int64_t deadline,
		char *why, size_t len)
{
	struct attempt t = { .path = "/v3/maintenance/status", .body = "{}", .len = 2,
		.with_token = 1, .deadline = deadline };
	int err;

	if (h->addr->user && (err = authenticate(h, i, deadline, why, len)))
		return err;
	err = attempt(h, i, &t) == A_OK && json_object_get(t.rep, "version") ? 0 : EIO;
	json_decref(t.rep);
	if (err) {
		snprintf(why, len, "%s", t.why[0] ? t.why : "not an etcd v3 server: no version in its "
				"answer to /v3/maintenance/status");
		return EIO;
	}
	return may_read(h, i, prefix, deadline, why, len);
}

int
dmutex__etcd_verify(struct dmutex__etcd_http *h, const char *prefix)
{
	int64_t deadline = dmutex__now_ns() + (int64_t)h->command_ms * DMUTEX__MS;
	int err = EIO;

	/* Each member once, the first that answers decides. */
	for (size_t k = 0; k < h->n && err == EIO && dmutex__now_ns() < deadline; k++) {
		size_t i = (__atomic_load_n(&h->cur, __ATOMIC_RELAXED) + k) % h->n;
		char why[WHY_LEN] = "";
		err = verify_member(h, i, prefix, deadline, why, sizeof why);
		dmutex__etcd_set_why(h, i, err == EIO ? why : "");
		if (!err)
			__atomic_store_n(&h->cur, (unsigned)i, __ATOMIC_RELAXED);
	}
	return err;
}
