/* See dm_cmd.h. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dm_cmd.h"
#include "harness.h"

int
dm_cmd_init(struct dm_cmd *d, const char *label)
{
	const char *t = getenv("TMPDIR");

	memset(d, 0, sizeof *d);
	snprintf(d->dir, sizeof d->dir, "%s/%s-XXXXXX", t && *t ? t : "/tmp", label);
	return mkdtemp(d->dir) ? 0 : -1;
}

void
dm_cmd_fini(struct dm_cmd *d)
{
	DIR *dir;
	struct dirent *de;
	char p[600];

	for (int i = 0; i < d->nkids; i++)
		if (d->kids[i] > 0 && waitpid(d->kids[i], NULL, WNOHANG) == 0) {
			kill(d->kids[i], SIGKILL);
			waitpid(d->kids[i], NULL, 0);
		}
	d->nkids = 0;
	if (!d->dir[0] || !(dir = opendir(d->dir)))
		return;
	while ((de = readdir(dir)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			snprintf(p, sizeof p, "%s/%s", d->dir, de->d_name);
			unlink(p);
		}
	closedir(dir);
	rmdir(d->dir);
}

pid_t
dm_cmd_startv(struct dm_cmd *d, const char *tag, va_list ap)
{
	char *argv[40], out[600], err[600];
	const char *a;
	int argc = 0;
	pid_t pid;

	argv[argc++] = getenv("DMUTEX_BIN");
	while ((a = va_arg(ap, const char *)) && argc < 39)
		argv[argc++] = (char *)a;
	argv[argc] = NULL;
	snprintf(out, sizeof out, "%s/%s.out", d->dir, tag);
	snprintf(err, sizeof err, "%s/%s.err", d->dir, tag);
	fflush(NULL);
	if ((pid = fork()) == 0) {
		int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int n = open("/dev/null", O_RDONLY);
		if (!argv[0] || o < 0 || e < 0 || n < 0 || dup2(n, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
			_exit(120);
		close_range(3, ~0u, 0);
		signal(SIGHUP, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGQUIT, SIG_DFL);
		execv(argv[0], argv);
		_exit(121);
	}
	if (pid > 0 && d->nkids < DM_CMD_KIDS)
		d->kids[d->nkids++] = pid;
	return pid;
}

pid_t
dm_cmd_start(struct dm_cmd *d, const char *tag, ...)
{
	va_list ap;
	pid_t pid;

	va_start(ap, tag);
	pid = dm_cmd_startv(d, tag, ap);
	va_end(ap);
	return pid;
}

int
dm_cmd_run(struct dm_cmd *d, int timeout_ms, const char *tag, ...)
{
	va_list ap;
	pid_t pid;

	va_start(ap, tag);
	pid = dm_cmd_startv(d, tag, ap);
	va_end(ap);
	return pid < 0 ? -1 : th_wait_child(pid, timeout_ms);
}

char *
dm_cmd_output(const struct dm_cmd *d, const char *tag, const char *ext)
{
	char path[700];
	FILE *f;
	char *buf = calloc(1, 1 << 20);
	size_t n = 0;

	if (!buf)
		return NULL;
	snprintf(path, sizeof path, "%s/%s.%s", d->dir, tag, ext);
	if ((f = fopen(path, "r"))) {
		n = fread(buf, 1, (1 << 20) - 1, f);
		fclose(f);
	}
	buf[n] = '\0';
	return buf;
}
