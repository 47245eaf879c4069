/*
 * What the shim does with an object before each call on it: a zero-filled
 * object in static storage (what glibc's initializers make, and what an
 * uninitialized static pthread_mutex_t is) becomes what the shim's
 * initializer makes, named by where it is; a zero-filled one elsewhere is
 * refused; one whose state is in another process is refused (stamp.h).
 */
#ifndef DMUTEX_SHIM_OBJECT_H
#define DMUTEX_SHIM_OBJECT_H

#include <pthread.h>

#include "dmutex.h"

/* The shim's slots of a dmutex_t/dcond_t it initialized: the core leaves
 * __reserved alone once an object is initialized (static initializers use
 * [0] and [1]; zero-filled ones [0], [1] and [4], name.h). */
#define DMUTEX__SHIM_STAMP(o) (&(o)->__reserved[2])

/* 0 and *local NULL: m may be handed to the core; 0 and *local set: m is
 * local (local.h), use *local; EINVAL (logged, naming call and m). */
int dmutex__shim_mutex_ready(dmutex_t *m, const char *call, pthread_mutex_t **local);
int dmutex__shim_cond_ready(dcond_t *c, const char *call, pthread_cond_t **local);

#endif
