/*
 * Names of the mutexes and condition variables a program defines through
 * the pthread shim: NAMESPACE/BASENAME:LINE, plus #ORDINAL when one site
 * initializes several (an array in a loop).  NAMESPACE is $DMUTEX_NAMESPACE,
 * default the program's name, so that the same binary on several hosts
 * agrees on every name and two programs do not collide by accident.
 */
#ifndef DMUTEX_SHIM_NAME_H
#define DMUTEX_SHIM_NAME_H

#include "dmutex.h"
#include "include/dmutex_shim.h"

enum { DMUTEX__SHIM_MUTEX, DMUTEX__SHIM_COND, DMUTEX__SHIM_SEM, DMUTEX__SHIM_BARRIER, DMUTEX__SHIM_RWLOCK };

/* The name of object obj of the given kind from a static initializer at
 * site "FILE:LINE".  Warns (once) when another object got the same name:
 * two initializers on one line, or one in a header, are one lock.  0;
 * EINVAL (too long, bad namespace: logged). */
int dmutex__shim_static_name(int kind, const void *obj, const char *site,
		char out[DMUTEX_NAME_MAX + 1]);
/*
 * The name for object obj initialized at site: the lowest ordinal not in
 * use at that site by a live object (0 shows no suffix), so that the n-th
 * of an array initialized in a loop is "#n" in every process.  A new init
 * of an address that was never destroyed first frees that address's
 * ordinal.  0; EINVAL; ENOMEM.
 */
int dmutex__shim_site_name(int kind, const void *obj, const char *site,
		char out[DMUTEX_NAME_MAX + 1]);
/* The object is destroyed (or its init failed): its ordinal is free. */
void dmutex__shim_site_release(int kind, const void *obj);
/* 1 if an object of kind initialized at obj's address was not destroyed. */
int dmutex__shim_site_live(int kind, const void *obj);
/* Longest site the shim makes: "FILE:LINE" or "@MODULE+0xOFFSET". */
#define DMUTEX__SHIM_SITE_MAX 1024
/* __reserved[0] of a zero-filled dmutex_t/dcond_t in static storage once
 * the shim has seen it: __static_name is its whole name (interned),
 * __reserved[1] the mutex type, __reserved[4] its site (interned); [2] is
 * 0, no stamp (object.h). */
#define DMUTEX__SHIM_ZERO ((void *)(uintptr_t)0x7a65726fu) /* "zero" */
/*
 * The site and name of a zero-filled object in static storage:
 * "@MODULE+0xOFFSET" (the module's file name and the object's offset from
 * its load address, so every process of one build agrees), and
 * NAMESPACE/SITE.  0; ESRCH: obj is not in a loaded module (heap, stack,
 * mapping); EINVAL (too long, bad namespace: logged).
 */
int dmutex__shim_zero_name(const void *obj, char site[DMUTEX__SHIM_SITE_MAX + 1],
		char out[DMUTEX_NAME_MAX + 1]);
/* A copy of name that lives as long as the process (the same pointer for
 * equal names), or NULL on ENOMEM. */
const char *dmutex__shim_intern(const char *name);

#endif
