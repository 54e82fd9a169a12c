/*
 * heatmap_api.c -- querier.v1.QuerierService/SelectHeatmap (the individual-
 * profile heatmap), in the proto and JSON codecs, from the ingesters'
 * individual-profile records (ingester/profiles.h: per upload and series
 * its profile id, exact time and total) over smolder.v1.Profiles.
 *
 * Replicas: every replica of a series holds the same profile ids, so the
 * answers are united and de-duplicated by (series fp, time, id) -- no plan
 * is needed, and a lost replica changes nothing while the read error
 * budget holds.
 *
 * Shape (decisions where Pyroscope's proto leaves room):
 *   - one HeatmapSeries per distinct set of group_by label values (a
 *     series lacking a group_by label leaves it out); no group_by: one
 *     series with no labels.  Sorted by labels.  `limit` > 0 keeps the
 *     `limit` series holding the most profiles (ties by labels).
 *   - profiles whose time (ms) is in [start, end) count, after the
 *     tenant's range limits (qry_int.h qry_limit_range): a range that
 *     ended before max_query_lookback asks nobody and answers no series;
 *     an earlier start is moved up to the lookback.  SelectSeries
 *     exemplars are looked up under the same limits.
 *   - x: slots at multiples of `step` (seconds, as SelectSeries); a
 *     profile at t ms falls in the slot floor(t / step) * step.  Only
 *     slots holding profiles are sent, sorted by timestamp.
 *   - y: per HeatmapSeries, HEATMAP_ROWS (20) equal-width rows spanning
 *     [min, max] of its profiles' totals (one row when all are equal); a
 *     profile with total v is in row min(19, floor((v - min) / width)).
 *     A slot lists its non-empty rows only: y_min[i] is the row's lower
 *     bound and counts[i] the number of profiles in (slot, row), so
 *     sum(counts) over all slots is the number of profiles in range.
 *   - exemplars (exemplar_type INDIVIDUAL): per non-empty cell the profile
 *     with the largest total (then the earliest, then the smallest id):
 *     timestamp (ms), profile_id (the upload's 16-byte id as a UUID
 *     string), value (total) and the series' group_by labels.
 *     UNSPECIFIED and NONE send none.
 *   - query_type SPAN and exemplar_type SPAN are 501 unimplemented
 *     (span heatmaps need per-span totals, which are not kept).
 *   - at most 1,000,000 profiles per ingester answer; more is
 *     resource_exhausted-like (the ingester's SM_ELIMIT, 400/429 as
 *     common/connect maps it), asking for a narrower query.
 */
#include "qry_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/connect.h"
#include "common/auth.h"
#include "common/ptype.h"
#include "common/selector.h"
#include "common/tenant.h"

#include "querier/v1/querier.pb-c.h"

#define HEATMAP_ROWS 20

/* One profile of the union, with its group. */
struct hm_prof {
	struct qry_pref ref;    /* first: qry_pref_cmp sorts these */
	int64_t total;
	uint32_t group;
};

struct hm_group {
	Types__V1__LabelPair **labels;   /* borrowed from an answer */
	size_t nlabels;
	uint64_t count;
	uint32_t out;                      /* output index, or UINT32_MAX */
};

/* Within a group: by slot, then row (precomputed into t / total order). */
struct hm_cell {
	int64_t slot;
	uint32_t row;
	const struct hm_prof *p;
};

static int
hm_cell_cmp(const void *a, const void *b)
{
	const struct hm_cell *x = a, *y = b;
	int c;

	if ((c = SM_CMP(x->slot, y->slot)) != 0 ||
	    (c = SM_CMP(x->row, y->row)) != 0)
		return (c);
	/* The exemplar first: largest total, earliest, smallest id. */
	if ((c = SM_CMP(y->p->total, x->p->total)) != 0 ||
	    (c = SM_CMP(x->p->ref.t, y->p->ref.t)) != 0)
		return (c);
	return (memcmp(x->p->ref.id, y->p->ref.id, 16));
}

static char *
uuid_str(struct sm_arena *a, const uint8_t *id)
{
	char *s = sm_arena_alloc(a, 37);

	if (s != NULL)
		sm_uuid_format(id, s);
	return (s);
}

static Types__V1__LabelPair **
copy_labels(struct sm_arena *a, Types__V1__LabelPair *const *l, size_t n)
{
	Types__V1__LabelPair **out = sm_arena_alloc(a, (n + 1) *
	    sizeof(*out));

	if (out == NULL)
		return (NULL);
	for (size_t i = 0; i < n; i++) {
		Types__V1__LabelPair *lp = sm_arena_alloc(a, sizeof(*lp));

		if (lp == NULL)
			return (NULL);
		types__v1__label_pair__init(lp);
		lp->name = sm_arena_strndup(a, l[i]->name, strlen(l[i]->name));
		lp->value = sm_arena_strndup(a, l[i]->value,
		    strlen(l[i]->value));
		if (lp->name == NULL || lp->value == NULL)
			return (NULL);
		out[i] = lp;
	}
	return (out);
}

/* Build one HeatmapSeries from the profiles p[0..n) of group g. */
static Querier__V1__HeatmapSeries *
hm_series(struct sm_arena *a, const struct hm_group *g, struct hm_prof *const *p,
    uint32_t n, int64_t step_ms, bool exemplars)
{
	Querier__V1__HeatmapSeries *hs = sm_arena_alloc(a, sizeof(*hs));
	struct hm_cell *c = sm_malloc((size_t)SM_MAX(n, 1) * sizeof(*c));
	int64_t mn = INT64_MAX, mx = INT64_MIN;
	double width;
	uint32_t rows, nslots = 0;

	if (hs == NULL || c == NULL)
		goto fail;
	querier__v1__heatmap_series__init(hs);
	if ((hs->labels = copy_labels(a, g->labels, g->nlabels)) == NULL)
		goto fail;
	hs->n_labels = g->nlabels;
	for (uint32_t i = 0; i < n; i++) {
		mn = SM_MIN(mn, p[i]->total);
		mx = SM_MAX(mx, p[i]->total);
	}
	rows = mx > mn ? HEATMAP_ROWS : 1;
	width = mx > mn ? ((double)mx - (double)mn) / HEATMAP_ROWS : 1;
	for (uint32_t i = 0; i < n; i++) {
		int64_t t = p[i]->ref.t, s = t / step_ms * step_ms;
		double r;

		if (s > t)
			s -= step_ms;    /* floor for negative times */
		r = floor(((double)p[i]->total - (double)mn) / width);
		c[i].slot = s;
		c[i].row = r < 0 ? 0 : r >= rows ? rows - 1 : (uint32_t)r;
		c[i].p = p[i];
	}
	qsort(c, n, sizeof(*c), hm_cell_cmp);
	for (uint32_t i = 0; i < n; i++)
		nslots += i == 0 || c[i].slot != c[i - 1].slot;
	if ((hs->slots = sm_arena_alloc(a, ((size_t)nslots + 1) *
	    sizeof(*hs->slots))) == NULL)
		goto fail;
	for (uint32_t i = 0; i < n;) {
		Querier__V1__HeatmapSlot *sl = sm_arena_alloc(a, sizeof(*sl));
		uint32_t j = i, ncell = 0;

		while (j < n && c[j].slot == c[i].slot) {
			ncell += j == i || c[j].row != c[j - 1].row;
			j++;
		}
		if (sl == NULL)
			goto fail;
		querier__v1__heatmap_slot__init(sl);
		sl->timestamp = c[i].slot;
		sl->y_min = sm_arena_alloc(a, (ncell + 1) * sizeof(double));
		sl->counts = sm_arena_alloc(a, (ncell + 1) * sizeof(int32_t));
		if (exemplars)
			sl->exemplars = sm_arena_alloc(a, (ncell + 1) *
			    sizeof(*sl->exemplars));
		if (sl->y_min == NULL || sl->counts == NULL || (exemplars &&
		    sl->exemplars == NULL))
			goto fail;
		for (uint32_t k = i; k < j; k++) {
			if (k > i && c[k].row == c[k - 1].row) {
				sl->counts[sl->n_counts - 1]++;
				continue;
			}
			sl->y_min[sl->n_y_min++] = (double)mn +
			    c[k].row * width;
			sl->counts[sl->n_counts++] = 1;
			if (exemplars) {
				Types__V1__Exemplar *e = sm_arena_alloc(a,
				    sizeof(*e));

				if (e == NULL)
					goto fail;
				types__v1__exemplar__init(e);
				e->timestamp = c[k].p->ref.t;
				e->value = c[k].p->total;
				if ((e->profile_id = uuid_str(a, c[k].p->ref.id)) ==
				    NULL || (e->labels = copy_labels(a,
				    g->labels, g->nlabels)) == NULL)
					goto fail;
				e->n_labels = g->nlabels;
				sl->exemplars[sl->n_exemplars++] = e;
			}
		}
		hs->slots[hs->n_slots++] = sl;
		i = j;
	}
	sm_free(c);
	return (hs);
fail:
	sm_free(c);
	return (NULL);
}

static int
grp_order_cmp(const void *a, const void *b, void *arg)
{
	const struct hm_group *g = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (qry_labels_cmp(g[x].labels, g[x].nlabels, g[y].labels,
	    g[y].nlabels));
}

static int
grp_count_cmp(const void *a, const void *b, void *arg)
{
	const struct hm_group *g = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	if (g[x].count != g[y].count)
		return (SM_CMP(g[y].count, g[x].count));
	return (qry_labels_cmp(g[x].labels, g[x].nlabels, g[y].labels,
	    g[y].nlabels));
}

/* The request's checks; its step (ms) and whether it wants exemplars. */
static int
hm_check(const Querier__V1__SelectHeatmapRequest *in, int64_t *step_ms,
    bool *exemplars, struct sm_err *err)
{
	if (in->query_type ==
	    QUERIER__V1__HEATMAP_QUERY_TYPE__HEATMAP_QUERY_TYPE_SPAN ||
	    in->exemplar_type == TYPES__V1__EXEMPLAR_TYPE__EXEMPLAR_TYPE_SPAN) {
		return (sm_err_set(err, SM_EUNSUPPORTED, "span heatmaps are "
		    "not served; use query_type INDIVIDUAL"));
	}
	if ((int)in->query_type < 0 || in->query_type >
	    QUERIER__V1__HEATMAP_QUERY_TYPE__HEATMAP_QUERY_TYPE_SPAN) {
		return (sm_err_set(err, SM_EINVAL, "unknown query_type %d",
		    (int)in->query_type));
	}
	if (!(in->step > 0) || !isfinite(in->step) || in->step > 1e9) {
		return (sm_err_set(err, SM_EINVAL, "step must be a positive "
		    "number of seconds"));
	}
	if (in->limit < 0) {
		return (sm_err_set(err, SM_EINVAL, "limit must not be "
		    "negative"));
	}
	*step_ms = SM_MAX((int64_t)llround(in->step * 1000), 1);
	*exemplars = in->exemplar_type ==
	    TYPES__V1__EXEMPLAR_TYPE__EXEMPLAR_TYPE_INDIVIDUAL;
	return (0);
}

/*
 * The union of the answering ingesters' profiles (*ps, *np; replicas'
 * copies still in) and their series' label sets (*gs, *ng: one group per
 * distinct set).  The arrays are the caller's to free.
 */
static int
hm_collect(const struct qry_fan *f, struct hm_prof **ps, size_t *np,
    struct hm_group **gs, size_t *ng, struct sm_err *err)
{
	const Smolder__V1__SeriesGroup *last_sg = NULL;
	size_t cap = 0, last_g = 0;

	for (uint32_t i = 0; i < f->n; i++) {
		const struct qry_call *c = &f->calls[i];
		const Smolder__V1__ProfilesResponse *r;
		size_t gi = 0;

		if (c->rv != 0)
			continue;
		if (c->resp->result_case !=
		    SMOLDER__V1__RESPONSE__RESULT_PROFILES) {
			return (sm_err_set(err, SM_EPROTO, "ingester answered "
			    "without a profiles result"));
		}
		r = c->resp->profiles;
		last_sg = NULL;
		if (*np + r->n_profiles > cap) {
			size_t ncap = SM_MAX(cap * 2, *np + r->n_profiles);
			struct hm_prof *nv = sm_reallocarray(*ps, ncap,
			    sizeof(*nv));

			if (nv == NULL)
				return (sm_err_set(err, SM_ENOMEM, "oom"));
			*ps = nv;
			cap = ncap;
		}
		for (size_t k = 0; k < r->n_profiles; k++) {
			const Smolder__V1__ProfileRef *x = r->profiles[k];
			const Smolder__V1__SeriesGroup *sg = NULL;
			size_t g;

			if (x->id.len != 16) {
				return (sm_err_set(err, SM_EPROTO, "ingester "
				    "sent a profile id of %zu bytes", x->id.len));
			}
			/* Groups and profiles are both sorted by fp. */
			while (gi < r->n_groups && r->groups[gi]->fp < x->fp)
				gi++;
			if (gi < r->n_groups && r->groups[gi]->fp == x->fp)
				sg = r->groups[gi];
			if (sg == NULL) {
				return (sm_err_set(err, SM_EPROTO, "ingester "
				    "sent a profile without its series' labels"));
			}
			/* Profiles come by fp: look a group up once per fp. */
			if (sg == last_sg) {
				g = last_g;
			} else {
				for (g = 0; g < *ng; g++) {
					if (qry_labels_cmp((*gs)[g].labels,
					    (*gs)[g].nlabels, sg->labels,
					    sg->n_labels) == 0)
						break;
				}
			}
			if (g == *ng) {
				struct hm_group *nv = sm_reallocarray(*gs,
				    *ng + 1, sizeof(*nv));

				if (nv == NULL)
					return (sm_err_set(err, SM_ENOMEM,
					    "oom"));
				*gs = nv;
				(*gs)[(*ng)++] = (struct hm_group){ sg->labels,
				    sg->n_labels, 0, UINT32_MAX };
			}
			last_sg = sg;
			last_g = g;
			(*ps)[(*np)++] = (struct hm_prof){ { x->fp,
			    x->time_ms, x->id.data }, x->total, (uint32_t)g };
		}
	}
	return (0);
}

int
qry_select_heatmap(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sm_err *err)
{
	struct querier *q = arg;
	const Querier__V1__SelectHeatmapRequest *in = (const void *)req;
	Querier__V1__SelectHeatmapResponse *out;
	Smolder__V1__Request rq = SMOLDER__V1__REQUEST__INIT;
	Smolder__V1__ProfilesRequest pr = SMOLDER__V1__PROFILES_REQUEST__INIT;
	Smolder__V1__Select sel;
	struct hm_prof *ps = NULL, **byg = NULL;
	struct hm_group *gs = NULL;
	uint32_t *order = NULL, *start = NULL;
	size_t np = 0, ng = 0, w = 0;
	struct qry_fan f;
	struct sm_selector s;
	const char *tenant;
	int64_t step_ms = 1, start_ms, end_ms;
	bool exemplars = false, empty;
	int rv;

	qry_fan_init(&f);
	sm_selector_init(&s);
	if ((rv = qry_call_range(q, call, in->start, in->end, &tenant,
	    &start_ms, &end_ms, &empty, err)) != 0)
		goto out;
	if ((rv = hm_check(in, &step_ms, &exemplars, err)) != 0)
		goto out;
	if ((rv = qry_build_selector(in->profile_typeid, in->label_selector,
	    &s, err)) != 0)
		goto out;
	/* Individual profiles are selected by their exact time in
	 * [start, end). */
	if (qry_select_pb(&s, tenant, start_ms, end_ms, call->arena,
	    &sel) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	pr.select = &sel;
	pr.group_by = in->group_by;
	pr.n_group_by = in->n_group_by;
	rq.method_case = SMOLDER__V1__REQUEST__METHOD_PROFILES;
	rq.profiles = &pr;
	/* Before max_query_lookback: no ingester is asked (f.n stays 0),
	 * the answer is the one for no matching profile. */
	if (!empty && (rv = qry_fanout_same(q, &f, &rq, "profiles",
	    err)) != 0)
		goto out;
	/* Union of the answers; groups by label set. */
	if ((rv = hm_collect(&f, &ps, &np, &gs, &ng, err)) != 0)
		goto out;
	if (np > 0)    /* qsort(NULL, 0) is undefined */
		qsort(ps, np, sizeof(*ps), qry_pref_cmp);
	for (size_t i = 0; i < np; i++) {
		if (w > 0 && qry_pref_cmp(&ps[w - 1].ref, &ps[i].ref) == 0)
			continue;    /* a replica's copy */
		ps[w++] = ps[i];
		gs[ps[i].group].count++;
	}
	np = w;
	/* Order the groups; apply the limit. */
	order = sm_malloc((ng + 1) * sizeof(*order));
	start = sm_calloc(ng + 2, sizeof(*start));
	byg = sm_malloc((np + 1) * sizeof(*byg));
	if (order == NULL || start == NULL || byg == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t g = 0; g < ng; g++)
		order[g] = (uint32_t)g;
	if (in->limit > 0 && (size_t)in->limit < ng) {
		qsort_r(order, ng, sizeof(*order), grp_count_cmp, gs);
		ng = (size_t)in->limit;
	}
	qsort_r(order, ng, sizeof(*order), grp_order_cmp, gs);
	for (size_t k = 0; k < ng; k++)
		gs[order[k]].out = (uint32_t)k;
	for (size_t i = 0; i < np; i++) {
		uint32_t o = gs[ps[i].group].out;

		if (o != UINT32_MAX)
			start[o + 1]++;
	}
	for (size_t k = 0; k < ng; k++)
		start[k + 1] += start[k];
	{
		uint32_t *fill = sm_calloc(ng + 1, sizeof(*fill));

		if (fill == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		for (size_t i = 0; i < np; i++) {
			uint32_t o = gs[ps[i].group].out;

			if (o != UINT32_MAX)
				byg[start[o] + fill[o]++] = &ps[i];
		}
		sm_free(fill);
	}
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	querier__v1__select_heatmap_response__init(out);
	if ((out->series = sm_arena_alloc(call->arena, (ng + 1) *
	    sizeof(*out->series))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < ng; k++) {
		Querier__V1__HeatmapSeries *hs = hm_series(call->arena,
		    &gs[order[k]], &byg[start[k]], start[k + 1] - start[k],
		    step_ms, exemplars);

		if (hs == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		out->series[out->n_series++] = hs;
	}
	*resp = &out->base;
	rv = 0;
out:
	sm_free(ps);
	sm_free(gs);
	sm_free(order);
	sm_free(start);
	sm_free(byg);
	qry_fan_close(&f, true);
	sm_selector_fini(&s);
	return (rv);
}

/* --- SelectSeries exemplars ------------------------------------------------ */

/* "name=value\x1f..." of a label set sorted by name, in `a`. */
static char *
labels_key(struct sm_arena *a, Types__V1__LabelPair *const *l, size_t n)
{
	struct sm_buf b = SM_BUF_INIT;
	const Types__V1__LabelPair **v;
	char *out = NULL;

	if ((v = sm_malloc((n + 1) * sizeof(*v))) == NULL)
		return (NULL);
	for (size_t i = 0; i < n; i++) {
		size_t k = i;

		while (k > 0 && strcmp(v[k - 1]->name, l[i]->name) > 0) {
			v[k] = v[k - 1];
			k--;
		}
		v[k] = l[i];
	}
	for (size_t i = 0; i < n; i++) {
		sm_buf_append(&b, v[i]->name, strlen(v[i]->name));
		sm_buf_append(&b, "=", 1);
		sm_buf_append(&b, v[i]->value, strlen(v[i]->value));
		sm_buf_append(&b, "\x1f", 1);
	}
	if (sm_buf_error(&b) == 0)
		out = sm_arena_strndup(a, b.b != NULL ? b.b : "", b.len);
	sm_buf_fini(&b);
	sm_free(v);
	return (out);
}

/* The labels_key of every series of `out`, in a sm_malloc'd *keysp. */
static int
ex_series_keys(struct sm_arena *a,
    const struct Querier__V1__SelectSeriesResponse *out, char ***keysp,
    struct sm_err *err)
{
	char **keys;

	if ((*keysp = keys = sm_calloc(out->n_series, sizeof(*keys))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (size_t i = 0; i < out->n_series; i++) {
		if ((keys[i] = labels_key(a, out->series[i]->labels,
		    out->series[i]->n_labels)) == NULL)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	return (0);
}

/* The point of `s` at timestamp ts (points are sorted by it), or NULL. */
static Types__V1__Point *
ex_point(const Types__V1__Series *s, int64_t ts)
{
	size_t lo;

	SM_LOWER_BOUND(lo, s->n_points, mid, s->points[mid]->timestamp < ts);
	if (lo == s->n_points || s->points[lo]->timestamp != ts)
		return (NULL);
	return (s->points[lo]);
}

/*
 * Offer profile x of series s as the exemplar of its point pt: one per
 * point, its largest profile (then the earliest, then the smallest id);
 * replicas repeat the same profile, which changes nothing.
 */
static int
ex_offer(struct sm_arena *a, Types__V1__Series *s, Types__V1__Point *pt,
    const Smolder__V1__ProfileRef *x, struct sm_err *err)
{
	Types__V1__Exemplar *e;

	if (pt->n_exemplars == 1) {
		Types__V1__Exemplar *o = pt->exemplars[0];
		char *id = uuid_str(a, x->id.data);

		if (id == NULL)
			return (sm_err_set(err, SM_ENOMEM, "oom"));
		if (x->total < o->value || (x->total == o->value &&
		    (x->time_ms > o->timestamp ||
		    (x->time_ms == o->timestamp &&
		    strcmp(id, o->profile_id) >= 0))))
			return (0);
		o->timestamp = x->time_ms;
		o->value = x->total;
		o->profile_id = id;
		return (0);
	}
	if ((e = sm_arena_alloc(a, sizeof(*e))) == NULL ||
	    (pt->exemplars = sm_arena_alloc(a, sizeof(*pt->exemplars))) ==
	    NULL)
		return (sm_err_set(err, SM_ENOMEM, "oom"));
	types__v1__exemplar__init(e);
	e->timestamp = x->time_ms;
	e->value = x->total;
	e->labels = s->labels;
	e->n_labels = s->n_labels;
	if ((e->profile_id = uuid_str(a, x->id.data)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "oom"));
	pt->exemplars[0] = e;
	pt->n_exemplars = 1;
	return (0);
}

/*
 * Offer every profile of one ingester's answer r to the points of `out`
 * (series keys[0..out->n_series)) it falls in; a profile of a group the
 * limit cut, or of a step with no point, is passed over.
 */
static int
ex_answer(struct sm_arena *a, const Smolder__V1__ProfilesResponse *r,
    int64_t step_ms, char *const *keys,
    struct Querier__V1__SelectSeriesResponse *out, struct sm_err *err)
{
	Types__V1__Series *last_s = NULL;
	size_t last_gi = SIZE_MAX, gi = 0;
	int rv;

	for (size_t k = 0; k < r->n_profiles; k++) {
		const Smolder__V1__ProfileRef *x = r->profiles[k];
		Types__V1__Series *s = NULL;
		Types__V1__Point *pt;
		char *key;

		while (gi < r->n_groups && r->groups[gi]->fp < x->fp)
			gi++;
		if (gi == r->n_groups || r->groups[gi]->fp != x->fp ||
		    x->id.len != 16)
			return (sm_err_set(err, SM_EPROTO, "ingester sent a "
			    "profile without its series' labels"));
		if (gi == last_gi) {
			s = last_s;
		} else {
			if ((key = labels_key(a, r->groups[gi]->labels,
			    r->groups[gi]->n_labels)) == NULL)
				return (sm_err_set(err, SM_ENOMEM, "oom"));
			for (size_t j = 0; j < out->n_series && s == NULL; j++)
				if (strcmp(keys[j], key) == 0)
					s = out->series[j];
			last_gi = gi;
			last_s = s;
		}
		if (s == NULL)
			continue;   /* a group cut by the limit */
		if ((pt = ex_point(s, sm_floor_to(x->bucket_t,
		    step_ms))) == NULL)
			continue;
		if ((rv = ex_offer(a, s, pt, x, err)) != 0)
			return (rv);
	}
	return (0);
}

int
qry_series_exemplars(struct querier *q, const Smolder__V1__SeriesRequest *sr,
    int exemplar_type, struct Querier__V1__SelectSeriesResponse *out,
    struct sm_arena *a, struct sm_err *err)
{
	Smolder__V1__Request rq = SMOLDER__V1__REQUEST__INIT;
	Smolder__V1__ProfilesRequest pr = SMOLDER__V1__PROFILES_REQUEST__INIT;
	Smolder__V1__Select lsel;
	struct qry_fan f;
	char **keys = NULL;
	bool empty;
	int rv = 0;

	if (exemplar_type == TYPES__V1__EXEMPLAR_TYPE__EXEMPLAR_TYPE_SPAN)
		return (sm_err_set(err, SM_EUNSUPPORTED, "span exemplars are "
		    "not served; use EXEMPLAR_TYPE_INDIVIDUAL"));
	if (exemplar_type != TYPES__V1__EXEMPLAR_TYPE__EXEMPLAR_TYPE_INDIVIDUAL ||
	    out->n_series == 0)
		return (0);
	qry_fan_init(&f);
	/* The series' own range limits (they were answered under them). */
	lsel = *sr->select;
	if ((rv = qry_limit_range(q, lsel.tenant, &lsel.start_ms,
	    &lsel.end_ms, NULL, &empty, err)) != 0 || empty)
		return (rv);
	pr.select = &lsel;
	pr.group_by = sr->group_by;
	pr.n_group_by = sr->n_group_by;
	rq.method_case = SMOLDER__V1__REQUEST__METHOD_PROFILES;
	rq.profiles = &pr;
	if ((rv = qry_fanout_same(q, &f, &rq, "profiles", err)) != 0 ||
	    (rv = ex_series_keys(a, out, &keys, err)) != 0)
		goto out;
	for (uint32_t i = 0; i < f.n; i++) {
		const struct qry_call *c = &f.calls[i];

		if (c->rv != 0)
			continue;
		if (c->resp->result_case !=
		    SMOLDER__V1__RESPONSE__RESULT_PROFILES) {
			rv = sm_err_set(err, SM_EPROTO, "ingester answered "
			    "without a profiles result");
			goto out;
		}
		if ((rv = ex_answer(a, c->resp->profiles, sr->step_ms, keys,
		    out, err)) != 0)
			goto out;
	}
out:
	sm_free(keys);
	qry_fan_close(&f, true);
	return (rv);
}
