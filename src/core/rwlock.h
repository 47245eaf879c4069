/*
 * Read-write locks: the private state behind a drwlock_t, and the backend
 * calls the public drwlock_* calls are built from.
 *
 * In Redis (default prefix), per lock NAME:
 *   dmutex:rw:{NAME}      hash: the writer's token and lease end, the last
 *                         fencing token
 *   dmutex:rwr:{NAME}     sorted set: one read share per reading process,
 *                         scored by its lease end (server ms)
 *   dmutex:rwq:{NAME}     sorted set: writers waiting, scored likewise
 *   dmutex:rwwake:{NAME}  channel: the last reader, the writer or the last
 *                         waiting writer left
 * Leases are kept as server times inside the keys (a share is not a key of
 * its own), so the keys themselves only expire when idle: their TTL is a
 * garbage collector, never what decides a hold.
 *
 * Locally, every drwlock_t of a name on a client shares one hold entry
 * (kind DMUTEX__KIND_RW): held with rw_write 0 is the process's read share
 * and readers[] the threads in it; with rw_write 1, owner writes.
 */
#ifndef DMUTEX_RWLOCK_H
#define DMUTEX_RWLOCK_H

#include "backend/backend.h"
#include "internal.h"

#define DRWLOCK__MAGIC_INIT 0x4452574cUL /* "DRWL" */

struct dmutex__rwlock {
	struct dmutex__entry *entry;
	unsigned lease_ms;
	void (*onlost)(const char *, void *);
	void *onlost_arg;
};

int dmutex__rwlock_resolve(drwlock_t *rw, struct dmutex__rwlock **out);
/* 0 and the thread's slot in e->readers, or NULL; under e->mu. */
struct dmutex__reader *dmutex__rw_reader(struct dmutex__entry *e, pthread_t self);
/* Under e->mu: take self out of readers[]. */
void dmutex__rw_reader_drop(struct dmutex__entry *e, struct dmutex__reader *r);
/* Under e->mu: self's slot among a lost share's readers set aside
 * (e->rw_gone), or NULL; and taking it out, which wakes a local writer
 * once the last is out. */
struct dmutex__reader *dmutex__rw_gone_reader(struct dmutex__entry *e, pthread_t self);
void dmutex__rw_gone_drop(struct dmutex__entry *e, struct dmutex__reader *r);
/* A thread that ends still reading or writing e gives it up, every level
 * (client.c's thread end, through dmutex__thread_hold_end). */
void dmutex__rw_thread_end(struct dmutex__entry *e, const char *why);

#endif
