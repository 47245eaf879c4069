/*
 * dmutex run: hold a lock (renewed by the library) while COMMAND runs.
 *
 * Events reach the main loop through one self-pipe: a byte per signal from
 * the handlers, and EV_LOST from the library's onlost handler (called on its
 * renewal thread).
 *
 * A terminating signal that comes while the lock is being acquired must not
 * kill dmutex at once: an acquire request may be on its way, and Redis would
 * grant it to a process that is gone, stranding the lock for a whole lease.
 * The signal is noted instead; the request in flight is finished, the lock
 * released if it was granted, and then dmutex dies of the signal.  The
 * library's lock calls cannot be interrupted, so a wait for the lock is a
 * series of short timed waits (WAIT_SLICE_MS) between which the note is
 * read.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dmutex.h"
#include "cli.h"

static const char usage[] =
	"usage: dmutex run [-n | -w SECONDS] [--lease MS] [--robust] [--grace SECONDS]\n"
	"                  [--url URL] NAME -- COMMAND [ARGS...]\n"
	"Hold lock NAME while COMMAND runs, and exit with COMMAND's status.\n"
	"  -n, --nonblock       exit with status 80 at once if NAME is held\n"
	"  -w, --wait SECONDS   give up after SECONDS with status 81\n"
	"      --lease MS       lease (100 .. 86400000 ms); renewed while COMMAND runs\n"
	"      --robust         take over from a holder that died (warn and proceed)\n"
	"      --grace SECONDS  after losing the lock, SIGTERM, then SIGKILL this much\n"
	"                       later (default 5)\n"
	"COMMAND gets DMUTEX_NAME and DMUTEX_FENCE (the hold's fencing token).\n";

/* Forwarded to COMMAND (which gets their default action back). */
static const int run_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };
#define NRUN_SIGNALS ((int)(sizeof run_signals / sizeof run_signals[0]))
/* SIGPIPE's disposition when dmutex started: COMMAND gets it back. */
static struct sigaction sigpipe_at_start;

#define EV_LOST 0xff
#define EV_KERNEL 0x80          /* or'ed into a signal the kernel sent */
#define GRACE_DEFAULT_MS 5000
/* How soon a signal ends a wait for the lock; each slice costs the backend
 * an acquire attempt or two. */
#define WAIT_SLICE_MS 250
/* A failing backend is retried this many command timeouts, as dmutex_lock
 * does, before `run` gives up with CLI_BACKEND. */
#define IO_RETRY_FACTOR 3

/* What a signal does: */
enum {
	PHASE_START,            /* nothing asked of the backend yet: die at once */
	PHASE_ACQUIRING,        /* note it in `deferred`, die after the release */
	PHASE_HOLDING           /* pass it on to COMMAND (through evpipe) */
};

static int evpipe[2] = { -1, -1 };
static volatile sig_atomic_t phase;
static volatile sig_atomic_t deferred;  /* the first signal while acquiring */
static volatile sig_atomic_t showing;   /* the waiting line is on the terminal */

static void
on_signal(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;
	unsigned char b = (unsigned char)sig;

	(void)uc;
	if (sig != SIGCHLD && phase != PHASE_HOLDING) {
		struct sigaction dfl;
		if (showing && write(STDERR_FILENO, "\r\033[K", 4) < 0) {
			/* nothing to do about it */
		}
		showing = 0;
		if (phase == PHASE_ACQUIRING) {
			if (!deferred)
				deferred = sig;
			errno = saved;
			return;
		}
		memset(&dfl, 0, sizeof dfl);
		dfl.sa_handler = SIG_DFL;
		sigaction(sig, &dfl, NULL);
		kill(getpid(), sig);    /* delivered as soon as we return */
		errno = saved;
		return;
	}
	/* Signals the terminal sends (Ctrl-C, hangup) went to the whole
	 * foreground process group: COMMAND got its own copy. */
	if (sig != SIGCHLD && si && si->si_code > 0)
		b |= EV_KERNEL;
	if (write(evpipe[1], &b, 1) < 0) {
		/* A full pipe already has a wake-up in it. */
	}
	errno = saved;
}

static void
on_lost(const char *name, void *arg)
{
	unsigned char b = EV_LOST;

	(void)name;
	(void)arg;
	if (write(evpipe[1], &b, 1) < 0) {
		/* as above */
	}
}

static int
setup_signals(void)
{
	struct sigaction sa, cur;

	if (pipe2(evpipe, O_CLOEXEC | O_NONBLOCK)) {
		cli_err("pipe: %s", strerror(errno));
		return CLI_INTERNAL;
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigfillset(&sa.sa_mask);
	for (int i = 0; i < NRUN_SIGNALS; i++) {
		/* Started ignoring it (nohup, a background job): so does COMMAND. */
		if (sigaction(run_signals[i], NULL, &cur) == 0 && cur.sa_handler == SIG_IGN)
			continue;
		sigaction(run_signals[i], &sa, NULL);
	}
	sa.sa_flags |= SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, NULL);
	/* Our sockets send with MSG_NOSIGNAL, but dmutex also writes to its
	 * stdout and stderr: a closed pipe there must be an error, not death. */
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, &sigpipe_at_start);
	return 0;
}

static long long
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* environ without our own variables, plus them. */
static char **
child_env(const char *name, uint64_t fence, int owner_died, char **store, size_t nstore)
{
	extern char **environ;
	size_t n = 0, k = 0;
	char **env;

	for (char **e = environ; *e; e++)
		n++;
	/* Our two, DMUTEX_OWNER_DIED, and the NULL. */
	if (!(env = calloc(n + nstore + 2, sizeof *env)))
		return NULL;
	for (char **e = environ; *e; e++)
		if (strncmp(*e, "DMUTEX_NAME=", 12) && strncmp(*e, "DMUTEX_FENCE=", 13) &&
		    strncmp(*e, "DMUTEX_OWNER_DIED=", 18))
			env[k++] = *e;
	if (asprintf(&store[0], "DMUTEX_NAME=%s", name) < 0)
		store[0] = NULL;
	if (asprintf(&store[1], "DMUTEX_FENCE=%llu", (unsigned long long)fence) < 0)
		store[1] = NULL;
	if (!store[0] || !store[1]) {
		free(env);
		return NULL;
	}
	env[k++] = store[0];
	env[k++] = store[1];
	if (owner_died)
		env[k++] = "DMUTEX_OWNER_DIED=1";
	env[k] = NULL;
	return env;
}

struct run_opts {
	int nonblock;
	int64_t wait_ms;                /* -1: forever */
	unsigned lease_ms;              /* 0: the client's */
	int robust;
	int64_t grace_ms;
	const char *url;                /* as given (NULL: $DMUTEX_URL...) */
	const char *name;
	char **argv;                    /* COMMAND and its arguments */
};

static int
parse(int argc, char **argv, struct run_opts *o)
{
	static const struct option opts[] = {
		{ "nonblock", no_argument, NULL, 'n' },
		{ "wait", required_argument, NULL, 'w' },
		{ "timeout", required_argument, NULL, 'w' },
		{ "lease", required_argument, NULL, 'l' },
		{ "robust", no_argument, NULL, 'r' },
		{ "grace", required_argument, NULL, 'g' },
		{ "url", required_argument, NULL, 'u' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	char *end;
	unsigned long v;
	int c;

	o->wait_ms = -1;
	o->grace_ms = GRACE_DEFAULT_MS;
	while ((c = getopt_long(argc, argv, "+nw:h", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			o->nonblock = 1;
			break;
		case 'w':
			if (cli_parse_seconds(optarg, &o->wait_ms)) {
				cli_err("-w: '%s' is not a number of seconds", optarg);
				return CLI_USAGE;
			}
			break;
		case 'l':
			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || optarg[0] == '-' ||
			    v < DMUTEX_LEASE_MIN || v > DMUTEX_LEASE_MAX) {
				cli_err("--lease: '%s' is not %u to %u ms", optarg,
						DMUTEX_LEASE_MIN, DMUTEX_LEASE_MAX);
				return CLI_USAGE;
			}
			o->lease_ms = (unsigned)v;
			break;
		case 'r':
			o->robust = 1;
			break;
		case 'g':
			if (cli_parse_seconds(optarg, &o->grace_ms)) {
				cli_err("--grace: '%s' is not a number of seconds", optarg);
				return CLI_USAGE;
			}
			break;
		case 'u':
			o->url = optarg;
			break;
		case 'h':
			fputs(usage, stdout);
			return -1;
		default:
			fputs(usage, stderr);
			return CLI_USAGE;
		}
	}
	if (o->nonblock && o->wait_ms >= 0) {
		cli_err("-n and -w exclude each other");
		return CLI_USAGE;
	}
	if (optind >= argc) {
		fputs(usage, stderr);
		return CLI_USAGE;
	}
	o->name = argv[optind++];
	if (optind < argc && !strcmp(argv[optind], "--"))
		optind++;
	if (optind >= argc) {
		cli_err("no COMMAND to run (dmutex run NAME -- COMMAND [ARGS...])");
		return CLI_USAGE;
	}
	o->argv = argv + optind;
	return cli_check_name(o->name);
}

/* The library logged the details (naming the node, never its password). */
static int
client_status(int err)
{
	switch (err) {
	case EINVAL:
	case ENOTSUP:
		cli_err("bad or unsupported backend URL");
		return CLI_BADURL;
	case EIO:
		cli_err("backend unreachable or refusing");
		return CLI_BACKEND;
	default:
		cli_err("cannot open the backend: %s", dmutex_strerror(err));
		return CLI_INTERNAL;
	}
}

static void
ms_to_ts(long long ms, struct timespec *ts)
{
	ts->tv_sec = (time_t)(ms / 1000);
	ts->tv_nsec = (long)(ms % 1000) * 1000000;
}

/* Wait for the lock in slices, reading `deferred` between them.  A slice
 * that ends in EIO only means the backend failed within the slice: it is
 * retried until the backend has failed for io_budget_ms in a row. */
static int
wait_for(dmutex_t *m, const struct run_opts *o, long long io_budget_ms)
{
	long long start = now_ms(), failing_since = -1;
	int err;

	for (;;) {
		long long now = now_ms(), until = now + WAIT_SLICE_MS;
		int last = 0;
		struct timespec ts;

		if (deferred)
			return EINTR;   /* nothing asked since the last answer */
		if (o->wait_ms >= 0 && start + o->wait_ms <= until) {
			until = start + o->wait_ms;
			last = 1;
		}
		ms_to_ts(until, &ts);
		err = dmutex_clocklock(m, CLOCK_MONOTONIC, &ts);
		if (deferred || last)
			return err;
		if (err == ETIMEDOUT) {
			failing_since = -1;
			continue;
		}
		if (err == EIO) {
			if (failing_since < 0)
				failing_since = now;
			if (now_ms() - failing_since < io_budget_ms)
				continue;
		}
		return err;
	}
}

/* Take the lock as the options say.  0 when held (or when a signal came:
 * the caller reads `deferred` and releases what is held), else the exit
 * status. */
static int
acquire(dmutex_t *m, const struct run_opts *o, const char *url, long long io_budget_ms,
		int *owner_died)
{
	struct cli_waitshow *show = NULL;
	char holder[700];
	int err;

	err = dmutex_trylock(m);
	if (err == EBUSY && !o->nonblock && !deferred) {
		/* A line on the terminal only: cron mails whatever is printed. */
		if (isatty(STDERR_FILENO) && (show = cli_waitshow_start(url, o->name)))
			showing = 1;
		err = wait_for(m, o, io_budget_ms);
	}
	showing = 0;
	cli_waitshow_stop(show);
	if (deferred) {
		/* Held or not, the caller releases and dies: no consistent, no
		 * message (see cli_cmd_run for EOWNERDEAD). */
		*owner_died = err == EOWNERDEAD;
		return 0;
	}
	switch (err) {
	case 0:
		return 0;
	case EOWNERDEAD:
		/* Only robust mutexes say so; --robust asked to proceed. */
		cli_err("warning: the previous holder of '%s' died holding it; "
				"proceeding (DMUTEX_OWNER_DIED=1 tells COMMAND)", o->name);
		*owner_died = 1;
		if ((err = dmutex_consistent(m))) {
			cli_err("'%s': consistent: %s", o->name, dmutex_strerror(err));
			return CLI_INTERNAL;
		}
		return 0;
	case EBUSY:
		/* Quiet unless someone is watching: "already running" is the
		 * normal outcome of -n in a crontab. */
		if (isatty(STDERR_FILENO)) {
			cli_describe_holder(url, o->name, holder, sizeof holder);
			cli_err("'%s' is %s", o->name, holder[0] ? holder : "held");
		}
		return CLI_BUSY;
	case ETIMEDOUT:
		cli_describe_holder(url, o->name, holder, sizeof holder);
		cli_err("timed out after %lld.%03lld s waiting for '%s'%s%s",
				(long long)o->wait_ms / 1000, (long long)o->wait_ms % 1000,
				o->name, holder[0] ? ", " : "", holder);
		return CLI_TIMEDOUT;
	case ENOTRECOVERABLE:
		cli_err("'%s' is not recoverable: a holder took it over from one that died and "
				"released it without marking it consistent; check what it protects, "
				"then run: dmutex reset %s", o->name, o->name);
		return CLI_NOTREC;
	case EIO:
		cli_err("'%s' not taken: backend unreachable or failing", o->name);
		return CLI_BACKEND;
	default:
		cli_err("'%s': %s", o->name, dmutex_strerror(err));
		return CLI_INTERNAL;
	}
}

static int
child_status(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return CLI_INTERNAL;
}

/* Wait for COMMAND, forwarding signals and ending it if the hold is lost.
 * *lost is set when it was.  Returns COMMAND's status. */
static int
supervise(pid_t pid, const struct run_opts *o, int *lost)
{
	long long kill_at = -1;
	int st;

	for (;;) {
		struct pollfd pfd = { .fd = evpipe[0], .events = POLLIN };
		unsigned char ev[64];
		ssize_t n;
		int timeout = -1;
		pid_t w;

		if (kill_at >= 0) {
			long long left = kill_at - now_ms();
			timeout = left > 0 ? (int)(left < 1000000 ? left : 1000000) : 0;
		}
		if (poll(&pfd, 1, timeout) < 0 && errno != EINTR) {
			cli_err("poll: %s", strerror(errno));
			kill(pid, SIGKILL);
		}
		while ((n = read(evpipe[0], ev, sizeof ev)) > 0) {
			for (ssize_t i = 0; i < n; i++) {
				if (ev[i] == EV_LOST && !*lost) {
					*lost = 1;
					cli_err("lost the lock '%s' while COMMAND (pid %ld) was running: "
							"its lease could not be renewed (backend unreachable, "
							"or the lock was reset or taken); sending SIGTERM",
							o->name, (long)pid);
					kill(pid, SIGTERM);
					kill_at = now_ms() + o->grace_ms;
				} else if (ev[i] != EV_LOST && ev[i] != SIGCHLD && !(ev[i] & EV_KERNEL)) {
					kill(pid, ev[i]);
				}
			}
		}
		w = waitpid(pid, &st, WNOHANG);
		if (w == pid)
			return child_status(st);
		if (w < 0 && errno != EINTR) {
			cli_err("waitpid: %s", strerror(errno));
			return CLI_INTERNAL;
		}
		if (kill_at >= 0 && now_ms() >= kill_at) {
			cli_err("COMMAND (pid %ld) still running %lld.%03lld s after SIGTERM; sending SIGKILL",
					(long)pid, (long long)o->grace_ms / 1000, (long long)o->grace_ms % 1000);
			kill(pid, SIGKILL);
			kill_at = -1;
		}
	}
}

/* Signals or a loss that came before COMMAND started: do not start it.
 * 0, CLI_LOST, or 0 with *sig set to a terminating signal. */
static int
pending_before_start(const char *name, int *sig)
{
	unsigned char ev[64];
	ssize_t n;

	while ((n = read(evpipe[0], ev, sizeof ev)) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			if (ev[i] == EV_LOST) {
				cli_err("lost the lock '%s' before COMMAND could start", name);
				return CLI_LOST;
			}
			if (ev[i] != SIGCHLD) {
				*sig = ev[i] & ~EV_KERNEL;
				return 0;
			}
		}
	}
	return 0;
}

/* The command's own timeouts: how long a failing backend is retried. */
static long long
io_budget_ms(const char *url)
{
	/* dmutex_client_open has already parsed it without complaint. */
	return (long long)IO_RETRY_FACTOR * dmutex__admin_command_ms(url);
}

/* End as `sig` would have ended dmutex, had it not been caught: the shell
 * (and a parent waiting with WIFSIGNALED) must see the same death. */
static int
die_of(int sig)
{
	struct sigaction dfl;
	sigset_t set;

	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	sigaction(sig, &dfl, NULL);
	sigemptyset(&set);
	sigaddset(&set, sig);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
	return 128 + sig;       /* a signal that does not kill by default */
}

/* What run has from the lock on, for the steps below and the end. */
struct run {
	dmutex_t m;
	char *path;                     /* COMMAND's, found before the lock */
	char **env, *store[2];          /* COMMAND's environment (child_env) */
	pid_t pid;                      /* COMMAND; -1 not started */
	int owner_died, lost, sig;
};

/* The client and the lock's dmutex_t, not locked yet.  0, or the exit
 * status (said); *client is set once open, whatever follows. */
static int
open_lock(const struct run_opts *o, dmutex_client_t **client, dmutex_t *m)
{
	dmutex_attr_t attr;
	int err;

	if ((err = dmutex_client_open(client, o->url)))
		return client_status(err);
	dmutex_attr_init(&attr);
	dmutex_attr_setclient(&attr, *client);
	dmutex_attr_setonlost(&attr, on_lost, NULL);
	if (o->robust)
		dmutex_attr_setrobust(&attr, DMUTEX_ROBUST);
	if (o->lease_ms)
		dmutex_attr_setlease(&attr, o->lease_ms);
	err = dmutex_init(m, o->name, &attr);
	dmutex_attr_destroy(&attr);
	if (err) {
		/* The client is open: this is no URL problem. */
		cli_err("'%s': %s", o->name, dmutex_strerror(err));
		return err == EIO ? CLI_BACKEND : CLI_INTERNAL;
	}
	return 0;
}

/* The lock held: COMMAND started with its hold's token, and watched to
 * its end.  The exit status; r->sig set if a signal came first. */
static int
run_command(struct run *r, const struct run_opts *o)
{
	uint64_t fence = 0;
	int status, err;

	if ((err = dmutex_fence(&r->m, &fence)) == ENOLCK) {
		cli_err("lost the lock '%s' before COMMAND could start", o->name);
		return CLI_LOST;
	} else if (err) {
		/* COMMAND is promised its hold's token: DMUTEX_FENCE=0 would
		 * pass a fencing check nowhere, or everywhere. */
		cli_err("'%s': no fencing token (%s); %s not started", o->name, dmutex_strerror(err),
				o->argv[0]);
		return err == EIO ? CLI_BACKEND : CLI_INTERNAL;
	}
	if (!(r->env = child_env(o->name, fence, r->owner_died, r->store, 2))) {
		cli_err("out of memory");
		return CLI_INTERNAL;
	}
	if ((status = pending_before_start(o->name, &r->sig)) || r->sig)
		return status;
	if ((r->pid = cli_spawn(r->path, o->argv, r->env, &sigpipe_at_start, &status)) < 0)
		return status;
	status = supervise(r->pid, o, &r->lost);
	return r->lost ? CLI_LOST : status;
}

/* Unlock whatever happened (EPERM when it was not taken), saying what the
 * release tells of the hold: the exit status. */
static int
unlock_after(struct run *r, const struct run_opts *o, int status)
{
	int err = dmutex_unlock(&r->m);

	if (err == ENOLCK && r->pid > 0 && !r->lost) {
		/* Noticed only now: COMMAND ran, but not all of it under the lock. */
		cli_err("lost the lock '%s' before COMMAND finished (it exited with status %d)",
				o->name, status);
		return CLI_LOST;
	}
	if (err == EIO)
		cli_err("warning: the release of '%s' was not confirmed; "
				"it frees itself when its lease ends", o->name);
	return status;
}

int
cli_cmd_run(int argc, char **argv, const char *url)
{
	struct run_opts o = { .url = url };
	struct run r = { .pid = -1 };
	dmutex_client_t *client = NULL;
	int status, inited = 0;

	/* Before anything opens a descriptor: COMMAND inherits only these. */
	cli_fd_snapshot();
	if ((status = parse(argc, argv, &o)))
		return status < 0 ? CLI_OK : status;
	/* Before the lock: a typo must not take it. */
	if (!(r.path = cli_find_command(o.argv[0], &status)))
		return status;
	if ((status = setup_signals()) || (status = open_lock(&o, &client, &r.m)))
		goto out;
	inited = 1;
	/* From the first request on, a signal waits for the answer. */
	phase = PHASE_ACQUIRING;
	status = acquire(&r.m, &o, cli_url(o.url), io_budget_ms(cli_url(o.url)), &r.owner_died);
	/* From here a signal is passed on; one that came before is in
	 * `deferred`, read after the phase changed so that none is missed. */
	phase = PHASE_HOLDING;
	if ((r.sig = deferred)) {
		if (r.owner_died) {
			/* Unlocking without dmutex_consistent would make the lock
			 * not recoverable for everyone, and marking it consistent
			 * would hide the earlier death.  exit() has the library
			 * release it marked owner-died, as for any process that
			 * exits holding a lock: the next robust locker is told.
			 * (The one case where dmutex exits rather than dies.) */
			exit(128 + r.sig);
		}
	} else if (!status) {
		status = run_command(&r, &o);
	}
	status = unlock_after(&r, &o, status);
out:
	if (inited)
		dmutex_destroy(&r.m);
	if (client)
		dmutex_client_close(client);
	free(r.env);
	free(r.store[0]);
	free(r.store[1]);
	free(r.path);
	return r.sig ? die_of(r.sig) : status;
}
