/*
 * dmutex list [--json] [PATTERN]: every lock under the prefix.  A name in
 * use has a lock key while held (or for ever when not recoverable), a meta
 * hash kept until idle_ms after its last lease once a fencing token or a
 * robust state was recorded, and a cond set while threads wait on its
 * condition variable; a non-robust hold that asked for no token has only
 * its lock key (key layout 3).  So the three kinds of keys are the index,
 * and dead names drop out by themselves; they are walked with SCAN (never
 * KEYS, which blocks the server).
 */
#include <fnmatch.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
	"usage: dmutex list [--json] [--url URL] [PATTERN]\n"
	"List every lock under the prefix whose name matches PATTERN (a Redis\n"
	"glob: * ? [abc] \\x; default *), with its holder and state; then the\n"
	"read-write locks, in a table of their own (JSON: \"kind\": \"rwlock\").\n";

#define SCAN_COUNT "1000"
#define BATCH 256       /* locks inspected per pipeline */

struct names {
	char **v;
	size_t n, cap;
};

static int
names_add(struct names *ns, const char *s, size_t len)
{
	char *d;

	if (ns->n == ns->cap) {
		size_t cap = ns->cap ? ns->cap * 2 : 64;
		char **v = realloc(ns->v, cap * sizeof *v);
		if (!v)
			return -1;
		ns->v = v;
		ns->cap = cap;
	}
	if (!(d = malloc(len + 1)))
		return -1;
	memcpy(d, s, len);
	d[len] = '\0';
	ns->v[ns->n++] = d;
	return 0;
}

static void
names_free(struct names *ns)
{
	for (size_t i = 0; i < ns->n; i++)
		free(ns->v[i]);
	free(ns->v);
}

static int
cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted, each once: SCAN may return a key more than once. */
static void
names_unique(struct names *ns)
{
	size_t k = 0;

	if (!ns->n)
		return;
	qsort(ns->v, ns->n, sizeof *ns->v, cmp_name);
	for (size_t i = 1; i < ns->n; i++) {
		if (!strcmp(ns->v[i], ns->v[k]))
			free(ns->v[i]);
		else
			ns->v[++k] = ns->v[i];
	}
	ns->n = k + 1;
}

/* The prefix taken literally inside a glob. */
static char *
glob_escape(const char *s)
{
	char *out = malloc(2 * strlen(s) + 1), *o = out;

	if (!out)
		return NULL;
	for (; *s; s++) {
		if (strchr("*?[]\\", *s))
			*o++ = '\\';
		*o++ = *s;
	}
	*o = '\0';
	return out;
}

/* Collect the names of one node's keys of one kind ("lock:{"...) matching
 * the pattern. */
static int
scan_node(struct dmutex__conn *c, const char *prefix, const char *kind, const char *match,
		struct names *ns)
{
	char cursor[32] = "0";
	size_t head = strlen(prefix) + strlen(kind);

	do {
		redisReply *r = dmutex__conn_command(c, dmutex__conn_deadline(c), "SCAN %s MATCH %b COUNT " SCAN_COUNT,
				cursor, match, strlen(match));
		if (!r) {
			cli_err("backend failed: %s", dmutex__admin_conn_error(c));
			return CLI_BACKEND;
		}
		if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
		    r->element[0]->type != REDIS_REPLY_STRING ||
		    r->element[1]->type != REDIS_REPLY_ARRAY) {
			cli_err("SCAN failed: %s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
			freeReplyObject(r);
			return CLI_BACKEND;
		}
		snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
		for (size_t i = 0; i < r->element[1]->elements; i++) {
			const redisReply *k = r->element[1]->element[i];
			/* A key with a NUL in it was not written by dmutex. */
			if (k->type != REDIS_REPLY_STRING || k->len < head + 2 ||
			    strlen(k->str) != k->len || k->str[k->len - 1] != '}')
				continue;
			if (names_add(ns, k->str + head, k->len - head - 1)) {
				freeReplyObject(r);
				cli_err("out of memory");
				return CLI_INTERNAL;
			}
		}
		freeReplyObject(r);
	} while (strcmp(cursor, "0"));
	return 0;
}

struct row {
	struct cli_lock l;
	size_t node;
};

struct rwrow {
	struct cli_rwlock rw;
	size_t node;
};

/* One mutex row's cells, as printed. */
struct cells {
	char holder[1200], held_for[32], left[32], fence[32], waiting[48];
};

static void
cells_of(const struct cli_lock *l, struct cells *c)
{
	long long f = l->held ? l->fence : l->fence_counter;

	snprintf(c->holder, sizeof c->holder, "-");
	snprintf(c->held_for, sizeof c->held_for, "-");
	snprintf(c->left, sizeof c->left, "-");
	snprintf(c->fence, sizeof c->fence, "-");
	snprintf(c->waiting, sizeof c->waiting, "-");
	if (l->held) {
		cli_holder(c->holder, sizeof c->holder, l, 0);
		if (l->since_ms >= 0)
			cli_duration(c->held_for, sizeof c->held_for, cli_wall_ms() - l->since_ms);
		if (l->pttl_ms >= 0)
			cli_duration(c->left, sizeof c->left, l->pttl_ms);
	}
	if (f >= 0)
		snprintf(c->fence, sizeof c->fence, "%lld", f);
	if (l->waiters >= 0)
		snprintf(c->waiting, sizeof c->waiting, "%lld", l->waiters);
	if (l->cond_waiters > 0 && !strcmp(c->waiting, "-"))
		c->waiting[0] = '\0';
	if (l->cond_waiters > 0)
		snprintf(c->waiting + strlen(c->waiting), sizeof c->waiting - strlen(c->waiting),
				"%s%lld cond", c->waiting[0] ? ", " : "", l->cond_waiters);
}

static void
widen(int *w, const char *s)
{
	if ((int)strlen(s) > *w)
		*w = (int)strlen(s);
}

/* Every column as wide as its widest cell (a held-for of days, a 19-digit
 * token, a long host): a row never pushes the next column out of line. */
static void
print_table(const struct cli_conn *cc, const struct row *rows, size_t n)
{
	int wname = 4, whold = 6, wnode = 4, wfor = 10, wleft = 10, wfence = 6;
	int multi = cc->nnodes > 1;
	char name[CLI_NAME_TEXT], text[CLI_TEXT_MAX(600)];
	struct cells c;

	for (size_t i = 0; i < n; i++) {
		cli_name_text(name, rows[i].l.name);
		widen(&wname, name);
		if (multi)
			widen(&wnode, cli_text(text, sizeof text, cli_conn_node(cc, rows[i].node)));
		if (rows[i].l.error[0])
			continue;
		cells_of(&rows[i].l, &c);
		widen(&whold, c.holder);
		widen(&wfor, c.held_for);
		widen(&wleft, c.left);
		widen(&wfence, c.fence);
	}
	if (multi)
		printf("%-*s  ", wnode, "NODE");
	printf("%-*s  %-5s  %-*s  %-*s  %-*s  %-*s  %-15s  %s\n", wname, "NAME", "STATE",
			whold, "HOLDER", wfor, "HELD FOR", wleft, "LEASE LEFT", wfence, "FENCE", "ROBUST",
			"WAITING");
	for (size_t i = 0; i < n; i++) {
		const struct cli_lock *l = &rows[i].l;

		cli_name_text(name, l->name);
		if (multi)
			printf("%-*s  ", wnode, cli_text(text, sizeof text, cli_conn_node(cc, rows[i].node)));
		if (l->error[0]) {
			printf("%-*s  cannot read: %s\n", wname, name, cli_text(text, sizeof text, l->error));
			continue;
		}
		cells_of(l, &c);
		printf("%-*s  %-5s  %-*s  %-*s  %-*s  %-*s  %-15s  %s\n", wname, name,
				l->held ? "held" : "free", whold, c.holder, wfor, c.held_for, wleft, c.left,
				wfence, c.fence, cli_robust_text(l->robust), c.waiting);
	}
}

/* The names of every key of the kinds (3) matching pattern on the masters
 * reachable, each once. */
static int
scan_all(const struct cli_conn *cc, const char *const kinds[3], const char *pattern,
		struct names *ns)
{
	char *esc = NULL, *match = NULL;
	int status = 0;

	if (!(esc = glob_escape(cc->prefix)) ||
	    !(match = malloc(strlen(esc) + strlen(pattern) + 8))) {
		cli_err("out of memory");
		status = CLI_INTERNAL;
		goto out;
	}
	for (size_t k = 0; k < 3; k++) {
		const char *kind = kinds[k];
		sprintf(match, "%s%s%s}", esc, kind, pattern);
		for (size_t n = 0; n < cc->nnodes; n++) {
			int st;
			if (cc->ctx[n] && (st = scan_node(cc->ctx[n], cc->prefix, kind, match, ns))) {
				status = st;
				goto out;
			}
		}
	}
	names_unique(ns);
out:
	free(esc);
	free(match);
	return status;
}

/* A row per name and master holding it, read in pipelined batches; the
 * rows read so far are the caller's to free, whatever is returned. */
static int
read_rows(const struct cli_conn *cc, const struct names *ns, struct row **rows, size_t *nrows)
{
	if (ns->n && !(*rows = calloc(ns->n * cc->nnodes, sizeof **rows))) {
		cli_err("out of memory");
		return CLI_INTERNAL;
	}
	for (size_t n = 0; n < cc->nnodes; n++) {
		if (!cc->ctx[n])
			continue;
		for (size_t lo = 0; lo < ns->n; lo += BATCH) {
			size_t hi = lo + BATCH < ns->n ? lo + BATCH : ns->n;
			int st = 0;
			/* A cluster: each name on the master serving it. */
			for (size_t i = lo; i < hi && !st; i++)
				if (cli_conn_serves(cc, n, ns->v[i]))
					st = cli_inspect_append(cc->ctx[n], cc->prefix, ns->v[i]);
			for (size_t i = lo; i < hi && !st; i++) {
				struct row *r = &(*rows)[*nrows];
				if (!cli_conn_serves(cc, n, ns->v[i]))
					continue;
				st = cli_inspect_read(cc->ctx[n], cc->prefix, ns->v[i], &r->l);
				r->node = n;
				(*nrows)++;
				/* Gone between SCAN and now: not worth a row. */
				if (!st && !r->l.exists && !r->l.error[0])
					cli_lock_free(&(*rows)[--*nrows].l);
			}
			if (st)
				return st;
		}
	}
	return 0;
}

/* The read-write locks: as read_rows, one TIME per batch (their leases are
 * server times). */
static int
read_rw_rows(const struct cli_conn *cc, const struct names *ns, struct rwrow **rows, size_t *nrows)
{
	if (ns->n && !(*rows = calloc(ns->n * cc->nnodes, sizeof **rows))) {
		cli_err("out of memory");
		return CLI_INTERNAL;
	}
	for (size_t n = 0; n < cc->nnodes; n++) {
		for (size_t lo = 0; cc->ctx[n] && lo < ns->n; lo += BATCH) {
			size_t hi = lo + BATCH < ns->n ? lo + BATCH : ns->n;
			long long now;
			int st = cli_rw_time(cc->ctx[n], &now);
			for (size_t i = lo; i < hi && !st; i++)
				if (cli_conn_serves(cc, n, ns->v[i]))
					st = cli_rw_append(cc->ctx[n], cc->prefix, ns->v[i], now);
			for (size_t i = lo; i < hi && !st; i++) {
				struct rwrow *r = &(*rows)[*nrows];
				if (!cli_conn_serves(cc, n, ns->v[i]))
					continue;
				st = cli_rw_read(cc->ctx[n], cc->prefix, ns->v[i], now, &r->rw);
				r->node = n;
				(*nrows)++;
				if (!st && !r->rw.exists && !r->rw.error[0])
					cli_rwlock_free(&(*rows)[--*nrows].rw);
			}
			if (st)
				return st;
		}
	}
	return 0;
}

/* The read-write locks' table, after the mutexes' (whose columns stay as
 * they were for the scripts that read them): its first column's head,
 * RWLOCK, says what they are. */
static void
print_rw_table(const struct cli_conn *cc, const struct rwrow *rows, size_t n)
{
	int wname = 6, wnode = 4, multi = cc->nnodes > 1;
	char name[CLI_NAME_TEXT], text[CLI_TEXT_MAX(600)];

	for (size_t i = 0; i < n; i++) {
		cli_name_text(name, rows[i].rw.name);
		if ((int)strlen(name) > wname)
			wname = (int)strlen(name);
		if (multi && (int)strlen(cli_text(text, sizeof text, cli_conn_node(cc, rows[i].node))) > wnode)
			wnode = (int)strlen(text);
	}
	if (multi)
		printf("%-*s  ", wnode, "NODE");
	/* FENCE fits a token (up to 19 digits: fms << 20 | fseq). */
	printf("%-*s  %-5s  %-10s  %-19s  %-7s  %-10s  %s\n", wname, "RWLOCK", "STATE", "LEASE LEFT",
			"FENCE", "READERS", "READ LEASE", "WRITERS WAITING");
	for (size_t i = 0; i < n; i++) {
		const struct cli_rwlock *rw = &rows[i].rw;
		char left[32] = "-", fence[32] = "-", rlease[32] = "-";

		cli_name_text(name, rw->name);
		if (multi)
			printf("%-*s  ", wnode, cli_text(text, sizeof text, cli_conn_node(cc, rows[i].node)));
		if (rw->error[0]) {
			printf("%-*s  cannot read: %s\n", wname, name, cli_text(text, sizeof text, rw->error));
			continue;
		}
		if (rw->writing)
			cli_duration(left, sizeof left, rw->write_left_ms);
		if (rw->readers > 0)
			cli_duration(rlease, sizeof rlease, rw->read_left_ms);
		if (rw->fence >= 0)
			snprintf(fence, sizeof fence, "%lld", rw->fence);
		printf("%-*s  %-5s  %-10s  %-19s  %-7lld  %-10s  %lld\n", wname, name,
				rw->writing ? "write" : rw->readers > 0 ? "read" : "free", left, fence,
				rw->readers, rlease, rw->writers_waiting);
	}
}

/* The rows as JSON (one array, the read-write locks after the mutexes,
 * told apart by "kind") or tables: CLI_BACKEND if one could not be read. */
static int
show(const struct cli_conn *cc, const struct row *rows, size_t nrows, const struct rwrow *rw,
		size_t nrw, int json)
{
	int status = 0;

	if (json) {
		fputc('[', stdout);
		for (size_t i = 0; i < nrows; i++) {
			if (i)
				fputc(',', stdout);
			cli_json_lock(stdout, &rows[i].l,
					cc->nnodes > 1 ? cli_conn_node(cc, rows[i].node) : NULL);
		}
		for (size_t i = 0; i < nrw; i++) {
			if (i || nrows)
				fputc(',', stdout);
			cli_json_rwlock(stdout, &rw[i].rw, cc->nnodes > 1 ? cli_conn_node(cc, rw[i].node) : NULL);
		}
		fputs("]\n", stdout);
	} else {
		if (nrows)
			print_table(cc, rows, nrows);
		if (nrows && nrw)
			fputc('\n', stdout);
		if (nrw)
			print_rw_table(cc, rw, nrw);
	}
	for (size_t i = 0; i < nrows; i++)
		if (rows[i].l.error[0])
			status = CLI_BACKEND;
	for (size_t i = 0; i < nrw; i++)
		if (rw[i].rw.error[0])
			status = CLI_BACKEND;
	return status;
}

/* Over a store read through the library (etcd): PATTERN as fnmatch(3). */
struct view_scan {
	struct names *ns;
	const char *pattern;
};

static int
view_name(void *arg, const char *name)
{
	struct view_scan *vs = arg;

	if (fnmatch(vs->pattern, name, 0))
		return 0;
	return names_add(vs->ns, name, strlen(name)) ? CLI_INTERNAL : 0;
}

/* One kind's names through the library (walk: the door's names or
 * rw_names), sorted as the SCAN's are.  0 or a status (said). */
static int
view_names(struct dmutex__admin_view *v, int (*walk)(struct dmutex__admin_view *,
		int (*)(void *, const char *), void *), const char *pattern, struct names *ns)
{
	struct view_scan vs = { ns, pattern };
	int err = walk(v, view_name, &vs);

	if (err == CLI_INTERNAL) {
		cli_err("out of memory");
		return err;
	}
	if (err) {
		cli_err("backend failed listing the locks (%s)", strerror(err));
		return CLI_BACKEND;
	}
	names_unique(ns);
	return 0;
}

/* As read_rows and read_rw_rows, a name at a time: a row per name still
 * there when read (a read-write lock's keys live only on their holders'
 * and waiters' leases). */
static int
view_rows(struct dmutex__admin_view *v, const struct names *ns, struct row **rows,
		size_t *nrows, const struct names *rwns, struct rwrow **rw, size_t *nrw)
{
	int st = 0;

	if ((ns->n && !(*rows = calloc(ns->n, sizeof **rows))) ||
	    (rwns->n && !(*rw = calloc(rwns->n, sizeof **rw)))) {
		cli_err("out of memory");
		return CLI_INTERNAL;
	}
	for (size_t i = 0; !st && i < ns->n; i++) {
		st = cli_view_lock(v, ns->v[i], &(*rows)[*nrows].l);
		(*nrows)++;
	}
	for (size_t i = 0; !st && i < rwns->n; i++) {
		struct cli_rwlock *r = &(*rw)[*nrw].rw;
		st = cli_view_rwlock(v, rwns->v[i], r);
		(*nrw)++;
		/* Gone between the walk and now: not worth a row. */
		if (!st && !r->exists && !r->error[0])
			cli_rwlock_free(&(*rw)[--*nrw].rw);
	}
	return st;
}

/* Over a store read through the library (etcd): the mutexes, then the
 * read-write locks, shown as Redis's. */
static int
list_view(struct dmutex__admin_view *v, const char *pattern, int json)
{
	struct names ns = { 0 }, rwns = { 0 };
	struct cli_conn one = { .nnodes = 1 };
	struct row *rows = NULL;
	struct rwrow *rw = NULL;
	size_t nrows = 0, nrw = 0;
	int status;

	if (!(status = view_names(v, dmutex__admin_view_names, pattern, &ns)) &&
	    !(status = view_names(v, dmutex__admin_view_rw_names, pattern, &rwns)) &&
	    !(status = view_rows(v, &ns, &rows, &nrows, &rwns, &rw, &nrw)))
		status = show(&one, rows, nrows, rw, nrw, json);
	for (size_t i = 0; i < nrows; i++)
		cli_lock_free(&rows[i].l);
	for (size_t i = 0; i < nrw; i++)
		cli_rwlock_free(&rw[i].rw);
	free(rows);
	free(rw);
	names_free(&ns);
	names_free(&rwns);
	return status;
}

int
cli_cmd_list(int argc, char **argv, const char *url)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "url", required_argument, NULL, 'u' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	static const char *const mutex_kinds[3] = { "lock:{", "meta:{", "cond:{" };
	static const char *const rw_kinds[3] = { "rw:{", "rwr:{", "rwq:{" };
	struct cli_conn cc;
	struct dmutex__admin_view *view;
	struct names ns = { 0 }, rwns = { 0 };
	struct row *rows = NULL;
	struct rwrow *rw = NULL;
	size_t nrows = 0, nrw = 0;
	const char *pattern = "*";
	int json = 0, status, st, c;

	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'j': json = 1; break;
		case 'u': url = optarg; break;
		case 'h': fputs(usage, stdout); return CLI_OK;
		default: fputs(usage, stderr); return CLI_USAGE;
		}
	}
	if (argc - optind > 1) {
		fputs(usage, stderr);
		return CLI_USAGE;
	}
	if (optind < argc)
		pattern = argv[optind];
	if ((status = cli_view_open(cli_url(url), &view)) >= 0) {
		if (!status) {
			status = list_view(view, pattern, json);
			dmutex__admin_view_close(view);
		}
		return status;
	}
	if ((status = cli_conn_parse(&cc, cli_url(url))))
		return status;
	if ((status = cli_conn_connect(&cc, 0))) {
		size_t up = 0;
		for (size_t n = 0; n < cc.nnodes; n++)
			up += cc.ctx[n] != NULL;
		if (!up)
			goto out;
	}
	/* A master that did not answer is said, and the others listed. */
	if ((st = scan_all(&cc, mutex_kinds, pattern, &ns)) ||
	    (st = read_rows(&cc, &ns, &rows, &nrows)) ||
	    (st = scan_all(&cc, rw_kinds, pattern, &rwns)) ||
	    (st = read_rw_rows(&cc, &rwns, &rw, &nrw))) {
		status = st;
		goto out;
	}
	if ((st = show(&cc, rows, nrows, rw, nrw, json)) && !status)
		status = st;
out:
	for (size_t i = 0; i < nrows; i++)
		cli_lock_free(&rows[i].l);
	for (size_t i = 0; i < nrw; i++)
		cli_rwlock_free(&rw[i].rw);
	free(rows);
	free(rw);
	names_free(&ns);
	names_free(&rwns);
	cli_conn_close(&cc);
	return status;
}
