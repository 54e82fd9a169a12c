/*
 * oatab.h -- the one open-addressing hash table of entry indices.
 *
 * Interning tables (strings, stack-tree nodes, series, label groups) keep
 * their entries in their own dense arrays and need only a map from a key to
 * the entry's index.  This is that map: a power-of-two array of slots,
 * linear probing, load factor <= 1/2, no deletion.
 *
 * Slot layout (uint64_t): low 32 bits = entry index + 1 (0 = empty slot),
 * high 32 bits = the low 32 bits of the entry's 64-bit hash (the "tag").
 * The probe starts at (uint32_t)h & mask, so a table holds at most 2^31
 * slots.  Because the slot keeps the hash bits:
 *   - a probe skips entries whose tag differs without touching the caller's
 *     array (only a full tag match reaches the caller's equality test);
 *   - rehashing needs no callback: the tag is the position's source.
 *
 * Finding is an iterator of static inline functions, so the caller tests
 * equality inline (no function-pointer call on the hot path):
 *
 *	struct sm_oatab_it it;
 *	uint32_t idx;
 *
 *	for (sm_oatab_probe(t, h, &it);
 *	    (idx = sm_oatab_next(t, &it)) != SM_OATAB_NONE;)
 *		if (equal(entries[idx], key))
 *			return (idx);
 *	// Not found: `it` now rests on the empty slot the probe ended on.
 *	if ((rv = sm_oatab_insert(t, &it, new_idx)) != 0)
 *		return (rv);   // SM_ENOMEM, table unchanged
 *
 * Only a hash's low 32 bits take part (tag and position), as in the tables
 * this replaced; hashes come from hash.h.
 *
 * Order of a miss: the iterator stays valid until the table changes, so a
 * caller whose own steps after the probe can fail either inserts last
 * (insert may grow and fail: nothing changed) or calls sm_oatab_reserve()
 * for one more index *before* probing, after which the insert cannot fail.
 *
 * Memory: 8 bytes a slot, 2 to 4 slots an index (twice the uint32_t slot
 * arrays this replaced; the tag is what saves the entry reads).
 *
 * Ownership: the table owns its slot array (sm_calloc/sm_free, so the
 * fault injection of sm.h applies); the entries are the caller's.  A table
 * made with sm_oatab_init_arena() takes its slot arrays from an arena
 * instead (counted against its budget, never freed one by one: growth
 * leaves the old array in the arena), for tables that live and die with a
 * per-request arena.
 * Locking: none; the owner serialises writers against readers.  Finding
 * does not write the table, so concurrent finds are safe.
 * Errors: sm_oatab_insert() and sm_oatab_reserve() return 0 or SM_ENOMEM;
 * on failure the table is unchanged.  Everything else cannot fail.
 */
#ifndef SM_OATAB_H
#define SM_OATAB_H

#include "sm.h"

struct sm_arena;

#define SM_OATAB_NONE UINT32_MAX

struct sm_oatab {
	uint64_t *slots;     /* tag << 32 | (idx + 1); NULL while nslots == 0 */
	uint32_t mask;       /* nslots - 1 (0 while empty) */
	uint32_t nslots;     /* 0 or a power of two */
	uint32_t n;          /* indices stored */
	uint32_t min_slots;  /* slots the first insert allocates (0: 64) */
	struct sm_arena *arena; /* slots from here, or NULL: the heap */
};

/* Where a probe is; only for sm_oatab_next() and sm_oatab_insert(). */
struct sm_oatab_it {
	const uint64_t *slots;
	uint32_t mask;
	uint32_t i;          /* next slot to look at */
	uint32_t tag;        /* low 32 bits of the hash */
};

/* One always-empty slot: probing a table with no slots ends at once. */
extern const uint64_t sm_oatab_empty_slot;

/*
 * Initialise an empty table; allocates nothing.  The first insert allocates
 * `min_slots` slots (rounded up to a power of two, at least 2; 0 means 64).
 * A zeroed struct is the same as sm_oatab_init(t, 0).
 */
void sm_oatab_init(struct sm_oatab *t, uint32_t min_slots);

/* The same, with slot arrays from arena `a`, which must outlive the table. */
void sm_oatab_init_arena(struct sm_oatab *t, uint32_t min_slots,
    struct sm_arena *a);

/* Free the slots; the table is empty (and may be used) again. */
void sm_oatab_fini(struct sm_oatab *t);

/* Forget every index, keeping the slot array. */
void sm_oatab_clear(struct sm_oatab *t);

int sm_oatab_grow_to(struct sm_oatab *t, uint32_t n);

/*
 * Make room so that `n` indices fit without growing (load <= 1/2): after
 * it, inserting up to n - t->n indices cannot fail.
 * Returns 0 or SM_ENOMEM (table unchanged).
 */
static inline int
sm_oatab_reserve(struct sm_oatab *t, uint32_t n)
{
	if ((uint64_t)n * 2 <= t->nslots)
		return (0);
	return (sm_oatab_grow_to(t, n));
}

/* Bytes of the slot array (memory accounting). */
static inline size_t
sm_oatab_mem(const struct sm_oatab *t)
{
	return ((size_t)t->nslots * sizeof(uint64_t));
}

static inline void
sm_oatab_probe(const struct sm_oatab *t, uint64_t h, struct sm_oatab_it *it)
{
	it->slots = t->slots != NULL ? t->slots : &sm_oatab_empty_slot;
	it->mask = t->mask;
	it->tag = (uint32_t)h;
	it->i = it->tag & t->mask;
}

/*
 * The next stored index whose tag matches the probe's hash, or
 * SM_OATAB_NONE at the first empty slot (where `it` then stays, for
 * sm_oatab_insert()).
 */
static inline uint32_t
sm_oatab_next(const struct sm_oatab *t, struct sm_oatab_it *it)
{
	uint64_t s;

	(void)t;
	while ((s = it->slots[it->i]) != 0) {
		it->i = (it->i + 1) & it->mask;
		if ((uint32_t)(s >> 32) == it->tag)
			return ((uint32_t)s - 1);
	}
	return (SM_OATAB_NONE);
}

int sm_oatab_grow_insert(struct sm_oatab *t, struct sm_oatab_it *it,
    uint32_t idx);

/*
 * Store `idx` (< UINT32_MAX - 1) under the hash of the probe `it`, which
 * must have ended with SM_OATAB_NONE, with no insert since.  Grows (doubles
 * and rehashes from the tags) when the load would pass 1/2.
 * Returns 0 or SM_ENOMEM (table unchanged).
 */
static inline int
sm_oatab_insert(struct sm_oatab *t, struct sm_oatab_it *it, uint32_t idx)
{
	SM_ASSERT(it->slots[it->i] == 0);
	if ((uint64_t)(t->n + 1) * 2 > t->nslots)
		return (sm_oatab_grow_insert(t, it, idx));
	t->slots[it->i] = (uint64_t)it->tag << 32 | (idx + 1);
	t->n++;
	return (0);
}

#endif /* SM_OATAB_H */
