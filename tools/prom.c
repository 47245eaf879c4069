/*
 * The counters in the Prometheus text exposition format (version 0.0.4):
 * names with the dmutex_ prefix, _total for counters, _seconds for time,
 * one series per lock name and name="(other)" for the names past the top.
 */
#include <stdio.h>

#include "cli.h"

/* Label values are UTF-8 text: a lock name is any bytes, so bytes outside
 * printable ASCII (and % itself) are written %XX, which keeps two names
 * from ever sharing a series; \ and " are escaped as the format wants. */
static void
label(FILE *f, const struct cli_metset *s)
{
	fputs("{name=\"", f);
	if (s->other) {
		fputs("(other)", f);
	} else {
		for (const unsigned char *p = (const unsigned char *)s->name; *p; p++) {
			if (*p < 0x20 || *p >= 0x7f || *p == '%')
				fprintf(f, "%%%02X", *p);
			else if (*p == '\\' || *p == '"')
				fprintf(f, "\\%c", *p);
			else
				putc(*p, f);
		}
	}
	putc('"', f);
}

static void
counter(FILE *f, const struct cli_metrics *m, const char *name, const char *help, int field)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
	for (size_t i = 0; i < m->n; i++) {
		fputs(name, f);
		label(f, &m->sets[i]);
		fprintf(f, "} %llu\n", (unsigned long long)m->sets[i].v[field]);
	}
}

static void
histogram(FILE *f, const struct cli_metrics *m, const char *name, const char *help,
		int b0, int sum_us)
{
	static const double bounds[] = DMUTEX__MET_BOUNDS;

	fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (size_t i = 0; i < m->n; i++) {
		const struct cli_metset *s = &m->sets[i];
		unsigned long long cum = 0;
		for (int b = 0; b < DMUTEX__MET_BUCKETS; b++) {
			cum += s->v[b0 + b];
			fprintf(f, "%s_bucket", name);
			label(f, s);
			if (b < DMUTEX__MET_BUCKETS - 1)
				fprintf(f, ",le=\"%g\"} %llu\n", bounds[b], cum);
			else
				fprintf(f, ",le=\"+Inf\"} %llu\n", cum);
		}
		fprintf(f, "%s_sum", name);
		label(f, s);
		fprintf(f, "} %.6f\n", (double)s->v[sum_us] / 1e6);
		fprintf(f, "%s_count", name);
		label(f, s);
		/* The count is the +Inf bucket's, whatever a partial flush did. */
		fprintf(f, "} %llu\n", cum);
	}
}

void
cli_prom_write(FILE *f, const struct cli_metrics *m)
{
	counter(f, m, "dmutex_acquisitions_total", "Locks acquired, by lock name.", DMUTEX__MET_ACQ);
	counter(f, m, "dmutex_contended_acquisitions_total",
			"Locks acquired after waiting for another holder.", DMUTEX__MET_CONTENDED);
	counter(f, m, "dmutex_leases_lost_total", "Holds lost before their unlock (onlost).",
			DMUTEX__MET_LOST);
	counter(f, m, "dmutex_renewals_total", "Lease renewals confirmed by the backend.",
			DMUTEX__MET_RENEWALS);
	counter(f, m, "dmutex_backend_errors_total", "Backend calls that failed.",
			DMUTEX__MET_ERRORS);
	histogram(f, m, "dmutex_wait_seconds", "Time a lock call waited before it acquired.",
			DMUTEX__MET_WAIT_B0, DMUTEX__MET_WAIT_US);
	histogram(f, m, "dmutex_hold_seconds",
			"Time a hold lasted, lock to unlock (or to its loss, or its thread's end).",
			DMUTEX__MET_HOLD_B0, DMUTEX__MET_HOLD_US);
}
