/*
 * Tests of the shared test harness (tests/lib/harness.[ch]) against real
 * redis-server processes.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* Each criterion test runs in its own worker process: these are per test. */
static struct th_redis srv;
static struct th_proxy *proxy;

static void srv_up(void)
{
	cr_assert_eq(th_redis_start(&srv, NULL), 0, "redis-server did not start");
}

static void srv_down(void)
{
	th_proxy_stop(proxy);
	proxy = NULL;
	th_redis_stop(&srv);
}

static int reply_is_status(redisReply *rep, const char *want)
{
	return rep && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, want) == 0;
}

static int ping_ok(redisContext *c)
{
	redisReply *rep = redisCommand(c, "PING");
	int ok = reply_is_status(rep, "PONG");
	if (rep)
		freeReplyObject(rep);
	return ok;
}

static int path_exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0;
}

/* ------------------------------------------------------------------ */
/* redis-server lifecycle                                              */
/* ------------------------------------------------------------------ */

/* ------------------------------------------------------------------ */
/* client URLs                                                         */
/* ------------------------------------------------------------------ */

Test(url, joins_with_question_mark_or_ampersand)
{
	char buf[256];
	int t = th_command_timeout_ms();
	char base[128], want[256];

	cr_assert_eq(th_url_with(buf, sizeof buf, "redis://h:1", "lease_ms=500"), 0);
	cr_assert_str_eq(buf, "redis://h:1?lease_ms=500");
	cr_assert_eq(th_url_with(buf, sizeof buf, "redis://h:1?db=2", "lease_ms=500"), 0);
	cr_assert_str_eq(buf, "redis://h:1?db=2&lease_ms=500");
	cr_assert_eq(th_url_with(buf, sizeof buf, "redis://h:1?db=2", NULL), 0);
	cr_assert_str_eq(buf, "redis://h:1?db=2");
	/* a list: on its last URL, whose query decides the separator */
	cr_assert_eq(th_url_with(buf, sizeof buf, "redis://a:1?db=2,redis://b:2", "x=1"), 0);
	cr_assert_str_eq(buf, "redis://a:1?db=2,redis://b:2?x=1");
	cr_assert_eq(th_url_with(buf, sizeof buf, "redis-sentinel://a:1,b:2/m", "x=1"), 0);
	cr_assert_str_eq(buf, "redis-sentinel://a:1,b:2/m?x=1");
	cr_assert_eq(th_url_with(buf, 10, "redis://h:1", "lease_ms=500"), -1);
	cr_assert_str_eq(buf, "");

	/* the harness's own command timeout gives way to the test's, wherever
	 * it is in the query; other values are the test's own and stay */
	snprintf(base, sizeof base, "redis://a:1?command_timeout_ms=%d,redis://b:2?command_timeout_ms=%d"
	         "&db=2,redis://c:3?db=2&command_timeout_ms=%d", t, t, t);
	cr_assert_eq(th_url_with(buf, sizeof buf, base, "command_timeout_ms=200"), 0);
	cr_assert_str_eq(buf, "redis://a:1,redis://b:2?db=2,redis://c:3?db=2&command_timeout_ms=200");
	snprintf(base, sizeof base, "redis://a:1?command_timeout_ms=%d1", t);
	cr_assert_eq(th_url_with(buf, sizeof buf, base, "command_timeout_ms=200"), 0);
	snprintf(want, sizeof want, "%s&command_timeout_ms=200", base);
	cr_assert_str_eq(buf, want);
	snprintf(base, sizeof base, "redis://a:1?command_timeout_ms=%d", t);
	cr_assert_eq(th_url_with(buf, sizeof buf, base, "lease_ms=500"), 0);
	snprintf(want, sizeof want, "%s&lease_ms=500", base);
	cr_assert_str_eq(buf, want);
}

Test(redis, start_ping_stop, .fini = srv_down, .timeout = 30)
{
	cr_assert_eq(th_redis_start(&srv, NULL), 0);
	cr_assert_gt(srv.pid, 0);
	cr_assert_gt(srv.port, 0);
	char url[64];
	snprintf(url, sizeof url, "redis://127.0.0.1:%d?command_timeout_ms=%d", srv.port,
	         th_command_timeout_ms());
	cr_assert_str_eq(srv.url, url);
	cr_assert(path_exists(srv.dir));
	cr_assert(path_exists(srv.sock));

	redisReply *rep = th_redis_cmd(&srv, "PING");
	cr_assert(reply_is_status(rep, "PONG"));
	freeReplyObject(rep);
	cr_assert_eq(th_redis_int(&srv, "INCRBY counter %d", 41), 41);
	cr_assert_eq(th_redis_int(&srv, "INCR counter"), 42);
	cr_assert_eq(th_redis_int(&srv, "GET counter"), 42);     /* numeric bulk string */
	cr_assert_eq(th_redis_int(&srv, "GET missing"), LLONG_MIN); /* nil */
	cr_assert_eq(th_redis_int(&srv, "NOSUCHCOMMAND"), LLONG_MIN); /* error */

	int port = srv.port;
	char dir[sizeof srv.dir];
	snprintf(dir, sizeof dir, "%s", srv.dir);
	pid_t pid = srv.pid;
	th_redis_stop(&srv);
	cr_assert_eq(srv.pid, 0);
	cr_assert(!th_port_is_open(port), "port %d still accepts connections after stop", port);
	cr_assert_null(th_tcp_connect(port, 500));
	cr_assert(!path_exists(dir), "temp dir %s not removed", dir);
	cr_assert_eq(th_proc_state(pid), -1, "server process still exists");
	th_redis_stop(&srv); /* idempotent */
}

Test(redis, config_applied, .init = srv_up, .fini = srv_down, .timeout = 30)
{
	redisReply *rep = th_redis_cmd(&srv, "CONFIG GET save");
	cr_assert(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2);
	cr_assert_str_eq(rep->element[1]->str, "");
	freeReplyObject(rep);
	rep = th_redis_cmd(&srv, "CONFIG GET appendonly");
	cr_assert(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2);
	cr_assert_str_eq(rep->element[1]->str, "no");
	freeReplyObject(rep);
	/* enable-debug-command local: DEBUG works from 127.0.0.1 */
	rep = th_redis_cmd(&srv, "DEBUG SLEEP 0");
	cr_assert(reply_is_status(rep, "OK"), "DEBUG: %s", rep ? rep->str : "no reply");
	freeReplyObject(rep);
}

Test(redis, unix_socket, .init = srv_up, .fini = srv_down, .timeout = 30)
{
	char want[sizeof srv.unix_url];
	snprintf(want, sizeof want, "unix://%s?command_timeout_ms=%d", srv.sock,
	         th_command_timeout_ms());
	cr_assert_str_eq(srv.unix_url, want);

	redisContext *c = redisConnectUnix(srv.sock);
	cr_assert(c && !c->err);
	cr_assert(ping_ok(c));
	redisFree(c);

	c = th_redis_connect_unix(&srv, NULL, NULL);
	cr_assert_not_null(c);
	cr_assert(ping_ok(c));
	redisFree(c);
}

Test(redis, requirepass, .fini = srv_down, .timeout = 30)
{
	cr_assert_eq(th_redis_start(&srv, "requirepass s3cret\n"), 0);
	redisReply *rep = th_redis_cmd(&srv, "PING");
	cr_assert(rep && rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "NOAUTH", 6) == 0);
	freeReplyObject(rep);

	cr_assert_null(th_redis_connect(&srv, NULL, "wrong"));
	redisContext *c = th_redis_connect(&srv, NULL, "s3cret");
	cr_assert_not_null(c);
	cr_assert(ping_ok(c));
	redisFree(c);

	c = th_redis_connect_unix(&srv, NULL, "s3cret");
	cr_assert_not_null(c);
	cr_assert(ping_ok(c));
	redisFree(c);

	rep = th_redis_cmd_as(&srv, NULL, "s3cret", 1000, "PING");
	cr_assert(reply_is_status(rep, "PONG"));
	freeReplyObject(rep);

	/* extra is kept for restart */
	cr_assert_str_eq(srv.extra, "requirepass s3cret\n");
	cr_assert_eq(th_redis_restart(&srv), 0);
	cr_assert_null(th_redis_connect(&srv, NULL, "wrong"));
	c = th_redis_connect(&srv, NULL, "s3cret");
	cr_assert_not_null(c);
	redisFree(c);
}

Test(redis, acl_user, .fini = srv_down, .timeout = 30)
{
	cr_assert_eq(th_redis_start(&srv, "user alice on >pw ~* +@all\n"), 0);
	cr_assert_null(th_redis_connect(&srv, "alice", "nope"));
	redisContext *c = th_redis_connect(&srv, "alice", "pw");
	cr_assert_not_null(c);
	redisReply *rep = redisCommand(c, "ACL WHOAMI");
	cr_assert(rep && rep->type == REDIS_REPLY_STRING);
	cr_assert_str_eq(rep->str, "alice");
	freeReplyObject(rep);
	redisFree(c);
}

Test(redis, bad_extra_config_fails_cleanly, .fini = srv_down, .timeout = 30)
{
	cr_assert_eq(th_redis_start(&srv, "no-such-directive 1\n"), -1);
	cr_assert_eq(srv.pid, 0);
	cr_assert_eq(srv.dir[0], '\0');
	th_redis_stop(&srv); /* safe */
}

Test(redis, pause_resume, .init = srv_up, .fini = srv_down, .timeout = 30)
{
	redisContext *c = th_tcp_connect(srv.port, 200);
	cr_assert_not_null(c);
	cr_assert(ping_ok(c));

	cr_assert_eq(th_redis_pause(&srv), 0);
	cr_assert_eq(th_proc_state(srv.pid), 'T');
	long long t0 = th_now_ms();
	redisReply *rep = redisCommand(c, "PING");
	long long dt = th_now_ms() - t0;
	cr_assert_null(rep, "a paused server answered");
	cr_assert_neq(c->err, 0);
	cr_assert_geq(dt, 150, "timed out too early (%lld ms)", dt);
	cr_assert_lt(dt, 3000, "timeout took %lld ms", dt);
	redisFree(c);

	cr_assert_eq(th_redis_resume(&srv), 0);
	cr_assert_neq(th_proc_state(srv.pid), 'T');
	c = th_tcp_connect(srv.port, 200);
	cr_assert_not_null(c);
	cr_assert(ping_ok(c));
	redisFree(c);
}

Test(redis, restart_keeps_port, .init = srv_up, .fini = srv_down, .timeout = 30)
{
	int port = srv.port;
	pid_t pid = srv.pid;
	char url[sizeof srv.url], dir[sizeof srv.dir];
	snprintf(url, sizeof url, "%s", srv.url);
	snprintf(dir, sizeof dir, "%s", srv.dir);
	redisReply *rep = th_redis_cmd(&srv, "SET k v");
	cr_assert(reply_is_status(rep, "OK"));
	freeReplyObject(rep);
	redisContext *held = th_tcp_connect(port, 1000); /* a client during the restart */
	cr_assert_not_null(held);

	cr_assert_eq(th_redis_restart(&srv), 0);
	cr_assert_eq(srv.port, port);
	cr_assert_neq(srv.pid, pid);
	cr_assert_str_eq(srv.url, url);
	cr_assert_str_eq(srv.dir, dir);
	cr_assert_eq(th_proc_state(pid), -1, "old server still exists");
	rep = th_redis_cmd(&srv, "PING");
	cr_assert(reply_is_status(rep, "PONG"));
	freeReplyObject(rep);
	rep = th_redis_cmd(&srv, "GET k"); /* no persistence: gone */
	cr_assert(rep && rep->type == REDIS_REPLY_NIL);
	freeReplyObject(rep);
	/* the old connection died with the old server */
	cr_assert_null(redisCommand(held, "PING"));
	redisFree(held);
}

Test(redis, restart_keeps_aof, .fini = srv_down, .timeout = 30)
{
	cr_assert_eq(th_redis_start(&srv, "appendonly yes\n"), 0);
	redisReply *rep = th_redis_cmd(&srv, "SET durable yes");
	cr_assert(reply_is_status(rep, "OK"));
	freeReplyObject(rep);
	cr_assert_eq(th_redis_restart(&srv), 0);
	rep = th_redis_cmd(&srv, "GET durable");
	cr_assert(rep && rep->type == REDIS_REPLY_STRING);
	cr_assert_str_eq(rep->str, "yes");
	freeReplyObject(rep);
}

Test(redis, kill_then_restart, .init = srv_up, .fini = srv_down, .timeout = 30)
{
	int port = srv.port;
	pid_t old = srv.pid;
	cr_assert_eq(th_redis_kill(&srv), 0);
	cr_assert_eq(srv.pid, 0);
	cr_assert_eq(th_proc_state(old), -1);
	cr_assert(!th_port_is_open(port));
	cr_assert(path_exists(srv.dir));
	cr_assert_eq(th_redis_kill(&srv), -1); /* not running */
	cr_assert_eq(th_redis_restart(&srv), 0);
	cr_assert_eq(srv.port, port);
	cr_assert(th_port_is_open(port));
}

/* the test kills (and reaps) the server itself, then restarts it */
Test(redis, external_kill_then_restart, .init = srv_up, .fini = srv_down, .timeout = 30)
{
	pid_t old = srv.pid;
	cr_assert_eq(kill(old, SIGKILL), 0);
	cr_assert_eq(th_wait_child(old, 5000), 128 + SIGKILL);
	cr_assert_eq(th_redis_restart(&srv), 0);
	cr_assert_neq(srv.pid, old);
	redisReply *rep = th_redis_cmd(&srv, "PING");
	cr_assert(reply_is_status(rep, "PONG"));
	freeReplyObject(rep);
}

Test(redis, restart_while_paused, .init = srv_up, .fini = srv_down, .timeout = 30)
{
	cr_assert_eq(th_redis_pause(&srv), 0);
	cr_assert_eq(th_redis_restart(&srv), 0);
	redisReply *rep = th_redis_cmd(&srv, "PING");
	cr_assert(reply_is_status(rep, "PONG"));
	freeReplyObject(rep);
}

Test(redis, stop_while_paused, .init = srv_up, .fini = srv_down, .timeout = 30)
{
	int port = srv.port;
	cr_assert_eq(th_redis_pause(&srv), 0);
	th_redis_stop(&srv);
	cr_assert(!th_port_is_open(port));
}

Test(redis, clients, .init = srv_up, .fini = srv_down, .timeout = 30)
{
	int base = th_redis_clients(&srv);
	cr_assert_eq(base, 1, "fresh server: only the probe connection, got %d", base);
	redisContext *c[3];
	for (int i = 0; i < 3; i++) {
		c[i] = th_redis_connect(&srv, NULL, NULL);
		cr_assert_not_null(c[i]);
	}
	cr_assert(th_redis_wait_clients(&srv, base + 3, 5000), "have %d", th_redis_clients(&srv));
	for (int i = 0; i < 3; i++)
		redisFree(c[i]);
	cr_assert(th_redis_wait_clients(&srv, base, 5000), "have %d", th_redis_clients(&srv));
}

Test(redis, two_servers_distinct, .init = srv_up, .fini = srv_down, .timeout = 30)
{
	struct th_redis b;
	cr_assert_eq(th_redis_start(&b, NULL), 0);
	cr_assert_neq(b.port, srv.port);
	cr_assert_str_neq(b.dir, srv.dir);
	th_redis_int(&srv, "SET where a");
	redisReply *rep = th_redis_cmd(&b, "GET where");
	int nil = rep && rep->type == REDIS_REPLY_NIL;
	freeReplyObject(rep);
	th_redis_stop(&b);
	cr_assert(nil);
}

/* a th_spawn child must not be able to clean up the parent's servers */
static int child_stop_all(void *arg)
{
	(void)arg;
	th_redis_stop_all();
	return 0;
}

Test(redis, child_does_not_own_parent_servers, .init = srv_up, .fini = srv_down, .timeout = 30)
{
	pid_t pid = th_spawn(child_stop_all, NULL);
	cr_assert_gt(pid, 0);
	cr_assert_eq(th_wait_child(pid, 10000), 0);
	cr_assert_neq(th_proc_state(srv.pid), -1);
	redisReply *rep = th_redis_cmd(&srv, "PING");
	cr_assert(reply_is_status(rep, "PONG"));
	freeReplyObject(rep);
	cr_assert(path_exists(srv.dir));
}

/* A child that starts its own server and reports pid + dir on a pipe. */
struct owner_arg {
	int fd[2];
	struct th_sync done;   /* parent -> child: go on */
	int die_hard;          /* 1: get SIGKILLed, 0: on `done`, stop_all and return */
};
struct owner_report { pid_t pid; char dir[256]; };

static int child_owner(void *arg)
{
	struct owner_arg *a = arg;
	struct th_redis mine;
	struct owner_report rep = { 0 };
	if (th_redis_start(&mine, NULL) == 0) {
		rep.pid = mine.pid;
		snprintf(rep.dir, sizeof rep.dir, "%s", mine.dir);
	}
	if (write(a->fd[1], &rep, sizeof rep) != (ssize_t)sizeof rep)
		return 2;
	if (rep.pid == 0)
		return 3;
	if (th_sync_wait(&a->done, 60000) != 0 || a->die_hard)
		return 4; /* die_hard: the parent SIGKILLs us before that */
	th_redis_stop_all(); /* what the atexit handler runs */
	return 0;
}

static int gone_or_zombie(void *arg)
{
	return th_proc_gone(*(pid_t *)arg);
}

static void run_owner(int die_hard, struct owner_report *rep, int *status)
{
	struct owner_arg a = { .die_hard = die_hard };
	cr_assert_eq(pipe(a.fd), 0);
	cr_assert_eq(th_sync_init(&a.done), 0);
	pid_t pid = th_spawn(child_owner, &a);
	cr_assert_gt(pid, 0);
	cr_assert_eq(read(a.fd[0], rep, sizeof *rep), (ssize_t)sizeof *rep);
	cr_assert_gt(rep->pid, 0, "child could not start its server");
	cr_assert_neq(th_proc_state(rep->pid), -1);
	if (die_hard)
		kill(pid, SIGKILL);
	else
		th_sync_post(&a.done);
	*status = th_wait_child(pid, 10000);
	close(a.fd[0]);
	close(a.fd[1]);
	th_sync_close(&a.done);
}

Test(redis, stop_all_cleans_own_servers, .timeout = 30)
{
	struct owner_report rep;
	int status;
	run_owner(0, &rep, &status);
	cr_assert_eq(status, 0);
	cr_assert(gone_or_zombie(&rep.pid));
	cr_assert(!path_exists(rep.dir), "dir %s left behind", rep.dir);
}

Test(redis, server_dies_with_killed_owner, .fini = srv_down, .timeout = 30)
{
	struct owner_report rep;
	int status;
	run_owner(1, &rep, &status);
	cr_assert_eq(status, 128 + SIGKILL);
	cr_assert(th_wait_until(gone_or_zombie, &rep.pid, 5000),
	          "server %d survived its owner", (int)rep.pid);
	/* no cleanup ran in the owner: its dir is swept by the next start
	 * (here, or already by a test running in parallel) */
	cr_assert_eq(th_redis_start(&srv, NULL), 0);
	cr_assert(!path_exists(rep.dir), "stale dir %s not swept", rep.dir);
}

/* ------------------------------------------------------------------ */
/* processes, time, sync                                               */
/* ------------------------------------------------------------------ */

static int child_return(void *arg)
{
	return *(int *)arg;
}

static int child_block(void *arg)
{
	struct th_sync *s = arg;
	if (s)
		th_sync_post(s);
	for (;;)
		pause();
	return 0;
}

static int child_raise_term(void *arg)
{
	(void)arg;
	raise(SIGTERM);
	return 0;
}

Test(proc, spawn_exit_codes, .timeout = 30)
{
	int codes[] = { 0, 7, 255 };
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
		pid_t pid = th_spawn(child_return, &codes[i]);
		cr_assert_gt(pid, 0);
		cr_assert_eq(th_wait_child(pid, 5000), codes[i]);
	}
	pid_t pid = th_spawn(child_raise_term, NULL);
	cr_assert_eq(th_wait_child(pid, 5000), 128 + SIGTERM);
}

Test(proc, killed_child, .timeout = 30)
{
	struct th_sync s;
	cr_assert_eq(th_sync_init(&s), 0);
	pid_t pid = th_spawn(child_block, &s);
	cr_assert_gt(pid, 0);
	cr_assert_eq(th_sync_wait(&s, 5000), 0);
	kill(pid, SIGKILL);
	cr_assert_eq(th_wait_child(pid, 5000), 128 + 9);
	th_sync_close(&s);
}

Test(proc, wait_child_timeout_kills, .timeout = 30)
{
	pid_t pid = th_spawn(child_block, NULL);
	long long t0 = th_now_ms();
	cr_assert_eq(th_wait_child(pid, 100), -1);
	cr_assert_geq(th_now_ms() - t0, 100);
	/* it was SIGKILLed and reaped */
	cr_assert_eq(waitpid(pid, NULL, WNOHANG), -1);
	cr_assert_eq(errno, ECHILD);
}

Test(proc, wait_stopped, .timeout = 30)
{
	struct th_sync s;
	cr_assert_eq(th_sync_init(&s), 0);
	pid_t pid = th_spawn(child_block, &s);
	cr_assert_eq(th_sync_wait(&s, 5000), 0);
	cr_assert_neq(th_proc_state(pid), 'T');
	kill(pid, SIGSTOP);
	cr_assert_eq(th_wait_stopped(pid), 0);
	cr_assert_eq(th_proc_state(pid), 'T');
	kill(pid, SIGCONT);
	kill(pid, SIGKILL);
	cr_assert_eq(th_wait_child(pid, 5000), 128 + SIGKILL);
	/* a process that is gone is never "stopped": fails at once */
	long long t0 = th_now_ms();
	cr_assert_eq(th_wait_stopped(pid), -1);
	cr_assert_lt(th_now_ms() - t0, 1000);
	th_sync_close(&s);
}

static int child_post(void *arg)
{
	th_sync_post(arg);
	return 0;
}

Test(sync, post_and_wait, .timeout = 30)
{
	struct th_sync s;
	cr_assert_eq(th_sync_init(&s), 0);
	pid_t pid = th_spawn(child_post, &s);
	cr_assert_eq(th_sync_wait(&s, 5000), 0);
	cr_assert_eq(th_wait_child(pid, 5000), 0);
	/* one post releases one wait: the next one times out */
	long long t0 = th_now_ms();
	cr_assert_eq(th_sync_wait(&s, 50), -1);
	cr_assert_geq(th_now_ms() - t0, 50);
	th_sync_close(&s);
	cr_assert_eq(s.fd[0], -1);
	cr_assert_eq(s.fd[1], -1);
}

static int count_to_five(void *arg)
{
	return ++*(int *)arg >= 5;
}

static int never(void *arg)
{
	(void)arg;
	return 0;
}

Test(time, wait_until, .timeout = 30)
{
	int n = 0;
	cr_assert_eq(th_wait_until(count_to_five, &n, 5000), 1);
	cr_assert_eq(n, 5);
	long long t0 = th_now_ms();
	cr_assert_eq(th_wait_until(never, NULL, 50), 0);
	long long dt = th_now_ms() - t0;
	cr_assert_geq(dt, 50);
	cr_assert_lt(dt, 1000);
}

/* ------------------------------------------------------------------ */
/* proxy                                                               */
/* ------------------------------------------------------------------ */

static int key_exists(const char *key)
{
	return th_redis_int(&srv, "EXISTS %s", key) == 1;
}

static int key_exists_cond(void *key)
{
	return key_exists(key);
}

Test(proxy, modes, .init = srv_up, .fini = srv_down, .timeout = 30)
{
	proxy = th_proxy_start(srv.port);
	cr_assert_not_null(proxy);
	int pport = th_proxy_port(proxy);
	cr_assert_gt(pport, 0);
	cr_assert_neq(pport, srv.port);

	/* PASS */
	redisContext *c = th_tcp_connect(pport, 2000);
	cr_assert_not_null(c);
	cr_assert(ping_ok(c));
	redisFree(c);

	/* DROP_REPLIES: the command reaches the server, the reply never comes */
	th_proxy_set_mode(proxy, TH_PROXY_DROP_REPLIES);
	cr_assert_eq(th_proxy_mode(proxy), TH_PROXY_DROP_REPLIES);
	c = th_tcp_connect(pport, 200);
	cr_assert_not_null(c);
	cr_assert_null(redisCommand(c, "SET dropped 1"));
	cr_assert_neq(c->err, 0);
	redisFree(c);
	cr_assert(th_wait_until(key_exists_cond, "dropped", 5000));

	/* BLACKHOLE: nothing reaches the server, nothing comes back */
	th_proxy_set_mode(proxy, TH_PROXY_BLACKHOLE);
	c = th_tcp_connect(pport, 200);
	cr_assert_not_null(c);
	cr_assert_null(redisCommand(c, "SET holed 1"));
	cr_assert_neq(c->err, 0);
	redisFree(c);
	cr_assert(!key_exists("holed"));

	/* back to PASS: a new connection works */
	th_proxy_set_mode(proxy, TH_PROXY_PASS);
	c = th_tcp_connect(pport, 2000);
	cr_assert_not_null(c);
	cr_assert(ping_ok(c));
	redisFree(c);

	th_proxy_stop(proxy);
	proxy = NULL;
	cr_assert(!th_port_is_open(pport));
}

static int proxy_has_conns(void *arg)
{
	return th_proxy_conns(proxy) == *(int *)arg;
}

Test(proxy, close_all, .init = srv_up, .fini = srv_down, .timeout = 30)
{
	proxy = th_proxy_start(srv.port);
	cr_assert_not_null(proxy);
	int base = th_redis_clients(&srv);
	redisContext *c1 = th_tcp_connect(th_proxy_port(proxy), 2000);
	redisContext *c2 = th_tcp_connect(th_proxy_port(proxy), 2000);
	cr_assert(c1 && c2);
	cr_assert(ping_ok(c1));
	cr_assert(ping_ok(c2));
	cr_assert_eq(th_proxy_conns(proxy), 2);
	cr_assert(th_redis_wait_clients(&srv, base + 2, 5000));

	long long t0 = th_now_ms();
	th_proxy_close_all(proxy);
	cr_assert_eq(th_proxy_conns(proxy), 0); /* synchronous */
	cr_assert_null(redisCommand(c1, "PING"));
	cr_assert_lt(th_now_ms() - t0, 1500, "EOF expected, not a timeout");
	redisFree(c1);
	redisFree(c2);
	/* the server side was closed too */
	cr_assert(th_redis_wait_clients(&srv, base, 5000));
	/* and the proxy still accepts */
	c1 = th_tcp_connect(th_proxy_port(proxy), 2000);
	cr_assert(ping_ok(c1));
	redisFree(c1);
	int zero = 0;
	cr_assert(th_wait_until(proxy_has_conns, &zero, 5000));
}

Test(proxy, large_values, .init = srv_up, .fini = srv_down, .timeout = 30)
{
	proxy = th_proxy_start(srv.port);
	cr_assert_not_null(proxy);
	size_t len = 3u << 20; /* several times the proxy buffer */
	char *big = malloc(len);
	cr_assert_not_null(big);
	for (size_t i = 0; i < len; i++)
		big[i] = (char)('a' + i % 26);
	redisContext *c = th_tcp_connect(th_proxy_port(proxy), 5000);
	cr_assert_not_null(c);
	redisReply *rep = redisCommand(c, "SET big %b", big, len);
	cr_assert(reply_is_status(rep, "OK"));
	freeReplyObject(rep);
	rep = redisCommand(c, "GET big");
	cr_assert(rep && rep->type == REDIS_REPLY_STRING && rep->len == len);
	cr_assert_eq(memcmp(rep->str, big, len), 0);
	freeReplyObject(rep);
	redisFree(c);
	free(big);
}

Test(proxy, target_down, .fini = srv_down, .timeout = 30)
{
	int dead = th_free_port();
	proxy = th_proxy_start(dead);
	cr_assert_not_null(proxy);
	redisContext *c = th_tcp_connect(th_proxy_port(proxy), 2000);
	cr_assert_not_null(c); /* the proxy accepts... */
	long long t0 = th_now_ms();
	cr_assert_null(redisCommand(c, "PING")); /* ...and hangs up */
	cr_assert_lt(th_now_ms() - t0, 1500, "EOF expected, not a timeout");
	redisFree(c);
	th_proxy_stop(proxy);
	proxy = NULL;
}

/* a forked child holding copies of the proxy's sockets must not keep
 * connections alive after th_proxy_close_all */
static int child_wait(void *arg)
{
	return th_sync_wait(arg, 20000) == 0 ? 0 : 1;
}

Test(proxy, close_all_with_forked_child, .init = srv_up, .fini = srv_down, .timeout = 30)
{
	proxy = th_proxy_start(srv.port);
	cr_assert_not_null(proxy);
	redisContext *c = th_tcp_connect(th_proxy_port(proxy), 2000);
	cr_assert(ping_ok(c));
	struct th_sync go;
	cr_assert_eq(th_sync_init(&go), 0);
	pid_t pid = th_spawn(child_wait, &go);
	cr_assert_gt(pid, 0);

	long long t0 = th_now_ms();
	th_proxy_close_all(proxy);
	cr_assert_null(redisCommand(c, "PING"));
	cr_assert_lt(th_now_ms() - t0, 1500, "EOF expected, not a timeout");
	redisFree(c);

	th_sync_post(&go);
	cr_assert_eq(th_wait_child(pid, 5000), 0);
	th_sync_close(&go);
}

Test(proxy, server_paused_then_resumed, .init = srv_up, .fini = srv_down, .timeout = 30)
{
	proxy = th_proxy_start(srv.port);
	cr_assert_not_null(proxy);
	cr_assert_eq(th_redis_pause(&srv), 0);
	redisContext *c = th_tcp_connect(th_proxy_port(proxy), 200);
	cr_assert_not_null(c);
	cr_assert_null(redisCommand(c, "PING"));
	redisFree(c);
	cr_assert_eq(th_redis_resume(&srv), 0);
	c = th_tcp_connect(th_proxy_port(proxy), 2000);
	cr_assert(ping_ok(c));
	redisFree(c);
}

Test(proxy, blackholed_connection_never_reaches_server, .init = srv_up, .fini = srv_down,
     .timeout = 30)
{
	proxy = th_proxy_start(srv.port);
	cr_assert_not_null(proxy);
	int base = th_redis_clients(&srv);
	th_proxy_set_mode(proxy, TH_PROXY_BLACKHOLE);
	redisContext *c = th_tcp_connect(th_proxy_port(proxy), 2000);
	cr_assert_not_null(c);
	int one = 1;
	cr_assert(th_wait_until(proxy_has_conns, &one, 5000));
	cr_assert_eq(th_redis_clients(&srv), base);

	/* the "network" heals: that connection is found dead, at once */
	th_proxy_set_mode(proxy, TH_PROXY_PASS);
	cr_assert_eq(th_proxy_conns(proxy), 0);
	long long t0 = th_now_ms();
	cr_assert_null(redisCommand(c, "PING"));
	cr_assert_lt(th_now_ms() - t0, 1500, "EOF expected, not a timeout");
	redisFree(c);
}

/* ------------------------------------------------------------------ */
/* Sentinel                                                            */
/* ------------------------------------------------------------------ */

static struct th_sentinel sen;

static void sen_down(void)
{
	th_sentinel_stop(&sen);
}

/* Every pid gone, every dir removed, every port closed. */
struct leftovers { pid_t pid[16]; char dir[16][256]; int port[16]; int n; };

static void remember(struct leftovers *l, const struct th_redis *r)
{
	if (r->dir[0] && l->n < 16) {
		l->pid[l->n] = r->pid;
		snprintf(l->dir[l->n], sizeof l->dir[0], "%s", r->dir);
		l->port[l->n] = r->port;
		l->n++;
	}
}

static void assert_nothing_left(const struct leftovers *l)
{
	for (int i = 0; i < l->n; i++) {
		if (l->pid[i] > 0)
			cr_assert_eq(th_proc_state(l->pid[i]), -1, "process %d left", (int)l->pid[i]);
		cr_assert(!path_exists(l->dir[i]), "dir %s left", l->dir[i]);
		cr_assert(!th_port_is_open(l->port[i]), "port %d still open", l->port[i]);
	}
}

static int role_is(struct th_sentinel *s, int i, const char *want)
{
	redisReply *r = th_sentinel_data_cmd(s, i, "ROLE");
	int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
	         r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, want) == 0;
	if (r)
		freeReplyObject(r);
	return ok;
}

struct follows {
	struct th_sentinel *s;
	int replica, master;
};

/* th_wait_until: data node replica is a replica of data node master. */
static int replica_follows(void *arg)
{
	struct follows *f = arg;
	char want[64];
	int ok;

	if (!role_is(f->s, f->replica, "slave"))
		return 0;
	redisReply *r = th_sentinel_data_cmd(f->s, f->replica, "INFO replication");
	snprintf(want, sizeof want, "master_port:%d\r\n", f->s->data[f->master].port);
	ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, want);
	if (r)
		freeReplyObject(r);
	return ok;
}

Test(sentinel, start_agree_failover_cleanup, .fini = sen_down, .timeout = 90)
{
	long long t0 = th_now_ms();
	cr_assert_eq(th_sentinel_start(&sen, NULL, 0), 0);
	long long t_start = th_now_ms() - t0;
	cr_assert_eq(sen.ndata, 2);
	cr_assert_eq(sen.master, 0);
	cr_assert_str_eq(sen.name, "mymaster");
	char url[256];
	snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/mymaster",
	         sen.sentinel[0].port, sen.sentinel[1].port, sen.sentinel[2].port);
	cr_assert_str_eq(sen.url, url);
	for (int i = 0; i < TH_SENTINELS; i++)
		cr_assert_eq(th_sentinel_get_master(&sen, i), 0, "sentinel %d", i);
	cr_assert(role_is(&sen, 0, "master"));
	cr_assert(role_is(&sen, 1, "slave"));
	/* the replica really replicates (WAIT counts acks of this connection's
	 * writes: one connection for both) */
	redisContext *c = th_redis_connect(&sen.data[0], NULL, NULL);
	cr_assert_not_null(c);
	redisReply *r = redisCommand(c, "SET before-failover 1");
	cr_assert(reply_is_status(r, "OK"));
	freeReplyObject(r);
	r = redisCommand(c, "WAIT 1 5000");
	cr_assert(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
	freeReplyObject(r);
	redisFree(c);

	struct leftovers left = { .n = 0 };
	for (int i = 0; i < sen.ndata; i++)
		remember(&left, &sen.data[i]);
	for (int i = 0; i < TH_SENTINELS; i++)
		remember(&left, &sen.sentinel[i]);

	t0 = th_now_ms();
	int m = th_sentinel_kill_master(&sen, 30000);
	long long t_failover = th_now_ms() - t0;
	cr_assert_eq(m, 1, "the replica was not promoted");
	cr_assert_eq(sen.master, 1);
	cr_assert_eq(sen.data[0].pid, 0);
	for (int i = 0; i < TH_SENTINELS; i++)
		cr_assert_eq(th_sentinel_get_master(&sen, i), 1, "sentinel %d", i);
	cr_assert(role_is(&sen, 1, "master"));
	r = th_sentinel_data_cmd(&sen, 1, "GET before-failover");
	cr_assert(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "1") == 0);
	freeReplyObject(r);
	r = th_sentinel_data_cmd(&sen, 1, "SET after-failover 1");
	cr_assert(reply_is_status(r, "OK"), "the new master takes writes");
	freeReplyObject(r);
	cr_assert_eq(th_sentinel_wait_agree(&sen, 10000), 1);
	fprintf(stderr, "sentinel: start %lld ms, failover %lld ms (down-after %d ms)\n", t_start,
	        t_failover, sen.down_after_ms);

	th_sentinel_stop(&sen);
	assert_nothing_left(&left);
	th_sentinel_stop(&sen); /* idempotent */
}

Test(sentinel, acl_users_two_replicas, .fini = sen_down, .timeout = 90)
{
	struct th_sentinel_opts o = {
		.master_name = "orders", .replicas = 2,
		.data_user = "app", .data_pass = "datapw",
		.sentinel_user = "watcher", .sentinel_pass = "sentpw",
	};
	cr_assert_eq(th_sentinel_start(&sen, &o, 0), 0);
	cr_assert_eq(sen.ndata, 3);
	cr_assert_eq(sen.master, 0);
	/* nobody gets in without credentials, on either side */
	redisReply *r = th_redis_cmd(&sen.data[0], "PING");
	cr_assert(r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0);
	freeReplyObject(r);
	r = th_redis_cmd(&sen.sentinel[0], "PING");
	cr_assert(r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0);
	freeReplyObject(r);
	r = th_redis_cmd_as(&sen.sentinel[1], "watcher", "sentpw", 0, "SENTINEL GET-MASTER-ADDR-BY-NAME orders");
	cr_assert(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
	cr_assert_eq(atoi(r->element[1]->str), sen.data[0].port);
	freeReplyObject(r);
	r = th_redis_cmd_as(&sen.data[2], "app", "datapw", 0, "ACL WHOAMI");
	cr_assert(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "app") == 0);
	freeReplyObject(r);

	long long t0 = th_now_ms();
	int m = th_sentinel_kill_master(&sen, 30000);
	long long t_failover = th_now_ms() - t0;
	cr_assert(m == 1 || m == 2, "promoted %d", m);
	/* settled: the other replica follows the new master */
	t0 = th_now_ms();
	/* Usually m; rarely the other replica: two sentinels elected in
	 * successive epochs promote one each, and the higher epoch wins. */
	int settled = th_sentinel_wait_agree(&sen, 20000);
	long long t_settle = th_now_ms() - t0;
	cr_assert(settled == 1 || settled == 2, "settled on %d", settled);
	if (settled != m) {
		fprintf(stderr, "sentinel: promoted %d, then settled on %d\n", m, settled);
		/* seen once under load, never reproduced: keep the evidence */
		for (int i = 0; i < TH_SENTINELS; i++) {
			char cmd[600];
			snprintf(cmd, sizeof cmd, "tail -n 30 %s/redis.log >&2", sen.sentinel[i].dir);
			if (system(cmd) != 0)
				fprintf(stderr, "(no log of sentinel %d)\n", i);
		}
	}
	m = settled;
	int other = m == 1 ? 2 : 1;
	cr_assert(role_is(&sen, m, "master"));
	/* The sentinels agree before they have reconfigured the other
	 * replica (at load 11 it was still a master, promoted in a lost
	 * epoch, when this was read): poll for it, with a deadline. */
	struct follows f = { .s = &sen, .replica = other, .master = m };
	cr_assert(th_wait_until(replica_follows, &f, 20000), "replica %d does not follow %d", other, m);
	fprintf(stderr, "sentinel (ACL, 2 replicas): failover %lld ms, settled %lld ms later\n",
	        t_failover, t_settle);
}

Test(sentinel, requirepass_one_sentinel_down, .fini = sen_down, .timeout = 90)
{
	struct th_sentinel_opts o = { .data_pass = "d", .sentinel_pass = "s" };
	cr_assert_eq(th_sentinel_start(&sen, &o, 0), 0);
	cr_assert_eq(sen.master, 0);
	redisReply *r = th_redis_cmd_as(&sen.sentinel[2], NULL, "s", 0, "SENTINEL MASTER mymaster");
	cr_assert(r && r->type == REDIS_REPLY_ARRAY);
	freeReplyObject(r);
	r = th_redis_cmd_as(&sen.data[1], NULL, "d", 0, "ROLE");
	cr_assert(r && r->type == REDIS_REPLY_ARRAY && strcmp(r->element[0]->str, "slave") == 0);
	freeReplyObject(r);
	/* one sentinel down: the other two still agree and fail over */
	th_redis_stop(&sen.sentinel[0]);
	cr_assert_eq(th_sentinel_wait_agree(&sen, 5000), 0);
	cr_assert_eq(th_sentinel_kill_master(&sen, 30000), 1);
	cr_assert_eq(th_sentinel_get_master(&sen, 2), 1);
	cr_assert_eq(th_sentinel_wait_agree(&sen, 10000), 1);
}

Test(sentinel, bad_options, .fini = sen_down, .timeout = 30)
{
	struct th_sentinel_opts o = { .replicas = 3 };
	cr_assert_eq(th_sentinel_start(&sen, &o, 0), -1);
	struct th_sentinel_opts o2 = { .data_user = "u" };
	cr_assert_eq(th_sentinel_start(&sen, &o2, 0), -1);
	struct th_sentinel_opts o3 = { .master_name = "has space" };
	cr_assert_eq(th_sentinel_start(&sen, &o3, 0), -1);
	th_sentinel_stop(&sen);
}

/* ------------------------------------------------------------------ */
/* Cluster                                                             */
/* ------------------------------------------------------------------ */

static struct th_cluster clu;

static void clu_down(void)
{
	th_cluster_stop(&clu);
}

static int count_masters(struct th_cluster *c)
{
	int n = 0;
	for (int i = 0; i < TH_CLUSTER_NODES; i++)
		n += th_cluster_master_of(c, i) == i;
	return n;
}

/* "PREFIX SLOT 127.0.0.1:PORT" */
static void assert_redirect(redisReply *r, const char *kind, int slot, int port)
{
	char want[64];
	snprintf(want, sizeof want, "%s %d 127.0.0.1:%d", kind, slot, port);
	cr_assert(r && r->type == REDIS_REPLY_ERROR, "expected -%s, got type %d", want, r ? r->type : -1);
	cr_assert_str_eq(r->str, want);
	freeReplyObject(r);
}

static void assert_str(redisReply *r, const char *want)
{
	cr_assert(r && r->type == REDIS_REPLY_STRING, "expected \"%s\", got type %d (%s)", want,
	          r ? r->type : -1, r && r->type == REDIS_REPLY_ERROR ? r->str : "");
	cr_assert_str_eq(r->str, want);
	freeReplyObject(r);
}

static void assert_ok(redisReply *r)
{
	cr_assert(reply_is_status(r, "OK"), "expected OK, got %s",
	          r && r->type == REDIS_REPLY_ERROR ? r->str : "something else");
	freeReplyObject(r);
}

static int other_master(struct th_cluster *c, int not)
{
	for (int i = 0; i < TH_CLUSTER_NODES; i++)
		if (i != not && th_cluster_master_of(c, i) == i)
			return i;
	return -1;
}

Test(cluster, create_lookup_cleanup, .fini = clu_down, .timeout = 120)
{
	long long t0 = th_now_ms();
	cr_assert_eq(th_cluster_start(&clu, NULL, 0), 0);
	long long t_start = th_now_ms() - t0;
	cr_assert_eq(strncmp(clu.url, "redis-cluster://127.0.0.1:", 26), 0);
	for (int i = 0; i < TH_CLUSTER_NODES; i++) {
		char part[32];
		snprintf(part, sizeof part, "127.0.0.1:%d", clu.node[i].port);
		cr_assert(strstr(clu.url, part), "%s lacks %s", clu.url, part);
		cr_assert_lt(clu.node[i].port, 65536 - 10000);
		cr_assert(th_port_is_open(clu.node[i].port + 10000), "bus port of node %d", i);
		cr_assert_eq(strlen(clu.id[i]), 40);
	}
	cr_assert_eq(count_masters(&clu), 3);
	for (int i = 0; i < TH_CLUSTER_NODES; i++) {
		int m = th_cluster_master_of(&clu, i);
		cr_assert_geq(m, 0);
		cr_assert_eq(th_cluster_master_of(&clu, m), m);
		if (m == i)
			cr_assert_geq(th_cluster_replica_of(&clu, i), 0, "master %d has no replica", i);
	}
	/* spec examples: CLUSTER KEYSLOT, the owner serves, others redirect */
	cr_assert_eq(th_cluster_keyslot(&clu, "foo", 3), 12182);
	cr_assert_eq(th_cluster_keyslot(&clu, "{user1000}.following", 20),
	             th_cluster_keyslot(&clu, "user1000", 8));
	int owner = th_cluster_slot_owner(&clu, 12182);
	cr_assert_geq(owner, 0);
	cr_assert_eq(th_cluster_master_of(&clu, owner), owner);
	assert_ok(th_cluster_cmd(&clu, owner, "SET foo bar"));
	int other = other_master(&clu, owner);
	assert_redirect(th_cluster_cmd(&clu, other, "GET foo"), "MOVED", 12182, clu.node[owner].port);
	/* every slot has exactly one of the three masters */
	int per[TH_CLUSTER_NODES] = { 0 };
	for (int s = 0; s < TH_CLUSTER_SLOTS; s += 97)
		per[th_cluster_slot_owner(&clu, s)]++;
	for (int i = 0; i < TH_CLUSTER_NODES; i++)
		cr_assert((per[i] > 0) == (th_cluster_master_of(&clu, i) == i));

	struct leftovers left = { .n = 0 };
	for (int i = 0; i < TH_CLUSTER_NODES; i++)
		remember(&left, &clu.node[i]);
	th_cluster_stop(&clu);
	assert_nothing_left(&left);
	for (int i = 0; i < left.n; i++)
		cr_assert(!th_port_is_open(left.port[i] + 10000), "bus port %d", left.port[i] + 10000);
	th_cluster_stop(&clu);
	fprintf(stderr, "cluster: start %lld ms\n", t_start);
}

/* Mid-migration: ASK for keys the source no longer (or never) had, MOVED
 * from the target without ASKING, local answers for keys not moved yet. */
Test(cluster, migration_ask_moved, .fini = clu_down, .timeout = 120)
{
	cr_assert_eq(th_cluster_start(&clu, NULL, 0), 0);
	int slot = th_cluster_keyslot(&clu, "{mig}a", 6);
	cr_assert_geq(slot, 0);
	int from = th_cluster_slot_owner(&clu, slot), to = other_master(&clu, from);
	int pf = clu.node[from].port, pt = clu.node[to].port;
	assert_ok(th_cluster_cmd(&clu, from, "SET {mig}b vb"));
	assert_ok(th_cluster_cmd(&clu, from, "SET {mig}c vc PX 600000"));

	struct th_migration m;
	cr_assert_eq(th_cluster_migrate_begin(&clu, slot, to, &m), 0);
	cr_assert_eq(m.from, from);
	cr_assert_eq(m.to, to);
	cr_assert_eq(th_cluster_slot_owner(&clu, slot), from, "still the source's until NODE");
	assert_redirect(th_cluster_cmd(&clu, from, "GET {mig}a"), "ASK", slot, pt);
	assert_str(th_cluster_cmd(&clu, from, "GET {mig}b"), "vb");
	assert_redirect(th_cluster_cmd(&clu, to, "GET {mig}a"), "MOVED", slot, pf);

	/* one key moves; which one GETKEYSINSLOT picks is the server's choice */
	cr_assert_eq(th_cluster_migrate_keys(&clu, &m, 1), 1);
	cr_assert_eq(m.moved, 1);
	cr_assert_eq(th_redis_int(&clu.node[from], "CLUSTER COUNTKEYSINSLOT %d", slot), 1);
	cr_assert_eq(th_redis_int(&clu.node[to], "CLUSTER COUNTKEYSINSLOT %d", slot), 1);
	const char *gone = th_redis_int(&clu.node[from], "EXISTS {mig}b") == 0 ? "{mig}b" : "{mig}c";
	assert_redirect(th_cluster_cmd(&clu, from, "GET %s", gone), "ASK", slot, pt);
	/* ASKING lets one command through on the target */
	redisContext *ctx = th_tcp_connect(pt, 2000);
	cr_assert_not_null(ctx);
	assert_ok(redisCommand(ctx, "ASKING"));
	assert_str(redisCommand(ctx, "GET %s", gone), gone[5] == 'b' ? "vb" : "vc");
	assert_redirect(redisCommand(ctx, "GET %s", gone), "MOVED", slot, pf);
	redisFree(ctx);

	long long t0 = th_now_ms();
	cr_assert_eq(th_cluster_migrate_end(&clu, &m, 20000), 0);
	long long t_end = th_now_ms() - t0;
	cr_assert_eq(m.moved, 2);
	cr_assert_eq(th_cluster_slot_owner(&clu, slot), to);
	assert_redirect(th_cluster_cmd(&clu, from, "GET {mig}b"), "MOVED", slot, pt);
	assert_str(th_cluster_cmd(&clu, to, "GET {mig}b"), "vb");
	long long ttl = th_redis_int(&clu.node[to], "PTTL {mig}c");
	cr_assert(ttl > 0 && ttl <= 600000, "TTL travelled: %lld", ttl);
	fprintf(stderr, "cluster: migration end %lld ms\n", t_end);
}

struct hook_log { struct th_cluster *c; int calls[3]; int ok; };

static int hook(void *arg, int phase, const struct th_migration *m)
{
	struct hook_log *h = arg;
	h->calls[phase]++;
	long long on_from = th_redis_int(&h->c->node[m->from], "CLUSTER COUNTKEYSINSLOT %d", m->slot);
	long long on_to = th_redis_int(&h->c->node[m->to], "CLUSTER COUNTKEYSINSLOT %d", m->slot);
	if (phase == TH_MIGRATE_STARTED)
		h->ok &= on_from == 25 && on_to == 0 && m->moved == 0;
	else
		h->ok &= on_from == 0 && on_to == 25 && m->moved == 25;
	return 0;
}

static int abort_hook(void *arg, int phase, const struct th_migration *m)
{
	(void)arg;
	(void)m;
	return phase == TH_MIGRATE_STARTED;
}

Test(cluster, migrate_slot_with_hook, .fini = clu_down, .timeout = 120)
{
	cr_assert_eq(th_cluster_start(&clu, NULL, 0), 0);
	int slot = th_cluster_keyslot(&clu, "{hook}", 6);
	int from = th_cluster_slot_owner(&clu, slot), to = other_master(&clu, from);
	for (int i = 0; i < 25; i++)
		assert_ok(th_cluster_cmd(&clu, from, "SET {hook}%d %d", i, i));
	struct hook_log h = { .c = &clu, .ok = 1 };
	cr_assert_eq(th_cluster_migrate_slot(&clu, slot, to, 7, hook, &h, 20000), 0);
	cr_assert_eq(h.calls[TH_MIGRATE_STARTED], 1);
	cr_assert_eq(h.calls[TH_MIGRATE_KEYS_MOVED], 1);
	cr_assert(h.ok, "the hook saw the wrong state");
	cr_assert_eq(th_cluster_slot_owner(&clu, slot), to);
	for (int i = 0; i < TH_CLUSTER_NODES; i++)   /* every node knows, replicas too */
		if (i != to && th_cluster_master_of(&clu, i) != to)
			assert_redirect(th_cluster_cmd(&clu, i, "GET {hook}3"), "MOVED", slot, clu.node[to].port);
	/* a refused target, an aborting hook */
	cr_assert_eq(th_cluster_migrate_slot(&clu, slot, to, 0, NULL, NULL, 5000), -1);
	cr_assert_eq(th_cluster_migrate_slot(&clu, slot, th_cluster_replica_of(&clu, to), 0, NULL,
	                                     NULL, 5000), -1);
	cr_assert_eq(th_cluster_migrate_slot(&clu, slot, from, 0, abort_hook, NULL, 5000), -1);
	cr_assert_eq(th_cluster_wait_ok(&clu, 500), -1, "mid-migration is not settled");
}

Test(cluster, failover_manual_then_kill, .fini = clu_down, .timeout = 120)
{
	cr_assert_eq(th_cluster_start(&clu, NULL, 0), 0);
	int m = th_cluster_slot_owner(&clu, 0);
	cr_assert_eq(th_cluster_keyslot(&clu, "{06S}", 5), 0);
	assert_ok(th_cluster_cmd(&clu, m, "SET {06S} before"));
	int r = th_cluster_replica_of(&clu, m);
	cr_assert_geq(r, 0);

	long long t0 = th_now_ms();
	cr_assert_eq(th_cluster_failover(&clu, m, TH_FAILOVER_MANUAL, 30000), r);
	long long t_manual = th_now_ms() - t0;
	cr_assert_eq(th_cluster_slot_owner(&clu, 0), r);
	cr_assert_eq(th_cluster_master_of(&clu, r), r);
	cr_assert_eq(th_cluster_master_of(&clu, m), r, "the old master follows the new one");
	assert_redirect(th_cluster_cmd(&clu, m, "GET {06S}"), "MOVED", 0, clu.node[r].port);

	t0 = th_now_ms();
	cr_assert_eq(th_cluster_failover(&clu, r, TH_FAILOVER_KILL, 30000), m);
	long long t_kill = th_now_ms() - t0;
	cr_assert_eq(clu.node[r].pid, 0);
	cr_assert_eq(th_cluster_slot_owner(&clu, 0), m);
	assert_ok(th_cluster_cmd(&clu, m, "SET {06S} after"));

	/* the killed node comes back as a replica of the one that replaced it */
	t0 = th_now_ms();
	cr_assert_eq(th_redis_restart(&clu.node[r]), 0);
	cr_assert_eq(th_cluster_wait_ok(&clu, 30000), 0);
	long long t_back = th_now_ms() - t0;
	cr_assert_eq(th_cluster_master_of(&clu, r), m);
	fprintf(stderr, "cluster: manual failover %lld ms, kill failover %lld ms (node timeout %d ms),"
	        " rejoin %lld ms\n", t_manual, t_kill, clu.node_timeout_ms, t_back);
}

Test(cluster, bad_options, .fini = clu_down, .timeout = 30)
{
	struct th_cluster_opts o = { .user = "u" };
	cr_assert_eq(th_cluster_start(&clu, &o, 0), -1);
	struct th_cluster_opts o2 = { .pass = "a b" };
	cr_assert_eq(th_cluster_start(&clu, &o2, 0), -1);
	th_cluster_stop(&clu);
}

/* The recipe for "a failover loses the last write": cut replication through
 * the proxy, write, kill the master; the promoted replica lacks the write,
 * while one written before the cut survives. */
Test(sentinel, failover_loses_unreplicated_write, .fini = sen_down, .timeout = 90)
{
	struct th_sentinel_opts o = { .replica_proxy = 1 };
	cr_assert_eq(th_sentinel_start(&sen, &o, 0), 0);
	cr_assert_not_null(sen.repl_proxy);
	redisReply *r = th_sentinel_data_cmd(&sen, 1, "INFO replication");
	char want[64];
	snprintf(want, sizeof want, "master_port:%d\r\n", th_proxy_port(sen.repl_proxy));
	cr_assert(r && r->type == REDIS_REPLY_STRING && strstr(r->str, want), "not through the proxy");
	freeReplyObject(r);
	/* WAIT counts acks of this connection's own writes: one connection */
	redisContext *c = th_redis_connect(&sen.data[0], NULL, NULL);
	cr_assert_not_null(c);
	assert_ok(redisCommand(c, "SET kept 1"));
	r = redisCommand(c, "WAIT 1 5000");
	cr_assert(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
	freeReplyObject(r);

	th_proxy_set_mode(sen.repl_proxy, TH_PROXY_BLACKHOLE);
	assert_ok(redisCommand(c, "SET lost 1"));
	r = redisCommand(c, "WAIT 1 300");
	cr_assert(r && r->type == REDIS_REPLY_INTEGER && r->integer == 0,
	          "the write reached the replica (WAIT: %lld)", r ? r->integer : -1);
	freeReplyObject(r);
	redisFree(c);
	cr_assert_eq(th_sentinel_get_master(&sen, 0), 0, "sentinels still content");

	cr_assert_eq(th_sentinel_kill_master(&sen, 30000), 1);
	r = th_sentinel_data_cmd(&sen, 1, "GET kept");
	cr_assert(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "1") == 0);
	freeReplyObject(r);
	r = th_sentinel_data_cmd(&sen, 1, "GET lost");
	cr_assert(r && r->type == REDIS_REPLY_NIL, "the unreplicated write survived");
	freeReplyObject(r);
}

/* The helpers can fail: with one sentinel of three left there is no
 * majority, no failover, and kill_master says so by its deadline. */
Test(sentinel, no_majority_no_failover, .fini = sen_down, .timeout = 60)
{
	cr_assert_eq(th_sentinel_start(&sen, NULL, 0), 0);
	th_redis_stop(&sen.sentinel[1]);
	th_redis_stop(&sen.sentinel[2]);
	long long t0 = th_now_ms();
	cr_assert_eq(th_sentinel_kill_master(&sen, 3000), -1);
	long long dt = th_now_ms() - t0;
	cr_assert(dt >= 3000 && dt < 6000, "returned after %lld ms", dt);
	cr_assert_eq(sen.master, -1);
	cr_assert_eq(th_sentinel_get_master(&sen, 0), 0, "the lone sentinel still names the dead master");
	cr_assert_eq(th_sentinel_wait_agree(&sen, 500), -1);
}

/* Credentials everywhere: redis-cli (REDISCLI_AUTH + --user), replication
 * (masteruser/masterauth), MIGRATE (AUTH2), the harness's own probes. */
Test(cluster, acl_user, .fini = clu_down, .timeout = 120)
{
	struct th_cluster_opts o = { .user = "app", .pass = "clupw" };
	cr_assert_eq(th_cluster_start(&clu, &o, 0), 0);
	redisReply *r = th_redis_cmd(&clu.node[0], "PING");
	cr_assert(r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0);
	freeReplyObject(r);
	r = th_cluster_cmd(&clu, 3, "ACL WHOAMI");
	cr_assert(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "app") == 0);
	freeReplyObject(r);
	int slot = th_cluster_keyslot(&clu, "{acl}", 5);
	int from = th_cluster_slot_owner(&clu, slot), to = other_master(&clu, from);
	assert_ok(th_cluster_cmd(&clu, from, "SET {acl}k v"));
	cr_assert_eq(th_cluster_migrate_slot(&clu, slot, to, 1, NULL, NULL, 20000), 0);
	assert_str(th_cluster_cmd(&clu, to, "GET {acl}k"), "v");
	int rep = th_cluster_replica_of(&clu, to);
	cr_assert_eq(th_cluster_failover(&clu, to, TH_FAILOVER_MANUAL, 30000), rep);
	assert_str(th_cluster_cmd(&clu, rep, "GET {acl}k"), "v");
}

/* th_spawn_exec: the child is this binary again, run from its entry with
 * the string argument; its return value is the exit status. */
static int
child_exec_code(const char *arg)
{
	return atoi(arg) + (getenv("TH_CHILD") ? 1 : 100);
}
TH_CHILD_ENTRY(child_exec_code, child_exec_code)

Test(proc, spawn_exec_runs_the_named_entry_with_its_argument, .timeout = 30)
{
	pid_t pid = th_spawn_exec("child_exec_code", "41");

	cr_assert_gt(pid, 0);
	cr_assert_eq(th_wait_child(pid, 10000), 42);
}
