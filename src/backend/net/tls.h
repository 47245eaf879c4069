/*
 * TLS (OpenSSL) over the connection layer's own non-blocking sockets, for
 * rediss:// URLs.  One SSL_CTX per node of a client (its CA, client
 * certificate and key are read once, when the client opens), one SSL per
 * connection.  Nothing here waits: each call does what it can and says
 * which poll(2) event it needs next; conn.c waits, under its deadlines.
 */
#ifndef DMUTEX_TLS_H
#define DMUTEX_TLS_H

#include <stddef.h>
#include <sys/types.h>

struct ssl_ctx_st;
struct ssl_st;
struct dmutex__node_addr;

/*
 * The context for one rediss:// URL: verification on (the CA of tls_ca, or
 * the system store) unless tls_verify=off, which is warned about here,
 * once; the client certificate and key of tls_cert/tls_key.  0, EINVAL (a
 * file that cannot be read or used, or a key that is not the
 * certificate's: logged, naming the file), or ENOMEM.
 */
int dmutex__tls_ctx_new(const struct dmutex__node_addr *a, struct ssl_ctx_st **out);
/* Reference counting (OpenSSL's own): a connecting thread that outlives its
 * caller holds a reference. */
void dmutex__tls_ctx_ref(struct ssl_ctx_st *ctx);
void dmutex__tls_ctx_free(struct ssl_ctx_st *ctx);

/* What the calls below return besides a byte count: */
#define DMUTEX__TLS_WAIT 0      /* would block: poll for *want, call again */
#define DMUTEX__TLS_BROKEN (-1) /* closed or a socket error: why says which */
#define DMUTEX__TLS_REFUSED (-2) /* a TLS failure: a certificate not accepted
                                  * (by us or by the server), an alert */

/* A client session on the connected socket fd, for the host of a (SNI and
 * the name or IP address verified, or tls_server_name).  NULL, why filled,
 * on failure. */
struct ssl_st *dmutex__tls_new(struct ssl_ctx_st *ctx, int fd, const struct dmutex__node_addr *a,
		char *why, size_t whylen);
/* One step of the handshake: 1 done, or WAIT, BROKEN, REFUSED. */
int dmutex__tls_handshake(struct ssl_st *s, short *want, char *why, size_t whylen);
/* Bytes read (> 0) or written, or WAIT, BROKEN (EOF included), REFUSED. */
ssize_t dmutex__tls_read(struct ssl_st *s, void *buf, size_t len, short *want, char *why,
		size_t whylen);
ssize_t dmutex__tls_write(struct ssl_st *s, const void *buf, size_t len, short *want, char *why,
		size_t whylen);
/* Decrypted bytes buffered in the session, not yet read. */
int dmutex__tls_pending(const struct ssl_st *s);
/* No close_notify is sent: a fork child drops its parent's connections
 * with this, and must not write on them. */
void dmutex__tls_free(struct ssl_st *s);

#endif
