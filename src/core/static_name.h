/*
 * Names for static initializers made by a layer above the core: the
 * namer's contract (kinds, dmutex__static_namer, dmutex__set_static_namer)
 * is the shim's door's, core/shim.h; here is the core's side of it.
 */
#ifndef DMUTEX_STATIC_NAME_H
#define DMUTEX_STATIC_NAME_H

#include "dmutex.h"
#include "shim.h"

/* The name to bind obj under: *name (its __static_name) as is when tag is
 * null, else the namer's, written to buf.  0; EINVAL when no layer
 * registered a namer (logged), or the namer's error. */
int dmutex__static_name(int kind, const void *obj, const void *tag, const char **name,
		char buf[DMUTEX_NAME_MAX + 1], int *type);

#endif
