/*
 * The dmutex pthread shim.  Compile a threaded C program with this
 * directory first on the include path and link libdmutex:
 *
 *	cc prog.c $(pkg-config --cflags --libs dmutex-shim)
 *
 * and, with no source change, its pthread mutexes and condition variables
 * are dmutex/dcond ones, shared by every process of the program on every
 * host that uses the same backend ($DMUTEX_URL).
 *
 * Names come from where an object is defined: NAMESPACE/BASENAME:LINE, plus
 * #N for the N-th object one line initializes (an array in a loop; the
 * lowest number not in use, so process order decides it).  NAMESPACE is
 * $DMUTEX_NAMESPACE, default the program's name.
 * pthread_mutexattr_setname_np(attr, name) gives a mutex a name of your
 * choice instead (used as is, without namespace).
 *
 * Every pthread call that takes a mutex, a condition variable or their
 * attributes is mapped here, or is a compile-time error that says why; none
 * can silently receive a dmutex where it expects a pthread mutex.  Spin
 * locks and barriers are distributed too (dmutex_shim_sync.h), and so are
 * read-write locks (dmutex_shim_rwlock.h); pthread_once stays local to
 * each process.
 */
#pragma GCC system_header

#ifndef DMUTEX_SHIM_PTHREAD_H
#define DMUTEX_SHIM_PTHREAD_H

#ifdef __cplusplus
#error "the dmutex pthread shim is for C: in C++ it would also remap the standard library's own threads"
#endif

#include_next <pthread.h>

#include "dmutex_shim.h"

/* ---- types and static initializers ---- */

#define pthread_mutex_t dmutex_t
#define pthread_mutexattr_t dmutex_attr_t
#define pthread_cond_t dcond_t
#define pthread_condattr_t dcond_attr_t

#undef PTHREAD_MUTEX_INITIALIZER
#define PTHREAD_MUTEX_INITIALIZER DMUTEX__SHIM_MUTEX_INITIALIZER(DMUTEX_NORMAL)
#ifdef PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP
#undef PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP
#define PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP DMUTEX__SHIM_MUTEX_INITIALIZER(DMUTEX_RECURSIVE)
#endif
#ifdef PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP
#undef PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP
#define PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP DMUTEX__SHIM_MUTEX_INITIALIZER(DMUTEX_ERRORCHECK)
#endif
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
#undef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
#define PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP DMUTEX__SHIM_MUTEX_INITIALIZER(DMUTEX_NORMAL)
#endif
#undef PTHREAD_COND_INITIALIZER
#define PTHREAD_COND_INITIALIZER DMUTEX__SHIM_COND_INITIALIZER

/*
 * A call that has no meaning for a distributed object: an expression that
 * fails to compile with the reason.  Used without a call (as a function
 * pointer) the name stays an undeclared identifier that says the same.
 *
 * A static assertion inside a struct says it while parsing.  Before C11
 * under a strict -std (c89, c99), glibc's <sys/cdefs.h> defines
 * _Static_assert as a macro that is a syntax error there, so the call
 * becomes one to a function declared with the error attribute instead:
 * GCC and Clang (14+) reject it with the same message.
 */
#if defined(_Static_assert) && !defined(__cplusplus)
#define DMUTEX__SHIM_CAT2(a, b) a##b
#define DMUTEX__SHIM_CAT(a, b) DMUTEX__SHIM_CAT2(a, b)
#define DMUTEX__SHIM_UNAVAILABLE(what, why) \
	DMUTEX__SHIM_UNAVAILABLE2(DMUTEX__SHIM_CAT(dmutex__shim_unavailable_, __COUNTER__), what, why)
#define DMUTEX__SHIM_UNAVAILABLE2(fn, what, why) \
	(__extension__ ({ \
		extern int fn(void) __attribute__((__error__( \
			what " is not available through the dmutex pthread shim: " why))); \
		fn(); }))
#else
#define DMUTEX__SHIM_UNAVAILABLE(what, why) \
	((int)sizeof(struct { \
		_Static_assert(0, what " is not available through the dmutex pthread shim: " why); \
		int dmutex__shim_unavailable; }))
#endif

/*
 * The init calls record their call site, so they can only be called: used
 * as a function pointer, the name is an undeclared identifier saying so.
 */
#undef pthread_mutex_init
#define pthread_mutex_init pthread_mutex_init__only_callable_through_the_dmutex_shim
#define pthread_mutex_init__only_callable_through_the_dmutex_shim(m, a) \
	dmutex_shim_mutex_init((m), (a), DMUTEX__SHIM_HERE)
#undef pthread_cond_init
#define pthread_cond_init pthread_cond_init__only_callable_through_the_dmutex_shim
#define pthread_cond_init__only_callable_through_the_dmutex_shim(c, a) \
	dmutex_shim_cond_init((c), (a), DMUTEX__SHIM_HERE)

/* ---- mutexes ---- */

#undef pthread_mutex_destroy
#define pthread_mutex_destroy dmutex_shim_mutex_destroy
#undef pthread_mutex_lock
#define pthread_mutex_lock dmutex_shim_mutex_lock
#undef pthread_mutex_trylock
#define pthread_mutex_trylock dmutex_shim_mutex_trylock
#undef pthread_mutex_timedlock
#define pthread_mutex_timedlock dmutex_shim_mutex_timedlock
#undef pthread_mutex_clocklock
#define pthread_mutex_clocklock dmutex_shim_mutex_clocklock
#undef pthread_mutex_unlock
#define pthread_mutex_unlock dmutex_shim_mutex_unlock
#undef pthread_mutex_consistent
#define pthread_mutex_consistent dmutex_shim_mutex_consistent
#undef pthread_mutex_consistent_np
#define pthread_mutex_consistent_np dmutex_shim_mutex_consistent

#undef pthread_mutex_getprioceiling
#define pthread_mutex_getprioceiling pthread_mutex_getprioceiling__not_available_through_the_dmutex_shim
#define pthread_mutex_getprioceiling__not_available_through_the_dmutex_shim(...) \
	DMUTEX__SHIM_UNAVAILABLE("pthread_mutex_getprioceiling", \
		"priority ceilings have no meaning for a lock held across hosts")
#undef pthread_mutex_setprioceiling
#define pthread_mutex_setprioceiling pthread_mutex_setprioceiling__not_available_through_the_dmutex_shim
#define pthread_mutex_setprioceiling__not_available_through_the_dmutex_shim(...) \
	DMUTEX__SHIM_UNAVAILABLE("pthread_mutex_setprioceiling", \
		"priority ceilings have no meaning for a lock held across hosts")

/* ---- mutex attributes ---- */

#undef pthread_mutexattr_init
#define pthread_mutexattr_init dmutex_attr_init
#undef pthread_mutexattr_destroy
#define pthread_mutexattr_destroy dmutex_attr_destroy
#undef pthread_mutexattr_settype
#define pthread_mutexattr_settype dmutex_shim_mutexattr_settype
#undef pthread_mutexattr_gettype
#define pthread_mutexattr_gettype dmutex_shim_mutexattr_gettype
/* PTHREAD_MUTEX_STALLED/ROBUST have dmutex's values (checked in the
 * library). */
#undef pthread_mutexattr_setrobust
#define pthread_mutexattr_setrobust dmutex_attr_setrobust
#undef pthread_mutexattr_getrobust
#define pthread_mutexattr_getrobust dmutex_attr_getrobust
#undef pthread_mutexattr_setrobust_np
#define pthread_mutexattr_setrobust_np dmutex_attr_setrobust
#undef pthread_mutexattr_getrobust_np
#define pthread_mutexattr_getrobust_np dmutex_attr_getrobust
/* Accepted: a dmutex is shared by nature. */
#undef pthread_mutexattr_setpshared
#define pthread_mutexattr_setpshared dmutex_shim_mutexattr_setpshared
#undef pthread_mutexattr_getpshared
#define pthread_mutexattr_getpshared dmutex_shim_mutexattr_getpshared
/* PTHREAD_PRIO_NONE only; the others are ENOTSUP at run time. */
#undef pthread_mutexattr_setprotocol
#define pthread_mutexattr_setprotocol dmutex_shim_mutexattr_setprotocol
#undef pthread_mutexattr_getprotocol
#define pthread_mutexattr_getprotocol dmutex_shim_mutexattr_getprotocol
#undef pthread_mutexattr_setname_np
#define pthread_mutexattr_setname_np dmutex_shim_mutexattr_setname_np

#undef pthread_mutexattr_getprioceiling
#define pthread_mutexattr_getprioceiling pthread_mutexattr_getprioceiling__not_available_through_the_dmutex_shim
#define pthread_mutexattr_getprioceiling__not_available_through_the_dmutex_shim(...) \
	DMUTEX__SHIM_UNAVAILABLE("pthread_mutexattr_getprioceiling", \
		"priority ceilings have no meaning for a lock held across hosts")
#undef pthread_mutexattr_setprioceiling
#define pthread_mutexattr_setprioceiling pthread_mutexattr_setprioceiling__not_available_through_the_dmutex_shim
#define pthread_mutexattr_setprioceiling__not_available_through_the_dmutex_shim(...) \
	DMUTEX__SHIM_UNAVAILABLE("pthread_mutexattr_setprioceiling", \
		"priority ceilings have no meaning for a lock held across hosts")

/* ---- condition variables ---- */

#undef pthread_cond_destroy
#define pthread_cond_destroy dmutex_shim_cond_destroy
#undef pthread_cond_wait
#define pthread_cond_wait dmutex_shim_cond_wait
#undef pthread_cond_timedwait
#define pthread_cond_timedwait dmutex_shim_cond_timedwait
#undef pthread_cond_clockwait
#define pthread_cond_clockwait dmutex_shim_cond_clockwait
#undef pthread_cond_signal
#define pthread_cond_signal dmutex_shim_cond_signal
#undef pthread_cond_broadcast
#define pthread_cond_broadcast dmutex_shim_cond_broadcast

#undef pthread_condattr_init
#define pthread_condattr_init dcond_attr_init
#undef pthread_condattr_destroy
#define pthread_condattr_destroy dcond_attr_destroy
#undef pthread_condattr_setclock
#define pthread_condattr_setclock dcond_attr_setclock
#undef pthread_condattr_getclock
#define pthread_condattr_getclock dcond_attr_getclock
#undef pthread_condattr_setpshared
#define pthread_condattr_setpshared dmutex_shim_condattr_setpshared
#undef pthread_condattr_getpshared
#define pthread_condattr_getpshared dmutex_shim_condattr_getpshared

/* spin locks (distributed mutexes) and barriers: shim/include/dmutex_shim_sync.h */
#include "dmutex_shim_sync.h"
/* read-write locks (drwlock_t): shim/include/dmutex_shim_rwlock.h */
#include "dmutex_shim_rwlock.h"

#endif /* DMUTEX_SHIM_PTHREAD_H */
