/*
 * Driver helpers of the shim tests that run copies of themselves
 * (test_shim_zero, test_shim_local): exec self in a mode with its stdin and
 * stdout on pipes, and read one line of its output within a deadline.
 */
#ifndef SHIM_DRIVER_H
#define SHIM_DRIVER_H

#include <poll.h>
#include <unistd.h>

#include "harness.h"

struct proc {
	pid_t pid;
	int in, out;
};

static int
start(struct proc *p, const char *self, const char *mode)
{
	int in[2], out[2];

	if (pipe(in) || pipe(out))
		return -1;
	if ((p->pid = fork()) == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[0]); close(in[1]); close(out[0]); close(out[1]);
		execl(self, self, mode, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	p->in = in[1];
	p->out = out[0];
	return p->pid > 0 ? 0 : -1;
}

/* A line from p, within the deadline. */
static int
line(struct proc *p, char *buf, size_t len, int timeout_ms)
{
	size_t n = 0;
	long long until = th_now_ms() + timeout_ms;

	while (n + 1 < len) {
		struct pollfd pfd = { p->out, POLLIN, 0 };
		long long left = until - th_now_ms();
		ssize_t r;

		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
			break;
		if ((r = read(p->out, buf + n, 1)) <= 0 || buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = '\0';
	return n > 0 ? 0 : -1;
}

#endif
