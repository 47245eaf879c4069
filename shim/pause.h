/*
 * The shim's pauses between tries while the backend is away.  None is a
 * cancellation point: pthread_mutex_lock, sem_post, sem_open and the rest
 * are not ones in POSIX, and a program cancelled there would leave a call
 * half made (sem_open holds its list's mutex across its tries).  The
 * POSIX cancellation points the shim maps (the condition and semaphore
 * waits) are cancelled in their sleep for a wake-up, never here.
 */
#ifndef DMUTEX_SHIM_PAUSE_H
#define DMUTEX_SHIM_PAUSE_H

#include <stdint.h>

/* 50 ms doubling to 1 s: each library call already retried for a few
 * command timeouts before it failed. */
void dmutex__shim_backoff(int attempt);
void dmutex__shim_pause_ms(int64_t ms);

#endif
