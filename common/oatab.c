/*
 * oatab.c -- growth of the open-addressing index table; see oatab.h.
 */
#include "oatab.h"

#include <string.h>

#include "arena.h"

const uint64_t sm_oatab_empty_slot = 0;

void
sm_oatab_init(struct sm_oatab *t, uint32_t min_slots)
{
	memset(t, 0, sizeof(*t));
	t->min_slots = min_slots;
}

void
sm_oatab_init_arena(struct sm_oatab *t, uint32_t min_slots,
    struct sm_arena *a)
{
	sm_oatab_init(t, min_slots);
	t->arena = a;
}

void
sm_oatab_fini(struct sm_oatab *t)
{
	uint32_t min_slots = t->min_slots;
	struct sm_arena *a = t->arena;

	if (a == NULL)
		sm_free(t->slots);
	sm_oatab_init_arena(t, min_slots, a);
}

void
sm_oatab_clear(struct sm_oatab *t)
{
	if (t->nslots != 0)
		memset(t->slots, 0, (size_t)t->nslots * sizeof(*t->slots));
	t->n = 0;
}

/* Move every slot into a new array of `nslots`; SM_ENOMEM leaves t as is. */
static int
oatab_rehash(struct sm_oatab *t, uint32_t nslots)
{
	uint64_t *slots = t->arena != NULL ?
	    sm_arena_calloc(t->arena, nslots, sizeof(*slots)) :
	    sm_calloc(nslots, sizeof(*slots));
	uint32_t mask = nslots - 1;

	if (slots == NULL)
		return (SM_ENOMEM);
	for (uint32_t k = 0; k < t->nslots; k++) {
		uint64_t s = t->slots[k];
		uint32_t i;

		if (s == 0)
			continue;
		for (i = (uint32_t)(s >> 32) & mask; slots[i] != 0;
		    i = (i + 1) & mask)
			;
		slots[i] = s;
	}
	if (t->arena == NULL)
		sm_free(t->slots);
	t->slots = slots;
	t->nslots = nslots;
	t->mask = mask;
	return (0);
}

/* The smallest power of two >= 2 slots that holds `n` at load <= 1/2. */
static int
oatab_size_for(const struct sm_oatab *t, uint64_t n, uint32_t *nslots)
{
	uint64_t ns = t->nslots != 0 ? t->nslots :
	    t->min_slots != 0 ? t->min_slots : 64;
	uint64_t p = 2;

	while (p < ns)
		p <<= 1;
	while (n * 2 > p)
		p <<= 1;
	if (p > (1u << 31))
		return (SM_ENOMEM);
	*nslots = (uint32_t)p;
	return (0);
}

int
sm_oatab_grow_to(struct sm_oatab *t, uint32_t n)
{
	uint32_t ns;

	if (oatab_size_for(t, n, &ns) != 0)
		return (SM_ENOMEM);
	return (oatab_rehash(t, ns));
}

int
sm_oatab_grow_insert(struct sm_oatab *t, struct sm_oatab_it *it,
    uint32_t idx)
{
	uint32_t i;
	int rv;

	SM_ASSERT(idx < UINT32_MAX - 1);
	if ((uint64_t)(t->n + 1) * 2 > t->nslots) {
		uint32_t ns;

		if (t->nslots == 0)
			rv = oatab_size_for(t, (uint64_t)t->n + 1, &ns);
		else
			rv = oatab_size_for(t, (uint64_t)t->nslots, &ns);
		if (rv != 0 || (rv = oatab_rehash(t, ns)) != 0)
			return (rv);
	}
	for (i = it->tag & t->mask; t->slots[i] != 0; i = (i + 1) & t->mask)
		;
	t->slots[i] = (uint64_t)it->tag << 32 | (idx + 1);
	t->n++;
	return (0);
}
