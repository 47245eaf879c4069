/* etcd's JSON gateway over libcurl: http.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/etcd/http.h"
#include "backend/etcd/http_priv.h"
#include "backend/net/secret.h"
#include "base/base.h"
#include "base/log.h"

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void
global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_ALL);
}

size_t
dmutex__etcd_on_data(char *data, size_t size, size_t n, void *arg)
{
	struct buf *b = arg;
	size_t len = size * n;

	if (b->len + len + 1 > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 4096;
		char *p;
		while (cap < b->len + len + 1)
			cap *= 2;
		if (cap > REPLY_MAX || !(p = realloc(b->p, cap)))
			return 0;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, len);
	b->len += len;
	b->p[b->len] = '\0';
	return len;
}

static int
member_init(struct member *m, const struct dmutex__node_addr *a, const struct dmutex__node_addr *s)
{
	const char *scheme = a->tls ? "https" : "http", *name = a->tls_server_name;
	int v6 = strchr(s->host, ':') != NULL;
	char b[600];

	snprintf(b, sizeof b, "%s%s%s:%d", v6 ? "[" : "", s->host, v6 ? "]" : "", s->port);
	if (!(m->display = strdup(b)))
		return ENOMEM;
	if (name) {
		char to[600];
		snprintf(to, sizeof to, "%s:%d:%s%s%s:%d", name, s->port, v6 ? "[" : "", s->host,
				v6 ? "]" : "", s->port);
		if (!(m->connect_to = curl_slist_append(NULL, to)))
			return ENOMEM;
		snprintf(b, sizeof b, "%s://%s:%d", scheme, name, s->port);
	} else {
		snprintf(b, sizeof b, "%s://%s", scheme, m->display);
	}
	return (m->base = strdup(b)) ? 0 : ENOMEM;
}

int
dmutex__etcd_http_new(const struct dmutex__node_addr *addr, unsigned connect_ms,
		unsigned command_ms, struct dmutex__etcd_http **out)
{
	struct dmutex__etcd_http *h;
	int err = 0;

	pthread_once(&global_once, global_init);
	if (global_rc != CURLE_OK) {
		dmutex__log(DMUTEX_LOG_ERROR, "etcd: libcurl failed to start: %s",
				curl_easy_strerror(global_rc));
		return EIO;
	}
	if (!(h = calloc(1, sizeof *h)) || !(h->m = calloc(addr->nseeds, sizeof *h->m))) {
		free(h);
		return ENOMEM;
	}
	h->addr = addr;
	h->n = addr->nseeds;
	h->connect_ms = connect_ms;
	h->command_ms = command_ms;
	pthread_mutex_init(&h->mu, NULL);
	for (size_t i = 0; i < h->n && !err; i++)
		err = member_init(&h->m[i], addr, &addr->seeds[i]);
	if (!err && addr->password && !(h->password = strdup(addr->password)))
		err = ENOMEM;
	if (!err && addr->password_file)
		err = dmutex__secret_read(addr->display, addr->password_file, &h->password);
	if (!err && !(h->hdr_plain = dmutex__etcd_headers(h, 0)))
		err = ENOMEM;
	if (err) {
		dmutex__etcd_http_free(h);
		return err;
	}
	*out = h;
	return 0;
}

static void
drop_pool(struct dmutex__etcd_http *h, int close)
{
	for (size_t i = 0; i < h->npool; i++)
		if (close)
			curl_easy_cleanup(h->pool[i]);
	h->npool = 0;
}

void
dmutex__etcd_http_free(struct dmutex__etcd_http *h)
{
	if (!h)
		return;
	drop_pool(h, 1);
	for (size_t i = 0; i < h->n; i++) {
		free(h->m[i].base);
		free(h->m[i].display);
		curl_slist_free_all(h->m[i].connect_to);
	}
	free(h->m);
	if (h->password) {
		explicit_bzero(h->password, strlen(h->password));
		free(h->password);
	}
	free(h->token);
	curl_slist_free_all(h->hdr_plain);
	pthread_mutex_destroy(&h->mu);
	free(h);
}

void
dmutex__etcd_http_atfork_child(struct dmutex__etcd_http *h)
{
	pthread_mutex_init(&h->mu, NULL);
	drop_pool(h, 0);
}

void
dmutex__etcd_http_lock(struct dmutex__etcd_http *h)
{
	pthread_mutex_lock(&h->mu);
}

void
dmutex__etcd_http_unlock(struct dmutex__etcd_http *h)
{
	pthread_mutex_unlock(&h->mu);
}

CURL *
dmutex__etcd_take(struct dmutex__etcd_http *h)
{
	CURL *c = NULL;

	pthread_mutex_lock(&h->mu);
	if (h->npool)
		c = h->pool[--h->npool];
	pthread_mutex_unlock(&h->mu);
	return c ? c : curl_easy_init();
}

void
dmutex__etcd_give_back(struct dmutex__etcd_http *h, CURL *c)
{
	pthread_mutex_lock(&h->mu);
	if (h->npool < POOL_MAX) {
		h->pool[h->npool++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&h->mu);
	if (c)
		curl_easy_cleanup(c);
}

/* The options every request and stream share: member i, path, TLS. */
void
dmutex__etcd_setup(struct dmutex__etcd_http *h, CURL *c, size_t i, const char *path, struct curl_slist *hdr)
{
	const struct dmutex__node_addr *a = h->addr;
	char url[700];

	snprintf(url, sizeof url, "%s%s", h->m[i].base, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(c, CURLOPT_CONNECT_TO, h->m[i].connect_to);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	if (a->tls) {
		curl_easy_setopt(c, CURLOPT_CAINFO, a->tls_ca);
		curl_easy_setopt(c, CURLOPT_SSLCERT, a->tls_cert);
		curl_easy_setopt(c, CURLOPT_SSLKEY, a->tls_key);
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, a->tls_verify ? 1L : 0L);
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, a->tls_verify ? 2L : 0L);
	}
}

/* Content-Type, no "Expect: 100-continue", and the token if any. */
struct curl_slist *
dmutex__etcd_headers(struct dmutex__etcd_http *h, int with_token)
{
	struct curl_slist *l = curl_slist_append(NULL, "Content-Type: application/json"), *t;
	char auth[600] = "";

	if (!l || !(t = curl_slist_append(l, "Expect:"))) {
		curl_slist_free_all(l);
		return NULL;
	}
	pthread_mutex_lock(&h->mu);
	if (with_token && h->token)
		snprintf(auth, sizeof auth, "Authorization: %s", h->token);
	pthread_mutex_unlock(&h->mu);
	if (auth[0] && !curl_slist_append(l, auth)) {
		curl_slist_free_all(l);
		return NULL;
	}
	return l;
}

struct curl_slist *
dmutex__etcd_headers_for(struct dmutex__etcd_http *h, int with_token, int *own)
{
	int plain;

	pthread_mutex_lock(&h->mu);
	plain = !with_token || !h->token;
	pthread_mutex_unlock(&h->mu);
	*own = !plain;
	return plain ? h->hdr_plain : dmutex__etcd_headers(h, with_token);
}

void
dmutex__etcd_set_why(struct dmutex__etcd_http *h, size_t i, const char *why)
{
	pthread_mutex_lock(&h->mu);
	snprintf(h->m[i].why, WHY_LEN, "%s", why);
	pthread_mutex_unlock(&h->mu);
}

void
dmutex__etcd_why(struct dmutex__etcd_http *h, char *out, size_t len)
{
	size_t k = 0;

	out[0] = '\0';
	pthread_mutex_lock(&h->mu);
	for (size_t i = 0; i < h->n && k < len; i++)
		if (h->m[i].why[0])
			k += (size_t)snprintf(out + k, len - k, "%s%s: %s", k ? "; " : "",
					h->m[i].display, h->m[i].why);
	pthread_mutex_unlock(&h->mu);
}

CURL *
dmutex__etcd_stream(struct dmutex__etcd_http *h, const char *path, const char *body,
		struct curl_slist **hdr)
{
	CURL *c = curl_easy_init();
	size_t i = __atomic_load_n(&h->cur, __ATOMIC_RELAXED) % h->n;

	if (!c || !(*hdr = dmutex__etcd_headers(h, 1))) {
		if (c)
			curl_easy_cleanup(c);
		return NULL;
	}
	dmutex__etcd_setup(h, c, i, path, *hdr);
	curl_easy_setopt(c, CURLOPT_COPYPOSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)h->connect_ms);
	return c;
}

void
dmutex__etcd_stream_failed(struct dmutex__etcd_http *h)
{
	__atomic_fetch_add(&h->cur, 1, __ATOMIC_RELAXED);
}
