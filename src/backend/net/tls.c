#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "dial.h"
#include "base/log.h"
#include "tls.h"
#include "addr.h"

/*
 * OpenSSL's socket BIO writes with write(2): a connection reset by the
 * server would raise SIGPIPE and kill a program that does not ignore it.
 * This BIO sends with MSG_NOSIGNAL, as conn.c does for plain connections.
 */
static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static int
bio_write(BIO *b, const char *buf, int len)
{
	int fd = (int)(intptr_t)BIO_get_data(b);
	ssize_t k;

	BIO_clear_retry_flags(b);
	do
		k = send(fd, buf, (size_t)len, MSG_NOSIGNAL);
	while (k < 0 && errno == EINTR);
	if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		BIO_set_retry_write(b);
	return (int)k;
}

static int
bio_read(BIO *b, char *buf, int len)
{
	int fd = (int)(intptr_t)BIO_get_data(b);
	ssize_t k;

	BIO_clear_retry_flags(b);
	do
		k = recv(fd, buf, (size_t)len, 0);
	while (k < 0 && errno == EINTR);
	if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		BIO_set_retry_read(b);
	return (int)k;
}

static long
bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	(void)b;
	(void)num;
	(void)ptr;
	/* Nothing is buffered here: a flush has nothing to do. */
	return cmd == BIO_CTRL_FLUSH;
}

static int
bio_create(BIO *b)
{
	BIO_set_init(b, 1);
	return 1;
}

/* Kept for the life of the process, like OpenSSL's own methods. */
static void
bio_method_make(void)
{
	BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "dmutex socket");

	if (m && BIO_meth_set_write(m, bio_write) && BIO_meth_set_read(m, bio_read) &&
			BIO_meth_set_ctrl(m, bio_ctrl) && BIO_meth_set_create(m, bio_create)) {
		bio_method = m;
		return;
	}
	BIO_meth_free(m);
}

/* OpenSSL's reason for the last error of this thread's queue, which is
 * then emptied (a later call must not report a stale error). */
static const char *
last_reason(void)
{
	unsigned long e = ERR_peek_last_error();
	const char *r = e ? ERR_reason_error_string(e) : NULL;

	ERR_clear_error();
	return r ? r : "unknown error";
}

/* A key protected by a passphrase: fail, never prompt on the terminal. */
static int
no_passphrase(char *buf, int size, int rwflag, void *u)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	(void)u;
	return 0;
}

/* Readable at all, and a regular file?  errno's words are clearer than
 * OpenSSL's "system lib"; and OpenSSL reads with blocking I/O, so a FIFO
 * (or a device) named here would hang the open for ever. */
static int
check_file(const struct dmutex__node_addr *a, const char *opt, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), reg;
	struct stat st;

	if (fd < 0) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: cannot read %s %s: %s", a->display, opt, path,
				strerror(errno));
		return EINVAL;
	}
	reg = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
	close(fd);
	if (!reg) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: cannot read %s %s: not a regular file", a->display,
				opt, path);
		return EINVAL;
	}
	return 0;
}

static int
bad_file(const struct dmutex__node_addr *a, const char *opt, const char *path, const char *what)
{
	dmutex__log(DMUTEX_LOG_ERROR, "%s: cannot use %s %s: %s", a->display, opt, path, what);
	return EINVAL;
}

static int
load_files(const struct dmutex__node_addr *a, SSL_CTX *ctx)
{
	if (a->tls_ca) {
		if (check_file(a, "tls_ca", a->tls_ca))
			return EINVAL;
		if (!SSL_CTX_load_verify_locations(ctx, a->tls_ca, NULL))
			return bad_file(a, "tls_ca", a->tls_ca, last_reason());
	} else if (!SSL_CTX_set_default_verify_paths(ctx)) {
		dmutex__log(DMUTEX_LOG_WARN, "%s: cannot load the system's CA certificates: %s",
				a->display, last_reason());
	}
	if (!a->tls_cert)
		return 0;
	/* url.c lets tls_cert only with tls_key. */
	if (check_file(a, "tls_cert", a->tls_cert) || check_file(a, "tls_key", a->tls_key))
		return EINVAL;
	if (SSL_CTX_use_certificate_chain_file(ctx, a->tls_cert) != 1)
		return bad_file(a, "tls_cert", a->tls_cert, last_reason());
	if (SSL_CTX_use_PrivateKey_file(ctx, a->tls_key, SSL_FILETYPE_PEM) != 1) {
		if (ERR_GET_REASON(ERR_peek_last_error()) != X509_R_KEY_VALUES_MISMATCH)
			return bad_file(a, "tls_key", a->tls_key, last_reason());
		ERR_clear_error();
		return bad_file(a, "tls_key", a->tls_key, "not the key of the certificate in tls_cert");
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		ERR_clear_error();
		return bad_file(a, "tls_key", a->tls_key, "not the key of the certificate in tls_cert");
	}
	return 0;
}

int
dmutex__tls_ctx_new(const struct dmutex__node_addr *a, SSL_CTX **out)
{
	SSL_CTX *ctx;
	int err;

	*out = NULL;
	pthread_once(&bio_once, bio_method_make);
	if (!bio_method || !(ctx = SSL_CTX_new(TLS_client_method()))) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: cannot set up TLS: %s", a->display, last_reason());
		return ENOMEM;
	}
	/* OpenSSL registered its atexit cleanup by now: ours runs first. */
	dmutex__dial_reap_at_exit();
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	/* conn.c sends from a buffer that may grow (and move) between a
	 * write that would block and the one that finishes it. */
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	/* Connections are pooled and long-lived: no resumption, so no cache
	 * shared between threads (nor between a parent and a fork child). */
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
	if ((err = load_files(a, ctx))) {
		SSL_CTX_free(ctx);
		return err;
	}
	if (a->tls_verify) {
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	} else {
		SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
		dmutex__log(DMUTEX_LOG_WARN, "%s: tls_verify=off: the server's certificate is not "
				"checked, anyone on the path can pose as the server", a->display);
	}
	*out = ctx;
	return 0;
}

void
dmutex__tls_ctx_ref(SSL_CTX *ctx)
{
	if (ctx)
		SSL_CTX_up_ref(ctx);
}

void
dmutex__tls_ctx_free(SSL_CTX *ctx)
{
	SSL_CTX_free(ctx);
}

/* An IP address (IPv6 zone cut off into buf): certificates name those in
 * IP SANs, and SNI may not carry one (RFC 6066). */
static int
ip_literal(const char *name, char *buf, size_t len)
{
	unsigned char bin[16];
	size_t n = strcspn(name, "%");

	if (n >= len)
		return 0;
	memcpy(buf, name, n);
	buf[n] = 0;
	return inet_pton(AF_INET, buf, bin) == 1 || inet_pton(AF_INET6, buf, bin) == 1;
}

SSL *
dmutex__tls_new(SSL_CTX *ctx, int fd, const struct dmutex__node_addr *a, char *why, size_t whylen)
{
	const char *name = a->tls_server_name ? a->tls_server_name : a->host;
	char ip[64];
	SSL *s = SSL_new(ctx);
	BIO *b = s ? BIO_new(bio_method) : NULL;
	int ok;

	if (!b) {
		snprintf(why, whylen, "cannot set up TLS: %s", last_reason());
		SSL_free(s);
		return NULL;
	}
	BIO_set_data(b, (void *)(intptr_t)fd);
	SSL_set_bio(s, b, b);
	if (ip_literal(name, ip, sizeof ip)) {
		ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s), ip);
	} else {
		X509_VERIFY_PARAM_set_hostflags(SSL_get0_param(s), X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
		ok = SSL_set_tlsext_host_name(s, name) && SSL_set1_host(s, name);
	}
	if (!ok) {
		snprintf(why, whylen, "cannot set the TLS server name %.64s: %s", name, last_reason());
		SSL_free(s);
		return NULL;
	}
	return s;
}

/* The outcome of an SSL call that returned rc <= 0. */
static int
outcome(SSL *s, int rc, short *want, char *why, size_t whylen)
{
	int e = SSL_get_error(s, rc), saved = errno;
	unsigned long err;
	long v;

	switch (e) {
	case SSL_ERROR_WANT_READ:
		*want = POLLIN;
		return DMUTEX__TLS_WAIT;
	case SSL_ERROR_WANT_WRITE:
		*want = POLLOUT;
		return DMUTEX__TLS_WAIT;
	case SSL_ERROR_ZERO_RETURN:
		ERR_clear_error();
		snprintf(why, whylen, "connection closed by server");
		return DMUTEX__TLS_BROKEN;
	case SSL_ERROR_SYSCALL:
		ERR_clear_error();
		if (rc < 0 && saved)
			snprintf(why, whylen, "%s", strerror(saved));
		else
			snprintf(why, whylen, "connection closed by server");
		return DMUTEX__TLS_BROKEN;
	}
	err = ERR_peek_last_error();
	/* A plain EOF without close_notify: the server went away, nothing
	 * was refused. */
	if (ERR_GET_REASON(err) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
		ERR_clear_error();
		snprintf(why, whylen, "connection closed by server");
		return DMUTEX__TLS_BROKEN;
	}
	if (ERR_GET_REASON(err) == SSL_R_CERTIFICATE_VERIFY_FAILED &&
			(v = SSL_get_verify_result(s)) != X509_V_OK) {
		ERR_clear_error();
		snprintf(why, whylen, "certificate verify failed: %s",
				X509_verify_cert_error_string(v));
	} else if (ERR_GET_REASON(err) == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED) {
		ERR_clear_error();
		snprintf(why, whylen, "the server requires a client certificate (tls_cert, tls_key)");
	} else {
		snprintf(why, whylen, "%s", last_reason());
	}
	return DMUTEX__TLS_REFUSED;
}

int
dmutex__tls_handshake(SSL *s, short *want, char *why, size_t whylen)
{
	int rc;

	ERR_clear_error();
	rc = SSL_connect(s);
	return rc == 1 ? 1 : outcome(s, rc, want, why, whylen);
}

ssize_t
dmutex__tls_read(SSL *s, void *buf, size_t len, short *want, char *why, size_t whylen)
{
	int rc;

	ERR_clear_error();
	rc = SSL_read(s, buf, len > INT32_MAX ? INT32_MAX : (int)len);
	return rc > 0 ? rc : outcome(s, rc, want, why, whylen);
}

ssize_t
dmutex__tls_write(SSL *s, const void *buf, size_t len, short *want, char *why, size_t whylen)
{
	int rc;

	ERR_clear_error();
	rc = SSL_write(s, buf, len > INT32_MAX ? INT32_MAX : (int)len);
	return rc > 0 ? rc : outcome(s, rc, want, why, whylen);
}

int
dmutex__tls_pending(const SSL *s)
{
	return SSL_pending(s);
}

void
dmutex__tls_free(SSL *s)
{
	SSL_free(s);
}
