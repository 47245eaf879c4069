/* The result rows, and their two forms: a Markdown table and JSON. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MAX_ROWS 64
#define MAX_TARGETS 24

static struct row rows[MAX_ROWS];
static size_t nrows;

static struct tline {
	char target[160];
	char figures[300];
	int met;
} tlines[MAX_TARGETS];
static size_t ntlines;

struct row *
row_new(int scenario, const char *label)
{
	struct row *r;

	if (nrows == MAX_ROWS) {
		fprintf(stderr, "bench: too many result rows\n");
		exit(2);
	}
	r = &rows[nrows++];
	memset(r, 0, sizeof *r);
	r->scenario = scenario;
	snprintf(r->label, sizeof r->label, "%s", label);
	r->median_ns = r->p99_ns = r->ratio = NAN;
	r->met = MET_NA;
	return r;
}

void
row_metric(struct row *r, const char *key, double v, const char *unit)
{
	struct metric *m;

	if (r->nm == ROW_METRICS)
		return;
	m = &r->m[r->nm++];
	snprintf(m->key, sizeof m->key, "%s", key);
	snprintf(m->unit, sizeof m->unit, "%s", unit);
	m->v = v;
}

double
row_metric_of(const struct row *r, const char *key)
{
	for (int k = 0; k < r->nm; k++)
		if (!strcmp(r->m[k].key, key))
			return r->m[k].v;
	return NAN;
}

void
row_target(struct row *r, int met, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->target, sizeof r->target, fmt, ap);
	va_end(ap);
	r->met = met;
}

void
row_note(struct row *r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->note, sizeof r->note, fmt, ap);
	va_end(ap);
}

void
target_line(const char *target, int met, const char *fmt, ...)
{
	struct tline *t;
	va_list ap;

	if (ntlines == MAX_TARGETS) {
		fprintf(stderr, "bench: too many target lines\n");
		exit(2);
	}
	/* In the order, not the run's: after the last line with a
	 * number not above this one's. */
	t = &tlines[ntlines];
	while (t > tlines && atoi(t[-1].target) > atoi(target)) {
		t[0] = t[-1];
		t--;
	}
	ntlines++;
	snprintf(t->target, sizeof t->target, "%s", target);
	va_start(ap, fmt);
	vsnprintf(t->figures, sizeof t->figures, fmt, ap);
	va_end(ap);
	t->met = met;
}

size_t
rows_count(void)
{
	return nrows;
}

struct row *
rows_at(size_t i)
{
	return i < nrows ? &rows[i] : NULL;
}

/* ---- text ---- */

static const char *
fmt_time(char *buf, size_t len, double ns)
{
	if (isnan(ns))
		snprintf(buf, len, "–");
	else if (ns < 1e3)
		snprintf(buf, len, "%.0f ns", ns);
	else if (ns < 1e6)
		snprintf(buf, len, "%.1f µs", ns / 1e3);
	else if (ns < 1e9)
		snprintf(buf, len, "%.2f ms", ns / 1e6);
	else
		snprintf(buf, len, "%.2f s", ns / 1e9);
	return buf;
}

static const char *
fmt_value(char *buf, size_t len, double v, const char *unit)
{
	if (isnan(v))
		snprintf(buf, len, "–");
	else if (!strcmp(unit, "ns"))
		fmt_time(buf, len, v);
	else if (!strcmp(unit, "/s"))
		snprintf(buf, len, v >= 1e4 ? "%.0fk/s" : "%.0f/s", v >= 1e4 ? v / 1e3 : v);
	else if (!strcmp(unit, "%"))
		snprintf(buf, len, "%.1f %%", v);
	else if (!strcmp(unit, "x"))
		snprintf(buf, len, "%.2f×", v);
	else if (v == floor(v) && fabs(v) < 1e12)
		snprintf(buf, len, "%.0f", v);
	else
		snprintf(buf, len, "%.3g", v);
	return buf;
}

static void
print_machine(const struct bench *b, FILE *f)
{
	fprintf(f, "machine: %d CPUs, %s; kernel %s; redis %s; hiredis %d.%d; load average %s at start; "
			"%s mode; %s\n", b->nproc, b->cpu, b->kernel, b->redis_version, HIREDIS_MAJOR,
			HIREDIS_MINOR, b->loadavg, b->opt.quick ? "quick" : "full", b->started);
	fprintf(f, "command: %s\n", b->opt.cmdline);
	fprintf(f, "floor: PING %.1f µs", b->ping_ns / 1e3);
	if (b->ping_same_ns > 0)
		fprintf(f, " (pinned: %.1f µs on one CPU, %.1f µs across two)", b->ping_same_ns / 1e3,
				b->ping_cross_ns / 1e3);
	fprintf(f, ", hand-made cycle %.1f µs (medians, this run)\n\n", b->cycle_ns / 1e3);
}

void
report_table(const struct bench *b)
{
	char t1[32], t2[32], v[48];

	print_machine(b, stdout);
	printf("| # | scenario | median | p99 | vs floor | figures | target |\n");
	printf("|---|---|---|---|---|---|---|\n");
	for (size_t i = 0; i < nrows; i++) {
		struct row *r = &rows[i];
		printf("| %d | %s | %s | %s | ", r->scenario, r->label,
				fmt_time(t1, sizeof t1, r->median_ns), fmt_time(t2, sizeof t2, r->p99_ns));
		if (isnan(r->ratio))
			printf("– | ");
		else
			printf("%.2f× %s | ", r->ratio, r->ratio_to);
		for (int k = 0; k < r->nm; k++)
			printf("%s%s %s", k ? ", " : "", r->m[k].key,
					fmt_value(v, sizeof v, r->m[k].v, r->m[k].unit));
		printf(" | %s%s |\n", r->target,
				r->met == MET_YES ? ": **met**" : r->met == MET_NO ? ": **not met**" : "");
	}
	for (size_t i = 0; i < nrows; i++)
		if (rows[i].note[0])
			printf("\n* %d, %s: %s", rows[i].scenario, rows[i].label, rows[i].note);
	printf("\n");
	if (!ntlines)
		return;
	printf("\n## Issue 28 targets, this run\n\n");
	printf("| target | figures | MET |\n|---|---|---|\n");
	for (size_t i = 0; i < ntlines; i++)
		printf("| %s | %s | %s |\n", tlines[i].target, tlines[i].figures,
				tlines[i].met == MET_YES ? "yes" : tlines[i].met == MET_NO ? "**no**" : "–");
}

void
report_peers(const struct bench *b, const struct peer *p, size_t np)
{
	const struct row *unc = NULL, *ho[HANDOFF_SETS] = { 0 };
	char t1[32], t2[32];

	for (size_t i = 0; i < nrows; i++) {
		/* dmutex's own rows, not the "(why)" references */
		if (rows[i].scenario == 2 && !strncmp(rows[i].label, "dmutex_lock", 11))
			unc = &rows[i];
		if (rows[i].scenario == 4 && !strncmp(rows[i].label, "contended", 9))
			for (int k = 0; k < HANDOFF_SETS; k++)
				for (int j = 0; j < rows[i].nm; j++)
					if (!strcmp(rows[i].m[j].key, "processes") &&
							rows[i].m[j].v == bench_handoff_procs[k])
						ho[k] = &rows[i];
	}
	(void)b;
	printf("\n## dmutex vs peers (same redis-server, same run)\n\n");
	printf("Ratios are peer ÷ dmutex for times and dmutex ÷ peer for acquisitions/s: "
			"above 1 means dmutex does better.\n\n");
	printf("| library | uncontended lock+unlock median (p99) | × | ");
	for (int k = 0; k < HANDOFF_SETS; k++)
		printf("%d procs: acq/s, handoff median, min–max share | × acq/s | × handoff | ",
				bench_handoff_procs[k]);
	printf("\n|---|---|---|");
	for (int k = 0; k < HANDOFF_SETS; k++)
		printf("---|---|---|");
	printf("\n");
	if (unc) {
		printf("| dmutex | %s (%s) | 1 | ", fmt_time(t1, sizeof t1, unc->median_ns),
				fmt_time(t2, sizeof t2, unc->p99_ns));
		for (int k = 0; k < HANDOFF_SETS; k++) {
			double acq = NAN, lo = NAN, hi = NAN;
			if (!ho[k]) {
				printf("– | – | – | ");
				continue;
			}
			for (int j = 0; j < ho[k]->nm; j++) {
				if (!strcmp(ho[k]->m[j].key, "acq/s"))
					acq = ho[k]->m[j].v;
				if (!strcmp(ho[k]->m[j].key, "min share"))
					lo = ho[k]->m[j].v;
				if (!strcmp(ho[k]->m[j].key, "max share"))
					hi = ho[k]->m[j].v;
			}
			printf("%.0f, %s, %.0f–%.0f %% | 1 | 1 | ", acq,
					fmt_time(t1, sizeof t1, ho[k]->median_ns), lo, hi);
		}
		printf("\n");
	}
	for (size_t i = 0; i < np; i++) {
		if (!p[i].ok) {
			printf("| %s | not run: %s |\n", p[i].name, p[i].why);
			continue;
		}
		printf("| %s | %s (%s) | %.2f | ", p[i].name, fmt_time(t1, sizeof t1, p[i].unc_median_ns),
				fmt_time(t2, sizeof t2, p[i].unc_p99_ns),
				unc ? p[i].unc_median_ns / unc->median_ns : NAN);
		for (int k = 0; k < HANDOFF_SETS; k++) {
			const struct peer_handoff *h = NULL;
			double acq = NAN;
			for (int j = 0; j < p[i].nh; j++)
				if (p[i].h[j].procs == bench_handoff_procs[k])
					h = &p[i].h[j];
			if (!h) {
				printf("– | – | – | ");
				continue;
			}
			if (ho[k])
				for (int j = 0; j < ho[k]->nm; j++)
					if (!strcmp(ho[k]->m[j].key, "acq/s"))
						acq = ho[k]->m[j].v;
			printf("%.0f, %s, %.0f–%.0f %% | %.2f | %.2f | ", h->acq_per_s,
					fmt_time(t1, sizeof t1, h->median_ns), h->min_share * 100, h->max_share * 100,
					acq / h->acq_per_s, ho[k] ? h->median_ns / ho[k]->median_ns : NAN);
		}
		printf("\n");
	}
}

/* ---- JSON ---- */

static void
json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void
json_num(FILE *f, double v)
{
	if (isnan(v) || isinf(v))
		fprintf(f, "null");
	else
		fprintf(f, "%.17g", v);
}

void
report_json(const struct bench *b, const struct peer *p, size_t np)
{
	FILE *f = stdout;

	fprintf(f, "{\n  \"machine\": {\"nproc\": %d, \"cpu\": ", b->nproc);
	json_str(f, b->cpu);
	fprintf(f, ", \"kernel\": ");
	json_str(f, b->kernel);
	fprintf(f, ", \"redis\": ");
	json_str(f, b->redis_version);
	fprintf(f, ", \"hiredis\": \"%d.%d\", \"loadavg\": ", HIREDIS_MAJOR, HIREDIS_MINOR);
	json_str(f, b->loadavg);
	fprintf(f, "},\n  \"mode\": \"%s\",\n  \"started\": ", b->opt.quick ? "quick" : "full");
	json_str(f, b->started);
	fprintf(f, ",\n  \"command\": ");
	json_str(f, b->opt.cmdline);
	fprintf(f, ",\n  \"floor\": {\"ping_ns\": ");
	json_num(f, b->ping_ns);
	fprintf(f, ", \"ping_one_cpu_ns\": ");
	json_num(f, b->ping_same_ns > 0 ? b->ping_same_ns : NAN);
	fprintf(f, ", \"ping_two_cpus_ns\": ");
	json_num(f, b->ping_cross_ns > 0 ? b->ping_cross_ns : NAN);
	fprintf(f, ", \"cycle_ns\": ");
	json_num(f, b->cycle_ns);
	fprintf(f, "},\n  \"rows\": [");
	for (size_t i = 0; i < nrows; i++) {
		struct row *r = &rows[i];
		fprintf(f, "%s\n    {\"scenario\": %d, \"label\": ", i ? "," : "", r->scenario);
		json_str(f, r->label);
		fprintf(f, ", \"median_ns\": ");
		json_num(f, r->median_ns);
		fprintf(f, ", \"p99_ns\": ");
		json_num(f, r->p99_ns);
		fprintf(f, ", \"ratio\": ");
		json_num(f, r->ratio);
		fprintf(f, ", \"ratio_to\": ");
		json_str(f, r->ratio_to);
		fprintf(f, ", \"metrics\": {");
		for (int k = 0; k < r->nm; k++) {
			fprintf(f, "%s", k ? ", " : "");
			json_str(f, r->m[k].key);
			fprintf(f, ": ");
			json_num(f, r->m[k].v);
		}
		fprintf(f, "}, \"target\": ");
		json_str(f, r->target);
		fprintf(f, ", \"met\": %s, \"note\": ",
				r->met == MET_YES ? "true" : r->met == MET_NO ? "false" : "null");
		json_str(f, r->note);
		fprintf(f, "}");
	}
	fprintf(f, "\n  ],\n  \"targets\": [");
	for (size_t i = 0; i < ntlines; i++) {
		fprintf(f, "%s\n    {\"target\": ", i ? "," : "");
		json_str(f, tlines[i].target);
		fprintf(f, ", \"figures\": ");
		json_str(f, tlines[i].figures);
		fprintf(f, ", \"met\": %s}", tlines[i].met == MET_YES ? "true"
				: tlines[i].met == MET_NO ? "false" : "null");
	}
	fprintf(f, "\n  ],\n  \"peers\": [");
	for (size_t i = 0; i < np; i++) {
		fprintf(f, "%s\n    {\"name\": ", i ? "," : "");
		json_str(f, p[i].name);
		fprintf(f, ", \"ok\": %s", p[i].ok ? "true" : "false");
		if (!p[i].ok) {
			fprintf(f, ", \"why\": ");
			json_str(f, p[i].why);
			fprintf(f, "}");
			continue;
		}
		fprintf(f, ", \"uncontended_median_ns\": ");
		json_num(f, p[i].unc_median_ns);
		fprintf(f, ", \"uncontended_p99_ns\": ");
		json_num(f, p[i].unc_p99_ns);
		fprintf(f, ", \"handoff\": [");
		for (int k = 0; k < p[i].nh; k++) {
			const struct peer_handoff *h = &p[i].h[k];
			fprintf(f, "%s{\"procs\": %d, \"acq_per_s\": ", k ? ", " : "", h->procs);
			json_num(f, h->acq_per_s);
			fprintf(f, ", \"median_ns\": ");
			json_num(f, h->median_ns);
			fprintf(f, ", \"p99_ns\": ");
			json_num(f, h->p99_ns);
			fprintf(f, ", \"min_share\": ");
			json_num(f, h->min_share);
			fprintf(f, ", \"max_share\": ");
			json_num(f, h->max_share);
			fprintf(f, "}");
		}
		fprintf(f, "]}");
	}
	fprintf(f, "\n  ]\n}\n");
}
