/*
 * libFuzzer target: the URL parser (src/core/url.c).  Any input is either a
 * configuration within the documented ranges or an error with a log line;
 * never a crash, a leak, or a password in a log line or a display URL.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dmutex.h"
#include "core/url.h"

static const char *secret;
static int leaked;

static void
logger(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	if (secret && strstr(msg, secret))
		leaked = 1;
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	dmutex_set_logger(logger, NULL);
	return 0;
}

/* "PASSWORD" when it stands, once, in the password of the URL's first
 * userinfo ("scheme://[user]:...PASSWORD...@"), where no log line may
 * show it; else NULL (elsewhere a log line may quote it). */
static const char *
password_marker(const char *url)
{
	const char *marker = "PASSWORD", *m = strstr(url, marker), *s = strstr(url, "://");

	if (!m || !s || strstr(m + 1, marker) || m < s + 3)
		return NULL;
	size_t ui = strcspn(s + 3, "@/?#,");
	if (s[3 + ui] != '@' || m + strlen(marker) > s + 3 + ui)
		return NULL;
	const char *colon = memchr(s + 3, ':', ui);
	return colon && colon < m ? marker : NULL;
}

/*
 * "PASSWORD" also when, standing once, a writer may have meant it as part
 * of a password written raw, which the parser then reads otherwise
 * (issue 30): (a) after a ':' that follows the first "://", with no '@'
 * between that "://" and it and an '@' somewhere after it (a userinfo's
 * password holding ",scheme://", '&', ',' or anything else: the list or
 * the options the parser sees instead); (b) anywhere after
 * "?sentinel_password=" or "&sentinel_password=" (a raw '&' or
 * ",scheme://" makes the rest options or nodes).  No log line may show
 * it, whatever the parser made of the rest.
 */
static const char *
raw_password_marker(const char *url)
{
	const char *marker = "PASSWORD", *m = strstr(url, marker), *s = strstr(url, "://");
	const char *k;

	if (!m || strstr(m + 1, marker))
		return NULL;
	for (k = url; (k = strstr(k, "sentinel_password=")); k++)
		if (k > url && (k[-1] == '?' || k[-1] == '&') && k + 18 <= m)
			return marker;
	if (!s || m < s + 3 || !strchr(m + strlen(marker), '@'))
		return NULL;
	for (const char *c = s + 3; c < m; c++)
		if (*c == '@')
			return NULL;
	return memchr(s + 3, ':', (size_t)(m - s - 3)) ? marker : NULL;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dmutex__config cfg;
	char *url = malloc(size + 1);
	int rc;

	if (!url)
		return 0;
	memcpy(url, data, size);
	url[size] = '\0';
	secret = password_marker(url);
	if (!secret)
		secret = raw_password_marker(url);
	leaked = 0;
	rc = dmutex__url_parse(url, &cfg);
	if (rc == 0) {
		if (cfg.nnodes < 1 || !cfg.nodes || !cfg.prefix ||
		    cfg.lease_ms < DMUTEX_LEASE_MIN || cfg.lease_ms > DMUTEX_LEASE_MAX ||
		    cfg.connect_timeout_ms < 1 || cfg.connect_timeout_ms > 600000 ||
		    cfg.command_timeout_ms < 1 || cfg.command_timeout_ms > 600000 ||
		    strlen(cfg.prefix) > 128)
			abort();
		for (size_t i = 0; i < cfg.nnodes; i++) {
			const struct dmutex__node_addr *a = &cfg.nodes[i];
			/* A node is reached one way: a host, a unix path, the
			 * sentinels that name its master, or a cluster's seeds. */
			int ways = !!a->host + !!a->path + !!a->nsentinels + !!a->nseeds;
			if (!a->display || ways != 1 || !a->sentinels != !a->nsentinels ||
			    !a->seeds != !a->nseeds)
				abort();
			for (size_t j = 0; j < a->nsentinels; j++)
				if (!a->sentinels[j].host || !a->sentinels[j].display)
					abort();
			for (size_t j = 0; j < a->nseeds; j++)
				if (!a->seeds[j].host)
					abort();
			/* The marker, once in the input and no percent-decoding
			 * about, in the password: the display must not show it. */
			if (a->password && strstr(a->password, "PASSWORD") && !strchr(url, '%') &&
			    !strstr(strstr(url, "PASSWORD") + 1, "PASSWORD") && strstr(a->display, "PASSWORD"))
				abort();
		}
		dmutex__config_free(&cfg);
	} else if (rc != EINVAL && rc != ENOTSUP && rc != ENOMEM) {
		abort();
	}
	if (leaked)
		abort();
	free(url);
	return 0;
}
