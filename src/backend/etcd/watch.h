/* What watch.c (the listener) and watch_ops.c (the face's wake ops) share. */
#ifndef DMUTEX_ETCD_WATCH_H
#define DMUTEX_ETCD_WATCH_H

#include "backend/etcd/etcd.h"

struct dmutex__wsub {
	struct dmutex__wsub *next;
	struct dmutex__etcd_watch *w;
	char *body;             /* the watch's create request */
	uint64_t seq;           /* moves on every message and every lost stream */
	int confirmed;          /* the stream's watch is created */
	int gone;               /* unsubscribed: the listener frees it */
	/* With e->watch_mu: this sub's seq or confirmed moved.  One per sub,
	 * not one per listener: an event on one of 200 waiters' watches woke
	 * all 200 (a broadcast to 200 threads over etcd cost ~1,800 context
	 * switches a thread, test_cond's broadcast_to_many_threads). */
	pthread_cond_t cv;
	void (*notify)(void *);
	void *arg;
	/* the listener's alone: */
	CURL *easy;
	struct curl_slist *hdr;
	char *in;               /* an unfinished line of the stream */
	size_t len, cap;
	int64_t retry_at;
	int fails;
};

struct dmutex__etcd_watch {
	struct dmutex__etcd *e;
	pthread_t th;
	CURLM *multi;
	int stop;
	struct dmutex__wsub *subs;
};

/* The listener thread's body. */
void *dmutex__etcd_listener(void *arg);
/* After the listener ended: every stream and sub, the multi handle. */
void dmutex__etcd_watch_free(struct dmutex__etcd_watch *w);

#endif
