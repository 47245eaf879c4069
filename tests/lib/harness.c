/*
 * Shared test harness for dmutex.  See harness.h for the contract.
 */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TH_REDIS_DEFAULT_BIN "/usr/bin/redis-server"
#define TH_START_ATTEMPTS 5
#define TH_START_DEADLINE_MS 10000
#define TH_STATE_DEADLINE_MS 5000
#define TH_ADMIN_TIMEOUT_MS 5000
#define TH_DIR_PREFIX "th-redis-"

/* ------------------------------------------------------------------ */
/* small utilities                                                     */
/* ------------------------------------------------------------------ */

long long th_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Poll interval helper: never used as a synchronisation by itself, only
 * between two checks of a condition with a deadline. */
static void th_nap_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

int th_wait_until(int (*cond)(void *), void *arg, int timeout_ms)
{
	long long deadline = th_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	for (;;) {
		if (cond(arg))
			return 1;
		if (th_now_ms() >= deadline)
			return cond(arg) ? 1 : 0;
		th_nap_ms(2);
	}
}

static struct timeval ms_to_tv(int ms)
{
	struct timeval tv;
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	return tv;
}

/* ------------------------------------------------------------------ */
/* global state, fork safety                                           */
/* ------------------------------------------------------------------ */

#define TH_MAX_SERVERS 64
struct th_reg_entry {
	int used;
	pid_t owner;     /* process that started it: only it may clean up */
	pid_t pid;       /* current server pid, 0 while not running */
	char dir[256];
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct th_reg_entry reg[TH_MAX_SERVERS];

static pthread_mutex_t proxies_mu = PTHREAD_MUTEX_INITIALIZER;
static struct th_proxy *proxies; /* list, for the fork handlers */

/* in a forked child: the parent's proxies (threadless copies), kept only so
 * that their memory stays reachable (no false leak reports) */
static struct th_proxy *inherited_proxies;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void atfork_prepare(void);
static void atfork_parent(void);
static void atfork_child(void);

static void th_init_impl(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
	atexit(th_redis_stop_all);
}

static void th_init(void)
{
	pthread_once(&init_once, th_init_impl);
}

/* ------------------------------------------------------------------ */
/* processes                                                           */
/* ------------------------------------------------------------------ */

int th_proc_state(pid_t pid)
{
	char path[64], buf[1024];
	if (pid <= 0)
		return -1;
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n;
	do {
		n = read(fd, buf, sizeof buf - 1);
	} while (n < 0 && errno == EINTR);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* "pid (comm) S ...": comm may contain spaces and ')' */
	char *rp = strrchr(buf, ')');
	if (!rp || rp[1] != ' ' || rp[2] == '\0')
		return -1;
	return (unsigned char)rp[2];
}

int th_proc_gone(pid_t pid)
{
	int st = th_proc_state(pid);
	if (st < 0)
		return 1;
	if (st != 'Z' && st != 'X')
		return 0;
	/* A zombie leader can still have threads exiting, and the process's
	 * files (sockets, ports) are only closed when the last one is gone:
	 * exited non-leader threads vanish from /proc/PID/task. */
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return 1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n <= 1;
}

static int wait_state(pid_t pid, int want_stopped, int timeout_ms)
{
	long long deadline = th_now_ms() + timeout_ms;
	for (;;) {
		int st = th_proc_state(pid);
		if (st < 0 || st == 'Z' || st == 'X')
			return -1;
		if (want_stopped ? st == 'T' : st != 'T')
			return 0;
		if (th_now_ms() >= deadline)
			return -1;
		th_nap_ms(1);
	}
}

int th_wait_stopped(pid_t pid)
{
	return wait_state(pid, 1, TH_STATE_DEADLINE_MS);
}

static int decode_status(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return -1;
}

int th_wait_child(pid_t pid, int timeout_ms)
{
	if (pid <= 0)
		return -1;
	long long deadline = th_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	for (;;) {
		int st;
		pid_t w = waitpid(pid, &st, WNOHANG);
		if (w == pid)
			return decode_status(st);
		if (w < 0 && errno != EINTR)
			return -1;
		if (th_now_ms() >= deadline)
			break;
		th_nap_ms(1);
	}
	kill(pid, SIGKILL);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return -1;
}

static void reg_forget_foreign(void);

#if defined(__SANITIZE_ADDRESS__)
/*
 * LeakSanitizer's check at exit() cannot be trusted in a child forked from
 * a threaded parent: its thread registry still lists the parent's threads,
 * which it cannot suspend ("False leaks are possible"), and it reported as
 * leaked what the child's own live threads still pointed to (OpenSSL's
 * per-thread state of a renewal thread, in CI).  Such a child skips the
 * check (LeakSanitizer asks this hook); the test process itself and the
 * children of th_spawn_exec, fresh processes, are checked.
 */
static volatile sig_atomic_t forked_child;

int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void)
{
	return forked_child;
}

/* Every size class once, from a thread whose allocator cache is empty, so
 * that each one goes to the size class's shared region and its lock. */
static void *probe_allocator(void *arg)
{
	for (size_t sz = 16; sz <= ((size_t)1 << 20); sz += sz / 4) {
		volatile char *p = malloc(sz);
		if (p)
			p[0] = 0;
		free((void *)p);
	}
	return arg;
}

/* GCC 12's libasan does not take its allocator's locks across fork(): a
 * child forked while another thread of ours (the library's dial, renewal
 * or wake-up thread) allocates can inherit a size-class lock taken, and
 * hang at its first allocation there (seen in CI as a child whose connect
 * "timed out").  The child proves its allocator works before it runs fn;
 * one that cannot is killed and forked again.  fn has not run: nothing is
 * done twice. */
pid_t th_spawn(int (*fn)(void *), void *arg)
{
	th_init();
	for (int attempt = 0; attempt < 5; attempt++) {
		int pfd[2];
		if (pipe2(pfd, O_CLOEXEC))
			return -1;
		fflush(NULL);
		pid_t pid = fork();
		if (pid == 0) {
			pthread_t t;
			char ok = 'k';
			close(pfd[0]);
			if (pthread_create(&t, NULL, probe_allocator, NULL) == 0)
				pthread_join(t, NULL);
			probe_allocator(NULL);
			if (write(pfd[1], &ok, 1) != 1)
				_exit(126);
			close(pfd[1]);
			reg_forget_foreign();
			forked_child = 1;
			_exit(fn(arg) & 0xff);
		}
		close(pfd[1]);
		if (pid < 0) {
			close(pfd[0]);
			return -1;
		}
		struct pollfd pf = { .fd = pfd[0], .events = POLLIN };
		char b;
		int ready = poll(&pf, 1, 2000) == 1 && read(pfd[0], &b, 1) == 1;
		close(pfd[0]);
		if (ready)
			return pid;
		fprintf(stderr, "th_spawn: child %d stuck in libasan's allocator after fork; forking again\n",
		        (int)pid);
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	return -1;
}
#else
pid_t th_spawn(int (*fn)(void *), void *arg)
{
	th_init();
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		reg_forget_foreign();
		int rc = fn(arg);
		_exit(rc & 0xff);
	}
	return pid;
}
#endif

extern char **environ;

pid_t th_spawn_exec(const char *name, const char *arg)
{
	char e1[256], *e2 = NULL;
	size_t nenv = 0, k = 0;
	const char **envp;

	th_init();
	/* Built before the fork: after it the child makes only
	 * async-signal-safe calls (execve), whatever the allocator's state. */
	while (environ && environ[nenv])
		nenv++;
	if (!(envp = calloc(nenv + 3, sizeof *envp)) ||
			asprintf(&e2, "TH_CHILD_ARG=%s", arg ? arg : "") < 0) {
		free(envp);
		return -1;
	}
	snprintf(e1, sizeof e1, "TH_CHILD=%s", name);
	envp[k++] = e1;
	envp[k++] = e2;
	for (size_t i = 0; i < nenv; i++)
		if (strncmp(environ[i], "TH_CHILD=", 9) && strncmp(environ[i], "TH_CHILD_ARG=", 13))
			envp[k++] = environ[i];
	envp[k] = NULL;
	char *const argv[] = { (char *)"th-child", NULL };
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		execve("/proc/self/exe", argv, (char *const *)envp);
		_exit(127);
	}
	free(envp);
	free(e2);
	return pid;
}

void th_child_dispatch(const char *name, int (*fn)(const char *arg))
{
	const char *who = getenv("TH_CHILD");

	if (!who || strcmp(who, name))
		return;
	/* Parent death ends the child, as for the servers. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	int rc = fn(getenv("TH_CHILD_ARG") ? getenv("TH_CHILD_ARG") : "");
	fflush(NULL);
	_exit(rc & 0xff);
}

pid_t th_start(const char *const argv[], const char *const env[], const char *out_path)
{
	th_init();
	/* Everything the child needs is built here: after fork in a threaded
	 * process the child may only make async-signal-safe calls. */
	size_t nenv = 0, nextra = 0;
	while (environ && environ[nenv])
		nenv++;
	while (env && env[nextra])
		nextra++;
	const char **envp = calloc(nenv + nextra + 1, sizeof *envp);
	if (!envp)
		return -1;
	size_t k = 0;
	for (size_t i = 0; i < nextra; i++)
		envp[k++] = env[i];
	for (size_t i = 0; i < nenv; i++) {
		const char *eq = strchr(environ[i], '=');
		size_t nl = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
		int overridden = 0;
		for (size_t j = 0; j < nextra && !overridden; j++)
			overridden = strncmp(env[j], environ[i], nl) == 0 && env[j][nl] == '=';
		if (!overridden)
			envp[k++] = environ[i];
	}
	envp[k] = NULL;
	int nullfd = open("/dev/null", O_RDWR | O_CLOEXEC);
	int outfd = out_path ? open(out_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)
	                     : fcntl(nullfd, F_DUPFD_CLOEXEC, 3);
	if (nullfd < 0 || outfd < 0) {
		fprintf(stderr, "th_start(%s): open %s: %s\n", argv[0],
		        out_path ? out_path : "/dev/null", strerror(errno));
		if (nullfd >= 0)
			close(nullfd);
		if (outfd >= 0)
			close(outfd);
		free(envp);
		return -1;
	}
	pid_t parent = getpid();
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);       /* an ignored one stays ignored across exec */
		if (dup2(nullfd, 0) < 0 || dup2(outfd, 1) < 0 || dup2(outfd, 2) < 0)
			_exit(127);
		close_range(3, ~0U, 0);
		execvpe(argv[0], (char *const *)argv, (char *const *)envp);
		_exit(127);
	}
	int saved = errno;
	close(nullfd);
	close(outfd);
	free(envp);
	if (pid < 0) {
		fprintf(stderr, "th_start(%s): fork: %s\n", argv[0], strerror(saved));
		return -1;
	}
	setpgid(pid, pid);
	return pid;
}

int th_run(const char *const argv[], const char *const env[], const char *out_path,
           int timeout_ms)
{
	pid_t pid = th_start(argv, env, out_path);

	if (pid < 0)
		return -1;
	int rc = th_wait_child(pid, timeout_ms);
	if (rc == -1)
		kill(-pid, SIGKILL); /* whatever it started */
	return rc;
}

/* ------------------------------------------------------------------ */
/* sync pipe                                                           */
/* ------------------------------------------------------------------ */

int th_sync_init(struct th_sync *s)
{
	s->fd[0] = s->fd[1] = -1;
	if (pipe2(s->fd, O_CLOEXEC) != 0) {
		perror("th_sync_init: pipe2");
		s->fd[0] = s->fd[1] = -1;
		return -1;
	}
	return 0;
}

void th_sync_post(struct th_sync *s)
{
	ssize_t n;
	do {
		n = write(s->fd[1], "!", 1);
	} while (n < 0 && errno == EINTR);
}

int th_sync_wait(struct th_sync *s, int timeout_ms)
{
	long long deadline = th_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	for (;;) {
		long long left = deadline - th_now_ms();
		if (left < 0)
			left = 0;
		struct pollfd pfd = { .fd = s->fd[0], .events = POLLIN };
		int n = poll(&pfd, 1, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		char c;
		ssize_t r = read(s->fd[0], &c, 1);
		if (r == 1)
			return 0;
		if (r < 0 && errno == EINTR)
			continue;
		return -1; /* EOF or error */
	}
}

void th_sync_close(struct th_sync *s)
{
	for (int i = 0; i < 2; i++) {
		if (s->fd[i] >= 0)
			close(s->fd[i]);
		s->fd[i] = -1;
	}
}

/* ------------------------------------------------------------------ */
/* ports and connections                                               */
/* ------------------------------------------------------------------ */

static void loopback_addr(struct sockaddr_in *sa, int port)
{
	memset(sa, 0, sizeof *sa);
	sa->sin_family = AF_INET;
	sa->sin_port = htons((unsigned short)port);
	sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

int th_free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in sa;
	loopback_addr(&sa, 0);
	socklen_t len = sizeof sa;
	int port = -1;
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

int th_port_is_open(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	struct sockaddr_in sa;
	loopback_addr(&sa, port);
	int rc;
	do {
		rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
	} while (rc < 0 && errno == EINTR);
	close(fd);
	return rc == 0;
}

redisContext *th_tcp_connect(int port, int timeout_ms)
{
	struct timeval tv = ms_to_tv(timeout_ms > 0 ? timeout_ms : TH_ADMIN_TIMEOUT_MS);
	redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
	if (!c)
		return NULL;
	if (c->err || redisSetTimeout(c, tv) != REDIS_OK) {
		redisFree(c);
		return NULL;
	}
	return c;
}

/* AUTH on c; returns 0 or -1 with the reason in err. */
static int do_auth(redisContext *c, const char *user, const char *pass, char *err, size_t errlen)
{
	if (!pass)
		return 0;
	redisReply *rep = user ? redisCommand(c, "AUTH %s %s", user, pass)
	                       : redisCommand(c, "AUTH %s", pass);
	if (!rep) {
		snprintf(err, errlen, "AUTH: %s", c->errstr);
		return -1;
	}
	int ok = rep->type == REDIS_REPLY_STATUS;
	if (!ok)
		snprintf(err, errlen, "AUTH: %s", rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
	freeReplyObject(rep);
	return ok ? 0 : -1;
}

static redisContext *admin_connect(const struct th_redis *r, int use_unix, const char *user,
                                   const char *pass, int timeout_ms, int quiet)
{
	char err[256] = "";
	struct timeval tv = ms_to_tv(timeout_ms > 0 ? timeout_ms : TH_ADMIN_TIMEOUT_MS);
	redisContext *c = use_unix ? redisConnectUnixWithTimeout(r->sock, tv)
	                           : redisConnectWithTimeout("127.0.0.1", r->port, tv);
	if (!c) {
		snprintf(err, sizeof err, "out of memory");
	} else if (c->err) {
		snprintf(err, sizeof err, "connect: %s", c->errstr);
	} else if (redisSetTimeout(c, tv) != REDIS_OK) {
		snprintf(err, sizeof err, "set timeout: %s", c->errstr);
	} else if (do_auth(c, user, pass, err, sizeof err) == 0) {
		return c;
	}
	if (!quiet)
		fprintf(stderr, "th_redis_connect(%s): %s\n", use_unix ? r->unix_url : r->url, err);
	if (c)
		redisFree(c);
	return NULL;
}

redisContext *th_redis_connect(const struct th_redis *r, const char *user, const char *pass)
{
	return admin_connect(r, 0, user, pass, TH_ADMIN_TIMEOUT_MS, 0);
}

redisContext *th_redis_connect_unix(const struct th_redis *r, const char *user, const char *pass)
{
	return admin_connect(r, 1, user, pass, TH_ADMIN_TIMEOUT_MS, 0);
}

static redisReply *vcmd_as(const struct th_redis *r, const char *user, const char *pass,
                           int timeout_ms, const char *fmt, va_list ap)
{
	redisContext *c = admin_connect(r, 0, user, pass, timeout_ms, 0);
	if (!c)
		return NULL;
	redisReply *rep = redisvCommand(c, fmt, ap);
	if (!rep)
		fprintf(stderr, "th_redis_cmd(%s, \"%s\"): %s\n", r->url, fmt, c->errstr);
	redisFree(c);
	return rep;
}

redisReply *th_redis_vcmd(const struct th_redis *r, const char *fmt, va_list ap)
{
	return vcmd_as(r, NULL, NULL, TH_ADMIN_TIMEOUT_MS, fmt, ap);
}

redisReply *th_redis_cmd(const struct th_redis *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	redisReply *rep = vcmd_as(r, NULL, NULL, TH_ADMIN_TIMEOUT_MS, fmt, ap);
	va_end(ap);
	return rep;
}

redisReply *th_redis_cmd_as(const struct th_redis *r, const char *user, const char *pass,
                            int timeout_ms, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	redisReply *rep = vcmd_as(r, user, pass, timeout_ms, fmt, ap);
	va_end(ap);
	return rep;
}

long long th_redis_int(const struct th_redis *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	redisReply *rep = vcmd_as(r, NULL, NULL, TH_ADMIN_TIMEOUT_MS, fmt, ap);
	va_end(ap);
	long long v = LLONG_MIN;
	if (!rep)
		return v;
	if (rep->type == REDIS_REPLY_INTEGER) {
		v = rep->integer;
	} else if (rep->type == REDIS_REPLY_STRING && rep->len > 0) {
		char *end;
		errno = 0;
		long long x = strtoll(rep->str, &end, 10);
		if (errno == 0 && end == rep->str + rep->len)
			v = x;
	}
	freeReplyObject(rep);
	return v;
}

int th_redis_clients(const struct th_redis *r)
{
	redisReply *rep = th_redis_cmd(r, "CLIENT LIST");
	if (!rep)
		return -1;
	int n = -1;
	if (rep->type == REDIS_REPLY_STRING || rep->type == REDIS_REPLY_STATUS) {
		n = 0;
		for (size_t i = 0; i < rep->len; i++)
			if (rep->str[i] == '\n')
				n++;
		if (rep->len > 0 && rep->str[rep->len - 1] != '\n')
			n++;
	}
	freeReplyObject(rep);
	return n;
}

long long th_numsub(redisReply *rep)
{
	long long n = -1;

	if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
	    rep->element[1]->type == REDIS_REPLY_INTEGER)
		n = rep->element[1]->integer;
	if (rep)
		freeReplyObject(rep);
	return n;
}

struct clients_arg { const struct th_redis *r; int n; };
static int clients_eq(void *a)
{
	struct clients_arg *ca = a;
	return th_redis_clients(ca->r) == ca->n;
}

int th_redis_wait_clients(const struct th_redis *r, int n, int timeout_ms)
{
	struct clients_arg ca = { r, n };
	return th_wait_until(clients_eq, &ca, timeout_ms);
}

/* ------------------------------------------------------------------ */
/* server registry                                                     */
/* ------------------------------------------------------------------ */

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	if (remove(path) != 0 && errno != ENOENT)
		fprintf(stderr, "th_redis: remove %s: %s\n", path, strerror(errno));
	return 0;
}

void th_rm_rf(const char *dir)
{
	if (!dir[0])
		return;
	/* paranoia: only ever delete our own mkdtemp dirs */
	const char *base = strrchr(dir, '/');
	base = base ? base + 1 : dir;
	if (strncmp(base, TH_DIR_PREFIX, strlen(TH_DIR_PREFIX)) != 0) {
		fprintf(stderr, "th_redis: refusing to remove %s\n", dir);
		return;
	}
	nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static int path_in_dir(char *out, size_t outlen, const char *dir, const char *name)
{
	int n = snprintf(out, outlen, "%s/%s", dir, name);
	return (n < 0 || (size_t)n >= outlen) ? -1 : 0;
}

/* Start time (clock ticks since boot, /proc/PID/stat field 22) of pid, or 0. */
static unsigned long long proc_starttime(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	if (!p)
		return 0;
	p++;
	/* after ')': field 3 (state) ... field 22 (starttime) */
	for (int field = 3; field < 22; field++) {
		p = strchr(p + 1, ' ');
		if (!p)
			return 0;
	}
	return strtoull(p + 1, NULL, 10);
}

/* Record which process owns dir, so that a later run can tell a dir left by
 * a SIGKILLed/crashed test process from one still in use. */
static void write_owner(const char *dir)
{
	char path[512];
	if (path_in_dir(path, sizeof path, dir, "owner") != 0)
		return;
	FILE *f = fopen(path, "we");
	if (!f)
		return;
	fprintf(f, "%d %llu\n", (int)getpid(), proc_starttime(getpid()));
	fclose(f);
}

static int unix_socket_alive(const char *path)
{
	struct sockaddr_un sun;
	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof sun.sun_path)
		return 0;
	strcpy(sun.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	int ok = connect(fd, (struct sockaddr *)&sun, sizeof sun) == 0;
	close(fd);
	return ok;
}

/* Remove th-redis-* dirs in tmp whose owner process is gone and whose server
 * does not answer (left behind by a test process killed by SIGKILL/a crash:
 * its server died with it through PR_SET_PDEATHSIG, but no cleanup ran). */
static void sweep_stale_dirs(const char *tmp)
{
	DIR *d = opendir(tmp);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, TH_DIR_PREFIX, strlen(TH_DIR_PREFIX)) != 0)
			continue;
		char dir[512], path[600];
		if (snprintf(dir, sizeof dir, "%s/%s", tmp, e->d_name) >= (int)sizeof dir)
			continue;
		struct stat st;
		if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid())
			continue;
		snprintf(path, sizeof path, "%s/owner", dir);
		FILE *f = fopen(path, "re");
		if (!f)
			continue; /* being created right now, or not ours */
		int pid = 0;
		unsigned long long start = 0;
		int got = fscanf(f, "%d %llu", &pid, &start);
		fclose(f);
		if (got != 2 || pid <= 0)
			continue;
		if (proc_starttime(pid) == start && start != 0)
			continue; /* owner alive */
		snprintf(path, sizeof path, "%s/redis.sock", dir);
		if (unix_socket_alive(path))
			continue;
		th_rm_rf(dir);
	}
	closedir(d);
}

static int reg_add(const char *dir)
{
	pthread_mutex_lock(&reg_mu);
	int slot = -1;
	for (int i = 0; i < TH_MAX_SERVERS; i++) {
		if (!reg[i].used) {
			slot = i;
			break;
		}
	}
	if (slot >= 0) {
		reg[slot].used = 1;
		reg[slot].owner = getpid();
		reg[slot].pid = 0;
		snprintf(reg[slot].dir, sizeof reg[slot].dir, "%s", dir);
	}
	pthread_mutex_unlock(&reg_mu);
	return slot < 0 ? -1 : 0;
}

static void reg_set_pid(const char *dir, pid_t pid)
{
	pthread_mutex_lock(&reg_mu);
	for (int i = 0; i < TH_MAX_SERVERS; i++)
		if (reg[i].used && strcmp(reg[i].dir, dir) == 0)
			reg[i].pid = pid;
	pthread_mutex_unlock(&reg_mu);
}

static void reg_remove(const char *dir)
{
	pthread_mutex_lock(&reg_mu);
	for (int i = 0; i < TH_MAX_SERVERS; i++)
		if (reg[i].used && strcmp(reg[i].dir, dir) == 0)
			memset(&reg[i], 0, sizeof reg[i]);
	pthread_mutex_unlock(&reg_mu);
}

/* In a forked child: the parent's servers are not ours. */
static void reg_forget_foreign(void)
{
	pid_t me = getpid();
	pthread_mutex_lock(&reg_mu);
	for (int i = 0; i < TH_MAX_SERVERS; i++)
		if (reg[i].used && reg[i].owner != me)
			memset(&reg[i], 0, sizeof reg[i]);
	pthread_mutex_unlock(&reg_mu);
}

/* Is pid a live redis-server running in dir?  (redis chdir()s to its dir.) */
static int is_server_in(pid_t pid, const char *dir)
{
	char path[64], buf[512];
	if (!dir || !dir[0])
		return 0;
	snprintf(path, sizeof path, "/proc/%d/cwd", (int)pid);
	ssize_t n = readlink(path, buf, sizeof buf - 1);
	if (n < 0)
		return 0;
	buf[n] = '\0';
	char real[PATH_MAX];
	if (realpath(dir, real))
		dir = real;
	return strcmp(buf, dir) == 0;
}

/* Kill a server (whole process group) and reap it.  A pid that is no longer
 * our live child (already reaped, e.g. by a test that killed the server
 * itself) is only signalled if it is still a process running in dir, so a
 * stale, possibly reused pid is never killed. */
static void kill_server(pid_t pid, const char *dir)
{
	if (pid <= 1)
		return; /* never kill(0|-1|-0) */
	int st;
	pid_t w;
	do {
		w = waitpid(pid, &st, WNOHANG);
	} while (w < 0 && errno == EINTR);
	if (w == pid)
		return; /* it had already died; reaped now */
	int child = w == 0;
	if (!child && !is_server_in(pid, dir))
		return;
	kill(-pid, SIGCONT);
	kill(pid, SIGCONT);
	kill(-pid, SIGKILL);
	kill(pid, SIGKILL);
	if (child) {
		for (;;) {
			w = waitpid(pid, &st, 0);
			if (w == pid)
				return;
			if (w < 0 && errno == EINTR)
				continue;
			break; /* SIGCHLD ignored: auto-reaped */
		}
	}
	/* not our child (or auto-reaped): wait for it to vanish */
	long long deadline = th_now_ms() + TH_STATE_DEADLINE_MS;
	while (th_now_ms() < deadline) {
		if (th_proc_gone(pid))
			return;
		th_nap_ms(1);
	}
}

void th_redis_stop_all(void)
{
	pid_t me = getpid();
	for (;;) {
		struct th_reg_entry e = { 0 };
		pthread_mutex_lock(&reg_mu);
		for (int i = 0; i < TH_MAX_SERVERS; i++) {
			if (reg[i].used && reg[i].owner == me) {
				e = reg[i];
				memset(&reg[i], 0, sizeof reg[i]);
				break;
			}
		}
		pthread_mutex_unlock(&reg_mu);
		if (!e.used)
			return;
		kill_server(e.pid, e.dir);
		th_rm_rf(e.dir);
	}
}

/* ------------------------------------------------------------------ */
/* redis-server                                                        */
/* ------------------------------------------------------------------ */

static int conf_quote_ok(const char *s)
{
	return strpbrk(s, "\"\\\n\r") == NULL;
}

static int extra_mentions(const char *extra, const char *directive)
{
	size_t dl = strlen(directive);
	const char *line = extra;
	while (line && *line) {
		while (*line == ' ' || *line == '\t')
			line++;
		if (strncasecmp(line, directive, dl) == 0 && (line[dl] == ' ' || line[dl] == '\t'))
			return 1;
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	return 0;
}

static int write_config(const struct th_redis *r)
{
	char path[512];
	if (path_in_dir(path, sizeof path, r->dir, "redis.conf") != 0)
		return -1;
	FILE *f = fopen(path, "we");
	if (!f) {
		fprintf(stderr, "th_redis: %s: %s\n", path, strerror(errno));
		return -1;
	}
	fprintf(f,
	        "port %d\n"
	        "bind 127.0.0.1\n"
	        "unixsocket \"%s\"\n"
	        "unixsocketperm 700\n"
	        "dir \"%s\"\n"
	        "save \"\"\n"
	        "appendonly no\n"
	        "daemonize no\n"
	        "loglevel notice\n"
	        "logfile \"%s/redis.log\"\n"
	        "enable-debug-command local\n"
	        "protected-mode no\n",
	        r->port, r->sock, r->dir, r->dir);
	if (r->extra[0]) {
		fputs(r->extra, f);
		if (r->extra[strlen(r->extra) - 1] != '\n')
			fputc('\n', f);
	}
	int bad = ferror(f);
	if (fclose(f) != 0 || bad) {
		fprintf(stderr, "th_redis: writing %s failed\n", path);
		return -1;
	}
	return 0;
}

static long file_size(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (long)st.st_size : 0;
}

/* Read file from offset (at most max bytes from the end); malloc'd, NUL-terminated. */
static char *read_file_from(const char *path, long off, long max)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	struct stat st;
	if (fstat(fd, &st) != 0 || st.st_size < off) {
		close(fd);
		return NULL;
	}
	long len = (long)st.st_size - off;
	if (max > 0 && len > max) {
		off += len - max;
		len = max;
	}
	char *buf = malloc((size_t)len + 1);
	if (!buf) {
		close(fd);
		return NULL;
	}
	long got = 0;
	while (got < len) {
		ssize_t n = pread(fd, buf + got, (size_t)(len - got), off + got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += n;
	}
	buf[got] = '\0';
	close(fd);
	return buf;
}

static int file_contains_from(const char *path, long off, const char *needle)
{
	char *s = read_file_from(path, off, 0);
	int found = s && strstr(s, needle) != NULL;
	free(s);
	return found;
}

static void dump_logs(const struct th_redis *r, long log_off)
{
	char path[512];
	const char *names[2] = { "redis.stderr", "redis.log" };
	for (int i = 0; i < 2; i++) {
		if (path_in_dir(path, sizeof path, r->dir, names[i]) != 0)
			continue;
		char *s = read_file_from(path, i == 1 ? log_off : 0, 4096);
		if (s && s[0])
			fprintf(stderr, "---- %s (tail) ----\n%s\n", path, s);
		free(s);
	}
}

/* fork+exec redis-server on r's config; returns pid or -1 */
/* In a forked child: closing the old stdout may be interrupted. */
static int dup_to(int from, int to)
{
	int rc;
	do
		rc = dup2(from, to);
	while (rc < 0 && errno == EINTR);
	return rc;
}

static pid_t spawn_server(const struct th_redis *r)
{
	char conf[512], errpath[512];
	if (path_in_dir(conf, sizeof conf, r->dir, "redis.conf") != 0 ||
	    path_in_dir(errpath, sizeof errpath, r->dir, "redis.stderr") != 0)
		return -1;
	const char *bin = getenv("TH_REDIS_SERVER");
	if (!bin || !bin[0])
		bin = TH_REDIS_DEFAULT_BIN;
	char *argv[] = { (char *)bin, conf, r->kind == TH_REDIS_SENTINEL ? "--sentinel" : NULL, NULL };

	int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int errfd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (nullfd < 0 || errfd < 0) {
		fprintf(stderr, "th_redis: open: %s\n", strerror(errno));
		if (nullfd >= 0)
			close(nullfd);
		if (errfd >= 0)
			close(errfd);
		return -1;
	}
	long maxfd = sysconf(_SC_OPEN_MAX);
	if (maxfd < 0 || maxfd > 65536)
		maxfd = 65536;
	pid_t parent = getpid();
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		/* child: async-signal-safe calls only */
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent) {
			/* the test process already died */
			static const char gone[] = "th_redis: the test process is gone\n";
			ssize_t ignored = write(errfd, gone, sizeof gone - 1);
			(void)ignored;
			_exit(127);
		}
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		struct sigaction dfl;
		memset(&dfl, 0, sizeof dfl);
		dfl.sa_handler = SIG_DFL;
		for (int s = 1; s < NSIG; s++)
			sigaction(s, &dfl, NULL);
		if (dup_to(nullfd, 0) < 0 || dup_to(errfd, 1) < 0 || dup_to(errfd, 2) < 0) {
			char dupf[64] = "th_redis: dup2 failed: errno ";
			size_t n = strlen(dupf);
			int e = errno;
			dupf[n++] = (char)('0' + e / 100 % 10);
			dupf[n++] = (char)('0' + e / 10 % 10);
			dupf[n++] = (char)('0' + e % 10);
			dupf[n++] = '\n';
			ssize_t ignored = write(errfd, dupf, n);
			(void)ignored;
			_exit(127);
		}
		if (close_range(3, ~0U, 0) != 0)
			for (long fd = 3; fd < maxfd; fd++)
				close((int)fd);
		execv(bin, argv);
		if (!strchr(bin, '/') || errno == ENOENT)
			execvp("redis-server", argv);
		static const char msg[] = "th_redis: exec redis-server failed\n";
		ssize_t ignored = write(2, msg, sizeof msg - 1);
		(void)ignored;
		_exit(127);
	}
	int saved = errno;
	close(nullfd);
	close(errfd);
	if (pid < 0) {
		fprintf(stderr, "th_redis: fork: %s\n", strerror(saved));
		return -1;
	}
	setpgid(pid, pid); /* also from the parent: no race with kill(-pid) */
	return pid;
}

/* PING over TCP: 1 if +PONG or -NOAUTH..., else 0 */
static int tcp_ping_ok(int port)
{
	redisContext *c = th_tcp_connect(port, 500);
	if (!c)
		return 0;
	int ok = 0;
	redisReply *rep = redisCommand(c, "PING");
	if (rep) {
		if (rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0)
			ok = 1;
		else if (rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "NOAUTH", 6) == 0)
			ok = 1;
		freeReplyObject(rep);
	}
	redisFree(c);
	return ok;
}

enum { WAIT_OK = 0, WAIT_FAIL = -1, WAIT_BIND = -2 };

static int wait_ready(const struct th_redis *r, pid_t pid, long log_off)
{
	char logpath[512], errpath[512];
	path_in_dir(logpath, sizeof logpath, r->dir, "redis.log");
	path_in_dir(errpath, sizeof errpath, r->dir, "redis.stderr");
	int check_log = r->kind != TH_REDIS_SENTINEL && !extra_mentions(r->extra, "loglevel") &&
	                !extra_mentions(r->extra, "logfile");
	long long deadline = th_now_ms() + TH_START_DEADLINE_MS;
	for (;;) {
		int st;
		pid_t w = waitpid(pid, &st, WNOHANG);
		if (w == pid) {
			if (file_contains_from(logpath, log_off, "Address already in use") ||
			    file_contains_from(errpath, 0, "Address already in use"))
				return WAIT_BIND;
			fprintf(stderr, "th_redis: redis-server on port %d exited early (status %d)\n",
			        r->port, decode_status(st));
			return WAIT_FAIL;
		}
		struct stat sb;
		if (stat(r->sock, &sb) == 0 && S_ISSOCK(sb.st_mode) &&
		    (!check_log || file_contains_from(logpath, log_off, "Ready to accept connections")) &&
		    tcp_ping_ok(r->port))
			return WAIT_OK;
		if (th_now_ms() >= deadline) {
			fprintf(stderr, "th_redis: redis-server on port %d not ready after %d ms\n",
			        r->port, TH_START_DEADLINE_MS);
			return WAIT_FAIL;
		}
		th_nap_ms(2);
	}
}

/* A free port P <= 55535 whose cluster bus port P + 10000 is free too, or -1.
 * (Both may be taken before the server binds them: launch() retries.) */
static int free_port_pair(void)
{
	for (int i = 0; i < 200; i++) {
		int p = th_free_port();
		if (p <= 0)
			return -1;
		if (p > 65535 - 10000)
			continue;
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -1;
		struct sockaddr_in sa;
		loopback_addr(&sa, p + 10000);
		int ok = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
		close(fd);
		if (ok)
			return p;
	}
	errno = EADDRINUSE;
	return -1;
}

static void set_urls(struct th_redis *r)
{
	snprintf(r->url, sizeof r->url, "redis://127.0.0.1:%d?command_timeout_ms=%d", r->port,
	         th_command_timeout_ms());
}

/* Start (or restart) the server on r->port (pick_port: choose a new free port
 * for each attempt).  r->dir and r->sock must be set. */
static int launch(struct th_redis *r, int pick_port)
{
	char logpath[512];
	path_in_dir(logpath, sizeof logpath, r->dir, "redis.log");
	for (int attempt = 0; attempt < TH_START_ATTEMPTS; attempt++) {
		if (pick_port) {
			int port = r->kind == TH_REDIS_CLUSTER ? free_port_pair() : th_free_port();
			if (port <= 0) {
				fprintf(stderr, "th_redis: no free port: %s\n", strerror(errno));
				return -1;
			}
			r->port = port;
			set_urls(r);
		} else if (attempt > 0) {
			th_nap_ms(50 * attempt); /* back off: someone holds our port */
		}
		/* a restarted sentinel keeps the config it rewrote (its identity) */
		if ((pick_port || r->kind != TH_REDIS_SENTINEL) && write_config(r) != 0)
			return -1;
		long log_off = file_size(logpath);
		pid_t pid = spawn_server(r);
		if (pid < 0)
			return -1;
		reg_set_pid(r->dir, pid);
		int rc = wait_ready(r, pid, log_off);
		if (rc == WAIT_OK) {
			r->pid = pid;
			return 0;
		}
		kill_server(pid, r->dir);
		reg_set_pid(r->dir, 0);
		if (rc != WAIT_BIND) {
			dump_logs(r, log_off);
			return -1;
		}
		fprintf(stderr, "th_redis: port %d taken, retrying (attempt %d)\n", r->port, attempt + 1);
	}
	fprintf(stderr, "th_redis: could not bind a port after %d attempts\n", TH_START_ATTEMPTS);
	return -1;
}

int th_redis_start(struct th_redis *r, const char *extra)
{
	return th_redis_start_as(r, extra, TH_REDIS_PLAIN);
}

int th_redis_start_as(struct th_redis *r, const char *extra, int kind)
{
	th_init();
	if (kind != TH_REDIS_PLAIN && kind != TH_REDIS_SENTINEL && kind != TH_REDIS_CLUSTER) {
		fprintf(stderr, "th_redis_start_as: bad kind %d\n", kind);
		memset(r, 0, sizeof *r);
		return -1;
	}
	static const char cluster_conf[] = "cluster-enabled yes\ncluster-config-file nodes.conf\n";
	char extra_copy[sizeof r->extra] = "";
	if (kind == TH_REDIS_CLUSTER)
		memcpy(extra_copy, cluster_conf, sizeof cluster_conf);
	if (extra) {
		size_t used = strlen(extra_copy), n = strlen(extra);
		if (used + n >= sizeof extra_copy) {
			fprintf(stderr, "th_redis_start: extra config too long (%zu bytes)\n", n);
			memset(r, 0, sizeof *r);
			return -1;
		}
		memcpy(extra_copy + used, extra, n + 1); /* extra may point into *r */
	}
	memset(r, 0, sizeof *r);
	memcpy(r->extra, extra_copy, sizeof r->extra);
	r->kind = kind;
	const char *tmp = getenv("TMPDIR");
	struct sockaddr_un sun;
	for (int i = 0; i < 2; i++) {
		if (i == 1 || !tmp || tmp[0] != '/')
			tmp = "/tmp";
		int n = snprintf(r->dir, sizeof r->dir, "%s/" TH_DIR_PREFIX "XXXXXX", tmp);
		/* dir + "/redis.sock" must fit in sun_path */
		if (n > 0 && (size_t)n + sizeof "/redis.sock" <= sizeof sun.sun_path &&
		    conf_quote_ok(r->dir))
			break;
		r->dir[0] = '\0';
	}
	sweep_stale_dirs(tmp);
	if (!r->dir[0] || !mkdtemp(r->dir)) {
		fprintf(stderr, "th_redis_start: mkdtemp(%s): %s\n", r->dir, strerror(errno));
		r->dir[0] = '\0';
		return -1;
	}
	write_owner(r->dir);
	snprintf(r->sock, sizeof r->sock, "%s/redis.sock", r->dir);
	snprintf(r->unix_url, sizeof r->unix_url, "unix://%s?command_timeout_ms=%d", r->sock,
	         th_command_timeout_ms());
	if (reg_add(r->dir) != 0) {
		fprintf(stderr, "th_redis_start: too many servers (max %d)\n", TH_MAX_SERVERS);
		th_rm_rf(r->dir);
		r->dir[0] = '\0';
		return -1;
	}
	if (launch(r, 1) != 0) {
		reg_remove(r->dir);
		th_rm_rf(r->dir);
		memset(r, 0, sizeof *r);
		return -1;
	}
	return 0;
}

void th_redis_stop(struct th_redis *r)
{
	if (!r)
		return;
	if (r->pid > 0)
		kill_server(r->pid, r->dir);
	r->pid = 0;
	if (r->dir[0]) {
		reg_remove(r->dir);
		th_rm_rf(r->dir);
		r->dir[0] = '\0';
	}
}

int th_redis_kill(struct th_redis *r)
{
	if (!r->dir[0] || r->pid <= 0)
		return -1;
	kill_server(r->pid, r->dir);
	r->pid = 0;
	reg_set_pid(r->dir, 0);
	return 0;
}

int th_redis_restart(struct th_redis *r)
{
	th_init();
	if (!r->dir[0] || r->port <= 0) {
		fprintf(stderr, "th_redis_restart: server was never started\n");
		return -1;
	}
	if (r->pid > 0)
		kill_server(r->pid, r->dir);
	r->pid = 0;
	reg_set_pid(r->dir, 0);
	return launch(r, 0);
}

int th_redis_pause(struct th_redis *r)
{
	if (r->pid <= 1 || kill(r->pid, SIGSTOP) != 0)
		return -1;
	return wait_state(r->pid, 1, TH_STATE_DEADLINE_MS);
}

int th_redis_resume(struct th_redis *r)
{
	if (r->pid <= 1 || kill(r->pid, SIGCONT) != 0)
		return -1;
	return wait_state(r->pid, 0, TH_STATE_DEADLINE_MS);
}

/* ------------------------------------------------------------------ */
/* proxy                                                               */
/* ------------------------------------------------------------------ */

#define PX_MAX 256
#define PX_BUF 65536

struct px_dir {
	char *buf;
	size_t len;  /* bytes waiting in buf[0..len) */
	int eof;     /* source said EOF */
	int shut;    /* EOF passed on (shutdown(dst, SHUT_WR)) */
};

struct px_conn {
	int cfd, sfd;
	int connecting;
	struct px_dir c2s, s2c;
};

struct th_proxy {
	int lfd, port, target;
	int wake[2];
	pthread_t thr;
	pthread_mutex_t mu;   /* guards everything below + fd table mutations */
	pthread_cond_t cv;
	int mode;
	unsigned req, ack;
	int close_req, stop;
	struct px_conn *conns[PX_MAX];
	int nconns;
	char *scratch;        /* PX_BUF bytes for discarded data */
	struct pollfd *pfd;   /* 2 + 2 * PX_MAX */
	struct th_proxy *next;
};

static void px_conn_free_locked(struct th_proxy *p, int i)
{
	struct px_conn *c = p->conns[i];
	if (c->cfd >= 0)
		close(c->cfd);
	if (c->sfd >= 0)
		close(c->sfd);
	free(c->c2s.buf);
	free(c->s2c.buf);
	free(c);
	p->conns[i] = p->conns[--p->nconns];
	p->conns[p->nconns] = NULL;
}

static void px_drop(struct th_proxy *p, int i)
{
	pthread_mutex_lock(&p->mu);
	px_conn_free_locked(p, i);
	pthread_mutex_unlock(&p->mu);
}

static void px_accept(struct th_proxy *p, int mode)
{
	for (;;) {
		pthread_mutex_lock(&p->mu);
		if (p->nconns >= PX_MAX) {
			pthread_mutex_unlock(&p->mu);
			return;
		}
		int cfd = accept4(p->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (cfd < 0) {
			pthread_mutex_unlock(&p->mu);
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return; /* EAGAIN or error */
		}
		struct px_conn *c = calloc(1, sizeof *c);
		int sfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (c) {
			c->c2s.buf = malloc(PX_BUF);
			c->s2c.buf = malloc(PX_BUF);
		}
		int rc = -1;
		if (mode == TH_PROXY_BLACKHOLE && sfd >= 0) {
			/* a blackholed connection never reaches the server */
			close(sfd);
			sfd = -1;
			if (c && c->c2s.buf && c->s2c.buf)
				rc = 0;
		} else if (c && c->c2s.buf && c->s2c.buf && sfd >= 0) {
			int one = 1;
			setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
			setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
			struct sockaddr_in sa;
			loopback_addr(&sa, p->target);
			rc = connect(sfd, (struct sockaddr *)&sa, sizeof sa);
			if (rc == 0) {
				c->connecting = 0;
			} else if (errno == EINPROGRESS) {
				c->connecting = 1;
				rc = 0;
			}
		}
		if (rc != 0) {
			close(cfd);
			if (sfd >= 0)
				close(sfd);
			if (c) {
				free(c->c2s.buf);
				free(c->s2c.buf);
				free(c);
			}
			pthread_mutex_unlock(&p->mu);
			continue;
		}
		c->cfd = cfd;
		c->sfd = sfd;
		p->conns[p->nconns++] = c;
		pthread_mutex_unlock(&p->mu);
	}
}

static int fwd_c2s(int mode) { return mode != TH_PROXY_BLACKHOLE; }
static int fwd_s2c(int mode) { return mode == TH_PROXY_PASS; }

/* read from fd into d (or discard); 0 ok, -1 connection must be dropped */
static int px_read(int fd, struct px_dir *d, int forward, char *scratch)
{
	for (;;) {
		char *dst = forward ? d->buf + d->len : scratch;
		size_t room = forward ? PX_BUF - d->len : PX_BUF;
		if (room == 0)
			return 0;
		ssize_t n = recv(fd, dst, room, MSG_DONTWAIT);
		if (n > 0) {
			if (forward)
				d->len += (size_t)n;
			continue;
		}
		if (n == 0) {
			d->eof = 1;
			return 0;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		return -1;
	}
}

/* write d to fd; 0 ok, -1 connection must be dropped */
static int px_write(int fd, struct px_dir *d)
{
	size_t off = 0;
	while (off < d->len) {
		ssize_t n = send(fd, d->buf + off, d->len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		return -1;
	}
	if (off > 0) {
		memmove(d->buf, d->buf + off, d->len - off);
		d->len -= off;
	}
	return 0;
}

static short px_events(const struct px_conn *c, int mode, int client_side)
{
	short ev = 0;
	if (client_side) {
		if (!c->c2s.eof && (!fwd_c2s(mode) || c->c2s.len < PX_BUF))
			ev |= POLLIN;
		if (fwd_s2c(mode) && c->s2c.len > 0)
			ev |= POLLOUT;
	} else if (c->sfd < 0) {
		ev = 0;
	} else if (c->connecting) {
		ev |= POLLOUT;
	} else {
		if (!c->s2c.eof && (!fwd_s2c(mode) || c->s2c.len < PX_BUF))
			ev |= POLLIN;
		if (fwd_c2s(mode) && c->c2s.len > 0)
			ev |= POLLOUT;
	}
	return ev;
}

/* The server side failed.  In PASS mode the client must see it (drop the
 * pair); otherwise nothing from the server reaches the client, not even its
 * death: close the server side only and keep the client connection. */
static int px_server_failed(struct px_conn *c, int mode)
{
	if (fwd_s2c(mode))
		return -1;
	close(c->sfd);
	c->sfd = -1;
	c->connecting = 0;
	c->s2c.eof = 1;
	c->s2c.len = 0;
	c->c2s.len = 0;
	return 0;
}

/* handle one connection after poll; returns -1 if it must be dropped */
static int px_handle(struct px_conn *c, int mode, short crev, short srev, char *scratch)
{
	if (crev & POLLERR)
		return -1;
	if (c->sfd >= 0 && c->connecting && srev) {
		int err = 0;
		socklen_t len = sizeof err;
		if (getsockopt(c->sfd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
			if (px_server_failed(c, mode) != 0)
				return -1;
		} else {
			c->connecting = 0;
		}
		srev = 0;
	}
	if (c->sfd >= 0 && (srev & POLLERR) && px_server_failed(c, mode) != 0)
		return -1;
	if (crev & (POLLIN | POLLHUP))
		if (px_read(c->cfd, &c->c2s, fwd_c2s(mode), scratch) != 0)
			return -1;
	if (c->sfd >= 0 && !c->connecting && (srev & (POLLIN | POLLHUP)))
		if (px_read(c->sfd, &c->s2c, fwd_s2c(mode), scratch) != 0 &&
		    px_server_failed(c, mode) != 0)
			return -1;
	/* flush what can be flushed right away */
	if (fwd_c2s(mode) && c->c2s.len > 0) {
		if (c->sfd < 0)
			return -1; /* nowhere to send it */
		if (!c->connecting && px_write(c->sfd, &c->c2s) != 0 && px_server_failed(c, mode) != 0)
			return -1;
	}
	if (fwd_s2c(mode) && c->s2c.len > 0)
		if (px_write(c->cfd, &c->s2c) != 0)
			return -1;
	/* pass EOFs on once drained (only in directions that forward) */
	if (c->c2s.eof && !c->c2s.shut && fwd_c2s(mode) && c->c2s.len == 0 &&
	    c->sfd >= 0 && !c->connecting) {
		shutdown(c->sfd, SHUT_WR);
		c->c2s.shut = 1;
	}
	if (c->s2c.eof && !c->s2c.shut && fwd_s2c(mode) && c->s2c.len == 0) {
		shutdown(c->cfd, SHUT_WR);
		c->s2c.shut = 1;
	}
	int c2s_done = c->c2s.eof && (c->c2s.shut || !fwd_c2s(mode) || c->sfd < 0);
	int s2c_done = c->s2c.eof && (c->s2c.shut || !fwd_s2c(mode));
	if (c2s_done && s2c_done)
		return -1;
	if (c->c2s.eof && !fwd_c2s(mode))
		return -1; /* client hung up on a blackhole */
	if ((crev & POLLHUP) && c->c2s.eof)
		return -1; /* client fully gone */
	return 0;
}

static void *px_thread(void *arg)
{
	struct th_proxy *p = arg;
	/* owned by p (not thread locals): a forked child keeps them reachable */
	char *scratch = p->scratch;
	struct pollfd *pfd = p->pfd;
	int applied = TH_PROXY_PASS;
	for (;;) {
		pthread_mutex_lock(&p->mu);
		if (p->stop) {
			pthread_mutex_unlock(&p->mu);
			break;
		}
		int mode = p->mode;
		if (p->close_req) {
			while (p->nconns > 0)
				px_conn_free_locked(p, p->nconns - 1);
			p->close_req = 0;
		}
		if (mode != applied) {
			for (int i = p->nconns - 1; i >= 0; i--) {
				struct px_conn *c = p->conns[i];
				if (c->sfd < 0 && fwd_c2s(mode)) {
					/* no server side (accepted while blackholed, or
					 * the server went away unseen): the "network" is
					 * back, the client finds its connection dead */
					px_conn_free_locked(p, i);
					continue;
				}
				if (!fwd_c2s(mode))
					c->c2s.len = 0;
				if (!fwd_s2c(mode))
					c->s2c.len = 0;
			}
			applied = mode;
		}
		if (p->ack != p->req) {
			p->ack = p->req;
			pthread_cond_broadcast(&p->cv);
		}
		int n = p->nconns;
		pthread_mutex_unlock(&p->mu);

		pfd[0].fd = p->wake[0];
		pfd[0].events = POLLIN;
		pfd[1].fd = n < PX_MAX ? p->lfd : -1;
		pfd[1].events = POLLIN;
		for (int i = 0; i < n; i++) {
			struct px_conn *c = p->conns[i];
			short ce = px_events(c, mode, 1), se = px_events(c, mode, 0);
			pfd[2 + 2 * i].fd = ce ? c->cfd : -1;
			pfd[2 + 2 * i].events = ce;
			pfd[3 + 2 * i].fd = se ? c->sfd : -1;
			pfd[3 + 2 * i].events = se;
		}
		int rc = poll(pfd, (nfds_t)(2 + 2 * n), -1);
		if (rc < 0) {
			/* keep serving requests (callers wait for an ack) */
			if (errno != EINTR) {
				fprintf(stderr, "th_proxy: poll: %s\n", strerror(errno));
				th_nap_ms(10);
			}
			continue;
		}
		if (pfd[0].revents) {
			char b[64];
			while (read(p->wake[0], b, sizeof b) > 0)
				;
		}
		/* connections first (indices shift when one is dropped: go backwards) */
		for (int i = n - 1; i >= 0; i--) {
			short crev = pfd[2 + 2 * i].revents, srev = pfd[3 + 2 * i].revents;
			if (!crev && !srev)
				continue;
			if (px_handle(p->conns[i], mode, crev, srev, scratch) != 0)
				px_drop(p, i);
		}
		if (pfd[1].revents)
			px_accept(p, mode);
	}
	return NULL;
}

static void px_wake(struct th_proxy *p)
{
	ssize_t n;
	do {
		n = write(p->wake[1], "w", 1);
	} while (n < 0 && errno == EINTR);
	/* EAGAIN: the pipe is full, the thread will wake anyway */
}

/* queue a request and wait until the thread has applied it */
static void px_request(struct th_proxy *p, int mode, int close_all)
{
	pthread_mutex_lock(&p->mu);
	if (mode >= 0)
		p->mode = mode;
	if (close_all)
		p->close_req = 1;
	unsigned my = ++p->req;
	pthread_mutex_unlock(&p->mu);
	px_wake(p);
	pthread_mutex_lock(&p->mu);
	while ((int)(p->ack - my) < 0)
		pthread_cond_wait(&p->cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

struct th_proxy *th_proxy_start(int target_port)
{
	th_init();
	struct th_proxy *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->lfd = -1;
	p->wake[0] = p->wake[1] = -1;
	p->target = target_port;
	p->mode = TH_PROXY_PASS;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->scratch = malloc(PX_BUF);
	p->pfd = calloc(2 + 2 * PX_MAX, sizeof *p->pfd);
	if (!p->scratch || !p->pfd) {
		errno = ENOMEM;
		fprintf(stderr, "th_proxy_start: out of memory\n");
		goto fail;
	}

	struct sockaddr_in sa;
	loopback_addr(&sa, 0);
	socklen_t len = sizeof sa;
	p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (p->lfd < 0 || bind(p->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
	    listen(p->lfd, 128) != 0 || getsockname(p->lfd, (struct sockaddr *)&sa, &len) != 0 ||
	    pipe2(p->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
		fprintf(stderr, "th_proxy_start: %s\n", strerror(errno));
		goto fail;
	}
	p->port = ntohs(sa.sin_port);

	/* register before the thread exists so fork handlers see it */
	pthread_mutex_lock(&proxies_mu);
	p->next = proxies;
	proxies = p;
	pthread_mutex_unlock(&proxies_mu);

	int err = pthread_create(&p->thr, NULL, px_thread, p);
	if (err != 0) {
		fprintf(stderr, "th_proxy_start: pthread_create: %s\n", strerror(err));
		pthread_mutex_lock(&proxies_mu);
		proxies = p->next;
		pthread_mutex_unlock(&proxies_mu);
		goto fail;
	}
	return p;
fail:
	if (p->lfd >= 0)
		close(p->lfd);
	for (int i = 0; i < 2; i++)
		if (p->wake[i] >= 0)
			close(p->wake[i]);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p->scratch);
	free(p->pfd);
	free(p);
	return NULL;
}

int th_proxy_port(const struct th_proxy *p)
{
	return p->port;
}

void th_proxy_set_mode(struct th_proxy *p, int mode)
{
	if (mode != TH_PROXY_PASS && mode != TH_PROXY_DROP_REPLIES && mode != TH_PROXY_BLACKHOLE) {
		fprintf(stderr, "th_proxy_set_mode: bad mode %d\n", mode);
		return;
	}
	px_request(p, mode, 0);
}

int th_proxy_mode(const struct th_proxy *p)
{
	struct th_proxy *mp = (struct th_proxy *)p;
	pthread_mutex_lock(&mp->mu);
	int m = mp->mode;
	pthread_mutex_unlock(&mp->mu);
	return m;
}

void th_proxy_close_all(struct th_proxy *p)
{
	px_request(p, -1, 1);
}

int th_proxy_conns(struct th_proxy *p)
{
	pthread_mutex_lock(&p->mu);
	int n = p->nconns;
	pthread_mutex_unlock(&p->mu);
	return n;
}

void th_proxy_stop(struct th_proxy *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_mutex_unlock(&p->mu);
	px_wake(p);
	pthread_join(p->thr, NULL);

	pthread_mutex_lock(&proxies_mu);
	for (struct th_proxy **pp = &proxies; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	}
	pthread_mutex_lock(&p->mu);
	while (p->nconns > 0)
		px_conn_free_locked(p, p->nconns - 1);
	close(p->lfd);
	close(p->wake[0]);
	close(p->wake[1]);
	pthread_mutex_unlock(&p->mu);
	pthread_mutex_unlock(&proxies_mu);

	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p->scratch);
	free(p->pfd);
	free(p);
}

/* ------------------------------------------------------------------ */
/* fork handlers                                                       */
/* ------------------------------------------------------------------ */

static void atfork_prepare(void)
{
	pthread_mutex_lock(&proxies_mu);
	for (struct th_proxy *p = proxies; p; p = p->next)
		pthread_mutex_lock(&p->mu);
	pthread_mutex_lock(&reg_mu);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&reg_mu);
	for (struct th_proxy *p = proxies; p; p = p->next)
		pthread_mutex_unlock(&p->mu);
	pthread_mutex_unlock(&proxies_mu);
}

/* In the child the proxy threads do not exist: close the child's copies of
 * their sockets (so the parent's proxy can really drop connections) and
 * forget them.  Their memory is left alone (it belongs to the parent's
 * threads' view of the world; the child never frees it). */
static void atfork_child(void)
{
	pthread_mutex_unlock(&reg_mu);
	struct th_proxy *p = proxies;
	while (p) {
		struct th_proxy *next = p->next;
		close(p->lfd);
		close(p->wake[0]);
		close(p->wake[1]);
		for (int i = 0; i < p->nconns; i++) {
			if (p->conns[i]->cfd >= 0)
				close(p->conns[i]->cfd);
			if (p->conns[i]->sfd >= 0)
				close(p->conns[i]->sfd);
		}
		pthread_mutex_unlock(&p->mu);
		p = next;
	}
	inherited_proxies = proxies;
	proxies = NULL;
	pthread_mutex_unlock(&proxies_mu);
}

int
th_self_driver(struct th_redis *srv, char *self, size_t len, const char *ns, const char *url_opts)
{
	char url[700];
	ssize_t n;

	if ((n = readlink("/proc/self/exe", self, len - 1)) <= 0) {
		fprintf(stderr, "cannot read /proc/self/exe\n");
		return -1;
	}
	self[n] = '\0';
	if (th_redis_start(srv, NULL)) {
		fprintf(stderr, "redis-server did not start\n");
		return -1;
	}
	if (url_opts && th_url_with(url, sizeof url, srv->url, url_opts)) {
		fprintf(stderr, "URL too long\n");
		return -1;
	}
	setenv("DMUTEX_URL", url_opts ? url : srv->url, 1);
	setenv("DMUTEX_NAMESPACE", ns, 1);
	return 0;
}
