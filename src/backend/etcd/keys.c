/* Where a primitive's keys are, and reading a txn's answer (etcd.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/etcd/etcd.h"
#include "base/log.h"

void
dmutex__etcd_name_key(const struct dmutex__etcd *e, char *out, const char *kind,
		const char *name, const char *part)
{
	snprintf(out, DMUTEX__ETCD_KEY_MAX, "%s%s/%zu:%s/%s", e->base.cfg.prefix, kind, strlen(name),
			name, part);
}

int
dmutex__etcd_txn(struct dmutex__etcd *e, json_t *req, json_t **rep, int64_t deadline,
		int *maybe_done, int *refused)
{
	return dmutex__etcd_call(e->http, "/v3/kv/txn", req, rep, deadline, maybe_done, refused);
}

json_t *
dmutex__etcd_resp(const json_t *rep, size_t i, const char *kind, const char *what)
{
	char field[32];
	json_t *r;

	snprintf(field, sizeof field, "response_%s", kind);
	r = json_object_get(json_array_get(json_object_get(rep, "responses"), i), field);
	if (!json_is_object(r)) {
		dmutex__log(DMUTEX_LOG_ERROR, "etcd: unexpected reply to a txn: no %s (%s) in "
				"response %zu", field, what, i);
		return NULL;
	}
	return r;
}

json_t *
dmutex__etcd_first_kv(const json_t *range)
{
	json_t *kv = json_array_get(json_object_get(range, "kvs"), 0);

	return json_is_object(kv) ? kv : NULL;
}

int
dmutex__etcd_robust_add(struct dmutex__etcd *e, const char *token)
{
	int err = 0;

	pthread_mutex_lock(&e->mu);
	if (e->nrobust == e->caprobust) {
		size_t cap = e->caprobust ? 2 * e->caprobust : 16;
		void *p = realloc(e->robust, cap * sizeof *e->robust);
		if (p) {
			e->robust = p;
			e->caprobust = cap;
		}
	}
	if (e->nrobust < e->caprobust)
		snprintf(e->robust[e->nrobust++], sizeof *e->robust, "%s", token);
	else
		err = ENOMEM;
	pthread_mutex_unlock(&e->mu);
	return err;
}

int
dmutex__etcd_robust_take(struct dmutex__etcd *e, const char *token)
{
	int found = 0;

	pthread_mutex_lock(&e->mu);
	for (size_t i = e->nrobust; i-- > 0;)
		if (!strcmp(e->robust[i], token)) {
			memcpy(e->robust[i], e->robust[--e->nrobust], sizeof *e->robust);
			found = 1;
			break;
		}
	pthread_mutex_unlock(&e->mu);
	return found;
}
