/*
 * query.c -- merge, span merge, series, stats, labels, analyze and
 * profiles, all on one series visitor (visit(), "the series visitor"
 * below): a query is its per-series function plus, where a source needs
 * more (a block's tree, records, span samples), begin/finish hooks.
 * The span merge and profiles visit without yielding (they hold pointers
 * into the head's records); every other query yields between series.
 * See db.h (the design) and db_int.h (rooms, ownership, locking).
 */
#include "db_int.h"
#include "tiers.h"

#include "common/attime.h"
#include "common/hash.h"
#include "common/mtree.h"

/* --- picks (replica de-duplication, querier/plan.c) ------------------------ */

/*
 * The pick of series `fp` when the select is picked: NULL means the series
 * is not wanted here.  Picks are validated sorted (select_validate).
 */
static const struct ing_pick *
pick_find(const struct ing_select *sel, uint64_t fp)
{
	size_t lo;

	SM_LOWER_BOUND(lo, sel->npicks, mid, sel->picks[mid].fp < fp);
	return (lo < sel->npicks && sel->picks[lo].fp == fp ?
	    &sel->picks[lo] : NULL);
}

static bool
times_have(const int64_t *v, size_t n, int64_t t)
{
	size_t lo;

	SM_LOWER_BOUND(lo, n, mid, v[mid] < t);
	return (lo < n && v[lo] == t);
}

/*
 * How the series' pick (NULL: not picked, so every bucket) takes bucket
 * t: 1 added, -1 subtracted (db.h, struct ing_pick), 0 not at all.
 */
static int
pick_sign(const struct ing_pick *pk, int64_t t)
{
	if (pk == NULL || (pk->nt == 0 && pk->nneg == 0))
		return (1);
	if (times_have(pk->t, pk->nt, t))
		return (1);
	return (times_have(pk->neg, pk->nneg, t) ? -1 : 0);
}

/*
 * Whether series `sr` takes part at all, and its pick: false when the
 * select is picked and the series is not among the picks.
 */
static bool
series_picked(const struct ing_select *sel, uint64_t fp,
    const struct ing_pick **pk)
{
	*pk = NULL;
	if (!sel->picked)
		return (true);
	return ((*pk = pick_find(sel, fp)) != NULL);
}

/* --- the series visitor -------------------------------------------------- */

/*
 * Every query reads its sources through one series visitor (visit()).
 * For each source -- a head under its read lock, with its yield (set.h,
 * Yielding), or a block's index through the store's cache -- it runs
 * ing_set_select over [start, end), then for each selected id it yields,
 * fetches the series (after the yield: s->series may have moved), applies
 * the pick (series_picked, when the visitor has `picks`) and calls the
 * query's `each`.  A query's hooks around that (NULL: none):
 *   skip    before anything (a head's under its read lock): true passes
 *           the source over (the span merge: no span samples in it);
 *   begin   after the select, with the number of series selected: what
 *           the source needs before its series (a block's tree, its
 *           records); VISIT_SKIP passes over the series.  Without a
 *           begin, a source that selected nothing is passed over;
 *   finish  after the series of every source whose select succeeded,
 *           whatever happened (rv: 0, VISIT_SKIP or an error): adds the
 *           source's result and releases what begin took; it returns
 *           the source's result (VISIT_SKIP counts as 0).
 * The visit stops at the first error.
 *
 * The exception: a visitor with no_yield never yields.  The span merge
 * (span_*) holds pointers into the head's records (h->spans.v, an array
 * a write may move) from begin to finish, so it keeps the read lock for
 * the whole source.  The profiles query (prof_*) copies a head's records
 * at begin (ing_head_profs: spilled ones are on disk) and keeps the lock
 * too, so the copy and the series it visits are of one moment.
 */
#define VISIT_SKIP 1

struct visit_src {
	struct ing_head *h;                /* a head, or NULL */
	const struct ing_block_meta *m;    /* or a block (h NULL) */
	const struct ing_set *s;           /* its series */
	int64_t bucket_ms;
	const struct ing_res *res;         /* the query's resolutions */
};

struct visitor {
	struct ing_db *db;
	const char *tenant;
	const struct sm_selector *ss;
	const struct ing_select *picks;  /* applied; NULL: ignored */
	const struct ing_res *res;         /* NULL: raw only (tiers.h) */
	int64_t start, end;                /* as ing_set_select */
	bool no_yield;
	bool (*skip)(void *arg, const struct visit_src *src);
	int (*begin)(void *arg, const struct visit_src *src, uint32_t n,
	    struct sm_err *err);
	int (*each)(void *arg, const struct visit_src *src, uint32_t id,
	    const struct ing_series *sr, const struct ing_pick *pk,
	    struct sm_err *err);
	int (*finish)(void *arg, const struct visit_src *src, int rv,
	    struct sm_err *err);
	void *arg;
};

/* One source's series (a head's: the caller holds its read lock). */
static int
visit_set(const struct visitor *v, const struct visit_src *src,
    const struct ing_yield *y, struct sm_err *err)
{
	uint32_t *ids = NULL, n = 0;
	int rv;

	if (src->h != NULL)
		ING_ASSERT_HELD(&src->h->lock);
	if ((rv = ing_set_select(src->s, v->ss, v->start, v->end,
	    src->bucket_ms, y, &ids, &n, err)) != 0) {
		sm_free(ids);
		return (rv);
	}
	if (v->begin != NULL)
		rv = v->begin(v->arg, src, n, err);
	else if (n == 0)
		rv = VISIT_SKIP;
	for (uint32_t i = 0; i < n && rv == 0; i++) {
		const struct ing_series *sr;
		const struct ing_pick *pk = NULL;

		/* Nothing from before the yield is used after it but ids. */
		ing_yield(y);
		sr = src->s->series[ids[i]];
		if (v->picks != NULL && !series_picked(v->picks, sr->fp, &pk))
			continue;
		rv = v->each(v->arg, src, ids[i], sr, pk, err);
	}
	if (v->finish != NULL)
		rv = v->finish(v->arg, src, rv, err);
	sm_free(ids);
	return (rv == VISIT_SKIP ? 0 : rv);
}

/* Visit every source of `src`: heads first, then blocks. */
static int
visit(const struct visitor *v, const struct ing_sources *src,
    struct sm_err *err)
{
	static const struct ing_res raw_only;
	const struct ing_res *res = v->res != NULL ? v->res : &raw_only;
	int rv = 0;

	for (uint32_t i = 0; i < src->nheads && rv == 0; i++) {
		struct ing_head *h = src->heads[i];
		struct ing_yield y = ing_head_yield(h);
		struct visit_src vs = { .h = h, .s = &h->set,
			.bucket_ms = h->bucket_ms, .res = res };

		ING_RDLOCK(&h->lock);
		if (v->skip == NULL || !v->skip(v->arg, &vs))
			rv = visit_set(v, &vs, v->no_yield ? NULL : &y, err);
		ING_RWUNLOCK(&h->lock);
	}
	for (uint32_t i = 0; i < src->nblocks && rv == 0; i++) {
		const struct ing_block_meta *m = &src->blocks[i];
		struct visit_src vs = { .m = m, .bucket_ms = m->bucket_ms,
			.res = res };
		struct ing_cache_ent *ie;

		/* Tier blocks not chosen, raw blocks covered by one. */
		if (!ing_res_source(res, m, v->start, v->end))
			continue;
		if (v->skip != NULL && v->skip(v->arg, &vs))
			continue;
		if (m->tier_ms > 0)
			ing_tier_read_count();
		if ((rv = ing_sources_usable(v->tenant, m, err)) != 0 ||
		    (rv = ing_store_block_index(v->db->store, v->tenant, m,
		    &vs.s, &ie, err)) != 0)
			break;
		rv = visit_set(v, &vs, NULL, err);
		ing_store_release(v->db->store, ie);
	}
	return (rv);
}

/*
 * Take v->tenant's sources of [start, end) (all_time: every block, as
 * ing_sources_get) and visit them with v: at the resolutions of `res_sel`
 * (ing_res_init), or raw only when it is NULL.  The sources are put back
 * (and v->res cleared) before it returns; 0 or an error named in err.
 */
static int
visit_sources(struct visitor *v, const struct ing_select *res_sel,
    int64_t start, int64_t end, int all_time, struct sm_err *err)
{
	struct ing_sources src;
	struct ing_res res;
	int rv;

	if ((rv = ing_sources_get(v->db, v->tenant, start, end, all_time,
	    &src, err)) != 0)
		return (rv);
	if (res_sel == NULL) {
		rv = visit(v, &src, err);
	} else if ((rv = ing_res_init(&res, res_sel, &src, err)) == 0) {
		v->res = &res;
		rv = visit(v, &src, err);
		v->res = NULL;
		ing_res_fini(&res);
	}
	ing_sources_put(&src);
	return (rv);
}

/* --- merge ---------------------------------------------------------------- */

static void
meta_of(const struct ing_set *s, const struct ing_series *sr,
    Smolder__V1__SeriesMeta *m)
{
	smolder__v1__series_meta__init(m);
	m->spy_name = (char *)ing_set_str(s, sr->meta.spy);
	m->units = (char *)ing_set_str(s, sr->meta.units);
	m->aggregation = (char *)ing_set_str(s, sr->meta.aggregation);
	m->sample_rate = sr->meta.sample_rate;
}

/* Add the values of series `sr` (buckets b of source src) in range, read
 * at the query's resolution and picked, to acc. */
static uint64_t
acc_buckets(const struct visit_src *src, const struct ing_bucket *b,
    uint32_t nb, int64_t start, int64_t end, const struct ing_pick *pk,
    int64_t *acc)
{
	int64_t bucket_ms = src->bucket_ms;
	uint64_t profiles = 0;

	for (uint32_t k = ing_buckets_first(b, nb, bucket_ms, start); k < nb &&
	    ing_bucket_overlaps(&b[k], bucket_ms, start, end); k++) {
		int64_t ft;
		int sg;

		if (!ing_res_bucket(src->res, src->m, b[k].t, &ft) ||
		    (sg = pick_sign(pk, ft)) == 0)
			continue;
		if (b[k].packed != NULL) {
			struct ing_pair_cur c;
			uint32_t node;
			int64_t v;

			ing_pairs_begin(&b[k], &c);
			while (ing_pairs_next(&c, &node, &v))
				acc[node] = sm_add_sat(acc[node], sg * v);
		} else {
			for (uint32_t j = 0; j < b[k].n; j++)
				acc[b[k].node[j]] = sm_add_sat(
				    acc[b[k].node[j]], sg * b[k].value[j]);
		}
		/* a subtracted bucket's count too: the querier's sum wraps
		 * back to the union's (unsigned arithmetic) */
		profiles += sg > 0 ? b[k].profiles : -(uint64_t)b[k].profiles;
	}
	return (profiles);
}

/*
 * Metadata strings of a block index live in the cache; the merge tree
 * borrows meta strings, so copy them into the arena first.
 */
static void
add_meta_copy(struct sm_mtree *mt, struct sm_arena *a,
    const Smolder__V1__SeriesMeta *x)
{
	Smolder__V1__SeriesMeta c = *x;

	c.spy_name = sm_arena_strndup(a, x->spy_name, strlen(x->spy_name));
	c.units = sm_arena_strndup(a, x->units, strlen(x->units));
	c.aggregation = sm_arena_strndup(a, x->aggregation,
	    strlen(x->aggregation));
	if (c.spy_name != NULL && c.units != NULL && c.aggregation != NULL)
		sm_mtree_add_meta(mt, &c);
}

/*
 * Make acc (*nacc counters) cover the head's tree, which writes grow while
 * a query yields.  0 or SM_ENOMEM.
 */
static int
acc_cover(int64_t **acc, uint32_t *nacc, uint32_t n)
{
	int64_t *na;

	if (n <= *nacc)
		return (0);
	if ((na = sm_realloc(*acc, (size_t)n * sizeof(*na))) == NULL)
		return (SM_ENOMEM);
	memset(na + *nacc, 0, (size_t)(n - *nacc) * sizeof(*na));
	*acc = na;
	*nacc = n;
	return (0);
}

/* The merge of one query: the counters of the source being visited. */
struct merge_acc {
	struct ing_db *db;
	const char *tenant;
	const struct ing_select *sel;
	struct sm_mtree *mt;
	struct sm_arena *a;
	int64_t *acc;                      /* per node of the source's tree */
	uint32_t nacc;
	const struct ing_block_tree *tree; /* a block's, while visited */
	struct ing_cache_ent *te;
	struct sm_arena *scratch;          /* a block series' buckets */
	struct ing_spill_cur cur;          /* heads' spilled buckets */
};

static int
merge_begin(void *arg, const struct visit_src *src, uint32_t n,
    struct sm_err *err)
{
	struct merge_acc *x = arg;
	int rv;

	if (n == 0)
		return (VISIT_SKIP);
	if (src->m != NULL) {
		if ((rv = ing_store_block_tree(x->db->store, x->tenant, src->m,
		    &x->tree, &x->te, err)) != 0)
			return (rv);
		if ((rv = acc_cover(&x->acc, &x->nacc, x->tree->n)) != 0)
			return (rv);
		if (x->scratch == NULL &&
		    (x->scratch = sm_arena_create(0)) == NULL)
			return (SM_ENOMEM);
	}
	if (x->nacc > 0)
		memset(x->acc, 0, (size_t)x->nacc * sizeof(*x->acc));
	return (0);
}

static int
merge_each(void *arg, const struct visit_src *src, uint32_t id,
    const struct ing_series *sr, const struct ing_pick *pk,
    struct sm_err *err)
{
	struct merge_acc *x = arg;
	const struct ing_bucket *b = sr->b;
	Smolder__V1__SeriesMeta m;
	int rv;

	if (src->h != NULL) {
		const struct ing_bucket *hb;
		uint32_t nhb;

		/* The tree may have grown during a yield. */
		if ((rv = acc_cover(&x->acc, &x->nacc, src->h->tree.n)) != 0)
			return (rv);
		/* Spilled buckets in range are read back (head.h). */
		if (x->scratch == NULL &&
		    (x->scratch = sm_arena_create(0)) == NULL)
			return (SM_ENOMEM);
		sm_arena_reset(x->scratch);
		if ((rv = ing_head_buckets(src->h, sr, x->sel->start_ms,
		    x->sel->end_ms, x->scratch, &x->cur, &hb, &nhb,
		    err)) != 0)
			return (rv);
		x->mt->profiles += acc_buckets(src, hb, nhb,
		    x->sel->start_ms, x->sel->end_ms, pk, x->acc);
		meta_of(src->s, sr, &m);
		add_meta_copy(x->mt, x->a, &m);
		return (0);
	} else {
		struct ing_bucket *bb;

		sm_arena_reset(x->scratch);
		if ((rv = ing_store_block_data(x->db->store, x->tenant, src->m,
		    id, sr, x->scratch, &bb, err)) != 0)
			return (rv);
		b = bb;
	}
	x->mt->profiles += acc_buckets(src, b, sr->nb, x->sel->start_ms,
	    x->sel->end_ms, pk, x->acc);
	meta_of(src->s, sr, &m);
	add_meta_copy(x->mt, x->a, &m);
	return (0);
}

static int
merge_finish(void *arg, const struct visit_src *src, int rv,
    struct sm_err *err)
{
	struct merge_acc *x = arg;
	struct ing_head *h = src->h;

	if (rv == 0 && h != NULL) {
		if ((rv = acc_cover(&x->acc, &x->nacc, h->tree.n)) == 0)
			rv = sm_mtree_add_tree(x->mt, h->tree.parent,
			    h->tree.name, h->tree.n, x->acc, h->frames.strs,
			    h->frames.n, err);
	} else if (rv == 0) {
		rv = sm_mtree_add_tree(x->mt, x->tree->parent, x->tree->name,
		    x->tree->n, x->acc, x->tree->frames, x->tree->nframes,
		    err);
		if (rv == SM_ECORRUPT)
			sm_err_prefix(err, "block %s/%llu", x->tenant,
			    (unsigned long long)src->m->gen);
	}
	if (x->te != NULL)
		ing_store_release(x->db->store, x->te);
	x->te = NULL;
	x->tree = NULL;
	return (rv);
}

/* The select checked, and its matchers as a selector. */
static int
selector_from_select(const struct ing_select *sel, struct sm_selector *out,
    struct sm_err *err)
{
	int rv;

	for (size_t i = 0; i < sel->npicks; i++) {
		const struct ing_pick *pk = &sel->picks[i];

		if (i > 0 && sel->picks[i - 1].fp >= pk->fp)
			return (sm_err_set(err, SM_EINVAL, "picks not sorted "
			    "by fingerprint"));
		for (size_t k = 1; k < pk->nt; k++) {
			if (pk->t[k - 1] >= pk->t[k])
				return (sm_err_set(err, SM_EINVAL, "pick %zu: "
				    "bucket times not sorted", i));
		}
		for (size_t k = 0; k < pk->nneg; k++) {
			if ((k > 0 && pk->neg[k - 1] >= pk->neg[k]) ||
			    times_have(pk->t, pk->nt, pk->neg[k]))
				return (sm_err_set(err, SM_EINVAL, "pick %zu: "
				    "subtracted bucket times not sorted, or "
				    "also added", i));
		}
	}
	if ((rv = ing_res_validate(sel, err)) != 0)
		return (rv);
	sm_selector_init(out);
	for (size_t i = 0; i < sel->nmatchers; i++) {
		const struct ing_matcher *m = &sel->matchers[i];

		if ((int)m->type < 0 || m->type > SM_MATCH_NRE ||
		    m->name == NULL || m->value == NULL) {
			sm_selector_fini(out);
			return (sm_err_set(err, SM_EINVAL, "bad matcher %zu", i));
		}
		if ((rv = sm_selector_add(out, m->type, m->name, m->value,
		    err)) != 0) {
			sm_selector_fini(out);
			return (rv);
		}
	}
	return (0);
}

int
ing_db_merge(struct ing_db *db, const struct ing_query *q,
    struct sm_arena *a, Smolder__V1__MergeResponse *out, struct sm_err *err)
{
	struct ing_select fsel = q->sel;
	const struct ing_select *sel = &fsel;
	struct sm_selector ss;
	struct sm_mtree mt;
	struct merge_acc x;
	struct visitor v;
	int rv;

	smolder__v1__merge_response__init(out);
	ing_select_floor(db, &fsel);
	if ((rv = selector_from_select(sel, &ss, err)) != 0)
		return (rv);
	if (sm_mtree_init(&mt) != 0) {
		sm_selector_fini(&ss);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	x = (struct merge_acc){ .db = db, .tenant = sel->tenant, .sel = sel,
		.mt = &mt, .a = a };
	v = (struct visitor){ .db = db, .tenant = sel->tenant, .ss = &ss,
		.picks = sel, .start = sel->start_ms, .end = sel->end_ms,
		.begin = merge_begin, .each = merge_each,
		.finish = merge_finish, .arg = &x };
	rv = visit_sources(&v, sel, sel->start_ms, sel->end_ms, 0, err);
	sm_free(x.acc);
	sm_arena_destroy(x.scratch);
	ing_spill_cur_fini(&x.cur);
	if (rv != 0) {
		if (rv == SM_ENOMEM)
			sm_err_set(err, rv, "out of memory");
		goto out;
	}
	/* The response outlives the merge tree: copy its names and the
	 * metadata entries (their strings are already in the arena). */
	if ((rv = sm_mtree_to_pb(&mt, a, out)) == 0) {
		for (size_t i = 0; i < out->tree->n_strings && rv == 0; i++) {
			const struct sm_str *ns = &mt.names.strs[i];

			if ((out->tree->strings[i] = sm_arena_strndup(a, ns->p,
			    ns->len)) == NULL)
				rv = SM_ENOMEM;
		}
		for (size_t i = 0; i < out->n_meta && rv == 0; i++) {
			Smolder__V1__SeriesMeta *c = sm_arena_alloc(a,
			    sizeof(*c));

			if (c == NULL)
				rv = SM_ENOMEM;
			else {
				*c = *out->meta[i];
				out->meta[i] = c;
			}
		}
	}
	if (rv != 0)
		sm_err_set(err, rv, "out of memory");
out:
	sm_mtree_fini(&mt);
	sm_selector_fini(&ss);
	return (rv);
}

/* --- series (time series of totals) --------------------------------------- */

#define SERIES_MAX_STEPS 1000000
#define SERIES_MAX_GROUPS 10000
/*
 * Groups x steps: every group holds one double per step, so without this a
 * request with 750k steps grouped by a label with 170 values zeroed 1 GiB
 * (the request budget) before failing with "out of memory", for seconds
 * (fuzz_rpc: regressions/rpc/series-steps-x-groups).  10^7 points is 80
 * MB, e.g. 7 days at a 1-minute step for 990 groups.
 */
#define SERIES_MAX_POINTS 10000000

struct series_group {
	char **values;          /* one per group_by label ("" if absent) */
	double *points;         /* per step */
	uint32_t *profiles;     /* per step: uploads behind points[] */
	uint64_t h;             /* of values, for the group table */
};

/*
 * Groups are found through an open-addressing table on the hash of their
 * label values, so a request over many series and groups stays linear
 * (a scan of the groups per series was quadratic).
 */
struct series_acc {
	const struct ing_query *q;
	struct sm_arena *a;
	int64_t first, step, nsteps;
	struct series_group *g;
	uint32_t ng, gcap;
	struct sm_oatab tab;    /* group index by sm_hash_u64(h) */
	/* A stack filter (series_filtered): a call site (q->ncall_site >
	 * 0) or a function (q->function).  Per node of the source being
	 * visited: its depth and whether its root path matches the call
	 * site so far (SERIES_CS_PATH) and whether its values count
	 * (SERIES_CS_IN: at or under the call site; at or under the
	 * function, or for its self series at it); the head's tree may
	 * grow during a yield, so `ndone` says how far it is computed.  A
	 * block's tree and data come from the store. */
	uint32_t ncs;           /* frames in cs: the call site's, or 1 */
	uint32_t *cs;           /* their frame ids in the source */
	uint32_t *depth;
	uint8_t *in;
	uint32_t ndone, ncap;
	struct ing_db *db;
	const struct ing_block_tree *tree;
	struct ing_cache_ent *te;
	struct sm_arena *scratch;
	struct ing_spill_cur cur;
};

#define SERIES_CS_PATH 1
#define SERIES_CS_IN 2

/* Hash of a group's label values (each with its length, so ("ab", "c")
 * and ("a", "bc") differ). */
static uint64_t
series_group_hash(const char *const *v, uint32_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull;

	for (uint32_t j = 0; j < n; j++) {
		size_t len = strlen(v[j]);

		h = sm_hash_seed(v[j], len, h ^ len);
	}
	return (h);
}

/*
 * The group of series sr (found through a hash table of the groups' label
 * values, so a query is linear in the series it reads however many groups
 * there are), created on first use.  NULL with *rv set on a limit or
 * SM_ENOMEM.
 */
static struct series_group *
series_group_of(struct series_acc *x, const struct ing_series *sr, int *rv)
{
	uint32_t ngb = (uint32_t)x->q->ngroup_by;
	const char *vals[64];
	const char **v = vals;
	struct series_group *gr = NULL;
	struct sm_oatab_it it;
	uint32_t k;
	uint64_t h;

	*rv = 0;
	if (ngb > SM_ARRAY_LEN(vals) &&
	    (v = sm_calloc(ngb, sizeof(*v))) == NULL) {
		*rv = SM_ENOMEM;
		return (NULL);
	}
	for (uint32_t j = 0; j < ngb; j++) {
		v[j] = sm_labels_get(sr->labels, sr->nlabels,
		    x->q->group_by[j]);
		if (v[j] == NULL)
			v[j] = "";
	}
	h = series_group_hash(v, ngb);
	/* Room first: the probe below then ends where the insert goes. */
	if ((*rv = sm_oatab_reserve(&x->tab, x->ng + 1)) != 0)
		goto out;
	for (sm_oatab_probe(&x->tab, sm_hash_u64(h), &it);
	    (k = sm_oatab_next(&x->tab, &it)) != SM_OATAB_NONE;) {
		struct series_group *o = &x->g[k];
		uint32_t j;

		if (o->h != h)
			continue;
		for (j = 0; j < ngb && strcmp(o->values[j], v[j]) == 0; j++)
			;
		if (j == ngb) {
			gr = o;
			goto out;
		}
	}
	if (x->ng == SERIES_MAX_GROUPS ||
	    (int64_t)(x->ng + 1) * x->nsteps > SERIES_MAX_POINTS) {
		*rv = SM_ELIMIT;
		goto out;
	}
	if (x->ng == x->gcap) {
		uint32_t ncap = x->gcap ? x->gcap * 2 : 8;
		struct series_group *ng = sm_arena_grow(x->a, x->g, x->ng, ncap,
		    sizeof(*ng));

		if (ng == NULL) {
			*rv = SM_ENOMEM;
			goto out;
		}
		x->g = ng;
		x->gcap = ncap;
	}
	gr = &x->g[x->ng];
	gr->h = h;
	gr->values = sm_arena_alloc(x->a, (size_t)SM_MAX(ngb, 1) *
	    sizeof(char *));
	gr->points = sm_arena_calloc(x->a, (size_t)x->nsteps, sizeof(double));
	gr->profiles = sm_arena_calloc(x->a, (size_t)x->nsteps,
	    sizeof(uint32_t));
	if (gr->values == NULL || gr->points == NULL || gr->profiles == NULL) {
		*rv = SM_ENOMEM;
		gr = NULL;
		goto out;
	}
	for (uint32_t j = 0; j < ngb; j++) {
		if ((gr->values[j] = sm_arena_strndup(x->a, v[j],
		    strlen(v[j]))) == NULL) {
			*rv = SM_ENOMEM;
			gr = NULL;
			goto out;
		}
	}
	*rv = sm_oatab_insert(&x->tab, &it, x->ng);   /* reserved: 0 */
	SM_ASSERT(*rv == 0);
	x->ng++;
out:
	if (v != vals)
		sm_free(v);
	return (gr);
}

/* Does the query filter stacks (a call site or a function)? */
static bool
series_filtered(const struct ing_query *q)
{
	return (q->ncall_site > 0 || (q->function != NULL &&
	    q->function[0] != '\0'));
}

/*
 * The filter's frame ids in a frame table (UINT32_MAX: a frame no stack
 * of the source has, so no value counts).
 */
static void
series_cs_ids(struct series_acc *x, const struct sm_str *frames,
    uint32_t nframes, const struct sm_strtab *tab)
{
	for (size_t k = 0; k < x->ncs; k++) {
		const char *nm = x->q->ncall_site > 0 ? x->q->call_site[k] :
		    x->q->function;
		size_t len = strlen(nm);
		uint32_t id = UINT32_MAX;

		if (tab != NULL) {
			if (sm_strtab_find(tab, nm, len, &id) != 0)
				id = UINT32_MAX;
		} else {
			for (uint32_t f = 0; f < nframes; f++) {
				if (frames[f].len == len &&
				    memcmp(frames[f].p, nm, len) == 0) {
					id = f;
					break;
				}
			}
		}
		x->cs[k] = id;
	}
}

/*
 * Extend the per-node call-site marks to nodes [x->ndone, n) of a tree
 * (parents before children): a node is on the path while its frames
 * from the root are the call site's, and in it from the call site's
 * last frame down -- the stacks qry_tree_select keeps for a flamegraph.
 * 0 or SM_ENOMEM.
 */
static int
series_cs_extend(struct series_acc *x, const uint32_t *parent,
    const uint32_t *name, uint32_t n)
{
	uint32_t ncs = x->ncs;
	bool fn = x->q->ncall_site == 0;

	if (n > x->ncap) {
		uint32_t *nd = sm_realloc(x->depth, (size_t)n * sizeof(*nd));
		uint8_t *ni;

		if (nd == NULL)
			return (SM_ENOMEM);
		x->depth = nd;
		if ((ni = sm_realloc(x->in, n)) == NULL)
			return (SM_ENOMEM);
		x->in = ni;
		x->ncap = n;
	}
	for (uint32_t i = x->ndone; i < n; i++) {
		uint32_t d;

		if (i == 0) {           /* the root: the empty path */
			x->depth[0] = 0;
			x->in[0] = SERIES_CS_PATH | (ncs == 0 ? SERIES_CS_IN :
			    0);
			if (fn)
				x->in[0] = 0;
			continue;
		}
		SM_ASSERT(parent[i] < i);
		d = x->depth[parent[i]] + 1;
		x->depth[i] = d;
		x->in[i] = 0;
		if (fn) {       /* the function: its node, and (total) under */
			if (name[i] == x->cs[0] || (!x->q->function_self &&
			    (x->in[parent[i]] & SERIES_CS_IN)))
				x->in[i] = SERIES_CS_IN;
			continue;
		}
		if ((x->in[parent[i]] & SERIES_CS_IN) || ((x->in[parent[i]] &
		    SERIES_CS_PATH) && d <= ncs && name[i] == x->cs[d - 1]))
			x->in[i] = SERIES_CS_PATH | (d >= ncs ? SERIES_CS_IN :
			    0);
	}
	x->ndone = SM_MAX(x->ndone, n);
	return (0);
}

static int
series_begin(void *arg, const struct visit_src *src, uint32_t n,
    struct sm_err *err)
{
	struct series_acc *x = arg;
	int rv;

	if (n == 0)
		return (VISIT_SKIP);
	if (!series_filtered(x->q))
		return (0);
	if (x->scratch == NULL && (x->scratch = sm_arena_create(0)) == NULL)
		return (SM_ENOMEM);
	x->ndone = 0;
	if (src->h != NULL) {
		series_cs_ids(x, NULL, 0, &src->h->frames);
		return (series_cs_extend(x, src->h->tree.parent,
		    src->h->tree.name, src->h->tree.n));
	}
	if ((rv = ing_store_block_tree(x->db->store, x->q->sel.tenant, src->m,
	    &x->tree, &x->te, err)) != 0)
		return (rv);
	series_cs_ids(x, x->tree->frames, x->tree->nframes, NULL);
	return (series_cs_extend(x, x->tree->parent, x->tree->name,
	    x->tree->n));
}

static int
series_finish(void *arg, const struct visit_src *src, int rv,
    struct sm_err *err)
{
	struct series_acc *x = arg;

	(void)src;
	(void)err;
	if (x->te != NULL)
		ing_store_release(x->db->store, x->te);
	x->te = NULL;
	x->tree = NULL;
	return (rv);
}

/* The sum of bucket b's values of the stacks through the call site. */
static int64_t
series_cs_sum(const struct series_acc *x, const struct ing_bucket *b)
{
	int64_t sum = 0;

	if (b->packed != NULL) {
		struct ing_pair_cur c;
		uint32_t node;
		int64_t v;

		ing_pairs_begin(b, &c);
		while (ing_pairs_next(&c, &node, &v))
			if (node < x->ndone && (x->in[node] & SERIES_CS_IN))
				sum = sm_add_sat(sum, v);
	} else {
		for (uint32_t j = 0; j < b->n; j++)
			if (b->node[j] < x->ndone &&
			    (x->in[b->node[j]] & SERIES_CS_IN))
				sum = sm_add_sat(sum, b->value[j]);
	}
	return (sum);
}

/*
 * A series' buckets through a call site: its buckets with their pairs
 * (a head's spilled ones read back, a block's from its data part), the
 * tree's marks extended to what the head grew to.
 */
static int
series_cs_buckets(struct series_acc *x, const struct visit_src *src,
    uint32_t id, const struct ing_series *sr, const struct ing_bucket **out,
    uint32_t *n, struct sm_err *err)
{
	struct ing_bucket *bb;
	int rv;

	sm_arena_reset(x->scratch);
	if (src->h != NULL) {
		if (src->h->tree.n > x->ndone) {
			series_cs_ids(x, NULL, 0, &src->h->frames);
			if ((rv = series_cs_extend(x, src->h->tree.parent,
			    src->h->tree.name, src->h->tree.n)) != 0)
				return (rv);
		}
		return (ing_head_buckets(src->h, sr, x->q->sel.start_ms,
		    x->q->sel.end_ms, x->scratch, &x->cur, out, n, err));
	}
	if ((rv = ing_store_block_data(x->db->store, x->q->sel.tenant, src->m,
	    id, sr, x->scratch, &bb, err)) != 0)
		return (rv);
	*out = bb;
	*n = sr->nb;
	return (0);
}

/* Add `sg` times one bucket (floored to `ft`) of `total` over
 * `profiles` uploads to the group's step holding ft. */
static void
series_add(struct series_acc *x, struct series_group *gr, int64_t ft,
    int sg, double total, uint32_t profiles)
{
	int64_t slot = (sm_floor_to(ft, x->step) - x->first) / x->step;

	slot = SM_MIN(SM_MAX(slot, 0), x->nsteps - 1);
	gr->points[slot] += (double)sg * total;
	gr->profiles[slot] += sg > 0 ? profiles : -(uint64_t)profiles;
}

/* Add the bucket totals of one selected series to its group (through
 * the call site: the sums of its stacks). */
static int
series_each(void *arg, const struct visit_src *src, uint32_t id,
    const struct ing_series *sr, const struct ing_pick *pk,
    struct sm_err *err)
{
	struct series_acc *x = arg;
	const struct ing_select *sel = &x->q->sel;
	struct ing_bucket_it it;
	const struct ing_bucket *b;
	int64_t bucket_ms = src->bucket_ms;
	struct series_group *gr;
	int rv;

	if ((gr = series_group_of(x, sr, &rv)) == NULL)
		return (rv);
	if (series_filtered(x->q)) {
		const struct ing_bucket *cb;
		uint32_t nb;

		if ((rv = series_cs_buckets(x, src, id, sr, &cb, &nb,
		    err)) != 0)
			return (rv);
		for (uint32_t k = ing_buckets_first(cb, nb, bucket_ms,
		    sel->start_ms); k < nb && ing_bucket_overlaps(&cb[k],
		    bucket_ms, sel->start_ms, sel->end_ms); k++) {
			int64_t ft;
			int sg;

			if (ing_res_bucket(src->res, src->m, cb[k].t, &ft) &&
			    (sg = pick_sign(pk, ft)) != 0)
				series_add(x, gr, ft, sg,
				    (double)series_cs_sum(x, &cb[k]),
				    cb[k].profiles);
		}
		return (0);
	}
	ing_bucket_it_init(&it, sr, bucket_ms, sel->start_ms, sel->end_ms);
	while ((b = ing_bucket_it_next(&it)) != NULL) {
		int64_t ft;
		int sg;

		if (ing_res_bucket(src->res, src->m, b->t, &ft) &&
		    (sg = pick_sign(pk, ft)) != 0)
			series_add(x, gr, ft, sg, (double)b->total,
			    b->profiles);
	}
	return (0);
}

static int
group_cmp(const void *a, const void *b, void *arg)
{
	const struct series_group *x = a, *y = b;
	uint32_t n = *(const uint32_t *)arg;

	for (uint32_t j = 0; j < n; j++) {
		int c = strcmp(x->values[j], y->values[j]);

		if (c != 0)
			return (c);
	}
	return (0);
}

/* The query's checks and x's window; 0, SM_EINVAL or SM_ENOMEM (x.cs). */
static int
series_setup(const struct ing_query *q, struct series_acc *x,
    struct sm_err *err)
{
	const struct ing_select *sel = &q->sel;

	x->step = q->step_ms;
	x->first = sm_floor_to(sel->start_ms, x->step);
	x->nsteps = (sel->end_ms - x->first + x->step - 1) / x->step;
	if (x->nsteps > SERIES_MAX_STEPS)
		return (sm_err_set(err, SM_EINVAL, "series: %lld steps exceed "
		    "the limit of %d", (long long)x->nsteps, SERIES_MAX_STEPS));
	if (q->ncall_site > 0 && q->function != NULL && q->function[0] != '\0')
		return (sm_err_set(err, SM_EINVAL, "series: a call site or a "
		    "function, not both"));
	for (size_t k = 0; k < q->ncall_site; k++) {
		if (q->call_site[k] == NULL)
			return (sm_err_set(err, SM_EINVAL, "series: call site "
			    "frame %zu missing", k));
	}
	x->ncs = q->ncall_site > 0 ? (uint32_t)SM_MIN(q->ncall_site,
	    UINT32_MAX) : 1;
	if (series_filtered(q) && (x->cs = sm_calloc(x->ncs,
	    sizeof(*x->cs))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	return (0);
}

/* Visit the sources of the query into x's groups, then free x's
 * per-visit buffers; 0 or an error named in err. */
static int
series_collect(struct ing_db *db, const struct ing_query *q,
    struct sm_selector *ss, struct series_acc *x, struct sm_err *err)
{
	const struct ing_select *sel = &q->sel;
	struct visitor v = { .db = db, .tenant = sel->tenant, .ss = ss,
		.picks = sel, .start = sel->start_ms, .end = sel->end_ms,
		.begin = series_begin, .each = series_each,
		.finish = series_finish, .arg = x };
	int rv;

	rv = visit_sources(&v, sel, sel->start_ms, sel->end_ms, 0, err);
	sm_free(x->depth);
	sm_free(x->in);
	sm_arena_destroy(x->scratch);
	ing_spill_cur_fini(&x->cur);
	x->depth = NULL;
	x->in = NULL;
	x->scratch = NULL;
	if (rv == SM_ELIMIT && x->ng == SERIES_MAX_GROUPS)
		sm_err_set(err, rv, "series: more than %d groups",
		    SERIES_MAX_GROUPS);
	else if (rv == SM_ELIMIT)
		sm_err_set(err, rv, "series: more than %d points (%u groups "
		    "of %lld steps); use a longer step or fewer group-by "
		    "labels", SERIES_MAX_POINTS, x->ng + 1,
		    (long long)x->nsteps);
	else if (rv == SM_ENOMEM)
		sm_err_set(err, rv, "out of memory");
	return (rv);
}

/*
 * Group g as a series (its group-by labels and a point per step that has
 * profiles: a step whose values cancel out, signed samples, is a point
 * still, AVERAGE needs it) and its profile counts, in the arena.
 */
static int
series_render(const struct ing_query *q, const struct series_acc *x,
    const struct series_group *g, struct sm_arena *a, Types__V1__Series **sep,
    Smolder__V1__SeriesCounts **scp)
{
	uint32_t ngb = (uint32_t)q->ngroup_by;
	Types__V1__Series *se = sm_arena_alloc(a, sizeof(*se));
	Smolder__V1__SeriesCounts *sc = sm_arena_alloc(a, sizeof(*sc));
	size_t np = 0;

	if (se == NULL || sc == NULL)
		return (SM_ENOMEM);
	types__v1__series__init(se);
	smolder__v1__series_counts__init(sc);
	for (int64_t i = 0; i < x->nsteps; i++)
		np += g->points[i] != 0 || g->profiles[i] != 0;
	se->n_labels = ngb;
	se->labels = sm_arena_alloc(a, (size_t)SM_MAX(ngb, 1) *
	    sizeof(*se->labels));
	se->points = sm_arena_alloc(a, SM_MAX(np, 1) * sizeof(*se->points));
	sc->profiles = sm_arena_alloc(a, SM_MAX(np, 1) *
	    sizeof(*sc->profiles));
	if (se->labels == NULL || se->points == NULL || sc->profiles == NULL)
		return (SM_ENOMEM);
	for (uint32_t j = 0; j < ngb; j++) {
		Types__V1__LabelPair *lp = sm_arena_alloc(a, sizeof(*lp));

		if (lp == NULL)
			return (SM_ENOMEM);
		types__v1__label_pair__init(lp);
		lp->name = (char *)q->group_by[j];
		lp->value = g->values[j];
		se->labels[j] = lp;
	}
	np = 0;
	for (int64_t i = 0; i < x->nsteps; i++) {
		Types__V1__Point *pt;

		if (g->points[i] == 0 && g->profiles[i] == 0)
			continue;
		if ((pt = sm_arena_alloc(a, sizeof(*pt))) == NULL)
			return (SM_ENOMEM);
		types__v1__point__init(pt);
		pt->timestamp = x->first + i * x->step;
		pt->value = g->points[i];
		sc->profiles[np] = g->profiles[i];
		se->points[np++] = pt;
	}
	se->n_points = np;
	sc->n_profiles = np;
	*sep = se;
	*scp = sc;
	return (0);
}

int
ing_db_series(struct ing_db *db, const struct ing_query *q,
    struct sm_arena *a, Smolder__V1__SeriesResponse *out, struct sm_err *err)
{
	struct ing_query fq = *q;
	const struct ing_select *sel = &fq.sel;
	struct series_acc x;
	struct sm_selector ss;
	uint32_t ngb;
	int rv = 0;

	smolder__v1__series_response__init(out);
	if (q->step_ms <= 0 || sel->end_ms <= sel->start_ms)
		return (sm_err_set(err, SM_EINVAL, "series: bad range or step"));
	/* The step arithmetic below is exact only inside the time window
	 * (attime.h); the querier checks it too, this guards the RPC. */
	if ((rv = sm_time_check_range(sel->start_ms, "series: start",
	    sel->end_ms, "end", err)) != 0)
		return (rv);
	ing_select_floor(db, &fq.sel);
	if (sel->end_ms <= sel->start_ms)
		return (0);   /* all of it is past retention */
	q = &fq;
	memset(&x, 0, sizeof(x));
	x.q = q;
	x.a = a;
	x.db = db;
	if ((rv = series_setup(q, &x, err)) != 0 ||
	    (rv = selector_from_select(sel, &ss, err)) != 0) {
		sm_free(x.cs);
		return (rv);
	}
	rv = series_collect(db, q, &ss, &x, err);
	sm_free(x.cs);
	x.cs = NULL;
	if (rv != 0)
		goto out_sel;
	/* Groups in a stable order (by their label values), whatever the
	 * order the sources were read in. */
	ngb = (uint32_t)q->ngroup_by;
	if (x.ng > 1)
		qsort_r(x.g, x.ng, sizeof(*x.g), group_cmp, &ngb);
	out->n_series = x.ng;
	out->n_counts = x.ng;
	out->series = sm_arena_alloc(a, (size_t)SM_MAX(x.ng, 1) *
	    sizeof(*out->series));
	out->counts = sm_arena_alloc(a, (size_t)SM_MAX(x.ng, 1) *
	    sizeof(*out->counts));
	if (out->series == NULL || out->counts == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out_sel;
	}
	for (uint32_t gi = 0; gi < x.ng; gi++) {
		if (series_render(q, &x, &x.g[gi], a, &out->series[gi],
		    &out->counts[gi]) != 0) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out_sel;
		}
	}
out_sel:
	sm_oatab_fini(&x.tab);
	sm_selector_fini(&ss);
	return (rv);
}

/* --- stats (replica de-duplication) ------------------------------------- */

struct stat_tc {
	int64_t t;
	uint32_t count;
	uint32_t id_off, id_n;      /* ids: its uploads' in the series' ids */
	bool unk;                   /* ids: not known */
};

struct stat_acc {
	uint64_t fp, profiles, digest;
	bool detail;
	struct stat_tc *b;          /* detail: buckets, unsorted */
	uint32_t n, cap;
	uint64_t *ids;              /* detail with ids: hashes of upload ids */
	uint32_t nids, idcap;
};

struct stats_acc {
	const struct ing_query *q;
	struct ing_db *db;
	struct sm_arena *a;
	struct stat_acc *v;
	uint32_t n, cap;
	struct sm_oatab tab;        /* index by sm_hash_u64(fp) */
	/* ids: the records of the source being visited, read at its first
	 * detail series */
	struct ing_prof_rec *rec;
	uint32_t nrec;
	bool rec_read;
};

#define STATS_MAX_SERIES 10000000u

/* Linear in the counts: a bucket split between sources sums the same. */
static inline uint64_t
bucket_mix(int64_t t)
{
	return (sm_hash_u64((uint64_t)t) | 1);
}

static struct stat_acc *
stats_get(struct stats_acc *x, uint64_t fp)
{
	struct sm_oatab_it it;
	uint32_t k;

	if ((x->n + 1) * 2 > x->tab.nslots &&
	    (x->n >= STATS_MAX_SERIES ||
	    sm_oatab_reserve(&x->tab, x->n + 1) != 0))
		return (NULL);
	for (sm_oatab_probe(&x->tab, sm_hash_u64(fp), &it);
	    (k = sm_oatab_next(&x->tab, &it)) != SM_OATAB_NONE;) {
		if (x->v[k].fp == fp)
			return (&x->v[k]);
	}
	if (x->n == x->cap) {
		uint32_t ncap = x->cap ? x->cap * 2 : 64;
		struct stat_acc *nv = sm_reallocarray(x->v, ncap, sizeof(*nv));

		if (nv == NULL)
			return (NULL);
		x->v = nv;
		x->cap = ncap;
	}
	memset(&x->v[x->n], 0, sizeof(x->v[x->n]));
	x->v[x->n].fp = fp;
	x->v[x->n].detail = sm_u64_has(x->q->detail, x->q->ndetail, fp);
	k = (uint32_t)sm_oatab_insert(&x->tab, &it, x->n);   /* reserved: 0 */
	SM_ASSERT(k == 0);
	x->n++;
	return (&x->v[x->n - 1]);
}

static int
stats_begin(void *arg, const struct visit_src *src, uint32_t n,
    struct sm_err *err)
{
	return (n == 0 ? VISIT_SKIP : 0);
}

/* The source's records (stats_ids) go with it. */
static int
stats_finish(void *arg, const struct visit_src *src, int rv,
    struct sm_err *err)
{
	struct stats_acc *x = arg;

	sm_free(x->rec);
	x->rec = NULL;
	x->nrec = 0;
	x->rec_read = false;
	return (rv);
}

/*
 * The hashes of the ids of series fp's uploads in raw bucket [t, t +
 * bucket_ms) of the source, appended to st->ids, when the source's
 * records say exactly `profiles` uploads; false when they do not (or it
 * has none: a tier block, a block from before records): the bucket's ids
 * are not known.  A head's records are copied at its first detail series
 * (under its lock); one written after that makes its bucket unknown.
 */
static int
stats_ids(struct stats_acc *x, const struct visit_src *src,
    struct stat_acc *st, uint64_t fp, int64_t t, int64_t bucket_ms,
    uint32_t profiles, bool *known, struct sm_err *err)
{
	uint32_t lo, k, got = 0;
	int rv;

	*known = false;
	if (src->m != NULL && (src->m->tier_ms > 0 || src->m->nprofiles == 0))
		return (0);
	if (!x->rec_read) {
		x->rec_read = true;
		if (src->h != NULL)
			rv = ing_head_profs(src->h, true, &x->rec, &x->nrec,
			    err);
		else
			rv = ing_store_block_profiles(x->db->store,
			    x->q->sel.tenant, src->m, &x->rec, &x->nrec, err);
		if (rv != 0)
			return (rv);
	}
	/* the first record at or after (fp, t) */
	SM_LOWER_BOUND(lo, x->nrec, mid, x->rec[mid].fp < fp ||
	    (x->rec[mid].fp == fp && x->rec[mid].t < t));
	for (k = lo; k < x->nrec && x->rec[k].fp == fp &&
	    x->rec[k].t < t + bucket_ms; k++) {
		if (st->nids == st->idcap) {
			uint32_t ncap = st->idcap ? st->idcap * 2 : 64;
			uint64_t *nv = sm_arena_grow(x->a, st->ids, st->nids,
			    ncap, sizeof(*nv));

			if (nv == NULL)
				return (SM_ENOMEM);
			st->ids = nv;
			st->idcap = ncap;
		}
		st->ids[st->nids++] = sm_hash(x->rec[k].id, 16);
		got++;
	}
	*known = got == profiles;
	return (0);
}

/* Count the in-range buckets of one selected series.  Picks restrict
 * the series (the visitor); bucket lists are ignored (stats are what the
 * querier picks buckets from). */
static int
stats_each(void *arg, const struct visit_src *src, uint32_t id,
    const struct ing_series *sr, const struct ing_pick *pk,
    struct sm_err *err)
{
	struct stats_acc *x = arg;
	const struct ing_select *sel = &x->q->sel;
	struct ing_bucket_it it;
	const struct ing_bucket *b;
	int64_t bucket_ms = src->bucket_ms;
	struct stat_acc *st;
	int rv;

	if ((st = stats_get(x, sr->fp)) == NULL)
		return (SM_ENOMEM);
	ing_bucket_it_init(&it, sr, bucket_ms, sel->start_ms, sel->end_ms);
	while ((b = ing_bucket_it_next(&it)) != NULL) {
		struct stat_tc *tc;
		uint32_t id0 = st->nids;
		bool known = false;
		int64_t ft;

		if (!ing_res_bucket(src->res, src->m, b->t, &ft))
			continue;
		st->profiles += b->profiles;
		st->digest += (uint64_t)b->profiles * bucket_mix(ft);
		if (!st->detail)
			continue;
		if (x->q->ids && (rv = stats_ids(x, src, st, sr->fp, b->t,
		    bucket_ms, b->profiles, &known, err)) != 0)
			return (rv);
		if (st->n > 0 && st->b[st->n - 1].t == ft) {
			/* Raw buckets floored into one; its ids run on. */
			tc = &st->b[st->n - 1];
			tc->count += b->profiles;
			tc->id_n += st->nids - id0;
			tc->unk |= !known;
			continue;
		}
		if (st->n == st->cap) {
			uint32_t ncap = st->cap ? st->cap * 2 : 64;
			struct stat_tc *nb = sm_arena_grow(x->a, st->b, st->n,
			    ncap, sizeof(*nb));

			if (nb == NULL)
				return (SM_ENOMEM);
			st->b = nb;
			st->cap = ncap;
		}
		st->b[st->n++] = (struct stat_tc){ ft, b->profiles, id0,
		    st->nids - id0, !known };
	}
	return (0);
}

static int
stat_cmp(const void *a, const void *b)
{
	const struct stat_acc *x = a, *y = b;

	return (SM_CMP(x->fp, y->fp));
}

static int
tc_cmp(const void *a, const void *b)
{
	const struct stat_tc *x = a, *y = b;

	return (SM_CMP(x->t, y->t));
}


/* A detail's buckets sorted by time, equal times (split buckets) summed,
 * as the response's arrays; with ids, each bucket's sorted hashes (or
 * unknown, UINT32_MAX, when a part of it is).  0 or SM_ENOMEM. */
static int
detail_output(struct stat_acc *st, bool ids, struct sm_arena *a,
    Smolder__V1__SeriesStat *out)
{
	uint32_t k = 0, no = 0;

	if (st->n > 1)
		qsort(st->b, st->n, sizeof(*st->b), tc_cmp);
	out->t = sm_arena_alloc(a, (size_t)SM_MAX(st->n, 1) * sizeof(int64_t));
	out->count = sm_arena_alloc(a, (size_t)SM_MAX(st->n, 1) *
	    sizeof(uint32_t));
	if (out->t == NULL || out->count == NULL)
		return (SM_ENOMEM);
	if (ids && ((out->nids = sm_arena_alloc(a, (size_t)SM_MAX(st->n, 1) *
	    sizeof(uint32_t))) == NULL || (out->ids = sm_arena_alloc(a,
	    (size_t)SM_MAX(st->nids, 1) * sizeof(uint64_t))) == NULL))
		return (SM_ENOMEM);
	for (uint32_t i = 0; i < st->n;) {
		uint32_t j = i, o0 = no;
		bool unk = false;

		out->t[k] = st->b[i].t;
		out->count[k] = 0;
		for (; j < st->n && st->b[j].t == st->b[i].t; j++) {
			out->count[k] += st->b[j].count;
			unk |= st->b[j].unk;
			if (ids && !unk) {
				memcpy(out->ids + no, st->ids + st->b[j].id_off,
				    (size_t)st->b[j].id_n * sizeof(uint64_t));
				no += st->b[j].id_n;
			}
		}
		if (ids) {
			if (unk) {
				no = o0;
				out->nids[k] = UINT32_MAX;
			} else {
				uint32_t u = 0;

				qsort(out->ids + o0, no - o0, sizeof(uint64_t),
				    sm_u64_cmp);
				for (uint32_t y = o0; y < no; y++)
					if (u == 0 || out->ids[o0 + u - 1] !=
					    out->ids[y])
						out->ids[o0 + u++] = out->ids[y];
				no = o0 + u;
				out->nids[k] = u;
			}
		}
		k++;
		i = j;
	}
	out->n_t = out->n_count = k;
	if (ids) {
		out->n_nids = k;
		out->n_ids = no;
	}
	return (0);
}

int
ing_db_series_stats(struct ing_db *db, const struct ing_query *q,
    struct sm_arena *a, Smolder__V1__StatsResponse *out, struct sm_err *err)
{
	struct ing_query fq = *q;
	const struct ing_select *sel = &fq.sel;
	struct stats_acc x;
	struct sm_selector ss;
	struct visitor v;
	int rv = 0;

	smolder__v1__stats_response__init(out);
	if (sel->end_ms <= sel->start_ms)
		return (sm_err_set(err, SM_EINVAL, "stats: bad range"));
	ing_select_floor(db, &fq.sel);
	if (sel->end_ms <= sel->start_ms)
		return (0);   /* all of it is past retention */
	q = &fq;
	for (size_t i = 1; i < q->ndetail; i++) {
		if (q->detail[i - 1] >= q->detail[i])
			return (sm_err_set(err, SM_EINVAL, "stats: detail not "
			    "sorted"));
	}
	memset(&x, 0, sizeof(x));
	x.q = q;
	x.db = db;
	x.a = a;
	if ((rv = selector_from_select(sel, &ss, err)) != 0)
		return (rv);
	v = (struct visitor){ .db = db, .tenant = sel->tenant, .ss = &ss,
		.picks = sel, .start = sel->start_ms, .end = sel->end_ms,
		.begin = stats_begin, .each = stats_each,
		.finish = stats_finish, .arg = &x };
	if ((rv = visit_sources(&v, sel, sel->start_ms, sel->end_ms, 0,
	    err)) != 0) {
		if (rv == SM_ENOMEM)
			sm_err_set(err, rv, "out of memory");
		goto out;
	}
	if (x.n > 1)
		qsort(x.v, x.n, sizeof(*x.v), stat_cmp);
	out->n_series = x.n;
	out->series = sm_arena_alloc(a, (size_t)SM_MAX(x.n, 1) *
	    sizeof(*out->series));
	if (out->series == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < x.n; i++) {
		Smolder__V1__SeriesStat *st = sm_arena_alloc(a, sizeof(*st));

		if (st == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		smolder__v1__series_stat__init(st);
		st->fp = x.v[i].fp;
		st->profiles = x.v[i].profiles;
		st->digest = x.v[i].digest;
		if (x.v[i].detail && detail_output(&x.v[i], q->ids, a,
		    st) != 0) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		out->series[i] = st;
	}
out:
	sm_free(x.v);
	sm_free(x.rec);
	sm_oatab_fini(&x.tab);
	sm_selector_fini(&ss);
	return (rv);
}

/* Whether stat st (detail: t and count, sorted by t) has `want` uploads
 * at t; *got what it has. */
static bool
check_bucket(const Smolder__V1__SeriesStat *st, int64_t t, uint32_t want,
    uint32_t *got)
{
	size_t lo;

	*got = 0;
	if (st != NULL) {
		SM_LOWER_BOUND(lo, st->n_t, mid, st->t[mid] < t);
		if (lo < st->n_t && st->t[lo] == t && lo < st->n_count)
			*got = st->count[lo];
	}
	return (*got == want);
}

int
ing_db_picks_check(struct ing_db *db, const struct ing_query *q,
    struct sm_err *err)
{
	Smolder__V1__StatsResponse out;
	struct ing_query cq;
	struct ing_pick *pk = NULL;
	uint64_t *fps = NULL;
	struct sm_arena *a = NULL;
	size_t n = 0;
	int rv = 0;

	for (size_t i = 0; i < q->sel.npicks; i++)
		n += q->sel.picks[i].count != NULL ||
		    q->sel.picks[i].neg_count != NULL;
	if (n == 0)
		return (0);
	if ((pk = sm_malloc(n * sizeof(*pk))) == NULL ||
	    (fps = sm_malloc(n * sizeof(*fps))) == NULL ||
	    (a = sm_arena_create(0)) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	n = 0;
	for (size_t i = 0; i < q->sel.npicks; i++) {
		if (q->sel.picks[i].count == NULL &&
		    q->sel.picks[i].neg_count == NULL)
			continue;
		pk[n] = q->sel.picks[i];
		fps[n] = pk[n].fp;
		n++;
	}
	/* The same select over the checked series only, read as the plan's
	 * stats round read them (per-bucket counts at the query's
	 * resolutions). */
	memset(&cq, 0, sizeof(cq));
	cq.sel = q->sel;
	cq.sel.picked = true;
	cq.sel.picks = pk;
	cq.sel.npicks = n;
	cq.detail = fps;
	cq.ndetail = n;
	if ((rv = ing_db_series_stats(db, &cq, a, &out, err)) != 0)
		goto out;
	for (size_t i = 0, j = 0; i < n && rv == 0; i++) {
		const Smolder__V1__SeriesStat *st;
		char ts[32];
		uint32_t got = 0;

		while (j < out.n_series && out.series[j]->fp < pk[i].fp)
			j++;
		st = j < out.n_series && out.series[j]->fp == pk[i].fp ?
		    out.series[j] : NULL;
		for (size_t k = 0; k < pk[i].nt + pk[i].nneg; k++) {
			bool neg = k >= pk[i].nt;
			size_t x = neg ? k - pk[i].nt : k;
			const uint32_t *want = neg ? pk[i].neg_count :
			    pk[i].count;
			int64_t t = neg ? pk[i].neg[x] : pk[i].t[x];

			if (want == NULL || want[x] == 0 ||
			    check_bucket(st, t, want[x], &got))
				continue;
			rv = sm_err_set(err, SM_EAGAIN, "changed since the "
			    "plan: series %016llx holds %u uploads in its "
			    "bucket at %s where the plan counted %u (a write "
			    "or a hint landed meanwhile); plan again",
			    (unsigned long long)pk[i].fp, got,
			    sm_time_utc(t, ts, sizeof(ts)), want[x]);
			break;
		}
	}
out:
	sm_arena_destroy(a);
	sm_free(fps);
	sm_free(pk);
	return (rv);
}

/* --- labels --------------------------------------------------------------- */

/*
 * Distinct strings (names or values) or distinct restricted label sets,
 * collected across sources.  Strings are interned in `names`; label sets
 * are kept as arrays of interned ids keyed by their fingerprint.
 */
struct labels_acc {
	const struct ing_query *q;
	struct sm_strtab names;          /* collected strings */
	struct lset {
		uint64_t fp;
		uint32_t *ids;               /* 2 * n interned ids */
		uint32_t n;
		uint32_t meta[3];            /* spy, units, aggregation ids */
		uint32_t rate;
	} *sets;
	uint32_t nsets, sets_cap;
	struct sm_oatab tab;             /* set index by sm_hash_u64(fp) */
};

/* The index of label set (fp, ids, n), or SM_OATAB_NONE with `it` where
 * it would go.  A hash table, so SERIES_LABELS is linear in the series it
 * reads (a scan of every set collected so far made 40k series take 48 s). */
static uint32_t
lset_find(const struct labels_acc *x, uint64_t fp, const uint32_t *ids,
    uint32_t n, struct sm_oatab_it *it)
{
	uint32_t k;

	for (sm_oatab_probe(&x->tab, sm_hash_u64(fp), it);
	    (k = sm_oatab_next(&x->tab, it)) != SM_OATAB_NONE;) {
		const struct lset *o = &x->sets[k];

		if (o->fp == fp && o->n == n &&
		    memcmp(o->ids, ids, (size_t)n * 8) == 0)
			return (k);
	}
	return (SM_OATAB_NONE);
}

static bool
label_wanted(const struct ing_query *q, const char *name)
{
	if (q->nlabel_names == 0)
		return (true);
	for (size_t i = 0; i < q->nlabel_names; i++) {
		if (strcmp(q->label_names[i], name) == 0)
			return (true);
	}
	return (false);
}

static int
labels_series(struct labels_acc *x, const struct ing_set *s,
    const struct ing_series *sr)
{
	const struct ing_query *q = x->q;
	struct sm_oatab_it it;
	struct lset ls;
	uint32_t k = 0, tmp[2 * 64];
	int rv;

	switch (q->kind) {
	case ING_LABEL_NAMES:
		for (uint32_t i = 0; i < sr->nlabels; i++) {
			if ((rv = sm_strtab_intern(&x->names,
			    sr->labels[i].name, strlen(sr->labels[i].name),
			    &k)) != 0)
				return (rv);
		}
		return (0);
	case ING_LABEL_VALUES: {
		const char *v = sm_labels_get(sr->labels, sr->nlabels,
		    q->name != NULL ? q->name : "");

		if (v == NULL)
			return (0);
		return (sm_strtab_intern(&x->names, v, strlen(v), &k));
	}
	default:
		break;
	}
	/* A restricted label set. */
	memset(&ls, 0, sizeof(ls));
	for (uint32_t i = 0; i < sr->nlabels && ls.n < 64; i++) {
		if (!label_wanted(q, sr->labels[i].name))
			continue;
		if ((rv = sm_strtab_intern(&x->names, sr->labels[i].name,
		    strlen(sr->labels[i].name), &tmp[2 * ls.n])) != 0 ||
		    (rv = sm_strtab_intern(&x->names, sr->labels[i].value,
		    strlen(sr->labels[i].value), &tmp[2 * ls.n + 1])) != 0)
			return (rv);
		ls.n++;
	}
	ls.fp = sm_hash(tmp, (size_t)ls.n * 2 * sizeof(uint32_t));
	/* Room first: the probe below then ends where the insert goes. */
	if ((rv = sm_oatab_reserve(&x->tab, x->nsets + 1)) != 0)
		return (rv);
	if (lset_find(x, ls.fp, tmp, ls.n, &it) != SM_OATAB_NONE)
		return (0);
	{
		const char *m[3] = { ing_set_str(s, sr->meta.spy),
			ing_set_str(s, sr->meta.units),
			ing_set_str(s, sr->meta.aggregation) };

		for (int j = 0; j < 3; j++) {
			if ((rv = sm_strtab_intern(&x->names, m[j],
			    strlen(m[j]), &ls.meta[j])) != 0)
				return (rv);
		}
	}
	ls.rate = sr->meta.sample_rate;
	if (SM_GROW(x->sets, x->sets_cap, x->nsets + 1, 16) != 0)
		return (SM_ENOMEM);
	if ((ls.ids = sm_malloc((size_t)SM_MAX(ls.n, 1) * 8)) == NULL)
		return (SM_ENOMEM);
	memcpy(ls.ids, tmp, (size_t)ls.n * 8);
	rv = sm_oatab_insert(&x->tab, &it, x->nsets);   /* reserved: 0 */
	SM_ASSERT(rv == 0);
	x->sets[x->nsets++] = ls;
	return (0);
}

static int
labels_each(void *arg, const struct visit_src *src, uint32_t id,
    const struct ing_series *sr, const struct ing_pick *pk,
    struct sm_err *err)
{
	return (labels_series(arg, src->s, sr));
}

static int
str_cmp(const void *a, const void *b)
{
	return (strcmp(*(char *const *)a, *(char *const *)b));
}

static int
lset_cmp(const void *a, const void *b, void *arg)
{
	const struct lset *x = a, *y = b;
	const struct sm_strtab *t = arg;

	for (uint32_t i = 0; i < 2 * x->n && i < 2 * y->n; i++) {
		int c = strcmp(sm_strtab_str(t, x->ids[i], NULL),
		    sm_strtab_str(t, y->ids[i], NULL));

		if (c != 0)
			return (c);
	}
	return (SM_CMP(x->n, y->n));
}

static int
labels_output(struct labels_acc *x, struct sm_arena *a,
    Smolder__V1__LabelsResponse *out)
{
	const struct sm_strtab *t = &x->names;

	if (x->q->kind != ING_SERIES_LABELS) {
		/* Every interned string but "" (id 0) is an answer. */
		uint32_t n = t->n > 0 ? t->n - 1 : 0;

		out->names = sm_arena_alloc(a, (size_t)SM_MAX(n, 1) *
		    sizeof(char *));
		if (out->names == NULL)
			return (SM_ENOMEM);
		for (uint32_t i = 0; i < n; i++) {
			if ((out->names[i] = sm_arena_strndup(a,
			    t->strs[i + 1].p, t->strs[i + 1].len)) == NULL)
				return (SM_ENOMEM);
		}
		/* An empty value is a real answer for LABEL_VALUES only if
		 * some series carries it, which labels cannot: drop it. */
		if (n > 0)
			qsort(out->names, n, sizeof(char *), str_cmp);
		out->n_names = n;
		return (0);
	}
	if (x->nsets > 0)
		qsort_r(x->sets, x->nsets, sizeof(*x->sets), lset_cmp,
		    (void *)&x->names);
	out->series = sm_arena_alloc(a, (size_t)SM_MAX(x->nsets, 1) *
	    sizeof(*out->series));
	out->meta = sm_arena_alloc(a, (size_t)SM_MAX(x->nsets, 1) *
	    sizeof(*out->meta));
	if (out->series == NULL || out->meta == NULL)
		return (SM_ENOMEM);
	for (uint32_t i = 0; i < x->nsets; i++) {
		const struct lset *ls = &x->sets[i];
		Types__V1__Labels *l = sm_arena_alloc(a, sizeof(*l));
		Smolder__V1__SeriesMeta *m = sm_arena_alloc(a, sizeof(*m));

		if (l == NULL || m == NULL)
			return (SM_ENOMEM);
		types__v1__labels__init(l);
		smolder__v1__series_meta__init(m);
		l->n_labels = ls->n;
		l->labels = sm_arena_alloc(a, (size_t)SM_MAX(ls->n, 1) *
		    sizeof(*l->labels));
		if (l->labels == NULL)
			return (SM_ENOMEM);
		for (uint32_t j = 0; j < ls->n; j++) {
			Types__V1__LabelPair *lp = sm_arena_alloc(a,
			    sizeof(*lp));
			uint32_t nl, vl;
			const char *nm = sm_strtab_str(t, ls->ids[2 * j], &nl);
			const char *vv = sm_strtab_str(t, ls->ids[2 * j + 1],
			    &vl);

			if (lp == NULL)
				return (SM_ENOMEM);
			types__v1__label_pair__init(lp);
			lp->name = sm_arena_strndup(a, nm, nl);
			lp->value = sm_arena_strndup(a, vv, vl);
			if (lp->name == NULL || lp->value == NULL)
				return (SM_ENOMEM);
			l->labels[j] = lp;
		}
		m->spy_name = sm_arena_strndup(a, sm_strtab_str(t,
		    ls->meta[0], NULL), strlen(sm_strtab_str(t, ls->meta[0],
		    NULL)));
		m->units = sm_arena_strndup(a, sm_strtab_str(t, ls->meta[1],
		    NULL), strlen(sm_strtab_str(t, ls->meta[1], NULL)));
		m->aggregation = sm_arena_strndup(a, sm_strtab_str(t,
		    ls->meta[2], NULL), strlen(sm_strtab_str(t, ls->meta[2],
		    NULL)));
		m->sample_rate = ls->rate;
		if (m->spy_name == NULL || m->units == NULL ||
		    m->aggregation == NULL)
			return (SM_ENOMEM);
		out->series[i] = l;
		out->meta[i] = m;
	}
	out->n_series = out->n_meta = x->nsets;
	return (0);
}

int
ing_db_labels(struct ing_db *db, const struct ing_query *q,
    struct sm_arena *a, Smolder__V1__LabelsResponse *out, struct sm_err *err)
{
	struct ing_query fq = *q;
	const struct ing_select *sel = &fq.sel;
	struct labels_acc x;
	struct sm_selector ss;
	struct visitor v;
	int rv;

	smolder__v1__labels_response__init(out);
	if (q->all_time && ing_db_floor(db, sel->tenant) != INT64_MIN) {
		/* All time above the retention floor (halved bound as in
		 * analyze): a range, so hidden head data stays hidden. */
		fq.sel.start_ms = ing_db_floor(db, sel->tenant);
		fq.sel.end_ms = INT64_MAX / 2;
		if (fq.sel.end_ms < fq.sel.start_ms)
			fq.sel.end_ms = fq.sel.start_ms;
		fq.all_time = false;
	} else if (!q->all_time) {
		ing_select_floor(db, &fq.sel);
	}
	q = &fq;
	memset(&x, 0, sizeof(x));
	x.q = q;
	if (sm_strtab_init(&x.names) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((rv = selector_from_select(sel, &ss, err)) != 0)
		goto out_names;
	/* Picks are ignored; all_time: no time filter (start > end). */
	v = (struct visitor){ .db = db, .tenant = sel->tenant, .ss = &ss,
		.start = q->all_time ? 1 : sel->start_ms,
		.end = q->all_time ? 0 : sel->end_ms,
		.each = labels_each, .arg = &x };
	rv = visit_sources(&v, NULL, sel->start_ms, sel->end_ms, q->all_time,
	    err);
	if (rv == 0)
		rv = labels_output(&x, a, out);
	if (rv == SM_ENOMEM)
		sm_err_set(err, rv, "out of memory");
	sm_selector_fini(&ss);
out_names:
	for (uint32_t i = 0; i < x.nsets; i++)
		sm_free(x.sets[i].ids);
	sm_free(x.sets);
	sm_oatab_fini(&x.tab);
	sm_strtab_fini(&x.names);
	return (rv);
}

/* --- analyze (querier AnalyzeQuery, GetProfileStats) ---------------------- */

/*
 * Per-source index statistics of a selection: every head and block is
 * read through its index only (bucket summaries: profiles and pair
 * counts), never its data.  Series are accumulated per kind of source
 * (heads, blocks) by fingerprint; a series split over several heads or
 * blocks is summed.
 */
struct an_ser {
	uint64_t fp, profiles, samples;
};

struct an_acc {
	struct an_ser *v;
	uint32_t n, cap;
};

static int
an_add(struct an_acc *x, uint64_t fp, uint64_t profiles, uint64_t samples)
{
	if (SM_GROW(x->v, x->cap, x->n + 1, 64) != 0)
		return (SM_ENOMEM);
	x->v[x->n++] = (struct an_ser){ fp, profiles, samples };
	return (0);
}

static int
an_cmp(const void *a, const void *b)
{
	const struct an_ser *x = a, *y = b;

	return (SM_CMP(x->fp, y->fp));
}

/* Sorted by fp, equal fps summed, as response entries in `a`. */
static int
an_output(struct an_acc *x, struct sm_arena *a,
    Smolder__V1__AnalyzeSeries ***out, size_t *nout)
{
	uint32_t k = 0;

	if (x->n > 1)
		qsort(x->v, x->n, sizeof(*x->v), an_cmp);
	for (uint32_t i = 0; i < x->n; i++) {
		if (k > 0 && x->v[k - 1].fp == x->v[i].fp) {
			x->v[k - 1].profiles += x->v[i].profiles;
			x->v[k - 1].samples += x->v[i].samples;
		} else {
			x->v[k++] = x->v[i];
		}
	}
	if ((*out = sm_arena_alloc(a, (size_t)SM_MAX(k, 1) *
	    sizeof(**out))) == NULL)
		return (SM_ENOMEM);
	for (uint32_t i = 0; i < k; i++) {
		Smolder__V1__AnalyzeSeries *s = sm_arena_alloc(a, sizeof(*s));

		if (s == NULL)
			return (SM_ENOMEM);
		smolder__v1__analyze_series__init(s);
		s->fp = x->v[i].fp;
		s->profiles = x->v[i].profiles;
		s->samples = x->v[i].samples;
		(*out)[i] = s;
	}
	*nout = k;
	return (0);
}

/* One analyze: per kind of source, its series; the source's match. */
struct an_ctx {
	struct an_acc heads, blocks;
	int64_t start, end;
	bool matched;                    /* the source has a series in range */
	Smolder__V1__AnalyzeResponse *out;
};

/*
 * One selected series into its kind's accumulator; a head's pair memory
 * of its buckets in range into out->head_bytes; out->min_t / max_t are
 * widened.
 */
static int
an_each(void *arg, const struct visit_src *src, uint32_t id,
    const struct ing_series *sr, const struct ing_pick *pk,
    struct sm_err *err)
{
	struct an_ctx *x = arg;
	Smolder__V1__AnalyzeResponse *out = x->out;
	struct ing_bucket_it it;
	const struct ing_bucket *b;
	uint64_t profiles = 0, samples = 0;
	uint32_t nsp = 0;

	ing_bucket_it_init(&it, sr, src->bucket_ms, x->start, x->end);
	while ((b = ing_bucket_it_next(&it)) != NULL) {
		int64_t ft;

		if (!ing_res_bucket(src->res, src->m, b->t, &ft))
			continue;
		profiles += b->profiles;
		samples += b->n;
		if (b->spilled)
			nsp++;
		else if (src->h != NULL)
			out->head_bytes += ing_bucket_data_bytes(b);
		if (!out->any || ft < out->min_t)
			out->min_t = ft;
		if (!out->any || ft > out->max_t)
			out->max_t = ft;
		out->any = true;
	}
	/* Spilled summaries keep no packed_len (set.h): their share of the
	 * series' spilled bytes, exact when the range has them all. */
	if (nsp > 0)
		out->head_bytes += nsp == sr->sp.n ? sr->sp.bytes :
		    sr->sp.bytes * nsp / sr->sp.n;
	if (profiles == 0)
		return (0);
	x->matched = true;
	return (an_add(src->h != NULL ? &x->heads : &x->blocks, sr->fp,
	    profiles, samples));
}

/* A source with a matched series counts as a head or block that has it. */
static int
an_finish(void *arg, const struct visit_src *src, int rv, struct sm_err *err)
{
	struct an_ctx *x = arg;

	if (rv == 0 && x->matched) {
		if (src->h != NULL) {
			x->out->heads++;
		} else {
			x->out->blocks++;
			x->out->block_bytes += src->m->bytes;
		}
	}
	x->matched = false;
	return (rv);
}

int
ing_db_analyze(struct ing_db *db, const struct ing_query *q,
    struct sm_arena *a, Smolder__V1__AnalyzeResponse *out, struct sm_err *err)
{
	struct ing_select fsel = q->sel;
	const struct ing_select *sel = &fsel;
	struct an_ctx x = { 0 };
	struct visitor v;
	struct sm_selector ss;
	int64_t start, end;
	int rv;

	smolder__v1__analyze_response__init(out);
	out->bucket_ms = db->cfg.bucket_ms;
	if (!q->all_time && sel->end_ms <= sel->start_ms)
		return (sm_err_set(err, SM_EINVAL, "analyze: bad range"));
	if (q->all_time) {
		/* Everything above the retention floor (halved bounds keep
		 * bucket arithmetic from overflowing). */
		start = SM_MAX(ing_db_floor(db, sel->tenant), INT64_MIN / 2);
		end = INT64_MAX / 2;
	} else {
		ing_select_floor(db, &fsel);
		start = sel->start_ms;
		end = sel->end_ms;
		if (end <= start)
			return (0);   /* all of it is past retention */
	}
	if ((rv = selector_from_select(sel, &ss, err)) != 0)
		return (rv);
	x.start = start;
	x.end = end;
	x.out = out;
	v = (struct visitor){ .db = db, .tenant = sel->tenant, .ss = &ss,
		.start = start, .end = end, .each = an_each,
		.finish = an_finish, .arg = &x };
	rv = visit_sources(&v, sel, start, end, q->all_time, err);
	if (rv == 0 && ((rv = an_output(&x.heads, a, &out->head_series,
	    &out->n_head_series)) != 0 || (rv = an_output(&x.blocks, a,
	    &out->block_series, &out->n_block_series)) != 0))
		rv = SM_ENOMEM;
	if (rv == SM_ENOMEM)
		sm_err_set(err, rv, "out of memory");
	sm_selector_fini(&ss);
	sm_free(x.heads.v);
	sm_free(x.blocks.v);
	return (rv);
}

/* --- span merge (spans.h) ------------------------------------------------- */

/*
 * The selected (and picked) series of the source being visited, sorted by
 * fp, with their picks; and the span merge they are for.
 */
struct span_sel {
	uint64_t *fp;
	const struct ing_pick **pk;
	uint32_t n;
	int64_t start, end, bucket_ms;
	struct ing_db *db;
	const char *tenant;
	const struct ing_query *q;
	const struct ing_select *sel;
	struct sm_mtree *mt;
};

static void
span_sel_fini(struct span_sel *x)
{
	sm_free(x->fp);
	sm_free(x->pk);
}

static int
span_want(void *arg, uint64_t fp, int64_t t)
{
	const struct span_sel *x = arg;
	uint32_t i;

	if (!(t < x->end && t + x->bucket_ms > x->start))
		return (0);
	i = sm_u64_lower_bound(x->fp, x->n, fp);
	return (i < x->n && x->fp[i] == fp ? pick_sign(x->pk[i], t) : 0);
}

/* A source without span samples is passed over before its select. */
static bool
span_skip(void *arg, const struct visit_src *src)
{
	return (src->h != NULL ? src->h->spans.n == 0 : src->m->nspans == 0);
}

static int
span_begin(void *arg, const struct visit_src *src, uint32_t n,
    struct sm_err *err)
{
	struct span_sel *x = arg;

	if (n == 0)
		return (VISIT_SKIP);
	span_sel_fini(x);
	x->bucket_ms = src->bucket_ms;
	x->fp = sm_malloc((size_t)n * sizeof(*x->fp));
	x->pk = sm_malloc((size_t)n * sizeof(*x->pk));
	x->n = 0;
	return (x->fp == NULL || x->pk == NULL ? SM_ENOMEM : 0);
}

/* A picked series (the visitor applied the picks). */
static int
span_each(void *arg, const struct visit_src *src, uint32_t id,
    const struct ing_series *sr, const struct ing_pick *pk,
    struct sm_err *err)
{
	struct span_sel *x = arg;

	x->fp[x->n++] = sr->fp;
	return (0);
}

/* Sum the source's span samples of the selected series and buckets. */
static int
span_finish(void *arg, const struct visit_src *src, int rv,
    struct sm_err *err)
{
	struct span_sel *x = arg;
	const struct ing_block_tree *tree = NULL;
	struct ing_cache_ent *te = NULL;
	struct ing_span_rec *sp = NULL;
	struct ing_head *h = src->h;
	int64_t *acc = NULL;
	uint32_t nsp = 0;

	if (rv != 0)
		return (rv);
	qsort(x->fp, x->n, sizeof(*x->fp), sm_u64_cmp);
	for (uint32_t i = 0; i < x->n; i++) {
		const struct ing_pick *pk;

		series_picked(x->sel, x->fp[i], &pk);
		x->pk[i] = pk;
	}
	if (h != NULL) {
		if ((acc = sm_calloc(h->tree.n, sizeof(*acc))) == NULL)
			return (SM_ENOMEM);
		x->mt->profiles += ing_spans_sum(h->spans.v, h->spans.n, false,
		    x->q->span_ids, x->q->nspan_ids, span_want, x, acc);
		rv = sm_mtree_add_tree(x->mt, h->tree.parent, h->tree.name,
		    h->tree.n, acc, h->frames.strs, h->frames.n, err);
		sm_free(acc);
		return (rv);
	}
	if (x->n == 0)
		return (0);
	if ((rv = ing_store_block_spans(x->db->store, x->tenant, src->m, &sp,
	    &nsp, err)) != 0 ||
	    (rv = ing_store_block_tree(x->db->store, x->tenant, src->m, &tree,
	    &te, err)) != 0)
		goto out;
	if ((acc = sm_calloc(tree->n, sizeof(*acc))) == NULL) {
		rv = SM_ENOMEM;
		goto out;
	}
	x->mt->profiles += ing_spans_sum(sp, nsp, true, x->q->span_ids,
	    x->q->nspan_ids, span_want, x, acc);
	rv = sm_mtree_add_tree(x->mt, tree->parent, tree->name, tree->n, acc,
	    tree->frames, tree->nframes, err);
	if (rv == SM_ECORRUPT)
		sm_err_prefix(err, "block %s/%llu", x->tenant,
		    (unsigned long long)src->m->gen);
out:
	sm_free(acc);
	sm_free(sp);
	if (te != NULL)
		ing_store_release(x->db->store, te);
	return (rv);
}

int
ing_db_span_merge(struct ing_db *db, const struct ing_query *q,
    struct sm_arena *a, Smolder__V1__MergeResponse *out, struct sm_err *err)
{
	struct ing_select fsel = q->sel;
	const struct ing_select *sel = &fsel;
	struct sm_selector ss;
	struct sm_mtree mt;
	struct span_sel x;
	struct visitor v;
	int rv;

	smolder__v1__merge_response__init(out);
	for (size_t i = 1; i < q->nspan_ids; i++) {
		if (q->span_ids[i - 1] >= q->span_ids[i])
			return (sm_err_set(err, SM_EMALFORMED, "span merge: "
			    "span ids not sorted and unique"));
	}
	ing_select_floor(db, &fsel);
	if ((rv = selector_from_select(sel, &ss, err)) != 0)
		return (rv);
	if (sm_mtree_init(&mt) != 0) {
		sm_selector_fini(&ss);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	if (q->nspan_ids == 0)
		goto done;
	x = (struct span_sel){ .start = sel->start_ms, .end = sel->end_ms,
		.db = db, .tenant = sel->tenant, .q = q, .sel = sel,
		.mt = &mt };
	/* No yield: span_finish reads h->spans.v (the visitor's comment). */
	v = (struct visitor){ .db = db, .tenant = sel->tenant, .ss = &ss,
		.picks = sel, .start = sel->start_ms, .end = sel->end_ms,
		.no_yield = true, .skip = span_skip, .begin = span_begin,
		.each = span_each, .finish = span_finish, .arg = &x };
	rv = visit_sources(&v, NULL, sel->start_ms, sel->end_ms, 0, err);
	span_sel_fini(&x);
	if (rv == SM_ENOMEM)
		sm_err_set(err, rv, "out of memory");
done:
	if (rv == 0 && (rv = sm_mtree_to_pb(&mt, a, out)) == 0) {
		for (size_t i = 0; i < out->tree->n_strings && rv == 0; i++) {
			const struct sm_str *s = &mt.names.strs[i];

			if ((out->tree->strings[i] = sm_arena_strndup(a, s->p,
			    s->len)) == NULL)
				rv = SM_ENOMEM;
		}
		out->n_meta = 0;
		if (rv != 0)
			sm_err_set(err, rv, "out of memory");
	}
	sm_mtree_fini(&mt);
	sm_selector_fini(&ss);
	return (rv);
}

/* --- individual profiles (profiles.h) ------------------------------------ */

#define PROFILES_MAX_DEFAULT 1000000u

struct prof_out {
	struct ing_prof_rec r;
	int64_t bt;                    /* bucket start */
};

static int
prof_out_cmp(const void *a, const void *b)
{
	return (ing_prof_cmp(&((const struct prof_out *)a)->r,
	    &((const struct prof_out *)b)->r));
}

struct prof_acc {
	const struct ing_query *q;
	const struct ing_select *sel;
	struct sm_arena *a;
	uint32_t max;
	struct prof_out *v;
	uint32_t n, cap;
	Smolder__V1__SeriesGroup **g;
	uint32_t ng, gcap;
	uint64_t *fp;                  /* scratch: this source's series */
	uint32_t nf;
	struct ing_db *db;
	const struct ing_prof_rec *rec;  /* the source's records */
	uint32_t nrec;
	struct ing_prof_rec *brec;     /* a block's (owned) */
};

static int
prof_push(struct prof_acc *x, const struct ing_prof_rec *r, int64_t bucket_ms,
    struct sm_err *err)
{
	if (x->n >= x->max)
		return (sm_err_set(err, SM_ELIMIT, "the query selects more "
		    "than %u individual profiles; narrow the range or the "
		    "selector", x->max));
	if (SM_GROW(x->v, x->cap, x->n + 1, 256) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	x->v[x->n].r = *r;
	x->v[x->n++].bt = sm_floor_to(r->t, bucket_ms);
	return (0);
}

/* The group_by labels of series sr, copied into the arena. */
static int
prof_group(struct prof_acc *x, const struct ing_series *sr, struct sm_err *err)
{
	Smolder__V1__SeriesGroup *g;

	if (SM_GROW(x->g, x->gcap, x->ng + 1, 64) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((g = sm_arena_alloc(x->a, sizeof(*g))) == NULL ||
	    (g->labels = NULL, smolder__v1__series_group__init(g),
	    (g->labels = sm_arena_alloc(x->a, (x->q->ngroup_by + 1) *
	    sizeof(*g->labels))) == NULL))
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	g->fp = sr->fp;
	for (size_t k = 0; k < x->q->ngroup_by; k++) {
		for (uint32_t i = 0; i < sr->nlabels; i++) {
			Types__V1__LabelPair *lp;

			if (strcmp(sr->labels[i].name, x->q->group_by[k]) != 0)
				continue;
			if ((lp = sm_arena_alloc(x->a, sizeof(*lp))) == NULL)
				return (sm_err_set(err, SM_ENOMEM, "oom"));
			types__v1__label_pair__init(lp);
			lp->name = sm_arena_strndup(x->a, sr->labels[i].name,
			    strlen(sr->labels[i].name));
			lp->value = sm_arena_strndup(x->a, sr->labels[i].value,
			    strlen(sr->labels[i].value));
			if (lp->name == NULL || lp->value == NULL)
				return (sm_err_set(err, SM_ENOMEM, "oom"));
			g->labels[g->n_labels++] = lp;
			break;
		}
	}
	x->g[x->ng++] = g;
	return (0);
}

/* The source's records: a head's (read under its lock: no yield), or a
 * block's, read from its part. */
static int
prof_begin(void *arg, const struct visit_src *src, uint32_t n,
    struct sm_err *err)
{
	struct prof_acc *x = arg;
	int rv;

	x->nf = 0;
	if (src->h != NULL)     /* a copy: spilled records are read back */
		rv = ing_head_profs(src->h, false, &x->brec, &x->nrec, err);
	else
		rv = ing_store_block_profiles(x->db->store, x->sel->tenant,
		    src->m, &x->brec, &x->nrec, err);
	if (rv != 0)
		return (rv);
	x->rec = x->brec;
	if (n == 0)
		return (VISIT_SKIP);
	sm_free(x->fp);
	if ((x->fp = sm_malloc((size_t)n * sizeof(*x->fp))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	return (0);
}

static int
prof_each(void *arg, const struct visit_src *src, uint32_t id,
    const struct ing_series *sr, const struct ing_pick *pk,
    struct sm_err *err)
{
	struct prof_acc *x = arg;

	x->fp[x->nf++] = sr->fp;
	return (prof_group(x, sr, err));
}

/* Add the source's records of the selected series in range. */
static int
prof_finish(void *arg, const struct visit_src *src, int rv,
    struct sm_err *err)
{
	struct prof_acc *x = arg;
	const struct ing_select *sel = x->sel;

	if (rv == 0) {
		qsort(x->fp, x->nf, sizeof(*x->fp), sm_u64_cmp);
		for (uint32_t i = 0; i < x->nrec && rv == 0; i++) {
			if (x->rec[i].t < sel->start_ms ||
			    x->rec[i].t >= sel->end_ms ||
			    !sm_u64_has(x->fp, x->nf, x->rec[i].fp))
				continue;
			rv = prof_push(x, &x->rec[i], src->bucket_ms, err);
		}
	}
	sm_free(x->brec);
	x->brec = NULL;
	x->rec = NULL;
	x->nrec = 0;
	return (rv);
}

static int
group_fp_cmp(const void *a, const void *b)
{
	const Smolder__V1__SeriesGroup *x = *(Smolder__V1__SeriesGroup *const *)a;
	const Smolder__V1__SeriesGroup *y = *(Smolder__V1__SeriesGroup *const *)b;

	return (SM_CMP(x->fp, y->fp));
}

int
ing_db_profiles(struct ing_db *db, const struct ing_query *q,
    struct sm_arena *a, Smolder__V1__ProfilesResponse *out,
    struct sm_err *err)
{
	struct ing_select fsel = q->sel;
	struct prof_acc x;
	struct visitor v;
	struct sm_selector ss;
	uint32_t w = 0;
	int rv;

	smolder__v1__profiles_response__init(out);
	memset(&x, 0, sizeof(x));
	x.q = q;
	x.a = a;
	x.max = q->max != 0 ? q->max : PROFILES_MAX_DEFAULT;
	x.db = db;
	ing_select_floor(db, &fsel);
	x.sel = &fsel;
	if ((rv = selector_from_select(x.sel, &ss, err)) != 0)
		return (rv);
	/* Picks are ignored.  No yield (the visitor's comment). */
	v = (struct visitor){ .db = db, .tenant = x.sel->tenant, .ss = &ss,
		.start = x.sel->start_ms, .end = x.sel->end_ms,
		.no_yield = true,
		.begin = prof_begin, .each = prof_each, .finish = prof_finish,
		.arg = &x };
	if ((rv = visit_sources(&v, NULL, x.sel->start_ms, x.sel->end_ms, 0,
	    err)) != 0)
		goto done;
	if (x.n > 0)    /* qsort(NULL, 0) is undefined */
		qsort(x.v, x.n, sizeof(*x.v), prof_out_cmp);
	out->profiles = sm_arena_alloc(a, ((size_t)x.n + 1) *
	    sizeof(*out->profiles));
	if (out->profiles == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto done;
	}
	for (uint32_t i = 0; i < x.n; i++) {
		Smolder__V1__ProfileRef *r;

		if (i > 0 && prof_out_cmp(&x.v[i - 1], &x.v[i]) == 0)
			continue;
		if ((r = sm_arena_alloc(a, sizeof(*r))) == NULL ||
		    (r->id.data = NULL, smolder__v1__profile_ref__init(r),
		    (r->id.data = sm_arena_alloc(a, 16)) == NULL)) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto done;
		}
		r->fp = x.v[i].r.fp;
		r->time_ms = x.v[i].r.t;
		r->total = x.v[i].r.total;
		r->bucket_t = x.v[i].bt;
		memcpy(r->id.data, x.v[i].r.id, 16);
		r->id.len = 16;
		out->profiles[out->n_profiles++] = r;
	}
	if (x.ng > 0) {
		qsort(x.g, x.ng, sizeof(*x.g), group_fp_cmp);
		for (uint32_t i = 0; i < x.ng; i++) {
			if (w == 0 || x.g[w - 1]->fp != x.g[i]->fp)
				x.g[w++] = x.g[i];
		}
		out->groups = sm_arena_alloc(a, (size_t)w * sizeof(*x.g));
		if (out->groups == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto done;
		}
		memcpy(out->groups, x.g, (size_t)w * sizeof(*x.g));
		out->n_groups = w;
	}
done:
	sm_free(x.v);
	sm_free(x.g);
	sm_free(x.fp);
	sm_selector_fini(&ss);
	return (rv);
}
