/* What http.c (handles, members) and call.c (requests) share: private. */
#ifndef DMUTEX_ETCD_HTTP_PRIV_H
#define DMUTEX_ETCD_HTTP_PRIV_H

#include <pthread.h>

#include "backend/etcd/http.h"

#define POOL_MAX 8
/* A reply larger than this is not one of ours: refused, not buffered. */
#define REPLY_MAX (64u << 20)
#define WHY_LEN 256

struct member {
	char *base;             /* "http://host:port" (the TLS name as host if given) */
	char *display;          /* "host:port" */
	struct curl_slist *connect_to;  /* tls_server_name: where that name really is */
	char why[WHY_LEN];      /* its last failure, "" if it answered */
};

struct dmutex__etcd_http {
	const struct dmutex__node_addr *addr;
	struct member *m;
	size_t n;
	unsigned cur;           /* the member asked first (atomic) */
	unsigned connect_ms, command_ms;
	char *password;         /* NULL: none.  Never logged. */
	pthread_mutex_t mu;     /* pool, token, each member's why */
	CURL *pool[POOL_MAX];
	size_t npool;
	char *token;            /* etcd's auth token; NULL: none yet */
	/* The headers of a request without a token, made once: curl only
	 * reads them, so every call shares them (no list built per call). */
	struct curl_slist *hdr_plain;
};

struct buf {
	char *p;
	size_t len, cap;
};

CURL *dmutex__etcd_take(struct dmutex__etcd_http *h);
void dmutex__etcd_give_back(struct dmutex__etcd_http *h, CURL *c);
void dmutex__etcd_setup(struct dmutex__etcd_http *h, CURL *c, size_t i, const char *path,
		struct curl_slist *hdr);
struct curl_slist *dmutex__etcd_headers(struct dmutex__etcd_http *h, int with_token);
/* The headers for one request: h->hdr_plain (*own 0) while there is no
 * token to send, else a new list (*own 1: the caller frees it). */
struct curl_slist *dmutex__etcd_headers_for(struct dmutex__etcd_http *h, int with_token, int *own);
void dmutex__etcd_set_why(struct dmutex__etcd_http *h, size_t i, const char *why);
size_t dmutex__etcd_on_data(char *data, size_t size, size_t n, void *arg);

#endif
