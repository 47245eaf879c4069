/*
 * `dmutex top` in a real terminal (issue 17.8): tmux runs it in a detached
 * session of known size; capture-pane shows what a person would see.  The
 * screen is polled with a deadline, never slept on.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmutex.h"
#include "harness.h"

static struct th_redis srv;
static char tmpdir[256], sock[64];

static void
up(void)
{
	cr_assert(getenv("DMUTEX_BIN"), "DMUTEX_BIN is not set (run through meson test)");
	cr_assert_eq(th_redis_start(&srv, NULL), 0, "redis-server did not start");
	snprintf(tmpdir, sizeof tmpdir, "%s/dmutex-top-XXXXXX",
			getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	cr_assert(mkdtemp(tmpdir));
	/* A tmux server of our own: nobody else's sessions are touched. */
	snprintf(sock, sizeof sock, "dmutex-top-%ld", (long)getpid());
	setenv("DMUTEX_URL", srv.url, 1);
}

static int
tmux(const char *tag, const char *const *args)
{
	const char *argv[16] = { "tmux", "-L", sock, "-f", "/dev/null" };
	char out[600];
	int i = 5;

	while (*args && i < 15)
		argv[i++] = *args++;
	argv[i] = NULL;
	snprintf(out, sizeof out, "%s/%s", tmpdir, tag);
	unlink(out);
	return th_run(argv, (const char *const[]){ "TERM=xterm-256color", NULL }, out, 10000);
}

static void
down(void)
{
	char cmd[600];

	tmux("kill", (const char *const[]){ "kill-server", NULL });
	th_redis_stop(&srv);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", tmpdir);
}

TestSuite(top, .init = up, .fini = down, .timeout = 60);

static char *
slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	int c;

	cr_assert(m);
	if (f) {
		while ((c = getc(f)) != EOF)
			putc(c, m);
		fclose(f);
	}
	fclose(m);
	return buf;
}

/* What the pane shows now (malloc'd). */
static char *
screen(void)
{
	char p[600];

	if (tmux("pane", (const char *const[]){ "capture-pane", "-p", "-t", "top", NULL }))
		return strdup("");
	snprintf(p, sizeof p, "%s/pane", tmpdir);
	return slurp(p);
}

struct want { const char *a, *b; char *last; };

/* The screen has a line containing both a and b. */
static int
shows(void *arg)
{
	struct want *w = arg;

	free(w->last);
	w->last = screen();
	for (char *l = w->last; l && *l; ) {
		char *nl = strchr(l, '\n');
		size_t n = nl ? (size_t)(nl - l) : strlen(l);
		char line[1024];
		snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), l);
		if (strstr(line, w->a) && (!w->b || strstr(line, w->b)))
			return 1;
		l = nl ? nl + 1 : NULL;
	}
	return 0;
}

static int
session_gone(void *arg)
{
	(void)arg;
	return tmux("has", (const char *const[]){ "has-session", "-t", "top", NULL }) != 0;
}

static void
cycles(dmutex_client_t *c, dmutex_t *m, const char *name, int n)
{
	dmutex_attr_t a;

	cr_assert_eq(dmutex_attr_init(&a), 0);
	cr_assert_eq(dmutex_attr_setclient(&a, c), 0);
	cr_assert_eq(dmutex_init(m, name, &a), 0);
	for (int i = 0; i < n; i++) {
		cr_assert_eq(dmutex_lock(m), 0);
		cr_assert_eq(dmutex_unlock(m), 0);
	}
	dmutex_attr_destroy(&a);
}

Test(top, live_view_in_a_terminal)
{
	dmutex_client_t *c, *h;
	dmutex_t busy, calm, held;
	char cmd[1024], pid[64];
	struct want w = { 0 };

	cr_assert_eq(dmutex_client_open(&c, srv.url), 0);
	cycles(c, &busy, "busy", 6);
	cycles(c, &calm, "calm", 2);
	cr_assert_eq(dmutex_destroy(&busy), 0);
	cr_assert_eq(dmutex_destroy(&calm), 0);
	cr_assert_eq(dmutex_client_close(c), 0);     /* sends the counts */
	/* A lock held by us while top runs. */
	cr_assert_eq(dmutex_client_open(&h, srv.url), 0);
	cycles(h, &held, "held", 1);
	cr_assert_eq(dmutex_lock(&held), 0);

	snprintf(cmd, sizeof cmd, "DMUTEX_URL='%s' '%s' top --interval 0.2", srv.url,
			getenv("DMUTEX_BIN"));
	cr_assert_eq(tmux("new", (const char *const[]){ "new-session", "-d", "-s", "top",
			"-x", "150", "-y", "30", cmd, NULL }), 0, "tmux: %s", slurp("/dev/null"));

	w.a = "NAME";
	w.b = "CONTENDED";
	cr_assert(th_wait_until(shows, &w, 10000), "no header on the screen:\n%s", w.last);
	snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
	w.a = "held";
	w.b = pid;
	cr_assert(th_wait_until(shows, &w, 10000), "the holder is not shown:\n%s", w.last);
	w.a = "busy";
	w.b = " 6 ";
	cr_assert(th_wait_until(shows, &w, 10000), "busy's 6 acquisitions are not shown:\n%s", w.last);
	w.a = "q quits";
	w.b = NULL;
	cr_assert(shows(&w), "%s", w.last);

	/* It refreshes: the unlock shows without any key pressed. */
	cr_assert_eq(dmutex_unlock(&held), 0);
	w.a = "held ";
	w.b = "free";
	cr_assert(th_wait_until(shows, &w, 10000), "the unlock never showed:\n%s", w.last);

	/* q quits, and gives the terminal back. */
	cr_assert_eq(tmux("keys", (const char *const[]){ "send-keys", "-t", "top", "q", NULL }), 0);
	cr_assert(th_wait_until(session_gone, NULL, 10000), "q did not quit:\n%s", screen());
	free(w.last);
	cr_assert_eq(dmutex_destroy(&held), 0);
	cr_assert_eq(dmutex_client_close(h), 0);
}
