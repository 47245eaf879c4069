/*
 * Issue 25 defect 2 through the pthread shim: an ordinary pthread program
 * (built with the shim's pthread.h), run by test_fastpath.c against its
 * server: argv[1] the server's port, DMUTEX_URL in the environment.
 *
 * Its hold is lost (the lock key deleted on the server), its unlock
 * returns 0 (asynchronous: it knows nothing yet), the release runs and
 * says "not ours"; then pthread_mutex_lock must take the lock (0), and
 * another client must find it busy while it is held.  Exit status 0, or
 * 1 with the failed checks on stderr.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dmt.h"
#include "harness.h"

#define NAME "fastpath-shim"

static struct th_redis srv;
static long long base;

static int
release_ran(void *arg)
{
	(void)arg;
	return dmt_cmd_calls(&srv, "evalsha", "eval", NULL) > base;
}

int
main(int argc, char **argv)
{
	pthread_mutexattr_t a;
	pthread_mutex_t m;
	dmutex_client_t *c2;
	dmutex_attr_t oa;
	dmutex_t other;
	const char *url = getenv("DMUTEX_URL");
	char key[600];
	int rc;

	if (argc != 2 || !url)
		return 64;
	/* The harness's admin commands need only the port. */
	srv.port = atoi(argv[1]);
	dmt_lock_key(key, sizeof key, NAME);

	/* Another process's view of the lock: its own client. */
	IS(dmutex_client_open(&c2, url), 0);
	IS(dmutex_attr_init(&oa), 0);
	IS(dmutex_attr_setclient(&oa, c2), 0);
	IS(dmutex_attr_setleasecache(&oa, 0), 0);
	IS(dmutex_init(&other, NAME, &oa), 0);

	IS(pthread_mutexattr_init(&a), 0);
	IS(pthread_mutexattr_setname_np(&a, NAME), 0);
	IS(pthread_mutex_init(&m, &a), 0);
	IS(pthread_mutexattr_destroy(&a), 0);

	IS(pthread_mutex_lock(&m), 0);
	IS(th_redis_int(&srv, "DEL %s", key), 1);
	base = dmt_cmd_calls(&srv, "evalsha", "eval", NULL);
	IS(pthread_mutex_unlock(&m), 0);
	EXPECT(th_wait_until(release_ran, NULL, 5000));

	rc = pthread_mutex_lock(&m);
	if (rc != 0)
		fprintf(stderr, "pthread_mutex_lock after a release that found the lock not ours: %d (%s), "
				"want 0\n", rc, strerror(rc));
	IS(rc, 0);
	rc = dmutex_trylock(&other);
	if (rc != EBUSY)
		fprintf(stderr, "another client's trylock while pthread_mutex_lock's hold lasts: %d (%s), "
				"want EBUSY\n", rc, strerror(rc));
	IS(rc, EBUSY);
	if (rc == 0)
		dmutex_unlock(&other);
	IS(pthread_mutex_unlock(&m), 0);

	pthread_mutex_destroy(&m);
	dmutex_destroy(&other);
	dmutex_attr_destroy(&oa);
	dmutex_client_close(c2);
	return th_check_status();
}
