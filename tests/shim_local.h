/* test_shim_local's parts (through the shim: these are dmutex_t/dcond_t). */
#include <pthread.h>

pthread_mutex_t *env_mutex(void);
pthread_cond_t *env_cond(void);
pthread_mutex_t *file_mutex(void);
int file_init(void);
pthread_mutex_t *file_dyn(void);
pthread_cond_t *file_cond(void);
