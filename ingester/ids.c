/*
 * ids.c -- recently written profile ids; see ids.h.
 */
#include "ids.h"

#include <stdlib.h>
#include <string.h>

#include "common/hash.h"

#define SLOT_EMPTY 0xff
#define REC_LEN (ING_ID_LEN + 1)

void
ing_ids_init(struct ing_ids *x, int64_t window_ms, uint32_t max)
{
	memset(x, 0, sizeof(*x));
	x->window_ms = window_ms;
	x->max = max > 0 ? max : 1;
}

static void
set_fini(struct ing_idset *s)
{
	sm_free(s->key);
	sm_free(s->state);
	sm_free(s->rec);
	memset(s, 0, sizeof(*s));
}

void
ing_ids_fini(struct ing_ids *x)
{
	for (int g = 0; g < ING_ID_GENS; g++)
		set_fini(&x->gen[g]);
}

/* The slot holding `id`, or the empty slot where it would go. */
static uint32_t
set_slot(const struct ing_idset *s, const uint8_t *id)
{
	uint32_t mask = s->nslots - 1;
	uint32_t i = (uint32_t)sm_hash(id, ING_ID_LEN) & mask;

	while (s->state[i] != SLOT_EMPTY &&
	    memcmp(s->key[i], id, ING_ID_LEN) != 0)
		i = (i + 1) & mask;
	return (i);
}

static int
set_grow(struct ing_idset *s)
{
	struct ing_idset n;

	n.nslots = s->nslots ? s->nslots * 2 : 64;
	n.n = 0;
	n.rec = NULL;
	n.key = sm_malloc((size_t)n.nslots * ING_ID_LEN);
	n.state = sm_malloc(n.nslots);
	if (n.key == NULL || n.state == NULL) {
		sm_free(n.key);
		sm_free(n.state);
		return (SM_ENOMEM);
	}
	memset(n.state, SLOT_EMPTY, n.nslots);
	for (uint32_t i = 0; i < s->nslots; i++) {
		uint32_t j;

		if (s->state[i] == SLOT_EMPTY)
			continue;
		j = set_slot(&n, s->key[i]);
		memcpy(n.key[j], s->key[i], ING_ID_LEN);
		n.state[j] = s->state[i];
		n.n++;
	}
	set_fini(s);
	*s = n;
	return (0);
}

static int
rec_cmp(const void *a, const void *b)
{
	return (memcmp(a, b, ING_ID_LEN));
}

/* Pack a closed table into sorted records (ids.h); it stays a table
 * when there is no memory for them. */
static void
set_pack(struct ing_idset *s)
{
	uint8_t *rec;
	uint32_t k = 0;

	if (s->nslots == 0 || s->n == 0 ||
	    (rec = sm_malloc((size_t)s->n * REC_LEN)) == NULL)
		return;
	for (uint32_t i = 0; i < s->nslots; i++) {
		if (s->state[i] == SLOT_EMPTY)
			continue;
		memcpy(rec + (size_t)k * REC_LEN, s->key[i], ING_ID_LEN);
		rec[(size_t)k * REC_LEN + ING_ID_LEN] = s->state[i];
		k++;
	}
	SM_ASSERT(k == s->n);
	qsort(rec, k, REC_LEN, rec_cmp);
	sm_free(s->key);
	sm_free(s->state);
	s->key = NULL;
	s->state = NULL;
	s->nslots = 0;
	s->rec = rec;
}

/* The state byte of `id` in s, or NULL when s does not hold it. */
static uint8_t *
set_find(const struct ing_idset *s, const uint8_t *id)
{
	uint8_t *r;
	uint32_t i;

	if (s->rec != NULL) {
		r = bsearch(id, s->rec, s->n, REC_LEN, rec_cmp);
		return (r != NULL ? r + ING_ID_LEN : NULL);
	}
	if (s->nslots == 0)
		return (NULL);
	i = set_slot(s, id);
	return (s->state[i] == SLOT_EMPTY ? NULL : &s->state[i]);
}

static enum ing_id_state
set_get(const struct ing_idset *s, const uint8_t *id)
{
	const uint8_t *st = set_find(s, id);

	return (st == NULL ? ING_ID_ABSENT : (enum ing_id_state)*st);
}

enum ing_id_state
ing_ids_get(const struct ing_ids *x, const uint8_t *id)
{
	for (int g = 0; g < ING_ID_GENS; g++) {
		enum ing_id_state st = set_get(&x->gen[g], id);

		if (st != ING_ID_ABSENT)
			return (st);
	}
	return (ING_ID_ABSENT);
}

int
ing_ids_set(struct ing_ids *x, const uint8_t *id, enum ing_id_state st,
    int64_t now_ms)
{
	struct ing_idset *s;
	uint8_t *at;
	uint32_t i;
	int64_t span = x->window_ms / (ING_ID_GENS - 1);
	uint32_t cap = x->max / (ING_ID_GENS - 1);

	if (x->since_ms == 0)
		x->since_ms = now_ms;
	if (now_ms - x->since_ms >= SM_MAX(span, 1) ||
	    x->gen[0].n >= SM_MAX(cap, 1)) {
		/* An id in flight must survive the rotation: it moves down
		 * with its set (the oldest set is a whole window old). */
		set_fini(&x->gen[ING_ID_GENS - 1]);
		memmove(&x->gen[1], &x->gen[0],
		    (ING_ID_GENS - 1) * sizeof(x->gen[0]));
		memset(&x->gen[0], 0, sizeof(x->gen[0]));
		x->since_ms = now_ms;
		set_pack(&x->gen[1]);
	}
	/* Update in place where it lives; new ids go to the current set. */
	for (int g = 1; g < ING_ID_GENS; g++) {
		if ((at = set_find(&x->gen[g], id)) != NULL) {
			*at = (uint8_t)st;
			return (0);
		}
	}
	s = &x->gen[0];
	if ((s->n + 1) * 4 > s->nslots * 3 && set_grow(s) != 0)
		return (SM_ENOMEM);
	i = set_slot(s, id);
	if (s->state[i] == SLOT_EMPTY) {
		memcpy(s->key[i], id, ING_ID_LEN);
		s->n++;
	}
	s->state[i] = (uint8_t)st;
	return (0);
}
