/*
 * set.c -- series sets and their postings index; see set.h.
 */
#include "set.h"

#include <string.h>

#include "common/hash.h"
#include "common/varint.h"

/* --- index ---------------------------------------------------------------- */

int
ing_index_init(struct ing_index *x)
{
	memset(x, 0, sizeof(*x));
	x->nslots = 64;
	x->keys = sm_calloc(x->nslots, sizeof(*x->keys));
	x->vals = sm_calloc(x->nslots, sizeof(*x->vals));
	if (x->keys == NULL || x->vals == NULL) {
		ing_index_fini(x);
		return (SM_ENOMEM);
	}
	return (0);
}

void
ing_index_fini(struct ing_index *x)
{
	/* Up to the capacities: the spares past nlists / nnames may hold
	 * reserved arrays (ing_set_reserve). */
	for (uint32_t i = 0; i < x->lists_cap; i++)
		sm_free(x->lists[i].ids);
	for (uint32_t i = 0; i < x->names_cap; i++)
		sm_free(x->values[i].ids);
	sm_free(x->lists);
	sm_free(x->values);
	sm_free(x->names);
	sm_free(x->keys);
	sm_free(x->vals);
	memset(x, 0, sizeof(*x));
}

static int
posting_push(struct ing_posting *p, uint32_t id)
{
	if (SM_GROW(p->ids, p->cap, p->n + 1, 4) != 0)
		return (SM_ENOMEM);
	p->ids[p->n++] = id;
	return (0);
}

static inline uint64_t
index_key(uint32_t name, uint32_t value)
{
	return (((uint64_t)name << 32 | value) + 1);
}

/* Slot of key k: where it is, or the empty slot where it would go. */
static uint32_t
index_slot(const struct ing_index *x, uint64_t k)
{
	uint32_t mask = x->nslots - 1, i = (uint32_t)sm_hash_u64(k) & mask;

	while (x->keys[i] != 0 && x->keys[i] != k)
		i = (i + 1) & mask;
	return (i);
}

static int
index_grow(struct ing_index *x)
{
	uint32_t ns = x->nslots * 2, mask = ns - 1;
	uint64_t *keys = sm_calloc(ns, sizeof(*keys));
	uint32_t *vals = sm_calloc(ns, sizeof(*vals));

	if (keys == NULL || vals == NULL) {
		sm_free(keys);
		sm_free(vals);
		return (SM_ENOMEM);
	}
	for (uint32_t j = 0; j < x->nslots; j++) {
		uint32_t i;

		if (x->keys[j] == 0)
			continue;
		i = (uint32_t)sm_hash_u64(x->keys[j]) & mask;
		while (keys[i] != 0)
			i = (i + 1) & mask;
		keys[i] = x->keys[j];
		vals[i] = x->vals[j];
	}
	sm_free(x->keys);
	sm_free(x->vals);
	x->keys = keys;
	x->vals = vals;
	x->nslots = ns;
	return (0);
}

/* Reallocate the array at arrp (a T **, cap elements of elsize bytes) to
 * ncap > cap elements, the new ones zeroed.  0 or SM_ENOMEM (unchanged). */
static int
realloc_zeroed(void *arrp, uint32_t cap, uint32_t ncap, size_t elsize)
{
	void *p;

	/* memcpy: arrp points to a T *, not to a void * (as sm_grow). */
	memcpy(&p, arrp, sizeof(p));
	if ((p = sm_reallocarray(p, ncap, elsize)) == NULL)
		return (SM_ENOMEM);
	memset((char *)p + (size_t)cap * elsize, 0, (size_t)(ncap - cap) *
	    elsize);
	memcpy(arrp, &p, sizeof(p));
	return (0);
}

/* Room for ncap names; the new values[] entries are zeroed (empty). */
static int
index_names_grow(struct ing_index *x, uint32_t ncap)
{
	uint32_t *nn;

	if (ncap <= x->names_cap)
		return (0);
	if ((nn = sm_reallocarray(x->names, ncap, sizeof(*nn))) == NULL)
		return (SM_ENOMEM);
	x->names = nn;
	if (realloc_zeroed(&x->values, x->names_cap, ncap,
	    sizeof(*x->values)) != 0)
		return (SM_ENOMEM);
	x->names_cap = ncap;
	return (0);
}

/* Room for ncap posting lists; the new entries are zeroed (empty). */
static int
index_lists_grow(struct ing_index *x, uint32_t ncap)
{
	if (ncap <= x->lists_cap)
		return (0);
	if (realloc_zeroed(&x->lists, x->lists_cap, ncap,
	    sizeof(*x->lists)) != 0)
		return (SM_ENOMEM);
	x->lists_cap = ncap;
	return (0);
}

static struct ing_posting *
index_name_values(struct ing_index *x, uint32_t name, int create)
{
	for (uint32_t i = 0; i < x->nnames; i++) {
		if (x->names[i] == name)
			return (&x->values[i]);
	}
	if (!create)
		return (NULL);
	if (x->nnames == x->names_cap && index_names_grow(x,
	    x->names_cap ? x->names_cap * 2 : 16) != 0)
		return (NULL);
	/* values[nnames] is empty: zeroed, or a spare with room reserved
	 * by ing_set_reserve (n == 0). */
	x->names[x->nnames] = name;
	return (&x->values[x->nnames++]);
}

int
ing_index_add(struct ing_index *x, uint32_t id, const uint32_t *lid,
    uint32_t n)
{
	int rv;

	for (uint32_t k = 0; k < n; k++) {
		uint64_t key = index_key(lid[2 * k], lid[2 * k + 1]);
		uint32_t i;

		if ((uint64_t)(x->nlists + 1) * 2 > x->nslots &&
		    (rv = index_grow(x)) != 0)
			return (rv);
		i = index_slot(x, key);
		if (x->keys[i] == 0) {
			struct ing_posting *vals;

			if (x->nlists == x->lists_cap && index_lists_grow(x,
			    x->lists_cap ? x->lists_cap * 2 : 32) != 0)
				return (SM_ENOMEM);
			if ((vals = index_name_values(x, lid[2 * k], 1)) ==
			    NULL || posting_push(vals, lid[2 * k + 1]) != 0)
				return (SM_ENOMEM);
			/* lists[nlists] is empty: zeroed, or a spare with
			 * room reserved by ing_set_reserve. */
			x->keys[i] = key;
			x->vals[i] = x->nlists++;
		}
		if ((rv = posting_push(&x->lists[x->vals[i]], id)) != 0)
			return (rv);
	}
	return (0);
}

const struct ing_posting *
ing_index_get(const struct ing_index *x, uint32_t name, uint32_t value)
{
	uint32_t i;

	if (x->nslots == 0)
		return (NULL);
	i = index_slot(x, index_key(name, value));
	return (x->keys[i] == 0 ? NULL : &x->lists[x->vals[i]]);
}

const struct ing_posting *
ing_index_values(const struct ing_index *x, uint32_t name)
{
	return (index_name_values((struct ing_index *)x, name, 0));
}

/* --- sets ----------------------------------------------------------------- */

int
ing_set_init(struct ing_set *s)
{
	memset(s, 0, sizeof(*s));
	s->min_t = INT64_MAX;
	s->max_t = INT64_MIN;
	sm_oatab_init(&s->tab, 64);
	if (sm_strtab_init(&s->lstr) != 0)
		return (SM_ENOMEM);
	if (ing_index_init(&s->index) != 0) {
		sm_strtab_fini(&s->lstr);
		return (SM_ENOMEM);
	}
	return (0);
}

void
ing_set_fini(struct ing_set *s)
{
	for (uint32_t i = 0; i < s->nseries; i++)
		ing_series_free(s->series[i]);
	sm_free(s->series);
	sm_oatab_fini(&s->tab);
	ing_index_fini(&s->index);
	sm_strtab_fini(&s->lstr);
	memset(s, 0, sizeof(*s));
}

int
ing_set_append(struct ing_set *s, struct ing_series *sr)
{
	struct sm_oatab_it it;
	int rv;

	if (s->nseries == s->series_cap) {
		uint32_t ncap = s->series_cap ? s->series_cap * 2 : 16;
		struct ing_series **ns = sm_reallocarray(s->series, ncap,
		    sizeof(*ns));

		if (ns == NULL)
			return (SM_ENOMEM);
		s->series = ns;
		s->series_cap = ncap;
	}
	/* Room first: once the index has the series, inserting cannot fail. */
	if ((rv = sm_oatab_reserve(&s->tab, s->nseries + 1)) != 0)
		return (rv);
	if ((rv = ing_index_add(&s->index, s->nseries, sr->lid,
	    sr->nlabels)) != 0)
		return (rv);
	for (sm_oatab_probe(&s->tab, sr->fp, &it);
	    sm_oatab_next(&s->tab, &it) != SM_OATAB_NONE;)
		;
	rv = sm_oatab_insert(&s->tab, &it, s->nseries);
	SM_ASSERT(rv == 0);
	sr->id = s->nseries;
	s->series[s->nseries++] = sr;
	for (uint32_t k = 0; k < sr->nb; k++) {
		s->min_t = SM_MIN(s->min_t, sr->b[k].t);
		s->max_t = SM_MAX(s->max_t, sr->b[k].t);
	}
	return (0);
}

bool
ing_series_labels_equal(const struct ing_series *sr,
    const struct sm_label *ls, uint32_t n)
{
	if (sr->nlabels != n)
		return (false);
	for (uint32_t i = 0; i < n; i++) {
		if (strcmp(sr->labels[i].name, ls[i].name) != 0 ||
		    strcmp(sr->labels[i].value, ls[i].value) != 0)
			return (false);
	}
	return (true);
}

static int
intern(struct ing_set *s, const char *str, uint32_t *id)
{
	if (str == NULL)
		str = "";
	return (sm_strtab_intern(&s->lstr, str, strlen(str), id));
}

struct ing_series *
ing_set_series_find(const struct ing_set *s, const struct sm_label *ls,
    uint32_t n, uint64_t fp)
{
	struct sm_oatab_it it;
	uint32_t v;

	for (sm_oatab_probe(&s->tab, fp, &it);
	    (v = sm_oatab_next(&s->tab, &it)) != SM_OATAB_NONE;) {
		struct ing_series *sr = s->series[v];

		if (sr->fp == fp && ing_series_labels_equal(sr, ls, n))
			return (sr);
	}
	return (NULL);
}

void
ing_series_free(struct ing_series *sr)
{
	if (sr == NULL)
		return;
	for (uint32_t k = 0; k < sr->nb; k++)
		ing_bucket_pairs_free(&sr->b[k]);
	sm_free(sr->b);
	sm_free(sr->sp.p);
	sm_free(sr->labels);
	sm_free(sr->lid);
	sm_free(sr);
}

int
ing_series_create(struct ing_set *s, const struct sm_label *ls, uint32_t n,
    uint64_t fp, const char *spy, const char *units, const char *aggregation,
    uint32_t sample_rate, struct ing_series **out)
{
	struct ing_series *sr;
	int rv = SM_ENOMEM;

	*out = NULL;
	if ((sr = sm_calloc(1, sizeof(*sr))) == NULL)
		return (SM_ENOMEM);
	sr->fp = fp;
	sr->nlabels = n;
	sr->labels = sm_calloc(SM_MAX(n, 1), sizeof(*sr->labels));
	sr->lid = sm_calloc(SM_MAX(2 * n, 1), sizeof(*sr->lid));
	if (sr->labels == NULL || sr->lid == NULL)
		goto fail;
	for (uint32_t k = 0; k < n; k++) {
		if ((rv = intern(s, ls[k].name, &sr->lid[2 * k])) != 0 ||
		    (rv = intern(s, ls[k].value, &sr->lid[2 * k + 1])) != 0)
			goto fail;
	}
	/* Pointers only after all interning: the table may have grown. */
	for (uint32_t k = 0; k < n; k++) {
		sr->labels[k].name = ing_set_str(s, sr->lid[2 * k]);
		sr->labels[k].value = ing_set_str(s, sr->lid[2 * k + 1]);
	}
	if ((rv = intern(s, spy, &sr->meta.spy)) != 0 ||
	    (rv = intern(s, units, &sr->meta.units)) != 0 ||
	    (rv = intern(s, aggregation, &sr->meta.aggregation)) != 0)
		goto fail;
	sr->meta.sample_rate = sample_rate;
	*out = sr;
	return (0);
fail:
	ing_series_free(sr);
	return (rv);
}

int
ing_set_series(struct ing_set *s, const struct sm_label *ls, uint32_t n,
    const char *spy, const char *units, const char *aggregation,
    uint32_t sample_rate, struct ing_series **out)
{
	uint64_t fp = sm_labels_fingerprint(ls, n);
	struct ing_series *sr;
	int rv;

	if ((sr = ing_set_series_find(s, ls, n, fp)) != NULL) {
		*out = sr;
		return (0);
	}
	if ((rv = ing_series_create(s, ls, n, fp, spy, units, aggregation,
	    sample_rate, &sr)) != 0)
		return (rv);
	if ((rv = ing_set_append(s, sr)) != 0) {
		ing_series_free(sr);
		return (rv);
	}
	*out = sr;
	return (0);
}

/* One label (name, value) of a series ing_set_reserve makes room for. */
struct rsv_key {
	uint64_t key;           /* index_key */
	uint32_t pos;           /* order of appearance */
	uint32_t count;         /* series of the reservation with this key
				 * (on the key's first appearance) */
};

static int
rsv_key_cmp(const void *a, const void *b)
{
	const struct rsv_key *x = a, *y = b;

	return (x->key != y->key ? SM_CMP(x->key, y->key) :
	    SM_CMP(x->pos, y->pos));
}

static int
rsv_pos_cmp(const void *a, const void *b)
{
	const struct rsv_key *x = a, *y = b;

	return (SM_CMP(x->pos, y->pos));
}

/* A label name that gets new values in a reservation. */
struct rsv_name {
	uint32_t name;
	uint32_t vi;            /* its values[] entry (existing or spare);
				 * an index: values[] may move */
	uint32_t nnew;          /* new values so far */
};

/*
 * How ing_index_add will run over these series, replayed without
 * publishing: every posting list it pushes onto gets the room for its
 * pushes; a (name, value) the index lacks will take the next spare list
 * (lists[nlists + j], in order of first appearance) and a name it lacks
 * the next spare values[nnames + q]; the spares get room for exactly
 * their pushes.  Spares stay empty (n == 0) and unpublished, so a
 * reservation that is not followed by the appends changes capacities
 * only.
 */
static int
index_reserve(struct ing_index *x, struct ing_series *const *sr, uint32_t m)
{
	struct rsv_key *keys = NULL;
	struct rsv_name *names = NULL;
	uint32_t nk = 0, nnames = 0, newkeys = 0, newnames = 0;
	int rv = SM_ENOMEM;

	for (uint32_t i = 0; i < m; i++)
		nk += sr[i]->nlabels;
	if (nk == 0)
		return (0);
	keys = sm_malloc((size_t)nk * sizeof(*keys));
	names = sm_malloc((size_t)nk * sizeof(*names));
	if (keys == NULL || names == NULL)
		goto out;
	nk = 0;
	for (uint32_t i = 0; i < m; i++) {
		for (uint32_t k = 0; k < sr[i]->nlabels; k++) {
			keys[nk].key = index_key(sr[i]->lid[2 * k],
			    sr[i]->lid[2 * k + 1]);
			keys[nk].pos = nk;
			keys[nk].count = 0;
			nk++;
		}
	}
	/* Count each key on its first appearance. */
	qsort(keys, nk, sizeof(*keys), rsv_key_cmp);
	for (uint32_t i = 0, j; i < nk; i = j) {
		for (j = i + 1; j < nk && keys[j].key == keys[i].key; j++)
			;
		keys[i].count = j - i;
	}
	qsort(keys, nk, sizeof(*keys), rsv_pos_cmp);
	for (uint32_t i = 0; i < nk; i++) {
		uint32_t name = (uint32_t)((keys[i].key - 1) >> 32);
		const struct ing_posting *have;
		struct ing_posting *p;
		struct rsv_name *nm = NULL;

		if (keys[i].count == 0)
			continue;       /* not the key's first appearance */
		if ((have = ing_index_get(x, name,
		    (uint32_t)(keys[i].key - 1))) != NULL) {
			p = &x->lists[have - x->lists];
			if (SM_GROW(p->ids, p->cap, (size_t)p->n +
			    keys[i].count, 4) != 0)
				goto out;
			continue;
		}
		/* A new key: the next spare list, and a push onto its
		 * name's values. */
		if (index_lists_grow(x, SM_MAX(x->lists_cap,
		    x->nlists + newkeys + 1)) != 0)
			goto out;
		p = &x->lists[x->nlists + newkeys++];
		if (SM_GROW(p->ids, p->cap, keys[i].count, 4) != 0)
			goto out;
		for (uint32_t q = 0; q < nnames; q++) {
			if (names[q].name == name) {
				nm = &names[q];
				break;
			}
		}
		if (nm == NULL) {
			nm = &names[nnames++];
			nm->name = name;
			nm->nnew = 0;
			if ((p = index_name_values(x, name, 0)) != NULL) {
				nm->vi = (uint32_t)(p - x->values);
			} else {
				if (index_names_grow(x, SM_MAX(x->names_cap,
				    x->nnames + newnames + 1)) != 0)
					goto out;
				nm->vi = x->nnames + newnames++;
			}
		}
		nm->nnew++;
		p = &x->values[nm->vi];
		if (SM_GROW(p->ids, p->cap, (size_t)p->n + nm->nnew, 4) != 0)
			goto out;
	}
	/* ing_index_add grows the slots when (nlists + 1) * 2 > nslots,
	 * checked for every label, also after the last new key. */
	while ((uint64_t)(x->nlists + newkeys + 1) * 2 > x->nslots) {
		if (index_grow(x) != 0)
			goto out;
	}
	rv = 0;
out:
	sm_free(keys);
	sm_free(names);
	return (rv);
}

int
ing_set_reserve(struct ing_set *s, struct ing_series *const *sr, uint32_t m)
{
	uint64_t need = (uint64_t)s->nseries + m;

	if (m == 0)
		return (0);
	if (need > UINT32_MAX / 2)
		return (SM_ENOMEM);
	if (need > s->series_cap) {
		uint32_t ncap = s->series_cap ? s->series_cap : 16;
		struct ing_series **ns;

		while (ncap < need)
			ncap *= 2;
		if ((ns = sm_reallocarray(s->series, ncap, sizeof(*ns))) ==
		    NULL)
			return (SM_ENOMEM);
		s->series = ns;
		s->series_cap = ncap;
	}
	if (sm_oatab_reserve(&s->tab, (uint32_t)need) != 0)
		return (SM_ENOMEM);
	return (index_reserve(&s->index, sr, m));
}

uint32_t
ing_buckets_first(const struct ing_bucket *b, uint32_t nb, int64_t bucket_ms,
    int64_t start)
{
	uint32_t lo = 0, hi = nb;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (b[mid].t + bucket_ms <= start)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (lo);
}

/*
 * One matcher's verdicts over one set's strings, for one query: v[id] is 0
 * (not asked yet), 1 (no) or 2 (yes) for the value with lstr id `id`, so
 * each distinct label value is matched once however many series carry it
 * (a regex costs up to SM_RE_MATCH_LIMIT steps per value).  `empty` is
 * the verdict for series without the label (value "").
 */
struct sel_eval {
	const struct sm_matcher *m;
	uint32_t name;          /* lstr id of the label name */
	bool has_name;          /* false: no series here has the label */
	bool empty;
	uint8_t *v;
};

/* 1 or 0 for value id `id` of e's label, or an error (err set). */
static int
eval_value(const struct ing_set *s, struct sel_eval *e, uint32_t id,
    struct sm_err *err)
{
	if (e->v[id] == 0) {
		uint32_t len;
		const char *str = sm_strtab_str(&s->lstr, id, &len);
		int rv = sm_matcher_eval(e->m, str, len, err);

		if (rv < 0)
			return (rv);
		e->v[id] = rv ? 2 : 1;
	}
	return (e->v[id] - 1);
}

/* Union of the postings of the values of e's label that match. */
static int
select_union(const struct ing_set *s, struct sel_eval *e, uint32_t **out,
    uint32_t *n, struct sm_err *err)
{
	const struct ing_posting *vals = ing_index_values(&s->index, e->name);
	uint32_t total = 0, k = 0, w = 0;
	uint32_t *u;
	int rv;

	*out = NULL;
	*n = 0;
	if (vals == NULL)
		return (0);
	for (uint32_t i = 0; i < vals->n; i++) {
		if ((rv = eval_value(s, e, vals->ids[i], err)) < 0)
			return (rv);
		if (rv)
			total += ing_index_get(&s->index, e->name,
			    vals->ids[i])->n;
	}
	if (total == 0)
		return (0);
	if ((u = sm_malloc((size_t)total * sizeof(*u))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t i = 0; i < vals->n; i++) {
		const struct ing_posting *p;

		if (e->v[vals->ids[i]] != 2)
			continue;
		p = ing_index_get(&s->index, e->name, vals->ids[i]);
		memcpy(u + k, p->ids, (size_t)p->n * sizeof(*u));
		k += p->n;
	}
	/* A series has one value per name, so the lists are disjoint. */
	qsort(u, k, sizeof(*u), sm_u32_cmp);
	for (uint32_t i = 0; i < k; i++) {
		if (w == 0 || u[w - 1] != u[i])
			u[w++] = u[i];
	}
	*out = u;
	*n = w;
	return (0);
}

/* a := a ∩ b (both sorted). */
static uint32_t
intersect(uint32_t *a, uint32_t na, const uint32_t *b, uint32_t nb)
{
	uint32_t i = 0, j = 0, w = 0;

	while (i < na && j < nb) {
		if (a[i] < b[j])
			i++;
		else if (a[i] > b[j])
			j++;
		else {
			a[w++] = a[i];
			i++;
			j++;
		}
	}
	return (w);
}

static bool
series_in_range(const struct ing_series *sr, int64_t start, int64_t end,
    int64_t bucket_ms)
{
	struct ing_bucket_it it;

	if (start > end)
		return (true);
	ing_bucket_it_init(&it, sr, bucket_ms, start, end);
	return (ing_bucket_it_next(&it) != NULL);
}

/* Does series sr pass every matcher (verdicts cached in ev)? */
static int
series_passes(const struct ing_set *s, const struct ing_series *sr,
    struct sel_eval *ev, uint32_t nev, struct sm_err *err)
{
	for (uint32_t i = 0; i < nev; i++) {
		struct sel_eval *e = &ev[i];
		int rv = -1;

		if (e->has_name) {
			for (uint32_t j = 0; j < sr->nlabels; j++) {
				if (sr->lid[2 * j] == e->name) {
					rv = eval_value(s, e, sr->lid[2 * j + 1],
					    err);
					break;
				}
			}
		}
		if (rv == -1)
			rv = e->empty;       /* the label is absent: "" */
		if (rv <= 0)
			return (rv);
	}
	return (1);
}

static void
evals_free(struct sel_eval *ev, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		sm_free(ev[i].v);
	sm_free(ev);
}

int
ing_set_select(const struct ing_set *s, const struct sm_selector *sel,
    int64_t start, int64_t end, int64_t bucket_ms, const struct ing_yield *y,
    uint32_t **out, uint32_t *n, struct sm_err *err)
{
	struct sel_eval *ev;
	uint32_t *cand = NULL, ncand = 0, w = 0;
	bool restricted = false;
	int rv;

	*out = NULL;
	*n = 0;
	if (s->nseries == 0)
		return (0);
	/* Once per head or block a query visits (sm.h). */
	if (sm_deadline_passed())
		return (sm_err_set(err, SM_ETIMEDOUT, "the query's deadline "
		    "passed on the ingester"));
	if ((ev = sm_calloc(SM_MAX(sel->n, 1), sizeof(*ev))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t i = 0; i < sel->n; i++) {
		struct sel_eval *e = &ev[i];

		e->m = &sel->m[i];
		e->has_name = sm_strtab_find(&s->lstr, e->m->name,
		    strlen(e->m->name), &e->name) == 0;
		if ((rv = sm_matcher_eval(e->m, "", 0, err)) < 0)
			goto fail;
		e->empty = rv != 0;
		if (!e->has_name && !e->empty)
			goto none;   /* nobody has this label */
		if (e->has_name && (e->v = sm_calloc(SM_MAX(s->lstr.n, 1),
		    1)) == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto fail;
		}
	}
	for (uint32_t i = 0; i < sel->n; i++) {
		struct sel_eval *e = &ev[i];
		uint32_t *u, nu;

		/* Only matchers that exclude the empty value narrow. */
		if (e->empty)
			continue;
		if ((rv = select_union(s, e, &u, &nu, err)) != 0)
			goto fail;
		if (!restricted) {
			cand = u;
			ncand = nu;
			restricted = true;
		} else {
			ncand = intersect(cand, ncand, u, nu);
			sm_free(u);
		}
		if (ncand == 0)
			goto none;
	}
	if (!restricted) {
		if ((cand = sm_malloc((size_t)s->nseries * sizeof(*cand))) ==
		    NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto fail;
		}
		for (uint32_t i = 0; i < s->nseries; i++)
			cand[i] = i;
		ncand = s->nseries;
	}
	for (uint32_t i = 0; i < ncand; i++) {
		const struct ing_series *sr;

		/* The candidates existed before any yield, so their label
		 * ids are below the lstr.n the verdict caches were sized by
		 * (set.h, Yielding). */
		ing_yield(y);
		sr = s->series[cand[i]];
		/* Regular expressions over many series: poll the deadline. */
		if ((i & 4095) == 4095 && sm_deadline_passed()) {
			rv = sm_err_set(err, SM_ETIMEDOUT, "the query's "
			    "deadline passed on the ingester");
			goto fail;
		}
		if ((rv = series_passes(s, sr, ev, sel->n, err)) < 0)
			goto fail;
		if (rv && series_in_range(sr, start, end, bucket_ms))
			cand[w++] = cand[i];
	}
	evals_free(ev, sel->n);
	if (w == 0) {
		sm_free(cand);
		return (0);
	}
	*out = cand;
	*n = w;
	return (0);
none:
	evals_free(ev, sel->n);
	sm_free(cand);
	return (0);
fail:
	evals_free(ev, sel->n);
	sm_free(cand);
	return (rv);
}

/* --- packed buckets ------------------------------------------------------- */

static uint8_t *
put_packed_uv(uint8_t *p, uint64_t v)
{
	return (p + sm_uvarint_put(p, v));
}

int
ing_bucket_pack(struct ing_bucket *b)
{
	uint64_t g = 0;
	uint8_t *buf, *p, *z;
	uint32_t prev = 0;

	if (b->packed != NULL || b->spilled)
		return (0);
	for (uint32_t j = 0; j < b->n && g != 1; j++)
		g = sm_gcd64(sm_abs64(b->value[j]), g);
	/* INT64_MIN / g must stay representable as int64 * g: keep g an
	 * int64. */
	if (g > INT64_MAX)
		g = 1;
	if (g == 0)
		g = 1;
	/* worst case: 10 bytes for g, 5 per node delta, 10 per value */
	if ((buf = sm_malloc(10 + (size_t)b->n * 15)) == NULL)
		return (SM_ENOMEM);
	p = put_packed_uv(buf, g);
	for (uint32_t j = 0; j < b->n; j++) {
		p = put_packed_uv(p, b->node[j] - prev);
		prev = b->node[j];
		int64_t q = b->value[j] / (int64_t)g;

		p = put_packed_uv(p, ((uint64_t)q << 1) ^ (uint64_t)(q >> 63));
	}
	if ((z = sm_realloc(buf, (size_t)(p - buf))) == NULL)
		z = buf;        /* shrinking failed: keep the bigger buffer */
	sm_free(b->node);
	sm_free(b->value);
	b->node = NULL;
	b->value = NULL;
	b->packed = z;
	b->packed_len = (uint32_t)(p - buf);
	return (0);
}

int
ing_bucket_unpack(struct ing_bucket *b)
{
	struct ing_pair_cur c;
	uint32_t *nn, k = 0;
	int64_t *nv;

	if (b->packed == NULL || b->spilled)
		return (0);
	nn = sm_malloc((size_t)SM_MAX(b->n, 1) * sizeof(*nn));
	nv = sm_malloc((size_t)SM_MAX(b->n, 1) * sizeof(*nv));
	if (nn == NULL || nv == NULL) {
		sm_free(nn);
		sm_free(nv);
		return (SM_ENOMEM);
	}
	ing_pairs_begin(b, &c);
	while (ing_pairs_next(&c, &nn[k], &nv[k]))
		k++;
	sm_free(b->packed);
	b->packed = NULL;
	b->packed_len = 0;
	b->node = nn;
	b->value = nv;
	return (0);
}

void
ing_bucket_pairs_free(struct ing_bucket *b)
{
	sm_free(b->node);
	sm_free(b->value);
	sm_free(b->packed);
	b->node = NULL;
	b->value = NULL;
	b->packed = NULL;
	b->packed_len = 0;
}

/* --- spilled summaries (set.h) ----------------------------------------- */

/* Encode b's summary after one at prev_t; returns the bytes written (at
 * most ING_SUM_MAX). */
static size_t
sum_put(uint8_t *dst, int64_t bucket_ms, int64_t prev_t,
    const struct ing_bucket *b)
{
	uint64_t dt = sm_zigzag_enc((b->t - prev_t) / bucket_ms);
	size_t n = 0;

	/* dt's low bit says a profiles count follows (set.h). */
	SM_ASSERT(dt < ((uint64_t)1 << 62));
	n += sm_uvarint_put(dst + n, dt << 1 | (b->profiles != 1));
	if (b->profiles != 1)
		n += sm_uvarint_put(dst + n, b->profiles);
	n += sm_uvarint_put(dst + n, sm_zigzag_enc(b->total));
	n += sm_uvarint_put(dst + n, b->n);
	return (n);
}

/* Decode the summary at *pp (after one at prev_t) into *b: its summary
 * fields, `spilled` set, no pairs.  The encoding is the head's own, in
 * memory: a bad one is a bug, not input. */
static void
sum_get(const uint8_t **pp, const uint8_t *end, int64_t bucket_ms,
    int64_t prev_t, struct ing_bucket *b)
{
	uint64_t v[4];

	for (int i = 0; i < 4; i++) {
		int st;

		if (i == 1 && (v[0] & 1) == 0) {
			v[1] = 1;
			continue;
		}
		st = sm_uvarint_get(pp, end, &v[i]);
		SM_ASSERT(st == 0);
	}
	memset(b, 0, sizeof(*b));
	b->t = prev_t + sm_zigzag_dec(v[0] >> 1) * bucket_ms;
	b->profiles = (uint32_t)v[1];
	b->total = sm_zigzag_dec(v[2]);
	b->n = (uint32_t)v[3];
	b->spilled = 1;
}

static void
it_fill(struct ing_bucket_it *it)
{
	it->has = it->p < it->pe;
	if (it->has) {
		sum_get(&it->p, it->pe, it->bucket_ms, it->prev, &it->sp);
		it->prev = it->sp.t;
	}
}

void
ing_bucket_it_init(struct ing_bucket_it *it, const struct ing_series *sr,
    int64_t bucket_ms, int64_t start, int64_t end)
{
	uint32_t k = ing_series_first_bucket(sr, bucket_ms, start);

	it->b = sr->b + k;
	it->nb = sr->nb - k;
	it->p = sr->sp.p;
	/* No arithmetic on a NULL sp.p (UB, even + 0). */
	it->pe = sr->sp.len > 0 ? sr->sp.p + sr->sp.len : sr->sp.p;
	it->bucket_ms = bucket_ms;
	it->end = end;
	it->prev = 0;
	/* Summaries before the range are skipped (no index: an hour is ~360
	 * of them, decoded at a few ns each). */
	if (sr->sp.n == 0 || sr->sp.last_t + bucket_ms <= start ||
	    start >= end)
		it->p = it->pe;
	for (it_fill(it); it->has && it->sp.t + bucket_ms <= start;)
		it_fill(it);
}

const struct ing_bucket *
ing_bucket_it_next(struct ing_bucket_it *it)
{
	if (it->nb > 0 && it->b->t >= it->end)
		it->nb = 0;
	if (it->has && it->sp.t >= it->end)
		it->has = false;
	if (it->nb > 0 && (!it->has || it->b->t < it->sp.t)) {
		it->nb--;
		return (it->b++);
	}
	if (!it->has)
		return (NULL);
	/* A copy: the next decode goes on in it->sp. */
	it->out = it->sp;
	it_fill(it);
	return (&it->out);
}

bool
ing_sums_get(const struct ing_series *sr, int64_t bucket_ms, int64_t t,
    struct ing_bucket *out)
{
	const uint8_t *p = sr->sp.p, *end;
	struct ing_bucket b;
	int64_t prev = 0;

	if (sr->sp.n == 0 || t > sr->sp.last_t)
		return (false);
	end = p + sr->sp.len;
	while (p < end) {
		sum_get(&p, end, bucket_ms, prev, &b);
		prev = b.t;
		if (b.t >= t) {
			if (b.t != t)
				return (false);
			if (out != NULL)
				*out = b;
			return (true);
		}
	}
	return (false);
}

/* Room for `need` bytes in s, grown by a quarter (an hour's summaries
 * live as long as the head: doubling's slack would be a fifth of them),
 * or to `want` when that is more (set.h, "Room"). */
static int
sums_room(struct ing_sums *s, uint64_t need, uint64_t want, int64_t *grown)
{
	uint64_t ncap = (uint64_t)s->cap + s->cap / 4;
	uint8_t *p;

	if (need <= s->cap)
		return (0);
	ncap = SM_MAX(SM_MAX(SM_MAX(ncap, need), want), 64);
	if (ncap > UINT32_MAX || (p = sm_realloc(s->p, (size_t)ncap)) == NULL)
		return (SM_ENOMEM);
	*grown += (int64_t)(ncap - s->cap);
	s->p = p;
	s->cap = (uint32_t)ncap;
	return (0);
}

/*
 * The room to give s (holding n summaries, up to last_t) for the rest of
 * a head whose block ends at data time until_t: its bytes per summary
 * times the summaries its cadence brings by then (set.h, "Room"); 0 when
 * unknown.
 */
static uint64_t
sums_want(const struct ing_sums *s, uint32_t n, int64_t last_t,
    int64_t bucket_ms, int64_t until_t)
{
	const uint8_t *p = s->p;
	struct ing_bucket first;
	uint64_t more, cap, rest;
	int64_t first_t, cadence;

	if (n < 2 || until_t <= last_t || s->len == 0)
		return (0);
	sum_get(&p, s->p + s->len, bucket_ms, 0, &first);
	first_t = first.t;
	/* The first summary's t is against 0 (5 bytes or so), so the bytes
	 * per summary come from the others: counting it sized B5's rooms
	 * 40% too large. */
	rest = s->len - (uint64_t)(p - s->p);
	if (last_t <= first_t)
		return (0);
	cadence = (last_t - first_t) / (int64_t)(n - 1);
	cadence = SM_MAX(cadence, bucket_ms);
	more = (uint64_t)((until_t - last_t) / cadence) + 1;
	cap = (uint64_t)((until_t - last_t) / bucket_ms) + 1;
	more = SM_MIN(more, cap);
	/* Bytes per summary after the first, and 1/32 for the slack. */
	return (s->len + (more * rest + n - 2) / (n - 1) + s->len / 32);
}

int
ing_sums_add(struct ing_series *sr, int64_t bucket_ms,
    const struct ing_bucket *b, uint32_t n, int64_t until_t, int64_t *grown)
{
	struct ing_sums *s = &sr->sp, ns;
	uint32_t m = 0, j = 0;
	int64_t first = 0, prev;
	const uint8_t *p, *end;
	struct ing_bucket o;
	uint64_t bytes = 0;
	bool have;

	*grown = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (b[i].packed != NULL) {
			if (m++ == 0)
				first = b[i].t;
			bytes += b[i].packed_len;
		}
	}
	if (m == 0)
		return (0);
	if (s->n == 0 || first > s->last_t) {
		/* Appended: the live case. */
		if (sums_room(s, (uint64_t)s->len + (uint64_t)m * ING_SUM_MAX,
		    sums_want(s, s->n, s->last_t, bucket_ms, until_t),
		    grown) != 0)
			return (SM_ENOMEM);
		prev = s->n > 0 ? s->last_t : 0;
		for (uint32_t i = 0; i < n; i++) {
			if (b[i].packed == NULL)
				continue;
			s->len += (uint32_t)sum_put(s->p + s->len, bucket_ms,
			    prev, &b[i]);
			prev = b[i].t;
		}
		s->n += m;
		s->last_t = prev;
		s->bytes += bytes;
		return (0);
	}
	/* Interleaved (a late write's bucket spilled again): both merged
	 * into a new encoding. */
	memset(&ns, 0, sizeof(ns));
	if (sums_room(&ns, (uint64_t)s->len + (uint64_t)m * ING_SUM_MAX, 0,
	    grown) != 0)
		return (SM_ENOMEM);
	p = s->p;
	end = p + s->len;
	prev = 0;
	have = p < end;
	if (have)
		sum_get(&p, end, bucket_ms, 0, &o);
	for (;;) {
		const struct ing_bucket *x;

		while (j < n && b[j].packed == NULL)
			j++;
		if (j == n && !have)
			break;
		if (have && (j == n || o.t < b[j].t)) {
			x = &o;
		} else {
			SM_ASSERT(!have || o.t != b[j].t);
			x = &b[j++];
		}
		ns.len += (uint32_t)sum_put(ns.p + ns.len, bucket_ms, prev, x);
		prev = x->t;
		ns.n++;
		if (x == &o) {
			have = p < end;
			if (have)
				sum_get(&p, end, bucket_ms, prev, &o);
		}
	}
	ns.last_t = prev;
	ns.bytes = s->bytes + bytes;
	*grown -= (int64_t)s->cap;
	sm_free(s->p);
	*s = ns;
	return (0);
}

int
ing_sums_without(const struct ing_series *sr, int64_t bucket_ms,
    const int64_t *t, uint32_t nt, uint64_t bytes, struct ing_sums *out)
{
	const uint8_t *p = sr->sp.p, *end;
	int64_t prev = 0, oprev = 0;
	uint32_t j = 0;
	struct ing_bucket b;

	memset(out, 0, sizeof(*out));
	SM_ASSERT(nt <= sr->sp.n);
	if (nt == sr->sp.n)
		return (0);
	if ((out->p = sm_malloc(sr->sp.len)) == NULL)
		return (SM_ENOMEM);
	end = p + sr->sp.len;          /* sp.n > nt: p is not NULL */
	out->cap = sr->sp.len;
	while (p < end) {
		sum_get(&p, end, bucket_ms, oprev, &b);
		oprev = b.t;
		while (j < nt && t[j] < b.t)
			j++;
		if (j < nt && t[j] == b.t)
			continue;
		out->len += (uint32_t)sum_put(out->p + out->len, bucket_ms,
		    prev, &b);
		prev = b.t;
		out->n++;
	}
	SM_ASSERT(out->n == sr->sp.n - nt && out->len <= out->cap);
	SM_ASSERT(bytes <= sr->sp.bytes);
	out->last_t = prev;
	out->bytes = sr->sp.bytes - bytes;
	return (0);
}
