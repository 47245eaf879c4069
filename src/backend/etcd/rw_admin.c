/*
 * Operators' views of read-write locks over etcd (backend.h: rw_inspect,
 * rw_names, rw_reset), read from the keys rw.c writes under
 * <prefix>r/<n>/: r/<token> a read share, w/<token> the writer (its
 * create revision is the fencing token), q/<token> a waiting writer's
 * intent, each without a value, on its client's lease.  etcd deletes a
 * key when its lease ends, so every key there is a live one; and the
 * writer's key records no holder, only (by its revision) the token.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/etcd/etcd.h"

/* The three parts of a read-write lock's keys, as rw.c names them. */
static const char parts[] = "rwq";

struct rwread {
	struct dmutex__rwlock_view *v;
	const char *base;               /* <prefix>r/<n>/ */
	int64_t wlease;                 /* the writer's lease */
	int64_t *leases;                /* the shares' leases */
	size_t nleases;
};

/* A key that is not dmutex's: why, into v->error; -1. */
static int
foreign(struct dmutex__rwlock_view *v, const char *key, const char *why)
{
	snprintf(v->error, sizeof v->error, "%.160s: %s", key, why);
	return -1;
}

/* One key under r->base counted: 0, -1 foreign (said), or ENOMEM. */
static int
one_key(struct rwread *r, const json_t *kv)
{
	struct dmutex__rwlock_view *v = r->v;
	char key[DMUTEX__ETCD_KEY_MAX + DMUTEX__TOKEN_HEX];
	const char *val = json_string_value(json_object_get(kv, "value"));
	size_t blen = strlen(r->base);
	long klen = dmutex__etcd_unb64(json_string_value(json_object_get(kv, "key")), key, sizeof key);
	int bad = 0;
	int64_t lease = dmutex__etcd_int(kv, "lease", &bad);
	int64_t rev = dmutex__etcd_int(kv, "create_revision", &bad);
	char part;

	if (klen < 0 || strncmp(key, r->base, blen))
		return foreign(v, r->base, "a key under it is not one dmutex writes");
	part = key[blen];
	/* A NUL inside, or a part rw.c never writes. */
	if ((size_t)klen != strlen(key) || !part || !strchr(parts, part) || key[blen + 1] != '/' ||
	    !key[blen + 2])
		return foreign(v, key, "not a key dmutex writes");
	/* rw.c puts every key with no value, on a lease. */
	if ((val && *val) || bad || lease <= 0 || rev <= 0)
		return foreign(v, key, "not a value dmutex writes");
	if (part == 'w') {
		if (v->writing)
			return foreign(v, key, "a second writer: not what dmutex writes");
		v->writing = 1;
		v->fence = (uint64_t)rev;
		r->wlease = lease;
	} else if (part == 'q') {
		v->writers_waiting++;
	} else {
		int64_t *l = realloc(r->leases, (r->nleases + 1) * sizeof *l);
		if (!l)
			return ENOMEM;
		r->leases = l;
		r->leases[r->nleases++] = lease;
		v->readers++;
	}
	return 0;
}

static int
cmp_lease(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* The leases left: the writer's, and the longest of the shares' (each
 * lease asked once: a client's shares of one length share it). */
static void
leases_left(struct dmutex__etcd *e, struct rwread *r)
{
	struct dmutex__rwlock_view *v = r->v;

	if (v->writing)
		v->write_left_ms = dmutex__etcd_lease_left(e, r->wlease);
	/* No shares: no array at all, which qsort may not be given. */
	if (r->nleases)
		qsort(r->leases, r->nleases, sizeof *r->leases, cmp_lease);
	for (size_t i = 0; i < r->nleases; i++) {
		long long left;
		if (i && r->leases[i] == r->leases[i - 1])
			continue;
		if ((left = dmutex__etcd_lease_left(e, r->leases[i])) > v->read_left_ms)
			v->read_left_ms = left;
	}
}

static void
view_init(struct dmutex__rwlock_view *v)
{
	memset(v, 0, sizeof *v);
	v->write_left_ms = v->read_left_ms = -1;
}

int
dmutex__etcd_rw_inspect(struct dmutex__backend *be, const char *name,
		struct dmutex__rwlock_view *v)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	char base[DMUTEX__ETCD_KEY_MAX], end[DMUTEX__ETCD_KEY_MAX];
	struct rwread r = { .v = v, .base = base };
	json_t *req, *rep = NULL, *kvs;
	int err = 0;

	view_init(v);
	dmutex__etcd_name_key(e, base, "r", name, "");
	dmutex__etcd_prefix_end(base, end);
	/* Every key of the name at once: one revision's view of it. */
	if (!(req = dmutex__etcd_key(base, end)))
		return ENOMEM;
	err = dmutex__etcd_call(e->http, "/v3/kv/range", req, &rep, 0, NULL, NULL);
	json_decref(req);
	if (err)
		return err;
	kvs = json_object_get(rep, "kvs");
	v->exists = json_array_size(kvs) > 0;
	for (size_t i = 0; i < json_array_size(kvs) && !err; i++)
		err = one_key(&r, json_array_get(kvs, i));
	json_decref(rep);
	if (err < 0) {
		/* Foreign: the error alone, no half-read numbers. */
		char why[sizeof v->error];
		memcpy(why, v->error, sizeof why);
		view_init(v);
		v->exists = 1;
		memcpy(v->error, why, sizeof why);
		err = 0;
	} else if (!err) {
		leases_left(e, &r);
	}
	free(r.leases);
	return err;
}

int
dmutex__etcd_rw_names(struct dmutex__backend *be, int (*fn)(void *arg, const char *name),
		void *arg)
{
	return dmutex__etcd_names_of(be, "r", fn, arg);
}

/* The reset's txn: without force, only while nobody writes or reads; the
 * writer's key deleted with its value returned (its token). */
static json_t *
reset_req(char pre[3][DMUTEX__ETCD_KEY_MAX], char end[3][DMUTEX__ETCD_KEY_MAX], int force)
{
	json_t *dw = dmutex__etcd_op_del(pre[1], end[1]), *cmp;

	if (dw)
		json_object_set_new(json_object_get(dw, "request_delete_range"), "prev_kv", json_true());
	cmp = force ? json_array() : json_pack("[o,o]", dmutex__etcd_cmp_none(pre[0], end[0]),
			dmutex__etcd_cmp_none(pre[1], end[1]));
	return json_pack("{s:o, s:[o,o,o]}", "compare", cmp, "success", dw,
			dmutex__etcd_op_del(pre[0], end[0]), dmutex__etcd_op_del(pre[2], end[2]));
}

/* What the txn's deletes removed, into *removed: 0 or EIO. */
static int
removed_of(const json_t *rep, struct dmutex__rwlock_view *removed)
{
	json_t *d[3];
	int bad = 0;

	for (size_t i = 0; i < 3; i++)
		if (!(d[i] = dmutex__etcd_resp(rep, i, "delete_range", "a read-write lock's reset")))
			return EIO;
	removed->writing = dmutex__etcd_int(d[0], "deleted", &bad) > 0;
	if (removed->writing)
		removed->fence = (uint64_t)dmutex__etcd_int(
				json_array_get(json_object_get(d[0], "prev_kvs"), 0), "create_revision", &bad);
	if (removed->writing && !removed->fence)
		bad = 1;
	removed->readers = dmutex__etcd_int(d[1], "deleted", &bad);
	removed->writers_waiting = dmutex__etcd_int(d[2], "deleted", &bad);
	removed->exists = removed->writing || removed->readers || removed->writers_waiting;
	return bad ? EIO : 0;
}

int
dmutex__etcd_rw_reset(struct dmutex__backend *be, const char *name, int force, int *result,
		struct dmutex__rwlock_view *removed)
{
	struct dmutex__etcd *e = dmutex__etcd_of(be);
	char pre[3][DMUTEX__ETCD_KEY_MAX], end[3][DMUTEX__ETCD_KEY_MAX];
	static const char *const part[3] = { "r/", "w/", "q/" };
	json_t *req, *rep = NULL;
	int err;

	view_init(removed);
	for (int i = 0; i < 3; i++) {
		dmutex__etcd_name_key(e, pre[i], "r", name, part[i]);
		dmutex__etcd_prefix_end(pre[i], end[i]);
	}
	if (!(req = reset_req(pre, end, force)))
		return ENOMEM;
	/* One txn: the holders' keys and the intents go at once, and each
	 * delete wakes the waiters (they watch deletions under <n>/). */
	err = dmutex__etcd_txn(e, req, &rep, 0, NULL, NULL);
	json_decref(req);
	if (err)
		return err;
	if (!dmutex__etcd_bool(rep, "succeeded"))
		*result = DMUTEX__RESET_HELD;
	else if (!(err = removed_of(rep, removed)))
		*result = removed->exists ? DMUTEX__RESET_DONE : DMUTEX__RESET_NOTHING;
	json_decref(rep);
	return err;
}
