/*
 * Where a server is, as a URL names it: the core's URL parser fills it in,
 * the backend and the connection layer (dial, TLS) read it.  Here, below
 * the face, so that net/ reads it without including the face above it.
 */
#ifndef DMUTEX_NET_ADDR_H
#define DMUTEX_NET_ADDR_H

#include <stddef.h>

/* One Redis master, as a URL names it (url.c parses, the backend reads;
 * the strings live as long as the client). */
struct dmutex__node_addr {
	char *host;      /* TCP host (brackets stripped from IPv6); NULL for unix */
	int port;        /* TCP port, default 6379 */
	char *path;      /* unix socket path; NULL for TCP */
	char *user;      /* ACL user, percent-decoded; NULL: none */
	char *password;  /* percent-decoded; NULL: none.  Never logged. */
	int db;          /* default 0 */
	int tls;         /* rediss:// */
	/* Options of this URL (NULL: not given).  The files are read when the
	 * client opens (backend/node.c, tls.c), not by the parser. */
	char *password_file;    /* password_file=: the password is its first line */
	char *tls_ca;           /* CA bundle (PEM); NULL: the system store */
	char *tls_cert;         /* client certificate chain (PEM), with tls_key */
	char *tls_key;          /* its private key (PEM) */
	char *tls_server_name;  /* SNI and the name verified; NULL: the host */
	int tls_verify;         /* 1 (default), 0: tls_verify=off */
	char *display;   /* the URL with the password replaced by "***", for logs */
	/* redis-sentinel:// and rediss-sentinel://: this address is the master's
	 * template (user, password, db, TLS options); its host stays NULL, the
	 * sentinels name the master (src/backend/redis/sentinel.c). */
	char *master_name;
	struct dmutex__node_addr *sentinels;  /* user, password (or its file):
	                                       * the sentinel_* options; TLS: the URL's */
	size_t nsentinels;
	char *sentinel_user;                  /* options as given, NULL: none */
	char *sentinel_password;
	char *sentinel_password_file;
	/* redis-cluster:// and rediss-cluster://: this address is the template
	 * of every node of the cluster (user, password, TLS options); its host
	 * stays NULL, the seeds (host and port only) lead to the others
	 * (src/backend/redis/cluster.c). */
	int cluster;
	struct dmutex__node_addr *seeds;
	size_t nseeds;
	/* etcd:// and etcds://: the members of one etcd cluster are the seeds
	 * (host and port, default 2379); this address carries the user,
	 * password and TLS options of all of them (src/backend/etcd/). */
	int etcd;
};

#endif
