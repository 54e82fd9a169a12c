/*
 * treebytes_test.c -- Pyroscope's tree bytes (treebytes.c) against bytes
 * worked out by hand from Pyroscope's encoding, its max_nodes cut into
 * "other" (new, and folded into an existing "other"), zero subtrees and
 * the empty tree.
 */
#include "sm_test.h"

#include <stdio.h>
#include <string.h>

#include "querier/qry_int.h"

/* Add the root-first stack "a;b;c" with value v to m. */
static void
add(struct sm_mtree *m, const char *stack, int64_t v)
{
	uint32_t nd = 0;
	const char *p = stack;

	while (*p != '\0') {
		const char *e = strchr(p, ';');
		size_t len = e != NULL ? (size_t)(e - p) : strlen(p);
		uint32_t id;

		SM_REQUIRE(sm_strtab_intern(&m->names, p, len, &id) == 0);
		SM_REQUIRE(sm_tree_child(&m->tree, nd, id, &nd) == 0);
		p += len;
		if (*p == ';')
			p++;
	}
	if (nd >= m->self_cap) {
		uint32_t ncap = (nd + 1) * 2;

		m->self = sm_realloc(m->self, ncap * sizeof(*m->self));
		SM_REQUIRE(m->self != NULL);
		memset(m->self + m->self_cap, 0, (ncap - m->self_cap) *
		    sizeof(*m->self));
		m->self_cap = ncap;
	}
	m->self[nd] += v;
}

static void
build(struct sm_mtree *m, const char *const *stacks, const int64_t *v,
    size_t n)
{
	SM_REQUIRE(sm_mtree_init(m) == 0);
	for (size_t i = 0; i < n; i++)
		add(m, stacks[i], v[i]);
}

static void
check_bytes(const struct sm_mtree *m, int64_t max_nodes, const uint8_t *want,
    size_t wlen)
{
	struct sm_arena *a = sm_arena_create(1 << 20);
	uint8_t *got;
	size_t len;

	SM_REQUIRE(a != NULL);
	SM_REQUIRE(qry_tree_bytes(m, max_nodes, a, &got, &len) == 0);
	SM_CHECK_EQ(len, wlen);
	if (len != wlen) {
		for (size_t i = 0; i < len; i++)
			fprintf(stderr, "%02x ", got[i]);
		fprintf(stderr, "\n");
	}
	if (len == wlen && len > 0)
		SM_CHECK(memcmp(got, want, len) == 0);
	sm_arena_destroy(a);
}

/* Build the tree of st/v, check its bytes at max_nodes, free it. */
static void
check_tree(const char *const *st, const int64_t *v, size_t n,
    int64_t max_nodes, const uint8_t *want, size_t wlen)
{
	struct sm_mtree m;

	build(&m, st, v, n);
	check_bytes(&m, max_nodes, want, wlen);
	sm_mtree_fini(&m);
}

/* a;b 3, a;c 2, a 1, d 4: the tree of the first two tests. */
static const char *const abcd_st[] = { "a;b", "a;c", "a", "d" };
static const int64_t abcd_v[] = { 3, 2, 1, 4 };

static void
test_hand_encoded(void)
{
	/*
	 * virtual root: "" 0, 2 children (a, d); d is written first (last
	 * child first): "d" 4 0; then a: "a" 1 2; then c, then b.
	 */
	static const uint8_t want[] = {
		0, 0, 2,
		1, 'd', 4, 0,
		1, 'a', 1, 2,
		1, 'c', 2, 0,
		1, 'b', 3, 0,
	};
	check_tree(abcd_st, abcd_v, 4, 0, want, sizeof(want));
	/* 4 nodes: no cut */
	check_tree(abcd_st, abcd_v, 4, 4, want, sizeof(want));
}

static void
test_cut_into_other(void)
{
	/* totals: a 6, d 4, b 3, c 2; max_nodes 3 -> threshold 3: c (2) is
	 * cut into a new "other" under a, between b and ... sorted: b,
	 * other. */
	static const uint8_t want[] = {
		0, 0, 2,
		1, 'd', 4, 0,
		1, 'a', 1, 2,
		5, 'o', 't', 'h', 'e', 'r', 2, 0,
		1, 'b', 3, 0,
	};
	check_tree(abcd_st, abcd_v, 4, 3, want, sizeof(want));
}

static void
test_cut_into_existing_other(void)
{
	/* a;other 1 (kept, whatever its total), a;b 5, a;c 1: max_nodes 2
	 * (totals a 7, b 5) cuts c, whose 1 joins other's self: 2. */
	static const char *const st[] = { "a;other", "a;b", "a;c" };
	static const int64_t v[] = { 1, 5, 1 };
	static const uint8_t want[] = {
		0, 0, 1,
		1, 'a', 0, 2,
		5, 'o', 't', 'h', 'e', 'r', 2, 0,
		1, 'b', 5, 0,
	};
	check_tree(st, v, 3, 2, want, sizeof(want));
}

static void
test_zero_and_empty(void)
{
	/* a;b 0 is a zero subtree: not written; a tree of zeros is empty. */
	static const char *const st[] = { "a;b", "x" };
	static const int64_t v[] = { 0, 7 };
	static const int64_t z[] = { 0, 0 };
	static const uint8_t want[] = { 0, 0, 1, 1, 'x', 7, 0 };
	struct sm_mtree m;

	check_tree(st, v, 2, 0, want, sizeof(want));
	check_tree(st, z, 2, 0, NULL, 0);
	SM_REQUIRE(sm_mtree_init(&m) == 0);
	check_bytes(&m, 0, NULL, 0);
	sm_mtree_fini(&m);
}

static void
test_big_values(void)
{
	/* 300 needs two varint bytes (0xac 0x02); a negative self is its
	 * uint64 (ten bytes).  "b", whose total is negative, is folded into
	 * "other" as Pyroscope's MarshalTruncate folds it (the threshold is 0
	 * for a small tree), which sorts after "a" and so is written first. */
	static const char *const st[] = { "a", "b" };
	static const int64_t v[] = { 300, -1 };
	static const uint8_t want[] = {
		0, 0, 2,
		5, 'o', 't', 'h', 'e', 'r', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		0xff, 0xff, 0xff, 0x01, 0,
		1, 'a', 0xac, 0x02, 0,
	};
	check_tree(st, v, 2, 0, want, sizeof(want));
}

SM_TEST_MAIN(
	{ "tree bytes worked out by hand", test_hand_encoded },
	{ "max_nodes cuts into a new other", test_cut_into_other },
	{ "max_nodes cut folded into an existing other", test_cut_into_existing_other },
	{ "zero subtrees left out, empty tree is no bytes", test_zero_and_empty },
	{ "multi-byte and negative values", test_big_values },
)
