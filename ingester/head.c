/*
 * head.c -- the in-memory head; see head.h for the model and locking.
 */
#include "head.h"

#include <pthread.h>
#include <string.h>

#include "common/hash.h"
#include "common/labels.h"
#include "common/strtab.h"
#include "common/tree.h"

struct ing_bucket {
	int64_t t;
	uint32_t n;
	uint32_t profiles;
	int64_t total;
	uint32_t *node;     /* sorted, heap */
	int64_t *value;
};

struct ing_meta {
	uint32_t spy, units, aggregation;   /* lstr ids */
	uint32_t sample_rate;
};

struct ing_series {
	uint64_t fp;
	struct sm_label *labels;            /* sorted; strings in lstr */
	uint32_t nlabels;
	struct ing_meta meta;
	struct ing_bucket *b;
	uint32_t nb, cap;
};

struct ing_tenant {
	char *id;
	pthread_rwlock_t lock;
	struct sm_strtab frames;
	struct sm_strtab lstr;
	struct sm_tree tree;
	struct ing_series **series;
	uint32_t nseries, series_cap;
	uint32_t *slots;                    /* series idx + 1 by fp */
	uint32_t nslots;
	uint64_t nbuckets;
	uint64_t pair_bytes;
};

struct ing_head {
	pthread_rwlock_t lock;
	struct ing_tenant **t;              /* sorted by id */
	uint32_t n, cap;
	int64_t bucket_ms;
};

/* --- tenants -------------------------------------------------------------- */

int
ing_head_create(int64_t bucket_ms, struct ing_head **out)
{
	struct ing_head *h;

	SM_ASSERT(bucket_ms > 0);
	if ((h = sm_calloc(1, sizeof(*h))) == NULL)
		return (SM_ENOMEM);
	pthread_rwlock_init(&h->lock, NULL);
	h->bucket_ms = bucket_ms;
	*out = h;
	return (0);
}

static void
tenant_free(struct ing_tenant *t)
{
	for (uint32_t i = 0; i < t->nseries; i++) {
		struct ing_series *s = t->series[i];

		for (uint32_t k = 0; k < s->nb; k++) {
			sm_free(s->b[k].node);
			sm_free(s->b[k].value);
		}
		sm_free(s->b);
		sm_free(s->labels);
		sm_free(s);
	}
	sm_free(t->series);
	sm_free(t->slots);
	sm_strtab_fini(&t->frames);
	sm_strtab_fini(&t->lstr);
	sm_tree_fini(&t->tree);
	pthread_rwlock_destroy(&t->lock);
	sm_free(t->id);
	sm_free(t);
}

void
ing_head_destroy(struct ing_head *h)
{
	if (h == NULL)
		return;
	for (uint32_t i = 0; i < h->n; i++)
		tenant_free(h->t[i]);
	sm_free(h->t);
	pthread_rwlock_destroy(&h->lock);
	sm_free(h);
}

/* Binary search; returns the index of `id` or where it would go (*found). */
static uint32_t
tenant_pos(const struct ing_head *h, const char *id, int *found)
{
	uint32_t lo = 0, hi = h->n;

	*found = 0;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		int c = strcmp(h->t[mid]->id, id);

		if (c == 0) {
			*found = 1;
			return (mid);
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (lo);
}

static struct ing_tenant *
tenant_find(struct ing_head *h, const char *id)
{
	struct ing_tenant *t = NULL;
	uint32_t i;
	int found;

	pthread_rwlock_rdlock(&h->lock);
	i = tenant_pos(h, id, &found);
	if (found)
		t = h->t[i];
	pthread_rwlock_unlock(&h->lock);
	return (t);
}

static int
tenant_get(struct ing_head *h, const char *id, struct ing_tenant **out)
{
	struct ing_tenant *t;
	uint32_t i;
	int found, rv = 0;

	if ((*out = tenant_find(h, id)) != NULL)
		return (0);
	pthread_rwlock_wrlock(&h->lock);
	i = tenant_pos(h, id, &found);
	if (found) {
		*out = h->t[i];
		goto out;
	}
	if (h->n == h->cap) {
		uint32_t ncap = h->cap ? h->cap * 2 : 8;
		struct ing_tenant **nt = sm_reallocarray(h->t, ncap,
		    sizeof(*nt));

		if (nt == NULL) {
			rv = SM_ENOMEM;
			goto out;
		}
		h->t = nt;
		h->cap = ncap;
	}
	if ((t = sm_calloc(1, sizeof(*t))) == NULL ||
	    (t->id = sm_strdup(id)) == NULL) {
		sm_free(t);
		rv = SM_ENOMEM;
		goto out;
	}
	pthread_rwlock_init(&t->lock, NULL);
	if (sm_strtab_init(&t->frames) != 0 || sm_strtab_init(&t->lstr) != 0 ||
	    sm_tree_init(&t->tree) != 0) {
		tenant_free(t);
		rv = SM_ENOMEM;
		goto out;
	}
	memmove(&h->t[i + 1], &h->t[i], (size_t)(h->n - i) * sizeof(*h->t));
	h->t[i] = t;
	h->n++;
	*out = t;
out:
	pthread_rwlock_unlock(&h->lock);
	return (rv);
}

/* --- series --------------------------------------------------------------- */

static bool
labels_equal_pb(const struct ing_series *s, Types__V1__LabelPair **lp,
    uint32_t n)
{
	if (s->nlabels != n)
		return (false);
	for (uint32_t i = 0; i < n; i++) {
		if (strcmp(s->labels[i].name, lp[i]->name) != 0 ||
		    strcmp(s->labels[i].value, lp[i]->value) != 0)
			return (false);
	}
	return (true);
}

static int
series_rehash(struct ing_tenant *t, uint32_t nslots)
{
	uint32_t *slots = sm_calloc(nslots, sizeof(*slots));
	uint32_t mask = nslots - 1;

	if (slots == NULL)
		return (SM_ENOMEM);
	for (uint32_t k = 0; k < t->nseries; k++) {
		uint32_t i = (uint32_t)t->series[k]->fp & mask;

		while (slots[i] != 0)
			i = (i + 1) & mask;
		slots[i] = k + 1;
	}
	sm_free(t->slots);
	t->slots = slots;
	t->nslots = nslots;
	return (0);
}

/* Caller holds t->lock exclusively.  Labels arrive sorted (RPC contract). */
static int
series_get(struct ing_tenant *t, Types__V1__LabelPair **lp, uint32_t n,
    const Smolder__V1__SeriesMeta *meta, struct ing_series **out,
    struct sm_err *err)
{
	struct sm_label *ls;
	struct ing_series *s;
	uint32_t mask, i, v, id;
	uint64_t fp;
	int rv;

	if ((ls = sm_calloc(SM_MAX(n, 1), sizeof(*ls))) == NULL)
		return (SM_ENOMEM);
	for (uint32_t k = 0; k < n; k++) {
		if (lp[k]->name == NULL || lp[k]->value == NULL ||
		    (k > 0 && strcmp(lp[k - 1]->name, lp[k]->name) >= 0)) {
			sm_free(ls);
			return (sm_err_set(err, SM_EMALFORMED, "write: series "
			    "labels not sorted and unique"));
		}
		ls[k].name = lp[k]->name;
		ls[k].value = lp[k]->value;
	}
	fp = sm_labels_fingerprint(ls, n);
	if (t->nslots != 0) {
		mask = t->nslots - 1;
		for (i = (uint32_t)fp & mask; (v = t->slots[i]) != 0;
		    i = (i + 1) & mask) {
			s = t->series[v - 1];
			if (s->fp == fp && labels_equal_pb(s, lp, n)) {
				sm_free(ls);
				*out = s;
				return (0);
			}
		}
	}
	/* New series: intern its strings so they live with the tenant. */
	for (uint32_t k = 0; k < n; k++) {
		if ((rv = sm_strtab_intern(&t->lstr, ls[k].name,
		    strlen(ls[k].name), &id)) != 0)
			goto fail;
		ls[k].name = sm_strtab_str(&t->lstr, id, NULL);
		if ((rv = sm_strtab_intern(&t->lstr, ls[k].value,
		    strlen(ls[k].value), &id)) != 0)
			goto fail;
		ls[k].value = sm_strtab_str(&t->lstr, id, NULL);
	}
	if ((s = sm_calloc(1, sizeof(*s))) == NULL) {
		rv = SM_ENOMEM;
		goto fail;
	}
	s->fp = fp;
	s->labels = ls;
	s->nlabels = n;
	if (meta != NULL) {
		const char *m[3] = { meta->spy_name, meta->units,
			meta->aggregation };
		uint32_t *dst[3] = { &s->meta.spy, &s->meta.units,
			&s->meta.aggregation };

		for (int k = 0; k < 3; k++) {
			const char *x = m[k] != NULL ? m[k] : "";

			if ((rv = sm_strtab_intern(&t->lstr, x, strlen(x),
			    dst[k])) != 0) {
				sm_free(s);
				goto fail;
			}
		}
		s->meta.sample_rate = meta->sample_rate;
	}
	if (t->nseries == t->series_cap) {
		uint32_t ncap = t->series_cap ? t->series_cap * 2 : 16;
		struct ing_series **ns = sm_reallocarray(t->series, ncap,
		    sizeof(*ns));

		if (ns == NULL) {
			sm_free(s);
			rv = SM_ENOMEM;
			goto fail;
		}
		t->series = ns;
		t->series_cap = ncap;
	}
	if ((uint64_t)(t->nseries + 1) * 2 > t->nslots &&
	    (rv = series_rehash(t, t->nslots ? t->nslots * 2 : 64)) != 0) {
		sm_free(s);
		goto fail;
	}
	t->series[t->nseries] = s;
	mask = t->nslots - 1;
	for (i = (uint32_t)fp & mask; t->slots[i] != 0; i = (i + 1) & mask)
		;
	t->slots[i] = ++t->nseries;
	*out = s;
	return (0);
fail:
	sm_free(ls);
	return (rv);
}

/* --- buckets ------------------------------------------------------------- */

struct pair {
	uint32_t node;
	int64_t value;
};

static int
pair_cmp(const void *a, const void *b)
{
	const struct pair *x = a, *y = b;

	return (x->node < y->node ? -1 : x->node > y->node);
}

/*
 * Add sorted, unique pairs p[0..n) to the bucket at time t of series s.
 * Caller holds the tenant lock exclusively.
 */
static int
bucket_add(struct ing_tenant *t, struct ing_series *s, int64_t bt,
    const struct pair *p, uint32_t n)
{
	struct ing_bucket *b;
	uint32_t lo = 0, hi = s->nb, i, j, k;
	uint32_t *nn;
	int64_t *nv, sum = 0;

	/* Most writes go to the newest bucket. */
	if (s->nb != 0 && s->b[s->nb - 1].t <= bt) {
		lo = s->b[s->nb - 1].t == bt ? s->nb - 1 : s->nb;
	} else {
		while (lo < hi) {
			uint32_t mid = (lo + hi) / 2;

			if (s->b[mid].t < bt)
				lo = mid + 1;
			else
				hi = mid;
		}
	}
	if (lo == s->nb || s->b[lo].t != bt) {
		if (s->nb == s->cap) {
			uint32_t ncap = s->cap ? s->cap * 2 : 8;
			struct ing_bucket *nb = sm_reallocarray(s->b, ncap,
			    sizeof(*nb));

			if (nb == NULL)
				return (SM_ENOMEM);
			s->b = nb;
			s->cap = ncap;
		}
		nn = sm_malloc((size_t)SM_MAX(n, 1) * sizeof(*nn));
		nv = sm_malloc((size_t)SM_MAX(n, 1) * sizeof(*nv));
		if (nn == NULL || nv == NULL) {
			sm_free(nn);
			sm_free(nv);
			return (SM_ENOMEM);
		}
		for (k = 0; k < n; k++) {
			nn[k] = p[k].node;
			nv[k] = p[k].value;
			sum = sm_add_sat(sum, p[k].value);
		}
		memmove(&s->b[lo + 1], &s->b[lo],
		    (size_t)(s->nb - lo) * sizeof(*s->b));
		b = &s->b[lo];
		b->t = bt;
		b->n = n;
		b->profiles = 1;
		b->total = sum;
		b->node = nn;
		b->value = nv;
		s->nb++;
		t->nbuckets++;
		t->pair_bytes += (uint64_t)n * 12;
		return (0);
	}
	/* Sorted merge into fresh arrays. */
	b = &s->b[lo];
	nn = sm_malloc((size_t)(b->n + n) * sizeof(*nn));
	nv = sm_malloc((size_t)(b->n + n) * sizeof(*nv));
	if (nn == NULL || nv == NULL) {
		sm_free(nn);
		sm_free(nv);
		return (SM_ENOMEM);
	}
	for (i = j = k = 0; i < b->n || j < n; k++) {
		if (j == n || (i < b->n && b->node[i] < p[j].node)) {
			nn[k] = b->node[i];
			nv[k] = b->value[i++];
		} else if (i == b->n || p[j].node < b->node[i]) {
			nn[k] = p[j].node;
			nv[k] = p[j].value;
			sum = sm_add_sat(sum, p[j++].value);
		} else {
			nn[k] = b->node[i];
			nv[k] = sm_add_sat(b->value[i++], p[j].value);
			sum = sm_add_sat(sum, p[j++].value);
		}
	}
	t->pair_bytes += (uint64_t)(k - b->n) * 12;
	sm_free(b->node);
	sm_free(b->value);
	b->node = nn;
	b->value = nv;
	b->n = k;
	b->profiles++;
	b->total = sm_add_sat(b->total, sum);
	return (0);
}

/* --- write ---------------------------------------------------------------- */

int
ing_head_write(struct ing_head *h, const Smolder__V1__WriteRequest *req,
    uint32_t *nseries, uint32_t *npairs, struct sm_err *err)
{
	const Smolder__V1__StackTree *rt = req->tree;
	struct ing_tenant *t;
	uint32_t *smap = NULL, *nmap = NULL, nnodes, nstr;
	struct pair *pairs = NULL;
	size_t pairs_cap = 0;
	int rv;

	*nseries = *npairs = 0;
	if (req->tenant == NULL || req->tenant[0] == '\0')
		return (sm_err_set(err, SM_EMALFORMED, "write: no tenant"));
	if (rt == NULL || rt->n_parent != rt->n_name || rt->n_strings == 0)
		return (sm_err_set(err, SM_EMALFORMED, "write: bad stack tree"));
	nnodes = (uint32_t)rt->n_parent;
	nstr = (uint32_t)rt->n_strings;
	if ((rv = tenant_get(h, req->tenant, &t)) != 0)
		return (sm_err_set(err, rv, "out of memory"));
	smap = sm_malloc((size_t)nstr * sizeof(*smap));
	nmap = sm_malloc(((size_t)nnodes + 1) * sizeof(*nmap));
	if (smap == NULL || nmap == NULL) {
		sm_free(smap);
		sm_free(nmap);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}

	pthread_rwlock_wrlock(&t->lock);
	for (uint32_t i = 0; i < nstr; i++) {
		const char *s = rt->strings[i] != NULL ? rt->strings[i] : "";

		if ((rv = sm_strtab_intern(&t->frames, s, strlen(s),
		    &smap[i])) != 0) {
			sm_err_set(err, rv, "out of memory");
			goto out;
		}
	}
	nmap[0] = 0;
	for (uint32_t i = 0; i < nnodes; i++) {
		uint32_t p = rt->parent[i], nm = rt->name[i];

		if (p > i || nm >= nstr) {
			rv = sm_err_set(err, SM_EMALFORMED, "write: stack tree "
			    "node %u has parent %u / name %u out of range",
			    i + 1, p, nm);
			goto out;
		}
		if ((rv = sm_tree_child(&t->tree, nmap[p], smap[nm],
		    &nmap[i + 1])) != 0) {
			sm_err_set(err, rv, "out of memory");
			goto out;
		}
	}
	for (size_t k = 0; k < req->n_series; k++) {
		const Smolder__V1__SeriesWrite *w = req->series[k];
		struct ing_series *s = NULL;
		uint32_t n;

		if (w->n_node != w->n_value) {
			rv = sm_err_set(err, SM_EMALFORMED, "write: series %zu "
			    "has %zu nodes and %zu values", k, w->n_node,
			    w->n_value);
			goto out;
		}
		n = (uint32_t)w->n_node;
		if (n > pairs_cap) {
			struct pair *np = sm_reallocarray(pairs, n,
			    sizeof(*np));

			if (np == NULL) {
				rv = sm_err_set(err, SM_ENOMEM, "out of memory");
				goto out;
			}
			pairs = np;
			pairs_cap = n;
		}
		for (uint32_t j = 0; j < n; j++) {
			if (w->node[j] == 0 || w->node[j] > nnodes ||
			    w->value[j] <= 0 ||
			    (j > 0 && w->node[j] <= w->node[j - 1])) {
				rv = sm_err_set(err, SM_EMALFORMED, "write: "
				    "series %zu pair %u is invalid", k, j);
				goto out;
			}
			pairs[j].node = nmap[w->node[j]];
			pairs[j].value = w->value[j];
		}
		if (n == 0)
			continue;
		qsort(pairs, n, sizeof(*pairs), pair_cmp);
		if ((rv = series_get(t, w->labels, (uint32_t)w->n_labels,
		    w->meta, &s, err)) != 0) {
			if (rv == SM_ENOMEM)
				sm_err_set(err, rv, "out of memory");
			goto out;
		}
		if ((rv = bucket_add(t, s, sm_floor_to(w->time_ms,
		    h->bucket_ms), pairs, n)) != 0) {
			sm_err_set(err, rv, "out of memory");
			goto out;
		}
		(*nseries)++;
		*npairs += n;
	}
	rv = 0;
out:
	pthread_rwlock_unlock(&t->lock);
	sm_free(smap);
	sm_free(nmap);
	sm_free(pairs);
	return (rv);
}

/* --- queries -------------------------------------------------------------- */

int
ing_selector_from_pb(const Smolder__V1__Select *sel, struct sm_selector *out,
    struct sm_err *err)
{
	int rv;

	sm_selector_init(out);
	for (size_t i = 0; i < sel->n_matchers; i++) {
		const Smolder__V1__Matcher *m = sel->matchers[i];

		if ((int)m->type < 0 || m->type > SMOLDER__V1__MATCH_TYPE__MATCH_NRE ||
		    m->name == NULL || m->value == NULL) {
			sm_selector_fini(out);
			return (sm_err_set(err, SM_EINVAL, "bad matcher %zu", i));
		}
		if ((rv = sm_selector_add(out, (enum sm_match_type)m->type,
		    m->name, m->value, err)) != 0) {
			sm_selector_fini(out);
			return (rv);
		}
	}
	return (0);
}

static inline bool
bucket_overlaps(const struct ing_bucket *b, int64_t w, int64_t start,
    int64_t end)
{
	return (b->t < end && b->t + w > start);
}

/* Index of the first bucket that may overlap [start, ...). */
static uint32_t
bucket_first(const struct ing_series *s, int64_t w, int64_t start)
{
	uint32_t lo = 0, hi = s->nb;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (s->b[mid].t + w <= start)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (lo);
}

#define MERGE_META_MAX 16

int
ing_head_merge(struct ing_head *h, const Smolder__V1__Select *sel,
    struct sm_arena *a, Smolder__V1__MergeResponse *out, struct sm_err *err)
{
	struct sm_selector ss;
	struct ing_tenant *t;
	int64_t *acc = NULL;
	uint32_t *keep = NULL, *smap = NULL;
	uint32_t nnodes, kept = 0, kstr = 0;
	Smolder__V1__StackTree *tree;
	struct ing_meta metas[MERGE_META_MAX];
	uint32_t nmeta = 0;
	uint64_t profiles = 0;
	int rv;

	smolder__v1__merge_response__init(out);
	if ((tree = sm_arena_alloc(a, sizeof(*tree))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	smolder__v1__stack_tree__init(tree);
	out->tree = tree;
	if (sel->tenant == NULL || (t = tenant_find(h, sel->tenant)) == NULL)
		return (0);
	if ((rv = ing_selector_from_pb(sel, &ss, err)) != 0)
		return (rv);

	pthread_rwlock_rdlock(&t->lock);
	nnodes = t->tree.n;
	acc = sm_calloc(nnodes, sizeof(*acc));
	keep = sm_calloc(nnodes, sizeof(*keep));
	smap = sm_calloc(t->frames.n, sizeof(*smap));
	if (acc == NULL || keep == NULL || smap == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t k = 0; k < t->nseries; k++) {
		const struct ing_series *s = t->series[k];
		bool any = false;

		if (!sm_selector_match(&ss, s->labels, s->nlabels))
			continue;
		for (uint32_t bi = bucket_first(s, h->bucket_ms,
		    sel->start_ms); bi < s->nb; bi++) {
			const struct ing_bucket *b = &s->b[bi];

			if (!bucket_overlaps(b, h->bucket_ms, sel->start_ms,
			    sel->end_ms))
				break;
			for (uint32_t j = 0; j < b->n; j++)
				acc[b->node[j]] = sm_add_sat(acc[b->node[j]],
				    b->value[j]);
			profiles += b->profiles;
			any = true;
		}
		if (any) {
			uint32_t m;

			for (m = 0; m < nmeta; m++) {
				if (memcmp(&metas[m], &s->meta,
				    sizeof(s->meta)) == 0)
					break;
			}
			if (m == nmeta && nmeta < MERGE_META_MAX)
				metas[nmeta++] = s->meta;
		}
	}
	/* Keep every node on a path to a node with a value. */
	for (uint32_t i = nnodes; i-- > 1;) {
		if (acc[i] != 0 || keep[i] != 0)
			keep[t->tree.parent[i]] = 1, keep[i] = 1;
	}
	for (uint32_t i = 1; i < nnodes; i++) {
		if (keep[i] != 0) {
			keep[i] = ++kept;
			smap[t->tree.name[i]] = 1;
		}
	}
	smap[0] = 1;
	for (uint32_t i = 0; i < t->frames.n; i++) {
		if (smap[i] != 0)
			smap[i] = ++kstr;
	}
	tree->n_strings = kstr;
	tree->strings = sm_arena_alloc(a, (size_t)kstr * sizeof(char *));
	tree->n_parent = tree->n_name = kept;
	out->n_self = kept;
	tree->parent = sm_arena_alloc(a, (size_t)SM_MAX(kept, 1) * 4);
	tree->name = sm_arena_alloc(a, (size_t)SM_MAX(kept, 1) * 4);
	out->self = sm_arena_alloc(a, (size_t)SM_MAX(kept, 1) * 8);
	if (tree->strings == NULL || tree->parent == NULL ||
	    tree->name == NULL || out->self == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < t->frames.n; i++) {
		if (smap[i] != 0)
			tree->strings[smap[i] - 1] =
			    (char *)sm_strtab_str(&t->frames, i, NULL);
	}
	for (uint32_t i = 1; i < nnodes; i++) {
		uint32_t m = keep[i];

		if (m == 0)
			continue;
		tree->parent[m - 1] = t->tree.parent[i] == 0 ? 0 :
		    keep[t->tree.parent[i]];
		tree->name[m - 1] = smap[t->tree.name[i]] - 1;
		out->self[m - 1] = acc[i];
	}
	out->profiles = profiles;
	out->n_meta = nmeta;
	out->meta = sm_arena_alloc(a, (size_t)SM_MAX(nmeta, 1) *
	    sizeof(*out->meta));
	if (out->meta == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t m = 0; m < nmeta; m++) {
		Smolder__V1__SeriesMeta *sm = sm_arena_alloc(a, sizeof(*sm));

		if (sm == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		smolder__v1__series_meta__init(sm);
		sm->spy_name = (char *)sm_strtab_str(&t->lstr, metas[m].spy,
		    NULL);
		sm->units = (char *)sm_strtab_str(&t->lstr, metas[m].units,
		    NULL);
		sm->aggregation = (char *)sm_strtab_str(&t->lstr,
		    metas[m].aggregation, NULL);
		sm->sample_rate = metas[m].sample_rate;
		out->meta[m] = sm;
	}
	rv = 0;
out:
	pthread_rwlock_unlock(&t->lock);
	sm_selector_fini(&ss);
	sm_free(acc);
	sm_free(keep);
	sm_free(smap);
	return (rv);
}

#define SERIES_MAX_STEPS 1000000
#define SERIES_MAX_GROUPS 10000

struct series_group {
	const char **values;    /* one per group_by label ("" if absent) */
	double *points;         /* per step */
};

int
ing_head_series(struct ing_head *h, const Smolder__V1__SeriesRequest *req,
    struct sm_arena *a, Smolder__V1__SeriesResponse *out, struct sm_err *err)
{
	const Smolder__V1__Select *sel = req->select;
	struct series_group *g = NULL;
	uint32_t ng = 0, gcap = 0, ngb;
	struct sm_selector ss;
	struct ing_tenant *t;
	int64_t step = req->step_ms, first, nsteps;
	int rv = 0;

	smolder__v1__series_response__init(out);
	if (sel == NULL || step <= 0 || sel->end_ms <= sel->start_ms)
		return (sm_err_set(err, SM_EINVAL, "series: bad range or step"));
	first = sm_floor_to(sel->start_ms, step);
	nsteps = (sel->end_ms - first + step - 1) / step;
	if (nsteps > SERIES_MAX_STEPS)
		return (sm_err_set(err, SM_EINVAL, "series: %lld steps exceed "
		    "the limit of %d", (long long)nsteps, SERIES_MAX_STEPS));
	if (sel->tenant == NULL || (t = tenant_find(h, sel->tenant)) == NULL)
		return (0);
	if ((rv = ing_selector_from_pb(sel, &ss, err)) != 0)
		return (rv);
	ngb = (uint32_t)req->n_group_by;

	pthread_rwlock_rdlock(&t->lock);
	for (uint32_t k = 0; k < t->nseries; k++) {
		const struct ing_series *s = t->series[k];
		struct series_group *gr = NULL;
		uint32_t bi;

		if (!sm_selector_match(&ss, s->labels, s->nlabels))
			continue;
		bi = bucket_first(s, h->bucket_ms, sel->start_ms);
		if (bi == s->nb || !bucket_overlaps(&s->b[bi], h->bucket_ms,
		    sel->start_ms, sel->end_ms))
			continue;
		/* Find this series' group (label strings are interned, so
		 * pointer equality is string equality). */
		for (uint32_t gi = 0; gi < ng && gr == NULL; gi++) {
			uint32_t j;

			for (j = 0; j < ngb; j++) {
				const char *v = sm_labels_get(s->labels,
				    s->nlabels, req->group_by[j]);

				if (strcmp(v != NULL ? v : "",
				    g[gi].values[j]) != 0)
					break;
			}
			if (j == ngb)
				gr = &g[gi];
		}
		if (gr == NULL) {
			if (ng == SERIES_MAX_GROUPS) {
				rv = sm_err_set(err, SM_ELIMIT, "series: more "
				    "than %d groups", SERIES_MAX_GROUPS);
				goto out;
			}
			if (ng == gcap) {
				uint32_t ncap = gcap ? gcap * 2 : 8;
				struct series_group *ngp = sm_arena_grow(a, g,
				    ng, ncap, sizeof(*g));

				if (ngp == NULL) {
					rv = sm_err_set(err, SM_ENOMEM, "oom");
					goto out;
				}
				g = ngp;
				gcap = ncap;
			}
			gr = &g[ng++];
			gr->values = sm_arena_alloc(a, (size_t)SM_MAX(ngb, 1) *
			    sizeof(char *));
			gr->points = sm_arena_calloc(a, (size_t)nsteps,
			    sizeof(double));
			if (gr->values == NULL || gr->points == NULL) {
				rv = sm_err_set(err, SM_ENOMEM, "oom");
				goto out;
			}
			for (uint32_t j = 0; j < ngb; j++) {
				const char *v = sm_labels_get(s->labels,
				    s->nlabels, req->group_by[j]);

				gr->values[j] = v != NULL ? v : "";
			}
		}
		for (; bi < s->nb; bi++) {
			const struct ing_bucket *b = &s->b[bi];
			int64_t slot;

			if (!bucket_overlaps(b, h->bucket_ms, sel->start_ms,
			    sel->end_ms))
				break;
			slot = (sm_floor_to(b->t, step) - first) / step;
			if (slot < 0)
				slot = 0;
			if (slot >= nsteps)
				slot = nsteps - 1;
			gr->points[slot] += (double)b->total;
		}
	}
	out->n_series = ng;
	out->series = sm_arena_alloc(a, (size_t)SM_MAX(ng, 1) *
	    sizeof(*out->series));
	if (out->series == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "oom");
		goto out;
	}
	for (uint32_t gi = 0; gi < ng; gi++) {
		Types__V1__Series *se = sm_arena_alloc(a, sizeof(*se));
		size_t np = 0;

		if (se == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "oom");
			goto out;
		}
		types__v1__series__init(se);
		se->n_labels = ngb;
		se->labels = sm_arena_alloc(a, (size_t)SM_MAX(ngb, 1) *
		    sizeof(*se->labels));
		for (int64_t i = 0; i < nsteps; i++)
			np += g[gi].points[i] != 0;
		se->n_points = np;
		se->points = sm_arena_alloc(a, SM_MAX(np, 1) *
		    sizeof(*se->points));
		if (se->labels == NULL || se->points == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "oom");
			goto out;
		}
		for (uint32_t j = 0; j < ngb; j++) {
			Types__V1__LabelPair *lp = sm_arena_alloc(a,
			    sizeof(*lp));

			if (lp == NULL) {
				rv = sm_err_set(err, SM_ENOMEM, "oom");
				goto out;
			}
			types__v1__label_pair__init(lp);
			lp->name = req->group_by[j];
			lp->value = (char *)g[gi].values[j];
			se->labels[j] = lp;
		}
		np = 0;
		for (int64_t i = 0; i < nsteps; i++) {
			Types__V1__Point *pt;

			if (g[gi].points[i] == 0)
				continue;
			if ((pt = sm_arena_alloc(a, sizeof(*pt))) == NULL) {
				rv = sm_err_set(err, SM_ENOMEM, "oom");
				goto out;
			}
			types__v1__point__init(pt);
			pt->timestamp = first + i * step;
			pt->value = g[gi].points[i];
			se->points[np++] = pt;
		}
		out->series[gi] = se;
	}
out:
	pthread_rwlock_unlock(&t->lock);
	sm_selector_fini(&ss);
	return (rv);
}

void
ing_head_stats(struct ing_head *h, struct ing_head_stats *st)
{
	memset(st, 0, sizeof(*st));
	pthread_rwlock_rdlock(&h->lock);
	st->tenants = h->n;
	for (uint32_t i = 0; i < h->n; i++) {
		struct ing_tenant *t = h->t[i];

		pthread_rwlock_rdlock(&t->lock);
		st->series += t->nseries;
		st->nodes += t->tree.n;
		st->buckets += t->nbuckets;
		st->bytes += t->pair_bytes + sm_tree_mem(&t->tree) +
		    sm_strtab_mem(&t->frames) + sm_strtab_mem(&t->lstr);
		pthread_rwlock_unlock(&t->lock);
	}
	pthread_rwlock_unlock(&h->lock);
}
