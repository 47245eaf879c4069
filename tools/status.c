/* dmutex status [--json] NAME...: one lock's state as Redis holds it. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
	"usage: dmutex status [--json] [--url URL] NAME...\n"
	"Show each lock's holder (host, pid, thread), since when, lease left,\n"
	"whether its process is alive (when that can be known here), fencing\n"
	"token, robust state, waiting clients and condition variable waiters.\n"
	"A read-write lock of that name is shown too: written (by whom) or read, by how\n"
	"many processes, leases left, fencing token, writers waiting.\n";

static void
print_text(FILE *f, const struct cli_lock *l, const char *node)
{
	char buf[CLI_TEXT_MAX(sizeof l->error)], name[CLI_NAME_TEXT];
	long long now = cli_wall_ms();

	/* Everything from the server escaped (cli_text): names, node
	 * addresses, the error text, hosts. */
	cli_name_text(name, l->name);
	fputs(name, f);
	if (node)
		fprintf(f, " (node %s)", cli_text(buf, sizeof buf, node));
	if (l->error[0]) {
		fprintf(f, ": cannot read: %s\n", cli_text(buf, sizeof buf, l->error));
		return;
	}
	fprintf(f, ": %s\n", l->cached ? "cached" : l->held ? "held" : l->reserved ?
			"free, reserved for the waiting process a release just woke" : "free");
	if (l->cached)
		fputs("  cached:      the holder's process keeps the lease: free for its threads, which\n"
		      "               lock it without asking Redis, unless one of them holds it now;\n"
		      "               another process that asks gets it at that thread's unlock, or\n"
		      "               within a round trip if none holds it\n", f);
	if (l->held) {
		cli_holder(buf, sizeof buf, l, 1);
		fprintf(f, "  holder:      %s\n", buf);
		/* A pid is only a name: never show a dead one as if it held. */
		if (l->alive == 1) {
			fputs("  process:     alive (same machine and pid namespace)\n", f);
		} else if (l->alive == 0) {
			cli_duration(buf, sizeof buf, l->pttl_ms);
			fprintf(f, "  process:     gone; the lock is free when the lease ends in %s\n",
					l->pttl_ms >= 0 ? buf : "(unknown)");
		} else if (l->lease_ms > 0 && l->pttl_ms >= 0) {
			cli_duration(buf, sizeof buf, l->lease_ms - l->pttl_ms);
			fprintf(f, "  process:     on another machine or pid namespace; "
					"last renewed %s ago\n", buf);
		}
		if (l->since_ms >= 0)
			cli_since(f, l->since_ms);
		if (l->pttl_ms >= 0) {
			cli_duration(buf, sizeof buf, l->pttl_ms);
			fprintf(f, "  lease left:  %s", buf);
			if (l->lease_ms > 0) {
				cli_duration(buf, sizeof buf, l->lease_ms);
				fprintf(f, " of %s", buf);
			}
			fputc('\n', f);
		}
		if (l->fence >= 0)
			fprintf(f, "  fence:       %lld\n", l->fence);
		else
			fputs("  fence:       not assigned yet (the holder has not asked for it)\n", f);
	} else if (l->fence_counter >= 0) {
		fprintf(f, "  last fence:  %lld\n", l->fence_counter);
	}
	fprintf(f, "  robust:      %s%s\n", cli_robust_text(l->robust),
			l->held && l->acquired_after_death ?
			" (the holder took over from a holder that died)" : "");
	if (l->waiters >= 0)
		fprintf(f, "  waiting:     %lld client%s\n", l->waiters, l->waiters == 1 ? "" : "s");
	if (l->cond_waiters > 0)
		fprintf(f, "  cond waits:  %lld thread%s on condition variable '%s'\n",
				l->cond_waiters, l->cond_waiters == 1 ? "" : "s", name);
	for (size_t i = 0; i < l->ncond; i++) {
		const struct cli_cond_waiter *w = &l->cond[i];
		if (w->pid < 0) {
			fputs("    (a waiter that did not say who it is)\n", f);
			continue;
		}
		char host[CLI_TEXT_MAX(sizeof w->host)];
		cli_duration(buf, sizeof buf, now - w->since_ms);
		fprintf(f, "    %s pid %lld tid %lld, waiting for %s%s\n",
				cli_text(host, sizeof host, w->host), w->pid, w->tid, buf,
				w->alive == 0 ? " (process gone)" : w->alive == 1 ? " (alive)" : "");
	}
	if (l->cond_waiters > (long long)l->ncond && l->ncond == CLI_COND_SHOWN)
		fprintf(f, "    ... and %lld more\n", l->cond_waiters - (long long)l->ncond);
}

/* One object or block of output, separated from the one before. */
static void
show_lock(const struct cli_lock *l, const char *node, int json, int *first)
{
	if (!*first)
		fputc(json ? ',' : '\n', stdout);
	if (json)
		cli_json_lock(stdout, l, node);
	else
		print_text(stdout, l, node);
	*first = 0;
}

static void
show_rwlock(const struct cli_rwlock *rw, const char *node, int json, int *first)
{
	if (!*first)
		fputc(json ? ',' : '\n', stdout);
	if (json)
		cli_json_rwlock(stdout, rw, node);
	else
		cli_rw_print_text(stdout, rw, node);
	*first = 0;
}

/* A name's mutex and read-write lock as read (separate keys), each shown
 * when there (the JSON keeps its one "exists": false object for a name
 * that is neither).  *exists |= something there; *bad = CLI_BACKEND
 * (said) when one could not be read.  Redis's and etcd's alike. */
static void
show_both(const struct cli_lock *l, const struct cli_rwlock *rw, const char *node, int json,
		int *first, int *exists, int *bad)
{
	/* Unreadable is not absent: the error says what is there. */
	int mx = l->exists || l->error[0], rx = rw->exists || rw->error[0];

	if (l->error[0])
		cli_err("'%s': %s", l->name, l->error);
	if (rw->error[0])
		cli_err("'%s': %s", rw->name, rw->error);
	if (l->error[0] || rw->error[0])
		*bad = CLI_BACKEND;
	if (mx || (json && !rx))
		show_lock(l, node, json, first);
	if (rx)
		show_rwlock(rw, node, json, first);
	*exists |= mx || rx;
}

/* Name on one master.  0, or the status of a failed connection. */
static int
show_node(struct dmutex__conn *c, const char *prefix, const char *name, const char *node,
		int json, int *first, int *exists, int *bad)
{
	struct cli_lock l;
	struct cli_rwlock rw;
	int status;

	if ((status = cli_inspect(c, prefix, name, &l))) {
		cli_lock_free(&l);
		return status;
	}
	if ((status = cli_rw_inspect(c, prefix, name, &rw))) {
		cli_lock_free(&l);
		cli_rwlock_free(&rw);
		return status;
	}
	show_both(&l, &rw, node, json, first, exists, bad);
	cli_lock_free(&l);
	cli_rwlock_free(&rw);
	return 0;
}

/* Over a store read through the library (etcd): each name once, shown
 * as show_node shows Redis's. */
static int
status_view(struct dmutex__admin_view *v, char **names, int n, int json)
{
	int status = 0, first = 1;

	if (json)
		fputc('[', stdout);
	for (int i = 0; i < n; i++) {
		struct cli_lock l;
		struct cli_rwlock rw = { 0 };
		int exists = 0, st;

		if (!(st = cli_view_lock(v, names[i], &l)) && !(st = cli_view_rwlock(v, names[i], &rw)))
			show_both(&l, &rw, NULL, json, &first, &exists, &status);
		cli_lock_free(&l);
		cli_rwlock_free(&rw);
		if (st) {
			status = st;
			break;
		}
		if (!exists) {
			cli_err("no such lock '%s'", names[i]);
			if (!status)
				status = CLI_NOLOCK;
		}
	}
	if (json)
		fputs("]\n", stdout);
	return status;
}

int
cli_cmd_status(int argc, char **argv, const char *url)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "url", required_argument, NULL, 'u' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_conn cc;
	struct dmutex__admin_view *view;
	int json = 0, status = 0, c, first = 1;

	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'j': json = 1; break;
		case 'u': url = optarg; break;
		case 'h': fputs(usage, stdout); return CLI_OK;
		default: fputs(usage, stderr); return CLI_USAGE;
		}
	}
	if (optind >= argc) {
		fputs(usage, stderr);
		return CLI_USAGE;
	}
	for (int i = optind; i < argc; i++)
		if (cli_check_name(argv[i]))
			return CLI_USAGE;
	if ((c = cli_view_open(cli_url(url), &view)) >= 0) {
		if (!c) {
			status = status_view(view, argv + optind, argc - optind, json);
			dmutex__admin_view_close(view);
		}
		return c ? c : status;
	}
	if ((c = cli_conn_parse(&cc, cli_url(url))))
		return c;
	/* With several nodes (Redlock), show the reachable ones. */
	if ((status = cli_conn_connect(&cc, 0))) {
		size_t up = 0;
		for (size_t n = 0; n < cc.nnodes; n++)
			up += cc.ctx[n] != NULL;
		if (!up)
			goto out;
	}
	if (json)
		fputc('[', stdout);
	for (int i = optind; i < argc; i++) {
		int exists = 0;
		for (size_t n = 0; n < cc.nnodes; n++) {
			const char *node = cc.nnodes > 1 ? cli_conn_node(&cc, n) : NULL;
			int st;

			if (!cc.ctx[n] || !cli_conn_serves(&cc, n, argv[i]))
				continue;
			if ((st = show_node(cc.ctx[n], cc.prefix, argv[i], node, json, &first, &exists,
					&status))) {
				status = st;
				goto done;
			}
		}
		if (!exists) {
			cli_err("no such lock '%s'", argv[i]);
			if (!status)
				status = CLI_NOLOCK;
		}
	}
done:
	if (json)
		fputs("]\n", stdout);
out:
	cli_conn_close(&cc);
	return status;
}
