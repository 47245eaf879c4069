/* A read-write lock for people (status) and for scripts (JSON). */
#include <stdio.h>

#include "cli.h"

void
cli_rw_state(char *buf, size_t len, const struct cli_rwlock *rw)
{
	if (rw->writing)
		snprintf(buf, len, "written");
	else if (rw->readers > 0)
		snprintf(buf, len, "read by %lld process%s", rw->readers, rw->readers == 1 ? "" : "es");
	else
		snprintf(buf, len, "free");
}

/* The writer as it recorded itself, escaped (cli_text) as a mutex's
 * holder is; a pid is only a name: a dead one is said to be gone. */
static void
writer_text(FILE *f, const struct cli_rwlock *rw)
{
	char host[CLI_TEXT_MAX(sizeof rw->writer_host)];

	if (!rw->writer_host[0]) {
		fputs("  writer:      not recorded (its client wrote only its token)\n", f);
		return;
	}
	fprintf(f, "  writer:      %s pid %lld tid %lld%s\n",
			cli_text(host, sizeof host, rw->writer_host), rw->writer_pid, rw->writer_tid,
			rw->writer_alive == 0 ? " (process gone)" : "");
	if (rw->writer_alive == 1)
		fputs("  process:     alive (same machine and pid namespace)\n", f);
	cli_since(f, rw->writer_since_ms);
}

void
cli_rw_print_text(FILE *f, const struct cli_rwlock *rw, const char *node)
{
	char buf[CLI_TEXT_MAX(sizeof rw->error)], name[CLI_NAME_TEXT];

	cli_name_text(name, rw->name);
	fprintf(f, "%s (read-write lock)", name);
	if (node)
		fprintf(f, " (node %s)", cli_text(buf, sizeof buf, node));
	if (rw->error[0]) {
		fprintf(f, ": cannot read: %s\n", cli_text(buf, sizeof buf, rw->error));
		return;
	}
	cli_rw_state(buf, sizeof buf, rw);
	fprintf(f, ": %s\n", buf);
	if (rw->writing) {
		writer_text(f, rw);
		cli_duration(buf, sizeof buf, rw->write_left_ms);
		fprintf(f, "  lease left:  %s\n", buf);
		fprintf(f, "  fence:       %lld\n", rw->fence);
	} else if (rw->fence >= 0) {
		fprintf(f, "  last fence:  %lld\n", rw->fence);
	}
	fprintf(f, "  readers:     %lld process%s", rw->readers, rw->readers == 1 ? "" : "es");
	if (rw->readers > 0) {
		cli_duration(buf, sizeof buf, rw->read_left_ms);
		fprintf(f, ", longest lease left %s", buf);
	}
	fprintf(f, "\n  waiting:     %lld writer%s\n", rw->writers_waiting,
			rw->writers_waiting == 1 ? "" : "s");
}

static void
num_or_null(FILE *f, const char *key, long long v)
{
	if (v >= 0)
		fprintf(f, ",\"%s\":%lld", key, v);
	else
		fprintf(f, ",\"%s\":null", key);
}

void
cli_json_rwlock(FILE *f, const struct cli_rwlock *rw, const char *node)
{
	fputs("{\"name\":", f);
	cli_json_str(f, rw->name);
	fputs(",\"kind\":\"rwlock\"", f);
	if (node) {
		fputs(",\"node\":", f);
		cli_json_str(f, node);
	}
	if (rw->error[0]) {
		fputs(",\"error\":", f);
		cli_json_str(f, rw->error);
		putc('}', f);
		return;
	}
	fprintf(f, ",\"exists\":%s,\"writing\":%s", rw->exists ? "true" : "false",
			rw->writing ? "true" : "false");
	num_or_null(f, "write_lease_left_ms", rw->writing ? rw->write_left_ms : -1);
	num_or_null(f, "fence", rw->writing ? rw->fence : -1);
	num_or_null(f, "fence_counter", rw->fence);
	fputs(",\"writer\":", f);
	if (rw->writing && rw->writer_host[0]) {
		fputs("{\"host\":", f);
		cli_json_str(f, rw->writer_host);
		fprintf(f, ",\"pid\":%lld,\"tid\":%lld,\"since_ms\":%lld,\"alive\":%s}",
				rw->writer_pid, rw->writer_tid, rw->writer_since_ms,
				rw->writer_alive < 0 ? "null" : rw->writer_alive ? "true" : "false");
	} else {
		fputs("null", f);
	}
	fprintf(f, ",\"readers\":%lld", rw->readers);
	num_or_null(f, "read_lease_left_ms", rw->readers > 0 ? rw->read_left_ms : -1);
	fprintf(f, ",\"writers_waiting\":%lld}", rw->writers_waiting);
}
