/*
 * tree.c -- the interned stack tree; see tree.h for the model.
 */
#include "tree.h"

#include <string.h>

#include "hash.h"

static inline uint32_t
tree_hash(uint32_t parent, uint32_t name)
{
	return ((uint32_t)sm_hash_u64(((uint64_t)parent << 32) | name));
}

static int
tree_rehash(struct sm_tree *t, uint32_t nslots)
{
	uint32_t *slots = sm_calloc(nslots, sizeof(*slots));
	uint32_t mask = nslots - 1;

	if (slots == NULL)
		return (SM_ENOMEM);
	for (uint32_t id = 1; id < t->n; id++) {
		uint32_t i = tree_hash(t->parent[id], t->name[id]) & mask;

		while (slots[i] != 0)
			i = (i + 1) & mask;
		slots[i] = id + 1;
	}
	sm_free(t->slots);
	t->slots = slots;
	t->nslots = nslots;
	return (0);
}

int
sm_tree_init(struct sm_tree *t)
{
	memset(t, 0, sizeof(*t));
	t->cap = 64;
	t->parent = sm_malloc(t->cap * sizeof(uint32_t));
	t->name = sm_malloc(t->cap * sizeof(uint32_t));
	if (t->parent == NULL || t->name == NULL || tree_rehash(t, 128) != 0) {
		sm_tree_fini(t);
		return (SM_ENOMEM);
	}
	t->parent[0] = 0;
	t->name[0] = 0;
	t->n = 1;
	return (0);
}

void
sm_tree_fini(struct sm_tree *t)
{
	sm_free(t->parent);
	sm_free(t->name);
	sm_free(t->slots);
	memset(t, 0, sizeof(*t));
}

int
sm_tree_find(const struct sm_tree *t, uint32_t parent, uint32_t name,
    uint32_t *out)
{
	uint32_t mask = t->nslots - 1, i, v;

	for (i = tree_hash(parent, name) & mask; (v = t->slots[i]) != 0;
	    i = (i + 1) & mask) {
		if (t->parent[v - 1] == parent && t->name[v - 1] == name) {
			*out = v - 1;
			return (0);
		}
	}
	return (SM_ENOTFOUND);
}

int
sm_tree_child(struct sm_tree *t, uint32_t parent, uint32_t name,
    uint32_t *out)
{
	uint32_t mask, i, v;
	int rv;

	SM_ASSERT(parent < t->n);
	mask = t->nslots - 1;
	for (i = tree_hash(parent, name) & mask; (v = t->slots[i]) != 0;
	    i = (i + 1) & mask) {
		if (t->parent[v - 1] == parent && t->name[v - 1] == name) {
			*out = v - 1;
			return (0);
		}
	}
	if (t->n >= (1u << 31))
		return (SM_ETOOBIG);
	if (t->n == t->cap) {
		uint32_t ncap = t->cap * 2;
		uint32_t *np = sm_reallocarray(t->parent, ncap, sizeof(*np));

		if (np == NULL)
			return (SM_ENOMEM);
		t->parent = np;
		np = sm_reallocarray(t->name, ncap, sizeof(*np));
		if (np == NULL)
			return (SM_ENOMEM);
		t->name = np;
		t->cap = ncap;
	}
	t->parent[t->n] = parent;
	t->name[t->n] = name;
	if ((uint64_t)(t->n + 1) * 2 > t->nslots) {
		t->n++;
		rv = tree_rehash(t, t->nslots * 2);
		if (rv != 0) {
			t->n--;
			return (rv);
		}
		*out = t->n - 1;
		return (0);
	}
	t->slots[i] = t->n + 1;
	*out = t->n++;
	return (0);
}

uint32_t
sm_tree_depth(const struct sm_tree *t, uint32_t id)
{
	uint32_t d = 0;

	while (id != 0) {
		id = t->parent[id];
		d++;
	}
	return (d);
}

void
sm_tree_totals(const struct sm_tree *t, const int64_t *self, int64_t *total)
{
	memcpy(total, self, (size_t)t->n * sizeof(*total));
	for (uint32_t i = t->n; i-- > 1;)
		total[t->parent[i]] = sm_add_sat(total[t->parent[i]],
		    total[i]);
}

size_t
sm_tree_mem(const struct sm_tree *t)
{
	return ((size_t)t->cap * 2 * sizeof(uint32_t) +
	    (size_t)t->nslots * sizeof(uint32_t));
}
