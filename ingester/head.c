/*
 * head.c -- one tenant's head; see head.h.
 */
#include "head.h"

#include <string.h>

int
ing_head_create(uint64_t gen, int64_t bucket_ms, struct ing_head **out)
{
	struct ing_head *h;

	SM_ASSERT(bucket_ms > 0);
	if ((h = sm_calloc(1, sizeof(*h))) == NULL)
		return (SM_ENOMEM);
	if (ing_set_init(&h->set) != 0)
		goto fail_set;
	if (sm_strtab_init(&h->frames) != 0)
		goto fail_frames;
	if (sm_tree_init(&h->tree) != 0)
		goto fail_tree;
	{
		pthread_rwlockattr_t la;

		/* Writers first: a write waits for the queries that hold
		 * the head now, never for a stream of later ones (glibc's
		 * default prefers readers, and overlapping queries kept
		 * writes out for hundreds of ms: bench B8). */
		pthread_rwlockattr_init(&la);
		pthread_rwlockattr_setkind_np(&la,
		    PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
		pthread_rwlock_init(&h->lock, &la);
		pthread_rwlockattr_destroy(&la);
	}
	h->gen = gen;
	h->bucket_ms = bucket_ms;
	h->created_ms = sm_now_ms();
	atomic_init(&h->writers, 0);
	atomic_init(&h->refs, 1);
	atomic_init(&h->lock_waiting, 0);
	atomic_init(&h->nseries, 0);
	*out = h;
	return (0);
fail_tree:
	sm_strtab_fini(&h->frames);
fail_frames:
	ing_set_fini(&h->set);
fail_set:
	sm_free(h);
	return (SM_ENOMEM);
}

void
ing_head_ref(struct ing_head *h)
{
	atomic_fetch_add(&h->refs, 1);
}

void
ing_head_unref(struct ing_head *h)
{
	if (h == NULL || atomic_fetch_sub(&h->refs, 1) != 1)
		return;
	SM_ASSERT(atomic_load(&h->writers) == 0);
	ing_set_fini(&h->set);
	sm_strtab_fini(&h->frames);
	sm_tree_fini(&h->tree);
	ing_spans_fini(&h->spans);
	ing_profs_fini(&h->profs);
	pthread_rwlock_destroy(&h->lock);
	sm_free(h);
}

uint64_t
ing_head_bytes(const struct ing_head *h)
{
	return (h->pair_bytes + ing_spans_bytes(&h->spans) +
	    ing_profs_bytes(&h->profs) +
	    sm_tree_mem(&h->tree) +
	    sm_strtab_mem(&h->frames) + sm_strtab_mem(&h->set.lstr) +
	    (uint64_t)h->set.nseries * 160);
}

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

/* Pack bucket i of s (set.h, "Packed buckets"); a failure to pack only
 * costs memory. */
static void
pack(struct ing_head *h, struct ing_bucket *b)
{
	uint64_t was;

	if (b->packed != NULL)
		return;
	was = ing_bucket_pair_bytes(b);
	if (ing_bucket_pack(b) == 0)
		h->pair_bytes = h->pair_bytes - was + ing_bucket_pair_bytes(b);
}

/*
 * After a write into bucket i: every bucket but the newest is sealed.  So
 * bucket i is packed unless it is the newest, and when it is the newest,
 * the one before it (until now the newest) is packed.
 */
static void
seal(struct ing_head *h, struct ing_series *s, uint32_t i)
{
	if (i + 1 < s->nb)
		pack(h, &s->b[i]);
	else if (i > 0)
		pack(h, &s->b[i - 1]);
}

/* Add sorted, unique pairs p[0..n) to the bucket starting at bt. */
static int
bucket_add(struct ing_head *h, struct ing_series *s, int64_t bt,
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
		if (SM_GROW(s->b, s->cap, s->nb + 1, 8) != 0)
			return (SM_ENOMEM);
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
		b->packed = NULL;
		b->packed_len = 0;
		s->nb++;
		h->pair_bytes += (uint64_t)n * 12 + sizeof(*b);
		h->set.min_t = SM_MIN(h->set.min_t, bt);
		h->set.max_t = SM_MAX(h->set.max_t, bt);
		seal(h, s, lo);
		return (0);
	}
	/* Sorted merge into fresh arrays. */
	b = &s->b[lo];
	if (b->packed != NULL) {
		uint64_t was = ing_bucket_pair_bytes(b);

		if (ing_bucket_unpack(b) != 0)
			return (SM_ENOMEM);
		h->pair_bytes = h->pair_bytes - was + ing_bucket_pair_bytes(b);
	}
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
	h->pair_bytes += (uint64_t)(k - b->n) * 12;
	sm_free(b->node);
	sm_free(b->value);
	b->node = nn;
	b->value = nv;
	b->n = k;
	b->profiles++;
	b->total = sm_add_sat(b->total, sum);
	seal(h, s, lo);
	return (0);
}

/*
 * Check series w's span triples (spans.h): equal counts, sorted by (span,
 * node) and unique, every node one of the write's tree nodes (1..nnodes)
 * and every value non-zero.  Values are signed like the pairs, so a span's
 * part of a pair may exceed it or have the other sign, and a pair whose
 * samples cancelled out is gone while its span samples stay.
 */
int
ing_head_spans_check(const Smolder__V1__SeriesWrite *w, size_t k,
    uint32_t nnodes, struct sm_err *err)
{
	if (w->n_span_id != w->n_span_node || w->n_span_id != w->n_span_value)
		return (sm_err_set(err, SM_EMALFORMED, "write: series %zu "
		    "span arrays differ in length", k));
	for (size_t i = 0; i < w->n_span_id; i++) {
		uint32_t nd = w->span_node[i];

		if (i > 0 && (w->span_id[i] < w->span_id[i - 1] ||
		    (w->span_id[i] == w->span_id[i - 1] &&
		    nd <= w->span_node[i - 1])))
			return (sm_err_set(err, SM_EMALFORMED, "write: series "
			    "%zu span %zu out of order", k, i));
		if (nd == 0 || nd > nnodes || w->span_value[i] == 0)
			return (sm_err_set(err, SM_EMALFORMED, "write: series "
			    "%zu span %zu has a bad node or a zero value", k,
			    i));
	}
	return (0);
}

/* Labels of a write, checked sorted and unique, as sm_label pointers. */
static int
write_labels(const Smolder__V1__SeriesWrite *w, struct sm_label *ls,
    struct sm_err *err)
{
	for (size_t k = 0; k < w->n_labels; k++) {
		const Types__V1__LabelPair *lp = w->labels[k];

		if (lp->name == NULL || lp->value == NULL || (k > 0 &&
		    strcmp(w->labels[k - 1]->name, lp->name) >= 0))
			return (sm_err_set(err, SM_EMALFORMED, "write: series "
			    "labels not sorted and unique"));
		ls[k].name = lp->name;
		ls[k].value = lp->value;
	}
	return (0);
}

static int
u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x < y ? -1 : x > y);
}

/*
 * The active-series limit (head.h): would `req` take h past `max` series?
 * Counts the distinct series of the write that h does not hold yet and
 * that it would create (those with pairs: a series without any is
 * skipped by the write), by fingerprint -- two new label sets with one
 * 64-bit fingerprint would count once, a 2^-64 leniency.  Caller holds
 * h->lock (either mode).  Allocates only a scratch array, freed here.
 * 0, SM_ELIMIT (nothing may be applied), SM_EMALFORMED, SM_ENOMEM.
 */
static int
series_limit_check(const struct ing_head *h,
    const Smolder__V1__WriteRequest *req, uint32_t max, struct sm_err *err)
{
	struct sm_label *ls = NULL;
	uint64_t *fps = NULL;
	size_t nls = 0;
	uint32_t nnew = 0, distinct = 0;
	int rv = 0;

	if (max == 0 || (uint64_t)h->set.nseries + req->n_series <= max)
		return (0);     /* cannot be over: no lookups */
	for (size_t k = 0; k < req->n_series; k++)
		nls = SM_MAX(nls, req->series[k]->n_labels);
	ls = sm_malloc(SM_MAX(nls, 1) * sizeof(*ls));
	fps = sm_malloc(SM_MAX(req->n_series, 1) * sizeof(*fps));
	if (ls == NULL || fps == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < req->n_series; k++) {
		const Smolder__V1__SeriesWrite *w = req->series[k];
		uint32_t n = (uint32_t)w->n_labels;
		uint64_t fp;

		if (w->n_node == 0)
			continue;
		if ((rv = write_labels(w, ls, err)) != 0)
			goto out;
		fp = sm_labels_fingerprint(ls, n);
		if (ing_set_series_find(&h->set, ls, n, fp) == NULL)
			fps[nnew++] = fp;
	}
	if (nnew > 1)
		qsort(fps, nnew, sizeof(*fps), u64_cmp);
	for (uint32_t i = 0; i < nnew; i++)
		distinct += i == 0 || fps[i] != fps[i - 1];
	if ((uint64_t)h->set.nseries + distinct > max)
		rv = sm_err_set(err, SM_ELIMIT, "Maximum active series limit "
		    "exceeded (%llu/%u), reduce the number of active streams "
		    "(reduce labels or reduce label values), or contact your "
		    "administrator to see if the limit can be increased",
		    (unsigned long long)h->set.nseries + distinct, max);
out:
	sm_free(ls);
	sm_free(fps);
	return (rv);
}

int
ing_head_series_check(struct ing_head *h,
    const Smolder__V1__WriteRequest *req, uint32_t max_series,
    struct sm_err *err)
{
	int rv;

	if (max_series == 0)
		return (0);
	pthread_rwlock_rdlock(&h->lock);
	rv = series_limit_check(h, req, max_series, err);
	pthread_rwlock_unlock(&h->lock);
	return (rv);
}

int
ing_head_write(struct ing_head *h, const Smolder__V1__WriteRequest *req,
    uint32_t max_series, uint32_t *nseries, uint32_t *npairs,
    struct sm_err *err)
{
	const Smolder__V1__StackTree *rt = req->tree;
	uint32_t *smap = NULL, *nmap = NULL, nnodes, nstr;
	struct pair *pairs = NULL;
	struct sm_label *ls = NULL;
	size_t pairs_cap = 0, ls_cap = 0;
	int rv;

	*nseries = *npairs = 0;
	if (rt == NULL || rt->n_parent != rt->n_name || rt->n_strings == 0)
		return (sm_err_set(err, SM_EMALFORMED, "write: bad stack tree"));
	nnodes = (uint32_t)rt->n_parent;
	nstr = (uint32_t)rt->n_strings;
	smap = sm_malloc((size_t)nstr * sizeof(*smap));
	nmap = sm_malloc(((size_t)nnodes + 1) * sizeof(*nmap));
	if (smap == NULL || nmap == NULL) {
		sm_free(smap);
		sm_free(nmap);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}

	/* Queries reading many series give the lock up while we wait
	 * (set.h, Yielding). */
	atomic_fetch_add(&h->lock_waiting, 1);
	pthread_rwlock_wrlock(&h->lock);
	atomic_fetch_sub(&h->lock_waiting, 1);
	/* Before anything is applied: a refused write leaves no trace. */
	if ((rv = series_limit_check(h, req, max_series, err)) != 0)
		goto out;
	for (uint32_t i = 0; i < nstr; i++) {
		const char *s = rt->strings[i] != NULL ? rt->strings[i] : "";

		if ((rv = sm_strtab_intern(&h->frames, s, strlen(s),
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
		if ((rv = sm_tree_child(&h->tree, nmap[p], smap[nm],
		    &nmap[i + 1])) != 0) {
			sm_err_set(err, rv, "out of memory");
			goto out;
		}
	}
	for (size_t k = 0; k < req->n_series; k++) {
		const Smolder__V1__SeriesWrite *w = req->series[k];
		const Smolder__V1__SeriesMeta *m = w->meta;
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
			    w->value[j] == 0 ||
			    (j > 0 && w->node[j] <= w->node[j - 1])) {
				rv = sm_err_set(err, SM_EMALFORMED, "write: "
				    "series %zu pair %u is invalid", k, j);
				goto out;
			}
			pairs[j].node = nmap[w->node[j]];
			pairs[j].value = w->value[j];
		}
		if ((rv = ing_head_spans_check(w, k, nnodes, err)) != 0)
			goto out;
		if (n == 0)
			continue;
		qsort(pairs, n, sizeof(*pairs), pair_cmp);
		/* Two nodes of the write's tree can be the same head node (a
		 * tree that repeats a child: same parent, same name): sum
		 * them, since a bucket's nodes are strictly increasing.  Kept
		 * apart, they were cut into a block its reader rejects as
		 * corrupt ("node out of order", found by fuzz_rpc). */
		{
			uint32_t w2 = 0;

			for (uint32_t j = 0; j < n; j++) {
				if (w2 > 0 && pairs[w2 - 1].node ==
				    pairs[j].node)
					pairs[w2 - 1].value = sm_add_sat(
					    pairs[w2 - 1].value,
					    pairs[j].value);
				else
					pairs[w2++] = pairs[j];
			}
			n = w2;
		}
		if (w->n_labels > ls_cap) {
			struct sm_label *nl = sm_reallocarray(ls, w->n_labels,
			    sizeof(*nl));

			if (nl == NULL) {
				rv = sm_err_set(err, SM_ENOMEM, "out of memory");
				goto out;
			}
			ls = nl;
			ls_cap = w->n_labels;
		}
		if ((rv = write_labels(w, ls, err)) != 0)
			goto out;
		if ((rv = ing_set_series(&h->set, ls, (uint32_t)w->n_labels,
		    m ? m->spy_name : NULL, m ? m->units : NULL,
		    m ? m->aggregation : NULL, m ? m->sample_rate : 0,
		    &s)) != 0 ||
		    (rv = bucket_add(h, s, sm_floor_to(w->time_ms,
		    h->bucket_ms), pairs, n)) != 0) {
			sm_err_set(err, rv, "out of memory");
			goto out;
		}
		for (size_t i = 0; i < w->n_span_id; i++) {
			if ((rv = ing_spans_add(&h->spans, w->span_id[i], s->fp,
			    sm_floor_to(w->time_ms, h->bucket_ms),
			    nmap[w->span_node[i]], w->span_value[i])) != 0) {
				sm_err_set(err, rv, "out of memory");
				goto out;
			}
		}
		if (req->profile_id.len == 16) {
			int64_t total = 0;

			for (uint32_t j = 0; j < n; j++)
				total = sm_add_sat(total, pairs[j].value);
			if ((rv = ing_profs_add(&h->profs, s->fp, w->time_ms,
			    req->profile_id.data, total)) != 0) {
				sm_err_set(err, rv, "out of memory");
				goto out;
			}
		}
		(*nseries)++;
		*npairs += n;
	}
	h->writes++;
	rv = 0;
out:
	atomic_store(&h->nseries, h->set.nseries);
	pthread_rwlock_unlock(&h->lock);
	sm_free(smap);
	sm_free(nmap);
	sm_free(pairs);
	sm_free(ls);
	return (rv);
}
