/*
 * Starting COMMAND from a process that has threads (the library's renewal
 * and wake-up threads) and a held lock: between vfork and exec the child
 * may only make async-signal-safe calls, so everything is prepared before
 * — the path is looked up here, not by execvp in the child.
 *
 * The child gets the descriptors dmutex was started with and no others:
 * the library opens its sockets close-on-exec, but descriptors from
 * elsewhere may not be, and COMMAND has no business with the lock's
 * connections.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

#define KEEP_MAX 1024

static int keep[KEEP_MAX];      /* sorted: the descriptors we started with */
static int nkeep;
static int keep_all;            /* too many to list: close nothing */

static int
cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

void
cli_fd_snapshot(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;

	if (!d) {
		keep_all = 1;   /* no /proc: better leak than close the caller's */
		return;
	}
	while ((de = readdir(d))) {
		char *end;
		long fd = strtol(de->d_name, &end, 10);
		if (*end || end == de->d_name || fd < 3 || fd == dirfd(d))
			continue;
		if (nkeep == KEEP_MAX) {
			keep_all = 1;
			break;
		}
		keep[nkeep++] = (int)fd;
	}
	closedir(d);
	qsort(keep, (size_t)nkeep, sizeof *keep, cmp_int);
}

/* Highest descriptor open now, for the fallback without close_range. */
static int
max_fd(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int hi = 1023;

	if (!d)
		return (int)sysconf(_SC_OPEN_MAX);
	while ((de = readdir(d))) {
		int fd = atoi(de->d_name);
		if (fd > hi)
			hi = fd;
	}
	closedir(d);
	return hi + 64;    /* threads may open a few more before the fork */
}

/* Async-signal-safe: close [lo, hi] except `except`. */
static void
close_span(unsigned lo, unsigned hi, int except, int fallback_max)
{
	if (lo > hi)
		return;
	if (except >= 0 && (unsigned)except >= lo && (unsigned)except <= hi) {
		if ((unsigned)except > lo)
			close_span(lo, (unsigned)except - 1, -1, fallback_max);
		close_span((unsigned)except + 1, hi, -1, fallback_max);
		return;
	}
	if (close_range(lo, hi, 0) == 0)
		return;
	for (unsigned fd = lo; fd <= hi && fd <= (unsigned)fallback_max; fd++)
		close((int)fd);
}

static void
close_others(int except, int fallback_max)
{
	unsigned lo = 3;

	if (keep_all)
		return;
	for (int i = 0; i < nkeep; i++) {
		if ((unsigned)keep[i] > lo)
			close_span(lo, (unsigned)keep[i] - 1, except, fallback_max);
		lo = (unsigned)keep[i] + 1;
	}
	close_span(lo, ~0u, except, fallback_max);
}

static int
executable(const char *path, int *err)
{
	struct stat st;

	if (stat(path, &st)) {
		*err = errno;
		return 0;
	}
	if (S_ISDIR(st.st_mode)) {
		*err = EACCES;
		return 0;
	}
	if (access(path, X_OK)) {
		*err = errno;
		return 0;
	}
	return 1;
}

char *
cli_find_command(const char *cmd, int *status)
{
	const char *path, *p;
	char *full = NULL;
	int err = ENOENT, seen_eacces = 0;

	if (strchr(cmd, '/')) {
		if (!executable(cmd, &err))
			goto fail;
		if (!(full = strdup(cmd)))
			goto nomem;
		return full;
	}
	if (!(path = getenv("PATH")) || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	for (p = path;; p++) {
		const char *end = strchr(p, ':');
		size_t dlen = end ? (size_t)(end - p) : strlen(p);
		/* An empty PATH element means the current directory. */
		if (!(full = malloc(dlen + strlen(cmd) + 3)))
			goto nomem;
		if (dlen)
			memcpy(full, p, dlen);
		else
			full[dlen++] = '.';
		full[dlen] = '/';
		strcpy(full + dlen + 1, cmd);
		if (executable(full, &err))
			return full;
		seen_eacces |= err == EACCES;
		free(full);
		full = NULL;
		if (!end)
			break;
		p = end;
	}
	if (seen_eacces)
		err = EACCES;
fail:
	cli_err("%s: %s", cmd, strerror(err));
	*status = err == ENOENT || err == ENOTDIR ? CLI_NOTFOUND : CLI_NOEXEC;
	return NULL;
nomem:
	cli_err("out of memory");
	*status = CLI_INTERNAL;
	return NULL;
}

/*
 * The child of vfork: async-signal-safe calls only, and no memory written
 * but *err (the parent is suspended until the exec or the _exit, and reads
 * it then).  vfork, like posix_spawn, runs no pthread_atfork handlers: the
 * library's handlers prepare a child that goes on using it, and would only
 * add work (and risk) to one that execs at once.
 */
static void __attribute__((noreturn))
child(const char *path, char *const argv[], char *const sh_argv[], char *const envp[],
		pid_t parent, const sigset_t *mask, const struct sigaction *sigpipe,
		int fallback, volatile int *err)
{
	struct sigaction dfl, cur;

	/* exec would reset them too, but a signal that came between the
	 * unmasking and the exec would run the parent's handler here. */
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	for (int sig = 1; sig < NSIG; sig++)
		if (sigaction(sig, NULL, &cur) == 0 && cur.sa_handler != SIG_IGN &&
		    cur.sa_handler != SIG_DFL)
			sigaction(sig, &dfl, NULL);
	if (sigpipe)
		sigaction(SIGPIPE, sigpipe, NULL);
	/* If dmutex dies (even by SIGKILL) the lock is no longer renewed:
	 * COMMAND must not go on as if it still held it. */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(CLI_LOST);
	close_others(-1, fallback);
	sigprocmask(SIG_SETMASK, mask, NULL);
	execve(path, argv, envp);
	/* As execvp: a script without a #! line is run by the shell. */
	if (errno == ENOEXEC && sh_argv)
		execve("/bin/sh", sh_argv, envp);
	*err = errno;
	_exit(*err == ENOENT ? CLI_NOTFOUND : CLI_NOEXEC);
}

pid_t
cli_spawn(const char *path, char *const argv[], char *const envp[],
		const struct sigaction *sigpipe, int *status)
{
	static volatile int exec_err;
	sigset_t all, old;
	pid_t parent = getpid(), pid;
	int fallback = max_fd(), err, argc = 0;
	char **sh_argv;

	/* Made here: the child may not allocate. */
	while (argv[argc])
		argc++;
	if ((sh_argv = calloc((size_t)argc + 2, sizeof *sh_argv))) {
		sh_argv[0] = "sh";
		sh_argv[1] = (char *)path;
		for (int i = 1; i < argc; i++)
			sh_argv[i + 1] = argv[i];
	}

	/* No handler of ours may run in the child: everything is blocked over
	 * the vfork; the child restores default actions, then the mask. */
	exec_err = 0;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid = vfork();
	if (pid == 0)
		child(path, argv, sh_argv, envp, parent, &old, sigpipe, fallback, &exec_err);
	err = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	free(sh_argv);
	if (pid < 0) {
		cli_err("fork: %s", strerror(err));
		*status = CLI_INTERNAL;
		return -1;
	}
	/* The child has exec'd or exited: exec_err says which. */
	if ((err = exec_err)) {
		int st;
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		cli_err("%s: %s", path, strerror(err));
		*status = err == ENOENT ? CLI_NOTFOUND : CLI_NOEXEC;
		return -1;
	}
	return pid;
}
