/*
 * Names for static initializers made by a layer above the core.
 *
 * A layer may make its own static initializers (the pthread shim's record
 * their definition site, not a name): it tags them with a non-null
 * __reserved[0] and registers a namer, which the core calls when it binds
 * such an object on first use.  The core knows nothing of the layer (the
 * arrow points down only, STYLE.md "Layers"); DMUTEX_INITIALIZER and
 * DCOND_INITIALIZER leave __reserved[0] null and are named as they are.
 */
#ifndef DMUTEX_STATIC_NAME_H
#define DMUTEX_STATIC_NAME_H

#include "dmutex.h"

enum { DMUTEX__STATIC_MUTEX, DMUTEX__STATIC_COND };

/* Write the lock name of obj (a tagged dmutex_t or dcond_t, of the given
 * kind) to out and, for a mutex, its type to *type.  0, or a positive
 * errno (logged by the namer). */
typedef int dmutex__static_namer(int kind, const void *obj, char out[DMUTEX_NAME_MAX + 1], int *type);

/* Set once, before any tagged object is used (a constructor of the layer). */
void dmutex__set_static_namer(dmutex__static_namer *fn);

/* The name to bind obj under: *name (its __static_name) as is when tag is
 * null, else the namer's, written to buf.  0; EINVAL when no layer
 * registered a namer (logged), or the namer's error. */
int dmutex__static_name(int kind, const void *obj, const void *tag, const char **name,
		char buf[DMUTEX_NAME_MAX + 1], int *type);

#endif
