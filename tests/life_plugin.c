/*
 * A plugin that uses dmutex, for the life-dlclose test: loaded with dlopen,
 * it takes a lock with a short lease (so the renewal thread runs often) and
 * is unloaded with dlclose while holding it.  Built twice: linked with
 * libdmutex.so, and with the static library inside it.  With
 * LIFE_PLUGIN_CTOR set, it first uses the library from its constructor
 * (before dlopen returns).
 */
#include <stdlib.h>

#include "dmutex.h"

static dmutex_client_t *cli;
static dmutex_t held;
int life_plugin_ctor_rc = -1;

__attribute__((constructor)) static void
plugin_ctor(void)
{
	const char *url = getenv("LIFE_PLUGIN_CTOR");
	dmutex_client_t *c;
	dmutex_attr_t a;
	dmutex_t m;

	if (!url)
		return;
	life_plugin_ctor_rc = dmutex_client_open(&c, url) || dmutex_attr_init(&a) ||
		dmutex_attr_setclient(&a, c) || dmutex_init(&m, "life:dlclose:ctor", &a) ||
		dmutex_lock(&m) || dmutex_unlock(&m) || dmutex_destroy(&m) ||
		dmutex_attr_destroy(&a) || dmutex_client_close(c);
}

__attribute__((visibility("default"))) int
life_plugin_hold(const char *url, const char *name)
{
	dmutex_attr_t a;

	if (dmutex_client_open(&cli, url) || dmutex_attr_init(&a) || dmutex_attr_setclient(&a, cli) ||
			dmutex_attr_setlease(&a, 300) || dmutex_init(&held, name, &a))
		return 1;
	dmutex_attr_destroy(&a);
	return dmutex_lock(&held) ? 2 : 0;
}
