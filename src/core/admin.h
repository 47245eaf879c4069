/*
 * The tool's door: everything tools/ (the dmutex command) uses of the
 * library besides the public dmutex.h, and the one library header it
 * includes (tests/check_layers.py holds it to that).  Time and the log
 * come with it (base/).
 *
 * The operator views read and write a lock's Redis keys themselves, so
 * that they see what is there even when no process of the library runs;
 * what they share with the library is what a URL means (every address,
 * password, db, prefix, Sentinel and Cluster resolution) and where a lock
 * lives (keys, the counters' layout).  So this door speaks Redis: an
 * admin for another kind of backend would need the reads themselves here
 * (read a lock, list names, reset one, read the counters), as operations
 * of the backend's table, not connections.
 *
 * Opaque types; these names are hidden symbols of libdmutex, not ABI: the
 * tool links the static library (meson.build says why).
 */
#ifndef DMUTEX_ADMIN_H
#define DMUTEX_ADMIN_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "dmutex.h"
#include "base/base.h"
#include "base/log.h"
#include "backend/counts.h"     /* the counters' fields: DMUTEX__MET_* */
#include "backend/view.h"       /* a lock as a backend reports it */

struct dmutex__admin_url;       /* a URL parsed (core/admin.c) */
struct dmutex__admin;           /* its masters (backend/redis/admin.c) */
struct dmutex__backend_cfg;
struct dmutex__conn;            /* one connection to one master */

/* ---- a URL (core/admin.c) ---- */
/* Parse url into *out (never logging the password).  0; EINVAL (logged),
 * ENOTSUP (a backend this build has not), ENOMEM. */
int dmutex__admin_parse(const char *url, struct dmutex__admin_url **out);
void dmutex__admin_url_free(struct dmutex__admin_url *u);
/* What the backend is told of it (it lives as long as u). */
const struct dmutex__backend_cfg *dmutex__admin_url_cfg(const struct dmutex__admin_url *u);
/* The prefix of every key it names. */
const char *dmutex__admin_url_prefix(const struct dmutex__admin_url *u);
/* Its command_timeout_ms; the default if it does not parse. */
unsigned dmutex__admin_command_ms(const char *url);

/* ---- its masters (backend/redis/admin.c) ---- */
/* The masters cfg names (dmutex__admin_url_cfg; it outlives *out), their
 * files read (password_file, tls_*).  A cluster's are found by
 * dmutex__admin_resolve.  0; EINVAL (a file: logged), ENOMEM. */
int dmutex__admin_open(const struct dmutex__backend_cfg *cfg, struct dmutex__admin **out);
/* A cluster: its masters, from the slot map its seeds give (once: 0 at
 * once after that, answered or not).  0; EIO (no seed answered: logged);
 * ENOMEM.  Anything else: 0. */
int dmutex__admin_resolve(struct dmutex__admin *a);
void dmutex__admin_close(struct dmutex__admin *a);
size_t dmutex__admin_masters(const struct dmutex__admin *a);
/* 1 for a cluster: its scripts and waiters use sharded Pub/Sub (SPUBLISH,
 * SSUBSCRIBE), which a plain PUBLISH does not reach. */
int dmutex__admin_cluster(const struct dmutex__admin *a);
/* Master i's address for people (password masked); the URL's first
 * address (a cluster's template) for dmutex__admin_url_name. */
const char *dmutex__admin_master_name(const struct dmutex__admin *a, size_t i);
const char *dmutex__admin_url_name(const struct dmutex__admin *a);
/* A new authenticated connection to master i; NULL when unreachable or
 * refusing (logged why).  Freed with dmutex__conn_free. */
struct dmutex__conn *dmutex__admin_connect(struct dmutex__admin *a, size_t i);
/* 1 if master i holds name's keys: every node of a Redlock list, the
 * master serving the name's slot in a cluster. */
int dmutex__admin_serves(const struct dmutex__admin *a, size_t i, const char *name);
/* The master holding the per-lock counters: the first (Redlock: the
 * first URL's), on a cluster the one serving their slot. */
size_t dmutex__admin_counters_master(const struct dmutex__admin *a);

/* ---- where a lock lives (backend/redis/admin.c) ---- */
/* As DMUTEX__KEY_MAX of backend/backend.h (backend/redis/admin.c checks). */
#define DMUTEX__ADMIN_KEY_MAX (128 + 16 + 512 + 4)
/* "<prefix><kind>:{<name>}" into buf[DMUTEX__ADMIN_KEY_MAX]; the length
 * it wanted. */
int dmutex__admin_key(char *buf, const char *prefix, const char *kind, const char *name);
/* Counter field f's name in its Redis hash ("acq", ..., "hold_b9"). */
const char *dmutex__admin_met_field(int f);
/* The key of the counters' "index", "total", or "n:" + name, into
 * buf[DMUTEX__ADMIN_MET_KEY_MAX]; its length. */
#define DMUTEX__ADMIN_MET_KEY_MAX (128 + 32 + 512)
int dmutex__admin_met_key(char *buf, const char *prefix, const char *what, const char *name);

/* ---- a connection: the Redis connection's own calls (backend/redis/conn.h) ---- */
void dmutex__conn_free(struct dmutex__conn *c);
/* Queue one command (hiredis format, %b for binary): 0 or -1. */
int dmutex__conn_appendf(struct dmutex__conn *c, const char *fmt, ...);
/* Flush, then wait for the next reply until the deadline: 0 with *reply
 * (freeReplyObject), or -1 (a timeout breaks the connection). */
int dmutex__conn_get(struct dmutex__conn *c, void **reply, int64_t deadline);
/* now + the command timeout. */
int64_t dmutex__conn_deadline(const struct dmutex__conn *c);
/* appendf + get; NULL on failure. */
redisReply *dmutex__conn_command(struct dmutex__conn *c, int64_t deadline, const char *fmt, ...);
/* Why c failed, "" if it has not (backend/redis/admin.c). */
const char *dmutex__admin_conn_error(const struct dmutex__conn *c);

/* ---- a store the tool reads through the library (etcd; core/admin.c) ----
 * Redis's keys the tool reads itself (above); another backend answers
 * the operators' questions through its table (backend.h, view.h). */
struct dmutex__admin_view;
/* The backend url names, opened and checked, if it is one the tool reads
 * through the library: 0 and *out; ENOENT when it is Redis (use the
 * calls above); EINVAL, ENOTSUP (logged); EIO (unreachable: logged,
 * naming the members and why); EACCES (logged); ENOMEM. */
int dmutex__admin_view_open(const char *url, struct dmutex__admin_view **out);
void dmutex__admin_view_close(struct dmutex__admin_view *v);
/* One lock: 0 and *out; EIO (logged). */
int dmutex__admin_view_lock(struct dmutex__admin_view *v, const char *name,
		struct dmutex__lock_view *out);
/* fn(arg, name) for each lock name (sorted); fn's non-zero stops and is
 * returned; else 0, or EIO (logged). */
int dmutex__admin_view_names(struct dmutex__admin_view *v, int (*fn)(void *arg, const char *name),
		void *arg);
/* Reset name (force: even held): 0 and *result DMUTEX__RESET_*; EIO. */
int dmutex__admin_view_reset(struct dmutex__admin_view *v, const char *name, int force,
		int *result);
/* The same for read-write locks (view.h; backend.h's rw_inspect,
 * rw_names, rw_reset): ENOTSUP if the backend shows none. */
int dmutex__admin_view_rwlock(struct dmutex__admin_view *v, const char *name,
		struct dmutex__rwlock_view *out);
int dmutex__admin_view_rw_names(struct dmutex__admin_view *v,
		int (*fn)(void *arg, const char *name), void *arg);
/* *removed: what it dropped. */
int dmutex__admin_view_rw_reset(struct dmutex__admin_view *v, const char *name, int force,
		int *result, struct dmutex__rwlock_view *removed);

/* ---- this machine (core/hostid.c) ---- */
/* "boot_id/pidns inode" of this process, or "": a holder's pid can be
 * checked from here only when they match. */
void dmutex__hostid(char *buf, size_t len);

#endif
