/* dmutex metrics [--top N] [--listen ADDR:PORT]: the per-lock counters of
 * every process, in the Prometheus text format, printed or served. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
	"usage: dmutex metrics [--top N] [--listen ADDR:PORT] [--url URL]\n"
	"Print the per-lock counters every process added to Redis, in the\n"
	"Prometheus text format: the N busiest names (default 20) one by one,\n"
	"the rest summed as name=\"(other)\".  --listen serves them over HTTP at\n"
	"/metrics instead, read afresh for each scrape, until SIGINT or SIGTERM.\n";

struct job {
	const char *url;
	size_t top;
};

static int
render(FILE *f, void *arg)
{
	const struct job *j = arg;
	struct cli_metrics m;
	struct cli_conn cc;
	int st;

	if ((st = cli_conn_open(&cc, cli_url(j->url))))
		return st;
	if (!(st = cli_metrics_read(cli_conn_counters(&cc), cc.prefix, j->top, &m))) {
		cli_prom_write(f, &m);
		cli_metrics_free(&m);
	}
	cli_conn_close(&cc);
	return st;
}

int
cli_cmd_metrics(int argc, char **argv, const char *url)
{
	static const struct option opts[] = {
		{ "top", required_argument, NULL, 't' },
		{ "listen", required_argument, NULL, 'l' },
		{ "url", required_argument, NULL, 'u' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct job j = { .top = 20 };
	const char *listen = NULL;
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 't':
			j.top = strtoul(optarg, &end, 10);
			if (*end || !*optarg || optarg[0] == '-' || j.top > 100000) {
				cli_err("--top wants a number of names, 0 to 100000, not '%s'", optarg);
				return CLI_USAGE;
			}
			break;
		case 'l': listen = optarg; break;
		case 'u': url = optarg; break;
		case 'h': fputs(usage, stdout); return CLI_OK;
		default: fputs(usage, stderr); return CLI_USAGE;
		}
	}
	if (optind < argc) {
		fputs(usage, stderr);
		return CLI_USAGE;
	}
	j.url = url;
	if (listen)
		return cli_http_serve(listen, render, &j);
	return render(stdout, &j);
}
