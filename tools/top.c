/*
 * dmutex top: the locks live, like top(1).  Every refresh reads the
 * counters every process added (metread.c) and the state of each lock
 * they name (inspect.c), and shows the most contended first: contended
 * acquisitions per second, then waiters, then acquisitions per second.
 * On a terminal it redraws in place and q quits; otherwise (or with
 * --once) it prints frames one after the other.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static const char usage[] =
	"usage: dmutex top [--interval SECONDS] [--names N] [--once] [--url URL]\n"
	"A live view of the locks, most contended first: holder, how long it\n"
	"holds, waiting clients and condition variable waiters, acquisitions and\n"
	"contended acquisitions per second.  Refreshes every SECONDS (default 1);\n"
	"q or Ctrl-C quits.  Looks at the N names with the most acquisitions\n"
	"(default 100).  --once prints one frame and exits.\n";

struct row {
	struct cli_lock l;
	uint64_t acq, contended;
	double acq_s, cont_s;
};

/* The previous frame's counts, to turn totals into rates. */
struct prev {
	char **names;
	uint64_t *acq, *cont;
	size_t n;
	long long at_ms;
};

static volatile sig_atomic_t quit;
static struct termios saved;
static int raw;

static void
on_signal(int sig)
{
	(void)sig;
	quit = 1;
}

static void
term_restore(void)
{
	if (raw) {
		tcsetattr(STDIN_FILENO, TCSANOW, &saved);
		fputs("\033[?25h\033[?1049l", stdout);
		fflush(stdout);
		raw = 0;
	}
}

static void
term_raw(void)
{
	struct termios t;

	if (tcgetattr(STDIN_FILENO, &saved))
		return;
	t = saved;
	t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
	t.c_cc[VMIN] = 0;
	t.c_cc[VTIME] = 0;
	tcsetattr(STDIN_FILENO, TCSANOW, &t);
	raw = 1;
	fputs("\033[?1049h\033[?25l", stdout);     /* alternate screen, no cursor */
}

static int
by_contention(const void *a, const void *b)
{
	const struct row *x = a, *y = b;

	if (x->cont_s != y->cont_s)
		return x->cont_s < y->cont_s ? 1 : -1;
	if (x->l.waiters != y->l.waiters)
		return x->l.waiters < y->l.waiters ? 1 : -1;
	if (x->acq_s != y->acq_s)
		return x->acq_s < y->acq_s ? 1 : -1;
	if (x->contended != y->contended)
		return x->contended < y->contended ? 1 : -1;
	return strcmp(x->l.name, y->l.name);
}

static void
prev_free(struct prev *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->names[i]);
	free(p->names);
	free(p->acq);
	free(p->cont);
	memset(p, 0, sizeof *p);
}

static void
rates(struct row *r, const struct prev *p, long long now_ms)
{
	double dt = (double)(now_ms - p->at_ms) / 1000;

	r->acq_s = r->cont_s = 0;
	if (!p->at_ms || dt <= 0)
		return;
	for (size_t i = 0; i < p->n; i++)
		if (!strcmp(p->names[i], r->l.name)) {
			r->acq_s = r->acq >= p->acq[i] ? (double)(r->acq - p->acq[i]) / dt : 0;
			r->cont_s = r->contended >= p->cont[i] ?
				(double)(r->contended - p->cont[i]) / dt : 0;
			return;
		}
}

static void
remember(struct prev *p, const struct row *rows, size_t n, long long now_ms)
{
	prev_free(p);
	p->names = calloc(n ? n : 1, sizeof *p->names);
	p->acq = calloc(n ? n : 1, sizeof *p->acq);
	p->cont = calloc(n ? n : 1, sizeof *p->cont);
	if (!p->names || !p->acq || !p->cont) {
		prev_free(p);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if (!(p->names[i] = strdup(rows[i].l.name)))
			break;
		p->acq[i] = rows[i].acq;
		p->cont[i] = rows[i].contended;
		p->n++;
	}
	p->at_ms = now_ms;
}

/* One line, cut to the terminal's width. */
static void
line(int width, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void
line(int width, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (width > 0 && (int)strlen(buf) > width)
		buf[width] = '\0';
	fputs(buf, stdout);
	fputs(raw ? "\033[K\n" : "\n", stdout);
}

static int
frame(const char *url, size_t names, struct prev *prev, int width, int height, double interval)
{
	struct cli_conn cc;
	struct cli_metrics m;
	struct row *rows = NULL;
	size_t n = 0;
	long long now = cli_wall_ms();
	char when[32], buf[512], held[32], name[CLI_NAME_TEXT];
	time_t t = time(NULL);
	struct tm tm;
	int st;

	if ((st = cli_conn_open(&cc, url)))
		return st;
	if ((st = cli_metrics_read(cli_conn_counters(&cc), cc.prefix, names, &m)))
		goto out;
	if (!(rows = calloc(m.n ? m.n : 1, sizeof *rows))) {
		cli_err("out of memory");
		st = CLI_INTERNAL;
		goto out;
	}
	for (size_t i = 0; i < m.n; i++)
		if (!m.sets[i].other && (st = cli_inspect_append(cli_conn_of(&cc, m.sets[i].name), cc.prefix,
				m.sets[i].name)))
			goto out;
	for (size_t i = 0; i < m.n; i++) {
		struct row *r = &rows[n];
		if (m.sets[i].other)
			continue;
		if ((st = cli_inspect_read(cli_conn_of(&cc, m.sets[i].name), cc.prefix, m.sets[i].name, &r->l))) {
			cli_lock_free(&r->l);
			goto out;
		}
		r->acq = m.sets[i].v[DMUTEX__MET_ACQ];
		r->contended = m.sets[i].v[DMUTEX__MET_CONTENDED];
		rates(r, prev, now);
		n++;
	}
	qsort(rows, n, sizeof *rows, by_contention);

	localtime_r(&t, &tm);
	strftime(when, sizeof when, "%H:%M:%S", &tm);
	if (raw)
		fputs("\033[H", stdout);
	line(width, "dmutex top - %s - %zu lock%s - every %.1f s%s", when, n, n == 1 ? "" : "s",
			interval, raw ? " - q quits" : "");
	line(width, "%s", "");
	line(width, "%-24s %-5s %-28s %-10s %-5s %-5s %8s %8s %10s %10s", "NAME", "STATE", "HOLDER",
			"HELD", "WAIT", "COND", "ACQ/S", "CONT/S", "ACQ", "CONTENDED");
	for (size_t i = 0; i < n && (!raw || (int)i < height - 4); i++) {
		const struct cli_lock *l = &rows[i].l;
		char wait[24] = "-", cond[24] = "-";
		cli_name_text(name, l->name);
		if (l->held) {
			cli_holder(buf, sizeof buf, l, 0);
			cli_duration(held, sizeof held, l->since_ms >= 0 ? now - l->since_ms : 0);
		} else {
			snprintf(buf, sizeof buf, "-");
			snprintf(held, sizeof held, "-");
		}
		if (l->waiters >= 0)
			snprintf(wait, sizeof wait, "%lld", l->waiters);
		if (l->cond_waiters >= 0)
			snprintf(cond, sizeof cond, "%lld", l->cond_waiters);
		line(width, "%-24s %-5s %-28s %-10s %-5s %-5s %8.1f %8.1f %10llu %10llu", name,
				l->error[0] ? "?" : l->held ? "held" : "free", buf, held, wait, cond,
				rows[i].acq_s, rows[i].cont_s, (unsigned long long)rows[i].acq,
				(unsigned long long)rows[i].contended);
	}
	if (!n)
		line(width, "%s", "(no lock has been counted yet: counters appear once a process has locked one)");
	if (raw)
		fputs("\033[J", stdout);   /* clear what the last frame left below */
	else
		fputs("\n", stdout);
	fflush(stdout);
	remember(prev, rows, n, now);
out:
	for (size_t i = 0; i < n; i++)
		cli_lock_free(&rows[i].l);
	free(rows);
	if (m.sets)
		cli_metrics_free(&m);
	cli_conn_close(&cc);
	return st;
}

int
cli_cmd_top(int argc, char **argv, const char *url)
{
	static const struct option opts[] = {
		{ "interval", required_argument, NULL, 'i' },
		{ "names", required_argument, NULL, 'N' },
		{ "once", no_argument, NULL, '1' },
		{ "url", required_argument, NULL, 'u' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct sigaction sa = { .sa_handler = on_signal };
	struct prev prev = { 0 };
	int64_t interval_ms = 1000;
	unsigned long names = 100;
	int once = 0, c, st = 0, tty;
	char *end;

	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'i':
			if (cli_parse_seconds(optarg, &interval_ms) || interval_ms < 100) {
				cli_err("--interval wants seconds, 0.1 or more, not '%s'", optarg);
				return CLI_USAGE;
			}
			break;
		case 'N':
			names = strtoul(optarg, &end, 10);
			if (*end || !*optarg || optarg[0] == '-' || !names || names > 100000) {
				cli_err("--names wants 1 to 100000, not '%s'", optarg);
				return CLI_USAGE;
			}
			break;
		case '1': once = 1; break;
		case 'u': url = optarg; break;
		case 'h': fputs(usage, stdout); return CLI_OK;
		default: fputs(usage, stderr); return CLI_USAGE;
		}
	}
	if (optind < argc) {
		fputs(usage, stderr);
		return CLI_USAGE;
	}
	url = cli_url(url);
	tty = !once && isatty(STDOUT_FILENO) && isatty(STDIN_FILENO);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	if (tty)
		term_raw();
	while (!quit) {
		struct winsize ws = { 0 };
		int width = 0, height = 0;
		int64_t until;

		if (tty && !ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws)) {
			width = ws.ws_col;
			height = ws.ws_row;
		}
		if ((st = frame(url, names, &prev, width, height, (double)interval_ms / 1000)) || once)
			break;
		/* Wait for the next refresh, or for q. */
		until = cli_wall_ms() + interval_ms;
		while (!quit) {
			long long left = until - cli_wall_ms();
			struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
			char ch;
			if (left <= 0)
				break;
			if (!tty) {
				struct timespec ts = { left / 1000, left % 1000 * 1000000 };
				nanosleep(&ts, NULL);
				continue;
			}
			if (poll(&p, 1, (int)left) > 0 && read(STDIN_FILENO, &ch, 1) == 1 &&
			    (ch == 'q' || ch == 'Q'))
				quit = 1;
		}
	}
	term_restore();
	prev_free(&prev);
	return st;
}
