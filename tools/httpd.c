/*
 * A minimal HTTP/1.1 server for scrapes: one connection at a time, GET of
 * /metrics (or /) answered with a page rendered afresh, everything else
 * 404 or 405.  Enough for Prometheus; not a general web server.  Runs until
 * SIGINT or SIGTERM.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli.h"

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
		if ((fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0)) < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (!bind(fd, ai->ai_addr, ai->ai_addrlen) && !listen(fd, 16))
			break;
		close(fd);
		fd = -1;
	}
	if (fd < 0)
		cli_err("--listen %s: %s", addr, strerror(errno));
	freeaddrinfo(res);
	return fd < 0 ? -CLI_BACKEND : fd;
}

static void
send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w <= 0 && errno != EINTR)
			return;
		if (w > 0) {
			p += w;
			n -= (size_t)w;
		}
	}
}

static void
respond(int fd, const char *status, const char *body, size_t len)
{
	char head[256];
	int n = snprintf(head, sizeof head, "HTTP/1.1 %s\r\n"
			"Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
			"Content-Length: %zu\r\nConnection: close\r\n\r\n", status, len);

	send_all(fd, head, (size_t)n);
	send_all(fd, body, len);
}

static void
serve_one(int fd, int (*render)(FILE *, void *), void *arg)
{
	char req[4096] = "";
	size_t got = 0;

	/* A client gets 5 s to send its request head. */
	while (got < sizeof req - 1 && !strstr(req, "\r\n\r\n")) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;
		if (poll(&p, 1, 5000) <= 0)
			return;
		if ((r = recv(fd, req + got, sizeof req - 1 - got, 0)) <= 0)
			return;
		got += (size_t)r;
		req[got] = '\0';
	}
	req[got] = '\0';
	if (strncmp(req, "GET ", 4)) {
		respond(fd, "405 Method Not Allowed", "GET only\n", 9);
	} else if (strncmp(req + 4, "/metrics ", 9) && strncmp(req + 4, "/ ", 2)) {
		respond(fd, "404 Not Found", "see /metrics\n", 13);
	} else {
		char *body = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&body, &len);
		int st = f ? render(f, arg) : CLI_INTERNAL;
		if (f)
			fclose(f);
		if (st)
			respond(fd, "503 Service Unavailable", "the backend cannot be read\n", 27);
		else
			respond(fd, "200 OK", body, len);
		free(body);
	}
}

int
cli_http_serve(const char *addr, int (*render)(FILE *, void *), void *arg)
{
	struct sigaction sa = { .sa_handler = on_signal };
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	char host[256], port[32];
	int lfd = listen_on(addr);

	if (lfd < 0)
		return -lfd;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (!getsockname(lfd, (struct sockaddr *)&ss, &sl) &&
	    !getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, port, sizeof port,
			NI_NUMERICHOST | NI_NUMERICSERV))
		fprintf(stderr, "dmutex: serving metrics on http://%s%s%s:%s/metrics\n",
				strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", port);
	while (!stop) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		int fd;
		if (poll(&p, 1, 500) <= 0)
			continue;
		if ((fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
			continue;
		serve_one(fd, render, arg);
		close(fd);
	}
	close(lfd);
	return CLI_OK;
}
