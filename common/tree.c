/*
 * tree.c -- the interned stack tree; see tree.h for the model.
 */
#include "tree.h"

#include <pthread.h>
#include <string.h>
#include <sys/random.h>

#include "hash.h"

/* The node (parent, name), or SM_OATAB_NONE with `it` at its empty slot. */
static inline uint32_t
tree_lookup(const struct sm_tree *t, uint32_t parent, uint32_t name,
    struct sm_oatab_it *it)
{
	uint32_t v;

	for (sm_oatab_probe(&t->tab, sm_tree_hash(parent, name), it);
	    (v = sm_oatab_next(&t->tab, it)) != SM_OATAB_NONE;)
		if (t->parent[v] == parent && t->name[v] == name)
			return (v);
	return (SM_OATAB_NONE);
}

int
sm_tree_init(struct sm_tree *t)
{
	memset(t, 0, sizeof(*t));
	t->cap = 64;
	t->parent = sm_malloc(t->cap * sizeof(uint32_t));
	t->name = sm_malloc(t->cap * sizeof(uint32_t));
	sm_oatab_init(&t->tab, 128);
	if (t->parent == NULL || t->name == NULL ||
	    sm_oatab_reserve(&t->tab, 1) != 0) {
		sm_tree_fini(t);
		return (SM_ENOMEM);
	}
	t->parent[0] = 0;
	t->name[0] = 0;
	t->n = 1;
	t->nidx = 1;
	return (0);
}

static uint64_t path_root;
static pthread_once_t path_root_once = PTHREAD_ONCE_INIT;

static void
path_root_init(void)
{
	/* Without entropy (never, past early boot) a fixed root is still a
	 * correct one: only the flooding defence is lost. */
	if (getrandom(&path_root, sizeof(path_root), GRND_NONBLOCK) !=
	    (ssize_t)sizeof(path_root))
		path_root = 0x9e3779b97f4a7c15ULL;
}

uint64_t
sm_tree_path_root(void)
{
	(void)pthread_once(&path_root_once, path_root_init);
	return (path_root);
}

int
sm_tree_init_paths(struct sm_tree *t)
{
	int rv;

	if ((rv = sm_tree_init(t)) == 0)
		t->by_path = true;
	return (rv);
}

void
sm_tree_fini(struct sm_tree *t)
{
	sm_free(t->parent);
	sm_free(t->name);
	sm_oatab_fini(&t->tab);
	memset(t, 0, sizeof(*t));
}

int
sm_tree_find(const struct sm_tree *t, uint32_t parent, uint32_t name,
    uint32_t *out)
{
	struct sm_oatab_it it;
	uint32_t v;

	SM_ASSERT(!t->by_path);
	if ((v = tree_lookup(t, parent, name, &it)) == SM_OATAB_NONE) {
		/* A const find does not index the appended tail: scan it. */
		for (v = SM_MAX(t->nidx, 1); v < t->n; v++)
			if (t->parent[v] == parent && t->name[v] == name)
				break;
		if (v >= t->n)
			return (SM_ENOTFOUND);
	}
	*out = v;
	return (0);
}

static int
tree_grow(struct sm_tree *t, uint32_t ncap)
{
	uint32_t *np;

	if ((np = sm_reallocarray(t->parent, ncap, sizeof(*np))) == NULL)
		return (SM_ENOMEM);
	t->parent = np;
	if ((np = sm_reallocarray(t->name, ncap, sizeof(*np))) == NULL)
		return (SM_ENOMEM);
	t->name = np;
	t->cap = ncap;
	return (0);
}

/* Index the appended nodes [nidx, n).  0 or SM_ENOMEM (nothing lost:
 * the tail stays unindexed and the next call tries again). */
static int
tree_index_tail(struct sm_tree *t)
{
	struct sm_oatab_it it;

	/* The load rule, as in sm_tree_child: the root counts. */
	if (sm_oatab_reserve(&t->tab, t->n + 1) != 0)
		return (SM_ENOMEM);
	for (uint32_t i = SM_MAX(t->nidx, 1); i < t->n; i++) {
		uint32_t v = tree_lookup(t, t->parent[i], t->name[i], &it);

		SM_ASSERT(v == SM_OATAB_NONE);   /* sm_tree_append's promise */
		(void)v;
		(void)sm_oatab_insert(&t->tab, &it, i);  /* reserved above */
	}
	t->nidx = t->n;
	return (0);
}

int
sm_tree_reserve_nodes(struct sm_tree *t, uint32_t n)
{
	if (n > (1u << 31))
		return (SM_ETOOBIG);
	if (n > t->cap)
		return (tree_grow(t, n));
	return (0);
}

int
sm_tree_reserve(struct sm_tree *t, uint32_t n)
{
	int rv;

	SM_ASSERT(!t->by_path);
	if ((rv = sm_tree_reserve_nodes(t, n)) != 0)
		return (rv);
	if (t->nidx < t->n && (rv = tree_index_tail(t)) != 0)
		return (rv);
	/* The index's load rule, as in sm_tree_child: node count * 2 <=
	 * slots. */
	return (sm_oatab_reserve(&t->tab, n));
}

int
sm_tree_append(struct sm_tree *t, uint32_t parent, uint32_t name,
    uint32_t *out)
{
	SM_ASSERT(parent < t->n && !t->by_path);
	if (t->n >= (1u << 31))
		return (SM_ETOOBIG);
	if (t->n == t->cap && tree_grow(t, t->cap * 2) != 0)
		return (SM_ENOMEM);
	t->parent[t->n] = parent;
	t->name[t->n] = name;
	*out = t->n++;
	return (0);
}

/* Add the node (parent, name) the probe `it` (of hash h) missed, at the
 * slot it rests on.  0, SM_ENOMEM or SM_ETOOBIG. */
static int
tree_insert(struct sm_tree *t, uint32_t parent, uint32_t name, uint64_t h,
    struct sm_oatab_it *it, uint32_t *out)
{
	uint32_t v;

	if (t->n >= (1u << 31))
		return (SM_ETOOBIG);
	if (t->n == t->cap && tree_grow(t, t->cap * 2) != 0)
		return (SM_ENOMEM);
	/* The root is not in the index but counts toward its load (node
	 * count * 2 <= slots, as before the index was an sm_oatab). */
	if ((uint64_t)(t->n + 1) * 2 > t->tab.nslots) {
		if (sm_oatab_reserve(&t->tab, t->n + 1) != 0)
			return (SM_ENOMEM);
		/* Slots moved: probe again to the (still missing) node's
		 * empty slot. */
		for (sm_oatab_probe(&t->tab, h, it);
		    (v = sm_oatab_next(&t->tab, it)) != SM_OATAB_NONE;)
			;
	}
	if (sm_oatab_insert(&t->tab, it, t->n) != 0)
		return (SM_ENOMEM);
	t->parent[t->n] = parent;
	t->name[t->n] = name;
	*out = t->n++;
	return (0);
}

int
sm_tree_child(struct sm_tree *t, uint32_t parent, uint32_t name,
    uint32_t *out)
{
	struct sm_oatab_it it;
	uint32_t v;
	int rv;

	SM_ASSERT(parent < t->n && !t->by_path);
	if (SM_UNLIKELY(t->nidx < t->n) && tree_index_tail(t) != 0)
		return (SM_ENOMEM);
	if ((v = tree_lookup(t, parent, name, &it)) != SM_OATAB_NONE) {
		*out = v;
		return (0);
	}
	if ((rv = tree_insert(t, parent, name, sm_tree_hash(parent, name), &it,
	    out)) != 0)
		return (rv);
	t->nidx = t->n;
	return (0);
}

int
sm_tree_child_path(struct sm_tree *t, uint32_t parent, uint32_t name,
    uint64_t path, uint32_t *out)
{
	struct sm_oatab_it it;
	uint32_t v;
	int rv;

	SM_ASSERT(parent < t->n && t->by_path);
	for (sm_oatab_probe(&t->tab, path, &it);
	    (v = sm_oatab_next(&t->tab, &it)) != SM_OATAB_NONE;)
		if (t->parent[v] == parent && t->name[v] == name) {
			*out = v;
			return (0);
		}
	if ((rv = tree_insert(t, parent, name, path, &it, out)) != 0)
		return (rv);
	t->nidx = t->n;
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
	    sm_oatab_mem(&t->tab));
}
