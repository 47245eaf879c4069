/*
 * What Redis holds about one lock, in one round trip: the lock key and its
 * PTTL (present only while held, or the not-recoverable mark), the meta
 * hash (fencing counter, robust state), the waiting processes (queued in
 * the waiters' queue, or, clients of an older version, subscribed to the
 * wake channel), and the waiters registered on the condition variable of
 * the same name.
 *
 * The lock key of a fair mutex is a hash (key layout 2); any other's a
 * string (layout 3, src/backend/scripts/acquire.lua).  Both GET and HGETALL
 * are sent: the one that does not fit the key's type answers WRONGTYPE, so
 * the type costs no round trip of its own.
 */
#define NREPLIES 9
#define NSUMMARY 7      /* list and top: the waiters counted, not named */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>


#include "cli.h"

static long long
num(const char *s)
{
	char *end;
	long long v;

	if (!s || !*s)
		return -1;
	v = strtoll(s, &end, 10);
	return *end ? -1 : v;
}

static int
connection_failed(struct dmutex__conn *c)
{
	const char *why = dmutex__admin_conn_error(c);

	cli_err("backend failed: %s", *why ? why : "connection lost");
	return CLI_BACKEND;
}

static int
append(struct dmutex__conn *c, const char *prefix, const char *name, int detail)
{
	char lk[DMUTEX__ADMIN_KEY_MAX], mk[DMUTEX__ADMIN_KEY_MAX], ch[DMUTEX__ADMIN_KEY_MAX], ck[DMUTEX__ADMIN_KEY_MAX];
	char ik[DMUTEX__ADMIN_KEY_MAX], qk[DMUTEX__ADMIN_KEY_MAX];

	dmutex__admin_key(lk, prefix, "lock", name);
	dmutex__admin_key(mk, prefix, "meta", name);
	dmutex__admin_key(ch, prefix, "wake", name);
	dmutex__admin_key(ck, prefix, "cond", name);
	dmutex__admin_key(ik, prefix, "cinfo", name);
	dmutex__admin_key(qk, prefix, "wq", name);
	if (dmutex__conn_appendf(c, "GET %b", lk, strlen(lk)) ||
	    dmutex__conn_appendf(c, "HGETALL %b", lk, strlen(lk)) ||
	    dmutex__conn_appendf(c, "PTTL %b", lk, strlen(lk)) ||
	    dmutex__conn_appendf(c, "HGETALL %b", mk, strlen(mk)) ||
	    dmutex__conn_appendf(c, "PUBSUB NUMSUB %b", ch, strlen(ch)) ||
	    dmutex__conn_appendf(c, "ZCARD %b", ck, strlen(ck)) ||
	    dmutex__conn_appendf(c, "ZCARD %b", qk, strlen(qk)))
		return connection_failed(c);
	if (detail && (dmutex__conn_appendf(c, "ZRANGE %b 0 %d", ck, strlen(ck), CLI_COND_SHOWN - 1) ||
			dmutex__conn_appendf(c, "HGETALL %b", ik, strlen(ik))))
		return connection_failed(c);
	return 0;
}

int
cli_inspect_append(struct dmutex__conn *c, const char *prefix, const char *name)
{
	return append(c, prefix, name, 0);
}

/* A hash reply's field, or NULL. */
static const char *
field(const redisReply *r, const char *name)
{
	if (!r || r->type != REDIS_REPLY_ARRAY)
		return NULL;
	for (size_t i = 0; i + 1 < r->elements; i += 2)
		if (r->element[i]->type == REDIS_REPLY_STRING &&
		    !strcmp(r->element[i]->str, name) &&
		    r->element[i + 1]->type == REDIS_REPLY_STRING)
			return r->element[i + 1]->str;
	return NULL;
}

/* 1 alive, 0 gone, -1 cannot know: the pid means something here only when
 * the process ran on this boot of this machine, in our pid namespace. */
int
cli_pid_alive(const char *hostid, long long pid)
{
	char here[64];

	dmutex__hostid(here, sizeof here);
	if (!here[0] || !hostid[0] || strcmp(here, hostid) || pid <= 0)
		return -1;
	return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* The registered waiters (zset members, oldest first) with what each
 * recorded (cond_register.lua: "host pid tid since_ms hostid"). */
static void
cond_waiters(struct cli_lock *l, const redisReply *members, const redisReply *info)
{
	if (members->type != REDIS_REPLY_ARRAY)
		return;
	for (size_t i = 0; i < members->elements && l->ncond < CLI_COND_SHOWN; i++) {
		struct cli_cond_waiter *w = &l->cond[l->ncond];
		const char *s;
		char hostid[64] = "";
		if (members->element[i]->type != REDIS_REPLY_STRING)
			continue;
		memset(w, 0, sizeof *w);
		w->pid = w->tid = w->since_ms = -1;
		w->alive = -1;
		if ((s = field(info, members->element[i]->str)) &&
		    sscanf(s, "%63s %lld %lld %lld %63s", w->host, &w->pid, &w->tid, &w->since_ms,
				    hostid) >= 4)
			w->alive = cli_pid_alive(hostid, w->pid);
		l->ncond++;
	}
}

/* A string reply that says WRONGTYPE. */
static int
wrongtype(const redisReply *r)
{
	return r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "WRONGTYPE", 9);
}

/* The holder as a fair mutex's lock hash (key layout 2) records it. */
static void
holder_of_hash(struct cli_lock *l, const redisReply *lock)
{
	const char *s;

	snprintf(l->host, sizeof l->host, "%s", (s = field(lock, "host")) ? s : "");
	l->pid = num(field(lock, "pid"));
	l->tid = num(field(lock, "tid"));
	l->since_ms = num(field(lock, "since"));
	l->lease_ms = num(field(lock, "lease"));
	l->fence = num(field(lock, "fence"));
	l->acquired_after_death = num(field(lock, "died")) == 1;
	snprintf(l->hostid, sizeof l->hostid, "%s", (s = field(lock, "hostid")) ? s : "");
}

/* One field of a lock value into out: -1 if empty or too long for it (a
 * value dmutex did not write), else 0. */
static int
take(char *out, size_t cap, const char *f, size_t len)
{
	if (!len || len >= cap)
		return -1;
	memcpy(out, f, len);
	out[len] = '\0';
	return 0;
}

/* The holder from a layout-3 lock value, "3 token fence died flags lease
 * since pid tid hostid host" (single spaces, the host the rest): 0, or -1
 * with l->error set when the value is not one dmutex writes. */
static int
holder_of_string(struct cli_lock *l, const char *key, const char *val)
{
	enum { V, TOKEN, FENCE, DIED, FLAGS, LEASE, SINCE, PID, TID, HOSTID, NF };
	char v[8], fence[32], died[8], flags[16], lease[32], since[32], pid[32], tid[32];
	char hostid[64];
	const char *f[NF], *p = val;
	size_t len[NF];
	int n;

	/* The version first: another layout's value is said as such. */
	if (!take(v, sizeof v, val, strcspn(val, " ")) && strcmp(v, "3")) {
		snprintf(l->error, sizeof l->error, "%.80s: written by key layout version %.7s "
				"(this dmutex writes 3)", key, v);
		return -1;
	}
	for (n = 0; n < NF; n++) {
		const char *sp = strchr(p, ' ');
		if (!sp)
			break;
		f[n] = p;
		len[n] = (size_t)(sp - p);
		p = sp + 1;             /* after the last field: the host */
	}
	if (n < NF || len[V] != 1 || f[V][0] != '3' || !len[TOKEN] ||
	    take(fence, sizeof fence, f[FENCE], len[FENCE]) ||
	    take(died, sizeof died, f[DIED], len[DIED]) ||
	    take(flags, sizeof flags, f[FLAGS], len[FLAGS]) ||
	    take(lease, sizeof lease, f[LEASE], len[LEASE]) ||
	    take(since, sizeof since, f[SINCE], len[SINCE]) ||
	    take(pid, sizeof pid, f[PID], len[PID]) ||
	    take(tid, sizeof tid, f[TID], len[TID]) ||
	    take(hostid, sizeof hostid, f[HOSTID], len[HOSTID])) {
		snprintf(l->error, sizeof l->error, "%.80s: not a value dmutex writes", key);
		return -1;
	}
	snprintf(l->host, sizeof l->host, "%s", p);
	l->pid = num(pid);
	l->tid = num(tid);
	l->since_ms = num(since);
	l->lease_ms = num(lease);
	/* "-": no token asked for during this hold yet (fence.lua). */
	l->fence = num(fence);
	l->acquired_after_death = !strcmp(died, "1");
	/* c: the lease is kept for its process (lease_cache.lua); h: no
	 * hold, the lock reserved for the waiter a release just woke, for
	 * 100 ms at most (wake_queue.lua). */
	l->cached = strchr(flags, 'c') != NULL;
	l->reserved = strchr(flags, 'h') != NULL;
	snprintf(l->hostid, sizeof l->hostid, "%s", strcmp(hostid, "-") ? hostid : "");
	return 0;
}

static void
fill(struct cli_lock *l, const char *prefix, redisReply *const rep[NREPLIES])
{
	const redisReply *str = rep[0], *hash = rep[1], *pttl = rep[2], *meta = rep[3];
	const redisReply *subs = rep[4], *ncond = rep[5], *queued = rep[6], *members = rep[7];
	const redisReply *info = rep[8];
	const char *s;
	char key[DMUTEX__ADMIN_KEY_MAX];
	long long mv;

	/* Someone else's data under our key names: say so, do not guess.  (A
	 * refused PUBSUB, say by an ACL, only leaves the waiters unknown.)
	 * One of GET and HGETALL is refused for the key's type; both, for a
	 * type dmutex never writes. */
	dmutex__admin_key(key, prefix, "lock", l->name);
	for (int i = 0; i < 4; i++) {
		if (rep[i]->type != REDIS_REPLY_ERROR ||
		    (i == 0 && wrongtype(str) && !wrongtype(hash)) ||
		    (i == 1 && wrongtype(hash) && !wrongtype(str)))
			continue;
		if (i == 3)
			dmutex__admin_key(key, prefix, "meta", l->name);
		snprintf(l->error, sizeof l->error, "%.80s: %.160s", key, rep[i]->str);
		return;
	}
	if (str->type == REDIS_REPLY_STRING && !strcmp(str->str, "3 notrec")) {
		/* The not-recoverable mark (release.lua): no holder, no expiry. */
		l->notrec_mark = 1;
	} else if (str->type == REDIS_REPLY_STRING) {
		if (holder_of_string(l, key, str->str))
			return;
		l->held = !l->reserved;
	} else if (hash->type == REDIS_REPLY_ARRAY && hash->elements > 0) {
		holder_of_hash(l, hash);
		l->held = 1;
	}
	l->exists = l->held || l->reserved || l->notrec_mark ||
		(meta->type == REDIS_REPLY_ARRAY && meta->elements > 0);
	if (l->held) {
		l->alive = cli_pid_alive(l->hostid, l->pid);
		if (pttl->type == REDIS_REPLY_INTEGER && pttl->integer >= 0)
			l->pttl_ms = pttl->integer;
	}
	l->fence_counter = num(field(meta, "fence"));
	snprintf(l->state, sizeof l->state, "%s", (s = field(meta, "state")) ? s : "");
	l->robust_recorded = num(field(meta, "robust"));
	mv = num(field(meta, "v"));
	/* lease_cache.lua: the holder's process keeps the lease; Redis cannot
	 * tell whether one of its threads holds it now (that costs no round
	 * trip).  Key layout 2 said so in the meta state; without the lock
	 * key, "cached" is no owner that died. */
	l->cached = l->held && (l->cached || !strcmp(l->state, "cached"));
	/* The states of acquire.lua / release.lua: "held" with no lock key
	 * means the last holder's lease ran out without an unlock.  Key
	 * layout 3 keeps a state for robust holds only, and records no
	 * "robust"; layout 2 recorded it, 0 for a hold that was not robust
	 * (which has merely expired: nobody is told). */
	if (l->notrec_mark || !strcmp(l->state, "notrec"))
		l->robust = ROBUST_NOTREC;
	else if (!strcmp(l->state, "died") || (!strcmp(l->state, "held") && !l->held))
		l->robust = l->robust_recorded == 1 || (l->robust_recorded < 0 && mv >= 3) ?
			ROBUST_OWNER_DIED : ROBUST_EXPIRED;
	else
		l->robust = ROBUST_CONSISTENT;
	if (subs->type == REDIS_REPLY_ARRAY && subs->elements == 2 &&
	    subs->element[1]->type == REDIS_REPLY_INTEGER)
		l->waiters = subs->element[1]->integer;
	/* Queued (wake_queue.lua): one token per waiting process, a dead one
	 * until a release skips it. */
	if (l->waiters >= 0 && queued->type == REDIS_REPLY_INTEGER)
		l->waiters += queued->integer;
	if (ncond->type == REDIS_REPLY_INTEGER) {
		l->cond_waiters = ncond->integer;
		l->exists |= ncond->integer > 0;
	}
	if (members && info)
		cond_waiters(l, members, info);
}

static int
read_replies(struct dmutex__conn *c, const char *prefix, const char *name, struct cli_lock *l,
		int n)
{
	redisReply *rep[NREPLIES] = { NULL };
	int64_t deadline = dmutex__conn_deadline(c);   /* for all of them together */
	int status = 0;

	memset(l, 0, sizeof *l);
	l->pid = l->tid = l->since_ms = l->lease_ms = l->pttl_ms = -1;
	l->fence = l->fence_counter = l->waiters = -1;
	l->alive = l->robust_recorded = -1;
	l->cond_waiters = -1;
	if (!(l->name = strdup(name))) {
		cli_err("out of memory");
		status = CLI_INTERNAL;
	}
	/* Read them all even after a failure, to keep the pipeline in step. */
	for (int i = 0; i < n; i++) {
		void *r = NULL;
		if (dmutex__conn_get(c, &r, deadline)) {
			status = connection_failed(c);
			break;
		}
		rep[i] = r;
	}
	if (!status)
		fill(l, prefix, rep);
	for (int i = 0; i < NREPLIES; i++)
		if (rep[i])
			freeReplyObject(rep[i]);
	return status;
}

int
cli_inspect_read(struct dmutex__conn *c, const char *prefix, const char *name, struct cli_lock *l)
{
	return read_replies(c, prefix, name, l, NSUMMARY);
}

int
cli_inspect(struct dmutex__conn *c, const char *prefix, const char *name, struct cli_lock *l)
{
	int status = append(c, prefix, name, 1);

	if (status) {
		memset(l, 0, sizeof *l);
		return status;
	}
	return read_replies(c, prefix, name, l, NREPLIES);
}

void
cli_lock_free(struct cli_lock *l)
{
	free(l->name);
	l->name = NULL;
}
