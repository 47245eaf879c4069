#include "fake_redis.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 64

struct fake_redis {
	int lfd;
	char path[108];
	char url[128];
	fake_reply_fn fn;
	void *arg;
	pthread_t thread;
	atomic_int stop, trickle_ms, hang_up, calls;
	pthread_mutex_t mu;
	int fds[MAX_CONNS];             /* open connections, mu */
	pthread_t conn_threads[MAX_CONNS];
	int nconn;
};

char *
fake_fmt(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	return s;
}

/* Read one byte, waiting at most 100 ms at a time so stop is noticed. */
static int
get_byte(struct fake_redis *f, int fd, char *b)
{
	while (!atomic_load(&f->stop)) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int k = poll(&p, 1, 100);
		if (k < 0 && errno != EINTR)
			return -1;
		if (k > 0)
			return read(fd, b, 1) == 1 ? 0 : -1;
	}
	return -1;
}

static int
get_line(struct fake_redis *f, int fd, char *buf, size_t len)
{
	size_t n = 0;
	char b;

	while (n + 1 < len) {
		if (get_byte(f, fd, &b))
			return -1;
		if (b == '\n') {
			if (n && buf[n - 1] == '\r')
				n--;
			buf[n] = '\0';
			return 0;
		}
		buf[n++] = b;
	}
	return -1;
}

static void
free_argv(int argc, char **argv)
{
	for (int i = 0; i < argc; i++)
		free(argv[i]);
	free(argv);
}

/* One command: *N then N bulk strings. */
static int
get_command(struct fake_redis *f, int fd, int *argc, char ***argv)
{
	char line[64];
	int n;

	if (get_line(f, fd, line, sizeof line) || line[0] != '*' || (n = atoi(line + 1)) <= 0 || n > 1000)
		return -1;
	*argv = calloc((size_t)n + 1, sizeof **argv);
	*argc = 0;
	for (int i = 0; i < n; i++) {
		long len;
		if (get_line(f, fd, line, sizeof line) || line[0] != '$' || (len = atol(line + 1)) < 0 ||
				len > (1 << 20) || !((*argv)[i] = malloc((size_t)len + 3))) {
			free_argv(*argc, *argv);
			return -1;
		}
		*argc = i + 1;
		for (long k = 0; k < len + 2; k++)
			if (get_byte(f, fd, &(*argv)[i][k])) {
				free_argv(*argc, *argv);
				return -1;
			}
		(*argv)[i][len] = '\0';
	}
	return 0;
}

static int
put(int fd, const char *s, size_t len, int byte_ms)
{
	if (!byte_ms)
		return send(fd, s, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
	for (size_t i = 0; i < len; i++) {
		/* The server's own pace: this is what is under test. */
		struct timespec ts = { byte_ms / 1000, (long)(byte_ms % 1000) * 1000000 };
		if (send(fd, s + i, 1, MSG_NOSIGNAL) != 1)
			return -1;
		nanosleep(&ts, NULL);
	}
	return 0;
}

/* What a healthy Redis answers to the commands of dmutex_client_open;
 * NULL for the callback's commands. */
static char *
builtin(struct fake_redis *f, int argc, char **argv)
{
	if (!strcasecmp(argv[0], "PING"))
		return strdup("+PONG\r\n");
	if (!strcasecmp(argv[0], "SUBSCRIBE") || !strcasecmp(argv[0], "UNSUBSCRIBE")) {
		int sub = !strcasecmp(argv[0], "SUBSCRIBE");
		return argc < 2 ? strdup("-ERR wrong number of arguments\r\n")
			: fake_fmt("*3\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n:%d\r\n", strlen(argv[0]),
					sub ? "subscribe" : "unsubscribe", strlen(argv[1]), argv[1], sub);
	}
	if (!strcasecmp(argv[0], "CONFIG"))
		return strdup("*2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n");
	if (!strcasecmp(argv[0], "INFO")) {
		char body[128];
		/* 40 hex digits, as Redis's; one per fake server. */
		int n = snprintf(body, sizeof body, "# Server\r\nrun_id:%040lx\r\n", (unsigned long)(size_t)f);
		return fake_fmt("$%d\r\n%s\r\n", n, body);
	}
	if (!strcasecmp(argv[0], "EVAL") && argc >= 2 && !strcmp(argv[1], "return 1"))
		return strdup(":1\r\n");
	/* The permission probe: everything allowed. */
	if ((!strcasecmp(argv[0], "EVALSHA") || !strcasecmp(argv[0], "EVAL")) && argc >= 4 &&
			strstr(argv[3], "probe:"))
		return strdup("*0\r\n");
	(void)f;
	return NULL;
}

struct conn_arg {
	struct fake_redis *f;
	int fd;
};

static void *
serve(void *p)
{
	struct conn_arg *ca = p;
	struct fake_redis *f = ca->f;
	int fd = ca->fd, argc;
	char **argv;

	free(ca);
	while (!atomic_load(&f->stop) && !get_command(f, fd, &argc, &argv)) {
		char *r = builtin(f, argc, argv);
		int byte_ms = 0;
		if (!r) {
			r = f->fn(argc, argv, f->arg);
			atomic_fetch_add(&f->calls, 1);
			byte_ms = atomic_load(&f->trickle_ms);
		}
		free_argv(argc, argv);
		if (!r || put(fd, r, strlen(r), byte_ms)) {
			free(r);
			break;
		}
		free(r);
	}
	shutdown(fd, SHUT_RDWR);
	return NULL;
}

static void *
accept_loop(void *p)
{
	struct fake_redis *f = p;

	while (!atomic_load(&f->stop)) {
		struct pollfd pf = { .fd = f->lfd, .events = POLLIN };
		struct conn_arg *ca;
		int fd;
		if (poll(&pf, 1, 100) <= 0)
			continue;
		if ((fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
			continue;
		pthread_mutex_lock(&f->mu);
		if (atomic_load(&f->hang_up) || f->nconn == MAX_CONNS || !(ca = malloc(sizeof *ca))) {
			pthread_mutex_unlock(&f->mu);
			close(fd);
			continue;
		}
		ca->f = f;
		ca->fd = fd;
		f->fds[f->nconn] = fd;
		if (pthread_create(&f->conn_threads[f->nconn], NULL, serve, ca)) {
			free(ca);
			close(fd);
		} else {
			f->nconn++;
		}
		pthread_mutex_unlock(&f->mu);
	}
	return NULL;
}

int
fake_redis_start(struct fake_redis **out, const char *dir, const char *name, fake_reply_fn fn, void *arg)
{
	struct fake_redis *f = calloc(1, sizeof *f);
	struct sockaddr_un sun = { .sun_family = AF_UNIX };

	if (!f)
		return -1;
	f->fn = fn;
	f->arg = arg;
	pthread_mutex_init(&f->mu, NULL);
	snprintf(f->path, sizeof f->path, "%.80s/%.16s.sock", dir, name);
	snprintf(f->url, sizeof f->url, "unix://%s", f->path);
	snprintf(sun.sun_path, sizeof sun.sun_path, "%s", f->path);
	unlink(f->path);
	if ((f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
			bind(f->lfd, (struct sockaddr *)&sun, sizeof sun) || listen(f->lfd, 16) ||
			pthread_create(&f->thread, NULL, accept_loop, f)) {
		perror("fake_redis_start");
		if (f->lfd >= 0)
			close(f->lfd);
		free(f);
		return -1;
	}
	*out = f;
	return 0;
}

const char *
fake_redis_url(const struct fake_redis *f)
{
	return f->url;
}

void
fake_redis_trickle(struct fake_redis *f, int byte_ms)
{
	atomic_store(&f->trickle_ms, byte_ms);
}

void
fake_redis_hang_up(struct fake_redis *f)
{
	atomic_store(&f->hang_up, 1);
	pthread_mutex_lock(&f->mu);
	for (int i = 0; i < f->nconn; i++)
		shutdown(f->fds[i], SHUT_RDWR);
	pthread_mutex_unlock(&f->mu);
}

int
fake_redis_calls(struct fake_redis *f)
{
	return atomic_load(&f->calls);
}

void
fake_redis_stop(struct fake_redis *f)
{
	if (!f)
		return;
	atomic_store(&f->stop, 1);
	pthread_join(f->thread, NULL);
	pthread_mutex_lock(&f->mu);
	for (int i = 0; i < f->nconn; i++)
		shutdown(f->fds[i], SHUT_RDWR);
	pthread_mutex_unlock(&f->mu);
	for (int i = 0; i < f->nconn; i++) {
		pthread_join(f->conn_threads[i], NULL);
		close(f->fds[i]);
	}
	close(f->lfd);
	unlink(f->path);
	pthread_mutex_destroy(&f->mu);
	free(f);
}
