/*
 * The docs/faults.md scenarios no other test file covers (the README's
 * "Torture, soak and fuzzing" maps every scenario to its test):
 *
 *  #4  an old unlock, retried after its holder acquired again, must not
 *      free the new hold (a token per acquisition);
 *  #12 a wall-clock jump of the client changes nothing (libfaketime on a
 *      child process only: it breaks Debian's redis-server).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dmutex.h"
#include "dmt.h"
#include "harness.h"

static struct th_redis srv;
static struct th_proxy *proxy;
static pid_t child;
static char tmpdir[256];

static void
up(void)
{
	cr_assert_eq(th_redis_start(&srv, NULL), 0, "redis-server did not start");
}

static void
down(void)
{
	dmt_reap(&child);
	th_proxy_stop(proxy);
	proxy = NULL;
	th_redis_stop(&srv);
	if (tmpdir[0]) {
		char p[300];
		snprintf(p, sizeof p, "%s/ts", tmpdir);
		unlink(p);
		rmdir(tmpdir);
	}
}

TestSuite(scenarios, .init = up, .fini = down, .timeout = 30);

static void
token_of(const char *name, char *out, size_t len)
{
	cr_assert(dmt_lock_field(&srv, name, "token", out, len), "no lock key for '%s'", name);
}

/* The script at path as Redis runs it: each line "-- @include NAME"
 * replaced by the file NAME beside it (src/backend/redis/scripts/
 * embed_lua.py), into out[len]. */
static void
read_script(const char *path, char *out, size_t len)
{
	char line[1024], inc[1024];
	size_t n = 0;
	FILE *f, *g;

	cr_assert_not_null(f = fopen(path, "r"), "%s", path);
	while (fgets(line, sizeof line, f)) {
		if (!strncmp(line, "-- @include ", 12)) {
			const char *slash = strrchr(path, '/');

			line[strcspn(line, "\n")] = '\0';
			snprintf(inc, sizeof inc, "%.*s%s", slash ? (int)(slash - path + 1) : 0, path, line + 12);
			cr_assert_not_null(g = fopen(inc, "r"), "%s", inc);
			n += fread(out + n, 1, len - 1 - n, g);
			fclose(g);
		} else {
			size_t k = strlen(line);

			cr_assert_lt(n + k, len, "%s: longer than %zu bytes", path, len);
			memcpy(out + n, line, k);
			n += k;
		}
	}
	fclose(f);
	cr_assert_lt(n, len - 1, "%s: longer than %zu bytes", path, len);
	out[n] = '\0';
}

/* docs/faults.md #4. */
Test(scenarios, old_unlock_retried_after_reacquire_keeps_the_new_hold)
{
	const char *name = "scen-token";
	char url[700], t1[64], t2[64], t_after[64], lk[600], mk[600], ch[600], src[32768];
	const char *path = getenv("RELEASE_LUA");
	dmutex_client_t *c;
	dmutex_t m;
	uint64_t f2, f_after;
	redisReply *r;
	int rc;

	cr_assert_not_null(path, "RELEASE_LUA (src/backend/redis/scripts/release.lua) not set");
	read_script(path, src, sizeof src);

	cr_assert_not_null(proxy = th_proxy_start(srv.port));
	/* async_release=0: an unlock that waits for its answer, and so can
	 * say EIO (Redlock's and fair mutexes' are always so). */
	dmt_url(url, sizeof url, NULL, th_proxy_port(proxy),
			"command_timeout_ms=100&connect_timeout_ms=100&async_release=0");
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	/* Releases are under test, and the key is read after the last
	 * unlock: no kept lease. */
	cr_assert_eq(dmt_init_mutex(&m, name, c, &(struct dmt_attr){ .lease_ms = 1500, .nocache = 1 }), 0);
	/* Scripts cached in Redis: the release sent next really runs there
	 * (a NOSCRIPT answer would be dropped, and never retried by EVAL). */
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_unlock(&m), 0);
	cr_assert_eq(dmutex_lock(&m), 0);
	token_of(name, t1, sizeof t1);

	/* The unlock runs in Redis but its reply is lost: EIO, and the
	 * library keeps retrying that release (token t1) in the background. */
	th_proxy_set_mode(proxy, TH_PROXY_DROP_REPLIES);
	rc = dmutex_unlock(&m);
	th_proxy_set_mode(proxy, TH_PROXY_PASS);
	cr_assert_eq(rc, EIO, "unlock with its reply dropped: %s", dmutex_strerror(rc));
	cr_assert_eq(dmt_lock_exists(&srv, name), 0, "the release never reached Redis: the test proves nothing");

	/* The same thread acquires again at once: a new token. */
	cr_assert_eq(dmutex_lock(&m), 0);
	cr_assert_eq(dmutex_fence(&m, &f2), 0);
	token_of(name, t2, sizeof t2);
	cr_assert_str_neq(t1, t2, "the second acquisition reused the first one's token");

	/* The old release is retried until the first hold's lease would have
	 * ended: let that time pass (it is what is under test). */
	dmt_pass_time_ms(1500 + 500);
	/* And once more, late, exactly as a delayed retry would arrive. */
	dmt_lock_key(lk, sizeof lk, name);
	dmt_meta_key(mk, sizeof mk, name);
	snprintf(ch, sizeof ch, "dmutex:wake:{%s}", name);
	r = th_redis_cmd(&srv, "EVAL %s 2 %s %s %s 0 %s", src, lk, mk, t1, ch);
	cr_assert_not_null(r);
	cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "release.lua answered type %d", r->type);
	cr_assert_eq(r->integer, 0, "a release with the old token freed the new hold");
	freeReplyObject(r);

	token_of(name, t_after, sizeof t_after);
	cr_assert_str_eq(t_after, t2, "the new hold's token changed");
	cr_assert_eq(dmutex_fence(&m, &f_after), 0, "the new hold was lost");
	cr_assert_eq(f_after, f2);
	rc = dmutex_unlock(&m);
	cr_assert_eq(rc, 0, "unlock of the new hold: %s", dmutex_strerror(rc));
	cr_assert_eq(dmt_lock_exists(&srv, name), 0);
	cr_assert_eq(dmutex_destroy(&m), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
}

/* docs/faults.md #12. */
static const char *
faketime_lib(void)
{
	static const char *const paths[] = {
		"/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
		"/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
		"/usr/lib/faketime/libfaketimeMT.so.1",
	};
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
		if (access(paths[i], R_OK) == 0)
			return paths[i];
	return NULL;
}

static int
read_byte(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char b;

	return poll(&p, 1, timeout_ms) == 1 && read(fd, &b, 1) == 1 ? 0 : -1;
}

Test(scenarios, wall_clock_jump_of_the_client_changes_nothing)
{
	const char *lib = faketime_lib(), *prog = getenv("CLOCKJUMP");
	char url[700], ts[300], rfd[16], gfd[16], pid_s[32], want[32];
	int ready[2], go[2], st;
	dmutex_client_t *c;
	dmutex_t held, mine;

	cr_assert_not_null(lib, "libfaketime is not installed (apt-get install libfaketime)");
	cr_assert_not_null(prog, "CLOCKJUMP not set");
	snprintf(tmpdir, sizeof tmpdir, "/tmp/scen-XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
	snprintf(ts, sizeof ts, "%s/ts", tmpdir);
	cr_assert_eq(pipe(ready), 0);
	cr_assert_eq(pipe(go), 0);
	dmt_url(url, sizeof url, NULL, srv.port, NULL);

	/* The child's timed waits are on a lock we hold. */
	cr_assert_eq(dmutex_client_open(&c, url), 0);
	cr_assert_eq(dmt_init_mutex(&held, "scen-jump-held", c, NULL), 0);
	cr_assert_eq(dmt_init_mutex(&mine, "scen-jump", c, NULL), 0);
	cr_assert_eq(dmutex_lock(&held), 0);

	snprintf(rfd, sizeof rfd, "%d", ready[1]);
	snprintf(gfd, sizeof gfd, "%d", go[0]);
	fflush(NULL);
	child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		const char *asan = getenv("ASAN_OPTIONS");
		char asan_opts[512];
		/* libfaketime comes before ASan's runtime: tell ASan that is fine. */
		snprintf(asan_opts, sizeof asan_opts, "%s%sverify_asan_link_order=0", asan ? asan : "",
				asan && *asan ? ":" : "");
		setenv("ASAN_OPTIONS", asan_opts, 1);
		setenv("LD_PRELOAD", lib, 1);
		setenv("FAKETIME_TIMESTAMP_FILE", ts, 1);
		setenv("FAKETIME_NO_CACHE", "1", 1);
		setenv("DONT_FAKE_MONOTONIC", "1", 1);
		execl(prog, prog, url, "scen-jump", "scen-jump-held", ts, rfd, gfd, (char *)NULL);
		_exit(97);
	}
	close(ready[1]);
	close(go[0]);
	cr_assert_eq(read_byte(ready[0], 15000), 0, "the child never held the lock through the jumps (exit %d)",
			th_wait_child(child, 1000));
	/* After an hour forward and two back, the child still holds it. */
	cr_assert_eq(dmutex_trylock(&mine), EBUSY);
	cr_assert(dmt_lock_field(&srv, "scen-jump", "pid", pid_s, sizeof pid_s));
	snprintf(want, sizeof want, "%d", (int)child);
	cr_assert_str_eq(pid_s, want);
	cr_assert_eq(write(go[1], "g", 1), 1);
	st = th_wait_child(child, 15000);
	child = 0;
	cr_assert_eq(st, 0, "clockjump failed its check %d (see its output)", st);
	cr_assert_eq(dmutex_unlock(&held), 0);
	cr_assert_eq(dmutex_destroy(&held), 0);
	cr_assert_eq(dmutex_destroy(&mine), 0);
	cr_assert_eq(dmutex_client_close(c), 0);
	close(ready[0]);
	close(go[1]);
}
