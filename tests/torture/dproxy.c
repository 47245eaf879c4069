/* The delaying proxy.  See dproxy.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dproxy.h"
#include "torture.h"

#define DP_MAX   256
#define DP_READ  65536
#define DP_LIMIT (1 << 20)      /* bytes queued per direction before reading stops */

struct dp_chunk {
	struct dp_chunk *next;
	int64_t due;
	size_t len, off;
	char data[];
};

struct dp_dir {
	struct dp_chunk *head, *tail;
	size_t bytes;
	int eof, shut;
};

struct dp_conn {
	int cfd, sfd, connecting;
	struct dp_dir c2s, s2c;
};

struct tt_dproxy {
	int lfd, port, target, wake[2];
	pthread_t thr;
	pthread_mutex_t mu;
	int delay_ms, stop;             /* under mu */
	struct dp_conn *conns[DP_MAX];
	int n;                          /* the thread's own */
	char *buf;
	struct pollfd *pfd;
};

static void
dir_free(struct dp_dir *d)
{
	while (d->head) {
		struct dp_chunk *c = d->head;
		d->head = c->next;
		free(c);
	}
	d->tail = NULL;
	d->bytes = 0;
}

static void
conn_drop(struct tt_dproxy *p, int i)
{
	struct dp_conn *c = p->conns[i];

	close(c->cfd);
	if (c->sfd >= 0)
		close(c->sfd);
	dir_free(&c->c2s);
	dir_free(&c->s2c);
	free(c);
	p->conns[i] = p->conns[--p->n];
}

static void
accept_all(struct tt_dproxy *p)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)p->target),
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1;

	while (p->n < DP_MAX) {
		int cfd = accept4(p->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), sfd;
		struct dp_conn *c;

		if (cfd < 0)
			return;
		sfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		c = calloc(1, sizeof *c);
		if (sfd < 0 || !c || (connect(sfd, (struct sockaddr *)&sa, sizeof sa) && errno != EINPROGRESS)) {
			close(cfd);
			if (sfd >= 0)
				close(sfd);
			free(c);
			continue;
		}
		setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		c->cfd = cfd;
		c->sfd = sfd;
		c->connecting = 1;
		p->conns[p->n++] = c;
	}
}

/* Read what fd has into d, due at now + delay.  -1: the connection broke. */
static int
pull(struct tt_dproxy *p, int fd, struct dp_dir *d, int64_t due)
{
	while (d->bytes < DP_LIMIT) {
		ssize_t n = recv(fd, p->buf, DP_READ, MSG_DONTWAIT);
		struct dp_chunk *c;

		if (n == 0) {
			d->eof = 1;
			return 0;
		}
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
		if (!(c = malloc(sizeof *c + (size_t)n)))
			return -1;
		memcpy(c->data, p->buf, (size_t)n);
		c->len = (size_t)n;
		c->off = 0;
		c->due = due;
		c->next = NULL;
		if (d->tail)
			d->tail->next = c;
		else
			d->head = c;
		d->tail = c;
		d->bytes += (size_t)n;
	}
	return 0;
}

/* Send what is due.  Returns -1 when the connection broke, else 1 if a due
 * chunk is blocked (wait for POLLOUT), 0 if not. */
static int
push(int fd, struct dp_dir *d, int64_t now)
{
	while (d->head && d->head->due <= now) {
		struct dp_chunk *c = d->head;
		ssize_t n = send(fd, c->data + c->off, c->len - c->off, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 1 : -1;
		c->off += (size_t)n;
		d->bytes -= (size_t)n;
		if (c->off < c->len)
			return 1;
		d->head = c->next;
		if (!d->head)
			d->tail = NULL;
		free(c);
	}
	if (!d->head && d->eof && !d->shut) {
		shutdown(fd, SHUT_WR);
		d->shut = 1;
	}
	return 0;
}

static void *
run(void *arg)
{
	struct tt_dproxy *p = arg;

	for (;;) {
		int64_t now = tt_now_ns(), next = INT64_MAX;
		int delay, timeout;

		pthread_mutex_lock(&p->mu);
		delay = p->delay_ms;
		if (p->stop) {
			pthread_mutex_unlock(&p->mu);
			break;
		}
		pthread_mutex_unlock(&p->mu);

		for (int i = p->n - 1; i >= 0; i--) {
			struct dp_conn *c = p->conns[i];
			int a = 0, b;

			if (!c->connecting && (a = push(c->sfd, &c->c2s, now)) < 0)
				goto drop;
			if ((b = push(c->cfd, &c->s2c, now)) < 0)
				goto drop;
			if (c->c2s.shut && c->s2c.shut)
				goto drop;
			p->pfd[2 + 2 * i].events = (short)((!c->c2s.eof && c->c2s.bytes < DP_LIMIT ? POLLIN : 0) |
					(b ? POLLOUT : 0));
			p->pfd[3 + 2 * i].events = (short)(c->connecting ? POLLOUT
					: (!c->s2c.eof && c->s2c.bytes < DP_LIMIT ? POLLIN : 0) | (a ? POLLOUT : 0));
			/* A side that said EOF would report POLLHUP forever: look
			 * at it only when there is something to send it. */
			p->pfd[2 + 2 * i].fd = p->pfd[2 + 2 * i].events || !c->c2s.eof ? c->cfd : -1;
			p->pfd[3 + 2 * i].fd = p->pfd[3 + 2 * i].events || !c->s2c.eof ? c->sfd : -1;
			if (c->c2s.head && c->c2s.head->due > now && c->c2s.head->due < next)
				next = c->c2s.head->due;
			if (c->s2c.head && c->s2c.head->due > now && c->s2c.head->due < next)
				next = c->s2c.head->due;
			continue;
drop:
			conn_drop(p, i);
			/* the slot now holds the last connection: set it up again */
			if (i < p->n)
				i++;
		}
		p->pfd[0].fd = p->wake[0];
		p->pfd[0].events = POLLIN;
		p->pfd[1].fd = p->n < DP_MAX ? p->lfd : -1;
		p->pfd[1].events = POLLIN;
		timeout = next == INT64_MAX ? -1 : (int)((next - now + 999999) / 1000000);
		if (poll(p->pfd, (nfds_t)(2 + 2 * p->n), timeout) < 0 && errno != EINTR) {
			fprintf(stderr, "torture proxy: poll: %s\n", strerror(errno));
			tt_sleep_ms(10);
			continue;
		}
		if (p->pfd[0].revents) {
			char b[64];
			while (read(p->wake[0], b, sizeof b) > 0)
				;
		}
		now = tt_now_ns();
		for (int i = p->n - 1; i >= 0; i--) {
			struct dp_conn *c = p->conns[i];
			short cr = p->pfd[2 + 2 * i].revents, sr = p->pfd[3 + 2 * i].revents;
			int64_t due = now + (int64_t)delay * 1000000;

			if (c->connecting && sr) {
				int err = 0;
				socklen_t len = sizeof err;
				if (getsockopt(c->sfd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
					conn_drop(p, i);
					continue;
				}
				c->connecting = 0;
				sr = 0;
			}
			if (((cr & (POLLIN | POLLHUP | POLLERR)) && pull(p, c->cfd, &c->c2s, due)) ||
			    (!c->connecting && (sr & (POLLIN | POLLHUP | POLLERR)) &&
			     pull(p, c->sfd, &c->s2c, due)))
				conn_drop(p, i);
		}
		if (p->pfd[1].revents)
			accept_all(p);
	}
	while (p->n)
		conn_drop(p, p->n - 1);
	return NULL;
}

struct tt_dproxy *
tt_dproxy_start(int target)
{
	struct tt_dproxy *p = calloc(1, sizeof *p);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof sa;

	if (!p)
		return NULL;
	p->target = target;
	p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	p->buf = malloc(DP_READ);
	p->pfd = calloc(2 + 2 * DP_MAX, sizeof *p->pfd);
	pthread_mutex_init(&p->mu, NULL);
	if (p->lfd < 0 || !p->buf || !p->pfd || bind(p->lfd, (struct sockaddr *)&sa, sizeof sa) ||
	    listen(p->lfd, 128) || getsockname(p->lfd, (struct sockaddr *)&sa, &len) ||
	    pipe2(p->wake, O_CLOEXEC | O_NONBLOCK) || pthread_create(&p->thr, NULL, run, p)) {
		fprintf(stderr, "torture proxy: %s\n", strerror(errno));
		if (p->lfd >= 0)
			close(p->lfd);
		free(p->buf);
		free(p->pfd);
		free(p);
		return NULL;
	}
	p->port = ntohs(sa.sin_port);
	return p;
}

int
tt_dproxy_port(const struct tt_dproxy *p)
{
	return p->port;
}

static void
wake(struct tt_dproxy *p)
{
	ssize_t n;

	do {
		n = write(p->wake[1], "w", 1);
	} while (n < 0 && errno == EINTR);
}

void
tt_dproxy_set_delay(struct tt_dproxy *p, int delay_ms)
{
	pthread_mutex_lock(&p->mu);
	p->delay_ms = delay_ms;
	pthread_mutex_unlock(&p->mu);
	wake(p);
}

void
tt_dproxy_stop(struct tt_dproxy *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_mutex_unlock(&p->mu);
	wake(p);
	pthread_join(p->thr, NULL);
	close(p->lfd);
	close(p->wake[0]);
	close(p->wake[1]);
	pthread_mutex_destroy(&p->mu);
	free(p->buf);
	free(p->pfd);
	free(p);
}
