/* Where a primitive's keys are, and reading a txn's answer (etcd.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/etcd/etcd.h"
#include "base/base.h"
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

/* The bucket of token's slot: tokens are random hex. */
static struct dmutex__etcd_slot **
bucket(struct dmutex__etcd *e, const char *token)
{
	unsigned h = (unsigned)strtoul((char[3]){ token[0], token[0] ? token[1] : 0, 0 }, NULL, 16);

	return &e->slots[h % DMUTEX__ETCD_SLOT_BUCKETS];
}

/* Under mu: where token's slot is linked (*pp NULL if it has none). */
static struct dmutex__etcd_slot **
slot_of(struct dmutex__etcd *e, const char *token)
{
	struct dmutex__etcd_slot **pp = bucket(e, token);

	while (*pp && strcmp((*pp)->token, token))
		pp = &(*pp)->next;
	return pp;
}

/* Under mu: a new slot for token, NULL if out of memory. */
static struct dmutex__etcd_slot *
slot_new(struct dmutex__etcd *e, const char *token)
{
	struct dmutex__etcd_slot *s = malloc(sizeof *s);

	if (!s)
		return NULL;
	if (!e->id[0]) {
		char t[DMUTEX__TOKEN_HEX + 1];
		if (dmutex__token(t)) {
			free(s);
			return NULL;
		}
		memcpy(e->id, t, sizeof e->id - 1);
		e->id[sizeof e->id - 1] = '\0';
	}
	snprintf(s->token, sizeof s->token, "%s", token);
	s->slot = e->nfree ? e->free_slots[--e->nfree] : e->next_slot++;
	s->next = *bucket(e, token);
	*bucket(e, token) = s;
	return s;
}

int
dmutex__etcd_own_key(struct dmutex__etcd *e, const char *q, const char *token, int make, char *out)
{
	struct dmutex__etcd_slot *s;
	int err = 0;

	pthread_mutex_lock(&e->mu);
	if (!(s = *slot_of(e, token)) && make)
		s = slot_new(e, token);
	/* The pid: a child of fork has its parent's slots, not its keys. */
	if (s)
		snprintf(out, DMUTEX__ETCD_KEY_MAX, "%s%s.%lx.%x", q, e->id,
				(unsigned long)*e->base.cfg.pid, s->slot);
	else if (make)
		err = ENOMEM;   /* never a key of another name than the next try's */
	else
		snprintf(out, DMUTEX__ETCD_KEY_MAX, "%s%s", q, token);
	pthread_mutex_unlock(&e->mu);
	return err;
}

void
dmutex__etcd_own_free(struct dmutex__etcd *e, const char *token)
{
	struct dmutex__etcd_slot **pp, *s;

	pthread_mutex_lock(&e->mu);
	if ((s = *(pp = slot_of(e, token)))) {
		*pp = s->next;
		if (e->nfree == e->capfree) {
			size_t cap = e->capfree ? 2 * e->capfree : 16;
			unsigned *p = realloc(e->free_slots, cap * sizeof *p);
			if (p) {
				e->free_slots = p;
				e->capfree = cap;
			}
		}
		/* No room to give it back: a new number later, as safe. */
		if (e->nfree < e->capfree)
			e->free_slots[e->nfree++] = s->slot;
		free(s);
	}
	pthread_mutex_unlock(&e->mu);
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
		int64_t head_rev, const char *own, int64_t rev, int64_t lease)
{
	char *h = strdup(head), *o = strdup(own);
	size_t i;

	if (!h || !o) {
		free(h);
		free(o);
		return;         /* no shortcut: the next try asks etcd */
	}
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
		if (i == e->nseconds) {
			e->nseconds++;
		} else {
			free(e->seconds[i].head);
			free(e->seconds[i].own);
		}
		snprintf(e->seconds[i].token, sizeof e->seconds[i].token, "%s", token);
		e->seconds[i].head = h;
		e->seconds[i].own = o;
		e->seconds[i].head_rev = head_rev;
		e->seconds[i].rev = rev;
		e->seconds[i].lease = lease;
		h = o = NULL;
	}
	pthread_mutex_unlock(&e->mu);
	free(h);
	free(o);
}

int
dmutex__etcd_second_ready(struct dmutex__etcd *e, const char *token, int64_t lease, int64_t *rev)
{
	int ready = 0;
	size_t i;

	pthread_mutex_lock(&e->mu);
	if ((i = second_of(e, token)) < e->nseconds) {
		struct dmutex__etcd_second *s = &e->seconds[i];
		int mine_gone = 0;
		/* Key names are used again (etcd.h, own keys): a deletion
		 * counts only after the creation we read. */
		for (unsigned g = 0; lease >= 0 && s->lease == lease && e->gone && g < DMUTEX__ETCD_GONE
				&& g < e->ngone; g++) {
			ready |= !strcmp(e->gone[g].key, s->head) && e->gone[g].rev > s->head_rev;
			/* Our own key went too (a reset, our lease): not ours. */
			mine_gone |= !strcmp(e->gone[g].key, s->own) && e->gone[g].rev > s->rev;
		}
		ready &= !mine_gone;
		if (mine_gone)
			lease = -1;
		if (ready)
			*rev = s->rev;
		/* Used or forgotten: the next answer sets it again. */
		if (ready || lease < 0) {
			free(s->head);
			free(s->own);
			*s = e->seconds[--e->nseconds];
		}
	}
	pthread_mutex_unlock(&e->mu);
	return ready;
}

void
dmutex__etcd_gone(struct dmutex__etcd *e, const char *key, int64_t rev)
{
	pthread_mutex_lock(&e->mu);
	if (!e->gone)
		e->gone = calloc(DMUTEX__ETCD_GONE, sizeof *e->gone);
	if (e->gone) {
		struct dmutex__etcd_gone *g = &e->gone[e->ngone++ % DMUTEX__ETCD_GONE];
		snprintf(g->key, sizeof g->key, "%s", key);
		g->rev = rev;
	}
	pthread_mutex_unlock(&e->mu);
}
