/*
 * The checker: reads every history file of a run, rebuilds the holds, and
 * fails on what docs/faults.md says must never happen:
 *
 *  overlap     two holds overlapping in time where the older one (by token,
 *              else by grant) was not told it lost the lock (onlost, ENOLCK
 *              from its fence or unlock) in time: before its unlock
 *              returned on the synchronous paths, within the window of
 *              README "When the report comes" on the fast paths;
 *  token       a fencing token not strictly greater than that of every hold
 *              granted before this one was asked for (or one handed twice),
 *              or not above an overlapping older hold's without its holder
 *              being told;
 *  lock ENOLCK a lock call that returned ENOLCK (README "The fast paths"
 *              rule 1: a call that did not lock says "not acquired");
 *  stale       the resource accepted a write out of token order, a write
 *              nobody made, or refused a read or a write of a holder never
 *              told it lost the lock (a newer token had read or written
 *              during its hold);
 *  lost update the final value is not the number of accepted writes;
 *  stranded    a lock key without expiry, with more than a lease to live
 *              (a read-write lock's writer or share: its lease's end),
 *              still there after its unlock was confirmed (Redlock: one
 *              Redis's unlock confirms nothing, asynchronous), or
 *              outliving its holder's end by more than a lease (a kept
 *              lease: its process's last hold on it by more than 4/3 of
 *              a lease, README "Cached leases");
 *  hung        a worker thread without a record for longer than allowed
 *              (its own stops not counted), or one that did not stop;
 *  contract    a call returned something the contract does not allow here.
 *
 * A read-write lock's (--rwlock) read holds may overlap each other, never a
 * write hold; a reader that shares its process's read share (no I/O at its
 * unlock) is told by the process's onlost, within the fast paths' window.
 *
 * A hold is [lock returned, unlock called]; its end is the kill when its
 * process was killed holding it.  All times are CLOCK_MONOTONIC, one clock
 * for every process of the host.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "torture.h"

#define MAX_REPORTS 25
#define MAX_STOPS   1024

struct hold {
	int32_t pid;
	uint16_t thr;
	uint32_t seq;
	int64_t t_inv, t_ok, t_end, t_unlocked;
	uint64_t token;
	int has_token, lost, inner_lost, ended, unlock_rc, write_rc, write_inv, read_rc;
	int reader;             /* a read share of a read-write lock */
	int64_t report_t;       /* first ENOLCK of its fence or unlock, or its onlost; INT64_MAX none */
	size_t thread;          /* index in ctx.th */
	uint64_t write_token;
	int64_t write_t;
};

struct thread {
	int32_t pid;
	uint16_t thr;
	int64_t last_t;
	int cur;                /* hold index or -1 */
	int prev;               /* the last hold that ended, or -1 */
	int exited;
	int64_t pending_t;      /* lock asked for, no answer yet */
	size_t slot;            /* index in ctx.sl: its worker slot */
};

/* A worker's thread slot (pid, record id % TT_MAX_THREADS): its threads
 * one after another (churn) share one mutex, hence one onlost handler. */
struct slot {
	int32_t pid;
	uint16_t idx;
	int64_t *lost_t;        /* its onlost records' times, in order */
	size_t nlost, caplost;
};

struct procinfo {
	int32_t pid;
	int64_t killed_t;       /* 0: not killed */
	int64_t end_t;          /* exit or kill */
	int status, have_status;
	/* Room for a long soak's stops, each forced stop's retries
	 * included (nemesis.c, holder_stop). */
	int64_t stop_t[MAX_STOPS], cont_t[MAX_STOPS];
	int nstops;
};

struct span { int64_t a, b; };

struct ctx {
	struct tt_rec *r;
	size_t n, cap;
	struct hold *h;
	size_t nh, caph;
	struct thread *th;
	size_t nth, capth;
	struct procinfo *pr;
	size_t npr, cappr;
	struct slot *sl;
	size_t nsl, capsl;
	struct tt_summary *s;
	unsigned lease_ms, cmd_ms;
	int async_release;      /* the workers' unlocks do not wait for the answer */
	int lease_cache;        /* the workers keep leases between holds */
	int rwlock;             /* read-write locks: readers may overlap */
	int64_t window_ns;      /* the fast paths' report window (README "When the report comes") */
	struct span *faults;    /* every fault's [start, heal] */
	size_t nfaults, capfaults;
	int nodes;
	int64_t end_t;          /* N_END */
	int64_t hung_ns;
	int reports;
	const char *dir;
};

static void *
grow(void *p, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return p;
	size_t nc = *cap ? *cap * 2 : 1024;
	while (nc < need)
		nc *= 2;
	void *q = realloc(p, nc * size);
	if (!q) {
		fprintf(stderr, "torture check: out of memory\n");
		exit(2);
	}
	*cap = nc;
	return q;
}

static const char *
type_name(int t)
{
	static const char *names[] = { "?", "lock_inv", "lock", "consistent", "relock", "fence",
		"read", "write_inv", "write", "inner_unlock", "unlock_inv", "unlock", "lost", "exit",
		"fault", "heal", "spawn", "killed", "stopped", "continued", "exited", "sample", "end",
		"cwait_inv", "cwait" };
	return t > 0 && t <= R_CWAIT ? names[t] : "?";
}

static void
print_rec(FILE *f, const struct tt_rec *r, int64_t t0)
{
	fprintf(f, "%12.3f ms pid %6d thr %5d %-12s hold %-6u rc %-4d token %-8" PRIu64 " value %-8" PRId64,
			(double)(r->t - t0) / 1e6, r->pid, r->thr == TT_NEMESIS_THR ? -1 : r->thr,
			type_name(r->type), r->hold, r->rc, r->token, r->value);
	if (r->type == N_FAULT || r->type == N_HEAL)
		fprintf(f, " %s", r->kind < TT_NFAULTS ? tt_fault_names[r->kind] : "?");
	fputc('\n', f);
}

static int64_t
t0_of(const struct ctx *c)
{
	return c->n ? c->r[0].t : 0;
}

/* The records of one thread (or the nemesis's) around [from, to]. */
static void
excerpt(struct ctx *c, int32_t pid, uint16_t thr, int64_t from, int64_t to)
{
	for (size_t i = 0; i < c->n; i++) {
		const struct tt_rec *r = &c->r[i];
		if (r->t < from || r->t > to)
			continue;
		if ((r->pid == pid && (r->thr == thr || r->thr == TT_PROC_THR)) ||
		    (r->thr == TT_NEMESIS_THR && r->type != N_SAMPLE))
			print_rec(stderr, r, t0_of(c));
	}
}

static void
violation(struct ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
violation(struct ctx *c, const char *fmt, ...)
{
	va_list ap;

	c->s->violations++;
	if (c->reports++ >= MAX_REPORTS)
		return;
	fprintf(stderr, "VIOLATION: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void
hold_excerpt(struct ctx *c, const struct hold *h)
{
	if (c->reports > MAX_REPORTS)
		return;
	fprintf(stderr, "  history of pid %d thread %u around hold %u:\n", h->pid, h->thr, h->seq);
	excerpt(c, h->pid, h->thr, h->t_inv - 5000000, (h->ended ? h->t_end : h->t_ok) + 5000000);
}

/* ---- loading ---- */

static int
cmp_rec(const void *a, const void *b)
{
	const struct tt_rec *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return 0;
}

static int
load(struct ctx *c, const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d) {
		fprintf(stderr, "torture check: %s: %s\n", dir, strerror(errno));
		return -1;
	}
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);
		char path[1024];
		struct stat st;
		int fd;

		if (len < 6 || strcmp(e->d_name + len - 5, ".hist"))
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st)) {
			fprintf(stderr, "torture check: %s: %s\n", path, strerror(errno));
			closedir(d);
			return -1;
		}
		size_t k = (size_t)st.st_size / sizeof(struct tt_rec);
		c->r = grow(c->r, &c->cap, c->n + k, sizeof *c->r);
		ssize_t got = read(fd, c->r + c->n, k * sizeof(struct tt_rec));
		close(fd);
		if (got != (ssize_t)(k * sizeof(struct tt_rec))) {
			fprintf(stderr, "torture check: %s: short read\n", path);
			closedir(d);
			return -1;
		}
		c->n += k;
	}
	closedir(d);
	/* Merge: one global order of time; a thread's own records are in
	 * file order already and keep it (their times increase). */
	qsort(c->r, c->n, sizeof *c->r, cmp_rec);
	return 0;
}

static struct thread *
thread_of(struct ctx *c, int32_t pid, uint16_t thr)
{
	for (size_t i = c->nth; i-- > 0;)
		if (c->th[i].pid == pid && c->th[i].thr == thr)
			return &c->th[i];
	c->th = grow(c->th, &c->capth, c->nth + 1, sizeof *c->th);
	c->th[c->nth] = (struct thread){ .pid = pid, .thr = thr, .cur = -1, .prev = -1, .last_t = 0 };
	size_t k;
	for (k = 0; k < c->nsl; k++)
		if (c->sl[k].pid == pid && c->sl[k].idx == thr % TT_MAX_THREADS)
			break;
	if (k == c->nsl) {
		c->sl = grow(c->sl, &c->capsl, c->nsl + 1, sizeof *c->sl);
		c->sl[c->nsl++] = (struct slot){ .pid = pid, .idx = thr % TT_MAX_THREADS };
	}
	c->th[c->nth].slot = k;
	return &c->th[c->nth++];
}

static struct procinfo *
proc_of(struct ctx *c, int32_t pid)
{
	for (size_t i = 0; i < c->npr; i++)
		if (c->pr[i].pid == pid)
			return &c->pr[i];
	c->pr = grow(c->pr, &c->cappr, c->npr + 1, sizeof *c->pr);
	c->pr[c->npr] = (struct procinfo){ .pid = pid };
	return &c->pr[c->npr++];
}

static struct hold *
hold_find(struct ctx *c, int32_t pid, uint16_t thr, uint32_t seq)
{
	for (size_t i = c->nh; i-- > 0;)
		if (c->h[i].pid == pid && c->h[i].thr == thr && c->h[i].seq == seq)
			return &c->h[i];
	return NULL;
}

/* ---- pass 1: rebuild the holds ---- */

static void
nemesis_rec(struct ctx *c, const struct tt_rec *r)
{
	struct procinfo *p;

	switch (r->type) {
	case N_FAULT:
		if (r->kind < TT_NFAULTS)
			c->s->faults[r->kind]++;
		break;
	case N_KILLED:
		p = proc_of(c, (int32_t)r->token);
		p->killed_t = r->t;
		p->end_t = r->t;
		c->s->killed++;
		break;
	case N_EXITED:
		p = proc_of(c, (int32_t)r->token);
		p->status = r->rc;
		p->have_status = 1;
		if (!p->end_t)
			p->end_t = r->t;
		break;
	case N_STOPPED:
		p = proc_of(c, (int32_t)r->token);
		if (p->nstops < MAX_STOPS) {
			p->stop_t[p->nstops] = r->t;
			p->cont_t[p->nstops++] = INT64_MAX;
		}
		break;
	case N_CONTINUED:
		p = proc_of(c, (int32_t)r->token);
		if (p->nstops > 0)
			p->cont_t[p->nstops - 1] = r->t;
		break;
	case N_END:
		c->end_t = r->t;
		break;
	case N_SAMPLE:
		c->s->samples++;
		c->s->kept_samples += r->hold && r->kind == 1;
		break;
	}
}

/* A hold begins: a lock granted, or a condition wait that took the
 * mutex back (t->pending_t is when it was asked for). */
static void
begin_hold(struct ctx *c, struct thread *t, const struct tt_rec *r)
{
	c->h = grow(c->h, &c->caph, c->nh + 1, sizeof *c->h);
	c->h[c->nh] = (struct hold){ .pid = r->pid, .thr = r->thr, .seq = r->hold,
		.t_inv = t->pending_t, .t_ok = r->t, .unlock_rc = -1, .write_rc = -2,
		.report_t = INT64_MAX, .thread = (size_t)(t - c->th), .reader = r->type == R_LOCK && r->value == 1 };
	t->cur = (int)c->nh++;
	c->s->holds++;
	c->s->ownerdead += r->rc == EOWNERDEAD;
}

static void
worker_rec(struct ctx *c, const struct tt_rec *r)
{
	struct thread *t = thread_of(c, r->pid, r->thr);
	struct hold *h = t->cur >= 0 ? &c->h[t->cur] : NULL;

	if (r->type != R_LOST)
		c->s->ops++;
	switch (r->type) {
	case R_LOCK_INV:
		if (h)
			violation(c, "pid %d thread %u asked for the lock while holding it (hold %u)", r->pid,
					r->thr, h->seq);
		t->pending_t = r->t;
		t->cur = -1;
		break;
	case R_LOCK:
		if (r->rc == 0 || r->rc == EOWNERDEAD) {
			begin_hold(c, t, r);
		} else if (r->rc == EIO) {
			c->s->lock_eio++;
		} else if (r->rc == ETIMEDOUT && r->kind == OP_TIMED) {
			c->s->lock_timeout++;
		} else if (r->rc == EBUSY && r->kind == OP_TRY) {
			c->s->lock_busy++;
		} else if (r->rc == ENOLCK) {
			/* Rule 1 of README "The fast paths": a lock call that
			 * did not lock says "not acquired"; a loss found late is
			 * onlost's, or the lost hold's own unlock's or fence's.
			 * (The previous hold counts as told, so that the overlap
			 * check does not report the same loss twice.) */
			c->s->lock_enolck++;
			violation(c, "lock ENOLCK: pid %d thread %u: lock (op %d) returned ENOLCK: a lock call that did "
					"not lock must say so with an error meaning not acquired", r->pid, r->thr, r->kind);
			if (t->prev >= 0 && !c->h[t->prev].lost) {
				c->h[t->prev].lost = 1;
				if (r->t < c->h[t->prev].report_t)
					c->h[t->prev].report_t = r->t;
			}
		} else {
			violation(c, "pid %d thread %u: lock (op %d) returned %d (%s)", r->pid, r->thr, r->kind,
					r->rc, strerror(r->rc));
		}
		break;
	case R_RELOCK:
		/* A recursive read of a share known lost: refused, nothing
		 * changes (drwlock_rdlock(3)); the hold is told. */
		if (r->rc == ENOLCK && h && h->reader) {
			h->lost = h->inner_lost = 1;
			if (r->t < h->report_t)
				h->report_t = r->t;
			break;
		}
		/* fall through */
	case R_CONSISTENT:
		if (r->rc)
			violation(c, "pid %d thread %u hold %u: %s returned %d (%s)", r->pid, r->thr, r->hold,
					type_name(r->type), r->rc, strerror(r->rc));
		break;
	case R_FENCE:
		if (!h)
			break;
		if (r->rc == 0) {
			h->token = r->token;
			h->has_token = 1;
		} else if (r->rc == ENOLCK) {
			h->lost = 1;
			if (r->t < h->report_t)
				h->report_t = r->t;
		} else {
			violation(c, "pid %d thread %u hold %u: fence returned %d (%s)", r->pid, r->thr, r->hold,
					r->rc, strerror(r->rc));
		}
		break;
	case R_READ:
		if (h)
			h->read_rc = r->rc;
		break;
	case R_WRITE_INV:
		if (h) {
			h->write_inv = 1;
			h->write_token = r->token;
			h->write_t = r->t;
		}
		break;
	case R_WRITE:
		if (!h)
			break;
		h->write_rc = r->rc;
		if (r->rc == 1)
			c->s->writes_accepted++;
		else if (r->rc == 0)
			c->s->stale_rejected++;
		else
			c->s->unknown_writes++;
		break;
	case R_INNER_UNLOCK:
		if (!h)
			break;
		if (r->rc == ENOLCK) {
			h->lost = h->inner_lost = 1;
			if (r->t < h->report_t)
				h->report_t = r->t;
		} else if (r->rc)
			violation(c, "pid %d thread %u hold %u: inner unlock returned %d (%s)", r->pid, r->thr,
					r->hold, r->rc, strerror(r->rc));
		break;
	case R_UNLOCK_INV:
		if (h) {
			h->t_end = r->t;
			h->ended = 1;
		}
		break;
	case R_UNLOCK:
		if (!h)
			break;
		h->unlock_rc = r->rc;
		h->t_unlocked = r->t;
		if (r->rc == ENOLCK) {
			h->lost = 1;
			if (r->t < h->report_t)
				h->report_t = r->t;
		} else if (r->rc == EIO)
			c->s->unlock_eio++;
		else if (r->rc == EPERM && h->inner_lost)
			;       /* the inner unlock already forgot the lost hold */
		else if (r->rc)
			violation(c, "pid %d thread %u hold %u: unlock returned %d (%s)", r->pid, r->thr, r->hold,
					r->rc, strerror(r->rc));
		t->prev = t->cur;
		t->cur = -1;
		break;
	case R_CWAIT_INV:
		t->pending_t = r->t;
		break;
	case R_CWAIT:
		/* dcond_wait always returns holding the mutex (README "The fast
		 * paths" rule 1), on a new hold, but after EIO (nothing
		 * released: the same hold goes on) and ENOTRECOVERABLE (not
		 * held), and EPERM/EINVAL (never here).  Its ENOLCK tells the
		 * hold it gave up that it had been lost. */
		if (!h || r->rc == EIO)
			break;
		if (r->kind == 1) {
			/* ETIMEDOUT with the token unchanged: nothing released. */
			if (r->rc != ETIMEDOUT || !h->has_token || r->token != h->token)
				violation(c, "pid %d thread %u hold %u: a condition wait kept the hold (rc %d, token "
						"%" PRIu64 " after, %" PRIu64 " before)", r->pid, r->thr, h->seq, r->rc,
						r->token, h->token);
			break;
		}
		if (r->rc != 0 && r->rc != ETIMEDOUT && r->rc != EOWNERDEAD && r->rc != ENOLCK &&
		    r->rc != ENOTRECOVERABLE) {
			violation(c, "pid %d thread %u hold %u: dcond_wait returned %d (%s)", r->pid, r->thr, h->seq,
					r->rc, strerror(r->rc));
			break;
		}
		h->t_end = t->pending_t;
		h->ended = 1;
		h->t_unlocked = r->t;
		h->unlock_rc = r->rc == ENOLCK ? ENOLCK : 0;
		if (r->rc == ENOLCK) {
			h->lost = 1;
			if (r->t < h->report_t)
				h->report_t = r->t;
		}
		t->prev = t->cur;
		t->cur = -1;
		if (r->rc == ENOTRECOVERABLE)
			break;
		begin_hold(c, t, r);
		c->s->cond_waits++;
		break;
	case R_EXIT:
		t->exited = 1;
		/* kind 1: the thread ended holding the lock (churn); the
		 * library ends the hold with it (docs/faults.md #21). */
		if (h && r->kind == 1) {
			h->t_end = r->t;
			h->ended = 1;
			c->s->ended_holding++;
		}
		t->cur = -1;
		break;
	}
	if (r->type != R_LOST)
		t->last_t = r->t;
}

/* ---- pass 2: the checks ---- */

static int
cmp_ok(const void *a, const void *b)
{
	const struct hold *const *x = a, *const *y = b;

	return (*x)->t_ok < (*y)->t_ok ? -1 : (*x)->t_ok > (*y)->t_ok;
}

static int
cmp_inv(const void *a, const void *b)
{
	const struct hold *const *x = a, *const *y = b;

	return (*x)->t_inv < (*y)->t_inv ? -1 : (*x)->t_inv > (*y)->t_inv;
}

static int
cmp_token(const void *a, const void *b)
{
	const struct hold *const *x = a, *const *y = b;

	return (*x)->token < (*y)->token ? -1 : (*x)->token > (*y)->token;
}

static int
cmp_wtoken(const void *a, const void *b)
{
	const struct hold *const *x = a, *const *y = b;

	return (*x)->write_token < (*y)->write_token ? -1 : (*x)->write_token > (*y)->write_token;
}

/* Time process p spent stopped within [a, b]. */
static int64_t stopped_within(const struct procinfo *p, int64_t a, int64_t b);

/* Time within [a, b] that a fault was on (one at a time: no double count
 * but for overlapping spans, which the nemesis does not make). */
static int64_t
faults_within(const struct ctx *c, int64_t a, int64_t b)
{
	int64_t sum = 0;

	for (size_t i = 0; i < c->nfaults; i++) {
		int64_t s = c->faults[i].a > a ? c->faults[i].a : a;
		int64_t e = c->faults[i].b < b ? c->faults[i].b : b;
		if (e > s)
			sum += e - s;
	}
	return sum;
}

/* When hold h was told it lost the lock: its own ENOLCK, or an onlost of
 * its handler after it was granted.  One onlost tells every hold of its
 * handler granted since Redis last confirmed a kept lease (README "The
 * fast paths" rule 2), and the worker records it under the last hold
 * granted, maybe to the thread that took the slot after the hold's thread
 * ended: an onlost of the slot counts for its earlier holds too.
 * INT64_MAX: never. */
static int64_t
told_at(const struct ctx *c, const struct hold *h)
{
	const struct slot *t = &c->sl[c->th[h->thread].slot];
	size_t lo = 0, hi = t->nlost;
	int64_t at = h->report_t;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (t->lost_t[mid] < h->t_ok)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < t->nlost && t->lost_t[lo] < at)
		at = t->lost_t[lo];
	return at;
}

/* By when hold h must have been told, once its key was taken by a hold
 * granted at taken_t (README "When the report comes").  The synchronous
 * paths: before its unlock returned.  The fast paths: within the window
 * after its unlock or the taking, whichever is later, stretched by the
 * faults on meanwhile (an answer held up in a stopped server) and by its
 * own process's stops.  A holder killed before its deadline could not be
 * told: INT64_MAX, nothing required. */
static int64_t
deadline_of(const struct ctx *c, const struct hold *h, int64_t taken_t)
{
	const struct procinfo *p = NULL;
	int64_t end = h->unlock_rc >= 0 ? h->t_unlocked : h->t_end, d;

	for (size_t i = 0; i < c->npr; i++)
		if (c->pr[i].pid == h->pid)
			p = &c->pr[i];
	/* A reader that was not its process's last unlocks with no I/O: like
	 * the fast paths, it is told by onlost within the window. */
	if (!c->async_release && !c->lease_cache && h->unlock_rc >= 0 && !h->reader)
		return h->t_unlocked;
	d = (end > taken_t ? end : taken_t) + c->window_ns;
	for (int k = 0; k < 3; k++) {
		int64_t base = end > taken_t ? end : taken_t;
		d = base + c->window_ns + faults_within(c, base, d) + stopped_within(p, base, d);
	}
	if (p && p->killed_t && p->killed_t < d)
		return INT64_MAX;
	return d;
}

static void
check_overlap(struct ctx *c)
{
	struct hold **v = malloc((c->nh + 1) * sizeof *v), **act = malloc((c->nh + 1) * sizeof *act);
	size_t k = 0, na = 0;

	for (size_t i = 0; i < c->nh; i++)
		v[k++] = &c->h[i];
	qsort(v, k, sizeof *v, cmp_ok);
	for (size_t i = 0; i < k; i++) {
		struct hold *y = v[i];
		size_t keep = 0;
		for (size_t j = 0; j < na; j++) {
			struct hold *x = act[j], *old, *new;
			int64_t told, due;
			if (x->t_end <= y->t_ok)
				continue;       /* ended before y: no longer active */
			act[keep++] = x;
			if (x->reader && y->reader)
				continue;       /* readers share */
			/* The older of the two in Redis: the smaller token; a
			 * hold without one (its fence failed) by its grant. */
			int swapped = x->has_token && y->has_token && y->token < x->token;
			old = swapped ? y : x;
			new = swapped ? x : y;
			told = told_at(c, old);
			due = deadline_of(c, old, y->t_ok);
			/* Without both tokens the order in Redis is a guess: either
			 * one told will do. */
			if (told > due && !(x->has_token && y->has_token) &&
			    told_at(c, new) <= deadline_of(c, new, old->t_ok)) {
				old = new;
				told = told_at(c, old);
				due = deadline_of(c, old, x->t_ok);
			}
			if (told <= due) {
				if (told > (old->unlock_rc >= 0 ? old->t_unlocked : old->t_end))
					c->s->late_reports++;
				continue;
			}
			if (swapped)
				violation(c, "token: pid %d thread %u hold %u (token %" PRIu64 ", granted %.3f ms) overlaps the "
						"older pid %d thread %u hold %u (token %" PRIu64 ", granted %.3f ms) with a token not "
						"above its, and was not told it lost the lock (%s)",
						old->pid, old->thr, old->seq, old->token, (double)(old->t_ok - t0_of(c)) / 1e6,
						new->pid, new->thr, new->seq, new->token, (double)(new->t_ok - t0_of(c)) / 1e6,
						told == INT64_MAX ? "never told" : "told too late");
			else
				violation(c, "overlap: pid %d thread %u hold %u [%.3f, %.3f] ms and pid %d thread %u hold %u "
						"[%.3f, ...] ms, and the older was %s (due by %.3f ms)",
						old->pid, old->thr, old->seq, (double)(old->t_ok - t0_of(c)) / 1e6,
						(double)(old->t_end - t0_of(c)) / 1e6, new->pid, new->thr, new->seq,
						(double)(new->t_ok - t0_of(c)) / 1e6,
						told == INT64_MAX ? "never told it lost the lock" : "told it lost the lock too late",
						due == INT64_MAX ? -1.0 : (double)(due - t0_of(c)) / 1e6);
			if (told != INT64_MAX && c->reports <= MAX_REPORTS)
				fprintf(stderr, "  told at %.3f ms\n", (double)(told - t0_of(c)) / 1e6);
			hold_excerpt(c, old);
			hold_excerpt(c, new);
		}
		na = keep;
		act[na++] = y;
	}
	free(v);
	free(act);
}

static void
check_tokens(struct ctx *c)
{
	struct hold **ok = malloc((c->nh + 1) * sizeof *ok), **inv = malloc((c->nh + 1) * sizeof *inv);
	struct hold *maxh = NULL;
	size_t k = 0, j = 0;

	for (size_t i = 0; i < c->nh; i++)
		if (c->h[i].has_token)
			ok[k] = inv[k] = &c->h[i], k++;
	/* Unique. */
	qsort(ok, k, sizeof *ok, cmp_token);
	for (size_t i = 1; i < k; i++)
		if (ok[i]->token == ok[i - 1]->token) {
			violation(c, "token %" PRIu64 " handed to two holds: pid %d thread %u hold %u and pid %d thread %u hold %u",
					ok[i]->token, ok[i - 1]->pid, ok[i - 1]->thr, ok[i - 1]->seq, ok[i]->pid,
					ok[i]->thr, ok[i]->seq);
			hold_excerpt(c, ok[i - 1]);
			hold_excerpt(c, ok[i]);
		}
	/* Real-time order: a hold granted before Y asked has a smaller token. */
	qsort(ok, k, sizeof *ok, cmp_ok);
	qsort(inv, k, sizeof *inv, cmp_inv);
	for (size_t i = 0; i < k; i++) {
		while (j < k && ok[j]->t_ok < inv[i]->t_inv) {
			if (!maxh || ok[j]->token > maxh->token)
				maxh = ok[j];
			j++;
		}
		/* A hold granted on a kept lease whose key had vanished has a
		 * token from the lease's block, below the next holder's from
		 * Redis: allowed if it was told in time (README "The fast
		 * paths" rule 2), as an overlap is. */
		if (maxh && inv[i]->token <= maxh->token &&
		    told_at(c, inv[i]) > deadline_of(c, inv[i], maxh->t_ok)) {
			violation(c, "token %" PRIu64 " of pid %d thread %u hold %u is not above token %" PRIu64
					" of pid %d thread %u hold %u, granted before it was asked for",
					inv[i]->token, inv[i]->pid, inv[i]->thr, inv[i]->seq, maxh->token, maxh->pid,
					maxh->thr, maxh->seq);
			hold_excerpt(c, maxh);
			hold_excerpt(c, inv[i]);
		}
	}
	free(ok);
	free(inv);
}

static void
check_writes(struct ctx *c, int64_t final_value, const uint64_t *log, size_t log_len)
{
	struct hold **v = malloc((c->nh + 1) * sizeof *v);
	size_t k = 0, unknown = 0;

	for (size_t i = 1; i < log_len; i++)
		if (log[i] <= log[i - 1])
			violation(c, "the resource accepted token %" PRIu64 " after %" PRIu64, log[i], log[i - 1]);
	for (size_t i = 0; i < c->nh; i++) {
		struct hold *h = &c->h[i];
		int64_t told = told_at(c, h);
		int64_t due = h->write_rc == 0 || h->read_rc == -2 ? deadline_of(c, h, h->t_ok) : 0;
		if (h->write_rc == 0 && told > due) {
			violation(c, "stale: the write of pid %d thread %u hold %u (token %" PRIu64
					") was rejected (a newer token read or wrote during its hold), and it was never told it lost the lock",
					h->pid, h->thr, h->seq, h->write_token);
			hold_excerpt(c, h);
		}
		if (h->read_rc == -2 && told > due) {
			violation(c, "stale: the read of pid %d thread %u hold %u (token %" PRIu64
					") was refused (a newer token had read), and it was never told it lost the lock",
					h->pid, h->thr, h->seq, h->token);
			hold_excerpt(c, h);
		}
		if (h->write_inv)
			v[k++] = h;
		if (h->write_inv && (h->write_rc == -1 || h->write_rc == -2))
			unknown++;
	}
	/* Every accepted write is one somebody made, and every write told
	 * "accepted" is in the resource's log. */
	qsort(v, k, sizeof *v, cmp_wtoken);
	for (size_t i = 0; i < log_len; i++) {
		size_t lo = 0, hi = k;
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;
			if (v[mid]->write_token < log[i])
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo == k || v[lo]->write_token != log[i] || v[lo]->write_rc == 0)
			violation(c, "the resource accepted a write with token %" PRIu64 " that no holder made (or was told was rejected)",
					log[i]);
		else
			v[lo]->write_rc = 3;    /* seen in the log */
	}
	for (size_t i = 0; i < k; i++)
		if (v[i]->write_rc == 1)
			violation(c, "pid %d thread %u hold %u was told its write (token %" PRIu64 ") was accepted; the resource has no record of it",
					v[i]->pid, v[i]->thr, v[i]->seq, v[i]->write_token);
	if (final_value != (int64_t)log_len)
		violation(c, "lost update: the resource's value is %" PRId64 " after %zu accepted writes", final_value,
				log_len);
	c->s->final_value = final_value;
	c->s->log_len = (int64_t)log_len;
	(void)unknown;
	free(v);
}

/* Time process p spent stopped within [a, b]. */
static int64_t
stopped_within(const struct procinfo *p, int64_t a, int64_t b)
{
	int64_t sum = 0;

	if (!p)
		return 0;
	for (int i = 0; i < p->nstops; i++) {
		int64_t s = p->stop_t[i] > a ? p->stop_t[i] : a;
		int64_t e = p->cont_t[i] < b ? p->cont_t[i] : b;
		if (e > s)
			sum += e - s;
	}
	return sum;
}

static int
cmp_span(const void *x, const void *y)
{
	const struct span *p = x, *q = y;

	return p->a < q->a ? -1 : p->a > q->a;
}

/*
 * Blocking lock calls may wait as long as others hold the lock, so their
 * bound is global: the lock must never sit free (no hold, no fault, no
 * key that may still be there) for more than two leases while a thread
 * waits for it.  A lost wake-up costs at most one lease (docs/faults.md #1,
 * API.md "Waiting").
 */
static void
check_free_lock(struct ctx *c, int64_t limit)
{
	int64_t L = (int64_t)c->lease_ms * 1000000;
	struct span *sp = NULL, *w = NULL;
	size_t n = 0, cap = 0, nw = 0, capw = 0;
	int64_t fault_t = 0, *inv = calloc(c->nth + 1, sizeof *inv);

	for (size_t i = 0; i < c->nh; i++) {
		struct hold *h = &c->h[i];
		int lingers = h->lost || h->unlock_rc != 0;     /* the key may outlive the hold */
		sp = grow(sp, &cap, n + 1, sizeof *sp);
		sp[n++] = (struct span){ h->t_ok, (h->t_end == INT64_MAX ? h->t_ok : h->t_end) + (lingers ? L : 0) };
	}
	for (size_t i = 0; i < c->n; i++) {
		const struct tt_rec *r = &c->r[i];
		if (r->thr == TT_NEMESIS_THR) {
			if (r->type == N_FAULT)
				fault_t = r->t;
			else if (r->type == N_HEAL) {
				sp = grow(sp, &cap, n + 1, sizeof *sp);
				sp[n++] = (struct span){ fault_t, r->t + L };
			}
			continue;
		}
		if (r->type == R_LOST)
			continue;
		struct thread *t = thread_of(c, r->pid, r->thr);
		size_t k = (size_t)(t - c->th);
		if (r->type == R_LOCK_INV) {
			inv[k] = r->kind == OP_LOCK ? r->t : 0;
		} else if (r->type == R_LOCK) {
			/* a failed acquire may have been granted and abandoned */
			if (r->rc == EIO) {
				sp = grow(sp, &cap, n + 1, sizeof *sp);
				sp[n++] = (struct span){ r->t, r->t + L };
			}
			if (inv[k]) {
				w = grow(w, &capw, nw + 1, sizeof *w);
				w[nw++] = (struct span){ inv[k], r->t };
			}
			inv[k] = 0;
		}
	}
	qsort(sp, n, sizeof *sp, cmp_span);
	int64_t covered = n ? sp[0].b : 0;
	for (size_t i = 1; i < n; i++) {
		if (sp[i].a > covered && sp[i].a - covered > limit) {
			for (size_t j = 0; j < nw; j++)
				if (w[j].a <= covered && w[j].b >= sp[i].a) {
					violation(c, "hung: the lock sat free for %.0f ms (from %.3f ms) while a thread waited in dmutex_lock from %.3f to %.3f ms",
							(double)(sp[i].a - covered) / 1e6, (double)(covered - t0_of(c)) / 1e6,
							(double)(w[j].a - t0_of(c)) / 1e6, (double)(w[j].b - t0_of(c)) / 1e6);
					break;
				}
		}
		if (sp[i].b > covered)
			covered = sp[i].b;
	}
	free(sp);
	free(w);
	free(inv);
}

static void
check_progress(struct ctx *c)
{
	/* Per thread: the longest silence, its own stops not counted; a
	 * blocking lock call is bounded by check_free_lock instead. */
	int64_t *last = calloc(c->nth + 1, sizeof *last);
	int *blocking = calloc(c->nth + 1, sizeof *blocking);

	for (size_t i = 0; i < c->n; i++) {
		const struct tt_rec *r = &c->r[i];
		if (r->thr == TT_NEMESIS_THR || r->type == R_LOST)
			continue;
		struct thread *t = thread_of(c, r->pid, r->thr);
		size_t k = (size_t)(t - c->th);
		if (last[k] && !blocking[k]) {
			struct procinfo *p = proc_of(c, r->pid);
			int64_t gap = r->t - last[k] - stopped_within(p, last[k], r->t);
			if (gap > c->hung_ns) {
				violation(c, "hung: pid %d thread %u wrote nothing for %.0f ms (limit %.0f ms)",
						r->pid, r->thr, (double)gap / 1e6, (double)c->hung_ns / 1e6);
				excerpt(c, r->pid, r->thr, last[k] - 1000000, r->t + 1000000);
			}
		}
		last[k] = r->t;
		/* A condition wait takes the mutex back however long that takes. */
		blocking[k] = (r->type == R_LOCK_INV && r->kind == OP_LOCK) || r->type == R_CWAIT_INV;
	}
	free(last);
	free(blocking);
	check_free_lock(c, 2 * (int64_t)c->lease_ms * 1000000 + 3 * (int64_t)c->cmd_ms * 1000000 + 200000000);
	for (size_t k = 0; k < c->nth; k++) {
		struct thread *t = &c->th[k];
		struct procinfo *p = proc_of(c, t->pid);
		if (p->killed_t)
			continue;
		if (!t->exited)
			violation(c, "hung: pid %d thread %u never stopped (last record %.3f ms)", t->pid, t->thr,
					(double)(t->last_t - t0_of(c)) / 1e6);
	}
	for (size_t i = 0; i < c->npr; i++) {
		struct procinfo *p = &c->pr[i];
		if (!p->killed_t && p->have_status && p->status != 0)
			violation(c, "worker pid %d exited with status %d", p->pid, p->status);
	}
}

static void
check_samples(struct ctx *c)
{
	struct hold **v = malloc((c->nh + 1) * sizeof *v);
	size_t k = 0;
	int64_t lease_ns = (int64_t)c->lease_ms * 1000000;

	for (size_t i = 0; i < c->nh; i++)
		if (c->h[i].has_token)
			v[k++] = &c->h[i];
	qsort(v, k, sizeof *v, cmp_token);
	int64_t resurrect_until = 0;
	for (size_t i = 0; i < c->n; i++) {
		const struct tt_rec *r = &c->r[i];
		/* A restart from an older AOF brings back keys that were
		 * released since, with their old expiry: they are the
		 * fault's, not a stranded hold, until that expiry. */
		if (r->type == N_FAULT && r->thr == TT_NEMESIS_THR && r->kind == F_RESTART_LOSSY)
			resurrect_until = INT64_MAX;    /* the server answers before the heal */
		if (r->type == N_HEAL && r->thr == TT_NEMESIS_THR && r->kind == F_RESTART_LOSSY)
			resurrect_until = r->t + lease_ns + 100000000;
		if (r->type != N_SAMPLE || !r->hold || r->t < resurrect_until)
			continue;
		if (r->value == -1 || r->value > (int64_t)c->lease_ms) {
			if (c->rwlock)
				violation(c, "stranded: the read-write lock's %s on node %d has %" PRId64 " ms of lease "
						"left (lease %u ms) at %.3f ms", r->token ? "writer" : "longest share", r->rc,
						r->value, c->lease_ms, (double)(r->t - t0_of(c)) / 1e6);
			else
				violation(c, "stranded: the lock key on node %d has PTTL %" PRId64 " (lease %u ms) at %.3f ms",
						r->rc, r->value, c->lease_ms, (double)(r->t - t0_of(c)) / 1e6);
			continue;
		}
		/* On one node the key's fence is the hold's token. */
		if (c->nodes != 1 || !r->token)
			continue;
		size_t lo = 0, hi = k;
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;
			if (v[mid]->token < r->token)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo == k || v[lo]->token != r->token)
			continue;
		struct hold *h = v[lo];
		struct procinfo *p = proc_of(c, h->pid);
		int64_t end = h->unlock_rc >= 0 ? h->t_unlocked : p->killed_t ? p->killed_t : 0;
		if (r->kind == 1) {
			/* A kept lease carries the token of the hold that took
			 * it; the process's later holds (higher tokens, from
			 * its reserved block) were local holds of it.  It is
			 * renewed while used, given back a third of a lease
			 * after its last use (or expires a lease after its
			 * last renewal): gone 4/3 of a lease after that use. */
			int open = 0;
			for (size_t j = lo; j < k && !open; j++) {
				const struct hold *g = v[j];
				int64_t ge;
				if (g->pid != h->pid || g->t_ok > r->t)
					continue;
				ge = g->unlock_rc >= 0 ? g->t_unlocked : p->killed_t;
				open = !ge;
				if (ge > end)
					end = ge;
			}
			if (!open && end && r->t > end + lease_ns * 4 / 3 + (int64_t)c->cmd_ms * 1000000 +
					50000000) {
				violation(c, "stranded: the lease kept by pid %d (token %" PRIu64 ") is in "
						"Redis at %.3f ms, more than 4/3 of a lease after its last hold",
						h->pid, h->token, (double)(r->t - t0_of(c)) / 1e6);
				hold_excerpt(c, h);
			}
			continue;
		}
		/* One Redis releases asynchronously (README "Asynchronous
		 * release"): an unlock's 0 confirms nothing, the release may wait
		 * behind a paused or stopped server; only the lease bounds it
		 * (below).  Redlock's unlock waits for its answers (this check
		 * runs on one node only, so it stays for such a run by URL). */
		if (h->unlock_rc == 0 && !h->lost && r->t > h->t_unlocked && !c->async_release) {
			violation(c, "stranded: the hold of pid %d thread %u hold %u (token %" PRIu64
					") is in Redis at %.3f ms after its unlock was confirmed",
					h->pid, h->thr, h->seq, h->token, (double)(r->t - t0_of(c)) / 1e6);
			hold_excerpt(c, h);
		} else if (end && r->t > end + lease_ns + 50000000) {
			violation(c, "stranded: the hold of pid %d thread %u hold %u (token %" PRIu64
					") is in Redis at %.3f ms, more than a lease after its holder let go",
					h->pid, h->thr, h->seq, h->token, (double)(r->t - t0_of(c)) / 1e6);
			hold_excerpt(c, h);
		}
	}
	free(v);
}

static void
write_text(struct ctx *c)
{
	char path[1024];
	FILE *f;

	snprintf(path, sizeof path, "%s/history.txt", c->dir);
	if (!(f = fopen(path, "we")))
		return;
	for (size_t i = 0; i < c->n; i++)
		print_rec(f, &c->r[i], t0_of(c));
	fclose(f);
	fprintf(stderr, "torture: merged history: %s\n", path);
}

int
tt_check(const char *dir, struct tt_summary *s, int64_t final_value, const uint64_t *log, size_t log_len,
		const struct tt_checkcfg *cc)
{
	unsigned lease_ms = cc->lease_ms;
	struct ctx c = { .s = s, .lease_ms = lease_ms, .cmd_ms = cc->cmd_ms, .nodes = cc->nodes, .dir = dir,
		.async_release = cc->async_release, .lease_cache = cc->lease_cache, .rwlock = cc->rwlock };
	int64_t fault_t = 0;
	int64_t max_fault_ns = 0;

	memset(s, 0, sizeof *s);
	s->lease_ms = lease_ms;
	if (load(&c, dir)) {
		s->violations = 1;
		return 1;
	}
	for (size_t i = 0; i < c.n; i++) {
		const struct tt_rec *r = &c.r[i];
		if (r->thr == TT_NEMESIS_THR) {
			nemesis_rec(&c, r);
			if (r->type == N_FAULT && r->value * 1000000 > max_fault_ns)
				max_fault_ns = r->value * 1000000;
			if (r->type == N_FAULT)
				fault_t = r->t;
			if (r->type == N_HEAL) {
				c.faults = grow(c.faults, &c.capfaults, c.nfaults + 1, sizeof *c.faults);
				c.faults[c.nfaults++] = (struct span){ fault_t, r->t };
			}
		}
	}
	/* The fast paths' report window (README "When the report comes"): a
	 * kept lease found gone within a third of a lease plus a command
	 * timeout of the key's loss, an asynchronous release's answer within
	 * a command timeout of its unlock and read ~10 ms after; the rest is
	 * slack for a loaded machine (a loss found late is still a violation:
	 * a few hundred ms is far below the leases and outages it catches). */
	c.window_ns = ((int64_t)lease_ms / 3 + 2 * (int64_t)cc->cmd_ms + 300) * 1000000;
	/* Silence allowed: ten leases, or twice the longest fault and five
	 * leases (a lock call waits out a fault, then the holder's lease). */
	c.hung_ns = 10 * (int64_t)lease_ms * 1000000;
	if (2 * max_fault_ns + 5 * (int64_t)lease_ms * 1000000 > c.hung_ns)
		c.hung_ns = 2 * max_fault_ns + 5 * (int64_t)lease_ms * 1000000;
	for (size_t i = 0; i < c.n; i++)
		if (c.r[i].thr != TT_NEMESIS_THR && c.r[i].type != R_LOST)
			worker_rec(&c, &c.r[i]);
	/* Holds whose process was killed end at the kill. */
	for (size_t i = 0; i < c.nh; i++) {
		struct hold *h = &c.h[i];
		struct procinfo *p = proc_of(&c, h->pid);
		if (!h->ended && p->killed_t) {
			h->t_end = p->killed_t;
			h->ended = 1;
		}
		if (!h->ended) {
			violation(&c, "pid %d thread %u hold %u never ended (no unlock, no kill)", h->pid, h->thr,
					h->seq);
			h->t_end = INT64_MAX;
		}
	}
	/* The faults that took the lock's key from under a hold. */
	for (size_t i = 0, f = 0; i < c.n; i++) {
		const struct tt_rec *r = &c.r[i];
		if (r->thr != TT_NEMESIS_THR || r->type != N_HEAL)
			continue;
		if (tt_fault_loses_keys(r->kind) && r->token)
			for (size_t j = 0; j < c.nh; j++)
				if (c.h[j].t_ok < r->t && c.h[j].t_end > c.faults[f].a) {
					s->keys_taken++;
					break;
				}
		f++;
	}
	/* onlost reports, matched to their hold by number. */
	for (size_t i = 0; i < c.n; i++) {
		const struct tt_rec *r = &c.r[i];
		if (r->type != R_LOST || r->thr == TT_NEMESIS_THR)
			continue;
		if (r->thr == TT_PROC_THR) {
			/* The process's read-write lock: it tells each of its
			 * threads' holds granted before it.  Counted as lost:
			 * the process's holds held then, else its last one. */
			s->lost_by_onlost++;
			for (size_t k = 0; k < c.nsl; k++) {
				struct slot *t = &c.sl[k];
				if (t->pid != r->pid)
					continue;
				t->lost_t = grow(t->lost_t, &t->caplost, t->nlost + 1, sizeof *t->lost_t);
				t->lost_t[t->nlost++] = r->t;
			}
			struct hold *last = NULL;
			int held = 0;
			for (size_t j = 0; j < c.nh; j++) {
				struct hold *g = &c.h[j];
				if (g->pid != r->pid || g->t_ok > r->t)
					continue;
				if (g->t_end >= r->t) {
					held = 1;
					g->lost = g->lost ? g->lost : 2;
				} else if (!last || g->t_end > last->t_end)
					last = g;
			}
			if (!held && last && !last->lost)
				last->lost = 2;
			continue;
		}
		struct hold *h = hold_find(&c, r->pid, r->thr, r->hold);
		if (!h) {
			violation(&c, "onlost for pid %d thread %u hold %u, which was never granted", r->pid, r->thr,
					r->hold);
			continue;
		}
		if (h->lost == 2 && !c.lease_cache)
			violation(&c, "onlost ran twice for pid %d thread %u hold %u", r->pid, r->thr, r->hold);
		h->lost = 2;
		s->lost_by_onlost++;
		struct slot *t = &c.sl[c.th[h->thread].slot];
		t->lost_t = grow(t->lost_t, &t->caplost, t->nlost + 1, sizeof *t->lost_t);
		t->lost_t[t->nlost++] = r->t;
	}
	for (size_t i = 0; i < c.nh; i++)
		if (c.h[i].lost) {
			s->holds_lost++;
			s->lost_at_unlock += c.h[i].unlock_rc == ENOLCK;
		}
	s->threads = c.nth;
	check_overlap(&c);
	check_tokens(&c);
	check_writes(&c, final_value, log, log_len);
	check_samples(&c);
	check_progress(&c);
	if (s->violations)
		write_text(&c);
	free(c.r);
	free(c.h);
	for (size_t i = 0; i < c.nsl; i++)
		free(c.sl[i].lost_t);
	free(c.sl);
	free(c.th);
	free(c.pr);
	free(c.faults);
	return (int)(s->violations > 1000000 ? 1000000 : s->violations);
}
