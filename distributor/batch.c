/*
 * batch.c -- the write batch; see batch.h.
 *
 * Series index: open addressing over (fingerprint, time) -> series index.
 * Pairs: appended unsorted into arena arrays that double; dist_batch_finish
 * folds duplicates with a dense scratch accumulator over the request tree's
 * node ids (O(pairs + nodes) per series when dense, a sort of the touched
 * nodes when sparse).  Sums saturate at INT64_MAX rather than wrap.
 */
#include "batch.h"

#include <stdint.h>
#include <string.h>

#include "common/hash.h"
#include "common/labels.h"
#include "smolder/v1/rpc.pb-c.h"
#include "wpack.h"

void
dist_limits_default(struct dist_limits *l)
{
	l->max_profile_bytes = 4u << 20;
	l->max_samples = 16000;
	l->max_sample_labels = 100;
	l->max_depth = 1000;
	l->max_symbol_len = 65535;
	sm_label_limits_default(&l->labels);
	l->max_global_series = 0;
	l->max_local_series = 0;
	l->shard_size = 0;
}

int
dist_batch_init(struct dist_batch *b, struct sm_arena *a,
    const struct dist_limits *lim)
{
	int rv;

	memset(b, 0, sizeof(*b));
	b->arena = a;
	b->limits = lim;
	b->meta.spy_name = "unknown";
	b->meta.sample_rate = 100;
	b->meta.units = "samples";
	b->meta.aggregation = "sum";
	sm_oatab_init(&b->tab, 16);
	if ((rv = sm_strtab_init(&b->strings)) != 0)
		return (rv);
	if ((rv = sm_tree_init(&b->tree)) != 0) {
		sm_strtab_fini(&b->strings);
		return (rv);
	}
	return (0);
}

void
dist_batch_fini(struct dist_batch *b)
{
	sm_strtab_fini(&b->strings);
	sm_tree_fini(&b->tree);
	sm_free(b->series);
	sm_oatab_fini(&b->tab);
	memset(b, 0, sizeof(*b));
}

static int
batch_frame(struct dist_batch *b, const char *s, size_t n, bool utf8,
    uint32_t *name)
{
	size_t max = b->limits->max_symbol_len;
	char *fixed;

	if (max != 0 && n > max) {
		s += n - max;
		n = max;
		utf8 = false;   /* the cut may split a sequence */
	}
	if (memchr(s, '\0', n) != NULL)
		return (SM_EMALFORMED);
	if (!utf8 && !sm_utf8_valid(s, n)) {
		if (n > SIZE_MAX / 3 || (fixed = sm_arena_alloc(b->arena,
		    3 * n)) == NULL)
			return (SM_ENOMEM);
		n = sm_utf8_repair(s, n, fixed);
		s = fixed;
	}
	return (sm_strtab_intern(&b->strings, s, n, name));
}

int
dist_batch_frame(struct dist_batch *b, const char *s, size_t n,
    uint32_t *name)
{
	return (batch_frame(b, s, n, false, name));
}

int
dist_batch_frame_utf8(struct dist_batch *b, const char *s, size_t n,
    uint32_t *name)
{
	return (batch_frame(b, s, n, true, name));
}

void
dist_batch_reserve_nodes(struct dist_batch *b, uint32_t more)
{
	uint32_t n = sm_tree_size(&b->tree);

	more = SM_MIN(more, DIST_BATCH_RESERVE_MAX);
	if (n <= UINT32_MAX - more)
		(void)sm_tree_reserve_nodes(&b->tree, n + more);
}

void
dist_batch_reserve_frames(struct dist_batch *b, uint32_t more)
{
	uint32_t n = sm_strtab_count(&b->strings);

	more = SM_MIN(more, DIST_BATCH_RESERVE_MAX);
	if (n <= UINT32_MAX - more)
		(void)sm_strtab_reserve(&b->strings, n + more);
}

int
dist_batch_node(struct dist_batch *b, uint32_t parent, uint32_t name,
    uint32_t *node)
{
	return (sm_tree_child(&b->tree, parent, name, node));
}

int
dist_batch_append(struct dist_batch *b, uint32_t parent, uint32_t name,
    uint32_t *node)
{
	return (sm_tree_append(&b->tree, parent, name, node));
}

static inline uint64_t
series_slot_hash(uint64_t fp, int64_t t)
{
	return (sm_hash_u64(fp ^ (uint64_t)t * 0x9e3779b97f4a7c15ULL));
}

int
dist_batch_series(struct dist_batch *b, const struct sm_label *ls,
    uint32_t n, int64_t time_ms, uint32_t *idx, struct sm_err *err)
{
	struct sm_label *copy;
	struct dist_series *s;
	struct sm_oatab_it it;
	uint32_t i, v;
	uint64_t fp;
	int rv;

	SM_ASSERT(!b->finished);
	copy = sm_arena_alloc(b->arena, (size_t)SM_MAX(n, 1) * sizeof(*copy));
	if (copy == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	/* __session_id__ never makes a series: Pyroscope's default
	 * max_sessions_per_series = 0 (see batch.h). */
	for (i = 0, v = 0; i < n; i++) {
		if (strcmp(ls[i].name, SM_LABEL_SESSION_ID) != 0)
			copy[v++] = ls[i];
	}
	n = v;
	sm_labels_sort(copy, n);
	fp = sm_labels_fingerprint(copy, n);

	for (sm_oatab_probe(&b->tab, series_slot_hash(fp, time_ms), &it);
	    (v = sm_oatab_next(&b->tab, &it)) != SM_OATAB_NONE;) {
		s = &b->series[v];
		if (s->fp == fp && s->time_ms == time_ms) {
			*idx = v;
			return (0);
		}
	}
	rv = sm_labels_validate(copy, n, &b->limits->labels, NULL, err);
	if (rv != 0)
		return (rv);
	/* Own the strings: callers may pass transient buffers. */
	for (uint32_t k = 0; k < n; k++) {
		copy[k].name = sm_arena_strndup(b->arena, copy[k].name,
		    strlen(copy[k].name));
		copy[k].value = sm_arena_strndup(b->arena, copy[k].value,
		    strlen(copy[k].value));
		if (copy[k].name == NULL || copy[k].value == NULL)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	if (b->nseries == b->series_cap) {
		uint32_t ncap = b->series_cap ? b->series_cap * 2 : 8;
		struct dist_series *ns = sm_reallocarray(b->series, ncap,
		    sizeof(*ns));

		if (ns == NULL)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		b->series = ns;
		b->series_cap = ncap;
	}
	if (sm_oatab_insert(&b->tab, &it, b->nseries) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	s = &b->series[b->nseries];
	memset(s, 0, sizeof(*s));
	s->labels = copy;
	s->nlabels = n;
	s->fp = fp;
	s->time_ms = time_ms;
	*idx = b->nseries++;
	return (0);
}

/*
 * Grow the (node, value) arrays of n pairs to ncap in `a`; both or
 * neither are replaced.  0 or SM_ENOMEM.
 */
static int
grow_pairs(struct sm_arena *a, uint32_t **node, int64_t **value, uint32_t n,
    uint32_t ncap)
{
	uint32_t *nn = sm_arena_grow(a, *node, n, ncap, sizeof(*nn));
	int64_t *nv = sm_arena_grow(a, *value, n, ncap, sizeof(*nv));

	if (nn == NULL || nv == NULL)
		return (SM_ENOMEM);
	*node = nn;
	*value = nv;
	return (0);
}

int
dist_batch_add(struct dist_batch *b, uint32_t idx, uint32_t node,
    int64_t value)
{
	struct dist_series *s;

	SM_ASSERT(idx < b->nseries && !b->finished);
	if (value == 0 || node == 0)
		return (0);
	SM_ASSERT(node < b->tree.n);
	s = &b->series[idx];
	if (s->n == s->cap) {
		uint32_t ncap = s->cap ? s->cap * 2 : 16;

		if (ncap < s->cap || grow_pairs(b->arena, &s->node, &s->value,
		    s->n, ncap) != 0)
			return (SM_ENOMEM);
		s->cap = ncap;
	}
	s->node[s->n] = node;
	s->value[s->n] = value;
	s->n++;
	b->pairs++;
	return (0);
}

int
dist_batch_span(struct dist_batch *b, uint32_t idx, uint32_t node,
    int64_t value, uint64_t span)
{
	struct dist_series *s;

	SM_ASSERT(idx < b->nseries && !b->finished);
	if (value <= 0 || node == 0)
		return (0);
	SM_ASSERT(node < b->tree.n);
	s = &b->series[idx];
	if (s->ns == s->scap) {
		uint32_t ncap = s->scap ? s->scap * 2 : 16;
		uint64_t *nsp;

		if (ncap < s->scap)
			return (SM_ENOMEM);
		/* All three are tried even when one fails: the caller's
		 * out-of-memory message reports the arena's use. */
		nsp = sm_arena_grow(b->arena, s->span, s->ns, ncap,
		    sizeof(*nsp));
		if (grow_pairs(b->arena, &s->snode, &s->svalue, s->ns,
		    ncap) != 0 || nsp == NULL)
			return (SM_ENOMEM);
		s->span = nsp;
		s->scap = ncap;
	}
	s->span[s->ns] = span;
	s->snode[s->ns] = node;
	s->svalue[s->ns] = value;
	s->ns++;
	return (0);
}

struct span_trip {
	uint64_t span;
	uint32_t node;
	int64_t value;
};

static int
span_trip_cmp(const void *a, const void *b)
{
	const struct span_trip *x = a, *y = b;

	return (x->span != y->span ? SM_CMP(x->span, y->span) :
	    SM_CMP(x->node, y->node));
}

/* Sort a series' span samples by (span, node) and sum duplicates. */
static int
spans_finish(struct dist_series *s)
{
	struct span_trip *t;
	uint32_t w = 0;

	if (s->ns == 0)
		return (0);
	if ((t = sm_malloc((size_t)s->ns * sizeof(*t))) == NULL)
		return (SM_ENOMEM);
	for (uint32_t j = 0; j < s->ns; j++)
		t[j] = (struct span_trip){ s->span[j], s->snode[j],
		    s->svalue[j] };
	qsort(t, s->ns, sizeof(*t), span_trip_cmp);
	for (uint32_t j = 0; j < s->ns; j++) {
		if (w > 0 && s->span[w - 1] == t[j].span &&
		    s->snode[w - 1] == t[j].node) {
			s->svalue[w - 1] = sm_add_sat(s->svalue[w - 1],
			    t[j].value);
			continue;
		}
		if (w > 0 && s->svalue[w - 1] == 0)
			w--;            /* signed samples that cancelled out */
		s->span[w] = t[j].span;
		s->snode[w] = t[j].node;
		s->svalue[w++] = t[j].value;
	}
	if (w > 0 && s->svalue[w - 1] == 0)
		w--;
	s->ns = w;
	sm_free(t);
	return (0);
}

int
dist_batch_finish(struct dist_batch *b)
{
	uint32_t nnodes = b->tree.n, keep = 0;
	int64_t *acc = NULL;
	uint32_t *touched = NULL;
	uint8_t *seen = NULL;
	int rv = 0;

	SM_ASSERT(!b->finished);
	b->finished = 1;
	acc = sm_calloc(nnodes, sizeof(*acc));
	touched = sm_malloc((size_t)nnodes * sizeof(*touched));
	seen = sm_calloc(nnodes, 1);
	if (acc == NULL || touched == NULL || seen == NULL) {
		rv = SM_ENOMEM;
		goto out;
	}
	for (uint32_t k = 0; k < b->nseries; k++) {
		struct dist_series *s = &b->series[k];
		uint32_t nt = 0, out = 0;

		/* Values are signed, so a sum may pass through 0: `seen`,
		 * not acc, tells which nodes were touched. */
		for (uint32_t j = 0; j < s->n; j++) {
			uint32_t nd = s->node[j];

			if (!seen[nd]) {
				seen[nd] = 1;
				touched[nt++] = nd;
			}
			acc[nd] = sm_add_sat(acc[nd], s->value[j]);
		}
		if (nt > nnodes / 8) {
			/* Dense: one scan in node order. */
			for (uint32_t nd = 1, left = nt; nd < nnodes && left > 0;
			    nd++) {
				if (!seen[nd])
					continue;
				left--;
				if (acc[nd] != 0) {
					s->node[out] = nd;
					s->value[out++] = acc[nd];
				}
				acc[nd] = 0;
				seen[nd] = 0;
			}
		} else {
			qsort(touched, nt, sizeof(*touched), sm_u32_cmp);
			for (uint32_t j = 0; j < nt; j++) {
				uint32_t nd = touched[j];

				if (acc[nd] != 0) {
					s->node[out] = nd;
					s->value[out++] = acc[nd];
				}
				acc[nd] = 0;
				seen[nd] = 0;
			}
		}
		/* Stacks whose values cancel out leave no pair (their span
		 * samples, if any, stay: spans.h). */
		s->n = out;
		if ((rv = spans_finish(s)) != 0)
			goto out;
		if (out != 0)
			b->series[keep++] = *s;
	}
	b->nseries = keep;
	/* The fingerprint index refers to old positions; it is not used
	 * after finish, so drop it. */
	sm_oatab_fini(&b->tab);
out:
	sm_free(acc);
	sm_free(touched);
	sm_free(seen);
	return (rv);
}

int64_t
dist_batch_series_total(const struct dist_batch *b, uint32_t idx)
{
	const struct dist_series *s = &b->series[idx];
	int64_t t = 0;

	for (uint32_t j = 0; j < s->n; j++)
		t = sm_add_sat(t, s->value[j]);
	return (t);
}

int
dist_batch_encode(const struct dist_batch *b, const char *tenant,
    const uint8_t profile_id[16], const uint32_t *which, uint32_t nwhich,
    uint32_t max_series, struct sm_buf *out)
{
	return (dist_batch_encode_rep(b, tenant, profile_id, which, nwhich,
	    max_series, NULL, 0, out, NULL));
}

static inline const char *
batch_str(const char *s)
{
	return (s != NULL ? s : "");
}

int
dist_batch_encode_rep(const struct dist_batch *b, const char *tenant,
    const uint8_t profile_id[16], const uint32_t *which, uint32_t nwhich,
    uint32_t max_series, Smolder__V1__Replica *const *replicas,
    uint32_t nreplicas, struct sm_buf *out, Smolder__V1__Request **msg)
{
	/* In the arena, not on the stack: *msg outlives this call. */
	struct sm_arena *a = b->arena;
	Smolder__V1__WriteRequest *rq = sm_arena_alloc(a, sizeof(*rq));
	Smolder__V1__StackTree *tr = sm_arena_alloc(a, sizeof(*tr));
	Smolder__V1__Request *env = sm_arena_alloc(a, sizeof(*env));
	Smolder__V1__SeriesMeta *meta = sm_arena_alloc(a, sizeof(*meta));
	uint32_t nnodes = b->tree.n, nstr = b->strings.n;
	uint32_t *node_map = NULL, *str_map = NULL;
	uint32_t kept = 0, kstr = 0;
	int rv = SM_ENOMEM;

	SM_ASSERT(b->finished);
	if (msg != NULL)
		*msg = NULL;
	if (rq == NULL || tr == NULL || env == NULL || meta == NULL)
		return (SM_ENOMEM);
	smolder__v1__write_request__init(rq);
	smolder__v1__stack_tree__init(tr);
	smolder__v1__request__init(env);
	smolder__v1__series_meta__init(meta);
	node_map = sm_calloc(nnodes, sizeof(*node_map));
	str_map = sm_calloc(nstr, sizeof(*str_map));
	if (node_map == NULL || str_map == NULL)
		goto out;
	if (which == NULL)
		nwhich = b->nseries;
	/* Mark every node on a path from the root to a stored leaf. */
	for (uint32_t w = 0; w < nwhich; w++) {
		const struct dist_series *s = &b->series[which != NULL ?
		    which[w] : w];

		for (uint32_t j = 0; j < s->n; j++) {
			for (uint32_t nd = s->node[j]; nd != 0 &&
			    node_map[nd] == 0; nd = b->tree.parent[nd])
				node_map[nd] = 1;
		}
	}
	/* Ascending renumbering keeps parents before children. */
	for (uint32_t nd = 1; nd < nnodes; nd++) {
		if (node_map[nd] != 0) {
			node_map[nd] = ++kept;
			str_map[b->tree.name[nd]] = 1;
		}
	}
	str_map[0] = 1;
	for (uint32_t i = 0; i < nstr; i++) {
		if (str_map[i] != 0)
			str_map[i] = ++kstr;
	}
	tr->n_strings = kstr;
	tr->strings = sm_arena_alloc(a, (size_t)kstr * sizeof(char *));
	tr->n_parent = tr->n_name = kept;
	tr->parent = sm_arena_alloc(a, (size_t)SM_MAX(kept, 1) *
	    sizeof(uint32_t));
	tr->name = sm_arena_alloc(a, (size_t)SM_MAX(kept, 1) *
	    sizeof(uint32_t));
	if (tr->strings == NULL || tr->parent == NULL || tr->name == NULL)
		goto out;
	for (uint32_t i = 0; i < nstr; i++) {
		if (str_map[i] != 0)
			tr->strings[str_map[i] - 1] =
			    (char *)b->strings.strs[i].p;
	}
	for (uint32_t nd = 1; nd < nnodes; nd++) {
		uint32_t m = node_map[nd];

		if (m == 0)
			continue;
		tr->parent[m - 1] = node_map[b->tree.parent[nd]];
		tr->name[m - 1] = str_map[b->tree.name[nd]] - 1;
	}

	/* protobuf-c unpacks an absent string as "", never NULL (*msg). */
	meta->spy_name = (char *)batch_str(b->meta.spy_name);
	meta->sample_rate = b->meta.sample_rate;
	meta->units = (char *)batch_str(b->meta.units);
	meta->aggregation = (char *)batch_str(b->meta.aggregation);

	rq->tenant = (char *)tenant;
	rq->profile_id.data = (uint8_t *)profile_id;
	rq->profile_id.len = 16;
	rq->max_series = max_series;
	rq->n_replicas = nreplicas;
	rq->replicas = (Smolder__V1__Replica **)replicas;
	rq->tree = tr;
	rq->n_series = nwhich;
	rq->series = sm_arena_alloc(a, (size_t)SM_MAX(nwhich, 1) *
	    sizeof(*rq->series));
	if (rq->series == NULL)
		goto out;
	for (uint32_t k = 0; k < nwhich; k++) {
		const struct dist_series *s = &b->series[which != NULL ?
		    which[k] : k];
		Smolder__V1__SeriesWrite *w = sm_arena_alloc(a, sizeof(*w));
		Types__V1__LabelPair *lp, **lpp;

		lp = sm_arena_alloc(a, (size_t)SM_MAX(s->nlabels, 1) *
		    sizeof(*lp));
		lpp = sm_arena_alloc(a, (size_t)SM_MAX(s->nlabels, 1) *
		    sizeof(*lpp));
		if (w == NULL || lp == NULL || lpp == NULL)
			goto out;
		smolder__v1__series_write__init(w);
		for (uint32_t i = 0; i < s->nlabels; i++) {
			types__v1__label_pair__init(&lp[i]);
			lp[i].name = (char *)s->labels[i].name;
			lp[i].value = (char *)s->labels[i].value;
			lpp[i] = &lp[i];
		}
		w->n_labels = s->nlabels;
		w->labels = lpp;
		w->time_ms = s->time_ms;
		w->n_node = w->n_value = s->n;
		w->node = sm_arena_alloc(a, (size_t)SM_MAX(s->n, 1) *
		    sizeof(uint32_t));
		if (w->node == NULL)
			goto out;
		for (uint32_t j = 0; j < s->n; j++)
			w->node[j] = node_map[s->node[j]];
		w->value = s->value;
		if (s->ns != 0) {
			w->n_span_id = w->n_span_node = w->n_span_value =
			    s->ns;
			w->span_id = s->span;
			w->span_value = s->svalue;
			w->span_node = sm_arena_alloc(a, (size_t)s->ns *
			    sizeof(uint32_t));
			if (w->span_node == NULL)
				goto out;
			for (uint32_t j = 0; j < s->ns; j++)
				w->span_node[j] = node_map[s->snode[j]];
		}
		w->meta = meta;
		rq->series[k] = w;
	}
	env->method_case = SMOLDER__V1__REQUEST__METHOD_WRITE;
	env->write = rq;
	if (dist_wpack_request(env, out) != 0)
		goto out;
	if (msg != NULL)
		*msg = env;
	rv = 0;
out:
	sm_free(node_map);
	sm_free(str_map);
	return (rv);
}
