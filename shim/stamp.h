/*
 * Which process an object's private state belongs to.
 *
 * A dmutex_t or dcond_t made by pthread_*_init points into the heap of the
 * process that made it.  Placed in memory shared between processes (a
 * PTHREAD_PROCESS_SHARED mutex in a MAP_SHARED mapping), another process
 * sees that pointer: valid in a child forked after the init (it has a
 * copy of the heap), meaningless anywhere else.  The shim stamps each
 * object it initializes and refuses (EINVAL, logged) one whose state lives
 * in a process this one is not a fork of, taken after the object was made.
 */
#ifndef DMUTEX_SHIM_STAMP_H
#define DMUTEX_SHIM_STAMP_H

/* slots: the three last of the object's __reserved */
void dmutex__shim_stamp(void *slots[3], int pshared);
/* The pshared value the object was initialized with. */
int dmutex__shim_stamp_pshared(void *const slots[3]);
/* 0: no stamp, or this process may use the state; EINVAL (logged, with
 * what and obj for the reader) otherwise. */
int dmutex__shim_stamp_check(void *const slots[3], const char *what, const void *obj);

#endif
