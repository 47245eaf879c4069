/* URL grammar of API.md: parsed into a client configuration. */
#ifndef DMUTEX_URL_H
#define DMUTEX_URL_H

#include <stddef.h>

/* One Redis master. */
struct dmutex__node_addr {
	char *host;      /* TCP host (brackets stripped from IPv6); NULL for unix */
	int port;        /* TCP port, default 6379 */
	char *path;      /* unix socket path; NULL for TCP */
	char *user;      /* ACL user, percent-decoded; NULL: none */
	char *password;  /* percent-decoded; NULL: none.  Never logged. */
	int db;          /* default 0 */
	int tls;         /* rediss:// */
	/* Options of this URL (NULL: not given).  The files are read when the
	 * client opens (src/backend/node.c, tls.c), not by the parser. */
	char *password_file;    /* password_file=: the password is its first line */
	char *tls_ca;           /* CA bundle (PEM); NULL: the system store */
	char *tls_cert;         /* client certificate chain (PEM), with tls_key */
	char *tls_key;          /* its private key (PEM) */
	char *tls_server_name;  /* SNI and the name verified; NULL: the host */
	int tls_verify;         /* 1 (default), 0: tls_verify=off */
	char *display;   /* the URL with the password replaced by "***", for logs */
	/* redis-sentinel:// and rediss-sentinel://: this address is the master's
	 * template (user, password, db, TLS options); its host stays NULL, the
	 * sentinels name the master (src/backend/sentinel.c). */
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
	 * (src/backend/cluster.c). */
	int cluster;
	struct dmutex__node_addr *seeds;
	size_t nseeds;
};

struct dmutex__config {
	struct dmutex__node_addr *nodes;
	size_t nnodes;                /* 1, or N for Redlock (redis://, rediss://
	                               * and unix:// only) */
	unsigned connect_timeout_ms;  /* default 2000, 1 .. 600000 */
	unsigned command_timeout_ms;  /* default 1000, 1 .. 600000 */
	unsigned lease_ms;            /* default 10000, 100 .. 86400000 */
	unsigned node_timeout_ms;     /* Redlock per-node timeout; 0 (default): 5 % of
	                               * the lease, 50 .. 300 ms; 1 .. 600000 */
	char *prefix;                 /* default "dmutex:", 0 .. 128 bytes */
	unsigned metrics;             /* per-lock counters: 1 (default) or 0 (none) */
	unsigned idle_ms;             /* a name's state in Redis expires this long
	                               * after its last use (lease end): default
	                               * 3600000, 100 .. 2592000000 (30 days) */
};

#define DMUTEX__IDLE_DEFAULT 3600000u
#define DMUTEX__IDLE_MIN 100u
#define DMUTEX__IDLE_MAX 2592000000u

#define DMUTEX__CONNECT_TIMEOUT_DEFAULT 2000u
#define DMUTEX__COMMAND_TIMEOUT_DEFAULT 1000u
#define DMUTEX__PREFIX_MAX 128u

#define DMUTEX__SENTINEL_PORT_DEFAULT 26379

/*
 * Parse `url` (never NULL here) into *cfg.  Returns 0; EINVAL with a log line
 * naming the problem (and never the password); ENOTSUP for rediss:// when
 * built without TLS (DMUTEX_HAVE_TLS 0); ENOMEM.  No file is opened here.  On error *cfg is
 * left empty (nothing to free, though freeing is harmless).
 */
int dmutex__url_parse(const char *url, struct dmutex__config *cfg);
void dmutex__config_free(struct dmutex__config *cfg);

#endif
