/* The wake operations of the face over watch.c's listener (etcd.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/etcd/etcd.h"
#include "backend/etcd/watch.h"
#include "base/log.h"

/* The listener of e, started on first use (NULL: out of memory). */
static struct dmutex__etcd_watch *
ensure(struct dmutex__etcd *e)
{
	struct dmutex__etcd_watch *w;

	dmutex__etcd_watch_create_lock();
	pthread_mutex_lock(&e->watch_mu);
	if ((w = e->watch) || !(w = calloc(1, sizeof *w)))
		goto out;
	w->e = e;
	if (!(w->multi = curl_multi_init()) || pthread_create(&w->th, NULL, dmutex__etcd_listener, w)) {
		if (w->multi)
			curl_multi_cleanup(w->multi);
		free(w);
		w = NULL;
		goto out;
	}
	e->watch = w;
out:
	pthread_mutex_unlock(&e->watch_mu);
	dmutex__etcd_watch_create_unlock();
	return w;
}

/* "<flags>:<key>" into the watch's create request. */
static char *
create_body(const char *channel)
{
	const char *colon = strchr(channel, ':'), *key = colon ? colon + 1 : channel;
	int prefix = colon && memchr(channel, 'p', (size_t)(colon - channel));
	int deletes = colon && memchr(channel, 'd', (size_t)(colon - channel));
	char pfx[DMUTEX__ETCD_KEY_MAX], end[DMUTEX__ETCD_KEY_MAX], *body = NULL, *slash;
	json_t *k, *req;

	if (strlen(key) >= sizeof end)
		return NULL;
	/* A prefix ends in '/': what follows is a waiter's own suffix (the
	 * core's fair waiters add ":<token>"), the same watch for us. */
	if (prefix && (slash = strrchr(strcpy(pfx, key), '/'))) {
		slash[1] = '\0';
		key = pfx;
	}
	dmutex__etcd_prefix_end(key, end);
	if (!(k = dmutex__etcd_key(key, prefix ? end : NULL)))
		return NULL;
	if (deletes)
		json_object_set_new(k, "filters", json_pack("[s]", "NOPUT"));
	if ((req = json_pack("{s:o}", "create_request", k)))
		body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	return body;
}

static int
wait_until(struct dmutex__wsub *s, int64_t until_ns)
{
	struct timespec ts;

	dmutex__ns_to_ts(until_ns, &ts);
	return pthread_cond_timedwait(&s->cv, &s->w->e->watch_mu, &ts);
}

struct dmutex__wsub *
dmutex__etcd_wake_sub_notify(struct dmutex__backend *be, const char *channel, int64_t until_ns,
		void (*notify)(void *), void *arg)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	struct dmutex__etcd_watch *w = ensure(e);
	struct dmutex__wsub *s = w ? calloc(1, sizeof *s) : NULL;

	if (!s || !(s->body = create_body(channel))) {
		free(s);
		return NULL;
	}
	dmutex__cond_init_mono(&s->cv);
	s->w = w;
	s->notify = notify;
	s->arg = arg;
	pthread_mutex_lock(&e->watch_mu);
	s->next = w->subs;
	w->subs = s;
	curl_multi_wakeup(w->multi);
	while (!s->confirmed && dmutex__now_ns() < until_ns)
		wait_until(s, until_ns);
	pthread_mutex_unlock(&e->watch_mu);
	return s;
}

struct dmutex__wsub *
dmutex__etcd_wake_sub(struct dmutex__backend *be, const char *channel, int64_t until_ns)
{
	return dmutex__etcd_wake_sub_notify(be, channel, until_ns, NULL, NULL);
}

void
dmutex__etcd_wake_unsub(struct dmutex__backend *be, struct dmutex__wsub *s)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);

	if (!s)
		return;
	pthread_mutex_lock(&e->watch_mu);
	s->gone = 1;
	s->notify = NULL;
	curl_multi_wakeup(s->w->multi);
	pthread_mutex_unlock(&e->watch_mu);
}

void
dmutex__etcd_wake_unsub_notify(struct dmutex__backend *be, struct dmutex__wsub *s)
{
	dmutex__etcd_wake_unsub(be, s);
}

int
dmutex__etcd_wake_confirmed(struct dmutex__backend *be, struct dmutex__wsub *s, int64_t until_ns)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	int ok;

	pthread_mutex_lock(&e->watch_mu);
	while (!s->confirmed && dmutex__now_ns() < until_ns)
		wait_until(s, until_ns);
	ok = s->confirmed;
	pthread_mutex_unlock(&e->watch_mu);
	return ok;
}

uint64_t
dmutex__etcd_wake_seq(struct dmutex__backend *be, struct dmutex__wsub *s)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	uint64_t seq;

	pthread_mutex_lock(&e->watch_mu);
	seq = s->seq;
	pthread_mutex_unlock(&e->watch_mu);
	return seq;
}

static void
unlock_watch_mu(void *mu)
{
	pthread_mutex_unlock(mu);
}

int
dmutex__etcd_wake_wait(struct dmutex__backend *be, struct dmutex__wsub *s, uint64_t seq,
		int64_t until_ns)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	int moved;

	pthread_mutex_lock(&e->watch_mu);
	/* A condition or semaphore wait's caller may be cancelled here (the
	 * cancellation points of the library and the shim): leave watch_mu
	 * free, or its cleanup (which unsubscribes) and the listener thread
	 * would wait for it for ever. */
	pthread_cleanup_push(unlock_watch_mu, &e->watch_mu);
	while (s->seq == seq && dmutex__now_ns() < until_ns)
		wait_until(s, until_ns);
	moved = s->seq != seq;
	pthread_cleanup_pop(1);
	return moved;
}

/* No hand-overs over etcd: the queue's head takes the lock itself. */
void
dmutex__etcd_wake_want(struct dmutex__backend *be, struct dmutex__wsub *s, const char *token)
{
	(void)be, (void)s, (void)token;
}

int
dmutex__etcd_wake_handed(struct dmutex__backend *be, struct dmutex__wsub *s, char *out)
{
	(void)be, (void)s;
	out[0] = '\0';
	return 0;
}

void
dmutex__etcd_wake_stop(struct dmutex__backend *be)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	struct dmutex__etcd_watch *w;

	pthread_mutex_lock(&e->watch_mu);
	if ((w = e->watch)) {
		w->stop = 1;
		curl_multi_wakeup(w->multi);
	}
	e->watch = NULL;
	pthread_mutex_unlock(&e->watch_mu);
	if (!w)
		return;
	pthread_join(w->th, NULL);
	dmutex__etcd_watch_free(w);
}

void
dmutex__etcd_wake_lock(struct dmutex__backend *be)
{
	pthread_mutex_lock(&dmutex__etcd_of(be)->watch_mu);
}

void
dmutex__etcd_wake_unlock(struct dmutex__backend *be)
{
	pthread_mutex_unlock(&dmutex__etcd_of(be)->watch_mu);
}

/* The listener is the parent's: the child forgets it (and its streams,
 * without closing them), and makes its own on first use. */
void
dmutex__etcd_wake_atfork_child(struct dmutex__backend *be)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);

	pthread_mutex_init(&e->watch_mu, NULL);
	e->watch = NULL;
}
