/*
 * A minimal HTTP/1.1 server for scrapes: GET of /metrics (or /) answered
 * with a page rendered afresh, everything else 404 or 405.  Enough for
 * Prometheus; not a general web server.  Runs until SIGINT or SIGTERM.
 *
 * Hostile clients cannot hold it: one poll loop over non-blocking sockets
 * serves up to HTTP_CONNS connections at once; each has HTTP_HEAD_MS from
 * its accept for its whole request head (not per recv: a byte every 4 s
 * does not keep it) and HTTP_SEND_MS for taking the whole answer (a client
 * that stops reading is dropped), and a signal ends the loop at once.
 * Rendering reads Redis in the loop itself, bounded by the URL's timeouts.
 *
 * Why not libmicrohttpd (Debian's libmicrohttpd-dev): it has all of this
 * and more, but it is another run-time dependency of the tool (and of the
 * Debian tools package) and another TLS/HTTP surface to keep patched, for
 * one GET with no body, no keep-alive and no TLS; this file is smaller
 * than the glue and option settings it would take to use it safely.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

enum {
	HTTP_CONNS = 16,        /* served at once; more wait in the backlog */
	HTTP_HEAD_MS = 5000,    /* from accept to the end of the request head */
	HTTP_SEND_MS = 10000,   /* from the answer being ready to its last byte */
	HTTP_HEAD_MAX = 4096
};

struct hconn {
	int fd;
	long long deadline;     /* monotonic ms */
	size_t got;
	char req[HTTP_HEAD_MAX];
	char *out;              /* the whole answer once the head is in */
	size_t len, sent;
};

static volatile sig_atomic_t stop;

static void
on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

/* "HOST:PORT", "[V6]:PORT" or ":PORT" (every address). */
static int
listen_on(const char *addr)
{
	char host[256];
	const char *colon = strrchr(addr, ':'), *h = addr;
	size_t hlen;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *res, *ai;
	int fd = -1, one = 1, rc;

	if (!colon || !colon[1]) {
		cli_err("--listen wants ADDR:PORT, not '%s'", addr);
		return -CLI_USAGE;
	}
	hlen = (size_t)(colon - addr);
	if (hlen >= 2 && addr[0] == '[' && colon[-1] == ']') {
		h = addr + 1;
		hlen -= 2;
	}
	if (hlen >= sizeof host) {
		cli_err("--listen: address too long");
		return -CLI_USAGE;
	}
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	if ((rc = getaddrinfo(hlen ? host : NULL, colon + 1, &hints, &res))) {
		cli_err("--listen %s: %s", addr, gai_strerror(rc));
		return -CLI_USAGE;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		if ((fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (!bind(fd, ai->ai_addr, ai->ai_addrlen) && !listen(fd, 64))
			break;
		close(fd);
		fd = -1;
	}
	if (fd < 0)
		cli_err("--listen %s: %s", addr, strerror(errno));
	freeaddrinfo(res);
	return fd < 0 ? -CLI_BACKEND : fd;
}

static long long
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The answer, head and body, into c->out (NULL when out of memory). */
static void
respond(struct hconn *c, const char *status, const char *body, size_t len)
{
	FILE *f = open_memstream(&c->out, &c->len);

	if (!f)
		return;
	fprintf(f, "HTTP/1.1 %s\r\n"
			"Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
			"Content-Length: %zu\r\nConnection: close\r\n\r\n", status, len);
	fwrite(body, 1, len, f);
	if (fclose(f)) {
		free(c->out);
		c->out = NULL;
	}
}

static void
answer(struct hconn *c, int (*render)(FILE *, void *), void *arg)
{
	char *body = NULL;
	size_t len = 0;
	FILE *f;
	int st;

	if (strncmp(c->req, "GET ", 4)) {
		respond(c, "405 Method Not Allowed", "GET only\n", 9);
		return;
	}
	if (strncmp(c->req + 4, "/metrics ", 9) && strncmp(c->req + 4, "/ ", 2)) {
		respond(c, "404 Not Found", "see /metrics\n", 13);
		return;
	}
	f = open_memstream(&body, &len);
	st = f ? render(f, arg) : CLI_INTERNAL;
	if (f && fclose(f))
		st = CLI_INTERNAL;
	if (st)
		respond(c, "503 Service Unavailable", "the backend cannot be read\n", 27);
	else
		respond(c, "200 OK", body, len);
	free(body);
}

/* Send what the socket takes now.  1 when the connection is done with
 * (all sent, or the client is gone), 0 to wait for room. */
static int
send_some(struct hconn *c)
{
	while (c->sent < c->len) {
		ssize_t w = send(c->fd, c->out + c->sent, c->len - c->sent,
				MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (w <= 0)
			return 1;
		c->sent += (size_t)w;
	}
	return 1;
}

/* The connection is ready: read the head, or send the answer.  1 when it
 * is done with. */
static int
step(struct hconn *c, int (*render)(FILE *, void *), void *arg)
{
	ssize_t r;

	if (c->out)
		return send_some(c);
	r = recv(c->fd, c->req + c->got, sizeof c->req - 1 - c->got, MSG_DONTWAIT);
	if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (r <= 0)
		return 1;
	c->got += (size_t)r;
	c->req[c->got] = '\0';
	if (c->got < sizeof c->req - 1 && !strstr(c->req, "\r\n\r\n"))
		return 0;
	answer(c, render, arg);
	if (!c->out)
		return 1;
	c->deadline = mono_ms() + HTTP_SEND_MS;
	return send_some(c);
}

/* Take the waiting connections while there is room. */
static void
take(int lfd, struct hconn **conns, size_t *n)
{
	while (*n < HTTP_CONNS) {
		struct hconn *c;
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			return;
		if (!(c = calloc(1, sizeof *c))) {
			close(fd);
			return;
		}
		c->fd = fd;
		c->deadline = mono_ms() + HTTP_HEAD_MS;
		conns[(*n)++] = c;
	}
}

static void
drop(struct hconn **conns, size_t *n, size_t i)
{
	close(conns[i]->fd);
	free(conns[i]->out);
	free(conns[i]);
	conns[i] = conns[--*n];
}

/* Wait for the sockets, the nearest deadline or a signal (the only time
 * SIGINT and SIGTERM are let in: `wait` is the mask without them). */
static void
wait_ready(int lfd, struct hconn **conns, size_t n, struct pollfd *p,
		const sigset_t *wait)
{
	long long now = mono_ms(), ms = 1000;
	struct timespec ts;

	p[0] = (struct pollfd){ .fd = n < HTTP_CONNS ? lfd : -1, .events = POLLIN };
	for (size_t i = 0; i < n; i++) {
		p[i + 1] = (struct pollfd){ .fd = conns[i]->fd,
				.events = conns[i]->out ? POLLOUT : POLLIN };
		if (conns[i]->deadline - now < ms)
			ms = conns[i]->deadline - now;
	}
	if (ms < 0)
		ms = 0;
	ts = (struct timespec){ .tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000 };
	if (ppoll(p, n + 1, &ts, wait) < 0)
		for (size_t i = 0; i <= n; i++)
			p[i].revents = 0;
}

static void
serve(int lfd, int (*render)(FILE *, void *), void *arg, const sigset_t *wait)
{
	struct hconn *conns[HTTP_CONNS];
	struct pollfd p[HTTP_CONNS + 1];
	size_t n = 0;

	while (!stop) {
		wait_ready(lfd, conns, n, p, wait);
		/* Backwards: drop() moves the last one into the hole. */
		for (size_t i = n; i-- > 0; ) {
			int done = p[i + 1].revents && step(conns[i], render, arg);
			if (done || mono_ms() >= conns[i]->deadline)
				drop(conns, &n, i);
		}
		if (p[0].revents & POLLIN)
			take(lfd, conns, &n);
	}
	while (n)
		drop(conns, &n, n - 1);
}

int
cli_http_serve(const char *addr, int (*render)(FILE *, void *), void *arg)
{
	struct sigaction sa = { .sa_handler = on_signal };
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	char host[256], port[32];
	sigset_t term, old, wait;
	int lfd = listen_on(addr);

	if (lfd < 0)
		return -lfd;
	/* Blocked but while waiting, so that neither a thread rendering
	 * starts (they inherit the mask) nor a moment between the check of
	 * `stop` and the wait can swallow the signal. */
	sigemptyset(&term);
	sigaddset(&term, SIGINT);
	sigaddset(&term, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &term, &old);
	wait = old;
	sigdelset(&wait, SIGINT);
	sigdelset(&wait, SIGTERM);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (!getsockname(lfd, (struct sockaddr *)&ss, &sl) &&
	    !getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, port, sizeof port,
			NI_NUMERICHOST | NI_NUMERICSERV))
		fprintf(stderr, "dmutex: serving metrics on http://%s%s%s:%s/metrics\n",
				strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", port);
	serve(lfd, render, arg, &wait);
	close(lfd);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return CLI_OK;
}
