/*
 * tree_test.c -- the interned stack tree: child/find, depth, totals,
 * growth across many rehashes, id stability, allocation failures.
 */
#include "common/tree.h"

#include <stdlib.h>
#include <string.h>

#include "sm_test.h"

static void
test_root(void)
{
	struct sm_tree t;
	uint32_t id;

	SM_REQUIRE(sm_tree_init(&t) == 0);
	SM_CHECK_EQ(sm_tree_size(&t), 1);
	SM_CHECK_EQ(t.parent[0], 0);
	SM_CHECK_EQ(t.name[0], 0);
	SM_CHECK_EQ(sm_tree_depth(&t, 0), 0);
	SM_CHECK_EQ(sm_tree_find(&t, 0, 1, &id), SM_ENOTFOUND);
	SM_CHECK(sm_tree_mem(&t) > 0);
	sm_tree_fini(&t);
	SM_CHECK(t.parent == NULL && t.tab.slots == NULL && t.n == 0);
}

static void
test_child_find(void)
{
	struct sm_tree t;
	uint32_t a, b, c, a2, ab, x;

	SM_REQUIRE(sm_tree_init(&t) == 0);
	SM_REQUIRE(sm_tree_child(&t, 0, 7, &a) == 0);
	SM_REQUIRE(sm_tree_child(&t, 0, 8, &b) == 0);
	SM_REQUIRE(sm_tree_child(&t, a, 8, &ab) == 0);
	SM_CHECK_EQ(a, 1);
	SM_CHECK_EQ(b, 2);
	SM_CHECK_EQ(ab, 3);
	/* Same (parent, name): same node, nothing created. */
	SM_REQUIRE(sm_tree_child(&t, 0, 7, &a2) == 0);
	SM_CHECK_EQ(a2, a);
	SM_CHECK_EQ(sm_tree_size(&t), 4);
	/* Same name under another parent is another node. */
	SM_CHECK(ab != b);
	SM_CHECK_EQ(t.parent[ab], a);
	SM_CHECK_EQ(t.name[ab], 8);
	/* Name 0 is a valid frame (the empty string). */
	SM_REQUIRE(sm_tree_child(&t, ab, 0, &c) == 0);
	SM_CHECK_EQ(c, 4);
	SM_CHECK_EQ(sm_tree_depth(&t, c), 3);
	SM_CHECK_EQ(sm_tree_depth(&t, ab), 2);
	SM_CHECK_EQ(sm_tree_depth(&t, b), 1);

	SM_CHECK(sm_tree_find(&t, a, 8, &x) == 0 && x == ab);
	SM_CHECK(sm_tree_find(&t, ab, 0, &x) == 0 && x == c);
	SM_CHECK_EQ(sm_tree_find(&t, b, 7, &x), SM_ENOTFOUND);
	SM_CHECK_EQ(sm_tree_find(&t, 0, 0, &x), SM_ENOTFOUND);
	sm_tree_fini(&t);
}

static void
test_totals(void)
{
	struct sm_tree t;
	uint32_t a, b, c, d;
	int64_t self[5] = { 0 }, total[5];

	/* a;b=3 a;c=1 d=2, and a=4 of its own. */
	SM_REQUIRE(sm_tree_init(&t) == 0);
	SM_REQUIRE(sm_tree_child(&t, 0, 1, &a) == 0);
	SM_REQUIRE(sm_tree_child(&t, a, 2, &b) == 0);
	SM_REQUIRE(sm_tree_child(&t, a, 3, &c) == 0);
	SM_REQUIRE(sm_tree_child(&t, 0, 4, &d) == 0);
	self[a] = 4;
	self[b] = 3;
	self[c] = 1;
	self[d] = 2;
	sm_tree_totals(&t, self, total);
	SM_CHECK_EQ(total[0], 10);
	SM_CHECK_EQ(total[a], 8);
	SM_CHECK_EQ(total[b], 3);
	SM_CHECK_EQ(total[c], 1);
	SM_CHECK_EQ(total[d], 2);
	/* The input is not modified. */
	SM_CHECK_EQ(self[a], 4);
	SM_CHECK_EQ(self[0], 0);
	sm_tree_fini(&t);
}

/*
 * 1M nodes as a complete 8-ary tree, created in order: node k is child
 * (k - 1) % 8 + 1 of node (k - 1) / 8.  That crosses every rehash of the
 * slot table and every doubling of the arrays; ids must come out dense,
 * stay put, and be found again afterwards.
 */
static void
test_growth_1m(void)
{
	enum { N = 1000000 };
	struct sm_tree t;
	uint32_t id, slots_seen = 0, last_slots = 0;
	int64_t *self, *total;
	int bad = 0;

	SM_REQUIRE(sm_tree_init(&t) == 0);
	for (uint32_t k = 1; k < N; k++) {
		if (sm_tree_child(&t, (k - 1) / 8, (k - 1) % 8 + 1, &id) != 0 ||
		    id != k) {
			bad++;
			break;
		}
		if (t.tab.nslots != last_slots) {
			last_slots = t.tab.nslots;
			slots_seen++;
		}
		SM_CHECK((uint64_t)t.n * 2 <= t.tab.nslots);
	}
	SM_REQUIRE(bad == 0);
	SM_CHECK_EQ(sm_tree_size(&t), N);
	SM_CHECK(slots_seen > 10);
	SM_CHECK(sm_tree_mem(&t) >= (size_t)N * 12);
	/* Every node is found again, with its id, parent and name. */
	for (uint32_t k = 1; k < N && !bad; k++) {
		if (sm_tree_find(&t, (k - 1) / 8, (k - 1) % 8 + 1, &id) != 0 ||
		    id != k || t.parent[k] != (k - 1) / 8 ||
		    t.name[k] != (k - 1) % 8 + 1 || t.parent[k] >= k)
			bad++;
	}
	SM_CHECK_EQ(bad, 0);
	/* Interning again creates nothing. */
	for (uint32_t k = N - 1; k > N - 1000; k--) {
		SM_REQUIRE(sm_tree_child(&t, (k - 1) / 8, (k - 1) % 8 + 1,
		    &id) == 0);
		SM_CHECK_EQ(id, k);
	}
	SM_CHECK_EQ(sm_tree_size(&t), N);
	SM_CHECK_EQ(sm_tree_depth(&t, N - 1), 7);  /* 8^6 < 1M <= 8^7 */
	SM_CHECK_EQ(sm_tree_depth(&t, 9), 2);

	self = malloc((size_t)N * sizeof(*self));
	total = malloc((size_t)N * sizeof(*total));
	SM_REQUIRE(self != NULL && total != NULL);
	for (uint32_t k = 0; k < N; k++)
		self[k] = 1;
	sm_tree_totals(&t, self, total);
	SM_CHECK_EQ(total[0], N);
	SM_CHECK_EQ(total[N - 1], 1);
	free(self);
	free(total);
	sm_tree_fini(&t);
}

/* A chain deeper than any recursion budget. */
static void
test_deep_chain(void)
{
	struct sm_tree t;
	uint32_t nd = 0;

	SM_REQUIRE(sm_tree_init(&t) == 0);
	for (uint32_t d = 0; d < 100000; d++)
		SM_REQUIRE(sm_tree_child(&t, nd, d % 3, &nd) == 0);
	SM_CHECK_EQ(sm_tree_depth(&t, nd), 100000);
	sm_tree_fini(&t);
}

/* A failed allocation leaves the tree usable and unchanged. */
static void
test_alloc_failures(void)
{
	struct sm_tree t;
	uint32_t id, n;
	int failures = 0;

	SM_REQUIRE(sm_tree_init(&t) == 0);
	for (uint32_t k = 1; k < 5000; k++) {
		/* Fail the 1st, then the 2nd, ... allocation of this call. */
		n = t.n;
		SM_RETRY_FAULTS(sm_tree_child(&t, k / 2, k, &id), failures,
		    SM_CHECK_EQ(t.n, n);
		    SM_CHECK_EQ(sm_tree_find(&t, k / 2, k, &id),
			SM_ENOTFOUND));
		SM_CHECK_EQ(id, k);
	}
	SM_CHECK(failures > 3);
	for (uint32_t k = 1; k < 5000; k++)
		SM_CHECK(sm_tree_find(&t, k / 2, k, &id) == 0 && id == k);
	sm_tree_fini(&t);

	SM_CHECK_INIT_FAULTS(&t, sm_tree_init, sm_tree_fini, 5,
	    t.parent == NULL && t.name == NULL && t.tab.slots == NULL);
}

/* Reserved room: creating that many nodes moves nothing and cannot fail
 * (every allocation failing), and the tree stays the same tree. */
static void
test_reserve(void)
{
	struct sm_tree t;
	uint32_t *parent, *name, id, prev = 0;
	uint64_t *slots;

	SM_REQUIRE(sm_tree_init(&t) == 0);
	SM_CHECK_EQ(sm_tree_reserve(&t, (1u << 31) + 1), SM_ETOOBIG);
	SM_REQUIRE(sm_tree_reserve(&t, 5000) == 0);
	SM_CHECK(t.cap >= 5000 && t.tab.nslots >= 10000);
	parent = t.parent;
	name = t.name;
	slots = t.tab.slots;
	sm_fault_alloc_after(1);
	for (uint32_t i = 1; i < 5000; i++) {
		SM_REQUIRE(sm_tree_child(&t, i % 7 == 0 ? 0 : prev, i % 13,
		    &id) == 0);
		prev = id;
	}
	sm_fault_alloc_after(0);
	SM_CHECK(t.parent == parent && t.name == name && t.tab.slots == slots);
	/* Smaller than what is there: nothing to do. */
	SM_CHECK_EQ(sm_tree_reserve(&t, 10), 0);
	SM_CHECK(t.parent == parent);
	for (uint32_t i = 1; i < sm_tree_size(&t); i++) {
		SM_REQUIRE(sm_tree_find(&t, t.parent[i], t.name[i], &id) == 0);
		SM_CHECK_EQ(id, i);
		sm_tree_prefetch(&t, t.parent[i], t.name[i]);
	}
	sm_tree_fini(&t);
}

/*
 * Appended nodes skip the index; the next sm_tree_child (or reserve)
 * indexes them, so lookups and creates after appends see every node, and
 * a failed catch-up loses nothing.
 */
static void
test_append(void)
{
	struct sm_tree t;
	uint32_t id, a, b, c, n;
	int failures = 0;

	SM_REQUIRE(sm_tree_init(&t) == 0);
	SM_CHECK_EQ(sm_tree_reserve_nodes(&t, (1u << 31) + 1), SM_ETOOBIG);
	SM_REQUIRE(sm_tree_reserve_nodes(&t, 3000) == 0);
	SM_CHECK(t.cap >= 3000 && t.tab.nslots < 3000);
	SM_REQUIRE(sm_tree_append(&t, 0, 5, &a) == 0);
	SM_REQUIRE(sm_tree_append(&t, a, 6, &b) == 0);
	SM_CHECK(a == 1 && b == 2 && t.nidx == 1);
	/* A const find scans the unindexed tail. */
	SM_CHECK(sm_tree_find(&t, a, 6, &id) == 0 && id == b);
	SM_CHECK_EQ(sm_tree_find(&t, a, 7, &id), SM_ENOTFOUND);
	/* A create finds the appended node instead of making a twin. */
	SM_REQUIRE(sm_tree_child(&t, a, 6, &id) == 0);
	SM_CHECK(id == b && t.nidx == t.n && sm_tree_size(&t) == 3);
	SM_REQUIRE(sm_tree_child(&t, b, 7, &c) == 0);
	SM_CHECK_EQ(c, 3);

	/* Many appends, then one create whose catch-up fails and is
	 * retried: every node is found once it succeeds. */
	for (uint32_t k = 4; k < 3000; k++)
		SM_REQUIRE(sm_tree_append(&t, k / 2, k, &id) == 0 && id == k);
	n = t.n;
	SM_RETRY_FAULTS(sm_tree_child(&t, 0, 99999, &id), failures,
	    SM_CHECK_EQ(t.n, n));
	SM_CHECK(failures >= 1 && id == n && t.nidx == t.n);
	for (uint32_t k = 4; k < 3000; k++)
		SM_CHECK(sm_tree_find(&t, k / 2, k, &id) == 0 && id == k);
	/* sm_tree_reserve indexes a tail too. */
	SM_REQUIRE(sm_tree_append(&t, 0, 100000, &a) == 0);
	SM_REQUIRE(sm_tree_reserve(&t, t.n + 10) == 0);
	SM_CHECK_EQ(t.nidx, t.n);
	SM_CHECK(sm_tree_find(&t, 0, 100000, &id) == 0 && id == a);
	sm_tree_fini(&t);
}

/* The path of node k of a path-indexed tree built as (k-1)/8, (k-1)%8+1
 * below, or a constant (every node's probe starting at one slot: each
 * tag match confirmed against parent and name). */
static uint64_t
path_of(const uint64_t *ph, uint32_t k, int collide)
{
	uint32_t name = (k - 1) % 8 + 1;

	return (collide ? 42 : sm_tree_path(ph[(k - 1) / 8], sm_hash(&name,
	    sizeof(name))));
}

/* A path-indexed tree holds the same nodes as a (parent, name) one, ids
 * in creation order, across rehashes; a path that collides still finds
 * exactly its node; a failed allocation leaves it unchanged. */
static void
test_paths(void)
{
	enum { N = 200000 };
	struct sm_tree t, u;
	uint64_t *ph = malloc((size_t)N * sizeof(*ph));
	uint32_t id, n;
	int bad = 0, failures = 0;

	SM_REQUIRE(ph != NULL);
	for (int collide = 0; collide < 2; collide++) {
		uint32_t nn = collide ? 3000 : N;

		SM_REQUIRE(sm_tree_init_paths(&t) == 0 && sm_tree_init(&u) == 0);
		SM_CHECK(t.by_path && !u.by_path);
		ph[0] = sm_tree_path_root();
		for (uint32_t k = 1; k < nn && !bad; k++) {
			uint32_t p = (k - 1) / 8, nm = (k - 1) % 8 + 1, v;

			ph[k] = path_of(ph, k, collide);
			if (sm_tree_child_path(&t, p, nm, ph[k], &id) != 0 ||
			    sm_tree_child(&u, p, nm, &v) != 0 || id != k ||
			    v != k || (uint64_t)t.n * 2 > t.tab.nslots)
				bad++;
		}
		SM_CHECK_EQ(bad, 0);
		SM_CHECK_EQ(t.n, nn);
		SM_CHECK(memcmp(t.parent, u.parent, nn * sizeof(uint32_t)) == 0);
		SM_CHECK(memcmp(t.name, u.name, nn * sizeof(uint32_t)) == 0);
		/* Every node is found again, nothing created. */
		for (uint32_t k = nn - 1; k > 0 && !bad; k--)
			if (sm_tree_child_path(&t, (k - 1) / 8, (k - 1) % 8 + 1,
			    ph[k], &id) != 0 || id != k)
				bad++;
		SM_CHECK_EQ(bad, 0);
		SM_CHECK_EQ(t.n, nn);
		/* A child under a path no node has is new. */
		SM_REQUIRE(sm_tree_child_path(&t, 5, 9, collide ? 42 :
		    sm_tree_path(ph[5], 99), &id) == 0);
		SM_CHECK_EQ(id, nn);
		sm_tree_fini(&u);
		sm_tree_fini(&t);
	}

	/* Allocation failures: nothing changes, and the retry succeeds. */
	SM_REQUIRE(sm_tree_init_paths(&t) == 0);
	ph[0] = sm_tree_path_root();
	for (uint32_t k = 1; k < 5000; k++) {
		n = t.n;
		ph[k] = path_of(ph, k, 0);
		SM_RETRY_FAULTS(sm_tree_child_path(&t, (k - 1) / 8,
		    (k - 1) % 8 + 1, ph[k], &id), failures,
		    SM_CHECK_EQ(t.n, n));
		SM_CHECK_EQ(id, k);
	}
	SM_CHECK(failures > 3);
	for (uint32_t k = 1; k < 5000; k++)
		SM_CHECK(sm_tree_child_path(&t, (k - 1) / 8, (k - 1) % 8 + 1,
		    ph[k], &id) == 0 && id == k);
	SM_CHECK_EQ(t.n, 5000);
	sm_tree_fini(&t);
	free(ph);
}

SM_TEST_MAIN(
	{ "path-indexed: same tree, collisions, failures", test_paths },
	{ "append, then the index catches up", test_append },
	{ "root node", test_root },
	{ "reserve and prefetch", test_reserve },
	{ "child and find", test_child_find },
	{ "subtree totals", test_totals },
	{ "1M nodes: rehash growth and stable ids", test_growth_1m },
	{ "100k-deep chain", test_deep_chain },
	{ "allocation failures", test_alloc_failures },
)
