/*
 * pprof.c -- a merged tree as a google.v1.Profile (SelectMergeProfile).
 *
 * What Smolder stores per frame is its function name, so the profile
 * holds, per distinct name, one Function (name = system_name, no file, no
 * line) and one Location with one Line pointing at it; no Mapping (none is
 * stored, and pprof accepts locations without one).  Each node with a self
 * value is one Sample whose location ids run leaf first, with one value of
 * the requested sample type, negative ones included (a delta or diff
 * profile: what goes in comes out); period_type / period come from the type id
 * (period 0: not stored), time_nanos / duration_nanos from the range.
 *
 * max_nodes (> 0): Pyroscope truncates the merged stacks before building
 * the profile; nodes whose total is below the max_nodes-th largest total
 * are cut and their values summed into one "other" frame under their
 * parent, so truncated stacks end in "other" and every total is kept.
 * 0 means no truncation (Pyroscope's default for this method), which is
 * what `go tool pprof -raw` comparisons with the input need.
 */
#include "qry_int.h"

#include "common/ptype.h"

#include <stdlib.h>
#include <string.h>

#define PP_OTHER "other"

struct pp_state {
	const struct sm_mtree *m;
	struct sm_arena *a;
	Google__V1__Profile *p;
	uint64_t *loc_of;        /* name id -> location id (0 = none yet) */
	uint64_t other_loc;
	size_t nstr_cap, nfn_cap;
};

/* String index of s, appended (no dedupe needed: each name once). */
static int64_t
pp_str(struct pp_state *st, const char *s, size_t len)
{
	Google__V1__Profile *p = st->p;

	if (p->n_string_table == st->nstr_cap) {
		size_t ncap = st->nstr_cap * 2;
		char **nv = sm_arena_grow(st->a, p->string_table,
		    p->n_string_table, ncap, sizeof(*nv));

		if (nv == NULL)
			return (-1);
		p->string_table = nv;
		st->nstr_cap = ncap;
	}
	if ((p->string_table[p->n_string_table] = sm_arena_strndup(st->a, s,
	    len)) == NULL)
		return (-1);
	return ((int64_t)p->n_string_table++);
}

/* Location id for a frame name (creating function and location). */
static uint64_t
pp_loc(struct pp_state *st, const char *s, size_t len)
{
	Google__V1__Profile *p = st->p;
	Google__V1__Function *fn;
	Google__V1__Location *lo;
	Google__V1__Line *li;
	int64_t si;

	if (p->n_function == st->nfn_cap) {
		size_t ncap = st->nfn_cap * 2;
		Google__V1__Function **nf = sm_arena_grow(st->a, p->function,
		    p->n_function, ncap, sizeof(*nf));
		Google__V1__Location **nl = sm_arena_grow(st->a, p->location,
		    p->n_location, ncap, sizeof(*nl));

		if (nf == NULL || nl == NULL)
			return (0);
		p->function = nf;
		p->location = nl;
		st->nfn_cap = ncap;
	}
	fn = sm_arena_alloc(st->a, sizeof(*fn));
	lo = sm_arena_alloc(st->a, sizeof(*lo));
	li = sm_arena_alloc(st->a, sizeof(*li));
	if (fn == NULL || lo == NULL || li == NULL ||
	    (lo->line = sm_arena_alloc(st->a, sizeof(*lo->line))) == NULL ||
	    (si = pp_str(st, s, len)) < 0)
		return (0);
	google__v1__function__init(fn);
	{
		Google__V1__Line **lines = lo->line;

		google__v1__location__init(lo);
		lo->line = lines;
	}
	google__v1__line__init(li);
	fn->id = p->n_function + 1;
	fn->name = si;
	fn->system_name = si;
	li->function_id = fn->id;
	lo->id = fn->id;
	lo->line[0] = li;
	lo->n_line = 1;
	p->function[p->n_function++] = fn;
	p->location[p->n_location++] = lo;
	return (fn->id);
}

static uint64_t
pp_node_loc(struct pp_state *st, uint32_t node)
{
	uint32_t nm = st->m->tree.name[node], len;
	const char *s;

	if (st->loc_of[nm] == 0) {
		s = sm_strtab_str(&st->m->names, nm, &len);
		st->loc_of[nm] = pp_loc(st, s, len);
	}
	return (st->loc_of[nm]);
}

/* One sample: the path of `node` (leaf first), then `extra` (an "other"
 * location id, 0 = none) on top. */
static int
pp_sample(struct pp_state *st, uint32_t node, uint32_t depth, uint64_t extra,
    int64_t v, Google__V1__Sample **out)
{
	const struct sm_tree *t = &st->m->tree;
	Google__V1__Sample *sa = sm_arena_alloc(st->a, sizeof(*sa));
	uint32_t k = 0;

	if (sa == NULL)
		return (SM_ENOMEM);
	google__v1__sample__init(sa);
	sa->location_id = sm_arena_alloc(st->a, ((size_t)depth + 2) *
	    sizeof(*sa->location_id));
	sa->value = sm_arena_alloc(st->a, sizeof(*sa->value));
	if (sa->location_id == NULL || sa->value == NULL)
		return (SM_ENOMEM);
	if (extra != 0)
		sa->location_id[k++] = extra;
	for (uint32_t c = node; c != 0; c = t->parent[c]) {
		if ((sa->location_id[k++] = pp_node_loc(st, c)) == 0)
			return (SM_ENOMEM);
	}
	sa->n_location_id = k;
	sa->value[0] = v;
	sa->n_value = 1;
	*out = sa;
	return (0);
}

int
qry_pprof_build(const struct sm_mtree *m, const struct sm_ptype *pt,
    int64_t start_ms, int64_t end_ms, int64_t max_nodes, struct sm_arena *a,
    Google__V1__Profile **out, struct sm_err *err)
{
	const struct sm_tree *t = &m->tree;
	uint32_t n = t->n, nexist = 0;
	int64_t *tot = NULL, *other = NULL, *sorted = NULL, min = 0;
	uint32_t *depth = NULL;
	uint8_t *kept = NULL, *nz = NULL;
	struct pp_state st;
	Google__V1__Profile *p;
	Google__V1__ValueType *vt, *per;
	size_t nsamples = 0, k = 0;
	int rv = SM_ENOMEM;

	*out = NULL;
	memset(&st, 0, sizeof(st));
	tot = sm_malloc((size_t)n * sizeof(*tot));
	other = sm_calloc(n, sizeof(*other));
	depth = sm_malloc((size_t)n * sizeof(*depth));
	kept = sm_malloc(n);
	nz = sm_calloc(SM_MAX(n, 1), 1);
	st.loc_of = sm_calloc(SM_MAX(m->names.n, 1), sizeof(*st.loc_of));
	if (tot == NULL || other == NULL || depth == NULL || kept == NULL ||
	    nz == NULL || st.loc_of == NULL)
		goto oom;
	sm_tree_totals(t, m->self, tot);
	/* A node exists when a non-zero self value is at or under it.
	 * Values are signed (a delta or diff profile has negative stacks),
	 * so a total of 0 or less does not mean "nothing here". */
	for (uint32_t i = n; i-- > 1;) {
		nz[i] |= m->self[i] != 0;
		nz[t->parent[i]] |= nz[i];
	}
	for (uint32_t i = 1; i < n; i++)
		nexist += nz[i];
	if (max_nodes > 0 && nexist > (uint64_t)max_nodes) {
		if ((sorted = sm_malloc((size_t)nexist * sizeof(*sorted))) ==
		    NULL)
			goto oom;
		for (uint32_t i = 1, j = 0; i < n; i++)
			if (nz[i])
				sorted[j++] = tot[i] < 0 ? -tot[i] : tot[i];
		qsort(sorted, nexist, sizeof(*sorted), sm_i64_desc_cmp);
		min = sorted[max_nodes - 1];
	}
	/* Kept: exists, a total at least min in size, parent kept.  A cut
	 * child's total goes to its kept parent's "other". */
	kept[0] = 1;
	depth[0] = 0;
	for (uint32_t i = 1; i < n; i++) {
		uint32_t pa = t->parent[i];
		int64_t size = tot[i] < 0 ? -tot[i] : tot[i];

		depth[i] = depth[pa] + 1;
		kept[i] = kept[pa] && nz[i] && size >= min;
		if (kept[pa] && nz[i] && !kept[i])
			other[pa] = sm_add_sat(other[pa], tot[i]);
	}
	for (uint32_t i = 0; i < n; i++)
		nsamples += (i > 0 && kept[i] && m->self[i] != 0) +
		    (other[i] != 0);
	if ((p = sm_arena_alloc(a, sizeof(*p))) == NULL ||
	    (vt = sm_arena_alloc(a, sizeof(*vt))) == NULL ||
	    (per = sm_arena_alloc(a, sizeof(*per))) == NULL)
		goto oom;
	google__v1__profile__init(p);
	google__v1__value_type__init(vt);
	google__v1__value_type__init(per);
	st.m = m;
	st.a = a;
	st.p = p;
	st.nstr_cap = 64;
	st.nfn_cap = 64;
	p->string_table = sm_arena_alloc(a, st.nstr_cap * sizeof(char *));
	p->function = sm_arena_alloc(a, st.nfn_cap * sizeof(*p->function));
	p->location = sm_arena_alloc(a, st.nfn_cap * sizeof(*p->location));
	p->sample_type = sm_arena_alloc(a, sizeof(*p->sample_type));
	p->sample = sm_arena_alloc(a, SM_MAX(nsamples, 1) * sizeof(*p->sample));
	if (p->string_table == NULL || p->function == NULL ||
	    p->location == NULL || p->sample_type == NULL || p->sample == NULL)
		goto oom;
	if (pp_str(&st, "", 0) < 0 ||
	    (vt->type = pp_str(&st, pt->sample_type,
	    strlen(pt->sample_type))) < 0 ||
	    (vt->unit = pp_str(&st, pt->sample_unit,
	    strlen(pt->sample_unit))) < 0 ||
	    (per->type = pp_str(&st, pt->period_type,
	    strlen(pt->period_type))) < 0 ||
	    (per->unit = pp_str(&st, pt->period_unit,
	    strlen(pt->period_unit))) < 0)
		goto oom;
	p->sample_type[0] = vt;
	p->n_sample_type = 1;
	p->period_type = per;
	p->time_nanos = start_ms * 1000000;
	p->duration_nanos = (end_ms - start_ms) * 1000000;
	for (uint32_t i = 0; i < n; i++) {
		if (i > 0 && kept[i] && m->self[i] != 0 &&
		    (rv = pp_sample(&st, i, depth[i], 0, m->self[i],
		    &p->sample[k++])) != 0)
			goto oom;
		if (other[i] != 0) {
			if (st.other_loc == 0 && (st.other_loc = pp_loc(&st,
			    PP_OTHER, sizeof(PP_OTHER) - 1)) == 0)
				goto oom;
			if ((rv = pp_sample(&st, i, depth[i], st.other_loc,
			    other[i], &p->sample[k++])) != 0)
				goto oom;
		}
	}
	p->n_sample = k;
	*out = p;
	rv = 0;
	goto out;
oom:
	rv = sm_err_set(err, SM_ENOMEM, "out of memory");
out:
	sm_free(tot);
	sm_free(other);
	sm_free(depth);
	sm_free(kept);
	sm_free(nz);
	sm_free(sorted);
	sm_free(st.loc_of);
	return (rv);
}
