#ifndef DMUTEX_LOG_H
#define DMUTEX_LOG_H

#include "dmutex.h"

#if defined(__GNUC__)
#define DMUTEX__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DMUTEX__PRINTF(a, b)
#endif

/* Format and emit one message (truncated at 512 bytes). */
void dmutex__log(int level, const char *fmt, ...) DMUTEX__PRINTF(2, 3);
/* fork: no message half-routed while the child is made. */
void dmutex__log_lock(void);
void dmutex__log_unlock(void);
/* Cheap check so callers can skip building debug messages. */
int dmutex__log_enabled(int level);

#endif
