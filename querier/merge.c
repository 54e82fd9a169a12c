/*
 * merge.c -- merging ingesters' partial trees into one tree.
 *
 * Each MergeResponse is a tree in topological order with its own string
 * table; mapping it onto the query tree is one pass over its nodes
 * (parents first), interning names and (parent, name) pairs, then adding
 * its self values.  Cost O(nodes) per response with no per-sample work.
 */
#include "qry_int.h"

#include <string.h>

int
qry_merge_init(struct qry_merge *m)
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
		qry_merge_fini(m);
		return (SM_ENOMEM);
	}
	return (0);
}

void
qry_merge_fini(struct qry_merge *m)
{
	sm_strtab_fini(&m->names);
	sm_tree_fini(&m->tree);
	sm_free(m->self);
	memset(m, 0, sizeof(*m));
}

static int
merge_grow_self(struct qry_merge *m, uint32_t need)
{
	uint32_t ncap = m->self_cap;
	int64_t *ns;

	if (need <= m->self_cap)
		return (0);
	while (ncap < need)
		ncap *= 2;
	if ((ns = sm_reallocarray(m->self, ncap, sizeof(*ns))) == NULL)
		return (SM_ENOMEM);
	memset(ns + m->self_cap, 0, (size_t)(ncap - m->self_cap) *
	    sizeof(*ns));
	m->self = ns;
	m->self_cap = ncap;
	return (0);
}

static void
merge_meta(struct qry_merge *m, const Smolder__V1__MergeResponse *r)
{
	for (size_t i = 0; i < r->n_meta; i++) {
		const Smolder__V1__SeriesMeta *x = r->meta[i];
		uint32_t k;

		for (k = 0; k < m->nmeta; k++) {
			const Smolder__V1__SeriesMeta *y = &m->meta[k];

			if (x->sample_rate == y->sample_rate &&
			    strcmp(x->spy_name, y->spy_name) == 0 &&
			    strcmp(x->units, y->units) == 0 &&
			    strcmp(x->aggregation, y->aggregation) == 0)
				break;
		}
		if (k == m->nmeta && m->nmeta < QRY_META_MAX)
			m->meta[m->nmeta++] = *x;
	}
}

int
qry_merge_add(struct qry_merge *m, const Smolder__V1__MergeResponse *r,
    struct sm_err *err)
{
	const Smolder__V1__StackTree *t = r->tree;
	uint32_t *smap = NULL, *nmap = NULL, n, ns;
	int rv = 0;

	m->profiles += r->profiles;
	merge_meta(m, r);
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
		if ((rv = sm_tree_child(&m->tree, nmap[t->parent[i]],
		    smap[t->name[i]], &nmap[i + 1])) != 0 ||
		    (rv = merge_grow_self(m, m->tree.n)) != 0) {
			sm_err_set(err, rv, "out of memory");
			goto out;
		}
		if (r->self[i] > 0)
			m->self[nmap[i + 1]] = sm_add_sat(m->self[nmap[i + 1]],
			    r->self[i]);
	}
out:
	sm_free(smap);
	sm_free(nmap);
	return (rv);
}
