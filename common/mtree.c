/*
 * mtree.c -- merging partial trees; see mtree.h.
 */
#include "mtree.h"

#include <stdbool.h>
#include <string.h>

int
sm_mtree_init(struct sm_mtree *m)
{
	memset(m, 0, sizeof(*m));
	if (sm_strtab_init(&m->names) != 0)
		return (SM_ENOMEM);
	if (sm_tree_init(&m->tree) != 0) {
		sm_strtab_fini(&m->names);
		return (SM_ENOMEM);
	}
	m->self_cap = 1024;
	if ((m->self = sm_calloc(m->self_cap, sizeof(*m->self))) == NULL) {
		sm_mtree_fini(m);
		return (SM_ENOMEM);
	}
	return (0);
}

void
sm_mtree_fini(struct sm_mtree *m)
{
	sm_strtab_fini(&m->names);
	sm_tree_fini(&m->tree);
	sm_free(m->self);
	memset(m, 0, sizeof(*m));
}

static int
mtree_grow_self(struct sm_mtree *m, uint32_t need)
{
	uint32_t old = m->self_cap;

	/* self_cap starts at 1024 (sm_mtree_init), so the minimum is moot. */
	if (SM_GROW(m->self, m->self_cap, need, 1024) != 0)
		return (SM_ENOMEM);
	memset(m->self + old, 0, (size_t)(m->self_cap - old) *
	    sizeof(*m->self));
	return (0);
}

static bool
meta_eq(const Smolder__V1__SeriesMeta *x, const Smolder__V1__SeriesMeta *y)
{
	return (x->sample_rate == y->sample_rate &&
	    strcmp(x->spy_name ? x->spy_name : "",
	    y->spy_name ? y->spy_name : "") == 0 &&
	    strcmp(x->units ? x->units : "", y->units ? y->units : "") == 0 &&
	    strcmp(x->aggregation ? x->aggregation : "",
	    y->aggregation ? y->aggregation : "") == 0);
}

void
sm_mtree_add_meta(struct sm_mtree *m, const Smolder__V1__SeriesMeta *x)
{
	for (uint32_t k = 0; k < m->nmeta; k++) {
		if (meta_eq(x, &m->meta[k]))
			return;
	}
	if (m->nmeta < SM_MTREE_META_MAX)
		m->meta[m->nmeta++] = *x;
}

/* Intern node (parent, name) and add v to its self. */
static int
mtree_node(struct sm_mtree *m, uint32_t parent, uint32_t name, int64_t v,
    uint32_t *out)
{
	int rv;

	if ((rv = sm_tree_child(&m->tree, parent, name, out)) != 0 ||
	    (rv = mtree_grow_self(m, m->tree.n)) != 0)
		return (rv);
	if (v != 0)      /* signed: delta profiles carry negatives */
		m->self[*out] = sm_add_sat(m->self[*out], v);
	return (0);
}

int
sm_mtree_add_pb(struct sm_mtree *m, const Smolder__V1__MergeResponse *r,
    struct sm_err *err)
{
	const Smolder__V1__StackTree *t = r->tree;
	uint32_t *smap = NULL, *nmap = NULL, n, ns;
	int rv = 0;

	m->profiles += r->profiles;
	for (size_t i = 0; i < r->n_meta; i++)
		sm_mtree_add_meta(m, r->meta[i]);
	if (t == NULL || t->n_parent == 0)
		return (0);
	if (t->n_parent != t->n_name || t->n_parent != r->n_self ||
	    t->n_strings == 0)
		return (sm_err_set(err, SM_EPROTO, "merge response: "
		    "inconsistent tree (%zu parents, %zu names, %zu values)",
		    t->n_parent, t->n_name, r->n_self));
	n = (uint32_t)t->n_parent;
	ns = (uint32_t)t->n_strings;
	smap = sm_malloc((size_t)ns * sizeof(*smap));
	nmap = sm_malloc(((size_t)n + 1) * sizeof(*nmap));
	if (smap == NULL || nmap == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < ns; i++) {
		const char *s = t->strings[i] != NULL ? t->strings[i] : "";

		if ((rv = sm_strtab_intern(&m->names, s, strlen(s),
		    &smap[i])) != 0) {
			sm_err_set(err, rv, "out of memory");
			goto out;
		}
	}
	nmap[0] = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (t->parent[i] > i || t->name[i] >= ns) {
			rv = sm_err_set(err, SM_EPROTO, "merge response: node "
			    "%u out of order or name out of range", i + 1);
			goto out;
		}
		if ((rv = mtree_node(m, nmap[t->parent[i]], smap[t->name[i]],
		    r->self[i], &nmap[i + 1])) != 0) {
			sm_err_set(err, rv, "out of memory");
			goto out;
		}
	}
out:
	sm_free(smap);
	sm_free(nmap);
	return (rv);
}

int
sm_mtree_add_tree(struct sm_mtree *m, const uint32_t *parent,
    const uint32_t *name, uint32_t n, const int64_t *self,
    const struct sm_str *strs, uint32_t nstrs, struct sm_err *err)
{
	uint32_t *keep = NULL, *smap = NULL;
	int rv = 0;

	if (n <= 1)
		return (0);
	keep = sm_calloc(n, sizeof(*keep));
	smap = sm_calloc(SM_MAX(nstrs, 1), sizeof(*smap));   /* id + 1 */
	if (keep == NULL || smap == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	/* Mark the nodes on a path to a value (children after parents). */
	for (uint32_t i = n; i-- > 1;) {
		if (parent[i] >= i || name[i] >= nstrs) {
			rv = sm_err_set(err, SM_ECORRUPT, "tree node %u has "
			    "parent %u / name %u out of range", i, parent[i],
			    name[i]);
			goto out;
		}
		if (self[i] != 0 || keep[i] != 0) {
			keep[i] = 1;
			keep[parent[i]] = 1;
		}
	}
	keep[0] = 0;   /* the root maps to the root */
	for (uint32_t i = 1; i < n; i++) {
		uint32_t nm, p;

		if (keep[i] == 0)
			continue;
		if (smap[name[i]] == 0) {
			if ((rv = sm_strtab_intern(&m->names, strs[name[i]].p,
			    strs[name[i]].len, &nm)) != 0) {
				sm_err_set(err, rv, "out of memory");
				goto out;
			}
			smap[name[i]] = nm + 1;
		}
		p = parent[i] == 0 ? 0 : keep[parent[i]] - 1;
		if ((rv = mtree_node(m, p, smap[name[i]] - 1, self[i],
		    &nm)) != 0) {
			sm_err_set(err, rv, "out of memory");
			goto out;
		}
		keep[i] = nm + 1;   /* now: merge-tree id + 1 */
	}
out:
	sm_free(keep);
	sm_free(smap);
	return (rv);
}

int
sm_mtree_to_pb(const struct sm_mtree *m, struct sm_arena *a,
    Smolder__V1__MergeResponse *out)
{
	Smolder__V1__StackTree *tree;
	uint32_t n = m->tree.n - 1, ns = m->names.n;

	smolder__v1__merge_response__init(out);
	if ((tree = sm_arena_alloc(a, sizeof(*tree))) == NULL)
		return (SM_ENOMEM);
	smolder__v1__stack_tree__init(tree);
	out->tree = tree;
	out->profiles = m->profiles;
	tree->n_strings = ns;
	tree->strings = sm_arena_alloc(a, (size_t)SM_MAX(ns, 1) *
	    sizeof(char *));
	tree->n_parent = tree->n_name = out->n_self = n;
	tree->parent = sm_arena_alloc(a, (size_t)SM_MAX(n, 1) * 4);
	tree->name = sm_arena_alloc(a, (size_t)SM_MAX(n, 1) * 4);
	out->self = sm_arena_alloc(a, (size_t)SM_MAX(n, 1) * 8);
	out->meta = sm_arena_alloc(a, (size_t)SM_MAX(m->nmeta, 1) *
	    sizeof(*out->meta));
	if (tree->strings == NULL || tree->parent == NULL ||
	    tree->name == NULL || out->self == NULL || out->meta == NULL)
		return (SM_ENOMEM);
	for (uint32_t i = 0; i < ns; i++)
		tree->strings[i] = (char *)m->names.strs[i].p;
	for (uint32_t i = 1; i <= n; i++) {
		tree->parent[i - 1] = m->tree.parent[i];
		tree->name[i - 1] = m->tree.name[i];
		out->self[i - 1] = m->self[i];
	}
	out->n_meta = m->nmeta;
	for (uint32_t k = 0; k < m->nmeta; k++)
		out->meta[k] = (Smolder__V1__SeriesMeta *)&m->meta[k];
	return (0);
}
