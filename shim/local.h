/*
 * Objects the shim leaves process-local: plain pthread mutexes and
 * condition variables, for state that does not leave the process (queues,
 * pools, caches).  Chosen by $DMUTEX_SHIM_LOCAL (comma-separated fnmatch(3)
 * globs against the site and the name) or, for a whole translation unit,
 * by compiling it with -DDMUTEX_SHIM_LOCAL_FILE (its sites start with
 * DMUTEX__SHIM_LOCAL_MARK).
 */
#ifndef DMUTEX_SHIM_LOCAL_H
#define DMUTEX_SHIM_LOCAL_H

#include <pthread.h>
#include <sys/types.h>

#include "dmutex.h"

/* magic of a local object: initialized by pthread_*_init (the pthread
 * object inline), or from a static initializer (the object on the heap,
 * pointed to by __impl) */
#define DMUTEX__SHIM_LOCAL_INIT 0x646d6c69UL   /* "dmli" */
#define DMUTEX__SHIM_LOCAL_STATIC 0x646d6c73UL /* "dmls" */
#define DCOND__SHIM_LOCAL_INIT 0x64636c69UL    /* "dcli" */
#define DCOND__SHIM_LOCAL_STATIC 0x64636c73UL  /* "dcls" */

/* The layout of a local dmutex_t / dcond_t (LOCAL_INIT), and of the heap
 * object of a LOCAL_STATIC one. */
struct dmutex__shim_lmutex {
	unsigned long magic;
	const char *site;
	pthread_mutex_t mu;
	pid_t pid;                      /* the initializer's: site is its pointer */
};
struct dmutex__shim_lcond {
	unsigned long magic;
	const char *site;
	pthread_cond_t cv;
};
_Static_assert(sizeof(struct dmutex__shim_lmutex) <= sizeof(dmutex_t), "a local mutex does not fit in a dmutex_t");
_Static_assert(sizeof(struct dmutex__shim_lcond) <= sizeof(dcond_t), "a local condvar does not fit in a dcond_t");

/* 1: the object defined at site with the given name stays local. */
int dmutex__shim_is_local(const char *site, const char *name);
/* site without the mark of a DMUTEX_SHIM_LOCAL_FILE unit. */
const char *dmutex__shim_site_text(const char *site);
/* The DMUTEX_LOG=info lines (announce.c): the shim's first in a process
 * (in_effect; announce logs it too), one per object obj at its first use
 * in the process, and forget at its destroy (a new init logs anew). */
void dmutex__shim_in_effect(void);
void dmutex__shim_announce(const void *obj, const char *what, const char *name, const char *site, int local);
void dmutex__shim_announce_forget(const void *obj);

#endif
