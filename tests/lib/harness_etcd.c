/*
 * Real etcd processes for the tests.  See harness_etcd.h for the contract.
 */
#include "harness_etcd.h"
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TE_ATTEMPTS 5
#define TE_REG_MAX 16
#define TE_HTTP_TIMEOUT_MS 5000
/* the largest answer read (GET /metrics is a few hundred KB) */
#define TE_REP_MAX (4 << 20)

/* ------------------------------------------------------------------ */
/* registry: what this process must stop at exit                       */
/* ------------------------------------------------------------------ */

struct te_reg {
	pid_t owner;
	char dir[256];
	pid_t pid[TH_ETCD_MAX];
};
static struct te_reg reg[TE_REG_MAX];
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

static void te_stop_all(void);
static void reg_init(void)
{
	atexit(te_stop_all);
}

/* Record e's dir and pids (add the entry if new). */
static void reg_sync(const struct th_etcd *e)
{
	pthread_once(&reg_once, reg_init);
	pthread_mutex_lock(&reg_mu);
	struct te_reg *free_slot = NULL, *slot = NULL;
	for (int i = 0; i < TE_REG_MAX; i++) {
		if (reg[i].owner == getpid() && strcmp(reg[i].dir, e->dir) == 0)
			slot = &reg[i];
		else if (!reg[i].owner && !free_slot)
			free_slot = &reg[i];
	}
	if (!slot && free_slot) {
		slot = free_slot;
		slot->owner = getpid();
		snprintf(slot->dir, sizeof slot->dir, "%s", e->dir);
	}
	if (slot)
		for (int i = 0; i < TH_ETCD_MAX; i++)
			slot->pid[i] = i < e->n ? e->m[i].pid : 0;
	pthread_mutex_unlock(&reg_mu);
}

static void reg_forget(const char *dir)
{
	pthread_mutex_lock(&reg_mu);
	for (int i = 0; i < TE_REG_MAX; i++)
		if (reg[i].owner == getpid() && strcmp(reg[i].dir, dir) == 0)
			memset(&reg[i], 0, sizeof reg[i]);
	pthread_mutex_unlock(&reg_mu);
}

static void kill_member(pid_t pid)
{
	if (pid <= 1)
		return;
	kill(pid, SIGCONT);
	kill(pid, SIGKILL);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
}

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	remove(path);
	return 0;
}

static void rm_dir(const char *dir)
{
	const char *base = strrchr(dir, '/');
	if (!dir[0] || !base || strncmp(base + 1, "th-etcd-", 8) != 0)
		return; /* never anything but our own temp dirs */
	nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void te_stop_all(void)
{
	pthread_mutex_lock(&reg_mu);
	for (int i = 0; i < TE_REG_MAX; i++) {
		if (reg[i].owner != getpid())
			continue;
		for (int k = 0; k < TH_ETCD_MAX; k++)
			kill_member(reg[i].pid[k]);
		rm_dir(reg[i].dir);
		memset(&reg[i], 0, sizeof reg[i]);
	}
	pthread_mutex_unlock(&reg_mu);
}

/* ------------------------------------------------------------------ */
/* processes                                                           */
/* ------------------------------------------------------------------ */

static const char *etcd_bin(void)
{
	const char *b = getenv("TH_ETCD_BIN");
	return b && b[0] ? b : "etcd";
}

int th_etcd_available(void)
{
	const char *argv[] = { etcd_bin(), "--version", NULL };
	return th_run(argv, NULL, NULL, 10000) == 0;
}

static const char *tmp_base(void)
{
	const char *t = getenv("TH_ETCD_TMP");
	if (t && t[0])
		return t;
	/* each member preallocates a 64 MB WAL segment: a container's small
	 * /dev/shm (64 MB by default under Docker) would not hold three */
	struct statvfs v;
	if (access("/dev/shm", W_OK) == 0 && statvfs("/dev/shm", &v) == 0 &&
	    (unsigned long long)v.f_bavail * v.f_frsize >= (1ULL << 30))
		return "/dev/shm";
	t = getenv("TMPDIR");
	return t && t[0] ? t : "/tmp";
}

/* --initial-cluster m0=http://127.0.0.1:Q0,... */
static void initial_cluster(const struct th_etcd *e, char *buf, size_t len)
{
	size_t off = 0;
	buf[0] = '\0';
	for (int i = 0; i < e->n && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%s=http://127.0.0.1:%d",
		                        i ? "," : "", e->m[i].name, e->m[i].peer_port);
}

/* The argv strings of member i, in st (one buffer per string). */
struct te_args {
	char data[320], client[64], peer[64], cluster[256], token[64], hb[16], el[16];
	const char *argv[32];
};

static void member_args(const struct th_etcd *e, int i, int hb, struct te_args *a)
{
	const struct th_etcd_member *m = &e->m[i];
	snprintf(a->data, sizeof a->data, "%s/%s", e->dir, m->name);
	snprintf(a->client, sizeof a->client, "http://127.0.0.1:%d", m->client_port);
	snprintf(a->peer, sizeof a->peer, "http://127.0.0.1:%d", m->peer_port);
	initial_cluster(e, a->cluster, sizeof a->cluster);
	snprintf(a->token, sizeof a->token, "th-%s", strrchr(e->dir, '-') + 1);
	snprintf(a->hb, sizeof a->hb, "%d", hb);
	snprintf(a->el, sizeof a->el, "%d", e->election_ms);
	const char *v[] = { etcd_bin(), "--name", m->name, "--data-dir", a->data,
		"--listen-client-urls", a->client, "--advertise-client-urls", a->client,
		"--listen-peer-urls", a->peer, "--initial-advertise-peer-urls", a->peer,
		"--initial-cluster", a->cluster, "--initial-cluster-token", a->token,
		"--initial-cluster-state", "new", "--heartbeat-interval", a->hb,
		"--election-timeout", a->el, "--log-level", "warn", NULL };
	memcpy(a->argv, v, sizeof v);
}

/* fork + exec member i, stderr to DIR/NAME.log (appended: a restart keeps
 * the earlier run's lines). */
static pid_t spawn_member(const struct th_etcd *e, int i, int hb)
{
	struct te_args a;
	member_args(e, i, hb, &a);
	char log[320];
	snprintf(log, sizeof log, "%s/%s.log", e->dir, e->m[i].name);
	return th_start(a.argv, NULL, log);
}

static void dump_log(const struct th_etcd *e, int i)
{
	char path[320], buf[2048];
	snprintf(path, sizeof path, "%s/%s.log", e->dir, e->m[i].name);
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	fseek(f, 0, SEEK_END);
	long size = ftell(f);
	fseek(f, size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0, SEEK_SET);
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = '\0';
	fclose(f);
	fprintf(stderr, "th_etcd: --- %s log tail ---\n%s\n", e->m[i].name, buf);
}

/* 1 if member i exited (reaped now: pid set to 0). */
static int member_exited(struct th_etcd *e, int i)
{
	int st;
	if (e->m[i].pid > 0 && waitpid(e->m[i].pid, &st, WNOHANG) == e->m[i].pid) {
		e->m[i].pid = 0;
		reg_sync(e);
		return 1;
	}
	return e->m[i].pid == 0;
}

/* ------------------------------------------------------------------ */
/* HTTP to a member                                                    */
/* ------------------------------------------------------------------ */

static int connect_port(int port, long long deadline)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
		return fd;
	if (errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	int left = (int)(deadline - th_now_ms());
	int err = 0;
	socklen_t el = sizeof err;
	if (left <= 0 || poll(&p, 1, left) != 1 ||
	    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err) {
		close(fd);
		return -1;
	}
	return fd;
}

static int io_all(int fd, char *buf, size_t len, int out, long long deadline)
{
	size_t done = 0;
	while (out ? done < len : done < len - 1) {
		struct pollfd p = { .fd = fd, .events = out ? POLLOUT : POLLIN };
		int left = (int)(deadline - th_now_ms());
		if (left <= 0 || poll(&p, 1, left) != 1)
			return -1;
		ssize_t n = out ? send(fd, buf + done, len - done, MSG_NOSIGNAL)
		                : recv(fd, buf + done, len - 1 - done, 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		done += (size_t)n;
	}
	if (!out)
		buf[done] = '\0';
	return (int)done;
}

/* An HTTP/1.1 chunked body, in place: the chunks joined. */
static void dechunk(char *body)
{
	char *in = body, *out = body;
	for (;;) {
		char *end;
		unsigned long n = strtoul(in, &end, 16);
		char *data = strstr(end, "\r\n");
		if (n == 0 || !data || strlen(data + 2) < n)
			break;
		memmove(out, data + 2, n);
		out += n;
		in = data + 2 + n;
		if (strncmp(in, "\r\n", 2) == 0)
			in += 2;
	}
	*out = '\0';
}

int th_etcd_http(const struct th_etcd *e, int i, const char *path, const char *body,
                 const char *auth, char *out, size_t outlen, int timeout_ms)
{
	long long deadline = th_now_ms() + (timeout_ms > 0 ? timeout_ms : TE_HTTP_TIMEOUT_MS);
	int fd = connect_port(e->m[i].client_port, deadline);
	if (fd < 0)
		return -1;
	size_t blen = body ? strlen(body) : 0;
	size_t rlen = 512 + blen + (auth ? strlen(auth) : 0);
	char *req = malloc(rlen), *rep = malloc(TE_REP_MAX);
	int status = -1;
	if (!req || !rep)
		goto out;
	int n = snprintf(req, rlen, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
	                 "Connection: close\r\n%s%s%sContent-Type: application/json\r\n"
	                 "Content-Length: %zu\r\n\r\n%s", body ? "POST" : "GET", path,
	                 e->m[i].client_port, auth ? "Authorization: " : "", auth ? auth : "",
	                 auth ? "\r\n" : "", blen, body ? body : "");
	if (io_all(fd, req, (size_t)n, 1, deadline) != n || io_all(fd, rep, TE_REP_MAX, 0, deadline) < 12)
		goto out;
	if (sscanf(rep, "HTTP/1.%*d %d", &status) != 1)
		status = -1;
	char *b = strstr(rep, "\r\n\r\n");
	char *te = strcasestr(rep, "transfer-encoding: chunked");
	if (b && te && te < b)
		dechunk(b + 4);
	if (out && outlen)
		snprintf(out, outlen, "%s", b ? b + 4 : "");
out:
	free(req);
	free(rep);
	close(fd);
	return status;
}

long long th_etcd_metric(const struct th_etcd *e, int i, const char *name, const char *label)
{
	size_t cap = TE_REP_MAX;
	char *rep = malloc(cap);
	long long sum = -1;
	if (!rep || th_etcd_http(e, i, "/metrics", NULL, NULL, rep, cap, 0) != 200)
		goto out;
	sum = 0;
	for (char *line = strtok(rep, "\n"); line; line = strtok(NULL, "\n")) {
		size_t n = strlen(name);
		if (strncmp(line, name, n) != 0 || (line[n] != '{' && line[n] != ' '))
			continue;
		if (label && !strstr(line, label))
			continue;
		char *sp = strrchr(line, ' ');
		if (sp)
			sum += (long long)strtod(sp + 1, NULL);
	}
out:
	free(rep);
	return sum;
}

int th_etcd_json_str(const char *json, const char *key, char *out, size_t outlen)
{
	char pat[80];
	snprintf(pat, sizeof pat, "\"%s\":", key);
	const char *p = json ? strstr(json, pat) : NULL;
	if (!p)
		return -1;
	p += strlen(pat);
	while (*p == ' ')
		p++;
	int quoted = *p == '"';
	p += quoted;
	size_t n = quoted ? strcspn(p, "\"") : strcspn(p, ",}] \n");
	if (n >= outlen)
		return -1;
	memcpy(out, p, n);
	out[n] = '\0';
	return 0;
}

/* ------------------------------------------------------------------ */
/* health and leader                                                   */
/* ------------------------------------------------------------------ */

static int member_up(const struct th_etcd *e, int i)
{
	return e->m[i].pid > 0 && th_proc_state(e->m[i].pid) != 'T' &&
	       th_proc_state(e->m[i].pid) != 'Z';
}

/* Member i's own id and the leader it names: 0, or -1. */
static int member_status(struct th_etcd *e, int i, char *leader, size_t len)
{
	char rep[4096];
	if (th_etcd_http(e, i, "/v3/maintenance/status", "{}", NULL, rep, sizeof rep, 2000) != 200)
		return -1;
	if (th_etcd_json_str(rep, "member_id", e->m[i].id, sizeof e->m[i].id) != 0 ||
	    th_etcd_json_str(rep, "leader", leader, len) != 0)
		return -1;
	return 0;
}

static int leader_index(struct th_etcd *e, int need_healthy, char *why, size_t wlen)
{
	char agreed[24] = "";
	int seen = 0;
	for (int i = 0; i < e->n; i++) {
		if (!member_up(e, i))
			continue;
		char rep[512], leader[24];
		if (need_healthy && (th_etcd_http(e, i, "/health", NULL, NULL, rep, sizeof rep, 2000) != 200 ||
		                     !strstr(rep, "\"health\":\"true\""))) {
			snprintf(why, wlen, "%s not healthy", e->m[i].name);
			return -1;
		}
		if (member_status(e, i, leader, sizeof leader) != 0 || strcmp(leader, "0") == 0) {
			snprintf(why, wlen, "%s names no leader", e->m[i].name);
			return -1;
		}
		if (seen++ && strcmp(leader, agreed) != 0) {
			snprintf(why, wlen, "members disagree on the leader");
			return -1;
		}
		snprintf(agreed, sizeof agreed, "%s", leader);
	}
	for (int i = 0; i < e->n; i++)
		if (member_up(e, i) && strcmp(e->m[i].id, agreed) == 0)
			return i;
	snprintf(why, wlen, "no running member is the leader %s", seen ? agreed : "(none up)");
	return -1;
}

int th_etcd_leader(struct th_etcd *e)
{
	char why[128];
	return leader_index(e, 0, why, sizeof why);
}

int th_etcd_wait_healthy(struct th_etcd *e, int timeout_ms)
{
	long long deadline = th_now_ms() + timeout_ms;
	char why[128] = "no attempt";
	for (;;) {
		int l = leader_index(e, 1, why, sizeof why);
		if (l >= 0)
			return l;
		if (th_now_ms() >= deadline)
			break;
		struct timespec ts = { 0, 20 * 1000000L };
		nanosleep(&ts, NULL);
	}
	fprintf(stderr, "th_etcd: not healthy after %d ms: %s\n", timeout_ms, why);
	return -1;
}

/* ------------------------------------------------------------------ */
/* start, stop, faults                                                 */
/* ------------------------------------------------------------------ */

static void set_urls(struct th_etcd *e)
{
	size_t a = 0, b = 0;
	a += (size_t)snprintf(e->url, sizeof e->url, "etcd://");
	for (int i = 0; i < e->n; i++) {
		a += (size_t)snprintf(e->url + a, sizeof e->url - a, "%s127.0.0.1:%d",
		                      i ? "," : "", e->m[i].client_port);
		b += (size_t)snprintf(e->endpoints + b, sizeof e->endpoints - b,
		                      "%shttp://127.0.0.1:%d", i ? "," : "", e->m[i].client_port);
	}
}

static int pick_ports(struct th_etcd *e)
{
	int used[2 * TH_ETCD_MAX], k = 0;
	for (int i = 0; i < e->n; i++) {
		for (int j = 0; j < 2; j++) {
			int p;
			int tries = 0;
			do {
				p = th_free_port();
				for (int u = 0; u < k && p > 0; u++)
					if (used[u] == p)
						p = 0;
			} while (p == 0 && ++tries < 20);
			if (p <= 0)
				return -1;
			used[k++] = p;
		}
		e->m[i].client_port = used[k - 2];
		e->m[i].peer_port = used[k - 1];
	}
	set_urls(e);
	return 0;
}

static int start_once(struct th_etcd *e, int hb, int timeout_ms)
{
	for (int i = 0; i < e->n; i++) {
		e->m[i].pid = spawn_member(e, i, hb);
		if (e->m[i].pid < 0) {
			e->m[i].pid = 0;
			return -1;
		}
		reg_sync(e);
	}
	long long deadline = th_now_ms() + timeout_ms;
	while (th_now_ms() < deadline) {
		for (int i = 0; i < e->n; i++)
			if (member_exited(e, i))
				return -2; /* most likely a port taken meanwhile: new ports */
		char why[128];
		if (leader_index(e, 1, why, sizeof why) >= 0)
			return 0;
		struct timespec ts = { 0, 20 * 1000000L };
		nanosleep(&ts, NULL);
	}
	return th_etcd_wait_healthy(e, 0) >= 0 ? 0 : -1;
}

static void kill_all_members(struct th_etcd *e)
{
	for (int i = 0; i < e->n; i++) {
		kill_member(e->m[i].pid);
		e->m[i].pid = 0;
	}
}

/* DIR/owner: the pid of the process that started the cluster. */
static void write_owner(const char *dir)
{
	char path[320];
	snprintf(path, sizeof path, "%s/owner", dir);
	FILE *f = fopen(path, "w");
	if (f) {
		fprintf(f, "%d\n", (int)getpid());
		fclose(f);
	}
}

/* Remove the th-etcd-* dirs under base whose owner is gone (a test
 * process SIGKILLed, e.g. by criterion's timeout: its members died with
 * it, PR_SET_PDEATHSIG, but their data, 64 MB of WAL each, would stay in
 * /dev/shm). */
static void sweep_stale(const char *base)
{
	DIR *d = opendir(base);
	struct dirent *de;
	if (!d)
		return;
	while ((de = readdir(d))) {
		char dir[300], path[320];
		int pid = 0;
		if (strncmp(de->d_name, "th-etcd-", 8) != 0)
			continue;
		snprintf(dir, sizeof dir, "%s/%s", base, de->d_name);
		snprintf(path, sizeof path, "%s/owner", dir);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;       /* being made right now, or not ours */
		if (fscanf(f, "%d", &pid) != 1)
			pid = 0;
		fclose(f);
		if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)
			rm_dir(dir);
	}
	closedir(d);
}

int th_etcd_start(struct th_etcd *e, const struct th_etcd_opts *o, int timeout_ms)
{
	int n = o && o->members ? o->members : 1;
	int hb = o && o->heartbeat_ms ? o->heartbeat_ms : 100;
	memset(e, 0, sizeof *e);
	if (n != 1 && n != 3)
		return -1;
	e->n = n;
	e->election_ms = o && o->election_ms ? o->election_ms : 1000;
	if (timeout_ms <= 0)
		timeout_ms = 30000 * th_slowdown();
	for (int i = 0; i < n; i++)
		memcpy(e->m[i].name, (char[]){ 'm', (char)('0' + i), '\0' }, 3);
	sweep_stale(tmp_base());
	snprintf(e->dir, sizeof e->dir, "%s/th-etcd-XXXXXX", tmp_base());
	if (!mkdtemp(e->dir)) {
		fprintf(stderr, "th_etcd: mkdtemp %s: %s\n", e->dir, strerror(errno));
		e->dir[0] = '\0';
		return -1;
	}
	write_owner(e->dir);
	int rc = -1;
	for (int attempt = 0; attempt < TE_ATTEMPTS; attempt++) {
		if (pick_ports(e) != 0)
			break;
		rc = start_once(e, hb, timeout_ms);
		if (rc == 0)
			return 0;
		for (int i = 0; i < n; i++)
			dump_log(e, i);
		kill_all_members(e);
		reg_sync(e);
		for (int i = 0; i < n; i++) { /* a fresh cluster: new data dirs */
			char d[320];
			snprintf(d, sizeof d, "%s/%s", e->dir, e->m[i].name);
			nftw(d, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
		}
		if (rc == -1)
			break;
	}
	fprintf(stderr, "th_etcd: could not start %d member(s)\n", n);
	th_etcd_stop(e);
	return -1;
}

void th_etcd_stop(struct th_etcd *e)
{
	if (!e || !e->dir[0])
		return;
	kill_all_members(e);
	rm_dir(e->dir);
	reg_forget(e->dir);
	e->dir[0] = '\0';
}

int th_etcd_kill(struct th_etcd *e, int i)
{
	if (i < 0 || i >= e->n || e->m[i].pid <= 0)
		return -1;
	kill_member(e->m[i].pid);
	e->m[i].pid = 0;
	reg_sync(e);
	return 0;
}

int th_etcd_restart(struct th_etcd *e, int i, int timeout_ms)
{
	if (i < 0 || i >= e->n || !e->dir[0])
		return -1;
	if (timeout_ms <= 0)
		timeout_ms = 30000 * th_slowdown();
	th_etcd_kill(e, i);
	/* the member's own heartbeat is not kept: 100 unless started otherwise */
	e->m[i].pid = spawn_member(e, i, 100);
	if (e->m[i].pid < 0) {
		e->m[i].pid = 0;
		return -1;
	}
	reg_sync(e);
	long long deadline = th_now_ms() + timeout_ms;
	char rep[512];
	while (th_now_ms() < deadline) {
		if (member_exited(e, i))
			break;
		if (th_etcd_http(e, i, "/health", NULL, NULL, rep, sizeof rep, 1000) > 0)
			return 0;
		struct timespec ts = { 0, 20 * 1000000L };
		nanosleep(&ts, NULL);
	}
	fprintf(stderr, "th_etcd: restart of %s failed\n", e->m[i].name);
	dump_log(e, i);
	return -1;
}

int th_etcd_pause(struct th_etcd *e, int i)
{
	if (i < 0 || i >= e->n || e->m[i].pid <= 0 || kill(e->m[i].pid, SIGSTOP) != 0)
		return -1;
	return th_wait_stopped(e->m[i].pid);
}

int th_etcd_resume(struct th_etcd *e, int i)
{
	if (i < 0 || i >= e->n || e->m[i].pid <= 0 || kill(e->m[i].pid, SIGCONT) != 0)
		return -1;
	long long deadline = th_now_ms() + 5000;
	while (th_now_ms() < deadline) {
		if (th_proc_state(e->m[i].pid) != 'T')
			return 0;
		struct timespec ts = { 0, 1000000L };
		nanosleep(&ts, NULL);
	}
	return -1;
}

int th_etcd_kill_leader(struct th_etcd *e, int *new_leader, int timeout_ms)
{
	int old = th_etcd_leader(e);
	if (old < 0 || th_etcd_kill(e, old) != 0)
		return -1;
	int l = th_etcd_wait_healthy(e, timeout_ms);
	if (new_leader)
		*new_leader = l;
	return l >= 0 ? old : -1;
}

static const char b64_tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* base64 of the n bytes at src into dst (4 * ((n + 2) / 3) + 1 bytes). */
static void b64_enc(const unsigned char *src, size_t n, char *dst)
{
	size_t o = 0;
	for (size_t j = 0; j < n; j += 3) {
		unsigned v = (unsigned)src[j] << 16 | (j + 1 < n ? src[j + 1] << 8 : 0) |
		             (j + 2 < n ? src[j + 2] : 0);
		dst[o++] = b64_tab[v >> 18 & 63];
		dst[o++] = b64_tab[v >> 12 & 63];
		dst[o++] = j + 1 < n ? b64_tab[v >> 6 & 63] : '=';
		dst[o++] = j + 2 < n ? b64_tab[v & 63] : '=';
	}
	dst[o] = '\0';
}

/* Decode base64 src into out (NUL-terminated); 0, or -1 if it does not
 * fit or is not base64. */
static int b64_dec(const char *src, char *out, size_t outlen)
{
	size_t o = 0;
	unsigned v = 0;
	int bits = 0;
	for (; *src && *src != '='; src++) {
		const char *at = strchr(b64_tab, *src);
		if (!at)
			return -1;
		v = v << 6 | (unsigned)(at - b64_tab);
		if ((bits += 6) >= 8) {
			bits -= 8;
			if (o + 1 >= outlen)
				return -1;
			out[o++] = (char)(v >> bits & 0xff);
		}
	}
	out[o] = '\0';
	return 0;
}

/* The range body for every key under prefix, with more (NULL: none)
 * added to the object: 0, or -1 if prefix is empty or too long. */
static int prefix_body(const char *prefix, const char *more, char *body, size_t len)
{
	/* base64 of prefix and of prefix with its last byte + 1 (range_end) */
	/* (a 512-byte name and its kind and prefix fit) */
	size_t n = strlen(prefix);
	if (n == 0 || n > 600)
		return -1;
	unsigned char end[601];
	memcpy(end, prefix, n);
	end[n - 1]++;
	char k[804], r[804];
	b64_enc((const unsigned char *)prefix, n, k);
	b64_enc(end, n, r);
	snprintf(body, len, "{\"key\":\"%s\",\"range_end\":\"%s\"%s%s}", k, r, more ? "," : "",
	         more ? more : "");
	return 0;
}

/* A request on every key under prefix (more added to its body) whose
 * answer's integer field (left out by the gateway when zero) is returned;
 * -1 on error. */
static long long prefix_int(const struct th_etcd *e, int i, const char *path, const char *prefix,
                            const char *more, const char *field)
{
	char body[1800], rep[4096], n[24];
	if (prefix_body(prefix, more, body, sizeof body))
		return -1;
	if (th_etcd_http(e, i, path, body, NULL, rep, sizeof rep, 0) != 200)
		return -1;
	if (th_etcd_json_str(rep, field, n, sizeof n) != 0)
		return 0; /* the gateway leaves zero values out */
	return atoll(n);
}

long long th_etcd_count_prefix(const struct th_etcd *e, int i, const char *prefix)
{
	return prefix_int(e, i, "/v3/kv/range", prefix, "\"count_only\":true", "count");
}

long long th_etcd_lease_ttl(const struct th_etcd *e, int i, long long lease)
{
	char body[64], rep[1024], ttl[24];
	snprintf(body, sizeof body, "{\"ID\":\"%lld\"}", lease);
	if (th_etcd_http(e, i, "/v3/lease/timetolive", body, NULL, rep, sizeof rep, 0) != 200)
		return -2;
	/* an expired lease answers TTL -1 */
	if (th_etcd_json_str(rep, "TTL", ttl, sizeof ttl))
		return -2;
	return atoll(ttl);
}

long long th_etcd_delete_prefix(const struct th_etcd *e, int i, const char *prefix)
{
	return prefix_int(e, i, "/v3/kv/deleterange", prefix, NULL, "deleted");
}

int th_etcd_first_kv(const struct th_etcd *e, int i, const char *prefix, char *key, size_t klen,
                     char *val, size_t vlen, long long *create_rev, long long *lease)
{
	char body[1800], rep[8192], k64[1200], v64[1200], rev[24];
	if (prefix_body(prefix, "\"limit\":1,\"sort_order\":\"ASCEND\",\"sort_target\":\"CREATE\"",
	                body, sizeof body))
		return -1;
	if (th_etcd_http(e, i, "/v3/kv/range", body, NULL, rep, sizeof rep, 0) != 200)
		return -1;
	/* "kvs":[{"key":...,"create_revision":...,"value":...}]: the kv's
	 * fields come before the header's "count"; none when no key. */
	const char *kv = strstr(rep, "\"kvs\":");
	if (!kv)
		return 0;
	if (th_etcd_json_str(kv, "key", k64, sizeof k64) || b64_dec(k64, key, klen) ||
	    th_etcd_json_str(kv, "create_revision", rev, sizeof rev))
		return -1;
	if (th_etcd_json_str(kv, "value", v64, sizeof v64))
		v64[0] = '\0'; /* an empty value is left out */
	if (b64_dec(v64, val, vlen))
		return -1;
	if (create_rev)
		*create_rev = atoll(rev);
	if (lease)
		*lease = th_etcd_json_str(kv, "lease", rev, sizeof rev) ? 0 : atoll(rev);
	return 1;
}

/* ------------------------------------------------------------------ */
/* etcdctl, auth                                                       */
/* ------------------------------------------------------------------ */

int th_etcdctl(const struct th_etcd *e, const char *const args[])
{
	const char *argv[32];
	const char *bin = getenv("TH_ETCDCTL_BIN");
	int k = 0;
	argv[k++] = bin && bin[0] ? bin : "etcdctl";
	argv[k++] = "--endpoints";
	argv[k++] = e->endpoints;
	for (int i = 0; args[i] && k < 31; i++)
		argv[k++] = args[i];
	argv[k] = NULL;
	char log[320];
	snprintf(log, sizeof log, "%s/etcdctl.log", e->dir);
	const char *env[] = { "ETCDCTL_API=3", NULL };
	return th_run(argv, env, log, 15000 * th_slowdown());
}

int th_etcd_enable_auth(struct th_etcd *e, const char *root_pw, const char *user,
                        const char *pw)
{
	char root[128], usr[128];
	snprintf(root, sizeof root, "root:%s", root_pw);
	const char *a1[] = { "user", "add", root, NULL };
	const char *a2[] = { "user", "grant-role", "root", "root", NULL };
	if (th_etcdctl(e, a1) != 0 || th_etcdctl(e, a2) != 0)
		return -1;
	if (user) {
		snprintf(usr, sizeof usr, "%s:%s", user, pw);
		const char *b1[] = { "user", "add", usr, NULL };
		const char *b2[] = { "role", "add", "th-rw", NULL };
		const char *b3[] = { "role", "grant-permission", "th-rw", "--prefix=true",
		                     "readwrite", "", NULL };
		const char *b4[] = { "user", "grant-role", user, "th-rw", NULL };
		if (th_etcdctl(e, b1) != 0 || th_etcdctl(e, b2) != 0 || th_etcdctl(e, b3) != 0 ||
		    th_etcdctl(e, b4) != 0)
			return -1;
	}
	const char *a3[] = { "auth", "enable", NULL };
	return th_etcdctl(e, a3) == 0 ? 0 : -1;
}
