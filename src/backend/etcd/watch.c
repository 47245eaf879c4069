/*
 * Wake subscriptions over etcd watches (backend.h "wake subscriptions";
 * etcd.h the channels): one listener thread per client drives every
 * watch stream with curl's multi interface, one stream per subscription
 * (a thread waits on at most one lock at a time).  A stream that ends, or
 * answers an error, counts as a message (a spurious wake-up, never a lost
 * one) and is opened again, on the next member after a failure.  Streams
 * ask for "hasleader", so a member cut off from its cluster ends them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/etcd/etcd.h"
#include "backend/etcd/watch.h"
#include "base/log.h"

static pthread_mutex_t create_mu = PTHREAD_MUTEX_INITIALIZER;

void
dmutex__etcd_watch_create_lock(void)
{
	pthread_mutex_lock(&create_mu);
}

void
dmutex__etcd_watch_create_unlock(void)
{
	pthread_mutex_unlock(&create_mu);
}

/* One line of a stream (a JSON object), under watch_mu: 1 to go on, 0 to
 * end the stream (an error or a cancel: open it again). */
static int
on_message(struct dmutex__wsub *s, const char *line, size_t len)
{
	json_t *o = json_loadb(line, len, 0, NULL), *r = json_object_get(o, "result");
	json_t *ev = json_object_get(r, "events");
	int go_on = json_is_object(r) && !json_object_get(o, "error") && !dmutex__etcd_bool(r, "canceled");

	if (!go_on)
		dmutex__log(DMUTEX_LOG_DEBUG, "etcd watch: %.*s", (int)(len > 200 ? 200 : len), line);
	/* The confirmation moves the sequence too: a condition wait reads 0
	 * as "no subscription" (api/cond_wait.c). */
	if (go_on && dmutex__etcd_bool(r, "created") && !s->confirmed) {
		s->confirmed = 1;
		s->seq++;
	}
	if (go_on && json_array_size(ev))
		s->seq++;
	/* Deletions, for a waiter second in line (etcd.h, the seconds). */
	for (size_t i = 0; go_on && i < json_array_size(ev); i++) {
		json_t *x = json_array_get(ev, i);
		char key[DMUTEX__ETCD_KEY_MAX];
		json_t *kv = json_object_get(x, "kv");
		const char *type = json_string_value(json_object_get(x, "type"));
		int bad = 0;
		int64_t rev = dmutex__etcd_int(kv, "mod_revision", &bad);
		if (type && !strcmp(type, "DELETE") && !bad && rev > 0
				&& dmutex__etcd_unb64(json_string_value(json_object_get(kv, "key")),
					key, sizeof key) >= 0)
			dmutex__etcd_gone(s->w->e, key, rev);
	}
	json_decref(o);
	return go_on;
}

static size_t
on_stream(char *data, size_t size, size_t n, void *arg)
{
	struct dmutex__wsub *s = arg;
	struct dmutex__etcd *e = s->w->e;
	size_t len = size * n, start = 0;
	uint64_t seq;
	int ok = 1;

	if (s->len + len > s->cap) {
		size_t cap = (s->len + len) * 2;
		char *p = cap < (16u << 20) ? realloc(s->in, cap) : NULL;
		if (!p)
			return 0;
		s->in = p;
		s->cap = cap;
	}
	memcpy(s->in + s->len, data, len);
	s->len += len;
	pthread_mutex_lock(&e->watch_mu);
	seq = s->seq;
	for (size_t i = 0; i < s->len && ok; i++)
		if (s->in[i] == '\n') {
			ok = on_message(s, s->in + start, i - start);
			start = i + 1;
		}
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&e->watch_mu);
	memmove(s->in, s->in + start, s->len - start);
	s->len -= start;
	if (seq != s->seq && s->notify)
		s->notify(s->arg);
	return ok ? len : 0;
}

/* Under watch_mu, listener: open s's stream. */
static void
start(struct dmutex__etcd_watch *w, struct dmutex__wsub *s)
{
	CURL *c = dmutex__etcd_stream(w->e->http, "/v3/watch", s->body, &s->hdr);

	if (!c || !curl_slist_append(s->hdr, "Grpc-Metadata-hasleader: true")) {
		if (c)
			curl_easy_cleanup(c);
		s->retry_at = dmutex__now_ns() + 100 * DMUTEX__MS;
		return;
	}
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_stream);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
	curl_easy_setopt(c, CURLOPT_PRIVATE, s);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, 5L);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, 2L);
	s->easy = c;
	s->len = 0;
	curl_multi_add_handle(w->multi, c);
}

/* Under watch_mu, listener: s's stream is over (free: it is gone). */
static void
stop_stream(struct dmutex__etcd_watch *w, struct dmutex__wsub *s)
{
	if (!s->easy)
		return;
	curl_multi_remove_handle(w->multi, s->easy);
	curl_easy_cleanup(s->easy);
	curl_slist_free_all(s->hdr);
	s->easy = NULL;
	s->hdr = NULL;
}

static void
free_sub(struct dmutex__etcd_watch *w, struct dmutex__wsub *s)
{
	stop_stream(w, s);
	free(s->body);
	free(s->in);
	pthread_cond_destroy(&s->cv);
	free(s);
}

/* Under watch_mu, listener: a stream ended: a wake-up, and again later. */
static void
ended(struct dmutex__etcd_watch *w, struct dmutex__wsub *s, CURLcode cc)
{
	int64_t back = s->fails < 4 ? (50LL << s->fails) : 1000;

	if (cc != CURLE_OK || !s->confirmed) {
		dmutex__etcd_stream_failed(w->e->http);
		s->fails++;
	} else {
		s->fails = 0;
	}
	stop_stream(w, s);
	s->seq++;
	s->confirmed = 0;
	s->retry_at = dmutex__now_ns() + back * DMUTEX__MS;
	pthread_cond_broadcast(&s->cv);
}

/* Under watch_mu: drop the gone, open what is due. */
static void
tend(struct dmutex__etcd_watch *w)
{
	int64_t now = dmutex__now_ns();

	for (struct dmutex__wsub **pp = &w->subs; *pp;) {
		struct dmutex__wsub *s = *pp;
		if (s->gone) {
			*pp = s->next;
			free_sub(w, s);
			continue;
		}
		if (!s->easy && now >= s->retry_at)
			start(w, s);
		pp = &s->next;
	}
}

void *
dmutex__etcd_listener(void *arg)
{
	struct dmutex__etcd_watch *w = arg;
	struct dmutex__etcd *e = w->e;
	int running;

	pthread_mutex_lock(&e->watch_mu);
	while (!w->stop) {
		CURLMsg *m;
		int left;
		tend(w);
		pthread_mutex_unlock(&e->watch_mu);
		curl_multi_perform(w->multi, &running);
		pthread_mutex_lock(&e->watch_mu);
		while ((m = curl_multi_info_read(w->multi, &left))) {
			struct dmutex__wsub *s = NULL;
			void (*notify)(void *);
			if (m->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&s);
			ended(w, s, m->data.result);
			if ((notify = s->notify)) {
				void *narg = s->arg;
				pthread_mutex_unlock(&e->watch_mu);
				notify(narg);
				pthread_mutex_lock(&e->watch_mu);
			}
		}
		pthread_mutex_unlock(&e->watch_mu);
		curl_multi_poll(w->multi, NULL, 0, 200, NULL);
		pthread_mutex_lock(&e->watch_mu);
	}
	pthread_mutex_unlock(&e->watch_mu);
	return NULL;
}

void
dmutex__etcd_watch_free(struct dmutex__etcd_watch *w)
{
	while (w->subs) {
		struct dmutex__wsub *s = w->subs;
		w->subs = s->next;
		free_sub(w, s);
	}
	curl_multi_cleanup(w->multi);
	free(w);
}
