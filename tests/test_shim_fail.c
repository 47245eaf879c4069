/*
 * Compiled through the shim by test_shim_compile_fail.sh: with -DUSE=N one
 * pthread call that must not compile through the shim; with -DUSE=0 none,
 * which must compile (so a failure is the call's, not the set-up's).
 * C89-clean: test_shim_compile_fail.sh compiles it with -std=c89 too.
 */
#include <pthread.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;

int
main(void)
{
	int ceiling = 0;
#if USE == 3
	pthread_mutexattr_t a;
#endif

	(void)ceiling;
#if USE == 1
	pthread_mutex_setprioceiling(&m, 1, &ceiling);
#elif USE == 2
	pthread_mutex_getprioceiling(&m, &ceiling);
#elif USE == 3
	(void)&a;       /* used: before C11 the refusal is the compiler's last word */
	pthread_mutexattr_setprioceiling(&a, 1);
#elif USE == 4
	/* The init calls record their call site: no function pointers. */
	{
		int (*init)(pthread_mutex_t *, const pthread_mutexattr_t *) = pthread_mutex_init;
		init(&m, 0);
	}
#endif
	return pthread_mutex_lock(&m);
}
