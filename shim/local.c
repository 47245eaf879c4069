/* Which objects stay process-local (local.h). */
#include <ctype.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/dmutex_shim.h"
#include "core/shim.h"
#include "local.h"

#define MAX_GLOBS 64

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char *globs[MAX_GLOBS];
static int n_globs;

/* $DMUTEX_SHIM_LOCAL, read once: a program's objects do not change sides
 * while it runs. */
static void
read_env(void)
{
	const char *v = getenv("DMUTEX_SHIM_LOCAL");
	char *copy, *tok, *save;

	if (!v || !*v || !(copy = strdup(v)))
		return;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *end = tok + strlen(tok);

		while (isspace((unsigned char)*tok))
			tok++;
		while (end > tok && isspace((unsigned char)end[-1]))
			*--end = '\0';
		if (!*tok)
			continue;
		if (n_globs == MAX_GLOBS) {
			dmutex__log(DMUTEX_LOG_WARN, "DMUTEX_SHIM_LOCAL: more than %d patterns; the rest are ignored",
					MAX_GLOBS);
			break;
		}
		globs[n_globs++] = tok;
	}
	/* copy lives as long as the process: globs point into it */
}

const char *
dmutex__shim_site_text(const char *site)
{
	return site && *site == DMUTEX__SHIM_LOCAL_MARK[0] ? site + 1 : site;
}

int
dmutex__shim_is_local(const char *site, const char *name)
{
	const char *text = dmutex__shim_site_text(site), *base, *colon;
	char buf[1100];

	if (site && *site == DMUTEX__SHIM_LOCAL_MARK[0])
		return 1;
	pthread_once(&once, read_env);
	if (!n_globs)
		return 0;
	/* FILE:LINE with the file's base name ("@MODULE+0xOFFSET" as is) */
	if (text && (colon = strrchr(text, ':'))) {
		for (base = colon; base > text && base[-1] != '/'; base--)
			;
		snprintf(buf, sizeof buf, "%s", base);
		text = buf;
	}
	for (int i = 0; i < n_globs; i++)
		if ((text && !fnmatch(globs[i], text, 0)) || (name && !fnmatch(globs[i], name, 0)))
			return 1;
	return 0;
}
