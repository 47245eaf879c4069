/* Small helpers every part of the torture harness uses. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "torture.h"

const char *const tt_fault_names[TT_NFAULTS] = {
	"holder_stop", "holder_kill", "redis_stop", "client_pause", "redis_restart",
	"proxy_delay", "proxy_drop", "proxy_blackhole", "majority_stop",
	"key_del", "key_reset", "flushall", "evict", "restart_lossy", "outage_long",
};

int
tt_fault_loses_keys(int f)
{
	return f >= F_KEY_DEL && f <= F_RESTART_LOSSY;
}

int
tt_fault_applies(int f, int nodes)
{
	if (f == F_MAJORITY_STOP)
		return nodes > 1;
	return nodes == 1 || !tt_fault_loses_keys(f);
}

int64_t
tt_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void
tt_sleep_ms(double ms)
{
	struct timespec ts;

	if (ms <= 0)
		return;
	ts.tv_sec = (time_t)(ms / 1000);
	ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1000) * 1e6);
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

uint64_t
tt_rand(uint64_t *s)
{
	uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ULL;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dULL;
}

double
tt_uniform(uint64_t *s, double lo, double hi)
{
	return lo + (hi - lo) * (double)(tt_rand(s) >> 11) / (double)(1ULL << 53);
}

void
tt_rec_write(int fd, const struct tt_rec *r)
{
	ssize_t n;

	do {
		n = write(fd, r, sizeof *r);
	} while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof *r)
		fprintf(stderr, "torture: history write: %s\n", n < 0 ? strerror(errno) : "short");
}

struct tt_shared *
tt_shared_map(const char *dir, int create)
{
	char path[512];
	struct tt_shared *s;
	int fd;

	snprintf(path, sizeof path, "%s/shared", dir);
	fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0), 0600);
	if (fd < 0 || (create && ftruncate(fd, sizeof *s) != 0)) {
		fprintf(stderr, "torture: %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (s == MAP_FAILED) {
		fprintf(stderr, "torture: mmap %s: %s\n", path, strerror(errno));
		return NULL;
	}
	return s;
}

pid_t
tt_spawn(const char *who, char *exe, char **argv)
{
	pid_t parent = getpid(), pid;

	fflush(NULL);
	if ((pid = fork()) < 0) {
		fprintf(stderr, "%s: fork: %s\n", who, strerror(errno));
		return -1;
	}
	if (pid == 0) {
		/* Never outlive the run (a failed or killed orchestrator). */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(99);
		execv(exe, argv);
		_exit(98);
	}
	return pid;
}

static int
rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void
tt_rmtree(const char *dir)
{
	nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}
