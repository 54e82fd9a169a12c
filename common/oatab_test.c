/*
 * oatab_test.c -- the open-addressing index table: inserts and finds,
 * colliding hashes (same tag, same position), growth by rehash, many
 * entries, clear, reserve, and allocation failures.
 */
#include "common/oatab.h"

#include <stdlib.h>

#include "common/arena.h"
#include "common/hash.h"
#include "sm_test.h"

/* The caller's entries: key k lives at index k's position in `keys`. */
struct ents {
	uint64_t *keys;
	uint32_t n;
};

static uint32_t
find(const struct sm_oatab *t, const struct ents *e, uint64_t key,
    uint64_t h, struct sm_oatab_it *it)
{
	uint32_t idx;

	for (sm_oatab_probe(t, h, it);
	    (idx = sm_oatab_next(t, it)) != SM_OATAB_NONE;)
		if (e->keys[idx] == key)
			return (idx);
	return (SM_OATAB_NONE);
}

/* Intern `key` under hash `h`: its index, or SM_OATAB_NONE on ENOMEM. */
static uint32_t
intern(struct sm_oatab *t, struct ents *e, uint64_t key, uint64_t h)
{
	struct sm_oatab_it it;
	uint32_t idx = find(t, e, key, h, &it);

	if (idx != SM_OATAB_NONE)
		return (idx);
	if (sm_oatab_insert(t, &it, e->n) != 0)
		return (SM_OATAB_NONE);
	e->keys[e->n] = key;
	return (e->n++);
}

static struct sm_oatab t_arena_tab;

static void
test_empty(void)
{
	struct sm_oatab t = { 0 };
	struct ents e = { NULL, 0 };
	struct sm_oatab_it it;

	SM_CHECK_EQ(find(&t, &e, 1, sm_hash_u64(1), &it), SM_OATAB_NONE);
	SM_CHECK_EQ(sm_oatab_mem(&t), 0);
	sm_oatab_clear(&t);
	sm_oatab_fini(&t);
	sm_oatab_init(&t, 16);
	SM_CHECK_EQ(find(&t, &e, 1, sm_hash_u64(1), &it), SM_OATAB_NONE);
	sm_oatab_fini(&t);
}

static void
test_insert_find(void)
{
	struct sm_oatab t;
	uint64_t keys[100];
	struct ents e = { keys, 0 };
	struct sm_oatab_it it;

	sm_oatab_init(&t, 16);
	for (uint64_t k = 0; k < 100; k++)
		SM_CHECK_EQ(intern(&t, &e, k * 7, sm_hash_u64(k * 7)), k);
	SM_CHECK_EQ(t.n, 100);
	SM_CHECK_EQ(t.nslots, 256);   /* 16 doubled until 100 fit at 1/2 */
	SM_CHECK_EQ(sm_oatab_mem(&t), 256 * sizeof(uint64_t));
	for (uint64_t k = 0; k < 100; k++) {
		SM_CHECK_EQ(intern(&t, &e, k * 7, sm_hash_u64(k * 7)), k);
		SM_CHECK_EQ(find(&t, &e, k * 7, sm_hash_u64(k * 7), &it), k);
	}
	SM_CHECK_EQ(e.n, 100);
	SM_CHECK_EQ(find(&t, &e, 3, sm_hash_u64(3), &it), SM_OATAB_NONE);
	sm_oatab_clear(&t);
	SM_CHECK_EQ(t.n, 0);
	SM_CHECK_EQ(t.nslots, 256);
	SM_CHECK_EQ(find(&t, &e, 7, sm_hash_u64(7), &it), SM_OATAB_NONE);
	e.n = 0;
	SM_CHECK_EQ(intern(&t, &e, 5, sm_hash_u64(5)), 0);
	SM_CHECK_EQ(find(&t, &e, 5, sm_hash_u64(5), &it), 0);
	sm_oatab_fini(&t);
	SM_CHECK(t.slots == NULL && t.nslots == 0 && t.n == 0);
}

/* Every key under one hash: the tag matches, equality decides. */
static void
test_collisions(void)
{
	struct sm_oatab t;
	uint64_t keys[300];
	struct ents e = { keys, 0 };
	struct sm_oatab_it it;
	int bad = 0;

	sm_oatab_init(&t, 4);
	for (uint64_t k = 0; k < 300; k++)
		if (intern(&t, &e, k, 42) != k)
			bad++;
	/* Same position, different tags (high bits differ). */
	for (uint64_t k = 0; k < 300; k++)
		if (find(&t, &e, k, 42, &it) != k ||
		    find(&t, &e, k, 42 | (uint64_t)(k + 1) << 20, &it) !=
		    SM_OATAB_NONE)
			bad++;
	SM_CHECK_EQ(bad, 0);
	/* The upper 32 bits of the hash take no part. */
	SM_CHECK_EQ(find(&t, &e, 9, 42 | 0xabcdULL << 40, &it), 9);
	sm_oatab_fini(&t);
}

static void
test_many(void)
{
	enum { N = 300000 };
	struct sm_oatab t;
	struct ents e = { malloc(N * sizeof(uint64_t)), 0 };
	struct sm_oatab_it it;
	int bad = 0;

	SM_REQUIRE(e.keys != NULL);
	sm_oatab_init(&t, 0);
	for (uint64_t k = 0; k < N; k++)
		if (intern(&t, &e, k << 3, sm_hash_u64(k << 3)) != k)
			bad++;
	SM_CHECK_EQ(bad, 0);
	SM_CHECK_EQ(t.nslots, 1u << 20);
	for (uint64_t k = 0; k < N; k++)
		if (find(&t, &e, k << 3, sm_hash_u64(k << 3), &it) != k ||
		    find(&t, &e, (k << 3) | 1, sm_hash_u64((k << 3) | 1),
		    &it) != SM_OATAB_NONE)
			bad++;
	SM_CHECK_EQ(bad, 0);
	sm_oatab_fini(&t);
	free(e.keys);
}

static void
test_reserve(void)
{
	struct sm_oatab t;
	uint64_t keys[1000];
	struct ents e = { keys, 0 };
	uint64_t *slots;

	sm_oatab_init(&t, 8);
	SM_REQUIRE(sm_oatab_reserve(&t, 1000) == 0);
	SM_CHECK_EQ(t.nslots, 2048);
	slots = t.slots;
	for (uint64_t k = 0; k < 1000; k++)
		SM_CHECK_EQ(intern(&t, &e, k, sm_hash_u64(k)), k);
	SM_CHECK(t.slots == slots);   /* no growth */
	SM_CHECK_EQ(sm_oatab_reserve(&t, 10), 0);
	SM_CHECK_EQ(t.nslots, 2048);
	sm_oatab_fini(&t);
}

/* A failed insert or reserve leaves the table unchanged and usable. */
static void
test_alloc_failures(void)
{
	struct sm_oatab t;
	uint64_t keys[5000];
	struct ents e = { keys, 0 };
	struct sm_oatab_it it;
	int failures = 0, bad = 0;

	sm_oatab_init(&t, 2);
	for (uint64_t k = 0; k < 5000; k++) {
		uint32_t n = t.n, ns = t.nslots;

		sm_fault_alloc_after(1);
		if (intern(&t, &e, k, sm_hash_u64(k)) == SM_OATAB_NONE) {
			failures++;
			if (t.n != n || t.nslots != ns ||
			    find(&t, &e, k, sm_hash_u64(k), &it) !=
			    SM_OATAB_NONE)
				bad++;
		}
		sm_fault_alloc_after(0);
		if (intern(&t, &e, k, sm_hash_u64(k)) != k)
			bad++;
	}
	SM_CHECK_EQ(bad, 0);
	SM_CHECK(failures > 5);
	for (uint64_t k = 0; k < 5000; k++)
		if (find(&t, &e, k, sm_hash_u64(k), &it) != k)
			bad++;
	SM_CHECK_EQ(bad, 0);
	sm_fault_alloc_after(1);
	SM_CHECK_EQ(sm_oatab_reserve(&t, 100000), SM_ENOMEM);
	sm_fault_alloc_after(0);
	SM_CHECK_EQ(t.n, 5000);
	SM_CHECK_EQ(find(&t, &e, 77, sm_hash_u64(77), &it), 77);
	sm_oatab_fini(&t);
}

/* Slots from an arena: growth within its budget, ENOMEM past it. */
static void
test_arena(void)
{
	struct sm_arena *a = sm_arena_create(64 * 1024);
	uint64_t keys[4000];
	struct ents e = { keys, 0 };
	struct sm_oatab_it it;
	uint32_t k, bad = 0;

	SM_REQUIRE(a != NULL);
	sm_oatab_init_arena(&t_arena_tab, 16, a);
	for (k = 0; k < 4000; k++)
		if (intern(&t_arena_tab, &e, k, sm_hash_u64(k)) != k)
			break;
	/* Growth stops at the budget (old arrays stay in the arena), with
	 * the table as it was. */
	SM_CHECK(k < 4000 && k >= 512);
	SM_CHECK_EQ(t_arena_tab.n, k);
	SM_CHECK_EQ((uint64_t)k * 2, t_arena_tab.nslots);
	for (uint32_t j = 0; j < k; j++)
		if (find(&t_arena_tab, &e, j, sm_hash_u64(j), &it) != j)
			bad++;
	SM_CHECK_EQ(bad, 0);
	sm_oatab_fini(&t_arena_tab);   /* frees nothing: the arena does */
	SM_CHECK(t_arena_tab.slots == NULL && t_arena_tab.arena == a);
	sm_arena_destroy(a);
}

SM_TEST_MAIN(
	{ "slots from an arena", test_arena },
	{ "empty and zeroed tables", test_empty },
	{ "insert and find, growth, clear", test_insert_find },
	{ "colliding hashes", test_collisions },
	{ "300k entries", test_many },
	{ "reserve", test_reserve },
	{ "allocation failures", test_alloc_failures },
)
