/*
 * The shim's door: everything shim/ uses of the library besides the public
 * dmutex.h, and the one library header shim/ includes (tests/
 * check_layers.py holds it to that).  Time and the log come with it
 * (base/): the ground every floor stands on.
 *
 * The shim sees no hold record, client or private object: where it needs
 * one's state it asks a call here, which the floor that owns the data
 * answers (src/core/release_now.c for hold records, src/api/shim_sync.c
 * for condition variables, semaphores and barriers).  These names are
 * hidden symbols of libdmutex, not ABI: the shim is built into the same
 * library (meson.build says why).
 */
#ifndef DMUTEX_SHIM_DOOR_H
#define DMUTEX_SHIM_DOOR_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "dmutex.h"
#include "base/base.h"
#include "base/log.h"

/* The library's magic values the shim stamps or checks in public storage.
 * The same definitions as internal.h's and cond.h's: release_now.c and
 * shim_sync.c include both, so the compiler says if they drift apart. */
#define DMUTEX__MAGIC_DESTROYED 0x64656164UL /* "dead" */
#define DMUTEX__ATTR_MAGIC      0x61747472UL /* "attr" */
#define DCOND__ATTR_MAGIC       0x63617474UL /* "catt" */

/* ---- names (core/bind.c) ---- */
/* 0 and *len if name is a valid lock name; EINVAL (logged) if not. */
int dmutex__name_ok(const char *name, size_t *len);

/*
 * Static initializers made by the shim, which record their definition
 * site, not a name: it tags them with a non-null __reserved[0] and
 * registers a namer, which the core calls when it binds such an object on
 * first use.  The core knows nothing of the shim (calls go down only);
 * DMUTEX_INITIALIZER and DCOND_INITIALIZER leave __reserved[0] null and
 * are named as they are (core/static_name.h).
 */
enum { DMUTEX__STATIC_MUTEX, DMUTEX__STATIC_COND };
/* Write the lock name of obj (a tagged dmutex_t or dcond_t, of the given
 * kind) to out and, for a mutex, its type to *type.  0, or a positive
 * errno (logged by the namer). */
typedef int dmutex__static_namer(int kind, const void *obj, char out[DMUTEX_NAME_MAX + 1], int *type);
/* Set once, before any tagged object is used (a constructor of the shim). */
void dmutex__set_static_namer(dmutex__static_namer *fn);

/* ---- the shim's first log line (core/client.c) ---- */
/* The backend its objects use, as the default client sees it (DMUTEX_URL
 * or the built-in default), passwords masked, and where it comes from. */
void dmutex__shim_url_text(char *buf, size_t len);

/* ---- mutexes (core/release_now.c) ---- */
/* The distributed lock of m, held by a thread of this process, released
 * now whoever holds it (the holder's later unlock finds m destroyed).  1
 * if there was a hold to release (2: a robust mutex's), 0 if not. */
int dmutex__mutex_release_now(dmutex_t *m);

/* ---- condition variables (api/shim_sync.c) ---- */
/* c's clock (dcond_attr_setclock), binding a static one: 0 or its errno. */
int dmutex__shim_cond_clock(dcond_t *c, clockid_t *clock);

/* ---- semaphores and barriers, asked again (api/shim_sync.c) ----
 * A take, post or arrival whose reply was lost is asked again with the
 * same token, so it is applied once (core/retry.h), for as long as the
 * client's retry_window_ms allows.  The shim keeps the operation between
 * tries in this storage, which only the library reads. */
struct dmutex__shim_op {
	union {
		int64_t align;
		unsigned char bytes[96];
	} u;
};
/* A new operation (a new token): 0 or EIO. */
int dmutex__shim_op_init(struct dmutex__shim_op *o);
/* Given up: whether it was applied is unknown (logged); EIO is final. */
int dmutex__shim_op_expired(const struct dmutex__shim_op *o);
/* A try since the last answer may have been applied: ask again, do not
 * give up with "not now". */
int dmutex__shim_op_pending(const struct dmutex__shim_op *o);

/* dsem_wait/trywait (try_only) and the timed ones (until on
 * CLOCK_MONOTONIC, INT64_MAX none), and dsem_post, as the operation o.
 * Called with cancellation disabled; cs: the state a wait's sleep runs
 * with (dmutex__sem_wait_until). */
int dmutex__shim_sem_wait(dsem_t *s, struct dmutex__shim_op *o, int64_t until, int try_only, int cs);
int dmutex__shim_sem_post(dsem_t *s, struct dmutex__shim_op *o);
/* s's name (binding a static one): 0, or its errno. */
int dmutex__shim_sem_name(dsem_t *s, const char **name);
/* A realtime or monotonic deadline as CLOCK_MONOTONIC ns (INT64_MAX: none);
 * EINVAL for another clock or a bad tv_nsec (logged, naming the semaphore
 * `name`). */
int dmutex__sem_deadline(const char *name, clockid_t clock, const struct timespec *at,
		int64_t *until);
/* Set by the shim once a signal handler of the program's runs through it:
 * fn says whether one ran on the calling thread since its semaphore wait
 * began; that wait then ends with EINTR, as POSIX says. */
void dmutex__shim_set_interrupted(int (*fn)(void));
/* A thread of the shim's own (sigwrap.c's poster) calls this first: it does
 * not keep the process alive once the program's threads have ended
 * (base.h, dmutex__exit_if_alone). */
void dmutex__shim_own_thread(void);
/* From such a thread, at least once a second (base.h). */
void dmutex__shim_exit_if_alone(void);
/* A mutex no process uses (the shim's users.c): what earlier ones left
 * in the backend, an owner-died or not-recoverable state, dropped unless
 * a hold is live.  0 (also on a backend that cannot: Redlock), EIO. */
int dmutex__shim_mutex_fresh(const char *name);
/* 1 and m's name if m is a robust distributed mutex, else 0. */
int dmutex__shim_mutex_robust_name(dmutex_t *m, char out[DMUTEX_NAME_MAX + 1]);
/* dbarrier_wait as the operation o. */
int dmutex__shim_barrier_wait(dbarrier_t *b, struct dmutex__shim_op *o);

#endif
