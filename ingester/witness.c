/*
 * witness.c -- the record of who else holds this ingester's data; see
 * witness.h.
 */
#include "witness.h"

#include <pthread.h>
#include <string.h>

#include "common/buf.h"
#include "common/log.h"

struct wit_peer {
	char *id, *zone;
	char inc[33];
	int64_t first, last;
	bool saved;                  /* first and last as stored */
};

struct wit_cov {
	char inc[33];
	int64_t min, max;
};

struct ing_witness {
	pthread_mutex_t mu;
	struct ing_store *store;
	char *self;
	struct wit_peer *p;
	uint32_t n, cap;
	struct wit_cov *c;
	uint32_t nc, ccap;
	bool dirty;
};

static void
peer_fini(struct wit_peer *p)
{
	sm_free(p->id);
	sm_free(p->zone);
}

/* Entry for (id, inc), added when missing; NULL without memory. */
static struct wit_peer *
peer_get(struct ing_witness *w, const char *id, const char *zone,
    const char *inc)
{
	struct wit_peer *p;

	for (uint32_t i = 0; i < w->n; i++) {
		p = &w->p[i];
		if (strcmp(p->inc, inc) == 0 && strcmp(p->id, id) == 0)
			return (p);
	}
	if (w->n == ING_WITNESS_MAX) {
		uint32_t old = 0;

		/* Forget the peer whose shared data is oldest. */
		for (uint32_t i = 1; i < w->n; i++)
			if (w->p[i].last < w->p[old].last)
				old = i;
		peer_fini(&w->p[old]);
		w->p[old] = w->p[--w->n];
	}
	if (SM_GROW(w->p, w->cap, w->n + 1, 8) != 0)
		return (NULL);
	p = &w->p[w->n];
	memset(p, 0, sizeof(*p));
	if ((p->id = sm_strdup(id)) == NULL ||
	    (p->zone = sm_strdup(zone)) == NULL) {
		peer_fini(p);
		return (NULL);
	}
	snprintf(p->inc, sizeof(p->inc), "%s", inc);
	p->first = INT64_MAX;
	p->last = INT64_MIN;
	w->n++;
	return (p);
}

static void
load(struct ing_witness *w)
{
	struct sm_buf v = SM_BUF_INIT;
	Smolder__V1__Witness *r;
	struct sm_err err;
	int rv;

	sm_err_clear(&err);
	rv = ing_store_witness_get(w->store, &v, &err);
	if (rv != 0) {
		if (rv != SM_ENOTFOUND)
			sm_error("ingester", "witness record not readable; "
			    "starting a new one\terr=\"%s\"", err.msg);
		sm_buf_fini(&v);
		return;
	}
	r = smolder__v1__witness__unpack(NULL, v.len, (const uint8_t *)v.b);
	sm_buf_fini(&v);
	if (r == NULL) {
		sm_error("ingester", "witness record damaged; starting a new "
		    "one");
		return;
	}
	for (size_t i = 0; i < r->n_peers; i++) {
		const Smolder__V1__WitnessPeer *e = r->peers[i];
		struct wit_peer *p = peer_get(w, e->id, e->zone,
		    e->incarnation);

		if (p == NULL)
			break;
		p->first = e->first_ms;
		p->last = e->last_ms;
		p->saved = true;
	}
	for (size_t i = 0; i < r->n_restored; i++) {
		const Smolder__V1__Coverage *e = r->restored[i];

		if (SM_GROW(w->c, w->ccap, w->nc + 1, 4) != 0)
			break;
		snprintf(w->c[w->nc].inc, 33, "%s", e->incarnation);
		w->c[w->nc].min = e->min_ms;
		w->c[w->nc].max = e->max_ms;
		w->nc++;
	}
	smolder__v1__witness__free_unpacked(r, NULL);
}

int
ing_witness_open(struct ing_store *store, const char *self_id,
    struct ing_witness **out, struct sm_err *err)
{
	struct ing_witness *w;

	*out = NULL;
	if ((w = sm_calloc(1, sizeof(*w))) == NULL ||
	    (w->self = sm_strdup(self_id)) == NULL) {
		sm_free(w);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	pthread_mutex_init(&w->mu, NULL);
	w->store = store;
	load(w);
	*out = w;
	return (0);
}

void
ing_witness_close(struct ing_witness *w)
{
	if (w == NULL)
		return;
	for (uint32_t i = 0; i < w->n; i++)
		peer_fini(&w->p[i]);
	sm_free(w->p);
	sm_free(w->c);
	sm_free(w->self);
	pthread_mutex_destroy(&w->mu);
	sm_free(w);
}

void
ing_witness_record(struct ing_witness *w,
    const Smolder__V1__WriteRequest *req)
{
	int64_t lo = INT64_MAX, hi = INT64_MIN;

	if (w == NULL || req->n_replicas < 2 || req->n_series == 0)
		return;
	for (size_t k = 0; k < req->n_series; k++) {
		lo = SM_MIN(lo, req->series[k]->time_ms);
		hi = SM_MAX(hi, req->series[k]->time_ms);
	}
	pthread_mutex_lock(&w->mu);
	for (size_t i = 0; i < req->n_replicas; i++) {
		const Smolder__V1__Replica *r = req->replicas[i];
		struct wit_peer *p;

		if (r->id == NULL || r->id[0] == '\0' ||
		    strcmp(r->id, w->self) == 0 || r->incarnation == NULL ||
		    strlen(r->incarnation) != 32)
			continue;
		if ((p = peer_get(w, r->id, r->zone != NULL ? r->zone : "",
		    r->incarnation)) == NULL)
			break;
		if (lo < p->first) {
			p->first = lo;
			p->saved = false;
		}
		if (hi > p->last) {
			p->last = hi;
			p->saved = false;
		}
		w->dirty |= !p->saved;
	}
	pthread_mutex_unlock(&w->mu);
}

void
ing_witness_restored(struct ing_witness *w, const char *inc, int64_t min_ms,
    int64_t max_ms)
{
	uint32_t i;

	if (w == NULL)
		return;
	pthread_mutex_lock(&w->mu);
	for (i = 0; i < w->nc && strcmp(w->c[i].inc, inc) != 0; i++)
		;
	if (i == w->nc && SM_GROW(w->c, w->ccap, w->nc + 1, 4) == 0) {
		snprintf(w->c[i].inc, 33, "%s", inc);
		w->c[i].min = min_ms;
		w->c[i].max = max_ms;
		w->nc++;
		w->dirty = true;
	} else if (i < w->nc) {
		w->c[i].min = SM_MIN(w->c[i].min, min_ms);
		w->c[i].max = SM_MAX(w->c[i].max, max_ms);
		w->dirty = true;
	}
	pthread_mutex_unlock(&w->mu);
}

void
ing_witness_expire(struct ing_witness *w, int64_t floor_ms)
{
	if (w == NULL)
		return;
	pthread_mutex_lock(&w->mu);
	for (uint32_t i = 0; i < w->n;) {
		if (w->p[i].last < floor_ms && w->p[i].first <= w->p[i].last) {
			peer_fini(&w->p[i]);
			w->p[i] = w->p[--w->n];
			w->dirty = true;
		} else {
			if (w->p[i].first < floor_ms) {
				w->p[i].first = floor_ms;
				w->p[i].saved = false;
				w->dirty = true;
			}
			i++;
		}
	}
	for (uint32_t i = 0; i < w->nc;) {
		if (w->c[i].max < floor_ms) {
			w->c[i] = w->c[--w->nc];
			w->dirty = true;
		} else {
			i++;
		}
	}
	pthread_mutex_unlock(&w->mu);
}

/* `v` in `a` when `copy` (an answer outlives the lock), else borrowed. */
static char *
str(struct sm_arena *a, char *v, bool copy)
{
	return (copy ? sm_arena_strndup(a, v, strlen(v)) : v);
}

/* The record as a message in `a` (w->mu held); its strings are copies
 * when `copy`.  NULL without memory. */
static Smolder__V1__Witness *
build(struct ing_witness *w, struct sm_arena *a, bool copy)
{
	Smolder__V1__Witness *r = sm_arena_alloc(a, sizeof(*r));
	Smolder__V1__WitnessPeer *pe;
	Smolder__V1__Coverage *ce;

	if (r == NULL)
		return (NULL);
	smolder__v1__witness__init(r);
	pe = sm_arena_alloc(a, (size_t)SM_MAX(w->n, 1) * sizeof(*pe));
	r->peers = sm_arena_alloc(a, (size_t)SM_MAX(w->n, 1) *
	    sizeof(*r->peers));
	ce = sm_arena_alloc(a, (size_t)SM_MAX(w->nc, 1) * sizeof(*ce));
	r->restored = sm_arena_alloc(a, (size_t)SM_MAX(w->nc, 1) *
	    sizeof(*r->restored));
	if (pe == NULL || r->peers == NULL || ce == NULL ||
	    r->restored == NULL)
		return (NULL);
	for (uint32_t i = 0; i < w->n; i++) {
		if (w->p[i].first > w->p[i].last)
			continue;
		smolder__v1__witness_peer__init(&pe[r->n_peers]);
		if ((pe[r->n_peers].id = str(a, w->p[i].id, copy)) == NULL ||
		    (pe[r->n_peers].zone = str(a, w->p[i].zone, copy)) ==
		    NULL || (pe[r->n_peers].incarnation = str(a, w->p[i].inc,
		    copy)) == NULL)
			return (NULL);
		pe[r->n_peers].first_ms = w->p[i].first;
		pe[r->n_peers].last_ms = w->p[i].last;
		r->peers[r->n_peers] = &pe[r->n_peers];
		r->n_peers++;
	}
	for (uint32_t i = 0; i < w->nc; i++) {
		smolder__v1__coverage__init(&ce[i]);
		if ((ce[i].incarnation = str(a, w->c[i].inc, copy)) == NULL)
			return (NULL);
		ce[i].min_ms = w->c[i].min;
		ce[i].max_ms = w->c[i].max;
		r->restored[i] = &ce[i];
	}
	r->n_restored = w->nc;
	return (r);
}

Smolder__V1__Witness *
ing_witness_get(struct ing_witness *w, struct sm_arena *a)
{
	Smolder__V1__Witness *r;

	if (w == NULL)
		return (NULL);
	pthread_mutex_lock(&w->mu);
	r = build(w, a, true);
	pthread_mutex_unlock(&w->mu);
	return (r);
}

int
ing_witness_save(struct ing_witness *w, struct sm_err *err)
{
	struct sm_arena *a;
	Smolder__V1__Witness *r;
	uint8_t *b = NULL;
	size_t n = 0;
	int rv = 0;

	if (w == NULL)
		return (0);
	if ((a = sm_arena_create(0)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	pthread_mutex_lock(&w->mu);
	if (!w->dirty) {
		pthread_mutex_unlock(&w->mu);
		sm_arena_destroy(a);
		return (0);
	}
	if ((r = build(w, a, false)) != NULL) {
		n = smolder__v1__witness__get_packed_size(r);
		if ((b = sm_arena_alloc(a, SM_MAX(n, 1))) != NULL)
			smolder__v1__witness__pack(r, b);
	}
	if (b != NULL) {
		for (uint32_t i = 0; i < w->n; i++)
			w->p[i].saved = true;
		w->dirty = false;
	}
	pthread_mutex_unlock(&w->mu);
	if (b == NULL)
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
	else if ((rv = ing_store_witness_put(w->store, b, n, err)) != 0) {
		pthread_mutex_lock(&w->mu);
		w->dirty = true;
		pthread_mutex_unlock(&w->mu);
	}
	sm_arena_destroy(a);
	return (rv);
}
