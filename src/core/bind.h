/*
 * What every kind of handle (dmutex_t, dcond_t, drwlock_t, dsem_t,
 * dbarrier_t) shares: each begins with a magic, a static name and its bound
 * object, and is resolved, bound on first use when statically initialized,
 * and destroyed the same way.  A kind says only what differs.
 */
#ifndef DMUTEX_CORE_BIND_H
#define DMUTEX_CORE_BIND_H

#include <stddef.h>

struct dmutex_client;

struct dmutex__kind {
	const char *what;               /* log lines: "mutex", "condition variable", ... */
	const char *destroy_call;       /* its destroy's log prefix; NULL: none logged */
	unsigned long init_magic, static_magic;
	int static_kind;                /* static_name.h, for a layer's tagged initializer */
	/* Optional: refuse a static initializer before the client opens
	 * (logged), h the handle. */
	int (*static_ok)(const void *h, const char *name);
	/* A static initializer's object: name checked, the default client. */
	int (*open_static)(struct dmutex_client *c, const char *name, size_t len, const void *h, int type,
			void **out);
	/* Optional, at destroy: 0 when nobody uses it (and it may go),
	 * else EBUSY. */
	int (*retire)(void *obj);
	/* Free an object nobody else can see: a bind's loser, a destroyed one. */
	void (*close)(void *obj);
};

/* A handle's own fields, by address (the handle types differ). */
struct dmutex__handle {
	const void *h;
	unsigned long *magic;
	void **impl;
	const char *static_name;
	const void *tag;                /* a layer's initializer (static_name.h), or NULL */
};
#define DMUTEX__HANDLE(x, t) ((struct dmutex__handle){ (x), (x) ? &(x)->__magic : NULL, \
		(x) ? &(x)->__impl : NULL, (x) ? (x)->__static_name : NULL, (t) })

/* h's object: 0 and *out; EINVAL (logged) for NULL, uninitialized,
 * destroyed; a static initializer is bound to the default client on first
 * use (a racing binder's object is closed), else its error. */
int dmutex__resolve_handle(const struct dmutex__kind *k, struct dmutex__handle h, void **out);

/* Destroy h: EINVAL (logged when k->destroy_call), k->retire's EBUSY, or
 * 0 with the object closed and h marked destroyed. */
int dmutex__destroy_object(const struct dmutex__kind *k, struct dmutex__handle h);

extern const struct dmutex__kind dmutex__mutex_kind, dmutex__cond_kind;

/*
 * The users of a condition variable's, semaphore's or barrier's object:
 * its handle is one (set at creation), each call that may still touch it
 * after another thread could legally destroy the handle is another (a
 * woken waiter leaving, a post whose waiter destroys at once).  Destroy
 * drops the handle's; the last one dropped frees the object, so no call's
 * last touch meets a freed object.  Taken only while the handle is known
 * not destroyed: right after the call resolved it.
 */
static inline void
dmutex__obj_hold(unsigned *users)
{
	__atomic_fetch_add(users, 1, __ATOMIC_ACQ_REL);
}

/* 1 when that was the last user: free the object. */
static inline int
dmutex__obj_drop(unsigned *users)
{
	return __atomic_sub_fetch(users, 1, __ATOMIC_ACQ_REL) == 0;
}

#endif
