#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "conn.h"
#include "base/base.h"
#include "base/log.h"
#include "backend/net/tls.h"
#include "backend/backend.h"

/* Big enough that a typical reply arrives in one recv; on the heap so that
 * a caller on a small stack does not pay for it. */
#define DMUTEX__CONN_IN 16384

static void
set_err(struct dmutex__conn *c, const char *what, int e)
{
	if (c->err)
		return;
	c->err = e ? e : EIO;
	if (e)
		snprintf(c->errstr, sizeof c->errstr, "%.60s: %.60s", what, strerror(e));
	else
		snprintf(c->errstr, sizeof c->errstr, "%.120s", what);
}

/* Milliseconds left until the deadline for poll(2), rounded up, 0 if past. */
static int
ms_left(int64_t deadline)
{
	int64_t left = deadline - dmutex__now_ns();
	if (left <= 0)
		return 0;
	left = (left + DMUTEX__MS - 1) / DMUTEX__MS;
	return left > 600000000 ? 600000000 : (int)left;
}

/* Wait for fd to be ready for events by the deadline: 1 ready, 0 time out,
 * -1 error (errno). */
static int
wait_fd(int fd, short events, int64_t deadline)
{
	for (;;) {
		struct pollfd pf = { fd, events, 0 };
		int ms = ms_left(deadline), rc = poll(&pf, 1, ms);
		if (rc > 0)
			return 1;
		if (rc == 0) {
			if (dmutex__now_ns() >= deadline)
				return 0;
			continue;
		}
		if (errno != EINTR)
			return -1;
	}
}

static int
connect_fd(int fd, const struct sockaddr *sa, socklen_t len, int64_t deadline)
{
	int e = 0;
	socklen_t el = sizeof e;

	if (connect(fd, sa, len) == 0)
		return 0;
	if (errno != EINPROGRESS && errno != EINTR)
		return errno;
	switch (wait_fd(fd, POLLOUT, deadline)) {
	case 0:
		return ETIMEDOUT;
	case -1:
		return errno;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el))
		return errno;
	return e;
}

static struct dmutex__conn *
conn_new(int fd)
{
	struct dmutex__conn *c = calloc(1, sizeof *c);

	if (!c)
		return NULL;
	c->fd = fd;
	c->rd = redisReaderCreate();
	c->in = malloc(DMUTEX__CONN_IN);
	if (!c->rd || !c->in) {
		if (c->rd)
			redisReaderFree(c->rd);
		free(c->in);
		free(c);
		return NULL;
	}
	return c;
}

static int
dial_unix(const char *path, int64_t deadline, int *out)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd, e;

	if (strlen(path) >= sizeof sun.sun_path)
		return ENAMETOOLONG;
	memcpy(sun.sun_path, path, strlen(path) + 1);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
		return errno;
	if ((e = connect_fd(fd, (struct sockaddr *)&sun, sizeof sun, deadline))) {
		close(fd);
		return e;
	}
	*out = fd;
	return 0;
}

static int
dial_tcp(const char *host, int port, int64_t deadline, int *out, char *why, size_t whylen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai, *p;
	char ps[16];
	int rc, e = ECONNREFUSED, one = 1;

	snprintf(ps, sizeof ps, "%d", port);
	if ((rc = getaddrinfo(host, ps, &hints, &ai))) {
		snprintf(why, whylen, "cannot resolve: %s", gai_strerror(rc));
		return -1;
	}
	/* Every address in turn, each within what is left of the deadline. */
	for (p = ai; p; p = p->ai_next) {
		int fd = socket(p->ai_family, p->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
				p->ai_protocol);
		if (fd < 0) {
			e = errno;
			continue;
		}
		if ((e = connect_fd(fd, p->ai_addr, p->ai_addrlen, deadline))) {
			close(fd);
			if (e == ETIMEDOUT)
				break;
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
		*out = fd;
		freeaddrinfo(ai);
		return 0;
	}
	freeaddrinfo(ai);
	snprintf(why, whylen, "%s", strerror(e));
	return -1;
}

/* The TLS handshake, driven by poll until the deadline (the connect
 * timeout, which covers TCP and what follows it). */
static int
handshake(struct dmutex__conn *c, struct ssl_ctx_st *tls, const struct dmutex__node_addr *a,
		int64_t deadline, char *why, size_t whylen, int *refused)
{
	char msg[160];
	int rc;

	if (!(c->ssl = dmutex__tls_new(tls, c->fd, a, why, whylen)))
		return -1;
	while ((rc = dmutex__tls_handshake(c->ssl, &c->want, msg, sizeof msg)) != 1) {
		if (rc != DMUTEX__TLS_WAIT) {
			*refused = rc == DMUTEX__TLS_REFUSED;
			snprintf(why, whylen, "%s", msg);
			return -1;
		}
		switch (wait_fd(c->fd, c->want, deadline)) {
		case 0:
			snprintf(why, whylen, "timed out in the TLS handshake");
			return -1;
		case -1:
			snprintf(why, whylen, "poll: %s", strerror(errno));
			return -1;
		}
	}
	c->want = 0;
	return 0;
}

/*
 * A reply's wait is the one call per request that must wait: on a plain
 * socket it is a recv that blocks (one system call, as hiredis makes)
 * rather than poll then recv.  Its receive timeout is a slice, taken only
 * while at least a slice is left before the deadline; the last part of a
 * wait polls for exactly what is left.  OpenSSL needs a non-blocking
 * socket: TLS keeps poll.  If the socket cannot be switched, poll it is.
 */
#define DMUTEX__CONN_SLICE_MS 50

static void
make_blocking(struct dmutex__conn *c)
{
	struct timeval tv = { 0, DMUTEX__CONN_SLICE_MS * 1000 };
	int fl = fcntl(c->fd, F_GETFL);

	if (fl < 0 || setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv))
		return;
	if (fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK) == 0)
		c->blocking = 1;
}

struct dmutex__conn *
dmutex__conn_dial(const struct dmutex__node_addr *a, struct ssl_ctx_st *tls, int64_t deadline,
		char *why, size_t whylen, int *refused)
{
	struct dmutex__conn *c;
	int fd = -1, e;

	*refused = 0;
	if (a->path) {
		if ((e = dial_unix(a->path, deadline, &fd))) {
			snprintf(why, whylen, "%s", strerror(e));
			return NULL;
		}
	} else if (dial_tcp(a->host, a->port, deadline, &fd, why, whylen)) {
		return NULL;
	}
	if (!(c = conn_new(fd))) {
		close(fd);
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	if (tls && handshake(c, tls, a, deadline, why, whylen, refused)) {
		dmutex__conn_free(c);
		return NULL;
	}
	if (!tls)
		make_blocking(c);
	return c;
}

void
dmutex__conn_free(struct dmutex__conn *c)
{
	if (!c)
		return;
	/* Nobody will read them now: their requests may or may not have run. */
	while (c->owed) {
		struct dmutex__conn_owed *o = c->owed;
		c->owed = o->next;
		o->done(c, o, NULL);
	}
	if (c->ssl)
		dmutex__tls_free(c->ssl);
	if (c->fd >= 0)
		close(c->fd);
	redisReaderFree(c->rd);
	free(c->out);
	free(c->in);
	free(c);
}

/* Room for len more bytes of output; 0 or -1 (c->err set). */
static int
reserve(struct dmutex__conn *c, size_t len)
{
	if (c->outoff == c->outlen)
		c->outoff = c->outlen = 0;
	if (c->outlen + len > c->outcap) {
		size_t cap = c->outcap ? c->outcap : 256;
		char *p;
		while (cap < c->outlen + len)
			cap *= 2;
		if (!(p = realloc(c->out, cap))) {
			set_err(c, "cannot queue command", ENOMEM);
			return -1;
		}
		c->out = p;
		c->outcap = cap;
	}
	return 0;
}

static int
push(struct dmutex__conn *c, char *cmd, int len)
{
	if (len < 0) {
		set_err(c, "cannot format command", ENOMEM);
		return -1;
	}
	if (reserve(c, (size_t)len)) {
		redisFreeCommand(cmd);
		return -1;
	}
	memcpy(c->out + c->outlen, cmd, (size_t)len);
	c->outlen += (size_t)len;
	c->pending++;
	c->sent++;
	redisFreeCommand(cmd);
	return 0;
}

/* "<mark><v>\r\n" at p; its length. */
static size_t
resp_len_line(char *p, char mark, size_t v)
{
	size_t k;

	p[0] = mark;
	k = 1 + dmutex__udec(p + 1, v);
	p[k++] = '\r';
	p[k++] = '\n';
	return k;
}

/*
 * The request in RESP, written straight into the output buffer: what
 * redisFormatCommandArgv makes, without its allocations (an sds grown
 * argument by argument, then copied here and freed), on every request.
 */
int
dmutex__conn_append_argv(struct dmutex__conn *c, int argc, const char **argv, const size_t *lens)
{
	size_t total = 24, k;
	char *p;

	if (c->err)
		return -1;
	if (argc < 0) {
		set_err(c, "cannot format command", EINVAL);
		return -1;
	}
	/* An upper bound: "$<20 digits>\r\n" and "\r\n" are at most 25 bytes. */
	for (int i = 0; i < argc; i++)
		total += 32 + (lens ? lens[i] : strlen(argv[i]));
	if (reserve(c, total))
		return -1;
	p = c->out + c->outlen;
	k = resp_len_line(p, '*', (size_t)argc);
	for (int i = 0; i < argc; i++) {
		size_t len = lens ? lens[i] : strlen(argv[i]);
		k += resp_len_line(p + k, '$', len);
		memcpy(p + k, argv[i], len);
		k += len;
		p[k++] = '\r';
		p[k++] = '\n';
	}
	c->outlen += k;
	c->pending++;
	c->sent++;
	return 0;
}

int
dmutex__conn_appendf(struct dmutex__conn *c, const char *fmt, ...)
{
	char *cmd = NULL;
	va_list ap;
	int len;

	if (c->err)
		return -1;
	va_start(ap, fmt);
	len = redisvFormatCommand(&cmd, fmt, ap);
	va_end(ap);
	return push(c, cmd, len);
}

/* A TLS call's failure: BROKEN or REFUSED. */
static void
tls_err(struct dmutex__conn *c, ssize_t rc, const char *why)
{
	char msg[128];

	snprintf(msg, sizeof msg, "TLS: %.110s", why);
	set_err(c, msg, 0);
	c->tls_refused = rc == DMUTEX__TLS_REFUSED;
}

/* Bytes sent, 0 if it would block, -1 broken. */
static ssize_t
send_some(struct dmutex__conn *c, const char *buf, size_t len)
{
	ssize_t k;

	if (c->ssl) {
		char why[112], alert[112];
		short want;
		c->want = 0;
		if ((k = dmutex__tls_write(c->ssl, buf, len, &c->want, why, sizeof why)) >= 0)
			return k;
		/* A server that refused us (our certificate, TLS 1.3) sends an
		 * alert and closes: a write that meets the reset is explained
		 * by the alert waiting to be read. */
		if (k == DMUTEX__TLS_BROKEN && dmutex__tls_read(c->ssl, c->in, DMUTEX__CONN_IN, &want,
				alert, sizeof alert) == DMUTEX__TLS_REFUSED)
			tls_err(c, DMUTEX__TLS_REFUSED, alert);
		else
			tls_err(c, k, why);
		return -1;
	}
	for (;;) {
		/* MSG_NOSIGNAL: a reset connection gives EPIPE here, never a
		 * SIGPIPE that would kill the program (tls.c does the same). */
		if ((k = send(c->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT)) >= 0)
			return k;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		set_err(c, "send", errno);
		return -1;
	}
}

/* Bytes received, 0 if it would block, -1 broken (EOF included). */
static ssize_t
recv_some(struct dmutex__conn *c)
{
	ssize_t k;

	if (c->ssl) {
		char why[112];
		c->want = 0;
		if ((k = dmutex__tls_read(c->ssl, c->in, DMUTEX__CONN_IN, &c->want, why,
				sizeof why)) < 0)
			tls_err(c, k, why);
		return k < 0 ? -1 : k;
	}
	for (;;) {
		if ((k = recv(c->fd, c->in, DMUTEX__CONN_IN, MSG_DONTWAIT)) > 0)
			return k;
		if (k == 0) {
			set_err(c, "connection closed by server", 0);
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		set_err(c, "recv", errno);
		return -1;
	}
}

short
dmutex__conn_events(const struct dmutex__conn *c, short events)
{
	return (short)(events | c->want);
}

int
dmutex__conn_write(struct dmutex__conn *c)
{
	if (c->err)
		return -1;
	while (c->outoff < c->outlen) {
		ssize_t k = send_some(c, c->out + c->outoff, c->outlen - c->outoff);
		if (k <= 0)
			return k < 0 ? -1 : 0;
		c->outoff += (size_t)k;
	}
	c->outoff = c->outlen = 0;
	return 1;
}

int
dmutex__conn_flush(struct dmutex__conn *c, int64_t deadline)
{
	for (;;) {
		int rc = dmutex__conn_write(c);
		if (rc)
			return rc < 0 ? -1 : 0;
		switch (wait_fd(c->fd, c->ssl && c->want ? c->want : POLLOUT, deadline)) {
		case 0:
			set_err(c, "timed out sending", 0);
			return -1;
		case -1:
			set_err(c, "poll", errno);
			return -1;
		}
	}
}

int
dmutex__conn_fill(struct dmutex__conn *c)
{
	if (c->err)
		return -1;
	for (;;) {
		ssize_t k = recv_some(c);
		if (k <= 0)
			return k < 0 ? -1 : 0;
		if (redisReaderFeed(c->rd, c->in, (size_t)k) != REDIS_OK) {
			set_err(c, "out of memory reading", ENOMEM);
			return -1;
		}
		/* A short plain read emptied the socket; TLS returns one
		 * record at a time, so it reads on until it would block. */
		if (!c->ssl && k < DMUTEX__CONN_IN) {
			c->drained_ns = dmutex__now_ns();
			return 0;
		}
	}
}

int
dmutex__conn_next(struct dmutex__conn *c, void **reply)
{
	*reply = NULL;
	if (c->err)
		return -1;
	for (;;) {
		struct dmutex__conn_owed *o = c->owed;
		unsigned long long seq;

		if (redisReaderGetReply(c->rd, reply) != REDIS_OK) {
			char msg[128];
			snprintf(msg, sizeof msg, "protocol error: %.100s", c->rd->errstr);
			set_err(c, msg, 0);
			*reply = NULL;
			return -1;
		}
		if (!*reply)
			return 0;
		if (c->pending)
			c->pending--;
		seq = c->got++;
		if (!o || o->seq != seq)
			return 0;
		/* Owed: unlink first, done may owe again. */
		if (!(c->owed = o->next))
			c->owed_tail = NULL;
		c->nowed--;
		o->done(c, o, *reply);
		*reply = NULL;
	}
}

void
dmutex__conn_owe(struct dmutex__conn *c, struct dmutex__conn_owed *o)
{
	o->seq = c->sent - 1;
	o->next = NULL;
	if (c->owed_tail)
		c->owed_tail->next = o;
	else
		c->owed = o;
	c->owed_tail = o;
	c->nowed++;
}

/* Wait for input (or TLS's want) by the deadline: 0, or -1 with c->err. */
static int
wait_in(struct dmutex__conn *c, int64_t deadline)
{
	if (c->ssl && dmutex__tls_pending(c->ssl) > 0)
		return 0;
	switch (wait_fd(c->fd, c->ssl && c->want ? c->want : POLLIN, deadline)) {
	case 0:
		set_err(c, "timed out waiting for the reply", 0);
		return -1;
	case -1:
		set_err(c, "poll", errno);
		return -1;
	}
	return 0;
}

/* Wait for input by the deadline and read what came: 0, or -1 with c->err. */
static int
await_in(struct dmutex__conn *c, int64_t deadline)
{
	while (c->blocking && !c->err &&
			deadline - dmutex__now_ns() >= (int64_t)DMUTEX__CONN_SLICE_MS * DMUTEX__MS) {
		/* Returns within the slice: data, or EAGAIN when none came. */
		ssize_t k = recv(c->fd, c->in, DMUTEX__CONN_IN, 0);
		if (k > 0) {
			if (redisReaderFeed(c->rd, c->in, (size_t)k) != REDIS_OK) {
				set_err(c, "out of memory reading", ENOMEM);
				return -1;
			}
			if (k < DMUTEX__CONN_IN) {
				c->drained_ns = dmutex__now_ns();
				return 0;
			}
			return dmutex__conn_fill(c);
		}
		if (k == 0) {
			set_err(c, "connection closed by server", 0);
			return -1;
		}
		if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
			set_err(c, "recv", errno);
			return -1;
		}
	}
	return wait_in(c, deadline) || dmutex__conn_fill(c) ? -1 : 0;
}

int
dmutex__conn_settle(struct dmutex__conn *c, int64_t deadline)
{
	void *v;

	while (c->owed) {
		/* Owed replies come first: next returns none of its own. */
		if (dmutex__conn_next(c, &v))
			return -1;
		if (v) {
			/* A reply owed to a caller before an owed one: a bug. */
			freeReplyObject(v);
			set_err(c, "reply out of order", 0);
			return -1;
		}
		if (!c->owed)
			break;
		/* A NOSCRIPT answer appended the request again. */
		if (c->outlen > c->outoff && dmutex__conn_flush(c, deadline))
			return -1;
		if (await_in(c, deadline))
			return -1;
	}
	return 0;
}

/*
 * The check reads to find answers already there and a server that closed
 * the connection.  With every reply read (none pending), only a close can
 * be there; right after a read (or a poll) found the socket empty, a recv (a system
 * call per asynchronous release: the acquire's reply was read just before)
 * would see one no sooner than the request sent next does, and a close
 * just after the check is missed all the same.  What such a request then
 * loses, its connection's next reader or free hands to done as unknown.
 */
#define DMUTEX__CONN_QUIET_NS (1 * DMUTEX__MS)

/* Nothing can have come since a read emptied the socket, or a poll found
 * it empty, a moment ago (above). */
static int
quiet(const struct dmutex__conn *c)
{
	return !c->err && !c->ssl && !c->pending && c->drained_ns &&
		dmutex__now_ns() - c->drained_ns < DMUTEX__CONN_QUIET_NS;
}

int
dmutex__conn_check(struct dmutex__conn *c)
{
	void *v = NULL;

	if (quiet(c))
		return 0;
	if (dmutex__conn_fill(c) || dmutex__conn_next(c, &v))
		return -1;
	if (v) {
		freeReplyObject(v);
		set_err(c, "reply out of order", 0);
		return -1;
	}
	return 0;
}

int
dmutex__conn_closed(struct dmutex__conn *c)
{
	struct pollfd pf = { c->fd, POLLIN | POLLRDHUP, 0 };
	void *v = NULL;
	int n;

	if (c->err)
		return 1;
	/* Emptied by a read a moment ago: the server was there then, and a
	 * close since is as likely as one just after this check (see
	 * dmutex__conn_check); a lock loop pays no system call for it. */
	if (quiet(c))
		return 0;
	if ((n = poll(&pf, 1, 0)) == 0 && !c->ssl) {
		/* Nothing to read, no close: the socket is as empty as a read
		 * that emptied it would leave it, so the check that follows
		 * (an asynchronous release's, release_async.c) need not read
		 * it again. */
		c->drained_ns = dmutex__now_ns();
		return 0;
	}
	if (n <= 0 || !(pf.revents & (POLLRDHUP | POLLHUP | POLLERR)))
		return 0;
	/* Answers that came before the close are still theirs. */
	(void)dmutex__conn_fill(c);
	if (!dmutex__conn_next(c, &v) && v)
		freeReplyObject(v);
	set_err(c, "closed by the server", 0);
	return 1;
}

int
dmutex__conn_get(struct dmutex__conn *c, void **reply, int64_t deadline)
{
	*reply = NULL;
	if (dmutex__conn_flush(c, deadline))
		return -1;
	for (;;) {
		if (dmutex__conn_next(c, reply))
			return -1;
		if (*reply)
			return 0;
		if (await_in(c, deadline))
			return -1;
	}
}

redisReply *
dmutex__conn_command(struct dmutex__conn *c, int64_t deadline, const char *fmt, ...)
{
	char *cmd = NULL;
	void *v;
	va_list ap;
	int len;

	if (c->err)
		return NULL;
	va_start(ap, fmt);
	len = redisvFormatCommand(&cmd, fmt, ap);
	va_end(ap);
	if (push(c, cmd, len) || dmutex__conn_get(c, &v, deadline))
		return NULL;
	return v;
}

redisReply *
dmutex__conn_command_secret(struct dmutex__conn *c, int64_t deadline, int argc, const char **argv)
{
	size_t from, to;
	void *v = NULL;
	int err;

	if (c->err)
		return NULL;
	/* Where append_argv writes: after what is still unsent, else at 0
	 * (reserve starts the buffer afresh when all was sent). */
	from = c->outoff == c->outlen ? 0 : c->outlen;
	err = dmutex__conn_append_argv(c, argc, argv, NULL);
	to = c->outlen;
	if (!err)
		err = dmutex__conn_get(c, &v, deadline);
	/* Sent or never to be (a reply read means all of it went, and an
	 * error ends the connection): the bytes stay where they were
	 * written, flush only moves the offsets. */
	if (to > from)
		explicit_bzero(c->out + from, to - from);
	return err ? NULL : v;
}

int64_t
dmutex__conn_deadline(const struct dmutex__conn *c)
{
	return dmutex__now_ns() + (int64_t)c->command_ms * DMUTEX__MS;
}
