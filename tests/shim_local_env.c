/* Part of test_shim_local: objects made local by DMUTEX_SHIM_LOCAL
 * ("shim_local_env.c:*", matched against FILE:LINE with the base name). */
#include <pthread.h>

#include "shim_local.h"

static pthread_mutex_t envm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t envc = PTHREAD_COND_INITIALIZER;

pthread_mutex_t *env_mutex(void) { return &envm; }
pthread_cond_t *env_cond(void) { return &envc; }
