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
dmutex__etcd_tok_add(struct dmutex__etcd *e, struct dmutex__etcd_tokset *set, const char *token)
{
	int err = 0;

	pthread_mutex_lock(&e->mu);
	if (set->n == set->cap) {
		size_t cap = set->cap ? 2 * set->cap : 16;
		void *p = realloc(set->v, cap * sizeof *set->v);
		if (p) {
			set->v = p;
			set->cap = cap;
		}
	}
	if (set->n < set->cap)
		snprintf(set->v[set->n++], sizeof *set->v, "%s", token);
	else
		err = ENOMEM;
	pthread_mutex_unlock(&e->mu);
	return err;
}

/* Under e->mu: token's index in set, or set->n. */
static size_t
find(const struct dmutex__etcd_tokset *set, const char *token)
{
	size_t i = set->n;

	while (i-- > 0)
		if (!strcmp(set->v[i], token))
			return i;
	return set->n;
}

int
dmutex__etcd_tok_take(struct dmutex__etcd *e, struct dmutex__etcd_tokset *set, const char *token)
{
	size_t i;
	int found;

	pthread_mutex_lock(&e->mu);
	if ((found = (i = find(set, token)) < set->n))
		memcpy(set->v[i], set->v[--set->n], sizeof *set->v);
	pthread_mutex_unlock(&e->mu);
	return found;
}

int
dmutex__etcd_tok_has(struct dmutex__etcd *e, struct dmutex__etcd_tokset *set, const char *token)
{
	int found;

	pthread_mutex_lock(&e->mu);
	found = find(set, token) < set->n;
	pthread_mutex_unlock(&e->mu);
	return found;
}

/* Under mu: token's entry in the seconds, or nseconds. */
static size_t
second_of(const struct dmutex__etcd *e, const char *token)
{
	size_t i = 0;

	while (i < e->nseconds && strcmp(e->seconds[i].token, token))
		i++;
	return i;
}

void
dmutex__etcd_second_set(struct dmutex__etcd *e, const char *token, const char *head,
		int64_t rev, int64_t lease)
{
	char *h = strdup(head);
	size_t i;

	if (!h)
		return;         /* no shortcut: the next try asks etcd */
	pthread_mutex_lock(&e->mu);
	if ((i = second_of(e, token)) == e->nseconds && e->nseconds == e->capseconds) {
		size_t cap = e->capseconds ? 2 * e->capseconds : 8;
		void *p = realloc(e->seconds, cap * sizeof *e->seconds);
		if (p) {
			e->seconds = p;
			e->capseconds = cap;
		}
	}
	if (i < e->capseconds) {
		if (i == e->nseconds)
			e->nseconds++;
		else
			free(e->seconds[i].head);
		snprintf(e->seconds[i].token, sizeof e->seconds[i].token, "%s", token);
		e->seconds[i].head = h;
		e->seconds[i].rev = rev;
		e->seconds[i].lease = lease;
		h = NULL;
	}
	pthread_mutex_unlock(&e->mu);
	free(h);
}

int
dmutex__etcd_second_ready(struct dmutex__etcd *e, const char *token, int64_t lease, int64_t *rev)
{
	int ready = 0;
	size_t i;

	pthread_mutex_lock(&e->mu);
	if ((i = second_of(e, token)) < e->nseconds) {
		struct dmutex__etcd_second *s = &e->seconds[i];
		char own[DMUTEX__ETCD_KEY_MAX];
		const char *slash = strrchr(s->head, '/');
		int mine_gone = 0;
		/* Ours is the head's queue with our token. */
		snprintf(own, sizeof own, "%.*s%s", slash ? (int)(slash - s->head + 1) : 0, s->head,
				token);
		for (unsigned g = 0; lease >= 0 && s->lease == lease && e->gone && g < DMUTEX__ETCD_GONE
				&& g < e->ngone; g++) {
			ready |= !strcmp(e->gone[g], s->head);
			/* Our own key went too (a reset, our lease): not ours. */
			mine_gone |= !strcmp(e->gone[g], own);
		}
		ready &= !mine_gone;
		if (mine_gone)
			lease = -1;
		if (ready)
			*rev = s->rev;
		/* Used or forgotten: the next answer sets it again. */
		if (ready || lease < 0) {
			free(s->head);
			*s = e->seconds[--e->nseconds];
		}
	}
	pthread_mutex_unlock(&e->mu);
	return ready;
}

void
dmutex__etcd_gone(struct dmutex__etcd *e, const char *key)
{
	pthread_mutex_lock(&e->mu);
	if (!e->gone)
		e->gone = calloc(DMUTEX__ETCD_GONE, sizeof *e->gone);
	if (e->gone)
		snprintf(e->gone[e->ngone++ % DMUTEX__ETCD_GONE], sizeof *e->gone, "%s", key);
	pthread_mutex_unlock(&e->mu);
}
