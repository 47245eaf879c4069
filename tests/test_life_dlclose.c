/*
 * life-dlclose (issue 16 item 1): a plugin that uses dmutex is unloaded
 * with dlclose while its lock is held and the library's renewal thread
 * runs.  This program does not link libdmutex itself, so the library (or
 * the plugin that contains it statically) would be unmapped under its own
 * threads unless it pins itself.  The lock must stay held (renewed) past
 * several leases and the process must not crash.
 *
 * test_life_dlclose PLUGIN.so [ctor]
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static struct th_redis srv;

int
main(int argc, char **argv)
{
	char name[64], key[128];
	int (*hold)(const char *, const char *);
	int *ctor_rc;
	void *h;
	long long until;
	int rc;

	if (argc < 2)
		return 2;
	alarm(60);
	if (th_redis_start(&srv, NULL))
		return 1;
	if (argc > 2 && !strcmp(argv[2], "ctor"))
		setenv("LIFE_PLUGIN_CTOR", srv.url, 1);
	if (!(h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL))) {
		fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
		return 1;
	}
	ctor_rc = (int *)dlsym(h, "life_plugin_ctor_rc");
	if (argc > 2 && (!ctor_rc || *ctor_rc != 0)) {
		fprintf(stderr, "the plugin's constructor could not use the library\n");
		return 1;
	}
	*(void **)&hold = dlsym(h, "life_plugin_hold");
	snprintf(name, sizeof name, "life:dlclose:%d", (int)getpid());
	if (!hold || (rc = hold(srv.url, name))) {
		fprintf(stderr, "life_plugin_hold failed (%d)\n", hold ? rc : -1);
		return 1;
	}
	if (dlclose(h)) {
		fprintf(stderr, "dlclose: %s\n", dlerror());
		return 1;
	}
	/* Five leases: renewals keep running in the (pinned) code. */
	snprintf(key, sizeof key, "dmutex:lock:{%s}", name);
	until = th_now_ms() + 1500;
	while (th_now_ms() < until) {
		if (th_redis_int(&srv, "EXISTS %s", key) != 1) {
			fprintf(stderr, "the plugin's lock was not renewed after dlclose\n");
			return 1;
		}
		usleep(50000);
	}
	th_redis_stop_all();
	fprintf(stderr, "dlclose: ok\n");
	return 0;
}
