/* Part of test_shim_local, compiled with -DDMUTEX_SHIM_LOCAL_FILE: every
 * mutex and condition variable of this file stays local. */
#include <pthread.h>

#include "shim_local.h"

static pthread_mutex_t filem = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t filedyn;
static pthread_cond_t filec;

pthread_mutex_t *file_mutex(void) { return &filem; }

int
file_init(void)
{
	return pthread_mutex_init(&filedyn, NULL) || pthread_cond_init(&filec, NULL);
}

pthread_mutex_t *file_dyn(void) { return &filedyn; }
pthread_cond_t *file_cond(void) { return &filec; }
